//! Normalisation (batch, layer, group): statistics, normalisation and backward
//! (`docs/arithmetic.md` §5, "Normalisation").

use super::{canon, check_opt, checked_product};
use crate::check::check_len;
use crate::error::{Error, Result};
use crate::mode::ComputeMode;
use crate::view::{HostViews, ViewFamily, ViewLen};

/// Which parameter (weight, bias) element the input element at `(q, r)` of the
/// `[P, Q, R]` view uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormParam {
    /// One per statistics group `q` (batch_norm: per channel).
    PerQ,
    /// One per normalised position `r` (layer_norm).
    PerR,
    /// group_norm: channel `(q mod groups)·cpg + r / spatial`, with `R = cpg · spatial`.
    Group {
        /// Groups per sample.
        groups: usize,
        /// Channels per group.
        cpg: usize,
        /// Spatial positions per channel.
        spatial: usize,
    },
}

/// The geometry of a normalisation: the input is a contiguous `[P, Q, R]` array, each
/// `q` one statistics group of `n = P·R` elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NormSpec {
    /// Leading dimension (batch_norm: the batch).
    pub p: usize,
    /// Statistics groups.
    pub q: usize,
    /// Trailing dimension (inner elements of a group per `p`).
    pub r: usize,
    /// How the affine parameters are indexed.
    pub param: NormParam,
}

/// The per-group statistics a normalisation uses: `μ`, the correction `c` and
/// `r = 1 ⊘ sqrt(σ² ⊕ eps)`, each with `Q` elements.
#[derive(Clone, Copy, Debug)]
pub struct NormStats<'a, F: ViewFamily = HostViews> {
    /// `μ` per group.
    pub mean: F::View<'a>,
    /// `c` per group (`+0` for fixed statistics).
    pub corr: F::View<'a>,
    /// `r` per group.
    pub rstd: F::View<'a>,
}

/// The gradient outputs of [`Backend::norm_backward`](crate::Backend::norm_backward),
/// each computed only when given.
#[derive(Debug, Default)]
pub struct NormGrads<'a, F: ViewFamily = HostViews> {
    /// `∂x`, `P·Q·R` elements.
    pub dx: Option<F::ViewMut<'a>>,
    /// `∂w`, one per parameter.
    pub dw: Option<F::ViewMut<'a>>,
    /// `∂b`, one per parameter.
    pub db: Option<F::ViewMut<'a>>,
}

impl<'a, F: ViewFamily> NormStats<'a, F> {
    /// The same statistics with a shorter lifetime.
    pub fn shorten<'s>(&self) -> NormStats<'s, F>
    where
        'a: 's,
    {
        NormStats {
            mean: F::shorten(self.mean),
            corr: F::shorten(self.corr),
            rstd: F::shorten(self.rstd),
        }
    }
}

impl<'a, F: ViewFamily> NormGrads<'a, F> {
    /// The same outputs with a shorter lifetime.
    pub fn shorten<'s>(self) -> NormGrads<'s, F>
    where
        'a: 's,
    {
        NormGrads {
            dx: self.dx.map(F::shorten_mut),
            dw: self.dw.map(F::shorten_mut),
            db: self.db.map(F::shorten_mut),
        }
    }
}

impl NormSpec {
    /// `P·Q·R`, checked.
    pub fn numel(&self, op: &'static str) -> Result<usize> {
        checked_product(op, "spec", &[self.p, self.q, self.r])
    }

    /// The number of parameter elements (the length of a weight or bias).
    pub fn params(&self) -> usize {
        match self.param {
            NormParam::PerQ => self.q,
            NormParam::PerR => self.r,
            NormParam::Group { groups, cpg, .. } => groups.saturating_mul(cpg),
        }
    }

    /// `n = P·R`, the elements of one group.
    pub fn count(&self) -> usize {
        self.p.saturating_mul(self.r)
    }

    /// Checks the sizes (`P·Q·R` fits; a group layout has `R = cpg·spatial` and
    /// `groups` dividing `Q`).
    pub fn check(&self, op: &'static str) -> Result<usize> {
        let n = self.numel(op)?;
        if let NormParam::Group {
            groups,
            cpg,
            spatial,
        } = self.param
        {
            let ok = groups > 0
                && self.q.is_multiple_of(groups)
                && cpg.checked_mul(spatial) == Some(self.r)
                && groups.checked_mul(cpg).is_some();
            if !ok {
                return Err(Error::invalid(
                    op,
                    "spec",
                    alloc::format!(
                        "group layout {:?} does not match Q = {}, R = {}",
                        self.param,
                        self.q,
                        self.r
                    ),
                ));
            }
        }
        Ok(n)
    }

    /// The parameter index of element `(q, r)`.
    #[inline(always)]
    pub fn param_index(&self, q: usize, r: usize) -> usize {
        match self.param {
            NormParam::PerQ => q,
            NormParam::PerR => r,
            NormParam::Group {
                groups,
                cpg,
                spatial,
            } => (q % groups) * cpg + r / spatial.max(1),
        }
    }

    /// Calls `f(flat index, q, r)` for the elements that use parameter `k`, in increasing
    /// row-major order.
    #[inline(always)]
    pub fn for_param(&self, k: usize, mut f: impl FnMut(usize, usize, usize)) {
        let (pp, qq, rr) = (self.p, self.q, self.r);
        match self.param {
            NormParam::PerQ => {
                for p in 0..pp {
                    let base = (p * qq + k) * rr;
                    for r in 0..rr {
                        f(base + r, k, r);
                    }
                }
            }
            NormParam::PerR => {
                for p in 0..pp {
                    for q in 0..qq {
                        f((p * qq + q) * rr + k, q, k);
                    }
                }
            }
            NormParam::Group {
                groups,
                cpg,
                spatial,
            } => {
                let (gi, j) = (k / cpg.max(1), k % cpg.max(1));
                for p in 0..pp {
                    let mut q = gi;
                    while q < qq {
                        let base = (p * qq + q) * rr;
                        for r in j * spatial..(j + 1) * spatial {
                            f(base + r, q, r);
                        }
                        q += groups;
                    }
                }
            }
        }
    }

    /// Checks [`Backend::norm_stats`](crate::Backend::norm_stats) buffers.
    pub fn check_stats(&self, x: usize, mean: usize, corr: usize, sq_sum: usize) -> Result<()> {
        let op = "norm_stats";
        check_len(op, "x", x, self.check(op)?)?;
        check_len(op, "mean", mean, self.q)?;
        check_len(op, "corr", corr, self.q)?;
        check_len(op, "sq_sum", sq_sum, self.q)
    }

    fn check_stats_in<F: ViewFamily>(&self, op: &'static str, s: &NormStats<'_, F>) -> Result<()> {
        check_len(op, "mean", s.mean.len(), self.q)?;
        check_len(op, "corr", s.corr.len(), self.q)?;
        check_len(op, "rstd", s.rstd.len(), self.q)
    }

    /// Checks [`Backend::norm_forward`](crate::Backend::norm_forward) buffers.
    pub fn check_forward<F: ViewFamily>(
        &self,
        x: usize,
        stats: &NormStats<'_, F>,
        weight: Option<usize>,
        bias: Option<usize>,
        out: usize,
    ) -> Result<()> {
        let op = "norm_forward";
        let n = self.check(op)?;
        check_len(op, "x", x, n)?;
        check_len(op, "out", out, n)?;
        self.check_stats_in(op, stats)?;
        check_opt(op, "weight", weight, self.params())?;
        check_opt(op, "bias", bias, self.params())
    }

    /// Checks [`Backend::norm_backward`](crate::Backend::norm_backward) buffers (`x` may
    /// be empty when only `db` is asked for).
    pub fn check_backward<F: ViewFamily>(
        &self,
        x: usize,
        g: usize,
        stats: &NormStats<'_, F>,
        weight: Option<usize>,
        grads: &NormGrads<'_, F>,
    ) -> Result<()> {
        let op = "norm_backward";
        let n = self.check(op)?;
        check_len(op, "g", g, n)?;
        if grads.dx.is_some() || grads.dw.is_some() || x != 0 {
            check_len(op, "x", x, n)?;
        }
        self.check_stats_in(op, stats)?;
        check_opt(op, "weight", weight, self.params())?;
        check_opt(op, "dx", grads.dx.as_ref().map(|v| v.len()), n)?;
        check_opt(op, "dw", grads.dw.as_ref().map(|v| v.len()), self.params())?;
        check_opt(op, "db", grads.db.as_ref().map(|v| v.len()), self.params())
    }
}

/// Σ64 over the elements of group `q` of `f(x)`, rounded once.
#[inline(always)]
fn group_sum(s: &NormSpec, xs: &[f32], q: usize, f: impl Fn(f32) -> f64) -> f32 {
    let mut acc = 0.0f64;
    for p in 0..s.p {
        let base = (p * s.q + q) * s.r;
        for &x in &xs[base..base + s.r] {
            acc += f(x);
        }
    }
    acc as f32
}

/// Steps 1–3 of the forward pass per group: `μ`, `c` and `s2 = Σ64 e²`.
pub(crate) fn norm_stats(
    mode: ComputeMode,
    s: &NormSpec,
    x: &[f32],
    mean: &mut [f32],
    corr: &mut [f32],
    sq_sum: &mut [f32],
) {
    let n = s.count() as f32;
    for q in 0..s.q {
        let mu = canon(mode, canon(mode, group_sum(s, x, q, f64::from)) / n);
        let c = canon(
            mode,
            canon(mode, group_sum(s, x, q, |v| f64::from(v - mu))) / n,
        );
        let s2 = group_sum(s, x, q, |v| {
            let e = f64::from((v - mu) - c);
            e * e
        });
        mean[q] = mu;
        corr[q] = c;
        sq_sum[q] = canon(mode, s2);
    }
}

/// Step 5: `y = ((((x ⊖ μ) ⊖ c) ⊗ r) ⊗ w) ⊕ b`, each factor only when given.
pub(crate) fn norm_forward(
    mode: ComputeMode,
    s: &NormSpec,
    x: &[f32],
    st: &NormStats<'_>,
    weight: Option<&[f32]>,
    bias: Option<&[f32]>,
    out: &mut [f32],
) {
    let mut i = 0;
    for _ in 0..s.p {
        for q in 0..s.q {
            for r in 0..s.r {
                let mut y = ((x[i] - st.mean[q]) - st.corr[q]) * st.rstd[q];
                if let Some(w) = weight {
                    y *= w[s.param_index(q, r)];
                }
                if let Some(b) = bias {
                    y += b[s.param_index(q, r)];
                }
                out[i] = canon(mode, y);
                i += 1;
            }
        }
    }
}

/// The backward pass (`docs/arithmetic.md` §5): `dx` (with the statistics' terms when
/// `stats_depend`), `dw = Σ64 (g·x̂)` and `db = Σ64 g`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn norm_backward(
    mode: ComputeMode,
    s: &NormSpec,
    x: &[f32],
    g: &[f32],
    st: &NormStats<'_>,
    weight: Option<&[f32]>,
    stats_depend: bool,
    grads: NormGrads<'_>,
) {
    let xhat = |q: usize, i: usize| ((x[i] - st.mean[q]) - st.corr[q]) * st.rstd[q];
    let ghat = |q: usize, r: usize, i: usize| match weight {
        Some(w) => g[i] * w[s.param_index(q, r)],
        None => g[i],
    };
    let n = s.count() as f32;
    if let Some(dx) = grads.dx {
        for q in 0..s.q {
            let (mut a, mut bx) = (0.0f64, 0.0f64);
            if stats_depend {
                for p in 0..s.p {
                    let base = (p * s.q + q) * s.r;
                    for r in 0..s.r {
                        let gh = ghat(q, r, base + r);
                        a += f64::from(gh);
                        bx += f64::from(gh) * f64::from(xhat(q, base + r));
                    }
                }
            }
            let (mean_g, mean_gx) = ((a as f32) / n, (bx as f32) / n);
            for p in 0..s.p {
                let base = (p * s.q + q) * s.r;
                for r in 0..s.r {
                    let i = base + r;
                    let gh = ghat(q, r, i);
                    let v = if stats_depend {
                        ((gh - mean_g) - xhat(q, i) * mean_gx) * st.rstd[q]
                    } else {
                        gh * st.rstd[q]
                    };
                    dx[i] = canon(mode, v);
                }
            }
        }
    }
    if let Some(dw) = grads.dw {
        for (k, out) in dw.iter_mut().enumerate() {
            let mut acc = 0.0f64;
            s.for_param(k, |i, q, _| acc += f64::from(g[i]) * f64::from(xhat(q, i)));
            *out = canon(mode, acc as f32);
        }
    }
    if let Some(db) = grads.db {
        for (k, out) in db.iter_mut().enumerate() {
            let mut acc = 0.0f64;
            s.for_param(k, |i, _, _| acc += f64::from(g[i]));
            *out = canon(mode, acc as f32);
        }
    }
}
