//! The few TensorFlow protobuf messages kiln reads, from their published field
//! numbers (`tensorflow/core/framework/{graph,node_def,attr_value,tensor,
//! tensor_shape,types}.proto`). Binary `.pb` files decode through `prost`;
//! text `.pbtxt` files through `pbtxt.rs` into the same structs.

use std::collections::HashMap;

/// `GraphDef`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GraphDef {
    /// `repeated NodeDef node = 1;`
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeDef>,
}

/// `NodeDef`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeDef {
    /// `string name = 1;`
    #[prost(string, tag = "1")]
    pub name: String,
    /// `string op = 2;`
    #[prost(string, tag = "2")]
    pub op: String,
    /// `repeated string input = 3;` as `"node"`, `"node:k"` or `"^node"`.
    #[prost(string, repeated, tag = "3")]
    pub input: Vec<String>,
    /// `string device = 4;`
    #[prost(string, tag = "4")]
    pub device: String,
    /// `map<string, AttrValue> attr = 5;`
    #[prost(map = "string, message", tag = "5")]
    pub attr: HashMap<String, AttrValue>,
}

/// `AttrValue` (its `oneof value`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct AttrValue {
    /// The value.
    #[prost(oneof = "attr_value::Value", tags = "1, 2, 3, 4, 5, 6, 7, 8, 9")]
    pub value: Option<attr_value::Value>,
}

/// `AttrValue`'s nested types.
pub mod attr_value {
    /// `oneof value`.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Value {
        /// `ListValue list = 1;`
        #[prost(message, tag = "1")]
        List(super::ListValue),
        /// `bytes s = 2;`
        #[prost(bytes, tag = "2")]
        S(Vec<u8>),
        /// `int64 i = 3;`
        #[prost(int64, tag = "3")]
        I(i64),
        /// `float f = 4;`
        #[prost(float, tag = "4")]
        F(f32),
        /// `bool b = 5;`
        #[prost(bool, tag = "5")]
        B(bool),
        /// `DataType type = 6;`
        #[prost(int32, tag = "6")]
        Type(i32),
        /// `TensorShapeProto shape = 7;`
        #[prost(message, tag = "7")]
        Shape(super::TensorShapeProto),
        /// `TensorProto tensor = 8;`
        #[prost(message, tag = "8")]
        Tensor(super::TensorProto),
        /// `string placeholder = 9;`
        #[prost(string, tag = "9")]
        Placeholder(String),
    }
}

/// `AttrValue.ListValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListValue {
    /// `repeated bytes s = 2;`
    #[prost(bytes = "vec", repeated, tag = "2")]
    pub s: Vec<Vec<u8>>,
    /// `repeated int64 i = 3 [packed = true];`
    #[prost(int64, repeated, tag = "3")]
    pub i: Vec<i64>,
    /// `repeated float f = 4 [packed = true];`
    #[prost(float, repeated, tag = "4")]
    pub f: Vec<f32>,
    /// `repeated bool b = 5 [packed = true];`
    #[prost(bool, repeated, tag = "5")]
    pub b: Vec<bool>,
    /// `repeated DataType type = 6 [packed = true];`
    #[prost(int32, repeated, tag = "6")]
    pub r#type: Vec<i32>,
}

/// `TensorShapeProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorShapeProto {
    /// `repeated Dim dim = 2;`
    #[prost(message, repeated, tag = "2")]
    pub dim: Vec<Dim>,
    /// `bool unknown_rank = 3;`
    #[prost(bool, tag = "3")]
    pub unknown_rank: bool,
}

/// `TensorShapeProto.Dim`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Dim {
    /// `int64 size = 1;` (-1: unknown)
    #[prost(int64, tag = "1")]
    pub size: i64,
    /// `string name = 2;`
    #[prost(string, tag = "2")]
    pub name: String,
}

/// `TensorProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorProto {
    /// `DataType dtype = 1;`
    #[prost(int32, tag = "1")]
    pub dtype: i32,
    /// `TensorShapeProto tensor_shape = 2;`
    #[prost(message, optional, tag = "2")]
    pub tensor_shape: Option<TensorShapeProto>,
    /// `bytes tensor_content = 4;` (little-endian elements)
    #[prost(bytes = "vec", tag = "4")]
    pub tensor_content: Vec<u8>,
    /// `repeated float float_val = 5 [packed = true];`
    #[prost(float, repeated, tag = "5")]
    pub float_val: Vec<f32>,
    /// `repeated double double_val = 6 [packed = true];`
    #[prost(double, repeated, tag = "6")]
    pub double_val: Vec<f64>,
    /// `repeated int32 int_val = 7 [packed = true];`
    #[prost(int32, repeated, tag = "7")]
    pub int_val: Vec<i32>,
    /// `repeated int64 int64_val = 10 [packed = true];`
    #[prost(int64, repeated, tag = "10")]
    pub int64_val: Vec<i64>,
    /// `repeated bool bool_val = 11 [packed = true];`
    #[prost(bool, repeated, tag = "11")]
    pub bool_val: Vec<bool>,
}

/// `DataType` values kiln maps (`DT_FLOAT = 1`, …).
pub fn data_type(code: i32) -> Option<kiln_ir::DType> {
    use kiln_ir::DType;
    Some(match code {
        1 => DType::F32,
        2 => DType::F64,
        3 => DType::I32,
        9 => DType::I64,
        10 => DType::Bool,
        _ => return None,
    })
}

/// The `DataType` enum's names, for the text format and messages.
pub const DATA_TYPE_NAMES: &[(&str, i32)] = &[
    ("DT_INVALID", 0),
    ("DT_FLOAT", 1),
    ("DT_DOUBLE", 2),
    ("DT_INT32", 3),
    ("DT_UINT8", 4),
    ("DT_INT16", 5),
    ("DT_INT8", 6),
    ("DT_STRING", 7),
    ("DT_COMPLEX64", 8),
    ("DT_INT64", 9),
    ("DT_BOOL", 10),
    ("DT_QINT8", 11),
    ("DT_QUINT8", 12),
    ("DT_QINT32", 13),
    ("DT_BFLOAT16", 14),
    ("DT_QINT16", 15),
    ("DT_QUINT16", 16),
    ("DT_UINT16", 17),
    ("DT_COMPLEX128", 18),
    ("DT_HALF", 19),
    ("DT_RESOURCE", 20),
    ("DT_VARIANT", 21),
    ("DT_UINT32", 22),
    ("DT_UINT64", 23),
];

/// The name of a `DataType` code.
pub fn data_type_name(code: i32) -> String {
    DATA_TYPE_NAMES
        .iter()
        .find(|(_, c)| *c == code)
        .map_or_else(|| format!("DataType {code}"), |(n, _)| (*n).to_string())
}
