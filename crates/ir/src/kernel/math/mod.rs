//! Inline math: transcendentals expanded into kernel expressions that
//! compute, operation for operation, what the `libm` crate computes (the
//! interpreter's oracle), so every lane of every tier returns its bits.
//!
//! Each function is a port of the `libm` crate's algorithm with its
//! constants and its order of operations, no FMA contraction, and its
//! branches turned into `select`s: every path is computed and the one the
//! scalar code would take is kept. A row loop of such code has no calls and
//! no branches, so LLVM vectorizes it; objects and wasm modules carry it
//! instead of depending on the platform's libm. The bit-exactness tests
//! (`tests/math.rs`) compare every tier with the `libm` crate at special
//! values, at the boundaries of every branch and at random inputs.

// The constants are the `libm` crate's, digit for digit, so a reader can
// check them against its source; they parse to the same `f64`s.
#![allow(clippy::excessive_precision, clippy::approx_constant)]

use super::lower::Lowerer;
use super::{Expr, MathCall, Reg, Stmt};
use crate::op::{BinaryOp, CmpOp, UnaryOp};
use crate::scalar::Scalar;
use crate::types::DType;

/// An inline expansion: the statements computing a function of `x`, and
/// the register of its result.
pub(super) type Expansion = fn(&mut Lowerer<'_>, &mut Vec<Stmt>, Reg) -> Reg;

/// An inline expansion of a binary function: the statements computing
/// `f(a, b)`, and the register of its result.
pub(super) type Expansion2 = fn(&mut Lowerer<'_>, &mut Vec<Stmt>, Reg, Reg) -> Reg;

mod binary;
mod cbrt;
mod exp2;
pub(super) use binary::inline as inline_binary;
pub use exp2::{EXP2F_TABLE, EXP2_TABLE};

/// The inline port of `op` on `dtype`, if kiln has one (the rest stay
/// calls).
pub(super) fn inline(op: UnaryOp, dtype: DType) -> Option<Expansion> {
    Some(match (op, dtype) {
        (UnaryOp::Exp, DType::F64) => exp_f64,
        (UnaryOp::Log, DType::F64) => log_f64,
        (UnaryOp::Exp, DType::F32) => exp_f32,
        (UnaryOp::Log, DType::F32) => log_f32,
        (UnaryOp::Sin, DType::F64) => sin_f64,
        (UnaryOp::Cos, DType::F64) => cos_f64,
        (UnaryOp::Sin, DType::F32) => sin_f32,
        (UnaryOp::Cos, DType::F32) => cos_f32,
        (UnaryOp::Expm1, DType::F64) => expm1_f64,
        (UnaryOp::Tanh, DType::F64) => tanh_f64,
        (UnaryOp::Expm1, DType::F32) => expm1_f32,
        (UnaryOp::Tanh, DType::F32) => tanh_f32,
        (UnaryOp::Erf, DType::F64 | DType::F32) => erf,
        (UnaryOp::Erfc, DType::F64 | DType::F32) => erfc,
        (UnaryOp::Sinh, DType::F64 | DType::F32) => sinh,
        (UnaryOp::Cosh, DType::F64 | DType::F32) => cosh,
        (UnaryOp::Log1p, DType::F64 | DType::F32) => log1p,
        (UnaryOp::Log2, DType::F64 | DType::F32) => log2,
        (UnaryOp::Log10, DType::F64 | DType::F32) => log10,
        (UnaryOp::Tan, DType::F64 | DType::F32) => tan,
        (UnaryOp::Atan, DType::F64 | DType::F32) => atan,
        (UnaryOp::Asin, DType::F64 | DType::F32) => asin,
        (UnaryOp::Acos, DType::F64 | DType::F32) => acos,
        (UnaryOp::Asinh, DType::F64 | DType::F32) => asinh,
        (UnaryOp::Acosh, DType::F64 | DType::F32) => acosh,
        (UnaryOp::Atanh, DType::F64 | DType::F32) => atanh,
        (UnaryOp::Cbrt, DType::F32) => cbrt_f32,
        (UnaryOp::Cbrt, DType::F64) => |lw, out, x| cbrt::cbrt_f64(&mut Emit { lw, out }, x),
        (UnaryOp::Exp2, DType::F64) => |lw, out, x| exp2::exp2_f64(&mut Emit { lw, out }, x),
        (UnaryOp::Exp2, DType::F32) => |lw, out, x| exp2::exp2_f32(&mut Emit { lw, out }, x),
        _ => return None,
    })
}

/// Emits kernel expressions into one statement list.
struct Emit<'l, 'g> {
    lw: &'l mut Lowerer<'g>,
    out: &'l mut Vec<Stmt>,
}

impl Emit<'_, '_> {
    fn let_(&mut self, dtype: DType, expr: Expr) -> Reg {
        self.lw.emit(self.out, dtype, expr, None)
    }

    fn ty(&self, r: Reg) -> DType {
        self.lw.kernel.reg_type(r)
    }

    fn f64(&mut self, v: f64) -> Reg {
        self.let_(DType::F64, Expr::Const(Scalar::F64(v)))
    }

    fn f32(&mut self, v: f32) -> Reg {
        self.let_(DType::F32, Expr::Const(Scalar::F32(v)))
    }

    /// A float constant of `dtype` (an `f32` constant is given exactly).
    fn float(&mut self, dtype: DType, v: f64) -> Reg {
        if dtype == DType::F32 {
            self.f32(v as f32)
        } else {
            self.f64(v)
        }
    }

    fn i32(&mut self, v: i32) -> Reg {
        self.let_(DType::I32, Expr::Const(Scalar::I32(v)))
    }

    fn i64(&mut self, v: i64) -> Reg {
        self.let_(DType::I64, Expr::Const(Scalar::I64(v)))
    }

    fn bin(&mut self, op: BinaryOp, a: Reg, b: Reg) -> Reg {
        let dtype = self.ty(a);
        self.let_(dtype, Expr::Binary(op, a, b))
    }

    fn add(&mut self, a: Reg, b: Reg) -> Reg {
        self.bin(BinaryOp::Add, a, b)
    }

    fn sub(&mut self, a: Reg, b: Reg) -> Reg {
        self.bin(BinaryOp::Sub, a, b)
    }

    fn mul(&mut self, a: Reg, b: Reg) -> Reg {
        self.bin(BinaryOp::Mul, a, b)
    }

    fn div(&mut self, a: Reg, b: Reg) -> Reg {
        self.bin(BinaryOp::Div, a, b)
    }

    fn neg(&mut self, a: Reg) -> Reg {
        let dtype = self.ty(a);
        self.let_(dtype, Expr::Unary(UnaryOp::Neg, a))
    }

    fn and(&mut self, a: Reg, b: Reg) -> Reg {
        self.bin(BinaryOp::And, a, b)
    }

    fn or(&mut self, a: Reg, b: Reg) -> Reg {
        self.bin(BinaryOp::Or, a, b)
    }

    fn not(&mut self, a: Reg) -> Reg {
        let t = self.let_(DType::Bool, Expr::Const(Scalar::Bool(true)));
        self.bin(BinaryOp::Xor, a, t)
    }

    /// `a op k` for an integer constant `k` of `a`'s dtype.
    fn cmp_k(&mut self, op: CmpOp, a: Reg, k: i64) -> Reg {
        let k = self.int_like(a, k);
        self.cmp(op, a, k)
    }

    /// `a & k` for an integer constant `k` of `a`'s dtype.
    fn band_k(&mut self, a: Reg, k: i64) -> Reg {
        let k = self.int_like(a, k);
        self.bin(BinaryOp::BAnd, a, k)
    }

    /// An integer constant of `like`'s dtype.
    pub(super) fn int_like(&mut self, like: Reg, k: i64) -> Reg {
        match self.ty(like) {
            DType::I32 => self.i32(k as i32),
            _ => self.i64(k),
        }
    }

    /// `a >> k` (arithmetic) for a constant `k` below the width.
    pub(super) fn shr_k(&mut self, a: Reg, k: i64) -> Reg {
        let k = self.int_like(a, k);
        self.bin(BinaryOp::ShrArith, a, k)
    }

    /// `a << k` for a constant `k` below the width.
    pub(super) fn shl_k(&mut self, a: Reg, k: i64) -> Reg {
        let k = self.int_like(a, k);
        self.bin(BinaryOp::Shl, a, k)
    }

    /// `a | k` for an integer constant `k` of `a`'s dtype.
    pub(super) fn bor_k(&mut self, a: Reg, k: i64) -> Reg {
        let k = self.int_like(a, k);
        self.bin(BinaryOp::BOr, a, k)
    }

    pub(super) fn add_k(&mut self, a: Reg, k: i64) -> Reg {
        let k = self.int_like(a, k);
        self.add(a, k)
    }

    pub(super) fn abs(&mut self, a: Reg) -> Reg {
        let dtype = self.ty(a);
        self.let_(dtype, Expr::Unary(UnaryOp::Abs, a))
    }

    /// A float comparison with a constant.
    pub(super) fn cmp_f(&mut self, op: CmpOp, a: Reg, k: f64) -> Reg {
        let dtype = self.ty(a);
        let k = self.float(dtype, k);
        self.cmp(op, a, k)
    }

    /// `select(c, k1, k2)` of two float constants of `dtype`.
    pub(super) fn select_f(&mut self, c: Reg, dtype: DType, k1: f64, k2: f64) -> Reg {
        let (a, b) = (self.float(dtype, k1), self.float(dtype, k2));
        self.select(c, a, b)
    }

    pub(super) fn any(&mut self, conditions: &[Reg]) -> Reg {
        let (first, rest) = conditions.split_first().expect("a condition");
        rest.iter().fold(*first, |acc, &c| self.or(acc, c))
    }

    /// `op(arg)` by the `libm` function where `rare`, else `value`.
    fn fallback(&mut self, op: UnaryOp, arg: Reg, rare: Reg, value: Reg) -> Reg {
        self.call_where(MathCall::Unary(op, arg), rare, value)
    }

    /// `call` by the `libm` function where `rare`, else `value`.
    fn call_where(&mut self, call: MathCall, rare: Reg, value: Reg) -> Reg {
        let dtype = self.ty(value);
        self.let_(dtype, Expr::Fallback { call, rare, value })
    }

    fn cmp(&mut self, op: CmpOp, a: Reg, b: Reg) -> Reg {
        self.let_(DType::Bool, Expr::Compare(op, a, b))
    }

    fn select(&mut self, c: Reg, a: Reg, b: Reg) -> Reg {
        let dtype = self.ty(a);
        self.let_(dtype, Expr::Select(c, a, b))
    }

    /// Rust's `as` between numbers.
    fn cast(&mut self, to: DType, a: Reg) -> Reg {
        self.let_(to, Expr::Cast(to, a))
    }

    fn bitcast(&mut self, to: DType, a: Reg) -> Reg {
        self.let_(to, Expr::Bitcast(to, a))
    }

    /// `v` with the bits `mask` clears cleared (an f64's low word, an f32's
    /// low bits): how the scalar code splits a value into hi and lo.
    fn cut_bits(&mut self, v: Reg, mask: i64) -> Reg {
        let dtype = self.ty(v);
        let int = if dtype == DType::F32 {
            DType::I32
        } else {
            DType::I64
        };
        let bits = self.bitcast(int, v);
        let cut = self.band_k(bits, mask);
        self.bitcast(dtype, cut)
    }

    /// `c[0] + x*(c[1] + x*(c[2] + ...))`, innermost first, as the scalar
    /// code writes its polynomials (in `x`'s dtype; `f32` coefficients are
    /// given exactly).
    fn horner(&mut self, x: Reg, coefficients: &[f64]) -> Reg {
        let dtype = self.ty(x);
        let (last, rest) = coefficients.split_last().expect("a polynomial");
        let mut acc = self.float(dtype, *last);
        for &c in rest.iter().rev() {
            let t = self.mul(x, acc);
            let c = self.float(dtype, c);
            acc = self.add(c, t);
        }
        acc
    }

    /// `scalbn(y, n)` / `scalbnf(y, n)` (the `libm` crate's generic one) in
    /// `y`'s dtype, for an `i32` `n` that needs at most one pre-scaling step,
    /// which holds wherever exp calls it (f64: `-1075 <= n <= 1024`; f32:
    /// `-150 <= n <= 128`).
    fn scalbn_once(&mut self, y: Reg, n: Reg) -> Reg {
        let dtype = self.ty(y);
        // The largest and smallest normal exponents, 2^max, 2^min * 2^digits
        // and min + digits, and where the exponent field starts.
        let (max_n, min_n, up, down, shift) = match dtype {
            DType::F32 => (
                127,
                -126,
                f64::from(f32::from_bits(0x7f00_0000)),
                f64::from(f32::from_bits(0x0080_0000) * f32::from_bits(0x4b80_0000)),
                23,
            ),
            _ => (
                1023,
                -1022,
                f64::from_bits(0x7fe0_0000_0000_0000),
                f64::from_bits(0x0010_0000_0000_0000) * f64::from_bits(0x4340_0000_0000_0000),
                52,
            ),
        };
        let digits = shift + 1;
        let (max, min) = (self.i32(max_n), self.i32(min_n));
        let big = self.cmp(CmpOp::Gt, n, max);
        let small = self.cmp(CmpOp::Lt, n, min);
        // n > max: y *= 2^max, n -= max.
        let up = self.float(dtype, up);
        let y_big = self.mul(y, up);
        let n_big = self.sub(n, max);
        // n < min: y *= 2^min * 2^digits, n += -min - digits.
        let down = self.float(dtype, down);
        let y_small = self.mul(y, down);
        let add = self.i32(-min_n - digits);
        let n_small = self.add(n, add);
        let y1 = self.select(small, y_small, y);
        let y1 = self.select(big, y_big, y1);
        let n1 = self.select(small, n_small, n);
        let n1 = self.select(big, n_big, n1);
        // from_bits(((bias + n) as uN) << shift), the bias being max.
        let e = self.add(n1, max);
        let (e, at) = if dtype == DType::F32 {
            (e, self.i32(shift))
        } else {
            (self.cast(DType::I64, e), self.i64(shift.into()))
        };
        let bits = self.bin(BinaryOp::Shl, e, at);
        let scale = self.bitcast(dtype, bits);
        self.mul(y1, scale)
    }

    /// `rint(x·2/pi)` for an `f64` `x`, to nearest through the `1.5·2^52`
    /// shift, as `rem_pio2` and `rem_pio2f` compute it.
    fn rint_by_pio2(&mut self, x: Reg) -> Reg {
        const TO_INT: f64 = 1.5 / f64::EPSILON;
        const INV_PIO2: f64 = 6.36619772367581382433e-01;
        let inv = self.f64(INV_PIO2);
        let scaled = self.mul(x, inv);
        let to_int = self.f64(TO_INT);
        let shifted = self.add(scaled, to_int);
        self.sub(shifted, to_int)
    }

    /// `k` (a float holding an integer, `|k| < 2^22`) as an `i32`: the low
    /// bits of `k + 1.5 * 2^52` (f64) or `k + 1.5 * 2^23` (f32), whose unit
    /// in the last place is 1. No float-to-int conversion, which would not
    /// vectorize on x86-64 (Rust's `as` saturates).
    fn integer_of(&mut self, kf: Reg) -> Reg {
        if self.ty(kf) == DType::F32 {
            let magic = self.f32(f32::from_bits(0x4b40_0000));
            let shifted = self.add(kf, magic);
            let bits = self.bitcast(DType::I32, shifted);
            let base = self.i32(0x4b40_0000);
            self.sub(bits, base)
        } else {
            let magic = self.f64(f64::from_bits(0x4338_0000_0000_0000));
            let shifted = self.add(kf, magic);
            let bits = self.bitcast(DType::I64, shifted);
            let base = self.i64(0x4338_0000_0000_0000);
            let k = self.sub(bits, base);
            self.cast(DType::I32, k)
        }
    }

    /// exp's core, given its reduction's `k` as a float: `hi = x - k*ln2hi`
    /// (exact), `lo = k*ln2lo`, `r = hi - lo`, `c = r - r²·P(r²)`, and
    /// `1 + (r*c/(2 - c) - lo + hi)`. With `k = 0` the first three are `x`,
    /// 0 and `x`, as the scalar code's middle branch has them.
    fn exp_core(&mut self, x: Reg, kf: Reg, [ln2hi, ln2lo]: [f64; 2], p: &[f64]) -> Reg {
        let dtype = self.ty(x);
        let ln2hi = self.float(dtype, ln2hi);
        let khi = self.mul(kf, ln2hi);
        let hi = self.sub(x, khi);
        let ln2lo = self.float(dtype, ln2lo);
        let lo = self.mul(kf, ln2lo);
        let r = self.sub(hi, lo);
        let rr = self.mul(r, r);
        let poly = self.horner(rr, p);
        let t = self.mul(rr, poly);
        let c = self.sub(r, t);
        let rc = self.mul(r, c);
        let two = self.float(dtype, 2.0);
        let den = self.sub(two, c);
        let q = self.div(rc, den);
        let q = self.sub(q, lo);
        let q = self.add(q, hi);
        let one = self.float(dtype, 1.0);
        self.add(one, q)
    }

    /// log's core over the argument reduced into [sqrt(2)/2, sqrt(2)] and
    /// `k` as a float: `f = x - 1`, `s = f/(2 + f)`, `z = s²`, `w = z²`,
    /// `r = z·odd(w) + w·even(w)`, and
    /// `s*(hfsq + r) + k*ln2lo - hfsq + f + k*ln2hi` with `hfsq = 0.5*f*f`.
    fn log_core(
        &mut self,
        reduced: Reg,
        dk: Reg,
        (even, odd): (&[f64], &[f64]),
        [ln2hi, ln2lo]: [f64; 2],
    ) -> Reg {
        let dtype = self.ty(reduced);
        let one = self.float(dtype, 1.0);
        let f = self.sub(reduced, one);
        let half = self.float(dtype, 0.5);
        let hf = self.mul(half, f);
        let hfsq = self.mul(hf, f);
        let two = self.float(dtype, 2.0);
        let den = self.add(two, f);
        let s = self.div(f, den);
        let z = self.mul(s, s);
        let w = self.mul(z, z);
        let p1 = self.horner(w, even);
        let t1 = self.mul(w, p1);
        let p2 = self.horner(w, odd);
        let t2 = self.mul(z, p2);
        let r = self.add(t2, t1);
        let sum = self.add(hfsq, r);
        let acc = self.mul(s, sum);
        let ln2lo = self.float(dtype, ln2lo);
        let klo = self.mul(dk, ln2lo);
        let acc = self.add(acc, klo);
        let acc = self.sub(acc, hfsq);
        let acc = self.add(acc, f);
        let ln2hi = self.float(dtype, ln2hi);
        let khi = self.mul(dk, ln2hi);
        self.add(acc, khi)
    }

    /// log's special cases over its `result`, the later ones first in the
    /// scalar code: exactly 1 is 0; +inf and positive NaNs are `x`;
    /// negatives `(x - x) / 0` (NaN); ±0 `-1 / (x*x)` (-inf).
    fn log_specials(
        &mut self,
        x: Reg,
        result: Reg,
        [one, special, negative, zero]: [Reg; 4],
    ) -> Reg {
        let dtype = self.ty(x);
        let z = self.float(dtype, 0.0);
        let result = self.select(one, z, result);
        let result = self.select(special, x, result);
        let d = self.sub(x, x);
        let nan = self.div(d, z);
        let result = self.select(negative, nan, result);
        let minus_one = self.float(dtype, -1.0);
        let xx = self.mul(x, x);
        let minus_inf = self.div(minus_one, xx);
        self.select(zero, minus_inf, result)
    }
}

/// The `libm` crate's `exp` (f64; FreeBSD's `e_exp.c`), branch-free.
pub(super) fn exp_f64(lw: &mut Lowerer<'_>, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    const HALF: f64 = 0.5;
    const LN2HI: f64 = 6.93147180369123816490e-01;
    const LN2LO: f64 = 1.90821492927058770002e-10;
    const INVLN2: f64 = 1.44269504088896338700e+00;
    const P1: f64 = 1.66666666666666019037e-01;
    const P2: f64 = -2.77777777770155933842e-03;
    const P3: f64 = 6.61375632143793436117e-05;
    const P4: f64 = -1.65339022054652515390e-06;
    const P5: f64 = 4.13813679705723846039e-08;
    let mut m = Emit { lw, out };
    // hx: the high word of |x|; sign: its sign bit.
    let bits = m.bitcast(DType::I64, x);
    let c32 = m.i64(32);
    let high = m.bin(BinaryOp::ShrLogical, bits, c32);
    let c31 = m.i64(31);
    let sign = m.bin(BinaryOp::ShrLogical, high, c31);
    let mask = m.i64(0x7fff_ffff);
    let hx = m.bin(BinaryOp::BAnd, high, mask);
    let negative = {
        let one = m.i64(1);
        m.cmp(CmpOp::Eq, sign, one)
    };
    // Argument reduction: x = k*ln2 + r, |r| <= 0.5*ln2; k = 0 when
    // |x| <= 0.5*ln2. The scalar code's `(INVLN2*x ± 0.5) as i32` is
    // `trunc` wherever the result is used (|k| <= 1076; other lanes are
    // NaN, infinite or overflow, and selected away below), and `k as f64`
    // is that float itself: no float-to-int conversion, which would not
    // vectorize on x86-64 (Rust's `as` saturates).
    let kf = {
        let invln2 = m.f64(INVLN2);
        let scaled = m.mul(invln2, x);
        let (plus, minus) = (m.f64(HALF), m.f64(-HALF));
        let half = m.select(negative, minus, plus);
        let t = m.add(scaled, half);
        let k_far = m.let_(DType::F64, Expr::Unary(UnaryOp::Trunc, t));
        // 1 - sign - sign, exact in floats.
        let s = m.cast(DType::F64, sign);
        let one = m.f64(1.0);
        let k_near = m.sub(one, s);
        let k_near = m.sub(k_near, s);
        let far = {
            let at = m.i64(0x3ff0_a2b2);
            m.cmp(CmpOp::Ge, hx, at)
        };
        let k = m.select(far, k_far, k_near);
        let reduce = {
            let at = m.i64(0x3fd6_2e42);
            m.cmp(CmpOp::Gt, hx, at)
        };
        let zero = m.f64(0.0);
        m.select(reduce, k, zero)
    };
    let k = m.integer_of(kf);
    let y = m.exp_core(x, kf, [LN2HI, LN2LO], &[P1, P2, P3, P4, P5]);
    let mut result = m.scalbn_once(y, k);
    // |x| <= 2^-28: 1 + x.
    let one = m.f64(1.0);
    let tiny = {
        let at = m.i64(0x3e30_0000);
        m.cmp(CmpOp::Le, hx, at)
    };
    let near_one = m.add(one, x);
    result = m.select(tiny, near_one, result);
    // x < -745.13...: 0; x > 709.78...: x * 2^1023 (inf); NaN: x.
    let under = {
        let at = m.f64(-745.13321910194110842);
        m.cmp(CmpOp::Lt, x, at)
    };
    let zero = m.f64(0.0);
    result = m.select(under, zero, result);
    let over = {
        let at = m.f64(709.782712893383973096);
        m.cmp(CmpOp::Gt, x, at)
    };
    let up = m.f64(f64::from_bits(0x7fe0_0000_0000_0000));
    let inf = m.mul(x, up);
    result = m.select(over, inf, result);
    let nan = m.cmp(CmpOp::Ne, x, x);
    m.select(nan, x, result)
}

/// What `expm1` (f64) and `expm1f` differ in: constants and thresholds.
struct Expm1 {
    ln2: [f64; 2],
    inv_ln2: f64,
    /// `1` and the polynomial in `hxs`.
    q: &'static [f64],
    /// High word (f64) or bits (f32) of |x|: the huge-argument filter, the
    /// reduction's start, where k = ±1 ends, and the tiny arguments.
    huge: i64,
    reduce: i64,
    near: i64,
    tiny: i64,
    /// Above it, `x·2^top` (overflow): a float (f64) or `|x|`'s bits (f32).
    over: Over,
    /// The exponent bias and field shift, the largest k, and where the
    /// middle branch switches its order (k < 20 or k < 23).
    bias: i32,
    shift: i64,
    top_k: i64,
    switch: i64,
}

enum Over {
    Value(f64),
    Bits(i64),
}

const EXPM1_F64: Expm1 = Expm1 {
    ln2: [6.93147180369123816490e-01, 1.90821492927058770002e-10],
    inv_ln2: 1.44269504088896338700e+00,
    q: &[
        1.0,
        -3.33333333333331316428e-02,
        1.58730158725481460165e-03,
        -7.93650757867487942473e-05,
        4.00821782732936239552e-06,
        -2.01099218183624371326e-07,
    ],
    huge: 0x4043_687a,
    reduce: 0x3fd6_2e42,
    near: 0x3ff0_a2b2,
    tiny: 0x3c90_0000,
    over: Over::Value(7.09782712893383973096e+02),
    bias: 0x3ff,
    shift: 52,
    top_k: 1024,
    switch: 20,
};

const EXPM1_F32: Expm1 = Expm1 {
    ln2: [6.9313812256e-01_f32 as f64, 9.0580006145e-06_f32 as f64],
    inv_ln2: 1.4426950216e+00_f32 as f64,
    q: &[1.0, -3.3333212137e-2_f32 as f64, 1.5807170421e-3_f32 as f64],
    huge: 0x4195_b844,
    reduce: 0x3eb1_7218,
    near: 0x3f85_1592,
    tiny: 0x3300_0000,
    over: Over::Bits(0x42b1_7217),
    bias: 0x7f,
    shift: 23,
    top_k: 128,
    switch: 23,
};

/// The `libm` crate's `expm1` (f64; FreeBSD's `s_expm1.c`), branch-free.
pub(super) fn expm1_f64(lw: &mut Lowerer<'_>, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    let mut m = Emit { lw, out };
    expm1_core(&mut m, x)
}

/// The `libm` crate's `expm1f` (FreeBSD's `s_expm1f.c`), branch-free.
pub(super) fn expm1_f32(lw: &mut Lowerer<'_>, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    let mut m = Emit { lw, out };
    expm1_core(&mut m, x)
}

/// |x|'s high word (f64) or bits (f32), and x's sign.
fn magnitude_word(m: &mut Emit<'_, '_>, x: Reg) -> (Reg, Reg) {
    if m.ty(x) == DType::F32 {
        let bits = m.bitcast(DType::I32, x);
        let negative = m.cmp_k(CmpOp::Lt, bits, 0);
        (m.band_k(bits, 0x7fff_ffff), negative)
    } else {
        high_word(m, x)
    }
}

fn expm1_core(m: &mut Emit<'_, '_>, x: Reg) -> Reg {
    let dtype = m.ty(x);
    let c = if dtype == DType::F32 {
        &EXPM1_F32
    } else {
        &EXPM1_F64
    };
    let (hx, negative) = magnitude_word(m, x);
    // Argument reduction, as exp's: k = ±1 for 0.5·ln2 < |x| < 1.5·ln2
    // (where `x ∓ ln2_hi` and `±ln2_lo` are `x - k·ln2_hi` and `k·ln2_lo`,
    // bit for bit), `(INV_LN2·x ± 0.5) as i32` (a `trunc`, as in `exp_f64`)
    // above, and 0 below with c = 0.
    let reduce = m.cmp_k(CmpOp::Gt, hx, c.reduce);
    let kf = {
        let inv_ln2 = m.float(dtype, c.inv_ln2);
        let scaled = m.mul(inv_ln2, x);
        let (plus, minus) = (m.float(dtype, 0.5), m.float(dtype, -0.5));
        let half = m.select(negative, minus, plus);
        let t = m.add(scaled, half);
        let k_far = m.let_(dtype, Expr::Unary(UnaryOp::Trunc, t));
        let (one, minus_one) = (m.float(dtype, 1.0), m.float(dtype, -1.0));
        let k_near = m.select(negative, minus_one, one);
        let near = m.cmp_k(CmpOp::Lt, hx, c.near);
        let k = m.select(near, k_near, k_far);
        let zero = m.float(dtype, 0.0);
        m.select(reduce, k, zero)
    };
    let (xr, cr) = {
        let ln2hi = m.float(dtype, c.ln2[0]);
        let khi = m.mul(kf, ln2hi);
        let hi = m.sub(x, khi);
        let ln2lo = m.float(dtype, c.ln2[1]);
        let lo = m.mul(kf, ln2lo);
        let reduced = m.sub(hi, lo);
        let d = m.sub(hi, reduced);
        let cr = m.sub(d, lo);
        let zero = m.float(dtype, 0.0);
        (m.select(reduce, reduced, x), m.select(reduce, cr, zero))
    };
    let k = m.integer_of(kf);
    // x is now in the primary range.
    let half = m.float(dtype, 0.5);
    let hfx = m.mul(half, xr);
    let hxs = m.mul(xr, hfx);
    let r1 = m.horner(hxs, c.q);
    let t = {
        let three = m.float(dtype, 3.0);
        let r1h = m.mul(r1, hfx);
        m.sub(three, r1h)
    };
    let e = {
        let num = m.sub(r1, t);
        let six = m.float(dtype, 6.0);
        let xt = m.mul(xr, t);
        let den = m.sub(six, xt);
        let q = m.div(num, den);
        m.mul(hxs, q)
    };
    // k == 0: x - (x*e - hxs).
    let k0 = {
        let xe = m.mul(xr, e);
        let d = m.sub(xe, hxs);
        m.sub(xr, d)
    };
    let e = {
        let ec = m.sub(e, cr);
        let xec = m.mul(xr, ec);
        let e = m.sub(xec, cr);
        m.sub(e, hxs)
    };
    let xe = m.sub(xr, e);
    let one = m.float(dtype, 1.0);
    // k == -1: 0.5*(x - e) - 0.5.
    let k_minus_1 = {
        let h = m.mul(half, xe);
        m.sub(h, half)
    };
    // k == 1: -2*(e - (x + 0.5)) below x = -0.25, else 1 + 2*(x - e).
    let k_1 = {
        let two = m.float(dtype, 2.0);
        let minus_two = m.float(dtype, -2.0);
        let xh = m.add(xr, half);
        let exh = m.sub(e, xh);
        let low = m.mul(minus_two, exh);
        let txe = m.mul(two, xe);
        let high = m.add(one, txe);
        let quarter = m.float(dtype, -0.25);
        let below = m.cmp(CmpOp::Lt, xr, quarter);
        m.select(below, low, high)
    };
    // 2^k and 2^-k from their bits (each used only where k makes them
    // normal numbers).
    let power = |m: &mut Emit<'_, '_>, e: Reg| {
        if dtype == DType::F32 {
            let at = m.i32(c.shift as i32);
            let bits = m.bin(BinaryOp::Shl, e, at);
            m.bitcast(DType::F32, bits)
        } else {
            let wide = m.cast(DType::I64, e);
            let at = m.i64(c.shift);
            let bits = m.bin(BinaryOp::Shl, wide, at);
            m.bitcast(DType::F64, bits)
        }
    };
    let bias = m.i32(c.bias);
    let twopk = {
        let e = m.add(bias, k);
        power(m, e)
    };
    let top = {
        let top_exp = (c.top_k - 1) as i32;
        let bits = (i64::from(top_exp + c.bias)) << c.shift;
        let value = if dtype == DType::F32 {
            f64::from(f32::from_bits(bits as u32))
        } else {
            f64::from_bits(bits as u64)
        };
        m.float(dtype, value)
    };
    // k < 0 or k > 56: (x - e + 1) scaled, minus 1 (by 2·2^(top-1) at the
    // top k).
    let far = {
        let y = m.add(xe, one);
        let two = m.float(dtype, 2.0);
        let y2 = m.mul(y, two);
        let y_top = m.mul(y2, top);
        let y_k = m.mul(y, twopk);
        let at_top = m.cmp_k(CmpOp::Eq, k, c.top_k);
        let y = m.select(at_top, y_top, y_k);
        m.sub(y, one)
    };
    // 2 <= k <= 56: below the switch (x - e + (1 - 2^-k))·2^k, else
    // (x - (e + 2^-k) + 1)·2^k.
    let mid = {
        let uf = {
            let e = m.sub(bias, k);
            power(m, e)
        };
        let one_uf = m.sub(one, uf);
        let low = m.add(xe, one_uf);
        let low = m.mul(low, twopk);
        let euf = m.add(e, uf);
        let high = m.sub(xr, euf);
        let high = m.add(high, one);
        let high = m.mul(high, twopk);
        let small = m.cmp_k(CmpOp::Lt, k, c.switch);
        m.select(small, low, high)
    };
    let mut result = mid;
    let outside = {
        let below = m.cmp_k(CmpOp::Lt, k, 0);
        let above = m.cmp_k(CmpOp::Gt, k, 56);
        m.or(below, above)
    };
    result = m.select(outside, far, result);
    for (at, value) in [(1, k_1), (-1, k_minus_1), (0, k0)] {
        let is = m.cmp_k(CmpOp::Eq, k, at);
        result = m.select(is, value, result);
    }
    // Tiny |x|: x.
    let tiny = m.cmp_k(CmpOp::Lt, hx, c.tiny);
    result = m.select(tiny, x, result);
    // Huge |x|: -1 if negative, x·2^top past the overflow threshold; NaN: x.
    let huge = m.cmp_k(CmpOp::Ge, hx, c.huge);
    let minus_one = m.float(dtype, -1.0);
    let to_minus_one = m.and(huge, negative);
    result = m.select(to_minus_one, minus_one, result);
    let over = match c.over {
        Over::Value(at) => {
            let at = m.float(dtype, at);
            m.cmp(CmpOp::Gt, x, at)
        }
        Over::Bits(at) => {
            let above = m.cmp_k(CmpOp::Gt, hx, at);
            let positive = m.not(negative);
            m.and(above, positive)
        }
    };
    let inf = m.mul(x, top);
    result = m.select(over, inf, result);
    let nan = m.cmp(CmpOp::Ne, x, x);
    m.select(nan, x, result)
}

/// The `libm` crate's `tanh` (f64) and `tanhf` (musl's), branch-free: one
/// `expm1`, of `2|x|` or `-2|x|` as the scalar code's branch would take it.
fn tanh_core(m: &mut Emit<'_, '_>, x: Reg) -> Reg {
    let dtype = m.ty(x);
    let f32 = dtype == DType::F32;
    // log(5/3)/2, log(3)/2, 20 (f64) or 10 (f32), the smallest normal.
    let [mid_at, big_at, far_at, normal_at] = if f32 {
        [0x3e82_c578, 0x3f0c_9f54, 0x4120_0000, 0x0080_0000]
    } else {
        [0x3fd0_58ae, 0x3fe1_93ea, 0x4034_0000, 0x0010_0000]
    };
    let (w, negative) = magnitude_word(m, x);
    let a = m.abs(x);
    let mid = m.cmp_k(CmpOp::Gt, w, mid_at);
    let arg = {
        let (two, minus_two) = (m.float(dtype, 2.0), m.float(dtype, -2.0));
        let up = m.mul(two, a);
        let down = m.mul(minus_two, a);
        m.select(mid, up, down)
    };
    let t = expm1_core(m, arg);
    let two = m.float(dtype, 2.0);
    let t2 = m.add(t, two);
    let one = m.float(dtype, 1.0);
    // Far (|x| > 20 or 10) or NaN: 1 - 0/|x| (f64), 1 + 0/|x| (f32).
    let far = {
        let zero = m.float(dtype, 0.0);
        let z = m.div(zero, a);
        if f32 {
            m.add(one, z)
        } else {
            m.sub(one, z)
        }
    };
    // |x| > log(3)/2: 1 - 2/(t + 2).
    let big = {
        let q = m.div(two, t2);
        m.sub(one, q)
    };
    // |x| > log(5/3)/2: t/(t + 2); normal: -t/(t + 2); subnormal: |x|.
    let middle = m.div(t, t2);
    let small = {
        let nt = m.neg(t);
        m.div(nt, t2)
    };
    let normal = m.cmp_k(CmpOp::Ge, w, normal_at);
    let mut result = m.select(normal, small, a);
    result = m.select(mid, middle, result);
    let is_big = m.cmp_k(CmpOp::Gt, w, big_at);
    result = m.select(is_big, big, result);
    let is_far = m.cmp_k(CmpOp::Gt, w, far_at);
    result = m.select(is_far, far, result);
    let flipped = m.neg(result);
    m.select(negative, flipped, result)
}

/// The `libm` crate's `tanh` (f64).
pub(super) fn tanh_f64(lw: &mut Lowerer<'_>, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    tanh_core(&mut Emit { lw, out }, x)
}

/// The `libm` crate's `tanhf`.
pub(super) fn tanh_f32(lw: &mut Lowerer<'_>, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    tanh_core(&mut Emit { lw, out }, x)
}

/// What `erf`/`erfc` (f64) and `erff`/`erfcf` differ in: coefficients
/// (each polynomial's list starts with its constant term) and thresholds
/// on |x|'s high word (f64) or bits (f32).
struct Erf {
    erx: f64,
    efx8: f64,
    pp: &'static [f64],
    qq: &'static [f64],
    pa: &'static [f64],
    qa: &'static [f64],
    ra: &'static [f64],
    sa: &'static [f64],
    rb: &'static [f64],
    sb: &'static [f64],
    /// Not finite; 0.84375; erf's and erfc's tiny arguments; 1/4; 1.25
    /// (erfc1's end); 1/0.35 (the two erfc2 polynomials); 6 (erf's end)
    /// and 28 (erfc's).
    nonfinite: i64,
    small: i64,
    erf_tiny: i64,
    erfc_tiny: i64,
    quarter: i64,
    near_one: i64,
    split: i64,
    erf_end: i64,
    erfc_end: i64,
    /// The tiny value past the ends (2^-1022, 2^-120), and the mask that
    /// rounds |x| down to z.
    tiny: f64,
    z_mask: i64,
}

const ERF_F64: Erf = Erf {
    erx: 8.45062911510467529297e-01,
    efx8: 1.02703333676410069053e+00,
    pp: &[
        1.28379167095512558561e-01,
        -3.25042107247001499370e-01,
        -2.84817495755985104766e-02,
        -5.77027029648944159157e-03,
        -2.37630166566501626084e-05,
    ],
    qq: &[
        1.0,
        3.97917223959155352819e-01,
        6.50222499887672944485e-02,
        5.08130628187576562776e-03,
        1.32494738004321644526e-04,
        -3.96022827877536812320e-06,
    ],
    pa: &[
        -2.36211856075265944077e-03,
        4.14856118683748331666e-01,
        -3.72207876035701323847e-01,
        3.18346619901161753674e-01,
        -1.10894694282396677476e-01,
        3.54783043256182359371e-02,
        -2.16637559486879084300e-03,
    ],
    qa: &[
        1.0,
        1.06420880400844228286e-01,
        5.40397917702171048937e-01,
        7.18286544141962662868e-02,
        1.26171219808761642112e-01,
        1.36370839120290507362e-02,
        1.19844998467991074170e-02,
    ],
    ra: &[
        -9.86494403484714822705e-03,
        -6.93858572707181764372e-01,
        -1.05586262253232909814e+01,
        -6.23753324503260060396e+01,
        -1.62396669462573470355e+02,
        -1.84605092906711035994e+02,
        -8.12874355063065934246e+01,
        -9.81432934416914548592e+00,
    ],
    sa: &[
        1.0,
        1.96512716674392571292e+01,
        1.37657754143519042600e+02,
        4.34565877475229228821e+02,
        6.45387271733267880336e+02,
        4.29008140027567833386e+02,
        1.08635005541779435134e+02,
        6.57024977031928170135e+00,
        -6.04244152148580987438e-02,
    ],
    rb: &[
        -9.86494292470009928597e-03,
        -7.99283237680523006574e-01,
        -1.77579549177547519889e+01,
        -1.60636384855821916062e+02,
        -6.37566443368389627722e+02,
        -1.02509513161107724954e+03,
        -4.83519191608651397019e+02,
    ],
    sb: &[
        1.0,
        3.03380607434824582924e+01,
        3.25792512996573918826e+02,
        1.53672958608443695994e+03,
        3.19985821950859553908e+03,
        2.55305040643316442583e+03,
        4.74528541206955367215e+02,
        -2.24409524465858183362e+01,
    ],
    nonfinite: 0x7ff0_0000,
    small: 0x3feb_0000,
    erf_tiny: 0x3e30_0000,
    erfc_tiny: 0x3c70_0000,
    quarter: 0x3fd0_0000,
    near_one: 0x3ff4_0000,
    split: 0x4006_db6d,
    erf_end: 0x4018_0000,
    erfc_end: 0x403c_0000,
    tiny: f64::MIN_POSITIVE,
    z_mask: !0xffff_ffff,
};

const ERF_F32: Erf = Erf {
    erx: 8.4506291151e-01_f32 as f64,
    efx8: 1.0270333290e+00_f32 as f64,
    pp: &[
        1.2837916613e-01_f32 as f64,
        -3.2504209876e-01_f32 as f64,
        -2.8481749818e-02_f32 as f64,
        -5.7702702470e-03_f32 as f64,
        -2.3763017452e-05_f32 as f64,
    ],
    qq: &[
        1.0,
        3.9791721106e-01_f32 as f64,
        6.5022252500e-02_f32 as f64,
        5.0813062117e-03_f32 as f64,
        1.3249473704e-04_f32 as f64,
        -3.9602282413e-06_f32 as f64,
    ],
    pa: &[
        -2.3621185683e-03_f32 as f64,
        4.1485610604e-01_f32 as f64,
        -3.7220788002e-01_f32 as f64,
        3.1834661961e-01_f32 as f64,
        -1.1089469492e-01_f32 as f64,
        3.5478305072e-02_f32 as f64,
        -2.1663755178e-03_f32 as f64,
    ],
    qa: &[
        1.0,
        1.0642088205e-01_f32 as f64,
        5.4039794207e-01_f32 as f64,
        7.1828655899e-02_f32 as f64,
        1.2617121637e-01_f32 as f64,
        1.3637083583e-02_f32 as f64,
        1.1984500103e-02_f32 as f64,
    ],
    ra: &[
        -9.8649440333e-03_f32 as f64,
        -6.9385856390e-01_f32 as f64,
        -1.0558626175e+01_f32 as f64,
        -6.2375331879e+01_f32 as f64,
        -1.6239666748e+02_f32 as f64,
        -1.8460508728e+02_f32 as f64,
        -8.1287437439e+01_f32 as f64,
        -9.8143291473e+00_f32 as f64,
    ],
    sa: &[
        1.0,
        1.9651271820e+01_f32 as f64,
        1.3765776062e+02_f32 as f64,
        4.3456588745e+02_f32 as f64,
        6.4538726807e+02_f32 as f64,
        4.2900814819e+02_f32 as f64,
        1.0863500214e+02_f32 as f64,
        6.5702495575e+00_f32 as f64,
        -6.0424413532e-02_f32 as f64,
    ],
    rb: &[
        -9.8649431020e-03_f32 as f64,
        -7.9928326607e-01_f32 as f64,
        -1.7757955551e+01_f32 as f64,
        -1.6063638306e+02_f32 as f64,
        -6.3756646729e+02_f32 as f64,
        -1.0250950928e+03_f32 as f64,
        -4.8351919556e+02_f32 as f64,
    ],
    sb: &[
        1.0,
        3.0338060379e+01_f32 as f64,
        3.2579251099e+02_f32 as f64,
        1.5367296143e+03_f32 as f64,
        3.1998581543e+03_f32 as f64,
        2.5530502930e+03_f32 as f64,
        4.7452853394e+02_f32 as f64,
        -2.2440952301e+01_f32 as f64,
    ],
    nonfinite: 0x7f80_0000,
    small: 0x3f58_0000,
    erf_tiny: 0x3180_0000,
    erfc_tiny: 0x2380_0000,
    quarter: 0x3e80_0000,
    near_one: 0x3fa0_0000,
    split: 0x4036_db6d,
    erf_end: 0x40c0_0000,
    erfc_end: 0x41e0_0000,
    // 2^-120.
    tiny: f32::from_bits(0x0380_0000) as f64,
    z_mask: 0xffff_e000u32 as i32 as i64,
};

/// What `erf` and `erfc` share: |x|'s word and sign, the small-argument
/// quotient `y = r/s` of `z = x*x`, and `erfc2`.
struct ErfParts {
    c: &'static Erf,
    hx: Reg,
    negative: Reg,
    small_y: Reg,
    erfc2: Reg,
}

fn erf_parts(m: &mut Emit<'_, '_>, x: Reg) -> ErfParts {
    let dtype = m.ty(x);
    let c = if dtype == DType::F32 {
        &ERF_F32
    } else {
        &ERF_F64
    };
    let (hx, negative) = magnitude_word(m, x);
    let small_y = {
        let z = m.mul(x, x);
        let r = m.horner(z, c.pp);
        let s = m.horner(z, c.qq);
        m.div(r, s)
    };
    let a = m.abs(x);
    // erfc1, below 1.25: 1 - erx - P(s)/Q(s) with s = |x| - 1.
    let erfc1 = {
        let one = m.float(dtype, 1.0);
        let s = m.sub(a, one);
        let p = m.horner(s, c.pa);
        let q = m.horner(s, c.qa);
        let erx = m.float(dtype, c.erx);
        let d = m.sub(one, erx);
        let pq = m.div(p, q);
        m.sub(d, pq)
    };
    // Above: exp(-z*z - 0.5625) * exp((z - |x|)*(z + |x|) + R/S) / |x|,
    // with s = 1/x², R/S the polynomials below or above 1/0.35 and z |x|
    // rounded down (its low word, or low 13 bits, cleared).
    let far = {
        let one = m.float(dtype, 1.0);
        let aa = m.mul(a, a);
        let s = m.div(one, aa);
        let ra = m.horner(s, c.ra);
        let sa = m.horner(s, c.sa);
        let rb = m.horner(s, c.rb);
        let sb = m.horner(s, c.sb);
        let below = m.cmp_k(CmpOp::Lt, hx, c.split);
        let r = m.select(below, ra, rb);
        let big_s = m.select(below, sa, sb);
        let z = m.cut_bits(a, c.z_mask);
        let nz = m.neg(z);
        let zz = m.mul(nz, z);
        let k = m.float(dtype, 0.5625);
        let arg1 = m.sub(zz, k);
        let zm = m.sub(z, a);
        let zp = m.add(z, a);
        let prod = m.mul(zm, zp);
        let rs = m.div(r, big_s);
        let arg2 = m.add(prod, rs);
        let exp = if dtype == DType::F32 {
            exp_f32
        } else {
            exp_f64
        };
        let e1 = exp(m.lw, m.out, arg1);
        let e2 = exp(m.lw, m.out, arg2);
        let e = m.mul(e1, e2);
        m.div(e, a)
    };
    let near = m.cmp_k(CmpOp::Lt, hx, c.near_one);
    let erfc2 = m.select(near, erfc1, far);
    ErfParts {
        c,
        hx,
        negative,
        small_y,
        erfc2,
    }
}

/// `±1 - …` and `2·sign + 1/x` need the sign as a float, 0 or 1.
fn sign_value(m: &mut Emit<'_, '_>, negative: Reg, dtype: DType) -> Reg {
    let (one, zero) = (m.float(dtype, 1.0), m.float(dtype, 0.0));
    m.select(negative, one, zero)
}

/// The `libm` crate's `erf` and `erff` (FreeBSD's `s_erf.c`), branch-free.
fn erf_core(m: &mut Emit<'_, '_>, x: Reg) -> Reg {
    let dtype = m.ty(x);
    let ErfParts {
        c,
        hx,
        negative,
        small_y,
        erfc2,
    } = erf_parts(m, x);
    let one = m.float(dtype, 1.0);
    // |x| < 0.84375: x + x*y; tiny: 0.125*(8x + efx8*x).
    let small = {
        let xy = m.mul(x, small_y);
        m.add(x, xy)
    };
    let tiny = {
        let eight = m.float(dtype, 8.0);
        let efx8 = m.float(dtype, c.efx8);
        let a = m.mul(eight, x);
        let b = m.mul(efx8, x);
        let sum = m.add(a, b);
        let eighth = m.float(dtype, 0.125);
        m.mul(eighth, sum)
    };
    // Up to 6: ±(1 - erfc2); beyond: ±(1 - tiny).
    let y = {
        let mid = m.sub(one, erfc2);
        let tiny = m.float(dtype, c.tiny);
        let far = m.sub(one, tiny);
        let is_mid = m.cmp_k(CmpOp::Lt, hx, c.erf_end);
        let y = m.select(is_mid, mid, far);
        negate_if(m, negative, y)
    };
    // Not finite: 1 - 2*sign + 1/x.
    let special = {
        let s = sign_value(m, negative, dtype);
        let two = m.float(dtype, 2.0);
        let ts = m.mul(two, s);
        let d = m.sub(one, ts);
        let inv = m.div(one, x);
        m.add(d, inv)
    };
    let is_small = m.cmp_k(CmpOp::Lt, hx, c.small);
    let is_tiny = m.cmp_k(CmpOp::Lt, hx, c.erf_tiny);
    let small = m.select(is_tiny, tiny, small);
    let result = m.select(is_small, small, y);
    let nonfinite = m.cmp_k(CmpOp::Ge, hx, c.nonfinite);
    m.select(nonfinite, special, result)
}

/// The `libm` crate's `erfc` and `erfcf` (FreeBSD's `s_erf.c`), branch-free.
fn erfc_core(m: &mut Emit<'_, '_>, x: Reg) -> Reg {
    let dtype = m.ty(x);
    let ErfParts {
        c,
        hx,
        negative,
        small_y,
        erfc2,
    } = erf_parts(m, x);
    let one = m.float(dtype, 1.0);
    let two = m.float(dtype, 2.0);
    // |x| < 0.84375: 1 - (x + x*y) for x < 1/4, else 0.5 - (x - 0.5 + x*y);
    // tiny: 1 - x.
    let small = {
        let xy = m.mul(x, small_y);
        let sum = m.add(x, xy);
        let low = m.sub(one, sum);
        let half = m.float(dtype, 0.5);
        let xh = m.sub(x, half);
        let t = m.add(xh, xy);
        let high = m.sub(half, t);
        let below = m.cmp_k(CmpOp::Lt, hx, c.quarter);
        let low_side = m.or(negative, below);
        let value = m.select(low_side, low, high);
        let tiny = m.cmp_k(CmpOp::Lt, hx, c.erfc_tiny);
        let one_x = m.sub(one, x);
        m.select(tiny, one_x, value)
    };
    // Up to 28: erfc2, or 2 - erfc2 for negative x; beyond: tiny², or
    // 2 - tiny.
    let large = {
        let flipped = m.sub(two, erfc2);
        let mid = m.select(negative, flipped, erfc2);
        let tiny = m.float(dtype, c.tiny);
        let under = m.mul(tiny, tiny);
        let over = m.sub(two, tiny);
        let far = m.select(negative, over, under);
        let is_mid = m.cmp_k(CmpOp::Lt, hx, c.erfc_end);
        m.select(is_mid, mid, far)
    };
    // Not finite: 2*sign + 1/x.
    let special = {
        let s = sign_value(m, negative, dtype);
        let ts = m.mul(two, s);
        let inv = m.div(one, x);
        m.add(ts, inv)
    };
    let is_small = m.cmp_k(CmpOp::Lt, hx, c.small);
    let result = m.select(is_small, small, large);
    let nonfinite = m.cmp_k(CmpOp::Ge, hx, c.nonfinite);
    m.select(nonfinite, special, result)
}

/// The `libm` crate's `erf` (f64) and `erff`.
pub(super) fn erf(lw: &mut Lowerer<'_>, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    erf_core(&mut Emit { lw, out }, x)
}

/// The `libm` crate's `erfc` (f64) and `erfcf`.
pub(super) fn erfc(lw: &mut Lowerer<'_>, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    erfc_core(&mut Emit { lw, out }, x)
}

/// `sinh` and `cosh` (f64) and `sinhf` and `coshf`: musl's, branch-free,
/// through `expm1` and one `exp` (of `|x|` or, past log(MAX), of
/// `|x| - k·ln2` for `k_expo2`'s scaling by `2^(k-1)` in two steps).
fn hyperbolic(m: &mut Emit<'_, '_>, x: Reg, op: UnaryOp) -> Reg {
    let dtype = m.ty(x);
    let f32 = dtype == DType::F32;
    // |x|'s word at log(MAX), 1, log(2) and the tiny arguments; k·ln2 and
    // 2^((k-1)/2) of k_expo2.
    let (log_max, one_at, log2_at, tiny_at, k_ln2, scale) = if f32 {
        (
            0x42b1_7217,
            0x3f80_0000,
            0x3f31_7217,
            0x3f80_0000 - (12 << 23),
            f64::from(f32::from_bits(0x4322_e3bc)),
            f64::from(f32::from_bits((0x7f + 235 / 2) << 23)),
        )
    } else {
        (
            0x4086_2e42,
            0x3ff0_0000,
            0x3fe6_2e42,
            0x3ff0_0000 - (26 << 20),
            f64::from_bits(0x4096_2066_151a_dd8b),
            f64::from_bits((0x3ff + 2043 / 2) << 52),
        )
    };
    let (w, negative) = magnitude_word(m, x);
    let a = m.abs(x);
    let below_max = m.cmp_k(CmpOp::Lt, w, log_max);
    let tiny = m.cmp_k(CmpOp::Lt, w, tiny_at);
    let t = expm1_core(m, a);
    // One exp: of |x| (cosh below log(MAX)), else of |x| - k·ln2.
    let e = {
        let kl = m.float(dtype, k_ln2);
        let shifted = m.sub(a, kl);
        let arg = if op == UnaryOp::Cosh {
            m.select(below_max, a, shifted)
        } else {
            shifted
        };
        let exp = if f32 { exp_f32 } else { exp_f64 };
        exp(m.lw, m.out, arg)
    };
    // k_expo2: exp(|x| - k·ln2)·2^((k-1)/2)·2^((k-1)/2).
    let expo2 = {
        let scale = m.float(dtype, scale);
        let once = m.mul(e, scale);
        m.mul(once, scale)
    };
    let one = m.float(dtype, 1.0);
    let two = m.float(dtype, 2.0);
    if op == UnaryOp::Cosh {
        // Below log(2): 1 + t²/(2(1 + t)), or 1 when tiny; below log(MAX):
        // 0.5(e + 1/e); beyond (and NaN): k_expo2.
        let near = {
            let tt = m.mul(t, t);
            let one_t = m.add(one, t);
            let den = m.mul(two, one_t);
            let q = m.div(tt, den);
            let v = m.add(one, q);
            m.select(tiny, one, v)
        };
        let mid = {
            let inv = m.div(one, e);
            let sum = m.add(e, inv);
            let half = m.float(dtype, 0.5);
            m.mul(half, sum)
        };
        let is_near = m.cmp_k(CmpOp::Lt, w, log2_at);
        let value = m.select(is_near, near, mid);
        return m.select(below_max, value, expo2);
    }
    // sinh, with h = ±0.5: below 1, h(2t - t²/(t + 1)) (x when tiny); below
    // log(MAX), h(t + t/(t + 1)); beyond (and NaN), 2h·k_expo2.
    let h = {
        let (plus, minus) = (m.float(dtype, 0.5), m.float(dtype, -0.5));
        m.select(negative, minus, plus)
    };
    let t1 = m.add(t, one);
    let below_one = {
        let tt = m.mul(t, t);
        let q = m.div(tt, t1);
        let t2 = m.mul(two, t);
        let d = m.sub(t2, q);
        let v = m.mul(h, d);
        m.select(tiny, x, v)
    };
    let above_one = {
        let q = m.div(t, t1);
        let s = m.add(t, q);
        m.mul(h, s)
    };
    let far = {
        let h2 = m.mul(two, h);
        m.mul(h2, expo2)
    };
    let is_below_one = m.cmp_k(CmpOp::Lt, w, one_at);
    let value = m.select(is_below_one, below_one, above_one);
    m.select(below_max, value, far)
}

/// The `libm` crate's `sinh` (f64) and `sinhf`.
pub(super) fn sinh(lw: &mut Lowerer<'_>, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    hyperbolic(&mut Emit { lw, out }, x, UnaryOp::Sinh)
}

/// The `libm` crate's `cosh` (f64) and `coshf`.
pub(super) fn cosh(lw: &mut Lowerer<'_>, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    hyperbolic(&mut Emit { lw, out }, x, UnaryOp::Cosh)
}

/// The `libm` crate's `log1p` (f64) and `log1pf` (FreeBSD's `s_log1p.c`,
/// `s_log1pf.c`), branch-free. The scalar code compares the unsigned word
/// of `x`; here the word of |x| and the sign say the same.
fn log1p_core(m: &mut Emit<'_, '_>, x: Reg) -> Reg {
    let dtype = m.ty(x);
    let f32 = dtype == DType::F32;
    // Thresholds on |x|'s word: 1 + x < sqrt(2); -1; the tiny arguments;
    // k = 0 for negatives from sqrt(2)/2 - 1; infinity.
    let (small_at, one_at, tiny_at, k0_at, inf_at) = if f32 {
        (
            0x3ed4_13d0,
            0x3f80_0000,
            0x3380_0000,
            0x3e95_f619,
            0x7f80_0000,
        )
    } else {
        (
            0x3fda_827a,
            0x3ff0_0000,
            0x3ca0_0000,
            0x3fd2_bec4,
            0x7ff0_0000,
        )
    };
    let (ln2, even, odd): ([f64; 2], &[f64], &[f64]) = if f32 {
        (
            [6.9313812256e-01_f32 as f64, 9.0580006145e-06_f32 as f64],
            &[0.40000972152_f32 as f64, 0.24279078841_f32 as f64],
            &[0.66666662693_f32 as f64, 0.28498786688_f32 as f64],
        )
    } else {
        (
            [6.93147180369123816490e-01, 1.90821492927058770002e-10],
            &[
                3.999999999940941908e-01,
                2.222219843214978396e-01,
                1.531383769920937332e-01,
            ],
            &[
                6.666666666666735130e-01,
                2.857142874366239149e-01,
                1.818357216161805012e-01,
                1.479819860511658591e-01,
            ],
        )
    };
    let (ax, negative) = magnitude_word(m, x);
    let below = m.cmp_k(CmpOp::Lt, ax, small_at);
    let small = m.or(negative, below);
    let positive = m.not(negative);
    let near = m.cmp_k(CmpOp::Le, ax, k0_at);
    let k0 = {
        let either = m.or(positive, near);
        m.and(small, either)
    };
    // k > 0: u = 1 + x, reduced into [sqrt(2)/2, sqrt(2)] by its word moved
    // by 1 - sqrt(2)/2, with the correction c = (log(1+x) - log(u))·u.
    let one = m.float(dtype, 1.0);
    let u = m.add(one, x);
    let (k, f) = if f32 {
        let bits = m.bitcast(DType::I32, u);
        let moved = {
            let by = m.i32(0x3f80_0000 - 0x3f35_04f3);
            m.add(bits, by)
        };
        let c23 = m.i32(23);
        let e = m.bin(BinaryOp::ShrLogical, moved, c23);
        let bias = m.i32(0x7f);
        let k = m.sub(e, bias);
        let frac = m.band_k(moved, 0x007f_ffff);
        let base = m.i32(0x3f35_04f3);
        let reduced = m.add(frac, base);
        let reduced = m.bitcast(DType::F32, reduced);
        (k, m.sub(reduced, one))
    } else {
        let bits = m.bitcast(DType::I64, u);
        let c32 = m.i64(32);
        let high = m.bin(BinaryOp::ShrLogical, bits, c32);
        let moved = {
            let by = m.i64(0x3ff0_0000 - 0x3fe6_a09e);
            m.add(high, by)
        };
        let c20 = m.i64(20);
        let e = m.bin(BinaryOp::ShrLogical, moved, c20);
        let bias = m.i64(0x3ff);
        let k = m.sub(e, bias);
        // |k| < 1100: through i32, which converts packed on x86-64.
        let k = m.cast(DType::I32, k);
        let frac = m.band_k(moved, 0x000f_ffff);
        let base = m.i64(0x3fe6_a09e);
        let hu = m.add(frac, base);
        let hi = m.bin(BinaryOp::Shl, hu, c32);
        let lo = m.band_k(bits, 0xffff_ffff);
        let reduced = m.bin(BinaryOp::BOr, hi, lo);
        let reduced = m.bitcast(DType::F64, reduced);
        (k, m.sub(reduced, one))
    };
    let c = {
        let ux = m.sub(u, x);
        let high = m.sub(one, ux);
        let u1 = m.sub(u, one);
        let low = m.sub(x, u1);
        let two_up = m.cmp_k(CmpOp::Ge, k, 2);
        let c = m.select(two_up, high, low);
        let c = m.div(c, u);
        let limit = m.cmp_k(CmpOp::Lt, k, if f32 { 25 } else { 54 });
        let zero = m.float(dtype, 0.0);
        let c = m.select(limit, c, zero);
        m.select(k0, zero, c)
    };
    let f = m.select(k0, x, f);
    let k = {
        let zero = m.i32(0);
        m.select(k0, zero, k)
    };
    let dk = m.cast(dtype, k);
    // s(hfsq + R) + (k·ln2_lo + c) - hfsq + f + k·ln2_hi.
    let result = {
        let two = m.float(dtype, 2.0);
        let den = m.add(two, f);
        let s = m.div(f, den);
        let z = m.mul(s, s);
        let w = m.mul(z, z);
        let p1 = m.horner(w, even);
        let t1 = m.mul(w, p1);
        let p2 = m.horner(w, odd);
        let t2 = m.mul(z, p2);
        let r = m.add(t2, t1);
        let half = m.float(dtype, 0.5);
        let hf = m.mul(half, f);
        let hfsq = m.mul(hf, f);
        let sum = m.add(hfsq, r);
        let acc = m.mul(s, sum);
        let ln2lo = m.float(dtype, ln2[1]);
        let klo = m.mul(dk, ln2lo);
        let klo_c = m.add(klo, c);
        let acc = m.add(acc, klo_c);
        let acc = m.sub(acc, hfsq);
        let acc = m.add(acc, f);
        let ln2hi = m.float(dtype, ln2[0]);
        let khi = m.mul(dk, ln2hi);
        m.add(acc, khi)
    };
    // +inf and positive NaNs: x; tiny: x; -1: -inf; below -1 (and negative
    // NaNs): NaN.
    let inf = m.cmp_k(CmpOp::Ge, ax, inf_at);
    let special = m.and(positive, inf);
    let result = m.select(special, x, result);
    let tiny = m.cmp_k(CmpOp::Lt, ax, tiny_at);
    let result = m.select(tiny, x, result);
    let zero = m.float(dtype, 0.0);
    let minus_inf = m.div(x, zero);
    let d = m.sub(x, x);
    let nan = m.div(d, zero);
    let minus_one = m.float(dtype, -1.0);
    let is_minus_one = m.cmp(CmpOp::Eq, x, minus_one);
    let below_value = m.select(is_minus_one, minus_inf, nan);
    let at_or_below = m.cmp_k(CmpOp::Ge, ax, one_at);
    let below = m.and(negative, at_or_below);
    m.select(below, below_value, result)
}

/// The `libm` crate's `log1p` (f64) and `log1pf`.
pub(super) fn log1p(lw: &mut Lowerer<'_>, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    log1p_core(&mut Emit { lw, out }, x)
}

/// The `libm` crate's `log2` and `log10`, f64 and f32 (FreeBSD's
/// `e_log2.c`, `e_log10.c` and their `f` forms), branch-free: `log`'s
/// reduction and special cases, then `log(1 + f)` as `hi + lo` (hi with its
/// low bits cleared) scaled by 1/ln 2 or 1/ln 10 in two parts, plus `k` (or
/// `k·log10(2)` in two parts), in each function's order.
fn log2_log10(m: &mut Emit<'_, '_>, x: Reg, op: UnaryOp) -> Reg {
    let dtype = m.ty(x);
    let f32 = dtype == DType::F32;
    let (reduced, dk, flags) = if f32 {
        log_parts_f32(m, x)
    } else {
        log_parts_f64(m, x)
    };
    let (even, odd, hi_mask): (&[f64], &[f64], i64) = if f32 {
        (
            &[0.40000972152_f32 as f64, 0.24279078841_f32 as f64],
            &[0.66666662693_f32 as f64, 0.28498786688_f32 as f64],
            0xffff_f000u32 as i32 as i64,
        )
    } else {
        (
            &[
                3.999999999940941908e-01,
                2.222219843214978396e-01,
                1.531383769920937332e-01,
            ],
            &[
                6.666666666666735130e-01,
                2.857142874366239149e-01,
                1.818357216161805012e-01,
                1.479819860511658591e-01,
            ],
            !0xffff_ffff,
        )
    };
    let one = m.float(dtype, 1.0);
    let f = m.sub(reduced, one);
    let half = m.float(dtype, 0.5);
    let hf = m.mul(half, f);
    let hfsq = m.mul(hf, f);
    let two = m.float(dtype, 2.0);
    let den = m.add(two, f);
    let s = m.div(f, den);
    let z = m.mul(s, s);
    let w = m.mul(z, z);
    let p1 = m.horner(w, even);
    let t1 = m.mul(w, p1);
    let p2 = m.horner(w, odd);
    let t2 = m.mul(z, p2);
    let r = m.add(t2, t1);
    // hi = f - hfsq, low bits cleared; lo = f - hi - hfsq + s*(hfsq + r).
    let hi = {
        let h = m.sub(f, hfsq);
        m.cut_bits(h, hi_mask)
    };
    let lo = {
        let a = m.sub(f, hi);
        let a = m.sub(a, hfsq);
        let b = m.add(hfsq, r);
        let b = m.mul(s, b);
        m.add(a, b)
    };
    let lo_hi = m.add(lo, hi);
    let result = match (op, f32) {
        (UnaryOp::Log2, false) => {
            let (ivln2hi, ivln2lo) = (
                m.f64(1.44269504072144627571e+00),
                m.f64(1.67517131648865118353e-10),
            );
            let val_hi = m.mul(hi, ivln2hi);
            let a = m.mul(lo_hi, ivln2lo);
            let b = m.mul(lo, ivln2hi);
            let val_lo = m.add(a, b);
            spadd(m, dk, val_hi, val_lo)
        }
        (_, false) => {
            let ivln10hi = m.f64(4.34294481878168880939e-01);
            let ivln10lo = m.f64(2.50829467116452752298e-11);
            let log10_2hi = m.f64(3.01029995663611771306e-01);
            let log10_2lo = m.f64(3.69423907715893078616e-13);
            let val_hi = m.mul(hi, ivln10hi);
            let y = m.mul(dk, log10_2hi);
            let a = m.mul(dk, log10_2lo);
            let b = m.mul(lo_hi, ivln10lo);
            let c = m.mul(lo, ivln10hi);
            let val_lo = m.add(a, b);
            let val_lo = m.add(val_lo, c);
            spadd(m, y, val_hi, val_lo)
        }
        (UnaryOp::Log2, true) => {
            let ivln2hi = m.f32(1.4428710938e+00);
            let ivln2lo = m.f32(-1.7605285393e-04);
            let a = m.mul(lo_hi, ivln2lo);
            let b = m.mul(lo, ivln2hi);
            let c = m.mul(hi, ivln2hi);
            let acc = m.add(a, b);
            let acc = m.add(acc, c);
            m.add(acc, dk)
        }
        (_, true) => {
            let ivln10hi = m.f32(4.3432617188e-01);
            let ivln10lo = m.f32(-3.1689971365e-05);
            let log10_2hi = m.f32(3.0102920532e-01);
            let log10_2lo = m.f32(7.9034151668e-07);
            let a = m.mul(dk, log10_2lo);
            let b = m.mul(lo_hi, ivln10lo);
            let c = m.mul(lo, ivln10hi);
            let d = m.mul(hi, ivln10hi);
            let e = m.mul(dk, log10_2hi);
            let acc = m.add(a, b);
            let acc = m.add(acc, c);
            let acc = m.add(acc, d);
            m.add(acc, e)
        }
    };
    m.log_specials(x, result, flags)
}

/// `spadd(val_hi, val_lo, y)` of `e_log2.c`: `w = y + val_hi`, `val_lo +=
/// (y - w) + val_hi`, then `val_lo + w`.
fn spadd(m: &mut Emit<'_, '_>, y: Reg, val_hi: Reg, val_lo: Reg) -> Reg {
    let w = m.add(y, val_hi);
    let d = m.sub(y, w);
    let d = m.add(d, val_hi);
    let val_lo = m.add(val_lo, d);
    m.add(val_lo, w)
}

/// The `libm` crate's `log2` (f64) and `log2f`.
pub(super) fn log2(lw: &mut Lowerer<'_>, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    log2_log10(&mut Emit { lw, out }, x, UnaryOp::Log2)
}

/// The `libm` crate's `log10` (f64) and `log10f`.
pub(super) fn log10(lw: &mut Lowerer<'_>, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    log2_log10(&mut Emit { lw, out }, x, UnaryOp::Log10)
}

/// `k_tan` (f64, FreeBSD's `k_tan.c`): tan(x + y) for |x| <= pi/4, or
/// -1/tan(x + y) where `odd`, branch-free.
fn k_tan(m: &mut Emit<'_, '_>, x: Reg, y: Reg, odd: Reg) -> Reg {
    const T: [f64; 13] = [
        3.33333333333334091986e-01,
        1.33333333333201242699e-01,
        5.39682539762260521377e-02,
        2.18694882948595424599e-02,
        8.86323982359930005737e-03,
        3.59207910759131235356e-03,
        1.45620945432529025516e-03,
        5.88041240820264096874e-04,
        2.46463134818469906812e-04,
        7.81794442939557092300e-05,
        7.14072491382608190305e-05,
        -1.85586374855275456654e-05,
        2.59073051863633712884e-05,
    ];
    const PIO4: f64 = 7.85398163397448278999e-01;
    const PIO4_LO: f64 = 3.06161699786838301793e-17;
    let (ix, negative) = high_word(m, x);
    // |x| >= 0.6744: x = (pi/4 - |x|) + (pi/4_lo - ±y), y = 0.
    let big = m.cmp_k(CmpOp::Ge, ix, 0x3fe5_9428);
    let (x, y) = {
        let ax = negate_if(m, negative, x);
        let ay = negate_if(m, negative, y);
        let pio4 = m.f64(PIO4);
        let pio4_lo = m.f64(PIO4_LO);
        let a = m.sub(pio4, ax);
        let b = m.sub(pio4_lo, ay);
        let xb = m.add(a, b);
        let zero = m.f64(0.0);
        (m.select(big, xb, x), m.select(big, zero, y))
    };
    let z = m.mul(x, x);
    let w = m.mul(z, z);
    let r = m.horner(w, &[T[1], T[3], T[5], T[7], T[9], T[11]]);
    let v = {
        let p = m.horner(w, &[T[2], T[4], T[6], T[8], T[10], T[12]]);
        m.mul(z, p)
    };
    let s = m.mul(z, x);
    // r = y + z*(s*(r + v) + y) + s*T0; w = x + r.
    let r = {
        let rv = m.add(r, v);
        let srv = m.mul(s, rv);
        let inner = m.add(srv, y);
        let zi = m.mul(z, inner);
        let acc = m.add(y, zi);
        let t0 = m.f64(T[0]);
        let st = m.mul(s, t0);
        m.add(acc, st)
    };
    let w = m.add(x, r);
    let one = m.f64(1.0);
    let two = m.f64(2.0);
    // big: ±(s1 - 2(x + (r - w²/(w + s1)))) with s1 = 1 - 2·odd.
    let big_value = {
        let (plus, minus) = (m.f64(1.0), m.f64(-1.0));
        let s1 = m.select(odd, minus, plus);
        let ww = m.mul(w, w);
        let ws = m.add(w, s1);
        let q = m.div(ww, ws);
        let d = m.sub(r, q);
        let d = m.add(x, d);
        let d = m.mul(two, d);
        let v = m.sub(s1, d);
        negate_if(m, negative, v)
    };
    // odd: -1/(x + r) accurately: a0 + a(1 + a0·w0 + a0·v), w0 and a0 with
    // their low words cleared.
    let odd_value = {
        let w0 = m.cut_bits(w, !0xffff_ffff);
        let d = m.sub(w0, x);
        let v = m.sub(r, d);
        let minus_one = m.f64(-1.0);
        let a = m.div(minus_one, w);
        let a0 = m.cut_bits(a, !0xffff_ffff);
        let aw = m.mul(a0, w0);
        let t = m.add(one, aw);
        let av = m.mul(a0, v);
        let t = m.add(t, av);
        let t = m.mul(a, t);
        m.add(a0, t)
    };
    let small_value = m.select(odd, odd_value, w);
    m.select(big, big_value, small_value)
}

/// `k_tanf`: tan(x) (or -1/tan(x) where `odd`) of an f64 argument, as f32.
fn k_tanf(m: &mut Emit<'_, '_>, x: Reg, odd: Reg) -> Reg {
    const T: [f64; 6] = [
        0.333331395030791399758,
        0.133392002712976742718,
        0.0533812378445670393523,
        0.0245283181166547278873,
        0.00297435743359967304927,
        0.00946564784943673166728,
    ];
    let z = m.mul(x, x);
    let t = |m: &mut Emit<'_, '_>, i: usize| m.f64(T[i]);
    // r = T4 + z·T5; t = T2 + z·T3; u = T0 + z·T1;
    // r = (x + s·u) + (s·w)·(t + w·r).
    let r = {
        let (a, b) = (t(m, 4), t(m, 5));
        let zb = m.mul(z, b);
        m.add(a, zb)
    };
    let tt = {
        let (a, b) = (t(m, 2), t(m, 3));
        let zb = m.mul(z, b);
        m.add(a, zb)
    };
    let w = m.mul(z, z);
    let s = m.mul(z, x);
    let u = {
        let (a, b) = (t(m, 0), t(m, 1));
        let zb = m.mul(z, b);
        m.add(a, zb)
    };
    let r = {
        let su = m.mul(s, u);
        let left = m.add(x, su);
        let sw = m.mul(s, w);
        let wr = m.mul(w, r);
        let twr = m.add(tt, wr);
        let right = m.mul(sw, twr);
        m.add(left, right)
    };
    let minus_one = m.f64(-1.0);
    let inv = m.div(minus_one, r);
    let r = m.select(odd, inv, r);
    m.cast(DType::F32, r)
}

/// The `libm` crate's `tan` (f64; FreeBSD's `s_tan.c`) and `tanf`,
/// branch-free over `sin`'s and `sinf`'s reductions; huge arguments take
/// the `libm` fallback as theirs do.
pub(super) fn tan(lw: &mut Lowerer<'_>, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    let mut m = Emit { lw, out };
    if m.ty(x) == DType::F32 {
        let r = reduce_f32(&mut m, x);
        // Below 9pi/4 the quarters' parity (odd to 3pi/4 and to 7pi/4),
        // beyond it n's.
        let odd = {
            let n_odd = m.band_k(r.quadrant, 1);
            let n_odd = m.cmp_k(CmpOp::Ne, n_odd, 0);
            let fixed = m.or(r.quarter[0], r.quarter[2]);
            let in_quarters = m.or(fixed, r.quarter[1]);
            let in_quarters = m.or(in_quarters, r.quarter[3]);
            let odd = m.select(in_quarters, fixed, n_odd);
            let f = m.let_(DType::Bool, Expr::Const(Scalar::Bool(false)));
            m.select(r.direct, f, odd)
        };
        let value = k_tanf(&mut m, r.arg, odd);
        let tiny = m.cmp_k(CmpOp::Lt, r.ix, 0x3980_0000);
        let value = m.select(tiny, x, value);
        return trig_tail(&mut m, UnaryOp::Tan, x, [r.special, r.rare], value);
    }
    let (ix, negative) = high_word(&mut m, x);
    let direct = m.cmp_k(CmpOp::Le, ix, 0x3fe9_21fb);
    let (q, y0, y1) = rem_pio2(&mut m, x, ix, negative);
    let y0 = m.select(direct, x, y0);
    let zero = m.f64(0.0);
    let y1 = m.select(direct, zero, y1);
    let odd = {
        let bit = m.band_k(q, 1);
        let odd = m.cmp_k(CmpOp::Ne, bit, 0);
        let f = m.let_(DType::Bool, Expr::Const(Scalar::Bool(false)));
        m.select(direct, f, odd)
    };
    let value = k_tan(&mut m, y0, y1, odd);
    let tiny = m.cmp_k(CmpOp::Lt, ix, 0x3e40_0000);
    let value = m.select(tiny, x, value);
    let special = m.cmp_k(CmpOp::Ge, ix, 0x7ff0_0000);
    let rare = {
        let huge = m.cmp_k(CmpOp::Ge, ix, 0x4139_21fb);
        let finite = m.not(special);
        m.and(huge, finite)
    };
    trig_tail(&mut m, UnaryOp::Tan, x, [special, rare], value)
}

/// The `libm` crate's `atan` (f64; FreeBSD's `s_atan.c`) and `atanf`,
/// branch-free: the four reductions (of 7/16, 11/16, 19/16 and 39/16 and
/// up) computed and the one of |x|'s interval kept, with its atan(hi, lo).
fn atan_core(m: &mut Emit<'_, '_>, x: Reg) -> Reg {
    let dtype = m.ty(x);
    let f32 = dtype == DType::F32;
    let (hi, lo, at, huge_tiny): ([f64; 4], [f64; 4], &[f64], f64) = if f32 {
        (
            [
                4.6364760399e-01_f32,
                7.8539812565e-01,
                9.8279368877e-01,
                1.5707962513e+00,
            ]
            .map(f64::from),
            [
                5.0121582440e-09_f32,
                3.7748947079e-08,
                3.4473217170e-08,
                7.5497894159e-08,
            ]
            .map(f64::from),
            &[
                3.3333328366e-01_f32 as f64,
                -1.9999158382e-01_f32 as f64,
                1.4253635705e-01_f32 as f64,
                -1.0648017377e-01_f32 as f64,
                6.1687607318e-02_f32 as f64,
            ],
            f64::from(f32::from_bits(0x0380_0000)),
        )
    } else {
        (
            [
                4.63647609000806093515e-01,
                7.85398163397448278999e-01,
                9.82793723247329054082e-01,
                1.57079632679489655800e+00,
            ],
            [
                2.26987774529616870924e-17,
                3.06161699786838301793e-17,
                1.39033110312309984516e-17,
                6.12323399573676603587e-17,
            ],
            &[
                3.33333333333329318027e-01,
                -1.99999999998764832476e-01,
                1.42857142725034663711e-01,
                -1.11111104054623557880e-01,
                9.09088713343650656196e-02,
                -7.69187620504482999495e-02,
                6.66107313738753120669e-02,
                -5.83357013379057348645e-02,
                4.97687799461593236017e-02,
                -3.65315727442169155270e-02,
                1.62858201153657823623e-02,
            ],
            f64::from_bits(0x0380_0000),
        )
    };
    // |x|'s word at 2^66 (2^26), 7/16, 2^-27 (2^-12), 19/16, 11/16, 39/16.
    let [huge_at, small_at, tiny_at, one_at, mid_at, far_at] = if f32 {
        [
            0x4c80_0000,
            0x3ee0_0000,
            0x3980_0000,
            0x3f98_0000,
            0x3f30_0000,
            0x401c_0000,
        ]
    } else {
        [
            0x4410_0000,
            0x3fdc_0000,
            0x3e40_0000,
            0x3ff3_0000,
            0x3fe6_0000,
            0x4003_8000,
        ]
    };
    let (ix, negative) = magnitude_word(m, x);
    let a = m.abs(x);
    let one = m.float(dtype, 1.0);
    let two = m.float(dtype, 2.0);
    let one_half = m.float(dtype, 1.5);
    // id 0: (2|x| - 1)/(2 + |x|); 1: (|x| - 1)/(|x| + 1);
    // 2: (|x| - 1.5)/(1 + 1.5|x|); 3: -1/|x|.
    let reduced = [
        {
            let t = m.mul(two, a);
            let n = m.sub(t, one);
            let d = m.add(two, a);
            m.div(n, d)
        },
        {
            let n = m.sub(a, one);
            let d = m.add(a, one);
            m.div(n, d)
        },
        {
            let n = m.sub(a, one_half);
            let t = m.mul(one_half, a);
            let d = m.add(one, t);
            m.div(n, d)
        },
        {
            let minus_one = m.float(dtype, -1.0);
            m.div(minus_one, a)
        },
    ];
    let below = [mid_at, one_at, far_at].map(|at| m.cmp_k(CmpOp::Lt, ix, at));
    let pick = |m: &mut Emit<'_, '_>, v: [Reg; 4]| {
        let r = m.select(below[2], v[2], v[3]);
        let r = m.select(below[1], v[1], r);
        m.select(below[0], v[0], r)
    };
    let small = m.cmp_k(CmpOp::Lt, ix, small_at);
    let xr = pick(m, reduced);
    let xr = m.select(small, x, xr);
    let z = m.mul(xr, xr);
    let w = m.mul(z, z);
    let even: Vec<f64> = at.iter().step_by(2).copied().collect();
    let odd: Vec<f64> = at.iter().skip(1).step_by(2).copied().collect();
    let s1 = {
        let p = m.horner(w, &even);
        m.mul(z, p)
    };
    let s2 = {
        let p = m.horner(w, &odd);
        m.mul(w, p)
    };
    let sum = m.add(s1, s2);
    let xs = m.mul(xr, sum);
    let small_value = m.sub(xr, xs);
    let reduced_value = {
        let his = hi.map(|v| m.float(dtype, v));
        let los = lo.map(|v| m.float(dtype, v));
        let h = pick(m, his);
        let l = pick(m, los);
        let d = m.sub(xs, l);
        let d = m.sub(d, xr);
        let v = m.sub(h, d);
        negate_if(m, negative, v)
    };
    let result = m.select(small, small_value, reduced_value);
    let tiny = m.cmp_k(CmpOp::Lt, ix, tiny_at);
    let result = m.select(tiny, x, result);
    // |x| from 2^66 (2^26): ±(atan(inf)hi + tiny); NaN: x.
    let huge = {
        let h = m.float(dtype, hi[3]);
        let t = m.float(dtype, huge_tiny);
        let v = m.add(h, t);
        negate_if(m, negative, v)
    };
    let is_huge = m.cmp_k(CmpOp::Ge, ix, huge_at);
    let result = m.select(is_huge, huge, result);
    let nan = m.cmp(CmpOp::Ne, x, x);
    m.select(nan, x, result)
}

/// The `libm` crate's `atan` (f64) and `atanf`.
pub(super) fn atan(lw: &mut Lowerer<'_>, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    atan_core(&mut Emit { lw, out }, x)
}

/// `asin`'s and `acos`'s rational `R(z) = z·P(z)/Q(z)`, in `z`'s dtype.
fn asin_r(m: &mut Emit<'_, '_>, z: Reg) -> Reg {
    let (p, q): (&[f64], &[f64]) = if m.ty(z) == DType::F32 {
        (
            &[
                1.6666586697e-01_f32 as f64,
                -4.2743422091e-02_f32 as f64,
                -8.6563630030e-03_f32 as f64,
            ],
            &[1.0, -7.0662963390e-01_f32 as f64],
        )
    } else {
        (
            &[
                1.66666666666666657415e-01,
                -3.25565818622400915405e-01,
                2.01212532134862925881e-01,
                -4.00555345006794114027e-02,
                7.91534994289814532176e-04,
                3.47933107596021167570e-05,
            ],
            &[
                1.0,
                -2.40339491173441421878e+00,
                2.02094576023350569471e+00,
                -6.88283971605453293030e-01,
                7.70381505559019352791e-02,
            ],
        )
    };
    let pz = m.horner(z, p);
    let pz = m.mul(z, pz);
    let qz = m.horner(z, q);
    m.div(pz, qz)
}

/// The `libm` crate's `asin` (f64; FreeBSD's `e_asin.c`) and `asinf`,
/// branch-free.
pub(super) fn asin(lw: &mut Lowerer<'_>, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    const PIO2_HI: f64 = 1.57079632679489655800e+00;
    const PIO2_LO: f64 = 6.12323399573676603587e-17;
    let mut m = Emit { lw, out };
    let m = &mut m;
    let dtype = m.ty(x);
    let f32 = dtype == DType::F32;
    let (ix, negative) = magnitude_word(m, x);
    let [one_at, half_at, normal_at, tiny_at, near_at] = if f32 {
        [0x3f80_0000, 0x3f00_0000, 0x0080_0000, 0x3980_0000, 0]
    } else {
        [
            0x3ff0_0000,
            0x3fe0_0000,
            0x0010_0000,
            0x3e50_0000,
            0x3fef_3333,
        ]
    };
    let a = m.abs(x);
    let one = m.float(dtype, 1.0);
    // |x| < 0.5: x + x·R(x²), x itself from 2^-1022 (2^-126) to 2^-26 (2^-12).
    let small = {
        let xx = m.mul(x, x);
        let r = asin_r(m, xx);
        let xr = m.mul(x, r);
        let v = m.add(x, xr);
        let from = m.cmp_k(CmpOp::Ge, ix, normal_at);
        let to = m.cmp_k(CmpOp::Lt, ix, tiny_at);
        let plain = m.and(from, to);
        m.select(plain, x, v)
    };
    // 0.5 <= |x| < 1, with z = (1 - |x|)/2 and s = sqrt(z).
    let half = m.float(dtype, 0.5);
    let d = m.sub(one, a);
    let z = m.mul(d, half);
    let r = asin_r(m, z);
    let large = if f32 {
        // In f64: pi/2 - 2(s + s·R(z)), with s = sqrt(z as f64).
        let z64 = m.cast(DType::F64, z);
        let s = m.let_(DType::F64, Expr::Unary(UnaryOp::Sqrt, z64));
        let r64 = m.cast(DType::F64, r);
        let sr = m.mul(s, r64);
        let t = m.add(s, sr);
        let two = m.f64(2.0);
        let t = m.mul(two, t);
        let pio2 = m.f64(1.570796326794896558e+00);
        let v = m.sub(pio2, t);
        let v = m.cast(DType::F32, v);
        negate_if(m, negative, v)
    } else {
        let s = m.let_(dtype, Expr::Unary(UnaryOp::Sqrt, z));
        let two = m.f64(2.0);
        let pio2_hi = m.f64(PIO2_HI);
        let pio2_lo = m.f64(PIO2_LO);
        // Above 0.975: pio2_hi - (2(s + s·r) - pio2_lo).
        let near = {
            let sr = m.mul(s, r);
            let t = m.add(s, sr);
            let t = m.mul(two, t);
            let t = m.sub(t, pio2_lo);
            m.sub(pio2_hi, t)
        };
        // Else with f + c = s (f its high word): 0.5·pio2_hi -
        // (2s·r - (pio2_lo - 2c) - (0.5·pio2_hi - 2f)).
        let far = {
            let f = m.cut_bits(s, !0xffff_ffff);
            let ff = m.mul(f, f);
            let zf = m.sub(z, ff);
            let sf = m.add(s, f);
            let c = m.div(zf, sf);
            let half_pio2 = m.f64(0.5 * PIO2_HI);
            let s2 = m.mul(two, s);
            let s2r = m.mul(s2, r);
            let c2 = m.mul(two, c);
            let lo_c = m.sub(pio2_lo, c2);
            let t1 = m.sub(s2r, lo_c);
            let f2 = m.mul(two, f);
            let t2 = m.sub(half_pio2, f2);
            let t = m.sub(t1, t2);
            m.sub(half_pio2, t)
        };
        let is_near = m.cmp_k(CmpOp::Ge, ix, near_at);
        let v = m.select(is_near, near, far);
        negate_if(m, negative, v)
    };
    let is_small = m.cmp_k(CmpOp::Lt, ix, half_at);
    let result = m.select(is_small, small, large);
    // |x| = 1: ±pi/2 (x·pio2 + 2^-120); beyond and NaN: 0/(x - x).
    let unit = if f32 {
        let x64 = m.cast(DType::F64, x);
        let pio2 = m.f64(1.570796326794896558e+00);
        let v = m.mul(x64, pio2);
        let t = m.f64(f64::from_bits(0x3870_0000_0000_0000));
        let v = m.add(v, t);
        m.cast(DType::F32, v)
    } else {
        let pio2_hi = m.f64(PIO2_HI);
        let v = m.mul(x, pio2_hi);
        let t = m.f64(f64::from_bits(0x3870_0000_0000_0000));
        m.add(v, t)
    };
    let outside = {
        let zero = m.float(dtype, 0.0);
        let d = m.sub(x, x);
        m.div(zero, d)
    };
    let is_unit = m.cmp(CmpOp::Eq, a, one);
    let beyond = m.select(is_unit, unit, outside);
    let ge_one = m.cmp_k(CmpOp::Ge, ix, one_at);
    m.select(ge_one, beyond, result)
}

/// The `libm` crate's `acos` (f64; FreeBSD's `e_acos.c`) and `acosf`,
/// branch-free.
pub(super) fn acos(lw: &mut Lowerer<'_>, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    let mut m = Emit { lw, out };
    let m = &mut m;
    let dtype = m.ty(x);
    let f32 = dtype == DType::F32;
    let (pio2_hi, pio2_lo, tiny, one_at, half_at, tiny_at, f_mask) = if f32 {
        (
            f64::from(1.5707962513e+00_f32),
            f64::from(7.5497894159e-08_f32),
            f64::from(f32::from_bits(0x0380_0000)),
            0x3f80_0000,
            0x3f00_0000,
            0x3280_0000,
            0xffff_f000u32 as i32 as i64,
        )
    } else {
        (
            1.57079632679489655800e+00,
            6.12323399573676603587e-17,
            f64::from_bits(0x3870_0000_0000_0000),
            0x3ff0_0000,
            0x3fe0_0000,
            0x3c60_0000,
            !0xffff_ffff,
        )
    };
    let (ix, negative) = magnitude_word(m, x);
    let a = m.abs(x);
    let one = m.float(dtype, 1.0);
    let two = m.float(dtype, 2.0);
    let hi = m.float(dtype, pio2_hi);
    let lo = m.float(dtype, pio2_lo);
    let t = m.float(dtype, tiny);
    let hi_t = m.add(hi, t);
    // |x| < 0.5: pio2_hi - (x - (pio2_lo - x·R(x²))); tiny: pio2_hi + tiny.
    let small = {
        let xx = m.mul(x, x);
        let r = asin_r(m, xx);
        let xr = m.mul(x, r);
        let d = m.sub(lo, xr);
        let d = m.sub(x, d);
        let v = m.sub(hi, d);
        let is_tiny = m.cmp_k(CmpOp::Le, ix, tiny_at);
        m.select(is_tiny, hi_t, v)
    };
    // 0.5 <= |x| < 1: z = (1 - |x|)/2 (= (1 + x)/2 for negative x), s =
    // sqrt(z).
    let half = m.float(dtype, 0.5);
    let d = m.sub(one, a);
    let z = m.mul(d, half);
    let s = m.let_(dtype, Expr::Unary(UnaryOp::Sqrt, z));
    let r = asin_r(m, z);
    let rs = m.mul(r, s);
    // x < -0.5: 2(pio2_hi - (s + (R·s - pio2_lo))).
    let below = {
        let w = m.sub(rs, lo);
        let sw = m.add(s, w);
        let d = m.sub(hi, sw);
        m.mul(two, d)
    };
    // x > 0.5: 2(df + (R·s + c)), df = s rounded down, c = (z - df²)/(s + df).
    let above = {
        let df = m.cut_bits(s, f_mask);
        let dd = m.mul(df, df);
        let zd = m.sub(z, dd);
        let sd = m.add(s, df);
        let c = m.div(zd, sd);
        let w = m.add(rs, c);
        let v = m.add(df, w);
        m.mul(two, v)
    };
    let large = m.select(negative, below, above);
    let is_small = m.cmp_k(CmpOp::Lt, ix, half_at);
    let result = m.select(is_small, small, large);
    // |x| = 1: 0, or 2·pio2_hi + tiny at -1; beyond and NaN: 0/(x - x).
    let unit = {
        let twice = m.mul(two, hi);
        let v = m.add(twice, t);
        let zero = m.float(dtype, 0.0);
        m.select(negative, v, zero)
    };
    let outside = {
        let zero = m.float(dtype, 0.0);
        let d = m.sub(x, x);
        m.div(zero, d)
    };
    let is_unit = m.cmp(CmpOp::Eq, a, one);
    let beyond = m.select(is_unit, unit, outside);
    let ge_one = m.cmp_k(CmpOp::Ge, ix, one_at);
    m.select(ge_one, beyond, result)
}

/// The `libm` crate's `asinh`, `acosh` and `atanh` (musl's), f64 and f32,
/// branch-free over inline `log`, `log1p` and `sqrt`: one `log` (of the
/// argument |x|'s range takes) and one `log1p` each.
fn inverse_hyperbolic(m: &mut Emit<'_, '_>, x: Reg, op: UnaryOp) -> Reg {
    let dtype = m.ty(x);
    let f32 = dtype == DType::F32;
    // |x|'s word at 2^26 (2^12), 2, 2^-26 (2^-12); 0.5 and 2^-32 (atanh).
    let [huge_at, two_at, small_at, half_at, tiny_at] = if f32 {
        [
            0x4580_0000,
            0x4000_0000,
            0x3980_0000,
            0x3f00_0000,
            0x2f80_0000,
        ]
    } else {
        [
            0x4190_0000,
            0x4000_0000,
            0x3e50_0000,
            0x3fe0_0000,
            0x3df0_0000,
        ]
    };
    let ln2 = if f32 {
        f64::from(std::f32::consts::LN_2)
    } else {
        std::f64::consts::LN_2
    };
    let (ix, negative) = magnitude_word(m, x);
    let a = m.abs(x);
    let one = m.float(dtype, 1.0);
    let two = m.float(dtype, 2.0);
    let log = |m: &mut Emit<'_, '_>, v: Reg| {
        if f32 {
            log_f32(m.lw, m.out, v)
        } else {
            log_f64(m.lw, m.out, v)
        }
    };
    // log(arg), or log(at_huge) + ln 2 from 2^26 (2^12) on.
    let wide_log = |m: &mut Emit<'_, '_>, at_huge: Reg, arg: Reg| {
        let huge = m.cmp_k(CmpOp::Ge, ix, huge_at);
        let arg = m.select(huge, at_huge, arg);
        let l = log(m, arg);
        let ln2 = m.float(dtype, ln2);
        let shifted = m.add(l, ln2);
        m.select(huge, shifted, l)
    };
    match op {
        UnaryOp::Asinh => {
            let aa = m.mul(a, a);
            let aa1 = m.add(aa, one);
            let root = m.let_(dtype, Expr::Unary(UnaryOp::Sqrt, aa1));
            // From 2: log(2|x| + 1/(sqrt(x² + 1) + |x|)); from 2^26:
            // log(|x|) + ln 2.
            let wide = {
                let d = m.add(root, a);
                let inv = m.div(one, d);
                let t = m.mul(two, a);
                let arg = m.add(t, inv);
                wide_log(m, a, arg)
            };
            // From 2^-26: log1p(|x| + x²/(sqrt(x² + 1) + 1)); below: |x|.
            let narrow = {
                let d = m.add(root, one);
                let q = m.div(aa, d);
                let arg = m.add(a, q);
                let l = log1p_core(m, arg);
                let small = m.cmp_k(CmpOp::Lt, ix, small_at);
                m.select(small, a, l)
            };
            let is_wide = m.cmp_k(CmpOp::Ge, ix, two_at);
            let v = m.select(is_wide, wide, narrow);
            negate_if(m, negative, v)
        }
        UnaryOp::Acosh => {
            // Below 2: log1p(x - 1 + sqrt((x - 1)² + 2(x - 1))).
            let near = {
                let xm = m.sub(x, one);
                let sq = m.mul(xm, xm);
                let t = m.mul(two, xm);
                let s = m.add(sq, t);
                let root = m.let_(dtype, Expr::Unary(UnaryOp::Sqrt, s));
                let arg = m.add(xm, root);
                log1p_core(m, arg)
            };
            // Below 2^26: log(2x - 1/(x + sqrt(x² - 1))); beyond:
            // log(x) + ln 2.
            let far = {
                let xx = m.mul(x, x);
                let s = m.sub(xx, one);
                let root = m.let_(dtype, Expr::Unary(UnaryOp::Sqrt, s));
                let d = m.add(x, root);
                let inv = m.div(one, d);
                let t = m.mul(two, x);
                let arg = m.sub(t, inv);
                wide_log(m, x, arg)
            };
            let is_near = m.cmp_k(CmpOp::Lt, ix, two_at);
            m.select(is_near, near, far)
        }
        _ => {
            // Below 0.5: log1p(2|x| + 2x²/(1 - |x|)) / 2 (|x| itself below
            // 2^-32); else log1p(2(|x|/(1 - |x|))) / 2.
            let d = m.sub(one, a);
            let t2 = m.mul(two, a);
            let below = {
                let t = m.mul(t2, a);
                let q = m.div(t, d);
                m.add(t2, q)
            };
            let above = {
                let q = m.div(a, d);
                m.mul(two, q)
            };
            let is_below = m.cmp_k(CmpOp::Lt, ix, half_at);
            let arg = m.select(is_below, below, above);
            let l = log1p_core(m, arg);
            let half = m.float(dtype, 0.5);
            let v = m.mul(half, l);
            let tiny = m.cmp_k(CmpOp::Lt, ix, tiny_at);
            let v = m.select(tiny, a, v);
            negate_if(m, negative, v)
        }
    }
}

/// The `libm` crate's `asinh`, `acosh`, `atanh` and their `f` forms.
pub(super) fn asinh(lw: &mut Lowerer<'_>, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    inverse_hyperbolic(&mut Emit { lw, out }, x, UnaryOp::Asinh)
}

/// See [`asinh`].
pub(super) fn acosh(lw: &mut Lowerer<'_>, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    inverse_hyperbolic(&mut Emit { lw, out }, x, UnaryOp::Acosh)
}

/// See [`asinh`].
pub(super) fn atanh(lw: &mut Lowerer<'_>, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    inverse_hyperbolic(&mut Emit { lw, out }, x, UnaryOp::Atanh)
}

/// The `libm` crate's `cbrtf` (FreeBSD's `s_cbrtf.c`), branch-free: a
/// rough root from the bits (|x|'s word / 3 plus a bias; subnormals scaled
/// by 2^24 first), then two Newton steps in f64.
pub(super) fn cbrt_f32(lw: &mut Lowerer<'_>, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    const B1: i64 = 709_958_130;
    const B2: i64 = 642_849_266;
    let mut m = Emit { lw, out };
    let m = &mut m;
    let bits = m.bitcast(DType::I32, x);
    let hx = m.band_k(bits, 0x7fff_ffff);
    let subnormal = m.cmp_k(CmpOp::Lt, hx, 0x0080_0000);
    let up = m.f32(f32::from_bits(0x4b80_0000));
    let scaled = m.mul(x, up);
    let scaled_bits = m.bitcast(DType::I32, scaled);
    let ui = m.select(subnormal, scaled_bits, bits);
    let word = m.band_k(ui, 0x7fff_ffff);
    let three = m.i32(3);
    let third = m.bin(BinaryOp::Div, word, three);
    let bias = {
        let (b1, b2) = (m.i32(B1 as i32), m.i32(B2 as i32));
        m.select(subnormal, b2, b1)
    };
    let word = m.add(third, bias);
    let sign = m.band_k(ui, i64::from(i32::MIN));
    let ui = m.bin(BinaryOp::BOr, sign, word);
    let t = m.bitcast(DType::F32, ui);
    let mut t = m.cast(DType::F64, t);
    let x64 = m.cast(DType::F64, x);
    // Twice: t = t·(x + x + t³)/(x + t³ + t³).
    for _ in 0..2 {
        let tt = m.mul(t, t);
        let r = m.mul(tt, t);
        let xx = m.add(x64, x64);
        let num = m.add(xx, r);
        let num = m.mul(t, num);
        let den = m.add(x64, r);
        let den = m.add(den, r);
        t = m.div(num, den);
    }
    let result = m.cast(DType::F32, t);
    // ±0: x; inf and NaN: x + x.
    let zero = m.cmp_k(CmpOp::Eq, hx, 0);
    let result = m.select(zero, x, result);
    let special = m.cmp_k(CmpOp::Ge, hx, 0x7f80_0000);
    let doubled = m.add(x, x);
    m.select(special, doubled, result)
}

/// The `libm` crate's `log` (f64; FreeBSD's `e_log.c`), branch-free.
pub(super) fn log_f64(lw: &mut Lowerer<'_>, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    const LN2_HI: f64 = 6.93147180369123816490e-01;
    const LN2_LO: f64 = 1.90821492927058770002e-10;
    const LG1: f64 = 6.666666666666735130e-01;
    const LG2: f64 = 3.999999999940941908e-01;
    const LG3: f64 = 2.857142874366239149e-01;
    const LG4: f64 = 2.222219843214978396e-01;
    const LG5: f64 = 1.818357216161805012e-01;
    const LG6: f64 = 1.531383769920937332e-01;
    const LG7: f64 = 1.479819860511658591e-01;
    let mut m = Emit { lw, out };
    let (reduced, dk, flags) = log_parts_f64(&mut m, x);
    let result = m.log_core(
        reduced,
        dk,
        (&[LG2, LG4, LG6], &[LG1, LG3, LG5, LG7]),
        [LN2_HI, LN2_LO],
    );
    m.log_specials(x, result, flags)
}

/// `log`'s reduction (f64) of `x` into [sqrt(2)/2, sqrt(2)] and its `k` as
/// an f64, with the special cases' conditions for `log_specials`, which
/// `log2` and `log10` share.
fn log_parts_f64(m: &mut Emit<'_, '_>, x: Reg) -> (Reg, Reg, [Reg; 4]) {
    let c32 = m.i64(32);
    let high = |m: &mut Emit<'_, '_>, v: Reg| {
        let bits = m.bitcast(DType::I64, v);
        (bits, m.bin(BinaryOp::ShrLogical, bits, c32))
    };
    let (ui, hx) = high(m, x);
    // x < 2^-1022 or negative: ±0, negatives and subnormals; a subnormal is
    // scaled by 2^54 first (k = -54).
    let low_or_negative = {
        let normal = m.i64(0x0010_0000);
        let below = m.cmp(CmpOp::Lt, hx, normal);
        let sign = m.i64(0x8000_0000);
        let negative = m.cmp(CmpOp::Ge, hx, sign);
        m.bin(BinaryOp::Or, below, negative)
    };
    let up = m.f64(f64::from_bits(0x4350_0000_0000_0000));
    let scaled = m.mul(x, up);
    let x1 = m.select(low_or_negative, scaled, x);
    let k0 = {
        let (minus54, zero) = (m.i64(-54), m.i64(0));
        m.select(low_or_negative, minus54, zero)
    };
    let (ui1, hx1) = high(m, x1);
    // Reduce x into [sqrt(2)/2, sqrt(2)]: k from the exponent of the high
    // word moved by 1 - sqrt(2)/2, the high word rebuilt around 0x3fe6a09e.
    let moved = {
        let by = m.i64(0x3ff0_0000 - 0x3fe6_a09e);
        m.add(hx1, by)
    };
    let k = {
        let c20 = m.i64(20);
        let e = m.bin(BinaryOp::ShrLogical, moved, c20);
        let bias = m.i64(0x3ff);
        let e = m.sub(e, bias);
        m.add(k0, e)
    };
    let reduced = {
        let mask = m.i64(0x000f_ffff);
        let frac = m.bin(BinaryOp::BAnd, moved, mask);
        let base = m.i64(0x3fe6_a09e);
        let hx2 = m.add(frac, base);
        let hi = m.bin(BinaryOp::Shl, hx2, c32);
        let low_mask = m.i64(0xffff_ffff);
        let lo = m.bin(BinaryOp::BAnd, ui1, low_mask);
        let bits = m.bin(BinaryOp::BOr, hi, lo);
        m.bitcast(DType::F64, bits)
    };
    // k as f64 through i32, which converts packed on x86-64 (|k| < 1100).
    let k32 = m.cast(DType::I32, k);
    let dk = m.cast(DType::F64, k32);
    // Exactly 1; +inf and NaN (a positive high word from 0x7ff00000);
    // negatives (a high word from the sign bit); ±0.
    let is_one = {
        let at = m.i64(0x3ff0_0000_0000_0000);
        m.cmp(CmpOp::Eq, ui, at)
    };
    let special = {
        let at = m.i64(0x7ff0_0000);
        m.cmp(CmpOp::Ge, hx, at)
    };
    let negative = {
        let sign = m.i64(0x8000_0000);
        m.cmp(CmpOp::Ge, hx, sign)
    };
    let is_zero = {
        let c1 = m.i64(1);
        let twice = m.bin(BinaryOp::Shl, ui, c1);
        let z = m.i64(0);
        m.cmp(CmpOp::Eq, twice, z)
    };
    (reduced, dk, [is_one, special, negative, is_zero])
}

/// The `libm` crate's `expf` (FreeBSD's `e_expf.c`), branch-free, as
/// [`exp_f64`].
pub(super) fn exp_f32(lw: &mut Lowerer<'_>, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    const LN2_HI: f32 = 6.9314575195e-01;
    const LN2_LO: f32 = 1.4286067653e-06;
    const INV_LN2: f32 = 1.4426950216e+00;
    const P1: f32 = 1.6666625440e-1;
    const P2: f32 = -2.7667332906e-3;
    let mut m = Emit { lw, out };
    let bits = m.bitcast(DType::I32, x);
    let c31 = m.i32(31);
    let sign = m.bin(BinaryOp::ShrLogical, bits, c31);
    let mask = m.i32(0x7fff_ffff);
    let hx = m.bin(BinaryOp::BAnd, bits, mask);
    let negative = {
        let one = m.i32(1);
        m.cmp(CmpOp::Eq, sign, one)
    };
    let above = |m: &mut Emit<'_, '_>, at: i32| {
        let at = m.i32(at);
        m.cmp(CmpOp::Gt, hx, at)
    };
    // k = trunc(INV_LN2*x ± 0.5) (|x| > 1.5 ln2), 1 - 2*sign (> 0.5 ln2), 0.
    let kf = {
        let inv = m.f32(INV_LN2);
        let scaled = m.mul(inv, x);
        let (plus, minus) = (m.f32(0.5), m.f32(-0.5));
        let half = m.select(negative, minus, plus);
        let t = m.add(scaled, half);
        let k_far = m.let_(DType::F32, Expr::Unary(UnaryOp::Trunc, t));
        let s = m.cast(DType::F32, sign);
        let one = m.f32(1.0);
        let k_near = m.sub(one, s);
        let k_near = m.sub(k_near, s);
        let far = above(&mut m, 0x3f85_1592);
        let k = m.select(far, k_far, k_near);
        let reduce = above(&mut m, 0x3eb1_7218);
        let zero = m.f32(0.0);
        m.select(reduce, k, zero)
    };
    let k = m.integer_of(kf);
    let y = m.exp_core(
        x,
        kf,
        [f64::from(LN2_HI), f64::from(LN2_LO)],
        &[f64::from(P1), f64::from(P2)],
    );
    let mut result = m.scalbn_once(y, k);
    // |x| <= 2^-14: 1 + x.
    let one = m.f32(1.0);
    let tiny = {
        let at = m.i32(0x3900_0000);
        m.cmp(CmpOp::Le, hx, at)
    };
    let near_one = m.add(one, x);
    result = m.select(tiny, near_one, result);
    // x <= -103.97...: 0.
    let under = {
        let at = m.i32(0x42cf_f1b5);
        let far = m.cmp(CmpOp::Ge, hx, at);
        m.bin(BinaryOp::And, negative, far)
    };
    let zero = m.f32(0.0);
    result = m.select(under, zero, result);
    // x >= 88.72...: x * 2^127 (inf).
    let over = {
        let at = m.i32(0x42b1_7218);
        let far = m.cmp(CmpOp::Ge, hx, at);
        let t = m.let_(DType::Bool, Expr::Const(Scalar::Bool(true)));
        let positive = m.bin(BinaryOp::Xor, negative, t);
        m.bin(BinaryOp::And, positive, far)
    };
    let up = m.f32(f32::from_bits(0x7f00_0000));
    let inf = m.mul(x, up);
    result = m.select(over, inf, result);
    // NaN: x.
    let nan = above(&mut m, 0x7f80_0000);
    m.select(nan, x, result)
}

/// The `libm` crate's `logf` (FreeBSD's `e_logf.c`), branch-free, as
/// [`log_f64`].
pub(super) fn log_f32(lw: &mut Lowerer<'_>, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    const LN2_HI: f32 = 6.9313812256e-01;
    const LN2_LO: f32 = 9.0580006145e-06;
    const LG1: f32 = 0.66666662693;
    const LG2: f32 = 0.40000972152;
    const LG3: f32 = 0.28498786688;
    const LG4: f32 = 0.24279078841;
    let mut m = Emit { lw, out };
    let (reduced, dk, flags) = log_parts_f32(&mut m, x);
    let result = m.log_core(
        reduced,
        dk,
        (
            &[f64::from(LG2), f64::from(LG4)],
            &[f64::from(LG1), f64::from(LG3)],
        ),
        [f64::from(LN2_HI), f64::from(LN2_LO)],
    );
    m.log_specials(x, result, flags)
}

/// `logf`'s reduction of `x` into [sqrt(2)/2, sqrt(2)] and its `k` as an
/// f32, with the special cases' conditions, which `log2f` and `log10f`
/// share.
fn log_parts_f32(m: &mut Emit<'_, '_>, x: Reg) -> (Reg, Reg, [Reg; 4]) {
    // The bits as a signed i32: negatives (the sign bit) are below 0.
    let ix = m.bitcast(DType::I32, x);
    let low_or_negative = {
        let normal = m.i32(0x0080_0000);
        m.cmp(CmpOp::Lt, ix, normal)
    };
    let up = m.f32(f32::from_bits(0x4c00_0000));
    let scaled = m.mul(x, up);
    let x1 = m.select(low_or_negative, scaled, x);
    let k0 = {
        let (minus25, zero) = (m.i32(-25), m.i32(0));
        m.select(low_or_negative, minus25, zero)
    };
    let ix1 = m.bitcast(DType::I32, x1);
    // Reduce x into [sqrt(2)/2, sqrt(2)].
    let moved = {
        let by = m.i32(0x3f80_0000 - 0x3f35_04f3);
        m.add(ix1, by)
    };
    let k = {
        let c23 = m.i32(23);
        let e = m.bin(BinaryOp::ShrLogical, moved, c23);
        let bias = m.i32(0x7f);
        let e = m.sub(e, bias);
        m.add(k0, e)
    };
    let reduced = {
        let mask = m.i32(0x007f_ffff);
        let frac = m.bin(BinaryOp::BAnd, moved, mask);
        let base = m.i32(0x3f35_04f3);
        let bits = m.add(frac, base);
        m.bitcast(DType::F32, bits)
    };
    let dk = m.cast(DType::F32, k);
    // Exactly 1; +inf and positive NaNs; negatives (below 0 as an i32); ±0.
    let is_one = {
        let at = m.i32(0x3f80_0000);
        m.cmp(CmpOp::Eq, ix, at)
    };
    let special = {
        let at = m.i32(0x7f80_0000);
        m.cmp(CmpOp::Ge, ix, at)
    };
    let negative = {
        let z = m.i32(0);
        m.cmp(CmpOp::Lt, ix, z)
    };
    let is_zero = {
        let c1 = m.i32(1);
        let twice = m.bin(BinaryOp::Shl, ix, c1);
        let z = m.i32(0);
        m.cmp(CmpOp::Eq, twice, z)
    };
    (reduced, dk, [is_one, special, negative, is_zero])
}

/// The high word of an `f64`'s bits without the sign, as an `i64`, and
/// whether the sign bit is set.
fn high_word(m: &mut Emit<'_, '_>, x: Reg) -> (Reg, Reg) {
    let bits = m.bitcast(DType::I64, x);
    let c32 = m.i64(32);
    let high = m.bin(BinaryOp::ShrLogical, bits, c32);
    let ix = m.band_k(high, 0x7fff_ffff);
    let negative = m.cmp_k(CmpOp::Lt, bits, 0);
    (ix, negative)
}

/// The biased exponent of an `f64` (`(bits >> 52) & 0x7ff`).
fn exponent_f64(m: &mut Emit<'_, '_>, y: Reg) -> Reg {
    let bits = m.bitcast(DType::I64, y);
    let c52 = m.i64(52);
    let e = m.bin(BinaryOp::ShrLogical, bits, c52);
    m.band_k(e, 0x7ff)
}

/// The `libm` crate's `rem_pio2` (FreeBSD's `e_rem_pio2.c`) for `|x|`
/// above pi/4 and below 2^20·pi/2 (`ix`: the high word of `|x|`):
/// `x = n·pi/2 + y0 + y1`, as `(n & 3, y0, y1)`. Below 9pi/4 the scalar code subtracts a
/// fixed multiple of pi/2 once (except next to multiples of pi/2, where it
/// cancels and the general path runs); that is the general path's first
/// round with `n` given instead of rounded, so both share one computation
/// and only the general path takes further rounds.
fn rem_pio2(m: &mut Emit<'_, '_>, x: Reg, ix: Reg, negative: Reg) -> (Reg, Reg, Reg) {
    const PIO2_1: f64 = 1.57079632673412561417e+00;
    const PIO2_1T: f64 = 6.07710050650619224932e-11;
    const PIO2_2: f64 = 6.07710050630396597660e-11;
    const PIO2_2T: f64 = 2.02226624879595063154e-21;
    const PIO2_3: f64 = 2.02226624871116645580e-21;
    const PIO2_3T: f64 = 8.47842766036889956997e-32;
    // The fixed multiple below 9pi/4: 1 to 3pi/4, 2 to 5pi/4, 3 to 7pi/4,
    // else 4, with x's sign.
    let fixed = {
        let mut j = m.f64(4.0);
        for (at, k) in [(0x4015_fdbc, 3.0), (0x400f_6a7a, 2.0), (0x4002_d97c, 1.0)] {
            let below = m.cmp_k(CmpOp::Le, ix, at);
            let k = m.f64(k);
            j = m.select(below, k, j);
        }
        negate_if(m, negative, j)
    };
    let small = {
        let below = m.cmp_k(CmpOp::Le, ix, 0x401c_463b);
        // |x| ~= pi/2, pi (the low 20 bits of the high word, below 5pi/4),
        // 3pi/2 and 2pi take the general path.
        let low = m.band_k(ix, 0xfffff);
        let near = m.cmp_k(CmpOp::Eq, low, 0x921fb);
        let first = m.cmp_k(CmpOp::Le, ix, 0x400f_6a7a);
        let mut cancels = m.and(near, first);
        for at in [0x4012_d97c, 0x4019_21fb] {
            let hit = m.cmp_k(CmpOp::Eq, ix, at);
            cancels = m.or(cancels, hit);
        }
        let general = m.not(cancels);
        m.and(below, general)
    };
    let rounded = m.rint_by_pio2(x);
    let f_n = m.select(small, fixed, rounded);
    // One round of `r = t - f_n*c`, `w = f_n*ct - ((t - r) - f_n*c)`,
    // `y0 = r - w` (the first round has `w = f_n*ct`).
    let round = |m: &mut Emit<'_, '_>, t: Reg, [c, ct]: [f64; 2], first: bool| {
        let c = m.f64(c);
        let fc = m.mul(f_n, c);
        let r = m.sub(t, fc);
        let ct = m.f64(ct);
        let fct = m.mul(f_n, ct);
        let w = if first {
            fct
        } else {
            let d = m.sub(t, r);
            let d = m.sub(d, fc);
            m.sub(fct, d)
        };
        let y0 = m.sub(r, w);
        (r, w, y0)
    };
    let (r1, w1, y01) = round(m, x, [PIO2_1, PIO2_1T], true);
    let (r2, w2, y02) = round(m, r1, [PIO2_2, PIO2_2T], false);
    let (r3, w3, y03) = round(m, r2, [PIO2_3, PIO2_3T], false);
    // Another round while the result lost more than 16 (then 49) bits to
    // cancellation: `ex - ey` with `ex` the high word's exponent field.
    let c20 = m.i64(20);
    let ex = m.bin(BinaryOp::ShrLogical, ix, c20);
    let lost = |m: &mut Emit<'_, '_>, y0: Reg, bits: i64| {
        let ey = exponent_f64(m, y0);
        let d = m.sub(ex, ey);
        m.cmp_k(CmpOp::Gt, d, bits)
    };
    let second = {
        let general = m.not(small);
        let lost = lost(m, y01, 16);
        m.and(general, lost)
    };
    let third = {
        let lost = lost(m, y02, 49);
        m.and(second, lost)
    };
    let pick = |m: &mut Emit<'_, '_>, [a, b, c]: [Reg; 3]| {
        let v = m.select(second, b, a);
        m.select(third, c, v)
    };
    let r = pick(m, [r1, r2, r3]);
    let w = pick(m, [w1, w2, w3]);
    let y0 = pick(m, [y01, y02, y03]);
    let d = m.sub(r, y0);
    let y1 = m.sub(d, w);
    let n = m.integer_of(f_n);
    let q = m.band_k(n, 3);
    (q, y0, y1)
}

/// The `libm` crate's `k_sin` on `x + y` (|x| <= pi/4), both forms: the
/// first (`iy = 0`) for an unreduced `x`, the second for a reduced one.
fn k_sin(m: &mut Emit<'_, '_>, x: Reg, y: Reg) -> (Reg, Reg) {
    const S1: f64 = -1.66666666666666324348e-01;
    const S2: f64 = 8.33333333332248946124e-03;
    const S3: f64 = -1.98412698298579493134e-04;
    const S4: f64 = 2.75573137070700676789e-06;
    const S5: f64 = -2.50507602534068634195e-08;
    const S6: f64 = 1.58969099521155010221e-10;
    let z = m.mul(x, x);
    let w = m.mul(z, z);
    let p = m.horner(z, &[S2, S3, S4]);
    let zw = m.mul(z, w);
    let q = m.horner(z, &[S5, S6]);
    let t = m.mul(zw, q);
    let r = m.add(p, t);
    let v = m.mul(z, x);
    let s1 = m.f64(S1);
    // x + v*(S1 + z*r)
    let unreduced = {
        let zr = m.mul(z, r);
        let t = m.add(s1, zr);
        let t = m.mul(v, t);
        m.add(x, t)
    };
    // x - ((z*(0.5*y - v*r) - y) - v*S1)
    let reduced = {
        let half = m.f64(0.5);
        let hy = m.mul(half, y);
        let vr = m.mul(v, r);
        let t = m.sub(hy, vr);
        let t = m.mul(z, t);
        let t = m.sub(t, y);
        let vs = m.mul(v, s1);
        let t = m.sub(t, vs);
        m.sub(x, t)
    };
    (unreduced, reduced)
}

/// The `libm` crate's `k_cos` on `x + y` (|x| <= pi/4).
fn k_cos(m: &mut Emit<'_, '_>, x: Reg, y: Reg) -> Reg {
    const C1: f64 = 4.16666666666666019037e-02;
    const C2: f64 = -1.38888888888741095749e-03;
    const C3: f64 = 2.48015872894767294178e-05;
    const C4: f64 = -2.75573143513906633035e-07;
    const C5: f64 = 2.08757232129817482790e-09;
    const C6: f64 = -1.13596475577881948265e-11;
    let z = m.mul(x, x);
    let w = m.mul(z, z);
    let p = m.horner(z, &[C1, C2, C3]);
    let a = m.mul(z, p);
    let ww = m.mul(w, w);
    let q = m.horner(z, &[C4, C5, C6]);
    let b = m.mul(ww, q);
    let r = m.add(a, b);
    let half = m.f64(0.5);
    let hz = m.mul(half, z);
    let one = m.f64(1.0);
    let w = m.sub(one, hz);
    // w + (((1 - w) - hz) + (z*r - x*y))
    let t = m.sub(one, w);
    let t = m.sub(t, hz);
    let zr = m.mul(z, r);
    let xy = m.mul(x, y);
    let u = m.sub(zr, xy);
    let t = m.add(t, u);
    m.add(w, t)
}

/// What `sin` and `cos` (f64) share: `|x| <= pi/4` (no reduction), the
/// reduction's quadrant, `k_sin`'s two forms and `k_cos` of the reduced
/// argument (of `x` itself below pi/4), and the masks for NaN/inf and for the
/// huge arguments left to the `libm` function.
struct Trig {
    direct: Reg,
    quadrant: Reg,
    sin_unreduced: Reg,
    sin: Reg,
    cos: Reg,
    ix: Reg,
    special: Reg,
    rare: Reg,
}

fn trig_f64(m: &mut Emit<'_, '_>, x: Reg) -> Trig {
    let (ix, negative) = high_word(m, x);
    let direct = m.cmp_k(CmpOp::Le, ix, 0x3fe9_21fb);
    let (q, y0, y1) = rem_pio2(m, x, ix, negative);
    let y0 = m.select(direct, x, y0);
    let zero = m.f64(0.0);
    let y1 = m.select(direct, zero, y1);
    let zero_q = m.i32(0);
    let quadrant = m.select(direct, zero_q, q);
    let (sin_unreduced, sin) = k_sin(m, y0, y1);
    let cos = k_cos(m, y0, y1);
    let special = m.cmp_k(CmpOp::Ge, ix, 0x7ff0_0000);
    let rare = {
        let huge = m.cmp_k(CmpOp::Ge, ix, 0x4139_21fb);
        let finite = m.not(special);
        m.and(huge, finite)
    };
    Trig {
        direct,
        quadrant,
        sin_unreduced,
        sin,
        cos,
        ix,
        special,
        rare,
    }
}

/// `value`, or `-value` where `negate`.
fn negate_if(m: &mut Emit<'_, '_>, negate: Reg, value: Reg) -> Reg {
    let minus = m.neg(value);
    m.select(negate, minus, value)
}

/// Whether `q & bit` is set, as a `bool`.
fn quadrant_bit(m: &mut Emit<'_, '_>, q: Reg, bit: i64) -> Reg {
    let b = m.band_k(q, bit);
    m.cmp_k(CmpOp::Ne, b, 0)
}

/// The kernel (`cos` when true) and sign of the reduced argument's result in
/// quadrant `q` (`n & 3`): sin, cos, -sin, -cos for `sin`; cos, -sin, -cos,
/// sin for `cos`.
fn quadrant_choice(m: &mut Emit<'_, '_>, op: UnaryOp, q: Reg) -> (Reg, Reg) {
    let odd = quadrant_bit(m, q, 1);
    if op == UnaryOp::Sin {
        (odd, quadrant_bit(m, q, 2))
    } else {
        let one = m.i32(1);
        let next = m.add(q, one);
        (m.not(odd), quadrant_bit(m, next, 2))
    }
}

/// What every `sin`/`cos` ends with: NaN (`x - x`) for NaN and infinities,
/// and the `libm` function for the huge arguments it reduces.
fn trig_tail(
    m: &mut Emit<'_, '_>,
    op: UnaryOp,
    x: Reg,
    [special, rare]: [Reg; 2],
    result: Reg,
) -> Reg {
    let nan = m.sub(x, x);
    let result = m.select(special, nan, result);
    m.fallback(op, x, rare, result)
}

/// The `libm` crate's `sin` (f64; FreeBSD's `s_sin.c`), branch-free but for
/// arguments from 2^20·pi/2 on, which the `libm` function reduces.
pub(super) fn sin_f64(lw: &mut Lowerer<'_>, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    let mut m = Emit { lw, out };
    let t = trig_f64(&mut m, x);
    let (use_cos, negate) = quadrant_choice(&mut m, UnaryOp::Sin, t.quadrant);
    let k = m.select(use_cos, t.cos, t.sin);
    let reduced = negate_if(&mut m, negate, k);
    // Below pi/4: x itself below 2^-26, else k_sin's first form.
    let tiny = m.cmp_k(CmpOp::Lt, t.ix, 0x3e50_0000);
    let direct = m.select(tiny, x, t.sin_unreduced);
    let result = m.select(t.direct, direct, reduced);
    trig_tail(&mut m, UnaryOp::Sin, x, [t.special, t.rare], result)
}

/// The `libm` crate's `cos` (f64; FreeBSD's `s_cos.c`), as [`sin_f64`].
pub(super) fn cos_f64(lw: &mut Lowerer<'_>, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    let mut m = Emit { lw, out };
    let t = trig_f64(&mut m, x);
    // Below pi/4 the quadrant is 0: k_cos of x.
    let (use_cos, negate) = quadrant_choice(&mut m, UnaryOp::Cos, t.quadrant);
    let k = m.select(use_cos, t.cos, t.sin);
    let result = negate_if(&mut m, negate, k);
    // Below 2^-27·sqrt(2): 1.
    let tiny = m.cmp_k(CmpOp::Lt, t.ix, 0x3e46_a09e);
    let one = m.f64(1.0);
    let result = m.select(tiny, one, result);
    trig_tail(&mut m, UnaryOp::Cos, x, [t.special, t.rare], result)
}

/// The `libm` crate's `k_sinf` and `k_cosf` (f64 arithmetic, `f32` results).
fn k_sinf_cosf(m: &mut Emit<'_, '_>, x: Reg) -> (Reg, Reg) {
    const S1: f64 = -0.166666666416265235595;
    const S2: f64 = 0.0083333293858894631756;
    const S3: f64 = -0.000198393348360966317347;
    const S4: f64 = 0.0000027183114939898219064;
    const C0: f64 = -0.499999997251031003120;
    const C1: f64 = 0.0416666233237390631894;
    const C2: f64 = -0.00138867637746099294692;
    const C3: f64 = 0.0000243904487962774090654;
    let z = m.mul(x, x);
    let w = m.mul(z, z);
    // ((x + s*(S1 + z*S2)) + s*w*r), r = S3 + z*S4, s = z*x
    let sin = {
        let r = m.horner(z, &[S3, S4]);
        let s = m.mul(z, x);
        let p = m.horner(z, &[S1, S2]);
        let t = m.mul(s, p);
        let a = m.add(x, t);
        let sw = m.mul(s, w);
        let b = m.mul(sw, r);
        m.add(a, b)
    };
    // (((1 + z*C0) + w*C1) + (w*z)*r), r = C2 + z*C3
    let cos = {
        let r = m.horner(z, &[C2, C3]);
        let a = m.horner(z, &[1.0, C0]);
        let c1 = m.f64(C1);
        let wc = m.mul(w, c1);
        let a = m.add(a, wc);
        let wz = m.mul(w, z);
        let b = m.mul(wz, r);
        m.add(a, b)
    };
    (m.cast(DType::F32, sin), m.cast(DType::F32, cos))
}

/// Which kernel (`k_cosf` or `k_sinf`) and sign `sinf` or `cosf` takes on
/// each range of `|x|` (the scalar code's branches), and the kernel's
/// argument: below 9pi/4 `x` minus a multiple of pi/2 held in one `f64`,
/// beyond it the `rem_pio2f` reduction.
struct TrigF {
    /// `|x| <= pi/4`.
    direct: Reg,
    /// `|x|` below 9pi/4 and above pi/4, by quarter: `(<= 3pi/4, <= 5pi/4,
    /// <= 7pi/4, above)`.
    quarter: [Reg; 4],
    negative: Reg,
    /// `rem_pio2f`'s `n & 3` (beyond 9pi/4).
    quadrant: Reg,
    sin: Reg,
    cos: Reg,
    ix: Reg,
    special: Reg,
    rare: Reg,
}

/// `sinf`/`cosf`/`tanf`'s argument reduction: the f64 argument of their
/// kernels (x, x ∓ k·pi/2 below 9pi/4, rem_pio2f's y beyond) and the
/// conditions that choose among them.
struct ReducedF {
    arg: Reg,
    direct: Reg,
    quarter: [Reg; 4],
    negative: Reg,
    quadrant: Reg,
    ix: Reg,
    special: Reg,
    rare: Reg,
}

fn reduce_f32(m: &mut Emit<'_, '_>, x: Reg) -> ReducedF {
    use std::f64::consts::FRAC_PI_2;
    const PIO2_1: f64 = 1.57079631090164184570e+00;
    const PIO2_1T: f64 = 1.58932547735281966916e-08;
    let x64 = m.cast(DType::F64, x);
    let bits = m.bitcast(DType::I32, x);
    let negative = m.cmp_k(CmpOp::Lt, bits, 0);
    let ix = m.band_k(bits, 0x7fff_ffff);
    let direct = m.cmp_k(CmpOp::Le, ix, 0x3f49_0fda);
    let fixed_range = m.cmp_k(CmpOp::Le, ix, 0x40e2_31d5);
    // The quarters' upper ends: 3pi/4, 5pi/4, 7pi/4.
    let le = [0x4016_cbe3, 0x407b_53d1, 0x40af_eddf].map(|at| m.cmp_k(CmpOp::Le, ix, at));
    let quarter = [
        le[0],
        {
            let above = m.not(le[0]);
            m.and(above, le[1])
        },
        {
            let above = m.not(le[1]);
            m.and(above, le[2])
        },
        m.not(le[2]),
    ];
    // x - k·pi/2 (k = 1..4, with x's sign) below 9pi/4.
    let shifted = {
        let mut c = m.f64(4.0 * FRAC_PI_2);
        for (i, k) in [(2, 3.0), (1, 2.0), (0, 1.0)] {
            let v = m.f64(k * FRAC_PI_2);
            c = m.select(le[i], v, c);
        }
        let c = negate_if(m, negative, c);
        m.sub(x64, c)
    };
    // rem_pio2f: n = rint(x·2/pi), y = x - n·pio2_1 - n·pio2_1t.
    let f_n = m.rint_by_pio2(x64);
    let reduced = {
        let c = m.f64(PIO2_1);
        let t = m.mul(f_n, c);
        let y = m.sub(x64, t);
        let ct = m.f64(PIO2_1T);
        let t = m.mul(f_n, ct);
        m.sub(y, t)
    };
    let n = m.integer_of(f_n);
    let quadrant = m.band_k(n, 3);
    let arg = m.select(fixed_range, shifted, reduced);
    let arg = m.select(direct, x64, arg);
    let special = m.cmp_k(CmpOp::Ge, ix, 0x7f80_0000);
    let rare = {
        let huge = m.cmp_k(CmpOp::Ge, ix, 0x4dc9_0fdb);
        let finite = m.not(special);
        m.and(huge, finite)
    };
    // Below 9pi/4 the quarters decide, not the quadrant.
    let in_quarters = {
        let reduced_range = m.not(direct);
        m.and(fixed_range, reduced_range)
    };
    let quarter = quarter.map(|q| m.and(q, in_quarters));
    ReducedF {
        arg,
        direct,
        quarter,
        negative,
        quadrant,
        ix,
        special,
        rare,
    }
}

fn trig_f32(m: &mut Emit<'_, '_>, x: Reg) -> TrigF {
    let r = reduce_f32(m, x);
    let (sin, cos) = k_sinf_cosf(m, r.arg);
    TrigF {
        direct: r.direct,
        quarter: r.quarter,
        negative: r.negative,
        quadrant: r.quadrant,
        sin,
        cos,
        ix: r.ix,
        special: r.special,
        rare: r.rare,
    }
}

/// Where a quarter below 9pi/4 negates its kernel's result.
#[derive(Clone, Copy)]
enum Negate {
    Never,
    Always,
    IfNegative,
    IfPositive,
}

/// What `sinf` and `cosf` do with [`TrigF`]: beyond 9pi/4 the kernel and
/// sign the quadrant gives ([`quadrant_choice`]), below it the kernel (`k_cosf` when
/// true) and sign of each quarter, below pi/4 the function's own kernel of
/// `x` (its value itself, or 1, below 2^-12); NaN for NaN and infinities; the
/// `libm` function for huge arguments.
fn finish_f32(
    m: &mut Emit<'_, '_>,
    op: UnaryOp,
    x: Reg,
    t: &TrigF,
    quarters: [(bool, Negate); 4],
) -> Reg {
    let yes = m.let_(DType::Bool, Expr::Const(Scalar::Bool(true)));
    let no = m.let_(DType::Bool, Expr::Const(Scalar::Bool(false)));
    let positive = m.not(t.negative);
    let (mut use_cos, mut negate) = quadrant_choice(m, op, t.quadrant);
    for (q, (cos, neg)) in t.quarter.into_iter().zip(quarters) {
        let cos = if cos { yes } else { no };
        let neg = match neg {
            Negate::Never => no,
            Negate::Always => yes,
            Negate::IfNegative => t.negative,
            Negate::IfPositive => positive,
        };
        use_cos = m.select(q, cos, use_cos);
        negate = m.select(q, neg, negate);
    }
    let is_cos = op == UnaryOp::Cos;
    use_cos = m.select(t.direct, if is_cos { yes } else { no }, use_cos);
    negate = m.select(t.direct, no, negate);
    let k = m.select(use_cos, t.cos, t.sin);
    let result = negate_if(m, negate, k);
    let tiny = m.cmp_k(CmpOp::Lt, t.ix, 0x3980_0000);
    let small = if is_cos { m.f32(1.0) } else { x };
    let result = m.select(tiny, small, result);
    trig_tail(m, op, x, [t.special, t.rare], result)
}

/// The `libm` crate's `sinf` (FreeBSD's `s_sinf.c`), branch-free but for
/// arguments from 2^28·pi/2 on, which the `libm` function reduces.
pub(super) fn sin_f32(lw: &mut Lowerer<'_>, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    let mut m = Emit { lw, out };
    let t = trig_f32(&mut m, x);
    // To 3pi/4: ∓cos; to 5pi/4: -sin; to 7pi/4: ±cos; to 9pi/4: sin.
    let quarters = [
        (true, Negate::IfNegative),
        (false, Negate::Always),
        (true, Negate::IfPositive),
        (false, Negate::Never),
    ];
    finish_f32(&mut m, UnaryOp::Sin, x, &t, quarters)
}

/// The `libm` crate's `cosf` (FreeBSD's `s_cosf.c`), as [`sin_f32`].
pub(super) fn cos_f32(lw: &mut Lowerer<'_>, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    let mut m = Emit { lw, out };
    let t = trig_f32(&mut m, x);
    // To 3pi/4: ±sin; to 5pi/4: -cos; to 7pi/4: ∓sin; to 9pi/4: cos.
    let quarters = [
        (false, Negate::IfPositive),
        (true, Negate::Always),
        (false, Negate::IfNegative),
        (true, Negate::Never),
    ];
    finish_f32(&mut m, UnaryOp::Cos, x, &t, quarters)
}
