"""A few rows by a large matrix, kiln against torch.mm:

- `b` (default): `x @ b`, `b` `[k, n]` dense (Hugging Face GPT-2's
  `Conv1D` at one token), 1 and 4 rows;
- `wt`: `x @ w.T`, `w` `[n, k]` dense (a small batch through torch's
  `Linear`), 1 to 16 rows.

  python crates/python/benchmarks/few_rows.py [llvm|cranelift|vm] [b|wt] [ROWS] [THREADS]

ROWS is a comma-separated list (default 1,4 for `b`, 1,4,5,8,12,13,16 for
`wt`), THREADS kiln's and torch's threads (default 1). Each product is
compiled from a `.kiln` graph (`kiln.compile`, the code cache off) and
called on NumPy's arrays with `out=`; torch.mm(out=) runs on the same
memory (`w.T` as a view). kiln's result is checked against NumPy's in
float64. The median of 11 interleaved rounds of 20 calls is printed in µs
(the best after it).
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
import torch  # noqa: E402

import kiln  # noqa: E402

B_SHAPES = ((768, 3072), (3072, 768), (768, 2304), (768, 768))
WT_SHAPES = ((3072, 768), (768, 3072), (784, 256), (768, 768), (768, 2304))


def main() -> None:
    tier = sys.argv[1] if len(sys.argv) > 1 else "llvm"
    form = sys.argv[2] if len(sys.argv) > 2 else "b"
    if form not in ("b", "wt"):
        sys.exit(f"the form is b or wt, not {form!r}")
    rows = sys.argv[3] if len(sys.argv) > 3 else ("1,4" if form == "b" else "1,4,5,8,12,13,16")
    threads = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    kiln.set_num_threads(threads)
    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    shapes = [
        (m, k, n)
        for (k, n) in (B_SHAPES if form == "b" else WT_SHAPES)
        for m in map(int, rows.split(","))
    ]
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for m, k, n in shapes:
            src = pathlib.Path(tmp, f"mm_{m}_{k}_{n}.kiln")
            if form == "b":
                src.write_text(
                    f'graph "mm"\nv0: f32[{m}, {k}] = input "a"\nv1: f32[{k}, {n}] = input "b"\n'
                    f'v2: f32[{m}, {n}] = matmul v0, v1\noutput "y" = v2\n'
                )
            else:
                src.write_text(
                    f'graph "mm"\nv0: f32[{m}, {k}] = input "a"\nv1: f32[{n}, {k}] = input "w"\n'
                    f'v2: f32[{k}, {n}] = transpose v1 [1, 0]\n'
                    f'v3: f32[{m}, {n}] = matmul v0, v2\noutput "y" = v3\n'
                )
            f = kiln.compile(src, tier=tier)
            a = rng.standard_normal((m, k), dtype=np.float32)
            b = rng.standard_normal((k, n) if form == "b" else (n, k), dtype=np.float32)
            out = np.empty((m, n), np.float32)
            want = a.astype(np.float64) @ (b if form == "b" else b.T).astype(np.float64)
            np.testing.assert_allclose(f(a, b), want, rtol=1e-4, atol=1e-3)
            ta, tb, tout = map(torch.from_numpy, (a, b, out))
            if form == "wt":
                tb = tb.T
            runs[(m, k, n)] = [
                ("kiln", lambda f=f, a=a, b=b, out=out: f(a, b, out=out)),
                ("torch", lambda ta=ta, tb=tb, tout=tout: torch.mm(ta, tb, out=tout)),
            ]
    times = {}
    for _ in range(11):
        for shape, peers in runs.items():
            for name, call in peers:
                call()
                t = time.perf_counter()
                for _ in range(20):
                    call()
                times.setdefault((shape, name), []).append((time.perf_counter() - t) / 20 * 1e6)
    for shape in runs:
        cells = "  ".join(
            f"{name} {statistics.median(times[(shape, name)]):7.1f} (best {min(times[(shape, name)]):7.1f})"
            for name in ("kiln", "torch")
        )
        m, k, n = shape
        what = f"[{m}, {k}] @ [{k}, {n}]" if form == "b" else f"[{m}, {k}] @ w[{n}, {k}].T"
        print(f"{what}  {cells}")


if __name__ == "__main__":
    main()
