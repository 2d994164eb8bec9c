"""NumPy's tensor operators in the Python subset (`@`, `.T`, `reshape`,
reductions with `axis`/`keepdims`, basic slicing, `concatenate`/`stack`,
`where`), through @kiln.jit and kiln.compile, against NumPy itself."""

import numpy as np
import pytest

import kiln

TIERS = kiln.tiers()
RNG = np.random.default_rng(11)


def linear_relu(x, w, b):
    return np.maximum(x @ w + b, 0.0)


def layout(x):
    return x.T, x.reshape(-1)[2:7], x.reshape((3, 4)).T[::2], x[1], x[:, 1:3], x[None, ..., 0], x.flatten()


def backwards(x, v):
    return (
        x[::-1],
        x[:, ::-1],
        x[::-2, 1:],
        x[4:0:-2, ::-3],
        x[-1:-5:-1, -2],
        x[::-1].T,
        x[::-1] @ x.T[:, ::-1],
        np.sum(x[::-1, ::2] * 2.0, axis=0),
        v[::-1] + v,
        v[100:-100:-3],
    )


def reductions(x):
    return (
        np.sum(x, axis=0),
        x.sum(axis=1, keepdims=True),
        np.mean(x, axis=(0, 1)),
        x.max(axis=-1),
        np.min(x, 0, keepdims=True),
        np.amax(x),
        x.prod(axis=1),
        np.sum(x),
    )


def joins(a, b):
    return (
        np.concatenate([a, b], axis=1),
        np.concatenate((a, b * 2)),
        np.stack([a, b]),
        np.stack((a, b), axis=-1),
        np.where(a > b, a, b - 1.0),
    )


def products(a, m, v):
    return a @ m, np.matmul(v, m), np.dot(a, v[:3]), a.dot(m), (a @ m).T.sum(axis=0)


CASES = [
    (linear_relu, lambda: (RNG.standard_normal((5, 4)), RNG.standard_normal((4, 3)), RNG.standard_normal(3))),
    (layout, lambda: (RNG.standard_normal((4, 3)),)),
    (backwards, lambda: (RNG.standard_normal((6, 4)), RNG.standard_normal(7))),
    (reductions, lambda: (RNG.standard_normal((4, 3)),)),
    (joins, lambda: (RNG.standard_normal((2, 3)), RNG.standard_normal((2, 3)))),
    (products, lambda: (RNG.standard_normal((2, 3)), RNG.standard_normal((3, 3)), RNG.standard_normal(3))),
]


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("fn,make", CASES, ids=[f.__name__ for f, _ in CASES])
def test_matches_numpy(tier, fn, make):
    args = make()
    got = kiln.jit(tier=tier)(fn)(*args)
    want = fn(*args)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = np.asarray(g)
        assert g.shape == np.shape(w) and g.dtype == np.asarray(w).dtype, (g.shape, np.shape(w), g.dtype)
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def test_dtypes_follow_numpy():
    def f(a, b, i, t):
        raise AssertionError("unused")

    ints = np.arange(6, dtype=np.int32).reshape(2, 3)
    f32 = np.ones((2, 3), dtype=np.float32)
    g = kiln.compile(
        "def g(a: f32[2, 3], b: f64[3, 2], i: i32[2, 3], t: bool[2, 3]):\n"
        "    return a @ b, np.sum(i, axis=0), np.mean(i, axis=1), np.sum(t, axis=0), np.concatenate([a, i])\n"
    )
    t = np.array([[True, False, True], [True, True, False]])
    b = np.ones((3, 2))
    for got, want in zip(g(f32, b, ints, t), (f32 @ b, np.sum(ints, axis=0), np.mean(ints, axis=1),
                                              np.sum(t, axis=0), np.concatenate([f32, ints]))):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want)


def test_identical_bits_across_tiers():
    x, w, b = RNG.standard_normal((64, 32)), RNG.standard_normal((32, 16)), RNG.standard_normal(16)
    results = [kiln.jit(tier=t)(linear_relu)(x, w, b) for t in TIERS]
    for r in results[1:]:
        assert r.tobytes() == results[0].tobytes()


def test_symbolic_leading_dim():
    mlp = kiln.jit(dynamic=("x",))(linear_relu)
    w, b = RNG.standard_normal((4, 3)), RNG.standard_normal(3)
    for rows in (1, 7, 100):
        x = RNG.standard_normal((rows, 4))
        np.testing.assert_allclose(mlp(x, w, b), linear_relu(x, w, b), rtol=1e-12)
    assert len(mlp.signatures) == 1
    with pytest.raises(kiln.ParseError, match="symbolic dimension"):
        kiln.jit(dynamic=True)(linear_relu)(RNG.standard_normal((3, 4)), w, b)
    with pytest.raises(TypeError, match="dynamic must be"):
        kiln.jit(dynamic="x")(linear_relu)


@pytest.mark.parametrize(
    "body,message",
    [
        ("return x[::0]", "slice step cannot be zero"),
        ("return x[1:1]", "is empty"),
        ("return x[0:2:-1]", "is empty"),
        ("return x[x > 0]", "integer literals or slices"),
        ("return x.sum(axis=n)", "`axis` must be integer literals"),
        ("return x.reshape(5, 5)", "reshape"),
        ("return x.frobnicate()", "unknown method `.frobnicate`"),
        ("return x.shape", "unknown attribute `.shape`"),
        ("return np.sum(x, axis=2)", "out of range"),
        ("return np.sum(x, axis=(0, 0))", "repeated"),
        ("return np.concatenate(x)", "list or tuple"),
        ("return x @ 2.0", "rank 1 or more"),
        ("return np.sum(x, where=x)", "no keyword argument `where`"),
        ("return sin(x, out=x)", "takes no keyword arguments"),
        ("return x[0, 0, 0]", "3 indices"),
        ("return np.transpose(x, (0, 0))", "repeats"),
        ("return x.sum(keepdims=1)", "True or False"),
    ],
)
def test_bad_uses_are_located_errors(body, message):
    src = f"def f(x: f64[2, 3], n: int):\n    {body}\n"
    with pytest.raises(kiln.ParseError, match=message) as e:
        kiln.compile(src)
    assert e.value.lineno == 2


def test_syntax_errors():
    for src, message in [
        ("x[]", "empty index"),
        ("np.sum(x, axis=0, axis=1)", "repeated"),
        ("np.sum(axis=0, x)", "positional argument follows"),
        ("(x)(1)", "only named functions"),
    ]:
        with pytest.raises(kiln.ParseError, match=message):
            kiln.compile(src)


@pytest.mark.parametrize("size", [0, 3, 16, 17, 200])
def test_membership_matches_np_isin(tier, size):
    rng = np.random.default_rng(size)
    values = sorted({int(v) for v in rng.integers(-50, 50, size)})
    ints = rng.integers(-60, 60, 500)
    floats = np.concatenate([ints / 2.0, [np.nan, -0.0, 0.0, np.inf]])
    listed = ", ".join(str(v) for v in values) or ""
    cases = [
        (f"def f(x: int[n]): return x in ({listed}{',' if len(values) == 1 else ''})", ints, False),
        (f"def f(x: float[n]): return x not in [{listed}]", floats, True),
        (f"def f(x: f32[n]): return np.isin(x, [{listed}], invert=True)", floats.astype(np.float32), True),
        (f"def f(x: int[n]): return x.isin([{listed + ', ' if listed else ''}0.5])", ints, False),
    ]
    for src, x, invert in cases:
        f = kiln.compile(src, tier=tier)
        want = np.isin(x, values + ([0.5] if "0.5" in src else []), invert=invert)
        np.testing.assert_array_equal(f(x), want, err_msg=src)


def test_membership_errors_are_located():
    for src, says in [
        ("def f(x: float[n]): return x in x", "a tuple or list of numbers"),
        ("def f(x: float[n]): return x in (1, x)", "number literals only"),
        ("def f(x: float[n]): return 1 < x in (1, 2)", "cannot be chained"),
    ]:
        with pytest.raises(kiln.ParseError, match=says):
            kiln.compile(src)
