//! Cosine annealing.

use super::trig::{cos, MAX_COS_ARG};
use super::{attach, check_count, optimizer_lr, rule_scheduler, Progress, Rule, SchedulerKind};
use crate::error::{Error, Result};
use crate::optim::Optimizer;
use exactgrad_core::Backend;
use std::f64::consts::PI;

/// Hyper-parameters of [`CosineAnnealingLr`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CosineAnnealingLrConfig {
    /// Steps of a half period (`≥ 1`): the rate reaches `eta_min` at step `t_max`.
    pub t_max: u64,
    /// The lowest rate (finite, `≥ 0`; PyTorch's default 0).
    pub eta_min: f64,
}

impl CosineAnnealingLrConfig {
    /// Half period `t_max` with PyTorch's default `eta_min` 0.
    pub fn new(t_max: u64) -> Self {
        Self {
            t_max,
            eta_min: 0.0,
        }
    }
}

/// PyTorch's `CosineAnnealingLR` (without restarts: past `t_max` the rate rises again
/// along the cosine, as PyTorch).
///
/// PyTorch's recursive form, reproduced operation by operation (`η` = `eta_min`,
/// `T` = `t_max`, `lr` = the optimizer's current rate, `cos` the fixed f64 cosine):
///
/// ```text
/// lr_0 = lr
/// lr_t = lr + (base_lr − η) · (1 − cos(π / T)) / 2                 if (t − 1 − T) mod 2T = 0
/// lr_t = (1 + cos(π·t / T)) / (1 + cos(π·(t − 1) / T)) · (lr − η) + η   otherwise
/// ```
///
/// It follows the closed form `η + (base_lr − η) · (1 + cos(π·t / T)) / 2` (used when a
/// [`SequentialLr`](super::SequentialLr) restarts it) up to rounding, which grows near
/// the minima where `1 + cos` is small.
#[derive(Debug)]
pub struct CosineAnnealingLr {
    config: CosineAnnealingLrConfig,
    progress: Progress,
    groups: Vec<Progress>,
}

impl CosineAnnealingLr {
    /// A schedule starting from the optimizer's learning rate (unchanged at step 0).
    pub fn new<B: Backend, O: Optimizer<B> + ?Sized>(
        opt: &mut O,
        config: CosineAnnealingLrConfig,
    ) -> Result<Self> {
        let base = optimizer_lr(SchedulerKind::CosineAnnealing, opt)?;
        attach(Self::with_base(config, base)?, opt)
    }

    pub(super) fn with_base(config: CosineAnnealingLrConfig, base_lr: f64) -> Result<Self> {
        let op = SchedulerKind::CosineAnnealing.new_op();
        check_count(op, "t_max", config.t_max)?;
        let eta = config.eta_min;
        if !(eta.is_finite() && eta >= 0.0) {
            return Err(Error::invalid(
                op,
                "eta_min",
                format!("must be finite and >= 0, got {eta}"),
            ));
        }
        Ok(Self {
            config,
            progress: Progress::fresh(base_lr),
            groups: Vec::new(),
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &CosineAnnealingLrConfig {
        &self.config
    }

    /// `cos(π·k / T)` as PyTorch forms the argument (`math.pi * k / T_max`).
    fn cos_at(&self, k: i64, epoch: i64) -> Result<f64> {
        let c = cos(PI * k as f64 / self.config.t_max as f64);
        if c.is_nan() {
            return Err(Error::invalid(
                SchedulerKind::CosineAnnealing.step_op(),
                "last_epoch",
                format!(
                    "step {epoch}: π·{k}/{} exceeds {MAX_COS_ARG:e}, the range of the fixed cosine",
                    self.config.t_max
                ),
            ));
        }
        Ok(c)
    }
}

impl Rule for CosineAnnealingLr {
    fn kind(&self) -> SchedulerKind {
        SchedulerKind::CosineAnnealing
    }
    fn progress(&self) -> &Progress {
        &self.progress
    }
    fn progress_mut(&mut self) -> &mut Progress {
        &mut self.progress
    }
    fn get_lr(&self, epoch: i64, lr: f64, initial: bool) -> Result<f64> {
        if initial {
            return Ok(lr);
        }
        let eta = self.config.eta_min;
        let t_max = self.config.t_max as i64;
        if (epoch - 1 - t_max).rem_euclid(2 * t_max) == 0 {
            let c = cos(PI / t_max as f64);
            return Ok(lr + (self.progress.base_lr - eta) * (1.0 - c) / 2.0);
        }
        let numerator = 1.0 + self.cos_at(epoch, epoch)?;
        let denominator = 1.0 + self.cos_at(epoch - 1, epoch)?;
        if denominator == 0.0 {
            // PyTorch raises ZeroDivisionError here (only possible for t_max > 3·10^8).
            return Err(Error::invalid(
                SchedulerKind::CosineAnnealing.step_op(),
                "t_max",
                format!(
                    "step {epoch}: 1 + cos(π·{}/{}) rounds to 0 in PyTorch's recursive formula",
                    epoch - 1,
                    t_max
                ),
            ));
        }
        Ok(numerator / denominator * (lr - eta) + eta)
    }
    fn closed_form(&self, epoch: i64) -> Result<f64> {
        let eta = self.config.eta_min;
        let c = self.cos_at(epoch, epoch)?;
        Ok(eta + (self.progress.base_lr - eta) * (1.0 + c) / 2.0)
    }
}

rule_scheduler!(CosineAnnealingLr);
