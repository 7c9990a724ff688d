//! The reference transformer encoder ([`TransformerEncoder`]) and its case
//! ([`EncoderCase`]); see the parent module for what they are for.

use super::{collect, Gradients, ReferenceCase};
use crate::attention::{
    FeedForwardActivation, TransformerEncoderLayer, TransformerEncoderLayerConfig,
};
use crate::checkpoint::{load_state_dict, TensorFile};
use crate::error::{Error, Result};
use crate::linear::Linear;
use crate::module::{Module as _, ModuleExt};
use crate::norm::LayerNorm;
use exactgrad_autograd::{AttentionMask, CrossEntropyOptions, Tensor};
use exactgrad_core::{Backend, Philox};

/// Sizes of [`TransformerEncoder`]; the default is the oracle's model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EncoderConfig {
    /// Model width (32).
    pub d_model: usize,
    /// Attention heads (4).
    pub nhead: usize,
    /// Feed-forward width (64).
    pub dim_feedforward: usize,
    /// Number of token classes (8).
    pub classes: usize,
}

impl Default for EncoderConfig {
    fn default() -> Self {
        Self {
            d_model: 32,
            nhead: 4,
            dim_feedforward: 64,
            classes: 8,
        }
    }
}

/// The reference transformer encoder (see the module documentation): parameters
/// `layers.0.*` (post-norm), `layers.1.*` (pre-norm), `norm.*`, `head.*`. Batch first,
/// GELU, dropout 0.
#[derive(crate::Module, Debug)]
pub struct TransformerEncoder<B: Backend> {
    layers: Vec<TransformerEncoderLayer<B>>,
    norm: LayerNorm<B>,
    head: Linear<B>,
    #[module(skip)]
    config: EncoderConfig,
}

impl<B: Backend> TransformerEncoder<B> {
    /// A model initialised from `rng`: `layers.0`, `layers.1` (see
    /// [`TransformerEncoderLayer::new`]), then `head`.
    ///
    /// Fails when a size is 0 or `nhead` does not divide `d_model`.
    pub fn new(backend: &B, config: EncoderConfig, rng: &mut Philox) -> Result<Self> {
        let layers = [false, true]
            .into_iter()
            .map(|norm_first| {
                TransformerEncoderLayer::new(
                    backend,
                    TransformerEncoderLayerConfig {
                        dim_feedforward: config.dim_feedforward,
                        dropout: 0.0,
                        activation: FeedForwardActivation::Gelu,
                        batch_first: true,
                        norm_first,
                        ..TransformerEncoderLayerConfig::new(config.d_model, config.nhead)
                    },
                    rng,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        if config.classes == 0 {
            return Err(Error::invalid(
                "TransformerEncoder::new",
                "config",
                "classes must be positive",
            ));
        }
        Ok(Self {
            layers,
            norm: LayerNorm::new(backend, &[config.d_model])?,
            head: Linear::new(backend, config.d_model, config.classes, rng)?,
            config,
        })
    }

    /// The sizes.
    pub fn config(&self) -> EncoderConfig {
        self.config
    }

    /// The encoder layers.
    pub fn layers(&self) -> &[TransformerEncoderLayer<B>] {
        &self.layers
    }

    /// The logits `[N, S, classes]` of `input` `[N, S, d_model]`; `key_padding_mask`
    /// `[N, S]` marks the positions that attention ignores (PyTorch's boolean
    /// `src_key_padding_mask` is [`AttentionMask::Block`]).
    pub fn forward_masked(
        &self,
        input: &Tensor<B>,
        key_padding_mask: Option<AttentionMask<'_, B>>,
    ) -> Result<Tensor<B>> {
        let mut x = input.clone();
        for layer in &self.layers {
            x = layer.forward_masked(&x, None, key_padding_mask)?;
        }
        self.head.forward(&self.norm.forward(&x)?)
    }

    /// [`TransformerEncoder::forward_masked`] without a mask.
    pub fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        self.forward_masked(input, None)
    }
}

/// A [`TransformerEncoder`] with a batch of sequences, their padding and token classes.
pub struct EncoderCase<B: Backend> {
    /// The model (in training mode).
    pub model: TransformerEncoder<B>,
    /// The sequences `[N, S, d_model]`, a leaf that requires grad.
    pub input: Tensor<B>,
    /// `[N, S]`, 1 at padded positions (used as [`AttentionMask::Block`]).
    pub key_padding_mask: Tensor<B>,
    /// One class per token, row-major `[N, S]`; −100 (ignored) at padded positions.
    pub targets: Vec<i64>,
}

impl<B: Backend> EncoderCase<B> {
    /// The oracle's case from the bytes of `encoder.safetensors`: sizes from the
    /// metadata, parameters from `init/…`, the input from `input/x`, the padding from
    /// `input/key_padding_mask` and the classes from `input/targets`.
    pub fn from_oracle(backend: &B, bytes: &[u8]) -> Result<Self> {
        Self::from_file(backend, &TensorFile::from_bytes(bytes)?)
    }

    /// As [`EncoderCase::from_oracle`], from a decoded file.
    pub fn from_file(backend: &B, file: &TensorFile) -> Result<Self> {
        let config = EncoderConfig {
            d_model: file.metadata_usize("d_model")?,
            nhead: file.metadata_usize("nhead")?,
            dim_feedforward: file.metadata_usize("dim_feedforward")?,
            classes: file.metadata_usize("classes")?,
        };
        let model = TransformerEncoder::new(backend, config, &mut Philox::new(0))?;
        load_state_dict(&model, file, "init/")?;
        let (mshape, mask) = file.ints("input/key_padding_mask")?;
        let mask: Vec<f32> = mask.iter().map(|&m| (m != 0) as u8 as f32).collect();
        Ok(Self {
            model,
            input: file.tensor(backend, "input/x")?.requires_grad()?,
            key_padding_mask: Tensor::from_vec(backend, mask, mshape)?,
            targets: file.ints("input/targets")?.1.to_vec(),
        })
    }

    /// A model initialised from `Philox::new(seed)`, with `batch` standard normal
    /// sequences of length `seq`; sequence `i` is padded after
    /// `seq − (i · seq / (2 · batch))` tokens, and classes are drawn from the same
    /// stream (for benches).
    pub fn random(
        backend: &B,
        config: EncoderConfig,
        batch: usize,
        seq: usize,
        seed: u64,
    ) -> Result<Self> {
        let mut rng = Philox::new(seed);
        let model = TransformerEncoder::new(backend, config, &mut rng)?;
        let input = Tensor::randn(backend, [batch, seq, config.d_model], 0.0, 1.0, &mut rng)?
            .requires_grad()?;
        let mut mask = Vec::with_capacity(batch * seq);
        let mut targets = Vec::with_capacity(batch * seq);
        for i in 0..batch {
            let len = seq - i * seq / (2 * batch.max(1));
            for j in 0..seq {
                mask.push(if j < len { 0.0 } else { 1.0 });
                targets.push(if j < len {
                    i64::from(rng.below(config.classes as u32))
                } else {
                    -100
                });
            }
        }
        Ok(Self {
            model,
            input,
            key_padding_mask: Tensor::from_vec(backend, mask, [batch, seq])?,
            targets,
        })
    }
}

impl<B: Backend> ReferenceCase<B> for EncoderCase<B> {
    fn name(&self) -> &'static str {
        "encoder"
    }

    fn parameters(&self) -> Vec<Tensor<B>> {
        self.model.parameters()
    }

    fn forward_backward(&self) -> Result<Gradients<B>> {
        self.model.clear_grad();
        self.input.clear_grad();
        let logits = self.model.forward_masked(
            &self.input,
            Some(AttentionMask::Block(&self.key_padding_mask)),
        )?;
        let classes = self.model.config().classes as isize;
        let loss = logits
            .reshape_infer(&[-1, classes])?
            .cross_entropy(&self.targets, CrossEntropyOptions::default())?;
        loss.backward()?;
        collect(&self.model, &self.input, loss, logits)
    }
}
