//! The `libm` crate functions a kernel calls (`kiln_ir::kernel::libcalls`):
//! the interpreter's semantics call the same ones, so the VM returns its
//! bits. Where it is faster, the VM runs a function's routine instead
//! (`routines.rs`: kiln's inline math, which returns the same bits).

use crate::lanes::Simd;
use kiln_ir::kernel::MathFn;
use kiln_ir::{BinaryOp, DType, UnaryOp};

/// Whether the VM computes `f` on `dtype` by its routine (`routines.rs`)
/// rather than by a `libm` call per lane, on `simd`, by measurement
/// (`KILN_VM_SIMD=… cargo bench -p kiln --features llvm --bench math`,
/// docs/performance.md). A routine computes every path of the algorithm
/// for every lane where the scalar function takes one branch: with
/// AVX-512 every routine is faster (0.12–0.64× the call's time), with AVX2
/// all but `cosh` and the `f32` `sinh` and `acosh` (≥ 0.99×), and with the
/// baseline's two `f64` lanes only the trigonometric functions, their
/// inverses, the logarithms, `atanh`, `atan2` and the `f64` `pow`.
pub(crate) fn routine_wins(f: MathFn, dtype: DType, simd: Simd) -> bool {
    use UnaryOp::*;
    match simd {
        Simd::Avx512 => true,
        Simd::Avx2 => !matches!(
            (f, dtype),
            (MathFn::Unary(Cosh), _) | (MathFn::Unary(Sinh | Acosh), DType::F32)
        ),
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

/// The function a unary op calls on `dtype`, if it is one.
pub(crate) fn unary(op: UnaryOp, dtype: DType) -> Option<Func> {
    use UnaryOp::*;
    macro_rules! pick {
        ($($op:ident => $f64:ident / $f32:ident,)*) => {
            match (op, dtype) {
                $(
                    ($op, DType::F64) => Func::F64(libm::$f64),
                    ($op, DType::F32) => Func::F32(libm::$f32),
                )*
                _ => return None,
            }
        };
    }
    Some(pick! {
        Sin => sin / sinf, Cos => cos / cosf, Tan => tan / tanf,
        Asin => asin / asinf, Acos => acos / acosf, Atan => atan / atanf,
        Sinh => sinh / sinhf, Cosh => cosh / coshf, Tanh => tanh / tanhf,
        Exp => exp / expf, Exp2 => exp2 / exp2f, Expm1 => expm1 / expm1f,
        Log => log / logf, Log2 => log2 / log2f, Log10 => log10 / log10f,
        Log1p => log1p / log1pf, Cbrt => cbrt / cbrtf,
        Asinh => asinh / asinhf, Acosh => acosh / acoshf, Atanh => atanh / atanhf,
        Erf => erf / erff, Erfc => erfc / erfcf,
    })
}

/// The function a binary op calls on `dtype`, if it is one (float `rem`
/// is C's `fmod`).
pub(crate) fn binary(op: BinaryOp, dtype: DType) -> Option<Func> {
    use BinaryOp::*;
    Some(match (op, dtype) {
        (Pow, DType::F64) => Func::F64x2(libm::pow),
        (Pow, DType::F32) => Func::F32x2(libm::powf),
        (Atan2, DType::F64) => Func::F64x2(libm::atan2),
        (Atan2, DType::F32) => Func::F32x2(libm::atan2f),
        (Hypot, DType::F64) => Func::F64x2(libm::hypot),
        (Hypot, DType::F32) => Func::F32x2(libm::hypotf),
        (Rem, DType::F64) => Func::F64x2(libm::fmod),
        (Rem, DType::F32) => Func::F32x2(libm::fmodf),
        (NextAfter, DType::F64) => Func::F64x2(libm::nextafter),
        (NextAfter, DType::F32) => Func::F32x2(libm::nextafterf),
        _ => return None,
    })
}
