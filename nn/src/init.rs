//! Deterministic parameter initialisation from a seeded [`Philox`] stream.
//!
//! Values are drawn in row-major order, one [`Philox::uniform`] call per element, so a
//! seed fixes every initial weight on every platform. The bounds follow PyTorch's
//! `torch.nn.init`; the streams differ from PyTorch's generator, so the values do not.

use exactgrad_autograd::Tensor;
use exactgrad_core::{Backend, Philox, Shape};

/// The bound `1/√fan_in` of PyTorch's default `Linear` (and convolution) initialisation,
/// computed in f64 and rounded to f32; 0 when `fan_in` is 0.
///
/// PyTorch initialises the weight with `kaiming_uniform_(a=√5)`, whose bound
/// `gain·√(3/fan_in)` with `gain = √(2/(1+a²)) = √(1/3)` reduces to `1/√fan_in`, and the
/// bias with `uniform_(-1/√fan_in, 1/√fan_in)`.
pub fn default_uniform_bound(fan_in: usize) -> f32 {
    if fan_in == 0 {
        0.0
    } else {
        (1.0 / (fan_in as f64).sqrt()) as f32
    }
}

/// A tensor of samples from U(−bound, bound), drawn in row-major order from `rng`.
pub fn uniform<B: Backend>(
    backend: &B,
    shape: impl Into<Shape>,
    bound: f32,
    rng: &mut Philox,
) -> crate::Result<Tensor<B>> {
    Tensor::rand_uniform(backend, shape, -bound, bound, rng)
}

/// A leaf parameter (requiring gradients) of samples from U(−bound, bound).
pub(crate) fn uniform_parameter<B: Backend>(
    backend: &B,
    shape: impl Into<Shape>,
    bound: f32,
    rng: &mut Philox,
) -> crate::Result<Tensor<B>> {
    uniform(backend, shape, bound, rng)?.requires_grad()
}

/// PyTorch's default initialisation of a layer: a weight of `shape` and, when `bias`, a
/// bias `[out]`, both from U(−1/√fan_in, 1/√fan_in), drawn in that order from `rng`.
pub(crate) fn default_parameters<B: Backend>(
    backend: &B,
    shape: impl Into<Shape>,
    out: usize,
    fan_in: usize,
    bias: bool,
    rng: &mut Philox,
) -> crate::Result<(Tensor<B>, Option<Tensor<B>>)> {
    let bound = default_uniform_bound(fan_in);
    let weight = uniform_parameter(backend, shape, bound, rng)?;
    let bias = bias
        .then(|| uniform_parameter(backend, [out], bound, rng))
        .transpose()?;
    Ok((weight, bias))
}

/// Checks that `bias` (if any) has shape `[out]` and returns fresh leaf parameters that
/// copy `weight` and `bias` (contiguous, requiring gradients), for `from_tensors`
/// constructors.
pub(crate) fn leaf_parameters<B: Backend>(
    op: &'static str,
    weight: &Tensor<B>,
    bias: Option<&Tensor<B>>,
    out: usize,
) -> crate::Result<(Tensor<B>, Option<Tensor<B>>)> {
    if let Some(b) = bias {
        if b.dims() != [out] {
            return Err(crate::Error::invalid(
                op,
                "bias",
                format!("must have shape [{out}], got {:?}", b.dims()),
            ));
        }
    }
    let weight = weight.detach().copy_contiguous()?.requires_grad()?;
    let bias = bias
        .map(|b| b.detach().copy_contiguous()?.requires_grad())
        .transpose()?;
    Ok((weight, bias))
}
