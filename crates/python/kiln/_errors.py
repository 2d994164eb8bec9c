"""kiln's exceptions. Each is also the built-in exception a Python user would
catch for the same problem, so ``except SyntaxError`` and
``except ZeroDivisionError`` work as well as ``except kiln.KilnError``."""


class KilnError(Exception):
    """Base class of kiln's own exceptions."""


class ParseError(KilnError, SyntaxError):
    """The source does not parse. The message is kiln's located one
    (``file:line:col: error: ...`` with the line and a caret); ``filename``,
    ``lineno``, ``offset`` and ``text`` are set as for any ``SyntaxError``."""


class CompileError(KilnError, ValueError):
    """The graph does not verify (wrong types or shapes, every problem listed
    and located), or a tier cannot compile it."""


class ExecError(KilnError, RuntimeError):
    """A compiled program failed while running."""


class DivisionByZeroError(ExecError, ZeroDivisionError):
    """Integer division or remainder by zero (kiln's integer semantics make it
    an error, as Python does; float division follows IEEE 754)."""


class IndexOutOfRangeError(ExecError, IndexError):
    """An index outside its axis (``embedding``, ``gather``,
    ``index_select``, and their gradients' ``index_add``): the call fails, as PyTorch's does, and nothing is read
    out of bounds."""
