//! The functions and constants the Python subset knows, by bare name or with a
//! module prefix (`math.`, `np.`, `numpy.`, `torch.`, `F.`,
//! `torch.nn.functional.`), and how each lowers to graph ops.

use super::lower::{Lower, PyVal};
use kiln_ir::{BinaryOp, DType, ParseResult, ReduceOp, Scalar, UnaryOp};

/// Module prefixes a call or constant may carry.
const MODULES: &[&str] = &[
    "math",
    "np",
    "numpy",
    "torch",
    "F",
    "torch.nn.functional",
    "nn.functional",
];

/// Strips a known module prefix; `None` for an unknown module.
fn base_name(name: &str) -> Option<&str> {
    match name.rsplit_once('.') {
        None => Some(name),
        Some((module, base)) => MODULES.contains(&module).then_some(base),
    }
}

/// The value of a named constant (`math.pi`, `np.inf`, bare `pi`, `inf`, `nan`).
/// Bare `e` and `tau` are not constants: they are too likely to be variables.
pub fn constant(name: &str) -> Option<f64> {
    let qualified = name.contains('.');
    Some(match base_name(name)? {
        "pi" => std::f64::consts::PI,
        "inf" => f64::INFINITY,
        "nan" => f64::NAN,
        "e" if qualified => std::f64::consts::E,
        "tau" if qualified => std::f64::consts::TAU,
        _ => return None,
    })
}

fn float_unary(name: &str) -> Option<UnaryOp> {
    use UnaryOp::*;
    Some(match name {
        "sin" => Sin,
        "cos" => Cos,
        "tan" => Tan,
        "asin" | "arcsin" => Asin,
        "acos" | "arccos" => Acos,
        "atan" | "arctan" => Atan,
        "sinh" => Sinh,
        "cosh" => Cosh,
        "tanh" => Tanh,
        "exp" => Exp,
        "exp2" => Exp2,
        "expm1" => Expm1,
        "log" => Log,
        "log2" => Log2,
        "log10" => Log10,
        "log1p" => Log1p,
        "sqrt" => Sqrt,
        "cbrt" => Cbrt,
        "erf" => Erf,
        "erfc" => Erfc,
        _ => return None,
    })
}

fn rounding(name: &str) -> Option<UnaryOp> {
    Some(match name {
        "floor" => UnaryOp::Floor,
        "ceil" => UnaryOp::Ceil,
        "trunc" | "fix" => UnaryOp::Trunc,
        "round" | "rint" => UnaryOp::Round,
        _ => return None,
    })
}

/// Binary functions whose operands promote like arithmetic; `true` = computed in
/// floating point.
fn binary_fn(name: &str) -> Option<(BinaryOp, bool)> {
    use BinaryOp::*;
    Some(match name {
        "pow" | "power" | "float_power" => (Pow, true),
        "atan2" | "arctan2" => (Atan2, true),
        "hypot" => (Hypot, true),
        "copysign" => (Copysign, true),
        "fmod" => (Rem, false),
        "remainder" | "mod" => (Mod, false),
        "floor_divide" => (FloorDiv, false),
        "true_divide" | "divide" | "div" => (Div, true),
        "minimum" => (Min, false),
        "maximum" => (Max, false),
        "add" => (Add, false),
        "subtract" | "sub" => (Sub, false),
        "multiply" | "mul" => (Mul, false),
        _ => return None,
    })
}

fn reduction(name: &str) -> Option<ReduceOp> {
    Some(match name {
        "sum" => ReduceOp::Sum,
        "prod" => ReduceOp::Prod,
        "mean" => ReduceOp::Mean,
        "count" | "len" => ReduceOp::Count,
        "amin" => ReduceOp::Min,
        "amax" => ReduceOp::Max,
        _ => return None,
    })
}

fn cast_target(name: &str) -> Option<DType> {
    Some(match name {
        "float" | "float64" | "double" => DType::F64,
        "float32" => DType::F32,
        "int" | "int64" | "long" => DType::I64,
        "int32" => DType::I32,
        "bool" | "bool_" => DType::Bool,
        _ => return None,
    })
}

fn arity(lw: &Lower<'_>, name: &str, args: &[PyVal], n: usize) -> ParseResult<()> {
    if args.len() == n {
        Ok(())
    } else {
        lw.err(format!(
            "`{name}` takes {n} argument(s), got {}",
            args.len()
        ))
    }
}

fn apply_unary(lw: &mut Lower<'_>, op: UnaryOp, a: PyVal) -> ParseResult<PyVal> {
    let v = lw.typed(|b| b.unary(op, a.v))?;
    Ok(PyVal { v, weak: a.weak })
}

/// Lowers a call of `name` on already lowered arguments.
pub fn call(lw: &mut Lower<'_>, name: &str, args: &[PyVal]) -> ParseResult<PyVal> {
    let Some(base) = base_name(name) else {
        return lw.err(format!(
            "unknown module in `{name}`; use math, np, numpy, torch or F"
        ));
    };
    if let Some(op) = float_unary(base) {
        arity(lw, name, args, 1)?;
        let a = lw.floating(args[0])?;
        return apply_unary(lw, op, a);
    }
    if let Some(op) = rounding(base) {
        arity(lw, name, args, 1)?;
        // Rounding an integer is the integer itself (NumPy); a bool becomes i64.
        return match lw.dtype(args[0]) {
            d if d.is_float() => apply_unary(lw, op, args[0]),
            DType::Bool => lw.convert(args[0], DType::I64),
            _ => Ok(args[0]),
        };
    }
    if let Some((op, float)) = binary_fn(base) {
        arity(lw, name, args, 2)?;
        let (mut a, mut b, _) = lw.promote(args[0], args[1], true)?;
        if float {
            a = lw.floating(a)?;
            b = lw.floating(b)?;
        }
        let v = lw.typed(|bd| bd.binary(op, a.v, b.v))?;
        return Ok(PyVal {
            v,
            weak: a.weak && b.weak,
        });
    }
    if let Some(op) = reduction(base) {
        arity(lw, name, args, 1)?;
        return reduce(lw, op, args[0]);
    }
    if let Some(to) = cast_target(base) {
        arity(lw, name, args, 1)?;
        return lw.convert(args[0], to);
    }
    special(lw, name, base, args)
}

fn reduce(lw: &mut Lower<'_>, op: ReduceOp, a: PyVal) -> ParseResult<PyVal> {
    let a = match (op, lw.dtype(a)) {
        (ReduceOp::Mean, d) if !d.is_float() => lw.convert(a, DType::F64)?,
        (ReduceOp::Count, _) => a,
        (_, DType::Bool) => lw.convert(a, DType::I64)?,
        _ => a,
    };
    let v = lw.typed(|b| b.reduce(op, a.v))?;
    Ok(PyVal { v, weak: false })
}

/// Functions with their own arity rules or expansions.
fn special(lw: &mut Lower<'_>, name: &str, base: &str, args: &[PyVal]) -> ParseResult<PyVal> {
    match base {
        "abs" | "absolute" | "fabs" => {
            arity(lw, name, args, 1)?;
            let a = match lw.dtype(args[0]) {
                _ if base == "fabs" => lw.floating(args[0])?,
                DType::Bool => lw.convert(args[0], DType::I64)?,
                _ => args[0],
            };
            apply_unary(lw, UnaryOp::Abs, a)
        }
        "negative" | "neg" => {
            arity(lw, name, args, 1)?;
            let a = if lw.dtype(args[0]) == DType::Bool {
                lw.convert(args[0], DType::I64)?
            } else {
                args[0]
            };
            apply_unary(lw, UnaryOp::Neg, a)
        }
        "min" | "max" => min_max(lw, name, base == "min", args),
        "where" => {
            arity(lw, name, args, 3)?;
            let c = lw.truth(args[0])?;
            let (a, b, _) = lw.promote(args[1], args[2], false)?;
            let v = lw.typed(|bd| bd.select(c.v, a.v, b.v))?;
            Ok(PyVal { v, weak: false })
        }
        "filter" | "flatnonzero" => {
            arity(lw, name, args, 1)?;
            let mask = lw.truth(args[0])?;
            let v = lw.typed(|b| b.filter(mask.v))?;
            Ok(PyVal { v, weak: false })
        }
        "square" => {
            arity(lw, name, args, 1)?;
            lw.binary(super::ast::BinOp::Mul, args[0], args[0])
        }
        "sigmoid" => {
            // 1 / (1 + exp(-x)), in the dtype of x (f64 for ints).
            arity(lw, name, args, 1)?;
            let x = lw.floating(args[0])?;
            let neg = apply_unary(lw, UnaryOp::Neg, x)?;
            let exp = apply_unary(lw, UnaryOp::Exp, neg)?;
            let one = lw.literal(Scalar::F64(1.0));
            let denom = lw.binary(super::ast::BinOp::Add, one, exp)?;
            lw.binary(super::ast::BinOp::Div, one, denom)
        }
        "isnan" | "isinf" | "isfinite" => {
            arity(lw, name, args, 1)?;
            let x = lw.floating(args[0])?;
            let (op, lhs, rhs) = match base {
                "isnan" => (kiln_ir::CmpOp::Ne, x, x),
                _ => {
                    let abs = apply_unary(lw, UnaryOp::Abs, x)?;
                    let inf = lw.literal(Scalar::F64(f64::INFINITY));
                    let inf = lw.convert(inf, lw.dtype(x))?;
                    (
                        if base == "isinf" {
                            kiln_ir::CmpOp::Eq
                        } else {
                            kiln_ir::CmpOp::Lt
                        },
                        abs,
                        inf,
                    )
                }
            };
            let v = lw.typed(|b| b.compare(op, lhs.v, rhs.v))?;
            Ok(PyVal { v, weak: false })
        }
        _ => lw.err(format!("unknown function `{name}`")),
    }
}

/// `min(x)` reduces a column; `min(a, b, …)` is the elementwise minimum.
fn min_max(lw: &mut Lower<'_>, name: &str, is_min: bool, args: &[PyVal]) -> ParseResult<PyVal> {
    match args {
        [] => lw.err(format!("`{name}` takes at least one argument")),
        [a] => reduce(lw, if is_min { ReduceOp::Min } else { ReduceOp::Max }, *a),
        [first, rest @ ..] => {
            let op = if is_min { BinaryOp::Min } else { BinaryOp::Max };
            let mut acc = *first;
            for &next in rest {
                let (a, b, _) = lw.promote(acc, next, true)?;
                let v = lw.typed(|bd| bd.binary(op, a.v, b.v))?;
                acc = PyVal {
                    v,
                    weak: a.weak && b.weak,
                };
            }
            Ok(acc)
        }
    }
}
