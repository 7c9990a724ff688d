//! What a module holds, as its visitor reports it: parameters and buffers ([`Entry`]),
//! integer buffers ([`IntBuffer`]) and the training flag ([`TrainingFlag`]). The types
//! are re-exported by [`crate::module`]; they live here so that the state-dict code can
//! read a module's entries without depending on the module traits.

use crate::random::RandomStream;
use exactgrad_autograd::Tensor;
use exactgrad_core::Backend;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

/// An integer buffer of a module: one `i64` saved in the state dict as a 0-dimensional
/// `I64` tensor, as PyTorch saves `BatchNorm2d.num_batches_tracked`.
#[derive(Debug, Default)]
pub struct IntBuffer {
    value: AtomicI64,
    optional: bool,
}

impl IntBuffer {
    /// A buffer holding `value` that a state dict must contain when loaded strictly.
    pub fn new(value: i64) -> Self {
        Self {
            value: AtomicI64::new(value),
            optional: false,
        }
    }

    /// A buffer holding `value` that a state dict may lack: loading one without it keeps
    /// the current value (PyTorch does this for `num_batches_tracked`, which state dicts
    /// without version metadata, such as every safetensors file, may lack).
    pub fn optional(value: i64) -> Self {
        Self {
            value: AtomicI64::new(value),
            optional: true,
        }
    }

    /// The value.
    pub fn get(&self) -> i64 {
        self.value.load(Ordering::Relaxed)
    }

    /// Sets the value.
    pub fn set(&self, value: i64) {
        self.value.store(value, Ordering::Relaxed)
    }

    /// Adds `delta` and returns the new value.
    pub fn add(&self, delta: i64) -> i64 {
        self.value.fetch_add(delta, Ordering::Relaxed) + delta
    }

    /// Whether a state dict may lack this buffer (see [`IntBuffer::optional`]).
    pub fn is_optional(&self) -> bool {
        self.optional
    }
}

/// Whether a module behaves as in training (dropout active, batch statistics) or in
/// evaluation. A module reports its flag in [`Module::visit`](crate::Module::visit) and
/// [`ModuleExt::set_training`](crate::ModuleExt::set_training) switches every flag of the tree; a new flag is in
/// training mode, as a new PyTorch module.
#[derive(Debug)]
pub struct TrainingFlag(AtomicBool);

impl Default for TrainingFlag {
    fn default() -> Self {
        Self::new()
    }
}

impl TrainingFlag {
    /// A flag in training mode.
    pub fn new() -> Self {
        Self(AtomicBool::new(true))
    }

    /// Whether the module is in training mode.
    pub fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Sets the mode (normally through [`ModuleExt::set_training`](crate::ModuleExt::set_training)).
    pub fn set(&self, training: bool) {
        self.0.store(training, Ordering::Relaxed)
    }
}

/// One thing a module holds, as the walks of [`ModuleExt::visit_entries`](crate::ModuleExt::visit_entries) see it.
#[derive(Clone, Copy, Debug)]
pub enum Entry<'a, B: Backend> {
    /// A parameter: a leaf tensor that requires gradients (an `F32` state dict entry).
    Parameter(&'a Tensor<B>),
    /// A float buffer (running mean and variance, …): an `F32` state dict entry.
    Buffer(&'a Tensor<B>),
    /// An integer buffer (a batch counter): an `I64` entry of shape `[]`.
    IntBuffer(&'a IntBuffer),
    /// A random stream drawn from in `forward` (dropout masks); saved by training
    /// checkpoints, not by the state dict.
    Stream(&'a RandomStream),
    /// The module's training flag (its path is the module's own).
    Training(&'a TrainingFlag),
}
