//! The graph builder: appends nodes with their result types computed by
//! [`crate::typing`], so frontends never write a type by hand.

use crate::entities::Value;
use crate::graph::{Graph, NodeData};
use crate::op::{BinaryOp, CmpOp, Op, ReduceOp, UnaryOp};
use crate::scalar::Scalar;
use crate::types::{DType, Type};
use crate::typing::{TypeError, TypeResult};

/// Builds a [`Graph`] node by node. Every method that appends an op checks the
/// op's typing rule and returns a [`TypeError`] instead of a bad node.
#[derive(Debug)]
pub struct Builder {
    graph: Graph,
}

impl Builder {
    /// A builder for an empty graph called `name`.
    pub fn new(name: &str) -> Self {
        Builder {
            graph: Graph::new(name),
        }
    }

    /// A builder that appends to `graph` (a derivative appended after the
    /// nodes it differentiates, for one).
    pub fn from_graph(graph: Graph) -> Self {
        Builder { graph }
    }

    /// The graph built so far.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The type of `value`.
    pub fn ty(&self, value: Value) -> &Type {
        self.graph.ty(value)
    }

    /// The dtype of `value`, `None` for a selection.
    pub fn dtype(&self, value: Value) -> Option<DType> {
        self.graph.ty(value).dtype()
    }

    /// Adds an input named `name` of type `ty`.
    pub fn input(&mut self, name: &str, ty: Type) -> Value {
        self.graph.push_input(name, ty)
    }

    /// Adds a scalar constant.
    pub fn constant(&mut self, value: Scalar) -> Value {
        let ty = Type::scalar(value.dtype());
        self.graph.push_node(NodeData {
            op: Op::Const(value),
            args: Vec::new(),
            ty,
        })
    }

    /// Appends `op` applied to `args`, typed by the op's rule.
    pub fn op(&mut self, op: Op, args: &[Value]) -> TypeResult<Value> {
        if let Some(bad) = args.iter().find(|&&a| !self.graph.contains(a)) {
            return Err(TypeError {
                message: format!("`{}` uses {bad}, which is not in the graph", op.mnemonic()),
            });
        }
        let ty = self.graph.result_type(&op, args)?;
        Ok(self.graph.push_node(NodeData {
            op,
            args: args.to_vec(),
            ty,
        }))
    }

    /// Appends a unary op.
    pub fn unary(&mut self, op: UnaryOp, a: Value) -> TypeResult<Value> {
        self.op(Op::Unary(op), &[a])
    }

    /// Appends a binary op.
    pub fn binary(&mut self, op: BinaryOp, a: Value, b: Value) -> TypeResult<Value> {
        self.op(Op::Binary(op), &[a, b])
    }

    /// Appends a comparison.
    pub fn compare(&mut self, op: CmpOp, a: Value, b: Value) -> TypeResult<Value> {
        self.op(Op::Compare(op), &[a, b])
    }

    /// Appends `select(cond, a, b)`.
    pub fn select(&mut self, cond: Value, a: Value, b: Value) -> TypeResult<Value> {
        self.op(Op::Select, &[cond, a, b])
    }

    /// Converts `a` to `to`; returns `a` itself when it already has that dtype.
    pub fn cast(&mut self, a: Value, to: DType) -> TypeResult<Value> {
        if self.dtype(a) == Some(to) {
            return Ok(a);
        }
        self.op(Op::Cast(to), &[a])
    }

    /// Appends a reduction.
    pub fn reduce(&mut self, op: ReduceOp, a: Value) -> TypeResult<Value> {
        self.op(Op::Reduce(op), &[a])
    }

    /// Appends `filter(mask)`.
    pub fn filter(&mut self, mask: Value) -> TypeResult<Value> {
        self.op(Op::Filter, &[mask])
    }

    /// Records the source name of `value` (a variable, TF or fx node name).
    pub fn set_source_name(&mut self, value: Value, name: &str) {
        self.graph.set_source_name(value, name);
    }

    /// Adds an output called `name` returning `value`.
    pub fn output(&mut self, name: &str, value: Value) {
        self.graph.push_output(name, value);
    }

    /// The finished graph (not yet verified).
    pub fn finish(self) -> Graph {
        self.graph
    }
}
