//! Lowering the Python subset's syntax tree to a graph, with Python 3 and NumPy
//! meanings: literals are "weak" (NEP 50: `x_f32 * 2.0` stays `f32`), `/` and
//! `**` compute in floating point, `//` and `%` floor, `&`/`|`/`~` are logical
//! on bools and bitwise on ints.
//!
//! Expressions are lowered in arena order, statement by statement, in one loop.

use super::ast::{Ast, BinOp, ExprId, ExprKind, Stmt};
use super::funcs;
use super::tensor;
use super::Options;
use kiln_ir::{
    Builder, DType, Graph, ParseError, ParseResult, Scalar, SourceMap, TensorType, Type,
};
use rustc_hash::FxHashMap;

pub use super::numpy::PyVal;
use super::numpy::{Np, NpResult};

/// What an expression lowered to.
#[derive(Clone, Debug)]
pub(super) enum Lowered {
    Val(PyVal),
    /// A tuple or list.
    Tuple(Vec<PyVal>),
    /// `None`: an argument (`axis=None`) or a new axis in an index.
    None,
}

/// Lowering state.
pub struct Lower<'a> {
    src: &'a str,
    /// `src`'s lines, to locate each node.
    lines: kiln_ir::diag::Lines<'a>,
    pub(super) ast: &'a Ast,
    opts: &'a Options,
    /// The graph being built.
    pub b: Builder,
    values: Vec<Option<Lowered>>,
    /// Each bound name's value (Fx: a few short names per expression).
    env: FxHashMap<String, PyVal>,
    source_map: SourceMap,
    /// Where the expression being lowered starts (for errors).
    pub at: usize,
    /// The float literals read as parameters ([`Options::parameters`]).
    parameters: Vec<super::Parameter>,
}

impl<'a> Lower<'a> {
    /// Lowers `ast` to a graph.
    pub fn run(src: &'a str, ast: &'a Ast, opts: &'a Options) -> ParseResult<(Graph, SourceMap)> {
        let (graph, map, _) = Self::run_with_parameters(src, ast, opts)?;
        Ok((graph, map))
    }

    /// [`Self::run`], and the float literals read as parameters.
    pub fn run_with_parameters(
        src: &'a str,
        ast: &'a Ast,
        opts: &'a Options,
    ) -> ParseResult<(Graph, SourceMap, Vec<super::Parameter>)> {
        let name = ast.name.clone().unwrap_or_else(|| "expr".to_string());
        let mut lw = Lower {
            src,
            lines: kiln_ir::diag::Lines::new(src),
            ast,
            opts,
            // About a node for every expression and parameter.
            b: Builder::from_graph(Graph::with_capacity(
                &name,
                ast.exprs.len() + ast.params.len(),
            )),
            values: vec![None; ast.exprs.len()],
            env: FxHashMap::default(),
            source_map: SourceMap::with_capacity(ast.exprs.len() + ast.params.len()),
            at: 0,
            parameters: Vec::new(),
        };
        lw.params()?;
        lw.body()?;
        Ok((lw.b.finish(), lw.source_map, lw.parameters))
    }

    /// An error at the expression being lowered.
    pub fn err<T>(&self, message: impl Into<String>) -> ParseResult<T> {
        Err(ParseError::at(self.src, self.at, message))
    }

    /// The dtype of input `name` without an annotation: the options' for
    /// it, else their default, else `f64`.
    fn input_dtype(&self, name: &str) -> DType {
        self.opts
            .dtypes
            .get(name)
            .copied()
            .or(self.opts.default_dtype)
            .unwrap_or(DType::F64)
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
                None => self.input_dtype(&param.name),
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
                    let v = self.np(|np| np.binary(*op, current, rhs))?;
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
        let ty = self.input_type(name, self.input_dtype(name), None);
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
                "a tuple or list can only be returned, assigned or passed to a function",
            )),
            Lowered::None => Err(ParseError::at(
                self.src,
                self.ast.exprs[e].span.start,
                "`None` is not a value here (it is an argument or a new axis in an index)",
            )),
        }
    }

    /// What an already lowered expression is.
    pub(super) fn lowered(&self, e: ExprId) -> Option<&Lowered> {
        self.values[e].as_ref()
    }

    /// A dotted name whose first component is a variable (`x.T`,
    /// `x.reshape`): the variable and the attributes after it. Names with a
    /// module prefix (`np.pi`, `math.sin`) are not.
    fn receiver_of<'n>(&mut self, name: &'n str) -> ParseResult<Option<(PyVal, Vec<&'n str>)>> {
        let Some((first, rest)) = name.split_once('.') else {
            return Ok(None);
        };
        // An unbound first name is a (script's) input only when what follows
        // is an array's attribute or method; `os.system` stays an unknown
        // module.
        let member = rest.split('.').next().unwrap_or(rest);
        if !self.env.contains_key(first)
            && (funcs::base_name(name).is_some()
                || funcs::constant(name).is_some()
                || !tensor::is_member(member))
        {
            return Ok(None);
        }
        let x = self.lookup(first)?;
        Ok(Some((x, rest.split('.').collect())))
    }

    /// `x.a.b`: attributes one after another.
    fn attributes(&mut self, mut x: PyVal, attrs: &[&str]) -> ParseResult<PyVal> {
        for a in attrs {
            x = self.attribute(x, a)?;
        }
        Ok(x)
    }

    /// A literal constant.
    fn literal(&mut self, c: Scalar) -> PyVal {
        PyVal {
            v: self.b.constant(c),
            weak: true,
        }
    }

    /// The float literal `value` of expression `e` as the next parameter: a
    /// scalar input `$k`, weak as the literal would be.
    fn parameter(&mut self, value: f64, e: ExprId) -> PyVal {
        let span = self.ast.exprs[e].span;
        let name = format!("${}", self.parameters.len());
        self.parameters.push(super::Parameter {
            value,
            span: span.start..span.end,
        });
        let v = self.b.input(&name, Type::scalar(DType::F64));
        PyVal { v, weak: true }
    }

    fn expr(&mut self, e: ExprId) -> ParseResult<()> {
        let expr = &self.ast.exprs[e];
        self.at = expr.span.start;
        let lowered = match &expr.kind {
            ExprKind::Name(n) => match self.receiver_of(n)? {
                Some((x, attrs)) => Lowered::Val(self.attributes(x, &attrs)?),
                None => Lowered::Val(self.lookup(n)?),
            },
            ExprKind::Int(v) => match i64::try_from(*v) {
                Ok(v) => Lowered::Val(self.literal(Scalar::I64(v))),
                Err(_) => return self.err("integer literal out of range for int64"),
            },
            ExprKind::Float(v) if self.opts.parameters => Lowered::Val(self.parameter(*v, e)),
            ExprKind::Float(v) => Lowered::Val(self.literal(Scalar::F64(*v))),
            ExprKind::Bool(v) => Lowered::Val(self.literal(Scalar::Bool(*v))),
            ExprKind::Unary(op, a) => {
                let a = self.val(*a)?;
                Lowered::Val(self.np(|np| np.unary(*op, a))?)
            }
            ExprKind::Binary(op, a, b) => {
                let (a, b) = (self.val(*a)?, self.val(*b)?);
                Lowered::Val(self.np(|np| np.binary(*op, a, b))?)
            }
            ExprKind::Compare(first, rest) => Lowered::Val(self.compare_chain(*first, rest)?),
            ExprKind::In(x, container, negated) => {
                let x = self.val(*x)?;
                Lowered::Val(self.isin(x, *container, *negated)?)
            }
            ExprKind::IfElse(c, a, b) => {
                let (c, a, b) = (self.val(*c)?, self.val(*a)?, self.val(*b)?);
                let v = self.np(|np| {
                    let c = np.truth(c)?;
                    let (a, b, _) = np.promote(a, b, false)?;
                    np.select(c, a, b)
                })?;
                Lowered::Val(PyVal { weak: false, ..v })
            }
            ExprKind::Call(name, args, kwargs) => {
                let args = tensor::Args {
                    pos: args,
                    kw: kwargs,
                };
                if let Some((x, attrs)) = self.receiver_of(name)? {
                    let (method, attrs) = attrs.split_last().expect("a dotted name");
                    let x = self.attributes(x, attrs)?;
                    self.at = expr.span.start;
                    Lowered::Val(self.method(x, method, &args)?)
                } else if let Some(base) = funcs::base_name(name)
                    .filter(|b| Self::is_tensor_function(b, name.contains('.')))
                {
                    Lowered::Val(self.tensor_function(base, None, &args)?)
                } else {
                    if let Some((k, _)) = args.kw.first() {
                        return self.err(format!("`{name}` takes no keyword arguments (`{k}=`)"));
                    }
                    let args = args
                        .pos
                        .iter()
                        .map(|&a| self.val(a))
                        .collect::<ParseResult<Vec<_>>>()?;
                    let called = funcs::call(&mut Np { b: &mut self.b }, name, &args);
                    Lowered::Val(called.or_else(|e| self.err(e.message()))?)
                }
            }
            ExprKind::Method(x, method, args, kwargs) => {
                let x = self.val(*x)?;
                let args = tensor::Args {
                    pos: args,
                    kw: kwargs,
                };
                Lowered::Val(self.method(x, method, &args)?)
            }
            ExprKind::Attr(x, attr) => {
                let x = self.val(*x)?;
                Lowered::Val(self.attribute(x, attr)?)
            }
            ExprKind::Subscript(x, items) => {
                let x = self.val(*x)?;
                Lowered::Val(self.subscript(x, items)?)
            }
            ExprKind::None => Lowered::None,
            ExprKind::List(items) => Lowered::Tuple(
                items
                    .iter()
                    .map(|&i| self.val(i))
                    .collect::<ParseResult<_>>()?,
            ),
            ExprKind::Tuple(items) => Lowered::Tuple(
                items
                    .iter()
                    .map(|&i| self.val(i))
                    .collect::<ParseResult<_>>()?,
            ),
        };
        if let Lowered::Val(v) = &lowered {
            if self.source_map.get(v.v).is_none() {
                self.source_map.set(v.v, self.lines.loc(expr.span.start));
            }
        }
        self.values[e] = Some(lowered);
        Ok(())
    }

    /// Runs `f` with NumPy's rules over the graph, locating its error at the
    /// expression being lowered.
    pub fn np<T>(&mut self, f: impl FnOnce(&mut Np<'_>) -> NpResult<T>) -> ParseResult<T> {
        let result = f(&mut Np { b: &mut self.b });
        result.or_else(|m| self.err(m))
    }

    /// `x in (a, b, …)` (`not in` when `negated`), `np.isin(x, [a, b, …])`:
    /// true where `x == a or x == b …` by NumPy's rules (a float value
    /// compares an int `x` as `float64`; an int too large for `x`'s dtype
    /// equals none of it; NaN equals nothing), as one `isin` of a constant
    /// set. The values are number literals (or `inf`, `nan`, `pi`, …).
    pub(super) fn isin(
        &mut self,
        x: PyVal,
        container: ExprId,
        negated: bool,
    ) -> ParseResult<PyVal> {
        let items = match &self.ast.exprs[container].kind {
            ExprKind::Tuple(items) | ExprKind::List(items) => items.clone(),
            _ => return self.err("`in` takes a tuple or list of numbers, as `x in (1, 2, 3)`"),
        };
        let mut ints = Vec::new();
        let mut floats = Vec::new();
        for &item in &items {
            match &self.ast.exprs[item].kind {
                ExprKind::Int(v) => ints.push(*v),
                ExprKind::Float(v) => floats.push(*v),
                ExprKind::Unary(crate::py::ast::UnOp::Neg, a) => match &self.ast.exprs[*a].kind {
                    ExprKind::Float(v) => floats.push(-*v),
                    ExprKind::Name(n) if funcs::constant(n).is_some() => {
                        floats.push(-funcs::constant(n).expect("a constant"))
                    }
                    _ => return self.err("`in` looks for number literals only"),
                },
                ExprKind::Name(n) if funcs::constant(n).is_some() => {
                    floats.push(funcs::constant(n).expect("a constant"))
                }
                _ => return self.err("`in` looks for number literals only"),
            }
        }
        let dtype = self.b.dtype(x.v).unwrap_or(DType::Bool);
        let (x, dtype) = match dtype {
            DType::Bool => return self.err("`in` looks for numbers, not in a bool array"),
            d if d.is_int() && !floats.is_empty() => {
                let wide = self.b.cast(x.v, DType::F64);
                (wide.or_else(|e| self.err(e.to_string()))?, DType::F64)
            }
            d => (x.v, d),
        };
        let mut values: Vec<Scalar> = floats.iter().map(|&f| Scalar::F64(f)).collect();
        for v in ints {
            match dtype {
                DType::I32 => values.extend(i32::try_from(v).ok().map(Scalar::I32)),
                DType::I64 => values.extend(i64::try_from(v).ok().map(Scalar::I64)),
                _ => values.push(Scalar::F64(v as f64)),
            }
        }
        let set = kiln_ir::semantics::isin_set(values, dtype);
        let found = self.b.op(kiln_ir::Op::IsIn(set.into()), &[x]);
        let found = found.or_else(|e| self.err(e.to_string()))?;
        let v = if negated {
            let not = self.b.unary(kiln_ir::UnaryOp::Not, found);
            not.or_else(|e| self.err(e.to_string()))?
        } else {
            found
        };
        Ok(PyVal { v, weak: false })
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
            let cmp = self.np(|np| np.compare(op, lhs, rhs))?;
            let cmp = PyVal { weak, ..cmp };
            result = Some(match result {
                None => cmp,
                Some(acc) => self.np(|np| np.binary(BinOp::And, acc, cmp))?,
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
