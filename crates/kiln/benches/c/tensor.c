/* C references for `cargo bench -p kiln --features llvm --bench tensor`.
 * Built with `cc -O3` (no -ffast-math, no -march: IEEE-exact like kiln) for the
 * naive loops, and with `-O3 -march=native` for the peak measurement.
 * Usage: tensor matmul N REPEATS        -> ns per call of an N×N×N f32 matmul
 *        tensor mlp BATCH REPEATS      -> ns per call of a 784→256→10 MLP forward
 *        tensor peak                   -> GFLOP/s of independent f32 FMAs
 *                                         (build with -O3 -march=native -ffp-contract=fast -DPEAK),
 *                                         or of multiplies and adds (-ffp-contract=off) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
/* The naive triple loop, each sum in k order from +0.0 (kiln's semantics). */
__attribute__((noinline)) static void matmul(const float *restrict a, const float *restrict b,
                                             float *restrict c, long m, long k, long n) {
    for (long i = 0; i < m; i++)
        for (long j = 0; j < n; j++) {
            float acc = 0.0f;
            for (long p = 0; p < k; p++) acc = acc + a[i * k + p] * b[p * n + j];
            c[i * n + j] = acc;
        }
}
__attribute__((noinline)) static void mlp(const float *x, const float *w1, const float *b1,
                                          const float *w2, const float *b2, float *h, float *y,
                                          long batch) {
    matmul(x, w1, h, batch, 784, 256);
    for (long i = 0; i < batch * 256; i++) {
        float v = h[i] + b1[i % 256];
        h[i] = v > 0.0f ? v : 0.0f;
    }
    matmul(h, w2, y, batch, 256, 10);
    for (long i = 0; i < batch * 10; i++) y[i] = y[i] + b2[i % 10];
}
static float *filled(long n) {
    float *p = malloc(n * sizeof(float));
    for (long i = 0; i < n; i++) p[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    return p;
}
#if defined(__GNUC__) && defined(PEAK)
/* Twelve independent FMA (or multiply-add) chains of the widest vector
 * -march=native has. */
#ifdef __AVX512F__
#define LANES 16
#else
#define LANES 8
#endif
typedef float vf __attribute__((vector_size(LANES * 4)));
__attribute__((noinline)) static double peak(long iters) {
    vf a0 = (vf){0} + 1.0f, a1 = (vf){0} + 1.1f, a2 = (vf){0} + 1.2f, a3 = (vf){0} + 1.3f;
    vf a4 = (vf){0} + 1.4f, a5 = (vf){0} + 1.5f, a6 = (vf){0} + 1.6f, a7 = (vf){0} + 1.7f;
    vf a8 = (vf){0} + 1.8f, a9 = (vf){0} + 1.9f, a10 = (vf){0} + 2.0f, a11 = (vf){0} + 2.1f;
    vf x = (vf){0} + 0.999999f, y = (vf){0} + 1e-7f;
    double t0 = now();
    for (long i = 0; i < iters; i++) {
        __asm__("" : "+x"(x));
        a0 = a0 * x + y; a1 = a1 * x + y; a2 = a2 * x + y; a3 = a3 * x + y;
        a4 = a4 * x + y; a5 = a5 * x + y; a6 = a6 * x + y; a7 = a7 * x + y;
        a8 = a8 * x + y; a9 = a9 * x + y; a10 = a10 * x + y; a11 = a11 * x + y;
    }
    double t = now() - t0;
    vf s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;
    if (s[0] == 12345.0f) printf("!");
    return (double)iters * 12 * LANES * 2 / t / 1e9;
}
#endif
int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "peak") == 0) {
#if defined(__GNUC__) && defined(PEAK)
        double best = 0;
        for (int r = 0; r < 5; r++) {
            double g = peak(50000000);
            if (g > best) best = g;
        }
        printf("%.1f\n", best);
        return 0;
#else
        return 2;
#endif
    }
    if (argc < 4) return 2;
    long n = atol(argv[2]), reps = atol(argv[3]);
    double *ts = malloc(reps * sizeof(double));
    if (strcmp(argv[1], "matmul") == 0) {
        float *a = filled(n * n), *b = filled(n * n), *c = malloc(n * n * sizeof(float));
        for (long r = 0; r < reps; r++) {
            double t0 = now();
            matmul(a, b, c, n, n, n);
            ts[r] = now() - t0;
        }
    } else {
        float *x = filled(n * 784), *w1 = filled(784 * 256), *b1 = filled(256);
        float *w2 = filled(256 * 10), *b2 = filled(10);
        float *h = malloc(n * 256 * sizeof(float)), *y = malloc(n * 10 * sizeof(float));
        for (long r = 0; r < reps; r++) {
            double t0 = now();
            mlp(x, w1, b1, w2, b2, h, y, n);
            ts[r] = now() - t0;
        }
    }
    qsort(ts, reps, sizeof(double), cmp);
    printf("%.0f\n", ts[reps / 2] * 1e9);
    return 0;
}
