//! Parameter-free activation modules, for use in [`Sequential`](crate::Sequential):
//! element-wise activations, softmax over a dimension, [`Flatten`] and [`Identity`].

use crate::error::Result;
use crate::module::{Module, Visitor};
use exactgrad_autograd::{GeluApproximation, Tensor};
use exactgrad_core::Backend;

/// `max(x, 0)` element-wise (PyTorch's `nn.ReLU`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Relu;

/// `x` for `x > 0`, else `negative_slope · x` (PyTorch's `nn.LeakyReLU`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LeakyRelu {
    /// The slope for negative inputs (PyTorch's default is 0.01).
    pub negative_slope: f32,
}

impl Default for LeakyRelu {
    fn default() -> Self {
        Self {
            negative_slope: 0.01,
        }
    }
}

/// Hyperbolic tangent element-wise (PyTorch's `nn.Tanh`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tanh;

/// The logistic function element-wise (PyTorch's `nn.Sigmoid`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sigmoid;

/// GELU element-wise, erf form by default (PyTorch's `nn.GELU(approximate=…)`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gelu {
    /// Which form: the exact erf form or the tanh approximation.
    pub approximate: GeluApproximation,
}

/// Flattens all dimensions after the first (PyTorch's `nn.Flatten()` with its defaults).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flatten;

/// SiLU (swish), `x · sigmoid(x)` element-wise (PyTorch's `nn.SiLU`). It is the
/// composition of [`Tensor::sigmoid`] and [`Tensor::mul`] (two exact operators, so
/// exact); the engine differentiates through both.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Silu;

/// Softmax along `dim` (PyTorch's `nn.Softmax(dim)`; negative `dim` counts from the
/// end), on [`Tensor::softmax`]. PyTorch's implicit `dim=None` is deprecated there and
/// has no counterpart here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Softmax {
    /// The dimension the probabilities sum to 1 along.
    pub dim: isize,
}

impl Softmax {
    /// Softmax along `dim`.
    pub fn new(dim: isize) -> Self {
        Self { dim }
    }
}

/// Log-softmax along `dim` (PyTorch's `nn.LogSoftmax(dim)`), on
/// [`Tensor::log_softmax`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogSoftmax {
    /// The dimension normalised over.
    pub dim: isize,
}

impl LogSoftmax {
    /// Log-softmax along `dim`.
    pub fn new(dim: isize) -> Self {
        Self { dim }
    }
}

/// Returns its input (PyTorch's `nn.Identity`): a placeholder, e.g. for a layer switched
/// off by a configuration. The output shares the input's storage and graph.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Identity;

macro_rules! stateless {
    ($t:ty, |$s:ident, $x:ident| $body:expr) => {
        impl<B: Backend> Module<B> for $t {
            #[allow(unused_variables)]
            fn forward(&self, $x: &Tensor<B>) -> Result<Tensor<B>> {
                let $s = self;
                Ok($body?)
            }

            fn visit(&self, _v: &mut Visitor<'_, B>) {}

            fn describe(&self) -> String {
                format!("{self:?}")
            }
        }
    };
}

stateless!(Relu, |s, x| x.relu());
stateless!(LeakyRelu, |s, x| x.leaky_relu(s.negative_slope));
stateless!(Tanh, |s, x| x.tanh());
stateless!(Sigmoid, |s, x| x.sigmoid());
stateless!(Gelu, |s, x| x.gelu(s.approximate));
stateless!(Silu, |s, x| x.mul(&x.sigmoid()?));
stateless!(Softmax, |s, x| x.softmax(s.dim));
stateless!(LogSoftmax, |s, x| x.log_softmax(s.dim));
stateless!(Identity, |s, x| Ok::<_, exactgrad_autograd::Error>(
    x.clone()
));
stateless!(Flatten, |s, x| if x.rank() <= 1 {
    Ok(x.clone())
} else {
    x.flatten(1, -1)
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::module::ModuleExt;
    use exactgrad_backends::ScalarRefBackend;
    use exactgrad_core::Philox;

    type Sr = ScalarRefBackend;

    fn run(m: &dyn Module<Sr>, x: &Tensor<Sr>) -> Vec<f32> {
        m.forward(x).unwrap().to_vec().unwrap()
    }

    #[test]
    fn forward_is_the_functional_operator() {
        let b = ScalarRefBackend;
        let x = Tensor::randn(&b, [3, 4, 5], 0.0, 3.0, &mut Philox::new(2)).unwrap();
        let silu = x.mul(&x.sigmoid().unwrap()).unwrap();
        assert_eq!(run(&Silu, &x), silu.to_vec().unwrap());
        let v = x.to_vec().unwrap();
        for (y, x) in run(&Silu, &x).iter().zip(&v) {
            let want = f64::from(*x) / (1.0 + (-f64::from(*x)).exp());
            assert!(
                (f64::from(*y) - want).abs() <= 1e-6 * (1.0 + want.abs()),
                "{x}: {y}"
            );
        }
        for dim in [0, 1, 2, -1, -3] {
            assert_eq!(
                run(&Softmax::new(dim), &x),
                x.softmax(dim).unwrap().to_vec().unwrap()
            );
            assert_eq!(
                run(&LogSoftmax::new(dim), &x),
                x.log_softmax(dim).unwrap().to_vec().unwrap()
            );
        }
        let id = Module::<Sr>::forward(&Identity, &x).unwrap();
        assert!(id.shares_storage(&x));
        assert_eq!(id.to_vec().unwrap(), v);
        for m in [
            &Silu as &dyn Module<Sr>,
            &Softmax::new(1),
            &LogSoftmax::new(1),
            &Identity,
        ] {
            assert!(m.named_parameters().is_empty());
        }
        assert_eq!(
            Module::<Sr>::describe(&Softmax::new(1)),
            "Softmax { dim: 1 }"
        );
        assert_eq!(Module::<Sr>::describe(&Identity), "Identity");
    }

    #[test]
    fn gradients_flow_and_bad_dimensions_are_errors() {
        let b = ScalarRefBackend;
        let x = Tensor::randn(&b, [2, 3], 0.0, 1.0, &mut Philox::new(3))
            .unwrap()
            .requires_grad()
            .unwrap();
        Module::<Sr>::forward(&Silu, &x)
            .unwrap()
            .sum()
            .unwrap()
            .backward()
            .unwrap();
        // d/dx x·σ(x) = σ(x)·(1 + x·(1 − σ(x))).
        let g = x.grad().unwrap().to_vec().unwrap();
        for (g, x) in g.iter().zip(x.to_vec().unwrap()) {
            let s = 1.0 / (1.0 + (-f64::from(x)).exp());
            let want = s * (1.0 + f64::from(x) * (1.0 - s));
            assert!((f64::from(*g) - want).abs() < 1e-5, "{x}: {g} vs {want}");
        }
        let err = Module::<Sr>::forward(&Softmax::new(2), &x).unwrap_err();
        assert!(err.to_string().contains("softmax"), "{err}");
        assert!(Module::<Sr>::forward(&LogSoftmax::new(-3), &x).is_err());
    }
}
