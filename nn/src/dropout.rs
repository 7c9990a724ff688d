//! The dropout layer.

use crate::error::{Error, Result};
use crate::module::{Module, TrainingFlag, Visitor};
use crate::random::RandomStream;
use exactgrad_autograd::Tensor;
use exactgrad_core::Backend;
use std::fmt;

/// Zeroes elements with probability `p` in training and scales the others by
/// `1 / (1 − p)` (PyTorch's `nn.Dropout`); the identity in evaluation and when `p = 0`.
///
/// The masks come from the layer's [`RandomStream`] `rng`, one key per training call
/// ([`Tensor::dropout`], `docs/arithmetic.md` §5). The stream is keyed when the model is
/// seeded ([`ModuleExt::seed_streams`](crate::ModuleExt::seed_streams)) and saved by
/// training checkpoints, so a seed fixes every mask on every backend and thread count,
/// and a resumed run draws the masks an uninterrupted one would. A new layer is in
/// training mode.
pub struct Dropout {
    p: f32,
    training: TrainingFlag,
    rng: RandomStream,
}

impl Dropout {
    /// A layer dropping with probability `p`.
    ///
    /// Fails when `p` is outside `[0, 1]` (or NaN).
    pub fn new(p: f32) -> Result<Self> {
        if !(0.0..=1.0).contains(&p) {
            return Err(Error::invalid(
                "Dropout::new",
                "p",
                format!("dropout probability has to be between 0 and 1, got {p}"),
            ));
        }
        Ok(Self {
            p,
            training: TrainingFlag::new(),
            rng: RandomStream::new(),
        })
    }

    /// The drop probability.
    pub fn p(&self) -> f32 {
        self.p
    }

    /// Whether the layer is in training mode.
    pub fn is_training(&self) -> bool {
        self.training.get()
    }

    // The layer is a module over every backend, so a call of a `ModuleExt` method on a
    // standalone layer cannot infer which backend's method is meant (E0283). These
    // inherent methods, found first, do what `ModuleExt`'s do on the layer as a root
    // (its stream at the path `rng`); in a model the model's methods reach it.

    /// Seeds the layer's stream from the run's `seed`, as
    /// [`ModuleExt::seed_streams`](crate::ModuleExt::seed_streams) on the layer: the key
    /// [`stream_seed`](crate::random::stream_seed)`(seed, "rng")`. Fails, changing
    /// nothing, when the stream was restored with another key.
    pub fn seed_streams(&self, seed: u64) -> Result<()> {
        if let Some(restored) = self.rng.conflict(seed, "rng") {
            return Err(crate::module::reseed_conflict("rng", restored, seed));
        }
        self.rng.seed_at(seed, "rng");
        Ok(())
    }

    /// Keys the layer's stream from `seed` at position 0, as
    /// [`ModuleExt::reseed_streams`](crate::ModuleExt::reseed_streams) on the layer.
    pub fn reseed_streams(&self, seed: u64) {
        self.rng.reseed_at(seed, "rng");
    }

    /// Switches between training and evaluation (PyTorch's `train(mode)`).
    pub fn set_training(&self, training: bool) {
        self.training.set(training);
    }

    /// Training mode: drops elements (PyTorch's `train()`).
    pub fn train(&self) {
        self.set_training(true)
    }

    /// Evaluation mode: the identity (PyTorch's `eval()`).
    pub fn eval(&self) {
        self.set_training(false)
    }

    /// `x` through dropout with probability `p`, drawing from `stream` in training (the
    /// dropout of the layers that hold a stream of their own: attention, transformer and
    /// recurrent layers). `owner` names the layer in errors.
    pub(crate) fn apply<B: Backend>(
        owner: &'static str,
        x: &Tensor<B>,
        p: f32,
        training: bool,
        stream: &RandomStream,
    ) -> Result<Tensor<B>> {
        if !training || p == 0.0 {
            return Ok(x.clone());
        }
        stream.with(owner, |rng| x.dropout(p, true, rng))?
    }
}

impl Default for Dropout {
    /// PyTorch's default probability, 0.5 (`nn.Dropout()`).
    fn default() -> Self {
        Self {
            p: 0.5,
            training: TrainingFlag::new(),
            rng: RandomStream::new(),
        }
    }
}

impl<B: Backend> Module<B> for Dropout {
    fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        let _scope = crate::trace::module_scope::<B>(self);
        Self::apply("Dropout", input, self.p, self.training.get(), &self.rng)
    }

    fn visit(&self, v: &mut Visitor<'_, B>) {
        v.stream("rng", &self.rng);
        v.training(&self.training);
    }

    fn describe(&self) -> String {
        format!("{self:?}")
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
    use crate::module::ModuleExt;
    use crate::random::stream_seed;
    use exactgrad_backends::ScalarRefBackend;
    use exactgrad_core::Philox;

    #[test]
    fn training_masks_and_evaluation_identity() {
        let b = ScalarRefBackend;
        let d = Dropout::new(0.5).unwrap();
        let x = Tensor::ones(&b, [400]).unwrap();
        let err = Module::<ScalarRefBackend>::forward(&d, &x)
            .unwrap_err()
            .to_string();
        assert!(err.contains("seed_streams"), "{err}");
        ModuleExt::<ScalarRefBackend>::seed_streams(&d, 7).unwrap();
        let y = Module::<ScalarRefBackend>::forward(&d, &x)
            .unwrap()
            .to_vec()
            .unwrap();
        assert!(y.iter().all(|&v| v == 0.0 || v == 2.0));
        let kept = y.iter().filter(|&&v| v == 2.0).count();
        assert!((150..250).contains(&kept), "{kept} of 400 kept");
        // The layer's stream is the functional call with the stream keyed by the path.
        let want = x
            .dropout(0.5, true, &mut Philox::new(stream_seed(7, "rng")))
            .unwrap()
            .to_vec()
            .unwrap();
        assert_eq!(y, want);
        let y2 = Module::<ScalarRefBackend>::forward(&d, &x)
            .unwrap()
            .to_vec()
            .unwrap();
        assert_ne!(y, y2, "a new mask per call");
        ModuleExt::<ScalarRefBackend>::eval(&d);
        assert!(!d.is_training());
        let e = Module::<ScalarRefBackend>::forward(&d, &x).unwrap();
        assert!(e.shares_storage(&x));
        assert!(Dropout::new(1.5).is_err());
        assert_eq!(Dropout::default().p(), 0.5);
        assert!(Dropout::new(f32::NAN).is_err());
    }

    #[test]
    fn standalone_layer_methods_need_no_backend() {
        // Plain calls (no `ModuleExt::<B>::`): they compile and do what the trait's do.
        let (plain, via_trait) = (Dropout::new(0.5).unwrap(), Dropout::new(0.5).unwrap());
        plain.seed_streams(7).unwrap();
        ModuleExt::<ScalarRefBackend>::seed_streams(&via_trait, 7).unwrap();
        assert_eq!(plain.rng.state(), via_trait.rng.state());
        assert_eq!(plain.rng.state(), Some((stream_seed(7, "rng"), 0)));
        plain.reseed_streams(9);
        ModuleExt::<ScalarRefBackend>::reseed_streams(&via_trait, 9);
        assert_eq!(plain.rng.state(), via_trait.rng.state());
        plain.eval();
        assert!(!plain.is_training());
        plain.train();
        assert!(plain.is_training());
        plain.set_training(false);
        assert!(!ModuleExt::<ScalarRefBackend>::is_training(&plain));
        // A stream restored with another key is refused, as by the trait's method.
        plain.rng.restore(stream_seed(3, "rng"), 5);
        let err = plain.seed_streams(7).unwrap_err().to_string();
        assert!(
            err.contains("seed_streams") && err.contains("`rng`"),
            "{err}"
        );
        assert_eq!(plain.rng.state(), Some((stream_seed(3, "rng"), 5)));
    }
}
