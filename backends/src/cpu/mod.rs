//! `ExactBackend` and `FastBackend`: SIMD kernels on the best ISA path of the machine (or
//! a path chosen by the caller), with a thread pool per compute context.
//!
//! Every kernel is written once, generic over a `simd::SimdLane` and the mode's
//! multiply-add, and instantiated per ISA path inside a function compiled with that
//! path's `#[target_feature]`. Work is split over independent outputs in chunks whose
//! size is a constant of the kernel and the shape, so the thread count changes only the
//! speed. In exact mode every path gives the bits of [`crate::ScalarRefBackend`]; in fast
//! mode every FMA path gives the bits of [`crate::FastScalarRefBackend`].
//!
//! The files: this one holds [`CpuBackend`] (its defaults: the best path, one thread)
//! and the per-path instantiation of the element-wise kernels; `isa.rs` the paths
//! ([`Isa`]); `context.rs` the [`ComputeContext`]; `dispatch.rs` the implementation of
//! `BackendImpl`, each kernel's dispatch to its path; `simd` the lane types and
//! their target-feature contract; `simd64.rs` the f64 accumulation across outputs;
//! [`elementwise`] the element-wise loops over slices (the formulas are
//! [`crate::elementwise`]); `gemm/` the blocked GEMM and its block sizes; `rows/` the row
//! kernels (strided copy, select, sums, softmax); `train/` the training kernels, one file
//! per family of `exactgrad_core::kernels`; `recurrent.rs` the fused LSTM and GRU cells;
//! `threads.rs` the thread pool of a compute context; `buffers.rs` the buffer pool;
//! `runs.rs` the cutting of buffers into pieces of rows and the short-run copies.
//!
//! The kernels receive their arguments checked ([`exactgrad_core::Checked`]): the
//! implementation of [`exactgrad_core::BackendImpl`] only dispatches.

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
    DepthwiseArgs, DepthwiseGradInputArgs, DepthwiseGradWeightArgs, DigestArgs, DropoutMaskArgs,
    GruCellArgs, GruCellBackwardArgs, Im2colArgs, LstmCellArgs, LstmCellBackwardArgs,
    MatmulAccArgs, MatmulArgs, MatmulSpec, MaxPool2dArgs, MaxPool2dBackwardArgs, NormBackwardArgs,
    NormForwardArgs, NormStatsArgs, SelectArgs, SgdStepArgs, SoftmaxArgs, SoftmaxBackwardArgs,
    SumArgs, UnaryArgs, UnaryBackwardArgs,
};
use exactgrad_core::Result;
use exactgrad_core::{BackendImpl, BinaryOp, ComputeMode, Layout, UnaryOp};
pub(crate) use runs::{add_run, copy_run, for_each_piece};

mod context;
mod dispatch;
mod isa;

pub(crate) use context::SendPtr;
use context::*;
pub use context::{ComputeContext, MAX_THREADS};
pub use isa::Isa;
use isa::*;

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
    pub(super) isa: Isa,
    pub(super) ctx: Arc<ComputeContext>,
    pub(super) _mode: PhantomData<M>,
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
