//! The TensorFlow GraphDef frontend: text (`.pbtxt`) and binary (`.pb`)
//! GraphDefs, with TensorFlow's meanings.
//!
//! Both encodings fill the same message structs (`proto.rs`, from the
//! published field numbers): binary through `prost`, the maintained protobuf
//! crate whose derive needs no `.proto` files or `protoc`; text through
//! `pbtxt.rs`, since no maintained Rust crate reads the text format without a
//! descriptor pool. Placeholders are typed by their `dtype` and `shape` attrs
//! (fixed sizes stay fixed; a leading `-1` is the symbolic `n`), by
//! [`Options::shapes`] (the shape of the data given, with the attr's dtype),
//! or by [`Options::inputs`]. Outputs are [`Options::outputs`], else every node no
//! other node reads.

mod lower;
pub mod pbtxt;
pub mod proto;

use kiln_ir::{Graph, ParseError, ParseResult, SourceMap, Type};
use std::collections::HashMap;

/// What the GraphDef does not say, or what the caller overrides.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Placeholder types by node name, instead of their attrs.
    pub inputs: HashMap<String, Type>,
    /// Placeholder shapes by node name (of the data a caller has), with the
    /// dtype of the `dtype` attr, for placeholders whose `shape` attr leaves a
    /// dimension open (or is missing); [`Options::inputs`] wins over these.
    pub shapes: HashMap<String, kiln_ir::Shape>,
    /// The outputs, as `node` or `node:k`; empty: nodes nobody reads.
    pub outputs: Vec<String>,
}

/// Parses a text-format GraphDef.
pub fn parse_text(src: &str, opts: &Options) -> ParseResult<(Graph, SourceMap)> {
    let g = pbtxt::parse(src)?;
    lower::lower(&g, Some(src), opts)
}

/// Decodes a binary GraphDef.
pub fn parse_binary(bytes: &[u8], opts: &Options) -> ParseResult<(Graph, SourceMap)> {
    use prost::Message;
    let g = proto::GraphDef::decode(bytes).map_err(|e| ParseError {
        loc: kiln_ir::Loc { line: 1, col: 1 },
        message: format!("not a binary GraphDef: {e}"),
    })?;
    lower::lower(&g, None, opts)
}
