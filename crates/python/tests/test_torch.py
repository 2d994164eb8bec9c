"""torch.compile(backend="kiln") against eager PyTorch (real torch, CPU)."""

import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
import torch._dynamo
from torch import nn

import kiln
import kiln.torch as kt
from models import BasicBlock, resnet18, write_fx

TIERS = kiln.tiers()


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def close(got, want, rtol=1e-6, atol=1e-7):
    """f32 results within 1e-6 relative of eager (and 1e-7 absolute near 0)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)


def compiled(model, tier, **kw):
    return torch.compile(model, backend="kiln", options={"tier": tier}, **kw)


def nnc(x):
    """The fused function of the fx tutorial's NNC example."""
    a = x * x
    b = torch.sin(a)
    c = torch.cos(b)
    d = c * c
    return d + d * d


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(16, 32),
        nn.ReLU(),
        nn.Linear(32, 32),
        nn.GELU(),
        nn.Linear(32, 8),
        nn.Sigmoid(),
        nn.Linear(8, 4),
        nn.Softmax(dim=-1),
    ).eval()


def test_backend_registered_by_entry_point():
    # A fresh interpreter that never imports kiln itself.
    code = (
        "import sys, torch\n"
        "f = torch.compile(lambda x: torch.sin(x) * 2, backend='kiln')\n"
        "r = f(torch.tensor([0.5, 1.0]))\n"
        "assert 'kiln' in sys.modules\n"
        "print(r.tolist())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    got = eval(out.stdout.strip().splitlines()[-1])
    want = (torch.sin(torch.tensor([0.5, 1.0])) * 2).tolist()
    assert got == want


@pytest.mark.parametrize("tier", TIERS)
def test_nnc_function(tier):
    g = torch.Generator().manual_seed(42)
    x = torch.randn(1000, generator=g)
    edges = torch.tensor([0.0, -0.0, 1e-30, 3.0, -7.5, 1e4, float("inf"), float("nan")])
    f = compiled(nnc, tier)
    for inp in (x, edges):
        close(f(inp), nnc(inp))
    assert kt.explain(nnc, x, tier=tier).eager_nodes == []


def test_nnc_identical_bits_across_tiers():
    x = torch.randn(4096, generator=torch.Generator().manual_seed(1))
    results = []
    for tier in TIERS:
        torch._dynamo.reset()
        results.append(compiled(nnc, tier)(x))
    for r in results[1:]:
        assert torch.equal(r.view(torch.int32), results[0].view(torch.int32))


@pytest.mark.parametrize("tier", TIERS)
def test_linear(tier):
    torch.manual_seed(3)
    layer = nn.Linear(20, 7)
    x = torch.randn(5, 20)
    with torch.no_grad():
        close(compiled(layer, tier)(x), layer(x))
    report = kt.explain(layer, x, tier=tier)
    assert report.eager_nodes == [] and report.compiles == 1
    assert {"addmm", "t"} <= {n.target.split(".")[3] for n in report.kiln_nodes}


@pytest.mark.parametrize("tier", TIERS)
def test_mlp_two_batch_sizes(tier):
    model = mlp()
    f = compiled(model, tier)
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for batch in (64, 3, 64, 17):
            x = torch.randn(batch, 16, generator=g)
            close(f(x), model(x))


def same_bits_on_every_tier(model, x):
    """The model compiled on each tier gives the same f32 bits."""
    results = []
    with torch.no_grad():
        for tier in TIERS:
            torch._dynamo.reset()
            results.append(compiled(model, tier)(x))
    for r in results[1:]:
        assert torch.equal(r.view(torch.int32), results[0].view(torch.int32))


def test_mlp_identical_bits_across_tiers():
    same_bits_on_every_tier(mlp(), torch.randn(9, 16, generator=torch.Generator().manual_seed(8)))


class _Block(nn.Module):
    """A ResNet BasicBlock with a strided 1x1 shortcut, then a depthwise
    convolution, ReLU6 and average pooling."""

    def __init__(self):
        super().__init__()
        self.block = BasicBlock(4, 8, 2)
        self.dw = nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=8)
        self.pool = nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)

    def forward(self, x):
        return self.pool(nn.functional.relu6(self.dw(self.block(x))))


def cnn():
    torch.manual_seed(5)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.MaxPool2d(3, stride=2, padding=1),
        _Block(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Dropout(0.5),
        nn.Linear(8, 5),
    )
    # Running statistics other than 0 and 1, so the batch norms compute.
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
    return model.eval()


@pytest.mark.parametrize("tier", TIERS)
def test_cnn_in_eval_mode(tier):
    model = cnn()
    x = torch.randn(2, 3, 19, 17, generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        got = compiled(model, tier)(x)
        want = model(x)
        # Convolutions sum in their own order: compare at the output's scale.
        close(got, want, rtol=1e-5, atol=1e-6 * want.abs().max().item())
        report = kt.explain(model, x, tier=tier)
    assert report.eager_nodes == [], str(report)
    ops = {n.target.split(".")[3] for n in report.kiln_nodes if n.target.startswith("torch.ops.aten.")}
    assert {"convolution", "max_pool2d_with_indices", "avg_pool2d"} <= ops, ops


def test_cnn_identical_bits_across_tiers():
    same_bits_on_every_tier(cnn(), torch.randn(3, 3, 16, 16, generator=torch.Generator().manual_seed(10)))


def test_resnet18_from_fx_text(tmp_path):
    """ResNet-18 exported as a user exports it (print(gm) and the
    state_dict) runs through kiln.compile on both JIT tiers: the batch norms
    fold into the convolutions' weights, the result is torch's at the
    output's scale, and the tiers agree bit for bit."""
    model = resnet18()
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(2))
    path = write_fx(model, tmp_path)
    with torch.no_grad():
        want = model(x)
    x2 = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want2 = model(x2)
    results = []
    scratch = []
    for tier in ("cranelift", "llvm"):
        f = kiln.compile(path, tier=tier, inputs={"input": "f32[1, 3, 224, 224]"})
        got = torch.from_numpy(np.asarray(f(x.numpy())))
        close(got, want, rtol=1e-4, atol=1e-5 * want.abs().max().item())
        # The second call runs in the scratch the first one left.
        got2 = torch.from_numpy(np.asarray(f(x2.numpy())))
        close(got2, want2, rtol=1e-4, atol=1e-5 * want2.abs().max().item())
        results.append(got)
        scratch.append(f.scratch_bytes)
    assert torch.equal(results[0].view(torch.int32), results[1].view(torch.int32))
    # Activations share buffers by liveness: the largest activation (conv1's
    # 64x112x112 floats, 3.2 MB) bounds each tier's scratch from below, and
    # all of the network's intermediates (31 MB, one buffer each) from
    # above. The tiers' scratch differs: the LLVM tier runs convolutions as
    # matmul panels (their planes for every output channel, packed panels),
    # Cranelift as wide-row taps.
    largest = 64 * 112 * 112 * 4
    for bytes_ in scratch:
        assert largest < bytes_ < 4 * largest, scratch


def test_softmax_and_log_softmax_f64():
    def f(x):
        return torch.softmax(x, dim=1), torch.log_softmax(x * 3, dim=0).sum(dim=1)

    x = torch.randn(6, 5, dtype=torch.float64)
    for got, want in zip(compiled(f, "cranelift")(x), f(x)):
        close(got, want, rtol=1e-12, atol=1e-15)


class WithSort(nn.Module):
    def forward(self, x):
        y = torch.sin(x) * 2
        v, i = torch.sort(y, dim=1)
        return v + 1, i * 2


def test_unsupported_op_falls_back_to_eager():
    model = WithSort()
    x = torch.randn(4, 6)
    got = compiled(model, "cranelift")(x)
    want = model(x)
    close(got[0], want[0])
    assert torch.equal(got[1], want[1])
    report = kt.explain(model, x)
    where = {n.name: n.ran_on for n in report.nodes}
    assert where["sort"] == "eager" and where["sin"] == "kiln" and where["add"] == "kiln"
    assert "aten.sort" in next(n.reason for n in report.nodes if n.name == "sort")
    assert "sort" in str(report) and "kiln" in str(report)


def test_max_along_a_dim_runs_eager_and_max_of_all_on_kiln():
    def f(x):
        return x.max(dim=1).values * 2, torch.max(x) + 1, torch.maximum(x, x * -1)

    x = torch.randn(5, 3)
    for got, want in zip(compiled(f, "cranelift")(x), f(x)):
        close(got, want)
    where = {n.target: n.ran_on for n in kt.explain(f, x).nodes}
    assert where["torch.ops.aten.max.dim"] == "eager"
    assert where["torch.ops.aten.max.default"] == "kiln"
    assert where["torch.ops.aten.maximum.default"] == "kiln"


def test_unsupported_dtype_runs_eager():
    def f(x):
        return torch.sin(x) + 1

    x = torch.randn(8).to(torch.float16)
    assert torch.equal(compiled(f, "cranelift")(x), f(x))
    report = kt.explain(f, x)
    assert report.kiln_nodes == [] and "float16" in report.nodes[0].reason


def test_arguments_kiln_refuses_fall_back_with_warning():
    # An integer power with a tensor exponent: the importer refuses it when
    # it compiles, so that partition runs in eager PyTorch.
    def f(a, b):
        return (a**b) + 1

    a = torch.tensor([2, 3, 4])
    b = torch.tensor([3, 2, 1])
    with pytest.warns(RuntimeWarning, match="runs in eager PyTorch"):
        got = compiled(f, "cranelift")(a, b)
    assert torch.equal(got, f(a, b))


def test_integer_division_by_zero_is_an_exception():
    def f(a, b):
        return torch.floor_divide(a, b) + 1

    a = torch.tensor([7, -7, 5], dtype=torch.int64)
    ok = torch.tensor([2, 2, -3], dtype=torch.int64)
    fn = compiled(f, "cranelift")
    assert torch.equal(fn(a, ok), f(a, ok))
    threads = kiln.get_num_threads()
    with pytest.raises(ZeroDivisionError):
        fn(a, torch.tensor([2, 0, 1], dtype=torch.int64))
    # The call's thread count is given back on the error too.
    assert kiln.get_num_threads() == threads
    assert torch.equal(fn(a, ok), f(a, ok))


def test_a_graph_called_with_other_strides_reads_each_as_it_is():
    # The backend's callable, without Dynamo's guards in front: one kiln
    # graph sees a dense `b`, a transposed one, a strided slice, then the
    # first two again (each signature read by its own plan, kept).
    def f(a, b):
        return (a @ b + 1.0,)

    gm = torch.fx.symbolic_trace(f)
    g = torch.Generator().manual_seed(0)
    ints = lambda *shape: torch.randint(-4, 5, shape, generator=g).float()  # noqa: E731
    a, b = ints(3, 4), ints(4, 5)
    fn = kt.backend(gm, [a, b], options={"tier": "cranelift"})
    for x in (b, ints(5, 4).t(), ints(4, 10)[:, ::2], b, ints(5, 4).t()):
        (got,) = fn(a, x)
        assert torch.equal(got, a @ x + 1.0)  # small integers: every order of sums exact


_RANDOM_OPS = [
    "{x} + {y}",
    "{x} - {y}",
    "{x} * {y}",
    "torch.maximum({x}, {y})",
    "torch.relu({x})",
    "torch.tanh({x})",
    "torch.exp(-{x} * {x})",
    "{x}.t()",
    "{x} - {x}.amax(-1, keepdim=True)",
    "torch.log_softmax({x}, -1)",
    "torch.softmax({x}, 0)",
    "{x} @ {y}",
    "{x}.sum(0, keepdim=True) * {y}",
    "({x} - {x}.mean(-1, keepdim=True)) * {y}",
]


def _random_program(rng):
    """A random function of three square f64 tensors: a few of
    `_RANDOM_OPS` over the inputs and earlier results, returning the last,
    and maybe a transpose of it or of an input, a detached result, an
    input or another result."""
    names, lines = ["a", "b", "c"], []
    for i in range(int(rng.integers(2, 7))):
        op = _RANDOM_OPS[int(rng.integers(len(_RANDOM_OPS)))]
        x, y = (names[int(rng.integers(len(names)))] for _ in range(2))
        lines.append(f"    v{i} = " + op.format(x=x, y=y))
        names.append(f"v{i}")
    computed = names[3:]
    outs = [computed[-1]]
    for extra in rng.permutation(["t", "detach", "input", "another"])[: int(rng.integers(1, 4))]:
        v = computed[int(rng.integers(len(computed)))]
        # A transpose of the returned `outs[0]` (or of an input) is a view.
        t = f"{rng.choice([computed[-1], 'a'])}.t()"
        outs.append({"t": t, "detach": f"{v}.detach()", "input": "b", "another": v}[extra])
    return "def f(a, b, c):\n" + "\n".join(lines) + f"\n    return ({', '.join(outs)},)\n"


def _layout(rng, n):
    """An `n × n` f64 tensor dense, transposed or a strided slice."""
    kind = int(rng.integers(3))
    base = torch.from_numpy(rng.standard_normal((n, 2 * n) if kind == 2 else (n, n)))
    return [base, base.t(), base[:, ::2]][kind]


def test_random_programs_agree_across_tiers_and_with_eager_whatever_the_layouts():
    # The backend's own paths (a call's plan by signature, permuted inputs
    # read in place, outputs returned as views, inputs passed through) on
    # random programs, each called with several layouts of its inputs
    # through one compiled callable: every tier gives the interpreter's
    # bits, and eager's values to rounding.
    rng = np.random.default_rng(38)
    for _ in range(30):
        src = _random_program(rng)
        scope: dict = {"torch": torch}
        exec(src, scope)  # noqa: S102 - the test's own generated source
        f = scope["f"]
        # Now and then large enough that a transposed output is a view
        # (`_VIEW_OUTPUT_BYTES`).
        n = int(rng.integers(96, 100)) if rng.random() < 0.4 else int(rng.integers(3, 24))
        calls = [[_layout(rng, n) for _ in range(3)] for _ in range(4)]
        calls.append(calls[0])  # a signature seen before
        gm = torch.fx.symbolic_trace(f)
        fns = {tier: kt.backend(gm, calls[0], options={"tier": tier}) for tier in TIERS}
        for args in calls:
            want = f(*args)
            reference = fns["interp"](*args)
            for tier, fn in fns.items():
                got = fn(*args)
                for k, (g, r, w) in enumerate(zip(got, reference, want)):
                    where = f"{tier}, output {k}, strides {[a.stride() for a in args]}:\n{src}"
                    assert torch.equal(g, r), where
                    torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-12, msg=lambda m: f"{where}{m}")


def test_bad_options():
    gm = torch.fx.symbolic_trace(nnc)
    with pytest.raises(ValueError, match="tier must be one of"):
        kt.backend(gm, [torch.ones(2)], options={"tier": "gpu"})
    with pytest.raises(ValueError, match="unknown kiln backend options"):
        kt.backend(gm, [torch.ones(2)], options={"fast": True})
    with pytest.raises(TypeError, match="optimize must be a bool"):
        kt.backend(gm, [torch.ones(2)], options={"optimize": "yes"})
    with pytest.raises(Exception, match="tier must be one of"):
        compiled(nnc, "gpu")(torch.ones(2))


# The ops transformers are built of: each on every tier against eager, with
# the same bits on every tier.


class Lookups(nn.Module):
    """embedding, index_select and gather (torch's take_along_dim) with
    int64 and int32 indices, and position ids from arange."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(50, 6)
        self.pos = nn.Embedding(12, 6)

    def forward(self, ids, cols, picks):
        positions = torch.arange(ids.shape[1]).unsqueeze(0)
        h = self.emb(ids) + self.pos(positions)
        h = torch.index_select(h, 2, cols)
        return h, torch.gather(h, 1, picks), torch.gather(h, 2, picks.transpose(1, 2)[:, :, :2] % 4)


def lookup_inputs(bad=None):
    g = torch.Generator().manual_seed(4)
    ids = torch.randint(0, 50, (2, 12), generator=g)
    cols = torch.tensor([5, 0, 0, 3], dtype=torch.int32)
    picks = torch.randint(0, 12, (2, 3, 4), generator=g)
    if bad == "ids":
        ids[1, 7] = 50
    elif bad == "cols":
        cols[2] = -1
    elif bad == "picks":
        picks[0, 2, 1] = 12
    return ids, cols, picks


@pytest.mark.parametrize("tier", TIERS)
def test_embedding_index_select_gather(tier):
    model = Lookups().eval()
    x = lookup_inputs()
    with torch.no_grad():
        got = compiled(model, tier)(*x)
        want = model(*x)
    for g, w in zip(got, want):
        assert torch.equal(g, w)  # copies: exactly eager's values


@pytest.mark.parametrize("bad", ["ids", "cols", "picks"])
def test_index_out_of_range_is_an_index_error(bad):
    """An index outside its axis fails the call, as eager's IndexError
    does (kiln.IndexOutOfRangeError is one), and never reads out of
    bounds; the next good call works."""
    model = Lookups().eval()
    fn = compiled(model, "cranelift")
    with torch.no_grad():
        fn(*lookup_inputs())
        # (eager's gather raises a RuntimeError, its embedding and
        # index_select an IndexError)
        with pytest.raises((IndexError, RuntimeError), match="out of"):
            model(*lookup_inputs(bad))
        with pytest.raises(kiln.IndexOutOfRangeError, match="index out of range"):
            fn(*lookup_inputs(bad))
        assert torch.equal(fn(*lookup_inputs())[0], model(*lookup_inputs())[0])


def moments(x):
    v, m = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
    v1 = torch.var(x, dim=(0, 2))
    s, m2 = torch.std_mean(x, dim=1, unbiased=True)
    return (x - m) / torch.sqrt(v + 1e-5), v1, s, m2, torch.std(x, correction=3)


@pytest.mark.parametrize("tier", TIERS)
def test_var_mean_std_and_layer_norm(tier):
    x = torch.randn(3, 5, 7, generator=torch.Generator().manual_seed(2)) * 3 + 1
    ln = nn.LayerNorm(7).eval()
    with torch.no_grad():
        for g, w in zip(compiled(moments, tier)(x), moments(x)):
            close(g, w, rtol=2e-6, atol=1e-6)
        torch._dynamo.reset()
        close(compiled(ln, tier)(x), ln(x), rtol=2e-6, atol=1e-6)


def attention(q, k, v, bool_mask, float_mask):
    F = torch.nn.functional
    return (
        F.scaled_dot_product_attention(q, k, v),
        F.scaled_dot_product_attention(q, k, v, is_causal=True),
        F.scaled_dot_product_attention(q, k, v, attn_mask=bool_mask),
        F.scaled_dot_product_attention(q, k, v, attn_mask=float_mask, scale=0.3),
    )


def attention_inputs():
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 3, 6, 8, generator=g) for _ in range(3))
    bool_mask = torch.rand(6, 6, generator=g) > 0.3
    bool_mask[:, 0] = True  # every query keeps a key
    return q, k, v, bool_mask, torch.randn(2, 1, 6, 6, generator=g)


@pytest.mark.parametrize("tier", TIERS)
def test_scaled_dot_product_attention(tier):
    x = attention_inputs()
    with torch.no_grad():
        for g, w in zip(compiled(attention, tier)(*x), attention(*x)):
            close(g, w, rtol=1e-5, atol=1e-6)


def test_attention_identical_bits_across_tiers():
    x = attention_inputs()
    results = []
    with torch.no_grad():
        for tier in TIERS:
            torch._dynamo.reset()
            results.append(compiled(attention, tier)(*x))
    for r in results[1:]:
        for a, b in zip(r, results[0]):
            assert torch.equal(a.view(torch.int32), b.view(torch.int32))


def test_cat_skips_empty_1d_and_as_strided_is_a_view():
    """torch's cat skips a 1-D tensor of no elements (GPT-2's empty cache);
    an as_strided that reads a contiguous tensor in order is a reshape."""

    def f(x):
        y = torch.cat([torch.tensor([]), x.transpose(0, 1)], dim=-2)
        m = y.mean(dim=(-1, -2), keepdim=True)
        return torch.as_strided(m, (4, 1, 1), (1, 4, 4)) * 2 + y

    x = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(6))
    e = kt.explain(f, x)
    assert not e.eager_nodes, str(e)
    close(e.output, f(x))


def indexing(x, i, j):
    """Advanced indexing by integer tensors (negative ones count from the
    end) and the filled tensors models build."""
    a = x[i.unsqueeze(1), j]
    b = x[:, j]
    c = x[i]
    fills = torch.full((2, 3), 1.5) + torch.ones(3) - x.new_zeros((2, 1)) * torch.scalar_tensor(2.0)
    # The functional `fill` of an `empty_like` (how the export tracer writes
    # a `full_like`).
    fills = fills.sum() + torch.ops.aten.fill.Scalar(torch.empty_like(x), 2.5)
    return a, b, c, fills, torch.zeros_like(x) + x.new_full((5,), 7.0), x.new_ones((4, 1), dtype=torch.int64)


@pytest.mark.parametrize("tier", TIERS)
def test_advanced_indexing_and_filled_tensors(tier):
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(7))
    i = torch.tensor([3, -1])
    j = torch.tensor([0, -5, 4], dtype=torch.int32)
    e = kt.explain(indexing, x, i, j, tier=tier)
    assert not e.eager_nodes, str(e)
    for g, w in zip(e.output, indexing(x, i, j)):
        assert torch.equal(g, w)
    fn = compiled(indexing, tier)
    with pytest.raises(IndexError):
        indexing(x, i, torch.tensor([0, 5, 1], dtype=torch.int32))
    with pytest.raises(kiln.IndexOutOfRangeError):
        fn(x, i, torch.tensor([0, 5, 1], dtype=torch.int32))
    with pytest.raises(kiln.IndexOutOfRangeError):
        fn(x, torch.tensor([3, -5]), j)


def masks_and_pads(x, scores):
    F = torch.nn.functional
    return (
        torch.tril(x, 1),
        torch.triu(x, -1),
        F.pad(x, (1, -1, 2, 0), value=3.0),
        F.pad(x, (0, 2)),
        torch.ops.aten._safe_softmax(scores, -1),
    )


@pytest.mark.parametrize("tier", TIERS)
def test_triangles_pads_and_safe_softmax(tier):
    # What a causal language model's mask is made of; `_safe_softmax` gives
    # 0, not NaN, along a row masked whole.
    x = torch.randn(2, 5, 4, generator=torch.Generator().manual_seed(8))
    scores = torch.randn(3, 6, generator=torch.Generator().manual_seed(9))
    scores[1] = float("-inf")
    scores[2, :3] = float("-inf")
    with torch.no_grad():
        got = compiled(masks_and_pads, tier)(x, scores)
        want = masks_and_pads(x, scores)
    for g, w in zip(got[:4], want[:4]):
        assert torch.equal(g, w)  # selects and copies: eager's values
    assert torch.equal(got[4][1], torch.zeros(6))
    close(got[4], want[4])


def tensor_clamps(x, lo, hi):
    return torch.clamp(x, min=lo, max=hi), x.clamp_min(lo), x.clamp_max(hi)


@pytest.mark.parametrize("tier", TIERS)
def test_clamps_by_tensors(tier):
    # ATen's clamp.Tensor, clamp_min.Tensor and clamp_max.Tensor: torch's
    # maximum and minimum, a NaN bound giving NaN, `-0.0` kept on a tie.
    nan = float("nan")
    x = torch.tensor([[-0.0, 1.0, nan, 5.0], [0.0, -2.0, 3.0, -0.0]])
    lo = torch.tensor([0.0, nan, 0.5, -1.0])
    hi = torch.tensor([[0.5], [0.0]])
    with torch.no_grad():
        got = compiled(tensor_clamps, tier)(x, lo, hi)
        want = tensor_clamps(x, lo, hi)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)
        assert torch.equal(g.signbit(), w.signbit())


def capture_compiles(monkeypatch):
    """The `types` and outputs of every program the backend compiles."""
    seen = []
    compile_fx = kt._kiln.compile_fx

    def spy(nodes, output, *rest):
        seen.append(({n[0] for n in nodes}, [o[1] for o in output], rest[3]))
        return compile_fx(nodes, output, *rest)

    monkeypatch.setattr(kt._kiln, "compile_fx", spy)
    return seen


@pytest.mark.parametrize("tier", TIERS)
def test_permuted_inputs_are_read_where_they_are(tier, monkeypatch):
    # A transposed input and a 3-D permutation are read as the dense
    # tensors they permute (kiln permutes them back), not copied; an
    # expanded input is not a permutation and is copied densely. Values
    # are eager's bits (elementwise ops).
    seen = capture_compiles(monkeypatch)

    def f(a, b, c):
        return a * 2.0 + b.sum(0), b * c

    g = torch.Generator().manual_seed(5)
    a = torch.randn(5, 3, generator=g).t()  # [3, 5], strides (1, 3)
    b = torch.randn(4, 5, 3, generator=g).permute(0, 2, 1)  # [4, 3, 5]
    c = torch.randn(1, 5, generator=g).expand(3, 5)
    got = compiled(f, tier)(a, b, c)
    want = f(a, b, c)
    for x, y in zip(got, want):
        assert torch.equal(x, y)
    ((_, _, types),) = seen
    # aot_autograd names the inputs arg0_1, arg1_1, arg2_1.
    assert list(types.values()) == ["f32[5, 3]", "f32[4, 5, 3]", "f32[3, 5]"], types
    dense = [name.endswith("__kiln_dense") for name in types]
    assert dense == [True, True, False], types


def test_transposed_weights_are_views_not_outputs(monkeypatch):
    # aot_autograd saves each `Linear`'s transposed weight for the
    # backward: the forward returns a large one as a view of the weight (as
    # eager does) rather than kiln writing a transposed copy, and the
    # backward reads it as the weight itself; a small one (under 64 KiB)
    # kiln copies, cheaper than the Python around a view. The gradients are
    # eager's.
    seen = capture_compiles(monkeypatch)
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(128, 160), nn.Tanh(), nn.Linear(160, 3))
    twin = nn.Sequential(nn.Linear(128, 160), nn.Tanh(), nn.Linear(160, 3))
    twin.load_state_dict(model.state_dict())
    x = torch.randn(4, 128, generator=torch.Generator().manual_seed(4))
    grads = []
    for run in (compiled(model, "cranelift"), twin):
        xg = x.clone().requires_grad_()
        run(xg).square().sum().backward()
        grads.append(xg.grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-5, atol=1e-6)
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)
    (_, fw_outputs, _), (_, _, bw_types) = seen
    transposes = [n for n in fw_outputs if n == "t" or n.startswith("t_")]
    assert transposes == ["t_1"], fw_outputs
    dense = {k: v for k, v in bw_types.items() if k.endswith("__kiln_dense")}
    assert list(dense.values()) == ["f32[160, 128]"], bw_types


def test_identical_outputs_are_computed_and_returned_once(monkeypatch):
    # Three projections of one 3-D input, as attention's query, key and
    # value: aot_autograd saves the input's `view` three times (one a
    # projection). kiln writes it once; the other two are views of it. The
    # gradients are eager's.
    seen = capture_compiles(monkeypatch)

    class QKV(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v = (nn.Linear(8, 8) for _ in range(3))

        def forward(self, x):
            h = torch.tanh(x)
            return (self.q(h) * self.k(h) + self.v(h)).sum()

    torch.manual_seed(6)
    model, twin = QKV(), QKV()
    twin.load_state_dict(model.state_dict())
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(7))
    compiled(model, "cranelift")(x).backward()
    twin(x).backward()
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)
    (_, fw_outputs, _) = seen[0]
    views = [n for n in fw_outputs if n == "view" or n.startswith("view_")]
    assert len(views) == 1, fw_outputs
