//! A chain of modules applied in order.

use crate::error::Result;
use crate::module::Module;
use exactgrad_autograd::Tensor;
use exactgrad_core::Backend;
use std::fmt;

/// Modules applied one after the other (PyTorch's `nn.Sequential`).
///
/// Children are named by their position, so the parameters of
/// `Sequential::new().push(Linear…).push(Relu).push(Linear…)` are `0.weight`, `0.bias`,
/// `2.weight`, `2.bias`, as in PyTorch (the children's list has the empty key, so its
/// elements are keyed `0`, `1`, … directly).
#[derive(crate::Module)]
pub struct Sequential<B: Backend> {
    #[module(rename = "")]
    layers: Vec<Box<dyn Module<B>>>,
}

impl<B: Backend> Default for Sequential<B> {
    fn default() -> Self {
        Self::new()
    }
}

impl<B: Backend> Sequential<B> {
    /// An empty chain (its forward returns the input).
    pub fn new() -> Self {
        Self { layers: Vec::new() }
    }

    /// This chain with `module` appended (builder form).
    #[must_use]
    pub fn push(mut self, module: impl Module<B> + 'static) -> Self {
        self.layers.push(Box::new(module));
        self
    }

    /// Appends a boxed module.
    pub fn push_boxed(&mut self, module: Box<dyn Module<B>>) {
        self.layers.push(module);
    }

    /// Number of children.
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// Whether the chain has no children.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }

    /// The child at `index`.
    pub fn get(&self, index: usize) -> Option<&dyn Module<B>> {
        self.layers.get(index).map(|m| &**m)
    }

    /// The children in order.
    pub fn iter(&self) -> impl Iterator<Item = &dyn Module<B>> {
        self.layers.iter().map(|m| &**m)
    }

    /// The children applied in order (the input itself when there are none).
    pub fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        let mut x = input.clone();
        for layer in &self.layers {
            x = layer.forward(&x)?;
        }
        Ok(x)
    }
}

impl<B: Backend> fmt::Debug for Sequential<B> {
    /// PyTorch's `repr`: `Sequential(\n  (0): …\n)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}
