//! Layout ops: `transpose`, `slice`, `broadcast_to` and `reshape` of a dense
//! buffer are new views of the same buffer (index arithmetic, no copy);
//! `concat` copies each argument to its place.

use super::{Loc, View};
use crate::lower::Lowerer;
use crate::{Expr, Param, Reg, Stmt};
use kiln_ir::op::BinaryOp;
use kiln_ir::op::SliceRange;
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
    /// dense buffer is aliased and anything else stored densely first; a
    /// scalar stays a register, or is stored to `dest` as one element.
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
            a => {
                let v = self.as_view(out, locs, &a, true);
                let view = self.dense(out, v.param, dims);
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
}
