//! The training kernels of the [`Backend`](crate::Backend) trait beyond products and
//! element-wise operations: normalisation, pooling, im2col/col2im, the scores of
//! attention, dropout masks and the optimizer updates. Each has a spec struct grouping its sizes (with a `check` that
//! validates the buffers in checked arithmetic) and a **reference definition** here:
//! plain loops in the order of `docs/arithmetic.md` §5 and
//! `docs/conv.md` §1–2, which are the default bodies of the trait methods (so
//! `ScalarRefBackend` runs them unchanged) and the bits every override must reproduce in
//! exact mode. Sums are Σ64 (f64, from `+0`, increasing element order, rounded once);
//! every other operation is one rounded f32 operation, in the order written. The kernels
//! are mode-independent except that exact mode writes every NaN result as the canonical
//! NaN (`docs/arithmetic.md` §1, rule 4).

mod attention;
mod norm;
mod optim;
mod pool;

pub use attention::{AttentionScoresSpec, ScoreMask};
pub use norm::{NormGrads, NormParam, NormSpec, NormStats};
pub use optim::{powi_f64, AdamSpec, SgdSpec};
pub use pool::{
    adaptive_window, avg_window, bad_max_index, pool_out_size, taps_inside, AdaptivePool2dSpec,
    AvgPool2dSpec, Col2imSpec, Pool2dSpec,
};

pub(crate) use attention::attention_scores;
pub(crate) use norm::{norm_backward, norm_forward, norm_stats};
pub(crate) use optim::{adam_step, sgd_step};
pub(crate) use pool::{
    adaptive_avg_pool2d, adaptive_avg_pool2d_backward, avg_pool2d, avg_pool2d_backward, col2im,
    im2col, max_pool2d, max_pool2d_backward,
};

use crate::check::{check_len, checked_mul};
use crate::error::Result;
use crate::mode::ComputeMode;
use crate::rng::{philox4x32_10, unit_f32};
use crate::CANONICAL_NAN;

/// `v`, or the canonical NaN when `v` is NaN and `mode` is exact.
#[inline(always)]
pub fn canon(mode: ComputeMode, v: f32) -> f32 {
    if mode == ComputeMode::Exact && v.is_nan() {
        CANONICAL_NAN
    } else {
        v
    }
}

/// The product of `dims` in checked arithmetic, or an overflow error naming `op`/`arg`.
pub(crate) fn checked_product(
    op: &'static str,
    arg: &'static str,
    dims: &[usize],
) -> Result<usize> {
    dims.iter()
        .try_fold(1usize, |acc, &d| checked_mul(op, arg, acc, d))
}

/// The dropout mask of `docs/arithmetic.md` §5 for elements `start … start + out.len() − 1`:
/// element `i` is `scale` when the uniform of word `i` of the Philox stream of `key`
/// (top 24 bits × 2⁻²⁴) is `≥ p`, else `+0`. A function of the key and the index only.
pub fn dropout_mask(key: u64, p: f32, scale: f32, start: u64, out: &mut [f32]) {
    let k = [key as u32, (key >> 32) as u32];
    let mut i = 0usize;
    while i < out.len() {
        let index = start + i as u64;
        let block = index / 4;
        let words = philox4x32_10([block as u32, (block >> 32) as u32, 0, 0], k);
        let mut lane = (index % 4) as usize;
        while lane < 4 && i < out.len() {
            out[i] = if unit_f32(words[lane]) >= p {
                scale
            } else {
                0.0
            };
            lane += 1;
            i += 1;
        }
    }
}

/// Checks the arguments of [`Backend::dropout_mask`](crate::Backend::dropout_mask): `p`
/// in `[0, 1]`.
pub fn check_dropout(p: f32) -> Result<()> {
    if (0.0..=1.0).contains(&p) {
        Ok(())
    } else {
        Err(crate::Error::invalid(
            "dropout_mask",
            "p",
            alloc::format!("must be in [0, 1], got {p}"),
        ))
    }
}

/// Checks that an optional buffer has `expected` elements when given.
pub(crate) fn check_opt(
    op: &'static str,
    arg: &'static str,
    v: Option<usize>,
    expected: usize,
) -> Result<()> {
    match v {
        Some(len) => check_len(op, arg, len, expected),
        None => Ok(()),
    }
}
