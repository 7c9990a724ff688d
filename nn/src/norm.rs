//! Normalisation layers: [`BatchNorm2d`], [`LayerNorm`] and [`GroupNorm`].

use crate::error::{Error, Result};
use crate::module::{IntBuffer, Module, TrainingFlag, Visitor};
use exactgrad_autograd::{BatchNormOptions, GroupNormOptions, LayerNormOptions, Momentum, Tensor};
use exactgrad_core::Backend;
use std::fmt;

/// Hyper-parameters of [`BatchNorm2d`], with PyTorch's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BatchNormConfig {
    /// Added to the variance before the square root (default `1e-5`).
    pub eps: f32,
    /// Weight of the new batch statistic in the running averages (default `Some(0.1)`,
    /// [`Momentum::Exponential`]); `None` gives the cumulative average
    /// `1 / num_batches_tracked`, as PyTorch's `momentum=None`
    /// ([`Momentum::CumulativeAverage`] with the layer's batch count).
    pub momentum: Option<f32>,
    /// Whether the layer has a learnable per-channel `weight` and `bias` (default true).
    pub affine: bool,
    /// Whether the layer keeps `running_mean` and `running_var` buffers (default true);
    /// without them batch statistics are used in evaluation too.
    pub track_running_stats: bool,
}

impl Default for BatchNormConfig {
    fn default() -> Self {
        Self {
            eps: 1e-5,
            momentum: Some(0.1),
            affine: true,
            track_running_stats: true,
        }
    }
}

/// Batch normalisation over the channels of inputs `[N, C, H, W]` (PyTorch's
/// `nn.BatchNorm2d`), on [`Tensor::batch_norm`].
///
/// Parameters: `weight` (ones) and `bias` (zeros), `[C]`, when affine. Buffers (see
/// [`ModuleExt::named_buffers`](crate::ModuleExt::named_buffers)): `running_mean` (zeros) and `running_var` (ones), `[C]`,
/// when running statistics are tracked. A new layer is in training mode: it normalises
/// with the batch mean and biased variance and updates the running statistics in place
/// with the unbiased variance; after [`ModuleExt::eval`](crate::ModuleExt::eval) it normalises with
/// the running statistics. PyTorch's `num_batches_tracked` is an integer buffer
/// ([`IntBuffer`], saved as a 0-dimensional `I64` entry, read by
/// [`BatchNorm2d::num_batches_tracked`]); a state dict may lack it, as in PyTorch.
pub struct BatchNorm2d<B: Backend> {
    weight: Option<Tensor<B>>,
    bias: Option<Tensor<B>>,
    running_mean: Option<Tensor<B>>,
    running_var: Option<Tensor<B>>,
    num_batches_tracked: IntBuffer,
    config: BatchNormConfig,
    num_features: usize,
    training: TrainingFlag,
}

impl<B: Backend> BatchNorm2d<B> {
    /// A layer over `num_features` channels with PyTorch's defaults.
    ///
    /// Fails when the parameters cannot be allocated.
    pub fn new(backend: &B, num_features: usize) -> Result<Self> {
        Self::with_config(backend, num_features, BatchNormConfig::default())
    }

    /// A layer over `num_features` channels with the given configuration.
    ///
    /// Fails when the parameters cannot be allocated.
    pub fn with_config(backend: &B, num_features: usize, config: BatchNormConfig) -> Result<Self> {
        let affine = config.affine;
        let track = config.track_running_stats;
        let c = [num_features];
        let opt = |on: bool, make: &dyn Fn() -> exactgrad_autograd::Result<Tensor<B>>| {
            if on {
                make().map(Some)
            } else {
                Ok(None)
            }
        };
        Ok(Self {
            weight: opt(affine, &|| Tensor::ones(backend, c)?.requires_grad())?,
            bias: opt(affine, &|| Tensor::zeros(backend, c)?.requires_grad())?,
            running_mean: opt(track, &|| Tensor::zeros(backend, c))?,
            running_var: opt(track, &|| Tensor::ones(backend, c))?,
            num_batches_tracked: IntBuffer::optional(0),
            config,
            num_features,
            training: TrainingFlag::new(),
        })
    }

    /// The per-channel scale, `[C]`, when affine.
    pub fn weight(&self) -> Option<&Tensor<B>> {
        self.weight.as_ref()
    }

    /// The per-channel shift, `[C]`, when affine.
    pub fn bias(&self) -> Option<&Tensor<B>> {
        self.bias.as_ref()
    }

    /// The running mean buffer, `[C]`, when tracked.
    pub fn running_mean(&self) -> Option<&Tensor<B>> {
        self.running_mean.as_ref()
    }

    /// The running (unbiased) variance buffer, `[C]`, when tracked.
    pub fn running_var(&self) -> Option<&Tensor<B>> {
        self.running_var.as_ref()
    }

    /// How many training batches have updated the running statistics.
    pub fn num_batches_tracked(&self) -> u64 {
        u64::try_from(self.num_batches_tracked.get()).unwrap_or(0)
    }

    /// Sets the batch counter (when restoring a checkpoint).
    pub fn set_num_batches_tracked(&self, n: u64) {
        self.num_batches_tracked
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// The configuration.
    pub fn config(&self) -> BatchNormConfig {
        self.config
    }

    /// Number of channels.
    pub fn num_features(&self) -> usize {
        self.num_features
    }

    /// Whether the layer is in training mode.
    pub fn is_training(&self) -> bool {
        self.training.get()
    }
}

impl<B: Backend> Module<B> for BatchNorm2d<B> {
    /// Fails when the input is not 4-D or its channel count differs from the layer's.
    fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        let _scope = crate::trace::module_scope::<B>(self);
        let op = "BatchNorm2d";
        if input.rank() != 4 {
            return Err(Error::invalid(
                op,
                "input",
                format!(
                    "expected a 4-D input [N, C, H, W], got shape {:?}",
                    input.dims()
                ),
            ));
        }
        if input.dims()[1] != self.num_features {
            return Err(Error::invalid(
                op,
                "input",
                format!(
                    "expected {} channels, got input of shape {:?}",
                    self.num_features,
                    input.dims()
                ),
            ));
        }
        // Training with running statistics counts this batch and updates them.
        let updates = self.training.get() && self.config.track_running_stats;
        let batches = updates.then(|| u64::try_from(self.num_batches_tracked.add(1)).unwrap_or(0));
        let momentum = match (self.config.momentum, batches) {
            (Some(m), _) => Momentum::Exponential(m),
            (None, Some(n)) => Momentum::CumulativeAverage {
                num_batches_tracked: n,
            },
            // Nothing is updated, so the momentum is not used.
            (None, None) => Momentum::default(),
        };
        let opts = BatchNormOptions {
            running_mean: self.running_mean.as_ref(),
            running_var: self.running_var.as_ref(),
            weight: self.weight.as_ref(),
            bias: self.bias.as_ref(),
            training: self.training.get() || self.running_mean.is_none(),
            momentum,
            eps: self.config.eps,
        };
        input.batch_norm(opts)
    }

    fn visit(&self, v: &mut Visitor<'_, B>) {
        v.parameter("weight", self.weight.as_ref());
        v.parameter("bias", self.bias.as_ref());
        v.buffer("running_mean", self.running_mean.as_ref());
        v.buffer("running_var", self.running_var.as_ref());
        if self.config.track_running_stats {
            v.int_buffer("num_batches_tracked", &self.num_batches_tracked);
        }
        v.training(&self.training);
    }

    fn describe(&self) -> String {
        format!("{self:?}")
    }
}

impl<B: Backend> fmt::Debug for BatchNorm2d<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        write!(
            f,
            "BatchNorm2d({}, eps={}, momentum={:?}, affine={}, track_running_stats={}, training={})",
            self.num_features, c.eps, c.momentum, c.affine, c.track_running_stats, self.training.get()
        )
    }
}

/// Options of [`LayerNorm`], with PyTorch's defaults (`nn.LayerNorm(normalized_shape,
/// eps=1e-05, elementwise_affine=True, bias=True)`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerNormConfig {
    /// Added to the variance before the square root (default `1e-5`).
    pub eps: f32,
    /// Whether the layer has a learnable `weight` (default true).
    pub elementwise_affine: bool,
    /// Whether an affine layer also has a `bias` (default true; ignored without
    /// `elementwise_affine`, as in PyTorch).
    pub bias: bool,
}

impl Default for LayerNormConfig {
    fn default() -> Self {
        Self {
            eps: 1e-5,
            elementwise_affine: true,
            bias: true,
        }
    }
}

/// Layer normalisation over the trailing `normalized_shape` dimensions (PyTorch's
/// `nn.LayerNorm`), on [`Tensor::layer_norm`].
///
/// Parameters: `weight` (ones) and `bias` (zeros) of shape `normalized_shape`, when
/// element-wise affine.
pub struct LayerNorm<B: Backend> {
    normalized_shape: Vec<usize>,
    weight: Option<Tensor<B>>,
    bias: Option<Tensor<B>>,
    eps: f32,
}

impl<B: Backend> LayerNorm<B> {
    /// A layer with PyTorch's defaults: `eps = 1e-5`, affine weight and bias.
    ///
    /// Fails when `normalized_shape` is empty or contains 0.
    pub fn new(backend: &B, normalized_shape: &[usize]) -> Result<Self> {
        Self::with_config(backend, normalized_shape, LayerNormConfig::default())
    }

    /// A layer with the given `eps`, with or without the affine `weight` and `bias`.
    ///
    /// Fails when `normalized_shape` is empty or contains 0.
    pub fn with_config(
        backend: &B,
        normalized_shape: &[usize],
        config: LayerNormConfig,
    ) -> Result<Self> {
        let LayerNormConfig {
            eps,
            elementwise_affine,
            bias,
        } = config;
        if normalized_shape.is_empty() || normalized_shape.contains(&0) {
            return Err(Error::invalid(
                "LayerNorm::new",
                "normalized_shape",
                format!("must be non-empty with positive sizes, got {normalized_shape:?}"),
            ));
        }
        let shape = normalized_shape.to_vec();
        let weight = if elementwise_affine {
            Some(Tensor::ones(backend, shape.clone())?.requires_grad()?)
        } else {
            None
        };
        let bias = if elementwise_affine && bias {
            Some(Tensor::zeros(backend, shape.clone())?.requires_grad()?)
        } else {
            None
        };
        Ok(Self {
            weight,
            bias,
            normalized_shape: shape,
            eps,
        })
    }

    /// The normalised trailing dimensions.
    pub fn normalized_shape(&self) -> &[usize] {
        &self.normalized_shape
    }

    /// The scale, when affine.
    pub fn weight(&self) -> Option<&Tensor<B>> {
        self.weight.as_ref()
    }

    /// The shift, when affine with bias.
    pub fn bias(&self) -> Option<&Tensor<B>> {
        self.bias.as_ref()
    }

    /// The `eps` added to the variance.
    pub fn eps(&self) -> f32 {
        self.eps
    }
}

impl<B: Backend> Module<B> for LayerNorm<B> {
    fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        let _scope = crate::trace::module_scope::<B>(self);
        let opts = LayerNormOptions {
            weight: self.weight.as_ref(),
            bias: self.bias.as_ref(),
            eps: self.eps,
        };
        input.layer_norm(&self.normalized_shape, opts)
    }

    fn visit(&self, v: &mut Visitor<'_, B>) {
        v.parameter("weight", self.weight.as_ref());
        v.parameter("bias", self.bias.as_ref());
    }

    fn describe(&self) -> String {
        format!("{self:?}")
    }
}

impl<B: Backend> fmt::Debug for LayerNorm<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "LayerNorm({:?}, eps={}, elementwise_affine={}, bias={})",
            self.normalized_shape,
            self.eps,
            self.weight.is_some(),
            self.bias.is_some()
        )
    }
}

/// Options of [`GroupNorm`], with PyTorch's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GroupNormConfig {
    /// Added to the variance before the square root (default `1e-5`).
    pub eps: f32,
    /// Whether the layer has a learnable per-channel `weight` and `bias` (default true).
    pub affine: bool,
}

impl Default for GroupNormConfig {
    fn default() -> Self {
        Self {
            eps: 1e-5,
            affine: true,
        }
    }
}

/// Group normalisation of inputs `[N, C, *]` (PyTorch's `nn.GroupNorm`), on
/// [`Tensor::group_norm`]: the `C` channels are split into `num_groups` groups and each
/// (sample, group) is normalised over its channels and positions.
///
/// Parameters: `weight` (ones) and `bias` (zeros), `[C]`, when affine. No buffers and no
/// training mode: training and evaluation compute the same thing.
pub struct GroupNorm<B: Backend> {
    weight: Option<Tensor<B>>,
    bias: Option<Tensor<B>>,
    num_groups: usize,
    num_channels: usize,
    eps: f32,
}

impl<B: Backend> GroupNorm<B> {
    /// A layer over `num_channels` channels in `num_groups` groups with PyTorch's
    /// defaults (`nn.GroupNorm(num_groups, num_channels)`).
    ///
    /// Fails when a count is 0 or `num_groups` does not divide `num_channels`.
    pub fn new(backend: &B, num_groups: usize, num_channels: usize) -> Result<Self> {
        Self::with_config(
            backend,
            num_groups,
            num_channels,
            GroupNormConfig::default(),
        )
    }

    /// A layer with the given `eps`, with or without the affine parameters.
    ///
    /// Fails when a count is 0 or `num_groups` does not divide `num_channels`.
    pub fn with_config(
        backend: &B,
        num_groups: usize,
        num_channels: usize,
        config: GroupNormConfig,
    ) -> Result<Self> {
        if num_groups == 0 || num_channels == 0 || !num_channels.is_multiple_of(num_groups) {
            return Err(Error::invalid(
                "GroupNorm::new",
                "num_groups",
                format!(
                    "num_channels = {num_channels} must be positive and divisible by num_groups = {num_groups}"
                ),
            ));
        }
        let (weight, bias) = if config.affine {
            (
                Some(Tensor::ones(backend, [num_channels])?.requires_grad()?),
                Some(Tensor::zeros(backend, [num_channels])?.requires_grad()?),
            )
        } else {
            (None, None)
        };
        Ok(Self {
            weight,
            bias,
            num_groups,
            num_channels,
            eps: config.eps,
        })
    }

    /// The per-channel scale, `[C]`, when affine.
    pub fn weight(&self) -> Option<&Tensor<B>> {
        self.weight.as_ref()
    }

    /// The per-channel shift, `[C]`, when affine.
    pub fn bias(&self) -> Option<&Tensor<B>> {
        self.bias.as_ref()
    }

    /// Number of groups.
    pub fn num_groups(&self) -> usize {
        self.num_groups
    }

    /// Number of channels.
    pub fn num_channels(&self) -> usize {
        self.num_channels
    }

    /// The `eps` added to the variance.
    pub fn eps(&self) -> f32 {
        self.eps
    }
}

impl<B: Backend> Module<B> for GroupNorm<B> {
    /// Fails when the input has fewer than 2 dimensions or not the layer's channel count.
    fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        let _scope = crate::trace::module_scope::<B>(self);
        let d = input.dims();
        if d.len() < 2 || d[1] != self.num_channels {
            return Err(Error::invalid(
                "GroupNorm",
                "input",
                format!(
                    "expected an input [N, {}, *], got shape {d:?}",
                    self.num_channels
                ),
            ));
        }
        let opts = GroupNormOptions {
            weight: self.weight.as_ref(),
            bias: self.bias.as_ref(),
            eps: self.eps,
        };
        input.group_norm(self.num_groups, opts)
    }

    fn visit(&self, v: &mut Visitor<'_, B>) {
        v.parameter("weight", self.weight.as_ref());
        v.parameter("bias", self.bias.as_ref());
    }

    fn describe(&self) -> String {
        format!("{self:?}")
    }
}

impl<B: Backend> fmt::Debug for GroupNorm<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "GroupNorm({}, {}, eps={}, affine={})",
            self.num_groups,
            self.num_channels,
            self.eps,
            self.weight.is_some()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::module::ModuleExt;
    use exactgrad_backends::ScalarRefBackend;
    use exactgrad_core::Philox;

    fn close(a: &[f32], b: &[f32], tol: f32) {
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!((x - y).abs() <= tol, "element {i}: {x} vs {y}");
        }
    }

    /// Per-channel mean and unbiased variance of an `[N, C, H, W]` batch.
    fn stats(x: &[f32], n: usize, c: usize, hw: usize) -> (Vec<f32>, Vec<f32>) {
        let mut mean = vec![0.0; c];
        let mut var = vec![0.0; c];
        for ch in 0..c {
            let vals: Vec<f64> = (0..n)
                .flat_map(|i| (0..hw).map(move |j| x[(i * c + ch) * hw + j] as f64))
                .collect();
            let m = vals.iter().sum::<f64>() / vals.len() as f64;
            let v = vals.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / (vals.len() - 1) as f64;
            mean[ch] = m as f32;
            var[ch] = v as f32;
        }
        (mean, var)
    }

    #[test]
    fn batch_norm_names_buffers_and_running_statistics() {
        let b = ScalarRefBackend;
        let bn = BatchNorm2d::new(&b, 3).unwrap();
        let names: Vec<String> = bn.named_parameters().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["weight", "bias"]);
        let buffers: Vec<String> = bn.named_buffers().into_iter().map(|(n, _)| n).collect();
        assert_eq!(buffers, ["running_mean", "running_var"]);
        assert!(bn
            .named_buffers()
            .iter()
            .all(|(_, t)| !t.is_requires_grad()));

        let mut rng = Philox::new(5);
        let x = Tensor::randn(&b, [4, 3, 2, 5], 1.0, 2.0, &mut rng).unwrap();
        let y = bn.forward(&x).unwrap();
        assert_eq!(bn.num_batches_tracked(), 1);
        let (mean, var) = stats(&x.to_vec().unwrap(), 4, 3, 10);
        let rm: Vec<f32> = mean.iter().map(|m| 0.1 * m).collect();
        let rv: Vec<f32> = var.iter().map(|v| 0.9 + 0.1 * v).collect();
        close(&bn.running_mean().unwrap().to_vec().unwrap(), &rm, 1e-5);
        close(&bn.running_var().unwrap().to_vec().unwrap(), &rv, 1e-4);
        // Training output: zero mean per channel.
        let (ym, _) = stats(&y.to_vec().unwrap(), 4, 3, 10);
        close(&ym, &[0.0; 3], 1e-5);

        // Evaluation normalises with the running statistics and leaves them alone.
        bn.set_training(false);
        assert!(!bn.is_training());
        let y = bn.forward(&x).unwrap();
        assert_eq!(bn.num_batches_tracked(), 1);
        let want: Vec<f32> = x
            .to_vec()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let ch = (i / 10) % 3;
                (v - rm[ch]) / (rv[ch] + 1e-5).sqrt()
            })
            .collect();
        close(&y.to_vec().unwrap(), &want, 1e-4);
        close(&bn.running_mean().unwrap().to_vec().unwrap(), &rm, 1e-5);
    }

    #[test]
    fn batch_norm_cumulative_average_without_momentum() {
        let b = ScalarRefBackend;
        let config = BatchNormConfig {
            momentum: None,
            ..BatchNormConfig::default()
        };
        let bn = BatchNorm2d::with_config(&b, 2, config).unwrap();
        let mut rng = Philox::new(8);
        let x1 = Tensor::randn(&b, [3, 2, 2, 2], 0.5, 1.0, &mut rng).unwrap();
        let x2 = Tensor::randn(&b, [3, 2, 2, 2], -1.0, 3.0, &mut rng).unwrap();
        bn.forward(&x1).unwrap();
        bn.forward(&x2).unwrap();
        let (m1, _) = stats(&x1.to_vec().unwrap(), 3, 2, 4);
        let (m2, _) = stats(&x2.to_vec().unwrap(), 3, 2, 4);
        let want: Vec<f32> = m1.iter().zip(&m2).map(|(a, b)| (a + b) / 2.0).collect();
        close(&bn.running_mean().unwrap().to_vec().unwrap(), &want, 1e-5);
    }

    #[test]
    fn batch_norm_without_affine_or_statistics() {
        let b = ScalarRefBackend;
        let config = BatchNormConfig {
            affine: false,
            track_running_stats: false,
            ..BatchNormConfig::default()
        };
        let bn = BatchNorm2d::with_config(&b, 2, config).unwrap();
        assert!(bn.named_parameters().is_empty() && bn.named_buffers().is_empty());
        bn.set_training(false);
        // Without running statistics, batch statistics are used in evaluation too.
        let x = Tensor::randn(&b, [3, 2, 2, 2], 0.5, 1.0, &mut Philox::new(2)).unwrap();
        let (ym, _) = stats(&bn.forward(&x).unwrap().to_vec().unwrap(), 3, 2, 4);
        close(&ym, &[0.0; 2], 1e-5);
        assert_eq!(bn.num_batches_tracked(), 0);
    }

    #[test]
    fn batch_norm_rejects_bad_inputs() {
        let b = ScalarRefBackend;
        let bn = BatchNorm2d::new(&b, 3).unwrap();
        let err = bn
            .forward(&Tensor::zeros(&b, [2, 3, 4]).unwrap())
            .unwrap_err();
        assert!(err.to_string().contains("4-D"), "{err}");
        let err = bn
            .forward(&Tensor::zeros(&b, [2, 4, 2, 2]).unwrap())
            .unwrap_err();
        assert!(err.to_string().contains("expected 3 channels"), "{err}");
    }

    #[test]
    fn layer_norm_normalises_the_trailing_dimensions() {
        let b = ScalarRefBackend;
        let ln = LayerNorm::new(&b, &[2, 3]).unwrap();
        let names: Vec<String> = ln.named_parameters().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["weight", "bias"]);
        assert_eq!(ln.weight().unwrap().to_vec().unwrap(), [1.0; 6]);
        let x = Tensor::randn(&b, [4, 2, 3], 2.0, 3.0, &mut Philox::new(1)).unwrap();
        let y = ln.forward(&x).unwrap().to_vec().unwrap();
        for row in y.chunks(6) {
            let m: f32 = row.iter().sum::<f32>() / 6.0;
            let v: f32 = row.iter().map(|x| (x - m) * (x - m)).sum::<f32>() / 6.0;
            assert!(m.abs() < 1e-5 && (v - 1.0).abs() < 1e-3, "{m} {v}");
        }
        let plain = LayerNorm::with_config(
            &b,
            &[3],
            LayerNormConfig {
                eps: 1e-6,
                elementwise_affine: false,
                bias: true,
            },
        )
        .unwrap();
        assert!(plain.named_parameters().is_empty());
        let no_bias = LayerNorm::with_config(
            &b,
            &[3],
            LayerNormConfig {
                bias: false,
                ..LayerNormConfig::default()
            },
        )
        .unwrap();
        assert_eq!(no_bias.named_parameters().len(), 1);
        assert!(LayerNorm::new(&b, &[]).is_err());
        assert!(LayerNorm::new(&b, &[0]).is_err());
        assert!(ln.forward(&Tensor::zeros(&b, [4, 3, 2]).unwrap()).is_err());
    }

    #[test]
    fn group_norm_is_the_functional_operator_with_pytorch_parameters() {
        let b = ScalarRefBackend;
        let gn = GroupNorm::new(&b, 2, 4).unwrap();
        let names: Vec<String> = gn.named_parameters().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["weight", "bias"]);
        assert_eq!(gn.weight().unwrap().to_vec().unwrap(), [1.0; 4]);
        assert_eq!(gn.bias().unwrap().to_vec().unwrap(), [0.0; 4]);
        assert!(gn.named_buffers().is_empty() && !gn.is_training());
        // Non-trivial parameters, so that the comparison sees them.
        let mut rng = Philox::new(6);
        {
            let _guard = exactgrad_autograd::no_grad();
            gn.weight()
                .unwrap()
                .copy_(&Tensor::randn(&b, [4], 1.0, 0.5, &mut rng).unwrap())
                .unwrap();
        }
        let x = Tensor::randn(&b, [3, 4, 2, 5], 0.5, 2.0, &mut rng).unwrap();
        let want = x
            .group_norm(
                2,
                GroupNormOptions {
                    weight: gn.weight(),
                    bias: gn.bias(),
                    eps: 1e-5,
                },
            )
            .unwrap();
        assert_eq!(
            gn.forward(&x).unwrap().to_vec().unwrap(),
            want.to_vec().unwrap()
        );
        let plain = GroupNorm::with_config(
            &b,
            4,
            4,
            GroupNormConfig {
                eps: 1e-3,
                affine: false,
            },
        )
        .unwrap();
        assert!(plain.named_parameters().is_empty());
        assert_eq!(
            plain.forward(&x).unwrap().to_vec().unwrap(),
            x.group_norm(
                4,
                GroupNormOptions {
                    eps: 1e-3,
                    ..GroupNormOptions::default()
                }
            )
            .unwrap()
            .to_vec()
            .unwrap()
        );
        assert_eq!(
            format!("{gn:?}"),
            "GroupNorm(2, 4, eps=0.00001, affine=true)"
        );
        assert_eq!((gn.num_groups(), gn.num_channels(), gn.eps()), (2, 4, 1e-5));
    }

    #[test]
    fn group_norm_rejects_bad_arguments() {
        let b = ScalarRefBackend;
        let err = GroupNorm::new(&b, 3, 4).unwrap_err().to_string();
        assert!(err.contains("divisible by num_groups = 3"), "{err}");
        assert!(GroupNorm::new(&b, 0, 4).is_err());
        assert!(GroupNorm::new(&b, 1, 0).is_err());
        let gn = GroupNorm::new(&b, 2, 4).unwrap();
        let err = gn
            .forward(&Tensor::zeros(&b, [2, 6, 3]).unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("[N, 4, *]"), "{err}");
        assert!(gn.forward(&Tensor::zeros(&b, [4]).unwrap()).is_err());
    }
}
