//! Lowering of graphs with tensors (rank ≥ 2, tensor constants, tensor ops,
//! NumPy broadcasting between non-scalar shapes) to loop nests.
//!
//! Each live value gets a [`Loc`]: a scalar register (scalars are computed
//! once, before any loop); a [`View`] of a buffer (a parameter, an offset
//! and one stride per axis, `None` where the index does not move: extent 1
//! or broadcast); or *fused*, computed inside the loop that reads it, where
//! it reads it ([`fusion`] says which). A computed tensor's buffer is
//! its output parameter, else a [`Param::Scratch`] the caller allocates: the
//! kernel never allocates. `transpose`, `slice`, `broadcast_to` and a `reshape` of
//! a dense buffer are new views of the same buffer (index arithmetic, no
//! copy). `matmul` is in [`matmul`]; a matmul whose one use leads to an
//! elementwise node of its shape computes that node as its epilogue, in
//! place. Reductions fold in the order docs/semantics.md gives, so every
//! tier computes the same bits.
//!
//! [`Lowerer::tensor_body`] sends each node to the function for its op: views
//! and loop nests are in [`views`], layout ops in [`layout`], reductions and
//! filters in [`reduce`], matmuls in [`matmul`]. This module decides; the
//! backends only translate the [`crate::Kernel`] it builds.

mod fusion;
mod layout;
mod matmul;
mod reduce;
mod trees;
mod views;
mod window;

use crate::lower::{LowerError, Lowerer};
use crate::{Expr, Param, ParamIdx, Reg, Stmt};
use cranelift_entity::EntityRef;
use fusion::{fused_nodes, Fusion};
use kiln_ir::entities::Value;
use kiln_ir::graph::{Graph, NodeData};
use kiln_ir::op::{BinaryOp, Op, TensorConst};
use kiln_ir::types::{DType, Dim, Shape, Type};
use kiln_ir::verify::GraphInfo;

/// True when a live node needs loop nests: a tensor of rank ≥ 2, a tensor op
/// (but a scalar spread over a column, which each row reads as the scalar:
/// a derivative `1` in a Jacobian), or an elementwise op that broadcasts one
/// non-scalar shape to another.
pub(super) fn needs_loop_nests(graph: &Graph, info: &GraphInfo) -> bool {
    graph.nodes().any(|(value, node)| {
        if !info.is_live(value) {
            return false;
        }
        let rank = node.ty.as_tensor().map_or(0, |t| t.shape.len());
        let tensor_op = node.op.is_tensor_op() && !spreads_a_scalar(graph, node);
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

/// Whether `node` is a `broadcast_to` of a scalar to a column, which the
/// column path lowers as the scalar read in every row.
pub(super) fn spreads_a_scalar(graph: &Graph, node: &NodeData) -> bool {
    matches!(node.op, Op::BroadcastTo(_))
        && node.ty.as_tensor().is_some_and(|t| t.shape.len() == 1)
        && graph
            .ty(node.args[0])
            .as_tensor()
            .is_some_and(|t| t.is_scalar())
}

/// Where a value lives.
#[derive(Clone, Debug)]
enum Loc {
    /// A scalar in a register.
    Scalar(Reg),
    /// A tensor's elements in a parameter's buffer, read through strides.
    View(View),
    /// An elementwise node not stored anywhere: computed where its one
    /// consumer reads it, inside that consumer's loop nest.
    Fused { value: Value, dims: Shape },
}

/// Element `rows` of a tensor of `dims` is
/// `param[offset + Σ rows[a] * strides[a]]`; a `None` stride is an axis the
/// index does not move along (extent 1, or broadcast).
#[derive(Clone, Debug)]
struct View {
    param: ParamIdx,
    dims: Shape,
    offset: Option<Reg>,
    strides: Vec<Option<Reg>>,
    /// The buffer as allocated: row-major, contiguous, from element 0 (so a
    /// `reshape` can alias it).
    dense: bool,
}

/// An elementwise node a matmul computes in its own loop (see
/// [`Fusion::epilogue`]), with the locations to read its arguments from.
#[derive(Copy, Clone)]
struct Epilogue<'l> {
    locs: &'l [Option<Loc>],
    value: Value,
}

/// What lowering a graph to loop nests carries from node to node.
struct Nest {
    /// The statements so far.
    out: Vec<Stmt>,
    /// Where each lowered value lives.
    loc: Vec<Option<Loc>>,
    fusion: Fusion,
    /// Matmuls and convolutions waiting for their epilogue, at the
    /// epilogue's node: their operands and themselves. (All the epilogue's arguments are
    /// lowered only when it is reached.)
    pending: Vec<Option<(View, View, Value)>>,
    /// Output parameters already holding a node's result.
    claimed: Vec<bool>,
}

impl Lowerer<'_> {
    /// Lowers the whole graph as loop nests (see the module docs).
    pub(super) fn tensor_body(&mut self) -> Result<(), LowerError> {
        let n = self.graph.len();
        let mut nest = Nest {
            out: Vec::new(),
            loc: vec![None; n],
            fusion: fused_nodes(self.graph, self.info),
            pending: vec![None; n],
            claimed: vec![false; self.graph.outputs().len()],
        };
        for (value, node) in self.graph.nodes() {
            if let Op::Trees(e) = &node.op {
                if !trees::walk_fits(e) {
                    return Err(LowerError::Unsupported(
                        "a tree ensemble of more than 2^29 nodes and leaves".into(),
                    ));
                }
            }
            if self.info.is_live(value) {
                let here = self.tensor_node(&mut nest, value, node);
                nest.loc[value.index()] = here;
            }
        }
        self.store_outputs(&mut nest);
        self.kernel.body = nest.out;
        self.kernel.direct = false;
        Ok(())
    }

    /// Lowers one node: where its result lives (`None` for a filter, whose
    /// selection is stored as it goes, and a matmul that waits for its
    /// epilogue).
    fn tensor_node(&mut self, st: &mut Nest, value: Value, node: &NodeData) -> Option<Loc> {
        let dims: Shape = node
            .ty
            .as_tensor()
            .map(|t| t.shape.clone())
            .unwrap_or_default();
        let dtype = node.ty.dtype();
        // A matmul waiting for its epilogue has no location yet: only the
        // ops that read an argument ask for it.
        let args: Vec<Option<Loc>> = node
            .args
            .iter()
            .map(|a| st.loc[a.index()].clone())
            .collect();
        let arg = |i: usize| args[i].clone().expect("arguments are lowered first");
        let out = &mut st.out;
        Some(match &node.op {
            Op::Input { .. } if dims.is_empty() => Loc::Scalar(self.node(out, value, &[], None)),
            Op::Input { index } => {
                let param = self.input_params[*index as usize];
                Loc::View(self.dense(out, param, dims))
            }
            Op::Const(_) => Loc::Scalar(self.node(out, value, &[], None)),
            Op::Tensor(t) => self.tensor_const(out, value, t, dims),
            Op::Unary(_)
            | Op::Binary(_)
            | Op::Compare(_)
            | Op::Select
            | Op::Cast(_)
            | Op::IsIn(_) => self.elementwise(st, value, &args, dims),
            Op::Reduce(op) => Loc::Scalar(self.reduce(out, &st.loc, value, *op, &arg(0))),
            Op::Filter => {
                self.filter(out, &st.loc, value, &arg(0));
                return None;
            }
            Op::MatMul => return self.matmul_node(st, value, (arg(0), arg(1)), dims),
            Op::Conv2d(_) | Op::Pool2d(_) => {
                let args: Vec<Loc> = (0..args.len()).map(arg).collect();
                return self.window_node(st, value, &node.op, &args, dims);
            }
            Op::ReduceAxes { op, axes, keepdim } => {
                let dtype = dtype.expect("a tensor");
                let dest = self.dest(value, &dims, &mut st.claimed);
                let d = self.dense(out, dest, dims);
                self.reduce_axes(out, &st.loc, (*op, axes, *keepdim), &arg(0), &d, dtype);
                self.scalar_if_rank0(out, d, dtype)
            }
            // Of a scalar (an empty permutation, shape or range list): itself.
            Op::Transpose(_) | Op::BroadcastTo(_) | Op::Slice(_) if dims.is_empty() => arg(0),
            Op::Transpose(perm) => {
                let v = self.as_view(out, &st.loc, &arg(0), false);
                self.transpose(v, perm, dims)
            }
            Op::Slice(ranges) => {
                let v = self.as_view(out, &st.loc, &arg(0), false);
                self.slice(out, v, ranges, dims)
            }
            Op::BroadcastTo(_) => {
                let dtype = dtype.expect("a tensor");
                self.broadcast_to(out, &st.loc, arg(0), dtype, dims)
            }
            Op::Concat(axis) => {
                let dest = self.dest(value, &dims, &mut st.claimed);
                let d = self.dense(out, dest, dims);
                let parts: Vec<Loc> = (0..args.len()).map(arg).collect();
                self.concat(out, &st.loc, *axis as usize, &parts, &d);
                Loc::View(d)
            }
            Op::Gather(axis) => {
                let dtype = dtype.expect("a tensor");
                let dest = self.dest(value, &dims, &mut st.claimed);
                let d = self.dense(out, dest, dims);
                let (table, index) = (arg(0), arg(1));
                self.gather(out, &st.loc, value, *axis as usize, (&table, &index), &d);
                self.scalar_if_rank0(out, d, dtype)
            }
            Op::IndexAdd(axis) => {
                let dest = self.dest(value, &dims, &mut st.claimed);
                let d = self.dense(out, dest, dims);
                let (base, index, source) = (arg(0), arg(1), arg(2));
                let parts = (&base, &index, &source);
                self.index_add(out, &st.loc, value, *axis as usize, parts, &d);
                Loc::View(d)
            }
            Op::Trees(e) => {
                let dest = self.dest(value, &dims, &mut st.claimed);
                let d = self.dense(out, dest, dims);
                self.trees(out, &st.loc, e, &arg(0), &d);
                Loc::View(d)
            }
            Op::Reshape(_) => {
                let dtype = dtype.expect("a tensor");
                let claimed = &mut st.claimed;
                let shape = dims.clone();
                let dest = |lw: &mut Self| lw.dest(value, &shape, claimed);
                self.reshape(out, &st.loc, arg(0), dtype, dims, dest)
            }
        })
    }

    /// `acc + x * y`, one step of a `matmul`'s or a convolution's sum
    /// (`kiln_ir::semantics::mul_add`): a fused multiply-add of floats
    /// ([`Expr::MulAdd`]), the wrapping product then sum of integers.
    fn mul_add(&mut self, out: &mut Vec<Stmt>, dtype: DType, x: Reg, y: Reg, acc: Reg) -> Reg {
        if dtype.is_float() {
            return self.emit(out, dtype, Expr::MulAdd(x, y, acc), None);
        }
        let p = self.emit(out, dtype, Expr::Binary(BinaryOp::Mul, x, y), None);
        self.emit(out, dtype, Expr::Binary(BinaryOp::Add, acc, p), None)
    }

    /// A constant tensor: a parameter the caller passes (weights).
    fn tensor_const(
        &mut self,
        out: &mut Vec<Stmt>,
        value: Value,
        t: &std::sync::Arc<TensorConst>,
        dims: Shape,
    ) -> Loc {
        let name = self
            .graph
            .source_name(value)
            .map_or_else(|| format!("const_{value}"), str::to_string);
        let param = self.param(Param::ConstIn {
            name,
            tensor: t.clone(),
        });
        let view = self.dense(out, param, dims);
        self.scalar_if_rank0(out, view, t.dtype)
    }

    /// An elementwise node: a scalar computed once; fused (computed where it
    /// is read); a matmul's epilogue, computed in the matmul's loop in place;
    /// or stored to its buffer by a loop nest of its own.
    fn elementwise(
        &mut self,
        st: &mut Nest,
        value: Value,
        args: &[Option<Loc>],
        dims: Shape,
    ) -> Loc {
        let out = &mut st.out;
        if dims.is_empty() {
            let regs: Vec<Reg> = args
                .iter()
                .map(|a| match a {
                    Some(Loc::Scalar(r)) => *r,
                    _ => unreachable!("verified: a scalar op has scalar arguments"),
                })
                .collect();
            return Loc::Scalar(self.node(out, value, &regs, None));
        }
        if st.fusion.fused[value.index()] {
            return Loc::Fused { value, dims };
        }
        let dest = self.dest(value, &dims, &mut st.claimed);
        let view = self.dense(out, dest, dims);
        if let Some((a, b, mm)) = st.pending[value.index()].take() {
            // The matmul (or convolution) computes this node in its loop, in
            // place in this node's buffer.
            st.loc[mm.index()] = Some(Loc::View(view.clone()));
            let epi = Epilogue {
                locs: &st.loc,
                value,
            };
            let dtype = self.graph.ty(value).dtype().expect("a tensor");
            match &self.graph.node(mm).op {
                Op::Conv2d(c) => self.conv2d(out, c, (&a, &b, &view), Some(epi), dtype),
                _ => self.matmul(out, (&a, &b, &view), Some(epi), dtype),
            }
        } else {
            let whole = Loc::Fused {
                value,
                dims: view.dims.clone(),
            };
            self.store_all(out, &st.loc, &whole, &view);
        }
        Loc::View(view)
    }

    /// A matmul: computed now, or (with an epilogue) where its epilogue is.
    fn matmul_node(
        &mut self,
        st: &mut Nest,
        value: Value,
        (x, y): (Loc, Loc),
        dims: Shape,
    ) -> Option<Loc> {
        let dtype = self.graph.ty(value).dtype().expect("a tensor");
        if let Some(loc) = self.matmul_by_transposed_weight(st, value, &x, &dims, dtype) {
            return Some(loc);
        }
        let a = match self.transposed_a_densely(st, value, &dims, dtype) {
            Some(a) => a,
            None => self.as_view(&mut st.out, &st.loc, &x, false),
        };
        let out = &mut st.out;
        let b_dense = !self.packs_b_where_it_is(&dims, &y);
        let b = self.as_view(out, &st.loc, &y, b_dense);
        if let Some(e) = st.fusion.epilogue[value.index()] {
            st.pending[e.index()] = Some((a, b, value));
            return None;
        }
        let dest = self.dest(value, &dims, &mut st.claimed);
        let d = self.dense(out, dest, dims);
        self.matmul(out, (&a, &b, &d), None, dtype);
        Some(self.scalar_if_rank0(out, d, dtype))
    }

    /// Whether a matmul of result `dims` reads a strided `b` (`y`, a view:
    /// `wte.T` in GPT-2's LM head) where it is: wherever the panels of `b`
    /// are packed (copied by `b`'s strides, a column block at a time, once
    /// per group of rows), as they are for more than [`matmul::PANEL_ROWS`]
    /// rows. Copying `b` densely first copies all of it once more: GPT-2's
    /// `[256, 256] @ wte.T` (51 MB) took 73–79 ms so, 54 ms without (eager
    /// 62), and with 4 and 8 groups of rows the copy still lost (`[512,
    /// 256]`: 137 against 106 ms; `[1024, 256]`: 246 against 209). A pack
    /// reads `b` once per 128 rows' multiply-adds.
    fn packs_b_where_it_is(&self, dims: &[Dim], y: &Loc) -> bool {
        let Loc::View(b) = y else { return false };
        self.panels.is_some()
            && b.dims.len() >= 2
            && dims.len() >= 2
            && match dims[dims.len() - 2] {
                // A few rows pack a `b` read across in tiles where the
                // backend transposes them ([`crate::LowerOptions::
                // transpose_tiles`]).
                Dim::Fixed(m) => {
                    m > u64::from(matmul::PANEL_ROWS)
                        || (self.transpose_tiles && self.reads_across(&[], y))
                }
                Dim::Sym(_) => true,
            }
    }

    /// `a` of `a @ b` where it is `src.T` of a dense matrix `src` (`[k,
    /// m]`, both fixed: a `Linear`'s weight gradient `g.T @ x`), copied to
    /// a dense `[m, k]` first ([`Self::transposed_copy`]) where the panels
    /// read it more than once (more than one panel of columns). Read where
    /// it is, each `k` step of a row block loads from another line of
    /// `src`, a row of `src` apart: rows of 1 KiB fall into 4 of an L1's
    /// 64 sets. `[64, 256].T @ [64, 784]` (f32, one Zen 3 thread) ran in
    /// 320–323 µs so against 301 from a dense `a`; the copy costs a few.
    /// `None` where it does not apply (the caller reads `a` as it is).
    fn transposed_a_densely(
        &mut self,
        st: &mut Nest,
        value: Value,
        dims: &Shape,
        dtype: DType,
    ) -> Option<View> {
        let bytes = self.panels?;
        let x_value = self.graph.node(value).args[0];
        let Op::Transpose(perm) = &self.graph.node(x_value).op else {
            return None;
        };
        let src_value = self.graph.node(x_value).args[0];
        let Some(Loc::View(src)) = &st.loc[src_value.index()] else {
            return None;
        };
        let (&[Dim::Fixed(k), Dim::Fixed(m)], &[Dim::Fixed(_), Dim::Fixed(n)]) =
            (src.dims.as_slice(), dims.as_slice())
        else {
            return None;
        };
        let width = u64::from(matmul::panel_width(bytes, dtype));
        if *perm != [1, 0] || !src.dense || m <= u64::from(matmul::PANEL_ROWS) || n <= width {
            return None;
        }
        let src = src.clone();
        Some(self.transposed_copy(&mut st.out, &src, (k, m)))
    }

    /// `x @ w.T` of matrices, `w` `[n, k]` dense (torch's `Linear`, whose
    /// weight is `[out, in]`) and larger than `x`, computed as `(w @ x.T).T`:
    /// the multiply reads `b` densely, so one operand is copied densely
    /// first, and copying `x` (`m × k`) and reading the `n × m` result
    /// through a transposed view moves less than copying `w` (`n × k`).
    /// Each element is the same sum in the same `k` order (`x * w == w *
    /// x`): the same bits. `None` where it does not apply or does not pay
    /// (the caller multiplies as written); the result is a transposed view
    /// (a later elementwise node reads it, no epilogue).
    fn matmul_by_transposed_weight(
        &mut self,
        st: &mut Nest,
        value: Value,
        x: &Loc,
        dims: &Shape,
        dtype: DType,
    ) -> Option<Loc> {
        let y_value = self.graph.node(value).args[1];
        let Op::Transpose(perm) = &self.graph.node(y_value).op else {
            return None;
        };
        let w_value = self.graph.node(y_value).args[0];
        let (Some(Loc::View(w)), Loc::View(_) | Loc::Fused { .. }) = (&st.loc[w_value.index()], x)
        else {
            return None;
        };
        let fixed = |d: &[Dim]| -> Option<Vec<u64>> {
            d.iter()
                .map(|d| match d {
                    Dim::Fixed(n) => Some(*n),
                    Dim::Sym(_) => None,
                })
                .collect()
        };
        let (wd, out) = (fixed(&w.dims)?, fixed(dims)?);
        if *perm != [1, 0] || !w.dense || wd.len() != 2 || out.len() != 2 {
            return None;
        }
        let (n, k, m) = (wd[0], wd[1], out[0]);
        let as_written = match self.panels {
            Some(bytes) if self.transpose_tiles => matmul::rows_by_transposed_tiles(bytes),
            _ => 0,
        };
        if m.saturating_mul(k).saturating_add(m.saturating_mul(n)) >= n.saturating_mul(k)
            || m <= as_written
        {
            return None;
        }
        let w = w.clone();
        let out_stmts = &mut st.out;
        let xv = self.as_view(out_stmts, &st.loc, x, false);
        let xt = self.transposed_copy(out_stmts, &xv, (m, k));
        let scratch = self.param(Param::Scratch {
            dtype,
            shape: vec![Dim::Fixed(n), Dim::Fixed(m)],
        });
        let t = self.dense(out_stmts, scratch, vec![Dim::Fixed(n), Dim::Fixed(m)]);
        self.matmul(out_stmts, (&w, &xt, &t), None, dtype);
        Some(self.transpose(t, &[1, 0], dims.clone()))
    }

    /// Each output not computed in place stored to its parameter.
    fn store_outputs(&mut self, st: &mut Nest) {
        let out = &mut st.out;
        for (idx, output) in self.graph.outputs().iter().enumerate() {
            let param = self.output_params[idx];
            match st.loc[output.value.index()].clone() {
                Some(Loc::Scalar(reg)) => match self.graph.ty(output.value) {
                    Type::Tensor(t) if t.is_scalar() => out.push(Stmt::Store(param, None, reg)),
                    _ => {
                        let zero = self.i64_const(out, 0);
                        out.push(Stmt::Store(param, Some(zero), reg));
                    }
                },
                Some(Loc::View(v)) if !(v.dense && v.param == param) => {
                    let dest = self.dense(out, param, v.dims.clone());
                    self.store_all(out, &st.loc, &Loc::View(v), &dest);
                }
                Some(Loc::Fused { .. }) => unreachable!("returned values are never fused"),
                // Computed in place, or a selection (stored by its filter).
                _ => {}
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use crate::{lower, LowerOptions, Param};
    use kiln_ir::types::Dim;

    /// The shapes of the scratch buffers `src` lowers to (without panels,
    /// which add their own blocks and packed columns).
    pub(crate) fn scratch(src: &str) -> Vec<String> {
        scratch_with(src, &LowerOptions::default())
    }

    /// The shapes of the scratch buffers `src` lowers to with `options`.
    fn scratch_with(src: &str, options: &LowerOptions) -> Vec<String> {
        let graph = kiln_ir::text::parse(src).expect("the test graph parses");
        let graph = kiln_ir::verify(graph).expect("the test graph verifies");
        let kernel = lower(&graph, options).expect("lowers");
        kernel
            .params
            .iter()
            .filter_map(|p| match p {
                Param::Scratch { dtype, shape } => {
                    let dims: Vec<String> = shape.iter().map(Dim::to_string).collect();
                    Some(format!("{dtype}[{}]", dims.join(", ")))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_transposed_b_is_packed_where_it_is() {
        // `x @ w.T` with `w` `[100, 32]`, not worth `(w @ x.T).T` (its
        // result is larger than `w`): `w.T`'s panels are packed by its
        // strides, never copied densely first; without panels (the VM's
        // rows, which read `b` a row at a time), it is copied.
        let panels = LowerOptions {
            panels: Some(64),
            ..LowerOptions::default()
        };
        let mm = |m: u64| {
            format!(
                "v0: f32[{m}, 32] = input \"x\"\nv1: f32[100, 32] = input \"w\"\n\
                 v2: f32[32, 100] = transpose v1 [1, 0]\n\
                 v3: f32[{m}, 100] = matmul v0, v2\noutput \"y\" = v3\n"
            )
        };
        let copied = |src: &str, options: &LowerOptions| {
            scratch_with(src, options)
                .iter()
                .any(|s| s == "f32[32, 100]")
        };
        assert!(!copied(&mm(64), &panels));
        assert!(copied(&mm(64), &LowerOptions::default()));
    }

    #[test]
    fn a_transposed_a_is_copied_densely_where_panels_read_it_more_than_once() {
        // `g.T @ x` with 64-byte panels (16 `f32` columns): `g.T` copied to
        // a dense `[12, 8]` where the product spans more than one panel and
        // more than one block of 4 rows; read where it is otherwise, and
        // without panels.
        let panels = LowerOptions {
            panels: Some(64),
            ..LowerOptions::default()
        };
        let mm = |m: u64, n: u64| {
            format!(
                "v0: f32[8, {m}] = input \"g\"\nv1: f32[8, {n}] = input \"x\"\n\
                 v2: f32[{m}, 8] = transpose v0 [1, 0]\n\
                 v3: f32[{m}, {n}] = matmul v2, v1\noutput \"y\" = v3\n"
            )
        };
        let copied = |src: &str, options: &LowerOptions, m: u64| {
            scratch_with(src, options)
                .iter()
                .any(|s| *s == format!("f32[{m}, 8]"))
        };
        assert!(copied(&mm(12, 40), &panels, 12));
        assert!(!copied(&mm(12, 16), &panels, 12));
        assert!(!copied(&mm(4, 40), &panels, 4));
        assert!(!copied(&mm(12, 40), &LowerOptions::default(), 12));
    }

    #[test]
    fn a_few_rows_stream_a_large_dense_b() {
        // 1 to 4 rows by a dense `b` past 1 MiB: `b` read where it is, in
        // blocks of 16 `k` steps (a loop of 16 around each panel's
        // columns), 8 where `b`'s rows are 12 KiB apart (one L1 set); not
        // for 5 rows (packed), a `b` of 768 KiB, or `k` not a multiple of
        // 8.
        let panels = LowerOptions {
            panels: Some(64),
            ..LowerOptions::default()
        };
        let streams = |m: u64, k: u64, n: u64, steps: u64| {
            let src = format!(
                "v0: f32[{m}, {k}] = input \"x\"\nv1: f32[{k}, {n}] = input \"w\"\n\
                 v2: f32[{m}, {n}] = matmul v0, v1\noutput \"y\" = v2\n"
            );
            let graph =
                kiln_ir::verify(kiln_ir::text::parse(&src).expect("parses")).expect("verifies");
            let text = crate::print(&lower(&graph, &panels).expect("lowers"));
            text.contains(&format!("in 0..{steps} sequential"))
        };
        for m in 1..=4 {
            assert!(streams(m, 768, 3072, 8), "{m} rows");
            assert!(streams(m, 768, 2304, 16), "{m} rows");
        }
        assert!(!streams(1, 768, 3072, 16));
        assert!(!streams(5, 768, 3072, 8));
        assert!(!streams(1, 768, 256, 8));
        assert!(!streams(1, 1100, 3072, 8));
    }

    #[test]
    fn a_dense_b_one_panel_wide_is_read_in_place() {
        // AVX-512's panels: 64 f32 columns, in `k` blocks of 128 steps.
        let panels = LowerOptions {
            panels: Some(256),
            ..LowerOptions::default()
        };
        let mm = |n: u64| {
            format!(
                "v0: f32[70, 300] = input \"x\"\nv1: f32[300, {n}] = input \"w\"\n\
                 v2: f32[70, {n}] = matmul v0, v1\noutput \"y\" = v2\n"
            )
        };
        // `w` is the panel: only the four rows' sums.
        assert_eq!(scratch_with(&mm(64), &panels), ["f32[64]"; 4]);
        // Two column blocks: each packed, 128 steps at a time.
        let two = scratch_with(&mm(128), &panels);
        assert!(two.contains(&"f32[128, 64]".to_string()), "{two:?}");
        // A batch-64 `Linear` of torch's `[out, in]` weight, `(w @ x.T).T`:
        // the dense copy of `x.T` is the panel, not copied again.
        let linear = "v0: f32[64, 784] = input \"x\"\nv1: f32[256, 784] = input \"w\"\n\
                      v2: f32[784, 256] = transpose v1 [1, 0]\n\
                      v3: f32[64, 256] = matmul v0, v2\noutput \"y\" = v3\n";
        let got = scratch_with(linear, &panels);
        assert!(got.contains(&"f32[784, 64]".to_string()), "{got:?}");
        assert!(!got.contains(&"f32[128, 64]".to_string()), "{got:?}");
    }

    #[test]
    fn relu_of_a_linear_layer_is_its_epilogue() {
        let linear = "v0: f32[4, 3] = input \"x\"\n\
                      v1: f32[3, 5] = input \"w\"\n\
                      v2: f32[5] = input \"b\"\n\
                      v3: f32[4, 5] = matmul v0, v1\n\
                      v4: f32[4, 5] = add v3, v2\n\
                      v5: f32 = const 0.0\n\
                      v6: bool[4, 5] = lt v4, v5\n\
                      v7: f32[4, 5] = select v6, v5, v4\n\
                      output \"y\" = v7\n";
        assert_eq!(scratch(linear), Vec::<String>::new());
        // A second layer reads the first's activations: one buffer.
        let mlp = format!(
            "{}v8: f32[5, 2] = input \"w2\"\nv9: f32[4, 2] = matmul v7, v8\noutput \"z\" = v9\n",
            linear.replace("output \"y\" = v7\n", "")
        );
        assert_eq!(scratch(&mlp), ["f32[4, 5]"]);
    }

    #[test]
    fn a_value_returned_as_a_reshape_is_stored_in_that_output() {
        // The activations feed the next layer and are returned reshaped
        // (aot_autograd saves a `view` of them for the backward): they are
        // written once, into the returned reshape's buffer, not to scratch
        // and copied out.
        let mlp = "v0: f32[4, 3] = input \"x\"\n\
                   v1: f32[3, 6] = input \"w\"\n\
                   v2: f32[4, 6] = matmul v0, v1\n\
                   v3: f32[4, 6] = tanh v2\n\
                   v4: f32[6, 2] = input \"w2\"\n\
                   v5: f32[4, 2] = matmul v3, v4\n\
                   v6: f32[2, 2, 6] = reshape v3\n\
                   v7: f32[24] = reshape v6\n\
                   output \"y\" = v5\n\
                   output \"saved\" = v7\n";
        assert_eq!(scratch(mlp), Vec::<String>::new());
        // Returned twice so: one output holds it, the other is a copy.
        let twice = format!("{mlp}v8: f32[6, 4] = reshape v3\noutput \"again\" = v8\n");
        assert_eq!(scratch(&twice), Vec::<String>::new());
        // Returned itself too: its own output holds it.
        let own = format!("{mlp}output \"h\" = v3\n");
        assert_eq!(scratch(&own), Vec::<String>::new());
    }

    /// The scratch buffers of `src` that hold a whole `[4, 1000]` tensor.
    fn whole_scratch(src: &str) -> usize {
        scratch(src)
            .iter()
            .filter(|s| *s == "f32[4, 1000]" || *s == "f32[4000]")
            .count()
    }

    #[test]
    fn a_cheap_node_read_in_two_loops_is_computed_in_each() {
        // `log_softmax`: `x - max` is read by `exp` (stored for the `sum`)
        // and by the result. It is computed in both loops, not stored by a
        // loop of its own: one whole scratch (the `exp`), not two.
        let log_softmax = "v0: f32[4, 1000] = input \"x\"\n\
                           v1: f32[4, 1] = reduce_axes v0 [1] reduce_max keepdim\n\
                           v2: f32[4, 1000] = sub v0, v1\n\
                           v3: f32[4, 1000] = exp v2\n\
                           v4: f32[4, 1] = reduce_axes v3 [1] sum keepdim\n\
                           v5: f32[4, 1] = log v4\n\
                           v6: f32[4, 1000] = sub v2, v5\n\
                           output \"y\" = v6\n";
        assert_eq!(whole_scratch(log_softmax), 1);
        // Of two whole arguments (`x + z`) it is stored: each loop would read
        // both where it reads the one stored.
        let two = "v0: f32[4, 1000] = input \"x\"\n\
                   v1: f32[4, 1000] = input \"z\"\n\
                   v2: f32[4, 1] = reduce_axes v0 [1] reduce_max keepdim\n\
                   v3: f32[4, 1000] = add v0, v1\n\
                   v4: f32[4, 1000] = exp v3\n\
                   v5: f32[4, 1] = reduce_axes v4 [1] sum keepdim\n\
                   v6: f32[4, 1] = log v5\n\
                   v7: f32[4, 1000] = sub v3, v6\n\
                   output \"y\" = v7\n";
        assert_eq!(whole_scratch(two), 2);
        // A costly node read in two loops is stored; a cheap one in its
        // place is computed in each.
        let read_twice = |op: &str| {
            format!(
                "v0: f32[4, 1000] = input \"x\"\n\
                 v1: f32[4, 1000] = {op} v0\n\
                 v2: f32[4, 1000] = sqrt v1\n\
                 v3: f32[4, 1] = reduce_axes v2 [1] sum keepdim\n\
                 v4: f32[4, 1000] = mul v1, v3\n\
                 output \"y\" = v4\n"
            )
        };
        assert_eq!(whole_scratch(&read_twice("exp")), 2);
        assert_eq!(whole_scratch(&read_twice("neg")), 1);
    }

    #[test]
    fn a_scalar_spread_over_a_column_keeps_the_column_path() {
        // A Jacobian's `d(x + c)/dc` is `1` spread over the rows: it is the
        // scalar in every row of the one loop that computes the rest, not
        // a loop nest of its own (and the rest's nodes stored for it).
        let src = "v0: f64[n] = input \"x\"\n\
                   v1: f64 = input \"c\"\n\
                   v2: f64[n] = add v0, v1\n\
                   v3: f64[n] = sqrt v2\n\
                   v4: f64 = const 1.0\n\
                   v5: f64[n] = broadcast_to v4\n\
                   v6: f64[n] = div v5, v3\n\
                   output \"y\" = v3\n\
                   output \"dy\" = v6\n\
                   output \"ones\" = v5\n";
        let graph = kiln_ir::verify(kiln_ir::text::parse(src).expect("parses")).expect("verifies");
        let kernel = lower(&graph, &LowerOptions::default()).expect("lowers");
        let loops = kernel
            .body
            .iter()
            .filter(|s| matches!(s, crate::Stmt::Loop { .. }))
            .count();
        assert_eq!(loops, 1, "{}", crate::print(&kernel));
        assert!(!kernel
            .params
            .iter()
            .any(|p| matches!(p, Param::Scratch { .. })));
        // Spread to a matrix, it is a tensor op as before.
        let matrix = "v0: f64 = const 1.0\n\
                      v1: f64[2, 3] = broadcast_to v0\n\
                      v2: f64[2, 3] = input \"x\"\n\
                      v3: f64[2, 3] = add v1, v2\n\
                      output \"y\" = v3\n";
        let graph =
            kiln_ir::verify(kiln_ir::text::parse(matrix).expect("parses")).expect("verifies");
        assert!(super::needs_loop_nests(graph.graph(), graph.info()));
    }

    #[test]
    fn batch_norm_and_relu_of_a_convolution_are_its_epilogue() {
        let block = "v0: f32[1, 2, 5, 5] = input \"x\"\n\
                     v1: f32[4, 2, 3, 3] = input \"w\"\n\
                     v2: f32[4, 1, 1] = input \"shift\"\n\
                     v3: f32[1, 4, 5, 5] = conv2d v0, v1 pad [1, 1, 1, 1]\n\
                     v4: f32[1, 4, 5, 5] = add v3, v2\n\
                     v5: f32 = const 0.0\n\
                     v6: f32[1, 4, 5, 5] = max v4, v5\n\
                     output \"y\" = v6\n";
        // The padded input and four accumulator planes; the convolution,
        // the shift and the ReLU write the output once.
        let inner = [
            "f32[1, 2, 10, 7]",
            "f32[48]",
            "f32[48]",
            "f32[48]",
            "f32[48]",
        ];
        assert_eq!(scratch(block), inner);
        // Returned, the convolution is stored on its own.
        let both = block.replace("output \"y\" = v6", "output \"y\" = v6\noutput \"c\" = v3");
        assert_eq!(scratch(&both), inner);
        let mut twice = block.replace("output \"y\" = v6\n", "");
        twice.push_str("v7: f32[1, 4, 5, 5] = mul v3, v3\nv8: f32[1, 4, 5, 5] = sub v6, v7\noutput \"y\" = v8\n");
        assert_eq!(
            scratch(&twice).len(),
            inner.len() + 1,
            "{:?}",
            scratch(&twice)
        );
    }

    #[test]
    fn only_cheap_nodes_are_computed_more_than_once() {
        let src = "v0: f32[2, 2] = input \"x\"\n\
                   v1: f32[2, 2] = sqrt v0\n\
                   v2: f32[2, 2] = add v1, v1\n\
                   v3: f32 = const 1.0\n\
                   v4: f32[2, 2] = sub v0, v3\n\
                   v5: f32[2, 2] = mul v4, v4\n\
                   v6: i64[n, 2] = input \"k\"\n\
                   v7: i64[n, 2] = div v6, v6\n\
                   v8: i64[n, 2] = add v7, v7\n\
                   output \"roots\" = v2\n\
                   output \"square\" = v5\n\
                   output \"ones\" = v8\n";
        // `sqrt` and the division are stored once; `sub` is read twice.
        assert_eq!(scratch(src), ["f32[2, 2]", "i64[n, 2]"]);
        // A cheap node read five times per element is stored too.
        let mut five = String::from("v0: f32[2, 2] = input \"x\"\nv1: f32[2, 2] = neg v0\n");
        five.push_str("v2: f32[2, 2] = add v1, v1\n");
        for idx in 3..6 {
            five.push_str(&format!("v{idx}: f32[2, 2] = add v{}, v1\n", idx - 1));
        }
        five.push_str("output \"y\" = v5\n");
        assert_eq!(scratch(&five), ["f32[2, 2]"]);
        let four = five.replace("output \"y\" = v5", "output \"y\" = v4");
        assert_eq!(scratch(&four), Vec::<String>::new());
    }
}
