//! The reference conv net ([`ConvNet`]) and its case ([`ConvNetCase`]); see the parent
//! module for what they are for.

use super::{collect, Gradients, ReferenceCase};
use crate::checkpoint::{load_state_dict, TensorFile};
use crate::conv::{Conv2d, Conv2dConfig};
use crate::error::{Error, Result};
use crate::linear::Linear;
use crate::module::{Module as _, ModuleExt};
use crate::norm::BatchNorm2d;
use exactgrad_autograd::{AvgPool2dOptions, CrossEntropyOptions, MaxPool2dOptions, Tensor};
use exactgrad_core::{Backend, Philox};

/// Sizes of [`ConvNet`]; the default is the oracle's model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvNetConfig {
    /// Input channels (3).
    pub in_channels: usize,
    /// Channels of the first convolution (16).
    pub c1: usize,
    /// Channels of the second convolution (32).
    pub c2: usize,
    /// Width of the hidden linear layer (64).
    pub hidden: usize,
    /// Number of classes (10).
    pub classes: usize,
}

impl Default for ConvNetConfig {
    fn default() -> Self {
        Self {
            in_channels: 3,
            c1: 16,
            c2: 32,
            hidden: 64,
            classes: 10,
        }
    }
}

/// The reference conv net (see the module documentation); parameters `conv1.*`,
/// `bn1.*`, `conv2.*`, `bn2.*`, `fc1.*`, `fc2.*`, buffers `bn1.running_*` and
/// `bn2.running_*`. Inputs are `[N, C, H, W]` with `H` and `W` at least 4.
#[derive(crate::Module, Debug)]
pub struct ConvNet<B: Backend> {
    conv1: Conv2d<B>,
    bn1: BatchNorm2d<B>,
    conv2: Conv2d<B>,
    bn2: BatchNorm2d<B>,
    fc1: Linear<B>,
    fc2: Linear<B>,
    #[module(skip)]
    config: ConvNetConfig,
}

impl<B: Backend> ConvNet<B> {
    /// A model initialised as PyTorch initialises its layers, drawing `conv1`, `conv2`,
    /// `fc1` and `fc2` in that order from `rng`.
    ///
    /// Fails when a size is 0.
    pub fn new(backend: &B, config: ConvNetConfig, rng: &mut Philox) -> Result<Self> {
        let conv = |i, o| Conv2dConfig {
            padding: [1, 1],
            ..Conv2dConfig::new(i, o, [3, 3])
        };
        let conv1 = Conv2d::new(backend, conv(config.in_channels, config.c1), rng)?;
        let conv2 = Conv2d::new(backend, conv(config.c1, config.c2), rng)?;
        if config.hidden == 0 || config.classes == 0 {
            return Err(Error::invalid(
                "ConvNet::new",
                "config",
                format!("hidden and classes must be positive, got {config:?}"),
            ));
        }
        let fc1 = Linear::new(backend, config.c2 * 4, config.hidden, rng)?;
        let fc2 = Linear::new(backend, config.hidden, config.classes, rng)?;
        Ok(Self {
            conv1,
            bn1: BatchNorm2d::new(backend, config.c1)?,
            conv2,
            bn2: BatchNorm2d::new(backend, config.c2)?,
            fc1,
            fc2,
            config,
        })
    }

    /// The sizes.
    pub fn config(&self) -> ConvNetConfig {
        self.config
    }

    /// The logits `[N, classes]` of `input` `[N, C, H, W]`.
    pub fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        let x = self.bn1.forward(&self.conv1.forward(input)?)?.relu()?;
        let x = x.max_pool2d(MaxPool2dOptions::new([2, 2]))?;
        let x = self.bn2.forward(&self.conv2.forward(&x)?)?.relu()?;
        let x = x.avg_pool2d(AvgPool2dOptions::new([2, 2]))?;
        let x = x.adaptive_avg_pool2d([2, 2])?.flatten(1, -1)?;
        let x = self.fc1.forward(&x)?.relu()?;
        self.fc2.forward(&x)
    }

    /// The mean cross entropy of the logits of `input` against `targets` (one class per
    /// image).
    pub fn loss(&self, input: &Tensor<B>, targets: &[i64]) -> Result<Tensor<B>> {
        let logits = self.forward(input)?;
        logits.cross_entropy(targets, CrossEntropyOptions::default())
    }
}

/// A [`ConvNet`] with a batch of images and their classes.
pub struct ConvNetCase<B: Backend> {
    /// The model (in training mode).
    pub model: ConvNet<B>,
    /// The images `[N, C, H, W]`, a leaf that requires grad.
    pub input: Tensor<B>,
    /// One class per image.
    pub targets: Vec<i64>,
}

impl<B: Backend> ConvNetCase<B> {
    /// The oracle's case from the bytes of `conv_net.safetensors`: sizes from the
    /// metadata, parameters and buffers from `init/…`, the input from `input/x` and the
    /// classes from `input/targets`.
    pub fn from_oracle(backend: &B, bytes: &[u8]) -> Result<Self> {
        Self::from_file(backend, &TensorFile::from_bytes(bytes)?)
    }

    /// As [`ConvNetCase::from_oracle`], from a decoded file.
    pub fn from_file(backend: &B, file: &TensorFile) -> Result<Self> {
        let config = ConvNetConfig {
            in_channels: file.metadata_usize("c_in")?,
            c1: file.metadata_usize("c1")?,
            c2: file.metadata_usize("c2")?,
            hidden: file.metadata_usize("hidden")?,
            classes: file.metadata_usize("classes")?,
        };
        let model = ConvNet::new(backend, config, &mut Philox::new(0))?;
        load_state_dict(&model, file, "init/")?;
        Ok(Self {
            model,
            input: file.tensor(backend, "input/x")?.requires_grad()?,
            targets: file.ints("input/targets")?.1.to_vec(),
        })
    }

    /// A model initialised from `Philox::new(seed)` with a batch of `batch` standard
    /// normal images of size `hw` and classes from the same stream (for benches).
    pub fn random(
        backend: &B,
        config: ConvNetConfig,
        batch: usize,
        hw: [usize; 2],
        seed: u64,
    ) -> Result<Self> {
        let mut rng = Philox::new(seed);
        let model = ConvNet::new(backend, config, &mut rng)?;
        let input = Tensor::randn(
            backend,
            [batch, config.in_channels, hw[0], hw[1]],
            0.0,
            1.0,
            &mut rng,
        )?
        .requires_grad()?;
        let targets = (0..batch)
            .map(|_| i64::from(rng.below(config.classes as u32)))
            .collect();
        Ok(Self {
            model,
            input,
            targets,
        })
    }
}

impl<B: Backend> ReferenceCase<B> for ConvNetCase<B> {
    fn name(&self) -> &'static str {
        "conv_net"
    }

    fn parameters(&self) -> Vec<Tensor<B>> {
        self.model.parameters()
    }

    fn forward_backward(&self) -> Result<Gradients<B>> {
        self.model.clear_grad();
        self.input.clear_grad();
        let logits = self.model.forward(&self.input)?;
        let loss = logits.cross_entropy(&self.targets, CrossEntropyOptions::default())?;
        loss.backward()?;
        collect(&self.model, &self.input, loss, logits)
    }
}
