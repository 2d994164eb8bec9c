//! `sin` and `cos` of `f64` arguments of `2^20·π/2` and more, bit for bit
//! the `libm` crate's (FreeBSD's `__kernel_rem_pio2`, `__sin`, `__cos`),
//! and both from one reduction ([`sincos`]).
//!
//! The reduction of such an argument (Payne–Hanek, from 24-bit chunks of
//! `2/π`) is most of what the `libm` crate's `sin` costs there: about a
//! hundred nanoseconds, against a few for the polynomial. This port keeps
//! its operations and their order (so its bits), specialized to `f64`:
//! fixed sizes, casts of values known to fit without the saturating
//! checks `as` adds to a chain of dependent steps, powers of two by their
//! bits. `tests` compares it with the crate's functions on millions of
//! arguments spread over every exponent past the threshold.

/// `2/π` in 24-bit chunks: chunk `i` is bits `24i..24i + 24` after the
/// point (FreeBSD's `ipio2`; the 66 that a `double` needs).
const IPIO2: [i32; 66] = [
    0xA2F983, 0x6E4E44, 0x1529FC, 0x2757D1, 0xF534DD, 0xC0DB62, 0x95993C, 0x439041, 0xFE5163,
    0xABDEBB, 0xC561B7, 0x246E3A, 0x424DD2, 0xE00649, 0x2EEA09, 0xD1921C, 0xFE1DEB, 0x1CB129,
    0xA73EE8, 0x8235F5, 0x2EBB44, 0x84E99C, 0x7026B4, 0x5F7E41, 0x3991D6, 0x398353, 0x39F49C,
    0x845F8B, 0xBDF928, 0x3B1FF8, 0x97FFDE, 0x05980F, 0xEF2F11, 0x8B5A0A, 0x6D1F6D, 0x367ECF,
    0x27CB09, 0xB74F46, 0x3F669E, 0x5FEA2D, 0x7527BA, 0xC7EBE5, 0xF17B3D, 0x0739F7, 0x8A5292,
    0xEA6BFB, 0x5FB11F, 0x8D5D08, 0x560330, 0x46FC7B, 0x6BABF0, 0xCFBC20, 0x9AF436, 0x1DA9E3,
    0x91615E, 0xE61B08, 0x659985, 0x5F14A0, 0x68408D, 0xFFD880, 0x4D7327, 0x310606, 0x1556CA,
    0x73A8C9, 0x60E27B, 0xC08C6B,
];

/// `π/2` in chunks of 24 bits (FreeBSD's `PIo2`).
const PIO2: [f64; 8] = [
    1.57079625129699707031e+00,
    7.54978941586159635335e-08,
    5.39030252995776476554e-15,
    3.28200341580791294123e-22,
    1.27065575308067607349e-29,
    1.22933308981111328932e-36,
    2.73370053816464559624e-44,
    2.16741683877804819444e-51,
];

/// The high word of `|x|` from which FreeBSD's `__ieee754_rem_pio2` reduces
/// by [`rem_pio2_large`]: `|x| ≥ 2^20·π/2`.
const HUGE: u32 = 0x413921fb;

const X1P24: f64 = 16777216.0;
const X1P_24: f64 = 1.0 / 16777216.0;

/// `2^n` for `-1022 ≤ n ≤ 1023`, else `scalbn`'s steps.
fn scalbn(x: f64, n: i32) -> f64 {
    if (-1022..=1023).contains(&n) {
        // A normal power of two: `x · 2^n` is `scalbn`'s result wherever
        // that product is normal, and `scalbn` multiplies by it too.
        x * f64::from_bits(((0x3ff + n) as u64) << 52)
    } else {
        libm::scalbn(x, n)
    }
}

/// `v` truncated to an `i32`, for a `v` whose integer part fits.
#[inline(always)]
fn to_i32(v: f64) -> i32 {
    debug_assert!(v > -2147483649.0 && v < 2147483648.0, "{v} fits an i32");
    // SAFETY: every caller's `v` is finite with an integer part that fits
    // (chunks of 24 bits and their carries, a count below 8).
    unsafe { v.to_int_unchecked::<i32>() }
}

/// `(n, y0, y1)` with `y0 + y1 = x - n·π/2` (`|y0 + y1| ≤ π/4`) for a
/// finite `x` whose high word is [`HUGE`] or more: FreeBSD's
/// `__ieee754_rem_pio2` for such arguments, `__kernel_rem_pio2` at
/// `double` precision.
fn rem_pio2(x: f64) -> (i32, f64, f64) {
    let bits = x.to_bits();
    let ix = (bits >> 32) as u32 & 0x7fffffff;
    // z = scalbn(|x|, 23 - ilogb(x)), cut in chunks of 24 bits.
    let mut z = f64::from_bits((bits & ((!1u64) >> 12)) | ((0x3ff + 23) << 52));
    let mut tx = [0.0; 3];
    for t in tx.iter_mut().take(2) {
        *t = to_i32(z) as f64;
        z = (z - *t) * X1P24;
    }
    tx[2] = z;
    let mut nx = 3;
    while nx > 1 && tx[nx - 1] == 0.0 {
        nx -= 1;
    }
    let e0 = ((ix as i32) >> 20) - (0x3ff + 23);
    let (n, y0, y1) = rem_pio2_large::<4>(&tx[..nx], e0);
    if bits >> 63 != 0 {
        (-n, -y0, -y1)
    } else {
        (n, y0, y1)
    }
}

/// FreeBSD's `__kernel_rem_pio2(x, y, e0, nx, prec)`, operation for
/// operation (the `libm` crate's `rem_pio2_large`): `x` the argument's
/// chunks, `e0` the exponent of the first, `JK` the precision's `jk` (4
/// for `prec = 1`, `double`; 3 for `prec = 0`, `float`, whose result is
/// `y0` alone: `y1` is then not computed by the crate, and no caller reads
/// it).
fn rem_pio2_large<const JK: usize>(x: &[f64], e0: i32) -> (i32, f64, f64) {
    const { assert!(JK == 3 || JK == 4, "prec 0 or 1") };
    let jp = JK;
    let jx = x.len() - 1;
    let jv = ((e0 - 3) / 24).max(0);
    let mut q0 = e0 - 24 * (jv + 1);
    let jv = jv as usize;

    let mut f = [0.0f64; 20];
    let mut q = [0.0f64; 20];
    let mut iq = [0i32; 20];
    let mut fq = [0.0f64; 20];

    // f[0..=jx + jk] = ipio2[jv - jx..], zeros before its start.
    for (i, f) in f.iter_mut().enumerate().take(jx + JK + 1) {
        let j = jv as isize - jx as isize + i as isize;
        *f = if j < 0 { 0.0 } else { IPIO2[j as usize] as f64 };
    }
    // q[0..=jk]
    for i in 0..=JK {
        let mut fw = 0.0;
        for j in 0..=jx {
            fw += x[j] * f[jx + i - j];
        }
        q[i] = fw;
    }

    let mut jz = JK;
    let (mut z, mut n, mut ih);
    loop {
        // Distil q[] into iq[], reversed.
        z = q[jz];
        for (i, j) in (1..=jz).rev().enumerate() {
            let fw = to_i32(X1P_24 * z) as f64;
            iq[i] = to_i32(z - X1P24 * fw);
            z = q[j - 1] + fw;
        }
        // n
        z = scalbn(z, q0);
        z -= 8.0 * (z * 0.125).floor();
        n = to_i32(z);
        z -= n as f64;
        ih = 0;
        if q0 > 0 {
            let i = iq[jz - 1] >> (24 - q0);
            n += i;
            iq[jz - 1] -= i << (24 - q0);
            ih = iq[jz - 1] >> (23 - q0);
        } else if q0 == 0 {
            ih = iq[jz - 1] >> 23;
        } else if z >= 0.5 {
            ih = 2;
        }
        if ih > 0 {
            // q > 0.5: 1 - q.
            n += 1;
            let mut carry = 0;
            for v in iq.iter_mut().take(jz) {
                let j = *v;
                if carry == 0 {
                    if j != 0 {
                        carry = 1;
                        *v = 0x1000000 - j;
                    }
                } else {
                    *v = 0xffffff - j;
                }
            }
            match q0 {
                1 => iq[jz - 1] &= 0x7fffff,
                2 => iq[jz - 1] &= 0x3fffff,
                _ => {}
            }
            if ih == 2 {
                z = 1.0 - z;
                if carry != 0 {
                    z -= scalbn(1.0, q0);
                }
            }
        }
        // Recompute with more terms where the fraction cancelled.
        if z == 0.0 && iq[JK..jz].iter().all(|&v| v == 0) {
            let mut k = 1;
            while iq[JK - k] == 0 {
                k += 1;
            }
            for i in (jz + 1)..=(jz + k) {
                f[jx + i] = IPIO2[jv + i] as f64;
                let mut fw = 0.0;
                for j in 0..=jx {
                    fw += x[j] * f[jx + i - j];
                }
                q[i] = fw;
            }
            jz += k;
            continue;
        }
        break;
    }

    // Chop off zero terms.
    if z == 0.0 {
        jz -= 1;
        q0 -= 24;
        while iq[jz] == 0 {
            jz -= 1;
            q0 -= 24;
        }
    } else {
        // Break z into 24 bits where needed.
        z = scalbn(z, -q0);
        if z >= X1P24 {
            let fw = to_i32(X1P_24 * z) as f64;
            iq[jz] = to_i32(z - X1P24 * fw);
            jz += 1;
            q0 += 24;
            iq[jz] = to_i32(fw);
        } else {
            iq[jz] = to_i32(z);
        }
    }

    // The chunks as floating-point values.
    let mut fw = scalbn(1.0, q0);
    for i in (0..=jz).rev() {
        q[i] = fw * iq[i] as f64;
        fw *= X1P_24;
    }
    // PIo2[0..=jp] · q[jz..=0]
    for i in (0..=jz).rev() {
        let mut fw = 0.0;
        let mut k = 0;
        while k <= jp && k <= jz - i {
            fw += PIO2[k] * q[i + k];
            k += 1;
        }
        fq[jz - i] = fw;
    }
    // Compress fq[] into y0 + y1.
    let mut fw = 0.0;
    for i in (0..=jz).rev() {
        fw += fq[i];
    }
    let y0 = if ih == 0 { fw } else { -fw };
    fw = fq[0] - fw;
    for v in &fq[1..=jz] {
        fw += v;
    }
    let y1 = if ih == 0 { fw } else { -fw };
    (n & 7, y0, y1)
}

/// The high word (sign cleared) from which [`rem_pio2`] takes an `f32`'s
/// reduction: `2^28·π/2`, where the `libm` crate's `rem_pio2f` leaves its
/// medium path for `rem_pio2_large`.
const HUGE_F32: u32 = 0x4dc90fdb;

/// `(n, y)` with `y = x - n·π/2` for a finite `x` whose bits (sign cleared)
/// are [`HUGE_F32`] or more: the `libm` crate's `rem_pio2f` for such
/// arguments, `__kernel_rem_pio2` at `float` precision.
fn rem_pio2f(x: f32) -> (i32, f64) {
    let ix = x.to_bits() & 0x7fffffff;
    // Scaled into [2^23, 2^24 - 1]: one chunk.
    let e0 = ((ix >> 23) - (0x7f + 23)) as i32;
    let tx = [f32::from_bits(ix - ((e0 as u32) << 23)) as f64];
    let (n, y, _) = rem_pio2_large::<3>(&tx, e0);
    if x.to_bits() >> 31 != 0 {
        (-n, -y)
    } else {
        (n, y)
    }
}

/// The `libm` crate's `k_sinf`.
fn k_sinf(x: f64) -> f32 {
    let [s1, s2, s3, s4] = super::K_SINF;
    let z = x * x;
    let w = z * z;
    let r = s3 + z * s4;
    let s = z * x;
    ((x + s * (s1 + z * s2)) + s * w * r) as f32
}

/// The `libm` crate's `k_cosf`.
fn k_cosf(x: f64) -> f32 {
    let [c0, c1, c2, c3] = super::K_COSF;
    let z = x * x;
    let w = z * z;
    let r = c2 + z * c3;
    (((1.0 + z * c0) + w * c1) + (w * z) * r) as f32
}

/// The `libm` crate's `k_tanf`.
fn k_tanf(x: f64, odd: bool) -> f32 {
    let t = super::K_TANF;
    let z = x * x;
    let mut r = t[4] + z * t[5];
    let tt = t[2] + z * t[3];
    let w = z * z;
    let s = z * x;
    let u = t[0] + z * t[1];
    r = (x + s * u) + (s * w) * (tt + w * r);
    (if odd { -1. / r } else { r }) as f32
}

/// Whether `x` is finite and at least `2^28·π/2` in magnitude: the `f32`
/// arguments this module computes.
pub(super) fn is_huge_f32(x: f32) -> bool {
    (HUGE_F32..0x7f800000).contains(&(x.to_bits() & 0x7fffffff))
}

/// `sinf x` for an `x` that [`is_huge_f32`].
pub(super) fn sinf(x: f32) -> f32 {
    let (n, y) = rem_pio2f(x);
    match n & 3 {
        0 => k_sinf(y),
        1 => k_cosf(y),
        2 => k_sinf(-y),
        _ => -k_cosf(y),
    }
}

/// `cosf x` for an `x` that [`is_huge_f32`].
pub(super) fn cosf(x: f32) -> f32 {
    let (n, y) = rem_pio2f(x);
    match n & 3 {
        0 => k_cosf(y),
        1 => k_sinf(-y),
        2 => -k_cosf(y),
        _ => k_sinf(y),
    }
}

/// `(sinf x, cosf x)` for an `x` that [`is_huge_f32`], from one reduction.
pub(super) fn sincosf(x: f32) -> (f32, f32) {
    let (n, y) = rem_pio2f(x);
    match n & 3 {
        0 => (k_sinf(y), k_cosf(y)),
        1 => (k_cosf(y), k_sinf(-y)),
        2 => (k_sinf(-y), -k_cosf(y)),
        _ => (-k_cosf(y), k_sinf(y)),
    }
}

/// `tanf x` for an `x` that [`is_huge_f32`].
pub(super) fn tanf(x: f32) -> f32 {
    let (n, y) = rem_pio2f(x);
    k_tanf(y, n & 1 != 0)
}

/// FreeBSD's `__sin(x, y, 1)`.
fn k_sin(x: f64, y: f64) -> f64 {
    let [s1, s2, s3, s4, s5, s6] = super::K_SIN;
    let z = x * x;
    let w = z * z;
    let r = s2 + z * (s3 + z * s4) + z * w * (s5 + z * s6);
    let v = z * x;
    x - ((z * (0.5 * y - v * r) - y) - v * s1)
}

/// FreeBSD's `__cos(x, y)`.
fn k_cos(x: f64, y: f64) -> f64 {
    let [c1, c2, c3, c4, c5, c6] = super::K_COS;
    let z = x * x;
    let w = z * z;
    let r = z * (c1 + z * (c2 + z * c3)) + w * w * (c4 + z * (c5 + z * c6));
    let hz = 0.5 * z;
    let w = 1.0 - hz;
    w + (((1.0 - w) - hz) + (z * r - x * y))
}

/// Whether `x` is finite and at least `2^20·π/2` in magnitude: the
/// arguments this module computes.
pub(super) fn is_huge(x: f64) -> bool {
    let ix = (x.to_bits() >> 32) as u32 & 0x7fffffff;
    (HUGE..0x7ff00000).contains(&ix)
}

/// `sin x` for an `x` that [`is_huge`].
pub(super) fn sin(x: f64) -> f64 {
    let (n, y0, y1) = rem_pio2(x);
    match n & 3 {
        0 => k_sin(y0, y1),
        1 => k_cos(y0, y1),
        2 => -k_sin(y0, y1),
        _ => -k_cos(y0, y1),
    }
}

/// `cos x` for an `x` that [`is_huge`].
pub(super) fn cos(x: f64) -> f64 {
    let (n, y0, y1) = rem_pio2(x);
    match n & 3 {
        0 => k_cos(y0, y1),
        1 => -k_sin(y0, y1),
        2 => -k_cos(y0, y1),
        _ => k_sin(y0, y1),
    }
}

/// `(sin x, cos x)` for an `x` that [`is_huge`], from one reduction.
pub(super) fn sincos(x: f64) -> (f64, f64) {
    let (n, y0, y1) = rem_pio2(x);
    let (s, c) = (k_sin(y0, y1), k_cos(y0, y1));
    match n & 3 {
        0 => (s, c),
        1 => (c, -s),
        2 => (-s, -c),
        _ => (-c, s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `count` arguments from `2^20·π/2` to the largest double, their
    /// exponents uniform, their mantissas and signs random (xorshift).
    fn huge_arguments(count: usize, seed: u64) -> Vec<f64> {
        let mut s = seed | 1;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let lowest = (HUGE as u64) << 32;
        let highest = 0x7fefffffffffffffu64;
        (0..count)
            .map(|_| {
                let exponent = 0x413 + next() % (0x7ff - 0x413);
                let mantissa = next() & ((1 << 52) - 1);
                let bits = (exponent << 52 | mantissa).clamp(lowest, highest);
                let sign = (next() & 1) << 63;
                f64::from_bits(bits | sign)
            })
            .collect()
    }

    #[test]
    fn the_crates_bits_on_huge_arguments() {
        let mut xs = huge_arguments(2_000_000, 0x5eed);
        // The edges, integers (whose low chunks are zero), and arguments
        // near multiples of π/2 (the recomputation's cancellation).
        xs.extend([
            f64::from_bits((HUGE as u64) << 32),
            f64::MAX,
            -f64::MAX,
            2f64.powi(1023),
            1e22,
            1e300,
            6381956970095103.0 * 2f64.powi(797),
            5.319372648326541e255,
            2f64.powi(60),
            2f64.powi(30) * std::f64::consts::FRAC_PI_2,
        ]);
        for k in 1..200_000u64 {
            // Multiples of π/2 rounded: fractions near 0 after reduction.
            xs.push((k * 2_000_003) as f64 * std::f64::consts::FRAC_PI_2);
            xs.push((k << 30) as f64);
        }
        for &x in &xs {
            assert!(is_huge(x), "{x:e}");
            let (s, c) = sincos(x);
            assert_eq!(sin(x).to_bits(), libm::sin(x).to_bits(), "sin({x:e})");
            assert_eq!(cos(x).to_bits(), libm::cos(x).to_bits(), "cos({x:e})");
            assert_eq!(s.to_bits(), libm::sin(x).to_bits(), "sincos({x:e}).0");
            assert_eq!(c.to_bits(), libm::cos(x).to_bits(), "sincos({x:e}).1");
        }
    }

    /// Every `f32` past `2^28·π/2` whose bits (sign cleared) are a
    /// multiple of `stride` from the threshold, with a random offset below
    /// `stride` (xorshift), both signs; `HUGE_F32_STRIDE` sets `stride`
    /// (1 is every such `f32`: the long run, docs/testing.md).
    #[test]
    fn the_crates_f32_bits_on_huge_arguments() {
        let stride: u32 = std::env::var("HUGE_F32_STRIDE")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(701);
        let mut s = 0x5eedu64;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let mut bits: Vec<u32> = (HUGE_F32..0x7f800000)
            .step_by(stride as usize)
            .map(|b| (b + (next() % u64::from(stride)) as u32).min(0x7f7fffff))
            .collect();
        // The edges, powers of two, and multiples of π/2 rounded (fractions
        // near 0 after reduction).
        bits.extend([HUGE_F32, 0x7f7fffff, 0x4e000000, 0x5f000000, 0x7f000000]);
        for k in 1..100_000u32 {
            bits.push((k as f32 * 300_007.0 * std::f32::consts::FRAC_PI_2).to_bits());
        }
        for b in bits {
            for x in [f32::from_bits(b), -f32::from_bits(b)] {
                if !is_huge_f32(x) {
                    continue;
                }
                let (s, c) = sincosf(x);
                let (want_s, want_c) = (libm::sinf(x).to_bits(), libm::cosf(x).to_bits());
                assert_eq!(sinf(x).to_bits(), want_s, "sinf({x:e})");
                assert_eq!(cosf(x).to_bits(), want_c, "cosf({x:e})");
                assert_eq!(tanf(x).to_bits(), libm::tanf(x).to_bits(), "tanf({x:e})");
                assert_eq!(s.to_bits(), want_s, "sincosf({x:e}).0");
                assert_eq!(c.to_bits(), want_c, "sincosf({x:e}).1");
            }
        }
    }

    #[test]
    fn only_finite_arguments_past_the_threshold_are_huge() {
        let below = f64::from_bits(((HUGE as u64) << 32) - 1);
        for x in [
            below,
            -below,
            1.0,
            0.0,
            f64::INFINITY,
            f64::NAN,
            -f64::INFINITY,
        ] {
            assert!(!is_huge(x), "{x}");
        }
        let below = f32::from_bits(HUGE_F32 - 1);
        for x in [below, -below, 1.0, 0.0, f32::INFINITY, f32::NAN] {
            assert!(!is_huge_f32(x), "{x}");
        }
        assert!(is_huge_f32(f32::MAX) && is_huge_f32(-f32::from_bits(HUGE_F32)));
    }
}
