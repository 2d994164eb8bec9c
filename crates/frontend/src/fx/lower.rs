//! torch.fx nodes to kiln's graph, with torch's meanings: type promotion
//! (Python numbers are "weak": `f32_tensor * 2` stays `f32`; int / int is
//! `float32`, torch's default dtype), `//` and `%` floor, relu and clamp let NaN
//! through, integer `pow` and shifts as torch computes them.
//!
//! Every target is normalized to one op name first (`operator.add`,
//! `torch.add`, `Tensor.add`, `torch.ops.aten.add.Tensor`, `add_`,
//! `<built-in function add>` are all `add`), and every unsupported op of the
//! graph is reported at once.

use super::text::{Arg, FxGraph, Node};
use super::Options;
use crate::eltwise::{self, konst, EResult};
use crate::layout;
use crate::unsupported::Kind;
use kiln_ir::{
    BinaryOp, Builder, CmpOp, DType, Dim, Graph, Loc, Op, ParseError, ParseResult, Scalar,
    SourceMap, TensorConst, TypeError, UnaryOp, Value,
};
use std::collections::HashMap;
use std::sync::Arc;

mod cnn;
mod loss;
mod nn;
mod tensor;

/// Tensor ops kiln does not import (data-dependent shapes, arg-reductions,
/// layer norm, training-mode dropout): reported apart, as such.
const TENSOR_OPS: &[&str] = &[
    "size",
    "max_dim",
    "argmax",
    "argmin",
    "layer_norm",
    "dropout",
];

/// An operand: a graph value, or a Python number (weak in promotion).
#[derive(Copy, Clone, Debug)]
enum Operand {
    Tensor(Value),
    Int(i64),
    Float(f64),
    Bool(bool),
}

/// Normalizes an fx target to an op name: `operator.add` → `add`,
/// `torch.ops.aten.relu.default` → `relu`, `torch.nn.functional.silu` →
/// `silu`, `add_` → `add`, `<built-in function mul>` → `mul`.
pub fn op_name(kind: &str, target: &str) -> String {
    let mut t = target.trim();
    if let Some(rest) = t.strip_prefix("<built-in function ") {
        t = rest.trim_end_matches('>');
    } else if let Some(rest) = t.strip_prefix("<built-in method ") {
        t = rest.split_whitespace().next().unwrap_or(rest);
    }
    let name = if let Some(rest) = t.strip_prefix("torch.ops.aten.") {
        rest.split('.').next().unwrap_or(rest)
    } else if let Some(rest) = t.strip_prefix("torch.ops.prims.") {
        // A primitive keeps its namespace: `prims.convert_element_type`
        // (torch's decompositions write it with symbolic sizes).
        return format!("prims.{}", rest.split('.').next().unwrap_or(rest));
    } else if kind == "call_module" {
        t
    } else {
        t.rsplit('.').next().unwrap_or(t)
    };
    let name = name.trim_start_matches("__").trim_end_matches("__");
    let name = name.strip_suffix('_').unwrap_or(name);
    match name {
        "and" | "or" | "xor" | "not" => format!("{name}_"),
        _ => name.to_string(),
    }
}

/// Ops with several results (a tuple `getitem` takes apart).
const MULTI_OPS: &[&str] = &[
    "split",
    "split_with_sizes",
    "chunk",
    "unbind",
    "var_mean",
    "std_mean",
    "convolution_backward",
    "max_pool2d_with_indices",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention_for_cpu_backward",
    "nll_loss_forward",
    "nll_loss2d_forward",
];

/// Ops whose result is a tuple of which kiln computes the first item only
/// (the others are training statistics no inference graph uses): the op, the tuple's length in torch, what the
/// other items are, and the builder of the first.
const PARTIAL_TUPLE_OPS: &[(&str, i64, &str, Build)] = &[
    (
        "native_batch_norm",
        3,
        "a batch norm's saved statistics",
        |this, op, node| this.batch_norm(op, node),
    ),
    (
        "_native_batch_norm_legit_no_training",
        3,
        "a batch norm's saved statistics",
        |this, op, node| this.batch_norm(op, node),
    ),
];

/// The entry of [`PARTIAL_TUPLE_OPS`] for op `name`.
fn partial_tuple_op(name: &str) -> Option<&'static (&'static str, i64, &'static str, Build)> {
    PARTIAL_TUPLE_OPS.iter().find(|(op, ..)| *op == name)
}

/// How an op is built: from the lowering, the op's name (one builder serves
/// several spellings) and the node.
type Build = fn(&mut Fx<'_>, &str, &Node) -> Result<Value, String>;

/// Every op the importer builds, by its names (after [`op_name`]), and how:
/// adding an op is one line here plus its builder. The unsupported-op report
/// and `Fx::call` both read this table, so they cannot disagree.
/// (Ops with several results, [`MULTI_OPS`], are taken apart by `getitem`.)
const OPS: &[(&[&str], Build)] = &[
    (
        &[
            "matmul",
            "mm",
            "bmm",
            "addmm",
            "linear",
            "linear_module",
            "t",
            "transpose",
            "permute",
            "reshape",
            "view",
            "_unsafe_view",
            "flatten",
            "unsqueeze",
            "squeeze",
        ],
        |this, op, node| this.tensor_op(op, node),
    ),
    (
        &[
            "cat",
            "concat",
            "concatenate",
            "stack",
            "expand",
            "broadcast_to",
            "narrow",
            "slice",
            "select",
            "getitem",
        ],
        |this, op, node| this.layout_op(op, node),
    ),
    (&["conv2d", "convolution"], |this, op, node| {
        this.conv(op, node)
    }),
    (&["batch_norm"], |this, op, node| this.batch_norm(op, node)),
    (&["max_pool2d", "avg_pool2d"], |this, op, node| {
        this.pool(op, node)
    }),
    (
        &["max_pool2d_with_indices_backward", "avg_pool2d_backward"],
        |this, op, node| this.pool_backward(op, node),
    ),
    (
        &["adaptive_avg_pool2d", "_adaptive_avg_pool2d"],
        |this, _, node| this.adaptive_avg_pool(node),
    ),
    (
        &["sum", "mean", "amax", "amin", "prod"],
        |this, op, node| this.reduction(op, node),
    ),
    // ATen's `_softmax(x, dim, half_to_float)` computes the same.
    (&["softmax", "_softmax"], |this, _, node| {
        this.softmax(false, node)
    }),
    (&["log_softmax", "_log_softmax"], |this, _, node| {
        this.softmax(true, node)
    }),
    (&["expand_as", "view_as", "reshape_as"], |this, op, node| {
        Ok({
            let x = this.tensor_at(node, 0, "input")?;
            let other = this.tensor_at(node, 1, "other")?;
            let shape = this.shape_of(other);
            if op == "expand_as" {
                layout::broadcast_to(&mut this.b, x, shape)?
            } else {
                this.reshape(x, shape)?
            }
        })
    }),
    (&["add", "sub", "subtract", "rsub"], |this, op, node| {
        this.add_sub(op, node)
    }),
    (&["mul", "multiply"], |this, _, node| {
        this.binary(node, BinaryOp::Mul)
    }),
    (
        &["truediv", "div", "divide", "true_divide"],
        |this, _, node| this.divide(node),
    ),
    (&["floordiv", "floor_divide"], |this, _, node| {
        this.binary(node, BinaryOp::FloorDiv)
    }),
    (&["mod", "remainder"], |this, _, node| {
        this.binary(node, BinaryOp::Mod)
    }),
    (&["fmod"], |this, _, node| this.binary(node, BinaryOp::Rem)),
    (&["pow"], |this, _, node| this.pow(node)),
    (&["neg", "negative"], |this, _, node| {
        Ok({
            let x = this.operand_at(node, 0, "input")?;
            let d = this.result_type(&[x]);
            let x = this.tensor(x, d)?;
            this.b.unary(UnaryOp::Neg, x).map_err(te)?
        })
    }),
    (
        &[
            "pos",
            "positive",
            "alias",
            "clone",
            "contiguous",
            "detach",
            "identity",
            "dropout_eval",
            "lift_fresh_copy",
        ],
        |this, _, node| {
            Ok({
                let x = this.operand_at(node, 0, "input")?;
                let d = this.result_type(&[x]);
                this.tensor(x, d)?
            })
        },
    ),
    (&["abs", "absolute"], |this, _, node| {
        Ok({
            let x = this.operand_at(node, 0, "input")?;
            let d = this.result_type(&[x]);
            let x = this.tensor(x, d)?;
            this.b.unary(UnaryOp::Abs, x).map_err(te)?
        })
    }),
    (&["gt", "greater"], |this, _, node| {
        this.compare(node, CmpOp::Gt)
    }),
    (&["lt", "less"], |this, _, node| {
        this.compare(node, CmpOp::Lt)
    }),
    (&["ge", "greater_equal"], |this, _, node| {
        this.compare(node, CmpOp::Ge)
    }),
    (&["le", "less_equal"], |this, _, node| {
        this.compare(node, CmpOp::Le)
    }),
    (&["eq", "equal"], |this, _, node| {
        this.compare(node, CmpOp::Eq)
    }),
    (&["ne", "not_equal"], |this, _, node| {
        this.compare(node, CmpOp::Ne)
    }),
    (
        &[
            "and_",
            "or_",
            "xor_",
            "bitwise_and",
            "bitwise_or",
            "bitwise_xor",
        ],
        |this, op, node| {
            Ok({
                let (v, d) = this.promoted(node, 2)?;
                let op = match (op, d == DType::Bool) {
                    ("and_" | "bitwise_and", true) => BinaryOp::And,
                    ("or_" | "bitwise_or", true) => BinaryOp::Or,
                    (_, true) => BinaryOp::Xor,
                    ("and_" | "bitwise_and", false) => BinaryOp::BAnd,
                    ("or_" | "bitwise_or", false) => BinaryOp::BOr,
                    _ => BinaryOp::BXor,
                };
                this.b.binary(op, v[0], v[1]).map_err(te)?
            })
        },
    ),
    (
        &["logical_and", "logical_or", "logical_xor"],
        |this, op, node| {
            Ok({
                let a = this.truth(node, 0)?;
                let c = this.truth(node, 1)?;
                let op = [BinaryOp::And, BinaryOp::Or, BinaryOp::Xor][[
                    "logical_and",
                    "logical_or",
                    "logical_xor",
                ]
                .iter()
                .position(|n| *n == op)
                .expect("matched above")];
                this.b.binary(op, a, c).map_err(te)?
            })
        },
    ),
    (&["logical_not", "not_"], |this, _, node| {
        Ok({
            let a = this.truth(node, 0)?;
            this.b.unary(UnaryOp::Not, a).map_err(te)?
        })
    }),
    (&["invert", "bitwise_not"], |this, _, node| {
        Ok({
            let x = this.operand_at(node, 0, "input")?;
            let d = this.result_type(&[x]);
            let x = this.tensor(x, d)?;
            let op = if d == DType::Bool {
                UnaryOp::Not
            } else {
                UnaryOp::BNot
            };
            this.b.unary(op, x).map_err(te)?
        })
    }),
    (
        &[
            "lshift",
            "rshift",
            "bitwise_left_shift",
            "bitwise_right_shift",
        ],
        |this, op, node| this.shift(node, op.starts_with('l') || op.contains("left")),
    ),
    (&["sin"], |this, _, node| {
        this.unary_float(node, UnaryOp::Sin)
    }),
    (&["cos"], |this, _, node| {
        this.unary_float(node, UnaryOp::Cos)
    }),
    (&["tan"], |this, _, node| {
        this.unary_float(node, UnaryOp::Tan)
    }),
    (&["asin", "arcsin"], |this, _, node| {
        this.unary_float(node, UnaryOp::Asin)
    }),
    (&["acos", "arccos"], |this, _, node| {
        this.unary_float(node, UnaryOp::Acos)
    }),
    (&["atan", "arctan"], |this, _, node| {
        this.unary_float(node, UnaryOp::Atan)
    }),
    (&["sinh"], |this, _, node| {
        this.unary_float(node, UnaryOp::Sinh)
    }),
    (&["cosh"], |this, _, node| {
        this.unary_float(node, UnaryOp::Cosh)
    }),
    (&["tanh"], |this, _, node| {
        this.unary_float(node, UnaryOp::Tanh)
    }),
    (&["exp"], |this, _, node| {
        this.unary_float(node, UnaryOp::Exp)
    }),
    (&["exp2"], |this, _, node| {
        this.unary_float(node, UnaryOp::Exp2)
    }),
    (&["expm1"], |this, _, node| {
        this.unary_float(node, UnaryOp::Expm1)
    }),
    (&["log"], |this, _, node| {
        this.unary_float(node, UnaryOp::Log)
    }),
    (&["log2"], |this, _, node| {
        this.unary_float(node, UnaryOp::Log2)
    }),
    (&["log10"], |this, _, node| {
        this.unary_float(node, UnaryOp::Log10)
    }),
    (&["log1p"], |this, _, node| {
        this.unary_float(node, UnaryOp::Log1p)
    }),
    (&["sqrt"], |this, _, node| {
        this.unary_float(node, UnaryOp::Sqrt)
    }),
    (
        &["floor", "ceil", "trunc", "fix", "round"],
        |this, op, node| this.rounding(op, node),
    ),
    (&["rsqrt"], |this, _, node| {
        this.with_float(node, eltwise::rsqrt)
    }),
    (&["reciprocal"], |this, _, node| {
        this.with_float(node, eltwise::reciprocal)
    }),
    (&["square"], |this, _, node| {
        Ok({
            let x = this.operand_at(node, 0, "input")?;
            let d = this.result_type(&[x]);
            let x = this.tensor(x, d)?;
            eltwise::square(&mut this.b, x).map_err(te)?
        })
    }),
    (&["sigmoid"], |this, _, node| {
        this.with_float(node, eltwise::sigmoid)
    }),
    (
        &["atan2", "arctan2", "hypot", "copysign"],
        |this, op, node| {
            Ok({
                let (v, d) = this.promoted(node, 2)?;
                let d2 = if d.is_float() { d } else { DType::F32 };
                let (a, c) = (
                    this.tensor(Operand::Tensor(v[0]), d2)?,
                    this.tensor(Operand::Tensor(v[1]), d2)?,
                );
                let op = match op {
                    "hypot" => BinaryOp::Hypot,
                    "copysign" => BinaryOp::Copysign,
                    _ => BinaryOp::Atan2,
                };
                this.b.binary(op, a, c).map_err(te)?
            })
        },
    ),
    (
        &[
            "relu",
            "relu6",
            "hardtanh",
            "clamp",
            "clip",
            "clamp_min",
            "clamp_max",
        ],
        |this, op, node| this.clamp(op, node),
    ),
    (&["leaky_relu"], |this, _, node| {
        Ok({
            let slope = this.number_at(node, 1, "negative_slope", 0.01)?;
            this.with_float(node, |b, x| eltwise::leaky_relu(b, x, slope))?
        })
    }),
    (&["silu"], |this, _, node| {
        this.with_float(node, |b, x| {
            let s = eltwise::sigmoid(b, x)?;
            b.binary(BinaryOp::Mul, x, s)
        })
    }),
    (&["gelu"], |this, _, node| {
        Ok(match this.arg(node, 1, "approximate") {
            Some(Arg::Str(s)) if s == "tanh" => this.with_float(node, eltwise::gelu_tanh)?,
            None | Some(Arg::Str(_)) => this.with_float(node, eltwise::gelu_erf)?,
            Some(other) => return Err(format!("unknown approximate {other:?}")),
        })
    }),
    (&["erf"], |this, _, node| {
        this.unary_float(node, UnaryOp::Erf)
    }),
    (&["erfc"], |this, _, node| {
        this.unary_float(node, UnaryOp::Erfc)
    }),
    (&["softplus"], |this, _, node| {
        Ok({
            let beta = this.number_at(node, 1, "beta", 1.0)?;
            let threshold = this.number_at(node, 2, "threshold", 20.0)?;
            this.with_float(node, |b, x| eltwise::softplus(b, x, beta, threshold))?
        })
    }),
    (&["elu", "celu"], |this, op, node| {
        Ok({
            let alpha = this.number_at(node, 1, "alpha", 1.0)?;
            if op == "celu" && alpha != 1.0 {
                return Err("unsupported: celu with alpha != 1".into());
            }
            this.with_float(node, |b, x| eltwise::elu(b, x, alpha, 1.0))?
        })
    }),
    (&["selu"], |this, _, node| {
        this.with_float(node, |b, x| {
            eltwise::elu(b, x, 1.673_263_242_354_377_3, 1.050_700_987_355_480_5)
        })
    }),
    (&["mish"], |this, _, node| {
        this.with_float(node, |b, x| {
            let sp = eltwise::softplus(b, x, 1.0, 20.0)?;
            let t = b.unary(UnaryOp::Tanh, sp)?;
            b.binary(BinaryOp::Mul, x, t)
        })
    }),
    (&["logsigmoid"], |this, _, node| {
        this.with_float(node, |b, x| {
            let nx = b.unary(UnaryOp::Neg, x)?;
            let sp = eltwise::softplus(b, nx, 1.0, 20.0)?;
            b.unary(UnaryOp::Neg, sp)
        })
    }),
    (&["hardsigmoid"], |this, _, node| {
        this.with_float(node, eltwise::hardsigmoid)
    }),
    (&["hardswish"], |this, _, node| {
        this.with_float(node, |b, x| {
            let h = eltwise::hardsigmoid(b, x)?;
            b.binary(BinaryOp::Mul, x, h)
        })
    }),
    (&["softsign"], |this, _, node| {
        this.with_float(node, |b, x| {
            let a = b.unary(UnaryOp::Abs, x)?;
            let one = konst(b, eltwise::dtype(b, x), 1.0);
            let den = b.binary(BinaryOp::Add, one, a)?;
            b.binary(BinaryOp::Div, x, den)
        })
    }),
    (&["tanhshrink"], |this, _, node| {
        this.with_float(node, |b, x| {
            let t = b.unary(UnaryOp::Tanh, x)?;
            b.binary(BinaryOp::Sub, x, t)
        })
    }),
    (&["maximum", "max", "minimum", "min"], |this, op, node| {
        Ok({
            let is_max = op.starts_with("max");
            // torch's `max(x, dim)` (ATen's `max.dim`) is an arg-reduction:
            // values and indices.
            let dim_form = matches!(node.args.get(1), Some(Arg::Int(_)))
                || node.kwargs.iter().any(|(k, _)| k == "dim");
            if dim_form && (op == "max" || op == "min") {
                return Err(format!(
                    "unsupported: `{op}(x, dim)` returns values and indices (an arg-reduction)"
                ));
            }
            if node.args.len() + node.kwargs.len() < 2 {
                // `max(x)`: every element.
                return this.reduction(if is_max { "amax" } else { "amin" }, node);
            }
            this.binary(node, if is_max { BinaryOp::Max } else { BinaryOp::Min })?
        })
    }),
    (
        &["embedding", "index_select", "gather"],
        |this, op, node| this.lookup_op(op, node),
    ),
    (&["embedding_dense_backward"], |this, _, node| {
        this.embedding_backward(node)
    }),
    (&["index_add"], |this, _, node| this.index_add(node)),
    (&["scatter_add"], |this, _, node| this.scatter_add(node)),
    (&["mse_loss"], |this, _, node| this.mse_loss(node)),
    (&["mse_loss_backward"], |this, _, node| {
        this.mse_loss_backward(node)
    }),
    (&["binary_cross_entropy"], |this, _, node| {
        this.binary_cross_entropy(node)
    }),
    (&["binary_cross_entropy_backward"], |this, _, node| {
        this.binary_cross_entropy_backward(node)
    }),
    (&["binary_cross_entropy_with_logits"], |this, _, node| {
        this.bce_with_logits(node)
    }),
    (&["xlogy"], |this, _, node| this.xlogy(node)),
    (&["sgn", "sign"], |this, _, node| this.sign(node)),
    (&["masked_fill"], |this, _, node| this.masked_fill(node)),
    (&["softplus_backward"], |this, _, node| {
        this.softplus_backward(node)
    }),
    (&["smooth_l1_loss", "huber_loss"], |this, op, node| {
        this.smooth_loss(op, node)
    }),
    (
        &["smooth_l1_loss_backward", "huber_loss_backward"],
        |this, op, node| this.smooth_loss_backward(op, node),
    ),
    (
        &["hardswish_backward", "mish_backward"],
        |this, op, node| this.activation_backward(op, node),
    ),
    (&["_safe_softmax"], |this, _, node| this.safe_softmax(node)),
    (&["select_backward", "slice_backward"], |this, op, node| {
        this.take_backward(op, node)
    }),
    (&["tril", "triu"], |this, op, node| this.triangle(op, node)),
    (&["constant_pad_nd"], |this, _, node| {
        this.constant_pad(node)
    }),
    (
        &["nll_loss_backward", "nll_loss2d_backward"],
        |this, op, node| this.nll_loss_backward(node, op == "nll_loss2d_backward"),
    ),
    (&["arange"], |this, _, node| this.arange(node)),
    (&["var", "std"], |this, op, node| this.spread(op, node)),
    (&["scaled_dot_product_attention"], |this, op, node| {
        this.attention(op, node)
    }),
    (&["as_strided"], |this, _, node| this.as_strided(node)),
    (&["index", "_unsafe_index"], |this, _, node| {
        this.advanced_index(node)
    }),
    (&["index_put", "_unsafe_index_put"], |this, _, node| {
        this.index_put(node)
    }),
    (
        &[
            "full",
            "ones",
            "zeros",
            "new_ones",
            "new_zeros",
            "new_full",
            "ones_like",
            "zeros_like",
            "full_like",
            "empty_like",
            "fill",
            "scalar_tensor",
        ],
        |this, op, node| this.filled(op, node),
    ),
    (&["where"], |this, _, node| {
        Ok({
            let c = this.truth(node, 0)?;
            let a = this.operand_at(node, 1, "input")?;
            let e = this.operand_at(node, 2, "other")?;
            let d = this.result_type(&[a, e]);
            let (a, e) = (this.tensor(a, d)?, this.tensor(e, d)?);
            this.b.select(c, a, e).map_err(te)?
        })
    }),
    (
        &[
            "to",
            "_to_copy",
            "type",
            "float",
            "double",
            "int",
            "long",
            "bool",
            "prims.convert_element_type",
        ],
        |this, op, node| this.convert(op, node),
    ),
];

/// ATen overloads whose op name the importer knows but whose meaning it does
/// not build (its builders refuse them too): `max.dim` returns values and
/// indices; `fill.Tensor` fills with a tensor's value.
const REFUSED_OVERLOADS: &[(&str, &str)] = &[
    ("max", "dim"),
    ("min", "dim"),
    ("max", "names_dim"),
    ("min", "names_dim"),
    ("fill", "Tensor"),
];

/// Whether the importer builds a node of kind `kind` (`call_function`,
/// `call_method`) with `target`, as [`op_name`] normalizes it. The op's
/// arguments may still be refused when it is lowered (an integer `pow` whose
/// exponent is a tensor, say); `call_module` nodes depend on the module tree
/// and are not answered here.
pub fn supports(kind: &str, target: &str) -> bool {
    if !kind.starts_with("call_") || kind == "call_module" {
        return false;
    }
    if let Some(aten) = target.strip_prefix("torch.ops.aten.") {
        if let Some((op, overload)) = aten.split_once('.') {
            if REFUSED_OVERLOADS.contains(&(op, overload)) {
                return false;
            }
        }
    }
    let name = op_name(kind, target);
    builder(&name).is_some()
        || MULTI_OPS.contains(&name.as_str())
        || partial_tuple_op(&name).is_some()
}

/// Whether `node` is torch's `max_pool2d(..., return_indices=True)` (the
/// functional form, or an `nn.MaxPool2d` that asks for them): a tuple of
/// the values and their indices, as ATen's `max_pool2d_with_indices`.
fn returns_indices(op: &str, node: &Node) -> bool {
    op == "max_pool2d"
        && matches!(
            node.args.get(6).or_else(|| node
                .kwargs
                .iter()
                .find(|(k, _)| k == "return_indices")
                .map(|(_, a)| a)),
            Some(Arg::Bool(true))
        )
}

/// Ops whose result kiln does not compute, accepted where nothing uses them
/// (make_fx leaves a dead `aten.empty.memory_format` after each batch norm).
const UNCOMPUTED_OPS: &[(&str, &str)] = &[("empty", "an uninitialized tensor (`empty`)")];

/// The builder of op `name`.
fn builder(name: &str) -> Option<Build> {
    OPS.iter()
        .find(|(names, _)| names.contains(&name))
        .map(|&(_, build)| build)
}

/// Lowering state: `fx.b` is the graph builder.
struct Fx<'a> {
    opts: &'a Options,
    b: Builder,
    values: HashMap<String, Value>,
    /// The results of multi-output nodes, by node name.
    tuples: HashMap<String, Vec<Value>>,
    /// Tuples of which only the first items are computed: their length in
    /// torch, and what the others are.
    partial: HashMap<String, (i64, &'static str)>,
    /// Nodes kiln does not compute (an item of a partial tuple, `empty`):
    /// what they are, for the error where one is used.
    absent: HashMap<String, &'static str>,
    source_map: SourceMap,
}

fn lit(arg: &Arg) -> Option<Operand> {
    match arg {
        Arg::Int(i) => Some(Operand::Int(*i)),
        Arg::Float(f) => Some(Operand::Float(*f)),
        Arg::Bool(b) => Some(Operand::Bool(*b)),
        _ => None,
    }
}

fn category(d: DType) -> u8 {
    match d {
        DType::Bool => 0,
        DType::I32 | DType::I64 => 1,
        DType::F32 | DType::F64 => 2,
    }
}

/// torch's `promote_types` for two tensors.
fn promote_types(a: DType, b: DType) -> DType {
    match category(a).cmp(&category(b)) {
        std::cmp::Ordering::Less => b,
        std::cmp::Ordering::Greater => a,
        std::cmp::Ordering::Equal if a.size_bytes() >= b.size_bytes() => a,
        std::cmp::Ordering::Equal => b,
    }
}

fn te(e: TypeError) -> String {
    e.message
}

/// Lowers a parsed graph whose `call_module` nodes `modules` (the tree
/// [`super::modules::apply`] used) has typed.
pub fn lower(
    src: &str,
    g: &FxGraph,
    opts: &Options,
    modules: &HashMap<String, super::Module>,
) -> ParseResult<(Graph, SourceMap)> {
    check_supported(src, g, opts, modules)?;
    let mut fx = Fx {
        opts,
        b: Builder::new("forward"),
        values: HashMap::new(),
        tuples: HashMap::new(),
        partial: HashMap::new(),
        absent: HashMap::new(),
        source_map: SourceMap::default(),
    };
    for node in &g.nodes {
        let op = op_name(&node.kind, &node.target);
        if node.kind.starts_with("call_")
            && (MULTI_OPS.contains(&op.as_str()) || returns_indices(&op, node))
        {
            let values = fx
                .multi(&op, node)
                .map_err(|m| ParseError::at(src, node.offset, format!("`%{}`: {m}", node.name)))?;
            for (k, &v) in values.iter().enumerate() {
                fx.b.set_source_name(v, &format!("{}[{k}]", node.name));
                fx.source_map.set(v, Loc::of_offset(src, node.offset));
            }
            fx.tuples.insert(node.name.clone(), values);
            continue;
        }
        if let Some(what) = fx.uncomputed(&op, node) {
            fx.absent.insert(node.name.clone(), what);
            continue;
        }
        let at = |m: String| ParseError::at(src, node.offset, format!("`%{}`: {m}", node.name));
        let partial = partial_tuple_op(&op).filter(|_| node.kind.starts_with("call_"));
        if let Some(&(_, len, what, build)) = partial {
            let first = build(&mut fx, &op, node).map_err(at)?;
            fx.b.set_source_name(first, &format!("{}[0]", node.name));
            fx.source_map.set(first, Loc::of_offset(src, node.offset));
            fx.tuples.insert(node.name.clone(), vec![first]);
            fx.partial.insert(node.name.clone(), (len, what));
            continue;
        }
        let value = fx
            .node(node)
            .map_err(|m| ParseError::at(src, node.offset, format!("`%{}`: {m}", node.name)))?;
        fx.b.set_source_name(value, &node.name);
        fx.source_map.set(value, Loc::of_offset(src, node.offset));
        fx.values.insert(node.name.clone(), value);
    }
    for out in &g.output {
        let name = match out {
            Arg::Node(n) | Arg::Name(n) => n,
            other => {
                return Err(ParseError::at(
                    src,
                    g.output_offset,
                    format!("the graph returns {other:?}; kiln outputs must be nodes"),
                ))
            }
        };
        if fx.tuples.contains_key(name) {
            return Err(ParseError::at(
                src,
                g.output_offset,
                format!("the graph returns `{name}`, a tuple; return its items"),
            ));
        }
        if let Some(what) = fx.absent.get(name) {
            return Err(ParseError::at(
                src,
                g.output_offset,
                format!("the graph returns `{name}`, {what}, which kiln does not compute"),
            ));
        }
        let Some(&v) = fx.values.get(name) else {
            return Err(ParseError::at(
                src,
                g.output_offset,
                format!("`return` names unknown node `{name}`"),
            ));
        };
        fx.b.output(name, v);
    }
    if g.output.is_empty() {
        return Err(ParseError::at(
            src,
            g.output_offset,
            "the graph returns nothing",
        ));
    }
    Ok((fx.b.finish(), fx.source_map))
}

/// Reports every unsupported op of the graph together, and dangling or
/// duplicate node names, before anything is built.
fn check_supported(
    src: &str,
    g: &FxGraph,
    opts: &Options,
    modules: &HashMap<String, super::Module>,
) -> ParseResult<()> {
    let mut unsupported: Vec<String> = Vec::new();
    let mut untyped: Vec<String> = Vec::new();
    let mut tensor: Vec<String> = Vec::new();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for node in &g.nodes {
        for arg in node.args.iter().chain(node.kwargs.iter().map(|(_, a)| a)) {
            let mut stack = vec![arg];
            while let Some(a) = stack.pop() {
                match a {
                    Arg::Node(n) if !seen.contains_key(n.as_str()) => {
                        return Err(ParseError::at(
                            src,
                            node.offset,
                            format!(
                                "`%{}` uses `%{n}`, which is not defined before it",
                                node.name
                            ),
                        ));
                    }
                    Arg::Seq(items) => stack.extend(items),
                    _ => {}
                }
            }
        }
        // After its arguments: a node cannot use itself.
        if seen.insert(&node.name, node.offset).is_some() {
            return Err(ParseError::at(
                src,
                node.offset,
                format!("duplicate node `%{}`", node.name),
            ));
        }
        let name = match node.kind.as_str() {
            "placeholder" | "get_attr" => continue,
            "call_module" => match module_op(&node.target, opts) {
                Some(op) => op,
                None if modules.contains_key(&node.target) => {
                    unsupported.push(format!(
                        "`nn.Linear` (%{}) without `{}.weight` in the weights",
                        node.name, node.target
                    ));
                    continue;
                }
                None => {
                    untyped.push(format!("`{}` (%{})", node.target, node.name));
                    continue;
                }
            },
            kind => op_name(kind, &node.target),
        };
        if TENSOR_OPS.contains(&name.as_str()) {
            tensor.push(format!("`{}` (%{})", node.target, node.name));
        } else if builder(&name).is_none()
            && !MULTI_OPS.contains(&name.as_str())
            && partial_tuple_op(&name).is_none()
            && !UNCOMPUTED_OPS.iter().any(|(op, _)| *op == name)
        {
            unsupported.push(format!("`{}` (%{})", node.target, node.name));
        }
    }
    let Some(message) = crate::unsupported::message(&[
        Kind {
            label: "ops",
            ops: unsupported,
            note: "",
        },
        Kind {
            label: "call_module",
            ops: untyped,
            note: "of unknown type (give the text `print(gm)` writes with --modules FILE; without it, kiln knows Linear by its weights and activations named after their type)",
        },
        Kind {
            label: "tensor ops",
            ops: tensor,
            note: "(sizes, arg-reductions, convolutions and normalization layers are not imported)",
        },
    ]) else {
        return Ok(());
    };
    let at = g
        .nodes
        .iter()
        .find(|n| message.contains(&format!("(%{})", n.name)))
        .map_or(0, |n| n.offset);
    Err(ParseError::at(src, at, message))
}

/// The op a `call_module` target stands for: `Linear` when the weights hold
/// a matrix `TARGET.weight`, else an activation named by the target's last component
/// (`relu`, `act.sigmoid`, `2` is unknown).
fn module_op(target: &str, opts: &Options) -> Option<String> {
    // A Linear layer's weight is a matrix; a convolution's (rank 3 to 5) is not.
    if opts
        .weights
        .get(&format!("{target}.weight"))
        .is_some_and(|w| w.shape.len() == 2)
    {
        return Some("linear_module".to_string());
    }
    let last = target.rsplit('.').next().unwrap_or(target);
    let stem = last
        .trim_end_matches(|c: char| c.is_ascii_digit() || c == '_')
        .to_ascii_lowercase();
    let known = [
        "relu",
        "relu6",
        "sigmoid",
        "tanh",
        "silu",
        "gelu",
        "softplus",
        "elu",
        "selu",
        "mish",
        "logsigmoid",
        "hardsigmoid",
        "hardswish",
        "softsign",
        "tanhshrink",
        "leaky_relu",
        "leakyrelu",
        "hardtanh",
        "identity",
    ];
    known.contains(&stem.as_str()).then(|| match stem.as_str() {
        "leakyrelu" => "leaky_relu".to_string(),
        s => s.to_string(),
    })
}

impl Fx<'_> {
    fn node(&mut self, node: &Node) -> Result<Value, String> {
        match node.kind.as_str() {
            "placeholder" => self.placeholder(node),
            "get_attr" => self.get_attr(node),
            "call_module" => {
                let op = module_op(&node.target, self.opts).expect("checked before lowering");
                self.call(&op, node)
            }
            kind => self.call(&op_name(kind, &node.target), node),
        }
    }

    fn placeholder(&mut self, node: &Node) -> Result<Value, String> {
        let ty = self
            .opts
            .inputs
            .get(&node.name)
            .or_else(|| self.opts.inputs.get(&node.target))
            .cloned()
            .ok_or_else(|| {
                format!(
                    "the type of placeholder `{}` is unknown: give it (`--input {}:f32[n]` on the command line, or input data with --inputs)",
                    node.name, node.name
                )
            })?;
        Ok(self.b.input(&node.name, ty))
    }

    fn get_attr(&mut self, node: &Node) -> Result<Value, String> {
        self.weight(&node.target)
    }

    /// A weight as a constant: a scalar when it has one element and no
    /// dimension above 1, else a tensor of its shape.
    fn weight(&mut self, name: &str) -> Result<Value, String> {
        let w = self.opts.weights.get(name).ok_or_else(|| {
            format!("`{name}` is not in the weights file (give one with --weights)")
        })?;
        match w.data.as_slice() {
            [s] if w.shape.iter().all(|&d| d == 1) && w.shape.len() <= 1 => Ok(self.b.constant(*s)),
            data => {
                let dtype = data.first().map_or(DType::F32, |s| s.dtype());
                let t = TensorConst {
                    dtype,
                    dims: w.shape.iter().map(|&d| d as u64).collect(),
                    values: data.to_vec(),
                };
                self.b.op(Op::Tensor(Arc::new(t)), &[]).map_err(te)
            }
        }
    }

    fn operand(&self, arg: &Arg) -> Result<Operand, String> {
        match arg {
            Arg::Node(n) if self.tuples.contains_key(n) => {
                Err(format!("`%{n}` is a tuple; take an item with getitem"))
            }
            Arg::Node(n) => self.lookup(n).map(Operand::Tensor),
            other => {
                lit(other).ok_or_else(|| format!("expected a tensor or a number, found {other:?}"))
            }
        }
    }

    /// The value of node `n` (defined before use: checked), or the error of
    /// using a node kiln does not compute.
    fn lookup(&self, n: &str) -> Result<Value, String> {
        if let Some(what) = self.absent.get(n) {
            return Err(format!("uses `%{n}`, {what}, which kiln does not compute"));
        }
        Ok(*self.values.get(n).expect("checked: defined before use"))
    }

    /// Whether `node` is one kiln does not compute: `empty`, or an item of a
    /// partial tuple past those computed. Using it is the error.
    fn uncomputed(&self, op: &str, node: &Node) -> Option<&'static str> {
        if !node.kind.starts_with("call_") {
            return None;
        }
        if let Some((_, what)) = UNCOMPUTED_OPS.iter().find(|(name, _)| *name == op) {
            return Some(what);
        }
        let (Some(Arg::Node(from)), Some(Arg::Int(k))) = (node.args.first(), node.args.get(1))
        else {
            return None;
        };
        let computed = self.tuples.get(from)?.len() as i64;
        let &(len, what) = self.partial.get(from)?;
        let k = if *k < 0 { k + len } else { *k };
        (op == "getitem" && k >= computed).then_some(what)
    }

    /// Positional argument `idx`, or keyword `key`.
    fn arg<'n>(&self, node: &'n Node, idx: usize, key: &str) -> Option<&'n Arg> {
        node.args
            .get(idx)
            .or_else(|| node.kwargs.iter().find(|(k, _)| k == key).map(|(_, a)| a))
    }

    fn operand_at(&self, node: &Node, idx: usize, key: &str) -> Result<Operand, String> {
        let arg = self
            .arg(node, idx, key)
            .ok_or_else(|| format!("missing argument {} (`{key}`)", idx + 1))?;
        self.operand(arg)
    }

    fn number_at(&self, node: &Node, idx: usize, key: &str, default: f64) -> Result<f64, String> {
        match self.arg(node, idx, key) {
            None | Some(Arg::None) => Ok(default),
            Some(Arg::Int(i)) => Ok(*i as f64),
            Some(Arg::Float(f)) => Ok(*f),
            Some(other) => Err(format!("`{key}` must be a number, not {other:?}")),
        }
    }

    fn optional_number(&self, node: &Node, idx: usize, key: &str) -> Result<Option<f64>, String> {
        match self.arg(node, idx, key) {
            None | Some(Arg::None) => Ok(None),
            Some(Arg::Int(i)) => Ok(Some(*i as f64)),
            Some(Arg::Float(f)) => Ok(Some(*f)),
            Some(other) => Err(format!("`{key}` must be a number, not {other:?}")),
        }
    }

    fn tensor(&mut self, o: Operand, dtype: DType) -> Result<Value, String> {
        Ok(match o {
            Operand::Tensor(v) if self.b.dtype(v) == Some(dtype) => v,
            Operand::Tensor(v) => self.b.cast(v, dtype).map_err(te)?,
            Operand::Int(i) => self.b.constant(match dtype {
                DType::Bool => Scalar::Bool(i != 0),
                DType::I32 => Scalar::I32(i as i32),
                DType::I64 => Scalar::I64(i),
                DType::F32 => Scalar::F32(i as f32),
                DType::F64 => Scalar::F64(i as f64),
            }),
            Operand::Float(f) => konst(&mut self.b, dtype, f),
            Operand::Bool(b) => konst(&mut self.b, dtype, f64::from(u8::from(b))),
        })
    }

    fn dtype_of(&self, o: Operand) -> Option<DType> {
        match o {
            Operand::Tensor(v) => self.b.dtype(v),
            _ => None,
        }
    }

    /// torch's result type of operands: tensors promote among themselves;
    /// a Python number only moves the result to a higher category (int → i64,
    /// float → f32, torch's default dtype).
    fn result_type(&self, ops: &[Operand]) -> DType {
        let tensors: Vec<DType> = ops.iter().filter_map(|&o| self.dtype_of(o)).collect();
        let lit_cat = ops
            .iter()
            .filter_map(|o| match o {
                Operand::Bool(_) => Some(0),
                Operand::Int(_) => Some(1),
                Operand::Float(_) => Some(2),
                Operand::Tensor(_) => None,
            })
            .max();
        match (tensors.into_iter().reduce(promote_types), lit_cat) {
            (Some(t), Some(c)) if c > category(t) => {
                [DType::Bool, DType::I64, DType::F32][c as usize]
            }
            (Some(t), _) => t,
            (None, c) => [DType::Bool, DType::I64, DType::F64][c.unwrap_or(2) as usize],
        }
    }

    fn promoted(&mut self, node: &Node, n: usize) -> Result<(Vec<Value>, DType), String> {
        let ops: Vec<Operand> = (0..n)
            .map(|i| self.operand_at(node, i, ["input", "other", "third"][i.min(2)]))
            .collect::<Result<_, _>>()?;
        let d = self.result_type(&ops);
        let vals = ops
            .into_iter()
            .map(|o| self.tensor(o, d))
            .collect::<Result<_, _>>()?;
        Ok((vals, d))
    }

    /// The first operand as a float tensor (ints become f32, as torch's
    /// float functions do).
    fn floating(&mut self, node: &Node) -> Result<Value, String> {
        let o = self.operand_at(node, 0, "input")?;
        let d = self.result_type(&[o]);
        let d = if d.is_float() { d } else { DType::F32 };
        self.tensor(o, d)
    }

    fn binary(&mut self, node: &Node, op: BinaryOp) -> Result<Value, String> {
        let (v, _) = self.promoted(node, 2)?;
        self.b.binary(op, v[0], v[1]).map_err(te)
    }

    fn compare(&mut self, node: &Node, op: CmpOp) -> Result<Value, String> {
        let (v, _) = self.promoted(node, 2)?;
        self.b.compare(op, v[0], v[1]).map_err(te)
    }

    fn unary_float(&mut self, node: &Node, op: UnaryOp) -> Result<Value, String> {
        let x = self.floating(node)?;
        self.b.unary(op, x).map_err(te)
    }

    fn with_float(
        &mut self,
        node: &Node,
        f: impl FnOnce(&mut Builder, Value) -> EResult<Value>,
    ) -> Result<Value, String> {
        let x = self.floating(node)?;
        f(&mut self.b, x).map_err(te)
    }

    fn call(&mut self, op: &str, node: &Node) -> Result<Value, String> {
        let build = builder(op).ok_or_else(|| format!("unsupported op `{op}`"))?;
        build(self, op, node)
    }

    fn truth(&mut self, node: &Node, idx: usize) -> Result<Value, String> {
        let o = self.operand_at(node, idx, ["condition", "other", "input"][idx.min(2)])?;
        let d = self.result_type(&[o]);
        let v = self.tensor(o, d)?;
        if d == DType::Bool {
            Ok(v)
        } else {
            self.b.cast(v, DType::Bool).map_err(te)
        }
    }

    /// `add`/`sub` with torch's `alpha` (`a + alpha * b`); `rsub` is `b - alpha * a`.
    fn add_sub(&mut self, op: &str, node: &Node) -> Result<Value, String> {
        let (v, d) = self.promoted(node, 2)?;
        let (a, mut c) = if op == "rsub" {
            (v[1], v[0])
        } else {
            (v[0], v[1])
        };
        if let Some(alpha) = self.optional_number(node, 2, "alpha")? {
            if alpha != 1.0 {
                let k = konst(&mut self.b, d, alpha);
                c = self.b.binary(BinaryOp::Mul, k, c).map_err(te)?;
            }
        }
        let bop = if op == "add" {
            BinaryOp::Add
        } else {
            BinaryOp::Sub
        };
        self.b.binary(bop, a, c).map_err(te)
    }

    /// `/`: true division in floating point (ints become f32); `div`'s
    /// `rounding_mode` `'trunc'` and `'floor'` keep integer dtypes.
    fn divide(&mut self, node: &Node) -> Result<Value, String> {
        let mode = match self.arg(node, 2, "rounding_mode") {
            None | Some(Arg::None) => None,
            Some(Arg::Str(s)) if s == "trunc" || s == "floor" => Some(s.clone()),
            Some(other) => return Err(format!("unknown rounding_mode {other:?}")),
        };
        let (v, d) = self.promoted(node, 2)?;
        match mode.as_deref() {
            Some("floor") => self.b.binary(BinaryOp::FloorDiv, v[0], v[1]).map_err(te),
            Some(_) if !d.is_float() => self.b.binary(BinaryOp::Div, v[0], v[1]).map_err(te),
            Some(_) => {
                let q = self.b.binary(BinaryOp::Div, v[0], v[1]).map_err(te)?;
                self.b.unary(UnaryOp::Trunc, q).map_err(te)
            }
            None => {
                let f = if d.is_float() { d } else { DType::F32 };
                let a = self.tensor(Operand::Tensor(v[0]), f)?;
                let c = self.tensor(Operand::Tensor(v[1]), f)?;
                self.b.binary(BinaryOp::Div, a, c).map_err(te)
            }
        }
    }

    /// torch's `pow`: a float base with exponent 2, 3, 0.5 or -1 is computed
    /// as torch does (`x*x`, `x*x*x`, `sqrt`, `1/x`); an integer tensor to a
    /// non-negative integer constant stays an integer (wrapping).
    fn pow(&mut self, node: &Node) -> Result<Value, String> {
        let base = self.operand_at(node, 0, "input")?;
        let exp = self.operand_at(node, 1, "exponent")?;
        let d = self.result_type(&[base, exp]);
        if !d.is_float() {
            return match exp {
                Operand::Int(e) if (0..=64).contains(&e) => {
                    let x = self.tensor(base, d)?;
                    eltwise::int_pow(&mut self.b, x, e as u32).map_err(te)
                }
                _ => Err("unsupported: integer pow needs a constant exponent from 0 to 64".into()),
            };
        }
        let x = self.tensor(base, d)?;
        let special = match exp {
            Operand::Int(e) => Some(e as f64),
            Operand::Float(e) => Some(e),
            _ => None,
        };
        let b = &mut self.b;
        match special {
            Some(2.0) => eltwise::square(b, x).map_err(te),
            Some(3.0) => {
                let x2 = eltwise::square(b, x).map_err(te)?;
                b.binary(BinaryOp::Mul, x2, x).map_err(te)
            }
            Some(0.5) => b.unary(UnaryOp::Sqrt, x).map_err(te),
            Some(-1.0) => eltwise::reciprocal(b, x).map_err(te),
            _ => {
                let e = self.tensor(exp, d)?;
                self.b.binary(BinaryOp::Pow, x, e).map_err(te)
            }
        }
    }

    fn rounding(&mut self, op: &str, node: &Node) -> Result<Value, String> {
        let x = self.operand_at(node, 0, "input")?;
        let d = self.result_type(&[x]);
        let x = self.tensor(x, d)?;
        if !d.is_float() {
            return Ok(x); // rounding an integer is the identity in torch
        }
        if self.optional_number(node, 1, "decimals")?.unwrap_or(0.0) != 0.0 {
            return Err("unsupported: round with decimals".into());
        }
        let u = match op {
            "floor" => UnaryOp::Floor,
            "ceil" => UnaryOp::Ceil,
            "round" => UnaryOp::Round,
            _ => UnaryOp::Trunc,
        };
        self.b.unary(u, x).map_err(te)
    }

    fn clamp(&mut self, op: &str, node: &Node) -> Result<Value, String> {
        let tensor_bound = |i: usize, key: &str| {
            matches!(self.arg(node, i, key), Some(Arg::Node(_) | Arg::Name(_)))
        };
        let bounds = match op {
            "clamp_min" => [tensor_bound(1, "min"), false],
            "clamp_max" => [false, tensor_bound(1, "max")],
            "clamp" | "clip" => [tensor_bound(1, "min"), tensor_bound(2, "max")],
            _ => [false, false],
        };
        if bounds.contains(&true) {
            return self.clamp_by_tensors(op, node);
        }
        let (lo, hi) = match op {
            "relu" => (Some(0.0), None),
            "relu6" => (Some(0.0), Some(6.0)),
            "hardtanh" => (
                Some(self.number_at(node, 1, "min_val", -1.0)?),
                Some(self.number_at(node, 2, "max_val", 1.0)?),
            ),
            "clamp_min" => (self.optional_number(node, 1, "min")?, None),
            "clamp_max" => (None, self.optional_number(node, 1, "max")?),
            _ => (
                self.optional_number(node, 1, "min")?,
                self.optional_number(node, 2, "max")?,
            ),
        };
        let x = self.operand_at(node, 0, "input")?;
        // A float bound on an integer tensor makes the result float (f32).
        let mut ops = vec![x];
        ops.extend(
            lo.into_iter()
                .chain(hi)
                .map(Operand::Float)
                .filter(|_| op.starts_with("clamp") || op == "clip"),
        );
        let d = self.result_type(&ops);
        let x = self.tensor(x, d)?;
        eltwise::clamp(&mut self.b, x, lo, hi).map_err(te)
    }

    /// `clamp_min(x, t)`, `clamp_max(x, t)` and `clamp(x, lo, hi)` with
    /// tensor bounds (ATen's `.Tensor` overloads): torch's `maximum` and
    /// `minimum` (`x < t ? t : x`, and `x > t ? t : x`; a NaN on either side
    /// gives NaN; `x` kept on a tie, so `-0.0` stays), the lower bound
    /// first.
    fn clamp_by_tensors(&mut self, op: &str, node: &Node) -> Result<Value, String> {
        let (lo, hi) = match op {
            "clamp_min" => (self.arg(node, 1, "min"), None),
            "clamp_max" => (None, self.arg(node, 1, "max")),
            _ => (self.arg(node, 1, "min"), self.arg(node, 2, "max")),
        };
        let x = self.operand_at(node, 0, "input")?;
        let bound = |fx: &Self, a: Option<&Arg>| -> Result<Option<Operand>, String> {
            match a {
                None | Some(Arg::None) => Ok(None),
                Some(a) => fx.operand(a).map(Some),
            }
        };
        let (lo, hi) = (bound(self, lo)?, bound(self, hi)?);
        let mut ops = vec![x];
        ops.extend(lo.iter().chain(hi.iter()).copied());
        let d = self.result_type(&ops);
        let mut v = self.tensor(x, d)?;
        for (b, cmp) in [(lo, CmpOp::Lt), (hi, CmpOp::Gt)] {
            let Some(b) = b else { continue };
            let t = self.tensor(b, d)?;
            let past = self.b.compare(cmp, v, t).map_err(te)?;
            let r = self.b.select(past, t, v).map_err(te)?;
            v = if d.is_float() {
                let nan = self.b.compare(CmpOp::Ne, t, t).map_err(te)?;
                self.b.select(nan, t, r).map_err(te)?
            } else {
                r
            };
        }
        Ok(v)
    }

    fn shift(&mut self, node: &Node, left: bool) -> Result<Value, String> {
        let (v, d) = self.promoted(node, 2)?;
        if !matches!(d, DType::I32 | DType::I64) {
            return Err(format!("shifts need integers, not {d}"));
        }
        let (a, s) = (v[0], v[1]);
        // torch: a shift by a negative amount or by the width or more gives 0
        // (left) or the sign fill (right); kiln's shifts take the amount modulo
        // the width, so the out-of-range case is selected explicitly.
        let bits = (d.size_bytes() * 8) as f64;
        let b = &mut self.b;
        let width = konst(b, d, bits);
        let zero = konst(b, d, 0.0);
        let too_big = b.compare(CmpOp::Ge, s, width).map_err(te)?;
        let negative = b.compare(CmpOp::Lt, s, zero).map_err(te)?;
        let out = b.binary(BinaryOp::Or, too_big, negative).map_err(te)?;
        let shifted = b
            .binary(
                if left {
                    BinaryOp::Shl
                } else {
                    BinaryOp::ShrArith
                },
                a,
                s,
            )
            .map_err(te)?;
        let fill = if left {
            zero
        } else {
            let top = konst(b, d, bits - 1.0);
            b.binary(BinaryOp::ShrArith, a, top).map_err(te)?
        };
        b.select(out, fill, shifted).map_err(te)
    }

    fn convert(&mut self, op: &str, node: &Node) -> Result<Value, String> {
        let x = self.operand_at(node, 0, "input")?;
        let d0 = self.result_type(&[x]);
        let x = self.tensor(x, d0)?;
        let to = match op {
            "float" => DType::F32,
            "double" => DType::F64,
            "int" => DType::I32,
            "long" => DType::I64,
            "bool" => DType::Bool,
            // `_to_copy(x, dtype=None, device=...)`: a copy, converted if asked.
            "_to_copy" if matches!(self.arg(node, 1, "dtype"), None | Some(Arg::None)) => {
                return Ok(x)
            }
            _ => {
                let arg = self.arg(node, 1, "dtype").ok_or("`to` without a dtype")?;
                match arg {
                    Arg::Name(n) | Arg::Str(n) => {
                        torch_dtype(n).ok_or_else(|| format!("unsupported dtype `{n}`"))?
                    }
                    other => {
                        return Err(format!("unsupported `to` argument {other:?} (only dtypes)"))
                    }
                }
            }
        };
        if to == d0 {
            return Ok(x);
        }
        self.b.cast(x, to).map_err(te)
    }
}

/// `torch.float32` and friends.
pub fn torch_dtype(name: &str) -> Option<DType> {
    Some(match name.trim_start_matches("torch.") {
        "float32" | "float" => DType::F32,
        "float64" | "double" => DType::F64,
        "int32" | "int" => DType::I32,
        "int64" | "long" => DType::I64,
        "bool" => DType::Bool,
        _ => return None,
    })
}

/// The number of elements of a shape of fixed dimensions.
fn fixed_product(shape: &[Dim]) -> Result<u64, String> {
    shape.iter().try_fold(1u64, |acc, d| match d {
        Dim::Fixed(n) => acc
            .checked_mul(*n)
            .ok_or_else(|| "the shape has too many elements".to_string()),
        Dim::Sym(s) => Err(format!("cannot reshape along the symbolic dimension `{s}`")),
    })
}
