//! Reductions over a column and over axes, and filters: each folds in the
//! order docs/semantics.md gives, so every tier computes the same bits.

use super::{Loc, View};
use crate::lower::{step_op, Lowerer};
use crate::{Expr, Extent, Reg, Stmt};
use kiln_ir::entities::Value;
use kiln_ir::op::{BinaryOp, CmpOp, ReduceOp};
use kiln_ir::scalar::Scalar;
use kiln_ir::semantics::reduce_identity;
use kiln_ir::types::{DType, Dim, Shape};

/// Results of a reduction over axes folded together, along the last kept
/// axis: independent chains of steps the machine runs side by side.
const ROW_BLOCK: u64 = 8;

/// Lanes of a `reduce_min`/`reduce_max` over a long last axis
/// ([`Lowerer::fold_in_lanes`]).
const LANES: u64 = 16;

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
        let last = src_dims.len() - 1;
        if matches!(op, ReduceOp::Min | ReduceOp::Max) && reduced == [last] {
            if let Dim::Fixed(extent) = src_dims[last] {
                if extent >= 2 * LANES {
                    let d = d.clone();
                    self.fold_in_lanes(
                        out,
                        locs,
                        (op, in_dtype),
                        src,
                        (&kept, keepdim),
                        &d,
                        extent,
                    );
                    return;
                }
            }
        }
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

    /// `dest[kept] = min or max of src over its last axis` (`extent`
    /// elements, at least 2 × LANES), in any order: IEEE 754's minimum and
    /// maximum are exact, a NaN wins wherever it stands and `-0.0 < +0.0`,
    /// so every order gives the same bits (a NaN's payload and sign are
    /// unspecified); integers alike. Each element folds into lane `c %
    /// LANES` of a scratch row, the elements past the last full row of
    /// lanes and then the lanes into a variable. A float folds as an
    /// integer key that orders as the float does (`bits ^ (sign ? 0x7f..f :
    /// 0)`: -0.0 below +0.0, which a float `max` instruction does not
    /// order) with a NaN lane flag beside it, so the lane loop is integer
    /// `max`/`min` and `or`, which every vectorizer runs as vectors
    /// (LLVM left the float `maximum` loop scalar: softmax's row max cost
    /// 42 % of a `[12, 197, 197]` softmax). With
    /// `LowerOptions::running_min_max` the key runs in one variable over
    /// every element instead, a reduction LLVM's loop vectorizer takes
    /// whole (it had unrolled the lane loop and gathered across chunks).
    #[allow(clippy::too_many_arguments)]
    fn fold_in_lanes(
        &mut self,
        out: &mut Vec<Stmt>,
        locs: &[Option<Loc>],
        (op, dtype): (ReduceOp, DType),
        src: &Loc,
        (kept, keepdim): (&[usize], bool),
        d: &View,
        extent: u64,
    ) {
        let step = if op == ReduceOp::Min {
            BinaryOp::Min
        } else {
            BinaryOp::Max
        };
        // The integer the lanes fold: the value itself, or a float's key.
        let key_ty = dtype.bits_int();
        let float = key_ty != dtype;
        let bits = key_ty.size_bytes() as i64 * 8;
        let key_of = |lw: &mut Self, body: &mut Vec<Stmt>, x: Reg| -> Reg {
            if !float {
                return x;
            }
            let b = lw.emit(body, key_ty, Expr::Bitcast(key_ty, x), None);
            key_of_int(lw, body, key_ty, b, bits)
        };
        let identity = reduce_identity(op, dtype);
        // The lanes (and their NaN flags), unless the key runs in one
        // variable (`LowerOptions::running_min_max`).
        let running = self.running_min_max;
        let lanes = (!running).then(|| {
            self.param(crate::Param::Scratch {
                dtype: key_ty,
                shape: vec![Dim::Fixed(LANES)],
            })
        });
        let nans = (float && !running).then(|| {
            self.param(crate::Param::Scratch {
                dtype: DType::I32,
                shape: vec![Dim::Fixed(LANES)],
            })
        });
        let (acc_var, nan_var) = (
            self.new_var(Scalar::zero(key_ty)),
            self.new_var(Scalar::I32(0)),
        );
        let rank = kept.len() + 1;
        let out_strides = d.strides.clone();
        let (dest, dims) = (d.param, d.dims.clone());
        self.nest(out, &dims, |lw, body, at| {
            // The source's indices but the last, from the result's.
            let kept_rows: Vec<Reg> = if keepdim {
                kept.iter().map(|&a| at[a]).collect()
            } else {
                at.to_vec()
            };
            let src_at = |c: Reg| -> Vec<Option<Reg>> {
                let mut rows = vec![None; rank];
                for (&a, &r) in kept.iter().zip(&kept_rows) {
                    rows[a] = Some(r);
                }
                rows[rank - 1] = Some(c);
                rows
            };
            // One element into the key `acc` and the NaN flag `flag`.
            let fold =
                |lw: &mut Self, b: &mut Vec<Stmt>, col: Reg, (acc, flag): (Reg, Option<Reg>)| {
                    let x = lw.read(b, locs, src, &src_at(col));
                    let key = key_of(lw, b, x);
                    let next = lw.emit(b, key_ty, Expr::Binary(step, acc, key), None);
                    let flag = flag.map(|f| {
                        let nan = lw.emit(b, DType::Bool, Expr::Compare(CmpOp::Ne, x, x), None);
                        let nan = lw.emit(b, DType::I32, Expr::Cast(DType::I32, nan), None);
                        lw.emit(b, DType::I32, Expr::Binary(BinaryOp::BOr, f, nan), None)
                    });
                    (next, flag)
                };
            let start = lw.emit(body, dtype, Expr::Const(identity), None);
            let start = key_of(lw, body, start);
            let no = lw.emit(body, DType::I32, Expr::Const(Scalar::I32(0)), None);
            // The elements the lanes fold: every full row of lanes.
            let in_lanes = match lanes {
                Some(lanes) => {
                    let l = lw.new_reg(DType::I64, Some("lane"));
                    let mut init = vec![Stmt::Store(lanes, Some(l), start)];
                    if let Some(n) = nans {
                        init.push(Stmt::Store(n, Some(l), no));
                    }
                    body.push(Stmt::loop_of(Extent::Fixed(LANES), l, init));
                    let (c, l) = (
                        lw.new_reg(DType::I64, Some("c")),
                        lw.new_reg(DType::I64, Some("lane")),
                    );
                    let mut lb = Vec::new();
                    let width = lw.i64_const(&mut lb, LANES as i64);
                    let base = lw.mul(&mut lb, c, width);
                    let col = lw.i64_binary(&mut lb, BinaryOp::Add, base, l);
                    let acc = lw.emit(&mut lb, key_ty, Expr::Load(lanes, l), None);
                    let flag = nans.map(|n| lw.emit(&mut lb, DType::I32, Expr::Load(n, l), None));
                    let (next, flag) = fold(lw, &mut lb, col, (acc, flag));
                    lb.push(Stmt::Store(lanes, Some(l), next));
                    if let (Some(n), Some(f)) = (nans, flag) {
                        lb.push(Stmt::Store(n, Some(l), f));
                    }
                    let cb = vec![Stmt::loop_of(Extent::Fixed(LANES), l, lb)];
                    body.push(Stmt::loop_of(Extent::Fixed(extent / LANES), c, cb));
                    extent / LANES * LANES
                }
                None => 0,
            };
            // The rest (every element where the key runs in the
            // variable), then the lanes, into the variables.
            body.push(Stmt::Set(acc_var, start));
            body.push(Stmt::Set(nan_var, no));
            let r = lw.new_reg(DType::I64, Some("c"));
            let mut rb = Vec::new();
            let first = lw.i64_const(&mut rb, in_lanes as i64);
            let col = lw.i64_binary(&mut rb, BinaryOp::Add, first, r);
            let acc = lw.emit(&mut rb, key_ty, Expr::Var(acc_var), None);
            let flag = float.then(|| lw.emit(&mut rb, DType::I32, Expr::Var(nan_var), None));
            let (next, flag) = fold(lw, &mut rb, col, (acc, flag));
            rb.push(Stmt::Set(acc_var, next));
            if let Some(f) = flag {
                rb.push(Stmt::Set(nan_var, f));
            }
            body.push(Stmt::loop_of(Extent::Fixed(extent - in_lanes), r, rb));
            if let Some(lanes) = lanes {
                let l = lw.new_reg(DType::I64, Some("lane"));
                let mut fb = Vec::new();
                let x = lw.emit(&mut fb, key_ty, Expr::Load(lanes, l), None);
                let acc = lw.emit(&mut fb, key_ty, Expr::Var(acc_var), None);
                let next = lw.emit(&mut fb, key_ty, Expr::Binary(step, acc, x), None);
                fb.push(Stmt::Set(acc_var, next));
                if let Some(n) = nans {
                    let x = lw.emit(&mut fb, DType::I32, Expr::Load(n, l), None);
                    let f = lw.emit(&mut fb, DType::I32, Expr::Var(nan_var), None);
                    let f = lw.emit(&mut fb, DType::I32, Expr::Binary(BinaryOp::BOr, f, x), None);
                    fb.push(Stmt::Set(nan_var, f));
                }
                body.push(Stmt::loop_of(Extent::Fixed(LANES), l, fb));
            }
            let key = lw.emit(body, key_ty, Expr::Var(acc_var), None);
            let result = if float {
                // The key back to the float (the map is its own inverse),
                // or NaN where a lane saw one.
                let back = key_of_int(lw, body, key_ty, key, bits);
                let value = lw.emit(body, dtype, Expr::Bitcast(dtype, back), None);
                let flag = lw.emit(body, DType::I32, Expr::Var(nan_var), None);
                let any = lw.emit(body, DType::Bool, Expr::Compare(CmpOp::Ne, flag, no), None);
                let nan = lw.emit(body, dtype, Expr::Const(nan_of(dtype)), None);
                lw.emit(body, dtype, Expr::Select(any, nan, value), None)
            } else {
                key
            };
            let to = lw.flat(body, None, at, &out_strides);
            body.push(Stmt::Store(dest, Some(to), result));
        });
    }
}

/// `key ^ (key < 0 ? MAX : 0)` of an integer `key` of `ty` (`bits` wide):
/// a float's bits to its ordering key, and the key back.
fn key_of_int(lw: &mut Lowerer<'_>, body: &mut Vec<Stmt>, ty: DType, key: Reg, bits: i64) -> Reg {
    let shift = lw.emit(body, ty, Expr::Const(int_of(ty, bits - 1)), None);
    let sign = lw.emit(body, ty, Expr::Binary(BinaryOp::ShrArith, key, shift), None);
    let mask = lw.emit(body, ty, Expr::Const(int_of(ty, i64::MAX)), None);
    let flip = lw.emit(body, ty, Expr::Binary(BinaryOp::BAnd, sign, mask), None);
    lw.emit(body, ty, Expr::Binary(BinaryOp::BXor, key, flip), None)
}

/// `v` as an `i32` or `i64` constant (an `i32`'s `i64::MAX` is `i32::MAX`).
fn int_of(ty: DType, v: i64) -> Scalar {
    if ty == DType::I32 {
        Scalar::I32(v.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32)
    } else {
        Scalar::I64(v)
    }
}

/// A quiet NaN of a float dtype.
fn nan_of(dtype: DType) -> Scalar {
    if dtype == DType::F32 {
        Scalar::F32(f32::NAN)
    } else {
        Scalar::F64(f64::NAN)
    }
}
