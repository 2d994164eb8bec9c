//! `sin`, `cos`, `tan` (`f64`, `f32`): argument reduction by `pi/2`
//! (`rem_pio2`; huge arguments fall back to the `libm` call) and the kernel
//! polynomials.

use super::*;

/// `k_tan` (f64, FreeBSD's `k_tan.c`): tan(x + y) for |x| <= pi/4, or
/// -1/tan(x + y) where `odd`, branch-free.
pub(super) fn k_tan(m: &mut Emitter<'_>, x: Reg, y: Reg, odd: Reg) -> Reg {
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
pub(super) fn k_tanf(m: &mut Emitter<'_>, x: Reg, odd: Reg) -> Reg {
    const T: [f64; 6] = kiln_ir::math::K_TANF;
    let z = m.mul(x, x);
    let t = |m: &mut Emitter<'_>, i: usize| m.f64(T[i]);
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
/// `reduction`: how much of an `f64` argument's reduction is inline.
pub(super) fn tan(kernel: &mut Kernel, out: &mut Vec<Stmt>, x: Reg, reduction: Reduction) -> Reg {
    let mut m = Emitter { kernel, out };
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
    let (q, y0, y1, more) = rem_pio2(&mut m, x, ix, negative, reduction);
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
    let rare = rare_f64(&mut m, ix, special, more);
    trig_tail(&mut m, UnaryOp::Tan, x, [special, rare], value)
}

/// How much of `rem_pio2` an `f64` expansion computes inline.
#[derive(Copy, Clone, PartialEq, Eq)]
pub(super) enum Reduction {
    /// Every round: the expansion is the `libm` function wherever the
    /// argument is below 2^20·pi/2. What `lower` emits for every tier: an
    /// object's or a wasm module's fallback reaches the platform's libm.
    Whole,
    /// The first round only: an argument that needs a second (within about
    /// 2^-16 of a multiple of pi/2, relative: the first round's result lost
    /// more than 16 bits) is left to the fallback with the huge ones. For a
    /// backend whose fallback is the `libm` crate's own function
    /// ([`crate::math_kernel`]'s), so the bits stay the same: the second
    /// and third rounds were a sixth of every lane's work.
    FirstRound,
}

/// The lanes an `f64` `sin`/`cos`/`tan` leaves to the `libm` function:
/// huge finite arguments, and those `more` (a first round's reduction that
/// needs another) flags.
fn rare_f64(m: &mut Emitter<'_>, ix: Reg, special: Reg, more: Option<Reg>) -> Reg {
    let huge = m.cmp_k(CmpOp::Ge, ix, 0x4139_21fb);
    let finite = m.not(special);
    let rare = m.and(huge, finite);
    match more {
        Some(more) => m.or(rare, more),
        None => rare,
    }
}

/// The `libm` crate's `rem_pio2` (FreeBSD's `e_rem_pio2.c`) for `|x|`
/// above pi/4 and below 2^20·pi/2 (`ix`: the high word of `|x|`):
/// `x = n·pi/2 + y0 + y1`, as `(n & 3, y0, y1)`. Below 9pi/4 the scalar code subtracts a
/// fixed multiple of pi/2 once (except next to multiples of pi/2, where it
/// cancels and the general path runs); that is the general path's first
/// round with `n` given instead of rounded, so both share one computation
/// and only the general path takes further rounds.
///
/// With [`Reduction::FirstRound`] only the first round is computed, and the
/// fourth register returned flags the lanes that need another (the
/// caller's fallback computes those); with [`Reduction::Whole`] it is `None`.
pub(super) fn rem_pio2(
    m: &mut Emitter<'_>,
    x: Reg,
    ix: Reg,
    negative: Reg,
    reduction: Reduction,
) -> (Reg, Reg, Reg, Option<Reg>) {
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
    let round = |m: &mut Emitter<'_>, t: Reg, [c, ct]: [f64; 2], first: bool| {
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
    // Another round while the result lost more than 16 (then 49) bits to
    // cancellation: `ex - ey` with `ex` the high word's exponent field.
    let c20 = m.i64(20);
    let ex = m.bin(BinaryOp::ShrLogical, ix, c20);
    let lost = |m: &mut Emitter<'_>, y0: Reg, bits: i64| {
        let ey = exponent_f64(m, y0);
        let d = m.sub(ex, ey);
        m.cmp_k(CmpOp::Gt, d, bits)
    };
    let second = {
        let general = m.not(small);
        let lost = lost(m, y01, 16);
        m.and(general, lost)
    };
    let finish = |m: &mut Emitter<'_>, [r, w, y0]: [Reg; 3]| {
        let d = m.sub(r, y0);
        let y1 = m.sub(d, w);
        let n = m.integer_of(f_n);
        let q = m.band_k(n, 3);
        (q, y0, y1)
    };
    if reduction == Reduction::FirstRound {
        let (q, y0, y1) = finish(m, [r1, w1, y01]);
        return (q, y0, y1, Some(second));
    }
    let (r2, w2, y02) = round(m, r1, [PIO2_2, PIO2_2T], false);
    let (r3, w3, y03) = round(m, r2, [PIO2_3, PIO2_3T], false);
    let third = {
        let lost = lost(m, y02, 49);
        m.and(second, lost)
    };
    let pick = |m: &mut Emitter<'_>, [a, b, c]: [Reg; 3]| {
        let v = m.select(second, b, a);
        m.select(third, c, v)
    };
    let r = pick(m, [r1, r2, r3]);
    let w = pick(m, [w1, w2, w3]);
    let y0 = pick(m, [y01, y02, y03]);
    let (q, y0, y1) = finish(m, [r, w, y0]);
    (q, y0, y1, None)
}

/// The `libm` crate's `k_sin` on `x + y` (|x| <= pi/4), both forms: the
/// first (`iy = 0`) for an unreduced `x`, the second for a reduced one.
pub(super) fn k_sin(m: &mut Emitter<'_>, x: Reg, y: Reg) -> (Reg, Reg) {
    let [s1, s2, s3, s4, s5, s6] = kiln_ir::math::K_SIN;
    let z = m.mul(x, x);
    let w = m.mul(z, z);
    let p = m.horner(z, &[s2, s3, s4]);
    let zw = m.mul(z, w);
    let q = m.horner(z, &[s5, s6]);
    let t = m.mul(zw, q);
    let r = m.add(p, t);
    let v = m.mul(z, x);
    let s1 = m.f64(s1);
    // x + v*(s1 + z*r)
    let unreduced = {
        let zr = m.mul(z, r);
        let t = m.add(s1, zr);
        let t = m.mul(v, t);
        m.add(x, t)
    };
    // x - ((z*(0.5*y - v*r) - y) - v*s1)
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
pub(super) fn k_cos(m: &mut Emitter<'_>, x: Reg, y: Reg) -> Reg {
    let [c1, c2, c3, c4, c5, c6] = kiln_ir::math::K_COS;
    let z = m.mul(x, x);
    let w = m.mul(z, z);
    let p = m.horner(z, &[c1, c2, c3]);
    let a = m.mul(z, p);
    let ww = m.mul(w, w);
    let q = m.horner(z, &[c4, c5, c6]);
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
pub(super) struct Trig {
    pub(super) direct: Reg,
    pub(super) quadrant: Reg,
    pub(super) sin_unreduced: Reg,
    pub(super) sin: Reg,
    pub(super) cos: Reg,
    pub(super) ix: Reg,
    pub(super) special: Reg,
    pub(super) rare: Reg,
}

pub(super) fn trig_f64(m: &mut Emitter<'_>, x: Reg, reduction: Reduction) -> Trig {
    let (ix, negative) = high_word(m, x);
    let direct = m.cmp_k(CmpOp::Le, ix, 0x3fe9_21fb);
    let (q, y0, y1, more) = rem_pio2(m, x, ix, negative, reduction);
    let y0 = m.select(direct, x, y0);
    let zero = m.f64(0.0);
    let y1 = m.select(direct, zero, y1);
    let zero_q = m.i32(0);
    let quadrant = m.select(direct, zero_q, q);
    let (sin_unreduced, sin) = k_sin(m, y0, y1);
    let cos = k_cos(m, y0, y1);
    let special = m.cmp_k(CmpOp::Ge, ix, 0x7ff0_0000);
    let rare = rare_f64(m, ix, special, more);
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

/// Whether `q & bit` is set, as a `bool`.
pub(super) fn quadrant_bit(m: &mut Emitter<'_>, q: Reg, bit: i64) -> Reg {
    let b = m.band_k(q, bit);
    m.cmp_k(CmpOp::Ne, b, 0)
}

/// The kernel (`cos` when true) and sign of the reduced argument's result in
/// quadrant `q` (`n & 3`): sin, cos, -sin, -cos for `sin`; cos, -sin, -cos,
/// sin for `cos`.
pub(super) fn quadrant_choice(m: &mut Emitter<'_>, op: UnaryOp, q: Reg) -> (Reg, Reg) {
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
pub(super) fn trig_tail(
    m: &mut Emitter<'_>,
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
/// arguments from 2^20·pi/2 on, which the `libm` function reduces (and,
/// with [`Reduction::FirstRound`], those that need a second round).
pub(super) fn sin_f64(
    kernel: &mut Kernel,
    out: &mut Vec<Stmt>,
    x: Reg,
    reduction: Reduction,
) -> Reg {
    let mut m = Emitter { kernel, out };
    let t = trig_f64(&mut m, x, reduction);
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
pub(super) fn cos_f64(
    kernel: &mut Kernel,
    out: &mut Vec<Stmt>,
    x: Reg,
    reduction: Reduction,
) -> Reg {
    let mut m = Emitter { kernel, out };
    let t = trig_f64(&mut m, x, reduction);
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
pub(super) fn k_sinf_cosf(m: &mut Emitter<'_>, x: Reg) -> (Reg, Reg) {
    let [s1, s2, s3, s4] = kiln_ir::math::K_SINF;
    let [c0, c1, c2, c3] = kiln_ir::math::K_COSF;
    let z = m.mul(x, x);
    let w = m.mul(z, z);
    // ((x + s*(S1 + z*S2)) + s*w*r), r = S3 + z*S4, s = z*x
    let sin = {
        let r = m.horner(z, &[s3, s4]);
        let s = m.mul(z, x);
        let p = m.horner(z, &[s1, s2]);
        let t = m.mul(s, p);
        let a = m.add(x, t);
        let sw = m.mul(s, w);
        let b = m.mul(sw, r);
        m.add(a, b)
    };
    // (((1 + z*C0) + w*C1) + (w*z)*r), r = C2 + z*C3
    let cos = {
        let r = m.horner(z, &[c2, c3]);
        let a = m.horner(z, &[1.0, c0]);
        let c1 = m.f64(c1);
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
pub(super) struct TrigF {
    /// `|x| <= pi/4`.
    pub(super) direct: Reg,
    /// `|x|` below 9pi/4 and above pi/4, by quarter: `(<= 3pi/4, <= 5pi/4,
    /// <= 7pi/4, above)`.
    pub(super) quarter: [Reg; 4],
    pub(super) negative: Reg,
    /// `rem_pio2f`'s `n & 3` (beyond 9pi/4).
    pub(super) quadrant: Reg,
    pub(super) sin: Reg,
    pub(super) cos: Reg,
    pub(super) ix: Reg,
    pub(super) special: Reg,
    pub(super) rare: Reg,
}

/// `sinf`/`cosf`/`tanf`'s argument reduction: the f64 argument of their
/// kernels (x, x ∓ k·pi/2 below 9pi/4, rem_pio2f's y beyond) and the
/// conditions that choose among them.
pub(super) struct ReducedF {
    pub(super) arg: Reg,
    pub(super) direct: Reg,
    pub(super) quarter: [Reg; 4],
    pub(super) negative: Reg,
    pub(super) quadrant: Reg,
    pub(super) ix: Reg,
    pub(super) special: Reg,
    pub(super) rare: Reg,
}

pub(super) fn reduce_f32(m: &mut Emitter<'_>, x: Reg) -> ReducedF {
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

pub(super) fn trig_f32(m: &mut Emitter<'_>, x: Reg) -> TrigF {
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
pub(super) enum Negate {
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
pub(super) fn finish_f32(
    m: &mut Emitter<'_>,
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
pub(super) fn sin_f32(kernel: &mut Kernel, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    let mut m = Emitter { kernel, out };
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
pub(super) fn cos_f32(kernel: &mut Kernel, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    let mut m = Emitter { kernel, out };
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
