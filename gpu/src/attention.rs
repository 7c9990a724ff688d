//! The attention scores and the dropout mask on the device (`docs/gpu.md` §2): one
//! invocation per element, the reference's operations each rounded on its own
//! (`AttentionScoresSpec::element`), and the dropout mask's Philox4x32-10 words
//! computed on the device from the counter (`kernels::dropout_mask`).

use crate::device::Kernel;
use crate::{push_layout, word, WgpuBackend, WgpuView, WgpuViewMut};
use exactgrad_core::kernels::{AttentionScoresSpec, ScoreMask};
use exactgrad_core::{BackendImpl, Layout, Result, ViewLen};

/// [`Backend::attention_scores`](exactgrad_core::Backend::attention_scores) on the device,
/// in place.
pub(crate) fn attention_scores(
    b: &WgpuBackend,
    s: &AttentionScoresSpec,
    scores: WgpuViewMut<'_>,
    mask: Option<(ScoreMask, WgpuView<'_>, &Layout)>,
) -> Result<()> {
    let n = scores.len();
    if n == 0 {
        return Ok(());
    }
    let kind = match mask.as_ref().map(|m| m.0) {
        None => 0,
        Some(ScoreMask::Additive) => 1,
        Some(ScoreMask::Allow) => 2,
        Some(ScoreMask::Block) => 3,
    };
    let mut p = vec![
        0,
        word(n)?,
        word(s.s.max(1))?,
        word(s.l.max(1))?,
        s.scale.to_bits(),
        u32::from(s.causal),
        kind,
    ];
    match mask {
        Some((_, m, lay)) => {
            push_layout(&mut p, lay)?;
            word(m.len())?;
            b.run(Kernel::AttentionScores, p, &[m], scores, n)
        }
        None => {
            // The mask binding is not read: one word stands in for it.
            let dummy = b.zeros(1)?;
            b.run(Kernel::AttentionScores, p, &[dummy.view()], scores, n)
        }
    }
}

/// [`Backend::dropout_mask`](exactgrad_core::Backend::dropout_mask) on the device: any
/// 64-bit `start` (the element index is carried in two words); at most 2^32 − 1 elements.
pub(crate) fn dropout_mask(
    b: &WgpuBackend,
    key: u64,
    p: f32,
    scale: f32,
    start: u64,
    out: WgpuViewMut<'_>,
) -> Result<()> {
    let n = out.len();
    if n == 0 {
        return Ok(());
    }
    // `unit_f32(w) = (w >> 8) · 2^-24 >= p` (both exact) exactly when `w >> 8` is at
    // least `⌈p · 2^24⌉` (exact in f64; p is in [0, 1], so the threshold is in [0, 2^24]).
    let threshold = (f64::from(p) * 16_777_216.0).ceil() as u32;
    let params = vec![
        0,
        word(n)?,
        key as u32,
        (key >> 32) as u32,
        start as u32,
        (start >> 32) as u32,
        threshold,
        scale.to_bits(),
    ];
    b.run(Kernel::DropoutMask, params, &[], out, n)
}
