//! Reductions over a column and over axes, and filters: each folds in the
//! order docs/semantics.md gives, so every tier computes the same bits.

use super::{Loc, View};
use crate::lower::{step_op, Lowerer};
use crate::{Expr, Reg, Stmt};
use kiln_ir::entities::Value;
use kiln_ir::op::{BinaryOp, ReduceOp};
use kiln_ir::scalar::Scalar;
use kiln_ir::semantics::reduce_identity;
use kiln_ir::types::{DType, Dim, Shape};

/// Results of a reduction over axes folded together, along the last kept
/// axis: independent chains of steps the machine runs side by side.
const ROW_BLOCK: u64 = 8;

impl Lowerer<'_> {
    pub(super) fn reduce(
        &mut self,
        out: &mut Vec<Stmt>,
        locs: &[Option<Loc>],
        value: Value,
        op: ReduceOp,
        col: &Loc,
    ) -> Reg {
        let name = self.graph.source_name(value);
        let arg = self.graph.node(value).args[0];
        let col_ty = self.graph.ty(arg).as_tensor().expect("a column").clone();
        let extent = self.extent(&col_ty.shape[0]);
        if op == ReduceOp::Count {
            return self.emit(out, DType::I64, Expr::ExtentValue(extent), name);
        }
        let dtype = col_ty.dtype;
        let var = self.new_var(reduce_identity(op, dtype));
        let step = step_op(op).expect("count is handled above");
        self.nest(out, &col_ty.shape, |lw, body, rows| {
            let x = lw.read(body, locs, col, &[Some(rows[0])]);
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

    pub(super) fn filter(
        &mut self,
        out: &mut Vec<Stmt>,
        locs: &[Option<Loc>],
        value: Value,
        col: &Loc,
    ) {
        let arg = self.graph.node(value).args[0];
        let shape = self
            .graph
            .ty(arg)
            .as_tensor()
            .expect("a column")
            .shape
            .clone();
        for idx in self.output_indices(value) {
            let sel = self.output_params[idx];
            let count = self.new_var(Scalar::I64(0));
            self.nest(out, &shape, |lw, body, rows| {
                let mask = lw.read(body, locs, col, &[Some(rows[0])]);
                body.push(Stmt::KeepRow {
                    sel,
                    count,
                    row: rows[0],
                    mask,
                });
            });
            // The count parameter directly follows the selection's.
            out.push(Stmt::StoreCount(sel.next(), count));
        }
    }

    /// `dest[kept] = fold over the reduced axes (row-major) from the
    /// identity`; `mean` divides by the number of elements folded, `count`
    /// is that number.
    pub(super) fn reduce_axes(
        &mut self,
        out: &mut Vec<Stmt>,
        locs: &[Option<Loc>],
        (op, axes, keepdim): (ReduceOp, &[u32], bool),
        src: &Loc,
        d: &View,
        dtype: DType,
    ) {
        let (dest, dims) = (d.param, &d.dims);
        let (src_dims, in_dtype) = match src {
            Loc::View(v) => (v.dims.clone(), self.param_dtype(v.param)),
            Loc::Fused { value, dims } => (dims.clone(), self.graph.ty(*value).dtype()),
            Loc::Scalar(_) => unreachable!("verified: reduce_axes takes a tensor"),
        };
        let in_dtype = in_dtype.expect("a tensor");
        let src_dims = &src_dims;
        let out_strides = d.strides.clone();
        let reduced: Vec<usize> = axes.iter().map(|&a| a as usize).collect();
        let kept: Vec<usize> = (0..src_dims.len())
            .filter(|a| !reduced.contains(a))
            .collect();
        let red_dims: Shape = reduced.iter().map(|&a| src_dims[a].clone()).collect();
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
                let to = lw.flat(body, None, rows, &out_strides);
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
        let step = step_op(op).expect("count is handled above");
        let mean_divisor =
            (op == ReduceOp::Mean).then(|| self.emit(out, dtype, Expr::Cast(dtype, folded), None));
        // The result axis of the last kept axis: its results are folded
        // [`ROW_BLOCK`] at a time, each in its own variable, so the folds
        // are independent chains the machine overlaps (a fold is a chain
        // of dependent steps, latency-bound alone). Each result still folds
        // its elements in order: the same bits.
        let block_axis = kept
            .last()
            .map(|&a| if keepdim { a } else { kept.len() - 1 });
        let blocked = block_axis.and_then(|ba| match dims[ba] {
            Dim::Fixed(n) if n >= ROW_BLOCK => Some((ba, n)),
            _ => None,
        });
        // Folds the results of `nest_dims` (the result's dims, the block
        // axis as given), `width` results along the block axis per
        // iteration, starting at `first` (its index there is `first +
        // width * row + r`).
        let fold =
            |lw: &mut Self, out: &mut Vec<Stmt>, nest_dims: &[Dim], width: u64, first: u64| {
                let vars: Vec<_> = (0..width)
                    .map(|_| lw.new_var(reduce_identity(op, in_dtype)))
                    .collect();
                lw.nest(out, nest_dims, |lw, body, rows| {
                    // The result's indices of each of the `width` results.
                    let mut result_rows: Vec<Vec<Reg>> = Vec::with_capacity(vars.len());
                    for r in 0..width {
                        let mut at = rows.to_vec();
                        if let Some(ba) = block_axis.filter(|_| width > 1 || first > 0) {
                            let scale = lw.i64_const(body, width as i64);
                            let base = lw.emit(
                                body,
                                DType::I64,
                                Expr::Binary(BinaryOp::Mul, rows[ba], scale),
                                None,
                            );
                            let off = lw.i64_const(body, (first + r) as i64);
                            at[ba] = lw.emit(
                                body,
                                DType::I64,
                                Expr::Binary(BinaryOp::Add, base, off),
                                None,
                            );
                        }
                        result_rows.push(at);
                    }
                    for &var in &vars {
                        body.push(Stmt::Set(var, identity));
                    }
                    let mut inner = Vec::new();
                    lw.nest(&mut inner, &red_dims, |lw, ib, red_rows| {
                        for (at, &var) in result_rows.iter().zip(&vars) {
                            // The kept axes' indices, from the result's (keepdim adds 1s).
                            let kept_rows: Vec<Reg> = if keepdim {
                                kept.iter().map(|&a| at[a]).collect()
                            } else {
                                at.clone()
                            };
                            let mut src_rows = vec![red_rows[0]; src_dims.len()];
                            for (&a, &r) in kept.iter().zip(&kept_rows) {
                                src_rows[a] = r;
                            }
                            for (&a, &r) in reduced.iter().zip(red_rows) {
                                src_rows[a] = r;
                            }
                            let src_rows: Vec<Option<Reg>> =
                                src_rows.into_iter().map(Some).collect();
                            let x = lw.read(ib, locs, src, &src_rows);
                            let acc = lw.emit(ib, in_dtype, Expr::Var(var), None);
                            let next = lw.emit(ib, in_dtype, Expr::Binary(step, acc, x), None);
                            ib.push(Stmt::Set(var, next));
                        }
                    });
                    body.extend(inner);
                    for (at, &var) in result_rows.iter().zip(&vars) {
                        let mut result = lw.emit(body, in_dtype, Expr::Var(var), None);
                        if let Some(n) = mean_divisor {
                            result =
                                lw.emit(body, dtype, Expr::Binary(BinaryOp::Div, result, n), None);
                        }
                        let to = lw.flat(body, None, at, &out_strides);
                        body.push(Stmt::Store(dest, Some(to), result));
                    }
                });
            };
        match blocked {
            Some((ba, n)) => {
                let mut block_dims = dims.clone();
                block_dims[ba] = Dim::Fixed(n / ROW_BLOCK);
                fold(self, out, &block_dims, ROW_BLOCK, 0);
                let rest = n % ROW_BLOCK;
                if rest > 0 {
                    let mut rest_dims = dims.clone();
                    rest_dims[ba] = Dim::Fixed(rest);
                    fold(self, out, &rest_dims, 1, n - rest);
                }
            }
            None => fold(self, out, dims, 1, 0),
        }
    }
}
