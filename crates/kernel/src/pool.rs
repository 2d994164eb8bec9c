//! kiln's thread pool: workers that take the chunks of one stage at a time.
//!
//! A kernel's stages run back to back (a ResNet is some eighty of them, a
//! few hundred microseconds each), so what a pool costs per stage is what
//! matters: waking a parked thread costs 10–20 µs here (rayon's pool
//! measured 13–18 µs for a stage cut in two, `benches/threads.rs`).
//! Workers therefore spin for a while after a stage ([`SPIN`]) before they
//! park, as OpenMP runtimes do between parallel regions, and a stage is
//! handed out through a few atomics rather than a queue. Only the workers
//! a stage uses spin after it and are unparked for the next: a pool made
//! for seven threads, called for two, keeps five parked.
//!
//! One stage at a time: a caller that finds the pool busy (another thread's
//! stage) runs its chunks itself, in order. The bits are the same either
//! way, and threads are never oversubscribed.
//!
//! The protocol. The caller, holding `busy`, writes the stage (`run`,
//! `parts`, `next`, `done`, `active`), then `stage` and `epoch`, both the
//! next epoch. A worker that sees a new epoch announces itself in
//! `entered`, then checks that `epoch` has not moved and that `stage`
//! equals it: else the stage is over (or not one at all: the bump that
//! ends a stage) and it leaves without touching it. Else
//! it claims chunks with `next` until none is left, counting each in
//! `done`. The caller claims chunks the same way, waits for `done`, bumps
//! `epoch` (no late worker may start) and waits for `entered` to drain
//! (no worker still holds `run`) before it returns and `run`'s closure
//! dies. The two `SeqCst` pairs (entered/epoch on each side) make a late
//! worker either seen by the caller or turned away.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a worker spins for the next stage before it parks.
const SPIN: Duration = Duration::from_micros(200);

/// A chunk runner: called with each chunk's index.
pub(crate) type Run<'a> = &'a (dyn Fn(usize) + Sync);

struct Shared {
    epoch: AtomicU64,
    /// The epoch the stage in the fields below was published at: written
    /// after them, so a worker that sees it equal to `epoch` sees a whole
    /// stage.
    stage: AtomicU64,
    /// A pointer to the current stage's `Run` (on the caller's stack).
    run: AtomicPtr<()>,
    parts: AtomicUsize,
    next: AtomicUsize,
    done: AtomicUsize,
    /// How many workers may take chunks of this stage (the caller's thread
    /// count less one).
    active: AtomicUsize,
    entered: AtomicUsize,
    panicked: AtomicBool,
    shutdown: AtomicBool,
    /// Whether each worker is parked (or about to park).
    asleep: Vec<AtomicBool>,
    busy: Mutex<()>,
}

/// A pool of worker threads.
pub(crate) struct Pool {
    shared: Arc<Shared>,
    /// The workers, to unpark.
    threads: Vec<std::thread::Thread>,
}

impl Pool {
    /// A pool of `workers` threads, or `None` if the system gives none.
    pub(crate) fn new(workers: usize) -> Option<Pool> {
        let shared = Arc::new(Shared {
            epoch: AtomicU64::new(0),
            stage: AtomicU64::new(u64::MAX),
            run: AtomicPtr::new(std::ptr::null_mut()),
            parts: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            active: AtomicUsize::new(0),
            entered: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            asleep: (0..workers).map(|_| AtomicBool::new(false)).collect(),
            busy: Mutex::new(()),
        });
        let mut pool = Pool {
            shared: shared.clone(),
            threads: Vec::with_capacity(workers),
        };
        for id in 0..workers {
            let theirs = shared.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("kiln-{id}"))
                .spawn(move || worker(&theirs, id));
            // On failure, dropping `pool` stops the workers made so far.
            pool.threads.push(spawned.ok()?.thread().clone());
        }
        Some(pool)
    }

    /// How many workers it has.
    pub(crate) fn workers(&self) -> usize {
        self.threads.len()
    }

    /// Unparks the first `n` workers that are parked.
    fn wake(&self, n: usize) {
        for (thread, asleep) in self.threads.iter().zip(&self.shared.asleep).take(n) {
            if asleep.load(SeqCst) {
                thread.unpark();
            }
        }
    }

    /// Runs `run(j)` for every `j` in `0..parts`, on this thread and at most
    /// `threads - 1` workers; returns when all have returned. When another
    /// caller's stage holds the pool, this thread runs them all, in order.
    pub(crate) fn run(&self, parts: usize, threads: usize, run: Run<'_>) {
        let s = &*self.shared;
        let Ok(_busy) = s.busy.try_lock() else {
            return run_here(parts, run);
        };
        let ptr: *const Run<'_> = &run;
        s.run.store(ptr as *mut (), SeqCst);
        s.parts.store(parts, SeqCst);
        s.next.store(0, SeqCst);
        s.done.store(0, SeqCst);
        s.panicked.store(false, SeqCst);
        let active = threads.saturating_sub(1).min(self.workers());
        s.active.store(active, SeqCst);
        let epoch = s.epoch.load(SeqCst) + 1;
        s.stage.store(epoch, SeqCst);
        s.epoch.store(epoch, SeqCst);
        self.wake(active);
        let mine = catch_unwind(AssertUnwindSafe(|| take_chunks(s, run)));
        // Wait for the chunks workers took, then turn late workers away and
        // wait for those inside to leave.
        wait_until(|| s.done.load(SeqCst) >= parts);
        s.epoch.fetch_add(1, SeqCst);
        wait_until(|| s.entered.load(SeqCst) == 0);
        s.run.store(std::ptr::null_mut(), SeqCst);
        if let Err(panic) = mine {
            std::panic::resume_unwind(panic);
        }
        assert!(
            !s.panicked.load(SeqCst),
            "a chunk panicked on a kiln worker"
        );
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let s = &*self.shared;
        s.shutdown.store(true, SeqCst);
        s.epoch.fetch_add(1, SeqCst);
        for thread in &self.threads {
            thread.unpark();
        }
    }
}

/// Runs `run(j)` for every `j` in `0..parts` on this thread, in order; a
/// chunk that panics does not stop the others, and the first panic is
/// raised after them, as when the chunks run on the pool.
pub(crate) fn run_here(parts: usize, run: Run<'_>) {
    let mut first = None;
    for j in 0..parts {
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| run(j))) {
            first.get_or_insert(panic);
        }
    }
    if let Some(panic) = first {
        std::panic::resume_unwind(panic);
    }
}

/// Claims and runs chunks of the current stage until none is left.
fn take_chunks(s: &Shared, run: Run<'_>) {
    claim_chunks(&s.next, s.parts.load(SeqCst), &s.panicked, run, || {
        s.done.fetch_add(1, SeqCst);
    });
}

/// Claims chunks of `0..parts` through `next` and runs each, calling `ran`
/// after each, until none is left; a chunk that panics sets `panicked`
/// instead of unwinding (into a worker's loop, or an OpenMP runtime's C
/// frames): the caller raises it. The pool's workers and an OpenMP team's
/// members (`threads::with_team`) both take chunks this way.
pub(crate) fn claim_chunks(
    next: &AtomicUsize,
    parts: usize,
    panicked: &AtomicBool,
    run: Run<'_>,
    ran: impl Fn(),
) {
    loop {
        let j = next.fetch_add(1, SeqCst);
        if j >= parts {
            return;
        }
        if catch_unwind(AssertUnwindSafe(|| run(j))).is_err() {
            panicked.store(true, SeqCst);
        }
        ran();
    }
}

/// Spins on `ready`, then yields, until it holds.
fn wait_until(ready: impl Fn() -> bool) {
    let start = Instant::now();
    while !ready() {
        if start.elapsed() < SPIN {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

fn worker(s: &Shared, id: usize) {
    let mut seen = s.epoch.load(SeqCst);
    loop {
        // Wait for a new stage: a worker the last stage used spins first
        // (the next stage is likely a few microseconds away); one it did
        // not use parks at once, so idle workers take no core from those
        // at work. A caller unparks only the workers its stage wants.
        let start = Instant::now();
        let spins = id < s.active.load(SeqCst);
        let mut epoch = s.epoch.load(SeqCst);
        while epoch == seen {
            if spins && start.elapsed() < SPIN {
                std::hint::spin_loop();
            } else {
                // Announce, then look again: a caller that bumped the epoch
                // before seeing the flag is seen here (both `SeqCst`).
                s.asleep[id].store(true, SeqCst);
                while s.epoch.load(SeqCst) == seen {
                    std::thread::park();
                }
                s.asleep[id].store(false, SeqCst);
            }
            epoch = s.epoch.load(SeqCst);
        }
        seen = epoch;
        if s.shutdown.load(SeqCst) {
            return;
        }
        s.entered.fetch_add(1, SeqCst);
        let current = s.epoch.load(SeqCst) == epoch && s.stage.load(SeqCst) == epoch;
        let wanted = id < s.active.load(SeqCst);
        if current && wanted {
            let ptr = s.run.load(SeqCst) as *const Run<'_>;
            if !ptr.is_null() {
                // SAFETY: the epoch has not moved since this worker entered,
                // so the caller is still in `Pool::run`, which keeps `run`
                // alive until every entered worker has left.
                let run = unsafe { *ptr };
                take_chunks(s, run);
            }
        }
        s.entered.fetch_sub(1, SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::Pool;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    #[test]
    fn every_chunk_runs_once_at_any_count_and_after_idle_workers_park() {
        let pool = Pool::new(6).expect("threads");
        for (parts, threads) in [(2, 2), (7, 7), (3, 2), (7, 1), (50, 4), (2, 7)] {
            let ran: Vec<AtomicUsize> = (0..parts).map(|_| AtomicUsize::new(0)).collect();
            pool.run(parts, threads, &|j| {
                ran[j].fetch_add(1, SeqCst);
            });
            assert!(
                ran.iter().all(|r| r.load(SeqCst) == 1),
                "{parts} parts at {threads} threads"
            );
            // Long enough for the spinning workers to park.
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[test]
    fn a_busy_pool_leaves_a_second_caller_its_own_chunks() {
        let pool = Pool::new(1).expect("threads");
        let total = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..200 {
                        pool.run(4, 2, &|j| {
                            total.fetch_add(j + 1, SeqCst);
                        });
                    }
                });
            }
        });
        assert_eq!(total.load(SeqCst), 4 * 200 * 10);
    }
}
