//! Lowering of graphs with tensors (rank ≥ 2, tensor constants, tensor ops,
//! NumPy broadcasting between non-scalar shapes) to loop nests.
//!
//! Each live value gets a [`Loc`]: a scalar register (scalars are computed
//! once, before any loop); a [`View`] of a buffer (a parameter, an offset
//! and one stride per axis, `None` where the index does not move: extent 1
//! or broadcast); or *fused*, computed inside the loop that reads it, where
//! it reads it ([`fused_nodes`] says which). A computed tensor's buffer is
//! its output parameter, else a [`Param::Scratch`] the caller allocates: the
//! kernel never allocates. `transpose`, `slice`, `broadcast_to` and a `reshape` of
//! a dense buffer are new views of the same buffer (index arithmetic, no
//! copy). `matmul` is in [`matmul`]; a matmul whose one use leads to an
//! elementwise node of its shape computes that node as its epilogue, in
//! place. Reductions fold in the order docs/semantics.md gives, so every
//! tier computes the same bits.
//!
//! This module decides; the backends only translate the [`super::Kernel`]
//! it builds.

mod matmul;

use super::lower::{step_op, LowerError, Lowerer};
use super::{Expr, Param, ParamIdx, Reg, Stmt};
use crate::entities::Value;
use crate::graph::{Graph, NodeData};
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
        let tensor_op = node.op.is_tensor_op();
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

/// How deep a chain of fused elementwise nodes may get before one is
/// stored: reading a fused node recurses through its fused arguments, so the
/// bound keeps lowering's stack small for any graph.
const MAX_FUSED_DEPTH: u32 = 32;

/// How many times a root may compute one fused node per element (through
/// several uses): more, and the node is stored once instead.
const MAX_RECOMPUTE: u32 = 4;

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

/// Which elementwise nodes are fused into their consumer (computed where it
/// reads them, not stored), and which matmuls compute an epilogue.
///
/// A non-scalar elementwise node that is not returned is fused when:
/// - it has one use, by a consumer that reads each of its elements exactly
///   once (an elementwise node of the same shape, a reduction other than
///   `count`, a filter, a `concat`), so nothing is skipped (a skipped
///   division could not fail); or
/// - all its uses are elementwise nodes of its shape that are computed in
///   one loop (fused into one root, or the root itself), and it is cheap
///   ([`cheap`]): the root then computes it once per read, as `relu(y)`
///   reads `y` twice in `select(y < 0, 0, y)`.
///
/// A root computes a fused node at most [`MAX_RECOMPUTE`] times per element
/// (only cheap nodes more than once), and reading it recurses at most
/// [`MAX_FUSED_DEPTH`] deep. Nodes are decided users first (backwards), so
/// each node knows the loop its users are computed in.
fn fused_nodes(graph: &Graph, info: &GraphInfo) -> Fusion {
    let n_nodes = graph.len();
    // Each use once per argument slot (`mul(x, x)` uses `x` twice).
    let mut users: Vec<Vec<Value>> = vec![Vec::new(); n_nodes];
    for (value, node) in graph.nodes() {
        if info.is_live(value) {
            for a in &node.args {
                users[a.index()].push(value);
            }
        }
    }
    let mut returned = vec![false; n_nodes];
    for o in graph.outputs() {
        returned[o.value.index()] = true;
    }
    let mut fused = vec![false; n_nodes];
    // For a fused node: the node whose loop computes it, how many times per
    // element, and how deep below that root it is read.
    let mut root: Vec<Option<Value>> = vec![None; n_nodes];
    let mut paths = vec![1u32; n_nodes];
    let mut depth = vec![0u32; n_nodes];
    let nodes: Vec<(Value, &NodeData)> = graph.nodes().collect();
    for &(value, node) in nodes.iter().rev() {
        let (idx, rank) = (
            value.index(),
            node.ty.as_tensor().map_or(0, |t| t.shape.len()),
        );
        let uses = &users[idx];
        if !elementwise(&node.op) || rank == 0 || returned[idx] || uses.is_empty() {
            continue;
        }
        // The loop each use is computed in, times, depth.
        let loop_of = |u: Value| {
            (
                root[u.index()].unwrap_or(u),
                paths[u.index()],
                depth[u.index()],
            )
        };
        let same_shape = |u: Value| {
            graph.node(u).ty.as_tensor().map(|t| &t.shape) == node.ty.as_tensor().map(|t| &t.shape)
        };
        let candidate = if let [consumer] = uses.as_slice() {
            let c = graph.node(*consumer);
            let reads_once = match &c.op {
                op if elementwise(op) => same_shape(*consumer),
                // `count` reads no element: a division there would never run.
                Op::Reduce(ReduceOp::Count)
                | Op::ReduceAxes {
                    op: ReduceOp::Count,
                    ..
                } => false,
                Op::Reduce(_) | Op::Filter | Op::ReduceAxes { .. } | Op::Concat(_) => true,
                _ => false,
            };
            reads_once.then(|| loop_of(*consumer))
        } else {
            let all_elementwise = uses
                .iter()
                .all(|&u| elementwise(&graph.node(u).op) && same_shape(u));
            let first = loop_of(uses[0]).0;
            (all_elementwise && uses.iter().all(|&u| loop_of(u).0 == first)).then(|| {
                uses.iter()
                    .map(|&u| loop_of(u))
                    .fold((first, 0u32, 0u32), |(r, p, d), (_, up, ud)| {
                        (r, p.saturating_add(up), d.max(ud))
                    })
            })
        };
        let Some((r, p, d)) = candidate else {
            continue;
        };
        let d = d + 1;
        if d <= MAX_FUSED_DEPTH && p <= MAX_RECOMPUTE && (p == 1 || cheap(&node.op)) {
            fused[idx] = true;
            root[idx] = Some(r);
            paths[idx] = p;
            depth[idx] = d;
        }
    }
    // A matmul whose one use is computed in the loop of an elementwise node
    // of its shape and dtype: that node is its epilogue.
    let mut epilogue = vec![None; n_nodes];
    for &(value, node) in &nodes {
        let b_mat = node
            .args
            .get(1)
            .and_then(|&b| graph.ty(b).as_tensor())
            .is_some_and(|t| t.shape.len() >= 2);
        let [user] = users[value.index()].as_slice() else {
            continue;
        };
        if node.op != Op::MatMul || !b_mat || returned[value.index()] {
            continue;
        }
        let r = root[user.index()].unwrap_or(*user);
        let e = graph.node(r);
        epilogue[value.index()] =
            (elementwise(&e.op) && !fused[r.index()] && e.ty == node.ty).then_some(r);
    }
    Fusion { fused, epilogue }
}

/// The ops [`fused_nodes`] fuses.
fn elementwise(op: &Op) -> bool {
    matches!(
        op,
        Op::Unary(_) | Op::Binary(_) | Op::Compare(_) | Op::Select | Op::Cast(_)
    )
}

/// Elementwise ops cheap enough to compute more than once per element
/// rather than store and load: a few instructions, no division, no call.
fn cheap(op: &Op) -> bool {
    use crate::op::{BinaryOp as B, UnaryOp as U};
    match op {
        Op::Unary(u) => matches!(u, U::Neg | U::Abs | U::Not | U::BNot),
        Op::Binary(b) => matches!(
            b,
            B::Add
                | B::Sub
                | B::Mul
                | B::Min
                | B::Max
                | B::And
                | B::Or
                | B::Xor
                | B::BAnd
                | B::BOr
                | B::BXor
        ),
        Op::Compare(_) | Op::Select | Op::Cast(_) => true,
        _ => false,
    }
}

/// What [`fused_nodes`] decides.
struct Fusion {
    /// The elementwise nodes computed inside their consumer's loop.
    fused: Vec<bool>,
    /// For a matmul, the elementwise node (the root of a fused chain reading
    /// it) computed in the matmul's own loop, row by row (or tile by tile),
    /// in place in one buffer: a Linear layer's bias and activation.
    epilogue: Vec<Option<Value>>,
}

/// The rows of an argument of `src` dims read at `rows` of a result of
/// `rows.len()` axes, NumPy-aligned: trailing axes match, an axis of extent
/// 1 reads index 0 (`None`).
fn align(src: &[Dim], rows: &[Option<Reg>]) -> Vec<Option<Reg>> {
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

impl Lowerer<'_> {
    /// Lowers the whole graph as loop nests (see the module docs).
    pub(super) fn tensor_body(&mut self) -> Result<(), LowerError> {
        let mut out: Vec<Stmt> = Vec::new();
        let mut loc: Vec<Option<Loc>> = vec![None; self.graph.len()];
        let Fusion { fused, epilogue } = fused_nodes(self.graph, self.info);
        // Matmuls waiting for their epilogue: its arguments are all lowered
        // only when it is reached. The matmul's operands and itself.
        let mut pending: Vec<Option<(View, View, Value)>> = vec![None; self.graph.len()];
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
                        Some(Loc::View(self.dense(&mut out, param, dims)))
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
                    let view = self.dense(&mut out, param, dims);
                    Some(self.scalar_if_rank0(&mut out, view, t.dtype))
                }
                Op::Unary(_) | Op::Binary(_) | Op::Compare(_) | Op::Select | Op::Cast(_) => {
                    if dims.is_empty() {
                        let regs: Vec<Reg> = node
                            .args
                            .iter()
                            .map(|&a| match arg(a) {
                                Loc::Scalar(r) => r,
                                _ => unreachable!("verified: a scalar op has scalar arguments"),
                            })
                            .collect();
                        Some(Loc::Scalar(self.node(&mut out, value, &regs, None)))
                    } else if fused[value.index()] {
                        Some(Loc::Fused { value, dims })
                    } else if let Some((a, b, mm)) = pending[value.index()].take() {
                        // The matmul computes this node in its loop, in place
                        // in this node's buffer.
                        let dest = self.dest(value, &dims, &mut claimed);
                        let d = self.dense(&mut out, dest, dims);
                        loc[mm.index()] = Some(Loc::View(d.clone()));
                        let epi = Epilogue { locs: &loc, value };
                        let dtype = dtype.expect("a tensor");
                        self.matmul(&mut out, (&a, &b, &d), Some(epi), dtype);
                        Some(Loc::View(d))
                    } else {
                        let dest = self.dest(value, &dims, &mut claimed);
                        let view = self.dense(&mut out, dest, dims);
                        let whole = Loc::Fused {
                            value,
                            dims: view.dims.clone(),
                        };
                        self.store_all(&mut out, &loc, &whole, &view);
                        Some(Loc::View(view))
                    }
                }
                Op::Reduce(op) => {
                    let col = arg(node.args[0]);
                    Some(Loc::Scalar(self.reduce(&mut out, &loc, value, *op, &col)))
                }
                Op::Filter => {
                    let col = arg(node.args[0]);
                    self.filter(&mut out, &loc, value, &col);
                    None
                }
                Op::MatMul => {
                    let dtype = dtype.expect("a tensor");
                    let a = self.as_view(&mut out, &loc, &arg(node.args[0]), false);
                    let b = self.as_view(&mut out, &loc, &arg(node.args[1]), true);
                    if let Some(e) = epilogue[value.index()] {
                        // Computed where its epilogue is (below).
                        pending[e.index()] = Some((a, b, value));
                        None
                    } else {
                        let dest = self.dest(value, &dims, &mut claimed);
                        let d = self.dense(&mut out, dest, dims);
                        self.matmul(&mut out, (&a, &b, &d), None, dtype);
                        Some(self.scalar_if_rank0(&mut out, d, dtype))
                    }
                }
                Op::ReduceAxes { op, axes, keepdim } => {
                    let dtype = dtype.expect("a tensor");
                    let src = arg(node.args[0]);
                    let dest = self.dest(value, &dims, &mut claimed);
                    let d = self.dense(&mut out, dest, dims);
                    self.reduce_axes(&mut out, &loc, (*op, axes, *keepdim), &src, &d, dtype);
                    Some(self.scalar_if_rank0(&mut out, d, dtype))
                }
                // Of a scalar (an empty permutation, shape or range list):
                // itself.
                Op::Transpose(_) | Op::BroadcastTo(_) | Op::Slice(_) if dims.is_empty() => {
                    Some(arg(node.args[0]))
                }
                Op::Transpose(perm) => {
                    let mut v = self.as_view(&mut out, &loc, &arg(node.args[0]), false);
                    v.strides = perm.iter().map(|&p| v.strides[p as usize]).collect();
                    v.dims = dims;
                    v.dense = v.dense && perm.iter().enumerate().all(|(i, &p)| i == p as usize);
                    Some(Loc::View(v))
                }
                Op::Slice(ranges) => {
                    let mut v = self.as_view(&mut out, &loc, &arg(node.args[0]), false);
                    let mut offset = v.offset;
                    for (axis, range) in ranges.iter().enumerate() {
                        let (Some(r), Some(stride)) = (range, v.strides[axis]) else {
                            continue;
                        };
                        if r.start > 0 {
                            let start = self.i64_const(&mut out, r.start as i64);
                            let by = self.mul(&mut out, start, stride);
                            offset = Some(self.add_opt(&mut out, offset, by));
                        }
                        if r.step > 1 {
                            let step = self.i64_const(&mut out, r.step as i64);
                            v.strides[axis] = Some(self.mul(&mut out, stride, step));
                        }
                    }
                    let whole = ranges
                        .iter()
                        .zip(&v.dims)
                        .all(|(r, d)| r.is_none_or(|r| Dim::Fixed(r.len()) == *d));
                    v.dense = v.dense && whole;
                    v.offset = offset;
                    v.dims = dims;
                    Some(Loc::View(v))
                }
                Op::BroadcastTo(_) => {
                    let v = match arg(node.args[0]) {
                        // A scalar gets a one-element buffer to repeat.
                        Loc::Scalar(reg) => {
                            let d = dtype.expect("a tensor");
                            let param = self.param(Param::Scratch {
                                dtype: d,
                                shape: Vec::new(),
                            });
                            let zero = self.i64_const(&mut out, 0);
                            out.push(Stmt::Store(param, Some(zero), reg));
                            View {
                                param,
                                dims: Vec::new(),
                                offset: None,
                                strides: Vec::new(),
                                dense: true,
                            }
                        }
                        a => self.as_view(&mut out, &loc, &a, false),
                    };
                    let lead = dims.len() - v.dims.len();
                    let strides = (0..dims.len())
                        .map(|axis| match axis.checked_sub(lead) {
                            Some(a) if v.dims[a] != Dim::Fixed(1) => v.strides[a],
                            _ => None,
                        })
                        .collect();
                    Some(Loc::View(View {
                        dense: v.dense && v.dims == dims,
                        dims,
                        strides,
                        ..v
                    }))
                }
                Op::Concat(axis) => {
                    let dest = self.dest(value, &dims, &mut claimed);
                    let d = self.dense(&mut out, dest, dims);
                    let args: Vec<Loc> = node.args.iter().map(|&a| arg(a)).collect();
                    self.concat(&mut out, &loc, *axis as usize, &args, &d);
                    Some(Loc::View(d))
                }
                Op::Reshape(_) => {
                    let d = dtype.expect("a tensor");
                    match arg(node.args[0]) {
                        Loc::Scalar(reg) if dims.is_empty() => Some(Loc::Scalar(reg)),
                        Loc::Scalar(reg) => {
                            let dest = self.dest(value, &dims, &mut claimed);
                            let zero = self.i64_const(&mut out, 0);
                            out.push(Stmt::Store(dest, Some(zero), reg));
                            Some(Loc::View(self.dense(&mut out, dest, dims)))
                        }
                        // The elements keep their row-major order: a dense
                        // buffer is aliased, anything else stored densely
                        // first.
                        a => {
                            let v = self.as_view(&mut out, &loc, &a, true);
                            let view = self.dense(&mut out, v.param, dims);
                            Some(self.scalar_if_rank0(&mut out, view, d))
                        }
                    }
                }
            };
            loc[value.index()] = here;
        }
        for (idx, output) in self.graph.outputs().iter().enumerate() {
            let param = self.output_params[idx];
            match loc[output.value.index()].clone() {
                Some(Loc::Scalar(reg)) => match self.graph.ty(output.value) {
                    Type::Tensor(t) if t.is_scalar() => out.push(Stmt::Store(param, None, reg)),
                    _ => {
                        let zero = self.i64_const(&mut out, 0);
                        out.push(Stmt::Store(param, Some(zero), reg));
                    }
                },
                Some(Loc::View(v)) if !(v.dense && v.param == param) => {
                    let dest = self.dense(&mut out, param, v.dims.clone());
                    self.store_all(&mut out, &loc, &Loc::View(v), &dest);
                }
                Some(Loc::Fused { .. }) => unreachable!("returned values are never fused"),
                // Computed in place, or a selection (stored by its filter).
                _ => {}
            }
        }
        self.kernel.body = out;
        self.kernel.direct = false;
        Ok(())
    }

    /// A dense view of `param` holding a tensor of `dims`.
    fn dense(&mut self, out: &mut Vec<Stmt>, param: ParamIdx, dims: Shape) -> View {
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
    fn scalar_if_rank0(&mut self, out: &mut Vec<Stmt>, v: View, dtype: DType) -> Loc {
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
    fn as_view(
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

    /// `dest[rows] = loc[rows]` over all of `dest`'s dims.
    fn store_all(&mut self, out: &mut Vec<Stmt>, locs: &[Option<Loc>], loc: &Loc, dest: &View) {
        let dims = dest.dims.clone();
        self.nest(out, &dims, |lw, body, rows| {
            let rows: Vec<Option<Reg>> = rows.iter().copied().map(Some).collect();
            let x = lw.read(body, locs, loc, &rows);
            let to = lw.view_index(body, dest, &rows);
            body.push(Stmt::Store(dest.param, Some(to), x));
        });
    }

    /// The element of `loc` at `rows` (one per axis of `loc`; `None` is
    /// index 0), emitted in `body`. A fused node is computed here from its
    /// arguments, each read at the rows it broadcasts from.
    fn read(
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
    fn view_index(&mut self, body: &mut Vec<Stmt>, v: &View, rows: &[Option<Reg>]) -> Reg {
        let mut acc = v.offset;
        for (row, stride) in rows.iter().zip(&v.strides) {
            if let (Some(row), Some(stride)) = (row, stride) {
                let term = self.mul(body, *row, *stride);
                acc = Some(self.add_opt(body, acc, term));
            }
        }
        acc.unwrap_or_else(|| self.i64_const(body, 0))
    }

    fn mul(&mut self, out: &mut Vec<Stmt>, a: Reg, b: Reg) -> Reg {
        self.emit(out, DType::I64, Expr::Binary(BinaryOp::Mul, a, b), None)
    }

    /// `acc + term`, or `term` when there is no `acc` yet.
    fn add_opt(&mut self, out: &mut Vec<Stmt>, acc: Option<Reg>, term: Reg) -> Reg {
        match acc {
            None => term,
            Some(a) => self.emit(out, DType::I64, Expr::Binary(BinaryOp::Add, a, term), None),
        }
    }

    /// The element dtype of a buffer parameter.
    fn param_dtype(&self, param: ParamIdx) -> Option<DType> {
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

    /// `dest = concat(args)` along `axis`: each argument copied to its
    /// place, read once.
    fn concat(
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
        match self.kernel.params[param.index()] {
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

    /// `offset + Σ rows[a] * strides[a]`, emitted in `body`.
    fn flat(
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

    fn reduce(
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

    fn filter(&mut self, out: &mut Vec<Stmt>, locs: &[Option<Loc>], value: Value, col: &Loc) {
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
    fn reduce_axes(
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
                let src_rows: Vec<Option<Reg>> = src_rows.into_iter().map(Some).collect();
                let x = lw.read(ib, locs, src, &src_rows);
                let acc = lw.emit(ib, in_dtype, Expr::Var(var), None);
                let next = lw.emit(ib, in_dtype, Expr::Binary(step, acc, x), None);
                ib.push(Stmt::Set(var, next));
            });
            body.extend(inner);
            let mut result = lw.emit(body, in_dtype, Expr::Var(var), None);
            if let Some(n) = mean_divisor {
                result = lw.emit(body, dtype, Expr::Binary(BinaryOp::Div, result, n), None);
            }
            let to = lw.flat(body, None, rows, &out_strides);
            body.push(Stmt::Store(dest, Some(to), result));
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::{lower, LowerOptions, Param};
    use crate::types::Dim;

    /// The shapes of the scratch buffers `src` lowers to, with either
    /// tier's options (they must agree).
    fn scratch(src: &str) -> Vec<String> {
        let graph = crate::text::parse(src).expect("the test graph parses");
        let graph = crate::verify(graph).expect("the test graph verifies");
        let mut found = Vec::new();
        let tiles = LowerOptions {
            register_tiles: true,
            ..LowerOptions::default()
        };
        for options in [LowerOptions::default(), tiles] {
            let kernel = lower(&graph, &options).expect("lowers");
            let shapes: Vec<String> = kernel
                .params
                .iter()
                .filter_map(|p| match p {
                    Param::Scratch { dtype, shape } => {
                        let dims: Vec<String> = shape.iter().map(Dim::to_string).collect();
                        Some(format!("{dtype}[{}]", dims.join(", ")))
                    }
                    _ => None,
                })
                .collect();
            found.push(shapes);
        }
        assert_eq!(
            found[0], found[1],
            "both tiers' kernels take the same scratch"
        );
        found.remove(0)
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
