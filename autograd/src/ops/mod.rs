//! Differentiable operators: each forward computation sits beside its backward rule,
//! one file per family. All of them are methods of [`Tensor`]; their optional arguments
//! are option structs with PyTorch's defaults, re-exported at the crate root.
//!
//! | module | operators | options |
//! |---|---|---|
//! | [`operators`] | the operators `+ - * /` and unary `-` on tensors and `f32`, each one call of a method below | |
//! | [`elementwise`] | add, sub, mul, div, scalar forms, neg, abs, relu, leaky_relu, sigmoid, tanh, gelu, exp, log, sqrt, pow, clamp, where | [`elementwise::GeluApproximation`] |
//! | [`reduce`] | sum, mean (all or over dimensions) | |
//! | [`linalg`] | matmul, linear | |
//! | [`shape`] | reshape, reshape_infer, view, view_infer, permute, transpose, narrow, slice, expand, squeeze, unsqueeze, flatten, contiguous, concat, stack | |
//! | [`softmax`] | softmax, log_softmax | |
//! | [`loss`] | cross_entropy, mse_loss | [`CrossEntropyOptions`], [`Reduction`] |
//! | [`conv`] | conv1d, conv2d (im2col), conv_transpose2d (their adjoint) | [`conv::Conv1dOptions`], [`conv::Conv2dOptions`], [`conv::ConvTranspose2dOptions`] |
//! | [`pool`] | max_pool2d, avg_pool2d, adaptive_avg_pool2d | [`pool::MaxPool2dOptions`], [`pool::AvgPool2dOptions`] |
//! | [`pad`] | pad (constant) | |
//! | [`norm`] | batch_norm, layer_norm, group_norm | [`norm::BatchNormOptions`], [`norm::Momentum`], [`norm::LayerNormOptions`], [`norm::GroupNormOptions`] |
//! | [`attention`] | scaled_dot_product_attention | [`attention::AttentionOptions`], [`attention::AttentionMask`] |
//! | [`misc`] | dropout, embedding, index_select, split, split_sizes, chunk | |
//! | [`index`] | gather, one_hot, argmax, argmin, masked_fill; index tensors (`from_indices`, `to_indices`) | [`index::Indices`] |
//! | [`ctc`] | ctc_loss (f64 recursions) | [`ctc::CtcBatch`], [`ctc::CtcTargets`], [`ctc::CtcLossOptions`] |
//! | [`resize`] | interpolate (nearest, bilinear) | [`resize::InterpolateSize`], [`resize::InterpolateOptions`], [`resize::InterpolateMode`] |
//! | [`rnn`] | lstm, gru (multi-layer, bidirectional, batch first) | [`rnn::RnnWeights`], [`rnn::LstmOptions`], [`rnn::GruOptions`] |
//!
//! The helpers below (broadcast forward, `sum_to`, NaN canonicalisation) are shared by
//! several families.

/// Implements `Clone`, `Copy` and `Debug` for an options struct that borrows tensors
/// (derives would require `B: Clone + Copy + Debug`); in textual scope for every module
/// below.
macro_rules! borrowed_options {
    ($name:ident { $($field:ident),* $(,)? }) => {
        impl<B: ::exactgrad_core::Backend> Clone for $name<'_, B> {
            fn clone(&self) -> Self {
                *self
            }
        }

        impl<B: ::exactgrad_core::Backend> Copy for $name<'_, B> {}

        impl<B: ::exactgrad_core::Backend> ::std::fmt::Debug for $name<'_, B> {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.debug_struct(stringify!($name))
                    $(.field(stringify!($field), &self.$field))*
                    .finish()
            }
        }
    };
}

pub mod attention;
pub mod conv;
pub mod ctc;
pub mod elementwise;
pub mod index;
pub mod linalg;
pub mod loss;
pub mod misc;
pub mod norm;
pub mod operators;
pub mod optim;
pub mod pad;
pub mod pool;
pub mod reduce;
pub mod resize;
pub mod rnn;
pub mod shape;
pub mod softmax;

use crate::error::Result;
use crate::tensor::Tensor;
use exactgrad_core::{Backend, BinaryOp, ComputeMode, Shape, UnaryOp, ViewMutOf, CANONICAL_NAN};

pub use loss::{CrossEntropyOptions, Reduction};

/// Rewrites NaN to the canonical NaN in exact mode (for scalar glue loops in autograd).
#[inline]
pub(crate) fn canon(mode: ComputeMode, v: f32) -> f32 {
    if mode == ComputeMode::Exact && v.is_nan() {
        CANONICAL_NAN
    } else {
        v
    }
}

/// Rewrites every NaN to the canonical NaN in exact mode.
pub(crate) fn canon_all(mode: ComputeMode, v: &mut [f32]) {
    if mode == ComputeMode::Exact {
        v.iter_mut().for_each(|x| *x = canon(mode, *x));
    }
}

/// A `[height, width]` argument for error messages.
pub(crate) fn fmt_pair(v: [usize; 2]) -> String {
    format!("[{}, {}]", v[0], v[1])
}

/// An allocation error of the backend (which knows only `zeros` or `uninit`) renamed
/// after the operator `op` that asked for the buffer.
pub(crate) fn alloc_error_of(op: &'static str, e: exactgrad_core::Error) -> exactgrad_core::Error {
    use exactgrad_core::Error as E;
    match e {
        E::MemoryLimit {
            bytes,
            in_use,
            limit,
            ..
        } => E::MemoryLimit {
            op,
            bytes,
            in_use,
            limit,
        },
        E::Alloc { bytes, reason, .. } => E::Alloc { op, bytes, reason },
        e => e,
    }
}

/// A new contiguous tensor of `shape` whose buffer `fill` writes completely (its initial
/// values are unspecified): allocates (fallibly), runs `fill`, wraps the result.
pub(crate) fn new_tensor<B: Backend>(
    be: &B,
    op: &'static str,
    shape: Shape,
    fill: impl FnOnce(ViewMutOf<'_, B>) -> Result<()>,
) -> Result<Tensor<B>> {
    let n = shape.numel_for(op)?;
    let mut out = be.uninit(n).map_err(|e| alloc_error_of(op, e))?;
    fill(B::view_mut(&mut out))?;
    Tensor::from_storage(be, out, shape)
}

/// A new zero-filled contiguous tensor of `shape`, then `fill` adds into it.
pub(crate) fn new_zeroed<B: Backend>(
    be: &B,
    op: &'static str,
    shape: Shape,
    fill: impl FnOnce(ViewMutOf<'_, B>) -> Result<()>,
) -> Result<Tensor<B>> {
    let n = shape.numel_for(op)?;
    let mut out = be.zeros(n).map_err(|e| alloc_error_of(op, e))?;
    fill(B::view_mut(&mut out))?;
    Tensor::from_storage(be, out, shape)
}

/// `(0..n).map(f)` collected into a vector whose memory is obtained fallibly (an
/// [`exactgrad_core::Error::Alloc`] instead of an abort).
pub(crate) fn try_vec<T>(op: &'static str, n: usize, f: impl FnMut(usize) -> T) -> Result<Vec<T>> {
    Ok(exactgrad_core::backend::try_collect(op, (0..n).map(f))?)
}

thread_local! {
    /// Idle index vectors of this thread ([`IndexBuffer`]).
    static FREE_INDICES: std::cell::RefCell<Vec<Vec<usize>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// At most this many idle index vectors are kept per thread …
const FREE_INDEX_VECTORS: usize = 8;
/// … each of at most this many elements (32 MiB).
const FREE_INDEX_LEN: usize = 1 << 22;

/// A vector of indices saved for a backward rule (max pooling's argmax) whose memory is
/// reused: dropped, it joins its thread's few idle index vectors, from which the next
/// request that fits is served, so a training step does not allocate it again
/// (`docs/memory.md` §4).
pub(crate) struct IndexBuffer(Vec<usize>);

impl IndexBuffer {
    /// `n` indices set to `fill`, in an idle vector of this thread if one is long enough
    /// (the shortest such), else in a new one (fallibly).
    pub(crate) fn new(op: &'static str, n: usize, fill: usize) -> Result<Self> {
        let reused = FREE_INDICES.with(|free| {
            let mut free = free.borrow_mut();
            let best = (0..free.len())
                .filter(|&i| free[i].capacity() >= n)
                .min_by_key(|&i| free[i].capacity())?;
            Some(free.swap_remove(best))
        });
        Ok(IndexBuffer(match reused {
            Some(mut v) => {
                v.clear();
                v.resize(n, fill);
                v
            }
            None => try_vec(op, n, |_| fill)?,
        }))
    }
}

impl Drop for IndexBuffer {
    fn drop(&mut self) {
        let v = std::mem::take(&mut self.0);
        if v.capacity() == 0 || v.capacity() > FREE_INDEX_LEN {
            return;
        }
        // During thread exit the list may be gone: the vector is then simply freed.
        let _ = FREE_INDICES.try_with(|free| {
            let mut free = free.borrow_mut();
            if free.len() < FREE_INDEX_VECTORS {
                free.push(v);
            }
        });
    }
}

impl std::ops::Deref for IndexBuffer {
    type Target = [usize];
    fn deref(&self) -> &[usize] {
        &self.0
    }
}

impl std::ops::DerefMut for IndexBuffer {
    fn deref_mut(&mut self) -> &mut [usize] {
        &mut self.0
    }
}

/// The elements of `t` in row-major order, in a buffer of its backend (from the pool of a
/// backend that has one, unlike [`Tensor::to_vec`]); bits are copied exactly.
pub(crate) fn contiguous_storage<B: Backend>(t: &Tensor<B>) -> Result<B::Storage> {
    let b = t.backend();
    let mut out = b.uninit(t.numel())?;
    let data = t.read()?;
    b.copy_strided(data.as_ref(), t.layout(), B::view_mut(&mut out))?;
    Ok(out)
}

/// A zero-filled f32 vector of `n` elements (fallible), for scalar glue loops.
pub(crate) fn zeroed_vec(op: &'static str, n: usize) -> Result<Vec<f32>> {
    Ok(exactgrad_core::backend::try_zeroed_vec(op, n)?)
}

/// `op(x)` element-wise, unrecorded; the result is contiguous.
pub(crate) fn unary_forward<B: Backend>(x: &Tensor<B>, op: UnaryOp) -> Result<Tensor<B>> {
    let b = x.backend();
    new_tensor(b, op.name(), x.shape().clone(), |out| {
        x.with_contiguous(|xs| b.unary(op, xs, out))??;
        Ok(())
    })
}

/// `op(a, b)` with broadcasting, unrecorded.
pub(crate) fn binary_forward<B: Backend>(
    op: BinaryOp,
    a: &Tensor<B>,
    b: &Tensor<B>,
) -> Result<Tensor<B>> {
    let name = op.name();
    let shape = Shape::broadcast(name, a.dims(), b.dims())?;
    let la = a.layout().broadcast_to(name, &shape)?;
    let lb = b.layout().broadcast_to(name, &shape)?;
    let be = a.backend();
    new_tensor(be, name, shape, |out| {
        let da = a.read()?;
        let db = b.read()?;
        Ok(be.binary(op, da.as_ref(), &la, db.as_ref(), &lb, out)?)
    })
}

/// Sums `g` over the dimensions that broadcasting added or stretched, giving `shape`.
pub(crate) fn sum_to<B: Backend>(g: &Tensor<B>, shape: &[usize]) -> Result<Tensor<B>> {
    if g.dims() == shape {
        return Ok(g.clone());
    }
    let rank = g.rank();
    let lead = rank - shape.len();
    let reduce: Vec<bool> = (0..rank)
        .map(|d| d < lead || (shape[d - lead] == 1 && g.dims()[d] != 1))
        .collect();
    let out = sum_unrecorded(g, &reduce)?;
    out.reshape_to(shape)
}

/// Sum over the flagged dimensions (f64, increasing order), unrecorded; the result has
/// the kept dimensions.
pub(crate) fn sum_unrecorded<B: Backend>(x: &Tensor<B>, reduce: &[bool]) -> Result<Tensor<B>> {
    let kept: Vec<usize> = x
        .dims()
        .iter()
        .zip(reduce)
        .filter(|(_, &r)| !r)
        .map(|(&d, _)| d)
        .collect();
    let b = x.backend();
    new_tensor(b, "sum", Shape::from(kept), |out| {
        let d = x.read()?;
        Ok(b.sum(d.as_ref(), x.layout(), reduce, out)?)
    })
}
