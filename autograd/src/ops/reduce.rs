//! Reductions: sum and mean over all elements or over dimensions.

use super::sum_unrecorded;
use crate::engine::record_with;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::trace::{OpInfo, Value};
use exactgrad_core::shape::normalize_dim;
use exactgrad_core::Backend;

/// Resolves a list of dimensions to per-dimension reduce flags (empty list: all dims).
fn reduce_flags(op: &'static str, dims: &[isize], rank: usize) -> Result<Vec<bool>> {
    let mut flags = vec![dims.is_empty(); rank];
    for &d in dims {
        let d = normalize_dim(op, d, rank)?;
        if flags[d] {
            return Err(Error::invalid(
                op,
                "dims",
                format!("dimension {d} appears more than once in {dims:?}"),
            ));
        }
        flags[d] = true;
    }
    Ok(flags)
}

fn sum_impl<B: Backend>(
    x: &Tensor<B>,
    op: &'static str,
    dims: &[isize],
    keepdim: bool,
    mean: bool,
) -> Result<Tensor<B>> {
    let flags = reduce_flags(op, dims, x.rank())?;
    let reduced: Vec<usize> = x
        .dims()
        .iter()
        .zip(&flags)
        .filter(|(_, &r)| r)
        .map(|(&d, _)| d)
        .collect();
    // The reduced elements are a subset of the tensor's, whose count fits (or one of
    // them is 0).
    let count = exactgrad_core::Shape::from(reduced).numel();
    let summed = sum_unrecorded(x, &flags)?;
    let kept_shape: Vec<usize> = x
        .dims()
        .iter()
        .zip(&flags)
        .map(|(&d, &r)| if r { 1 } else { d })
        .collect();
    // `summed` is unrecorded, so neither the division nor the reshape records (and with
    // grad mode left on, an open activation scope remembers their results).
    let out = {
        // The division and reshape are part of this one operation's record.
        let _quiet = crate::trace::active().then(crate::trace::suppress);
        let s = if mean {
            summed.div_scalar(count as f32)?
        } else {
            summed
        };
        if keepdim {
            s.reshape_to(&kept_shape)?
        } else {
            s
        }
    };
    let in_shape = x.dims().to_vec();
    let info = crate::trace::info(|| {
        let dims: Vec<i64> = (0..flags.len() as i64)
            .filter(|&d| flags[d as usize])
            .collect();
        OpInfo::new()
            .attr("dims", Value::Ints(dims))
            .attr("keepdim", Value::Bool(keepdim))
    });
    Ok(record_with(op, out, &[x], info, move || {
        move |g: &Tensor<B>| {
            let g = g.reshape_to(&kept_shape)?;
            let g = if mean { g.div_scalar(count as f32)? } else { g };
            Ok(vec![Some(g.expand(&in_shape)?)])
        }
    }))
}

impl<B: Backend> Tensor<B> {
    /// Sum of all elements (f64 accumulation in increasing element order, rounded once),
    /// as a rank-0 tensor.
    pub fn sum(&self) -> Result<Tensor<B>> {
        sum_impl(self, "sum", &[], false, false)
    }

    /// Sum over `dims` (negative counts from the end); `keepdim` keeps them with size 1.
    pub fn sum_dims(&self, dims: &[isize], keepdim: bool) -> Result<Tensor<B>> {
        if dims.is_empty() {
            return Err(Error::invalid(
                "sum",
                "dims",
                "give at least one dimension, or use sum()",
            ));
        }
        sum_impl(self, "sum", dims, keepdim, false)
    }

    /// Mean of all elements: the f64-accumulated sum rounded to f32, divided by the count.
    /// The mean of an empty tensor is NaN, as in PyTorch.
    pub fn mean(&self) -> Result<Tensor<B>> {
        sum_impl(self, "mean", &[], false, true)
    }

    /// Mean over `dims`; `keepdim` keeps them with size 1.
    pub fn mean_dims(&self, dims: &[isize], keepdim: bool) -> Result<Tensor<B>> {
        if dims.is_empty() {
            return Err(Error::invalid(
                "mean",
                "dims",
                "give at least one dimension, or use mean()",
            ));
        }
        sum_impl(self, "mean", dims, keepdim, true)
    }

    /// `self / c` element-wise, one IEEE division per element.
    pub fn div_scalar(&self, c: f32) -> Result<Tensor<B>> {
        let d = Tensor::scalar(self.backend(), c)?;
        self.div(&d)
    }
}
