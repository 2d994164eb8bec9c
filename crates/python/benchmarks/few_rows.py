"""1 to 4 rows by a large dense `b` (`x @ b`, `b` `[k, n]`: Hugging Face
GPT-2's `Conv1D` at one token): kiln against torch.mm, one thread.

  python crates/python/benchmarks/few_rows.py [llvm|cranelift|vm]

Each product is compiled from a `.kiln` graph (`kiln.compile`, the code
cache off) and called on NumPy's arrays with `out=`; torch.mm(out=) runs on
the same memory. kiln's result is checked against NumPy's in float64. The
median of 11 interleaved rounds of 20 calls is printed in µs (the best
after it).
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

SHAPES = [(m, k, n) for (k, n) in ((768, 3072), (3072, 768), (768, 2304), (768, 768)) for m in (1, 4)]


def main() -> None:
    tier = sys.argv[1] if len(sys.argv) > 1 else "llvm"
    kiln.set_num_threads(1)
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for m, k, n in SHAPES:
            src = pathlib.Path(tmp, f"mm_{m}_{k}_{n}.kiln")
            src.write_text(
                f'graph "mm"\nv0: f32[{m}, {k}] = input "a"\nv1: f32[{k}, {n}] = input "b"\n'
                f'v2: f32[{m}, {n}] = matmul v0, v1\noutput "y" = v2\n'
            )
            f = kiln.compile(src, tier=tier)
            a = rng.standard_normal((m, k), dtype=np.float32)
            b = rng.standard_normal((k, n), dtype=np.float32)
            out = np.empty((m, n), np.float32)
            want = a.astype(np.float64) @ b.astype(np.float64)
            np.testing.assert_allclose(f(a, b), want, rtol=1e-4, atol=1e-3)
            ta, tb, tout = map(torch.from_numpy, (a, b, out))
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
        print(f"[{shape[0]}, {shape[1]}] @ [{shape[1]}, {shape[2]}]  {cells}")


if __name__ == "__main__":
    main()
