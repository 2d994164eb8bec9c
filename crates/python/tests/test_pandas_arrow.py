"""df.kiln and kiln.arrow against df.query / df.eval and pyarrow.compute, on
frames with NaN, nulls, ints, bools and dates."""

import datetime
import pickle

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import kiln

QUERIES = [
    "(x > 2.0) & (x < 6.0)",
    "x > 2 & k < 7",          # pandas' precedence: (x > 2) & (k < 7)
    "~(x >= 4.0) | (k == 3)",
    "x * 2.0 + k > 9.5",
    "x != x",                 # NaN rows only
    "abs(x - 5.0) < 1.5",
    # Membership, as pandas' isin: -0.0 is 0.0 (row 5); `==`/`!=` a list is `in`/`not in`.
    "x in [0.0, 1.5]",
    "k in [1, 3, 5]",
    "k not in [0, 3, 7]",
    "k == [2, 4]",
    "k != [-5, 11]",
    "(x > 5) & (k in [1, 2, 3.0, 3.5])",
    "[2, 4] == k",
    "[1, 3] not in k",
    "k in [" + ", ".join(str(v) for v in range(-20, 40, 3)) + "]",  # past 16: a search
]


@pytest.fixture
def frame():
    rng = np.random.default_rng(7)
    x = rng.uniform(-1.0, 10.0, 1000)
    x[::17] = np.nan
    x[5] = -0.0
    return pd.DataFrame(
        {"x": x, "k": rng.integers(-5, 12, 1000), "flag": rng.random(1000) > 0.5},
        index=pd.RangeIndex(1000, 3000, 2),
    )


@pytest.mark.parametrize("q", QUERIES)
def test_query_matches_pandas(frame, q, tier):
    got = frame.kiln.query(q, tier=tier)
    want = frame.query(q)
    pd.testing.assert_frame_equal(got, want)
    np.testing.assert_array_equal(frame.kiln.mask(q, tier=tier), frame.eval(q).to_numpy())
    assert frame.kiln.indices(q, tier=tier).dtype == np.uint32


def mixed_frame(n, index=None):
    rng = np.random.default_rng(3)
    x = rng.uniform(0.0, 10.0, n)
    x[::13] = np.nan
    return pd.DataFrame(
        {
            "x": x,
            "f32": rng.standard_normal(n).astype(np.float32),
            "i8": rng.integers(-100, 100, n).astype(np.int8),
            "i16": rng.integers(-1000, 1000, n).astype(np.int16),
            "u32": rng.integers(0, 2**32 - 1, n, dtype=np.uint32),
            "c128": rng.standard_normal(n) + 1j,
            "flag": rng.random(n) > 0.3,
            "when": pd.Timestamp("2024-01-01") + pd.to_timedelta(rng.integers(0, 10**6, n), unit="s"),
            "gap": pd.to_timedelta(rng.integers(0, 100, n), unit="D"),
            "tz": pd.date_range("2024-01-01", periods=n, freq="min", tz="Europe/Paris"),
            "word": np.array(["a", "bb", "ccc", None], dtype=object)[rng.integers(0, 4, n)],
            "cat": pd.Categorical(rng.choice(["lo", "hi"], n)),
            "nullable": pd.array(np.where(rng.random(n) > 0.2, rng.integers(0, 9, n), None), dtype="Int64"),
        },
        index=index,
    )


@pytest.mark.parametrize(
    "index,threads",
    [(None, None), (None, 1), (None, 2), (None, 3), ("named", None), ("labels", 2), ("stepped", 1)],
)
def test_query_gathers_every_column_kind(index, threads):
    n = 140_003  # three 64K-row slices, uneven thread parts
    idx = {
        None: None,
        "named": pd.RangeIndex(n, name="row"),
        "labels": pd.Index([f"r{i}" for i in range(n)], name="label"),
        "stepped": pd.RangeIndex(7, 7 + 3 * n, 3),
    }[index]
    df = mixed_frame(n, idx)
    queries = ["(x > 2.0) & (x < 6.0)", "x != x", "x > 100.0"]
    if index is None and threads is None:
        queries += ["(x == x) | (x != x)", "flag & (f32 < 0)"]
    for q in queries:
        got = df.kiln.query(q, threads=threads)
        pd.testing.assert_frame_equal(got, df.query(q))


def test_query_with_repeated_column_names_takes_pandas_path():
    df = pd.DataFrame(np.arange(12.0).reshape(4, 3), columns=["x", "y", "y"])
    pd.testing.assert_frame_equal(df.kiln.query("x > 2.0"), df[df["x"] > 2.0])


def test_take_rejects_bad_columns_and_threads():
    df = pd.DataFrame({"x": np.arange(10.0)})
    batch = pa.RecordBatch.from_pandas(df, preserve_index=False)
    inner = kiln.arrow.Filter(batch.schema, "x > 2.0")._inner
    with pytest.raises(ValueError, match="threads must be at least 1"):
        inner.take(batch, [], 0)
    with pytest.raises(ValueError, match="9 elements for a batch of 10 rows"):
        inner.take(batch, [np.zeros(9, dtype=np.uint64)], None)
    with pytest.raises(ValueError, match="contiguous"):
        inner.take(batch, [np.zeros(20, dtype=np.uint64)[::2]], None)
    with pytest.raises(TypeError):
        inner.take(batch, [np.zeros(10, dtype=np.float64)], None)
    for threads in (2, 10**9):  # a huge request is one thread per 64K rows
        positions, (taken,) = inner.take(batch, [np.arange(10, dtype=np.uint64) * 3], threads)
        assert positions.tolist() == [3, 4, 5, 6, 7, 8, 9]
        assert taken.tolist() == [9, 12, 15, 18, 21, 24, 27]


def test_bool_columns_and_eval(frame, tier):
    pd.testing.assert_frame_equal(frame.kiln.query("flag & (k > 0)", tier=tier), frame.query("flag & (k > 0)"))
    for e in ["x + k * 2", "x / 3.0 - k", "k * k - 7", "sqrt(abs(x))"]:
        want = frame.eval(e) if "sqrt" not in e else np.sqrt(np.abs(frame["x"]))
        got = frame.kiln.eval(e, tier=tier)
        pd.testing.assert_series_equal(got, want, check_names=False)


def test_nullable_dtypes_follow_sql_and_nan_stays_a_value():
    df = pd.DataFrame({
        "x": pd.array([1.0, None, 3.0, 4.0, 5.0], dtype="Float64"),
        "k": pd.array([1, 2, None, 4, 5], dtype="Int64"),
        "b": pd.array([True, None, False, True, None], dtype="boolean"),
        "n": [np.nan, 1.0, 2.0, np.nan, 3.0],
    })
    # A null comparison keeps no row (SQL), as pandas' boolean masks with NA do.
    assert df.kiln.query("x > 2.0").index.tolist() == [2, 3, 4]
    assert df.kiln.query("(k > 1) | b").index.tolist() == [0, 1, 3, 4]
    # Kleene logic: null | true is true, null & false is false.
    assert df.kiln.query("b | (k > 3)").index.tolist() == [0, 3, 4]
    # NaN in a NumPy column is a value: it compares unequal to itself.
    assert df.kiln.query("n != n").index.tolist() == [0, 3]
    assert df.kiln.query("n > 1.5").index.tolist() == [2, 4]
    s = df.kiln.eval("x * 2.0 + k")
    assert str(s.dtype) == "Float64"
    assert s.isna().tolist() == [False, True, True, False, False]
    assert s.dropna().tolist() == [3.0, 12.0, 15.0]
    want = df.eval("x * 2.0", engine="python")
    pd.testing.assert_series_equal(df.kiln.eval("x * 2.0"), want, check_names=False)


def test_arrow_filter_and_projector_match_pyarrow_compute(tier):
    rng = np.random.default_rng(3)
    n = 777
    x = pa.array(np.where(rng.random(n) < 0.1, None, rng.normal(0, 3, n)).tolist(), type=pa.float64())
    k = pa.array(rng.integers(-3, 9, n), type=pa.int64())
    days = pa.array(rng.integers(18000, 20000, n).astype(np.int32), type=pa.int32()).cast(pa.date32())
    batch = pa.record_batch({"x": x, "k": k, "d": days})
    f = kiln.arrow.Filter(batch.schema, "(x > 0.5) & (d > 19000)", tier=tier)
    want_mask = pc.and_(pc.greater(x, 0.5), pc.greater(days.cast(pa.int32()), 19000))
    want = np.flatnonzero(want_mask.to_numpy(zero_copy_only=False) == True)  # noqa: E712
    got = f.evaluate(batch)
    assert got.type == pa.uint32()
    assert got.to_numpy().tolist() == want.tolist()
    assert f.count(batch) == len(want)
    assert f.apply(batch).num_rows == len(want)
    p = kiln.arrow.Projector(batch.schema, {"y": "x * 2.0 + k", "big": "k > 4"}, tier=tier)
    out = p.evaluate(batch)
    assert out.schema.names == ["y", "big"]
    assert out.column(0).equals(pc.add(pc.multiply(x, 2.0), pc.cast(k, pa.float64())))
    assert out.column(1).equals(pc.greater(k, 4))
    # A table of several batches: indices continue across batches.
    table = pa.Table.from_batches([batch, batch])
    assert f.evaluate(table).to_numpy().tolist() == want.tolist() + (want + n).tolist()
    # Slices at odd offsets read their bitmaps correctly.
    sl = batch.slice(3, 500)
    want_sl = [i - 3 for i in want if 3 <= i < 503]
    assert f.evaluate(sl).to_numpy().tolist() == want_sl


def test_bad_queries_and_batches():
    batch = pa.record_batch({"x": pa.array([1.0, 2.0]), "s": pa.array(["a", "b"])})
    with pytest.raises(kiln.ParseError, match="<query>:1:"):
        kiln.arrow.Filter(batch.schema, "x >")
    with pytest.raises(kiln.CompileError, match="no column `y`"):
        kiln.arrow.Filter(batch.schema, "y > 1")
    with pytest.raises(kiln.CompileError, match="column `s` is Utf8"):
        kiln.arrow.Filter(batch.schema, "s > 1")
    with pytest.raises(kiln.CompileError, match="must be bool"):
        kiln.arrow.Filter(batch.schema, "x + 1")
    f = kiln.arrow.Filter(batch.schema, "x > 1.0")
    other = pa.record_batch({"x": pa.array([1, 2], type=pa.int64())})
    with pytest.raises(ValueError, match="does not match the compiled schema"):
        f.evaluate(other)
    with pytest.raises(TypeError, match="pyarrow.RecordBatch"):
        f.evaluate([1, 2])
    with pytest.raises(TypeError, match="pyarrow.Schema"):
        kiln.arrow.Filter("not a schema", "x > 1")
    div = kiln.arrow.Projector(pa.schema([("a", pa.int64()), ("b", pa.int64())]), {"q": "a // b"})
    with pytest.raises(ZeroDivisionError):
        div.evaluate(pa.record_batch({"a": pa.array([1, 2]), "b": pa.array([1, 0])}))
    df = pd.DataFrame({"x": [1.0, 2.0]})
    with pytest.raises(kiln.CompileError, match="no column"):
        df.kiln.query("x > zz")


def test_filters_pickle():
    schema = pa.schema([("x", pa.float64())])
    f = pickle.loads(pickle.dumps(kiln.arrow.Filter(schema, "x > 1.0", tier="llvm")))
    assert f.tier == "llvm"
    assert f.evaluate(pa.record_batch({"x": pa.array([0.0, 2.0])})).to_pylist() == [1]
    p = pickle.loads(pickle.dumps(kiln.arrow.Projector(schema, [("y", "x + 1.0")])))
    assert p.evaluate(pa.record_batch({"x": pa.array([0.0, 2.0])})).column(0).to_pylist() == [1.0, 3.0]


def test_timestamps_and_dates_from_pandas():
    df = pd.DataFrame({
        "t": pd.to_datetime(["2020-01-01", "2021-06-01", "2022-01-01"]),
        "d": [datetime.date(2020, 1, 1), datetime.date(2021, 6, 1), datetime.date(2022, 1, 1)],
    })
    cutoff_days = (datetime.date(2021, 1, 1) - datetime.date(1970, 1, 1)).days
    assert df.kiln.query(f"d > {cutoff_days}").index.tolist() == [1, 2]
    cutoff = pd.Timestamp("2021-01-01").as_unit(df["t"].dt.unit)._value
    assert df.kiln.query(f"t > {cutoff}").index.tolist() == [1, 2]
