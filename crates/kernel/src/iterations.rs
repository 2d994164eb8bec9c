//! Which loops have independent iterations: the one analysis of it, run by
//! lowering on every loop it builds ([`mark`]), recorded in the kernel
//! ([`Stmt::Loop`]'s `iterations`) and checked by the kernel verifier, so
//! that backends (the VM's blocks of rows, Cranelift's vectors) and the
//! runtime (chunks of a loop on several threads, `crate::stages`) read a
//! fact instead of each recognising it again.
//!
//! An innermost loop is [`Iterations::Independent`] when no iteration
//! reads what another writes and none carries a value to the next: no
//! variable is set; every buffer it stores to is written at one index that
//! steps by a nonzero constant with the row (so no two rows write one
//! element: lowering's `row * stride + base` index arithmetic), and read, if
//! at all, at that same index (each row reads what it wrote itself, as a
//! convolution's tap does). With `KeepRow`s (a filter) it is
//! [`Iterations::Selecting`]: independent but for the selection, which
//! keeps rows in iteration order.
//!
//! A loop with loops inside (a tensor nest: the rows of a matmul, the
//! output-channel blocks of a convolution) is [`Iterations::Independent`]
//! when each iteration computes whole elements of its outputs and keeps
//! nothing for the next ([`nest`]): every variable it reads it set earlier
//! in the same iteration; every store is at an index computed from the row
//! (lowering's nests address their outputs by every loop's index, so rows
//! write disjoint elements), or to a *temporary*: a scratch buffer that
//! nothing outside the loop touches and that each iteration writes before it
//! reads (a convolution's accumulator planes), which a chunk of rows run
//! apart gets its own room for; and buffers the loop stores by the row it
//! reads only by the row. Anything else is [`Iterations::Sequential`].
use crate::{Expr, Iterations, Kernel, Param, ParamIdx, Reg, Stmt, Var};
use cranelift_entity::EntityRef;
use kiln_ir::op::BinaryOp;
use kiln_ir::scalar::Scalar;
use kiln_ir::types::DType;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// Hashes a register or parameter by its index (they are small dense
/// integers): lowering runs this analysis on every loop of every kernel,
/// a GP population's thousands included, where SipHash was a measurable
/// part of compiling one.
#[derive(Default)]
pub struct IndexHasher(u64);

impl Hasher for IndexHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0 ^ u64::from(n)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A map keyed by registers or parameters.
pub type IndexMap<K, V> = HashMap<K, V, BuildHasherDefault<IndexHasher>>;

/// A set of registers or parameters.
pub type IndexSet<K> = HashSet<K, BuildHasherDefault<IndexHasher>>;

/// Records every loop's iterations in `kernel` (lowering's last step).
pub(crate) fn mark(kernel: &mut Kernel) {
    let konst = constants(&kernel.body);
    // Only a top-level loop that holds a loop has nests to judge: the
    // scopes are built for those alone (a GP population's thousands of
    // kernels have none).
    let holds_loop = |s: &Stmt| matches!(s, Stmt::Loop { body, .. } if body.iter().any(|s| matches!(s, Stmt::Loop { .. })));
    let nests: Vec<bool> = kernel.body.iter().map(holds_loop).collect();
    let refs = if nests.contains(&true) {
        Refs::of(&kernel.body)
    } else {
        Refs::default()
    };
    let after = Scope::after_each(&kernel.body, &nests);
    let params = &kernel.params;
    let Kernel { body, regs, .. } = kernel;
    for ((stmt, after), nest_here) in body.iter_mut().zip(after).zip(nests) {
        let scope = Scope {
            kernel: &refs,
            top: if nest_here {
                Refs::of(std::slice::from_ref(stmt))
            } else {
                Refs::default()
            },
            after,
        };
        mark_body(std::slice::from_mut(stmt), &konst, regs, &|body, row| {
            nest(row, body, &scope, params)
        });
    }
}

/// Where a nest is, for [`nest`]: what the kernel, and the top-level
/// statement holding the nest, name; and, for each buffer the statements
/// after it touch, whether they store to it first.
pub(crate) struct Scope<'a> {
    /// Every statement of the kernel.
    pub(crate) kernel: &'a Refs,
    /// The top-level statement that holds the nest.
    pub(crate) top: Refs,
    /// For each buffer the top-level statements after it touch, whether
    /// the first touch is a store.
    pub(crate) after: IndexMap<ParamIdx, bool>,
}

impl<'a> Scope<'a> {
    /// The scope of a nest in top-level statement `at` of `body`, whose
    /// references are `kernel`.
    pub(crate) fn of(kernel: &'a Refs, body: &[Stmt], at: usize) -> Scope<'a> {
        let mut after = IndexMap::default();
        for stmt in body[at + 1..].iter().rev() {
            first_touches(stmt, &mut after);
        }
        Scope {
            kernel,
            top: Refs::of(&body[at..=at]),
            after,
        }
    }

    /// For each top-level statement of `body` that `wanted` marks,
    /// [`Scope::after`] (empty for the others): one walk from the end.
    fn after_each(body: &[Stmt], wanted: &[bool]) -> Vec<IndexMap<ParamIdx, bool>> {
        let mut each: Vec<IndexMap<ParamIdx, bool>> =
            (0..body.len()).map(|_| IndexMap::default()).collect();
        let Some(first) = wanted.iter().position(|&w| w) else {
            return each;
        };
        let mut after = IndexMap::default();
        for (i, stmt) in body.iter().enumerate().skip(first).rev() {
            if wanted[i] {
                each[i] = after.clone();
            }
            first_touches(stmt, &mut after);
        }
        each
    }
}

/// Records in `after` whether `stmt` first stores to or loads from each
/// buffer it touches (it runs before what `after` holds, so it wins).
pub(crate) fn first_touches(stmt: &Stmt, after: &mut IndexMap<ParamIdx, bool>) {
    let mut seen: IndexMap<ParamIdx, bool> = IndexMap::default();
    // Pre-order: a loop's body runs where the loop is.
    let mut order: Vec<&Stmt> = vec![stmt];
    while let Some(s) = order.pop() {
        let touch = match s {
            Stmt::Let(_, Expr::Load(p, _) | Expr::LoadBit(p, _)) => Some((*p, false)),
            Stmt::Store(p, ..) | Stmt::StoreCount(p, _) => Some((*p, true)),
            Stmt::KeepRow { sel, .. } => Some((*sel, true)),
            Stmt::Loop { body, .. } => {
                order.extend(body.iter().rev());
                None
            }
            _ => None,
        };
        if let Some((p, store)) = touch {
            seen.entry(p).or_insert(store);
        }
    }
    after.extend(seen);
}

/// How many statements name each parameter and variable, in a body and
/// the loops inside it.
#[derive(Default)]
pub(crate) struct Refs {
    params: IndexMap<ParamIdx, usize>,
    vars: IndexMap<Var, usize>,
}

impl Refs {
    /// The references in `body`, its loops' bodies included.
    pub(crate) fn of(body: &[Stmt]) -> Refs {
        let mut refs = Refs::default();
        let mut stack = vec![body];
        while let Some(body) = stack.pop() {
            for stmt in body {
                let (param, var) = match stmt {
                    Stmt::Let(_, Expr::Load(p, _) | Expr::LoadBit(p, _) | Expr::Input(p)) => {
                        (Some(*p), None)
                    }
                    Stmt::Let(_, Expr::Var(v)) | Stmt::Set(v, _) => (None, Some(*v)),
                    Stmt::Store(p, ..) => (Some(*p), None),
                    Stmt::StoreCount(p, v) => (Some(*p), Some(*v)),
                    Stmt::KeepRow { sel, count, .. } => (Some(*sel), Some(*count)),
                    Stmt::Loop { body, .. } => {
                        stack.push(body);
                        (None, None)
                    }
                    _ => (None, None),
                };
                if let Some(p) = param {
                    *refs.params.entry(p).or_default() += 1;
                }
                if let Some(v) = var {
                    *refs.vars.entry(v).or_default() += 1;
                }
            }
        }
        refs
    }

    /// How many statements name parameter `p`.
    pub(crate) fn param(&self, p: ParamIdx) -> usize {
        self.params.get(&p).copied().unwrap_or(0)
    }

    /// How many statements name variable `v`.
    pub(crate) fn var(&self, v: Var) -> usize {
        self.vars.get(&v).copied().unwrap_or(0)
    }
}

/// The iterations of the loop over `row` with `body`, which holds a loop
/// (see the module documentation): `kernel` is every statement of the
/// kernel ([`Refs::of`] its body), which says whether a scratch buffer or
/// a variable is touched outside the loop.
pub(crate) fn nest(row: Reg, body: &[Stmt], scope: &Scope, params: &[Param]) -> Iterations {
    match temporaries(row, body, scope, params) {
        Some(_) => Iterations::Independent,
        None => Iterations::Sequential,
    }
}

/// Visits every statement of a nest's `body` in order (a loop's body where
/// the loop stands) with the variables set so far in the same iteration, at
/// the statement's level and the levels around it: a `Set` counts from the
/// next statement on, and one inside a loop is forgotten after the loop
/// (which may run no iteration). Stops at the first error of `visit`. The
/// analysis ([`temporaries`]) and the verifier's own check walk nests so.
pub(crate) fn walk_nest<E>(
    body: &[Stmt],
    mut visit: impl FnMut(&Stmt, &[Var]) -> Result<(), E>,
) -> Result<(), E> {
    let mut set: Vec<Var> = Vec::new();
    // (body, next statement, how many of `set` were set before the body).
    let mut stack: Vec<(&[Stmt], usize, usize)> = vec![(body, 0, 0)];
    while let Some((body, at, outer)) = stack.pop() {
        let Some(stmt) = body.get(at) else {
            set.truncate(outer);
            continue;
        };
        stack.push((body, at + 1, outer));
        visit(stmt, &set)?;
        match stmt {
            Stmt::Set(v, _) => set.push(*v),
            Stmt::Loop { body, .. } => stack.push((body, 0, set.len())),
            _ => {}
        }
    }
    Ok(())
}

/// The temporaries of the loop over `row` with `body` (a nest, as for
/// [`nest`]), in parameter order, if its iterations are independent.
pub(crate) fn temporaries(
    row: Reg,
    body: &[Stmt],
    scope: &Scope,
    params: &[Param],
) -> Option<Vec<ParamIdx>> {
    let kernel = scope.kernel;
    let inside = Refs::of(body);
    // The registers computed from the row, anywhere in the nest (SSA: a
    // register is defined before its uses, in walk order).
    let mut rowwise: IndexSet<Reg> = IndexSet::default();
    rowwise.insert(row);
    // Buffers stored at an index from the row; buffers stored elsewhere
    // (temporaries); whether each buffer's first access is a store.
    let mut by_row: IndexSet<ParamIdx> = IndexSet::default();
    let mut temps: IndexSet<ParamIdx> = IndexSet::default();
    let mut stored_first: IndexMap<ParamIdx, bool> = IndexMap::default();
    let mut loads: Vec<(ParamIdx, Reg)> = Vec::new();
    walk_nest(body, |stmt, set| {
        match stmt {
            Stmt::Let(r, expr) => {
                match expr {
                    Expr::Var(v) if !set.contains(v) => return Err(()),
                    Expr::Load(p, at) | Expr::LoadBit(p, at) => {
                        stored_first.entry(*p).or_insert(false);
                        loads.push((*p, *at));
                    }
                    _ => {}
                }
                if computed_from(expr, |o| rowwise.contains(&o)) {
                    rowwise.insert(*r);
                }
            }
            Stmt::Set(v, _) if kernel.var(*v) != inside.var(*v) => return Err(()),
            Stmt::Store(p, Some(at), _) => {
                stored_first.entry(*p).or_insert(true);
                if rowwise.contains(at) {
                    by_row.insert(*p);
                } else {
                    temps.insert(*p);
                }
            }
            Stmt::Store(_, None, _) | Stmt::StoreCount(..) | Stmt::KeepRow { .. } => return Err(()),
            // A hint: it reads nothing.
            Stmt::Set(..) | Stmt::Loop { .. } | Stmt::CheckNonZero(..) | Stmt::Prefetch(..) => {}
        }
        Ok(())
    })
    .ok()?;
    // A buffer stored by the row may be read only by the row; a temporary
    // is scratch that only this loop touches and writes before it reads.
    for (p, at) in loads {
        if by_row.contains(&p) && !rowwise.contains(&at) {
            return None;
        }
    }
    let mut temps: Vec<ParamIdx> = temps.into_iter().collect();
    temps.sort();
    for &p in &temps {
        let temporary = !by_row.contains(&p)
            && matches!(params[p.index()], Param::Scratch { .. })
            && stored_first.get(&p) == Some(&true)
            // Nothing else in its top-level statement touches it, and
            // nothing after reads what it left: only scratch shared by
            // liveness, which the next tensor writes before it reads.
            && scope.top.param(p) == inside.param(p)
            && (kernel.param(p) == inside.param(p) || scope.after.get(&p) != Some(&false));
        if !temporary {
            return None;
        }
    }
    Some(temps)
}

/// Whether `expr` computes its value from a register `is_rowwise` names:
/// by arithmetic on it, not by a load at it. A value loaded at a row's
/// index is data (an `index_add`'s index, which repeats), so a store at an
/// index computed from it may write one element in several rows.
pub(crate) fn computed_from(expr: &Expr, is_rowwise: impl Fn(Reg) -> bool) -> bool {
    !matches!(expr, Expr::Load(..) | Expr::LoadBit(..))
        && expr.operands().into_iter().any(is_rowwise)
}

/// Every `i64` constant register of a kernel's `body` and its value (SSA:
/// one value wherever it is used), as [`strides`] takes them.
pub fn constants(body: &[Stmt]) -> IndexMap<Reg, i64> {
    let mut konst = IndexMap::default();
    let mut stack = vec![body];
    while let Some(body) = stack.pop() {
        for stmt in body {
            match stmt {
                Stmt::Let(r, Expr::Const(Scalar::I64(k))) => {
                    konst.insert(*r, *k);
                }
                Stmt::Loop { body, .. } => stack.push(body),
                _ => {}
            }
        }
    }
    konst
}

fn mark_body(
    body: &mut [Stmt],
    konst: &IndexMap<Reg, i64>,
    regs: &[DType],
    nest: &dyn Fn(&[Stmt], Reg) -> Iterations,
) {
    // Loops nest only as deep as lowering's loop nests (a handful); the
    // recursion is over the kernel, never over user input's depth.
    for stmt in body {
        if let Stmt::Loop {
            row,
            body,
            iterations,
            ..
        } = stmt
        {
            mark_body(body, konst, regs, nest);
            *iterations = if body.iter().any(|s| matches!(s, Stmt::Loop { .. })) {
                nest(body, *row)
            } else {
                of(*row, body, konst, regs)
            };
        }
    }
}

/// The iterations of the loop over `row` with `body`.
pub(crate) fn of(
    row: Reg,
    body: &[Stmt],
    konst: &IndexMap<Reg, i64>,
    regs: &[DType],
) -> Iterations {
    // What makes a loop sequential whatever its indices (every loop of a
    // tensor nest but the innermost), before the walk of its indices.
    let carries = |stmt: &Stmt| {
        matches!(
            stmt,
            Stmt::Loop { .. } | Stmt::Set(..) | Stmt::StoreCount(..) | Stmt::Store(_, None, _)
        )
    };
    if body.iter().any(carries) {
        return Iterations::Sequential;
    }
    let strides = strides(row, body, konst, regs);
    let mut stored: IndexMap<ParamIdx, Reg> = IndexMap::default();
    let mut selecting = false;
    for stmt in body {
        match stmt {
            Stmt::Store(p, Some(at), _) => {
                let steps = strides.get(at).is_some_and(|&s| s != 0);
                if !steps || *stored.entry(*p).or_insert(*at) != *at {
                    return Iterations::Sequential;
                }
            }
            Stmt::KeepRow { .. } => selecting = true,
            _ => {}
        }
    }
    let reads_own = body.iter().all(|stmt| match stmt {
        Stmt::Let(_, Expr::Load(p, at)) => stored.get(p).is_none_or(|s| s == at),
        Stmt::Let(_, Expr::LoadBit(p, _)) => !stored.contains_key(p),
        _ => true,
    });
    match (reads_own, selecting) {
        (false, _) => Iterations::Sequential,
        (true, true) => Iterations::Selecting,
        (true, false) => Iterations::Independent,
    }
}

/// How far each index register of `body` moves when `row` steps by one,
/// where it is an affine function of `row` with a constant step: `row`
/// itself (1), and sums, differences and constant multiples of such
/// registers and loop invariants.
///
/// Index arithmetic is `i64`: a register of another dtype has no stride and
/// counts as varying (so an `i64` computed from it has no stride either),
/// which keeps this walk to a population member's few index registers.
pub fn strides(
    row: Reg,
    body: &[Stmt],
    konst: &IndexMap<Reg, i64>,
    regs: &[DType],
) -> IndexMap<Reg, i64> {
    // Sized once: a body's registers are all its lets define.
    let mut defined = IndexSet::with_capacity_and_hasher(body.len(), Default::default());
    defined.extend(body.iter().filter_map(|s| match s {
        Stmt::Let(r, _) => Some(*r),
        _ => None,
    }));
    let mut strides = IndexMap::with_capacity_and_hasher(body.len() + 1, Default::default());
    strides.insert(row, 1i64);
    let mut invariant = IndexSet::with_capacity_and_hasher(body.len(), Default::default());
    for stmt in body {
        let Stmt::Let(r, expr) = stmt else { continue };
        if regs[r.index()] != DType::I64 {
            continue;
        }
        let inv = |x: &Reg| (*x != row && !defined.contains(x)) || invariant.contains(x);
        let step = match expr {
            Expr::Binary(BinaryOp::Add, a, b) => match (strides.get(a), strides.get(b)) {
                (Some(&s), None) if inv(b) => Some(s),
                (None, Some(&s)) if inv(a) => Some(s),
                _ => None,
            },
            Expr::Binary(BinaryOp::Sub, a, b) => strides.get(a).copied().filter(|_| inv(b)),
            Expr::Binary(BinaryOp::Mul, a, b) => match (strides.get(a), strides.get(b)) {
                (Some(&s), None) => konst.get(b).and_then(|&k| s.checked_mul(k)),
                (None, Some(&s)) => konst.get(a).and_then(|&k| s.checked_mul(k)),
                _ => None,
            },
            _ => None,
        };
        match step {
            Some(s) => {
                strides.insert(*r, s);
            }
            None => {
                // Loads may see stores of this loop, a variable its sets;
                // everything else is a function of its operands (a scalar
                // input is read-only).
                let pure = !matches!(expr, Expr::Load(..) | Expr::LoadBit(..) | Expr::Var(_));
                if matches!(expr, Expr::Const(_)) || (pure && expr.operands().iter().all(inv)) {
                    invariant.insert(*r);
                }
            }
        }
    }
    strides
}

#[cfg(test)]
mod tests {
    use crate::{lower, Iterations, LowerOptions, Stmt};

    /// Each loop's iterations in the kernel `src` (kiln text) lowers to, in
    /// the order the loops start.
    fn loops(src: &str) -> Vec<Iterations> {
        let graph = kiln_ir::text::parse(src).expect("the test graph parses");
        let graph = kiln_ir::verify(graph).expect("the test graph verifies");
        let kernel = lower(&graph, &LowerOptions::default()).expect("lowers");
        let mut found = Vec::new();
        let mut stack = vec![&kernel.body[..]];
        while let Some(body) = stack.pop() {
            for stmt in body {
                if let Stmt::Loop {
                    body, iterations, ..
                } = stmt
                {
                    found.push(*iterations);
                    stack.push(body);
                }
            }
        }
        found
    }

    #[test]
    fn elementwise_rows_are_independent() {
        let src = "graph \"g\"\nv0: f64[n] = input \"x\"\nv1: f64 = const 2.0\nv2: f64[n] = mul v0, v1\noutput \"y\" = v2\n";
        assert_eq!(loops(src), [Iterations::Independent]);
    }

    #[test]
    fn filters_select_and_reductions_are_sequential() {
        let filter = "graph \"g\"\nv0: f64[n] = input \"x\"\nv1: f64 = const 2.0\nv2: bool[n] = gt v0, v1\nv3: sel[n] = filter v2\noutput \"s\" = v3\n";
        assert_eq!(loops(filter), [Iterations::Selecting]);
        let sum = "graph \"g\"\nv0: f64[n] = input \"x\"\nv1: f64 = sum v0\noutput \"y\" = v1\n";
        assert_eq!(loops(sum), [Iterations::Sequential]);
    }

    #[test]
    fn a_matmul_nest_is_sequential_outside_and_independent_inside() {
        // x @ w: rows of the output, then its columns; the k loop
        // accumulates into the destination row.
        let src = "graph \"g\"\nv0: f64[2, 3] = input \"x\"\nv1: f64[3, 4] = input \"w\"\nv2: f64[2, 4] = matmul v0, v1\noutput \"y\" = v2\n";
        let found = loops(src);
        assert!(found.contains(&Iterations::Sequential), "{found:?}");
        assert!(found.contains(&Iterations::Independent), "{found:?}");
    }

    #[test]
    fn an_index_add_is_sequential_over_its_index() {
        // Rows of the source that share an index add to one row of the
        // result: the loop over the index must not be split, though each
        // row's own loop over the width may be.
        let src = "graph \"g\"\nv0: f32[5, 8] = input \"base\"\nv1: i64[n] = input \"ids\"\nv2: f32[n, 8] = input \"g\"\nv3: f32[5, 8] = index_add v0, v1, v2 [0]\noutput \"y\" = v3\n";
        use Iterations::{Independent, Sequential};
        // As `loops` finds them: the copy of `base`'s rows and the sums'
        // loop over the index, then the width loops inside the sums and
        // inside the copy.
        assert_eq!(
            loops(src),
            [Independent, Sequential, Independent, Independent]
        );
    }
}
