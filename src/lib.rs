//! exactgrad: reverse-mode automatic differentiation whose exact mode gives the same
//! bits on every CPU, SIMD path and thread count.
//!
//! This facade re-exports the crates ([`core`], [`backends`], [`autograd`], [`nn`]) and
//! gathers in [`prelude`] every type a program needs: tensors, backends, the operators'
//! option structs, losses, layers and optimizers. The contracts are in `docs/`
//! (`arithmetic.md`, `conv.md`, …; `api.md` explains the API decisions); the integration
//! tests in `tests/` check them (`torch_ops/` against PyTorch, `gradcheck/` by central
//! differences, `oracles/differential_ops.rs` across backends,
//! `oracles/reference_models.rs` the pinned hashes).
//!
//! ```
//! use exactgrad::prelude::*;
//!
//! # fn main() -> exactgrad::Result<()> {
//! let b = ScalarRefBackend;
//! let w = Tensor::from_vec(&b, vec![1.0, -2.0, 0.5, -3.0], [2, 2])?.requires_grad()?;
//! let x = Tensor::from_vec(&b, vec![0.5, 1.0], [1, 2])?;
//! let loss = x.matmul(&w)?.relu()?.sum()?;
//! loss.backward()?;
//! assert_eq!(w.grad().unwrap().to_vec()?, vec![0.5, 0.0, 1.0, 0.0]);
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub use exactgrad_autograd as autograd;
pub use exactgrad_backends as backends;
pub use exactgrad_core as core;
pub use exactgrad_nn as nn;

/// The one error type of everything reachable from [`prelude`]: tensor operations and
/// the engine (wrapped as [`nn::Error::Autograd`]), modules, optimizers, schedulers,
/// checkpoints and data sets, so `fn main() -> exactgrad::Result<()>` can use `?` on
/// every call.
pub use exactgrad_nn::Error;
/// `Result<T, exactgrad::Error>`.
pub use exactgrad_nn::Result;

/// The README's code blocks, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The code blocks of `docs/memory.md`, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../docs/memory.md")]
pub struct MemoryDoctests;

/// What a user needs for most programs: tensors, backends, modes, the operators' option
/// structs, losses, layers, optimizers, schedulers, checkpoints, the data set and loader,
/// and the grad-mode guard. Every fallible call among them returns
/// [`exactgrad::Result`](crate::Result), or an error that `?` converts into it:
///
/// ```
/// use exactgrad::prelude::*;
///
/// fn main() -> exactgrad::Result<()> {
///     let b = ScalarRefBackend;
///     let split = Digits::bundled().split()?; // data
///     let loader = DataLoader::new(&b, &split.train, 64)?.shuffle(1);
///     let mut rng = Philox::new(0);
///     let model = Sequential::new() // modules
///         .push(Linear::new(&b, Digits::FEATURES, 16, &mut rng)?)
///         .push(Relu)
///         .push(Linear::new(&b, 16, Digits::CLASSES, &mut rng)?);
///     let mut opt = Sgd::new(model.parameters(), SgdConfig::new(0.1))?; // optimizers
///     let mut sched = StepLr::new(&mut opt, StepLrConfig { step_size: 1, gamma: 0.5 })?;
///     for batch in loader.iter().take(2) {
///         let batch = batch?;
///         let loss = model // tensor operations
///             .forward(&batch.inputs)?
///             .cross_entropy(&batch.targets, CrossEntropyOptions::default())?;
///         opt.clear_grad();
///         loss.backward()?;
///         opt.step()?;
///         sched.step(&mut opt)?;
///     }
///     let path = std::env::temp_dir().join(format!("prelude-{}.safetensors", std::process::id()));
///     TrainingState::new(&model, &mut opt) // checkpoints
///         .scheduler(&mut sched)
///         .loader(&loader)
///         .save(&path)?;
///     TrainingState::new(&model, &mut opt)
///         .scheduler(&mut sched)
///         .loader(&loader)
///         .load(&path)?;
///     assert_eq!(loader.position(), LoaderPosition { epoch: 0, batch: 2 });
///     let bad = TensorFile::from_bytes(b"not a checkpoint");
///     assert!(matches!(bad, Err(exactgrad::Error::Data(_))));
///     std::fs::remove_file(&path).ok();
///     Ok(())
/// }
/// ```
pub mod prelude {
    pub use exactgrad_autograd::{
        hash_tensors, no_grad, ActivationScope, AttentionMask, AttentionOptions, AvgPool2dOptions,
        BackwardOptions, BatchNormOptions, Conv1dOptions, Conv2dOptions, ConvTranspose2dOptions,
        CrossEntropyOptions, GeluApproximation, GradCheck, GroupNormOptions, LayerNormOptions,
        MaxPool2dOptions, Momentum, Reduction, Tensor,
    };
    pub use exactgrad_autograd::{
        CtcBatch, CtcLossOptions, CtcTargets, GruOptions, GruOutput, InterpolateMode,
        InterpolateOptions, InterpolateSize, LstmOptions, LstmOutput, RnnWeights,
    };
    pub use exactgrad_backends::{
        ExactBackend, FastBackend, FastScalarRefBackend, Isa, ScalarRefBackend,
    };
    pub use exactgrad_core::{Backend, ComputeMode, MemoryPool, Philox, PoolStats, Shape};
    pub use exactgrad_nn::checkpoint::{
        LoadOptions, LoadReport, TensorFile, TrainingCheckpoint, TrainingState,
    };
    pub use exactgrad_nn::data::{
        Batch, BatchSampler, ClassificationData, Collate, DataLoader, Dataset, Digits, HostTensor,
        Labeled, LoaderPosition,
    };
    pub use exactgrad_nn::optim::{
        clip_grad_norm, clip_grad_value, Adam, AdamConfig, AdamW, AdamWConfig, AnnealStrategy,
        CosineAnnealingLr, CosineAnnealingLrConfig, ExponentialLr, ExponentialLrConfig, LinearLr,
        LinearLrConfig, LrScheduler, MultiStepLr, MultiStepLrConfig, OneCycleLr, OneCycleLrConfig,
        Optimizer, SchedulerConfig, SequentialLr, Sgd, SgdConfig, StepLr, StepLrConfig,
    };
    pub use exactgrad_nn::{
        AdaptiveAvgPool2d, AvgPool2d, BatchNorm2d, BatchNormConfig, CausalTransformerLayer, Conv2d,
        Entry, FeedForwardActivation, Flatten, Gelu, GroupNorm, GroupNormConfig, Identity,
        IntBuffer, Lambda, LayerNorm, LeakyRelu, Linear, LogSoftmax, MaxPool2d, Module, ModuleExt,
        MultiheadAttention, MultiheadAttentionConfig, RandomStream, Relu, Sequential, Sigmoid,
        Silu, Softmax, Tanh, TrainingFlag, TransformerEncoderLayer, TransformerEncoderLayerConfig,
        Visitor,
    };
    pub use exactgrad_nn::{
        Conv1d, Conv1dConfig, Conv2dConfig, ConvTranspose2d, ConvTranspose2dConfig, Dropout,
        Embedding, EmbeddingConfig, Gru, LayerNormConfig, Lstm, RnnConfig, Upsample,
    };
}
