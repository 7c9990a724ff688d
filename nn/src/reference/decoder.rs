//! The reference decoder ([`Decoder`]) and its case with the MSE loss ([`DecoderCase`]);
//! see the parent module for what they are for.

use super::{collect, Gradients, ReferenceCase};
use crate::checkpoint::{load_state_dict, TensorFile};
use crate::conv::{Conv2d, Conv2dConfig};
use crate::conv_transpose::{ConvTranspose2d, ConvTranspose2dConfig};
use crate::error::{Error, Result};
use crate::module::{Module as _, ModuleExt};
use crate::optim::{Optimizer, Sgd, SgdConfig};
use exactgrad_autograd::{hash_tensors, InterpolateOptions, InterpolateSize, Reduction, Tensor};
use exactgrad_core::{Backend, Philox};

/// Input channels of [`Decoder`].
pub const DECODER_IN_CHANNELS: usize = 3;

/// Output channels of [`Decoder`].
pub const DECODER_OUT_CHANNELS: usize = 4;

/// A small convolutional decoder (upsampling path of an encoder–decoder network):
///
/// ```text
/// conv    Conv2d(3 → 8, 3×3, padding 1) → relu
/// deconv1 ConvTranspose2d(8 → 6, 3×3, stride 2, padding 1, output_padding 1, groups 2) → tanh
///         → interpolate nearest to (15, 13)
/// deconv2 ConvTranspose2d(6 → 4, (3, 2), stride (1, 2), padding (1, 0), dilation (2, 1),
///         no bias) → leaky_relu(0.1)
///         → interpolate bilinear (half-pixel) to (12, 20)
///         → interpolate bilinear align_corners to (9, 16) → sigmoid
/// ```
///
/// Parameters `conv.*`, `deconv1.*`, `deconv2.weight` (PyTorch's names). The resizes
/// fix the output size, so any input height and width give `[N, 4, 9, 16]`.
#[derive(crate::Module, Debug)]
pub struct Decoder<B: Backend> {
    conv: Conv2d<B>,
    deconv1: ConvTranspose2d<B>,
    deconv2: ConvTranspose2d<B>,
}

impl<B: Backend> Decoder<B> {
    /// A model initialised as PyTorch initialises its layers, drawing `conv`, `deconv1`
    /// and `deconv2` in that order from `rng`.
    pub fn new(backend: &B, rng: &mut Philox) -> Result<Self> {
        let conv = Conv2d::new(
            backend,
            Conv2dConfig {
                padding: [1, 1],
                ..Conv2dConfig::new(DECODER_IN_CHANNELS, 8, [3, 3])
            },
            rng,
        )?;
        let deconv1 = ConvTranspose2d::new(
            backend,
            ConvTranspose2dConfig {
                stride: [2, 2],
                padding: [1, 1],
                output_padding: [1, 1],
                groups: 2,
                ..ConvTranspose2dConfig::new(8, 6, [3, 3])
            },
            rng,
        )?;
        let deconv2 = ConvTranspose2d::new(
            backend,
            ConvTranspose2dConfig {
                stride: [1, 2],
                padding: [1, 0],
                dilation: [2, 1],
                bias: false,
                ..ConvTranspose2dConfig::new(6, DECODER_OUT_CHANNELS, [3, 2])
            },
            rng,
        )?;
        Ok(Self {
            conv,
            deconv1,
            deconv2,
        })
    }

    /// The output `[N, 4, 9, 16]` in (0, 1) of an input `[N, 3, H, W]`.
    pub fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        let x = self.conv.forward(input)?.relu()?;
        let x = self.deconv1.forward(&x)?.tanh()?;
        let x = x.interpolate(
            InterpolateSize::Size([15, 13]),
            InterpolateOptions::default(),
        )?;
        let x = self.deconv2.forward(&x)?.leaky_relu(0.1)?;
        let x = x.interpolate(
            InterpolateSize::Size([12, 20]),
            InterpolateOptions::bilinear(),
        )?;
        let x = x.interpolate(
            InterpolateSize::Size([9, 16]),
            InterpolateOptions {
                align_corners: true,
                ..InterpolateOptions::bilinear()
            },
        )?;
        x.sigmoid()
    }
}

/// The training of [`DecoderCase::train`]: PyTorch's SGD on the case's one batch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DecoderTraining {
    /// Optimizer steps (3 in the oracle).
    pub steps: usize,
    /// Learning rate (0.5).
    pub lr: f64,
    /// Momentum (0.9).
    pub momentum: f64,
}

impl Default for DecoderTraining {
    fn default() -> Self {
        Self {
            steps: 3,
            lr: 0.5,
            momentum: 0.9,
        }
    }
}

/// A [`Decoder`] with a batch of inputs and targets, trained with the mean squared error.
pub struct DecoderCase<B: Backend> {
    /// The model.
    pub model: Decoder<B>,
    /// The inputs `[N, 3, H, W]`, a leaf that requires grad.
    pub input: Tensor<B>,
    /// The targets `[N, 4, 9, 16]`.
    pub target: Tensor<B>,
    /// The training of the oracle (from the file's metadata, else the default).
    pub training: DecoderTraining,
}

impl<B: Backend> DecoderCase<B> {
    /// The oracle's case from the bytes of `decoder.safetensors`: parameters from
    /// `init/…`, the inputs from `input/x`, the targets from `input/target`, the training
    /// from the metadata `steps`, `lr` and `momentum`.
    pub fn from_oracle(backend: &B, bytes: &[u8]) -> Result<Self> {
        Self::from_file(backend, &TensorFile::from_bytes(bytes)?)
    }

    /// As [`DecoderCase::from_oracle`], from a decoded file.
    pub fn from_file(backend: &B, file: &TensorFile) -> Result<Self> {
        let model = Decoder::new(backend, &mut Philox::new(0))?;
        load_state_dict(&model, file, "init/")?;
        let float = |key: &str, default: f64| -> Result<f64> {
            match file.metadata(key) {
                None => Ok(default),
                Some(v) => v.parse().map_err(|_| {
                    Error::invalid(
                        "DecoderCase::from_file",
                        "metadata",
                        format!("{key} = {v:?} is not a number"),
                    )
                }),
            }
        };
        let d = DecoderTraining::default();
        let training = DecoderTraining {
            steps: match file.metadata("steps") {
                None => d.steps,
                Some(_) => file.metadata_usize("steps")?,
            },
            lr: float("lr", d.lr)?,
            momentum: float("momentum", d.momentum)?,
        };
        Ok(Self {
            model,
            input: file.tensor(backend, "input/x")?.requires_grad()?,
            target: file.tensor(backend, "input/target")?,
            training,
        })
    }

    /// A model initialised from `Philox::new(seed)`, a batch of `batch` standard normal
    /// inputs `height × width` and uniform targets in [0, 1) from the same stream (for
    /// benches).
    pub fn random(
        backend: &B,
        batch: usize,
        height: usize,
        width: usize,
        seed: u64,
    ) -> Result<Self> {
        let mut rng = Philox::new(seed);
        let model = Decoder::new(backend, &mut rng)?;
        let input = Tensor::randn(
            backend,
            [batch, DECODER_IN_CHANNELS, height, width],
            0.0,
            1.0,
            &mut rng,
        )?
        .requires_grad()?;
        let target = Tensor::rand_uniform(
            backend,
            [batch, DECODER_OUT_CHANNELS, 9, 16],
            0.0,
            1.0,
            &mut rng,
        )?;
        Ok(Self {
            model,
            input,
            target,
            training: DecoderTraining::default(),
        })
    }

    /// The mean squared error of the output `y` against the case's targets.
    pub fn loss(&self, y: &Tensor<B>) -> Result<Tensor<B>> {
        y.mse_loss(&self.target, Reduction::Mean)
    }

    /// Trains the model in place with [`DecoderCase::training`]: each step clears the
    /// gradients, runs forward, the loss and backward, and takes one SGD step. Returns
    /// the hash (see `docs/arithmetic.md`) of the parameters afterwards, in `state_dict`
    /// order: the value pinned as `decoder` in [`super::PINNED_HASHES`].
    pub fn train(&self) -> Result<u64> {
        let t = self.training;
        let mut opt = Sgd::new(
            self.model.parameters(),
            SgdConfig {
                momentum: t.momentum,
                ..SgdConfig::new(t.lr)
            },
        )?;
        for _ in 0..t.steps {
            opt.clear_grad();
            let y = self.model.forward(&self.input.detach())?;
            self.loss(&y)?.backward()?;
            opt.step()?;
        }
        let params = self.model.parameters();
        let refs: Vec<&Tensor<B>> = params.iter().collect();
        hash_tensors(&refs)
    }
}

impl<B: Backend> ReferenceCase<B> for DecoderCase<B> {
    fn name(&self) -> &'static str {
        "decoder"
    }

    fn parameters(&self) -> Vec<Tensor<B>> {
        self.model.parameters()
    }

    /// The gradients of the mean squared error; [`Gradients::logits`] holds the output.
    fn forward_backward(&self) -> Result<Gradients<B>> {
        self.model.clear_grad();
        self.input.clear_grad();
        let y = self.model.forward(&self.input)?;
        let loss = self.loss(&y)?;
        loss.backward()?;
        collect(&self.model, &self.input, loss, y)
    }
}
