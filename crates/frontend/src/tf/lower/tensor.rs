//! TensorFlow's tensor ops: `MatMul`/`BatchMatMul`, the layout ops
//! (`ConcatV2`, `Pack`, `Slice`, `StridedSlice`, `BroadcastTo`, `Reshape`,
//! `Transpose`, `ExpandDims`, `Squeeze`), the reductions over constant axes
//! and `Softmax`/`LogSoftmax`.
//!
//! Shape arguments TF passes as tensors (a `Reshape`'s shape, a `Sum`'s axes)
//! must be constants here: kiln's shapes are known when the graph is built.

use super::{const_axes, const_axis, const_ints, te, Tf};
use crate::layout;
use crate::tf::proto::{attr_value::Value as AV, NodeDef};
use kiln_ir::{BinaryOp as B, Dim, Op, ReduceOp, UnaryOp, Value};

impl Tf<'_> {
    /// TF `MatMul` (`transpose_a`, `transpose_b`) and `BatchMatMul` (`adj_x`, `adj_y`;
    /// for real dtypes the adjoint is the transpose of the last two axes).
    pub(super) fn matmul(&mut self, n: &NodeDef, a: &[Value], op: &str) -> Result<Value, String> {
        let b = &mut self.b;
        let (ta, tb) = match op {
            "MatMul" => ("transpose_a", "transpose_b"),
            _ => ("adj_x", "adj_y"),
        };
        let flag = |name: &str| match n.attr.get(name).and_then(|v| v.value.as_ref()) {
            Some(AV::B(v)) => Ok(*v),
            None => Ok(false),
            Some(_) => Err(format!("attr `{name}` must be a bool")),
        };
        let mut x = [a[0], a[1]];
        for (idx, name) in [ta, tb].iter().enumerate() {
            if flag(name)? {
                // The last two axes swap (real dtypes: adjoint = transpose).
                let r = layout::shape(b, x[idx]).len();
                if r < 2 {
                    return Err(format!("`{name}` of a tensor of rank {r}"));
                }
                let mut perm: Vec<u32> = (0..r as u32).collect();
                perm.swap(r - 2, r - 1);
                x[idx] = b.op(Op::Transpose(perm), &[x[idx]]).map_err(te)?;
            }
        }
        b.op(Op::MatMul, &x).map_err(te)
    }

    /// `ConcatV2` (axis last), `Concat` (axis first) and `Pack` (a new axis, attr `axis`).
    pub(super) fn concat(&mut self, n: &NodeDef, a: &[Value], op: &str) -> Result<Value, String> {
        let b = &mut self.b;
        let (values, axis) = match op {
            "ConcatV2" => (&a[..a.len() - 1], Some(a[a.len() - 1])),
            "Concat" => (&a[1..], Some(a[0])),
            _ => (a, None),
        };
        let Some(&first) = values.first() else {
            return Err(format!("{op} of no tensors"));
        };
        let r = layout::shape(b, first).len();
        match axis {
            Some(axis) => {
                let axis = const_axis(b, axis, r)?;
                layout::concat(b, values, axis)
            }
            None => {
                let k = match n.attr.get("axis").and_then(|v| v.value.as_ref()) {
                    Some(AV::I(k)) => *k,
                    None => 0,
                    Some(_) => return Err("attr `axis` must be an int".into()),
                };
                let axis = layout::axis(k, r + 1)?;
                layout::stack(b, values, axis)
            }
        }
    }

    /// `Slice(input, begin, size)` with constant `begin` and `size` (`-1`: to the end).
    pub(super) fn slice(&mut self, a: &[Value]) -> Result<Value, String> {
        let b = &mut self.b;
        let begin = const_ints(b, a[1])?;
        let size = const_ints(b, a[2])?;
        let shape = layout::shape(b, a[0]);
        if begin.len() != shape.len() || size.len() != shape.len() {
            return Err(format!(
                "Slice of rank {} with begin {begin:?} and size {size:?}",
                shape.len()
            ));
        }
        let mut v = a[0];
        for (axis, (&start, &len)) in begin.iter().zip(&size).enumerate() {
            let start = u64::try_from(start).map_err(|_| format!("Slice begin {start}"))?;
            let stop = match len {
                -1 => u64::MAX,
                len => start
                    .saturating_add(u64::try_from(len).map_err(|_| format!("Slice size {len}"))?),
            };
            if stop != u64::MAX {
                let extent = layout::fixed_extent(b, v, axis)?;
                if stop > extent {
                    return Err(format!(
                        "Slice {start}..{stop} of axis {axis}, whose extent is {extent}"
                    ));
                }
            }
            v = layout::slice_axis(b, v, axis, (start, stop))?;
        }
        Ok(v)
    }

    /// `BroadcastTo(input, shape)` with a constant shape.
    pub(super) fn broadcast_to(&mut self, a: &[Value]) -> Result<Value, String> {
        let b = &mut self.b;
        let wanted = const_ints(b, a[1])?;
        let to = wanted
            .iter()
            .map(|&d| u64::try_from(d).map(Dim::Fixed))
            .collect::<Result<Vec<Dim>, _>>()
            .map_err(|_| format!("BroadcastTo shape {wanted:?}"))?;
        layout::broadcast_to(b, a[0], to)
    }

    /// `Sum`, `Mean`, `Max`, `Min`, `Prod` over constant axes (`keep_dims`); no axes
    /// is the input itself.
    pub(super) fn reduction(
        &mut self,
        n: &NodeDef,
        a: &[Value],
        op: &str,
    ) -> Result<Value, String> {
        let b = &mut self.b;
        let rank = b.ty(a[0]).as_tensor().map_or(0, |t| t.shape.len());
        let axes = const_axes(b, a[1], rank)?;
        let keepdim = matches!(
            n.attr.get("keep_dims").and_then(|v| v.value.as_ref()),
            Some(AV::B(true))
        );
        if axes.is_empty() {
            Ok(a[0])
        } else {
            let op =
                match op {
                    "Sum" => ReduceOp::Sum,
                    "Mean" if !crate::eltwise::dtype(b, a[0]).is_float() => return Err(
                        "unsupported: Mean of integers (TF truncates; kiln's mean is for floats)"
                            .into(),
                    ),
                    "Mean" => ReduceOp::Mean,
                    "Max" => ReduceOp::Max,
                    "Min" => ReduceOp::Min,
                    _ => ReduceOp::Prod,
                };
            b.op(Op::ReduceAxes { op, axes, keepdim }, &[a[0]])
                .map_err(te)
        }
    }

    /// `Reshape(input, shape)` with a constant shape (one `-1` inferred).
    pub(super) fn reshape(&mut self, a: &[Value]) -> Result<Value, String> {
        let b = &mut self.b;
        let wanted = const_ints(b, a[1])?;
        let dims = layout::target_shape(b, a[0], &wanted)?;
        b.op(Op::Reshape(dims), &[a[0]]).map_err(te)
    }

    /// `Transpose(input, perm)` with a constant permutation (negative axes count from
    /// the end).
    pub(super) fn transpose(&mut self, a: &[Value]) -> Result<Value, String> {
        let b = &mut self.b;
        let rank = b.ty(a[0]).as_tensor().map_or(0, |t| t.shape.len()) as i64;
        let perm = const_ints(b, a[1])?
            .into_iter()
            .map(|p| {
                u32::try_from(if p < 0 { p + rank } else { p })
                    .map_err(|_| format!("Transpose axis {p} is out of range"))
            })
            .collect::<Result<Vec<u32>, String>>()?;
        b.op(Op::Transpose(perm), &[a[0]]).map_err(te)
    }

    /// `ExpandDims(input, axis)`: a reshape adding an axis of extent 1.
    pub(super) fn expand_dims(&mut self, a: &[Value]) -> Result<Value, String> {
        let b = &mut self.b;
        let mut shape = b
            .ty(a[0])
            .as_tensor()
            .map(|t| t.shape.clone())
            .unwrap_or_default();
        let rank = shape.len() as i64 + 1;
        let axis = match const_ints(b, a[1])?.as_slice() {
            [k] if (-rank..rank).contains(k) => k.rem_euclid(rank) as usize,
            other => return Err(format!("ExpandDims axis {other:?} for rank {}", rank - 1)),
        };
        shape.insert(axis, Dim::Fixed(1));
        b.op(Op::Reshape(shape), &[a[0]]).map_err(te)
    }

    /// `Squeeze`: a reshape dropping the axes `squeeze_dims` names (each must be 1),
    /// or every axis of extent 1.
    pub(super) fn squeeze(&mut self, n: &NodeDef, a: &[Value]) -> Result<Value, String> {
        let b = &mut self.b;
        let shape = b
            .ty(a[0])
            .as_tensor()
            .map(|t| t.shape.clone())
            .unwrap_or_default();
        let rank = shape.len() as i64;
        let axes: Vec<usize> = match n.attr.get("squeeze_dims").and_then(|v| v.value.as_ref()) {
            Some(AV::List(l)) if !l.i.is_empty() => {
                l.i.iter()
                    .map(|&k| {
                        if (-rank..rank).contains(&k) {
                            Ok(k.rem_euclid(rank) as usize)
                        } else {
                            Err(format!("Squeeze axis {k} for rank {rank}"))
                        }
                    })
                    .collect::<Result<_, String>>()?
            }
            _ => (0..shape.len())
                .filter(|&i| shape[i] == Dim::Fixed(1))
                .collect(),
        };
        let mut out = Vec::new();
        for (i, d) in shape.iter().enumerate() {
            if !axes.contains(&i) {
                out.push(d.clone());
            } else if *d != Dim::Fixed(1) {
                return Err(format!("Squeeze of axis {i}, which is {d}, not 1"));
            }
        }
        b.op(Op::Reshape(out), &[a[0]]).map_err(te)
    }

    /// `Softmax` and `LogSoftmax` over the last axis, as their composition:
    /// `e = exp(x - max(x))`, `e / sum(e)`; `(x - max) - log(sum(e))`.
    pub(super) fn softmax(&mut self, a: &[Value], op: &str) -> Result<Value, String> {
        let b = &mut self.b;
        let rank = b.ty(a[0]).as_tensor().map_or(0, |t| t.shape.len());
        if rank == 0 {
            return Err("Softmax of a scalar".into());
        }
        let axes = vec![rank as u32 - 1];
        let max = b
            .op(
                Op::ReduceAxes {
                    op: ReduceOp::Max,
                    axes: axes.clone(),
                    keepdim: true,
                },
                &[a[0]],
            )
            .map_err(te)?;
        let shifted = b.binary(B::Sub, a[0], max).map_err(te)?;
        let e = b.unary(UnaryOp::Exp, shifted).map_err(te)?;
        let total = b
            .op(
                Op::ReduceAxes {
                    op: ReduceOp::Sum,
                    axes,
                    keepdim: true,
                },
                &[e],
            )
            .map_err(te)?;
        if op == "LogSoftmax" {
            let l = b.unary(UnaryOp::Log, total).map_err(te)?;
            b.binary(B::Sub, shifted, l).map_err(te)
        } else {
            b.binary(B::Div, e, total).map_err(te)
        }
    }

    /// TF `StridedSlice` with any nonzero strides and the begin, end and
    /// shrink-axis masks (no ellipsis or new axes): a `slice` per axis, then
    /// a `reshape` dropping the shrunk axes.
    pub(super) fn strided_slice(&mut self, n: &NodeDef, a: &[Value]) -> Result<Value, String> {
        let b = &mut self.b;
        let mask = |key: &str| match n.attr.get(key).and_then(|v| v.value.as_ref()) {
            Some(AV::I(k)) => Ok(*k),
            None => Ok(0),
            Some(_) => Err(format!("attr `{key}` must be an int")),
        };
        if mask("ellipsis_mask")? != 0 || mask("new_axis_mask")? != 0 {
            return Err("unsupported: StridedSlice with ellipsis_mask or new_axis_mask".into());
        }
        let (begin_mask, end_mask, shrink) = (
            mask("begin_mask")?,
            mask("end_mask")?,
            mask("shrink_axis_mask")?,
        );
        let begin = const_ints(b, a[1])?;
        let end = const_ints(b, a[2])?;
        let strides = const_ints(b, a[3])?;
        let shape = layout::shape(b, a[0]);
        if begin.len() != end.len() || begin.len() != strides.len() || begin.len() > shape.len() {
            return Err(format!(
                "StridedSlice of rank {} with begin {begin:?}, end {end:?}, strides {strides:?}",
                shape.len()
            ));
        }
        let mut v = a[0];
        let mut kept = Vec::new();
        for (axis, d) in shape.iter().enumerate() {
            let bit = |m: i64| axis < 64 && m >> axis & 1 == 1;
            if axis >= begin.len() {
                kept.push(d.clone());
                continue;
            }
            let step = strides[axis];
            if step == 0 {
                return Err(format!("StridedSlice stride 0 on axis {axis}"));
            }
            if bit(shrink) {
                let extent = layout::fixed_extent(b, v, axis)?;
                let i = layout::python_bounds(Some(begin[axis]), None, extent).0;
                if begin[axis] >= extent as i64 || begin[axis] < -(extent as i64) {
                    return Err(format!(
                        "StridedSlice index {} of axis {axis}, whose extent is {extent}",
                        begin[axis]
                    ));
                }
                v = layout::slice_axis(b, v, axis, (i, i + 1))?;
                continue;
            }
            let whole = (bit(begin_mask) || begin[axis] == 0) && bit(end_mask) && step == 1;
            if whole {
                kept.push(d.clone());
                continue;
            }
            v = layout::slice_python(
                b,
                v,
                axis,
                [
                    (!bit(begin_mask)).then_some(begin[axis]),
                    (!bit(end_mask)).then_some(end[axis]),
                    Some(step),
                ],
            )?;
            kept.push(layout::shape(b, v)[axis].clone());
        }
        if kept.len() == shape.len() {
            return Ok(v);
        }
        b.op(Op::Reshape(kept), &[v]).map_err(te)
    }
}
