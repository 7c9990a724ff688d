//! `ExactBackend` and `FastBackend`: SIMD kernels on the best ISA path of the machine (or
//! a path chosen by the caller), with a thread pool per compute context.
//!
//! Over 800 lines on purpose: this is the one implementation of the CPU paths — every
//! kernel's dispatch — next to the ISA and compute-context types it dispatches on; the
//! kernels themselves live in the submodules.
//!
//! Every kernel is written once, generic over a `simd::SimdLane` and the mode's
//! multiply-add, and instantiated per ISA path inside a function compiled with that
//! path's `#[target_feature]`. Work is split over independent outputs in chunks whose
//! size is a constant of the kernel and the shape, so the thread count changes only the
//! speed. In exact mode every path gives the bits of [`crate::ScalarRefBackend`]; in fast
//! mode every FMA path gives the bits of [`crate::FastScalarRefBackend`].
//!
//! The files: this one holds [`Isa`], [`ComputeContext`], [`CpuBackend`] (its defaults:
//! the best path, one thread) and the element-wise dispatch; `simd` the lane types and
//! their target-feature contract; `simd64.rs` the f64 accumulation across outputs;
//! [`elementwise`] the element-wise loops over slices (the formulas are
//! [`crate::elementwise`]); `gemm/` the blocked GEMM and its block sizes; `rows/` the row
//! kernels (strided copy, select, sums, softmax); `train/` the training kernels, one file
//! per family of `exactgrad_core::kernels`; `recurrent.rs` the fused LSTM and GRU cells;
//! `threads.rs` the thread pool of a compute context; `buffers.rs` the buffer pool;
//! `runs.rs` the cutting of buffers into pieces of rows and the short-run copies.
//!
//! The kernels receive their arguments checked ([`exactgrad_core::Checked`]): the
//! implementation of [`exactgrad_core::BackendImpl`] here only dispatches.

mod buffers;
mod digest;
pub mod elementwise;
mod gemm;
mod recurrent;
mod rows;
mod runs;
pub(crate) mod simd;
mod simd64;
mod threads;
mod train;
pub mod vector_forms;

use crate::lane::{Exact, Fast};
use crate::scalar::ModeSpec;
use crate::scalar_ref::walk;
use alloc::string::String;
use alloc::sync::Arc;

use alloc::vec::Vec;
pub use buffers::CpuStorage;
use core::fmt;
use core::marker::PhantomData;
use core::sync::atomic::{AtomicU64, Ordering};
use exactgrad_core::backend::{
    AdamStepArgs, AdaptiveAvgPool2dArgs, AdaptiveAvgPool2dBackwardArgs, AttentionScoresArgs,
    AvgPool2dArgs, AvgPool2dBackwardArgs, BinaryArgs, Checked, Col2imArgs, CopyStridedArgs,
    DigestArgs, DropoutMaskArgs, GruCellArgs, GruCellBackwardArgs, Im2colArgs, LstmCellArgs,
    LstmCellBackwardArgs, MatmulAccArgs, MatmulArgs, MatmulSpec, MaxPool2dArgs,
    MaxPool2dBackwardArgs, NormBackwardArgs, NormForwardArgs, NormStatsArgs, SelectArgs,
    SgdStepArgs, SoftmaxArgs, SoftmaxBackwardArgs, SumArgs, UnaryArgs, UnaryBackwardArgs,
};
use exactgrad_core::Result;
use exactgrad_core::{BackendImpl, BinaryOp, ComputeMode, Layout, UnaryOp};
pub(crate) use runs::{add_run, copy_run, for_each_piece};

/// An instruction-set path of the CPU backends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
    /// 512-bit AVX-512F lanes (16 × f32).
    Avx512,
    /// 256-bit AVX2 lanes with FMA (8 × f32).
    Avx2,
    /// 128-bit lanes (4 × f32): SSE2 on x86-64 (plus FMA in fast mode).
    V128,
    /// 128-bit NEON lanes (4 × f32) on AArch64, with its fused multiply-add in fast mode.
    Neon,
    /// One f32 at a time, no SIMD.
    Scalar,
}

impl Isa {
    /// Every path, widest first (a CPU supports the x86-64 paths or NEON, never both).
    pub const ALL: [Isa; 5] = [Isa::Avx512, Isa::Avx2, Isa::V128, Isa::Neon, Isa::Scalar];

    /// The path's name as printed in reports.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Avx512 => "avx512",
            Isa::Avx2 => "avx2",
            Isa::V128 => "v128",
            Isa::Neon => "neon",
            Isa::Scalar => "scalar",
        }
    }

    /// Whether this CPU can run the path in `mode` (fast mode on the 128-bit x86-64 path
    /// also needs FMA, so that it is an FMA path; NEON always has its fused multiply-add).
    pub fn is_supported(self, mode: ComputeMode) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            match self {
                Isa::Avx512 => std::is_x86_feature_detected!("avx512f"),
                Isa::Avx2 => {
                    std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
                }
                Isa::V128 => mode == ComputeMode::Exact || std::is_x86_feature_detected!("fma"),
                Isa::Neon => false,
                Isa::Scalar => true,
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            let _ = mode;
            match self {
                Isa::Neon => std::arch::is_aarch64_feature_detected!("neon"),
                Isa::Scalar => true,
                Isa::Avx512 | Isa::Avx2 | Isa::V128 => false,
            }
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        {
            let _ = mode;
            self == Isa::Scalar
        }
    }

    /// The widest path this CPU supports in `mode`.
    pub fn best(mode: ComputeMode) -> Isa {
        Isa::ALL
            .into_iter()
            .find(|i| i.is_supported(mode))
            .unwrap_or(Isa::Scalar)
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The error of choosing a path this CPU lacks ([`exactgrad_core::Error::UnsupportedIsa`]).
pub(crate) fn unsupported_isa(isa: Isa, mode: ComputeMode) -> exactgrad_core::Error {
    exactgrad_core::Error::UnsupportedIsa {
        isa: isa.name(),
        mode,
    }
}

/// The thread count a compute context may always reach, however few CPUs this process
/// may use: [`ComputeContext::max_threads`] is this or the CPU count, whichever is larger.
pub const MAX_THREADS: usize = 256;

/// The threads of a compute context: its own pool (never a global one) of `threads − 1`
/// helpers, the calling thread being the last (`docs/threads.md`, "The pool of a compute
/// context").
pub struct ComputeContext {
    threads: usize,
    pool: Option<threads::Pool>,
    buffers: Arc<buffers::BufferPool>,
    /// The multiply-adds of the products run on this context ([`ComputeContext::multiply_adds`]).
    multiply_adds: AtomicU64,
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
    fn start(threads: usize, spawn: &mut threads::Spawn<'_>) -> Self {
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
    fn count_product(&self, spec: &MatmulSpec) {
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
const ELEMENTWISE_CHUNK: usize = 1 << 13;

/// The CPU backend in mode `M` ([`Exact`] or [`Fast`]): an ISA path and a compute context.
///
/// Defaults: [`CpuBackend::new`] and [`Default`] take the widest ISA path this CPU
/// supports and run every kernel on **one thread** (the caller's), so a program's thread
/// count never depends on the machine and a backend never competes with other work for
/// cores. [`CpuBackend::with_threads`] sets the count, and
/// [`CpuBackend::with_available_parallelism`] takes one thread per available core;
/// [`CpuBackend::with_isa`] also chooses the path. Results never depend on the thread
/// count, only the speed does (`docs/arithmetic.md` §1, rule 5); in exact mode they do
/// not depend on the path either.
pub struct CpuBackend<M: ModeSpec> {
    /// The path; `isa.is_supported(M::MODE)` holds on this CPU (every constructor checks
    /// it, and the field is never changed), which the dispatch to the target-feature
    /// kernels relies on.
    isa: Isa,
    ctx: Arc<ComputeContext>,
    _mode: PhantomData<M>,
}

/// The exact-mode CPU backend: bit-identical to `ScalarRefBackend` on every path.
pub type ExactBackend = CpuBackend<Exact>;
/// The fast-mode CPU backend: FMA in products and polynomials.
pub type FastBackend = CpuBackend<Fast>;

impl<M: ModeSpec> Clone for CpuBackend<M> {
    fn clone(&self) -> Self {
        Self {
            isa: self.isa,
            ctx: Arc::clone(&self.ctx),
            _mode: PhantomData,
        }
    }
}

impl<M: ModeSpec> fmt::Debug for CpuBackend<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CpuBackend")
            .field("mode", &M::MODE)
            .field("isa", &self.isa)
            .field("threads", &self.ctx.threads)
            .finish()
    }
}

impl<M: ModeSpec> Default for CpuBackend<M> {
    fn default() -> Self {
        Self::new()
    }
}

impl<M: ModeSpec> CpuBackend<M> {
    /// The best path of this CPU on one thread (the caller's; no pool is started).
    pub fn new() -> Self {
        Self::with_threads(1)
    }

    /// The best path of this CPU, one thread per available core
    /// ([`std::thread::available_parallelism`], 1 if it is unknown; fewer if the system
    /// refuses a thread, as in [`CpuBackend::with_threads`]).
    pub fn with_available_parallelism() -> Self {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self::with_threads(threads)
    }

    /// The best path of this CPU on `threads` threads (0 counts as 1; a count above
    /// [`ComputeContext::max_threads`] counts as that).
    ///
    /// Never fails: if the operating system refuses to start a thread, the backend runs
    /// on the threads that started (at least the caller's), and
    /// [`CpuBackend::threads`] reports that count. Results are the same at every thread
    /// count; only the speed changes (`docs/threads.md`, "Threads the system refuses").
    /// A program that needs to know compares the two:
    ///
    /// ```
    /// use exactgrad_backends::ExactBackend;
    ///
    /// let b = ExactBackend::with_threads(4);
    /// if b.threads() < 4 {
    ///     eprintln!("running on {} threads", b.threads());
    /// }
    /// ```
    pub fn with_threads(threads: usize) -> Self {
        Self {
            isa: Isa::best(M::MODE),
            ctx: Arc::new(ComputeContext::new(threads)),
            _mode: PhantomData,
        }
    }

    /// A given path on `threads` threads (or fewer, as in [`CpuBackend::with_threads`]);
    /// fails with [`exactgrad_core::Error::UnsupportedIsa`] if this CPU lacks the path.
    pub fn with_isa(isa: Isa, threads: usize) -> exactgrad_core::Result<Self> {
        if !isa.is_supported(M::MODE) {
            return Err(unsupported_isa(isa, M::MODE));
        }
        Ok(Self {
            isa,
            ctx: Arc::new(ComputeContext::new(threads)),
            _mode: PhantomData,
        })
    }

    /// The ISA path in use.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// The number of threads of the compute context: the count asked for (at most
    /// [`ComputeContext::max_threads`]), or fewer if the system refused some
    /// ([`CpuBackend::with_threads`]).
    pub fn threads(&self) -> usize {
        self.ctx.threads
    }

    /// The compute context (thread pool).
    pub fn context(&self) -> &ComputeContext {
        &self.ctx
    }
}

/// Instantiates the generic kernels for one ISA path inside functions compiled with the
/// path's target features. Each generated function is `unsafe` with one contract: the
/// CPU must have those features (the dispatchers below check the path first).
macro_rules! isa_kernels {
    ($module:ident, $lane:ty, $($feature:literal)?) => {
        #[allow(dead_code)]
        pub(crate) mod $module {
            #[allow(unused_imports)]
            use super::*;

            $(#[target_feature(enable = $feature)])?
            pub(crate) unsafe fn unary<M: ModeSpec + crate::lane::Madd<$lane> + crate::lane::Madd<crate::lane::Pair<$lane>>>(op: UnaryOp, x: &[f32], out: &mut [f32]) {
                elementwise::unary_slice::<$lane, M>(op, x, out)
            }

            $(#[target_feature(enable = $feature)])?
            pub(crate) unsafe fn unary_backward<M: ModeSpec + crate::lane::Madd<$lane> + crate::lane::Madd<crate::lane::Pair<$lane>>>(
                op: UnaryOp,
                x: &[f32],
                y: &[f32],
                g: &[f32],
                out: &mut [f32],
            ) {
                elementwise::unary_backward_slice::<$lane, M>(op, x, y, g, out)
            }

            $(#[target_feature(enable = $feature)])?
            #[allow(clippy::too_many_arguments)]
            pub(crate) unsafe fn binary_row<M: ModeSpec>(
                op: BinaryOp,
                a: &[f32],
                ia: usize,
                sa: usize,
                b: &[f32],
                ib: usize,
                sb: usize,
                out: &mut [f32],
            ) {
                elementwise::binary_row::<$lane, M>(op, a, ia, sa, b, ib, sb, out)
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
isa_kernels!(k_avx512, simd::F32x16, "avx512f");
#[cfg(target_arch = "x86_64")]
isa_kernels!(k_avx2, simd::F32x8, "avx2,fma");
#[cfg(target_arch = "x86_64")]
isa_kernels!(k_v128, simd::F32x4, "sse2");
#[cfg(target_arch = "x86_64")]
isa_kernels!(k_v128_fma, simd::F32x4, "sse2,fma");
#[cfg(target_arch = "aarch64")]
isa_kernels!(k_neon, simd::F32x4, "neon");
isa_kernels!(k_scalar, f32,);

/// The mode-specific parts of dispatch: which instantiation runs on which path.
pub trait CpuMode: ModeSpec {
    /// Runs the unary kernel on `isa`.
    ///
    /// # Safety
    /// `isa.is_supported(Self::MODE)` must hold on this CPU.
    unsafe fn unary(isa: Isa, op: UnaryOp, x: &[f32], out: &mut [f32]);
    /// Runs the unary backward kernel on `isa`.
    ///
    /// # Safety
    /// `isa.is_supported(Self::MODE)` must hold on this CPU.
    unsafe fn unary_backward(
        isa: Isa,
        op: UnaryOp,
        x: &[f32],
        y: &[f32],
        g: &[f32],
        out: &mut [f32],
    );
}

macro_rules! cpu_mode {
    ($mode:ty, $v128:ident) => {
        impl CpuMode for $mode {
            unsafe fn unary(isa: Isa, op: UnaryOp, x: &[f32], out: &mut [f32]) {
                // SAFETY: the caller guarantees `isa.is_supported(MODE)`: the features of the
                // chosen instantiation (avx512f, avx2 + fma, sse2 or sse2 + fma, neon, none);
                // the kernels index their slices within bounds themselves.
                unsafe {
                    match isa {
                        #[cfg(target_arch = "x86_64")]
                        Isa::Avx512 => k_avx512::unary::<$mode>(op, x, out),
                        #[cfg(target_arch = "x86_64")]
                        Isa::Avx2 => k_avx2::unary::<$mode>(op, x, out),
                        #[cfg(target_arch = "x86_64")]
                        Isa::V128 => $v128::unary::<$mode>(op, x, out),
                        #[cfg(target_arch = "aarch64")]
                        Isa::Neon => k_neon::unary::<$mode>(op, x, out),
                        _ => k_scalar::unary::<$mode>(op, x, out),
                    }
                }
            }

            unsafe fn unary_backward(
                isa: Isa,
                op: UnaryOp,
                x: &[f32],
                y: &[f32],
                g: &[f32],
                out: &mut [f32],
            ) {
                // SAFETY: the caller guarantees `isa.is_supported(MODE)`, which is exactly
                // the target features of the instantiation chosen for `isa` (as in
                // `unary`); the kernel checks the slice lengths itself.
                unsafe {
                    match isa {
                        #[cfg(target_arch = "x86_64")]
                        Isa::Avx512 => k_avx512::unary_backward::<$mode>(op, x, y, g, out),
                        #[cfg(target_arch = "x86_64")]
                        Isa::Avx2 => k_avx2::unary_backward::<$mode>(op, x, y, g, out),
                        #[cfg(target_arch = "x86_64")]
                        Isa::V128 => $v128::unary_backward::<$mode>(op, x, y, g, out),
                        #[cfg(target_arch = "aarch64")]
                        Isa::Neon => k_neon::unary_backward::<$mode>(op, x, y, g, out),
                        _ => k_scalar::unary_backward::<$mode>(op, x, y, g, out),
                    }
                }
            }
        }
    };
}

cpu_mode!(Exact, k_v128);
cpu_mode!(Fast, k_v128_fma);

/// Runs one broadcast binary row on `isa` (binary ops form no FMA, so both modes share it).
///
/// # Safety
/// `isa.is_supported(M::MODE)` must hold on this CPU.
#[allow(clippy::too_many_arguments)]
unsafe fn binary_row<M: ModeSpec>(
    isa: Isa,
    op: BinaryOp,
    a: &[f32],
    ia: usize,
    sa: usize,
    b: &[f32],
    ib: usize,
    sb: usize,
    out: &mut [f32],
) {
    // SAFETY: the caller guarantees `isa.is_supported(M::MODE)`: the features of the
    // chosen instantiation (avx512f; avx2 + fma; SSE2 only on the 128-bit path, as binary
    // rows form no FMA; neon).
    unsafe {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => k_avx512::binary_row::<M>(op, a, ia, sa, b, ib, sb, out),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => k_avx2::binary_row::<M>(op, a, ia, sa, b, ib, sb, out),
            #[cfg(target_arch = "x86_64")]
            Isa::V128 => k_v128::binary_row::<M>(op, a, ia, sa, b, ib, sb, out),
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => k_neon::binary_row::<M>(op, a, ia, sa, b, ib, sb, out),
            _ => k_scalar::binary_row::<M>(op, a, ia, sa, b, ib, sb, out),
        }
    }
}

/// Merges adjacent dimensions that are contiguous with each other in every layout, so the
/// innermost loop is as long as possible. Returns the merged shape and strides.
fn coalesce<const N: usize>(layouts: [&Layout; N]) -> (Vec<usize>, [Vec<usize>; N]) {
    let shape = &layouts[0].shape;
    let mut dims: Vec<usize> = Vec::new();
    let mut strides: [Vec<usize>; N] = core::array::from_fn(|_| Vec::new());
    for d in 0..shape.rank() {
        if shape[d] == 1 {
            continue;
        }
        let mergeable = !dims.is_empty()
            && (0..N).all(|i| {
                let last = *strides[i].last().unwrap();
                last == layouts[i].strides[d] * shape[d]
            });
        if mergeable {
            let n = dims.len() - 1;
            dims[n] *= shape[d];
            for (i, s) in strides.iter_mut().enumerate() {
                let l = s.len() - 1;
                s[l] = layouts[i].strides[d];
            }
        } else {
            dims.push(shape[d]);
            for (i, s) in strides.iter_mut().enumerate() {
                s.push(layouts[i].strides[d]);
            }
        }
    }
    if dims.is_empty() {
        dims.push(1);
        for s in strides.iter_mut() {
            s.push(0);
        }
    }
    (dims, strides)
}

impl<M: CpuMode> BackendImpl for CpuBackend<M> {
    type Storage = CpuStorage;
    exactgrad_core::host_views!();

    fn name(&self) -> String {
        alloc::format!("{}/{}/{}t", M::MODE, self.isa, self.ctx.threads)
    }

    fn mode(&self) -> ComputeMode {
        M::MODE
    }

    fn zeros(&self, len: usize) -> Result<CpuStorage> {
        buffers::buffer(&self.ctx.buffers, "zeros", len, true)
    }

    fn uninit(&self, len: usize) -> Result<CpuStorage> {
        buffers::buffer(&self.ctx.buffers, "uninit", len, false)
    }

    fn storage_from_vec(&self, data: Vec<f32>) -> Result<CpuStorage> {
        buffers::adopt(&self.ctx.buffers, data)
    }

    fn memory(&self) -> Option<&dyn exactgrad_core::MemoryPool> {
        Some(&*self.ctx.buffers)
    }

    fn copy_strided_impl(&self, args: Checked<CopyStridedArgs<'_>>) -> Result<()> {
        let CopyStridedArgs { src, layout, out } = args.into_inner();
        rows::copy_strided::<M>(self.isa, &self.ctx, src, layout, out);
        Ok(())
    }

    fn digest_impl(&self, args: Checked<DigestArgs<'_>>) -> Result<u64> {
        let DigestArgs { x } = args.into_inner();
        Ok(digest::digest(self.isa, &self.ctx, x))
    }

    fn unary_impl(&self, args: Checked<UnaryArgs<'_>>) -> Result<()> {
        let UnaryArgs { op, x, out } = args.into_inner();
        let isa = self.isa;
        self.ctx.for_each_chunk(out, ELEMENTWISE_CHUNK, |i, o| {
            let s = i * ELEMENTWISE_CHUNK;
            // SAFETY: `isa` is the backend's, supported in this mode on this CPU (the
            // invariant of `CpuBackend::isa`).
            unsafe { M::unary(isa, op, &x[s..s + o.len()], o) };
        });
        Ok(())
    }

    fn unary_backward_impl(&self, args: Checked<UnaryBackwardArgs<'_>>) -> Result<()> {
        let UnaryBackwardArgs { op, x, y, g, out } = args.into_inner();
        let isa = self.isa;
        self.ctx.for_each_chunk(out, ELEMENTWISE_CHUNK, |i, o| {
            let s = i * ELEMENTWISE_CHUNK;
            let e = s + o.len();
            // SAFETY: `isa` is the backend's, supported in this mode on this CPU (the
            // invariant of `CpuBackend::isa`).
            unsafe { M::unary_backward(isa, op, &x[s..e], &y[s..e], &g[s..e], o) };
        });
        Ok(())
    }

    fn binary_impl(&self, args: Checked<BinaryArgs<'_>>) -> Result<()> {
        let BinaryArgs {
            op,
            a,
            la,
            b,
            lb,
            out,
        } = args.into_inner();
        if out.is_empty() {
            return Ok(());
        }
        let (dims, [sa, sb]) = coalesce([la, lb]);
        let inner = *dims.last().unwrap();
        let (isa_, sa_in, sb_in) = (self.isa, *sa.last().unwrap(), *sb.last().unwrap());
        // Row offsets of both operands, in row-major order of the outer dimensions.
        let outer = Layout {
            shape: dims[..dims.len() - 1].to_vec().into(),
            strides: sa[..sa.len() - 1].to_vec(),
            offset: la.offset,
        };
        let outer_b = Layout {
            shape: outer.shape.clone(),
            strides: sb[..sb.len() - 1].to_vec(),
            offset: lb.offset,
        };
        let mut rows = Vec::new();
        rows.try_reserve_exact(outer.numel())
            .map_err(|_| exactgrad_core::Error::Alloc {
                op: op.name(),
                bytes: outer.numel().saturating_mul(16),
                reason: "the allocator refused the row table",
            })?;
        walk([&outer, &outer_b], |[ia, ib]| rows.push((ia, ib)));
        // Chunks of whole rows, or of ELEMENTWISE_CHUNK elements when a row is longer (a
        // same-shape operation coalesces into one row, which would otherwise be one task).
        let chunk = if inner >= ELEMENTWISE_CHUNK {
            ELEMENTWISE_CHUNK
        } else {
            ELEMENTWISE_CHUNK.div_ceil(inner) * inner
        };
        self.ctx.for_each_chunk(out, chunk, |ci, o| {
            for_each_piece(o, ci * chunk, inner, |r, j, piece| {
                let (ia, ib) = rows[r];
                let (ia, ib) = (ia + j * sa_in, ib + j * sb_in);
                // SAFETY: `isa_` is the backend's, supported in this mode on this CPU
                // (the invariant of `CpuBackend::isa`).
                unsafe { binary_row::<M>(isa_, op, a, ia, sa_in, b, ib, sb_in, piece) };
            });
        });
        Ok(())
    }

    fn select_impl(&self, args: Checked<SelectArgs<'_>>) -> Result<()> {
        let SelectArgs {
            cond,
            lc,
            a,
            la,
            b,
            lb,
            out,
        } = args.into_inner();
        // SAFETY: `self.isa` is supported in this mode on this CPU (the invariant of
        // `CpuBackend::isa`); the arguments are `Checked`: core's check keeps every layout inside
        // its buffer.
        unsafe { rows::select::<M>(self.isa, &self.ctx, cond, lc, a, la, b, lb, out) };
        Ok(())
    }

    fn sum_impl(&self, args: Checked<SumArgs<'_>>) -> Result<()> {
        let SumArgs {
            x,
            layout,
            reduce,
            out,
        } = args.into_inner();
        // SAFETY: `self.isa` is supported in this mode on this CPU (the invariant of
        // `CpuBackend::isa`); the arguments are `Checked`: core's check keeps the layout inside
        // `x`.
        unsafe { rows::sum::<M>(self.isa, &self.ctx, x, layout, reduce, out) };
        Ok(())
    }

    fn matmul_impl(&self, args: Checked<MatmulArgs<'_>>) -> Result<()> {
        let MatmulArgs { spec, a, b, out } = args.into_inner();
        self.ctx.count_product(spec);
        // SAFETY: `self.isa` is supported in this mode on this CPU (the invariant of
        // `CpuBackend::isa`); the arguments are `Checked`: core's check keeps every operand inside
        // its buffer.
        unsafe { gemm::matmul::<M>(self.isa, &self.ctx, spec, 0, a, b, out) }
    }

    fn matmul_acc_impl(&self, args: Checked<MatmulAccArgs<'_>>) -> Result<()> {
        let MatmulAccArgs {
            spec,
            seg,
            a,
            b,
            out,
        } = args.into_inner();
        self.ctx.count_product(spec);
        // SAFETY: as for `matmul_impl`; core's check also keeps `seg` positive and a
        // divisor of `k`.
        unsafe { gemm::matmul::<M>(self.isa, &self.ctx, spec, seg, a, b, out) }
    }

    fn softmax_impl(&self, args: Checked<SoftmaxArgs<'_>>) -> Result<()> {
        let SoftmaxArgs {
            x,
            rows,
            cols,
            log,
            out,
        } = args.into_inner();
        // SAFETY: `self.isa` is supported in this mode on this CPU (the invariant of
        // `CpuBackend::isa`); the arguments are `Checked`: core's check sizes both buffers `rows ×
        // cols`.
        unsafe { rows::softmax::<M>(self.isa, &self.ctx, x, rows, cols, log, out) };
        Ok(())
    }

    fn softmax_backward_impl(&self, args: Checked<SoftmaxBackwardArgs<'_>>) -> Result<()> {
        let SoftmaxBackwardArgs {
            y,
            g,
            rows,
            cols,
            log,
            out,
        } = args.into_inner();
        // SAFETY: `self.isa` is supported in this mode on this CPU (the invariant of
        // `CpuBackend::isa`); the arguments are `Checked`: core's check sizes every buffer `rows ×
        // cols`.
        unsafe { rows::softmax_backward::<M>(self.isa, &self.ctx, y, g, rows, cols, log, out) };
        Ok(())
    }

    // ----- recurrent cells (`recurrent.rs`) --------------------------------------------

    fn lstm_cell_impl(&self, args: Checked<LstmCellArgs<'_>>) -> Result<()> {
        let LstmCellArgs {
            shape,
            inputs,
            outputs,
        } = args.into_inner();
        recurrent::lstm_cell::<M>(self.isa, &self.ctx, shape, inputs, outputs);
        Ok(())
    }

    fn lstm_cell_backward_impl(&self, args: Checked<LstmCellBackwardArgs<'_>>) -> Result<()> {
        let LstmCellBackwardArgs {
            shape,
            inputs,
            outputs,
        } = args.into_inner();
        recurrent::lstm_cell_backward::<M>(self.isa, &self.ctx, shape, inputs, outputs);
        Ok(())
    }

    fn gru_cell_impl(&self, args: Checked<GruCellArgs<'_>>) -> Result<()> {
        let GruCellArgs {
            shape,
            inputs,
            outputs,
        } = args.into_inner();
        recurrent::gru_cell::<M>(self.isa, &self.ctx, shape, inputs, outputs);
        Ok(())
    }

    fn gru_cell_backward_impl(&self, args: Checked<GruCellBackwardArgs<'_>>) -> Result<()> {
        let GruCellBackwardArgs {
            shape,
            inputs,
            outputs,
        } = args.into_inner();
        recurrent::gru_cell_backward::<M>(self.isa, &self.ctx, shape, inputs, outputs);
        Ok(())
    }

    fn norm_stats_impl(&self, args: Checked<NormStatsArgs<'_>>) -> Result<()> {
        let NormStatsArgs {
            spec,
            x,
            mean,
            corr,
            sq_sum,
        } = args.into_inner();
        train::norm_stats(self.isa, &self.ctx, M::MODE, spec, x, mean, corr, sq_sum);
        Ok(())
    }

    fn norm_forward_impl(&self, args: Checked<NormForwardArgs<'_>>) -> Result<()> {
        let NormForwardArgs {
            spec,
            x,
            stats,
            weight,
            bias,
            out,
        } = args.into_inner();
        train::norm_forward(
            self.isa,
            &self.ctx,
            M::MODE,
            spec,
            x,
            stats,
            weight,
            bias,
            out,
        );
        Ok(())
    }

    fn norm_backward_impl(&self, args: Checked<NormBackwardArgs<'_>>) -> Result<()> {
        let NormBackwardArgs {
            spec,
            x,
            g,
            stats,
            weight,
            stats_depend,
            grads,
        } = args.into_inner();
        train::norm_backward(
            self.isa,
            &self.ctx,
            M::MODE,
            spec,
            x,
            g,
            stats,
            weight,
            stats_depend,
            grads,
        );
        Ok(())
    }

    fn max_pool2d_impl(&self, args: Checked<MaxPool2dArgs<'_>>) -> Result<()> {
        let MaxPool2dArgs {
            spec,
            x,
            out,
            argmax,
        } = args.into_inner();
        train::max_pool2d(self.isa, &self.ctx, M::MODE, spec, x, out, argmax)
    }

    fn max_pool2d_backward_impl(&self, args: Checked<MaxPool2dBackwardArgs<'_>>) -> Result<()> {
        let MaxPool2dBackwardArgs {
            spec,
            argmax,
            g,
            gx,
        } = args.into_inner();
        train::max_pool2d_backward(&self.ctx, M::MODE, spec, argmax, g, gx)
    }

    fn avg_pool2d_impl(&self, args: Checked<AvgPool2dArgs<'_>>) -> Result<()> {
        let AvgPool2dArgs { spec, x, out } = args.into_inner();
        train::avg_pool2d(self.isa, &self.ctx, M::MODE, spec, x, out)
    }

    fn avg_pool2d_backward_impl(&self, args: Checked<AvgPool2dBackwardArgs<'_>>) -> Result<()> {
        let AvgPool2dBackwardArgs { spec, g, gx } = args.into_inner();
        train::avg_pool2d_backward(self.isa, &self.ctx, M::MODE, spec, g, gx)
    }

    fn adaptive_avg_pool2d_impl(&self, args: Checked<AdaptiveAvgPool2dArgs<'_>>) -> Result<()> {
        let AdaptiveAvgPool2dArgs { spec, x, out } = args.into_inner();
        train::adaptive_avg_pool2d(self.isa, &self.ctx, M::MODE, spec, x, out)
    }

    fn adaptive_avg_pool2d_backward_impl(
        &self,
        args: Checked<AdaptiveAvgPool2dBackwardArgs<'_>>,
    ) -> Result<()> {
        let AdaptiveAvgPool2dBackwardArgs { spec, g, gx } = args.into_inner();
        train::adaptive_avg_pool2d_backward(self.isa, &self.ctx, M::MODE, spec, g, gx)
    }

    fn im2col_impl(&self, args: Checked<Im2colArgs<'_>>) -> Result<()> {
        let Im2colArgs { spec, image, cols } = args.into_inner();
        train::im2col(self.isa, &self.ctx, spec, image, cols);
        Ok(())
    }

    fn col2im_impl(&self, args: Checked<Col2imArgs<'_>>) -> Result<()> {
        let Col2imArgs { spec, cols, image } = args.into_inner();
        train::col2im(self.isa, &self.ctx, M::MODE, spec, cols, image);
        Ok(())
    }

    fn attention_scores_impl(&self, args: Checked<AttentionScoresArgs<'_>>) -> Result<()> {
        let AttentionScoresArgs { spec, scores, mask } = args.into_inner();
        train::attention_scores(self.isa, &self.ctx, M::MODE, spec, scores, mask);
        Ok(())
    }

    fn dropout_mask_impl(&self, args: Checked<DropoutMaskArgs<'_>>) -> Result<()> {
        let DropoutMaskArgs {
            key,
            p,
            scale,
            start,
            out,
        } = args.into_inner();
        train::dropout_mask(&self.ctx, key, p, scale, start, out);
        Ok(())
    }

    fn sgd_step_impl(&self, args: Checked<SgdStepArgs<'_>>) -> Result<()> {
        let SgdStepArgs {
            spec,
            param,
            grad,
            momentum_buffer,
        } = args.into_inner();
        train::sgd_step(
            self.isa,
            &self.ctx,
            M::MODE,
            spec,
            param,
            grad,
            momentum_buffer,
        );
        Ok(())
    }

    fn adam_step_impl(&self, args: Checked<AdamStepArgs<'_>>) -> Result<()> {
        let AdamStepArgs {
            spec,
            param,
            grad,
            exp_avg,
            exp_avg_sq,
            max_exp_avg_sq,
        } = args.into_inner();
        train::adam_step(
            self.isa,
            &self.ctx,
            M::MODE,
            spec,
            param,
            grad,
            exp_avg,
            exp_avg_sq,
            max_exp_avg_sq,
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use exactgrad_core::Backend;

    #[test]
    fn new_and_default_run_on_one_thread() {
        assert_eq!(ExactBackend::new().threads(), 1);
        assert_eq!(FastBackend::new().threads(), 1);
        assert_eq!(ExactBackend::default().threads(), 1);
        assert_eq!(FastBackend::default().threads(), 1);
        assert_eq!(ExactBackend::new().isa(), Isa::best(ComputeMode::Exact));
        assert_eq!(ExactBackend::with_threads(3).threads(), 3);
        assert_eq!(ExactBackend::with_threads(0).threads(), 1);
    }

    #[test]
    fn threads_the_system_refuses_leave_a_backend_on_fewer_threads_with_the_same_bits() {
        use crate::ScalarRefBackend;
        let x: Vec<f32> = (0..100_000)
            .map(|i| (i as f32 * 1e-3).sin() * 9.0)
            .collect();
        let mut want = vec![0.0f32; x.len()];
        ScalarRefBackend.unary(UnaryOp::Exp, &x, &mut want).unwrap();
        // (threads asked, helpers the system starts before it refuses, threads got)
        for (asked, ok, got) in [(8, 0, 1), (8, 3, 4), (usize::MAX, 2, 3), (3, 5, 3)] {
            let mut started = 0;
            let ctx = ComputeContext::start(asked, &mut |name, f| {
                started += 1;
                if started > ok {
                    Err(std::io::Error::new(
                        std::io::ErrorKind::WouldBlock,
                        "Resource temporarily unavailable",
                    ))
                } else {
                    threads::spawn_os(name, f)
                }
            });
            assert_eq!(ctx.threads(), got, "{asked} threads asked, {ok} started");
            let b = ExactBackend {
                isa: Isa::best(ComputeMode::Exact),
                ctx: Arc::new(ctx),
                _mode: PhantomData,
            };
            assert_eq!(b.threads(), got);
            let mut out = vec![0.0f32; x.len()];
            b.unary(UnaryOp::Exp, &x, &mut out).unwrap();
            assert!(out
                .iter()
                .zip(&want)
                .all(|(a, w)| a.to_bits() == w.to_bits()));
        }
    }

    /// However many threads are asked for, at most `max_threads` start: the spawn is
    /// called once per helper up to the cap (this one would start up to 10 more).
    #[test]
    fn a_context_never_starts_more_than_max_threads() {
        let cap = ComputeContext::max_threads();
        assert!(cap >= MAX_THREADS);
        for asked in [cap - 1, cap, cap + 1, 100_000, usize::MAX] {
            let mut calls = 0;
            let ctx = ComputeContext::start(asked, &mut |_, f| {
                calls += 1;
                if calls > cap + 10 {
                    return Err(std::io::Error::other("refused"));
                }
                // A helper that leaves at once: the count is what this test checks.
                std::thread::Builder::new().spawn(move || drop(f))
            });
            assert_eq!(ctx.threads(), asked.min(cap), "{asked} asked");
            assert_eq!(calls, asked.min(cap) - 1, "{asked} asked: helpers started");
        }
    }

    #[test]
    fn with_available_parallelism_takes_every_core() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(ExactBackend::with_available_parallelism().threads(), cores);
        assert_eq!(FastBackend::with_available_parallelism().threads(), cores);
    }
}
