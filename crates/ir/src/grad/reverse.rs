//! Reverse mode: one sweep from the output back to the inputs, each node's
//! adjoint (the derivative of the seeded sum with respect to it) pushed
//! through its op's adjoint onto its arguments.
//!
//! An adjoint is kept as small as broadcasting allows: the seed `1` is a
//! scalar, and a `sum` passes its cotangent on unexpanded. It is broadcast
//! to its value's full shape where a non-elementwise op needs that, for the
//! gradient outputs, and before a contribution to an argument that was
//! broadcast is summed back to the argument's shape.

use super::rules;
use super::{active_mask, fail, float_input, Ad, GradResult};
use crate::entities::Value;
use crate::graph::Graph;
use crate::op::{Op, SliceRange};
use crate::types::{Dim, Shape};
use crate::verify::Verified;
use crate::EntityRef;

/// The gradient of output `of` (the graph's only output when `None`) with
/// respect to the inputs named in `wrt`: a graph with the same inputs and
/// outputs, then one output `grad_<x>` per name `x`, of `x`'s type.
///
/// Without `seed`, it is the gradient of the sum of the output's elements
/// (torch's `y.backward(torch.ones_like(y))`). With `seed`, the graph takes
/// one more input, `grad_<of>` of the output's type (the cotangent), and
/// returns the gradient of the sum of the output times it: a
/// vector-Jacobian product.
pub fn gradient(graph: &Verified, of: Option<&str>, wrt: &[&str], seed: bool) -> GradResult<Graph> {
    let g = graph.graph();
    let out = output_named(g, of)?;
    let xs = wrt_inputs(g, wrt)?;
    let active = active_mask(g, &xs);
    let mut ad = Ad::new(graph);
    let mut adj: Vec<Option<Value>> = vec![None; g.len()];
    let out_ty = g.ty(out.1).clone();
    let seed_value = if seed {
        let name = format!("grad_{}", out.0);
        if g.inputs().iter().any(|i| i.name == name) {
            return fail(
                None,
                format!("the graph already has an input `{name}`, the name of the cotangent"),
            );
        }
        ad.b.input(&name, out_ty)
    } else {
        ad.konst(ad.dtype(out.1), 1.0)
    };
    if active[out.1] {
        adj[out.1.index()] = Some(seed_value);
    }
    for (v, node) in g.nodes().rev() {
        let Some(gv) = adj[v.index()] else { continue };
        if !active[v] {
            continue;
        }
        ad.at = Some(v);
        for (arg, contrib) in pull(&mut ad, v, &node.op, &node.args, gv, &active)? {
            adj[arg.index()] = Some(match adj[arg.index()] {
                Some(prev) => ad.add(prev, contrib)?,
                None => contrib,
            });
        }
    }
    ad.at = None;
    for (&x, name) in xs.iter().zip(wrt) {
        let out_name = format!("grad_{name}");
        if g.outputs().iter().any(|o| o.name == out_name) {
            return fail(
                None,
                format!("the graph already has an output `{out_name}`, the name of a gradient"),
            );
        }
        let shape = ad.shape(x);
        let grad = match adj[x.index()] {
            Some(a) => ad.expand(a, &shape)?,
            None => ad.zeros(ad.dtype(x), &shape)?,
        };
        ad.b.output(&out_name, grad);
    }
    Ok(ad.finish())
}

/// The output called `of`, or the only output; it must be a float.
pub(super) fn output_named(g: &Graph, of: Option<&str>) -> GradResult<(String, Value)> {
    let out = match of {
        Some(name) => g.outputs().iter().find(|o| o.name == name).ok_or_else(|| {
            let names: Vec<&str> = g.outputs().iter().map(|o| o.name.as_str()).collect();
            super::GradError {
                node: None,
                message: format!(
                    "the graph has no output `{name}` to differentiate (it has {})",
                    names.join(", ")
                ),
            }
        })?,
        None => match g.outputs() {
            [one] => one,
            outs => {
                return fail(
                    None,
                    format!(
                        "the graph has {} outputs: name the one to differentiate",
                        outs.len()
                    ),
                )
            }
        },
    };
    if !g
        .ty(out.value)
        .dtype()
        .is_some_and(crate::types::DType::is_float)
    {
        return fail(
            Some(out.value),
            format!("cannot differentiate output `{}` of type {}: only floats (f32, f64) have derivatives", out.name, g.ty(out.value)),
        );
    }
    Ok((out.name.clone(), out.value))
}

/// The inputs named in `wrt`, each once, each a float.
pub(super) fn wrt_inputs(g: &Graph, wrt: &[&str]) -> GradResult<Vec<Value>> {
    if wrt.is_empty() {
        return fail(
            None,
            "name at least one input to differentiate with respect to".to_string(),
        );
    }
    let mut xs = Vec::with_capacity(wrt.len());
    for (i, name) in wrt.iter().enumerate() {
        if wrt[..i].contains(name) {
            return fail(None, format!("input `{name}` is named twice"));
        }
        xs.push(float_input(g, name)?);
    }
    Ok(xs)
}

/// The contributions of node `v`'s adjoint `gv` to its active arguments.
fn pull(
    ad: &mut Ad,
    v: Value,
    op: &Op,
    args: &[Value],
    gv: Value,
    active: &crate::SecondaryMap<Value, bool>,
) -> GradResult<Vec<(Value, Value)>> {
    let mut out = Vec::new();
    match op {
        Op::Input { .. } | Op::Const(_) | Op::Tensor(_) => {}
        Op::Unary(_) | Op::Binary(_) | Op::Select | Op::Compare(_) | Op::IsIn(_) => {
            let lins = rules::elementwise(ad, v, op, args)?;
            for (&arg, lin) in args.iter().zip(lins) {
                if let (Some(lin), true) = (lin, active[arg]) {
                    let c = lin.apply(ad, gv)?;
                    out.push((arg, sum_to(ad, v, arg, c)?));
                }
            }
        }
        Op::Cast(_) => {
            if active[args[0]] {
                let dtype = ad.dtype(args[0]);
                out.push((args[0], ad.cast(gv, dtype)?));
            }
        }
        Op::Reduce(_) | Op::ReduceAxes { .. } => {
            let x = args[0];
            if let Some(lin) = rules::reduction_lin(ad, v, op, x)? {
                let g = kept_adjoint(ad, v, op, x, gv)?;
                out.push((x, lin.apply(ad, g)?));
            }
        }
        Op::Transpose(perm) => {
            let g = full(ad, v, gv)?;
            let mut inverse = vec![0u32; perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                inverse[p as usize] = i as u32;
            }
            out.push((args[0], ad.op(Op::Transpose(inverse), &[g])?));
        }
        Op::Reshape(_) => {
            let g = full(ad, v, gv)?;
            let shape = ad.shape(args[0]);
            out.push((args[0], ad.reshape(g, &shape)?));
        }
        Op::BroadcastTo(_) => out.push((args[0], sum_to(ad, v, args[0], gv)?)),
        Op::MatMul => {
            let g = full(ad, v, gv)?;
            for (i, c) in matmul(ad, args[0], args[1], g)?.into_iter().enumerate() {
                if active[args[i]] {
                    out.push((args[i], c));
                }
            }
        }
        Op::Concat(axis) => {
            let g = full(ad, v, gv)?;
            let mut offset = 0;
            for &arg in args {
                let Dim::Fixed(extent) = ad.shape(arg)[*axis as usize] else {
                    return fail(
                        Some(v),
                        "cannot differentiate `concat` along a symbolic axis".to_string(),
                    );
                };
                if active[arg] {
                    let range = SliceRange {
                        start: offset,
                        stop: offset + extent,
                        step: 1,
                    };
                    out.push((arg, slice_axis(ad, g, *axis as usize, range)?));
                }
                offset += extent;
            }
        }
        Op::Slice(ranges) => {
            let g = full(ad, v, gv)?;
            out.push((args[0], unslice(ad, v, args[0], ranges, g)?));
        }
        Op::Conv2d(attrs) => {
            let g = full(ad, v, gv)?;
            let (x, w) = (args[0], args[1]);
            let (dx, dw) = super::conv::conv2d(ad, x, w, attrs, g, active[x], active[w])?;
            out.extend(dx.map(|d| (x, d)));
            out.extend(dw.map(|d| (w, d)));
        }
        Op::Pool2d(attrs) => {
            let g = full(ad, v, gv)?;
            out.push((args[0], super::pool::adjoint(ad, args[0], v, attrs, g)?));
        }
        // `gather`'s adjoint adds each element's adjoint back at its index
        // (repeated indices sum in index order); `index_add`'s passes its
        // adjoint to `base` and gathers it for `source`.
        Op::Gather(axis) => {
            let (table, index) = (args[0], args[1]);
            let g = full(ad, v, gv)?;
            let zeros = ad.zeros(ad.dtype(table), &ad.shape(table))?;
            out.push((table, ad.op(Op::IndexAdd(*axis), &[zeros, index, g])?));
        }
        Op::IndexAdd(axis) => {
            let (base, index, source) = (args[0], args[1], args[2]);
            let g = full(ad, v, gv)?;
            if active[source] {
                out.push((source, ad.op(Op::Gather(*axis), &[g, index])?));
            }
            if active[base] {
                out.push((base, g));
            }
        }
        Op::Filter | Op::Trees(_) => {
            return fail(
                Some(v),
                format!("kiln does not differentiate `{}` yet", op.mnemonic()),
            )
        }
    }
    Ok(out)
}

/// A contribution `c` of node `v`'s adjoint to its argument `arg`, which
/// `v` broadcast: summed over the axes it was broadcast along. `c` is first
/// broadcast to `v`'s shape, since a lazily small adjoint stands for one
/// value per element of `v` (the seed `1` for each of a column's rows).
fn sum_to(ad: &mut Ad, v: Value, arg: Value, c: Value) -> GradResult<Value> {
    let to = ad.shape(arg);
    if to == ad.shape(v) {
        return Ok(c);
    }
    let c = full(ad, v, c)?;
    ad.unbroadcast(c, &to)
}

/// The adjoint broadcast to `v`'s full shape.
fn full(ad: &mut Ad, v: Value, gv: Value) -> GradResult<Value> {
    let shape = ad.shape(v);
    ad.expand(gv, &shape)
}

/// A reduction's adjoint in the shape the reduction has with `keepdim`,
/// so that it broadcasts against the reduced argument.
fn kept_adjoint(ad: &mut Ad, v: Value, op: &Op, x: Value, gv: Value) -> GradResult<Value> {
    if ad.shape(gv).is_empty() {
        return Ok(gv);
    }
    let g = full(ad, v, gv)?;
    match op {
        Op::ReduceAxes {
            axes,
            keepdim: false,
            ..
        } => {
            let kept = ad.kept_shape(x, axes);
            ad.reshape(g, &kept)
        }
        _ => Ok(g),
    }
}

/// `a[..., range, ...]` along one axis.
fn slice_axis(ad: &mut Ad, g: Value, axis: usize, range: SliceRange) -> GradResult<Value> {
    let mut ranges = vec![None; ad.shape(g).len()];
    ranges[axis] = Some(range);
    ad.op(Op::Slice(ranges), &[g])
}

/// The adjoint of `y = x[ranges]`: `g` put back where each kept element came
/// from, zeros elsewhere. Per sliced axis: reversed for a negative step,
/// spread out with zeros between for a step above 1, then padded with zeros.
fn unslice(
    ad: &mut Ad,
    v: Value,
    x: Value,
    ranges: &[Option<SliceRange>],
    g: Value,
) -> GradResult<Value> {
    let x_shape = ad.shape(x);
    let mut g = g;
    for (axis, range) in ranges.iter().enumerate() {
        let Some(range) = range else { continue };
        let Dim::Fixed(extent) = x_shape[axis] else {
            return fail(
                Some(v),
                "cannot differentiate `slice` of a symbolic axis".to_string(),
            );
        };
        let len = range.len();
        if range.step < 0 {
            let back = SliceRange {
                start: 0,
                stop: len,
                step: -1,
            };
            g = slice_axis(ad, g, axis, back)?;
        }
        let by = range.step.unsigned_abs();
        g = ad.spread(g, axis, by)?;
        let before = range.start as i64;
        let after = (extent - (range.start + (len - 1) * by + 1)) as i64;
        g = ad.pad(g, axis, before, after)?;
    }
    Ok(g)
}

/// The adjoints of `y = a @ b` for the full adjoint `g`, each summed back
/// to its argument's shape: `g @ bᵀ` and `aᵀ @ g`, with a 1-D `a` as a row
/// and a 1-D `b` as a column.
fn matmul(ad: &mut Ad, a: Value, b: Value, g: Value) -> GradResult<[Value; 2]> {
    let (sa, sb, sg) = (ad.shape(a), ad.shape(b), ad.shape(g));
    let with = |shape: &Shape, tail: &[Dim]| -> Shape {
        let mut s = shape.clone();
        s.extend_from_slice(tail);
        s
    };
    match (sa.len(), sb.len()) {
        (1, 1) => Ok([ad.mul(g, b)?, ad.mul(g, a)?]),
        (1, _) => {
            // y [B.., n] = a [k] @ b [B.., k, n]
            let batch = &sg[..sg.len() - 1];
            let g_row = ad.reshape(
                g,
                &with(&batch.to_vec(), &[Dim::Fixed(1), sg[sg.len() - 1].clone()]),
            )?;
            let bt = swap_last(ad, b)?;
            let ga = ad.op(Op::MatMul, &[g_row, bt])?;
            let a_col = ad.reshape(a, &vec![sa[0].clone(), Dim::Fixed(1)])?;
            let gb = ad.op(Op::MatMul, &[a_col, g_row])?;
            Ok([ad.unbroadcast(ga, &sa)?, ad.unbroadcast(gb, &sb)?])
        }
        (_, 1) => {
            // y [B.., m] = a [B.., m, k] @ b [k]
            let batch = sg[..sg.len() - 1].to_vec();
            let g_col = ad.reshape(g, &with(&batch, &[sg[sg.len() - 1].clone(), Dim::Fixed(1)]))?;
            let b_row = ad.reshape(b, &vec![Dim::Fixed(1), sb[0].clone()])?;
            let ga = ad.op(Op::MatMul, &[g_col, b_row])?;
            let at = swap_last(ad, a)?;
            let gb = ad.op(Op::MatMul, &[at, g_col])?;
            let gb = ad.reshape(gb, &with(&batch, &[sb[0].clone()]))?;
            Ok([ad.unbroadcast(ga, &sa)?, ad.unbroadcast(gb, &sb)?])
        }
        _ => {
            let bt = swap_last(ad, b)?;
            let ga = ad.op(Op::MatMul, &[g, bt])?;
            let at = swap_last(ad, a)?;
            let gb = ad.op(Op::MatMul, &[at, g])?;
            Ok([ad.unbroadcast(ga, &sa)?, ad.unbroadcast(gb, &sb)?])
        }
    }
}

/// `a` with its last two axes swapped.
fn swap_last(ad: &mut Ad, a: Value) -> GradResult<Value> {
    let rank = ad.shape(a).len() as u32;
    let mut perm: Vec<u32> = (0..rank).collect();
    perm.swap(rank as usize - 2, rank as usize - 1);
    ad.op(Op::Transpose(perm), &[a])
}
