//! The one-cycle policy.

use super::trig::cos;
use super::{attach, check_count, rule_scheduler, Progress, Rule, SchedulerKind, SchedulerState};
use crate::error::{Error, Result};
use crate::optim::Optimizer;
use exactgrad_core::Backend;
use std::f64::consts::PI;

/// How [`OneCycleLr`] moves between two rates (PyTorch's `anneal_strategy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AnnealStrategy {
    /// `end + (start − end) / 2 · (cos(π·pct) + 1)` (PyTorch's `"cos"`, the default).
    #[default]
    Cos,
    /// `(end − start) · pct + start` (PyTorch's `"linear"`).
    Linear,
}

/// Hyper-parameters of [`OneCycleLr`], with PyTorch's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OneCycleLrConfig {
    /// The peak rate (finite, `> 0`).
    pub max_lr: f64,
    /// Steps of the cycle (`≥ 1`); the scheduler can be stepped this many times.
    pub total_steps: u64,
    /// Fraction of the cycle spent raising the rate, in `(0, 1)` (default 0.3).
    pub pct_start: f64,
    /// The annealing curve (default [`AnnealStrategy::Cos`]).
    pub anneal_strategy: AnnealStrategy,
    /// `initial_lr = max_lr / div_factor` (finite, `> 0`; default 25).
    pub div_factor: f64,
    /// `min_lr = initial_lr / final_div_factor` (finite, `> 0`; default 1e4).
    pub final_div_factor: f64,
    /// Three phases (up, back down to `initial_lr`, down to `min_lr`) instead of two
    /// (default false).
    pub three_phase: bool,
    /// Cycle the momentum inversely to the rate, between `max_momentum` and
    /// `base_momentum` (default true, as PyTorch): SGD's `momentum`, Adam's and AdamW's
    /// β1, of every parameter group.
    pub cycle_momentum: bool,
    /// The momentum at the rate's peak (default 0.85).
    pub base_momentum: f64,
    /// The momentum at the start and the end of the cycle (default 0.95).
    pub max_momentum: f64,
}

impl OneCycleLrConfig {
    /// Peak `max_lr` over `total_steps` steps, other values PyTorch's defaults.
    pub fn new(max_lr: f64, total_steps: u64) -> Self {
        Self {
            max_lr,
            total_steps,
            pct_start: 0.3,
            anneal_strategy: AnnealStrategy::Cos,
            div_factor: 25.0,
            final_div_factor: 1e4,
            three_phase: false,
            cycle_momentum: true,
            base_momentum: 0.85,
            max_momentum: 0.95,
        }
    }

    /// As [`new`](Self::new) with `total_steps = epochs · steps_per_epoch` (PyTorch's
    /// `epochs` and `steps_per_epoch` arguments); both must be `≥ 1`.
    pub fn from_epochs(max_lr: f64, epochs: u64, steps_per_epoch: u64) -> Result<Self> {
        let op = "OneCycleLrConfig::from_epochs";
        check_count(op, "epochs", epochs)?;
        check_count(op, "steps_per_epoch", steps_per_epoch)?;
        let total = epochs.checked_mul(steps_per_epoch).ok_or_else(|| {
            Error::invalid(
                op,
                "steps_per_epoch",
                format!("epochs · steps_per_epoch = {epochs} · {steps_per_epoch} overflows"),
            )
        })?;
        Ok(Self::new(max_lr, total))
    }
}

/// One phase of the cycle: from the previous phase's end step to `end_step`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Phase {
    end_step: f64,
    start_lr: f64,
    end_lr: f64,
    start_momentum: f64,
    end_momentum: f64,
}

/// PyTorch's `OneCycleLR`, the momentum cycled by default (`cycle_momentum`).
///
/// With `p = pct_start`, `N = total_steps`, `initial = max_lr / div_factor`,
/// `min = initial / final_div_factor`, the phases end at the (f64) steps
///
/// ```text
/// two phases:   p·N − 1 (initial → max_lr),  N − 1 (max_lr → min)
/// three phases: p·N − 1 (initial → max_lr),  2p·N − 2 (max_lr → initial),  N − 1 (initial → min)
/// ```
///
/// and step `t` (`0 ≤ t ≤ N`) takes the first phase with `t ≤ end` (or the last), with
/// `pct = (t − start) / (end − start)` (`start` = the previous phase's end, 0 for the
/// first) and the rate `anneal(phase start rate, phase end rate, pct)` of the
/// [`AnnealStrategy`]. A closed form: the optimizer's rate is not read; construction sets
/// it to the rate of step 0 (about `initial`).
///
/// With `cycle_momentum` (the default), each step also sets every group's momentum (SGD)
/// or β1 (Adam, AdamW) to `anneal(phase start momentum, phase end momentum, pct)`, the
/// momentum moving against the rate: `max_momentum → base_momentum` while the rate
/// rises, `base_momentum → max_momentum` while it falls (three phases: the third stays
/// at `max_momentum`). Step 0 gives `max_momentum`. Stepping past `N` is an error, as in
/// PyTorch (where `last_epoch` still advances; here nothing changes).
///
/// Step `N` (the step after the last batch of an `N`-batch run) lies past the last
/// phase's end `N − 1`, so `pct > 1` there and PyTorch extrapolates: the cosine rises
/// slightly above `min`, the linear strategy falls below it, to a negative rate for most
/// configurations. [`next_lr`](super::LrScheduler::next_lr) and
/// [`get_last_lr`](super::LrScheduler::get_last_lr) give PyTorch's value; the optimizer receives
/// 0 in place of a negative rate (see [`LrScheduler::step`](super::LrScheduler::step)).
#[derive(Debug)]
pub struct OneCycleLr {
    config: OneCycleLrConfig,
    phases: Vec<Phase>,
    progress: Progress,
    groups: Vec<Progress>,
}

impl OneCycleLr {
    /// A schedule over `opt`; sets its learning rate to the rate of step 0.
    pub fn new<B: Backend, O: Optimizer<B> + ?Sized>(
        opt: &mut O,
        config: OneCycleLrConfig,
    ) -> Result<Self> {
        attach(Self::with_config(config)?, opt)
    }

    pub(super) fn with_config(config: OneCycleLrConfig) -> Result<Self> {
        let op = SchedulerKind::OneCycle.new_op();
        check_count(op, "total_steps", config.total_steps)?;
        for (arg, v) in [
            ("max_lr", config.max_lr),
            ("div_factor", config.div_factor),
            ("final_div_factor", config.final_div_factor),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(Error::invalid(
                    op,
                    arg,
                    format!("must be finite and > 0, got {v}"),
                ));
            }
        }
        let p = config.pct_start;
        if !(p > 0.0 && p < 1.0) {
            return Err(Error::invalid(
                op,
                "pct_start",
                format!("must be in (0, 1), got {p}"),
            ));
        }
        let max_lr = config.max_lr;
        let initial_lr = max_lr / config.div_factor;
        let min_lr = initial_lr / config.final_div_factor;
        if !initial_lr.is_finite() {
            return Err(Error::invalid(
                op,
                "div_factor",
                format!(
                    "max_lr / div_factor = {max_lr} / {} overflows",
                    config.div_factor
                ),
            ));
        }
        for (arg, m) in [
            ("base_momentum", config.base_momentum),
            ("max_momentum", config.max_momentum),
        ] {
            if config.cycle_momentum && !(m.is_finite() && m >= 0.0) {
                return Err(Error::invalid(
                    op,
                    arg,
                    format!("must be finite and >= 0, got {m}"),
                ));
            }
        }
        let (base_m, max_m) = (config.base_momentum, config.max_momentum);
        let n = config.total_steps as f64;
        let last_end = (config.total_steps - 1) as f64;
        let phases = if config.three_phase {
            vec![
                Phase {
                    end_step: p * n - 1.0,
                    start_lr: initial_lr,
                    end_lr: max_lr,
                    start_momentum: max_m,
                    end_momentum: base_m,
                },
                Phase {
                    end_step: 2.0 * p * n - 2.0,
                    start_lr: max_lr,
                    end_lr: initial_lr,
                    start_momentum: base_m,
                    end_momentum: max_m,
                },
                Phase {
                    end_step: last_end,
                    start_lr: initial_lr,
                    end_lr: min_lr,
                    start_momentum: max_m,
                    end_momentum: max_m,
                },
            ]
        } else {
            vec![
                Phase {
                    end_step: p * n - 1.0,
                    start_lr: initial_lr,
                    end_lr: max_lr,
                    start_momentum: max_m,
                    end_momentum: base_m,
                },
                Phase {
                    end_step: last_end,
                    start_lr: max_lr,
                    end_lr: min_lr,
                    start_momentum: base_m,
                    end_momentum: max_m,
                },
            ]
        };
        let s = Self {
            config,
            phases,
            progress: Progress::fresh(initial_lr),
            groups: Vec::new(),
        };
        s.check_phase_lengths()?;
        Ok(s)
    }

    /// Rejects a configuration where some step `0..=N` falls in a phase of length 0
    /// (PyTorch divides by zero there).
    fn check_phase_lengths(&self) -> Result<()> {
        let last = self.phases.len() - 1;
        let mut start = 0.0;
        let mut before_max = f64::NEG_INFINITY;
        for (i, ph) in self.phases.iter().enumerate() {
            if ph.end_step - start == 0.0 {
                // Steps in phase i: before_max < t <= end (no upper bound for the last).
                let first = if before_max < 0.0 {
                    0
                } else {
                    // before_max < 2^54 here; truncation is the floor.
                    before_max as u64 + 1
                };
                let reached =
                    first <= self.config.total_steps && (i == last || first as f64 <= ph.end_step);
                if reached {
                    return Err(Error::invalid(
                        SchedulerKind::OneCycle.new_op(),
                        "pct_start",
                        format!(
                            "phase {} of the cycle has length 0 (pct_start · total_steps = {} · {}) \
                             and step {first} falls in it",
                            i + 1,
                            self.config.pct_start,
                            self.config.total_steps
                        ),
                    ));
                }
            }
            before_max = before_max.max(ph.end_step);
            start = ph.end_step;
        }
        Ok(())
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &OneCycleLrConfig {
        &self.config
    }

    /// The rate at step `t` (PyTorch's `get_lr`).
    fn rate(&self, t: i64) -> Result<f64> {
        self.anneal(t, |ph| (ph.start_lr, ph.end_lr))
    }

    /// The momentum at step `t` (PyTorch's `computed_momentum`), when the cycle sets it.
    fn momentum(&self, t: i64) -> Option<f64> {
        if !self.config.cycle_momentum || t < 0 {
            return None;
        }
        self.anneal(t, |ph| (ph.start_momentum, ph.end_momentum))
            .ok()
    }

    /// The value at step `t` of the curve whose phase ends `ends` gives.
    fn anneal(&self, t: i64, ends: impl Fn(&Phase) -> (f64, f64)) -> Result<f64> {
        let op = SchedulerKind::OneCycle.step_op();
        if t > self.config.total_steps as i64 {
            return Err(Error::invalid(
                op,
                "total_steps",
                format!(
                    "tried to step {t} times, the cycle has total_steps = {}",
                    self.config.total_steps
                ),
            ));
        }
        let t = t as f64;
        let i = self
            .phases
            .iter()
            .position(|ph| t <= ph.end_step)
            .unwrap_or(self.phases.len() - 1);
        let ph = self.phases[i];
        let start = if i == 0 {
            0.0
        } else {
            self.phases[i - 1].end_step
        };
        let length = ph.end_step - start;
        if length == 0.0 {
            return Err(Error::invalid(
                op,
                "pct_start",
                format!("step {t} falls in phase {} of length 0", i + 1),
            ));
        }
        let pct = (t - start) / length;
        let (from, to) = ends(&ph);
        Ok(match self.config.anneal_strategy {
            AnnealStrategy::Cos => {
                let cos_out = cos(PI * pct) + 1.0;
                if cos_out.is_nan() {
                    return Err(Error::invalid(
                        op,
                        "pct_start",
                        format!("step {t}: π·{pct} is outside the fixed cosine's range"),
                    ));
                }
                to + (from - to) / 2.0 * cos_out
            }
            AnnealStrategy::Linear => (to - from) * pct + from,
        })
    }
}

impl Rule for OneCycleLr {
    fn kind(&self) -> SchedulerKind {
        SchedulerKind::OneCycle
    }
    fn progress(&self) -> &Progress {
        &self.progress
    }
    fn progress_mut(&mut self) -> &mut Progress {
        &mut self.progress
    }
    fn get_lr(&self, epoch: i64, _lr: f64, _initial: bool) -> Result<f64> {
        self.rate(epoch)
    }
    fn closed_form(&self, epoch: i64) -> Result<f64> {
        self.rate(epoch)
    }
    fn allows_negative_rates(&self) -> bool {
        self.config.anneal_strategy == AnnealStrategy::Linear
    }
    fn group_base(&self, _lr: f64) -> f64 {
        // Every group starts from max_lr / div_factor (PyTorch, one max_lr).
        self.progress.base_lr
    }
    fn momentum_at(&self, epoch: i64) -> Option<f64> {
        self.momentum(epoch)
    }
    fn check_state(&self, state: &SchedulerState) -> Result<()> {
        let op = SchedulerKind::OneCycle.load_op();
        if state.last_epoch > self.config.total_steps as i64 {
            return Err(Error::invalid(
                op,
                "state",
                format!(
                    "last_epoch {} is past total_steps = {}",
                    state.last_epoch, self.config.total_steps
                ),
            ));
        }
        if state.last_epoch >= 0 {
            // A closed form of the step: the only rate this schedule gives at that step.
            let want = self.rate(state.last_epoch)?;
            if state.last_lr.to_bits() != want.to_bits() {
                return Err(Error::invalid(
                    op,
                    "state.last_lr",
                    format!(
                        "{} is not the rate {want} this cycle gives at step {}",
                        state.last_lr, state.last_epoch
                    ),
                ));
            }
        }
        if state.base_lr.to_bits() != self.progress.base_lr.to_bits() {
            return Err(Error::invalid(
                op,
                "state",
                format!(
                    "base_lr {} differs from max_lr / div_factor = {} of this configuration",
                    state.base_lr, self.progress.base_lr
                ),
            ));
        }
        Ok(())
    }
}

rule_scheduler!(OneCycleLr);
