//! Dead-code elimination: drops every node no output depends on. Inputs stay:
//! they are the signature.

use super::{Rewrite, Rewriter};
use crate::graph::Graph;

/// Removes dead nodes.
pub fn run(graph: &Graph) -> Graph {
    let live = graph.live_mask();
    if graph.nodes().all(|(value, _)| live[value]) {
        // Nothing dead: the same graph, node for node.
        return graph.clone();
    }
    Rewriter::run(graph, |_, value, _| {
        if live[value] {
            Rewrite::Keep
        } else {
            Rewrite::Drop
        }
    })
}
