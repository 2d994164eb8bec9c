//! kiln's LLVM 19 tier: translates a [`Kernel`] to LLVM IR (`codegen`),
//! optimizes it with the new pass manager (`default<O0>` … `default<O3>`) for a
//! target machine, and emits objects, assembly, textual IR, bitcode and linked
//! wasm32 modules for any target LLVM knows ([`emit`]), or compiles it
//! in process ([`jit`]), keeping the objects it compiles in a persistent
//! code cache ([`cache`]) for the next process.
//!
//! It makes no semantic decisions: lowering (in `kiln-kernel`) decided what runs in
//! which loop and where division can fail, and `codegen` emits the LLVM IR that
//! computes exactly `kiln_ir::semantics`: lowering already expanded every case
//! LLVM would leave undefined. Transcendentals are calls to the C names of
//! `kiln_kernel::libcalls`, marked `nobuiltin` so LLVM never folds or
//! rewrites them; the JIT binds them to the addresses its caller gives (the
//! facade's are the pure-Rust `libm` crate's, so the in-process tier matches
//! the interpreter bit for bit).
//!
//! Every call builds a fresh LLVM context and module: a module optimized or
//! emitted for one target is never reused for another.

pub mod cache;
mod codegen;
mod fallback;
mod jit;
mod target;

pub use cache::Cache;
pub use jit::{before_exit, jit, load_cached, InFlight};
pub use target::{resolve_target, TargetSpec, TARGETS};

use inkwell::context::Context;
use inkwell::module::Module;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{FileType, TargetMachine};
use kiln_kernel::abi::CompiledKernel;
use kiln_kernel::backend::{
    Backend, BackendError, BackendOptions, BackendResult, CacheUse, Emit, EmitOptions, Symbols,
};
use kiln_kernel::{Kernel, LowerOptions};

/// Why code generation failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CodegenError {
    /// LLVM rejected the module, a pass pipeline or an emit request.
    #[error("llvm: {0}")]
    Llvm(String),
    /// The kernel is malformed (a lowering bug) or produced invalid IR.
    #[error("invalid kernel: {0}")]
    Invalid(String),
    /// The target, CPU, option or output is not supported.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// Linking (wasm-ld) failed or could not be started.
    #[error("link: {0}")]
    Link(String),
}

/// Result of code generation.
pub type CodegenResult<T> = Result<T, CodegenError>;

pub use kiln_kernel::OptLevel;

/// The new pass manager's pipeline for a level.
fn pipeline(opt: OptLevel) -> &'static str {
    match opt {
        OptLevel::O0 => "default<O0>",
        OptLevel::O1 => "default<O1>",
        OptLevel::O2 => "default<O2>",
        OptLevel::O3 => "default<O3>",
    }
}

/// The code generator's level for a level.
fn codegen_level(opt: OptLevel) -> inkwell::OptimizationLevel {
    match opt {
        OptLevel::O0 => inkwell::OptimizationLevel::None,
        OptLevel::O1 => inkwell::OptimizationLevel::Less,
        OptLevel::O2 => inkwell::OptimizationLevel::Default,
        OptLevel::O3 => inkwell::OptimizationLevel::Aggressive,
    }
}

/// The LLVM tier as a [`Backend`]: the tier called `llvm`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Llvm;

impl Backend for Llvm {
    fn name(&self) -> &'static str {
        "llvm"
    }

    /// Inline math, and matmuls and convolutions in panels
    /// (`LowerOptions::panels`, `conv_panels`), which LLVM vectorizes into
    /// register blocks, as wide as the host's vector registers hold
    /// ([`target::panel_bytes`]), prefetching `a`'s next rows where they are
    /// AVX-512's ([`target::prefetches`]). Tree ensembles up to
    /// [`kiln_kernel::TREE_SELECTS`] nodes as straight-line selects, which
    /// LLVM runs in vectors of rows; larger ones walk their tables 8 rows
    /// side by side.
    fn lower_options(&self) -> LowerOptions {
        let panels = target::host_panel_bytes();
        LowerOptions {
            panels: Some(panels),
            conv_panels: true,
            prefetch: target::prefetches(panels),
            padded_rest_rows: target::pads_rest_rows(panels),
            transpose_tiles: true,
            running_min_max: true,
            tree_selects: kiln_kernel::TREE_SELECTS,
            isin_chain: kiln_kernel::ISIN_CHAIN,
            tree_block: 8,
            ..LowerOptions::default()
        }
    }

    /// The panels as wide as the request's target holds
    /// ([`TargetSpec::panel_bytes`]; the host's where the target does not
    /// resolve, which `emit` then reports).
    fn emit_lower_options_for(&self, request: &EmitOptions) -> LowerOptions {
        let spec = resolve_target(
            &request.target,
            request.cpu.as_deref(),
            request.features.as_deref(),
        );
        let panels = spec.map_or_else(|_| target::host_panel_bytes(), |s| s.panel_bytes());
        LowerOptions {
            panels: Some(panels),
            prefetch: target::prefetches(panels),
            padded_rest_rows: target::pads_rest_rows(panels),
            ..self.emit_lower_options()
        }
    }

    fn compile_kernels(
        &self,
        kernels: Vec<Kernel>,
        options: &BackendOptions,
        symbols: Symbols<'_>,
    ) -> BackendResult<Vec<CompiledKernel>> {
        let cache = match options.cache {
            CacheUse::Off => None,
            CacheUse::ReadWrite | CacheUse::ReadOnly => Cache::from_env(),
        };
        if options.cache == CacheUse::ReadOnly {
            let cache = cache.ok_or(BackendError::NotCached)?;
            return load_cached(kernels, options.opt_level, symbols, &cache)
                .map_err(CodegenError::into_backend)?
                .ok_or(BackendError::NotCached);
        }
        jit(kernels, options.opt_level, symbols, cache.as_ref()).map_err(CodegenError::into_backend)
    }

    fn emits(&self) -> &'static [Emit] {
        &[
            Emit::Object,
            Emit::Assembly,
            Emit::LlvmIr,
            Emit::Bitcode,
            Emit::Wasm,
            Emit::Header,
        ]
    }

    fn emit(&self, kernel: &Kernel, symbol: &str, options: &EmitOptions) -> BackendResult<Vec<u8>> {
        emit(kernel, symbol, options).map_err(CodegenError::into_backend)
    }
}

impl CodegenError {
    /// The error as the [`Backend`] interface reports it: a request LLVM
    /// does not serve, or its failure (linking included).
    pub fn into_backend(self) -> BackendError {
        match self {
            CodegenError::Unsupported(m) => BackendError::Unsupported(m),
            e => BackendError::Failed(e.to_string()),
        }
    }
}

/// Runs the `default<On>` pipeline over `module` for `machine`. Loop
/// vectorization and unrolling are on from `-O2`, as clang sets them; the SLP
/// vectorizer is off (`target::init_targets` says why).
fn optimize(module: &Module, machine: &TargetMachine, opt: OptLevel) -> CodegenResult<()> {
    let options = PassBuilderOptions::create();
    let vectorize = matches!(opt, OptLevel::O2 | OptLevel::O3);
    options.set_loop_vectorization(vectorize);
    options.set_loop_slp_vectorization(false);
    options.set_loop_interleaving(vectorize);
    options.set_loop_unrolling(opt != OptLevel::O0);
    fallback::keep_variants(module);
    module
        .run_passes(pipeline(opt), machine, options)
        .map_err(|e| CodegenError::Llvm(e.to_string()))?;
    if fallback::release_variants(module) {
        module
            .run_passes("globaldce", machine, PassBuilderOptions::create())
            .map_err(|e| CodegenError::Llvm(e.to_string()))?;
    }
    Ok(())
}

/// Builds `kernel` into a fresh module for `spec`, verified and optimized.
fn build_module<'ctx>(
    cx: &'ctx Context,
    kernel: &Kernel,
    symbol: &str,
    machine: &TargetMachine,
    opt: OptLevel,
) -> CodegenResult<Module<'ctx>> {
    let module = cx.create_module(symbol);
    module.set_triple(&machine.get_triple());
    module.set_data_layout(&machine.get_target_data().get_data_layout());
    codegen::define_kernel(cx, &module, kernel, symbol, false)?;
    target::prefer_wide_vectors(cx, &module);
    module
        .verify()
        .map_err(|e| CodegenError::Invalid(format!("LLVM verifier: {e}")))?;
    optimize(&module, machine, opt)?;
    Ok(module)
}

/// `kernel` compiled for `options.target` (a short name of [`TARGETS`] or
/// any triple LLVM knows) and exported as `symbol`: an object, assembly,
/// LLVM IR, bitcode, or a linked wasm32 module exporting `symbol`, `memory`
/// and `__heap_base` (where a host may start placing buffers). Math
/// functions are calls to their C names (`sin`, `sinf`, …; a wasm module
/// imports them from module `env`). Links wasm with `wasm-ld`
/// (`$KILN_WASM_LD`, else `wasm-ld-19`, else `wasm-ld`).
pub fn emit(kernel: &Kernel, symbol: &str, options: &EmitOptions) -> CodegenResult<Vec<u8>> {
    let _in_flight = InFlight::enter()?;
    let spec = resolve_target(
        &options.target,
        options.cpu.as_deref(),
        options.features.as_deref(),
    )?;
    if options.emit == Emit::Header {
        return Err(CodegenError::Unsupported(
            "a header is written from the kernel, by no backend".into(),
        ));
    }
    if options.emit == Emit::Wasm && !spec.triple.starts_with("wasm32") {
        return Err(CodegenError::Unsupported(format!(
            "a linked .wasm module needs a wasm32 target, not `{}` (use --emit obj for it)",
            spec.triple
        )));
    }
    let machine = spec.machine(options.opt_level)?;
    let cx = Context::create();
    let module = build_module(&cx, kernel, symbol, &machine, options.opt_level)?;
    let file = |ty| {
        machine
            .write_to_memory_buffer(&module, ty)
            .map(|b| b.as_slice().to_vec())
            .map_err(|e| CodegenError::Llvm(e.to_string()))
    };
    match options.emit {
        Emit::Object => file(FileType::Object),
        Emit::Assembly => file(FileType::Assembly),
        Emit::LlvmIr => Ok(module.print_to_string().to_bytes().to_vec()),
        Emit::Bitcode => Ok(module.write_bitcode_to_memory().as_slice().to_vec()),
        Emit::Wasm => link_wasm(&file(FileType::Object)?, symbol),
        Emit::Header => unreachable!("refused above"),
    }
}

fn link_wasm(object: &[u8], symbol: &str) -> CodegenResult<Vec<u8>> {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let unique = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("kiln-wasm-{}-{unique}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .map_err(|e| CodegenError::Link(format!("{}: {e}", dir.display())))?;
    let result = (|| {
        let (obj, out) = (dir.join("kernel.o"), dir.join("kernel.wasm"));
        std::fs::write(&obj, object).map_err(|e| CodegenError::Link(e.to_string()))?;
        let candidates: Vec<String> = std::env::var("KILN_WASM_LD")
            .ok()
            .into_iter()
            .chain(["wasm-ld-19".to_string(), "wasm-ld".to_string()])
            .collect();
        let mut last_error = String::new();
        for linker in &candidates {
            let output = std::process::Command::new(linker)
                .args(["--no-entry", "--allow-undefined", "--export=__heap_base"])
                .arg(format!("--export={symbol}"))
                .arg(&obj)
                .arg("-o")
                .arg(&out)
                .output();
            match output {
                Ok(o) if o.status.success() => {
                    return std::fs::read(&out).map_err(|e| CodegenError::Link(e.to_string()))
                }
                Ok(o) => {
                    return Err(CodegenError::Link(format!(
                        "{linker} failed: {}",
                        String::from_utf8_lossy(&o.stderr).trim()
                    )))
                }
                Err(e) => last_error = format!("{linker}: {e}"),
            }
        }
        Err(CodegenError::Link(format!(
            "no wasm linker found (install lld-19 or set KILN_WASM_LD): {last_error}"
        )))
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}
