//! Differentiation as a graph transform: a verified graph in, an ordinary
//! graph out that computes the original outputs and their derivatives, so
//! every engine compiles it and the interpreter checks it.
//!
//! - [`gradient`] is reverse mode: the gradient of one output's elements'
//!   sum (or of its product with a cotangent input, a vector-Jacobian
//!   product) with respect to named inputs of any shape.
//! - [`jacobian`] is forward mode: the derivative of every output,
//!   element by element, with respect to scalar inputs. That is the
//!   Jacobian a least-squares fit of an expression's constants needs: few
//!   parameters, a column of rows.
//!
//! Both modes read one table of local derivatives (`rules.rs`), whose
//! choices at the points where a function has no derivative are torch's
//! (docs/semantics.md, "Derivatives"); `conv2d`'s adjoint is two `conv2d`s
//! (`conv.rs`; [`conv2d_backward`] for importers), a pool's a sum over its
//! window's taps (`pool.rs`; [`pool2d_backward`]). The derivative nodes are appended
//! after the original nodes, so the ordering invariant holds; the caller
//! verifies the result like any graph.
//!
//! Only float values carry derivatives. An integer or `bool` value on the
//! path (a comparison, a cast to an integer) passes none, as in torch; an
//! input or output of the request that is not a float is an error naming
//! it, and so is an op this module does not differentiate (`gather`, tree
//! ensembles, `nextafter`).
//!
//! Nothing here recurses: both modes sweep the node arena once.

mod conv;
mod forward;
mod pool;
mod reverse;
mod rules;

use crate::builder::Builder;
use crate::entities::Value;
use crate::graph::Graph;
use crate::op::{BinaryOp, CmpOp, Op, ReduceOp, UnaryOp};
use crate::scalar::Scalar;
use crate::types::{DType, Dim, Shape};
use crate::verify::Verified;

pub use forward::jacobian;
pub use reverse::gradient;

/// The adjoints of `y = conv2d(x, w)` for `y`'s adjoint `g`,
/// appended to `builder`: `∂x` and `∂w`, each where `want` asks for it.
/// What reverse mode builds for a `conv2d` node, for frontends whose
/// graphs carry the backward op itself (aten's `convolution_backward`).
pub fn conv2d_backward(
    builder: &mut Builder,
    x: Value,
    w: Value,
    attrs: &crate::op::Conv2d,
    g: Value,
    want: [bool; 2],
) -> GradResult<[Option<Value>; 2]> {
    let (dx, dw) = on(builder, |ad| {
        conv::conv2d(ad, x, w, attrs, g, want[0], want[1])
    })?;
    Ok([dx, dw])
}

/// The adjoint `∂x` of `y = pool2d(x)` for `y`'s adjoint `g`, appended to
/// `builder`: what reverse mode builds for a `max_pool2d` or `avg_pool2d`
/// node, for frontends whose graphs carry the backward op itself (aten's
/// `max_pool2d_with_indices_backward`, `avg_pool2d_backward`).
pub fn pool2d_backward(
    builder: &mut Builder,
    x: Value,
    y: Value,
    attrs: &crate::op::Pool2d,
    g: Value,
) -> GradResult<Value> {
    on(builder, |ad| pool::adjoint(ad, x, y, attrs, g))
}

/// The adjoint `∂x` of a max pool of `x` for its adjoint `g`, from the
/// pool's `indices` (each window's tap as an index within its plane, as
/// [`max_pool2d_indices`] and torch's `max_pool2d_with_indices` give
/// them): each window's `g` added at its index, window by window in
/// row-major order, as torch's CPU kernel adds them (aten's
/// `max_pool2d_with_indices_backward`); an index outside its plane is a
/// run-time error of the `index_add`. Over a symbolic batch or channels,
/// [`pool2d_backward`]'s (`y = max_pool2d(x)` by `attrs`).
pub fn max_pool2d_backward(
    builder: &mut Builder,
    (x, y): (Value, Value),
    attrs: &crate::op::Pool2d,
    indices: Value,
    g: Value,
) -> GradResult<Value> {
    on(builder, |ad| match pool::counted(&ad.shape(x)) {
        Some(planes) => pool::scatter_to_planes(ad, planes, indices, g),
        None => pool::adjoint(ad, x, y, attrs, g),
    })
}

/// The indices of a max pool `y = max_pool2d(x)`: for each window, the
/// index within its plane (`row * width + column`) of the tap its
/// derivative goes to (torch's `max_pool2d_with_indices`), `i64`.
pub fn max_pool2d_indices(
    builder: &mut Builder,
    x: Value,
    y: Value,
    attrs: &crate::op::Pool2d,
) -> GradResult<Value> {
    on(builder, |ad| pool::indices(ad, x, y, attrs))
}

/// `f` building on a frontend's `builder`.
fn on<T>(builder: &mut Builder, f: impl FnOnce(&mut Ad) -> GradResult<T>) -> GradResult<T> {
    let taken = std::mem::replace(builder, Builder::new(""));
    let mut ad = Ad { b: taken, at: None };
    let result = f(&mut ad);
    *builder = ad.b;
    result
}

/// Why a graph cannot be differentiated as asked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct GradError {
    /// The node the error is about, where there is one.
    pub node: Option<Value>,
    /// What is wrong, naming the node's op or the input or output.
    pub message: String,
}

/// Result of differentiation.
pub type GradResult<T> = Result<T, GradError>;

fn fail<T>(node: Option<Value>, message: String) -> GradResult<T> {
    Err(GradError { node, message })
}

/// The input called `name` of `graph`, which must be a float: what each
/// mode differentiates with respect to.
fn float_input(graph: &Graph, name: &str) -> GradResult<Value> {
    let Some(input) = graph.inputs().iter().find(|i| i.name == name) else {
        let names: Vec<&str> = graph.inputs().iter().map(|i| i.name.as_str()).collect();
        return fail(
            None,
            format!(
                "cannot differentiate with respect to `{name}`: the graph has no such input (it has {})",
                names.join(", ")
            ),
        );
    };
    let ty = graph.ty(input.value);
    if !ty.dtype().is_some_and(DType::is_float) {
        return fail(
            Some(input.value),
            format!("cannot differentiate with respect to input `{name}` of type {ty}: only floats (f32, f64) have derivatives"),
        );
    }
    Ok(input.value)
}

/// Which values depend on one of `seeds` through float values: the ones
/// that carry a derivative.
fn active_mask(graph: &Graph, seeds: &[Value]) -> crate::SecondaryMap<Value, bool> {
    let mut active = crate::SecondaryMap::with_capacity(graph.len());
    for &seed in seeds {
        active[seed] = true;
    }
    for (value, node) in graph.nodes() {
        let float = node.ty.dtype().is_some_and(DType::is_float);
        if float && node.args.iter().any(|&a| active[a]) {
            active[value] = true;
        }
    }
    active
}

/// A builder that appends derivative nodes to a copy of the graph, with the
/// shorthands the rules use. A typing failure here is a bug in a rule (the
/// rules build only well-typed nodes); it is reported as an error naming
/// the node being differentiated, never a panic.
struct Ad {
    b: Builder,
    /// The node whose derivative is being built, for errors.
    at: Option<Value>,
}

impl Ad {
    fn new(graph: &Verified) -> Self {
        Ad {
            b: Builder::from_graph(graph.graph().clone()),
            at: None,
        }
    }

    fn op(&mut self, op: Op, args: &[Value]) -> GradResult<Value> {
        let mnemonic = op.mnemonic();
        self.b.op(op, args).map_err(|e| GradError {
            node: self.at,
            message: format!("differentiating: `{mnemonic}`: {e}"),
        })
    }

    fn shape(&self, v: Value) -> Shape {
        self.b
            .ty(v)
            .as_tensor()
            .map(|t| t.shape.clone())
            .unwrap_or_default()
    }

    fn dtype(&self, v: Value) -> DType {
        self.b.dtype(v).unwrap_or(DType::F64)
    }

    /// The scalar `x` in `dtype` (rounded to `f32` for `f32`).
    fn konst(&mut self, dtype: DType, x: f64) -> Value {
        self.b.constant(match dtype {
            DType::F32 => Scalar::F32(x as f32),
            _ => Scalar::F64(x),
        })
    }

    fn unary(&mut self, op: UnaryOp, a: Value) -> GradResult<Value> {
        self.op(Op::Unary(op), &[a])
    }

    fn binary(&mut self, op: BinaryOp, a: Value, b: Value) -> GradResult<Value> {
        self.op(Op::Binary(op), &[a, b])
    }

    fn add(&mut self, a: Value, b: Value) -> GradResult<Value> {
        self.binary(BinaryOp::Add, a, b)
    }

    fn sub(&mut self, a: Value, b: Value) -> GradResult<Value> {
        self.binary(BinaryOp::Sub, a, b)
    }

    fn mul(&mut self, a: Value, b: Value) -> GradResult<Value> {
        self.binary(BinaryOp::Mul, a, b)
    }

    fn div(&mut self, a: Value, b: Value) -> GradResult<Value> {
        self.binary(BinaryOp::Div, a, b)
    }

    /// `1 / a`.
    fn reciprocal(&mut self, a: Value) -> GradResult<Value> {
        let one = self.konst(self.dtype(a), 1.0);
        self.div(one, a)
    }

    fn cmp(&mut self, op: CmpOp, a: Value, b: Value) -> GradResult<Value> {
        self.op(Op::Compare(op), &[a, b])
    }

    /// `a op k` for a constant `k` of `a`'s dtype.
    fn cmp_k(&mut self, op: CmpOp, a: Value, k: f64) -> GradResult<Value> {
        let k = self.konst(self.dtype(a), k);
        self.cmp(op, a, k)
    }

    fn select(&mut self, c: Value, a: Value, b: Value) -> GradResult<Value> {
        self.op(Op::Select, &[c, a, b])
    }

    /// `select(c, t, 0)`: `t` where `c` holds, zero elsewhere.
    fn keep_where(&mut self, c: Value, t: Value) -> GradResult<Value> {
        let zero = self.konst(self.dtype(t), 0.0);
        self.select(c, t, zero)
    }

    /// `select(c, 0, t)`.
    fn zero_where(&mut self, c: Value, t: Value) -> GradResult<Value> {
        let zero = self.konst(self.dtype(t), 0.0);
        self.select(c, zero, t)
    }

    fn cast(&mut self, a: Value, to: DType) -> GradResult<Value> {
        if self.b.dtype(a) == Some(to) {
            return Ok(a);
        }
        self.op(Op::Cast(to), &[a])
    }

    fn reduce_axes(
        &mut self,
        op: ReduceOp,
        a: Value,
        axes: Vec<u32>,
        keepdim: bool,
    ) -> GradResult<Value> {
        self.op(Op::ReduceAxes { op, axes, keepdim }, &[a])
    }

    /// `v` with `shape`, broadcast there where it is smaller (a derivative
    /// is kept as small as the broadcasting rule lets it be until a
    /// non-elementwise op needs its full shape).
    fn expand(&mut self, v: Value, shape: &Shape) -> GradResult<Value> {
        if self.shape(v) == *shape {
            return Ok(v);
        }
        self.op(Op::BroadcastTo(shape.clone()), &[v])
    }

    /// Zeros of `dtype` and `shape`.
    fn zeros(&mut self, dtype: DType, shape: &Shape) -> GradResult<Value> {
        // Any dtype: a max pool's indices pad integer planes too.
        let zero = self.b.constant(Scalar::zero(dtype));
        self.expand(zero, shape)
    }

    /// The adjoint of broadcasting: `g` summed over the axes along which a
    /// value of shape `to` was broadcast to `g`'s shape, so that the result
    /// broadcasts to `to` (it may stay smaller). The axes `to` has with
    /// extent 1 are summed first and kept; the leading axes `to` lacks are
    /// summed next and dropped.
    fn unbroadcast(&mut self, g: Value, to: &Shape) -> GradResult<Value> {
        let gs = self.shape(g);
        let (rank_g, rank_to) = (gs.len(), to.len());
        let lead = rank_g.saturating_sub(rank_to);
        let keep: Vec<u32> = (lead..rank_g)
            .filter(|&i| {
                let j = i + rank_to - rank_g;
                to[j] == Dim::Fixed(1) && gs[i] != Dim::Fixed(1)
            })
            .map(|i| i as u32)
            .collect();
        let mut g = g;
        if !keep.is_empty() {
            g = self.reduce_axes(ReduceOp::Sum, g, keep, true)?;
        }
        if lead > 0 {
            g = self.reduce_axes(ReduceOp::Sum, g, (0..lead as u32).collect(), false)?;
        }
        Ok(g)
    }

    /// The shape a reduction of `x` over `axes` has with `keepdim`.
    fn kept_shape(&self, x: Value, axes: &[u32]) -> Shape {
        self.shape(x)
            .into_iter()
            .enumerate()
            .map(|(i, d)| {
                if axes.contains(&(i as u32)) {
                    Dim::Fixed(1)
                } else {
                    d
                }
            })
            .collect()
    }

    /// Reshapes `v` to `shape` where its shape differs.
    fn reshape(&mut self, v: Value, shape: &Shape) -> GradResult<Value> {
        if self.shape(v) == *shape {
            return Ok(v);
        }
        self.op(Op::Reshape(shape.clone()), &[v])
    }

    /// `v` along `axis` with `by - 1` zeros between its elements (a length
    /// `n` becomes `(n - 1) * by + 1`): a strided op's adjoint spread back.
    fn spread(&mut self, v: Value, axis: usize, by: u64) -> GradResult<Value> {
        let shape = self.shape(v);
        let Dim::Fixed(len) = shape[axis] else {
            return fail(self.at, "cannot spread a symbolic axis".to_string());
        };
        if by <= 1 || len <= 1 {
            return Ok(v);
        }
        // [.., len, ..] -> [.., len, 1, ..] beside zeros [.., len, by-1, ..],
        // then [.., len * by, ..] cut after the last element.
        let dtype = self.dtype(v);
        let mut one = shape.clone();
        one.insert(axis + 1, Dim::Fixed(1));
        let column = self.reshape(v, &one)?;
        let mut gap = one.clone();
        gap[axis + 1] = Dim::Fixed(by - 1);
        let zeros = self.zeros(dtype, &gap)?;
        let spread = self.op(Op::Concat(axis as u32 + 1), &[column, zeros])?;
        let mut flat = shape;
        flat[axis] = Dim::Fixed(len * by);
        let flat = self.reshape(spread, &flat)?;
        self.crop(flat, axis, 0, (len - 1) * by + 1)
    }

    /// `v[.., start..stop, ..]` along `axis`.
    fn crop(&mut self, v: Value, axis: usize, start: u64, stop: u64) -> GradResult<Value> {
        let mut ranges = vec![None; self.shape(v).len()];
        ranges[axis] = Some(crate::op::SliceRange {
            start,
            stop,
            step: 1,
        });
        self.op(Op::Slice(ranges), &[v])
    }

    /// `v` with `before` zeros in front along `axis` and `after` behind; a
    /// negative count removes that many elements instead.
    fn pad(&mut self, v: Value, axis: usize, before: i64, after: i64) -> GradResult<Value> {
        let Dim::Fixed(len) = self.shape(v)[axis] else {
            return fail(self.at, "cannot pad a symbolic axis".to_string());
        };
        let (cut_front, cut_back) = ((-before).max(0) as u64, (-after).max(0) as u64);
        if cut_front + cut_back >= len {
            let mut shape = self.shape(v);
            let kept = (len as i64 + before + after).max(0) as u64;
            shape[axis] = Dim::Fixed(kept);
            return self.zeros(self.dtype(v), &shape);
        }
        let mut v = v;
        if cut_front + cut_back > 0 {
            v = self.crop(v, axis, cut_front, len - cut_back)?;
        }
        let dtype = self.dtype(v);
        let mut parts = Vec::with_capacity(3);
        for (count, front) in [(before, true), (after, false)] {
            if count > 0 {
                let mut shape = self.shape(v);
                shape[axis] = Dim::Fixed(count as u64);
                let z = self.zeros(dtype, &shape)?;
                if front {
                    parts.push(z);
                } else {
                    parts.push(v);
                    parts.push(z);
                }
            } else if !front {
                parts.push(v);
            }
        }
        if parts.len() == 1 {
            return Ok(parts[0]);
        }
        self.op(Op::Concat(axis as u32), &parts)
    }

    fn finish(self) -> Graph {
        self.b.finish()
    }
}

/// The axes a reduction node reduces, whether it keeps them, and its op:
/// `reduce` of a column reduces axis 0 to a scalar.
fn reduction(op: &Op) -> Option<(ReduceOp, Vec<u32>, bool)> {
    match op {
        Op::Reduce(r) => Some((*r, vec![0], false)),
        Op::ReduceAxes { op, axes, keepdim } => Some((*op, axes.clone(), *keepdim)),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
