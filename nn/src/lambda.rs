//! [`Lambda`]: a module made from a closure.

use crate::error::{Error, Result};
use crate::module::{Module, Visitor};
use exactgrad_autograd::Tensor;
use exactgrad_core::Backend;
use std::fmt;

/// A module whose `forward` is a closure `Fn(&Tensor<B>) -> Result<Tensor<B>, E>` (any
/// error that converts into [`Error`], so a chain of tensor operations with `?` or a
/// bare `x.relu()` both work). It holds no parameters: the closure's captures are not
/// visited, so a tensor that must be trained or saved belongs in a module, not in a
/// capture. PyTorch has no such module (one writes a one-line `nn.Module` or uses
/// `torch.nn.Sequential` with a function wrapper); its description is `Lambda` or the
/// name given.
///
/// ```
/// use exactgrad_autograd::Tensor;
/// use exactgrad_backends::ScalarRefBackend;
/// use exactgrad_core::Philox;
/// use exactgrad_nn::{Lambda, Linear, Module, Sequential};
///
/// # fn main() -> exactgrad_nn::Result<()> {
/// let b = ScalarRefBackend;
/// let mut rng = Philox::new(0);
/// let model = Sequential::new()
///     .push(Linear::new(&b, 4, 6, &mut rng)?)
///     .push(Lambda::new(|x| x.relu()?.mul_scalar(0.5)))
///     .push(Lambda::named("square", |x: &Tensor<_>| x.mul(x)));
/// let y = model.forward(&Tensor::ones(&b, [2, 4])?)?;
/// assert_eq!(y.dims(), [2, 6]);
/// assert!(model.describe().contains("(2): square"));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy)]
pub struct Lambda<F> {
    f: F,
    name: &'static str,
}

impl<F> Lambda<F> {
    /// The module `x ↦ f(x)`. The closure's argument type is inferred from where the
    /// module is used (a [`Sequential`](crate::Sequential) of one backend); elsewhere
    /// write it, `|x: &Tensor<B>| …`.
    pub fn new<B: Backend, E>(f: F) -> Self
    where
        F: Fn(&Tensor<B>) -> std::result::Result<Tensor<B>, E>,
        E: Into<Error>,
    {
        Self::named("Lambda", f)
    }

    /// The module `x ↦ f(x)`, described as `name`.
    pub fn named<B: Backend, E>(name: &'static str, f: F) -> Self
    where
        F: Fn(&Tensor<B>) -> std::result::Result<Tensor<B>, E>,
        E: Into<Error>,
    {
        Self { f, name }
    }

    /// The name it is described by.
    pub fn name(&self) -> &'static str {
        self.name
    }
}

impl<B: Backend, F, E> Module<B> for Lambda<F>
where
    F: Fn(&Tensor<B>) -> std::result::Result<Tensor<B>, E>,
    E: Into<Error>,
{
    fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        (self.f)(input).map_err(Into::into)
    }

    fn visit(&self, _v: &mut Visitor<'_, B>) {}

    fn describe(&self) -> String {
        self.name.to_string()
    }
}

impl<F> fmt::Debug for Lambda<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Lambda({})", self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::module::ModuleExt;
    use crate::Sequential;
    use exactgrad_backends::ScalarRefBackend;
    use exactgrad_core::Philox;

    type Sr = ScalarRefBackend;

    #[test]
    fn forward_is_the_closure_and_errors_convert() {
        let b = ScalarRefBackend;
        let x = Tensor::randn(&b, [3, 4], 0.0, 1.0, &mut Philox::new(1)).unwrap();
        let scale = Lambda::new(|x: &Tensor<Sr>| x.mul_scalar(3.0));
        assert_eq!(
            scale.forward(&x).unwrap().to_vec().unwrap(),
            x.mul_scalar(3.0).unwrap().to_vec().unwrap()
        );
        assert!(scale.named_parameters().is_empty() && scale.stream_names().is_empty());
        assert_eq!(Module::<Sr>::describe(&scale), "Lambda");
        assert_eq!(format!("{scale:?}"), "Lambda(Lambda)");
        // An operator's shape error passes through unchanged.
        let bad = Lambda::named("reshape", |x: &Tensor<Sr>| x.reshape([5]));
        let err = bad.forward(&x).unwrap_err();
        assert!(matches!(err, Error::Core(_)), "{err}");
        assert_eq!(bad.name(), "reshape");
        // This crate's errors pass through; the closure may capture.
        let limit = 2usize;
        let checked = Lambda::new(move |x: &Tensor<Sr>| {
            if x.rank() > limit {
                Err(Error::invalid("checked", "input", "rank too high"))
            } else {
                Ok(x.clone())
            }
        });
        assert!(checked.forward(&x).is_ok());
        let err = checked
            .forward(&Tensor::zeros(&b, [1, 1, 1]).unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("rank too high"), "{err}");
        // The argument type is inferred inside a chain.
        let seq = Sequential::<Sr>::new()
            .push(Lambda::new(|x| x.relu()))
            .push(Lambda::new(|x| x.sum_dims(&[1], false)));
        assert_eq!(seq.forward(&x).unwrap().dims(), [3]);
    }
}
