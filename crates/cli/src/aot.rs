//! `aot`: compile a graph ahead of time to an object, assembly, LLVM IR,
//! bitcode, a linked wasm32 module, or the C header of its ABI.
//!
//! The default tier is LLVM when this build has it, else Cranelift (objects and
//! headers for x86_64, aarch64 and riscv64). A request the chosen tier cannot
//! serve is an error naming the tier or feature it needs. Exit status: 0 ok,
//! 2 bad input or usage.

use clap::{Parser, ValueEnum};
use kiln::ir::kernel::{header, Kernel};
use kiln::PyOptions;
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
    /// What to write.
    #[arg(long, value_enum)]
    emit: EmitArg,
    /// Optimization level (LLVM's `default<O0>` … `default<O3>`).
    #[arg(short = 'O', default_value_t = 3, value_parser = clap::value_parser!(u8).range(0..=3))]
    opt: u8,
    /// The tier that compiles (default: llvm if this build has it, else cranelift).
    #[arg(long, value_enum)]
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

/// `--emit` values.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum EmitArg {
    /// A relocatable object file.
    Obj,
    /// Assembly text.
    Asm,
    /// Textual LLVM IR, after optimization.
    LlvmIr,
    /// LLVM bitcode, after optimization.
    Bc,
    /// A linked wasm32 module (wasm32 targets only).
    Wasm,
    /// The C header of the kernel's ABI.
    Header,
}

impl EmitArg {
    fn is_text(self) -> bool {
        matches!(self, EmitArg::Asm | EmitArg::LlvmIr | EmitArg::Header)
    }
}

fn main() -> ExitCode {
    Failure::report(run(&Cli::parse()))
}

fn bad(msg: impl std::fmt::Display) -> Failure {
    Failure::Input(format!("error: {msg}"))
}

fn run(cli: &Cli) -> Result<(), Failure> {
    let tier = cli.tier.unwrap_or(if cfg!(feature = "llvm") {
        Tier::Llvm
    } else {
        Tier::Cranelift
    });
    if tier == Tier::Interp {
        return Err(bad(
            "--tier interp cannot compile ahead of time; use llvm or cranelift",
        ));
    }
    if !cli.emit.is_text() && cli.output.is_none() && std::io::stdout().is_terminal() {
        return Err(bad(format!(
            "--emit {} writes binary data: give -o FILE (or redirect stdout)",
            emit_name(cli.emit)
        )));
    }
    let src = cli.source.load(&PyOptions::default())?;
    let fail = |e: &dyn std::fmt::Display| Failure::Input(format!("{}: error: {e}", src.name));
    let graph = if cli.no_opt {
        src.verified.clone()
    } else {
        kiln::optimize(&src.verified).map_err(|e| fail(&e))?
    };
    let options = match tier {
        Tier::Cranelift => kiln::cranelift::LOWER_OPTIONS,
        _ => kiln::ir::kernel::LowerOptions::default(),
    };
    let kernel = kiln::ir::kernel::lower(&graph, &options).map_err(|e| fail(&e))?;
    let symbol = cli.name.clone().unwrap_or_else(|| kernel.name.clone());
    if !is_c_identifier(&symbol) {
        return Err(bad(format!(
            "symbol `{symbol}` is not a C identifier; choose one with --name"
        )));
    }
    let bytes = match (cli.emit, tier) {
        (EmitArg::Header, _) => header::header(&kernel, &symbol).into_bytes(),
        (_, Tier::Llvm) => emit_llvm(cli, &kernel, &symbol)?,
        (EmitArg::Obj, _) => {
            if cli.cpu.is_some() || cli.features.is_some() {
                return Err(bad("--cpu and --features need the LLVM tier"));
            }
            let target = if cli.target == "native" {
                std::env::consts::ARCH
            } else {
                cli.target.as_str()
            };
            kiln::cranelift::object(&kernel, target, &symbol).map_err(|e| {
                bad(format!(
                    "{e}; other targets need the LLVM tier ({})",
                    if cfg!(feature = "llvm") {
                        "--tier llvm"
                    } else {
                        "rebuild with `--features llvm`"
                    }
                ))
            })?
        }
        (emit, _) => {
            return Err(bad(format!(
                "--emit {} needs the LLVM tier (the Cranelift tier writes obj and header){}",
                emit_name(emit),
                if cfg!(feature = "llvm") {
                    ": use --tier llvm"
                } else {
                    ": rebuild with `--features llvm`"
                }
            )))
        }
    };
    write_output(cli.output.as_ref(), &bytes)
}

fn emit_name(emit: EmitArg) -> String {
    emit.to_possible_value()
        .map(|v| v.get_name().to_string())
        .unwrap_or_default()
}

#[cfg(feature = "llvm")]
fn emit_llvm(cli: &Cli, kernel: &Kernel, symbol: &str) -> Result<Vec<u8>, Failure> {
    use kiln::llvm::{Emit, OptLevel, Options};
    let options = Options {
        opt: OptLevel::from_number(cli.opt).expect("clap checked 0..=3"),
        cpu: cli.cpu.clone(),
        features: cli.features.clone(),
    };
    let what = match cli.emit {
        EmitArg::Obj => Emit::Object,
        EmitArg::Asm => Emit::Assembly,
        EmitArg::LlvmIr => Emit::LlvmIr,
        EmitArg::Bc => Emit::Bitcode,
        EmitArg::Wasm => {
            return kiln::llvm::wasm(kernel, &cli.target, symbol, &options).map_err(bad)
        }
        EmitArg::Header => unreachable!("headers are written without a tier"),
    };
    kiln::llvm::emit(kernel, &cli.target, symbol, &options, what).map_err(bad)
}

#[cfg(not(feature = "llvm"))]
fn emit_llvm(_: &Cli, _: &Kernel, _: &str) -> Result<Vec<u8>, Failure> {
    Err(bad(format!("--tier llvm: {}", kiln_cli::NO_LLVM)))
}

fn is_c_identifier(s: &str) -> bool {
    s.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
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
