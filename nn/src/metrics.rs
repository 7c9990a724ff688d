//! Evaluation helpers.

use crate::error::{Error, Result};
use exactgrad_autograd::{Indices, Tensor};
use exactgrad_core::Backend;

/// The index of the largest value in each row of a `[rows, cols]` tensor (PyTorch's
/// `argmax(dim=1)`: the first index among equal maxima; a NaN counts as the maximum).
pub fn argmax_rows<B: Backend>(x: &Tensor<B>) -> Result<Vec<usize>> {
    if x.rank() != 2 || x.dims()[1] == 0 {
        return Err(Error::invalid(
            "argmax_rows",
            "x",
            format!(
                "needs a [rows, cols] tensor with cols > 0, got shape {:?}",
                x.dims()
            ),
        ));
    }
    let cols = x.dims()[1];
    let v = x.to_vec()?;
    Ok(v.chunks(cols)
        .map(|row| {
            let mut best = 0;
            for (j, &val) in row.iter().enumerate().skip(1) {
                let cur = row[best];
                if !cur.is_nan() && (val.is_nan() || val > cur) {
                    best = j;
                }
            }
            best
        })
        .collect())
}

/// The fraction of rows of `logits` (`[rows, classes]`) whose arg-max equals the target.
pub fn accuracy<B: Backend, I: Indices + ?Sized>(logits: &Tensor<B>, targets: &I) -> Result<f64> {
    let (targets, _) = targets.read_indices("accuracy")?;
    let pred = argmax_rows(logits)?;
    if pred.len() != targets.len() {
        return Err(Error::invalid(
            "accuracy",
            "targets",
            format!("{} targets for {} rows", targets.len(), pred.len()),
        ));
    }
    if pred.is_empty() {
        return Ok(0.0);
    }
    let correct = pred
        .iter()
        .zip(&targets)
        .filter(|(&p, &t)| p as i64 == t)
        .count();
    Ok(correct as f64 / pred.len() as f64)
}
