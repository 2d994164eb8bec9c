//! Scalar values: one element of one dtype.
//!
//! Equality and hashing compare floats by their bits, so `Scalar` can key the
//! CSE table and a constant `-0.0` never merges with `+0.0`. Use
//! [`Scalar::same_value`] to compare results the way tests do (every NaN equal).

use crate::types::DType;
use std::fmt;
use std::hash::{Hash, Hasher};

/// One element of one dtype.
#[derive(Copy, Clone, Debug)]
pub enum Scalar {
    /// A `bool`.
    Bool(bool),
    /// An `i32`.
    I32(i32),
    /// An `i64`.
    I64(i64),
    /// An `f32`.
    F32(f32),
    /// An `f64`.
    F64(f64),
}

impl Scalar {
    /// The dtype of this scalar.
    pub fn dtype(self) -> DType {
        match self {
            Scalar::Bool(_) => DType::Bool,
            Scalar::I32(_) => DType::I32,
            Scalar::I64(_) => DType::I64,
            Scalar::F32(_) => DType::F32,
            Scalar::F64(_) => DType::F64,
        }
    }

    /// The zero of `dtype` (`false` for bool).
    pub fn zero(dtype: DType) -> Scalar {
        match dtype {
            DType::Bool => Scalar::Bool(false),
            DType::I32 => Scalar::I32(0),
            DType::I64 => Scalar::I64(0),
            DType::F32 => Scalar::F32(0.0),
            DType::F64 => Scalar::F64(0.0),
        }
    }

    /// The one of `dtype` (`true` for bool).
    pub fn one(dtype: DType) -> Scalar {
        match dtype {
            DType::Bool => Scalar::Bool(true),
            DType::I32 => Scalar::I32(1),
            DType::I64 => Scalar::I64(1),
            DType::F32 => Scalar::F32(1.0),
            DType::F64 => Scalar::F64(1.0),
        }
    }

    /// The raw bits, zero-extended: what bitwise equality compares.
    pub fn bits(self) -> u64 {
        match self {
            Scalar::Bool(b) => u64::from(b),
            Scalar::I32(v) => u64::from(v as u32),
            Scalar::I64(v) => v as u64,
            Scalar::F32(v) => u64::from(v.to_bits()),
            Scalar::F64(v) => v.to_bits(),
        }
    }

    /// The value as memory and the native ABI hold it: little-endian, `bool` as
    /// one byte 0 or 1.
    pub fn to_le_bytes(self) -> Vec<u8> {
        let n = self.dtype().size_bytes();
        self.bits().to_le_bytes()[..n].to_vec()
    }

    /// A `dtype` value from exactly `dtype.size_bytes()` little-endian bytes
    /// (any nonzero byte is a true `bool`); `None` for another length.
    pub fn from_le_bytes(dtype: DType, bytes: &[u8]) -> Option<Scalar> {
        if bytes.len() != dtype.size_bytes() {
            return None;
        }
        let mut raw = [0u8; 8];
        raw[..bytes.len()].copy_from_slice(bytes);
        Some(Scalar::from_bits(dtype, u64::from_le_bytes(raw)))
    }

    /// The `dtype` value whose bits are the low bytes of `bits` (the inverse
    /// of [`Self::bits`]; any nonzero low byte is a true `bool`, as the ABI
    /// reads one): how a kernel's 8-byte output cell is read.
    pub fn from_bits(dtype: DType, bits: u64) -> Scalar {
        match dtype {
            DType::Bool => Scalar::Bool(bits & 0xff != 0),
            DType::I32 => Scalar::I32(bits as u32 as i32),
            DType::I64 => Scalar::I64(bits as i64),
            DType::F32 => Scalar::F32(f32::from_bits(bits as u32)),
            DType::F64 => Scalar::F64(f64::from_bits(bits)),
        }
    }

    /// True when both have the same dtype and value, every NaN being equal to every
    /// other NaN (NaN payloads are unspecified, see `docs/semantics.md`).
    pub fn same_value(self, other: Scalar) -> bool {
        match (self, other) {
            (Scalar::F32(a), Scalar::F32(b)) if a.is_nan() && b.is_nan() => true,
            (Scalar::F64(a), Scalar::F64(b)) if a.is_nan() && b.is_nan() => true,
            _ => self == other,
        }
    }

    /// True for a float NaN.
    pub fn is_nan(self) -> bool {
        match self {
            Scalar::F32(v) => v.is_nan(),
            Scalar::F64(v) => v.is_nan(),
            _ => false,
        }
    }
}

macro_rules! scalar_from {
    ($($t:ty => $variant:ident,)*) => {
        $(impl From<$t> for Scalar {
            fn from(v: $t) -> Scalar {
                Scalar::$variant(v)
            }
        })*
    };
}

scalar_from! {
    bool => Bool,
    i32 => I32,
    i64 => I64,
    f32 => F32,
    f64 => F64,
}

impl PartialEq for Scalar {
    fn eq(&self, other: &Self) -> bool {
        self.dtype() == other.dtype() && self.bits() == other.bits()
    }
}

impl Eq for Scalar {}

impl Hash for Scalar {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.dtype().hash(state);
        self.bits().hash(state);
    }
}

/// Writes an `f64` so that it parses back to the same bits: shortest round-trip
/// digits, `inf`, `-inf`, `nan` for the default quiet NaN and `nan(0x…)` (the raw
/// bits) for any other NaN.
pub fn write_f64(f: &mut impl fmt::Write, v: f64) -> fmt::Result {
    if v.is_nan() {
        if v.to_bits() == f64::NAN.to_bits() {
            f.write_str("nan")
        } else {
            write!(f, "nan(0x{:016x})", v.to_bits())
        }
    } else if v.is_infinite() {
        f.write_str(if v > 0.0 { "inf" } else { "-inf" })
    } else {
        write!(f, "{v:?}")
    }
}

/// Writes an `f32` like [`write_f64`] does an `f64`.
pub fn write_f32(f: &mut impl fmt::Write, v: f32) -> fmt::Result {
    if v.is_nan() {
        if v.to_bits() == f32::NAN.to_bits() {
            f.write_str("nan")
        } else {
            write!(f, "nan(0x{:08x})", v.to_bits())
        }
    } else if v.is_infinite() {
        f.write_str(if v > 0.0 { "inf" } else { "-inf" })
    } else {
        write!(f, "{v:?}")
    }
}

impl fmt::Display for Scalar {
    /// The text format's literal: shortest round-trip floats, `true`/`false`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Scalar::Bool(b) => write!(f, "{b}"),
            Scalar::I32(v) => write!(f, "{v}"),
            Scalar::I64(v) => write!(f, "{v}"),
            Scalar::F32(v) => write_f32(f, v),
            Scalar::F64(v) => write_f64(f, v),
        }
    }
}

impl Scalar {
    /// The value as a person reads it: like `Display`, but every NaN is `nan`
    /// (its sign and payload are not part of kiln's semantics, so they are
    /// noise to a reader). The `.kiln` text format keeps them: it needs exact
    /// round trips.
    pub fn readable(&self) -> Readable {
        Readable(*self)
    }
}

/// A [`Scalar`] shown as a person reads it ([`Scalar::readable`]).
#[derive(Copy, Clone, Debug)]
pub struct Readable(Scalar);

impl fmt::Display for Readable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Scalar::F32(v) if v.is_nan() => f.write_str("nan"),
            Scalar::F64(v) if v.is_nan() => f.write_str("nan"),
            s => write!(f, "{s}"),
        }
    }
}

/// Why a literal did not parse as a scalar of a given dtype.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not a valid {dtype} literal")]
pub struct LiteralError {
    /// The text that was read.
    pub text: String,
    /// The dtype it was read as.
    pub dtype: DType,
}

/// Parses a literal of `dtype` as [`Scalar`]'s `Display` writes it. Floats also
/// accept `+inf`, `infinity`, `NaN` (any case) and integers written without a
/// point; booleans also accept `True`/`False` and `0`/`1`.
pub fn parse_scalar(text: &str, dtype: DType) -> Result<Scalar, LiteralError> {
    let err = || LiteralError {
        text: text.to_string(),
        dtype,
    };
    let t = text.trim();
    match dtype {
        DType::Bool => match t {
            "true" | "True" | "1" => Ok(Scalar::Bool(true)),
            "false" | "False" | "0" => Ok(Scalar::Bool(false)),
            _ => Err(err()),
        },
        DType::I32 => t.parse().map(Scalar::I32).map_err(|_| err()),
        DType::I64 => t.parse().map(Scalar::I64).map_err(|_| err()),
        DType::F32 => match nan_bits(t) {
            Some(hex) => u32::from_str_radix(hex, 16)
                .map(|b| Scalar::F32(f32::from_bits(b)))
                .map_err(|_| err()),
            // Parse as f32 directly so the decimal rounds once, to binary32.
            None => parse_float_text(t)
                .and_then(|_| t.parse::<f32>().ok())
                .map(Scalar::F32)
                .ok_or_else(err),
        },
        DType::F64 => match nan_bits(t) {
            Some(hex) => u64::from_str_radix(hex, 16)
                .map(|b| Scalar::F64(f64::from_bits(b)))
                .map_err(|_| err()),
            None => parse_float_text(t).map(Scalar::F64).ok_or_else(err),
        },
    }
}

/// The hex digits of a `nan(0x…)` literal.
fn nan_bits(t: &str) -> Option<&str> {
    t.strip_prefix("nan(0x")?.strip_suffix(')')
}

/// Parses decimal float text, `inf`, `-inf` and `nan` (Rust's parser accepts those
/// in any case). Rejects hex and empty text.
fn parse_float_text(t: &str) -> Option<f64> {
    let ok_chars = t
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+'));
    if t.is_empty() || !ok_chars {
        return None;
    }
    t.parse::<f64>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn little_endian_bytes_round_trip() {
        for s in [
            Scalar::Bool(true),
            Scalar::I32(-2),
            Scalar::I64(i64::MIN),
            Scalar::F32(-0.0),
            Scalar::F64(f64::from_bits(0x7ff8_0000_0000_0001)),
        ] {
            let bytes = s.to_le_bytes();
            assert_eq!(bytes.len(), s.dtype().size_bytes());
            assert_eq!(
                Scalar::from_le_bytes(s.dtype(), &bytes).map(Scalar::bits),
                Some(s.bits())
            );
        }
        assert_eq!(Scalar::I32(-2).to_le_bytes(), vec![0xfe, 0xff, 0xff, 0xff]);
        assert_eq!(
            Scalar::from_le_bytes(DType::Bool, &[7]),
            Some(Scalar::Bool(true))
        );
        assert_eq!(Scalar::from_le_bytes(DType::I64, &[0; 4]), None);
    }

    #[test]
    fn floats_round_trip_bit_for_bit() {
        let f64s = [
            0.0,
            -0.0,
            1.5,
            -1e-310,
            f64::MIN_POSITIVE,
            f64::MAX,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            -f64::NAN,
            0.1,
        ];
        for v in f64s {
            let text = Scalar::F64(v).to_string();
            assert_eq!(
                parse_scalar(&text, DType::F64),
                Ok(Scalar::F64(v)),
                "{text}"
            );
        }
        let f32s = [
            0.0f32,
            -0.0,
            0.1,
            1e-45,
            f32::MAX,
            f32::NAN,
            f32::from_bits(0x7fc0_0001),
        ];
        for v in f32s {
            let text = Scalar::F32(v).to_string();
            assert_eq!(
                parse_scalar(&text, DType::F32),
                Ok(Scalar::F32(v)),
                "{text}"
            );
        }
    }

    #[test]
    fn bad_literals_are_errors() {
        assert!(parse_scalar("1.5", DType::I64).is_err());
        assert!(parse_scalar("2147483648", DType::I32).is_err());
        assert!(parse_scalar("0x10", DType::F64).is_err());
        assert!(parse_scalar("maybe", DType::Bool).is_err());
        assert!(parse_scalar("", DType::F32).is_err());
    }

    #[test]
    fn zero_signs_are_distinct_constants() {
        assert_ne!(Scalar::F64(0.0), Scalar::F64(-0.0));
        assert!(Scalar::F64(f64::NAN).same_value(Scalar::F64(-f64::NAN)));
    }
}
