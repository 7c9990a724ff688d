//! The reference CRNN ([`Crnn`]) and its case with the CTC loss ([`CrnnCase`]); see the
//! parent module for what they are for.

use super::{collect, Gradients, ReferenceCase};
use crate::checkpoint::{load_state_dict, TensorFile};
use crate::conv::{Conv2d, Conv2dConfig};
use crate::error::{Error, Result};
use crate::linear::Linear;
use crate::module::{Module as _, ModuleExt};
use crate::rnn::{Lstm, RnnConfig};
use exactgrad_autograd::{CtcBatch, CtcLossOptions, CtcTargets, MaxPool2dOptions, Tensor};
use exactgrad_core::{Backend, Philox};

/// Sizes of [`Crnn`]; the default is the oracle's model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CrnnConfig {
    /// Channels of the first convolution (4).
    pub c1: usize,
    /// Channels of the second convolution (8).
    pub c2: usize,
    /// Height of the input images, a multiple of 4 (8).
    pub height: usize,
    /// Hidden size of each LSTM direction (12).
    pub hidden: usize,
    /// Output classes, the blank (class 0) included (6).
    pub classes: usize,
}

impl Default for CrnnConfig {
    fn default() -> Self {
        Self {
            c1: 4,
            c2: 8,
            height: 8,
            hidden: 12,
            classes: 6,
        }
    }
}

/// A convolutional recurrent network for line recognition (Shi, Bai and Yao 2017):
/// `conv1 (1→c1, 3×3, pad 1) → relu → max_pool2d(2) → conv2 (c1→c2) → relu →
/// max_pool2d(2)`, the height collapsed into the features (`[N, c2, H/4, W/4] →
/// [W/4, N, c2·H/4]`, feature `c·H/4 + h`), a two-layer bidirectional `lstm`, `fc`
/// (`2·hidden → classes`) and `log_softmax` over the classes. Parameters `conv1.*`,
/// `conv2.*`, `lstm.*` (PyTorch's LSTM names), `fc.*`.
#[derive(crate::Module, Debug)]
pub struct Crnn<B: Backend> {
    conv1: Conv2d<B>,
    conv2: Conv2d<B>,
    lstm: Lstm<B>,
    fc: Linear<B>,
    #[module(skip)]
    config: CrnnConfig,
}

impl<B: Backend> Crnn<B> {
    /// A model initialised as PyTorch initialises its layers, drawing `conv1`, `conv2`,
    /// `lstm` and `fc` in that order from `rng`.
    ///
    /// Fails when a size is 0 or the height is not a multiple of 4.
    pub fn new(backend: &B, config: CrnnConfig, rng: &mut Philox) -> Result<Self> {
        if config.height == 0 || !config.height.is_multiple_of(4) || config.classes == 0 {
            return Err(Error::invalid(
                "Crnn::new",
                "config",
                format!(
                    "height must be a positive multiple of 4 and classes positive, got {config:?}"
                ),
            ));
        }
        let conv = |i, o| Conv2dConfig {
            padding: [1, 1],
            ..Conv2dConfig::new(i, o, [3, 3])
        };
        let conv1 = Conv2d::new(backend, conv(1, config.c1), rng)?;
        let conv2 = Conv2d::new(backend, conv(config.c1, config.c2), rng)?;
        let lstm = Lstm::new(
            backend,
            RnnConfig {
                num_layers: 2,
                bidirectional: true,
                ..RnnConfig::new(config.c2 * (config.height / 4), config.hidden)
            },
            rng,
        )?;
        let fc = Linear::new(backend, 2 * config.hidden, config.classes, rng)?;
        Ok(Self {
            conv1,
            conv2,
            lstm,
            fc,
            config,
        })
    }

    /// The sizes.
    pub fn config(&self) -> CrnnConfig {
        self.config
    }

    /// The log-probabilities `[W/4, N, classes]` of images `[N, 1, height, W]`.
    pub fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        let pool = MaxPool2dOptions::new([2, 2]);
        let x = self.conv1.forward(input)?.relu()?.max_pool2d(pool)?;
        let x = self.conv2.forward(&x)?.relu()?.max_pool2d(pool)?;
        let (n, c, h, w) = (x.dims()[0], x.dims()[1], x.dims()[2], x.dims()[3]);
        let seq = x.permute(&[3, 0, 1, 2])?.reshape([w, n, c * h])?;
        let y = self.lstm.forward(&seq)?;
        self.fc.forward(&y)?.log_softmax(-1)
    }
}

/// A [`Crnn`] with a batch of line images, their label sequences and lengths, trained
/// with the mean CTC loss (blank 0).
pub struct CrnnCase<B: Backend> {
    /// The model.
    pub model: Crnn<B>,
    /// The images `[N, 1, height, W]`, a leaf that requires grad.
    pub input: Tensor<B>,
    /// Padded targets `[N, S]`, row-major (labels in `1..classes`).
    pub targets: Vec<i64>,
    /// `S`, the width of the padded targets.
    pub max_target_length: usize,
    /// Valid steps of each entry (at most `W/4`).
    pub input_lengths: Vec<usize>,
    /// Labels of each entry.
    pub target_lengths: Vec<usize>,
}

impl<B: Backend> CrnnCase<B> {
    /// The oracle's case from the bytes of `crnn.safetensors`: sizes from the metadata,
    /// parameters from `init/…`, the images from `input/x`, targets and lengths from
    /// `input/targets`, `input/input_lengths` and `input/target_lengths`.
    pub fn from_oracle(backend: &B, bytes: &[u8]) -> Result<Self> {
        Self::from_file(backend, &TensorFile::from_bytes(bytes)?)
    }

    /// As [`CrnnCase::from_oracle`], from a decoded file.
    pub fn from_file(backend: &B, file: &TensorFile) -> Result<Self> {
        let config = CrnnConfig {
            c1: file.metadata_usize("c1")?,
            c2: file.metadata_usize("c2")?,
            height: file.metadata_usize("height")?,
            hidden: file.metadata_usize("hidden")?,
            classes: file.metadata_usize("classes")?,
        };
        let model = Crnn::new(backend, config, &mut Philox::new(0))?;
        load_state_dict(&model, file, "init/")?;
        let (shape, targets) = file.ints("input/targets")?;
        let lengths = |name: &str| -> Result<Vec<usize>> {
            file.ints(name)?
                .1
                .iter()
                .map(|&v| {
                    usize::try_from(v).map_err(|_| {
                        Error::invalid(
                            "CrnnCase::from_file",
                            "lengths",
                            format!("{name} holds {v}"),
                        )
                    })
                })
                .collect()
        };
        Ok(Self {
            model,
            input: file.tensor(backend, "input/x")?.requires_grad()?,
            max_target_length: shape.get(1).copied().unwrap_or(0),
            targets: targets.to_vec(),
            input_lengths: lengths("input/input_lengths")?,
            target_lengths: lengths("input/target_lengths")?,
        })
    }

    /// The case of the benches' CRNN step: conv 1→16 and 16→32 over 1×32×128 line images,
    /// a two-layer bidirectional LSTM of 64, 11 classes (blank and labels 1…10), a batch
    /// of 8 with target lengths 5 to 10, from seed 5.
    pub fn bench(backend: &B) -> Result<Self> {
        let config = CrnnConfig {
            c1: 16,
            c2: 32,
            height: 32,
            hidden: 64,
            classes: 11,
        };
        Self::random(backend, config, 8, 128, (5, 10), 5)
    }

    /// A model initialised from `Philox::new(seed)`, a batch of `batch` standard normal
    /// images `height × width` and, from the same stream, target lengths uniform in
    /// `target_lengths` (inclusive) and labels uniform in `1..classes`; every input
    /// length is `width / 4` (for benches).
    pub fn random(
        backend: &B,
        config: CrnnConfig,
        batch: usize,
        width: usize,
        target_lengths: (usize, usize),
        seed: u64,
    ) -> Result<Self> {
        let mut rng = Philox::new(seed);
        let model = Crnn::new(backend, config, &mut rng)?;
        let input = Tensor::randn(
            backend,
            [batch, 1, config.height, width],
            0.0,
            1.0,
            &mut rng,
        )?
        .requires_grad()?;
        let (lo, hi) = target_lengths;
        if lo > hi || config.classes < 2 {
            return Err(Error::invalid(
                "CrnnCase::random",
                "target_lengths",
                format!(
                    "needs lo ≤ hi and at least 2 classes, got {target_lengths:?}, {} classes",
                    config.classes
                ),
            ));
        }
        let lens: Vec<usize> = (0..batch)
            .map(|_| lo + rng.below((hi - lo + 1) as u32) as usize)
            .collect();
        let mut targets = vec![0i64; batch * hi];
        for (b, &n) in lens.iter().enumerate() {
            for v in &mut targets[b * hi..b * hi + n] {
                *v = 1 + i64::from(rng.below(config.classes as u32 - 1));
            }
        }
        Ok(Self {
            model,
            input,
            targets,
            max_target_length: hi,
            input_lengths: vec![width / 4; batch],
            target_lengths: lens,
        })
    }

    /// The mean CTC loss (blank 0) of the log-probabilities `lp` against the case's
    /// targets.
    pub fn loss(&self, lp: &Tensor<B>) -> Result<Tensor<B>> {
        let batch = CtcBatch {
            targets: CtcTargets::Padded {
                labels: &self.targets,
                shape: [self.target_lengths.len(), self.max_target_length],
            },
            input_lengths: &self.input_lengths,
            target_lengths: &self.target_lengths,
        };
        lp.ctc_loss(batch, CtcLossOptions::default())
    }
}

impl<B: Backend> ReferenceCase<B> for CrnnCase<B> {
    fn name(&self) -> &'static str {
        "crnn"
    }

    fn parameters(&self) -> Vec<Tensor<B>> {
        self.model.parameters()
    }

    /// The gradients of the mean CTC loss; [`Gradients::logits`] holds the
    /// log-probabilities.
    fn forward_backward(&self) -> Result<Gradients<B>> {
        self.model.clear_grad();
        self.input.clear_grad();
        let lp = self.model.forward(&self.input)?;
        let loss = self.loss(&lp)?;
        loss.backward()?;
        collect(&self.model, &self.input, loss, lp)
    }
}
