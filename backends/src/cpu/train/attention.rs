//! The attention scores (reference: `exactgrad_core::kernels::attention`).

use super::per_task;
/// The storage index of element `(row, 0)` of a layout whose last dimension is the row.
use crate::cpu::{ComputeContext, Isa};
use exactgrad_core::kernels::canon;
use exactgrad_core::kernels::{AttentionScoresSpec, ScoreMask};
use exactgrad_core::{ComputeMode, Layout};

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
                    // Scores past `lim` are causally masked (`j > i`).
                    let lim = if s.causal {
                        row % s.l.max(1)
                    } else {
                        usize::MAX
                    };
                    let fin =
                        |j: usize, x: f32| canon(mode, if j > lim { f32::NEG_INFINITY } else { x });
                    let scale = s.scale;
                    match mask {
                        None => {
                            for (j, v) in row_v.iter_mut().enumerate() {
                                *v = fin(j, *v * scale);
                            }
                        }
                        Some((kind, m, lay)) => {
                            let off = row_offset(lay, row);
                            let sl = lay.strides.last().copied().unwrap_or(0);
                            let mv = |j: usize| m[off + j * sl];
                            match kind {
                                ScoreMask::Additive => {
                                    for (j, v) in row_v.iter_mut().enumerate() {
                                        *v = fin(j, *v * scale + mv(j));
                                    }
                                }
                                ScoreMask::Allow => {
                                    for (j, v) in row_v.iter_mut().enumerate() {
                                        let x = *v * scale;
                                        *v = fin(
                                            j,
                                            if mv(j) == 0.0 { f32::NEG_INFINITY } else { x },
                                        );
                                    }
                                }
                                ScoreMask::Block => {
                                    for (j, v) in row_v.iter_mut().enumerate() {
                                        let x = *v * scale;
                                        *v = fin(
                                            j,
                                            if mv(j) != 0.0 { f32::NEG_INFINITY } else { x },
                                        );
                                    }
                                }
                            }
                        }
                    }
                }
            })
        }
    });
}
