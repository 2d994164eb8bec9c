//! `tanh`, `sinh`, `cosh` (over `expm1` and `exp`), and `asinh`, `acosh`,
//! `atanh` (over `log1p` and `log`).

use super::*;

/// The `libm` crate's `tanh` (f64) and `tanhf` (musl's), branch-free: one
/// `expm1`, of `2|x|` or `-2|x|` as the scalar code's branch would take it.
pub(super) fn tanh_core(m: &mut Emitter<'_>, x: Reg) -> Reg {
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
pub(super) fn tanh_f64(kernel: &mut Kernel, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    tanh_core(&mut Emitter { kernel, out }, x)
}

/// The `libm` crate's `tanhf`.
pub(super) fn tanh_f32(kernel: &mut Kernel, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    tanh_core(&mut Emitter { kernel, out }, x)
}

/// `sinh` and `cosh` (f64) and `sinhf` and `coshf`: musl's, branch-free,
/// through `expm1` and one `exp` (of `|x|` or, past log(MAX), of
/// `|x| - k·ln2` for `k_expo2`'s scaling by `2^(k-1)` in two steps).
pub(super) fn hyperbolic(m: &mut Emitter<'_>, x: Reg, op: UnaryOp) -> Reg {
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
        exp(m.kernel, m.out, arg)
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
pub(super) fn sinh(kernel: &mut Kernel, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    hyperbolic(&mut Emitter { kernel, out }, x, UnaryOp::Sinh)
}

/// The `libm` crate's `cosh` (f64) and `coshf`.
pub(super) fn cosh(kernel: &mut Kernel, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    hyperbolic(&mut Emitter { kernel, out }, x, UnaryOp::Cosh)
}

/// The `libm` crate's `asinh`, `acosh` and `atanh` (musl's), f64 and f32,
/// branch-free over inline `log`, `log1p` and `sqrt`: one `log` (of the
/// argument |x|'s range takes) and one `log1p` each.
pub(super) fn inverse_hyperbolic(m: &mut Emitter<'_>, x: Reg, op: UnaryOp) -> Reg {
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
    let log = |m: &mut Emitter<'_>, v: Reg| {
        if f32 {
            log_f32(m.kernel, m.out, v)
        } else {
            log_f64(m.kernel, m.out, v)
        }
    };
    // log(arg), or log(at_huge) + ln 2 from 2^26 (2^12) on.
    let wide_log = |m: &mut Emitter<'_>, at_huge: Reg, arg: Reg| {
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
pub(super) fn asinh(kernel: &mut Kernel, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    inverse_hyperbolic(&mut Emitter { kernel, out }, x, UnaryOp::Asinh)
}

/// See [`asinh`].
pub(super) fn acosh(kernel: &mut Kernel, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    inverse_hyperbolic(&mut Emitter { kernel, out }, x, UnaryOp::Acosh)
}

/// See [`asinh`].
pub(super) fn atanh(kernel: &mut Kernel, out: &mut Vec<Stmt>, x: Reg) -> Reg {
    inverse_hyperbolic(&mut Emitter { kernel, out }, x, UnaryOp::Atanh)
}
