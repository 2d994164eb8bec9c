//! The tiers by name: the one type the facade, kiln-arrow, kiln-datafusion,
//! the CLI and the Python package name a tier with. Each of those keeps only
//! what is its own (which tiers it accepts, its default); the names, the
//! parsing and the way to a tier's engine are here.

use crate::tierup::{TierUp, TieredProgram};
use crate::{CompileError, CompileOptions, CompileResult, DynEngine, Emit, Engine, Interpreter};
use kiln_ir::Verified;
use kiln_kernel::backend::Backend;
use std::fmt;
use std::str::FromStr;

/// A kiln tier: the reference interpreter or one of the compiling tiers.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tier {
    /// The reference interpreter: the oracle every other tier is checked
    /// against; compiles nothing.
    Interp,
    /// The vector VM (`kiln_vm`): compiles a kernel into instructions over
    /// blocks of rows, which loops rustc compiled ahead of time run; no
    /// machine code. The cheapest compile: the GP populations' default
    /// (`crate::DEFAULT_TIER`).
    Vm,
    /// The Cranelift JIT: compiles in microseconds; objects for x86-64,
    /// AArch64 and RISC-V 64.
    Cranelift,
    /// The LLVM tier (O3 by default; the `llvm` feature): JIT in process,
    /// and every ahead-of-time output for any LLVM target.
    Llvm,
    /// The tier that decides ([`crate::tierup`]): LLVM's code at once where
    /// the code cache holds it, else Cranelift, with LLVM compiled on a
    /// background thread once the calls have paid for it. Not a backend of
    /// its own, so not in [`Self::ALL`]; its programs are
    /// [`TieredProgram`]s.
    Auto,
}

/// The message for a request that needs the LLVM tier in a build without it.
pub const NO_LLVM: &str = "this build has no LLVM tier: rebuild with `--features llvm` \
     (needs LLVM 19: apt-get install llvm-19-dev libpolly-19-dev lld-19)";

/// Why a tier could not be named or used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TierError {
    /// A name that is no tier's.
    #[error("unknown tier `{0}` ({names})", names = Tier::names())]
    Unknown(String),
    /// A tier this build was compiled without.
    #[error("{}", not_built(*.0))]
    NotBuilt(Tier),
    /// The interpreter asked for what only a compiling tier has (a backend).
    #[error("the interpreter compiles nothing: choose vm, cranelift or llvm")]
    Interpreter,
    /// `auto` asked for one backend (ahead-of-time output).
    #[error("auto is no single backend: choose vm, cranelift or llvm")]
    Auto,
}

fn not_built(tier: Tier) -> String {
    match tier {
        Tier::Llvm => NO_LLVM.to_string(),
        t => format!("this build has no {t} tier"),
    }
}

impl From<TierError> for CompileError {
    fn from(e: TierError) -> CompileError {
        CompileError::Unsupported(e.to_string())
    }
}

impl Tier {
    /// Every tier kiln has, whether or not this build has it: the oracle
    /// first, then the compiling tiers from the cheapest compile.
    pub const ALL: [Tier; 4] = [Tier::Interp, Tier::Vm, Tier::Cranelift, Tier::Llvm];

    /// Every name `--tier` and `tier=` take: [`Self::ALL`] and `auto`.
    pub const NAMED: [Tier; 5] = [
        Tier::Interp,
        Tier::Vm,
        Tier::Cranelift,
        Tier::Llvm,
        Tier::Auto,
    ];

    /// The tier's name, as `--tier`, `tier=` and `kiln.tiers()` write it.
    pub fn name(self) -> &'static str {
        match self {
            Tier::Interp => "interp",
            Tier::Vm => "vm",
            Tier::Cranelift => "cranelift",
            Tier::Llvm => "llvm",
            Tier::Auto => "auto",
        }
    }

    /// Every tier's name, in [`Self::NAMED`]'s order: `interp, vm,
    /// cranelift, llvm, auto`, for messages that list them.
    pub fn names() -> String {
        Self::NAMED.map(Tier::name).join(", ")
    }

    /// Whether this build has the tier: every one but LLVM always, LLVM
    /// with the `llvm` feature.
    pub fn is_built(self) -> bool {
        self != Tier::Llvm || cfg!(feature = "llvm")
    }

    /// This build's tiers, in [`Self::ALL`]'s order.
    pub fn all() -> impl Iterator<Item = Tier> {
        Self::ALL.into_iter().filter(|t| t.is_built())
    }

    /// This build's compiling tiers: [`Self::all`] but the interpreter.
    pub fn compiling() -> impl Iterator<Item = Tier> {
        Self::all().filter(|&t| t != Tier::Interp)
    }

    /// The compiling tier's backend: what compiles kernels into
    /// [`crate::JitProgram`]s (through [`crate::Engine`]) and writes
    /// artifacts.
    pub fn backend(self) -> Result<&'static dyn Backend, TierError> {
        Ok(match self {
            Tier::Interp => return Err(TierError::Interpreter),
            Tier::Auto => return Err(TierError::Auto),
            Tier::Vm => &kiln_vm::Vm,
            Tier::Cranelift => &kiln_cranelift::Cranelift,
            #[cfg(feature = "llvm")]
            Tier::Llvm => &kiln_llvm::Llvm,
            #[cfg(not(feature = "llvm"))]
            Tier::Llvm => return Err(TierError::NotBuilt(self)),
        })
    }

    /// The tier as an engine: the interpreter, [`Auto`], or the backend's.
    pub fn engine(self) -> Result<Box<dyn DynEngine>, TierError> {
        Ok(match self {
            Tier::Interp => Box::new(Interpreter),
            Tier::Auto => Box::new(Auto),
            t => Box::new(t.backend()?),
        })
    }

    /// What the tier writes ahead of time (`crate::aot`); empty for a tier
    /// without ahead-of-time output or one this build lacks.
    pub fn emits(self) -> &'static [Emit] {
        self.backend().map_or(&[], |b| b.emits())
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Tier {
    type Err = TierError;

    /// The tier called `name`, whether or not this build has it (so asking
    /// for a missing one is [`TierError::NotBuilt`] where it is used).
    fn from_str(name: &str) -> Result<Tier, TierError> {
        Self::NAMED
            .into_iter()
            .find(|t| t.name() == name)
            .ok_or_else(|| TierError::Unknown(name.to_string()))
    }
}

/// The `auto` tier as an engine: each graph a [`TieredProgram`], tiering up
/// as `KILN_TIER_UP_AFTER` says ([`TierUp::from_env`]).
#[derive(Copy, Clone, Debug, Default)]
pub struct Auto;

impl Engine for Auto {
    type Program = TieredProgram;

    fn name(&self) -> &'static str {
        "auto"
    }

    fn compile_batch(
        &self,
        graphs: &[Verified],
        options: &CompileOptions,
    ) -> CompileResult<Vec<TieredProgram>> {
        let rule = TierUp::from_env();
        graphs
            .iter()
            .map(|g| TieredProgram::compile(g, options, rule))
            .collect()
    }
}
