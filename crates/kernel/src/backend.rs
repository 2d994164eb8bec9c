//! The one interface every compiling tier implements ([`Backend`]): the
//! vector VM (`kiln-vm`), Cranelift (`kiln-cranelift`) and LLVM
//! (`kiln-llvm`). The facade, and everything it builds on top (threads,
//! tier-up, a code cache), holds a tier as a `&dyn Backend` and never needs
//! to know which one it is.
//!
//! A backend translates kernels; it never decides what they compute
//! (lowering did, `crate::lower`). What it does choose is how the kernels it
//! is given are shaped ([`Backend::lower_options`]): those choices change the
//! speed, never the bits.

use crate::abi::CompiledKernel;
use crate::{Kernel, LowerOptions, OptLevel};
use std::collections::HashMap;

/// What a backend is asked for beyond its kernels, for in-process code.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct BackendOptions {
    /// How hard the backend works.
    pub opt_level: OptLevel,
    /// Whether row loops may run in vectors where the backend decides that
    /// itself (the Cranelift tier's vectorizer; the others ignore it).
    pub vectorize: bool,
    /// Whether [`compile`] cuts kernels into stages that may run in chunks
    /// on several threads (`crate::stages`); off, each kernel is one
    /// function run on the calling thread.
    pub parallel: bool,
    /// How a backend that keeps a persistent code cache (LLVM's:
    /// `kiln_llvm::cache`, where the environment puts it) uses it; the
    /// others keep none and ignore it.
    pub cache: CacheUse,
}

/// How a backend uses its persistent code cache.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum CacheUse {
    /// Neither reads nor writes it.
    Off,
    /// Links what it holds, compiles and stores what it lacks.
    #[default]
    ReadWrite,
    /// Links what it holds and compiles nothing: [`BackendError::NotCached`]
    /// where it would have to (the `auto` tier's probe). A backend with no
    /// cache compiles as usual.
    ReadOnly,
}

impl Default for BackendOptions {
    fn default() -> Self {
        BackendOptions {
            opt_level: OptLevel::default(),
            vectorize: true,
            parallel: true,
            cache: CacheUse::ReadWrite,
        }
    }
}

/// The C names of math functions bound to the addresses kernels call
/// (`crate::libcalls`), as a backend's caller gives them.
pub type Symbols<'a> = &'a [(&'static str, *const u8)];

/// Why a backend did not produce code.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The request is one this backend does not serve (a target, an output,
    /// an option); the message says what would.
    #[error("{0}")]
    Unsupported(String),
    /// The backend failed on a valid kernel: a bug in the tier.
    #[error("{0}")]
    Failed(String),
    /// [`CacheUse::ReadOnly`] and the cache holds no code for the kernels.
    #[error("the code cache holds no code for these kernels")]
    NotCached,
}

/// Result of a backend's work.
pub type BackendResult<T> = Result<T, BackendError>;

/// What an ahead-of-time compile writes.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Emit {
    /// A relocatable object file.
    Object,
    /// Assembly text.
    Assembly,
    /// Textual LLVM IR, after optimization.
    LlvmIr,
    /// LLVM bitcode, after optimization.
    Bitcode,
    /// A linked wasm32 module (wasm32 targets only).
    Wasm,
    /// The C header of the kernel's ABI (`crate::header`): written by
    /// lowering, the same for every backend that writes objects.
    Header,
}

impl Emit {
    /// Every output, by the names the `aot` command and `kiln.aot` take.
    pub const NAMES: &'static [(&'static str, Emit)] = &[
        ("obj", Emit::Object),
        ("asm", Emit::Assembly),
        ("llvm-ir", Emit::LlvmIr),
        ("bc", Emit::Bitcode),
        ("wasm", Emit::Wasm),
        ("header", Emit::Header),
    ];

    /// The output called `name` (`obj`, `asm`, `llvm-ir`, `bc`, `wasm`,
    /// `header`).
    pub fn from_name(name: &str) -> Option<Emit> {
        Self::NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, e)| *e)
    }

    /// The output's name (`obj`, …).
    pub fn name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(_, e)| *e == self)
            .map(|(n, _)| *n)
            .expect("every output has a name")
    }

    /// Whether the output is text (assembly, LLVM IR, a header).
    pub fn is_text(self) -> bool {
        matches!(self, Emit::Assembly | Emit::LlvmIr | Emit::Header)
    }
}

/// An ahead-of-time request: what to write, for which machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmitOptions {
    /// What to write (never [`Emit::Header`]: the caller writes headers).
    pub emit: Emit,
    /// `x86_64`, `aarch64`, `riscv64`, `wasm32`, `native`, or (where the
    /// backend knows it) any target triple.
    pub target: String,
    /// How hard the backend works.
    pub opt_level: OptLevel,
    /// The CPU to tune and select instructions for (default: the host's for
    /// the native target, else the target's generic CPU).
    pub cpu: Option<String>,
    /// Target features such as `+avx2,-fma` (default: the CPU's).
    pub features: Option<String>,
}

/// A compiling tier. Implementations are stateless unit types: one value
/// per tier, shared by every thread.
pub trait Backend: Send + Sync {
    /// The tier's name (`vm`, `cranelift`, `llvm`), as `--tier` takes it.
    fn name(&self) -> &'static str;

    /// How kernels this backend compiles in process are lowered.
    fn lower_options(&self) -> LowerOptions;

    /// How kernels this backend writes ahead of time are lowered: never with
    /// [`LowerOptions::libm_calls`], whose calls would reach the platform's
    /// libm.
    fn emit_lower_options(&self) -> LowerOptions {
        LowerOptions {
            libm_calls: false,
            ..self.lower_options()
        }
    }

    /// [`Self::emit_lower_options`] for one request's target, CPU and
    /// features: a backend whose lowering depends on the target's registers
    /// (the LLVM tier's matmul panel width) overrides it.
    fn emit_lower_options_for(&self, request: &EmitOptions) -> LowerOptions {
        let _ = request;
        self.emit_lower_options()
    }

    /// Compiles `kernels` together (one module, one finalize where the
    /// backend has modules), binding the math names they call to `symbols`:
    /// one [`CompiledKernel`] per kernel, in order.
    fn compile_kernels(
        &self,
        kernels: Vec<Kernel>,
        options: &BackendOptions,
        symbols: Symbols<'_>,
    ) -> BackendResult<Vec<CompiledKernel>>;

    /// What [`Self::emit`] writes (with [`Emit::Header`] where it writes
    /// objects, whose ABI a header describes); empty for a tier without
    /// ahead-of-time output.
    fn emits(&self) -> &'static [Emit] {
        &[]
    }

    /// Writes `kernel`, exported as `symbol`, as `options` say.
    fn emit(&self, kernel: &Kernel, symbol: &str, options: &EmitOptions) -> BackendResult<Vec<u8>> {
        let _ = (kernel, symbol);
        Err(BackendError::Unsupported(format!(
            "the {} tier writes no `{}`",
            self.name(),
            options.emit.name()
        )))
    }
}

/// Compiles `kernels` with `backend` as in-process code: each kernel that
/// has loops worth cutting ([`crate::stages::split`]) as its stages, run in
/// chunks on kiln's threads ([`crate::threads`]) when
/// [`BackendOptions::parallel`] asks; every other kernel as one function.
/// All of them go to the backend as one unit, each stage reduced to the
/// parameters it uses, and stages with the same code (a network's repeated
/// blocks) once: each such stage calls the one compiled kernel with its
/// own buffers ([`crate::canon`]).
pub fn compile<B: Backend + ?Sized>(
    backend: &B,
    kernels: Vec<Kernel>,
    options: &BackendOptions,
    symbols: Symbols<'_>,
) -> BackendResult<Vec<CompiledKernel>> {
    if !options.parallel {
        return backend.compile_kernels(kernels, options, symbols);
    }
    /// A stage: the unit's kernel `code` called with `map` picked from its
    /// kernel's `arity` slots, and its chunking.
    struct StagePlan {
        code: usize,
        map: Vec<u32>,
        arity: usize,
        chunk: Option<crate::stages::Chunking>,
    }
    /// A kernel: the unit's kernel `i`, or the kernel and its stages.
    enum Plan {
        Whole(usize),
        Staged(Kernel, Vec<StagePlan>),
    }
    let mut plans = Vec::with_capacity(kernels.len());
    let mut unit: Vec<Kernel> = Vec::with_capacity(kernels.len());
    let mut by_code: HashMap<String, usize> = HashMap::new();
    for kernel in kernels {
        let Some(stages) = crate::stages::split(&kernel) else {
            plans.push(Plan::Whole(unit.len()));
            unit.push(kernel);
            continue;
        };
        let arity = kernel.params.len() + 2;
        let stages = stages
            .kernels
            .into_iter()
            .zip(stages.maps)
            .zip(stages.chunks)
            .map(|((stage, map), chunk)| {
                let mut text = String::new();
                crate::canon::write_code(&stage, &mut text).expect("a String takes any text");
                let code = *by_code.entry(text).or_insert_with(|| {
                    unit.push(stage);
                    unit.len() - 1
                });
                StagePlan {
                    code,
                    map,
                    arity,
                    chunk,
                }
            })
            .collect();
        plans.push(Plan::Staged(kernel, stages));
    }
    let code = backend.compile_kernels(unit, options, symbols)?;
    Ok(plans
        .into_iter()
        .map(|plan| match plan {
            Plan::Whole(i) => code[i].clone(),
            Plan::Staged(kernel, stages) => {
                let stages = stages
                    .into_iter()
                    .map(|s| crate::threads::Stage {
                        code: CompiledKernel::remapped(code[s.code].clone(), s.map, s.arity),
                        chunk: s.chunk,
                    })
                    .collect();
                CompiledKernel::staged(std::sync::Arc::new(kernel), stages)
            }
        })
        .collect())
}

/// A reference to a backend is the backend (`&'static dyn Backend` is how
/// the facade holds a tier chosen at run time).
impl<B: Backend + ?Sized> Backend for &B {
    fn name(&self) -> &'static str {
        (**self).name()
    }

    fn lower_options(&self) -> LowerOptions {
        (**self).lower_options()
    }

    fn emit_lower_options(&self) -> LowerOptions {
        (**self).emit_lower_options()
    }

    fn emit_lower_options_for(&self, request: &EmitOptions) -> LowerOptions {
        (**self).emit_lower_options_for(request)
    }

    fn compile_kernels(
        &self,
        kernels: Vec<Kernel>,
        options: &BackendOptions,
        symbols: Symbols<'_>,
    ) -> BackendResult<Vec<CompiledKernel>> {
        (**self).compile_kernels(kernels, options, symbols)
    }

    fn emits(&self) -> &'static [Emit] {
        (**self).emits()
    }

    fn emit(&self, kernel: &Kernel, symbol: &str, options: &EmitOptions) -> BackendResult<Vec<u8>> {
        (**self).emit(kernel, symbol, options)
    }
}
