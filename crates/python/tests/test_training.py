"""Training through torch.compile(backend="kiln"): aot_autograd's backward
graph runs on kiln like the forward graph (eager PyTorch for the ops kiln
does not build, named in one warning); 20 SGD steps match eager's losses
and gradients within 1e-5 relative."""

import os
import warnings

import numpy as np
import pytest
import torch
import torch._dynamo
from torch import nn

import kiln
import kiln.torch as kt


def backend(stats):
    return kt._make_backend("cranelift", True, stats)


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        x = nn.functional.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        x = torch.relu(self.conv2(x))
        return self.fc(x.flatten(1))


def train(model, compiled, x, y, steps=20, lr=0.05):
    """`steps` of SGD on cross-entropy; the losses and the last gradients."""
    return sgd(model, lambda: nn.functional.cross_entropy(compiled(x), y), steps, lr)


def sgd(model, loss, steps=5, lr=0.1):
    """`steps` of SGD on `loss()`; the losses and the last gradients."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        value = loss()
        value.backward()
        opt.step()
        losses.append(value.item())
    return losses, [p.grad.clone() for p in model.parameters()]


def data(*shape, classes, seed):
    """Inputs and labels from their own generators (the same in any test order)."""
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
    y = torch.randint(0, classes, (shape[0],), generator=torch.Generator().manual_seed(seed + 1))
    return x, y


def twins(make):
    torch.manual_seed(11)
    a = make()
    b = make()
    b.load_state_dict(a.state_dict())
    return a, b


def check_training(make, x, y, *, eager_ops=()):
    torch._dynamo.reset()
    model, twin = twins(make)
    stats = kt._Stats()
    kt._BACKWARD_WARNED = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        losses, grads = train(model, torch.compile(model, backend=backend(stats)), x, y)
    want_losses, want_grads = train(twin, twin, x, y)
    assert losses == pytest.approx(want_losses, rel=1e-5)
    assert losses[-1] < losses[0]
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    eager = {r.target for r in stats.nodes.values() if r.ran_on == "eager"}
    assert eager == set(eager_ops), eager
    backward = [w for w in caught if "backward pass" in str(w.message)]
    assert len(backward) == (1 if eager_ops else 0), [str(w.message) for w in backward]
    return stats


def test_an_mlp_trains_on_kiln_forward_and_backward():
    x, y = data(64, 784, classes=10, seed=1)
    make = lambda: nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))  # noqa: E731
    stats = check_training(make, x, y)
    assert stats.lean == 1
    targets = {r.target for r in stats.nodes.values()}
    # The backward graph's own ops ran on kiln: ReLU's (decomposed) and the
    # matmuls of the weight gradients.
    assert "torch.ops.aten.le.Scalar" in targets or "torch.ops.aten.le.Tensor" in targets
    assert "torch.ops.aten.mm.default" in targets


def test_a_plain_training_graph_skips_aot_autograds_runtime(monkeypatch):
    # The MLP's step needs none of aot_autograd's runtime wrappers: kiln's
    # own autograd.Function runs its forward and backward graphs
    # (`_lean_training`), the same graphs, so the same bits as through
    # aot_autograd's runtime, step after step.
    x, y = data(32, 20, classes=5, seed=9)
    make = lambda: nn.Sequential(nn.Linear(20, 16), nn.Tanh(), nn.Linear(16, 5))  # noqa: E731
    runs = []
    for lean in (True, False):
        if not lean:
            monkeypatch.setattr(kt, "_lean_training", lambda *args: None)
        torch._dynamo.reset()
        torch.manual_seed(12)
        model = make()
        stats = kt._Stats()
        losses, grads = train(model, torch.compile(model, backend=backend(stats)), x, y, steps=10)
        assert stats.lean == (1 if lean else 0)
        runs.append((losses, grads, [p.detach().clone() for p in model.parameters()]))
    (losses, grads, params), (want_losses, want_grads, want_params) = runs
    assert losses == want_losses
    for got, want in (*zip(grads, want_grads), *zip(params, want_params)):
        assert torch.equal(got, want)
    # Gradients of gradients are refused, as through aot_autograd.
    torch._dynamo.reset()
    model = make()
    compiled = torch.compile(model, backend=backend(kt._Stats()))
    (g,) = torch.autograd.grad(compiled(x).square().sum(), [model[0].weight], create_graph=True)
    with pytest.raises(RuntimeError):
        torch.autograd.grad(g.sum(), [model[0].weight])


def test_a_lean_backward_takes_tangents_of_any_layout():
    # The tangents autograd hands kiln's own autograd.Function are whatever
    # the loss's backward made: a transposed view, an expanded scalar.
    x, _ = data(32, 20, classes=5, seed=14)
    c = torch.randn(5, 32, generator=torch.Generator().manual_seed(15))
    losses = {
        "transposed": lambda out: (out.t() * c).sum(),
        "expanded": lambda out: out.sum(),
    }
    for name, loss in losses.items():
        torch._dynamo.reset()
        torch.manual_seed(16)
        model, twin = twins(lambda: nn.Sequential(nn.Linear(20, 5), nn.Tanh()))
        stats = kt._Stats()
        loss(torch.compile(model, backend=backend(stats))(x)).backward()
        loss(twin(x)).backward()
        assert stats.lean == 1, name
        for p, q in zip(model.parameters(), twin.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=name)


_TRAIN_OPS = [
    "{x} + {y}",
    "{x} - {y}",
    "{x} * {y}",
    "{x} @ {y}",
    "torch.tanh({x})",
    "torch.sigmoid({x})",
    "torch.relu({x})",
    "torch.exp(-{x} * {x})",
    "torch.maximum({x}, {y})",
    "{x}.t() @ {y}",
    "{x}.sum(0, keepdim=True) * {y}",
    "torch.softmax({x}, -1)",
    "torch.log_softmax({x}, 0)",
    "({x} - {x}.mean(-1, keepdim=True)) * {y}",
    "torch.where({x} > 0, {x}, {y})",
]


def _random_training_program(rng):
    """A random function of an input `x` and two weights `w` and `v` (all
    square f64): a few of `_TRAIN_OPS` over them and earlier results, the
    first reading a weight, returning the last result (plus the first) and
    sometimes another, a transpose of one, or a detached one."""
    names = ["x", "w", "v"]
    lines = [f"    r0 = x @ {rng.choice(['w', 'v'])}"]
    names.append("r0")
    for i in range(1, int(rng.integers(2, 7))):
        op = _TRAIN_OPS[int(rng.integers(len(_TRAIN_OPS)))]
        a, b = (names[int(rng.integers(len(names)))] for _ in range(2))
        lines.append(f"    r{i} = " + op.format(x=a, y=b))
        names.append(f"r{i}")
    outs = [f"{names[-1]} + r0"]  # reads a weight: the loss has gradients
    extra = rng.choice(["none", "another", "t", "detach"])
    other = names[int(rng.integers(3, len(names)))]
    outs += {"none": [], "another": [other], "t": [f"{other}.t()"], "detach": [f"{other}.detach()"]}[extra]
    return "def f(x, w, v):\n" + "\n".join(lines) + f"\n    return ({', '.join(outs)},)\n"


def test_random_training_programs_through_either_runtime(monkeypatch):
    # Random programs' gradients through kiln's own autograd.Function
    # (`_lean_training`, where it takes them) and through aot_autograd's
    # runtime, against eager's: the same bits either way (the same two
    # graphs), eager's values to rounding. KILN_TRAIN_PROGRAMS=N runs N
    # (the differential loop's counterpart for this path).
    import os

    lean_training = kt._lean_training
    rng = np.random.default_rng(int(os.environ.get("KILN_TRAIN_SEED", "38")))
    lean_count = 0
    for _ in range(int(os.environ.get("KILN_TRAIN_PROGRAMS", "25"))):
        src = _random_training_program(rng)
        scope: dict = {"torch": torch}
        exec(src, scope)  # noqa: S102 - the test's own generated source
        f = scope["f"]
        n = int(rng.integers(3, 12))
        # Now and then with symbolic sizes (each call then also at another n).
        dynamic = bool(rng.random() < 0.3)
        x = torch.from_numpy(rng.standard_normal((n, n)))
        weights = [torch.from_numpy(rng.standard_normal((n, n))) for _ in range(2)]
        cs = [torch.from_numpy(rng.standard_normal((n, n))) for _ in range(2)]
        runs = []
        for how in ("lean", "aot", "eager"):
            monkeypatch.setattr(kt, "_lean_training", lean_training if how == "lean" else (lambda *a: None))
            torch._dynamo.reset()
            w, v = (t.clone().requires_grad_() for t in weights)
            stats = kt._Stats()
            fn = f if how == "eager" else torch.compile(f, backend=backend(stats), dynamic=dynamic)
            if dynamic:
                m = n + 1
                ones = [torch.ones(m, m, dtype=torch.float64) for _ in range(3)]
                fn(ones[0], *(t.requires_grad_() for t in ones[1:]))
            outs = fn(x, w, v)
            loss = sum((o * c).sum() for o, c in zip(outs, cs) if o.requires_grad)
            loss.backward()
            runs.append((loss.detach(), w.grad, v.grad, [o.requires_grad for o in outs]))
            lean_count += stats.lean
        (lean, aot, eager) = runs
        for k in range(3):
            got, ref, want = lean[k], aot[k], eager[k]
            assert (got is None) == (want is None) == (ref is None), src
            if want is not None:
                assert torch.equal(got, ref), src
                torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9, msg=lambda m: f"{src}{m}")
        assert lean[3] == aot[3] == eager[3], src
    assert lean_count > 0


class _Returns(nn.Module):
    """A linear layer that also returns what `extra` makes of its input and
    output."""

    def __init__(self, extra):
        super().__init__()
        self.fc = nn.Linear(6, 3)
        self.extra = extra

    def forward(self, x):
        out = self.fc(x)
        return out, self.extra(x, out)


@pytest.mark.parametrize(
    "extra",
    [
        lambda x, out: out.argmax(-1),  # an integer output
        lambda x, out: x * 2.0,  # an output that needs no gradient
        lambda x, out: out.t(),  # an output that is a view of another
        lambda x, out: x.view(-1),  # a view of an input
    ],
    ids=["integer", "no-grad", "view", "input-view"],
)
def test_training_graphs_that_need_aot_autograds_runtime_keep_it(extra):
    # Outputs aot_autograd's runtime wrappers handle keep its path, with
    # the values and gradients of eager; so do a batch norm's running
    # statistics (an input mutated).
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(10))
    torch.manual_seed(13)
    model = _Returns(extra)
    twin = _Returns(extra)
    twin.load_state_dict(model.state_dict())
    torch._dynamo.reset()
    stats = kt._Stats()
    got = torch.compile(model, backend=backend(stats))(x)
    want = twin(x)
    assert stats.lean == 0
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
        assert g.requires_grad == w.requires_grad
    got[0].sum().backward()
    want[0].sum().backward()
    torch.testing.assert_close(model.fc.weight.grad, twin.fc.weight.grad)
    torch._dynamo.reset()
    stats = kt._Stats()
    torch.compile(SmallCNN(), backend=backend(stats))(torch.randn(2, 3, 16, 16)).sum().backward()
    assert stats.lean == 0


def test_tanh_and_gelu_mlps_train_on_kiln():
    x, y = data(16, 12, classes=4, seed=3)
    for act in (nn.Tanh, nn.GELU, nn.Sigmoid):
        make = lambda: nn.Sequential(nn.Linear(12, 8), act(), nn.Linear(8, 4))  # noqa: E731
        check_training(make, x, y)


class StridedCNN(nn.Module):
    """Convolutions (one strided, one dilated), batch norm and ReLU: every
    op of its training, forward and backward, is one kiln builds."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1, dilation=1)
        self.conv3 = nn.Conv2d(16, 16, 3, padding=2, dilation=2)
        self.fc = nn.Linear(16 * 8 * 8, 10)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.conv2(x))
        x = torch.relu(self.conv3(x))
        return self.fc(x.flatten(1))


def test_a_cnn_trains_on_kiln_forward_and_backward():
    x, y = data(8, 3, 16, 16, classes=10, seed=7)
    stats = check_training(StridedCNN, x, y)
    targets = {r.target for r in stats.nodes.values()}
    assert "torch.ops.aten.convolution_backward.default" in targets


def test_a_cnn_with_a_max_pool_trains_on_kiln():
    # The training max pool computes its indices on kiln, and its backward
    # runs there too.
    x, y = data(8, 3, 16, 16, classes=10, seed=5)
    stats = check_training(SmallCNN, x, y)
    targets = {r.target for r in stats.nodes.values()}
    assert "torch.ops.aten.max_pool2d_with_indices_backward.default" in targets
    assert "torch.ops.aten.max_pool2d_with_indices.default" in targets


class PoolingCNN(nn.Module):
    """Overlapping, padded, dilated and ceil-mode max pools and average
    pools (with and without the padding counted): every window geometry
    the pool derivatives handle."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 3, padding=1)
        self.conv2 = nn.Conv2d(6, 6, 3, padding=1)
        self.fc = nn.Linear(6 * 3 * 3 + 6 * 5 * 5, 5)

    def forward(self, x):
        a = torch.relu(self.conv1(x))
        p = nn.functional.max_pool2d(a, 3, stride=2, padding=1)  # 8x8
        p = nn.functional.avg_pool2d(p, 3, stride=2, padding=1, ceil_mode=True)  # 5x5
        q = nn.functional.max_pool2d(a, 2, stride=2, dilation=2, ceil_mode=True)  # 7x7
        q = torch.relu(self.conv2(q))
        q = nn.functional.avg_pool2d(q, 2, stride=3, padding=1, count_include_pad=False)  # 3x3
        return self.fc(torch.cat([q.flatten(1), p.flatten(1)], 1))


def test_max_and_average_pools_of_every_geometry_train_on_kiln():
    x, y = data(4, 3, 15, 15, classes=5, seed=13)
    stats = check_training(PoolingCNN, x, y)
    targets = {r.target for r in stats.nodes.values()}
    assert "torch.ops.aten.avg_pool2d_backward.default" in targets
    assert "torch.ops.aten.max_pool2d_with_indices_backward.default" in targets


class DepthwiseCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 3, padding=1)
        self.depthwise = nn.Conv2d(6, 6, 3, padding=1, groups=6)
        self.fc = nn.Linear(6 * 8 * 8, 4)

    def forward(self, x):
        return self.fc(torch.relu(self.depthwise(torch.relu(self.conv1(x)))).flatten(1))


class GroupedCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 3, padding=1)
        self.grouped = nn.Conv2d(6, 4, 3, stride=2, padding=1, groups=2)
        self.fc = nn.Linear(4 * 4 * 4, 4)

    def forward(self, x):
        return self.fc(torch.relu(self.grouped(torch.relu(self.conv1(x)))).flatten(1))


def test_depthwise_and_grouped_convolutions_train_on_kiln():
    x, y = data(4, 3, 8, 8, classes=4, seed=9)
    for make in (DepthwiseCNN, GroupedCNN):
        stats = check_training(make, x, y)
        targets = {r.target for r in stats.nodes.values()}
        assert "torch.ops.aten.convolution_backward.default" in targets


class EmbeddingMLP(nn.Module):
    def __init__(self, **embedding):
        super().__init__()
        self.emb = nn.Embedding(12, 8, **embedding)
        self.fc = nn.Linear(8, 4)

    def forward(self, i):
        return self.fc(self.emb(i).mean(1))


class IndexSelectMLP(nn.Module):
    """Rows of a parameter by `index_select`, whose gradient is an `index_add`."""

    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(12, 8))
        self.fc = nn.Linear(8, 4)

    def forward(self, i):
        rows = self.table.index_select(0, i.flatten()).view(i.shape[0], -1, 8)
        return self.fc(rows.mean(1))


def tokens():
    # Repeated tokens (80 of 12), so the gradient sums rows; 0 among them.
    i = torch.randint(0, 12, (16, 5), generator=torch.Generator().manual_seed(21))
    y = torch.randint(0, 4, (16,), generator=torch.Generator().manual_seed(22))
    return i, y


def test_embeddings_and_index_select_train_on_kiln():
    i, y = tokens()
    assert (i == 0).any()
    for make, backward in (
        (EmbeddingMLP, "embedding_dense_backward"),
        (lambda: EmbeddingMLP(padding_idx=0), "embedding_dense_backward"),
        (lambda: EmbeddingMLP(scale_grad_by_freq=True), "embedding_dense_backward"),
        (lambda: EmbeddingMLP(padding_idx=0, scale_grad_by_freq=True), "embedding_dense_backward"),
        (IndexSelectMLP, "index_add"),
    ):
        stats = check_training(make, i, y)
        targets = {r.target for r in stats.nodes.values()}
        assert f"torch.ops.aten.{backward}.default" in targets, targets


class GatherMLP(nn.Module):
    """Entries of a parameter picked by `gather` along its second axis, with
    repeats: the gradient is a `scatter_add` that sums them."""

    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(16, 9))
        self.fc = nn.Linear(5, 4)

    def forward(self, i):
        picked = torch.gather(self.table, 1, i)  # (16, 5) of the (16, 9) table
        return self.fc(torch.tanh(picked))


def test_gather_trains_on_kiln_through_scatter_add():
    i = torch.randint(0, 9, (16, 5), generator=torch.Generator().manual_seed(31))
    y = torch.randint(0, 4, (16,), generator=torch.Generator().manual_seed(32))
    stats = check_training(GatherMLP, i, y)
    ran = {r.target: r.ran_on for r in stats.nodes.values()}
    assert ran["torch.ops.aten.scatter_add.default"] != "eager", ran


def test_scatter_add_matches_torch_and_reports_an_index_out_of_range():
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(41)
    x = torch.randn(4, 6, 3, generator=g, dtype=torch.float64)
    src = torch.randn(5, 6, 4, generator=g, dtype=torch.float64)
    # Along each axis, an index smaller than the source (and than the
    # tensor off the axis), with repeats.
    for dim, shape, top in ((0, (3, 6, 2), 4), (1, (4, 5, 3), 6), (2, (2, 6, 4), 3)):
        index = torch.randint(0, top, shape, generator=g)

        def f(x, src, index=index, dim=dim):
            return torch.scatter_add(x * 2.0, dim, index, src)

        stats = kt._Stats()
        got = torch.compile(f, backend=kt._make_backend("cranelift", True, stats))(x, src)
        torch.testing.assert_close(got, f(x, src), rtol=1e-12, atol=1e-12)
        ran = {r.target: r.ran_on for r in stats.nodes.values()}
        assert ran["torch.ops.aten.scatter_add.default"] != "eager", ran
        torch._dynamo.reset()
    # torch refuses an index outside the axis; so does kiln, as an error
    # naming the node, not a write outside the tensor.
    bad = torch.tensor([[0, 3], [1, 0]])

    def h(x, src, index):
        return torch.scatter_add(x * 1.0, 1, index, src)

    x2, src2 = torch.zeros(2, 3), torch.ones(2, 2)
    with pytest.raises(RuntimeError):
        h(x2, src2, bad)
    compiled = torch.compile(h, backend=kt._make_backend("cranelift", True, kt._Stats()))
    ok = torch.tensor([[0, 2], [1, 1]])
    torch.testing.assert_close(compiled(x2, src2, ok), h(x2, src2, ok))
    with pytest.raises(Exception, match="out of range|outside"):
        compiled(x2, src2, bad)


def test_a_max_pools_gradient_is_torchs_bit_for_bit():
    # Overlapping windows over a plane of many ties: an element is the
    # maximum of up to nine windows, and torch's CPU kernel adds their
    # gradients window by window from zero; kiln's index_add does the
    # same, so the input's gradient is equal, not close.
    gen = torch.Generator().manual_seed(7)
    x = torch.randint(0, 3, (2, 3, 9, 8), generator=gen).double()
    w = torch.randn(2, 3, 9, 8, generator=gen, dtype=torch.float64) * 1e3
    w2 = torch.randn(2, 3, 5, 5, generator=gen, dtype=torch.float64) * 1e3

    def loss(x):
        a = nn.functional.max_pool2d(x, 3, stride=1, padding=1)
        b = nn.functional.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True)
        return (a * w).sum() + (b * w2).sum()

    stats = kt._Stats()
    grads = []
    for f in (loss, torch.compile(loss, backend=kt._make_backend("cranelift", True, stats))):
        torch._dynamo.reset()
        xg = x.clone().requires_grad_()
        f(xg).backward()
        grads.append(xg.grad)
    ran = {r.target: r.ran_on for r in stats.nodes.values()}
    assert ran["torch.ops.aten.max_pool2d_with_indices_backward.default"] == "kiln", ran
    assert torch.equal(grads[0], grads[1])


def test_a_max_pools_backward_reports_an_index_outside_its_plane():
    torch._dynamo.reset()
    x = torch.randn(1, 2, 4, 4, generator=torch.Generator().manual_seed(8))
    y, idx = torch.ops.aten.max_pool2d_with_indices(x, [2, 2], [2, 2])
    g = torch.randn(y.shape, generator=torch.Generator().manual_seed(9))

    def back(g, x, idx):
        return torch.ops.aten.max_pool2d_with_indices_backward(
            g, x, [2, 2], [2, 2], [0, 0], [1, 1], False, idx
        )

    stats = kt._Stats()
    compiled = torch.compile(back, backend=kt._make_backend("cranelift", True, stats))
    assert torch.equal(compiled(g, x, idx), back(g, x, idx))
    ran = {r.target: r.ran_on for r in stats.nodes.values()}
    assert ran["torch.ops.aten.max_pool2d_with_indices_backward.default"] == "kiln", ran
    bad = idx.clone()
    bad[0, 1, 1, 0] = 16  # a 4x4 plane's indices are 0..15
    with pytest.raises(Exception, match="out of range|outside"):
        compiled(g, x, bad)


def test_an_embeddings_gradient_is_torchs_bit_for_bit():
    # torch's CPU kernel adds each token's row to its weight's row in token
    # order, from zero; kiln's index_add does the same, so the gradient of a
    # table with many repeats is equal, not close.
    i = torch.randint(0, 7, (300,), generator=torch.Generator().manual_seed(5))
    g = torch.randn(300, 16, generator=torch.Generator().manual_seed(6)) * 1e3
    for padding_idx in (None, 3):
        grads = []
        stats = kt._Stats()
        for compiled in (False, True):
            torch._dynamo.reset()
            w = torch.randn(7, 16, generator=torch.Generator().manual_seed(7)).requires_grad_()

            def f(w, i):
                return nn.functional.embedding(i, w, padding_idx=padding_idx)

            fn = torch.compile(f, backend=backend(stats)) if compiled else f
            fn(w, i).backward(g)
            grads.append(w.grad)
        ran = {r.target: r.ran_on for r in stats.nodes.values()}
        assert ran["torch.ops.aten.embedding_dense_backward.default"] != "eager", ran
        assert torch.equal(grads[0], grads[1])


class TripleWithCumsumGrad(torch.autograd.Function):
    """`3x`, whose gradient also adds `0 * cumsum(g)`: a backward graph with
    an op kiln does not build (`cumsum`) and the same gradient."""

    @staticmethod
    def forward(ctx, x):
        return x * 3.0

    @staticmethod
    def backward(ctx, g):
        return g * 3.0 + 0.0 * torch.cumsum(g, 1)


class CumsumGradMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(12, 8), nn.Linear(8, 4)

    def forward(self, x):
        return self.fc2(torch.tanh(TripleWithCumsumGrad.apply(self.fc1(x))))


def test_a_backward_op_kiln_does_not_build_runs_in_eager_alone():
    # kiln has no cumsum: that backward op runs in eager PyTorch, named in
    # one warning, and the rest on kiln.
    x, y = data(16, 12, classes=4, seed=8)
    check_training(CumsumGradMLP, x, y, eager_ops={"torch.ops.aten.cumsum.default"})


def test_an_embeddings_gradient_scaled_by_token_frequency_is_torchs():
    # scale_grad_by_freq: each token's row times 1 / its token's count (the
    # padding token's counted too) before the rows are summed; torch scales
    # by a multiply-add, kiln multiplies then adds: equal to a rounding.
    i = torch.randint(0, 7, (300,), generator=torch.Generator().manual_seed(5))
    # float32's sums of ~40 scaled rows cancel: compared as the training
    # tests compare gradients (1e-5 relative, 1e-6 absolute).
    for dtype, rtol, atol in ((torch.float64, 1e-13, 0.0), (torch.float32, 1e-5, 1e-6)):
        g = torch.randn(300, 16, generator=torch.Generator().manual_seed(6), dtype=dtype)
        for padding_idx in (None, 3):
            grads = []
            stats = kt._Stats()
            for compiled in (False, True):
                torch._dynamo.reset()
                w = torch.randn(7, 16, generator=torch.Generator().manual_seed(7), dtype=dtype)
                w.requires_grad_()

                def f(w, i):
                    return nn.functional.embedding(
                        i, w, padding_idx=padding_idx, scale_grad_by_freq=True
                    )

                fn = torch.compile(f, backend=backend(stats)) if compiled else f
                fn(w, i).backward(g)
                grads.append(w.grad)
            ran = {r.target: r.ran_on for r in stats.nodes.values()}
            assert ran["torch.ops.aten.embedding_dense_backward.default"] != "eager", ran
            torch.testing.assert_close(grads[1], grads[0], rtol=rtol, atol=atol)
            if padding_idx is not None:
                assert not grads[1][padding_idx].any()


def test_max_pool_indices_are_torchs():
    # Ties in most windows, NaNs in some, padding and overlap: the indices
    # kiln computes are the ones torch's kernel returns.
    rng = torch.Generator().manual_seed(17)
    x = torch.randint(0, 3, (2, 3, 9, 7), generator=rng).double()
    x.view(-1)[torch.randperm(x.numel(), generator=rng)[:20]] = float("nan")

    def f(t):
        return nn.functional.max_pool2d(t, 3, stride=2, padding=1, return_indices=True)

    torch._dynamo.reset()
    stats = kt._Stats()
    values, indices = torch.compile(f, backend=backend(stats))(x)
    want_values, want_indices = f(x)
    torch.testing.assert_close(values, want_values, equal_nan=True)
    assert torch.equal(indices, want_indices)
    ran = {r.target: r.ran_on for r in stats.nodes.values()}
    assert ran["torch.ops.aten.max_pool2d_with_indices.default"] == "kiln", ran
    assert "eager" not in ran.values(), ran


def tiny_gpt2(dropout=0.0):
    """Hugging Face's GPT-2 language model, 2 layers of width 32."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=16,
        resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout,
    )
    return GPT2LMHeadModel(config).train()


def tiny_bert(dropout=0.0):
    """Hugging Face's BERT classifier, 2 layers of width 32."""
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64,
        vocab_size=100, max_position_embeddings=16, num_labels=3,
        hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
    )
    return BertForSequenceClassification(config).train()


# Dynamo reads a non-leaf tensor's `.grad` while it traces Hugging Face's
# loss (torch's warning, not kiln's).
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf")
@pytest.mark.parametrize("dropout", [0.0, 0.1])
@pytest.mark.parametrize("make", [tiny_gpt2, tiny_bert])
def test_transformers_train_on_kiln(make, dropout):
    # The loss inside the model (cross-entropy: nll_loss and its backward),
    # embeddings, attention (the CPU flash kernel's log-sum-exp and its
    # backward), layer norms, GELU and a causal mask: every node of the
    # forward and backward graphs on kiln, 5 SGD steps as eager takes them.
    # With the models' own dropout (0.1, their default), its masks are
    # eager's: drawn from torch's generator in eager's order.
    ids = torch.randint(0, 100, (2, 8), generator=torch.Generator().manual_seed(31))
    labels = ids if make is tiny_gpt2 else torch.tensor([0, 2])

    def steps(model, run):
        torch.manual_seed(5)
        return sgd(model, lambda: run(input_ids=ids, labels=labels).loss)

    torch._dynamo.reset()
    model, twin = twins(lambda: make(dropout))
    stats = kt._Stats()
    losses, grads = steps(model, torch.compile(model, backend=backend(stats)))
    want_losses, want_grads = steps(twin, twin)
    assert losses == pytest.approx(want_losses, rel=1e-5)
    assert losses[-1] < losses[0]
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    eager = {r.target for r in stats.nodes.values() if r.ran_on == "eager"}
    assert eager == set(), eager
    targets = {r.target for r in stats.nodes.values()}
    for op in ("nll_loss_backward", "embedding_dense_backward"):
        assert f"torch.ops.aten.{op}.default" in targets, targets
    assert ("torch.ops.aten.native_dropout.default" in targets) == (dropout > 0), targets


@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf")
def test_gpt2_trains_on_kiln_with_symbolic_sizes():
    # `dynamic=True` (as Dynamo recompiles after a second sequence length):
    # torch's decompositions then write `prims.convert_element_type` in the
    # backward, which kiln builds; only size arithmetic runs in eager.
    # Dropout's masks are eager's, their shapes evaluated at each call.
    def steps(model, run):
        torch.manual_seed(5)
        losses = []
        for length in (8, 6, 8):
            ids = torch.randint(0, 100, (2, length), generator=torch.Generator().manual_seed(length))
            loss = run(input_ids=ids, labels=ids).loss
            loss.backward()
            losses.append(loss.item())
        return losses, [p.grad.clone() for p in model.parameters()]

    torch._dynamo.reset()
    model, twin = twins(lambda: tiny_gpt2(0.1))
    stats = kt._Stats()
    losses, grads = steps(model, torch.compile(model, backend=backend(stats), dynamic=True))
    # Symbolic sizes go through kiln's own autograd.Function too
    # (`_lean_training`): the sizes the backward reads saved beside the
    # tensors.
    assert stats.lean > 0
    want_losses, want_grads = steps(twin, twin)
    assert losses == pytest.approx(want_losses, rel=1e-5)
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    eager = {(r.target, r.reason) for r in stats.nodes.values() if r.ran_on == "eager"}
    assert all(t == "torch.ops.aten.sym_size.int" or why == "a size computation" for t, why in eager), eager
    targets = {r.target for r in stats.nodes.values()}
    assert "torch.ops.prims.convert_element_type.default" in targets, targets


class Dropouts(nn.Module):
    """Dropout at 0.5 on the input and at `p` on an affine map of it, in
    `dtype`: products and sums only, so eager's values are exact bits."""

    def __init__(self, p, dtype):
        super().__init__()
        self.p = p
        self.w = nn.Parameter(torch.linspace(-1.5, 2.0, 12, dtype=dtype))
        self.b = nn.Parameter(torch.linspace(0.5, -0.25, 12, dtype=dtype))

    def forward(self, x):
        h = nn.functional.dropout(x, 0.5) * self.w + self.b
        return nn.functional.dropout(h, self.p) * self.w


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("tier", kiln.tiers())
def test_dropout_is_eagers_bit_for_bit(tier, dynamic):
    # The masks come from torch's generator in eager's order, so the values
    # and the input's gradient are eager's bits, on every tier; with
    # symbolic sizes too (two batch sizes through one dynamic graph).
    for p, dtype in ((0.25, torch.float64), (0.5, torch.float32)):
        torch._dynamo.reset()
        model, twin = twins(lambda: Dropouts(p, dtype))
        stats = kt._Stats()
        run = torch.compile(model, backend=kt._make_backend(tier, True, stats), dynamic=dynamic)
        for rows in (5, 9):
            outs = []
            for m, f in ((model, run), (twin, twin)):
                x = torch.randn(rows, 12, dtype=dtype, generator=torch.Generator().manual_seed(rows))
                x.requires_grad_()
                m.zero_grad()
                torch.manual_seed(rows)
                y = f(x)
                (y * y).sum().backward()
                # The generator's state after the call: as many draws.
                outs.append((y.detach(), x.grad, [q.grad for q in m.parameters()], torch.get_rng_state()))
            (y, dx, grads, state), (want_y, want_dx, want_grads, want_state) = outs
            assert torch.equal(y, want_y), (tier, p, rows)
            assert torch.equal(dx, want_dx), (tier, p, rows)
            assert torch.equal(state, want_state)
            # The parameters' gradients sum over the rows, in kiln's order.
            for g, w in zip(grads, want_grads):
                torch.testing.assert_close(g, w, rtol=1e-12 if dtype == torch.float64 else 1e-6, atol=0)
            dropped = (dx == 0).sum().item()
            assert 0 < dropped < dx.numel(), "dropout dropped nothing or everything"
        eager = {r.target for r in stats.nodes.values() if r.ran_on == "eager"}
        assert not eager - {"torch.ops.aten.sym_size.int"}, eager
        targets = {r.target for r in stats.nodes.values()}
        assert "torch.ops.aten.native_dropout.default" in targets, targets


def test_dropout_beside_another_random_op_runs_in_eager_in_eagers_order():
    # kiln draws dropout's masks before the graph runs only where nothing
    # else in the graph draws: here `rand_like` does, so both run in eager
    # PyTorch, in the graph's order, and the values are still eager's.
    def f(x):
        return nn.functional.dropout(torch.sin(x) + torch.rand_like(x), 0.5) * 2.0

    x = torch.randn(6, 7, generator=torch.Generator().manual_seed(3))
    stats = kt._Stats()
    torch._dynamo.reset()
    torch.manual_seed(4)
    got = torch.compile(f, backend=backend(stats))(x)
    torch.manual_seed(4)
    want = f(x)
    assert torch.equal(got, want)
    ran = {r.target: r.ran_on for r in stats.nodes.values()}
    assert ran["torch.ops.aten.native_dropout.default"] == "eager", ran
    assert ran["torch.ops.aten.sin.default"] == "kiln", ran


class TinySegmenter(nn.Module):
    """A per-pixel classifier: 4 classes' logits at each of 6 × 6 pixels."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        return self.conv2(torch.relu(self.conv1(x)))


SEGMENTATION_LOSSES = {
    "mean": {},
    "weighted_ignoring": {"weight": torch.tensor([0.5, 2.0, 1.0, 0.25]), "ignore_index": 2},
    "sum": {"reduction": "sum", "ignore_index": 0},
    "none": {"reduction": "none", "weight": torch.tensor([1.0, 0.5, 3.0, 1.5])},
}


@pytest.mark.parametrize("name", sorted(SEGMENTATION_LOSSES))
def test_a_per_pixel_cross_entropy_trains_on_kiln(name):
    # Cross-entropy over [N, C, H, W] logits and [N, H, W] targets is
    # ATen's nll_loss2d_forward and nll_loss2d_backward (a segmentation
    # model's loss): with a class weight, an ignored class and each
    # reduction, 5 SGD steps on kiln, every node, as eager takes them.
    kwargs = SEGMENTATION_LOSSES[name]
    g = torch.Generator().manual_seed(52)
    x = torch.randn(2, 3, 6, 6, generator=g)
    y = torch.randint(0, 4, (2, 6, 6), generator=g)

    def loss_of(model):
        def loss(x, y):
            value = nn.functional.cross_entropy(model(x), y, **kwargs)
            return value.sum() if name == "none" else value
        return loss

    torch._dynamo.reset()
    model, twin = twins(TinySegmenter)
    stats = kt._Stats()
    step = torch.compile(loss_of(model), backend=backend(stats))
    losses, grads = sgd(model, lambda: step(x, y), lr=0.05)
    want_losses, want_grads = sgd(twin, lambda: loss_of(twin)(x, y), lr=0.05)
    assert losses == pytest.approx(want_losses, rel=1e-5)
    assert losses[-1] < losses[0]
    for got, want in zip(grads, want_grads):
        # Summed (not averaged) over 72 pixels with weights up to 3, the
        # gradients are up to ~100 times a mean's: the training tests' 1e-6
        # absolute, scaled by the largest gradient (the convolutions'
        # backward sums in another order than torch's).
        scale = max(1.0, want.abs().max().item())
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6 * scale)
    eager = {r.target for r in stats.nodes.values() if r.ran_on == "eager"}
    assert eager == set(), eager
    targets = {r.target for r in stats.nodes.values()}
    for op in ("nll_loss2d_forward", "nll_loss2d_backward"):
        assert f"torch.ops.aten.{op}.default" in targets, targets


def test_attention_gradients_are_eagers():
    # Scaled dot-product attention plain, causal, with a bool mask and with
    # a float mask and a scale: the gradients of q, k and v (the CPU flash
    # kernel's backward, or the math path's ops) on kiln, against eager's.
    g = torch.Generator().manual_seed(41)
    q, k, v = (torch.randn(2, 3, 6, 8, generator=g) for _ in range(3))
    keep = torch.rand(6, 6, generator=g) > 0.3
    keep[:, 0] = True
    bias = torch.randn(2, 1, 6, 6, generator=g)
    seed = torch.randn(4, 2, 3, 6, 8, generator=g)
    F = nn.functional

    def f(q, k, v):
        outs = (
            F.scaled_dot_product_attention(q, k, v),
            F.scaled_dot_product_attention(q, k, v, is_causal=True),
            F.scaled_dot_product_attention(q, k, v, attn_mask=keep),
            F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=0.3),
        )
        return sum((o * s).sum() for o, s in zip(outs, seed))

    grads = []
    stats = kt._Stats()
    for fn in (f, torch.compile(f, backend=backend(stats))):
        torch._dynamo.reset()
        x = [t.clone().requires_grad_() for t in (q, k, v)]
        fn(*x).backward()
        grads.append([t.grad for t in x])
    for got, want in zip(grads[1], grads[0]):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    eager = {r.target for r in stats.nodes.values() if r.ran_on == "eager"}
    assert eager == set(), eager


def test_gradients_of_selects_and_strided_slices():
    # `x[:, 2]`, `x[1:3]` and `x[:, 1::2]` take parts of `x`: their
    # backward ops (`select_backward`, `slice_backward` with steps 1 and 2)
    # put the gradient back among zeros, on kiln, exactly as eager does.
    g = torch.Generator().manual_seed(43)
    x = torch.randn(4, 6, generator=g)
    w = torch.randn(2, 6, generator=g)
    v = torch.randn(4, 3, generator=g)

    def f(x):
        return (x[:, 2] * x[:, 4]).sum() + (x[1:3] * w).sum() + (x[:, 1::2].exp() * v).sum()

    grads = []
    stats = kt._Stats()
    for fn in (f, torch.compile(f, backend=backend(stats))):
        torch._dynamo.reset()
        t = x.clone().requires_grad_()
        fn(t).backward()
        grads.append(t.grad)
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-6, atol=1e-6)
    ran = {r.target: r.ran_on for r in stats.nodes.values()}
    assert "eager" not in ran.values(), ran
    assert "torch.ops.aten.slice_backward.default" in ran, ran


F = nn.functional
LOSSES = {
    "mse": lambda z, y, yb: F.mse_loss(z, y),
    "mse_sum": lambda z, y, yb: F.mse_loss(z, y, reduction="sum"),
    "l1": lambda z, y, yb: F.l1_loss(z, y),
    "bce": lambda z, y, yb: F.binary_cross_entropy(torch.sigmoid(z), yb),
    "bce_weighted": lambda z, y, yb: F.binary_cross_entropy(
        torch.sigmoid(z), yb, weight=torch.tensor([0.5, 1.0, 2.0]), reduction="sum"
    ),
    "bce_logits": lambda z, y, yb: F.binary_cross_entropy_with_logits(z, yb),
    "bce_logits_pos": lambda z, y, yb: F.binary_cross_entropy_with_logits(
        z, yb, weight=torch.tensor([1.0, 0.5, 2.0]), pos_weight=torch.tensor([3.0, 1.0, 0.25])
    ),
    "kl_div": lambda z, y, yb: F.kl_div(
        F.log_softmax(z, -1), F.softmax(y, -1), reduction="batchmean"
    ),
    "softplus": lambda z, y, yb: F.softplus(z, beta=2.0, threshold=1.0).sum(),
    "smooth_l1": lambda z, y, yb: F.smooth_l1_loss(z, y, beta=0.5),
    "huber": lambda z, y, yb: F.huber_loss(z, y, delta=0.7, reduction="sum"),
    "hardswish_mish": lambda z, y, yb: (F.hardswish(z * 4) + F.mish(z)).sum(),
    "cosine": lambda z, y, yb: F.cosine_similarity(z, y).sum(),
    "advanced_index": lambda z, y, yb: (z[:, [0, 2, 0]] ** 2).sum(),
    "upsample_nearest": lambda z, y, yb: F.interpolate(
        z.reshape(2, 3, 2, 2), scale_factor=2, mode="nearest"
    ).pow(2).sum(),
    "label_smoothing": lambda z, y, yb: F.cross_entropy(
        z, (yb[:, 0] + yb[:, 1]).long(), label_smoothing=0.1
    ),
    "norms": lambda z, y, yb: z.std(0).sum() + z.norm(dim=-1).sum() + torch.logsumexp(z, -1).sum()
    + F.normalize(z, dim=-1).pow(2).sum(),
}


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_losses_train_on_kiln(name):
    # Everyday losses and the ops their gradients use (mse_loss and its
    # backward, binary cross-entropy with and without logits, weights and
    # pos_weight, xlogy, sgn, softplus_backward, masked_fill, smooth L1 and
    # Huber and their backward, hardswish's and mish's backward, clamps by
    # tensors, index_put with accumulate: advanced indexing's and nearest
    # upsampling's backward): a linear
    # layer's gradients through each on kiln, every node, against eager.
    g = torch.Generator().manual_seed(44)
    x, y = torch.randn(8, 6, generator=g), torch.randn(8, 3, generator=g)
    yb = (torch.rand(8, 3, generator=g) > 0.5).float()
    loss = LOSSES[name]
    grads = []
    stats = kt._Stats()
    for compiled in (False, True):
        torch._dynamo.reset()
        torch.manual_seed(45)
        m = nn.Linear(6, 3)

        def f(x, y, yb):
            return loss(m(x), y, yb)

        fn = torch.compile(f, backend=backend(stats)) if compiled else f
        fn(x, y, yb).backward()
        grads.append([m.weight.grad, m.bias.grad])
    for got, want in zip(grads[1], grads[0]):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    eager = {r.target for r in stats.nodes.values() if r.ran_on == "eager"}
    assert eager == set(), eager
