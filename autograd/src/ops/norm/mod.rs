//! Normalisation: batch_norm, layer_norm and group_norm, each a fused operator with its
//! own backward rule (the standard formulas of Ioffe & Szegedy 2015 and Ba et al. 2016).
//!
//! All three normalise the elements of a contiguous `[P, Q, R]` view of the input over
//! `P` and `R`, one statistics group per `q` (batch_norm: `[N, C, spatial]`; layer_norm:
//! `[1, outer, normalized]`; group_norm: `[1, N·G, (C/G)·spatial]`), on the backend's
//! `norm_stats`, `norm_forward` and `norm_backward` kernels, with the following order (`⊕ ⊖ ⊗ ⊘` single f32 operations, `Σ64` the f64 sum in increasing
//! row-major element order rounded once, `n = P·R` converted to f32):
//!
//! forward, per group `q`:
//! 1. `μ = (Σ64 x) ⊘ n`
//! 2. `c = (Σ64 (x ⊖ μ)) ⊘ n`, the correction of the corrected two-pass algorithm
//!    (Chan, Golub & LeVeque 1983): it removes the rounding error of `μ`, which would
//!    otherwise shift every `x̂` when the data's offset is large against its spread
//! 3. `e = (x ⊖ μ) ⊖ c`; `s2 = Σ64 (e·e)` with the products formed exactly in f64
//! 4. `σ² = s2 ⊘ n` (biased); `r = 1 ⊘ sqrt(σ² ⊕ eps)`
//! 5. `x̂ = e ⊗ r`; `y = (x̂ ⊗ w) ⊕ b` (each factor only when given)
//!
//! (batch_norm in evaluation mode uses `μ = running_mean`, `c = 0`, `σ² = running_var`).
//! Training batch_norm then updates the running statistics in place, unrecorded:
//! `rm = ((1 ⊖ m) ⊗ rm) ⊕ (m ⊗ (μ ⊕ c))`, `rv = ((1 ⊖ m) ⊗ rv) ⊕ (m ⊗ (s2 ⊘ (n ⊖ 1)))`.
//!
//! backward, with `ĝ = g ⊗ w` (or `g`) and `x̂` recomputed as in the forward pass:
//! 1. `A = Σ64 ĝ`, `Bx = Σ64 (ĝ·x̂)` (f64 products), both per group, rounded once
//! 2. `dx = ((ĝ ⊖ (A ⊘ n)) ⊖ (x̂ ⊗ (Bx ⊘ n))) ⊗ r`; when the statistics are constants
//!    (batch_norm in evaluation mode) `dx = ĝ ⊗ r`
//! 3. `dw = Σ64 (g·x̂)` (f64 products), `db = Σ64 g`, each over the elements that share
//!    the parameter, in increasing row-major order.
//!
//! NaN results are canonical in exact mode. The kernels' reference definitions
//! (`exactgrad_core::kernels`) are this order as plain loops; every backend gives their
//! bits, so the result never depends on the backend or thread count.
//!
//! The optional arguments are named fields of [`BatchNormOptions`], [`LayerNormOptions`]
//! and [`GroupNormOptions`] (PyTorch's defaults), so that the running statistics and the
//! affine parameters cannot be swapped by position; [`Momentum`] expresses PyTorch's
//! `momentum=None` (the cumulative average).
//!
//! The options are in `options.rs`; this file holds the shared fused kernel (statistics,
//! normalisation, record and backward) and the three operators, next to the order above.

use super::canon;
use crate::engine::{record_with, Saved};
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::trace::{ints_of, OpInfo, Value};
use exactgrad_core::kernels::{NormGrads as KernelGrads, NormParam, NormSpec, NormStats};
use exactgrad_core::{Backend, ComputeMode, ViewLen, ViewOf};

mod options;

pub use options::{BatchNormOptions, GroupNormOptions, LayerNormOptions, Momentum};

// ----- the fused operator ----------------------------------------------------------------

/// Which parameter element an input element at `(q, r)` of the `[P, Q, R]` view uses.
#[derive(Clone, Copy, Debug)]
enum ParamIndex {
    /// One per statistics group (batch_norm: per channel).
    PerQ,
    /// One per normalised position (layer_norm).
    PerR,
    /// group_norm: channel `(q mod groups)·cpg + r / spatial`.
    Group {
        groups: usize,
        cpg: usize,
        spatial: usize,
    },
}

/// The `[P, Q, R]` geometry of a normalisation.
#[derive(Clone, Copy, Debug)]
struct Geometry {
    p: usize,
    q: usize,
    r: usize,
    param: ParamIndex,
    /// Number of parameter elements (weight/bias length).
    params: usize,
}

impl Geometry {
    /// Elements per group (saturating: it overflows only for empty inputs without
    /// channels, whose groups are never visited).
    fn count(&self) -> usize {
        self.p.saturating_mul(self.r)
    }

    /// The kernel spec of this geometry.
    fn spec(&self) -> NormSpec {
        NormSpec {
            p: self.p,
            q: self.q,
            r: self.r,
            param: match self.param {
                ParamIndex::PerQ => NormParam::PerQ,
                ParamIndex::PerR => NormParam::PerR,
                ParamIndex::Group {
                    groups,
                    cpg,
                    spatial,
                } => NormParam::Group {
                    groups,
                    cpg,
                    spatial,
                },
            },
        }
    }
}

/// Per-group statistics of the forward pass: `μ`, `c`, and `s2` when computed from the
/// input.
struct Stats {
    mean: Vec<f32>,
    corr: Vec<f32>,
    /// `s2 = Σ64 e²` per group, rounded to f32.
    sq_sum: Vec<f32>,
}

/// `r = 1 ⊘ sqrt(σ² ⊕ eps)` per group.
fn rstd(var: &[f32], eps: f32, mode: ComputeMode) -> Vec<f32> {
    var.iter()
        .map(|&v| canon(mode, 1.0 / (v + eps).sqrt()))
        .collect()
}

/// `v` in a new buffer of the backend (the statistics and affine parameters, which the
/// host computes or holds, handed to the kernels).
fn up<B: Backend>(be: &B, v: &[f32]) -> Result<B::Storage> {
    let mut copy = exactgrad_core::backend::try_vec_with_capacity("norm", v.len())?;
    copy.extend_from_slice(v);
    Ok(be.storage_from_vec(copy)?)
}

/// The gradients of input, weight and bias, each when needed.
type NormGrads<B> = (Option<Tensor<B>>, Option<Tensor<B>>, Option<Tensor<B>>);

/// Gradients of a normalisation on the backend's `norm_backward` kernel (see the module
/// documentation for the formulas). `stats_depend` says whether `μ` and `r` were
/// computed from `x` (training) or are constants (evaluation with running statistics).
#[allow(clippy::too_many_arguments)]
fn normalize_backward<B: Backend>(
    be: &B,
    gs: ViewOf<'_, B>,
    xs: ViewOf<'_, B>,
    geo: &Geometry,
    stats: (&[f32], &[f32], &[f32]),
    w: Option<&[f32]>,
    stats_depend: bool,
    need: [bool; 3],
    shapes: [&exactgrad_core::Shape; 3],
) -> Result<NormGrads<B>> {
    let spec = geo.spec();
    let wrap = |v: Option<B::Storage>, shape: &exactgrad_core::Shape| {
        v.map(|v| Tensor::from_storage(be, v, shape.clone()))
            .transpose()
    };
    if gs.is_empty() {
        // An empty input (no groups visited): an empty dx, zero parameter gradients.
        let dx = need[0].then(|| be.zeros(0)).transpose()?;
        let dw = need[1].then(|| be.zeros(geo.params)).transpose()?;
        let db = need[2].then(|| be.zeros(geo.params)).transpose()?;
        return Ok((
            wrap(dx, shapes[0])?,
            wrap(dw, shapes[1])?,
            wrap(db, shapes[2])?,
        ));
    }
    let mut dx = need[0].then(|| be.uninit(gs.len())).transpose()?;
    let mut dw = need[1].then(|| be.uninit(geo.params)).transpose()?;
    let mut db = need[2].then(|| be.uninit(geo.params)).transpose()?;
    let (mean, corr, rs) = (up(be, stats.0)?, up(be, stats.1)?, up(be, stats.2)?);
    let w = w.map(|w| up(be, w)).transpose()?;
    be.norm_backward(
        &spec,
        xs,
        gs,
        &NormStats {
            mean: B::view(&mean),
            corr: B::view(&corr),
            rstd: B::view(&rs),
        },
        w.as_ref().map(B::view),
        stats_depend,
        KernelGrads {
            dx: dx.as_mut().map(B::view_mut),
            dw: dw.as_mut().map(B::view_mut),
            db: db.as_mut().map(B::view_mut),
        },
    )?;
    Ok((
        wrap(dx, shapes[0])?,
        wrap(dw, shapes[1])?,
        wrap(db, shapes[2])?,
    ))
}

/// The element count of some dimensions of an input: exact for a non-empty input (it
/// divides the input's count); for an empty one, whose groups are never visited (see
/// `norm_op`), 0 when one of them is 0 and saturating otherwise.
fn count_of(dims: &[usize]) -> usize {
    if dims.contains(&0) {
        0
    } else {
        dims.iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .unwrap_or(usize::MAX)
    }
}

/// Checks that an optional parameter tensor has exactly `dims`.
fn check_param<B: Backend>(
    op: &'static str,
    what: &'static str,
    t: Option<&Tensor<B>>,
    input: &[usize],
    dims: &[usize],
) -> Result<()> {
    if let Some(t) = t {
        if t.dims() != dims {
            return Err(Error::mismatch(
                op,
                t.dims(),
                input,
                format!("{what} must have shape {dims:?} for an input of shape {input:?}"),
            ));
        }
    }
    Ok(())
}

/// The fused normalisation: computes, records and returns `y`. `fixed` holds constant
/// statistics `(μ, σ²)` (evaluation); otherwise they come from the input, and
/// `on_stats` receives the batch statistics (for the running-statistics update).
#[allow(clippy::too_many_arguments)]
fn norm_op<B: Backend>(
    op: &'static str,
    x: &Tensor<B>,
    geo: Geometry,
    weight: Option<&Tensor<B>>,
    bias: Option<&Tensor<B>>,
    eps: f32,
    fixed: Option<(Vec<f32>, Vec<f32>)>,
    on_stats: impl FnOnce(&Stats) -> Result<()>,
    info: Option<OpInfo<B>>,
) -> Result<Tensor<B>> {
    // An empty input has only empty groups: no statistics to compute or keep, however
    // large its other dimensions (or the group count) are.
    let geo = if x.numel() == 0 {
        Geometry {
            p: 0,
            q: 0,
            r: 0,
            ..geo
        }
    } else {
        geo
    };
    let be = x.backend();
    let mode = be.mode();
    let w = weight.map(Tensor::to_vec).transpose()?;
    let b = bias.map(Tensor::to_vec).transpose()?;
    let stats_depend = fixed.is_none();
    let spec = geo.spec();
    // The running statistics are updated after the input's storage is released (they
    // could share it).
    let (y, stats, rs) = x.with_contiguous(|xs| -> Result<_> {
        let (stats, var) = match fixed {
            Some((mean, var)) => {
                let corr = vec![0.0; mean.len()];
                (
                    Stats {
                        mean,
                        corr,
                        sq_sum: Vec::new(),
                    },
                    var,
                )
            }
            None => {
                let mut st = Stats {
                    mean: vec![0.0; geo.q],
                    corr: vec![0.0; geo.q],
                    sq_sum: vec![0.0; geo.q],
                };
                if !xs.is_empty() {
                    let (mut m, mut c, mut s) =
                        (be.zeros(geo.q)?, be.zeros(geo.q)?, be.zeros(geo.q)?);
                    let (mv, cv) = (B::view_mut(&mut m), B::view_mut(&mut c));
                    be.norm_stats(&spec, xs, mv, cv, B::view_mut(&mut s))?;
                    st.mean = B::storage_to_vec(&m)?;
                    st.corr = B::storage_to_vec(&c)?;
                    st.sq_sum = B::storage_to_vec(&s)?;
                }
                let n = geo.count() as f32;
                let var = st.sq_sum.iter().map(|&s| canon(mode, s / n)).collect();
                (st, var)
            }
        };
        let rs = rstd(&var, eps, mode);
        let mut y = be.uninit(xs.len())?;
        if xs.is_empty() {
            // No groups to visit (the geometry of an empty input is empty).
            return Ok((y, stats, rs));
        }
        let (mean, corr, rsd) = (up(be, &stats.mean)?, up(be, &stats.corr)?, up(be, &rs)?);
        let (wd, bd) = (
            w.as_deref().map(|w| up(be, w)).transpose()?,
            b.as_deref().map(|b| up(be, b)).transpose()?,
        );
        be.norm_forward(
            &spec,
            xs,
            &NormStats {
                mean: B::view(&mean),
                corr: B::view(&corr),
                rstd: B::view(&rsd),
            },
            wd.as_ref().map(B::view),
            bd.as_ref().map(B::view),
            B::view_mut(&mut y),
        )?;
        Ok((y, stats, rs))
    })??;
    if stats_depend {
        on_stats(&stats)?;
    }
    let info = info.map(|i| {
        i.names(&["input", "weight", "bias"])
            .attr("eps", Value::F32(eps))
    });
    norm_record(op, x, geo, weight, bias, y, stats, rs, stats_depend, info)
}

/// Records a normalisation's output `y` with its backward rule.
#[allow(clippy::too_many_arguments)]
fn norm_record<B: Backend>(
    op: &'static str,
    x: &Tensor<B>,
    geo: Geometry,
    weight: Option<&Tensor<B>>,
    bias: Option<&Tensor<B>>,
    y: B::Storage,
    stats: Stats,
    rs: Vec<f32>,
    stats_depend: bool,
    info: Option<OpInfo<B>>,
) -> Result<Tensor<B>> {
    let be = x.backend();
    let out = Tensor::from_storage(be, y, x.shape().clone())?;
    let mut inputs = vec![x];
    inputs.extend(weight);
    inputs.extend(bias);
    let need = [
        x.is_requires_grad(),
        weight.is_some_and(Tensor::is_requires_grad),
        bias.is_some_and(Tensor::is_requires_grad),
    ];
    let w_shape = weight.map(|t| t.shape().clone());
    let b_shape = bias.map(|t| t.shape().clone());
    let x_keep = x.clone();
    let w_keep = weight.cloned();
    let Stats { mean, corr, .. } = stats;
    Ok(record_with(op, out, &inputs, info, move || {
        // The rule reads x (for x̂) unless only the bias needs a gradient, and w for dx.
        let saved_x = (need[0] || need[1]).then(|| Saved::new(op, &x_keep));
        let saved_w = if need[0] {
            w_keep.as_ref().map(|w| Saved::new(op, w))
        } else {
            None
        };
        move |g: &Tensor<B>| {
            let be = g.backend();
            let shape = g.shape().clone();
            let w = match &saved_w {
                Some(s) => Some(s.get()?.to_vec()?),
                None => None,
            };
            let empty = exactgrad_core::Shape::from([0usize]);
            let shapes = [
                &shape,
                w_shape.as_ref().unwrap_or(&empty),
                b_shape.as_ref().unwrap_or(&empty),
            ];
            let stats = (&mean[..], &corr[..], &rs[..]);
            let (dx, dw, db) = g.with_contiguous(|gs| -> Result<_> {
                match &saved_x {
                    Some(sx) => sx.get()?.with_contiguous(|xs| {
                        normalize_backward(
                            be,
                            gs,
                            xs,
                            &geo,
                            stats,
                            w.as_deref(),
                            stats_depend,
                            need,
                            shapes,
                        )
                    })?,
                    // Only the bias: x̂ is not needed.
                    None => normalize_backward(
                        be,
                        gs,
                        B::view(&be.zeros(0)?),
                        &geo,
                        stats,
                        None,
                        stats_depend,
                        [false, false, need[2]],
                        shapes,
                    ),
                }
            })??;
            let mut grads = vec![dx];
            if w_shape.is_some() {
                grads.push(dw);
            }
            if b_shape.is_some() {
                grads.push(db);
            }
            Ok(grads)
        }
    }))
}

impl<B: Backend> Tensor<B> {
    /// Batch normalisation (PyTorch's `nn.functional.batch_norm`) of an input
    /// `[N, C, *]`, per channel over the batch and spatial dimensions.
    ///
    /// The arguments are named fields of [`BatchNormOptions`]. In training the batch
    /// mean and biased variance normalise; when given, the running statistics are then
    /// updated in place (unrecorded, bumping their version) with the unbiased variance:
    /// `r = (1 − m)·r + m·stat`, `m` from [`Momentum`]. Outside training the running
    /// statistics normalise and both must be given. `weight` and `bias` (`[C]`) are
    /// optional. The exact formulas are in the module documentation.
    ///
    /// Fails when the input has fewer than 2 dimensions, when a statistic or parameter
    /// does not have shape `[C]`, in evaluation without running statistics, in training
    /// when there is only one value per channel, and for
    /// `Momentum::CumulativeAverage { num_batches_tracked: 0 }`.
    pub fn batch_norm(&self, opts: BatchNormOptions<'_, B>) -> Result<Tensor<B>> {
        let _public = crate::engine::PublicOp::new("batch_norm");
        let BatchNormOptions {
            running_mean,
            running_var,
            weight,
            bias,
            training,
            momentum,
            eps,
        } = opts;
        let op = "batch_norm";
        let momentum = momentum.factor()?;
        if self.rank() < 2 {
            return Err(Error::invalid(
                op,
                "input",
                format!(
                    "expects an input of shape [N, C, *] with at least 2 dimensions, got {:?}",
                    self.dims()
                ),
            ));
        }
        let dims = self.dims();
        let c = dims[1];
        check_param(op, "running_mean", running_mean, dims, &[c])?;
        check_param(op, "running_var", running_var, dims, &[c])?;
        check_param(op, "weight", weight, dims, &[c])?;
        check_param(op, "bias", bias, dims, &[c])?;
        let spatial = count_of(&dims[2..]);
        let geo = Geometry {
            p: dims[0],
            q: c,
            r: spatial,
            param: ParamIndex::PerQ,
            params: c,
        };
        if training {
            if geo.count() == 1 {
                return Err(Error::invalid(
                    op,
                    "input",
                    format!(
                        "expected more than 1 value per channel when training, got input of shape {:?}",
                        dims
                    ),
                ));
            }
            for (what, t) in [("running_mean", running_mean), ("running_var", running_var)] {
                if t.is_some_and(|t| t.is_requires_grad() && crate::is_grad_enabled()) {
                    return Err(Error::invalid(
                        op,
                        what,
                        "running statistics are updated in place and must not require grad",
                    ));
                }
            }
            let mode = self.backend().mode();
            let update = |stats: &Stats| -> Result<()> {
                if geo.count() == 0 {
                    // An empty batch leaves the running statistics alone, as in PyTorch.
                    return Ok(());
                }
                let n = geo.count() as f32;
                let keep = 1.0f32 - momentum;
                if let Some(rm) = running_mean {
                    let c = stats;
                    rm.map_in_place(op, |i, r| {
                        canon(mode, keep * r + momentum * (c.mean[i] + c.corr[i]))
                    })?;
                }
                if let Some(rv) = running_var {
                    rv.map_in_place(op, |i, r| {
                        let unbiased = stats.sq_sum[i] / (n - 1.0);
                        canon(mode, keep * r + momentum * unbiased)
                    })?;
                }
                Ok(())
            };
            let info = crate::trace::info(|| {
                let mut info = OpInfo::new()
                    .attr("training", Value::Bool(true))
                    .attr("momentum", Value::F32(momentum));
                // Updated in place by this operation: outputs of its record.
                for (what, t) in [("running_mean", running_mean), ("running_var", running_var)] {
                    if let Some(t) = t {
                        info = info.output(what, t);
                    }
                }
                info
            });
            norm_op(op, self, geo, weight, bias, eps, None, update, info)
        } else {
            let (Some(rm), Some(rv)) = (running_mean, running_var) else {
                return Err(Error::invalid(
                    op,
                    "running_mean/running_var",
                    "both must be given in evaluation mode (training = false)",
                ));
            };
            let fixed = (rm.to_vec()?, rv.to_vec()?);
            let info = crate::trace::info(|| {
                OpInfo::new()
                    .attr("training", Value::Bool(false))
                    .tensor("running_mean", rm)
                    .tensor("running_var", rv)
            });
            norm_op(
                op,
                self,
                geo,
                weight,
                bias,
                eps,
                Some(fixed),
                |_| Ok(()),
                info,
            )
        }
    }

    /// Layer normalisation (PyTorch's `nn.functional.layer_norm`) over the trailing
    /// dimensions `normalized_shape`, with optional `weight` and `bias` of that shape
    /// ([`LayerNormOptions`]).
    ///
    /// Fails when `normalized_shape` is empty or differs from the input's trailing
    /// dimensions, or when a parameter does not have shape `normalized_shape`.
    pub fn layer_norm(
        &self,
        normalized_shape: &[usize],
        opts: LayerNormOptions<'_, B>,
    ) -> Result<Tensor<B>> {
        let _public = crate::engine::PublicOp::new("layer_norm");
        let LayerNormOptions { weight, bias, eps } = opts;
        let op = "layer_norm";
        let dims = self.dims();
        if normalized_shape.is_empty() {
            return Err(Error::invalid(
                op,
                "normalized_shape",
                "must contain at least one dimension",
            ));
        }
        let k = normalized_shape.len();
        if dims.len() < k || dims[dims.len() - k..] != *normalized_shape {
            return Err(Error::mismatch(
                op,
                dims,
                normalized_shape,
                format!("normalized_shape {normalized_shape:?} must equal the input's trailing dimensions"),
            ));
        }
        check_param(op, "weight", weight, dims, normalized_shape)?;
        check_param(op, "bias", bias, dims, normalized_shape)?;
        let r = count_of(normalized_shape);
        let geo = Geometry {
            p: 1,
            q: count_of(&dims[..dims.len() - k]),
            r,
            param: ParamIndex::PerR,
            params: r,
        };
        let info = crate::trace::info(|| {
            OpInfo::new().attr("normalized_shape", ints_of(normalized_shape))
        });
        norm_op(op, self, geo, weight, bias, eps, None, |_| Ok(()), info)
    }

    /// Group normalisation (PyTorch's `nn.functional.group_norm`) of an input
    /// `[N, C, *]`: the channels are split into `num_groups` groups of `C / num_groups`
    /// and each (sample, group) is normalised over its channels and spatial positions;
    /// `weight` and `bias` ([`GroupNormOptions`]) are per channel (`[C]`).
    ///
    /// Fails when the input has fewer than 2 dimensions, when `num_groups` is 0 or does
    /// not divide `C`, or when a parameter does not have shape `[C]`.
    pub fn group_norm(
        &self,
        num_groups: usize,
        opts: GroupNormOptions<'_, B>,
    ) -> Result<Tensor<B>> {
        let _public = crate::engine::PublicOp::new("group_norm");
        let GroupNormOptions { weight, bias, eps } = opts;
        let op = "group_norm";
        let dims = self.dims();
        if dims.len() < 2 {
            return Err(Error::invalid(
                op,
                "input",
                format!(
                    "expects an input of shape [N, C, *] with at least 2 dimensions, got {dims:?}"
                ),
            ));
        }
        let c = dims[1];
        if num_groups == 0 || !c.is_multiple_of(num_groups) {
            return Err(Error::invalid(
                op,
                "num_groups",
                format!(
                    "the number of channels {c} of input {dims:?} must be divisible by num_groups = {num_groups}"
                ),
            ));
        }
        check_param(op, "weight", weight, dims, &[c])?;
        check_param(op, "bias", bias, dims, &[c])?;
        let spatial = count_of(&dims[2..]);
        let cpg = c / num_groups;
        let geo = Geometry {
            p: 1,
            q: dims[0].saturating_mul(num_groups),
            r: cpg.saturating_mul(spatial),
            param: ParamIndex::Group {
                groups: num_groups,
                cpg,
                spatial,
            },
            params: c,
        };
        let info =
            crate::trace::info(|| OpInfo::new().attr("num_groups", Value::Int(num_groups as i64)));
        norm_op(op, self, geo, weight, bias, eps, None, |_| Ok(()), info)
    }
}
