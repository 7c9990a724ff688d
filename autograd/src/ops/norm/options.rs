//! The options of the normalisation operators: [`Momentum`], [`BatchNormOptions`],
//! [`LayerNormOptions`] and [`GroupNormOptions`], with PyTorch's defaults.

use super::*;

/// How training [`Tensor::batch_norm`] updates the running statistics: the weight `m` of
/// the new batch statistic in `r = ((1 ⊖ m) ⊗ r) ⊕ (m ⊗ stat)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Momentum {
    /// A fixed weight `m` (PyTorch's `momentum=m`; the default is `0.1`).
    Exponential(f32),
    /// The cumulative moving average (PyTorch's `momentum=None`): `m = 1 / n` rounded
    /// from f64, with `n = num_batches_tracked` the number of training batches
    /// **including this one** (1 for the first batch). `n = 0` is an error.
    CumulativeAverage {
        /// Training batches seen so far, this one included (at least 1).
        num_batches_tracked: u64,
    },
}

impl Default for Momentum {
    /// `Exponential(0.1)`, PyTorch's default.
    fn default() -> Self {
        Momentum::Exponential(0.1)
    }
}

impl Momentum {
    /// The weight `m` of the new statistic; fails for a cumulative average over 0 batches.
    pub fn factor(self) -> Result<f32> {
        match self {
            Momentum::Exponential(m) => Ok(m),
            Momentum::CumulativeAverage {
                num_batches_tracked: 0,
            } => Err(Error::invalid(
                "batch_norm",
                "momentum",
                "Momentum::CumulativeAverage needs num_batches_tracked ≥ 1 (the count of training batches including this one), got 0",
            )),
            Momentum::CumulativeAverage {
                num_batches_tracked: n,
            } => Ok((1.0 / n as f64) as f32),
        }
    }
}

/// The arguments of [`Tensor::batch_norm`] after the input (PyTorch's
/// `F.batch_norm(input, running_mean, running_var, weight, bias, training, momentum,
/// eps)`), with PyTorch's defaults: no tensors, evaluation mode, momentum 0.1,
/// `eps = 1e-5`.
///
/// ```
/// use exactgrad_autograd::{BatchNormOptions, Momentum, Tensor};
/// use exactgrad_backends::ScalarRefBackend;
///
/// # fn main() -> exactgrad_autograd::Result<()> {
/// let b = ScalarRefBackend;
/// let x = Tensor::from_vec(&b, vec![1.0, 2.0, 3.0, 5.0], [2, 2])?;
/// let (mean, var) = (Tensor::zeros(&b, [2])?, Tensor::ones(&b, [2])?);
/// let (w, bias) = (Tensor::ones(&b, [2])?, Tensor::zeros(&b, [2])?);
/// let opts = BatchNormOptions::training()
///     .running_stats(&mean, &var)
///     .affine(&w, &bias)
///     .momentum(Momentum::CumulativeAverage { num_batches_tracked: 1 });
/// let y = x.batch_norm(opts)?;
/// assert_eq!(y.dims(), [2, 2]);
/// // The first batch's statistics (factor 1/1), the variance unbiased.
/// assert_eq!(mean.to_vec()?, [2.0, 3.5]);
/// assert_eq!(var.to_vec()?, [2.0, 4.5]);
/// # Ok(())
/// # }
/// ```
///
/// The positional form, where `running_mean` and `running_var` (or `weight` and `bias`)
/// could be swapped unnoticed, does not compile:
///
/// ```compile_fail,E0061
/// # use exactgrad_autograd::Tensor;
/// # use exactgrad_backends::ScalarRefBackend;
/// # let b = ScalarRefBackend;
/// # let x = Tensor::zeros(&b, [2, 2]).unwrap();
/// # let (mean, var) = (Tensor::zeros(&b, [2]).unwrap(), Tensor::ones(&b, [2]).unwrap());
/// let y = x.batch_norm(Some(&var), Some(&mean), None, None, true, 0.1, 1e-5);
/// ```
pub struct BatchNormOptions<'a, B: Backend> {
    /// Running mean `[C]`: normalises in evaluation; updated in place in training.
    pub running_mean: Option<&'a Tensor<B>>,
    /// Running (unbiased) variance `[C]`: normalises in evaluation; updated in place in
    /// training.
    pub running_var: Option<&'a Tensor<B>>,
    /// Per-channel scale `[C]`.
    pub weight: Option<&'a Tensor<B>>,
    /// Per-channel shift `[C]`.
    pub bias: Option<&'a Tensor<B>>,
    /// Batch statistics (and the running-statistics update) when true; the running
    /// statistics when false (the default, as `F.batch_norm`).
    pub training: bool,
    /// The running-statistics update (default `Exponential(0.1)`).
    pub momentum: Momentum,
    /// Added to the variance before the square root (default `1e-5`).
    pub eps: f32,
}

borrowed_options!(BatchNormOptions {
    running_mean,
    running_var,
    weight,
    bias,
    training,
    momentum,
    eps
});

impl<B: Backend> Default for BatchNormOptions<'_, B> {
    fn default() -> Self {
        Self {
            running_mean: None,
            running_var: None,
            weight: None,
            bias: None,
            training: false,
            momentum: Momentum::default(),
            eps: 1e-5,
        }
    }
}

impl<'a, B: Backend> BatchNormOptions<'a, B> {
    /// The defaults with `training = true`.
    pub fn training() -> Self {
        Self {
            training: true,
            ..Self::default()
        }
    }

    /// The defaults (evaluation) normalising with the given running statistics.
    pub fn evaluation(running_mean: &'a Tensor<B>, running_var: &'a Tensor<B>) -> Self {
        Self::default().running_stats(running_mean, running_var)
    }

    /// These options with the running statistics set.
    pub fn running_stats(self, running_mean: &'a Tensor<B>, running_var: &'a Tensor<B>) -> Self {
        Self {
            running_mean: Some(running_mean),
            running_var: Some(running_var),
            ..self
        }
    }

    /// These options with the per-channel `weight` and `bias` set.
    pub fn affine(self, weight: &'a Tensor<B>, bias: &'a Tensor<B>) -> Self {
        Self {
            weight: Some(weight),
            bias: Some(bias),
            ..self
        }
    }

    /// These options with another running-statistics update.
    pub fn momentum(self, momentum: Momentum) -> Self {
        Self { momentum, ..self }
    }

    /// These options with another `eps`.
    pub fn eps(self, eps: f32) -> Self {
        Self { eps, ..self }
    }
}

/// The arguments of [`Tensor::layer_norm`] after the normalised shape (PyTorch's
/// `F.layer_norm(input, normalized_shape, weight, bias, eps)`): no weight or bias,
/// `eps = 1e-5` by default.
pub struct LayerNormOptions<'a, B: Backend> {
    /// Scale of shape `normalized_shape`.
    pub weight: Option<&'a Tensor<B>>,
    /// Shift of shape `normalized_shape`.
    pub bias: Option<&'a Tensor<B>>,
    /// Added to the variance before the square root (default `1e-5`).
    pub eps: f32,
}

borrowed_options!(LayerNormOptions { weight, bias, eps });

impl<B: Backend> Default for LayerNormOptions<'_, B> {
    fn default() -> Self {
        Self {
            weight: None,
            bias: None,
            eps: 1e-5,
        }
    }
}

impl<'a, B: Backend> LayerNormOptions<'a, B> {
    /// These options with `weight` and `bias` set.
    pub fn affine(self, weight: &'a Tensor<B>, bias: &'a Tensor<B>) -> Self {
        Self {
            weight: Some(weight),
            bias: Some(bias),
            ..self
        }
    }

    /// These options with another `eps`.
    pub fn eps(self, eps: f32) -> Self {
        Self { eps, ..self }
    }
}

/// The arguments of [`Tensor::group_norm`] after the group count (PyTorch's
/// `F.group_norm(input, num_groups, weight, bias, eps)`): no weight or bias,
/// `eps = 1e-5` by default.
pub struct GroupNormOptions<'a, B: Backend> {
    /// Per-channel scale `[C]`.
    pub weight: Option<&'a Tensor<B>>,
    /// Per-channel shift `[C]`.
    pub bias: Option<&'a Tensor<B>>,
    /// Added to the variance before the square root (default `1e-5`).
    pub eps: f32,
}

borrowed_options!(GroupNormOptions { weight, bias, eps });

impl<B: Backend> Default for GroupNormOptions<'_, B> {
    fn default() -> Self {
        Self {
            weight: None,
            bias: None,
            eps: 1e-5,
        }
    }
}

impl<'a, B: Backend> GroupNormOptions<'a, B> {
    /// These options with `weight` and `bias` set.
    pub fn affine(self, weight: &'a Tensor<B>, bias: &'a Tensor<B>) -> Self {
        Self {
            weight: Some(weight),
            bias: Some(bias),
            ..self
        }
    }

    /// These options with another `eps`.
    pub fn eps(self, eps: f32) -> Self {
        Self { eps, ..self }
    }
}
