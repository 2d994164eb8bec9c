"""kiln compiles computation graphs to native code.

``kiln.compile`` turns the Python subset (or a ``.kiln``, torch.fx or
TensorFlow file) into a callable; ``kiln.aot`` writes objects, assembly, LLVM IR
and wasm modules. See docs/python.md.
"""

from __future__ import annotations

import atexit
import os
from pathlib import Path
from typing import Mapping, Optional, Sequence, Union

from . import _kiln
from ._errors import (
    CompileError,
    DivisionByZeroError,
    ExecError,
    IndexOutOfRangeError,
    KilnError,
    ParseError,
)
from ._kiln import Fit, Function, Population

__version__ = _kiln.__version__

# At exit, a background tier-up's LLVM compile finishes before the C exit
# handlers destroy LLVM's globals (Python runs these callbacks first).
atexit.register(_kiln._before_exit)

try:  # `df.kiln` and `kiln.arrow` when pandas and pyarrow are installed.
    from . import arrow, pandas  # noqa: F401
except ImportError:  # pragma: no cover - the optional extras are absent
    pass

__all__ = [
    "Function",
    "Population",
    "Fit",
    "KilnError",
    "ParseError",
    "CompileError",
    "ExecError",
    "DivisionByZeroError",
    "IndexOutOfRangeError",
    "compile",
    "aot",
    "tiers",
    "wait_for_tier_up",
    "cache_info",
    "jit",
    "set_num_threads",
    "get_num_threads",
]

Source = Union[str, bytes, "os.PathLike[str]"]

_FORMATS = ("py", "kiln", "fx", "tf", "lightgbm", "xgboost", "kiln-trees")


def tiers() -> list[str]:
    """The tiers this build runs on, the reference interpreter first: ``['interp', 'vm', 'cranelift', 'llvm']``."""
    return list(_kiln.tiers())


def wait_for_tier_up(timeout: float = 600.0) -> bool:
    """Waits until no ``auto`` function's LLVM compile is queued or running
    on the background thread, at most ``timeout`` seconds; returns whether
    none is. Calls never wait for it: this is for benchmarks, and for a
    server that warms up before it serves."""
    return _kiln.wait_for_tier_up(float(timeout))


def cache_info() -> dict:
    """The LLVM code cache: ``{"dir": path or None, "hits": …, "misses": …,
    "writes": …}`` (this process's counts). ``KILN_CACHE_DIR`` moves it,
    ``KILN_CACHE_SIZE`` bounds it (bytes, or ``512M``, ``2G``; 1 GiB by
    default), ``KILN_CACHE=0`` turns it off."""
    return _kiln.cache_info()


def set_num_threads(n: int) -> None:
    """Sets how many threads kiln's kernels may use, for the whole process.

    The default is ``KILN_NUM_THREADS`` if set, else every core. A kernel
    cuts a loop into chunks only when each thread gets enough work (small
    calls stay on the calling thread), and returns the same bits at any
    count. Raises ``ValueError`` unless ``n`` is a positive integer.
    """
    _kiln.set_num_threads(n)


def get_num_threads() -> int:
    """How many threads kiln's kernels called from this thread may use."""
    return _kiln.get_num_threads()


def _format_of(path: Path) -> Optional[str]:
    if path.name in ("graph.txt", "module.txt"):
        return "fx"
    return {
        ".kiln": "kiln",
        ".py": "py",
        ".fx": "fx",
        ".pbtxt": "tf",
        ".pb": "tf",
    }.get(path.suffix)


def _spec(
    source: Source,
    format: Optional[str],
    inputs: Optional[Mapping[str, str]],
    weights: Union[None, bytes, "os.PathLike[str]"],
    outputs: Optional[Sequence[str]],
    raw_score: bool = False,
    columns: bool = False,
    grad: Optional[Sequence[str]] = None,
    grad_of: Optional[str] = None,
    jacobian: Optional[Sequence[str]] = None,
) -> dict:
    """What the native module needs to read a source: its bytes, format and
    name, and the frontends' options."""
    if format is not None and format not in _FORMATS:
        raise ValueError(f"format must be one of {', '.join(_FORMATS)}, not {format!r}")
    modules = None
    if isinstance(source, os.PathLike):
        path = Path(source)
        fmt = format or _format_of(path)
        if fmt is None:
            raise ValueError(
                f"{path}: cannot tell the format from the file name; pass format='py'|'kiln'|'fx'|'tf'"
            )
        data = path.read_bytes()
        name = str(path)
        if fmt == "fx":
            # The layout of a saved torch.fx graph: the state_dict and the
            # module tree beside the graph text.
            beside = path.with_name("weights.safetensors")
            if weights is None and beside.is_file():
                weights = beside
            tree = path.with_name("module.txt")
            if tree.is_file() and tree != path:
                modules = tree.read_text()
    elif isinstance(source, str):
        data, name, fmt = source.encode(), "<source>", format or "py"
    elif isinstance(source, (bytes, bytearray)):
        data, name, fmt = bytes(source), "<source>", format or "py"
    else:
        raise TypeError(
            f"source must be a str, bytes or a path (os.PathLike), not {type(source).__name__}"
        )
    if isinstance(weights, os.PathLike):
        weights = Path(weights).read_bytes()
    if inputs is not None and not isinstance(inputs, Mapping):
        raise TypeError("inputs must be a mapping of input names to types such as 'f64[n]'")
    return {
        "data": data,
        "format": fmt,
        "name": name,
        "inputs": {str(k): str(v) for k, v in (inputs or {}).items()},
        "weights": weights,
        "modules": modules,
        "outputs": [str(o) for o in (outputs or [])],
        "raw_score": bool(raw_score),
        "columns": bool(columns),
        "grad": _names("grad", grad),
        "grad_of": None if grad_of is None else str(grad_of),
        "jacobian": _names("jacobian", jacobian),
    }


def _names(option: str, names: Optional[Sequence[str]]) -> list:
    """Input names as a list: ``("x", "w")``, or one name as a string."""
    if names is None:
        return []
    if isinstance(names, str):
        return [names]
    if not all(isinstance(n, str) for n in names):
        raise TypeError(f"{option} must be input names (str), not {names!r}")
    return list(names)


def compile(
    source: Source,
    *,
    tier: str = "auto",
    inputs: Optional[Mapping[str, str]] = None,
    format: Optional[str] = None,
    optimize: bool = True,
    weights: Union[None, bytes, "os.PathLike[str]"] = None,
    outputs: Optional[Sequence[str]] = None,
    grad: Union[None, str, Sequence[str]] = None,
    grad_of: Optional[str] = None,
    jacobian: Union[None, str, Sequence[str]] = None,
) -> Function:
    """Compiles a source into a callable :class:`kiln.Function`.

    ``source`` is Python-subset text (an expression such as ``"x * 2.0 + 1.0"``
    or a ``def``), or a path (``pathlib.Path``) to a ``.py``, ``.kiln``,
    torch.fx (``.fx``, ``graph.txt``, ``module.txt``) or TensorFlow
    (``.pbtxt``, ``.pb``) file. ``tier`` is ``"auto"`` (the default: LLVM's
    code at once where the code cache holds it, else Cranelift, with LLVM
    compiled on a background thread once the calls have paid for it and
    swapped in between calls; ``Function.tier`` and ``Function.stats`` say
    where it stands), ``"cranelift"`` (compiles in microseconds), ``"llvm"``
    (O3), ``"vm"`` or ``"interp"`` (the reference interpreter). ``inputs`` gives input types by name, such as
    ``{"x": "f64[n]", "k": "i64"}``: free names of an expression are ``f64``
    scalars otherwise.

    ``grad`` names float inputs: the function then also returns the gradient
    of the sum of its output's elements with respect to each (``grad_x``,
    shaped like ``x``; reverse mode), after its outputs. ``grad_of`` names
    the output when there are several. ``jacobian`` names scalar float
    inputs instead: each output's derivative with respect to each, element
    by element (``dy/dc``, shaped like ``y``; forward mode). Every tier
    returns the same bits; docs/semantics.md says what each op's derivative
    is where it has none.
    """
    spec = _spec(
        source, format, inputs, weights, outputs, grad=grad, grad_of=grad_of, jacobian=jacobian
    )
    recipe = ("compile", spec, tier, optimize)
    return _kiln.compile(spec, tier, bool(optimize), recipe)


def aot(
    source: Source,
    *,
    target: str = "native",
    emit: str = "obj",
    tier: Optional[str] = None,
    opt_level: int = 3,
    cpu: Optional[str] = None,
    features: Optional[str] = None,
    name: Optional[str] = None,
    optimize: bool = True,
    inputs: Optional[Mapping[str, str]] = None,
    format: Optional[str] = None,
    weights: Union[None, bytes, "os.PathLike[str]"] = None,
    outputs: Optional[Sequence[str]] = None,
    grad: Union[None, str, Sequence[str]] = None,
    grad_of: Optional[str] = None,
    jacobian: Union[None, str, Sequence[str]] = None,
) -> Union[str, bytes]:
    """Compiles a source ahead of time, as the ``aot`` command does.

    ``emit`` is ``"obj"``, ``"asm"``, ``"llvm-ir"``, ``"bc"``, ``"wasm"`` (a
    linked wasm32 module; ``target="wasm32"``) or ``"header"`` (the C header
    of the function's ABI). Text outputs are returned as ``str``, binary ones
    as ``bytes``. ``target`` is ``"x86_64"``, ``"aarch64"``, ``"riscv64"``,
    ``"wasm32"``, ``"native"`` or any LLVM triple; ``tier`` defaults to
    ``"llvm"``. ``grad``, ``grad_of`` and ``jacobian`` add derivatives to
    the function, as :func:`compile`'s do.
    """
    spec = _spec(
        source, format, inputs, weights, outputs, grad=grad, grad_of=grad_of, jacobian=jacobian
    )
    return _kiln.aot(
        spec, str(target), str(emit), tier, int(opt_level), cpu, features, name, bool(optimize)
    )


_CACHE: dict = {}


def _rebuild(recipe):
    """Unpickles what kiln pickled: compiles it again, once per process."""
    key = repr(recipe)
    hit = _CACHE.get(key)
    if hit is None:
        kind, *rest = recipe
        if kind != "compile":
            raise ValueError(f"unknown kiln pickle {kind!r}")
        spec, tier, optimize = rest
        hit = _kiln.compile(spec, tier, optimize, recipe)
        _CACHE[key] = hit
    return hit


def _population(exprs, variables, tier, threads, vectorize=None, dtype=None):
    """Unpickles a kiln.Population: compiles it again (pickles made before
    `vectorize` existed have four fields, before `dtype` five)."""
    return Population(exprs, variables, tier=tier, threads=threads or None, vectorize=vectorize,
                      dtype=dtype)


from ._jit import jit  # noqa: E402  (needs _spec above)
from . import trees  # noqa: E402,F401  (needs _spec above)
