//! Expression trees over the columns of a record batch, and the builder API
//! (Gandiva's `TreeExprBuilder`: field, literal, function, and/or, condition).
//!
//! ```
//! use kiln_arrow::expr::{field, lit, and};
//! let seed = and(vec![field("x").gt(lit(2.0)), field("x").lt(lit(6.0))]);
//! assert_eq!(seed.to_string(), "((x > 2.0) & (x < 6.0))");
//! ```
//!
//! Trees nest at most [`MAX_DEPTH`] levels; compiling a deeper tree is an error.

use crate::Error;
use kiln::ir::{BinaryOp, CmpOp, UnaryOp};
use kiln::{DType, Scalar};
use std::fmt;

/// How deeply an expression may nest. Parsed queries and built trees are
/// checked (without recursion) before anything walks them recursively.
pub const MAX_DEPTH: usize = 1000;

/// A literal.
#[derive(Clone, Debug, PartialEq)]
pub enum Literal {
    /// A typed value.
    Value(Scalar),
    /// SQL `NULL` of a dtype.
    Null(DType),
    /// A number written in a query without a type (`2`): it takes the type of
    /// the column it meets (`i32` beside an `i32` column, `f64` beside `f64`).
    Int(i64),
    /// A float written in a query (`2.5`): `f32` beside an `f32` column,
    /// else `f64`.
    Float(f64),
}

/// A function of an [`Expr::Call`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Func {
    /// An elementwise math op of one argument (`neg`, `abs`, `sqrt`, `sin`…);
    /// integer arguments of float-only ops are converted to `f64`.
    Unary(UnaryOp),
    /// Arithmetic of two arguments (`add`, `sub`, `mul`, `div`, `floordiv`,
    /// `mod`, `pow`, `min`, `max`, shifts…), after promotion to one dtype.
    Binary(BinaryOp),
    /// Division in floating point whatever the operands (Python `/`).
    TrueDiv,
    /// A comparison; the result is `bool`.
    Compare(CmpOp),
    /// A comparison in DataFusion's order: on floats NaN is above `+inf` and
    /// equal to NaN, and `-0.0 == +0.0` (`docs/semantics.md`, "Arrow"); on
    /// other dtypes [`Func::Compare`].
    TotalCompare(CmpOp),
    /// Kleene AND on `bool` (`false & null` is `false`); bitwise on ints.
    And,
    /// Kleene OR on `bool` (`true | null` is `true`); bitwise on ints.
    Or,
    /// Exclusive or: logical on `bool`, bitwise on ints; null if either is.
    Xor,
    /// Logical not on `bool`, bitwise on ints.
    Not,
    /// True where the argument is null; never null itself.
    IsNull,
    /// True where the argument is not null; never null itself.
    IsNotNull,
    /// The first argument that is not null (null if all are).
    Coalesce,
    /// `if(cond, then, else)`: a null condition counts as false (SQL `CASE`).
    If,
    /// Conversion to a dtype (`docs/semantics.md`: float → int saturates).
    Cast(DType),
    /// `isin(x, a, b, …)`: whether `x` equals one of the literals after it,
    /// in [`Func::TotalCompare`]'s meaning (NaN equals NaN, `-0.0` equals
    /// `0.0`); null where `x` is, and (SQL's `IN`) where `x` is not found and
    /// a literal is `NULL`. pandas' `isin` and `in`, SQL's `IN (list)`.
    In,
    /// An elementwise function of the Python subset's table, by its canonical
    /// name (`arcsinh`, `clip`, `isinf`, `power`…), with NumPy's meaning
    /// (`kiln::frontend::py::funcs`); null if any argument is.
    Numpy(&'static str),
}

impl Func {
    /// The function called `name`: Gandiva's names (`add`, `subtract`,
    /// `multiply`, `divide`, `less_than`, `greater_than_or_equal_to`,
    /// `equal`, `not_equal`, `negative`, `isnull`, `isnotnull`, `coalesce`,
    /// `if`, `and`, `or`, `not`, `xor`), and kiln's op names (`floordiv`,
    /// `mod`, `pow`, `sqrt`, `sin`, `lt`, `ge`, …; `docs/semantics.md`).
    pub fn from_name(name: &str) -> Option<Func> {
        let func = match name {
            "add" => Func::Binary(BinaryOp::Add),
            "subtract" => Func::Binary(BinaryOp::Sub),
            "multiply" => Func::Binary(BinaryOp::Mul),
            "divide" => Func::Binary(BinaryOp::Div),
            "true_divide" => Func::TrueDiv,
            "negative" => Func::Unary(UnaryOp::Neg),
            "equal" => Func::Compare(CmpOp::Eq),
            "not_equal" => Func::Compare(CmpOp::Ne),
            "less_than" => Func::Compare(CmpOp::Lt),
            "less_than_or_equal_to" => Func::Compare(CmpOp::Le),
            "greater_than" => Func::Compare(CmpOp::Gt),
            "greater_than_or_equal_to" => Func::Compare(CmpOp::Ge),
            "and" | "band" | "bitwise_and" => Func::And,
            "or" | "bor" | "bitwise_or" => Func::Or,
            "xor" | "bxor" | "bitwise_xor" => Func::Xor,
            "not" | "bnot" | "bitwise_not" => Func::Not,
            "isnull" | "isna" | "is_null" => Func::IsNull,
            "isnotnull" | "notnull" | "notna" | "is_not_null" => Func::IsNotNull,
            "coalesce" => Func::Coalesce,
            "if" | "where" => Func::If,
            "isin" => Func::In,
            _ => {
                if let Some(op) = UnaryOp::from_name(name) {
                    Func::Unary(op)
                } else if let Some(op) = BinaryOp::from_name(name) {
                    Func::Binary(op)
                } else if let Some(op) = CmpOp::from_name(name) {
                    Func::Compare(op)
                } else if let Some(op) = name.strip_prefix("total_").and_then(CmpOp::from_name) {
                    Func::TotalCompare(op)
                } else if let Some(dtype) = name.strip_prefix("cast_").and_then(DType::from_name) {
                    Func::Cast(dtype)
                } else {
                    Func::numpy(name, 2)?
                }
            }
        };
        Some(func.normalized())
    }

    /// The elementwise function of the Python subset's table called `name`,
    /// for `n_args` arguments (`min(x)` reduces, so it is none).
    pub fn numpy(name: &str, n_args: usize) -> Option<Func> {
        use kiln::frontend::py::funcs;
        funcs::canonical(name)
            .filter(|_| funcs::is_elementwise(name, n_args))
            .map(Func::Numpy)
    }

    /// Logical and bitwise ops as one function each (`band` is `and`).
    fn normalized(self) -> Func {
        match self {
            Func::Binary(BinaryOp::And | BinaryOp::BAnd) => Func::And,
            Func::Binary(BinaryOp::Or | BinaryOp::BOr) => Func::Or,
            Func::Binary(BinaryOp::Xor | BinaryOp::BXor) => Func::Xor,
            Func::Unary(UnaryOp::Not | UnaryOp::BNot) => Func::Not,
            f => f,
        }
    }

    /// How many arguments the function takes: `Some(n)`, or `None` for any
    /// number from one (`and`, `or`, `coalesce`).
    pub fn arity(self) -> Option<usize> {
        match self {
            Func::And | Func::Or | Func::Coalesce | Func::In => None,
            Func::Numpy(name) => kiln::frontend::py::funcs::arity_of(name),
            Func::Unary(_) | Func::Not | Func::IsNull | Func::IsNotNull | Func::Cast(_) => Some(1),
            Func::Binary(_)
            | Func::TrueDiv
            | Func::Compare(_)
            | Func::TotalCompare(_)
            | Func::Xor => Some(2),
            Func::If => Some(3),
        }
    }

    /// The name [`Func::from_name`] reads back.
    pub fn name(self) -> String {
        match self {
            Func::Unary(op) => op.name().to_string(),
            Func::Binary(op) => op.name().to_string(),
            Func::TrueDiv => "true_divide".into(),
            Func::Compare(op) => op.name().to_string(),
            Func::TotalCompare(op) => format!("total_{}", op.name()),
            Func::And => "and".into(),
            Func::Or => "or".into(),
            Func::Xor => "xor".into(),
            Func::Not => "not".into(),
            Func::IsNull => "isnull".into(),
            Func::IsNotNull => "isnotnull".into(),
            Func::Coalesce => "coalesce".into(),
            Func::If => "if".into(),
            Func::In => "isin".into(),
            Func::Cast(d) => format!("cast_{d}"),
            Func::Numpy(name) => name.to_string(),
        }
    }

    /// The infix operator the query syntax writes for this function, if any.
    fn infix(self) -> Option<&'static str> {
        Some(match self {
            Func::Binary(BinaryOp::Add) => "+",
            Func::Binary(BinaryOp::Sub) => "-",
            Func::Binary(BinaryOp::Mul) => "*",
            Func::TrueDiv => "/",
            Func::Binary(BinaryOp::FloorDiv) => "//",
            Func::Binary(BinaryOp::Mod) => "%",
            Func::Binary(BinaryOp::Pow) | Func::Numpy("power") => "**",
            Func::Binary(BinaryOp::Shl) | Func::Numpy("left_shift") => "<<",
            Func::Binary(BinaryOp::ShrArith) | Func::Numpy("right_shift") => ">>",
            Func::Compare(CmpOp::Eq) => "==",
            Func::Compare(CmpOp::Ne) => "!=",
            Func::Compare(CmpOp::Lt) => "<",
            Func::Compare(CmpOp::Le) => "<=",
            Func::Compare(CmpOp::Gt) => ">",
            Func::Compare(CmpOp::Ge) => ">=",
            Func::And => "&",
            Func::Or => "|",
            Func::Xor => "^",
            _ => return None,
        })
    }
}

/// An expression over the columns of a batch.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// A column, by name.
    Field(String),
    /// A literal (broadcast to every row).
    Literal(Literal),
    /// A function of its arguments.
    Call(Func, Vec<Expr>),
}

/// A column by name.
pub fn field(name: &str) -> Expr {
    Expr::Field(name.to_string())
}

/// A typed literal: `lit(2.0)` is an `f64`, `lit(2i32)` an `i32`, `lit(true)` a `bool`.
pub fn lit(value: impl Into<Scalar>) -> Expr {
    Expr::Literal(Literal::Value(value.into()))
}

/// A null literal of `dtype`.
pub fn null(dtype: DType) -> Expr {
    Expr::Literal(Literal::Null(dtype))
}

/// The function called `name` (see [`Func::from_name`]) applied to `args`.
pub fn call(name: &str, args: Vec<Expr>) -> Result<Expr, Error> {
    let func = Func::from_name(name).ok_or_else(|| Error::UnknownFunction(name.to_string()))?;
    Ok(Expr::Call(func, args))
}

/// Kleene AND of all of `args`.
pub fn and(args: Vec<Expr>) -> Expr {
    Expr::Call(Func::And, args)
}

/// Kleene OR of all of `args`.
pub fn or(args: Vec<Expr>) -> Expr {
    Expr::Call(Func::Or, args)
}

/// `if cond then a else b`, a null `cond` choosing `b`.
pub fn if_then_else(cond: Expr, a: Expr, b: Expr) -> Expr {
    Expr::Call(Func::If, vec![cond, a, b])
}

/// The first of `args` that is not null.
pub fn coalesce(args: Vec<Expr>) -> Expr {
    Expr::Call(Func::Coalesce, args)
}

macro_rules! binary_methods {
    ($($(#[$m:meta])* $name:ident => $func:expr,)*) => {
        impl Expr {
            $(
                $(#[$m])*
                pub fn $name(self, other: Expr) -> Expr {
                    Expr::Call($func, vec![self, other])
                }
            )*
        }
    };
}

binary_methods! {
    /// `self == other`.
    eq => Func::Compare(CmpOp::Eq),
    /// `self != other`.
    ne => Func::Compare(CmpOp::Ne),
    /// `self < other`.
    lt => Func::Compare(CmpOp::Lt),
    /// `self <= other`.
    le => Func::Compare(CmpOp::Le),
    /// `self > other`.
    gt => Func::Compare(CmpOp::Gt),
    /// `self >= other`.
    ge => Func::Compare(CmpOp::Ge),
    /// Kleene `self AND other`.
    and => Func::And,
    /// Kleene `self OR other`.
    or => Func::Or,
}

macro_rules! operators {
    ($($(#[$m:meta])* $trait:ident :: $method:ident => $func:expr,)*) => {
        $(
            $(#[$m])*
            impl std::ops::$trait for Expr {
                type Output = Expr;
                fn $method(self, other: Expr) -> Expr {
                    Expr::Call($func, vec![self, other])
                }
            }
        )*
    };
}

operators! {
    /// `a + b`.
    Add::add => Func::Binary(BinaryOp::Add),
    /// `a - b`.
    Sub::sub => Func::Binary(BinaryOp::Sub),
    /// `a * b`.
    Mul::mul => Func::Binary(BinaryOp::Mul),
    /// `a / b`, in floating point (Python's `/`).
    Div::div => Func::TrueDiv,
    /// `a % b`, flooring (Python's `%`).
    Rem::rem => Func::Binary(BinaryOp::Mod),
    /// `a & b`: Kleene AND on `bool`, bitwise on ints.
    BitAnd::bitand => Func::And,
    /// `a | b`: Kleene OR on `bool`, bitwise on ints.
    BitOr::bitor => Func::Or,
    /// `a ^ b`.
    BitXor::bitxor => Func::Xor,
}

/// `!a`: logical not on `bool`, bitwise on ints (Python's `~`).
impl std::ops::Not for Expr {
    type Output = Expr;
    fn not(self) -> Expr {
        Expr::Call(Func::Not, vec![self])
    }
}

/// `-a`.
impl std::ops::Neg for Expr {
    type Output = Expr;
    fn neg(self) -> Expr {
        Expr::Call(Func::Unary(UnaryOp::Neg), vec![self])
    }
}

impl Expr {
    /// True where `self` is null.
    pub fn is_null(self) -> Expr {
        Expr::Call(Func::IsNull, vec![self])
    }

    /// True where `self` is not null.
    pub fn is_not_null(self) -> Expr {
        Expr::Call(Func::IsNotNull, vec![self])
    }

    /// `self` converted to `dtype`.
    pub fn cast(self, dtype: DType) -> Expr {
        Expr::Call(Func::Cast(dtype), vec![self])
    }

    /// How deeply the tree nests (a field is 1), found without recursion.
    pub fn depth(&self) -> usize {
        let mut deepest = 0;
        let mut stack = vec![(self, 1usize)];
        while let Some((e, d)) = stack.pop() {
            deepest = deepest.max(d);
            if let Expr::Call(_, args) = e {
                stack.extend(args.iter().map(|a| (a, d + 1)));
            }
        }
        deepest
    }

    /// The column names the expression reads, in order of first use.
    pub fn columns(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        let mut stack = vec![self];
        while let Some(e) = stack.pop() {
            match e {
                Expr::Field(name) => {
                    if !out.contains(&name.as_str()) {
                        out.push(name);
                    }
                }
                Expr::Literal(_) => {}
                Expr::Call(_, args) => stack.extend(args.iter().rev()),
            }
        }
        out
    }
}

impl fmt::Display for Literal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Literal::Value(Scalar::Bool(b)) => f.write_str(if *b { "True" } else { "False" }),
            Literal::Value(Scalar::F64(v)) | Literal::Float(v) => write!(f, "{v:?}"),
            Literal::Value(s) => write!(f, "{}({})", s.dtype(), s),
            Literal::Null(d) => write!(f, "null_{d}"),
            Literal::Int(v) => write!(f, "{v}"),
        }
    }
}

/// Query syntax (`((x > 2.0) & (x < 6.0))`). Recursive: call it on trees
/// within [`MAX_DEPTH`] (every tree kiln compiles is).
impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Field(name) => f.write_str(name),
            Expr::Literal(l) => write!(f, "{l}"),
            Expr::Call(func, args) => {
                if let (Some(op), true) = (func.infix(), args.len() >= 2) {
                    f.write_str("(")?;
                    for (idx, a) in args.iter().enumerate() {
                        if idx > 0 {
                            write!(f, " {op} ")?;
                        }
                        write!(f, "{a}")?;
                    }
                    return f.write_str(")");
                }
                match (func, args.as_slice()) {
                    (Func::Not, [a]) => write!(f, "~{a}"),
                    (Func::Unary(UnaryOp::Neg), [a]) => write!(f, "-{a}"),
                    _ => {
                        write!(f, "{}(", func.name())?;
                        for (idx, a) in args.iter().enumerate() {
                            if idx > 0 {
                                f.write_str(", ")?;
                            }
                            write!(f, "{a}")?;
                        }
                        f.write_str(")")
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for name in [
            "add",
            "floordiv",
            "mod",
            "sqrt",
            "lt",
            "and",
            "or",
            "not",
            "xor",
            "isnull",
            "isnotnull",
            "coalesce",
            "if",
            "cast_i64",
            "total_lt",
            "total_ne",
            "true_divide",
            "pow",
        ] {
            let f = Func::from_name(name).unwrap();
            assert_eq!(Func::from_name(&f.name()), Some(f), "{name}");
        }
        assert_eq!(
            Func::from_name("greater_than"),
            Some(Func::Compare(CmpOp::Gt))
        );
        assert_eq!(Func::from_name("band"), Some(Func::And));
        assert!(Func::from_name("frobnicate").is_none());
        assert!(matches!(
            call("frobnicate", vec![]),
            Err(Error::UnknownFunction(_))
        ));
    }

    #[test]
    fn depth_and_columns_without_recursion() {
        let e = and(vec![field("x").gt(lit(2.0)), field("y").lt(field("x"))]);
        assert_eq!(e.depth(), 3);
        assert_eq!(e.columns(), vec!["x", "y"]);
        assert_eq!(e.to_string(), "((x > 2.0) & (y < x))");
        assert_eq!((!field("a").is_null()).to_string(), "~isnull(a)");
        let arith = (field("a") + lit(1.0)) * -field("b") / field("c") % lit(2i64);
        assert_eq!(arith.to_string(), "((((a + 1.0) * -b) / c) % i64(2))");
        assert_eq!(
            (field("p") & field("q") | !field("r")).to_string(),
            "((p & q) | ~r)"
        );
    }
}
