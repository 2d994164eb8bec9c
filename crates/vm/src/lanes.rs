//! The loops the VM runs: each kernel operation on one dtype, over `n`
//! lanes of 8-byte cells, compiled twice by rustc (baseline x86-64 and
//! AVX2, picked once per process), so a block of rows runs as SIMD code
//! without a code generator.
//!
//! A lane holds a value's bits zero-extended to 64 (`Scalar::bits`): an
//! `f64` or `i64` as is, an `f32` or `i32` in the low 32 bits, a `bool` as
//! 0 or 1. Every function here reads and writes lanes in that form and
//! computes what `kiln_ir::kernel::Expr` says the machine computes, under
//! the preconditions lowering guarantees; where a precondition could fail
//! in lanes a scalar kernel would never reach (a divisor a failed check
//! already rejected), the result is some value, never a panic.

use kiln_ir::{BinaryOp, CmpOp, DType, UnaryOp};

/// `dst[i] = f(a[i])` for `i < n`.
pub(crate) type Un = unsafe fn(*mut u64, *const u64, usize);
/// `dst[i] = f(a[i], b[i])` for `i < n`.
pub(crate) type Bin = unsafe fn(*mut u64, *const u64, *const u64, usize);

/// Whether this CPU runs the AVX2 versions (checked once).
fn avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *HAS.get_or_init(|| std::arch::is_x86_feature_detected!("avx2"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// A lane loop of one argument, as a [`Un`] for this CPU.
macro_rules! un {
    (|$a:ident| $e:expr) => {{
        #[inline(always)]
        fn body(d: &mut [u64], x: &[u64]) {
            for (d, &$a) in d.iter_mut().zip(x) {
                *d = $e;
            }
        }
        unsafe fn base(d: *mut u64, x: *const u64, n: usize) {
            // SAFETY: `Un`'s contract: `n` lanes at each pointer, `d` apart
            // from `x`.
            unsafe {
                body(
                    std::slice::from_raw_parts_mut(d, n),
                    std::slice::from_raw_parts(x, n),
                )
            }
        }
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2")]
        unsafe fn wide(d: *mut u64, x: *const u64, n: usize) {
            // SAFETY: as `base`; only called where the CPU has AVX2.
            unsafe {
                body(
                    std::slice::from_raw_parts_mut(d, n),
                    std::slice::from_raw_parts(x, n),
                )
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let wide = base;
        if avx2() {
            wide as Un
        } else {
            base as Un
        }
    }};
}

/// A lane loop of two arguments for this CPU, in its three forms.
macro_rules! bin {
    (|$a:ident, $b:ident| $e:expr) => {{
        #[inline(always)]
        fn f($a: u64, $b: u64) -> u64 {
            $e
        }
        #[inline(always)]
        fn vv(d: &mut [u64], x: &[u64], y: &[u64]) {
            for ((d, &x), &y) in d.iter_mut().zip(x).zip(y) {
                *d = f(x, y);
            }
        }
        #[inline(always)]
        fn vk(d: &mut [u64], x: &[u64], k: u64) {
            for (d, &x) in d.iter_mut().zip(x) {
                *d = f(x, k);
            }
        }
        #[inline(always)]
        fn kv(d: &mut [u64], k: u64, y: &[u64]) {
            for (d, &y) in d.iter_mut().zip(y) {
                *d = f(k, y);
            }
        }
        // SAFETY (all six): `Bin`'s and `BinK`'s contracts: `n` lanes at
        // each pointer, `d` apart from the others; the wide ones only
        // where the CPU has AVX2.
        unsafe fn vv_base(d: *mut u64, x: *const u64, y: *const u64, n: usize) {
            unsafe { vv(slice_mut(d, n), slice(x, n), slice(y, n)) }
        }
        unsafe fn vk_base(d: *mut u64, x: *const u64, k: u64, n: usize) {
            unsafe { vk(slice_mut(d, n), slice(x, n), k) }
        }
        unsafe fn kv_base(d: *mut u64, y: *const u64, k: u64, n: usize) {
            unsafe { kv(slice_mut(d, n), k, slice(y, n)) }
        }
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2")]
        unsafe fn vv_wide(d: *mut u64, x: *const u64, y: *const u64, n: usize) {
            unsafe { vv(slice_mut(d, n), slice(x, n), slice(y, n)) }
        }
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2")]
        unsafe fn vk_wide(d: *mut u64, x: *const u64, k: u64, n: usize) {
            unsafe { vk(slice_mut(d, n), slice(x, n), k) }
        }
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2")]
        unsafe fn kv_wide(d: *mut u64, y: *const u64, k: u64, n: usize) {
            unsafe { kv(slice_mut(d, n), k, slice(y, n)) }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let (vv_wide, vk_wide, kv_wide) = (vv_base, vk_base, kv_base);
        if avx2() {
            Bins {
                vv: vv_wide as Bin,
                vk: vk_wide as BinK,
                kv: kv_wide as BinK,
            }
        } else {
            Bins {
                vv: vv_base as Bin,
                vk: vk_base as BinK,
                kv: kv_base as BinK,
            }
        }
    }};
}

/// `dst[i] = f(a[i], k)` (or `f(k, a[i])`) for `i < n`: a binary op with a
/// constant operand, which needs no lanes of its own.
pub(crate) type BinK = unsafe fn(*mut u64, *const u64, u64, usize);

/// A binary op's loops: both operands lanes, the second constant, the
/// first constant.
#[derive(Copy, Clone)]
pub(crate) struct Bins {
    pub(crate) vv: Bin,
    pub(crate) vk: BinK,
    pub(crate) kv: BinK,
}

/// # Safety
/// `n` elements at `p`, not aliased.
#[inline(always)]
unsafe fn slice_mut<'a>(p: *mut u64, n: usize) -> &'a mut [u64] {
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(p, n) }
}

/// # Safety
/// `n` elements at `p`, not written meanwhile.
#[inline(always)]
unsafe fn slice<'a>(p: *const u64, n: usize) -> &'a [u64] {
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(p, n) }
}

#[inline(always)]
pub(crate) fn f64_(x: u64) -> f64 {
    f64::from_bits(x)
}
#[inline(always)]
pub(crate) fn f32_(x: u64) -> f32 {
    f32::from_bits(x as u32)
}
#[inline(always)]
fn i32_(x: u64) -> i32 {
    x as u32 as i32
}
#[inline(always)]
fn i64_(x: u64) -> i64 {
    x as i64
}
#[inline(always)]
pub(crate) fn of_f64(v: f64) -> u64 {
    v.to_bits()
}
#[inline(always)]
pub(crate) fn of_f32(v: f32) -> u64 {
    u64::from(v.to_bits())
}
#[inline(always)]
fn of_i32(v: i32) -> u64 {
    u64::from(v as u32)
}
#[inline(always)]
fn of_i64(v: i64) -> u64 {
    v as u64
}
#[inline(always)]
fn of_bool(v: bool) -> u64 {
    u64::from(v)
}

/// IEEE 754-2019 `minimum`/`maximum` (NaN if either is, -0.0 < +0.0), as
/// the kernel's float `min`/`max` are.
macro_rules! minimum {
    ($a:expr, $b:expr, $bits:ident) => {{
        let (a, b) = ($a, $b);
        if a < b {
            a
        } else if b < a {
            b
        } else if a == b {
            // Equal: they differ at most in the sign of zero.
            <$bits>::from_bits(a.to_bits() | b.to_bits())
        } else {
            <$bits>::NAN
        }
    }};
}
macro_rules! maximum {
    ($a:expr, $b:expr, $bits:ident) => {{
        let (a, b) = ($a, $b);
        if a > b {
            a
        } else if b > a {
            b
        } else if a == b {
            <$bits>::from_bits(a.to_bits() & b.to_bits())
        } else {
            <$bits>::NAN
        }
    }};
}

/// The loop of a unary op the machine computes (not the `libm` functions:
/// [`crate::math`] calls those).
pub(crate) fn unary(op: UnaryOp, dtype: DType) -> Option<Un> {
    use UnaryOp::*;
    Some(match (op, dtype) {
        (Neg, DType::F64) => un!(|a| of_f64(-f64_(a))),
        (Neg, DType::F32) => un!(|a| of_f32(-f32_(a))),
        (Neg, DType::I64) => un!(|a| of_i64(i64_(a).wrapping_neg())),
        (Neg, DType::I32) => un!(|a| of_i32(i32_(a).wrapping_neg())),
        (Abs, DType::F64) => un!(|a| of_f64(f64_(a).abs())),
        (Abs, DType::F32) => un!(|a| of_f32(f32_(a).abs())),
        (Abs, DType::I64) => un!(|a| of_i64(i64_(a).wrapping_abs())),
        (Abs, DType::I32) => un!(|a| of_i32(i32_(a).wrapping_abs())),
        (BNot, DType::I64) => un!(|a| !a),
        (BNot, DType::I32) => un!(|a| of_i32(!i32_(a))),
        (Sqrt, DType::F64) => un!(|a| of_f64(f64_(a).sqrt())),
        (Sqrt, DType::F32) => un!(|a| of_f32(f32_(a).sqrt())),
        (Floor, DType::F64) => un!(|a| of_f64(f64_(a).floor())),
        (Floor, DType::F32) => un!(|a| of_f32(f32_(a).floor())),
        (Ceil, DType::F64) => un!(|a| of_f64(f64_(a).ceil())),
        (Ceil, DType::F32) => un!(|a| of_f32(f32_(a).ceil())),
        (Trunc, DType::F64) => un!(|a| of_f64(f64_(a).trunc())),
        (Trunc, DType::F32) => un!(|a| of_f32(f32_(a).trunc())),
        (Round, DType::F64) => un!(|a| of_f64(f64_(a).round_ties_even())),
        (Round, DType::F32) => un!(|a| of_f32(f32_(a).round_ties_even())),
        _ => return None,
    })
}

/// The loop of a binary op the machine computes (integer `div`/`rem` with
/// a divisor lowering made nonzero and not -1; shift amounts below the
/// width; bitwise `and`/`or`/`xor` on `bool` lanes too).
pub(crate) fn binary(op: BinaryOp, dtype: DType) -> Option<Bins> {
    use BinaryOp::*;
    Some(match (op, dtype) {
        (Add, DType::F64) => bin!(|a, b| of_f64(f64_(a) + f64_(b))),
        (Sub, DType::F64) => bin!(|a, b| of_f64(f64_(a) - f64_(b))),
        (Mul, DType::F64) => bin!(|a, b| of_f64(f64_(a) * f64_(b))),
        (Div, DType::F64) => bin!(|a, b| of_f64(f64_(a) / f64_(b))),
        (Min, DType::F64) => bin!(|a, b| of_f64(minimum!(f64_(a), f64_(b), f64))),
        (Max, DType::F64) => bin!(|a, b| of_f64(maximum!(f64_(a), f64_(b), f64))),
        (Copysign, DType::F64) => bin!(|a, b| of_f64(f64_(a).copysign(f64_(b)))),
        (Add, DType::F32) => bin!(|a, b| of_f32(f32_(a) + f32_(b))),
        (Sub, DType::F32) => bin!(|a, b| of_f32(f32_(a) - f32_(b))),
        (Mul, DType::F32) => bin!(|a, b| of_f32(f32_(a) * f32_(b))),
        (Div, DType::F32) => bin!(|a, b| of_f32(f32_(a) / f32_(b))),
        (Min, DType::F32) => bin!(|a, b| of_f32(minimum!(f32_(a), f32_(b), f32))),
        (Max, DType::F32) => bin!(|a, b| of_f32(maximum!(f32_(a), f32_(b), f32))),
        (Copysign, DType::F32) => bin!(|a, b| of_f32(f32_(a).copysign(f32_(b)))),
        (Add, DType::I64) => bin!(|a, b| a.wrapping_add(b)),
        (Sub, DType::I64) => bin!(|a, b| a.wrapping_sub(b)),
        (Mul, DType::I64) => bin!(|a, b| a.wrapping_mul(b)),
        (Div, DType::I64) => bin!(|a, b| of_i64(i64_(a).checked_div(i64_(b)).unwrap_or(0))),
        (Rem, DType::I64) => bin!(|a, b| of_i64(i64_(a).checked_rem(i64_(b)).unwrap_or(0))),
        (Min, DType::I64) => bin!(|a, b| of_i64(i64_(a).min(i64_(b)))),
        (Max, DType::I64) => bin!(|a, b| of_i64(i64_(a).max(i64_(b)))),
        (Shl, DType::I64) => bin!(|a, b| a.wrapping_shl(b as u32)),
        (ShrArith, DType::I64) => bin!(|a, b| of_i64(i64_(a).wrapping_shr(b as u32))),
        (ShrLogical, DType::I64) => bin!(|a, b| a.wrapping_shr(b as u32)),
        (Add, DType::I32) => bin!(|a, b| of_i32(i32_(a).wrapping_add(i32_(b)))),
        (Sub, DType::I32) => bin!(|a, b| of_i32(i32_(a).wrapping_sub(i32_(b)))),
        (Mul, DType::I32) => bin!(|a, b| of_i32(i32_(a).wrapping_mul(i32_(b)))),
        (Div, DType::I32) => bin!(|a, b| of_i32(i32_(a).checked_div(i32_(b)).unwrap_or(0))),
        (Rem, DType::I32) => bin!(|a, b| of_i32(i32_(a).checked_rem(i32_(b)).unwrap_or(0))),
        (Min, DType::I32) => bin!(|a, b| of_i32(i32_(a).min(i32_(b)))),
        (Max, DType::I32) => bin!(|a, b| of_i32(i32_(a).max(i32_(b)))),
        (Shl, DType::I32) => bin!(|a, b| of_i32(i32_(a).wrapping_shl(b as u32))),
        (ShrArith, DType::I32) => bin!(|a, b| of_i32(i32_(a).wrapping_shr(b as u32))),
        (ShrLogical, DType::I32) => bin!(|a, b| u64::from((a as u32).wrapping_shr(b as u32))),
        // Zero-extended lanes stay zero-extended under bitwise ops.
        (And | BAnd, DType::Bool | DType::I32 | DType::I64) => bin!(|a, b| a & b),
        (Or | BOr, DType::Bool | DType::I32 | DType::I64) => bin!(|a, b| a | b),
        (Xor | BXor, DType::Bool | DType::I32 | DType::I64) => bin!(|a, b| a ^ b),
        _ => return None,
    })
}

/// A comparison of two `operand` lanes, giving `bool` lanes: integers
/// signed, floats ordered except `ne`, bools by value.
pub(crate) fn compare(op: CmpOp, operand: DType) -> Bins {
    macro_rules! cmp {
        ($read:ident) => {
            match op {
                CmpOp::Eq => bin!(|a, b| of_bool($read(a) == $read(b))),
                CmpOp::Ne => bin!(|a, b| of_bool($read(a) != $read(b))),
                CmpOp::Lt => bin!(|a, b| of_bool($read(a) < $read(b))),
                CmpOp::Le => bin!(|a, b| of_bool($read(a) <= $read(b))),
                CmpOp::Gt => bin!(|a, b| of_bool($read(a) > $read(b))),
                CmpOp::Ge => bin!(|a, b| of_bool($read(a) >= $read(b))),
            }
        };
    }
    match operand {
        DType::F64 => cmp!(f64_),
        DType::F32 => cmp!(f32_),
        // A bool lane is 0 or 1: as an i64 it orders as false < true.
        DType::I64 | DType::Bool => cmp!(i64_),
        DType::I32 => cmp!(i32_),
    }
}

/// A conversion as `Expr::Cast` defines it (Rust's `as`; from a 0/1
/// `bool`); `None` for a conversion to `bool`, which lowering never emits.
pub(crate) fn cast(from: DType, to: DType) -> Option<Un> {
    use DType::*;
    Some(match (from, to) {
        (_, Bool) if from != Bool => return None,
        _ if from == to => un!(|a| a),
        (Bool, I32 | I64) => un!(|a| a),
        (Bool, F32) => un!(|a| of_f32(a as f32)),
        (Bool, F64) => un!(|a| of_f64(a as f64)),
        (I32, I64) => un!(|a| of_i64(i64::from(i32_(a)))),
        (I32, F32) => un!(|a| of_f32(i32_(a) as f32)),
        (I32, F64) => un!(|a| of_f64(f64::from(i32_(a)))),
        (I64, I32) => un!(|a| of_i32(i64_(a) as i32)),
        (I64, F32) => un!(|a| of_f32(i64_(a) as f32)),
        (I64, F64) => un!(|a| of_f64(i64_(a) as f64)),
        (F32, I32) => un!(|a| of_i32(f32_(a) as i32)),
        (F32, I64) => un!(|a| of_i64(f32_(a) as i64)),
        (F32, F64) => un!(|a| of_f64(f64::from(f32_(a)))),
        (F64, I32) => un!(|a| of_i32(f64_(a) as i32)),
        (F64, I64) => un!(|a| of_i64(f64_(a) as i64)),
        (F64, F32) => un!(|a| of_f32(f64_(a) as f32)),
        _ => return None,
    })
}

/// `dst[i] = if c[i] != 0 { a[i] } else { b[i] }` for `i < n`, where
/// `c[i]` is a `bool` lane (0 or 1).
///
/// # Safety
/// `n` lanes at each pointer; `d` apart from the others.
pub(crate) unsafe fn select(d: *mut u64, c: *const u64, a: *const u64, b: *const u64, n: usize) {
    #[inline(always)]
    fn body(d: &mut [u64], c: &[u64], a: &[u64], b: &[u64]) {
        for (((d, &c), &a), &b) in d.iter_mut().zip(c).zip(a).zip(b) {
            // A mask of the condition, so the loop is branch-free (written
            // as an `if`, LLVM branches on each lane).
            let keep_a = c.wrapping_neg();
            *d = (a & keep_a) | (b & !keep_a);
        }
    }
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn wide(d: &mut [u64], c: &[u64], a: &[u64], b: &[u64]) {
        body(d, c, a, b)
    }
    // SAFETY: the caller's contract.
    let (d, c, a, b) = unsafe {
        (
            std::slice::from_raw_parts_mut(d, n),
            std::slice::from_raw_parts(c, n),
            std::slice::from_raw_parts(a, n),
            std::slice::from_raw_parts(b, n),
        )
    };
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: the CPU has AVX2.
        return unsafe { wide(d, c, a, b) };
    }
    body(d, c, a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_bin(f: Bins, a: &[u64], b: &[u64]) -> Vec<u64> {
        let mut d = vec![0; a.len()];
        // SAFETY: three buffers of the same length, `d` apart.
        unsafe { (f.vv)(d.as_mut_ptr(), a.as_ptr(), b.as_ptr(), a.len()) };
        // The constant forms agree lane by lane.
        for i in 0..a.len() {
            let (mut vk, mut kv) = (0, 0);
            // SAFETY: one lane each.
            unsafe {
                (f.vk)(&mut vk, &a[i], b[i], 1);
                (f.kv)(&mut kv, &b[i], a[i], 1);
            }
            assert_eq!((vk, kv), (d[i], d[i]));
        }
        d
    }

    #[test]
    fn float_min_max_are_ieee_minimum_maximum() {
        let min = binary(BinaryOp::Min, DType::F64).unwrap();
        let max = binary(BinaryOp::Max, DType::F64).unwrap();
        let a = [0.0f64, -0.0, 1.0, f64::NAN, 2.0].map(f64::to_bits);
        let b = [-0.0f64, 0.0, f64::NAN, 1.0, -3.0].map(f64::to_bits);
        let lo: Vec<f64> = run_bin(min, &a, &b)
            .into_iter()
            .map(f64::from_bits)
            .collect();
        let hi: Vec<f64> = run_bin(max, &a, &b)
            .into_iter()
            .map(f64::from_bits)
            .collect();
        assert!(lo[0] == 0.0 && lo[0].is_sign_negative());
        assert!(lo[1] == 0.0 && lo[1].is_sign_negative());
        assert!(lo[2].is_nan() && lo[3].is_nan());
        assert_eq!(lo[4], -3.0);
        assert!(hi[0] == 0.0 && hi[0].is_sign_positive());
        assert!(hi[1] == 0.0 && hi[1].is_sign_positive());
        assert!(hi[2].is_nan() && hi[3].is_nan());
        assert_eq!(hi[4], 2.0);
    }

    #[test]
    fn narrow_lanes_stay_zero_extended() {
        let not = unary(UnaryOp::BNot, DType::I32).unwrap();
        let mut d = [0u64; 2];
        let a = [0u64, of_i32(-1)];
        // SAFETY: two lanes each.
        unsafe { not(d.as_mut_ptr(), a.as_ptr(), 2) };
        assert_eq!(d, [0xffff_ffff, 0]);
        let shr = binary(BinaryOp::ShrArith, DType::I32).unwrap();
        assert_eq!(run_bin(shr, &[of_i32(-8)], &[1]), [of_i32(-4)]);
        let div = binary(BinaryOp::Div, DType::I64).unwrap();
        assert_eq!(run_bin(div, &[7, 7], &[of_i64(-2), 0]), [of_i64(-3), 0]);
        let to_i32 = cast(DType::F64, DType::I32).unwrap();
        let a = [of_f64(f64::NAN), of_f64(1e300), of_f64(-2.7)];
        let mut d = [0u64; 3];
        // SAFETY: three lanes each.
        unsafe { to_i32(d.as_mut_ptr(), a.as_ptr(), 3) };
        assert_eq!(d, [0, of_i32(i32::MAX), of_i32(-2)]);
    }
}
