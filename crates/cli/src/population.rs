//! `kiln eval --population POP.txt --csv DATA.csv`: a GP population, one
//! Python-subset expression a line, compiled together (one JIT module) and
//! evaluated over the CSV's columns.

use crate::csvio::Table;
use crate::{Failure, Tier};
use kiln::ir::diag::render_located;
use kiln::{Data, Engine, Format, Program, PyOptions};
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// What `--population` needs from the command line.
pub struct PopulationArgs<'a> {
    pub population: &'a Path,
    pub csv: &'a Path,
    pub target: Option<&'a str>,
    pub stats: bool,
    pub tier: Tier,
}

struct Member {
    line_no: usize,
    nodes: usize,
    graph: kiln::Graph,
    info: kiln::GraphInfo,
}

fn load_members(path: &Path, text: &str) -> Result<Vec<Member>, Failure> {
    let opts = PyOptions {
        default_shape: vec![kiln::Dim::Sym("n".to_string())],
        ..PyOptions::default()
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
        let info = kiln::verify(&loaded.graph)
            .map_err(|e| locate(kiln::ir::Loc { line: 1, col: 1 }, &e.to_string()))?;
        let nodes = kiln::frontend::py::count_nodes(line).map_err(|e| locate(e.loc, &e.message))?;
        members.push(Member {
            line_no: idx + 1,
            nodes,
            graph: loaded.graph,
            info,
        });
    }
    Ok(members)
}

fn compile(members: &[Member], tier: Tier) -> Result<Vec<Box<dyn Program>>, Failure> {
    let fail = |e: kiln::CompileError| Failure::Input(format!("error: {e}"));
    match tier {
        Tier::Interp => members
            .iter()
            .map(|m| kiln::Interpreter.compile(&m.graph, &m.info).map_err(fail))
            .collect(),
        Tier::Cranelift => {
            let optimized: Vec<(kiln::Graph, kiln::GraphInfo)> = members
                .iter()
                .map(|m| kiln::optimize(&m.graph, &m.info))
                .collect::<Result<_, _>>()
                .map_err(|e| fail(e.into()))?;
            let refs: Vec<_> = optimized.iter().map(|(g, i)| (g, i)).collect();
            let programs = kiln::compile_many(&refs).map_err(fail)?;
            Ok(programs
                .into_iter()
                .map(|p| Box::new(p) as Box<dyn Program>)
                .collect())
        }
    }
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
    let programs = compile(&members, args.tier)?;
    let compile_time = start.elapsed();
    let mut columns: HashMap<String, Data> = HashMap::new();
    let target = match args.target {
        Some(name) => Some(column_f64(&table, args.csv, name)?),
        None => None,
    };
    let n_rows = table.n_rows();
    let mut eval_time = Duration::ZERO;
    let mut node_evals: u128 = 0;
    let mut failed = false;
    let mut stdout = std::io::stdout().lock();
    for (member, program) in members.iter().zip(&programs) {
        for input in member.graph.inputs() {
            if !columns.contains_key(&input.name) {
                let column = table.column(args.csv, &input.name, kiln::DType::F64)?;
                columns.insert(input.name.clone(), column);
            }
        }
        let inputs: Vec<&Data> = member
            .graph
            .inputs()
            .iter()
            .map(|input| &columns[&input.name])
            .collect();
        let t0 = Instant::now();
        let result = program.run_refs(&inputs);
        eval_time += t0.elapsed();
        node_evals += (member.nodes * n_rows) as u128;
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
            "population: {} expressions x {n_rows} rows, tier {:?}\ncompile: {:.3} ms total, {:.1} us per expression (parse, verify, optimize, lower, codegen)\neval: {:.3} ms, {} node-evaluations, {:.0} M node-evaluations/s\ntotal: {:.3} ms",
            members.len(),
            args.tier,
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
