//! Scaled dot-product attention: a fused operator whose backward recomputes the attention
//! weights instead of saving them (Dao et al. 2022).
//!
//! With `Q: [B, L, E]`, `K: [B, S, E]`, `V: [B, S, Ev]` (batch dimensions broadcast and
//! folded into `B`), every product on the backend's matmul kernel (canonical GEMM) and
//! the softmax on its softmax row kernels:
//!
//! forward:
//! 1. `T = Q·Kᵀ`; `S_ij = T_ij ⊗ scale`, then `⊕ M_ij` for an additive mask; `−∞` where
//!    an [`AttentionMask::Allow`] mask is 0, where an [`AttentionMask::Block`] mask is
//!    non-zero or, when causal, where `j > i`
//! 2. `P = softmax(S)` by rows; a row whose scores are all `−∞` gives `P = 0` (as
//!    PyTorch 2.15.0's math path, `_safe_softmax`)
//! 3. `O = P·V`
//!
//! backward (`dO` the incoming gradient; `P` recomputed by steps 1–2):
//! - `dV = Pᵀ·dO`, `dP = dO·Vᵀ`, `dS = softmax_backward(P, dP)`
//! - `dQ = (dS·K) ⊗ scale`, `dK = (dSᵀ·Q) ⊗ scale`
//! - an additive mask that requires grad gets `dS` summed (Σ64) over the dimensions it
//!   was broadcast along.

use super::sum_to;
use crate::engine::{record_with, Saved};
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::trace::{OpInfo, Value};
use exactgrad_core::backend::MatmulSpec;
use exactgrad_core::kernels::{AttentionScoresSpec, ScoreMask};
use exactgrad_core::{Backend, Layout, Shape, UnaryOp, ViewOf};
use std::fmt;

/// An attention mask, broadcastable to the scores' shape `[…, L, S]`, for
/// [`Tensor::scaled_dot_product_attention`] and for the attention layers of
/// `exactgrad-nn`. Each variant says what its values mean, so a mask is read the same way
/// by every function that takes it.
///
/// | PyTorch argument | variant |
/// |---|---|
/// | `F.scaled_dot_product_attention(attn_mask=)`, boolean (`True` = takes part) | [`AttentionMask::Allow`] |
/// | `nn.MultiheadAttention(attn_mask=)`, boolean (`True` = not allowed) | [`AttentionMask::Block`] |
/// | `nn.MultiheadAttention(key_padding_mask=)`, boolean (`True` = padding, ignored) | [`AttentionMask::Block`] |
/// | `nn.TransformerEncoderLayer(src_mask=, src_key_padding_mask=)`, boolean | [`AttentionMask::Block`] |
/// | any of these as a float mask (added to the scores) | [`AttentionMask::Additive`] |
///
/// A boolean mask is a tensor of zeros and ones (any non-zero value counts as one). There
/// is no `Bool` variant, whose meaning would depend on the function (`docs/api.md` §3):
///
/// ```compile_fail,E0599
/// # use exactgrad_autograd::{AttentionMask, Tensor};
/// # use exactgrad_backends::ScalarRefBackend;
/// # let m = Tensor::ones(&ScalarRefBackend, [2, 2]).unwrap();
/// let mask = AttentionMask::Bool(&m);
/// ```
pub enum AttentionMask<'a, B: Backend> {
    /// Positions whose value is non-zero take part; the others are excluded (score
    /// `−∞`).
    Allow(&'a Tensor<B>),
    /// Positions whose value is non-zero are excluded (score `−∞`); the others take
    /// part.
    Block(&'a Tensor<B>),
    /// Added to the scaled scores (`−∞` excludes a position). In
    /// [`Tensor::scaled_dot_product_attention`] it receives a gradient when it requires
    /// one.
    Additive(&'a Tensor<B>),
}

impl<B: Backend> Clone for AttentionMask<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: Backend> Copy for AttentionMask<'_, B> {}

impl<B: Backend> fmt::Debug for AttentionMask<'_, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttentionMask::Allow(t) => f.debug_tuple("Allow").field(t).finish(),
            AttentionMask::Block(t) => f.debug_tuple("Block").field(t).finish(),
            AttentionMask::Additive(t) => f.debug_tuple("Additive").field(t).finish(),
        }
    }
}

impl<'a, B: Backend> AttentionMask<'a, B> {
    /// The mask tensor.
    pub fn tensor(&self) -> &'a Tensor<B> {
        match *self {
            AttentionMask::Allow(t) | AttentionMask::Block(t) | AttentionMask::Additive(t) => t,
        }
    }

    fn kind(&self) -> MaskKind {
        match self {
            AttentionMask::Allow(_) => MaskKind::Allow,
            AttentionMask::Block(_) => MaskKind::Block,
            AttentionMask::Additive(_) => MaskKind::Additive,
        }
    }
}

/// The arguments of [`Tensor::scaled_dot_product_attention`] after query, key and value
/// (PyTorch's `attn_mask`, `is_causal` and `scale`; no dropout), with PyTorch's
/// defaults: no mask, not causal, `scale = 1/√E`.
///
/// ```
/// use exactgrad_autograd::{AttentionMask, AttentionOptions, Tensor};
/// use exactgrad_backends::ScalarRefBackend;
///
/// # fn main() -> exactgrad_autograd::Result<()> {
/// let b = ScalarRefBackend;
/// let q = Tensor::from_vec(&b, vec![1.0, 0.0, 0.0, 1.0], [2, 2])?;
/// let v = Tensor::from_vec(&b, vec![1.0, 2.0, 3.0, 4.0], [2, 2])?;
/// // Query 0 may only look at key 0, query 1 at both keys.
/// let allow = Tensor::from_vec(&b, vec![1.0, 0.0, 1.0, 1.0], [2, 2])?;
/// let opts = AttentionOptions::masked(AttentionMask::Allow(&allow));
/// let o = q.scaled_dot_product_attention(&q, &v, opts)?;
/// assert_eq!(o.to_vec()?[..2], [1.0, 2.0]);
/// // The same restriction as PyTorch's causal attention.
/// let causal = q.scaled_dot_product_attention(&q, &v, AttentionOptions::causal())?;
/// assert_eq!(causal.to_vec()?, o.to_vec()?);
/// # Ok(())
/// # }
/// ```
pub struct AttentionOptions<'a, B: Backend> {
    /// A mask broadcastable to the scores `[…, L, S]` (see [`AttentionMask`]).
    pub mask: Option<AttentionMask<'a, B>>,
    /// Query `i` attends to keys `j ≤ i` only; excludes `mask`, as in PyTorch.
    pub is_causal: bool,
    /// The factor of the scores; `None` means `1/√E` (rounded from f64).
    pub scale: Option<f32>,
}

borrowed_options!(AttentionOptions {
    mask,
    is_causal,
    scale
});

impl<B: Backend> Default for AttentionOptions<'_, B> {
    fn default() -> Self {
        Self {
            mask: None,
            is_causal: false,
            scale: None,
        }
    }
}

impl<'a, B: Backend> AttentionOptions<'a, B> {
    /// The defaults with `mask`.
    pub fn masked(mask: AttentionMask<'a, B>) -> Self {
        Self {
            mask: Some(mask),
            ..Self::default()
        }
    }

    /// The defaults with `is_causal = true`.
    pub fn causal() -> Self {
        Self {
            is_causal: true,
            ..Self::default()
        }
    }

    /// These options with an explicit scale.
    pub fn scale(self, scale: f32) -> Self {
        Self {
            scale: Some(scale),
            ..self
        }
    }
}

/// The mask kinds as the fused operator stores them.
#[derive(Clone, Copy, PartialEq, Eq)]
enum MaskKind {
    Allow,
    Block,
    Additive,
}

/// Sizes of one attention call: `batch` matrices of `L × E` queries, `S × E` keys and
/// `S × Ev` values.
#[derive(Clone, Copy, Debug)]
struct Dims {
    batch: usize,
    l: usize,
    s: usize,
    e: usize,
    ev: usize,
}

/// The batch stride `rows · cols` of one matrix of an operand. Exact when the batch is
/// not empty (every operand, a broadcast view of at most `MAX_ELEMENTS` elements, holds
/// such a matrix); an empty batch multiplies nothing and may have matrices whose size
/// alone overflows, so the product saturates.
fn mat(rows: usize, cols: usize) -> usize {
    rows.saturating_mul(cols)
}

/// `out[b] = a[b] · b[b]` for contiguous-in-storage operands given by their strides
/// (offset 0), on the backend's matmul kernel.
#[allow(clippy::too_many_arguments)]
fn bmm<B: Backend>(
    be: &B,
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
    a: ViewOf<'_, B>,
    a_strides: [usize; 3],
    b: ViewOf<'_, B>,
    b_strides: [usize; 3],
) -> Result<B::Storage> {
    // The product writes every output (each an accumulator from +0).
    let mut out = be.uninit(batch * m * n)?;
    if batch * m * n > 0 {
        let spec = MatmulSpec {
            batch,
            m,
            k,
            n,
            a_offset: 0,
            a_strides,
            b_offset: 0,
            b_strides,
        };
        be.matmul(&spec, a, b, B::view_mut(&mut out))?;
    }
    Ok(out)
}

/// Steps 1–2: the attention weights `P` (`[batch, L, S]`, contiguous) from contiguous `q`
/// and `k`.
#[allow(clippy::too_many_arguments)]
fn attention_weights<B: Backend>(
    be: &B,
    d: Dims,
    qs: ViewOf<'_, B>,
    ks: ViewOf<'_, B>,
    mask: Option<(MaskKind, ViewOf<'_, B>, &Layout)>,
    causal: bool,
    scale: f32,
) -> Result<B::Storage> {
    let Dims { batch, l, s, e, .. } = d;
    let mut scores = bmm(
        be,
        batch,
        l,
        e,
        s,
        qs,
        [mat(l, e), e, 1],
        ks,
        [mat(s, e), 1, e],
    )?;
    // x = (T ⊗ scale) [⊕ M | −∞ where M = 0], then −∞ above the diagonal if causal.
    let spec = AttentionScoresSpec {
        rows: batch * l,
        l,
        s,
        scale,
        causal,
    };
    let kind = |k: MaskKind| match k {
        MaskKind::Additive => ScoreMask::Additive,
        MaskKind::Allow => ScoreMask::Allow,
        MaskKind::Block => ScoreMask::Block,
    };
    be.attention_scores(
        &spec,
        B::view_mut(&mut scores),
        mask.map(|(k, m, lay)| (kind(k), m, lay)),
    )?;
    let rows = batch * l;
    let mut p = be.uninit(rows * s)?;
    if rows * s > 0 {
        be.softmax(B::view(&scores), rows, s, false, B::view_mut(&mut p))?;
    }
    // Rows that every position is excluded from give zero weights.
    let sc = B::to_host(B::view(&scores))?;
    let excluded: Vec<usize> = (0..rows)
        .filter(|&r| {
            sc[r * s..(r + 1) * s]
                .iter()
                .all(|&v| v == f32::NEG_INFINITY)
        })
        .collect();
    if !excluded.is_empty() {
        B::with_host_mut(B::view_mut(&mut p), |pm| {
            for r in excluded {
                pm[r * s..(r + 1) * s].fill(0.0);
            }
        })?;
    }
    Ok(p)
}

impl<B: Backend> Tensor<B> {
    /// Scaled dot-product attention (PyTorch's
    /// `nn.functional.scaled_dot_product_attention`, math path): `softmax(Q·Kᵀ·scale +
    /// mask)·V` for `self` the query `[..., L, E]`, `key [..., S, E]`, `value [..., S, Ev]`, whose
    /// batch dimensions broadcast; the output is `[..., L, Ev]`.
    ///
    /// The options ([`AttentionOptions`]): `mask` broadcasts to `[..., L, S]` (see
    /// [`AttentionMask`]); `is_causal` lets query `i` attend to keys `j ≤ i` only (and
    /// excludes an explicit mask, as PyTorch); `scale` defaults to `1/√E`. A query that no key may attend to gets a zero output
    /// and zero gradients. The backward pass recomputes the attention weights with the
    /// softmax row kernel instead of saving them; the exact order of operations is in
    /// the module documentation.
    ///
    /// Fails when an operand has fewer than 2 dimensions, when the embedding sizes of
    /// `query` and `key` or the sequence lengths of `key` and `value` differ, when the
    /// batch dimensions do not broadcast, when the mask does not broadcast to
    /// `[..., L, S]`, or when both a mask and `is_causal` are given.
    pub fn scaled_dot_product_attention(
        &self,
        key: &Tensor<B>,
        value: &Tensor<B>,
        opts: AttentionOptions<'_, B>,
    ) -> Result<Tensor<B>> {
        let _public = crate::engine::PublicOp::new("scaled_dot_product_attention");
        let op = "scaled_dot_product_attention";
        let query = self;
        let AttentionOptions {
            mask,
            is_causal,
            scale,
        } = opts;
        let (rq, rk, rv) = (query.rank(), key.rank(), value.rank());
        if rq < 2 || rk < 2 || rv < 2 {
            return Err(Error::invalid(
                op,
                "query/key/value",
                format!(
                    "expects query, key and value of at least 2 dimensions, got shapes {:?}, {:?} and {:?}",
                    query.dims(),
                    key.dims(),
                    value.dims()
                ),
            ));
        }
        let (l, e) = (query.dims()[rq - 2], query.dims()[rq - 1]);
        let (s, ek) = (key.dims()[rk - 2], key.dims()[rk - 1]);
        let (sv, ev) = (value.dims()[rv - 2], value.dims()[rv - 1]);
        if ek != e {
            return Err(Error::mismatch(
                op,
                query.dims(),
                key.dims(),
                format!("query and key must have the same embedding size (last dimension), got {e} and {ek}"),
            ));
        }
        if sv != s {
            return Err(Error::mismatch(
                op,
                key.dims(),
                value.dims(),
                format!("key and value must have the same sequence length (second-to-last dimension), got {s} and {sv}"),
            ));
        }
        let batch_err = || {
            Error::invalid(
                op,
                "query/key/value",
                format!(
                    "the batch dimensions of query {:?}, key {:?} and value {:?} cannot be broadcast together",
                    query.dims(),
                    key.dims(),
                    value.dims()
                ),
            )
        };
        let bqk = Shape::broadcast(op, &query.dims()[..rq - 2], &key.dims()[..rk - 2])
            .map_err(|_| batch_err())?;
        let batch_shape =
            Shape::broadcast(op, &bqk, &value.dims()[..rv - 2]).map_err(|_| batch_err())?;
        if is_causal && mask.is_some() {
            return Err(Error::invalid(
                op,
                "mask",
                "an explicit mask must not be given together with is_causal = true",
            ));
        }
        let mut score_shape = batch_shape.to_vec();
        score_shape.extend([l, s]);
        // Every buffer of the computation (scores and weights, output) must have a
        // representable size.
        Shape::from(score_shape.as_slice()).numel_for(op)?;
        let mut out_shape = batch_shape.to_vec();
        out_shape.extend([l, ev]);
        Shape::from(out_shape).numel_for(op)?;
        let mask = match mask {
            None => None,
            Some(m) => {
                let (kind, t) = (m.kind(), m.tensor());
                if t.layout().broadcast_to(op, &score_shape).is_err() {
                    return Err(Error::mismatch(
                        op,
                        t.dims(),
                        &score_shape,
                        format!(
                            "the attention mask must broadcast to the scores' shape [..., L, S] = {score_shape:?} (query {:?}, key {:?})",
                            query.dims(),
                            key.dims()
                        ),
                    ));
                }
                Some((kind, t))
            }
        };
        let scale = scale.unwrap_or_else(|| (1.0 / (e as f64).sqrt()) as f32);
        let expand = |t: &Tensor<B>, a: usize, b: usize| {
            let mut shape = batch_shape.to_vec();
            shape.extend([a, b]);
            t.expand(&shape)
        };
        let (q, k, v) = (
            expand(query, l, e)?,
            expand(key, s, e)?,
            expand(value, s, ev)?,
        );
        let d = Dims {
            batch: batch_shape.numel(),
            l,
            s,
            e,
            ev,
        };
        sdpa(op, &q, &k, &v, mask, is_causal, scale, d, score_shape)
    }
}

/// The fused operator on operands with equal batch dimensions.
#[allow(clippy::too_many_arguments)]
fn sdpa<B: Backend>(
    op: &'static str,
    q: &Tensor<B>,
    k: &Tensor<B>,
    v: &Tensor<B>,
    mask: Option<(MaskKind, &Tensor<B>)>,
    causal: bool,
    scale: f32,
    d: Dims,
    score_shape: Vec<usize>,
) -> Result<Tensor<B>> {
    let be = q.backend();
    let mask_layout = match mask {
        Some((_, t)) => Some(t.layout().broadcast_to(op, &score_shape)?),
        None => None,
    };
    let mask_data = match mask {
        Some((kind, t)) => Some((kind, t.read()?)),
        None => None,
    };
    let p = q.with_contiguous(|qs| {
        k.with_contiguous(|ks| {
            let m = mask_data
                .as_ref()
                .zip(mask_layout.as_ref())
                .map(|((kind, data), lay)| (*kind, data.as_ref(), lay));
            attention_weights(be, d, qs, ks, m, causal, scale)
        })
    })???;
    drop(mask_data);
    let o = v.with_contiguous(|vs| {
        bmm(
            be,
            d.batch,
            d.l,
            d.s,
            d.ev,
            B::view(&p),
            [mat(d.l, d.s), d.s, 1],
            vs,
            [mat(d.s, d.ev), d.ev, 1],
        )
    })??;
    drop(p);
    let mut out_shape = score_shape[..score_shape.len() - 2].to_vec();
    out_shape.extend([d.l, d.ev]);
    let out = Tensor::from_storage(be, o, Shape::from(out_shape))?;
    let mut inputs = vec![q, k, v];
    let additive = match mask {
        Some((MaskKind::Additive, t)) => Some(t),
        _ => None,
    };
    inputs.extend(additive);
    let need = [
        q.is_requires_grad(),
        k.is_requires_grad(),
        v.is_requires_grad(),
        additive.is_some_and(Tensor::is_requires_grad),
    ];
    let has_additive = additive.is_some();
    let (qk, kk, vk) = (q.clone(), k.clone(), v.clone());
    let info = crate::trace::info(|| {
        let mut info = OpInfo::new()
            .names(&["query", "key", "value", "mask"])
            .attr("is_causal", Value::Bool(causal))
            .attr("scale", Value::F32(scale));
        match mask {
            Some((kind, t)) => {
                let name = match kind {
                    MaskKind::Allow => "allow",
                    MaskKind::Block => "block",
                    MaskKind::Additive => "additive",
                };
                info = info.attr("mask", Value::Str(name.into()));
                if kind != MaskKind::Additive {
                    info = info.tensor("mask", t);
                }
            }
            None => info = info.attr("mask", Value::Str("none".into())),
        }
        info
    });
    let mask_keep = mask.map(|(kind, t)| (kind, t.clone()));
    Ok(record_with(op, out, &inputs, info, move || {
        let sq = Saved::new(op, &qk);
        let sk = Saved::new(op, &kk);
        let sv = (need[0] || need[1] || need[3]).then(|| Saved::new(op, &vk));
        let sm = mask_keep.map(|(kind, t)| (kind, Saved::new(op, &t), t.dims().to_vec()));
        move |g: &Tensor<B>| {
            let be = g.backend();
            let Dims { batch, l, s, e, ev } = d;
            let (q, k) = (sq.get()?, sk.get()?);
            let qc = super::contiguous_storage(q)?;
            let kc = super::contiguous_storage(k)?;
            let p = match &sm {
                Some((kind, saved, _)) => {
                    let t = saved.get()?;
                    let lay = t.layout().broadcast_to(op, &score_shape)?;
                    let data = t.read()?;
                    attention_weights(
                        be,
                        d,
                        B::view(&qc),
                        B::view(&kc),
                        Some((*kind, data.as_ref(), &lay)),
                        causal,
                        scale,
                    )?
                }
                None => attention_weights(be, d, B::view(&qc), B::view(&kc), None, causal, scale)?,
            };
            let gc = super::contiguous_storage(g)?;
            let mut grads: Vec<Option<Tensor<B>>> = vec![None, None, None];
            if need[2] {
                // dV = Pᵀ·dO
                let dv = bmm(
                    be,
                    batch,
                    s,
                    l,
                    ev,
                    B::view(&p),
                    [mat(l, s), 1, s],
                    B::view(&gc),
                    [mat(l, ev), ev, 1],
                )?;
                let mut v_shape = score_shape[..score_shape.len() - 2].to_vec();
                v_shape.extend([s, ev]);
                grads[2] = Some(Tensor::from_storage(be, dv, Shape::from(v_shape))?);
            }
            if let (true, Some(saved_v)) = (need[0] || need[1] || need[3], sv.as_ref()) {
                let vt = saved_v.get()?;
                // dP = dO·Vᵀ
                let dp = vt.with_contiguous(|vs| {
                    bmm(
                        be,
                        batch,
                        l,
                        ev,
                        s,
                        B::view(&gc),
                        [mat(l, ev), ev, 1],
                        vs,
                        [mat(s, ev), 1, ev],
                    )
                })??;
                // softmax_backward writes every element.
                let mut ds = be.uninit(batch * l * s)?;
                if batch * l * s > 0 {
                    be.softmax_backward(
                        B::view(&p),
                        B::view(&dp),
                        batch * l,
                        s,
                        false,
                        B::view_mut(&mut ds),
                    )?;
                }
                let scaled = |m: B::Storage, n: usize| -> Result<B::Storage> {
                    let mut out = be.uninit(n)?;
                    be.unary(
                        UnaryOp::MulScalar(scale),
                        B::view(&m),
                        B::view_mut(&mut out),
                    )?;
                    Ok(out)
                };
                if need[0] {
                    // dQ = (dS·K) ⊗ scale
                    let dq = bmm(
                        be,
                        batch,
                        l,
                        s,
                        e,
                        B::view(&ds),
                        [mat(l, s), s, 1],
                        B::view(&kc),
                        [mat(s, e), e, 1],
                    )?;
                    let dq = scaled(dq, batch * l * e)?;
                    grads[0] = Some(Tensor::from_storage(be, dq, q.shape().clone())?);
                }
                if need[1] {
                    // dK = (dSᵀ·Q) ⊗ scale
                    let dk = bmm(
                        be,
                        batch,
                        s,
                        l,
                        e,
                        B::view(&ds),
                        [mat(l, s), 1, s],
                        B::view(&qc),
                        [mat(l, e), e, 1],
                    )?;
                    let dk = scaled(dk, batch * s * e)?;
                    grads[1] = Some(Tensor::from_storage(be, dk, k.shape().clone())?);
                }
                if let (true, Some((_, _, mask_dims))) = (need[3], sm.as_ref()) {
                    let ds_t = Tensor::from_storage(be, ds, Shape::from(score_shape.clone()))?;
                    grads.push(Some(sum_to(&ds_t, mask_dims)?.contiguous()?));
                }
            }
            if has_additive && grads.len() == 3 {
                grads.push(None);
            }
            Ok(grads)
        }
    }))
}
