//! Multi-head attention and the transformer encoder layer, in PyTorch's layout.

use crate::error::{Error, Result};
use crate::init;
use crate::linear::Linear;
use crate::module::{join_name, Module};
use crate::norm::LayerNorm;
use exactgrad_autograd::{AttentionMask, GeluApproximation, Tensor};
use exactgrad_core::{Backend, Philox};
use std::fmt;
use std::sync::{Mutex, MutexGuard};

/// An attention mask in the convention of PyTorch's `nn.MultiheadAttention` and
/// `nn.TransformerEncoderLayer` (`attn_mask`, `src_mask`), of shape `[L, S]` or
/// `[N · num_heads, L, S]`.
///
/// Masks are constants: no gradient flows into them. Note that the boolean convention
/// is the opposite of [`AttentionMask::Bool`] of the functional operator, as it is in
/// PyTorch.
pub enum AttnMask<'a, B: Backend> {
    /// Non-zero where attention is **not** allowed (PyTorch's `True`).
    Bool(&'a Tensor<B>),
    /// Added to the scaled scores (`−∞` excludes a position).
    Float(&'a Tensor<B>),
}

impl<B: Backend> Clone for AttnMask<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: Backend> Copy for AttnMask<'_, B> {}

impl<B: Backend> fmt::Debug for AttnMask<'_, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttnMask::Bool(t) => f.debug_tuple("Bool").field(&t.dims()).finish(),
            AttnMask::Float(t) => f.debug_tuple("Float").field(&t.dims()).finish(),
        }
    }
}

/// Options of [`MultiheadAttention`], with PyTorch's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MultiheadAttentionConfig {
    /// Model width `E` (`embed_dim`); query, key and value all have this width.
    pub embed_dim: usize,
    /// Number of heads; must divide `embed_dim`.
    pub num_heads: usize,
    /// Dropout probability on the attention weights in training (default 0).
    pub dropout: f32,
    /// Whether the layer has `in_proj_bias` and `out_proj.bias` (default true).
    pub bias: bool,
    /// Inputs and output are `[N, L, E]` when true, `[L, N, E]` when false (PyTorch's
    /// default).
    pub batch_first: bool,
}

impl MultiheadAttentionConfig {
    /// PyTorch's defaults for the given width and head count.
    pub fn new(embed_dim: usize, num_heads: usize) -> Self {
        Self {
            embed_dim,
            num_heads,
            dropout: 0.0,
            bias: true,
            batch_first: false,
        }
    }
}

/// Multi-head attention (PyTorch's `nn.MultiheadAttention` with equal query, key and
/// value widths), on [`Tensor::scaled_dot_product_attention`].
///
/// Parameters, in `state_dict` order: `in_proj_weight` `[3E, E]` (the query, key and
/// value projections stacked), `in_proj_bias` `[3E]`, `out_proj.weight` `[E, E]`,
/// `out_proj.bias` `[E]` (the biases when built with `bias`).
///
/// Initialisation, as PyTorch: `in_proj_weight` from U(−a, a) with the Xavier bound
/// `a = √(6 / (E + 3E))`, then `out_proj.weight` from U(−1/√E, 1/√E), both drawn
/// row-major from the given generator; biases are zero. A generator for attention
/// dropout is seeded by one further `u64` drawn from it.
///
/// The forward pass returns the attention output only (PyTorch's
/// `need_weights=False`). With dropout 0 or outside training it runs the fused
/// operator; with dropout in training it forms the weights explicitly (matmul, softmax,
/// dropout, matmul).
pub struct MultiheadAttention<B: Backend> {
    in_proj_weight: Tensor<B>,
    in_proj_bias: Option<Tensor<B>>,
    out_proj: Linear<B>,
    config: MultiheadAttentionConfig,
    training: bool,
    rng: Mutex<Philox>,
}

impl<B: Backend> MultiheadAttention<B> {
    /// A layer initialised from `rng` (see the type's documentation).
    ///
    /// Fails when `embed_dim` or `num_heads` is 0, when `num_heads` does not divide
    /// `embed_dim`, or when `dropout` is outside `[0, 1]`.
    pub fn new(backend: &B, config: MultiheadAttentionConfig, rng: &mut Philox) -> Result<Self> {
        let op = "MultiheadAttention::new";
        let MultiheadAttentionConfig {
            embed_dim: e,
            num_heads: h,
            ..
        } = config;
        if e == 0 || h == 0 || e % h != 0 {
            return Err(Error::invalid(
                op,
                "num_heads",
                format!("embed_dim = {e} must be positive and divisible by num_heads = {h}"),
            ));
        }
        if !(0.0..=1.0).contains(&config.dropout) {
            return Err(Error::invalid(
                op,
                "dropout",
                format!("must be in [0, 1], got {}", config.dropout),
            ));
        }
        let leaf = |t: Tensor<B>| {
            t.requires_grad()
                .expect("a freshly created tensor is a leaf")
        };
        let xavier = (6.0 / (4 * e) as f64).sqrt() as f32;
        let in_proj_weight = leaf(init::uniform(backend, [3 * e, e], xavier, rng));
        let out_w = init::uniform(backend, [e, e], init::default_uniform_bound(e), rng);
        let in_proj_bias = config.bias.then(|| leaf(Tensor::zeros(backend, [3 * e])));
        let out_b = config.bias.then(|| Tensor::zeros(backend, [e]));
        let out_proj = Linear::from_tensors(&out_w, out_b.as_ref())?;
        let seed = rng.next_u64();
        Ok(Self {
            in_proj_weight,
            in_proj_bias,
            out_proj,
            config,
            training: true,
            rng: Mutex::new(Philox::new(seed)),
        })
    }

    /// The stacked query, key and value projection weights, `[3E, E]`.
    pub fn in_proj_weight(&self) -> &Tensor<B> {
        &self.in_proj_weight
    }

    /// The stacked projection biases, `[3E]`, if the layer has them.
    pub fn in_proj_bias(&self) -> Option<&Tensor<B>> {
        self.in_proj_bias.as_ref()
    }

    /// The output projection.
    pub fn out_proj(&self) -> &Linear<B> {
        &self.out_proj
    }

    /// The configuration.
    pub fn config(&self) -> MultiheadAttentionConfig {
        self.config
    }

    /// Reseeds the generator of attention dropout.
    pub fn set_dropout_seed(&self, seed: u64) {
        *lock(&self.rng) = Philox::new(seed);
    }

    /// Attention of `query` `[N, L, E]` over `key` and `value` `[N, S, E]` (`[L, N, E]`
    /// and `[S, N, E]` unless `batch_first`; `[L, E]` and `[S, E]` unbatched), giving
    /// `[N, L, E]` (same layout as the query).
    ///
    /// `key_padding_mask` `[N, S]` (`[S]` unbatched) is non-zero at key positions to
    /// ignore (PyTorch's `True`); `attn_mask` is described at [`AttnMask`]. A query row
    /// whose keys are all excluded gets a zero attention output from the fused operator
    /// (NaN on the explicit path that attention dropout takes in training).
    ///
    /// Fails when the shapes do not match the layer's width or each other, or when a mask
    /// has the wrong shape.
    pub fn forward_attention(
        &self,
        query: &Tensor<B>,
        key: &Tensor<B>,
        value: &Tensor<B>,
        key_padding_mask: Option<&Tensor<B>>,
        attn_mask: Option<AttnMask<'_, B>>,
    ) -> Result<Tensor<B>> {
        let op = "MultiheadAttention";
        let e = self.config.embed_dim;
        let h = self.config.num_heads;
        let hd = e / h;
        let rank = query.rank();
        if rank != 2 && rank != 3 || key.rank() != rank || value.rank() != rank {
            return Err(Error::invalid(
                op,
                "query/key/value",
                format!(
                    "expected query, key and value all 3-D (batched) or all 2-D (unbatched), got shapes {:?}, {:?} and {:?}",
                    query.dims(),
                    key.dims(),
                    value.dims()
                ),
            ));
        }
        // To [N, L, E].
        let to_batch_first = |t: &Tensor<B>| -> Result<Tensor<B>> {
            Ok(if rank == 2 {
                t.unsqueeze(0)?
            } else if self.config.batch_first {
                t.clone()
            } else {
                t.transpose(0, 1)?
            })
        };
        let (q, k, v) = (
            to_batch_first(query)?,
            to_batch_first(key)?,
            to_batch_first(value)?,
        );
        let (n, l) = (q.dims()[0], q.dims()[1]);
        let s = k.dims()[1];
        if q.dims()[2] != e
            || k.dims()[2] != e
            || v.dims()[2] != e
            || k.dims()[0] != n
            || v.dims()[0] != n
            || v.dims()[1] != s
        {
            return Err(Error::invalid(
                op,
                "query/key/value",
                format!(
                    "expected query [N, L, {e}], key and value [N, S, {e}] (batch_first = {}), got shapes {:?}, {:?} and {:?}",
                    self.config.batch_first,
                    query.dims(),
                    key.dims(),
                    value.dims()
                ),
            ));
        }
        let mask = build_mask(op, n, h, l, s, rank == 2, key_padding_mask, attn_mask)?;

        // Projections: rows [0, E), [E, 2E), [2E, 3E) of the stacked weight.
        let project = |x: &Tensor<B>, i: usize| -> Result<Tensor<B>> {
            let w = self.in_proj_weight.narrow(0, i * e, e)?;
            let b = match &self.in_proj_bias {
                Some(b) => Some(b.narrow(0, i * e, e)?),
                None => None,
            };
            // [N, L, E] -> [N, H, L, hd]
            let y = x.linear(&w, b.as_ref())?;
            let len = y.dims()[1];
            Ok(
                y.reshape(&[n as isize, len as isize, h as isize, hd as isize])?
                    .transpose(1, 2)?,
            )
        };
        let (qh, kh, vh) = (project(&q, 0)?, project(&k, 1)?, project(&v, 2)?);
        let mask_t = match &mask {
            Some(m) => Some(Tensor::from_vec(
                q.backend(),
                m.values.clone(),
                m.shape.clone(),
            )?),
            None => None,
        };
        let p = self.config.dropout;
        let o = if self.training && p > 0.0 {
            // Explicit weights so that dropout can act on them.
            let scale = (1.0 / (hd as f64).sqrt()) as f32;
            let mut scores = qh.matmul(&kh.transpose(-2, -1)?)?.mul_scalar(scale)?;
            if let (Some(m), Some(t)) = (&mask, &mask_t) {
                let additive = if m.additive {
                    t.clone()
                } else {
                    let vals: Vec<f32> = m
                        .values
                        .iter()
                        .map(|&a| if a != 0.0 { 0.0 } else { f32::NEG_INFINITY })
                        .collect();
                    Tensor::from_vec(q.backend(), vals, m.shape.clone())?
                };
                scores = scores.add(&additive)?;
            }
            let weights = scores.softmax(-1)?;
            let weights = weights.dropout(p, true, &mut lock(&self.rng))?;
            weights.matmul(&vh)?
        } else {
            let m = match (&mask, &mask_t) {
                (Some(m), Some(t)) if m.additive => Some(AttentionMask::Additive(t)),
                (Some(_), Some(t)) => Some(AttentionMask::Bool(t)),
                _ => None,
            };
            Tensor::scaled_dot_product_attention(&qh, &kh, &vh, m, false, None)?
        };
        // [N, H, L, hd] -> [N, L, E]
        let o = o
            .transpose(1, 2)?
            .reshape(&[n as isize, l as isize, e as isize])?;
        let y = self.out_proj.forward(&o)?;
        Ok(if rank == 2 {
            y.squeeze(0)?
        } else if self.config.batch_first {
            y
        } else {
            y.transpose(0, 1)?
        })
    }
}

fn lock(m: &Mutex<Philox>) -> MutexGuard<'_, Philox> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A combined mask, in the functional operator's convention: `additive` values added to
/// the scores, or (not additive) non-zero where a key takes part.
struct Mask {
    values: Vec<f32>,
    shape: Vec<usize>,
    additive: bool,
}

/// Combines PyTorch's `key_padding_mask` and `attn_mask` into one mask of shape
/// `[N, H', L, S]` (`H'` = H when the attention mask is per head, else 1).
#[allow(clippy::too_many_arguments)]
fn build_mask<B: Backend>(
    op: &'static str,
    n: usize,
    h: usize,
    l: usize,
    s: usize,
    unbatched: bool,
    key_padding_mask: Option<&Tensor<B>>,
    attn_mask: Option<AttnMask<'_, B>>,
) -> Result<Option<Mask>> {
    if key_padding_mask.is_none() && attn_mask.is_none() {
        return Ok(None);
    }
    let kpm = match key_padding_mask {
        None => None,
        Some(t) => {
            let ok = if unbatched {
                t.dims() == [s]
            } else {
                t.dims() == [n, s]
            };
            if !ok {
                let want = if unbatched {
                    format!("[{s}]")
                } else {
                    format!("[{n}, {s}]")
                };
                return Err(Error::invalid(
                    op,
                    "key_padding_mask",
                    format!(
                        "expected shape {want} (batch, key length), got {:?}",
                        t.dims()
                    ),
                ));
            }
            Some(t.to_vec())
        }
    };
    // (values, per_head, additive)
    let attn = match attn_mask {
        None => None,
        Some(m) => {
            let (t, additive) = match m {
                AttnMask::Bool(t) => (t, false),
                AttnMask::Float(t) => (t, true),
            };
            let per_head = if t.dims() == [l, s] {
                false
            } else if t.dims() == [n * h, l, s] {
                true
            } else {
                return Err(Error::invalid(
                    op,
                    "attn_mask",
                    format!(
                        "expected shape [{l}, {s}] or [{}, {l}, {s}] (N · num_heads, L, S), got {:?}",
                        n * h,
                        t.dims()
                    ),
                ));
            };
            Some((t.to_vec(), per_head, additive))
        }
    };
    let heads = match &attn {
        Some((_, true, _)) => h,
        _ => 1,
    };
    let additive = matches!(&attn, Some((_, _, true)));
    let mut values = Vec::with_capacity(n * heads * l * s);
    for b in 0..n {
        for hh in 0..heads {
            for i in 0..l {
                for j in 0..s {
                    let padded = kpm.as_ref().is_some_and(|k| k[b * s + j] != 0.0);
                    let (blocked, add) = match &attn {
                        None => (false, 0.0),
                        Some((vals, per_head, is_add)) => {
                            let idx = if *per_head {
                                ((b * h + hh) * l + i) * s + j
                            } else {
                                i * s + j
                            };
                            if *is_add {
                                (false, vals[idx])
                            } else {
                                (vals[idx] != 0.0, 0.0)
                            }
                        }
                    };
                    values.push(if additive {
                        if padded || blocked {
                            f32::NEG_INFINITY
                        } else {
                            add
                        }
                    } else if padded || blocked {
                        0.0
                    } else {
                        1.0
                    });
                }
            }
        }
    }
    Ok(Some(Mask {
        values,
        shape: vec![n, heads, l, s],
        additive,
    }))
}

impl<B: Backend> Module<B> for MultiheadAttention<B> {
    /// Self-attention of `input` without masks.
    fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        self.forward_attention(input, input, input, None, None)
    }

    fn visit_parameters(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor<B>)) {
        f(&join_name(prefix, "in_proj_weight"), &self.in_proj_weight);
        if let Some(b) = &self.in_proj_bias {
            f(&join_name(prefix, "in_proj_bias"), b);
        }
        self.out_proj
            .visit_parameters(&join_name(prefix, "out_proj"), f);
    }

    fn set_training(&mut self, training: bool) {
        self.training = training;
    }
}

impl<B: Backend> fmt::Debug for MultiheadAttention<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        write!(
            f,
            "MultiheadAttention(embed_dim={}, num_heads={}, dropout={}, bias={}, batch_first={})",
            c.embed_dim, c.num_heads, c.dropout, c.bias, c.batch_first
        )
    }
}

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
/// `u64` that seeds the layer's dropout.
pub struct TransformerEncoderLayer<B: Backend> {
    self_attn: MultiheadAttention<B>,
    linear1: Linear<B>,
    linear2: Linear<B>,
    norm1: LayerNorm<B>,
    norm2: LayerNorm<B>,
    config: TransformerEncoderLayerConfig,
    training: bool,
    rng: Mutex<Philox>,
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
        let linear1 = linear(e, ff, rng);
        let linear2 = linear(ff, e, rng);
        let norm =
            || LayerNorm::with_config(backend, &[e], config.layer_norm_eps, true, config.bias);
        let (norm1, norm2) = (norm()?, norm()?);
        let seed = rng.next_u64();
        Ok(Self {
            self_attn,
            linear1,
            linear2,
            norm1,
            norm2,
            config,
            training: true,
            rng: Mutex::new(Philox::new(seed)),
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

    /// Reseeds the dropout generators of the layer and of its attention.
    pub fn set_dropout_seed(&self, seed: u64) {
        let mut r = Philox::new(seed);
        self.self_attn.set_dropout_seed(r.next_u64());
        *lock(&self.rng) = r;
    }

    /// The layer applied to `src` (`[N, L, E]` when `batch_first`, else `[L, N, E]`;
    /// `[L, E]` unbatched) with PyTorch's `src_mask` and `src_key_padding_mask` (non-zero
    /// at padded positions), see [`MultiheadAttention::forward_attention`].
    pub fn forward_masked(
        &self,
        src: &Tensor<B>,
        src_mask: Option<AttnMask<'_, B>>,
        src_key_padding_mask: Option<&Tensor<B>>,
    ) -> Result<Tensor<B>> {
        let sa = |x: &Tensor<B>| -> Result<Tensor<B>> {
            let y = self
                .self_attn
                .forward_attention(x, x, x, src_key_padding_mask, src_mask)?;
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

    fn dropout(&self, x: &Tensor<B>) -> Result<Tensor<B>> {
        let p = self.config.dropout;
        if !self.training || p == 0.0 {
            return Ok(x.clone());
        }
        Ok(x.dropout(p, true, &mut lock(&self.rng))?)
    }
}

impl<B: Backend> Module<B> for TransformerEncoderLayer<B> {
    /// The layer without masks.
    fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        self.forward_masked(input, None, None)
    }

    fn visit_parameters(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor<B>)) {
        self.self_attn
            .visit_parameters(&join_name(prefix, "self_attn"), f);
        self.linear1
            .visit_parameters(&join_name(prefix, "linear1"), f);
        self.linear2
            .visit_parameters(&join_name(prefix, "linear2"), f);
        self.norm1.visit_parameters(&join_name(prefix, "norm1"), f);
        self.norm2.visit_parameters(&join_name(prefix, "norm2"), f);
    }

    fn set_training(&mut self, training: bool) {
        self.training = training;
        self.self_attn.set_training(training);
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

#[cfg(test)]
mod tests {
    use super::*;
    use exactgrad_backends::ScalarRefBackend;

    type T = Tensor<ScalarRefBackend>;

    fn close(a: &T, b: &T, tol: f32) {
        assert_eq!(a.dims(), b.dims());
        for (i, (x, y)) in a.to_vec().iter().zip(b.to_vec()).enumerate() {
            assert!((x - y).abs() <= tol, "element {i}: {x} vs {y}");
        }
    }

    fn mha(batch_first: bool, dropout: f32) -> MultiheadAttention<ScalarRefBackend> {
        let config = MultiheadAttentionConfig {
            batch_first,
            dropout,
            ..MultiheadAttentionConfig::new(8, 2)
        };
        MultiheadAttention::new(&ScalarRefBackend, config, &mut Philox::new(4)).unwrap()
    }

    fn randn(shape: &[usize], seed: u64) -> T {
        Tensor::randn(
            &ScalarRefBackend,
            shape.to_vec(),
            0.0,
            1.0,
            &mut Philox::new(seed),
        )
    }

    #[test]
    fn multihead_attention_names_and_init() {
        let m = mha(true, 0.0);
        let names: Vec<String> = m.named_parameters().into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            [
                "in_proj_weight",
                "in_proj_bias",
                "out_proj.weight",
                "out_proj.bias"
            ]
        );
        let xavier = (6.0f64 / 32.0).sqrt() as f32;
        let w = m.in_proj_weight().to_vec();
        assert_eq!(m.in_proj_weight().dims(), [24, 8]);
        assert!(w.iter().all(|v| v.abs() <= xavier) && w.iter().any(|v| v.abs() > 0.5 * xavier));
        assert!(m.in_proj_bias().unwrap().to_vec().iter().all(|&v| v == 0.0));
        assert!(m
            .out_proj()
            .bias()
            .unwrap()
            .to_vec()
            .iter()
            .all(|&v| v == 0.0));
        let bound = (1.0 / 8f64.sqrt()) as f32;
        assert!(m
            .out_proj()
            .weight()
            .to_vec()
            .iter()
            .all(|v| v.abs() <= bound));
        assert!(m
            .parameters()
            .iter()
            .all(|p| p.is_leaf() && p.is_requires_grad()));
        let nb = MultiheadAttentionConfig {
            bias: false,
            ..MultiheadAttentionConfig::new(8, 2)
        };
        let nb = MultiheadAttention::new(&ScalarRefBackend, nb, &mut Philox::new(1)).unwrap();
        assert_eq!(nb.named_parameters().len(), 2);
    }

    #[test]
    fn sequence_first_batch_first_and_unbatched_agree() {
        let (bf, sf) = (mha(true, 0.0), mha(false, 0.0));
        let x = randn(&[3, 5, 8], 1);
        let y = bf.forward(&x).unwrap();
        assert_eq!(y.dims(), [3, 5, 8]);
        let ys = sf.forward(&x.transpose(0, 1).unwrap()).unwrap();
        close(&ys.transpose(0, 1).unwrap().contiguous(), &y, 0.0);
        let x0 = x.narrow(0, 1, 1).unwrap().squeeze(0).unwrap();
        let y0 = bf.forward(&x0).unwrap();
        close(&y0, &y.narrow(0, 1, 1).unwrap().squeeze(0).unwrap(), 0.0);
    }

    #[test]
    fn masks_combine_as_in_pytorch() {
        let b = ScalarRefBackend;
        let m = mha(true, 0.0);
        let (q, kv) = (randn(&[2, 3, 8], 1), randn(&[2, 4, 8], 2));
        // Key padding [N, S] equals the same exclusion as a per-head boolean attn_mask.
        let kpm = Tensor::from_vec(&b, vec![0., 0., 1., 1., 0., 0., 0., 1.], [2, 4]).unwrap();
        let per_head: Vec<f32> = (0..2)
            .flat_map(|n| {
                let row = kpm.to_vec()[n * 4..n * 4 + 4].to_vec();
                std::iter::repeat_n(row, 2 * 3).flatten()
            })
            .collect();
        let bool_mask = Tensor::from_vec(&b, per_head.clone(), [4, 3, 4]).unwrap();
        let float_mask = Tensor::from_vec(
            &b,
            per_head
                .iter()
                .map(|&v| if v != 0.0 { f32::NEG_INFINITY } else { 0.0 })
                .collect(),
            [4, 3, 4],
        )
        .unwrap();
        let a = m.forward_attention(&q, &kv, &kv, Some(&kpm), None).unwrap();
        let c = m
            .forward_attention(&q, &kv, &kv, None, Some(AttnMask::Bool(&bool_mask)))
            .unwrap();
        let d = m
            .forward_attention(&q, &kv, &kv, None, Some(AttnMask::Float(&float_mask)))
            .unwrap();
        close(&a, &c, 0.0);
        close(&a, &d, 1e-6);
        // A 2-D [L, S] mask applies to every batch item and head.
        let causal = Tensor::from_vec(
            &b,
            (0..3)
                .flat_map(|i| (0..4).map(move |j| (j > i + 1) as u8 as f32))
                .collect(),
            [3, 4],
        )
        .unwrap();
        let both = m
            .forward_attention(&q, &kv, &kv, Some(&kpm), Some(AttnMask::Bool(&causal)))
            .unwrap();
        assert_eq!(both.dims(), [2, 3, 8]);
        // Wrong shapes are errors naming the mask.
        let bad = Tensor::zeros(&b, [2, 5]);
        let err = m
            .forward_attention(&q, &kv, &kv, Some(&bad), None)
            .unwrap_err();
        assert!(err.to_string().contains("key_padding_mask"), "{err}");
        let bad = Tensor::zeros(&b, [3, 3, 4]);
        let err = m
            .forward_attention(&q, &kv, &kv, None, Some(AttnMask::Bool(&bad)))
            .unwrap_err();
        assert!(err.to_string().contains("attn_mask"), "{err}");
        let err = m.forward(&randn(&[2, 3, 6], 3)).unwrap_err();
        assert!(err.to_string().contains("query"), "{err}");
    }

    #[test]
    fn attention_dropout_is_seeded_and_off_in_evaluation() {
        let x = randn(&[2, 5, 8], 1);
        let kpm = Tensor::from_vec(
            &ScalarRefBackend,
            vec![0., 0., 0., 1., 1., 0., 0., 0., 0., 0.],
            [2, 5],
        )
        .unwrap();
        let reference = mha(true, 0.0)
            .forward_attention(&x, &x, &x, Some(&kpm), None)
            .unwrap();
        // The explicit path (softmax, dropout) with a negligible p gives the fused result.
        let tiny = mha(true, 1e-12);
        let y = tiny
            .forward_attention(&x, &x, &x, Some(&kpm), None)
            .unwrap();
        close(&y, &reference, 1e-5);
        let half = mha(true, 0.5);
        half.set_dropout_seed(11);
        let a = half.forward(&x).unwrap();
        half.set_dropout_seed(11);
        let b = half.forward(&x).unwrap();
        close(&a, &b, 0.0);
        let c = half.forward(&x).unwrap();
        assert_ne!(a.to_vec(), c.to_vec());
        let mut half = half;
        half.set_training(false);
        close(
            &half.forward(&x).unwrap(),
            &mha(true, 0.0).forward(&x).unwrap(),
            0.0,
        );
    }

    fn layer(norm_first: bool, dropout: f32) -> TransformerEncoderLayer<ScalarRefBackend> {
        let config = TransformerEncoderLayerConfig {
            dim_feedforward: 16,
            dropout,
            activation: FeedForwardActivation::Gelu,
            batch_first: true,
            norm_first,
            ..TransformerEncoderLayerConfig::new(8, 2)
        };
        TransformerEncoderLayer::new(&ScalarRefBackend, config, &mut Philox::new(6)).unwrap()
    }

    #[test]
    fn encoder_layer_names_norms_and_dropout() {
        let post = layer(false, 0.0);
        let names: Vec<String> = post
            .named_parameters()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(
            names,
            [
                "self_attn.in_proj_weight",
                "self_attn.in_proj_bias",
                "self_attn.out_proj.weight",
                "self_attn.out_proj.bias",
                "linear1.weight",
                "linear1.bias",
                "linear2.weight",
                "linear2.bias",
                "norm1.weight",
                "norm1.bias",
                "norm2.weight",
                "norm2.bias"
            ]
        );
        let x = randn(&[2, 5, 8], 3);
        let y_post = post.forward(&x).unwrap();
        // Post-norm ends with a layer norm: rows have zero mean.
        for row in y_post.to_vec().chunks(8) {
            assert!(row.iter().sum::<f32>().abs() < 1e-4);
        }
        let pre = layer(true, 0.0);
        let y_pre = pre.forward(&x).unwrap();
        assert_ne!(y_pre.to_vec(), y_post.to_vec());
        // Same weights (same seed) with dropout: seeded in training, identity in evaluation.
        let mut drop = layer(true, 0.3);
        drop.set_dropout_seed(1);
        let a = drop.forward(&x).unwrap();
        drop.set_dropout_seed(1);
        close(&drop.forward(&x).unwrap(), &a, 0.0);
        assert_ne!(a.to_vec(), y_pre.to_vec());
        drop.set_training(false);
        close(&drop.forward(&x).unwrap(), &y_pre, 0.0);
        // Gradients reach every parameter.
        post.forward(&x)
            .unwrap()
            .sum()
            .unwrap()
            .backward(None, false)
            .unwrap();
        assert!(post.parameters().iter().all(|p| p.grad().is_some()));
        assert!(TransformerEncoderLayer::new(
            &ScalarRefBackend,
            TransformerEncoderLayerConfig::new(8, 3),
            &mut Philox::new(1)
        )
        .is_err());
    }
}
