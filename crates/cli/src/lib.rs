//! What the `kiln` and `aot` binaries share: reading sources ([`source`]), the
//! `--tier` choice ([`tier_parser`], [`engine`]) and how failures map to exit statuses
//! ([`Failure`]). Not a public API: the binaries are the interface.

pub mod source;

use clap::builder::TypedValueParser;
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

pub use kiln::aot::NO_LLVM;
pub use kiln::Tier;

/// `--tier`'s parser: every tier kiln names is a value (listed in `--help`),
/// so asking for one this build lacks is a clear error (exit 2) where it is
/// used, not an unknown option.
pub fn tier_parser() -> impl TypedValueParser<Value = Tier> {
    clap::builder::PossibleValuesParser::new(Tier::NAMED.map(Tier::name))
        .map(|name| name.parse::<Tier>().expect("a possible value names a tier"))
}

/// `tier`, if this build has it; else an error naming the feature it needs.
pub fn built(tier: Tier) -> Result<Tier, Failure> {
    if tier.is_built() {
        Ok(tier)
    } else {
        Err(Failure::Input(format!(
            "error: --tier {tier}: {}",
            kiln::TierError::NotBuilt(tier)
        )))
    }
}

/// The engine for `tier`, or an error naming the feature it needs.
pub fn engine(tier: Tier) -> Result<Box<dyn kiln::DynEngine>, Failure> {
    built(tier)?
        .engine()
        .map_err(|e| Failure::Input(format!("error: --tier {tier}: {e}")))
}

/// The parser of `--threads N`: a positive integer.
pub fn threads_parser() -> impl TypedValueParser<Value = usize> {
    clap::value_parser!(u64)
        .range(1..=4096)
        .map(|n| usize::try_from(n).unwrap_or(4096))
}
