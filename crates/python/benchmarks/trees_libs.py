"""XGBoost and scikit-learn models through kiln.trees against the library's
own predict, one thread: what kiln's tree compiler gives the users of the
other two importers.

  python crates/python/benchmarks/trees_libs.py [--rows 1,100,100000]

Models, trained here on 20 generated features (the data of trees.py's
`small`): XGBoost 100 trees of depth 5 (`XGBRegressor`), scikit-learn's
`RandomForestRegressor` (100 trees, 31 leaves each) and
`HistGradientBoostingRegressor` (100 iterations, 31 leaves). For each:
kiln's compile time on Cranelift and LLVM (code cache off), then per rows
count the median of 7 interleaved calls, in microseconds and per row.
kiln's results are checked against the library's (bit for bit) first.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

os.environ.setdefault("KILN_NUM_THREADS", "1")
os.environ.setdefault("KILN_CACHE", "0")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import xgboost as xgb  # noqa: E402
from sklearn.ensemble import HistGradientBoostingRegressor, RandomForestRegressor  # noqa: E402

import kiln  # noqa: E402


def data(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 20))
    y = x[:, 0] * 2 + np.sin(x[:, 1] * 3) + x[:, 2] * x[:, 3]
    return x, y


def models():
    x, y = data(20_000, 0)
    return {
        "xgboost": xgb.XGBRegressor(n_estimators=100, max_depth=5, n_jobs=1).fit(x, y),
        "random_forest": RandomForestRegressor(n_estimators=100, max_leaf_nodes=31, random_state=0).fit(x, y),
        "hist_gradient_boosting": HistGradientBoostingRegressor(max_iter=100, max_leaf_nodes=31, random_state=0).fit(x, y),
    }


def main():
    rows = [1, 100, 100_000]
    if "--rows" in sys.argv:
        rows = [int(r) for r in sys.argv[sys.argv.index("--rows") + 1].split(",")]
    print(f"# kiln {kiln.__version__}, xgboost {xgb.__version__}, one thread")
    only = [a for a in sys.argv[1:] if not a.startswith("--") and not a[0].isdigit()]
    for name, model in models().items():
        if only and name not in only:
            continue
        es = {"library": model.predict}
        compile_s = {}
        for tier in ("cranelift", "llvm"):
            t = time.perf_counter()
            f = kiln.trees.compile(model, tier=tier)
            f(np.zeros((1, 20)))
            compile_s[tier] = time.perf_counter() - t
            es[f"kiln-{tier}"] = f
        print(f"\n## {name}: " + ", ".join(f"kiln-{k} compile {v:.3f} s" for k, v in compile_s.items()))
        for n in rows:
            x, _ = data(n, 1)
            want = es["library"](x)
            for k, f in es.items():
                assert np.array_equal(f(x), want), (name, k, n)
            # Each engine repeats its call to fill about 20 ms per sample.
            inner = {}
            for k, f in es.items():
                t = time.perf_counter()
                f(x)
                inner[k] = max(1, int(0.02 / max(time.perf_counter() - t, 1e-7)))
            times = {k: [] for k in es}
            for _ in range(7):
                for k, f in es.items():
                    t = time.perf_counter()
                    for _ in range(inner[k]):
                        f(x)
                    times[k].append((time.perf_counter() - t) / inner[k])
            print(f"{n} rows: " + ", ".join(
                f"{k} {statistics.median(v) * 1e6:.1f} us ({statistics.median(v) * 1e9 / n:.0f} ns/row)"
                for k, v in times.items()
            ), flush=True)


if __name__ == "__main__":
    main()
