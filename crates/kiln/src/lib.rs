//! kiln compiles computation graphs to native code. This is the crate users
//! depend on: it loads sources into graphs, optimizes them, and runs them on an
//! [`Engine`]: the reference interpreter, the Cranelift JIT, and (with the
//! `llvm` feature) the LLVM JIT all implement the same trait, so tests and the
//! CLI treat every tier alike.
//!
//! ```
//! use kiln::{Data, Engine, Format, Scalar};
//! let graph = kiln::load("x * 2.0 + 1.0", Format::Py, &Default::default()).unwrap();
//! let program = kiln::Interpreter.compile_graph(&graph.graph, true).unwrap();
//! let out = program.run(&[Data::Scalar(Scalar::F64(20.0))]).unwrap();
//! assert_eq!(out, vec![Data::Scalar(Scalar::F64(41.0))]);
//! ```

pub mod jit;

#[cfg(feature = "llvm")]
pub use jit::Llvm;
pub use jit::{compile_many, Cranelift, JitProgram, NativeType, ScalarArgs, ScalarFn};
pub use kiln_cranelift as cranelift;
pub use kiln_frontend as frontend;
pub use kiln_frontend::py::Options as PyOptions;
pub use kiln_interp as interp;
pub use kiln_ir as ir;
pub use kiln_ir::{
    optimize, verify, Buffer, DType, Data, Dim, ExecError, ExecResult, Graph, GraphInfo,
    ParseError, Scalar, SourceMap, Type, VerifierErrors,
};
#[cfg(feature = "llvm")]
pub use kiln_llvm as llvm;

use std::path::Path;

/// The source languages kiln reads.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Format {
    /// The `.kiln` text format.
    Kiln,
    /// The Python subset (`.py`, and `-e` expressions).
    Py,
}

impl Format {
    /// The format a file's extension names.
    pub fn from_path(path: &Path) -> Option<Format> {
        match path.extension()?.to_str()? {
            "kiln" => Some(Format::Kiln),
            "py" => Some(Format::Py),
            _ => None,
        }
    }
}

/// A loaded graph and where its values came from in the source.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// The graph, not yet verified.
    pub graph: Graph,
    /// Source locations of the graph's values.
    pub source_map: SourceMap,
}

/// Reads `text` in `format` into an unverified graph.
pub fn load(text: &str, format: Format, py: &PyOptions) -> Result<Loaded, ParseError> {
    let (graph, source_map) = match format {
        Format::Kiln => kiln_ir::text::parse_with_source_map(text)?,
        Format::Py => kiln_frontend::py::parse(text, py)?,
    };
    Ok(Loaded { graph, source_map })
}

/// Why a graph could not be compiled.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CompileError {
    /// The graph is invalid.
    #[error("invalid graph:\n{0}")]
    Invalid(#[from] VerifierErrors),
    /// The engine cannot handle something in the graph.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// Code generation failed (a bug in a tier).
    #[error("code generation failed: {0}")]
    Codegen(String),
    /// A typed handle was asked for a signature the graph does not have.
    #[error("signature mismatch: {0}")]
    Signature(String),
}

/// Result of compiling a graph.
pub type CompileResult<T> = Result<T, CompileError>;

/// A graph made ready to run by an engine.
pub trait Program: Send + Sync {
    /// Runs on borrowed `inputs`, in signature order, and returns the outputs
    /// in order.
    fn run_refs(&self, inputs: &[&Data]) -> ExecResult<Vec<Data>>;

    /// Runs on `inputs`, in signature order, and returns the outputs in order.
    fn run(&self, inputs: &[Data]) -> ExecResult<Vec<Data>> {
        let refs: Vec<&Data> = inputs.iter().collect();
        self.run_refs(&refs)
    }
}

/// Something that runs graphs: the interpreter, or a compiling tier.
pub trait Engine: Send + Sync {
    /// The name the CLI's `--tier` uses.
    fn name(&self) -> &'static str;

    /// Makes a verified graph ready to run.
    fn compile(&self, graph: &Graph, info: &GraphInfo) -> CompileResult<Box<dyn Program>>;

    /// Verifies `graph`, optimizes it if asked, and compiles it.
    fn compile_graph(&self, graph: &Graph, optimize: bool) -> CompileResult<Box<dyn Program>> {
        let info = verify(graph)?;
        if optimize {
            let (graph, info) = kiln_ir::optimize(graph, &info)?;
            self.compile(&graph, &info)
        } else {
            self.compile(graph, &info)
        }
    }
}

/// The reference interpreter as an [`Engine`].
#[derive(Copy, Clone, Debug, Default)]
pub struct Interpreter;

struct InterpProgram {
    graph: Graph,
    info: GraphInfo,
}

impl Program for InterpProgram {
    fn run_refs(&self, inputs: &[&Data]) -> ExecResult<Vec<Data>> {
        kiln_interp::run(&self.graph, &self.info, inputs)
    }
}

impl Engine for Interpreter {
    fn name(&self) -> &'static str {
        "interp"
    }

    fn compile(&self, graph: &Graph, info: &GraphInfo) -> CompileResult<Box<dyn Program>> {
        Ok(Box::new(InterpProgram {
            graph: graph.clone(),
            info: info.clone(),
        }))
    }
}

/// Every engine this build has, the interpreter (the oracle) first.
pub fn engines() -> Vec<Box<dyn Engine>> {
    vec![
        Box::new(Interpreter),
        Box::new(Cranelift),
        #[cfg(feature = "llvm")]
        Box::new(Llvm::default()),
    ]
}

/// The README's Rust example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;
