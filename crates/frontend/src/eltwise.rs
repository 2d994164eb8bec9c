//! Elementwise building blocks shared by the framework importers (torch.fx,
//! TensorFlow): typed constants, promotion-free arithmetic on one dtype, and the
//! composite activations (relu, sigmoid, softplus, …) expanded into kiln's
//! primitives with the frameworks' exact formulas, NaN behaviour included.
//!
//! Every helper takes operands that already have one dtype; promotion is the
//! importer's business (torch and TF promote differently).

use kiln_ir::{BinaryOp, Builder, CmpOp, DType, Scalar, TypeError, UnaryOp, Value};

/// Result of a building step: a type error names the op and the types.
pub type EResult<T> = Result<T, TypeError>;

/// A constant of `dtype` holding `x` (cast as Rust's `as` does).
pub fn konst(b: &mut Builder, dtype: DType, x: f64) -> Value {
    b.constant(match dtype {
        DType::Bool => Scalar::Bool(x != 0.0),
        DType::I32 => Scalar::I32(x as i32),
        DType::I64 => Scalar::I64(x as i64),
        DType::F32 => Scalar::F32(x as f32),
        DType::F64 => Scalar::F64(x),
    })
}

/// The dtype of a value the builder made.
pub fn dtype(b: &Builder, v: Value) -> DType {
    b.dtype(v).expect("importers only build tensor values")
}

/// `max(x, 0)` as torch (`clamp_min`) and TF (`Relu`) compute it:
/// `x < 0 ? 0 : x`, so NaN stays NaN and -0.0 stays -0.0.
pub fn relu(b: &mut Builder, x: Value) -> EResult<Value> {
    clamp(b, x, Some(0.0), None)
}

/// `clamp(x, lo, hi)`: `x < lo ? lo : x`, then `x > hi ? hi : x` (NaN passes).
pub fn clamp(b: &mut Builder, x: Value, lo: Option<f64>, hi: Option<f64>) -> EResult<Value> {
    let d = dtype(b, x);
    let mut v = x;
    if let Some(lo) = lo {
        let c = konst(b, d, lo);
        let below = b.compare(CmpOp::Lt, v, c)?;
        v = b.select(below, c, v)?;
    }
    if let Some(hi) = hi {
        let c = konst(b, d, hi);
        let above = b.compare(CmpOp::Gt, v, c)?;
        v = b.select(above, c, v)?;
    }
    Ok(v)
}

/// `1 / (1 + exp(-x))`.
pub fn sigmoid(b: &mut Builder, x: Value) -> EResult<Value> {
    let d = dtype(b, x);
    let neg = b.unary(UnaryOp::Neg, x)?;
    let e = b.unary(UnaryOp::Exp, neg)?;
    let one = konst(b, d, 1.0);
    let den = b.binary(BinaryOp::Add, one, e)?;
    b.binary(BinaryOp::Div, one, den)
}

/// `x * x`.
pub fn square(b: &mut Builder, x: Value) -> EResult<Value> {
    b.binary(BinaryOp::Mul, x, x)
}

/// `1 / x`.
pub fn reciprocal(b: &mut Builder, x: Value) -> EResult<Value> {
    let one = konst(b, dtype(b, x), 1.0);
    b.binary(BinaryOp::Div, one, x)
}

/// `1 / sqrt(x)`.
pub fn rsqrt(b: &mut Builder, x: Value) -> EResult<Value> {
    let s = b.unary(UnaryOp::Sqrt, x)?;
    reciprocal(b, s)
}

/// torch's softplus: `x * beta > threshold ? x : log1p(exp(x * beta)) / beta`.
pub fn softplus(b: &mut Builder, x: Value, beta: f64, threshold: f64) -> EResult<Value> {
    let d = dtype(b, x);
    let beta_c = konst(b, d, beta);
    let bx = b.binary(BinaryOp::Mul, x, beta_c)?;
    let e = b.unary(UnaryOp::Exp, bx)?;
    let l = b.unary(UnaryOp::Log1p, e)?;
    let soft = b.binary(BinaryOp::Div, l, beta_c)?;
    let t = konst(b, d, threshold);
    let linear = b.compare(CmpOp::Gt, bx, t)?;
    b.select(linear, x, soft)
}

/// `x > 0 ? x : x * slope` (torch's leaky_relu).
pub fn leaky_relu(b: &mut Builder, x: Value, slope: f64) -> EResult<Value> {
    let d = dtype(b, x);
    let zero = konst(b, d, 0.0);
    let s = konst(b, d, slope);
    let pos = b.compare(CmpOp::Gt, x, zero)?;
    let scaled = b.binary(BinaryOp::Mul, x, s)?;
    b.select(pos, x, scaled)
}

/// `x > 0 ? x : alpha * expm1(x)` (torch's elu), times `scale` (selu).
pub fn elu(b: &mut Builder, x: Value, alpha: f64, scale: f64) -> EResult<Value> {
    let d = dtype(b, x);
    let zero = konst(b, d, 0.0);
    let a = konst(b, d, alpha);
    let pos = b.compare(CmpOp::Gt, x, zero)?;
    let em1 = b.unary(UnaryOp::Expm1, x)?;
    let neg = b.binary(BinaryOp::Mul, a, em1)?;
    let v = b.select(pos, x, neg)?;
    if scale == 1.0 {
        return Ok(v);
    }
    let s = konst(b, d, scale);
    b.binary(BinaryOp::Mul, v, s)
}

/// The tanh approximation of GELU: `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
pub fn gelu_tanh(b: &mut Builder, x: Value) -> EResult<Value> {
    let d = dtype(b, x);
    let x3 = {
        let x2 = b.binary(BinaryOp::Mul, x, x)?;
        b.binary(BinaryOp::Mul, x2, x)?
    };
    let k = konst(b, d, 0.044715);
    let kx3 = b.binary(BinaryOp::Mul, k, x3)?;
    let inner = b.binary(BinaryOp::Add, x, kx3)?;
    let c = konst(b, d, (2.0 / std::f64::consts::PI).sqrt());
    let scaled = b.binary(BinaryOp::Mul, c, inner)?;
    let t = b.unary(UnaryOp::Tanh, scaled)?;
    half_x_one_plus(b, x, t)
}

/// `(x * 0.5) * (1 + t)`: the tail both GELU forms share.
fn half_x_one_plus(b: &mut Builder, x: Value, t: Value) -> EResult<Value> {
    let d = dtype(b, x);
    let one = konst(b, d, 1.0);
    let half = konst(b, d, 0.5);
    let onep = b.binary(BinaryOp::Add, one, t)?;
    let hx = b.binary(BinaryOp::Mul, x, half)?;
    b.binary(BinaryOp::Mul, hx, onep)
}

/// GELU as torch computes it: `x * 0.5 * (1 + erf(x * M_SQRT1_2))`.
pub fn gelu_erf(b: &mut Builder, x: Value) -> EResult<Value> {
    let d = dtype(b, x);
    let r = konst(b, d, std::f64::consts::FRAC_1_SQRT_2);
    let scaled = b.binary(BinaryOp::Mul, x, r)?;
    let e = b.unary(UnaryOp::Erf, scaled)?;
    half_x_one_plus(b, x, e)
}

/// `relu6(x + 3) / 6` (hardsigmoid); times `x` for hardswish.
pub fn hardsigmoid(b: &mut Builder, x: Value) -> EResult<Value> {
    let d = dtype(b, x);
    let three = konst(b, d, 3.0);
    let six = konst(b, d, 6.0);
    let shifted = b.binary(BinaryOp::Add, x, three)?;
    let r = clamp(b, shifted, Some(0.0), Some(6.0))?;
    b.binary(BinaryOp::Div, r, six)
}

/// Integer power by a non-negative constant exponent, by repeated squaring
/// (wrapping, as torch's integer `pow` does).
pub fn int_pow(b: &mut Builder, x: Value, mut exp: u32) -> EResult<Value> {
    let d = dtype(b, x);
    let mut result = konst(b, d, 1.0);
    let mut base = x;
    let mut first = true;
    while exp > 0 {
        if exp & 1 == 1 {
            result = if first {
                base
            } else {
                b.binary(BinaryOp::Mul, result, base)?
            };
            first = false;
        }
        exp >>= 1;
        if exp > 0 {
            base = b.binary(BinaryOp::Mul, base, base)?;
        }
    }
    Ok(result)
}
