"""kiln's populations against Operon in one process, interleaved: the
1,000 expressions of ../shared/fixtures/gp over its 10,000 rows, compiled
(parsed, for Operon) and evaluated, every value; kiln in float64 and
float32, into a new array and into one kept across calls (`out=`), against
Operon's float32 (pyoperon, as ../shared/peers W2 runs it: its result
buffer made before the clock starts).

  python crates/python/benchmarks/population_operon.py THREADS [ROUNDS]

pyoperon is W2's peer, in ../shared/peers/.venv (`../shared/peers/run.sh
w2` makes it); this script adds that venv's packages behind its own. The
median, best and worst of ROUNDS (default 9) are printed in ms.
"""

from __future__ import annotations

import pathlib
import statistics
import sys
import time

import numpy as np

import kiln

HERE = pathlib.Path(__file__).resolve()
SHARED = HERE.parents[3].parent / "shared"
GP = SHARED / "fixtures" / "gp"
sys.path.extend(str(p) for p in (SHARED / "peers" / ".venv" / "lib").glob("python3*/site-packages"))

import pyoperon as op  # noqa: E402


def main() -> None:
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 9
    exprs = (GP / "gp_population.txt").read_text().splitlines()
    data = np.loadtxt(GP / "gp_data.csv", delimiter=",", skiprows=1)
    x64 = {f"x{j}": np.ascontiguousarray(data[:, j]) for j in range(data.shape[1])}
    x32 = {k: v.astype(np.float32) for k, v in x64.items()}
    ds = op.Dataset(np.asfortranarray(data))
    cols = sorted(ds.Variables, key=lambda v: v.Index)
    vmap = {f"x{j}": cols[j].Hash for j in range(data.shape[1])}
    rng = op.Range(0, data.shape[0])
    kept = {
        np.float64: np.full((len(exprs), len(data)), np.nan),
        np.float32: np.full((len(exprs), len(data)), np.nan, dtype=np.float32),
    }

    def operon() -> float:
        res = np.zeros(len(exprs) * data.shape[0], dtype=np.float32)
        t = time.perf_counter()
        trees = [op.InfixParser.Parse(e, vmap) for e in exprs]
        op.EvaluateTrees(trees, ds, rng, res, threads)
        return time.perf_counter() - t

    def population(dtype, out: bool) -> float:
        x = x64 if dtype is np.float64 else x32
        t = time.perf_counter()
        pop = kiln.Population(exprs, variables=list(x64), threads=threads, dtype=dtype)
        pop.errors  # compiles
        values = pop.evaluate(x, out=kept[dtype]) if out else pop.evaluate(x)
        elapsed = time.perf_counter() - t
        del values
        return elapsed

    peers = {
        "operon-f32": operon,
        "kiln-f64": lambda: population(np.float64, False),
        "kiln-f64-out": lambda: population(np.float64, True),
        "kiln-f32": lambda: population(np.float32, False),
        "kiln-f32-out": lambda: population(np.float32, True),
    }
    for run in peers.values():
        run()
    times: dict = {name: [] for name in peers}
    for _ in range(rounds):
        for name, run in peers.items():
            times[name].append(run())
    for name, ts in times.items():
        print(
            f"threads {threads} {name:13s} median {statistics.median(ts) * 1e3:6.1f} ms"
            f"  best {min(ts) * 1e3:6.1f}  worst {max(ts) * 1e3:6.1f}"
        )


if __name__ == "__main__":
    main()
