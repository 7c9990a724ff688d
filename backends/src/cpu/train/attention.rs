//! The attention scores (reference: `exactgrad_core::kernels::attention`).

use super::per_task;
use crate::cpu::{ComputeContext, Isa};
use exactgrad_core::kernels::canon;
use exactgrad_core::kernels::{AttentionScoresSpec, ScoreMask};
use exactgrad_core::{ComputeMode, Layout};

/// The storage index of element `(row, 0)` of a layout whose last dimension is the row.
fn row_offset(lay: &Layout, mut row: usize) -> usize {
    let mut off = lay.offset;
    for d in (0..lay.rank().saturating_sub(1)).rev() {
        let n = lay.shape[d].max(1);
        off += (row % n) * lay.strides[d];
        row /= n;
    }
    off
}

pub(crate) fn attention_scores(
    isa: Isa,
    ctx: &ComputeContext,
    mode: ComputeMode,
    s: &AttentionScoresSpec,
    scores: &mut [f32],
    mask: Option<(ScoreMask, &[f32], &Layout)>,
) {
    let cols = s.s.max(1);
    let rows_per = per_task(cols);
    ctx.for_each_chunk(scores, rows_per * cols, |ci, chunk| {
        // SAFETY: `isa` is the backend's; the mask layout lies inside its buffer and has
        // the scores' shape (checked by the caller), so every index read is in bounds.
        unsafe {
            on_isa!(isa, {
                for (k, row_v) in chunk.chunks_mut(cols).enumerate() {
                    let row = ci * rows_per + k;
                    let scale = s.scale;
                    match mask {
                        None => {
                            for v in row_v.iter_mut() {
                                *v = canon(mode, *v * scale);
                            }
                        }
                        Some((kind, m, lay)) => {
                            let off = row_offset(lay, row);
                            // A mask row of unit stride or broadcast along the row is
                            // read as such, so that the loop vectorises.
                            match lay.strides.last().copied().unwrap_or(0) {
                                1 => masked(
                                    kind,
                                    mode,
                                    scale,
                                    row_v,
                                    m[off..off + cols].iter().copied(),
                                ),
                                0 => masked(kind, mode, scale, row_v, core::iter::repeat(m[off])),
                                sl => masked(
                                    kind,
                                    mode,
                                    scale,
                                    row_v,
                                    (0..cols).map(|j| m[off + j * sl]),
                                ),
                            }
                        }
                    }
                    if s.causal {
                        // Scores past `row % L` are causally masked (`j > i`).
                        let lim = row % s.l.max(1);
                        if let Some(tail) = row_v.get_mut(lim + 1..) {
                            tail.fill(f32::NEG_INFINITY);
                        }
                    }
                }
            })
        }
    });
}

/// `row[j] ← canon(x)` with `x` the score `row[j] · scale` under mask value `mask[j]`:
/// added (`Additive`), or −∞ where the mask disallows the position (`Allow`: a zero
/// value; `Block`: a non-zero one).
#[inline(always)]
fn masked(
    kind: ScoreMask,
    mode: ComputeMode,
    scale: f32,
    row: &mut [f32],
    mask: impl Iterator<Item = f32>,
) {
    let pairs = row.iter_mut().zip(mask);
    match kind {
        ScoreMask::Additive => pairs.for_each(|(v, mv)| *v = canon(mode, *v * scale + mv)),
        ScoreMask::Allow => pairs.for_each(|(v, mv)| {
            let x = *v * scale;
            *v = canon(mode, if mv == 0.0 { f32::NEG_INFINITY } else { x });
        }),
        ScoreMask::Block => pairs.for_each(|(v, mv)| {
            let x = *v * scale;
            *v = canon(mode, if mv != 0.0 { f32::NEG_INFINITY } else { x });
        }),
    }
}
