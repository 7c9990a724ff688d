//! The reference GPT-style decoder ([`Gpt`]) and its case ([`GptCase`]); see the parent
//! module for what they are for.

use super::{collect_parameters, Gradients, ReferenceCase};
use crate::attention::{
    FeedForwardActivation, TransformerEncoderLayer, TransformerEncoderLayerConfig,
};
use crate::checkpoint::{load_state_dict, TensorFile};
use crate::embedding::{Embedding, EmbeddingConfig};
use crate::error::{Error, Result};
use crate::linear::Linear;
use crate::module::{Module, ModuleExt, Visitor};
use crate::norm::LayerNorm;
use exactgrad_autograd::{CrossEntropyOptions, Tensor};
use exactgrad_core::{Backend, Philox};
use std::fmt;

/// Sizes of [`Gpt`]; the default is the bench's model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GptConfig {
    /// Tokens in the vocabulary (256: bytes).
    pub vocab: usize,
    /// Longest sequence, the rows of the position table (128).
    pub context: usize,
    /// Model width (256).
    pub d_model: usize,
    /// Attention heads (4).
    pub nhead: usize,
    /// Decoder blocks (6).
    pub layers: usize,
    /// Width of the feed-forward blocks (1024).
    pub dim_feedforward: usize,
}

impl Default for GptConfig {
    fn default() -> Self {
        Self {
            vocab: 256,
            context: 128,
            d_model: 256,
            nhead: 4,
            layers: 6,
            dim_feedforward: 1024,
        }
    }
}

/// A GPT-style language model: token and learned position embeddings, pre-norm
/// decoder blocks with causal self-attention and a GELU feed-forward block, a final layer
/// norm and a linear head without bias.
///
/// Each block is a [`TransformerEncoderLayer`] with `norm_first`, GELU, dropout 0 and
/// batch first, given the causal mask: `x = x + attn(norm1(x))`, `x = x + ff(norm2(x))`
/// (the decoder block of GPT-2). Parameters as PyTorch names them: `tok_emb.weight`,
/// `pos_emb.weight`, `layers.{i}.*` (see [`TransformerEncoderLayer`]), `norm.*`,
/// `head.weight`.
pub struct Gpt<B: Backend> {
    tok_emb: Embedding<B>,
    pos_emb: Embedding<B>,
    layers: Vec<TransformerEncoderLayer<B>>,
    norm: LayerNorm<B>,
    head: Linear<B>,
    config: GptConfig,
}

impl<B: Backend> Gpt<B> {
    /// A model initialised as PyTorch initialises its layers, drawing `tok_emb`,
    /// `pos_emb`, the layers in order and `head` from `rng`.
    ///
    /// Fails when a size is 0 or `nhead` does not divide `d_model`.
    pub fn new(backend: &B, config: GptConfig, rng: &mut Philox) -> Result<Self> {
        if config.layers == 0 {
            return Err(Error::invalid(
                "Gpt::new",
                "config",
                "layers must be positive",
            ));
        }
        let tok_emb = Embedding::new(
            backend,
            EmbeddingConfig::new(config.vocab, config.d_model),
            rng,
        )?;
        let pos_emb = Embedding::new(
            backend,
            EmbeddingConfig::new(config.context, config.d_model),
            rng,
        )?;
        let block = TransformerEncoderLayerConfig {
            dim_feedforward: config.dim_feedforward,
            dropout: 0.0,
            activation: FeedForwardActivation::Gelu,
            batch_first: true,
            norm_first: true,
            ..TransformerEncoderLayerConfig::new(config.d_model, config.nhead)
        };
        let layers = (0..config.layers)
            .map(|_| TransformerEncoderLayer::new(backend, block, rng))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            tok_emb,
            pos_emb,
            layers,
            norm: LayerNorm::new(backend, &[config.d_model])?,
            head: Linear::without_bias(backend, config.d_model, config.vocab, rng)?,
            config,
        })
    }

    /// The sizes.
    pub fn config(&self) -> GptConfig {
        self.config
    }

    /// The logits `[N, L, vocab]` of the token sequences `tokens` (row-major `[N, L]`,
    /// `L ≤ context`): position `i` sees the tokens `0 ..= i` of its sequence.
    ///
    /// Fails when the count does not match `shape`, `L` exceeds the context or a token
    /// is out of range.
    pub fn forward_tokens(&self, tokens: &[i64], shape: [usize; 2]) -> Result<Tensor<B>> {
        let [_, l] = shape;
        if l == 0 || l > self.config.context {
            return Err(Error::invalid(
                "Gpt::forward_tokens",
                "shape",
                format!("sequences of 1 to {} tokens, got {l}", self.config.context),
            ));
        }
        let positions: Vec<i64> = (0..l as i64).collect();
        let x = self
            .tok_emb
            .lookup(&(tokens, &shape))?
            .add(&self.pos_emb.lookup(&positions)?)?;
        // Causal self-attention (PyTorch's boolean mask, true where key j > query i, with
        // is_causal): the fused operator excludes those keys itself, with the bits a
        // `[L, L]` block mask gives, and no mask is built or read.
        let mut x = x;
        for layer in &self.layers {
            x = layer.forward_causal(&x, None)?;
        }
        self.head.forward(&self.norm.forward(&x)?)
    }
}

impl<B: Backend> Module<B> for Gpt<B> {
    /// [`Gpt::forward_tokens`] of `input` `[N, L]`, whole numbers stored as floats.
    fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        let dims = input.dims();
        if dims.len() != 2 {
            return Err(Error::invalid(
                "Gpt::forward",
                "input",
                format!("expected token indices [N, L], got shape {dims:?}"),
            ));
        }
        let mut tokens = Vec::with_capacity(input.numel());
        for (p, x) in input.to_vec()?.into_iter().enumerate() {
            if !(x.is_finite() && x.fract() == 0.0 && x.abs() < 9.0e15) {
                return Err(Error::invalid(
                    "Gpt::forward",
                    "input",
                    format!("element {p} is {x}, not a whole-number token"),
                ));
            }
            tokens.push(x as i64);
        }
        self.forward_tokens(&tokens, [dims[0], dims[1]])
    }

    fn visit(&self, v: &mut Visitor<'_, B>) {
        v.child("tok_emb", &self.tok_emb);
        v.child("pos_emb", &self.pos_emb);
        for (i, layer) in self.layers.iter().enumerate() {
            v.child(&format!("layers.{i}"), layer);
        }
        v.child("norm", &self.norm);
        v.child("head", &self.head);
    }
}

impl<B: Backend> fmt::Debug for Gpt<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gpt")
            .field("config", &self.config)
            .field("parameters", &self.num_parameters())
            .finish()
    }
}

/// A [`Gpt`] with a batch of token sequences and their next tokens: the cross entropy
/// over every position.
pub struct GptCase<B: Backend> {
    /// The model (in training mode).
    pub model: Gpt<B>,
    /// The input tokens, row-major `[N, L]`.
    pub tokens: Vec<i64>,
    /// The batch shape `[N, L]`.
    pub shape: [usize; 2],
    /// The token that follows each input token, row-major `[N, L]`.
    pub targets: Vec<i64>,
}

impl<B: Backend> GptCase<B> {
    /// The oracle's case from the bytes of `gpt.safetensors`: sizes from the metadata
    /// (`vocab`, `context`, `d_model`, `nhead`, `layers`, `dim_feedforward`), parameters
    /// from `init/…`, the tokens `[N, L]` from `input/tokens` and their next tokens from
    /// `input/targets`.
    pub fn from_oracle(backend: &B, bytes: &[u8]) -> Result<Self> {
        Self::from_file(backend, &TensorFile::from_bytes(bytes)?)
    }

    /// As [`GptCase::from_oracle`], from a decoded file.
    pub fn from_file(backend: &B, file: &TensorFile) -> Result<Self> {
        let config = GptConfig {
            vocab: file.metadata_usize("vocab")?,
            context: file.metadata_usize("context")?,
            d_model: file.metadata_usize("d_model")?,
            nhead: file.metadata_usize("nhead")?,
            layers: file.metadata_usize("layers")?,
            dim_feedforward: file.metadata_usize("dim_feedforward")?,
        };
        let model = Gpt::new(backend, config, &mut Philox::new(0))?;
        load_state_dict(&model, file, "init/")?;
        let (shape, tokens) = file.ints("input/tokens")?;
        let shape: [usize; 2] = shape.try_into().map_err(|_| {
            Error::invalid(
                "GptCase::from_file",
                "input/tokens",
                format!("expected shape [N, L], got {shape:?}"),
            )
        })?;
        let targets = file.ints("input/targets")?.1.to_vec();
        if targets.len() != tokens.len() {
            return Err(Error::invalid(
                "GptCase::from_file",
                "input/targets",
                format!("{} targets for {} tokens", targets.len(), tokens.len()),
            ));
        }
        Ok(Self {
            model,
            tokens: tokens.to_vec(),
            shape,
            targets,
        })
    }

    /// A model initialised from `Philox::new(seed)`, then `batch` sequences of
    /// `len + 1` uniform tokens from the same stream: the first `len` are the input,
    /// the last `len` the targets.
    pub fn random(
        backend: &B,
        config: GptConfig,
        batch: usize,
        len: usize,
        seed: u64,
    ) -> Result<Self> {
        let mut rng = Philox::new(seed);
        let model = Gpt::new(backend, config, &mut rng)?;
        let mut tokens = Vec::with_capacity(batch * len);
        let mut targets = Vec::with_capacity(batch * len);
        for _ in 0..batch {
            let seq: Vec<i64> = (0..=len)
                .map(|_| i64::from(rng.below(config.vocab as u32)))
                .collect();
            tokens.extend_from_slice(&seq[..len]);
            targets.extend_from_slice(&seq[1..]);
        }
        Ok(Self {
            model,
            tokens,
            shape: [batch, len],
            targets,
        })
    }

    /// The pinned case: the default config from seed 6 with 8 sequences of 128 tokens
    /// (the bench's step). Its exact gradient hash is `gpt` in [`super::PINNED_HASHES`].
    pub fn pinned(backend: &B) -> Result<Self> {
        Self::random(backend, GptConfig::default(), 8, 128, 6)
    }
}

impl<B: Backend> ReferenceCase<B> for GptCase<B> {
    fn name(&self) -> &'static str {
        "gpt"
    }

    fn parameters(&self) -> Vec<Tensor<B>> {
        self.model.parameters()
    }

    fn forward_backward(&self) -> Result<Gradients<B>> {
        self.model.clear_grad();
        let logits = self.model.forward_tokens(&self.tokens, self.shape)?;
        let vocab = self.model.config().vocab as isize;
        let loss = logits
            .reshape_infer(&[-1, vocab])?
            .cross_entropy(&self.targets, CrossEntropyOptions::default())?;
        loss.backward()?;
        collect_parameters(&self.model, loss, logits)
    }
}
