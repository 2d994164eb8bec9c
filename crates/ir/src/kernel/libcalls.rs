//! The math functions kernels call, by their C names. Shared by every tier, so
//! the tiers cannot disagree about which function an op calls. The in-process
//! JITs bind the names to the pure-Rust `libm` crate (the facade's
//! `kiln::runtime`), so JIT results match the interpreter bit for bit; objects
//! keep the C names and link the platform libm; wasm modules import them from
//! module `env`.

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
