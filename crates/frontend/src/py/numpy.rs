//! NumPy's meaning of values and operators, on a graph [`Builder`]: NEP 50
//! promotion with weak literals, truthiness, and the Python operators where
//! NumPy and kiln's IR differ (shifts by counts outside `[0, width)`, the
//! exponents `**` special-cases). Shared by the Python subset's lowering and
//! by `kiln-arrow`'s pandas queries, so one expression means one thing at
//! every entry point. It builds IR ops only; the IR's rules stay its own.
//!
//! Errors are plain messages: the caller knows where in its source it is.

use super::ast::BinOp;
use kiln_ir::{BinaryOp, Builder, CmpOp, DType, Op, Scalar, TypeResult, UnaryOp, Value};

/// A lowered expression value: a graph value and whether it is a literal
/// ("weak": it takes the dtype of the other operand of its kind).
#[derive(Copy, Clone, Debug)]
pub struct PyVal {
    /// The graph value.
    pub v: Value,
    /// True for literals and expressions of literals only.
    pub weak: bool,
}

/// A result whose error is a message for the caller to locate.
pub type NpResult<T> = Result<T, String>;

/// NumPy's rules over a builder.
pub struct Np<'b> {
    /// The graph being built.
    pub b: &'b mut Builder,
}

/// Category of a dtype for promotion: bool < int < float.
fn category(d: DType) -> u8 {
    match d {
        DType::Bool => 0,
        DType::I32 | DType::I64 => 1,
        DType::F32 | DType::F64 => 2,
    }
}

/// The default dtype of a category (Python's `bool`, `int`, `float`).
fn default_of(category: u8) -> DType {
    [DType::Bool, DType::I64, DType::F64][category as usize]
}

/// `v` as a scalar of the integer or float dtype `d`.
pub fn scalar_of(d: DType, v: f64) -> Scalar {
    match d {
        DType::Bool => Scalar::Bool(v != 0.0),
        DType::I32 => Scalar::I32(v as i32),
        DType::I64 => Scalar::I64(v as i64),
        DType::F32 => Scalar::F32(v as f32),
        DType::F64 => Scalar::F64(v),
    }
}

impl Np<'_> {
    /// Runs a builder call, keeping a type error's message.
    pub fn typed(&mut self, f: impl FnOnce(&mut Builder) -> TypeResult<Value>) -> NpResult<Value> {
        f(self.b).map_err(|e| e.message)
    }

    /// The dtype of a value.
    pub fn dtype(&self, v: PyVal) -> DType {
        self.b.dtype(v.v).expect("frontend values are tensors")
    }

    /// A literal constant.
    pub fn literal(&mut self, c: Scalar) -> PyVal {
        PyVal {
            v: self.b.constant(c),
            weak: true,
        }
    }

    /// A constant of `v`'s dtype, not weak.
    pub fn constant_like(&mut self, v: PyVal, x: f64) -> PyVal {
        let d = self.dtype(v);
        PyVal {
            v: self.b.constant(scalar_of(d, x)),
            weak: false,
        }
    }

    /// The value of a literal (a constant node), if `v` is one.
    pub fn literal_value(&self, v: PyVal) -> Option<Scalar> {
        match self.b.graph().node(v.v).op {
            Op::Const(c) if v.weak => Some(c),
            _ => None,
        }
    }

    /// Converts `v` to `to`. A literal converts at compile time; an int literal
    /// that does not fit the target int type is an error (as in NumPy 2).
    pub fn convert(&mut self, v: PyVal, to: DType) -> NpResult<PyVal> {
        if self.dtype(v) == to {
            return Ok(v);
        }
        if let Op::Const(c) = self.b.graph().node(v.v).op {
            let converted = kiln_ir::semantics::cast(c, to);
            let round_trips = kiln_ir::semantics::cast(converted, c.dtype()) == c;
            if c.dtype().is_int() && to.is_int() && !round_trips {
                return Err(format!("integer literal {c} is out of range for {to}"));
            }
            return Ok(PyVal {
                v: self.b.constant(converted),
                weak: v.weak,
            });
        }
        let cast = self.typed(|b| b.cast(v.v, to))?;
        Ok(PyVal {
            v: cast,
            weak: v.weak,
        })
    }

    /// Converts two operands to their common dtype (NEP 50 promotion: a literal
    /// does not widen a value of its own category or a higher one). With
    /// `arith`, bools become `i64` (`True + True == 2`).
    pub fn promote(&mut self, a: PyVal, b: PyVal, arith: bool) -> NpResult<(PyVal, PyVal, DType)> {
        let (da, db) = (self.dtype(a), self.dtype(b));
        let mut common = match (a.weak, b.weak) {
            (true, false) if category(da) <= category(db) => db,
            (false, true) if category(db) <= category(da) => da,
            (true, false) => default_of(category(da)).max(db),
            (false, true) => default_of(category(db)).max(da),
            // NumPy's `result_type`: an i32 or i64 array meets an f32 one in
            // f64 (f32 cannot hold their values).
            (false, false) if da.is_int() && db == DType::F32 => DType::F64,
            (false, false) if db.is_int() && da == DType::F32 => DType::F64,
            _ => da.max(db),
        };
        if arith && common == DType::Bool {
            common = DType::I64;
        }
        let a = self.convert(a, common)?;
        let b = self.convert(b, common)?;
        Ok((a, b, common))
    }

    /// Python truthiness: `bool(x)`, i.e. `x != 0` (NaN is true).
    pub fn truth(&mut self, v: PyVal) -> NpResult<PyVal> {
        self.convert(v, DType::Bool)
    }

    /// A float version of `v` (`f64` unless it is already a float).
    pub fn floating(&mut self, v: PyVal) -> NpResult<PyVal> {
        if self.dtype(v).is_float() {
            Ok(v)
        } else {
            self.convert(v, DType::F64)
        }
    }

    /// `v` with bools made `i64`, as NumPy's arithmetic on bools does.
    pub fn numeric(&mut self, v: PyVal) -> NpResult<PyVal> {
        if self.dtype(v) == DType::Bool {
            self.convert(v, DType::I64)
        } else {
            Ok(v)
        }
    }

    /// Applies an IR unary op, keeping weakness.
    pub fn apply_unary(&mut self, op: UnaryOp, a: PyVal) -> NpResult<PyVal> {
        let v = self.typed(|b| b.unary(op, a.v))?;
        Ok(PyVal { v, weak: a.weak })
    }

    /// Applies an IR binary op to operands of one dtype.
    pub fn apply_binary(&mut self, op: BinaryOp, a: PyVal, b: PyVal) -> NpResult<PyVal> {
        let v = self.typed(|bd| bd.binary(op, a.v, b.v))?;
        Ok(PyVal {
            v,
            weak: a.weak && b.weak,
        })
    }

    /// `a op b` after promotion (a comparison's result is `bool`).
    pub fn compare(&mut self, op: CmpOp, a: PyVal, b: PyVal) -> NpResult<PyVal> {
        let weak = a.weak && b.weak;
        let (a, b, _) = self.promote(a, b, false)?;
        let v = self.typed(|bd| bd.compare(op, a.v, b.v))?;
        Ok(PyVal { v, weak })
    }

    /// `select(c, a, b)` of operands already of one dtype.
    pub fn select(&mut self, c: PyVal, a: PyVal, b: PyVal) -> NpResult<PyVal> {
        let v = self.typed(|bd| bd.select(c.v, a.v, b.v))?;
        Ok(PyVal {
            v,
            weak: c.weak && a.weak && b.weak,
        })
    }

    /// `isnan(x)` of a float: `x != x`.
    pub fn is_nan(&mut self, x: PyVal) -> NpResult<PyVal> {
        self.compare(CmpOp::Ne, x, x)
    }

    /// Lowers the unary operator `op` with Python's meaning.
    pub fn unary(&mut self, op: super::ast::UnOp, a: PyVal) -> NpResult<PyVal> {
        use super::ast::UnOp;
        let weak = a.weak;
        let (ir_op, a) = match op {
            UnOp::Pos => return self.numeric(a),
            UnOp::Neg => {
                let a = self.numeric(a)?;
                // A negated literal is a literal (`x ** -1.0` sees `-1.0`).
                if let Some(c) = self.literal_value(a) {
                    if let Ok(neg) = kiln_ir::semantics::unary(UnaryOp::Neg, c) {
                        return Ok(self.literal(neg));
                    }
                }
                (UnaryOp::Neg, a)
            }
            UnOp::Not => (UnaryOp::Not, self.truth(a)?),
            UnOp::Invert => match self.dtype(a) {
                DType::Bool => (UnaryOp::Not, a),
                d if d.is_int() => (UnaryOp::BNot, a),
                d => return Err(format!("`~` takes bools or ints, got {d}")),
            },
        };
        let v = self.typed(|b| b.unary(ir_op, a.v))?;
        Ok(PyVal { v, weak })
    }

    /// Lowers `a op b` with Python's and NumPy's meaning.
    pub fn binary(&mut self, op: BinOp, a: PyVal, b: PyVal) -> NpResult<PyVal> {
        use BinaryOp as B;
        let (a, b, common) = match op {
            BinOp::And | BinOp::Or => {
                let (a, b) = (self.truth(a)?, self.truth(b)?);
                (a, b, DType::Bool)
            }
            BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor => self.promote(a, b, false)?,
            BinOp::Pow => return self.power(a, b),
            BinOp::MatMul => {
                let (a, b, _) = self.promote(a, b, true)?;
                let v = self.typed(|g| g.op(Op::MatMul, &[a.v, b.v]))?;
                return Ok(PyVal { v, weak: false });
            }
            _ => self.promote(a, b, true)?,
        };
        let ir_op = match op {
            BinOp::Add => B::Add,
            BinOp::Sub => B::Sub,
            BinOp::Mul => B::Mul,
            BinOp::FloorDiv => B::FloorDiv,
            BinOp::Mod => B::Mod,
            BinOp::Div => {
                let (a, b) = (self.floating(a)?, self.floating(b)?);
                return self.apply_binary(B::Div, a, b);
            }
            BinOp::And => B::And,
            BinOp::Or => B::Or,
            BinOp::BitAnd if common == DType::Bool => B::And,
            BinOp::BitOr if common == DType::Bool => B::Or,
            BinOp::BitXor if common == DType::Bool => B::Xor,
            BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor | BinOp::Shl | BinOp::Shr
                if !common.is_int() =>
            {
                return Err(format!(
                    "bitwise operators take bools or ints, got {common}"
                ));
            }
            BinOp::BitAnd => B::BAnd,
            BinOp::BitOr => B::BOr,
            BinOp::BitXor => B::BXor,
            BinOp::Shl | BinOp::Shr => return self.shift(op == BinOp::Shl, a, b),
            BinOp::Pow | BinOp::MatMul => unreachable!("handled above"),
        };
        self.apply_binary(ir_op, a, b)
    }

    /// NumPy's shifts of ints of one dtype: a count outside `[0, width)`
    /// shifts every bit out, giving 0 for `<<` and 0 or -1 (the sign) for
    /// `>>` (`npy_lshift`, `npy_rshift`). The IR takes counts modulo the
    /// width, so the count is checked here and the IR shift used inside.
    fn shift(&mut self, left: bool, a: PyVal, count: PyVal) -> NpResult<PyVal> {
        let width = self.dtype(a).size_bytes() as f64 * 8.0;
        let weak = a.weak && count.weak;
        let zero = self.constant_like(a, 0.0);
        let limit = self.constant_like(a, width);
        let at_least_zero = self.compare(CmpOp::Ge, count, zero)?;
        let below_width = self.compare(CmpOp::Lt, count, limit)?;
        let in_range = self.apply_binary(BinaryOp::And, at_least_zero, below_width)?;
        let ir_op = if left {
            BinaryOp::Shl
        } else {
            BinaryOp::ShrArith
        };
        let shifted = self.apply_binary(ir_op, a, count)?;
        let out_of_range = if left {
            zero
        } else {
            let negative = self.compare(CmpOp::Lt, a, zero)?;
            let minus_one = self.constant_like(a, -1.0);
            self.select(negative, minus_one, zero)?
        };
        let v = self.select(in_range, shifted, out_of_range)?;
        Ok(PyVal { weak, ..v })
    }

    /// `a ** b` (and `power`, `pow`): computed in floating point. A literal
    /// exponent NumPy special-cases for a float array gives NumPy's result:
    /// `0.5` is `sqrt` (so `(-inf) ** 0.5` is NaN and `(-0.0) ** 0.5` is
    /// `-0.0`), `2` is `a * a`, `-1` is `1 / a`, `1` is `a`.
    pub fn power(&mut self, a: PyVal, b: PyVal) -> NpResult<PyVal> {
        let exponent = self.literal_value(b).map(|c| match c {
            Scalar::Bool(v) => f64::from(u8::from(v)),
            Scalar::I32(v) => f64::from(v),
            Scalar::I64(v) => v as f64,
            Scalar::F32(v) => f64::from(v),
            Scalar::F64(v) => v,
        });
        let (a, b, _) = self.promote(a, b, true)?;
        let (a, b) = (self.floating(a)?, self.floating(b)?);
        match exponent {
            Some(0.5) => self.apply_unary(UnaryOp::Sqrt, a),
            Some(2.0) => self.apply_binary(BinaryOp::Mul, a, a),
            Some(-1.0) => {
                let one = self.constant_like(a, 1.0);
                let v = self.apply_binary(BinaryOp::Div, one, a)?;
                Ok(PyVal { weak: a.weak, ..v })
            }
            Some(1.0) => Ok(a),
            _ => self.apply_binary(BinaryOp::Pow, a, b),
        }
    }
}
