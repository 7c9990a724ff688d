//! The thread pool of a compute context: the caller plus `threads − 1` helpers that spin
//! briefly, then park (`docs/threads.md`, "The pool of a compute context").
//!
//! A parallel region is a number of tasks `0 … n−1` and a function of the task index.
//! The caller publishes the region, wakes the helpers only if one is parked, and then
//! works on it itself: every thread (caller included) claims the next task index from one
//! atomic counter until none is left. A helper *joins* a region before it reads the
//! region's function and *leaves* it when no task is left; once the caller has run out of
//! tasks it *closes* the region (no helper joins any more) and waits only for the helpers
//! that joined, so a helper that is not running at that moment (a machine with more
//! threads than free cores) never delays it. Nothing refers to the region's function
//! after the caller returns. Which thread runs which task is free; each task writes only
//! its own outputs, so the results never depend on it.
//!
//! A helper that finishes a region waits [`SPIN_TIME`] for the next one (the serial
//! stretches between the kernels of a training step are shorter), spinning for the first
//! [`PAUSE_TIME`] of it and yielding its time slice between looks for the rest, then parks
//! on a condition variable. One region runs at a time: a caller that finds the pool busy (another thread
//! is in a region of the same context, or a task calls a kernel itself) runs its tasks
//! on its own thread, with the same results.
//!
//! A helper the operating system refuses to start (a thread limit, no memory for its
//! stack) is not an error: the pool keeps the helpers that started and reports how many
//! (`docs/threads.md`, "Threads the system refuses"). Threads change only the speed.

use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Spin iterations of a caller waiting for helpers before it yields its time slice.
const SPIN: u32 = 1 << 14;

/// How long an idle helper waits for the next region before it parks: longer than the
/// serial stretches between the kernels of a training step, so that they do not each
/// cost a wake-up.
const SPIN_TIME: Duration = Duration::from_millis(1);

/// How long of [`SPIN_TIME`] an idle helper spins with the CPU's pause hint only; for the
/// rest it also yields its time slice between looks, so that on a machine whose cores
/// are all busy a waiting helper leaves its core to the threads that have work (on an
/// idle core the yield returns at once).
const PAUSE_TIME: Duration = Duration::from_micros(50);

/// A region's function with its lifetime erased; valid while the region runs.
#[derive(Clone, Copy)]
struct Job {
    f: *const (dyn Fn(usize) + Sync),
    tasks: usize,
}

/// Bits of [`Shared::state`]: the count of helpers in the region (low 32 bits), the
/// closed flag, and the region's epoch above it.
const ACTIVE: u64 = (1 << 32) - 1;
const CLOSED: u64 = 1 << 32;
const EPOCH: u64 = 1 << 33;

/// State shared by the caller and the helpers.
struct Shared {
    /// The current region: epoch (incremented by each new region and by shutdown),
    /// closed flag and the number of helpers that joined it and have not left.
    state: AtomicU64,
    /// The current region's function; written by the caller before it publishes the
    /// epoch, read by a helper after it joined.
    job: Mutex<Option<Job>>,
    /// The next task index to claim.
    next: AtomicUsize,
    /// Helpers parked (or about to park) on `wake`.
    sleeping: AtomicUsize,
    /// Set when a task panicked on a helper.
    panicked: AtomicBool,
    shutdown: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
}

// SAFETY: the raw pointer in `job` is only dereferenced by helpers while the region that
// published it runs (the caller waits for every helper to check in before returning), and
// it points to a `Sync` function, so sharing it between threads is sound.
unsafe impl Send for Shared {}
// SAFETY: as above; every other field is itself `Sync`.
unsafe impl Sync for Shared {}

/// Starts a helper thread named `name` running `f` (the operating system's spawn; tests
/// substitute one that fails).
pub(crate) type Spawn<'a> =
    dyn FnMut(String, Box<dyn FnOnce() + Send>) -> io::Result<JoinHandle<()>> + 'a;

/// Starts a thread with the standard library's defaults.
pub(crate) fn spawn_os(name: String, f: Box<dyn FnOnce() + Send>) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name(name).spawn(f)
}

/// The most helpers a pool runs: the count of helpers in a region is held in the low 32
/// bits of [`Shared::state`].
pub(crate) const MAX_HELPERS: usize = ACTIVE as usize;

/// A pool of `threads − 1` helper threads; the caller of [`Pool::run`] is the last one.
pub(crate) struct Pool {
    shared: Arc<Shared>,
    busy: AtomicBool,
    helpers: Vec<JoinHandle<()>>,
}

impl Pool {
    /// Starts up to `helpers` helper threads (at most [`MAX_HELPERS`]) with `spawn`, and
    /// stops at the first one that fails to start: the pool then runs with those that
    /// did ([`Pool::helpers`], possibly none). Never panics.
    pub(crate) fn new(helpers: usize, spawn: &mut Spawn<'_>) -> Pool {
        let shared = Arc::new(Shared {
            state: AtomicU64::new(CLOSED),
            job: Mutex::new(None),
            next: AtomicUsize::new(0),
            sleeping: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        // Grown one started thread at a time (the count asked for may be any usize).
        let mut started = Vec::new();
        for i in 0..helpers.min(MAX_HELPERS) {
            let s = Arc::clone(&shared);
            match spawn(
                alloc::format!("exactgrad-{i}"),
                Box::new(move || helper(&s)),
            ) {
                Ok(h) => started.push(h),
                Err(_) => break,
            }
        }
        Pool {
            shared,
            busy: AtomicBool::new(false),
            helpers: started,
        }
    }

    /// The number of helper threads that started.
    pub(crate) fn helpers(&self) -> usize {
        self.helpers.len()
    }

    /// Runs `f(i)` for every `i < tasks` on the caller and the helpers.
    pub(crate) fn run(&self, tasks: usize, f: &(dyn Fn(usize) + Sync)) {
        if tasks <= 1
            || self
                .busy
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            (0..tasks).for_each(f);
            return;
        }
        let s = &*self.shared;
        // SAFETY: the transmute only erases the lifetime. A helper dereferences
        // the pointer only between joining this region and leaving it, and this function
        // does not return before every helper that joined has left.
        let f_static: *const (dyn Fn(usize) + Sync) = unsafe {
            core::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), *const (dyn Fn(usize) + Sync)>(
                f as *const _,
            )
        };
        *s.job.lock().unwrap_or_else(|e| e.into_inner()) = Some(Job { f: f_static, tasks });
        s.next.store(0, Ordering::Relaxed);
        // A new epoch, open, no helper in it (the previous region left none).
        let epoch = (s.state.load(Ordering::Relaxed) & !(ACTIVE | CLOSED)).wrapping_add(EPOCH);
        s.state.store(epoch, Ordering::SeqCst);
        if s.sleeping.load(Ordering::SeqCst) > 0 {
            let _g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        let mine = catch_unwind(AssertUnwindSafe(|| loop {
            let i = s.next.fetch_add(1, Ordering::Relaxed);
            if i >= tasks {
                break;
            }
            f(i);
        }));
        // Close the region, then wait for the helpers that joined it to leave.
        let mut st = s.state.fetch_or(CLOSED, Ordering::AcqRel) | CLOSED;
        let mut spins = 0u32;
        while st & ACTIVE != 0 {
            if spins < SPIN {
                spins += 1;
                core::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
            st = s.state.load(Ordering::Acquire);
        }
        self.busy.store(false, Ordering::Release);
        if let Err(p) = mine {
            std::panic::resume_unwind(p);
        }
        if s.panicked.swap(false, Ordering::AcqRel) {
            panic!("exactgrad: a compute task panicked on a pool thread");
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let s = &*self.shared;
        s.shutdown.store(true, Ordering::SeqCst);
        s.state.fetch_add(EPOCH, Ordering::SeqCst);
        {
            let _g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        for h in self.helpers.drain(..) {
            let _ = h.join();
        }
    }
}

/// The loop of a helper thread.
fn helper(s: &Shared) {
    let mut seen = s.state.load(Ordering::Acquire) & !(ACTIVE | CLOSED);
    loop {
        let mut spins = 0u32;
        let mut yielding = false;
        let idle_since = Instant::now();
        let mut st = s.state.load(Ordering::Acquire);
        while st & !(ACTIVE | CLOSED) == seen {
            if yielding {
                std::thread::yield_now();
            } else {
                core::hint::spin_loop();
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(if yielding { 16 } else { 256 }) {
                let idle = idle_since.elapsed();
                if idle > SPIN_TIME {
                    break;
                }
                yielding = idle > PAUSE_TIME;
            }
            st = s.state.load(Ordering::Acquire);
        }
        if st & !(ACTIVE | CLOSED) == seen {
            let mut g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.sleeping.fetch_add(1, Ordering::SeqCst);
            loop {
                st = s.state.load(Ordering::SeqCst);
                if st & !(ACTIVE | CLOSED) != seen || s.shutdown.load(Ordering::SeqCst) {
                    break;
                }
                g = s.wake.wait(g).unwrap_or_else(|e| e.into_inner());
            }
            s.sleeping.fetch_sub(1, Ordering::SeqCst);
        }
        if s.shutdown.load(Ordering::SeqCst) {
            return;
        }
        // Join the region unless it is closed (or replaced meanwhile: then look again).
        let joined = loop {
            if st & CLOSED != 0 {
                break false;
            }
            match s
                .state
                .compare_exchange_weak(st, st + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break true,
                Err(now) if now & !(ACTIVE | CLOSED) == st & !(ACTIVE | CLOSED) => st = now,
                Err(now) => {
                    st = now;
                    break false;
                }
            }
        };
        if !joined {
            // A closed region is done; a newer one is taken on the next turn.
            if st & CLOSED != 0 {
                seen = st & !(ACTIVE | CLOSED);
            }
            continue;
        }
        seen = st & !(ACTIVE | CLOSED);
        let job = *s.job.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(job) = job {
            let r = catch_unwind(AssertUnwindSafe(|| loop {
                let i = s.next.fetch_add(1, Ordering::Relaxed);
                if i >= job.tasks {
                    break;
                }
                // SAFETY: this helper joined the region, and its caller keeps the
                // function alive until every helper that joined has left (below).
                unsafe { (*job.f)(i) };
            }));
            if r.is_err() {
                s.panicked.store(true, Ordering::Release);
            }
        }
        s.state.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spawn that starts `ok` threads and then fails as an exhausted system does.
    fn failing_after(
        ok: usize,
    ) -> impl FnMut(String, Box<dyn FnOnce() + Send>) -> io::Result<JoinHandle<()>> {
        let mut n = 0;
        move |name, f| {
            n += 1;
            if n > ok {
                Err(io::Error::new(io::ErrorKind::WouldBlock, "no more threads"))
            } else {
                spawn_os(name, f)
            }
        }
    }

    #[test]
    fn a_pool_keeps_the_helpers_that_started_and_runs_every_task() {
        for (asked, ok) in [(5, 0), (5, 2), (3, 3), (usize::MAX, 1)] {
            let pool = Pool::new(asked, &mut failing_after(ok));
            assert_eq!(pool.helpers(), ok.min(asked));
            let hits: Vec<AtomicUsize> = (0..100).map(|_| AtomicUsize::new(0)).collect();
            pool.run(hits.len(), &|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        }
    }

    #[test]
    fn every_task_runs_once_for_many_regions() {
        let pool = Pool::new(2, &mut spawn_os);
        for tasks in [0usize, 1, 2, 3, 17, 1000] {
            for _ in 0..50 {
                let hits: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
                pool.run(tasks, &|i| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                });
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
            }
        }
    }

    #[test]
    fn helpers_wake_after_parking_and_nested_regions_run_inline() {
        let pool = Pool::new(1, &mut spawn_os);
        std::thread::sleep(std::time::Duration::from_millis(30));
        let total = AtomicUsize::new(0);
        pool.run(4, &|_| {
            pool.run(3, &|_| {
                total.fetch_add(1, Ordering::Relaxed);
            });
        });
        assert_eq!(total.load(Ordering::Relaxed), 12);
    }
}
