"""Gandiva-style filters and projections over pyarrow record batches.

``Filter(schema, "(x > 2.0) & (x < 6.0)").evaluate(batch)`` returns the
selection vector (a ``pyarrow.UInt32Array`` of ascending row indices);
``Projector(schema, {"y": "x * 2.0"}).evaluate(batch)`` returns a
``pyarrow.RecordBatch``. Expressions are pandas queries with SQL null
semantics (docs/frontends.md); batches cross into kiln through the Arrow C
Data Interface without copies. The pyarrow.gandiva API these mirror is not in
pyarrow's PyPI wheels.
"""

from __future__ import annotations

from typing import Mapping, Sequence, Tuple, Union

import numpy as np
import pyarrow as pa

from . import _kiln

__all__ = ["Filter", "Projector"]

Batch = Union[pa.RecordBatch, pa.Table]


def _batches(data: Batch):
    if isinstance(data, pa.Table):
        return data.to_batches()
    return [data]


class Filter:
    """A compiled condition over batches of ``schema``."""

    def __init__(self, schema: pa.Schema, expr: str, *, tier: str = "auto"):
        self.schema, self.expr, self.tier = schema, expr, tier
        self._inner = _kiln._Filter(schema, expr, tier)

    def indices(self, data: Batch) -> np.ndarray:
        """The selection as a NumPy ``uint32`` array (a table's batches
        numbered on from one another)."""
        parts, offset = [], 0
        for batch in _batches(data):
            part = self._inner.indices(batch)
            parts.append(part + np.uint32(offset) if offset else part)
            offset += batch.num_rows
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint32)

    def positions(self, data: Batch) -> np.ndarray:
        """The selection as NumPy ``int64`` positions (what pandas' ``iloc``
        takes without converting)."""
        parts, offset = [], 0
        for batch in _batches(data):
            part = self._inner.positions(batch)
            parts.append(part + offset if offset else part)
            offset += batch.num_rows
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def evaluate(self, data: Batch) -> pa.UInt32Array:
        """The ascending indices of the rows where the condition is true
        (a null condition keeps no row, as in SQL)."""
        return pa.array(self.indices(data), type=pa.uint32())

    def count(self, data: Batch) -> int:
        """How many rows the condition keeps."""
        return sum(self._inner.count(b) for b in _batches(data))

    def apply(self, data: Batch) -> Batch:
        """The rows where the condition is true."""
        return data.take(self.evaluate(data))

    def __repr__(self):
        return f"<kiln.arrow.Filter {self.expr!r} on {self.tier}>"

    def __reduce__(self):
        return (_filter, (self.schema, self.expr, self.tier))


class Projector:
    """Compiled expressions over batches of ``schema``, one output column
    each: ``{"name": "expr"}`` or a sequence of ``(name, expr)``."""

    def __init__(
        self,
        schema: pa.Schema,
        exprs: Union[Mapping[str, str], Sequence[Tuple[str, str]]],
        *,
        tier: str = "auto",
    ):
        items = list(exprs.items()) if isinstance(exprs, Mapping) else [tuple(e) for e in exprs]
        self.schema, self.exprs, self.tier = schema, items, tier
        self._inner = _kiln._Projector(schema, items, tier)

    def evaluate(self, data: Batch) -> pa.RecordBatch:
        """The projected columns, one row per input row (a table's batches
        are evaluated in turn and concatenated)."""
        out = [
            pa.RecordBatch._import_from_c_capsule(*self._inner.evaluate(b))
            for b in _batches(data)
        ]
        if len(out) == 1:
            return out[0]
        return pa.Table.from_batches(out).combine_chunks().to_batches()[0] if out else None

    def __repr__(self):
        return f"<kiln.arrow.Projector {dict(self.exprs)!r} on {self.tier}>"

    def __reduce__(self):
        return (_projector, (self.schema, self.exprs, self.tier))


def _filter(schema, expr, tier):
    return Filter(schema, expr, tier=tier)


def _projector(schema, exprs, tier):
    return Projector(schema, exprs, tier=tier)
