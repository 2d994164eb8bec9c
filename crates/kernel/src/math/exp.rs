//! `exp` and `expm1` (`f64`, `f32`): the `libm` crate's reductions by
//! `ln 2` and its polynomials.

use super::*;

/// The `libm` crate's `exp` (f64; FreeBSD's `e_exp.c`), branch-free.
pub(super) fn exp_f64(kernel: &mut Kernel, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    const HALF: f64 = 0.5;
    const LN2HI: f64 = 6.93147180369123816490e-01;
    const LN2LO: f64 = 1.90821492927058770002e-10;
    const INVLN2: f64 = 1.44269504088896338700e+00;
    const P1: f64 = 1.66666666666666019037e-01;
    const P2: f64 = -2.77777777770155933842e-03;
    const P3: f64 = 6.61375632143793436117e-05;
    const P4: f64 = -1.65339022054652515390e-06;
    const P5: f64 = 4.13813679705723846039e-08;
    let mut m = Emitter { kernel, out };
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
pub(super) struct Expm1 {
    pub(super) ln2: [f64; 2],
    pub(super) inv_ln2: f64,
    /// `1` and the polynomial in `hxs`.
    pub(super) q: &'static [f64],
    /// High word (f64) or bits (f32) of |x|: the huge-argument filter, the
    /// reduction's start, where k = ±1 ends, and the tiny arguments.
    pub(super) huge: i64,
    pub(super) reduce: i64,
    pub(super) near: i64,
    pub(super) tiny: i64,
    /// Above it, `x·2^top` (overflow): a float (f64) or `|x|`'s bits (f32).
    pub(super) over: Over,
    /// The exponent bias and field shift, the largest k, and where the
    /// middle branch switches its order (k < 20 or k < 23).
    pub(super) bias: i32,
    pub(super) shift: i64,
    pub(super) top_k: i64,
    pub(super) switch: i64,
}

pub(super) enum Over {
    Value(f64),
    Bits(i64),
}

pub(super) const EXPM1_F64: Expm1 = Expm1 {
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

pub(super) const EXPM1_F32: Expm1 = Expm1 {
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
pub(super) fn expm1_f64(kernel: &mut Kernel, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    let mut m = Emitter { kernel, out };
    expm1_core(&mut m, x)
}

/// The `libm` crate's `expm1f` (FreeBSD's `s_expm1f.c`), branch-free.
pub(super) fn expm1_f32(kernel: &mut Kernel, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    let mut m = Emitter { kernel, out };
    expm1_core(&mut m, x)
}

pub(super) fn expm1_core(m: &mut Emitter<'_>, x: Reg) -> Reg {
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
    let power = |m: &mut Emitter<'_>, e: Reg| {
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

/// The `libm` crate's `expf` (FreeBSD's `e_expf.c`), branch-free, as
/// [`exp_f64`].
pub(super) fn exp_f32(kernel: &mut Kernel, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    const LN2_HI: f32 = 6.9314575195e-01;
    const LN2_LO: f32 = 1.4286067653e-06;
    const INV_LN2: f32 = 1.4426950216e+00;
    const P1: f32 = 1.6666625440e-1;
    const P2: f32 = -2.7667332906e-3;
    let mut m = Emitter { kernel, out };
    let bits = m.bitcast(DType::I32, x);
    let c31 = m.i32(31);
    let sign = m.bin(BinaryOp::ShrLogical, bits, c31);
    let mask = m.i32(0x7fff_ffff);
    let hx = m.bin(BinaryOp::BAnd, bits, mask);
    let negative = {
        let one = m.i32(1);
        m.cmp(CmpOp::Eq, sign, one)
    };
    let above = |m: &mut Emitter<'_>, at: i32| {
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
