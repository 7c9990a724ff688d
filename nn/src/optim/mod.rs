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
//! count included, does not advance). There is a single parameter group per optimizer.

mod adam;
mod clip;
pub mod scheduler;
mod sgd;
mod state;

pub use adam::{Adam, AdamConfig, AdamW, AdamWConfig};
pub use clip::{clip_grad_norm, clip_grad_value, grad_norm};
pub use scheduler::{
    AnnealStrategy, CosineAnnealingLr, CosineAnnealingLrConfig, ExponentialLr, ExponentialLrConfig,
    LinearLr, LinearLrConfig, LrScheduler, MultiStepLr, MultiStepLrConfig, OneCycleLr,
    OneCycleLrConfig, SchedulerConfig, SchedulerKind, SchedulerState, SequentialLr, StepLr,
    StepLrConfig,
};
pub use sgd::{Sgd, SgdConfig};

use crate::checkpoint::TensorFile;
use crate::error::{Error, Result};
use exactgrad_autograd::Tensor;
use exactgrad_core::Backend;

/// An optimizer over a fixed list of parameters.
pub trait Optimizer<B: Backend> {
    /// Updates every parameter that has a gradient, in place.
    fn step(&mut self) -> Result<()>;

    /// The parameters, in the order given at construction.
    fn parameters(&self) -> &[Tensor<B>];

    /// The current learning rate.
    fn lr(&self) -> f64;

    /// Sets the learning rate used by the next steps (for schedules).
    fn set_lr(&mut self, lr: f64) -> Result<()>;

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
    /// learning rate and, per parameter index `i`, the buffers under `state.{i}.` (SGD's
    /// `momentum_buffer`; Adam's `step`, `exp_avg`, `exp_avg_sq` and, with AMSGrad,
    /// `max_exp_avg_sq`), copied to the host bit for bit (`docs/checkpoints.md`).
    fn state_dict(&self) -> Result<TensorFile>;

    /// Restores a state taken by [`state_dict`](Optimizer::state_dict) from an optimizer
    /// of the same type over parameters of the same shapes. The other hyper-parameters
    /// are the ones this optimizer was built with. Fails, changing nothing, when the
    /// state is of another optimizer type, another parameter count or shape, or lacks an
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
