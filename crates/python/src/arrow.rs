//! `kiln.arrow`: Gandiva-style filters and projections (kiln-arrow) over
//! pyarrow record batches, which cross through the Arrow C Data Interface's
//! PyCapsules (`__arrow_c_schema__`, `__arrow_c_array__`): no copies in, and
//! results handed to pyarrow the same way.

use crate::function::tier_named;
use arrow_array::ffi::{from_ffi, to_ffi};
use arrow_array::{Array, RecordBatch, StructArray};
use arrow_data::ffi::FFI_ArrowArray;
use arrow_schema::ffi::FFI_ArrowSchema;
use arrow_schema::{Schema, SchemaRef};
use kiln_arrow::{Error, Filter as InnerFilter, Projector as InnerProjector};
use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods, PyTuple};
use std::sync::Arc;

const SCHEMA: &std::ffi::CStr = c"arrow_schema";
const ARRAY: &std::ffi::CStr = c"arrow_array";

/// kiln-arrow's errors: bad queries are `kiln.ParseError`s or
/// `ValueError`s, run-time division by zero a `kiln.DivisionByZeroError`.
fn error(e: Error) -> PyErr {
    match e {
        Error::Parse(p) => crate::errors::parse_error(&p.message, "<query>", "", p.loc),
        Error::DivisionByZero { .. } => crate::errors::division_by_zero(e.to_string()),
        Error::SchemaMismatch(_) => PyValueError::new_err(e.to_string()),
        e => crate::errors::compile_error(e.to_string()),
    }
}

/// A pyarrow schema (anything with `__arrow_c_schema__`).
fn import_schema(obj: &Bound<'_, PyAny>) -> PyResult<SchemaRef> {
    let capsule = obj
        .call_method0("__arrow_c_schema__")
        .map_err(|_| {
            PyTypeError::new_err("schema must be a pyarrow.Schema (or have __arrow_c_schema__)")
        })?
        .cast_into::<PyCapsule>()?;
    let ptr = capsule.pointer_checked(Some(SCHEMA))?;
    // SAFETY: an `arrow_schema` capsule holds a valid ArrowSchema for the
    // capsule's lifetime (the PyCapsule protocol); it is only read.
    let ffi = unsafe { ptr.cast::<FFI_ArrowSchema>().as_ref() };
    let schema = Schema::try_from(ffi).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(Arc::new(schema))
}

/// A pyarrow record batch (anything whose `__arrow_c_array__` is a struct
/// array without nulls), moved out of its capsule without a copy.
pub fn import_batch(obj: &Bound<'_, PyAny>) -> PyResult<RecordBatch> {
    let pair = obj.call_method0("__arrow_c_array__").map_err(|_| {
        PyTypeError::new_err("batch must be a pyarrow.RecordBatch (or have __arrow_c_array__)")
    })?;
    let pair = pair.cast::<PyTuple>()?;
    let schema = pair.get_item(0)?.cast_into::<PyCapsule>()?;
    let array = pair.get_item(1)?.cast_into::<PyCapsule>()?;
    let schema_ptr = schema.pointer_checked(Some(SCHEMA))?;
    let array_ptr = array.pointer_checked(Some(ARRAY))?;
    // SAFETY: the capsules hold a valid ArrowSchema and ArrowArray; the array
    // is moved out (its release callback now ours, the capsule's marked
    // released, as the protocol says a consumer does), the schema only read.
    let data = unsafe {
        let moved = FFI_ArrowArray::from_raw(array_ptr.cast::<FFI_ArrowArray>().as_ptr());
        from_ffi(moved, schema_ptr.cast::<FFI_ArrowSchema>().as_ref())
    }
    .map_err(|e| PyValueError::new_err(e.to_string()))?;
    if !matches!(data.data_type(), arrow_schema::DataType::Struct(_)) {
        return Err(PyTypeError::new_err(format!(
            "batch must be a record batch (a struct array), got {}",
            data.data_type()
        )));
    }
    let columns = StructArray::from(data);
    if columns.null_count() != 0 {
        return Err(PyValueError::new_err(
            "batch is a struct array with null rows",
        ));
    }
    Ok(RecordBatch::from(columns))
}

/// A record batch as the pair of capsules `__arrow_c_array__` returns.
fn export_batch<'py>(py: Python<'py>, batch: RecordBatch) -> PyResult<Bound<'py, PyTuple>> {
    let data = StructArray::from(batch).into_data();
    let (array, schema) = to_ffi(&data).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let schema = PyCapsule::new_with_value(py, schema, SCHEMA)?;
    let array = PyCapsule::new_with_value(py, array, ARRAY)?;
    PyTuple::new(py, [schema, array])
}

/// A compiled filter over batches of one schema (`kiln.arrow.Filter`).
#[pyclass(module = "kiln.arrow", name = "_Filter", frozen)]
pub struct ArrowFilter {
    inner: InnerFilter,
}

#[pymethods]
impl ArrowFilter {
    #[new]
    #[pyo3(signature = (schema, query, tier="auto"))]
    fn new(py: Python<'_>, schema: &Bound<'_, PyAny>, query: &str, tier: &str) -> PyResult<Self> {
        let schema = import_schema(schema)?;
        let tier = tier_named(tier)?;
        let query = kiln_arrow::query::parse(query).map_err(|e| match e {
            Error::Parse(p) => {
                crate::errors::parse_error(&p.render("<query>", query), "<query>", query, p.loc)
            }
            e => error(e),
        })?;
        let inner = py
            .detach(|| InnerFilter::make_with(schema, &query, tier))
            .map_err(error)?;
        Ok(ArrowFilter { inner })
    }

    /// The ascending indices of the rows where the condition is true, as a
    /// NumPy `uint32` array (the Python layer wraps it for pyarrow): the
    /// kernel's own buffer, handed over without a copy.
    fn indices<'py>(
        &self,
        py: Python<'py>,
        batch: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray1<u32>>> {
        let batch = import_batch(batch)?;
        let mut rows = Vec::new();
        py.detach(|| self.inner.evaluate_into(&batch, &mut rows))
            .map_err(error)?;
        Ok(PyArray1::from_vec(py, rows))
    }

    /// The same indices as NumPy `int64` positions, what pandas' `iloc`
    /// takes without converting them again.
    fn positions<'py>(
        &self,
        py: Python<'py>,
        batch: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let batch = import_batch(batch)?;
        let mut rows = Vec::new();
        let wide = py
            .detach(|| {
                self.inner
                    .evaluate_into(&batch, &mut rows)
                    .map(|_| rows.iter().map(|&r| i64::from(r)).collect::<Vec<i64>>())
            })
            .map_err(error)?;
        Ok(PyArray1::from_vec(py, wide))
    }

    /// How many rows the condition keeps.
    fn count(&self, py: Python<'_>, batch: &Bound<'_, PyAny>) -> PyResult<usize> {
        let batch = import_batch(batch)?;
        py.detach(|| self.inner.count(&batch)).map_err(error)
    }

    /// The positions of the rows where the condition is true (NumPy
    /// `int64`) and those rows of each of `columns`: 1-D NumPy arrays of
    /// `u8`/`u16`/`u32`/`u64` (the caller views any fixed-width dtype as the
    /// unsigned type of its width), one element per row of `batch`. The
    /// filter runs over slices of the batch and each slice's rows are
    /// gathered while it is in cache; on `threads` threads (default: the
    /// machine's cores, one per 1M rows at most), each filling its own part
    /// of the results after a counting pass. The Python layer builds
    /// `df.kiln.query`'s frame from these.
    #[pyo3(signature = (batch, columns, threads=None))]
    fn take<'py>(
        &self,
        py: Python<'py>,
        batch: &Bound<'py, PyAny>,
        columns: Vec<Column<'py>>,
        threads: Option<usize>,
    ) -> PyResult<Taking<'py>> {
        let batch = import_batch(batch)?;
        let rows = batch.num_rows();
        let sources = columns
            .iter()
            .map(|c| c.source())
            .collect::<PyResult<Vec<Source<'_>>>>()?;
        if let Some(bad) = sources.iter().position(|s| s.len() != rows) {
            return Err(PyValueError::new_err(format!(
                "column {bad} has {} elements for a batch of {rows} rows",
                sources[bad].len()
            )));
        }
        let threads = match threads {
            Some(0) => return Err(PyValueError::new_err("threads must be at least 1")),
            Some(t) => t,
            // kiln's thread count (kiln.set_num_threads), at most one per
            // million rows.
            None => kiln::threads::num_threads()
                .min(rows.div_ceil(1 << 20))
                .max(1),
        };
        let (positions, outs) = py
            .detach(|| take(&self.inner, &batch, &sources, threads))
            .map_err(error)?;
        let outs = outs.into_iter().map(|o| o.into_numpy(py)).collect();
        Ok((PyArray1::from_vec(py, positions), outs))
    }
}

/// `take`'s result: the positions and the taken columns.
type Taking<'py> = (Bound<'py, PyArray1<i64>>, Vec<Bound<'py, PyAny>>);

/// A column to gather, as the unsigned integers of its width (any
/// fixed-width NumPy dtype viewed as one): contiguous, read-only borrowed.
#[derive(FromPyObject)]
pub enum Column<'py> {
    W8(PyReadonlyArray1<'py, u64>),
    W4(PyReadonlyArray1<'py, u32>),
    W2(PyReadonlyArray1<'py, u16>),
    W1(PyReadonlyArray1<'py, u8>),
}

impl Column<'_> {
    fn source(&self) -> PyResult<Source<'_>> {
        let contiguous =
            || PyValueError::new_err("a column to take from must be a contiguous 1-D array");
        Ok(match self {
            Column::W8(a) => Source::W8(a.as_slice().map_err(|_| contiguous())?),
            Column::W4(a) => Source::W4(a.as_slice().map_err(|_| contiguous())?),
            Column::W2(a) => Source::W2(a.as_slice().map_err(|_| contiguous())?),
            Column::W1(a) => Source::W1(a.as_slice().map_err(|_| contiguous())?),
        })
    }
}

/// A column's elements, by width.
enum Source<'a> {
    W8(&'a [u64]),
    W4(&'a [u32]),
    W2(&'a [u16]),
    W1(&'a [u8]),
}

/// `n` zeroed elements: pages the kernel maps only where they are written
/// (`calloc`), so room for every row costs nothing where it stays unwritten.
/// On Linux a large buffer asks for transparent huge pages: writing tens of
/// MB of new 4 KiB pages costs a fault each, about as much as the filter
/// itself.
fn room_for<T: Copy + Default>(n: usize) -> Vec<T> {
    let v = vec![T::default(); n];
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let bytes = size_of_val(v.as_slice());
        let start = (v.as_ptr() as usize).next_multiple_of(HUGE);
        let end = (v.as_ptr() as usize + bytes) / HUGE * HUGE;
        if end > start {
            // SAFETY: `start..end` lies within `v`'s allocation; the advice
            // changes how its pages are backed, not their contents.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }
    v
}

/// A taken column, by width.
enum Taken {
    W8(Vec<u64>),
    W4(Vec<u32>),
    W2(Vec<u16>),
    W1(Vec<u8>),
}

impl Source<'_> {
    fn len(&self) -> usize {
        match self {
            Source::W8(s) => s.len(),
            Source::W4(s) => s.len(),
            Source::W2(s) => s.len(),
            Source::W1(s) => s.len(),
        }
    }

    /// Room for `n` taken elements (see [`room_for`]).
    fn room(&self, n: usize) -> Taken {
        match self {
            Source::W8(_) => Taken::W8(room_for(n)),
            Source::W4(_) => Taken::W4(room_for(n)),
            Source::W2(_) => Taken::W2(room_for(n)),
            Source::W1(_) => Taken::W1(room_for(n)),
        }
    }
}

impl Taken {
    /// Keeps the first `n` elements and gives the rest of the room back.
    fn truncate(&mut self, n: usize) {
        fn keep<T>(v: &mut Vec<T>, n: usize) {
            v.truncate(n);
            v.shrink_to_fit();
        }
        match self {
            Taken::W8(v) => keep(v, n),
            Taken::W4(v) => keep(v, n),
            Taken::W2(v) => keep(v, n),
            Taken::W1(v) => keep(v, n),
        }
    }

    fn into_numpy(self, py: Python<'_>) -> Bound<'_, PyAny> {
        match self {
            Taken::W8(v) => PyArray1::from_vec(py, v).into_any(),
            Taken::W4(v) => PyArray1::from_vec(py, v).into_any(),
            Taken::W2(v) => PyArray1::from_vec(py, v).into_any(),
            Taken::W1(v) => PyArray1::from_vec(py, v).into_any(),
        }
    }
}

/// One thread's part of a take: its rows' positions and each column's
/// kept elements, written from the front.
struct Part<'a> {
    positions: &'a mut [i64],
    columns: Vec<PartColumn<'a>>,
}

enum PartColumn<'a> {
    W8(&'a mut [u64]),
    W4(&'a mut [u32]),
    W2(&'a mut [u16]),
    W1(&'a mut [u8]),
}

/// `dst[k] = src[base + sel[k]]`.
fn gather<T: Copy>(src: &[T], base: usize, sel: &[u32], dst: &mut [T]) {
    let src = &src[base..];
    for (d, &r) in dst.iter_mut().zip(sel) {
        *d = src[r as usize];
    }
}

impl Part<'_> {
    /// Fills the part from `rows` of the batch; returns how many it kept,
    /// or an error if they do not fit (a count that disagreed).
    fn fill(
        &mut self,
        filter: &InnerFilter,
        batch: &RecordBatch,
        sources: &[Source<'_>],
        rows: std::ops::Range<usize>,
    ) -> Result<usize, Error> {
        // 64K rows: a slice of a few `f64` columns stays in L2.
        const CHUNK: usize = 1 << 16;
        let mut at = 0;
        let mut overflow = false;
        let kept = filter.evaluate_chunks(batch, rows, CHUNK, |base, sel| {
            let end = at + sel.len();
            if overflow || end > self.positions.len() {
                overflow = true;
                return;
            }
            for (p, &r) in self.positions[at..end].iter_mut().zip(sel) {
                *p = (base + r as usize) as i64;
            }
            for (src, dst) in sources.iter().zip(&mut self.columns) {
                match (src, dst) {
                    (Source::W8(s), PartColumn::W8(d)) => gather(s, base, sel, &mut d[at..end]),
                    (Source::W4(s), PartColumn::W4(d)) => gather(s, base, sel, &mut d[at..end]),
                    (Source::W2(s), PartColumn::W2(d)) => gather(s, base, sel, &mut d[at..end]),
                    (Source::W1(s), PartColumn::W1(d)) => gather(s, base, sel, &mut d[at..end]),
                    _ => unreachable!("room() gives each column its source's width"),
                }
            }
            at = end;
        })?;
        if overflow {
            return Err(Error::Exec(format!(
                "the filter kept more rows than the {} it counted",
                self.positions.len()
            )));
        }
        Ok(kept)
    }
}

/// The first `n` elements of each of `taken`, which keeps the rest.
fn split_parts<'a>(taken: &mut [PartColumn<'a>], n: usize) -> Vec<PartColumn<'a>> {
    taken
        .iter_mut()
        .map(|c| {
            let whole = std::mem::replace(c, PartColumn::W1(&mut []));
            let (head, tail) = match whole {
                PartColumn::W8(s) => {
                    let (h, t) = s.split_at_mut(n);
                    (PartColumn::W8(h), PartColumn::W8(t))
                }
                PartColumn::W4(s) => {
                    let (h, t) = s.split_at_mut(n);
                    (PartColumn::W4(h), PartColumn::W4(t))
                }
                PartColumn::W2(s) => {
                    let (h, t) = s.split_at_mut(n);
                    (PartColumn::W2(h), PartColumn::W2(t))
                }
                PartColumn::W1(s) => {
                    let (h, t) = s.split_at_mut(n);
                    (PartColumn::W1(h), PartColumn::W1(t))
                }
            };
            *c = tail;
            head
        })
        .collect()
}

/// `df.kiln.query`'s gather: the kept positions and each source's kept
/// elements. One thread fills room for every row (unwritten pages cost
/// nothing) and shrinks it; several count their rows first and fill
/// disjoint parts of exact results.
fn take(
    filter: &InnerFilter,
    batch: &RecordBatch,
    sources: &[Source<'_>],
    threads: usize,
) -> Result<(Vec<i64>, Vec<Taken>), Error> {
    let rows = batch.num_rows();
    // At least one 64K-row slice per thread: a huge request is that many.
    let threads = threads.clamp(1, rows.div_ceil(1 << 16).max(1));
    let ranges: Vec<std::ops::Range<usize>> = (0..threads)
        .map(|t| rows * t / threads..rows * (t + 1) / threads)
        .collect();
    let counts: Vec<usize> = if threads == 1 {
        vec![rows]
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = ranges
                .iter()
                // Each slice's kernel on its own thread: these threads are
                // the call's parallelism.
                .map(|r| {
                    s.spawn(|| {
                        kiln::threads::with_num_threads(1, || {
                            filter.count(&batch.slice(r.start, r.len()))
                        })
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a count does not panic"))
                .collect::<Result<Vec<usize>, Error>>()
        })?
    };
    let room: usize = counts.iter().sum();
    let mut positions: Vec<i64> = room_for(room);
    let mut taken: Vec<Taken> = sources.iter().map(|s| s.room(room)).collect();
    let kept = {
        let mut columns: Vec<PartColumn<'_>> = taken
            .iter_mut()
            .map(|t| match t {
                Taken::W8(v) => PartColumn::W8(v),
                Taken::W4(v) => PartColumn::W4(v),
                Taken::W2(v) => PartColumn::W2(v),
                Taken::W1(v) => PartColumn::W1(v),
            })
            .collect();
        let mut rest = positions.as_mut_slice();
        let mut parts = Vec::with_capacity(threads);
        for &n in &counts {
            let (head, tail) = rest.split_at_mut(n);
            rest = tail;
            parts.push(Part {
                positions: head,
                columns: split_parts(&mut columns, n),
            });
        }
        if threads == 1 {
            parts[0].fill(filter, batch, sources, 0..rows)?
        } else {
            std::thread::scope(|s| {
                let handles: Vec<_> = parts
                    .iter_mut()
                    .zip(&ranges)
                    .map(|(part, r)| {
                        s.spawn(move || {
                            kiln::threads::with_num_threads(1, || {
                                part.fill(filter, batch, sources, r.clone())
                            })
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("a fill does not panic"))
                    .sum::<Result<usize, Error>>()
            })?
        }
    };
    if threads > 1 && kept != room {
        return Err(Error::Exec(format!(
            "the filter kept {kept} rows after counting {room}"
        )));
    }
    positions.truncate(kept);
    positions.shrink_to_fit();
    for t in &mut taken {
        t.truncate(kept);
    }
    Ok((positions, taken))
}

/// Compiled projections over batches of one schema (`kiln.arrow.Projector`).
#[pyclass(module = "kiln.arrow", name = "_Projector", frozen)]
pub struct ArrowProjector {
    inner: InnerProjector,
}

#[pymethods]
impl ArrowProjector {
    #[new]
    #[pyo3(signature = (schema, exprs, tier="auto"))]
    fn new(
        py: Python<'_>,
        schema: &Bound<'_, PyAny>,
        exprs: Vec<(String, String)>,
        tier: &str,
    ) -> PyResult<Self> {
        let schema = import_schema(schema)?;
        let tier = tier_named(tier)?;
        let mut parsed = Vec::with_capacity(exprs.len());
        for (name, text) in &exprs {
            let e = kiln_arrow::query::parse(text).map_err(|e| match e {
                Error::Parse(p) => {
                    crate::errors::parse_error(&p.render("<query>", text), "<query>", text, p.loc)
                }
                e => error(e),
            })?;
            parsed.push((name.as_str(), e));
        }
        let inner = py
            .detach(|| InnerProjector::make_with(schema, &parsed, tier))
            .map_err(error)?;
        Ok(ArrowProjector { inner })
    }

    /// The projected columns, as `__arrow_c_array__` capsules of a record
    /// batch (the Python layer imports them into pyarrow).
    fn evaluate<'py>(
        &self,
        py: Python<'py>,
        batch: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let batch = import_batch(batch)?;
        let out = py.detach(|| self.inner.evaluate(&batch)).map_err(error)?;
        export_batch(py, out)
    }
}
