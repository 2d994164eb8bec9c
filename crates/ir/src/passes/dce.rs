//! Dead-code elimination: drops every node no output depends on. Inputs stay:
//! they are the signature.

use crate::graph::Graph;

/// Removes dead nodes (the live ones moved, not copied).
pub fn run(graph: Graph) -> Graph {
    let live = graph.live_mask();
    if graph.nodes().all(|(value, _)| live[value]) {
        // Nothing dead: the same graph.
        return graph;
    }
    graph.retain(&live)
}
