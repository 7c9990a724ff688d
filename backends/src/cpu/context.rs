//! The compute context of a CPU backend: its own thread pool, its buffer pool and the
//! count of the multiply-adds its products performed.

use super::*;

/// The thread count a compute context may always reach, however few CPUs this process
/// may use: [`ComputeContext::max_threads`] is this or the CPU count, whichever is larger.
pub const MAX_THREADS: usize = 256;

/// The threads of a compute context: its own pool (never a global one) of `threads − 1`
/// helpers, the calling thread being the last (`docs/threads.md`, "The pool of a compute
/// context").
pub struct ComputeContext {
    pub(super) threads: usize,
    pub(super) pool: Option<threads::Pool>,
    pub(super) buffers: Arc<buffers::BufferPool>,
    /// The multiply-adds of the products run on this context ([`ComputeContext::multiply_adds`]).
    pub(super) multiply_adds: AtomicU64,
}

impl fmt::Debug for ComputeContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ComputeContext")
            .field("threads", &self.threads)
            .finish()
    }
}

/// A raw pointer that may cross threads: the base of a buffer whose disjoint parts the
/// tasks of one parallel region write.
#[derive(Clone, Copy)]
pub(crate) struct SendPtr<T>(pub(crate) *mut T);
// SAFETY: used only to hand disjoint parts of one buffer to the tasks of a region, each
// task writing its own part (every user states which part in its SAFETY comment).
unsafe impl<T: Send> Send for SendPtr<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for SendPtr<T> {}

impl ComputeContext {
    /// A context running kernels on up to `threads` threads (at least 1; 1 runs on the
    /// caller, starting none).
    ///
    /// The `threads − 1` helper threads are started here. If the operating system refuses
    /// one (a limit on threads or processes, no memory for its stack), the context keeps
    /// those that started and runs on them: [`ComputeContext::threads`] reports the count
    /// it got, which may be less than the count asked for (at least 1, the caller). This
    /// never fails or panics, because the thread count changes only the speed, never a
    /// result (`docs/threads.md`, "Threads the system refuses").
    ///
    /// A count above [`ComputeContext::max_threads`] (for example 100 000 or
    /// `usize::MAX`) is reduced to it: threads beyond the CPUs only cost memory for their
    /// stacks, and enough of them exhaust the address space.
    pub fn new(threads: usize) -> Self {
        Self::start(threads, &mut threads::spawn_os)
    }

    /// The most threads a context runs on: [`MAX_THREADS`] (256), or the CPUs this
    /// process may use ([`std::thread::available_parallelism`]) where there are more.
    /// A larger count asked for is reduced to it (`docs/threads.md`, "How many threads").
    pub fn max_threads() -> usize {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        MAX_THREADS.max(cpus)
    }

    /// [`ComputeContext::new`] with the helpers started by `spawn`.
    pub(super) fn start(threads: usize, spawn: &mut threads::Spawn<'_>) -> Self {
        let threads = threads.min(Self::max_threads());
        let pool = (threads > 1)
            .then(|| threads::Pool::new(threads - 1, spawn))
            .filter(|p| p.helpers() > 0);
        Self {
            threads: pool.as_ref().map_or(1, |p| p.helpers() + 1),
            pool,
            buffers: Arc::default(),
            multiply_adds: AtomicU64::new(0),
        }
    }

    /// The multiply-adds the matrix products run on this context have performed since it
    /// was made: `batch · m · n · k` for each `matmul` and `matmul_acc`, which is what
    /// every convolution, linear layer and attention product of the autograd operators
    /// comes down to. A count of the work actually done, not an estimate: the benches
    /// divide it by a step's time for the arithmetic rate (`docs/gemm.md`, "Arithmetic
    /// of a training step").
    pub fn multiply_adds(&self) -> u64 {
        self.multiply_adds.load(Ordering::Relaxed)
    }

    /// Adds one product's multiply-adds to [`ComputeContext::multiply_adds`].
    pub(super) fn count_product(&self, spec: &MatmulSpec) {
        let work = [spec.batch, spec.m, spec.n, spec.k]
            .iter()
            .fold(1u64, |acc, &d| acc.saturating_mul(d as u64));
        self.multiply_adds.fetch_add(work, Ordering::Relaxed);
    }

    /// Number of threads: the helpers that started plus the caller (see
    /// [`ComputeContext::new`]).
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Runs `f(i)` for every task `i < tasks` on this context's threads (the caller
    /// included), in any order and on any thread; returns when all have run.
    pub fn run(&self, tasks: usize, f: impl Fn(usize) + Sync) {
        match &self.pool {
            Some(pool) if tasks > 1 => pool.run(tasks, &f),
            _ => (0..tasks).for_each(f),
        }
    }

    /// Runs `f(chunk_index, chunk)` over `out` cut into chunks of `chunk` elements (the
    /// last may be shorter), on this context's threads. The chunking does not depend on
    /// the thread count.
    pub fn for_each_chunk(
        &self,
        out: &mut [f32],
        chunk: usize,
        f: impl Fn(usize, &mut [f32]) + Sync + Send,
    ) {
        let chunk = chunk.max(1);
        let len = out.len();
        let tasks = len.div_ceil(chunk);
        if self.pool.is_none() || tasks <= 1 {
            out.chunks_mut(chunk).enumerate().for_each(|(i, c)| f(i, c));
            return;
        }
        let base = SendPtr(out.as_mut_ptr());
        self.run(tasks, |i| {
            let s = i * chunk;
            let n = chunk.min(len - s);
            let b = base;
            // SAFETY: `s + n ≤ len`, and task `i` is the only one to touch elements
            // `s … s + n − 1` of `out`, which outlives the region (`run` returns after
            // every task).
            let c = unsafe { core::slice::from_raw_parts_mut(b.0.add(s), n) };
            f(i, c);
        });
    }
}

/// Elements per parallel chunk of the element-wise kernels (a multiple of every lane
/// width, and a constant: chunking never depends on the thread count).
pub(super) const ELEMENTWISE_CHUNK: usize = 1 << 13;
