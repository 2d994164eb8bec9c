//! The graph: a node arena in topological order, a signature and a side table of
//! source names.
//!
//! `Graph` stores whatever it is given; it checks nothing. The builder
//! ([`crate::Builder`]) makes well-typed graphs and the verifier
//! ([`crate::verify()`]) is the only way to prove a graph valid.

use crate::entities::Value;
use crate::op::Op;
use crate::types::Type;
use cranelift_entity::{EntityRef, PrimaryMap, SecondaryMap};

/// One node: an op, its arguments and its declared result type.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeData {
    /// The operation.
    pub op: Op,
    /// The arguments; each must be an earlier node.
    pub args: Vec<Value>,
    /// The result type.
    pub ty: Type,
}

/// One input of the signature.
#[derive(Clone, Debug, PartialEq)]
pub struct Input {
    /// The name callers bind the input by.
    pub name: String,
    /// The `input` node that reads it.
    pub value: Value,
}

/// One output of the signature.
#[derive(Clone, Debug, PartialEq)]
pub struct Output {
    /// The name the output is reported under.
    pub name: String,
    /// The value it returns.
    pub value: Value,
}

/// A computation graph.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Graph {
    /// The graph's name (the exported symbol of a compiled graph).
    pub name: String,
    nodes: PrimaryMap<Value, NodeData>,
    inputs: Vec<Input>,
    outputs: Vec<Output>,
    source_names: SecondaryMap<Value, Option<String>>,
}

impl Graph {
    /// An empty graph called `name`.
    pub fn new(name: &str) -> Self {
        Graph {
            name: name.to_string(),
            ..Graph::default()
        }
    }

    /// An empty graph called `name`, with room for `nodes` nodes.
    pub fn with_capacity(name: &str, nodes: usize) -> Self {
        Graph {
            name: name.to_string(),
            nodes: PrimaryMap::with_capacity(nodes),
            ..Graph::default()
        }
    }

    /// Appends a node without checking anything; the verifier checks later.
    pub fn push_node(&mut self, node: NodeData) -> Value {
        self.nodes.push(node)
    }

    /// Appends an `input` node of type `ty` and adds it to the signature.
    pub fn push_input(&mut self, name: &str, ty: Type) -> Value {
        let index = u32::try_from(self.inputs.len()).expect("fewer than 2^32 inputs");
        let value = self.push_node(NodeData {
            op: Op::Input { index },
            args: Vec::new(),
            ty,
        });
        self.inputs.push(Input {
            name: name.to_string(),
            value,
        });
        value
    }

    /// Adds an output to the signature.
    pub fn push_output(&mut self, name: &str, value: Value) {
        self.outputs.push(Output {
            name: name.to_string(),
            value,
        });
    }

    /// Makes output `index` return `value` (its name unchanged).
    ///
    /// # Panics
    /// If the graph has no output `index`.
    pub fn set_output(&mut self, index: usize, value: Value) {
        self.outputs[index].value = value;
    }

    /// The type `op` gives arguments `args` (values of this graph) by
    /// [`crate::typing::result_type`]: the builder's rule for a new node and
    /// the verifier's for an existing one, without a vector of the
    /// arguments' types for the usual arities.
    pub fn result_type(&self, op: &Op, args: &[Value]) -> crate::typing::TypeResult<Type> {
        use crate::typing::result_type;
        match *args {
            [a] => result_type(op, &[self.ty(a)]),
            [a, b] => result_type(op, &[self.ty(a), self.ty(b)]),
            [a, b, c] => result_type(op, &[self.ty(a), self.ty(b), self.ty(c)]),
            _ => {
                let types: Vec<&Type> = args.iter().map(|&a| self.ty(a)).collect();
                result_type(op, &types)
            }
        }
    }

    /// Records the name `value` has in the source it came from.
    pub fn set_source_name(&mut self, value: Value, name: &str) {
        self.source_names[value] = Some(name.to_string());
    }

    /// The source name of `value`, if it has one.
    pub fn source_name(&self, value: Value) -> Option<&str> {
        self.source_names.get(value).and_then(|n| n.as_deref())
    }

    /// The node of `value`, or `None` for an id outside the arena.
    pub fn get(&self, value: Value) -> Option<&NodeData> {
        self.nodes.get(value)
    }

    /// The node of `value`.
    ///
    /// # Panics
    /// If `value` is not a node of this graph; verified graphs only hold such ids.
    pub fn node(&self, value: Value) -> &NodeData {
        &self.nodes[value]
    }

    /// The result type of `value`.
    pub fn ty(&self, value: Value) -> &Type {
        &self.nodes[value].ty
    }

    /// All nodes in order.
    pub fn nodes(&self) -> impl DoubleEndedIterator<Item = (Value, &NodeData)> + ExactSizeIterator {
        self.nodes.iter()
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when the graph has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The inputs, in signature order.
    pub fn inputs(&self) -> &[Input] {
        &self.inputs
    }

    /// The outputs, in signature order.
    pub fn outputs(&self) -> &[Output] {
        &self.outputs
    }

    /// True when `value` names a node of this graph.
    pub fn contains(&self, value: Value) -> bool {
        value.index() < self.nodes.len()
    }

    /// The graph of the nodes `keep` marks, in order, renumbered; nodes are
    /// moved, not copied. Every argument of a kept node, every input and
    /// every output must be kept (a live mask's nodes are: [`Self::live_mask`]).
    ///
    /// # Panics
    /// If one is not.
    pub fn retain(self, keep: &SecondaryMap<Value, bool>) -> Graph {
        let Graph {
            name,
            nodes,
            inputs,
            outputs,
            source_names,
        } = self;
        let mut map: SecondaryMap<Value, Option<Value>> = SecondaryMap::with_capacity(nodes.len());
        let mut kept = PrimaryMap::with_capacity(nodes.len());
        let mut names = SecondaryMap::new();
        let moved = |map: &SecondaryMap<Value, Option<Value>>, v: Value| {
            map[v].expect("a kept node's arguments, inputs and outputs are kept")
        };
        for (value, mut node) in nodes {
            if !keep[value] {
                continue;
            }
            for arg in &mut node.args {
                *arg = moved(&map, *arg);
            }
            let new = kept.push(node);
            map[value] = Some(new);
            if let Some(name) = source_names.get(value).cloned().flatten() {
                names[new] = Some(name);
            }
        }
        Graph {
            name,
            nodes: kept,
            inputs: inputs
                .into_iter()
                .map(|i| Input {
                    value: moved(&map, i.value),
                    ..i
                })
                .collect(),
            outputs: outputs
                .into_iter()
                .map(|o| Output {
                    value: moved(&map, o.value),
                    ..o
                })
                .collect(),
            source_names: names,
        }
    }

    /// The nodes the outputs depend on, as a mask indexed by value. Inputs are
    /// always live: they are the signature.
    pub fn live_mask(&self) -> SecondaryMap<Value, bool> {
        let mut live = SecondaryMap::with_capacity(self.nodes.len());
        for output in &self.outputs {
            if self.contains(output.value) {
                live[output.value] = true;
            }
        }
        for input in &self.inputs {
            if self.contains(input.value) {
                live[input.value] = true;
            }
        }
        // Arguments come before their users, so one backward sweep suffices.
        for (value, node) in self.nodes.iter().rev() {
            if live[value] {
                for &arg in &node.args {
                    if arg < value {
                        live[arg] = true;
                    }
                }
            }
        }
        live
    }
}
