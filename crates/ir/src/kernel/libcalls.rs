//! The math functions kernels call, by their C names. Shared by every tier, so
//! the tiers cannot disagree about which function an op calls. The in-process
//! JITs bind the names to the pure-Rust `libm` crate (the facade's
//! `kiln::runtime`), so JIT results match the interpreter bit for bit; objects
//! keep the C names and link the platform libm; wasm modules import them from
//! module `env`.

use crate::op::{BinaryOp, UnaryOp};
use crate::types::DType;

/// The one table of the math functions kiln computes by the `libm` crate's
/// algorithms: each op's variant and its C (and `libm` crate) names for
/// `f64` and `f32`, unary then binary (float `rem` is C's `fmod`).
/// `for_each_math_fn!(m, extra…)` expands to `m! { (extra…) unary: [Op
/// f64name f32name, …] binary: [Op f64name f32name, …] }`, as wasmparser's
/// `for_each_operator!` does, so every list of them (the interpreter's
/// semantics, these C names, the facade's symbol bindings, the VM's calls,
/// the wasm host's imports) is generated from here and none can miss one.
#[macro_export]
macro_rules! for_each_math_fn {
    ($m:ident $(, $extra:tt)*) => {
        $m! {
            ($($extra),*)
            unary: [
                Sin sin sinf, Cos cos cosf, Tan tan tanf,
                Asin asin asinf, Acos acos acosf, Atan atan atanf,
                Sinh sinh sinhf, Cosh cosh coshf, Tanh tanh tanhf,
                Exp exp expf, Exp2 exp2 exp2f, Expm1 expm1 expm1f,
                Log log logf, Log2 log2 log2f, Log10 log10 log10f,
                Log1p log1p log1pf, Cbrt cbrt cbrtf,
                Asinh asinh asinhf, Acosh acosh acoshf, Atanh atanh atanhf,
                Erf erf erff, Erfc erfc erfcf
            ]
            binary: [
                Pow pow powf, Atan2 atan2 atan2f, Hypot hypot hypotf,
                Rem fmod fmodf, NextAfter nextafter nextafterf
            ]
        }
    };
}

macro_rules! names {
    (() unary: [$($u:ident $u64:ident $u32:ident),*] binary: [$($b:ident $b64:ident $b32:ident),*]) => {
        /// The C name of a unary float function for `dtype` (`sin`, `sinf`).
        pub fn unary_name(op: UnaryOp, dtype: DType) -> Option<&'static str> {
            match (op, dtype) {
                $(
                    (UnaryOp::$u, DType::F64) => Some(stringify!($u64)),
                    (UnaryOp::$u, DType::F32) => Some(stringify!($u32)),
                )*
                _ => None,
            }
        }

        /// The C name of a binary float function for `dtype` (`pow`, `fmod`, …).
        pub fn binary_name(op: BinaryOp, dtype: DType) -> Option<&'static str> {
            match (op, dtype) {
                $(
                    (BinaryOp::$b, DType::F64) => Some(stringify!($b64)),
                    (BinaryOp::$b, DType::F32) => Some(stringify!($b32)),
                )*
                _ => None,
            }
        }
    };
}

crate::for_each_math_fn!(names);
