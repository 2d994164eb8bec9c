//! The math functions kiln's semantics call, by the names in
//! [`for_each_math_fn!`](crate::for_each_math_fn): the pure-Rust `libm`
//! crate's, and kiln's own `erf` of `f32` ([`kiln_erff`]), which the
//! interpreter, constant folding and every tier's inline expansion
//! (`kiln_kernel::math`) compute operation for operation.

// The coefficients are written as `f32` literals to the digit, so a reader
// can check them against the table in docs/semantics.md.
#![allow(clippy::excessive_precision)]

pub use libm::*;

mod huge;

/// `S1`..`S6` of the `libm` crate's (FreeBSD's) `__sin` kernel, which the
/// inline math (`kiln_kernel::math`) and [`sin`]'s port of huge arguments
/// both compute with.
pub const K_SIN: [f64; 6] = [
    -1.66666666666666324348e-01,
    8.33333333332248946124e-03,
    -1.98412698298579493134e-04,
    2.75573137070700676789e-06,
    -2.50507602534068634195e-08,
    1.58969099521155010221e-10,
];

/// `C1`..`C6` of the `libm` crate's (FreeBSD's) `__cos` kernel, as
/// [`K_SIN`].
pub const K_COS: [f64; 6] = [
    4.16666666666666019037e-02,
    -1.38888888888741095749e-03,
    2.48015872894767294178e-05,
    -2.75573143513906633035e-07,
    2.08757232129817482790e-09,
    -1.13596475577881948265e-11,
];

/// `S1`..`S4` of the `libm` crate's `k_sinf` (`f64` arithmetic), which the
/// inline math and [`sinf`]'s port of huge arguments compute with.
pub const K_SINF: [f64; 4] = [
    -0.166666666416265235595,
    0.0083333293858894631756,
    -0.000198393348360966317347,
    0.0000027183114939898219064,
];

/// `C0`..`C3` of the `libm` crate's `k_cosf`, as [`K_SINF`].
pub const K_COSF: [f64; 4] = [
    -0.499999997251031003120,
    0.0416666233237390631894,
    -0.00138867637746099294692,
    0.0000243904487962774090654,
];

/// `T` of the `libm` crate's `k_tanf`, as [`K_SINF`].
pub const K_TANF: [f64; 6] = [
    0.333331395030791399758,
    0.133392002712976742718,
    0.0533812378445670393523,
    0.0245283181166547278873,
    0.00297435743359967304927,
    0.00946564784943673166728,
];

/// `sin` of `f64`: the `libm` crate's, bit for bit, its reduction of
/// arguments past `2^20·π/2` ported (`huge`), about twice as fast.
pub fn sin(x: f64) -> f64 {
    if huge::is_huge(x) {
        huge::sin(x)
    } else {
        libm::sin(x)
    }
}

/// `cos` of `f64`: as [`sin`].
pub fn cos(x: f64) -> f64 {
    if huge::is_huge(x) {
        huge::cos(x)
    } else {
        libm::cos(x)
    }
}

/// `(sin x, cos x)`, each [`sin`]'s and [`cos`]'s bits, from one reduction
/// where `x` is past `2^20·π/2`: what a caller that needs both computes.
pub fn sincos(x: f64) -> (f64, f64) {
    if huge::is_huge(x) {
        huge::sincos(x)
    } else {
        (libm::sin(x), libm::cos(x))
    }
}

/// `sin` of `f32`: the `libm` crate's, bit for bit, its reduction of
/// arguments past `2^28·π/2` ported (`huge`).
pub fn sinf(x: f32) -> f32 {
    if huge::is_huge_f32(x) {
        huge::sinf(x)
    } else {
        libm::sinf(x)
    }
}

/// `cos` of `f32`: as [`sinf`].
pub fn cosf(x: f32) -> f32 {
    if huge::is_huge_f32(x) {
        huge::cosf(x)
    } else {
        libm::cosf(x)
    }
}

/// `tan` of `f32`: as [`sinf`].
pub fn tanf(x: f32) -> f32 {
    if huge::is_huge_f32(x) {
        huge::tanf(x)
    } else {
        libm::tanf(x)
    }
}

/// `(sinf x, cosf x)`, each [`sinf`]'s and [`cosf`]'s bits, from one
/// reduction where `x` is past `2^28·π/2`.
pub fn sincosf(x: f32) -> (f32, f32) {
    if huge::is_huge_f32(x) {
        huge::sincosf(x)
    } else {
        (libm::sinf(x), libm::cosf(x))
    }
}

/// Below this `|x|`, [`kiln_erff`] is `x + x·P(x²)`.
pub const ERFF_SPLIT: f32 = 1.0;

/// From this `|x|` on, [`kiln_erff`] is ±1 (`erf` rounds to 1 in `f32` past
/// 3.9192).
pub const ERFF_ONE: f32 = 3.92;

/// The centre of [`kiln_erff`]'s outer interval: `t = |x| - 2` is exact for
/// every `|x|` in `[1, 4]` (Sterbenz).
pub const ERFF_MID: f32 = 2.0;

/// `P` of [`kiln_erff`] below [`ERFF_SPLIT`], highest degree first:
/// `erf(x)/x - 1` in `z = x²`, fitted by least squares on Chebyshev nodes
/// against 40-digit `erf`, each coefficient rounded to `f32` before the
/// lower ones were fitted.
pub const ERFF_SMALL: [f32; 7] = [
    7.882513455e-05,
    -8.018874796e-04,
    5.189316347e-03,
    -2.685433254e-02,
    1.128359735e-01,
    -3.761262596e-01,
    1.283791661e-01,
];

/// `Q` of [`kiln_erff`] from [`ERFF_SPLIT`] to [`ERFF_ONE`], highest degree
/// first: `erfc(|x|)` in `t = |x| - 2`, fitted as [`ERFF_SMALL`] is.
pub const ERFF_LARGE: [f32; 15] = [
    -1.094424306e-06,
    6.953579032e-06,
    -3.176616701e-06,
    -8.316493768e-05,
    2.448270679e-04,
    3.183103036e-05,
    -1.566034975e-03,
    3.385486547e-03,
    -4.741848970e-04,
    -1.308960002e-02,
    3.444900736e-02,
    -4.822309315e-02,
    4.133356735e-02,
    -2.066697553e-02,
    4.677739460e-03,
];

/// `c[0]·v^n + … + c[n]` by Horner's rule, each step one fused multiply-add.
#[inline(always)]
fn horner(v: f32, c: &[f32]) -> f32 {
    c[1..].iter().fold(c[0], |acc, &k| acc.mul_add(v, k))
}

/// kiln's `erf` of `f32` (docs/semantics.md, "erf of f32"): two
/// polynomials and no division or `exp`, so a vector of lanes computes it in
/// about 30 operations, within 1.3 ulp of the exact `erf` over every `f32`
/// (the `libm` crate's `erff`, which kiln computed before, takes about 230
/// in a vector, every interval's rational functions and two `expf`s a lane).
///
/// - `|x| < 1` (and NaN): `x + x·P(x²)` as one fused multiply-add, so tiny
///   and subnormal `x` round once, and the sign and `-0.0` are kept;
/// - `1 ≤ |x| < 3.92`: `±(1 - Q(|x| - 2))`;
/// - beyond, and `±inf`: `±1`.
///
/// Each step is one IEEE operation in this order (`x·x` rounded, then fused
/// multiply-adds), which is what the inline expansion emits.
pub fn kiln_erff(x: f32) -> f32 {
    // A build for the x86-64 baseline (the wheel's) calls `fmaf` for each
    // `mul_add`; the instruction gives the same bits (a fused multiply-add
    // is exact up to its one rounding): 5.5–10 ns a call against 100–144
    // on an Intel Xeon (the `libm` crate's `erff` took 18–32 there).
    #[cfg(all(target_arch = "x86_64", not(target_feature = "fma")))]
    if std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has FMA.
        return unsafe { erff_fma(x) };
    }
    erff_body(x)
}

/// [`kiln_erff`] compiled with the FMA instruction.
#[cfg(all(target_arch = "x86_64", not(target_feature = "fma")))]
#[target_feature(enable = "fma")]
unsafe fn erff_fma(x: f32) -> f32 {
    erff_body(x)
}

#[inline(always)]
fn erff_body(x: f32) -> f32 {
    let a = x.abs();
    if a >= ERFF_SPLIT {
        if a < ERFF_ONE {
            let q = horner(a - ERFF_MID, &ERFF_LARGE);
            (1.0 - q).copysign(x)
        } else {
            1.0f32.copysign(x)
        }
    } else {
        // Below 1, and NaN.
        let y = horner(x * x, &ERFF_SMALL);
        x.mul_add(y, x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The distance from `v` to the exact `erf(x)` (the `libm` crate's `f64`
    /// `erf`, within an `f64` ulp), in `f32` ulps of the exact value.
    fn ulps(x: f32, v: f32) -> f64 {
        let exact = erf(x as f64);
        let r = exact as f32;
        let mut ulp = (f32::from_bits(r.abs().to_bits() + 1) - r.abs()) as f64;
        if r.abs() == 1.0 {
            ulp /= 2.0;
        }
        ((v as f64) - exact).abs() / ulp
    }

    #[test]
    fn special_values() {
        assert_eq!(kiln_erff(0.0).to_bits(), 0.0f32.to_bits());
        assert_eq!(kiln_erff(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(kiln_erff(f32::INFINITY), 1.0);
        assert_eq!(kiln_erff(f32::NEG_INFINITY), -1.0);
        assert!(kiln_erff(f32::NAN).is_nan());
        assert_eq!(kiln_erff(4.0), 1.0);
        assert_eq!(kiln_erff(-100.0), -1.0);
        // The smallest subnormal: 2/√π·x rounds to the next subnormal up.
        let tiny = f32::from_bits(1);
        assert_eq!(kiln_erff(tiny).to_bits(), 1);
        // 4096·2^-149·2/√π = 4621.84·2^-149.
        assert_eq!(kiln_erff(f32::from_bits(4096)).to_bits(), 4622);
        for (x, exact) in [
            (1.0, 0.842_700_792_949_714_9),
            (-0.5, -0.520_499_877_813_046_5),
            (2.0, 0.995_322_265_018_952_7),
            (3.5, 0.999_999_256_901_627_7),
        ] {
            let v = kiln_erff(x) as f64;
            assert!(
                (v - exact).abs() <= 1.3 * f64::from(f32::EPSILON) / 2.0,
                "{x}: {v}"
            );
        }
    }

    /// Every 4,099th `f32` from 0 to 4 (and its negative), with every
    /// interval's edges: within 1.3 ulp of the exact `erf`. With
    /// `MATH_F32_EXHAUSTIVE=1`, every `f32` from 0 to 4 (the long run,
    /// `cargo test --release -p kiln-ir within_1_3_ulp`; docs/semantics.md).
    #[test]
    fn within_1_3_ulp() {
        let step = match std::env::var("MATH_F32_EXHAUSTIVE") {
            Ok(v) if v == "1" => 1,
            _ => 4099,
        };
        let edges = [ERFF_SPLIT, ERFF_ONE, 0.5, 2.0, 3.0];
        let sweep = (0..0x4080_0000u32).step_by(step).map(f32::from_bits);
        let near = edges.iter().flat_map(|&e| {
            let b = e.to_bits();
            (b - 64..b + 64).map(f32::from_bits)
        });
        let mut worst = (0.0, 0.0);
        for x in sweep.chain(near) {
            for x in [x, -x] {
                let e = ulps(x, kiln_erff(x));
                if e > worst.0 {
                    worst = (e, x);
                }
            }
        }
        assert!(worst.0 <= 1.3, "{} ulp at {:e}", worst.0, worst.1);
    }
}
