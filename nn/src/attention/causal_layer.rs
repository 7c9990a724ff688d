//! [`CausalTransformerLayer`]: the layer of a decoder-only (GPT-style) transformer.

use super::encoder_layer::{TransformerEncoderLayer, TransformerEncoderLayerConfig};
use crate::error::Result;
use exactgrad_autograd::{AttentionMask, Tensor};
use exactgrad_core::{Backend, Philox};

/// One layer of a decoder-only transformer (a GPT block): causal self-attention and a
/// feed-forward block, each with a residual connection and a layer norm, post-norm or
/// pre-norm (`norm_first`, GPT-2's choice).
///
/// PyTorch has no decoder-only layer (`nn.TransformerDecoderLayer` adds cross-attention
/// over an encoder's memory); the layer a GPT is built from there is
/// `nn.TransformerEncoderLayer` called with a causal mask, and this layer equals exactly
/// that composition:
///
/// ```text
/// layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout,
///                                    activation, layer_norm_eps, batch_first, norm_first, bias)
/// mask = nn.Transformer.generate_square_subsequent_mask(L)
/// y = layer(x, src_mask=mask, src_key_padding_mask=padding, is_causal=True)
/// ```
///
/// Its configuration, initialisation, parameters and `state_dict` keys
/// (`self_attn.in_proj_weight`, …, `norm2.bias`) and random streams (`dropout_rng`,
/// `self_attn.dropout_rng`) are those of [`TransformerEncoderLayer`], which it wraps under
/// the empty key, so a PyTorch `TransformerEncoderLayer`'s state dict loads into it.
/// Dropout (after attention, inside and after the feed-forward block, and on the
/// attention weights) draws from the layer's streams, keyed by
/// [`ModuleExt::seed_streams`](crate::ModuleExt::seed_streams).
///
/// ```
/// use exactgrad_autograd::Tensor;
/// use exactgrad_backends::ScalarRefBackend;
/// use exactgrad_core::Philox;
/// use exactgrad_nn::{
///     CausalTransformerLayer, FeedForwardActivation, ModuleExt, TransformerEncoderLayerConfig,
/// };
///
/// # fn main() -> exactgrad_nn::Result<()> {
/// let b = ScalarRefBackend;
/// // A GPT-2 block: pre-norm, GELU, a 4× feed-forward width, batch first.
/// let config = TransformerEncoderLayerConfig {
///     dim_feedforward: 64,
///     activation: FeedForwardActivation::Gelu,
///     norm_first: true,
///     batch_first: true,
///     ..TransformerEncoderLayerConfig::new(16, 4)
/// };
/// let block = CausalTransformerLayer::new(&b, config, &mut Philox::new(0))?;
/// block.seed_streams(1)?;
/// let x = Tensor::randn(&b, [2, 5, 16], 0.0, 1.0, &mut Philox::new(1))?;
/// assert_eq!(block.forward(&x)?.dims(), [2, 5, 16]);
/// # Ok(())
/// # }
/// ```
#[derive(crate::Module)]
pub struct CausalTransformerLayer<B: Backend> {
    #[module(rename = "")]
    layer: TransformerEncoderLayer<B>,
}

impl<B: Backend> CausalTransformerLayer<B> {
    /// A layer initialised as [`TransformerEncoderLayer::new`] initialises one.
    ///
    /// Fails when a size is 0, when `nhead` does not divide `d_model`, or when `dropout`
    /// is outside `[0, 1]`.
    pub fn new(
        backend: &B,
        config: TransformerEncoderLayerConfig,
        rng: &mut Philox,
    ) -> Result<Self> {
        Ok(Self {
            layer: TransformerEncoderLayer::new(backend, config, rng)?,
        })
    }

    /// The layer applied to `input` (`[N, L, E]` when `batch_first`, else `[L, N, E]`;
    /// `[L, E]` unbatched), each position attending to itself and the positions before.
    pub fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        self.layer.forward_causal(input, None)
    }

    /// [`forward`](Self::forward) with PyTorch's `src_key_padding_mask` `[N, S]` (padded
    /// positions are not attended to; PyTorch's boolean mask is
    /// [`AttentionMask::Block`]).
    pub fn forward_masked(
        &self,
        input: &Tensor<B>,
        key_padding_mask: Option<AttentionMask<'_, B>>,
    ) -> Result<Tensor<B>> {
        self.layer.forward_causal(input, key_padding_mask)
    }

    /// The wrapped encoder layer (its attention, linear layers, norms and configuration).
    pub fn layer(&self) -> &TransformerEncoderLayer<B> {
        &self.layer
    }

    /// The configuration.
    pub fn config(&self) -> TransformerEncoderLayerConfig {
        self.layer.config()
    }
}
