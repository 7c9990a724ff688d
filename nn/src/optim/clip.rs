//! Gradient clipping.

use crate::error::{Error, Result};
use exactgrad_autograd::{no_grad, Tensor};
use exactgrad_core::Backend;

/// The Euclidean norm of all gradients taken together: the squares of every element,
/// parameter after parameter and row-major within each, summed in f64 in that order
/// (each square is exact in f64), then the f64 square root. Parameters without gradient
/// are skipped.
///
/// Fails only when a gradient's storage was released.
pub fn grad_norm<B: Backend>(params: &[Tensor<B>]) -> Result<f64> {
    let mut sum = 0.0f64;
    for g in params.iter().filter_map(Tensor::grad) {
        for v in g.to_vec()? {
            let v = f64::from(v);
            sum += v * v;
        }
    }
    Ok(sum.sqrt())
}

/// Scales all gradients so that their joint norm is at most `max_norm` (PyTorch's
/// `clip_grad_norm_` with `norm_type=2`) and returns the norm before clipping.
///
/// The norm is [`grad_norm`]; as in PyTorch, every gradient is then multiplied in place
/// by `min(max_norm / (norm + 1e-6), 1)`, computed in f32 from the norm rounded to f32.
/// A non-finite norm propagates into the gradients, as with PyTorch's default
/// `error_if_nonfinite=False`.
pub fn clip_grad_norm<B: Backend>(params: &[Tensor<B>], max_norm: f64) -> Result<f64> {
    if max_norm.is_nan() || max_norm < 0.0 {
        return Err(Error::invalid(
            "clip_grad_norm",
            "max_norm",
            format!("must be >= 0, got {max_norm}"),
        ));
    }
    let total = grad_norm(params)?;
    let coef = max_norm as f32 / (total as f32 + 1e-6);
    let coef = if coef > 1.0 { 1.0 } else { coef };
    let _guard = no_grad();
    for g in params.iter().filter_map(Tensor::grad) {
        g.mul_scalar_(coef)?;
    }
    Ok(total)
}

/// Clamps every gradient element into `[-clip_value, clip_value]` in place (PyTorch's
/// `clip_grad_value_`).
pub fn clip_grad_value<B: Backend>(params: &[Tensor<B>], clip_value: f64) -> Result<()> {
    if clip_value.is_nan() || clip_value < 0.0 {
        return Err(Error::invalid(
            "clip_grad_value",
            "clip_value",
            format!("must be >= 0, got {clip_value}"),
        ));
    }
    let c = clip_value as f32;
    let _guard = no_grad();
    for g in params.iter().filter_map(Tensor::grad) {
        let clamped = g.clamp(Some(-c), Some(c))?;
        g.copy_(&clamped)?;
    }
    Ok(())
}
