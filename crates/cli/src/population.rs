//! `kiln eval --population POP.txt --csv DATA.csv`: a GP population, one
//! Python-subset expression a line, compiled and evaluated over the CSV's
//! columns by `kiln::Population` (one JIT module per thread).

use crate::csvio::Table;
use kiln::ir::diag::render_located;
use kiln::population::Element;
use kiln::{Data, MemberError, Population, PopulationOptions, Precision};
use kiln_cli::{Failure, Tier};
use std::io::Write;
use std::path::Path;
use std::time::Instant;

/// What `--population` needs from the command line.
pub struct PopulationArgs<'a> {
    pub population: &'a Path,
    pub csv: &'a Path,
    pub target: Option<&'a str>,
    /// Fit each expression's constants to the target, in at most this many steps.
    pub fit: Option<usize>,
    pub stats: bool,
    pub tier: Tier,
    pub threads: usize,
    /// The columns' and values' type (`--dtype`); a fit computes in `f64`
    /// whatever it is.
    pub precision: Precision,
}

/// Runs the population mode.
pub fn run(args: &PopulationArgs<'_>) -> Result<(), Failure> {
    let text = std::fs::read_to_string(args.population).map_err(|e| {
        Failure::Input(format!(
            "{}: error: cannot read: {e}",
            args.population.display()
        ))
    })?;
    let table = crate::csvio::read(args.csv)?;
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .collect();
    let exprs: Vec<&str> = lines.iter().map(|&(_, l)| l).collect();
    let target = match args.target {
        Some(name) => Some(column_f64(&table, args.csv, name)?),
        None => None,
    };
    let n_rows = table.n_rows();
    let source = Source {
        name: args.population.display().to_string(),
        text: &text,
        lines: &lines,
    };
    if let (Some(y), Some(max_iter)) = (target.as_deref(), args.fit) {
        return fit(args, &source, &exprs, &table, y, max_iter);
    }
    let start = Instant::now();
    let options = PopulationOptions {
        threads: args.threads,
        compile: compile_options(args.tier, n_rows),
        precision: args.precision,
    };
    // The variables are the expressions' free names (each parsed once).
    let population =
        Population::compile_inferring(&exprs, &*kiln_cli::engine(args.tier)?, &options);
    let compile_time = start.elapsed();
    // An expression that does not parse or compile is bad input: report each
    // at its line of POP.txt.
    let bad = source.located(population.compile_errors());
    if !bad.is_empty() {
        return Err(Failure::Input(bad.join("\n")));
    }
    let node_evals: u128 = population
        .nodes()
        .iter()
        .map(|&n| (n * n_rows) as u128)
        .sum();
    let t0 = Instant::now();
    let (values, errors) = match args.precision {
        Precision::F64 => measure::<f64>(&population, &table, args.csv, target.as_deref())?,
        Precision::F32 => measure::<f32>(&population, &table, args.csv, target.as_deref())?,
    };
    let eval_time = t0.elapsed();
    let failed = print(&values, &errors, &lines);
    if args.stats {
        let n = population.len().max(1);
        let secs = eval_time.as_secs_f64();
        eprintln!(
            "population: {} expressions x {n_rows} rows, {}, tier {:?}, {} thread(s)\ncompile: {:.3} ms total, {:.1} us per expression (parse, verify, optimize, lower, codegen)\neval: {:.3} ms, {} node-evaluations, {:.0} M node-evaluations/s\ntotal: {:.3} ms",
            population.len(),
            args.precision.name(),
            args.tier,
            args.threads,
            compile_time.as_secs_f64() * 1e3,
            compile_time.as_secs_f64() * 1e6 / n as f64,
            secs * 1e3,
            node_evals,
            node_evals as f64 / secs.max(1e-12) / 1e6,
            (compile_time + eval_time).as_secs_f64() * 1e3
        );
    }
    finish(failed)
}

/// Rows from which vector loops are used on a population: the measured
/// break-even (15,000–20,000 rows, docs/performance.md) with a margin.
const VECTOR_ROWS: usize = 32_768;

/// How a population's expressions compile on `tier` over `n_rows` rows.
fn compile_options(tier: Tier, n_rows: usize) -> kiln::CompileOptions {
    kiln::CompileOptions {
        // The interpreter runs each graph as written; the compiling tiers
        // optimize first.
        optimize: tier != Tier::Interp,
        vectorize: Some(n_rows >= VECTOR_ROWS),
        ..kiln::CompileOptions::default()
    }
}

/// POP.txt: its name, its text and its expressions' lines (index, text).
struct Source<'a> {
    name: String,
    text: &'a str,
    lines: &'a [(usize, &'a str)],
}

impl Source<'_> {
    /// Each error at its expression's line of POP.txt (and column, for one
    /// that does not parse), as the compiler reports a located error.
    fn located<'e>(
        &self,
        errors: impl IntoIterator<Item = (usize, &'e MemberError)>,
    ) -> Vec<String> {
        errors
            .into_iter()
            .map(|(i, e)| {
                let line = self.lines[i].0 as u32 + 1;
                let (col, message) = match e {
                    MemberError::Parse(p) => (p.loc.col, p.message.clone()),
                    e => (1, e.to_string()),
                };
                render_located(&self.name, self.text, kiln::ir::Loc { line, col }, &message)
            })
            .collect()
    }
}

/// Prints each expression's line (its value, or its error at its line of
/// POP.txt); whether any failed.
fn print(values: &[String], errors: &[Option<MemberError>], lines: &[(usize, &str)]) -> bool {
    let mut failed = false;
    let mut stdout = std::io::stdout().lock();
    for ((value, error), (line_idx, _)) in values.iter().zip(errors).zip(lines) {
        let line = match error {
            Some(e) => {
                failed = true;
                format!("error: line {}: {e}", line_idx + 1)
            }
            None => value.clone(),
        };
        let _ = writeln!(stdout, "{line}");
    }
    failed
}

/// The exit of a run in which some expressions may have `failed`.
fn finish(failed: bool) -> Result<(), Failure> {
    if failed {
        return Err(Failure::Run(
            "error: some expressions failed (see their lines)".to_string(),
        ));
    }
    Ok(())
}

/// `--fit`: each expression's constants fitted to the target `y`, in at
/// most `max_iter` steps. The population's values are not compiled first:
/// `fit_constants` compiles what a fit runs (each expression's values and
/// Jacobian), so an expression that does not parse is bad input, at its
/// line, as in the other modes.
fn fit(
    args: &PopulationArgs<'_>,
    source: &Source<'_>,
    exprs: &[&str],
    table: &Table,
    y: &[f64],
    max_iter: usize,
) -> Result<(), Failure> {
    let start = Instant::now();
    let variables = kiln::population::variables_of(exprs);
    let columns = columns::<f64>(&variables, table, args.csv)?;
    let refs: Vec<&[f64]> = columns.iter().map(Vec::as_slice).collect();
    let options = kiln::FitOptions {
        max_iter,
        threads: args.threads,
        compile: compile_options(args.tier, table.n_rows()),
    };
    let engine = kiln_cli::engine(args.tier)?;
    let fits = kiln::fit_constants(exprs, &variables, &refs, y, &*engine, &options);
    let elapsed = start.elapsed();
    let bad = source.located(fits.iter().enumerate().filter_map(|(i, f)| match f {
        Err(e @ MemberError::Parse(_)) => Some((i, e)),
        _ => None,
    }));
    if !bad.is_empty() {
        return Err(Failure::Input(bad.join("\n")));
    }
    let (values, errors): Lines = fits
        .into_iter()
        .map(|fit| match fit {
            Ok(f) => {
                let kept = f.failure.map(|why| format!("\t# kept: {why}"));
                let line = format!("{:?}\t{}\t{}", f.mse, f.iterations, f.expr);
                (line + kept.as_deref().unwrap_or(""), None)
            }
            Err(e) => (String::new(), Some(e)),
        })
        .unzip();
    let failed = print(&values, &errors, source.lines);
    if args.stats {
        eprintln!(
            "population: {} expressions x {} rows, fitted in f64, tier {:?}, {} thread(s)\nfit: {:.3} ms, at most {max_iter} Levenberg-Marquardt steps each (parse, value and Jacobian compile, steps)",
            exprs.len(),
            table.n_rows(),
            args.tier,
            args.threads,
            elapsed.as_secs_f64() * 1e3,
        );
    }
    finish(failed)
}

/// Each expression's line: its MSE against `target`, else its first five
/// values; and its error.
type Lines = (Vec<String>, Vec<Option<MemberError>>);

/// The population's lines over the table's columns in its precision `T`
/// (each read as `f64` and rounded to `T`, as NumPy's `astype` does).
fn measure<T: Element>(
    population: &Population,
    table: &Table,
    path: &Path,
    target: Option<&[f64]>,
) -> Result<Lines, Failure> {
    let columns = columns::<T>(population.variables(), table, path)?;
    let refs: Vec<&[T]> = columns.iter().map(Vec::as_slice).collect();
    let n_rows = table.n_rows();
    Ok(match target {
        Some(y) => {
            let y: Vec<T> = y
                .iter()
                .map(|&v| T::of_scalar(kiln::Scalar::F64(v)))
                .collect();
            let (mse, errors) = population.mse(&refs, &y);
            (mse.iter().map(|m| format!("{m:?}")).collect(), errors)
        }
        None => {
            let (out, errors) = population.evaluate_to_vec(&refs, n_rows);
            let firsts = (0..population.len())
                .map(|i| {
                    out[i * n_rows..(i + 1) * n_rows]
                        .iter()
                        .take(5)
                        .map(|v| format!("{v:?}"))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .collect();
            (firsts, errors)
        }
    })
}

/// The columns named `variables`, rounded to `T`.
fn columns<T: Element>(
    variables: &[String],
    table: &Table,
    path: &Path,
) -> Result<Vec<Vec<T>>, Failure> {
    variables
        .iter()
        .map(|name| {
            let column = column_f64(table, path, name)?;
            Ok(column
                .into_iter()
                .map(|v| T::of_scalar(kiln::Scalar::F64(v)))
                .collect())
        })
        .collect()
}

fn column_f64(table: &Table, path: &Path, name: &str) -> Result<Vec<f64>, Failure> {
    match table.column(path, name, kiln::DType::F64)? {
        Data::Column(kiln::Buffer::F64(v)) => Ok(v),
        _ => unreachable!("an f64 column was asked for"),
    }
}
