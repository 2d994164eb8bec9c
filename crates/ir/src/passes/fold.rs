//! Constant folding: a node whose arguments are all constants becomes a constant,
//! computed by [`crate::semantics`], the same code the interpreter runs. A fold
//! that fails (integer division by zero) leaves the node alone, so the error
//! still happens at run time and names the node.

use super::{Rewrite, Rewriter};
use crate::graph::{Graph, NodeData};
use crate::op::Op;
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
        _ => return None,
    })
}

/// Folds constant subexpressions.
pub fn run(graph: &Graph) -> Graph {
    Rewriter::run(graph, |rw, _, node| {
        // Only scalar results fold: a constant is a scalar.
        if !matches!(&node.ty, Type::Tensor(t) if t.is_scalar()) || node.args.is_empty() {
            return Rewrite::Keep;
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
            Some(Ok(c)) => Rewrite::Node(NodeData {
                op: Op::Const(c),
                args: Vec::new(),
                ty: Type::scalar(c.dtype()),
            }),
            _ => Rewrite::Keep,
        }
    })
}
