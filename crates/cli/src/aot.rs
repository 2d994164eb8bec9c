//! `aot`: compile a graph ahead of time to an object, assembly, LLVM IR,
//! bitcode, a linked wasm32 module, or the C header of its ABI.
//!
//! The default tier is LLVM when this build has it, else Cranelift (objects and
//! headers for x86_64, aarch64 and riscv64). A request the chosen tier cannot
//! serve is an error naming the tier or feature it needs. Exit status: 0 ok,
//! 2 bad input or usage.

use clap::Parser;
use kiln::aot::{AotError, AotOptions, Emit};
use kiln::{OptLevel, PyOptions};
use kiln_cli::source::SourceArgs;
use kiln_cli::{Failure, Tier};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "aot",
    version,
    about = "Compile a graph ahead of time: objects, assembly, LLVM IR, bitcode, wasm modules, C headers",
    after_help = "Targets: x86_64, aarch64, riscv64, wasm32, native, or any triple LLVM knows \
                  (LLVM tier). Text outputs go to stdout without -o."
)]
struct Cli {
    #[command(flatten)]
    source: SourceArgs,
    /// The target: x86_64, aarch64, riscv64, wasm32, native, or an LLVM triple.
    #[arg(long, default_value = "native")]
    target: String,
    /// What to write: obj, asm, llvm-ir, bc, wasm (a linked wasm32 module)
    /// or header (the C header of the kernel's ABI).
    #[arg(long, value_parser = parse_emit)]
    emit: Emit,
    /// Optimization level (LLVM's `default<O0>` … `default<O3>`).
    #[arg(short = 'O', default_value_t = 3, value_parser = clap::value_parser!(u8).range(0..=3))]
    opt: u8,
    /// The tier that compiles (default: llvm if this build has it, else cranelift).
    #[arg(long, value_parser = kiln_cli::tier_parser())]
    tier: Option<Tier>,
    /// The CPU to tune and select instructions for (LLVM tier; default: the
    /// host's for the native target, else generic).
    #[arg(long)]
    cpu: Option<String>,
    /// Target features, such as `+avx2,-fma` (LLVM tier).
    #[arg(long)]
    features: Option<String>,
    /// The exported symbol (default: the graph's name).
    #[arg(long)]
    name: Option<String>,
    /// Where to write (default: stdout, for text outputs).
    #[arg(short = 'o', long = "out", value_name = "OUT")]
    output: Option<PathBuf>,
    /// Compile the graph as written, without kiln's graph passes.
    #[arg(long)]
    no_opt: bool,
}

fn parse_emit(name: &str) -> Result<Emit, String> {
    Emit::from_name(name).ok_or_else(|| {
        let names: Vec<&str> = Emit::NAMES.iter().map(|(n, _)| *n).collect();
        format!("one of {}", names.join(", "))
    })
}

fn main() -> ExitCode {
    Failure::report(run(&Cli::parse()))
}

fn bad(msg: impl std::fmt::Display) -> Failure {
    Failure::Input(format!("error: {msg}"))
}

fn run(cli: &Cli) -> Result<(), Failure> {
    let tier = cli.tier.unwrap_or_else(kiln::aot::default_tier);
    if !cli.emit.is_text() && cli.output.is_none() && std::io::stdout().is_terminal() {
        return Err(bad(format!(
            "--emit {} writes binary data: give -o FILE (or redirect stdout)",
            cli.emit.name()
        )));
    }
    let src = cli.source.load(&PyOptions::default())?;
    let options = AotOptions {
        target: cli.target.clone(),
        emit: cli.emit,
        tier,
        opt_level: OptLevel::from_number(cli.opt).expect("clap checked 0..=3"),
        cpu: cli.cpu.clone(),
        features: cli.features.clone(),
        symbol: cli.name.clone(),
        optimize: !cli.no_opt,
    };
    let bytes = kiln::aot::compile(&src.verified, &options).map_err(|e| match e {
        AotError::Compile(e) => Failure::Input(format!("{}: error: {e}", src.name)),
        AotError::Request(m) => bad(m),
    })?;
    write_output(cli.output.as_ref(), &bytes)
}

fn write_output(path: Option<&PathBuf>, bytes: &[u8]) -> Result<(), Failure> {
    match path {
        Some(path) => std::fs::write(path, bytes)
            .map_err(|e| bad(format!("cannot write {}: {e}", path.display()))),
        None => {
            // A closed stdout (`| head`) is not an error worth reporting.
            let _ = std::io::stdout().lock().write_all(bytes);
            Ok(())
        }
    }
}
