//! The multiplicative schedules: step, multi-step, exponential and linear.

use super::{
    attach, check_count, check_gamma, optimizer_lr, rule_scheduler, Progress, Rule, SchedulerKind,
    MAX_STEPS,
};
use crate::error::{Error, Result};
use crate::optim::{powi_f64, Optimizer};
use exactgrad_core::Backend;

/// Hyper-parameters of [`StepLr`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepLrConfig {
    /// Period of the decay in steps (`≥ 1`).
    pub step_size: u64,
    /// Factor applied every `step_size` steps (finite, `> 0`; PyTorch's default 0.1).
    pub gamma: f64,
}

impl StepLrConfig {
    /// Period `step_size` with PyTorch's default `gamma` 0.1.
    pub fn new(step_size: u64) -> Self {
        Self {
            step_size,
            gamma: 0.1,
        }
    }
}

/// PyTorch's `StepLR`: the rate is multiplied by `gamma` every `step_size` steps.
///
/// Recursive form, as PyTorch (`t` = step, `lr` = the optimizer's current rate):
///
/// ```text
/// lr_t = lr · gamma   if t > 0 and t mod step_size = 0
///      = lr           otherwise
/// ```
///
/// Closed form (used when a [`SequentialLr`](super::SequentialLr) restarts it):
/// `base_lr · gamma^⌊t / step_size⌋`.
#[derive(Debug)]
pub struct StepLr {
    config: StepLrConfig,
    progress: Progress,
    groups: Vec<Progress>,
}

impl StepLr {
    /// A schedule starting from the optimizer's learning rate (unchanged at step 0).
    pub fn new<B: Backend, O: Optimizer<B> + ?Sized>(
        opt: &mut O,
        config: StepLrConfig,
    ) -> Result<Self> {
        let base = optimizer_lr(SchedulerKind::Step, opt)?;
        attach(Self::with_base(config, base)?, opt)
    }

    pub(super) fn with_base(config: StepLrConfig, base_lr: f64) -> Result<Self> {
        let op = SchedulerKind::Step.new_op();
        check_count(op, "step_size", config.step_size)?;
        check_gamma(op, config.gamma)?;
        Ok(Self {
            config,
            progress: Progress::fresh(base_lr),
            groups: Vec::new(),
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &StepLrConfig {
        &self.config
    }
}

impl Rule for StepLr {
    fn kind(&self) -> SchedulerKind {
        SchedulerKind::Step
    }
    fn progress(&self) -> &Progress {
        &self.progress
    }
    fn progress_mut(&mut self) -> &mut Progress {
        &mut self.progress
    }
    fn get_lr(&self, epoch: i64, lr: f64, _initial: bool) -> Result<f64> {
        // step_size <= 2^53 fits i64.
        if epoch == 0 || epoch.rem_euclid(self.config.step_size as i64) != 0 {
            Ok(lr)
        } else {
            Ok(lr * self.config.gamma)
        }
    }
    fn closed_form(&self, epoch: i64) -> Result<f64> {
        let k = epoch.max(0) as u64 / self.config.step_size;
        Ok(self.progress.base_lr * powi_f64(self.config.gamma, k))
    }
}

rule_scheduler!(StepLr);

/// Hyper-parameters of [`MultiStepLr`].
#[derive(Clone, Debug, PartialEq)]
pub struct MultiStepLrConfig {
    /// The steps at which the rate is multiplied by `gamma`, in non-decreasing order;
    /// a step listed `n` times multiplies by `gamma^n` (PyTorch's counter).
    pub milestones: Vec<u64>,
    /// The factor (finite, `> 0`; PyTorch's default 0.1).
    pub gamma: f64,
}

impl MultiStepLrConfig {
    /// `milestones` with PyTorch's default `gamma` 0.1.
    pub fn new(milestones: Vec<u64>) -> Self {
        Self {
            milestones,
            gamma: 0.1,
        }
    }
}

/// PyTorch's `MultiStepLR`: the rate is multiplied by `gamma` at each milestone.
///
/// Recursive form (`n_t` = how many times `t` is listed among the milestones):
///
/// ```text
/// lr_t = lr · gamma^n_t   if n_t > 0      (also at t = 0, as PyTorch)
///      = lr               otherwise
/// ```
///
/// Closed form: `base_lr · gamma^(number of milestones ≤ t)`. Integer powers are binary
/// exponentiation (PyTorch calls `pow`; they agree exactly for `n ≤ 2` and to an ulp or
/// so beyond).
#[derive(Debug)]
pub struct MultiStepLr {
    config: MultiStepLrConfig,
    progress: Progress,
    groups: Vec<Progress>,
}

impl MultiStepLr {
    /// A schedule starting from the optimizer's learning rate.
    pub fn new<B: Backend, O: Optimizer<B> + ?Sized>(
        opt: &mut O,
        config: MultiStepLrConfig,
    ) -> Result<Self> {
        let base = optimizer_lr(SchedulerKind::MultiStep, opt)?;
        attach(Self::with_base(config, base)?, opt)
    }

    pub(super) fn with_base(config: MultiStepLrConfig, base_lr: f64) -> Result<Self> {
        let op = SchedulerKind::MultiStep.new_op();
        check_gamma(op, config.gamma)?;
        for (i, w) in config.milestones.windows(2).enumerate() {
            if w[1] < w[0] {
                return Err(Error::invalid(
                    op,
                    "milestones",
                    format!(
                        "must be non-decreasing, but milestone {} is {} after {}",
                        i + 1,
                        w[1],
                        w[0]
                    ),
                ));
            }
        }
        if let Some(&m) = config.milestones.iter().find(|&&m| m > MAX_STEPS) {
            return Err(Error::invalid(
                op,
                "milestones",
                format!("must be at most 2^53, got {m}"),
            ));
        }
        Ok(Self {
            config,
            progress: Progress::fresh(base_lr),
            groups: Vec::new(),
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &MultiStepLrConfig {
        &self.config
    }

    /// How many milestones are `<= epoch` (Python's `bisect_right`).
    fn passed(&self, epoch: i64) -> usize {
        self.config
            .milestones
            .partition_point(|&m| (m as i64) <= epoch)
    }
}

impl Rule for MultiStepLr {
    fn kind(&self) -> SchedulerKind {
        SchedulerKind::MultiStep
    }
    fn progress(&self) -> &Progress {
        &self.progress
    }
    fn progress_mut(&mut self) -> &mut Progress {
        &mut self.progress
    }
    fn get_lr(&self, epoch: i64, lr: f64, _initial: bool) -> Result<f64> {
        let n = self.passed(epoch) - self.passed(epoch - 1);
        if n == 0 {
            Ok(lr)
        } else {
            Ok(lr * powi_f64(self.config.gamma, n as u64))
        }
    }
    fn closed_form(&self, epoch: i64) -> Result<f64> {
        Ok(self.progress.base_lr * powi_f64(self.config.gamma, self.passed(epoch) as u64))
    }
}

rule_scheduler!(MultiStepLr);

/// Hyper-parameters of [`ExponentialLr`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExponentialLrConfig {
    /// The factor applied every step (finite, `> 0`).
    pub gamma: f64,
}

/// PyTorch's `ExponentialLR`: the rate is multiplied by `gamma` every step.
///
/// Recursive form: `lr_0 = base_lr`, `lr_t = lr · gamma` for `t ≥ 1` (one rounding per
/// step, as PyTorch). Closed form: `base_lr · gamma^t`.
#[derive(Debug)]
pub struct ExponentialLr {
    config: ExponentialLrConfig,
    progress: Progress,
    groups: Vec<Progress>,
}

impl ExponentialLr {
    /// A schedule starting from the optimizer's learning rate.
    pub fn new<B: Backend, O: Optimizer<B> + ?Sized>(
        opt: &mut O,
        config: ExponentialLrConfig,
    ) -> Result<Self> {
        let base = optimizer_lr(SchedulerKind::Exponential, opt)?;
        attach(Self::with_base(config, base)?, opt)
    }

    pub(super) fn with_base(config: ExponentialLrConfig, base_lr: f64) -> Result<Self> {
        check_gamma(SchedulerKind::Exponential.new_op(), config.gamma)?;
        Ok(Self {
            config,
            progress: Progress::fresh(base_lr),
            groups: Vec::new(),
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &ExponentialLrConfig {
        &self.config
    }
}

impl Rule for ExponentialLr {
    fn kind(&self) -> SchedulerKind {
        SchedulerKind::Exponential
    }
    fn progress(&self) -> &Progress {
        &self.progress
    }
    fn progress_mut(&mut self) -> &mut Progress {
        &mut self.progress
    }
    fn get_lr(&self, _epoch: i64, lr: f64, initial: bool) -> Result<f64> {
        Ok(if initial { lr } else { lr * self.config.gamma })
    }
    fn closed_form(&self, epoch: i64) -> Result<f64> {
        Ok(self.progress.base_lr * powi_f64(self.config.gamma, epoch.max(0) as u64))
    }
}

rule_scheduler!(ExponentialLr);

/// Hyper-parameters of [`LinearLr`], with PyTorch's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinearLrConfig {
    /// Factor of the base rate at step 0, in `(0, 1]` (default 1/3).
    pub start_factor: f64,
    /// Factor reached at step `total_iters`, in `[0, 1]` (default 1).
    pub end_factor: f64,
    /// Steps of the linear change, `≥ 1` (default 5).
    pub total_iters: u64,
}

impl Default for LinearLrConfig {
    fn default() -> Self {
        Self {
            start_factor: 1.0 / 3.0,
            end_factor: 1.0,
            total_iters: 5,
        }
    }
}

/// PyTorch's `LinearLR` (linear warm-up or decay): the factor of the base rate moves
/// linearly from `start_factor` to `end_factor` over `total_iters` steps, then stays.
///
/// Recursive form, as PyTorch (`s`, `e`, `T` = start, end factor, total_iters):
///
/// ```text
/// lr_0 = lr · s
/// lr_t = lr · (1 + (e − s) / (T·s + (t − 1)·(e − s)))   for 1 ≤ t ≤ T
/// lr_t = lr                                              for t > T
/// ```
///
/// Closed form: `base_lr · (s + (e − s) · min(T, t) / T)`.
#[derive(Debug)]
pub struct LinearLr {
    config: LinearLrConfig,
    progress: Progress,
    groups: Vec<Progress>,
}

impl LinearLr {
    /// A schedule from the optimizer's learning rate; sets it to `lr · start_factor`.
    pub fn new<B: Backend, O: Optimizer<B> + ?Sized>(
        opt: &mut O,
        config: LinearLrConfig,
    ) -> Result<Self> {
        let base = optimizer_lr(SchedulerKind::Linear, opt)?;
        attach(Self::with_base(config, base)?, opt)
    }

    pub(super) fn with_base(config: LinearLrConfig, base_lr: f64) -> Result<Self> {
        let op = SchedulerKind::Linear.new_op();
        let s = config.start_factor;
        if !(s > 0.0 && s <= 1.0) {
            return Err(Error::invalid(
                op,
                "start_factor",
                format!("must be in (0, 1], got {s}"),
            ));
        }
        let e = config.end_factor;
        if !(0.0..=1.0).contains(&e) {
            return Err(Error::invalid(
                op,
                "end_factor",
                format!("must be in [0, 1], got {e}"),
            ));
        }
        check_count(op, "total_iters", config.total_iters)?;
        Ok(Self {
            config,
            progress: Progress::fresh(base_lr),
            groups: Vec::new(),
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &LinearLrConfig {
        &self.config
    }
}

impl Rule for LinearLr {
    fn kind(&self) -> SchedulerKind {
        SchedulerKind::Linear
    }
    fn progress(&self) -> &Progress {
        &self.progress
    }
    fn progress_mut(&mut self) -> &mut Progress {
        &mut self.progress
    }
    fn get_lr(&self, epoch: i64, lr: f64, initial: bool) -> Result<f64> {
        let LinearLrConfig {
            start_factor: s,
            end_factor: e,
            total_iters,
        } = self.config;
        if epoch == 0 {
            return Ok(lr * s);
        }
        if initial || epoch > total_iters as i64 {
            return Ok(lr);
        }
        let denominator = total_iters as f64 * s + (epoch - 1) as f64 * (e - s);
        Ok(lr * (1.0 + (e - s) / denominator))
    }
    fn closed_form(&self, epoch: i64) -> Result<f64> {
        let LinearLrConfig {
            start_factor: s,
            end_factor: e,
            total_iters,
        } = self.config;
        let t = total_iters.min(epoch.max(0) as u64) as f64;
        Ok(self.progress.base_lr * (s + (e - s) * t / total_iters as f64))
    }
}

rule_scheduler!(LinearLr);
