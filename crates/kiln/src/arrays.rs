//! Borrowed inputs and output room for [`Program::run_arrays`](crate::Program::run_arrays):
//! a caller's arrays (a NumPy array's buffer, a `Vec`) passed without copies.

use kiln_ir::exec::{DimBindings, ExecError, ExecResult, InputShape};
use kiln_ir::{Buffer, DType, Data, Dim, Graph, Scalar, Type};
use std::mem::MaybeUninit;

/// A borrowed input: a scalar, or an array's elements in row-major order (its
/// shape is the graph input's).
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum ArrayRef<'a> {
    /// A scalar.
    Scalar(Scalar),
    /// `bool` elements.
    Bool(&'a [bool]),
    /// `i32` elements.
    I32(&'a [i32]),
    /// `i64` elements.
    I64(&'a [i64]),
    /// `f32` elements.
    F32(&'a [f32]),
    /// `f64` elements.
    F64(&'a [f64]),
}

/// Room for an output, borrowed: its elements in row-major order (a scalar
/// output is one element), or a selection's row indices.
#[derive(Debug)]
pub enum ArrayMut<'a> {
    /// `bool` elements.
    Bool(&'a mut [bool]),
    /// `i32` elements.
    I32(&'a mut [i32]),
    /// `i64` elements.
    I64(&'a mut [i64]),
    /// `f32` elements.
    F32(&'a mut [f32]),
    /// `f64` elements.
    F64(&'a mut [f64]),
    /// A selection: room for at least one index per row; the first
    /// `count` (returned by the call) are written.
    Selection(&'a mut [u32]),
    /// `f32` elements not written yet (a new vector's spare capacity). A
    /// call that returns `Ok` has written every one of them (every tier
    /// writes each element of an output: docs/abi.md); after an error
    /// they are unspecified, some perhaps still unwritten.
    F32Uninit(&'a mut [MaybeUninit<f32>]),
    /// `f64` elements not written yet, as [`ArrayMut::F32Uninit`].
    F64Uninit(&'a mut [MaybeUninit<f64>]),
}

macro_rules! each_array {
    ($a:expr, $v:ident => $body:expr, $scalar:pat => $other:expr) => {
        match $a {
            ArrayRef::Bool($v) => $body,
            ArrayRef::I32($v) => $body,
            ArrayRef::I64($v) => $body,
            ArrayRef::F32($v) => $body,
            ArrayRef::F64($v) => $body,
            $scalar => $other,
        }
    };
}

impl<'a> ArrayRef<'a> {
    /// `data` borrowed (a selection is not an input: `None`).
    pub fn of(data: &'a Data) -> Option<ArrayRef<'a>> {
        Some(match data {
            Data::Scalar(s) => ArrayRef::Scalar(*s),
            Data::Column(Buffer::Bool(v)) => ArrayRef::Bool(v),
            Data::Column(Buffer::I32(v)) => ArrayRef::I32(v),
            Data::Column(Buffer::I64(v)) => ArrayRef::I64(v),
            Data::Column(Buffer::F32(v)) => ArrayRef::F32(v),
            Data::Column(Buffer::F64(v)) => ArrayRef::F64(v),
            Data::Selection(_) => return None,
        })
    }

    /// What binding sees of it: a scalar's dtype, or an array's dtype and
    /// length ([`kiln_ir::exec::bind_shapes`]).
    pub fn shape(&self) -> InputShape {
        let dtype = match self {
            ArrayRef::Scalar(s) => return InputShape::Scalar(s.dtype()),
            ArrayRef::Bool(_) => DType::Bool,
            ArrayRef::I32(_) => DType::I32,
            ArrayRef::I64(_) => DType::I64,
            ArrayRef::F32(_) => DType::F32,
            ArrayRef::F64(_) => DType::F64,
        };
        InputShape::Array(
            dtype,
            each_array!(self, v => v.len(), ArrayRef::Scalar(_) => 1) as u64,
        )
    }

    /// How an error message names it: `a f64 scalar`, `f32[12]`.
    pub fn describe(&self) -> String {
        match self.shape() {
            InputShape::Scalar(d) => format!("a {d} scalar"),
            InputShape::Array(d, n) => format!("{d}[{n}]"),
            InputShape::Other => "nothing".into(),
        }
    }
}

impl ArrayMut<'_> {
    /// The element dtype and length (`None` for a selection).
    pub fn array(&self) -> Option<(DType, usize)> {
        Some(match self {
            ArrayMut::Bool(v) => (DType::Bool, v.len()),
            ArrayMut::I32(v) => (DType::I32, v.len()),
            ArrayMut::I64(v) => (DType::I64, v.len()),
            ArrayMut::F32(v) => (DType::F32, v.len()),
            ArrayMut::F64(v) => (DType::F64, v.len()),
            ArrayMut::F32Uninit(v) => (DType::F32, v.len()),
            ArrayMut::F64Uninit(v) => (DType::F64, v.len()),
            ArrayMut::Selection(_) => return None,
        })
    }

    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        match self {
            ArrayMut::Bool(v) => v.as_mut_ptr().cast(),
            ArrayMut::I32(v) => v.as_mut_ptr().cast(),
            ArrayMut::I64(v) => v.as_mut_ptr().cast(),
            ArrayMut::F32(v) => v.as_mut_ptr().cast(),
            ArrayMut::F64(v) => v.as_mut_ptr().cast(),
            ArrayMut::F32Uninit(v) => v.as_mut_ptr().cast(),
            ArrayMut::F64Uninit(v) => v.as_mut_ptr().cast(),
            ArrayMut::Selection(v) => v.as_mut_ptr().cast(),
        }
    }

    pub(crate) fn describe(&self) -> String {
        match (self.array(), self) {
            (Some((d, n)), _) => format!("{d}[{n}]"),
            (None, ArrayMut::Selection(v)) => format!("room for {} rows", v.len()),
            (None, _) => unreachable!("only a selection is not an array"),
        }
    }
}

pub(crate) use each_array;

impl ArrayMut<'_> {
    /// Copies `data`, an output the program computed, into this room:
    /// what [`Program::run_arrays`](crate::Program::run_arrays) does for
    /// programs that compute into their own buffers. Returns the elements
    /// written (a selection's length).
    pub(crate) fn fill(&mut self, name: &str, data: Data) -> ExecResult<usize> {
        let wrong = |room: &ArrayMut<'_>, expected: String| ExecError::Output {
            name: name.to_string(),
            expected,
            got: room.describe(),
        };
        let buffer = match data {
            Data::Scalar(s) => Buffer::from_scalars(s.dtype(), &[s]),
            Data::Column(b) => b,
            Data::Selection(rows) => {
                return match self {
                    ArrayMut::Selection(room) if room.len() >= rows.len() => {
                        room[..rows.len()].copy_from_slice(&rows);
                        Ok(rows.len())
                    }
                    room => Err(wrong(room, format!("room for {} rows", rows.len()))),
                };
            }
        };
        let expected = format!("{}[{}]", buffer.dtype(), buffer.len());
        match (&mut *self, buffer) {
            (ArrayMut::Bool(room), Buffer::Bool(v)) if room.len() == v.len() => {
                room.copy_from_slice(&v)
            }
            (ArrayMut::I32(room), Buffer::I32(v)) if room.len() == v.len() => {
                room.copy_from_slice(&v)
            }
            (ArrayMut::I64(room), Buffer::I64(v)) if room.len() == v.len() => {
                room.copy_from_slice(&v)
            }
            (ArrayMut::F32(room), Buffer::F32(v)) if room.len() == v.len() => {
                room.copy_from_slice(&v)
            }
            (ArrayMut::F64(room), Buffer::F64(v)) if room.len() == v.len() => {
                room.copy_from_slice(&v)
            }
            (ArrayMut::F32Uninit(room), Buffer::F32(v)) if room.len() == v.len() => {
                write_all(room, &v)
            }
            (ArrayMut::F64Uninit(room), Buffer::F64(v)) if room.len() == v.len() => {
                write_all(room, &v)
            }
            (room, _) => return Err(wrong(room, expected)),
        }
        Ok(self.array().map_or(0, |(_, n)| n))
    }
}

/// Writes `values` into `room`, element by element (as long).
fn write_all<T: Copy>(room: &mut [MaybeUninit<T>], values: &[T]) {
    for (r, &v) in room.iter_mut().zip(values) {
        r.write(v);
    }
}

impl ArrayRef<'_> {
    /// The input as owned data (a copy), for programs that run on [`Data`].
    pub(crate) fn to_data(self) -> Data {
        match self {
            ArrayRef::Scalar(s) => Data::Scalar(s),
            ArrayRef::Bool(v) => Data::Column(Buffer::Bool(v.to_vec())),
            ArrayRef::I32(v) => Data::Column(Buffer::I32(v.to_vec())),
            ArrayRef::I64(v) => Data::Column(Buffer::I64(v.to_vec())),
            ArrayRef::F32(v) => Data::Column(Buffer::F32(v.to_vec())),
            ArrayRef::F64(v) => Data::Column(Buffer::F64(v.to_vec())),
        }
    }
}

/// Checks that `outputs` are room for `graph`'s outputs with the dimensions
/// `bindings` gives (a scalar output is one element, an array output exactly
/// its elements, a selection at least one index per row): the one check
/// every [`Program::run_arrays`](crate::Program::run_arrays) makes before a
/// program writes into a caller's memory.
pub(crate) fn check_rooms(
    graph: &Graph,
    bindings: &DimBindings,
    outputs: &[ArrayMut<'_>],
) -> ExecResult<()> {
    if outputs.len() != graph.outputs().len() {
        return Err(ExecError::OutputCount {
            expected: graph.outputs().len(),
            got: outputs.len(),
        });
    }
    // A dimension no input binds (which verification rules out) counts as
    // 0, so no room fits it: an error, not a panic.
    let elements = |dims: &[Dim]| -> u64 {
        dims.iter()
            .map(|d| bindings.extent(d).unwrap_or(0))
            .product()
    };
    for (room, out) in outputs.iter().zip(graph.outputs()) {
        let (fits, expected) = match graph.ty(out.value) {
            Type::Tensor(t) => {
                let n = elements(&t.shape);
                (
                    room.array() == Some((t.dtype, n as usize)),
                    format!("{}[{n}]", t.dtype),
                )
            }
            Type::Selection(dim) => {
                let n = elements(std::slice::from_ref(dim));
                (
                    matches!(room, ArrayMut::Selection(rows) if rows.len() as u64 >= n),
                    format!("room for {n} rows"),
                )
            }
        };
        if !fits {
            return Err(ExecError::Output {
                name: out.name.clone(),
                expected,
                got: room.describe(),
            });
        }
    }
    Ok(())
}
