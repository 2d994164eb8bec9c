//! The `auto` tier: a program that starts on a quick tier and moves to LLVM
//! on a background thread once its calls have run long enough to pay for
//! the compile, switching between calls. No deoptimization is ever needed:
//! every tier returns the same bits (docs/semantics.md), so a call that
//! starts on one tier and the next call on another see the same function.
//!
//! **The rule** (ski rental): a program's calls on the quick tier are timed;
//! when their total reaches the LLVM compile's expected cost, the compile
//! starts. Renting until the rent paid equals the price, then buying, costs
//! at most twice what the best choice in hindsight costs, whatever the
//! number of calls still to come. The expected cost comes from the program's
//! own Cranelift compile time, its kernel's statements and math calls ([`LLVM_COST`],
//! [`KernelSize`]), calibrated by the compiles this process has finished
//! (docs/performance.md: how the constants were measured).
//!
//! **The cache.** Where LLVM's code cache (`kiln::llvm::cache`) already holds
//! the program's object, `auto` links it at once and never starts on the
//! quick tier: a second process starts at LLVM speed.
//!
//! **Threads.** One background thread per process compiles, one program at
//! a time, oldest request first. Calls never wait for it. A program dropped
//! before its compile starts is skipped; one dropped while it compiles is
//! freed when the compile ends. Exit and `fork()` while it compiles are
//! `kiln::llvm`'s guards (`kiln_llvm::InFlight`): an exit waits for the
//! compile that runs (so its object reaches the cache) and refuses queued
//! ones; a child forked while it ran refuses LLVM work, so its programs stay
//! on the quick tier.

use crate::{ArrayMut, ArrayRef, Tier};
use crate::{CompileOptions, CompileResult, Cranelift, Engine, JitProgram, Program};
use kiln_ir::{Data, ExecResult, Verified};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError, Weak};
use std::time::{Duration, Instant};

/// LLVM's expected compile time for a program (O3, with its inline vector
/// math), before calibration: `per_cranelift` times the quick tier's
/// compile of the same program (which grows with the code, and with the
/// machine's speed), plus `per_statement` seconds per statement of its
/// kernel (tensor code, which Cranelift compiles stage by stage in a
/// fraction of LLVM's time: ResNet-18's 17,901 statements took it 53 ms and
/// LLVM 1.55 s), plus `per_math` seconds per call of a math function in
/// its kernel (LLVM compiles each inline and vectorized, Cranelift only
/// calls it), plus `base` seconds. Fit to the compiles `bench.py tierup`
/// measures, from GP expressions to ResNet-18 (docs/performance.md, "Fast
/// without choosing" and "No compile cliffs"); each finished background
/// compile then calibrates the process's estimates to this machine.
pub const LLVM_COST: LlvmCost = LlvmCost {
    per_cranelift: 6.0,
    per_statement: 60e-6,
    per_math: 0.01,
    base: 0.005,
};

/// The terms of [`LLVM_COST`].
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct LlvmCost {
    /// Times the Cranelift compile's seconds.
    pub per_cranelift: f64,
    /// Seconds per statement of the kernel.
    pub per_statement: f64,
    /// Seconds per math function call in the kernel.
    pub per_math: f64,
    /// Fixed seconds.
    pub base: f64,
}

/// How far this process's LLVM compiles ran from [`LLVM_COST`]'s
/// estimates: a running geometric mean of actual over estimated (as `f64`
/// bits; 1.0 until a compile finishes).
static CALIBRATION: AtomicU64 = AtomicU64::new(0x3ff0_0000_0000_0000);

/// A kernel's statements and math function calls, each counted once.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelSize {
    /// Statements, loops' bodies included once.
    pub statements: u64,
    /// Calls of math functions (`sin`, `exp`, `pow`, …) among them.
    pub math_calls: u64,
}

impl KernelSize {
    /// The size of `kernel`.
    pub fn of(kernel: &kiln_kernel::Kernel) -> KernelSize {
        fn walk(body: &[kiln_kernel::Stmt], size: &mut KernelSize) {
            use kiln_kernel::{Expr, Stmt};
            for stmt in body {
                size.statements += 1;
                match stmt {
                    Stmt::Loop { body, .. } => walk(body, size),
                    Stmt::Let(_, Expr::Unary(op, _))
                        if kiln_kernel::libcalls::unary_name(*op, kiln_ir::DType::F64)
                            .is_some() =>
                    {
                        size.math_calls += 1
                    }
                    Stmt::Let(_, Expr::Binary(op, ..))
                        if kiln_kernel::libcalls::binary_name(*op, kiln_ir::DType::F64)
                            .is_some() =>
                    {
                        size.math_calls += 1
                    }
                    _ => {}
                }
            }
        }
        let mut size = KernelSize::default();
        walk(&kernel.body, &mut size);
        size
    }

    /// [`LLVM_COST`]'s estimate for a program whose Cranelift compile
    /// took `cranelift`, uncalibrated, in seconds.
    fn raw_estimate(self, cranelift: Duration) -> f64 {
        let c = LLVM_COST;
        c.base
            + c.per_cranelift * cranelift.as_secs_f64()
            + c.per_statement * self.statements as f64
            + c.per_math * self.math_calls as f64
    }

    /// The expected LLVM compile time in this process, for a program of
    /// this size whose Cranelift compile took `cranelift`.
    pub fn llvm_estimate(self, cranelift: Duration) -> Duration {
        let calibration = f64::from_bits(CALIBRATION.load(Ordering::Relaxed));
        Duration::try_from_secs_f64(self.raw_estimate(cranelift) * calibration)
            .unwrap_or(Duration::MAX)
    }

    /// Folds a finished compile into the calibration.
    fn calibrate(self, cranelift: Duration, took: Duration) {
        let ratio = took.as_secs_f64() / self.raw_estimate(cranelift);
        if !(ratio.is_finite() && ratio > 0.0) {
            return;
        }
        let _ = CALIBRATION.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
            let old = f64::from_bits(bits);
            Some((old * ratio).sqrt().to_bits())
        });
    }
}

/// When an `auto` program starts its LLVM compile.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum TierUp {
    /// Once its calls have taken [`LLVM_PER_CRANELIFT`] times its quick
    /// compile, or what `KILN_TIER_UP_AFTER` says (seconds of calls).
    #[default]
    Measured,
    /// Once its calls have taken this long (zero: after the first call).
    After(Duration),
    /// Never: it stays on the quick tier (unless the cache holds its code).
    Never,
}

impl TierUp {
    /// The rule the environment sets: `KILN_TIER_UP_AFTER` in seconds of
    /// calls (`0`: after the first call; `never`), else [`TierUp::Measured`].
    pub fn from_env() -> TierUp {
        match std::env::var("KILN_TIER_UP_AFTER") {
            Ok(v) if v.trim() == "never" => TierUp::Never,
            Ok(v) => v
                .trim()
                .parse::<f64>()
                .ok()
                .and_then(|s| Duration::try_from_secs_f64(s).ok())
                .map_or(TierUp::Measured, TierUp::After),
            Err(_) => TierUp::Measured,
        }
    }
}

/// Where an `auto` program's LLVM compile stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TierUpState {
    /// Its calls have not yet paid for the compile.
    Counting,
    /// Asked for, waiting for the background thread.
    Queued,
    /// Compiling on the background thread.
    Compiling,
    /// Done: calls run the LLVM code.
    Done,
    /// Failed or refused (the message says why); calls stay on the quick
    /// tier.
    Failed(String),
    /// The program started on LLVM (its code was in the cache), or was
    /// told never to tier up, or this build has no LLVM tier.
    Settled,
}

/// What an `auto` program has done: `kiln.Function.stats` in Python.
#[derive(Clone, Debug, PartialEq)]
pub struct TierStats {
    /// The tier calls run on now.
    pub tier: Tier,
    /// The tier it started on.
    pub first_tier: Tier,
    /// Seconds its first compile took, all told (preparing the graph, the
    /// code cache lookup, the quick tier's compile or linking the cached
    /// LLVM code).
    pub compile_seconds: f64,
    /// Seconds of that in the quick tier's compile itself (or the cache's
    /// load and link).
    pub first_tier_compile_seconds: f64,
    /// Whether it started on LLVM code from the code cache.
    pub cache_hit: bool,
    /// Calls timed on the quick tier (until the LLVM compile was asked for).
    pub calls: u64,
    /// Seconds those calls took.
    pub call_seconds: f64,
    /// Seconds of calls after which the LLVM compile starts (`None`: never).
    pub threshold_seconds: Option<f64>,
    /// The size of the quick tier's kernel, which the estimate reads.
    pub size: KernelSize,
    /// The LLVM compile's expected seconds, when the program was made.
    pub llvm_estimate_seconds: f64,
    /// Where the LLVM compile stands.
    pub state: TierUpState,
    /// Seconds the background LLVM compile took, once done.
    pub llvm_compile_seconds: Option<f64>,
    /// Seconds from the program's creation to the switch, once done.
    pub switched_after_seconds: Option<f64>,
}

const COUNTING: u8 = 0;
const QUEUED: u8 = 1;
const COMPILING: u8 = 2;
const DONE: u8 = 3;
const FAILED: u8 = 4;
const SETTLED: u8 = 5;

struct Shared {
    /// The quick tier's program (or the LLVM one, settled).
    first: JitProgram,
    first_tier: Tier,
    /// The LLVM program, once compiled.
    tuned: OnceLock<JitProgram>,
    state: AtomicU8,
    calls: AtomicU64,
    nanos: AtomicU64,
    threshold: Option<u64>,
    options: CompileOptions,
    created: Instant,
    compile: Duration,
    cache_hit: bool,
    size: KernelSize,
    /// The first tier's own compile (Cranelift's, or linking cached code).
    quick: Duration,
    estimate: Duration,
    /// The background compile's outcome: its time, the switch's time, or
    /// the error; and a condition variable for [`TieredProgram::wait`].
    outcome: Mutex<Outcome>,
    settled: Condvar,
}

#[derive(Default)]
struct Outcome {
    llvm_compile: Option<Duration>,
    switched_after: Option<Duration>,
    error: Option<String>,
}

/// A program on the `auto` tier. Cheap to clone; `Send + Sync`: call it from
/// many threads, during the switch too.
#[derive(Clone)]
pub struct TieredProgram {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for TieredProgram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TieredProgram")
            .field("tier", &self.tier())
            .finish_non_exhaustive()
    }
}

impl TieredProgram {
    /// Compiles `graph` for the `auto` tier: LLVM's code from the cache if
    /// it holds it, else the quick tier's, with LLVM to follow as `rule`
    /// says.
    pub fn compile(
        graph: &Verified,
        options: &CompileOptions,
        rule: TierUp,
    ) -> CompileResult<TieredProgram> {
        let start = Instant::now();
        let graph = options.prepare(graph)?;
        // Prepared once: neither compile below optimizes it again.
        let options = CompileOptions {
            optimize: false,
            ..options.clone()
        };
        if cfg!(feature = "llvm") && options.cache {
            if let Some(program) = cached_llvm(&graph, &options) {
                let linked = start.elapsed();
                let size = KernelSize::of(program.kernel());
                return Ok(Self::new(
                    program,
                    Tier::Llvm,
                    start,
                    (true, linked, size, Duration::ZERO),
                    None,
                    options,
                ));
            }
        }
        let quick_start = Instant::now();
        let first = Cranelift.compile(&graph, &options)?;
        let quick = quick_start.elapsed();
        let size = KernelSize::of(first.kernel());
        let estimate = size.llvm_estimate(quick);
        let threshold = match rule {
            _ if !Tier::Llvm.is_built() => None,
            TierUp::Never => None,
            TierUp::After(d) => Some(d),
            TierUp::Measured => Some(estimate),
        };
        Ok(Self::new(
            first,
            Tier::Cranelift,
            start,
            (false, quick, size, estimate),
            threshold,
            options,
        ))
    }

    fn new(
        first: JitProgram,
        first_tier: Tier,
        start: Instant,
        (cache_hit, quick, size, estimate): (bool, Duration, KernelSize, Duration),
        threshold: Option<Duration>,
        options: CompileOptions,
    ) -> TieredProgram {
        let threshold = threshold.map(|d| d.as_nanos().min(u64::MAX as u128) as u64);
        TieredProgram {
            shared: Arc::new(Shared {
                first,
                first_tier,
                tuned: OnceLock::new(),
                state: AtomicU8::new(if threshold.is_some() {
                    COUNTING
                } else {
                    SETTLED
                }),
                calls: AtomicU64::new(0),
                nanos: AtomicU64::new(0),
                threshold,
                options,
                created: start,
                compile: start.elapsed(),
                cache_hit,
                size,
                quick,
                estimate,
                outcome: Mutex::new(Outcome::default()),
                settled: Condvar::new(),
            }),
        }
    }

    /// The program calls run on now.
    pub fn current(&self) -> &JitProgram {
        self.shared.tuned.get().unwrap_or(&self.shared.first)
    }

    /// The tier calls run on now.
    pub fn tier(&self) -> Tier {
        if self.shared.tuned.get().is_some() {
            Tier::Llvm
        } else {
            self.shared.first_tier
        }
    }

    /// Calls `f` with the program to run now; times it while the calls are
    /// being counted, and asks for the LLVM compile once they have paid
    /// for it. Every call of an `auto` program goes through here.
    #[inline]
    pub fn with<R>(&self, f: impl FnOnce(&JitProgram) -> R) -> R {
        let shared = &*self.shared;
        if let Some(tuned) = shared.tuned.get() {
            return f(tuned);
        }
        if shared.state.load(Ordering::Relaxed) != COUNTING {
            return f(&shared.first);
        }
        let start = Instant::now();
        let result = f(&shared.first);
        self.count(start.elapsed());
        result
    }

    fn count(&self, took: Duration) {
        let shared = &*self.shared;
        let took = took.as_nanos().min(u64::MAX as u128) as u64;
        shared.calls.fetch_add(1, Ordering::Relaxed);
        let total = shared
            .nanos
            .fetch_add(took, Ordering::Relaxed)
            .saturating_add(took);
        if total >= shared.threshold.unwrap_or(u64::MAX)
            && shared
                .state
                .compare_exchange(COUNTING, QUEUED, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            let weak = Arc::downgrade(&self.shared);
            if let Err(e) = submit(Box::new(move || tier_up(weak))) {
                self.shared.fail(e);
            }
        }
    }

    /// Waits until the LLVM compile is done or failed, or `timeout` passes;
    /// returns whether it ended. (For tests and benchmarks: calls never
    /// wait.)
    pub fn wait(&self, timeout: Duration) -> bool {
        let ended = |s: u8| matches!(s, DONE | FAILED | SETTLED);
        let outcome = self
            .shared
            .outcome
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (_outcome, result) = self
            .shared
            .settled
            .wait_timeout_while(outcome, timeout, |_| {
                !ended(self.shared.state.load(Ordering::Acquire))
            })
            .unwrap_or_else(PoisonError::into_inner);
        !result.timed_out()
    }

    /// What the program has done so far.
    pub fn stats(&self) -> TierStats {
        let shared = &*self.shared;
        let outcome = shared
            .outcome
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let state = match shared.state.load(Ordering::Acquire) {
            COUNTING => TierUpState::Counting,
            QUEUED => TierUpState::Queued,
            COMPILING => TierUpState::Compiling,
            DONE => TierUpState::Done,
            FAILED => TierUpState::Failed(outcome.error.clone().unwrap_or_default()),
            _ => TierUpState::Settled,
        };
        TierStats {
            tier: self.tier(),
            first_tier: shared.first_tier,
            compile_seconds: shared.compile.as_secs_f64(),
            first_tier_compile_seconds: shared.quick.as_secs_f64(),
            cache_hit: shared.cache_hit,
            calls: shared.calls.load(Ordering::Relaxed),
            call_seconds: shared.nanos.load(Ordering::Relaxed) as f64 * 1e-9,
            threshold_seconds: shared.threshold.map(|n| n as f64 * 1e-9),
            size: shared.size,
            llvm_estimate_seconds: shared.estimate.as_secs_f64(),
            state,
            llvm_compile_seconds: outcome.llvm_compile.map(|d| d.as_secs_f64()),
            switched_after_seconds: outcome.switched_after.map(|d| d.as_secs_f64()),
        }
    }

    /// The background compile's error, if it failed (each program reports
    /// it once: the caller keeps whether it did).
    pub fn failure(&self) -> Option<String> {
        if self.shared.state.load(Ordering::Relaxed) != FAILED {
            return None;
        }
        let outcome = self
            .shared
            .outcome
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        outcome.error.clone()
    }
}

impl Shared {
    fn fail(&self, error: String) {
        let mut outcome = self.outcome.lock().unwrap_or_else(PoisonError::into_inner);
        outcome.error = Some(error);
        self.state.store(FAILED, Ordering::Release);
        self.settled.notify_all();
    }
}

/// The background thread's work for one program: compile on LLVM (storing
/// in the code cache), then publish.
fn tier_up(program: Weak<Shared>) {
    // Dropped before its turn: nothing to do.
    let Some(shared) = program.upgrade() else {
        return;
    };
    let start = Instant::now();
    // `compiling` once inside LLVM's guard: a `fork()` that sees it finds
    // LLVM busy.
    let compiling = || shared.state.store(COMPILING, Ordering::Release);
    // Published inside LLVM's guard, so that an exit that waits for the
    // compile (`before_exit`) finds the program on LLVM after it.
    let publish = |program: JitProgram| {
        let took = start.elapsed();
        shared.size.calibrate(shared.quick, took);
        let mut outcome = shared
            .outcome
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        outcome.llvm_compile = Some(took);
        outcome.switched_after = Some(shared.created.elapsed());
        // The one write of `tuned`: calls from here on run LLVM's code.
        let _ = shared.tuned.set(program);
        shared.state.store(DONE, Ordering::Release);
        shared.settled.notify_all();
    };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        llvm_compile(shared.first.verified(), &shared.options, compiling, publish)
    }));
    match result {
        Ok(Ok(())) => {}
        Ok(Err(e)) => shared.fail(format!("the LLVM tier-up failed: {e}")),
        Err(_) => shared.fail("the LLVM tier-up panicked".into()),
    }
}

/// The LLVM compile, lowering included, and `publish` of its program, inside
/// one of `kiln::llvm`'s guards (`entered` runs once inside it): an exit
/// that starts meanwhile waits for all of it (so its object reaches the
/// cache and the program is published), and a process that is exiting, or
/// a child forked while LLVM was busy, refuses it.
#[cfg(feature = "llvm")]
fn llvm_compile(
    graph: &Verified,
    options: &CompileOptions,
    entered: impl FnOnce(),
    publish: impl FnOnce(JitProgram),
) -> CompileResult<()> {
    let _guard =
        kiln_llvm::InFlight::enter().map_err(|e| crate::CompileError::from(e.into_backend()))?;
    entered();
    publish(crate::Llvm.compile(graph, options)?);
    Ok(())
}

#[cfg(not(feature = "llvm"))]
fn llvm_compile(
    _: &Verified,
    _: &CompileOptions,
    _: impl FnOnce(),
    _: impl FnOnce(JitProgram),
) -> CompileResult<()> {
    Err(crate::CompileError::Unsupported(crate::NO_LLVM.into()))
}

/// LLVM's program for `graph` if the code cache holds its object.
#[cfg(feature = "llvm")]
fn cached_llvm(graph: &Verified, options: &CompileOptions) -> Option<JitProgram> {
    // No cache (`KILN_CACHE=0`): not even the lowering a lookup needs.
    kiln_llvm::Cache::from_env()?;
    crate::jit::compile_cached_only(&crate::Llvm, graph, options).ok()
}

#[cfg(not(feature = "llvm"))]
fn cached_llvm(_: &Verified, _: &CompileOptions) -> Option<JitProgram> {
    None
}

impl Program for TieredProgram {
    fn verified(&self) -> &Verified {
        self.shared.first.verified()
    }

    fn run_refs(&self, inputs: &[&Data]) -> ExecResult<Vec<Data>> {
        self.with(|p| p.run_refs(inputs))
    }

    fn run_arrays(
        &self,
        inputs: &[ArrayRef<'_>],
        outputs: &mut [ArrayMut<'_>],
    ) -> ExecResult<Vec<usize>> {
        self.with(|p| p.run_arrays(inputs, outputs))
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// The background compile thread of one process: its queue, and the process
/// it belongs to (a forked child starts its own).
struct Worker {
    pid: u32,
    jobs: Mutex<Jobs>,
    ready: Condvar,
    idle: Condvar,
}

#[derive(Default)]
struct Jobs {
    queue: VecDeque<Job>,
    running: bool,
}

static WORKER: AtomicPtr<Worker> = AtomicPtr::new(std::ptr::null_mut());

/// This process's worker, if it has started one.
fn worker() -> Option<&'static Worker> {
    let current = WORKER.load(Ordering::Acquire);
    // SAFETY: a published `Worker` is leaked, never freed.
    let worker = unsafe { current.as_ref() }?;
    (worker.pid == std::process::id()).then_some(worker)
}

/// Queues `job` for this process's background thread, starting the thread
/// the first time (and the first time in a forked child, whose parent's
/// thread did not follow it: its queue and lock are left behind).
fn submit(job: Job) -> Result<(), String> {
    let pid = std::process::id();
    let worker = loop {
        if let Some(worker) = worker() {
            break worker;
        }
        let current = WORKER.load(Ordering::Acquire);
        let fresh = Box::into_raw(Box::new(Worker {
            pid,
            jobs: Mutex::default(),
            ready: Condvar::new(),
            idle: Condvar::new(),
        }));
        match WORKER.compare_exchange(current, fresh, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                // SAFETY: just published, and leaked for the process's life.
                let worker: &'static Worker = unsafe { &*fresh };
                std::thread::Builder::new()
                    .name("kiln-tier-up".into())
                    .spawn(move || worker.run())
                    .map_err(|e| format!("cannot start the tier-up thread: {e}"))?;
                break worker;
            }
            // SAFETY: `fresh` was never published.
            Err(_) => drop(unsafe { Box::from_raw(fresh) }),
        }
    };
    let mut jobs = worker.jobs.lock().unwrap_or_else(PoisonError::into_inner);
    jobs.queue.push_back(job);
    worker.ready.notify_one();
    Ok(())
}

/// Waits until this process's background thread has no compile queued or
/// running, at most `timeout`; returns whether it is idle. (Every `auto`
/// program that asked for LLVM has its answer then: `kiln.wait_for_tier_up()`
/// in Python, for benchmarks and for servers that warm up before serving.)
pub fn wait_idle(timeout: Duration) -> bool {
    let Some(worker) = worker() else {
        return true;
    };
    let jobs = worker.jobs.lock().unwrap_or_else(PoisonError::into_inner);
    let (_jobs, result) = worker
        .idle
        .wait_timeout_while(jobs, timeout, |j| j.running || !j.queue.is_empty())
        .unwrap_or_else(PoisonError::into_inner);
    !result.timed_out()
}

impl Worker {
    fn run(&self) {
        let mut jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            match jobs.queue.pop_front() {
                Some(job) => {
                    jobs.running = true;
                    drop(jobs);
                    job();
                    jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
                    jobs.running = false;
                }
                None => {
                    self.idle.notify_all();
                    jobs = self
                        .ready
                        .wait(jobs)
                        .unwrap_or_else(PoisonError::into_inner);
                }
            }
        }
    }
}
