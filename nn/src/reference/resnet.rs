//! The reference ResNet ([`ResNet`], ResNet-18 in the CIFAR layout by default) and its
//! case ([`ResNetCase`]); see the parent module for what they are for.

use super::{collect_parameters, Gradients, ReferenceCase};
use crate::checkpoint::{load_state_dict, TensorFile};
use crate::conv::{Conv2d, Conv2dConfig};
use crate::error::{Error, Result};
use crate::linear::Linear;
use crate::module::{Module, ModuleExt, Visitor};
use crate::norm::BatchNorm2d;
use exactgrad_autograd::{CrossEntropyOptions, Tensor};
use exactgrad_core::{Backend, Philox};
use std::fmt;

/// Sizes of [`ResNet`]; the default is ResNet-18 for 3×32×32 images and 10 classes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResNetConfig {
    /// Input channels (3).
    pub in_channels: usize,
    /// Channels of the four stages (64, 128, 256, 512); the stem has the first stage's.
    pub widths: [usize; 4],
    /// Basic blocks per stage (2, 2, 2, 2).
    pub blocks: [usize; 4],
    /// Number of classes (10).
    pub classes: usize,
}

impl Default for ResNetConfig {
    fn default() -> Self {
        Self {
            in_channels: 3,
            widths: [64, 128, 256, 512],
            blocks: [2, 2, 2, 2],
            classes: 10,
        }
    }
}

/// A convolution without bias: `k × k`, the given stride, padding `k / 2`.
fn conv<B: Backend>(
    backend: &B,
    cin: usize,
    cout: usize,
    k: usize,
    stride: usize,
    rng: &mut Philox,
) -> Result<Conv2d<B>> {
    let config = Conv2dConfig {
        stride: [stride, stride],
        padding: [k / 2, k / 2],
        bias: false,
        ..Conv2dConfig::new(cin, cout, [k, k])
    };
    Conv2d::new(backend, config, rng)
}

/// The basic block of a ResNet (He et al. 2016): `relu(bn2(conv2(relu(bn1(conv1(x))))) +
/// shortcut(x))`, 3×3 convolutions without bias, the first with the block's stride; the
/// shortcut is the identity, or `downsample.0` (a 1×1 convolution with the stride,
/// without bias) and `downsample.1` (a batch norm) when the stride or the width changes.
pub struct BasicBlock<B: Backend> {
    conv1: Conv2d<B>,
    bn1: BatchNorm2d<B>,
    conv2: Conv2d<B>,
    bn2: BatchNorm2d<B>,
    downsample: Option<(Conv2d<B>, BatchNorm2d<B>)>,
}

impl<B: Backend> BasicBlock<B> {
    /// A block from `cin` to `cout` channels, drawing `conv1`, `conv2` and then the
    /// shortcut's convolution from `rng`.
    ///
    /// Fails when a size or the stride is 0.
    pub fn new(
        backend: &B,
        cin: usize,
        cout: usize,
        stride: usize,
        rng: &mut Philox,
    ) -> Result<Self> {
        let conv1 = conv(backend, cin, cout, 3, stride, rng)?;
        let conv2 = conv(backend, cout, cout, 3, 1, rng)?;
        let downsample = if stride != 1 || cin != cout {
            Some((
                conv(backend, cin, cout, 1, stride, rng)?,
                BatchNorm2d::new(backend, cout)?,
            ))
        } else {
            None
        };
        Ok(Self {
            conv1,
            bn1: BatchNorm2d::new(backend, cout)?,
            conv2,
            bn2: BatchNorm2d::new(backend, cout)?,
            downsample,
        })
    }
}

impl<B: Backend> Module<B> for BasicBlock<B> {
    fn forward(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        let _scope = crate::trace::module_scope::<B>(self);
        let y = self.bn1.forward(&self.conv1.forward(x)?)?.relu()?;
        let y = self.bn2.forward(&self.conv2.forward(&y)?)?;
        let shortcut = match &self.downsample {
            Some((c, bn)) => bn.forward(&c.forward(x)?)?,
            None => x.clone(),
        };
        y.add(&shortcut)?.relu()
    }

    fn visit(&self, v: &mut Visitor<'_, B>) {
        v.child("conv1", &self.conv1);
        v.child("bn1", &self.bn1);
        v.child("conv2", &self.conv2);
        v.child("bn2", &self.bn2);
        if let Some((c, bn)) = &self.downsample {
            v.child("downsample.0", c);
            v.child("downsample.1", bn);
        }
    }
}

/// A ResNet of basic blocks for small images (the CIFAR layout of ResNet-18 by default):
/// a 3×3 stem convolution (stride 1, no max pool) with batch norm and ReLU, four stages
/// of [`BasicBlock`]s (the first block of stages 2–4 has stride 2), global average
/// pooling and a linear layer. Parameters and buffers as torchvision names them:
/// `conv1`, `bn1`, `layer{1..4}.{i}.{conv1, bn1, conv2, bn2, downsample.0,
/// downsample.1}`, `fc`. Inputs are `[N, C, H, W]`.
pub struct ResNet<B: Backend> {
    conv1: Conv2d<B>,
    bn1: BatchNorm2d<B>,
    stages: Vec<Vec<BasicBlock<B>>>,
    fc: Linear<B>,
    config: ResNetConfig,
}

impl<B: Backend> ResNet<B> {
    /// A model initialised as PyTorch initialises its layers (the convolutions in
    /// definition order, then `fc`, from `rng`).
    ///
    /// Fails when a size is 0.
    pub fn new(backend: &B, config: ResNetConfig, rng: &mut Philox) -> Result<Self> {
        if config.classes == 0 || config.blocks.contains(&0) || config.widths.contains(&0) {
            return Err(Error::invalid(
                "ResNet::new",
                "config",
                format!("every size must be positive, got {config:?}"),
            ));
        }
        let w = config.widths;
        let conv1 = conv(backend, config.in_channels, w[0], 3, 1, rng)?;
        let mut stages = Vec::with_capacity(4);
        let mut cin = w[0];
        for (s, (&cout, &n)) in w.iter().zip(&config.blocks).enumerate() {
            let blocks = (0..n)
                .map(|i| {
                    let stride = if s > 0 && i == 0 { 2 } else { 1 };
                    let block = BasicBlock::new(backend, cin, cout, stride, rng);
                    cin = cout;
                    block
                })
                .collect::<Result<Vec<_>>>()?;
            stages.push(blocks);
        }
        Ok(Self {
            conv1,
            bn1: BatchNorm2d::new(backend, w[0])?,
            stages,
            fc: Linear::new(backend, w[3], config.classes, rng)?,
            config,
        })
    }

    /// The sizes.
    pub fn config(&self) -> ResNetConfig {
        self.config
    }
}

impl<B: Backend> Module<B> for ResNet<B> {
    /// The logits `[N, classes]` of `input` `[N, C, H, W]`.
    fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        let mut x = self.bn1.forward(&self.conv1.forward(input)?)?.relu()?;
        for block in self.stages.iter().flatten() {
            x = block.forward(&x)?;
        }
        let x = x.adaptive_avg_pool2d([1, 1])?.flatten(1, -1)?;
        self.fc.forward(&x)
    }

    fn visit(&self, v: &mut Visitor<'_, B>) {
        v.child("conv1", &self.conv1);
        v.child("bn1", &self.bn1);
        for (s, stage) in self.stages.iter().enumerate() {
            for (i, block) in stage.iter().enumerate() {
                v.child(&format!("layer{}.{i}", s + 1), block);
            }
        }
        v.child("fc", &self.fc);
    }
}

impl<B: Backend> fmt::Debug for ResNet<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResNet")
            .field("config", &self.config)
            .field("parameters", &self.num_parameters())
            .finish()
    }
}

/// A [`ResNet`] with a batch of images and their classes, trained from the images
/// alone (the input does not require grad, so the gradients are the parameters').
pub struct ResNetCase<B: Backend> {
    /// The model (in training mode).
    pub model: ResNet<B>,
    /// The images `[N, C, H, W]`.
    pub input: Tensor<B>,
    /// One class per image.
    pub targets: Vec<i64>,
}

impl<B: Backend> ResNetCase<B> {
    /// The oracle's case from the bytes of `resnet.safetensors`: sizes from the metadata
    /// (`c_in`, `widths` and `blocks` as four comma-separated numbers, `classes`),
    /// parameters and buffers from `init/…`, the images from `input/x` and the classes
    /// from `input/targets`.
    pub fn from_oracle(backend: &B, bytes: &[u8]) -> Result<Self> {
        Self::from_file(backend, &TensorFile::from_bytes(bytes)?)
    }

    /// As [`ResNetCase::from_oracle`], from a decoded file.
    pub fn from_file(backend: &B, file: &TensorFile) -> Result<Self> {
        let four = |key: &str| -> Result<[usize; 4]> {
            let v = file.metadata(key).unwrap_or("");
            let parsed: Vec<usize> = v.split(',').filter_map(|x| x.trim().parse().ok()).collect();
            parsed.try_into().map_err(|_| {
                Error::invalid(
                    "ResNetCase::from_file",
                    "metadata",
                    format!("{key} = {v:?} is not four comma-separated sizes"),
                )
            })
        };
        let config = ResNetConfig {
            in_channels: file.metadata_usize("c_in")?,
            widths: four("widths")?,
            blocks: four("blocks")?,
            classes: file.metadata_usize("classes")?,
        };
        let model = ResNet::new(backend, config, &mut Philox::new(0))?;
        load_state_dict(&model, file, "init/")?;
        Ok(Self {
            model,
            input: file.tensor(backend, "input/x")?,
            targets: file.ints("input/targets")?.1.to_vec(),
        })
    }

    /// A model initialised from `Philox::new(seed)`, then a batch of `batch` standard
    /// normal images of size `hw` and their classes from the same stream.
    pub fn random(
        backend: &B,
        config: ResNetConfig,
        batch: usize,
        hw: [usize; 2],
        seed: u64,
    ) -> Result<Self> {
        let mut rng = Philox::new(seed);
        let model = ResNet::new(backend, config, &mut rng)?;
        let input = Tensor::randn(
            backend,
            [batch, config.in_channels, hw[0], hw[1]],
            0.0,
            1.0,
            &mut rng,
        )?;
        let targets = (0..batch)
            .map(|_| i64::from(rng.below(config.classes as u32)))
            .collect();
        Ok(Self {
            model,
            input,
            targets,
        })
    }

    /// The pinned case: ResNet-18 (the default config) from seed 18 with 32 images of
    /// 3×32×32 (the bench's step). Its exact gradient hash is `resnet18` in
    /// [`super::PINNED_HASHES`].
    pub fn pinned(backend: &B) -> Result<Self> {
        Self::random(backend, ResNetConfig::default(), 32, [32, 32], 18)
    }
}

impl<B: Backend> ReferenceCase<B> for ResNetCase<B> {
    fn name(&self) -> &'static str {
        "resnet18"
    }

    fn parameters(&self) -> Vec<Tensor<B>> {
        self.model.parameters()
    }

    fn forward_backward(&self) -> Result<Gradients<B>> {
        self.model.clear_grad();
        let logits = self.model.forward(&self.input)?;
        let loss = logits.cross_entropy(&self.targets, CrossEntropyOptions::default())?;
        loss.backward()?;
        collect_parameters(&self.model, loss, logits)
    }
}
