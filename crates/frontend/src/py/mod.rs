//! The Python-subset frontend: what users already write, pasted as is.
//!
//! Accepts a single expression (`(x > 2.0) & (x < 6.0)`), top-level statements
//! whose last line is the result, or one function `def f(x: float, n: int): …`
//! with assignments, augmented assignments, tuple assignment and `return`
//! (a tuple returns several outputs). `docs/frontends.md` lists the operators,
//! functions and promotion rules.
//!
//! A free name of an expression or script becomes an `f64` input, in order of
//! first use; function parameters are inputs in order, `f64` unless annotated.

pub mod ast;
pub mod funcs;
mod lex;
mod lower;
pub mod numpy;
mod parse;
mod tensor;

pub use parse::{Syntax, MAX_DEPTH};

use kiln_ir::{DType, Graph, ParseResult, Shape, SourceMap};
use std::collections::HashMap;

/// How inputs are typed.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The shape of an input not in `shapes`: `[]` (scalars, the default) or a
    /// column such as `[n]`.
    pub default_shape: Shape,
    /// Shapes of particular inputs, by name.
    pub shapes: HashMap<String, Shape>,
    /// Dtypes of particular inputs without an annotation, by name.
    pub dtypes: HashMap<String, DType>,
    /// The dtype of an input neither annotated nor in `dtypes` (`None`:
    /// `f64`).
    pub default_dtype: Option<DType>,
    /// Float literals become scalar `f64` inputs named `$0`, `$1`, … in the
    /// order they are read (left to right), weak as literals are: the
    /// constants a fit adjusts ([`parse_parameters`]).
    pub parameters: bool,
}

/// A float literal read as a parameter ([`Options::parameters`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Parameter {
    /// The literal's value.
    pub value: f64,
    /// Where the literal is in the source, in bytes (`start..end`).
    pub span: std::ops::Range<usize>,
}

/// [`parse_counted`] with every float literal a parameter: the graph's
/// inputs named `$k` are the literals, whose values and places
/// `parameters[k]` gives.
pub fn parse_parameters(
    src: &str,
    opts: &Options,
) -> ParseResult<(Graph, SourceMap, usize, Vec<Parameter>)> {
    let ast = parse::parse(src)?;
    let nodes = ast.exprs.len();
    let opts = Options {
        parameters: true,
        ..opts.clone()
    };
    let (graph, map, parameters) = lower::Lower::run_with_parameters(src, &ast, &opts)?;
    Ok((graph, map, nodes, parameters))
}

/// The number of expression nodes in `src` as written: names, literals, calls
/// and operators, each counted once per occurrence (what "node-evaluations" of
/// an expression count, as the peer benchmarks do).
pub fn count_nodes(src: &str) -> ParseResult<usize> {
    Ok(parse::parse(src)?.exprs.len())
}

/// Parses Python-subset source into its syntax tree with the operator
/// precedence of `syntax`, for tools that give the syntax their own meaning
/// (`kiln-arrow`'s pandas queries).
pub fn parse_ast(src: &str, syntax: Syntax) -> ParseResult<ast::Ast> {
    parse::parse_with(src, syntax)
}

/// Parses Python-subset source into an unverified graph and the source location
/// of each value.
pub fn parse(src: &str, opts: &Options) -> ParseResult<(Graph, SourceMap)> {
    let ast = parse::parse(src)?;
    lower::Lower::run(src, &ast, opts)
}

/// [`parse`], and [`count_nodes`] of the same syntax tree (GP populations
/// want both, and parsing twice was a tenth of their compile time).
pub fn parse_counted(src: &str, opts: &Options) -> ParseResult<(Graph, SourceMap, usize)> {
    let ast = parse::parse(src)?;
    let nodes = ast.exprs.len();
    let (graph, map) = lower::Lower::run(src, &ast, opts)?;
    Ok((graph, map, nodes))
}
