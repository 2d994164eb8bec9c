//! Dead-code elimination: drops every node no output depends on. Inputs stay:
//! they are the signature.

use super::{Rewrite, Rewriter};
use crate::graph::Graph;

/// Removes dead nodes.
pub fn run(graph: Graph) -> Graph {
    let live = graph.live_mask();
    if graph.nodes().all(|(value, _)| live[value]) {
        // Nothing dead: the same graph.
        return graph;
    }
    Rewriter::run(&graph, |_, value, node| {
        if live[value] {
            Rewrite::Node(node)
        } else {
            Rewrite::Drop
        }
    })
}
