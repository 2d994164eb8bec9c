//! The ops transformers are built of, as the compositions of kiln ops torch
//! computes them by: lookups (`embedding`, `index_select`, `gather`: kiln's
//! `gather`, whose out-of-range index fails the call as torch's does) and
//! their gradients (`embedding_dense_backward`, `index_add`: kiln's
//! `index_add`),
//! `arange`, moments (`var_mean`, `var`, `std`), scaled dot-product
//! attention, `as_strided` where it is a view of a contiguous layout,
//! advanced indexing by integer tensors (`index.Tensor`), and the filled
//! tensors models make (`full`, `ones`, `new_ones`, `scalar_tensor`, ...).

use super::{lit, te, Fx, Operand};
use crate::fx::text::{Arg, Node};
use crate::layout;
use kiln_ir::{BinaryOp, CmpOp, DType, Dim, Op, ReduceOp, Scalar, TensorConst, UnaryOp, Value};
use std::sync::Arc;

/// The place of a keyword-only argument (none: [`Fx::arg`] finds it by
/// name).
const NONE: usize = usize::MAX;

/// The most elements an `arange` may make (it becomes a constant).
const MAX_ARANGE: u64 = 1 << 24;

impl Fx<'_> {
    /// An integer index tensor argument.
    fn index_at(&self, node: &Node, idx: usize, key: &str) -> Result<Value, String> {
        let v = self.tensor_at(node, idx, key)?;
        match self.b.dtype(v) {
            Some(DType::I32 | DType::I64) => Ok(v),
            other => Err(format!(
                "`{key}` must be an int32 or int64 tensor, not {}",
                other.map_or("a selection".to_string(), |d| d.to_string())
            )),
        }
    }

    fn gather(&mut self, table: Value, index: Value, axis: usize) -> Result<Value, String> {
        self.b
            .op(Op::Gather(axis as u32), &[table, index])
            .map_err(te)
    }

    /// `embedding(weight, indices)`: rows of `weight`; `index_select(x, dim,
    /// index)`: entries of `x` along `dim`; `gather(x, dim, index)`: torch's
    /// `take_along_dim`.
    pub(super) fn lookup_op(&mut self, op: &str, node: &Node) -> Result<Value, String> {
        match op {
            "embedding" => {
                // ATen's `embedding(weight, indices)`; torch's
                // `F.embedding(input, weight)`.
                let (weight, index) = if node.target.starts_with("torch.ops.aten.") {
                    (
                        self.tensor_at(node, 0, "weight")?,
                        self.index_at(node, 1, "indices")?,
                    )
                } else {
                    (
                        self.tensor_at(node, 1, "weight")?,
                        self.index_at(node, 0, "input")?,
                    )
                };
                if self.shape_of(weight).len() != 2 {
                    return Err("`embedding` takes a 2-D weight".into());
                }
                self.gather(weight, index, 0)
            }
            "index_select" => {
                let x = self.tensor_at(node, 0, "self")?;
                let axis =
                    layout::axis(self.int_at(node, 1, "dim", None)?, self.shape_of(x).len())?;
                let index = self.index_at(node, 2, "index")?;
                if self.shape_of(index).len() > 1 {
                    return Err("`index_select` takes a 0-D or 1-D index".into());
                }
                self.gather(x, index, axis)
            }
            _ => {
                let x = self.tensor_at(node, 0, "self")?;
                let rank = self.shape_of(x).len();
                let axis = layout::axis(self.int_at(node, 1, "dim", None)?, rank)?;
                let index = self.index_at(node, 2, "index")?;
                self.take_along(x, axis, index)
            }
        }
    }

    /// ATen's `embedding_dense_backward(grad_output, indices, num_weights,
    /// padding_idx, scale_grad_by_freq)`: each token's gradient row added
    /// to its weight's row, in token order from zero, as torch's CPU kernel
    /// does; tokens equal to `padding_idx` (when it is not negative) add
    /// nothing. With `scale_grad_by_freq`, each token's row is first scaled
    /// by `1 / count`, its token's count among all the indices (padding
    /// tokens counted too), as torch's kernel scales it.
    pub(super) fn embedding_backward(&mut self, node: &Node) -> Result<Value, String> {
        let g = self.tensor_at(node, 0, "grad_output")?;
        let index = self.index_at(node, 1, "indices")?;
        let rows = self.int_at(node, 2, "num_weights", None)?;
        let padding = self.int_at(node, 3, "padding_idx", Some(-1))?;
        let by_freq = super::cnn::flag(
            self.arg(node, 4, "scale_grad_by_freq"),
            "scale_grad_by_freq",
            false,
        )?;
        let (g_shape, at) = (self.shape_of(g), self.shape_of(index));
        let width = match g_shape.split_last() {
            Some((w, lead)) if lead == at.as_slice() => w.clone(),
            _ => {
                return Err(format!(
                    "`grad_output` is {}, not the shape of `indices` ({}) and a width",
                    self.b.ty(g),
                    self.b.ty(index)
                ))
            }
        };
        let rows = u64::try_from(rows)
            .ok()
            .filter(|&r| r > 0)
            .ok_or_else(|| format!("`num_weights` must be positive, not {rows}"))?;
        let dtype = self.b.dtype(g).expect("a tensor");
        let zero = self.b.constant(Scalar::zero(dtype));
        let mut g = g;
        if padding >= 0 {
            let is_pad = self.equals(index, padding)?;
            let is_pad = layout::unsqueeze(&mut self.b, is_pad, at.len())?;
            g = self.b.op(Op::Select, &[is_pad, zero, g]).map_err(te)?;
        }
        if by_freq {
            let one = self.b.constant(Scalar::one(dtype));
            let ones = layout::broadcast_to(&mut self.b, one, at.clone())?;
            let no_counts = layout::broadcast_to(&mut self.b, zero, vec![Dim::Fixed(rows)])?;
            let counts = self
                .b
                .op(Op::IndexAdd(0), &[no_counts, index, ones])
                .map_err(te)?;
            let count = self.b.op(Op::Gather(0), &[counts, index]).map_err(te)?;
            let scale = self.b.binary(BinaryOp::Div, one, count).map_err(te)?;
            let scale = layout::unsqueeze(&mut self.b, scale, at.len())?;
            g = self.b.binary(BinaryOp::Mul, g, scale).map_err(te)?;
        }
        let zeros = layout::broadcast_to(&mut self.b, zero, vec![Dim::Fixed(rows), width])?;
        self.b.op(Op::IndexAdd(0), &[zeros, index, g]).map_err(te)
    }

    /// Whether each element of the integer tensor `index` equals `k` (in
    /// its dtype).
    fn equals(&mut self, index: Value, k: i64) -> Result<Value, String> {
        let dtype = self.b.dtype(index).expect("a tensor");
        let k = self
            .b
            .constant(kiln_ir::semantics::cast(Scalar::I64(k), dtype));
        self.b.op(Op::Compare(CmpOp::Eq), &[index, k]).map_err(te)
    }

    /// `x` with `before` and `after` elements equal to the scalar `fill`
    /// around it along `axis`.
    fn pad_axis(
        &mut self,
        x: Value,
        axis: usize,
        (before, after): (u64, u64),
        fill: Value,
    ) -> Result<Value, String> {
        let mut parts = Vec::with_capacity(3);
        for (count, here) in [(before, false), (0, true), (after, false)] {
            if here {
                parts.push(x);
            } else if count > 0 {
                let mut shape = self.shape_of(x);
                shape[axis] = Dim::Fixed(count);
                parts.push(layout::broadcast_to(&mut self.b, fill, shape)?);
            }
        }
        layout::concat(&mut self.b, &parts, axis)
    }

    /// The parts of an `nll_loss_forward` or `nll_loss_backward` node
    /// (`nll_loss2d_…` with `spatial`): log-probabilities `x` (`[N, C]` or
    /// `[C]`; `[N, C, H, W]`), the targets (`[N]` or a scalar; `[N, H, W]`),
    /// with ignored ones made 0, whether each is kept (not `ignore_index`),
    /// each target's weight where `weight` is given, and the reduction (0
    /// none, 1 mean, 2 sum).
    fn nll_parts(
        &mut self,
        node: &Node,
        first: usize,
        spatial: bool,
    ) -> Result<(Value, Value, Value, Option<Value>, i64), String> {
        let x = self.tensor_at(node, first, "self")?;
        let target = self.index_at(node, first + 1, "target")?;
        let weight = match self.arg(node, first + 2, "weight") {
            None | Some(Arg::None) => None,
            Some(_) => Some(self.tensor_at(node, first + 2, "weight")?),
        };
        let reduction = self.int_at(node, first + 3, "reduction", Some(1))?;
        let ignore = self.int_at(node, first + 4, "ignore_index", Some(-100))?;
        if !(0..=2).contains(&reduction) {
            return Err(format!("`reduction` must be 0, 1 or 2, not {reduction}"));
        }
        let (xs, ts) = (self.shape_of(x), self.shape_of(target));
        // The targets' shape is the log-probabilities' without the classes.
        let fits = match (spatial, xs.len()) {
            (false, 1) => ts.is_empty(),
            (false, 2) | (true, 4) => {
                ts.len() + 1 == xs.len() && ts[0] == xs[0] && ts[1..] == xs[2..]
            }
            _ => false,
        };
        let dtype = self.b.dtype(x).expect("a tensor");
        if !fits || !dtype.is_float() {
            let (op, takes) = if spatial {
                ("nll_loss2d", "[N, C, H, W] log-probabilities and [N, H, W]")
            } else {
                ("nll_loss", "[N, C] or [C] log-probabilities and [N] or 0-D")
            };
            return Err(format!(
                "`{op}` takes float {takes} targets, got {} and {}",
                self.b.ty(x),
                self.b.ty(target)
            ));
        }
        let index_dtype = self.b.dtype(target).expect("a tensor");
        let ignored = self.equals(target, ignore)?;
        let zero = self.b.constant(Scalar::zero(index_dtype));
        let target = self.b.select(ignored, zero, target).map_err(te)?;
        let kept = self.b.op(Op::Unary(UnaryOp::Not), &[ignored]).map_err(te)?;
        let weight = match weight {
            Some(w) => Some(self.gather(w, target, 0)?),
            None => None,
        };
        Ok((x, target, kept, weight, reduction))
    }

    /// ATen's `nll_loss_forward(self, target, weight, reduction,
    /// ignore_index)`: the loss and the total weight. Each target's loss is
    /// `-x[i, t_i] * w_i` (`w_i` its class's weight, 1 without `weight`,
    /// 0 where `t_i` is `ignore_index`); the loss is their sum (reduction
    /// 2), their sum over the total weight (1, the mean), or each (0, with
    /// a total weight of 0). A target outside the classes fails the call,
    /// as torch's does. The sums run in row order (torch's cascade
    /// differs in the last bits). `nll_loss2d_forward` (`spatial`) is the
    /// same over each pixel's classes, `x[n, t, h, w]` for target
    /// `t = target[n, h, w]`.
    pub(super) fn nll_loss(&mut self, node: &Node, spatial: bool) -> Result<Vec<Value>, String> {
        let (x, target, kept, weight, reduction) = self.nll_parts(node, 0, spatial)?;
        let dtype = self.b.dtype(x).expect("a tensor");
        let rank = self.shape_of(x).len();
        let picked = if rank >= 2 {
            let at = layout::unsqueeze(&mut self.b, target, 1)?;
            let picked = self.take_along(x, 1, at)?;
            layout::squeeze(&mut self.b, picked, 1)?
        } else {
            self.gather(x, target, 0)?
        };
        let one = crate::eltwise::konst(&mut self.b, dtype, 1.0);
        let zero = crate::eltwise::konst(&mut self.b, dtype, 0.0);
        let w = match weight {
            Some(w) => w,
            None => one,
        };
        let w = self.b.select(kept, w, zero).map_err(te)?;
        let loss = self.b.binary(BinaryOp::Mul, picked, w).map_err(te)?;
        let loss = self.b.unary(UnaryOp::Neg, loss).map_err(te)?;
        if reduction == 0 {
            return Ok(vec![loss, zero]);
        }
        let (total, total_weight) = if rank >= 2 {
            let shape = self.shape_of(loss);
            let w = layout::broadcast_to(&mut self.b, w, shape)?;
            let axes: Vec<u32> = (0..rank as u32 - 1).collect();
            (
                self.reduce_axes(ReduceOp::Sum, loss, axes.clone(), false)?,
                self.reduce_axes(ReduceOp::Sum, w, axes, false)?,
            )
        } else {
            (loss, w)
        };
        if reduction == 2 {
            return Ok(vec![total, total_weight]);
        }
        let mean = self
            .b
            .binary(BinaryOp::Div, total, total_weight)
            .map_err(te)?;
        Ok(vec![mean, total_weight])
    }

    /// ATen's `nll_loss_backward(grad_output, self, target, weight,
    /// reduction, ignore_index, total_weight)`: zeros but at each row's
    /// target, `-(g / total_weight) * w_t` (the mean; `-g * w_t` for the
    /// sum, `-g_i * w_t` for each), as torch's CPU kernel computes it;
    /// `nll_loss2d_backward` (`spatial`) at each pixel's target class.
    pub(super) fn nll_loss_backward(
        &mut self,
        node: &Node,
        spatial: bool,
    ) -> Result<Value, String> {
        let g = self.tensor_at(node, 0, "grad_output")?;
        let (x, target, kept, weight, reduction) = self.nll_parts(node, 1, spatial)?;
        let dtype = self.b.dtype(x).expect("a tensor");
        let xs = self.shape_of(x);
        let g = if reduction == 1 {
            let total_weight = self.tensor_at(node, 6, "total_weight")?;
            self.b.binary(BinaryOp::Div, g, total_weight).map_err(te)?
        } else {
            g
        };
        let mut grad = self.b.unary(UnaryOp::Neg, g).map_err(te)?;
        if let Some(w) = weight {
            grad = self.b.binary(BinaryOp::Mul, w, grad).map_err(te)?;
        }
        let op = if spatial {
            "nll_loss2d_backward"
        } else {
            "nll_loss_backward"
        };
        // The classes: axis 1 of `[N, C]` and `[N, C, H, W]`, all of `[C]`.
        let class_axis = usize::from(xs.len() >= 2);
        let Dim::Fixed(classes) = xs[class_axis] else {
            return Err(format!("`{op}` over a symbolic number of classes"));
        };
        if classes > MAX_ARANGE {
            return Err(format!("`{op}` over {classes} classes: too many"));
        }
        let index_dtype = self.b.dtype(target).expect("a tensor");
        let ids: Vec<Scalar> = (0..classes as i64)
            .map(|c| kiln_ir::semantics::cast(Scalar::I64(c), index_dtype))
            .collect();
        // The classes as a column `[C, 1, 1]` against `[N, 1, H, W]`
        // targets; as `[C]` against `[N, 1]` or a scalar.
        let class_shape = if spatial {
            vec![classes, 1, 1]
        } else {
            vec![classes]
        };
        let classes = self.constant_tensor(index_dtype, class_shape, ids)?;
        let (target, kept, grad) = if xs.len() >= 2 {
            let target = layout::unsqueeze(&mut self.b, target, 1)?;
            let kept = layout::unsqueeze(&mut self.b, kept, 1)?;
            // A gradient per target (no reduction, or a weight) gains the
            // classes' axis too; a scalar one broadcasts as it is.
            let grad = if self.shape_of(grad).len() + 1 == xs.len() {
                layout::unsqueeze(&mut self.b, grad, 1)?
            } else {
                grad
            };
            (target, kept, grad)
        } else {
            (target, kept, grad)
        };
        let hit = self
            .b
            .op(Op::Compare(CmpOp::Eq), &[classes, target])
            .map_err(te)?;
        let hit = self.b.binary(BinaryOp::And, hit, kept).map_err(te)?;
        let zero = crate::eltwise::konst(&mut self.b, dtype, 0.0);
        let grad = self.b.select(hit, grad, zero).map_err(te)?;
        layout::broadcast_to(&mut self.b, grad, xs)
    }

    /// ATen's `_safe_softmax(x, dim)`: `softmax`, but 0 along a row whose
    /// every element is `-inf` (an attention row masked whole), where
    /// `softmax` gives NaN.
    pub(super) fn safe_softmax(&mut self, node: &Node) -> Result<Value, String> {
        let p = self.softmax(false, node)?;
        let x = self.tensor_at(node, 0, "self")?;
        let rank = self.shape_of(x).len();
        let axes = self.dims_arg(node, 1, rank)?;
        let max = self.reduce_axes(ReduceOp::Max, x, axes, true)?;
        let dtype = self.b.dtype(p).expect("a tensor");
        let max = self.b.cast(max, dtype).map_err(te)?;
        let neg_inf = crate::eltwise::konst(&mut self.b, dtype, f64::NEG_INFINITY);
        let masked = self
            .b
            .op(Op::Compare(CmpOp::Eq), &[max, neg_inf])
            .map_err(te)?;
        let zero = crate::eltwise::konst(&mut self.b, dtype, 0.0);
        self.b.select(masked, zero, p).map_err(te)
    }

    /// `tril(x, diagonal=0)` and `triu(x, diagonal=0)`: `x` where column
    /// minus row is at most (`tril`) or at least (`triu`) `diagonal` in
    /// the last two axes (fixed), else 0.
    pub(super) fn triangle(&mut self, op: &str, node: &Node) -> Result<Value, String> {
        let x = self.tensor_at(node, 0, "self")?;
        let diagonal = self.int_at(node, 1, "diagonal", Some(0))?;
        let shape = self.shape_of(x);
        let (Some(Dim::Fixed(rows)), Some(Dim::Fixed(cols))) = (
            shape.len().checked_sub(2).map(|a| shape[a].clone()),
            shape.last().cloned(),
        ) else {
            return Err(format!(
                "`{op}` takes at least 2 fixed trailing axes, got {}",
                self.b.ty(x)
            ));
        };
        if rows.saturating_mul(cols) > MAX_ARANGE {
            return Err(format!(
                "`{op}` of a {rows} x {cols} plane: too large a mask"
            ));
        }
        let lower = op == "tril";
        let keep: Vec<Scalar> = (0..rows as i64)
            .flat_map(|r| {
                (0..cols as i64).map(move |c| {
                    let off = c - r;
                    Scalar::Bool(if lower {
                        off <= diagonal
                    } else {
                        off >= diagonal
                    })
                })
            })
            .collect();
        let keep = self.constant_tensor(DType::Bool, vec![rows, cols], keep)?;
        let dtype = self.b.dtype(x).expect("a tensor");
        let zero = self.b.constant(Scalar::zero(dtype));
        self.b.select(keep, x, zero).map_err(te)
    }

    /// ATen's `constant_pad_nd(x, pad, value=0)`: `pad` holds a (before,
    /// after) pair for each trailing axis, the last axis first; a positive
    /// count adds elements equal to `value`, a negative one cuts them.
    pub(super) fn constant_pad(&mut self, node: &Node) -> Result<Value, String> {
        let mut x = self.tensor_at(node, 0, "self")?;
        let pad: Vec<i64> = match self.arg(node, 1, "pad") {
            Some(Arg::Seq(items)) => items
                .iter()
                .map(|a| match a {
                    Arg::Int(k) => Ok(*k),
                    other => Err(format!("`pad` holds {other:?}, not an int")),
                })
                .collect::<Result<_, String>>()?,
            other => return Err(format!("`pad` must be a list of ints, not {other:?}")),
        };
        let rank = self.shape_of(x).len();
        if !pad.len().is_multiple_of(2) || pad.len() / 2 > rank {
            return Err(format!(
                "`pad` of {} ints for a tensor of {rank} axes",
                pad.len()
            ));
        }
        let dtype = self.b.dtype(x).expect("a tensor");
        let value = match self.arg(node, 2, "value") {
            None | Some(Arg::None) => Operand::Int(0),
            Some(a) => lit(a).ok_or_else(|| format!("`value` must be a number, not {a:?}"))?,
        };
        let value = self.tensor(value, dtype)?;
        for (k, pair) in pad.chunks(2).enumerate() {
            let axis = rank - 1 - k;
            let (before, after) = (pair[0], pair[1]);
            let extent = layout::fixed_extent(&self.b, x, axis)? as i64;
            // (In i128: a count may be any i64, `i64::MIN` included.)
            let cut = |k: i64| i128::from(k.min(0)).abs();
            let (start, stop) = (cut(before), i128::from(extent) - cut(after));
            if start >= stop {
                return Err(format!("`pad` cuts every element of axis {axis}"));
            }
            if start > 0 || stop < i128::from(extent) {
                x = layout::slice_axis(&mut self.b, x, axis, (start as u64, stop as u64))?;
            }
            let grow = |k: i64| k.max(0) as u64;
            x = self.pad_axis(x, axis, (grow(before), grow(after)), value)?;
        }
        Ok(x)
    }

    /// ATen's `select_backward(grad, input_sizes, dim, index)` and
    /// `slice_backward(grad, input_sizes, dim, start, end, step)`: zeros of
    /// `input_sizes` with `grad` where the forward took it (a step above 1
    /// places it by an `index_add` at those positions).
    pub(super) fn take_backward(&mut self, op: &str, node: &Node) -> Result<Value, String> {
        let mut g = self.tensor_at(node, 0, "grad_output")?;
        let sizes: Vec<u64> = match self.arg(node, 1, "input_sizes") {
            Some(Arg::Seq(items)) => items
                .iter()
                .map(|a| match a {
                    Arg::Int(k) if *k > 0 => Ok(*k as u64),
                    other => Err(format!("`input_sizes` holds {other:?}, not a positive int")),
                })
                .collect::<Result<_, String>>()?,
            other => {
                return Err(format!(
                    "`input_sizes` must be a list of ints, not {other:?}"
                ))
            }
        };
        let axis = layout::axis(self.int_at(node, 2, "dim", None)?, sizes.len())?;
        let extent = sizes[axis] as i64;
        // Python's reading of a negative index or bound, clamped as a
        // slice's bounds are.
        let wrap = |k: i64| if k < 0 { k + extent } else { k };
        let (start, stop, step) = if op == "select_backward" {
            let index = wrap(self.int_at(node, 3, "index", None)?);
            if !(0..extent).contains(&index) {
                return Err(format!("`index` {index} outside an axis of {extent}"));
            }
            g = layout::unsqueeze(&mut self.b, g, axis)?;
            (index, index + 1, 1)
        } else {
            let step = self.int_at(node, 5, "step", Some(1))?;
            if step <= 0 {
                return Err(format!("`step` must be positive, not {step}"));
            }
            let start = wrap(self.int_at(node, 3, "start", Some(0))?).clamp(0, extent);
            let stop = wrap(self.int_at(node, 4, "end", Some(extent))?).clamp(start, extent);
            (start, stop, step)
        };
        // The positions the forward took: `start, start + step, … < stop`
        // (counted without overflow for any step).
        let taken = if stop > start {
            (stop - start - 1) / step + 1
        } else {
            0
        };
        let want: Vec<Dim> = sizes
            .iter()
            .enumerate()
            .map(|(a, &n)| Dim::Fixed(if a == axis { taken as u64 } else { n }))
            .collect();
        if self.shape_of(g) != want {
            return Err(format!(
                "`grad_output` is {}, not what `{op}` took of {sizes:?}",
                self.b.ty(g)
            ));
        }
        let dtype = self.b.dtype(g).expect("a tensor");
        let zero = self.b.constant(Scalar::zero(dtype));
        if step > 1 {
            // Strided: the gradient added into zeros at its positions
            // (each once, so in any order the same bits).
            if taken as u64 > MAX_ARANGE {
                return Err(format!("`slice_backward` of {taken} positions: too many"));
            }
            let at: Vec<Scalar> = (0..taken).map(|i| Scalar::I64(start + i * step)).collect();
            let at = self.constant_tensor(DType::I64, vec![taken as u64], at)?;
            let sizes = sizes.iter().map(|&n| Dim::Fixed(n)).collect();
            let zeros = layout::broadcast_to(&mut self.b, zero, sizes)?;
            return self
                .b
                .op(Op::IndexAdd(axis as u32), &[zeros, at, g])
                .map_err(te);
        }
        self.pad_axis(g, axis, (start as u64, (extent - stop) as u64), zero)
    }

    /// ATen's `index_add(self, dim, index, source, alpha=1)`: `source`'s
    /// entries along `dim` added to `self`'s at `index` (0-D or 1-D), in
    /// index order, as torch's CPU kernel adds them (the gradient of
    /// `index_select`). An `alpha` other than 1 is not built.
    pub(super) fn index_add(&mut self, node: &Node) -> Result<Value, String> {
        let x = self.tensor_at(node, 0, "self")?;
        let axis = layout::axis(self.int_at(node, 1, "dim", None)?, self.shape_of(x).len())?;
        let mut index = self.index_at(node, 2, "index")?;
        let source = self.tensor_at(node, 3, "source")?;
        if self.number_at(node, 4, "alpha", 1.0)? != 1.0 {
            return Err("unsupported: `index_add` with an `alpha` other than 1".into());
        }
        match self.shape_of(index).len() {
            0 => index = layout::unsqueeze(&mut self.b, index, 0)?,
            1 => {}
            _ => return Err("`index_add` takes a 0-D or 1-D index".into()),
        }
        self.b
            .op(Op::IndexAdd(axis as u32), &[x, index, source])
            .map_err(te)
    }

    /// torch's `gather(x, axis, index)`: `out[c] = x[c with c[axis] =
    /// index[c]]`, `index` of `x`'s rank and no larger along the other axes.
    /// Built as a `gather` of the flattened `x` at [`Self::flat_positions`]:
    /// `x` is read where it is (moving `axis` first copied it whole, 51 MB
    /// a step for GPT-2's loss over its vocabulary, to read 256 elements).
    fn take_along(&mut self, x: Value, axis: usize, index: Value) -> Result<Value, String> {
        let dims = self.fixed_extents(x, "gather", "a tensor")?;
        let at = self.fixed_extents(index, "gather", "an index")?;
        let rank = dims.len();
        if at.len() != rank || rank == 0 {
            return Err(format!(
                "`gather` takes an index of the input's rank {rank}, got rank {}",
                at.len()
            ));
        }
        for d in 0..rank {
            if d != axis && at[d] > dims[d] {
                return Err(format!(
                    "`gather`: the index's extent {} along dim {d} is above the input's {}",
                    at[d], dims[d]
                ));
            }
        }
        let (flat_index, total) = self.flat_positions("gather", &dims, (&at, axis), index)?;
        let flat = self.reshape(x, vec![Dim::Fixed(total)])?;
        self.gather(flat, flat_index, 0)
    }

    /// For each element `c` of an index of extents `at` into a tensor of
    /// `dims` along `axis`, the row-major position of `c` with `c[axis]`
    /// replaced by `index[c]` (an `i64` tensor of `at`), and the tensor's
    /// element count. A position whose index is outside the axis is -1, so
    /// that the `gather` or `index_add` reading it reports it (without the
    /// select, -1 along an axis after the first would reach an element of
    /// the row before).
    fn flat_positions(
        &mut self,
        op: &str,
        dims: &[u64],
        (at, axis): (&[u64], usize),
        index: Value,
    ) -> Result<(Value, u64), String> {
        let rank = dims.len();
        let too_many = || format!("`{op}` of too many elements");
        // Row-major strides of the tensor, and each index element's offset
        // along the axes other than `axis`, shaped as the index with extent
        // 1 there.
        let mut strides = vec![1u64; rank];
        for dim in (0..rank - 1).rev() {
            strides[dim] = strides[dim + 1]
                .checked_mul(dims[dim + 1])
                .ok_or_else(too_many)?;
        }
        let total = strides[0].checked_mul(dims[0]).ok_or_else(too_many)?;
        let mut offset_dims = at.to_vec();
        offset_dims[axis] = 1;
        let places: u64 = offset_dims.iter().product();
        let mut offsets = Vec::with_capacity(places as usize);
        let mut c = vec![0u64; rank];
        for _ in 0..places {
            let place: u64 = (0..rank).map(|dim| c[dim] * strides[dim]).sum();
            offsets.push(Scalar::I64(place as i64));
            for dim in (0..rank).rev() {
                c[dim] += 1;
                if c[dim] < offset_dims[dim] {
                    break;
                }
                c[dim] = 0;
            }
        }
        let offsets = self.constant_tensor(DType::I64, offset_dims, offsets)?;
        let index = if self.b.dtype(index) == Some(DType::I64) {
            index
        } else {
            self.b.cast(index, DType::I64).map_err(te)?
        };
        let top = self.b.constant(Scalar::I64(dims[axis] as i64));
        let outside = self.outside(index, top)?;
        let stride = self.b.constant(Scalar::I64(strides[axis] as i64));
        let scaled = self.b.binary(BinaryOp::Mul, index, stride).map_err(te)?;
        let flat = self.b.binary(BinaryOp::Add, scaled, offsets).map_err(te)?;
        let minus_one = self.b.constant(Scalar::I64(-1));
        let flat = self.b.select(outside, minus_one, flat).map_err(te)?;
        Ok((flat, total))
    }

    /// torch's `scatter_add(x, dim, index, src)`: `x` with `src[c]` added at
    /// `c` with `c[dim]` replaced by `index[c]`, for every `c` of `index`'s
    /// shape (no larger than `src`'s, nor than `x`'s off `dim`), in row-major
    /// order as torch's CPU kernel adds them (aot_autograd makes it of
    /// `gather`'s backward). Built as an `index_add` of the flattened `x` at
    /// the flat positions `index * stride + offset` (`offset`: `c`'s place
    /// along the other axes), a position whose index is outside `dim` made
    /// -1, so that the `index_add` reports it.
    pub(super) fn scatter_add(&mut self, node: &Node) -> Result<Value, String> {
        let x = self.tensor_at(node, 0, "self")?;
        let index = self.index_at(node, 2, "index")?;
        let src = self.tensor_at(node, 3, "src")?;
        let dims = self.fixed_extents(x, "scatter_add", "a tensor")?;
        let at = self.fixed_extents(index, "scatter_add", "an index")?;
        let from = self.fixed_extents(src, "scatter_add", "a source")?;
        let rank = dims.len();
        let axis = layout::axis(self.int_at(node, 1, "dim", None)?, rank)?;
        if rank == 0 || at.len() != rank || from.len() != rank {
            return Err(format!(
                "`scatter_add` takes a tensor, an index and a source of one rank (at least 1), got {rank}, {} and {}",
                at.len(),
                from.len()
            ));
        }
        for d in 0..rank {
            if at[d] > from[d] || (d != axis && at[d] > dims[d]) {
                return Err(format!(
                    "`scatter_add`: the index's extent {} along dim {d} is above the source's {} or the tensor's {}",
                    at[d], from[d], dims[d]
                ));
            }
        }
        let d = self.b.dtype(x).expect("a tensor");
        if self.b.dtype(src) != Some(d) {
            return Err("`scatter_add` takes a source of the tensor's dtype".into());
        }
        let count: u64 = at.iter().product();
        if count == 0 {
            return Err("`scatter_add` of an empty index (kiln has no empty tensors)".into());
        }
        // The source's elements the index reaches, in the index's order.
        let mut src = src;
        for dim in 0..rank {
            if at[dim] != from[dim] {
                src = layout::slice_axis(&mut self.b, src, dim, (0, at[dim]))?;
            }
        }
        let (flat, total) = self.flat_positions("scatter_add", &dims, (&at, axis), index)?;
        let flat = self.reshape(flat, vec![Dim::Fixed(count)])?;
        let src = self.reshape(src, vec![Dim::Fixed(count)])?;
        let base = self.reshape(x, vec![Dim::Fixed(total)])?;
        let sum = self.b.op(Op::IndexAdd(0), &[base, flat, src]).map_err(te)?;
        self.reshape(sum, dims.into_iter().map(Dim::Fixed).collect())
    }

    /// `v`'s extents, which `op` needs fixed (`what` names `v` in the error).
    fn fixed_extents(&self, v: Value, op: &str, what: &str) -> Result<Vec<u64>, String> {
        self.shape_of(v)
            .iter()
            .map(|d| match d {
                Dim::Fixed(n) => Ok(*n),
                Dim::Sym(s) => Err(format!("`{op}` of {what} symbolic along `{s}`")),
            })
            .collect()
    }

    /// Where the `i64` index `i` is outside `0..extent` (an `i64` value).
    fn outside(&mut self, i: Value, extent: Value) -> Result<Value, String> {
        let zero = self.b.constant(Scalar::I64(0));
        let below = self.b.compare(CmpOp::Lt, i, zero).map_err(te)?;
        let above = self.b.compare(CmpOp::Ge, i, extent).map_err(te)?;
        self.b.binary(BinaryOp::Or, below, above).map_err(te)
    }

    /// A constant tensor of `dims`.
    fn constant_tensor(
        &mut self,
        dtype: DType,
        dims: Vec<u64>,
        values: Vec<Scalar>,
    ) -> Result<Value, String> {
        let t = TensorConst {
            dtype,
            dims,
            values,
        };
        self.b.op(Op::Tensor(Arc::new(t)), &[]).map_err(te)
    }

    /// `arange(end)`, `arange(start, end[, step])`: a constant, `int64`
    /// when every bound is an int, else `float32` (or the `dtype` given).
    pub(super) fn arange(&mut self, node: &Node) -> Result<Value, String> {
        let numbers: Vec<&Arg> = node
            .args
            .iter()
            .filter(|a| matches!(a, Arg::Int(_) | Arg::Float(_)))
            .collect();
        let kw = |key: &str| node.kwargs.iter().find(|(k, _)| k == key).map(|(_, a)| a);
        let mut bounds: Vec<&Arg> = numbers;
        for key in ["start", "end", "step"] {
            if let Some(a) = kw(key) {
                bounds.push(a);
            }
        }
        let num = |a: &Arg| match a {
            Arg::Int(i) => Ok(*i as f64),
            Arg::Float(f) => Ok(*f),
            other => Err(format!("`arange` takes numbers, not {other:?}")),
        };
        let all_int = bounds.iter().all(|a| matches!(a, Arg::Int(_)));
        let (start, end, step) = match bounds.as_slice() {
            [end] => (0.0, num(end)?, 1.0),
            [start, end] => (num(start)?, num(end)?, 1.0),
            [start, end, step] => (num(start)?, num(end)?, num(step)?),
            _ => return Err("`arange` takes one to three numbers".into()),
        };
        let dtype = match kw("dtype") {
            None | Some(Arg::None) => {
                if all_int {
                    DType::I64
                } else {
                    DType::F32
                }
            }
            Some(Arg::Name(n) | Arg::Str(n)) => {
                super::torch_dtype(n).ok_or_else(|| format!("unsupported dtype `{n}`"))?
            }
            Some(other) => return Err(format!("`dtype` must be a dtype, not {other:?}")),
        };
        if step == 0.0 || !step.is_finite() || !start.is_finite() || !end.is_finite() {
            return Err(format!(
                "`arange({start}, {end}, {step})` has no finite length"
            ));
        }
        let len = ((end - start) / step).ceil();
        if len < 1.0 {
            return Err(format!(
                "`arange({start}, {end}, {step})` is empty, and kiln has no empty tensors"
            ));
        }
        if len > MAX_ARANGE as f64 {
            return Err(format!("`arange` of {len} elements (at most {MAX_ARANGE})"));
        }
        let values: Vec<Scalar> = (0..len as u64)
            .map(|i| {
                let v = start + i as f64 * step;
                match dtype {
                    DType::I64 => Scalar::I64(v as i64),
                    DType::I32 => Scalar::I32(v as i32),
                    DType::F64 => Scalar::F64(v),
                    DType::F32 => Scalar::F32(v as f32),
                    DType::Bool => Scalar::Bool(v != 0.0),
                }
            })
            .collect();
        self.constant_tensor(dtype, vec![len as u64], values)
    }

    /// `var_mean`/`std_mean(x, dim, correction, keepdim)`: `[var or std,
    /// mean]`.
    pub(super) fn moments_pair(&mut self, op: &str, node: &Node) -> Result<Vec<Value>, String> {
        let (spread, mean) = self.moments(op.starts_with("std"), node)?;
        Ok(vec![spread, mean])
    }

    /// `var`/`std(x, dim, correction, keepdim)`.
    pub(super) fn spread(&mut self, op: &str, node: &Node) -> Result<Value, String> {
        Ok(self.moments(op == "std", node)?.0)
    }

    /// The variance (or standard deviation) and the mean of `x` over `dim`
    /// (every axis without one): the mean first, then the sum of squared
    /// deviations from it divided by `max(0, n - correction)` (two passes,
    /// as torch's CPU kernels compute it up to rounding). `correction`
    /// defaults to 1; the older `unbiased=False` means 0.
    fn moments(&mut self, std: bool, node: &Node) -> Result<(Value, Value), String> {
        let x = self.floating(node)?;
        let shape = self.shape_of(x);
        let rank = shape.len();
        if rank == 0 {
            return Err("the variance of a scalar".into());
        }
        let axes = self.dims_arg(node, 1, rank)?;
        let correction = match self.arg(node, 2, "correction") {
            Some(Arg::Int(c)) => *c as f64,
            Some(Arg::Float(c)) => *c,
            Some(Arg::Bool(unbiased)) => f64::from(u8::from(*unbiased)),
            None | Some(Arg::None) => match node.kwargs.iter().find(|(k, _)| k == "unbiased") {
                Some((_, Arg::Bool(false))) => 0.0,
                _ => 1.0,
            },
            Some(other) => return Err(format!("`correction` must be a number, not {other:?}")),
        };
        let keepdim = matches!(self.arg(node, 3, "keepdim"), Some(Arg::Bool(true)));
        let n = axes
            .iter()
            .try_fold(1u64, |acc, &a| match &shape[a as usize] {
                Dim::Fixed(k) => Ok(acc * k),
                Dim::Sym(s) => Err(format!("the variance along the symbolic dimension `{s}`")),
            })?;
        let dtype = self.b.dtype(x).expect("a tensor");
        let mean = self.reduce_axes(ReduceOp::Mean, x, axes.clone(), true)?;
        let dev = self.b.binary(BinaryOp::Sub, x, mean).map_err(te)?;
        let sq = self.b.binary(BinaryOp::Mul, dev, dev).map_err(te)?;
        let total = self.reduce_axes(ReduceOp::Sum, sq, axes.clone(), keepdim)?;
        let divisor = crate::eltwise::konst(&mut self.b, dtype, (n as f64 - correction).max(0.0));
        let var = self.b.binary(BinaryOp::Div, total, divisor).map_err(te)?;
        let spread = if std {
            self.b.unary(UnaryOp::Sqrt, var).map_err(te)?
        } else {
            var
        };
        let mean = if keepdim {
            mean
        } else {
            let out = self.shape_of(spread);
            self.reshape(mean, out)?
        };
        Ok((spread, mean))
    }

    /// Scaled dot-product attention, `softmax(q @ k^T * scale + mask) @ v`
    /// over the last axis (torch's `scaled_dot_product_attention`):
    /// `scale` defaults to `1 / sqrt(q.size(-1))`; `is_causal` masks each
    /// query's later keys; a bool `attn_mask` keeps where true, a float one
    /// is added. `dropout_p` must be 0 (kiln draws no random numbers).
    pub(super) fn attention(&mut self, op: &str, node: &Node) -> Result<Value, String> {
        Ok(self.attention_parts(op, node)?.0)
    }

    /// ATen's `_scaled_dot_product_flash_attention_for_cpu`: the attention
    /// and each query's log-sum-exp of its scaled, masked scores
    /// (`[.., L]`, which the backward reads), `max + log(Σ exp(s - max))`.
    pub(super) fn flash_attention(&mut self, op: &str, node: &Node) -> Result<Vec<Value>, String> {
        let (out, lse) = self.attention_parts(op, node)?;
        Ok(vec![out, lse])
    }

    /// The attention and its log-sum-exp (see [`Fx::attention`]).
    fn attention_parts(&mut self, op: &str, node: &Node) -> Result<(Value, Value), String> {
        // Where `attn_mask`, `dropout_p`, `is_causal`, `scale` and
        // `enable_gqa` are (`NONE`: keyword-only).
        let at = if op.starts_with('_') {
            [NONE, 3, 4, NONE, NONE]
        } else {
            [3, 4, 5, 6, 7]
        };
        let q = self.tensor_at(node, 0, "query")?;
        let k = self.tensor_at(node, 1, "key")?;
        let v = self.tensor_at(node, 2, "value")?;
        let scores = self.attention_scores(node, (q, k), at)?;
        let rank = self.shape_of(scores).len();
        let last = vec![rank as u32 - 1];
        let max = self.reduce_axes(ReduceOp::Max, scores, last.clone(), true)?;
        let shifted = self.b.binary(BinaryOp::Sub, scores, max).map_err(te)?;
        let e = self.b.unary(UnaryOp::Exp, shifted).map_err(te)?;
        let total = self.reduce_axes(ReduceOp::Sum, e, last, true)?;
        let p = self.b.binary(BinaryOp::Div, e, total).map_err(te)?;
        let out = self.b.op(Op::MatMul, &[p, v]).map_err(te)?;
        let log_total = self.b.unary(UnaryOp::Log, total).map_err(te)?;
        let lse = self.b.binary(BinaryOp::Add, max, log_total).map_err(te)?;
        let lse = layout::squeeze(&mut self.b, lse, rank - 1)?;
        Ok((out, lse))
    }

    /// `q @ k^T * scale`, masked (see [`Fx::attention`]); `at`: the
    /// places of `attn_mask`, `dropout_p`, `is_causal`, `scale` and
    /// `enable_gqa` among `node`'s arguments (`NONE` where keyword-only).
    fn attention_scores(
        &mut self,
        node: &Node,
        (q, k): (Value, Value),
        at: [usize; 5],
    ) -> Result<Value, String> {
        let [mask_idx, dropout_idx, causal_idx, scale_idx, gqa_idx] = at;
        let dropout = self.number_at(node, dropout_idx, "dropout_p", 0.0)?;
        if dropout != 0.0 {
            return Err(format!(
                "attention with dropout_p={dropout}: kiln draws no random numbers"
            ));
        }
        let causal = matches!(
            self.arg(node, causal_idx, "is_causal"),
            Some(Arg::Bool(true))
        );
        if matches!(self.arg(node, gqa_idx, "enable_gqa"), Some(Arg::Bool(true))) {
            return Err("unsupported: attention with enable_gqa".into());
        }
        let dtype = self.b.dtype(q).expect("a tensor");
        if !dtype.is_float() {
            return Err(format!("attention of {dtype} tensors"));
        }
        let qs = self.shape_of(q);
        let ks = self.shape_of(k);
        let rank = qs.len();
        if rank < 2 || ks.len() != rank {
            return Err("attention takes query and key of one rank, at least 2".into());
        }
        let head = match qs[rank - 1] {
            Dim::Fixed(e) => e,
            Dim::Sym(_) => return Err("attention over a symbolic head size".into()),
        };
        let scale = self.attention_scale(node, scale_idx, head)?;
        let mut perm: Vec<u32> = (0..rank as u32).collect();
        perm.swap(rank - 2, rank - 1);
        let kt = self.b.op(Op::Transpose(perm), &[k]).map_err(te)?;
        let scores = self.b.op(Op::MatMul, &[q, kt]).map_err(te)?;
        let scale = crate::eltwise::konst(&mut self.b, dtype, scale);
        let mut scores = self.b.binary(BinaryOp::Mul, scores, scale).map_err(te)?;
        let neg_inf = crate::eltwise::konst(&mut self.b, dtype, f64::NEG_INFINITY);
        if causal {
            let (Dim::Fixed(l), Dim::Fixed(s)) = (&qs[rank - 2], &ks[rank - 2]) else {
                return Err("causal attention over symbolic lengths".into());
            };
            let (l, s) = (*l, *s);
            let keep: Vec<Scalar> = (0..l * s).map(|i| Scalar::Bool(i % s <= i / s)).collect();
            let keep = self.constant_tensor(DType::Bool, vec![l, s], keep)?;
            scores = self.b.select(keep, scores, neg_inf).map_err(te)?;
        }
        let mask = match self.arg(node, mask_idx, "attn_mask") {
            None | Some(Arg::None) => None,
            Some(_) => Some(self.tensor_at(node, mask_idx, "attn_mask")?),
        };
        if let Some(mask) = mask {
            scores = match self.b.dtype(mask) {
                Some(DType::Bool) => self.b.select(mask, scores, neg_inf).map_err(te)?,
                Some(d) if d == dtype => self.b.binary(BinaryOp::Add, scores, mask).map_err(te)?,
                other => {
                    return Err(format!(
                        "`attn_mask` must be bool or {dtype}, not {}",
                        other.map_or("a selection".to_string(), |d| d.to_string())
                    ))
                }
            };
        }
        Ok(scores)
    }

    /// `scale` of an attention node (argument `idx`), else `1 / sqrt(head)`.
    fn attention_scale(&self, node: &Node, idx: usize, head: u64) -> Result<f64, String> {
        Ok(match self.optional_number(node, idx, "scale")? {
            Some(s) => s,
            None => 1.0 / (head as f64).sqrt(),
        })
    }

    /// ATen's `_scaled_dot_product_flash_attention_for_cpu_backward(grad,
    /// q, k, v, out, logsumexp, dropout_p, is_causal, *, attn_mask, scale)`:
    /// the gradients of `q`, `k` and `v`, as torch's math defines them.
    /// With `p = exp(s - logsumexp)` for the forward's scaled, masked
    /// scores `s`: `dv = pᵀ @ g`; `ds = p * (g @ vᵀ - Σ(g * out))` (the sum
    /// over each query's last axis); `dq = ds @ k * scale`; `dk = dsᵀ @ q *
    /// scale`.
    pub(super) fn flash_attention_backward(&mut self, node: &Node) -> Result<Vec<Value>, String> {
        let g = self.tensor_at(node, 0, "grad_out")?;
        let q = self.tensor_at(node, 1, "query")?;
        let k = self.tensor_at(node, 2, "key")?;
        let v = self.tensor_at(node, 3, "value")?;
        let out = self.tensor_at(node, 4, "out")?;
        let lse = self.tensor_at(node, 5, "logsumexp")?;
        let scores = self.attention_scores(node, (q, k), [NONE, 6, 7, NONE, NONE])?;
        let dtype = self.b.dtype(q).expect("a tensor");
        let rank = self.shape_of(q).len();
        let lse = layout::unsqueeze(&mut self.b, lse, rank - 1)?;
        let shifted = self.b.binary(BinaryOp::Sub, scores, lse).map_err(te)?;
        let p = self.b.unary(UnaryOp::Exp, shifted).map_err(te)?;
        let mut perm: Vec<u32> = (0..rank as u32).collect();
        perm.swap(rank - 2, rank - 1);
        let t = |fx: &mut Self, x: Value| fx.b.op(Op::Transpose(perm.clone()), &[x]).map_err(te);
        let pt = t(self, p)?;
        let dv = self.b.op(Op::MatMul, &[pt, g]).map_err(te)?;
        let vt = t(self, v)?;
        let dp = self.b.op(Op::MatMul, &[g, vt]).map_err(te)?;
        let go = self.b.binary(BinaryOp::Mul, g, out).map_err(te)?;
        let last = vec![rank as u32 - 1];
        let d = self.reduce_axes(ReduceOp::Sum, go, last, true)?;
        let centered = self.b.binary(BinaryOp::Sub, dp, d).map_err(te)?;
        let ds = self.b.binary(BinaryOp::Mul, p, centered).map_err(te)?;
        let head = match self.shape_of(q)[rank - 1] {
            Dim::Fixed(e) => e,
            Dim::Sym(_) => return Err("attention over a symbolic head size".into()),
        };
        let scale = self.attention_scale(node, NONE, head)?;
        let scale = crate::eltwise::konst(&mut self.b, dtype, scale);
        let dq = self.b.op(Op::MatMul, &[ds, k]).map_err(te)?;
        let dq = self.b.binary(BinaryOp::Mul, dq, scale).map_err(te)?;
        let dst = t(self, ds)?;
        let dk = self.b.op(Op::MatMul, &[dst, q]).map_err(te)?;
        let dk = self.b.binary(BinaryOp::Mul, dk, scale).map_err(te)?;
        Ok(vec![dq, dk, dv])
    }

    /// `as_strided(x, size, stride, storage_offset)` where it reads `x`'s
    /// elements in order (the strides of a contiguous `size`, any stride
    /// along an axis of extent 1, no offset, as many elements): a reshape.
    /// (The torch backend sends it only for a contiguous `x`.)
    pub(super) fn as_strided(&mut self, node: &Node) -> Result<Value, String> {
        let x = self.tensor_at(node, 0, "input")?;
        let ints = |a: Option<&Arg>, key: &str| -> Result<Vec<i64>, String> {
            match a {
                Some(Arg::Seq(items)) => items
                    .iter()
                    .map(|i| match i {
                        Arg::Int(k) => Ok(*k),
                        other => Err(format!("`{key}` holds {other:?}, not an int")),
                    })
                    .collect(),
                other => Err(format!("`{key}` must be a list of ints, not {other:?}")),
            }
        };
        let size = ints(self.arg(node, 1, "size"), "size")?;
        let stride = ints(self.arg(node, 2, "stride"), "stride")?;
        let offset = self.int_at(node, 3, "storage_offset", Some(0))?;
        let count: i64 = size.iter().product();
        let own = super::fixed_product(&self.shape_of(x))?;
        let mut expect = 1i64;
        let mut contiguous = size.len() == stride.len() && offset == 0 && count == own as i64;
        for (&n, &s) in size.iter().zip(&stride).rev() {
            if n < 0 || (n != 1 && s != expect) {
                contiguous = false;
            }
            expect *= n.max(1);
        }
        if !contiguous {
            return Err(format!(
                "unsupported: `as_strided` to size {size:?}, stride {stride:?}, offset {offset}, \
                 which is not a view of the input's elements in order"
            ));
        }
        self.reshape(x, size.iter().map(|&n| Dim::Fixed(n as u64)).collect())
    }

    /// A tensor filled with one value: `full(size, v)`, `ones(size)`,
    /// `zeros(size)`, `new_ones(x, size)`, `new_zeros(x, size)`,
    /// `new_full(x, size, v)`, `ones_like(x)`, `zeros_like(x)`,
    /// `full_like(x, v)`, `scalar_tensor(v)`, `fill(x, v)` (the functional
    /// `fill_`: `x`'s shape and dtype, every element `v`), `empty_like(x)`
    /// (elements torch leaves unspecified: zeros, so that every tier gives
    /// the same bits): a constant broadcast to the shape. The dtype is
    /// `dtype=` if given, else the template's (`new_*`, `*_like`, `fill`),
    /// else the value's (bool, int64, or float32, torch's default).
    pub(super) fn filled(&mut self, op: &str, node: &Node) -> Result<Value, String> {
        let template = if op.starts_with("new_") || op.ends_with("_like") || op == "fill" {
            Some(self.tensor_at(node, 0, "input")?)
        } else {
            None
        };
        let first = usize::from(template.is_some());
        let sizes = |fx: &Self, idx: usize| -> Result<Vec<Dim>, String> {
            let items: Vec<Arg> = match fx.arg(node, idx, "size") {
                Some(Arg::Seq(items)) => items.clone(),
                Some(Arg::Int(_)) => node.args[idx..]
                    .iter()
                    .take_while(|a| matches!(a, Arg::Int(_)))
                    .cloned()
                    .collect(),
                other => return Err(format!("`size` must be a list of ints, not {other:?}")),
            };
            items
                .iter()
                .map(|a| match a {
                    Arg::Int(k) if *k > 0 => Ok(Dim::Fixed(*k as u64)),
                    Arg::Int(0) => Err("a size of 0: kiln has no empty tensors".to_string()),
                    other => Err(format!("`size` holds {other:?}, not a positive int")),
                })
                .collect()
        };
        let (shape, value) = match op {
            "scalar_tensor" => (Vec::new(), self.arg(node, 0, "s")),
            "ones_like" | "zeros_like" | "empty_like" => {
                (self.shape_of(template.expect("a template")), None)
            }
            "fill" => (
                self.shape_of(template.expect("a template")),
                self.arg(node, 1, "value"),
            ),
            "full_like" => (
                self.shape_of(template.expect("a template")),
                self.arg(node, 1, "fill_value"),
            ),
            "full" => (sizes(self, 0)?, self.arg(node, 1, "fill_value")),
            "new_full" => (sizes(self, 1)?, self.arg(node, 2, "fill_value")),
            _ => (sizes(self, first)?, None),
        };
        let value = match (op, value) {
            (_, Some(a)) => {
                lit(a).ok_or_else(|| format!("`{op}` fills with a number, not {a:?}"))?
            }
            (o, None) if o.contains("ones") => Operand::Int(1),
            (o, None) if o.contains("zeros") || o == "empty_like" => Operand::Int(0),
            (_, None) => return Err(format!("`{op}` without a fill value")),
        };
        let dtype = match node
            .kwargs
            .iter()
            .find(|(k, _)| k == "dtype")
            .map(|(_, a)| a)
        {
            Some(Arg::Name(n) | Arg::Str(n)) => {
                super::torch_dtype(n).ok_or_else(|| format!("unsupported dtype `{n}`"))?
            }
            None | Some(Arg::None) => match (template, value) {
                (Some(t), _) => self.b.dtype(t).expect("a tensor"),
                (None, Operand::Bool(_)) => DType::Bool,
                (None, Operand::Int(_)) if op == "full" || op == "scalar_tensor" => DType::I64,
                (None, Operand::Int(_)) | (None, _) => DType::F32,
            },
            Some(other) => return Err(format!("`dtype` must be a dtype, not {other:?}")),
        };
        let value = self.tensor(value, dtype)?;
        if shape.is_empty() {
            return Ok(value);
        }
        layout::broadcast_to(&mut self.b, value, shape)
    }

    /// The flat row-major index over the axes of `x` that `node`'s second
    /// argument, `indices`, indexes (-1 where any index is outside its
    /// axis, so a gather or an `index_add` there fails), the first indexed
    /// axis, and `x`'s shape with the indexed axes merged into one.
    fn flat_index(&mut self, node: &Node, x: Value) -> Result<(Value, usize, Vec<Dim>), String> {
        let items = match self.arg(node, 1, "indices") {
            Some(Arg::Seq(items)) => items.clone(),
            other => return Err(format!("`index` takes a list of indices, not {other:?}")),
        };
        let shape = self.shape_of(x);
        let lead = items.iter().take_while(|a| matches!(a, Arg::None)).count();
        let indices: Vec<Value> = items[lead..]
            .iter()
            .map(|a| match self.operand(a)? {
                Operand::Tensor(v) => Ok(v),
                other => Err(format!("`index` by {other:?}")),
            })
            .collect::<Result<_, String>>()?;
        if indices.is_empty() || lead + indices.len() > shape.len() {
            return Err(format!(
                "`index` of a rank-{} tensor by {} indices",
                shape.len(),
                items.len()
            ));
        }
        for &i in &indices {
            match self.b.dtype(i) {
                Some(DType::I32 | DType::I64) => {}
                Some(DType::Bool) => {
                    return Err(
                        "unsupported: indexing by a bool mask (its shape depends on the data)"
                            .into(),
                    )
                }
                other => return Err(format!("`index` by a tensor of {other:?}")),
            }
        }
        let axes = lead..lead + indices.len();
        let extents = shape[axes.clone()]
            .iter()
            .map(|d| match d {
                Dim::Fixed(n) => Ok(*n),
                Dim::Sym(s) => Err(format!("`index` along the symbolic dimension `{s}`")),
            })
            .collect::<Result<Vec<u64>, String>>()?;
        let total = extents
            .iter()
            .try_fold(1u64, |acc, &n| acc.checked_mul(n))
            .ok_or("`index` of too many elements")?;
        // The flat index over the indexed axes, row-major; `outside` where
        // any index is outside its axis.
        let mut flat: Option<Value> = None;
        let mut outside: Option<Value> = None;
        let mut stride = total;
        let zero = self.b.constant(Scalar::I64(0));
        for (&i, &extent) in indices.iter().zip(&extents) {
            stride /= extent;
            let i = if self.b.dtype(i) == Some(DType::I64) {
                i
            } else {
                self.b.cast(i, DType::I64).map_err(te)?
            };
            let n = self.b.constant(Scalar::I64(extent as i64));
            let negative = self.b.compare(CmpOp::Lt, i, zero).map_err(te)?;
            let wrapped = self.b.binary(BinaryOp::Add, i, n).map_err(te)?;
            let i = self.b.select(negative, wrapped, i).map_err(te)?;
            let bad = self.outside(i, n)?;
            outside = Some(match outside {
                None => bad,
                Some(o) => self.b.binary(BinaryOp::Or, o, bad).map_err(te)?,
            });
            let s = self.b.constant(Scalar::I64(stride as i64));
            let term = self.b.binary(BinaryOp::Mul, i, s).map_err(te)?;
            flat = Some(match flat {
                None => term,
                Some(f) => self.b.binary(BinaryOp::Add, f, term).map_err(te)?,
            });
        }
        let (flat, outside) = (flat.expect("an index"), outside.expect("an index"));
        let minus_one = self.b.constant(Scalar::I64(-1));
        let flat = self.b.select(outside, minus_one, flat).map_err(te)?;
        let mut merged: Vec<Dim> = shape[..lead].to_vec();
        merged.push(Dim::Fixed(total));
        merged.extend_from_slice(&shape[axes.end..]);
        Ok((flat, lead, merged))
    }

    /// `x[i0, i1, ...]` by integer tensors (ATen's `index.Tensor`, and `_unsafe_index`): the
    /// indexed axes must be adjacent (`None` for the whole axes before
    /// them); the index tensors broadcast to one shape `B`, and the result
    /// is `x`'s axes before them, `B`, `x`'s axes after them. A negative
    /// index counts from the end, as in Python; one still outside its axis
    /// fails the call. Built as a `gather` of `x` with the indexed axes
    /// flattened into one, at the flat index (made -1, so out of range,
    /// where any index is).
    pub(super) fn advanced_index(&mut self, node: &Node) -> Result<Value, String> {
        let x = self.tensor_at(node, 0, "self")?;
        let (flat, lead, merged) = self.flat_index(node, x)?;
        let x = self.reshape(x, merged)?;
        self.gather(x, flat, lead)
    }

    /// ATen's `index_put(self, indices, values, accumulate=True)` (and
    /// `_unsafe_index_put`), the gradient of advanced indexing: `values`
    /// (broadcast to what `self[indices]` would be) added to `self` at the
    /// indexed places, in index order, as torch's CPU kernel adds them
    /// (one after another). Without `accumulate` (an assignment, whose
    /// order among repeated indices torch leaves undefined) it is refused.
    pub(super) fn index_put(&mut self, node: &Node) -> Result<Value, String> {
        let x = self.tensor_at(node, 0, "self")?;
        if !super::cnn::flag(self.arg(node, 3, "accumulate"), "accumulate", false)? {
            return Err("unsupported: `index_put` without `accumulate=True`".into());
        }
        let v = self.tensor_at(node, 2, "values")?;
        let shape = self.shape_of(x);
        let (flat, lead, merged) = self.flat_index(node, x)?;
        let mut taken = shape[..lead].to_vec();
        taken.extend(self.shape_of(flat));
        taken.extend_from_slice(&merged[lead + 1..]);
        let d = self.b.dtype(x).expect("a tensor");
        let v = if self.b.dtype(v) == Some(d) {
            v
        } else {
            self.b.cast(v, d).map_err(te)?
        };
        let v = layout::broadcast_to(&mut self.b, v, taken)?;
        let base = self.reshape(x, merged)?;
        let sum = self
            .b
            .op(Op::IndexAdd(lead as u32), &[base, flat, v])
            .map_err(te)?;
        self.reshape(sum, shape)
    }
}
