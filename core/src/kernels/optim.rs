//! The optimizer updates as fused element-wise kernels: the f32 operations of the
//! optimizers of `exactgrad-nn` (`nn/src/optim/sgd.rs`, `adam.rs`), element by element, in
//! their order.

use super::canon;
use crate::check::check_len;
use crate::error::Result;
use crate::mode::ComputeMode;

/// One SGD update (PyTorch's `torch.optim.SGD`), per element with `d = g` (or `−g` when
/// maximising):
///
/// 1. `d = d ⊕ (p ⊗ weight_decay)` when a weight decay is given;
/// 2. with momentum `μ`: `b = d` on the first step, else `b = (b ⊗ μ) ⊕ (d ⊗ dampening)`
///    (`dampening` holds `1 − τ`); then `d = d ⊕ (b ⊗ μ)` (Nesterov) or `d = b`;
/// 3. `p = p ⊕ (d ⊗ neg_lr)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdSpec {
    /// `−lr`, rounded to f32.
    pub neg_lr: f32,
    /// The weight decay factor, when the decay is non-zero.
    pub weight_decay: Option<f32>,
    /// The momentum `μ`, when non-zero (then a momentum buffer is given).
    pub momentum: Option<f32>,
    /// `1 − dampening`, rounded to f32.
    pub dampening: f32,
    /// Nesterov momentum.
    pub nesterov: bool,
    /// Whether the momentum buffer is new (set from `d`) on this step.
    pub first: bool,
    /// Ascend instead of descend (`d = −g`).
    pub maximize: bool,
}

/// `base^n` by binary exponentiation with IEEE f64 products only, so the result is the
/// same on every platform (no `pow` from the system's maths library).
pub fn powi_f64(base: f64, mut n: u64) -> f64 {
    let mut result = 1.0;
    let mut b = base;
    while n > 0 {
        if n & 1 == 1 {
            result *= b;
        }
        b *= b;
        n >>= 1;
    }
    result
}

impl SgdSpec {
    /// The spec of an SGD step with these hyper-parameters (f64, as PyTorch's), each
    /// rounded to f32 where it meets the tensors; `first` when the momentum buffer is new.
    pub fn from_hyper(
        lr: f64,
        momentum: f64,
        dampening: f64,
        weight_decay: f64,
        nesterov: bool,
        maximize: bool,
        first: bool,
    ) -> Self {
        SgdSpec {
            neg_lr: (-lr) as f32,
            weight_decay: (weight_decay != 0.0).then_some(weight_decay as f32),
            momentum: (momentum != 0.0).then_some(momentum as f32),
            dampening: (1.0 - dampening) as f32,
            nesterov,
            first,
            maximize,
        }
    }

    /// Checks the buffers: `grad` as long as `param`, the momentum buffer as long too
    /// when there is momentum and empty otherwise.
    pub fn check(&self, param: usize, grad: usize, buf: usize) -> Result<()> {
        let op = "sgd_step";
        check_len(op, "grad", grad, param)?;
        check_len(
            op,
            "momentum_buffer",
            buf,
            if self.momentum.is_some() { param } else { 0 },
        )
    }
}

/// One Adam / AdamW update (PyTorch's `torch.optim.Adam`), per element with `d = g` (or
/// `−g` when maximising):
///
/// 1. decoupled decay: `p = p ⊗ decay`; coupled: `d = d ⊕ (p ⊗ weight_decay)`;
/// 2. `m = lerp(m, d, w1)`: with `δ = d ⊖ m`, `m ⊕ (δ ⊗ w1)` when `|w1| < 0.5`, else
///    `d ⊖ (δ ⊗ (1 ⊖ w1))`;
/// 3. `v = (v ⊗ beta2) ⊕ ((d ⊗ w2) ⊗ d)`;
/// 4. AMSGrad: `vmax = (vmax is NaN or vmax ≥ v) ? vmax : v`, and `vmax` replaces `v` below;
/// 5. `p = p ⊕ ((m ⊗ neg_step) ⊘ ((sqrt(v) ⊘ bc2_sqrt) ⊕ eps))`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamSpec {
    /// `−lr / (1 − beta1^t)`, rounded to f32.
    pub neg_step: f32,
    /// `1 − beta1`, rounded to f32.
    pub w1: f32,
    /// `beta2`, rounded to f32.
    pub beta2: f32,
    /// `1 − beta2`, rounded to f32.
    pub w2: f32,
    /// `sqrt(1 − beta2^t)`, rounded to f32.
    pub bc2_sqrt: f32,
    /// `eps`, rounded to f32.
    pub eps: f32,
    /// The coupled (L2) weight decay factor, when non-zero.
    pub weight_decay: Option<f32>,
    /// The decoupled (AdamW) factor `1 − lr·weight_decay`, when the decay is non-zero.
    pub decay: Option<f32>,
    /// AMSGrad (then a `max_exp_avg_sq` buffer is given).
    pub amsgrad: bool,
    /// Ascend instead of descend (`d = −g`).
    pub maximize: bool,
}

impl AdamSpec {
    /// The spec of step `step` (from 1) of Adam with these hyper-parameters (f64, as
    /// PyTorch's): `β^step` by [`powi_f64`], the bias corrections and the step size in
    /// f64, each value rounded to f32 where it meets the tensors; `decoupled` is AdamW's
    /// weight decay.
    #[allow(clippy::too_many_arguments)]
    pub fn from_hyper(
        lr: f64,
        betas: (f64, f64),
        eps: f64,
        weight_decay: f64,
        decoupled: bool,
        amsgrad: bool,
        maximize: bool,
        step: u64,
    ) -> Self {
        let (beta1, beta2) = betas;
        let bias_correction1 = 1.0 - powi_f64(beta1, step);
        let bias_correction2 = 1.0 - powi_f64(beta2, step);
        AdamSpec {
            neg_step: (-(lr / bias_correction1)) as f32,
            w1: (1.0 - beta1) as f32,
            beta2: beta2 as f32,
            w2: (1.0 - beta2) as f32,
            bc2_sqrt: crate::rng::sqrt_f64(bias_correction2) as f32,
            eps: eps as f32,
            weight_decay: (weight_decay != 0.0 && !decoupled).then_some(weight_decay as f32),
            decay: (weight_decay != 0.0 && decoupled).then_some((1.0 - lr * weight_decay) as f32),
            amsgrad,
            maximize,
        }
    }

    /// Checks the buffers: `grad`, `exp_avg` and `exp_avg_sq` as long as `param`,
    /// `max_exp_avg_sq` as long too with AMSGrad and empty otherwise.
    pub fn check(&self, param: usize, grad: usize, m: usize, v: usize, vmax: usize) -> Result<()> {
        let op = "adam_step";
        check_len(op, "grad", grad, param)?;
        check_len(op, "exp_avg", m, param)?;
        check_len(op, "exp_avg_sq", v, param)?;
        check_len(
            op,
            "max_exp_avg_sq",
            vmax,
            if self.amsgrad { param } else { 0 },
        )
    }

    /// The update of one element: new `(p, m, v, vmax)`.
    #[inline(always)]
    pub fn element(&self, p: f32, g: f32, m: f32, v: f32, vmax: f32) -> (f32, f32, f32, f32) {
        let mut p = p;
        let mut d = if self.maximize { -g } else { g };
        if let Some(f) = self.decay {
            p *= f;
        }
        if let Some(wd) = self.weight_decay {
            d += p * wd;
        }
        let delta = d - m;
        let m = if self.w1.abs() < 0.5 {
            m + delta * self.w1
        } else {
            d - delta * (1.0 - self.w1)
        };
        let v = v * self.beta2 + (d * self.w2) * d;
        let (second, vmax) = if self.amsgrad {
            let mx = if vmax.is_nan() || vmax >= v { vmax } else { v };
            (mx, mx)
        } else {
            (v, vmax)
        };
        let denom = (second.sqrt() / self.bc2_sqrt) + self.eps;
        (p + (m * self.neg_step) / denom, m, v, vmax)
    }
}

impl SgdSpec {
    /// The update of one element: new `(p, b)`.
    #[inline(always)]
    pub fn element(&self, p: f32, g: f32, b: f32) -> (f32, f32) {
        let mut d = if self.maximize { -g } else { g };
        if let Some(wd) = self.weight_decay {
            d += p * wd;
        }
        let mut b = b;
        if let Some(mu) = self.momentum {
            b = if self.first {
                d
            } else {
                b * mu + d * self.dampening
            };
            d = if self.nesterov { d + b * mu } else { b };
        }
        (p + d * self.neg_lr, b)
    }
}

/// The reference SGD update over slices.
pub(crate) fn sgd_step(
    mode: ComputeMode,
    s: &SgdSpec,
    param: &mut [f32],
    grad: &[f32],
    buf: &mut [f32],
) {
    for i in 0..param.len() {
        let b = if s.momentum.is_some() { buf[i] } else { 0.0 };
        let (p, b) = s.element(param[i], grad[i], b);
        param[i] = canon(mode, p);
        if s.momentum.is_some() {
            buf[i] = canon(mode, b);
        }
    }
}

/// The reference Adam update over slices.
pub(crate) fn adam_step(
    mode: ComputeMode,
    s: &AdamSpec,
    param: &mut [f32],
    grad: &[f32],
    m: &mut [f32],
    v: &mut [f32],
    vmax: &mut [f32],
) {
    for i in 0..param.len() {
        let mx = if s.amsgrad { vmax[i] } else { 0.0 };
        let (p, mi, vi, mx) = s.element(param[i], grad[i], m[i], v[i], mx);
        param[i] = canon(mode, p);
        m[i] = canon(mode, mi);
        v[i] = canon(mode, vi);
        if s.amsgrad {
            vmax[i] = canon(mode, mx);
        }
    }
}
