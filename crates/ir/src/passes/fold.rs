//! Constant folding: a node whose arguments are all constants becomes a constant,
//! computed by [`crate::semantics`], the same code the interpreter runs. A fold
//! that fails (integer division by zero) leaves the node alone, so the error
//! still happens at run time and names the node.
//!
//! Layout ops of a constant tensor (`transpose`, `reshape`, `slice`) fold
//! into a constant tensor of their result: the weights of `nn.Linear`,
//! `x @ W.T`, are transposed once here, not on every call. `broadcast_to` and
//! `concat` are left alone (folding would copy elements, not move them).
//! An elementwise op of constant tensors and scalars folds into a constant
//! tensor when its result is no larger than its largest argument: a batch
//! norm's `gamma / sqrt(var + eps)` and the convolution weights it scales
//! become one constant each.

use super::Rewriter;
use crate::graph::{Graph, NodeData};
use crate::op::{Op, TensorConst};
use crate::scalar::Scalar;
use crate::semantics::{self, EvalResult};
use crate::types::Type;

/// The value of `op` on constant arguments, if it can be computed now.
pub fn eval_const(op: &Op, args: &[Scalar]) -> Option<EvalResult<Scalar>> {
    Some(match (op, args) {
        (Op::Unary(u), [a]) => semantics::unary(*u, *a),
        (Op::Binary(b), [x, y]) => semantics::binary(*b, *x, *y),
        (Op::Compare(c), [x, y]) => semantics::compare(*c, *x, *y).map(Scalar::Bool),
        (Op::Select, [Scalar::Bool(c), x, y]) => Ok(semantics::select(*c, *x, *y)),
        (Op::Cast(to), [a]) => Ok(semantics::cast(*a, *to)),
        (Op::IsIn(set), [a]) => Ok(Scalar::Bool(semantics::isin(*a, set))),
        _ => return None,
    })
}

/// `op` (a layout op) applied to a constant tensor: the elements it reads,
/// in row-major order of the result.
fn fold_layout(op: &Op, t: &TensorConst) -> Option<TensorConst> {
    let rank = t.dims.len();
    let mut own = vec![1u64; rank];
    for axis in (0..rank.saturating_sub(1)).rev() {
        own[axis] = own[axis + 1] * t.dims[axis + 1];
    }
    // Result dims, the flat offset of its first element, and its strides
    // (negative for a reversed slice).
    let (dims, base, strides): (Vec<u64>, u64, Vec<i64>) = match op {
        Op::Reshape(shape) => {
            let dims = shape
                .iter()
                .map(|d| match d {
                    crate::types::Dim::Fixed(n) => Some(*n),
                    crate::types::Dim::Sym(_) => None,
                })
                .collect::<Option<Vec<u64>>>()?;
            return Some(TensorConst {
                dtype: t.dtype,
                dims,
                values: t.values.clone(),
            });
        }
        Op::Transpose(perm) => (
            perm.iter().map(|&p| t.dims[p as usize]).collect(),
            0,
            perm.iter().map(|&p| own[p as usize] as i64).collect(),
        ),
        Op::Slice(ranges) => (
            ranges
                .iter()
                .zip(&t.dims)
                .map(|(r, &d)| r.map_or(d, |r| r.len()))
                .collect(),
            ranges
                .iter()
                .zip(&own)
                .map(|(r, s)| r.map_or(0, |r| r.first() * s))
                .sum(),
            ranges
                .iter()
                .zip(&own)
                .map(|(r, &s)| r.map_or(s as i64, |r| r.step * s as i64))
                .collect(),
        ),
        _ => return None,
    };
    let count: u64 = dims.iter().product();
    let mut values = Vec::with_capacity(count as usize);
    let mut index = vec![0u64; dims.len()];
    for _ in 0..count {
        let offset = base as i64
            + index
                .iter()
                .zip(&strides)
                .map(|(&i, s)| i as i64 * s)
                .sum::<i64>();
        values.push(t.values[offset as usize]);
        next_index(&mut index, &dims);
    }
    Some(TensorConst {
        dtype: t.dtype,
        dims,
        values,
    })
}

/// An elementwise node whose arguments are constant tensors and scalars,
/// at least one a tensor, as a constant tensor: each element computed by
/// [`eval_const`] from the arguments' elements it broadcasts from. `None`
/// when it does not fold: another op, a non-constant argument, a result
/// larger than every argument (broadcasting would only copy), or an element
/// that fails (a division by zero stays, to fail at run time).
fn fold_elementwise(rw: &Rewriter<'_>, node: &NodeData) -> Option<NodeData> {
    if !node.op.is_elementwise() {
        return None;
    }
    let out = node.ty.as_tensor()?;
    let dims: Vec<u64> = out
        .shape
        .iter()
        .map(|d| match d {
            crate::types::Dim::Fixed(n) => Some(*n),
            crate::types::Dim::Sym(_) => None,
        })
        .collect::<Option<_>>()?;
    let args: Vec<&TensorConst> = node
        .args
        .iter()
        .filter_map(|&a| match &rw.node(a).op {
            Op::Tensor(t) => Some(&**t),
            _ => None,
        })
        .collect();
    let count: u64 = dims.iter().product();
    let largest = args.iter().map(|t| t.values.len() as u64).max()?;
    if count > largest {
        return None;
    }
    // Per argument: a scalar, or a tensor's elements and broadcast strides.
    enum Src<'t> {
        Scalar(Scalar),
        Tensor(&'t TensorConst, Vec<u64>),
    }
    let srcs: Vec<Src<'_>> = node
        .args
        .iter()
        .map(|&a| match &rw.node(a).op {
            Op::Const(c) => Some(Src::Scalar(*c)),
            Op::Tensor(t) => {
                let lead = dims.len() - t.dims.len();
                let mut strides = vec![0u64; dims.len()];
                let mut step = 1;
                for axis in (0..t.dims.len()).rev() {
                    if t.dims[axis] != 1 {
                        strides[axis + lead] = step;
                    }
                    step *= t.dims[axis];
                }
                Some(Src::Tensor(t, strides))
            }
            _ => None,
        })
        .collect::<Option<_>>()?;
    let mut values = Vec::with_capacity(count as usize);
    let mut index = vec![0u64; dims.len()];
    let mut elems = Vec::with_capacity(srcs.len());
    for _ in 0..count {
        elems.clear();
        for src in &srcs {
            elems.push(match src {
                Src::Scalar(c) => *c,
                Src::Tensor(t, strides) => {
                    let at: u64 = index.iter().zip(strides).map(|(i, s)| i * s).sum();
                    t.values[at as usize]
                }
            });
        }
        values.push(eval_const(&node.op, &elems)?.ok()?);
        next_index(&mut index, &dims);
    }
    Some(NodeData {
        op: Op::Tensor(std::sync::Arc::new(TensorConst {
            dtype: out.dtype,
            dims,
            values,
        })),
        args: Vec::new(),
        ty: node.ty.clone(),
    })
}

/// Steps a row-major multi-index of `dims` to the next element.
fn next_index(index: &mut [u64], dims: &[u64]) {
    for axis in (0..dims.len()).rev() {
        index[axis] += 1;
        if index[axis] < dims[axis] {
            return;
        }
        index[axis] = 0;
    }
}

/// Folds constant subexpressions (the folding alone of
/// [`super::rewrite`]).
pub fn run(graph: &Graph) -> Graph {
    super::rewrite(
        graph,
        super::Steps {
            fold: true,
            simplify: false,
            cse: false,
        },
    )
}

/// `node` (its arguments in the new graph) as a constant, if it folds.
pub(crate) fn fold(rw: &Rewriter<'_>, node: &NodeData) -> Option<NodeData> {
    if let [arg] = node.args.as_slice() {
        if let Op::Tensor(t) = &rw.node(*arg).op {
            if let Some(folded) = fold_layout(&node.op, t) {
                return Some(NodeData {
                    op: Op::Tensor(std::sync::Arc::new(folded)),
                    args: Vec::new(),
                    ty: node.ty.clone(),
                });
            }
        }
    }
    if let Some(folded) = fold_elementwise(rw, node) {
        return Some(folded);
    }
    // Otherwise only scalar results fold: a constant is a scalar.
    if !matches!(&node.ty, Type::Tensor(t) if t.is_scalar()) || node.args.is_empty() {
        return None;
    }
    let consts: Option<Vec<Scalar>> = node
        .args
        .iter()
        .map(|&a| match rw.node(a).op {
            Op::Const(c) => Some(c),
            _ => None,
        })
        .collect();
    match consts.and_then(|c| eval_const(&node.op, &c)) {
        Some(Ok(c)) => Some(NodeData {
            op: Op::Const(c),
            args: Vec::new(),
            ty: Type::scalar(c.dtype()),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    /// An int division of constant tensors with a zero divisor element is
    /// not folded: it still fails at run time, at its node.
    #[test]
    fn a_division_by_a_zero_element_stays() {
        let src = "v0: i32[2] = tensor 6, 7\nv1: i32[2] = tensor 1, 0\nv2: i32[2] = div v0, v1\nv3: i32[2] = tensor 2, 1\nv4: i32[2] = div v0, v3\noutput \"y\" = v2\noutput \"z\" = v4\n";
        let graph = crate::text::parse(src).expect("parses");
        let folded = crate::text::print(&super::run(&graph));
        assert!(folded.contains("= div v0, v1"), "{folded}");
        assert!(folded.contains("= tensor 3, 7"), "{folded}");
    }
}
