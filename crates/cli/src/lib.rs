//! What the `kiln` and `aot` binaries share: reading sources ([`source`]), the
//! `--tier` choice ([`Tier`]) and how failures map to exit statuses
//! ([`Failure`]). Not a public API: the binaries are the interface.

pub mod source;

use clap::ValueEnum;
use std::process::ExitCode;

/// Why a command failed; the variant decides the exit status.
#[derive(Debug)]
pub enum Failure {
    /// Bad input or usage: exit 2.
    Input(String),
    /// A run-time error of the graph: exit 1.
    Run(String),
}

impl Failure {
    /// Prints the message (if any) and gives the exit status.
    pub fn report(result: Result<(), Failure>) -> ExitCode {
        match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(Failure::Input(msg)) => {
                eprintln!("{msg}");
                ExitCode::from(2)
            }
            Err(Failure::Run(msg)) => {
                eprintln!("{msg}");
                ExitCode::from(1)
            }
        }
    }
}

/// `--tier` values. Every tier is always a value, so asking for one this build
/// lacks is a clear error (exit 2), not an unknown option.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Tier {
    /// The reference interpreter (the oracle).
    Interp,
    /// The vector VM: compiles fastest, runs blocks of rows without machine
    /// code.
    Vm,
    /// The Cranelift JIT.
    Cranelift,
    /// The LLVM tier (O3; needs a build with `--features llvm`).
    Llvm,
}

pub use kiln::aot::NO_LLVM;

impl From<kiln::JitTier> for Tier {
    fn from(tier: kiln::JitTier) -> Tier {
        match tier {
            kiln::JitTier::Vm => Tier::Vm,
            kiln::JitTier::Cranelift => Tier::Cranelift,
            // `kiln` has the LLVM tier whenever any crate of the build
            // asks for it, this crate's `llvm` feature or not.
            #[allow(unreachable_patterns)]
            _ => Tier::Llvm,
        }
    }
}

impl Tier {
    /// The engine for this tier, or an error naming the feature it needs.
    pub fn engine(self) -> Result<Box<dyn kiln::DynEngine>, Failure> {
        Ok(match self {
            Tier::Interp => Box::new(kiln::Interpreter),
            Tier::Vm => Box::new(kiln::Vm),
            Tier::Cranelift => Box::new(kiln::Cranelift),
            #[cfg(feature = "llvm")]
            Tier::Llvm => Box::new(kiln::Llvm),
            #[cfg(not(feature = "llvm"))]
            Tier::Llvm => return Err(Failure::Input(format!("error: --tier llvm: {NO_LLVM}"))),
        })
    }

    /// The same tier for kiln-arrow (`kiln query`, `kiln sql`), or an error
    /// naming the feature it needs.
    pub fn arrow(self) -> Result<kiln_arrow::Tier, Failure> {
        Ok(match self {
            Tier::Interp => kiln_arrow::Tier::Interpreter,
            Tier::Vm => kiln_arrow::Tier::Vm,
            Tier::Cranelift => kiln_arrow::Tier::Cranelift,
            #[cfg(feature = "llvm")]
            Tier::Llvm => kiln_arrow::Tier::Llvm,
            #[cfg(not(feature = "llvm"))]
            Tier::Llvm => return Err(Failure::Input(format!("error: --tier llvm: {NO_LLVM}"))),
        })
    }
}
