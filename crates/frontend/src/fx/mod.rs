//! The torch.fx frontend: the text `print(gm.graph)` writes, and optionally the
//! module's `state_dict()` as a `.safetensors` file for `get_attr` targets and
//! module parameters.
//!
//! The same nodes also come from what `print(gm)` writes (`code.rs`: the
//! generated `forward`), whose module tree (`modules.rs`, or
//! [`Options::modules`]) types every `call_module`.
//!
//! Placeholders need types, which the graph text does not carry: give them in
//! [`Options::inputs`] (the CLI takes `--input NAME:DTYPE[SHAPE]` or derives
//! them, with their exact shapes, from `--inputs` data). `docs/frontends.md`
//! lists the targets and how torch's promotion maps.

mod code;
mod lower;
pub mod modules;
mod text;

pub use lower::{op_name, supports, torch_dtype};
pub use modules::Module;
pub use text::{parse as parse_text, Arg, FxGraph, Node, MAX_DEPTH};

use kiln_ir::{DType, Graph, ParseError, ParseResult, Scalar, SourceMap, Type};
use std::collections::HashMap;

/// A tensor of the weights file.
#[derive(Clone, Debug, PartialEq)]
pub struct Weight {
    /// Its dtype.
    pub dtype: DType,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its elements, row-major.
    pub data: Vec<Scalar>,
}

/// What the graph text does not say.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Placeholder types, by node name or by target (forward-argument name).
    pub inputs: HashMap<String, Type>,
    /// Parameters and buffers, by `state_dict` key.
    pub weights: HashMap<String, Weight>,
    /// The submodules `print(gm)` lists, by target path ([`modules::parse`]):
    /// what gives a bare `call_module` node its type and arguments.
    pub modules: HashMap<String, Module>,
}

/// Parses fx graph text into an unverified graph and the source line of each
/// node's value.
///
/// `src` is either the graph text (`print(gm.graph)`) or what `print(gm)`
/// writes: the module tree, which types every `call_module`, then the
/// generated `forward` code, read into the same nodes.
pub fn parse(src: &str, opts: &Options) -> ParseResult<(Graph, SourceMap)> {
    let (mut g, mut modules) = parse_nodes(src)?;
    // The text's own tree, else the caller's; the caller's wins where both
    // name a target.
    if modules.is_empty() {
        modules::apply(&mut g, &opts.modules);
        return lower::lower(src, &g, opts, &opts.modules);
    }
    modules.extend(opts.modules.iter().map(|(k, m)| (k.clone(), m.clone())));
    modules::apply(&mut g, &modules);
    lower::lower(src, &g, opts, &modules)
}

/// Lowers nodes a caller built itself (kiln's Python package passes a
/// `torch.fx.Graph`'s nodes, as `torch.compile` hands them over, without
/// printing and re-parsing them). `src` is the text errors point into: each
/// node's [`Node::offset`] is the start of its line there, and
/// [`FxGraph::output_offset`] that of the `return` line. Nodes are
/// `placeholder`, `get_attr` (read from [`Options::weights`]) and
/// `call_function`/`call_method`; there is no module tree.
pub fn lower_nodes(src: &str, g: &FxGraph, opts: &Options) -> ParseResult<(Graph, SourceMap)> {
    lower::lower(src, g, opts, &HashMap::new())
}

/// The nodes of either form of fx text, before lowering, and the module tree
/// a `print(gm)` text carries (empty for `print(gm.graph)`).
pub fn parse_nodes(src: &str) -> ParseResult<(FxGraph, HashMap<String, Module>)> {
    if src.trim_start().starts_with("def forward(self") || modules::looks_like_module_repr(src) {
        Ok((code::parse(src)?, modules::parse(src)?))
    } else {
        Ok((text::parse(src)?, HashMap::new()))
    }
}

/// Reads a `.safetensors` file (`torch.save`'s `state_dict` via the
/// `safetensors` package). Supported dtypes: F32, F64, I32, I64, BOOL.
pub fn read_weights(bytes: &[u8]) -> ParseResult<HashMap<String, Weight>> {
    use safetensors::{Dtype, SafeTensors};
    let fail = |m: String| ParseError::at("", 0, m);
    let st = SafeTensors::deserialize(bytes)
        .map_err(|e| fail(format!("not a valid safetensors file: {e}")))?;
    let mut out = HashMap::new();
    for (name, view) in st.tensors() {
        let dtype = match view.dtype() {
            Dtype::F32 => DType::F32,
            Dtype::F64 => DType::F64,
            Dtype::I32 => DType::I32,
            Dtype::I64 => DType::I64,
            Dtype::BOOL => DType::Bool,
            other => {
                return Err(fail(format!(
                    "weight `{name}`: dtype {other:?} is not supported (f32, f64, i32, i64, bool)"
                )))
            }
        };
        let data: Vec<Scalar> = view
            .data()
            .chunks_exact(dtype.size_bytes())
            .map(|c| Scalar::from_le_bytes(dtype, c).expect("chunks of the dtype's size"))
            .collect();
        out.insert(
            name.to_string(),
            Weight {
                dtype,
                shape: view.shape().to_vec(),
                data,
            },
        );
    }
    Ok(out)
}
