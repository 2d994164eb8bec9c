//! `kiln eval --population POP.txt --csv DATA.csv`: a GP population, one
//! Python-subset expression a line, compiled together (one JIT module) and
//! evaluated over the CSV's columns.

use crate::csvio::Table;
use kiln::ir::diag::render_located;
use kiln::{Data, Format, Program, PyOptions};
use kiln_cli::{Failure, Tier};
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::time::Instant;

/// What `--population` needs from the command line.
pub struct PopulationArgs<'a> {
    pub population: &'a Path,
    pub csv: &'a Path,
    pub target: Option<&'a str>,
    pub stats: bool,
    pub tier: Tier,
    pub threads: usize,
}

struct Member {
    line_no: usize,
    nodes: usize,
    graph: kiln::Verified,
}

fn load_members(path: &Path, text: &str) -> Result<Vec<Member>, Failure> {
    let opts = kiln::LoadOptions {
        py: PyOptions {
            default_shape: vec![kiln::Dim::Sym("n".to_string())],
            ..PyOptions::default()
        },
        ..kiln::LoadOptions::default()
    };
    let name = path.display().to_string();
    let mut members = Vec::new();
    for (idx, line) in text.lines().enumerate() {
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let locate = |loc: kiln::ir::Loc, msg: &str| {
            // Errors point into POP.txt: the expression's line, its column.
            Failure::Input(render_located(
                &name,
                text,
                kiln::ir::Loc {
                    line: idx as u32 + 1,
                    col: loc.col,
                },
                msg,
            ))
        };
        let loaded = kiln::load(line, Format::Py, &opts).map_err(|e| locate(e.loc, &e.message))?;
        let graph = kiln::verify(loaded.graph)
            .map_err(|e| locate(kiln::ir::Loc { line: 1, col: 1 }, &e.to_string()))?;
        let nodes = kiln::frontend::py::count_nodes(line).map_err(|e| locate(e.loc, &e.message))?;
        members.push(Member {
            line_no: idx + 1,
            nodes,
            graph,
        });
    }
    Ok(members)
}

fn compile_chunk(members: &[Member], tier: Tier) -> Result<Vec<Box<dyn Program>>, Failure> {
    let graphs: Vec<kiln::Verified> = members.iter().map(|m| m.graph.clone()).collect();
    // The interpreter runs each graph as written; the compiling tiers
    // optimize first and compile the chunk as one module.
    let options = kiln::CompileOptions {
        optimize: tier != Tier::Interp,
        ..kiln::CompileOptions::default()
    };
    tier.engine()?
        .compile_batch_dyn(&graphs, &options)
        .map_err(|e| Failure::Input(format!("error: {e}")))
}

/// Compiles the population on `threads` threads, each its share as one module.
fn compile(
    members: &[Member],
    tier: Tier,
    threads: usize,
) -> Result<Vec<Box<dyn Program>>, Failure> {
    let chunk = members.len().div_ceil(threads.max(1)).max(1);
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = members
            .chunks(chunk)
            .map(|part| s.spawn(move || compile_chunk(part, tier)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("compile threads do not panic"))
            .collect()
    });
    let mut programs = Vec::with_capacity(members.len());
    for part in results {
        programs.extend(part?);
    }
    Ok(programs)
}

/// The first output as f64 values, one per row (a scalar repeats).
fn as_f64(data: &Data, n_rows: usize) -> Option<Vec<f64>> {
    let value = |s: kiln::Scalar| match kiln::ir::semantics::cast(s, kiln::DType::F64) {
        kiln::Scalar::F64(v) => v,
        _ => unreachable!("cast to f64 gives f64"),
    };
    match data {
        Data::Scalar(s) => Some(vec![value(*s); n_rows]),
        Data::Column(b) => Some(b.iter().map(value).collect()),
        Data::Selection(_) => None,
    }
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
    let start = Instant::now();
    let members = load_members(args.population, &text)?;
    let programs = compile(&members, args.tier, args.threads)?;
    let compile_time = start.elapsed();
    let mut columns: HashMap<String, Data> = HashMap::new();
    let target = match args.target {
        Some(name) => Some(column_f64(&table, args.csv, name)?),
        None => None,
    };
    let n_rows = table.n_rows();
    for member in &members {
        for input in member.graph.graph().inputs() {
            if !columns.contains_key(&input.name) {
                let column = table.column(args.csv, &input.name, kiln::DType::F64)?;
                columns.insert(input.name.clone(), column);
            }
        }
    }
    let node_evals: u128 = members.iter().map(|m| (m.nodes * n_rows) as u128).sum();
    // Evaluate on `threads` threads, each a contiguous share of the expressions.
    let t0 = Instant::now();
    let chunk = members.len().div_ceil(args.threads.max(1)).max(1);
    let results: Vec<kiln::ExecResult<Vec<Data>>> = std::thread::scope(|s| {
        let handles: Vec<_> = members
            .chunks(chunk)
            .zip(programs.chunks(chunk))
            .map(|(ms, ps)| {
                let columns = &columns;
                s.spawn(move || {
                    ms.iter()
                        .zip(ps)
                        .map(|(m, p)| {
                            let inputs: Vec<&Data> = m
                                .graph
                                .graph()
                                .inputs()
                                .iter()
                                .map(|i| &columns[&i.name])
                                .collect();
                            p.run_refs(&inputs)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("eval threads do not panic"))
            .collect()
    });
    let eval_time = t0.elapsed();
    let mut failed = false;
    let mut stdout = std::io::stdout().lock();
    for (member, result) in members.iter().zip(results) {
        let line = match result.map(|outs| as_f64(&outs[0], n_rows)) {
            Err(e) => {
                failed = true;
                format!("error: line {}: {e}", member.line_no)
            }
            Ok(None) => "error: the first output is a selection".to_string(),
            Ok(Some(values)) => match &target {
                Some(y) => {
                    let sum: f64 = values.iter().zip(y).map(|(v, t)| (v - t) * (v - t)).sum();
                    format!("{:?}", sum / n_rows as f64)
                }
                None => values
                    .iter()
                    .take(5)
                    .map(|v| format!("{v:?}"))
                    .collect::<Vec<_>>()
                    .join(","),
            },
        };
        let _ = writeln!(stdout, "{line}");
    }
    if args.stats {
        let n = members.len().max(1);
        let secs = eval_time.as_secs_f64();
        eprintln!(
            "population: {} expressions x {n_rows} rows, tier {:?}, {} thread(s)\ncompile: {:.3} ms total, {:.1} us per expression (parse, verify, optimize, lower, codegen)\neval: {:.3} ms, {} node-evaluations, {:.0} M node-evaluations/s\ntotal: {:.3} ms",
            members.len(),
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
    if failed {
        return Err(Failure::Run(
            "error: some expressions failed (see their lines)".to_string(),
        ));
    }
    Ok(())
}

fn column_f64(table: &Table, path: &Path, name: &str) -> Result<Vec<f64>, Failure> {
    match table.column(path, name, kiln::DType::F64)? {
        Data::Column(kiln::Buffer::F64(v)) => Ok(v),
        _ => unreachable!("an f64 column was asked for"),
    }
}
