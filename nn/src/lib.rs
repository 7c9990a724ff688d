//! Modules, optimizers, data sets and loaders of exactgrad.
//!
//! Everything here is generic over the [`Backend`](exactgrad_core::Backend) `B` and
//! follows PyTorch's `torch.nn` (names, defaults, `state_dict` parameter names). Where
//! things are:
//!
//! | module | what |
//! |---|---|
//! | [`module`] | the [`Module`] trait (forward and one visitor naming parameters, buffers, random streams, the training flag and children), `#[derive(Module)]` (the visitor from a struct's fields) and [`ModuleExt`], the methods that follow from it (`parameters`, `state_dict`, `set_training`, …) |
//! | [`random`] | [`RandomStream`]: the random streams of modules, keyed by the run's seed and the module's path |
//! | [`linear`], [`sequential`], [`activation`], [`lambda`] | [`Linear`], [`Sequential`], [`Relu`], [`Gelu`], [`Silu`], [`Softmax`], [`LogSoftmax`], [`Flatten`], [`Identity`], …, [`Lambda`] (a module from a closure) |
//! | [`conv`], [`conv1d`], [`conv_transpose`], [`pool`], [`norm`] | [`Conv2d`], [`Conv1d`], [`ConvTranspose2d`], [`MaxPool2d`], [`AvgPool2d`], [`AdaptiveAvgPool2d`], [`BatchNorm2d`] (running statistics are buffers, see [`ModuleExt::named_buffers`]), [`LayerNorm`], [`GroupNorm`] |
//! | [`rnn`] | [`Lstm`] and [`Gru`] (multi-layer, bidirectional, PyTorch's parameter names) |
//! | [`embedding`], [`dropout`], [`upsample`] | [`Embedding`], [`Dropout`], [`Upsample`] |
//! | [`attention`] | [`MultiheadAttention`], [`TransformerEncoderLayer`] and [`CausalTransformerLayer`] (a GPT block); masks are [`AttentionMask`]s |
//! | [`optim`] | SGD, Adam and AdamW with PyTorch's update rules, gradient clipping |
//! | [`init`] | deterministic initialisation from a [`Philox`](exactgrad_core::Philox) stream |
//! | [`data`], [`metrics`] | the shipped [`Digits`](data::Digits) set, a seeded mini-batch loader, accuracy |
//! | [`checkpoint`] | state dicts in safetensors files ([`TensorFile`](checkpoint::TensorFile), atomic save, PyTorch's f16/bf16/f64 read), [`TrainingCheckpoint`](checkpoint::TrainingCheckpoint) for bit-identical resume |
//! | [`reference`](mod@reference) | the two reference models of the PyTorch oracle |
//! | [`error`] | the error type |
//!
//! ```
//! use exactgrad_autograd::{CrossEntropyOptions, Tensor};
//! use exactgrad_backends::ScalarRefBackend;
//! use exactgrad_core::Philox;
//! use exactgrad_nn::optim::{Optimizer, Sgd, SgdConfig};
//! use exactgrad_nn::{Linear, Module, ModuleExt, Relu, Sequential};
//!
//! # fn main() -> exactgrad_nn::Result<()> {
//! let b = ScalarRefBackend;
//! let mut rng = Philox::new(7);
//! let model = Sequential::new()
//!     .push(Linear::new(&b, 4, 8, &mut rng)?)
//!     .push(Relu)
//!     .push(Linear::new(&b, 8, 3, &mut rng)?);
//! let names: Vec<String> = model.named_parameters().into_iter().map(|(n, _)| n).collect();
//! assert_eq!(names, ["0.weight", "0.bias", "2.weight", "2.bias"]);
//!
//! let mut opt = Sgd::new(model.parameters(), SgdConfig { momentum: 0.9, ..SgdConfig::new(0.1) })?;
//! let x = Tensor::rand_uniform(&b, [5, 4], 0.0, 1.0, &mut rng)?;
//! let y = model.forward(&x)?.relu()?.mean()?;
//! opt.clear_grad();
//! y.backward()?;
//! opt.step()?;
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]

// The code `#[derive(Module)]` generates names `::exactgrad_nn::…`; this makes that path
// resolve inside this crate too.
extern crate self as exactgrad_nn;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;
pub mod activation;
pub mod attention;
pub mod checkpoint;
pub mod conv;
pub mod conv1d;
pub mod conv_transpose;
pub mod data;
pub mod dropout;
pub mod embedding;
mod entry;
pub mod error;
pub mod init;
pub mod lambda;
pub mod linear;
pub mod metrics;
pub mod module;
pub mod norm;
pub mod optim;
pub mod pool;
pub mod random;
pub mod reference;
pub mod rnn;
pub mod sequential;
pub mod trace;
pub mod upsample;

#[cfg(test)]
mod derive_tests;

/// What `#[derive(Module)]` refuses, compiled as doctests that must fail.
#[cfg(doctest)]
#[doc = include_str!("derive_misuse.md")]
pub struct DeriveMisuse;

pub use activation::{
    Flatten, Gelu, Identity, LeakyRelu, LogSoftmax, Relu, Sigmoid, Silu, Softmax, Tanh,
};
pub use attention::{
    CausalTransformerLayer, FeedForwardActivation, MultiheadAttention, MultiheadAttentionConfig,
    TransformerEncoderLayer, TransformerEncoderLayerConfig,
};
pub use conv::{Conv2d, Conv2dConfig};
pub use conv1d::{Conv1d, Conv1dConfig};
pub use conv_transpose::{ConvTranspose2d, ConvTranspose2dConfig};
pub use dropout::Dropout;
pub use embedding::{Embedding, EmbeddingConfig};
pub use error::{DataError, Error, Result, StateDictMismatch};
pub use exactgrad_autograd::AttentionMask;
pub use exactgrad_derive::Module;
pub use lambda::Lambda;
pub use linear::Linear;
pub use module::{Entry, IntBuffer, Module, ModuleExt, TrainingFlag, Visitor};
pub use norm::{
    BatchNorm2d, BatchNormConfig, GroupNorm, GroupNormConfig, LayerNorm, LayerNormConfig,
};
pub use pool::{AdaptiveAvgPool2d, AvgPool2d, MaxPool2d};
pub use random::RandomStream;
pub use rnn::{Gru, Lstm, RnnConfig};
pub use sequential::Sequential;
pub use upsample::Upsample;
