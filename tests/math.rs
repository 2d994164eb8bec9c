//! Inline math (`kiln_kernel::math`) against the `libm` crate (and `erf`
//! of `f32` against kiln's own, `kiln_ir::math::kiln_erff`), bit for
//! bit (every NaN equal), on every compiling engine and in wasm modules:
//! special values, both sides of every threshold the scalar algorithm
//! branches on, every point where its reduction's `k` changes, and random
//! inputs (uniform bit patterns and uniform values over the interesting
//! range). `MATH_CASES` sets the random count (default 10^6; the long run's
//! figures are in docs/testing.md); `MATH_ONLY=sin,cos` limits the run to
//! those functions.

// Thresholds are written as the `libm` crate writes them.
#![allow(clippy::excessive_precision)]

use kiln::ir::{Buffer, Data};
use kiln::DynEngine;

/// Whether `op` is to be tested: all functions, or those `MATH_ONLY` lists
/// (`MATH_ONLY=sin,cos`, for a long run of new functions only; empty is all).
fn selected(op: &str) -> bool {
    match std::env::var("MATH_ONLY") {
        Ok(only) if !only.is_empty() => only.split(',').any(|o| o == op),
        _ => true,
    }
}

fn cases() -> usize {
    std::env::var("MATH_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

/// xorshift64: reproducible inputs without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `[lo, hi)`.
    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (self.next() >> 11) as f64 / (1u64 << 53) as f64 * (hi - lo)
    }
}

/// `x` and its neighbours a few ulps away on each side.
fn around(x: f64, out: &mut Vec<f64>) {
    let mut up = x;
    let mut down = x;
    out.push(x);
    for _ in 0..3 {
        up = up.next_up();
        down = down.next_down();
        out.push(up);
        out.push(down);
    }
}

/// Values every f64 function is tested at.
fn special_f64(out: &mut Vec<f64>) {
    for x in [
        0.0,
        -0.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        -f64::NAN,
        f64::from_bits(0x7ff0_0000_0000_0001), // a signalling NaN
        f64::from_bits(0x7ff8_dead_beef_0001), // a NaN with a payload
        f64::MIN_POSITIVE,
        -f64::MIN_POSITIVE,
        f64::from_bits(1), // the smallest subnormal
        -f64::from_bits(1),
        f64::from_bits(0x000f_ffff_ffff_ffff), // the largest subnormal
        f64::MAX,
        f64::MIN,
        f64::EPSILON,
        1.0,
        -1.0,
        0.5,
        2.0,
        std::f64::consts::E,
        std::f64::consts::LN_2,
        std::f64::consts::PI,
    ] {
        around(x, out);
    }
}

/// A high word with the low word 0 and all ones, both signs: the scalar
/// code compares `|x|`'s high word with thresholds.
fn around_high_word(hx: u32, out: &mut Vec<f64>) {
    for sign in [0u64, 1 << 63] {
        for low in [0u64, 0xffff_ffff] {
            for h in [hx - 1, hx, hx + 1] {
                out.push(f64::from_bits(sign | u64::from(h) << 32 | low));
            }
        }
    }
}

/// The inputs for `exp` (f64): its thresholds and the reduction's steps.
fn exp_inputs() -> Vec<f64> {
    let mut v = Vec::new();
    special_f64(&mut v);
    for hx in [0x4086_232b, 0x3fd6_2e42, 0x3ff0_a2b2, 0x3e30_0000] {
        around_high_word(hx, &mut v);
    }
    for x in [
        709.782712893383973096,
        -708.39641853226410622,
        -745.13321910194110842,
        0.5 * std::f64::consts::LN_2,
        1.5 * std::f64::consts::LN_2,
    ] {
        around(x, &mut v);
        around(-x, &mut v);
    }
    // Where k = trunc(x / ln2 ± 1/2) changes, over the whole range (k from
    // -1075 to 1024, scalbn's three paths).
    for j in -1076..=1025 {
        around((f64::from(j) - 0.5) * std::f64::consts::LN_2, &mut v);
    }
    v
}

/// The inputs for `exp2` (f64): its thresholds, every integer from -1076
/// to 1025 and the half-way points between them (where `k` changes), and
/// every table step i/256 (and the midpoints) over [-4, 4].
fn exp2_inputs() -> Vec<f64> {
    let mut v = Vec::new();
    special_f64(&mut v);
    for hx in [0x408f_f000, 0x4090_0000, 0x3c90_0000, 0x7ff0_0000] {
        around_high_word(hx, &mut v);
    }
    for j in -1076..=1025 {
        around(f64::from(j), &mut v);
        around(f64::from(j) - 0.5, &mut v);
    }
    for i in -2048..=2048 {
        around(f64::from(i) / 256.0, &mut v);
        around((f64::from(i) - 0.5) / 256.0, &mut v);
    }
    v
}

fn exp2_pick(rng: &mut Rng, i: usize) -> f64 {
    match i % 4 {
        0 => f64::from_bits(rng.next()),
        1 => rng.uniform(-1080.0, 1030.0),
        2 => rng.uniform(-1.0, 1.0),
        _ => rng.uniform(-60.0, 60.0),
    }
}

/// The inputs for the f64 `cbrt`: powers of two of every exponent (each
/// residue of the exponent mod 3) and the binades' ends, subnormals, exact
/// cubes and their neighbours (the scalar code's near-exact check), and the
/// arguments CORE-MATH lists as its hard cases.
fn cbrt_inputs() -> Vec<f64> {
    let mut v = Vec::new();
    special_f64(&mut v);
    for e in -1074..=1023 {
        let p = 2f64.powi(e);
        for x in [p, p * 1.5, p * 1.9999999999999998] {
            around(x, &mut v);
            around(-x, &mut v);
        }
    }
    for k in (1..=3000).chain((12..=17).map(|e| (1 << e) - 1)) {
        let cube = f64::from(k) * f64::from(k) * f64::from(k);
        for s in [1.0, 2f64.powi(-300), 2f64.powi(300), -1.0] {
            around(cube * s, &mut v);
        }
    }
    for bits in [
        0x4009_b782_23aa_307c_u64,
        0x401a_202b_fc89_ddff,
        0x3ff3_a9cc_d7f0_22db,
        0x3ff7_845d_2faa_c6fe,
        0x3ffd_1ef8_1cbb_be71,
        0x4000_a201_4f62_987c,
        0x400f_e18a_044a_5501,
        0x401a_6bb8_c803_147b,
        0x401a_c853_8a03_1cbd,
        0xf7f7_92b2_8f60_0000,
    ] {
        around(f64::from_bits(bits), &mut v);
    }
    v
}

fn cbrt_pick(rng: &mut Rng, i: usize) -> f64 {
    match i % 4 {
        0 => f64::from_bits(rng.next()),
        1 => rng.uniform(-1000.0, 1000.0),
        2 => f64::from_bits(rng.next() >> 12),
        _ => {
            // An exact cube, or a few ulps from one.
            let k = (rng.next() % 200_000) as f64 - 100_000.0;
            let cube = k * k * k;
            f64::from_bits(cube.to_bits().wrapping_add(rng.next() % 5).wrapping_sub(2))
        }
    }
}

/// The inputs for `expm1` (f64): its thresholds, every step of its
/// reduction's `k` (including k = ±1, the k = 20 and k = 56 switches and k
/// = 1024), and where its k = 1 branch turns at a reduced -0.25.
fn expm1_inputs() -> Vec<f64> {
    let mut v = Vec::new();
    special_f64(&mut v);
    for hx in [
        0x4043_687a,
        0x3fd6_2e42,
        0x3ff0_a2b2,
        0x3c90_0000,
        0x0010_0000,
    ] {
        around_high_word(hx, &mut v);
    }
    for x in [
        7.09782712893383973096e+02,
        56.0 * std::f64::consts::LN_2,
        0.5 * std::f64::consts::LN_2,
        1.5 * std::f64::consts::LN_2,
        std::f64::consts::LN_2 - 0.25,
        2.0f64.powi(-54),
    ] {
        around(x, &mut v);
        around(-x, &mut v);
    }
    for j in -60..=1025 {
        around((f64::from(j) - 0.5) * std::f64::consts::LN_2, &mut v);
    }
    v
}

/// Random `expm1` inputs: uniform bit patterns, and uniform values over its
/// range, near 0 and around the k = ±1 reduction.
fn expm1_pick(rng: &mut Rng, i: usize) -> f64 {
    match i % 4 {
        0 => f64::from_bits(rng.next()),
        1 => rng.uniform(-60.0, 720.0),
        2 => rng.uniform(-1.2, 1.2),
        _ => rng.uniform(-1e-3, 1e-3),
    }
}

/// The inputs for `tanh` (f64): its thresholds (|x| of log(5/3)/2,
/// log(3)/2, 20, the smallest normal), each from both sides, and `expm1`'s
/// at twice the argument.
fn tanh_inputs() -> Vec<f64> {
    let mut v = Vec::new();
    special_f64(&mut v);
    for hx in [0x3fd0_58ae, 0x3fe1_93ea, 0x4034_0000, 0x0010_0000] {
        around_high_word(hx, &mut v);
    }
    for x in expm1_inputs() {
        v.push(x / 2.0);
    }
    v
}

/// Random `tanh` inputs: uniform bit patterns, and uniform values where it
/// is not ±1, near 0 and across every branch.
fn tanh_pick(rng: &mut Rng, i: usize) -> f64 {
    match i % 4 {
        0 => f64::from_bits(rng.next()),
        1 => rng.uniform(-25.0, 25.0),
        2 => rng.uniform(-0.6, 0.6),
        _ => rng.uniform(-1e-3, 1e-3),
    }
}

/// The inputs for `erf` and `erfc` (f64): their thresholds (0.84375, the
/// tiny arguments of each, 1/4, 1.25, 1/0.35, 6, 28, infinity) from both
/// sides, and values across each polynomial's range.
fn erf_inputs() -> Vec<f64> {
    let mut v = Vec::new();
    special_f64(&mut v);
    for hx in [
        0x7ff0_0000,
        0x3feb_0000,
        0x3e30_0000,
        0x3c70_0000,
        0x3fd0_0000,
        0x3ff4_0000,
        0x4006_db6d,
        0x4018_0000,
        0x403c_0000,
    ] {
        around_high_word(hx, &mut v);
    }
    for i in 0..=3000 {
        let x = f64::from(i) / 100.0;
        around(x, &mut v);
        around(-x, &mut v);
    }
    v
}

/// Random `erf`/`erfc` inputs: uniform bit patterns, and uniform values
/// where they are not constant, near 0 and where erfc underflows.
fn erf_pick(rng: &mut Rng, i: usize) -> f64 {
    match i % 4 {
        0 => f64::from_bits(rng.next()),
        1 => rng.uniform(-7.0, 7.0),
        2 => rng.uniform(-1.3, 1.3),
        _ => rng.uniform(-30.0, 30.0),
    }
}

/// The inputs for `sinh` and `cosh` (f64): their thresholds (log(DBL_MAX),
/// 1, log(2), 2^-26) from both sides, where they overflow, and `expm1`'s
/// steps.
fn hyperbolic_inputs() -> Vec<f64> {
    let mut v = expm1_inputs();
    for hx in [0x4086_2e42, 0x3ff0_0000, 0x3fe6_2e42, 0x3e50_0000] {
        around_high_word(hx, &mut v);
    }
    for x in [709.782712893384, 710.4758600739439, 711.0] {
        around(x, &mut v);
        around(-x, &mut v);
    }
    v
}

/// Random `sinh`/`cosh` inputs: uniform bit patterns, and uniform values
/// up to overflow, near 0 and below 1.
fn hyperbolic_pick(rng: &mut Rng, i: usize) -> f64 {
    match i % 4 {
        0 => f64::from_bits(rng.next()),
        1 => rng.uniform(-715.0, 715.0),
        2 => rng.uniform(-1.5, 1.5),
        _ => rng.uniform(-30.0, 30.0),
    }
}

/// The inputs for `log1p` (f64): its thresholds from both sides (both
/// signs), around -1, and `log`'s inputs minus 1 (every binade's reduction
/// boundary of 1 + x, so every k, including k = 2 and k = 54 where its
/// correction term changes).
fn log1p_inputs() -> Vec<f64> {
    let mut v = Vec::new();
    special_f64(&mut v);
    for hx in [
        0x3fda_827a,
        0x3ff0_0000,
        0x3ca0_0000,
        0x3fd2_bec4,
        0x7ff0_0000,
    ] {
        around_high_word(hx, &mut v);
    }
    around(-1.0, &mut v);
    for y in log_inputs() {
        v.push(y - 1.0);
    }
    for e in 0..60 {
        around(2f64.powi(e) - 1.0, &mut v);
    }
    v
}

/// Random `log1p` inputs: uniform bit patterns, values above -1 and near 0.
fn log1p_pick(rng: &mut Rng, i: usize) -> f64 {
    match i % 4 {
        0 => f64::from_bits(rng.next()),
        1 => rng.uniform(-1.0, 10.0),
        2 => rng.uniform(-0.4, 0.5),
        _ => rng.uniform(-1e-6, 1e-6),
    }
}

/// The inputs for `log2` and `log10` (f64): `log`'s, and the powers of 2
/// and 10 with their neighbours.
fn log2_log10_inputs() -> Vec<f64> {
    let mut v = log_inputs();
    for e in -1074..=1023 {
        around(2f64.powi(e), &mut v);
    }
    for e in -323..=308 {
        around(format!("1e{e}").parse().expect("a power of ten"), &mut v);
    }
    v
}

/// The inputs for `tan` (f64): `sin`'s and `cos`'s (every reduction
/// threshold and multiple of pi/2), and `k_tan`'s |x| of 0.6744 and 2^-27.
fn tan_inputs() -> Vec<f64> {
    let mut v = trig_inputs();
    for hx in [0x3fe5_9428, 0x3e40_0000] {
        around_high_word(hx, &mut v);
    }
    // Where the reduced argument crosses 0.6744 in every quadrant.
    for k in 0..200 {
        for d in [0.6744, -0.6744] {
            around(f64::from(k) * std::f64::consts::FRAC_PI_2 + d, &mut v);
        }
    }
    v
}

/// The inputs for `atan` (f64): its thresholds (2^66, 7/16, 2^-27, 11/16,
/// 19/16, 39/16) from both sides, and a sweep.
fn atan_inputs() -> Vec<f64> {
    let mut v = Vec::new();
    special_f64(&mut v);
    for hx in [
        0x4410_0000,
        0x3fdc_0000,
        0x3e40_0000,
        0x3ff3_0000,
        0x3fe6_0000,
        0x4003_8000,
    ] {
        around_high_word(hx, &mut v);
    }
    for i in 0..=4000 {
        let x = f64::from(i) / 1000.0;
        around(x, &mut v);
        around(-x, &mut v);
    }
    v
}

/// Random `atan` inputs: uniform bit patterns, and values across its
/// reductions.
fn atan_pick(rng: &mut Rng, i: usize) -> f64 {
    match i % 4 {
        0 => f64::from_bits(rng.next()),
        1 => rng.uniform(-4.0, 4.0),
        2 => rng.uniform(-1e3, 1e3),
        _ => rng.uniform(-0.5, 0.5),
    }
}

/// The inputs for `asin` and `acos` (f64): their thresholds (1, 0.5, 2^-26
/// and 2^-57, 0.975, the smallest normal) from both sides, and every
/// thousandth of [-1, 1].
fn asin_inputs() -> Vec<f64> {
    let mut v = Vec::new();
    special_f64(&mut v);
    for hx in [
        0x3ff0_0000,
        0x3fe0_0000,
        0x3e50_0000,
        0x3c60_0000,
        0x3fef_3333,
        0x0010_0000,
    ] {
        around_high_word(hx, &mut v);
    }
    for i in 0..=1000 {
        let x = f64::from(i) / 1000.0;
        around(x, &mut v);
        around(-x, &mut v);
    }
    v
}

/// Random `asin`/`acos` inputs: uniform bit patterns, values in [-1, 1]
/// and near its ends.
fn asin_pick(rng: &mut Rng, i: usize) -> f64 {
    match i % 4 {
        0 => f64::from_bits(rng.next()),
        1 => rng.uniform(-1.0, 1.0),
        2 => rng.uniform(0.97, 1.0),
        _ => rng.uniform(-1.0, -0.97),
    }
}

/// The inputs for `asinh`, `acosh` and `atanh` (f64): their thresholds
/// (2^26, 2, 2^-26, 0.5, 2^-32, 1) from both sides, and sweeps.
fn inverse_hyperbolic_inputs() -> Vec<f64> {
    let mut v = Vec::new();
    special_f64(&mut v);
    for hx in [
        0x4190_0000,
        0x4000_0000,
        0x3e50_0000,
        0x3fe0_0000,
        0x3df0_0000,
        0x3ff0_0000,
    ] {
        around_high_word(hx, &mut v);
    }
    for i in 0..=3000 {
        let x = f64::from(i) / 1000.0;
        around(x, &mut v);
        around(-x, &mut v);
    }
    v
}

/// Random inverse-hyperbolic inputs: uniform bit patterns, and values
/// across their ranges.
fn inverse_hyperbolic_pick(rng: &mut Rng, i: usize) -> f64 {
    match i % 4 {
        0 => f64::from_bits(rng.next()),
        1 => rng.uniform(-1.0, 1.0),
        2 => rng.uniform(-10.0, 10.0),
        _ => rng.uniform(-1e9, 1e9),
    }
}

/// The inputs for `log` (f64): its thresholds (subnormals, the reduction's
/// boundary at the high word 0x3fe6a09e in every binade, 1, infinities).
fn log_inputs() -> Vec<f64> {
    let mut v = Vec::new();
    special_f64(&mut v);
    for hx in [0x0010_0000, 0x7ff0_0000, 0x3ff0_0000, 0x3fe6_a09e] {
        around_high_word(hx, &mut v);
    }
    for e in 0..0x7ffu64 {
        let boundary = e << 52 | 0x6_a09e_u64 << 32;
        for bits in [boundary - 1, boundary, boundary + 1] {
            v.push(f64::from_bits(bits));
        }
    }
    for x in [
        std::f64::consts::SQRT_2,
        std::f64::consts::FRAC_1_SQRT_2,
        1e-310,
        4.9e-324,
    ] {
        around(x, &mut v);
    }
    v
}

/// The inputs for `sin` and `cos` (f64): the thresholds of both functions and
/// of `rem_pio2` (the fixed multiples of pi/2 below 9pi/4 and the ones that
/// cancel, 2^20·pi/2 where the `libm` function takes over), the doubles
/// nearest to multiples of pi/2 (where the reduction takes its second and
/// third rounds) and the midpoints where its `n` changes.
fn trig_inputs() -> Vec<f64> {
    use std::f64::consts::FRAC_PI_2;
    let mut v = Vec::new();
    special_f64(&mut v);
    for hx in [
        0x3e46_a09e,
        0x3e50_0000,
        0x3fe9_21fb,
        0x3ff9_21fb,
        0x4002_d97c,
        0x4009_21fb,
        0x400f_6a7a,
        0x4012_d97c,
        0x4015_fdbc,
        0x4019_21fb,
        0x401c_463b,
        0x4139_21fb,
        0x7ff0_0000,
    ] {
        around_high_word(hx, &mut v);
    }
    let mut multiples: Vec<f64> = (1..=2000).map(f64::from).collect();
    multiples.extend((11..=21).map(|e| f64::from(1u32 << e)));
    multiples.extend([3.0e5, 6.67e5, 1.048575e6, 1.048577e6]);
    for k in multiples {
        for x in [k * FRAC_PI_2, (k - 0.5) * FRAC_PI_2] {
            around(x, &mut v);
            around(-x, &mut v);
        }
    }
    for x in [
        1e6,
        1.6e6,
        1.7e6,
        1e7,
        1e22,
        1e300,
        6381956970095103.0 * 2f64.powi(797),
    ] {
        around(x, &mut v);
        around(-x, &mut v);
    }
    v
}

/// Random `sin`/`cos` inputs: uniform bit patterns (most of them huge, for
/// the `libm` function), values where GP data lives, over the reduction's
/// whole range and across its end at 2^20·pi/2.
fn trig_pick(rng: &mut Rng, i: usize) -> f64 {
    match i % 5 {
        0 => f64::from_bits(rng.next()),
        1 => rng.uniform(-10.0, 10.0),
        2 => rng.uniform(-1e3, 1e3),
        3 => rng.uniform(-1.7e6, 1.7e6),
        _ => f64::from_bits(rng.next() >> 2),
    }
}

/// `n` random inputs a million at a time, from `pick(rng, i)` for the `i`th
/// input.
fn random<T>(n: usize, mut pick: impl FnMut(&mut Rng, usize) -> T, mut check: impl FnMut(&[T])) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut done = 0;
    while done < n {
        let chunk: Vec<T> = (0..(n - done).min(1 << 20))
            .map(|i| pick(&mut rng, done + i))
            .collect();
        check(&chunk);
        done += chunk.len();
    }
}

/// Random `exp` inputs: uniform bit patterns, and uniform values over its
/// whole range, near 0 and where GP data lives.
fn exp_pick(rng: &mut Rng, i: usize) -> f64 {
    match i % 4 {
        0 => f64::from_bits(rng.next()),
        1 => rng.uniform(-750.0, 750.0),
        2 => rng.uniform(-1.0, 1.0),
        _ => rng.uniform(-40.0, 40.0),
    }
}

/// Random `log` inputs: uniform bit patterns (a quarter are negative or
/// special), positive ones of every exponent, subnormals, and values near 1
/// and where GP data lives.
fn log_pick(rng: &mut Rng, i: usize) -> f64 {
    match i % 5 {
        0 => f64::from_bits(rng.next()),
        1 => f64::from_bits(rng.next() >> 1),
        2 => f64::from_bits(rng.next() >> 12),
        3 => rng.uniform(0.5, 2.0),
        _ => rng.uniform(0.0, 100.0),
    }
}

type Oracle = fn(f64) -> f64;
/// A function's chosen inputs.
type Chosen = fn() -> Vec<f64>;
/// A function's random input `i`.
type Pick = fn(&mut Rng, usize) -> f64;

/// Each inline f64 function: its name, the `libm` crate's function, its
/// chosen inputs and its random inputs.
const F64_FUNCTIONS: [(&str, Oracle, Chosen, Pick); 22] = [
    ("exp", libm::exp, exp_inputs, exp_pick),
    ("exp2", libm::exp2, exp2_inputs, exp2_pick),
    ("cbrt", libm::cbrt, cbrt_inputs, cbrt_pick),
    ("log", libm::log, log_inputs, log_pick),
    ("sin", libm::sin, trig_inputs, trig_pick),
    ("cos", libm::cos, trig_inputs, trig_pick),
    ("expm1", libm::expm1, expm1_inputs, expm1_pick),
    ("tanh", libm::tanh, tanh_inputs, tanh_pick),
    ("erf", libm::erf, erf_inputs, erf_pick),
    ("erfc", libm::erfc, erf_inputs, erf_pick),
    ("sinh", libm::sinh, hyperbolic_inputs, hyperbolic_pick),
    ("cosh", libm::cosh, hyperbolic_inputs, hyperbolic_pick),
    ("log1p", libm::log1p, log1p_inputs, log1p_pick),
    ("log2", libm::log2, log2_log10_inputs, log_pick),
    ("log10", libm::log10, log2_log10_inputs, log_pick),
    ("tan", libm::tan, tan_inputs, trig_pick),
    ("atan", libm::atan, atan_inputs, atan_pick),
    ("asin", libm::asin, asin_inputs, asin_pick),
    ("acos", libm::acos, asin_inputs, asin_pick),
    (
        "asinh",
        libm::asinh,
        inverse_hyperbolic_inputs,
        inverse_hyperbolic_pick,
    ),
    (
        "acosh",
        libm::acosh,
        inverse_hyperbolic_inputs,
        inverse_hyperbolic_pick,
    ),
    (
        "atanh",
        libm::atanh,
        inverse_hyperbolic_inputs,
        inverse_hyperbolic_pick,
    ),
];

/// What the checks need of `f32` and `f64` beyond their dtype.
trait Float: kiln::NativeScalar + std::fmt::LowerExp {
    fn bits(self) -> u64;
    fn nan(self) -> bool;
    fn column(xs: &[Self]) -> Buffer;
    fn values(b: &Buffer) -> Option<&[Self]>;
}

impl Float for f64 {
    fn bits(self) -> u64 {
        self.to_bits()
    }
    fn nan(self) -> bool {
        self.is_nan()
    }
    fn column(xs: &[f64]) -> Buffer {
        Buffer::F64(xs.to_vec())
    }
    fn values(b: &Buffer) -> Option<&[f64]> {
        match b {
            Buffer::F64(v) => Some(v),
            _ => None,
        }
    }
}

impl Float for f32 {
    fn bits(self) -> u64 {
        self.to_bits().into()
    }
    fn nan(self) -> bool {
        self.is_nan()
    }
    fn column(xs: &[f32]) -> Buffer {
        Buffer::F32(xs.to_vec())
    }
    fn values(b: &Buffer) -> Option<&[f32]> {
        match b {
            Buffer::F32(v) => Some(v),
            _ => None,
        }
    }
}

fn same<T: Float>(a: T, b: T) -> bool {
    a.bits() == b.bits() || (a.nan() && b.nan())
}

/// `op` of one `T` argument compiled on `engine`, with its transcendentals
/// inline (`libm_calls: Some(false)`) or as the tier chooses (`None`).
fn unary<T: Float>(
    engine: &dyn DynEngine,
    op: &str,
    libm_calls: Option<bool>,
) -> Box<dyn kiln::Program> {
    let t = T::DTYPE;
    let text = format!(
        "graph \"{op}\"\nv0: {t}[n] = input \"x\"\nv1: {t}[n] = {op} v0\noutput \"y\" = v1\n"
    );
    let graph = kiln::verify(kiln::ir::text::parse(&text).unwrap()).unwrap();
    let options = kiln::CompileOptions {
        optimize: false,
        libm_calls,
        ..kiln::CompileOptions::default()
    };
    engine.compile_dyn(&graph, &options).unwrap()
}

/// Runs `program` (`op` of one `T` argument) over `xs` and compares with
/// `want`; the first few disagreements are the error.
fn check_unary<T: Float>(
    program: &dyn kiln::Program,
    op: &str,
    xs: &[T],
    oracle: impl Fn(T) -> T,
) -> Result<(), String> {
    let want: Vec<T> = xs.iter().map(|&x| oracle(x)).collect();
    check_unary_against(program, op, xs, &want)
}

/// [`check_unary`] with the oracle's results given (computed once for every
/// configuration).
fn check_unary_against<T: Float>(
    program: &dyn kiln::Program,
    op: &str,
    xs: &[T],
    want: &[T],
) -> Result<(), String> {
    let outs = program
        .run(&[Data::Column(T::column(xs))])
        .map_err(|e| e.to_string())?;
    let Some(got) = outs.first().and_then(|d| match d {
        Data::Column(b) => T::values(b),
        _ => None,
    }) else {
        return Err(format!("{op} returned {outs:?}"));
    };
    let bad: Vec<String> = xs
        .iter()
        .zip(got)
        .zip(want)
        .filter(|((_, &y), &w)| !same(y, w))
        .take(5)
        .map(|((&x, &y), &w)| {
            format!(
                "{op}({x:e} = {:#x}) = {y:e} ({:#x}), libm {w:e} ({:#x})",
                x.bits(),
                y.bits(),
                w.bits()
            )
        })
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!("{op}:\n{}", bad.join("\n")))
    }
}

/// Every compiling tier with inline math (Cranelift's JIT calls the `libm`
/// crate by default; its objects inline), then as each tier chooses, and
/// the interpreter, the oracle: it is the `libm` crate.
fn runs() -> Vec<(Box<dyn DynEngine>, Option<bool>)> {
    let mut runs: Vec<(Box<dyn DynEngine>, Option<bool>)> = compiling_engines()
        .into_iter()
        .map(|e| (e, Some(false)))
        .collect();
    runs.extend(compiling_engines().into_iter().map(|e| (e, None)));
    runs.push((Box::new(kiln::Interpreter), None));
    runs
}

fn compiling_engines() -> Vec<Box<dyn DynEngine>> {
    kiln::engines()
        .into_iter()
        .filter(|e| e.name() != "interp")
        .collect()
}

/// `op` compiled for every configuration ([`runs`]), each with its label.
fn programs<T: Float>(op: &str) -> Vec<(String, Box<dyn kiln::Program>, bool)> {
    runs()
        .into_iter()
        .map(|(engine, libm_calls)| {
            let label = format!("on {} (libm_calls {libm_calls:?})", engine.name());
            let interp = engine.name() == "interp";
            (label, unary::<T>(engine.as_ref(), op, libm_calls), interp)
        })
        .collect()
}

/// `op` on every configuration at `chosen`, then at `n` inputs from `pick`
/// (the interpreter, which is the oracle, at the first 10,000), each chunk's
/// oracle results computed once for all configurations.
fn check_everywhere<T: Float>(
    op: &str,
    oracle: fn(T) -> T,
    chosen: &[T],
    n: usize,
    pick: impl FnMut(&mut Rng, usize) -> T,
) {
    let programs = programs::<T>(op);
    // The interpreter checks this many of the inputs.
    let check = |xs: &[T], interp_limit: usize| {
        let want: Vec<T> = xs.iter().map(|&x| oracle(x)).collect();
        for (label, program, interp) in &programs {
            let k = if *interp {
                xs.len().min(interp_limit)
            } else {
                xs.len()
            };
            if k > 0 {
                check_unary_against(program.as_ref(), op, &xs[..k], &want[..k])
                    .map_err(|e| format!("{label}: {e}"))
                    .unwrap();
            }
        }
    };
    check(chosen, usize::MAX);
    let mut interp_limit = 10_000;
    random(n, pick, |xs| {
        check(xs, interp_limit);
        interp_limit = 0;
    });
}

#[test]
fn f64_functions_are_libms_on_every_engine() {
    for (op, oracle, chosen, pick) in F64_FUNCTIONS.into_iter().filter(|f| selected(f.0)) {
        check_everywhere(op, oracle, &chosen(), cases(), pick);
    }
}

/// wasm modules carry kiln's inline math (no import from `env`): fewer
/// random inputs, since they run under an interpreter (wasmi).
#[cfg(feature = "llvm")]
#[test]
fn functions_are_libms_in_wasm() {
    for (op, oracle, chosen, pick) in F64_FUNCTIONS.into_iter().filter(|f| selected(f.0)) {
        let program = unary::<f64>(&kiln_tests::wasm::Wasm, op, None);
        check_unary(program.as_ref(), op, &chosen(), oracle).unwrap();
        random(cases() / 50, pick, |xs| {
            check_unary(program.as_ref(), op, xs, oracle).unwrap()
        });
    }
    for (op, oracle) in F32_FUNCTIONS.into_iter().filter(|f| selected(f.0)) {
        let program = unary::<f32>(&kiln_tests::wasm::Wasm, op, None);
        check_unary(program.as_ref(), op, &special_f32(), oracle).unwrap();
        random(cases() / 50, f32_pick, |xs| {
            check_unary(program.as_ref(), op, xs, oracle).unwrap()
        });
    }
}

/// Values every f32 function is tested at, with neighbours.
fn special_f32() -> Vec<f32> {
    let mut v = Vec::new();
    for x in [
        0.0f32,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7f80_0001),
        f32::MIN_POSITIVE,
        f32::from_bits(1),
        f32::from_bits(0x007f_ffff),
        f32::MAX,
        f32::MIN,
        1.0,
        -1.0,
        0.5,
        2.0,
    ] {
        let (mut up, mut down) = (x, x);
        v.push(x);
        for _ in 0..3 {
            up = up.next_up();
            down = down.next_down();
            v.push(up);
            v.push(down);
        }
    }
    // Both sides of every threshold the functions test, both signs.
    for hx in [
        0x42ae_ac50u32,
        0x42b1_7218,
        0x42cf_f1b5,
        0x3eb1_7218,
        0x3f85_1592,
        0x3900_0000,
        0x0080_0000,
        0x7f80_0000,
        0x3f80_0000,
        // sinf, cosf and rem_pio2f.
        0x3980_0000,
        0x3f49_0fda,
        0x4016_cbe3,
        0x407b_53d1,
        0x40af_eddf,
        0x40e2_31d5,
        0x4dc9_0fdb,
        // asinhf, acoshf and atanhf.
        0x4580_0000,
        0x4000_0000,
        0x2f80_0000,
        // asinf and acosf.
        0x3f00_0000,
        0x3280_0000,
        // atanf.
        0x4c80_0000,
        0x3ee0_0000,
        0x3f98_0000,
        0x3f30_0000,
        0x401c_0000,
        // log1pf.
        0x3ed4_13d0,
        0x3380_0000,
        0x3e95_f619,
        // sinhf and coshf.
        0x42b1_7217,
        0x3f31_7217,
        0x3980_0000,
        0x42b2_d4fc,
        // kiln_erff: 1, 2 and 3.92.
        0x3f80_0000,
        0x4000_0000,
        0x407a_e148,
        // erfcf.
        0x3f58_0000,
        0x3180_0000,
        0x2380_0000,
        0x3e80_0000,
        0x3fa0_0000,
        0x4036_db6d,
        0x40c0_0000,
        0x41e0_0000,
        // expm1f and tanhf.
        0x4195_b844,
        0x3300_0000,
        0x42b1_7217,
        0x3e82_c578,
        0x3f0c_9f54,
        0x4120_0000,
        // exp2f.
        0x42fc_0000,
        0x4300_0000,
        0x4316_0000,
        0x3300_0000,
    ] {
        for sign in [0, 1 << 31] {
            for h in [hx - 1, hx, hx + 1] {
                v.push(f32::from_bits(sign | h));
            }
        }
    }
    // Every binade's `logf` reduction boundary, and every `expf` k step.
    for e in 0..0xffu32 {
        let boundary = e << 23 | 0x35_04f3;
        v.extend([boundary - 1, boundary, boundary + 1].map(f32::from_bits));
    }
    for j in -152..=130 {
        let x = (j as f32 - 0.5) * std::f32::consts::LN_2;
        v.extend([x.next_down(), x, x.next_up()]);
        // tanhf's expm1f is of twice the argument.
        v.extend([x.next_down(), x, x.next_up()].map(|x| x / 2.0));
    }
    // exp2f's every k and table step, and the midpoints.
    for i in -151 * 32..=129 * 32 {
        let x = i as f32 / 32.0;
        v.extend([x.next_down(), x, x.next_up()]);
    }
    // Powers of 2 and 10 (log2f, log10f).
    for e in -149..=127 {
        v.push(2f32.powi(e));
    }
    for e in -45..=38 {
        let p: f32 = format!("1e{e}").parse().expect("a power of ten");
        v.extend([p.next_down(), p, p.next_up()]);
    }
    // log1pf at every binade's reduction boundary of 1 + x.
    for e in 0..0xffu32 {
        let boundary = f32::from_bits(e << 23 | 0x35_04f3);
        v.extend([boundary.next_down(), boundary, boundary.next_up()].map(|b| b - 1.0));
    }
    // expm1f's k = 1 branch turns at a reduced -0.25.
    let x = std::f32::consts::LN_2 - 0.25;
    v.extend([x.next_down(), x, x.next_up(), -x]);
    // Near multiples of pi/2 and the midpoints where rem_pio2f's n changes.
    for k in (1..=2000).chain((11..=28).map(|e| 1 << e)) {
        for m in [k as f64, k as f64 - 0.5] {
            let x = (m * std::f64::consts::FRAC_PI_2) as f32;
            for x in [x, -x] {
                v.extend([x.next_down(), x, x.next_up()]);
            }
        }
    }
    v
}

/// Random f32 inputs: uniform bit patterns and values over the functions'
/// ranges.
fn f32_pick(rng: &mut Rng, i: usize) -> f32 {
    match i % 5 {
        0 => f32::from_bits(rng.next() as u32),
        1 => rng.uniform(-110.0, 110.0) as f32,
        2 => rng.uniform(0.0, 2.0) as f32,
        3 => rng.uniform(-10.0, 10.0) as f32,
        // Across rem_pio2f's range and its end at 2^28·pi/2.
        _ => rng.uniform(-4.5e8, 4.5e8) as f32,
    }
}

type OracleF32 = fn(f32) -> f32;

/// Each inline f32 function and the `libm` crate's (kiln's own `erf`,
/// `kiln_ir::math::kiln_erff`).
const F32_FUNCTIONS: [(&str, OracleF32); 22] = [
    ("exp", libm::expf),
    ("exp2", libm::exp2f),
    ("log", libm::logf),
    ("sin", libm::sinf),
    ("cos", libm::cosf),
    ("expm1", libm::expm1f),
    ("tanh", libm::tanhf),
    ("erf", kiln::ir::math::kiln_erff),
    ("erfc", libm::erfcf),
    ("sinh", libm::sinhf),
    ("cosh", libm::coshf),
    ("log1p", libm::log1pf),
    ("log2", libm::log2f),
    ("log10", libm::log10f),
    ("tan", libm::tanf),
    ("atan", libm::atanf),
    ("asin", libm::asinf),
    ("acos", libm::acosf),
    ("asinh", libm::asinhf),
    ("acosh", libm::acoshf),
    ("atanh", libm::atanhf),
    ("cbrt", libm::cbrtf),
];

/// The f32 functions at their chosen inputs and `MATH_CASES` random ones on
/// every configuration; with `MATH_F32_EXHAUSTIVE=1`, at every one of the
/// 2^32 inputs instead of the random ones (the long run).
#[test]
fn f32_functions_are_libms_on_every_engine() {
    let exhaustive = std::env::var("MATH_F32_EXHAUSTIVE").is_ok_and(|v| v == "1");
    let specials = special_f32();
    for (op, oracle) in F32_FUNCTIONS.into_iter().filter(|f| selected(f.0)) {
        if exhaustive {
            let every = |_: &mut Rng, i: usize| f32::from_bits(i as u32);
            check_everywhere(op, oracle, &specials, 1 << 32, every);
        } else {
            check_everywhere(op, oracle, &specials, cases(), f32_pick);
        }
    }
}

// ---- Binary functions: pow, atan2, hypot ----

/// `op` of two `T` arguments compiled on `engine` (as [`unary`]).
fn binary<T: Float>(
    engine: &dyn DynEngine,
    op: &str,
    libm_calls: Option<bool>,
) -> Box<dyn kiln::Program> {
    let t = T::DTYPE;
    let text = format!(
        "graph \"{op}\"\nv0: {t}[n] = input \"x\"\nv1: {t}[n] = input \"y\"\n\
         v2: {t}[n] = {op} v0, v1\noutput \"z\" = v2\n"
    );
    let graph = kiln::verify(kiln::ir::text::parse(&text).unwrap()).unwrap();
    let options = kiln::CompileOptions {
        optimize: false,
        libm_calls,
        ..kiln::CompileOptions::default()
    };
    engine.compile_dyn(&graph, &options).unwrap()
}

/// Runs `program` (`op` of two `T` arguments) over `pairs` and compares with
/// `want`; the first few disagreements are the error.
fn check_binary<T: Float>(
    program: &dyn kiln::Program,
    op: &str,
    pairs: &[(T, T)],
    oracle: fn(T, T) -> T,
) -> Result<(), String> {
    let want: Vec<T> = pairs.iter().map(|&(x, y)| oracle(x, y)).collect();
    check_binary_against(program, op, pairs, &want)
}

/// [`check_binary`] with the oracle's results given.
fn check_binary_against<T: Float>(
    program: &dyn kiln::Program,
    op: &str,
    pairs: &[(T, T)],
    want: &[T],
) -> Result<(), String> {
    let xs: Vec<T> = pairs.iter().map(|p| p.0).collect();
    let ys: Vec<T> = pairs.iter().map(|p| p.1).collect();
    let outs = program
        .run(&[Data::Column(T::column(&xs)), Data::Column(T::column(&ys))])
        .map_err(|e| e.to_string())?;
    let Some(got) = outs.first().and_then(|d| match d {
        Data::Column(b) => T::values(b),
        _ => None,
    }) else {
        return Err(format!("{op} returned {outs:?}"));
    };
    let bad: Vec<String> = pairs
        .iter()
        .zip(got)
        .zip(want)
        .filter(|((_, &z), &w)| !same(z, w))
        .take(5)
        .map(|((&(x, y), &z), &w)| {
            format!(
                "{op}({x:e} = {:#x}, {y:e} = {:#x}) = {z:e} ({:#x}), libm {w:e} ({:#x})",
                x.bits(),
                y.bits(),
                z.bits(),
                w.bits()
            )
        })
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!("{op}:\n{}", bad.join("\n")))
    }
}

/// Every pair of `xs` and `ys`.
fn pairs(xs: &[f64], ys: &[f64]) -> Vec<(f64, f64)> {
    xs.iter()
        .flat_map(|&x| ys.iter().map(move |&y| (x, y)))
        .collect()
}

/// Values for either argument: the specials with neighbours, and values of
/// every order of magnitude, both signs.
fn binary_specials() -> Vec<f64> {
    let mut v = Vec::new();
    special_f64(&mut v);
    for e in (-1074..=1023).step_by(37) {
        let p = 2f64.powi(e);
        v.extend([p, -p, p * 1.37, -p * 1.37]);
    }
    for x in [3.0, -3.0, 0.3, 10.0, -7.5, 100.5, 1e10, 1e-10] {
        around(x, &mut v);
    }
    v
}

/// `pow`'s chosen inputs: exponents it treats specially (0, ±1, 2, 0.5,
/// ±inf, integers odd and even, huge ones around 2^31 and 2^64) against
/// every special base; both sides of its reduction's bounds; and results
/// at the edges of overflow, underflow and the subnormals.
fn pow_inputs() -> Vec<(f64, f64)> {
    let mut ys = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        2.0,
        -2.0,
        0.5,
        -0.5,
        3.0,
        -3.0,
        4.0,
        5.0,
        0.25,
        1.5,
        -7.0,
        1023.0,
        1024.0,
        -1074.0,
        -1075.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        2f64.powi(31),
        2f64.powi(31) + 1.0,
        2f64.powi(52) + 1.0,
        2f64.powi(53),
        2f64.powi(64),
        -(2f64.powi(31)) - 1.0,
    ];
    for hy in [0x41e0_0000u32, 0x43f0_0000, 0x4340_0000, 0x3ff0_0000] {
        around_high_word(hy, &mut ys);
    }
    let mut xs = binary_specials();
    for hx in [
        0x3ff3_988eu32,
        0x3ffb_b67a,
        0x3fef_ffff,
        0x3ff0_0000,
        0x0010_0000,
    ] {
        around_high_word(hx, &mut xs);
    }
    for x in [
        1.0 + 2f64.powi(-20),
        1.0 - 2f64.powi(-21),
        -2.0,
        -0.5,
        -10.0,
    ] {
        around(x, &mut xs);
    }
    let mut v = pairs(&xs, &ys);
    // z = y·log2(x) next to 1024, -1022, -1074 and -1075.
    for x in [2.0, 0.5, 3.0, 1.1, -2.0, 10.0] {
        let l = libm::log2(f64::abs(x));
        for z in [
            1024.0, 1023.5, -1022.0, -1074.0, -1075.0, -1076.0, 0.5, -0.5,
        ] {
            let mut around_y = Vec::new();
            around(z / l, &mut around_y);
            v.extend(around_y.into_iter().map(|y| (x, y)));
        }
    }
    v
}

fn pow_pick(rng: &mut Rng, i: usize) -> (f64, f64) {
    match i % 6 {
        0 => (f64::from_bits(rng.next()), f64::from_bits(rng.next())),
        1 => (rng.uniform(0.0, 100.0), rng.uniform(-10.0, 10.0)),
        2 => (rng.uniform(0.5, 2.0), rng.uniform(-1100.0, 1100.0)),
        // Negative bases to integer powers, odd and even.
        3 => (rng.uniform(-50.0, 50.0), (rng.next() % 41) as f64 - 20.0),
        4 => (
            f64::from_bits(rng.next() >> 1),
            rng.uniform(-3.0, 3.0) * 2f64.powi((rng.next() % 12) as i32),
        ),
        _ => (rng.uniform(-2.0, 2.0), rng.uniform(-40.0, 40.0)),
    }
}

/// `atan2`'s and `hypot`'s chosen inputs: every pair of the specials and
/// values of every magnitude (quotients across 2^±64 and 2^±26, scalings
/// at 2^±700 and 2^±90, exponent gaps across 64 and 25).
fn two_argument_inputs() -> Vec<(f64, f64)> {
    let xs = binary_specials();
    let mut v = pairs(&xs, &xs);
    for (e, d) in [(0, 64), (0, 26), (511, 0), (-450, 0), (0, 25), (60, -60)] {
        let a = 2f64.powi(e);
        let b = a * 2f64.powi(d);
        let (mut aa, mut bb) = (Vec::new(), Vec::new());
        around(a, &mut aa);
        around(b, &mut bb);
        for (x, y) in pairs(&aa, &bb) {
            v.extend([(x, y), (y, x), (-x, y), (x, -y), (-y, -x)]);
        }
    }
    v
}

fn two_argument_pick(rng: &mut Rng, i: usize) -> (f64, f64) {
    match i % 4 {
        0 => (f64::from_bits(rng.next()), f64::from_bits(rng.next())),
        1 => (rng.uniform(-10.0, 10.0), rng.uniform(-10.0, 10.0)),
        2 => (rng.uniform(-1e6, 1e6), rng.uniform(-1.0, 1.0)),
        _ => (
            f64::from_bits(rng.next() >> 2),
            -f64::from_bits(rng.next() >> 2),
        ),
    }
}

type Oracle2 = fn(f64, f64) -> f64;
type Oracle2F32 = fn(f32, f32) -> f32;
type Chosen2 = fn() -> Vec<(f64, f64)>;
type Pick2 = fn(&mut Rng, usize) -> (f64, f64);

/// Each binary function: its name, the `libm` crate's f64 and f32
/// functions, its chosen inputs and its random ones (made `f32` for
/// `f32`).
const BINARY_FUNCTIONS: [(&str, Oracle2, Oracle2F32, Chosen2, Pick2); 3] = [
    ("pow", libm::pow, libm::powf, pow_inputs, pow_pick),
    (
        "atan2",
        libm::atan2,
        libm::atan2f,
        two_argument_inputs,
        two_argument_pick,
    ),
    (
        "hypot",
        libm::hypot,
        libm::hypotf,
        two_argument_inputs,
        two_argument_pick,
    ),
];

/// f32 inputs from f64 ones: rounded, and with the f32 thresholds (the
/// f32 functions test their bits where the f64 ones test high words).
fn as_f32(pairs: &[(f64, f64)]) -> Vec<(f32, f32)> {
    let mut v: Vec<(f32, f32)> = pairs.iter().map(|&(x, y)| (x as f32, y as f32)).collect();
    let mut specials = Vec::new();
    for x in [
        0.0f32,
        f32::INFINITY,
        f32::NAN,
        f32::MIN_POSITIVE,
        f32::from_bits(1),
        f32::from_bits(0x007f_ffff),
        f32::MAX,
        1.0,
        0.5,
        2.0,
        3.0,
    ] {
        for x in [x, x.next_up(), x.next_down()] {
            specials.extend([x, -x]);
        }
    }
    for &x in &specials {
        for &y in &specials {
            v.push((x, y));
        }
    }
    // powf's reduction bounds and huge exponents; hypotf's and atan2f's
    // gaps and scalings.
    for bits in [
        0x3f9c_c471u32,
        0x3fdd_b3d7,
        0x4d00_0000,
        0x4b80_0000,
        0x3f7f_fff8,
    ] {
        for b in bits - 2..=bits + 2 {
            let a = f32::from_bits(b);
            v.extend([(a, 3.0), (a, -2.5), (2.0, a), (-2.0, a), (a, 1e-3)]);
        }
    }
    for (e, d) in [(0, 26), (0, 25), (61, 0), (-61, 0), (127, -1), (-126, 24)] {
        let a = 2f32.powi(e);
        let b = a * 2f32.powi(d);
        v.extend([(a, b), (b, a), (-a, b), (a.next_up(), b.next_down())]);
    }
    // z = y·log2(x) next to 128, -126, -149 and -150.
    for x in [2.0f32, 0.5, 3.0, 1.1, -2.0] {
        for z in [128.0f32, 127.5, -126.0, -149.0, -150.0, -151.0] {
            let y = z / libm::log2f(x.abs());
            let (mut up, mut down) = (y, y);
            v.push((x, y));
            for _ in 0..3 {
                up = up.next_up();
                down = down.next_down();
                v.extend([(x, up), (x, down)]);
            }
        }
    }
    v
}

/// [`check_everywhere`] for a binary function.
fn check_binary_everywhere<T: Float>(
    op: &str,
    oracle: fn(T, T) -> T,
    chosen: &[(T, T)],
    pick: impl FnMut(&mut Rng, usize) -> (T, T),
) {
    let programs: Vec<(String, Box<dyn kiln::Program>, bool)> = runs()
        .into_iter()
        .map(|(engine, libm_calls)| {
            let label = format!("on {} (libm_calls {libm_calls:?})", engine.name());
            let interp = engine.name() == "interp";
            (label, binary::<T>(engine.as_ref(), op, libm_calls), interp)
        })
        .collect();
    let check = |pairs: &[(T, T)], interp_limit: usize| {
        let want: Vec<T> = pairs.iter().map(|&(x, y)| oracle(x, y)).collect();
        for (label, program, interp) in &programs {
            let k = if *interp {
                pairs.len().min(interp_limit)
            } else {
                pairs.len()
            };
            if k > 0 {
                check_binary_against(program.as_ref(), op, &pairs[..k], &want[..k])
                    .map_err(|e| format!("{label}: {e}"))
                    .unwrap();
            }
        }
    };
    check(chosen, usize::MAX);
    let mut interp_limit = 10_000;
    random(cases(), pick, |pairs| {
        check(pairs, interp_limit);
        interp_limit = 0;
    });
}

/// The binary functions at their chosen inputs and `MATH_CASES` random
/// pairs on every configuration, f64 and f32.
#[test]
fn binary_functions_are_libms_on_every_engine() {
    for (op, oracle, oracle_f32, chosen, pick) in
        BINARY_FUNCTIONS.into_iter().filter(|f| selected(f.0))
    {
        check_binary_everywhere(op, oracle, &chosen(), pick);
        let pick_f32 = |rng: &mut Rng, i| {
            let (x, y) = pick(rng, i);
            (x as f32, y as f32)
        };
        check_binary_everywhere(op, oracle_f32, &as_f32(&chosen()), pick_f32);
    }
}

/// The binary functions in wasm modules (fewer random pairs: wasmi
/// interprets).
#[cfg(feature = "llvm")]
#[test]
fn binary_functions_are_libms_in_wasm() {
    for (op, oracle, oracle_f32, chosen, pick) in
        BINARY_FUNCTIONS.into_iter().filter(|f| selected(f.0))
    {
        let program = binary::<f64>(&kiln_tests::wasm::Wasm, op, None);
        check_binary(program.as_ref(), op, &chosen(), oracle).unwrap();
        random(cases() / 50, pick, |xs| {
            check_binary(program.as_ref(), op, xs, oracle).unwrap()
        });
        let program = binary::<f32>(&kiln_tests::wasm::Wasm, op, None);
        check_binary(program.as_ref(), op, &as_f32(&chosen()), oracle_f32).unwrap();
    }
}
