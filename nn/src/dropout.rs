//! The dropout layer.

use crate::error::{Error, Result};
use crate::module::Module;
use exactgrad_autograd::Tensor;
use exactgrad_core::{Backend, Philox};
use std::fmt;
use std::sync::Mutex;

/// Zeroes elements with probability `p` in training and scales the others by
/// `1 / (1 − p)` (PyTorch's `nn.Dropout`); the identity in evaluation.
///
/// The masks come from the layer's own [`Philox`] stream, one key per training call
/// ([`Tensor::dropout`], `docs/arithmetic.md` §5), so a seed fixes every mask on every
/// backend and thread count. A new layer is in training mode.
pub struct Dropout {
    p: f32,
    training: bool,
    rng: Mutex<Philox>,
}

impl Dropout {
    /// A layer dropping with probability `p`, its masks drawn from `rng`.
    ///
    /// Fails when `p` is outside `[0, 1]` (or NaN).
    pub fn new(p: f32, rng: Philox) -> Result<Self> {
        if !(0.0..=1.0).contains(&p) {
            return Err(Error::invalid(
                "Dropout::new",
                "p",
                format!("dropout probability has to be between 0 and 1, got {p}"),
            ));
        }
        Ok(Self {
            p,
            training: true,
            rng: Mutex::new(rng),
        })
    }

    /// The drop probability.
    pub fn p(&self) -> f32 {
        self.p
    }

    /// Whether the layer is in training mode.
    pub fn is_training(&self) -> bool {
        self.training
    }
}

impl<B: Backend> Module<B> for Dropout {
    fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        if !self.training {
            return Ok(input.clone());
        }
        let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
        Ok(input.dropout(self.p, true, &mut rng)?)
    }

    fn visit_parameters(&self, _prefix: &str, _f: &mut dyn FnMut(&str, &Tensor<B>)) {}

    fn set_training(&mut self, training: bool) {
        self.training = training;
    }
}

impl fmt::Debug for Dropout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Dropout(p={})", self.p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use exactgrad_backends::ScalarRefBackend;

    #[test]
    fn training_masks_and_evaluation_identity() {
        let b = ScalarRefBackend;
        let mut d = Dropout::new(0.5, Philox::new(7)).unwrap();
        let x = Tensor::ones(&b, [400]).unwrap();
        let y = Module::<ScalarRefBackend>::forward(&d, &x)
            .unwrap()
            .to_vec()
            .unwrap();
        assert!(y.iter().all(|&v| v == 0.0 || v == 2.0));
        let kept = y.iter().filter(|&&v| v == 2.0).count();
        assert!((150..250).contains(&kept), "{kept} of 400 kept");
        // The layer's stream equals the functional call with the same generator.
        let want = x
            .dropout(0.5, true, &mut Philox::new(7))
            .unwrap()
            .to_vec()
            .unwrap();
        assert_eq!(y, want);
        let y2 = Module::<ScalarRefBackend>::forward(&d, &x)
            .unwrap()
            .to_vec()
            .unwrap();
        assert_ne!(y, y2, "a new mask per call");
        Module::<ScalarRefBackend>::set_training(&mut d, false);
        assert!(!d.is_training());
        let e = Module::<ScalarRefBackend>::forward(&d, &x).unwrap();
        assert!(e.shares_storage(&x));
        assert!(Dropout::new(1.5, Philox::new(1)).is_err());
        assert!(Dropout::new(f32::NAN, Philox::new(1)).is_err());
    }
}
