//! Common-subexpression elimination: a node equal to an earlier one (same op,
//! same arguments; constants compared by bits) reuses the earlier value. Nothing
//! in the IR has side effects, so this is always sound.

use crate::graph::Graph;

/// Merges equal nodes (the merging alone of [`super::rewrite`]; its table is
/// [`super::Table`]).
pub fn run(graph: &Graph) -> Graph {
    super::rewrite(
        graph,
        super::Steps {
            fold: false,
            simplify: false,
            cse: true,
        },
    )
}

#[cfg(test)]
mod tests {
    use crate::builder::Builder;
    use crate::op::{BinaryOp, Op, TensorConst};
    use crate::scalar::Scalar;
    use std::sync::Arc;

    /// A 1000-element f32 constant, `at` changed when given.
    fn weights(changed: Option<usize>) -> Op {
        let mut values: Vec<Scalar> = (0..1000).map(|i| Scalar::F32(i as f32)).collect();
        if let Some(at) = changed {
            values[at] = Scalar::F32(-1.0);
        }
        Op::Tensor(Arc::new(TensorConst {
            dtype: crate::types::DType::F32,
            dims: vec![1000],
            values,
        }))
    }

    #[test]
    fn tensor_constants_merge_only_when_every_element_is_equal() {
        // The hash reads 64 of the 1000 elements (0, 16, 32, ..); element 1
        // differs outside them, element 32 inside.
        for changed in [1, 32] {
            let mut b = Builder::new("w");
            let a = b.op(weights(None), &[]).unwrap();
            let same = b.op(weights(None), &[]).unwrap();
            let other = b.op(weights(Some(changed)), &[]).unwrap();
            let ab = b.binary(BinaryOp::Add, a, same).unwrap();
            let y = b.binary(BinaryOp::Add, ab, other).unwrap();
            b.output("y", y);
            let graph = super::run(&b.finish());
            let tensors = graph
                .nodes()
                .filter(|(_, n)| matches!(n.op, Op::Tensor(_)))
                .count();
            assert_eq!(tensors, 2, "element {changed} changed");
        }
    }
}
