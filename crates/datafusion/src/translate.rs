//! DataFusion physical expressions to kiln-arrow expressions, with
//! DataFusion's meaning (`docs/semantics.md`, "DataFusion").
//!
//! The translation accepts an expression only if kiln computes every row of
//! it exactly as DataFusion would, and no row can fail in kiln where it would
//! not in DataFusion. Anything else is [`Unsupported`], with the reason, and
//! stays DataFusion's.

use arrow_schema::{DataType, Schema};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::{
    BinaryExpr, CaseExpr, CastExpr, Column, InListExpr, IsNotNullExpr, IsNullExpr, Literal,
    NegativeExpr, NotExpr,
};
use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr};
use kiln::ir::{BinaryOp, CmpOp, UnaryOp};
use kiln::{DType, Scalar};
use kiln_arrow::expr::{self as kx, Expr as KExpr, Func};
use kiln_arrow::MAX_DECIMAL_DIGITS;
use std::sync::Arc;

/// Why an expression stays DataFusion's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unsupported(pub String);

impl std::fmt::Display for Unsupported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

type Result<T> = std::result::Result<T, Unsupported>;

fn no<T>(why: impl Into<String>) -> Result<T> {
    Err(Unsupported(why.into()))
}

/// An expression kiln can compute, over the columns it reads.
#[derive(Debug)]
pub struct Translated {
    /// The kiln-arrow expression; column `i` of [`Translated::columns`] is
    /// the field `c{i}`.
    pub expr: KExpr,
    /// The input columns it reads: their indices in the input schema.
    pub columns: Vec<usize>,
    /// DataFusion's type of the result.
    pub data_type: DataType,
}

/// The name the kiln expression gives input column number `i` of its own.
pub fn column_name(i: usize) -> String {
    format!("c{i}")
}

/// Translates `expr` (over `schema`).
pub fn translate(expr: &Arc<dyn PhysicalExpr>, schema: &Schema) -> Result<Translated> {
    let mut t = Translator {
        schema,
        columns: Vec::new(),
        depth: 0,
    };
    let data_type = t.data_type(expr)?;
    output_dtype(&data_type)?;
    let expr = t.expr(expr)?;
    if t.columns.is_empty() {
        return no("reads no column");
    }
    Ok(Translated {
        expr,
        columns: t.columns,
        data_type,
    })
}

/// How kiln computes a value of DataFusion type `data_type`, if it does.
fn value_dtype(data_type: &DataType) -> Option<DType> {
    match data_type {
        DataType::Boolean => Some(DType::Bool),
        DataType::Int32 | DataType::Date32 => Some(DType::I32),
        DataType::Int64 | DataType::Date64 => Some(DType::I64),
        DataType::Float32 => Some(DType::F32),
        DataType::Float64 => Some(DType::F64),
        DataType::Decimal128(p, _) if *p <= MAX_DECIMAL_DIGITS => Some(DType::I64),
        _ => None,
    }
}

/// Whether kiln can return a result of `data_type` (the types
/// [`crate::KilnExpr`] builds arrays of).
fn output_dtype(data_type: &DataType) -> Result<DType> {
    value_dtype(data_type).ok_or_else(|| Unsupported(format!("kiln does not compute {data_type}")))
}

struct Translator<'a> {
    schema: &'a Schema,
    columns: Vec<usize>,
    depth: usize,
}

fn call(func: Func, args: Vec<KExpr>) -> KExpr {
    KExpr::Call(func, args)
}

impl Translator<'_> {
    fn data_type(&self, e: &Arc<dyn PhysicalExpr>) -> Result<DataType> {
        e.data_type(self.schema)
            .map_err(|err| Unsupported(format!("no type: {err}")))
    }

    fn expr(&mut self, e: &Arc<dyn PhysicalExpr>) -> Result<KExpr> {
        self.depth += 1;
        if self.depth > kiln_arrow::expr::MAX_DEPTH {
            return no(format!("nests more than {} levels", kx::MAX_DEPTH));
        }
        let out = self.node(e);
        self.depth -= 1;
        out
    }

    fn node(&mut self, e: &Arc<dyn PhysicalExpr>) -> Result<KExpr> {
        let data_type = self.data_type(e)?;
        if let Some(c) = e.downcast_ref::<Column>() {
            let field = self.schema.field(c.index());
            if value_dtype(field.data_type()).is_none() {
                return no(format!("column `{}` is {}", c.name(), field.data_type()));
            }
            let i = match self.columns.iter().position(|&k| k == c.index()) {
                Some(i) => i,
                None => {
                    self.columns.push(c.index());
                    self.columns.len() - 1
                }
            };
            return Ok(kx::field(&column_name(i)));
        }
        if let Some(l) = e.downcast_ref::<Literal>() {
            return literal(l.value());
        }
        if let Some(b) = e.downcast_ref::<BinaryExpr>() {
            return self.binary(b, &data_type);
        }
        if let Some(n) = e.downcast_ref::<NotExpr>() {
            return Ok(call(Func::Not, vec![self.boolean(n.arg())?]));
        }
        if let Some(n) = e.downcast_ref::<IsNullExpr>() {
            return Ok(call(Func::IsNull, vec![self.any_value(n.arg())?]));
        }
        if let Some(n) = e.downcast_ref::<IsNotNullExpr>() {
            return Ok(call(Func::IsNotNull, vec![self.any_value(n.arg())?]));
        }
        if let Some(n) = e.downcast_ref::<NegativeExpr>() {
            // `neg_wrapping`: ints and decimals wrap, floats flip the sign.
            match data_type {
                DataType::Int32
                | DataType::Int64
                | DataType::Float32
                | DataType::Float64
                | DataType::Decimal128(..) => {}
                t => return no(format!("negation of {t}")),
            }
            let a = self.expr(n.arg())?;
            return Ok(call(Func::Unary(UnaryOp::Neg), vec![a]));
        }
        if let Some(c) = e.downcast_ref::<CastExpr>() {
            return self.cast(c);
        }
        if let Some(l) = e.downcast_ref::<InListExpr>() {
            return self.in_list(l);
        }
        if let Some(c) = e.downcast_ref::<CaseExpr>() {
            return self.case(c, &data_type);
        }
        if let Some(f) = e.downcast_ref::<ScalarFunctionExpr>() {
            return self.function(f, &data_type);
        }
        no(format!("`{e}` is not an expression kiln translates"))
    }

    /// A `bool` operand.
    fn boolean(&mut self, e: &Arc<dyn PhysicalExpr>) -> Result<KExpr> {
        match self.data_type(e)? {
            DataType::Boolean => self.expr(e),
            t => no(format!("a {t} operand where a boolean is needed")),
        }
    }

    /// An operand of any type kiln reads.
    fn any_value(&mut self, e: &Arc<dyn PhysicalExpr>) -> Result<KExpr> {
        output_dtype(&self.data_type(e)?)?;
        self.expr(e)
    }

    fn binary(&mut self, b: &BinaryExpr, result: &DataType) -> Result<KExpr> {
        let unchecked = BinaryExpr::new(b.left().clone(), *b.op(), b.right().clone());
        if &unchecked != b {
            return no("arithmetic that fails on overflow");
        }
        let (lt, rt) = (self.data_type(b.left())?, self.data_type(b.right())?);
        let same_kind = match (&lt, &rt) {
            (DataType::Decimal128(_, s1), DataType::Decimal128(_, s2)) => s1 == s2,
            (l, r) => l == r,
        };
        use Operator as O;
        let op = *b.op();
        match op {
            O::And | O::Or => {
                let (l, r) = (self.boolean(b.left())?, self.boolean(b.right())?);
                let func = if op == O::And { Func::And } else { Func::Or };
                Ok(call(func, vec![l, r]))
            }
            O::Eq | O::NotEq | O::Lt | O::LtEq | O::Gt | O::GtEq => {
                let cmp = match op {
                    O::Eq => CmpOp::Eq,
                    O::NotEq => CmpOp::Ne,
                    O::Lt => CmpOp::Lt,
                    O::LtEq => CmpOp::Le,
                    O::Gt => CmpOp::Gt,
                    _ => CmpOp::Ge,
                };
                if let Some(e) = self.rescaled_comparison(cmp, b.left(), b.right())? {
                    return Ok(e);
                }
                if !same_kind {
                    return no(format!("comparison of {lt} with {rt}"));
                }
                output_dtype(&lt)?;
                let (l, r) = (self.expr(b.left())?, self.expr(b.right())?);
                Ok(call(Func::TotalCompare(cmp), vec![l, r]))
            }
            O::IsDistinctFrom | O::IsNotDistinctFrom => {
                if !same_kind {
                    return no(format!("comparison of {lt} with {rt}"));
                }
                output_dtype(&lt)?;
                let (l, r) = (self.expr(b.left())?, self.expr(b.right())?);
                // Null-aware: two nulls are not distinct, a null and a value are.
                let (ln, rn) = (l.clone().is_null(), r.clone().is_null());
                let distinct = call(
                    Func::If,
                    vec![
                        call(Func::Or, vec![ln.clone(), rn.clone()]),
                        call(Func::Compare(CmpOp::Ne), vec![ln, rn]),
                        call(Func::TotalCompare(CmpOp::Ne), vec![l, r]),
                    ],
                );
                Ok(if op == O::IsDistinctFrom {
                    distinct
                } else {
                    call(Func::Not, vec![distinct])
                })
            }
            O::Plus | O::Minus | O::Multiply => {
                let arith = match op {
                    O::Plus => BinaryOp::Add,
                    O::Minus => BinaryOp::Sub,
                    _ => BinaryOp::Mul,
                };
                match (&lt, &rt, result) {
                    (l, r, out)
                        if l == r
                            && r == out
                            && matches!(
                                l,
                                DataType::Int32
                                    | DataType::Int64
                                    | DataType::Float32
                                    | DataType::Float64
                            ) => {}
                    // Decimals: the unscaled values add (one scale) or
                    // multiply (scales add), in i64 when the result has at
                    // most 18 digits, so it cannot overflow.
                    (
                        DataType::Decimal128(_, s1),
                        DataType::Decimal128(_, s2),
                        DataType::Decimal128(p, s),
                    ) if *p <= MAX_DECIMAL_DIGITS
                        && if arith == BinaryOp::Mul {
                            s1 + s2 == *s
                        } else {
                            s1 == s2 && s1 == s
                        } => {}
                    _ => return no(format!("`{op}` of {lt} and {rt} giving {result}")),
                }
                let (l, r) = (self.expr(b.left())?, self.expr(b.right())?);
                Ok(call(Func::Binary(arith), vec![l, r]))
            }
            O::Divide | O::Modulo => {
                let arith = if op == O::Divide {
                    BinaryOp::Div
                } else {
                    BinaryOp::Rem
                };
                match (&lt, &rt) {
                    (DataType::Float32, DataType::Float32)
                    | (DataType::Float64, DataType::Float64) => {}
                    // Integer division errors on a zero divisor, and
                    // DataFusion evaluates some operands only on some rows
                    // (`CASE`, `AND`); kiln evaluates every row. Only a
                    // constant divisor that can neither be zero nor
                    // overflow (`MIN / -1` is an error in DataFusion) is
                    // the same in both.
                    (DataType::Int32, DataType::Int32) | (DataType::Int64, DataType::Int64) => {
                        let divisor = b.right().downcast_ref::<Literal>().map(|l| l.value());
                        match divisor {
                            Some(&ScalarValue::Int32(Some(d))) if d != 0 && d != -1 => {}
                            Some(&ScalarValue::Int64(Some(d))) if d != 0 && d != -1 => {}
                            _ => return no("integer division by a divisor that is not a constant other than 0 and -1"),
                        }
                    }
                    _ => return no(format!("`{op}` of {lt} and {rt}")),
                }
                let (l, r) = (self.expr(b.left())?, self.expr(b.right())?);
                Ok(call(Func::Binary(arith), vec![l, r]))
            }
            O::BitwiseAnd | O::BitwiseOr | O::BitwiseXor => {
                match (&lt, &rt) {
                    (DataType::Int32, DataType::Int32) | (DataType::Int64, DataType::Int64) => {}
                    _ => return no(format!("`{op}` of {lt} and {rt}")),
                }
                let func = match op {
                    O::BitwiseAnd => Func::And,
                    O::BitwiseOr => Func::Or,
                    _ => Func::Xor,
                };
                let (l, r) = (self.expr(b.left())?, self.expr(b.right())?);
                Ok(call(func, vec![l, r]))
            }
            _ => no(format!("operator `{op}`")),
        }
    }

    /// `CAST(x AS DECIMAL(P, S)) op c` for a decimal `x` of a smaller scale
    /// and a constant `c` (DataFusion's plan for `x <= 0.07` when 0.07 is
    /// not exact at `x`'s scale): `x op' c'` with `c` rounded to `x`'s scale
    /// the way that keeps every row's answer (`x * F <= c` is `x <= floor(c
    /// / F)`, `x * F < c` is `x < ceil(c / F)`, …). `None` if `left op right`
    /// is not of that form.
    fn rescaled_comparison(
        &mut self,
        op: CmpOp,
        left: &Arc<dyn PhysicalExpr>,
        right: &Arc<dyn PhysicalExpr>,
    ) -> Result<Option<KExpr>> {
        let (op, cast, constant) = match (
            left.downcast_ref::<CastExpr>(),
            right.downcast_ref::<Literal>(),
        ) {
            (Some(c), Some(l)) => (op, c, l),
            _ => match (
                right.downcast_ref::<CastExpr>(),
                left.downcast_ref::<Literal>(),
            ) {
                (Some(c), Some(l)) => (mirror(op), c, l),
                _ => return Ok(None),
            },
        };
        let (DataType::Decimal128(p1, s1), DataType::Decimal128(p, s)) =
            (self.data_type(cast.expr())?, cast.cast_type().clone())
        else {
            return Ok(None);
        };
        let ScalarValue::Decimal128(Some(c), cp, cs) = constant.value() else {
            return Ok(None);
        };
        // The cast can neither fail nor round (DataFusion would error or
        // round where kiln would not).
        if p1 > MAX_DECIMAL_DIGITS
            || (*cp, *cs) != (p, s)
            || s < s1
            || i16::from(p) - i16::from(s) < i16::from(p1) - i16::from(s1)
            || s - s1 > 38
        {
            return Ok(None);
        }
        let factor = 10i128.pow(u32::from((s - s1) as u8));
        let (floor, ceil) = (c.div_euclid(factor), -(-c).div_euclid(factor));
        let exact = c.rem_euclid(factor) == 0;
        let x = self.expr(cast.expr())?;
        // `x op bound`, or a constant answer where the bound is beyond i64:
        // true (false) where `x` is valid, null where it is null.
        let against = |x: KExpr, op: CmpOp, bound: i128| -> KExpr {
            match i64::try_from(bound) {
                Ok(bound) => call(Func::Compare(op), vec![x, kx::lit(bound)]),
                Err(_) => {
                    let below = bound < 0; // every x is above the bound
                    let truth = match op {
                        CmpOp::Lt | CmpOp::Le => !below,
                        CmpOp::Gt | CmpOp::Ge => below,
                        CmpOp::Eq => false,
                        CmpOp::Ne => true,
                    };
                    let same = if truth { CmpOp::Eq } else { CmpOp::Ne };
                    call(Func::Compare(same), vec![x.clone(), x])
                }
            }
        };
        Ok(Some(match op {
            CmpOp::Lt => against(x, CmpOp::Lt, ceil),
            CmpOp::Le => against(x, CmpOp::Le, floor),
            CmpOp::Gt => against(x, CmpOp::Gt, floor),
            CmpOp::Ge => against(x, CmpOp::Ge, ceil),
            CmpOp::Eq if exact => against(x, CmpOp::Eq, floor),
            CmpOp::Ne if exact => against(x, CmpOp::Ne, floor),
            // Never equal: false (true) where `x` is valid.
            CmpOp::Eq => call(Func::Compare(CmpOp::Ne), vec![x.clone(), x]),
            CmpOp::Ne => call(Func::Compare(CmpOp::Eq), vec![x.clone(), x]),
        }))
    }

    /// Casts that are exact and cannot fail: to a wider int, int to float
    /// (rounded as Rust's `as`, which arrow uses), f32 to f64, and decimal or
    /// int to a decimal with as many integer digits and at least the scale.
    fn cast(&mut self, c: &CastExpr) -> Result<KExpr> {
        let from = self.data_type(c.expr())?;
        let to = c.cast_type();
        let scale_up = |lw: &mut Self, digits: u8, scale: i8| -> Result<KExpr> {
            match to {
                DataType::Decimal128(p, s)
                    if *p <= MAX_DECIMAL_DIGITS
                        && *s >= scale
                        && i16::from(*p) - i16::from(*s)
                            >= i16::from(digits) - i16::from(scale) =>
                {
                    let a = lw.expr(c.expr())?;
                    let a = call(Func::Cast(DType::I64), vec![a]);
                    let factor = 10i64.pow(u32::from((*s - scale) as u8));
                    Ok(if factor == 1 {
                        a
                    } else {
                        call(Func::Binary(BinaryOp::Mul), vec![a, kx::lit(factor)])
                    })
                }
                _ => no(format!("cast from {from} to {to}")),
            }
        };
        let dtype = match (&from, to) {
            (DataType::Int32, DataType::Int64) => DType::I64,
            (DataType::Int32 | DataType::Int64, DataType::Float64) => DType::F64,
            (DataType::Int32 | DataType::Int64, DataType::Float32) => DType::F32,
            (DataType::Float32, DataType::Float64) => DType::F64,
            (a, b) if a == b => return self.expr(c.expr()),
            (DataType::Int32, DataType::Decimal128(..)) => return scale_up(self, 10, 0),
            (DataType::Int64, DataType::Decimal128(..)) => return scale_up(self, 19, 0),
            (DataType::Decimal128(p, s), DataType::Decimal128(..)) => {
                return scale_up(self, *p, *s)
            }
            _ => return no(format!("cast from {from} to {to}")),
        };
        let a = self.expr(c.expr())?;
        Ok(call(Func::Cast(dtype), vec![a]))
    }

    /// `x IN (a, b, …)` of integer constants (ints, dates, decimals): one
    /// `isin` of a constant set ([`Func::In`]); null where `x` is, and where
    /// `x` is not found and a constant is `NULL`. DataFusion's simplifier
    /// makes lists of up to 3 values `=` chains (which kiln computes); a
    /// longer list of floats stays DataFusion's, whose `IN` compares floats'
    /// bits (`-0.0` is not `0.0`, a NaN matches only its own bits), which no
    /// graph op states.
    fn in_list(&mut self, l: &InListExpr) -> Result<KExpr> {
        let xt = self.data_type(l.expr())?;
        output_dtype(&xt)?;
        if l.list().is_empty() {
            return no("an empty IN list");
        }
        let boolean = matches!(xt, DataType::Boolean);
        if matches!(xt, DataType::Float32 | DataType::Float64) {
            return no("an IN list of floats (DataFusion compares their bits)");
        }
        let x = self.expr(l.expr())?;
        let mut constants = Vec::with_capacity(l.list().len());
        for item in l.list() {
            let Some(lit) = item.downcast_ref::<Literal>() else {
                return no("an IN list of other than constants");
            };
            if self.data_type(item)? != xt {
                return no("an IN list of another type");
            }
            if boolean && lit.value().is_null() {
                return no("an IN list of booleans with NULL");
            }
            constants.push(literal(lit.value())?);
        }
        let any = if boolean {
            // Booleans stay an `=` chain (`isin` takes numbers).
            let eq = |c| call(Func::TotalCompare(CmpOp::Eq), vec![x.clone(), c]);
            call(Func::Or, constants.into_iter().map(eq).collect())
        } else {
            call(Func::In, std::iter::once(x).chain(constants).collect())
        };
        Ok(if l.negated() {
            call(Func::Not, vec![any])
        } else {
            any
        })
    }

    /// `CASE [x] WHEN … THEN … ELSE … END` as nested `if`s (kiln computes
    /// every branch on every row; no translated expression can fail).
    fn case(&mut self, c: &CaseExpr, result: &DataType) -> Result<KExpr> {
        output_dtype(result)?;
        let base = match c.expr() {
            Some(x) => {
                let xt = self.data_type(x)?;
                output_dtype(&xt)?;
                Some((self.expr(x)?, xt))
            }
            None => None,
        };
        let mut branches = Vec::new();
        for (when, then) in c.when_then_expr() {
            let cond = match &base {
                Some((x, xt)) => {
                    if &self.data_type(when)? != xt {
                        return no("a CASE comparing values of two types");
                    }
                    call(
                        Func::TotalCompare(CmpOp::Eq),
                        vec![x.clone(), self.expr(when)?],
                    )
                }
                None => self.boolean(when)?,
            };
            if &self.data_type(then)? != result {
                return no("a CASE branch of another type");
            }
            branches.push((cond, self.expr(then)?));
        }
        let mut acc = match c.else_expr() {
            Some(e) => {
                if &self.data_type(e)? != result {
                    return no("a CASE branch of another type");
                }
                self.expr(e)?
            }
            None => KExpr::Literal(kx::Literal::Null(output_dtype(result)?)),
        };
        for (cond, then) in branches.into_iter().rev() {
            acc = call(Func::If, vec![cond, then, acc]);
        }
        Ok(acc)
    }

    /// The exact float functions `abs`, `floor` and `ceil` (DataFusion
    /// computes them with Rust's `f64` methods, which are exact, so every
    /// correct implementation agrees). Not `sqrt`: DataFusion fails the query
    /// on a negative argument, where kiln returns NaN; not `trunc`: DataFusion
    /// makes `trunc(-0.0)` `+0.0`.
    fn function(&mut self, f: &ScalarFunctionExpr, result: &DataType) -> Result<KExpr> {
        let op = match f.name() {
            "abs" => UnaryOp::Abs,
            "floor" => UnaryOp::Floor,
            "ceil" => UnaryOp::Ceil,
            name => return no(format!("function `{name}`")),
        };
        let [arg] = f.args() else {
            return no(format!("`{}` with {} arguments", f.name(), f.args().len()));
        };
        let at = self.data_type(arg)?;
        if !matches!(at, DataType::Float32 | DataType::Float64) || &at != result {
            return no(format!("`{}` of {at}", f.name()));
        }
        let a = self.expr(arg)?;
        Ok(call(Func::Unary(op), vec![a]))
    }
}

/// The comparison that holds with the operands swapped (`a < b` is `b > a`).
fn mirror(op: CmpOp) -> CmpOp {
    match op {
        CmpOp::Lt => CmpOp::Gt,
        CmpOp::Le => CmpOp::Ge,
        CmpOp::Gt => CmpOp::Lt,
        CmpOp::Ge => CmpOp::Le,
        eq_or_ne => eq_or_ne,
    }
}

/// A constant: typed as kiln computes its DataFusion type.
fn literal(v: &ScalarValue) -> Result<KExpr> {
    let scalar = match v {
        ScalarValue::Boolean(b) => b.map(Scalar::Bool),
        ScalarValue::Int32(x) | ScalarValue::Date32(x) => x.map(Scalar::I32),
        ScalarValue::Int64(x) | ScalarValue::Date64(x) => x.map(Scalar::I64),
        ScalarValue::Float32(x) => x.map(Scalar::F32),
        ScalarValue::Float64(x) => x.map(Scalar::F64),
        ScalarValue::Decimal128(x, p, _) if *p <= MAX_DECIMAL_DIGITS => match x {
            Some(x) => {
                Some(Scalar::I64(i64::try_from(*x).map_err(|_| {
                    Unsupported("a decimal beyond its precision".into())
                })?))
            }
            None => None,
        },
        other => return no(format!("a constant of type {}", other.data_type())),
    };
    Ok(match scalar {
        Some(s) => kx::lit(s),
        None => KExpr::Literal(kx::Literal::Null(
            value_dtype(&v.data_type()).expect("a type matched above"),
        )),
    })
}
