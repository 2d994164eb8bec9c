//! Layout ops: `transpose`, `slice`, `broadcast_to` and `reshape` of a dense
//! buffer are new views of the same buffer (index arithmetic, no copy);
//! `concat` copies each argument to its place; `gather` copies the table's
//! elements its index names, each index checked first.

use super::{Loc, View};
use crate::lower::Lowerer;
use crate::{Expr, Param, Reg, Stmt};
use kiln_ir::entities::Value;
use kiln_ir::op::SliceRange;
use kiln_ir::op::{BinaryOp, CmpOp};
use kiln_ir::types::{DType, Dim, Shape};

impl Lowerer<'_> {
    /// `transpose(x, perm)`: the same buffer, strides permuted.
    pub(super) fn transpose(&mut self, mut v: View, perm: &[u32], dims: Shape) -> Loc {
        v.strides = perm.iter().map(|&p| v.strides[p as usize]).collect();
        v.dims = dims;
        v.dense = v.dense && perm.iter().enumerate().all(|(i, &p)| i == p as usize);
        Loc::View(v)
    }

    /// `slice(x, ranges)`: the same buffer from the first element kept, each
    /// stride times its step (negative: read backwards).
    pub(super) fn slice(
        &mut self,
        out: &mut Vec<Stmt>,
        mut v: View,
        ranges: &[Option<SliceRange>],
        dims: Shape,
    ) -> Loc {
        let mut offset = v.offset;
        for (axis, range) in ranges.iter().enumerate() {
            let (Some(r), Some(stride)) = (range, v.strides[axis]) else {
                continue;
            };
            if r.first() > 0 {
                let start = self.i64_const(out, r.first() as i64);
                let by = self.mul(out, start, stride);
                offset = Some(self.add_opt(out, offset, by));
            }
            if r.step != 1 {
                let step = self.i64_const(out, r.step);
                v.strides[axis] = Some(self.mul(out, stride, step));
            }
        }
        let whole = ranges
            .iter()
            .zip(&v.dims)
            .all(|(r, d)| r.is_none_or(|r| r.step > 0 && Dim::Fixed(r.len()) == *d));
        v.dense = v.dense && whole;
        v.offset = offset;
        v.dims = dims;
        Loc::View(v)
    }

    /// `broadcast_to(x, dims)`: the same buffer, a `None` stride on each new
    /// or stretched axis; a scalar first gets a one-element buffer to repeat.
    pub(super) fn broadcast_to(
        &mut self,
        out: &mut Vec<Stmt>,
        locs: &[Option<Loc>],
        x: Loc,
        dtype: DType,
        dims: Shape,
    ) -> Loc {
        let v = match x {
            Loc::Scalar(reg) => {
                let param = self.param(Param::Scratch {
                    dtype,
                    shape: Vec::new(),
                });
                let zero = self.i64_const(out, 0);
                out.push(Stmt::Store(param, Some(zero), reg));
                View {
                    param,
                    dims: Vec::new(),
                    offset: None,
                    strides: Vec::new(),
                    dense: true,
                }
            }
            a => self.as_view(out, locs, &a, false),
        };
        let lead = dims.len() - v.dims.len();
        let strides = (0..dims.len())
            .map(|axis| match axis.checked_sub(lead) {
                Some(a) if v.dims[a] != Dim::Fixed(1) => v.strides[a],
                _ => None,
            })
            .collect();
        Loc::View(View {
            dense: v.dense && v.dims == dims,
            dims,
            strides,
            ..v
        })
    }

    /// `reshape(x, dims)`: the elements keep their row-major order, so a
    /// dense buffer is aliased and anything else stored densely first, in
    /// `dest` (an output's own buffer where the reshape is returned, so
    /// that a gradient's `transpose` then `reshape`, a weight adjoint's
    /// taps to `[o, c, kh, kw]`, is copied once, not twice); a scalar stays
    /// a register, or is stored to `dest` as one element.
    pub(super) fn reshape(
        &mut self,
        out: &mut Vec<Stmt>,
        locs: &[Option<Loc>],
        x: Loc,
        dtype: DType,
        dims: Shape,
        dest: impl FnOnce(&mut Self) -> crate::ParamIdx,
    ) -> Loc {
        match x {
            Loc::Scalar(reg) if dims.is_empty() => Loc::Scalar(reg),
            Loc::Scalar(reg) => {
                let dest = dest(self);
                let zero = self.i64_const(out, 0);
                out.push(Stmt::Store(dest, Some(zero), reg));
                Loc::View(self.dense(out, dest, dims))
            }
            Loc::View(v) if v.dense => {
                let view = self.dense(out, v.param, dims);
                self.scalar_if_rank0(out, view, dtype)
            }
            a => {
                let from = match &a {
                    Loc::View(v) => v.dims.clone(),
                    Loc::Fused { dims, .. } => dims.clone(),
                    Loc::Scalar(_) => unreachable!("matched above"),
                };
                let dest = dest(self);
                let stored = self.dense(out, dest, from);
                self.store_all(out, locs, &a, &stored);
                let view = self.dense(out, dest, dims);
                self.scalar_if_rank0(out, view, dtype)
            }
        }
    }

    /// `dest = concat(args)` along `axis`: each argument copied to its
    /// place, read once.
    pub(super) fn concat(
        &mut self,
        out: &mut Vec<Stmt>,
        locs: &[Option<Loc>],
        axis: usize,
        args: &[Loc],
        dest: &View,
    ) {
        let mut start = 0u64;
        for a in args {
            let dims = match a {
                Loc::View(v) => v.dims.clone(),
                Loc::Fused { dims, .. } => dims.clone(),
                Loc::Scalar(_) => unreachable!("verified: concat takes tensors"),
            };
            let Dim::Fixed(extent) = dims[axis] else {
                unreachable!("verified: the concat axis is fixed")
            };
            let shift = (start > 0).then(|| self.i64_const(out, start as i64));
            self.nest(out, &dims, |lw, body, rows| {
                let src: Vec<Option<Reg>> = rows.iter().copied().map(Some).collect();
                let x = lw.read(body, locs, a, &src);
                let mut to_rows = src;
                if let Some(shift) = shift {
                    to_rows[axis] = Some(lw.emit(
                        body,
                        DType::I64,
                        Expr::Binary(BinaryOp::Add, rows[axis], shift),
                        None,
                    ));
                }
                let to = lw.view_index(body, dest, &to_rows);
                body.push(Stmt::Store(dest.param, Some(to), x));
            });
            start += extent;
        }
    }

    /// `dest = gather(table, index)` along `axis` (node `value`): a nest
    /// over the result; each element checks its index against the axis'
    /// extent (failing the kernel with the node's check) before it reads
    /// the table there.
    pub(super) fn gather(
        &mut self,
        out: &mut Vec<Stmt>,
        locs: &[Option<Loc>],
        value: Value,
        axis: usize,
        (table, index): (&Loc, &Loc),
        dest: &View,
    ) {
        let table_dims = match table {
            Loc::View(v) => v.dims.clone(),
            Loc::Fused { dims, .. } => dims.clone(),
            Loc::Scalar(_) => unreachable!("verified: gather's table is a tensor"),
        };
        let index_rank = dest.dims.len() + 1 - table_dims.len();
        let extent = self.extent(&table_dims[axis]);
        let extent = self.emit(out, DType::I64, Expr::ExtentValue(extent), None);
        let zero = self.i64_const(out, 0);
        self.kernel.checks.push(value);
        let check = (self.kernel.checks.len() - 1) as u32;
        let dims = dest.dims.clone();
        self.nest(out, &dims, |lw, body, rows| {
            let rows: Vec<Option<Reg>> = rows.iter().copied().map(Some).collect();
            let index_rows = &rows[axis..axis + index_rank];
            let at = lw.checked_index(body, locs, index, index_rows, (zero, extent), check);
            let mut from = rows[..axis].to_vec();
            from.push(Some(at));
            from.extend_from_slice(&rows[axis + index_rank..]);
            let x = lw.read(body, locs, table, &from);
            let to = lw.view_index(body, dest, &rows);
            body.push(Stmt::Store(dest.param, Some(to), x));
        });
    }

    /// `dest = index_add(base, index, source)` along `axis` (node
    /// `value`): `base` copied to `dest`, then a nest over `source` in
    /// row-major order adding each element to `dest` at its index (checked
    /// as `gather`'s). A repeated index makes rows of that nest read what
    /// earlier rows wrote: the loops over the index's axes are sequential
    /// ([`crate::iterations`] does not count a loaded index as the row's);
    /// a loop over an axis after `axis` stays independent.
    pub(super) fn index_add(
        &mut self,
        out: &mut Vec<Stmt>,
        locs: &[Option<Loc>],
        value: Value,
        axis: usize,
        (base, index, source): (&Loc, &Loc, &Loc),
        dest: &View,
    ) {
        let dtype = self.param_dtype(dest.param).expect("a tensor buffer");
        let base_dims = dest.dims.clone();
        self.nest(out, &base_dims, |lw, body, rows| {
            let rows: Vec<Option<Reg>> = rows.iter().copied().map(Some).collect();
            let x = lw.read(body, locs, base, &rows);
            let to = lw.view_index(body, dest, &rows);
            body.push(Stmt::Store(dest.param, Some(to), x));
        });
        let source_dims = match source {
            Loc::View(v) => v.dims.clone(),
            Loc::Fused { dims, .. } => dims.clone(),
            // A rank-1 base at a scalar index: one element.
            Loc::Scalar(_) => Vec::new(),
        };
        let index_rank = source_dims.len() + 1 - base_dims.len();
        let extent = self.extent(&base_dims[axis]);
        let extent = self.emit(out, DType::I64, Expr::ExtentValue(extent), None);
        let zero = self.i64_const(out, 0);
        self.kernel.checks.push(value);
        let check = (self.kernel.checks.len() - 1) as u32;
        // The index is read and checked once per source row of the axes up
        // to the index's; the axes after it are a loop of their own.
        let (outer_dims, post_dims) = source_dims.split_at(axis + index_rank);
        self.nest(out, outer_dims, |lw, body, outer| {
            let outer: Vec<Option<Reg>> = outer.iter().copied().map(Some).collect();
            let at = lw.checked_index(body, locs, index, &outer[axis..], (zero, extent), check);
            lw.nest(body, post_dims, |lw, body, post| {
                let post: Vec<Option<Reg>> = post.iter().copied().map(Some).collect();
                let rows = [outer.as_slice(), post.as_slice()].concat();
                let x = lw.read(body, locs, source, &rows);
                let to_rows = [&outer[..axis], &[Some(at)], post.as_slice()].concat();
                let to = lw.view_index(body, dest, &to_rows);
                let sum = lw.emit(body, dtype, Expr::Load(dest.param, to), None);
                let sum = lw.emit(body, dtype, Expr::Binary(BinaryOp::Add, sum, x), None);
                body.push(Stmt::Store(dest.param, Some(to), sum));
            });
        });
    }

    /// The `i64` index `index[rows]`, failing the kernel with check
    /// `check` unless it lies in `zero..extent` (`gather`'s and
    /// `index_add`'s bounds check).
    fn checked_index(
        &mut self,
        body: &mut Vec<Stmt>,
        locs: &[Option<Loc>],
        index: &Loc,
        rows: &[Option<Reg>],
        (zero, extent): (Reg, Reg),
        check: u32,
    ) -> Reg {
        let at = self.read(body, locs, index, rows);
        let at = if self.kernel.reg_type(at) == DType::I64 {
            at
        } else {
            self.emit(body, DType::I64, Expr::Cast(DType::I64, at), None)
        };
        let above = self.emit(body, DType::Bool, Expr::Compare(CmpOp::Ge, at, zero), None);
        let below = self.emit(
            body,
            DType::Bool,
            Expr::Compare(CmpOp::Lt, at, extent),
            None,
        );
        let inside = self.emit(
            body,
            DType::Bool,
            Expr::Binary(BinaryOp::And, above, below),
            None,
        );
        let flag = self.emit(body, DType::I32, Expr::Cast(DType::I32, inside), None);
        body.push(Stmt::CheckNonZero(flag, check));
        at
    }
}
