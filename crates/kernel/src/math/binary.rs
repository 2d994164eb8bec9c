//! The binary functions: `pow`, `atan2` and `hypot`, f64 and f32, ported
//! from the `libm` crate as the unary ones are (`super`).
//!
//! `pow` computes its common path, a finite positive or negative `x` raised
//! to a finite `y` of moderate size with a normal result, and leaves every
//! special case the scalar code returns early for (zeros, infinities, NaNs,
//! `y` of ±1, 2 or 0.5, `x` of ±1, a negative `x` to a non-integer, huge
//! `y`, a subnormal `x`, overflow, underflow and subnormal results) to the
//! `libm` function through [`Expr::Fallback`](super::Expr::Fallback).

use super::{atan_core, magnitude_word, Emitter, Expansion2};
use crate::{Expr, MathCall, Reg};
use kiln_ir::op::{BinaryOp, CmpOp, UnaryOp};
use kiln_ir::types::DType;

/// The inline port of the binary `op` on `dtype`, if kiln has one.
pub(crate) fn inline(op: BinaryOp, dtype: DType) -> Option<Expansion2> {
    if !dtype.is_float() {
        return None;
    }
    Some(match op {
        BinaryOp::Pow => |kernel, out, x, y| pow(&mut Emitter { kernel, out }, x, y),
        BinaryOp::Atan2 => |kernel, out, y, x| atan2(&mut Emitter { kernel, out }, y, x),
        BinaryOp::Hypot => |kernel, out, x, y| hypot(&mut Emitter { kernel, out }, x, y),
        _ => return None,
    })
}

/// The `libm` crate's `atan2(y, x)` (FreeBSD's `e_atan2.c`) and `atan2f`:
/// `atan(|y/x|)` placed in the quadrant of `(x, y)`, every special case a
/// select. `atan(-a)` is `-atan(a)` bit for bit (its algorithm is odd), so
/// the scalar code's `atan(y)` for `x = 1` is the quadrant formula's value.
fn atan2(m: &mut Emitter<'_>, y: Reg, x: Reg) -> Reg {
    let dtype = m.ty(x);
    let f32 = dtype == DType::F32;
    // pi and its tail; the scalar code's constant expressions, evaluated in
    // its precision; how far apart the magnitudes' words may be.
    let (pi, pi_lo, half_pi, quarter_pi, three_quarters_pi, apart) = if f32 {
        let pi = 3.1415927410e+00_f32;
        (
            f64::from(pi),
            f64::from(-8.7422776573e-08_f32),
            f64::from(pi / 2.),
            f64::from(pi / 4.),
            f64::from(3. * pi / 4.),
            26 << 23,
        )
    } else {
        let pi = 3.1415926535897931160E+00_f64;
        (
            pi,
            1.2246467991473531772E-16,
            pi / 2.0,
            pi / 4.0,
            3.0 * pi / 4.0,
            64 << 20,
        )
    };
    let (ix, x_neg) = magnitude_word(m, x);
    let (iy, y_neg) = magnitude_word(m, y);
    let (ax, ay) = (m.abs(x), m.abs(y));
    // |y/x| below 2^-64 (2^-26) and above 2^64 (2^26), by the words.
    let y_over = m.sub(iy, ix);
    let x_over = m.sub(ix, iy);
    let y_far = m.cmp_k(CmpOp::Gt, y_over, apart);
    let x_far = m.cmp_k(CmpOp::Gt, x_over, apart);

    let q = m.div(y, x);
    let aq = m.abs(q);
    let z = atan_core(m, aq);
    let zero = m.float(dtype, 0.0);
    let tiny = m.and(x_neg, x_far);
    let z = m.select(tiny, zero, z);
    // The quadrant: z, -z, pi - (z - pi_lo), (z - pi_lo) - pi.
    let pi_r = m.float(dtype, pi);
    let pi_lo = m.float(dtype, pi_lo);
    let z_lo = m.sub(z, pi_lo);
    let left_up = m.sub(pi_r, z_lo);
    let left_down = m.sub(z_lo, pi_r);
    let minus_z = m.neg(z);
    let right = m.select(y_neg, minus_z, z);
    let left = m.select(y_neg, left_down, left_up);
    let value = m.select(x_neg, left, right);
    // For x = 1 the scalar code returns atan(y): the right half-plane's
    // value before any special case.
    let unit = m.cmp_f(CmpOp::Eq, x, 1.0);
    let atan_y = right;

    let inf = f64::INFINITY;
    let vertical = m.select_f(y_neg, dtype, -half_pi, half_pi);
    let y_inf = m.cmp_f(CmpOp::Eq, ay, inf);
    let steep = m.or(y_far, y_inf);
    let value = m.select(steep, vertical, value);
    // x = ±inf.
    let quarter = m.select_f(x_neg, dtype, three_quarters_pi, quarter_pi);
    let minus_quarter = m.neg(quarter);
    let quarter = m.select(y_neg, minus_quarter, quarter);
    let flat = m.select_f(x_neg, dtype, pi, 0.0);
    let minus_flat = m.neg(flat);
    let flat = m.select(y_neg, minus_flat, flat);
    let at_inf = m.select(y_inf, quarter, flat);
    let x_inf = m.cmp_f(CmpOp::Eq, ax, inf);
    let value = m.select(x_inf, at_inf, value);
    // x = ±0.
    let x_zero = m.cmp_f(CmpOp::Eq, x, 0.0);
    let value = m.select(x_zero, vertical, value);
    // y = ±0: y itself right of the axis, ±pi left of it.
    let y_zero = m.cmp_f(CmpOp::Eq, y, 0.0);
    let pi_signed = m.select_f(y_neg, dtype, -pi, pi);
    let on_axis = m.select(x_neg, pi_signed, y);
    let value = m.select(y_zero, on_axis, value);
    let value = m.select(unit, atan_y, value);
    // A NaN argument: x + y.
    let x_nan = m.cmp(CmpOp::Ne, x, x);
    let y_nan = m.cmp(CmpOp::Ne, y, y);
    let nan = m.or(x_nan, y_nan);
    let sum = m.add(x, y);
    m.select(nan, sum, value)
}

/// The `libm` crate's `hypot` (musl's, with its exact squares) and
/// `hypotf` (which squares in f64).
fn hypot(m: &mut Emitter<'_>, x: Reg, y: Reg) -> Reg {
    let dtype = m.ty(x);
    let (int, abs_mask) = if dtype == DType::F32 {
        (DType::I32, 0x7fff_ffff)
    } else {
        (DType::I64, i64::MAX)
    };
    // |x| >= |y| by their bits.
    let ux = m.bitcast(int, x);
    let ux = m.band_k(ux, abs_mask);
    let uy = m.bitcast(int, y);
    let uy = m.band_k(uy, abs_mask);
    let swap = m.cmp(CmpOp::Lt, ux, uy);
    let (big, small) = (m.select(swap, uy, ux), m.select(swap, ux, uy));
    let (x, y) = (m.bitcast(dtype, big), m.bitcast(dtype, small));
    let sum = m.add(x, y);
    if dtype == DType::F32 {
        hypot_f32(m, [big, small], [x, y], sum)
    } else {
        hypot_f64(m, [big, small], [x, y], sum)
    }
}

fn hypot_f64(m: &mut Emitter<'_>, [ux, uy]: [Reg; 2], [x, y]: [Reg; 2], sum: Reg) -> Reg {
    let ex = m.shr_k(ux, 52);
    let ey = m.shr_k(uy, 52);
    // Scaling by 2^±700 keeps xh*xh from overflowing and xl*xl from
    // underflowing.
    let big = m.cmp_k(CmpOp::Gt, ex, 0x3ff + 510);
    let small = m.cmp_k(CmpOp::Lt, ey, 0x3ff - 450);
    let (up, down) = (
        f64::from_bits(0x6bb0_0000_0000_0000),
        f64::from_bits(0x1430_0000_0000_0000),
    );
    let by = m.select_f(small, DType::F64, up, 1.0);
    let by = {
        let down = m.f64(down);
        m.select(big, down, by)
    };
    let z = m.select_f(small, DType::F64, down, 1.0);
    let z = {
        let up = m.f64(up);
        m.select(big, up, z)
    };
    let (xs, ys) = (m.mul(x, by), m.mul(y, by));
    let (hx, lx) = exact_square(m, xs);
    let (hy, ly) = exact_square(m, ys);
    let s = m.add(ly, lx);
    let s = m.add(s, hy);
    let s = m.add(s, hx);
    let root = m.let_(DType::F64, Expr::Unary(UnaryOp::Sqrt, s));
    let value = m.mul(z, root);
    // ex - ey > 64: x + y; x inf or NaN, or y = 0: x; y inf or NaN: y.
    let gap = m.sub(ex, ey);
    let far = m.cmp_k(CmpOp::Gt, gap, 64);
    let value = m.select(far, sum, value);
    let x_special = m.cmp_k(CmpOp::Eq, ex, 0x7ff);
    let y_zero = m.cmp_k(CmpOp::Eq, uy, 0);
    let take_x = m.or(x_special, y_zero);
    let value = m.select(take_x, x, value);
    let y_special = m.cmp_k(CmpOp::Eq, ey, 0x7ff);
    m.select(y_special, y, value)
}

/// hypot's `sq(x)`: `x²` as `hi + lo` by Dekker's split.
fn exact_square(m: &mut Emitter<'_>, x: Reg) -> (Reg, Reg) {
    let split = m.f64(134217728. + 1.);
    let xc = m.mul(x, split);
    let xh = m.sub(x, xc);
    let xh = m.add(xh, xc);
    let xl = m.sub(x, xh);
    let hi = m.mul(x, x);
    let hh = m.mul(xh, xh);
    let lo = m.sub(hh, hi);
    let two = m.f64(2.);
    let twice = m.mul(two, xh);
    let cross = m.mul(twice, xl);
    let lo = m.add(lo, cross);
    let ll = m.mul(xl, xl);
    let lo = m.add(lo, ll);
    (hi, lo)
}

fn hypot_f32(m: &mut Emitter<'_>, [ux, uy]: [Reg; 2], [x, y]: [Reg; 2], sum: Reg) -> Reg {
    let big = m.cmp_k(CmpOp::Ge, ux, (0x7f + 60) << 23);
    let small = m.cmp_k(CmpOp::Lt, uy, (0x7f - 60) << 23);
    let (up, down) = (
        f64::from(f32::from_bits(0x6c80_0000)),
        f64::from(f32::from_bits(0x1280_0000)),
    );
    let by = m.select_f(small, DType::F32, up, 1.0);
    let by = {
        let down = m.f32(down as f32);
        m.select(big, down, by)
    };
    let z = m.select_f(small, DType::F32, down, 1.0);
    let z = {
        let up = m.f32(up as f32);
        m.select(big, up, z)
    };
    let (xs, ys) = (m.mul(x, by), m.mul(y, by));
    let (xw, yw) = (m.cast(DType::F64, xs), m.cast(DType::F64, ys));
    let xx = m.mul(xw, xw);
    let yy = m.mul(yw, yw);
    let s = m.add(xx, yy);
    let s = m.cast(DType::F32, s);
    let root = m.let_(DType::F32, Expr::Unary(UnaryOp::Sqrt, s));
    let value = m.mul(z, root);
    // |x| inf or NaN, y = 0, or |x| 2^25 and more times |y|: x + y; y inf: y.
    let x_special = m.cmp_k(CmpOp::Ge, ux, 0xff << 23);
    let y_zero = m.cmp_k(CmpOp::Eq, uy, 0);
    let gap = m.sub(ux, uy);
    let far = m.cmp_k(CmpOp::Ge, gap, 25 << 23);
    let take_sum = m.any(&[x_special, y_zero, far]);
    let value = m.select(take_sum, sum, value);
    let y_inf = m.cmp_k(CmpOp::Eq, uy, 0xff << 23);
    m.select(y_inf, y, value)
}

/// What differs between `pow` (f64, on high words held in `i64`s) and
/// `powf` (f32, on its bits as an `i32`).
struct PowFormat {
    /// Bits below the exponent in the word.
    mant: i64,
    /// The exponent bias.
    bias: i64,
    /// The mask that cuts a value to its high part: an f64's low word, an
    /// f32's low 12 bits.
    cut: i64,
    /// The cut of the exponential's `t` (an f32's low 15 bits).
    cut_t: i64,
    /// Where `|x|`'s mantissa word chooses the 1.5 reduction, and where it
    /// moves up an octave.
    k_bounds: [i64; 2],
    /// Above this word, `|y|` is huge.
    huge_y: i64,
    /// The words of `z = y·log2|x|` where over- and underflow begin.
    over_under: [i64; 2],
    /// The word of 0.5.
    half: i64,
    bp: [f64; 2],
    dp_h: [f64; 2],
    dp_l: [f64; 2],
    l: [f64; 6],
    p: [f64; 5],
    lg2: [f64; 3],
    cp: [f64; 3],
}

const POW_F64: PowFormat = PowFormat {
    mant: 20,
    bias: 0x3ff,
    cut: 0xffff_ffff_0000_0000_u64 as i64,
    cut_t: 0xffff_ffff_0000_0000_u64 as i64,
    k_bounds: [0x3988E, 0xBB67A],
    huge_y: 0x41e00000,
    over_under: [0x40900000, 0x4090cc00],
    half: 0x3fe00000,
    bp: [1.0, 1.5],
    dp_h: [0.0, 5.84962487220764160156e-01],
    dp_l: [0.0, 1.35003920212974897128e-08],
    l: [
        5.99999999999994648725e-01,
        4.28571428578550184252e-01,
        3.33333329818377432918e-01,
        2.72728123808534006489e-01,
        2.30660745775561754067e-01,
        2.06975017800338417784e-01,
    ],
    p: [
        1.66666666666666019037e-01,
        -2.77777777770155933842e-03,
        6.61375632143793436117e-05,
        -1.65339022054652515390e-06,
        4.13813679705723846039e-08,
    ],
    lg2: [
        6.93147180559945286227e-01,
        6.93147182464599609375e-01,
        -1.90465429995776804525e-09,
    ],
    cp: [
        9.61796693925975554329e-01,
        9.61796700954437255859e-01,
        -7.02846165095275826516e-09,
    ],
};

/// powf's constants, as f32s widened exactly.
const POW_F32: PowFormat = PowFormat {
    mant: 23,
    bias: 0x7f,
    cut: 0xfffff000_u32 as i32 as i64,
    cut_t: 0xffff8000_u32 as i32 as i64,
    k_bounds: [0x1cc471, 0x5db3d7],
    huge_y: 0x4d000000,
    over_under: [0x43000000, 0x43160000],
    half: 0x3f000000,
    bp: [1.0, 1.5],
    dp_h: [0.0, 5.84960938e-01_f32 as f64],
    dp_l: [0.0, 1.56322085e-06_f32 as f64],
    l: [
        6.0000002384e-01_f32 as f64,
        4.2857143283e-01_f32 as f64,
        3.3333334327e-01_f32 as f64,
        2.7272811532e-01_f32 as f64,
        2.3066075146e-01_f32 as f64,
        2.0697501302e-01_f32 as f64,
    ],
    p: [
        1.6666667163e-01_f32 as f64,
        -2.7777778450e-03_f32 as f64,
        6.6137559770e-05_f32 as f64,
        -1.6533901999e-06_f32 as f64,
        4.1381369442e-08_f32 as f64,
    ],
    lg2: [
        6.9314718246e-01_f32 as f64,
        6.93145752e-01_f32 as f64,
        1.42860654e-06_f32 as f64,
    ],
    cp: [
        9.6179670095e-01_f32 as f64,
        9.6191406250e-01_f32 as f64,
        -1.1736857402e-04_f32 as f64,
    ],
};

/// The word pow works on: an f64's high word (sign-extended, in an `i64`),
/// an f32's bits (an `i32`).
fn word(m: &mut Emitter<'_>, x: Reg) -> Reg {
    if m.ty(x) == DType::F32 {
        m.bitcast(DType::I32, x)
    } else {
        let bits = m.bitcast(DType::I64, x);
        m.shr_k(bits, 32)
    }
}

/// The float whose word is `w`: for an f64, with the low word of `low`, or
/// zero (`with_set_high_word`).
fn with_word(m: &mut Emitter<'_>, dtype: DType, w: Reg, low: Option<Reg>) -> Reg {
    if dtype == DType::F32 {
        return m.bitcast(DType::F32, w);
    }
    let high = m.shl_k(w, 32);
    let bits = match low {
        Some(low) => {
            let low = m.bitcast(DType::I64, low);
            let low = m.band_k(low, 0xffff_ffff);
            m.bin(BinaryOp::BOr, high, low)
        }
        None => high,
    };
    m.bitcast(DType::F64, bits)
}

/// The `libm` crate's `pow` (FreeBSD's `e_pow.c`) and `powf`: `log2|x|` in
/// extra precision as `t1 + t2`, times `y` split likewise, then `2^z`.
fn pow(m: &mut Emitter<'_>, x: Reg, y: Reg) -> Reg {
    let dtype = m.ty(x);
    let f = if dtype == DType::F32 {
        &POW_F32
    } else {
        &POW_F64
    };
    let one_word = f.bias << f.mant;
    let (ix, x_neg) = magnitude_word(m, x);
    let (iy, _) = magnitude_word(m, y);
    let ax = m.abs(x);
    let ay = m.abs(y);

    // y an integer, and odd: its mantissa (with the hidden bit) has no bits
    // below the units, which sit `mant - e` bits up the word (f32) or
    // `mant + 32 - e` up the bits (f64); |y| >= 1 here, and below 2^31
    // wherever the result is computed.
    let (int, units) = if dtype == DType::F32 {
        (DType::I32, f.mant)
    } else {
        (DType::I64, 52)
    };
    let width = if dtype == DType::F32 { 31 } else { 63 };
    let y_bits = m.bitcast(int, y);
    let frac_mask = (1i64 << units) - 1;
    let y_mant = m.band_k(y_bits, frac_mask);
    let hidden = m.int_like(y_mant, 1 << units);
    let y_mant = m.bin(BinaryOp::BOr, y_mant, hidden);
    let y_exp = m.shr_k(iy, f.mant);
    let y_exp = m.add_k(y_exp, -f.bias);
    let units_k = m.int_like(y_exp, units);
    let shift = m.sub(units_k, y_exp);
    let shift = m.band_k(shift, width);
    let one = m.int_like(y_mant, 1);
    let unit = m.bin(BinaryOp::Shl, one, shift);
    let below = m.sub(unit, one);
    let fraction = m.bin(BinaryOp::BAnd, y_mant, below);
    let whole = m.cmp_k(CmpOp::Eq, fraction, 0);
    let at_least_one = m.cmp_k(CmpOp::Ge, y_exp, 0);
    let y_int = m.and(whole, at_least_one);
    let units_bit = m.bin(BinaryOp::BAnd, y_mant, unit);
    let odd_bit = m.cmp_k(CmpOp::Ne, units_bit, 0);
    let odd = m.and(y_int, odd_bit);
    let negative_result = m.and(x_neg, odd);
    let sign = m.select_f(negative_result, dtype, -1.0, 1.0);

    // log2|x| = t1 + t2, for a normal |x|.
    let n = m.shr_k(ix, f.mant);
    let n = m.add_k(n, -f.bias);
    let j = m.band_k(ix, (1 << f.mant) - 1);
    let low_k = m.cmp_k(CmpOp::Le, j, f.k_bounds[0]);
    let mid_k = m.cmp_k(CmpOp::Lt, j, f.k_bounds[1]);
    let up = m.or(low_k, mid_k);
    let up = m.not(up);
    let k1 = {
        let not_low = m.not(low_k);
        m.and(not_low, mid_k)
    };
    let normalized = m.bor_k(j, one_word);
    let octave = m.int_like(normalized, 1 << f.mant);
    let down = m.sub(normalized, octave);
    let ixn = m.select(up, down, normalized);
    let n_up = m.add_k(n, 1);
    let n = m.select(up, n_up, n);
    let ax = with_word(m, dtype, ixn, Some(ax));
    let bp = m.select_f(k1, dtype, f.bp[1], f.bp[0]);
    let u = m.sub(ax, bp);
    let axb = m.add(ax, bp);
    let one_f = m.float(dtype, 1.0);
    let v = m.div(one_f, axb);
    let ss = m.mul(u, v);
    let s_h = m.cut_bits(ss, f.cut);
    // t_h = ax + bp[k], high part, from the word.
    let t_h_word = if dtype == DType::F32 {
        let half = m.shr_k(ixn, 1);
        let half = m.band_k(half, 0xfffff000_u32 as i32 as i64);
        let w = m.bor_k(half, 0x20000000);
        let w = m.add_k(w, 0x00400000);
        let kb = m.cast(DType::I32, k1);
        let kb = m.shl_k(kb, 21);
        m.add(w, kb)
    } else {
        let half = m.shr_k(ixn, 1);
        let w = m.bor_k(half, 0x20000000);
        let w = m.add_k(w, 0x00080000);
        let kb = m.cast(DType::I64, k1);
        let kb = m.shl_k(kb, 18);
        m.add(w, kb)
    };
    let t_h = with_word(m, dtype, t_h_word, None);
    let t_h_bp = m.sub(t_h, bp);
    let t_l = m.sub(ax, t_h_bp);
    let s_l = {
        let a = m.mul(s_h, t_h);
        let a = m.sub(u, a);
        let b = m.mul(s_h, t_l);
        let d = m.sub(a, b);
        m.mul(v, d)
    };
    let s2 = m.mul(ss, ss);
    let s4 = m.mul(s2, s2);
    let poly = m.horner(s2, &f.l);
    let r = m.mul(s4, poly);
    let r = {
        let a = m.add(s_h, ss);
        let b = m.mul(s_l, a);
        m.add(r, b)
    };
    let s2 = m.mul(s_h, s_h);
    let three = m.float(dtype, 3.0);
    let t_h = m.add(three, s2);
    let t_h = m.add(t_h, r);
    let t_h = m.cut_bits(t_h, f.cut);
    let t_l = {
        let a = m.sub(t_h, three);
        let a = m.sub(a, s2);
        m.sub(r, a)
    };
    let u = m.mul(s_h, t_h);
    let v = {
        let a = m.mul(s_l, t_h);
        let b = m.mul(t_l, ss);
        m.add(a, b)
    };
    let p_h = m.add(u, v);
    let p_h = m.cut_bits(p_h, f.cut);
    let p_l = {
        let a = m.sub(p_h, u);
        m.sub(v, a)
    };
    let [cp, cp_h, cp_l] = f.cp;
    let z_h = {
        let c = m.float(dtype, cp_h);
        m.mul(c, p_h)
    };
    let dp_l = m.select_f(k1, dtype, f.dp_l[1], f.dp_l[0]);
    let dp_h = m.select_f(k1, dtype, f.dp_h[1], f.dp_h[0]);
    let z_l = {
        let c = m.float(dtype, cp_l);
        let a = m.mul(c, p_h);
        let c = m.float(dtype, cp);
        let b = m.mul(p_l, c);
        let s = m.add(a, b);
        m.add(s, dp_l)
    };
    let t = m.cast(dtype, n);
    let t1 = {
        let a = m.add(z_h, z_l);
        let a = m.add(a, dp_h);
        let a = m.add(a, t);
        m.cut_bits(a, f.cut)
    };
    let t2 = {
        let a = m.sub(t1, t);
        let a = m.sub(a, dp_h);
        let a = m.sub(a, z_h);
        m.sub(z_l, a)
    };

    // y·log2|x| = p_h + p_l.
    let y1 = m.cut_bits(y, f.cut);
    let p_l = {
        let a = m.sub(y, y1);
        let a = m.mul(a, t1);
        let b = m.mul(y, t2);
        m.add(a, b)
    };
    let p_h = m.mul(y1, t1);
    let z = m.add(p_l, p_h);
    let jz = word(m, z);
    let over = m.cmp_k(CmpOp::Ge, jz, f.over_under[0]);
    let iz = m.band_k(jz, 0x7fff_ffff);
    let under = m.cmp_k(CmpOp::Ge, iz, f.over_under[1]);

    // 2^(p_h + p_l): n = [z + 0.5] where |z| > 0.5, taken out of p_h.
    let kz = m.shr_k(iz, f.mant);
    let kz = m.add_k(kz, -f.bias);
    let big = m.cmp_k(CmpOp::Gt, iz, f.half);
    let mask = if dtype == DType::F32 { 31 } else { 63 };
    let mant_mask = (1i64 << f.mant) - 1;
    let nz = {
        let k1 = m.add_k(kz, 1);
        let k1 = m.band_k(k1, mask);
        let h = m.int_like(jz, 1 << f.mant);
        let h = m.bin(BinaryOp::ShrArith, h, k1);
        m.add(jz, h)
    };
    let kn = m.band_k(nz, 0x7fff_ffff);
    let kn = m.shr_k(kn, f.mant);
    let kn = m.add_k(kn, -f.bias);
    let kn_m = m.band_k(kn, mask);
    let t_word = {
        let frac = m.int_like(nz, mant_mask);
        let frac = m.bin(BinaryOp::ShrArith, frac, kn_m);
        let minus_one = m.int_like(frac, -1);
        let keep = m.bin(BinaryOp::BXor, frac, minus_one);
        let w = m.bin(BinaryOp::BAnd, nz, keep);
        if dtype == DType::F32 {
            w
        } else {
            m.band_k(w, 0xffff_ffff)
        }
    };
    let t = with_word(m, dtype, t_word, None);
    let n2 = {
        let a = m.band_k(nz, mant_mask);
        let a = m.bor_k(a, 1 << f.mant);
        let units = m.int_like(kn, f.mant);
        let s = m.sub(units, kn);
        let s = m.band_k(s, mask);
        m.bin(BinaryOp::ShrArith, a, s)
    };
    let z_neg = m.cmp_k(CmpOp::Lt, jz, 0);
    let minus_n2 = m.neg(n2);
    let n2 = m.select(z_neg, minus_n2, n2);
    let zero = m.int_like(n2, 0);
    let n2 = m.select(big, n2, zero);
    let p_h_less = m.sub(p_h, t);
    let p_h = m.select(big, p_h_less, p_h);

    let t = m.add(p_l, p_h);
    let t = m.cut_bits(t, f.cut_t);
    let [lg2, lg2_h, lg2_l] = f.lg2;
    let u = {
        let c = m.float(dtype, lg2_h);
        m.mul(t, c)
    };
    let v = {
        let a = m.sub(t, p_h);
        let a = m.sub(p_l, a);
        let c = m.float(dtype, lg2);
        let a = m.mul(a, c);
        let c = m.float(dtype, lg2_l);
        let b = m.mul(t, c);
        m.add(a, b)
    };
    let z = m.add(u, v);
    let w = {
        let a = m.sub(z, u);
        m.sub(v, a)
    };
    let tt = m.mul(z, z);
    let t1 = {
        let poly = m.horner(tt, &f.p);
        let a = m.mul(tt, poly);
        m.sub(z, a)
    };
    let r = {
        let a = m.mul(z, t1);
        let two = m.float(dtype, 2.0);
        let b = m.sub(t1, two);
        let q = m.div(a, b);
        let c = m.mul(z, w);
        let c = m.add(w, c);
        m.sub(q, c)
    };
    let z = {
        let a = m.sub(r, z);
        m.sub(one_f, a)
    };
    // Scale by 2^n through the exponent field.
    let (scaled, exponent) = if dtype == DType::F32 {
        let bits = m.bitcast(DType::I32, z);
        let nn = m.shl_k(n2, 23);
        let bits = m.add(bits, nn);
        let e = m.shr_k(bits, 23);
        (m.bitcast(DType::F32, bits), e)
    } else {
        let bits = m.bitcast(DType::I64, z);
        let nn = m.shl_k(n2, 52);
        let bits = m.add(bits, nn);
        let e = m.shr_k(bits, 52);
        (m.bitcast(DType::F64, bits), e)
    };
    let subnormal = m.cmp_k(CmpOp::Le, exponent, 0);
    let value = m.mul(sign, scaled);

    // Everything the scalar code returns early for.
    let y_zero = m.cmp_f(CmpOp::Eq, y, 0.0);
    let x_one = m.cmp_f(CmpOp::Eq, x, 1.0);
    let x_nan = m.cmp(CmpOp::Ne, x, x);
    let y_nan = m.cmp(CmpOp::Ne, y, y);
    let y_unit = m.cmp_f(CmpOp::Eq, ay, 1.0);
    let y_inf = m.cmp_f(CmpOp::Eq, ay, f64::INFINITY);
    let y_two = m.cmp_f(CmpOp::Eq, y, 2.0);
    let y_half = m.cmp_f(CmpOp::Eq, y, 0.5);
    let x_zero = m.cmp_f(CmpOp::Eq, x, 0.0);
    let x_unit = m.cmp_f(CmpOp::Eq, ax, 1.0);
    let x_inf = m.cmp_f(CmpOp::Eq, ax, f64::INFINITY);
    let not_int = m.not(y_int);
    let negative_nan = m.and(x_neg, not_int);
    let y_huge = m.cmp_k(CmpOp::Gt, iy, f.huge_y);
    let x_subnormal = m.cmp_k(CmpOp::Lt, ix, 1 << f.mant);
    let rare = m.any(&[
        y_zero,
        x_one,
        x_nan,
        y_nan,
        y_unit,
        y_inf,
        y_two,
        y_half,
        x_zero,
        x_unit,
        x_inf,
        negative_nan,
        y_huge,
        x_subnormal,
        over,
        under,
        subnormal,
    ]);
    m.call_where(MathCall::Binary(BinaryOp::Pow, x, y), rare, value)
}
