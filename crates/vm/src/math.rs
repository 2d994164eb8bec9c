//! The `kiln_ir::math` functions a kernel calls (`kiln_kernel::libcalls`):
//! the interpreter's semantics call the same ones, so the VM returns its
//! bits. Where it is faster, the VM runs a function's routine instead
//! (`routines.rs`: kiln's inline math, which returns the same bits).

use crate::lanes::Simd;
use kiln_ir::{BinaryOp, DType, UnaryOp};
use kiln_kernel::MathFn;

/// Whether the VM computes `f` on `dtype` by its routine (`routines.rs`)
/// rather than by a `libm` call per lane, on `simd`, by measurement
/// (`KILN_VM_SIMD=… cargo bench -p kiln --features llvm --bench math`; the
/// figures are in docs/performance.md, "Compile latency, third step"). A
/// routine computes every path of the algorithm for every lane where the
/// scalar function takes one branch, so the wider the lanes the more
/// routines win: with AVX-512 every one, with AVX2 all but the `f64`
/// `cosh` (the `f32` `sinh`, `cosh` and `acosh` won once their routines
/// ran in 32-bit lanes, `generate.rs`: 8.5–11.1 ns a lane against
/// 17.3–22.3, 6.4–8.1 against 12.9–13.9, 6.6–8.9 against 13.8–20.9 on an
/// AMD Zen 3), and with the baseline's two `f64` lanes only
/// the trigonometric functions, their inverses, the logarithms, `atanh`,
/// `atan2` and the `f64` `pow`.
pub(crate) fn routine_wins(f: MathFn, dtype: DType, simd: Simd) -> bool {
    use UnaryOp::*;
    match simd {
        Simd::Avx512 => true,
        Simd::Avx2 => !matches!((f, dtype), (MathFn::Unary(Cosh), DType::F64)),
        Simd::Base => match f {
            MathFn::Unary(op) => matches!(
                op,
                Sin | Cos | Tan | Asin | Acos | Atan | Atanh | Log | Log1p | Log2 | Log10
            ),
            MathFn::Binary(op) => {
                op == BinaryOp::Atan2 || (op == BinaryOp::Pow && dtype == DType::F64)
            }
        },
    }
}

/// A math function of one dtype.
#[derive(Copy, Clone)]
pub(crate) enum Func {
    F64(fn(f64) -> f64),
    F32(fn(f32) -> f32),
    F64x2(fn(f64, f64) -> f64),
    F32x2(fn(f32, f32) -> f32),
}

impl Func {
    /// The function of lanes `a` (and `b`), as a lane.
    #[inline]
    pub(crate) fn call(self, a: u64, b: u64) -> u64 {
        use crate::lanes::{f32_, f64_, of_f32, of_f64};
        match self {
            Func::F64(f) => of_f64(f(f64_(a))),
            Func::F32(f) => of_f32(f(f32_(a))),
            Func::F64x2(f) => of_f64(f(f64_(a), f64_(b))),
            Func::F32x2(f) => of_f32(f(f32_(a), f32_(b))),
        }
    }
}

macro_rules! calls {
    (() unary: [$($u:ident $u64:ident $u32:ident),*] binary: [$($b:ident $b64:ident $b32:ident),*]) => {
        /// The function a unary op calls on `dtype`, if it is one.
        pub(crate) fn unary(op: UnaryOp, dtype: DType) -> Option<Func> {
            Some(match (op, dtype) {
                $(
                    (UnaryOp::$u, DType::F64) => Func::F64(kiln_ir::math::$u64),
                    (UnaryOp::$u, DType::F32) => Func::F32(kiln_ir::math::$u32),
                )*
                _ => return None,
            })
        }

        /// The function a binary op calls on `dtype`, if it is one (float
        /// `rem` is C's `fmod`).
        pub(crate) fn binary(op: BinaryOp, dtype: DType) -> Option<Func> {
            Some(match (op, dtype) {
                $(
                    (BinaryOp::$b, DType::F64) => Func::F64x2(kiln_ir::math::$b64),
                    (BinaryOp::$b, DType::F32) => Func::F32x2(kiln_ir::math::$b32),
                )*
                _ => return None,
            })
        }
    };
}

kiln_ir::for_each_math_fn!(calls);
