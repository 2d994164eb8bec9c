/* Orders of reading a large dense `b` for one row of `x @ b` under kiln's
 * semantics (each element's sum in `k` order from +0.0, fused multiply-adds;
 * docs/semantics.md): which order a few rows' panels should read `b` in
 * (docs/performance.md, "A few rows by a large dense `b`"). `b` is
 * `[768, 3072]` f32, 9 MiB, its rows 12 KiB apart; OFF puts it that many
 * bytes past a 64-byte boundary (NumPy's arrays are 16-byte aligned). Every
 * order computes the same bits; the program checks them against the first.
 *
 *   cc -O2 -mavx2 -mfma -DOFF=16 -o stream_b crates/kiln/benches/c/stream_b.c
 *   ./stream_b        -> the best of 50 calls of each order, µs
 */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef OFF
#define OFF 0
#endif
#define K 768
#define N 3072

static float *A, *B, *D;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* A 16-column block over all of `k`, block after block (kiln's order before). */
static void column_blocks(void) {
    for (int j = 0; j < N; j += 16) {
        __m256 c0 = _mm256_setzero_ps(), c1 = _mm256_setzero_ps();
        for (int k = 0; k < K; k++) {
            __m256 x = _mm256_broadcast_ss(A + k);
            c0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(B + k * N + j), c0);
            c1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(B + k * N + j + 8), c1);
        }
        _mm256_storeu_ps(D + j, c0);
        _mm256_storeu_ps(D + j + 8, c1);
    }
}

/* Blocks of `kc` steps, each across `span` column blocks, the sums waiting
 * in `D` between blocks (kiln's streamed `b`). */
static void streamed(int kc, int span) {
    for (int j0 = 0; j0 < N; j0 += 16 * span)
        for (int k0 = 0; k0 < K; k0 += kc)
            for (int j = j0; j < j0 + 16 * span; j += 16) {
                __m256 c0 = k0 ? _mm256_loadu_ps(D + j) : _mm256_setzero_ps();
                __m256 c1 = k0 ? _mm256_loadu_ps(D + j + 8) : _mm256_setzero_ps();
                for (int k = k0; k < k0 + kc; k++) {
                    __m256 x = _mm256_broadcast_ss(A + k);
                    c0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(B + k * N + j), c0);
                    c1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(B + k * N + j + 8), c1);
                }
                _mm256_storeu_ps(D + j, c0);
                _mm256_storeu_ps(D + j + 8, c1);
            }
}

/* `k` outer, the whole row inner: BLAS's axpy order. */
static void axpy(void) {
    memset(D, 0, N * sizeof(float));
    for (int k = 0; k < K; k++) {
        __m256 x = _mm256_broadcast_ss(A + k);
        for (int j = 0; j < N; j += 8) {
            __m256 d = _mm256_loadu_ps(D + j);
            _mm256_storeu_ps(D + j, _mm256_fmadd_ps(x, _mm256_loadu_ps(B + k * N + j), d));
        }
    }
}

int main(void) {
    A = aligned_alloc(64, K * sizeof(float));
    B = (float *)((char *)aligned_alloc(64, (size_t)K * N * sizeof(float) + 64) + OFF);
    D = aligned_alloc(64, N * sizeof(float));
    float *want = malloc(N * sizeof(float));
    srand(1);
    for (int i = 0; i < K; i++) A[i] = rand() / (float)RAND_MAX - 0.5f;
    for (long i = 0; i < (long)K * N; i++) B[i] = rand() / (float)RAND_MAX - 0.5f;
    const char *names[] = {
        "a 16-column block over all of k", "blocks of 64 k steps x 16 column blocks",
        "blocks of 16 k steps x 16 column blocks", "blocks of 8 k steps x the whole row",
        "blocks of 16 k steps x the whole row", "k outer, the whole row inner",
    };
    for (int v = 0; v < 6; v++) {
        double best = 1e9;
        for (int r = 0; r < 50; r++) {
            double t = now();
            switch (v) {
            case 0: column_blocks(); break;
            case 1: streamed(64, 16); break;
            case 2: streamed(16, 16); break;
            case 3: streamed(8, N / 16); break;
            case 4: streamed(16, N / 16); break;
            default: axpy(); break;
            }
            t = now() - t;
            if (t < best) best = t;
        }
        if (v == 0) {
            memcpy(want, D, N * sizeof(float));
        } else if (memcmp(want, D, N * sizeof(float)) != 0) {
            printf("%s: different bits\n", names[v]);
            return 1;
        }
        printf("%-42s %7.1f us\n", names[v], best * 1e6);
    }
    return 0;
}
