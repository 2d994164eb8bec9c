//! Graph-to-graph passes. Every pass keeps the exact semantics of
//! `docs/semantics.md`: same outputs bit for bit (NaN payloads aside), and the
//! same division-by-zero errors from every live node.
//!
//! Passes rebuild the graph front to back ([`Rewriter`]) instead of editing it in
//! place, so the ordering invariant holds by construction. The verifier runs
//! after every pass in debug builds and tests ([`optimize`]).

pub mod cse;
pub mod dce;
pub mod fold;
pub mod simplify;

use crate::entities::Value;
use crate::graph::{Graph, NodeData};
use crate::op::Op;
use crate::verify::{verify, Verified, VerifyResult};
use cranelift_entity::SecondaryMap;

/// A pass: a rebuild of the graph.
type Pass = fn(&Graph) -> Graph;

/// Runs the standard pipeline: fold, simplify, fold, CSE, DCE, on a verified
/// graph, and returns the optimized graph verified.
pub fn optimize(input: &Verified) -> VerifyResult<Verified> {
    let passes: [(&str, Pass); 5] = [
        ("fold", fold::run),
        ("simplify", simplify::run),
        ("fold", fold::run),
        ("cse", cse::run),
        ("dce", dce::run),
    ];
    let mut graph: Option<Graph> = None;
    for (name, pass) in passes {
        let next = pass(graph.as_ref().unwrap_or(input.graph()));
        if cfg!(debug_assertions) {
            if let Err(errors) = crate::verify::check(&next) {
                panic!(
                    "pass `{name}` produced an invalid graph:\n{errors}\n{}",
                    crate::text::print(&next)
                );
            }
        }
        graph = Some(next);
    }
    verify(graph.expect("the pipeline has passes"))
}

/// Rebuilds a graph node by node into a new one, mapping old values to new.
pub struct Rewriter<'a> {
    old: &'a Graph,
    out: Graph,
    map: SecondaryMap<Value, Option<Value>>,
}

/// What a pass decides for one node.
pub enum Rewrite {
    /// Keep the node (with its arguments mapped).
    Keep,
    /// Drop the node: nothing uses it.
    Drop,
    /// Replace the node's value by this value of the new graph.
    Use(Value),
    /// Replace the node by this new node (arguments already in the new graph).
    Node(NodeData),
}

impl<'a> Rewriter<'a> {
    /// The graph being built.
    pub fn out(&self) -> &Graph {
        &self.out
    }

    /// The node of a value of the new graph.
    pub fn node(&self, value: Value) -> &NodeData {
        self.out.node(value)
    }

    /// The new value of an old value.
    pub fn mapped(&self, old: Value) -> Value {
        self.map[old].expect("arguments are rewritten before their users")
    }

    /// Appends a node to the new graph.
    pub fn push(&mut self, node: NodeData) -> Value {
        self.out.push_node(node)
    }

    /// The old graph.
    pub fn old(&self) -> &'a Graph {
        self.old
    }

    /// Rebuilds `graph`, asking `decide` about each node with its arguments
    /// already mapped into the new graph (`Keep` keeps that node). Inputs
    /// are always kept.
    pub fn run(
        graph: &'a Graph,
        mut decide: impl FnMut(&mut Rewriter<'a>, Value, &NodeData) -> Rewrite,
    ) -> Graph {
        let mut rw = Rewriter {
            old: graph,
            out: Graph::new(&graph.name),
            map: SecondaryMap::with_capacity(graph.len()),
        };
        for (value, node) in graph.nodes() {
            let new = if let Op::Input { index } = node.op {
                Some(
                    rw.out
                        .push_input(&graph.inputs()[index as usize].name, node.ty.clone()),
                )
            } else {
                // A dropped argument means this node is dead too: passes only
                // drop nodes nothing live uses.
                let args: Option<Vec<Value>> = node.args.iter().map(|&a| rw.map[a]).collect();
                let Some(args) = args else { continue };
                let mapped = NodeData {
                    op: node.op.clone(),
                    args,
                    ty: node.ty.clone(),
                };
                match decide(&mut rw, value, &mapped) {
                    Rewrite::Keep => Some(rw.out.push_node(mapped)),
                    Rewrite::Drop => None,
                    Rewrite::Use(v) => Some(v),
                    Rewrite::Node(n) => Some(rw.out.push_node(n)),
                }
            };
            if let Some(new) = new {
                if let (Some(name), None) = (graph.source_name(value), rw.out.source_name(new)) {
                    rw.out.set_source_name(new, name);
                }
            }
            rw.map[value] = new;
        }
        for output in graph.outputs() {
            let value = rw.mapped(output.value);
            rw.out.push_output(&output.name, value);
        }
        rw.out
    }
}
