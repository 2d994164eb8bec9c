"""kiln alone on 1 and 2 threads: `x @ w.T` (`wt`, `w` `[n, k]`, torch's
`Linear` weight) or `x @ b` (`b`, `[k, n]`), f32, from `.kiln` graphs
(`kiln.compile`, the code cache off) on NumPy's arrays with `out=`.

  python crates/python/benchmarks/matmul_threads.py [llvm|cranelift|vm] [wt|b] MxKxN[,MxKxN...]

The median of 9 rounds of 30 calls, in µs, each round alternating 1 and 2
threads. No peer runs in the same process: torch's OpenMP threads spin for
a while after each of its calls, on the cores kiln's second thread needs.
"""

from __future__ import annotations

import os
import pathlib
import statistics
import sys
import tempfile
import time

os.environ.setdefault("KILN_CACHE", "off")

import numpy as np  # noqa: E402

import kiln  # noqa: E402


def main() -> None:
    if len(sys.argv) != 4 or sys.argv[2] not in ("wt", "b"):
        sys.exit(__doc__)
    tier, form = sys.argv[1], sys.argv[2]
    shapes = [tuple(map(int, s.split("x"))) for s in sys.argv[3].split(",")]
    rng = np.random.default_rng(0)
    programs = []
    with tempfile.TemporaryDirectory() as tmp:
        for m, k, n in shapes:
            if form == "wt":
                src = (
                    f'graph "mm"\nv0: f32[{m}, {k}] = input "a"\nv1: f32[{n}, {k}] = input "w"\n'
                    f'v2: f32[{k}, {n}] = transpose v1 [1, 0]\n'
                    f'v3: f32[{m}, {n}] = matmul v0, v2\noutput "y" = v3\n'
                )
                w = rng.standard_normal((n, k), dtype=np.float32)
                want_b = w.T
            else:
                src = (
                    f'graph "mm"\nv0: f32[{m}, {k}] = input "a"\nv1: f32[{k}, {n}] = input "b"\n'
                    f'v2: f32[{m}, {n}] = matmul v0, v1\noutput "y" = v2\n'
                )
                w = rng.standard_normal((k, n), dtype=np.float32)
                want_b = w
            path = pathlib.Path(tmp, f"mm_{m}_{k}_{n}.kiln")
            path.write_text(src)
            f = kiln.compile(path, tier=tier)
            a = rng.standard_normal((m, k), dtype=np.float32)
            out = np.empty((m, n), np.float32)
            want = a.astype(np.float64) @ want_b.astype(np.float64)
            np.testing.assert_allclose(f(a, w), want, rtol=1e-4, atol=1e-3)
            programs.append(((m, k, n), f, a, w, out))
    times: dict = {}
    for _ in range(9):
        for shape, f, a, w, out in programs:
            for threads in (1, 2):
                kiln.set_num_threads(threads)
                f(a, w, out=out)
                t = time.perf_counter()
                for _ in range(30):
                    f(a, w, out=out)
                times.setdefault((shape, threads), []).append((time.perf_counter() - t) / 30 * 1e6)
    for (m, k, n), *_ in programs:
        what = f"[{m}, {k}] @ w[{n}, {k}].T" if form == "wt" else f"[{m}, {k}] @ [{k}, {n}]"
        one, two = (statistics.median(times[((m, k, n), t)]) for t in (1, 2))
        print(f"{what}  1 thread {one:8.1f}  2 threads {two:8.1f}")


if __name__ == "__main__":
    main()
