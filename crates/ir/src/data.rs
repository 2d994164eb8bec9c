//! Run-time data that engines take and return: scalars, typed column buffers and
//! selection vectors. Shared by every engine so tests and the CLI treat them alike.

use crate::scalar::{parse_scalar, LiteralError, Scalar};
use crate::types::{DType, Type};
use std::fmt;

/// A typed, contiguous buffer of elements.
#[derive(Clone, Debug, PartialEq)]
pub enum Buffer {
    /// `bool` elements.
    Bool(Vec<bool>),
    /// `i32` elements.
    I32(Vec<i32>),
    /// `i64` elements.
    I64(Vec<i64>),
    /// `f32` elements.
    F32(Vec<f32>),
    /// `f64` elements.
    F64(Vec<f64>),
}

macro_rules! each_buffer {
    ($buf:expr, $v:ident => $body:expr) => {
        match $buf {
            Buffer::Bool($v) => $body,
            Buffer::I32($v) => $body,
            Buffer::I64($v) => $body,
            Buffer::F32($v) => $body,
            Buffer::F64($v) => $body,
        }
    };
}

impl Buffer {
    /// An empty buffer of `dtype` with room for `capacity` elements.
    pub fn with_capacity(dtype: DType, capacity: usize) -> Buffer {
        match dtype {
            DType::Bool => Buffer::Bool(Vec::with_capacity(capacity)),
            DType::I32 => Buffer::I32(Vec::with_capacity(capacity)),
            DType::I64 => Buffer::I64(Vec::with_capacity(capacity)),
            DType::F32 => Buffer::F32(Vec::with_capacity(capacity)),
            DType::F64 => Buffer::F64(Vec::with_capacity(capacity)),
        }
    }

    /// The element dtype.
    pub fn dtype(&self) -> DType {
        match self {
            Buffer::Bool(_) => DType::Bool,
            Buffer::I32(_) => DType::I32,
            Buffer::I64(_) => DType::I64,
            Buffer::F32(_) => DType::F32,
            Buffer::F64(_) => DType::F64,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        each_buffer!(self, v => v.len())
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `idx`, or `None` past the end.
    pub fn get(&self, idx: usize) -> Option<Scalar> {
        Some(match self {
            Buffer::Bool(v) => Scalar::Bool(*v.get(idx)?),
            Buffer::I32(v) => Scalar::I32(*v.get(idx)?),
            Buffer::I64(v) => Scalar::I64(*v.get(idx)?),
            Buffer::F32(v) => Scalar::F32(*v.get(idx)?),
            Buffer::F64(v) => Scalar::F64(*v.get(idx)?),
        })
    }

    /// Appends `value`; returns false (and appends nothing) if its dtype differs.
    pub fn push(&mut self, value: Scalar) -> bool {
        match (self, value) {
            (Buffer::Bool(v), Scalar::Bool(x)) => v.push(x),
            (Buffer::I32(v), Scalar::I32(x)) => v.push(x),
            (Buffer::I64(v), Scalar::I64(x)) => v.push(x),
            (Buffer::F32(v), Scalar::F32(x)) => v.push(x),
            (Buffer::F64(v), Scalar::F64(x)) => v.push(x),
            _ => return false,
        }
        true
    }

    /// The elements as scalars.
    pub fn iter(&self) -> impl Iterator<Item = Scalar> + '_ {
        (0..self.len()).map(|idx| self.get(idx).expect("index below len"))
    }
}

/// A value an engine takes or returns.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    /// A scalar (shape `[]`).
    Scalar(Scalar),
    /// A column (shape `[n]`); later, tensors of higher rank.
    Column(Buffer),
    /// A selection vector: ascending row indices.
    Selection(Vec<u32>),
}

impl Data {
    /// True when both are the same kind, dtype and length and every element is
    /// [`Scalar::same_value`]: bitwise equality with every NaN equal.
    pub fn same_data(&self, other: &Data) -> bool {
        match (self, other) {
            (Data::Scalar(a), Data::Scalar(b)) => a.same_value(*b),
            (Data::Column(a), Data::Column(b)) => {
                a.dtype() == b.dtype()
                    && a.len() == b.len()
                    && a.iter().zip(b.iter()).all(|(x, y)| x.same_value(y))
            }
            (Data::Selection(a), Data::Selection(b)) => a == b,
            _ => false,
        }
    }

    /// A short description of the kind, dtype and length, for messages
    /// ("an f64 column of 3 rows").
    pub fn describe(&self) -> String {
        // Every dtype name but `bool` starts with a vowel sound (i32, f64).
        let article = |d: DType| if d == DType::Bool { "a" } else { "an" };
        match self {
            Data::Scalar(s) => format!("{} {} scalar", article(s.dtype()), s.dtype()),
            Data::Column(b) => format!(
                "{} {} column of {} rows",
                article(b.dtype()),
                b.dtype(),
                b.len()
            ),
            Data::Selection(s) => format!("a selection of {} rows", s.len()),
        }
    }

    /// Parses data of type `ty` as [`Data`]'s `Display` writes it: a scalar
    /// literal, or `[a, b, …]` for a column or selection.
    pub fn parse(text: &str, ty: &Type) -> Result<Data, LiteralError> {
        let t = text.trim();
        match ty {
            Type::Tensor(tt) if tt.is_scalar() => parse_scalar(t, tt.dtype).map(Data::Scalar),
            Type::Tensor(tt) => {
                let mut buf = Buffer::with_capacity(tt.dtype, 0);
                for item in list_items(t).ok_or_else(|| LiteralError {
                    text: t.to_string(),
                    dtype: tt.dtype,
                })? {
                    buf.push(parse_scalar(item, tt.dtype)?);
                }
                Ok(Data::Column(buf))
            }
            Type::Selection(_) => {
                let err = || LiteralError {
                    text: t.to_string(),
                    dtype: DType::I64,
                };
                let items = list_items(t).ok_or_else(err)?;
                items
                    .into_iter()
                    .map(|i| i.trim().parse::<u32>().map_err(|_| err()))
                    .collect::<Result<_, _>>()
                    .map(Data::Selection)
            }
        }
    }
}

/// The items of `[a, b, c]`; `None` if the brackets are missing.
fn list_items(text: &str) -> Option<Vec<&str>> {
    let inner = text.strip_prefix('[')?.strip_suffix(']')?.trim();
    if inner.is_empty() {
        return Some(Vec::new());
    }
    Some(inner.split(',').map(str::trim).collect())
}

impl fmt::Display for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (idx, v) in self.iter().enumerate() {
            if idx > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{v}")?;
        }
        f.write_str("]")
    }
}

impl fmt::Display for Data {
    /// Scalars in their literal form, columns and selections as `[a, b, …]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Data::Scalar(s) => write!(f, "{s}"),
            Data::Column(b) => write!(f, "{b}"),
            Data::Selection(s) => {
                let items: Vec<String> = s.iter().map(u32::to_string).collect();
                write!(f, "[{}]", items.join(", "))
            }
        }
    }
}

impl From<Vec<f64>> for Data {
    fn from(v: Vec<f64>) -> Self {
        Data::Column(Buffer::F64(v))
    }
}

impl From<Scalar> for Data {
    fn from(s: Scalar) -> Self {
        Data::Scalar(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_prints_and_parses_back() {
        let ty = Type::column(DType::F64, "n");
        let col = Data::from(vec![1.0, -0.0, f64::NAN, f64::NEG_INFINITY]);
        assert_eq!(col.to_string(), "[1.0, -0.0, nan, -inf]");
        assert!(Data::parse(&col.to_string(), &ty).unwrap().same_data(&col));
        assert_eq!(
            Data::parse("[]", &ty).unwrap(),
            Data::Column(Buffer::F64(vec![]))
        );
        assert!(Data::parse("[1.0, x]", &ty).is_err());
        assert!(Data::parse("1.0", &ty).is_err());
        let sel = Type::Selection(crate::types::Dim::Sym("n".into()));
        assert_eq!(
            Data::parse("[3, 4, 5]", &sel).unwrap(),
            Data::Selection(vec![3, 4, 5])
        );
    }
}
