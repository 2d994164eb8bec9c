//! Which elementwise nodes of a tensor graph are fused into their consumer
//! (computed where it reads them, never stored), and which matmuls and
//! convolutions compute an elementwise epilogue in their own loop.

use cranelift_entity::EntityRef;
use kiln_ir::entities::Value;
use kiln_ir::graph::{Graph, NodeData};
use kiln_ir::op::{Op, ReduceOp};
use kiln_ir::verify::GraphInfo;

/// How deep a chain of fused elementwise nodes may get before one is
/// stored: reading a fused node recurses through its fused arguments, so the
/// bound keeps lowering's stack small for any graph.
const MAX_FUSED_DEPTH: u32 = 32;

/// How many times a root may compute one fused node per element (through
/// several uses): more, and the node is stored once instead.
const MAX_RECOMPUTE: u32 = 4;

/// In how many loops a shared node ([`fused_nodes`]) may be computed: with
/// one argument of its shape read in each, up to three loops read no more
/// than storing it does (its loop's read and write, then a read per loop).
const MAX_SHARED_LOOPS: usize = 3;

/// Which elementwise nodes are fused into their consumer (computed where it
/// reads them, not stored), and which matmuls and convolutions compute an
/// epilogue.
///
/// A non-scalar elementwise node that is not returned is fused when:
/// - it has one use, by a consumer that reads each of its elements exactly
///   once (an elementwise node of the same shape, a reduction other than
///   `count` where the node is [`cheap`], a filter, a `concat`), so nothing
///   is skipped (a skipped division could not fail); or
/// - all its uses are elementwise nodes of its shape that are computed in
///   one loop (fused into one root, or the root itself), and it is cheap
///   ([`cheap`]): the root then computes it once per read, as `relu(y)`
///   reads `y` twice in `select(y < 0, 0, y)`; or
/// - its uses are elementwise nodes of its shape computed in up to
///   [`MAX_SHARED_LOOPS`] different loops, it is cheap, and at most one of
///   its arguments has its whole shape (the others broadcast): each loop
///   computes it where it reads it ("shared"). `x - max` in `log_softmax`,
///   read by `exp` (stored for the `sum`) and by the result, or `x - mean`
///   in a layer norm: storing it cost a loop that reads `x` and writes as
///   much, then a read per use; computing it again reads `x` in each loop
///   instead of it. Nothing is fused into a shared node (its arguments
///   are stored), so no chain is computed once per loop.
///
/// A root computes a fused node at most [`MAX_RECOMPUTE`] times per element
/// (only cheap nodes more than once), and reading it recurses at most
/// [`MAX_FUSED_DEPTH`] deep. Nodes are decided users first (backwards), so
/// each node knows the loop its users are computed in.
pub(super) fn fused_nodes(graph: &Graph, info: &GraphInfo) -> Fusion {
    let n_nodes = graph.len();
    // Each use once per argument slot (`mul(x, x)` uses `x` twice).
    let mut users: Vec<Vec<Value>> = vec![Vec::new(); n_nodes];
    for (value, node) in graph.nodes() {
        if info.is_live(value) {
            for a in &node.args {
                users[a.index()].push(value);
            }
        }
    }
    let mut returned = vec![false; n_nodes];
    for o in graph.outputs() {
        returned[o.value.index()] = true;
    }
    let mut fused = vec![false; n_nodes];
    // For a fused node: the node whose loop computes it, how many times per
    // element, and how deep below that root it is read.
    let mut root: Vec<Option<Value>> = vec![None; n_nodes];
    let mut paths = vec![1u32; n_nodes];
    let mut depth = vec![0u32; n_nodes];
    // Fused nodes computed in several loops: nothing is fused into them.
    let mut shared = vec![false; n_nodes];
    let nodes: Vec<(Value, &NodeData)> = graph.nodes().collect();
    for &(value, node) in nodes.iter().rev() {
        let (idx, rank) = (
            value.index(),
            node.ty.as_tensor().map_or(0, |t| t.shape.len()),
        );
        let uses = &users[idx];
        if !elementwise(&node.op)
            || rank == 0
            || returned[idx]
            || uses.is_empty()
            || uses.iter().any(|u| shared[u.index()])
        {
            continue;
        }
        // The loop each use is computed in, times, depth.
        let loop_of = |u: Value| {
            (
                root[u.index()].unwrap_or(u),
                paths[u.index()],
                depth[u.index()],
            )
        };
        let same_shape = |u: Value| {
            graph.node(u).ty.as_tensor().map(|t| &t.shape) == node.ty.as_tensor().map(|t| &t.shape)
        };
        let candidate = if let [consumer] = uses.as_slice() {
            let c = graph.node(*consumer);
            let reads_once = match &c.op {
                op if elementwise(op) => same_shape(*consumer),
                // `count` reads no element: a division there would never run.
                Op::Reduce(ReduceOp::Count)
                | Op::ReduceAxes {
                    op: ReduceOp::Count,
                    ..
                } => false,
                // A reduction folds its elements one by one, so what it
                // computes in its loop runs a lane at a time: a node that
                // is not cheap (a math function, a division) is stored by
                // its own loop, in vectors, and the fold reads it (a
                // `log_softmax`'s `sum(exp(x - max))` over 50,257 classes
                // ran 7x slower fused).
                Op::Reduce(_) | Op::ReduceAxes { .. } => cheap(&node.op),
                Op::Filter | Op::Concat(_) => true,
                _ => false,
            };
            reads_once.then(|| loop_of(*consumer))
        } else {
            let all_elementwise = uses
                .iter()
                .all(|&u| elementwise(&graph.node(u).op) && same_shape(u));
            let first = loop_of(uses[0]).0;
            if all_elementwise && uses.iter().all(|&u| loop_of(u).0 == first) {
                Some(
                    uses.iter()
                        .map(|&u| loop_of(u))
                        .fold((first, 0u32, 0u32), |(r, p, d), (_, up, ud)| {
                            (r, p.saturating_add(up), d.max(ud))
                        }),
                )
            } else {
                // Uses in several loops: shared, or stored.
                let computed_in_each = (all_elementwise && cheap(&node.op))
                    .then(|| shared_loops(graph, value, uses, loop_of))
                    .flatten()
                    .filter(|&(p, d)| d < MAX_FUSED_DEPTH && p <= MAX_RECOMPUTE);
                if let Some((p, d)) = computed_in_each {
                    fused[idx] = true;
                    shared[idx] = true;
                    paths[idx] = p;
                    depth[idx] = d + 1;
                }
                None
            }
        };
        let Some((r, p, d)) = candidate else {
            continue;
        };
        let d = d + 1;
        if d <= MAX_FUSED_DEPTH && p <= MAX_RECOMPUTE && (p == 1 || cheap(&node.op)) {
            fused[idx] = true;
            root[idx] = Some(r);
            paths[idx] = p;
            depth[idx] = d;
        }
    }
    // A matmul or convolution whose one use is computed in the loop of an
    // elementwise node of its shape and dtype: that node is its epilogue (a
    // Linear layer's bias and activation, a convolution's batch norm shift
    // and ReLU). A node is the epilogue of one matmul or convolution at most
    // (two matmuls fused into one root, as in `cast(a @ w) + cast(b @ w)`,
    // would leave the first uncomputed): the first claims it, the others
    // are computed before it.
    let mut epilogue = vec![None; n_nodes];
    let mut claimed = vec![false; n_nodes];
    for &(value, node) in &nodes {
        let b_mat = node
            .args
            .get(1)
            .and_then(|&b| graph.ty(b).as_tensor())
            .is_some_and(|t| t.shape.len() >= 2);
        let [user] = users[value.index()].as_slice() else {
            continue;
        };
        let producer = match node.op {
            Op::MatMul => b_mat,
            Op::Conv2d(_) => true,
            _ => false,
        };
        if !producer || returned[value.index()] {
            continue;
        }
        let r = root[user.index()].unwrap_or(*user);
        let e = graph.node(r);
        if elementwise(&e.op) && !fused[r.index()] && e.ty == node.ty && !claimed[r.index()] {
            claimed[r.index()] = true;
            epilogue[value.index()] = Some(r);
        }
    }
    Fusion { fused, epilogue }
}

/// For a node whose uses (`loop_of` each: its loop, times, depth) are
/// computed in several loops: the most times one loop computes it and the
/// deepest read, when it may be shared ([`fused_nodes`]): at most
/// [`MAX_SHARED_LOOPS`] loops, and at most one argument of its shape.
fn shared_loops(
    graph: &Graph,
    value: Value,
    uses: &[Value],
    loop_of: impl Fn(Value) -> (Value, u32, u32),
) -> Option<(u32, u32)> {
    let node = graph.node(value);
    let shape = node.ty.as_tensor().map(|t| &t.shape);
    let whole = node
        .args
        .iter()
        .filter(|&&a| graph.ty(a).as_tensor().map(|t| &t.shape) == shape)
        .count();
    let mut loops: Vec<(Value, u32)> = Vec::new();
    let mut deepest = 0;
    for &u in uses {
        let (r, p, d) = loop_of(u);
        deepest = deepest.max(d);
        match loops.iter_mut().find(|(l, _)| *l == r) {
            Some((_, times)) => *times = times.saturating_add(p),
            None => loops.push((r, p)),
        }
    }
    let most = loops.iter().map(|&(_, p)| p).max().unwrap_or(1);
    (whole <= 1 && loops.len() <= MAX_SHARED_LOOPS).then_some((most, deepest))
}

/// The ops [`fused_nodes`] fuses.
fn elementwise(op: &Op) -> bool {
    op.is_elementwise()
}

/// Elementwise ops cheap enough to compute more than once per element
/// rather than store and load: a few instructions, no division, no call.
fn cheap(op: &Op) -> bool {
    use kiln_ir::op::{BinaryOp as B, UnaryOp as U};
    match op {
        Op::Unary(u) => matches!(u, U::Neg | U::Abs | U::Not | U::BNot),
        Op::Binary(b) => matches!(
            b,
            B::Add
                | B::Sub
                | B::Mul
                | B::Min
                | B::Max
                | B::And
                | B::Or
                | B::Xor
                | B::BAnd
                | B::BOr
                | B::BXor
        ),
        Op::Compare(_) | Op::Select | Op::Cast(_) => true,
        _ => false,
    }
}

/// What [`fused_nodes`] decides.
pub(super) struct Fusion {
    /// The elementwise nodes computed inside their consumer's loop.
    pub(super) fused: Vec<bool>,
    /// For a matmul or convolution, the elementwise node (the root of a
    /// fused chain reading it) computed in its own loop, row by row (tile
    /// by tile, plane by plane), in place in one buffer: a Linear layer's
    /// bias and activation, a convolution's batch norm and ReLU.
    pub(super) epilogue: Vec<Option<Value>>,
}
