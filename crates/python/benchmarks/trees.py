"""Tree ensembles: kiln.trees against LightGBM's own predict and the tree
compilers that install (lleaves, treelite/tl2cgen, ONNX Runtime), one
thread, on LightGBM models trained here on generated data.

  python crates/python/benchmarks/trees.py [small] [big] [categorical] [--rows 1,100,1000000]
      [--peers lleaves,tl2cgen,onnxruntime]

- small: 100 trees x 31 leaves, regression on 20 numeric features.
- big: 1,000 trees x 255 leaves, binary.
- categorical: 100 trees x 31 leaves, regression, 4 of 12 features
  categorical (up to 40 categories).

For each model: each engine's compile time (kiln's on the Cranelift and LLVM
tiers with the code cache off; lleaves' and tl2cgen's to a shared library),
then per rows count the median of 7 interleaved calls of predict on the
same rows (NaN in 5% of cells), in microseconds and per row. Every engine's
predictions are checked against LightGBM's first. Models are cached in
/tmp/kiln-trees-bench. Run it in a venv with the peers installed; a peer
that does not import is left out of the table, and the script says so.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("KILN_NUM_THREADS", "1")
os.environ.setdefault("KILN_CACHE", "0")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import lightgbm as lgb  # noqa: E402
import numpy as np  # noqa: E402

import kiln  # noqa: E402

CACHE = Path("/tmp/kiln-trees-bench")
MODELS = {
    "small": dict(trees=100, leaves=31, features=20, objective="regression", cats=0),
    "big": dict(trees=1000, leaves=255, features=20, objective="binary", cats=0),
    "categorical": dict(trees=100, leaves=31, features=12, objective="regression", cats=4),
}


def data(spec, n, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, spec["features"]))
    for c in range(spec["cats"]):
        x[:, c] = rng.integers(0, 40, n)
    y = x[:, 0] * 2 + np.sin(x[:, 1] * 3) + x[:, 2] * x[:, 3] + (x[:, 0] % 3 == 1)
    if spec["objective"] == "binary":
        y = (y > 0.5).astype(float)
    x[rng.random(x.shape) < 0.05] = np.nan
    return x, y


def model(name):
    spec = MODELS[name]
    CACHE.mkdir(exist_ok=True)
    path = CACHE / f"{name}.txt"
    if not path.exists():
        x, y = data(spec, 200_000 if name == "big" else 20_000, 0)
        params = {
            "objective": spec["objective"],
            "num_leaves": spec["leaves"],
            "min_data_in_leaf": 5,
            "verbose": -1,
            "num_threads": 2,
        }
        cats = list(range(spec["cats"])) or "auto"
        booster = lgb.train(params, lgb.Dataset(x, y, categorical_feature=cats), spec["trees"])
        booster.save_model(path)
    return path


def timed(f):
    t = time.perf_counter()
    out = f()
    return out, time.perf_counter() - t


def engines(path, peers):
    """name -> (compile seconds, predict(x) -> array)."""
    out = {}
    booster = lgb.Booster(model_file=str(path))
    out["lightgbm"] = (0.0, lambda x: booster.predict(x, num_threads=1))
    for tier in ("cranelift", "llvm"):
        f, secs = timed(lambda: kiln.trees.compile(path, tier=tier))
        # The first call finishes a lazy compile, if any.
        _, first = timed(lambda: f(np.zeros((1, booster.num_feature()))))
        out[f"kiln-{tier}"] = (secs + first, f)
    try:
        if "lleaves" not in peers:
            raise LookupError("not asked for (--peers)")
        import lleaves

        m = lleaves.Model(model_file=str(path))
        cache = tempfile.mktemp(suffix=".o")
        _, secs = timed(lambda: m.compile(cache=cache))
        out["lleaves"] = (secs, lambda x: m.predict(x, n_jobs=1))
    except Exception as e:  # noqa: BLE001 - a peer that does not install or run
        print(f"# lleaves left out: {e!r}", file=sys.stderr)
    try:
        if "tl2cgen" not in peers:
            raise LookupError("not asked for (--peers)")
        import tl2cgen
        import treelite

        tm = treelite.frontend.load_lightgbm_model(str(path))
        lib = tempfile.mktemp(suffix=".so")
        _, secs = timed(lambda: tl2cgen.export_lib(tm, toolchain="gcc", libpath=lib, params={"parallel_comp": 2}, nthread=2))
        predictor = tl2cgen.Predictor(lib, nthread=1)

        def tl2(x):
            return predictor.predict(tl2cgen.DMatrix(x, dtype="float64")).reshape(len(x), -1).squeeze(-1)

        out["tl2cgen"] = (secs, tl2)
    except Exception as e:  # noqa: BLE001
        print(f"# tl2cgen left out: {e!r}", file=sys.stderr)
    try:
        if "onnxruntime" not in peers:
            raise LookupError("not asked for (--peers)")
        import onnxmltools
        import onnxruntime as ort
        from onnxmltools.convert.common.data_types import FloatTensorType

        def convert():
            onx = onnxmltools.convert_lightgbm(booster, initial_types=[("x", FloatTensorType([None, booster.num_feature()]))], target_opset=15, zipmap=False)
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = 1
            opts.inter_op_num_threads = 1
            return ort.InferenceSession(onx.SerializeToString(), opts, providers=["CPUExecutionProvider"])

        sess, secs = timed(convert)
        names = [o.name for o in sess.get_outputs()]

        def onnx(x):
            res = sess.run(None, {"x": x.astype(np.float32)})
            r = np.asarray(res[names.index("probabilities")])[:, 1] if "probabilities" in names else res[0]
            return np.asarray(r).reshape(len(x))

        out["onnxruntime"] = (secs, onnx)
    except Exception as e:  # noqa: BLE001
        print(f"# onnxruntime left out: {e!r}", file=sys.stderr)
    return out


def main():
    args = sys.argv[1:]
    rows = [1, 100, 1_000_000]
    if "--rows" in args:
        i = args.index("--rows")
        rows = [int(r) for r in args[i + 1].split(",")]
        del args[i : i + 2]
    peers = {"lleaves", "tl2cgen", "onnxruntime"}
    if "--peers" in args:
        i = args.index("--peers")
        peers = set(args[i + 1].split(","))
        del args[i : i + 2]
    names = args or list(MODELS)
    print(f"# kiln {kiln.__version__}, lightgbm {lgb.__version__}, one thread", flush=True)
    for name in names:
        path = model(name)
        es = engines(path, peers)
        print(f"\n## {name}: " + ", ".join(f"{k} compile {v[0]:.3f} s" for k, v in es.items() if k != "lightgbm"), flush=True)
        for n in rows:
            x, _ = data(MODELS[name], n, 1)
            want = es["lightgbm"][1](x)
            for k, (_, f) in es.items():
                got = f(x)
                tol = 1e-5 if k == "onnxruntime" else 1e-12
                if not np.allclose(got, want, rtol=tol, atol=tol):
                    print(f"# {k} disagrees with lightgbm at {n} rows: max |diff| {np.max(np.abs(got - want))}")
            repeats = 7 if n < 1_000_000 else 3
            inner = max(1, 20_000 // max(n, 1))
            times = {k: [] for k in es}
            for _ in range(repeats):
                for k, (_, f) in es.items():
                    t = time.perf_counter()
                    for _ in range(inner):
                        f(x)
                    times[k].append((time.perf_counter() - t) / inner)
            line = ", ".join(
                f"{k} {statistics.median(v) * 1e6:.1f} us ({statistics.median(v) * 1e9 / n:.0f} ns/row)"
                for k, v in times.items()
            )
            print(f"{n} rows: {line}", flush=True)


if __name__ == "__main__":
    main()
