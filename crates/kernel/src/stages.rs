//! A kernel as stages that may run in chunks on several threads: the
//! kernel IR side of parallel kernels (the runtime side is
//! `crate::threads`).
//!
//! A kernel's body is a sequence of loop nests (one per fused group of
//! nodes) and the statements between them. [`split`] cuts it into
//! *stages*, run one after the other, each a kernel of its own that takes
//! the original parameters it uses and two more, the `[start, end)` of its
//! *chunk loop* (its map, [`Stages::maps`], picks them from a call's
//! slots):
//!
//! - a nest whose loop is independent ([`crate::Iterations`], decided by
//!   lowering's analysis) is a stage alone, its chunk loop the outermost
//!   independent loop of the nest worth splitting (loops of one or a few
//!   iterations, such as a batch of 1, are run whole inside each chunk when
//!   nothing but index arithmetic stands between them and the next); a
//!   filter's loop takes the counts it stores along;
//! - every other statement (sequential nests, reductions into variables,
//!   division checks of scalars) belongs to a sequential stage, run whole.
//!
//! Index arithmetic at the kernel's top (extents, strides, tile counts:
//! registers computed from constants, extents and scalar inputs) is
//! computed again by each stage that uses it. Where a stage would need a
//! value another stage loaded or accumulated, or shares a variable with
//! one, the two merge into one sequential stage: no value crosses a stage
//! boundary but through memory.
//!
//! A chunk runs whole iterations of its loop and nothing that one chunk
//! writes is read by another, so the bits never depend on how a loop is
//! cut. The exceptions are explicit: each chunk has its own room for the
//! nest's temporaries ([`Chunking::temps`]), and each keeps its selected
//! rows apart, joined in row order after the last chunk
//! ([`Chunking::selections`]).

use crate::canon::{Compactor, Source};
use crate::iterations::{self, IndexMap, Refs};
use crate::{Expr, Extent, Iterations, Kernel, Param, ParamIdx, Reg, Stmt, Var};
use cranelift_entity::EntityRef;
use kiln_ir::op::BinaryOp;
use kiln_ir::scalar::Scalar;
use kiln_ir::types::{DType, Dim};

/// The name of the extent parameter that holds a chunk's first iteration.
pub const CHUNK_START: &str = "chunk_start";
/// The name of the extent parameter that holds the end of a chunk's range.
pub const CHUNK_END: &str = "chunk_end";

/// A kernel cut into stages ([`split`]).
#[derive(Clone, Debug)]
pub struct Stages {
    /// The stages, in order, each with only the parameters, registers and
    /// variables it uses ([`crate::canon::Compactor`]).
    pub kernels: Vec<Kernel>,
    /// For each stage, where its parameters come from: indices into the
    /// original kernel's parameters followed by `chunk_start` and
    /// `chunk_end` (which a sequential stage does not take), the slots a
    /// call of the stage picks from the original kernel's and its range.
    pub maps: Vec<Vec<u32>>,
    /// For each stage, how it runs in chunks; `None` for a sequential one.
    pub chunks: Vec<Option<Chunking>>,
}

/// How a stage's chunk loop is cut.
#[derive(Clone, Debug)]
pub struct Chunking {
    /// The chunk loop's trip count.
    pub trip: Count,
    /// The work of one iteration, in statements run (the loops around the
    /// chunk loop, which every chunk runs whole, included).
    pub work: Work,
    /// The nest's temporaries: scratch parameters that each chunk needs its
    /// own room for, with that room's size in elements and their dtype.
    pub temps: Vec<(usize, Vec<Count>, DType)>,
    /// Selections the loop keeps rows in: (selection parameter, count
    /// parameter). Each chunk keeps its rows at its own `start` and counts
    /// them apart; the runtime joins them in order.
    pub selections: Vec<(usize, usize)>,
}

/// An `i64` a stage's runtime computes from a call's slots: a trip count
/// or an extent, by the kernel's own index arithmetic.
#[derive(Clone, Debug)]
pub struct Count {
    lets: Vec<(Reg, Expr)>,
    value: Extent,
}

impl Count {
    /// The count for `slots` (one per parameter of the original kernel);
    /// `None` if it is negative or `slots` lacks a parameter it reads.
    pub fn eval(&self, slots: &[u64]) -> Option<u64> {
        let mut regs: IndexMap<Reg, i64> = IndexMap::default();
        let value = |regs: &IndexMap<Reg, i64>, e: &Extent| -> Option<i64> {
            match *e {
                Extent::Fixed(n) => i64::try_from(n).ok(),
                Extent::Param(p) => Some(*slots.get(p.index())? as i64),
                Extent::Reg(r) => regs.get(&r).copied(),
            }
        };
        for (r, expr) in &self.lets {
            let v = match expr {
                Expr::Const(Scalar::I64(k)) => *k,
                Expr::ExtentValue(e) => value(&regs, e)?,
                Expr::Binary(op, a, b) => {
                    let (a, b) = (*regs.get(a)?, *regs.get(b)?);
                    match kiln_ir::semantics::binary(*op, Scalar::I64(a), Scalar::I64(b)) {
                        Ok(Scalar::I64(v)) => v,
                        _ => return None,
                    }
                }
                _ => return None,
            };
            regs.insert(*r, v);
        }
        u64::try_from(value(&regs, &self.value)?).ok()
    }
}

/// What a call of a math function counts for in [`Work`]: about what its
/// inline expansion would (a `libm` `sin` is some tens of arithmetic
/// operations).
const MATH_CALL: u64 = 16;

/// The statements one iteration of a loop runs, with its inner loops' (a
/// math function's call counting [`MATH_CALL`]).
#[derive(Clone, Debug, Default)]
pub struct Work {
    stmts: u64,
    loops: Vec<(Option<Count>, Work)>,
}

impl Work {
    /// Whether an iteration runs no loop (a row of an elementwise kernel).
    pub fn is_row(&self) -> bool {
        self.loops.is_empty()
    }

    /// The statements one iteration runs for `slots` (an inner loop whose
    /// trip count the runtime cannot compute counts once).
    pub fn eval(&self, slots: &[u64]) -> u64 {
        self.loops.iter().fold(self.stmts, |sum, (trip, body)| {
            let trip = trip.as_ref().and_then(|t| t.eval(slots)).unwrap_or(1);
            sum.saturating_add(trip.saturating_mul(body.eval(slots)))
        })
    }

    fn of(body: &[Stmt], top: &TopLets, regs: &[DType]) -> Work {
        Work::bounded(body, top, regs, &mut IndexMap::default())
    }

    /// [`Work::of`], with `bounds`: for registers the nest computes itself
    /// as `min(x, c)` of a count `c` the runtime can compute (a matmul
    /// tile's row blocks, a `k` block's steps), that count, which bounds
    /// a loop over them better than counting it once.
    fn bounded(
        body: &[Stmt],
        top: &TopLets,
        regs: &[DType],
        bounds: &mut IndexMap<Reg, Count>,
    ) -> Work {
        let mut work = Work::default();
        let bound = |bounds: &IndexMap<Reg, Count>, r: &Reg| {
            top.count(Extent::Reg(*r))
                .or_else(|| bounds.get(r).cloned())
        };
        for stmt in body {
            match stmt {
                Stmt::Let(r, Expr::Const(Scalar::I64(k))) if *k >= 0 => {
                    bounds.insert(*r, Count::fixed(*k as u64));
                }
                Stmt::Let(r, Expr::Binary(BinaryOp::Min, a, b)) => {
                    if let Some(c) = bound(bounds, a).or_else(|| bound(bounds, b)) {
                        bounds.insert(*r, c);
                    }
                }
                // A bound shifted right by a constant (a matmul tile's row
                // blocks counted in stacks of them).
                Stmt::Let(r, Expr::Binary(BinaryOp::ShrLogical, a, b)) => {
                    let fixed = |c: Option<Count>| match c {
                        Some(Count {
                            lets,
                            value: Extent::Fixed(n),
                        }) if lets.is_empty() => Some(n),
                        _ => None,
                    };
                    if let (Some(n), Some(shift @ 0..64)) =
                        (fixed(bound(bounds, a)), fixed(bounds.get(b).cloned()))
                    {
                        bounds.insert(*r, Count::fixed(n >> shift));
                    }
                }
                _ => {}
            }
            work.stmts += match stmt {
                Stmt::Loop { extent, body, .. } => {
                    let trip = top.count(*extent).or_else(|| match extent {
                        Extent::Reg(r) => bounds.get(r).cloned(),
                        _ => None,
                    });
                    work.loops
                        .push((trip, Work::bounded(body, top, regs, bounds)));
                    0
                }
                // A call of a math function (`sin` where the tier calls
                // `libm`) costs what some tens of arithmetic statements do.
                Stmt::Let(r, Expr::Unary(op, _))
                    if crate::libcalls::unary_name(*op, regs[r.index()]).is_some() =>
                {
                    MATH_CALL
                }
                Stmt::Let(r, Expr::Binary(op, ..))
                    if crate::libcalls::binary_name(*op, regs[r.index()]).is_some() =>
                {
                    MATH_CALL
                }
                _ => 1,
            };
        }
        work
    }

    fn times(self, n: u64) -> Work {
        if n == 1 {
            return self;
        }
        Work {
            stmts: 0,
            loops: vec![(Some(Count::fixed(n)), self)],
        }
    }
}

impl Count {
    fn fixed(n: u64) -> Count {
        Count {
            lets: Vec::new(),
            value: Extent::Fixed(n),
        }
    }
}

/// The kernel's top-level `let`s that any stage may compute again: index
/// arithmetic (no load, no variable, no integer division, which must stay
/// behind its division check), and where each is defined.
struct TopLets<'a> {
    /// For each register a top-level `let` defines: its statement's index,
    /// and whether it is recomputable.
    defs: IndexMap<Reg, (usize, bool)>,
    body: &'a [Stmt],
}

impl<'a> TopLets<'a> {
    fn of(kernel: &'a Kernel) -> TopLets<'a> {
        let mut defs: IndexMap<Reg, (usize, bool)> = IndexMap::default();
        for (i, stmt) in kernel.body.iter().enumerate() {
            if let Stmt::Let(r, expr) = stmt {
                // An integer division may run only where the division
                // checks before it ran: it stays in its place.
                let divides = matches!(expr, Expr::Binary(BinaryOp::Div | BinaryOp::Rem, ..))
                    && kernel.reg_type(*r).is_int();
                let pure = !divides
                    && !matches!(expr, Expr::Load(..) | Expr::LoadBit(..) | Expr::Var(_))
                    && expr
                        .operands()
                        .iter()
                        .all(|o| defs.get(o).is_some_and(|d| d.1));
                defs.insert(*r, (i, pure));
            }
        }
        TopLets {
            defs,
            body: &kernel.body,
        }
    }

    fn pure(&self, r: Reg) -> bool {
        self.defs.get(&r).is_some_and(|d| d.1)
    }

    /// The recomputable `let`s `roots` need, in kernel order (closed over
    /// their operands).
    fn closure(&self, roots: impl IntoIterator<Item = Reg>) -> Vec<usize> {
        let mut seen: IndexMap<Reg, ()> = IndexMap::default();
        let mut stack: Vec<Reg> = roots.into_iter().collect();
        let mut lets = Vec::new();
        while let Some(r) = stack.pop() {
            let Some(&(i, true)) = self.defs.get(&r) else {
                continue;
            };
            if seen.insert(r, ()).is_some() {
                continue;
            }
            lets.push(i);
            if let Stmt::Let(_, expr) = &self.body[i] {
                stack.extend(expr.operands());
                if let Expr::ExtentValue(Extent::Reg(e)) = expr {
                    stack.push(*e);
                }
            }
        }
        lets.sort_unstable();
        lets
    }

    /// The runtime's count of `extent`, if only recomputable `let`s of
    /// `i64` arithmetic stand behind it.
    fn count(&self, extent: Extent) -> Option<Count> {
        let roots = match extent {
            Extent::Reg(r) if !self.pure(r) => return None,
            Extent::Reg(r) => vec![r],
            _ => Vec::new(),
        };
        let lets: Vec<(Reg, Expr)> = self
            .closure(roots)
            .into_iter()
            .map(|i| match &self.body[i] {
                Stmt::Let(r, e) => (*r, e.clone()),
                _ => unreachable!("the closure holds lets"),
            })
            .collect();
        let arithmetic = lets.iter().all(|(_, e)| {
            matches!(
                e,
                Expr::Const(Scalar::I64(_))
                    | Expr::ExtentValue(_)
                    | Expr::Binary(
                        BinaryOp::Add
                            | BinaryOp::Sub
                            | BinaryOp::Mul
                            | BinaryOp::Shl
                            | BinaryOp::ShrLogical
                            | BinaryOp::ShrArith
                            | BinaryOp::And
                            | BinaryOp::Min
                            | BinaryOp::Max,
                        ..
                    )
            )
        });
        let count = Count {
            lets,
            value: extent,
        };
        // A count of fixed extents is folded now, not computed per call.
        Some(match count.eval(&[]) {
            Some(n) => Count::fixed(n),
            None if arithmetic => count,
            None => return None,
        })
    }
}

/// Where a nest's chunk loop is: the indices of the loops from the nest's
/// top-level loop down to it (each a position in its parent's body).
struct Chain {
    path: Vec<usize>,
    /// The product of the trip counts of the loops around the chunk loop.
    outer: u64,
}

/// Loops of fewer fixed iterations than this are run whole in each chunk
/// when a loop inside them can be cut instead (a batch of 1, a group).
const FEW: u64 = 8;

/// The chunk loop of the top-level loop `stmt`, if the nest has one.
fn chain(stmt: &Stmt, top: &TopLets) -> Option<Chain> {
    let mut chain = Chain {
        path: Vec::new(),
        outer: 1,
    };
    let mut cur = stmt;
    loop {
        let Stmt::Loop {
            extent,
            body,
            iterations,
            ..
        } = cur
        else {
            return None;
        };
        let few = match extent {
            Extent::Fixed(n) => Some(*n),
            _ => None,
        };
        let trivial = few.is_some_and(|n| n <= 1);
        // The one loop of a body that holds nothing else but index
        // arithmetic.
        let inner = {
            let mut loops = body
                .iter()
                .enumerate()
                .filter(|(_, s)| matches!(s, Stmt::Loop { .. }));
            let only = loops.next();
            let rest = body.iter().all(|s| {
                matches!(s, Stmt::Loop { .. })
                    || matches!(s, Stmt::Let(_, e) if !matches!(e, Expr::Var(_)))
            });
            match (only, loops.next()) {
                (Some(only), None) if rest => Some(only),
                _ => None,
            }
        };
        let descend = inner.is_some_and(|(_, s)| match s {
            Stmt::Loop {
                iterations, extent, ..
            } => *iterations == Iterations::Independent || *extent == Extent::Fixed(1),
            _ => false,
        }) && (trivial
            || (few.is_some_and(|n| n < FEW) && *iterations != Iterations::Sequential));
        if descend {
            let (i, next) = inner.expect("descend has an inner loop");
            chain.path.push(i);
            chain.outer = chain.outer.saturating_mul(few.expect("a few iterations"));
            cur = next;
            continue;
        }
        let selecting_ok = *iterations != Iterations::Selecting || chain.path.is_empty();
        if trivial || *iterations == Iterations::Sequential || !selecting_ok {
            return None;
        }
        top.count(*extent)?;
        return Some(chain);
    }
}

/// The loop at `path` under the top-level loop `stmt`.
fn at<'s>(stmt: &'s Stmt, path: &[usize]) -> &'s Stmt {
    path.iter().fold(stmt, |s, &i| match s {
        Stmt::Loop { body, .. } => &body[i],
        _ => unreachable!("a chain runs through loops"),
    })
}

fn at_mut<'s>(stmt: &'s mut Stmt, path: &[usize]) -> &'s mut Stmt {
    path.iter().fold(stmt, |s, &i| match s {
        Stmt::Loop { body, .. } => &mut body[i],
        _ => unreachable!("a chain runs through loops"),
    })
}

/// The registers a statement reads, its loops' bodies included.
fn reads(stmt: &Stmt, out: &mut Vec<Reg>) {
    out.extend(stmt.operands());
    if let Stmt::Loop { body, .. } = stmt {
        for s in body {
            reads(s, out);
        }
    }
}

/// The variables a statement names, its loops' bodies included.
fn vars(stmt: &Stmt, out: &mut Vec<Var>) {
    match stmt {
        Stmt::Let(_, Expr::Var(v)) | Stmt::Set(v, _) | Stmt::StoreCount(_, v) => out.push(*v),
        Stmt::KeepRow { count, .. } => out.push(*count),
        Stmt::Loop { body, .. } => body.iter().for_each(|s| vars(s, out)),
        _ => {}
    }
}

/// One stage while [`split`] builds it: its top-level statements and its
/// chunk loop.
struct Part {
    stmts: Vec<usize>,
    chain: Option<Chain>,
}

/// `kernel` as stages, if any part of it can run in chunks; `None` when it
/// is best run whole (a direct kernel, or no loop to cut).
pub fn split(kernel: &Kernel) -> Option<Stages> {
    if kernel.direct {
        return None;
    }
    let top = TopLets::of(kernel);
    let body = &kernel.body;
    let mut parts: Vec<Part> = Vec::new();
    let mut seq: Vec<usize> = Vec::new();
    let mut i = 0;
    while i < body.len() {
        let stmt = &body[i];
        if let Stmt::Let(r, _) = stmt {
            if top.pure(*r) {
                i += 1;
                continue;
            }
        }
        let chain = matches!(stmt, Stmt::Loop { .. })
            .then(|| chain(stmt, &top))
            .flatten();
        let Some(chain) = chain else {
            seq.push(i);
            i += 1;
            continue;
        };
        if !seq.is_empty() {
            parts.push(Part {
                stmts: std::mem::take(&mut seq),
                chain: None,
            });
        }
        let mut stmts = vec![i];
        // A filter's counts go with it (after the loop, with index
        // arithmetic between).
        if matches!(
            stmt,
            Stmt::Loop {
                iterations: Iterations::Selecting,
                ..
            }
        ) {
            let mut j = i + 1;
            while let Some(next) = body.get(j) {
                match next {
                    Stmt::StoreCount(..) => stmts.push(j),
                    Stmt::Let(r, _) if top.pure(*r) => {}
                    _ => break,
                }
                j += 1;
            }
            i = j;
        } else {
            i += 1;
        }
        parts.push(Part {
            stmts,
            chain: Some(chain),
        });
    }
    if !seq.is_empty() {
        parts.push(Part {
            stmts: seq,
            chain: None,
        });
    }
    merge(&mut parts, kernel, &top);
    if parts.iter().all(|p| p.chain.is_none()) {
        return None;
    }
    let refs = Refs::of(body);
    let mut stages = Stages {
        kernels: Vec::with_capacity(parts.len()),
        maps: Vec::with_capacity(parts.len()),
        chunks: Vec::with_capacity(parts.len()),
    };
    let mut compactor = Compactor::new(
        kernel.params.len() + 2,
        kernel.regs.len() + BOUNDS,
        kernel.vars.len(),
    );
    for (n, part) in parts.iter().enumerate() {
        let (stage, map, chunking) = build(kernel, &top, &refs, part, n, &mut compactor);
        if cfg!(debug_assertions) {
            if let Err(e) = crate::verify(&stage) {
                panic!("a stage of `{}` does not verify: {e}", kernel.name);
            }
        }
        stages.kernels.push(stage);
        stages.maps.push(map);
        stages.chunks.push(chunking);
    }
    Some(stages)
}

/// The registers a chunked stage adds to the kernel's: its range's start,
/// end and length, and the chunk loop's counter.
const BOUNDS: usize = 4;

/// Merges stages until no value but memory crosses a boundary: a register
/// a stage reads that another defines and cannot be computed again, or a
/// variable two stages name, makes the stages from one to the other one
/// sequential stage.
fn merge(parts: &mut Vec<Part>, kernel: &Kernel, top: &TopLets) {
    loop {
        let mut owner_reg: IndexMap<Reg, usize> = IndexMap::default();
        let mut owner_var: IndexMap<Var, usize> = IndexMap::default();
        let mut span: Option<(usize, usize)> = None;
        'parts: for (n, part) in parts.iter().enumerate() {
            let mut read = Vec::new();
            let mut named = Vec::new();
            for &s in &part.stmts {
                reads(&kernel.body[s], &mut read);
                vars(&kernel.body[s], &mut named);
            }
            for r in read {
                if let Some(&(_, false)) = top.defs.get(&r) {
                    match owner_reg.get(&r) {
                        Some(&m) if m != n => {
                            span = Some((m, n));
                            break 'parts;
                        }
                        _ => {}
                    }
                }
            }
            for v in named {
                match owner_var.get(&v) {
                    Some(&m) if m != n => {
                        span = Some((m, n));
                        break 'parts;
                    }
                    _ => {
                        owner_var.insert(v, n);
                    }
                }
            }
            for &s in &part.stmts {
                if let Stmt::Let(r, _) = &kernel.body[s] {
                    owner_reg.insert(*r, n);
                }
            }
        }
        let Some((from, to)) = span else { return };
        let mut stmts: Vec<usize> = parts[from..=to]
            .iter()
            .flat_map(|p| p.stmts.iter().copied())
            .collect();
        stmts.sort_unstable();
        parts.splice(from..=to, [Part { stmts, chain: None }]);
    }
}

/// The stage kernel of `part` (the `n`th), compacted, with its map of
/// parameters, and how it runs in chunks.
fn build(
    kernel: &Kernel,
    top: &TopLets,
    refs: &Refs,
    part: &Part,
    n: usize,
    compactor: &mut Compactor,
) -> (Kernel, Vec<u32>, Option<Chunking>) {
    // The body is written in the kernel's numbering, with the range's two
    // extents after the kernel's parameters and the stage's own registers
    // after its registers; the compactor then keeps what the body uses.
    let params = kernel.params.len();
    let regs = kernel.regs.len();
    let start = ParamIdx::new(params);
    let param = |i: usize| match i.checked_sub(params) {
        None => kernel.params[i].clone(),
        Some(0) => Param::Extent {
            dim: CHUNK_START.into(),
        },
        Some(_) => Param::Extent {
            dim: CHUNK_END.into(),
        },
    };
    let reg = |i: usize| match kernel.regs.get(i) {
        Some(&dtype) => (dtype, kernel.reg_names.get(i).cloned().flatten()),
        None => (DType::I64, None),
    };
    let var = |i: usize| kernel.vars[i];
    let source = Source {
        name: format!("{}__stage{n}", kernel.name),
        param: &param,
        reg: &reg,
        var: &var,
        checks: &kernel.checks,
    };
    let mut read = Vec::new();
    for &s in &part.stmts {
        reads(&kernel.body[s], &mut read);
    }
    let lets = top.closure(read);
    let mut body: Vec<Stmt> = Vec::with_capacity(lets.len() + part.stmts.len());
    body.extend(lets.iter().map(|&i| kernel.body[i].clone()));
    let first = body.len();
    body.extend(part.stmts.iter().map(|&i| kernel.body[i].clone()));
    let Some(chain) = &part.chain else {
        let (stage, map) = compactor.kernel(body, &source);
        return (stage, map, None);
    };
    // The chunk loop runs `row = start + i` for `i` in `0..end - start`.
    let nest = &kernel.body[part.stmts[0]];
    let Stmt::Loop {
        extent,
        row,
        body: loop_body,
        ..
    } = at(nest, &chain.path)
    else {
        unreachable!("a chain ends at a loop")
    };
    let temps = if loop_body.iter().any(|s| matches!(s, Stmt::Loop { .. })) {
        let scope = iterations::Scope::of(refs, &kernel.body, part.stmts[0]);
        iterations::temporaries(*row, loop_body, &scope, &kernel.params)
            .expect("an independent nest's temporaries are known")
    } else {
        Vec::new()
    };
    let trip = top.count(*extent).expect("a chain's loop has a count");
    let work = Work::of(loop_body, top, &kernel.regs).times(chain.outer);
    let target = at_mut(&mut body[first], &chain.path);
    let Stmt::Loop {
        extent,
        row,
        body: inner,
        ..
    } = target
    else {
        unreachable!("a chain ends at a loop")
    };
    let [s, e, len, i] = [0, 1, 2, 3].map(|k| Reg::new(regs + k));
    let row = std::mem::replace(row, i);
    *extent = Extent::Reg(len);
    inner.insert(0, Stmt::Let(row, Expr::Binary(BinaryOp::Add, i, s)));
    let bounds = [
        Stmt::Let(s, Expr::ExtentValue(Extent::Param(start))),
        Stmt::Let(e, Expr::ExtentValue(Extent::Param(start.next()))),
        Stmt::Let(len, Expr::Binary(BinaryOp::Sub, e, s)),
    ];
    // The bounds go where the chunk loop starts: the kernel's top for a
    // top-level loop, else the body of the loop around it.
    match chain.path.split_last() {
        None => {
            body.splice(first..first, bounds);
        }
        Some((&last, outer)) => {
            let Stmt::Loop { body: around, .. } = at_mut(&mut body[first], outer) else {
                unreachable!("a chain runs through loops")
            };
            around.splice(last..last, bounds);
        }
    }
    let (stage, map) = compactor.kernel(body, &source);
    let temps = temps
        .into_iter()
        .map(|p| {
            let Param::Scratch { dtype, shape } = &kernel.params[p.index()] else {
                unreachable!("temporaries are scratch")
            };
            let dims = shape
                .iter()
                .map(|d| match d {
                    Dim::Fixed(n) => Count::fixed(*n),
                    Dim::Sym(name) => Count {
                        lets: Vec::new(),
                        value: Extent::Param(
                            kernel
                                .params
                                .iter()
                                .position(|q| matches!(q, Param::Extent { dim } if *dim == **name))
                                .map(ParamIdx::new)
                                .expect("lowering gives every symbol an extent parameter"),
                        ),
                    },
                })
                .collect();
            (p.index(), dims, *dtype)
        })
        .collect();
    let selections = part
        .stmts
        .iter()
        .filter_map(|&s| match &kernel.body[s] {
            Stmt::StoreCount(count, var) => {
                let sel = keeps(nest, *var)?;
                Some((sel.index(), count.index()))
            }
            _ => None,
        })
        .collect();
    (
        stage,
        map,
        Some(Chunking {
            trip,
            work,
            temps,
            selections,
        }),
    )
}

/// The selection parameter a filter loop keeps rows in with count `var`.
fn keeps(stmt: &Stmt, var: Var) -> Option<ParamIdx> {
    let Stmt::Loop { body, .. } = stmt else {
        return None;
    };
    body.iter().find_map(|s| match s {
        Stmt::KeepRow { sel, count, .. } if *count == var => Some(*sel),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{lower, LowerOptions};

    fn stages(src: &str) -> Option<Stages> {
        stages_with(src, &LowerOptions::default())
    }

    fn stages_with(src: &str, options: &LowerOptions) -> Option<Stages> {
        let graph = kiln_ir::text::parse(src).expect("the test graph parses");
        let graph = kiln_ir::verify(graph).expect("the test graph verifies");
        split(&lower(&graph, options).expect("lowers"))
    }

    /// The slots of a kernel with `extents` for its extent parameters (0
    /// for everything else), and the stage's range.
    fn slots(kernel: &Kernel, extents: &[u64]) -> Vec<u64> {
        let mut extents = extents.iter();
        kernel
            .params
            .iter()
            .map(|p| match p {
                Param::Extent { .. } => extents.next().copied().unwrap_or(0),
                _ => 0,
            })
            .collect()
    }

    #[test]
    fn rows_of_an_elementwise_kernel_are_one_chunked_stage() {
        let src = "graph \"g\"\nv0: f64[n] = input \"x\"\nv1: f64 = const 2.0\nv2: f64[n] = mul v0, v1\noutput \"y\" = v2\n";
        let graph = kiln_ir::verify(kiln_ir::text::parse(src).expect("parses")).expect("verifies");
        let kernel = lower(&graph, &LowerOptions::default()).expect("lowers");
        let s = split(&kernel).expect("cut");
        assert_eq!(s.kernels.len(), 1);
        let chunk = s.chunks[0].as_ref().expect("chunked");
        // Counts read the original kernel's slots.
        let slots = slots(&kernel, &[1000]);
        assert_eq!(chunk.trip.eval(&slots), Some(1000));
        assert!(chunk.work.eval(&slots) >= 3, "load, mul, store");
        assert!(chunk.temps.is_empty() && chunk.selections.is_empty());
        // The stage takes what it uses: x, y and its range (the extent `n`
        // only bounds the chunk loop, which the range replaces), each
        // picked from the kernel's slots and the range after them.
        let names: Vec<String> = s.kernels[0]
            .params
            .iter()
            .map(|p| match p {
                Param::ArrayIn { name, .. } | Param::ArrayOut { name, .. } => name.clone(),
                Param::Extent { dim } => dim.clone(),
                other => format!("{other:?}"),
            })
            .collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(sorted, [CHUNK_END, CHUNK_START, "x", "y"], "{names:?}");
        let n = kernel.params.len() as u32;
        for (param, &i) in s.kernels[0].params.iter().zip(&s.maps[0]) {
            match param {
                Param::Extent { dim } if dim == CHUNK_START => assert_eq!(i, n),
                Param::Extent { dim } if dim == CHUNK_END => assert_eq!(i, n + 1),
                p => assert_eq!(p, &kernel.params[i as usize]),
            }
        }
    }

    #[test]
    fn a_matmul_cuts_its_row_blocks_by_the_kernels_own_arithmetic() {
        // 512 rows in blocks of 4, in tiles of 8 blocks (one full column
        // block of 64 and 16 more: fewer than 4): 16 groups; then the 16
        // columns past the last block, packed over `k`'s 32 steps first
        // and then in tiles of their own: 16 groups of 8 blocks
        // (`matmul::REST_TILES`).
        let src = "graph \"g\"\nv0: f32[512, 32] = input \"x\"\nv1: f32[32, 80] = input \"w\"\nv2: f32[512, 80] = matmul v0, v1\noutput \"y\" = v2\n";
        let panels = LowerOptions {
            panels: Some(256),
            ..LowerOptions::default()
        };
        let s = stages_with(src, &panels).expect("cut");
        let trips: Vec<u64> = s
            .chunks
            .iter()
            .flatten()
            .filter_map(|c| c.trip.eval(&[0, 0, 0]))
            .collect();
        assert_eq!(
            trips,
            [32, 16, 16],
            "the rest panel's 32 steps, 16 groups of tiles, 16 of the rest block's"
        );
        let rows = stages(src).expect("cut");
        assert_eq!(
            rows.chunks[0].as_ref().map(|c| c.trip.eval(&[0, 0, 0])),
            Some(Some(512))
        );
    }

    #[test]
    fn matmuls_and_convolutions_in_k_blocks_still_split() {
        let panels = LowerOptions {
            panels: Some(256),
            conv_panels: true,
            ..LowerOptions::default()
        };
        // 2048 steps of `k`: two blocks; a 3×3 convolution of 256 input
        // channels: 2304 steps, three blocks of 113 channels.
        let matmul = "graph \"g\"\nv0: f32[256, 2048] = input \"x\"\nv1: f32[2048, 128] = input \"w\"\nv2: f32[256, 128] = matmul v0, v1\noutput \"y\" = v2\n";
        let conv = "graph \"c\"\nv0: f32[1, 256, 28, 28] = input \"x\"\nv1: f32[256, 256, 3, 3] = input \"w\"\nv2: f32[1, 256, 28, 28] = conv2d v0, v1 pad [1, 1, 1, 1]\noutput \"y\" = v2\n";
        // 4096 steps over 128-row groups (2 MiB of `a`): `a` streamed, its
        // tile count from the kernel's top-level arithmetic (a division
        // there once left the product on one thread); and a convolution
        // over weights read by their strides (a transpose).
        let streamed = "graph \"s\"\nv0: f32[256, 4096] = input \"x\"\nv1: f32[4096, 768] = input \"w\"\nv2: f32[256, 768] = matmul v0, v1\noutput \"y\" = v2\n";
        let strided = "graph \"t\"\nv0: f32[1, 256, 28, 28] = input \"x\"\nv1: f32[256, 256, 3, 3] = input \"w\"\nv2: f32[256, 256, 3, 3] = transpose v1 [1, 0, 2, 3]\nv3: f32[1, 256, 28, 28] = conv2d v0, v2 pad [1, 1, 1, 1]\noutput \"y\" = v3\n";
        for src in [matmul, conv, streamed, strided] {
            let s = stages_with(src, &panels).expect("cut");
            // Every stage runs in chunks of a loop of 4 or more trips.
            let trips: Vec<Option<u64>> = s
                .chunks
                .iter()
                .map(|c| c.as_ref().and_then(|c| c.trip.eval(&[0, 0, 0])))
                .collect();
            assert!(
                trips.iter().all(|t| t.is_some_and(|t| t >= 4)),
                "{src}: chunk loops {trips:?}"
            );
            // The runtime splits a stage by its work: the panels' loops
            // over a tile's row blocks and a `k` block's steps count as
            // their bounds, not once (the blocked stages ran on one
            // thread when they did).
            let works: Vec<u64> = s
                .chunks
                .iter()
                .flatten()
                .map(|c| c.trip.eval(&[0, 0, 0]).unwrap_or(0) * c.work.eval(&[0, 0, 0]))
                .collect();
            // 256 × 2048 × 128 and 256 × 2304 × 256 multiply-adds.
            assert!(
                works.iter().any(|&w| w >= 20_000_000),
                "{src}: work {works:?}"
            );
        }
    }

    #[test]
    fn a_nest_stays_chunked_when_a_later_tensor_reads_its_room_first() {
        // Two convolutions in `k` blocks (512 channels × 9 taps; ResNet's
        // last stage at 224×224) as panels over their taps: the second's
        // sums go to a scratch, and its `k` blocks load them first (the
        // first block discards what it loads). Were that scratch to take
        // the room the first convolution's accumulators left, the
        // statements after the first nest would read what its temporaries
        // left, and its rows would be sequential: so ResNet-18's
        // 512-channel convolutions ran on one thread.
        let panels = LowerOptions {
            panels: Some(256),
            conv_panels: true,
            ..LowerOptions::default()
        };
        let src = "graph \"g\"\nv0: f32[512, 512, 3, 3] = input \"w\"\nv1: f32[1, 512, 7, 7] = input \"x\"\nv2: f32[1, 512, 7, 7] = input \"y\"\nv3: f32[1, 512, 7, 7] = conv2d v1, v0 pad [1, 1, 1, 1]\nv4: f32[1, 512, 7, 7] = conv2d v2, v0 pad [1, 1, 1, 1]\nv5: f32[1, 512, 7, 7] = add v3, v4\noutput \"z\" = v5\n";
        let s = stages_with(src, &panels).expect("cut");
        let sequential: Vec<&str> = (s.kernels.iter().zip(&s.chunks))
            .filter(|(k, c)| c.is_none() && k.body.iter().any(|s| matches!(s, Stmt::Loop { .. })))
            .map(|(k, _)| k.name.as_str())
            .collect();
        assert!(sequential.is_empty(), "sequential stages {sequential:?}");
    }

    #[test]
    fn a_convolution_gives_each_chunk_its_own_accumulator_planes() {
        let src = "graph \"c\"\nv0: f32[1, 8, 10, 10] = input \"x\"\nv1: f32[8, 8, 3, 3] = input \"w\"\nv2: f32[1, 8, 10, 10] = conv2d v0, v1 pad [1, 1, 1, 1]\noutput \"y\" = v2\n";
        let s = stages(src).expect("cut");
        assert!(
            s.chunks.iter().flatten().any(|c| !c.temps.is_empty()),
            "the output-channel blocks' planes are temporaries"
        );
    }

    #[test]
    fn a_filter_keeps_its_counts_and_a_mean_keeps_its_loops_together() {
        let filter = "graph \"g\"\nv0: f64[n] = input \"x\"\nv1: f64 = const 2.0\nv2: bool[n] = gt v0, v1\nv3: sel[n] = filter v2\noutput \"s\" = v3\n";
        let s = stages(filter).expect("cut");
        assert_eq!(s.chunks[0].as_ref().expect("chunked").selections.len(), 1);
        // x - mean(x): the second loop reads the first's accumulator.
        let centred = "graph \"g\"\nv0: f64[n] = input \"x\"\nv1: f64 = mean v0\nv2: f64[n] = sub v0, v1\noutput \"y\" = v2\n";
        assert!(stages(centred).is_none_or(|s| s.chunks.iter().all(Option::is_none)));
    }
}
