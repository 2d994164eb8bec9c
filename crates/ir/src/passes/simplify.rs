//! Algebraic simplifications that are exact under IEEE 754 and two's complement.
//!
//! Each rule holds for every input, including -0.0, NaN and the infinities:
//! `x * 1 → x` is exact, `x + 0.0 → x` is not (`-0.0 + 0.0` is `+0.0`) so only
//! `x + -0.0 → x` and `x - 0.0 → x` are used. A rule that would drop an operand
//! only fires when that operand cannot fail (divide an integer by zero), so a
//! simplified graph reports the same errors.

use super::{Rewrite, Rewriter, Table};
use crate::entities::Value;
use crate::graph::{Graph, NodeData};
use crate::op::{BinaryOp, Op, UnaryOp};
use crate::scalar::Scalar;
use cranelift_entity::SecondaryMap;

/// Applies the exact simplifications (the simplifying alone of
/// [`super::rewrite`]).
pub fn run(graph: &Graph) -> Graph {
    super::rewrite(
        graph,
        super::Steps {
            fold: false,
            simplify: true,
            cse: false,
        },
    )
}

/// True when `node` may fail: an integer division whose divisor is not a nonzero
/// constant, a `gather` (an index out of range), or any argument that may fail.
pub(crate) fn node_may_fail(
    rw: &Rewriter<'_>,
    node: &NodeData,
    may_fail: &SecondaryMap<Value, bool>,
) -> bool {
    let divides_unsafely = match node.op {
        Op::Binary(op)
            if op.divides()
                && rw
                    .out()
                    .ty(node.args[0])
                    .dtype()
                    .is_some_and(|d| d.is_int()) =>
        {
            !matches!(constant(rw, node.args[1]), Some(c) if c != Scalar::zero(c.dtype()))
        }
        _ => false,
    };
    divides_unsafely
        || matches!(node.op, Op::Gather(_) | Op::IndexAdd(_))
        || node.args.iter().any(|&a| may_fail[a])
}

fn constant(rw: &Rewriter<'_>, value: Value) -> Option<Scalar> {
    match rw.node(value).op {
        Op::Const(c) => Some(c),
        _ => None,
    }
}

fn is_const(rw: &Rewriter<'_>, value: Value, expect: Scalar) -> bool {
    constant(rw, value) == Some(expect)
}

/// The rewrite of `node` (its arguments in the new graph), if a rule
/// applies: a value of the new graph that equals it, or a simpler node.
/// `table` says which values may fail, and takes the constants a rule needs.
pub(crate) fn simplify(
    rw: &mut Rewriter<'_>,
    node: &NodeData,
    table: &mut Table,
) -> Option<Rewrite> {
    // Replacing a node by one of its operands is only valid if the types agree
    // (a scalar operand cannot stand for a column result).
    let use_if_same_type =
        |v: Value, rw: &Rewriter<'_>| (rw.out().ty(v) == &node.ty).then_some(Rewrite::Use(v));
    match (&node.op, node.args.as_slice()) {
        (Op::Binary(op), &[a, b]) => {
            let dtype = rw.out().ty(a).dtype().expect("binary operands are tensors");
            match binary_identity(rw, *op, a, b, dtype) {
                Some(v) => use_if_same_type(v, rw),
                None => reciprocal(rw, *op, a, b, node, table),
            }
        }
        (Op::Unary(op), &[a]) => match (op, &rw.node(a).op) {
            (UnaryOp::Neg | UnaryOp::Not | UnaryOp::BNot, Op::Unary(inner)) if inner == op => {
                use_if_same_type(rw.node(a).args[0], rw)
            }
            // abs(abs x) == abs x and abs(neg x) == abs x, also for wrapping ints.
            (UnaryOp::Abs, Op::Unary(UnaryOp::Abs | UnaryOp::Neg)) => {
                Some(Rewrite::Node(NodeData {
                    op: node.op.clone(),
                    args: vec![rw.node(a).args[0]],
                    ty: node.ty.clone(),
                }))
            }
            _ => None,
        },
        (Op::Cast(to), &[a]) if rw.out().ty(a).dtype() == Some(*to) => use_if_same_type(a, rw),
        // A transpose of a transpose is one transpose, by the permutations'
        // composition; the identity permutation is the operand itself
        // (aot_autograd writes `t(t(mm(..)))` for every linear layer's
        // weight gradient).
        (Op::Transpose(perm), &[a]) => {
            let identity = |p: &[u32]| p.iter().enumerate().all(|(i, &p)| p as usize == i);
            match &rw.node(a).op {
                Op::Transpose(inner) => {
                    let x = rw.node(a).args[0];
                    let composed: Vec<u32> = perm.iter().map(|&i| inner[i as usize]).collect();
                    if identity(&composed) {
                        return use_if_same_type(x, rw);
                    }
                    Some(Rewrite::Node(NodeData {
                        op: Op::Transpose(composed),
                        args: vec![x],
                        ty: node.ty.clone(),
                    }))
                }
                _ if identity(perm) => use_if_same_type(a, rw),
                _ => None,
            }
        }
        // A reshape to the operand's own shape is the operand; a reshape of
        // a reshape, one reshape (the order of the elements is the same).
        (Op::Reshape(_), &[a]) => match &rw.node(a).op {
            _ if rw.out().ty(a) == &node.ty => Some(Rewrite::Use(a)),
            Op::Reshape(_) => {
                let x = rw.node(a).args[0];
                if rw.out().ty(x) == &node.ty {
                    return Some(Rewrite::Use(x));
                }
                Some(Rewrite::Node(NodeData {
                    op: node.op.clone(),
                    args: vec![x],
                    ty: node.ty.clone(),
                }))
            }
            _ => None,
        },
        (Op::Select, &[c, a, b]) => {
            // Dropping the condition is only exact if it cannot fail.
            if a == b && !table.may_fail(c) {
                return use_if_same_type(a, rw);
            }
            match constant(rw, c) {
                Some(Scalar::Bool(true)) if !table.may_fail(b) => use_if_same_type(a, rw),
                Some(Scalar::Bool(false)) if !table.may_fail(a) => use_if_same_type(b, rw),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The operand `a op b` equals for every input, if a rule applies.
fn binary_identity(
    rw: &Rewriter<'_>,
    op: BinaryOp,
    a: Value,
    b: Value,
    dtype: crate::types::DType,
) -> Option<Value> {
    let zero = Scalar::zero(dtype);
    let one = Scalar::one(dtype);
    let is = |v, s| is_const(rw, v, s);
    let float = dtype.is_float();
    let neg_zero = match dtype {
        crate::types::DType::F32 => Scalar::F32(-0.0),
        _ => Scalar::F64(-0.0),
    };
    use BinaryOp::*;
    match op {
        Mul if is(b, one) => Some(a),
        Mul if is(a, one) => Some(b),
        Div if is(b, one) => Some(a),
        Add if float && is(b, neg_zero) => Some(a),
        Add if float && is(a, neg_zero) => Some(b),
        Add if !float && is(b, zero) => Some(a),
        Add if !float && is(a, zero) => Some(b),
        Sub if is(b, zero) => Some(a),
        Min | Max | BAnd | BOr | And | Or if a == b => Some(a),
        BOr | BXor | Or | Xor if is(b, zero) => Some(a),
        BOr | BXor | Or | Xor if is(a, zero) => Some(b),
        And if is(b, one) => Some(a),
        And if is(a, one) => Some(b),
        BAnd if is(b, crate::semantics::unary(UnaryOp::BNot, zero).ok()?) => Some(a),
        Shl | ShrArith | ShrLogical => {
            let width = (dtype.size_bytes() * 8) as i64;
            let amount = match constant(rw, b)? {
                Scalar::I32(v) => i64::from(v),
                Scalar::I64(v) => v,
                _ => return None,
            };
            (amount.rem_euclid(width) == 0).then_some(a)
        }
        _ => None,
    }
}

/// `x / c → x * (1/c)` when `c` is a power of two whose reciprocal is a normal
/// number: then both are exact and give the same result for every `x`.
fn reciprocal(
    rw: &mut Rewriter<'_>,
    op: BinaryOp,
    a: Value,
    b: Value,
    node: &NodeData,
    table: &mut Table,
) -> Option<Rewrite> {
    let recip = match (op, constant(rw, b)) {
        (BinaryOp::Div, Some(Scalar::F64(c)))
            if c.abs().to_bits() & ((1 << 52) - 1) == 0
                && c.is_normal()
                && (1.0 / c).is_normal() =>
        {
            Scalar::F64(1.0 / c)
        }
        (BinaryOp::Div, Some(Scalar::F32(c)))
            if c.abs().to_bits() & ((1 << 23) - 1) == 0
                && c.is_normal()
                && (1.0 / c).is_normal() =>
        {
            Scalar::F32(1.0 / c)
        }
        _ => return None,
    };
    let recip = table.intern(
        rw,
        NodeData {
            op: Op::Const(recip),
            args: Vec::new(),
            ty: crate::types::Type::scalar(recip.dtype()),
        },
    );
    Some(Rewrite::Node(NodeData {
        op: Op::Binary(BinaryOp::Mul),
        args: vec![a, recip],
        ty: node.ty.clone(),
    }))
}
