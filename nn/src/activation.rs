//! Parameter-free activation modules, for use in [`Sequential`](crate::Sequential).

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
stateless!(Flatten, |s, x| if x.rank() <= 1 {
    Ok(x.clone())
} else {
    x.flatten(1, -1)
});
