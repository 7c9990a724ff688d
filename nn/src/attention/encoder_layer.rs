//! [`TransformerEncoderLayer`] (PyTorch's `nn.TransformerEncoderLayer`).

use super::multihead::{MultiheadAttention, MultiheadAttentionConfig};
use crate::dropout::Dropout;
use crate::error::{Error, Result};
use crate::linear::Linear;
use crate::module::{Module as _, TrainingFlag};
use crate::norm::{LayerNorm, LayerNormConfig};
use crate::random::RandomStream;
use exactgrad_autograd::{AttentionMask, GeluApproximation, Tensor};
use exactgrad_core::{Backend, Philox};
use std::fmt;

/// The activation of a transformer layer's feed-forward block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FeedForwardActivation {
    /// `max(x, 0)` (PyTorch's default, `activation="relu"`).
    #[default]
    Relu,
    /// GELU, erf form (`activation="gelu"`).
    Gelu,
}

/// Options of [`TransformerEncoderLayer`], with PyTorch's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TransformerEncoderLayerConfig {
    /// Model width (`d_model`).
    pub d_model: usize,
    /// Number of attention heads (`nhead`).
    pub nhead: usize,
    /// Width of the feed-forward block (default 2048).
    pub dim_feedforward: usize,
    /// Dropout probability after attention, inside and after the feed-forward block, and
    /// on the attention weights (default 0.1, as PyTorch).
    pub dropout: f32,
    /// The feed-forward activation (default ReLU).
    pub activation: FeedForwardActivation,
    /// `eps` of both layer norms (default `1e-5`).
    pub layer_norm_eps: f32,
    /// `[N, L, E]` inputs when true, `[L, N, E]` when false (default).
    pub batch_first: bool,
    /// Pre-norm (`x + f(norm(x))`) when true, post-norm (`norm(x + f(x))`, default) when
    /// false.
    pub norm_first: bool,
    /// Whether the linear layers and layer norms have biases (default true).
    pub bias: bool,
}

impl TransformerEncoderLayerConfig {
    /// PyTorch's defaults for the given width and head count.
    pub fn new(d_model: usize, nhead: usize) -> Self {
        Self {
            d_model,
            nhead,
            dim_feedforward: 2048,
            dropout: 0.1,
            activation: FeedForwardActivation::Relu,
            layer_norm_eps: 1e-5,
            batch_first: false,
            norm_first: false,
            bias: true,
        }
    }
}

/// One transformer encoder layer (PyTorch's `nn.TransformerEncoderLayer`): self-attention
/// and a feed-forward block, each with a residual connection and a layer norm.
///
/// Post-norm: `x = norm1(x + sa(x))`, `x = norm2(x + ff(x))`; pre-norm (`norm_first`):
/// `x = x + sa(norm1(x))`, `x = x + ff(norm2(x))`, with
/// `sa(x) = dropout(self_attn(x, x, x))` and
/// `ff(x) = dropout(linear2(dropout(activation(linear1(x)))))`.
///
/// Parameters, in `state_dict` order: `self_attn.{in_proj_weight, in_proj_bias,
/// out_proj.weight, out_proj.bias}`, `linear1.{weight, bias}`, `linear2.{weight, bias}`,
/// `norm1.{weight, bias}`, `norm2.{weight, bias}`. Initialisation draws `self_attn`,
/// then `linear1`, then `linear2` (as [`Linear::new`]) from the generator, then one
/// `u64` (which keyed dropout before streams were keyed by path). Dropout draws from the
/// layer's stream `dropout_rng` and attention dropout from `self_attn.dropout_rng`, both
/// keyed by [`ModuleExt::seed_streams`](crate::ModuleExt::seed_streams).
#[derive(crate::Module)]
pub struct TransformerEncoderLayer<B: Backend> {
    self_attn: MultiheadAttention<B>,
    linear1: Linear<B>,
    linear2: Linear<B>,
    norm1: LayerNorm<B>,
    norm2: LayerNorm<B>,
    #[module(skip)]
    config: TransformerEncoderLayerConfig,
    training: TrainingFlag,
    #[module(rename = "dropout_rng")]
    rng: RandomStream,
}

impl<B: Backend> TransformerEncoderLayer<B> {
    /// A layer initialised from `rng` (see the type's documentation).
    ///
    /// Fails when a size is 0, when `nhead` does not divide `d_model`, or when `dropout`
    /// is outside `[0, 1]`.
    pub fn new(
        backend: &B,
        config: TransformerEncoderLayerConfig,
        rng: &mut Philox,
    ) -> Result<Self> {
        let e = config.d_model;
        let ff = config.dim_feedforward;
        if ff == 0 {
            return Err(Error::invalid(
                "TransformerEncoderLayer::new",
                "dim_feedforward",
                "must be positive",
            ));
        }
        let self_attn = MultiheadAttention::new(
            backend,
            MultiheadAttentionConfig {
                embed_dim: e,
                num_heads: config.nhead,
                dropout: config.dropout,
                bias: config.bias,
                batch_first: config.batch_first,
            },
            rng,
        )?;
        let linear = |i, o, rng: &mut Philox| {
            if config.bias {
                Linear::new(backend, i, o, rng)
            } else {
                Linear::without_bias(backend, i, o, rng)
            }
        };
        let linear1 = linear(e, ff, rng)?;
        let linear2 = linear(ff, e, rng)?;
        let norm = || {
            let config = LayerNormConfig {
                eps: config.layer_norm_eps,
                elementwise_affine: true,
                bias: config.bias,
            };
            LayerNorm::with_config(backend, &[e], config)
        };
        let (norm1, norm2) = (norm()?, norm()?);
        let _ = rng.next_u64();
        Ok(Self {
            self_attn,
            linear1,
            linear2,
            norm1,
            norm2,
            config,
            training: TrainingFlag::new(),
            rng: RandomStream::new(),
        })
    }

    /// The self-attention block.
    pub fn self_attn(&self) -> &MultiheadAttention<B> {
        &self.self_attn
    }

    /// The first feed-forward layer, `d_model → dim_feedforward`.
    pub fn linear1(&self) -> &Linear<B> {
        &self.linear1
    }

    /// The second feed-forward layer, `dim_feedforward → d_model`.
    pub fn linear2(&self) -> &Linear<B> {
        &self.linear2
    }

    /// The layer norm of the attention block.
    pub fn norm1(&self) -> &LayerNorm<B> {
        &self.norm1
    }

    /// The layer norm of the feed-forward block.
    pub fn norm2(&self) -> &LayerNorm<B> {
        &self.norm2
    }

    /// The configuration.
    pub fn config(&self) -> TransformerEncoderLayerConfig {
        self.config
    }

    /// The layer applied to `src` (`[N, L, E]` when `batch_first`, else `[L, N, E]`;
    /// `[L, E]` unbatched) with PyTorch's `src_mask` (`[L, S]` or `[N · nhead, L, S]`)
    /// and `src_key_padding_mask` (`[N, S]`); PyTorch's boolean masks are
    /// [`AttentionMask::Block`] (see [`MultiheadAttention::forward_attention`]).
    pub fn forward_masked(
        &self,
        src: &Tensor<B>,
        src_mask: Option<AttentionMask<'_, B>>,
        src_key_padding_mask: Option<AttentionMask<'_, B>>,
    ) -> Result<Tensor<B>> {
        self.run(src, src_mask, src_key_padding_mask, false)
    }

    /// The layer with causal self-attention: position `i` attends to positions `j ≤ i`
    /// only (PyTorch's `layer(src, src_mask=nn.Transformer.generate_square_subsequent_mask(L),
    /// src_key_padding_mask=…, is_causal=True)`), with an optional
    /// `src_key_padding_mask` `[N, S]` (see
    /// [`MultiheadAttention::forward_causal`]).
    pub fn forward_causal(
        &self,
        src: &Tensor<B>,
        src_key_padding_mask: Option<AttentionMask<'_, B>>,
    ) -> Result<Tensor<B>> {
        self.run(src, None, src_key_padding_mask, true)
    }

    fn run(
        &self,
        src: &Tensor<B>,
        src_mask: Option<AttentionMask<'_, B>>,
        src_key_padding_mask: Option<AttentionMask<'_, B>>,
        causal: bool,
    ) -> Result<Tensor<B>> {
        let _scope = crate::trace::module_scope::<B>(self);
        let sa = |x: &Tensor<B>| -> Result<Tensor<B>> {
            let y = if causal {
                self.self_attn
                    .forward_causal(x, x, x, src_key_padding_mask)?
            } else {
                self.self_attn
                    .forward_attention(x, x, x, src_key_padding_mask, src_mask)?
            };
            self.dropout(&y)
        };
        let ff = |x: &Tensor<B>| -> Result<Tensor<B>> {
            let y = self.linear1.forward(x)?;
            let y = match self.config.activation {
                FeedForwardActivation::Relu => y.relu()?,
                FeedForwardActivation::Gelu => y.gelu(GeluApproximation::None)?,
            };
            let y = self.dropout(&y)?;
            let y = self.linear2.forward(&y)?;
            self.dropout(&y)
        };
        if self.config.norm_first {
            let x = src.add(&sa(&self.norm1.forward(src)?)?)?;
            Ok(x.add(&ff(&self.norm2.forward(&x)?)?)?)
        } else {
            let x = self.norm1.forward(&src.add(&sa(src)?)?)?;
            self.norm2.forward(&x.add(&ff(&x)?)?)
        }
    }

    /// The layer without masks.
    pub fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        self.forward_masked(input, None, None)
    }

    fn dropout(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        Dropout::apply(
            "TransformerEncoderLayer",
            x,
            self.config.dropout,
            self.training.get(),
            &self.rng,
        )
    }
}

impl<B: Backend> fmt::Debug for TransformerEncoderLayer<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        write!(
            f,
            "TransformerEncoderLayer(d_model={}, nhead={}, dim_feedforward={}, dropout={}, activation={:?}, batch_first={}, norm_first={})",
            c.d_model, c.nhead, c.dim_feedforward, c.dropout, c.activation, c.batch_first, c.norm_first
        )
    }
}
