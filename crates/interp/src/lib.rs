//! The reference interpreter: runs a verified [`Graph`] directly, node by node,
//! row by row, calling [`kiln_ir::semantics`] for every element.
//!
//! It is the oracle the compiled tiers are checked against, so it stays obvious:
//! no `unsafe`, no fusion, no speed tricks. It runs the `Graph`, not a lowered
//! kernel, so a lowering bug shows up as a difference.
//!
//! Only live nodes run (nodes an output depends on): a dead division by zero is
//! not an error, exactly as after dead-code elimination.

#![forbid(unsafe_code)]

use kiln_ir::exec::{bind_inputs, ExecError, ExecResult};
use kiln_ir::semantics::{self, EvalResult};
use kiln_ir::{Buffer, Data, EntityRef, Graph, GraphInfo, NodeData, Op, Scalar};
use std::borrow::Borrow;

/// Runs `graph` on `inputs` (in signature order; owned or borrowed) and returns
/// its outputs in signature order.
pub fn run<D: Borrow<Data>>(
    graph: &Graph,
    info: &GraphInfo,
    inputs: &[D],
) -> ExecResult<Vec<Data>> {
    bind_inputs(graph, info, inputs)?;
    let mut values: Vec<Option<Data>> = vec![None; graph.len()];
    for (value, node) in graph.nodes() {
        if !info.is_live(value) {
            continue;
        }
        let result = match node.op {
            Op::Input { index } => inputs[index as usize].borrow().clone(),
            _ => {
                let args: Vec<&Data> = node
                    .args
                    .iter()
                    .map(|a| {
                        values[a.index()]
                            .as_ref()
                            .expect("arguments of a live node are live and earlier")
                    })
                    .collect();
                eval_node(node, &args).map_err(|e| ExecError::at_node(graph, value, e))?
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

/// Evaluates one node on its arguments' data.
fn eval_node(node: &NodeData, args: &[&Data]) -> EvalResult<Data> {
    let dtype = node.ty.dtype();
    match &node.op {
        Op::Input { .. } => unreachable!("inputs are bound, not evaluated"),
        Op::Const(c) => Ok(Data::Scalar(*c)),
        Op::Unary(op) => elementwise(args, dtype, |x| semantics::unary(*op, x[0])),
        Op::Binary(op) => elementwise(args, dtype, |x| semantics::binary(*op, x[0], x[1])),
        Op::Compare(op) => elementwise(args, dtype, |x| {
            semantics::compare(*op, x[0], x[1]).map(Scalar::Bool)
        }),
        Op::Select => elementwise(args, dtype, |x| {
            Ok(semantics::select(x[0] == Scalar::Bool(true), x[1], x[2]))
        }),
        Op::Cast(to) => elementwise(args, dtype, |x| Ok(semantics::cast(x[0], *to))),
        Op::Reduce(op) => {
            let column = column(args[0]);
            let mut acc = semantics::reduce_identity(*op, column.dtype());
            for row in column.iter() {
                acc = semantics::reduce_step(*op, acc, row)?;
            }
            semantics::reduce_finish(*op, acc, column.len() as u64).map(Data::Scalar)
        }
        Op::Filter => {
            let Buffer::Bool(mask) = column(args[0]) else {
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
    }
}

fn column(data: &Data) -> &Buffer {
    match data {
        Data::Column(b) => b,
        other => unreachable!("verified: a column argument, got {}", other.describe()),
    }
}

/// Applies `f` row by row, broadcasting scalar arguments against the columns.
fn elementwise(
    args: &[&Data],
    dtype: Option<kiln_ir::DType>,
    f: impl Fn(&[Scalar]) -> EvalResult<Scalar>,
) -> EvalResult<Data> {
    let dtype = dtype.expect("verified: elementwise results are tensors");
    let n_rows = args.iter().find_map(|a| match a {
        Data::Column(b) => Some(b.len()),
        _ => None,
    });
    let row = |row_idx: usize| -> Vec<Scalar> {
        args.iter()
            .map(|a| match a {
                Data::Scalar(s) => *s,
                Data::Column(b) => b
                    .get(row_idx)
                    .expect("verified: columns of one dimension have one length"),
                Data::Selection(_) => unreachable!("verified: selections are never arguments"),
            })
            .collect()
    };
    let Some(n_rows) = n_rows else {
        return f(&row(0)).map(Data::Scalar);
    };
    let mut out = Buffer::with_capacity(dtype, n_rows);
    for row_idx in 0..n_rows {
        let pushed = out.push(f(&row(row_idx))?);
        debug_assert!(pushed, "semantics return the result dtype");
    }
    Ok(Data::Column(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_ir::{text, verify};

    fn run_text(src: &str, inputs: &[Data]) -> ExecResult<Vec<Data>> {
        let graph = text::parse(src).expect("parses");
        let info = verify(&graph).expect("verifies");
        run(&graph, &info, inputs)
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
    fn dead_nodes_do_not_fail() {
        let src = "v0: i32 = input \"a\"\nv1: i32 = const 0\nv2: i32 = div v0, v1\nv3: i32 = neg v0\noutput \"r\" = v3\n";
        assert_eq!(
            run_text(src, &[Data::Scalar(Scalar::I32(5))]),
            Ok(vec![Data::Scalar(Scalar::I32(-5))])
        );
    }
}
