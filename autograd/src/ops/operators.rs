//! The arithmetic operators `+ - * /` and unary `-` on tensors, as in PyTorch:
//! `(&a - &b)?`, `(&x * 2.0)?`, `(1.0 - &p)?`, `(-&x)?`.
//!
//! Every operator returns `Result<Tensor<B>>` (a shape mismatch is an error, not a
//! panic) and is exactly one call of a named method, so the bits, the gradient and the
//! trace record are those of the method:
//!
//! | operator | method |
//! |---|---|
//! | `a + b`, `a - b`, `a * b`, `a / b` (tensors, broadcasting) | [`Tensor::add`], [`Tensor::sub`], [`Tensor::mul`], [`Tensor::div`] |
//! | `a + c`, `c + a` | [`Tensor::add_scalar`] |
//! | `a - c` | [`Tensor::sub_scalar`] |
//! | `c - a` | [`Tensor::rsub_scalar`] |
//! | `a * c`, `c * a` | [`Tensor::mul_scalar`] |
//! | `a / c` | [`Tensor::div_scalar`] |
//! | `c / a` | [`Tensor::rdiv_scalar`] |
//! | `-a` | [`Tensor::neg`] |
//!
//! Operands may be borrowed or owned (`&Tensor<B>` or `Tensor<B>`, the scalar an `f32`);
//! an owned operand is dropped after the call, which only releases a handle.

use crate::error::Result;
use crate::tensor::Tensor;
use exactgrad_core::Backend;
use std::ops::{Add, Div, Mul, Neg, Sub};

impl<B: Backend> Tensor<B> {
    /// `self - c`: one IEEE subtraction per element (PyTorch's `x - c`), recorded as
    /// [`Tensor::sub`] with a 0-d constant.
    pub fn sub_scalar(&self, c: f32) -> Result<Tensor<B>> {
        let c = Tensor::scalar(self.backend(), c)?;
        self.sub(&c)
    }

    /// `c - self`: one IEEE subtraction per element (PyTorch's `c - x`, `torch.rsub`),
    /// recorded as [`Tensor::sub`] of a 0-d constant and `self`.
    pub fn rsub_scalar(&self, c: f32) -> Result<Tensor<B>> {
        let c = Tensor::scalar(self.backend(), c)?;
        c.sub(self)
    }

    /// `c / self`: one IEEE division per element (PyTorch's `c / x`), recorded as
    /// [`Tensor::div`] of a 0-d constant and `self`.
    pub fn rdiv_scalar(&self, c: f32) -> Result<Tensor<B>> {
        let c = Tensor::scalar(self.backend(), c)?;
        c.div(self)
    }
}

/// Implements a binary operator for the four combinations of borrowed and owned tensors.
macro_rules! tensor_tensor {
    ($trait:ident, $fn:ident, $method:ident) => {
        impl<B: Backend> $trait<&Tensor<B>> for &Tensor<B> {
            type Output = Result<Tensor<B>>;
            fn $fn(self, rhs: &Tensor<B>) -> Result<Tensor<B>> {
                Tensor::$method(self, rhs)
            }
        }

        impl<B: Backend> $trait<Tensor<B>> for &Tensor<B> {
            type Output = Result<Tensor<B>>;
            fn $fn(self, rhs: Tensor<B>) -> Result<Tensor<B>> {
                Tensor::$method(self, &rhs)
            }
        }

        impl<B: Backend> $trait<&Tensor<B>> for Tensor<B> {
            type Output = Result<Tensor<B>>;
            fn $fn(self, rhs: &Tensor<B>) -> Result<Tensor<B>> {
                Tensor::$method(&self, rhs)
            }
        }

        impl<B: Backend> $trait<Tensor<B>> for Tensor<B> {
            type Output = Result<Tensor<B>>;
            fn $fn(self, rhs: Tensor<B>) -> Result<Tensor<B>> {
                Tensor::$method(&self, &rhs)
            }
        }
    };
}

/// Implements `tensor op f32` and `f32 op tensor` for borrowed and owned tensors.
macro_rules! tensor_scalar {
    ($trait:ident, $fn:ident, $method:ident, $rmethod:ident) => {
        impl<B: Backend> $trait<f32> for &Tensor<B> {
            type Output = Result<Tensor<B>>;
            fn $fn(self, rhs: f32) -> Result<Tensor<B>> {
                Tensor::$method(self, rhs)
            }
        }

        impl<B: Backend> $trait<f32> for Tensor<B> {
            type Output = Result<Tensor<B>>;
            fn $fn(self, rhs: f32) -> Result<Tensor<B>> {
                Tensor::$method(&self, rhs)
            }
        }

        impl<B: Backend> $trait<&Tensor<B>> for f32 {
            type Output = Result<Tensor<B>>;
            fn $fn(self, rhs: &Tensor<B>) -> Result<Tensor<B>> {
                Tensor::$rmethod(rhs, self)
            }
        }

        impl<B: Backend> $trait<Tensor<B>> for f32 {
            type Output = Result<Tensor<B>>;
            fn $fn(self, rhs: Tensor<B>) -> Result<Tensor<B>> {
                Tensor::$rmethod(&rhs, self)
            }
        }
    };
}

tensor_tensor!(Add, add, add);
tensor_tensor!(Sub, sub, sub);
tensor_tensor!(Mul, mul, mul);
tensor_tensor!(Div, div, div);
tensor_scalar!(Add, add, add_scalar, add_scalar);
tensor_scalar!(Sub, sub, sub_scalar, rsub_scalar);
tensor_scalar!(Mul, mul, mul_scalar, mul_scalar);
tensor_scalar!(Div, div, div_scalar, rdiv_scalar);

impl<B: Backend> Neg for &Tensor<B> {
    type Output = Result<Tensor<B>>;
    fn neg(self) -> Result<Tensor<B>> {
        Tensor::neg(self)
    }
}

impl<B: Backend> Neg for Tensor<B> {
    type Output = Result<Tensor<B>>;
    fn neg(self) -> Result<Tensor<B>> {
        Tensor::neg(&self)
    }
}
