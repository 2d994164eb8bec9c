//! Inputs given as DLPack capsules: a CPU tensor's elements read where the
//! tensor keeps them, without a NumPy array in between. The torch backend
//! passes each tensor as `torch.utils.dlpack.to_dlpack(t)` gives it (a
//! capsule costs a third of `t.detach().numpy()`, docs/performance.md), and
//! any caller may (docs/python.md).
//!
//! kiln reads the capsule without consuming it: it stays named `dltensor`,
//! so its producer's destructor frees the tensor when the capsule goes, and
//! the caller may still hand it on. The layout is DLPack's unversioned one
//! (`DLManagedTensor`, `dlpack.h`), the capsule torch's `to_dlpack` makes.

use kiln::{ArrayRef, DType, Dim, Scalar};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods};
use std::collections::HashMap;
use std::ffi::c_void;
use std::ptr::NonNull;

/// `DLDevice`.
#[repr(C)]
struct Device {
    device_type: i32,
    device_id: i32,
}

/// `DLDataType`.
#[repr(C)]
struct DataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

/// `DLTensor`, the first field of the `DLManagedTensor` a capsule holds
/// (its producer's context and deleter follow; kiln never calls the
/// deleter, the capsule's destructor does).
#[repr(C)]
struct Tensor {
    data: *mut c_void,
    device: Device,
    ndim: i32,
    dtype: DataType,
    shape: *const i64,
    strides: *const i64,
    byte_offset: u64,
}

/// `kDLCPU`.
const CPU: i32 = 1;

/// DLPack's `(code, bits)` of a kiln dtype: `kDLInt` 0, `kDLFloat` 2,
/// `kDLBool` 6.
fn code(dtype: DType) -> (u8, u8) {
    match dtype {
        DType::Bool => (6, 8),
        DType::I32 => (0, 32),
        DType::I64 => (0, 64),
        DType::F32 => (2, 32),
        DType::F64 => (2, 64),
    }
}

/// An input's elements in a capsule, borrowed for the length of a call: the
/// capsule, which keeps the tensor alive, and where its elements are.
pub struct Held<'py> {
    _capsule: Bound<'py, PyCapsule>,
    data: NonNull<u8>,
    len: usize,
    dtype: DType,
}

impl Held<'_> {
    /// The elements, as kiln borrows them.
    pub fn as_ref(&self) -> ArrayRef<'_> {
        let p = self.data.as_ptr();
        let n = self.len;
        // SAFETY: `tensor` checked that `data` holds `len` elements of
        // `dtype`, aligned, inside the tensor the capsule keeps alive while
        // `self` holds it (`bool`s each 0 or 1), and kiln only reads them.
        unsafe {
            match self.dtype {
                DType::Bool => ArrayRef::Bool(std::slice::from_raw_parts(p.cast(), n)),
                DType::I32 => ArrayRef::I32(std::slice::from_raw_parts(p.cast(), n)),
                DType::I64 => ArrayRef::I64(std::slice::from_raw_parts(p.cast(), n)),
                DType::F32 => ArrayRef::F32(std::slice::from_raw_parts(p.cast(), n)),
                DType::F64 => ArrayRef::F64(std::slice::from_raw_parts(p.cast(), n)),
            }
        }
    }

    /// The bytes the elements span.
    pub fn bytes(&self) -> std::ops::Range<usize> {
        let start = self.data.as_ptr() as usize;
        start..start + self.len * self.dtype.size_bytes()
    }

    /// The one element of a 0-d tensor (or of any one-element tensor).
    pub fn scalar(&self) -> Option<Scalar> {
        match self.as_ref() {
            ArrayRef::Bool([v]) => Some(Scalar::Bool(*v)),
            ArrayRef::I32([v]) => Some(Scalar::I32(*v)),
            ArrayRef::I64([v]) => Some(Scalar::I64(*v)),
            ArrayRef::F32([v]) => Some(Scalar::F32(*v)),
            ArrayRef::F64([v]) => Some(Scalar::F64(*v)),
            _ => None,
        }
    }
}

/// Input `name` of `dtype` from a DLPack capsule, with its shape checked
/// against `dims` (`None`: a scalar, which takes a 0-d tensor) and its
/// symbolic dimensions bound in `dims_seen`. The tensor must be on the CPU,
/// of the input's dtype exactly (a capsule is never converted) and dense in
/// row-major order, its elements aligned; else a `TypeError` or
/// `ValueError` naming the input.
pub fn tensor<'py>(
    capsule: &Bound<'py, PyCapsule>,
    dtype: DType,
    dims: Option<&[Dim]>,
    name: &str,
    dims_seen: &mut HashMap<String, u64>,
) -> PyResult<Held<'py>> {
    let managed = capsule.pointer_checked(Some(c"dltensor")).map_err(|_| {
        PyTypeError::new_err(format!(
            "input `{name}` is a capsule but not an unused DLPack tensor (named \"dltensor\")"
        ))
    })?;
    // SAFETY: a capsule named `dltensor` holds a `DLManagedTensor`, which
    // its producer keeps valid until the capsule's destructor runs, after
    // `capsule` (held by the caller for this call) is dropped.
    let t = unsafe { managed.cast::<Tensor>().as_ref() };
    if t.device.device_type != CPU {
        return Err(PyValueError::new_err(format!(
            "input `{name}` is a tensor on DLPack device type {}, not the CPU",
            t.device.device_type
        )));
    }
    let (want_code, want_bits) = code(dtype);
    if (t.dtype.code, t.dtype.bits, t.dtype.lanes) != (want_code, want_bits, 1) {
        return Err(PyTypeError::new_err(format!(
            "input `{name}` is {dtype}, got a DLPack tensor of type code {} with {} bits and {} lane(s) \
             (a capsule is read as it is, never converted)",
            t.dtype.code, t.dtype.bits, t.dtype.lanes
        )));
    }
    let ndim = usize::try_from(t.ndim).map_err(|_| {
        PyValueError::new_err(format!("input `{name}` has a negative rank ({})", t.ndim))
    })?;
    // SAFETY: DLPack's `shape` and (when not null) `strides` hold `ndim`
    // elements each.
    let (shape, strides) = unsafe {
        let part = |p: *const i64| {
            if ndim == 0 || p.is_null() {
                None
            } else {
                Some(std::slice::from_raw_parts(p, ndim))
            }
        };
        (part(t.shape).unwrap_or(&[]), part(t.strides))
    };
    if shape.len() != ndim {
        return Err(PyValueError::new_err(format!(
            "input `{name}` has rank {ndim} but no shape"
        )));
    }
    let shape: Vec<usize> = shape
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<Result<_, _>>()
        .map_err(|_| PyValueError::new_err(format!("input `{name}` has a negative extent")))?;
    match dims {
        Some(dims) => crate::values::check_shape(name, &shape, dims, dims_seen)?,
        None if ndim != 0 => {
            return Err(PyTypeError::new_err(format!(
                "input `{name}` is a {dtype} scalar, got a tensor of shape {shape:?}"
            )))
        }
        None => {}
    }
    let size = dtype.size_bytes();
    // A slice spans at most `isize::MAX` bytes.
    let len = shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .filter(|n| {
            n.checked_mul(size)
                .is_some_and(|b| isize::try_from(b).is_ok())
        })
        .ok_or_else(|| PyValueError::new_err(format!("input `{name}` has too many elements")))?;
    // Dense in row-major order: each axis longer than one steps over the
    // elements of the axes after it (an axis of one may have any stride).
    if let (Some(strides), true) = (strides, len > 0) {
        let mut step = 1usize;
        for (&extent, &stride) in shape.iter().zip(strides).rev() {
            if extent != 1 && usize::try_from(stride).ok() != Some(step) {
                return Err(PyValueError::new_err(format!(
                    "input `{name}` is not dense in row-major order (shape {shape:?}, strides {strides:?})"
                )));
            }
            step *= extent;
        }
    }
    let data = if len == 0 {
        NonNull::<u64>::dangling().cast::<u8>()
    } else {
        let offset = usize::try_from(t.byte_offset)
            .map_err(|_| PyValueError::new_err(format!("input `{name}` has a bad offset")))?;
        let p = (t.data as *mut u8).wrapping_add(offset);
        match NonNull::new(p) {
            Some(p) if (p.as_ptr() as usize).is_multiple_of(size) => p,
            _ => {
                return Err(PyValueError::new_err(format!(
                    "input `{name}`'s elements are not aligned to {size} bytes"
                )))
            }
        }
    };
    if dtype == DType::Bool {
        // SAFETY: `len` bytes from `data`, inside the tensor.
        let bytes = unsafe { std::slice::from_raw_parts(data.as_ptr(), len) };
        if bytes.iter().any(|&b| b > 1) {
            return Err(PyValueError::new_err(format!(
                "input `{name}` holds a bool that is neither 0 nor 1"
            )));
        }
    }
    Ok(Held {
        _capsule: capsule.clone(),
        data,
        len,
        dtype,
    })
}
