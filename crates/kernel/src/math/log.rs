//! `log`, `log1p`, `log2`, `log10` (`f64`, `f32`).

use super::*;

/// The `libm` crate's `log1p` (f64) and `log1pf` (FreeBSD's `s_log1p.c`,
/// `s_log1pf.c`), branch-free. The scalar code compares the unsigned word
/// of `x`; here the word of |x| and the sign say the same.
pub(super) fn log1p_core(m: &mut Emitter<'_>, x: Reg) -> Reg {
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
pub(super) fn log1p(kernel: &mut Kernel, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    log1p_core(&mut Emitter { kernel, out }, x)
}

/// The `libm` crate's `log2` and `log10`, f64 and f32 (FreeBSD's
/// `e_log2.c`, `e_log10.c` and their `f` forms), branch-free: `log`'s
/// reduction and special cases, then `log(1 + f)` as `hi + lo` (hi with its
/// low bits cleared) scaled by 1/ln 2 or 1/ln 10 in two parts, plus `k` (or
/// `k·log10(2)` in two parts), in each function's order.
pub(super) fn log2_log10(m: &mut Emitter<'_>, x: Reg, op: UnaryOp) -> Reg {
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
pub(super) fn spadd(m: &mut Emitter<'_>, y: Reg, val_hi: Reg, val_lo: Reg) -> Reg {
    let w = m.add(y, val_hi);
    let d = m.sub(y, w);
    let d = m.add(d, val_hi);
    let val_lo = m.add(val_lo, d);
    m.add(val_lo, w)
}

/// The `libm` crate's `log2` (f64) and `log2f`.
pub(super) fn log2(kernel: &mut Kernel, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    log2_log10(&mut Emitter { kernel, out }, x, UnaryOp::Log2)
}

/// The `libm` crate's `log10` (f64) and `log10f`.
pub(super) fn log10(kernel: &mut Kernel, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    log2_log10(&mut Emitter { kernel, out }, x, UnaryOp::Log10)
}

/// The `libm` crate's `log` (f64; FreeBSD's `e_log.c`), branch-free.
pub(super) fn log_f64(kernel: &mut Kernel, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    const LN2_HI: f64 = 6.93147180369123816490e-01;
    const LN2_LO: f64 = 1.90821492927058770002e-10;
    const LG1: f64 = 6.666666666666735130e-01;
    const LG2: f64 = 3.999999999940941908e-01;
    const LG3: f64 = 2.857142874366239149e-01;
    const LG4: f64 = 2.222219843214978396e-01;
    const LG5: f64 = 1.818357216161805012e-01;
    const LG6: f64 = 1.531383769920937332e-01;
    const LG7: f64 = 1.479819860511658591e-01;
    let mut m = Emitter { kernel, out };
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
pub(super) fn log_parts_f64(m: &mut Emitter<'_>, x: Reg) -> (Reg, Reg, [Reg; 4]) {
    let c32 = m.i64(32);
    let high = |m: &mut Emitter<'_>, v: Reg| {
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

/// The `libm` crate's `logf` (FreeBSD's `e_logf.c`), branch-free, as
/// [`log_f64`].
pub(super) fn log_f32(kernel: &mut Kernel, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    const LN2_HI: f32 = 6.9313812256e-01;
    const LN2_LO: f32 = 9.0580006145e-06;
    const LG1: f32 = 0.66666662693;
    const LG2: f32 = 0.40000972152;
    const LG3: f32 = 0.28498786688;
    const LG4: f32 = 0.24279078841;
    let mut m = Emitter { kernel, out };
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
pub(super) fn log_parts_f32(m: &mut Emitter<'_>, x: Reg) -> (Reg, Reg, [Reg; 4]) {
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
