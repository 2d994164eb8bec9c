//! The meaning of every op on scalars, for every dtype: the single source of
//! truth that `docs/semantics.md` describes, that the interpreter and constant
//! folding call, and that compiled tiers must match bit for bit.
//!
//! Nothing here may depend on the host's libm or on Rust float operations whose
//! results are platform-defined: transcendentals come from the pure-Rust `libm`
//! crate or are kiln's own ([`crate::math`]: `erf` of `f32`), everything else
//! is exactly specified by IEEE 754 or two's complement.

use crate::op::{BinaryOp, CmpOp, ReduceOp, UnaryOp};
use crate::scalar::Scalar;
use crate::types::DType;

/// Why a scalar operation has no result.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    /// Integer `div`, `rem`, `floordiv` or `mod` by zero.
    #[error("integer division by zero")]
    DivisionByZero,
    /// A `gather` index outside its axis.
    #[error("index out of range")]
    IndexOutOfRange,
    /// The operands' dtypes do not fit the op (a verified graph never does this).
    #[error("`{op}` is not defined for {dtype}")]
    BadDType {
        /// The op's mnemonic.
        op: &'static str,
        /// The offending dtype.
        dtype: DType,
    },
}

/// Result of a scalar operation.
pub type EvalResult<T> = Result<T, EvalError>;

fn bad<T>(op: &'static str, dtype: DType) -> EvalResult<T> {
    Err(EvalError::BadDType { op, dtype })
}

/// IEEE 754-2019 `minimum` and `maximum`: NaN if either operand is NaN, and
/// -0.0 < +0.0 (unlike Rust's `f64::min`, C's `fmin` and LLVM's `minnum`).
macro_rules! ieee_minmax {
    ($t:ident, $min:ident, $max:ident) => {
        fn $min(a: $t, b: $t) -> $t {
            if a.is_nan() || b.is_nan() {
                <$t>::NAN
            } else if a == b {
                // Equal operands differ at most in the sign of zero.
                if a.is_sign_negative() {
                    a
                } else {
                    b
                }
            } else if a < b {
                a
            } else {
                b
            }
        }

        fn $max(a: $t, b: $t) -> $t {
            if a.is_nan() || b.is_nan() {
                <$t>::NAN
            } else if a == b {
                if a.is_sign_positive() {
                    a
                } else {
                    b
                }
            } else if a > b {
                a
            } else {
                b
            }
        }
    };
}

ieee_minmax!(f64, min_f64, max_f64);
ieee_minmax!(f32, min_f32, max_f32);

/// Flooring division and modulo of floats, exactly as NumPy's `npy_divmod`
/// (CPython's float `divmod`, with IEEE results instead of an exception for a
/// zero divisor).
macro_rules! float_divmod {
    ($name:ident, $t:ty, $fmod:path) => {
        fn $name(a: $t, b: $t) -> ($t, $t) {
            let mut rem = $fmod(a, b);
            if b == 0.0 {
                return (a / b, rem);
            }
            let mut div = (a - rem) / b;
            if rem != 0.0 {
                if (b < 0.0) != (rem < 0.0) {
                    rem += b;
                    div -= 1.0;
                }
            } else {
                rem = (0.0 as $t).copysign(b);
            }
            let floordiv = if div != 0.0 {
                let floor = div.floor();
                if div - floor > 0.5 {
                    floor + 1.0
                } else {
                    floor
                }
            } else {
                (0.0 as $t).copysign(a / b)
            };
            (floordiv, rem)
        }
    };
}

float_divmod!(divmod_f64, f64, libm::fmod);
float_divmod!(divmod_f32, f32, libm::fmodf);

macro_rules! float_unary {
    ($op:expr, $v:expr, $t:ident, $m:ident, [$($f64fn:ident / $f32fn:ident = $variant:ident),*]) => {{
        let v = $v;
        match $op {
            UnaryOp::Neg => -v,
            UnaryOp::Abs => v.abs(),
            UnaryOp::Sqrt => v.sqrt(),
            UnaryOp::Floor => v.floor(),
            UnaryOp::Ceil => v.ceil(),
            UnaryOp::Trunc => v.trunc(),
            UnaryOp::Round => v.round_ties_even(),
            $(UnaryOp::$variant => float_unary!(@pick $t, $f64fn, $f32fn)(v),)*
            UnaryOp::Not | UnaryOp::BNot => return bad($op.name(), DType::$m),
        }
    }};
    (@pick f64, $f64fn:ident, $f32fn:ident) => { crate::math::$f64fn };
    (@pick f32, $f64fn:ident, $f32fn:ident) => { crate::math::$f32fn };
}

macro_rules! float_unary_all {
    (($op:expr, $v:expr, $t:ident, $m:ident) unary: [$($variant:ident $f64fn:ident $f32fn:ident),*]
     binary: [$($binary:tt)*]) => {
        float_unary!($op, $v, $t, $m, [$($f64fn / $f32fn = $variant),*])
    };
}

/// Applies a unary op.
pub fn unary(op: UnaryOp, a: Scalar) -> EvalResult<Scalar> {
    Ok(match a {
        Scalar::Bool(v) => match op {
            UnaryOp::Not => Scalar::Bool(!v),
            _ => return bad(op.name(), DType::Bool),
        },
        Scalar::I32(v) => Scalar::I32(match op {
            UnaryOp::Neg => v.wrapping_neg(),
            UnaryOp::Abs => v.wrapping_abs(),
            UnaryOp::BNot => !v,
            _ => return bad(op.name(), DType::I32),
        }),
        Scalar::I64(v) => Scalar::I64(match op {
            UnaryOp::Neg => v.wrapping_neg(),
            UnaryOp::Abs => v.wrapping_abs(),
            UnaryOp::BNot => !v,
            _ => return bad(op.name(), DType::I64),
        }),
        Scalar::F32(v) => Scalar::F32(crate::for_each_math_fn!(float_unary_all, op, v, f32, F32)),
        Scalar::F64(v) => Scalar::F64(crate::for_each_math_fn!(float_unary_all, op, v, f64, F64)),
    })
}

macro_rules! int_binary {
    ($op:expr, $a:expr, $b:expr, $t:ty, $u:ty, $m:ident) => {{
        let (a, b): ($t, $t) = ($a, $b);
        // Shift amounts are taken modulo the width: `wrapping_sh*` masks them.
        let amount = b as u32;
        if $op.divides() && b == 0 {
            return Err(EvalError::DivisionByZero);
        }
        match $op {
            BinaryOp::Add => a.wrapping_add(b),
            BinaryOp::Sub => a.wrapping_sub(b),
            BinaryOp::Mul => a.wrapping_mul(b),
            BinaryOp::Div => a.wrapping_div(b),
            BinaryOp::Rem => a.wrapping_rem(b),
            BinaryOp::FloorDiv => {
                let q = a.wrapping_div(b);
                if a.wrapping_rem(b) != 0 && ((a < 0) != (b < 0)) {
                    q - 1
                } else {
                    q
                }
            }
            BinaryOp::Mod => {
                let r = a.wrapping_rem(b);
                if r != 0 && ((r < 0) != (b < 0)) {
                    r + b
                } else {
                    r
                }
            }
            BinaryOp::Min => a.min(b),
            BinaryOp::Max => a.max(b),
            BinaryOp::BAnd => a & b,
            BinaryOp::BOr => a | b,
            BinaryOp::BXor => a ^ b,
            BinaryOp::Shl => a.wrapping_shl(amount),
            BinaryOp::ShrArith => a.wrapping_shr(amount),
            BinaryOp::ShrLogical => (a as $u).wrapping_shr(amount) as $t,
            _ => return bad($op.name(), DType::$m),
        }
    }};
}

macro_rules! float_binary {
    (($op:expr, $a:expr, $b:expr, $t:ident, $m:ident, $min:ident, $max:ident, $divmod:ident)
     unary: [$($unary:tt)*]
     binary: [$($variant:ident $f64fn:ident $f32fn:ident),*]) => {{
        let (a, b): ($t, $t) = ($a, $b);
        match $op {
            BinaryOp::Add => a + b,
            BinaryOp::Sub => a - b,
            BinaryOp::Mul => a * b,
            BinaryOp::Div => a / b,
            BinaryOp::FloorDiv => $divmod(a, b).0,
            BinaryOp::Mod => $divmod(a, b).1,
            BinaryOp::Min => $min(a, b),
            BinaryOp::Max => $max(a, b),
            // A NaN's sign is unspecified like its payload, so it must not
            // decide a result: copying the sign of a NaN gives |a|.
            BinaryOp::Copysign if b.is_nan() => a.abs(),
            BinaryOp::Copysign => a.copysign(b),
            // `rem` (C's `fmod`), `pow`, `atan2`, `hypot`, `nextafter`.
            $(BinaryOp::$variant => float_unary!(@pick $t, $f64fn, $f32fn)(a, b),)*
            _ => return bad($op.name(), DType::$m),
        }
    }};
}

/// One step of a `matmul` or `conv2d` sum, `acc + a * b`: for floats a
/// fused multiply-add, the exact `a * b + acc` rounded once (IEEE 754's
/// `fusedMultiplyAdd`, Rust's `mul_add`); for integers the wrapping product,
/// then the wrapping sum (the same as rounding each). docs/semantics.md.
pub fn mul_add(a: Scalar, b: Scalar, acc: Scalar) -> EvalResult<Scalar> {
    Ok(match (a, b, acc) {
        (Scalar::F32(a), Scalar::F32(b), Scalar::F32(c)) => Scalar::F32(a.mul_add(b, c)),
        (Scalar::F64(a), Scalar::F64(b), Scalar::F64(c)) => Scalar::F64(a.mul_add(b, c)),
        _ => binary(BinaryOp::Add, acc, binary(BinaryOp::Mul, a, b)?)?,
    })
}

/// Applies a binary op to two scalars of one dtype.
pub fn binary(op: BinaryOp, a: Scalar, b: Scalar) -> EvalResult<Scalar> {
    Ok(match (a, b) {
        (Scalar::Bool(a), Scalar::Bool(b)) => Scalar::Bool(match op {
            BinaryOp::And => a & b,
            BinaryOp::Or => a | b,
            BinaryOp::Xor => a ^ b,
            _ => return bad(op.name(), DType::Bool),
        }),
        (Scalar::I32(a), Scalar::I32(b)) => Scalar::I32(int_binary!(op, a, b, i32, u32, I32)),
        (Scalar::I64(a), Scalar::I64(b)) => Scalar::I64(int_binary!(op, a, b, i64, u64, I64)),
        (Scalar::F32(a), Scalar::F32(b)) => Scalar::F32(crate::for_each_math_fn!(
            float_binary,
            op,
            a,
            b,
            f32,
            F32,
            min_f32,
            max_f32,
            divmod_f32
        )),
        (Scalar::F64(a), Scalar::F64(b)) => Scalar::F64(crate::for_each_math_fn!(
            float_binary,
            op,
            a,
            b,
            f64,
            F64,
            min_f64,
            max_f64,
            divmod_f64
        )),
        _ => return bad(op.name(), b.dtype()),
    })
}

/// Compares two scalars of one dtype. Floats compare as IEEE 754 does (every
/// comparison with NaN is false except `ne`); `false < true`.
pub fn compare(op: CmpOp, a: Scalar, b: Scalar) -> EvalResult<bool> {
    fn cmp<T: PartialOrd>(op: CmpOp, a: T, b: T) -> bool {
        match op {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        }
    }
    Ok(match (a, b) {
        (Scalar::Bool(a), Scalar::Bool(b)) => cmp(op, a, b),
        (Scalar::I32(a), Scalar::I32(b)) => cmp(op, a, b),
        (Scalar::I64(a), Scalar::I64(b)) => cmp(op, a, b),
        (Scalar::F32(a), Scalar::F32(b)) => cmp(op, a, b),
        (Scalar::F64(a), Scalar::F64(b)) => cmp(op, a, b),
        _ => return bad(op.name(), b.dtype()),
    })
}

/// `isin(x, set)`: whether `x` equals a member of `set` (canonical, as
/// [`isin_set`] makes it), as [`compare`]'s `eq` does: `-0.0` equals `0.0`,
/// NaN equals nothing.
pub fn isin(x: Scalar, set: &[Scalar]) -> bool {
    set.binary_search_by(|m| set_order(*m, x)).is_ok()
}

/// Values as `isin`'s set holds them: of `dtype` (each cast as `cast`
/// does), NaN dropped (it is in no set), `-0.0` made `0.0` (they are
/// equal), ascending, without duplicates.
pub fn isin_set(values: impl IntoIterator<Item = Scalar>, dtype: DType) -> Vec<Scalar> {
    let mut set: Vec<Scalar> = values
        .into_iter()
        .map(|v| cast(v, dtype))
        .filter(|v| {
            !matches!(v, Scalar::F32(x) if x.is_nan()) && !matches!(v, Scalar::F64(x) if x.is_nan())
        })
        .map(|v| match v {
            // -0.0 == 0.0: one member for both.
            Scalar::F32(x) => Scalar::F32(if x == 0.0 { 0.0 } else { x }),
            Scalar::F64(x) => Scalar::F64(if x == 0.0 { 0.0 } else { x }),
            v => v,
        })
        .collect();
    set.sort_by(|a, b| set_order(*a, *b));
    set.dedup();
    set
}

/// Numeric order of two values of one dtype, NaN after everything (a
/// canonical set has none; a NaN `x` then matches nothing).
fn set_order(a: Scalar, b: Scalar) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let float = |a: f64, b: f64| {
        a.partial_cmp(&b)
            .unwrap_or_else(|| a.is_nan().cmp(&b.is_nan()))
    };
    match (a, b) {
        (Scalar::I32(a), Scalar::I32(b)) => a.cmp(&b),
        (Scalar::I64(a), Scalar::I64(b)) => a.cmp(&b),
        (Scalar::F32(a), Scalar::F32(b)) => float(f64::from(a), f64::from(b)),
        (Scalar::F64(a), Scalar::F64(b)) => float(a, b),
        (Scalar::Bool(a), Scalar::Bool(b)) => a.cmp(&b),
        (a, b) => a.dtype().cmp(&b.dtype()).then(Ordering::Equal),
    }
}

/// `select(cond, a, b)`.
pub fn select(cond: bool, a: Scalar, b: Scalar) -> Scalar {
    if cond {
        a
    } else {
        b
    }
}

/// Converts `a` to `to`: float → int saturates and maps NaN to 0; int → float
/// and f64 → f32 round to nearest, ties to even; bool → number is 0 or 1;
/// number → bool is `!= 0` (so NaN is true and -0.0 false). Rust's `as`
/// implements exactly these rules.
pub fn cast(a: Scalar, to: DType) -> Scalar {
    macro_rules! from_num {
        ($v:expr) => {
            match to {
                DType::Bool => Scalar::Bool($v != (0 as _)),
                DType::I32 => Scalar::I32($v as i32),
                DType::I64 => Scalar::I64($v as i64),
                DType::F32 => Scalar::F32($v as f32),
                DType::F64 => Scalar::F64($v as f64),
            }
        };
    }
    match a {
        Scalar::Bool(v) => from_num!(u8::from(v)),
        Scalar::I32(v) => from_num!(v),
        Scalar::I64(v) => from_num!(v),
        Scalar::F32(v) => from_num!(v),
        Scalar::F64(v) => from_num!(v),
    }
}

/// The starting value of a reduction over `dtype` (what an empty column gives,
/// except for `mean`, whose empty result is 0/0).
pub fn reduce_identity(op: ReduceOp, dtype: DType) -> Scalar {
    match (op, dtype) {
        (ReduceOp::Sum | ReduceOp::Mean, _) => Scalar::zero(dtype),
        (ReduceOp::Prod, _) => Scalar::one(dtype),
        (ReduceOp::Count, _) => Scalar::I64(0),
        (ReduceOp::Min, DType::I32) => Scalar::I32(i32::MAX),
        (ReduceOp::Min, DType::I64) => Scalar::I64(i64::MAX),
        (ReduceOp::Min, DType::F32) => Scalar::F32(f32::INFINITY),
        (ReduceOp::Min, _) => Scalar::F64(f64::INFINITY),
        (ReduceOp::Max, DType::I32) => Scalar::I32(i32::MIN),
        (ReduceOp::Max, DType::I64) => Scalar::I64(i64::MIN),
        (ReduceOp::Max, DType::F32) => Scalar::F32(f32::NEG_INFINITY),
        (ReduceOp::Max, _) => Scalar::F64(f64::NEG_INFINITY),
    }
}

/// Folds one row into a reduction's accumulator.
pub fn reduce_step(op: ReduceOp, acc: Scalar, row: Scalar) -> EvalResult<Scalar> {
    match op {
        ReduceOp::Sum | ReduceOp::Mean => binary(BinaryOp::Add, acc, row),
        ReduceOp::Prod => binary(BinaryOp::Mul, acc, row),
        ReduceOp::Min => binary(BinaryOp::Min, acc, row),
        ReduceOp::Max => binary(BinaryOp::Max, acc, row),
        ReduceOp::Count => binary(BinaryOp::Add, acc, Scalar::I64(1)),
    }
}

/// The result of a reduction from its accumulator after `n_rows` rows: `mean`
/// divides by the row count converted to the dtype; the others are the
/// accumulator itself.
pub fn reduce_finish(op: ReduceOp, acc: Scalar, n_rows: u64) -> EvalResult<Scalar> {
    match op {
        ReduceOp::Mean => binary(
            BinaryOp::Div,
            acc,
            cast(Scalar::I64(n_rows as i64), acc.dtype()),
        ),
        _ => Ok(acc),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bin(op: BinaryOp, a: Scalar, b: Scalar) -> EvalResult<Scalar> {
        binary(op, a, b)
    }

    #[test]
    fn integer_division_edges() {
        use Scalar::I64;
        assert_eq!(
            bin(BinaryOp::Div, I64(i64::MIN), I64(-1)),
            Ok(I64(i64::MIN))
        );
        assert_eq!(bin(BinaryOp::Rem, I64(i64::MIN), I64(-1)), Ok(I64(0)));
        assert_eq!(
            bin(BinaryOp::FloorDiv, I64(i64::MIN), I64(-1)),
            Ok(I64(i64::MIN))
        );
        assert_eq!(bin(BinaryOp::Mod, I64(i64::MIN), I64(-1)), Ok(I64(0)));
        assert_eq!(bin(BinaryOp::Div, I64(-7), I64(2)), Ok(I64(-3)));
        assert_eq!(bin(BinaryOp::Rem, I64(-7), I64(2)), Ok(I64(-1)));
        assert_eq!(bin(BinaryOp::FloorDiv, I64(-7), I64(2)), Ok(I64(-4)));
        assert_eq!(bin(BinaryOp::Mod, I64(-7), I64(2)), Ok(I64(1)));
        assert_eq!(bin(BinaryOp::Mod, I64(7), I64(-2)), Ok(I64(-1)));
        for op in [
            BinaryOp::Div,
            BinaryOp::Rem,
            BinaryOp::FloorDiv,
            BinaryOp::Mod,
        ] {
            assert_eq!(bin(op, I64(1), I64(0)), Err(EvalError::DivisionByZero));
            assert_eq!(
                bin(op, Scalar::I32(1), Scalar::I32(0)),
                Err(EvalError::DivisionByZero)
            );
        }
    }

    #[test]
    fn shifts_take_the_amount_modulo_the_width() {
        use Scalar::I32;
        assert_eq!(bin(BinaryOp::Shl, I32(1), I32(33)), Ok(I32(2)));
        assert_eq!(bin(BinaryOp::ShrArith, I32(-8), I32(-31)), Ok(I32(-4)));
        assert_eq!(bin(BinaryOp::ShrLogical, I32(-1), I32(60)), Ok(I32(15)));
    }

    #[test]
    fn float_min_max_propagate_nan_and_order_zeros() {
        use Scalar::F64;
        let min = |a, b| bin(BinaryOp::Min, F64(a), F64(b)).unwrap();
        let max = |a, b| bin(BinaryOp::Max, F64(a), F64(b)).unwrap();
        assert!(min(1.0, f64::NAN).is_nan());
        assert!(max(f64::NAN, 1.0).is_nan());
        assert_eq!(min(0.0, -0.0), F64(-0.0));
        assert_eq!(min(-0.0, 0.0), F64(-0.0));
        assert_eq!(max(-0.0, 0.0), F64(0.0));
        assert_eq!(max(0.0, -0.0), F64(0.0));
        assert_eq!(min(2.0, 3.0), F64(2.0));
        assert_eq!(max(2.0, 3.0), F64(3.0));
    }

    #[test]
    fn float_floor_division_follows_python() {
        use Scalar::F64;
        let fd = |a, b| bin(BinaryOp::FloorDiv, F64(a), F64(b)).unwrap();
        let md = |a, b| bin(BinaryOp::Mod, F64(a), F64(b)).unwrap();
        // Values checked against CPython 3.11.
        assert_eq!(fd(1.0, 0.1), F64(9.0));
        assert_eq!(md(1.0, 0.1), F64(0.09999999999999995));
        assert_eq!(fd(-7.5, 2.0), F64(-4.0));
        assert_eq!(md(-7.5, 2.0), F64(0.5));
        assert_eq!(md(7.5, -2.0), F64(-0.5));
        assert_eq!(md(-0.0, 2.0), F64(0.0));
        assert_eq!(md(0.0, -2.0), F64(-0.0));
        assert_eq!(fd(-0.0, 2.0), F64(-0.0));
        assert_eq!(fd(1.0, 0.0), F64(f64::INFINITY));
        assert!(md(1.0, 0.0).is_nan());
    }

    #[test]
    fn casts_saturate_and_round() {
        assert_eq!(cast(Scalar::F64(f64::NAN), DType::I32), Scalar::I32(0));
        assert_eq!(cast(Scalar::F64(1e300), DType::I64), Scalar::I64(i64::MAX));
        assert_eq!(cast(Scalar::F32(-3.9), DType::I32), Scalar::I32(-3));
        assert_eq!(
            cast(Scalar::I64(i64::MAX), DType::F64),
            Scalar::F64(9223372036854775807.0)
        );
        assert_eq!(
            cast(Scalar::I64(16777217), DType::F32),
            Scalar::F32(16777216.0)
        );
        assert_eq!(cast(Scalar::F64(-0.0), DType::Bool), Scalar::Bool(false));
        assert_eq!(cast(Scalar::F64(f64::NAN), DType::Bool), Scalar::Bool(true));
        assert_eq!(cast(Scalar::Bool(true), DType::F32), Scalar::F32(1.0));
    }

    #[test]
    fn round_is_half_to_even() {
        let round = |v| unary(UnaryOp::Round, Scalar::F64(v)).unwrap();
        assert_eq!(round(2.5), Scalar::F64(2.0));
        assert_eq!(round(3.5), Scalar::F64(4.0));
        assert_eq!(round(-0.5), Scalar::F64(-0.0));
    }

    #[test]
    fn wrong_dtypes_are_errors_not_panics() {
        assert!(unary(UnaryOp::Sin, Scalar::I32(1)).is_err());
        assert!(binary(BinaryOp::Add, Scalar::I32(1), Scalar::F32(1.0)).is_err());
        assert!(binary(BinaryOp::Shl, Scalar::F64(1.0), Scalar::F64(1.0)).is_err());
    }
}

#[cfg(test)]
mod isin_tests {
    use super::*;

    #[test]
    fn sets_are_canonical_and_match_as_eq_does() {
        let set = isin_set(
            [3.0, f64::NAN, -0.0, 1.0, 3.0, f64::NEG_INFINITY].map(Scalar::F64),
            DType::F64,
        );
        assert_eq!(set, [f64::NEG_INFINITY, 0.0, 1.0, 3.0].map(Scalar::F64));
        assert!(set.iter().all(|v| v.bits() != (-0.0f64).to_bits()));
        for (x, want) in [
            (0.0, true),
            (-0.0, true),
            (3.0, true),
            (2.0, false),
            (f64::NAN, false),
        ] {
            assert_eq!(isin(Scalar::F64(x), &set), want, "{x}");
        }
        // Values of another dtype are cast as `cast` does.
        let ints = isin_set(
            [Scalar::F64(2.7), Scalar::F64(-1.0), Scalar::F64(2.0)],
            DType::I32,
        );
        assert_eq!(ints, [Scalar::I32(-1), Scalar::I32(2)]);
        assert!(isin(Scalar::I32(2), &ints) && !isin(Scalar::I32(3), &ints));
        assert!(!isin(Scalar::I64(0), &[]));
    }
}
