//! The one table of functions and constants the Python subset and
//! `kiln-arrow`'s pandas queries know, by bare name or with a module prefix
//! (`math.`, `np.`, `numpy.`, `torch.`, `F.`, `torch.nn.functional.`), and how
//! each lowers to graph ops with NumPy's meaning ([`super::numpy`]).
//!
//! Adding a function is one line in the `functions!` table plus, for an
//! expansion, one arm in `expand`.

use super::ast::BinOp;
use super::numpy::{Np, NpResult, PyVal};
use kiln_ir::{BinaryOp, CmpOp, DType, ReduceOp, Scalar, UnaryOp};

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

/// Strips a known module prefix (`np.sin` is `sin`); `None` for an unknown
/// module.
pub fn base_name(name: &str) -> Option<&str> {
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

/// How a function lowers.
#[derive(Copy, Clone, Debug)]
enum Kind {
    /// A float function of one argument (ints convert to `f64`).
    Float(UnaryOp),
    /// Rounding: the op on floats, an int unchanged, a bool to `i64`.
    Round(UnaryOp),
    /// An IR op of two arguments after promotion; `true`: in floating point.
    Binary(BinaryOp, bool),
    /// A Python operator by its NumPy name (`left_shift`, `bitwise_and`).
    Operator(BinOp),
    /// A Python unary operator by its NumPy name (`logical_not`, `invert`).
    Unary(super::ast::UnOp),
    /// A comparison by its NumPy name (`greater`).
    Compare(CmpOp),
    /// A reduction of a column to a scalar.
    Reduce(ReduceOp),
    /// A conversion.
    Cast(DType),
    /// An expansion with its own rules (`expand`).
    Expand(Expansion),
}

/// Functions with their own arity rules or expansions.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Expansion {
    Abs,
    Fabs,
    Neg,
    Pos,
    Min,
    Max,
    FMin,
    FMax,
    Where,
    Filter,
    Square,
    Sigmoid,
    IsNan,
    IsInf,
    IsFinite,
    Sign,
    Signbit,
    LogAddExp,
    Deg2Rad,
    Rad2Deg,
    Clip,
    Identity,
    FloatPower,
}

macro_rules! functions {
    ($($($name:literal)|+ => $kind:expr,)*) => {
        /// Every function name the table knows (for "did you mean").
        pub const NAMES: &[&str] = &[$($($name),+),*];

        /// The lowering of a bare function name, and its canonical spelling.
        fn lookup(name: &str) -> Option<(&'static str, Kind)> {
            use Kind::*;
            use Expansion as S;
            use UnaryOp as U;
            use BinaryOp as B;
            Some(match name {
                $($($name)|+ => {
                    let names: &[&'static str] = &[$($name),+];
                    let canonical = names.iter().find(|n| **n == name).copied();
                    (canonical.expect("the name matched"), $kind)
                })*
                _ => return None,
            })
        }
    };
}

functions! {
    "sin" => Float(U::Sin),
    "cos" => Float(U::Cos),
    "tan" => Float(U::Tan),
    "asin" | "arcsin" => Float(U::Asin),
    "acos" | "arccos" => Float(U::Acos),
    "atan" | "arctan" => Float(U::Atan),
    "sinh" => Float(U::Sinh),
    "cosh" => Float(U::Cosh),
    "tanh" => Float(U::Tanh),
    "asinh" | "arcsinh" => Float(U::Asinh),
    "acosh" | "arccosh" => Float(U::Acosh),
    "atanh" | "arctanh" => Float(U::Atanh),
    "exp" => Float(U::Exp),
    "exp2" => Float(U::Exp2),
    "expm1" => Float(U::Expm1),
    "log" => Float(U::Log),
    "log2" => Float(U::Log2),
    "log10" => Float(U::Log10),
    "log1p" => Float(U::Log1p),
    "sqrt" => Float(U::Sqrt),
    "cbrt" => Float(U::Cbrt),
    "erf" => Float(U::Erf),
    "erfc" => Float(U::Erfc),
    "floor" => Round(U::Floor),
    "ceil" => Round(U::Ceil),
    "trunc" | "fix" => Round(U::Trunc),
    "round" | "rint" | "around" => Round(U::Round),
    "pow" | "power" => Operator(BinOp::Pow),
    "float_power" => Expand(S::FloatPower),
    "atan2" | "arctan2" => Binary(B::Atan2, true),
    "hypot" => Binary(B::Hypot, true),
    "copysign" => Binary(B::Copysign, true),
    "nextafter" => Binary(B::NextAfter, true),
    "fmod" => Binary(B::Rem, false),
    "remainder" | "mod" => Binary(B::Mod, false),
    "floor_divide" => Binary(B::FloorDiv, false),
    "true_divide" | "divide" | "div" => Operator(BinOp::Div),
    "add" => Binary(B::Add, false),
    "subtract" | "sub" => Binary(B::Sub, false),
    "multiply" | "mul" => Binary(B::Mul, false),
    "minimum" => Binary(B::Min, false),
    "maximum" => Binary(B::Max, false),
    "fmin" => Expand(S::FMin),
    "fmax" => Expand(S::FMax),
    "logaddexp" => Expand(S::LogAddExp),
    "left_shift" => Operator(BinOp::Shl),
    "right_shift" => Operator(BinOp::Shr),
    "bitwise_and" => Operator(BinOp::BitAnd),
    "bitwise_or" => Operator(BinOp::BitOr),
    "bitwise_xor" => Operator(BinOp::BitXor),
    "logical_and" => Operator(BinOp::And),
    "logical_or" => Operator(BinOp::Or),
    "greater" => Compare(CmpOp::Gt),
    "greater_equal" => Compare(CmpOp::Ge),
    "less" => Compare(CmpOp::Lt),
    "less_equal" => Compare(CmpOp::Le),
    "equal" => Compare(CmpOp::Eq),
    "not_equal" => Compare(CmpOp::Ne),
    "sum" => Reduce(ReduceOp::Sum),
    "prod" => Reduce(ReduceOp::Prod),
    "mean" => Reduce(ReduceOp::Mean),
    "count" | "len" => Reduce(ReduceOp::Count),
    "amin" => Reduce(ReduceOp::Min),
    "amax" => Reduce(ReduceOp::Max),
    "float" | "float64" | "double" => Cast(DType::F64),
    "float32" => Cast(DType::F32),
    "int" | "int64" | "long" => Cast(DType::I64),
    "int32" => Cast(DType::I32),
    "bool" | "bool_" => Cast(DType::Bool),
    "abs" | "absolute" => Expand(S::Abs),
    "fabs" => Expand(S::Fabs),
    "negative" | "neg" => Expand(S::Neg),
    "positive" => Expand(S::Pos),
    "min" => Expand(S::Min),
    "max" => Expand(S::Max),
    "where" => Expand(S::Where),
    "filter" | "flatnonzero" => Expand(S::Filter),
    "square" => Expand(S::Square),
    "sigmoid" => Expand(S::Sigmoid),
    "isnan" => Expand(S::IsNan),
    "isinf" => Expand(S::IsInf),
    "isfinite" => Expand(S::IsFinite),
    "sign" => Expand(S::Sign),
    "signbit" => Expand(S::Signbit),
    "deg2rad" | "radians" => Expand(S::Deg2Rad),
    "rad2deg" | "degrees" => Expand(S::Rad2Deg),
    "clip" => Expand(S::Clip),
    "real" | "conj" | "conjugate" => Expand(S::Identity),
    "logical_not" => Unary(super::ast::UnOp::Not),
    "invert" | "bitwise_not" => Unary(super::ast::UnOp::Invert),
}

/// Why a call could not be lowered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallError {
    /// No function of that name (the message names the nearest known one).
    Unknown(String),
    /// The function exists but not for these arguments.
    Invalid(String),
}

impl CallError {
    /// The message.
    pub fn message(&self) -> &str {
        match self {
            CallError::Unknown(m) | CallError::Invalid(m) => m,
        }
    }
}

impl From<String> for CallError {
    fn from(m: String) -> Self {
        CallError::Invalid(m)
    }
}

/// The canonical name of a known function (`np.arcsinh` gives `arcsinh`), or
/// `None`.
pub fn canonical(name: &str) -> Option<&'static str> {
    base_name(name).and_then(lookup).map(|(n, _)| n)
}

/// How many arguments the function called `name` takes, `None` for any
/// number from one (`min`, `max`) or an unknown name.
pub fn arity_of(name: &str) -> Option<usize> {
    use Expansion as S;
    Some(match base_name(name).and_then(lookup)?.1 {
        Kind::Binary(..) | Kind::Operator(_) | Kind::Compare(_) => 2,
        Kind::Expand(S::Min | S::Max) => return None,
        Kind::Expand(S::Where | S::Clip) => 3,
        Kind::Expand(S::FMin | S::FMax | S::LogAddExp | S::FloatPower) => 2,
        Kind::Float(_)
        | Kind::Round(_)
        | Kind::Unary(_)
        | Kind::Reduce(_)
        | Kind::Cast(_)
        | Kind::Expand(_) => 1,
    })
}

/// True when the function called `name` is computed row by row (not a
/// reduction nor `filter`) for `n_args` arguments.
pub fn is_elementwise(name: &str, n_args: usize) -> bool {
    match base_name(name).and_then(lookup) {
        Some((_, Kind::Reduce(_) | Kind::Expand(Expansion::Filter))) => false,
        Some((_, Kind::Expand(Expansion::Min | Expansion::Max))) => n_args >= 2,
        Some(_) => true,
        None => false,
    }
}

/// "unknown function `frob`", with the nearest name of [`NAMES`] and `extra`
/// when one is close.
pub fn unknown_message(name: &str, extra: &[&str]) -> String {
    let base = base_name(name).unwrap_or(name);
    let nearest = NAMES
        .iter()
        .chain(extra)
        .map(|n| (edit_distance(base, n), *n))
        .filter(|&(d, n)| d <= (n.len().max(base.len()) / 3).max(1))
        .min();
    match nearest {
        Some((_, n)) => format!("unknown function `{name}`; did you mean `{n}`?"),
        None => format!("unknown function `{name}`"),
    }
}

/// Edit distance in characters, a swap of two neighbours counting one
/// (optimal string alignment: `lgo` is one edit from `log`).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let width = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * width];
    for (i, row) in d.chunks_mut(width).enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[..width].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[(i - 1) * width + j] + 1)
                .min(d[i * width + j - 1] + 1)
                .min(d[(i - 1) * width + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[(i - 2) * width + j - 2] + 1);
            }
            d[i * width + j] = best;
        }
    }
    d[a.len() * width + b.len()]
}

fn arity(name: &str, args: &[PyVal], n: usize) -> NpResult<()> {
    if args.len() == n {
        Ok(())
    } else {
        Err(format!(
            "`{name}` takes {n} argument(s), got {}",
            args.len()
        ))
    }
}

/// Lowers a call of `name` on already lowered arguments.
pub fn call(np: &mut Np<'_>, name: &str, args: &[PyVal]) -> Result<PyVal, CallError> {
    let Some(base) = base_name(name) else {
        return Err(CallError::Unknown(format!(
            "unknown module in `{name}`; use math, np, numpy, torch or F"
        )));
    };
    let Some((_, kind)) = lookup(base) else {
        return Err(CallError::Unknown(unknown_message(name, &[])));
    };
    Ok(match kind {
        Kind::Float(op) => {
            arity(name, args, 1)?;
            let a = np.floating(args[0])?;
            np.apply_unary(op, a)?
        }
        Kind::Round(op) => {
            arity(name, args, 1)?;
            // Rounding an integer is the integer itself (NumPy); a bool becomes i64.
            match np.dtype(args[0]) {
                d if d.is_float() => np.apply_unary(op, args[0])?,
                _ => np.numeric(args[0])?,
            }
        }
        Kind::Binary(op, float) => {
            arity(name, args, 2)?;
            let (mut a, mut b, _) = np.promote(args[0], args[1], true)?;
            if float {
                a = np.floating(a)?;
                b = np.floating(b)?;
            }
            np.apply_binary(op, a, b)?
        }
        Kind::Unary(op) => {
            arity(name, args, 1)?;
            np.unary(op, args[0])?
        }
        Kind::Operator(op) => {
            arity(name, args, 2)?;
            np.binary(op, args[0], args[1])?
        }
        Kind::Compare(op) => {
            arity(name, args, 2)?;
            np.compare(op, args[0], args[1])?
        }
        Kind::Reduce(op) => {
            arity(name, args, 1)?;
            reduce(np, op, args[0])?
        }
        Kind::Cast(to) => {
            arity(name, args, 1)?;
            np.convert(args[0], to)?
        }
        Kind::Expand(s) => expand(np, name, s, args)?,
    })
}

fn reduce(np: &mut Np<'_>, op: ReduceOp, a: PyVal) -> NpResult<PyVal> {
    let a = match (op, np.dtype(a)) {
        (ReduceOp::Mean, d) if !d.is_float() => np.convert(a, DType::F64)?,
        (ReduceOp::Count, _) => a,
        (_, DType::Bool) => np.convert(a, DType::I64)?,
        _ => a,
    };
    let v = np.typed(|b| b.reduce(op, a.v))?;
    Ok(PyVal { v, weak: false })
}

/// The expansions, each NumPy's definition written in IR ops.
fn expand(np: &mut Np<'_>, name: &str, s: Expansion, args: &[PyVal]) -> NpResult<PyVal> {
    use Expansion as S;
    match s {
        S::Min | S::Max => return min_max(np, name, s == S::Min, args),
        S::FMin | S::FMax | S::LogAddExp | S::FloatPower => {
            arity(name, args, 2)?;
            return binary_special(np, s, args[0], args[1]);
        }
        S::Where => {
            arity(name, args, 3)?;
            let c = np.truth(args[0])?;
            let (a, b, _) = np.promote(args[1], args[2], false)?;
            let v = np.select(c, a, b)?;
            return Ok(PyVal { weak: false, ..v });
        }
        S::Clip => {
            arity(name, args, 3)?;
            return clip(np, args[0], args[1], args[2]);
        }
        _ => arity(name, args, 1)?,
    }
    let x = args[0];
    match s {
        S::Abs => {
            let a = np.numeric(x)?;
            np.apply_unary(UnaryOp::Abs, a)
        }
        S::Fabs => {
            let a = np.floating(x)?;
            np.apply_unary(UnaryOp::Abs, a)
        }
        S::Neg => np.unary(super::ast::UnOp::Neg, x),
        S::Pos => np.unary(super::ast::UnOp::Pos, x),
        S::Filter => {
            let mask = np.truth(x)?;
            let v = np.typed(|b| b.filter(mask.v))?;
            Ok(PyVal { v, weak: false })
        }
        S::Square => np.binary(BinOp::Mul, x, x),
        S::Sigmoid => {
            // 1 / (1 + exp(-x)), in the dtype of x (f64 for ints).
            let x = np.floating(x)?;
            let neg = np.apply_unary(UnaryOp::Neg, x)?;
            let exp = np.apply_unary(UnaryOp::Exp, neg)?;
            let one = np.literal(Scalar::F64(1.0));
            let denom = np.binary(BinOp::Add, one, exp)?;
            np.binary(BinOp::Div, one, denom)
        }
        S::IsNan | S::IsInf | S::IsFinite => {
            // `x != x` is NaN; an int or bool is never NaN nor infinite, so
            // for them `x != x` (false) and `x == x` (true) give NumPy's
            // bool array of x's shape.
            let v = if s == S::IsNan || !np.dtype(x).is_float() {
                let op = if s == S::IsFinite {
                    CmpOp::Eq
                } else {
                    CmpOp::Ne
                };
                np.compare(op, x, x)?
            } else {
                let abs = np.apply_unary(UnaryOp::Abs, x)?;
                let inf = np.constant_like(x, f64::INFINITY);
                let op = if s == S::IsInf { CmpOp::Eq } else { CmpOp::Lt };
                np.compare(op, abs, inf)?
            };
            Ok(PyVal { weak: false, ..v })
        }
        S::Sign => sign(np, x),
        S::Signbit => {
            // x < 0, or x == 0 with a negative sign; false for NaN (kiln
            // leaves a NaN's sign unspecified: docs/frontends.md).
            let x = np.numeric(x)?;
            let zero = np.constant_like(x, 0.0);
            let negative = np.compare(CmpOp::Lt, x, zero)?;
            if !np.dtype(x).is_float() {
                return Ok(negative);
            }
            let is_zero = np.compare(CmpOp::Eq, x, zero)?;
            let one = np.constant_like(x, 1.0);
            let signed = np.apply_binary(BinaryOp::Copysign, one, x)?;
            let negative_zero = np.compare(CmpOp::Lt, signed, zero)?;
            let negative_zero = np.apply_binary(BinaryOp::And, is_zero, negative_zero)?;
            np.apply_binary(BinaryOp::Or, negative, negative_zero)
        }
        S::Deg2Rad | S::Rad2Deg => {
            // `x * (T)(pi / 180)` and `x * (T)(180 / pi)` (npy_deg2rad: the
            // factor is computed in f64 and rounded to the dtype once).
            let x = np.floating(x)?;
            let factor = if s == S::Deg2Rad {
                std::f64::consts::PI / 180.0
            } else {
                180.0 / std::f64::consts::PI
            };
            let factor = np.constant_like(x, factor);
            let v = np.apply_binary(BinaryOp::Mul, x, factor)?;
            Ok(PyVal { weak: x.weak, ..v })
        }
        // The real part and the conjugate of a real number are the number.
        S::Identity => Ok(x),
        S::Min | S::Max | S::FMin | S::FMax | S::LogAddExp | S::FloatPower | S::Where | S::Clip => {
            unreachable!("handled above")
        }
    }
}

/// NumPy's `sign`: 1, -1 or 0 of the argument's dtype; NaN for NaN, and
/// `+0.0` for either zero (`x > 0 ? 1 : x < 0 ? -1 : x == 0 ? 0 : x`).
fn sign(np: &mut Np<'_>, x: PyVal) -> NpResult<PyVal> {
    let x = np.numeric(x)?;
    let zero = np.constant_like(x, 0.0);
    let one = np.constant_like(x, 1.0);
    let minus_one = np.constant_like(x, -1.0);
    let positive = np.compare(CmpOp::Gt, x, zero)?;
    let negative = np.compare(CmpOp::Lt, x, zero)?;
    let is_zero = np.compare(CmpOp::Eq, x, zero)?;
    let rest = np.select(is_zero, zero, x)?;
    let rest = np.select(negative, minus_one, rest)?;
    let v = np.select(positive, one, rest)?;
    Ok(PyVal { weak: x.weak, ..v })
}

/// NumPy's `clip(x, lo, hi)` as `minimum(maximum(x, lo), hi)`: NaN in any
/// argument gives NaN, and zeros order as kiln's `max`/`min` do (`-0.0 <
/// +0.0`, as NumPy's clip with array bounds; with scalar bounds NumPy keeps
/// `x`'s zero, so the two disagree only on the sign of a zero result).
fn clip(np: &mut Np<'_>, x: PyVal, lo: PyVal, hi: PyVal) -> NpResult<PyVal> {
    let (x, lo, _) = np.promote(x, lo, true)?;
    let (x, hi, common) = np.promote(x, hi, true)?;
    let lo = np.convert(lo, common)?;
    let low = np.apply_binary(BinaryOp::Max, x, lo)?;
    np.apply_binary(BinaryOp::Min, low, hi)
}

/// `fmin`, `fmax` (a NaN loses to a number; NumPy's `a >= b ? a : b`, so
/// of two equal zeros the first wins), `logaddexp` (NumPy's `npy_logaddexp`) and `float_power` (`pow`
/// in at least `f64`).
fn binary_special(np: &mut Np<'_>, s: Expansion, a: PyVal, b: PyVal) -> NpResult<PyVal> {
    let (a, b, common) = np.promote(a, b, true)?;
    let weak = a.weak && b.weak;
    let v = match s {
        Expansion::FMin | Expansion::FMax => {
            // (a >= b || isnan(b)) ? a : b, and `<=` for fmin.
            let op = if s == Expansion::FMin {
                CmpOp::Le
            } else {
                CmpOp::Ge
            };
            let mut keep = np.compare(op, a, b)?;
            if common.is_float() {
                let b_nan = np.is_nan(b)?;
                keep = np.apply_binary(BinaryOp::Or, keep, b_nan)?;
            }
            np.select(keep, a, b)?
        }
        Expansion::LogAddExp => {
            // x == y: x + ln 2 (same-signed infinities); else the larger plus
            // log1p(exp(-|x - y|)); NaN stays NaN.
            let (x, y) = (np.floating(a)?, np.floating(b)?);
            let ln2 = np.constant_like(x, std::f64::consts::LN_2);
            let equal = np.compare(CmpOp::Eq, x, y)?;
            let tmp = np.apply_binary(BinaryOp::Sub, x, y)?;
            let zero = np.constant_like(x, 0.0);
            let positive = np.compare(CmpOp::Gt, tmp, zero)?;
            let not_positive = np.compare(CmpOp::Le, tmp, zero)?;
            let neg_tmp = np.apply_unary(UnaryOp::Neg, tmp)?;
            let tail = |np: &mut Np<'_>, big: PyVal, t: PyVal| -> NpResult<PyVal> {
                let e = np.apply_unary(UnaryOp::Exp, t)?;
                let l = np.apply_unary(UnaryOp::Log1p, e)?;
                np.apply_binary(BinaryOp::Add, big, l)
            };
            let from_x = tail(np, x, neg_tmp)?;
            let from_y = tail(np, y, tmp)?;
            let same = np.apply_binary(BinaryOp::Add, x, ln2)?;
            let v = np.select(not_positive, from_y, tmp)?;
            let v = np.select(positive, from_x, v)?;
            np.select(equal, same, v)?
        }
        Expansion::FloatPower => {
            let a = np.convert(a, DType::F64)?;
            let b = np.convert(b, DType::F64)?;
            np.apply_binary(BinaryOp::Pow, a, b)?
        }
        _ => unreachable!("only the binary specials"),
    };
    Ok(PyVal { weak, ..v })
}

/// `min(x)` reduces a column; `min(a, b, …)` is the elementwise minimum.
fn min_max(np: &mut Np<'_>, name: &str, is_min: bool, args: &[PyVal]) -> NpResult<PyVal> {
    match args {
        [] => Err(format!("`{name}` takes at least one argument")),
        [a] => reduce(np, if is_min { ReduceOp::Min } else { ReduceOp::Max }, *a),
        [first, rest @ ..] => {
            let op = if is_min { BinaryOp::Min } else { BinaryOp::Max };
            let mut acc = *first;
            for &next in rest {
                let (a, b, _) = np.promote(acc, next, true)?;
                acc = np.apply_binary(op, a, b)?;
            }
            Ok(acc)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_names_suggest_the_nearest() {
        assert_eq!(
            unknown_message("arcsinhh", &[]),
            "unknown function `arcsinhh`; did you mean `arcsinh`?"
        );
        assert_eq!(
            unknown_message("np.lgo", &[]),
            "unknown function `np.lgo`; did you mean `log`?"
        );
        assert_eq!(
            unknown_message("frobnicate", &[]),
            "unknown function `frobnicate`"
        );
        assert_eq!(
            unknown_message("isnul", &["isnull"]),
            "unknown function `isnul`; did you mean `isnull`?"
        );
    }

    #[test]
    fn the_table_gives_canonical_names() {
        assert_eq!(canonical("np.arcsinh"), Some("arcsinh"));
        assert_eq!(canonical("asinh"), Some("asinh"));
        assert_eq!(canonical("frob"), None);
        assert!(is_elementwise("clip", 3));
        assert!(!is_elementwise("sum", 1));
        assert!(!is_elementwise("min", 1));
        assert!(is_elementwise("min", 2));
        assert_eq!(arity_of("np.clip"), Some(3));
        assert_eq!(arity_of("logaddexp"), Some(2));
        assert_eq!(arity_of("isinf"), Some(1));
        assert_eq!(arity_of("max"), None);
    }
}
