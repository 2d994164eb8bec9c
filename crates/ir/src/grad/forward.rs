//! Forward mode: one sweep from the inputs to the outputs per parameter,
//! each node's tangent (its derivative with respect to the parameter)
//! computed from its arguments' tangents through the same local
//! derivatives reverse mode uses.
//!
//! For a scalar parameter broadcast over a column of rows this gives the
//! derivative of every row's result at once, a column of the Jacobian
//! that Gauss–Newton and Levenberg–Marquardt fits need; reverse mode
//! would give only its sum. A tangent is kept as small as broadcasting
//! allows: the parameter's own is the scalar `1`.
//!
//! A division by `d` in a tangent (the quotient rule's `t / b`, `log`'s
//! `t / x`, `sqrt`'s `t / 2y`) is a multiplication by `1 / d` where that
//! saves divisions: when `d` depends on no parameter (the reciprocal is
//! then the same at every step of a fit, which computes it once: see
//! `hoist`), and when the node carries two parameters' tangents or more
//! (one reciprocal for all of them). A division costs 4 to 16 times a
//! multiplication; `t * (1 / d)` differs from `t / d` by a rounding, and
//! overflows where `d` is subnormal.

use super::reverse::wrt_inputs;
use super::rules::{self, Lin};
use super::{active_mask, fail, reduction, Ad, GradResult};
use crate::entities::Value;
use crate::graph::Graph;
use crate::op::{BinaryOp, Op, ReduceOp, UnaryOp};
use crate::types::DType;
use crate::verify::Verified;
use crate::EntityRef;

/// The derivatives of every output with respect to each scalar input named
/// in `wrt`, element by element: a graph with the same inputs and outputs,
/// then one output `d<out>/d<p>` of the output's type for each output `out`
/// and parameter `p`, in that order (parameters inner).
pub fn jacobian(graph: &Verified, wrt: &[&str]) -> GradResult<Graph> {
    let g = graph.graph();
    let params = wrt_inputs(g, wrt)?;
    for (&p, name) in params.iter().zip(wrt) {
        if !g.ty(p).as_tensor().is_some_and(|t| t.is_scalar()) {
            return fail(
                Some(p),
                format!(
                    "the Jacobian is taken with respect to scalar inputs; `{name}` is {}",
                    g.ty(p)
                ),
            );
        }
    }
    for out in g.outputs() {
        if !g.ty(out.value).dtype().is_some_and(DType::is_float) {
            return fail(
                Some(out.value),
                format!("cannot differentiate output `{}` of type {}: only floats (f32, f64) have derivatives", out.name, g.ty(out.value)),
            );
        }
    }
    let mut ad = Ad::new(graph);
    let masks: Vec<_> = params.iter().map(|&p| active_mask(g, &[p])).collect();
    let mut divisions = Divisions {
        shared: g
            .nodes()
            .map(|(v, _)| masks.iter().filter(|m| m[v]).count() > 1)
            .collect(),
        params: params.clone(),
        varies: Vec::with_capacity(g.len()),
    };
    let mut columns = Vec::with_capacity(params.len());
    for (&p, active) in params.iter().zip(&masks) {
        columns.push(tangents(&mut ad, g, p, active, &mut divisions)?);
    }
    ad.at = None;
    for out in g.outputs() {
        for (tangent, name) in columns.iter().zip(wrt) {
            let shape = ad.shape(out.value);
            let d = match tangent[out.value.index()] {
                Some(t) => ad.expand(t, &shape)?,
                None => ad.zeros(ad.dtype(out.value), &shape)?,
            };
            let label = format!("d{}/d{name}", out.name);
            if g.outputs().iter().any(|o| o.name == label) {
                return fail(
                    None,
                    format!("the graph already has an output `{label}`, the name of a derivative"),
                );
            }
            ad.b.output(&label, d);
        }
    }
    Ok(ad.finish())
}

/// Where a tangent's division by `d` becomes a multiplication by `1 / d`
/// (the module's doc).
struct Divisions {
    /// For each node of the original graph: whether it carries the
    /// tangents of two parameters or more.
    shared: Vec<bool>,
    params: Vec<Value>,
    /// For each node of the graph being built, from the first: whether it
    /// depends on a parameter (extended as nodes are appended).
    varies: Vec<bool>,
}

impl Divisions {
    /// Whether the tangent of node `v` multiplies by `1 / d` rather than
    /// divide by `d`.
    fn by_reciprocal(&mut self, ad: &Ad, v: Value, d: Value) -> bool {
        let graph = ad.b.graph();
        while self.varies.len() <= d.index() {
            let at = Value::new(self.varies.len());
            let varies = self.params.contains(&at)
                || graph.node(at).args.iter().any(|a| self.varies[a.index()]);
            self.varies.push(varies);
        }
        self.shared[v.index()] || !self.varies[d.index()]
    }
}

/// The local derivatives of elementwise node `v` ([`rules::elementwise`]),
/// its divisions made multiplications by a reciprocal where
/// [`Divisions::by_reciprocal`] says so: the quotient rule as
/// `(t_a - q t_b) · (1 / b)` (`q` the node), every other `t / d` as
/// `t · (1 / d)`.
fn local(
    ad: &mut Ad,
    v: Value,
    op: &Op,
    args: &[Value],
    divisions: &mut Divisions,
) -> GradResult<Vec<Option<Lin>>> {
    let mut lins = rules::elementwise(ad, v, op, args)?;
    if let Op::Binary(BinaryOp::Div) = op {
        if divisions.by_reciprocal(ad, v, args[1]) {
            let r = ad.reciprocal(args[1])?;
            let q_r = ad.mul(v, r)?;
            let neg = ad.unary(UnaryOp::Neg, q_r)?;
            return Ok(vec![Some(Lin::Mul(r)), Some(Lin::Mul(neg))]);
        }
        return Ok(lins);
    }
    for lin in lins.iter_mut().flatten() {
        if let Lin::Div(d) = *lin {
            if divisions.by_reciprocal(ad, v, d) {
                *lin = Lin::Mul(ad.reciprocal(d)?);
            }
        }
    }
    Ok(lins)
}

/// The tangent of every value with respect to the scalar input `p`, the
/// values `active` marks.
fn tangents(
    ad: &mut Ad,
    g: &Graph,
    p: Value,
    active: &crate::SecondaryMap<Value, bool>,
    divisions: &mut Divisions,
) -> GradResult<Vec<Option<Value>>> {
    let mut tan: Vec<Option<Value>> = vec![None; g.len()];
    tan[p.index()] = Some(ad.konst(ad.dtype(p), 1.0));
    for (v, node) in g.nodes() {
        if !active[v] || v == p {
            continue;
        }
        ad.at = Some(v);
        tan[v.index()] = push(ad, v, &node.op, &node.args, &tan, divisions)?;
    }
    Ok(tan)
}

/// The tangent of node `v` from its arguments' tangents `tan`.
fn push(
    ad: &mut Ad,
    v: Value,
    op: &Op,
    args: &[Value],
    tan: &[Option<Value>],
    divisions: &mut Divisions,
) -> GradResult<Option<Value>> {
    let t = |arg: Value| tan[arg.index()];
    let full = |ad: &mut Ad, arg: Value| -> GradResult<Value> {
        let shape = ad.shape(arg);
        match t(arg) {
            Some(ta) => ad.expand(ta, &shape),
            None => ad.zeros(ad.dtype(arg), &shape),
        }
    };
    Ok(Some(match op {
        Op::Unary(_) | Op::Binary(_) | Op::Select | Op::Compare(_) | Op::IsIn(_) => {
            let lins = local(ad, v, op, args, divisions)?;
            let mut sum = None;
            for (&arg, lin) in args.iter().zip(lins) {
                if let (Some(lin), Some(ta)) = (lin, t(arg)) {
                    let c = lin.apply(ad, ta)?;
                    sum = Some(match sum {
                        Some(s) => ad.add(s, c)?,
                        None => c,
                    });
                }
            }
            return Ok(sum);
        }
        Op::Cast(to) => match t(args[0]) {
            Some(ta) => ad.cast(ta, *to)?,
            None => return Ok(None),
        },
        Op::Reduce(_) | Op::ReduceAxes { .. } => {
            let x = args[0];
            let Some(lin) = rules::reduction_lin(ad, v, op, x)? else {
                return Ok(None);
            };
            let tx = full(ad, x)?;
            let c = lin.apply(ad, tx)?;
            let (_, axes, keepdim) = reduction(op).expect("a reduction node");
            match op {
                Op::Reduce(_) => ad.op(Op::Reduce(ReduceOp::Sum), &[c])?,
                _ => ad.reduce_axes(ReduceOp::Sum, c, axes, keepdim)?,
            }
        }
        Op::Transpose(_) | Op::Reshape(_) | Op::BroadcastTo(_) | Op::Slice(_) => {
            let tx = full(ad, args[0])?;
            ad.op(op.clone(), &[tx])?
        }
        Op::Concat(_) => {
            let mut parts = Vec::with_capacity(args.len());
            for &arg in args {
                parts.push(full(ad, arg)?);
            }
            ad.op(op.clone(), &parts)?
        }
        // Bilinear, as `matmul`: `conv2d(t_x, w) + conv2d(x, t_w)`.
        Op::MatMul | Op::Conv2d(_) => {
            let (a, b) = (args[0], args[1]);
            let mut sum = None;
            if t(a).is_some() {
                let ta = full(ad, a)?;
                sum = Some(ad.op(op.clone(), &[ta, b])?);
            }
            if t(b).is_some() {
                let tb = full(ad, b)?;
                let c = ad.op(op.clone(), &[a, tb])?;
                sum = Some(match sum {
                    Some(s) => ad.add(s, c)?,
                    None => c,
                });
            }
            return Ok(sum);
        }
        Op::Input { .. } | Op::Const(_) | Op::Tensor(_) => return Ok(None),
        Op::Pool2d(attrs) => {
            let tx = full(ad, args[0])?;
            super::pool::tangent(ad, args[0], v, attrs, tx)?
        }
        // Linear in the table, as in `base` and `source`: the same op of
        // the tangents, at the same index.
        Op::Gather(_) => match t(args[0]) {
            Some(ta) => {
                let shape = ad.shape(args[0]);
                let ta = ad.expand(ta, &shape)?;
                ad.op(op.clone(), &[ta, args[1]])?
            }
            None => return Ok(None),
        },
        Op::IndexAdd(_) => {
            if t(args[0]).is_none() && t(args[2]).is_none() {
                return Ok(None);
            }
            let (tb, ts) = (full(ad, args[0])?, full(ad, args[2])?);
            ad.op(op.clone(), &[tb, args[1], ts])?
        }
        Op::Filter | Op::Trees(_) => {
            return fail(
                Some(v),
                format!("kiln does not differentiate `{}` yet", op.mnemonic()),
            )
        }
    }))
}
