//! Dropout, embedding, index_select and the splitting views (split, split_sizes, chunk).
//!
//! Arithmetic (see `docs/arithmetic.md`, "Normalisation, dropout, embedding, attention"):
//! - dropout multiplies each element by its mask value (`1 ⊘ (1 ⊖ p)` or `0`) with the
//!   backend's multiply kernel, forward and backward; the mask (the backend's
//!   `dropout_mask` kernel) depends only on the key drawn from the generator and the
//!   element's row-major index;
//! - embedding and index_select copy bits; their backward adds the gradient rows of all
//!   positions that picked the same row in f64, in increasing position order, and rounds
//!   once (Σ64);
//! - split, split_sizes and chunk are views (narrow), so they copy nothing.

use super::{binary_forward, canon};
use crate::engine::record_with;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::trace::{OpInfo, Value};
use exactgrad_core::shape::normalize_dim;
use exactgrad_core::{Backend, BinaryOp, Philox};

/// callers only index when the tensor has elements, and then every product fits).
fn split_dims(dims: &[usize], dim: usize) -> (usize, usize, usize) {
    let outer = exactgrad_core::Shape::from(&dims[..dim]).numel();
    let inner = exactgrad_core::Shape::from(&dims[dim + 1..]).numel();
    (outer, dims[dim], inner)
}

/// Picks entries `indices` (already validated, in `[0, size)`) along dimension `dim`,
/// recorded. The backward adds the gradient of every position `p` into entry
/// `indices[p]` (except `skip`, which gets none): Σ64 over positions in increasing order.
pub(crate) fn gather<B: Backend>(
    op: &'static str,
    x: &Tensor<B>,
    dim: usize,
    indices: Vec<usize>,
    skip: Option<usize>,
) -> Result<Tensor<B>> {
    let (outer, size, inner) = split_dims(x.dims(), dim);
    let n = indices.len();
    let mut out_shape = x.dims().to_vec();
    out_shape[dim] = n;
    let out_numel = exactgrad_core::Shape::from(out_shape.as_slice()).numel_for(op)?;
    let mut out = super::zeroed_vec(op, out_numel)?;
    if out_numel > 0 {
        x.with_host(|xs| {
            for o in 0..outer {
                for (p, &j) in indices.iter().enumerate() {
                    let src = (o * size + j) * inner;
                    let dst = (o * n + p) * inner;
                    out[dst..dst + inner].copy_from_slice(&xs[src..src + inner]);
                }
            }
        })?;
    }
    let out = Tensor::from_op_vec(x.backend(), out, out_shape)?;
    let in_shape = x.dims().to_vec();
    let info = crate::trace::info(|| {
        let mut info = OpInfo::new().attr("dim", Value::Int(dim as i64)).ints(
            "indices",
            vec![indices.len()],
            indices.iter().map(|&i| i as i64).collect(),
        );
        if let Some(p) = skip {
            info = info.attr("padding_idx", Value::Int(p as i64));
        }
        info
    });
    Ok(record_with(op, out, &[x], info, move || {
        move |g: &Tensor<B>| {
            let b = g.backend();
            let mode = b.mode();
            // Rows that receive gradient get a slot in a compact f64 accumulator.
            if g.numel() == 0 {
                return Ok(vec![Some(Tensor::zeros(b, in_shape.clone())?)]);
            }
            let mut slot = super::try_vec(op, size, |_| usize::MAX)?;
            let mut touched = 0usize;
            for &j in &indices {
                if Some(j) != skip && slot[j] == usize::MAX {
                    slot[j] = touched;
                    touched += 1;
                }
            }
            let mut acc = super::try_vec(op, outer * touched * inner, |_| 0.0f64)?;
            g.with_host(|gs| {
                for o in 0..outer {
                    for (p, &j) in indices.iter().enumerate() {
                        let s = slot[j];
                        if s == usize::MAX {
                            continue;
                        }
                        let src = &gs[(o * n + p) * inner..(o * n + p + 1) * inner];
                        let dst =
                            &mut acc[(o * touched + s) * inner..(o * touched + s + 1) * inner];
                        for (a, &v) in dst.iter_mut().zip(src) {
                            *a += f64::from(v);
                        }
                    }
                }
            })?;
            let mut grad = super::zeroed_vec(op, outer * size * inner)?;
            for o in 0..outer {
                for (j, &s) in slot.iter().enumerate() {
                    if s == usize::MAX {
                        continue;
                    }
                    let src = &acc[(o * touched + s) * inner..(o * touched + s + 1) * inner];
                    let dst = &mut grad[(o * size + j) * inner..(o * size + j + 1) * inner];
                    for (d, &a) in dst.iter_mut().zip(src) {
                        *d = canon(mode, a as f32);
                    }
                }
            }
            Ok(vec![Some(Tensor::from_vec(b, grad, in_shape.clone())?)])
        }
    }))
}

/// Validates indices into a dimension of `size` entries (no negative indices, as
/// PyTorch's `index_select` and `embedding`).
fn check_indices(op: &'static str, indices: &[i64], size: usize, what: &str) -> Result<Vec<usize>> {
    let mut out = exactgrad_core::backend::try_vec_with_capacity(op, indices.len())?;
    for (p, &i) in indices.iter().enumerate() {
        if i < 0 || i as u64 >= size as u64 {
            return Err(Error::invalid(
                op,
                "indices",
                format!("index {i} at position {p} is out of range for {what} of size {size}"),
            ));
        }
        out.push(i as usize);
    }
    Ok(out)
}

/// Dropout of `x` with probability `p` (in `[0, 1]`) in training, with the mask of `key`.
pub(crate) fn dropout_with_key<B: Backend>(x: &Tensor<B>, p: f32, key: u64) -> Result<Tensor<B>> {
    let op = "dropout";
    let scale = 1.0f32 / (1.0f32 - p);
    let be = x.backend();
    let mask = super::new_tensor(be, op, x.shape().clone(), |m| {
        Ok(be.dropout_mask(key, p, scale, 0, m)?)
    })?;
    let out = binary_forward(BinaryOp::Mul, x, &mask)?;
    let info = crate::trace::info(|| {
        OpInfo::new()
            .attr("p", Value::F32(p))
            .state("key", Value::U64(key))
    });
    Ok(record_with(op, out, &[x], info, move || {
        move |g: &Tensor<B>| Ok(vec![Some(binary_forward(BinaryOp::Mul, g, &mask)?)])
    }))
}

impl<B: Backend> Tensor<B> {
    /// Dropout (PyTorch's `nn.functional.dropout`): in training, zeroes each element with
    /// probability `p` and scales the kept ones by `1 / (1 − p)`; outside training the
    /// input is returned unchanged and `rng` is not touched.
    ///
    /// In training one `u64` key is drawn from `rng`; element `i` (row-major index) is
    /// kept iff the uniform `top 24 bits × 2⁻²⁴` of word `i` of the Philox stream of that
    /// key ([`Philox::at`]`(key, i)`) is `≥ p`. The mask therefore depends only on the
    /// generator's state and the shape: never on the backend or the thread count. Kept
    /// elements are `x ⊗ s` with `s = 1 ⊘ (1 ⊖ p)`, dropped ones `x ⊗ 0` (so `p = 1` gives
    /// zeros, and NaN for infinite inputs, as PyTorch). The gradient is `g ⊗ mask`.
    ///
    /// Fails when `p` is outside `[0, 1]` (or NaN).
    pub fn dropout(&self, p: f32, training: bool, rng: &mut Philox) -> Result<Tensor<B>> {
        let op = "dropout";
        if !(0.0..=1.0).contains(&p) {
            return Err(Error::invalid(
                op,
                "p",
                format!("dropout probability has to be between 0 and 1, got {p}"),
            ));
        }
        if !training {
            return Ok(self.clone());
        }
        let key = rng.next_u64();
        dropout_with_key(self, p, key)
    }

    /// Looks up rows of `weight` (`[num_embeddings, dim]`): the output has shape
    /// `indices_shape + [dim]` and row-major position `p` holds row `indices[p]`
    /// (PyTorch's `nn.functional.embedding`).
    ///
    /// The gradient of a row is the sum (Σ64, increasing position order) of the output
    /// gradients of every position that picked it; the row `padding_idx` (negative counts
    /// from the end) receives no gradient. Fails when `weight` is not 2-D, when the number
    /// of indices differs from `indices_shape`'s element count, or when an index or
    /// `padding_idx` is out of range.
    pub fn embedding(
        weight: &Tensor<B>,
        indices: &[i64],
        indices_shape: &[usize],
        padding_idx: Option<i64>,
    ) -> Result<Tensor<B>> {
        let op = "embedding";
        if weight.rank() != 2 {
            return Err(Error::invalid(
                op,
                "weight",
                format!(
                    "must be 2-D [num_embeddings, dim], got shape {:?}",
                    weight.dims()
                ),
            ));
        }
        let (num, dim) = (weight.dims()[0], weight.dims()[1]);
        let count = exactgrad_core::Shape::from(indices_shape).numel_for(op)?;
        if count != indices.len() {
            return Err(Error::invalid(
                op,
                "indices",
                format!(
                    "{} indices given for indices_shape {indices_shape:?} ({count} elements)",
                    indices.len()
                ),
            ));
        }
        let skip = match padding_idx {
            None => None,
            Some(p) => {
                let n = num as i64;
                if p >= n || p < -n {
                    return Err(Error::invalid(
                        op,
                        "padding_idx",
                        format!("{p} is not within num_embeddings = {num}"),
                    ));
                }
                Some(if p < 0 { p + n } else { p } as usize)
            }
        };
        let idx = check_indices(op, indices, num, "an embedding table")?;
        let rows = gather(op, weight, 0, idx, skip)?;
        let mut shape = indices_shape.to_vec();
        shape.push(dim);
        rows.reshape_to(&shape)
    }

    /// The entries `indices` of dimension `dim`, in that order (PyTorch's `index_select`
    /// with a 1-D index): the output has `indices.len()` entries along `dim`. A 0-d tensor
    /// takes exactly one index, 0. The backward adds (Σ64, increasing position order) the
    /// gradients of repeated indices. Fails on an index outside `[0, size)`, and on an
    /// index that is not 1-D (the indices are any [`Indices`](crate::Indices): `&[i64]`,
    /// a `Vec<i64>`, a 1-D index tensor).
    pub fn index_select<I: crate::Indices + ?Sized>(
        &self,
        dim: isize,
        indices: &I,
    ) -> Result<Tensor<B>> {
        let op = "index_select";
        let (indices, shape) = indices.read_indices(op)?;
        if shape.len() != 1 {
            return Err(Error::invalid(
                op,
                "indices",
                format!("the index must be 1-D, got shape {shape:?}"),
            ));
        }
        let indices = indices.as_slice();
        if self.rank() == 0 {
            normalize_dim(op, dim, 1)?;
            if indices.len() != 1 {
                return Err(Error::invalid(
                    op,
                    "indices",
                    format!(
                        "indexing a 0-d tensor takes exactly one index, got {}",
                        indices.len()
                    ),
                ));
            }
            check_indices(op, indices, 1, "a 0-d tensor")?;
            return Ok(self.clone());
        }
        let d = normalize_dim(op, dim, self.rank())?;
        let idx = check_indices(op, indices, self.dims()[d], &format!("dimension {d}"))?;
        gather(op, self, d, idx, None)
    }

    /// Pieces of `split_size` entries along `dim` (the last one smaller when the size is
    /// not a multiple), as views (PyTorch's `split` with an integer). A dimension of size
    /// 0 gives one empty piece. Fails when `split_size` is 0 for a non-empty dimension.
    pub fn split(&self, split_size: usize, dim: isize) -> Result<Vec<Tensor<B>>> {
        let op = "split";
        if self.rank() == 0 {
            return Err(Error::invalid(
                op,
                "self",
                "expects a tensor with at least one dimension",
            ));
        }
        let d = normalize_dim(op, dim, self.rank())?;
        let size = self.dims()[d];
        if split_size == 0 {
            if size != 0 {
                return Err(Error::invalid(
                    op,
                    "split_size",
                    format!(
                        "can only be 0 if the dimension has size 0, but dimension {d} of {:?} has size {size}",
                        self.dims()
                    ),
                ));
            }
            return Ok(vec![self.narrow(d as isize, 0, 0)?]);
        }
        let pieces = size.div_ceil(split_size).max(1);
        let mut out = super::try_vec(op, 0, |_| self.clone())?;
        out.try_reserve_exact(pieces)
            .map_err(|_| exactgrad_core::Error::Alloc {
                op,
                bytes: pieces.saturating_mul(std::mem::size_of::<Tensor<B>>()),
                reason: "the allocator refused the list of pieces",
            })?;
        for k in 0..pieces {
            let start = k * split_size;
            out.push(self.narrow(d as isize, start, split_size.min(size - start))?);
        }
        Ok(out)
    }

    /// Pieces of the given sizes along `dim`, as views (PyTorch's `split` with a list).
    /// Fails unless the sizes add up to the dimension's size.
    pub fn split_sizes(&self, sizes: &[usize], dim: isize) -> Result<Vec<Tensor<B>>> {
        let op = "split_sizes";
        if self.rank() == 0 {
            return Err(Error::invalid(
                op,
                "self",
                "expects a tensor with at least one dimension",
            ));
        }
        let d = normalize_dim(op, dim, self.rank())?;
        let size = self.dims()[d];
        let total = sizes.iter().try_fold(0usize, |acc, &s| acc.checked_add(s));
        if total != Some(size) {
            return Err(Error::invalid(
                op,
                "sizes",
                format!(
                    "split sizes {sizes:?} must sum exactly to {size}, the size of dimension {d} of {:?}",
                    self.dims()
                ),
            ));
        }
        let mut start = 0;
        let mut out = super::try_vec(op, 0, |_| self.clone())?;
        out.try_reserve_exact(sizes.len())
            .map_err(|_| exactgrad_core::Error::Alloc {
                op,
                bytes: sizes.len().saturating_mul(std::mem::size_of::<Tensor<B>>()),
                reason: "the allocator refused the list of pieces",
            })?;
        for &s in sizes {
            out.push(self.narrow(d as isize, start, s)?);
            start += s;
        }
        Ok(out)
    }

    /// Splits `dim` into `chunks` pieces of `⌈size / chunks⌉` entries (the last smaller),
    /// as views (PyTorch's `chunk`): fewer than `chunks` pieces when that size does not
    /// allow more, and `chunks` empty pieces for a dimension of size 0. Fails when
    /// `chunks` is 0.
    pub fn chunk(&self, chunks: usize, dim: isize) -> Result<Vec<Tensor<B>>> {
        let op = "chunk";
        if chunks == 0 {
            return Err(Error::invalid(
                op,
                "chunks",
                "number of chunks must be greater than 0",
            ));
        }
        if self.rank() == 0 {
            return Err(Error::invalid(
                op,
                "self",
                "expects a tensor with at least one dimension",
            ));
        }
        let d = normalize_dim(op, dim, self.rank())?;
        let size = self.dims()[d];
        if size == 0 {
            return self.split_sizes(&super::try_vec(op, chunks, |_| 0)?, d as isize);
        }
        self.split(size.div_ceil(chunks), d as isize)
    }
}
