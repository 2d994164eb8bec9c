//! Common-subexpression elimination: a node equal to an earlier one (same op,
//! same arguments; constants compared by bits) reuses the earlier value. Nothing
//! in the IR has side effects, so this is always sound.

use super::{Rewrite, Rewriter};
use crate::entities::Value;
use crate::graph::Graph;
use crate::op::Op;
use std::collections::HashMap;

/// Merges equal nodes.
pub fn run(graph: &Graph) -> Graph {
    let mut seen: HashMap<(Op, Vec<Value>), Value> = HashMap::new();
    Rewriter::run(graph, |rw, _, mut node| {
        if let Op::Binary(op) = node.op {
            if op.is_commutative() {
                node.args.sort();
            }
        }
        let key = (node.op.clone(), node.args.clone());
        match seen.get(&key) {
            Some(&earlier) => Rewrite::Use(earlier),
            None => {
                let value = rw.push(node);
                seen.insert(key, value);
                Rewrite::Use(value)
            }
        }
    })
}
