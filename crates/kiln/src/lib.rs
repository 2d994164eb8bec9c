//! kiln compiles computation graphs to native code. This is the crate users
//! depend on: it loads sources into graphs ([`load`]), verifies them
//! ([`verify()`], the only way to get a [`Verified`] graph), and compiles them
//! on an [`Engine`]: the reference [`Interpreter`], the [`Cranelift`] JIT and
//! (with the `llvm` feature) the [`Llvm`] JIT take the same
//! [`CompileOptions`], compile one graph or a batch into one module, and
//! return programs that run [`Data`] ([`Program::run`]), borrowed arrays
//! ([`JitProgram::run_arrays`]), or typed scalar calls
//! ([`JitProgram::typed`]).
//!
//! ```
//! use kiln::{CompileOptions, Cranelift, Data, Engine, Format, Program, Scalar};
//! let graph = kiln::load("x * 2.0 + 1.0", Format::Py, &Default::default()).unwrap();
//! let graph = kiln::verify(graph.graph).unwrap();
//! let program = Cranelift.compile(&graph, &CompileOptions::default()).unwrap();
//! let out = program.run(&[Data::Scalar(Scalar::F64(20.0))]).unwrap();
//! assert_eq!(out, vec![Data::Scalar(Scalar::F64(41.0))]);
//! let f = program.typed::<(f64,), f64>().unwrap();
//! assert_eq!(f.call((20.0,)), 41.0);
//! ```

pub mod aot;
mod arrays;
mod derive;
pub mod fit;
mod jit;
pub mod population;
pub mod runtime;
#[cfg(feature = "formats")]
pub mod tensors;
mod tier;
pub mod tierup;

pub use arrays::{ArrayMut, ArrayRef};
pub use derive::Derivatives;
pub use fit::{fit_constants, FitOptions, Fitted};
pub use jit::{JitProgram, NativeScalar, ScalarArgs, TypedFunc};
pub use kiln_cranelift as cranelift;
pub use kiln_cranelift::Cranelift;
pub use kiln_frontend as frontend;
pub use kiln_frontend::py::Options as PyOptions;
pub use kiln_interp as interp;
pub use kiln_ir as ir;
pub use kiln_ir::{
    optimize, verify, Buffer, DType, Data, Dim, ExecError, ExecResult, Graph, GraphInfo,
    ParseError, Scalar, SourceMap, TensorType, Type, Verified, VerifierErrors,
};
pub use kiln_kernel as kernel;
pub use kiln_kernel::backend::{Backend, BackendError, BackendOptions, Emit, EmitOptions};
/// How many threads kernels use (`set_num_threads`, `with_num_threads`,
/// `KILN_NUM_THREADS`), and when a loop is worth cutting (`set_grain`).
pub use kiln_kernel::threads;
pub use kiln_kernel::OptLevel;
#[cfg(feature = "llvm")]
pub use kiln_llvm as llvm;
#[cfg(feature = "llvm")]
pub use kiln_llvm::Llvm;
pub use kiln_vm as vm;
pub use kiln_vm::Vm;
pub use population::{MemberError, Population, PopulationOptions, Precision, DEFAULT_TIER};
pub use tier::{Auto, Tier, TierError, NO_LLVM};
pub use tierup::{KernelSize, TierStats, TierUp, TierUpState, TieredProgram};

use std::path::Path;

/// Prepares kiln for the process's exit: no new LLVM compile starts, and the
/// one a background thread runs (an `auto` program's tier-up) finishes
/// first. Call it before returning from `main` or calling `exit` in a
/// program that may tier up, so that no exit handler destroys LLVM's
/// globals under a compile (`kiln_llvm::InFlight`); Python's `kiln` calls it
/// from an `atexit` callback. It cannot be undone. Without the LLVM tier it
/// does nothing.
pub fn before_exit() {
    #[cfg(feature = "llvm")]
    kiln_llvm::before_exit();
}

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
    /// A LightGBM text model (`save_model`; its first line is `tree`).
    LightGbm,
    /// An XGBoost JSON model (`save_model("model.json")`, `save_raw("json")`).
    XgBoost,
    /// kiln's tree-model text (first line `kiln-trees v0`; what `kiln.trees`
    /// writes for scikit-learn).
    KilnTrees,
}

impl Format {
    /// The format named `py`, `kiln`, `fx` or `tf` (as the bindings'
    /// `format` option takes it); the error lists the names.
    pub fn named(name: &str) -> Result<Format, String> {
        Ok(match name {
            "py" => Format::Py,
            "kiln" => Format::Kiln,
            "fx" => Format::Fx,
            "tf" => Format::Tf,
            "lightgbm" => Format::LightGbm,
            "xgboost" => Format::XgBoost,
            "kiln-trees" => Format::KilnTrees,
            f => {
                return Err(format!(
                    "format must be 'py', 'kiln', 'fx', 'tf', 'lightgbm', 'xgboost' or 'kiln-trees', not {f:?}"
                ))
            }
        })
    }

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

    /// The format a file's contents say, where its name says none: a
    /// LightGBM text model starts with the line `tree`, an XGBoost JSON model
    /// with its `"learner"` object, kiln's tree-model text with `kiln-trees v0`.
    pub fn sniff(bytes: &[u8]) -> Option<Format> {
        let head = &bytes[..bytes.len().min(64)];
        let head = String::from_utf8_lossy(head);
        if kiln_frontend::trees::xgboost::sniff(&head) {
            return Some(Format::XgBoost);
        }
        if kiln_frontend::trees::kiln::sniff(&head) {
            return Some(Format::KilnTrees);
        }
        kiln_frontend::trees::lightgbm::sniff(&head).then_some(Format::LightGbm)
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
    /// Tree-ensemble models: raw scores or the link, one input or columns.
    pub trees: kiln_frontend::trees::Options,
}

impl LoadOptions {
    /// Gives input `name` the type `ty` for every frontend: its dtype and
    /// shape for the Python subset, the placeholder's type for torch.fx and
    /// TensorFlow (what the bindings' `inputs` option sets).
    pub fn give_input(&mut self, name: &str, ty: Type) {
        if let Type::Tensor(tensor) = &ty {
            self.py
                .shapes
                .insert(name.to_string(), tensor.shape.clone());
            self.py.dtypes.insert(name.to_string(), tensor.dtype);
        }
        self.fx.inputs.insert(name.to_string(), ty.clone());
        self.tf.inputs.insert(name.to_string(), ty);
    }
}

/// Verifies a loaded graph, its errors rendered one per line and located
/// in `text` (the source called `name`) wherever the source map knows the
/// value: what the CLI, the Python package and the Node add-on report.
pub fn verify_located(
    graph: Graph,
    source_map: &SourceMap,
    name: &str,
    text: &str,
) -> Result<Verified, String> {
    verify(graph).map_err(|errors| {
        let lines: Vec<String> = errors
            .0
            .iter()
            .map(|e| match e.location.and_then(|v| source_map.get(v)) {
                Some(loc) => kiln_ir::diag::render_located(name, text, loc, &e.to_string()),
                None => format!("{name}: error: {e}"),
            })
            .collect();
        lines.join("\n")
    })
}

/// Reads `text` in `format` into an unverified graph.
pub fn load(text: &str, format: Format, options: &LoadOptions) -> Result<Loaded, ParseError> {
    load_bytes(text.as_bytes(), format, options)
}

/// Reads a source in `format` (binary for a `.pb` GraphDef, UTF-8 text for
/// every other format) into an unverified graph.
pub fn load_bytes(
    bytes: &[u8],
    format: Format,
    options: &LoadOptions,
) -> Result<Loaded, ParseError> {
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
        Format::Py => kiln_frontend::py::parse(text()?, &options.py)?,
        Format::Fx => kiln_frontend::fx::parse(text()?, &options.fx)?,
        Format::Tf if looks_like_pbtxt(bytes) => {
            kiln_frontend::tf::parse_text(text()?, &options.tf)?
        }
        Format::Tf => kiln_frontend::tf::parse_binary(bytes, &options.tf)?,
        Format::LightGbm | Format::XgBoost | Format::KilnTrees => {
            use kiln_frontend::trees;
            let src = text()?;
            let (model, name) = match format {
                Format::LightGbm => (trees::lightgbm::parse(src)?, "lightgbm"),
                Format::XgBoost => (trees::xgboost::parse(src)?, "xgboost"),
                _ => (trees::kiln::parse(src)?, "trees"),
            };
            let graph = model
                .graph(name, &options.trees)
                .map_err(|e| ParseError::at(src, 0, e))?;
            (graph, SourceMap::default())
        }
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

/// Parses a type as the CLI's `--input` and the Python package's `inputs=`
/// write it: a dtype (`f64`, or NumPy's and C's names: `float64`, `double`,
/// `float32`, `float`, `int64`, `int`, `long`, `int32`, `bool`) and an
/// optional shape in brackets whose dimensions are numbers or symbols:
/// `f64`, `f32[n]`, `i64[n, 3]`.
pub fn parse_type(text: &str) -> Result<Type, String> {
    let (dtype, shape) = match text.split_once('[') {
        Some((d, rest)) => (
            d,
            rest.trim_end()
                .strip_suffix(']')
                .ok_or_else(|| format!("type `{text}`: unclosed `[`"))?,
        ),
        None => (text, ""),
    };
    let dtype = match dtype.trim() {
        "float32" | "float" => DType::F32,
        "float64" | "double" => DType::F64,
        "int32" => DType::I32,
        "int64" | "int" | "long" => DType::I64,
        d => DType::from_name(d)
            .ok_or_else(|| format!("type `{text}`: unknown dtype `{d}` (bool i32 i64 f32 f64)"))?,
    };
    let mut dims = Vec::new();
    for d in shape.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        dims.push(match d.parse::<u64>() {
            Ok(k) => Dim::Fixed(k),
            Err(_)
                if d.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && !d.starts_with(|c: char| c.is_ascii_digit()) =>
            {
                Dim::Sym(d.into())
            }
            Err(_) => return Err(format!("type `{text}`: `{d}` is not a dimension")),
        });
    }
    Ok(Type::Tensor(TensorType { dtype, shape: dims }))
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

/// How to compile a graph; every engine takes the same options (the
/// interpreter uses only [`Self::optimize`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CompileOptions {
    /// Run kiln's graph passes (fold, simplify, CSE, DCE) first. Default on.
    pub optimize: bool,
    /// The backend's optimization level.
    pub opt_level: OptLevel,
    /// Pass `bool` column inputs as packed bitmaps (Arrow's layout, see
    /// `kiln_kernel::LowerOptions::packed_bools`) in calls through
    /// [`JitProgram::call_slots`]; [`Program::run`] packs them itself.
    pub packed_bools: bool,
    /// Transcendentals as calls into the `libm` crate (`Some(true)`) or as
    /// inline math (`Some(false)`, see `kiln_kernel::LowerOptions::libm_calls`);
    /// `None`, the default: the tier's choice (Cranelift calls, LLVM inlines
    /// and vectorizes). The bits are the same either way.
    pub libm_calls: Option<bool>,
    /// Whether the Cranelift JIT runs row loops in vectors
    /// (`kiln_cranelift`'s vectorizer; on x86-64). `None`, the default: yes.
    /// Vector loops evaluate faster and compile slower (measured on the GP
    /// population; the break-even is near 15,000–20,000 rows,
    /// docs/performance.md), so a caller that compiles many kernels for
    /// short columns turns it off. The bits are the same.
    pub vectorize: Option<bool>,
    /// Whether kernels may run on several threads (`kiln::threads`): loops
    /// whose iterations are independent run in chunks when the work pays
    /// for it. `None`, the default: yes. A caller that runs many kernels
    /// side by side itself (a population) turns it off; the bits are the
    /// same at any thread count.
    pub parallel: Option<bool>,
    /// Whether the LLVM tier may read and write the persistent code cache
    /// (`kiln::llvm::cache`: `KILN_CACHE_DIR`, `KILN_CACHE=0` to turn it
    /// off for the process). Default on; the other tiers keep none.
    pub cache: bool,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            optimize: true,
            opt_level: OptLevel::default(),
            packed_bools: false,
            libm_calls: None,
            vectorize: None,
            parallel: None,
            cache: true,
        }
    }
}

impl CompileOptions {
    /// The graph an engine compiles: `graph` optimized if asked.
    pub fn prepare(&self, graph: &Verified) -> CompileResult<Verified> {
        if self.optimize {
            Ok(optimize(graph)?)
        } else {
            Ok(graph.clone())
        }
    }
}

/// A graph made ready to run by an engine. `Send + Sync`: call it from many
/// threads.
pub trait Program: Send + Sync {
    /// The graph this program runs (optimized, if the options said so).
    fn verified(&self) -> &Verified;

    /// Runs on borrowed `inputs`, in signature order, and returns the outputs
    /// in order.
    fn run_refs(&self, inputs: &[&Data]) -> ExecResult<Vec<Data>>;

    /// Runs on `inputs`, in signature order, and returns the outputs in order.
    fn run(&self, inputs: &[Data]) -> ExecResult<Vec<Data>> {
        let refs: Vec<&Data> = inputs.iter().collect();
        self.run_refs(&refs)
    }

    /// Runs on borrowed inputs (in signature order) and writes each output
    /// into the caller's room (in signature order: a scalar output is one
    /// element, an array output exactly its elements, a selection at least
    /// one index per row). Returns how many elements each output got (a
    /// selection's length). A compiling tier reads and writes the caller's
    /// memory directly ([`JitProgram`]); the interpreter copies. Inputs and
    /// outputs cannot overlap: Rust's borrows guarantee it.
    fn run_arrays(
        &self,
        inputs: &[ArrayRef<'_>],
        outputs: &mut [ArrayMut<'_>],
    ) -> ExecResult<Vec<usize>> {
        // Check the inputs and the room before running, in the order a
        // compiled kernel must.
        let graph = self.verified().graph();
        let shapes: Vec<ir::exec::InputShape> = inputs.iter().map(ArrayRef::shape).collect();
        let bindings = ir::exec::bind_shapes(self.verified(), &shapes, |i| inputs[i].describe())?;
        arrays::check_rooms(graph, &bindings, outputs)?;
        let data: Vec<Data> = inputs.iter().map(|a| a.to_data()).collect();
        let results = self.run(&data)?;
        results
            .into_iter()
            .zip(outputs.iter_mut())
            .zip(graph.outputs())
            .map(|((data, room), out)| room.fill(&out.name, data))
            .collect()
    }
}

/// Something that runs graphs: the interpreter, or a compiling tier. Each
/// returns its own program type ([`JitProgram`] for every compiling tier);
/// [`engines()`] lists them behind [`DynEngine`] for code that treats every
/// tier alike.
pub trait Engine: Send + Sync {
    /// What [`Self::compile`] returns.
    type Program: Program + 'static;

    /// The name the CLI's `--tier` uses.
    fn name(&self) -> &'static str;

    /// Compiles verified graphs together: for a compiling tier, into one
    /// module with one finalize (a GP population). One program per graph, in
    /// order; each keeps the shared code alive.
    fn compile_batch(
        &self,
        graphs: &[Verified],
        options: &CompileOptions,
    ) -> CompileResult<Vec<Self::Program>>;

    /// Compiles one verified graph.
    fn compile(&self, graph: &Verified, options: &CompileOptions) -> CompileResult<Self::Program> {
        let mut programs = self.compile_batch(std::slice::from_ref(graph), options)?;
        Ok(programs.pop().expect("one graph in, one program out"))
    }
}

/// An [`Engine`] with its program type erased, so engines fit in one list.
pub trait DynEngine: Send + Sync {
    /// The name the CLI's `--tier` uses.
    fn name(&self) -> &'static str;

    /// [`Engine::compile`], boxed.
    fn compile_dyn(
        &self,
        graph: &Verified,
        options: &CompileOptions,
    ) -> CompileResult<Box<dyn Program>>;

    /// [`Engine::compile_batch`], boxed.
    fn compile_batch_dyn(
        &self,
        graphs: &[Verified],
        options: &CompileOptions,
    ) -> CompileResult<Vec<Box<dyn Program>>>;
}

impl<E: Engine> DynEngine for E {
    fn name(&self) -> &'static str {
        Engine::name(self)
    }

    fn compile_dyn(
        &self,
        graph: &Verified,
        options: &CompileOptions,
    ) -> CompileResult<Box<dyn Program>> {
        Ok(Box::new(self.compile(graph, options)?))
    }

    fn compile_batch_dyn(
        &self,
        graphs: &[Verified],
        options: &CompileOptions,
    ) -> CompileResult<Vec<Box<dyn Program>>> {
        let programs = self.compile_batch(graphs, options)?;
        Ok(programs
            .into_iter()
            .map(|p| Box::new(p) as Box<dyn Program>)
            .collect())
    }
}

/// The reference interpreter as an [`Engine`].
#[derive(Copy, Clone, Debug, Default)]
pub struct Interpreter;

/// A graph the interpreter runs.
#[derive(Clone, Debug)]
pub struct InterpProgram {
    graph: Verified,
}

impl Program for InterpProgram {
    fn verified(&self) -> &Verified {
        &self.graph
    }

    fn run_refs(&self, inputs: &[&Data]) -> ExecResult<Vec<Data>> {
        kiln_interp::run(&self.graph, inputs)
    }
}

impl Engine for Interpreter {
    type Program = InterpProgram;

    fn name(&self) -> &'static str {
        "interp"
    }

    fn compile_batch(
        &self,
        graphs: &[Verified],
        options: &CompileOptions,
    ) -> CompileResult<Vec<InterpProgram>> {
        graphs
            .iter()
            .map(|g| {
                Ok(InterpProgram {
                    graph: options.prepare(g)?,
                })
            })
            .collect()
    }
}

/// Every engine this build has, the interpreter (the oracle) first
/// ([`Tier::all`]'s order).
pub fn engines() -> Vec<Box<dyn DynEngine>> {
    Tier::all()
        .map(|t| t.engine().expect("this build has each of its tiers"))
        .collect()
}

// The README's Rust examples are doctests of `kiln-arrow`, the one crate that
// sees both `kiln` and the Arrow crates they use.
