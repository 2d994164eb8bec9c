"""``@kiln.jit``: compile a Python function on its first call, specialized on
the dtypes and shapes of its arguments, one compiled program per signature."""

from __future__ import annotations

import functools
import inspect
import textwrap
import threading

import numpy as np

from . import _kiln
from ._errors import ParseError

# NumPy dtypes kiln computes with, by NumPy's name.
_DTYPES = {"bool": "bool", "int32": "i32", "int64": "i64", "float32": "f32", "float64": "f64"}


def _source(fn):
    """The function's source, without its decorators, padded with blank lines
    so that kiln's line numbers are the file's."""
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError) as e:
        # numba reads bytecode; kiln reads the source, with its lines, so
        # that its errors point into it.
        raise TypeError(
            f"@kiln.jit needs the source of {fn!r} ({e}): Python keeps it for functions "
            "defined in a file or a notebook cell, not in the plain REPL, `python -c` or "
            "`exec`. Define the function in a file, or compile its text: "
            "kiln.compile(\"def f(x: f64[n]):\\n    return x * 2.0\")"
        ) from None
    text = textwrap.dedent("".join(lines))
    body = text.splitlines(keepends=True)
    while body and not body[0].lstrip().startswith("def "):
        if not body[0].lstrip().startswith("@") and body[0].strip():
            raise TypeError(f"@kiln.jit compiles functions defined with `def`, not {fn!r}")
        body.pop(0)
        first += 1
    return "\n" * (first - 1) + "".join(body)


def _type_of(value, name, dynamic):
    """The kiln type of one argument: `f64` for a float, `f64[3, 4]` for an
    array (`f64[n, 4]` with dynamic=True)."""
    if isinstance(value, bool) or isinstance(value, np.bool_):
        return "bool"
    if isinstance(value, int):
        return "i64"
    if isinstance(value, float):
        return "f64"
    array = value if isinstance(value, (np.ndarray, np.generic)) else None
    if array is None:
        try:
            array = np.asarray(value)
        except ValueError as e:
            raise ValueError(f"argument `{name}`: {e}") from None
    dtype = _DTYPES.get(array.dtype.name)
    if dtype is None:
        raise TypeError(
            f"argument `{name}` is {array.dtype}; kiln computes with bool, int32, int64, float32 and float64"
        )
    if array.ndim == 0:
        return dtype
    dims = [str(d) for d in array.shape]
    if dynamic:
        dims[0] = "n"
    return f"{dtype}[{', '.join(dims)}]"


class JitFunction:
    """A Python function compiled by kiln on first call, per signature."""

    def __init__(self, fn, *, tier="auto", dynamic=False, optimize=True):
        functools.update_wrapper(self, fn)
        self._fn = fn
        self._tier, self._dynamic, self._optimize = tier, dynamic, optimize
        self._text = _source(fn)
        self._file = inspect.getsourcefile(fn) or "<source>"
        self._params = list(inspect.signature(fn).parameters)
        self._compiled = {}
        self._lock = threading.Lock()
        # Syntax errors (anything outside the subset) are raised now, located
        # in the file; type errors wait for the first call's types.
        _kiln.check_syntax(self._text, self._file)

    @property
    def signatures(self):
        """The signatures compiled so far: tuples of kiln types."""
        return list(self._compiled)

    def compiled(self, *args):
        """The :class:`kiln.Function` for these arguments (compiling it if
        needed)."""
        dyn = self._dynamic
        key = tuple(
            _type_of(a, n, dyn is True or (not isinstance(dyn, bool) and n in dyn))
            for a, n in zip(args, self._params)
        )
        hit = self._compiled.get(key)
        if hit is None:
            with self._lock:
                hit = self._compiled.get(key)
                if hit is None:
                    from . import _spec

                    spec = _spec(self._text, "py", dict(zip(self._params, key)), None, None)
                    spec["name"] = self._file
                    recipe = ("compile", spec, self._tier, self._optimize)
                    hit = _kiln.compile(spec, self._tier, self._optimize, recipe)
                    self._compiled[key] = hit
        return hit

    def __call__(self, *args, **kwargs):
        if kwargs:
            args = list(args) + [None] * (len(self._params) - len(args))
            for key, value in kwargs.items():
                if key not in self._params:
                    raise TypeError(f"{self.__name__}() has no parameter `{key}`")
                i = self._params.index(key)
                if i < len(args) and args[i] is not None and i < len(args) - len(kwargs):
                    raise TypeError(f"{self.__name__}() got `{key}` twice")
                args[i] = value
            missing = [p for p, a in zip(self._params, args) if a is None]
            if missing:
                raise TypeError(f"{self.__name__}() is missing {', '.join(missing)}")
        if len(args) != len(self._params):
            raise TypeError(
                f"{self.__name__}() takes {len(self._params)} argument(s) ({', '.join(self._params)}), got {len(args)}"
            )
        return self.compiled(*args)(*args)

    def __repr__(self):
        return f"<kiln.jit {self.__qualname__} on {self._tier}, {len(self._compiled)} signature(s)>"

    def __reduce__(self):
        return (_rebuild_jit, (self._text, self._file, self.__name__, self._params,
                               self._tier, self._dynamic, self._optimize))


def _rebuild_jit(text, file, name, params, tier, dynamic, optimize):
    """Unpickles a ``@kiln.jit`` function from its source."""
    self = JitFunction.__new__(JitFunction)
    self._fn = None
    self.__name__ = self.__qualname__ = name
    self._tier, self._dynamic, self._optimize = tier, dynamic, optimize
    self._text, self._file, self._params = text, file, params
    self._compiled, self._lock = {}, threading.Lock()
    return self


def jit(fn=None, *, tier="auto", dynamic=False, optimize=True):
    """Compiles a Python function with kiln on its first call.

    Each distinct signature (argument dtypes and shapes) compiles once;
    shapes are exact unless ``dynamic=True``, which makes the leading
    dimension of every array argument symbolic, or ``dynamic=("x", ...)``,
    which makes only those parameters' leading dimension symbolic (the
    batch of ``x @ w`` but not the rows of ``w``). The function must be in kiln's Python subset: a
    function outside it raises ``kiln.ParseError`` at decoration (syntax) or
    at the first call (types), located in its file.
    """
    if not isinstance(dynamic, bool):
        if isinstance(dynamic, str) or not all(isinstance(n, str) for n in dynamic):
            raise TypeError("dynamic must be True, False or a tuple of parameter names")
        dynamic = tuple(dynamic)
    if fn is None:
        return functools.partial(jit, tier=tier, dynamic=dynamic, optimize=optimize)
    return JitFunction(fn, tier=tier, dynamic=dynamic, optimize=optimize)


__all__ = ["jit", "JitFunction", "ParseError"]
