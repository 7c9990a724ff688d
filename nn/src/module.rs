//! The [`Module`] trait: a differentiable function with named parameters, buffers and
//! children.
//!
//! # What an implementor provides
//!
//! | method | when | default |
//! |---|---|---|
//! | [`forward`](Module::forward) | always | — (required) |
//! | [`visit_own_parameters`](Module::visit_own_parameters) | the module holds parameters itself (not through a child) | none |
//! | [`visit_own_buffers`](Module::visit_own_buffers) | the module holds buffers itself (running statistics, counters) | none |
//! | [`visit_children`](Module::visit_children) and [`visit_children_mut`](Module::visit_children_mut) | the module holds other modules | none |
//! | [`set_own_training`](Module::set_own_training) | the module itself behaves differently in training (dropout, batch statistics) | ignores the flag |
//! | [`visit_own_rngs`](Module::visit_own_rngs) | the module itself draws random numbers in `forward` (dropout) | none |
//!
//! Everything else — [`visit_parameters`](Module::visit_parameters),
//! [`visit_buffers`](Module::visit_buffers), [`named_parameters`](Module::named_parameters),
//! [`set_training`](Module::set_training), [`state_dict`](Module::state_dict),
//! [`load_state_dict`](Module::load_state_dict), … — follows from these and is not
//! overridden: a composite module names each child once, in
//! [`visit_children`](Module::visit_children), and its parameters, buffers, training
//! mode and state dict follow, so none of them can forget a child.
//!
//! The two child visitors must name the same children in the same order (one for shared
//! access, one for [`set_training`](Module::set_training)). A module written before the
//! child visitor existed, which overrides `visit_parameters`, `visit_buffers` and
//! `set_training` directly, still compiles and still saves and loads its state; it gains
//! the guarantee by moving to the methods above.

use crate::checkpoint::{LoadOptions, LoadReport, TensorFile};
use crate::error::Result;
use exactgrad_autograd::Tensor;
use exactgrad_core::{Backend, Philox};
use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;

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

/// A buffer of a module, as [`Module::visit_own_buffers`] reports it.
#[derive(Clone, Copy, Debug)]
pub enum BufferRef<'a, B: Backend> {
    /// A float tensor (running mean and variance, …): an `F32` entry of the state dict.
    Float(&'a Tensor<B>),
    /// An integer scalar (a batch counter): an `I64` entry of shape `[]`.
    Int(&'a IntBuffer),
}

/// A layer or model: a forward function and parameters named as in PyTorch's
/// `state_dict` (`weight`, `bias`, `0.weight`, `encoder.1.bias`, …).
///
/// Parameters are leaf tensors that require gradients. Cloning a [`Tensor`] shares its
/// storage and gradient slot, so the tensors returned by [`Module::parameters`] are the
/// module's own: an optimizer that updates them in place (`copy_` under `no_grad`)
/// updates the module. The [module documentation](self) says which methods an
/// implementor provides.
pub trait Module<B: Backend>: fmt::Debug {
    /// Applies the module to `input`.
    fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>>;

    /// Calls `f` with the local name (`weight`, `in_proj_bias`, …) and the tensor of
    /// every parameter this module holds itself (not through a child), in `state_dict`
    /// order. Modules without own parameters keep this default, which visits nothing.
    fn visit_own_parameters(&self, f: &mut dyn FnMut(&str, &Tensor<B>)) {
        let _ = f;
    }

    /// Calls `f` with the local name and every buffer this module holds itself: state
    /// that is saved with the parameters but not trained (PyTorch's `register_buffer`,
    /// e.g. the running statistics of batch normalisation). Buffers do not require
    /// gradients. The default visits nothing.
    fn visit_own_buffers(&self, f: &mut dyn FnMut(&str, BufferRef<'_, B>)) {
        let _ = f;
    }

    /// Calls `f` with the name (`0`, `linear1`, `layers.0`, …) and a reference of every
    /// child module, in `state_dict` order. The default visits nothing (a leaf module).
    fn visit_children(&self, f: &mut dyn FnMut(&str, &dyn Module<B>)) {
        let _ = f;
    }

    /// [`visit_children`](Module::visit_children) with mutable references: the same
    /// children, names and order.
    fn visit_children_mut(&mut self, f: &mut dyn FnMut(&str, &mut dyn Module<B>)) {
        let _ = f;
    }

    /// Switches this module's own training behaviour (its children are switched by
    /// [`set_training`](Module::set_training)); modules without such behaviour keep this
    /// default, which ignores it.
    fn set_own_training(&mut self, training: bool) {
        let _ = training;
    }

    /// Calls `f` with the local name and the generator of every random stream this
    /// module draws from in `forward` (dropout), so that a training checkpoint can save
    /// and restore its position. The default visits nothing.
    fn visit_own_rngs(&self, f: &mut dyn FnMut(&str, &Mutex<Philox>)) {
        let _ = f;
    }

    /// Calls `f` with the full name (`prefix` joined with the local name by a dot) and the
    /// tensor of every parameter, own ones first, then each child's, in `state_dict`
    /// order. Follows from the methods above; not overridden.
    fn visit_parameters(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor<B>)) {
        self.visit_own_parameters(&mut |name, t| f(&join_name(prefix, name), t));
        self.visit_children(&mut |name, child| child.visit_parameters(&join_name(prefix, name), f));
    }

    /// Calls `f` with the full name and the tensor of every float buffer, own ones first,
    /// then each child's. Follows from the methods above; not overridden.
    fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor<B>)) {
        self.visit_own_buffers(&mut |name, b| {
            if let BufferRef::Float(t) = b {
                f(&join_name(prefix, name), t)
            }
        });
        self.visit_children(&mut |name, child| child.visit_buffers(&join_name(prefix, name), f));
    }

    /// Calls `f` with the full name of every integer buffer (see [`IntBuffer`]), own ones
    /// first, then each child's. Follows from the methods above; not overridden.
    fn visit_int_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &IntBuffer)) {
        self.visit_own_buffers(&mut |name, b| {
            if let BufferRef::Int(i) = b {
                f(&join_name(prefix, name), i)
            }
        });
        self.visit_children(&mut |name, child| {
            child.visit_int_buffers(&join_name(prefix, name), f)
        });
    }

    /// Calls `f` with the full name of every random stream (see
    /// [`visit_own_rngs`](Module::visit_own_rngs)). Follows from the methods above.
    fn visit_rngs(&self, prefix: &str, f: &mut dyn FnMut(&str, &Mutex<Philox>)) {
        self.visit_own_rngs(&mut |name, r| f(&join_name(prefix, name), r));
        self.visit_children(&mut |name, child| child.visit_rngs(&join_name(prefix, name), f));
    }

    /// Switches between training and evaluation behaviour (dropout, batch statistics)
    /// of this module and, recursively, of its children (PyTorch's `train(mode)`).
    /// Follows from the methods above; not overridden.
    fn set_training(&mut self, training: bool) {
        self.set_own_training(training);
        self.visit_children_mut(&mut |_, child| child.set_training(training));
    }

    /// Training mode (PyTorch's `train()`): `set_training(true)`.
    fn train(&mut self) {
        self.set_training(true)
    }

    /// Evaluation mode (PyTorch's `eval()`): `set_training(false)`.
    fn eval(&mut self) {
        self.set_training(false)
    }

    /// The float buffers with their `state_dict` names, in order (see
    /// [`Module::visit_buffers`]).
    fn named_buffers(&self) -> Vec<(String, Tensor<B>)> {
        let mut out = Vec::new();
        self.visit_buffers("", &mut |name, t| out.push((name.to_string(), t.clone())));
        out
    }

    /// The parameters with their `state_dict` names, in order.
    fn named_parameters(&self) -> Vec<(String, Tensor<B>)> {
        let mut out = Vec::new();
        self.visit_parameters("", &mut |name, t| out.push((name.to_string(), t.clone())));
        out
    }

    /// The parameters in `state_dict` order (the order optimizers and hashes use).
    fn parameters(&self) -> Vec<Tensor<B>> {
        let mut out = Vec::new();
        self.visit_parameters("", &mut |_, t| out.push(t.clone()));
        out
    }

    /// The total number of parameter elements.
    fn num_parameters(&self) -> usize {
        let mut n = 0;
        self.visit_parameters("", &mut |_, t| n += t.numel());
        n
    }

    /// The parameters and buffers by their PyTorch names, copied to the host: float
    /// tensors as `F32` entries, integer buffers as 0-dimensional `I64` entries
    /// (PyTorch's `state_dict()`). [`TensorFile::save`] writes it as a safetensors file
    /// that PyTorch loads with `load_state_dict(strict=True)`.
    ///
    /// Fails when a tensor cannot be read (a released storage, an allocation failure).
    fn state_dict(&self) -> Result<TensorFile> {
        crate::checkpoint::module_state_dict(self)
    }

    /// Copies every parameter and buffer from `dict` (PyTorch's
    /// `load_state_dict(state_dict, strict)`): see
    /// [`load_state_dict_with`](crate::checkpoint::load_state_dict_with) with an empty
    /// prefix. Nothing changes when the dict does not fit; the error names every missing,
    /// unexpected, wrong-shape, wrong-type and non-finite entry.
    fn load_state_dict(&self, dict: &TensorFile, options: LoadOptions) -> Result<LoadReport> {
        crate::checkpoint::load_state_dict_with(self, dict, "", options)
    }

    /// Sets every parameter's gradient to zeros, reusing its buffer when it has one
    /// (PyTorch's `zero_grad(set_to_none=False)`). Fails when a new gradient buffer
    /// cannot be allocated.
    fn zero_grad(&self) -> Result<()> {
        let mut result = Ok(());
        self.visit_parameters("", &mut |_, t| {
            if result.is_ok() {
                result = t.zero_grad();
            }
        });
        Ok(result?)
    }

    /// Frees every parameter's gradient (PyTorch's `zero_grad()`, `set_to_none=True`).
    fn clear_grad(&self) {
        self.visit_parameters("", &mut |_, t| t.clear_grad());
    }
}

/// `prefix.name`, or `name` alone when the prefix is empty.
pub fn join_name(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

impl<B: Backend, M: Module<B> + ?Sized> Module<B> for Box<M> {
    fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        (**self).forward(input)
    }
    fn visit_own_parameters(&self, f: &mut dyn FnMut(&str, &Tensor<B>)) {
        (**self).visit_own_parameters(f)
    }
    fn visit_own_buffers(&self, f: &mut dyn FnMut(&str, BufferRef<'_, B>)) {
        (**self).visit_own_buffers(f)
    }
    fn visit_children(&self, f: &mut dyn FnMut(&str, &dyn Module<B>)) {
        (**self).visit_children(f)
    }
    fn visit_children_mut(&mut self, f: &mut dyn FnMut(&str, &mut dyn Module<B>)) {
        (**self).visit_children_mut(f)
    }
    fn set_own_training(&mut self, training: bool) {
        (**self).set_own_training(training)
    }
    fn visit_own_rngs(&self, f: &mut dyn FnMut(&str, &Mutex<Philox>)) {
        (**self).visit_own_rngs(f)
    }
    // The derived methods are forwarded too, so that a module that still overrides them
    // keeps its behaviour behind a box.
    fn visit_parameters(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor<B>)) {
        (**self).visit_parameters(prefix, f)
    }
    fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor<B>)) {
        (**self).visit_buffers(prefix, f)
    }
    fn visit_int_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &IntBuffer)) {
        (**self).visit_int_buffers(prefix, f)
    }
    fn visit_rngs(&self, prefix: &str, f: &mut dyn FnMut(&str, &Mutex<Philox>)) {
        (**self).visit_rngs(prefix, f)
    }
    fn set_training(&mut self, training: bool) {
        (**self).set_training(training)
    }
}
