//! The math functions kernels call, by their C names. Shared by every tier, so
//! the tiers cannot disagree about which function an op calls. The in-process
//! JITs bind the names to the functions of `kiln_ir::math` (the pure-Rust
//! `libm` crate's, and kiln's own `kiln_erff`; the facade's
//! `kiln::runtime`), so JIT results match the interpreter bit for bit; objects
//! keep the C names and link the platform libm; wasm modules import them from
//! module `env`. (Objects and wasm modules compute `erf` inline, so none
//! imports `kiln_erff`, which no C library has.)

use kiln_ir::op::{BinaryOp, UnaryOp};
use kiln_ir::types::DType;

// The C names, from the one table of math functions (`kiln_ir::op`).
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

kiln_ir::for_each_math_fn!(names);
