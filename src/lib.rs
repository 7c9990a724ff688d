//! exactgrad: reverse-mode automatic differentiation whose exact mode gives the same
//! bits on every CPU, SIMD path and thread count.
//!
//! This facade re-exports the crates ([`core`], [`backends`], [`autograd`], [`nn`]) and
//! gathers in [`prelude`] every type a program needs: tensors, backends, the operators'
//! option structs, losses, layers and optimizers. The contracts are in `docs/`
//! (`arithmetic.md`, `conv.md`, …; `api.md` explains the API decisions); the integration
//! tests in `tests/` check them (`torch_ops/` against PyTorch, `gradcheck_*.rs` by
//! central differences, `differential_ops.rs` across backends, `reference_models.rs`
//! the pinned hashes).
//!
//! ```
//! use exactgrad::prelude::*;
//!
//! # fn main() -> exactgrad::Result<()> {
//! let b = ScalarRefBackend;
//! let w = Tensor::from_vec(&b, vec![1.0, -2.0, 0.5, -3.0], [2, 2])?.requires_grad()?;
//! let x = Tensor::from_vec(&b, vec![0.5, 1.0], [1, 2])?;
//! let loss = x.matmul(&w)?.relu()?.sum()?;
//! loss.backward(None, false)?;
//! assert_eq!(w.grad().unwrap().to_vec()?, vec![0.5, 0.0, 1.0, 0.0]);
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]

pub use exactgrad_autograd as autograd;
pub use exactgrad_backends as backends;
pub use exactgrad_core as core;
pub use exactgrad_nn as nn;

pub use exactgrad_autograd::{Error, Result};

/// The README's code blocks, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// What a user needs for most programs: tensors, backends, modes, the operators' option
/// structs, losses, layers, optimizers and the grad-mode guard.
pub mod prelude {
    pub use exactgrad_autograd::{
        hash_tensors, no_grad, AttentionMask, AttentionOptions, AvgPool2dOptions, BatchNormOptions,
        Conv1dOptions, Conv2dOptions, CrossEntropyOptions, GeluApproximation, GradCheck,
        GroupNormOptions, LayerNormOptions, MaxPool2dOptions, Momentum, Reduction, Tensor,
    };
    pub use exactgrad_autograd::{
        CtcBatch, CtcLossOptions, CtcTargets, GruOptions, GruOutput, InterpolateMode,
        InterpolateOptions, InterpolateSize, LstmOptions, LstmOutput, RnnWeights,
    };
    pub use exactgrad_backends::{
        ExactBackend, FastBackend, FastScalarRefBackend, Isa, ScalarRefBackend,
    };
    pub use exactgrad_core::{Backend, ComputeMode, Philox, Shape};
    pub use exactgrad_nn::optim::{
        Adam, AdamConfig, AdamW, AdamWConfig, Optimizer, Sgd, SgdConfig,
    };
    pub use exactgrad_nn::{
        BatchNorm2d, BatchNormConfig, Conv2d, FeedForwardActivation, Flatten, Gelu, LayerNorm,
        LeakyRelu, Linear, Module, MultiheadAttention, MultiheadAttentionConfig, Relu, Sequential,
        Sigmoid, Tanh, TransformerEncoderLayer, TransformerEncoderLayerConfig,
    };
    pub use exactgrad_nn::{Conv1d, Dropout, Embedding, Gru, Lstm, RnnConfig, Upsample};
}
