//! Multi-head attention and the transformer encoder layer, in PyTorch's layout.
//!
//! - [`multihead`]: [`MultiheadAttention`] and its configuration, and how PyTorch's
//!   `attn_mask` and `key_padding_mask` combine into the mask of the fused operator;
//! - [`encoder_layer`]: [`TransformerEncoderLayer`] (self-attention and a feed-forward
//!   block with residual connections and layer norms) and its configuration;
//! - [`causal_layer`]: [`CausalTransformerLayer`], the layer of a decoder-only (GPT-style)
//!   transformer: the encoder layer with causal self-attention.
//!
//! Masks are [`AttentionMask`]s, the type of the functional operator: each variant says
//! what its values mean (PyTorch's boolean `attn_mask` and `key_padding_mask` are
//! [`AttentionMask::Block`]), see the table at the type.

pub mod causal_layer;
pub mod encoder_layer;
pub mod multihead;
#[cfg(test)]
mod tests;

pub use causal_layer::CausalTransformerLayer;
pub use encoder_layer::{
    FeedForwardActivation, TransformerEncoderLayer, TransformerEncoderLayerConfig,
};
pub use exactgrad_autograd::AttentionMask;
pub use multihead::{MultiheadAttention, MultiheadAttentionConfig};
