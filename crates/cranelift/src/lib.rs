//! kiln's Cranelift tier: translates a [`Kernel`] to CLIF and compiles it to
//! machine code, in-process ([`jit`]) or as a relocatable object ([`object`]).
//!
//! It makes no semantic decisions: lowering (in `kiln-kernel`) decided what runs in
//! which loop and where division can fail; `codegen` translates each kernel
//! statement into the CLIF instruction of the same meaning, with the native
//! signature of `kiln_kernel::abi`. Transcendentals call the C names of
//! `kiln_kernel::libcalls`, bound to whatever the caller of [`jit`] gives
//! (the facade binds them to the pure-Rust `libm` crate, as the interpreter
//! uses).

mod codegen;
mod vector;
mod vmath;

pub use codegen::{clif_type, signature};

use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::ModuleError;
use kiln_kernel::abi::CompiledKernel;
use kiln_kernel::backend::{
    Backend, BackendError, BackendOptions, BackendResult, Emit, EmitOptions, Symbols,
};
use kiln_kernel::{Kernel, LowerOptions, OptLevel};
use std::sync::{Arc, OnceLock};

/// The Cranelift tier as a [`Backend`]: the tier called `cranelift`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Cranelift;

impl Backend for Cranelift {
    fn name(&self) -> &'static str {
        "cranelift"
    }

    /// Matmuls in panels of 32-byte rows (`LowerOptions::panels`: 4 rows ×
    /// two 128-bit vectors, eight sums the vectorizer keeps in registers
    /// across `k`, [`vector::Promotion`]; wider panels spill them,
    /// docs/performance.md); convolutions as wide-row taps (`conv_panels`
    /// off: its panels ran 3×3 convolutions at 7×7 to 28×28 up to 15 %
    /// slower and the 7×7 one 1.8× slower); and transcendentals as calls (`LowerOptions::libm_calls`), which a vector
    /// loop makes to kiln's vector math routines where they are faster
    /// ([`vmath`]: the inline math, compiled once per process; `f32`
    /// functions) and otherwise to the `libm` crate (one call measured
    /// faster than the inline math's scalar code, docs/performance.md).
    /// Kernels stay small either way, which keeps compiling a population
    /// fast. Tree ensembles walk their tables, 8 rows side by side: the
    /// straight-line selects compiled 20× slower here and ran slower than
    /// even a walk of one row at a time (100 trees × 31 leaves: 7.0
    /// against 4.9 µs a row, docs/performance.md).
    fn lower_options(&self) -> LowerOptions {
        LowerOptions {
            packed_bools: false,
            panels: Some(32),
            conv_panels: false,
            // Cranelift has no prefetch instruction.
            prefetch: false,
            // kiln's vectorizer runs a one-row panel in vectors: on a Zen 3
            // core `[1, 784] @ [784, 256]` took 48 µs, `[5, 784] @ [784,
            // 256]` (a block and a row) 167, so a block of 4 takes about 120.
            padded_rest_rows: false,
            // Its code would run the tiles as scalar copies.
            transpose_tiles: false,
            libm_calls: true,
            running_min_max: false,
            tree_selects: 0,
            isin_chain: 12,
            tree_block: 8,
        }
    }

    fn compile_kernels(
        &self,
        kernels: Vec<Kernel>,
        options: &BackendOptions,
        symbols: Symbols<'_>,
    ) -> BackendResult<Vec<CompiledKernel>> {
        jit(kernels, symbols, options.opt_level, options.vectorize)
            .map_err(CodegenError::into_backend)
    }

    fn emits(&self) -> &'static [Emit] {
        &[Emit::Object, Emit::Header]
    }

    /// Objects for [`OBJECT_TARGETS`], at Cranelift's one optimizing level.
    fn emit(&self, kernel: &Kernel, symbol: &str, options: &EmitOptions) -> BackendResult<Vec<u8>> {
        if options.emit != Emit::Object {
            return Err(BackendError::Unsupported(format!(
                "the Cranelift tier writes obj and header, not `{}`",
                options.emit.name()
            )));
        }
        if options.cpu.is_some() || options.features.is_some() {
            return Err(BackendError::Unsupported(
                "the Cranelift tier takes no CPU or target features".into(),
            ));
        }
        let target = match options.target.as_str() {
            "native" => std::env::consts::ARCH,
            t => t,
        };
        object(kernel, target, symbol).map_err(CodegenError::into_backend)
    }
}

/// Why code generation failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CodegenError {
    /// Cranelift's module layer refused a declaration or definition.
    #[error("cranelift module: {0}")]
    Module(String),
    /// Cranelift failed to compile a function.
    #[error("cranelift: {0}")]
    Cranelift(String),
    /// The kernel is malformed (a lowering bug).
    #[error("invalid kernel: {0}")]
    Invalid(String),
    /// The target is not supported by this tier.
    #[error("unsupported: {0}")]
    Unsupported(String),
}

impl From<ModuleError> for CodegenError {
    fn from(e: ModuleError) -> Self {
        CodegenError::Module(e.to_string())
    }
}

/// Result of code generation.
pub type CodegenResult<T> = Result<T, CodegenError>;

impl CodegenError {
    /// The error as the [`Backend`] interface reports it.
    pub fn into_backend(self) -> BackendError {
        match self {
            CodegenError::Unsupported(m) => BackendError::Unsupported(m),
            e => BackendError::Failed(e.to_string()),
        }
    }
}

fn flags(pic: bool, speed: bool) -> CodegenResult<settings::Flags> {
    let mut builder = settings::builder();
    let set = |b: &mut settings::Builder, k: &str, v: &str| {
        b.set(k, v)
            .map_err(|e| CodegenError::Cranelift(format!("setting {k}: {e}")))
    };
    set(
        &mut builder,
        "opt_level",
        if speed { "speed" } else { "none" },
    )?;
    // Cranelift's own IR verifier costs about a third of compile time; lowering
    // and codegen are tested with it on (debug builds), releases skip it.
    set(
        &mut builder,
        "enable_verifier",
        if cfg!(debug_assertions) {
            "true"
        } else {
            "false"
        },
    )?;
    set(&mut builder, "is_pic", if pic { "true" } else { "false" })?;
    set(&mut builder, "use_colocated_libcalls", "false")?;
    Ok(settings::Flags::new(builder))
}

/// The host ISA at Cranelift's `speed` or `none` level, each built once per
/// process (building one costs more than compiling a small kernel).
fn host_isa(speed: bool) -> CodegenResult<OwnedTargetIsa> {
    type Isa = OnceLock<Result<OwnedTargetIsa, CodegenError>>;
    static ISAS: [Isa; 2] = [OnceLock::new(), OnceLock::new()];
    ISAS[usize::from(speed)]
        .get_or_init(|| {
            let builder = cranelift_native::builder()
                .map_err(|e| CodegenError::Unsupported(format!("host ISA: {e}")))?;
            builder
                .finish(flags(false, speed)?)
                .map_err(|e| CodegenError::Cranelift(e.to_string()))
        })
        .clone()
}

/// Machine code in memory; freed when dropped.
struct JitCode {
    module: Option<JITModule>,
}

impl Drop for JitCode {
    fn drop(&mut self) {
        if let Some(module) = self.module.take() {
            // SAFETY: every function pointer into this module is held by a
            // `CompiledKernel` that also holds an `Arc` to this `JitCode`, so
            // none can be called after the last `Arc` drops, which is now.
            unsafe { module.free_memory() };
        }
    }
}

// SAFETY: after `finalize_definitions` the module is never touched again except
// to free it in `drop`, which runs once, on whichever thread drops the last Arc;
// the code memory it owns is immutable and executable.
unsafe impl Send for JitCode {}
// SAFETY: as for `Send`: shared access never mutates the module.
unsafe impl Sync for JitCode {}

/// Compiles kernels into one JIT module with one finalize (a whole GP
/// population compiles as one unit), binding the C math names kernels call
/// to `symbols`. Cranelift has two levels: `O0` is its `none`, every other
/// level its `speed`. With `vectorize`, row loops the vectorizer takes run
/// in vectors where the host allows ([`vector`]).
pub fn jit(
    kernels: Vec<Kernel>,
    symbols: &[(&'static str, *const u8)],
    opt: OptLevel,
    vectorize: bool,
) -> CodegenResult<Vec<CompiledKernel>> {
    let isa = host_isa(opt != OptLevel::O0)?;
    let vector = if vectorize && vmath::vectorizes(&*isa) {
        Some(vmath::routines_for(&kernels, symbols)?)
    } else {
        None
    };
    let mut builder = JITBuilder::with_isa(isa, cranelift_module::default_libcall_names());
    for &(name, ptr) in symbols {
        builder.symbol(name, ptr);
    }
    for (name, ptr) in vector.iter().flat_map(|v| &v.1) {
        builder.symbol(name.clone(), *ptr);
    }
    let mut module = JITModule::new(builder);
    let mut ids = Vec::with_capacity(kernels.len());
    for (idx, kernel) in kernels.iter().enumerate() {
        // Internal names cannot collide with each other or with libm's.
        ids.push(codegen::define_kernel(
            &mut module,
            kernel,
            &format!("__kiln_kernel_{idx}"),
            true,
            vector.as_ref().map(|v| &v.0),
        )?);
    }
    module.finalize_definitions()?;
    let addresses: Vec<(*const u8, Option<*const u8>)> = ids
        .iter()
        .map(|&(id, wrapper)| {
            (
                module.get_finalized_function(id),
                wrapper.map(|w| module.get_finalized_function(w)),
            )
        })
        .collect();
    let code = Arc::new(JitCode {
        module: Some(module),
    });
    // SAFETY: each address is its kernel defined by `codegen` with
    // `abi::signature`, and its uniform entry (defined exactly when
    // `abi::needs_wrapper`), finalized in `code`'s module, which lives as long
    // as any handle holding `code`.
    Ok(unsafe { CompiledKernel::for_module(kernels, code, addresses) })
}

/// The targets [`object`] writes: short names and their triples.
pub const OBJECT_TARGETS: &[(&str, &str)] = &[
    ("x86_64", "x86_64-unknown-linux-gnu"),
    ("aarch64", "aarch64-unknown-linux-gnu"),
    ("riscv64", "riscv64gc-unknown-linux-gnu"),
];

/// A relocatable ELF object defining `kernel` under `symbol`, for `target` (a
/// short name of [`OBJECT_TARGETS`] or a full triple). Math functions are
/// imported by their C names.
pub fn object(kernel: &Kernel, target: &str, symbol: &str) -> CodegenResult<Vec<u8>> {
    let triple_text = OBJECT_TARGETS
        .iter()
        .find(|(short, _)| *short == target)
        .map_or(target, |(_, t)| t);
    let triple: target_lexicon::Triple = triple_text
        .parse()
        .map_err(|e| CodegenError::Unsupported(format!("target `{target}`: {e}")))?;
    let isa = cranelift_codegen::isa::lookup(triple)
        .map_err(|e| {
            CodegenError::Unsupported(format!(
                "target `{target}` (Cranelift supports x86_64, aarch64, riscv64): {e}"
            ))
        })?
        .finish(flags(true, true)?)
        .map_err(|e| CodegenError::Cranelift(e.to_string()))?;
    let builder = cranelift_object::ObjectBuilder::new(
        isa,
        symbol.as_bytes().to_vec(),
        cranelift_module::default_libcall_names(),
    )?;
    let mut module = cranelift_object::ObjectModule::new(builder);
    // Objects stay scalar: the vectorizer is tested on this machine's JIT
    // only (and RISC-V's Cranelift has no vectors without its V extension).
    codegen::define_kernel(&mut module, kernel, symbol, false, None)?;
    let product = module.finish();
    product
        .emit()
        .map_err(|e| CodegenError::Cranelift(e.to_string()))
}

/// The CLIF of `kernel` as Cranelift prints it (vectorized as the JIT
/// would), after comment lines naming the graph value (source name) each
/// CLIF value holds.
pub fn clif(kernel: &Kernel) -> CodegenResult<String> {
    let isa = host_isa(true)?;
    let vector = if vmath::vectorizes(&*isa) {
        Some(vmath::describe(kernel))
    } else {
        None
    };
    let mut module = JITModule::new(JITBuilder::with_isa(
        isa,
        cranelift_module::default_libcall_names(),
    ));
    codegen::clif_text(&mut module, kernel, vector.as_ref())
}
