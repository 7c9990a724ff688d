//! The fully connected layer.

use crate::error::{Error, Result};
use crate::init;
use crate::module::{Module, Visitor};
use exactgrad_autograd::Tensor;
use exactgrad_core::{Backend, Philox};
use std::fmt;

/// `y = x · weightᵀ + bias` over the last dimension of `x` (PyTorch's `nn.Linear`).
///
/// Parameters: `weight` of shape `[out_features, in_features]` and, unless built without
/// one, `bias` of shape `[out_features]`.
pub struct Linear<B: Backend> {
    weight: Tensor<B>,
    bias: Option<Tensor<B>>,
}

impl<B: Backend> Linear<B> {
    /// A layer with bias, initialised as PyTorch does: weight, then bias, each drawn
    /// row-major from U(−1/√in, 1/√in) (see [`init::default_uniform_bound`]).
    ///
    /// Fails when the parameters cannot be allocated (or their element count overflows).
    pub fn new(
        backend: &B,
        in_features: usize,
        out_features: usize,
        rng: &mut Philox,
    ) -> Result<Self> {
        Self::build(backend, in_features, out_features, true, rng)
    }

    /// A layer without bias, its weight initialised as in [`Linear::new`].
    pub fn without_bias(
        backend: &B,
        in_features: usize,
        out_features: usize,
        rng: &mut Philox,
    ) -> Result<Self> {
        Self::build(backend, in_features, out_features, false, rng)
    }

    fn build(
        backend: &B,
        in_features: usize,
        out_features: usize,
        bias: bool,
        rng: &mut Philox,
    ) -> Result<Self> {
        let (weight, bias) = init::default_parameters(
            backend,
            [out_features, in_features],
            out_features,
            in_features,
            bias,
            rng,
        )?;
        Ok(Self { weight, bias })
    }

    /// A layer holding the given values (copied into fresh leaves that require grad).
    ///
    /// `weight` must be `[out, in]` and `bias`, if given, `[out]`.
    pub fn from_tensors(weight: &Tensor<B>, bias: Option<&Tensor<B>>) -> Result<Self> {
        let op = "Linear::from_tensors";
        if weight.rank() != 2 {
            return Err(Error::invalid(
                op,
                "weight",
                format!("must be 2-D [out, in], got shape {:?}", weight.dims()),
            ));
        }
        let out = weight.dims()[0];
        let (weight, bias) = init::leaf_parameters(op, weight, bias, out)?;
        Ok(Self { weight, bias })
    }

    /// The weight, `[out_features, in_features]`.
    pub fn weight(&self) -> &Tensor<B> {
        &self.weight
    }

    /// The bias, `[out_features]`, if the layer has one.
    pub fn bias(&self) -> Option<&Tensor<B>> {
        self.bias.as_ref()
    }

    /// Size of each input's last dimension.
    pub fn in_features(&self) -> usize {
        self.weight.dims()[1]
    }

    /// Size of each output's last dimension.
    pub fn out_features(&self) -> usize {
        self.weight.dims()[0]
    }
}

impl<B: Backend> Module<B> for Linear<B> {
    fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        let _scope = crate::trace::module_scope::<B>(self);
        input.linear(&self.weight, self.bias.as_ref())
    }

    fn visit(&self, v: &mut Visitor<'_, B>) {
        v.parameter("weight", &self.weight);
        v.parameter("bias", self.bias.as_ref());
    }

    fn describe(&self) -> String {
        format!("{self:?}")
    }
}

impl<B: Backend> fmt::Debug for Linear<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Linear(in_features={}, out_features={}, bias={})",
            self.in_features(),
            self.out_features(),
            self.bias.is_some()
        )
    }
}
