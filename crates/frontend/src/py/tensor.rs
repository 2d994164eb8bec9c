//! NumPy's tensor operations in the Python subset: `@` / `np.matmul` /
//! `np.dot`, `.T` / `np.transpose`, `reshape`, reductions with `axis` and
//! `keepdims` (`np.sum`, `x.mean(axis=0)`, …), basic slicing and indexing,
//! `np.concatenate` / `np.stack`, as kiln's tensor ops. Shape rules are the
//! IR's typing and `crate::layout`'s; this file maps NumPy's spellings and
//! dtype rules onto them. Sizes, axes and indices are literals (kiln's
//! shapes are known when it compiles).

use super::ast::{BinOp, ExprId, ExprKind, Index};
use super::lower::{Lower, Lowered};
use super::numpy::{Np, PyVal};
use crate::layout;
use kiln_ir::{DType, Op, ParseResult, ReduceOp};

/// The functions (with a NumPy module prefix, or as methods) this file
/// lowers; others go to [`super::funcs`].
const TENSOR_FUNCS: &[&str] = &[
    "isin",
    "matmul",
    "dot",
    "transpose",
    "reshape",
    "concatenate",
    "stack",
    "sum",
    "mean",
    "prod",
    "max",
    "min",
    "amax",
    "amin",
    "flatten",
    "ravel",
];

/// Methods of an array (`x.sum(axis=0)`).
const METHODS: &[&str] = &[
    "isin",
    "dot",
    "transpose",
    "reshape",
    "sum",
    "mean",
    "prod",
    "max",
    "min",
    "flatten",
    "ravel",
];

/// Whether `name` is an array attribute (`T`) or method.
pub(super) fn is_member(name: &str) -> bool {
    name == "T" || METHODS.contains(&name)
}

/// Arguments as written: positional and keyword expressions.
pub(super) struct Args<'e> {
    pub pos: &'e [ExprId],
    pub kw: &'e [(String, ExprId)],
}

impl Args<'_> {
    fn get(&self, idx: usize, key: &str) -> Option<ExprId> {
        self.pos
            .get(idx)
            .copied()
            .or_else(|| self.kw.iter().find(|(k, _)| k == key).map(|(_, e)| *e))
    }
}

impl Lower<'_> {
    /// Whether `np.NAME(...)` (with a module prefix) is lowered here.
    pub(super) fn is_tensor_function(base: &str, qualified: bool) -> bool {
        TENSOR_FUNCS.contains(&base)
            && (qualified || !matches!(base, "sum" | "max" | "min" | "prod" | "mean"))
    }

    /// A literal int (`3`, `-1`), else `None`.
    fn static_int(&self, e: ExprId) -> Option<i64> {
        match &self.ast.exprs[e].kind {
            ExprKind::Int(v) => i64::try_from(*v).ok(),
            _ => None,
        }
    }

    fn is_none(&self, e: ExprId) -> bool {
        match &self.ast.exprs[e].kind {
            ExprKind::None => true,
            ExprKind::Name(n) => matches!(n.as_str(), "np.newaxis" | "numpy.newaxis"),
            _ => false,
        }
    }

    /// Literal ints: one, or a tuple or list of them.
    fn static_ints(&mut self, e: ExprId, what: &str) -> ParseResult<Vec<i64>> {
        let items = match &self.ast.exprs[e].kind {
            ExprKind::Tuple(items) | ExprKind::List(items) => items.clone(),
            _ => vec![e],
        };
        items
            .iter()
            .map(|&i| match self.static_int(i) {
                Some(k) => Ok(k),
                None => {
                    self.at = self.ast.exprs[i].span.start;
                    self.err(format!("{what} must be integer literals"))
                }
            })
            .collect()
    }

    /// The axes an `axis` argument names, ascending (`None`: every axis).
    fn axes(&mut self, e: Option<ExprId>, rank: usize) -> ParseResult<Vec<u32>> {
        let Some(e) = e.filter(|&e| !self.is_none(e)) else {
            return Ok((0..rank as u32).collect());
        };
        let mut axes = Vec::new();
        for k in self.static_ints(e, "`axis`")? {
            let a = layout::axis(k, rank).or_else(|m| self.err(m))? as u32;
            if axes.contains(&a) {
                return self.err(format!("axis {k} is repeated"));
            }
            axes.push(a);
        }
        axes.sort_unstable();
        Ok(axes)
    }

    fn literal_bool(&mut self, e: Option<ExprId>, what: &str) -> ParseResult<bool> {
        match e.map(|e| &self.ast.exprs[e].kind) {
            None => Ok(false),
            Some(ExprKind::Bool(b)) => Ok(*b),
            Some(_) => self.err(format!("{what} must be True or False")),
        }
    }

    fn rank(&self, v: PyVal) -> usize {
        layout::shape(&self.b, v.v).len()
    }

    fn op(&mut self, op: Op, args: &[PyVal]) -> ParseResult<PyVal> {
        let vals: Vec<_> = args.iter().map(|a| a.v).collect();
        let v = self.np(|np| np.typed(|b| b.op(op, &vals)))?;
        Ok(PyVal { v, weak: false })
    }

    fn layout(
        &mut self,
        f: impl FnOnce(&mut kiln_ir::Builder) -> Result<kiln_ir::Value, String>,
    ) -> ParseResult<PyVal> {
        let v = f(&mut self.b).or_else(|m| self.err(m))?;
        Ok(PyVal { v, weak: false })
    }

    fn no_extra(
        &mut self,
        name: &str,
        args: &Args<'_>,
        keys: &[&str],
        max_pos: usize,
    ) -> ParseResult<()> {
        if args.pos.len() > max_pos {
            return self.err(format!(
                "`{name}` takes at most {max_pos} positional argument(s) here, got {}",
                args.pos.len()
            ));
        }
        if let Some((k, _)) = args.kw.iter().find(|(k, _)| !keys.contains(&k.as_str())) {
            return self.err(format!("`{name}` has no keyword argument `{k}` in kiln"));
        }
        Ok(())
    }

    /// `x.T`.
    pub(super) fn attribute(&mut self, x: PyVal, name: &str) -> ParseResult<PyVal> {
        match name {
            "T" => self.transpose(x, None),
            _ => self.err(format!("unknown attribute `.{name}` (arrays have `.T`)")),
        }
    }

    /// `x.NAME(args)`: the receiver is the first argument of `np.NAME`.
    pub(super) fn method(&mut self, x: PyVal, name: &str, args: &Args<'_>) -> ParseResult<PyVal> {
        if !METHODS.contains(&name) {
            return self.err(format!(
                "unknown method `.{name}` (kiln's arrays have {})",
                METHODS.join(", ")
            ));
        }
        self.tensor_function(name, Some(x), args)
    }

    /// `np.NAME(args)`, or a method with its receiver `recv`.
    pub(super) fn tensor_function(
        &mut self,
        name: &str,
        recv: Option<PyVal>,
        args: &Args<'_>,
    ) -> ParseResult<PyVal> {
        // The receiver takes the place of the first positional argument.
        let shift = usize::from(recv.is_none());
        let first = |lw: &mut Self| -> ParseResult<PyVal> {
            match recv {
                Some(x) => Ok(x),
                None => match args.get(0, "a") {
                    Some(e) => lw.val(e),
                    None => lw.err(format!("`{name}` needs an array")),
                },
            }
        };
        // Positional argument `k` after the array.
        let nth = |k: usize, key: &str| args.get(k + shift, key);
        match name {
            "isin" => {
                // np.isin(x, values, invert=False); pandas' x.isin(values).
                self.no_extra(
                    name,
                    args,
                    &["test_elements", "values", "invert"],
                    1 + shift,
                )?;
                let x = first(self)?;
                let key = if recv.is_some() {
                    "values"
                } else {
                    "test_elements"
                };
                let Some(values) = nth(0, key) else {
                    return self.err(format!("`{name}` needs the values to look for"));
                };
                let invert = match args.kw.iter().find(|(k, _)| k == "invert") {
                    Some((_, e)) => match self.ast.exprs[*e].kind {
                        ExprKind::Bool(b) => b,
                        _ => return self.err("`invert=` takes True or False"),
                    },
                    None => false,
                };
                self.isin(x, values, invert)
            }
            "matmul" | "dot" => {
                self.no_extra(name, args, &["b"], 1 + shift)?;
                let a = first(self)?;
                let Some(b) = nth(0, "b") else {
                    return self.err(format!("`{name}` takes two arrays"));
                };
                let b = self.val(b)?;
                self.matmul(a, b)
            }
            "transpose" => {
                let max_pos = if recv.is_some() { usize::MAX } else { 2 };
                self.no_extra(name, args, &["axes"], max_pos)?;
                let x = first(self)?;
                let axes = match (recv, args.pos.len(), nth(0, "axes")) {
                    // `x.transpose(1, 0)`: the axes as separate arguments.
                    (Some(_), n, _) if n > 1 => Some(
                        args.pos
                            .iter()
                            .map(|&e| self.static_ints(e, "axes").map(|v| v[0]))
                            .collect::<ParseResult<Vec<i64>>>()?,
                    ),
                    (_, _, Some(e)) if !self.is_none(e) => Some(self.static_ints(e, "axes")?),
                    _ => None,
                };
                self.transpose(x, axes)
            }
            "reshape" => {
                let x = first(self)?;
                let wanted = if recv.is_some() && args.pos.len() > 1 {
                    args.pos
                        .iter()
                        .map(|&e| self.static_ints(e, "sizes").map(|v| v[0]))
                        .collect::<ParseResult<Vec<i64>>>()?
                } else {
                    self.no_extra(name, args, &["shape", "newshape"], 1 + shift)?;
                    match nth(0, "shape").or_else(|| nth(0, "newshape")) {
                        Some(e) => self.static_ints(e, "sizes")?,
                        None => return self.err("`reshape` needs a shape"),
                    }
                };
                let shape = layout::target_shape(&self.b, x.v, &wanted).or_else(|m| self.err(m))?;
                self.reshape(x, shape)
            }
            "flatten" | "ravel" => {
                self.no_extra(name, args, &[], shift)?;
                let x = first(self)?;
                let shape = layout::target_shape(&self.b, x.v, &[-1]).or_else(|m| self.err(m))?;
                self.reshape(x, shape)
            }
            "concatenate" | "stack" => {
                self.no_extra(name, args, &["axis"], 2)?;
                let Some(seq) = args.get(0, "arrays") else {
                    return self.err(format!("`{name}` takes a sequence of arrays"));
                };
                let items = match self.lowered(seq) {
                    Some(Lowered::Tuple(items)) if !items.is_empty() => items.clone(),
                    _ => return self.err(format!("`{name}` takes a list or tuple of arrays")),
                };
                let axis = match args.get(1, "axis") {
                    None => 0,
                    Some(e) if self.is_none(e) => {
                        return self.err(format!("`{name}` with axis=None is not supported"))
                    }
                    Some(e) => self.static_ints(e, "`axis`")?[0],
                };
                self.join(name == "stack", &items, axis)
            }
            "sum" | "mean" | "prod" | "max" | "min" | "amax" | "amin" => {
                self.no_extra(name, args, &["axis", "keepdims"], 2 + shift)?;
                let x = first(self)?;
                let axis = nth(0, "axis");
                let keepdims = nth(1, "keepdims");
                let keepdims = self.literal_bool(keepdims, "`keepdims`")?;
                let op = match name {
                    "sum" => ReduceOp::Sum,
                    "mean" => ReduceOp::Mean,
                    "prod" => ReduceOp::Prod,
                    "max" | "amax" => ReduceOp::Max,
                    _ => ReduceOp::Min,
                };
                self.reduce(op, x, axis, keepdims)
            }
            _ => self.err(format!("`{name}` is not a tensor function")),
        }
    }

    /// `a @ b` with NumPy's promotion; 0-d operands multiply (`np.dot`).
    pub(super) fn matmul(&mut self, a: PyVal, b: PyVal) -> ParseResult<PyVal> {
        if self.rank(a) == 0 || self.rank(b) == 0 {
            return self.err("matmul: both operands must be arrays of rank 1 or more");
        }
        self.np(|np| np.binary(BinOp::MatMul, a, b))
    }

    fn transpose(&mut self, x: PyVal, axes: Option<Vec<i64>>) -> ParseResult<PyVal> {
        let rank = self.rank(x);
        let perm: Vec<u32> = match axes {
            None => (0..rank as u32).rev().collect(),
            Some(axes) => {
                if axes.len() != rank {
                    return self.err(format!(
                        "axes {axes:?} do not match an array of rank {rank}"
                    ));
                }
                let mut perm = Vec::with_capacity(rank);
                for k in axes {
                    let a = layout::axis(k, rank).or_else(|m| self.err(m))? as u32;
                    if perm.contains(&a) {
                        return self.err(format!("axis {k} repeats in the transpose"));
                    }
                    perm.push(a);
                }
                perm
            }
        };
        if perm.iter().enumerate().all(|(i, &p)| p as usize == i) {
            return Ok(PyVal { weak: false, ..x });
        }
        self.op(Op::Transpose(perm), &[x])
    }

    fn reshape(&mut self, x: PyVal, shape: kiln_ir::Shape) -> ParseResult<PyVal> {
        if layout::shape(&self.b, x.v) == shape {
            return Ok(PyVal { weak: false, ..x });
        }
        self.op(Op::Reshape(shape), &[x])
    }

    /// `np.concatenate` / `np.stack`: the arrays promoted to one dtype.
    fn join(&mut self, stack: bool, items: &[PyVal], axis: i64) -> ParseResult<PyVal> {
        let mut common = items[0];
        for &item in &items[1..] {
            common = self.np(|np| np.promote(common, item, false))?.0;
        }
        let dtype = self.np(|np| Ok(np.dtype(common)))?;
        let mut vals = Vec::with_capacity(items.len());
        for &item in items {
            let v = self.np(|np| np.convert(item, dtype))?;
            vals.push(v.v);
        }
        let rank = self.rank(items[0]) + usize::from(stack);
        let axis = layout::axis(axis, rank).or_else(|m| self.err(m))?;
        if stack {
            self.layout(|b| layout::stack(b, &vals, axis))
        } else {
            self.layout(|b| layout::concat(b, &vals, axis))
        }
    }

    /// A reduction with NumPy's dtypes: `sum`/`prod` of bools and `int32`
    /// give `int64`, `mean` of integers `float64`; `max`/`min` keep the dtype.
    fn reduce(
        &mut self,
        op: ReduceOp,
        x: PyVal,
        axis: Option<ExprId>,
        keepdims: bool,
    ) -> ParseResult<PyVal> {
        let rank = self.rank(x);
        let axes = self.axes(axis, rank)?;
        let to = match (op, self.np(|np| Ok(np.dtype(x)))?) {
            (ReduceOp::Sum | ReduceOp::Prod, DType::Bool | DType::I32) => Some(DType::I64),
            (ReduceOp::Mean, d) if !d.is_float() => Some(DType::F64),
            _ => None,
        };
        let x = match to {
            Some(d) => self.np(|np: &mut Np<'_>| np.convert(x, d))?,
            None => x,
        };
        if rank == 0 {
            return Ok(PyVal { weak: false, ..x });
        }
        self.op(
            Op::ReduceAxes {
                op,
                axes,
                keepdim: keepdims,
            },
            &[x],
        )
    }

    /// `x[items]`: NumPy's basic indexing with literal ints and slices.
    pub(super) fn subscript(&mut self, x: PyVal, items: &[Index]) -> ParseResult<PyVal> {
        let mut index = Vec::with_capacity(items.len());
        for item in items {
            index.push(match item {
                Index::Ellipsis => layout::Index::Ellipsis,
                Index::At(e) if self.is_none(*e) => layout::Index::NewAxis,
                Index::At(e) => match self.static_int(*e) {
                    Some(k) => layout::Index::At(k),
                    None => {
                        return self.err(
                            "indices must be integer literals or slices (kiln has no gathers)",
                        )
                    }
                },
                Index::Slice(start, stop, step) => {
                    let mut bounds = [None; 3];
                    for (slot, e) in bounds.iter_mut().zip([start, stop, step]) {
                        if let Some(e) = e.filter(|&e| !self.is_none(e)) {
                            *slot = Some(self.static_ints(e, "slice bounds")?[0]);
                        }
                    }
                    layout::Index::Slice(bounds)
                }
            });
        }
        self.layout(|b| layout::index(b, x.v, &index))
    }
}
