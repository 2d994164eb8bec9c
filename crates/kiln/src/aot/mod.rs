//! Ahead-of-time compilation: a verified graph to an object file, assembly,
//! LLVM IR, bitcode, a linked wasm32 module, or the C header of its ABI
//! (`docs/abi.md`). The `aot` command and the Python package's `kiln.aot` are
//! thin layers over [`compile`].

use crate::{CompileError, OptLevel, Tier, TierError, Verified};
pub use kiln_kernel::backend::Emit;
use kiln_kernel::backend::{BackendError, EmitOptions};
use kiln_kernel::{header, lower};

mod wasm;

/// The tier `aot` uses unless told: LLVM when this build has it (every
/// output, any target), else Cranelift (objects for three targets).
pub fn default_tier() -> Tier {
    if Tier::Llvm.is_built() {
        Tier::Llvm
    } else {
        Tier::Cranelift
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
    /// The compiling tier: one whose backend writes `emit`
    /// ([`Tier::emits`]); [`default_tier`] unless told.
    pub tier: Tier,
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
    /// Options from the names the bindings take them by (`emit` as
    /// [`Emit::from_name`] reads it; `tier` `llvm` or `cranelift`, else
    /// [`default_tier`]; `opt_level` 0 to 3): the error names what is wrong.
    pub fn named(
        target: &str,
        emit: &str,
        tier: Option<&str>,
        opt_level: u32,
    ) -> Result<AotOptions, String> {
        let emit = Emit::from_name(emit).ok_or_else(|| {
            let names: Vec<&str> = Emit::NAMES.iter().map(|(n, _)| *n).collect();
            format!("emit must be one of {}, not {emit:?}", names.join(", "))
        })?;
        let tier = match tier {
            None => default_tier(),
            Some("llvm") => Tier::Llvm,
            Some("cranelift") => Tier::Cranelift,
            Some(t) => {
                return Err(format!(
                    "tier must be 'llvm' or 'cranelift' ahead of time, not {t:?}"
                ))
            }
        };
        let opt_level = u8::try_from(opt_level)
            .ok()
            .and_then(OptLevel::from_number)
            .ok_or_else(|| format!("opt_level must be 0 to 3, not {opt_level}"))?;
        Ok(AotOptions {
            tier,
            opt_level,
            ..AotOptions::new(target, emit)
        })
    }

    /// Options for `emit` on `target`, everything else the default.
    pub fn new(target: &str, emit: Emit) -> AotOptions {
        AotOptions {
            target: target.to_string(),
            emit,
            tier: default_tier(),
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

pub use crate::tier::NO_LLVM;

/// Compiles `graph` ahead of time as `options` say: the bytes of the object,
/// module or text.
pub fn compile(graph: &Verified, options: &AotOptions) -> Result<Vec<u8>, AotError> {
    let nothing = || {
        AotError::Request(format!(
            "the {} tier writes nothing ahead of time: choose cranelift or llvm",
            options.tier
        ))
    };
    let backend = options.tier.backend().map_err(|e| match e {
        TierError::Interpreter => nothing(),
        e => AotError::Request(e.to_string()),
    })?;
    if backend.emits().is_empty() {
        return Err(nothing());
    }
    if !backend.emits().contains(&options.emit) {
        let writes: Vec<&str> = backend.emits().iter().map(|e| e.name()).collect();
        return Err(AotError::Request(format!(
            "`{}` needs the LLVM tier (the {} tier writes {}){}",
            options.emit.name(),
            options.tier,
            writes.join(" and "),
            if Tier::Llvm.is_built() {
                String::new()
            } else {
                format!("; {NO_LLVM}")
            }
        )));
    }
    let graph = if options.optimize {
        crate::optimize(graph).map_err(CompileError::from)?
    } else {
        graph.clone()
    };
    let request = EmitOptions {
        emit: options.emit,
        target: options.target.clone(),
        opt_level: options.opt_level,
        cpu: options.cpu.clone(),
        features: options.features.clone(),
    };
    let kernel = lower(&graph, &backend.emit_lower_options_for(&request))
        .map_err(|e| CompileError::Unsupported(e.to_string()))?;
    let symbol = options
        .symbol
        .clone()
        .unwrap_or_else(|| kernel.name.clone());
    if !is_c_identifier(&symbol) {
        return Err(AotError::Request(format!(
            "symbol `{symbol}` is not a C identifier; choose another name"
        )));
    }
    if options.emit == Emit::Header {
        return Ok(header::header(&kernel, &symbol).into_bytes());
    }
    let bytes = backend
        .emit(&kernel, &symbol, &request)
        .map_err(|e| match e {
            BackendError::Unsupported(m) => {
                AotError::Request(format!("{m}{}", llvm_hint(options.tier)))
            }
            BackendError::Failed(m) => AotError::Request(m),
            e @ BackendError::NotCached => AotError::Request(e.to_string()),
        })?;
    // A wasm module describes its own call, for hosts with only a
    // WebAssembly engine (`wasm.rs`).
    Ok(if options.emit == Emit::Wasm {
        wasm::describe(bytes, graph.graph(), &kernel, &symbol)
    } else {
        bytes
    })
}

/// What to add to a request another tier than `tier` would serve: the LLVM
/// tier serves every output and target.
fn llvm_hint(tier: Tier) -> String {
    match tier {
        Tier::Llvm => String::new(),
        _ if Tier::Llvm.is_built() => "; other targets and options need the LLVM tier".into(),
        _ => format!("; other targets and options need the LLVM tier ({NO_LLVM})"),
    }
}

/// Whether `s` can name a C function.
pub fn is_c_identifier(s: &str) -> bool {
    s.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}
