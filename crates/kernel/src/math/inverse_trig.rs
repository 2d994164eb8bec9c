//! `atan`, `asin`, `acos` (`f64`, `f32`).

use super::*;

/// The `libm` crate's `atan` (f64; FreeBSD's `s_atan.c`) and `atanf`,
/// branch-free: the four reductions (of 7/16, 11/16, 19/16 and 39/16 and
/// up) computed and the one of |x|'s interval kept, with its atan(hi, lo).
pub(super) fn atan_core(m: &mut Emitter<'_>, x: Reg) -> Reg {
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
    let pick = |m: &mut Emitter<'_>, v: [Reg; 4]| {
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
pub(super) fn atan(kernel: &mut Kernel, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    atan_core(&mut Emitter { kernel, out }, x)
}

/// `asin`'s and `acos`'s rational `R(z) = z·P(z)/Q(z)`, in `z`'s dtype.
pub(super) fn asin_r(m: &mut Emitter<'_>, z: Reg) -> Reg {
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
pub(super) fn asin(kernel: &mut Kernel, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    const PIO2_HI: f64 = 1.57079632679489655800e+00;
    const PIO2_LO: f64 = 6.12323399573676603587e-17;
    let mut m = Emitter { kernel, out };
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
pub(super) fn acos(kernel: &mut Kernel, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    let mut m = Emitter { kernel, out };
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
