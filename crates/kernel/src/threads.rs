//! kiln's threads: one pool per process, how many threads a call may use,
//! and the runtime that runs a kernel's stages ([`crate::stages`]) in
//! chunks on them.
//!
//! - **How many.** [`num_threads`]: the calling thread's override
//!   ([`with_num_threads`]) if any, else the process's setting
//!   ([`set_num_threads`]), else `KILN_NUM_THREADS`, else the machine's
//!   available parallelism.
//! - **When.** A stage runs in chunks when its work (statements run, as
//!   [`crate::stages::Work`] counts them) gives every thread at least
//!   [`grain`] of it; below that it runs whole on the calling thread and
//!   wakes no thread (docs/performance.md has the measurement behind the
//!   default).
//! - **Where.** One pool (`crate::pool`, kiln's own: it hands a stage to
//!   spinning workers in about a microsecond where rayon's took 13–18 µs),
//!   made on first use with one worker fewer than the threads asked for
//!   (the calling thread takes chunks too), made again larger when more are
//!   asked for, and anew in a child process after `fork()` (whose pool's
//!   threads did not survive the fork). It runs one stage at a time: a
//!   caller that finds it busy with another thread's stage runs its chunks
//!   itself, so threads are never oversubscribed and work is never nested.
//! - **Or the host's.** A host with an OpenMP runtime of its own (PyTorch's
//!   eager kernels run on libgomp's threads) can hand a call its
//!   `GOMP_parallel` ([`with_team`]): the stages then run on the host's
//!   threads, as Inductor's generated `#pragma omp parallel` loops do, and
//!   no second pool spins beside them for the same cores.

use crate::abi::CompiledKernel;
use crate::pool::{claim_chunks, run_here, Pool, Run};
use crate::stages::Chunking;
use std::cell::Cell;
use std::ffi::{c_uint, c_void};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The work below which a thread is not worth waking, per thread: a stage
/// runs in `min(threads, work / grain)` chunks.
pub const DEFAULT_GRAIN: u64 = 1 << 16;

/// The ways kiln's tests run every kernel, by name: at 1, 2, 3 and 7
/// threads on kiln's pool (3 and 7 put chunk edges in the middle of vectors
/// and tiles), with 7 chunks run last first on the calling thread
/// ([`with_chunks_reversed`]), and at 7 threads on a team behind OpenMP's
/// interface ([`with_team`]). With a grain of 0 every loop is cut.
pub const TESTED: [(&str, usize, Runner); 6] = [
    ("1 thread", 1, Runner::Pool),
    ("2 threads", 2, Runner::Pool),
    ("3 threads", 3, Runner::Pool),
    ("7 threads", 7, Runner::Pool),
    ("7 chunks last first", 7, Runner::LastFirst),
    ("7 threads on an OpenMP team", 7, Runner::Team),
];

/// What runs a tested mode's chunks ([`TESTED`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runner {
    /// kiln's pool.
    Pool,
    /// The calling thread, the last chunk first.
    LastFirst,
    /// Threads behind OpenMP's `GOMP_parallel` interface.
    Team,
}

/// `run` in each mode of [`TESTED`], in order: each mode's name and what
/// `run` returned there.
pub fn in_tested_modes<R>(run: impl Fn() -> R) -> impl Iterator<Item = (&'static str, R)> {
    TESTED.into_iter().map(move |(name, threads, runner)| {
        let got = with_num_threads(threads, || match runner {
            Runner::Pool => run(),
            Runner::LastFirst => with_chunks_reversed(&run),
            // SAFETY: `scoped_team` runs `member(data)` on the threads it
            // is asked for and returns when all have.
            Runner::Team => unsafe { with_team(Some(scoped_team), &run) },
        });
        (name, got)
    })
}

/// Rows of an elementwise or filter loop run in vectors: each chunk gets at
/// least `grain / ROW_GRAIN` rows (4,096 at the default grain, Inductor's
/// figure per thread) as well as `grain` statements.
const ROW_GRAIN: u64 = 16;

static THREADS: AtomicUsize = AtomicUsize::new(0);
static CHUNKED: AtomicU64 = AtomicU64::new(0);
static GRAIN: AtomicU64 = AtomicU64::new(DEFAULT_GRAIN);

thread_local! {
    static OVERRIDE: Cell<usize> = const { Cell::new(0) };
    static REVERSED: Cell<bool> = const { Cell::new(false) };
    static TEAM: Cell<Option<GompParallel>> = const { Cell::new(None) };
    /// The calling thread's rooms for chunks' temporaries, kept between
    /// calls ([`chunked`]).
    static ROOMS: Cell<Vec<Line>> = const { Cell::new(Vec::new()) };
}

/// The threads a kernel may use when none is set: `KILN_NUM_THREADS` if it
/// is a positive integer, else the machine's available parallelism.
pub fn default_threads() -> usize {
    static DEFAULT: OnceLock<usize> = OnceLock::new();
    *DEFAULT.get_or_init(|| {
        std::env::var("KILN_NUM_THREADS")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|&n| n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    })
}

/// How many threads a kernel called from this thread may use now.
pub fn num_threads() -> usize {
    match OVERRIDE.with(Cell::get) {
        0 => match THREADS.load(Ordering::Relaxed) {
            0 => default_threads(),
            n => n,
        },
        n => n,
    }
}

/// Sets how many threads kernels may use, for every thread of the process
/// without an override; `0` returns to the default ([`default_threads`]).
pub fn set_num_threads(n: usize) {
    THREADS.store(n, Ordering::Relaxed);
}

/// Runs `f` with kernels called from this thread using at most `n` threads
/// (`0`: the process's setting), then restores what was set before, also
/// when `f` panics.
pub fn with_num_threads<R>(n: usize, f: impl FnOnce() -> R) -> R {
    struct Restore(usize);
    impl Drop for Restore {
        fn drop(&mut self) {
            swap_override(self.0);
        }
    }
    let _restore = Restore(swap_override(n));
    f()
}

/// Runs `f` with every stage cut in chunks running on this thread, one
/// after the other, the last first: for tests. The bits must be the same
/// (iterations that are independent may run in any order); a loop whose
/// iterations were not would read what a later one had not written yet,
/// deterministically, where threads would race.
pub fn with_chunks_reversed<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            REVERSED.with(|r| r.set(self.0));
        }
    }
    let _restore = Restore(REVERSED.with(|r| r.replace(true)));
    f()
}

/// Sets this thread's override (`0`: none) and returns the one it replaces:
/// [`with_num_threads`] for callers that cannot pass a closure (a binding
/// that restores it in a `finally`).
pub fn swap_override(n: usize) -> usize {
    OVERRIDE.with(|o| o.replace(n))
}

/// The work each thread must get before a stage is cut in chunks.
pub fn grain() -> u64 {
    GRAIN.load(Ordering::Relaxed)
}

/// Sets [`grain`] for the process (`0` cuts every loop that has as many
/// iterations as threads, which tests use to cut small kernels; the
/// default is [`DEFAULT_GRAIN`]).
pub fn set_grain(work: u64) {
    GRAIN.store(work, Ordering::Relaxed);
}

/// How many stage runs this process cut into chunks on several threads so
/// far (a figure for tests and profiles: a kernel below the grain adds
/// nothing).
pub fn chunked_runs() -> u64 {
    CHUNKED.load(Ordering::Relaxed)
}

/// How many workers kiln's pool has in this process (0 before a stage
/// first ran on it): a figure for tests.
pub fn pool_workers() -> usize {
    let pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    match &*pool {
        Some((pid, pool)) if *pid == std::process::id() => pool.workers(),
        _ => 0,
    }
}

/// Runs `run(j)` for every `j` in `0..parts` on `threads` threads: the
/// caller's and workers of kiln's pool (the pool grows to `threads - 1`
/// workers if it has fewer), each thread taking the next part as it
/// finishes one; returns when all have returned. For work outside kernels
/// that would otherwise make threads of its own on every call (a GP
/// population's compile and evaluation): the pool's workers are made once,
/// and keep their allocator's memory. As for kernels' stages, a caller that
/// finds the pool running another's work (or a system that gives no
/// threads) runs every part itself, in order. Either way a part that
/// panics does not stop the others: the panic is raised here after them.
pub fn for_each_part(parts: usize, threads: usize, run: &(dyn Fn(usize) + Sync)) {
    let threads = threads.min(parts);
    match (threads > 1).then(|| pool(threads - 1)).flatten() {
        Some(pool) => pool.run(parts, threads, run),
        None => run_here(parts, run),
    }
}

/// The process's pool and the process it was made in.
static POOL: Mutex<Option<(u32, Arc<Pool>)>> = Mutex::new(None);

/// A pool with at least `workers` threads.
fn pool(workers: usize) -> Option<Arc<Pool>> {
    let pid = std::process::id();
    let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    match &*pool {
        Some((p, pool)) if *p == pid && pool.workers() >= workers => return Some(pool.clone()),
        Some((p, _)) if *p != pid => {
            // Made before a fork: its threads were the parent's, and its
            // locks may be held by threads that are not here. Leave it.
            std::mem::forget(pool.take());
        }
        _ => {}
    }
    let built = Arc::new(Pool::new(workers)?);
    *pool = Some((pid, built.clone()));
    Some(built)
}

/// OpenMP's `GOMP_parallel(fn, data, num_threads, flags)`: runs `fn(data)`
/// on every thread of a team of at most `num_threads` (the caller's among
/// them; fewer where the runtime's limits say so) and returns when all
/// have. libgomp defines it, and LLVM's and Intel's
/// OpenMP runtimes define it for code GCC compiled.
pub type GompParallel = unsafe extern "C" fn(
    member: unsafe extern "C" fn(*mut c_void),
    data: *mut c_void,
    num_threads: c_uint,
    flags: c_uint,
);

/// Runs `f` with the stages that kernels called from this thread cut in
/// chunks running on `team`'s threads (`None`: kiln's own pool), then
/// restores what was set before, also when `f` panics.
///
/// # Safety
/// `team`, if any, must be an OpenMP runtime's `GOMP_parallel` (or behave
/// as one: run `member(data)` on at most `num_threads` threads, the
/// caller's among them, and return when all have), loaded for as long as
/// `f` runs.
pub unsafe fn with_team<R>(team: Option<GompParallel>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<GompParallel>);
    impl Drop for Restore {
        fn drop(&mut self) {
            // SAFETY: what was set before, under its own setter's contract.
            unsafe { swap_team(self.0) };
        }
    }
    // SAFETY: the caller's contract.
    let _restore = Restore(unsafe { swap_team(team) });
    f()
}

/// Sets this thread's team ([`with_team`]) and returns the one it
/// replaces: for callers that cannot pass a closure (the torch backend
/// shares eager torch's OpenMP threads call by call).
///
/// # Safety
/// As for [`with_team`], for as long as it stays set.
pub unsafe fn swap_team(team: Option<GompParallel>) -> Option<GompParallel> {
    TEAM.with(|t| t.replace(team))
}

/// A team of scoped threads behind OpenMP's interface, for tests: the
/// calling thread and `num_threads - 1` threads made for the call.
unsafe extern "C" fn scoped_team(
    member: unsafe extern "C" fn(*mut c_void),
    data: *mut c_void,
    num_threads: c_uint,
    _flags: c_uint,
) {
    let data = data as usize;
    std::thread::scope(|s| {
        for _ in 1..num_threads {
            // SAFETY: `with_team`'s contract for `member(data)`, which the
            // scope outlives.
            s.spawn(move || unsafe { member(data as *mut c_void) });
        }
        // SAFETY: as above.
        unsafe { member(data as *mut c_void) };
    });
}

/// One OpenMP team's work: chunks claimed in turn, as the pool's workers
/// claim them.
struct Team<'a> {
    run: Run<'a>,
    parts: usize,
    next: AtomicUsize,
    panicked: AtomicBool,
}

/// What each thread of an OpenMP team runs: chunks until none is left. A
/// panic must not unwind into the runtime's C frames: it is caught and
/// raised again on the calling thread.
unsafe extern "C" fn member(data: *mut c_void) {
    // SAFETY: `data` is the `Team` that `on_team` keeps alive until
    // `GOMP_parallel` returns, which is after every member has.
    let team = unsafe { &*(data as *const Team<'_>) };
    claim_chunks(&team.next, team.parts, &team.panicked, team.run, || {});
}

/// Runs `run(j)` for every `j` in `0..parts` on a team of `parts` OpenMP
/// threads.
fn on_team(parallel: GompParallel, parts: usize, run: Run<'_>) {
    let team = Team {
        run,
        parts,
        next: AtomicUsize::new(0),
        panicked: AtomicBool::new(false),
    };
    let threads = c_uint::try_from(parts).unwrap_or(c_uint::MAX);
    // SAFETY: `with_team`'s contract makes `parallel` OpenMP's entry
    // point, which returns after every member has returned: `team` outlives
    // them all.
    unsafe { parallel(member, &team as *const Team<'_> as *mut c_void, threads, 0) };
    assert!(
        !team.panicked.into_inner(),
        "a chunk of a kernel panicked on an OpenMP thread"
    );
}

/// One stage of a kernel compiled in stages.
#[derive(Clone, Debug)]
pub struct Stage {
    /// The stage's code.
    pub code: CompiledKernel,
    /// How it runs in chunks; `None` for a sequential stage.
    pub chunk: Option<Chunking>,
}

/// A 64-byte line of a chunk's temporaries (aligned as scratch rooms are).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// Runs `stages` with the original kernel's `slots`; the status of the
/// first stage that fails, or of the last.
///
/// # Safety
/// As for [`CompiledKernel::call`] of the kernel the stages were split
/// from.
pub(crate) unsafe fn run(stages: &[Stage], slots: &[u64]) -> i32 {
    let n = slots.len();
    // A stage's slots: the kernel's and its range, on the stack for the
    // kernels of up to 32 parameters (every GP member and column kernel).
    let mut stack = [0u64; 34];
    let mut heap = Vec::new();
    let buf: &mut [u64] = if n + 2 <= stack.len() {
        &mut stack[..n + 2]
    } else {
        heap.resize(n + 2, 0);
        &mut heap
    };
    buf[..n].copy_from_slice(slots);
    let threads = num_threads();
    for stage in stages {
        let status = match &stage.chunk {
            None => {
                buf[n] = 0;
                buf[n + 1] = 0;
                // SAFETY: the caller's slots, and a range the stage ignores.
                unsafe { stage.code.call(buf) }
            }
            Some(chunk) => {
                // The kernel's own index arithmetic on its extents
                // (`stages::split` takes no loop whose count it cannot
                // compute): it cannot fail on the slots of a valid call.
                let trip = chunk
                    .trip
                    .eval(slots)
                    .expect("a stage's trip count is computable from its call's extents");
                let parts = if threads > 1 {
                    let grain = grain();
                    let work = trip.saturating_mul(chunk.work.eval(slots));
                    let mut parts = (threads as u64).min(trip).min(work / grain.max(1));
                    if chunk.work.is_row() {
                        // Rows of vector code run several per statement.
                        parts = parts.min(trip / (grain / ROW_GRAIN).max(1));
                    }
                    parts.max(1) as usize
                } else {
                    1
                };
                buf[n] = 0;
                buf[n + 1] = trip;
                if parts <= 1 {
                    // SAFETY: the caller's slots and the whole range.
                    unsafe { stage.code.call(buf) }
                } else {
                    // SAFETY: as above, each chunk a part of the range.
                    unsafe { chunked(&stage.code, chunk, buf, trip, parts) }
                }
            }
        };
        if status != crate::abi::STATUS_OK {
            return status;
        }
    }
    crate::abi::STATUS_OK
}

/// Runs `code` over `0..trip` in `parts` chunks on the pool, the first on
/// this thread; `slots` are the stage's, its range last.
///
/// # Safety
/// As for [`run`].
unsafe fn chunked(
    code: &CompiledKernel,
    chunk: &Chunking,
    slots: &[u64],
    trip: u64,
    parts: usize,
) -> i32 {
    CHUNKED.fetch_add(1, Ordering::Relaxed);
    let n = slots.len() - 2;
    let bound = |j: usize| (u128::from(trip) * j as u128 / parts as u128) as u64;
    let sels = chunk.selections.len();
    let mut counts = vec![0i64; parts * sels];
    // One pointer for every chunk's counts (reborrowing `counts` per chunk
    // would invalidate the pointers taken before).
    let counts_at = counts.as_mut_ptr();
    // Rooms for the temporaries of every chunk but the first (which uses
    // the caller's): one buffer per calling thread, kept for its next call.
    let lines: Vec<usize> = chunk
        .temps
        .iter()
        .map(|(_, dims, dtype)| {
            let elements = dims
                .iter()
                .map(|d| d.eval(&slots[..n]).unwrap_or(0))
                .fold(1u64, u64::saturating_mul);
            elements
                .saturating_mul(dtype.size_bytes() as u64)
                .div_ceil(64) as usize
        })
        .collect();
    let per_chunk: usize = lines.iter().sum();
    let mut rooms = ROOMS.with(|r| r.take());
    let want = per_chunk * (parts - 1);
    if rooms.len() < want {
        rooms = vec![Line([0; 64]); want];
    }
    // Debug builds fill rooms with NaN/-1/true on every call, as the arena
    // does: no lowering may rely on zeroed or left-over scratch.
    if cfg!(debug_assertions) {
        rooms[..want].fill(Line([0xff; 64]));
    }
    let base = rooms.as_mut_ptr();
    let mut calls: Vec<Vec<u64>> = Vec::with_capacity(parts);
    for j in 0..parts {
        let mut s = slots.to_vec();
        let (start, end) = (bound(j), bound(j + 1));
        s[n] = start;
        s[n + 1] = end;
        if j > 0 {
            let mut at = per_chunk * (j - 1);
            for ((param, ..), len) in chunk.temps.iter().zip(&lines) {
                // SAFETY: `at + len <= want <= rooms.len()`.
                s[*param] = unsafe { base.add(at) } as u64;
                at += len;
            }
        }
        for (k, &(sel, count)) in chunk.selections.iter().enumerate() {
            s[sel] = slots[sel] + start * 4;
            // SAFETY: `j * sels + k < parts * sels`, the length of `counts`.
            s[count] = unsafe { counts_at.add(j * sels + k) } as u64;
        }
        calls.push(s);
    }
    let statuses: Vec<AtomicI32> = (0..parts).map(|_| AtomicI32::new(0)).collect();
    let calls: Vec<Mutex<Vec<u64>>> = calls.into_iter().map(Mutex::new).collect();
    let run = |j: usize| {
        let mut s = calls[j].lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the caller's slots; a chunk's range, its own rooms for
        // temporaries and its own part of each selection, so no chunk
        // writes what another reads or writes.
        let status = unsafe { code.call(&mut s) };
        statuses[j].store(status, Ordering::Relaxed);
    };
    if REVERSED.with(Cell::get) {
        (0..parts).rev().for_each(run);
    } else if let Some(team) = TEAM.with(Cell::get) {
        on_team(team, parts, &run);
    } else {
        match pool(parts - 1) {
            Some(pool) => pool.run(parts, parts, &run),
            // No threads to be had: the chunks in order, here.
            None => (0..parts).for_each(run),
        }
    }
    let statuses: Vec<i32> = statuses.into_iter().map(AtomicI32::into_inner).collect();
    ROOMS.with(|r| r.replace(rooms));
    if let Some(&failed) = statuses.iter().find(|&&s| s != crate::abi::STATUS_OK) {
        return failed;
    }
    // Each chunk kept its rows at its own start: join them in order.
    for (k, &(sel, count)) in chunk.selections.iter().enumerate() {
        let base = slots[sel] as *mut u32;
        let mut total = 0u64;
        for j in 0..parts {
            let kept = counts[j * sels + k] as u64;
            let start = bound(j);
            if start != total && kept > 0 {
                // SAFETY: both ranges lie in the selection's room (one
                // index per row; `total <= start`); `copy` allows overlap.
                unsafe {
                    std::ptr::copy(
                        base.add(start as usize),
                        base.add(total as usize),
                        kept as usize,
                    )
                };
            }
            total += kept;
        }
        // SAFETY: the count slot is the caller's pointer to an `int64_t`.
        unsafe { *(slots[count] as *mut i64) = total as i64 };
    }
    crate::abi::STATUS_OK
}

#[cfg(test)]
mod tests {
    use super::{for_each_part, on_team, scoped_team};
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    /// Every part runs once, for more threads than parts and fewer, and on
    /// the pool's workers: some part runs off the calling thread (once
    /// another test's stage has left the pool, which a busy pool waits for
    /// no one: tries until one does).
    #[test]
    fn for_each_part_runs_every_part_once_on_the_pool() {
        let caller = std::thread::current().id();
        let mut elsewhere = 0;
        for round in 0..100 {
            for (parts, threads) in [(0, 2), (1, 3), (2, 2), (7, 3), (40, 2), (5, 9)] {
                let ran: Vec<AtomicUsize> = (0..parts).map(|_| AtomicUsize::new(0)).collect();
                let off = AtomicUsize::new(0);
                for_each_part(parts, threads, &|j| {
                    // Long enough that a worker takes some.
                    std::thread::sleep(std::time::Duration::from_micros(500));
                    ran[j].fetch_add(1, SeqCst);
                    if std::thread::current().id() != caller {
                        off.fetch_add(1, SeqCst);
                    }
                });
                assert!(
                    ran.iter().all(|r| r.load(SeqCst) == 1),
                    "{parts} parts, round {round}"
                );
                elsewhere += off.load(SeqCst);
            }
            if elsewhere > 0 {
                return;
            }
        }
        panic!("no part ran on a worker in 100 rounds");
    }

    #[test]
    fn a_part_that_panics_panics_in_the_caller_after_the_rest_ran() {
        let ran = AtomicUsize::new(0);
        let caught = std::panic::catch_unwind(|| {
            for_each_part(7, 3, &|j| {
                assert_ne!(j, 3, "part 3");
                ran.fetch_add(1, SeqCst);
            })
        });
        assert!(caught.is_err(), "the panic reaches the caller");
        assert_eq!(ran.load(SeqCst), 6);
    }

    #[test]
    fn a_team_runs_every_chunk_once() {
        for parts in [2, 3, 7, 40] {
            let ran: Vec<AtomicUsize> = (0..parts).map(|_| AtomicUsize::new(0)).collect();
            on_team(scoped_team, parts, &|j| {
                ran[j].fetch_add(1, SeqCst);
            });
            assert!(ran.iter().all(|r| r.load(SeqCst) == 1), "{parts} parts");
        }
    }

    #[test]
    fn a_chunk_that_panics_on_a_team_panics_in_the_caller_after_the_rest_ran() {
        let ran = AtomicUsize::new(0);
        let caught = std::panic::catch_unwind(|| {
            on_team(scoped_team, 7, &|j| {
                assert_ne!(j, 3, "chunk 3");
                ran.fetch_add(1, SeqCst);
            })
        });
        let payload = caught.expect_err("the panic reaches the caller");
        let message = *payload.downcast::<&str>().expect("a message");
        assert!(message.contains("OpenMP thread"), "{message}");
        assert_eq!(ran.load(SeqCst), 6);
    }
}
