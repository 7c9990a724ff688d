//! The scores of scaled dot-product attention before the softmax
//! (`docs/arithmetic.md` §5, "Scaled dot-product attention", step "scores").

use super::{canon, checked_product};
use crate::check::check_len;
use crate::error::{Error, Result};
use crate::mode::ComputeMode;
use crate::shape::Layout;

/// How an attention mask acts on the scores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScoreMask {
    /// `S ⊕ M`.
    Additive,
    /// `−∞` where `M = 0`.
    Allow,
    /// `−∞` where `M ≠ 0`.
    Block,
}

/// The scores `[rows, S]` of `rows = batch · L` query positions: `S = T ⊗ scale`, then
/// the mask, then `−∞` above the diagonal when causal (`j > i` with `i = row mod L`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionScoresSpec {
    /// `batch · L`.
    pub rows: usize,
    /// Query positions per matrix (`L`).
    pub l: usize,
    /// Key positions (`S`).
    pub s: usize,
    /// The scale.
    pub scale: f32,
    /// The causal mask.
    pub causal: bool,
}

impl AttentionScoresSpec {
    /// Checks the scores' length and, when given, that the mask layout has `rows · S`
    /// elements, its last dimension `S`, and lies inside its buffer.
    pub fn check(&self, scores: usize, mask: Option<(usize, &Layout)>) -> Result<()> {
        let op = "attention_scores";
        let n = checked_product(op, "rows", &[self.rows, self.s])?;
        check_len(op, "scores", scores, n)?;
        if self.l == 0 && self.rows > 0 {
            return Err(Error::invalid(
                op,
                "l",
                "must be positive when there are rows",
            ));
        }
        if let Some((m, lay)) = mask {
            lay.check_within(op, "mask", m)?;
            if lay.numel() != n || (n > 0 && lay.shape.last().copied() != Some(self.s)) {
                return Err(Error::invalid(
                    op,
                    "mask",
                    alloc::format!(
                        "layout of shape {:?} is not broadcast to [{}, {}]",
                        lay.shape,
                        self.rows,
                        self.s
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The score of element `(row, j)` from the product `t` and the mask value.
    #[inline(always)]
    pub fn element(&self, row: usize, j: usize, t: f32, mask: Option<(ScoreMask, f32)>) -> f32 {
        let mut x = t * self.scale;
        if let Some((kind, mv)) = mask {
            x = match kind {
                ScoreMask::Additive => x + mv,
                ScoreMask::Allow if mv == 0.0 => f32::NEG_INFINITY,
                ScoreMask::Block if mv != 0.0 => f32::NEG_INFINITY,
                ScoreMask::Allow | ScoreMask::Block => x,
            };
        }
        if self.causal && j > row % self.l.max(1) {
            x = f32::NEG_INFINITY;
        }
        x
    }
}

/// The reference: every score in row-major order, in place.
pub(crate) fn attention_scores(
    mode: ComputeMode,
    s: &AttentionScoresSpec,
    scores: &mut [f32],
    mask: Option<(ScoreMask, &[f32], &Layout)>,
) {
    let cols = s.s.max(1);
    match mask {
        Some((kind, m, lay)) => {
            let mut idx = 0;
            lay.for_each_index(|mi| {
                let v = s.element(idx / cols, idx % cols, scores[idx], Some((kind, m[mi])));
                scores[idx] = canon(mode, v);
                idx += 1;
            });
        }
        None => {
            for (idx, v) in scores.iter_mut().enumerate() {
                *v = canon(mode, s.element(idx / cols, idx % cols, *v, None));
            }
        }
    }
}
