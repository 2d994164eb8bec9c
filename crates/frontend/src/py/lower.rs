//! Lowering the Python subset's syntax tree to a graph, with Python 3 and NumPy
//! meanings: literals are "weak" (NEP 50: `x_f32 * 2.0` stays `f32`), `/` and
//! `**` compute in floating point, `//` and `%` floor, `&`/`|`/`~` are logical
//! on bools and bitwise on ints.
//!
//! Expressions are lowered in arena order, statement by statement, in one loop.

use super::ast::{Ast, BinOp, ExprId, ExprKind, Stmt, UnOp};
use super::funcs;
use super::Options;
use kiln_ir::{
    Builder, DType, Graph, Loc, ParseError, ParseResult, Scalar, SourceMap, TensorType, Type, Value,
};
use std::collections::HashMap;

/// A lowered expression value: a graph value and whether it is a literal
/// ("weak": it takes the dtype of the other operand of its kind).
#[derive(Copy, Clone, Debug)]
pub struct PyVal {
    /// The graph value.
    pub v: Value,
    /// True for literals and expressions of literals only.
    pub weak: bool,
}

#[derive(Clone, Debug)]
enum Lowered {
    Val(PyVal),
    Tuple(Vec<PyVal>),
}

/// Lowering state.
pub struct Lower<'a> {
    src: &'a str,
    ast: &'a Ast,
    opts: &'a Options,
    /// The graph being built.
    pub b: Builder,
    values: Vec<Option<Lowered>>,
    env: HashMap<String, PyVal>,
    source_map: SourceMap,
    /// Where the expression being lowered starts (for errors).
    pub at: usize,
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

impl<'a> Lower<'a> {
    /// Lowers `ast` to a graph.
    pub fn run(src: &'a str, ast: &'a Ast, opts: &'a Options) -> ParseResult<(Graph, SourceMap)> {
        let name = ast.name.clone().unwrap_or_else(|| "expr".to_string());
        let mut lw = Lower {
            src,
            ast,
            opts,
            b: Builder::new(&name),
            values: vec![None; ast.exprs.len()],
            env: HashMap::new(),
            source_map: SourceMap::default(),
            at: 0,
        };
        lw.params()?;
        lw.body()?;
        Ok((lw.b.finish(), lw.source_map))
    }

    /// An error at the expression being lowered.
    pub fn err<T>(&self, message: impl Into<String>) -> ParseResult<T> {
        Err(ParseError::at(self.src, self.at, message))
    }

    /// The type of input `name`: the annotation's shape, else the options'.
    fn input_type(&self, name: &str, dtype: DType, annotated: Option<&kiln_ir::Shape>) -> Type {
        let shape = annotated
            .or_else(|| self.opts.shapes.get(name))
            .unwrap_or(&self.opts.default_shape)
            .clone();
        Type::Tensor(TensorType { dtype, shape })
    }

    fn params(&mut self) -> ParseResult<()> {
        for param in &self.ast.params {
            self.at = param.span.start;
            let dtype = match param.annotation.as_deref() {
                None => DType::F64,
                Some(ann) => match annotation_dtype(ann) {
                    Some(d) => d,
                    None => {
                        return self.err(format!(
                            "unknown type annotation `{ann}`; use float, int, bool, f32 or i32"
                        ))
                    }
                },
            };
            if self.env.contains_key(&param.name) {
                return self.err(format!("duplicate parameter `{}`", param.name));
            }
            let ty = self.input_type(&param.name, dtype, param.shape.as_ref());
            let v = self.b.input(&param.name, ty);
            self.b.set_source_name(v, &param.name);
            self.env
                .insert(param.name.clone(), PyVal { v, weak: false });
        }
        Ok(())
    }

    fn body(&mut self) -> ParseResult<()> {
        let mut next_expr = 0;
        let n_stmts = self.ast.body.len();
        for (stmt_idx, (stmt, span)) in self.ast.body.iter().enumerate() {
            let root = match stmt {
                Stmt::Assign(_, e)
                | Stmt::AugAssign(_, _, _, e)
                | Stmt::Return(e)
                | Stmt::Expr(e) => *e,
            };
            for expr in next_expr..=root {
                self.expr(expr)?;
            }
            next_expr = root + 1;
            self.at = span.start;
            let is_last = stmt_idx + 1 == n_stmts;
            match stmt {
                Stmt::Assign(targets, e) => self.assign(targets, *e)?,
                Stmt::AugAssign(target, tspan, op, e) => {
                    self.at = tspan.start;
                    let current = self.lookup(target)?;
                    let rhs = self.val(*e)?;
                    self.at = span.start;
                    let v = self.binary(*op, current, rhs)?;
                    self.bind(target, v);
                }
                Stmt::Return(e) if is_last => return self.outputs(*e),
                Stmt::Return(_) => {
                    self.at = self.ast.body[stmt_idx + 1].1.start;
                    return self.err("unreachable statement after `return`");
                }
                Stmt::Expr(e) if is_last && self.ast.name.is_none() => return self.outputs(*e),
                Stmt::Expr(_) => {}
            }
        }
        self.at = self.src.len();
        match &self.ast.name {
            Some(name) => self.err(format!("function `{name}` does not return a value")),
            None => self.err("expected an expression to compute"),
        }
    }

    fn assign(&mut self, targets: &[(String, super::ast::Span)], e: ExprId) -> ParseResult<()> {
        let vals = match self.values[e].clone().expect("lowered") {
            Lowered::Val(v) if targets.len() == 1 => vec![v],
            Lowered::Tuple(vs) if vs.len() == targets.len() => vs,
            Lowered::Tuple(vs) if targets.len() == 1 => {
                return self.err(format!("cannot assign a tuple of {} to one name", vs.len()))
            }
            _ => return self.err(format!("cannot unpack into {} names", targets.len())),
        };
        for ((name, _), v) in targets.iter().zip(vals) {
            self.bind(name, v);
        }
        Ok(())
    }

    fn bind(&mut self, name: &str, v: PyVal) {
        if self.b.graph().source_name(v.v).is_none() {
            self.b.set_source_name(v.v, name);
        }
        self.env.insert(name.to_string(), v);
    }

    fn outputs(&mut self, e: ExprId) -> ParseResult<()> {
        let items: Vec<ExprId> = match &self.ast.exprs[e].kind {
            ExprKind::Tuple(items) => items.clone(),
            _ => vec![e],
        };
        if items.is_empty() {
            self.at = self.ast.exprs[e].span.start;
            return self.err("an empty tuple has nothing to return");
        }
        let single = items.len() == 1;
        let mut used: Vec<String> = Vec::new();
        for (out_idx, item) in items.into_iter().enumerate() {
            let mut name = match &self.ast.exprs[item].kind {
                ExprKind::Name(n) if !n.contains('.') => n.clone(),
                _ if single => "out".to_string(),
                _ => format!("out{out_idx}"),
            };
            while used.contains(&name) {
                name.push('_');
            }
            let v = self.val(item)?;
            used.push(name.clone());
            self.b.output(&name, v.v);
        }
        Ok(())
    }

    fn lookup(&mut self, name: &str) -> ParseResult<PyVal> {
        if let Some(v) = self.env.get(name) {
            return Ok(*v);
        }
        if let Some(c) = funcs::constant(name) {
            return Ok(self.literal(Scalar::F64(c)));
        }
        if self.ast.name.is_some() || name.contains('.') {
            return self.err(format!("name `{name}` is not defined"));
        }
        // A free name of a script is an input, in order of first use.
        let ty = self.input_type(name, DType::F64, None);
        let v = self.b.input(name, ty);
        self.b.set_source_name(v, name);
        let val = PyVal { v, weak: false };
        self.env.insert(name.to_string(), val);
        Ok(val)
    }

    /// The value of an already lowered expression that must not be a tuple.
    pub fn val(&self, e: ExprId) -> ParseResult<PyVal> {
        match self.values[e]
            .as_ref()
            .expect("operands are lowered before their users")
        {
            Lowered::Val(v) => Ok(*v),
            Lowered::Tuple(_) => Err(ParseError::at(
                self.src,
                self.ast.exprs[e].span.start,
                "a tuple can only be returned or assigned",
            )),
        }
    }

    /// A literal constant.
    pub fn literal(&mut self, c: Scalar) -> PyVal {
        PyVal {
            v: self.b.constant(c),
            weak: true,
        }
    }

    fn expr(&mut self, e: ExprId) -> ParseResult<()> {
        let expr = &self.ast.exprs[e];
        self.at = expr.span.start;
        let lowered = match &expr.kind {
            ExprKind::Name(n) => Lowered::Val(self.lookup(n)?),
            ExprKind::Int(v) => match i64::try_from(*v) {
                Ok(v) => Lowered::Val(self.literal(Scalar::I64(v))),
                Err(_) => return self.err("integer literal out of range for int64"),
            },
            ExprKind::Float(v) => Lowered::Val(self.literal(Scalar::F64(*v))),
            ExprKind::Bool(v) => Lowered::Val(self.literal(Scalar::Bool(*v))),
            ExprKind::Unary(op, a) => Lowered::Val(self.unary(*op, self.val(*a)?)?),
            ExprKind::Binary(op, a, b) => {
                Lowered::Val(self.binary(*op, self.val(*a)?, self.val(*b)?)?)
            }
            ExprKind::Compare(first, rest) => Lowered::Val(self.compare_chain(*first, rest)?),
            ExprKind::IfElse(c, a, b) => {
                let (c, a, b) = (self.val(*c)?, self.val(*a)?, self.val(*b)?);
                let c = self.truth(c)?;
                let (a, b, _) = self.promote(a, b, false)?;
                let v = self.typed(|b_| b_.select(c.v, a.v, b.v))?;
                Lowered::Val(PyVal { v, weak: false })
            }
            ExprKind::Call(name, args) => {
                let args = args
                    .iter()
                    .map(|&a| self.val(a))
                    .collect::<ParseResult<Vec<_>>>()?;
                Lowered::Val(funcs::call(self, name, &args)?)
            }
            ExprKind::Tuple(items) => Lowered::Tuple(
                items
                    .iter()
                    .map(|&i| self.val(i))
                    .collect::<ParseResult<_>>()?,
            ),
        };
        if let Lowered::Val(v) = &lowered {
            if self.source_map.get(v.v).is_none() {
                self.source_map
                    .set(v.v, Loc::of_offset(self.src, expr.span.start));
            }
        }
        self.values[e] = Some(lowered);
        Ok(())
    }

    /// Runs a builder call, turning a type error into a located parse error.
    pub fn typed(
        &mut self,
        f: impl FnOnce(&mut Builder) -> kiln_ir::TypeResult<Value>,
    ) -> ParseResult<Value> {
        f(&mut self.b).or_else(|e| self.err(e.message))
    }

    /// The dtype of a value.
    pub fn dtype(&self, v: PyVal) -> DType {
        self.b.dtype(v.v).expect("frontend values are tensors")
    }

    /// Converts `v` to `to`. A literal converts at compile time; an int literal
    /// that does not fit the target int type is an error (as in NumPy 2).
    pub fn convert(&mut self, v: PyVal, to: DType) -> ParseResult<PyVal> {
        if self.dtype(v) == to {
            return Ok(v);
        }
        if let kiln_ir::Op::Const(c) = self.b.graph().node(v.v).op {
            let converted = kiln_ir::semantics::cast(c, to);
            let round_trips = kiln_ir::semantics::cast(converted, c.dtype()) == c;
            if c.dtype().is_int() && to.is_int() && !round_trips {
                return self.err(format!("integer literal {c} is out of range for {to}"));
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
    pub fn promote(
        &mut self,
        a: PyVal,
        b: PyVal,
        arith: bool,
    ) -> ParseResult<(PyVal, PyVal, DType)> {
        let (da, db) = (self.dtype(a), self.dtype(b));
        let mut common = match (a.weak, b.weak) {
            (true, false) if category(da) <= category(db) => db,
            (false, true) if category(db) <= category(da) => da,
            (true, false) => default_of(category(da)).max(db),
            (false, true) => default_of(category(db)).max(da),
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
    pub fn truth(&mut self, v: PyVal) -> ParseResult<PyVal> {
        self.convert(v, DType::Bool)
    }

    /// A float version of `v` (`f64` unless it is already a float).
    pub fn floating(&mut self, v: PyVal) -> ParseResult<PyVal> {
        if self.dtype(v).is_float() {
            Ok(v)
        } else {
            self.convert(v, DType::F64)
        }
    }

    fn unary(&mut self, op: UnOp, a: PyVal) -> ParseResult<PyVal> {
        let weak = a.weak;
        let (ir_op, a) = match op {
            UnOp::Pos => {
                return if self.dtype(a) == DType::Bool {
                    self.convert(a, DType::I64)
                } else {
                    Ok(a)
                }
            }
            UnOp::Neg => {
                let a = if self.dtype(a) == DType::Bool {
                    self.convert(a, DType::I64)?
                } else {
                    a
                };
                (kiln_ir::UnaryOp::Neg, a)
            }
            UnOp::Not => (kiln_ir::UnaryOp::Not, self.truth(a)?),
            UnOp::Invert => match self.dtype(a) {
                DType::Bool => (kiln_ir::UnaryOp::Not, a),
                d if d.is_int() => (kiln_ir::UnaryOp::BNot, a),
                d => return self.err(format!("`~` takes bools or ints, got {d}")),
            },
        };
        let v = self.typed(|b| b.unary(ir_op, a.v))?;
        Ok(PyVal { v, weak })
    }

    /// Lowers `a op b` with Python's meaning.
    pub fn binary(&mut self, op: BinOp, a: PyVal, b: PyVal) -> ParseResult<PyVal> {
        use kiln_ir::BinaryOp as B;
        let weak = a.weak && b.weak;
        let (a, b, common) = match op {
            BinOp::And | BinOp::Or => {
                let (a, b) = (self.truth(a)?, self.truth(b)?);
                (a, b, DType::Bool)
            }
            BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor => self.promote(a, b, false)?,
            _ => self.promote(a, b, true)?,
        };
        let (a, b, ir_op) = match op {
            BinOp::Add => (a, b, B::Add),
            BinOp::Sub => (a, b, B::Sub),
            BinOp::Mul => (a, b, B::Mul),
            BinOp::FloorDiv => (a, b, B::FloorDiv),
            BinOp::Mod => (a, b, B::Mod),
            BinOp::Div | BinOp::Pow => {
                let (a, b) = (self.floating(a)?, self.floating(b)?);
                (a, b, if op == BinOp::Div { B::Div } else { B::Pow })
            }
            BinOp::And => (a, b, B::And),
            BinOp::Or => (a, b, B::Or),
            BinOp::BitAnd if common == DType::Bool => (a, b, B::And),
            BinOp::BitOr if common == DType::Bool => (a, b, B::Or),
            BinOp::BitXor if common == DType::Bool => (a, b, B::Xor),
            BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor | BinOp::Shl | BinOp::Shr
                if !common.is_int() =>
            {
                return self.err(format!(
                    "bitwise operators take bools or ints, got {common}"
                ));
            }
            BinOp::BitAnd => (a, b, B::BAnd),
            BinOp::BitOr => (a, b, B::BOr),
            BinOp::BitXor => (a, b, B::BXor),
            BinOp::Shl => (a, b, B::Shl),
            BinOp::Shr => (a, b, B::ShrArith),
        };
        let v = self.typed(|bd| bd.binary(ir_op, a.v, b.v))?;
        Ok(PyVal { v, weak })
    }

    /// Lowers `first op1 x1 op2 x2 …` as `(first op1 x1) and (x1 op2 x2) …`.
    fn compare_chain(
        &mut self,
        first: ExprId,
        rest: &[(kiln_ir::CmpOp, ExprId)],
    ) -> ParseResult<PyVal> {
        let mut lhs = self.val(first)?;
        let mut result: Option<PyVal> = None;
        for &(op, rhs) in rest {
            let rhs = self.val(rhs)?;
            let weak = lhs.weak && rhs.weak;
            let (a, b, _) = self.promote(lhs, rhs, false)?;
            let cmp = PyVal {
                v: self.typed(|bd| bd.compare(op, a.v, b.v))?,
                weak,
            };
            result = Some(match result {
                None => cmp,
                Some(acc) => self.binary(BinOp::And, acc, cmp)?,
            });
            lhs = rhs;
        }
        Ok(result.expect("a comparison has at least one operator"))
    }
}

/// The dtype of a parameter annotation.
fn annotation_dtype(ann: &str) -> Option<DType> {
    let last = ann.rsplit('.').next().unwrap_or(ann);
    Some(match last {
        "float" | "f64" | "float64" | "double" => DType::F64,
        "int" | "i64" | "int64" | "long" => DType::I64,
        "bool" => DType::Bool,
        "f32" | "float32" => DType::F32,
        "i32" | "int32" => DType::I32,
        _ => return None,
    })
}
