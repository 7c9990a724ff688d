//! [`MultiheadAttention`] (PyTorch's `nn.MultiheadAttention`) on the fused
//! [`Tensor::scaled_dot_product_attention`], and the combination of its two masks.

use crate::dropout::Dropout;
use crate::error::{Error, Result};
use crate::init;
use crate::linear::Linear;
use crate::module::{Module as _, TrainingFlag};
use crate::random::RandomStream;
use exactgrad_autograd::{AttentionMask, AttentionOptions, Tensor};
use exactgrad_core::{Backend, Philox};
use std::fmt;

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
/// row-major from the given generator; biases are zero; then one further `u64` is drawn
/// (it keyed attention dropout before streams were keyed by path, and stays drawn so that
/// a seed gives the same parameters). Attention dropout draws from the stream
/// `dropout_rng`, keyed by [`ModuleExt::seed_streams`](crate::ModuleExt::seed_streams).
///
/// The forward pass returns the attention output only (PyTorch's
/// `need_weights=False`). With dropout 0 or outside training it runs the fused
/// operator; with dropout in training it forms the weights explicitly (matmul, softmax,
/// dropout, matmul).
#[derive(crate::Module)]
pub struct MultiheadAttention<B: Backend> {
    #[module(param)]
    in_proj_weight: Tensor<B>,
    #[module(param)]
    in_proj_bias: Option<Tensor<B>>,
    out_proj: Linear<B>,
    #[module(skip)]
    config: MultiheadAttentionConfig,
    training: TrainingFlag,
    #[module(rename = "dropout_rng")]
    rng: RandomStream,
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
        let three_e = e
            .checked_mul(3)
            .ok_or_else(|| Error::invalid(op, "embed_dim", format!("3 × {e} overflows usize")))?;
        let xavier = (6.0 / (4.0 * e as f64)).sqrt() as f32;
        let in_proj_weight = init::uniform_parameter(backend, [three_e, e], xavier, rng)?;
        let out_w = init::uniform(backend, [e, e], init::default_uniform_bound(e), rng)?;
        let (in_proj_bias, out_b) = if config.bias {
            (
                Some(Tensor::zeros(backend, [three_e])?.requires_grad()?),
                Some(Tensor::zeros(backend, [e])?),
            )
        } else {
            (None, None)
        };
        let out_proj = Linear::from_tensors(&out_w, out_b.as_ref())?;
        let _ = rng.next_u64();
        Ok(Self {
            in_proj_weight,
            in_proj_bias,
            out_proj,
            config,
            training: TrainingFlag::new(),
            rng: RandomStream::new(),
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

    /// Self-attention of `input` without masks.
    pub fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        self.forward_attention(input, input, input, None, None)
    }

    /// Attention of `query` `[N, L, E]` over `key` and `value` `[N, S, E]` (`[L, N, E]`
    /// and `[S, N, E]` unless `batch_first`; `[L, E]` and `[S, E]` unbatched), giving
    /// `[N, L, E]` (same layout as the query).
    ///
    /// `key_padding_mask` `[N, S]` (`[S]` unbatched) marks key positions per batch item;
    /// `attn_mask` is `[L, S]` or `[N · num_heads, L, S]`. Each is an [`AttentionMask`]:
    /// PyTorch's boolean masks (`True` = ignore the position) are
    /// [`AttentionMask::Block`], float masks [`AttentionMask::Additive`];
    /// [`AttentionMask::Allow`] gives the opposite boolean convention. The two masks
    /// combine as in PyTorch: a position excluded by either is excluded, and two additive
    /// masks add (`attn_mask ⊕ key_padding_mask`). Masks are constants here: no
    /// gradient flows into them. A query row whose keys are all excluded gets a zero
    /// attention output from the fused operator (NaN on the explicit path that attention
    /// dropout takes in training).
    ///
    /// Fails when the shapes do not match the layer's width or each other, or when a mask
    /// has the wrong shape.
    ///
    /// ```
    /// use exactgrad_autograd::{AttentionMask, Tensor};
    /// use exactgrad_backends::ScalarRefBackend;
    /// use exactgrad_core::Philox;
    /// use exactgrad_nn::{MultiheadAttention, MultiheadAttentionConfig};
    ///
    /// # fn main() -> exactgrad_nn::Result<()> {
    /// let b = ScalarRefBackend;
    /// let config = MultiheadAttentionConfig {
    ///     batch_first: true,
    ///     ..MultiheadAttentionConfig::new(4, 2)
    /// };
    /// let mha = MultiheadAttention::new(&b, config, &mut Philox::new(1))?;
    /// let x = Tensor::randn(&b, [2, 3, 4], 0.0, 1.0, &mut Philox::new(2))?;
    /// // PyTorch's key_padding_mask: True (1) at the padded key of sequence 1.
    /// let padding = Tensor::from_vec(&b, vec![0.0, 0.0, 0.0, 0.0, 0.0, 1.0], [2, 3])?;
    /// let y = mha.forward_attention(&x, &x, &x, Some(AttentionMask::Block(&padding)), None)?;
    /// assert_eq!(y.dims(), [2, 3, 4]);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// A bare tensor, whose boolean convention would be implicit, does not compile:
    ///
    /// ```compile_fail,E0308
    /// # use exactgrad_autograd::Tensor;
    /// # use exactgrad_backends::ScalarRefBackend;
    /// # use exactgrad_core::Philox;
    /// # use exactgrad_nn::{MultiheadAttention, MultiheadAttentionConfig};
    /// # let b = ScalarRefBackend;
    /// # let mha = MultiheadAttention::new(&b, MultiheadAttentionConfig::new(4, 2), &mut Philox::new(1)).unwrap();
    /// # let x = Tensor::zeros(&b, [3, 2, 4]).unwrap();
    /// # let padding = Tensor::zeros(&b, [2, 3]).unwrap();
    /// let y = mha.forward_attention(&x, &x, &x, Some(&padding), None);
    /// ```
    pub fn forward_attention(
        &self,
        query: &Tensor<B>,
        key: &Tensor<B>,
        value: &Tensor<B>,
        key_padding_mask: Option<AttentionMask<'_, B>>,
        attn_mask: Option<AttentionMask<'_, B>>,
    ) -> Result<Tensor<B>> {
        self.attend(query, key, value, key_padding_mask, attn_mask, false)
    }

    /// Causal attention: [`forward_attention`](Self::forward_attention) where query `i`
    /// attends to keys `j ≤ i` only (PyTorch's `attn_mask =
    /// nn.Transformer.generate_square_subsequent_mask(L)` with `is_causal=True`), with an
    /// optional `key_padding_mask`. Without a padding mask and outside attention dropout
    /// it runs the fused operator with `is_causal`, so no mask is built.
    ///
    /// Fails as [`forward_attention`](Self::forward_attention) does.
    pub fn forward_causal(
        &self,
        query: &Tensor<B>,
        key: &Tensor<B>,
        value: &Tensor<B>,
        key_padding_mask: Option<AttentionMask<'_, B>>,
    ) -> Result<Tensor<B>> {
        self.attend(query, key, value, key_padding_mask, None, true)
    }

    /// The attention of [`forward_attention`](Self::forward_attention), causal when
    /// `causal` (then `attn_mask` is `None`).
    fn attend(
        &self,
        query: &Tensor<B>,
        key: &Tensor<B>,
        value: &Tensor<B>,
        key_padding_mask: Option<AttentionMask<'_, B>>,
        attn_mask: Option<AttentionMask<'_, B>>,
        causal: bool,
    ) -> Result<Tensor<B>> {
        let _scope = crate::trace::module_scope::<B>(self);
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
        let p = self.config.dropout;
        let explicit = self.training.get() && p > 0.0;
        // Causal attention runs the fused operator's `is_causal` when nothing else masks;
        // otherwise the causal restriction is a `[L, S]` block mask (1 where `j > i`)
        // combined with the padding mask as PyTorch combines `attn_mask`.
        let fused_causal = causal && key_padding_mask.is_none() && !explicit;
        let causal_block = if causal && !fused_causal {
            let values = (0..l)
                .flat_map(|i| (0..s).map(move |j| if j > i { 1.0 } else { 0.0 }))
                .collect();
            Some(Tensor::from_vec(query.backend(), values, [l, s])?)
        } else {
            None
        };
        let attn_mask = match &causal_block {
            Some(t) => Some(AttentionMask::Block(t)),
            None => attn_mask,
        };
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
            y.reshape([n, len, h, hd])?.transpose(1, 2)
        };
        let (qh, kh, vh) = (project(&q, 0)?, project(&k, 1)?, project(&v, 2)?);
        // The mask as a tensor (additive for the explicit weights, which add it).
        let mask_t = match mask {
            Some(Mask {
                mut values,
                shape,
                additive,
            }) => {
                if explicit && !additive {
                    for a in &mut values {
                        *a = if *a != 0.0 { 0.0 } else { f32::NEG_INFINITY };
                    }
                }
                Some((
                    Tensor::from_vec(q.backend(), values, shape)?,
                    additive || explicit,
                ))
            }
            None => None,
        };
        let o = if explicit {
            // Explicit weights so that dropout can act on them.
            let scale = (1.0 / (hd as f64).sqrt()) as f32;
            let mut scores = qh.matmul(&kh.transpose(-2, -1)?)?.mul_scalar(scale)?;
            if let Some((t, _)) = &mask_t {
                scores = scores.add(t)?;
            }
            let weights = scores.softmax(-1)?;
            let weights = Dropout::apply("MultiheadAttention", &weights, p, true, &self.rng)?;
            weights.matmul(&vh)?
        } else {
            let m = match &mask_t {
                Some((t, true)) => Some(AttentionMask::Additive(t)),
                Some((t, false)) => Some(AttentionMask::Allow(t)),
                None => None,
            };
            let opts = AttentionOptions {
                mask: m,
                is_causal: fused_causal,
                ..AttentionOptions::default()
            };
            qh.scaled_dot_product_attention(&kh, &vh, opts)?
        };
        // [N, H, L, hd] -> [N, L, E]
        let o = o.transpose(1, 2)?.reshape([n, l, e])?;
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

/// A combined mask, in the functional operator's convention: `additive` values added to
/// the scores ([`AttentionMask::Additive`]), or (not additive) non-zero where a key takes
/// part ([`AttentionMask::Allow`]).
struct Mask {
    values: Vec<f32>,
    shape: Vec<usize>,
    additive: bool,
}

/// One mask's values with their meaning.
struct MaskValues {
    values: Vec<f32>,
    kind: MaskKind,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum MaskKind {
    Allow,
    Block,
    Additive,
}

impl MaskValues {
    fn new<B: Backend>(m: AttentionMask<'_, B>) -> Result<Self> {
        let kind = match m {
            AttentionMask::Allow(_) => MaskKind::Allow,
            AttentionMask::Block(_) => MaskKind::Block,
            AttentionMask::Additive(_) => MaskKind::Additive,
        };
        Ok(Self {
            values: m.tensor().to_vec()?,
            kind,
        })
    }

    /// Whether position `i` is excluded, and the value it adds to the score.
    fn at(&self, i: usize) -> (bool, f32) {
        let v = self.values[i];
        match self.kind {
            MaskKind::Allow => (v == 0.0, 0.0),
            MaskKind::Block => (v != 0.0, 0.0),
            MaskKind::Additive => (false, v),
        }
    }
}

/// Combines PyTorch's `key_padding_mask` and `attn_mask` into one mask of shape
/// `[N', H', L', S]` that broadcasts to the scores `[N, H, L, S]` (`N'` = N when a
/// padding mask or a per-head attention mask is given, else 1; `H'` = H when the
/// attention mask is per head, else 1; `L'` = L when an attention mask is given, else 1,
/// so a padding mask alone is `[N, 1, 1, S]`): `−∞` (or 0, when neither mask is additive)
/// where either excludes the position, else the sum of the additive values present
/// (`attn ⊕ key_padding`).
#[allow(clippy::too_many_arguments)]
fn build_mask<B: Backend>(
    op: &'static str,
    n: usize,
    h: usize,
    l: usize,
    s: usize,
    unbatched: bool,
    key_padding_mask: Option<AttentionMask<'_, B>>,
    attn_mask: Option<AttentionMask<'_, B>>,
) -> Result<Option<Mask>> {
    if key_padding_mask.is_none() && attn_mask.is_none() {
        return Ok(None);
    }
    let kpm = match key_padding_mask {
        None => None,
        Some(m) => {
            let t = m.tensor();
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
            Some(MaskValues::new(m)?)
        }
    };
    // (values, per_head)
    let attn = match attn_mask {
        None => None,
        Some(m) => {
            let t = m.tensor();
            let per_head = if t.dims() == [l, s] {
                false
            } else if n.checked_mul(h).is_some_and(|nh| t.dims() == [nh, l, s]) {
                true
            } else {
                return Err(Error::invalid(
                    op,
                    "attn_mask",
                    format!(
                        "expected shape [{l}, {s}] or [{}, {l}, {s}] (N · num_heads, L, S), got {:?}",
                        n as u128 * h as u128,
                        t.dims()
                    ),
                ));
            };
            Some((MaskValues::new(m)?, per_head))
        }
    };
    let heads = match &attn {
        Some((_, true)) => h,
        _ => 1,
    };
    let n = if kpm.is_some() || heads > 1 { n } else { 1 };
    let l = if attn.is_some() { l } else { 1 };
    let is_additive = |m: Option<&MaskValues>| m.is_some_and(|m| m.kind == MaskKind::Additive);
    let additive = is_additive(attn.as_ref().map(|(m, _)| m)) || is_additive(kpm.as_ref());
    let total = n
        .checked_mul(heads)
        .and_then(|x| x.checked_mul(l))
        .and_then(|x| x.checked_mul(s))
        .ok_or_else(|| {
            Error::invalid(
                op,
                "attn_mask",
                format!("the combined mask [{n}, {heads}, {l}, {s}] overflows usize"),
            )
        })?;
    let mut values = exactgrad_core::backend::try_vec_with_capacity(op, total)?;
    for b in 0..n {
        for hh in 0..heads {
            for i in 0..l {
                for j in 0..s {
                    let (padded, pad_add) = match &kpm {
                        None => (false, None),
                        Some(k) => {
                            let (excluded, add) = k.at(b * s + j);
                            (excluded, (k.kind == MaskKind::Additive).then_some(add))
                        }
                    };
                    let (blocked, attn_add) = match &attn {
                        None => (false, None),
                        Some((m, per_head)) => {
                            let idx = if *per_head {
                                ((b * h + hh) * l + i) * s + j
                            } else {
                                i * s + j
                            };
                            let (excluded, add) = m.at(idx);
                            (excluded, (m.kind == MaskKind::Additive).then_some(add))
                        }
                    };
                    values.push(if additive {
                        if padded || blocked {
                            f32::NEG_INFINITY
                        } else {
                            match (attn_add, pad_add) {
                                (Some(a), Some(p)) => a + p,
                                (Some(v), None) | (None, Some(v)) => v,
                                (None, None) => 0.0,
                            }
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
