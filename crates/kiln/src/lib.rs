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
pub mod tensors;

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
    ParseError, Scalar, SourceMap, TensorType, Type, VerifierErrors,
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
    /// torch.fx graph text, as `print(gm.graph)` writes it (`.fx`, `graph.txt`),
    /// or the module tree and code `print(gm)` writes (`module.txt`).
    Fx,
    /// A TensorFlow GraphDef, text (`.pbtxt`) or binary (`.pb`).
    Tf,
}

impl Format {
    /// The format a file's name says: `.kiln`, `.py`, `.fx`, `graph.txt` or
    /// `module.txt` (torch.fx: `print(gm.graph)` or `print(gm)`), `.pbtxt` or
    /// `.pb`.
    pub fn from_path(path: &Path) -> Option<Format> {
        if matches!(
            path.file_name().and_then(|n| n.to_str()),
            Some("graph.txt" | "module.txt")
        ) {
            return Some(Format::Fx);
        }
        match path.extension()?.to_str()? {
            "kiln" => Some(Format::Kiln),
            "py" => Some(Format::Py),
            "fx" => Some(Format::Fx),
            "pbtxt" | "pb" => Some(Format::Tf),
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

/// What each frontend needs beyond the source: input shapes for Python,
/// placeholder types and weights for torch.fx, input types and output names
/// for TensorFlow.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// The Python subset's input shapes.
    pub py: PyOptions,
    /// torch.fx placeholder types and weights.
    pub fx: kiln_frontend::fx::Options,
    /// TensorFlow input types and outputs.
    pub tf: kiln_frontend::tf::Options,
}

/// Reads `text` in `format` into an unverified graph.
pub fn load(text: &str, format: Format, py: &PyOptions) -> Result<Loaded, ParseError> {
    let opts = LoadOptions {
        py: py.clone(),
        ..LoadOptions::default()
    };
    load_bytes(text.as_bytes(), format, &opts)
}

/// Reads a source in `format` (binary for a `.pb` GraphDef, UTF-8 text for
/// every other format) into an unverified graph.
pub fn load_bytes(bytes: &[u8], format: Format, opts: &LoadOptions) -> Result<Loaded, ParseError> {
    let text = || {
        std::str::from_utf8(bytes).map_err(|e| {
            let loc = kiln_ir::Loc::of_offset(
                std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or(""),
                e.valid_up_to(),
            );
            ParseError {
                loc,
                message: "the source is not UTF-8 text".to_string(),
            }
        })
    };
    let (graph, source_map) = match format {
        Format::Kiln => kiln_ir::text::parse_with_source_map(text()?)?,
        Format::Py => kiln_frontend::py::parse(text()?, &opts.py)?,
        Format::Fx => kiln_frontend::fx::parse(text()?, &opts.fx)?,
        Format::Tf if looks_like_pbtxt(bytes) => kiln_frontend::tf::parse_text(text()?, &opts.tf)?,
        Format::Tf => kiln_frontend::tf::parse_binary(bytes, &opts.tf)?,
    };
    Ok(Loaded { graph, source_map })
}

/// A text GraphDef starts with a field name or a comment; a binary one with a
/// field tag byte (`0x0a` for `node`).
fn looks_like_pbtxt(bytes: &[u8]) -> bool {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    std::str::from_utf8(bytes).is_ok()
        && first.is_none_or(|b| b.is_ascii_alphabetic() || *b == b'#')
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

// The README's Rust examples are doctests of `kiln-arrow`, the one crate that
// sees both `kiln` and the Arrow crates they use.
