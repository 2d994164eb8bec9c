//! The f64 `cbrt`: the `libm` crate's, which is CORE-MATH's correctly
//! rounded one (Alexei Sibidanov; MIT): a cubic approximation of `z^(1/3)`
//! on [1, 2), one cubic Newton step, a scaling by 2^(it/3), then a linear
//! Newton step on `y³` computed in double-double.
//!
//! The scalar code forms `y·y - y²` and `y·y² - y³` with FMA. Both are the
//! exact rounding errors of a product, representable and far from
//! underflow here (`y` is in [1, 2^(2/3)·2)), so Dekker's product, which
//! computes the same exact value with plain multiplications, gives the same
//! bits on every target, FMA or not. Subnormal arguments are normalized
//! through an exact scaling by 2^54 (the scalar code shifts by their
//! leading zeros). The rare rows whose rounding the scalar code checks again
//! (a correction within 2^-75 of a rounding boundary, or a result the final
//! test finds nearly exact) go to the `libm` function.

use super::{Emitter, Kernel, Stmt};
use crate::Reg;
use kiln_ir::op::{BinaryOp, CmpOp, UnaryOp};
use kiln_ir::types::DType;

/// `a·b - p` exactly, for `p = a·b` rounded, by Dekker's product (Veltkamp's
/// split into 26-bit halves), where nothing overflows or underflows.
fn product_error(m: &mut Emitter<'_>, a: Reg, b: Reg, p: Reg) -> Reg {
    let (ah, al) = split(m, a);
    let (bh, bl) = split(m, b);
    let hh = m.mul(ah, bh);
    let e = m.sub(hh, p);
    let hl = m.mul(ah, bl);
    let e = m.add(e, hl);
    let lh = m.mul(al, bh);
    let e = m.add(e, lh);
    let ll = m.mul(al, bl);
    m.add(e, ll)
}

fn split(m: &mut Emitter<'_>, a: Reg) -> (Reg, Reg) {
    let factor = m.f64(134217729.0);
    let c = m.mul(a, factor);
    let d = m.sub(c, a);
    let high = m.sub(c, d);
    let low = m.sub(a, high);
    (high, low)
}

pub(super) fn cbrt_f64(m: &mut Emitter<'_>, x: Reg) -> Reg {
    let [e1, e2] = [0x3ff4_28a2_f98d_728b_u64, 0x3ff9_65fe_a53d_6e3d].map(f64::from_bits);
    let c = [
        0x3fe1_b0ba_bccf_ef9c_u64,
        0x3fe2_c9a3_e94d_1da5,
        0xbfc4_dc30_b1a1_ddba,
        0x3f97_a8d3_e4ec_9b07,
    ]
    .map(f64::from_bits);
    let u0 = f64::from_bits(0x3fd5_5555_5555_5555);
    let u1 = f64::from_bits(0x3fcc_71c7_1c71_c71c);

    let hx = m.bitcast(DType::I64, x);
    let mant = m.band_k(hx, (1 << 52) - 1);
    let negative = m.cmp_k(CmpOp::Lt, hx, 0);
    let c52 = m.i64(52);
    let e = m.bin(BinaryOp::ShrLogical, hx, c52);
    let e = m.band_k(e, 0x7ff);
    // Zeros, infinities and NaNs return x + x.
    let zero = m.f64(0.0);
    let x_zero = m.cmp(CmpOp::Eq, x, zero);
    let max_e = m.cmp_k(CmpOp::Eq, e, 0x7ff);
    let special = m.or(x_zero, max_e);
    // A subnormal's mantissa normalized and its exponent extended below 1,
    // as the scalar code's shift by its leading zeros makes them: those of
    // x·2^54, exact, less 54.
    let subnormal = m.cmp_k(CmpOp::Eq, e, 0);
    let up = m.f64(f64::from_bits(0x4350_0000_0000_0000)); // 2^54
    let scaled = m.mul(x, up);
    let scaled = m.bitcast(DType::I64, scaled);
    let mant_s = m.band_k(scaled, (1 << 52) - 1);
    let e_s = m.bin(BinaryOp::ShrLogical, scaled, c52);
    let e_s = m.band_k(e_s, 0x7ff);
    let e_s = m.add_k(e_s, -54);
    let mant = m.select(subnormal, mant_s, mant);
    let e = m.select(subnormal, e_s, e);
    // e + 3072 = 3·et + it, et by a multiplication (exact for e < 2^17).
    let e = m.add_k(e, 3072);
    let third = m.i64(43691);
    let et = m.mul(e, third);
    let et = m.shr_k(et, 17);
    let three = m.i64(3);
    let thrice = m.mul(et, three);
    let it = m.sub(e, thrice);
    // z = 1.mant in [1, 2); zz = ±z·2^it.
    let cvt1 = m.bor_k(mant, 0x3ff << 52);
    let z = m.bitcast(DType::F64, cvt1);
    let it52 = m.shl_k(it, 52);
    let cvt5 = m.add(cvt1, it52);
    let sign = m.band_k(hx, i64::MIN);
    let cvt5 = m.bin(BinaryOp::BOr, cvt5, sign);
    let zz = m.bitcast(DType::F64, cvt5);
    let it1 = m.cmp_k(CmpOp::Eq, it, 1);
    let it2 = m.cmp_k(CmpOp::Eq, it, 2);
    let signed = |m: &mut Emitter<'_>, [k0, k1, k2]: [f64; 3]| {
        let (k0, k1, k2) = (m.f64(k0), m.f64(k1), m.f64(k2));
        let v = m.select(it1, k1, k0);
        let v = m.select(it2, k2, v);
        let minus = m.neg(v);
        m.select(negative, minus, v)
    };
    let scale = signed(m, [1.0, e1, e2]);
    let one = m.f64(1.0);
    let r = m.div(one, z);
    let rs = signed(m, [1.0, 0.5, 0.25]);
    let rr = m.mul(r, rs);
    // y ≈ z^(1/3), then a cubic Newton step.
    let z2 = m.mul(z, z);
    let [c0, c1, c2, c3] = c.map(|k| m.f64(k));
    let t = m.mul(z, c1);
    let c0 = m.add(c0, t);
    let t = m.mul(z, c3);
    let c2 = m.add(c2, t);
    let t = m.mul(z2, c2);
    let y = m.add(c0, t);
    let y2 = m.mul(y, y);
    let yr = m.mul(y, r);
    let h = m.mul(y2, yr);
    let h = m.sub(h, one);
    let hy = m.mul(h, y);
    let (u0r, u1r) = (m.f64(u0), m.f64(u1));
    let t = m.mul(u1r, h);
    let t = m.sub(u0r, t);
    let t = m.mul(hy, t);
    let y = m.sub(y, t);
    let y = m.mul(y, scale);
    // A linear Newton step on y³ in double-double.
    let y2 = m.mul(y, y);
    let y2l = product_error(m, y, y, y2);
    let y3 = m.mul(y2, y);
    let y3l = product_error(m, y, y2, y3);
    let t = m.mul(y, y2l);
    let y3l = m.add(y3l, t);
    let d = m.sub(y3, zz);
    let d = m.add(d, y3l);
    let h = m.mul(d, rr);
    let yu = m.mul(y, u0r);
    let dy = m.mul(h, yu);
    let y1 = m.sub(y, dy);
    let t = m.sub(y, y1);
    let dy = m.sub(t, dy);
    let ady = m.abs(dy);
    let close = |m: &mut Emitter<'_>, to: f64| {
        let to = m.f64(to);
        let d = m.sub(ady, to);
        let d = m.abs(d);
        let bound = m.f64(f64::from_bits(0x3b40_0000_0000_0000)); // 2^-75
        m.cmp(CmpOp::Lt, d, bound)
    };
    let half_ulp = f64::from_bits(0x3ca0_0000_0000_0000); // 2^-53
    let near_half = close(m, half_ulp);
    let near_three_halves = close(m, f64::from_bits(0x3cb0_0000_0000_0000) + half_ulp);
    // The exponent: y1·2^(et - 1365).
    let bits = m.bitcast(DType::I64, y1);
    let shift = m.add_k(et, -(342 + 1023));
    let shift = m.shl_k(shift, 52);
    let cvt3 = m.add(bits, shift);
    let value = m.bitcast(DType::F64, cvt3);
    // (cvt3 << 30) ^ its top bit at most 2^30 (unsigned): nearly exact.
    let m0 = m.shl_k(cvt3, 30);
    let c63 = m.i64(63);
    let m1 = m.bin(BinaryOp::ShrLogical, m0, c63);
    let v = m.bin(BinaryOp::BXor, m0, m1);
    let non_negative = m.cmp_k(CmpOp::Ge, v, 0);
    let small = m.cmp_k(CmpOp::Le, v, 1 << 30);
    let exactish = m.and(non_negative, small);
    let twice = m.add(x, x);
    let value = m.select(special, twice, value);
    let rare = m.any(&[near_half, near_three_halves, exactish]);
    let not_special = m.not(special);
    let rare = m.and(rare, not_special);
    m.fallback(UnaryOp::Cbrt, x, rare, value)
}

/// The `libm` crate's `cbrtf` (FreeBSD's `s_cbrtf.c`), branch-free: a
/// rough root from the bits (|x|'s word / 3 plus a bias; subnormals scaled
/// by 2^24 first), then two Newton steps in f64.
pub(super) fn cbrt_f32(kernel: &mut Kernel, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    const B1: i64 = 709_958_130;
    const B2: i64 = 642_849_266;
    let mut m = Emitter { kernel, out };
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
