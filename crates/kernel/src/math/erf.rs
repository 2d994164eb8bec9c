//! `erf` and `erfc`: the `libm` crate's rational approximations on its five
//! intervals (`erf` of `f64`, `erfc` of both), and kiln's own `erf` of `f32`
//! (`kiln_ir::math::kiln_erff`).

use super::*;

/// What `erf`/`erfc` (f64) and `erff`/`erfcf` differ in: coefficients
/// (each polynomial's list starts with its constant term) and thresholds
/// on |x|'s high word (f64) or bits (f32).
pub(super) struct Erf {
    pub(super) erx: f64,
    pub(super) efx8: f64,
    pub(super) pp: &'static [f64],
    pub(super) qq: &'static [f64],
    pub(super) pa: &'static [f64],
    pub(super) qa: &'static [f64],
    pub(super) ra: &'static [f64],
    pub(super) sa: &'static [f64],
    pub(super) rb: &'static [f64],
    pub(super) sb: &'static [f64],
    /// Not finite; 0.84375; erf's and erfc's tiny arguments; 1/4; 1.25
    /// (erfc1's end); 1/0.35 (the two erfc2 polynomials); 6 (erf's end)
    /// and 28 (erfc's).
    pub(super) nonfinite: i64,
    pub(super) small: i64,
    pub(super) erf_tiny: i64,
    pub(super) erfc_tiny: i64,
    pub(super) quarter: i64,
    pub(super) near_one: i64,
    pub(super) split: i64,
    pub(super) erf_end: i64,
    pub(super) erfc_end: i64,
    /// The tiny value past the ends (2^-1022, 2^-120), and the mask that
    /// rounds |x| down to z.
    pub(super) tiny: f64,
    pub(super) z_mask: i64,
}

pub(super) const ERF_F64: Erf = Erf {
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

pub(super) const ERF_F32: Erf = Erf {
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
/// quotient `y = r/s` of `z = x*x`, `erfc2`, `1/x` (where `x` is not
/// finite), and whether `|x| < 0.84375` and whether `x` is not finite.
pub(super) struct ErfParts {
    pub(super) c: &'static Erf,
    pub(super) hx: Reg,
    pub(super) negative: Reg,
    pub(super) small_y: Reg,
    pub(super) erfc2: Reg,
    pub(super) inv_x: Reg,
    pub(super) is_small: Reg,
    pub(super) nonfinite: Reg,
}

pub(super) fn erf_parts(m: &mut Emitter<'_>, x: Reg) -> ErfParts {
    let dtype = m.ty(x);
    let c = if dtype == DType::F32 {
        &ERF_F32
    } else {
        &ERF_F64
    };
    let (hx, negative) = magnitude_word(m, x);
    let a = m.abs(x);
    let one = m.float(dtype, 1.0);
    // A lane takes one interval, so it needs one of the three quotients
    // below (r/s of |x| < 0.84375, P/Q below 1.25, R/S above) and one of
    // 1/x² (above 1.25) and 1/x (not finite): each pair is one division of
    // the lane's own operands, which are computed as before, so every
    // lane's bits are the `libm` crate's (6 divisions a lane became 3).
    let aa = m.mul(a, a);
    let nonfinite = m.cmp_k(CmpOp::Ge, hx, c.nonfinite);
    let inv_of = m.select(nonfinite, x, aa);
    let inv = m.div(one, inv_of);
    // Below 0.84375: r(z)/s(z), z = x*x.
    let z = m.mul(x, x);
    let (r_small, s_small) = (m.horner(z, c.pp), m.horner(z, c.qq));
    // Below 1.25: P(s)/Q(s), s = |x| - 1.
    let s_near = m.sub(a, one);
    let (p_near, q_near) = (m.horner(s_near, c.pa), m.horner(s_near, c.qa));
    // Above: R(s)/S(s), s = 1/x², the polynomials below or above 1/0.35.
    let ra = m.horner(inv, c.ra);
    let sa = m.horner(inv, c.sa);
    let rb = m.horner(inv, c.rb);
    let sb = m.horner(inv, c.sb);
    let below = m.cmp_k(CmpOp::Lt, hx, c.split);
    let r_far = m.select(below, ra, rb);
    let s_far = m.select(below, sa, sb);
    let is_small = m.cmp_k(CmpOp::Lt, hx, c.small);
    let near = m.cmp_k(CmpOp::Lt, hx, c.near_one);
    let num = m.select(near, p_near, r_far);
    let num = m.select(is_small, r_small, num);
    let den = m.select(near, q_near, s_far);
    let den = m.select(is_small, s_small, den);
    let quotient = m.div(num, den);
    let small_y = quotient;
    // erfc1, below 1.25: 1 - erx - P(s)/Q(s) with s = |x| - 1.
    let erfc1 = {
        let erx = m.float(dtype, c.erx);
        let d = m.sub(one, erx);
        m.sub(d, quotient)
    };
    // Above: exp(-z*z - 0.5625) * exp((z - |x|)*(z + |x|) + R/S) / |x|,
    // with s = 1/x², R/S the polynomials below or above 1/0.35 and z |x|
    // rounded down (its low word, or low 13 bits, cleared).
    let far = {
        let z = m.cut_bits(a, c.z_mask);
        let nz = m.neg(z);
        let zz = m.mul(nz, z);
        let k = m.float(dtype, 0.5625);
        let arg1 = m.sub(zz, k);
        let zm = m.sub(z, a);
        let zp = m.add(z, a);
        let prod = m.mul(zm, zp);
        let arg2 = m.add(prod, quotient);
        let exp = if dtype == DType::F32 {
            exp_f32
        } else {
            exp_f64
        };
        let e1 = exp(m.kernel, m.out, arg1);
        let e2 = exp(m.kernel, m.out, arg2);
        let e = m.mul(e1, e2);
        m.div(e, a)
    };
    let erfc2 = m.select(near, erfc1, far);
    ErfParts {
        c,
        hx,
        negative,
        small_y,
        erfc2,
        inv_x: inv,
        is_small,
        nonfinite,
    }
}

/// The `libm` crate's `erf` and `erff` (FreeBSD's `s_erf.c`), branch-free.
pub(super) fn erf_core(m: &mut Emitter<'_>, x: Reg) -> Reg {
    let dtype = m.ty(x);
    let ErfParts {
        c,
        hx,
        negative,
        small_y,
        erfc2,
        inv_x,
        is_small,
        nonfinite,
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
        m.add(d, inv_x)
    };
    let is_tiny = m.cmp_k(CmpOp::Lt, hx, c.erf_tiny);
    let small = m.select(is_tiny, tiny, small);
    let result = m.select(is_small, small, y);
    m.select(nonfinite, special, result)
}

/// The `libm` crate's `erfc` and `erfcf` (FreeBSD's `s_erf.c`), branch-free.
pub(super) fn erfc_core(m: &mut Emitter<'_>, x: Reg) -> Reg {
    let dtype = m.ty(x);
    let ErfParts {
        c,
        hx,
        negative,
        small_y,
        erfc2,
        inv_x,
        is_small,
        nonfinite,
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
        m.add(ts, inv_x)
    };
    let result = m.select(is_small, small, large);
    m.select(nonfinite, special, result)
}

/// The `libm` crate's `erf` (f64).
pub(super) fn erf(kernel: &mut Kernel, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    erf_core(&mut Emitter { kernel, out }, x)
}

/// kiln's `erf` of `f32` ([`kiln_ir::math::kiln_erff`]), both intervals in
/// every lane and the lane's own kept: `x + x·P(x²)` below 1 (and NaN),
/// `±(1 - Q(|x| - 2))` below 3.92, `±1` beyond.
pub(super) fn erf_f32(kernel: &mut Kernel, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    use kiln_ir::math::{ERFF_LARGE, ERFF_MID, ERFF_ONE, ERFF_SMALL, ERFF_SPLIT};
    let m = &mut Emitter { kernel, out };
    let a = m.abs(x);
    let small = {
        let z = m.mul(x, x);
        let y = m.horner_fused(z, &ERFF_SMALL);
        m.mul_add(x, y, x)
    };
    let large = {
        let mid = m.f32(ERFF_MID);
        let t = m.sub(a, mid);
        let q = m.horner_fused(t, &ERFF_LARGE);
        let one = m.f32(1.0);
        let v = m.sub(one, q);
        let end = m.f32(ERFF_ONE);
        let inside = m.cmp(CmpOp::Lt, a, end);
        let v = m.select(inside, v, one);
        // x is not NaN where this lane is kept.
        m.bin(BinaryOp::Copysign, v, x)
    };
    let split = m.f32(ERFF_SPLIT);
    let is_large = m.cmp(CmpOp::Ge, a, split);
    m.select(is_large, large, small)
}

/// The `libm` crate's `erfc` (f64) and `erfcf`.
pub(super) fn erfc(kernel: &mut Kernel, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    erfc_core(&mut Emitter { kernel, out }, x)
}
