"""``torch.compile(model, backend="kiln")``: kiln as a TorchDynamo backend.

The backend is registered through the ``torch_dynamo_backends`` entry point,
so ``backend="kiln"`` works without importing kiln first. Dynamo hands it an
FX graph whose parameters are placeholders; ``aot_autograd`` lowers it to ATen
(functionalized, with the decompositions below); kiln's own fx importer, in
Rust, receives the node list (no text is printed and parsed again).

Ops kiln cannot compile never make ``torch.compile`` fail: torch's
``CapabilityBasedPartitioner`` splits the graph, kiln runs the partitions it
supports and eager PyTorch runs the rest. A partition is compiled for the
shapes it is called with, once per shape (Dynamo's symbolic sizes are
specialized at call time), so a new batch size compiles again and is then
cached. Training too: ``aot_autograd``'s backward graph is compiled the
same way (torch's decompositions of the backward ops below, kiln for what
it builds, eager PyTorch for the rest, with a warning naming those ops the
first time).

Training dropout runs on kiln too: its masks are drawn by eager PyTorch
before each graph runs, as eager draws them (``_hoist_dropouts``), so the
values are eager's.

``kiln.torch.explain(model, *inputs)`` reports which nodes ran where.
"""

from __future__ import annotations

import dataclasses
import operator
import threading
import warnings
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch
from torch._dynamo.backends.common import aot_autograd
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupport

from . import _kiln
from ._errors import ExecError, KilnError

__all__ = ["backend", "explain", "Explanation", "NodeReport"]

# torch's dtypes kiln computes with, and their kiln names.
_DTYPES = {
    torch.float32: "f32",
    torch.float64: "f64",
    torch.int32: "i32",
    torch.int64: "i64",
    torch.bool: "bool",
}

_OPTIONS = ("tier", "optimize")


def _decompositions():
    """ATen ops kiln's importer does not build, decomposed into ones it does
    (activations it builds itself, such as `silu` and `gelu`, are not)."""
    aten = torch.ops.aten
    from torch._decomp import get_decompositions

    return get_decompositions(
        [
            aten.native_layer_norm,
            aten.addcmul,
            aten.addcdiv,
            aten.lerp,
            aten.linalg_vector_norm,
            aten.logsumexp,
            aten.baddbmm,
            # Training: batch norm's forward with batch statistics, and the
            # backward graphs' gradients of activations, normalizations and
            # softmax, as elementwise ops and reductions.
            aten._native_batch_norm_legit_functional,
            aten.threshold_backward,
            aten.sigmoid_backward,
            aten.tanh_backward,
            aten.gelu_backward,
            aten.silu_backward,
            aten.hardtanh_backward,
            aten.leaky_relu_backward,
            aten.elu_backward,
            aten.native_batch_norm_backward,
            aten.native_layer_norm_backward,
            aten._softmax_backward_data,
            aten._log_softmax_backward_data,
            # Dropout's gradient: the saved mask times the scale.
            aten.native_dropout_backward,
        ]
    )


class _Fallback(Exception):
    """A graph or an argument kiln does not take; eager PyTorch runs it."""


#: Ops whose result is a view of their first argument on any strides: an
#: output of a kiln partition that is a chain of them from an input or
#: from another output is that view, as eager returns it, rather than a
#: copy kiln writes (aot_autograd saves `t` of a `Linear`'s weight and
#: `detach`es of results for the backward).
_VIEWS = {
    torch.ops.aten.detach.default,
    torch.ops.aten.alias.default,
    torch.ops.aten.t.default,
    torch.ops.aten.transpose.int,
    torch.ops.aten.permute.default,
    torch.ops.aten.unsqueeze.default,
    torch.ops.aten.squeeze.dim,
    torch.ops.aten.expand.default,
}


#: The fewest bytes of a view other than a `detach` or `alias` that an output
#: is returned as rather than copied by kiln: the Python around a view (its
#: ops replayed at each call, the next graph's input read by its strides)
#: costs more than kiln copying a smaller one (the MLP's 10×256 transposed
#: weight: about 20 µs a training step).
_VIEW_OUTPUT_BYTES = 1 << 16

_DETACH = (torch.ops.aten.detach.default, torch.ops.aten.alias.default)

#: Where a `_KilnGraph`'s output comes from at a call (`_KilnGraph._plan`).
_COMPUTED, _ARGUMENT, _CONSTANT = range(3)

#: How a call reads a tensor dense in no order of its axes (a strided
#: slice, say): copied densely first (`_KilnGraph._run`).
_COPY = "copy"

#: A CPU tensor's DLPack capsule, which kiln reads in place (a tensor that
#: requires grad too: kiln only reads it).
_to_dlpack = torch.utils.dlpack.to_dlpack

#: The most call signatures a `_KilnGraph` keeps (`_KilnGraph._prepare`);
#: past them it forgets them all and finds each again in its cache of
#: compiled functions.
_SIGNATURES = 256


def _worth_a_view(node: torch.fx.Node, base: torch.fx.Node, chain: list, outs: list) -> bool:
    """Whether output `node`, a view of `base` by `chain`, is returned as
    the view: a detached one always; another only where kiln would copy
    (`base` an input, a constant or another output; of an intermediate,
    kiln writes the view's elements as it computes them), and only a
    large one."""
    if all(n.target in _DETACH for n in chain):
        return True
    if base.op not in ("placeholder", "get_attr") and base not in outs:
        return False
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return False
    try:
        return int(val.numel()) * val.element_size() >= _VIEW_OUTPUT_BYTES
    except (TypeError, RuntimeError):  # a symbolic size: large, as it may be
        return True


def _view_chain(node: torch.fx.Node) -> tuple:
    """The base a chain of `_VIEWS` ops leads `node` down to, and the chain
    from the base up, each op's other arguments constants."""
    chain = []
    while (
        isinstance(node, torch.fx.Node)
        and node.op == "call_function"
        and node.target in _VIEWS
        and node.args
        and isinstance(node.args[0], torch.fx.Node)
        and not node.kwargs
    ):
        nodes: list = []
        torch.fx.node.map_arg(node.args[1:], nodes.append)
        if nodes:
            break
        chain.append(node)
        node = node.args[0]
    return node, chain[::-1]


def _node_key(node) -> Optional[tuple]:
    """What makes call `node` the same value as another (its target and
    arguments), or None where it is not a call or an argument does not
    hash."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return None

    def freeze(a):
        if isinstance(a, (list, tuple)):
            return tuple(freeze(x) for x in a)
        if isinstance(a, dict):
            return tuple(sorted((k, freeze(v)) for k, v in a.items()))
        hash(a)
        return a

    try:
        return (node.target, freeze(node.args), freeze(node.kwargs))
    except TypeError:
        return None


def _dense_name(name: str) -> str:
    """The name of the dense input an input read by `_dense_order` is."""
    return f"{name}__kiln_dense"


def _dense_order(t: torch.Tensor) -> Optional[list]:
    """The order of `t`'s axes in which it is dense, if it is a permutation
    of a dense tensor but not dense itself; else None."""
    if t.is_contiguous() or t.dim() < 2:
        return None
    order = sorted(range(t.dim()), key=lambda d: -t.stride(d))
    return order if t.permute(order).is_contiguous() else None


def _target_name(node: torch.fx.Node) -> str:
    """The target as kiln's importer reads it: `torch.ops.aten.addmm.default`,
    `operator.getitem`."""
    t = node.target
    if isinstance(t, str):
        return t
    if isinstance(t, torch._ops.OpOverload):
        return f"torch.ops.{t}"
    if isinstance(t, torch._ops.OpOverloadPacket):
        return f"torch.ops.{t._qualified_op_name.replace('::', '.')}"
    return f"{getattr(t, '__module__', None) or '_'}.{getattr(t, '__name__', repr(t))}"


def _tensor_meta(value) -> Optional[tuple]:
    """(dtype, shape) of a tensor's fake value, None for anything else."""
    if isinstance(value, torch.Tensor):
        return value.dtype, tuple(value.shape)
    return None


class _Support(OperatorSupport):
    """The nodes kiln compiles: calls its importer builds, on CPU tensors of
    the dtypes it has; a `getitem` of such a call."""

    def is_node_supported(self, submodules, node: torch.fx.Node) -> bool:
        return _why_not(node) is None


def _why_not(node: torch.fx.Node) -> Optional[str]:
    """Why kiln does not compile `node`, or None if it does."""
    if node.op not in ("call_function", "call_method"):
        return f"{node.op} nodes run in torch"
    if node.target is operator.getitem:
        source = node.args[0]
        if isinstance(source, torch.fx.Node) and _why_not(source) is None:
            return None
        return "a getitem of a node kiln does not compile"
    target = _target_name(node)
    if not _kiln.fx_supports(node.op, target):
        return f"kiln has no `{target}`"
    if node.target is torch.ops.aten.convolution_backward.default and node.args[7]:
        return "the backward of a transposed convolution"
    if node.target is torch.ops.aten.index_add.default and (
        node.args[4] if len(node.args) > 4 else node.kwargs.get("alpha", 1)
    ) != 1:
        return "an index_add with an alpha other than 1"
    if node.target in (torch.ops.aten.index_put.default, torch.ops.aten._unsafe_index_put.default) and not (
        node.args[3] if len(node.args) > 3 else node.kwargs.get("accumulate", False)
    ):
        return "an index_put that assigns (without accumulate)"
    if node.target is torch.ops.aten.as_strided.default:
        # kiln reads it as a reshape of the input's elements in order,
        # which is what it is only when the input is contiguous.
        base = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
        if not isinstance(base, torch.Tensor) or not base.is_contiguous() or base.storage_offset():
            return "an as_strided of a tensor that is not contiguous"
    val = node.meta.get("val")
    if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)):
        return "a size computation"
    values = list(val) if isinstance(val, (list, tuple)) else [val]
    values += [a.meta.get("val") for a in node.all_input_nodes]
    for v in values:
        if isinstance(v, torch.Tensor):
            if v.dtype not in _DTYPES:
                return f"dtype {v.dtype}"
            if v.device.type != "cpu":
                return f"a tensor on {v.device}"
        elif isinstance(v, (torch.SymFloat, torch.SymBool)):
            return "a symbolic float or bool"
    return None


def _tag(a, sizes: dict) -> tuple:
    """One argument in the tagged form `kiln._kiln.compile_fx` decodes;
    `sizes` gives the values of symbolic-size nodes at this call."""
    if isinstance(a, torch.fx.Node):
        if a.name in sizes:
            return ("i", sizes[a.name])
        return ("n", a.name)
    if isinstance(a, bool):
        return ("b", a)
    if isinstance(a, int):
        return ("i", a)
    if isinstance(a, float):
        return ("f", a)
    if a is None:
        return ("none",)
    if isinstance(a, str):
        return ("s", a)
    if isinstance(a, (list, tuple)):
        return ("seq", [_tag(x, sizes) for x in a])
    if isinstance(a, slice):
        parts = (a.start, a.stop, a.step)
        if not all(p is None or isinstance(p, int) for p in parts):
            raise _Fallback(f"slice {a!r}")
        return ("slice", *parts)
    if isinstance(a, (torch.dtype, torch.device, torch.memory_format, torch.layout)):
        return ("name", str(a))
    raise _Fallback(f"argument {a!r} of type {type(a).__name__}")


def _kiln_type(dtype: torch.dtype, shape: Sequence[int]) -> str:
    name = _DTYPES.get(dtype)
    if name is None:
        raise _Fallback(f"dtype {dtype}")
    return f"{name}[{', '.join(str(int(d)) for d in shape)}]" if len(shape) else name


#: The meta key of the nodes a dropout is rewritten into: its name and target.
_DROPOUT_META = "kiln_dropout"


@dataclasses.dataclass(frozen=True)
class _Draw:
    """One dropout's mask, drawn by eager PyTorch before a graph runs: each
    dimension an int or a sympy expression in the graph's symbolic sizes."""

    p: float
    dtype: torch.dtype
    shape: tuple


def _symbols(placeholders) -> dict:
    """Where each plain symbolic size of a graph's inputs is found in a
    call's arguments: symbol -> (argument index, dimension or None)."""
    found = {}
    for i, node in enumerate(placeholders):
        val = node.meta.get("val")
        dims = [(None, val)] if isinstance(val, torch.SymInt) else []
        if isinstance(val, torch.Tensor):
            dims = list(enumerate(val.shape))
        for d, size in dims:
            if isinstance(size, torch.SymInt) and size.node.expr.is_Symbol:
                found.setdefault(size.node.expr, (i, d))
    return found


def _hoist_dropouts(gm: torch.fx.GraphModule):
    """Takes a graph's random draws out of it, so that kiln can compute the
    rest in one program: each training `native_dropout(x, p)` becomes
    `x * mask * scale` and its mask `mask != 0`, the mask a new input that
    eager PyTorch draws as its CPU kernel does (`bernoulli_(1 - p)` into a
    tensor of x's dtype and shape), all of them in the graph's order before
    the graph runs. The masks are then eager's own, bit for bit.

    Only where every random op of the graph is such a dropout (else the
    draws would change order with the others'), of a dtype kiln has, whose
    shape is known at the call. Returns the draws and the symbols their
    shapes read ((None, None) where nothing was hoisted)."""
    aten = torch.ops.aten
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    symbols = _symbols(placeholders)
    drops = []
    for n in gm.graph.nodes:
        if n.op != "call_function" or not isinstance(n.target, torch._ops.OpOverload):
            continue
        if torch.Tag.nondeterministic_seeded not in n.target.tags:
            continue
        if n.target is not aten.native_dropout.default:
            return None, None
        x, p = n.args[0], n.args[1]
        train = n.args[2] if len(n.args) > 2 else n.kwargs.get("train")
        val = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
        if (
            train is False
            or not isinstance(p, float)
            or not 0.0 <= p <= 1.0
            or not isinstance(val, torch.Tensor)
            or val.dtype not in (torch.float32, torch.float64)
            or val.device.type != "cpu"
            or any(u.target is not operator.getitem for u in n.users)
        ):
            return None, None
        shape = []
        for size in val.shape:
            if isinstance(size, torch.SymInt):
                expr = size.node.expr
                if not expr.free_symbols <= symbols.keys():
                    return None, None
                shape.append(expr)
            else:
                shape.append(int(size))
        drops.append((n, _Draw(p, val.dtype, tuple(shape))))
    if not drops:
        return None, None
    graph = gm.graph
    last = placeholders[-1] if placeholders else None
    for i, (n, draw) in enumerate(drops):
        x, val = n.args[0], n.args[0].meta["val"]
        origin = (n.name, _target_name(n))
        if last is None:
            with graph.inserting_before(next(iter(graph.nodes))):
                mask = graph.placeholder(f"kiln_dropout_mask_{i}")
        else:
            with graph.inserting_after(last):
                mask = graph.placeholder(f"kiln_dropout_mask_{i}")
        last = mask
        mask.meta["val"] = val
        p1m = 1.0 - draw.p
        scale = 0.0 if p1m == 0 else 1.0 / p1m
        with graph.inserting_before(n):
            kept = graph.call_function(aten.mul.Tensor, (x, mask))
            out = graph.call_function(aten.mul.Tensor, (kept, scale))
            flags = graph.call_function(aten.ne.Scalar, (mask, 0))
        results = {user.args[1]: user for user in n.users}
        kept.meta["val"] = out.meta["val"] = val
        if 1 in results:
            flags.meta["val"] = results[1].meta.get("val")
        for new in (kept, out, flags):
            new.meta[_DROPOUT_META] = origin
        for index, user in results.items():
            user.replace_all_uses_with(out if index == 0 else flags)
            graph.erase_node(user)
        graph.erase_node(n)
        if not flags.users:
            graph.erase_node(flags)
    gm.recompile()
    return [d for _, d in drops], symbols


def _drawing(run: Callable, draws: list, symbols: dict) -> Callable:
    """`run` called with the masks of `draws` after its arguments, drawn
    from torch's generator at each call."""

    # The symbolic sizes are read from the arguments only where a mask's
    # shape has one.
    symbolic = any(not isinstance(d, int) for draw in draws for d in draw.shape)

    def call(*args):
        values = {}
        if symbolic:
            values = {s: args[i] if d is None else args[i].shape[d] for s, (i, d) in symbols.items()}
        masks = []
        for draw in draws:
            shape = [d if isinstance(d, int) else int(d.xreplace(values)) for d in draw.shape]
            masks.append(torch.empty(shape, dtype=draw.dtype).bernoulli_(1.0 - draw.p))
        return run(*args, *masks)

    return call


class _Stats:
    """What a backend instance saw, for `explain`."""

    def __init__(self):
        self.lock = threading.Lock()
        self.nodes: dict = {}
        self.graphs = 0
        self.compiles = 0
        self.fallbacks: list = []
        #: Training graphs run by kiln's own autograd.Function
        #: (`_lean_training`) rather than aot_autograd's runtime.
        self.lean = 0

    def record(self, node: torch.fx.Node, where: str, reason: Optional[str]):
        # The nodes a dropout was rewritten into report as the dropout.
        name, target = node.meta.get(_DROPOUT_META, (node.name, _target_name(node)))
        with self.lock:
            self.nodes[(self.graphs, name)] = NodeReport(name, target, where, reason)


class _KilnGraph(torch.nn.Module):
    """One partition: an fx graph kiln compiles, once per input signature
    (shapes, and the values of symbolic sizes), and runs on NumPy views of the
    tensors. If kiln refuses it at its first compile, eager PyTorch runs it
    from then on."""

    def __init__(self, gm: torch.fx.GraphModule, tier: str, optimize: bool, stats, name: str):
        super().__init__()
        self.gm = gm
        self.tier = tier
        self.optimize = optimize
        self.stats = stats
        self.label = name
        self.lock = threading.Lock()
        self.cache: dict = {}
        self.eager_reason: Optional[str] = None
        graph = gm.graph
        self.placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        self.attrs = [n for n in graph.nodes if n.op == "get_attr"]
        (out_node,) = [n for n in graph.nodes if n.op == "output"]
        outs = out_node.args[0]
        self.out_tuple = isinstance(outs, (list, tuple))
        self.outs = list(outs) if self.out_tuple else [outs]
        # The outputs kiln computes, each once; inputs and constants that are
        # also outputs are passed through here, and so are views of an
        # input or of another output (`_VIEWS`): eager returns a view, not
        # a copy; the view's base is computed instead where it is neither.
        self.computed: list = []
        self.views: dict = {}
        # An output the same call as an earlier one (aot_autograd saves
        # attention's input as three identical `view`s, one a projection)
        # is a detached view of that one: kiln computes a value once, but
        # wrote each such output.
        same: dict = {}
        for o in self.outs:
            key = _node_key(o)
            first = same.setdefault(key, o) if key is not None else o
            if first is not o:
                self.views[o] = self.views.get(first, (first, []))
                continue
            base, chain = _view_chain(o)
            if chain and _worth_a_view(o, base, chain, self.outs):
                self.views[o] = (base, chain)
                o = base
            if not isinstance(o, torch.fx.Node) or o.op in ("placeholder", "get_attr"):
                continue
            if not isinstance(o.meta.get("val", torch.empty(0)), torch.Tensor):
                self.eager_reason = f"output {o.name} is not a tensor"
            elif o not in self.computed:
                self.computed.append(o)
        if not self.computed:
            self.eager_reason = "nothing to compute"
        if self.eager_reason is not None:
            for n in graph.nodes:
                if n.op in ("call_function", "call_method"):
                    stats.record(n, "eager", self.eager_reason)
        # A call's signature (`_key_of` of each argument and constant) to
        # its compiled function and the reads of its inputs (`_prepare`): a
        # call with a signature seen before goes straight to kiln.
        self.calls: dict = {}
        # The last call's plan, tried first (`forward`), and the values of
        # the arguments that are not tensors (symbolic sizes) it was made for.
        self.last: Optional[tuple] = None
        self.attr_getters = [operator.attrgetter(n.target) for n in self.attrs]
        self.computed_dtypes = [getattr(n.meta.get("val"), "dtype", None) for n in self.computed]
        self.out_plan = [self._plan(o) for o in self.outs] if self.eager_reason is None else []

    def _plan(self, o) -> tuple:
        """Where output `o` comes from at a call: (`_COMPUTED`, its index in
        kiln's results), (`_ARGUMENT`, the index of the argument or
        constant), or (`_CONSTANT`, the value); then, for a view, the ops
        replayed on it (each target with its other arguments) before it is
        detached, else None."""
        chain = None
        if o in self.views:
            base, ops = self.views[o]
            chain = tuple((n.target, n.args[1:]) for n in ops if n.target not in _DETACH)
            o = base
        if not isinstance(o, torch.fx.Node):
            return _CONSTANT, o, chain
        if o in self.computed:
            return _COMPUTED, self.computed.index(o), chain
        return _ARGUMENT, (self.placeholders + self.attrs).index(o), chain

    def _source(self, sizes: dict, orders: dict):
        """The nodes kiln compiles, tagged, and the text errors point into:
        the graph as torch prints it, a line a node. An input read in the
        order of its axes `orders` gives (`_dense_order`) is the permute of
        a dense input named `_dense_name`."""
        lines, nodes, pos = [], [], 0
        for n in self.gm.graph.nodes:
            if n.op == "output" or n.name in sizes:
                continue
            if n.op in ("placeholder", "get_attr") and n.name in orders:
                order = orders[n.name]
                dense = _dense_name(n.name)
                line = f"    {dense}: dense, axes {order} of {n.name}"
                nodes.append((dense, "placeholder", dense, [], [], pos))
                lines.append(line)
                pos += len(line) + 1
                inverse = [order.index(d) for d in range(len(order))]
                kind, target = "call_function", "torch.ops.aten.permute.default"
                args = [("n", dense), ("seq", [("i", d) for d in inverse])]
                kwargs = []
            elif n.op in ("placeholder", "get_attr"):
                kind, target, args, kwargs = "placeholder", n.name, [], []
            else:
                kind, target = n.op, _target_name(n)
                args = [_tag(a, sizes) for a in n.args]
                kwargs = [(k, _tag(v, sizes)) for k, v in n.kwargs.items()]
            line = "    " + (n.format_node() or n.name)
            nodes.append((n.name, kind, target, args, kwargs, pos))
            lines.append(line)
            pos += len(line) + 1
        lines.append("    return " + ", ".join(n.name for n in self.computed))
        return nodes, "\n".join(lines) + "\n", pos

    def _inputs(self, args):
        """The tensors kiln reads, by name, the key of their types (each
        tensor's dtype, shape and the order of its axes in which it is
        dense, then the symbolic sizes), the values of the symbolic sizes,
        and the orders of the inputs not dense as they are. Called on every
        call: the types' text is made only for a compile (``_types``).

        A tensor that is a permutation of a dense one (a transpose, as
        aot_autograd saves a `Linear`'s weight for the backward) is read as
        that dense tensor, permuted back inside kiln's program, not copied."""
        if len(args) != len(self.placeholders):
            raise _Fallback(f"{len(args)} arguments for {len(self.placeholders)} inputs")
        tensors, sizes = {}, {}
        for n, a in zip(self.placeholders, args):
            if isinstance(a, torch.Tensor):
                tensors[n.name] = a
            elif isinstance(a, (int, torch.SymInt)) and not isinstance(a, bool):
                sizes[n.name] = int(a)
            else:
                raise _Fallback(f"input {n.name} is a {type(a).__name__}")
        for n in self.attrs:
            value = operator.attrgetter(n.target)(self.gm)
            if not isinstance(value, torch.Tensor):
                raise _Fallback(f"attribute {n.target} is not a tensor")
            tensors[n.name] = value
        key, orders, read = [], {}, {}
        for name, t in tensors.items():
            if not t.is_cpu:
                raise _Fallback(f"{name} is on {t.device}")
            order = _dense_order(t)
            if order is None:
                read[name] = t
            else:
                orders[name] = order
                read[_dense_name(name)] = t.permute(order)
            key.append((t.dtype, tuple(t.shape), order and tuple(order)))
        key.extend(sizes.items())
        return read, tuple(key), sizes, orders

    @staticmethod
    def _types(tensors: dict) -> dict:
        """The kiln type of each tensor, by name."""
        return {name: _kiln_type(t.dtype, t.shape) for name, t in tensors.items()}

    def _compile(self, types: dict, sizes: dict, orders: dict):
        nodes, source, out_offset = self._source(sizes, orders)
        output = [("n", n.name) for n in self.computed]
        return _kiln.compile_fx(
            nodes, output, out_offset, source, f"<{self.label}>", types, self.tier, self.optimize
        )

    def _eager(self, reason: str):
        self.eager_reason = reason
        warnings.warn(
            f"kiln: {self.label} runs in eager PyTorch: {reason}", RuntimeWarning, stacklevel=4
        )
        for n in self.gm.graph.nodes:
            if n.op in ("call_function", "call_method"):
                self.stats.record(n, "eager", reason)

    def forward(self, *args):
        if self.eager_reason is None:
            # The arguments, then the constants' values (read once a call).
            values = args
            if self.attr_getters:
                values = (*args, *(get(self.gm) for get in self.attr_getters))
            # The last call's plan first: kiln checks each tensor's dtype,
            # shape and layout against the program (`dlpack.rs`), so a call
            # like the last skips the signature (`_key_of` of every value,
            # a sixth of a small graph's call); one that differs fails that
            # check before anything runs and finds its plan by signature.
            # Arguments that are not tensors (symbolic sizes) are compared
            # here: they are compiled in.
            last = self.last
            if last is not None and all(
                [type(values[i]) is type(v) and values[i] == v for i, v in last[2]]
            ):
                try:
                    return self._run(last, values)
                except ExecError:
                    raise
                except (TypeError, ValueError, RuntimeError):
                    pass
            signature = tuple([_key_of(v) for v in values])
            try:
                call = self.calls.get(signature)
            except TypeError:  # an argument that does not hash
                signature = call = None
            if call is None:
                call = self._prepare(args, signature)
            if call is not None:
                self.last = call
                return self._run(call, values)
        return self.gm(*args)

    def _prepare(self, args, signature: Optional[tuple]) -> Optional[tuple]:
        """The call for a new signature: the compiled function (compiled
        for the key `_inputs` makes, or found in `cache` under it) and
        which argument or constant each of its inputs reads, in which order
        of axes; kept under `signature` so that the next call with it only
        reads its arrays. None where eager PyTorch runs the graph from now
        on."""
        try:
            tensors, key, sizes, orders = self._inputs(args)
            with self.lock:
                fn = self.cache.get(key)
                if fn is None:
                    fn = self._compile(self._types(tensors), sizes, orders)
                    self.cache[key] = fn
                    with self.stats.lock:
                        self.stats.compiles += 1
        except (_Fallback, KilnError) as e:
            self._eager(str(e).splitlines()[0] if str(e) else type(e).__name__)
            return None
        sources = {}
        for i, n in enumerate(self.placeholders + self.attrs):
            if n.name in orders:
                sources[_dense_name(n.name)] = (i, tuple(orders[n.name]))
            elif n.name in tensors and not tensors[n.name].is_contiguous():
                sources[n.name] = (i, _COPY)
            else:
                sources[n.name] = (i, None)
        scalars = tuple((i, a) for i, a in enumerate(args) if not isinstance(a, torch.Tensor))
        call = (fn, tuple(sources[name] for name in fn.inputs), scalars)
        if signature is not None:
            if len(self.calls) >= _SIGNATURES:
                self.calls.clear()
            self.calls[signature] = call
        return call

    def _run(self, call: tuple, values: tuple):
        """Calls kiln on `values` (the arguments, then the constants) by
        `call`'s plan (`_prepare`)."""
        fn, reads, _ = call
        # Each tensor as a DLPack capsule, which kiln reads in place (a
        # third of `detach().numpy()`'s time); a tensor dense in another
        # order of its axes permuted to it, one dense in none copied.
        arrays = tuple(
            [
                _to_dlpack(
                    values[i]
                    if order is None
                    else values[i].contiguous()
                    if order is _COPY
                    else values[i].permute(order)
                )
                for i, order in reads
            ]
        )
        # kiln's kernels use the threads eager torch would (users set them
        # with torch.set_num_threads), call by call, and eager torch's own
        # OpenMP threads where it has them (`_share_threads`).
        results = fn._call_torch(arrays, torch.get_num_threads())
        computed = [
            torch.from_numpy(r) if type(r) is np.ndarray and r.ndim else _scalar_tensor(r, dtype)
            for r, dtype in zip(results, self.computed_dtypes)
        ]
        out = []
        for kind, source, chain in self.out_plan:
            if kind == _COMPUTED:
                value = computed[source]
            elif kind == _ARGUMENT:
                value = values[source]
            else:
                value = source
            if chain is not None:
                for target, rest in chain:
                    value = target(value, *rest)
                value = value.detach()
            out.append(value)
        return tuple(out) if self.out_tuple else out[0]


def _key_of(value) -> tuple:
    """A tensor's dtype, shape, strides and device, or another value's type
    and itself: its part of a call's signature, which decides the compiled
    function and how the arguments are read (`_KilnGraph.forward`)."""
    if isinstance(value, torch.Tensor):
        return value.dtype, value.shape, value.stride(), value.device
    return type(value), value


def _scalar_tensor(value, dtype) -> torch.Tensor:
    """A 0-d result as a tensor of its node's dtype (kiln returns a
    Python scalar for one)."""
    if isinstance(value, np.ndarray):
        value = value.item()
    return torch.tensor(value, dtype=dtype)


def _compile_graph(gm: torch.fx.GraphModule, tier: str, optimize: bool, stats: _Stats) -> Callable:
    """Compiles an ATen graph: its dropouts' masks drawn first
    (`_hoist_dropouts`), then kiln runs what it supports and eager PyTorch
    the rest."""
    stats.graphs += 1
    draws, symbols = _hoist_dropouts(gm)
    compiled = _partition(gm, tier, optimize, stats)
    run = compiled.forward if isinstance(compiled, torch.nn.Module) else compiled
    return run if draws is None else _drawing(run, draws, symbols)


def _partition(gm: torch.fx.GraphModule, tier: str, optimize: bool, stats: _Stats):
    """Partitions an ATen graph: kiln runs what it supports, eager the rest."""
    calls = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method")]
    unsupported = {n: _why_not(n) for n in calls}
    unsupported = {n: r for n, r in unsupported.items() if r is not None}
    if not unsupported and calls:
        for n in calls:
            stats.record(n, "kiln", None)
        return _KilnGraph(gm, tier, optimize, stats, f"graph {stats.graphs}")
    if len(unsupported) == len(calls):
        for n in calls:
            stats.record(n, "eager", unsupported[n])
        return gm
    partitioner = CapabilityBasedPartitioner(gm, _Support(), allows_single_node_partition=True)
    partitions = partitioner.propose_partitions()
    in_kiln = {n for p in partitions for n in p.nodes}
    for n in calls:
        if n in in_kiln:
            stats.record(n, "kiln", None)
        else:
            stats.record(n, "eager", unsupported.get(n, "left outside kiln's partitions"))
    fused = partitioner.fuse_partitions(partitions, prefix="kiln_")
    for name, sub in list(fused.named_children()):
        if name.startswith("kiln_") and isinstance(sub, torch.fx.GraphModule):
            label = f"graph {stats.graphs} {name}"
            setattr(fused, name, _KilnGraph(sub, tier, optimize, stats, label))
    fused.recompile()
    return fused


_BACKWARD_WARNED = False


def _warn_backward_eager(gm: torch.fx.GraphModule, stats: "_Stats"):
    """Warns once per process when a backward graph leaves ops to eager
    PyTorch, naming them."""
    global _BACKWARD_WARNED
    reports = [stats.nodes.get((stats.graphs, n.name)) for n in gm.graph.nodes]
    eager = sorted({r.target for r in reports if r is not None and r.ran_on == "eager"})
    if eager and not _BACKWARD_WARNED:
        _BACKWARD_WARNED = True
        warnings.warn(
            f"kiln: the backward pass runs {', '.join(eager)} in eager PyTorch",
            RuntimeWarning,
            stacklevel=3,
        )


def _torch_openmp() -> Optional[str]:
    """The OpenMP runtime eager torch's kernels run on, if torch's parallel
    backend is OpenMP: the loaded ``libgomp``/``libomp``/``libiomp5`` in
    torch's own directories (pip's wheels carry one), else the only one the
    process has loaded."""
    import os
    import re

    if "parallel backend: OpenMP" not in torch.__config__.parallel_info():
        return None
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split(None, 5)[5].strip() for line in maps if len(line.split(None, 5)) == 6}
    except OSError:
        return None
    runtimes = sorted(p for p in paths if re.match(r"lib(g|i)?omp[\w.-]*\.so", os.path.basename(p)))
    home = os.path.dirname(os.path.dirname(torch.__file__))
    own = [p for p in runtimes if p.startswith(os.path.join(home, "torch"))]
    if own:
        return own[0]
    return runtimes[0] if len(runtimes) == 1 else None


_looked_for_openmp = False


def _share_threads():
    """Finds eager torch's OpenMP runtime, on which the backend's kernels
    run their parallel stages (as Inductor's generated loops do) rather than
    on a second pool spinning for the same cores: once per process, when
    the backend first compiles."""
    global _looked_for_openmp
    if not _looked_for_openmp:
        _looked_for_openmp = True
        path = _torch_openmp()
        if path is not None:
            _kiln._share_openmp(path)


def _make_backend(tier: str, optimize: bool, stats: _Stats):
    from functorch.compile import make_boxed_func

    _share_threads()

    def forward(gm: torch.fx.GraphModule, example_inputs):
        return make_boxed_func(_compile_graph(gm, tier, optimize, stats))

    def backward(gm: torch.fx.GraphModule, example_inputs):
        compiled = _compile_graph(gm, tier, optimize, stats)
        _warn_backward_eager(gm, stats)
        return make_boxed_func(compiled)

    aot = aot_autograd(
        fw_compiler=forward,
        bw_compiler=backward,
        decompositions=_decompositions(),
    )

    def compile_graph(gm: torch.fx.GraphModule, example_inputs):
        lean = _lean_training(gm, example_inputs, tier, optimize, stats)
        return lean if lean is not None else aot(gm, example_inputs)

    return compile_graph


#: The tensor types `_lean_training` takes (a subclass goes through
#: aot_autograd's wrappers, which know its protocol).
_PLAIN = (torch.Tensor, torch.nn.Parameter)


#: Ops of the export tracer's graphs that only check (`_lean_training`).
_ASSERTS = {
    torch.ops.aten._assert_tensor_metadata.default,
    torch.ops.aten._assert_scalar.default,
    torch.ops.aten._assert_async.msg,
}


def _lean_training(gm: torch.fx.GraphModule, example_inputs, tier: str, optimize: bool, stats):
    """A training graph's step without aot_autograd's runtime wrappers, where
    it needs none of them: its forward and backward graphs as
    aot_autograd's tracer and default partitioner make them (the graphs its
    own path compiles), run by one ``torch.autograd.Function`` of kiln's.
    Those wrappers (input mutations, aliased outputs, subclasses, tangents'
    layouts) cost about 100 µs a step on a small MLP (docs/performance.md),
    most of a small model's step around its kernels.

    Only for a graph that needs none of them: grad enabled, every input a
    plain CPU tensor or a size, every output a floating tensor that
    requires grad, no input mutated (a training batch norm's running
    statistics are: those models keep aot_autograd's path), no output an
    alias of an input or of another output. Else None, and aot_autograd
    compiles the graph. Symbolic sizes are traced as Dynamo made them (its
    fake inputs): the sizes the backward reads are saved beside the
    tensors, as aot_autograd saves them."""
    from torch._functorch.aot_autograd import aot_export_joint_simple
    from torch._functorch.partitioners import default_partition

    if not torch.is_grad_enabled():
        return None
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    if not all(type(t) in _PLAIN and t.device.type == "cpu" for t in tensors):
        return None
    if len(tensors) + sum(isinstance(a, (int, torch.SymInt)) for a in example_inputs) != len(
        example_inputs
    ) or not any(t.requires_grad for t in tensors):
        return None
    # Dynamo's fake inputs, with its symbolic sizes where it made them.
    fakes = [n.meta.get("example_value") for n in gm.graph.find_nodes(op="placeholder")]
    if len(fakes) != len(example_inputs) or any(f is None for f in fakes):
        return None
    outputs = gm.graph.find_nodes(op="output")[0].args[0]
    if not isinstance(outputs, (tuple, list)) or not outputs:
        return None
    for o in outputs:
        value = o.meta.get("example_value") if isinstance(o, torch.fx.Node) else None
        if not (
            isinstance(value, torch.Tensor)
            and value.dtype.is_floating_point
            and value.requires_grad
        ):
            return None
    try:
        # Raises on an input mutated and on an output aliasing an input.
        joint = aot_export_joint_simple(
            gm, tuple(fakes), trace_joint=True, decompositions=_decompositions()
        )
        # The export tracer keeps checks of dtypes and sizes that
        # aot_autograd's own path drops (`_assert_tensor_metadata` of a
        # `.to`): they compute nothing.
        for n in list(joint.graph.nodes):
            if n.op == "call_function" and n.target in _ASSERTS and not n.users:
                joint.graph.erase_node(n)
        joint.recompile()
        n_in, n_out = len(example_inputs), len(outputs)
        fw_gm, bw_gm = default_partition(joint, None, num_fwd_outputs=n_out)
    except Exception:  # noqa: BLE001 - any graph aot_autograd's own path must handle
        return None
    fw_outs = fw_gm.graph.find_nodes(op="output")[0].args[0]
    # No output is another.
    if len({n for n in fw_outs[:n_out] if isinstance(n, torch.fx.Node)}) != n_out:
        return None
    # The forward returns its outputs, the tensors saved, then the sizes
    # saved; the backward reads the sizes, the tensors, then a tangent an
    # output, and gives a gradient (or None) an input.
    saved = list(fw_outs[n_out:])
    sizes = [n for n in saved if not isinstance(n.meta.get("val"), torch.Tensor)]
    saved_tensors = saved[: len(saved) - len(sizes)]
    if saved[len(saved_tensors) :] != sizes or not all(
        isinstance(n.meta.get("val"), (int, torch.SymInt)) for n in sizes
    ):
        return None
    want = [n.name for n in (*sizes, *saved_tensors)] + [f"tangents_{i + 1}" for i in range(n_out)]
    if [n.name for n in bw_gm.graph.find_nodes(op="placeholder")] != want:
        return None
    if len(bw_gm.graph.find_nodes(op="output")[0].args[0]) != n_in:
        return None
    forward = _compile_graph(fw_gm, tier, optimize, stats)
    backward = _compile_graph(bw_gm, tier, optimize, stats)
    _warn_backward_eager(bw_gm, stats)
    with stats.lock:
        stats.lean += 1
    n_tensors = len(saved_tensors)

    class Step(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *args):
            results = forward(*args)
            ctx.save_for_backward(*results[n_out : n_out + n_tensors])
            ctx.sizes = results[n_out + n_tensors :]
            return tuple(results[:n_out])

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, *tangents):
            # Dense, as the graph was traced for them (aot_autograd's
            # runtime does the same): a part eager PyTorch runs may read
            # a tangent's memory (`as_strided`); a `sum`'s is expanded.
            tangents = [t if t.is_contiguous() else t.contiguous() for t in tangents]
            return tuple(backward(*ctx.sizes, *ctx.saved_tensors, *tangents))

    def step(*args):
        return Step.apply(*args)

    return step


def _check_options(options: Optional[dict]) -> tuple:
    options = dict(options or {})
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise ValueError(f"unknown kiln backend options {unknown}: the options are {list(_OPTIONS)}")
    tier = options.get("tier", "auto")
    tiers = [*_kiln.tiers(), "auto"]
    if tier not in tiers:
        raise ValueError(f"tier must be one of {', '.join(tiers)}, not {tier!r}")
    optimize = options.get("optimize", True)
    if not isinstance(optimize, bool):
        raise TypeError(f"optimize must be a bool, not {type(optimize).__name__}")
    return tier, optimize


def backend(gm: torch.fx.GraphModule, example_inputs, options: Optional[dict] = None, **kwargs):
    """The TorchDynamo backend: ``torch.compile(model, backend="kiln",
    options={"tier": "llvm"})``. Options: ``tier`` (``"auto"``, the default:
    Cranelift at once, LLVM from the background once the calls paid for it,
    or at once from the code cache; ``"cranelift"``, ``"llvm"``, ``"vm"`` or
    ``"interp"``) and ``optimize`` (kiln's graph
    optimizations, on by default)."""
    if kwargs.get("mode") not in (None, "default"):
        raise ValueError(f"the kiln backend has no mode {kwargs['mode']!r}")
    tier, optimize = _check_options(options)
    return _make_backend(tier, optimize, _Stats())(gm, example_inputs)


@dataclasses.dataclass(frozen=True)
class NodeReport:
    """Where one ATen node ran."""

    name: str
    target: str
    #: ``"kiln"`` or ``"eager"``.
    ran_on: str
    #: Why eager PyTorch ran it (None on kiln).
    reason: Optional[str]


@dataclasses.dataclass
class Explanation:
    """What ``torch.compile(backend="kiln")`` did with a model."""

    #: Every ATen node of every graph Dynamo handed over, in order.
    nodes: list
    #: How many graphs Dynamo handed over (graph breaks add graphs).
    graphs: int
    #: How many kiln programs were compiled.
    compiles: int
    #: What the compiled model returned on the inputs.
    output: Any = None

    @property
    def kiln_nodes(self) -> list:
        return [n for n in self.nodes if n.ran_on == "kiln"]

    @property
    def eager_nodes(self) -> list:
        return [n for n in self.nodes if n.ran_on == "eager"]

    def __str__(self) -> str:
        lines = [
            f"{len(self.kiln_nodes)} of {len(self.nodes)} ATen nodes ran on kiln "
            f"({self.graphs} graph(s), {self.compiles} kiln program(s))"
        ]
        width = max((len(n.name) for n in self.nodes), default=0)
        for n in self.nodes:
            why = f"  ({n.reason})" if n.reason else ""
            lines.append(f"  {n.name:<{width}}  {n.ran_on:<5}  {n.target}{why}")
        return "\n".join(lines)


def explain(model: Callable, *inputs: Any, tier: str = "auto", optimize: bool = True) -> Explanation:
    """Compiles ``model`` with the kiln backend, runs it once on ``inputs``
    (without gradients), and reports which ATen nodes kiln ran and which
    eager PyTorch ran, and why, with what the model returned."""
    tier, optimize = _check_options({"tier": tier, "optimize": optimize})
    stats = _Stats()
    compiled = torch.compile(model, backend=_make_backend(tier, optimize, stats), dynamic=False)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        output = compiled(*inputs)
    return Explanation(list(stats.nodes.values()), stats.graphs, stats.compiles, output)
