//! The verifier: the only way to obtain a [`Verified`] graph, the proof that a
//! graph is well formed that passes, the interpreter and lowering demand.
//!
//! It checks, for every node, in this order: the ordering invariant (a node uses
//! only earlier nodes, so everything after this check may index without bounds
//! worries), arity, and that the declared type is what the op's typing rule
//! gives; then the signature. It collects every problem instead of stopping at
//! the first, each pointed at the node it concerns.

use crate::entities::Value;
use crate::graph::Graph;
use crate::op::Op;
use cranelift_entity::SecondaryMap;
use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

/// One problem the verifier found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifierError {
    /// The node the problem is at; `None` for the signature as a whole.
    pub location: Option<Value>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for VerifierError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.location {
            Some(v) => write!(f, "{v}: {}", self.message),
            None => write!(f, "graph: {}", self.message),
        }
    }
}

/// Every problem the verifier found in one graph (never empty).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct VerifierErrors(pub Vec<VerifierError>);

impl fmt::Display for VerifierErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (err_idx, err) in self.0.iter().enumerate() {
            if err_idx > 0 {
                writeln!(f)?;
            }
            write!(f, "{err}")?;
        }
        Ok(())
    }
}

/// Result of verification.
pub type VerifyResult<T> = Result<T, VerifierErrors>;

/// A graph the verifier accepted, with the facts it found. Only [`verify`]
/// makes one, so a graph and its proof cannot be mismatched; it cannot be
/// changed afterwards. Cheap to clone (the graph is shared).
#[derive(Clone, Debug)]
pub struct Verified {
    graph: Arc<Graph>,
    info: Arc<GraphInfo>,
}

impl Verified {
    /// The graph.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// What the verifier found: live values, symbolic dimensions.
    pub fn info(&self) -> &GraphInfo {
        &self.info
    }

    /// The graph, to change it (and verify it again).
    pub fn into_graph(self) -> Graph {
        Arc::unwrap_or_clone(self.graph)
    }
}

/// Facts about a verified graph, part of [`Verified`].
#[derive(Clone, Debug)]
pub struct GraphInfo {
    live: SecondaryMap<Value, bool>,
    symbols: Vec<String>,
}

impl GraphInfo {
    /// True when an output depends on `value` (inputs are always live).
    pub fn is_live(&self, value: Value) -> bool {
        self.live[value]
    }

    /// The symbolic dimensions, in the order the inputs first mention them: the
    /// order of the length arguments of a compiled kernel.
    pub fn symbols(&self) -> &[String] {
        &self.symbols
    }
}

struct Verifier<'a> {
    graph: &'a Graph,
    errors: Vec<VerifierError>,
}

impl Verifier<'_> {
    fn report(&mut self, location: Option<Value>, message: String) {
        self.errors.push(VerifierError { location, message });
    }

    /// Checks one node; returns early past the first problem of that node, since
    /// later checks of the same node rely on earlier ones.
    fn node(&mut self, value: Value) {
        let node = self.graph.node(value);
        for &arg in &node.args {
            if !self.graph.contains(arg) {
                return self.report(Some(value), format!("uses {arg}, which does not exist"));
            }
            if arg >= value {
                return self.report(
                    Some(value),
                    format!("uses {arg}, which is not defined before it"),
                );
            }
        }
        if let Op::Input { index } = node.op {
            let declared = self.graph.inputs().get(index as usize).map(|i| i.value);
            if declared != Some(value) {
                self.report(
                    Some(value),
                    format!("is `input` number {index}, but the signature does not list it there"),
                );
            }
            if node.ty.as_tensor().is_none() {
                self.report(
                    Some(value),
                    format!(
                        "input of type {}; inputs are scalars, columns or tensors",
                        node.ty
                    ),
                );
            }
            return;
        }
        match self.graph.result_type(&node.op, &node.args) {
            Err(e) => self.report(Some(value), e.message),
            Ok(ty) if ty != node.ty => self.report(
                Some(value),
                format!(
                    "declared type {}, but `{}` of these arguments gives {ty}",
                    node.ty,
                    node.op.mnemonic()
                ),
            ),
            Ok(_) => {}
        }
    }

    fn signature(&mut self) -> Vec<String> {
        let graph = self.graph;
        let mut names = HashSet::new();
        let mut symbols: Vec<String> = Vec::new();
        for (index, input) in graph.inputs().iter().enumerate() {
            let is_input = graph.get(input.value).map(|n| {
                n.op == Op::Input {
                    index: index as u32,
                }
            });
            if is_input != Some(true) {
                self.report(
                    None,
                    format!(
                        "input `{}` is {}, not its `input` node",
                        input.name, input.value
                    ),
                );
                continue;
            }
            if input.name.is_empty() || !names.insert(input.name.as_str()) {
                self.report(
                    Some(input.value),
                    format!("input name `{}` is empty or used twice", input.name),
                );
            }
            for sym in graph.ty(input.value).symbols() {
                if !symbols.iter().any(|s| s == sym) {
                    symbols.push(sym.to_string());
                }
            }
        }
        let mut out_names = HashSet::new();
        for output in graph.outputs() {
            if !graph.contains(output.value) {
                self.report(
                    None,
                    format!(
                        "output `{}` is {}, which does not exist",
                        output.name, output.value
                    ),
                );
            }
            if output.name.is_empty() || !out_names.insert(output.name.as_str()) {
                self.report(
                    None,
                    format!("output name `{}` is empty or used twice", output.name),
                );
            }
        }
        if graph.outputs().is_empty() {
            self.report(None, "the graph has no outputs".to_string());
        }
        symbols
    }

    fn symbols_are_bound(&mut self, symbols: &[String]) {
        for (value, node) in self.graph.nodes() {
            if let Some(sym) = node.ty.symbols().find(|s| !symbols.iter().any(|b| b == s)) {
                self.report(
                    Some(value),
                    format!(
                        "type {} uses dimension `{sym}`, which no input has",
                        node.ty
                    ),
                );
            }
        }
    }
}

/// Verifies `graph`, reporting every problem found.
pub fn verify(graph: Graph) -> VerifyResult<Verified> {
    let info = check(&graph)?;
    Ok(Verified {
        graph: Arc::new(graph),
        info: Arc::new(info),
    })
}

pub(crate) fn check(graph: &Graph) -> VerifyResult<GraphInfo> {
    let mut verifier = Verifier {
        graph,
        errors: Vec::new(),
    };
    for (value, _) in graph.nodes() {
        verifier.node(value);
    }
    let symbols = verifier.signature();
    verifier.symbols_are_bound(&symbols);
    if verifier.errors.is_empty() {
        Ok(GraphInfo {
            live: graph.live_mask(),
            symbols,
        })
    } else {
        Err(VerifierErrors(verifier.errors))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::NodeData;
    use crate::op::{BinaryOp, UnaryOp};
    use crate::types::{DType, Type};

    #[test]
    fn reports_every_problem_at_its_node() {
        let mut g = Graph::new("bad");
        let x = g.push_input("x", Type::column(DType::F64, "n"));
        let fwd = Value::from_u32(5);
        let add = NodeData {
            op: Op::Binary(BinaryOp::Add),
            args: vec![x, fwd],
            ty: Type::column(DType::F64, "n"),
        };
        g.push_node(add);
        let wrong = NodeData {
            op: Op::Unary(UnaryOp::Sin),
            args: vec![x],
            ty: Type::scalar(DType::F64),
        };
        g.push_node(wrong);
        let unbound = NodeData {
            op: Op::Unary(UnaryOp::Sin),
            args: vec![x],
            ty: Type::column(DType::F64, "m"),
        };
        let v3 = g.push_node(unbound);
        g.push_output("y", v3);
        g.push_output("y", Value::from_u32(77));
        let errors = verify(g).expect_err("invalid graph").to_string();
        assert_eq!(
            errors,
            "v1: uses v5, which does not exist\n\
             v2: declared type f64, but `sin` of these arguments gives f64[n]\n\
             v3: declared type f64[m], but `sin` of these arguments gives f64[n]\n\
             graph: output `y` is v77, which does not exist\n\
             graph: output name `y` is empty or used twice\n\
             v3: type f64[m] uses dimension `m`, which no input has"
        );
    }

    /// Bad convolution and pooling shapes are verifier errors at their node,
    /// and negative padding does not parse.
    #[test]
    fn bad_windows_are_errors_at_their_node() {
        let errors = |body: &str| {
            let src = format!("v0: f32[1, 4, 5, 5] = input \"x\"\n{body}output \"y\" = v2\n");
            let graph = crate::text::parse(&src).expect("parses");
            verify(graph).expect_err("invalid").to_string()
        };
        assert_eq!(
            errors("v1: f32[6, 2, 3, 3] = input \"w\"\nv2: f32[1, 6, 3, 3] = conv2d v0, v1 groups 3\n"),
            "v2: `conv2d` of f32[1, 4, 5, 5] with weights f32[6, 2, 3, 3]: 3 groups must divide both the 4 input and the 6 output channels"
        );
        assert_eq!(
            errors("v1: f32[6, 4, 3, 3] = input \"w\"\nv2: f32[1, 6, 3, 3] = conv2d v0, v1 groups 2\n"),
            "v2: `conv2d` of f32[1, 4, 5, 5] with weights f32[6, 4, 3, 3]: the weights' second extent must be the input channels per group, 2"
        );
        assert_eq!(
            errors("v1: f32[6, 4, 7, 3] = input \"w\"\nv2: f32[1, 6, 1, 3] = conv2d v0, v1 pad [0, 1, 0, 0]\n"),
            "v2: `conv2d` of f32[1, 4, 5, 5]: a window of [7, 3] taps (dilation [1, 1]) does not fit the padded input (rows 5 with padding [0, 1, 0, 0])"
        );
        assert_eq!(
            errors("v1: f32 = const 0.0\nv2: f32[1, 4, 2, 2] = max_pool2d v0 kernel [2, 2] stride [2, 2] pad [2, 0, 0, 0]\n"),
            "v2: `max_pool2d` of f32[1, 4, 5, 5]: padding [2, 0, 0, 0] exceeds half the window's rows (1)"
        );
        assert_eq!(
            errors("v1: f32 = const 0.0\nv2: f32[1, 4, 2, 2] = avg_pool2d v0 kernel [2, 2] stride [0, 2]\n"),
            "v2: `avg_pool2d`: a stride of 0 ([0, 2]); it must be at least 1"
        );
        let negative = "v0: f32[1, 4, 5, 5] = input \"x\"\nv1: f32[1, 4, 5, 5] = max_pool2d v0 kernel [3, 3] stride [1, 1] pad [-1, 1, 1, 1]\n";
        let err = crate::text::parse(negative)
            .expect_err("negative padding")
            .to_string();
        assert!(
            err.contains("`-1` is not a padding (a number from 0 to 2^32 - 1)")
                && err.contains("2:"),
            "{err}"
        );
    }
}
