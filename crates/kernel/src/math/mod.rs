//! Inline math: transcendentals expanded into kernel expressions that
//! compute, operation for operation, what the `libm` crate computes (the
//! interpreter's oracle; for `erf` of `f32`, kiln's own
//! `kiln_ir::math::kiln_erff`), so every lane of every tier returns its bits.
//!
//! Each function is a port of the `libm` crate's algorithm (or kiln's own
//! `erf` of `f32`, with the fused multiply-adds its definition has) with its
//! constants and its order of operations, no FMA contraction, and its
//! branches turned into `select`s: every path is computed and the one the
//! scalar code would take is kept. A row loop of such code has no calls and
//! no branches, so LLVM vectorizes it; objects and wasm modules carry it
//! instead of depending on the platform's libm. The bit-exactness tests
//! (`tests/math.rs`) compare every tier with the `libm` crate at special
//! values, at the boundaries of every branch and at random inputs.
//!
//! One file per family: `exp.rs` (`exp`, `expm1`), `exp2.rs`, `log.rs`
//! (`log`, `log1p`, `log2`, `log10`), `trig.rs` (`sin`, `cos`, `tan`),
//! `inverse_trig.rs` (`atan`, `asin`, `acos`), `hyperbolic.rs` (`tanh`,
//! `sinh`, `cosh` and their inverses), `erf.rs`, `cbrt.rs`, `binary.rs`
//! (`pow`, `atan2`, `hypot`); `emitter.rs` is the builder they all emit
//! with. An expansion takes the kernel and a statement list, nothing of
//! lowering, so math depends on the kernel IR alone.

// The constants are the `libm` crate's, digit for digit, so a reader can
// check them against its source; they parse to the same `f64`s.
#![allow(clippy::excessive_precision, clippy::approx_constant)]

use super::{Expr, Kernel, MathCall, Reg, Stmt};
use kiln_ir::op::{BinaryOp, CmpOp, UnaryOp};
use kiln_ir::scalar::Scalar;
use kiln_ir::types::DType;

/// An inline expansion: the statements computing a function of `x`, and
/// the register of its result.
pub(super) type Expansion = fn(&mut Kernel, &mut Vec<Stmt>, Reg) -> Reg;

/// An inline expansion of a binary function: the statements computing
/// `f(a, b)`, and the register of its result.
pub(super) type Expansion2 = fn(&mut Kernel, &mut Vec<Stmt>, Reg, Reg) -> Reg;

mod binary;
mod cbrt;
mod emitter;
mod erf;
mod exp;
mod exp2;
mod hyperbolic;
mod inverse_trig;
mod log;
mod trig;

pub(super) use binary::inline as inline_binary;
use cbrt::*;
use emitter::*;
use erf::*;
use exp::*;
pub use exp2::{EXP2F_TABLE, EXP2_TABLE};
use hyperbolic::*;
use inverse_trig::*;
use log::*;
use trig::*;

/// The inline port of `op` on `dtype`, if kiln has one (the rest stay
/// calls).
pub(super) fn inline(op: UnaryOp, dtype: DType) -> Option<Expansion> {
    Some(match (op, dtype) {
        (UnaryOp::Exp, DType::F64) => exp_f64,
        (UnaryOp::Log, DType::F64) => log_f64,
        (UnaryOp::Exp, DType::F32) => exp_f32,
        (UnaryOp::Log, DType::F32) => log_f32,
        (UnaryOp::Sin, DType::F64) => |k, o, x| sin_f64(k, o, x, Reduction::Whole),
        (UnaryOp::Cos, DType::F64) => |k, o, x| cos_f64(k, o, x, Reduction::Whole),
        (UnaryOp::Sin, DType::F32) => sin_f32,
        (UnaryOp::Cos, DType::F32) => cos_f32,
        (UnaryOp::Expm1, DType::F64) => expm1_f64,
        (UnaryOp::Tanh, DType::F64) => tanh_f64,
        (UnaryOp::Expm1, DType::F32) => expm1_f32,
        (UnaryOp::Tanh, DType::F32) => tanh_f32,
        (UnaryOp::Erf, DType::F64) => erf,
        (UnaryOp::Erf, DType::F32) => erf_f32,
        (UnaryOp::Erfc, DType::F64 | DType::F32) => erfc,
        (UnaryOp::Sinh, DType::F64 | DType::F32) => sinh,
        (UnaryOp::Cosh, DType::F64 | DType::F32) => cosh,
        (UnaryOp::Log1p, DType::F64 | DType::F32) => log1p,
        (UnaryOp::Log2, DType::F64 | DType::F32) => log2,
        (UnaryOp::Log10, DType::F64 | DType::F32) => log10,
        (UnaryOp::Tan, DType::F64 | DType::F32) => |k, o, x| tan(k, o, x, Reduction::Whole),
        (UnaryOp::Atan, DType::F64 | DType::F32) => atan,
        (UnaryOp::Asin, DType::F64 | DType::F32) => asin,
        (UnaryOp::Acos, DType::F64 | DType::F32) => acos,
        (UnaryOp::Asinh, DType::F64 | DType::F32) => asinh,
        (UnaryOp::Acosh, DType::F64 | DType::F32) => acosh,
        (UnaryOp::Atanh, DType::F64 | DType::F32) => atanh,
        (UnaryOp::Cbrt, DType::F32) => cbrt_f32,
        (UnaryOp::Cbrt, DType::F64) => |kernel, out, x| cbrt_f64(&mut Emitter { kernel, out }, x),
        (UnaryOp::Exp2, DType::F64) => {
            |kernel, out, x| exp2::exp2_f64(&mut Emitter { kernel, out }, x)
        }
        (UnaryOp::Exp2, DType::F32) => {
            |kernel, out, x| exp2::exp2_f32(&mut Emitter { kernel, out }, x)
        }
        _ => return None,
    })
}

/// [`inline`] for a backend whose fallback calls are the `libm` crate's own
/// functions (an in-process JIT or the VM, never an object): the `f64`
/// `sin`, `cos` and `tan` reduce their argument in one round inline and
/// leave the rare arguments that need more to that call
/// ([`trig::Reduction::FirstRound`]), which computes what the whole
/// expansion would.
pub(super) fn inline_bound(op: UnaryOp, dtype: DType) -> Option<Expansion> {
    Some(match (op, dtype) {
        (UnaryOp::Sin, DType::F64) => |k, o, x| sin_f64(k, o, x, Reduction::FirstRound),
        (UnaryOp::Cos, DType::F64) => |k, o, x| cos_f64(k, o, x, Reduction::FirstRound),
        (UnaryOp::Tan, DType::F64) => |k, o, x| tan(k, o, x, Reduction::FirstRound),
        _ => return inline(op, dtype),
    })
}
