//! kiln's vector VM: a tier that compiles a kernel in microseconds and
//! runs it without generating machine code.
//!
//! [`compile`] translates a [`Kernel`] statement by statement into a tree
//! of instructions over *lanes*: every register gets a vector register
//! (a `VReg`) of [`BLOCK`] 8-byte lanes (reused once a register is dead: a
//! chain of 200 operations needs 4), and each
//! instruction is a loop over the lanes, compiled ahead of time by rustc
//! for baseline x86-64, AVX2 and AVX-512 ([`simd`], `lanes.rs`), and
//! transcendentals run as routines compiled the same way from kiln's
//! inline math (`routines.rs`). A row loop whose
//! iterations are independent (the common case: loads, pure expressions,
//! stores at the row, branchless filters) runs [`BLOCK`] rows at a time,
//! one instruction over all of them before the next, so dispatch costs
//! once per block and the arithmetic runs in SIMD; any other loop (one
//! that carries a variable, or stores where a later row reads) runs row by
//! row, in the same instructions one lane wide. What a kernel computes is
//! decided by lowering; each instruction computes what
//! `kiln_kernel::Expr` says the machine computes, so the VM returns
//! the interpreter's bits like the other tiers.
//!
//! A compiled kernel is called like machine code: [`VmKernel::call`]
//! takes one 8-byte slot per parameter, as `kiln_kernel::abi::args`
//! describes them, and returns the kernel's status.

#[cfg(test)]
mod generate;
#[macro_use]
mod lanes;
mod math;
// Generated (`generate.rs`), and compared with the generator's output.
#[rustfmt::skip]
mod routines;
mod stream;

pub use lanes::{simd, Simd};

use kiln_ir::{BinaryOp, DType, EntityRef, Scalar, UnaryOp};
use kiln_kernel::abi::{CompiledKernel, HostEntry};
use kiln_kernel::backend::{Backend, BackendError, BackendOptions, BackendResult, Symbols};
use kiln_kernel::{Expr, Extent, Kernel, LowerOptions, MathCall, MathFn, Reg, Stmt};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

/// Rows a block loop runs at a time: the lanes of every vreg.
pub const BLOCK: usize = 256;

/// Bytes a block loop stores (rows times the bytes each row stores in
/// contiguous runs) from which its runs bypass the caches (non-temporal
/// stores, on x86-64): twice the largest L2 of the cores kiln meets
/// (2 MiB on Intel's Emerald Rapids), so that what would be written back
/// from L2 before anyone reads it is not first read into it. A GP
/// population's group (1,024 expressions, a block of 4,096 rows: 32 MiB,
/// 1,024 streams no prefetcher follows) evaluates 9 % faster so on one
/// Intel core, 22 % on two; one expression's 80 MB output, twice as fast.
pub const STREAM_BYTES: u64 = 4 << 20;

/// The VM as a [`Backend`]: the tier called `vm`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Vm;

impl Backend for Vm {
    fn name(&self) -> &'static str {
        "vm"
    }

    /// `matmul` row by row in the destination (its inner loop runs in
    /// blocks), and transcendentals as calls, which the VM runs as its
    /// routines (`routines.rs`: the inline math, compiled ahead of time)
    /// where they are faster and as `libm` crate calls otherwise. Inline
    /// math in the kernel measured slower on the GP population: its
    /// expansion makes kernels about 20 times longer, and each primitive's
    /// pass over a block's lanes costs more than the call
    /// (docs/performance.md, "Compile latency, second step: the vector
    /// VM"). Tree walks take one row at a time: the VM runs each row's
    /// step as instructions of its own, so rows side by side only add
    /// dispatch (a 100-tree model: 64 µs a row alone, 88 µs in groups of
    /// 8).
    fn lower_options(&self) -> LowerOptions {
        LowerOptions {
            packed_bools: false,
            panels: None,
            conv_panels: false,
            prefetch: false,
            padded_rest_rows: false,
            transpose_tiles: false,
            libm_calls: true,
            running_min_max: false,
            tree_selects: 0,
            isin_chain: 16,
            tree_block: 1,
        }
    }

    /// Each kernel on its own (the VM has no modules); math calls go to the
    /// VM's routines and the `libm` crate, not to `symbols`.
    fn compile_kernels(
        &self,
        kernels: Vec<Kernel>,
        _: &BackendOptions,
        _: Symbols<'_>,
    ) -> BackendResult<Vec<CompiledKernel>> {
        kernels
            .into_iter()
            .map(|kernel| {
                let vm = compile(&kernel).map_err(|e| BackendError::Failed(e.to_string()))?;
                let entry: HostEntry = Arc::new(move |slots: &[u64]| {
                    // SAFETY: reached only through `CompiledKernel::call`,
                    // whose contract is `VmKernel::call`'s.
                    unsafe { vm.call(slots) }
                });
                // SAFETY: `entry` runs this kernel under `call`'s contract
                // and nothing else holds it.
                Ok(unsafe { CompiledKernel::host(Arc::new(kernel), entry) })
            })
            .collect()
    }
}

/// Why a kernel could not be compiled: an expression no lowering emits
/// (lowering's bug, not the user's).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VmError {
    /// The kernel breaks a precondition `kiln_kernel::verify` states.
    #[error("invalid kernel: {0}")]
    Invalid(String),
}

/// The loop of `op`'s routine on `dtype`, where the VM computes it so
/// ([`math::routine_wins`]).
fn routine1(op: UnaryOp, dtype: DType) -> Option<lanes::Un> {
    math::routine_wins(MathFn::Unary(op), dtype, simd())
        .then(|| routines::unary(op, dtype))
        .flatten()
}

/// [`routine1`] of a binary function.
fn routine2(op: BinaryOp, dtype: DType) -> Option<lanes::Bins> {
    math::routine_wins(MathFn::Binary(op), dtype, simd())
        .then(|| routines::binary(op, dtype))
        .flatten()
}

/// A vector register: the index of [`BLOCK`] lanes (one per row of a
/// block) that holds one kernel register's values. Not a call's slot: the
/// 8-byte argument slots [`VmKernel::call`] takes are the ABI's.
type VReg = u32;

/// Where a loop's trip count comes from.
#[derive(Copy, Clone, Debug)]
enum Trip {
    Fixed(u64),
    /// The parameter's call slot (an `int64_t`).
    Arg(usize),
    /// Lane 0 of a register's vreg.
    Reg(VReg),
}

/// An element index: a register's lanes, `unit` when they are known to be
/// consecutive (the row plus a loop invariant), so a block reads or writes
/// one contiguous run.
#[derive(Copy, Clone, Debug)]
struct Index {
    vreg: VReg,
    unit: bool,
}

#[derive(Copy, Clone)]
enum Inst {
    /// A scalar input (a direct kernel's by value, else behind a pointer).
    Input {
        dst: VReg,
        param: usize,
        dtype: DType,
        by_value: bool,
    },
    Load {
        dst: VReg,
        param: usize,
        index: Index,
        dtype: DType,
        /// Whether a block may read a run of it where it is: an input
        /// array (no store writes it) of 8-byte elements.
        in_place: bool,
        /// Whether the index is a constant (a scalar broadcast over the
        /// rows): one element read for every lane.
        uniform: bool,
    },
    LoadBit {
        dst: VReg,
        param: usize,
        index: VReg,
    },
    Trip {
        dst: VReg,
        trip: Trip,
    },
    Var {
        dst: VReg,
        var: usize,
    },
    Un {
        dst: VReg,
        f: lanes::Un,
        a: VReg,
    },
    /// `sin a` into `dst` and `cos a` into `dst2`, by one routine.
    SinCos {
        dst: VReg,
        dst2: VReg,
        f: lanes::Un2,
        a: VReg,
    },
    Bin {
        dst: VReg,
        f: lanes::Bin,
        a: VReg,
        b: VReg,
    },
    /// A binary op with one constant operand (`k`).
    BinK {
        dst: VReg,
        f: lanes::BinK,
        a: VReg,
        k: u64,
    },
    Select {
        dst: VReg,
        c: VReg,
        a: VReg,
        b: VReg,
    },
    /// `a * b + c` rounded once.
    MulAdd {
        dst: VReg,
        f: lanes::Tern,
        a: VReg,
        b: VReg,
        c: VReg,
    },
    Call {
        dst: VReg,
        f: math::Func,
        a: VReg,
        b: VReg,
    },
    Table {
        dst: VReg,
        bits: &'static [u64],
        index: VReg,
    },
    Fallback {
        dst: VReg,
        f: math::Func,
        a: VReg,
        b: VReg,
        rare: VReg,
        value: VReg,
    },
}

enum Node {
    Inst(Inst),
    /// In a block loop: an instruction whose values are stored to output
    /// `param` at the block's rows (a unit store of 8-byte elements at the
    /// loop's row), computed there rather than in its lanes
    /// ([`outputs_in_place`]); the store then finds them in place. In its
    /// lanes as [`Node::Inst`] where the block streams its stores or the
    /// output is not 8-byte aligned.
    InstTo {
        inst: Inst,
        param: usize,
        row: VReg,
    },
    Check {
        src: VReg,
        status: i32,
    },
    Loop(Box<Loop>),
    Set {
        var: usize,
        src: VReg,
    },
    Store {
        param: usize,
        index: Option<Index>,
        src: VReg,
        dtype: DType,
    },
    KeepRow {
        sel: usize,
        count: usize,
        row: VReg,
        mask: VReg,
    },
    StoreCount {
        param: usize,
        var: usize,
    },
}

struct Loop {
    trip: Trip,
    row: VReg,
    body: Vec<Node>,
    /// Runs [`BLOCK`] rows at a time (else row by row).
    block: bool,
    /// In a block loop: the vregs of registers defined before the loop
    /// (other than constants), spread over the lanes on entry.
    spread: Vec<VReg>,
    /// In a block loop: the bytes a row stores in contiguous runs (its
    /// stores with a unit index), which with the trip decide whether the
    /// runs stream past the caches ([`STREAM_BYTES`]).
    stored: u64,
    /// In a block loop: whether the body reads the row's lanes beyond the
    /// first (else only unit loads and stores read it, from lane 0, and
    /// each block writes that lane alone).
    row_lanes: bool,
}

/// A kernel compiled for the VM. `Send + Sync`; calls from many threads
/// run at once (each thread keeps its own lanes).
pub struct VmKernel {
    body: Vec<Node>,
    vregs: usize,
    /// Each constant's vreg and bits: spread over every lane at each call.
    consts: Vec<(VReg, u64)>,
    /// Each variable's initial bits.
    vars: Vec<u64>,
    /// Whether any loop runs in blocks (else lane 0 is all a call uses).
    blocks: bool,
    params: usize,
}

impl std::fmt::Debug for VmKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VmKernel")
            .field("vregs", &self.vregs)
            .field("consts", &self.consts.len())
            .field("blocks", &self.blocks)
            .finish()
    }
}

/// The loop of the routine computing `sin` and `cos` of one `dtype`
/// operand together, where the VM computes each by its routine: their
/// expansions share the argument's reduction (`routines::sincos`).
fn sincos(dtype: DType) -> Option<lanes::Un2> {
    let by_routine = |op| lanes::unary(op, dtype).is_none() && routine1(op, dtype).is_some();
    (by_routine(UnaryOp::Sin) && by_routine(UnaryOp::Cos))
        .then(|| routines::sincos(dtype))
        .flatten()
}

/// Whether `a` and `b` are `sin x` and `cos x` (in either order) of one
/// `x` that [`sincos`] computes.
fn sincos_pair(kernel: &Kernel, a: &Stmt, b: &Stmt) -> bool {
    let (Stmt::Let(ra, Expr::Unary(op_a, xa)), Stmt::Let(_, Expr::Unary(op_b, xb))) = (a, b) else {
        return false;
    };
    let trig = matches!(
        (op_a, op_b),
        (UnaryOp::Sin, UnaryOp::Cos) | (UnaryOp::Cos, UnaryOp::Sin)
    );
    trig && xa == xb && sincos(kernel.reg_type(*ra)).is_some()
}

/// `body` with each `cos x` moved up to follow the `sin x` before it (or
/// each `sin x` to follow its `cos x`), where a body has both, so that the
/// VM computes the pair by one routine; `None` when nothing moves. Moving
/// a `let` of a pure function of `x` (defined before either) earlier
/// changes nothing a kernel does. One sweep to find the pairs, one to
/// place them (a population's kernel has hundreds of statements).
fn pair_sines(kernel: &Kernel, body: &[Stmt]) -> Option<Vec<Stmt>> {
    let mut moved: Option<Vec<Stmt>> = None;
    for (i, stmt) in body.iter().enumerate() {
        if let Stmt::Loop { body: inner, .. } = stmt {
            if let Some(new) = pair_sines(kernel, inner) {
                let stmts = moved.get_or_insert_with(|| body.to_vec());
                if let Stmt::Loop { body, .. } = &mut stmts[i] {
                    *body = new;
                }
            }
        }
    }
    let stmts = moved.as_deref().unwrap_or(body);
    // The first sine and the first cosine of each operand.
    let mut trig: kiln_kernel::iterations::IndexMap<Reg, [Option<usize>; 2]> = Default::default();
    for (i, stmt) in stmts.iter().enumerate() {
        if let Stmt::Let(r, Expr::Unary(op @ (UnaryOp::Sin | UnaryOp::Cos), x)) = stmt {
            if sincos(kernel.reg_type(*r)).is_some() {
                let at = &mut trig.entry(*x).or_default()[usize::from(*op == UnaryOp::Cos)];
                at.get_or_insert(i);
            }
        }
    }
    // Each pair's second statement by its first's position, and whether
    // a position is a pair's second.
    let mut partner: Vec<Option<usize>> = vec![None; stmts.len()];
    let mut second = vec![false; stmts.len()];
    let mut apart = false;
    for [sin, cos] in trig.into_values() {
        if let (Some(a), Some(b)) = (sin, cos) {
            partner[a.min(b)] = Some(a.max(b));
            second[a.max(b)] = true;
            apart |= a.abs_diff(b) != 1;
        }
    }
    if !apart {
        return moved;
    }
    let mut out = Vec::with_capacity(stmts.len());
    for (i, stmt) in stmts.iter().enumerate() {
        if second[i] {
            continue;
        }
        out.push(stmt.clone());
        if let Some(j) = partner[i] {
            out.push(stmts[j].clone());
        }
    }
    Some(out)
}

/// Compiles `kernel` for the VM.
pub fn compile(kernel: &Kernel) -> Result<VmKernel, VmError> {
    // The body with its sines and cosines paired (the kernel's other
    // fields as they are).
    let paired = pair_sines(kernel, &kernel.body);
    let body = paired.as_deref().unwrap_or(&kernel.body);
    let mut live = Liveness {
        pos: 0,
        def: vec![u32::MAX; kernel.regs.len()],
        last: vec![0; kernel.regs.len()],
        loops: Vec::new(),
    };
    live.number(body);
    live.pos = 0;
    let mut stack = Vec::new();
    let mut next_loop = 0;
    live.uses(body, &mut stack, &mut next_loop);
    let mut cx = Cx {
        kernel,
        live: &live,
        frees: vec![Vec::new(); live.pos as usize + 1],
        vreg_of: vec![u32::MAX; kernel.regs.len()],
        free: Vec::new(),
        vregs: 0,
        consts: Vec::new(),
        const_vreg: HashMap::new(),
        const_of: vec![None; kernel.regs.len()],
        konst: kiln_kernel::iterations::constants(body),
        pos: 0,
        units: Vec::new(),
        blocks: false,
    };
    for (reg, &last) in live.last.iter().enumerate() {
        if live.def[reg] != u32::MAX {
            cx.frees[last as usize].push(reg as u32);
        }
    }
    let body = cx.block(body)?;
    Ok(VmKernel {
        body,
        vregs: cx.vregs as usize,
        consts: cx.consts,
        vars: kernel.vars.iter().map(|s| s.bits()).collect(),
        blocks: cx.blocks,
        params: kernel.params.len(),
    })
}

/// Positions of statements in program order, and each register's live
/// range: from its definition to its last use, a use inside a loop the
/// register was defined outside of counting as a use at that loop's end.
struct Liveness {
    pos: u32,
    def: Vec<u32>,
    last: Vec<u32>,
    /// Each loop's first and last position, in pre-order.
    loops: Vec<(u32, u32)>,
}

impl Liveness {
    fn number(&mut self, stmts: &[Stmt]) {
        for stmt in stmts {
            self.pos += 1;
            match stmt {
                Stmt::Let(reg, _) => self.def[reg.index()] = self.pos,
                Stmt::Loop { row, body, .. } => {
                    self.def[row.index()] = self.pos;
                    let k = self.loops.len();
                    self.loops.push((self.pos, 0));
                    self.number(body);
                    self.pos += 1;
                    self.loops[k].1 = self.pos;
                }
                _ => {}
            }
        }
    }

    fn used(&mut self, reg: Reg, stack: &[usize]) {
        let r = reg.index();
        let def = self.def[r];
        // The outermost enclosing loop entered after the definition.
        let at = stack
            .iter()
            .find(|&&l| self.loops[l].0 > def)
            .map_or(self.pos, |&l| self.loops[l].1);
        self.last[r] = self.last[r].max(at);
    }

    fn uses(&mut self, stmts: &[Stmt], stack: &mut Vec<usize>, next_loop: &mut usize) {
        for stmt in stmts {
            self.pos += 1;
            for used in stmt.operands() {
                self.used(used, stack);
            }
            match stmt {
                // A register never read still lives at its definition.
                Stmt::Let(reg, _) | Stmt::Loop { row: reg, .. } => {
                    let r = reg.index();
                    self.last[r] = self.last[r].max(self.pos);
                }
                _ => {}
            }
            if let Stmt::Loop { body, .. } = stmt {
                stack.push(*next_loop);
                *next_loop += 1;
                self.uses(body, stack, next_loop);
                stack.pop();
                self.pos += 1;
            }
        }
    }
}

/// The translation: vregs assigned in program order as registers are
/// defined, freed after their last use.
struct Cx<'k> {
    kernel: &'k Kernel,
    live: &'k Liveness,
    /// The registers whose last use is each position.
    frees: Vec<Vec<u32>>,
    vreg_of: Vec<VReg>,
    free: Vec<VReg>,
    vregs: u32,
    consts: Vec<(VReg, u64)>,
    const_vreg: HashMap<u64, VReg>,
    /// Each constant register's bits.
    const_of: Vec<Option<u64>>,
    /// Each `i64` constant register's value, for index strides.
    konst: kiln_kernel::iterations::IndexMap<Reg, i64>,
    pos: u32,
    /// In a block loop's body: the registers whose lanes are consecutive
    /// (stride 1), whose loads and stores are contiguous runs.
    units: Vec<Reg>,
    blocks: bool,
}

impl Cx<'_> {
    fn invalid<T>(&self, what: String) -> Result<T, VmError> {
        Err(VmError::Invalid(format!("{}: {what}", self.kernel.name)))
    }

    fn vreg(&self, reg: Reg) -> VReg {
        self.vreg_of[reg.index()]
    }

    fn define(&mut self, reg: Reg) -> VReg {
        let vreg = self.free.pop().unwrap_or_else(|| {
            self.vregs += 1;
            self.vregs - 1
        });
        self.vreg_of[reg.index()] = vreg;
        vreg
    }

    /// Frees the vregs of the registers last used at the current position
    /// (after its definition took a vreg, so a result never shares its
    /// operands' vregs).
    fn release(&mut self) {
        self.release_at(self.pos);
    }

    /// [`Cx::release`] of the registers last used at `pos`.
    fn release_at(&mut self, pos: u32) {
        for r in std::mem::take(&mut self.frees[pos as usize]) {
            if self.const_of[r as usize].is_none() && self.vreg_of[r as usize] != u32::MAX {
                self.free.push(self.vreg_of[r as usize]);
            }
        }
    }

    fn trip(&self, extent: Extent) -> Trip {
        match extent {
            Extent::Fixed(n) => Trip::Fixed(n),
            Extent::Param(p) => Trip::Arg(p.index()),
            Extent::Reg(r) => Trip::Reg(self.vreg(r)),
        }
    }

    fn block(&mut self, stmts: &[Stmt]) -> Result<Vec<Node>, VmError> {
        let mut nodes = Vec::with_capacity(stmts.len());
        let mut stmts = stmts.iter().peekable();
        while let Some(stmt) = stmts.next() {
            self.pos += 1;
            if let Some(next) = stmts.peek() {
                if sincos_pair(self.kernel, stmt, next) {
                    nodes.push(Node::Inst(self.sincos(stmt, next)));
                    stmts.next();
                    continue;
                }
            }
            match stmt {
                Stmt::Let(reg, Expr::Const(c)) => {
                    // Constants of every dtype share a vreg when their
                    // bits agree: a lane is only bits.
                    let bits = c.bits();
                    let vreg = match self.const_vreg.get(&bits) {
                        Some(&s) => s,
                        None => {
                            self.vregs += 1;
                            let s = self.vregs - 1;
                            self.const_vreg.insert(bits, s);
                            self.consts.push((s, bits));
                            s
                        }
                    };
                    self.vreg_of[reg.index()] = vreg;
                    self.const_of[reg.index()] = Some(bits);
                }
                Stmt::Let(reg, expr) => {
                    let inst = self.inst(*reg, expr)?;
                    nodes.push(Node::Inst(inst));
                }
                Stmt::CheckNonZero(reg, check) => nodes.push(Node::Check {
                    src: self.vreg(*reg),
                    status: kiln_kernel::abi::check_status(*check),
                }),
                Stmt::Loop {
                    extent,
                    row,
                    body,
                    iterations,
                } => {
                    let trip = self.trip(*extent);
                    let row_vreg = self.define(*row);
                    self.release();
                    // Positions are numbered as `Liveness` numbers them.
                    let start = self.pos;
                    // A block of rows runs each statement over all of them
                    // before the next: right when the kernel says the rows
                    // are independent (a selection keeps its rows in order
                    // itself), for a loop with no loop inside.
                    let block = iterations.independent()
                        && !body.iter().any(|s| matches!(s, Stmt::Loop { .. }));
                    let spread = if block {
                        self.blocks = true;
                        let mut outer: Vec<VReg> = Vec::new();
                        for stmt in body {
                            for r in stmt.operands() {
                                if self.live.def[r.index()] < start
                                    && self.const_of[r.index()].is_none()
                                    && !outer.contains(&self.vreg(r))
                                {
                                    outer.push(self.vreg(r));
                                }
                            }
                        }
                        outer
                    } else {
                        Vec::new()
                    };
                    if block {
                        self.units = kiln_kernel::iterations::strides(
                            *row,
                            body,
                            &self.konst,
                            &self.kernel.regs,
                        )
                        .into_iter()
                        .filter(|&(_, s)| s == 1)
                        .map(|(r, _)| r)
                        .collect();
                    }
                    let mut inner = self.block(body)?;
                    if block {
                        outputs_in_place(&mut inner, row_vreg, self.vregs as usize);
                    }
                    self.units.clear();
                    self.pos += 1;
                    let stored = if block {
                        inner
                            .iter()
                            .map(|node| match node {
                                Node::Store {
                                    index: Some(Index { unit: true, .. }),
                                    dtype,
                                    ..
                                } => dtype.size_bytes() as u64,
                                _ => 0,
                            })
                            .sum()
                    } else {
                        0
                    };
                    let row_lanes = !block || inner.iter().any(|node| reads_lanes(node, row_vreg));
                    nodes.push(Node::Loop(Box::new(Loop {
                        trip,
                        row: row_vreg,
                        body: inner,
                        block,
                        spread,
                        stored,
                        row_lanes,
                    })));
                }
                Stmt::Set(var, reg) => nodes.push(Node::Set {
                    var: var.index(),
                    src: self.vreg(*reg),
                }),
                Stmt::Store(param, row, reg) => {
                    nodes.push(Node::Store {
                        param: param.index(),
                        index: row.map(|r| Index {
                            vreg: self.vreg(r),
                            unit: self.units.contains(&r),
                        }),
                        src: self.vreg(*reg),
                        dtype: self.kernel.reg_type(*reg),
                    });
                }
                Stmt::KeepRow {
                    sel,
                    count,
                    row,
                    mask,
                } => nodes.push(Node::KeepRow {
                    sel: sel.index(),
                    count: count.index(),
                    row: self.vreg(*row),
                    mask: self.vreg(*mask),
                }),
                Stmt::StoreCount(param, var) => nodes.push(Node::StoreCount {
                    param: param.index(),
                    var: var.index(),
                }),
                // A hint for a cache the VM's dispatch does not outrun.
                Stmt::Prefetch(..) => {}
            }
            self.release();
        }
        Ok(nodes)
    }

    fn inst(&mut self, reg: Reg, expr: &Expr) -> Result<Inst, VmError> {
        let dtype = self.kernel.reg_type(reg);
        // Operands' vregs before the result takes one.
        let s = |r: &Reg| self.vreg_of[r.index()];
        let inst = match expr {
            Expr::Input(p) => Inst::Input {
                dst: 0,
                param: p.index(),
                dtype,
                by_value: self.kernel.direct,
            },
            Expr::Load(p, r) => Inst::Load {
                dst: 0,
                param: p.index(),
                index: Index {
                    vreg: s(r),
                    unit: self.units.contains(r),
                },
                dtype,
                in_place: dtype.size_bytes() == 8
                    && matches!(
                        self.kernel.params[p.index()],
                        kiln_kernel::Param::ArrayIn { .. }
                    ),
                uniform: self.const_of[r.index()].is_some(),
            },
            Expr::LoadBit(p, r) => Inst::LoadBit {
                dst: 0,
                param: p.index(),
                index: s(r),
            },
            Expr::Const(_) => unreachable!("constants take no instruction"),
            Expr::ExtentValue(e) => Inst::Trip {
                dst: 0,
                trip: self.trip(*e),
            },
            Expr::Var(v) => Inst::Var {
                dst: 0,
                var: v.index(),
            },
            Expr::Unary(op, a) => match (lanes::unary(*op, dtype), math::unary(*op, dtype)) {
                (Some(f), _) => Inst::Un { dst: 0, f, a: s(a) },
                (None, _) if let Some(f) = routine1(*op, dtype) => Inst::Un { dst: 0, f, a: s(a) },
                (None, Some(f)) => Inst::Call {
                    dst: 0,
                    f,
                    a: s(a),
                    b: s(a),
                },
                (None, None) => return self.invalid(format!("`{op}` on {dtype}")),
            },
            Expr::Binary(op, a, b) => match (lanes::binary(*op, dtype), math::binary(*op, dtype)) {
                (Some(f), _) => self.binary(f, *a, *b),
                (None, _) if let Some(f) = routine2(*op, dtype) => self.binary(f, *a, *b),
                (None, Some(f)) => Inst::Call {
                    dst: 0,
                    f,
                    a: s(a),
                    b: s(b),
                },
                (None, None) => return self.invalid(format!("`{op}` on {dtype}")),
            },
            Expr::Compare(op, a, b) => {
                let operand = self.kernel.reg_type(*a);
                match lanes::compare(*op, operand) {
                    Some(f) => self.binary(f, *a, *b),
                    None => return self.invalid(format!("`{op}` of {operand}")),
                }
            }
            Expr::MulAdd(a, b, c) => match lanes::mul_add(dtype) {
                Some(f) => Inst::MulAdd {
                    dst: 0,
                    f,
                    a: s(a),
                    b: s(b),
                    c: s(c),
                },
                None => return self.invalid(format!("a fused multiply-add of {dtype}")),
            },
            Expr::Select(c, a, b) => Inst::Select {
                dst: 0,
                c: s(c),
                a: s(a),
                b: s(b),
            },
            Expr::Cast(to, a) => {
                let from = self.kernel.reg_type(*a);
                match lanes::cast(from, *to) {
                    Some(f) => Inst::Un { dst: 0, f, a: s(a) },
                    None => return self.invalid(format!("a cast of {from} to {to}")),
                }
            }
            // Same bits: a lane is only bits (zero-extended either way).
            Expr::Bitcast(_, a) => Inst::Un {
                dst: 0,
                f: lanes::cast(DType::I64, DType::I64).expect("the identity"),
                a: s(a),
            },
            Expr::Table(table, index) => Inst::Table {
                dst: 0,
                bits: table.bits,
                index: s(index),
            },
            Expr::Fallback { call, rare, value } => {
                let (f, a, b) = match *call {
                    MathCall::Unary(op, a) => (math::unary(op, dtype), a, a),
                    MathCall::Binary(op, a, b) => (math::binary(op, dtype), a, b),
                };
                let Some(f) = f else {
                    return self.invalid(format!("a fallback to {call:?} on {dtype}"));
                };
                Inst::Fallback {
                    dst: 0,
                    f,
                    a: s(&a),
                    b: s(&b),
                    rare: s(rare),
                    value: s(value),
                }
            }
        };
        let dst = self.define(reg);
        Ok(with_dst(inst, dst))
    }
}

impl Cx<'_> {
    /// The [`Inst::SinCos`] of a [`sincos_pair`], at the first's position
    /// (the current one; the second's follows). Both results take their
    /// vregs before either position releases any, so they never share one.
    fn sincos(&mut self, first: &Stmt, second: &Stmt) -> Inst {
        let (Stmt::Let(r1, Expr::Unary(op, x)), Stmt::Let(r2, _)) = (first, second) else {
            unreachable!("a sincos pair is two lets of unary ops");
        };
        let f = sincos(self.kernel.reg_type(*r1)).expect("a sincos pair's routine");
        let a = self.vreg(*x);
        let d1 = self.define(*r1);
        self.pos += 1;
        let d2 = self.define(*r2);
        self.release_at(self.pos - 1);
        self.release();
        let (dst, dst2) = if *op == UnaryOp::Sin {
            (d1, d2)
        } else {
            (d2, d1)
        };
        Inst::SinCos { dst, dst2, f, a }
    }

    /// A binary op's instruction: a constant operand (the second, or the
    /// first when the second is not one) is passed as `k`.
    fn binary(&self, f: lanes::Bins, a: Reg, b: Reg) -> Inst {
        let konst = |r: Reg| self.const_of[r.index()];
        match (konst(a), konst(b)) {
            (_, Some(k)) => Inst::BinK {
                dst: 0,
                f: f.vk,
                a: self.vreg(a),
                k,
            },
            (Some(k), None) => Inst::BinK {
                dst: 0,
                f: f.kv,
                a: self.vreg(b),
                k,
            },
            (None, None) => Inst::Bin {
                dst: 0,
                f: f.vv,
                a: self.vreg(a),
                b: self.vreg(b),
            },
        }
    }
}

/// Marks the instructions of a block loop's `body` whose results a unit
/// store of 8-byte elements at the loop's `row` writes to an output
/// ([`Node::InstTo`]): each computes its values there, and the store (the
/// first of that value, if several) copies nothing. Only the instructions
/// that write their results through a pointer
/// ([`Inst::writes_through_pointer`]), with no check between them and the
/// store (an output is written no earlier than before when a check fails)
/// and the row's vreg not redefined between them. One pass over the body;
/// `vregs` bounds its vregs.
fn outputs_in_place(body: &mut [Node], row: VReg, vregs: usize) {
    // Each vreg's defining instruction while it may still be placed.
    let mut def: Vec<Option<usize>> = vec![None; vregs];
    for i in 0..body.len() {
        match body[i] {
            Node::Inst(inst) => {
                let dsts = match inst {
                    Inst::SinCos { dst, dst2, .. } => [dst, dst2],
                    _ => [inst.dst(); 2],
                };
                if dsts.contains(&row) {
                    def.fill(None);
                }
                for dst in dsts {
                    def[dst as usize] = None;
                }
                if inst.writes_through_pointer() {
                    def[inst.dst() as usize] = Some(i);
                }
            }
            Node::Check { .. } | Node::Loop(_) => def.fill(None),
            Node::Store {
                param,
                index: Some(Index { vreg, unit: true }),
                src,
                dtype,
            } if vreg == row && dtype.size_bytes() == 8 => {
                if let Some(d) = def[src as usize].take() {
                    if let Node::Inst(inst) = body[d] {
                        body[d] = Node::InstTo { inst, param, row };
                    }
                }
            }
            _ => {}
        }
    }
}

/// Whether `node` reads more of `vreg` than its first lane (all a unit
/// index's loads and stores read of their row).
fn reads_lanes(node: &Node, vreg: VReg) -> bool {
    match node {
        // The row's first lane places the values.
        Node::Inst(inst) | Node::InstTo { inst, .. } => match *inst {
            Inst::Input { .. } | Inst::Trip { .. } | Inst::Var { .. } => false,
            Inst::Load { index, .. } => !index.unit && index.vreg == vreg,
            Inst::LoadBit { index, .. } | Inst::Table { index, .. } => index == vreg,
            Inst::Un { a, .. } | Inst::SinCos { a, .. } | Inst::BinK { a, .. } => a == vreg,
            Inst::Bin { a, b, .. } | Inst::Call { a, b, .. } => a == vreg || b == vreg,
            Inst::Select { c, a, b, .. } | Inst::MulAdd { a, b, c, .. } => {
                [a, b, c].contains(&vreg)
            }
            Inst::Fallback {
                a, b, rare, value, ..
            } => [a, b, rare, value].contains(&vreg),
        },
        Node::Check { src, .. } | Node::Set { src, .. } => *src == vreg,
        Node::Store { index, src, .. } => {
            *src == vreg || index.is_some_and(|i| !i.unit && i.vreg == vreg)
        }
        Node::KeepRow { row, mask, .. } => *row == vreg || *mask == vreg,
        Node::StoreCount { .. } => false,
        Node::Loop(_) => true,
    }
}

impl Inst {
    /// Its result's vreg (a sine and cosine's sine's).
    fn dst_mut(&mut self) -> &mut VReg {
        match self {
            Inst::Input { dst, .. }
            | Inst::Load { dst, .. }
            | Inst::LoadBit { dst, .. }
            | Inst::Trip { dst, .. }
            | Inst::Var { dst, .. }
            | Inst::Un { dst, .. }
            | Inst::SinCos { dst, .. }
            | Inst::Bin { dst, .. }
            | Inst::BinK { dst, .. }
            | Inst::Select { dst, .. }
            | Inst::MulAdd { dst, .. }
            | Inst::Call { dst, .. }
            | Inst::Table { dst, .. }
            | Inst::Fallback { dst, .. } => dst,
        }
    }

    /// Its result's vreg (a sine and cosine's sine's).
    fn dst(mut self) -> VReg {
        *self.dst_mut()
    }

    /// Whether it writes its one result through a destination pointer,
    /// which may be an output's run ([`outputs_in_place`]): math routines,
    /// binary ops, multiply-adds and selects.
    fn writes_through_pointer(&self) -> bool {
        matches!(
            self,
            Inst::Un { .. }
                | Inst::Bin { .. }
                | Inst::BinK { .. }
                | Inst::MulAdd { .. }
                | Inst::Select { .. }
        )
    }
}

fn with_dst(mut inst: Inst, vreg: VReg) -> Inst {
    assert!(
        !matches!(inst, Inst::SinCos { .. }),
        "a sine and cosine's vregs are set where it is made"
    );
    *inst.dst_mut() = vreg;
    inst
}

thread_local! {
    /// Each thread's lanes, reused across calls.
    static LANES: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
    /// Each thread's [`Run::ext`], reused across calls.
    static EXT: RefCell<Vec<*const u64>> = const { RefCell::new(Vec::new()) };
}

impl VmKernel {
    /// Calls the kernel: `slots[i]` holds parameter `i` in 8 bytes, exactly
    /// as for machine code (`kiln_kernel::abi::CompiledKernel::call`).
    /// Returns the status.
    ///
    /// # Safety
    /// `slots` has one entry per parameter, every pointer valid for the
    /// kernel's reads or writes of as many elements as `abi::args` says,
    /// and no output or scratch buffer overlaps another buffer.
    pub unsafe fn call(&self, slots: &[u64]) -> i32 {
        assert_eq!(slots.len(), self.params, "one slot per parameter");
        let width = if self.blocks { BLOCK } else { 1 };
        let mut lanes = LANES.with(|l| std::mem::take(&mut *l.borrow_mut()));
        // Every lane is written before it is read: only new room is zeroed.
        if lanes.len() < self.vregs * width {
            lanes.resize(self.vregs * width, 0);
        }
        for &(vreg, bits) in &self.consts {
            let at = vreg as usize * width;
            lanes[at..at + width].fill(bits);
        }
        let mut ext = EXT.with(|e| std::mem::take(&mut *e.borrow_mut()));
        ext.clear();
        ext.resize(self.vregs, std::ptr::null());
        let mut run = Run {
            lanes: &mut lanes,
            ext: &mut ext,
            width,
            vars: self.vars.clone(),
            args: slots,
            stream: false,
            block: false,
        };
        // SAFETY: the caller's contract.
        let status = match unsafe { run.nodes(&self.body, 1) } {
            Ok(()) => kiln_kernel::abi::STATUS_OK,
            Err(status) => status,
        };
        LANES.with(|l| *l.borrow_mut() = lanes);
        EXT.with(|e| *e.borrow_mut() = ext);
        status
    }
}

/// One call's state.
struct Run<'a> {
    lanes: &'a mut Vec<u64>,
    /// Per vreg: null while its values are in its lanes, else where a load
    /// in a block left them (a run of the input, read in place: an 8-byte
    /// column needs no copy). Read through [`Run::src`].
    ext: &'a mut Vec<*const u64>,
    /// Lanes per vreg.
    width: usize,
    vars: Vec<u64>,
    args: &'a [u64],
    /// Whether the block loop running stores its runs past the caches.
    stream: bool,
    /// Whether a block loop is running (where loads may read in place).
    block: bool,
}

/// Reads one element of `dtype` at `ptr` as a lane (a `bool` byte is true
/// when not 0).
///
/// # Safety
/// `ptr` is valid for reading an element of `dtype`.
#[inline]
unsafe fn read(ptr: *const u8, dtype: DType) -> u64 {
    // SAFETY: the caller's contract; unaligned reads, as machine code's.
    unsafe {
        match dtype {
            DType::Bool => u64::from(ptr.read() != 0),
            DType::I32 | DType::F32 => u64::from(ptr.cast::<u32>().read_unaligned()),
            DType::I64 | DType::F64 => ptr.cast::<u64>().read_unaligned(),
        }
    }
}

/// Writes a lane as one element of `dtype` at `ptr`.
///
/// # Safety
/// `ptr` is valid for writing an element of `dtype`.
#[inline]
unsafe fn write(ptr: *mut u8, dtype: DType, lane: u64) {
    // SAFETY: the caller's contract.
    unsafe {
        match dtype {
            DType::Bool => ptr.write(lane as u8),
            DType::I32 | DType::F32 => ptr.cast::<u32>().write_unaligned(lane as u32),
            DType::I64 | DType::F64 => ptr.cast::<u64>().write_unaligned(lane),
        }
    }
}

impl Run<'_> {
    fn at(&self, vreg: VReg) -> usize {
        vreg as usize * self.width
    }

    /// Where `vreg`'s values are: its lanes, or the input run a load left
    /// it reading ([`Run::ext`]).
    fn src(&self, vreg: VReg) -> *const u64 {
        let ext = self.ext[vreg as usize];
        if ext.is_null() {
            self.lanes.as_ptr().wrapping_add(self.at(vreg))
        } else {
            ext
        }
    }

    /// `vreg`'s first value.
    fn first(&self, vreg: VReg) -> u64 {
        // SAFETY: a vreg's lanes, or an input run of at least one element
        // (a load's in a block of at least one row).
        unsafe { self.src(vreg).read() }
    }

    /// `vreg`'s first `n` values.
    ///
    /// # Safety
    /// `n` is at most the lanes the current block runs.
    unsafe fn values(&self, vreg: VReg, n: usize) -> &[u64] {
        // SAFETY: lanes hold `width >= n` values per vreg; an input run
        // holds the block's rows (the caller's contract).
        unsafe { std::slice::from_raw_parts(self.src(vreg), n) }
    }

    fn trip(&self, trip: Trip) -> u64 {
        match trip {
            Trip::Fixed(n) => n,
            Trip::Arg(p) => self.args[p],
            Trip::Reg(s) => self.first(s),
        }
    }

    fn ptr(&self, param: usize) -> *mut u8 {
        self.args[param] as usize as *mut u8
    }

    /// Runs `nodes` over `n` lanes (1 outside block loops).
    ///
    /// # Safety
    /// [`VmKernel::call`]'s contract.
    unsafe fn nodes(&mut self, nodes: &[Node], n: usize) -> Result<(), i32> {
        for node in nodes {
            match node {
                // SAFETY: the caller's contract.
                Node::Inst(inst) => unsafe { self.inst(inst, n, None) },
                Node::InstTo { inst, param, row } => {
                    let to = self
                        .ptr(*param)
                        .wrapping_add(self.first(*row) as usize * 8)
                        .cast::<u64>();
                    let to = (!self.stream && to.is_aligned()).then_some(to);
                    // SAFETY: the caller's contract; the store after it
                    // writes rows `row..row + n` of the output (lowering's
                    // indices, the contract's buffers), which no other
                    // buffer overlaps.
                    unsafe { self.inst(inst, n, to) }
                }
                Node::Check { src, status } => {
                    // SAFETY: `n` lanes of the block.
                    if unsafe { self.values(*src, n) }.contains(&0) {
                        return Err(*status);
                    }
                }
                // SAFETY: the caller's contract.
                Node::Loop(l) => unsafe { self.run_loop(l)? },
                Node::Set { var, src } => self.vars[*var] = self.first(*src),
                Node::Store {
                    param,
                    index,
                    src,
                    dtype,
                } => {
                    let base = self.ptr(*param);
                    let size = dtype.size_bytes();
                    match index {
                        // SAFETY: a scalar output's pointer (or a direct
                        // kernel's returned cell), valid per the contract.
                        None => unsafe { write(base, *dtype, self.first(*src)) },
                        Some(index) if index.unit => {
                            let first = self.first(index.vreg) as usize;
                            let to = base.wrapping_add(first * size);
                            // Computed there already (`Node::InstTo`).
                            if std::ptr::eq(self.src(*src).cast::<u8>(), to) {
                                continue;
                            }
                            // SAFETY: rows `first..first + n` are inside the
                            // array (lowering's indices, the contract's
                            // buffers); `n` lanes of the block.
                            unsafe { store_run(self.values(*src, n), to, *dtype, self.stream) };
                        }
                        Some(index) => {
                            // SAFETY: `n` lanes of the block.
                            let (rows, values) =
                                unsafe { (self.values(index.vreg, n), self.values(*src, n)) };
                            for (&row, &value) in rows.iter().zip(values) {
                                // SAFETY: lowering keeps indices inside the
                                // array the contract makes valid.
                                unsafe {
                                    write(base.wrapping_add(row as usize * size), *dtype, value)
                                }
                            }
                        }
                    }
                }
                Node::KeepRow {
                    sel,
                    count,
                    row,
                    mask,
                } => {
                    let base = self.ptr(*sel).cast::<u32>();
                    let mut kept = self.vars[*count];
                    // SAFETY: `n` lanes of the block.
                    let (rows, masks) = unsafe { (self.values(*row, n), self.values(*mask, n)) };
                    for (&row, &mask) in rows.iter().zip(masks) {
                        // SAFETY: the selection has room for a row per row
                        // of the loop, and at most `row` rows are kept
                        // before row `row`.
                        unsafe { base.wrapping_add(kept as usize).write_unaligned(row as u32) };
                        kept += mask;
                    }
                    self.vars[*count] = kept;
                }
                Node::StoreCount { param, var } => {
                    // SAFETY: the count's `int64_t` pointer.
                    unsafe { write(self.ptr(*param), DType::I64, self.vars[*var]) }
                }
            }
        }
        Ok(())
    }

    /// # Safety
    /// [`VmKernel::call`]'s contract.
    unsafe fn run_loop(&mut self, l: &Loop) -> Result<(), i32> {
        let trip = self.trip(l.trip);
        let row = self.at(l.row);
        // Only a block's loads leave a vreg reading an input (and a block
        // loop has no loop inside): outside blocks, every vreg's values are
        // in its lanes.
        if !l.block {
            for r in 0..trip {
                self.lanes[row] = r;
                // SAFETY: the caller's contract.
                unsafe { self.nodes(&l.body, 1)? };
            }
            return Ok(());
        }
        let spread = (trip as usize).min(self.width);
        for &s in &l.spread {
            let at = self.at(s);
            let v = self.lanes[at];
            self.lanes[at..at + spread].fill(v);
        }
        self.stream = l.stored.saturating_mul(trip) >= STREAM_BYTES;
        self.block = true;
        let mut start = 0u64;
        let mut ran = Ok(());
        while start < trip {
            let n = ((trip - start) as usize).min(self.width);
            // The row's vreg may have served a load after the row's last
            // use in the block before.
            self.ext[l.row as usize] = std::ptr::null();
            if l.row_lanes {
                for (i, lane) in self.lanes[row..row + n].iter_mut().enumerate() {
                    *lane = start + i as u64;
                }
            } else {
                self.lanes[row] = start;
            }
            // SAFETY: the caller's contract.
            ran = unsafe { self.nodes(&l.body, n) };
            if ran.is_err() {
                break;
            }
            start += n as u64;
        }
        self.block = false;
        self.ext.fill(std::ptr::null());
        if std::mem::take(&mut self.stream) {
            stream::fence();
        }
        ran
    }

    /// # Safety
    /// [`VmKernel::call`]'s contract; `to`, where given, is valid for
    /// writing `n` elements apart from every other buffer, and `inst`
    /// one that writes through its destination pointer
    /// ([`outputs_in_place`]).
    unsafe fn inst(&mut self, inst: &Inst, n: usize, to: Option<*mut u64>) {
        // A result's values go to its lanes (a load's may stay in its
        // input instead, below). Outside blocks no vreg reads an input, so
        // a loop run row by row pays nothing for it.
        if self.block {
            self.ext[inst.dst() as usize] = std::ptr::null();
            if let Inst::SinCos { dst2, .. } = *inst {
                self.ext[dst2 as usize] = std::ptr::null();
            }
        }
        let p = self.lanes.as_mut_ptr();
        let w = self.width;
        let lane = |s: VReg| s as usize * w;
        // Where the result goes: its lanes, or the output (the values
        // stay there for the instructions after it, as a load's in its
        // input).
        let d = |s: VReg| to.unwrap_or_else(|| p.wrapping_add(lane(s)));
        if let Some(to) = to {
            debug_assert!(inst.writes_through_pointer());
            self.ext[inst.dst() as usize] = to;
        }
        match *inst {
            Inst::Input {
                dst,
                param,
                dtype,
                by_value,
            } => {
                let v = if by_value {
                    Scalar::from_bits(dtype, self.args[param]).bits()
                } else {
                    // SAFETY: a scalar input's pointer.
                    unsafe { read(self.ptr(param), dtype) }
                };
                self.lanes[lane(dst)..lane(dst) + n].fill(v);
            }
            Inst::Load {
                dst,
                param,
                index,
                dtype,
                in_place,
                uniform,
            } => {
                let base = self.ptr(param).cast_const();
                let size = dtype.size_bytes();
                if index.unit {
                    let from = base.wrapping_add(self.first(index.vreg) as usize * size);
                    // In a block, an aligned run of an input's 8-byte
                    // elements is read where it is: they are lanes' bits
                    // already, and nothing writes an input.
                    if in_place && self.block && from.cast::<u64>().is_aligned() {
                        self.ext[dst as usize] = from.cast();
                        return;
                    }
                    let out = &mut self.lanes[lane(dst)..lane(dst) + n];
                    // SAFETY: rows `first..first + n` are inside the array
                    // (lowering's indices, the contract's buffers).
                    unsafe { load_run(out, from, dtype) };
                } else if uniform {
                    let row = self.first(index.vreg) as usize;
                    // SAFETY: as above, one element.
                    let v = unsafe { read(base.wrapping_add(row * size), dtype) };
                    self.lanes[lane(dst)..lane(dst) + n].fill(v);
                } else {
                    let rows = self.src(index.vreg);
                    for i in 0..n {
                        // SAFETY: `n` lanes of the block.
                        let row = unsafe { rows.add(i).read() } as usize;
                        // SAFETY: as above, one element.
                        self.lanes[lane(dst) + i] =
                            unsafe { read(base.wrapping_add(row * size), dtype) };
                    }
                }
            }
            Inst::LoadBit { dst, param, index } => {
                let base = self.ptr(param).cast_const();
                let rows = self.src(index);
                for i in 0..n {
                    // SAFETY: `n` lanes of the block.
                    let row = unsafe { rows.add(i).read() };
                    // SAFETY: the bitmap holds a bit per row.
                    let byte = unsafe { base.wrapping_add((row >> 3) as usize).read() };
                    self.lanes[lane(dst) + i] = u64::from((byte >> (row & 7)) & 1);
                }
            }
            Inst::Trip { dst, trip } => {
                let v = self.trip(trip);
                self.lanes[lane(dst)..lane(dst) + n].fill(v);
            }
            Inst::Var { dst, var } => {
                let v = self.vars[var];
                self.lanes[lane(dst)..lane(dst) + n].fill(v);
            }
            // SAFETY: slots are `w >= n` lanes inside `lanes` (operands
            // may be `n` elements of an input or an output instead, a
            // result `n` elements of an output: `to`), and a result's vreg
            // is never an operand's (`Cx::release`).
            Inst::Un { dst, f, a } => unsafe { f(d(dst), self.src(a), n) },
            // SAFETY: as above, and the two results' vregs differ (both
            // are defined before anything is released: `Cx::block`).
            Inst::SinCos { dst, dst2, f, a } => unsafe {
                f(p.add(lane(dst)), p.add(lane(dst2)), self.src(a), n)
            },
            // SAFETY: as above.
            Inst::Bin { dst, f, a, b } => unsafe { f(d(dst), self.src(a), self.src(b), n) },
            // SAFETY: as above.
            Inst::BinK { dst, f, a, k } => unsafe { f(d(dst), self.src(a), k, n) },
            // SAFETY: as above.
            Inst::MulAdd { dst, f, a, b, c } => unsafe {
                f(d(dst), self.src(a), self.src(b), self.src(c), n)
            },
            // SAFETY: as above.
            Inst::Select { dst, c, a, b } => unsafe {
                lanes::select(d(dst), self.src(c), self.src(a), self.src(b), n)
            },
            Inst::Call { dst, f, a, b } => {
                let (a, b) = (self.src(a), self.src(b));
                for i in 0..n {
                    // SAFETY: as above.
                    let v = unsafe { f.call(a.add(i).read(), b.add(i).read()) };
                    self.lanes[lane(dst) + i] = v;
                }
            }
            Inst::Table { dst, bits, index } => {
                let index = self.src(index);
                for i in 0..n {
                    // SAFETY: `n` lanes of the block.
                    let k = unsafe { index.add(i).read() } as usize;
                    // Lowering masks the index into the table.
                    self.lanes[lane(dst) + i] = bits.get(k).copied().unwrap_or(0);
                }
            }
            Inst::Fallback {
                dst,
                f,
                a,
                b,
                rare,
                value,
            } => {
                let (a, b, rare, value) =
                    (self.src(a), self.src(b), self.src(rare), self.src(value));
                for i in 0..n {
                    // SAFETY: `n` lanes of the block.
                    let v = unsafe {
                        if rare.add(i).read() != 0 {
                            f.call(a.add(i).read(), b.add(i).read())
                        } else {
                            value.add(i).read()
                        }
                    };
                    self.lanes[lane(dst) + i] = v;
                }
            }
        }
    }
}

/// Writes lanes as `lanes.len()` consecutive elements of `dtype` at `to`;
/// with `stream`, 8- and 4-byte elements past the caches where the target
/// has such stores (the caller fences once its stores are done:
/// [`stream::fence`]).
///
/// # Safety
/// `to` is valid for writing that many elements.
pub(crate) unsafe fn store_run(lanes: &[u64], to: *mut u8, dtype: DType, stream: bool) {
    // SAFETY: the caller's contract.
    unsafe {
        match dtype {
            DType::I64 | DType::F64 if stream => stream::store_u64(lanes, to),
            DType::I32 | DType::F32 if stream => stream::store_u32(lanes, to),
            DType::I64 | DType::F64 => {
                std::ptr::copy_nonoverlapping(lanes.as_ptr().cast::<u8>(), to, lanes.len() * 8)
            }
            DType::I32 | DType::F32 => {
                let to = to.cast::<u32>();
                for (i, &lane) in lanes.iter().enumerate() {
                    to.add(i).write_unaligned(lane as u32);
                }
            }
            DType::Bool => {
                for (i, &lane) in lanes.iter().enumerate() {
                    to.add(i).write(lane as u8);
                }
            }
        }
    }
}

/// Reads `out.len()` consecutive elements of `dtype` from `from` into
/// lanes.
///
/// # Safety
/// `from` is valid for reading that many elements.
unsafe fn load_run(out: &mut [u64], from: *const u8, dtype: DType) {
    let n = out.len();
    // SAFETY: the caller's contract; unaligned where the dtype is wider
    // than a byte (Arrow buffers are aligned, slices of them need not be).
    unsafe {
        match dtype {
            DType::I64 | DType::F64 => {
                std::ptr::copy_nonoverlapping(from, out.as_mut_ptr().cast::<u8>(), n * 8)
            }
            DType::I32 | DType::F32 => {
                let from = from.cast::<u32>();
                for (i, lane) in out.iter_mut().enumerate() {
                    *lane = u64::from(from.add(i).read_unaligned());
                }
            }
            DType::Bool => {
                for (i, lane) in out.iter_mut().enumerate() {
                    *lane = u64::from(from.add(i).read() != 0);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(text: &str) -> Kernel {
        let graph = kiln_ir::text::parse(text).expect("parses");
        let verified = kiln_ir::verify(graph).expect("verifies");
        kiln_kernel::lower(&verified, &Vm.lower_options()).expect("lowers")
    }

    #[test]
    fn row_loops_run_in_blocks_and_carried_ones_row_by_row() {
        let map = kernel(
            "graph \"g\"\nv0: f64[n] = input \"x\"\nv1: f64 = const 2.0\nv2: f64[n] = mul v0, v1\noutput \"y\" = v2\n",
        );
        let vm = compile(&map).unwrap();
        assert!(vm.blocks, "{:?}", map.body);
        // A row stores 8 bytes in a run: the loop streams its stores from
        // `STREAM_BYTES / 8` rows on.
        let stored: Vec<u64> = vm
            .body
            .iter()
            .filter_map(|n| match n {
                Node::Loop(l) if l.block => Some(l.stored),
                _ => None,
            })
            .collect();
        assert_eq!(stored, [8]);
        let sum =
            kernel("graph \"g\"\nv0: f64[n] = input \"x\"\nv1: f64 = sum v0\noutput \"y\" = v1\n");
        assert!(!compile(&sum).unwrap().blocks);
        // Vector registers are reused: a chain of 200 ops needs a handful.
        let mut text = String::from("graph \"g\"\nv0: f64[n] = input \"x\"\n");
        for i in 1..200 {
            text.push_str(&format!("v{i}: f64[n] = sin v{}\n", i - 1));
        }
        text.push_str("output \"y\" = v199\n");
        let chain = compile(&kernel(&text)).unwrap();
        assert!(chain.vregs <= 4, "{} vregs", chain.vregs);
    }

    /// The block loops' `row_lanes` flags, in order.
    fn row_lanes(nodes: &[Node]) -> Vec<bool> {
        nodes
            .iter()
            .filter_map(|n| match n {
                Node::Loop(l) if l.block => Some(l.row_lanes),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn inputs_are_read_in_place_and_rows_spread_only_when_read() {
        // `a` reads `x` and `y` in runs, `b` is a scalar broadcast (one
        // element read for every row), `c` stores `x` itself.
        let text = "graph \"g\"\nv0: f64[n] = input \"x\"\nv1: f64[n] = input \"y\"\n\
                    v2: f64 = input \"s\"\nv3: f64[n] = mul v0, v1\nv4: f64 = mul v2, v2\n\
                    v5: f64[n] = broadcast_to v4\nv6: f64[n] = add v3, v0\nv7: f64[n] = neg v0\n\
                    output \"a\" = v6\noutput \"b\" = v5\noutput \"c\" = v7\n";
        let map = kernel(text);
        let vm = compile(&map).unwrap();
        // Only unit loads and stores read the rows: no loop spreads them.
        assert!(row_lanes(&vm.body).iter().all(|&r| !r), "{:?}", map.body);
        // A filter keeps the rows themselves: every lane of the row.
        let filter = kernel(
            "graph \"g\"\nv0: f64[n] = input \"x\"\nv1: f64 = const 2.0\n\
             v2: bool[n] = gt v0, v1\nv3: sel[n] = filter v2\noutput \"rows\" = v3\n",
        );
        let kept = compile(&filter).unwrap();
        assert_eq!(row_lanes(&kept.body), [true], "{:?}", filter.body);
        // Several blocks and a tail; `x` once 8-byte aligned (read in
        // place) and once 4 bytes off (copied): the same values.
        let n = 3 * BLOCK + 5;
        let x: Vec<f64> = (0..n).map(|i| i as f64 * 0.5 - 100.0).collect();
        let y: Vec<f64> = (0..n).map(|i| (i % 7) as f64 + 0.25).collect();
        let s = 1.5f64;
        let mut bytes = vec![0u8; n * 8 + 12];
        for offset in [0usize, 4] {
            let at = bytes.as_ptr().align_offset(8) + offset;
            for (i, v) in x.iter().enumerate() {
                bytes[at + 8 * i..at + 8 * i + 8].copy_from_slice(&v.to_ne_bytes());
            }
            let xs = bytes[at..].as_ptr();
            let (mut a, mut b, mut c) = (vec![0.0f64; n], vec![0.0f64; n], vec![0.0f64; n]);
            let mut scratch = [0.0f64; 4];
            let slots: Vec<u64> = map
                .params
                .iter()
                .map(|p| match p {
                    kiln_kernel::Param::ArrayIn { name, .. } if name == "x" => xs as u64,
                    kiln_kernel::Param::ArrayIn { .. } => y.as_ptr() as u64,
                    kiln_kernel::Param::ScalarIn { .. } if map.direct => s.to_bits(),
                    kiln_kernel::Param::ScalarIn { .. } => &s as *const f64 as u64,
                    kiln_kernel::Param::Extent { .. } => n as u64,
                    kiln_kernel::Param::ArrayOut { name, .. } => match name.as_str() {
                        "a" => a.as_mut_ptr() as u64,
                        "b" => b.as_mut_ptr() as u64,
                        _ => c.as_mut_ptr() as u64,
                    },
                    kiln_kernel::Param::Scratch { .. } => scratch.as_mut_ptr() as u64,
                    other => panic!("{other:?}"),
                })
                .collect();
            // SAFETY: a slot per parameter, each buffer `n` elements (the
            // scratch one), nothing overlapping.
            let status = unsafe { vm.call(&slots) };
            assert_eq!(status, kiln_kernel::abi::STATUS_OK);
            for i in 0..n {
                assert_eq!(
                    a[i].to_bits(),
                    (x[i] * y[i] + x[i]).to_bits(),
                    "{offset} {i}"
                );
                assert_eq!(b[i].to_bits(), (s * s).to_bits(), "{offset} {i}");
                assert_eq!(c[i].to_bits(), (-x[i]).to_bits(), "{offset} {i}");
            }
        }
    }

    /// The instructions of a compiled kernel computed in an output, in any
    /// loop.
    fn in_place_count(nodes: &[Node]) -> usize {
        nodes
            .iter()
            .map(|n| match n {
                Node::InstTo { .. } => 1,
                Node::Loop(l) => in_place_count(&l.body),
                _ => 0,
            })
            .sum()
    }

    #[test]
    fn results_stored_to_outputs_are_computed_there() {
        // `a` is read after it is stored, `b` stored twice, `e` (a sine
        // paired with a cosine) and the `i32` `f` through their lanes.
        let map = kernel(
            "graph \"g\"\nv0: f64[n] = input \"x\"\nv1: f64[n] = input \"y\"\n\
             v2: f64[n] = mul v0, v1\nv3: f64[n] = sqrt v1\nv4: f64[n] = add v2, v3\n\
             v5: f64[n] = sin v0\nv6: f64[n] = cos v0\nv7: f64[n] = mul v5, v6\n\
             v8: i32[n] = cast v0\noutput \"a\" = v2\noutput \"b\" = v3\noutput \"c\" = v4\n\
             output \"d\" = v3\noutput \"e\" = v5\noutput \"g\" = v7\noutput \"f\" = v8\n",
        );
        let vm = compile(&map).unwrap();
        // v2, v3, v4, v7.
        assert_eq!(in_place_count(&vm.body), 4, "{:?}", map.body);
        // Several blocks and a tail; then enough rows that the block loop
        // streams its stores (computed in lanes); `a` once 8-byte aligned
        // and once 4 bytes off (computed in lanes): the same values.
        for n in [3 * BLOCK + 5, (STREAM_BYTES / 40) as usize + 7] {
            let x: Vec<f64> = (0..n).map(|i| i as f64 * 0.5 - 100.0).collect();
            let y: Vec<f64> = (0..n).map(|i| (i % 7) as f64 + 0.25).collect();
            for offset in [0usize, 4] {
                let mut a_bytes = vec![0u8; n * 8 + 12];
                let a_at = a_bytes.as_ptr().align_offset(8) + offset;
                let mut outs = vec![vec![0.0f64; n]; 5];
                let mut f = vec![0i32; n];
                let slots: Vec<u64> = map
                    .params
                    .iter()
                    .map(|p| match p {
                        kiln_kernel::Param::ArrayIn { name, .. } if name == "x" => {
                            x.as_ptr() as u64
                        }
                        kiln_kernel::Param::ArrayIn { .. } => y.as_ptr() as u64,
                        kiln_kernel::Param::Extent { .. } => n as u64,
                        kiln_kernel::Param::ArrayOut { name, .. } => match name.as_str() {
                            "a" => a_bytes[a_at..].as_mut_ptr() as u64,
                            "f" => f.as_mut_ptr() as u64,
                            other => {
                                let k = ["b", "c", "d", "e", "g"]
                                    .iter()
                                    .position(|o| *o == other)
                                    .expect("an output");
                                outs[k].as_mut_ptr() as u64
                            }
                        },
                        other => panic!("{other:?}"),
                    })
                    .collect();
                // SAFETY: a slot per parameter, each buffer `n` elements,
                // nothing overlapping.
                let status = unsafe { vm.call(&slots) };
                assert_eq!(status, kiln_kernel::abi::STATUS_OK);
                for i in 0..n {
                    let at = a_at + 8 * i;
                    let a = f64::from_ne_bytes(a_bytes[at..at + 8].try_into().unwrap());
                    let (sin, cos) = (kiln_ir::math::sin(x[i]), kiln_ir::math::cos(x[i]));
                    let want = [
                        y[i].sqrt(),
                        x[i] * y[i] + y[i].sqrt(),
                        y[i].sqrt(),
                        sin,
                        sin * cos,
                    ];
                    assert_eq!(a.to_bits(), (x[i] * y[i]).to_bits(), "{n} {offset} {i}");
                    for (k, w) in want.iter().enumerate() {
                        assert_eq!(outs[k][i].to_bits(), w.to_bits(), "{n} {offset} {k} {i}");
                    }
                    assert_eq!(f[i], x[i] as i32, "{n} {offset} {i}");
                }
            }
        }
    }

    /// The `sincos` instructions of a compiled kernel, in any loop.
    fn sincos_count(nodes: &[Node]) -> usize {
        nodes
            .iter()
            .map(|n| match n {
                Node::Inst(Inst::SinCos { dst, dst2, .. }) => {
                    assert_ne!(dst, dst2, "a sine and a cosine share a vreg");
                    1
                }
                Node::Loop(l) => sincos_count(&l.body),
                _ => 0,
            })
            .sum()
    }

    #[test]
    fn a_sine_and_a_cosine_of_one_value_are_one_routine() {
        // cos before sin, other ops between: each pair is one instruction;
        // a sine of a value without a cosine is not paired.
        for dtype in ["f64", "f32"] {
            let text = format!(
                "graph \"g\"\nv0: {dtype}[n] = input \"x\"\nv1: {dtype}[n] = cos v0\n\
                 v2: {dtype}[n] = exp v0\nv3: {dtype}[n] = sin v2\nv4: {dtype}[n] = sin v0\n\
                 v5: {dtype}[n] = mul v1, v4\nv6: {dtype}[n] = cos v5\nv7: {dtype}[n] = sin v5\n\
                 v8: {dtype}[n] = sin v3\nv9: {dtype}[n] = cos v3\n\
                 output \"a\" = v6\noutput \"b\" = v7\noutput \"c\" = v8\noutput \"d\" = v9\n"
            );
            let vm = compile(&kernel(&text)).unwrap();
            // (cos v0, sin v0), (cos v5, sin v5), (sin v3, cos v3); v2's
            // sine (v3) has no cosine of v2.
            assert_eq!(sincos_count(&vm.body), 3, "{dtype}");
        }
    }
}
