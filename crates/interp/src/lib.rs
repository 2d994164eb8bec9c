//! The reference interpreter: runs a [`Verified`] graph directly, node by node,
//! row by row, calling [`kiln_ir::semantics`] for every element.
//!
//! It is the oracle the compiled tiers are checked against, so it stays obvious:
//! no `unsafe`, no fusion, no speed tricks. It runs the `Graph`, not a lowered
//! kernel, so a lowering bug shows up as a difference.
//!
//! Only live nodes run (nodes an output depends on): a dead division by zero is
//! not an error, exactly as after dead-code elimination.

#![forbid(unsafe_code)]

use kiln_ir::exec::{bind_inputs, DimBindings, ExecError, ExecResult};
use kiln_ir::semantics::{self, EvalError, EvalResult};
use kiln_ir::{BinaryOp, Buffer, Data, Dim, EntityRef, NodeData, Op, Scalar, Type, Verified};
use std::borrow::Borrow;

/// Runs `graph` on `inputs` (in signature order; owned or borrowed) and returns
/// its outputs in signature order. A tensor of rank 1 or more is its
/// elements in row-major order (`Data::Column`), its shape its type's.
pub fn run<D: Borrow<Data>>(verified: &Verified, inputs: &[D]) -> ExecResult<Vec<Data>> {
    let (graph, info) = (verified.graph(), verified.info());
    let bindings = bind_inputs(verified, inputs)?;
    let mut values: Vec<Option<Data>> = vec![None; graph.len()];
    for (value, node) in graph.nodes() {
        if !info.is_live(value) {
            continue;
        }
        let result = match node.op {
            Op::Input { index } => inputs[index as usize].borrow().clone(),
            _ => {
                let args: Vec<Arg<'_>> = node
                    .args
                    .iter()
                    .map(|a| Arg {
                        data: values[a.index()]
                            .as_ref()
                            .expect("arguments of a live node are live and earlier"),
                        dims: dims(graph.ty(*a), &bindings),
                    })
                    .collect();
                let out_dims = dims(&node.ty, &bindings);
                let count = out_dims
                    .iter()
                    .try_fold(1usize, |acc, &d| acc.checked_mul(d));
                if count.is_none_or(|c| c > MAX_ELEMENTS) {
                    return Err(ExecError::Unsupported(format!(
                        "{value} ({}) would hold {} elements; the interpreter stops at {MAX_ELEMENTS}",
                        node.ty,
                        count.map_or("too many".to_string(), |c| c.to_string())
                    )));
                }
                eval_node(node, &args, &out_dims)
                    .map_err(|e| ExecError::at_node(graph, value, e))?
            }
        };
        values[value.index()] = Some(result);
    }
    let outputs = graph
        .outputs()
        .iter()
        .map(|o| values[o.value.index()].clone().expect("outputs are live"));
    Ok(outputs.collect())
}

/// The most elements one value may hold (2^28): a broadcast or a matmul of
/// small inputs can describe a huge result; it is an error, not an abort.
pub const MAX_ELEMENTS: usize = 1 << 28;

/// An argument's data and its concrete dimensions.
struct Arg<'a> {
    data: &'a Data,
    dims: Vec<usize>,
}

impl Arg<'_> {
    fn data_dtype(&self) -> kiln_ir::DType {
        match self.data {
            Data::Scalar(s) => s.dtype(),
            Data::Column(b) => b.dtype(),
            Data::Selection(_) => kiln_ir::DType::I64,
        }
    }
}

/// The concrete dimensions of a type (a selection has its column's).
fn dims(ty: &Type, bindings: &DimBindings) -> Vec<usize> {
    let shape: &[Dim] = match ty {
        Type::Tensor(t) => &t.shape,
        Type::Selection(d) => std::slice::from_ref(d),
    };
    shape
        .iter()
        .map(|d| {
            bindings
                .extent(d)
                .expect("verified: every dimension is bound") as usize
        })
        .collect()
}

/// Row-major strides of `dims`.
fn strides(dims: &[usize]) -> Vec<usize> {
    let mut out = vec![0; dims.len()];
    let mut step = 1;
    for axis in (0..dims.len()).rev() {
        out[axis] = step;
        step *= dims[axis];
    }
    out
}

/// Strides that read an argument of `dims` broadcast to `out` (NumPy's rule:
/// trailing dimensions aligned, a `1` or a missing dimension repeats).
fn broadcast_strides(dims: &[usize], out: &[usize]) -> Vec<usize> {
    let own = strides(dims);
    let lead = out.len() - dims.len();
    (0..out.len())
        .map(|axis| match axis.checked_sub(lead) {
            Some(a) if dims[a] != 1 || out[axis] == 1 => own[a],
            _ => 0,
        })
        .collect()
}

/// Visits every multi-index of `dims` in row-major order with the flat offset
/// each of `strides` gives it.
fn for_each_index(
    dims: &[usize],
    strides: &[Vec<usize>],
    mut f: impl FnMut(&[usize]) -> EvalResult<()>,
) -> EvalResult<()> {
    let total: usize = dims.iter().product();
    let mut index = vec![0usize; dims.len()];
    let mut offsets = vec![0usize; strides.len()];
    for _ in 0..total {
        f(&offsets)?;
        for axis in (0..dims.len()).rev() {
            index[axis] += 1;
            for (o, s) in offsets.iter_mut().zip(strides) {
                *o += s[axis];
            }
            if index[axis] < dims[axis] {
                break;
            }
            for (o, s) in offsets.iter_mut().zip(strides) {
                *o -= s[axis] * dims[axis];
            }
            index[axis] = 0;
        }
    }
    Ok(())
}

fn element(data: &Data, offset: usize) -> Scalar {
    match data {
        Data::Scalar(s) => *s,
        Data::Column(b) => b.get(offset).expect("verified: data has its type's length"),
        Data::Selection(_) => unreachable!("verified: selections are never arguments"),
    }
}

/// Element `offset` of a `gather`'s or an `index_add`'s index, checked
/// to lie in `0..extent`.
fn index_at(data: &Data, offset: usize, extent: usize) -> EvalResult<usize> {
    let at = match element(data, offset) {
        Scalar::I32(k) => i64::from(k),
        Scalar::I64(k) => k,
        _ => unreachable!("verified: an integer index"),
    };
    usize::try_from(at)
        .ok()
        .filter(|&k| k < extent)
        .ok_or(EvalError::IndexOutOfRange)
}

/// Data of `dims` from its elements.
fn tensor_data(dims: &[usize], buffer: Buffer) -> Data {
    if dims.is_empty() {
        Data::Scalar(buffer.get(0).expect("a scalar has one element"))
    } else {
        Data::Column(buffer)
    }
}

/// Evaluates one node on its arguments' data.
fn eval_node(node: &NodeData, args: &[Arg<'_>], out_dims: &[usize]) -> EvalResult<Data> {
    let dtype = node.ty.dtype();
    match &node.op {
        Op::Input { .. } => unreachable!("inputs are bound, not evaluated"),
        Op::Const(c) => Ok(Data::Scalar(*c)),
        Op::Unary(op) => elementwise(args, out_dims, dtype, |x| semantics::unary(*op, x[0])),
        Op::Binary(op) => elementwise(args, out_dims, dtype, |x| {
            semantics::binary(*op, x[0], x[1])
        }),
        Op::Compare(op) => elementwise(args, out_dims, dtype, |x| {
            semantics::compare(*op, x[0], x[1]).map(Scalar::Bool)
        }),
        Op::Select => elementwise(args, out_dims, dtype, |x| {
            Ok(semantics::select(x[0] == Scalar::Bool(true), x[1], x[2]))
        }),
        Op::Cast(to) => elementwise(args, out_dims, dtype, |x| Ok(semantics::cast(x[0], *to))),
        Op::IsIn(set) => elementwise(args, out_dims, dtype, |x| {
            Ok(Scalar::Bool(semantics::isin(x[0], set)))
        }),
        Op::Reduce(op) => {
            let column = column(args[0].data);
            let mut acc = semantics::reduce_identity(*op, column.dtype());
            for row in column.iter() {
                acc = semantics::reduce_step(*op, acc, row)?;
            }
            semantics::reduce_finish(*op, acc, column.len() as u64).map(Data::Scalar)
        }
        Op::Filter => {
            let Buffer::Bool(mask) = column(args[0].data) else {
                unreachable!("verified: filter takes a bool column")
            };
            let rows = mask.iter().enumerate().filter(|(_, &keep)| keep);
            Ok(Data::Selection(
                rows.map(|(row_idx, _)| {
                    u32::try_from(row_idx).expect("columns have fewer than 2^32 rows")
                })
                .collect(),
            ))
        }
        Op::Tensor(t) => {
            let mut buffer = Buffer::with_capacity(t.dtype, t.values.len());
            for v in &t.values {
                buffer.push(*v);
            }
            Ok(tensor_data(out_dims, buffer))
        }
        Op::Reshape(_) => Ok(match args[0].data {
            Data::Scalar(s) if !out_dims.is_empty() => Data::Column({
                let mut b = Buffer::with_capacity(s.dtype(), 1);
                b.push(*s);
                b
            }),
            Data::Column(b) if out_dims.is_empty() => tensor_data(out_dims, b.clone()),
            other => other.clone(),
        }),
        Op::Transpose(perm) => {
            let a = &args[0];
            let own = strides(&a.dims);
            // Result axis i walks source axis perm[i].
            let permuted: Vec<usize> = perm.iter().map(|&p| own[p as usize]).collect();
            let dtype = dtype.expect("verified: a tensor");
            let mut out = Buffer::with_capacity(dtype, out_dims.iter().product());
            for_each_index(out_dims, &[permuted], |offsets| {
                out.push(element(a.data, offsets[0]));
                Ok(())
            })?;
            Ok(tensor_data(out_dims, out))
        }
        Op::ReduceAxes { op, axes, .. } => {
            let a = &args[0];
            let own = strides(&a.dims);
            let reduced: Vec<usize> = axes.iter().map(|&x| x as usize).collect();
            let kept: Vec<usize> = (0..a.dims.len()).filter(|x| !reduced.contains(x)).collect();
            let kept_dims: Vec<usize> = kept.iter().map(|&x| a.dims[x]).collect();
            let red_dims: Vec<usize> = reduced.iter().map(|&x| a.dims[x]).collect();
            let kept_strides: Vec<usize> = kept.iter().map(|&x| own[x]).collect();
            let red_strides: Vec<usize> = reduced.iter().map(|&x| own[x]).collect();
            let in_dtype = args[0].data_dtype();
            let n: usize = red_dims.iter().product();
            let mut out =
                Buffer::with_capacity(dtype.expect("a tensor"), kept_dims.iter().product());
            // Result elements in row-major order of the kept axes (keepdim's
            // 1s do not change it); each folds its elements in row-major
            // order of the reduced axes.
            for_each_index(&kept_dims, &[kept_strides], |base| {
                let mut acc = semantics::reduce_identity(*op, in_dtype);
                for_each_index(&red_dims, std::slice::from_ref(&red_strides), |offsets| {
                    acc = semantics::reduce_step(*op, acc, element(a.data, base[0] + offsets[0]))?;
                    Ok(())
                })?;
                out.push(semantics::reduce_finish(*op, acc, n as u64)?);
                Ok(())
            })?;
            Ok(tensor_data(out_dims, out))
        }
        Op::MatMul => matmul(
            &args[0],
            &args[1],
            out_dims,
            dtype.expect("verified: a tensor"),
        ),
        Op::Concat(axis) => {
            let axis = *axis as usize;
            let dtype = dtype.expect("verified: a tensor");
            let mut out = Buffer::with_capacity(dtype, out_dims.iter().product());
            // Row-major: for each index of the axes before `axis`, each
            // argument's slab (its extent along `axis` times the rest).
            let outer: usize = out_dims[..axis].iter().product();
            for o in 0..outer {
                for a in args {
                    let slab: usize = a.dims[axis..].iter().product();
                    for offset in o * slab..(o + 1) * slab {
                        out.push(element(a.data, offset));
                    }
                }
            }
            Ok(tensor_data(out_dims, out))
        }
        Op::Gather(axis) => {
            let (table, index) = (&args[0], &args[1]);
            let axis = *axis as usize;
            let extent = table.dims[axis];
            let outer: usize = table.dims[..axis].iter().product();
            let inner: usize = table.dims[axis + 1..].iter().product();
            let count: usize = index.dims.iter().product();
            let mut out =
                Buffer::with_capacity(dtype.expect("verified: a tensor"), outer * count * inner);
            // Row-major: for each index of the axes before `axis`, each
            // index's slab of the axes after it.
            for o in 0..outer {
                for i in 0..count {
                    let base = (o * extent + index_at(index.data, i, extent)?) * inner;
                    for offset in base..base + inner {
                        out.push(element(table.data, offset));
                    }
                }
            }
            Ok(tensor_data(out_dims, out))
        }
        Op::IndexAdd(axis) => {
            let (base, index, source) = (&args[0], &args[1], &args[2]);
            let axis = *axis as usize;
            let extent = base.dims[axis];
            let outer: usize = base.dims[..axis].iter().product();
            let inner: usize = base.dims[axis + 1..].iter().product();
            let count: usize = index.dims.iter().product();
            let mut sums: Vec<Scalar> = (0..outer * extent * inner)
                .map(|offset| element(base.data, offset))
                .collect();
            // Row-major over the source, so each element's additions run in
            // the order of the index's positions.
            for o in 0..outer {
                for i in 0..count {
                    let to = (o * extent + index_at(index.data, i, extent)?) * inner;
                    let from = (o * count + i) * inner;
                    for j in 0..inner {
                        let add = element(source.data, from + j);
                        sums[to + j] = semantics::binary(BinaryOp::Add, sums[to + j], add)?;
                    }
                }
            }
            let dtype = dtype.expect("verified: a tensor");
            Ok(tensor_data(out_dims, Buffer::from_scalars(dtype, &sums)))
        }
        Op::Trees(e) => {
            let x = &args[0];
            let (n_rows, n_features) = (x.dims[0], x.dims[1]);
            let mut out = Buffer::with_capacity(e.dtype, n_rows * e.n_outputs());
            let mut row = vec![0.0; n_features];
            for row_idx in 0..n_rows {
                for (f, v) in row.iter_mut().enumerate() {
                    *v = match element(x.data, row_idx * n_features + f) {
                        Scalar::F32(v) => f64::from(v),
                        Scalar::F64(v) => v,
                        _ => unreachable!("verified: float features"),
                    };
                }
                for v in e.eval_row(&row) {
                    out.push(semantics::cast(Scalar::F64(v), e.dtype));
                }
            }
            Ok(tensor_data(out_dims, out))
        }
        Op::Slice(ranges) => {
            let a = &args[0];
            let own = strides(&a.dims);
            // Per axis, the flat offset of each index kept, in order.
            let kept: Vec<Vec<usize>> = ranges
                .iter()
                .zip(&own)
                .zip(&a.dims)
                .map(|((r, &s), &d)| match r {
                    None => (0..d).map(|i| i * s).collect(),
                    Some(r) => r.indices().map(|i| i as usize * s).collect(),
                })
                .collect();
            let mut out = Buffer::with_capacity(
                dtype.expect("verified: a tensor"),
                out_dims.iter().product(),
            );
            let mut index = vec![0usize; out_dims.len()];
            for _ in 0..out_dims.iter().product::<usize>() {
                let offset: usize = index.iter().zip(&kept).map(|(&i, k)| k[i]).sum();
                out.push(element(a.data, offset));
                for axis in (0..out_dims.len()).rev() {
                    index[axis] += 1;
                    if index[axis] < out_dims[axis] {
                        break;
                    }
                    index[axis] = 0;
                }
            }
            Ok(tensor_data(out_dims, out))
        }
        Op::BroadcastTo(_) => {
            let a = &args[0];
            let mut out = Buffer::with_capacity(
                dtype.expect("verified: a tensor"),
                out_dims.iter().product(),
            );
            for_each_index(
                out_dims,
                &[broadcast_strides(&a.dims, out_dims)],
                |offsets| {
                    out.push(element(a.data, offsets[0]));
                    Ok(())
                },
            )?;
            Ok(tensor_data(out_dims, out))
        }
        Op::Conv2d(c) => conv2d(c, &args[0], &args[1], out_dims),
        Op::Pool2d(p) => pool2d(p, &args[0], out_dims),
    }
}

/// The input index of tap `tap` of the window at output index `out` along
/// one axis, if it is inside the input (`None`: in the padding).
fn tap_index(
    out: usize,
    tap: usize,
    stride: u32,
    pad: u32,
    dilation: u32,
    extent: usize,
) -> Option<usize> {
    (out * stride as usize + tap * dilation as usize)
        .checked_sub(pad as usize)
        .filter(|&i| i < extent)
}

/// `conv2d(x, w)` as docs/semantics.md defines it: per output element, the
/// sum from the identity over input channel, kernel row, kernel column of
/// `x * w` (each step a fused multiply-add for floats), where `x` is `+0.0`
/// (or `0`) at taps in the padding.
fn conv2d(c: &kiln_ir::Conv2d, x: &Arg<'_>, w: &Arg<'_>, out_dims: &[usize]) -> EvalResult<Data> {
    let [_, chans, h, wd] = x.dims[..] else {
        unreachable!("verified: NCHW")
    };
    let [n, o, oh, ow] = out_dims[..] else {
        unreachable!("verified: NCHW")
    };
    let [_, per_group, kh, kw] = w.dims[..] else {
        unreachable!("verified: OIHW")
    };
    let dtype = x.data_dtype();
    let out_per_group = o / c.groups as usize;
    let identity = semantics::reduce_identity(kiln_ir::ReduceOp::Sum, dtype);
    let zero = Scalar::zero(dtype);
    let mut out = Buffer::with_capacity(dtype, n * o * oh * ow);
    for batch in 0..n {
        for oc in 0..o {
            let first = oc / out_per_group * per_group;
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut acc = identity;
                    for icg in 0..per_group {
                        let plane = (batch * chans + first + icg) * h;
                        for ky in 0..kh {
                            let iy = tap_index(oy, ky, c.stride[0], c.padding[0], c.dilation[0], h);
                            for kx in 0..kw {
                                let ix =
                                    tap_index(ox, kx, c.stride[1], c.padding[2], c.dilation[1], wd);
                                let a = match (iy, ix) {
                                    (Some(iy), Some(ix)) => element(x.data, (plane + iy) * wd + ix),
                                    _ => zero,
                                };
                                let b =
                                    element(w.data, ((oc * per_group + icg) * kh + ky) * kw + kx);
                                acc = semantics::mul_add(a, b, acc)?;
                            }
                        }
                    }
                    out.push(acc);
                }
            }
        }
    }
    Ok(tensor_data(out_dims, out))
}

/// Max or average pooling as docs/semantics.md defines it: the window's taps
/// inside `x`, row by row, folded with `max` from its identity, or summed
/// from `+0.0` and divided by the window's count ([`kiln_ir::Pool2d::count`]).
fn pool2d(p: &kiln_ir::Pool2d, x: &Arg<'_>, out_dims: &[usize]) -> EvalResult<Data> {
    let [_, _, h, wd] = x.dims[..] else {
        unreachable!("verified: NCHW")
    };
    let [n, chans, oh, ow] = out_dims[..] else {
        unreachable!("verified: NCHW")
    };
    let dtype = x.data_dtype();
    let reduce = match p.kind {
        kiln_ir::PoolKind::Max => kiln_ir::ReduceOp::Max,
        kiln_ir::PoolKind::Avg => kiln_ir::ReduceOp::Sum,
    };
    let mut out = Buffer::with_capacity(dtype, n * chans * oh * ow);
    for plane in 0..n * chans {
        for oy in 0..oh {
            for ox in 0..ow {
                let mut acc = semantics::reduce_identity(reduce, dtype);
                for ky in 0..p.kernel[0] as usize {
                    let Some(iy) = tap_index(oy, ky, p.stride[0], p.padding[0], p.dilation[0], h)
                    else {
                        continue;
                    };
                    for kx in 0..p.kernel[1] as usize {
                        let Some(ix) =
                            tap_index(ox, kx, p.stride[1], p.padding[2], p.dilation[1], wd)
                        else {
                            continue;
                        };
                        let a = element(x.data, (plane * h + iy) * wd + ix);
                        acc = semantics::reduce_step(reduce, acc, a)?;
                    }
                }
                if p.kind == kiln_ir::PoolKind::Avg {
                    let start = |o: usize, axis: usize| {
                        (o * p.stride[axis] as usize) as i64 - i64::from(p.padding[2 * axis])
                    };
                    let count =
                        p.count(0, h as u64, start(oy, 0)) * p.count(1, wd as u64, start(ox, 1));
                    let divisor = semantics::cast(Scalar::I64(count as i64), dtype);
                    acc = semantics::binary(BinaryOp::Div, acc, divisor)?;
                }
                out.push(acc);
            }
        }
    }
    Ok(tensor_data(out_dims, out))
}

/// `a @ b`: each element a sum over `k`, folded in order from the identity
/// (`+0.0`, or `0`), each step `acc + a * b` a fused multiply-add for floats
/// (one rounding, [`semantics::mul_add`]), as docs/semantics.md defines it.
fn matmul(a: &Arg<'_>, b: &Arg<'_>, out_dims: &[usize], dtype: kiln_ir::DType) -> EvalResult<Data> {
    // 1-D operands as matrices: a row [1, k], a column [k, 1].
    let a_dims: Vec<usize> = if a.dims.len() == 1 {
        vec![1, a.dims[0]]
    } else {
        a.dims.clone()
    };
    let b_dims: Vec<usize> = if b.dims.len() == 1 {
        vec![b.dims[0], 1]
    } else {
        b.dims.clone()
    };
    let (m, k) = (a_dims[a_dims.len() - 2], a_dims[a_dims.len() - 1]);
    let n = b_dims[b_dims.len() - 1];
    let batch_a = &a_dims[..a_dims.len() - 2];
    let batch_b = &b_dims[..b_dims.len() - 2];
    let rank = batch_a.len().max(batch_b.len());
    let batch: Vec<usize> = (0..rank)
        .map(|axis| {
            let get = |d: &[usize]| (axis + d.len()).checked_sub(rank).map_or(1, |i| d[i]);
            get(batch_a).max(get(batch_b))
        })
        .collect();
    // Strides of whole matrices within each operand's batch.
    let sa: Vec<usize> = broadcast_strides(batch_a, &batch)
        .iter()
        .map(|s| s * m * k)
        .collect();
    let sb: Vec<usize> = broadcast_strides(batch_b, &batch)
        .iter()
        .map(|s| s * k * n)
        .collect();
    let total: usize = out_dims.iter().product();
    let mut out = Buffer::with_capacity(dtype, total);
    let identity = semantics::reduce_identity(kiln_ir::ReduceOp::Sum, dtype);
    for_each_index(&batch, &[sa, sb], |offsets| {
        let (oa, ob) = (offsets[0], offsets[1]);
        for i in 0..m {
            for j in 0..n {
                let mut acc = identity;
                for kk in 0..k {
                    let x = element(a.data, oa + i * k + kk);
                    let y = element(b.data, ob + kk * n + j);
                    acc = semantics::mul_add(x, y, acc)?;
                }
                out.push(acc);
            }
        }
        Ok(())
    })?;
    Ok(tensor_data(out_dims, out))
}

fn column(data: &Data) -> &Buffer {
    match data {
        Data::Column(b) => b,
        other => unreachable!("verified: a column argument, got {}", other.describe()),
    }
}

/// Applies `f` element by element, broadcasting the arguments to `out_dims`.
fn elementwise(
    args: &[Arg<'_>],
    out_dims: &[usize],
    dtype: Option<kiln_ir::DType>,
    f: impl Fn(&[Scalar]) -> EvalResult<Scalar>,
) -> EvalResult<Data> {
    let dtype = dtype.expect("verified: elementwise results are tensors");
    let strides: Vec<Vec<usize>> = args
        .iter()
        .map(|a| match a.data {
            Data::Scalar(_) => vec![0; out_dims.len()],
            _ => broadcast_strides(&a.dims, out_dims),
        })
        .collect();
    let mut out = Buffer::with_capacity(dtype, out_dims.iter().product());
    let mut operands = Vec::with_capacity(args.len());
    for_each_index(out_dims, &strides, |offsets| {
        operands.clear();
        operands.extend(args.iter().zip(offsets).map(|(a, &o)| element(a.data, o)));
        let pushed = out.push(f(&operands)?);
        debug_assert!(pushed, "semantics return the result dtype");
        Ok(())
    })?;
    Ok(tensor_data(out_dims, out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_ir::{text, verify};

    fn run_text(src: &str, inputs: &[Data]) -> ExecResult<Vec<Data>> {
        let graph = text::parse(src).expect("parses");
        run(&verify(graph).expect("verifies"), inputs)
    }

    const DIV: &str = "v0: i64[n] = input \"a\"\nv1: i64[n] = input \"b\"\nv2 \"q\": i64[n] = floordiv v0, v1\noutput \"q\" = v2\n";

    #[test]
    fn columns_broadcast_and_divide() {
        let a = Data::Column(Buffer::I64(vec![7, -7, i64::MIN]));
        let b = Data::Column(Buffer::I64(vec![2, 2, -1]));
        assert_eq!(
            run_text(DIV, &[a, b]),
            Ok(vec![Data::Column(Buffer::I64(vec![3, -4, i64::MIN]))])
        );
    }

    #[test]
    fn bad_inputs_are_errors() {
        let col = |v: Vec<i64>| Data::Column(Buffer::I64(v));
        let err = |inputs: &[Data]| run_text(DIV, inputs).expect_err("bad input").to_string();
        assert_eq!(err(&[col(vec![1])]), "the graph takes 2 input(s), got 1");
        assert_eq!(
            err(&[col(vec![1]), col(vec![1, 2])]),
            "input `b` has 2 rows, but dimension `n` is 1"
        );
        assert_eq!(
            err(&[col(vec![1]), Data::Scalar(Scalar::I64(1))]),
            "input `b` must be i64[n], got an i64 scalar"
        );
        assert_eq!(
            err(&[col(vec![1]), Data::from(vec![1.0])]),
            "input `b` must be i64[n], got an f64 column of 1 rows"
        );
        assert_eq!(
            err(&[col(vec![1, 2]), col(vec![1, 0])]),
            "integer division by zero in v2 (`q`)"
        );
    }

    #[test]
    fn huge_broadcasts_are_errors() {
        let src = "v0: f32[100000, 1] = input \"a\"\nv1: f32[1, 100000] = input \"b\"\nv2: f32[100000, 100000] = add v0, v1\noutput \"c\" = v2\n";
        let col = Data::Column(Buffer::F32(vec![1.0; 100_000]));
        let err = run_text(src, &[col.clone(), col])
            .expect_err("too big")
            .to_string();
        assert!(err.contains("10000000000 elements"), "{err}");
    }

    #[test]
    fn dead_nodes_do_not_fail() {
        let src = "v0: i32 = input \"a\"\nv1: i32 = const 0\nv2: i32 = div v0, v1\nv3: i32 = neg v0\noutput \"r\" = v3\n";
        assert_eq!(
            run_text(src, &[Data::Scalar(Scalar::I32(5))]),
            Ok(vec![Data::Scalar(Scalar::I32(-5))])
        );
    }
}
