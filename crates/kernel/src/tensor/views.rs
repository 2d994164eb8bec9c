//! Views of buffers: where a tensor's element is (an offset and one stride
//! per axis), reading an element of any [`Loc`] (computing a fused node where
//! it is read), writing a whole tensor, and loop nests over a shape.

use super::{Loc, View};
use crate::lower::Lowerer;
use crate::{Expr, Extent, Param, ParamIdx, Reg, Stmt};
use cranelift_entity::EntityRef;
use kiln_ir::entities::Value;
use kiln_ir::op::BinaryOp;
use kiln_ir::scalar::Scalar;
use kiln_ir::types::{DType, Dim, Shape};

/// The rows of an argument of `src` dims read at `rows` of a result of
/// `rows.len()` axes, NumPy-aligned: trailing axes match, an axis of extent
/// 1 reads index 0 (`None`).
pub(super) fn align(src: &[Dim], rows: &[Option<Reg>]) -> Vec<Option<Reg>> {
    let lead = rows.len() - src.len();
    src.iter()
        .enumerate()
        .map(|(a, d)| {
            if *d == Dim::Fixed(1) {
                None
            } else {
                rows[a + lead]
            }
        })
        .collect()
}

/// Rows of a tile of [`Lowerer::store_all`] where it reads across a
/// view's contiguous axis (16 f32: a 64-byte line of the buffer read).
const ACROSS_TILE: u64 = 16;

impl Lowerer<'_> {
    /// A dense view of `param` holding a tensor of `dims`.
    pub(super) fn dense(&mut self, out: &mut Vec<Stmt>, param: ParamIdx, dims: Shape) -> View {
        let strides = self.strides(out, &dims);
        View {
            param,
            dims,
            offset: None,
            strides,
            dense: true,
        }
    }

    /// A rank-0 view's element in a register, else the view.
    pub(super) fn scalar_if_rank0(&mut self, out: &mut Vec<Stmt>, v: View, dtype: DType) -> Loc {
        if !v.dims.is_empty() {
            return Loc::View(v);
        }
        let at = match v.offset {
            Some(o) => o,
            None => self.i64_const(out, 0),
        };
        let load = self.load(v.param, at);
        Loc::Scalar(self.emit(out, dtype, load, None))
    }

    /// `loc` as a view; a fused node (or, when `dense` is asked, a strided
    /// view) is stored in a scratch buffer first.
    pub(super) fn as_view(
        &mut self,
        out: &mut Vec<Stmt>,
        locs: &[Option<Loc>],
        loc: &Loc,
        dense: bool,
    ) -> View {
        let dims = match loc {
            Loc::View(v) if v.dense || !dense => return v.clone(),
            Loc::View(v) => v.dims.clone(),
            Loc::Fused { dims, .. } => dims.clone(),
            Loc::Scalar(_) => unreachable!("verified: a tensor op takes a tensor"),
        };
        let dtype = match loc {
            Loc::Fused { value, .. } => self.graph.ty(*value).dtype(),
            Loc::View(v) => self.param_dtype(v.param),
            Loc::Scalar(_) => None,
        }
        .expect("a tensor");
        let param = self.param(Param::Scratch {
            dtype,
            shape: dims.clone(),
        });
        let view = self.dense(out, param, dims);
        self.store_all(out, locs, loc, &view);
        view
    }

    /// `src.T` (`src` an `[m, k]` view) copied into a dense `[k, m]` scratch
    /// buffer, 8 of `src`'s rows at a time: their 8 cache lines stay in L1
    /// while the copy walks `k`. Copied row by row of the result, each
    /// element came from another line, `k` elements apart (a stride of
    /// 3072 f32 puts every line in one L1 set): 1.8 ns an element, fc2's
    /// `x.T` 8 % of ViT-B/16's time.
    pub(super) fn transposed_copy(
        &mut self,
        out: &mut Vec<Stmt>,
        src: &View,
        (m, k): (u64, u64),
    ) -> View {
        const BLOCK: u64 = 8;
        let dtype = self.param_dtype(src.param).expect("a tensor buffer");
        let dims = vec![Dim::Fixed(k), Dim::Fixed(m)];
        let param = self.param(Param::Scratch {
            dtype,
            shape: dims.clone(),
        });
        let dest = self.dense(out, param, dims);
        // Rows `first + j` of `src`, `j` below `rows`, for every `k`.
        let block = |lw: &mut Self, out: &mut Vec<Stmt>, first: Reg, rows: u64| {
            let (c, j) = (
                lw.new_reg(DType::I64, Some("i0")),
                lw.new_reg(DType::I64, Some("i1")),
            );
            let mut jb = Vec::new();
            let i = lw.i64_binary(&mut jb, BinaryOp::Add, first, j);
            let from = lw.view_index(&mut jb, src, &[Some(i), Some(c)]);
            let x = lw.emit(&mut jb, dtype, Expr::Load(src.param, from), None);
            let to = lw.view_index(&mut jb, &dest, &[Some(c), Some(i)]);
            jb.push(Stmt::Store(dest.param, Some(to), x));
            let cb = vec![Stmt::loop_of(Extent::Fixed(rows), j, jb)];
            out.push(Stmt::loop_of(Extent::Fixed(k), c, cb));
        };
        if m >= BLOCK {
            let b = self.new_reg(DType::I64, Some("rb"));
            let mut bb = Vec::new();
            let width = self.i64_const(&mut bb, BLOCK as i64);
            let first = self.mul(&mut bb, b, width);
            block(self, &mut bb, first, BLOCK);
            out.push(Stmt::loop_of(Extent::Fixed(m / BLOCK), b, bb));
        }
        if m % BLOCK != 0 {
            let first = self.i64_const(out, (m / BLOCK * BLOCK) as i64);
            block(self, out, first, m % BLOCK);
        }
        dest
    }

    /// `dest[rows] = loc[rows]` over all of `dest`'s dims.
    ///
    /// Where `loc` reads a view across its contiguous axis (a transpose's:
    /// `(w @ x.T).T`'s result under its bias add) and a JIT tier compiles
    /// the nest, the last two axes run in tiles of [`ACROSS_TILE`] rows ×
    /// every column, a column's 16 rows innermost: each column of a tile
    /// reads 16 contiguous elements of the transposed buffer, and the
    /// tile's 16 result rows take a line each until it is full (row by
    /// row, each element read a line of its own from L2: 10 % of a
    /// `Linear(768, 3072)`'s time in torch's layout, which went from 96 to
    /// 105 GFLOP/s, docs/performance.md). Each element is the same
    /// expression: the same bits.
    pub(super) fn store_all(
        &mut self,
        out: &mut Vec<Stmt>,
        locs: &[Option<Loc>],
        loc: &Loc,
        dest: &View,
    ) {
        let dims = dest.dims.clone();
        let n = dims.len();
        let tiles = match dims[n.saturating_sub(2)..] {
            [Dim::Fixed(rows), Dim::Fixed(cols)]
                if self.panels.is_some()
                    && rows >= ACROSS_TILE
                    && cols >= ACROSS_TILE
                    && self.reads_across(locs, loc) =>
            {
                Some((rows, cols))
            }
            _ => None,
        };
        if let Some((row_count, cols)) = tiles {
            // `height` rows from `first`, every column, a column's rows
            // innermost.
            let tile = |lw: &mut Self, body: &mut Vec<Stmt>, outer: &[Reg], first, height| {
                let (j, ii) = (
                    lw.new_reg(DType::I64, Some("j")),
                    lw.new_reg(DType::I64, Some("ii")),
                );
                let mut ii_body = Vec::new();
                let i = lw.i64_binary(&mut ii_body, BinaryOp::Add, first, ii);
                let mut rows: Vec<Option<Reg>> = outer.iter().copied().map(Some).collect();
                rows.extend([Some(i), Some(j)]);
                let x = lw.read(&mut ii_body, locs, loc, &rows);
                let to = lw.view_index(&mut ii_body, dest, &rows);
                ii_body.push(Stmt::Store(dest.param, Some(to), x));
                let j_body = vec![Stmt::loop_of(Extent::Fixed(height), ii, ii_body)];
                body.push(Stmt::loop_of(Extent::Fixed(cols), j, j_body));
            };
            self.nest(out, &dims[..n - 2], |lw, body, outer| {
                let ib = lw.new_reg(DType::I64, Some("ib"));
                let mut ib_body = Vec::new();
                let height = lw.i64_const(&mut ib_body, ACROSS_TILE as i64);
                let first = lw.mul(&mut ib_body, ib, height);
                tile(lw, &mut ib_body, outer, first, ACROSS_TILE);
                let full = row_count / ACROSS_TILE;
                body.push(Stmt::loop_of(Extent::Fixed(full), ib, ib_body));
                // The rows past the last tile, as one shorter tile.
                if row_count % ACROSS_TILE != 0 {
                    let first = lw.i64_const(body, (full * ACROSS_TILE) as i64);
                    tile(lw, body, outer, first, row_count % ACROSS_TILE);
                }
            });
            return;
        }
        self.nest(out, &dims, |lw, body, rows| {
            let rows: Vec<Option<Reg>> = rows.iter().copied().map(Some).collect();
            let x = lw.read(body, locs, loc, &rows);
            let to = lw.view_index(body, dest, &rows);
            body.push(Stmt::Store(dest.param, Some(to), x));
        });
    }

    /// Whether computing `loc` reads a view of two or more axes whose
    /// second-last axis is its contiguous one and whose last is not (a
    /// transposed dense buffer).
    pub(super) fn reads_across(&self, locs: &[Option<Loc>], loc: &Loc) -> bool {
        match loc {
            Loc::Scalar(_) => false,
            Loc::View(v) => v.strides.len() >= 2 && self.across(&v.strides[v.strides.len() - 2..]),
            Loc::Fused { value, .. } => self.graph.node(*value).args.iter().any(|a| {
                locs[a.index()]
                    .as_ref()
                    .is_some_and(|l| self.reads_across(locs, l))
            }),
        }
    }

    /// The element of `loc` at `rows` (one per axis of `loc`; `None` is
    /// index 0), emitted in `body`. A fused node is computed here from its
    /// arguments, each read at the rows it broadcasts from.
    pub(super) fn read(
        &mut self,
        body: &mut Vec<Stmt>,
        locs: &[Option<Loc>],
        loc: &Loc,
        rows: &[Option<Reg>],
    ) -> Reg {
        match loc {
            Loc::Scalar(r) => *r,
            Loc::View(v) => {
                let at = self.view_index(body, v, rows);
                let dtype = self.param_dtype(v.param).expect("a tensor buffer");
                let load = self.load(v.param, at);
                self.emit(body, dtype, load, None)
            }
            Loc::Fused { value, .. } => {
                let node = self.graph.node(*value);
                let regs: Vec<Reg> = node
                    .args
                    .iter()
                    .map(|&a| {
                        let src: Shape = self
                            .graph
                            .ty(a)
                            .as_tensor()
                            .map(|t| t.shape.clone())
                            .unwrap_or_default();
                        let arg = locs[a.index()]
                            .as_ref()
                            .expect("arguments are lowered first");
                        let arg_rows = align(&src, rows);
                        self.read(body, locs, arg, &arg_rows)
                    })
                    .collect();
                self.node(body, *value, &regs, None)
            }
        }
    }

    /// `offset + Σ rows[a] * strides[a]` of a view, emitted in `body`.
    pub(super) fn view_index(
        &mut self,
        body: &mut Vec<Stmt>,
        v: &View,
        rows: &[Option<Reg>],
    ) -> Reg {
        let mut acc = v.offset;
        for (row, stride) in rows.iter().zip(&v.strides) {
            if let (Some(row), Some(stride)) = (row, stride) {
                let term = self.mul(body, *row, *stride);
                acc = Some(self.add_opt(body, acc, term));
            }
        }
        acc.unwrap_or_else(|| self.i64_const(body, 0))
    }

    /// `a * b` of two `i64` registers: the other operand itself when one
    /// is a unit stride (the row itself, not a multiplication per row for
    /// every tier to fold, and the VM to run).
    pub(super) fn mul(&mut self, out: &mut Vec<Stmt>, a: Reg, b: Reg) -> Reg {
        if self.unit_strides.contains(&b) {
            return a;
        }
        if self.unit_strides.contains(&a) {
            return b;
        }
        self.i64_binary(out, BinaryOp::Mul, a, b)
    }

    /// `op(a, b)` of two `i64` registers (index arithmetic).
    pub(super) fn i64_binary(&mut self, out: &mut Vec<Stmt>, op: BinaryOp, a: Reg, b: Reg) -> Reg {
        self.emit(out, DType::I64, Expr::Binary(op, a, b), None)
    }

    /// `acc + term`, or `term` when there is no `acc` yet.
    pub(super) fn add_opt(&mut self, out: &mut Vec<Stmt>, acc: Option<Reg>, term: Reg) -> Reg {
        match acc {
            None => term,
            Some(a) => self.emit(out, DType::I64, Expr::Binary(BinaryOp::Add, a, term), None),
        }
    }

    /// The element dtype of a buffer parameter.
    /// The shape of a scratch buffer.
    pub(super) fn scratch_shape(&self, param: ParamIdx) -> Vec<Dim> {
        match &self.kernel.params[param.index()] {
            Param::Scratch { shape, .. } => shape.clone(),
            _ => unreachable!("a scratch buffer"),
        }
    }

    pub(super) fn param_dtype(&self, param: ParamIdx) -> Option<DType> {
        match &self.kernel.params[param.index()] {
            Param::ArrayIn { dtype, .. }
            | Param::Scratch { dtype, .. }
            | Param::ArrayOut { dtype, .. }
            | Param::ScalarIn { dtype, .. }
            | Param::ScalarOut { dtype, .. } => Some(*dtype),
            Param::ConstIn { tensor, .. } => Some(tensor.dtype),
            Param::BitmapIn { .. } => Some(DType::Bool),
            Param::Extent { .. } | Param::SelectionOut { .. } | Param::SelectionCount { .. } => {
                None
            }
        }
    }

    /// The buffer a node's result is written to: its output parameter when it
    /// is returned (the first time), else the buffer of an output that
    /// returns a reshape of it (which is then that buffer, not a copy),
    /// else a new scratch buffer.
    pub(super) fn dest(&mut self, value: Value, dims: &Shape, claimed: &mut [bool]) -> ParamIdx {
        let own = self.returned[value].iter();
        for &idx in own.chain(&self.reshaped[value]) {
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

    pub(super) fn load(&self, param: ParamIdx, index: Reg) -> Expr {
        match self.kernel.params[param.index()] {
            Param::BitmapIn { .. } => Expr::LoadBit(param, index),
            _ => Expr::Load(param, index),
        }
    }

    pub(super) fn i64_const(&mut self, out: &mut Vec<Stmt>, v: i64) -> Reg {
        self.emit(out, DType::I64, Expr::Const(Scalar::I64(v)), None)
    }

    /// Row-major strides of `dims` as `i64` registers; `None` for an axis of
    /// extent 1 (stride irrelevant: its index is always 0).
    pub(super) fn strides(&mut self, out: &mut Vec<Stmt>, dims: &[Dim]) -> Vec<Option<Reg>> {
        let mut strides = vec![None; dims.len()];
        let mut step: Option<Reg> = None;
        for axis in (0..dims.len()).rev() {
            let stride = match step {
                Some(r) => r,
                None => {
                    let one = self.i64_const(out, 1);
                    self.unit_strides.insert(one);
                    one
                }
            };
            strides[axis] = (dims[axis] != Dim::Fixed(1)).then_some(stride);
            let extent = self.extent(&dims[axis]);
            let n = self.emit(out, DType::I64, Expr::ExtentValue(extent), None);
            step = Some(self.mul(out, stride, n));
        }
        strides
    }

    /// `offset + Σ rows[a] * strides[a]`, emitted in `body`.
    pub(super) fn flat(
        &mut self,
        body: &mut Vec<Stmt>,
        offset: Option<Reg>,
        rows: &[Reg],
        strides: &[Option<Reg>],
    ) -> Reg {
        let mut acc = offset;
        for (&row, stride) in rows.iter().zip(strides) {
            if let Some(stride) = stride {
                let term = self.mul(body, row, *stride);
                acc = Some(self.add_opt(body, acc, term));
            }
        }
        acc.unwrap_or_else(|| self.i64_const(body, 0))
    }

    /// A loop nest over `dims`; `body` gets the index registers and returns
    /// the innermost statements.
    pub(super) fn nest(
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
            inner = vec![Stmt::loop_of(extent, rows[axis], inner)];
        }
        out.extend(inner);
    }
}
