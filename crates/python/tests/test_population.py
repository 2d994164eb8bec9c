"""kiln.Population against numpy, the interpreter and the GP fixture."""

import pathlib
import pickle

import numpy as np
import pandas as pd
import pytest

import kiln
from conftest import ROOT

GP = ROOT / "tests" / "fixtures" / "gp"


def test_the_default_tier_is_the_populations_rule():
    # kiln::DEFAULT_TIER: the vector VM, measured fastest on GP populations.
    p = kiln.Population(["x * 2.0 + sin(y)"])
    assert p.tier == "vm"
    X = np.array([[1.0, 0.5], [-3.0, 2.0]])
    want = kiln.Population(["x * 2.0 + sin(y)"], tier="interp").evaluate(X)
    assert np.array_equal(p.evaluate(X), want)


def test_rows_mse_and_errors(tier):
    exprs = ["x0 * 2.0 + x1", "sin(x0) ** 2 + cos(x0) ** 2", "1.5", "x1 > x0",
             "float(int(x0) // int(x1))", "x0 +", "x9 * 2.0"]
    X = np.array([[1.0, 0.5], [2.0, 1.0], [3.0, 0.0], [-4.0, 2.0]])
    p = kiln.Population(exprs, variables=["x0", "x1"], tier=tier)
    assert len(p) == 7 and p.variables == ["x0", "x1"] and p.tier == tier
    assert sorted(p.errors) == [5, 6]
    assert "<expr>:1:5: error: expected an expression" in p.errors[5]
    assert p.errors[6] == "unknown variable `x9`"
    out, errors = p.evaluate(X, errors=True)
    assert out.shape == (7, 4) and out.dtype == np.float64
    np.testing.assert_array_equal(out[0], X[:, 0] * 2 + X[:, 1])
    np.testing.assert_allclose(out[1], 1.0, rtol=1e-15)
    np.testing.assert_array_equal(out[2], 1.5)
    np.testing.assert_array_equal(out[3], [0.0, 0.0, 0.0, 1.0])
    assert np.isnan(out[4]).all() and np.isnan(out[5]).all()
    assert sorted(errors) == [4, 5, 6] and "integer division by zero" in errors[4]
    y = np.array([2.0, 5.0, 6.0, -6.0])
    mse = p.mse(X, y)
    np.testing.assert_array_equal(mse[[0, 2]], [((out[0] - y) ** 2).mean(), ((1.5 - y) ** 2).mean()])
    assert np.isnan(mse[4])
    # A dict of columns and a DataFrame are the same X.
    np.testing.assert_array_equal(p.evaluate({"x0": X[:, 0], "x1": X[:, 1]}), out)
    np.testing.assert_array_equal(p.evaluate(pd.DataFrame(X, columns=["x0", "x1"])), out)


def test_bad_inputs():
    p = kiln.Population(["a + b"])
    assert p.variables == ["a", "b"]
    with pytest.raises(ValueError, match="X has 3 columns, the population has 2 variables"):
        p.evaluate(np.zeros((4, 3)))
    with pytest.raises(ValueError, match="X has no column `b`"):
        p.evaluate({"a": np.zeros(3)})
    with pytest.raises(ValueError, match="column `b` has 2 rows, others 3"):
        p.evaluate({"a": np.zeros(3), "b": np.zeros(2)})
    with pytest.raises(TypeError, match="must be numbers"):
        p.evaluate({"a": np.array(["x"]), "b": np.zeros(1)})
    with pytest.raises(TypeError, match="X must be a 2-D array"):
        p.evaluate(3.0)
    with pytest.raises(ValueError, match="y has 2 rows, X has 3"):
        p.mse(np.zeros((3, 2)), np.zeros(2))
    with pytest.raises(ValueError, match="named twice"):
        kiln.Population(["a"], variables=["a", "a"])
    with pytest.raises(ValueError, match="threads must be at least 1"):
        kiln.Population(["a"], threads=0)
    with pytest.raises(TypeError):
        kiln.Population("a + b")  # a str is not a list of expressions
    assert kiln.Population([]).evaluate(np.zeros((5, 0))).shape == (0, 5)


def _rss_mb():
    return int(pathlib.Path("/proc/self/statm").read_text().split()[1]) * 4096 / 2**20


def _gp():
    exprs = (GP / "gp_population.txt").read_text().splitlines()
    data = pd.read_csv(GP / "gp_data.csv")
    return exprs, data


def test_the_gp_fixture_matches_the_interpreter_bit_for_bit():
    exprs, data = _gp()
    exprs = exprs[:200]
    data = data.iloc[:500]
    outs = [kiln.Population(exprs, tier=t, threads=2).evaluate(data) for t in kiln.tiers()]
    for o in outs[1:]:
        assert o.tobytes() == outs[0].tobytes()


def test_gp_matches_numpy_eval():
    """kiln means what numpy means by each expression. kiln's transcendentals
    are the libm crate's and numpy's are its own SIMD ones: they differ in the
    last bit now and then, and chaotic expressions (sin of exp of a large
    value, a division by sin(cos(exp(x))) near 0) turn that into any
    difference at all on a few rows. A semantic slip (precedence, a sign, a
    wrong function) moves most rows, so: at least 90 % of each expression's
    rows agree to 1e-6 (exp(exp(x)) under a cos is chaotic on 4 % of them),
    and 99.5 % of all rows."""
    exprs, data = _gp()
    exprs = exprs[:300]
    out = kiln.Population(exprs).evaluate(data)
    cols = {c: data[c].to_numpy() for c in data.columns}
    funcs = {"sin": np.sin, "cos": np.cos, "exp": np.exp, "log": np.log,
             "sqrt": np.sqrt, "tanh": np.tanh, "abs": np.abs}
    agree = total = 0
    with np.errstate(all="ignore"):
        for i, e in enumerate(exprs):
            want = np.broadcast_to(eval(e, {**funcs, **cols}), out[i].shape)
            same = np.isclose(out[i], want, rtol=1e-6, atol=1e-9, equal_nan=True)
            assert same.mean() >= 0.9, f"{e}: {same.mean():.4f} of rows agree"
            agree += same.sum()
            total += same.size
    assert agree >= 0.995 * total, f"{agree} of {total} rows agree"


def test_populations_pickle():
    p = kiln.Population(["a * 2.0", "a + b"], tier="llvm")
    q = pickle.loads(pickle.dumps(p))
    assert q.tier == "llvm" and q.variables == ["a", "b"]
    X = np.arange(6.0).reshape(3, 2)
    np.testing.assert_array_equal(q.evaluate(X), p.evaluate(X))


def test_vector_loops_are_an_option_and_change_no_bits():
    exprs, data = _gp()
    exprs = exprs[:150]
    X = pd.concat([data] * 4, ignore_index=True)  # 40,000 rows: vector loops pay here
    scalar = kiln.Population(exprs)
    vector = kiln.Population(exprs, vectorize=True)
    oracle = kiln.Population(exprs, tier="interp")
    assert scalar.vectorize is None and vector.vectorize is True
    want = oracle.evaluate(X)
    np.testing.assert_array_equal(vector.evaluate(X), want)
    np.testing.assert_array_equal(scalar.evaluate(X), want)
    for tier in ("llvm", "cranelift"):
        off = kiln.Population(exprs[:20], tier=tier, vectorize=False)
        np.testing.assert_array_equal(off.evaluate(X), want[:20])
    q = pickle.loads(pickle.dumps(vector))
    assert q.vectorize is True
    np.testing.assert_array_equal(q.evaluate(X), want)
    # A pickle made before `vectorize` existed (four fields) still loads.
    old = kiln._population(["a * 2.0"], ["a"], "cranelift", 0)
    assert old.vectorize is None
    with pytest.raises(TypeError):
        kiln.Population(["a"], vectorize="yes")


def test_compile_evaluate_and_drop_keeps_memory_flat():
    exprs, data = _gp()
    X = data.iloc[:1000]

    def population():
        kiln.Population(exprs).mse(X, X[data.columns[0]])

    # Freed memory comes back to the system in waves: resident memory
    # creeps up by 20 MiB or more over a hundred populations, then drops
    # (measured in the whole suite's process, with torch loaded). So the
    # bound compares the peaks of two windows of 100 populations, each
    # longer than a wave: a leak of 160 KiB per population moves the
    # second peak past it, a wave does not. (One population's code and
    # data take about 10 MiB.)
    def peak(n):
        top = 0.0
        for _ in range(n):
            population()
            top = max(top, _rss_mb())
        return top

    peak(3)
    first = peak(100)
    second = peak(100)
    assert second - first < 16, f"RSS peak grew {second - first:.1f} MiB over 100 populations"


def test_evaluated_arrays_are_the_callers():
    """evaluate's array is in the module's allocator's memory, handed to
    NumPy: each call's is its own (memory a dropped array had is reused),
    C-contiguous and writable, and dropping it frees it."""
    exprs, data = _gp()
    X = data.iloc[:2000]
    for dtype in (np.float64, np.float32):
        p = kiln.Population(exprs[:200], variables=list(data.columns), dtype=dtype)
        Xd = X.astype(dtype)
        first = p.evaluate(Xd)
        want = first.copy()
        assert first.shape == (200, 2000) and first.dtype == dtype
        assert first.flags.c_contiguous and first.flags.writeable
        second = p.evaluate(Xd)
        assert not np.shares_memory(first, second)
        first[:] = 7.0
        np.testing.assert_array_equal(second, want)
        del first
        third = p.evaluate(Xd)
        assert not np.shares_memory(second, third)
        np.testing.assert_array_equal(third, want)
        # A view outlives the array it was taken of.
        row = third[5]
        del second, third
        np.testing.assert_array_equal(row, want[5])

    # 30 arrays of 16 MB each, dropped as they come: memory stays flat.
    p = kiln.Population(exprs[:200], variables=list(data.columns))
    big = pd.concat([X] * 5)
    p.evaluate(big)
    settled = _rss_mb()
    for _ in range(30):
        p.evaluate(big)
    assert _rss_mb() - settled < 64, f"RSS grew {_rss_mb() - settled:.1f} MiB over 30 evaluations"


def test_evaluate_into_the_callers_array():
    """out= receives the values (a failed row NaN) and is returned: the
    same values as a fresh array, in either dtype; its shape, dtype, layout
    and writability are checked, and an out that overlaps X is refused."""
    exprs = ["x * 2.0 + sin(y)", "float(int(x) // int(y))", "y"]
    X = np.array([[1.0, 0.5], [2.0, 1.0], [3.0, 4.0]])
    for dtype in (np.float64, np.float32):
        p = kiln.Population(exprs, variables=["x", "y"], dtype=dtype)
        want, errors = p.evaluate(X, errors=True)
        out = np.full((3, 3), 7.0, dtype=dtype)
        got = p.evaluate(X, out=out)
        assert got is out
        np.testing.assert_array_equal(out, want)
        assert np.isnan(out[1]).all() and sorted(errors) == [1]
        # Again into the same array, with the errors.
        out[:] = 0.0
        got, again = p.evaluate(X, errors=True, out=out)
        assert got is out and again == errors
        np.testing.assert_array_equal(out, want)
        # A DataFrame too.
        out[:] = 0.0
        p.evaluate(pd.DataFrame(X, columns=["x", "y"]), out=out)
        np.testing.assert_array_equal(out, want)
    p = kiln.Population(exprs, variables=["x", "y"])
    with pytest.raises(ValueError, match=r"out has shape \(3, 2\), the population's values are \(3, 3\)"):
        p.evaluate(X, out=np.zeros((3, 2)))
    with pytest.raises(TypeError, match="out must be float64 .the population's dtype., got float32"):
        p.evaluate(X, out=np.zeros((3, 3), dtype=np.float32))
    with pytest.raises(TypeError, match="out must be a NumPy array of float64, got list"):
        p.evaluate(X, out=[[0.0] * 3] * 3)
    with pytest.raises(ValueError, match="out must be C-contiguous"):
        p.evaluate(X, out=np.zeros((3, 3)).T)
    frozen = np.zeros((3, 3))
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="out is read-only"):
        p.evaluate(X, out=frozen)
    # The first row of out is also the column x: refused, nothing written.
    shared = np.arange(9.0).reshape(3, 3)
    with pytest.raises(ValueError, match="out overlaps a column of X"):
        p.evaluate({"x": shared[0], "y": X[:, 1]}, out=shared)
    np.testing.assert_array_equal(shared, np.arange(9.0).reshape(3, 3))
    # An empty population writes nothing into its (0, rows) array.
    empty = np.zeros((0, 3))
    assert kiln.Population([]).evaluate(np.zeros((3, 0)), out=empty) is empty


def test_float32_populations():
    """dtype=float32 computes in float32 as Operon does: the columns rounded
    to float32, the values float32 (bit-identical on every tier), the MSE
    summed in float64; numpy's float32 evaluation agrees to float32's
    precision on tame rows."""
    exprs, data = _gp()
    exprs, data = exprs[:200], data.iloc[:2000]
    pops = [kiln.Population(exprs, tier=t, threads=2, dtype=np.float32) for t in kiln.tiers()]
    assert all(p.dtype == np.float32 for p in pops)
    outs = [p.evaluate(data) for p in pops]
    assert outs[0].dtype == np.float32 and outs[0].shape == (200, 2000)
    for o in outs[1:]:
        assert o.tobytes() == outs[0].tobytes()
    # Against numpy in float32 (weak Python literals, as kiln's).
    cols = {c: data[c].to_numpy(np.float32) for c in data.columns}
    funcs = {"sin": np.sin, "cos": np.cos, "exp": np.exp, "log": np.log,
             "sqrt": np.sqrt, "tanh": np.tanh, "abs": np.abs}
    agree = total = 0
    with np.errstate(all="ignore"):
        for i, e in enumerate(exprs):
            want = np.broadcast_to(eval(e, {**funcs, **cols}), outs[0][i].shape)
            same = np.isclose(outs[0][i], want, rtol=1e-4, atol=1e-6, equal_nan=True)
            agree += same.sum()
            total += same.size
    assert agree >= 0.99 * total, f"{agree} of {total} rows agree"
    # float64 gives other bits: float32 is not float64 rounded.
    wide = kiln.Population(exprs, threads=2).evaluate(data)
    assert wide.dtype == np.float64
    tame = np.isfinite(wide) & (np.abs(wide) > 1e-3) & (np.abs(wide) < 1e3)
    assert (outs[0][tame] != wide[tame].astype(np.float32)).mean() > 0.1
    # ... but close to it, except where float32 overflows or cancels.
    assert np.isclose(outs[0][tame], wide[tame], rtol=1e-3).mean() > 0.99
    # The MSE: float64 sums of the float32 values against y rounded to float32.
    y = data["x0"].to_numpy()
    mse = pops[0].mse(data, y)
    assert mse.dtype == np.float64
    y32 = y.astype(np.float32).astype(np.float64)
    with np.errstate(all="ignore"):
        want = ((outs[0].astype(np.float64) - y32) ** 2).mean(axis=1)
    np.testing.assert_allclose(mse, want, rtol=1e-12, equal_nan=True)


def test_float32_populations_take_numpys_names_and_pickle():
    X = np.array([[1.0, 2.0], [3.0, 0.5]])
    for dtype in ("float32", np.float32, np.dtype("float32"), "f4"):
        p = kiln.Population(["a * 0.1 + b", "0.1"], dtype=dtype)
        assert p.dtype == np.float32
        np.testing.assert_array_equal(
            p.evaluate(X), [X[:, 0].astype(np.float32) * np.float32(0.1) + X[:, 1].astype(np.float32),
                            [np.float32(0.1)] * 2])
    assert kiln.Population(["a"], dtype=None).dtype == np.float64
    assert kiln.Population(["a"], dtype="float64").dtype == np.float64
    q = pickle.loads(pickle.dumps(p))
    assert q.dtype == np.float32 and q.evaluate(X).tobytes() == p.evaluate(X).tobytes()
    with pytest.raises(ValueError, match="dtype must be float64 or float32, not int32"):
        kiln.Population(["a"], dtype=np.int32)
    with pytest.raises(TypeError, match="dtype must be float64 or float32"):
        kiln.Population(["a"], dtype="no such type")
    # Fitting computes in float64 whatever the population's dtype.
    x = np.linspace(0.0, 3.0, 50)
    fit = kiln.Population(["sin(1.0 * x) * 2.0"], dtype=np.float32).fit_constants(
        {"x": x}, 2.5 * np.sin(1.3 * x))
    np.testing.assert_allclose(fit.constants[0], [1.3, 2.5], rtol=1e-9)


def test_a_population_compiles_on_first_use_and_a_fit_does_not_need_it():
    exprs = ["x * 2.5 + y", "sin(x) * 0.5", "x +", "x // 0"]
    X = {"x": np.linspace(-2.0, 2.0, 50), "y": np.linspace(0.0, 1.0, 50)}
    y = 3.0 * X["x"] + X["y"]
    p = kiln.Population(exprs)
    assert repr(p).endswith("not compiled yet>")
    # The variables come from the expressions without compiling them.
    assert p.variables == ["x", "y"] and len(p) == 4
    fit = p.fit_constants(X, y, max_iter=20)
    assert fit.constants[0][0] == pytest.approx(3.0, rel=1e-12)
    assert sorted(fit.errors) == [2, 3]
    assert repr(p).endswith("not compiled yet>")
    # The first evaluation compiles, and the compile errors are the same as
    # a population that compiled at once would report.
    out = p.evaluate(X)
    assert np.array_equal(out[0], X["x"] * 2.5 + X["y"])
    assert repr(p).endswith("1 failed to compile>")
    assert sorted(p.errors) == [2]
    # Two threads' first calls: one compiles, the other waits for it.
    from concurrent.futures import ThreadPoolExecutor

    fresh = kiln.Population(exprs[:2], ["x", "y"])
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda _: fresh.evaluate(X), range(8)))
    assert all(np.array_equal(o, out[:2]) for o in outs)
    # A pickle of a population never compiled compiles on loading's first use.
    again = pickle.loads(pickle.dumps(kiln.Population(exprs)))
    assert np.array_equal(again.evaluate(X)[:2], out[:2])


def test_values_larger_than_memory_are_a_memory_error():
    # 20,000 expressions over 20 million rows: 3.2 TB of float64 values. A
    # MemoryError before anything is evaluated (kiln's allocator would
    # grant the address space, and the evaluation would run until the
    # system killed the process); a smaller call still works.
    p = kiln.Population(["x0 + 1.0"] * 20_000, variables=["x0"])
    with pytest.raises(MemoryError, match="400000000000 elements"):
        p.evaluate(np.ones((20_000_000, 1)))
    assert p.evaluate(np.ones((3, 1))).shape == (20_000, 3)
