"""Constant lookup sets: kiln's `isin` against NumPy's `np.isin` and pandas'
`Series.isin`, one thread, over 10M rows, with 10, 100 and 10,000 constants.

  python crates/python/benchmarks/isin.py [--rows 10000000] [--sizes 10,100,10000]
      [--dtypes i64,f64] [--chain]

For each dtype and set size: the set is that many distinct values drawn
from a range four times as large, so about a quarter of the rows are in it;
kiln compiles `x in (…)` (the Python subset; VM, Cranelift and LLVM tiers,
the code cache off) and each engine's median of 5 interleaved calls is
printed in milliseconds and nanoseconds per row, with the compile time.
Every engine's result is checked against NumPy's first. `--chain` also
times sets just under and over the eq-chain limit (ISIN_CHAIN, 16) to
show the crossover: 8, 16, 17, 32 and 64 values.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("KILN_NUM_THREADS", "1")
os.environ.setdefault("KILN_CACHE", "0")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

import kiln  # noqa: E402


def timed(f, repeat=5):
    times = []
    out = None
    for _ in range(repeat):
        t = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--sizes", default="10,100,10000")
    ap.add_argument("--dtypes", default="i64,f64")
    ap.add_argument("--chain", action="store_true")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.chain:
        sizes = sorted(set(sizes) | {8, 16, 17, 32, 64})
    rng = np.random.default_rng(0)
    print(f"rows {args.rows:,}, one thread; ms per call (ns per row); compile s")
    for dt in args.dtypes.split(","):
        for size in sizes:
            span = size * 4
            pool = rng.choice(span, size=size, replace=False)
            if dt == "i64":
                x = rng.integers(0, span, args.rows)
                values = [int(v) for v in pool]
            else:
                x = rng.integers(0, span, args.rows) / 4.0
                values = [float(v) / 4.0 for v in pool]
            series = pd.Series(x)
            want = np.isin(x, values)
            rows = {}
            rows["numpy np.isin"] = timed(lambda: np.isin(x, values))
            rows["pandas isin"] = timed(lambda: series.isin(values).to_numpy())
            src = "x in (" + ", ".join(repr(v) for v in values) + ")"
            ty = "i64[n]" if dt == "i64" else "f64[n]"
            compile_s = {}
            for tier in ("vm", "cranelift", "llvm"):
                t = time.perf_counter()
                f = kiln.compile(src, tier=tier, inputs={"x": ty})
                compile_s[tier] = time.perf_counter() - t
                rows[f"kiln {tier}"] = timed(lambda f=f: f(x))
            for name, (secs, got) in rows.items():
                got = np.asarray(got)
                assert np.array_equal(got, want), name
                extra = f"  compile {compile_s[name[5:]]:.3f}" if name.startswith("kiln") else ""
                print(
                    f"{dt} {size:>6} {name:<16} {secs * 1e3:9.1f} ms "
                    f"({secs * 1e9 / args.rows:6.2f} ns/row){extra}"
                )


if __name__ == "__main__":
    main()
