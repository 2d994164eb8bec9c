//! kiln's Cranelift tier: translates a [`Kernel`] to CLIF and compiles it to
//! machine code, in-process ([`jit`]) or as a relocatable object ([`object`]).
//!
//! It makes no semantic decisions: lowering (in `kiln-ir`) decided what runs in
//! which loop and where division can fail; `codegen` translates each kernel
//! statement into the CLIF that computes exactly `kiln_ir::semantics`.
//! Transcendentals call C names that the JIT binds to the pure-Rust `libm`
//! crate (`kiln_ir::kernel::libcalls`), so JIT results match the interpreter bit for bit.

mod codegen;

pub use codegen::{clif_type, needs_wrapper, signature, Slot, MAX_NATIVE_ARGS};

use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::ModuleError;
use kiln_ir::kernel::Kernel;
use std::sync::{Arc, OnceLock};

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

fn flags(pic: bool) -> CodegenResult<settings::Flags> {
    let mut builder = settings::builder();
    let set = |b: &mut settings::Builder, k: &str, v: &str| {
        b.set(k, v)
            .map_err(|e| CodegenError::Cranelift(format!("setting {k}: {e}")))
    };
    set(&mut builder, "opt_level", "speed")?;
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

/// The host ISA, built once per process (building it costs more than compiling
/// a small kernel).
fn host_isa() -> CodegenResult<OwnedTargetIsa> {
    static ISA: OnceLock<Result<OwnedTargetIsa, CodegenError>> = OnceLock::new();
    ISA.get_or_init(|| {
        let builder = cranelift_native::builder()
            .map_err(|e| CodegenError::Unsupported(format!("host ISA: {e}")))?;
        builder
            .finish(flags(false)?)
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

/// A kernel compiled in memory. Cheap to clone; the machine code lives until
/// the last clone of the last kernel of its module is dropped.
#[derive(Clone)]
pub struct CompiledKernel {
    kernel: Arc<Kernel>,
    /// Held, never read: keeps the machine code alive while this handle is.
    #[allow(dead_code)]
    code: Arc<JitCode>,
    /// The uniform `i32 (u64*)` wrapper, for kernels that need one.
    wrapper: Option<usize>,
    /// The kernel itself.
    native: usize,
}

impl std::fmt::Debug for CompiledKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledKernel")
            .field("name", &self.kernel.name)
            .field("direct", &self.kernel.direct)
            .finish()
    }
}

impl CompiledKernel {
    /// The kernel this code was compiled from.
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    /// Calls the kernel: `slots[i]` holds parameter `i` of [`Kernel::params`] in
    /// 8 bytes: a pointer, or an extent; for a direct kernel, a scalar input's
    /// bits (zero- or sign-extended), and for its first output a pointer to where
    /// the result is written. Returns the status (0 = ok).
    ///
    /// # Safety
    /// `slots` must have one entry per parameter, every pointer valid for the
    /// kernel's reads or writes of as many elements as its extent says.
    pub unsafe fn call(&self, slots: &mut [u64]) -> i32 {
        debug_assert_eq!(slots.len(), self.kernel.params.len());
        match self.wrapper {
            Some(wrapper) => {
                // SAFETY: `wrapper` is this kernel's finalized `i32 (u64*)`
                // wrapper, alive while `self.code` is.
                let f = unsafe {
                    std::mem::transmute::<usize, extern "C" fn(*mut u64) -> i32>(wrapper)
                };
                f(slots.as_mut_ptr())
            }
            // SAFETY: without a wrapper, every parameter is a pointer or an
            // i64, which every supported C ABI passes like a u64, and there are
            // at most MAX_NATIVE_ARGS of them.
            None => unsafe { call_native(self.native, slots) },
        }
    }

    /// The address of the kernel itself, with its native signature (see
    /// `docs/abi.md`). Valid while this handle (or a clone) is alive.
    pub fn native_ptr(&self) -> *const u8 {
        self.native as *const u8
    }
}

/// Compiles kernels into one JIT module with one finalize (a whole GP
/// population compiles as one unit).
pub fn jit(kernels: Vec<Kernel>) -> CodegenResult<Vec<CompiledKernel>> {
    let mut builder = JITBuilder::with_isa(host_isa()?, cranelift_module::default_libcall_names());
    for (name, ptr) in kiln_ir::kernel::libcalls::jit_symbols() {
        builder.symbol(name, ptr);
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
        )?);
    }
    module.finalize_definitions()?;
    let addresses: Vec<(Option<usize>, usize)> = ids
        .iter()
        .map(|&(id, wrapper)| {
            (
                wrapper.map(|w| module.get_finalized_function(w) as usize),
                module.get_finalized_function(id) as usize,
            )
        })
        .collect();
    let code = Arc::new(JitCode {
        module: Some(module),
    });
    Ok(kernels
        .into_iter()
        .zip(addresses)
        .map(|(kernel, (wrapper, native))| CompiledKernel {
            kernel: Arc::new(kernel),
            code: Arc::clone(&code),
            wrapper,
            native,
        })
        .collect())
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
        .finish(flags(true)?)
        .map_err(|e| CodegenError::Cranelift(e.to_string()))?;
    let builder = cranelift_object::ObjectBuilder::new(
        isa,
        symbol.as_bytes().to_vec(),
        cranelift_module::default_libcall_names(),
    )?;
    let mut module = cranelift_object::ObjectModule::new(builder);
    codegen::define_kernel(&mut module, kernel, symbol, false)?;
    let product = module.finish();
    product
        .emit()
        .map_err(|e| CodegenError::Cranelift(e.to_string()))
}

/// The CLIF of `kernel` as Cranelift prints it, after comment lines naming the
/// graph value (source name) each CLIF value holds.
pub fn clif(kernel: &Kernel) -> CodegenResult<String> {
    let mut module = JITModule::new(JITBuilder::with_isa(
        host_isa()?,
        cranelift_module::default_libcall_names(),
    ));
    codegen::clif_text(&mut module, kernel)
}

/// Calls `f(slots[0], …, slots[k-1]) -> i32` for `k = slots.len()`.
///
/// # Safety
/// `f` must be a function taking exactly `slots.len()` (at most
/// [`MAX_NATIVE_ARGS`]) pointer-sized integer arguments and returning `i32`.
unsafe fn call_native(f: usize, slots: &[u64]) -> i32 {
    macro_rules! arity {
        ($($idx:literal),*) => {{
            type F = extern "C" fn($(arity!(@u64 $idx)),*) -> i32;
            // SAFETY: the caller guarantees the signature.
            let f = unsafe { std::mem::transmute::<usize, F>(f) };
            f($(slots[$idx]),*)
        }};
        (@u64 $idx:literal) => { u64 };
    }
    match slots.len() {
        0 => arity!(),
        1 => arity!(0),
        2 => arity!(0, 1),
        3 => arity!(0, 1, 2),
        4 => arity!(0, 1, 2, 3),
        5 => arity!(0, 1, 2, 3, 4),
        6 => arity!(0, 1, 2, 3, 4, 5),
        7 => arity!(0, 1, 2, 3, 4, 5, 6),
        8 => arity!(0, 1, 2, 3, 4, 5, 6, 7),
        9 => arity!(0, 1, 2, 3, 4, 5, 6, 7, 8),
        10 => arity!(0, 1, 2, 3, 4, 5, 6, 7, 8, 9),
        11 => arity!(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10),
        12 => arity!(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11),
        13 => arity!(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12),
        14 => arity!(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13),
        15 => arity!(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14),
        16 => arity!(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        n => unreachable!("kernels with {n} > MAX_NATIVE_ARGS parameters get a wrapper"),
    }
}
