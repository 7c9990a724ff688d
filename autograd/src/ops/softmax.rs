//! Softmax and log-softmax along a dimension, on the backend's row kernels.

use super::new_tensor;
use crate::engine::{record_with, Saved};
use crate::error::Result;
use crate::tensor::Tensor;
use crate::trace::{OpInfo, Value};
use exactgrad_core::shape::normalize_dim;
use exactgrad_core::Backend;

/// Softmax (or log-softmax) over the last dimension, recorded.
fn softmax_last<B: Backend>(x: &Tensor<B>, log: bool) -> Result<Tensor<B>> {
    let op = if log { "log_softmax" } else { "softmax" };
    let cols = x.dims()[x.rank() - 1];
    let rows = x.numel().checked_div(cols).unwrap_or(0);
    let b = x.backend();
    let y = new_tensor(b, op, x.shape().clone(), |out| {
        Ok(x.with_contiguous(|xs| b.softmax(xs, rows, cols, log, out))??)
    })?;
    let y_keep = y.clone();
    let info = crate::trace::info(|| OpInfo::new().attr("dim", Value::Int(-1)));
    Ok(record_with(op, y, &[x], info, move || {
        let saved = Saved::new(op, &y_keep);
        move |g: &Tensor<B>| {
            let y = saved.get()?;
            let b = g.backend();
            let gx = new_tensor(b, op, g.shape().clone(), |out| {
                y.with_contiguous(|ys| {
                    g.with_contiguous(|gs| b.softmax_backward(ys, gs, rows, cols, log, out))
                })???;
                Ok(())
            })?;
            Ok(vec![Some(gx)])
        }
    }))
}

fn softmax_dim<B: Backend>(x: &Tensor<B>, dim: isize, log: bool) -> Result<Tensor<B>> {
    let op = if log { "log_softmax" } else { "softmax" };
    if x.rank() == 0 {
        return softmax_dim(&x.reshape_to(&[1])?, 0, log)?.reshape_to(&[]);
    }
    let d = normalize_dim(op, dim, x.rank())?;
    let last = x.rank() - 1;
    if d == last {
        return softmax_last(x, log);
    }
    let moved = x.transpose(d as isize, last as isize)?;
    softmax_last(&moved, log)?.transpose(d as isize, last as isize)
}

impl<B: Backend> Tensor<B> {
    /// Softmax along `dim`: `exp(x − max) / Σ exp(x − max)`, the sum in f64.
    pub fn softmax(&self, dim: isize) -> Result<Tensor<B>> {
        softmax_dim(self, dim, false)
    }

    /// Log-softmax along `dim`: `(x − max) − log Σ exp(x − max)`.
    pub fn log_softmax(&self, dim: isize) -> Result<Tensor<B>> {
        softmax_dim(self, dim, true)
    }
}
