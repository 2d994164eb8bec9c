//! The tensor ops of torch.fx: `matmul`/`mm`/`bmm`/`addmm`/`linear` and
//! `nn.Linear`, layout ops (`t`, `transpose`, `permute`, `reshape`/`view`,
//! `flatten`, `squeeze`/`unsqueeze`, `expand`, `cat`, slicing and indexing),
//! multi-output ops taken apart by `getitem` (`split`, `chunk`, `unbind`),
//! reductions over dims and `softmax`/`log_softmax` as their composition.
//!
//! Every shape rule is kiln's own (the builder's typing); this file only maps
//! torch's arguments (negative dims, `-1` sizes, keyword spellings) onto it.

use super::{fixed_product, te, Fx, Operand};
use crate::fx::text::{Arg, Node};
use crate::layout;
use kiln_ir::{BinaryOp, DType, Dim, Op, ReduceOp, UnaryOp, Value};

impl Fx<'_> {
    /// The shape of a value (every value here is a tensor).
    pub(super) fn shape_of(&self, v: Value) -> Vec<Dim> {
        self.b
            .ty(v)
            .as_tensor()
            .map(|t| t.shape.clone())
            .unwrap_or_default()
    }

    /// An axis argument, negative counting from the end, checked against `rank`.
    fn axis(&self, node: &Node, idx: usize, key: &str, rank: usize) -> Result<usize, String> {
        let raw = match self.arg(node, idx, key) {
            Some(Arg::Int(i)) => *i,
            other => return Err(format!("`{key}` must be an int, not {other:?}")),
        };
        let r = rank as i64;
        let a = if raw < 0 { raw + r } else { raw };
        if (0..r.max(1)).contains(&a) {
            Ok(a as usize)
        } else {
            Err(format!(
                "dimension {raw} is out of range for a tensor of rank {rank}"
            ))
        }
    }

    fn transpose(&mut self, v: Value, perm: Vec<u32>) -> Result<Value, String> {
        self.b.op(Op::Transpose(perm), &[v]).map_err(te)
    }

    pub(super) fn reshape(&mut self, v: Value, shape: Vec<Dim>) -> Result<Value, String> {
        if self.shape_of(v) == shape {
            return Ok(v);
        }
        self.b.op(Op::Reshape(shape), &[v]).map_err(te)
    }

    /// `x @ w.T + b`: torch's `linear`.
    fn linear(&mut self, x: Value, w: Value, bias: Option<Value>) -> Result<Value, String> {
        let wt = match self.shape_of(w).len() {
            2 => self.transpose(w, vec![1, 0])?,
            _ => w,
        };
        let y = self.b.op(Op::MatMul, &[x, wt]).map_err(te)?;
        match bias {
            Some(b) => self.b.binary(BinaryOp::Add, y, b).map_err(te),
            None => Ok(y),
        }
    }

    /// The tensor ops: matrix products and layout changes.
    pub(super) fn tensor_op(&mut self, op: &str, node: &Node) -> Result<Value, String> {
        let input = |fx: &mut Self, idx: usize, key: &str| -> Result<Value, String> {
            match fx.operand_at(node, idx, key)? {
                Operand::Tensor(v) => Ok(v),
                other => Err(format!("`{key}` must be a tensor, not {other:?}")),
            }
        };
        match op {
            "matmul" | "mm" | "bmm" => {
                let (v, _) = self.promoted(node, 2)?;
                self.b.op(Op::MatMul, &[v[0], v[1]]).map_err(te)
            }
            "addmm" => {
                for (idx, key) in [(3, "beta"), (4, "alpha")] {
                    if self.number_at(node, idx, key, 1.0)? != 1.0 {
                        return Err(format!("unsupported: addmm with {key} != 1"));
                    }
                }
                let bias = input(self, 0, "input")?;
                let a = input(self, 1, "mat1")?;
                let b = input(self, 2, "mat2")?;
                let y = self.b.op(Op::MatMul, &[a, b]).map_err(te)?;
                self.b.binary(BinaryOp::Add, y, bias).map_err(te)
            }
            "linear" => {
                let x = input(self, 0, "input")?;
                let w = input(self, 1, "weight")?;
                let bias = match self.arg(node, 2, "bias") {
                    None | Some(Arg::None) => None,
                    Some(_) => Some(input(self, 2, "bias")?),
                };
                self.linear(x, w, bias)
            }
            "linear_module" => {
                let x = input(self, 0, "input")?;
                let w = self.weight(&format!("{}.weight", node.target))?;
                let bias_name = format!("{}.bias", node.target);
                let bias = if self.opts.weights.contains_key(&bias_name) {
                    Some(self.weight(&bias_name)?)
                } else {
                    None
                };
                self.linear(x, w, bias)
            }
            "t" => {
                let x = input(self, 0, "input")?;
                match self.shape_of(x).len() {
                    0 | 1 => Ok(x),
                    2 => self.transpose(x, vec![1, 0]),
                    r => Err(format!(
                        "`t` takes a tensor of rank 2 or less, got rank {r}"
                    )),
                }
            }
            "transpose" => {
                let x = input(self, 0, "input")?;
                let rank = self.shape_of(x).len();
                let a = self.axis(node, 1, "dim0", rank)?;
                let c = self.axis(node, 2, "dim1", rank)?;
                let mut perm: Vec<u32> = (0..rank as u32).collect();
                if rank > 0 {
                    perm.swap(a, c);
                }
                self.transpose(x, perm)
            }
            "permute" => {
                let x = input(self, 0, "input")?;
                let rank = self.shape_of(x).len();
                let dims = match self.arg(node, 1, "dims") {
                    Some(Arg::Seq(items)) => items.clone(),
                    _ => node.args.iter().skip(1).cloned().collect(),
                };
                let perm = dims
                    .iter()
                    .map(|d| match d {
                        Arg::Int(i) if (-(rank as i64)..rank as i64).contains(i) => {
                            Ok(i.rem_euclid(rank as i64) as u32)
                        }
                        other => Err(format!("`permute` takes axes, got {other:?}")),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                self.transpose(x, perm)
            }
            "reshape" | "view" | "_unsafe_view" => {
                let x = input(self, 0, "input")?;
                let dims = match self.arg(node, 1, "shape") {
                    Some(Arg::Seq(items)) => items.clone(),
                    _ => node.args.iter().skip(1).cloned().collect(),
                };
                let shape = self.target_shape(x, &dims)?;
                self.reshape(x, shape)
            }
            "flatten" => {
                let x = input(self, 0, "input")?;
                let shape = self.shape_of(x);
                let rank = shape.len();
                if rank == 0 {
                    return self.reshape(x, vec![Dim::Fixed(1)]);
                }
                let start = match self.arg(node, 1, "start_dim") {
                    None => 0,
                    Some(_) => self.axis(node, 1, "start_dim", rank)?,
                };
                let end = match self.arg(node, 2, "end_dim") {
                    None => rank - 1,
                    Some(_) => self.axis(node, 2, "end_dim", rank)?,
                };
                if start > end {
                    return Err(format!(
                        "`flatten`: start_dim {start} is after end_dim {end}"
                    ));
                }
                let mut out: Vec<Dim> = shape[..start].to_vec();
                out.push(Dim::Fixed(fixed_product(&shape[start..=end])?));
                out.extend_from_slice(&shape[end + 1..]);
                self.reshape(x, out)
            }
            "unsqueeze" => {
                let x = input(self, 0, "input")?;
                let mut shape = self.shape_of(x);
                let at = self.axis(node, 1, "dim", shape.len() + 1)?;
                shape.insert(at, Dim::Fixed(1));
                self.reshape(x, shape)
            }
            "squeeze" => {
                let x = input(self, 0, "input")?;
                let shape = self.shape_of(x);
                let out: Vec<Dim> = match self.arg(node, 1, "dim") {
                    None => shape
                        .iter()
                        .filter(|d| **d != Dim::Fixed(1))
                        .cloned()
                        .collect(),
                    // `squeeze.dims` (torch 2.0+): several axes at once.
                    Some(Arg::Seq(items)) => {
                        let rank = shape.len() as i64;
                        let mut drop = vec![false; shape.len()];
                        for item in items {
                            let Arg::Int(raw) = item else {
                                return Err(format!("`dim` must be ints, not {item:?}"));
                            };
                            let a = if *raw < 0 { raw + rank } else { *raw };
                            if !(0..rank.max(1)).contains(&a) {
                                return Err(format!(
                                    "dimension {raw} is out of range for a tensor of rank {rank}"
                                ));
                            }
                            if let Some(flag) = drop.get_mut(a as usize) {
                                *flag = shape[a as usize] == Dim::Fixed(1);
                            }
                        }
                        (shape.iter().zip(&drop))
                            .filter(|(_, &d)| !d)
                            .map(|(d, _)| d.clone())
                            .collect()
                    }
                    Some(_) => {
                        let at = self.axis(node, 1, "dim", shape.len())?;
                        let mut out = shape.clone();
                        if out.get(at) == Some(&Dim::Fixed(1)) {
                            out.remove(at);
                        }
                        out
                    }
                };
                self.reshape(x, out)
            }
            _ => unreachable!("tensor_op is called for tensor ops"),
        }
    }

    /// A tensor argument.
    pub(super) fn tensor_at(&self, node: &Node, idx: usize, key: &str) -> Result<Value, String> {
        match self.operand_at(node, idx, key)? {
            Operand::Tensor(v) => Ok(v),
            other => Err(format!("`{key}` must be a tensor, not {other:?}")),
        }
    }

    /// An int argument, or `default` when it is absent or `None`.
    pub(super) fn int_at(
        &self,
        node: &Node,
        idx: usize,
        key: &str,
        default: Option<i64>,
    ) -> Result<i64, String> {
        match (self.arg(node, idx, key), default) {
            (Some(Arg::Int(k)), _) => Ok(*k),
            (None | Some(Arg::None), Some(d)) => Ok(d),
            (other, _) => Err(format!("`{key}` must be an int, not {other:?}")),
        }
    }

    /// A list of tensors (`cat`, `stack`).
    fn tensors_at(&self, node: &Node, idx: usize, key: &str) -> Result<Vec<Value>, String> {
        match self.arg(node, idx, key) {
            Some(Arg::Seq(items)) => items
                .iter()
                .map(|a| match self.operand(a)? {
                    Operand::Tensor(v) => Ok(v),
                    other => Err(format!("`{key}` holds {other:?}, not a tensor")),
                })
                .collect(),
            other => Err(format!("`{key}` must be a list of tensors, not {other:?}")),
        }
    }

    /// `split`, `split_with_sizes`, `chunk`, `unbind`: a tuple of tensors.
    pub(super) fn multi(&mut self, op: &str, node: &Node) -> Result<Vec<Value>, String> {
        if op == "var_mean" || op == "std_mean" {
            return self.moments_pair(op, node);
        }
        if op == "convolution_backward" {
            return self.convolution_backward(node);
        }
        if op == "max_pool2d_with_indices" || op == "max_pool2d" {
            return self.pool_with_indices(node);
        }
        if op == "_scaled_dot_product_flash_attention_for_cpu" {
            return self.flash_attention(op, node);
        }
        if op == "_scaled_dot_product_flash_attention_for_cpu_backward" {
            return self.flash_attention_backward(node);
        }
        if op == "nll_loss_forward" || op == "nll_loss2d_forward" {
            return self.nll_loss(node, op == "nll_loss2d_forward");
        }
        let x = self.tensor_at(node, 0, if op == "chunk" { "input" } else { "self" })?;
        let rank = self.shape_of(x).len();
        let axis = layout::axis(self.int_at(node, 2, "dim", Some(0))?, rank)?;
        if op == "unbind" {
            let axis = layout::axis(self.int_at(node, 1, "dim", Some(0))?, rank)?;
            return layout::unstack(&mut self.b, x, axis);
        }
        let extent = layout::fixed_extent(&self.b, x, axis)?;
        let sizes: Vec<u64> = match (op, self.arg(node, 1, "split_size_or_sections")) {
            ("chunk", _) => {
                let chunks = self.int_at(node, 1, "chunks", None)?;
                if chunks <= 0 {
                    return Err(format!("`chunk` into {chunks} pieces"));
                }
                layout::piece_sizes(extent, extent.div_ceil(chunks as u64).max(1))?
            }
            (_, Some(Arg::Int(size))) => layout::piece_sizes(
                extent,
                u64::try_from(*size).map_err(|_| "a negative split size")?,
            )?,
            (_, Some(Arg::Seq(items))) => items
                .iter()
                .map(|a| match a {
                    Arg::Int(k) if *k >= 0 => Ok(*k as u64),
                    other => Err(format!("split sizes are ints, got {other:?}")),
                })
                .collect::<Result<_, String>>()?,
            (_, other) => return Err(format!("`split` takes a size or sizes, not {other:?}")),
        };
        layout::split(&mut self.b, x, axis, &sizes)
    }

    /// Concatenation, broadcasting, slicing and indexing.
    pub(super) fn layout_op(&mut self, op: &str, node: &Node) -> Result<Value, String> {
        match op {
            "cat" | "concat" | "concatenate" | "stack" => {
                let mut xs = self.tensors_at(node, 0, "tensors")?;
                if op != "stack" && xs.len() > 1 {
                    // torch's `cat` skips 1-D tensors of no elements (a
                    // model's empty key-value cache); kiln has none to keep.
                    let empty = |fx: &Self, v: Value| fx.shape_of(v) == [Dim::Fixed(0)];
                    if xs.iter().any(|&v| !empty(self, v)) {
                        xs.retain(|&v| !empty(self, v));
                    }
                }
                let first = *xs.first().ok_or(format!("`{op}` of no tensors"))?;
                let rank = self.shape_of(first).len() + usize::from(op == "stack");
                let axis = layout::axis(self.int_at(node, 1, "dim", Some(0))?, rank)?;
                if op == "stack" {
                    layout::stack(&mut self.b, &xs, axis)
                } else {
                    layout::concat(&mut self.b, &xs, axis)
                }
            }
            "expand" | "broadcast_to" => {
                let x = self.tensor_at(node, 0, "input")?;
                let sizes = match self.arg(node, 1, "size") {
                    Some(Arg::Seq(items)) => items.clone(),
                    _ => node.args.iter().skip(1).cloned().collect(),
                };
                let own = self.shape_of(x);
                let lead = sizes.len().checked_sub(own.len()).ok_or_else(|| {
                    format!(
                        "`{op}` to {} dims of a rank-{} tensor",
                        sizes.len(),
                        own.len()
                    )
                })?;
                let to = sizes
                    .iter()
                    .enumerate()
                    .map(|(i, s)| match s {
                        // -1 keeps the dimension.
                        Arg::Int(-1) if i >= lead => Ok(own[i - lead].clone()),
                        Arg::Int(k) if *k >= 0 => Ok(Dim::Fixed(*k as u64)),
                        other => Err(format!("`{op}` takes sizes, got {other:?}")),
                    })
                    .collect::<Result<Vec<Dim>, String>>()?;
                layout::broadcast_to(&mut self.b, x, to)
            }
            "narrow" => {
                let x = self.tensor_at(node, 0, "input")?;
                let axis =
                    layout::axis(self.int_at(node, 1, "dim", None)?, self.shape_of(x).len())?;
                let extent = layout::fixed_extent(&self.b, x, axis)?;
                let start = self.int_at(node, 2, "start", None)?;
                let length = self.int_at(node, 3, "length", None)?;
                let start = layout::python_bounds(Some(start), None, extent).0;
                let stop = u64::try_from(length)
                    .ok()
                    .and_then(|l| start.checked_add(l))
                    .filter(|&s| s <= extent)
                    .ok_or_else(|| {
                        format!("`narrow` of {length} from {start} past the extent {extent}")
                    })?;
                layout::slice_axis(&mut self.b, x, axis, (start, stop))
            }
            "slice" => {
                // aten.slice.Tensor(self, dim=0, start=None, end=None, step=1)
                let x = self.tensor_at(node, 0, "self")?;
                let axis = layout::axis(
                    self.int_at(node, 1, "dim", Some(0))?,
                    self.shape_of(x).len(),
                )?;
                let bound = |fx: &Self, idx, key| match fx.arg(node, idx, key) {
                    None | Some(Arg::None) => Ok(None),
                    Some(Arg::Int(k)) => Ok(Some(*k)),
                    other => Err(format!("`{key}` must be an int, not {other:?}")),
                };
                let (start, end) = (bound(self, 2, "start")?, bound(self, 3, "end")?);
                let step = self.int_at(node, 4, "step", Some(1))?;
                self.slice_bounds(x, axis, [start, end, Some(step)])
            }
            "select" => {
                // aten.select.int(self, dim, index): the index, without its axis.
                let x = self.tensor_at(node, 0, "self")?;
                let axis =
                    layout::axis(self.int_at(node, 1, "dim", None)?, self.shape_of(x).len())?;
                let index = self.int_at(node, 2, "index", None)?;
                self.index(x, axis, index)
            }
            "getitem" => {
                let from = match node.args.first() {
                    Some(Arg::Node(n)) => n.clone(),
                    other => return Err(format!("`getitem` of {other:?}")),
                };
                let index = node.args.get(1).ok_or("`getitem` without an index")?;
                if let Some(items) = self.tuples.get(&from) {
                    let n = items.len() as i64;
                    return match index {
                        Arg::Int(k) if (-n..n).contains(k) => Ok(items[k.rem_euclid(n) as usize]),
                        other => Err(format!("item {other:?} of `%{from}`, a tuple of {n}")),
                    };
                }
                let x = self.lookup(&from)?;
                self.tensor_index(x, index)
            }
            _ => unreachable!("layout_op is called for layout ops"),
        }
    }

    fn slice_bounds(
        &mut self,
        x: Value,
        axis: usize,
        bounds: [Option<i64>; 3],
    ) -> Result<Value, String> {
        torch_step(bounds)?;
        layout::slice_python(&mut self.b, x, axis, bounds)
    }

    fn index(&mut self, x: Value, axis: usize, index: i64) -> Result<Value, String> {
        layout::index_axis(&mut self.b, x, axis, index)
    }

    /// Python indexing of a tensor (`layout::index`).
    fn tensor_index(&mut self, x: Value, index: &Arg) -> Result<Value, String> {
        let items: Vec<Arg> = match index {
            Arg::Seq(items) => items.clone(),
            one => vec![one.clone()],
        };
        let items = items
            .iter()
            .map(|item| match item {
                Arg::Int(k) => Ok(layout::Index::At(*k)),
                Arg::Slice(bounds) => torch_step(*bounds).map(|()| layout::Index::Slice(*bounds)),
                Arg::None => Ok(layout::Index::NewAxis),
                Arg::Name(n) if n == "Ellipsis" => Ok(layout::Index::Ellipsis),
                other => Err(format!("unsupported index {other:?}")),
            })
            .collect::<Result<Vec<_>, String>>()?;
        layout::index(&mut self.b, x, &items)
    }

    /// The axes a `dim` argument names (an int, a list, or none: every axis),
    /// ascending.
    pub(super) fn dims_arg(
        &self,
        node: &Node,
        idx: usize,
        rank: usize,
    ) -> Result<Vec<u32>, String> {
        let items: Vec<Arg> = match self.arg(node, idx, "dim") {
            None | Some(Arg::None) => return Ok((0..rank as u32).collect()),
            Some(Arg::Seq(items)) => items.clone(),
            Some(a) => vec![a.clone()],
        };
        let mut axes = items
            .iter()
            .map(|a| match a {
                Arg::Int(i) if (-(rank as i64)..rank as i64).contains(i) => {
                    Ok(i.rem_euclid(rank as i64) as u32)
                }
                other => Err(format!(
                    "`dim` must name axes of a rank-{rank} tensor, got {other:?}"
                )),
            })
            .collect::<Result<Vec<u32>, String>>()?;
        axes.sort_unstable();
        axes.dedup();
        Ok(axes)
    }

    pub(super) fn reduce_axes(
        &mut self,
        op: ReduceOp,
        x: Value,
        axes: Vec<u32>,
        keepdim: bool,
    ) -> Result<Value, String> {
        self.b
            .op(Op::ReduceAxes { op, axes, keepdim }, &[x])
            .map_err(te)
    }

    /// torch's `sum`, `mean`, `amax`, `amin`, `prod` over `dim` (all axes
    /// without one), `keepdim`. Like torch, `sum`/`prod` of bool or i32 give
    /// i64, and `mean` wants floats.
    pub(super) fn reduction(&mut self, op: &str, node: &Node) -> Result<Value, String> {
        let x = match self.operand_at(node, 0, "input")? {
            Operand::Tensor(v) => v,
            other => return Err(format!("`{op}` takes a tensor, not {other:?}")),
        };
        let rank = self.shape_of(x).len();
        if rank == 0 {
            return Ok(x);
        }
        let axes = self.dims_arg(node, 1, rank)?;
        let keepdim = matches!(self.arg(node, 2, "keepdim"), Some(Arg::Bool(true)));
        let dtype = self.b.dtype(x).expect("a tensor");
        let (rop, to) = match op {
            "sum" => (ReduceOp::Sum, (!dtype.is_float()).then_some(DType::I64)),
            "prod" => (ReduceOp::Prod, (!dtype.is_float()).then_some(DType::I64)),
            "mean" if !dtype.is_float() => {
                return Err(format!("`mean` of {dtype}: torch wants a float tensor"))
            }
            "mean" => (ReduceOp::Mean, None),
            "amax" => (ReduceOp::Max, None),
            _ => (ReduceOp::Min, None),
        };
        let x = match to {
            Some(d) => self.b.cast(x, d).map_err(te)?,
            None => x,
        };
        self.reduce_axes(rop, x, axes, keepdim)
    }

    /// `softmax(x, dim)`: `exp(x - max) / sum(exp(x - max))` along `dim`, the
    /// max subtracted for range as torch does; `log_softmax` is
    /// `(x - max) - log(sum(exp(x - max)))`.
    pub(super) fn softmax(&mut self, log: bool, node: &Node) -> Result<Value, String> {
        let x = self.floating(node)?;
        let rank = self.shape_of(x).len();
        if rank == 0 {
            return Err("softmax of a scalar".into());
        }
        let axes = match self.arg(node, 1, "dim") {
            None | Some(Arg::None) => return Err("softmax needs `dim`".into()),
            Some(_) => self.dims_arg(node, 1, rank)?,
        };
        let max = self.reduce_axes(ReduceOp::Max, x, axes.clone(), true)?;
        let shifted = self.b.binary(BinaryOp::Sub, x, max).map_err(te)?;
        let e = self.b.unary(UnaryOp::Exp, shifted).map_err(te)?;
        let total = self.reduce_axes(ReduceOp::Sum, e, axes, true)?;
        if log {
            let l = self.b.unary(UnaryOp::Log, total).map_err(te)?;
            self.b.binary(BinaryOp::Sub, shifted, l).map_err(te)
        } else {
            self.b.binary(BinaryOp::Div, e, total).map_err(te)
        }
    }

    /// The shape `dims` (ints, one of them possibly -1) asks `x` to take.
    fn target_shape(&self, x: Value, dims: &[Arg]) -> Result<Vec<Dim>, String> {
        let wanted = dims
            .iter()
            .map(|d| match d {
                Arg::Int(n) => Ok(*n),
                other => Err(format!("a shape takes sizes (and one -1), got {other:?}")),
            })
            .collect::<Result<Vec<i64>, String>>()?;
        layout::target_shape(&self.b, x, &wanted)
    }
}

/// torch slices only forwards (`x[::-1]` is torch's error, `flip` its way).
fn torch_step([_, _, step]: [Option<i64>; 3]) -> Result<(), String> {
    match step {
        Some(s) if s <= 0 => Err(format!("slice step must be positive (torch), got {s}")),
        _ => Ok(()),
    }
}
