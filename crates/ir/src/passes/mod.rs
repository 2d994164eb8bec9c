//! Graph-to-graph passes. Every pass keeps the exact semantics of
//! `docs/semantics.md`: same outputs bit for bit (NaN payloads aside), and the
//! same division-by-zero errors from every live node.
//!
//! Passes rebuild the graph front to back ([`Rewriter`]) instead of editing it in
//! place, so the ordering invariant holds by construction. Folding,
//! simplification and CSE are steps applied to each node in turn, in one
//! rebuild ([`rewrite`]); dead-code elimination follows. The verifier runs
//! after each rebuild in debug builds and tests ([`optimize`]).

pub mod cse;
pub mod dce;
pub mod fold;
pub mod simplify;

use crate::entities::Value;
use crate::graph::{Graph, NodeData};
use crate::op::Op;
use crate::verify::{verify, Verified, VerifyResult};
use cranelift_entity::SecondaryMap;

/// Runs the standard pipeline on a verified graph, and returns the
/// optimized graph verified: each node folded, simplified, folded again and
/// merged with an equal earlier node (one rebuild), then dead nodes dropped.
pub fn optimize(input: &Verified) -> VerifyResult<Verified> {
    let rewritten = rewrite(input.graph(), Steps::ALL);
    check("fold, simplify and cse", &rewritten);
    let graph = dce::run(rewritten);
    check("dce", &graph);
    verify(graph)
}

/// In debug builds and tests, panics unless the graph `pass` made verifies.
fn check(pass: &str, graph: &Graph) {
    if cfg!(debug_assertions) {
        if let Err(errors) = crate::verify::check(graph) {
            panic!(
                "pass `{pass}` produced an invalid graph:\n{errors}\n{}",
                crate::text::print(graph)
            );
        }
    }
}

/// Which steps [`rewrite`] applies to each node.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Steps {
    /// Constant folding ([`fold`]).
    pub fold: bool,
    /// The exact algebraic simplifications ([`simplify`]).
    pub simplify: bool,
    /// Common-subexpression elimination ([`cse`]).
    pub cse: bool,
}

impl Steps {
    /// Every step.
    pub const ALL: Steps = Steps {
        fold: true,
        simplify: true,
        cse: true,
    };
}

/// Rebuilds `graph` once, applying `steps` to each node (its arguments
/// already rewritten): fold it; simplify it, and fold what that gives; then
/// reuse an equal earlier node or append it. Each step sees the nodes before
/// it fully rewritten, so one rebuild does what fold, simplify, fold and CSE
/// run one after another would do, and `x` of `min(x, y)` with `y` merged
/// into `x` simplifies too.
pub(crate) fn rewrite(graph: &Graph, steps: Steps) -> Graph {
    let mut table = Table::new(steps.cse, graph.len());
    Rewriter::run(graph, |rw, _, node| {
        let mut node = node;
        if steps.fold {
            if let Some(folded) = fold::fold(rw, &node) {
                node = folded;
            }
        }
        if steps.simplify {
            match simplify::simplify(rw, &node, &mut table) {
                None => {}
                Some(Rewrite::Node(simpler)) => {
                    node = simpler;
                    if steps.fold {
                        if let Some(folded) = fold::fold(rw, &node) {
                            node = folded;
                        }
                    }
                }
                Some(equal @ Rewrite::Use(_)) => return equal,
            }
        }
        Rewrite::Use(table.intern(rw, node))
    })
}

/// The nodes [`rewrite`] has appended: whether each may fail (for
/// [`simplify`]) and, when merging, each distinct node by op and arguments.
pub(crate) struct Table {
    /// Whether to merge equal nodes.
    cse: bool,
    /// The value of each distinct node (commutative arguments sorted;
    /// constants compared by bits).
    seen: rustc_hash::FxHashMap<(Op, Args), Value>,
    /// Whether a value of the new graph may fail.
    may_fail: SecondaryMap<Value, bool>,
}

impl Table {
    fn new(cse: bool, nodes: usize) -> Table {
        let mut seen = rustc_hash::FxHashMap::default();
        if cse {
            seen.reserve(nodes);
        }
        Table {
            cse,
            seen,
            may_fail: SecondaryMap::with_capacity(nodes),
        }
    }

    /// Whether `value` (of the new graph) may fail.
    pub(crate) fn may_fail(&self, value: Value) -> bool {
        self.may_fail[value]
    }

    /// The value of `node` in the new graph: an equal earlier node's (when
    /// merging), else `node` appended.
    pub(crate) fn intern(&mut self, rw: &mut Rewriter<'_>, mut node: NodeData) -> Value {
        let key = if self.cse {
            if let Op::Binary(op) = node.op {
                if op.is_commutative() {
                    node.args.sort();
                }
            }
            let key = (node.op.clone(), Args::of(&node.args));
            if let Some(&earlier) = self.seen.get(&key) {
                return earlier;
            }
            Some(key)
        } else {
            None
        };
        let fails = simplify::node_may_fail(rw, &node, &self.may_fail);
        let value = rw.push(node);
        self.may_fail[value] = fails;
        if let Some(key) = key {
            self.seen.insert(key, value);
        }
        value
    }
}

/// A node's arguments as part of a [`Table`] key: up to three in place (no
/// vector for each node of a graph being merged), more in a vector.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Args {
    /// The count, then the arguments (unused slots `v0`).
    Few(u8, [Value; 3]),
    Many(Vec<Value>),
}

impl Args {
    fn of(args: &[Value]) -> Args {
        match *args {
            [] => Args::Few(0, [Value::from_u32(0); 3]),
            [a] => Args::Few(1, [a, Value::from_u32(0), Value::from_u32(0)]),
            [a, b] => Args::Few(2, [a, b, Value::from_u32(0)]),
            [a, b, c] => Args::Few(3, [a, b, c]),
            _ => Args::Many(args.to_vec()),
        }
    }
}

/// Rebuilds a graph node by node into a new one, mapping old values to new.
pub struct Rewriter<'a> {
    old: &'a Graph,
    out: Graph,
    map: SecondaryMap<Value, Option<Value>>,
}

/// What a pass decides for one node.
pub enum Rewrite {
    /// Replace the node's value by this value of the new graph.
    Use(Value),
    /// Append this node (arguments in the new graph): the node as handed
    /// to the pass keeps it.
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
    /// already mapped into the new graph (`Node` of that node keeps it).
    /// Inputs are always kept.
    pub fn run(
        graph: &'a Graph,
        mut decide: impl FnMut(&mut Rewriter<'a>, Value, NodeData) -> Rewrite,
    ) -> Graph {
        let mut rw = Rewriter {
            old: graph,
            out: Graph::with_capacity(&graph.name, graph.len()),
            map: SecondaryMap::with_capacity(graph.len()),
        };
        for (value, node) in graph.nodes() {
            let new = if let Op::Input { index } = node.op {
                rw.out
                    .push_input(&graph.inputs()[index as usize].name, node.ty.clone())
            } else {
                let mapped = NodeData {
                    op: node.op.clone(),
                    args: node.args.iter().map(|&a| rw.mapped(a)).collect(),
                    ty: node.ty.clone(),
                };
                match decide(&mut rw, value, mapped) {
                    Rewrite::Use(v) => v,
                    Rewrite::Node(n) => rw.out.push_node(n),
                }
            };
            if let (Some(name), None) = (graph.source_name(value), rw.out.source_name(new)) {
                rw.out.set_source_name(new, name);
            }
            rw.map[value] = Some(new);
        }
        for output in graph.outputs() {
            let value = rw.mapped(output.value);
            rw.out.push_output(&output.name, value);
        }
        rw.out
    }
}
