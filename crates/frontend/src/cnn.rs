//! Convolutional layers as the importers build them (torch.fx and
//! TensorFlow): a convolution and its bias, batch normalization in
//! inference, and pooling windows. kiln's window ops are NCHW; TensorFlow's
//! NHWC graphs transpose around them ([`to_nchw`], [`to_nhwc`]: views, no
//! copies), and a transpose of a transpose is not written.

use crate::eltwise::konst;
use kiln_ir::{BinaryOp, Builder, Conv2d, Dim, Op, ReduceOp, TypeError, UnaryOp, Value};

fn te(e: TypeError) -> String {
    e.message
}

/// The extent of axis `axis` of `v`, when fixed.
fn extent(b: &Builder, v: Value, axis: usize) -> Option<u64> {
    match b.ty(v).as_tensor()?.shape.get(axis)? {
        Dim::Fixed(n) => Some(*n),
        Dim::Sym(_) => None,
    }
}

/// `v` reshaped to `[c, 1, 1]` (a per-channel vector against NCHW) or
/// `[c, 1, 1, 1]` (against OIHW weights); a scalar (one channel's, as a
/// one-element weight imports) broadcasts as it is.
fn per_channel(b: &mut Builder, v: Value, trailing: usize) -> Result<Value, String> {
    let rank = b.ty(v).as_tensor().map_or(0, |t| t.shape.len());
    if rank == 0 {
        return Ok(v);
    }
    let c = extent(b, v, 0).ok_or("a per-channel parameter of unknown length")?;
    if rank != 1 {
        return Err(format!(
            "a per-channel parameter must be a vector, got {}",
            b.ty(v)
        ));
    }
    let mut shape = vec![Dim::Fixed(c)];
    shape.extend(std::iter::repeat_n(Dim::Fixed(1), trailing));
    b.op(Op::Reshape(shape), &[v]).map_err(te)
}

/// `conv2d(x, w) + bias` (the bias per output channel).
pub fn conv2d(
    b: &mut Builder,
    x: Value,
    w: Value,
    bias: Option<Value>,
    attrs: Conv2d,
) -> Result<Value, String> {
    let y = b.op(Op::Conv2d(attrs), &[x, w]).map_err(te)?;
    match bias {
        Some(bias) => {
            let bias = per_channel(b, bias, 2)?;
            b.binary(BinaryOp::Add, y, bias).map_err(te)
        }
        None => Ok(y),
    }
}

/// Where a tensor's channels are.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Layout {
    /// `[n, c, h, w]` (torch; kiln's window ops).
    Nchw,
    /// `[n, h, w, c]` (TensorFlow's default).
    Nhwc,
}

const TO_NCHW: [u32; 4] = [0, 3, 1, 2];
const TO_NHWC: [u32; 4] = [0, 2, 3, 1];

/// `x` transposed by `perm`, or, when `x` is itself the inverse transpose
/// of some `v`, that `v`.
fn transpose(
    b: &mut Builder,
    x: Value,
    perm: [u32; 4],
    inverse: [u32; 4],
) -> Result<Value, String> {
    let node = b.graph().node(x);
    if node.op == Op::Transpose(inverse.to_vec()) {
        return Ok(node.args[0]);
    }
    b.op(Op::Transpose(perm.to_vec()), &[x]).map_err(te)
}

/// An NHWC tensor as NCHW.
pub fn to_nchw(b: &mut Builder, x: Value) -> Result<Value, String> {
    transpose(b, x, TO_NCHW, TO_NHWC)
}

/// An NCHW tensor as NHWC.
pub fn to_nhwc(b: &mut Builder, x: Value) -> Result<Value, String> {
    transpose(b, x, TO_NHWC, TO_NCHW)
}

/// The parameters of a batch normalization in inference.
pub struct BatchNorm {
    /// The scale, `None` without affine parameters (1).
    pub gamma: Option<Value>,
    /// The shift, `None` without affine parameters (0).
    pub beta: Option<Value>,
    /// The running mean.
    pub mean: Value,
    /// The running variance.
    pub var: Value,
    /// Added to the variance.
    pub eps: f64,
}

/// Batch normalization of `x` (channels where `layout` says) in inference:
/// `x * scale + shift` with
/// `scale = gamma / sqrt(var + eps)` and `shift = beta - mean * scale`,
/// written as graph ops on the parameters. After a convolution with
/// constant weights (and a constant bias, or none), the convolution is
/// written again instead, as `conv2d(x, w * scale) + (bias * scale +
/// shift)`: constant folding turns both into constants (torch's
/// `fuse_conv_bn_eval`), and the original convolution is left for
/// dead-code elimination.
pub fn batch_norm(
    b: &mut Builder,
    x: Value,
    p: &BatchNorm,
    layout: Layout,
) -> Result<Value, String> {
    let dtype = b.dtype(x).ok_or("batch norm of a selection")?;
    if !dtype.is_float() {
        return Err(format!("batch norm of {}, not floats", b.ty(x)));
    }
    let eps = konst(b, dtype, p.eps);
    let var = b.binary(BinaryOp::Add, p.var, eps).map_err(te)?;
    let denom = b.unary(UnaryOp::Sqrt, var).map_err(te)?;
    let gamma = match p.gamma {
        Some(g) => g,
        None => konst(b, dtype, 1.0),
    };
    let scale = b.binary(BinaryOp::Div, gamma, denom).map_err(te)?;
    let centered = b.binary(BinaryOp::Mul, p.mean, scale).map_err(te)?;
    let shift = match p.beta {
        Some(beta) => b.binary(BinaryOp::Sub, beta, centered).map_err(te)?,
        None => b.unary(UnaryOp::Neg, centered).map_err(te)?,
    };
    if let Some((input, w, attrs, bias)) = constant_conv(b, x, layout) {
        let scale_w = per_channel(b, scale, 3)?;
        let w = b.binary(BinaryOp::Mul, w, scale_w).map_err(te)?;
        let bias = match bias {
            Some(bias) => {
                let scaled = b.binary(BinaryOp::Mul, bias, scale).map_err(te)?;
                b.binary(BinaryOp::Add, scaled, shift).map_err(te)?
            }
            None => shift,
        };
        let y = conv2d(b, input, w, Some(bias), attrs)?;
        return match layout {
            Layout::Nchw => Ok(y),
            Layout::Nhwc => to_nhwc(b, y),
        };
    }
    // NHWC: a `[c]` vector broadcasts along the last axis as it is.
    let (scale, shift) = match layout {
        Layout::Nchw => (per_channel(b, scale, 2)?, per_channel(b, shift, 2)?),
        Layout::Nhwc => (scale, shift),
    };
    let y = b.binary(BinaryOp::Mul, x, scale).map_err(te)?;
    b.binary(BinaryOp::Add, y, shift).map_err(te)
}

/// `x` as `conv2d(input, w) (+ bias)` with constant weights and a constant
/// per-channel bias (as a vector or a scalar): its input, weights,
/// attributes, bias. NCHW: the convolution, plus the bias as [`conv2d`]
/// adds it (reshaped to `[c, 1, 1]`). NHWC: the convolution transposed to
/// NHWC, plus a `[c]` bias (TF's `BiasAdd`).
fn constant_conv(
    b: &Builder,
    x: Value,
    layout: Layout,
) -> Option<(Value, Value, Conv2d, Option<Value>)> {
    let g = b.graph();
    let is_const = |v: Value| matches!(g.node(v).op, Op::Tensor(_) | Op::Const(_));
    let vector = |v: Value| is_const(v) && b.ty(v).as_tensor().is_some_and(|t| t.shape.len() <= 1);
    let (inner, bias) = match &g.node(x).op {
        Op::Binary(BinaryOp::Add) => {
            let args = &g.node(x).args;
            let bias = match (&g.node(args[1]).op, layout) {
                (Op::Reshape(_), Layout::Nchw) => g.node(args[1]).args[0],
                (Op::Const(_), _) | (Op::Tensor(_), Layout::Nhwc) => args[1],
                _ => return None,
            };
            (args[0], Some(Some(bias).filter(|&v| vector(v))?))
        }
        _ => (x, None),
    };
    let conv = match layout {
        Layout::Nchw => inner,
        Layout::Nhwc if g.node(inner).op == Op::Transpose(TO_NHWC.to_vec()) => {
            g.node(inner).args[0]
        }
        Layout::Nhwc => return None,
    };
    let Op::Conv2d(attrs) = g.node(conv).op else {
        return None;
    };
    let (input, w) = (g.node(conv).args[0], g.node(conv).args[1]);
    is_const(w).then_some((input, w, attrs, bias))
}

/// Global average pooling of NCHW `x` to `[n, c, 1, 1]`: the mean over
/// rows and columns.
pub fn global_avg_pool(b: &mut Builder, x: Value) -> Result<Value, String> {
    b.op(
        Op::ReduceAxes {
            op: ReduceOp::Mean,
            axes: vec![2, 3],
            keepdim: true,
        },
        &[x],
    )
    .map_err(te)
}

/// Adaptive average pooling of NCHW `x` to `[oh, ow]`: global pooling for
/// `[1, 1]`, else average pooling with the window the extents divide into
/// (torch's windows are then all alike); other sizes are refused.
pub fn adaptive_avg_pool(b: &mut Builder, x: Value, out: [u64; 2]) -> Result<Value, String> {
    if out == [1, 1] {
        return global_avg_pool(b, x);
    }
    let (h, w) = (extent(b, x, 2), extent(b, x, 3));
    let (Some(h), Some(w)) = (h, w) else {
        return Err(format!("adaptive pooling of {}: unknown extents", b.ty(x)));
    };
    if out[0] == 0 || out[1] == 0 || h % out[0] != 0 || w % out[1] != 0 {
        return Err(format!(
            "unsupported: adaptive average pooling of {h}x{w} to {}x{} (kiln pools to 1x1 or to sizes that divide the input)",
            out[0], out[1]
        ));
    }
    let window = |n: u64| u32::try_from(n).map_err(|_| "a window too large".to_string());
    let kernel = [window(h / out[0])?, window(w / out[1])?];
    let pool = kiln_ir::Pool2d {
        kind: kiln_ir::PoolKind::Avg,
        kernel,
        stride: kernel,
        padding: [0; 4],
        dilation: [1, 1],
        ceil_mode: false,
        count_include_pad: false,
    };
    b.op(Op::Pool2d(pool), &[x]).map_err(te)
}

/// TensorFlow's `SAME` padding of one axis: `(before, after)`, the extra
/// one after.
pub fn same_padding(extent: u64, kernel: u64, stride: u64, dilation: u64) -> (u64, u64) {
    let span = kernel.saturating_sub(1) * dilation + 1;
    let out = extent.div_ceil(stride.max(1));
    let total = ((out.saturating_sub(1)) * stride + span).saturating_sub(extent);
    (total / 2, total - total / 2)
}

#[cfg(test)]
mod tests {
    #[test]
    fn same_padding_puts_the_extra_row_after() {
        assert_eq!(super::same_padding(5, 3, 1, 1), (1, 1));
        assert_eq!(super::same_padding(6, 3, 2, 1), (0, 1));
        assert_eq!(super::same_padding(7, 2, 2, 1), (0, 1));
        assert_eq!(super::same_padding(8, 1, 2, 1), (0, 0));
        assert_eq!(super::same_padding(5, 3, 1, 2), (2, 2));
    }
}
