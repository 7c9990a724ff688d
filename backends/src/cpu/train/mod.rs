//! The training kernels of the CPU backends: normalisation, pooling, im2col/col2im,
//! dropout masks and the optimizer updates (`exactgrad_core::kernels` holds their
//! reference definitions, which these reproduce bit for bit in both modes).
//!
//! Each kernel is written once as plain element loops over independent outputs and run
//! inside [`on_isa`], which compiles it with the ISA path's target features so that the
//! compiler vectorises it across outputs; no operation is reordered (no FMA is formed,
//! no sum is split). The f64 sums of the normalisation statistics advance eight groups
//! at once (eight independent accumulators, each adding its own elements in increasing
//! order), which removes the latency chain of a single accumulator; on the AVX paths the
//! eight groups' elements are brought into lane order by 8 × 8 transposes in registers.
//! Work is split over groups, planes, channels or element chunks whose sizes are
//! constants of the kernel and the shape.
//!
//! The files mirror `exactgrad_core::kernels`: [`norm`], [`pool`] (pooling), [`cols`]
//! (im2col/col2im), [`attention`] and [`optim`]; this one holds what they share (the
//! per-ISA dispatch macro, the task-splitting helpers) and the dropout mask.

use super::{ComputeContext, SendPtr};
use exactgrad_core::{ComputeMode, CANONICAL_NAN};

/// Elements per parallel chunk of the element-wise training kernels.
const CHUNK: usize = 1 << 14;

/// Runs `$body` compiled with the target features of `isa`: one closure per path, each
/// with one call site and marked `inline(always)`, so that it is compiled inside the
/// function that carries the features even when the body is large (the inliner's cost
/// limit otherwise leaves a large body outside, compiled for the baseline).
///
/// Must be used inside `unsafe`: `isa` must be supported by this CPU.
macro_rules! on_isa {
    ($isa:expr, $body:block) => {{
        #[cfg(target_arch = "x86_64")]
        {
            #[target_feature(enable = "avx512f")]
            unsafe fn avx512<R>(f: impl FnOnce() -> R) -> R {
                f()
            }
            #[target_feature(enable = "avx2,fma")]
            unsafe fn avx2<R>(f: impl FnOnce() -> R) -> R {
                f()
            }
            fn baseline<R>(f: impl FnOnce() -> R) -> R {
                f()
            }
            // The features of the path, supported by this CPU (the caller's contract);
            // the code compiled under them is plain Rust whose float operations the
            // features do not change (no contraction).
            match $isa {
                Isa::Avx512 => avx512(
                    #[inline(always)]
                    || $body,
                ),
                Isa::Avx2 => avx2(
                    #[inline(always)]
                    || $body,
                ),
                _ => baseline(|| $body),
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            #[target_feature(enable = "neon")]
            unsafe fn neon<R>(f: impl FnOnce() -> R) -> R {
                f()
            }
            fn baseline<R>(f: impl FnOnce() -> R) -> R {
                f()
            }
            // NEON, supported by this CPU (the caller's contract; it is also the baseline
            // of AArch64): the compiler vectorises the loops with it and, as on x86-64,
            // never contracts a multiply and an add into a fused one.
            match $isa {
                Isa::Neon => neon(
                    #[inline(always)]
                    || $body,
                ),
                _ => baseline(|| $body),
            }
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        {
            let _ = $isa;
            $body
        }
    }};
}

/// Splits `0..n` into tasks of `per` items and runs `f(start, end)` for each on `ctx`.
fn ranges(ctx: &ComputeContext, n: usize, per: usize, f: impl Fn(usize, usize) + Sync) {
    let per = per.max(1);
    ctx.run(n.div_ceil(per), |t| f(t * per, ((t + 1) * per).min(n)));
}

/// Items per task so that a task holds about `CHUNK` elements of `item_len` each.
fn per_task(item_len: usize) -> usize {
    (CHUNK / item_len.max(1)).max(1)
}

/// A mutable view of `len` elements at `base + start` of a buffer split over tasks.
///
/// # Safety
/// `start + len` must lie inside the buffer, and no other task may access the range.
#[inline(always)]
unsafe fn part<'a, T>(base: SendPtr<T>, start: usize, len: usize) -> &'a mut [T] {
    // SAFETY: the caller's contract.
    unsafe { core::slice::from_raw_parts_mut(base.0.add(start), len) }
}

/// Rewrites the NaN elements of `x` to the canonical NaN in exact mode; nothing in fast
/// mode. A read-only pass looks for a NaN first and the rewrite runs only when there is
/// one: written as one loop (`exactgrad_core::kernels::canon` per element), LLVM stored
/// every vector back with a masked store, which AMD cores execute slowly.
#[inline(always)]
fn canon_all(mode: ComputeMode, x: &mut [f32]) {
    if mode == ComputeMode::Exact && x.iter().fold(false, |any, v| any | v.is_nan()) {
        for v in x.iter_mut().filter(|v| v.is_nan()) {
            *v = CANONICAL_NAN;
        }
    }
}

mod attention;
mod cols;
mod depthwise;
mod norm;
mod optim;
mod pool;

pub(crate) use attention::attention_scores;
pub(crate) use cols::{col2im, im2col};
pub(crate) use depthwise::{depthwise_conv, depthwise_grad_input, depthwise_grad_weight};
pub(crate) use norm::{norm_backward, norm_forward, norm_stats};
pub(crate) use optim::{adam_step, sgd_step};
pub(crate) use pool::{
    adaptive_avg_pool2d, adaptive_avg_pool2d_backward, avg_pool2d, avg_pool2d_backward, max_pool2d,
    max_pool2d_backward,
};

/// The dropout mask of `exactgrad_core::kernels::dropout_mask`, in chunks of `CHUNK`
/// elements on `ctx`.
pub(crate) fn dropout_mask(
    ctx: &ComputeContext,
    key: u64,
    p: f32,
    scale: f32,
    start: u64,
    out: &mut [f32],
) {
    ctx.for_each_chunk(out, CHUNK, |ci, o| {
        exactgrad_core::kernels::dropout_mask(key, p, scale, start + (ci * CHUNK) as u64, o);
    });
}
