//! The [`Module`] trait: a differentiable function with named parameters.

use crate::error::Result;
use exactgrad_autograd::Tensor;
use exactgrad_core::Backend;
use std::fmt;

/// A layer or model: a forward function and parameters named as in PyTorch's
/// `state_dict` (`weight`, `bias`, `0.weight`, `encoder.1.bias`, …).
///
/// Parameters are leaf tensors that require gradients. Cloning a [`Tensor`] shares its
/// storage and gradient slot, so the tensors returned by [`Module::parameters`] are the
/// module's own: an optimizer that updates them in place (`copy_` under `no_grad`)
/// updates the module.
pub trait Module<B: Backend>: fmt::Debug {
    /// Applies the module to `input`.
    fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>>;

    /// Calls `f` with the full name (`prefix` joined with the local name by a dot) and the
    /// tensor of every parameter, in `state_dict` order.
    fn visit_parameters(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor<B>));

    /// Switches between training and evaluation behaviour (dropout, batch statistics);
    /// modules without such behaviour ignore it.
    fn set_training(&mut self, training: bool) {
        let _ = training;
    }

    /// Calls `f` with the full name and the tensor of every buffer: state that is saved
    /// with the parameters but not trained (PyTorch's `register_buffer`, e.g. the running
    /// statistics of batch normalisation), in `state_dict` order. Buffers do not require
    /// gradients; modules without buffers keep this default, which visits nothing.
    fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor<B>)) {
        let _ = (prefix, f);
    }

    /// The buffers with their `state_dict` names, in order (see [`Module::visit_buffers`]).
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
    fn visit_parameters(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor<B>)) {
        (**self).visit_parameters(prefix, f)
    }
    fn set_training(&mut self, training: bool) {
        (**self).set_training(training)
    }
    fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor<B>)) {
        (**self).visit_buffers(prefix, f)
    }
}
