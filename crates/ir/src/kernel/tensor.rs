//! Lowering of graphs with tensors (rank ≥ 2, tensor constants, `matmul`,
//! `transpose`, `reshape`, NumPy broadcasting) to loop nests.
//!
//! Every tensor-valued node gets a buffer: the output parameter it is
//! returned through, else a [`Param::Scratch`] the caller allocates (the
//! kernel never allocates). Each node is one loop nest over its result's
//! dimensions that reads its arguments' buffers through row-major strides (a
//! broadcast axis has stride 0) and stores its elements; scalars are computed
//! once, before any loop. `reshape` is an alias of its argument's buffer (the
//! elements do not move), `matmul` a nest whose innermost loop folds each sum
//! in `k` order from the identity (docs/semantics.md). Elementwise chains are
//! not fused yet: each op makes one pass.

use super::lower::{step_op, LowerError, Lowerer};
use super::{Expr, Param, ParamIdx, Reg, Stmt};
use crate::entities::Value;
use crate::graph::Graph;
use crate::op::{BinaryOp, Op, ReduceOp};
use crate::scalar::Scalar;
use crate::semantics::reduce_identity;
use crate::types::{DType, Dim, Shape, Type};
use crate::verify::GraphInfo;
use cranelift_entity::EntityRef;

/// True when a live node needs loop nests: a tensor of rank ≥ 2, a tensor op,
/// or an elementwise op that broadcasts one non-scalar shape to another.
pub(super) fn needs_loop_nests(graph: &Graph, info: &GraphInfo) -> bool {
    graph.nodes().any(|(value, node)| {
        if !info.is_live(value) {
            return false;
        }
        let rank = node.ty.as_tensor().map_or(0, |t| t.shape.len());
        let tensor_op = matches!(
            node.op,
            Op::Tensor(_) | Op::MatMul | Op::Transpose(_) | Op::Reshape(_) | Op::ReduceAxes { .. }
        );
        let elementwise = !matches!(node.op, Op::Reduce(_) | Op::Filter);
        let broadcast = elementwise
            && node.args.iter().any(|&a| match graph.ty(a) {
                Type::Tensor(t) => {
                    !t.is_scalar() && Some(&t.shape) != node.ty.as_tensor().map(|r| &r.shape)
                }
                Type::Selection(_) => false,
            });
        rank > 1 || tensor_op || broadcast
    })
}

/// Where a value lives.
#[derive(Clone, Debug)]
enum Loc {
    /// A scalar in a register.
    Scalar(Reg),
    /// A tensor's elements, row-major, in a parameter's buffer.
    Buf { param: ParamIdx, dims: Shape },
}

impl Lowerer<'_> {
    /// Lowers the whole graph as loop nests (see the module docs).
    pub(super) fn tensor_body(&mut self) -> Result<(), LowerError> {
        let mut out: Vec<Stmt> = Vec::new();
        let mut loc: Vec<Option<Loc>> = vec![None; self.graph.len()];
        // Output parameters already holding a node's result.
        let mut claimed = vec![false; self.graph.outputs().len()];
        for (value, node) in self.graph.nodes() {
            if !self.info.is_live(value) {
                continue;
            }
            let dims: Shape = node
                .ty
                .as_tensor()
                .map(|t| t.shape.clone())
                .unwrap_or_default();
            let dtype = node.ty.dtype();
            let arg = |v: Value| loc[v.index()].clone().expect("arguments are lowered first");
            let here = match &node.op {
                Op::Input { index } => {
                    let param = self.input_params[*index as usize];
                    if dims.is_empty() {
                        let reg = self.node(&mut out, value, &[], None);
                        Some(Loc::Scalar(reg))
                    } else {
                        Some(Loc::Buf { param, dims })
                    }
                }
                Op::Const(_) => Some(Loc::Scalar(self.node(&mut out, value, &[], None))),
                Op::Tensor(t) => {
                    let name = self
                        .graph
                        .source_name(value)
                        .map_or_else(|| format!("const_{value}"), str::to_string);
                    let param = self.param(Param::ConstIn {
                        name,
                        tensor: t.clone(),
                    });
                    if dims.is_empty() {
                        let zero =
                            self.emit(&mut out, DType::I64, Expr::Const(Scalar::I64(0)), None);
                        let reg = self.emit(&mut out, t.dtype, Expr::Load(param, zero), None);
                        Some(Loc::Scalar(reg))
                    } else {
                        Some(Loc::Buf { param, dims })
                    }
                }
                Op::Unary(_) | Op::Binary(_) | Op::Compare(_) | Op::Select | Op::Cast(_) => {
                    let args: Vec<Loc> = node.args.iter().map(|&a| arg(a)).collect();
                    if dims.is_empty() {
                        let regs: Vec<Reg> = args
                            .iter()
                            .map(|l| match l {
                                Loc::Scalar(r) => *r,
                                Loc::Buf { .. } => {
                                    unreachable!("verified: a scalar op has scalar arguments")
                                }
                            })
                            .collect();
                        Some(Loc::Scalar(self.node(&mut out, value, &regs, None)))
                    } else {
                        let dest = self.dest(value, &dims, &mut claimed);
                        self.elementwise(&mut out, value, &args, dest, &dims);
                        Some(Loc::Buf { param: dest, dims })
                    }
                }
                Op::Reduce(op) => {
                    let Loc::Buf { param, dims: col } = arg(node.args[0]) else {
                        unreachable!("verified: a reduction takes a column")
                    };
                    Some(Loc::Scalar(self.reduce(&mut out, value, *op, param, &col)))
                }
                Op::Filter => {
                    let Loc::Buf { param, dims: col } = arg(node.args[0]) else {
                        unreachable!("verified: a filter takes a column")
                    };
                    self.filter(&mut out, value, param, &col);
                    None
                }
                Op::MatMul => {
                    let (Loc::Buf { param: a, dims: da }, Loc::Buf { param: b, dims: db }) =
                        (arg(node.args[0]), arg(node.args[1]))
                    else {
                        unreachable!("verified: matmul takes tensors")
                    };
                    let dtype = dtype.expect("a tensor");
                    let dest = self.dest(value, &dims, &mut claimed);
                    self.matmul(&mut out, (a, &da), (b, &db), dest, &dims, dtype);
                    if dims.is_empty() {
                        let zero =
                            self.emit(&mut out, DType::I64, Expr::Const(Scalar::I64(0)), None);
                        let reg = self.emit(&mut out, dtype, Expr::Load(dest, zero), None);
                        Some(Loc::Scalar(reg))
                    } else {
                        Some(Loc::Buf { param: dest, dims })
                    }
                }
                Op::ReduceAxes { op, axes, keepdim } => {
                    let Loc::Buf { param, dims: src } = arg(node.args[0]) else {
                        unreachable!("verified: reduce_axes takes a tensor")
                    };
                    let dtype = dtype.expect("a tensor");
                    let dest = self.dest(value, &dims, &mut claimed);
                    self.reduce_axes(
                        &mut out,
                        (*op, axes, *keepdim),
                        (param, &src),
                        dest,
                        &dims,
                        dtype,
                    );
                    if dims.is_empty() {
                        let zero = self.i64_const(&mut out, 0);
                        let reg = self.emit(&mut out, dtype, Expr::Load(dest, zero), None);
                        Some(Loc::Scalar(reg))
                    } else {
                        Some(Loc::Buf { param: dest, dims })
                    }
                }
                Op::Transpose(perm) => {
                    let Loc::Buf { param, dims: src } = arg(node.args[0]) else {
                        unreachable!("verified: transpose takes a tensor")
                    };
                    let dest = self.dest(value, &dims, &mut claimed);
                    let strides = self.strides(&mut out, &src);
                    let permuted: Vec<Option<Reg>> =
                        perm.iter().map(|&p| strides[p as usize]).collect();
                    self.copy(
                        &mut out,
                        (param, &permuted),
                        dest,
                        &dims,
                        dtype.expect("a tensor"),
                    );
                    Some(Loc::Buf { param: dest, dims })
                }
                Op::Reshape(_) => match arg(node.args[0]) {
                    // The elements keep their row-major order: an alias,
                    // unless the result is returned (copied at the end).
                    Loc::Buf { param, .. } if !dims.is_empty() => Some(Loc::Buf { param, dims }),
                    Loc::Buf { param, .. } => {
                        let zero =
                            self.emit(&mut out, DType::I64, Expr::Const(Scalar::I64(0)), None);
                        let d = dtype.expect("a tensor");
                        Some(Loc::Scalar(self.emit(
                            &mut out,
                            d,
                            self.load(param, zero),
                            None,
                        )))
                    }
                    Loc::Scalar(reg) if dims.is_empty() => Some(Loc::Scalar(reg)),
                    Loc::Scalar(reg) => {
                        let dest = self.dest(value, &dims, &mut claimed);
                        let zero =
                            self.emit(&mut out, DType::I64, Expr::Const(Scalar::I64(0)), None);
                        out.push(Stmt::Store(dest, Some(zero), reg));
                        Some(Loc::Buf { param: dest, dims })
                    }
                },
            };
            loc[value.index()] = here;
        }
        for (idx, output) in self.graph.outputs().iter().enumerate() {
            let param = self.output_params[idx];
            match loc[output.value.index()].clone() {
                Some(Loc::Scalar(reg)) => match self.graph.ty(output.value) {
                    Type::Tensor(t) if t.is_scalar() => out.push(Stmt::Store(param, None, reg)),
                    _ => {
                        let zero =
                            self.emit(&mut out, DType::I64, Expr::Const(Scalar::I64(0)), None);
                        out.push(Stmt::Store(param, Some(zero), reg));
                    }
                },
                Some(Loc::Buf { param: src, dims }) if src != param => {
                    let dtype = self.graph.ty(output.value).dtype().expect("a tensor");
                    let strides = self.strides(&mut out, &dims);
                    self.copy(&mut out, (src, &strides), param, &dims, dtype);
                }
                // Computed in place, or a selection (stored by its filter).
                _ => {}
            }
        }
        self.kernel.body = out;
        self.kernel.direct = false;
        Ok(())
    }

    /// The buffer a node's result is written to: its output parameter when it
    /// is returned (the first time), else a new scratch buffer.
    fn dest(&mut self, value: Value, dims: &Shape, claimed: &mut [bool]) -> ParamIdx {
        for idx in self.output_indices(value) {
            if !claimed[idx] {
                claimed[idx] = true;
                return self.output_params[idx];
            }
        }
        let dtype = self.graph.ty(value).dtype().expect("a tensor");
        self.param(Param::Scratch {
            dtype,
            shape: dims.clone(),
        })
    }

    fn load(&self, param: ParamIdx, index: Reg) -> Expr {
        match self.kernel.params[param as usize] {
            Param::BitmapIn { .. } => Expr::LoadBit(param, index),
            _ => Expr::Load(param, index),
        }
    }

    fn i64_const(&mut self, out: &mut Vec<Stmt>, v: i64) -> Reg {
        self.emit(out, DType::I64, Expr::Const(Scalar::I64(v)), None)
    }

    /// Row-major strides of `dims` as `i64` registers; `None` for an axis of
    /// extent 1 (stride irrelevant: its index is always 0).
    fn strides(&mut self, out: &mut Vec<Stmt>, dims: &[Dim]) -> Vec<Option<Reg>> {
        let mut strides = vec![None; dims.len()];
        let mut step: Option<Reg> = None;
        for axis in (0..dims.len()).rev() {
            let stride = match step {
                Some(r) => r,
                None => self.i64_const(out, 1),
            };
            strides[axis] = (dims[axis] != Dim::Fixed(1)).then_some(stride);
            let extent = self.extent(&dims[axis]);
            let n = self.emit(out, DType::I64, Expr::ExtentValue(extent), None);
            step = Some(self.emit(
                out,
                DType::I64,
                Expr::Binary(BinaryOp::Mul, stride, n),
                None,
            ));
        }
        strides
    }

    /// Strides reading `src` broadcast to `to` (NumPy: trailing axes aligned,
    /// a missing axis or a `1` repeats: stride `None`).
    fn broadcast_strides(
        &mut self,
        out: &mut Vec<Stmt>,
        src: &[Dim],
        to: &[Dim],
    ) -> Vec<Option<Reg>> {
        let own = self.strides(out, src);
        let lead = to.len() - src.len();
        (0..to.len())
            .map(|axis| match axis.checked_sub(lead) {
                Some(a) if src[a] != Dim::Fixed(1) => own[a],
                _ => None,
            })
            .collect()
    }

    /// `Σ rows[a] * strides[a]`, emitted in `body`.
    fn flat(&mut self, body: &mut Vec<Stmt>, rows: &[Reg], strides: &[Option<Reg>]) -> Reg {
        let mut acc: Option<Reg> = None;
        for (&row, stride) in rows.iter().zip(strides) {
            let Some(stride) = stride else { continue };
            let term = self.emit(
                body,
                DType::I64,
                Expr::Binary(BinaryOp::Mul, row, *stride),
                None,
            );
            acc = Some(match acc {
                None => term,
                Some(a) => self.emit(body, DType::I64, Expr::Binary(BinaryOp::Add, a, term), None),
            });
        }
        acc.unwrap_or_else(|| self.i64_const(body, 0))
    }

    /// A loop nest over `dims`; `body` gets the index registers and returns
    /// the innermost statements.
    fn nest(
        &mut self,
        out: &mut Vec<Stmt>,
        dims: &[Dim],
        body: impl FnOnce(&mut Self, &mut Vec<Stmt>, &[Reg]),
    ) {
        let rows: Vec<Reg> = dims
            .iter()
            .enumerate()
            .map(|(axis, _)| self.new_reg(DType::I64, Some(&format!("i{axis}"))))
            .collect();
        let mut inner = Vec::new();
        body(self, &mut inner, &rows);
        for (axis, dim) in dims.iter().enumerate().rev() {
            let extent = self.extent(dim);
            inner = vec![Stmt::Loop {
                extent,
                row: rows[axis],
                body: inner,
            }];
        }
        out.extend(inner);
    }

    fn elementwise(
        &mut self,
        out: &mut Vec<Stmt>,
        value: Value,
        args: &[Loc],
        dest: ParamIdx,
        dims: &Shape,
    ) {
        let arg_strides: Vec<Option<Vec<Option<Reg>>>> = args
            .iter()
            .map(|a| match a {
                Loc::Scalar(_) => None,
                Loc::Buf { dims: src, .. } => Some(self.broadcast_strides(out, src, dims)),
            })
            .collect();
        let out_strides = self.strides(out, dims);
        let arg_types: Vec<DType> = self
            .graph
            .node(value)
            .args
            .iter()
            .map(|&a| self.graph.ty(a).dtype().expect("tensors"))
            .collect();
        self.nest(out, dims, |lw, body, rows| {
            let regs: Vec<Reg> = args
                .iter()
                .zip(&arg_strides)
                .zip(&arg_types)
                .map(|((a, strides), &dtype)| match (a, strides) {
                    (Loc::Scalar(r), _) => *r,
                    (Loc::Buf { param, .. }, Some(strides)) => {
                        let idx = lw.flat(body, rows, strides);
                        let load = lw.load(*param, idx);
                        lw.emit(body, dtype, load, None)
                    }
                    (Loc::Buf { .. }, None) => unreachable!("a buffer has strides"),
                })
                .collect();
            let result = lw.node(body, value, &regs, None);
            let idx = lw.flat(body, rows, &out_strides);
            body.push(Stmt::Store(dest, Some(idx), result));
        });
    }

    /// `dest[rows] = src[Σ rows * src_strides]` over `dims`.
    fn copy(
        &mut self,
        out: &mut Vec<Stmt>,
        (src, src_strides): (ParamIdx, &[Option<Reg>]),
        dest: ParamIdx,
        dims: &Shape,
        dtype: DType,
    ) {
        let out_strides = self.strides(out, dims);
        self.nest(out, dims, |lw, body, rows| {
            let from = lw.flat(body, rows, src_strides);
            let load = lw.load(src, from);
            let x = lw.emit(body, dtype, load, None);
            let to = lw.flat(body, rows, &out_strides);
            body.push(Stmt::Store(dest, Some(to), x));
        });
    }

    fn reduce(
        &mut self,
        out: &mut Vec<Stmt>,
        value: Value,
        op: ReduceOp,
        param: ParamIdx,
        col: &Shape,
    ) -> Reg {
        let name = self.graph.source_name(value);
        let extent = self.extent(&col[0]);
        if op == ReduceOp::Count {
            return self.emit(out, DType::I64, Expr::ExtentValue(extent), name);
        }
        let dtype = self
            .graph
            .ty(self.graph.node(value).args[0])
            .dtype()
            .expect("a column");
        let var = self.new_var(reduce_identity(op, dtype));
        let step = step_op(op).expect("count is handled above");
        self.nest(out, col, |lw, body, rows| {
            let load = lw.load(param, rows[0]);
            let x = lw.emit(body, dtype, load, None);
            let acc = lw.emit(body, dtype, Expr::Var(var), None);
            let next = lw.emit(body, dtype, Expr::Binary(step, acc, x), None);
            body.push(Stmt::Set(var, next));
        });
        if op == ReduceOp::Mean {
            let sum = self.emit(out, dtype, Expr::Var(var), None);
            let n = self.emit(out, DType::I64, Expr::ExtentValue(extent), None);
            let n = self.emit(out, dtype, Expr::Cast(dtype, n), None);
            return self.emit(out, dtype, Expr::Binary(BinaryOp::Div, sum, n), name);
        }
        self.emit(out, dtype, Expr::Var(var), name)
    }

    fn filter(&mut self, out: &mut Vec<Stmt>, value: Value, param: ParamIdx, col: &Shape) {
        for idx in self.output_indices(value) {
            let sel = self.output_params[idx];
            let count = self.new_var(Scalar::I64(0));
            self.nest(out, col, |lw, body, rows| {
                let load = lw.load(param, rows[0]);
                let mask = lw.emit(body, DType::Bool, load, None);
                body.push(Stmt::Select {
                    sel,
                    count,
                    row: rows[0],
                    mask,
                });
            });
            // The count parameter directly follows the selection's.
            out.push(Stmt::StoreCount(sel + 1, count));
        }
    }

    /// `dest = a @ b`: for every result element, a sum over `k` in order from
    /// the identity, `acc = acc + a * b` (docs/semantics.md).
    fn matmul(
        &mut self,
        out: &mut Vec<Stmt>,
        (a, da): (ParamIdx, &Shape),
        (b, db): (ParamIdx, &Shape),
        dest: ParamIdx,
        dims: &Shape,
        dtype: DType,
    ) {
        let (a_mat, b_mat) = (da.len() >= 2, db.len() >= 2);
        let k_dim = da[da.len() - 1].clone();
        let batch = dims.len() - usize::from(a_mat) - usize::from(b_mat);
        let sa = self.strides(out, da);
        let sb = self.strides(out, db);
        // Batch strides of each operand against the result's batch axes.
        // Batch axes step over whole matrices: each operand's own (full)
        // strides, aligned to the result's batch axes, `None` where it
        // broadcasts (a missing axis or a 1).
        let batch_strides = |own: &[Option<Reg>], src: &[Dim]| -> Vec<Option<Reg>> {
            let n_src = src.len().saturating_sub(2);
            let lead = batch - n_src;
            (0..batch)
                .map(|axis| match axis.checked_sub(lead) {
                    Some(a) if src[a] != Dim::Fixed(1) => own[a],
                    _ => None,
                })
                .collect()
        };
        let a_batch = batch_strides(&sa, da);
        let b_batch = batch_strides(&sb, db);
        let (a_i, a_k) = (a_mat.then(|| sa[da.len() - 2]).flatten(), sa[da.len() - 1]);
        let (b_k, b_j) = if b_mat {
            (sb[db.len() - 2], sb[db.len() - 1])
        } else {
            (sb[0], None)
        };
        // Where `a[batch.., i, k]` is: its index registers and their strides
        // (`rest[0]` is the result's i axis when `a` is a matrix).
        let a_index = |batch_rows: &[Reg], rest: &[Reg], k: Reg| {
            let mut rows = batch_rows.to_vec();
            let mut strides = a_batch.clone();
            if a_mat {
                rows.push(rest[0]);
                strides.push(a_i);
            }
            rows.push(k);
            strides.push(a_k);
            (rows, strides)
        };
        let out_strides = self.strides(out, dims);
        let identity = self.emit(
            out,
            dtype,
            Expr::Const(reduce_identity(ReduceOp::Sum, dtype)),
            None,
        );
        if !b_mat {
            // `[.., m, k] @ [k]`: each element's sum in a register, k innermost
            // (both operands are read contiguously).
            let var = self.new_var(reduce_identity(ReduceOp::Sum, dtype));
            self.nest(out, dims, |lw, body, rows| {
                let (batch_rows, rest) = rows.split_at(batch);
                body.push(Stmt::Set(var, identity));
                let k = lw.new_reg(DType::I64, Some("k"));
                let mut inner = Vec::new();
                let (a_rows, a_strides) = a_index(batch_rows, rest, k);
                let mut b_rows: Vec<Reg> = batch_rows.to_vec();
                let mut b_strides = b_batch.clone();
                b_rows.push(k);
                b_strides.push(b_k);
                let ia = lw.flat(&mut inner, &a_rows, &a_strides);
                let ib = lw.flat(&mut inner, &b_rows, &b_strides);
                let x = lw.emit(&mut inner, dtype, Expr::Load(a, ia), None);
                let y = lw.emit(&mut inner, dtype, Expr::Load(b, ib), None);
                let p = lw.emit(&mut inner, dtype, Expr::Binary(BinaryOp::Mul, x, y), None);
                let acc = lw.emit(&mut inner, dtype, Expr::Var(var), None);
                let next = lw.emit(&mut inner, dtype, Expr::Binary(BinaryOp::Add, acc, p), None);
                inner.push(Stmt::Set(var, next));
                let extent = lw.extent(&k_dim);
                body.push(Stmt::Loop {
                    extent,
                    row: k,
                    body: inner,
                });
                let result = lw.emit(body, dtype, Expr::Var(var), None);
                let to = lw.flat(body, rows, &out_strides);
                body.push(Stmt::Store(dest, Some(to), result));
            });
            return;
        }
        // `.. @ [.., k, n]`: i, k, j order, each result row accumulated in
        // the destination: `dest[i, j] = dest[i, j] + a[i, k] * b[k, j]` for k
        // in order. Every element still sums in k order from the identity,
        // and the innermost loop (j) reads b and dest contiguously, so it
        // vectorizes across j without reassociating anything.
        let j_dim = dims[dims.len() - 1].clone();
        let outer = &dims[..dims.len() - 1];
        let d_strides = out_strides.clone();
        self.nest(out, outer, |lw, body, rows| {
            let (batch_rows, rest) = rows.split_at(batch);
            let j_extent = lw.extent(&j_dim);
            // dest[.., i, :] = identity
            let j0 = lw.new_reg(DType::I64, Some("j"));
            let mut init = Vec::new();
            let mut d_rows = rows.to_vec();
            d_rows.push(j0);
            let to = lw.flat(&mut init, &d_rows, &d_strides);
            init.push(Stmt::Store(dest, Some(to), identity));
            body.push(Stmt::Loop {
                extent: j_extent,
                row: j0,
                body: init,
            });
            let k = lw.new_reg(DType::I64, Some("k"));
            let mut k_body = Vec::new();
            let (a_rows, a_strides) = a_index(batch_rows, rest, k);
            let ia = lw.flat(&mut k_body, &a_rows, &a_strides);
            let x = lw.emit(&mut k_body, dtype, Expr::Load(a, ia), None);
            let j = lw.new_reg(DType::I64, Some("j"));
            let mut j_body = Vec::new();
            let mut b_rows: Vec<Reg> = batch_rows.to_vec();
            let mut b_strides = b_batch.clone();
            b_rows.extend([k, j]);
            b_strides.extend([b_k, b_j]);
            let ib = lw.flat(&mut j_body, &b_rows, &b_strides);
            let y = lw.emit(&mut j_body, dtype, Expr::Load(b, ib), None);
            let mut d_rows = rows.to_vec();
            d_rows.push(j);
            let to = lw.flat(&mut j_body, &d_rows, &d_strides);
            let acc = lw.emit(&mut j_body, dtype, Expr::Load(dest, to), None);
            let p = lw.emit(&mut j_body, dtype, Expr::Binary(BinaryOp::Mul, x, y), None);
            let next = lw.emit(
                &mut j_body,
                dtype,
                Expr::Binary(BinaryOp::Add, acc, p),
                None,
            );
            j_body.push(Stmt::Store(dest, Some(to), next));
            k_body.push(Stmt::Loop {
                extent: j_extent,
                row: j,
                body: j_body,
            });
            let k_extent = lw.extent(&k_dim);
            body.push(Stmt::Loop {
                extent: k_extent,
                row: k,
                body: k_body,
            });
        });
    }

    /// `dest[kept] = fold over the reduced axes (row-major) from the
    /// identity`; `mean` divides by the number of elements folded, `count`
    /// is that number.
    fn reduce_axes(
        &mut self,
        out: &mut Vec<Stmt>,
        (op, axes, keepdim): (ReduceOp, &[u32], bool),
        (src, src_dims): (ParamIdx, &Shape),
        dest: ParamIdx,
        dims: &Shape,
        dtype: DType,
    ) {
        let src_strides = self.strides(out, src_dims);
        let out_strides = self.strides(out, dims);
        let reduced: Vec<usize> = axes.iter().map(|&a| a as usize).collect();
        let kept: Vec<usize> = (0..src_dims.len())
            .filter(|a| !reduced.contains(a))
            .collect();
        let red_dims: Shape = reduced.iter().map(|&a| src_dims[a].clone()).collect();
        let in_dtype = self.kernel.params[src as usize].clone();
        let in_dtype = match in_dtype {
            Param::ColumnIn { dtype, .. }
            | Param::Scratch { dtype, .. }
            | Param::ColumnOut { dtype, .. } => dtype,
            Param::ConstIn { tensor, .. } => tensor.dtype,
            Param::BitmapIn { .. } => DType::Bool,
            _ => dtype,
        };
        // Elements folded per result: the product of the reduced extents.
        let mut folded = self.i64_const(out, 1);
        for d in &red_dims {
            let extent = self.extent(d);
            let n = self.emit(out, DType::I64, Expr::ExtentValue(extent), None);
            folded = self.emit(
                out,
                DType::I64,
                Expr::Binary(BinaryOp::Mul, folded, n),
                None,
            );
        }
        if op == ReduceOp::Count {
            self.nest(out, dims, |lw, body, rows| {
                let to = lw.flat(body, rows, &out_strides);
                body.push(Stmt::Store(dest, Some(to), folded));
            });
            return;
        }
        let identity = self.emit(
            out,
            in_dtype,
            Expr::Const(reduce_identity(op, in_dtype)),
            None,
        );
        let var = self.new_var(reduce_identity(op, in_dtype));
        let step = step_op(op).expect("count is handled above");
        let mean_divisor =
            (op == ReduceOp::Mean).then(|| self.emit(out, dtype, Expr::Cast(dtype, folded), None));
        self.nest(out, dims, |lw, body, rows| {
            body.push(Stmt::Set(var, identity));
            // The kept axes' indices, from the result's (keepdim adds 1s).
            let kept_rows: Vec<Reg> = if keepdim {
                kept.iter().map(|&a| rows[a]).collect()
            } else {
                rows.to_vec()
            };
            let mut inner = Vec::new();
            lw.nest(&mut inner, &red_dims, |lw, ib, red_rows| {
                let mut src_rows = vec![red_rows[0]; src_dims.len()];
                for (&a, &r) in kept.iter().zip(&kept_rows) {
                    src_rows[a] = r;
                }
                for (&a, &r) in reduced.iter().zip(red_rows) {
                    src_rows[a] = r;
                }
                let from = lw.flat(ib, &src_rows, &src_strides);
                let load = lw.load(src, from);
                let x = lw.emit(ib, in_dtype, load, None);
                let acc = lw.emit(ib, in_dtype, Expr::Var(var), None);
                let next = lw.emit(ib, in_dtype, Expr::Binary(step, acc, x), None);
                ib.push(Stmt::Set(var, next));
            });
            body.extend(inner);
            let mut result = lw.emit(body, in_dtype, Expr::Var(var), None);
            if let Some(n) = mean_divisor {
                result = lw.emit(body, dtype, Expr::Binary(BinaryOp::Div, result, n), None);
            }
            let to = lw.flat(body, rows, &out_strides);
            body.push(Stmt::Store(dest, Some(to), result));
        });
    }
}
