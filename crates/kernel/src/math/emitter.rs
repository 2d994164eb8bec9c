//! The builder inline math emits with ([`Emitter`]: constants, arithmetic,
//! bit casts and selects into one statement list of a kernel), and the bit
//! helpers several families share.

use super::*;

/// Emits kernel expressions into one statement list.
pub(super) struct Emitter<'k> {
    pub(super) kernel: &'k mut Kernel,
    pub(super) out: &'k mut Vec<Stmt>,
}

impl Emitter<'_> {
    pub(super) fn let_(&mut self, dtype: DType, expr: Expr) -> Reg {
        self.kernel.push_let(self.out, dtype, expr)
    }

    pub(super) fn ty(&self, r: Reg) -> DType {
        self.kernel.reg_type(r)
    }

    pub(super) fn f64(&mut self, v: f64) -> Reg {
        self.let_(DType::F64, Expr::Const(Scalar::F64(v)))
    }

    pub(super) fn f32(&mut self, v: f32) -> Reg {
        self.let_(DType::F32, Expr::Const(Scalar::F32(v)))
    }

    /// A float constant of `dtype` (an `f32` constant is given exactly).
    pub(super) fn float(&mut self, dtype: DType, v: f64) -> Reg {
        if dtype == DType::F32 {
            self.f32(v as f32)
        } else {
            self.f64(v)
        }
    }

    pub(super) fn i32(&mut self, v: i32) -> Reg {
        self.let_(DType::I32, Expr::Const(Scalar::I32(v)))
    }

    pub(super) fn i64(&mut self, v: i64) -> Reg {
        self.let_(DType::I64, Expr::Const(Scalar::I64(v)))
    }

    pub(super) fn bin(&mut self, op: BinaryOp, a: Reg, b: Reg) -> Reg {
        let dtype = self.ty(a);
        self.let_(dtype, Expr::Binary(op, a, b))
    }

    pub(super) fn add(&mut self, a: Reg, b: Reg) -> Reg {
        self.bin(BinaryOp::Add, a, b)
    }

    pub(super) fn sub(&mut self, a: Reg, b: Reg) -> Reg {
        self.bin(BinaryOp::Sub, a, b)
    }

    pub(super) fn mul(&mut self, a: Reg, b: Reg) -> Reg {
        self.bin(BinaryOp::Mul, a, b)
    }

    pub(super) fn div(&mut self, a: Reg, b: Reg) -> Reg {
        self.bin(BinaryOp::Div, a, b)
    }

    pub(super) fn neg(&mut self, a: Reg) -> Reg {
        let dtype = self.ty(a);
        self.let_(dtype, Expr::Unary(UnaryOp::Neg, a))
    }

    pub(super) fn and(&mut self, a: Reg, b: Reg) -> Reg {
        self.bin(BinaryOp::And, a, b)
    }

    pub(super) fn or(&mut self, a: Reg, b: Reg) -> Reg {
        self.bin(BinaryOp::Or, a, b)
    }

    pub(super) fn not(&mut self, a: Reg) -> Reg {
        let t = self.let_(DType::Bool, Expr::Const(Scalar::Bool(true)));
        self.bin(BinaryOp::Xor, a, t)
    }

    /// `a op k` for an integer constant `k` of `a`'s dtype.
    pub(super) fn cmp_k(&mut self, op: CmpOp, a: Reg, k: i64) -> Reg {
        let k = self.int_like(a, k);
        self.cmp(op, a, k)
    }

    /// `a & k` for an integer constant `k` of `a`'s dtype.
    pub(super) fn band_k(&mut self, a: Reg, k: i64) -> Reg {
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
    pub(super) fn fallback(&mut self, op: UnaryOp, arg: Reg, rare: Reg, value: Reg) -> Reg {
        self.call_where(MathCall::Unary(op, arg), rare, value)
    }

    /// `call` by the `libm` function where `rare`, else `value`.
    pub(super) fn call_where(&mut self, call: MathCall, rare: Reg, value: Reg) -> Reg {
        let dtype = self.ty(value);
        self.let_(dtype, Expr::Fallback { call, rare, value })
    }

    pub(super) fn cmp(&mut self, op: CmpOp, a: Reg, b: Reg) -> Reg {
        self.let_(DType::Bool, Expr::Compare(op, a, b))
    }

    pub(super) fn select(&mut self, c: Reg, a: Reg, b: Reg) -> Reg {
        let dtype = self.ty(a);
        self.let_(dtype, Expr::Select(c, a, b))
    }

    /// Rust's `as` between numbers.
    pub(super) fn cast(&mut self, to: DType, a: Reg) -> Reg {
        self.let_(to, Expr::Cast(to, a))
    }

    pub(super) fn bitcast(&mut self, to: DType, a: Reg) -> Reg {
        self.let_(to, Expr::Bitcast(to, a))
    }

    /// `v` with the bits `mask` clears cleared (an f64's low word, an f32's
    /// low bits): how the scalar code splits a value into hi and lo.
    pub(super) fn cut_bits(&mut self, v: Reg, mask: i64) -> Reg {
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
    pub(super) fn horner(&mut self, x: Reg, coefficients: &[f64]) -> Reg {
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

    /// `a * b + c` rounded once ([`Expr::MulAdd`]).
    pub(super) fn mul_add(&mut self, a: Reg, b: Reg, c: Reg) -> Reg {
        let dtype = self.ty(a);
        self.let_(dtype, Expr::MulAdd(a, b, c))
    }

    /// `c[0]·x^n + … + c[n]`, highest degree first, each step one fused
    /// multiply-add (`f32` coefficients).
    pub(super) fn horner_fused(&mut self, x: Reg, coefficients: &[f32]) -> Reg {
        let (first, rest) = coefficients.split_first().expect("a polynomial");
        let mut acc = self.f32(*first);
        for &c in rest {
            let c = self.f32(c);
            acc = self.mul_add(acc, x, c);
        }
        acc
    }

    /// `scalbn(y, n)` / `scalbnf(y, n)` (the `libm` crate's generic one) in
    /// `y`'s dtype, for an `i32` `n` that needs at most one pre-scaling step,
    /// which holds wherever exp calls it (f64: `-1075 <= n <= 1024`; f32:
    /// `-150 <= n <= 128`).
    pub(super) fn scalbn_once(&mut self, y: Reg, n: Reg) -> Reg {
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
    pub(super) fn rint_by_pio2(&mut self, x: Reg) -> Reg {
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
    pub(super) fn integer_of(&mut self, kf: Reg) -> Reg {
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
    pub(super) fn exp_core(&mut self, x: Reg, kf: Reg, [ln2hi, ln2lo]: [f64; 2], p: &[f64]) -> Reg {
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
    pub(super) fn log_core(
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
    pub(super) fn log_specials(
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

/// |x|'s high word (f64) or bits (f32), and x's sign.
pub(super) fn magnitude_word(m: &mut Emitter<'_>, x: Reg) -> (Reg, Reg) {
    if m.ty(x) == DType::F32 {
        let bits = m.bitcast(DType::I32, x);
        let negative = m.cmp_k(CmpOp::Lt, bits, 0);
        (m.band_k(bits, 0x7fff_ffff), negative)
    } else {
        high_word(m, x)
    }
}

/// `±1 - …` and `2·sign + 1/x` need the sign as a float, 0 or 1.
pub(super) fn sign_value(m: &mut Emitter<'_>, negative: Reg, dtype: DType) -> Reg {
    let (one, zero) = (m.float(dtype, 1.0), m.float(dtype, 0.0));
    m.select(negative, one, zero)
}

/// The high word of an `f64`'s bits without the sign, as an `i64`, and
/// whether the sign bit is set.
pub(super) fn high_word(m: &mut Emitter<'_>, x: Reg) -> (Reg, Reg) {
    let bits = m.bitcast(DType::I64, x);
    let c32 = m.i64(32);
    let high = m.bin(BinaryOp::ShrLogical, bits, c32);
    let ix = m.band_k(high, 0x7fff_ffff);
    let negative = m.cmp_k(CmpOp::Lt, bits, 0);
    (ix, negative)
}

/// The biased exponent of an `f64` (`(bits >> 52) & 0x7ff`).
pub(super) fn exponent_f64(m: &mut Emitter<'_>, y: Reg) -> Reg {
    let bits = m.bitcast(DType::I64, y);
    let c52 = m.i64(52);
    let e = m.bin(BinaryOp::ShrLogical, bits, c52);
    m.band_k(e, 0x7ff)
}

/// `value`, or `-value` where `negate`.
pub(super) fn negate_if(m: &mut Emitter<'_>, negate: Reg, value: Reg) -> Reg {
    let minus = m.neg(value);
    m.select(negate, minus, value)
}
