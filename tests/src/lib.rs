//! Filetests: `.kiln` and `.py` files under `tests/filetests/` with `# run:`
//! lines, run on every engine this build has, each on the graph as written, the
//! optimized graph, and the graph printed and parsed back.
//!
//! ```text
//! # columns: x            (Python inputs that are columns `[n]`; `*` for all)
//! # run: x=[1.0, 2.0], k=3 => y=[4.0, 5.0]
//! # run: k=0 => error: integer division by zero
//! # engines: interp       (only these engines; the others must refuse to compile it)
//! ```
//!
//! Files under `opt/` also hold the expected optimized graph after a line
//! `# optimized:`, as `# `-prefixed lines; `KILN_BLESS=1` rewrites them.

use kiln::{CompileOptions, Data, Dim, DynEngine, Format, Graph, PyOptions, Verified};

#[cfg(feature = "llvm")]
pub mod wasm;
use std::path::Path;

/// One `# run:` line.
#[derive(Clone, Debug)]
pub struct RunLine {
    /// Line number in the file, from 1.
    pub line: usize,
    /// `name=value` inputs as written.
    pub inputs: Vec<(String, String)>,
    /// Expected `name=value` outputs, or the expected error text.
    pub expect: Result<Vec<(String, String)>, String>,
}

/// A parsed filetest.
pub struct FileTest {
    /// The graph.
    pub graph: Graph,
    /// Its run lines.
    pub runs: Vec<RunLine>,
    /// `# engines:` — the engines that run it; every other engine must refuse
    /// it with `Unsupported` (what a tier does with an op it cannot lower yet).
    pub engines: Option<Vec<String>>,
}

/// Splits at commas outside brackets.
fn split_top(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(text[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    let last = text[start..].trim();
    if !last.is_empty() {
        parts.push(last);
    }
    parts
}

fn pairs(text: &str, line: usize) -> Result<Vec<(String, String)>, String> {
    split_top(text)
        .into_iter()
        .map(|p| {
            p.split_once('=')
                .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
                .ok_or_else(|| format!("line {line}: `{p}` is not name=value"))
        })
        .collect()
}

/// Reads a filetest.
pub fn load(path: &Path) -> Result<FileTest, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let format = Format::from_path(path).ok_or("unknown extension")?;
    let mut opts = PyOptions::default();
    let mut runs = Vec::new();
    let mut engines = None;
    for (idx, line) in text.lines().enumerate() {
        let line_no = idx + 1;
        if let Some(names) = line.strip_prefix("# engines:") {
            engines = Some(
                names
                    .split([',', ' '])
                    .filter(|n| !n.is_empty())
                    .map(str::to_string)
                    .collect(),
            );
        }
        if let Some(cols) = line.strip_prefix("# columns:") {
            for name in cols.split([',', ' ']).filter(|n| !n.is_empty()) {
                if name == "*" {
                    opts.default_shape = vec![Dim::Sym("n".into())];
                } else {
                    opts.shapes
                        .insert(name.to_string(), vec![Dim::Sym("n".into())]);
                }
            }
        }
        if let Some(run) = line.strip_prefix("# run:") {
            let (inputs, expect) = run
                .split_once("=>")
                .ok_or_else(|| format!("line {line_no}: a run line needs `=>`"))?;
            let expect = match expect.trim().strip_prefix("error:") {
                Some(err) => Err(err.trim().to_string()),
                None => Ok(pairs(expect, line_no)?),
            };
            runs.push(RunLine {
                line: line_no,
                inputs: pairs(inputs, line_no)?,
                expect,
            });
        }
    }
    let opts = kiln::LoadOptions {
        py: opts,
        ..kiln::LoadOptions::default()
    };
    let loaded = kiln::load(&text, format, &opts)
        .map_err(|e| e.render(&path.display().to_string(), &text))?;
    Ok(FileTest {
        graph: loaded.graph,
        runs,
        engines,
    })
}

/// Runs one run line on one compiled graph; `Err` describes a mismatch.
pub fn check_run(graph: &Graph, program: &dyn kiln::Program, run: &RunLine) -> Result<(), String> {
    let mut inputs = Vec::new();
    for input in graph.inputs() {
        let (_, text) = run
            .inputs
            .iter()
            .find(|(n, _)| n == &input.name)
            .ok_or_else(|| format!("no value for input `{}`", input.name))?;
        inputs.push(
            Data::parse(text, graph.ty(input.value))
                .map_err(|e| format!("input `{}`: {e}", input.name))?,
        );
    }
    let result = program.run(&inputs);
    match (&run.expect, result) {
        (Err(want), Err(got)) if got.to_string().contains(want.as_str()) => Ok(()),
        (Err(want), Err(got)) => Err(format!("expected error `{want}`, got error `{got}`")),
        (Err(want), Ok(outs)) => Err(format!(
            "expected error `{want}`, got {}",
            show(graph, &outs)
        )),
        (Ok(_), Err(got)) => Err(format!("unexpected error: {got}")),
        (Ok(want), Ok(outs)) => {
            for (name, text) in want {
                let idx = graph
                    .outputs()
                    .iter()
                    .position(|o| &o.name == name)
                    .ok_or_else(|| format!("no output `{name}`"))?;
                let expected = Data::parse(text, graph.ty(graph.outputs()[idx].value))
                    .map_err(|e| format!("output `{name}`: {e}"))?;
                if !expected.same_data(&outs[idx]) {
                    return Err(format!(
                        "output `{name}`: expected {expected}, got {}",
                        outs[idx]
                    ));
                }
            }
            Ok(())
        }
    }
}

fn show(graph: &Graph, outs: &[Data]) -> String {
    graph
        .outputs()
        .iter()
        .zip(outs)
        .map(|(o, d)| format!("{}={d}", o.name))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The variants of a graph every filetest runs: as written, optimized, and
/// printed then parsed back (so every filetest also tests the text round trip).
pub fn variants(graph: &Graph) -> Result<Vec<(&'static str, Verified)>, String> {
    let verified = kiln::verify(graph.clone()).map_err(|e| e.to_string())?;
    let optimized = kiln::optimize(&verified).map_err(|e| e.to_string())?;
    let printed = kiln::ir::text::print(graph);
    let reparsed =
        kiln::ir::text::parse(&printed).map_err(|e| format!("reparse: {e}\n{printed}"))?;
    if &reparsed != graph {
        return Err(format!(
            "print/parse round trip changed the graph:\n{printed}"
        ));
    }
    let reparsed = kiln::verify(reparsed).map_err(|e| e.to_string())?;
    Ok(vec![
        ("as written", verified),
        ("optimized", optimized),
        ("reparsed", reparsed),
    ])
}

/// Runs every run line of `test` on every engine and variant, in every
/// mode of `kiln::threads::TESTED` (every loop cut, however small: the
/// grain is 0 for the process); returns failures.
pub fn run_all(path: &Path, test: &FileTest, engines: &[Box<dyn DynEngine>]) -> Vec<String> {
    kiln::threads::set_grain(0);
    let mut failures = Vec::new();
    let variants = match variants(&test.graph) {
        Ok(v) => v,
        Err(e) => return vec![format!("{}: {e}", path.display())],
    };
    for engine in engines {
        let runs_here = test
            .engines
            .as_ref()
            .is_none_or(|names| names.iter().any(|n| n == engine.name()));
        for (variant, graph) in &variants {
            let no_opt = CompileOptions {
                optimize: false,
                ..CompileOptions::default()
            };
            let program = match engine.compile_dyn(graph, &no_opt) {
                Ok(_) if !runs_here => {
                    failures.push(format!(
                        "{}: {} ({variant}) compiles it: add it to `# engines:`",
                        path.display(),
                        engine.name()
                    ));
                    continue;
                }
                Err(kiln::CompileError::Unsupported(_)) if !runs_here => continue,
                Ok(p) => p,
                Err(e) => {
                    failures.push(format!(
                        "{}: {} ({variant}): compile: {e}",
                        path.display(),
                        engine.name()
                    ));
                    continue;
                }
            };
            for run in &test.runs {
                let check = || check_run(graph.graph(), program.as_ref(), run);
                for (mode, checked) in kiln::threads::in_tested_modes(check) {
                    if let Err(e) = checked {
                        failures.push(format!(
                            "{}:{}: {} ({variant}, {mode}): {e}",
                            path.display(),
                            run.line,
                            engine.name()
                        ));
                    }
                }
            }
        }
    }
    failures
}

/// Verifies `graph` (a copy) and compiles it on `engine`, optimized or as
/// written.
pub fn compile(
    engine: &dyn DynEngine,
    graph: &Graph,
    optimize: bool,
) -> kiln::CompileResult<Box<dyn kiln::Program>> {
    let verified = kiln::verify(graph.clone())?;
    let options = CompileOptions {
        optimize,
        ..CompileOptions::default()
    };
    engine.compile_dyn(&verified, &options)
}
