/* C references for `cargo bench -p kiln --features llvm --bench llvm`: the NNC
 * kernel and the pure-arithmetic column kernel, as plain loops. The bench
 * builds this with `cc -O3` (no -ffast-math, no -march: IEEE-exact, like kiln)
 * and runs it in the same session.
 * Usage: reference nnc|arith N REPEATS -> "ns_per_element" on stdout. */
#include <math.h>
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
__attribute__((noinline)) static void nnc(const double *restrict x, double *restrict out, long n) {
    for (long i = 0; i < n; i++) {
        double a = x[i] * x[i], b = sin(a), c = cos(b), d = c * c, f = d * d;
        out[i] = d + f;
    }
}
__attribute__((noinline)) static void arith(const double *restrict x0, const double *restrict x1,
                                            const double *restrict x2, double *restrict out, long n) {
    for (long i = 0; i < n; i++)
        out[i] = x0[i] * x1[i] + x2[i] * 2.5 - x0[i] / (x1[i] + 1.5) + x2[i] * x0[i];
}
int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "nnc";
    long n = argc > 2 ? atol(argv[2]) : 10000000;
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    double *x0 = malloc(n * sizeof *x0), *x1 = malloc(n * sizeof *x1), *x2 = malloc(n * sizeof *x2);
    double *out = malloc(n * sizeof *out), t[101], sum = 0;
    if (reps > 101) reps = 101;
    for (long i = 0; i < n; i++) {
        x0[i] = i * 1e-6 - 5.0; /* the bench's NNC input */
        x1[i] = i * 1e-3 + 1.0;
        x2[i] = i * 1e-3 - 2.0;
    }
    for (int r = -1; r < reps; r++) {
        double t0 = now();
        if (strcmp(mode, "nnc") == 0) nnc(x0, out, n); else arith(x0, x1, x2, out, n);
        if (r >= 0) t[r] = now() - t0;
    }
    for (long i = 0; i < n; i++) sum += out[i];
    qsort(t, reps, sizeof *t, cmp);
    printf("%.4f %g\n", t[reps / 2] / n * 1e9, sum);
    return 0;
}
