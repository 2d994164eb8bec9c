//! torch.fx graphs handed over as nodes (`kiln.torch`, the `torch.compile`
//! backend): the node list of a `torch.fx.Graph`, each argument tagged by
//! kind, goes to kiln's one fx importer without being printed and parsed
//! again.

use crate::errors::{compile_error, parse_error};
use crate::function::{tier_named, Function};
use kiln::frontend::fx::{self, Arg, FxGraph, Node, MAX_DEPTH};
use kiln::Type;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use std::collections::HashMap;

/// One node as `kiln.torch` passes it: name, op (`placeholder`,
/// `call_function`, …), target (`torch.ops.aten.addmm.default`), tagged
/// positional and keyword arguments, and the byte offset of its line in the
/// source text errors point into.
type NodeSpec<'py> = (
    String,
    String,
    String,
    Vec<Bound<'py, PyAny>>,
    Vec<(String, Bound<'py, PyAny>)>,
    usize,
);

/// Decodes one tagged argument: `("n", name)` a node, `("i", int)`,
/// `("f", float)`, `("b", bool)`, `("none",)`, `("s", str)`, `("name", str)`
/// (a dotted name such as `torch.float32`), `("seq", [args])`,
/// `("slice", start, stop, step)`.
fn decode(arg: &Bound<'_, PyAny>, depth: usize) -> PyResult<Arg> {
    if depth > MAX_DEPTH {
        return Err(PyValueError::new_err(format!(
            "fx arguments nest deeper than {MAX_DEPTH} levels"
        )));
    }
    let tuple = arg
        .cast::<PyTuple>()
        .map_err(|_| PyTypeError::new_err("an fx argument must be a tagged tuple"))?;
    let tag: String = tuple.get_item(0)?.extract()?;
    let item = |k: usize| tuple.get_item(k);
    Ok(match tag.as_str() {
        "n" => Arg::Node(item(1)?.extract()?),
        "i" => {
            Arg::Int(item(1)?.extract().map_err(|_| {
                PyValueError::new_err("an integer argument does not fit in 64 bits")
            })?)
        }
        "f" => Arg::Float(item(1)?.extract()?),
        "b" => Arg::Bool(item(1)?.extract()?),
        "none" => Arg::None,
        "s" => Arg::Str(item(1)?.extract()?),
        "name" => Arg::Name(item(1)?.extract()?),
        "seq" => {
            let list = item(1)?;
            let list = list
                .cast::<PyList>()
                .map_err(|_| PyTypeError::new_err("a `seq` argument holds a list"))?;
            Arg::Seq(
                list.iter()
                    .map(|a| decode(&a, depth + 1))
                    .collect::<PyResult<_>>()?,
            )
        }
        "slice" => Arg::Slice([
            item(1)?.extract()?,
            item(2)?.extract()?,
            item(3)?.extract()?,
        ]),
        t => {
            return Err(PyValueError::new_err(format!(
                "unknown fx argument tag {t:?}"
            )))
        }
    })
}

/// Compiles fx nodes into a callable: `inputs` types each placeholder by
/// node name (`kiln.torch` turns `get_attr` nodes into placeholders); `source` is the text errors point into, named
/// `name`.
#[pyfunction]
#[pyo3(signature = (nodes, output, output_offset, source, name, inputs, tier, optimize))]
#[allow(clippy::too_many_arguments)]
pub fn compile_fx(
    py: Python<'_>,
    nodes: Vec<NodeSpec<'_>>,
    output: Vec<Bound<'_, PyAny>>,
    output_offset: usize,
    source: String,
    name: String,
    inputs: HashMap<String, String>,
    tier: &str,
    optimize: bool,
) -> PyResult<Function> {
    let tier = tier_named(tier)?;
    let mut graph = FxGraph {
        nodes: Vec::with_capacity(nodes.len()),
        output: output
            .iter()
            .map(|a| decode(a, 0))
            .collect::<PyResult<_>>()?,
        output_offset: output_offset.min(source.len()),
    };
    for (node_name, kind, target, args, kwargs, offset) in nodes {
        graph.nodes.push(Node {
            name: node_name,
            kind,
            target,
            args: args.iter().map(|a| decode(a, 0)).collect::<PyResult<_>>()?,
            kwargs: kwargs
                .iter()
                .map(|(k, a)| Ok((k.clone(), decode(a, 0)?)))
                .collect::<PyResult<_>>()?,
            offset: offset.min(source.len()),
        });
    }
    let mut options = fx::Options::default();
    for (input, text) in &inputs {
        let ty: Type = kiln::parse_type(text).map_err(PyValueError::new_err)?;
        options.inputs.insert(input.clone(), ty);
    }
    let (g, source_map) = fx::lower_nodes(&source, &graph, &options)
        .map_err(|e| parse_error(&e.render(&name, &source), &name, &source, e.loc))?;
    let verified = crate::verify_located(g, &source_map, &name, &source)?;
    let options = kiln::CompileOptions {
        optimize,
        ..Default::default()
    };
    py.detach(|| Function::compile(tier, &verified, &options))
        .map_err(|e| compile_error(format!("{name}: {e}")))
}

/// Whether kiln's fx importer builds a `call_function`/`call_method` node
/// with this target (its arguments may still be refused when compiled).
#[pyfunction]
pub fn fx_supports(kind: &str, target: &str) -> bool {
    fx::supports(kind, target)
}
