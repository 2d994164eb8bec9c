//! Ahead-of-time compilation: a verified graph to an object file, assembly,
//! LLVM IR, bitcode, a linked wasm32 module, or the C header of its ABI
//! (`docs/abi.md`). The `aot` command and the Python package's `kiln.aot` are
//! thin layers over [`compile`].

use crate::{CompileError, OptLevel, Verified};
use kiln_ir::kernel::{header, lower, LowerOptions};

/// What [`compile`] writes.
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
    /// The C header of the kernel's ABI.
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

/// The tier that compiles ahead of time.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum AotTier {
    /// Cranelift: objects for x86_64, aarch64 and riscv64, and headers.
    Cranelift,
    /// LLVM (the `llvm` feature): every output, any LLVM target.
    Llvm,
}

impl Default for AotTier {
    /// LLVM when this build has it, else Cranelift.
    fn default() -> Self {
        if cfg!(feature = "llvm") {
            AotTier::Llvm
        } else {
            AotTier::Cranelift
        }
    }
}

/// How to compile ahead of time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AotOptions {
    /// `x86_64`, `aarch64`, `riscv64`, `wasm32`, `native`, or (LLVM tier) any
    /// triple LLVM knows.
    pub target: String,
    /// What to write.
    pub emit: Emit,
    /// The compiling tier.
    pub tier: AotTier,
    /// LLVM's optimization level (`default<O0>` … `default<O3>`).
    pub opt_level: OptLevel,
    /// The CPU to tune and select instructions for (LLVM tier; default: the
    /// host's for the native target, else generic).
    pub cpu: Option<String>,
    /// Target features such as `+avx2,-fma` (LLVM tier).
    pub features: Option<String>,
    /// The exported symbol (default: the graph's name).
    pub symbol: Option<String>,
    /// Run kiln's graph passes first. Default on.
    pub optimize: bool,
}

impl AotOptions {
    /// Options for `emit` on `target`, everything else the default.
    pub fn new(target: &str, emit: Emit) -> AotOptions {
        AotOptions {
            target: target.to_string(),
            emit,
            tier: AotTier::default(),
            opt_level: OptLevel::O3,
            cpu: None,
            features: None,
            symbol: None,
            optimize: true,
        }
    }
}

/// Why ahead-of-time compilation failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum AotError {
    /// The graph could not be optimized or lowered.
    #[error(transparent)]
    Compile(#[from] CompileError),
    /// The request is not one this build or tier can serve (an unknown
    /// target, an output the tier does not write, a symbol that is not a C
    /// identifier); the message says what would.
    #[error("{0}")]
    Request(String),
}

/// The message for a request that needs the LLVM tier in a build without it.
pub const NO_LLVM: &str = "this build has no LLVM tier: rebuild with `--features llvm` \
     (needs LLVM 19: apt-get install llvm-19-dev libpolly-19-dev lld-19)";

/// Compiles `graph` ahead of time as `options` say: the bytes of the object,
/// module or text.
pub fn compile(graph: &Verified, options: &AotOptions) -> Result<Vec<u8>, AotError> {
    let request = |m: String| Err(AotError::Request(m));
    let graph = if options.optimize {
        crate::optimize(graph).map_err(CompileError::from)?
    } else {
        graph.clone()
    };
    let lower_options = match options.tier {
        AotTier::Cranelift => kiln_cranelift::OBJECT_LOWER_OPTIONS,
        AotTier::Llvm => LowerOptions::default(),
    };
    let kernel =
        lower(&graph, &lower_options).map_err(|e| CompileError::Unsupported(e.to_string()))?;
    let symbol = options
        .symbol
        .clone()
        .unwrap_or_else(|| kernel.name.clone());
    if !is_c_identifier(&symbol) {
        return request(format!(
            "symbol `{symbol}` is not a C identifier; choose another name"
        ));
    }
    match (options.emit, options.tier) {
        (Emit::Header, _) => Ok(header::header(&kernel, &symbol).into_bytes()),
        (_, AotTier::Llvm) => llvm(&kernel, &symbol, options),
        (Emit::Object, AotTier::Cranelift) => {
            if options.cpu.is_some() || options.features.is_some() {
                return request("a CPU or target features need the LLVM tier".into());
            }
            let target = match options.target.as_str() {
                "native" => std::env::consts::ARCH,
                t => t,
            };
            kiln_cranelift::object(&kernel, target, &symbol).map_err(|e| {
                AotError::Request(format!(
                    "{e}; other targets need the LLVM tier{}",
                    if cfg!(feature = "llvm") {
                        String::new()
                    } else {
                        format!(" ({NO_LLVM})")
                    }
                ))
            })
        }
        (emit, AotTier::Cranelift) => request(format!(
            "`{}` needs the LLVM tier (the Cranelift tier writes obj and header){}",
            emit.name(),
            if cfg!(feature = "llvm") {
                String::new()
            } else {
                format!("; {NO_LLVM}")
            }
        )),
    }
}

#[cfg(feature = "llvm")]
fn llvm(
    kernel: &kiln_ir::kernel::Kernel,
    symbol: &str,
    options: &AotOptions,
) -> Result<Vec<u8>, AotError> {
    use kiln_llvm::Emit as L;
    let llvm_options = kiln_llvm::Options {
        opt: options.opt_level,
        cpu: options.cpu.clone(),
        features: options.features.clone(),
    };
    let what = match options.emit {
        Emit::Object => L::Object,
        Emit::Assembly => L::Assembly,
        Emit::LlvmIr => L::LlvmIr,
        Emit::Bitcode => L::Bitcode,
        Emit::Wasm => {
            return kiln_llvm::wasm(kernel, &options.target, symbol, &llvm_options)
                .map_err(|e| AotError::Request(e.to_string()))
        }
        Emit::Header => unreachable!("headers are written without a tier"),
    };
    kiln_llvm::emit(kernel, &options.target, symbol, &llvm_options, what)
        .map_err(|e| AotError::Request(e.to_string()))
}

#[cfg(not(feature = "llvm"))]
fn llvm(_: &kiln_ir::kernel::Kernel, _: &str, _: &AotOptions) -> Result<Vec<u8>, AotError> {
    Err(AotError::Request(NO_LLVM.to_string()))
}

/// Whether `s` can name a C function.
pub fn is_c_identifier(s: &str) -> bool {
    s.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}
