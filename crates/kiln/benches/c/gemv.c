/* The ceiling of a batch-1 to batch-4 `Linear` under kiln's semantics, for the
 * step that will build it (docs/performance.md, "A batch of 1 to 4 through a
 * `Linear`"): `y = x @ w.T`, `w` torch's `[n, k]` weight, each element's sum
 * in `k` order from +0.0 with fused multiply-adds, as kiln's matmul is
 * defined (docs/semantics.md). Vector lanes must span `w`'s rows, so the
 * kernel reads 8 rows × 8 steps of `w`, transposes them in registers (24
 * AVX2 shuffles), and folds them into the sums of 16 rows a tile. It checks
 * its results against the scalar loop bit for bit.
 *
 *   cc -O3 -mavx2 -mfma -o gemv crates/kiln/benches/c/gemv.c
 *   ./gemv N K M      -> µs per call of `[M, K] @ [N, K].T`, M of 1 to 4
 */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static inline void transpose8(__m256 r[8]) {
    __m256 t[8], s[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        s[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        s[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        s[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        s[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x31);
    }
}

/* Rows j .. j + 16 of `w` against the M rows of `x`. */
static inline __attribute__((always_inline)) void tile(const float *w, const float *x, float *y,
                                                       long n, long k, long j, const int m) {
    __m256 acc[4][2];
    for (int i = 0; i < 4; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (long p = 0; p < k; p += 8)
        for (int h = 0; h < 2; h++) {
            __m256 r[8];
            for (int q = 0; q < 8; q++) r[q] = _mm256_loadu_ps(w + (j + 8 * h + q) * k + p);
            transpose8(r);
            for (int t = 0; t < 8; t++)
                for (int i = 0; i < m; i++)
                    acc[i][h] = _mm256_fmadd_ps(_mm256_broadcast_ss(x + i * k + p + t), r[t], acc[i][h]);
        }
    for (int i = 0; i < m; i++) {
        _mm256_storeu_ps(y + i * n + j, acc[i][0]);
        _mm256_storeu_ps(y + i * n + j + 8, acc[i][1]);
    }
}

/* `n` a multiple of 16, `k` of 8: the ceiling's shapes. */
__attribute__((noinline)) static void gemv(const float *w, const float *x, float *y, long n, long k,
                                           int m) {
    for (long j = 0; j < n; j += 16) switch (m) {
        case 1: tile(w, x, y, n, k, j, 1); break;
        case 2: tile(w, x, y, n, k, j, 2); break;
        case 3: tile(w, x, y, n, k, j, 3); break;
        default: tile(w, x, y, n, k, j, 4); break;
        }
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: gemv N K M (N a multiple of 16, K of 8, M of 1 to 4)\n");
        return 2;
    }
    long n = atol(argv[1]), k = atol(argv[2]);
    int m = atoi(argv[3]);
    if (n <= 0 || k <= 0 || n % 16 || k % 8 || m < 1 || m > 4) {
        fprintf(stderr, "gemv: N a multiple of 16, K of 8, M of 1 to 4\n");
        return 2;
    }
    float *w = aligned_alloc(64, n * k * 4), *x = aligned_alloc(64, 4 * k * 4),
          *y = aligned_alloc(64, 4 * n * 4);
    for (long i = 0; i < n * k; i++) w[i] = (float)(i % 97) * 1e-3f - 0.05f;
    for (long i = 0; i < 4 * k; i++) x[i] = (float)(i % 13) * 1e-2f - 0.06f;
    gemv(w, x, y, n, k, m);
    long wrong = 0;
    for (int i = 0; i < m; i++)
        for (long j = 0; j < n; j++) {
            float s = 0.0f;
            for (long p = 0; p < k; p++) s = __builtin_fmaf(x[i * k + p], w[j * k + p], s);
            wrong += s != y[i * n + j];
        }
    double best = 1e9;
    for (int r = 0; r < 7; r++) {
        double s = now();
        for (int q = 0; q < 50; q++) gemv(w, x, y, n, k, m);
        double t = (now() - s) / 50;
        best = t < best ? t : best;
    }
    printf("[%d, %ld] @ [%ld, %ld].T: %.1f us (%ld elements differ from the scalar loop)\n", m, k, n,
           k, best * 1e6, wrong);
    return wrong != 0;
}
