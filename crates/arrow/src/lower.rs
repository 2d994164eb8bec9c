//! An [`Expr`] over an Arrow schema to a kiln [`Graph`], nulls included.
//!
//! Every column becomes a values input (`T[n]`) and, when the batch at hand
//! has nulls in it, a validity input (`bool[n]`, passed to the kernel as the
//! Arrow bitmap itself). Every sub-expression lowers to a pair (value,
//! validity), validity `None` when it cannot be null; the rules are SQL's
//! three-valued logic (`docs/semantics.md`, "Arrow"). All of it is plain kiln
//! ops, so every tier computes nulls the same way, without branches.

use crate::expr::{Expr, Func, Literal};
use crate::Error;
use arrow_schema::{DataType, Schema};
use kiln::ir::typing::{self, DTypeClass};
use kiln::ir::{BinaryOp, Builder, CmpOp, Op, ReduceOp, TypeError, UnaryOp, Value};
use kiln::{DType, Graph, Scalar, Type};

/// The dimension every column has.
pub const ROWS: &str = "n";

/// What kind of kernel to build.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// One output: the selection of rows where the condition is true.
    Filter,
    /// One output: the number of rows where the condition is true (an `i64`
    /// sum, no selection written).
    Count,
    /// One output per expression, plus a validity output after each that can
    /// be null.
    Project,
}

/// Where one graph input comes from.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The values of schema field `.0`.
    Values(usize),
    /// The validity bitmap of schema field `.0`.
    Validity(usize),
}

/// What one projected expression produced.
#[derive(Clone, Debug, PartialEq)]
pub struct ProjectedOutput {
    /// Its dtype.
    pub dtype: DType,
    /// True when the graph output is a scalar (a literal), to repeat per row.
    pub scalar: bool,
    /// Whether a validity output follows it, and if so whether that is a
    /// scalar.
    pub validity: Option<bool>,
}

/// A lowered expression.
#[derive(Debug)]
pub struct Lowered {
    /// The graph (not yet verified).
    pub graph: Graph,
    /// The source of each graph input, in order.
    pub inputs: Vec<Source>,
    /// For a projection, what each expression produced.
    pub outputs: Vec<ProjectedOutput>,
}

/// The most digits of a `Decimal128` column kiln reads: its unscaled values
/// then fit an `i64`, which is what kiln computes with.
pub const MAX_DECIMAL_DIGITS: u8 = 18;

/// The dtype kiln computes a column of `data_type` in.
pub fn column_dtype(data_type: &DataType) -> Option<DType> {
    Some(match data_type {
        DataType::Boolean => DType::Bool,
        DataType::Int32 | DataType::Date32 => DType::I32,
        DataType::Int64 | DataType::Date64 | DataType::Timestamp(..) => DType::I64,
        DataType::Float32 => DType::F32,
        DataType::Float64 => DType::F64,
        // The unscaled integer; at most 18 digits fit an i64.
        DataType::Decimal128(precision, _) if *precision <= MAX_DECIMAL_DIGITS => DType::I64,
        _ => return None,
    })
}

/// How a value takes part in promotion.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Weak {
    /// Typed: a column, a typed literal, a computed value.
    No,
    /// An untyped integer literal.
    Int,
    /// An untyped float literal.
    Float,
}

#[derive(Copy, Clone, Debug)]
struct Val {
    value: Value,
    valid: Option<Value>,
    weak: Weak,
}

struct Lower<'a> {
    b: Builder,
    schema: &'a Schema,
    columns: Vec<(usize, Value, Option<Value>)>,
}

fn type_err(e: TypeError) -> Error {
    Error::Type(e.to_string())
}

/// Lowers `exprs` (one condition for a filter) over `schema`; `nulls[i]` says
/// whether field `i` has nulls in the batches this graph will see.
pub fn lower(
    schema: &Schema,
    exprs: &[Expr],
    kind: &Kind,
    nulls: &[bool],
) -> Result<Lowered, Error> {
    for e in exprs {
        if e.depth() > crate::expr::MAX_DEPTH {
            return Err(Error::TooDeep(crate::expr::MAX_DEPTH));
        }
    }
    let mut lw = Lower {
        b: Builder::new("kiln_arrow"),
        schema,
        columns: Vec::new(),
    };
    let mut inputs = Vec::new();
    let mut used: Vec<usize> = Vec::new();
    for e in exprs {
        for name in e.columns() {
            let (idx, _) = schema
                .column_with_name(name)
                .ok_or_else(|| Error::UnknownColumn {
                    name: name.to_string(),
                    available: schema.fields().iter().map(|f| f.name().clone()).collect(),
                })?;
            if !used.contains(&idx) {
                used.push(idx);
            }
        }
    }
    let mut values = Vec::new();
    for &idx in &used {
        let f = schema.field(idx);
        let dtype = column_dtype(f.data_type()).ok_or_else(|| Error::UnsupportedColumn {
            name: f.name().clone(),
            data_type: f.data_type().clone(),
        })?;
        let v = lw.b.input(f.name(), Type::column(dtype, ROWS));
        lw.b.set_source_name(v, f.name());
        values.push(v);
        inputs.push(Source::Values(idx));
    }
    for (&idx, &v) in used.iter().zip(&values) {
        let valid = if nulls.get(idx).copied().unwrap_or(false) {
            let name = format!("{}.valid", schema.field(idx).name());
            let valid = lw.b.input(&name, Type::column(DType::Bool, ROWS));
            inputs.push(Source::Validity(idx));
            Some(valid)
        } else {
            None
        };
        lw.columns.push((idx, v, valid));
    }
    let mut outputs = Vec::new();
    match kind {
        Kind::Filter | Kind::Count => {
            let [cond] = exprs else {
                return Err(Error::Type("a filter has one condition".into()));
            };
            let v = lw.expr(cond)?;
            let dtype = lw.dtype(v);
            if dtype != DType::Bool {
                return Err(Error::Type(format!(
                    "a filter condition must be bool, but `{cond}` is {dtype}"
                )));
            }
            let keep = match v.valid {
                Some(valid) => {
                    lw.b.binary(BinaryOp::And, v.value, valid)
                        .map_err(type_err)?
                }
                None => v.value,
            };
            let keep = if lw.b.ty(keep).as_tensor().is_some_and(|t| t.is_scalar()) {
                // The condition folded to one value for this batch's nulls
                // (`notna(x)` without nulls): give it the rows of a column.
                let Some(&(_, column, _)) = lw.columns.first() else {
                    return Err(Error::Type(format!(
                        "the filter condition `{cond}` reads no column"
                    )));
                };
                let same = lw.b.compare(CmpOp::Eq, column, column).map_err(type_err)?;
                let differs = lw.b.compare(CmpOp::Ne, column, column).map_err(type_err)?;
                let every = lw.b.binary(BinaryOp::Or, same, differs).map_err(type_err)?;
                lw.b.binary(BinaryOp::And, every, keep).map_err(type_err)?
            } else {
                keep
            };
            if *kind == Kind::Count {
                let ones = lw.b.cast(keep, DType::I64).map_err(type_err)?;
                let count = lw.b.reduce(ReduceOp::Sum, ones).map_err(type_err)?;
                lw.b.output("count", count);
            } else {
                let sel = lw.b.filter(keep).map_err(type_err)?;
                lw.b.output("selection", sel);
            }
        }
        Kind::Project => {
            for (idx, e) in exprs.iter().enumerate() {
                let v = lw.expr(e)?;
                let is_scalar =
                    |b: &Builder, v: Value| b.ty(v).as_tensor().is_some_and(|t| t.is_scalar());
                lw.b.output(&format!("out{idx}"), v.value);
                let validity = v.valid.map(|valid| {
                    lw.b.output(&format!("out{idx}.valid"), valid);
                    is_scalar(&lw.b, valid)
                });
                outputs.push(ProjectedOutput {
                    dtype: lw.dtype(v),
                    scalar: is_scalar(&lw.b, v.value),
                    validity,
                });
            }
        }
    }
    Ok(Lowered {
        graph: lw.b.finish(),
        inputs,
        outputs,
    })
}

impl Lower<'_> {
    fn dtype(&self, v: Val) -> DType {
        self.b
            .dtype(v.value)
            .expect("expression values are tensors")
    }

    fn constant(&mut self, s: Scalar) -> Value {
        self.b.constant(s)
    }

    fn expr(&mut self, e: &Expr) -> Result<Val, Error> {
        Ok(match e {
            Expr::Field(name) => {
                let (idx, _) = self
                    .schema
                    .column_with_name(name)
                    .expect("columns were checked");
                let &(_, value, valid) = self
                    .columns
                    .iter()
                    .find(|c| c.0 == idx)
                    .expect("every used column is an input");
                Val {
                    value,
                    valid,
                    weak: Weak::No,
                }
            }
            Expr::Literal(l) => self.literal(l),
            Expr::Call(func, args) => {
                if let Some(n) = func.arity() {
                    if args.len() != n {
                        return Err(Error::Type(format!(
                            "{} takes {n} argument{}, not {} (in `{e}`)",
                            func.name(),
                            if n == 1 { "" } else { "s" },
                            args.len()
                        )));
                    }
                } else if args.is_empty() {
                    return Err(Error::Type(format!("{} needs an argument", func.name())));
                }
                if *func == Func::In {
                    return self.isin(args, e);
                }
                let vals = args
                    .iter()
                    .map(|a| self.expr(a))
                    .collect::<Result<Vec<_>, _>>()?;
                let v = self.call(*func, &vals, e)?;
                if let Some(name) = match func {
                    Func::Binary(op) if op.divides() => Some(e.to_string()),
                    _ => None,
                } {
                    self.b.set_source_name(v.value, &name);
                }
                v
            }
        })
    }

    fn literal(&mut self, l: &Literal) -> Val {
        let (s, valid, weak) = match *l {
            Literal::Value(s) => (s, None, Weak::No),
            Literal::Null(d) => (zero(d), Some(false), Weak::No),
            Literal::Int(v) => (Scalar::I64(v), None, Weak::Int),
            Literal::Float(v) => (Scalar::F64(v), None, Weak::Float),
        };
        let value = self.constant(s);
        let valid = valid.map(|b| self.constant(Scalar::Bool(b)));
        Val { value, valid, weak }
    }

    /// [`Func::In`]: one `isin` of the literals (an int `x` meeting a float
    /// literal is compared as `f64`; an int literal outside `x`'s dtype
    /// equals none of it), `| isnan(x)` where a literal is NaN.
    fn isin(&mut self, args: &[Expr], e: &Expr) -> Result<Val, Error> {
        let x = self.expr(&args[0])?;
        let mut values = Vec::new();
        let (mut has_null, mut has_float) = (false, false);
        for a in &args[1..] {
            match a {
                Expr::Literal(Literal::Null(_)) => has_null = true,
                Expr::Literal(Literal::Float(v)) => {
                    has_float = true;
                    values.push(Scalar::F64(*v));
                }
                Expr::Literal(Literal::Int(v)) => values.push(Scalar::I64(*v)),
                Expr::Literal(Literal::Value(s)) if s.dtype() != DType::Bool => {
                    has_float |= s.dtype().is_float();
                    values.push(*s);
                }
                _ => {
                    return Err(Error::Type(format!(
                        "isin looks for number literals, not `{a}` (in `{e}`)"
                    )))
                }
            }
        }
        let x = match self.dtype(x) {
            DType::Bool => {
                return Err(Error::Type(format!(
                    "isin looks for numbers, not bools (in `{e}`)"
                )))
            }
            d if d.is_int() && has_float => self.cast(x, DType::F64)?,
            _ => x,
        };
        let dtype = self.dtype(x);
        let has_nan = values.iter().any(|v| match *v {
            Scalar::F32(f) => f.is_nan(),
            Scalar::F64(f) => f.is_nan(),
            _ => false,
        });
        let fits = |v: &Scalar| match (*v, dtype) {
            (Scalar::I64(i), DType::I32) => i32::try_from(i).is_ok(),
            _ => true,
        };
        let values: Vec<Scalar> = values.into_iter().filter(fits).collect();
        let set = kiln::ir::semantics::isin_set(values, dtype);
        let mut found = self
            .b
            .op(Op::IsIn(set.into()), &[x.value])
            .map_err(type_err)?;
        if has_nan && dtype.is_float() {
            let nan = self
                .b
                .compare(CmpOp::Ne, x.value, x.value)
                .map_err(type_err)?;
            found = self.b.binary(BinaryOp::Or, found, nan).map_err(type_err)?;
        }
        let valid = if has_null {
            // x IN (…, NULL) is NULL where x is not found.
            self.and_valid(x.valid, Some(found))?
        } else {
            x.valid
        };
        Ok(Val {
            value: found,
            valid,
            weak: Weak::No,
        })
    }

    fn cast(&mut self, v: Val, to: DType) -> Result<Val, Error> {
        Ok(Val {
            value: self.b.cast(v.value, to).map_err(type_err)?,
            ..v
        })
    }

    /// The dtype two operands are computed in (NumPy's rules, with untyped
    /// literals taking the other side's type).
    fn common(
        &self,
        (da, wa): (DType, Weak),
        (db, wb): (DType, Weak),
        e: &Expr,
    ) -> Result<(DType, Weak), Error> {
        let mixed = || {
            Error::Type(format!(
                "cannot combine {da} and {db} in `{e}` (cast one side first)"
            ))
        };
        let weak = match (wa, wb) {
            (Weak::No, _) | (_, Weak::No) => Weak::No,
            (Weak::Int, Weak::Int) => Weak::Int,
            _ => Weak::Float,
        };
        let dtype = match (wa, wb) {
            _ if da == db => da,
            (Weak::No, Weak::Int) if da.is_numeric() => da,
            (Weak::Int, Weak::No) if db.is_numeric() => db,
            (Weak::No, Weak::Float) if da.is_float() => da,
            (Weak::Float, Weak::No) if db.is_float() => db,
            _ if da == DType::Bool || db == DType::Bool => return Err(mixed()),
            _ if da.is_int() && db.is_int() => DType::I64,
            _ => DType::F64,
        };
        Ok((dtype, weak))
    }

    /// `vals` converted to their common dtype.
    fn promote(&mut self, vals: &[Val], e: &Expr) -> Result<Vec<Val>, Error> {
        let mut acc = (self.dtype(vals[0]), vals[0].weak);
        for &v in &vals[1..] {
            acc = self.common(acc, (self.dtype(v), v.weak), e)?;
        }
        vals.iter()
            .map(|&v| {
                let v = self.cast(v, acc.0)?;
                Ok(Val { weak: acc.1, ..v })
            })
            .collect()
    }

    fn and_valid(&mut self, a: Option<Value>, b: Option<Value>) -> Result<Option<Value>, Error> {
        Ok(match (a, b) {
            (None, v) | (v, None) => v,
            (Some(a), Some(b)) => Some(self.b.binary(BinaryOp::And, a, b).map_err(type_err)?),
        })
    }

    fn call(&mut self, func: Func, vals: &[Val], e: &Expr) -> Result<Val, Error> {
        let b_err = type_err;
        match func {
            Func::In => Err(Error::Type(format!("isin looks for literals (in `{e}`)"))),
            Func::Unary(op) => {
                let mut a = vals[0];
                let float_only = typing::unary_class(op) == DTypeClass::Float;
                if float_only && !self.dtype(a).is_float() {
                    a = self.cast(a, DType::F64)?;
                }
                let value = self
                    .b
                    .unary(op, a.value)
                    .map_err(|err| Error::Type(format!("{err} (in `{e}`)")))?;
                Ok(Val { value, ..a })
            }
            Func::Binary(op) => {
                let mut ab = self.promote(vals, e)?;
                let float_only = typing::binary_class(op) == DTypeClass::Float;
                if float_only && !self.dtype(ab[0]).is_float() {
                    ab = vec![self.cast(ab[0], DType::F64)?, self.cast(ab[1], DType::F64)?];
                }
                let (a, mut d) = (ab[0], ab[1]);
                if op.divides() && self.dtype(d).is_int() {
                    // A null row's divisor is whatever the buffer holds: never
                    // let it fail the batch.
                    if let Some(valid) = d.valid {
                        let one = self.constant(one(self.dtype(d)));
                        d.value = self.b.select(valid, d.value, one).map_err(b_err)?;
                    }
                }
                let value = self
                    .b
                    .binary(op, a.value, d.value)
                    .map_err(|err| Error::Type(format!("{err} (in `{e}`)")))?;
                Ok(Val {
                    value,
                    valid: self.and_valid(a.valid, d.valid)?,
                    weak: a.weak,
                })
            }
            Func::TrueDiv => {
                let mut ab = self.promote(vals, e)?;
                if !self.dtype(ab[0]).is_float() {
                    ab = vec![self.cast(ab[0], DType::F64)?, self.cast(ab[1], DType::F64)?];
                }
                self.call(Func::Binary(BinaryOp::Div), &ab, e)
            }
            Func::Compare(op) => {
                let ab = self.promote(vals, e)?;
                let value = self
                    .b
                    .compare(op, ab[0].value, ab[1].value)
                    .map_err(b_err)?;
                Ok(Val {
                    value,
                    valid: self.and_valid(ab[0].valid, ab[1].valid)?,
                    weak: Weak::No,
                })
            }
            Func::TotalCompare(op) => {
                let ab = self.promote(vals, e)?;
                let (a, c) = (ab[0].value, ab[1].value);
                let value = if self.dtype(ab[0]).is_float() {
                    self.total_compare(op, a, c)?
                } else {
                    self.b.compare(op, a, c).map_err(b_err)?
                };
                Ok(Val {
                    value,
                    valid: self.and_valid(ab[0].valid, ab[1].valid)?,
                    weak: Weak::No,
                })
            }
            Func::And | Func::Or | Func::Xor => {
                let vals = self.promote(vals, e)?;
                let dtype = self.dtype(vals[0]);
                if dtype.is_float() {
                    return Err(Error::Type(format!(
                        "{} needs bool or integer operands, not {dtype} (in `{e}`)",
                        func.name()
                    )));
                }
                let mut acc = vals[0];
                for &v in &vals[1..] {
                    acc = if dtype == DType::Bool && func != Func::Xor {
                        self.kleene(func == Func::And, acc, v)?
                    } else {
                        let op = match (func, dtype) {
                            (Func::And, _) => BinaryOp::BAnd,
                            (Func::Or, _) => BinaryOp::BOr,
                            (_, DType::Bool) => BinaryOp::Xor,
                            _ => BinaryOp::BXor,
                        };
                        Val {
                            value: self.b.binary(op, acc.value, v.value).map_err(b_err)?,
                            valid: self.and_valid(acc.valid, v.valid)?,
                            weak: acc.weak,
                        }
                    };
                }
                Ok(acc)
            }
            Func::Not => {
                let a = vals[0];
                let op = match self.dtype(a) {
                    DType::Bool => UnaryOp::Not,
                    d if d.is_int() => UnaryOp::BNot,
                    d => {
                        return Err(Error::Type(format!(
                            "not needs a bool or integer operand, not {d} (in `{e}`)"
                        )))
                    }
                };
                Ok(Val {
                    value: self.b.unary(op, a.value).map_err(b_err)?,
                    ..a
                })
            }
            Func::IsNull | Func::IsNotNull => {
                let null = func == Func::IsNull;
                let value = match vals[0].valid {
                    None => self.constant(Scalar::Bool(!null)),
                    Some(valid) if null => self.b.unary(UnaryOp::Not, valid).map_err(b_err)?,
                    Some(valid) => valid,
                };
                Ok(Val {
                    value,
                    valid: None,
                    weak: Weak::No,
                })
            }
            Func::Coalesce => {
                let vals = self.promote(vals, e)?;
                let mut acc = *vals.last().expect("coalesce has an argument");
                for &v in vals.iter().rev().skip(1) {
                    acc = match v.valid {
                        None => v,
                        Some(valid) => Val {
                            value: self.b.select(valid, v.value, acc.value).map_err(b_err)?,
                            valid: match acc.valid {
                                None => None,
                                Some(rest) => {
                                    Some(self.b.binary(BinaryOp::Or, valid, rest).map_err(b_err)?)
                                }
                            },
                            weak: v.weak,
                        },
                    };
                }
                Ok(acc)
            }
            Func::If => {
                let c = vals[0];
                if self.dtype(c) != DType::Bool {
                    return Err(Error::Type(format!(
                        "the condition of `{e}` must be bool, not {}",
                        self.dtype(c)
                    )));
                }
                let cond = match c.valid {
                    None => c.value,
                    Some(valid) => self
                        .b
                        .binary(BinaryOp::And, c.value, valid)
                        .map_err(b_err)?,
                };
                let ab = self.promote(&vals[1..], e)?;
                let value = self
                    .b
                    .select(cond, ab[0].value, ab[1].value)
                    .map_err(b_err)?;
                let valid = match (ab[0].valid, ab[1].valid) {
                    (None, None) => None,
                    (va, vb) => {
                        let t = self.constant(Scalar::Bool(true));
                        let (va, vb) = (va.unwrap_or(t), vb.unwrap_or(t));
                        Some(self.b.select(cond, va, vb).map_err(b_err)?)
                    }
                };
                Ok(Val {
                    value,
                    valid,
                    weak: ab[0].weak,
                })
            }
            Func::Cast(to) => {
                let v = self.cast(vals[0], to)?;
                Ok(Val {
                    weak: Weak::No,
                    ..v
                })
            }
            Func::Numpy(name) => self.numpy(name, vals, e),
        }
    }

    /// A function of the Python subset's table, lowered by that table: the
    /// value is NumPy's, null where any argument is. A null row's integer
    /// slot holds whatever the buffer has, so it becomes 1 first: no row
    /// whose result is null can fail the batch with a division by zero.
    fn numpy(&mut self, name: &'static str, vals: &[Val], e: &Expr) -> Result<Val, Error> {
        use kiln::frontend::py::funcs;
        use kiln::frontend::py::numpy::{Np, PyVal};
        let mut args = Vec::with_capacity(vals.len());
        let mut valid = None;
        for &v in vals {
            let dtype = self.dtype(v);
            let mut value = v.value;
            if let (Some(ok), true) = (v.valid, dtype.is_int()) {
                let one = self.constant(one(dtype));
                value = self.b.select(ok, value, one).map_err(type_err)?;
            }
            valid = self.and_valid(valid, v.valid)?;
            args.push(PyVal {
                v: value,
                weak: v.weak != Weak::No,
            });
        }
        let out = funcs::call(&mut Np { b: &mut self.b }, name, &args)
            .map_err(|err| Error::Type(format!("{} (in `{e}`)", err.message())))?;
        let dtype = self.b.dtype(out.v).expect("expression values are tensors");
        let weak = match (out.weak, dtype) {
            (true, d) if d.is_float() => Weak::Float,
            (true, d) if d.is_int() => Weak::Int,
            _ => Weak::No,
        };
        Ok(Val {
            value: out.v,
            valid,
            weak,
        })
    }

    /// `a op b` of two floats in DataFusion's order: NaN above `+inf` and
    /// equal to NaN, `-0.0 == +0.0` (`docs/semantics.md`, "Arrow").
    fn total_compare(&mut self, op: CmpOp, a: Value, c: Value) -> Result<Value, Error> {
        let not = |lw: &mut Self, x: Value| lw.b.unary(UnaryOp::Not, x).map_err(type_err);
        match op {
            CmpOp::Lt => self.total_less(a, c),
            CmpOp::Gt => self.total_less(c, a),
            CmpOp::Le => {
                let gt = self.total_less(c, a)?;
                not(self, gt)
            }
            CmpOp::Ge => {
                let lt = self.total_less(a, c)?;
                not(self, lt)
            }
            CmpOp::Eq => self.total_equal(a, c),
            CmpOp::Ne => {
                let eq = self.total_equal(a, c)?;
                not(self, eq)
            }
        }
    }

    /// Whether `x` and `y` are NaN.
    fn nans(&mut self, x: Value, y: Value) -> Result<(Value, Value), Error> {
        let nx = self.b.compare(CmpOp::Ne, x, x).map_err(type_err)?;
        let ny = self.b.compare(CmpOp::Ne, y, y).map_err(type_err)?;
        Ok((nx, ny))
    }

    /// `x < y` with NaN the greatest: `!nan(x) & (nan(y) | x < y)`.
    fn total_less(&mut self, x: Value, y: Value) -> Result<Value, Error> {
        let (nx, ny) = self.nans(x, y)?;
        let b = &mut self.b;
        let lt = b.compare(CmpOp::Lt, x, y).map_err(type_err)?;
        let less = b.binary(BinaryOp::Or, ny, lt).map_err(type_err)?;
        let not_nx = b.unary(UnaryOp::Not, nx).map_err(type_err)?;
        b.binary(BinaryOp::And, not_nx, less).map_err(type_err)
    }

    /// `x == y` with NaN equal to NaN: `(nan(x) & nan(y)) | x == y`.
    fn total_equal(&mut self, x: Value, y: Value) -> Result<Value, Error> {
        let (nx, ny) = self.nans(x, y)?;
        let b = &mut self.b;
        let nans = b.binary(BinaryOp::And, nx, ny).map_err(type_err)?;
        let eq = b.compare(CmpOp::Eq, x, y).map_err(type_err)?;
        b.binary(BinaryOp::Or, nans, eq).map_err(type_err)
    }

    /// Kleene AND / OR of two `bool`s: the value is `a & b` (`a | b`) wherever
    /// the result is valid, whatever a null slot holds; the result is valid
    /// where both are, or where one valid side decides it (a valid `false`
    /// for AND, a valid `true` for OR).
    fn kleene(&mut self, is_and: bool, a: Val, c: Val) -> Result<Val, Error> {
        let (op, decides) = if is_and {
            (BinaryOp::And, false)
        } else {
            (BinaryOp::Or, true)
        };
        let value = self.b.binary(op, a.value, c.value).map_err(type_err)?;
        // `decided(x)`: x's value alone fixes the result.
        let decided = |lw: &mut Self, x: Value| -> Result<Value, Error> {
            if decides {
                Ok(x)
            } else {
                lw.b.unary(UnaryOp::Not, x).map_err(type_err)
            }
        };
        let or =
            |lw: &mut Self, x: Value, y: Value| lw.b.binary(BinaryOp::Or, x, y).map_err(type_err);
        let and =
            |lw: &mut Self, x: Value, y: Value| lw.b.binary(BinaryOp::And, x, y).map_err(type_err);
        let valid = match (a.valid, c.valid) {
            (None, None) => None,
            (None, Some(vc)) => {
                let da = decided(self, a.value)?;
                Some(or(self, vc, da)?)
            }
            (Some(va), None) => {
                let dc = decided(self, c.value)?;
                Some(or(self, va, dc)?)
            }
            (Some(va), Some(vc)) => {
                let both = and(self, va, vc)?;
                let da = decided(self, a.value)?;
                let a_decides = and(self, va, da)?;
                let dc = decided(self, c.value)?;
                let c_decides = and(self, vc, dc)?;
                let either = or(self, a_decides, c_decides)?;
                Some(or(self, both, either)?)
            }
        };
        Ok(Val {
            value,
            valid,
            weak: Weak::No,
        })
    }
}

fn zero(d: DType) -> Scalar {
    match d {
        DType::Bool => Scalar::Bool(false),
        DType::I32 => Scalar::I32(0),
        DType::I64 => Scalar::I64(0),
        DType::F32 => Scalar::F32(0.0),
        DType::F64 => Scalar::F64(0.0),
    }
}

fn one(d: DType) -> Scalar {
    match d {
        DType::Bool => Scalar::Bool(true),
        DType::I32 => Scalar::I32(1),
        DType::I64 => Scalar::I64(1),
        DType::F32 => Scalar::F32(1.0),
        DType::F64 => Scalar::F64(1.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::{field, lit};
    use arrow_schema::Field;

    fn schema() -> Schema {
        Schema::new(vec![
            Field::new("x", DataType::Float64, true),
            Field::new("k", DataType::Int32, true),
            Field::new("s", DataType::Utf8, true),
        ])
    }

    #[test]
    fn null_free_batches_get_no_validity_inputs() {
        let e = field("x").gt(lit(2.0));
        let l = lower(
            &schema(),
            std::slice::from_ref(&e),
            &Kind::Filter,
            &[false, false, false],
        )
        .unwrap();
        assert_eq!(l.inputs, vec![Source::Values(0)]);
        let l = lower(&schema(), &[e], &Kind::Filter, &[true, true, false]).unwrap();
        assert_eq!(l.inputs, vec![Source::Values(0), Source::Validity(0)]);
    }

    #[test]
    fn type_errors_name_the_expression() {
        let err = |e: Expr| {
            lower(&schema(), &[e], &Kind::Filter, &[false; 3])
                .unwrap_err()
                .to_string()
        };
        assert!(
            err(field("x") + lit(1.0)).contains("must be bool"),
            "{}",
            err(field("x"))
        );
        assert!(err(field("s").gt(lit(1.0))).contains("Utf8"));
        assert!(err(field("nope").gt(lit(1.0))).contains("x, k, s"));
        assert!(err(field("x").gt(lit(true))).contains("cannot combine f64 and bool"));
        assert!(err(Expr::Call(Func::And, vec![field("x"), field("x")])).contains("f64"));
        assert!(err(lit(1.0).gt(lit(0.0))).contains("reads no column"));
    }
}
