//! `kiln.arrow`: Gandiva-style filters and projections (kiln-arrow) over
//! pyarrow record batches, which cross through the Arrow C Data Interface's
//! PyCapsules (`__arrow_c_schema__`, `__arrow_c_array__`): no copies in, and
//! results handed to pyarrow the same way.

use crate::function::Tier;
use arrow_array::ffi::{from_ffi, to_ffi};
use arrow_array::{Array, RecordBatch, StructArray};
use arrow_data::ffi::FFI_ArrowArray;
use arrow_schema::ffi::FFI_ArrowSchema;
use arrow_schema::{Schema, SchemaRef};
use kiln_arrow::{Error, Filter as InnerFilter, Projector as InnerProjector};
use numpy::PyArray1;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods, PyTuple};
use std::sync::Arc;

const SCHEMA: &std::ffi::CStr = c"arrow_schema";
const ARRAY: &std::ffi::CStr = c"arrow_array";

fn tier(name: &str) -> PyResult<kiln_arrow::Tier> {
    Ok(match Tier::from_name(name)? {
        Tier::Interp => kiln_arrow::Tier::Interpreter,
        Tier::Jit(kiln::JitTier::Cranelift) => kiln_arrow::Tier::Cranelift,
        Tier::Jit(kiln::JitTier::Llvm) => kiln_arrow::Tier::Llvm,
    })
}

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
    #[pyo3(signature = (schema, query, tier="cranelift"))]
    fn new(py: Python<'_>, schema: &Bound<'_, PyAny>, query: &str, tier: &str) -> PyResult<Self> {
        let schema = import_schema(schema)?;
        let tier = self::tier(tier)?;
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
}

/// Compiled projections over batches of one schema (`kiln.arrow.Projector`).
#[pyclass(module = "kiln.arrow", name = "_Projector", frozen)]
pub struct ArrowProjector {
    inner: InnerProjector,
}

#[pymethods]
impl ArrowProjector {
    #[new]
    #[pyo3(signature = (schema, exprs, tier="cranelift"))]
    fn new(
        py: Python<'_>,
        schema: &Bound<'_, PyAny>,
        exprs: Vec<(String, String)>,
        tier: &str,
    ) -> PyResult<Self> {
        let schema = import_schema(schema)?;
        let tier = self::tier(tier)?;
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
