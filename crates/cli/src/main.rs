//! `kiln`: run, evaluate, print and check graphs from the command line.
//!
//! Exit status: 0 ok, 1 run-time error (such as integer division by zero),
//! 2 bad input or usage. Messages go to stderr as `file:line:col: error: …`.

mod csvio;
mod population;
mod query;
mod sql;

use clap::{Parser, Subcommand, ValueEnum};
use kiln::Backend;
use kiln::{Data, Graph, PyOptions};
use kiln_cli::source::{self, SourceArgs};
use kiln_cli::{Failure, Tier};
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "kiln",
    version,
    about = "kiln compiles computation graphs to native code",
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// `kiln ir --emit` values.
#[derive(Copy, Clone, Debug, ValueEnum)]
enum Emit {
    /// The graph in the .kiln text format.
    Kiln,
    /// The loop-level kernel every backend translates.
    Kernel,
    /// Cranelift IR, with source names as comments.
    Clif,
    /// LLVM IR after the O3 pipeline for the host, values named after the source.
    LlvmIr,
    /// The host assembly the LLVM tier produces at O3.
    Asm,
}

#[derive(clap::Args)]
struct RunOptions {
    /// The engine that runs the graph [default: auto (LLVM's code at once
    /// where the code cache holds it, else Cranelift, with LLVM compiled in
    /// the background once the calls paid for it); with --population, vm,
    /// which measured fastest there].
    #[arg(long, value_parser = kiln_cli::tier_parser())]
    tier: Option<Tier>,
    /// An input value, such as `--arg x=2.5` or `--arg xs=[1, 2, 3]` for a column.
    #[arg(long = "arg", value_name = "NAME=VALUE")]
    args: Vec<String>,
    /// Run the graph as written, without the optimization passes.
    #[arg(long)]
    no_opt: bool,
    /// Threads the kernels may use (default: KILN_NUM_THREADS, else every
    /// core); with --population, threads to compile and evaluate on, one
    /// expression per thread at a time.
    #[arg(long, value_name = "N", value_parser = kiln_cli::threads_parser())]
    threads: Option<usize>,
}

#[derive(Subcommand)]
enum Command {
    /// Run a graph on the inputs given with --arg or --inputs; print each output as `NAME = VALUE`
    /// (or as JSON with --json).
    Run {
        #[command(flatten)]
        source: SourceArgs,
        #[command(flatten)]
        run: RunOptions,
        /// Input data: a JSON object {name: {"dtype", "shape", "data"}} (the fixtures' form),
        /// a NumPy `.npz` (one array per input) or `.npy` (for a graph of one input).
        #[arg(long, value_name = "FILE")]
        inputs: Option<PathBuf>,
        /// Print the outputs as a JSON list [{"name", "dtype", "shape", "data"}].
        #[arg(long)]
        json: bool,
        /// Input columns from a CSV file with a header row, by name (as `eval` reads
        /// them); the outputs are written as CSV.
        #[arg(long, value_name = "DATA.csv", conflicts_with_all = ["inputs", "json"])]
        csv: Option<PathBuf>,
    },
    /// Evaluate a graph over the columns of a CSV file (inputs by column name); write the outputs as CSV.
    /// With --population, evaluate every expression of a file (one a line) instead.
    Eval {
        #[command(flatten)]
        source: SourceArgs,
        /// A GP population: one Python-subset expression a line, compiled together and
        /// evaluated over the CSV; prints one line per expression.
        #[arg(long, value_name = "POP.txt", conflicts_with_all = ["file", "expr", "output"])]
        population: Option<PathBuf>,
        /// With --population: print each expression's mean squared error against this column.
        #[arg(long, value_name = "COLUMN", requires = "population")]
        target_column: Option<String>,
        /// With --population and --target-column: fit each expression's constants (its float
        /// literals) to the target by least squares (Levenberg-Marquardt); print each
        /// expression's mean squared error, steps and fitted text, tab-separated.
        #[arg(long, requires = "target_column")]
        fit: bool,
        /// With --fit: the most Levenberg-Marquardt steps per expression.
        #[arg(long, value_name = "N", default_value_t = 100, requires = "fit")]
        max_iter: usize,
        /// With --population: print compile time, evaluation time and node-evaluations/s to stderr.
        #[arg(long, requires = "population")]
        stats: bool,
        /// With --population: the columns' and values' type, f64 or f32 (Operon's precision;
        /// shorter math routines); the CSV's numbers are read as f64 and rounded. --fit computes in
        /// f64 whatever this is [default: f64].
        #[arg(long, value_name = "f64|f32", requires = "population")]
        dtype: Option<kiln::Precision>,
        #[command(flatten)]
        run: RunOptions,
        /// The input CSV file, with a header row.
        #[arg(long, value_name = "DATA.csv")]
        csv: PathBuf,
        /// Where to write the output CSV (default: stdout).
        #[arg(short, long = "out", value_name = "OUT.csv")]
        output: Option<PathBuf>,
    },
    /// Print the graph (--emit kiln), its kernel (kernel), its Cranelift IR (clif),
    /// or what the LLVM tier makes of it for this machine (llvm-ir, asm).
    Ir {
        #[command(flatten)]
        source: SourceArgs,
        /// Optimize first (kernel and clif always start from the optimized graph).
        #[arg(long)]
        opt: bool,
        /// What to print.
        #[arg(long, value_enum, default_value = "kiln")]
        emit: Emit,
    },
    /// Filter a CSV, Arrow IPC or Parquet file with a compiled query, batch by batch;
    /// print the matching rows as CSV (or their number with --count).
    Query(query::QueryArgs),
    /// Run SQL over Parquet, CSV and Arrow IPC files through DataFusion, with kiln compiling
    /// the filters and projections it can (--explain shows which; --no-kiln compares).
    Sql(sql::SqlArgs),
    /// Parse and verify a graph; report every problem.
    Check {
        #[command(flatten)]
        source: SourceArgs,
    },
}

/// kiln's allocator: the front half allocates per node, and mimalloc
/// compiles a GP population in about two thirds of glibc malloc's time
/// (docs/performance.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Run { run, .. } | Command::Eval { run, .. } = &cli.command {
        if let Some(n) = run.threads {
            kiln::threads::set_num_threads(n);
        }
    }
    let result = match cli.command {
        Command::Run {
            source,
            run,
            csv: Some(csv),
            ..
        } => cmd_eval(&source, &run, &csv, None),
        Command::Run {
            source,
            run,
            inputs,
            json,
            csv: None,
        } => cmd_run(&source, &run, inputs.as_deref(), json),
        Command::Eval {
            population: Some(_),
            source,
            ..
        } if !source.grad.is_empty() || !source.jacobian.is_empty() => Err(Failure::Input(
            "error: --grad and --jacobian differentiate one graph; with --population, --fit fits each expression's constants".to_string(),
        )),
        Command::Eval {
            population: Some(population),
            run,
            csv,
            target_column,
            stats,
            fit,
            max_iter,
            dtype,
            ..
        } => population::run(&population::PopulationArgs {
            population: &population,
            csv: &csv,
            target: target_column.as_deref(),
            fit: fit.then_some(max_iter),
            stats,
            precision: dtype.unwrap_or_default(),
            // The population's rule (`kiln::DEFAULT_TIER`) unless named.
            tier: kiln::population::tier_for(run.tier.unwrap_or(kiln::DEFAULT_TIER)),
            threads: run
                .threads
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from)),
        }),
        Command::Eval {
            source,
            run,
            csv,
            output,
            ..
        } => cmd_eval(&source, &run, &csv, output.as_deref()),
        Command::Ir { source, opt, emit } => cmd_ir(&source, opt, emit),
        Command::Check { source } => cmd_check(&source),
        Command::Query(args) => query::run(&args),
        Command::Sql(args) => sql::run(&args),
    };
    // An `auto` program's tier-up may still be compiling on the background
    // thread: it finishes before the exit handlers destroy LLVM.
    kiln::before_exit();
    Failure::report(result)
}

/// Splits `--arg NAME=VALUE` values.
fn parse_args(args: &[String]) -> Result<Vec<(String, String)>, Failure> {
    args.iter()
        .map(|a| match a.split_once('=') {
            Some((name, value)) => Ok((name.trim().to_string(), value.to_string())),
            None => Err(Failure::Input(format!(
                "error: --arg `{a}` is not NAME=VALUE"
            ))),
        })
        .collect()
}

/// Each input's data: from `--arg` if named there, else from `column` (or an error).
fn bind(
    graph: &Graph,
    args: &[(String, String)],
    mut column: impl FnMut(&str, kiln::DType) -> Result<Data, Failure>,
) -> Result<Vec<Data>, Failure> {
    if let Some((name, _)) = args
        .iter()
        .find(|(name, _)| !graph.inputs().iter().any(|i| &i.name == name))
    {
        let names: Vec<&str> = graph.inputs().iter().map(|i| i.name.as_str()).collect();
        return Err(Failure::Input(format!(
            "error: the graph has no input `{name}` (its inputs are: {})",
            names.join(", ")
        )));
    }
    graph
        .inputs()
        .iter()
        .map(|input| {
            let ty = graph.ty(input.value);
            match args.iter().rfind(|(name, _)| name == &input.name) {
                Some((_, text)) => Data::parse(text, ty).map_err(|e| {
                    // A shape error names the type already.
                    let of = match e {
                        kiln::ir::DataParseError::Shape { .. } => String::new(),
                        _ => format!(" (the input is {ty})"),
                    };
                    Failure::Input(format!("error: --arg {}: {e}{of}", input.name))
                }),
                None => column(&input.name, ty.dtype().expect("inputs are tensors")),
            }
        })
        .collect()
}

fn execute(
    source: &source::Source,
    run: &RunOptions,
    inputs: &[Data],
) -> Result<Vec<Data>, Failure> {
    let program = kiln_cli::engine(run.tier.unwrap_or(Tier::Auto))?
        .compile_dyn(
            &source.verified,
            &kiln::CompileOptions {
                optimize: !run.no_opt,
                ..kiln::CompileOptions::default()
            },
        )
        .map_err(|e| Failure::Input(format!("{}: error: {e}", source.name)))?;
    program.run(inputs).map_err(|e| match e {
        kiln::ExecError::DivisionByZero { .. }
        | kiln::ExecError::IndexOutOfRange { .. }
        | kiln::ExecError::Unsupported(_) => Failure::Run(format!("{}: error: {e}", source.name)),
        other => Failure::Input(format!("{}: error: {other}", source.name)),
    })
}

/// Reads `--inputs` data: JSON, `.npz` or `.npy` (named after the file stem).
fn read_inputs(path: &std::path::Path) -> Result<Vec<(String, kiln::tensors::Tensor)>, Failure> {
    let fail = |e: String| Failure::Input(format!("{}: error: {e}", path.display()));
    let bytes = std::fs::read(path).map_err(|e| fail(format!("cannot read: {e}")))?;
    match path.extension().and_then(|e| e.to_str()) {
        Some("npz") => kiln::tensors::read_npz(&bytes).map_err(fail),
        Some("npy") => {
            let stem = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("x")
                .to_string();
            Ok(vec![(stem, kiln::tensors::read_npy(&bytes).map_err(fail)?)])
        }
        _ => kiln::tensors::read_json_inputs(&String::from_utf8_lossy(&bytes)).map_err(fail),
    }
}

fn cmd_run(
    source: &SourceArgs,
    run: &RunOptions,
    inputs_file: Option<&std::path::Path>,
    json: bool,
) -> Result<(), Failure> {
    let mut tensors = match inputs_file {
        Some(path) => read_inputs(path)?,
        None => Vec::new(),
    };
    // Inputs given with data are typed with the data's exact shape (a vector
    // of 4 meets a [4, 3] weight), unless --input says otherwise.
    let types = tensors
        .iter()
        .map(|(n, t)| (n.clone(), t.exact_type()))
        .collect();
    let args = parse_args(&run.args)?;
    let shapes: HashMap<String, kiln::ir::Shape> = args
        .iter()
        .filter_map(|(name, text)| {
            let shape = Data::list_shape(text)?;
            Some((
                name.clone(),
                shape.into_iter().map(kiln::Dim::Fixed).collect(),
            ))
        })
        .collect();
    let py = PyOptions {
        shapes: shapes.clone(),
        ..PyOptions::default()
    };
    let src = source.load_shaped(&py, &types, &HashMap::new(), &shapes)?;
    // A lone `.npy` feeds a graph of one input, whatever its name.
    if let (Some(p), [(_, t)]) = (inputs_file, tensors.as_slice()) {
        if p.extension().is_some_and(|e| e == "npy") && src.graph().inputs().len() == 1 {
            tensors = vec![(src.graph().inputs()[0].name.clone(), t.clone())];
        }
    }
    let inputs = bind(src.graph(), &args, |name, dtype| {
        match tensors.iter().find(|(n, _)| n == name) {
            Some((_, t)) => {
                let input = src.graph().inputs().iter().find(|i| i.name == name);
                let ty = input
                    .map(|i| src.graph().ty(i.value))
                    .expect("binding a graph input");
                t.check_shape(ty)
                    .and_then(|()| t.to_data())
                    .map_err(|e| Failure::Input(format!("error: input `{name}`: {e}")))
            }
            None => Err(Failure::Input(format!(
                "error: missing --arg {name}=VALUE (type {dtype}){}",
                if inputs_file.is_some() {
                    " or an input of that name in --inputs"
                } else {
                    ""
                }
            ))),
        }
    })?;
    let outputs = execute(&src, run, &inputs)?;
    let shapes = kiln::tensors::output_shapes(&src.verified, &inputs, &outputs);
    let mut stdout = std::io::stdout().lock();
    if json {
        let named: Vec<(&str, &Data, &[u64])> = src
            .graph()
            .outputs()
            .iter()
            .zip(&outputs)
            .zip(&shapes)
            .map(|((o, d), s)| (o.name.as_str(), d, s.as_slice()))
            .collect();
        let _ = writeln!(stdout, "{}", kiln::tensors::outputs_json(&named));
        return Ok(());
    }
    for ((output, data), shape) in src.graph().outputs().iter().zip(&outputs).zip(&shapes) {
        // A closed stdout (`| head`) is not an error worth reporting.
        let _ = writeln!(stdout, "{} = {}", output.name, data.display_shaped(shape));
    }
    Ok(())
}

fn cmd_eval(
    source: &SourceArgs,
    run: &RunOptions,
    csv_path: &std::path::Path,
    output: Option<&std::path::Path>,
) -> Result<(), Failure> {
    let args = parse_args(&run.args)?;
    // Python-subset inputs are columns, except those given as scalars with --arg.
    let py = PyOptions {
        default_shape: vec![kiln::ir::Dim::Sym("n".into())],
        shapes: args
            .iter()
            .map(|(name, _)| (name.clone(), Vec::new()))
            .collect(),
        ..Default::default()
    };
    let table = csvio::read(csv_path)?;
    // torch.fx placeholders named after CSV columns default to f64 columns.
    let column_types = table
        .headers()
        .iter()
        .map(|h| {
            let ty = kiln::Type::Tensor(kiln::TensorType {
                dtype: kiln::DType::F64,
                shape: vec![kiln::Dim::Sym("n".into())],
            });
            (h.clone(), ty)
        })
        .collect();
    let src = source.load_for_columns(&py, &column_types)?;
    let inputs = bind(src.graph(), &args, |name, dtype| {
        table.column(csv_path, name, dtype)
    })?;
    let outputs = execute(&src, run, &inputs)?;
    match output {
        None => csvio::write(&mut std::io::stdout().lock(), src.graph(), &outputs),
        Some(path) => {
            let mut file = std::fs::File::create(path).map_err(|e| {
                Failure::Input(format!("{}: error: cannot write: {e}", path.display()))
            })?;
            csvio::write(&mut file, src.graph(), &outputs)
        }
    }
}

fn cmd_ir(source: &SourceArgs, opt: bool, emit: Emit) -> Result<(), Failure> {
    let src = source.load(&PyOptions::default())?;
    let fail = |e: &dyn std::fmt::Display| Failure::Input(format!("{}: error: {e}", src.name));
    let graph = if opt || !matches!(emit, Emit::Kiln) {
        kiln::optimize(&src.verified).map_err(|e| fail(&e))?
    } else {
        src.verified.clone()
    };
    // The kernel as the Cranelift tier (the default) gets it.
    let cranelift =
        || kiln::kernel::lower(&graph, &kiln::Cranelift.lower_options()).map_err(|e| fail(&e));
    let text = match emit {
        Emit::Kiln => kiln::ir::text::print(graph.graph()),
        Emit::Kernel => kiln::kernel::print(&cranelift()?),
        Emit::Clif => kiln::cranelift::clif(&cranelift()?).map_err(|e| fail(&e))?,
        Emit::LlvmIr | Emit::Asm => {
            llvm_dump(&graph, matches!(emit, Emit::Asm)).map_err(|e| fail(&e))?
        }
    };
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
    Ok(())
}

/// What the LLVM tier makes of `graph` for this machine: its optimized
/// LLVM IR or assembly, as `aot` would write it.
fn llvm_dump(graph: &kiln::Verified, asm: bool) -> Result<String, String> {
    let llvm = Tier::Llvm.backend().map_err(|e| e.to_string())?;
    let kernel =
        kiln::kernel::lower(graph, &llvm.emit_lower_options()).map_err(|e| e.to_string())?;
    let request = kiln::EmitOptions {
        emit: if asm {
            kiln::Emit::Assembly
        } else {
            kiln::Emit::LlvmIr
        },
        target: "native".into(),
        opt_level: kiln::OptLevel::O3,
        cpu: None,
        features: None,
    };
    // An unnamed graph (a `.kiln` file without a name) as `kernel`: LLVM
    // drops a function without a name, and the dump was empty.
    let symbol = if kernel.name.is_empty() {
        "kernel"
    } else {
        &kernel.name
    };
    let bytes = llvm
        .emit(&kernel, symbol, &request)
        .map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

fn cmd_check(source: &SourceArgs) -> Result<(), Failure> {
    let src = source.load(&PyOptions::default())?;
    let describe = |values: Vec<(&str, String)>| {
        values
            .into_iter()
            .map(|(n, t)| format!("{n}: {t}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let inputs = describe(
        src.graph()
            .inputs()
            .iter()
            .map(|i| (i.name.as_str(), src.graph().ty(i.value).to_string()))
            .collect(),
    );
    let outputs = describe(
        src.graph()
            .outputs()
            .iter()
            .map(|o| (o.name.as_str(), src.graph().ty(o.value).to_string()))
            .collect(),
    );
    println!(
        "{}: ok: {} nodes; inputs ({inputs}); outputs ({outputs})",
        src.name,
        src.graph().len()
    );
    Ok(())
}
