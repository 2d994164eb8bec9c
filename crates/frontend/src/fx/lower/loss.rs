//! The losses and elementwise backward ops of everyday training graphs, as
//! torch's CPU kernels compute them (`aten/src/ATen/native/Loss.cpp`,
//! `BinaryOps`, `Activation`): `mse_loss` and its backward,
//! `binary_cross_entropy` and its backward, `binary_cross_entropy_with_logits`,
//! `xlogy`, `sgn`/`sign`, `masked_fill`, `softplus_backward`, smooth L1 and
//! Huber losses and their backward, `hardswish_backward`, `mish_backward`.

use super::{lit, te, Fx, Operand};
use crate::eltwise::konst;
use crate::fx::text::{Arg, Node};
use kiln_ir::{BinaryOp, CmpOp, DType, ReduceOp, UnaryOp, Value};

impl Fx<'_> {
    /// A float tensor argument, of `dtype` when given (a number or tensor
    /// of another dtype is converted).
    fn float_at(
        &mut self,
        node: &Node,
        idx: usize,
        key: &str,
        dtype: Option<DType>,
    ) -> Result<Value, String> {
        let o = self.operand_at(node, idx, key)?;
        let d = dtype.unwrap_or_else(|| self.result_type(&[o]));
        if !d.is_float() {
            return Err(format!("`{key}` must be a float tensor, not {d}"));
        }
        self.tensor(o, d)
    }

    /// A loss's input (argument `at`, a float tensor) and target (the next,
    /// in the input's dtype), and that dtype.
    fn input_and_target(
        &mut self,
        node: &Node,
        at: usize,
    ) -> Result<(Value, Value, DType), String> {
        let x = self.float_at(node, at, "self", None)?;
        let d = self.b.dtype(x).expect("a tensor");
        let t = self.float_at(node, at + 1, "target", Some(d))?;
        Ok((x, t, d))
    }

    /// A loss's elements reduced as `reduction` asks: 0 none, 1 the mean,
    /// 2 the sum (torch's `Reduction` enum, the last argument at `idx`).
    fn reduced(&mut self, node: &Node, idx: usize, loss: Value) -> Result<Value, String> {
        let rank = self.shape_of(loss).len() as u32;
        let axes: Vec<u32> = (0..rank).collect();
        match self.int_at(node, idx, "reduction", Some(1))? {
            0 => Ok(loss),
            _ if rank == 0 => Ok(loss),
            1 => self.reduce_axes(ReduceOp::Mean, loss, axes, false),
            2 => self.reduce_axes(ReduceOp::Sum, loss, axes, false),
            r => Err(format!("`reduction` must be 0, 1 or 2, not {r}")),
        }
    }

    /// `1 / numel` (the mean) or 1 (the sum, or each element), for a
    /// backward's `reduction` at `idx`.
    fn reduction_scale(&self, node: &Node, idx: usize, x: Value) -> Result<f64, String> {
        let numel = layout_numel(&self.shape_of(x))?;
        match self.int_at(node, idx, "reduction", Some(1))? {
            1 => Ok(1.0 / numel as f64),
            0 | 2 => Ok(1.0),
            r => Err(format!("`reduction` must be 0, 1 or 2, not {r}")),
        }
    }

    /// `mse_loss(self, target, reduction=1)`: `(self - target)²`, reduced.
    pub(super) fn mse_loss(&mut self, node: &Node) -> Result<Value, String> {
        let (x, t, _) = self.input_and_target(node, 0)?;
        let diff = self.b.binary(BinaryOp::Sub, x, t).map_err(te)?;
        let sq = self.b.binary(BinaryOp::Mul, diff, diff).map_err(te)?;
        self.reduced(node, 2, sq)
    }

    /// `mse_loss_backward(grad, self, target, reduction)`: `norm * (self -
    /// target) * grad`, `norm` 2 (or `2 / numel` for the mean), in that
    /// order, as torch's kernel computes it.
    pub(super) fn mse_loss_backward(&mut self, node: &Node) -> Result<Value, String> {
        let g = self.float_at(node, 0, "grad_output", None)?;
        let (x, t, d) = self.input_and_target(node, 1)?;
        let g = self.tensor(Operand::Tensor(g), d)?;
        let norm = 2.0 * self.reduction_scale(node, 3, x)?;
        let norm = konst(&mut self.b, d, norm);
        let diff = self.b.binary(BinaryOp::Sub, x, t).map_err(te)?;
        let scaled = self.b.binary(BinaryOp::Mul, norm, diff).map_err(te)?;
        self.b.binary(BinaryOp::Mul, scaled, g).map_err(te)
    }

    /// `binary_cross_entropy(self, target, weight=None, reduction=1)`:
    /// `(t - 1) * max(log1p(-x), -100) - t * max(log(x), -100)`, times the
    /// weight, reduced. (torch fails a call whose input lies outside
    /// [0, 1]; kiln computes it: a NaN where the logarithm has none.)
    pub(super) fn binary_cross_entropy(&mut self, node: &Node) -> Result<Value, String> {
        let (x, t, d) = self.input_and_target(node, 0)?;
        let b = &mut self.b;
        let (one, floor) = (konst(b, d, 1.0), konst(b, d, -100.0));
        let neg = b.unary(UnaryOp::Neg, x).map_err(te)?;
        let l1 = b.unary(UnaryOp::Log1p, neg).map_err(te)?;
        let l1 = b.binary(BinaryOp::Max, l1, floor).map_err(te)?;
        let l0 = b.unary(UnaryOp::Log, x).map_err(te)?;
        let l0 = b.binary(BinaryOp::Max, l0, floor).map_err(te)?;
        let tm1 = b.binary(BinaryOp::Sub, t, one).map_err(te)?;
        let a = b.binary(BinaryOp::Mul, tm1, l1).map_err(te)?;
        let c = b.binary(BinaryOp::Mul, t, l0).map_err(te)?;
        let loss = b.binary(BinaryOp::Sub, a, c).map_err(te)?;
        let loss = self.weighted(node, 2, loss, d)?;
        self.reduced(node, 3, loss)
    }

    /// `binary_cross_entropy_backward(grad, self, target, weight,
    /// reduction)`: `grad * (x - t) / max((1 - x) * x, 1e-12)`, times the
    /// weight, divided by `numel` for the mean.
    pub(super) fn binary_cross_entropy_backward(&mut self, node: &Node) -> Result<Value, String> {
        let g = self.float_at(node, 0, "grad_output", None)?;
        let (x, t, d) = self.input_and_target(node, 1)?;
        let g = self.tensor(Operand::Tensor(g), d)?;
        let scale = self.reduction_scale(node, 4, x)?;
        let b = &mut self.b;
        let (one, eps) = (konst(b, d, 1.0), konst(b, d, 1e-12));
        let diff = b.binary(BinaryOp::Sub, x, t).map_err(te)?;
        let num = b.binary(BinaryOp::Mul, g, diff).map_err(te)?;
        let omx = b.binary(BinaryOp::Sub, one, x).map_err(te)?;
        let den = b.binary(BinaryOp::Mul, omx, x).map_err(te)?;
        let den = b.binary(BinaryOp::Max, den, eps).map_err(te)?;
        let grad = b.binary(BinaryOp::Div, num, den).map_err(te)?;
        // The weight first, then the mean's division, as torch does.
        let grad = self.weighted(node, 3, grad, d)?;
        if scale == 1.0 {
            return Ok(grad);
        }
        let n = konst(&mut self.b, d, 1.0 / scale);
        self.b.binary(BinaryOp::Div, grad, n).map_err(te)
    }

    /// `binary_cross_entropy_with_logits(self, target, weight=None,
    /// pos_weight=None, reduction=1)`: `(1 - t) * x - log_sigmoid(x)`
    /// (`log_sigmoid(x)` scaled by `(pos_weight - 1) * t + 1` when given),
    /// `log_sigmoid(x) = min(x, 0) - log1p(exp(-|x|))`, times the weight,
    /// reduced.
    pub(super) fn bce_with_logits(&mut self, node: &Node) -> Result<Value, String> {
        let (x, t, d) = self.input_and_target(node, 0)?;
        let pos = match self.arg(node, 3, "pos_weight") {
            None | Some(Arg::None) => None,
            Some(_) => Some(self.float_at(node, 3, "pos_weight", Some(d))?),
        };
        let b = &mut self.b;
        let (one, zero) = (konst(b, d, 1.0), konst(b, d, 0.0));
        let min = b.binary(BinaryOp::Min, x, zero).map_err(te)?;
        let abs = b.unary(UnaryOp::Abs, x).map_err(te)?;
        let nabs = b.unary(UnaryOp::Neg, abs).map_err(te)?;
        let z = b.unary(UnaryOp::Exp, nabs).map_err(te)?;
        let l = b.unary(UnaryOp::Log1p, z).map_err(te)?;
        let mut log_sig = b.binary(BinaryOp::Sub, min, l).map_err(te)?;
        if let Some(p) = pos {
            let pm1 = b.binary(BinaryOp::Sub, p, one).map_err(te)?;
            let w = b.binary(BinaryOp::Mul, pm1, t).map_err(te)?;
            let w = b.binary(BinaryOp::Add, w, one).map_err(te)?;
            log_sig = b.binary(BinaryOp::Mul, log_sig, w).map_err(te)?;
        }
        let omt = b.binary(BinaryOp::Sub, one, t).map_err(te)?;
        let a = b.binary(BinaryOp::Mul, omt, x).map_err(te)?;
        let loss = b.binary(BinaryOp::Sub, a, log_sig).map_err(te)?;
        let loss = self.weighted(node, 2, loss, d)?;
        self.reduced(node, 4, loss)
    }

    /// `v` times the optional `weight` argument at `idx`.
    fn weighted(&mut self, node: &Node, idx: usize, v: Value, d: DType) -> Result<Value, String> {
        match self.arg(node, idx, "weight") {
            None | Some(Arg::None) => Ok(v),
            Some(_) => {
                let w = self.float_at(node, idx, "weight", Some(d))?;
                self.b.binary(BinaryOp::Mul, v, w).map_err(te)
            }
        }
    }

    /// `xlogy(self, other)`: `x * log(y)`, 0 where `x` is 0, NaN where `y`
    /// is NaN (torch's order of those tests).
    pub(super) fn xlogy(&mut self, node: &Node) -> Result<Value, String> {
        let (v, d) = self.promoted(node, 2)?;
        let d = if d.is_float() { d } else { DType::F32 };
        let (x, y) = (
            self.tensor(Operand::Tensor(v[0]), d)?,
            self.tensor(Operand::Tensor(v[1]), d)?,
        );
        let b = &mut self.b;
        let (zero, nan) = (konst(b, d, 0.0), konst(b, d, f64::NAN));
        let log = b.unary(UnaryOp::Log, y).map_err(te)?;
        let prod = b.binary(BinaryOp::Mul, x, log).map_err(te)?;
        let is_zero = b.compare(CmpOp::Eq, x, zero).map_err(te)?;
        let r = b.select(is_zero, zero, prod).map_err(te)?;
        let y_nan = b.compare(CmpOp::Ne, y, y).map_err(te)?;
        b.select(y_nan, nan, r).map_err(te)
    }

    /// `sgn(x)`, `sign(x)` of a real tensor: `(0 < x) - (x < 0)`, so 0 for
    /// zeros of both signs and for NaN, as torch's kernel computes it.
    pub(super) fn sign(&mut self, node: &Node) -> Result<Value, String> {
        let o = self.operand_at(node, 0, "input")?;
        let d = self.result_type(&[o]);
        if d == DType::Bool {
            return Err("`sign` of a bool tensor".into());
        }
        let x = self.tensor(o, d)?;
        let b = &mut self.b;
        let zero = konst(b, d, 0.0);
        let pos = b.compare(CmpOp::Lt, zero, x).map_err(te)?;
        let neg = b.compare(CmpOp::Lt, x, zero).map_err(te)?;
        let pos = b.cast(pos, d).map_err(te)?;
        let neg = b.cast(neg, d).map_err(te)?;
        b.binary(BinaryOp::Sub, pos, neg).map_err(te)
    }

    /// `masked_fill(self, mask, value)`: `value` (a number or a 0-D
    /// tensor, in `self`'s dtype) where `mask` is true, else `self`.
    pub(super) fn masked_fill(&mut self, node: &Node) -> Result<Value, String> {
        let x = self.tensor_at(node, 0, "self")?;
        let d = self.b.dtype(x).expect("a tensor");
        let mask = self.truth(node, 1)?;
        let value = match self.arg(node, 2, "value") {
            Some(Arg::Node(_) | Arg::Name(_)) => {
                let v = self.tensor_at(node, 2, "value")?;
                if !self.shape_of(v).is_empty() {
                    return Err("`masked_fill` takes a 0-D tensor as its value".into());
                }
                Operand::Tensor(v)
            }
            Some(a) => lit(a).ok_or_else(|| format!("`value` must be a number, not {a:?}"))?,
            None => return Err("`masked_fill` without a value".into()),
        };
        let value = self.tensor(value, d)?;
        self.b.select(mask, value, x).map_err(te)
    }

    /// `softplus_backward(grad, self, beta, threshold)`: `grad * z / (z +
    /// 1)` with `z = exp(x * beta)`, or `grad` where `x * beta` is above
    /// the threshold (torch's kernel).
    pub(super) fn softplus_backward(&mut self, node: &Node) -> Result<Value, String> {
        let x = self.float_at(node, 1, "self", None)?;
        let d = self.b.dtype(x).expect("a tensor");
        let g = self.float_at(node, 0, "grad_output", Some(d))?;
        let beta = self.number_at(node, 2, "beta", 1.0)?;
        let threshold = self.number_at(node, 3, "threshold", 20.0)?;
        let b = &mut self.b;
        let (beta, threshold, one) = (konst(b, d, beta), konst(b, d, threshold), konst(b, d, 1.0));
        let bx = b.binary(BinaryOp::Mul, x, beta).map_err(te)?;
        let z = b.unary(UnaryOp::Exp, bx).map_err(te)?;
        let gz = b.binary(BinaryOp::Mul, g, z).map_err(te)?;
        let zp1 = b.binary(BinaryOp::Add, z, one).map_err(te)?;
        let soft = b.binary(BinaryOp::Div, gz, zp1).map_err(te)?;
        let linear = b.compare(CmpOp::Gt, bx, threshold).map_err(te)?;
        b.select(linear, g, soft).map_err(te)
    }

    /// `smooth_l1_loss(self, target, reduction=1, beta=1)`: `0.5 * z * z /
    /// beta` where `z = |x - t|` is below `beta`, else `z - 0.5 * beta`;
    /// `huber_loss(self, target, reduction=1, delta=1)`: `0.5 * z * z`, else
    /// `delta * (z - 0.5 * delta)`; reduced. A `beta` of 0 (L1) is refused.
    pub(super) fn smooth_loss(&mut self, op: &str, node: &Node) -> Result<Value, String> {
        let huber = op == "huber_loss";
        let (x, t, d) = self.input_and_target(node, 0)?;
        let k = self.smooth_param(node, huber)?;
        let b = &mut self.b;
        let (kc, half) = (konst(b, d, k), konst(b, d, 0.5));
        let diff = b.binary(BinaryOp::Sub, x, t).map_err(te)?;
        let z = b.unary(UnaryOp::Abs, diff).map_err(te)?;
        let hz = b.binary(BinaryOp::Mul, half, z).map_err(te)?;
        let mut quad = b.binary(BinaryOp::Mul, hz, z).map_err(te)?;
        let hk = b.binary(BinaryOp::Mul, half, kc).map_err(te)?;
        let mut lin = b.binary(BinaryOp::Sub, z, hk).map_err(te)?;
        if huber {
            lin = b.binary(BinaryOp::Mul, kc, lin).map_err(te)?;
        } else {
            quad = b.binary(BinaryOp::Div, quad, kc).map_err(te)?;
        }
        let inside = b.compare(CmpOp::Lt, z, kc).map_err(te)?;
        let loss = b.select(inside, quad, lin).map_err(te)?;
        self.reduced(node, 2, loss)
    }

    /// `smooth_l1_loss_backward(grad, self, target, reduction, beta)` and
    /// `huber_loss_backward(grad, self, target, reduction, delta)`, with `d
    /// = x - t` and `norm` 1 (or `1 / numel` for the mean): `∓norm * g`
    /// (times `delta` for Huber) where `d` is at most `-k` or at least `k`,
    /// else `norm * d * g / beta` (Huber: `norm * d * g`).
    pub(super) fn smooth_loss_backward(&mut self, op: &str, node: &Node) -> Result<Value, String> {
        let huber = op == "huber_loss_backward";
        let g = self.float_at(node, 0, "grad_output", None)?;
        let (x, t, d) = self.input_and_target(node, 1)?;
        let g = self.tensor(Operand::Tensor(g), d)?;
        let norm = self.reduction_scale(node, 3, x)?;
        let k = self.smooth_param(node, huber)?;
        let b = &mut self.b;
        let (kc, nk, norm, nnorm) = (
            konst(b, d, k),
            konst(b, d, -k),
            konst(b, d, norm),
            konst(b, d, -norm),
        );
        let diff = b.binary(BinaryOp::Sub, x, t).map_err(te)?;
        let mut low = b.binary(BinaryOp::Mul, nnorm, g).map_err(te)?;
        let mut high = b.binary(BinaryOp::Mul, norm, g).map_err(te)?;
        let nd = b.binary(BinaryOp::Mul, norm, diff).map_err(te)?;
        let mut mid = b.binary(BinaryOp::Mul, nd, g).map_err(te)?;
        if huber {
            low = b.binary(BinaryOp::Mul, low, kc).map_err(te)?;
            high = b.binary(BinaryOp::Mul, high, kc).map_err(te)?;
        } else {
            mid = b.binary(BinaryOp::Div, mid, kc).map_err(te)?;
        }
        let below = b.compare(CmpOp::Le, diff, nk).map_err(te)?;
        let above = b.compare(CmpOp::Ge, diff, kc).map_err(te)?;
        let r = b.select(above, high, mid).map_err(te)?;
        b.select(below, low, r).map_err(te)
    }

    /// `beta` (smooth L1, argument 3) or `delta` (Huber), positive.
    fn smooth_param(&self, node: &Node, huber: bool) -> Result<f64, String> {
        let key = if huber { "delta" } else { "beta" };
        let idx = if node.target.contains("backward") {
            4
        } else {
            3
        };
        let k = self.number_at(node, idx, key, 1.0)?;
        if k.is_nan() || k <= 0.0 {
            return Err(format!(
                "unsupported: `{key}` of {k} (kiln takes a positive one)"
            ));
        }
        Ok(k)
    }

    /// `hardswish_backward(grad, self)`: 0 below -3, `g * (x / 3 + 0.5)` up
    /// to 3, `g` above; `mish_backward(grad, self)`: `g * (ts + x * s * (1 -
    /// ts²))`, `s = 1 / (1 + exp(-x))`, `ts = tanh(log1p(exp(x)))` (torch's
    /// kernels).
    pub(super) fn activation_backward(&mut self, op: &str, node: &Node) -> Result<Value, String> {
        let x = self.float_at(node, 1, "self", None)?;
        let d = self.b.dtype(x).expect("a tensor");
        let g = self.float_at(node, 0, "grad_output", Some(d))?;
        let b = &mut self.b;
        let one = konst(b, d, 1.0);
        if op == "hardswish_backward" {
            let (three, nthree, half, zero) = (
                konst(b, d, 3.0),
                konst(b, d, -3.0),
                konst(b, d, 0.5),
                konst(b, d, 0.0),
            );
            let x3 = b.binary(BinaryOp::Div, x, three).map_err(te)?;
            let slope = b.binary(BinaryOp::Add, x3, half).map_err(te)?;
            let mid = b.binary(BinaryOp::Mul, g, slope).map_err(te)?;
            let below = b.compare(CmpOp::Lt, x, nthree).map_err(te)?;
            let upto = b.compare(CmpOp::Le, x, three).map_err(te)?;
            let r = b.select(upto, mid, g).map_err(te)?;
            return b.select(below, zero, r).map_err(te);
        }
        let nx = b.unary(UnaryOp::Neg, x).map_err(te)?;
        let e = b.unary(UnaryOp::Exp, nx).map_err(te)?;
        let den = b.binary(BinaryOp::Add, one, e).map_err(te)?;
        let s = b.binary(BinaryOp::Div, one, den).map_err(te)?;
        let ex = b.unary(UnaryOp::Exp, x).map_err(te)?;
        let sp = b.unary(UnaryOp::Log1p, ex).map_err(te)?;
        let ts = b.unary(UnaryOp::Tanh, sp).map_err(te)?;
        let ts2 = b.binary(BinaryOp::Mul, ts, ts).map_err(te)?;
        let omt = b.binary(BinaryOp::Sub, one, ts2).map_err(te)?;
        let xs = b.binary(BinaryOp::Mul, x, s).map_err(te)?;
        let xso = b.binary(BinaryOp::Mul, xs, omt).map_err(te)?;
        let sum = b.binary(BinaryOp::Add, ts, xso).map_err(te)?;
        b.binary(BinaryOp::Mul, g, sum).map_err(te)
    }
}

/// The number of elements of a fixed shape.
fn layout_numel(shape: &[kiln_ir::Dim]) -> Result<u64, String> {
    shape.iter().try_fold(1u64, |n, d| match d {
        kiln_ir::Dim::Fixed(k) => Ok(n.saturating_mul(*k)),
        kiln_ir::Dim::Sym(s) => Err(format!("a mean over a symbolic extent `{s}`")),
    })
}
