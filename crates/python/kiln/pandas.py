"""``df.kiln``: compiled ``query``/``eval`` for pandas DataFrames.

``import kiln`` registers the accessor. Columns go to kiln as Arrow arrays
without copies where pandas holds compatible buffers (NumPy-backed numbers and
bools, pyarrow-backed columns); pandas' nullable dtypes (``Float64``,
``Int64``, ``boolean`` with ``pd.NA``) follow SQL's null rules, and NaN stays a
value (it is not a null, unlike ``pyarrow.Table.from_pandas``'s default).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pyarrow as pa

from .arrow import Filter, Projector

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CACHE: dict = {}
_NULLABLE = {
    pa.float64(): pd.Float64Dtype(),
    pa.float32(): pd.Float32Dtype(),
    pa.int64(): pd.Int64Dtype(),
    pa.int32(): pd.Int32Dtype(),
    pa.bool_(): pd.BooleanDtype(),
}


def _column(series: pd.Series) -> tuple[pa.Array, bool]:
    """A column as an Arrow array, and whether pandas holds it as nullable."""
    dtype = series.dtype
    if isinstance(dtype, pd.ArrowDtype):
        return pa.chunked_array(series.array._pa_array).combine_chunks(), True
    if isinstance(dtype, pd.api.extensions.ExtensionDtype) and hasattr(series.array, "__arrow_array__"):
        return pa.array(series.array), True
    if dtype.kind in "biuf":
        return pa.array(np.ascontiguousarray(series.to_numpy()), from_pandas=False), False
    return pa.array(series, from_pandas=True), False


def _gatherable(dtype) -> bool:
    """A NumPy dtype of 1, 2, 4 or 8 bytes kiln can gather as raw bits."""
    return isinstance(dtype, np.dtype) and dtype.kind in "biufmM" and dtype.itemsize in (1, 2, 4, 8)


def _batch(df: pd.DataFrame, expr: str):
    """The columns `expr` names, as one record batch."""
    names = [n for n in dict.fromkeys(_NAME.findall(expr)) if n in df.columns]
    arrays, nullable = [], False
    for n in names:
        a, null = _column(df[n])
        arrays.append(a)
        nullable |= null
    if not names:
        # A query over no column still has the frame's rows.
        return pa.RecordBatch.from_arrays([pa.nulls(len(df), pa.bool_())], names=["__rows__"]), False
    return pa.RecordBatch.from_arrays(arrays, names=names), nullable


def _compiled(kind, schema, expr, tier):
    key = (kind, schema, expr, tier)
    hit = _CACHE.get(key)
    if hit is None:
        hit = Filter(schema, expr, tier=tier) if kind == "filter" else Projector(schema, {"value": expr}, tier=tier)
        if len(_CACHE) > 256:
            _CACHE.clear()
        _CACHE[key] = hit
    return hit


@pd.api.extensions.register_dataframe_accessor("kiln")
class KilnAccessor:
    """``df.kiln.query(expr)``, ``.eval(expr)``, ``.mask(expr)``,
    ``.indices(expr)``: pandas' query language, compiled by kiln."""

    def __init__(self, df: pd.DataFrame):
        self._df = df

    def indices(self, expr: str, *, tier: str = "auto") -> np.ndarray:
        """The positions of the rows where `expr` is true: a ``uint32``
        selection vector."""
        batch, _ = _batch(self._df, expr)
        return _compiled("filter", batch.schema, expr, tier).indices(batch)

    def mask(self, expr: str, *, tier: str = "auto") -> np.ndarray:
        """`expr` as a boolean mask over the rows (null is False)."""
        m = np.zeros(len(self._df), dtype=bool)
        m[self.indices(expr, tier=tier)] = True
        return m

    def query(self, expr: str, *, tier: str = "auto", threads: int | None = None) -> pd.DataFrame:
        """The rows where `expr` is true, index kept: what ``df.query``
        returns.

        NumPy-backed columns of a fixed width (numbers, bools, datetimes) are
        gathered by kiln while it filters, slice by slice, on ``threads``
        threads (default: the cores, one per million rows at most); other
        columns (objects, extension arrays) and the index are taken by
        pandas at the positions kiln found."""
        df = self._df
        batch, _ = _batch(df, expr)
        compiled = _compiled("filter", batch.schema, expr, tier)
        if not df.columns.is_unique:
            return df.iloc[compiled.positions(batch)]
        names = list(df.columns)
        series = [df[n] for n in names]
        fast = [i for i, s in enumerate(series) if _gatherable(s.dtype)]
        views = [np.ascontiguousarray(series[i].to_numpy()).view(f"u{series[i].dtype.itemsize}") for i in fast]
        positions, taken = compiled._inner.take(batch, views, threads)
        arrays = dict(zip(fast, (t.view(series[i].dtype) for i, t in zip(fast, taken))))
        for i, s in enumerate(series):
            if i not in arrays:
                arrays[i] = s.array.take(positions)
        index = df.index
        if isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1:
            # The positions are the labels: one buffer for both.
            index = pd.Index(positions, name=index.name, copy=False)
        else:
            index = index.take(positions)
        out = pd.DataFrame({i: arrays[i] for i in range(len(names))}, index=index, copy=False)
        out.columns = df.columns
        return out.__finalize__(df)

    def eval(self, expr: str, *, tier: str = "auto") -> pd.Series:
        """`expr` over every row, as a Series on the frame's index. Nullable
        inputs give a nullable result (``Float64``, ``Int64``, ``boolean``);
        otherwise a NumPy dtype, with nulls (from SQL's rules) as NaN."""
        batch, nullable = _batch(self._df, expr)
        column = _compiled("project", batch.schema, expr, tier).evaluate(batch).column(0)
        if nullable or column.null_count:
            values = column.to_pandas(types_mapper=_NULLABLE.get).array
        else:
            values = column.to_numpy(zero_copy_only=False)
        return pd.Series(values, index=self._df.index)
