//! Tensors and the reverse-mode engine of exactgrad.
//!
//! [`Tensor<B>`] is generic over a [`Backend`]; operators record
//! what their backward rule needs while grad mode is on (see [`no_grad`]), and
//! [`Tensor::backward`] runs the engine described in [`engine`]. [`gradcheck`] compares
//! analytic gradients with central differences.
//!
//! Where things are:
//!
//! - [`tensor`]: the `Tensor` type, construction, accessors, the autograd flags
//!   ([`Tensor::requires_grad`], [`Tensor::requires_grad_`]) and the in-place operations;
//! - [`ops`]: every differentiable operator, one file per family (its module docs list
//!   them), with the option structs re-exported here ([`Conv2dOptions`],
//!   [`BatchNormOptions`], [`AttentionOptions`], …);
//! - [`engine`]: records, saved tensors and `backward`; [`grad_mode`]: `no_grad`;
//! - [`scope`]: [`ActivationScope`], which returns a step's activations to the backend's
//!   pool when the step ends (`docs/memory.md`);
//! - [`gradcheck`]: the gradient check; [`error`]: the error type.
//!
//! The arithmetic of every operator is fixed by `docs/arithmetic.md` (and `docs/conv.md`
//! for the convolution family, `docs/recurrent.md` for the LSTM and GRU, `docs/ctc.md`
//! for the CTC loss, `docs/resize.md` for interpolate); the API decisions are explained in `docs/api.md`. This
//! crate needs `std` (threads, locks, the thread-local grad mode); the `no_std` face of
//! exactgrad is the arena tape, `exactgrad-tape`.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod engine;
pub mod error;
pub mod grad_mode;
pub mod gradcheck;
pub mod ops;
pub mod scope;
pub mod tensor;
pub mod trace;

pub use engine::BackwardOptions;
pub use error::{DataError, Error, Result, StateDictMismatch};
pub use grad_mode::{is_grad_enabled, no_grad, set_grad_enabled, GradModeGuard};
pub use gradcheck::{GradCheck, GradCheckReport, ReferenceGradCheck, ReferenceReport};
pub use ops::attention::{AttentionMask, AttentionOptions};
pub use ops::conv::{Conv1dOptions, Conv2dOptions, ConvTranspose2dOptions};
pub use ops::ctc::{CtcBatch, CtcLossOptions, CtcTargets};
pub use ops::elementwise::GeluApproximation;
pub use ops::index::{Indices, MAX_TENSOR_INDEX};
pub use ops::norm::{BatchNormOptions, GroupNormOptions, LayerNormOptions, Momentum};
pub use ops::pool::{AvgPool2dOptions, MaxPool2dOptions};
pub use ops::resize::{InterpolateMode, InterpolateOptions, InterpolateSize};
pub use ops::rnn::{GruOptions, GruOutput, LstmOptions, LstmOutput, RnnWeights};
pub use ops::{CrossEntropyOptions, Reduction};
pub use scope::{ActivationScope, ScopeReport};
pub use tensor::Tensor;

use exactgrad_core::{Backend, GradHasher};

/// The gradient hash (see `docs/arithmetic.md`) of the given tensors' elements, in order.
///
/// Takes a slice of tensors or of references to them: `&[&a, &b]`, `&model.parameters()`
/// (a `Vec<Tensor<B>>`), a `Vec<&Tensor<B>>`. The value depends only on the elements and
/// their order, not on how the list is passed.
///
/// Fails only when a tensor's storage was released.
pub fn hash_tensors<B: Backend, T: AsRef<Tensor<B>>>(tensors: &[T]) -> Result<u64> {
    let mut h = GradHasher::new();
    for t in tensors {
        h.update(&t.as_ref().to_vec()?);
    }
    Ok(h.finish())
}
