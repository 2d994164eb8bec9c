//! The convolutional ops of torch.fx, in their functional (`F.conv2d`,
//! `F.batch_norm`, `F.max_pool2d`, `F.avg_pool2d`,
//! `F.adaptive_avg_pool2d`, and the modules [`crate::fx::modules`] turns
//! into those calls) and ATen spellings (`aten.convolution`,
//! `aten.native_batch_norm` and `aten._native_batch_norm_legit_no_training`,
//! whose saved statistics kiln does not compute, `aten.max_pool2d_with_indices`,
//! `aten.avg_pool2d`, `aten._adaptive_avg_pool2d`), and the backward ops of
//! training graphs (`aten.convolution_backward`,
//! `aten.max_pool2d_with_indices_backward`, `aten.avg_pool2d_backward`),
//! built as `kiln_ir::grad` differentiates. torch's defaults and argument forms (an int
//! or a pair, `padding='same'`, an empty ATen stride meaning the kernel)
//! are read here; the shapes are kiln's typing rules.

use super::{Fx, Operand};
use crate::cnn::{self, BatchNorm};
use crate::fx::text::{Arg, Node};
use kiln_ir::{Conv2d, DType, Op, Pool2d, PoolKind, Value};

/// A pair of ints from an int or a sequence of one or two (`3`, `(3, 3)`,
/// `[2]`), each at least `min`.
fn pair(
    arg: Option<&Arg>,
    key: &str,
    default: Option<[u32; 2]>,
    min: u32,
) -> Result<[u32; 2], String> {
    let int = |a: &Arg| match a {
        Arg::Int(k) => u32::try_from(*k).ok().filter(|&k| k >= min),
        _ => None,
    };
    let bad = || format!("`{key}` must be an int of at least {min} or a pair of them, not {arg:?}");
    match arg {
        None | Some(Arg::None) => default.ok_or_else(|| format!("missing `{key}`")),
        Some(Arg::Seq(items)) if items.is_empty() => default.ok_or_else(bad),
        Some(Arg::Seq(items)) => match items.as_slice() {
            [a] => int(a).map(|a| [a, a]).ok_or_else(bad),
            [a, b] => Ok([int(a).ok_or_else(bad)?, int(b).ok_or_else(bad)?]),
            _ => Err(bad()),
        },
        Some(a) => int(a).map(|a| [a, a]).ok_or_else(bad),
    }
}

pub(super) fn flag(arg: Option<&Arg>, key: &str, default: bool) -> Result<bool, String> {
    match arg {
        None | Some(Arg::None) => Ok(default),
        Some(Arg::Bool(b)) => Ok(*b),
        Some(other) => Err(format!("`{key}` must be True or False, not {other:?}")),
    }
}

impl Fx<'_> {
    /// A tensor parameter: a node, a module's parameter by name (`0.weight`,
    /// as [`crate::fx::modules`] passes them), or `None`.
    fn param(&mut self, node: &Node, idx: usize, key: &str) -> Result<Option<Value>, String> {
        match self.arg(node, idx, key) {
            None | Some(Arg::None) => Ok(None),
            Some(Arg::Name(name)) => {
                let name = name.clone();
                self.weight(&name).map(Some)
            }
            Some(_) => match self.operand_at(node, idx, key)? {
                Operand::Tensor(v) => Ok(Some(v)),
                other => Err(format!("`{key}` must be a tensor, not {other:?}")),
            },
        }
    }

    fn required(&mut self, node: &Node, idx: usize, key: &str) -> Result<Value, String> {
        self.param(node, idx, key)?
            .ok_or_else(|| format!("missing `{key}`"))
    }

    /// `conv2d` (F.conv2d, aten.conv2d, an `nn.Conv2d`) and
    /// `aten.convolution`.
    pub(super) fn conv(&mut self, op: &str, node: &Node) -> Result<Value, String> {
        let x = self.required(node, 0, "input")?;
        let w = self.required(node, 1, "weight")?;
        let bias = self.param(node, 2, "bias")?;
        let groups_at = if op == "convolution" { 8 } else { 6 };
        if op == "convolution" && flag(self.arg(node, 6, "transposed"), "transposed", false)? {
            return Err("unsupported: transposed convolution".to_string());
        }
        if let Some(mode) = node.kwargs.iter().find(|(k, _)| k == "padding_mode") {
            if !matches!(&mode.1, Arg::Str(m) if m == "zeros") {
                return Err(format!(
                    "unsupported: padding_mode {:?} (kiln pads with zeros)",
                    mode.1
                ));
            }
        }
        let stride = pair(self.arg(node, 3, "stride"), "stride", Some([1, 1]), 1)?;
        let dilation = pair(self.arg(node, 5, "dilation"), "dilation", Some([1, 1]), 1)?;
        let groups = match self.arg(node, groups_at, "groups") {
            None | Some(Arg::None) => 1,
            Some(Arg::Int(g)) if *g >= 1 => u32::try_from(*g).map_err(|_| "too many groups")?,
            Some(other) => return Err(format!("`groups` must be a positive int, not {other:?}")),
        };
        // `padding='same'` in a call; `padding=same` in a module's repr.
        let named = match self.arg(node, 4, "padding") {
            Some(Arg::Str(s) | Arg::Name(s)) => Some(s.as_str()),
            _ => None,
        };
        let padding = match named {
            Some("valid") => [0; 4],
            Some("same") => {
                // torch's 'same' (stride 1 only): the extra row or column after.
                if stride != [1, 1] {
                    return Err("`padding='same'` needs stride 1".to_string());
                }
                let k = |axis| match self.shape_of(w).get(axis) {
                    Some(kiln_ir::Dim::Fixed(k)) => Ok(*k),
                    _ => Err("weights of unknown shape".to_string()),
                };
                let [top, bottom] = same(k(2)?, dilation[0])?;
                let [left, right] = same(k(3)?, dilation[1])?;
                [top, bottom, left, right]
            }
            Some(s) => return Err(format!("unknown padding {s:?}")),
            None => {
                let [h, w] = pair(self.arg(node, 4, "padding"), "padding", Some([0, 0]), 0)?;
                [h, h, w, w]
            }
        };
        let attrs = Conv2d {
            stride,
            padding,
            dilation,
            groups,
        };
        cnn::conv2d(&mut self.b, x, w, bias, attrs)
    }

    /// `aten.convolution_backward(grad_output, input, weight, bias_sizes,
    /// stride, padding, dilation, transposed, output_padding, groups,
    /// output_mask)`: the gradients of the input, the weights and the bias
    /// (`output_mask` says which the graph uses; the others are a zero
    /// nobody reads), built as `kiln_ir::grad` builds a `conv2d`'s.
    pub(super) fn convolution_backward(&mut self, node: &Node) -> Result<Vec<Value>, String> {
        let g = self.required(node, 0, "grad_output")?;
        let x = self.required(node, 1, "input")?;
        let w = self.required(node, 2, "weight")?;
        if flag(self.arg(node, 7, "transposed"), "transposed", false)? {
            return Err("unsupported: the backward of a transposed convolution".to_string());
        }
        let stride = pair(self.arg(node, 4, "stride"), "stride", Some([1, 1]), 1)?;
        let [h, w_pad] = pair(self.arg(node, 5, "padding"), "padding", Some([0, 0]), 0)?;
        let dilation = pair(self.arg(node, 6, "dilation"), "dilation", Some([1, 1]), 1)?;
        let groups = match self.arg(node, 9, "groups") {
            None | Some(Arg::None) => 1,
            Some(Arg::Int(g)) if *g >= 1 => u32::try_from(*g).map_err(|_| "too many groups")?,
            Some(other) => return Err(format!("`groups` must be a positive int, not {other:?}")),
        };
        let mask: Vec<bool> = match self.arg(node, 10, "output_mask") {
            Some(Arg::Seq(items)) if items.len() == 3 => items
                .iter()
                .map(|a| match a {
                    Arg::Bool(b) => Ok(*b),
                    other => Err(format!("`output_mask` holds bools, not {other:?}")),
                })
                .collect::<Result<_, String>>()?,
            other => return Err(format!("`output_mask` must be three bools, not {other:?}")),
        };
        let attrs = Conv2d {
            stride,
            padding: [h, h, w_pad, w_pad],
            dilation,
            groups,
        };
        let [dx, dw] =
            kiln_ir::grad::conv2d_backward(&mut self.b, x, w, &attrs, g, [mask[0], mask[1]])
                .map_err(|e| e.message)?;
        let db = if mask[2] {
            let sum = Op::ReduceAxes {
                op: kiln_ir::ReduceOp::Sum,
                axes: vec![0, 2, 3],
                keepdim: false,
            };
            Some(self.b.op(sum, &[g]).map_err(|e| e.message)?)
        } else {
            None
        };
        let dtype = self.b.dtype(g).unwrap_or(DType::F32);
        let unused = self.b.constant(kiln_ir::Scalar::zero(dtype));
        Ok([dx, dw, db].map(|v| v.unwrap_or(unused)).to_vec())
    }

    /// `batch_norm` in inference: F.batch_norm(input, running_mean,
    /// running_var, weight, bias, training, momentum, eps) (and an
    /// `nn.BatchNorm2d`), or ATen's order (input, weight, bias,
    /// running_mean, running_var, training, momentum, eps) for
    /// `aten.batch_norm` and `aten.native_batch_norm`; the
    /// `_native_batch_norm_legit_no_training` form has no `training`.
    pub(super) fn batch_norm(&mut self, op: &str, node: &Node) -> Result<Value, String> {
        let aten = op != "batch_norm" || node.target.starts_with("torch.ops.aten.");
        let x = self.required(node, 0, "input")?;
        let (mean, var, gamma, beta) = if aten {
            (
                self.required(node, 3, "running_mean")?,
                self.required(node, 4, "running_var")?,
                self.param(node, 1, "weight")?,
                self.param(node, 2, "bias")?,
            )
        } else {
            (
                self.required(node, 1, "running_mean")?,
                self.required(node, 2, "running_var")?,
                self.param(node, 3, "weight")?,
                self.param(node, 4, "bias")?,
            )
        };
        let no_training = op == "_native_batch_norm_legit_no_training";
        if !no_training && flag(self.arg(node, 5, "training"), "training", false)? {
            return Err(
                "unsupported: batch norm in training mode (trace the model in eval mode)"
                    .to_string(),
            );
        }
        let eps_at = if no_training { 6 } else { 7 };
        let eps = self.number_at(node, eps_at, "eps", 1e-5)?;
        let p = BatchNorm {
            gamma,
            beta,
            mean,
            var,
            eps,
        };
        cnn::batch_norm(&mut self.b, x, &p, cnn::Layout::Nchw)
    }

    /// `max_pool2d` / `max_pool2d_with_indices` (input, kernel_size, stride,
    /// padding, dilation, ceil_mode) and `avg_pool2d` (input, kernel_size,
    /// stride, padding, ceil_mode, count_include_pad, divisor_override).
    pub(super) fn pool(&mut self, op: &str, node: &Node) -> Result<Value, String> {
        let x = self.required(node, 0, "input")?;
        let max = op != "avg_pool2d";
        if max {
            // (`return_indices=True` is a tuple: `Self::pool_with_indices`.)
            flag(self.arg(node, 6, "return_indices"), "return_indices", false)?;
        }
        let pool = self.pool_attrs(max, node, 0)?;
        self.b.op(Op::Pool2d(pool), &[x]).map_err(super::te)
    }

    /// A pool's attributes from its arguments after the input at `base`
    /// (0 for the pool, 1 for its backward, whose first is the gradient).
    fn pool_attrs(&self, max: bool, node: &Node, base: usize) -> Result<Pool2d, String> {
        let at = |i: usize, key: &str| self.arg(node, base + i, key);
        let kernel = pair(at(1, "kernel_size"), "kernel_size", None, 1)?;
        // `stride=None` (F) or `[]` (ATen) is the kernel.
        let stride = pair(at(2, "stride"), "stride", Some(kernel), 1)?;
        let [ph, pw] = pair(at(3, "padding"), "padding", Some([0, 0]), 0)?;
        let (dilation, ceil_at) = if max {
            (pair(at(4, "dilation"), "dilation", Some([1, 1]), 1)?, 5)
        } else {
            ([1, 1], 4)
        };
        let ceil_mode = flag(at(ceil_at, "ceil_mode"), "ceil_mode", false)?;
        let count_include_pad =
            !max && flag(at(5, "count_include_pad"), "count_include_pad", true)?;
        if !max && !matches!(at(6, "divisor_override"), None | Some(Arg::None)) {
            return Err("unsupported: avg_pool2d with divisor_override".to_string());
        }
        Ok(Pool2d {
            kind: if max { PoolKind::Max } else { PoolKind::Avg },
            kernel,
            stride,
            padding: [ph, ph, pw, pw],
            dilation,
            ceil_mode,
            count_include_pad,
        })
    }

    /// `max_pool2d_with_indices(input, kernel_size, stride, padding,
    /// dilation, ceil_mode)` and `max_pool2d(..., return_indices=True)`:
    /// the values and, for each, the index within
    /// its plane (`row * width + column`) of the tap the maximum came from:
    /// the one a training graph's backward reads, the tap `kiln_ir::grad`
    /// gives the derivative (torch's).
    pub(super) fn pool_with_indices(&mut self, node: &Node) -> Result<Vec<Value>, String> {
        let x = self.required(node, 0, "input")?;
        let pool = self.pool_attrs(true, node, 0)?;
        let y = self.b.op(Op::Pool2d(pool), &[x]).map_err(super::te)?;
        let indices =
            kiln_ir::grad::max_pool2d_indices(&mut self.b, x, y, &pool).map_err(|e| e.message)?;
        Ok(vec![y, indices])
    }

    /// `max_pool2d_with_indices_backward(grad_output, input, kernel_size,
    /// stride, padding, dilation, ceil_mode, indices)` and
    /// `avg_pool2d_backward(grad_output, input, kernel_size, stride,
    /// padding, ceil_mode, count_include_pad, divisor_override)`: the
    /// input's gradient as `kiln_ir::grad` builds a pool's; a max pool's
    /// from its `indices` (each window's `grad_output` added at its index,
    /// window by window, as torch's CPU kernel does), the ones
    /// [`Self::pool_with_indices`] gives or eager's forward returned.
    pub(super) fn pool_backward(&mut self, op: &str, node: &Node) -> Result<Value, String> {
        let g = self.required(node, 0, "grad_output")?;
        let x = self.required(node, 1, "input")?;
        let max = op.starts_with("max");
        let pool = self.pool_attrs(max, node, 1)?;
        let y = self.b.op(Op::Pool2d(pool), &[x]).map_err(super::te)?;
        if self.b.ty(g) != self.b.ty(y) {
            return Err(format!(
                "`grad_output` is {}, the pool's result {}",
                self.b.ty(g),
                self.b.ty(y)
            ));
        }
        if max {
            let indices = self.required(node, 7, "indices")?;
            let (want, got) = (self.b.ty(g).as_tensor(), self.b.ty(indices).as_tensor());
            if got.map(|t| (t.dtype, &t.shape)) != want.map(|t| (DType::I64, &t.shape)) {
                return Err(format!(
                    "`indices` is {}, not the pool's result shape in i64",
                    self.b.ty(indices)
                ));
            }
            return kiln_ir::grad::max_pool2d_backward(&mut self.b, (x, y), &pool, indices, g)
                .map_err(|e| e.message);
        }
        kiln_ir::grad::pool2d_backward(&mut self.b, x, y, &pool, g).map_err(|e| e.message)
    }

    /// `adaptive_avg_pool2d(input, output_size)`.
    pub(super) fn adaptive_avg_pool(&mut self, node: &Node) -> Result<Value, String> {
        let x = self.required(node, 0, "input")?;
        let [h, w] = pair(self.arg(node, 1, "output_size"), "output_size", None, 1)?;
        cnn::adaptive_avg_pool(&mut self.b, x, [u64::from(h), u64::from(w)])
    }
}

/// torch's `padding='same'` along one axis: `(before, after)`, the extra
/// one after.
fn same(kernel: u64, dilation: u32) -> Result<[u32; 2], String> {
    let total = kernel.saturating_sub(1) * u64::from(dilation);
    let before = u32::try_from(total / 2).map_err(|_| "a kernel too large")?;
    let after = u32::try_from(total - total / 2).map_err(|_| "a kernel too large")?;
    Ok([before, after])
}
