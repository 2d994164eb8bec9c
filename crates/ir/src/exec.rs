//! What every engine shares about running a graph: the run-time error type and
//! the checking of caller-supplied inputs against the signature, done once here so
//! the interpreter and the compiled tiers reject bad input identically.

use crate::data::Data;
use crate::entities::Value;
use crate::graph::Graph;
use crate::semantics::EvalError;
use crate::types::{DType, Dim, Type};
use crate::verify::Verified;
use std::borrow::Borrow;

/// Why a run of a graph failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ExecError {
    /// The caller gave the wrong number of inputs.
    #[error("the graph takes {expected} input(s), got {got}")]
    InputCount {
        /// Inputs in the signature.
        expected: usize,
        /// Inputs given.
        got: usize,
    },
    /// An input of the wrong kind or dtype.
    #[error("input `{name}` must be {expected}, got {got}")]
    InputType {
        /// The input's name.
        name: String,
        /// Its declared type.
        expected: Type,
        /// What was given.
        got: String,
    },
    /// A column whose length disagrees with another binding of the same dimension.
    #[error("input `{name}` has {got} rows, but dimension `{dim}` is {expected}")]
    Length {
        /// The input's name.
        name: String,
        /// The dimension.
        dim: String,
        /// The dimension's extent, from an earlier input or its fixed size.
        expected: u64,
        /// The input's length.
        got: u64,
    },
    /// Integer division by zero at a node.
    #[error("integer division by zero in {}", describe_node(*node, name))]
    DivisionByZero {
        /// The node that divided.
        node: Value,
        /// Its source name, if any.
        name: Option<String>,
    },
    /// A `gather` index outside its axis at a node.
    #[error("index out of range in {}", describe_node(*node, name))]
    IndexOutOfRange {
        /// The node that gathered.
        node: Value,
        /// Its source name, if any.
        name: Option<String>,
    },
    /// Room for the wrong number of outputs.
    #[error("the graph has {expected} output(s), got room for {got}")]
    OutputCount {
        /// Outputs in the signature.
        expected: usize,
        /// Rooms given.
        got: usize,
    },
    /// Room for an output of the wrong dtype or length.
    #[error("output `{name}` needs {expected}, got {got}")]
    Output {
        /// The output's name.
        name: String,
        /// What it needs (`f64[12]`, `room for 8 rows`).
        expected: String,
        /// What was given.
        got: String,
    },
    /// An engine met something it cannot run (a bug or an unsupported feature).
    #[error("{0}")]
    Unsupported(String),
}

fn describe_node(node: Value, name: &Option<String>) -> String {
    match name {
        Some(n) => format!("{node} (`{n}`)"),
        None => node.to_string(),
    }
}

/// Result of running a graph.
pub type ExecResult<T> = Result<T, ExecError>;

impl ExecError {
    /// The error for a failed scalar operation at `node` of `graph`.
    pub fn at_node(graph: &Graph, node: Value, err: EvalError) -> ExecError {
        let name = graph.source_name(node).map(str::to_string);
        match err {
            EvalError::DivisionByZero => ExecError::DivisionByZero { node, name },
            EvalError::IndexOutOfRange => ExecError::IndexOutOfRange { node, name },
            other => ExecError::Unsupported(format!("{node}: {other}")),
        }
    }

    /// The error a kernel's nonzero status stands for: the failed check
    /// at `node` of `graph` (the check the status names, which
    /// `kiln_kernel::Kernel::status_error` looks up): an index out of
    /// range where the node is a `gather` or an `index_add`, else a division by zero; an
    /// unknown status without a node.
    pub fn from_status(graph: &Graph, node: Option<Value>, status: i32) -> ExecError {
        match node {
            Some(node) => {
                let err = match graph.node(node).op {
                    crate::Op::Gather(_) | crate::Op::IndexAdd(_) => EvalError::IndexOutOfRange,
                    _ => EvalError::DivisionByZero,
                };
                ExecError::at_node(graph, node, err)
            }
            None => ExecError::Unsupported(format!("kernel returned status {status}")),
        }
    }
}

/// The extents of the symbolic dimensions, in [`crate::GraphInfo::symbols`] order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DimBindings {
    extents: Vec<(String, u64)>,
}

impl DimBindings {
    /// The extent bound to `dim`.
    pub fn extent(&self, dim: &Dim) -> Option<u64> {
        match dim {
            Dim::Fixed(n) => Some(*n),
            Dim::Sym(s) => self
                .extents
                .iter()
                .find(|(name, _)| **name == **s)
                .map(|&(_, n)| n),
        }
    }

    /// The extents in [`crate::GraphInfo::symbols`] order: the length arguments of a kernel.
    pub fn extents(&self) -> impl Iterator<Item = u64> + '_ {
        self.extents.iter().map(|&(_, n)| n)
    }
}

/// What binding sees of one input: a scalar, or the elements of an array
/// (row-major), each of a dtype; `Other` is neither (a selection).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum InputShape {
    /// A scalar of this dtype.
    Scalar(DType),
    /// This many elements of this dtype.
    Array(DType, u64),
    /// Something no input can be.
    Other,
}

impl InputShape {
    /// What binding sees of `data`.
    pub fn of(data: &Data) -> InputShape {
        match data {
            Data::Scalar(s) => InputShape::Scalar(s.dtype()),
            Data::Column(b) => InputShape::Array(b.dtype(), b.len() as u64),
            Data::Selection(_) => InputShape::Other,
        }
    }
}

/// Checks `inputs` against the signature of a verified graph and binds its
/// symbolic dimensions. Takes owned or borrowed data (`&[Data]`, `&[&Data]`).
pub fn bind_inputs<D: Borrow<Data>>(verified: &Verified, inputs: &[D]) -> ExecResult<DimBindings> {
    let shapes: Vec<InputShape> = inputs.iter().map(|d| InputShape::of(d.borrow())).collect();
    bind_shapes(verified, &shapes, |idx| inputs[idx].borrow().describe())
}

/// [`bind_inputs`] for inputs seen only by their [`InputShape`]s;
/// `describe(i)` names input `i` in errors (`f64[3]`).
pub fn bind_shapes(
    verified: &Verified,
    inputs: &[InputShape],
    describe: impl Fn(usize) -> String,
) -> ExecResult<DimBindings> {
    let (graph, info) = (verified.graph(), verified.info());
    if inputs.len() != graph.inputs().len() {
        return Err(ExecError::InputCount {
            expected: graph.inputs().len(),
            got: inputs.len(),
        });
    }
    let mut extents: Vec<(String, u64)> = Vec::with_capacity(info.symbols().len());
    for (idx, (input, shape)) in graph.inputs().iter().zip(inputs).enumerate() {
        let ty = graph.ty(input.value);
        let tensor = ty.as_tensor().expect("verified inputs are tensors");
        let type_error = || ExecError::InputType {
            name: input.name.clone(),
            expected: ty.clone(),
            got: describe(idx),
        };
        let len = match (*shape, tensor.shape.as_slice()) {
            (InputShape::Scalar(d), []) if d == tensor.dtype => continue,
            (InputShape::Array(d, len), [_, ..]) if d == tensor.dtype => len,
            _ => return Err(type_error()),
        };
        // A tensor's length is the product of its dimensions; one unbound
        // symbolic dimension is whatever makes it so.
        let mut known: u64 = 1;
        let mut unbound: Option<&str> = None;
        for dim in &tensor.shape {
            let extent = match dim {
                Dim::Fixed(n) => Some(*n),
                Dim::Sym(s) => extents
                    .iter()
                    .find(|(name, _)| **name == **s)
                    .map(|&(_, n)| n),
            };
            match (extent, dim) {
                (Some(n), _) => known = known.saturating_mul(n),
                (None, Dim::Sym(s)) if unbound.is_none_or(|u| *u == **s) => unbound = Some(s),
                (None, _) => return Err(type_error()),
            }
        }
        let wrong = |expected: u64| ExecError::Length {
            name: input.name.clone(),
            dim: tensor
                .shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(" × "),
            expected,
            got: len,
        };
        match unbound {
            None if known != len => return Err(wrong(known)),
            None => {}
            Some(s) => {
                let repeats = tensor
                    .shape
                    .iter()
                    .filter(|d| matches!(d, Dim::Sym(t) if **t == *s))
                    .count();
                let extent = if known == 0 || repeats != 1 {
                    None
                } else {
                    Some(len / known)
                };
                match extent {
                    Some(e) if e * known == len => extents.push((s.to_string(), e)),
                    _ => return Err(wrong(known)),
                }
            }
        }
    }
    Ok(DimBindings { extents })
}
