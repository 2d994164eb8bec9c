//! The kernel-level vectorizer: a row loop whose rows are independent runs
//! `lanes` rows at a time in Cranelift's 128-bit vectors (`f64x2`, `f32x4`),
//! all of them when every access is at `row` itself (the last vector moved
//! back to end at `n`), else leaving the last `n % lanes` rows to the
//! scalar loop.
//!
//! It changes how a loop runs, never what it computes: every vector
//! instruction is the scalar one applied lane by lane (the same IEEE
//! operation, the same comparison, the same bit operation), and an
//! expression without a vector form here is computed lane by lane by the
//! scalar translation itself (`FunctionCx::codegen_expr`), so the two can
//! not disagree. Transcendentals call the vector math routines
//! ([`crate::vmath`]: kiln's inline math, compiled once per process by
//! this same translator) where they beat a `libm` call per lane.
//!
//! A register of dtype `d` lives in the 128-bit vector of `d`'s lanes, of
//! which the loop uses the first `lanes` (an `f32` in a loop that also
//! holds `f64`s uses two of `f32x4`'s four). A `bool` is a lane mask (all
//! ones or zero) as wide as the loop's lanes: `i64x2` in two-lane loops,
//! `i32x4` in four-lane ones.
//!
//! Which loops ([`plan`]): those whose rows the kernel records as
//! independent (`kiln_kernel::Iterations::Independent`: no row reads what
//! another writes, as in `acc[p] = acc[p] + x[p] * w`, a convolution's tap),
//! with straight-line bodies of `let`s and stores where every store writes
//! element `row` (plus a loop-invariant offset) of a buffer the loop stores
//! nothing else to. Loops with accumulators, selections, division checks or
//! nested loops stay scalar.

use crate::codegen::{clif_type, FunctionCx};
use crate::{CodegenError, CodegenResult};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{
    self, types, AbiParam, ConstantData, Endianness, InstBuilder, MemFlagsData, Signature,
};
use cranelift_module::{Linkage, Module};
use kiln_ir::{BinaryOp, CmpOp, DType, EntityRef, Scalar, UnaryOp};
use kiln_kernel::{Expr, Extent, Iterations, Kernel, MathCall, MathFn, Param, ParamIdx, Reg, Stmt};
use std::collections::{HashMap, HashSet};

/// The vector math routines a kernel may call: for each function and dtype,
/// the imported symbol and the lanes it computes (it takes and returns the
/// dtype's 128-bit vectors).
#[derive(Clone, Debug, Default)]
pub struct Routines {
    pub(crate) map: HashMap<(MathFn, DType), (String, u8)>,
}

impl Routines {
    fn lanes(&self, f: MathFn, dtype: DType) -> Option<u8> {
        self.map.get(&(f, dtype)).map(|r| r.1)
    }
}

/// The 128-bit vector of `dtype`'s lanes; `bool` has none of its own.
pub(crate) fn vector_of(dtype: DType) -> ir::Type {
    match dtype {
        DType::F64 => types::F64X2,
        DType::F32 => types::F32X4,
        DType::I64 => types::I64X2,
        DType::I32 => types::I32X4,
        DType::Bool => unreachable!("bools are lane masks"),
    }
}

/// The lanes of a 128-bit vector of `dtype`: the most a loop holding it
/// can run.
pub(crate) fn max_lanes(dtype: DType) -> u8 {
    (16 / dtype.size_bytes()) as u8
}

/// What the vectorizer knows of a loop body's registers.
pub(crate) struct Shape {
    /// Those that hold `row` (times a constant 1) plus a loop-invariant
    /// `i64`: element `row` of a buffer, shifted, which a contiguous vector
    /// load or store addresses. They stay scalars (the first lane's value).
    pub(crate) unit: HashSet<Reg>,
    /// Those computed in the body from loop-invariant values only (no
    /// loads): the same in every lane, so they stay scalars.
    pub(crate) invariant: HashSet<Reg>,
}

/// The registers defined anywhere in `stmts` as the `i64` constant 1 (the
/// stride of a tensor's last dimension): found once per kernel.
pub(crate) fn ones(stmts: &[Stmt], out: &mut HashSet<Reg>) {
    for stmt in stmts {
        match stmt {
            Stmt::Let(r, Expr::Const(Scalar::I64(1))) => {
                out.insert(*r);
            }
            Stmt::Loop { body, .. } => ones(body, out),
            _ => {}
        }
    }
}

/// A loop the vectorizer takes: its lanes and its registers' [`Shape`].
pub(crate) struct Plan {
    pub(crate) lanes: u8,
    shape: Shape,
}

fn shape(row: Reg, body: &[Stmt], one: &HashSet<Reg>) -> Shape {
    let defined: HashSet<Reg> = body
        .iter()
        .filter_map(|s| match s {
            Stmt::Let(r, _) => Some(*r),
            _ => None,
        })
        .collect();
    let mut shape = Shape {
        unit: HashSet::from([row]),
        invariant: HashSet::new(),
    };
    for stmt in body {
        let Stmt::Let(r, expr) = stmt else { continue };
        let invariant =
            |x: &Reg| (*x != row && !defined.contains(x)) || shape.invariant.contains(x);
        let unit = |x: &Reg| shape.unit.contains(x);
        let (is_unit, is_invariant) = match expr {
            Expr::Binary(BinaryOp::Add, a, b) => (
                (unit(a) && invariant(b)) || (unit(b) && invariant(a)),
                invariant(a) && invariant(b),
            ),
            Expr::Binary(BinaryOp::Mul, a, b) => (
                (unit(a) && one.contains(b)) || (unit(b) && one.contains(a)),
                invariant(a) && invariant(b),
            ),
            Expr::Load(..) | Expr::LoadBit(..) | Expr::Var(_) | Expr::Fallback { .. } => {
                (false, false)
            }
            _ => (false, expr.operands().iter().all(invariant)),
        };
        if is_unit {
            shape.unit.insert(*r);
        } else if is_invariant {
            shape.invariant.insert(*r);
        }
    }
    shape
}

/// How a loop over `row` runs in vectors, if the vectorizer takes it (see
/// the module's doc): in the fewest lanes any of its dtypes (or vector math
/// routines) allows. `one` holds the kernel's registers of the constant 1
/// ([`ones`]).
pub(crate) fn plan(
    kernel: &Kernel,
    row: Reg,
    body: &[Stmt],
    routines: &Routines,
    one: &HashSet<Reg>,
) -> Option<Plan> {
    let shape = shape(row, body, one);
    let Shape { unit, invariant } = &shape;
    let mut lanes = u8::MAX;
    // Each buffer's store index: one store per buffer (the vector stores
    // write whole rows); whether its rows are independent is the kernel's
    // `Iterations`, which the caller checked.
    let mut stored: HashSet<ParamIdx> = HashSet::new();
    let mut contiguous = false;
    for stmt in body {
        match stmt {
            Stmt::Let(reg, expr) => {
                let dtype = kernel.reg_type(*reg);
                if dtype != DType::Bool && !unit.contains(reg) && !invariant.contains(reg) {
                    lanes = lanes.min(max_lanes(dtype));
                }
                match expr {
                    Expr::Var(_) => return None,
                    Expr::Load(_, idx) | Expr::LoadBit(_, idx) => {
                        contiguous |= unit.contains(idx);
                    }
                    Expr::Unary(op, _) => {
                        if let Some(l) = routines.lanes(MathFn::Unary(*op), dtype) {
                            lanes = lanes.min(l);
                        }
                    }
                    Expr::Binary(op, ..) => {
                        if let Some(l) = routines.lanes(MathFn::Binary(*op), dtype) {
                            lanes = lanes.min(l);
                        }
                    }
                    _ => {}
                }
            }
            Stmt::Store(p, Some(idx), _) if unit.contains(idx) => {
                if !stored.insert(*p) {
                    return None;
                }
                contiguous = true;
            }
            _ => return None,
        }
    }
    // A row index used as a value (not only to address) is an `i64x2`.
    let addressing = |stmt: &Stmt, r: Reg| match stmt {
        Stmt::Let(_, Expr::Load(_, idx) | Expr::LoadBit(_, idx)) => *idx == r,
        Stmt::Let(reg, Expr::Binary(BinaryOp::Add | BinaryOp::Mul, ..)) => unit.contains(reg),
        Stmt::Store(_, Some(idx), value) => *idx == r && *value != r,
        _ => false,
    };
    let index_as_value = body.iter().any(|stmt| {
        let regs = match stmt {
            Stmt::Let(_, expr) => expr.operands(),
            Stmt::Store(_, _, value) => vec![*value],
            _ => Vec::new(),
        };
        regs.into_iter()
            .any(|r| unit.contains(&r) && !addressing(stmt, r))
    });
    if index_as_value {
        lanes = lanes.min(2);
    }
    (contiguous && (2..=4).contains(&lanes)).then_some(Plan { lanes, shape })
}

/// The most vectors a loop keeps in registers across its iterations
/// ([`promotion`]): x86-64's 16 `xmm` registers less room for the operands
/// (a matmul panel's broadcasts and its row of `b`).
const MAX_PROMOTED: usize = 12;

/// A loop whose one inner loop reads, updates and writes back whole rows of
/// scratch buffers, `acc[j] = f(acc[j], …)` (a matmul panel's `k` loop over
/// its block of sums): those rows stay in vector registers across the outer
/// loop's iterations, loaded before it and stored after it, and the inner
/// loop runs unrolled on them. Cranelift keeps no vector in a register from
/// one loop iteration to the next by itself; its SSA variables do.
///
/// The same operations in the same order on the same values: only where
/// the values wait between iterations changes. Valid because nothing else
/// in the outer loop touches those buffers, and a scratch buffer is its
/// kernel's own (no other parameter points into it, docs/abi.md).
pub(crate) struct Promotion {
    /// The inner loop's row register.
    pub(crate) inner: Reg,
    /// How the inner loop runs in vectors.
    pub(crate) plan: Plan,
    /// Its rows: a multiple of the plan's lanes.
    pub(crate) width: u64,
    /// The buffers kept in registers, with their element dtype.
    pub(crate) buffers: Vec<(ParamIdx, DType)>,
}

/// Whether `stmt` reads or writes `param`, in its loops too.
fn touches(stmt: &Stmt, param: ParamIdx) -> bool {
    match stmt {
        Stmt::Let(_, Expr::Load(p, _) | Expr::LoadBit(p, _) | Expr::Input(p)) => *p == param,
        Stmt::Store(p, ..) | Stmt::StoreCount(p, _) => *p == param,
        Stmt::KeepRow { sel, .. } => *sel == param,
        Stmt::Loop { body, .. } => body.iter().any(|s| touches(s, param)),
        _ => false,
    }
}

/// The [`Promotion`] of an outer loop's `body`, if it has one: exactly one
/// inner loop, of a fixed extent the vectorizer takes whole, in which
/// scratch buffers are loaded and stored at its row itself and nowhere else
/// in `body`.
pub(crate) fn promotion(
    kernel: &Kernel,
    body: &[Stmt],
    routines: &Routines,
    one: &HashSet<Reg>,
) -> Option<Promotion> {
    let mut loops = body.iter().filter_map(|s| match s {
        Stmt::Loop {
            extent: Extent::Fixed(width),
            row,
            body,
            iterations: Iterations::Independent,
        } => Some((*width, *row, body)),
        _ => None,
    });
    let (width, inner, inner_body) = loops.next()?;
    let loop_count = body
        .iter()
        .filter(|s| matches!(s, Stmt::Loop { .. }))
        .count();
    if loop_count != 1 {
        return None;
    }
    let plan = plan(kernel, inner, inner_body, routines, one)?;
    if width == 0 || width % u64::from(plan.lanes) != 0 {
        return None;
    }
    let at_row = |p: ParamIdx| {
        let mut loaded = false;
        let mut stored = false;
        for stmt in inner_body {
            match stmt {
                Stmt::Let(_, Expr::Load(q, idx)) if *q == p => {
                    if *idx != inner {
                        return false;
                    }
                    loaded = true;
                }
                Stmt::Let(_, Expr::LoadBit(q, _)) if *q == p => return false,
                Stmt::Store(q, idx, _) if *q == p => {
                    if *idx != Some(inner) {
                        return false;
                    }
                    stored = true;
                }
                _ => {}
            }
        }
        loaded && stored
    };
    let outside = |p: ParamIdx| {
        body.iter()
            .filter(|s| !matches!(s, Stmt::Loop { .. }))
            .any(|s| touches(s, p))
    };
    let mut buffers = Vec::new();
    for stmt in inner_body {
        let Stmt::Store(p, _, _) = stmt else { continue };
        let Some(Param::Scratch { dtype, .. }) = kernel.params.get(p.index()) else {
            continue;
        };
        let fits = *dtype != DType::Bool && max_lanes(*dtype) == plan.lanes;
        let new = !buffers.iter().any(|b: &(ParamIdx, DType)| b.0 == *p);
        if fits && new && at_row(*p) && !outside(*p) {
            buffers.push((*p, *dtype));
        }
    }
    let vectors = buffers.len() * (width / u64::from(plan.lanes)) as usize;
    (vectors > 0 && vectors <= MAX_PROMOTED).then_some(Promotion {
        inner,
        plan,
        width,
        buffers,
    })
}

/// The buffers of a loop whose every load and store is at `row` itself (no
/// offset, no bitmap) and that reads no buffer it writes, each with its
/// element dtype and whether it is read (else written): the loops
/// [`FunctionCx::codegen_overlapped_loop`] runs with no scalar loop. `None`
/// for any other loop.
fn whole_rows(kernel: &Kernel, row: Reg, body: &[Stmt]) -> Option<Vec<(ParamIdx, DType, bool)>> {
    let mut buffers: Vec<(ParamIdx, DType, bool)> = Vec::new();
    for stmt in body {
        let (param, dtype, loaded) = match stmt {
            Stmt::Let(reg, Expr::Load(p, idx)) if *idx == row => (*p, kernel.reg_type(*reg), true),
            Stmt::Let(_, Expr::Load(..) | Expr::LoadBit(..)) => return None,
            Stmt::Store(p, Some(idx), value) if *idx == row => (*p, kernel.reg_type(*value), false),
            Stmt::Store(..) => return None,
            _ => continue,
        };
        match buffers.iter().find(|b| b.0 == param) {
            None => buffers.push((param, dtype, loaded)),
            // Read and written: repeating rows would fold them twice.
            Some(b) if b.2 != loaded => return None,
            Some(_) => {}
        }
    }
    Some(buffers)
}

/// A vector access: cannot trap, but buffers are aligned to their
/// elements, not to 16 bytes (`trusted` would claim the vector's
/// alignment).
const UNALIGNED: MemFlagsData = MemFlagsData::new().with_notrap();

/// A `u128` constant's bytes, little-endian, as CLIF's `vconst` and
/// `shuffle` take them.
fn constant(bytes: [u8; 16]) -> ConstantData {
    ConstantData::from(bytes.to_vec())
}

impl<M: Module> FunctionCx<'_, M> {
    /// The mask type of the current loop: one lane per row, as wide as the
    /// lane.
    fn mask_type(&self) -> ir::Type {
        if self.lanes == 2 {
            types::I64X2
        } else {
            types::I32X4
        }
    }

    /// Runs `body` in vectors: every row when each access is at `row`
    /// itself ([`whole_rows`]: the last vector overlaps the one before it, a
    /// column shorter than a vector runs from copies on the stack), else
    /// rows `0..n - n % lanes`, returning the first row the scalar loop must
    /// still run.
    pub(crate) fn codegen_vector_loop(
        &mut self,
        n: ir::Value,
        row: Reg,
        body: &[Stmt],
        plan: &Plan,
    ) -> CodegenResult<Option<ir::Value>> {
        let lanes = plan.lanes;
        if let Some(buffers) = whole_rows(self.kernel, row, body) {
            self.codegen_overlapped_loop(n, row, body, plan, &buffers)?;
            return Ok(None);
        }
        let end = self.bcx.ins().band_imm_s(n, -i64::from(lanes));
        let body_block = self.bcx.create_block();
        let exit = self.bcx.create_block();
        self.bcx.append_block_param(body_block, types::I64);
        let zero = self.bcx.ins().iconst(types::I64, 0);
        let any = self.bcx.ins().icmp(IntCC::SignedLessThan, zero, end);
        self.bcx
            .ins()
            .brif(any, body_block, &[ir::BlockArg::Value(zero)], exit, &[]);
        self.bcx.switch_to_block(body_block);
        let first = self.bcx.block_params(body_block)[0];
        self.vector_body(row, body, plan, first)?;
        let next = self.bcx.ins().iadd_imm_s(first, i64::from(lanes));
        let more = self.bcx.ins().icmp(IntCC::SignedLessThan, next, end);
        self.bcx
            .ins()
            .brif(more, body_block, &[ir::BlockArg::Value(next)], exit, &[]);
        self.bcx.seal_block(body_block);
        self.bcx.switch_to_block(exit);
        self.bcx.seal_block(exit);
        Ok(Some(end))
    }

    /// A [`Promotion`]'s rows loaded into variables, before its outer loop.
    pub(crate) fn load_promoted(&mut self, promotion: &Promotion) {
        let lanes = u64::from(promotion.plan.lanes);
        for &(p, dtype) in &promotion.buffers {
            let ty = vector_of(dtype);
            let base = self.arg(p);
            let vars = (0..promotion.width / lanes)
                .map(|v| {
                    let var = self.bcx.declare_var(ty);
                    let offset = (v * lanes) as i32 * dtype.size_bytes() as i32;
                    let value = self.bcx.ins().load(ty, UNALIGNED, base, offset);
                    self.bcx.def_var(var, value);
                    var
                })
                .collect();
            self.promoted.insert(p, vars);
        }
    }

    /// A [`Promotion`]'s rows stored back from their variables, after its
    /// outer loop.
    pub(crate) fn store_promoted(&mut self, promotion: &[(ParamIdx, DType)]) {
        for &(p, dtype) in promotion {
            let vars = self.promoted.remove(&p).expect("loaded before the loop");
            let base = self.arg(p);
            let step = vector_of(dtype).bytes() as i32;
            for (v, var) in vars.into_iter().enumerate() {
                let value = self.bcx.use_var(var);
                self.bcx
                    .ins()
                    .store(UNALIGNED, value, base, v as i32 * step);
            }
        }
    }

    /// A [`Promotion`]'s inner loop, unrolled: its body once per vector of
    /// its rows, on the promoted buffers' variables.
    pub(crate) fn codegen_unrolled(
        &mut self,
        promotion: &Promotion,
        body: &[Stmt],
    ) -> CodegenResult<()> {
        let lanes = u64::from(promotion.plan.lanes);
        for v in 0..promotion.width / lanes {
            let first = self.bcx.ins().iconst(types::I64, (v * lanes) as i64);
            self.promoted_at = v as usize;
            self.vector_body(promotion.inner, body, &promotion.plan, first)?;
        }
        Ok(())
    }

    /// For each lane k of a column of `n < lanes` rows, the row it copies:
    /// min(k, n - 1).
    fn short_rows(&mut self, n: ir::Value, width: i64) -> Vec<ir::Value> {
        let last = self.bcx.ins().iadd_imm_s(n, -1);
        (0..width)
            .map(|k| {
                let k = self.bcx.ins().iconst(types::I64, k);
                self.bcx.ins().smin(k, last)
            })
            .collect()
    }

    /// The body once, on the `lanes` rows from `first`.
    fn vector_body(
        &mut self,
        row: Reg,
        body: &[Stmt],
        plan: &Plan,
        first: ir::Value,
    ) -> CodegenResult<()> {
        self.lanes = plan.lanes;
        self.unit.insert(row, first);
        for stmt in body {
            match stmt {
                Stmt::Let(reg, expr) => self.vector_let(*reg, expr, &plan.shape)?,
                Stmt::Store(p, Some(idx), value) => self.vector_store(*p, *idx, *value)?,
                _ => return Err(CodegenError::Invalid("a statement the plan refuses".into())),
            }
        }
        self.lanes = 0;
        self.unit.clear();
        self.vregs.clear();
        self.splats.clear();
        self.consts.clear();
        Ok(())
    }

    /// Every row in vectors, with no scalar loop (which would double the
    /// code to compile): vectors from row 0 by `lanes`, the last one moved
    /// back to end at row `n` (rows it repeats are computed and stored again
    /// with the same bits: the loop reads no buffer it writes). A column
    /// shorter than a vector is copied to `lanes`-element buffers on the
    /// stack (its last element repeated), run once there, and its outputs'
    /// first `n` elements copied back.
    fn codegen_overlapped_loop(
        &mut self,
        n: ir::Value,
        row: Reg,
        body: &[Stmt],
        plan: &Plan,
        buffers: &[(ParamIdx, DType, bool)],
    ) -> CodegenResult<()> {
        let width = i64::from(plan.lanes);
        let body_block = self.bcx.create_block();
        let short_check = self.bcx.create_block();
        let short = self.bcx.create_block();
        let latch = self.bcx.create_block();
        let advance = self.bcx.create_block();
        let copy_out = self.bcx.create_block();
        let exit = self.bcx.create_block();
        self.bcx.append_block_param(body_block, types::I64);
        for _ in buffers {
            self.bcx.append_block_param(body_block, self.ptr);
        }
        self.bcx.append_block_param(body_block, types::I8);
        let real: Vec<ir::Value> = buffers.iter().map(|b| self.arg(b.0)).collect();
        let jump_args = |start: ir::Value, bases: &[ir::Value], tail: ir::Value| {
            let mut args = vec![ir::BlockArg::Value(start)];
            args.extend(bases.iter().map(|&b| ir::BlockArg::Value(b)));
            args.push(ir::BlockArg::Value(tail));
            args
        };
        // n >= lanes: vectors over the buffers themselves.
        let zero = self.bcx.ins().iconst(types::I64, 0);
        let no = self.bcx.ins().iconst(types::I8, 0);
        let full = self
            .bcx
            .ins()
            .icmp_imm_s(IntCC::SignedGreaterThanOrEqual, n, width);
        let args = jump_args(zero, &real, no);
        self.bcx
            .ins()
            .brif(full, body_block, &args, short_check, &[]);
        self.bcx.switch_to_block(short_check);
        self.bcx.seal_block(short_check);
        let any = self.bcx.ins().icmp_imm_s(IntCC::SignedGreaterThan, n, 0);
        self.bcx.ins().brif(any, short, &[], exit, &[]);
        // 0 < n < lanes: element min(k, n - 1) of each input into lane k of
        // a copy on the stack.
        self.bcx.switch_to_block(short);
        self.bcx.seal_block(short);
        let sources = self.short_rows(n, width);
        let mut slots = Vec::with_capacity(buffers.len());
        let mut copies = Vec::with_capacity(buffers.len());
        for (&(_, dtype, loaded), &base) in buffers.iter().zip(&real) {
            // A lane of each row: a vector's 16 bytes, or more where the
            // lanes were set by a narrower type than this buffer's (an `i64`
            // output of a value the same in every row, stored lane by lane
            // beside `i32` lanes: 32 bytes, which a 16-byte slot overran
            // into the saved registers).
            let bytes = (u32::from(plan.lanes) * dtype.size_bytes() as u32).max(16);
            let slot = self.bcx.create_sized_stack_slot(ir::StackSlotData::new(
                ir::StackSlotKind::ExplicitSlot,
                bytes,
                4,
            ));
            slots.push(slot);
            let copy = self.bcx.ins().stack_addr(self.ptr, slot, 0);
            if loaded {
                let ty = clif_type(dtype);
                for (k, &from) in sources.iter().enumerate() {
                    let addr = self.element_addr(base, from, dtype);
                    let v = self.bcx.ins().load(ty, MemFlagsData::trusted(), addr, 0);
                    let offset = k as i32 * dtype.size_bytes() as i32;
                    self.bcx
                        .ins()
                        .store(MemFlagsData::trusted(), v, copy, offset);
                }
            }
            copies.push(copy);
        }
        let yes = self.bcx.ins().iconst(types::I8, 1);
        let args = jump_args(zero, &copies, yes);
        self.bcx.ins().jump(body_block, &args);
        // The body, on the buffers its parameters name.
        self.bcx.switch_to_block(body_block);
        let params = self.bcx.block_params(body_block).to_vec();
        let (first, tail) = (params[0], params[params.len() - 1]);
        let bases = &params[1..params.len() - 1];
        for (b, &base) in buffers.iter().zip(bases) {
            self.bases.insert(b.0, base);
        }
        self.vector_body(row, body, plan, first)?;
        self.bases.clear();
        self.bcx.ins().brif(tail, copy_out, &[], latch, &[]);
        // Next vector: from first + lanes, moved back to end at n.
        self.bcx.switch_to_block(latch);
        self.bcx.seal_block(latch);
        let next = self.bcx.ins().iadd_imm_s(first, width);
        let more = self.bcx.ins().icmp(IntCC::SignedLessThan, next, n);
        self.bcx.ins().brif(more, advance, &[], exit, &[]);
        self.bcx.switch_to_block(advance);
        self.bcx.seal_block(advance);
        let back = self.bcx.ins().iadd_imm_s(n, -width);
        let start = self.bcx.ins().smin(next, back);
        let args = jump_args(start, &real, no);
        self.bcx.ins().jump(body_block, &args);
        self.bcx.seal_block(body_block);
        // Outputs of a short column: their first n elements back.
        self.bcx.switch_to_block(copy_out);
        self.bcx.seal_block(copy_out);
        // (Values of `short` do not dominate this block: made again.)
        let sources = self.short_rows(n, width);
        for ((&(_, dtype, loaded), &base), &slot) in buffers.iter().zip(&real).zip(&slots) {
            if loaded {
                continue;
            }
            let copy = self.bcx.ins().stack_addr(self.ptr, slot, 0);
            let ty = clif_type(dtype);
            for &k in &sources {
                let from = self.element_addr(copy, k, dtype);
                let v = self.bcx.ins().load(ty, MemFlagsData::trusted(), from, 0);
                let to = self.element_addr(base, k, dtype);
                self.bcx.ins().store(MemFlagsData::trusted(), v, to, 0);
            }
        }
        self.bcx.ins().jump(exit, &[]);
        self.bcx.switch_to_block(exit);
        self.bcx.seal_block(exit);
        Ok(())
    }

    fn vector_let(&mut self, reg: Reg, expr: &Expr, shape: &Shape) -> CodegenResult<()> {
        if let Expr::Load(p, _) = expr {
            if let Some(vars) = self.promoted.get(p) {
                let value = self.bcx.use_var(vars[self.promoted_at]);
                self.vregs.insert(reg, value);
                return Ok(());
            }
        }
        let dtype = self.kernel.reg_type(reg);
        if shape.unit.contains(&reg) {
            // row + offset, or row * 1: kept as its first lane's scalar.
            let first = match *expr {
                Expr::Binary(BinaryOp::Add, a, b) => {
                    let (a, b) = (self.lane(a, 0), self.lane(b, 0));
                    self.bcx.ins().iadd(a, b)
                }
                Expr::Binary(BinaryOp::Mul, a, _) if self.unit.contains_key(&a) => self.lane(a, 0),
                Expr::Binary(BinaryOp::Mul, _, b) => self.lane(b, 0),
                _ => return Err(CodegenError::Invalid("a unit-stride index".into())),
            };
            self.unit.insert(reg, first);
            return Ok(());
        }
        let uniform = matches!(expr, Expr::Input(_) | Expr::Const(_) | Expr::ExtentValue(_));
        if uniform || shape.invariant.contains(&reg) {
            // The same in every lane: kept scalar (a shift amount, an
            // operand `vreg` spreads where a vector needs it).
            let scalar = self.codegen_expr(expr, dtype)?;
            self.regs[reg.index()] = Some(scalar);
            if let Expr::Const(c) = expr {
                self.consts.insert(reg, *c);
            }
            return Ok(());
        }
        let value = self.vector_expr(expr, dtype)?;
        self.vregs.insert(reg, value);
        Ok(())
    }

    /// The body of a vector math routine: `kernel` (a direct kernel of one
    /// input) on the vector `arg`, `lanes` of it; returns the result vector.
    pub(crate) fn codegen_routine_body(
        &mut self,
        args: &[ir::Value],
        lanes: u8,
    ) -> CodegenResult<ir::Value> {
        self.lanes = lanes;
        for stmt in &self.kernel.body {
            match stmt {
                Stmt::Let(reg, Expr::Input(p)) => {
                    let arg = args.get(p.index()).copied().ok_or_else(|| {
                        CodegenError::Invalid("a math routine's input out of range".into())
                    })?;
                    self.vregs.insert(*reg, arg);
                }
                Stmt::Let(reg, expr) => {
                    let shape = Shape {
                        unit: HashSet::new(),
                        invariant: HashSet::new(),
                    };
                    self.vector_let(*reg, expr, &shape)?
                }
                Stmt::Store(_, None, value) => return Ok(self.vreg(*value)),
                _ => break,
            }
        }
        Err(CodegenError::Invalid(
            "a math routine is a direct kernel of lets and one store".into(),
        ))
    }

    /// The vector of a register: its own, or a loop-invariant scalar (or
    /// `row + offset`) spread over the lanes.
    fn vreg(&mut self, reg: Reg) -> ir::Value {
        if let Some(&v) = self.vregs.get(&reg) {
            return v;
        }
        if let Some(&v) = self.splats.get(&reg) {
            return v;
        }
        let dtype = self.kernel.reg_type(reg);
        let value = match self.unit.get(&reg).copied() {
            Some(first) => {
                // first + [0, 1, ...]
                let ty = vector_of(dtype);
                let spread = self.bcx.ins().splat(ty, first);
                let mut iota = [0u8; 16];
                for lane in 0..2u8 {
                    iota[usize::from(lane) * 8] = lane;
                }
                let iota = self.bcx.func.dfg.constants.insert(constant(iota));
                let iota = self.bcx.ins().vconst(ty, iota);
                self.bcx.ins().iadd(spread, iota)
            }
            None => match self.consts.get(&reg).copied() {
                // A constant vector from the constant pool, which an x86
                // instruction can take as its memory operand.
                Some(c) => {
                    let (ty, lane) = match c {
                        Scalar::Bool(b) => {
                            let ty = self.mask_type();
                            let ones = if b { u64::MAX } else { 0 };
                            (
                                ty,
                                ones.to_le_bytes()[..ty.lane_bits() as usize / 8].to_vec(),
                            )
                        }
                        _ => (vector_of(dtype), c.to_le_bytes()),
                    };
                    let bytes: Vec<u8> = lane.iter().cycle().take(16).copied().collect();
                    let pool = self
                        .bcx
                        .func
                        .dfg
                        .constants
                        .insert(ConstantData::from(bytes));
                    self.bcx.ins().vconst(ty, pool)
                }
                None => {
                    let scalar = self.reg(reg);
                    self.splat(scalar, dtype)
                }
            },
        };
        self.splats.insert(reg, value);
        value
    }

    /// A scalar register value in every lane (a `bool` as a mask).
    fn splat(&mut self, scalar: ir::Value, dtype: DType) -> ir::Value {
        if dtype == DType::Bool {
            let lane = self.mask_type().lane_type();
            let wide = self.bcx.ins().uextend(lane, scalar);
            let mask = self.bcx.ins().ineg(wide);
            let ty = self.mask_type();
            return self.bcx.ins().splat(ty, mask);
        }
        self.bcx.ins().splat(vector_of(dtype), scalar)
    }

    /// Lane `k` of a register as the scalar translation holds it (a `bool`
    /// as 0 or 1).
    fn lane(&mut self, reg: Reg, k: u8) -> ir::Value {
        if let Some(first) = self.unit.get(&reg).copied() {
            return self.bcx.ins().iadd_imm_s(first, i64::from(k));
        }
        let Some(&v) = self.vregs.get(&reg) else {
            return self.reg(reg);
        };
        let lane = self.bcx.ins().extractlane(v, k);
        if self.kernel.reg_type(reg) == DType::Bool {
            self.bcx.ins().icmp_imm_s(IntCC::NotEqual, lane, 0)
        } else {
            lane
        }
    }

    /// A vector of `dtype` from one scalar per lane.
    fn gather(&mut self, scalars: &[ir::Value], dtype: DType) -> ir::Value {
        let mut v = self.splat(scalars[0], dtype);
        for (k, &s) in scalars.iter().enumerate().skip(1) {
            let s = if dtype == DType::Bool {
                let lane = self.mask_type().lane_type();
                let wide = self.bcx.ins().uextend(lane, s);
                self.bcx.ins().ineg(wide)
            } else {
                s
            };
            v = self.bcx.ins().insertlane(v, s, k as u8);
        }
        v
    }

    /// `expr` computed lane by lane by the scalar translation.
    fn scalarize(&mut self, expr: &Expr, dtype: DType) -> CodegenResult<ir::Value> {
        let regs = expr.operands();
        let mut results = Vec::with_capacity(usize::from(self.lanes));
        for k in 0..self.lanes {
            let saved: Vec<Option<ir::Value>> = regs.iter().map(|r| self.regs[r.index()]).collect();
            for &r in &regs {
                let lane = self.lane(r, k);
                self.regs[r.index()] = Some(lane);
            }
            let result = self.codegen_expr(expr, dtype);
            for (&r, old) in regs.iter().zip(saved) {
                self.regs[r.index()] = old;
            }
            results.push(result?);
        }
        Ok(self.gather(&results, dtype))
    }

    fn vector_expr(&mut self, expr: &Expr, dtype: DType) -> CodegenResult<ir::Value> {
        Ok(match *expr {
            Expr::Input(_) | Expr::Const(_) | Expr::ExtentValue(_) => {
                let scalar = self.codegen_expr(expr, dtype)?;
                self.splat(scalar, dtype)
            }
            Expr::Load(p, idx) if dtype != DType::Bool && max_lanes(dtype) == self.lanes => {
                match self.unit.get(&idx).copied() {
                    Some(first) => {
                        let base = self.arg(p);
                        let addr = self.element_addr(base, first, dtype);
                        let flags = UNALIGNED.with_readonly();
                        self.bcx.ins().load(vector_of(dtype), flags, addr, 0)
                    }
                    None => self.scalarize(expr, dtype)?,
                }
            }
            Expr::Unary(op, a) => self.vector_unary(expr, op, a, dtype)?,
            Expr::Binary(op, a, b) => self.vector_binary(expr, op, a, b, dtype)?,
            Expr::Compare(op, a, b) => self.vector_compare(op, a, b),
            // x86-64 has a vector FMA only with the FMA extension; without
            // it each lane is a scalar `fma` (a libcall).
            Expr::MulAdd(a, b, c) if has_fma(&*self.module) => {
                let (a, b, c) = (self.vreg(a), self.vreg(b), self.vreg(c));
                self.bcx.ins().fma(a, b, c)
            }
            Expr::MulAdd(..) => self.scalarize(expr, dtype)?,
            Expr::Select(c, a, b) => {
                let mask = self.vreg(c);
                let mask = self.mask_as(mask, dtype);
                let (a, b) = (self.vreg(a), self.vreg(b));
                self.bcx.ins().bitselect(mask, a, b)
            }
            Expr::Cast(to, a) => self.vector_cast(expr, a, to)?,
            Expr::Bitcast(to, a) => {
                let a = self.vreg(a);
                let flags = MemFlagsData::new().with_endianness(Endianness::Little);
                self.bcx.ins().bitcast(vector_of(to), flags, a)
            }
            Expr::Fallback { call, rare, value } => {
                self.vector_fallback(call, rare, value, dtype)?
            }
            Expr::Load(..) | Expr::LoadBit(..) | Expr::Var(_) | Expr::Table(..) => {
                self.scalarize(expr, dtype)?
            }
        })
    }

    /// A loop mask made the mask of values of `dtype`, in `dtype`'s vector
    /// type (`bitselect` takes all three operands of one type).
    fn mask_as(&mut self, mask: ir::Value, dtype: DType) -> ir::Value {
        if dtype == DType::Bool {
            return mask;
        }
        let mask = if self.lanes == 2 && dtype.size_bytes() == 4 {
            // i64x2 -> i32x4: the low half of each lane into lanes 0 and 1.
            let bytes = self.bcx.ins().bitcast(
                types::I8X16,
                MemFlagsData::new().with_endianness(Endianness::Little),
                mask,
            );
            let order = [0, 1, 2, 3, 8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11];
            let order = self.bcx.func.dfg.immediates.push(constant(order));
            let narrow = self.bcx.ins().shuffle(bytes, bytes, order);
            self.bcx.ins().bitcast(
                types::I32X4,
                MemFlagsData::new().with_endianness(Endianness::Little),
                narrow,
            )
        } else {
            mask
        };
        let ty = vector_of(dtype);
        if self.bcx.func.dfg.value_type(mask) == ty {
            mask
        } else {
            self.bcx.ins().bitcast(
                ty,
                MemFlagsData::new().with_endianness(Endianness::Little),
                mask,
            )
        }
    }

    /// The comparison mask of values of `dtype` made the loop's mask.
    fn loop_mask(&mut self, mask: ir::Value, dtype: DType) -> ir::Value {
        if self.lanes == 2 && dtype.size_bytes() == 4 {
            self.bcx.ins().swiden_low(mask)
        } else {
            mask
        }
    }

    /// A comparison by the scalar translation's own condition codes (CLIF
    /// compares vectors lane by lane), its mask made the loop's.
    fn vector_compare(&mut self, op: CmpOp, a: Reg, b: Reg) -> ir::Value {
        let operand = self.kernel.reg_type(a);
        let (a, b) = (self.vreg(a), self.vreg(b));
        let mask = self.codegen_compare(op, a, b, operand);
        if operand == DType::Bool {
            mask
        } else {
            self.loop_mask(mask, operand)
        }
    }

    fn vector_unary(
        &mut self,
        expr: &Expr,
        op: UnaryOp,
        a: Reg,
        dtype: DType,
    ) -> CodegenResult<ir::Value> {
        if dtype.is_float() {
            let simple = matches!(
                op,
                UnaryOp::Neg
                    | UnaryOp::Abs
                    | UnaryOp::Sqrt
                    | UnaryOp::Floor
                    | UnaryOp::Ceil
                    | UnaryOp::Trunc
                    | UnaryOp::Round
            );
            if simple {
                let a = self.vreg(a);
                let ins = self.bcx.ins();
                return Ok(match op {
                    UnaryOp::Neg => ins.fneg(a),
                    UnaryOp::Abs => ins.fabs(a),
                    UnaryOp::Sqrt => ins.sqrt(a),
                    UnaryOp::Floor => ins.floor(a),
                    UnaryOp::Ceil => ins.ceil(a),
                    UnaryOp::Trunc => ins.trunc(a),
                    _ => ins.nearest(a),
                });
            }
            let routine = self
                .vectorize
                .and_then(|r| r.map.get(&(MathFn::Unary(op), dtype)));
            if let Some((symbol, _)) = routine.cloned() {
                let a = self.vreg(a);
                return self.call_routine(&symbol, &[a]);
            }
        } else if matches!(op, UnaryOp::Neg | UnaryOp::BNot) {
            let a = self.vreg(a);
            return Ok(match op {
                UnaryOp::Neg => self.bcx.ins().ineg(a),
                _ => self.bcx.ins().bnot(a),
            });
        }
        self.scalarize(expr, dtype)
    }

    fn call_routine(&mut self, symbol: &str, args: &[ir::Value]) -> CodegenResult<ir::Value> {
        let ty = self.bcx.func.dfg.value_type(args[0]);
        let mut sig = Signature::new(self.module.target_config().default_call_conv);
        for _ in args {
            sig.params.push(AbiParam::new(ty));
        }
        sig.returns.push(AbiParam::new(ty));
        let id = self
            .module
            .declare_function(symbol, Linkage::Import, &sig)?;
        let fref = self.module.declare_func_in_func(id, self.bcx.func);
        let call = self.bcx.ins().call(fref, args);
        Ok(self.bcx.inst_results(call)[0])
    }

    fn vector_binary(
        &mut self,
        expr: &Expr,
        op: BinaryOp,
        a: Reg,
        b: Reg,
        dtype: DType,
    ) -> CodegenResult<ir::Value> {
        use BinaryOp::*;
        let routine = self
            .vectorize
            .and_then(|r| r.map.get(&(MathFn::Binary(op), dtype)));
        if let Some((symbol, _)) = routine.cloned() {
            let (a, b) = (self.vreg(a), self.vreg(b));
            return self.call_routine(&symbol, &[a, b]);
        }
        if matches!(op, Shl | ShrArith | ShrLogical) {
            // Vector shifts take one amount for every lane.
            if self.vregs.contains_key(&b) || self.unit.contains_key(&b) {
                return self.scalarize(expr, dtype);
            }
            let (a, amount) = (self.vreg(a), self.reg(b));
            let ins = self.bcx.ins();
            return Ok(match op {
                Shl => ins.ishl(a, amount),
                ShrArith => ins.sshr(a, amount),
                _ => ins.ushr(a, amount),
            });
        }
        let vector = match op {
            Add | Sub | Mul => true,
            Min | Max => true,
            Div | Copysign => dtype.is_float(),
            And | Or | Xor | BAnd | BOr | BXor => true,
            _ => false,
        };
        if !vector {
            return self.scalarize(expr, dtype);
        }
        let (x, y) = (self.vreg(a), self.vreg(b));
        if op == Copysign {
            return Ok(self.vector_copysign(x, y, dtype));
        }
        let float = dtype.is_float();
        if matches!(op, Min | Max) && !float {
            // Signed, as the scalar `smin`/`smax`: `pminsd`/`pmaxsd` for
            // `i32x4`; a compare and a select for `i64x2`, which SSE4.2
            // has no instruction for.
            return Ok(match (op, dtype) {
                (Min, DType::I32) => self.bcx.ins().smin(x, y),
                (Max, DType::I32) => self.bcx.ins().smax(x, y),
                _ => {
                    let cc = if op == Min {
                        IntCC::SignedLessThan
                    } else {
                        IntCC::SignedGreaterThan
                    };
                    let keep = self.bcx.ins().icmp(cc, x, y);
                    self.bcx.ins().bitselect(keep, x, y)
                }
            });
        }
        let ins = self.bcx.ins();
        Ok(match op {
            Add if float => ins.fadd(x, y),
            Sub if float => ins.fsub(x, y),
            Mul if float => ins.fmul(x, y),
            Add => ins.iadd(x, y),
            Sub => ins.isub(x, y),
            Mul => ins.imul(x, y),
            Div => ins.fdiv(x, y),
            Min => ins.fmin(x, y),
            Max => ins.fmax(x, y),
            And | BAnd => ins.band(x, y),
            Or | BOr => ins.bor(x, y),
            _ => ins.bxor(x, y),
        })
    }

    /// `copysign` by bits: the magnitude of `x`, the sign bit of `y` (even a
    /// NaN's), as the scalar instruction.
    fn vector_copysign(&mut self, x: ir::Value, y: ir::Value, dtype: DType) -> ir::Value {
        let ty = vector_of(dtype);
        let sign = match dtype {
            DType::F64 => self.bcx.ins().f64const(-0.0),
            _ => self.bcx.ins().f32const(-0.0),
        };
        let sign = self.bcx.ins().splat(ty, sign);
        let magnitude = self.bcx.ins().band_not(x, sign);
        let sign = self.bcx.ins().band(y, sign);
        self.bcx.ins().bor(magnitude, sign)
    }

    fn vector_cast(&mut self, expr: &Expr, a: Reg, to: DType) -> CodegenResult<ir::Value> {
        let from = self.kernel.reg_type(a);
        if from == to {
            return Ok(self.vreg(a));
        }
        let v = self.vreg(a);
        Ok(match (from, to) {
            (DType::Bool, _) => {
                let (one, zero) = (Scalar::one(to), Scalar::zero(to));
                let (one, zero) = (self.codegen_const(one), self.codegen_const(zero));
                let (one, zero) = (self.splat(one, to), self.splat(zero, to));
                let mask = self.mask_as(v, to);
                self.bcx.ins().bitselect(mask, one, zero)
            }
            (DType::F32, DType::F64) => self.bcx.ins().fvpromote_low(v),
            (DType::F64, DType::F32) => self.bcx.ins().fvdemote(v),
            (DType::I32, DType::F64) => {
                let wide = self.bcx.ins().swiden_low(v);
                self.bcx.ins().fcvt_from_sint(types::F64X2, wide)
            }
            (DType::I32, DType::F32) => self.bcx.ins().fcvt_from_sint(types::F32X4, v),
            (DType::F32, DType::I32) => self.bcx.ins().fcvt_to_sint_sat(types::I32X4, v),
            (DType::F64, DType::I32) => {
                // Saturating to i64, then to i32 (x86's `cvttpd2dq`): the
                // same as saturating to i32 at once.
                let wide = self.bcx.ins().fcvt_to_sint_sat(types::I64X2, v);
                let zero = self.bcx.func.dfg.constants.insert(constant([0; 16]));
                let zero = self.bcx.ins().vconst(types::I64X2, zero);
                self.bcx.ins().snarrow(wide, zero)
            }
            (DType::I32, DType::I64) => self.bcx.ins().swiden_low(v),
            _ => self.scalarize(expr, to)?,
        })
    }

    /// [`Expr::Fallback`] on vectors: one test of "any lane rare?", and the
    /// scalar function for each lane in a cold block.
    fn vector_fallback(
        &mut self,
        call: MathCall,
        rare: Reg,
        value: Reg,
        dtype: DType,
    ) -> CodegenResult<ir::Value> {
        let (rare_mask, common) = (self.vreg(rare), self.vreg(value));
        let any = self.bcx.ins().vany_true(rare_mask);
        let lanes = self.lanes;
        self.cold_path(
            any,
            common,
            |fx, name| {
                let mut results = Vec::with_capacity(usize::from(lanes));
                for k in 0..lanes {
                    let args: Vec<ir::Value> =
                        call.args().into_iter().map(|a| fx.lane(a, k)).collect();
                    let (is_rare, common) = (fx.lane(rare, k), fx.lane(value, k));
                    let called = fx.call_libm(name, &args, clif_type(dtype))?;
                    results.push(fx.bcx.ins().select(is_rare, called, common));
                }
                Ok(fx.gather(&results, dtype))
            },
            call,
            dtype,
        )
    }

    fn vector_store(&mut self, p: ParamIdx, idx: Reg, value: Reg) -> CodegenResult<()> {
        if let Some(var) = self.promoted.get(&p).map(|vars| vars[self.promoted_at]) {
            let v = self.vreg(value);
            self.bcx.def_var(var, v);
            return Ok(());
        }
        let dtype = self.kernel.reg_type(value);
        let first = self
            .unit
            .get(&idx)
            .copied()
            .ok_or_else(|| CodegenError::Invalid("a vector store at a strided row".into()))?;
        let base = self.arg(p);
        let addr = self.element_addr(base, first, dtype);
        if dtype != DType::Bool && max_lanes(dtype) == self.lanes {
            let v = self.vreg(value);
            self.bcx.ins().store(UNALIGNED, v, addr, 0);
            return Ok(());
        }
        let flags = MemFlagsData::trusted();
        for k in 0..self.lanes {
            let lane = self.lane(value, k);
            let offset = i32::from(k) * dtype.size_bytes() as i32;
            self.bcx.ins().store(flags, lane, addr, offset);
        }
        Ok(())
    }
}

/// Whether `module`'s ISA has a vector fused multiply-add: x86-64's FMA
/// extension (the vectorizer runs only on x86-64, `vmath::vectorizes`).
fn has_fma(module: &dyn Module) -> bool {
    module
        .isa()
        .isa_flags()
        .iter()
        .any(|f| f.name == "has_fma" && f.as_bool() == Some(true))
}
