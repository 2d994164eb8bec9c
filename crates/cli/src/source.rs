//! Reading the graph a command works on, and rendering every error about it as
//! `file:line:col: error: message` with the offending line.

use crate::Failure;
use clap::{Args, ValueEnum};
use kiln::ir::diag::render_located;
use kiln::{Format, Graph, GraphInfo, Loaded, PyOptions};
use std::path::PathBuf;

/// Where the source comes from.
#[derive(Args, Debug)]
pub struct SourceArgs {
    /// Source file: `.kiln` (text IR) or `.py` (Python subset).
    #[arg(conflicts_with = "expr")]
    pub file: Option<PathBuf>,
    /// Source text given inline, for example `-e 'sin(x) * 2.0'`.
    #[arg(short = 'e', long = "expr", value_name = "EXPR")]
    pub expr: Option<String>,
    /// Source format, instead of the one the file extension names (`-e` defaults to py).
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub from: Option<FormatArg>,
}

/// `--from` values.
#[derive(Copy, Clone, Debug, ValueEnum)]
pub enum FormatArg {
    /// The `.kiln` text IR.
    Kiln,
    /// The Python subset.
    Py,
}

/// A loaded, verified graph and the name messages give its source.
pub struct Source {
    /// The file name messages use (`<expr>` for `-e`).
    pub name: String,
    /// The verified graph.
    pub graph: Graph,
    /// Proof of verification.
    pub info: GraphInfo,
}

impl SourceArgs {
    /// Reads, parses and verifies the source.
    pub fn load(&self, py: &PyOptions) -> Result<Source, Failure> {
        let (name, text) = match (&self.file, &self.expr) {
            (_, Some(expr)) => ("<expr>".to_string(), expr.clone()),
            (Some(path), None) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    Failure::Input(format!("{}: error: cannot read: {e}", path.display()))
                })?;
                (path.display().to_string(), text)
            }
            (None, None) => {
                return Err(Failure::Input("error: give a FILE or -e EXPR".to_string()))
            }
        };
        let format = match (self.from, &self.file) {
            (Some(FormatArg::Kiln), _) => Format::Kiln,
            (Some(FormatArg::Py), _) | (None, None) => Format::Py,
            (None, Some(_)) if self.expr.is_some() => Format::Py,
            (None, Some(path)) => Format::from_path(path).ok_or_else(|| {
                Failure::Input(format!("{name}: error: cannot tell the format from the file name; use --from kiln or --from py"))
            })?,
        };
        let Loaded { graph, source_map } =
            kiln::load(&text, format, py).map_err(|e| Failure::Input(e.render(&name, &text)))?;
        let info = kiln::verify(&graph).map_err(|errors| {
            let lines: Vec<String> = errors
                .0
                .iter()
                .map(|e| match e.location.and_then(|v| source_map.get(v)) {
                    Some(loc) => render_located(&name, &text, loc, &e.to_string()),
                    None => format!("{name}: error: {e}"),
                })
                .collect();
            Failure::Input(lines.join("\n"))
        })?;
        Ok(Source { name, graph, info })
    }
}
