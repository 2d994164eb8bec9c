"""numpy per element on the domains of `cargo bench -p kiln --features llvm --bench math`
for docs/performance.md: `.venv/bin/python crates/kiln/benches/math_numpy.py` (min of 15, ns)."""
import numpy as np, timeit
rng = np.random.default_rng(1)
base = rng.uniform(-10, 10, 10**6)
doms = {
 "exp": lambda x: x, "log": lambda x: np.abs(x) + 0.001, "sin": lambda x: x, "cos": lambda x: x,
 "expm1": lambda x: x, "tanh": lambda x: x * 0.5, "erf": lambda x: x * 0.3, "erfc": lambda x: x * 0.3,
 "sinh": lambda x: x, "cosh": lambda x: x, "log1p": lambda x: np.abs(x) - 0.999,
 "log2": lambda x: np.abs(x) + 0.001, "log10": lambda x: np.abs(x) + 0.001, "tan": lambda x: x,
 "atan": lambda x: x, "asin": lambda x: x * 0.1, "acos": lambda x: x * 0.1, "asinh": lambda x: x,
 "acosh": lambda x: np.abs(x) + 1.0, "atanh": lambda x: x * 0.099, "cbrt": lambda x: x,
 "exp2": lambda x: x,
}
fn = {"atan": np.arctan, "asin": np.arcsin, "acos": np.arccos, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh}
try:
    import scipy.special as sp
    fn["erf"] = sp.erf; fn["erfc"] = sp.erfc
except Exception:
    pass
for name, d in doms.items():
    f = fn.get(name, getattr(np, name, None))
    if f is None:
        print(f"{name},numpy,n/a"); continue
    for dt in (np.float64, np.float32):
        x = d(base).astype(dt); o = np.empty_like(x)
        t = min(timeit.repeat(lambda: f(x, out=o), number=1, repeat=15))
        print(f"{name}{'f' if dt == np.float32 else ''},numpy,{t * 1e9 / x.size:.3f}")
# The binary functions, on the benchmark's domains (the second argument is
# the first reversed).
other = base[::-1].copy()
binary = {
 "pow": (np.power, lambda x, y: (np.abs(x) + 0.001, y * 0.3)),
 "atan2": (np.arctan2, lambda x, y: (x, y)),
 "hypot": (np.hypot, lambda x, y: (x, y)),
}
for name, (f, d) in binary.items():
    for dt in (np.float64, np.float32):
        x, y = (v.astype(dt) for v in d(base, other)); o = np.empty_like(x)
        t = min(timeit.repeat(lambda: f(x, y, out=o), number=1, repeat=15))
        print(f"{name}{'f' if dt == np.float32 else ''},numpy,{t * 1e9 / x.size:.3f}")
