//! The math functions kernels call, by their C names, and the pure-Rust `libm`
//! functions every in-process JIT binds those names to, so JIT results match the
//! interpreter bit for bit. Objects keep the C names and link the platform libm;
//! wasm modules import them from module `env`. Shared by every tier, so the
//! tiers cannot disagree about which function an op calls.

use crate::op::{BinaryOp, UnaryOp};
use crate::types::DType;

/// The C name of a unary float function for `dtype` (`sin`, `sinf`).
pub fn unary_name(op: UnaryOp, dtype: DType) -> Option<String> {
    use UnaryOp::*;
    let base = match op {
        Sin => "sin",
        Cos => "cos",
        Tan => "tan",
        Asin => "asin",
        Acos => "acos",
        Atan => "atan",
        Sinh => "sinh",
        Cosh => "cosh",
        Tanh => "tanh",
        Exp => "exp",
        Exp2 => "exp2",
        Expm1 => "expm1",
        Log => "log",
        Log2 => "log2",
        Log10 => "log10",
        Log1p => "log1p",
        Cbrt => "cbrt",
        Asinh => "asinh",
        Acosh => "acosh",
        Atanh => "atanh",
        Erf => "erf",
        Erfc => "erfc",
        _ => return None,
    };
    Some(suffixed(base, dtype))
}

/// The C name of a binary float function for `dtype` (`pow`, `fmod`, …).
pub fn binary_name(op: BinaryOp, dtype: DType) -> Option<String> {
    let base = match op {
        BinaryOp::Pow => "pow",
        BinaryOp::Atan2 => "atan2",
        BinaryOp::Hypot => "hypot",
        BinaryOp::Rem => "fmod",
        BinaryOp::NextAfter => "nextafter",
        _ => return None,
    };
    Some(suffixed(base, dtype))
}

fn suffixed(base: &str, dtype: DType) -> String {
    if dtype == DType::F32 {
        format!("{base}f")
    } else {
        base.to_string()
    }
}

macro_rules! bindings {
    ($($name:ident: fn($($arg:ident: $t:ty),*) -> $r:ty;)*) => {
        $(
            extern "C" fn $name($($arg: $t),*) -> $r {
                libm::$name($($arg),*)
            }
        )*

        /// Every C name a kernel may call, with the address of the `libm` crate
        /// function the JIT binds it to.
        pub fn jit_symbols() -> Vec<(&'static str, *const u8)> {
            vec![$((stringify!($name), $name as *const u8)),*]
        }
    };
}

bindings! {
    sin: fn(x: f64) -> f64; cos: fn(x: f64) -> f64; tan: fn(x: f64) -> f64;
    asin: fn(x: f64) -> f64; acos: fn(x: f64) -> f64; atan: fn(x: f64) -> f64;
    sinh: fn(x: f64) -> f64; cosh: fn(x: f64) -> f64; tanh: fn(x: f64) -> f64;
    exp: fn(x: f64) -> f64; exp2: fn(x: f64) -> f64; expm1: fn(x: f64) -> f64;
    log: fn(x: f64) -> f64; log2: fn(x: f64) -> f64; log10: fn(x: f64) -> f64;
    log1p: fn(x: f64) -> f64; cbrt: fn(x: f64) -> f64;
    asinh: fn(x: f64) -> f64; acosh: fn(x: f64) -> f64; atanh: fn(x: f64) -> f64;
    erf: fn(x: f64) -> f64; erfc: fn(x: f64) -> f64;
    pow: fn(x: f64, y: f64) -> f64; atan2: fn(x: f64, y: f64) -> f64;
    hypot: fn(x: f64, y: f64) -> f64; fmod: fn(x: f64, y: f64) -> f64;
    nextafter: fn(x: f64, y: f64) -> f64;
    sinf: fn(x: f32) -> f32; cosf: fn(x: f32) -> f32; tanf: fn(x: f32) -> f32;
    asinf: fn(x: f32) -> f32; acosf: fn(x: f32) -> f32; atanf: fn(x: f32) -> f32;
    sinhf: fn(x: f32) -> f32; coshf: fn(x: f32) -> f32; tanhf: fn(x: f32) -> f32;
    expf: fn(x: f32) -> f32; exp2f: fn(x: f32) -> f32; expm1f: fn(x: f32) -> f32;
    logf: fn(x: f32) -> f32; log2f: fn(x: f32) -> f32; log10f: fn(x: f32) -> f32;
    log1pf: fn(x: f32) -> f32; cbrtf: fn(x: f32) -> f32;
    asinhf: fn(x: f32) -> f32; acoshf: fn(x: f32) -> f32; atanhf: fn(x: f32) -> f32;
    erff: fn(x: f32) -> f32; erfcf: fn(x: f32) -> f32;
    powf: fn(x: f32, y: f32) -> f32; atan2f: fn(x: f32, y: f32) -> f32;
    hypotf: fn(x: f32, y: f32) -> f32; fmodf: fn(x: f32, y: f32) -> f32;
    nextafterf: fn(x: f32, y: f32) -> f32;
}
