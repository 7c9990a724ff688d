//! Optimizers with PyTorch's update rules, and gradient clipping.
//!
//! Every optimizer step runs under [`no_grad`](exactgrad_autograd::no_grad) and computes
//! its updates with tensor operations of the parameters' backend, so in exact mode the
//! new values have the same bits on every backend, path and thread count. Parameters are
//! updated in place (`copy_`), so the modules holding them see the new values.
//!
//! Hyper-parameters are f64, as PyTorch's Python floats; each enters the f32 arithmetic
//! where PyTorch's single-tensor (`foreach=False`, the CPU default) implementation
//! converts it: a product `a · s` with a scalar `s` multiplies by `s as f32`, and scalar
//! bookkeeping (bias corrections, step sizes) stays in f64. PyTorch's CPU kernels fuse
//! some multiply-adds (`add(…, alpha)`, `lerp`); exact mode rounds each operation, so
//! results agree with PyTorch to within an ulp or so per step, not bit for bit.
//!
//! Parameters whose gradient is absent are skipped, as in PyTorch (their state, step
//! count included, does not advance).
//!
//! **Parameter groups** (PyTorch's `param_groups`): an optimizer built with `new` has one
//! group; `with_groups` and [`Optimizer::add_param_group`] give each group its own
//! learning rate (`lr`), `weight_decay` and `momentum` (SGD) or `betas` (Adam, AdamW),
//! the optimizer's configuration supplying what a group does not set. The standard
//! recipe that decays the weights of a transformer but not its biases and norms:
//!
//! ```
//! use exactgrad_backends::ScalarRefBackend;
//! use exactgrad_core::Philox;
//! use exactgrad_nn::optim::{AdamW, AdamWConfig, Optimizer, ParamGroup};
//! use exactgrad_nn::{LayerNorm, Linear, ModuleExt, Sequential};
//!
//! # fn main() -> exactgrad_nn::Result<()> {
//! let b = ScalarRefBackend;
//! let mut rng = Philox::new(0);
//! let model = Sequential::new()
//!     .push(Linear::new(&b, 8, 8, &mut rng)?)
//!     .push(LayerNorm::new(&b, &[8])?);
//! // Matrices decay; vectors (biases, norm weights) do not.
//! let (decay, no_decay): (Vec<_>, Vec<_>) =
//!     model.parameters().into_iter().partition(|p| p.dims().len() >= 2);
//! let opt = AdamW::with_groups(
//!     vec![
//!         ParamGroup::new(decay).weight_decay(0.1),
//!         ParamGroup::new(no_decay).weight_decay(0.0),
//!     ],
//!     AdamWConfig::new(3e-4),
//! )?;
//! assert_eq!(opt.param_groups()[0].config.weight_decay, 0.1);
//! assert_eq!(opt.param_groups()[1].config.weight_decay, 0.0);
//! assert_eq!(opt.group_lrs(), [3e-4, 3e-4]);
//! # Ok(())
//! # }
//! ```

mod adam;
mod clip;
pub mod scheduler;
mod sgd;
mod state;

pub use adam::{Adam, AdamConfig, AdamW, AdamWConfig};
pub use clip::{clip_grad_norm, clip_grad_value, grad_norm};
pub use scheduler::{
    AnnealStrategy, CosineAnnealingLr, CosineAnnealingLrConfig, ExponentialLr, ExponentialLrConfig,
    GroupLrs, LinearLr, LinearLrConfig, LrScheduler, MultiStepLr, MultiStepLrConfig, OneCycleLr,
    OneCycleLrConfig, SchedulerConfig, SchedulerKind, SchedulerState, SequentialLr, StepLr,
    StepLrConfig,
};
pub use sgd::{Sgd, SgdConfig};

/// An optimizer's parameters in one list and its groups' ranges of it with their
/// configurations.
type Groups<B, C> = (Vec<Tensor<B>>, Vec<GroupConfig<C>>);

/// The groups `groups` as the optimizer stores them: the parameters in one list, each
/// group's range of it and its configuration (`config` completed by `apply`, which also
/// checks the group's own hyper-parameters).
fn build_groups<B: Backend, C: Clone>(
    op: &'static str,
    groups: Vec<ParamGroup<B>>,
    defaults: &C,
    apply: impl Fn(&ParamGroup<B>, C) -> Result<C>,
) -> Result<Groups<B, C>> {
    if groups.is_empty() {
        return Err(Error::invalid(
            op,
            "groups",
            "an optimizer needs at least one parameter group",
        ));
    }
    let mut params: Vec<Tensor<B>> = Vec::new();
    let mut configs = Vec::with_capacity(groups.len());
    for group in groups {
        check_new_group(op, &params, &group.params)?;
        let config = apply(&group, defaults.clone())?;
        let start = params.len();
        params.extend(group.params);
        configs.push(GroupConfig {
            params: start..params.len(),
            config,
        });
    }
    Ok((params, configs))
}

use crate::checkpoint::TensorFile;
use crate::error::{Error, Result};
use exactgrad_autograd::Tensor;
use exactgrad_core::Backend;
use std::ops::Range;

/// A group of parameters to give an optimizer (PyTorch's `{"params": …, "lr": …}`): its
/// parameters and the hyper-parameters it sets; `None` takes the optimizer's
/// configuration. `momentum` is SGD's, `betas` Adam's and AdamW's; an optimizer refuses a
/// group that sets the other's.
#[derive(Clone, Debug)]
pub struct ParamGroup<B: Backend> {
    /// The group's parameters (leaves that require grad, in no other group).
    pub params: Vec<Tensor<B>>,
    /// Learning rate.
    pub lr: Option<f64>,
    /// Weight decay (an L2 term, or decoupled for AdamW).
    pub weight_decay: Option<f64>,
    /// SGD's momentum factor.
    pub momentum: Option<f64>,
    /// Adam's and AdamW's moment decay rates.
    pub betas: Option<(f64, f64)>,
}

impl<B: Backend> ParamGroup<B> {
    /// A group of `params` with the optimizer's hyper-parameters.
    pub fn new(params: Vec<Tensor<B>>) -> Self {
        Self {
            params,
            lr: None,
            weight_decay: None,
            momentum: None,
            betas: None,
        }
    }

    /// This group with learning rate `lr`.
    pub fn lr(mut self, lr: f64) -> Self {
        self.lr = Some(lr);
        self
    }

    /// This group with weight decay `weight_decay`.
    pub fn weight_decay(mut self, weight_decay: f64) -> Self {
        self.weight_decay = Some(weight_decay);
        self
    }

    /// This group with SGD momentum `momentum`.
    pub fn momentum(mut self, momentum: f64) -> Self {
        self.momentum = Some(momentum);
        self
    }

    /// This group with Adam's decay rates `betas`.
    pub fn betas(mut self, betas: (f64, f64)) -> Self {
        self.betas = Some(betas);
        self
    }
}

/// One parameter group inside an optimizer (an entry of PyTorch's
/// `optimizer.param_groups`): which parameters (indices into
/// [`Optimizer::parameters`]) step with which hyper-parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupConfig<C> {
    /// The group's parameters, as indices into [`Optimizer::parameters`].
    pub params: Range<usize>,
    /// The hyper-parameters the group steps with.
    pub config: C,
}

/// An optimizer over a list of parameters in one or more groups.
pub trait Optimizer<B: Backend> {
    /// Updates every parameter that has a gradient, in place, each with its group's
    /// hyper-parameters.
    fn step(&mut self) -> Result<()>;

    /// The parameters of every group, group after group, each in the order given.
    fn parameters(&self) -> &[Tensor<B>];

    /// The learning rate of the first group (of every group, for an optimizer built with
    /// `new`).
    fn lr(&self) -> f64;

    /// Sets the learning rate of every group.
    fn set_lr(&mut self, lr: f64) -> Result<()>;

    /// The number of parameter groups.
    fn num_param_groups(&self) -> usize;

    /// The learning rate of each group, in order (PyTorch's
    /// `[g["lr"] for g in optimizer.param_groups]`).
    fn group_lrs(&self) -> Vec<f64>;

    /// Sets the learning rate of each group (one rate per group, in order). Fails,
    /// changing nothing, on another count or a rate that is negative or not finite.
    fn set_group_lrs(&mut self, lrs: &[f64]) -> Result<()>;

    /// The momentum of the first group: SGD's `momentum`, Adam's and AdamW's β1.
    fn momentum(&self) -> f64;

    /// Sets every group's momentum (SGD's `momentum`, Adam's and AdamW's β1), as a
    /// schedule that cycles the momentum does. Fails, changing nothing, on a value a
    /// group's configuration refuses.
    fn set_momentum(&mut self, momentum: f64) -> Result<()>;

    /// Adds a parameter group (PyTorch's `add_param_group`); what it does not set comes
    /// from the configuration the optimizer was built with. Fails, changing nothing, when
    /// a parameter is already in the optimizer or is not a leaf that requires grad, or a
    /// hyper-parameter is invalid or not this optimizer's.
    fn add_param_group(&mut self, group: ParamGroup<B>) -> Result<()>;

    /// Frees every parameter's gradient, as PyTorch's `optimizer.zero_grad()` does by
    /// default (`set_to_none=True`); a parameter without gradient is skipped by the next
    /// step. The same as [`Optimizer::clear_grad`].
    fn zero_grad(&self) {
        self.clear_grad();
    }

    /// Sets every parameter's gradient to zeros in place (PyTorch's
    /// `zero_grad(set_to_none=False)`); a zero gradient still takes part in the step.
    /// Fails when a new gradient buffer cannot be allocated.
    fn fill_grad_zero(&self) -> Result<()> {
        for p in self.parameters() {
            p.fill_grad_zero()?;
        }
        Ok(())
    }

    /// Frees every parameter's gradient; the same as [`Optimizer::zero_grad`].
    fn clear_grad(&self) {
        for p in self.parameters() {
            p.clear_grad();
        }
    }

    /// The optimizer's state for a checkpoint (PyTorch's `optimizer.state_dict()`): the
    /// hyper-parameters of every group under `param_groups.{g}.` and, per parameter
    /// index `i`, the buffers under `state.{i}.` (SGD's
    /// `momentum_buffer`; Adam's `step`, `exp_avg`, `exp_avg_sq` and, with AMSGrad,
    /// `max_exp_avg_sq`), copied to the host bit for bit (`docs/checkpoints.md`).
    fn state_dict(&self) -> Result<TensorFile>;

    /// Restores a state taken by [`state_dict`](Optimizer::state_dict) from an optimizer
    /// of the same type over parameters of the same shapes and grouping; every group's
    /// hyper-parameters become the saved ones. Fails, changing nothing, when the state is
    /// of another optimizer type, another parameter count, grouping or shape, or lacks an
    /// entry; the error names it.
    fn load_state_dict(&mut self, state: &TensorFile) -> Result<()>;
}

/// Checks that every parameter is a leaf that requires grad.
fn check_params<B: Backend>(op: &'static str, params: &[Tensor<B>]) -> Result<()> {
    for (i, p) in params.iter().enumerate() {
        if !p.is_leaf() || !p.is_requires_grad() {
            return Err(Error::invalid(
                op,
                "params",
                format!(
                    "parameter {i} (shape {:?}) is not a leaf that requires grad",
                    p.dims()
                ),
            ));
        }
    }
    Ok(())
}

/// Checks a new group's parameters: leaves that require grad, none already among
/// `existing` nor twice in the group (PyTorch refuses a parameter in two groups).
fn check_new_group<B: Backend>(
    op: &'static str,
    existing: &[Tensor<B>],
    params: &[Tensor<B>],
) -> Result<()> {
    check_params(op, params)?;
    for (i, p) in params.iter().enumerate() {
        let twice = existing
            .iter()
            .chain(&params[..i])
            .any(|q| q.shares_storage(p));
        if twice {
            return Err(Error::invalid(
                op,
                "params",
                format!(
                    "parameter {i} of the group (shape {:?}) is already in a parameter group of this optimizer",
                    p.dims()
                ),
            ));
        }
    }
    Ok(())
}

/// Applies `change` to every group's configuration when `check` accepts each changed
/// configuration; otherwise changes nothing (`set_momentum` of the optimizers).
fn change_groups<C: Copy>(
    groups: &mut [GroupConfig<C>],
    change: impl Fn(&mut C),
    check: impl Fn(&C) -> Result<()>,
) -> Result<()> {
    for g in groups.iter() {
        let mut c = g.config;
        change(&mut c);
        check(&c)?;
    }
    groups.iter_mut().for_each(|g| change(&mut g.config));
    Ok(())
}

/// A group configuration's learning rate, which the optimizers read and set alike.
trait GroupLr {
    /// The rate.
    fn lr(&self) -> f64;
    /// The rate, to set.
    fn lr_mut(&mut self) -> &mut f64;
}

/// Every group's learning rate, group after group (`Optimizer::group_lrs`).
fn lrs_of<C: GroupLr>(groups: &[GroupConfig<C>]) -> Vec<f64> {
    groups.iter().map(|g| g.config.lr()).collect()
}

/// Sets every group's learning rate to `lr` after checking it (`Optimizer::set_lr`).
fn set_all_lrs<C: GroupLr>(op: &'static str, groups: &mut [GroupConfig<C>], lr: f64) -> Result<()> {
    check_non_negative(op, "lr", lr)?;
    groups.iter_mut().for_each(|g| *g.config.lr_mut() = lr);
    Ok(())
}

/// Sets group `i`'s learning rate to `lrs[i]` after checking all of them
/// (`Optimizer::set_group_lrs`); changes nothing when any is refused.
fn set_lrs_of<C: GroupLr>(
    op: &'static str,
    groups: &mut [GroupConfig<C>],
    lrs: &[f64],
) -> Result<()> {
    check_group_lrs(op, groups.len(), lrs)?;
    for (g, &lr) in groups.iter_mut().zip(lrs) {
        *g.config.lr_mut() = lr;
    }
    Ok(())
}

/// Checks `lrs` against the groups (one finite, non-negative rate each).
fn check_group_lrs(op: &'static str, groups: usize, lrs: &[f64]) -> Result<()> {
    if lrs.len() != groups {
        return Err(Error::invalid(
            op,
            "lrs",
            format!(
                "gives {} learning rates, the optimizer has {groups} parameter groups",
                lrs.len()
            ),
        ));
    }
    lrs.iter()
        .try_for_each(|&lr| check_non_negative(op, "lr", lr))
}

/// Refuses a hyper-parameter of another optimizer in a group (`arg` set, `owner` the
/// optimizers that have it).
fn refuse_foreign(op: &'static str, arg: &'static str, set: bool, owner: &str) -> Result<()> {
    if set {
        Err(Error::invalid(
            op,
            arg,
            format!("is a hyper-parameter of {owner}, not of this optimizer"),
        ))
    } else {
        Ok(())
    }
}

/// Checks `0 <= value` (which rejects NaN), PyTorch's test for lr, eps, weight decay, momentum.
fn check_non_negative(op: &'static str, arg: &'static str, value: f64) -> Result<()> {
    if value >= 0.0 && value.is_finite() {
        Ok(())
    } else {
        Err(Error::invalid(
            op,
            arg,
            format!("must be finite and >= 0, got {value}"),
        ))
    }
}

pub(crate) use exactgrad_core::kernels::powi_f64;

#[cfg(test)]
mod tests {
    use super::powi_f64;

    #[test]
    fn powi_matches_powf_closely() {
        for &(b, n) in &[
            (0.9f64, 1u64),
            (0.9, 2),
            (0.999, 10),
            (0.999, 1000),
            (0.5, 60),
            (1.0, 123),
            (0.0, 0),
        ] {
            let want = b.powf(n as f64);
            assert!(
                (powi_f64(b, n) - want).abs() <= 1e-14 * want.abs().max(1e-300),
                "{b}^{n}"
            );
        }
    }
}
