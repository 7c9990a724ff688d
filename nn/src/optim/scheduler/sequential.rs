//! Schedulers run one after another.

use super::{
    advance, checked_progress, optimizer_lr, restart, rule_state, CosineAnnealingLr,
    CosineAnnealingLrConfig, ExponentialLr, ExponentialLrConfig, LinearLr, LinearLrConfig,
    LrScheduler, MultiStepLr, MultiStepLrConfig, OneCycleLr, OneCycleLrConfig, Progress, Rule,
    SchedulerKind, SchedulerState, StepLr, StepLrConfig, MAX_STEPS,
};
use crate::error::{Error, Result};
use crate::optim::Optimizer;
use exactgrad_core::Backend;

/// PyTorch's `group.setdefault("initial_lr", group["lr"])`.
fn base_of(initial_lr: &mut Option<f64>, group_lr: f64) -> f64 {
    *initial_lr.get_or_insert(group_lr)
}

/// The configuration of one scheduler inside a [`SequentialLr`].
#[derive(Clone, Debug, PartialEq)]
pub enum SchedulerConfig {
    /// A [`StepLr`].
    Step(StepLrConfig),
    /// A [`MultiStepLr`].
    MultiStep(MultiStepLrConfig),
    /// An [`ExponentialLr`].
    Exponential(ExponentialLrConfig),
    /// A [`CosineAnnealingLr`].
    CosineAnnealing(CosineAnnealingLrConfig),
    /// A [`LinearLr`].
    Linear(LinearLrConfig),
    /// A [`OneCycleLr`].
    OneCycle(OneCycleLrConfig),
}

impl From<StepLrConfig> for SchedulerConfig {
    fn from(c: StepLrConfig) -> Self {
        Self::Step(c)
    }
}
impl From<MultiStepLrConfig> for SchedulerConfig {
    fn from(c: MultiStepLrConfig) -> Self {
        Self::MultiStep(c)
    }
}
impl From<ExponentialLrConfig> for SchedulerConfig {
    fn from(c: ExponentialLrConfig) -> Self {
        Self::Exponential(c)
    }
}
impl From<CosineAnnealingLrConfig> for SchedulerConfig {
    fn from(c: CosineAnnealingLrConfig) -> Self {
        Self::CosineAnnealing(c)
    }
}
impl From<LinearLrConfig> for SchedulerConfig {
    fn from(c: LinearLrConfig) -> Self {
        Self::Linear(c)
    }
}
impl From<OneCycleLrConfig> for SchedulerConfig {
    fn from(c: OneCycleLrConfig) -> Self {
        Self::OneCycle(c)
    }
}

/// PyTorch's `SequentialLR`: scheduler `i` runs from milestone `i − 1` (0 for the first)
/// up to milestone `i`.
///
/// ```text
/// step t:  i = number of milestones ≤ t
///          if t = milestones[i − 1]:  scheduler i restarts at its step 0 with its closed
///                                     form (PyTorch's `_update_lr(0)`)
///          else:                      scheduler i takes its next step
/// ```
///
/// The schedulers are built as PyTorch builds them when each is constructed on the same
/// fresh optimizer in list order before the `SequentialLR`: every scheduler's base rate
/// is the optimizer's rate (PyTorch's `initial_lr`), except that a [`OneCycleLr`] sets
/// `initial_lr` to `max_lr / div_factor` for itself and the schedulers after it.
/// Construction resets the optimizer's rate to `initial_lr` and takes step 0 of the first
/// scheduler.
#[derive(Debug)]
pub struct SequentialLr {
    schedulers: Vec<Box<dyn Rule>>,
    milestones: Vec<u64>,
    progress: Progress,
}

impl SequentialLr {
    /// Chains `schedulers` over `opt`, switching at `milestones` (strictly increasing,
    /// `≥ 1`, one fewer than the schedulers). At most one of them may be a
    /// [`OneCycleLr`] (PyTorch's one-cycle schedulers share their rates through the
    /// optimizer's parameter group).
    pub fn new<B: Backend, O: Optimizer<B> + ?Sized>(
        opt: &mut O,
        schedulers: Vec<SchedulerConfig>,
        milestones: Vec<u64>,
    ) -> Result<Self> {
        let op = SchedulerKind::Sequential.new_op();
        if schedulers.is_empty() {
            return Err(Error::invalid(
                op,
                "schedulers",
                "needs at least one scheduler",
            ));
        }
        if milestones.len() + 1 != schedulers.len() {
            return Err(Error::invalid(
                op,
                "milestones",
                format!(
                    "needs one milestone fewer than schedulers: {} schedulers, {} milestones",
                    schedulers.len(),
                    milestones.len()
                ),
            ));
        }
        let mut previous = 0;
        for (i, &m) in milestones.iter().enumerate() {
            if m <= previous || m > MAX_STEPS {
                return Err(Error::invalid(
                    op,
                    "milestones",
                    format!(
                        "must be strictly increasing, in 1 ..= 2^53: milestone {i} is {m} \
                         (previous {previous})"
                    ),
                ));
            }
            previous = m;
        }
        let one_cycles = schedulers
            .iter()
            .filter(|c| matches!(c, SchedulerConfig::OneCycle(_)))
            .count();
        if one_cycles > 1 {
            return Err(Error::invalid(
                op,
                "schedulers",
                format!("at most one OneCycleLr is supported, got {one_cycles}"),
            ));
        }
        if opt.num_param_groups() != 1 {
            return Err(Error::invalid(
                op,
                "optimizer",
                format!(
                    "SequentialLr drives one parameter group, the optimizer has {}",
                    opt.num_param_groups()
                ),
            ));
        }
        let lr0 = optimizer_lr(SchedulerKind::Sequential, opt)?;

        // PyTorch's construction of each scheduler on the optimizer: its base rate is the
        // group's `initial_lr` (set by the first scheduler, overwritten by a one-cycle
        // one), and its constructor's step changes the group's rate.
        let mut initial_lr: Option<f64> = None;
        let mut group_lr = lr0;
        let mut built: Vec<Box<dyn Rule>> = Vec::with_capacity(schedulers.len());
        for config in schedulers {
            let mut rule: Box<dyn Rule> = match config {
                SchedulerConfig::OneCycle(c) => {
                    let r = OneCycleLr::with_config(c)?;
                    initial_lr = Some(r.progress().base_lr);
                    Box::new(r)
                }
                SchedulerConfig::Step(c) => {
                    Box::new(StepLr::with_base(c, base_of(&mut initial_lr, group_lr))?)
                }
                SchedulerConfig::MultiStep(c) => Box::new(MultiStepLr::with_base(
                    c,
                    base_of(&mut initial_lr, group_lr),
                )?),
                SchedulerConfig::Exponential(c) => Box::new(ExponentialLr::with_base(
                    c,
                    base_of(&mut initial_lr, group_lr),
                )?),
                SchedulerConfig::CosineAnnealing(c) => Box::new(CosineAnnealingLr::with_base(
                    c,
                    base_of(&mut initial_lr, group_lr),
                )?),
                SchedulerConfig::Linear(c) => {
                    Box::new(LinearLr::with_base(c, base_of(&mut initial_lr, group_lr))?)
                }
            };
            group_lr = advance(rule.as_mut(), group_lr, true)?;
            // SequentialLR's `recursive_undo`.
            rule.progress_mut().last_epoch -= 1;
            built.push(rule);
        }
        // At least one scheduler was built, and each sets `initial_lr`.
        let reset = initial_lr.unwrap_or(lr0);
        let lr = advance(built[0].as_mut(), reset, true)?;
        // A one-cycle schedule's constructor sets the momentum of its step 0, in charge
        // or not (PyTorch builds every inner scheduler on the optimizer).
        for r in &built {
            if let Some(m) = r.momentum_at(0) {
                opt.set_momentum(m)?;
            }
        }
        opt.set_lr(super::optimizer_rate(lr))?;
        Ok(Self {
            schedulers: built,
            milestones,
            progress: Progress {
                base_lr: reset,
                last_epoch: 0,
                last_lr: lr,
            },
        })
    }

    /// The milestones.
    pub fn milestones(&self) -> &[u64] {
        &self.milestones
    }

    /// The index of the scheduler that computed the last rate.
    pub fn current(&self) -> usize {
        self.active(self.progress.last_epoch)
    }

    /// The scheduler in charge of step `t` (Python's `bisect_right(milestones, t)`).
    fn active(&self, t: i64) -> usize {
        self.milestones.partition_point(|&m| (m as i64) <= t)
    }
}

impl LrScheduler for SequentialLr {
    fn next_lr(&mut self, current_lr: f64) -> Result<f64> {
        let op = SchedulerKind::Sequential.step_op();
        super::check_rate(op, "current_lr", current_lr)?;
        let epoch = self
            .progress
            .last_epoch
            .checked_add(1)
            .ok_or_else(|| Error::invalid(op, "last_epoch", "the step count overflows i64"))?;
        let i = self.active(epoch);
        let rule = self.schedulers[i].as_mut();
        let lr = if i > 0 && self.milestones[i - 1] as i64 == epoch {
            restart(rule)?
        } else {
            advance(rule, current_lr, false)?
        };
        self.progress.last_epoch = epoch;
        self.progress.last_lr = lr;
        Ok(lr)
    }

    fn get_last_lr(&self) -> f64 {
        self.progress.last_lr
    }

    fn get_last_momentum(&self) -> Option<f64> {
        // A one-cycle schedule cycles the momentum while it is in charge.
        let rule = &self.schedulers[self.current()];
        rule.momentum_at(rule.progress().last_epoch)
    }

    fn last_epoch(&self) -> i64 {
        self.progress.last_epoch
    }

    fn base_lr(&self) -> f64 {
        self.progress.base_lr
    }

    fn state(&self) -> SchedulerState {
        SchedulerState {
            kind: SchedulerKind::Sequential,
            last_epoch: self.progress.last_epoch,
            base_lr: self.progress.base_lr,
            last_lr: self.progress.last_lr,
            children: self
                .schedulers
                .iter()
                .map(|r| rule_state(r.as_ref()))
                .collect(),
            groups: Vec::new(),
        }
    }

    fn load_state(&mut self, state: &SchedulerState) -> Result<()> {
        let op = SchedulerKind::Sequential.load_op();
        if state.kind != SchedulerKind::Sequential {
            return Err(Error::invalid(
                op,
                "state",
                format!(
                    "the state of a {} cannot be loaded into a SequentialLr",
                    state.kind.name()
                ),
            ));
        }
        if !state.groups.is_empty() {
            return Err(Error::invalid(
                op,
                "state",
                "a SequentialLr drives one parameter group, the state holds several",
            ));
        }
        if state.children.len() != self.schedulers.len() {
            return Err(Error::invalid(
                op,
                "state",
                format!(
                    "the state lists {} schedulers, this SequentialLr has {}",
                    state.children.len(),
                    self.schedulers.len()
                ),
            ));
        }
        super::check_epoch(op, state.last_epoch, 0)?;
        super::check_rate(op, "state.base_lr", state.base_lr)?;
        let children = self
            .schedulers
            .iter()
            .zip(&state.children)
            .map(|(r, s)| checked_progress(r.as_ref(), s, op, -1))
            .collect::<Result<Vec<_>>>()?;
        // The rate is the one of the scheduler in charge of the last step.
        let active = &state.children[self.active(state.last_epoch)];
        if state.last_lr.to_bits() != active.last_lr.to_bits() {
            return Err(Error::invalid(
                op,
                "state.last_lr",
                format!(
                    "{} differs from the rate {} of the scheduler in charge of step {}",
                    state.last_lr, active.last_lr, state.last_epoch
                ),
            ));
        }
        for (r, p) in self.schedulers.iter_mut().zip(children) {
            *r.progress_mut() = p;
        }
        self.progress = Progress {
            base_lr: state.base_lr,
            last_epoch: state.last_epoch,
            last_lr: state.last_lr,
        };
        Ok(())
    }
}
