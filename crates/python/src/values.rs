//! Python values to kiln's inputs and kiln's outputs to Python values.
//!
//! The rule (docs/python.md): a NumPy array of the input's dtype that is
//! C-contiguous and aligned is read in place; any other array, list or tuple
//! is converted with `numpy.ascontiguousarray(x, dtype)` if NumPy's
//! `same_kind` casting rule allows it (`int64` → `float64`, `float64` →
//! `float32`), else it is a `TypeError` (`float64` → `int64`, strings,
//! objects). Scalars follow the same rule: a `float` input takes a `float`,
//! `int`, `bool` or NumPy number; an `int` input an `int`, `bool` or NumPy
//! integer; a `bool` input a `bool` or `numpy.bool_`. A DLPack capsule is
//! read as it is, never converted (`dlpack.rs`).

use kiln::{ArrayMut, ArrayRef, Buffer, DType, Dim, Scalar};
use numpy::{
    dtype, Element, PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn,
    PyReadwriteArrayDyn, PyUntypedArray, PyUntypedArrayMethods,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyCapsule, PyFloat, PyInt};
use std::collections::HashMap;
use std::mem::MaybeUninit;

/// `$body` with `$t` the Rust element type of kiln dtype `$dtype`.
macro_rules! with_elem {
    ($dtype:expr, $t:ident => $body:expr) => {
        match $dtype {
            DType::Bool => {
                type $t = bool;
                $body
            }
            DType::I32 => {
                type $t = i32;
                $body
            }
            DType::I64 => {
                type $t = i64;
                $body
            }
            DType::F32 => {
                type $t = f32;
                $body
            }
            DType::F64 => {
                type $t = f64;
                $body
            }
        }
    };
}

/// The `numpy` module, imported once.
pub fn numpy(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static NUMPY: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    NUMPY
        .get_or_try_init(py, || Ok(py.import("numpy")?.unbind()))
        .map(|m| m.bind(py))
}

/// The NumPy dtype of a kiln dtype.
fn np_dtype(py: Python<'_>, d: DType) -> Bound<'_, numpy::PyArrayDescr> {
    with_elem!(d, T => dtype::<T>(py))
}

/// A Python scalar as input `name` of `dtype`.
pub fn scalar(obj: &Bound<'_, PyAny>, dtype: DType, name: &str) -> PyResult<Scalar> {
    // The common cases first: exact Python floats, ints and bools.
    if let Ok(f) = obj.cast_exact::<PyFloat>() {
        return match dtype {
            DType::F64 => Ok(Scalar::F64(f.value())),
            DType::F32 => Ok(Scalar::F32(f.value() as f32)),
            _ => Err(wrong_scalar(obj, dtype, name)),
        };
    }
    if obj.is_exact_instance_of::<PyBool>() {
        let b = obj.is_truthy()?;
        return Ok(match dtype {
            DType::Bool => Scalar::Bool(b),
            DType::I32 => Scalar::I32(b.into()),
            DType::I64 => Scalar::I64(b.into()),
            DType::F32 => Scalar::F32(u8::from(b).into()),
            DType::F64 => Scalar::F64(u8::from(b).into()),
        });
    }
    if obj.is_exact_instance_of::<PyInt>() {
        return Ok(match dtype {
            DType::I64 => Scalar::I64(obj.extract()?),
            DType::I32 => Scalar::I32(obj.extract()?),
            DType::F64 => Scalar::F64(obj.extract()?),
            DType::F32 => Scalar::F32(obj.extract::<f64>()? as f32),
            DType::Bool => return Err(wrong_scalar(obj, dtype, name)),
        });
    }
    if let Ok(capsule) = obj.cast::<PyCapsule>() {
        let held = crate::dlpack::tensor(capsule, dtype, None, name, &mut HashMap::new())?;
        return held
            .scalar()
            .ok_or_else(|| PyTypeError::new_err(format!("input `{name}` is an empty tensor")));
    }
    // Anything else goes through NumPy: numpy scalars, 0-d arrays, subclasses.
    let np = numpy(obj.py())?;
    let array = np.call_method1("asarray", (obj,))?;
    let array = array.cast_into::<PyUntypedArray>()?;
    if array.ndim() != 0 {
        return Err(PyTypeError::new_err(format!(
            "input `{name}` is a {dtype} scalar, got an array of shape {:?}",
            array.shape()
        )));
    }
    let target = np_dtype(obj.py(), dtype);
    if !can_cast(np, &array, &target)? {
        return Err(wrong_scalar(obj, dtype, name));
    }
    let value = array
        .call_method1("astype", (target,))?
        .call_method0("item")?;
    Ok(match dtype {
        DType::Bool => Scalar::Bool(value.extract()?),
        DType::I32 => Scalar::I32(value.extract()?),
        DType::I64 => Scalar::I64(value.extract()?),
        DType::F32 => Scalar::F32(value.extract::<f64>()? as f32),
        DType::F64 => Scalar::F64(value.extract()?),
    })
}

fn wrong_scalar(obj: &Bound<'_, PyAny>, dtype: DType, name: &str) -> PyErr {
    let got = obj
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into());
    PyTypeError::new_err(format!(
        "input `{name}` is a {dtype} scalar, got {got} (NumPy's 'same_kind' casting rule applies)"
    ))
}

fn can_cast(
    np: &Bound<'_, PyModule>,
    array: &Bound<'_, PyUntypedArray>,
    target: &Bound<'_, numpy::PyArrayDescr>,
) -> PyResult<bool> {
    np.call_method1("can_cast", (array.dtype(), target, "same_kind"))?
        .extract()
}

/// An input array, borrowed for the length of a call.
pub enum Held<'py> {
    /// `bool` elements.
    Bool(PyReadonlyArrayDyn<'py, bool>),
    /// `i32` elements.
    I32(PyReadonlyArrayDyn<'py, i32>),
    /// `i64` elements.
    I64(PyReadonlyArrayDyn<'py, i64>),
    /// `f32` elements.
    F32(PyReadonlyArrayDyn<'py, f32>),
    /// `f64` elements.
    F64(PyReadonlyArrayDyn<'py, f64>),
    /// A DLPack capsule's elements.
    DlPack(crate::dlpack::Held<'py>),
}

impl Held<'_> {
    /// The elements, as kiln borrows them. [`array`] made the array
    /// C-contiguous and aligned; should NumPy disagree, the call is a
    /// `ValueError`, never a read through a bad slice.
    pub fn as_ref(&self) -> PyResult<ArrayRef<'_>> {
        let e = |e: numpy::AsSliceError| {
            PyValueError::new_err(format!("an input array cannot be read in place: {e}"))
        };
        Ok(match self {
            Held::Bool(a) => ArrayRef::Bool(a.as_slice().map_err(e)?),
            Held::I32(a) => ArrayRef::I32(a.as_slice().map_err(e)?),
            Held::I64(a) => ArrayRef::I64(a.as_slice().map_err(e)?),
            Held::F32(a) => ArrayRef::F32(a.as_slice().map_err(e)?),
            Held::F64(a) => ArrayRef::F64(a.as_slice().map_err(e)?),
            Held::DlPack(t) => t.as_ref(),
        })
    }

    /// The bytes of a DLPack capsule's elements (None for a NumPy array,
    /// whose overlap with an `out=` array NumPy's borrows catch).
    pub fn capsule_bytes(&self) -> Option<std::ops::Range<usize>> {
        match self {
            Held::DlPack(t) => Some(t.bytes()),
            _ => None,
        }
    }
}

/// Whether `array` can be read in place as elements of `T`.
fn in_place<T: Element>(array: &Bound<'_, PyUntypedArray>) -> bool {
    if !array.dtype().is_equiv_to(&dtype::<T>(array.py())) || !array.is_c_contiguous() {
        return false;
    }
    let Ok(typed) = array.cast::<PyArrayDyn<T>>() else {
        return false;
    };
    typed.data().is_aligned()
}

fn borrow<'py, T: Element>(
    array: Bound<'py, PyUntypedArray>,
    name: &str,
) -> PyResult<PyReadonlyArrayDyn<'py, T>> {
    let typed = array.cast_into::<PyArrayDyn<T>>()?;
    typed.try_readonly().map_err(|e| {
        PyValueError::new_err(format!(
            "input `{name}` cannot be read: {e} (is it also an output of this call?)"
        ))
    })
}

/// Input `name` of `dtype` and `dims` from any array-like `obj`, by the rule
/// at the top of this module, with its symbolic dimensions bound in `dims_seen`.
pub fn array<'py>(
    obj: &Bound<'py, PyAny>,
    dtype: DType,
    dims: &[Dim],
    name: &str,
    dims_seen: &mut HashMap<String, u64>,
) -> PyResult<Held<'py>> {
    if let Ok(capsule) = obj.cast::<PyCapsule>() {
        let held = crate::dlpack::tensor(capsule, dtype, Some(dims), name, dims_seen)?;
        return Ok(Held::DlPack(held));
    }
    let py = obj.py();
    let np = numpy(py)?;
    let mut array = match obj.cast::<PyUntypedArray>() {
        Ok(a) => a.clone(),
        Err(_) => np
            .call_method1("asarray", (obj,))
            .map_err(|e| PyValueError::new_err(format!("input `{name}` is not an array: {e}")))?
            .cast_into::<PyUntypedArray>()?,
    };
    let target = np_dtype(py, dtype);
    let fits = with_elem!(dtype, T => in_place::<T>(&array));
    if !fits {
        if !can_cast(np, &array, &target)? {
            return Err(PyTypeError::new_err(format!(
                "input `{name}` is {dtype}, got an array of {} (NumPy's 'same_kind' casting rule applies)",
                array.dtype()
            )));
        }
        // `require` with C order and alignment: `ascontiguousarray` keeps an
        // array that is contiguous but misaligned (from a byte buffer) as is.
        array = np
            .call_method1("require", (&array, &target, ("C", "A")))?
            .cast_into::<PyUntypedArray>()?;
    }
    check_shape(name, array.shape(), dims, dims_seen)?;
    Ok(match dtype {
        DType::Bool => Held::Bool(borrow(array, name)?),
        DType::I32 => Held::I32(borrow(array, name)?),
        DType::I64 => Held::I64(borrow(array, name)?),
        DType::F32 => Held::F32(borrow(array, name)?),
        DType::F64 => Held::F64(borrow(array, name)?),
    })
}

/// Checks an array's shape against an input's dimensions, binding symbols.
pub fn check_shape(
    name: &str,
    shape: &[usize],
    dims: &[Dim],
    dims_seen: &mut HashMap<String, u64>,
) -> PyResult<()> {
    let wrong = || {
        let want: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
        PyValueError::new_err(format!(
            "input `{name}` has shape [{}], got {:?}",
            want.join(", "),
            shape
        ))
    };
    if shape.len() != dims.len() {
        return Err(wrong());
    }
    for (&got, dim) in shape.iter().zip(dims) {
        let got = got as u64;
        match dim {
            Dim::Fixed(n) if *n != got => return Err(wrong()),
            Dim::Fixed(_) => {}
            Dim::Sym(s) => match dims_seen.get(&**s) {
                Some(&n) if n != got => {
                    return Err(PyValueError::new_err(format!(
                    "input `{name}` has {got} for dimension `{s}`, which an earlier input made {n}"
                )))
                }
                Some(_) => {}
                None => {
                    dims_seen.insert(s.to_string(), got);
                }
            },
        }
    }
    Ok(())
}

/// Room for an output: a new array's elements, the caller's `out=` array,
/// a scalar cell, or a selection's row indices.
pub enum Room<'py> {
    /// The caller's `out=` array.
    Array(Bound<'py, PyUntypedArray>, Writable<'py>),
    /// A new array's elements and its shape, in kiln's allocator, handed
    /// to NumPy once written. NumPy's own `empty` takes large arrays from
    /// glibc's heap, whose top glibc gives back to the system when enough
    /// of it is free: a training step's outputs, freed before the next
    /// step allocates them again, were fresh pages faulted in on every
    /// call (docs/performance.md, "Training steps at eager's speed"). Floats are not
    /// zeroed first: every element of an output is written (docs/abi.md).
    Owned(Owned, Vec<usize>),
    /// A scalar output's one element.
    Scalar(Buffer),
    /// Row indices: the array, of which the first `count` are kept.
    Selection(Bound<'py, PyUntypedArray>, PyReadwriteArrayDyn<'py, u32>),
}

/// A new output array's elements.
pub enum Owned {
    /// `bool` elements.
    Bool(Vec<bool>),
    /// `i32` elements.
    I32(Vec<i32>),
    /// `i64` elements.
    I64(Vec<i64>),
    /// `f32` elements, written by the call.
    F32(Vec<MaybeUninit<f32>>),
    /// `f64` elements, written by the call.
    F64(Vec<MaybeUninit<f64>>),
}

/// The bytes of this machine's memory (0 where the system does not say),
/// asked once: glibc answers `_SC_PHYS_PAGES` with a `sysinfo` system call,
/// which cost a torch backend's call about a microsecond an output.
fn physical_memory() -> u64 {
    static MEMORY: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *MEMORY.get_or_init(|| {
        // SAFETY: `sysconf` only reads system configuration.
        let (pages, page) = unsafe {
            (
                libc::sysconf(libc::_SC_PHYS_PAGES),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        u64::try_from(pages)
            .unwrap_or(0)
            .saturating_mul(u64::try_from(page).unwrap_or(0))
    })
}

/// A `MemoryError` unless `len` elements of `T` (`None`: more than `usize`
/// counts) fit in this machine's memory. kiln's allocator reserves address
/// space without the system's overcommit check, so a vector larger than
/// the memory would be granted, and the call writing it would run until
/// the system killed the process; NumPy's `empty` raises instead.
pub fn fits_in_memory<T>(len: Option<usize>, what: &str) -> PyResult<()> {
    if fits::<T>(len) {
        Ok(())
    } else {
        Err(too_large(what, len))
    }
}

/// Whether `len` elements of `T` fit in this machine's memory
/// ([`fits_in_memory`]).
fn fits<T>(len: Option<usize>) -> bool {
    let memory = physical_memory();
    len.and_then(|n| n.checked_mul(size_of::<T>()))
        .is_some_and(|bytes| memory == 0 || bytes as u64 <= memory)
}

/// The `MemoryError` of [`fits_in_memory`].
fn too_large(what: &str, len: Option<usize>) -> PyErr {
    let len = len.map_or_else(|| "more than 2^64".to_string(), |n| n.to_string());
    pyo3::exceptions::PyMemoryError::new_err(format!(
        "{what} of {len} elements does not fit in this machine's memory"
    ))
}

/// `len` elements not written yet; a `MemoryError` where they do not fit
/// ([`fits_in_memory`]).
fn uninit<T>(len: usize, name: &str) -> PyResult<Vec<MaybeUninit<T>>> {
    // The message is made only for an error: a call makes each output.
    let mut v = Vec::new();
    if !fits::<T>(Some(len)) || v.try_reserve_exact(len).is_err() {
        return Err(too_large(&format!("output `{name}`"), Some(len)));
    }
    // SAFETY: `MaybeUninit` needs no initialization, and the capacity is
    // at least `len`.
    unsafe { v.set_len(len) };
    Ok(v)
}

/// `len` elements of `value`, or a `MemoryError` (as [`uninit`]).
fn filled<T: Copy>(len: usize, value: T, name: &str) -> PyResult<Vec<T>> {
    let mut v = uninit::<T>(len, name)?;
    v.fill(MaybeUninit::new(value));
    // SAFETY: every element was just written.
    Ok(unsafe { assume_init(v) })
}

/// `v` as the initialized elements it now holds.
///
/// # Safety
/// Every element of `v` must have been written.
unsafe fn assume_init<T>(v: Vec<MaybeUninit<T>>) -> Vec<T> {
    let mut v = std::mem::ManuallyDrop::new(v);
    // SAFETY: `MaybeUninit<T>` has `T`'s layout; the caller guarantees the
    // elements are initialized; the allocation moves over whole.
    unsafe { Vec::from_raw_parts(v.as_mut_ptr().cast::<T>(), v.len(), v.capacity()) }
}

/// `values` as a NumPy array of `shape`, owning them.
fn owned_array<'py, T: Element>(
    py: Python<'py>,
    values: Vec<T>,
    shape: Vec<usize>,
) -> PyResult<Bound<'py, PyAny>> {
    let array = numpy::ndarray::ArrayD::from_shape_vec(numpy::ndarray::IxDyn(&shape), values)
        .map_err(|e| PyValueError::new_err(format!("an output's shape: {e}")))?;
    Ok(PyArrayDyn::from_owned_array(py, array).into_any())
}

/// A writable borrow of an output array.
pub enum Writable<'py> {
    /// `bool` elements.
    Bool(PyReadwriteArrayDyn<'py, bool>),
    /// `i32` elements.
    I32(PyReadwriteArrayDyn<'py, i32>),
    /// `i64` elements.
    I64(PyReadwriteArrayDyn<'py, i64>),
    /// `f32` elements.
    F32(PyReadwriteArrayDyn<'py, f32>),
    /// `f64` elements.
    F64(PyReadwriteArrayDyn<'py, f64>),
}

fn writable<'py, T: Element>(
    array: &Bound<'py, PyUntypedArray>,
    name: &str,
) -> PyResult<PyReadwriteArrayDyn<'py, T>> {
    let typed = array.clone().cast_into::<PyArrayDyn<T>>()?;
    typed.try_readwrite().map_err(|e| {
        PyValueError::new_err(format!(
            "out for `{name}` cannot be written: {e} (is it also an input of this call?)"
        ))
    })
}

impl<'py> Room<'py> {
    /// The bytes of the caller's `out=` array (None for kiln's own rooms).
    pub fn caller_bytes(&self) -> Option<std::ops::Range<usize>> {
        fn range<T: Element>(a: &PyReadwriteArrayDyn<'_, T>) -> Option<std::ops::Range<usize>> {
            let slice = a.as_slice().ok()?;
            let start = slice.as_ptr() as usize;
            Some(start..start + size_of_val(slice))
        }
        match self {
            Room::Array(_, Writable::Bool(a)) => range(a),
            Room::Array(_, Writable::I32(a)) => range(a),
            Room::Array(_, Writable::I64(a)) => range(a),
            Room::Array(_, Writable::F32(a)) => range(a),
            Room::Array(_, Writable::F64(a)) => range(a),
            _ => None,
        }
    }

    /// A new array of `dtype` and `shape`, or the caller's `out`, which must
    /// be exactly that: a NumPy array of the dtype and shape, C-contiguous,
    /// aligned and writeable (a copy would lose what the call writes).
    pub fn array(
        out: Option<&Bound<'py, PyAny>>,
        dtype: DType,
        shape: &[usize],
        name: &str,
    ) -> PyResult<Room<'py>> {
        let array = match out {
            None => {
                let len = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
                let Some(len) = len else {
                    return Err(too_large(&format!("output `{name}`"), None));
                };
                let shape = shape.to_vec();
                return Ok(Room::Owned(
                    match dtype {
                        DType::Bool => Owned::Bool(filled(len, false, name)?),
                        DType::I32 => Owned::I32(filled(len, 0, name)?),
                        DType::I64 => Owned::I64(filled(len, 0, name)?),
                        DType::F32 => Owned::F32(uninit(len, name)?),
                        DType::F64 => Owned::F64(uninit(len, name)?),
                    },
                    shape,
                ));
            }
            Some(obj) => {
                let array = obj.cast::<PyUntypedArray>().map_err(|_| {
                    PyTypeError::new_err(format!("out for `{name}` must be a NumPy array"))
                })?;
                let fits = with_elem!(dtype, T => in_place::<T>(array));
                if !fits {
                    return Err(PyTypeError::new_err(format!(
                        "out for `{name}` must be a C-contiguous, aligned array of {dtype}, got {} ({})",
                        array.dtype(),
                        if array.is_c_contiguous() { "contiguous" } else { "not contiguous" }
                    )));
                }
                if array.shape() != shape {
                    return Err(PyValueError::new_err(format!(
                        "out for `{name}` must have shape {shape:?}, got {:?}",
                        array.shape()
                    )));
                }
                array.clone()
            }
        };
        let w = match dtype {
            DType::Bool => Writable::Bool(writable(&array, name)?),
            DType::I32 => Writable::I32(writable(&array, name)?),
            DType::I64 => Writable::I64(writable(&array, name)?),
            DType::F32 => Writable::F32(writable(&array, name)?),
            DType::F64 => Writable::F64(writable(&array, name)?),
        };
        Ok(Room::Array(array, w))
    }

    /// Room for a selection of at most `rows` row indices.
    pub fn selection(py: Python<'py>, rows: usize, name: &str) -> PyResult<Room<'py>> {
        let array = numpy(py)?
            .call_method1("empty", (rows, dtype::<u32>(py)))?
            .cast_into::<PyUntypedArray>()?;
        let w = writable::<u32>(&array, name)?;
        Ok(Room::Selection(array, w))
    }

    /// The room, as kiln borrows it (C-contiguous and aligned, as
    /// [`Room::array`] checked; else a `ValueError`).
    pub fn as_mut(&mut self) -> PyResult<ArrayMut<'_>> {
        let e = |e: numpy::AsSliceError| {
            PyValueError::new_err(format!("an output array cannot be written in place: {e}"))
        };
        Ok(match self {
            Room::Array(_, Writable::Bool(a)) => ArrayMut::Bool(a.as_slice_mut().map_err(e)?),
            Room::Array(_, Writable::I32(a)) => ArrayMut::I32(a.as_slice_mut().map_err(e)?),
            Room::Array(_, Writable::I64(a)) => ArrayMut::I64(a.as_slice_mut().map_err(e)?),
            Room::Array(_, Writable::F32(a)) => ArrayMut::F32(a.as_slice_mut().map_err(e)?),
            Room::Array(_, Writable::F64(a)) => ArrayMut::F64(a.as_slice_mut().map_err(e)?),
            Room::Owned(Owned::Bool(v), _) => ArrayMut::Bool(v),
            Room::Owned(Owned::I32(v), _) => ArrayMut::I32(v),
            Room::Owned(Owned::I64(v), _) => ArrayMut::I64(v),
            Room::Owned(Owned::F32(v), _) => ArrayMut::F32Uninit(v),
            Room::Owned(Owned::F64(v), _) => ArrayMut::F64Uninit(v),
            Room::Scalar(b) => match b {
                Buffer::Bool(v) => ArrayMut::Bool(v),
                Buffer::I32(v) => ArrayMut::I32(v),
                Buffer::I64(v) => ArrayMut::I64(v),
                Buffer::F32(v) => ArrayMut::F32(v),
                Buffer::F64(v) => ArrayMut::F64(v),
            },
            Room::Selection(_, rows) => ArrayMut::Selection(rows.as_slice_mut().map_err(e)?),
        })
    }

    /// The output as a Python value, `count` elements written, after a
    /// call that succeeded (which wrote every element of an array).
    pub fn into_py(self, py: Python<'py>, count: usize) -> PyResult<Bound<'py, PyAny>> {
        match self {
            Room::Array(array, w) => {
                drop(w);
                Ok(array.into_any())
            }
            Room::Owned(values, shape) => match values {
                Owned::Bool(v) => owned_array(py, v, shape),
                Owned::I32(v) => owned_array(py, v, shape),
                Owned::I64(v) => owned_array(py, v, shape),
                // SAFETY: a call that succeeded wrote every element.
                Owned::F32(v) => owned_array(py, unsafe { assume_init(v) }, shape),
                Owned::F64(v) => owned_array(py, unsafe { assume_init(v) }, shape),
            },
            Room::Scalar(b) => scalar_to_py(py, b.get(0).expect("one element")),
            Room::Selection(array, w) => {
                drop(w);
                let slice = pyo3::types::PySlice::new(py, 0, count as isize, 1);
                array.get_item(slice)
            }
        }
    }
}

/// A kiln scalar as a Python `float`, `int` or `bool`.
pub fn scalar_to_py(py: Python<'_>, s: Scalar) -> PyResult<Bound<'_, PyAny>> {
    Ok(match s {
        Scalar::Bool(b) => PyBool::new(py, b).to_owned().into_any(),
        Scalar::I32(v) => v.into_pyobject(py)?.into_any(),
        Scalar::I64(v) => v.into_pyobject(py)?.into_any(),
        Scalar::F32(v) => PyFloat::new(py, v.into()).into_any(),
        Scalar::F64(v) => PyFloat::new(py, v).into_any(),
    })
}
