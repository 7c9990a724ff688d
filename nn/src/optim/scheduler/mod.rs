//! Learning-rate schedulers with PyTorch 2.15's semantics, computed in f64 with the same
//! bits on every platform.
//!
//! A scheduler is built on an optimizer (which, as in PyTorch, sets the optimizer's
//! learning rate for the first step) and then stepped once after every optimizer step:
//!
//! ```
//! use exactgrad_autograd::Tensor;
//! use exactgrad_backends::ScalarRefBackend;
//! use exactgrad_nn::optim::{
//!     CosineAnnealingLr, CosineAnnealingLrConfig, LinearLrConfig, LrScheduler, Optimizer,
//!     SequentialLr, Sgd, SgdConfig,
//! };
//!
//! # fn main() -> exactgrad_nn::Result<()> {
//! let b = ScalarRefBackend;
//! let w = Tensor::from_vec(&b, vec![1.0f32, -2.0], [2])?.requires_grad()?;
//! let mut opt = Sgd::new(vec![w.clone()], SgdConfig::new(0.1))?;
//! // Linear warm-up over 5 steps from 0.1 · 0.1, then cosine annealing to 0 over 95.
//! let mut sched = SequentialLr::new(
//!     &mut opt,
//!     vec![
//!         LinearLrConfig { start_factor: 0.1, end_factor: 1.0, total_iters: 5 }.into(),
//!         CosineAnnealingLrConfig { t_max: 95, eta_min: 0.0 }.into(),
//!     ],
//!     vec![5],
//! )?;
//! assert_eq!(opt.lr(), 0.1 * 0.1);
//! for _ in 0..100 {
//!     let loss = w.mul(&w)?.sum()?;
//!     opt.clear_grad();
//!     loss.backward()?;
//!     opt.step()?;
//!     sched.step(&mut opt)?;
//! }
//! assert_eq!(sched.last_epoch(), 100);
//! assert_eq!(opt.lr(), sched.get_last_lr());
//! assert!(opt.lr() < 1e-4);
//! # Ok(())
//! # }
//! ```
//!
//! Semantics (`docs/schedulers.md`):
//!
//! - `last_epoch` counts the steps: construction performs step 0 (PyTorch's initial
//!   step), each [`LrScheduler::step`] the next one.
//! - Where PyTorch's `get_lr()` is recursive (it multiplies the optimizer's current
//!   learning rate by a factor: [`StepLr`], [`MultiStepLr`], [`ExponentialLr`],
//!   [`LinearLr`], [`CosineAnnealingLr`]), so is this one, with the same operations in the
//!   same order; the new rate is computed from the optimizer's current one, so a change
//!   made to it between steps carries into the schedule as in PyTorch. [`OneCycleLr`] is
//!   a closed form of the step number. When [`SequentialLr`] switches to its next
//!   scheduler it restarts it at step 0 with PyTorch's closed form.
//! - The cosine is a fixed f64 function from IEEE `+ − × ÷` (not the platform's `cos`),
//!   and integer powers are binary exponentiation, so a schedule has the same bits on
//!   every platform.
//! - Every parameter group follows the schedule from its own rates (PyTorch's
//!   `base_lrs`, one per group): the rule of a recursive scheduler is applied to each
//!   group's current rate, a closed form to each group's initial rate; [`OneCycleLr`]
//!   gives every group the same rates, as PyTorch with one `max_lr`. [`SequentialLr`]
//!   drives a single group.
//! - [`LrScheduler::state`] / [`LrScheduler::load_state`] save and restore the progress.

mod cosine;
mod one_cycle;
mod sequential;
mod simple;
mod trig;

pub use cosine::{CosineAnnealingLr, CosineAnnealingLrConfig};
pub use one_cycle::{AnnealStrategy, OneCycleLr, OneCycleLrConfig};
pub use sequential::{SchedulerConfig, SequentialLr};
pub use simple::{
    ExponentialLr, ExponentialLrConfig, LinearLr, LinearLrConfig, MultiStepLr, MultiStepLrConfig,
    StepLr, StepLrConfig,
};

use super::Optimizer;
use crate::error::{Error, Result};
use exactgrad_core::Backend;

/// Largest step count, period or milestone accepted (2^53: every count converts to f64
/// exactly, as Python's ints do in PyTorch's formulas).
pub const MAX_STEPS: u64 = 1 << 53;

/// A learning-rate schedule over one optimizer, stepped once after each optimizer step.
///
/// Implemented by [`StepLr`], [`MultiStepLr`], [`ExponentialLr`], [`CosineAnnealingLr`],
/// [`LinearLr`], [`OneCycleLr`] and [`SequentialLr`].
pub trait LrScheduler {
    /// Advances the schedule by one step (`last_epoch += 1`) and returns the new learning
    /// rate, computed from `current_lr` (the optimizer's rate) where the schedule is
    /// recursive. On error nothing changes.
    fn next_lr(&mut self, current_lr: f64) -> Result<f64>;

    /// The learning rate of the last step (PyTorch's `get_last_lr()[0]`).
    fn get_last_lr(&self) -> f64;

    /// Advances the schedule by one step for every parameter group: `current` holds each
    /// group's rate, the result each group's new rate (PyTorch's
    /// `[group["lr"] for group in optimizer.param_groups]` after `scheduler.step()`). A
    /// scheduler built on an optimizer with one group takes one rate. On error nothing
    /// changes.
    fn next_group_lrs(&mut self, current: &[f64]) -> Result<Vec<f64>> {
        match current {
            [lr] => Ok(vec![self.next_lr(*lr)?]),
            _ => Err(Error::invalid(
                "LrScheduler::step",
                "optimizer",
                format!(
                    "this scheduler drives one parameter group, the optimizer has {}",
                    current.len()
                ),
            )),
        }
    }

    /// The learning rate of every group at the last step (PyTorch's `get_last_lr()`).
    fn get_last_lrs(&self) -> Vec<f64> {
        vec![self.get_last_lr()]
    }

    /// The momentum the schedule gives the last step, for a schedule that cycles the
    /// momentum ([`OneCycleLr`] with `cycle_momentum`, PyTorch's default): [`step`]
    /// gives it to every group as SGD's `momentum` or Adam's β1
    /// ([`Optimizer::set_momentum`]). `None` (every other schedule) leaves the momentum
    /// alone.
    ///
    /// [`step`]: LrScheduler::step
    fn get_last_momentum(&self) -> Option<f64> {
        None
    }

    /// The number of steps taken since construction (PyTorch's `last_epoch`; 0 after
    /// construction).
    fn last_epoch(&self) -> i64;

    /// The initial learning rate the schedule starts from (PyTorch's `base_lrs[0]`).
    fn base_lr(&self) -> f64;

    /// The progress of the schedule, for checkpoints. The hyper-parameters are not part
    /// of it: a scheduler built with the same configuration loads it.
    fn state(&self) -> SchedulerState;

    /// Restores a progress taken by [`state`](LrScheduler::state) from a scheduler of the
    /// same kind and configuration. The optimizer's learning rate is not part of the
    /// state; [`restore`](LrScheduler::restore) also sets it. On error nothing changes.
    fn load_state(&mut self, state: &SchedulerState) -> Result<()>;

    /// Steps the schedule and sets the optimizer's learning rate: call it after
    /// `opt.step()`, as PyTorch's `scheduler.step()`. On error nothing changes.
    ///
    /// The optimizer receives the schedule's rate, except that a negative one becomes 0
    /// (the optimizers reject negative rates; only [`OneCycleLr`] with linear annealing
    /// gives one, at the step after its cycle, a rate no training step uses).
    fn step<B, O>(&mut self, opt: &mut O) -> Result<()>
    where
        Self: Sized,
        B: Backend,
        O: Optimizer<B> + ?Sized,
    {
        let before = self.state();
        let lrs = self.next_group_lrs(&opt.group_lrs())?;
        let rates: Vec<f64> = lrs.into_iter().map(optimizer_rate).collect();
        let momentum_before = opt.momentum();
        let set = |opt: &mut O, m: Option<f64>| -> Result<()> {
            if let Some(m) = m {
                opt.set_momentum(m)?;
            }
            opt.set_group_lrs(&rates)
        };
        if let Err(e) = set(opt, self.get_last_momentum()) {
            self.load_state(&before)?;
            if self.get_last_momentum().is_some() {
                opt.set_momentum(momentum_before)?;
            }
            return Err(e);
        }
        Ok(())
    }

    /// [`load_state`](LrScheduler::load_state), then sets the optimizer's learning rate
    /// to the restored last rate (as [`step`](LrScheduler::step) does), so that training
    /// continues exactly where `state` was taken.
    fn restore<B, O>(&mut self, state: &SchedulerState, opt: &mut O) -> Result<()>
    where
        Self: Sized,
        B: Backend,
        O: Optimizer<B> + ?Sized,
    {
        self.load_state(state)?;
        if let Some(m) = self.get_last_momentum() {
            opt.set_momentum(m)?;
        }
        let rates: Vec<f64> = self
            .get_last_lrs()
            .into_iter()
            .map(optimizer_rate)
            .collect();
        opt.set_group_lrs(&rates)
    }
}

impl<S: LrScheduler + ?Sized> LrScheduler for Box<S> {
    fn next_lr(&mut self, current_lr: f64) -> Result<f64> {
        (**self).next_lr(current_lr)
    }
    fn get_last_lr(&self) -> f64 {
        (**self).get_last_lr()
    }
    fn next_group_lrs(&mut self, current: &[f64]) -> Result<Vec<f64>> {
        (**self).next_group_lrs(current)
    }
    fn get_last_lrs(&self) -> Vec<f64> {
        (**self).get_last_lrs()
    }
    fn get_last_momentum(&self) -> Option<f64> {
        (**self).get_last_momentum()
    }
    fn last_epoch(&self) -> i64 {
        (**self).last_epoch()
    }
    fn base_lr(&self) -> f64 {
        (**self).base_lr()
    }
    fn state(&self) -> SchedulerState {
        (**self).state()
    }
    fn load_state(&mut self, state: &SchedulerState) -> Result<()> {
        (**self).load_state(state)
    }
}

/// Which scheduler a [`SchedulerState`] belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SchedulerKind {
    /// [`StepLr`].
    Step,
    /// [`MultiStepLr`].
    MultiStep,
    /// [`ExponentialLr`].
    Exponential,
    /// [`CosineAnnealingLr`].
    CosineAnnealing,
    /// [`LinearLr`].
    Linear,
    /// [`OneCycleLr`].
    OneCycle,
    /// [`SequentialLr`].
    Sequential,
}

impl SchedulerKind {
    /// The type's name (`"StepLr"`, …).
    pub fn name(self) -> &'static str {
        match self {
            Self::Step => "StepLr",
            Self::MultiStep => "MultiStepLr",
            Self::Exponential => "ExponentialLr",
            Self::CosineAnnealing => "CosineAnnealingLr",
            Self::Linear => "LinearLr",
            Self::OneCycle => "OneCycleLr",
            Self::Sequential => "SequentialLr",
        }
    }

    /// The operator name of constructor errors.
    fn new_op(self) -> &'static str {
        match self {
            Self::Step => "StepLr::new",
            Self::MultiStep => "MultiStepLr::new",
            Self::Exponential => "ExponentialLr::new",
            Self::CosineAnnealing => "CosineAnnealingLr::new",
            Self::Linear => "LinearLr::new",
            Self::OneCycle => "OneCycleLr::new",
            Self::Sequential => "SequentialLr::new",
        }
    }

    /// The operator name of step errors.
    fn step_op(self) -> &'static str {
        match self {
            Self::Step => "StepLr::step",
            Self::MultiStep => "MultiStepLr::step",
            Self::Exponential => "ExponentialLr::step",
            Self::CosineAnnealing => "CosineAnnealingLr::step",
            Self::Linear => "LinearLr::step",
            Self::OneCycle => "OneCycleLr::step",
            Self::Sequential => "SequentialLr::step",
        }
    }

    /// The operator name of state errors.
    fn load_op(self) -> &'static str {
        match self {
            Self::Step => "StepLr::load_state",
            Self::MultiStep => "MultiStepLr::load_state",
            Self::Exponential => "ExponentialLr::load_state",
            Self::CosineAnnealing => "CosineAnnealingLr::load_state",
            Self::Linear => "LinearLr::load_state",
            Self::OneCycle => "OneCycleLr::load_state",
            Self::Sequential => "SequentialLr::load_state",
        }
    }
}

/// The progress of a scheduler (PyTorch's `state_dict()` without the hyper-parameters):
/// plain numbers, for checkpoints.
#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerState {
    /// The scheduler it was taken from.
    pub kind: SchedulerKind,
    /// Steps taken since construction (`last_epoch`); −1 for a scheduler of a
    /// [`SequentialLr`] that has not started yet.
    pub last_epoch: i64,
    /// The initial learning rate (`base_lrs[0]`).
    pub base_lr: f64,
    /// The learning rate of the last step (`get_last_lr()[0]`).
    pub last_lr: f64,
    /// For [`SequentialLr`], the states of its schedulers in order; empty otherwise.
    pub children: Vec<SchedulerState>,
    /// The rates of the parameter groups after the first, in order (empty for an
    /// optimizer with one group); their step count is `last_epoch`.
    pub groups: Vec<GroupLrs>,
}

/// The rates of one parameter group in a [`SchedulerState`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GroupLrs {
    /// The group's initial learning rate (its entry of PyTorch's `base_lrs`).
    pub base_lr: f64,
    /// The group's learning rate at the last step.
    pub last_lr: f64,
}

/// The part of the state every single scheduler has.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Progress {
    base_lr: f64,
    last_epoch: i64,
    last_lr: f64,
}

impl Progress {
    /// Before the constructor's step (PyTorch's `last_epoch = -1`).
    fn fresh(base_lr: f64) -> Self {
        Self {
            base_lr,
            last_epoch: -1,
            last_lr: base_lr,
        }
    }
}

/// The progress of the parameter groups after the first (each group's `base_lr` and
/// `last_lr`; `last_epoch` is the rule's own).
trait Grouped {
    fn groups(&self) -> &[Progress];
    fn groups_mut(&mut self) -> &mut Vec<Progress>;
}

/// One schedule's rule: PyTorch's `get_lr()` and `_get_closed_form_lr()`.
trait Rule: Grouped + core::fmt::Debug {
    fn kind(&self) -> SchedulerKind;
    fn progress(&self) -> &Progress;
    fn progress_mut(&mut self) -> &mut Progress;
    /// The learning rate at step `epoch` (the new `last_epoch`) from the optimizer's rate
    /// `lr`; `initial` marks the constructor's step.
    fn get_lr(&self, epoch: i64, lr: f64, initial: bool) -> Result<f64>;
    /// The closed form at step `epoch`, used when a [`SequentialLr`] restarts the rule
    /// (PyTorch's `_update_lr(0)`).
    fn closed_form(&self, epoch: i64) -> Result<f64>;
    /// Rule-specific checks of a state to be loaded.
    fn check_state(&self, _state: &SchedulerState) -> Result<()> {
        Ok(())
    }
    /// Whether the rule's rates can be negative ([`OneCycleLr`] with linear annealing, past
    /// its cycle); a state with a negative rate is refused for the others.
    fn allows_negative_rates(&self) -> bool {
        false
    }
    /// The initial rate of a parameter group whose rate is `lr` when the schedule starts
    /// (PyTorch's `initial_lr`): `lr`, except for a schedule that sets its own.
    fn group_base(&self, lr: f64) -> f64 {
        lr
    }
    /// The momentum the rule gives step `epoch`, if it sets the momentum.
    fn momentum_at(&self, _epoch: i64) -> Option<f64> {
        None
    }
}

/// Runs `f` on `rule` as if it were parameter group `g` (≥ 1): its progress swapped in.
fn as_group<T>(rule: &mut dyn Rule, g: usize, f: impl FnOnce(&mut dyn Rule) -> T) -> T {
    let mut p = rule.groups()[g - 1];
    p.last_epoch = rule.progress().last_epoch;
    let own = core::mem::replace(rule.progress_mut(), p);
    let out = f(rule);
    let p = core::mem::replace(rule.progress_mut(), own);
    rule.groups_mut()[g - 1] = p;
    out
}

/// One step of every group of `rule` (group 0 is the rule's own progress): commits only
/// when every group's step succeeds.
fn advance_groups(rule: &mut dyn Rule, current: &[f64]) -> Result<Vec<f64>> {
    let kind = rule.kind();
    let n = rule.groups().len() + 1;
    if current.len() != n {
        return Err(Error::invalid(
            kind.step_op(),
            "optimizer",
            format!(
                "has {} parameter groups, the scheduler was built on {n}",
                current.len()
            ),
        ));
    }
    let before = (*rule.progress(), rule.groups().to_vec());
    let mut out = Vec::with_capacity(n);
    let mut run = || -> Result<()> {
        // The other groups first, each from the step count before this step.
        for (g, &lr) in current.iter().enumerate().skip(1) {
            out.push(as_group(rule, g, |r| advance(r, lr, false))?);
        }
        out.insert(0, advance(rule, current[0], false)?);
        Ok(())
    };
    if let Err(e) = run() {
        *rule.progress_mut() = before.0;
        *rule.groups_mut() = before.1;
        return Err(e);
    }
    Ok(out)
}

/// Checks that a learning rate is finite and `>= 0`.
fn check_rate(op: &'static str, arg: &'static str, lr: f64) -> Result<f64> {
    if lr.is_finite() && lr >= 0.0 {
        Ok(lr)
    } else {
        Err(Error::invalid(
            op,
            arg,
            format!("must be finite and >= 0, got {lr}"),
        ))
    }
}

/// Checks that a learning rate is finite (a schedule value may be negative, see
/// [`OneCycleLr`]).
fn check_finite(op: &'static str, arg: &'static str, lr: f64) -> Result<f64> {
    if lr.is_finite() {
        Ok(lr)
    } else {
        Err(Error::invalid(op, arg, format!("must be finite, got {lr}")))
    }
}

/// Checks a state's step count: `min_epoch ..= MAX_STEPS` (a scheduler cannot have taken
/// more steps than a count it accepts, nor fewer than none).
fn check_epoch(op: &'static str, last_epoch: i64, min_epoch: i64) -> Result<()> {
    if (min_epoch..=MAX_STEPS as i64).contains(&last_epoch) {
        Ok(())
    } else {
        Err(Error::invalid(
            op,
            "state.last_epoch",
            format!("must be between {min_epoch} and 2^53, got {last_epoch}"),
        ))
    }
}

/// Checks a count (period, number of steps) `1 ..= MAX_STEPS`.
fn check_count(op: &'static str, arg: &'static str, n: u64) -> Result<()> {
    if (1..=MAX_STEPS).contains(&n) {
        Ok(())
    } else {
        Err(Error::invalid(
            op,
            arg,
            format!("must be between 1 and 2^53, got {n}"),
        ))
    }
}

/// Checks a multiplicative factor `gamma`: finite and `> 0`.
fn check_gamma(op: &'static str, gamma: f64) -> Result<()> {
    if gamma.is_finite() && gamma > 0.0 {
        Ok(())
    } else {
        Err(Error::invalid(
            op,
            "gamma",
            format!("must be finite and > 0, got {gamma}"),
        ))
    }
}

/// The optimizer's learning rate, checked, as the base of a new schedule.
fn optimizer_lr<B: Backend, O: Optimizer<B> + ?Sized>(kind: SchedulerKind, opt: &O) -> Result<f64> {
    check_rate(kind.new_op(), "optimizer lr", opt.lr())
}

/// Takes the next step of `rule` (the constructor's step when `initial`): PyTorch's
/// `last_epoch += 1; get_lr()`. Commits only on success.
fn advance(rule: &mut dyn Rule, current_lr: f64, initial: bool) -> Result<f64> {
    let kind = rule.kind();
    check_rate(kind.step_op(), "current_lr", current_lr)?;
    let epoch = rule.progress().last_epoch.checked_add(1).ok_or_else(|| {
        Error::invalid(kind.step_op(), "last_epoch", "the step count overflows i64")
    })?;
    let lr = rule.get_lr(epoch, current_lr, initial)?;
    commit(rule, epoch, lr)
}

/// Restarts `rule` at step 0 with its closed form (PyTorch's `_update_lr(0)`).
fn restart(rule: &mut dyn Rule) -> Result<f64> {
    let lr = rule.closed_form(0)?;
    commit(rule, 0, lr)
}

fn commit(rule: &mut dyn Rule, epoch: i64, lr: f64) -> Result<f64> {
    let kind = rule.kind();
    if !lr.is_finite() {
        return Err(Error::invalid(
            kind.step_op(),
            "lr",
            format!("step {epoch} gives the learning rate {lr}, which is not finite"),
        ));
    }
    let p = rule.progress_mut();
    p.last_epoch = epoch;
    p.last_lr = lr;
    Ok(lr)
}

/// The rate given to the optimizer for a schedule value: negative values (only
/// [`OneCycleLr`]'s extrapolation at the step after its cycle) become 0.
pub(crate) fn optimizer_rate(lr: f64) -> f64 {
    if lr < 0.0 {
        0.0
    } else {
        lr
    }
}

/// Performs the constructor's step of `rule` for every parameter group of the optimizer
/// (each from its own rate) and sets their learning rates.
fn attach<R: Rule, B: Backend, O: Optimizer<B> + ?Sized>(mut rule: R, opt: &mut O) -> Result<R> {
    let current = opt.group_lrs();
    let mut rates = Vec::with_capacity(current.len());
    for &lr in current.iter().skip(1) {
        let kind = rule.kind();
        let base = rule.group_base(check_rate(kind.new_op(), "optimizer lr", lr)?);
        rule.groups_mut().push(Progress::fresh(base));
        let g = rule.groups().len();
        rates.push(as_group(&mut rule, g, |r| advance(r, lr, true))?);
        // The group's step count follows the rule's own.
        rule.groups_mut()[g - 1].last_epoch = -1;
    }
    let first = advance(&mut rule, current.first().copied().unwrap_or(0.0), true)?;
    rates.insert(0, first);
    let rates: Vec<f64> = rates.into_iter().map(optimizer_rate).collect();
    if let Some(m) = rule.momentum_at(rule.progress().last_epoch) {
        opt.set_momentum(m)?;
    }
    opt.set_group_lrs(&rates)?;
    Ok(rule)
}

fn rule_state(rule: &dyn Rule) -> SchedulerState {
    let p = rule.progress();
    SchedulerState {
        kind: rule.kind(),
        last_epoch: p.last_epoch,
        base_lr: p.base_lr,
        last_lr: p.last_lr,
        children: Vec::new(),
        groups: rule
            .groups()
            .iter()
            .map(|g| GroupLrs {
                base_lr: g.base_lr,
                last_lr: g.last_lr,
            })
            .collect(),
    }
}

/// Checks the groups of `state` for `rule` and returns their progress.
fn checked_groups(
    rule: &dyn Rule,
    state: &SchedulerState,
    op: &'static str,
) -> Result<Vec<Progress>> {
    if state.groups.len() != rule.groups().len() {
        return Err(Error::invalid(
            op,
            "state",
            format!(
                "the state holds {} parameter groups, this scheduler drives {}",
                state.groups.len() + 1,
                rule.groups().len() + 1
            ),
        ));
    }
    state
        .groups
        .iter()
        .map(|g| {
            check_rate(op, "state.groups.base_lr", g.base_lr)?;
            if rule.allows_negative_rates() {
                check_finite(op, "state.groups.last_lr", g.last_lr)?;
            } else {
                check_rate(op, "state.groups.last_lr", g.last_lr)?;
            }
            Ok(Progress {
                base_lr: g.base_lr,
                last_epoch: state.last_epoch,
                last_lr: g.last_lr,
            })
        })
        .collect()
}

/// Checks `state` for `rule` (`last_epoch >= min_epoch`) and returns the progress to set.
fn checked_progress(
    rule: &dyn Rule,
    state: &SchedulerState,
    op: &'static str,
    min_epoch: i64,
) -> Result<Progress> {
    let kind = rule.kind();
    if state.kind != kind {
        return Err(Error::invalid(
            op,
            "state",
            format!(
                "the state of a {} cannot be loaded into a {}",
                state.kind.name(),
                kind.name()
            ),
        ));
    }
    if !state.children.is_empty() {
        return Err(Error::invalid(
            op,
            "state",
            format!(
                "a {} has no inner schedulers, the state lists {}",
                kind.name(),
                state.children.len()
            ),
        ));
    }
    check_epoch(op, state.last_epoch, min_epoch)?;
    check_rate(op, "state.base_lr", state.base_lr)?;
    if rule.allows_negative_rates() {
        check_finite(op, "state.last_lr", state.last_lr)?;
    } else {
        check_rate(op, "state.last_lr", state.last_lr)?;
    }
    rule.check_state(state)?;
    Ok(Progress {
        base_lr: state.base_lr,
        last_epoch: state.last_epoch,
        last_lr: state.last_lr,
    })
}

/// Implements [`LrScheduler`] for a single scheduler through its [`Rule`].
macro_rules! rule_scheduler {
    ($t:ty) => {
        impl $crate::optim::scheduler::LrScheduler for $t {
            fn next_lr(&mut self, current_lr: f64) -> $crate::error::Result<f64> {
                if !self.groups.is_empty() {
                    return Err($crate::error::Error::invalid(
                        $crate::optim::scheduler::Rule::kind(self).step_op(),
                        "current_lr",
                        "the scheduler drives several parameter groups: step it with `step` or `next_group_lrs`",
                    ));
                }
                $crate::optim::scheduler::advance(self, current_lr, false)
            }
            fn get_last_lr(&self) -> f64 {
                self.progress.last_lr
            }
            fn next_group_lrs(&mut self, current: &[f64]) -> $crate::error::Result<Vec<f64>> {
                $crate::optim::scheduler::advance_groups(self, current)
            }
            fn get_last_lrs(&self) -> Vec<f64> {
                core::iter::once(self.progress.last_lr)
                    .chain(self.groups.iter().map(|g| g.last_lr))
                    .collect()
            }
            fn get_last_momentum(&self) -> Option<f64> {
                $crate::optim::scheduler::Rule::momentum_at(self, self.progress.last_epoch)
            }
            fn last_epoch(&self) -> i64 {
                self.progress.last_epoch
            }
            fn base_lr(&self) -> f64 {
                self.progress.base_lr
            }
            fn state(&self) -> $crate::optim::scheduler::SchedulerState {
                $crate::optim::scheduler::rule_state(self)
            }
            fn load_state(
                &mut self,
                state: &$crate::optim::scheduler::SchedulerState,
            ) -> $crate::error::Result<()> {
                let op = $crate::optim::scheduler::Rule::kind(self).load_op();
                let progress = $crate::optim::scheduler::checked_progress(self, state, op, 0)?;
                let groups = $crate::optim::scheduler::checked_groups(self, state, op)?;
                self.progress = progress;
                self.groups = groups;
                Ok(())
            }
        }

        impl $crate::optim::scheduler::Grouped for $t {
            fn groups(&self) -> &[$crate::optim::scheduler::Progress] {
                &self.groups
            }
            fn groups_mut(&mut self) -> &mut Vec<$crate::optim::scheduler::Progress> {
                &mut self.groups
            }
        }
    };
}
use rule_scheduler;
