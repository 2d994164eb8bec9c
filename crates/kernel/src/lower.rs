//! Lowering a verified graph to a [`Kernel`].
//!
//! Nodes get a *level*: inputs and constants 0; an elementwise node the highest
//! level of its arguments; a reduction one more than its column (its result
//! exists only after the loop). Then, level by level: the scalar nodes of the
//! level (hoisted out of every loop), and one loop per extent that computes all
//! the level's column work in one pass over the rows (column outputs, reduction
//! accumulators, filters). A column needed by a later level's loop is recomputed
//! in that loop rather than stored: no intermediate columns, no scratch memory.
//!
//! Every walk over the graph is a loop over the arena, never recursion.

use crate::{Expr, Extent, Kernel, MathFn, Param, ParamIdx, Reg, Stmt, Var};
use cranelift_entity::{EntityRef, SecondaryMap};
use kiln_ir::entities::Value;
use kiln_ir::graph::Graph;
use kiln_ir::op::{BinaryOp, CmpOp, Op, ReduceOp, UnaryOp};
use kiln_ir::scalar::Scalar;
use kiln_ir::semantics::reduce_identity;
use kiln_ir::types::{DType, Dim, Type};
use kiln_ir::verify::{GraphInfo, Verified};

/// Why a graph cannot be lowered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LowerError {
    /// The graph uses something lowering does not handle yet.
    #[error("lowering does not support {0} yet")]
    Unsupported(String),
    /// Lowering produced a kernel the verifier rejects (a bug in lowering;
    /// checked in debug builds).
    #[error(transparent)]
    Invalid(#[from] crate::KernelError),
}

pub(super) struct Lowerer<'a> {
    pub(super) graph: &'a Graph,
    pub(super) info: &'a GraphInfo,
    pub(super) kernel: Kernel,
    /// Scalar values already computed, valid for the rest of the kernel.
    pub(super) scalars: SecondaryMap<Value, Option<Reg>>,
    pub(super) input_params: Vec<ParamIdx>,
    pub(super) output_params: Vec<ParamIdx>,
    /// [`LowerOptions::panels`].
    pub(super) panels: Option<u32>,
    /// [`LowerOptions::conv_panels`].
    pub(super) conv_panels: bool,
    /// [`LowerOptions::libm_calls`].
    pub(super) libm_calls: bool,
    /// Expand math for a backend whose fallback calls are the `libm`
    /// crate's functions ([`math_kernel`]'s).
    pub(super) crate_fallbacks: bool,
    /// [`LowerOptions::prefetch`].
    pub(super) prefetch: bool,
    /// [`LowerOptions::padded_rest_rows`].
    pub(super) padded_rest_rows: bool,
    /// [`LowerOptions::transpose_tiles`].
    pub(super) transpose_tiles: bool,
    /// [`LowerOptions::running_min_max`].
    pub(super) running_min_max: bool,
    /// [`LowerOptions::tree_selects`].
    pub(super) tree_selects: u32,
    /// [`LowerOptions::tree_block`].
    pub(super) tree_block: u32,
    /// [`LowerOptions::isin_chain`].
    pub(super) isin_chain: u32,
    /// The registers holding a dense view's unit stride (its last axis's),
    /// so that a view whose last axis is not the contiguous one (a
    /// transpose's) is told apart where a nest reads it
    /// (`tensor::views::store_all`).
    pub(super) unit_strides: crate::iterations::IndexSet<Reg>,
    /// The positions of the outputs that return each value (a population's
    /// group has up to 1,024 outputs: a scan of them per node was a tenth
    /// of its lowering).
    pub(super) returned: SecondaryMap<Value, Vec<usize>>,
    /// The positions of the outputs that return a reshape (or a chain of
    /// reshapes) of each value: where the value is stored densely, it is
    /// stored in such an output's buffer, which the reshape then is,
    /// rather than in scratch copied out at the end
    /// (`tensor::views::dest`).
    pub(super) reshaped: SecondaryMap<Value, Vec<usize>>,
}

/// The extent of a column type, if it is one.
fn column_dim(ty: &Type) -> Option<&Dim> {
    match ty {
        Type::Tensor(t) if t.shape.len() == 1 => t.shape.first(),
        Type::Selection(d) => Some(d),
        _ => None,
    }
}

/// The binary op a reduction folds with; `None` for `count`, which folds
/// nothing.
pub(super) fn step_op(op: ReduceOp) -> Option<BinaryOp> {
    Some(match op {
        ReduceOp::Sum | ReduceOp::Mean => BinaryOp::Add,
        ReduceOp::Prod => BinaryOp::Mul,
        ReduceOp::Min => BinaryOp::Min,
        ReduceOp::Max => BinaryOp::Max,
        ReduceOp::Count => return None,
    })
}

/// The [`LowerOptions::tree_selects`] of the JIT tiers: up to this many
/// nodes a tree ensemble is straight-line selects (measured in
/// docs/performance.md: where the selects' compile time and the work of
/// taking every node's test overtake the walk's).
pub const TREE_SELECTS: u32 = 20_000;

/// The [`LowerOptions::isin_chain`] of the LLVM tier (and of objects):
/// the largest `isin` set lowered as a chain of `eq`s.
pub const ISIN_CHAIN: u32 = 32;

/// An `isin` set as a cuckoo hash table: every member in slot
/// `h(key, multipliers[0])` or `h(key, multipliers[1])`, where
/// `h(key, c) = (key * c) >>> (64 - log2_size)` (wrapping), the other
/// slots holding the first member.
#[derive(Clone, Debug, PartialEq)]
pub struct IsinTable {
    pub slots: Vec<Scalar>,
    pub log2_size: u32,
    pub multipliers: [u64; 2],
}

/// The key `isin`'s hash reads: an int as `i64`, a float's bits after `+
/// 0.0` (as `i64`, an `f32`'s sign-extended from `i32`).
fn isin_key(v: Scalar) -> u64 {
    match v {
        Scalar::I32(v) => i64::from(v) as u64,
        Scalar::I64(v) => v as u64,
        Scalar::F32(v) => i64::from((v + 0.0).to_bits() as i32) as u64,
        Scalar::F64(v) => (v + 0.0).to_bits(),
        Scalar::Bool(v) => u64::from(v),
    }
}

/// Builds the cuckoo table of a canonical `isin` set (not empty),
/// deterministically: at most half full, the
/// multipliers drawn from a fixed sequence (splitmix64) until every member
/// places within 500 moves, the table doubled after 32 draws.
pub fn isin_table(set: &[Scalar]) -> IsinTable {
    let mut log2_size = (set.len() * 2).next_power_of_two().max(64).trailing_zeros();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) | 1
    };
    loop {
        for _ in 0..32 {
            let multipliers = [next(), next()];
            if let Some(slots) = cuckoo(set, log2_size, multipliers) {
                return IsinTable {
                    slots,
                    log2_size,
                    multipliers,
                };
            }
        }
        log2_size += 1;
    }
}

/// Every member of `set` placed in one of its two slots, or `None`.
fn cuckoo(set: &[Scalar], log2_size: u32, c: [u64; 2]) -> Option<Vec<Scalar>> {
    let slot = |v: Scalar, k: usize| (isin_key(v).wrapping_mul(c[k]) >> (64 - log2_size)) as usize;
    let mut table: Vec<Option<Scalar>> = vec![None; 1 << log2_size];
    for &member in set {
        let (mut v, mut k) = (member, 0);
        let mut placed = false;
        for _ in 0..500 {
            let at = slot(v, k);
            match table[at].replace(v) {
                None => {
                    placed = true;
                    break;
                }
                Some(evicted) => {
                    // The evicted value moves to its other slot.
                    k = usize::from(slot(evicted, 0) == at);
                    v = evicted;
                }
            }
        }
        if !placed {
            return None;
        }
    }
    Some(table.into_iter().map(|s| s.unwrap_or(set[0])).collect())
}

/// Choices of the native signature that do not change what a kernel computes.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct LowerOptions {
    /// Pass `bool` column inputs as packed bitmaps ([`Param::BitmapIn`]) rather
    /// than one byte per row: how Arrow stores booleans and validity.
    pub packed_bools: bool,
    /// Compute a `matmul` of two matrices in *panels* (`Some(bytes)`, a
    /// power of two, at least 16): blocks of 4 result rows × `bytes` of
    /// columns (64 `f32` for 256 bytes), accumulated in a scratch
    /// block over `k` in order, the columns' loop innermost with that fixed
    /// extent and the rows unrolled in it, `b`'s column block packed
    /// densely first. A loop vectorizer runs the columns in vector
    /// registers, each `b` vector loaded once for 4 rows (LLVM also keeps
    /// the whole block in registers across `k`: the loop vectorizer, full
    /// unrolling, then LICM's promotion; Cranelift's vectorizer runs it in
    /// 128-bit vectors through the block in L1). Without it, a matmul goes
    /// row by row, `k` then `j`, in the destination (the VM's dispatch runs
    /// long rows best). Each element sums in `k` order either way.
    ///
    /// The width is the backend's to choose for its machine: 4 rows × 4
    /// vectors where it has 32 vector registers (256 bytes for AVX-512),
    /// 4 × 2 where it has 16 (64 bytes for AVX2). It never changes the bits.
    pub panels: Option<u32>,
    /// With [`Self::panels`], compute a `conv2d` with 8 or more output
    /// channels a group in panels too: the weights as `a`, the input's
    /// taps as the rows of an implicit `b` (`tensor::window`), `k` the
    /// (input channel, kernel row, kernel column) order of its sum. Else
    /// as wide-row taps accumulated in memory, each input load shared by a
    /// block of output channels. The same bits either way; a backend
    /// chooses by measurement (docs/performance.md).
    pub conv_panels: bool,
    /// With [`Self::panels`], hint a panel's `a` rows of the next row block
    /// to the caches while a block runs ([`crate::Stmt::Prefetch`]): a
    /// `Linear` layer's weight in torch's layout, or a convolution's, is
    /// `a`, read once a call from memory in short runs of each row (a `k`
    /// block's), which the hardware prefetchers do not see coming. For a
    /// backend with a prefetch instruction (LLVM, with AVX-512's panels); it
    /// never changes the bits.
    pub prefetch: bool,
    /// With [`Self::panels`], run the 1 to 3 rows past `m`'s last block of
    /// 4 (all of them where `m` is below 4) as one block of 4 whose missing
    /// rows repeat its last real row (read, never stored; for a symbolic
    /// `m`, each row's store and epilogue in a loop that runs once where
    /// the row is real), rather than one row at a time. For LLVM with
    /// panels of at most 16 columns (AVX2's and NEON's 64 bytes of `f32`):
    /// it unrolls a one-row panel's column loop fully before the loop
    /// vectorizer sees it, and with the SLP vectorizer off the row ran as
    /// scalar fused multiply-adds (`[1, 784] @ [784, 256]` 3.3× MKL's time
    /// on a Zen 3 core). A block of 4 is what the vectorizer keeps in
    /// registers, and its 8 sums take no longer than one row's 2, which
    /// wait on the fused multiply-add's latency. Each element's sum is the
    /// same.
    pub padded_rest_rows: bool,
    /// With [`Self::panels`], a `b` read across (`x @ w.T`, `w` a dense
    /// `[n, k]` weight: torch's `Linear`) is packed in tiles of `T × T`
    /// elements ([`crate::transpose`]: `T` is 32 bytes of them), which a
    /// backend with vector shuffles recognizes and transposes in registers,
    /// and a batch of up to 8 rows (12 on 256-byte panels:
    /// `matmul::rows_by_transposed_tiles`) is multiplied as written, `x`
    /// the panel's rows and `w.T` its packed `b`, rather than as `(w @
    /// x.T).T` (whose `b`, `x.T`, is a few real columns, one vector a row,
    /// and whose every element of `w` is a broadcast load). For LLVM. Each
    /// element's sum is the same.
    pub transpose_tiles: bool,
    /// Keep transcendentals as calls by their C names ([`crate::libcalls`])
    /// instead of inline math ([`crate::math`]): for an in-process JIT that
    /// binds the names to the `libm` crate and does not vectorize, where one
    /// call is faster than the expanded scalar code. Objects and wasm modules
    /// never ask for it: their calls would reach the platform's libm, whose
    /// bits may differ.
    pub libm_calls: bool,
    /// Fold a `reduce_min`/`reduce_max` over a long last axis as one
    /// running integer key in a variable (plus a NaN flag), which a loop
    /// vectorizer that recognizes `smax`/`or` reductions runs in vectors
    /// of its own choosing (LLVM). Else in 16 lanes of a scratch row, the
    /// lane loop independent, for a vectorizer that runs only independent
    /// rows (Cranelift's): LLVM unrolled that lane loop fully and gathered
    /// across the chunks. Min and max are exact, so any order gives the
    /// same bits.
    pub running_min_max: bool,
    /// Compute a tree ensemble (`trees`) of at most this many nodes in all
    /// as one comparison and one select per node, every node's test taken
    /// and the row's leaf picked by nested selects: a straight-line body
    /// of independent rows that a loop vectorizer runs in lanes, no table
    /// read and no branch. Larger ensembles (all of them at 0) walk
    /// constant tables, one decision per step, in code whose size does not
    /// grow with the model (`tensor::trees`). The same rules either way.
    pub tree_selects: u32,
    /// How many rows a tree walk takes side by side (a power of two; 0 or
    /// 1 is one at a time): each tree's walk of a row takes the same
    /// steps, so a block of rows is one loop of independent chains of
    /// loads and compares that the machine overlaps.
    pub tree_block: u32,
    /// Compute an `isin` of a set of at most this many values as a chain of
    /// `eq`s; larger sets probe a cuckoo hash table twice. The crossover is
    /// each tier's (docs/performance.md): the LLVM tier's vectorized chain
    /// stays ahead to [`ISIN_CHAIN`] values, Cranelift's to about 12, the
    /// VM's to about 16. The same bits either way.
    pub isin_chain: u32,
}

/// The direct kernel `dtype f(dtype x)` (or `f(dtype x, dtype y)`)
/// computing `f` by inline math ([`crate::math`]), if kiln has an inline
/// port of it: what a backend that vectorizes math functions on their own
/// (the Cranelift JIT's vector math routines, the VM's) compiles, so every
/// tier's bits still come from one expansion. Its `Expr::Fallback` calls
/// must be the `libm` crate's functions (`kiln_ir::math`), never the
/// platform's: it leaves them more of the rare arguments than [`lower`]
/// does (`crate::math`'s `inline_bound`).
pub fn math_kernel(f: MathFn, dtype: DType) -> Option<Kernel> {
    let mut b = kiln_ir::Builder::new(&format!("kiln_math_{f}_{dtype}"));
    let x = b.input("x", Type::scalar(dtype));
    let y = match f {
        MathFn::Unary(op) => {
            crate::math::inline(op, dtype)?;
            b.unary(op, x).ok()?
        }
        MathFn::Binary(op) => {
            crate::math::inline_binary(op, dtype)?;
            let y = b.input("y", Type::scalar(dtype));
            b.binary(op, x, y).ok()?
        }
    };
    b.output("z", y);
    let verified = kiln_ir::verify(b.finish()).ok()?;
    let options = LowerOptions {
        libm_calls: false,
        ..LowerOptions::default()
    };
    lower_with(&verified, &options, true).ok()
}

/// Lowers a verified (normally optimized) graph.
pub fn lower(verified: &Verified, options: &LowerOptions) -> Result<Kernel, LowerError> {
    lower_with(verified, options, false)
}

/// [`lower`]; `crate_fallbacks`: the backend's fallback calls are the `libm`
/// crate's functions ([`crate::math`]'s `inline_bound`).
fn lower_with(
    verified: &Verified,
    options: &LowerOptions,
    crate_fallbacks: bool,
) -> Result<Kernel, LowerError> {
    let (graph, info) = (verified.graph(), verified.info());
    let tensors = crate::tensor::needs_loop_nests(graph, info);
    let mut lw = Lowerer {
        graph,
        info,
        kernel: Kernel {
            name: graph.name.clone(),
            params: Vec::new(),
            regs: Vec::new(),
            vars: Vec::new(),
            body: Vec::new(),
            checks: Vec::new(),
            direct: false,
            reg_names: Vec::new(),
        },
        scalars: SecondaryMap::new(),
        returned: {
            let mut returned: SecondaryMap<Value, Vec<usize>> =
                SecondaryMap::with_capacity(graph.len());
            for (idx, output) in graph.outputs().iter().enumerate() {
                returned[output.value].push(idx);
            }
            returned
        },
        reshaped: {
            let mut reshaped: SecondaryMap<Value, Vec<usize>> =
                SecondaryMap::with_capacity(graph.len());
            for (idx, output) in graph.outputs().iter().enumerate() {
                let mut base = output.value;
                while let Op::Reshape(_) = graph.node(base).op {
                    base = graph.node(base).args[0];
                }
                // Tensors of at least one element's axis both: a rank-0
                // output is a scalar parameter, not a buffer.
                let rank = |v: Value| graph.ty(v).as_tensor().map_or(0, |t| t.shape.len());
                if base != output.value && rank(base) > 0 && rank(output.value) > 0 {
                    reshaped[base].push(idx);
                }
            }
            reshaped
        },
        input_params: Vec::new(),
        output_params: Vec::new(),
        panels: options.panels,
        conv_panels: options.conv_panels,
        libm_calls: options.libm_calls,
        crate_fallbacks,
        prefetch: options.prefetch,
        padded_rest_rows: options.padded_rest_rows,
        transpose_tiles: options.transpose_tiles,
        running_min_max: options.running_min_max,
        tree_selects: options.tree_selects,
        tree_block: options.tree_block,
        isin_chain: options.isin_chain,
        unit_strides: Default::default(),
    };
    lw.params(options);
    if tensors {
        lw.tensor_body()?;
        crate::scratch::share(&mut lw.kernel);
    } else {
        lw.elementwise_body();
    }
    // Every loop was built sequential; one analysis records which are not.
    crate::iterations::mark(&mut lw.kernel);
    if cfg!(debug_assertions) {
        crate::verify(&lw.kernel)?;
    }
    Ok(lw.kernel)
}

impl Lowerer<'_> {
    /// The body of a graph of scalars and columns: level by level, the
    /// hoisted scalars, then one fused loop per extent.
    fn elementwise_body(&mut self) {
        let graph = self.graph;
        let levels = self.levels();
        let max_level = levels.values().copied().max().unwrap_or(0);
        let mut body = Vec::new();
        for level in 0..=max_level {
            self.scalar_block(&levels, level, &mut body);
            self.loops(&levels, level, &mut body);
        }
        for (out_idx, output) in graph.outputs().iter().enumerate() {
            if graph
                .ty(output.value)
                .as_tensor()
                .is_some_and(|t| t.is_scalar())
            {
                let reg =
                    self.scalars[output.value].expect("scalar outputs are computed by the end");
                body.push(Stmt::Store(self.output_params[out_idx], None, reg));
            }
        }
        self.kernel.body = body;
        let all_scalar = self
            .kernel
            .params
            .iter()
            .all(|p| matches!(p, Param::ScalarIn { .. } | Param::ScalarOut { .. }));
        self.kernel.direct =
            all_scalar && self.kernel.checks.is_empty() && !graph.outputs().is_empty();
    }

    pub(super) fn param(&mut self, p: Param) -> ParamIdx {
        self.kernel.params.push(p);
        ParamIdx::new(self.kernel.params.len() - 1)
    }

    fn params(&mut self, options: &LowerOptions) {
        for input in self.graph.inputs() {
            let t = self
                .graph
                .ty(input.value)
                .as_tensor()
                .expect("verified inputs are tensors");
            let (name, dtype) = (input.name.clone(), t.dtype);
            let idx = self.param(if t.is_scalar() {
                Param::ScalarIn { name, dtype }
            } else if dtype == DType::Bool && options.packed_bools {
                Param::BitmapIn { name }
            } else {
                Param::ArrayIn {
                    name,
                    dtype,
                    shape: t.shape.clone(),
                }
            });
            self.input_params.push(idx);
        }
        for dim in self.info.symbols() {
            self.param(Param::Extent { dim: dim.clone() });
        }
        for output in self.graph.outputs() {
            let name = output.name.clone();
            let idx = match self.graph.ty(output.value) {
                Type::Tensor(t) if t.is_scalar() => self.param(Param::ScalarOut {
                    name,
                    dtype: t.dtype,
                }),
                Type::Tensor(t) => self.param(Param::ArrayOut {
                    name,
                    dtype: t.dtype,
                    shape: t.shape.clone(),
                }),
                Type::Selection(dim) => {
                    let idx = self.param(Param::SelectionOut {
                        name: name.clone(),
                        dim: dim.clone(),
                    });
                    self.param(Param::SelectionCount { name });
                    idx
                }
            };
            self.output_params.push(idx);
        }
    }

    pub(super) fn extent(&self, dim: &Dim) -> Extent {
        match dim {
            Dim::Fixed(n) => Extent::Fixed(*n),
            Dim::Sym(s) => {
                let idx = self
                    .kernel
                    .params
                    .iter()
                    .position(|p| matches!(p, Param::Extent { dim } if **dim == **s));
                Extent::Param(ParamIdx::new(
                    idx.expect("verified: every symbol is an input's"),
                ))
            }
        }
    }

    fn levels(&self) -> SecondaryMap<Value, u32> {
        let mut levels: SecondaryMap<Value, u32> = SecondaryMap::with_capacity(self.graph.len());
        for (value, node) in self.graph.nodes() {
            let args = node.args.iter().map(|&a| levels[a]).max().unwrap_or(0);
            levels[value] = if matches!(node.op, Op::Reduce(_)) {
                args + 1
            } else {
                args
            };
        }
        levels
    }

    pub(super) fn new_reg(&mut self, dtype: DType, name: Option<&str>) -> Reg {
        self.kernel.new_reg(dtype, name)
    }

    pub(super) fn new_var(&mut self, init: Scalar) -> Var {
        self.kernel.vars.push(init);
        Var((self.kernel.vars.len() - 1) as u32)
    }

    pub(super) fn emit(
        &mut self,
        out: &mut Vec<Stmt>,
        dtype: DType,
        expr: Expr,
        name: Option<&str>,
    ) -> Reg {
        let reg = self.new_reg(dtype, name);
        out.push(Stmt::Let(reg, expr));
        reg
    }

    /// Emits one elementwise node given its arguments' registers.
    pub(super) fn node(
        &mut self,
        out: &mut Vec<Stmt>,
        value: Value,
        args: &[Reg],
        row: Option<Reg>,
    ) -> Reg {
        let node = self.graph.node(value);
        let dtype = node.ty.dtype().expect("elementwise results are tensors");
        let name = self.graph.source_name(value);
        let expr = match &node.op {
            Op::Input { index } => {
                let param = self.input_params[*index as usize];
                match (row, &self.kernel.params[param.index()]) {
                    (Some(r), Param::ArrayIn { .. }) => Expr::Load(param, r),
                    (Some(r), Param::BitmapIn { .. }) => Expr::LoadBit(param, r),
                    _ => Expr::Input(param),
                }
            }
            Op::Const(c) => Expr::Const(*c),
            // A scalar spread over a column: the column path's one tensor op.
            Op::BroadcastTo(_) if crate::tensor::spreads_a_scalar(self.graph, node) => {
                return args[0]
            }
            // Listed, not `is_tensor_op()`, so a new op must be placed here.
            Op::Tensor(_)
            | Op::MatMul
            | Op::Transpose(_)
            | Op::Reshape(_)
            | Op::ReduceAxes { .. }
            | Op::Concat(_)
            | Op::Slice(_)
            | Op::BroadcastTo(_)
            | Op::Conv2d(_)
            | Op::Pool2d(_)
            | Op::Gather(_)
            | Op::IndexAdd(_)
            | Op::Trees(_) => {
                unreachable!("tensor ops are lowered by `tensor_body`, not per element")
            }
            Op::Unary(op) => return self.unary(out, *op, args[0], dtype, name),
            Op::Binary(op) => {
                // A constant divisor other than 0 needs no check (and its
                // loop stays free of exits).
                let divisor = self.graph.node(value).args[1];
                let nonzero = matches!(self.graph.node(divisor).op, Op::Const(c) if c.bits() != 0);
                if op.divides() && dtype.is_int() && !nonzero {
                    self.kernel.checks.push(value);
                    out.push(Stmt::CheckNonZero(
                        args[1],
                        (self.kernel.checks.len() - 1) as u32,
                    ));
                }
                return self.binary(out, *op, args[0], args[1], dtype, name);
            }
            Op::Compare(op) => return self.compare(out, *op, args[0], args[1], name),
            Op::Select => Expr::Select(args[0], args[1], args[2]),
            Op::Cast(to) => return self.cast(out, *to, args[0], name),
            Op::IsIn(set) => return self.isin(out, args[0], set, name),
            Op::Reduce(_) | Op::Filter => {
                unreachable!("reductions and filters are lowered by their loop")
            }
        };
        self.emit(out, dtype, expr, name)
    }

    /// `isin(x, set)` without a branch: a chain of `eq` or'ed together for a
    /// set of at most [`ISIN_CHAIN`] values; above that a cuckoo hash table
    /// of the set built here ([`isin_table`]), two probes per element: the
    /// slots `h1(key)` and `h2(key)` of `key`, `x` as an `i64` (a float's
    /// bits after `x + 0.0`, which makes `-0.0` the `0.0` the set holds),
    /// `h(key) = (key * c) >>> (64 - log2(size))`; `x` is in the set when
    /// either slot `eq`s it. Empty slots hold a member, so a probe there
    /// compares with a member, never a stranger; a NaN `x` `eq`s nothing.
    fn isin(&mut self, out: &mut Vec<Stmt>, x: Reg, set: &[Scalar], name: Option<&str>) -> Reg {
        use DType::{Bool, F32, F64, I32, I64};
        let dtype = self.kernel.reg_type(x);
        if set.is_empty() {
            return self.emit(out, Bool, Expr::Const(Scalar::Bool(false)), name);
        }
        if set.len() <= self.isin_chain as usize {
            let mut acc = None;
            for (idx, &c) in set.iter().enumerate() {
                let last = idx + 1 == set.len();
                let c = self.emit(out, dtype, Expr::Const(c), None);
                let eq_name = if last && acc.is_none() { name } else { None };
                let eq = self.emit(out, Bool, Expr::Compare(CmpOp::Eq, x, c), eq_name);
                acc = Some(match acc {
                    None => eq,
                    Some(a) => {
                        let or_name = if last { name } else { None };
                        self.emit(out, Bool, Expr::Binary(BinaryOp::Or, a, eq), or_name)
                    }
                });
            }
            return acc.expect("a set that is not empty");
        }
        let table = isin_table(set);
        let slots = self.param(Param::ConstIn {
            name: "isin_set".to_string(),
            tensor: std::sync::Arc::new(kiln_ir::op::TensorConst {
                dtype,
                dims: vec![table.slots.len() as u64],
                values: table.slots.clone(),
            }),
        });
        let key = match dtype {
            I64 => x,
            I32 => self.emit(out, I64, Expr::Cast(I64, x), None),
            F32 | F64 => {
                let zero = self.konst(out, dtype, 0);
                let plus = self.emit(out, dtype, Expr::Binary(BinaryOp::Add, x, zero), None);
                let int = dtype.bits_int();
                let bits = self.emit(out, int, Expr::Bitcast(int, plus), None);
                if dtype == F32 {
                    self.emit(out, I64, Expr::Cast(I64, bits), None)
                } else {
                    bits
                }
            }
            Bool => unreachable!("isin takes ints and floats"),
        };
        let shift = self.konst(out, I64, i64::from(64 - table.log2_size));
        let mut found = None;
        for c in table.multipliers {
            let c = self.konst(out, I64, c as i64);
            let product = self.emit(out, I64, Expr::Binary(BinaryOp::Mul, key, c), None);
            let slot = self.emit(
                out,
                I64,
                Expr::Binary(BinaryOp::ShrLogical, product, shift),
                None,
            );
            let member = self.emit(out, dtype, Expr::Load(slots, slot), None);
            let eq = self.emit(out, Bool, Expr::Compare(CmpOp::Eq, member, x), None);
            found = Some(match found {
                None => eq,
                Some(a) => self.emit(out, Bool, Expr::Binary(BinaryOp::Or, a, eq), name),
            });
        }
        found.expect("two probes")
    }

    fn konst(&mut self, out: &mut Vec<Stmt>, dtype: DType, x: i64) -> Reg {
        let c = match dtype {
            DType::Bool => Scalar::Bool(x != 0),
            DType::I32 => Scalar::I32(x as i32),
            DType::I64 => Scalar::I64(x),
            DType::F32 => Scalar::F32(x as f32),
            DType::F64 => Scalar::F64(x as f64),
        };
        self.emit(out, dtype, Expr::Const(c), None)
    }

    /// A unary op of the graph in kernel expressions. Logical `not` is
    /// `xor true` (registers hold 0 or 1), so no backend chooses between
    /// `xor 1` and a bitwise not; transcendentals with an inline port of the
    /// `libm` crate's algorithm (`kernel::math`) are expanded here, the rest
    /// stay calls.
    pub(super) fn unary(
        &mut self,
        out: &mut Vec<Stmt>,
        op: UnaryOp,
        a: Reg,
        dtype: DType,
        name: Option<&str>,
    ) -> Reg {
        if op == UnaryOp::Not {
            let t = self.konst(out, DType::Bool, 1);
            return self.emit(out, DType::Bool, Expr::Binary(BinaryOp::Xor, a, t), name);
        }
        if !self.libm_calls {
            let inline = if self.crate_fallbacks {
                crate::math::inline_bound
            } else {
                crate::math::inline
            };
            if let Some(expand) = inline(op, dtype) {
                return expand(&mut self.kernel, out, a);
            }
        }
        self.emit(out, dtype, Expr::Unary(op, a), name)
    }

    /// A binary op of the graph in kernel expressions (an integer divisor has
    /// passed its check): every case where kiln's meaning is not the
    /// machine's is expanded here, once for every backend.
    pub(super) fn binary(
        &mut self,
        out: &mut Vec<Stmt>,
        op: BinaryOp,
        a: Reg,
        b: Reg,
        dtype: DType,
        name: Option<&str>,
    ) -> Reg {
        if !self.libm_calls {
            if let Some(expand) = crate::math::inline_binary(op, dtype) {
                return expand(&mut self.kernel, out, a, b);
            }
        }
        match op {
            BinaryOp::FloorDiv | BinaryOp::Mod if dtype.is_float() => {
                self.float_divmod(out, op, a, b, dtype, name)
            }
            _ if op.divides() && dtype.is_int() => self.int_division(out, op, a, b, dtype, name),
            BinaryOp::Shl | BinaryOp::ShrArith | BinaryOp::ShrLogical => {
                // The amount is taken modulo the width.
                let width = 8 * dtype.size_bytes() as i64;
                let mask = self.konst(out, dtype, width - 1);
                let amount = self.emit(out, dtype, Expr::Binary(BinaryOp::BAnd, b, mask), None);
                self.emit(out, dtype, Expr::Binary(op, a, amount), name)
            }
            BinaryOp::Copysign => {
                // copysign(a, NaN) is |a|: a NaN's sign never decides a result.
                let copied = self.emit(out, dtype, Expr::Binary(op, a, b), None);
                let abs = self.emit(out, dtype, Expr::Unary(UnaryOp::Abs, a), None);
                let b_nan = self.emit(out, DType::Bool, Expr::Compare(CmpOp::Ne, b, b), None);
                self.emit(out, dtype, Expr::Select(b_nan, abs, copied), name)
            }
            _ => self.emit(out, dtype, Expr::Binary(op, a, b), name),
        }
    }

    /// Integer `div`/`rem`/`floordiv`/`mod` with a divisor checked nonzero.
    /// The machine's truncating division faults (x86) or is undefined (LLVM)
    /// for `MIN / -1`, so a divisor of -1 becomes 1 and the result is fixed up
    /// (`a / -1 == -a` wrapping, `a % -1 == 0`); floor division steps the
    /// quotient down, and `mod` adds the divisor, when the remainder is
    /// nonzero and its sign differs from the divisor's.
    fn int_division(
        &mut self,
        out: &mut Vec<Stmt>,
        op: BinaryOp,
        a: Reg,
        b: Reg,
        dtype: DType,
        name: Option<&str>,
    ) -> Reg {
        let minus_one = self.konst(out, dtype, -1);
        let one = self.konst(out, dtype, 1);
        let zero = self.konst(out, dtype, 0);
        let is_minus_one = self.emit(
            out,
            DType::Bool,
            Expr::Compare(CmpOp::Eq, b, minus_one),
            None,
        );
        let safe_b = self.emit(out, dtype, Expr::Select(is_minus_one, one, b), None);
        let rem = |lw: &mut Self, out: &mut Vec<Stmt>, name| {
            let r = lw.emit(out, dtype, Expr::Binary(BinaryOp::Rem, a, safe_b), None);
            lw.emit(out, dtype, Expr::Select(is_minus_one, zero, r), name)
        };
        let quot = |lw: &mut Self, out: &mut Vec<Stmt>, name| {
            let q = lw.emit(out, dtype, Expr::Binary(BinaryOp::Div, a, safe_b), None);
            let neg_a = lw.emit(out, dtype, Expr::Unary(UnaryOp::Neg, a), None);
            lw.emit(out, dtype, Expr::Select(is_minus_one, neg_a, q), name)
        };
        match op {
            BinaryOp::Div => return quot(self, out, name),
            BinaryOp::Rem => return rem(self, out, name),
            _ => {}
        }
        let r = rem(self, out, None);
        let nonzero = self.emit(out, DType::Bool, Expr::Compare(CmpOp::Ne, r, zero), None);
        let signs = self.emit(out, dtype, Expr::Binary(BinaryOp::BXor, r, b), None);
        let differ = self.emit(
            out,
            DType::Bool,
            Expr::Compare(CmpOp::Lt, signs, zero),
            None,
        );
        let adjust = self.emit(
            out,
            DType::Bool,
            Expr::Binary(BinaryOp::And, nonzero, differ),
            None,
        );
        if op == BinaryOp::FloorDiv {
            let q = quot(self, out, None);
            let step = self.emit(out, dtype, Expr::Cast(dtype, adjust), None);
            self.emit(out, dtype, Expr::Binary(BinaryOp::Sub, q, step), name)
        } else {
            let r_plus_b = self.emit(out, dtype, Expr::Binary(BinaryOp::Add, r, b), None);
            self.emit(out, dtype, Expr::Select(adjust, r_plus_b, r), name)
        }
    }

    /// A comparison. `bool`s order false < true: they are compared as `i32`s,
    /// so a backend only ever compares bools for equality.
    pub(super) fn compare(
        &mut self,
        out: &mut Vec<Stmt>,
        op: CmpOp,
        a: Reg,
        b: Reg,
        name: Option<&str>,
    ) -> Reg {
        let ordering = !matches!(op, CmpOp::Eq | CmpOp::Ne);
        let (a, b) = if ordering && self.kernel.reg_type(a) == DType::Bool {
            (
                self.emit(out, DType::I32, Expr::Cast(DType::I32, a), None),
                self.emit(out, DType::I32, Expr::Cast(DType::I32, b), None),
            )
        } else {
            (a, b)
        };
        self.emit(out, DType::Bool, Expr::Compare(op, a, b), name)
    }

    /// A conversion as Rust's `as` does it (docs/semantics.md). A conversion
    /// to `bool` is a comparison with zero (NaN is true), so a backend only
    /// converts from bools (0 or 1) and between numbers.
    pub(super) fn cast(
        &mut self,
        out: &mut Vec<Stmt>,
        to: DType,
        a: Reg,
        name: Option<&str>,
    ) -> Reg {
        let from = self.kernel.reg_type(a);
        if to == DType::Bool && from != DType::Bool {
            let zero = self.konst(out, from, 0);
            return self.emit(out, DType::Bool, Expr::Compare(CmpOp::Ne, a, zero), name);
        }
        self.emit(out, to, Expr::Cast(to, a), name)
    }

    /// Float `floordiv`/`mod` as NumPy's `npy_divmod` (`kiln_ir::semantics`),
    /// expanded once here into primitives every backend already has (`rem` is
    /// C's `fmod`), without branches, so no backend spells the sequence itself.
    fn float_divmod(
        &mut self,
        out: &mut Vec<Stmt>,
        op: BinaryOp,
        a: Reg,
        b: Reg,
        dtype: DType,
        name: Option<&str>,
    ) -> Reg {
        let konst = |x: f64| {
            Expr::Const(match dtype {
                DType::F32 => Scalar::F32(x as f32),
                _ => Scalar::F64(x),
            })
        };
        let mut f = |out: &mut Vec<Stmt>, expr: Expr| self.emit(out, dtype, expr, None);
        let zero = f(out, konst(0.0));
        let one = f(out, konst(1.0));
        let rem = f(out, Expr::Binary(BinaryOp::Rem, a, b));
        let rem_plus_b = f(out, Expr::Binary(BinaryOp::Add, rem, b));
        let a_minus_rem = f(out, Expr::Binary(BinaryOp::Sub, a, rem));
        let div = f(out, Expr::Binary(BinaryOp::Div, a_minus_rem, b));
        let div_minus_one = f(out, Expr::Binary(BinaryOp::Sub, div, one));
        let mut t = |out: &mut Vec<Stmt>, expr: Expr| self.emit(out, DType::Bool, expr, None);
        let b_is_zero = t(out, Expr::Compare(CmpOp::Eq, b, zero));
        // `ne` is true for NaN, as the reference's `rem != 0.0` is.
        let rem_nonzero = t(out, Expr::Compare(CmpOp::Ne, rem, zero));
        let b_neg = t(out, Expr::Compare(CmpOp::Lt, b, zero));
        let rem_neg = t(out, Expr::Compare(CmpOp::Lt, rem, zero));
        let signs_differ = t(out, Expr::Binary(BinaryOp::Xor, b_neg, rem_neg));
        let adjust = t(out, Expr::Binary(BinaryOp::And, rem_nonzero, signs_differ));
        let mut f = |out: &mut Vec<Stmt>, expr: Expr| self.emit(out, dtype, expr, None);
        let rem2 = f(out, Expr::Select(adjust, rem_plus_b, rem));
        let div2 = f(out, Expr::Select(adjust, div_minus_one, div));
        if op == BinaryOp::Mod {
            // copysign(0, b); a NaN b never reaches it (rem is NaN then).
            let signed_zero = f(out, Expr::Binary(BinaryOp::Copysign, zero, b));
            let m = f(out, Expr::Select(rem_nonzero, rem2, signed_zero));
            return self.emit(out, dtype, Expr::Select(b_is_zero, rem, m), name);
        }
        let a_div_b = f(out, Expr::Binary(BinaryOp::Div, a, b));
        let half = f(out, konst(0.5));
        let floor = f(out, Expr::Unary(UnaryOp::Floor, div2));
        let floor_plus_one = f(out, Expr::Binary(BinaryOp::Add, floor, one));
        let frac = f(out, Expr::Binary(BinaryOp::Sub, div2, floor));
        let signed_zero = f(out, Expr::Binary(BinaryOp::Copysign, zero, a_div_b));
        let mut t = |out: &mut Vec<Stmt>, expr: Expr| self.emit(out, DType::Bool, expr, None);
        let round_up = t(out, Expr::Compare(CmpOp::Gt, frac, half));
        let div_nonzero = t(out, Expr::Compare(CmpOp::Ne, div2, zero));
        let mut f = |out: &mut Vec<Stmt>, expr: Expr| self.emit(out, dtype, expr, None);
        let rounded = f(out, Expr::Select(round_up, floor_plus_one, floor));
        let fd = f(out, Expr::Select(div_nonzero, rounded, signed_zero));
        self.emit(out, dtype, Expr::Select(b_is_zero, a_div_b, fd), name)
    }

    fn is_scalar(&self, value: Value) -> bool {
        self.graph
            .ty(value)
            .as_tensor()
            .is_some_and(|t| t.is_scalar())
    }

    fn scalar_block(&mut self, levels: &SecondaryMap<Value, u32>, level: u32, out: &mut Vec<Stmt>) {
        for (value, node) in self.graph.nodes() {
            let hoistable =
                self.info.is_live(value) && levels[value] == level && self.is_scalar(value);
            if !hoistable || matches!(node.op, Op::Reduce(_)) {
                continue;
            }
            let args: Vec<Reg> = node
                .args
                .iter()
                .map(|&a| self.scalars[a].expect("scalar arguments come first"))
                .collect();
            let reg = self.node(out, value, &args, None);
            self.scalars[value] = Some(reg);
        }
    }

    /// The loops of one level: one per extent, in order of first use.
    fn loops(&mut self, levels: &SecondaryMap<Value, u32>, level: u32, out: &mut Vec<Stmt>) {
        // Roots: the work a loop at this level exists for.
        let mut roots: Vec<(Value, Dim)> = Vec::new();
        for (value, node) in self.graph.nodes() {
            if !self.info.is_live(value) {
                continue;
            }
            let dim = match node.op {
                Op::Reduce(_) if levels[node.args[0]] == level => {
                    column_dim(self.graph.ty(node.args[0]))
                }
                Op::Reduce(_) => None,
                _ if levels[value] == level && self.is_output(value) => {
                    column_dim(self.graph.ty(value))
                }
                _ => None,
            };
            if let Some(dim) = dim {
                roots.push((value, dim.clone()));
            }
        }
        let mut dims: Vec<Dim> = Vec::new();
        for (_, dim) in &roots {
            if !dims.contains(dim) {
                dims.push(dim.clone());
            }
        }
        for dim in dims {
            let loop_roots: Vec<Value> = roots
                .iter()
                .filter(|(_, d)| *d == dim)
                .map(|(v, _)| *v)
                .collect();
            self.one_loop(&dim, &loop_roots, out);
        }
    }

    pub(super) fn is_output(&self, value: Value) -> bool {
        !self.returned[value].is_empty()
    }

    /// The positions in the signature of the outputs that return `value`.
    pub(super) fn output_indices(&self, value: Value) -> Vec<usize> {
        self.returned[value].clone()
    }

    /// One fused loop computing `roots` (column outputs, reductions, filters).
    fn one_loop(&mut self, dim: &Dim, roots: &[Value], out: &mut Vec<Stmt>) {
        let extent = self.extent(dim);
        // The column nodes the roots need, marked by one backward sweep.
        let mut needed: SecondaryMap<Value, bool> = SecondaryMap::with_capacity(self.graph.len());
        for &root in roots {
            needed[root] = true;
        }
        for (value, node) in self.graph.nodes().rev() {
            if needed[value] {
                for &arg in &node.args {
                    if !self.is_scalar(arg) {
                        needed[arg] = true;
                    }
                }
            }
        }
        // Accumulators and counters start before the loop.
        let mut accs: Vec<(Value, ReduceOp, Option<Var>)> = Vec::new();
        // One counter per selection output (a filter may be returned twice).
        let mut filters: Vec<(Value, usize, Var)> = Vec::new();
        for &root in roots {
            match self.graph.node(root).op {
                Op::Reduce(ReduceOp::Count) => accs.push((root, ReduceOp::Count, None)),
                Op::Reduce(op) => {
                    let dtype = self
                        .graph
                        .ty(self.graph.node(root).args[0])
                        .dtype()
                        .expect("reduced columns are tensors");
                    let var = self.new_var(reduce_identity(op, dtype));
                    accs.push((root, op, Some(var)));
                }
                Op::Filter => {
                    for idx in self.output_indices(root) {
                        let var = self.new_var(Scalar::I64(0));
                        filters.push((root, idx, var));
                    }
                }
                _ => {}
            }
        }
        let row = self.new_reg(DType::I64, Some("row"));
        let mut body = Vec::new();
        let mut regs: SecondaryMap<Value, Option<Reg>> =
            SecondaryMap::with_capacity(self.graph.len());
        for (value, node) in self.graph.nodes() {
            if !needed[value] || matches!(node.op, Op::Reduce(_) | Op::Filter) {
                continue;
            }
            let args: Vec<Reg> = node
                .args
                .iter()
                .map(|&a| {
                    regs[a]
                        .or(self.scalars[a])
                        .expect("loop arguments are computed earlier")
                })
                .collect();
            let reg = self.node(&mut body, value, &args, Some(row));
            regs[value] = Some(reg);
        }
        let arg_reg = |v: Value, regs: &SecondaryMap<Value, Option<Reg>>| {
            regs[v].expect("root arguments are computed in the loop")
        };
        for &root in roots {
            if matches!(self.graph.node(root).op, Op::Reduce(_) | Op::Filter) {
                continue;
            }
            for idx in self.output_indices(root) {
                body.push(Stmt::Store(
                    self.output_params[idx],
                    Some(row),
                    arg_reg(root, &regs),
                ));
            }
        }
        for &(root, op, var) in &accs {
            let Some(var) = var else { continue };
            let x = arg_reg(self.graph.node(root).args[0], &regs);
            let dtype = self.kernel.reg_type(x);
            let acc = self.emit(&mut body, dtype, Expr::Var(var), None);
            let step = step_op(op).expect("count has no accumulator");
            let next = self.emit(&mut body, dtype, Expr::Binary(step, acc, x), None);
            body.push(Stmt::Set(var, next));
        }
        for &(root, idx, count) in &filters {
            let mask = arg_reg(self.graph.node(root).args[0], &regs);
            body.push(Stmt::KeepRow {
                sel: self.output_params[idx],
                count,
                row,
                mask,
            });
        }
        out.push(Stmt::loop_of(extent, row, body));
        for (root, op, var) in accs {
            let name = self.graph.source_name(root);
            let reg = match (op, var) {
                (ReduceOp::Count, _) => self.emit(out, DType::I64, Expr::ExtentValue(extent), name),
                (ReduceOp::Mean, Some(var)) => {
                    let dtype = self.kernel.vars[var.index()].dtype();
                    let sum = self.emit(out, dtype, Expr::Var(var), None);
                    let n = self.emit(out, DType::I64, Expr::ExtentValue(extent), None);
                    let n = self.emit(out, dtype, Expr::Cast(dtype, n), None);
                    self.emit(out, dtype, Expr::Binary(BinaryOp::Div, sum, n), name)
                }
                (_, Some(var)) => {
                    let dtype = self.kernel.vars[var.index()].dtype();
                    self.emit(out, dtype, Expr::Var(var), name)
                }
                (_, None) => unreachable!("only count has no accumulator"),
            };
            self.scalars[root] = Some(reg);
        }
        for (_, idx, count) in filters {
            // The count parameter directly follows the selection's.
            out.push(Stmt::StoreCount(self.output_params[idx].next(), count));
        }
    }
}

#[cfg(test)]
mod isin_tests {
    use super::*;

    #[test]
    fn every_member_sits_in_one_of_its_two_slots() {
        let sets = [
            (0..33)
                .map(|i| Scalar::I32(i * 7 - 100))
                .collect::<Vec<_>>(),
            (0..10_000).map(|i| Scalar::I64(i * 3)).collect(),
            kiln_ir::semantics::isin_set(
                (0..500).map(|i| Scalar::F64(f64::from(i) * 0.25 - 60.0)),
                DType::F64,
            ),
            kiln_ir::semantics::isin_set((0..40).map(|i| Scalar::F32(i as f32 / 3.0)), DType::F32),
        ];
        for set in &sets {
            let t = isin_table(set);
            assert!(t.slots.len() >= 2 * set.len());
            assert_eq!(t.slots.len(), 1 << t.log2_size);
            let slot =
                |v: Scalar, c: u64| (isin_key(v).wrapping_mul(c) >> (64 - t.log2_size)) as usize;
            for &v in set {
                assert!(
                    t.multipliers.iter().any(|&c| t.slots[slot(v, c)] == v),
                    "{v}"
                );
            }
            // Every slot holds a member; the build is deterministic.
            let members: std::collections::HashSet<u64> = set.iter().map(|m| m.bits()).collect();
            assert!(t.slots.iter().all(|s| members.contains(&s.bits())));
            assert_eq!(isin_table(set), t);
        }
        // -0.0 hashes as 0.0.
        assert_eq!(isin_key(Scalar::F64(-0.0)), isin_key(Scalar::F64(0.0)));
        assert_eq!(isin_key(Scalar::F32(-0.0)), isin_key(Scalar::F32(0.0)));
    }
}
