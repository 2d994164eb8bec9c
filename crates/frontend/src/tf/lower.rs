//! GraphDef nodes to kiln's graph, with TensorFlow's meanings.
//!
//! A GraphDef is not topologically sorted: every node is named first, then
//! edges are wired and the nodes ordered (iteratively; a cycle is an error).
//! Inputs are `"node"` (output 0), `"node:k"` (output k) and `"^node"` (a
//! control input: ordering only, no data). `Identity`, `StopGradient`,
//! `NoOp` are transparent. Every unsupported op of the graph is reported at
//! once, as tract's importer does.

use super::proto::{
    attr_value::Value as AV, data_type, data_type_name, GraphDef, NodeDef, TensorProto,
};
use super::Options;
use crate::eltwise::{self, konst};
use crate::layout;
use crate::unsupported::Kind;
use kiln_ir::{
    BinaryOp, Builder, CmpOp, DType, Dim, Graph, Loc, Op, ParseError, ParseResult, Scalar,
    SourceMap, TensorConst, TensorType, Type, TypeError, UnaryOp, Value,
};
use std::collections::HashMap;
use std::sync::Arc;

mod cnn;
mod tensor;

/// Tensor ops kiln's IR has no form for (data-dependent shapes, gathers):
/// reported apart, so the message says what kind they are.
const TENSOR_OPS: &[&str] = &["Shape", "Fill", "Tile", "GatherV2"];

/// How many data inputs an op takes (control inputs aside).
#[derive(Copy, Clone, Debug)]
enum Arity {
    /// Exactly this many.
    Exactly(usize),
    /// One or more (`ConcatV2`, `Pack`, `AddN`).
    Variadic,
    /// Any: a placeholder's default input is not read.
    Placeholder,
}

/// How an op is built from its node and its data inputs; `None` for an op
/// without a result (`NoOp`).
type Build = fn(&mut Tf<'_>, &NodeDef, &[Value]) -> Result<Option<Value>, String>;

/// Every single-result op the importer builds: its names, its arity and how.
/// Adding an op is one line here plus its builder; the unsupported-op report
/// and `Tf::single` both read this table. (The ops with several results are
/// [`MULTI_OPS`].)
const OPS: &[(&[&str], Arity, Build)] = &[
    (&["NoOp"], Arity::Exactly(0), |_, _, _| Ok(None)),
    (
        &["Placeholder", "PlaceholderWithDefault"],
        Arity::Placeholder,
        |tf, n, _| {
            Ok(Some({
                let dtype = attr_type(n, "dtype")?;
                let ty = match (tf.opts.inputs.get(&n.name), tf.opts.shapes.get(&n.name)) {
                    (Some(t), _) => t.clone(),
                    // The data's shape fills in what the attr leaves open; a
                    // fully fixed attr stands (the data must fit it).
                    (None, Some(shape)) => match shape_type(dtype, n) {
                        Ok(t)
                            if t.as_tensor().is_some_and(|t| {
                                t.shape.iter().all(|d| matches!(d, Dim::Fixed(_)))
                            }) =>
                        {
                            t
                        }
                        _ => Type::Tensor(TensorType {
                            dtype,
                            shape: shape.clone(),
                        }),
                    },
                    (None, None) => shape_type(dtype, n)?,
                };
                tf.b.input(&n.name, ty)
            }))
        },
    ),
    (&["Const"], Arity::Exactly(0), |tf, n, _| {
        Ok(Some(
            match n.attr.get("value").and_then(|v| v.value.as_ref()) {
                Some(AV::Tensor(t)) => constant(&mut tf.b, t)?,
                _ => return Err("a Const without a tensor `value`".into()),
            },
        ))
    }),
    (
        &["MatMul", "BatchMatMul", "BatchMatMulV2"],
        Arity::Exactly(2),
        |tf, n, a| Ok(Some(tf.matmul(n, a, n.op.as_str())?)),
    ),
    (
        &["ConcatV2", "Concat", "Pack"],
        Arity::Variadic,
        |tf, n, a| Ok(Some(tf.concat(n, a, n.op.as_str())?)),
    ),
    (&["Slice"], Arity::Exactly(3), |tf, _, a| {
        Ok(Some(tf.slice(a)?))
    }),
    (&["StridedSlice"], Arity::Exactly(4), |tf, n, a| {
        Ok(Some(tf.strided_slice(n, a)?))
    }),
    (&["BroadcastTo"], Arity::Exactly(2), |tf, _, a| {
        Ok(Some(tf.broadcast_to(a)?))
    }),
    (
        &["Sum", "Mean", "Max", "Min", "Prod"],
        Arity::Exactly(2),
        |tf, n, a| Ok(Some(tf.reduction(n, a, n.op.as_str())?)),
    ),
    (&["Reshape"], Arity::Exactly(2), |tf, _, a| {
        Ok(Some(tf.reshape(a)?))
    }),
    (&["Transpose"], Arity::Exactly(2), |tf, _, a| {
        Ok(Some(tf.transpose(a)?))
    }),
    (&["ExpandDims"], Arity::Exactly(2), |tf, _, a| {
        Ok(Some(tf.expand_dims(a)?))
    }),
    (
        &["Conv2D", "DepthwiseConv2dNative"],
        Arity::Exactly(2),
        |tf, n, a| Ok(Some(tf.conv(n, a)?)),
    ),
    (&["MaxPool", "AvgPool"], Arity::Exactly(1), |tf, n, a| {
        Ok(Some(tf.pool(n, a)?))
    }),
    (
        &["FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3"],
        Arity::Exactly(5),
        |tf, n, a| Ok(Some(tf.batch_norm(n, a)?)),
    ),
    (&["Pad"], Arity::Exactly(2), |tf, _, a| Ok(Some(tf.pad(a)?))),
    (&["Squeeze"], Arity::Exactly(1), |tf, n, a| {
        Ok(Some(tf.squeeze(n, a)?))
    }),
    (&["Softmax", "LogSoftmax"], Arity::Exactly(1), |tf, n, a| {
        Ok(Some(tf.softmax(a, n.op.as_str())?))
    }),
    (&["BiasAdd"], Arity::Exactly(2), |tf, n, a| {
        let b = &mut tf.b;
        Ok(Some({
            if let Some(AV::S(format)) = n.attr.get("data_format").and_then(|v| v.value.as_ref()) {
                if format.as_slice() != b"NHWC" {
                    return Err("unsupported: BiasAdd with data_format other than NHWC".into());
                }
            }
            bin(b, a, BinaryOp::Add)?
        }))
    }),
    (
        &["Identity", "StopGradient"],
        Arity::Exactly(1),
        |_, _, a| Ok(Some(a[0])),
    ),
    (&["Add", "AddV2"], Arity::Exactly(2), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(bin(b, a, BinaryOp::Add)?))
    }),
    (&["AddN"], Arity::Variadic, |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some({
            let mut acc = a[0];
            for &x in &a[1..] {
                acc = b.binary(BinaryOp::Add, acc, x).map_err(te)?;
            }
            acc
        }))
    }),
    (&["Sub"], Arity::Exactly(2), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(bin(b, a, BinaryOp::Sub)?))
    }),
    (&["Mul"], Arity::Exactly(2), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(bin(b, a, BinaryOp::Mul)?))
    }),
    (&["RealDiv", "Div"], Arity::Exactly(2), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(bin(b, a, BinaryOp::Div)?))
    }),
    (&["DivNoNan"], Arity::Exactly(2), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some({
            let q = bin(b, a, BinaryOp::Div)?;
            let zero = konst(b, dt(b, a[1]), 0.0);
            let is_zero = b.compare(CmpOp::Eq, a[1], zero).map_err(te)?;
            b.select(is_zero, zero, q).map_err(te)?
        }))
    }),
    // TF floors float division as floor(x / y), not Python's divmod.
    (&["FloorDiv"], Arity::Exactly(2), |tf, _, a| {
        let b = &mut tf.b;
        if dt(b, a[0]).is_float() {
            Ok(Some({
                let q = bin(b, a, BinaryOp::Div)?;
                b.unary(UnaryOp::Floor, q).map_err(te)?
            }))
        } else {
            Ok(Some(bin(b, a, BinaryOp::FloorDiv)?))
        }
    }),
    (&["FloorMod"], Arity::Exactly(2), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(bin(b, a, BinaryOp::Mod)?))
    }),
    (&["TruncateDiv"], Arity::Exactly(2), |tf, _, a| {
        let b = &mut tf.b;
        if dt(b, a[0]).is_float() {
            Ok(Some({
                let q = bin(b, a, BinaryOp::Div)?;
                b.unary(UnaryOp::Trunc, q).map_err(te)?
            }))
        } else {
            Ok(Some(bin(b, a, BinaryOp::Div)?))
        }
    }),
    (&["TruncateMod", "Mod"], Arity::Exactly(2), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(bin(b, a, BinaryOp::Rem)?))
    }),
    (&["Neg"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(un(b, a, UnaryOp::Neg)?))
    }),
    (&["Abs"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(un(b, a, UnaryOp::Abs)?))
    }),
    (&["Square"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(eltwise::square(b, a[0]).map_err(te)?))
    }),
    (&["SquaredDifference"], Arity::Exactly(2), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some({
            let d = bin(b, a, BinaryOp::Sub)?;
            eltwise::square(b, d).map_err(te)?
        }))
    }),
    (&["Sqrt"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(un(b, a, UnaryOp::Sqrt)?))
    }),
    (&["Rsqrt"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(eltwise::rsqrt(b, a[0]).map_err(te)?))
    }),
    (&["Reciprocal", "Inv"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(eltwise::reciprocal(b, a[0]).map_err(te)?))
    }),
    (&["Exp"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(un(b, a, UnaryOp::Exp)?))
    }),
    (&["Expm1"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(un(b, a, UnaryOp::Expm1)?))
    }),
    (&["Log"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(un(b, a, UnaryOp::Log)?))
    }),
    (&["Log1p"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(un(b, a, UnaryOp::Log1p)?))
    }),
    (&["Sin"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(un(b, a, UnaryOp::Sin)?))
    }),
    (&["Cos"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(un(b, a, UnaryOp::Cos)?))
    }),
    (&["Tan"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(un(b, a, UnaryOp::Tan)?))
    }),
    (&["Asin"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(un(b, a, UnaryOp::Asin)?))
    }),
    (&["Acos"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(un(b, a, UnaryOp::Acos)?))
    }),
    (&["Atan"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(un(b, a, UnaryOp::Atan)?))
    }),
    (&["Atan2"], Arity::Exactly(2), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(bin(b, a, BinaryOp::Atan2)?))
    }),
    (&["Sinh"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(un(b, a, UnaryOp::Sinh)?))
    }),
    (&["Cosh"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(un(b, a, UnaryOp::Cosh)?))
    }),
    (&["Tanh"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(un(b, a, UnaryOp::Tanh)?))
    }),
    (&["Erf"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(un(b, a, UnaryOp::Erf)?))
    }),
    (&["Erfc"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(un(b, a, UnaryOp::Erfc)?))
    }),
    (&["Floor"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(un(b, a, UnaryOp::Floor)?))
    }),
    (&["Ceil"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(un(b, a, UnaryOp::Ceil)?))
    }),
    (&["Round", "Rint"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(un(b, a, UnaryOp::Round)?))
    }),
    (&["Sign"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some({
            let d = dt(b, a[0]);
            let zero = konst(b, d, 0.0);
            let one = konst(b, d, 1.0);
            let minus = konst(b, d, -1.0);
            let pos = b.compare(CmpOp::Gt, a[0], zero).map_err(te)?;
            let neg = b.compare(CmpOp::Lt, a[0], zero).map_err(te)?;
            let s = b.select(neg, minus, a[0]).map_err(te)?;
            // Zero and NaN stay themselves.
            b.select(pos, one, s).map_err(te)?
        }))
    }),
    (&["Sigmoid"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(eltwise::sigmoid(b, a[0]).map_err(te)?))
    }),
    (&["Relu"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(eltwise::relu(b, a[0]).map_err(te)?))
    }),
    (&["Relu6"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(
            eltwise::clamp(b, a[0], Some(0.0), Some(6.0)).map_err(te)?,
        ))
    }),
    (&["Elu"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(eltwise::elu(b, a[0], 1.0, 1.0).map_err(te)?))
    }),
    (&["Selu"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(
            eltwise::elu(b, a[0], 1.673_263_242_354_377_3, 1.050_700_987_355_480_5).map_err(te)?,
        ))
    }),
    (&["Softplus"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(
            eltwise::softplus(b, a[0], 1.0, f64::INFINITY).map_err(te)?,
        ))
    }),
    (&["Softsign"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some({
            let abs = b.unary(UnaryOp::Abs, a[0]).map_err(te)?;
            let one = konst(b, dt(b, a[0]), 1.0);
            let den = b.binary(BinaryOp::Add, one, abs).map_err(te)?;
            b.binary(BinaryOp::Div, a[0], den).map_err(te)?
        }))
    }),
    (&["LeakyRelu"], Arity::Exactly(1), |tf, n, a| {
        let b = &mut tf.b;
        Ok(Some({
            let alpha = attr_float(n, "alpha", 0.2)?;
            eltwise::leaky_relu(b, a[0], alpha).map_err(te)?
        }))
    }),
    (&["Pow"], Arity::Exactly(2), |tf, _, a| {
        let b = &mut tf.b;
        if dt(b, a[0]).is_float() {
            Ok(Some(bin(b, a, BinaryOp::Pow)?))
        } else {
            Err("unsupported: integer Pow".into())
        }
    }),
    (&["Maximum"], Arity::Exactly(2), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(bin(b, a, BinaryOp::Max)?))
    }),
    (&["Minimum"], Arity::Exactly(2), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(bin(b, a, BinaryOp::Min)?))
    }),
    (&["Greater"], Arity::Exactly(2), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(cmp(b, a, CmpOp::Gt)?))
    }),
    (&["GreaterEqual"], Arity::Exactly(2), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(cmp(b, a, CmpOp::Ge)?))
    }),
    (&["Less"], Arity::Exactly(2), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(cmp(b, a, CmpOp::Lt)?))
    }),
    (&["LessEqual"], Arity::Exactly(2), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(cmp(b, a, CmpOp::Le)?))
    }),
    (&["Equal"], Arity::Exactly(2), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(cmp(b, a, CmpOp::Eq)?))
    }),
    (&["NotEqual"], Arity::Exactly(2), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(cmp(b, a, CmpOp::Ne)?))
    }),
    (&["LogicalAnd"], Arity::Exactly(2), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(bin(b, a, BinaryOp::And)?))
    }),
    (&["LogicalOr"], Arity::Exactly(2), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(bin(b, a, BinaryOp::Or)?))
    }),
    (&["LogicalNot"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(un(b, a, UnaryOp::Not)?))
    }),
    (&["Select", "SelectV2"], Arity::Exactly(3), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(b.select(a[0], a[1], a[2]).map_err(te)?))
    }),
    (&["Cast"], Arity::Exactly(1), |tf, n, a| {
        let b = &mut tf.b;
        Ok(Some({
            let to = attr_type(n, "DstT")?;
            if dt(b, a[0]) == to {
                a[0]
            } else {
                b.cast(a[0], to).map_err(te)?
            }
        }))
    }),
    (&["BitwiseAnd"], Arity::Exactly(2), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(bin(b, a, BinaryOp::BAnd)?))
    }),
    (&["BitwiseOr"], Arity::Exactly(2), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(bin(b, a, BinaryOp::BOr)?))
    }),
    (&["BitwiseXor"], Arity::Exactly(2), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(bin(b, a, BinaryOp::BXor)?))
    }),
    (&["Invert"], Arity::Exactly(1), |tf, _, a| {
        let b = &mut tf.b;
        Ok(Some(un(b, a, UnaryOp::BNot)?))
    }),
    (
        &["LeftShift", "RightShift"],
        Arity::Exactly(2),
        |tf, n, a| {
            let b = &mut tf.b;
            Ok(Some({
                // TF clamps the amount to [0, width - 1]; kiln's shifts take
                // it modulo the width, so clamp first.
                let d = dt(b, a[0]);
                let bits = (d.size_bytes() * 8) as f64;
                let amount = eltwise::clamp(b, a[1], Some(0.0), Some(bits - 1.0)).map_err(te)?;
                let o = if n.op.as_str() == "LeftShift" {
                    BinaryOp::Shl
                } else {
                    BinaryOp::ShrArith
                };
                b.binary(o, a[0], amount).map_err(te)?
            }))
        },
    ),
];

/// Ops with several results, taken apart by `name:k` references.
const MULTI_OPS: &[&str] = &["Split", "SplitV", "Unpack"];

/// The arity and builder of op `name`.
fn op_entry(name: &str) -> Option<(Arity, Build)> {
    OPS.iter()
        .find(|(names, ..)| names.contains(&name))
        .map(|&(_, arity, build)| (arity, build))
}

/// True when the importer builds op `name`.
fn supported(name: &str) -> bool {
    op_entry(name).is_some() || MULTI_OPS.contains(&name)
}

fn dt(b: &Builder, v: Value) -> DType {
    eltwise::dtype(b, v)
}

fn bin(b: &mut Builder, a: &[Value], o: BinaryOp) -> Result<Value, String> {
    b.binary(o, a[0], a[1]).map_err(te)
}

fn cmp(b: &mut Builder, a: &[Value], o: CmpOp) -> Result<Value, String> {
    b.compare(o, a[0], a[1]).map_err(te)
}

fn un(b: &mut Builder, a: &[Value], o: UnaryOp) -> Result<Value, String> {
    b.unary(o, a[0]).map_err(te)
}

/// Where a node is in the source, for messages: the `name: "…"` line of a
/// `.pbtxt`, or nowhere for a binary `.pb`.
fn locate(src: Option<&str>, name: &str) -> Loc {
    src.and_then(|s| {
        let needle = format!("name: \"{name}\"");
        s.find(&needle).map(|at| Loc::of_offset(s, at))
    })
    .unwrap_or(Loc { line: 1, col: 1 })
}

fn fail(src: Option<&str>, node: &str, message: String) -> ParseError {
    ParseError {
        loc: locate(src, node),
        message,
    }
}

/// An input reference: `"node"`, `"node:k"` or `"^node"`.
fn split_input(input: &str) -> (Option<(&str, usize)>, bool) {
    if let Some(ctrl) = input.strip_prefix('^') {
        return (Some((ctrl, 0)), true);
    }
    match input.rsplit_once(':') {
        Some((node, k)) => match k.parse() {
            Ok(k) => (Some((node, k)), false),
            Err(_) => (None, false),
        },
        None => (Some((input, 0)), false),
    }
}

/// Lowers `g` (`src` is the `.pbtxt` text, for locations).
pub fn lower(g: &GraphDef, src: Option<&str>, opts: &Options) -> ParseResult<(Graph, SourceMap)> {
    let mut index: HashMap<&str, usize> = HashMap::new();
    for (i, n) in g.node.iter().enumerate() {
        if n.name.is_empty() {
            return Err(fail(
                src,
                "",
                format!("node {i} (op `{}`) has no name", n.op),
            ));
        }
        if index.insert(&n.name, i).is_some() {
            return Err(fail(
                src,
                &n.name,
                format!("duplicate node name `{}`", n.name),
            ));
        }
    }
    // Wire: data edges (node index, output k) and control edges.
    let mut data: Vec<Vec<(usize, usize)>> = Vec::with_capacity(g.node.len());
    let mut deps: Vec<Vec<usize>> = Vec::with_capacity(g.node.len());
    let mut consumed = vec![false; g.node.len()];
    for n in &g.node {
        let (mut d, mut all) = (Vec::new(), Vec::new());
        for input in &n.input {
            let (Some((name, k)), control) = split_input(input) else {
                return Err(fail(
                    src,
                    &n.name,
                    format!("node `{}`: bad input reference `{input}`", n.name),
                ));
            };
            let Some(&j) = index.get(name) else {
                return Err(fail(
                    src,
                    &n.name,
                    format!(
                        "node `{}` reads `{input}`, but there is no node `{name}`",
                        n.name
                    ),
                ));
            };
            all.push(j);
            if !control {
                d.push((j, k));
                consumed[j] = true;
            }
        }
        data.push(d);
        deps.push(all);
    }
    let order = topological_order(g, &deps).map_err(|i| {
        fail(
            src,
            &g.node[i].name,
            format!("the graph has a cycle through node `{}`", g.node[i].name),
        )
    })?;
    check_supported(g, src)?;
    let mut lw = Tf {
        b: Builder::new("graph"),
        values: vec![Vec::new(); g.node.len()],
        opts,
    };
    let mut source_map = SourceMap::default();
    for &i in &order {
        let n = &g.node[i];
        let args: Vec<Value> = data[i]
            .iter()
            .map(|&(j, k)| output_of(&lw.values[j], &g.node[j].name, k))
            .collect::<Result<_, _>>()
            .map_err(|m| fail(src, &n.name, format!("node `{}` ({}): {m}", n.name, n.op)))?;
        let vs = lw
            .node(n, &args)
            .map_err(|m| fail(src, &n.name, format!("node `{}` ({}): {m}", n.name, n.op)))?;
        for (k, &v) in vs.iter().enumerate() {
            let name = match k {
                0 => n.name.clone(),
                k => format!("{}:{k}", n.name),
            };
            lw.b.set_source_name(v, &name);
            source_map.set(v, locate(src, &n.name));
        }
        lw.values[i] = vs;
    }
    // By default every output of every node nothing reads: `split`,
    // `split:1`, ... for a node with several.
    let outputs: Vec<String> = if opts.outputs.is_empty() {
        g.node
            .iter()
            .enumerate()
            .filter(|(i, n)| {
                !consumed[*i] && !matches!(n.op.as_str(), "NoOp" | "Const" | "Placeholder")
            })
            .flat_map(|(i, n)| {
                (0..lw.values[i].len().max(1)).map(move |k| match k {
                    0 => n.name.clone(),
                    k => format!("{}:{k}", n.name),
                })
            })
            .collect()
    } else {
        opts.outputs.clone()
    };
    if outputs.is_empty() {
        return Err(fail(
            src,
            "",
            "the graph has no outputs (name them with --output)".into(),
        ));
    }
    for out in &outputs {
        let (Some((name, k)), false) = split_input(out) else {
            return Err(fail(src, "", format!("bad output name `{out}`")));
        };
        let Some(&j) = index.get(name) else {
            return Err(fail(
                src,
                "",
                format!("output `{out}`: there is no node `{name}`"),
            ));
        };
        let v = output_of(&lw.values[j], name, k)
            .map_err(|m| fail(src, name, format!("output `{out}`: {m}")))?;
        lw.b.output(out, v);
    }
    Ok((lw.b.finish(), source_map))
}

/// Output `k` of node `name`, whose values are `values`.
fn output_of(values: &[Value], name: &str, k: usize) -> Result<Value, String> {
    match (values.get(k), values.len()) {
        (Some(v), _) => Ok(*v),
        (None, 0) => Err(format!("reads `{name}`, which has no value")),
        (None, n) => Err(format!(
            "reads output {k} of `{name}`, which has {n} output(s)"
        )),
    }
}

/// Kahn's algorithm over all edges; `Err(node)` names a node on a cycle.
fn topological_order(g: &GraphDef, deps: &[Vec<usize>]) -> Result<Vec<usize>, usize> {
    let n = g.node.len();
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut pending: Vec<usize> = vec![0; n];
    for (i, d) in deps.iter().enumerate() {
        for &j in d {
            users[j].push(i);
            pending[i] += 1;
        }
    }
    let mut ready: Vec<usize> = (0..n).rev().filter(|&i| pending[i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(i) = ready.pop() {
        order.push(i);
        for &u in users[i].iter().rev() {
            pending[u] -= 1;
            if pending[u] == 0 {
                ready.push(u);
            }
        }
    }
    match (0..n).find(|&i| pending[i] > 0) {
        Some(i) => Err(i),
        None => Ok(order),
    }
}

fn check_supported(g: &GraphDef, src: Option<&str>) -> ParseResult<()> {
    let mut unknown = Vec::new();
    let mut tensor = Vec::new();
    for n in &g.node {
        if TENSOR_OPS.contains(&n.op.as_str()) {
            tensor.push(format!("{} (`{}`)", n.op, n.name));
        } else if !supported(&n.op) {
            unknown.push(format!("{} (`{}`)", n.op, n.name));
        }
    }
    let Some(message) = crate::unsupported::message(&[
        Kind {
            label: "ops",
            ops: unknown,
            note: "",
        },
        Kind {
            label: "tensor ops",
            ops: tensor,
            note: "(data-dependent shapes, gathers and convolutions have no form in kiln's IR)",
        },
    ]) else {
        return Ok(());
    };
    let first = g
        .node
        .iter()
        .find(|n| !supported(&n.op))
        .map_or("", |n| n.name.as_str());
    Err(fail(src, first, message))
}

struct Tf<'a> {
    b: Builder,
    /// Each node's outputs, in order; none for `NoOp`.
    values: Vec<Vec<Value>>,
    opts: &'a Options,
}

fn te(e: TypeError) -> String {
    e.message
}

fn attr_type(n: &NodeDef, key: &str) -> Result<DType, String> {
    match n.attr.get(key).and_then(|a| a.value.as_ref()) {
        Some(AV::Type(code)) => data_type(*code).ok_or_else(|| {
            format!(
                "unsupported dtype {} (bool, int32, int64, float, double)",
                data_type_name(*code)
            )
        }),
        Some(_) => Err(format!("attr `{key}` must be a type")),
        None => Err(format!("missing attr `{key}`")),
    }
}

fn attr_float(n: &NodeDef, key: &str, default: f64) -> Result<f64, String> {
    match n.attr.get(key).and_then(|a| a.value.as_ref()) {
        Some(AV::F(f)) => Ok(f64::from(*f)),
        None => Ok(default),
        Some(_) => Err(format!("attr `{key}` must be a float")),
    }
}

/// The kiln type of a `shape` attr: `[]` a scalar, one dimension a column
/// `[n]` (any length), more a tensor (not yet supported).
fn shape_type(dtype: DType, n: &NodeDef) -> Result<Type, String> {
    let dims = match n.attr.get("shape").and_then(|a| a.value.as_ref()) {
        Some(AV::Shape(s)) if s.unknown_rank => {
            return Err(
                "a placeholder of unknown rank needs a type (--input NAME:DTYPE[SHAPE])".into(),
            )
        }
        Some(AV::Shape(s)) => s.dim.iter().map(|d| d.size).collect::<Vec<i64>>(),
        Some(_) => return Err("attr `shape` must be a shape".into()),
        None => {
            return Err(
                "a placeholder without a shape needs a type (--input NAME:DTYPE[SHAPE])".into(),
            )
        }
    };
    // Fixed sizes stay fixed (a `Split` of a `[4]` placeholder knows its
    // halves); a leading -1 (TF's batch dimension) is the symbolic `n`.
    let shape = match dims.as_slice() {
        [] => vec![],
        dims => dims
            .iter()
            .enumerate()
            .map(|(axis, &d)| match d {
                d if d >= 0 => Ok(Dim::Fixed(d as u64)),
                _ if axis == 0 => Ok(Dim::Sym("n".into())),
                _ => Err(format!(
                    "placeholder dimension {axis} is unknown; only the first may be (give the type with --input NAME:DTYPE[SHAPE])"
                )),
            })
            .collect::<Result<_, _>>()?,
    };
    Ok(Type::Tensor(TensorType { dtype, shape }))
}

/// The integers of a constant int scalar or vector input (shapes, axes).
fn const_ints(b: &Builder, v: Value) -> Result<Vec<i64>, String> {
    match &b.graph().node(v).op {
        Op::Const(Scalar::I32(k)) => Ok(vec![i64::from(*k)]),
        Op::Const(Scalar::I64(k)) => Ok(vec![*k]),
        Op::Tensor(t) => t
            .values
            .iter()
            .map(|s| match s {
                Scalar::I32(k) => Ok(i64::from(*k)),
                Scalar::I64(k) => Ok(*k),
                _ => Err("expected int constants".to_string()),
            })
            .collect(),
        _ => Err("unsupported: a shape or axis input that is not a constant".into()),
    }
}

/// One axis from a constant int input (negative from the end).
fn const_axis(b: &Builder, v: Value, rank: usize) -> Result<usize, String> {
    match const_ints(b, v)?.as_slice() {
        [k] => layout::axis(*k, rank),
        other => Err(format!("an axis input holds {other:?}, not one int")),
    }
}

/// The axes a reduction's second input names: a constant int scalar or
/// vector, negative counting from the end; ascending, without repeats.
fn const_axes(b: &Builder, v: Value, rank: usize) -> Result<Vec<u32>, String> {
    let values = const_ints(b, v)?;
    let r = rank as i64;
    let mut axes = values
        .into_iter()
        .map(|k| {
            let a = if k < 0 { k + r } else { k };
            if (0..r).contains(&a) {
                Ok(a as u32)
            } else {
                Err(format!(
                    "reduction index {k} is out of range for rank {rank}"
                ))
            }
        })
        .collect::<Result<Vec<u32>, String>>()?;
    axes.sort_unstable();
    axes.dedup();
    Ok(axes)
}

/// A constant: a scalar when it has one element and no dimension above 1,
/// else a tensor constant of its shape.
fn constant(b: &mut Builder, t: &TensorProto) -> Result<Value, String> {
    let dims: Vec<u64> = t
        .tensor_shape
        .iter()
        .flat_map(|s| &s.dim)
        .map(|d| {
            u64::try_from(d.size).map_err(|_| "a constant has an unknown dimension".to_string())
        })
        .collect::<Result<_, _>>()?;
    let count = dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or("a constant's declared size overflows")?;
    if count == 1 && dims.len() <= 1 {
        return Ok(b.constant(const_scalar(t)?));
    }
    let dtype = data_type(t.dtype)
        .ok_or_else(|| format!("unsupported constant dtype {}", data_type_name(t.dtype)))?;
    let values = const_values(t, dtype, count)?;
    b.op(
        Op::Tensor(Arc::new(TensorConst {
            dtype,
            dims,
            values,
        })),
        &[],
    )
    .map_err(te)
}

/// The `count` elements of a constant, from `tensor_content` or the typed
/// `*_val` list (one value repeats, as TF fills it).
fn const_values(t: &TensorProto, dtype: DType, count: u64) -> Result<Vec<Scalar>, String> {
    let size = dtype.size_bytes() as u64;
    let content = &t.tensor_content;
    if !content.is_empty() {
        if content.len() as u64 != count.saturating_mul(size) {
            return Err(format!(
                "tensor_content has {} bytes, not {count} × {size}",
                content.len()
            ));
        }
        return Ok(content
            .chunks_exact(size as usize)
            .map(|c| Scalar::from_le_bytes(dtype, c).expect("one element"))
            .collect());
    }
    let listed: Vec<Scalar> = match dtype {
        DType::Bool => t.bool_val.iter().map(|&v| Scalar::Bool(v)).collect(),
        DType::I32 => t.int_val.iter().map(|&v| Scalar::I32(v)).collect(),
        DType::I64 => t.int64_val.iter().map(|&v| Scalar::I64(v)).collect(),
        DType::F32 => t.float_val.iter().map(|&v| Scalar::F32(v)).collect(),
        DType::F64 => t.double_val.iter().map(|&v| Scalar::F64(v)).collect(),
    };
    match listed.len() as u64 {
        n if n == count => Ok(listed),
        1 if count <= 1 << 28 => Ok(vec![listed[0]; count as usize]),
        n => Err(format!("a constant of {count} elements lists {n} values")),
    }
}

/// The single value of a constant tensor whose elements are all one value
/// (`shape` [], [1], [1, 1], …); larger constants need tensors.
fn const_scalar(t: &TensorProto) -> Result<Scalar, String> {
    let dtype = data_type(t.dtype)
        .ok_or_else(|| format!("unsupported constant dtype {}", data_type_name(t.dtype)))?;
    let mut count: u64 = 1;
    for d in t.tensor_shape.iter().flat_map(|s| &s.dim) {
        if d.size < 0 {
            return Err("a constant has an unknown dimension".into());
        }
        count = count
            .checked_mul(d.size as u64)
            .ok_or("a constant's declared size overflows")?;
    }
    if count != 1 {
        return Err(format!("a scalar constant has {count} elements"));
    }
    let content = &t.tensor_content;
    if !content.is_empty() {
        return Scalar::from_le_bytes(dtype, content).ok_or_else(|| {
            format!(
                "tensor_content has {} bytes, not {}",
                content.len(),
                dtype.size_bytes()
            )
        });
    }
    let missing = || format!("a {} constant without a value", dtype.name());
    Ok(match dtype {
        DType::Bool => Scalar::Bool(*t.bool_val.first().ok_or_else(missing)?),
        DType::I32 => Scalar::I32(*t.int_val.first().ok_or_else(missing)?),
        DType::I64 => Scalar::I64(*t.int64_val.first().ok_or_else(missing)?),
        DType::F32 => Scalar::F32(*t.float_val.first().ok_or_else(missing)?),
        DType::F64 => Scalar::F64(*t.double_val.first().ok_or_else(missing)?),
    })
}

impl Tf<'_> {
    /// A node's outputs: several for `Split`, `SplitV`, `Unpack`.
    fn node(&mut self, n: &NodeDef, a: &[Value]) -> Result<Vec<Value>, String> {
        let b = &mut self.b;
        let rank = |b: &Builder, v: Value| layout::shape(b, v).len();
        let int_attr = |key: &str| match n.attr.get(key).and_then(|v| v.value.as_ref()) {
            Some(AV::I(k)) => Ok(Some(*k)),
            None => Ok(None),
            Some(_) => Err(format!("attr `{key}` must be an int")),
        };
        let pieces = match (n.op.as_str(), a) {
            ("Split", [axis, v]) => {
                let axis = const_axis(b, *axis, rank(b, *v))?;
                let count = int_attr("num_split")?.ok_or("missing attr `num_split`")?;
                let extent = layout::fixed_extent(b, *v, axis)?;
                if count <= 0 || extent % count as u64 != 0 {
                    return Err(format!(
                        "Split of extent {extent} into {count} equal pieces"
                    ));
                }
                let sizes = vec![extent / count as u64; count as usize];
                layout::split(b, *v, axis, &sizes)?
            }
            ("SplitV", [v, sizes, axis]) => {
                let axis = const_axis(b, *axis, rank(b, *v))?;
                let extent = layout::fixed_extent(b, *v, axis)?;
                let wanted = const_ints(b, *sizes)?;
                let known: i64 = wanted.iter().filter(|&&s| s >= 0).sum();
                let sizes = wanted
                    .iter()
                    .map(|&s| match s {
                        -1 if wanted.iter().filter(|&&x| x == -1).count() == 1 => {
                            u64::try_from(extent as i64 - known).map_err(|_| {
                                format!("SplitV sizes {wanted:?} exceed the extent {extent}")
                            })
                        }
                        s => u64::try_from(s).map_err(|_| format!("SplitV size {s}")),
                    })
                    .collect::<Result<Vec<u64>, String>>()?;
                layout::split(b, *v, axis, &sizes)?
            }
            ("Unpack", [v]) => {
                let axis = layout::axis(int_attr("axis")?.unwrap_or(0), rank(b, *v))?;
                layout::unstack(b, *v, axis)?
            }
            ("Split" | "SplitV" | "Unpack", _) => {
                return Err(format!("takes its data inputs, got {}", a.len()))
            }
            _ => return Ok(self.single(n, a)?.into_iter().collect()),
        };
        Ok(pieces)
    }

    fn single(&mut self, n: &NodeDef, a: &[Value]) -> Result<Option<Value>, String> {
        let (arity, build) = op_entry(&n.op).ok_or_else(|| format!("unsupported op `{}`", n.op))?;
        let want = match arity {
            Arity::Exactly(k) => k,
            Arity::Variadic => a.len().max(1),
            Arity::Placeholder => a.len(),
        };
        if a.len() != want {
            return Err(format!("takes {want} data input(s), got {}", a.len()));
        }
        build(self, n, a)
    }
}
