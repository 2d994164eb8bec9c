"""kiln.compile and kiln.Function: scalars and arrays in and out, the
conversion rule, out=, errors, threads, pickling, files."""

import json
import math
import pickle
import threading

import numpy as np
import pytest

import kiln
from conftest import EXAMPLES, FIXTURES


def bits(a):
    """An array's bytes, so that NaN payloads and -0.0 compare exactly."""
    return np.ascontiguousarray(a).tobytes()


def test_the_readme_expression_on_every_tier(tier):
    f = kiln.compile("(2+3*b+33*(10/2)+1+3/3+a)/2", tier=tier)
    assert f.tier == tier
    # Free names are inputs in the order they first appear.
    assert f.inputs == {"b": "f64", "a": "f64"}
    assert f(2.0, 1.0) == 88.0 and f(a=1.0, b=2.0) == 88.0 and f(2.0, a=1.0) == 88.0


def test_scalars_in_scalars_out(tier):
    f = kiln.compile("def f(a: int, b: f32, c: bool): return float(a) * 2.0 if c else 0.5", tier=tier)
    assert f(3, 1.0, True) == 6.0 and f(3, 1.0, False) == 0.5
    assert type(f(3, 1.0, True)) is float
    g = kiln.compile("def g(k: i32): return k < 0, k + 1", tier=tier)
    assert g(-5) == (True, -4)
    assert type(g(-5)[0]) is bool and type(g(-5)[1]) is int
    # NumPy scalars are scalars; an int for a float input is converted.
    h = kiln.compile("x * 2.0", tier=tier)
    assert h(np.float32(1.5)) == 3.0 and h(np.int64(4)) == 8.0 and h(2) == 4.0
    assert h(np.array(2.5)) == 5.0


def test_transcendentals_are_bit_identical_across_tiers():
    x = np.array([1e22, -0.0, 0.5, 710.0, np.nan, np.inf, 1e-310, 3.0])
    outs = [
        kiln.compile("sin(x) + exp(x) * tanh(x)", tier=t, inputs={"x": "f64[n]"})(x)
        for t in kiln.tiers()
    ]
    for o in outs[1:]:
        assert bits(o) == bits(outs[0])
    # The libm crate's functions, close to the platform's (not always its bits).
    with np.errstate(all="ignore"):
        want = np.sin(x) + np.exp(x) * np.tanh(x)
    np.testing.assert_allclose(outs[0], want, rtol=1e-15)


def test_arrays_in_arrays_out(tier):
    f = kiln.compile(
        "def f(x: float[n], k: int): return filter(x > 0.0), x * 2.0, k + 1, sum(x)", tier=tier
    )
    sel, doubled, k1, total = f(np.array([1.5, -2.0, 3.0, 0.0]), 41)
    assert sel.dtype == np.uint32 and sel.tolist() == [0, 2]
    assert doubled.tolist() == [3.0, -4.0, 6.0, 0.0] and doubled.dtype == np.float64
    assert (k1, total) == (42, 2.5)
    # Lists convert by the same rule as arrays.
    assert f([1, 2, 3], 1)[1].tolist() == [2.0, 4.0, 6.0]
    # Empty columns are columns.
    sel, doubled, _, total = f(np.zeros(0), 0)
    assert sel.size == 0 and doubled.size == 0 and total == 0.0


def test_matrices_keep_their_shape(tier):
    f = kiln.compile("def f(a: float[n, 3], b: float[3]): return a + b", tier=tier)
    a = np.arange(12.0).reshape(4, 3)
    out = f(a, np.array([1.0, 2.0, 3.0]))
    assert out.shape == (4, 3)
    np.testing.assert_array_equal(out, a + np.array([1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match=r"input `a` has shape \[n, 3\], got \[3, 4\]"):
        f(a.reshape(3, 4), np.ones(3))


def test_out_writes_into_the_callers_array_without_a_copy():
    f = kiln.compile("a * b + 1.0", inputs={"a": "f64[n]", "b": "f64[n]"})
    a = np.arange(6.0)
    out = np.full(6, -1.0)
    r = f(a, a, out=out)
    assert r is out
    assert out.tolist() == [1.0, 2.0, 5.0, 10.0, 17.0, 26.0]
    # In-place input: the kernel reads the caller's buffer (no copy), so a
    # view of it is read too.
    view = a[2:]
    assert f(view, view).tolist() == [5.0, 10.0, 17.0, 26.0]
    # Several outputs: a tuple with an array or None each.
    g = kiln.compile("def g(x: float[n]): return x + 1.0, sum(x)")
    o = np.zeros(3)
    y, s = g(np.ones(3), out=(o, None))
    assert y is o and o.tolist() == [2.0, 2.0, 2.0] and s == 3.0


def test_out_must_be_exactly_right():
    f = kiln.compile("x * 2.0", inputs={"x": "f64[n]"})
    x = np.arange(4.0)
    with pytest.raises(TypeError, match="C-contiguous, aligned array of f64"):
        f(x, out=np.zeros(4, dtype=np.float32))
    with pytest.raises(TypeError, match="not contiguous"):
        f(x, out=np.zeros(8)[::2])
    with pytest.raises(ValueError, match=r"must have shape \[4\], got \[5\]"):
        f(x, out=np.zeros(5))
    with pytest.raises(TypeError, match="must be a NumPy array"):
        f(x, out=[0.0] * 4)
    ro = np.zeros(4)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="cannot be written"):
        f(x, out=ro)
    # The output may not be an input of the same call.
    with pytest.raises(ValueError, match="cannot be written"):
        f(x, out=x)
    g = kiln.compile("def g(x: float[n]): return x + 1.0, sum(x)")
    with pytest.raises(ValueError, match="out has 1 entries, the function has 2 outputs"):
        g(x, out=(np.zeros(4),))
    with pytest.raises(TypeError, match="is a scalar"):
        g(x, out=(None, np.zeros(1)))


def test_the_conversion_rule(tier):
    f = kiln.compile("x * 2.0", inputs={"x": "f64[n]"}, tier=tier)
    # Other layouts and same-kind dtypes are copied.
    base = np.arange(10.0)
    assert f(base[::2]).tolist() == [0.0, 4.0, 8.0, 12.0, 16.0]
    assert f(np.asfortranarray(np.arange(3.0))).tolist() == [0.0, 2.0, 4.0]
    assert f(np.arange(3, dtype=np.int32)).tolist() == [0.0, 2.0, 4.0]
    assert f(np.arange(3, dtype=np.float32)).tolist() == [0.0, 2.0, 4.0]
    unaligned = np.frombuffer(b"\0" + np.arange(3.0).tobytes(), dtype=np.float64, offset=1)
    assert not unaligned.flags.aligned
    assert f(unaligned).tolist() == [0.0, 2.0, 4.0]
    # Kinds that do not cast are TypeErrors.
    for bad in (np.array([1 + 2j]), np.array(["a"]), np.array([object()], dtype=object)):
        with pytest.raises(TypeError, match="same_kind"):
            f(bad)
    g = kiln.compile("def g(k: int[n]): return k + 1", tier=tier)
    with pytest.raises(TypeError, match="input `k` is i64, got an array of float64"):
        g(np.array([1.5]))
    assert g(np.array([1, 2], dtype=np.int32)).tolist() == [2, 3]
    # Ragged lists are ValueErrors from NumPy's own conversion.
    with pytest.raises(ValueError):
        f([[1.0, 2.0], [3.0]])


def test_dlpack_capsules_are_read_in_place(tier):
    # A CPU tensor's DLPack capsule (`torch.utils.dlpack.to_dlpack`, what
    # the torch backend passes) is read where the tensor keeps it: of the
    # input's dtype exactly, dense in row-major order, on the CPU. kiln does
    # not consume it: the capsule still hands the tensor on afterwards.
    import torch

    to_dlpack = torch.utils.dlpack.to_dlpack
    f = kiln.compile("def f(x: float[n, 3], k: int, b: bool): return x * k if b else x", tier=tier)
    x = torch.arange(6.0, dtype=torch.float64).reshape(2, 3).requires_grad_()
    k, b = torch.tensor(3), torch.tensor(True)
    capsule = to_dlpack(x)
    got = f(capsule, to_dlpack(k), to_dlpack(b))
    assert got.tolist() == [[0.0, 3.0, 6.0], [9.0, 12.0, 15.0]]
    assert torch.equal(torch.from_dlpack(capsule), x.detach())
    # An axis of one may have any stride; a view's offset is honoured.
    wide = torch.arange(12.0, dtype=torch.float64).reshape(4, 3)
    assert f(to_dlpack(wide[2:]), 1, True).tolist() == [[6.0, 7.0, 8.0], [9.0, 10.0, 11.0]]
    assert f(to_dlpack(wide[1:2].expand(1, 3)), 2, True).tolist() == [[6.0, 8.0, 10.0]]
    empty = kiln.compile("x + 1.0", inputs={"x": "f64[n]"}, tier=tier)
    assert empty(to_dlpack(torch.zeros(0, dtype=torch.float64))).shape == (0,)
    # Never converted: another dtype, layout or shape is an error naming the input.
    with pytest.raises(TypeError, match="input `x` is f64, got a DLPack tensor of type code 2 with 32 bits"):
        f(to_dlpack(torch.zeros(2, 3)), 1, True)
    with pytest.raises(ValueError, match="input `x` is not dense in row-major order"):
        f(to_dlpack(torch.zeros(3, 2, dtype=torch.float64).t()), 1, True)
    with pytest.raises(ValueError, match="input `x` has shape"):
        f(to_dlpack(torch.zeros(2, 4, dtype=torch.float64)), 1, True)
    with pytest.raises(TypeError, match="input `k` is a i64 scalar, got a tensor of shape"):
        f(to_dlpack(x), to_dlpack(torch.tensor([3])), True)
    with pytest.raises(TypeError, match="input `b` is bool"):
        f(to_dlpack(x), 1, to_dlpack(torch.tensor(1, dtype=torch.uint8)))
    with pytest.raises(ValueError, match="input `b` holds a bool that is neither 0 nor 1"):
        f(to_dlpack(x), 1, to_dlpack(torch.tensor(2, dtype=torch.uint8).view(torch.bool)))
    # An out= array sharing the tensor's bytes would be written while read.
    buffer = np.zeros((2, 3))
    with pytest.raises(ValueError, match="out for `.*` overlaps input `x`'s tensor"):
        f(to_dlpack(torch.from_numpy(buffer)), 1, True, out=buffer)
    assert f(to_dlpack(torch.from_numpy(buffer.copy())), 1, True, out=buffer) is buffer
    # A capsule already consumed (above) is no tensor to read.
    with pytest.raises(TypeError, match="input `x` is a capsule but not an unused DLPack tensor"):
        f(capsule, 1, True)


def test_scalar_arguments_follow_the_same_rule(tier):
    f = kiln.compile("def f(k: int, b: bool): return k * 2 if b else k", tier=tier)
    assert f(np.int32(3), np.bool_(True)) == 6
    with pytest.raises(TypeError, match="input `k` is a i64 scalar, got float"):
        f(1.5, True)
    with pytest.raises(TypeError, match="input `b` is a bool scalar, got int"):
        f(1, 1)
    with pytest.raises(TypeError, match="got an array of shape"):
        f(np.array([1, 2]), True)
    with pytest.raises(OverflowError):
        f(2**70, True)
    with pytest.raises(TypeError):
        f("3", True)


def test_wrong_argument_counts_are_type_errors(tier):
    f = kiln.compile("def f(x, y): return x + y", tier=tier)
    with pytest.raises(TypeError, match=r"f\(\) takes 2 argument\(s\) \(x: f64, y: f64\), got 1"):
        f(1.0)
    with pytest.raises(TypeError, match="got 3"):
        f(1.0, 2.0, 3.0)
    with pytest.raises(TypeError, match=r"f\(\) has no input `bad` \(its inputs: x: f64, y: f64\)"):
        f(1.0, 2.0, bad=3)
    with pytest.raises(TypeError, match="got input `x` twice"):
        f(1.0, x=2.0)
    with pytest.raises(TypeError, match=r"missing input\(s\) y"):
        f(x=2.0)
    assert f(y=1.0, x=2.0) == 3.0


def test_mismatched_dimensions_are_value_errors(tier):
    f = kiln.compile("a + b", inputs={"a": "f64[n]", "b": "f64[n]"}, tier=tier)
    with pytest.raises(ValueError, match="input `b` has 4 for dimension `n`, which an earlier input made 5"):
        f(np.zeros(5), np.zeros(4))


def test_integer_division_by_zero_is_a_zero_division_error(tier):
    f = kiln.compile("def q(a: int, b: int): return a // b", tier=tier)
    assert f(7, -2) == -4  # Python's floor division
    with pytest.raises(ZeroDivisionError, match="integer division by zero"):
        f(1, 0)
    with pytest.raises(kiln.ExecError):
        f(1, 0)
    g = kiln.compile("def g(a: int[n], b: int[n]): return a % b", tier=tier)
    assert g(np.array([7, -7]), np.array([3, 3])).tolist() == [1, 2]
    with pytest.raises(kiln.DivisionByZeroError):
        g(np.array([1, 2]), np.array([1, 0]))


def test_parse_errors_are_located_syntax_errors():
    with pytest.raises(SyntaxError) as e:
        kiln.compile("x +")
    assert isinstance(e.value, kiln.ParseError) and isinstance(e.value, kiln.KilnError)
    assert (e.value.filename, e.value.lineno, e.value.offset, e.value.text) == ("<source>", 1, 4, "x +")
    assert "<source>:1:4: error: expected an expression" in str(e.value)
    with pytest.raises(kiln.ParseError, match="2:"):
        kiln.compile("def f(x):\n    return x $ 2\n")
    with pytest.raises(kiln.ParseError):
        kiln.compile(b"\xff\xfe", format="py")


def test_type_errors_are_located():
    # The Python subset checks types as it reads: a located ParseError.
    with pytest.raises(kiln.ParseError, match="<source>:1:41: error: `add`: shapes of f64.n. and f64.m. do not broadcast"):
        kiln.compile("def f(a: float[n], b: float[m]): return a + b")
    # A graph that does not verify is a CompileError (a ValueError), located.
    src = 'graph "g"\nv0 "a": f64 = input "a"\nv1: i64 = add v0, v0\noutput "out" = v1\n'
    with pytest.raises(kiln.CompileError, match="<source>:3:1: error: v1: declared type i64") as e:
        kiln.compile(src, format="kiln")
    assert isinstance(e.value, ValueError)


def test_bad_options_are_errors():
    with pytest.raises(ValueError, match="tier must be"):
        kiln.compile("x", tier="gpu")
    with pytest.raises(ValueError, match="unknown dtype `f99`"):
        kiln.compile("x", inputs={"x": "f99"})
    with pytest.raises(ValueError, match="format must be"):
        kiln.compile("x", format="onnx")
    with pytest.raises(TypeError, match="source must be"):
        kiln.compile(42)
    with pytest.raises(TypeError, match="inputs must be a mapping"):
        kiln.compile("x", inputs=["x"])


def test_an_output_larger_than_memory_is_a_memory_error():
    # An outer product of two long vectors: 4e12 float64 elements (32 TB)
    # for the output, an int64 one too. A MemoryError, as NumPy's `empty`
    # raises, and the function still works on sizes that fit.
    for dtype, make in (("f64", np.ones), ("i64", lambda n: np.ones(n, np.int64))):
        src = (
            f'graph "outer"\nv0: {dtype}[n, 1] = input "a"\nv1: {dtype}[1, m] = input "b"\n'
            f'v2: {dtype}[n, m] = mul v0, v1\noutput "y" = v2\n'
        )
        f = kiln.compile(src, format="kiln", tier="vm")
        with pytest.raises(MemoryError, match="output `y` of 4000000000000 elements"):
            f(make(2_000_000).reshape(-1, 1), make(2_000_000).reshape(1, -1))
        assert f(make(3).reshape(-1, 1), make(2).reshape(1, -1)).shape == (3, 2)


def test_huge_and_deep_sources_are_errors_not_crashes():
    deep = "(" * 100_000 + "x" + ")" * 100_000
    with pytest.raises(kiln.KilnError):
        kiln.compile(deep)
    wide = " + ".join(f"x{i}" for i in range(2000))
    f = kiln.compile(wide)
    assert f(*([1.0] * 2000)) == 2000.0


def test_threads_run_one_function_in_parallel(tier):
    f = kiln.compile("sqrt(x) * 2.0 + sin(x)", inputs={"x": "f64[n]"}, tier=tier)
    x = np.linspace(0.0, 100.0, 200_000)
    expected = f(x)
    results = [None] * 4

    def work(i):
        for _ in range(5):
            results[i] = f(x)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        assert bits(r) == bits(expected)


def test_functions_pickle_as_their_source(tier):
    f = kiln.compile("def f(x: float[n]): return x * 3.0", tier=tier)
    g = pickle.loads(pickle.dumps(f))
    assert g.tier == tier
    assert g(np.array([1.0, 2.0])).tolist() == [3.0, 6.0]
    # The in-process cache compiles each pickled source once.
    assert pickle.loads(pickle.dumps(f)) is g


def _square_sum(f, n):
    return float(f(np.arange(float(n))).sum())


def test_functions_travel_to_spawned_processes():
    import multiprocessing as mp

    f = kiln.compile("def f(x: float[n]): return x * x")
    with mp.get_context("spawn").Pool(2) as pool:
        got = pool.starmap(_square_sum, [(f, 10), (f, 100)])
    assert got == [285.0, 328350.0]


def test_properties_and_repr():
    f = kiln.compile("def f(x: float[n], k: int): return x * 2.0, k", tier="llvm")
    assert f.name == "f"
    assert f.inputs == {"x": "f64[n]", "k": "i64"}
    assert list(f.outputs.values()) == ["f64[n]", "i64"]
    assert repr(f) == "<kiln.Function f(x: f64[n], k: i64) -> (out0: f64[n], k: i64) on llvm>"
    assert 'graph "f"' in f.ir
    assert kiln.tiers() == ["interp", "vm", "cranelift", "llvm"]


def test_files_in_every_format(tier):
    nnc = kiln.compile(EXAMPLES / "nnc.py", tier=tier)
    x = np.linspace(-3.0, 3.0, 101)
    d = np.cos(np.sin(x * x)) ** 2
    np.testing.assert_allclose(nnc(x), d + d * d, rtol=1e-15)
    # torch.fx, with the output torch computed.
    case = json.loads((FIXTURES / "fx" / "nnc_fused" / "case.json").read_text())
    fx = kiln.compile(FIXTURES / "fx" / "nnc_fused" / "graph.txt", tier=tier, inputs={"x": "f32[n]"})
    for run in case["runs"]:
        xs = np.array(run["inputs"]["x"]["data"], dtype=np.float32)
        want = np.array(run["outputs"][0]["data"], dtype=np.float32)
        np.testing.assert_allclose(fx(xs), want, rtol=2e-6, atol=1e-6)
    # TensorFlow (a frozen MLP), with the output TensorFlow computed.
    case = json.loads((FIXTURES / "tf" / "mlp_frozen" / "case.json").read_text())
    tf = kiln.compile(FIXTURES / "tf" / "mlp_frozen" / "graph.pb", tier=tier)
    x = np.array(case["inputs"]["x"]["data"], dtype=np.float32).reshape(case["inputs"]["x"]["shape"])
    want = np.array(case["outputs"][0]["data"], dtype=np.float32).reshape(case["outputs"][0]["shape"])
    np.testing.assert_allclose(tf(x), want, rtol=1e-6, atol=1e-7)
    # A path whose format the name does not tell needs format=.
    with pytest.raises(ValueError, match="cannot tell the format"):
        kiln.compile(EXAMPLES / "x.csv")
    with pytest.raises(FileNotFoundError):
        kiln.compile(EXAMPLES / "missing.py")


def test_an_expression_takes_arrays_as_a_ufunc_does():
    f = kiln.compile("x * 2.0 + 1.0")
    assert f(3.0) == 7.0
    x = np.arange(5.0)
    np.testing.assert_array_equal(f(x), x * 2.0 + 1.0)
    np.testing.assert_array_equal(f([1.0, 2.0]), [3.0, 5.0])
    np.testing.assert_array_equal(f(np.arange(7.0)), np.arange(7.0) * 2.0 + 1.0)
    m = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = f(m)
    assert got.dtype == np.float32 and got.shape == (2, 3)
    np.testing.assert_array_equal(got, m * 2.0 + 1.0)
    np.testing.assert_array_equal(f(np.arange(3)), np.arange(3) * 2.0 + 1.0)
    assert f(np.float64(2.0)) == 5.0 and f(np.array(2.0)) == 5.0
    out = np.empty(4)
    assert f(np.arange(4.0), out=out) is out
    np.testing.assert_array_equal(out, np.arange(4.0) * 2.0 + 1.0)
    # Two names, NumPy's broadcasting between different shapes, and a scalar.
    g = kiln.compile("sin(x) + y")
    col, row = np.linspace(0, 1, 2).reshape(2, 1), np.arange(3.0)
    np.testing.assert_array_equal(g(col, row), np.sin(col) + row)
    np.testing.assert_array_equal(g(row, 0.5), np.sin(row) + 0.5)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(f))(x), x * 2.0 + 1.0)
    with pytest.raises(TypeError, match="int8"):
        f(np.arange(3, dtype=np.int8))
    # A name with a type takes what its type says.
    h = kiln.compile("x + 1", inputs={"x": "i64"})
    with pytest.raises(TypeError, match="scalar"):
        h(np.arange(3))
    d = kiln.compile("def d(x):\n    return x * 2.0\n")
    with pytest.raises(TypeError):
        d(np.arange(3.0))
