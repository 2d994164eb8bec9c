"""Derivatives from Python: kiln.compile(grad=..., jacobian=...) against
torch.autograd (f64 and f32) at random points and at the points where a
function has no derivative, bit-identical across tiers; bad requests are
kiln.CompileError."""

import numpy as np
import pytest
import torch

import kiln


def same(a, b):
    """Equal bits, every NaN equal (payloads are unspecified)."""
    a, b = np.asarray(a), np.asarray(b)
    nan = np.isnan(a)
    return (
        a.dtype == b.dtype
        and np.array_equal(nan, np.isnan(b))
        and np.ascontiguousarray(a[~nan]).tobytes() == np.ascontiguousarray(b[~nan]).tobytes()
    )


def on_every_tier(source, args, **options):
    """The outputs on every tier, checked bit-identical; the first tier's."""
    outs = []
    for tier in kiln.tiers():
        f = kiln.compile(source, tier=tier, **options)
        out = f(*args)
        outs.append(out if isinstance(out, tuple) else (out,))
    for other in outs[1:]:
        for a, b in zip(outs[0], other):
            assert same(a, b), (source, a, b)
    return outs[0]


# (kiln's Python subset, torch's, the domain of x)
UNARY = [
    ("sin(x)", torch.sin, (-3, 3)),
    ("cos(x)", torch.cos, (-3, 3)),
    ("tan(x)", torch.tan, (-1.2, 1.2)),
    ("arcsin(x)", torch.asin, (-0.9, 0.9)),
    ("arccos(x)", torch.acos, (-0.9, 0.9)),
    ("arctan(x)", torch.atan, (-3, 3)),
    ("sinh(x)", torch.sinh, (-3, 3)),
    ("cosh(x)", torch.cosh, (-3, 3)),
    ("tanh(x)", torch.tanh, (-3, 3)),
    ("arcsinh(x)", torch.asinh, (-3, 3)),
    ("arccosh(x)", torch.acosh, (1.1, 4)),
    ("arctanh(x)", torch.atanh, (-0.9, 0.9)),
    ("exp(x)", torch.exp, (-3, 3)),
    ("exp2(x)", torch.exp2, (-3, 3)),
    ("expm1(x)", torch.expm1, (-3, 3)),
    ("log(x)", torch.log, (0.1, 5)),
    ("log2(x)", torch.log2, (0.1, 5)),
    ("log10(x)", torch.log10, (0.1, 5)),
    ("log1p(x)", torch.log1p, (-0.5, 5)),
    ("sqrt(x)", torch.sqrt, (0.1, 5)),
    ("erf(x)", torch.erf, (-2.5, 2.5)),
    ("erfc(x)", torch.erfc, (-2.5, 2.5)),
    ("abs(x)", torch.abs, (-3, 3)),
    ("floor(x)", torch.floor, (-3, 3)),
    ("sigmoid(x)", torch.sigmoid, (-4, 4)),
    ("x ** 3.0", lambda x: x**3.0, (-2, 2)),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("src,fn,domain", UNARY, ids=[u[0] for u in UNARY])
def test_unary_gradients_match_torch_autograd(src, fn, domain, dtype):
    rng = np.random.default_rng(abs(hash(src)) % 2**32)
    x = rng.uniform(*domain, size=64).astype(dtype)
    name = "f64" if dtype == np.float64 else "f32"
    y, gx = on_every_tier(src, (x,), inputs={"x": f"{name}[n]"}, grad="x")
    assert gx.dtype == dtype and gx.shape == x.shape
    t = torch.tensor(x, requires_grad=True)
    fn(t).sum().backward()
    rtol = 1e-12 if dtype == np.float64 else 2e-5
    np.testing.assert_allclose(gx, t.grad.numpy(), rtol=rtol, atol=rtol)


BINARY = [
    ("a * b", torch.mul, (-3, 3), (-3, 3)),
    ("a / b", torch.div, (-3, 3), (0.5, 3)),
    ("a - b", torch.sub, (-3, 3), (-3, 3)),
    ("a ** b", torch.pow, (0.2, 3), (-2, 2)),
    ("arctan2(a, b)", torch.atan2, (-3, 3), (-3, 3)),
    ("hypot(a, b)", torch.hypot, (-3, 3), (-3, 3)),
    ("maximum(a, b)", torch.maximum, (-3, 3), (-3, 3)),
    ("minimum(a, b)", torch.minimum, (-3, 3), (-3, 3)),
    ("copysign(a, b)", torch.copysign, (-3, 3), (-3, 3)),
    ("fmod(a, b)", torch.fmod, (-3, 3), (0.7, 2)),
    ("remainder(a, b)", torch.remainder, (-3, 3), (0.7, 2)),
]


@pytest.mark.parametrize("src,fn,da,db", BINARY, ids=[b[0] for b in BINARY])
def test_binary_gradients_match_torch_autograd(src, fn, da, db):
    rng = np.random.default_rng(abs(hash(src)) % 2**32)
    a = rng.uniform(*da, size=64)
    b = rng.uniform(*db, size=64)
    _, ga, gb = on_every_tier(src, (a, b), inputs={"a": "f64[n]", "b": "f64[n]"}, grad=("a", "b"))
    ta = torch.tensor(a, requires_grad=True)
    tb = torch.tensor(b, requires_grad=True)
    fn(ta, tb).sum().backward()
    np.testing.assert_allclose(ga, ta.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gb, tb.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_where_torch_has_no_derivative_kiln_gives_torchs_values():
    nan, inf = float("nan"), float("inf")
    cases = [
        ("abs(x)", torch.abs, [0.0, -0.0, nan, 2.0]),
        ("sqrt(x)", torch.sqrt, [0.0, 4.0]),
        ("log(x)", torch.log, [0.0, -1.0]),
        ("floor(x)", torch.floor, [1.0, 2.5]),
        ("round(x)", torch.round, [0.5, 1.5]),
        ("arcsin(x)", torch.asin, [1.0, -1.0]),
        ("arctanh(x)", torch.atanh, [1.0, -1.0]),
    ]
    for src, fn, xs in cases:
        x = np.array(xs)
        _, gx = on_every_tier(src, (x,), inputs={"x": "f64[n]"}, grad="x")
        t = torch.tensor(x, requires_grad=True)
        fn(t).sum().backward()
        np.testing.assert_array_equal(gx, t.grad.numpy(), err_msg=src)
    pairs = [
        ("maximum(a, b)", torch.maximum, [1.0, 2.0, nan], [1.0, 1.0, 1.0]),
        ("minimum(a, b)", torch.minimum, [1.0, 2.0, nan], [1.0, 1.0, 1.0]),
        ("a ** b", torch.pow, [0.0, 0.0, 2.0, 0.0], [0.0, 2.0, 0.0, -1.0]),
        ("copysign(a, b)", torch.copysign, [0.0, -0.0, 3.0], [-1.0, 1.0, -1.0]),
        ("a / b", torch.div, [1.0, 0.0], [0.0, 0.0]),
    ]
    for src, fn, av, bv in pairs:
        a, b = np.array(av), np.array(bv)
        _, ga, gb = on_every_tier(src, (a, b), inputs={"a": "f64[n]", "b": "f64[n]"}, grad=("a", "b"))
        ta = torch.tensor(a, requires_grad=True)
        tb = torch.tensor(b, requires_grad=True)
        fn(ta, tb).sum().backward()
        np.testing.assert_array_equal(ga, ta.grad.numpy(), err_msg=src)
        np.testing.assert_array_equal(gb, tb.grad.numpy(), err_msg=src)
    assert inf in on_every_tier("sqrt(x)", (np.array([0.0]),), inputs={"x": "f64[n]"}, grad="x")[1]


def test_reductions_match_torch_autograd():
    x = np.array([1.0, 3.0, 3.0, 0.5, 2.0])
    for src, fn in [
        ("amax(x)", torch.amax),
        ("amin(x)", torch.amin),
        ("sum(x * x)", lambda t: (t * t).sum()),
        ("mean(x) * x", lambda t: t.mean() * t),
        ("prod(x)", torch.prod),
    ]:
        out = on_every_tier(src, (x,), inputs={"x": "f64[n]"}, grad="x")
        t = torch.tensor(x, requires_grad=True)
        fn(t).sum().backward()
        np.testing.assert_allclose(out[-1], t.grad.numpy(), rtol=1e-14, err_msg=src)
    x0 = np.array([2.0, 0.0, 3.0])
    _, g = on_every_tier("prod(x)", (x0,), inputs={"x": "f64[n]"}, grad="x")
    np.testing.assert_array_equal(g, [0.0, 6.0, 0.0])


def test_a_tensor_function_matches_torch_autograd():
    src = """
def f(x: f64[4, 3], w: f64[3, 2], b: f64[2]):
    h = tanh(x @ w + b)
    return (h * h).sum()
"""
    rng = np.random.default_rng(5)
    x, w, b = rng.normal(size=(4, 3)), rng.normal(size=(3, 2)), rng.normal(size=2)
    loss, gx, gw, gb = on_every_tier(src, (x, w, b), grad=("x", "w", "b"))
    tx, tw, tb = (torch.tensor(v, requires_grad=True) for v in (x, w, b))
    tloss = (torch.tanh(tx @ tw + tb) ** 2).sum()
    tloss.backward()
    assert loss == pytest.approx(tloss.item(), rel=1e-14)
    for got, t in [(gx, tx), (gw, tw), (gb, tb)]:
        assert got.shape == t.shape
        np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-12, atol=1e-14)


def pooled_graph(pool, out_shape, dtype="f64", then="sin"):
    """A `.kiln` graph: `then` of a pool of `x: [2, 3, 7, 5]`."""
    ty = f"{dtype}[{', '.join(map(str, out_shape))}]"
    return (
        f'graph "pool"\nv0: {dtype}[2, 3, 7, 5] = input "x"\nv1: {ty} = {pool}\n'
        f'v2: {ty} = {then} v1\noutput "y" = v2\n'
    )


F = torch.nn.functional
POOLS = [
    ("max_pool2d v0 kernel [2, 2] stride [2, 2]", lambda t: F.max_pool2d(t, 2)),
    (
        "max_pool2d v0 kernel [3, 3] stride [2, 2] pad [1, 1, 1, 1]",
        lambda t: F.max_pool2d(t, 3, 2, 1),
    ),
    (
        "max_pool2d v0 kernel [2, 3] stride [1, 2] pad [1, 1, 1, 1] dilation [2, 2] ceil_mode",
        lambda t: F.max_pool2d(t, (2, 3), (1, 2), 1, dilation=2, ceil_mode=True),
    ),
    (
        "avg_pool2d v0 kernel [3, 2] stride [2, 3] pad [1, 1, 1, 1] ceil_mode",
        lambda t: F.avg_pool2d(t, (3, 2), (2, 3), 1, ceil_mode=True, count_include_pad=False),
    ),
    (
        "avg_pool2d v0 kernel [3, 3] stride [2, 2] pad [1, 1, 1, 1] count_include_pad",
        lambda t: F.avg_pool2d(t, 3, 2, 1),
    ),
]


@pytest.mark.parametrize("pool, fn", POOLS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_pooling_gradients_match_torch_autograd(pool, fn, dtype):
    x = np.random.default_rng(7).normal(size=(2, 3, 7, 5)).astype(dtype)
    t = torch.tensor(x, requires_grad=True)
    torch.sin(fn(t)).sum().backward()
    name = "f64" if dtype == np.float64 else "f32"
    src = pooled_graph(pool, fn(t).shape, name)
    y, gx = on_every_tier(src, (x,), format="kiln", grad="x")
    tol = 1e-13 if dtype == np.float64 else 2e-6
    np.testing.assert_allclose(y, torch.sin(fn(t)).detach().numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(gx, t.grad.numpy(), rtol=tol, atol=tol)


@pytest.mark.parametrize("pool, fn", POOLS[:3])
def test_max_pool_ties_and_nans_take_torchs_taps(pool, fn):
    # Small integers tie in most windows, and a few NaNs: the derivative
    # goes where torch sends it, exactly.
    rng = np.random.default_rng(3)
    x = rng.integers(0, 3, size=(2, 3, 7, 5)).astype(np.float64)
    x.flat[rng.choice(x.size, 12, replace=False)] = np.nan
    x.flat[rng.choice(x.size, 12, replace=False)] = -0.0
    t = torch.tensor(x, requires_grad=True)
    fn(t).sum().backward()
    _, gx = on_every_tier(pooled_graph(pool, fn(t).shape, then="neg"), (x,), format="kiln", grad="x")
    np.testing.assert_array_equal(-gx, t.grad.numpy())


@pytest.mark.parametrize("groups, w_shape, stride", [(3, (3, 1, 3, 3), 1), (3, (6, 1, 2, 2), 2)])
def test_grouped_convolution_gradients_match_torch_autograd(groups, w_shape, stride):
    rng = np.random.default_rng(groups + stride)
    x, w = rng.normal(size=(2, 3, 7, 5)), rng.normal(size=w_shape)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    out = F.conv2d(tx, tw, stride=stride, padding=1, groups=groups)
    torch.tanh(out).sum().backward()
    ty = f"f64[{', '.join(map(str, out.shape))}]"
    src = (
        f'graph "grouped"\nv0: f64[2, 3, 7, 5] = input "x"\n'
        f'v1: f64[{", ".join(map(str, w_shape))}] = input "w"\n'
        f"v2: {ty} = conv2d v0, v1 stride [{stride}, {stride}] pad [1, 1, 1, 1] groups {groups}\n"
        f'v3: {ty} = tanh v2\noutput "y" = v3\n'
    )
    _, gx, gw = on_every_tier(src, (x, w), format="kiln", grad=("x", "w"))
    np.testing.assert_allclose(gx, tx.grad.numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(gw, tw.grad.numpy(), rtol=1e-12, atol=1e-13)


def test_a_scalar_constant_gets_the_sum_over_rows():
    x = np.linspace(-1, 1, 11)
    f = kiln.compile("sin(w * x) + w", inputs={"x": "f64[n]"}, grad=("w", "x"), tier="llvm")
    assert f.outputs == {"out": "f64[n]", "grad_w": "f64", "grad_x": "f64[n]"}
    y, gw, gx = f(0.7, x)
    np.testing.assert_allclose(gw, np.sum(x * np.cos(0.7 * x)) + 11, rtol=1e-14)
    np.testing.assert_allclose(gx, 0.7 * np.cos(0.7 * x), rtol=1e-15)


def test_the_jacobian_of_an_expression_with_respect_to_its_constants():
    x = np.linspace(-2, 2, 101)
    y, d0, d1 = on_every_tier(
        "c0 * x + sin(c1 * x)", (2.0, x, 0.5), inputs={"x": "f64[n]"}, jacobian=("c0", "c1")
    )
    np.testing.assert_array_equal(d0, x)
    np.testing.assert_allclose(d1, x * np.cos(0.5 * x), rtol=1e-15)
    f = kiln.compile("c0 * x + sin(c1 * x)", inputs={"x": "f64[n]"}, jacobian=("c0", "c1"))
    assert list(f.outputs) == ["out", "dout/dc0", "dout/dc1"]


def test_gradients_pickle_and_compile_ahead_of_time():
    import pickle

    f = kiln.compile("x * x * w", grad="x", tier="cranelift")
    g = pickle.loads(pickle.dumps(f))
    assert g(3.0, 2.0) == f(3.0, 2.0) == (18.0, 12.0)
    header = kiln.aot("x * x * w", emit="header", grad="x")
    assert "grad_x" in header


def test_bad_requests_are_compile_errors():
    with pytest.raises(kiln.CompileError, match="input `k` of type i64"):
        kiln.compile("def f(x: float, k: int): return x * float(k)", grad="k")
    with pytest.raises(kiln.CompileError, match="no such input"):
        kiln.compile("x * 2.0", grad="z")
    with pytest.raises(kiln.CompileError, match="name the one to differentiate"):
        kiln.compile("def f(x: float): return x, x * x", grad="x")
    with pytest.raises(kiln.CompileError, match="`nextafter`"):
        kiln.compile("nextafter(x, 1.0)", grad="x")
    with pytest.raises(kiln.CompileError, match="scalar inputs"):
        kiln.compile("x * c", inputs={"x": "f64[n]"}, jacobian="x")
    with pytest.raises(kiln.CompileError, match="not both"):
        kiln.compile("x * c", grad="x", jacobian="c")
    with pytest.raises(TypeError, match="input names"):
        kiln.compile("x * c", grad=[1])
    f = kiln.compile("def f(x: float, y: float): return x * y, x + y", grad="x", grad_of="out1")
    assert f(2.0, 3.0) == (6.0, 5.0, 1.0)
