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

pub mod trace;
pub mod train;

/// The one error type of everything reachable from [`prelude`]: tensor operations, the
/// engine, modules, optimizers, schedulers, checkpoints and data sets all return it (it is
/// [`autograd::Error`], which [`nn`] re-exports), and the errors of [`core`] and
/// [`backends`] (`core::Error`, e.g. an instruction-set path this CPU lacks) convert into
/// it with `?`. So a function or closure returning [`Result`] can end in a bare tensor
/// operation (`docs/api.md`, "Errors"):
///
/// ```
/// use exactgrad::prelude::*;
///
/// fn layer<B: Backend>(x: &Tensor<B>, w: &Tensor<B>) -> exactgrad::Result<Tensor<B>> {
///     x.matmul(w)
/// }
/// let act = |x: &Tensor<ExactBackend>| -> exactgrad::Result<Tensor<ExactBackend>> { x.relu() };
/// # fn main() -> exactgrad::Result<()> {
/// let b = ExactBackend::with_isa(Isa::best(ComputeMode::Exact), 1)?; // core's error
/// let x = Tensor::ones(&b, [1, 2])?;
/// # let act = |x: &Tensor<ExactBackend>| -> exactgrad::Result<Tensor<ExactBackend>> { x.relu() };
/// assert_eq!(act(&layer(&x, &Tensor::ones(&b, [2, 3])?)?)?.dims(), [1, 3]);
/// # Ok(())
/// # }
/// ```
pub use exactgrad_autograd::Error;
/// `Result<T, exactgrad::Error>`.
pub use exactgrad_autograd::Result;

// The examples name the crate `exactgrad`; so may the unit tests that include one.
#[cfg(test)]
extern crate self as exactgrad;

/// The program of `docs/first-hour.md`, compiled and run by the unit tests.
#[cfg(test)]
#[path = "../examples/first_hour.rs"]
#[allow(dead_code)]
mod first_hour;

/// The README's code blocks, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The code blocks of `docs/memory.md`, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../docs/memory.md")]
pub struct MemoryDoctests;

/// The code blocks of `docs/debugging.md`, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../docs/debugging.md")]
pub struct DebuggingDoctests;

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
    pub use exactgrad_autograd::{Indices, ReferenceGradCheck};
    pub use exactgrad_backends::{
        ExactBackend, FastBackend, FastScalarRefBackend, Isa, ScalarRefBackend,
    };
    /// The storage methods (`name`, `mode`, `zeros`, views) of every backend, in scope.
    pub use exactgrad_core::BackendImpl as _;
    pub use exactgrad_core::{Backend, ComputeMode, MemoryPool, Philox, PoolStats, Shape};
    pub use exactgrad_nn::checkpoint::{
        LoadOptions, LoadReport, TensorFile, TrainingCheckpoint, TrainingState,
    };
    pub use exactgrad_nn::data::{
        Batch, BatchSampler, ClassificationData, Collate, DataLoader, Dataset, Digits, HostTensor,
        Labeled, LoaderPosition, TensorDataset,
    };
    pub use exactgrad_nn::metrics::accuracy;
    pub use exactgrad_nn::optim::{
        clip_grad_norm, clip_grad_value, Adam, AdamConfig, AdamW, AdamWConfig, AnnealStrategy,
        CosineAnnealingLr, CosineAnnealingLrConfig, ExponentialLr, ExponentialLrConfig, LinearLr,
        LinearLrConfig, LrScheduler, MultiStepLr, MultiStepLrConfig, OneCycleLr, OneCycleLrConfig,
        Optimizer, ParamGroup, SchedulerConfig, SequentialLr, Sgd, SgdConfig, StepLr, StepLrConfig,
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

#[cfg(test)]
mod tests {
    use crate::prelude::*;
    use crate::{Error, Result};

    /// A helper typed with the facade's `Result` may return a bare tensor operation.
    fn affine<B: Backend>(x: &Tensor<B>, w: &Tensor<B>, b: &Tensor<B>) -> Result<Tensor<B>> {
        x.matmul(w)?.add(b)
    }

    #[test]
    fn closures_and_functions_return_tensor_operations_as_they_are() -> Result<()> {
        let be = ExactBackend::with_threads(1);
        let w = Tensor::ones(&be, [2, 3])?;
        let layer = |x: &Tensor<ExactBackend>| -> Result<Tensor<ExactBackend>> { x.matmul(&w) };
        let x = Tensor::from_vec(&be, vec![1.0, 2.0], [1, 2])?;
        assert_eq!(layer(&x)?.to_vec()?, [3.0; 3]);
        let y = affine(&x, &w, &Tensor::ones(&be, [3])?)?;
        assert_eq!(y.to_vec()?, [4.0; 3]);
        // A module's forward, a loss and a metric in one closure.
        let model = Sequential::new().push(Linear::new(&be, 2, 3, &mut Philox::new(0))?);
        let step = |x: &Tensor<ExactBackend>| -> Result<Tensor<ExactBackend>> {
            model.forward(x)?.relu()?.sum()
        };
        assert_eq!(step(&x)?.dims(), [] as [usize; 0]);
        Ok(())
    }

    #[test]
    fn the_first_hour_program_learns_and_is_the_one_documented() -> Result<()> {
        // Trained, saved and loaded into a model of other initial values: the loaded
        // model classifies the test digits (chance is 0.1).
        let accuracy = crate::first_hour::run(3)?;
        assert!(accuracy > 0.9, "{accuracy}");
        let program = include_str!("../examples/first_hour.rs");
        assert!(program.lines().count() <= 50);
        let page = include_str!("../docs/first-hour.md");
        let shown = page
            .split("```rust\n")
            .nth(1)
            .and_then(|b| b.split("```").next());
        assert_eq!(
            shown,
            Some(program),
            "docs/first-hour.md shows another program"
        );
        Ok(())
    }

    /// Each crate's error, through `?`, in a function returning the facade's `Result`.
    fn fail_in(layer: &str) -> Result<()> {
        let be = ExactBackend::with_threads(1);
        match layer {
            // core: a shape function.
            "core" => {
                crate::core::Shape::broadcast("test", &[2, 3], &[4])?;
            }
            // backends: a path this CPU lacks (NEON on x86-64, AVX-512 elsewhere).
            "backends" => {
                let missing = if cfg!(target_arch = "x86_64") {
                    Isa::Neon
                } else {
                    Isa::Avx512
                };
                ExactBackend::with_isa(missing, 1)?;
            }
            // autograd: an operator's shape check.
            "autograd" => {
                Tensor::ones(&be, [2, 3])?.matmul(&Tensor::ones(&be, [2, 3])?)?;
            }
            // nn: a module's argument check.
            _ => {
                Linear::from_tensors(&Tensor::ones(&be, [3])?, None)?;
            }
        }
        Ok(())
    }

    #[test]
    fn question_mark_converts_every_crates_error() {
        let core = fail_in("core").unwrap_err();
        assert!(
            matches!(core, Error::Core(crate::core::Error::Broadcast { .. })),
            "{core}"
        );
        let isa = fail_in("backends").unwrap_err();
        assert!(
            matches!(
                isa,
                Error::Core(crate::core::Error::UnsupportedIsa {
                    mode: ComputeMode::Exact,
                    ..
                })
            ),
            "{isa}"
        );
        assert!(
            isa.to_string().contains("not supported by this CPU"),
            "{isa}"
        );
        let op = fail_in("autograd").unwrap_err();
        assert!(op.to_string().contains("matmul"), "{op}");
        let module = fail_in("nn").unwrap_err();
        assert!(
            matches!(
                module,
                Error::Core(crate::core::Error::InvalidArgument {
                    op: "Linear::from_tensors",
                    ..
                })
            ),
            "{module}"
        );
        // So do the data files.
        let bad = TensorFile::from_bytes(b"not a checkpoint");
        assert!(matches!(bad, Err(Error::Data(_))));
    }
}
