//! Tensors and the reverse-mode engine of exactgrad.
//!
//! [`Tensor<B>`] is generic over a [`Backend`]; operators record
//! what their backward rule needs while grad mode is on (see [`no_grad`]), and
//! [`Tensor::backward`] runs the engine described in [`engine`]. [`gradcheck`] compares
//! analytic gradients with central differences.
#![warn(missing_docs)]

pub mod engine;
pub mod error;
pub mod grad_mode;
pub mod gradcheck;
pub mod ops;
pub mod tensor;

pub use error::{Error, Result};
pub use grad_mode::{is_grad_enabled, no_grad, set_grad_enabled, GradModeGuard};
pub use gradcheck::{GradCheck, GradCheckReport};
pub use ops::attention::AttentionMask;
pub use ops::conv::{Conv1dOptions, Conv2dOptions};
pub use ops::pool::{AvgPool2dOptions, MaxPool2dOptions};
pub use ops::elementwise::GeluApproximation;
pub use ops::{CrossEntropyOptions, Reduction};
pub use tensor::Tensor;

use exactgrad_core::{Backend, GradHasher};

/// The gradient hash (see `docs/arithmetic.md`) of the given tensors' elements, in order.
pub fn hash_tensors<B: Backend>(tensors: &[&Tensor<B>]) -> u64 {
    let mut h = GradHasher::new();
    for t in tensors {
        h.update(&t.to_vec());
    }
    h.finish()
}
