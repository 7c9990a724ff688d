//! [`TrainingCheckpoint`]: everything a training run needs to resume with the same bits.

use super::{load_state_dict_with, LoadOptions, TensorFile};
use crate::data::LoaderPosition;
use crate::error::{Error, Result};
use crate::module::Module;
use crate::optim::{LrScheduler, Optimizer, SchedulerKind, SchedulerState};
use exactgrad_core::{Backend, Philox};
use std::path::Path;

const MODEL: &str = "model.";
const OPTIMIZER: &str = "optimizer.";

const KINDS: [SchedulerKind; 7] = [
    SchedulerKind::Step,
    SchedulerKind::MultiStep,
    SchedulerKind::Exponential,
    SchedulerKind::CosineAnnealing,
    SchedulerKind::Linear,
    SchedulerKind::OneCycle,
    SchedulerKind::Sequential,
];

/// The state of a training run in one safetensors file: the model's state dict (tensors
/// `model.*`, PyTorch's names), the optimizer's state (`optimizer.*`), and in the
/// metadata the scheduler's progress (`scheduler.*`), named random streams (`rng.*`,
/// seed and position), the modules' dropout streams (`rng.model.*`), the data-loader
/// position (`loader.*`) and free entries (`user.*`). Floats are stored as `f32` bit for
/// bit and rates as the shortest decimal that parses back to the same `f64`, so a run
/// restored from it continues with the same bits as a run that never stopped
/// (`docs/checkpoints.md` lists the entries).
///
/// ```
/// use exactgrad_autograd::Tensor;
/// use exactgrad_backends::ScalarRefBackend;
/// use exactgrad_core::Philox;
/// use exactgrad_nn::checkpoint::TrainingCheckpoint;
/// use exactgrad_nn::data::LoaderPosition;
/// use exactgrad_nn::optim::{Optimizer, Sgd, SgdConfig};
/// use exactgrad_nn::{Linear, Module};
///
/// # fn main() -> exactgrad_nn::Result<()> {
/// let b = ScalarRefBackend;
/// let model = Linear::new(&b, 3, 2, &mut Philox::new(1))?;
/// let mut opt = Sgd::new(model.parameters(), SgdConfig { momentum: 0.9, ..SgdConfig::new(0.1) })?;
/// let x = Tensor::ones(&b, [4, 3])?;
/// model.forward(&x)?.sum()?.backward(None, false)?;
/// opt.step()?;
///
/// let mut ckpt = TrainingCheckpoint::new();
/// ckpt.set_model(&model)?;
/// ckpt.set_optimizer(&opt)?;
/// ckpt.set_position(LoaderPosition { epoch: 0, batch: 1 });
/// let path = std::env::temp_dir().join(format!("doc-ckpt-{}.safetensors", std::process::id()));
/// ckpt.save(&path)?;
///
/// let restored = TrainingCheckpoint::load(&path)?;
/// let model2 = Linear::new(&b, 3, 2, &mut Philox::new(99))?;
/// let mut opt2 = Sgd::new(model2.parameters(), SgdConfig { momentum: 0.9, ..SgdConfig::new(0.1) })?;
/// restored.restore_model(&model2)?;
/// restored.restore_optimizer(&mut opt2)?;
/// assert_eq!(model2.weight().to_vec()?, model.weight().to_vec()?);
/// assert_eq!(restored.position()?, LoaderPosition { epoch: 0, batch: 1 });
/// # std::fs::remove_file(&path).ok();
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TrainingCheckpoint {
    file: TensorFile,
}

fn bad(op: &'static str, message: impl Into<String>) -> Error {
    Error::invalid(op, "checkpoint", message)
}

impl TrainingCheckpoint {
    /// An empty checkpoint.
    pub fn new() -> Self {
        Self::default()
    }

    /// A checkpoint holding the tensors and metadata of `file`.
    pub fn from_file(file: TensorFile) -> Self {
        Self { file }
    }

    /// The tensors and metadata.
    pub fn file(&self) -> &TensorFile {
        &self.file
    }

    /// Reads the checkpoint at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        Ok(Self {
            file: TensorFile::load(path)?,
        })
    }

    /// Writes the checkpoint to `path` atomically: a crash while writing leaves the
    /// previous checkpoint at `path` intact ([`super::write_atomic`]).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        self.file.save(path)
    }

    /// Stores the state dict of `model` (tensors `model.<name>`) and the positions of
    /// its dropout streams ([`Module::visit_rngs`]).
    pub fn set_model<B: Backend, M: Module<B> + ?Sized>(&mut self, model: &M) -> Result<()> {
        let dict = model.state_dict()?;
        self.file.extend_prefixed(MODEL, &dict);
        let mut rngs = Vec::new();
        model.visit_rngs("", &mut |name, r| {
            let r = crate::attention::lock(r);
            rngs.push((name.to_string(), r.seed(), r.position()));
        });
        for (name, seed, position) in rngs {
            self.file
                .set_metadata(&format!("rng.model.{name}"), format!("{seed}:{position}"));
        }
        Ok(())
    }

    /// Loads the model's state dict strictly (every entry present, none unexpected, see
    /// [`load_state_dict_with`]) and restores its dropout streams. Fails, changing
    /// nothing, when the model does not fit; the error names every offending entry.
    pub fn restore_model<B: Backend, M: Module<B> + ?Sized>(&self, model: &M) -> Result<()> {
        let op = "TrainingCheckpoint::restore_model";
        let mut rngs = Vec::new();
        let mut missing = None;
        model.visit_rngs("", &mut |name, _| {
            let key = format!("rng.model.{name}");
            match parse_rng(&self.file, &key) {
                Ok(r) => rngs.push(r),
                Err(_) => {
                    missing.get_or_insert(key);
                }
            }
        });
        if let Some(key) = missing {
            return Err(bad(
                op,
                format!("the metadata entry `{key}` is missing or invalid"),
            ));
        }
        load_state_dict_with(model, &self.file, MODEL, LoadOptions::default())?;
        let mut i = 0;
        model.visit_rngs("", &mut |_, r| {
            if let Some(state) = rngs.get(i) {
                *crate::attention::lock(r) = state.clone();
            }
            i += 1;
        });
        Ok(())
    }

    /// Stores the optimizer's state ([`Optimizer::state_dict`], tensors and metadata
    /// under `optimizer.`).
    pub fn set_optimizer<B: Backend, O: Optimizer<B> + ?Sized>(&mut self, opt: &O) -> Result<()> {
        let state = opt.state_dict()?;
        self.file.extend_prefixed(OPTIMIZER, &state);
        Ok(())
    }

    /// Restores the optimizer's state ([`Optimizer::load_state_dict`]).
    pub fn restore_optimizer<B: Backend, O: Optimizer<B> + ?Sized>(
        &self,
        opt: &mut O,
    ) -> Result<()> {
        opt.load_state_dict(&self.file.strip_prefix(OPTIMIZER))
    }

    /// Stores the scheduler's progress ([`LrScheduler::state`]).
    pub fn set_scheduler<S: LrScheduler + ?Sized>(&mut self, scheduler: &S) {
        put_scheduler(&mut self.file, "scheduler", &scheduler.state());
    }

    /// Restores the scheduler's progress and sets the optimizer's learning rate to the
    /// restored one ([`LrScheduler::restore`]).
    pub fn restore_scheduler<S, B, O>(&self, scheduler: &mut S, opt: &mut O) -> Result<()>
    where
        S: LrScheduler,
        B: Backend,
        O: Optimizer<B> + ?Sized,
    {
        let state = get_scheduler(&self.file, "scheduler")?;
        scheduler.restore(&state, opt)
    }

    /// Stores the seed and position of the random stream `name` (a shuffling or
    /// augmentation stream of the training loop).
    pub fn set_rng(&mut self, name: &str, rng: &Philox) {
        self.file.set_metadata(
            &format!("rng.{name}"),
            format!("{}:{}", rng.seed(), rng.position()),
        );
    }

    /// The random stream `name`, at the position it was stored at.
    pub fn rng(&self, name: &str) -> Result<Philox> {
        parse_rng(&self.file, &format!("rng.{name}"))
    }

    /// Stores the data-loader position: the next batch to train on.
    pub fn set_position(&mut self, position: LoaderPosition) {
        self.file
            .set_metadata("loader.epoch", position.epoch.to_string());
        self.file
            .set_metadata("loader.batch", position.batch.to_string());
    }

    /// The data-loader position stored by [`set_position`](Self::set_position).
    pub fn position(&self) -> Result<LoaderPosition> {
        Ok(LoaderPosition {
            epoch: self.file.metadata_parsed("loader.epoch", "an epoch")?,
            batch: self.file.metadata_parsed("loader.batch", "a batch index")?,
        })
    }

    /// Stores a free entry (a run's configuration, its history) as metadata `user.<key>`.
    pub fn set_value(&mut self, key: &str, value: impl Into<String>) {
        self.file.set_metadata(&format!("user.{key}"), value);
    }

    /// A free entry stored by [`set_value`](Self::set_value).
    pub fn value(&self, key: &str) -> Option<&str> {
        self.file.metadata(&format!("user.{key}"))
    }
}

fn parse_rng(file: &TensorFile, key: &str) -> Result<Philox> {
    let v: String = file.metadata_parsed(key, "a random stream")?;
    let parsed = v
        .split_once(':')
        .and_then(|(s, p)| Some((s.parse::<u64>().ok()?, p.parse::<u64>().ok()?)));
    match parsed {
        Some((seed, position)) => Ok(Philox::at_position(seed, position)),
        None => Err(bad(
            "TrainingCheckpoint::rng",
            format!("metadata entry `{key}` = `{v}` is not SEED:POSITION"),
        )),
    }
}

fn put_scheduler(file: &mut TensorFile, prefix: &str, s: &SchedulerState) {
    file.set_metadata(&format!("{prefix}.kind"), s.kind.name());
    file.set_metadata(&format!("{prefix}.last_epoch"), s.last_epoch.to_string());
    file.set_metadata(&format!("{prefix}.base_lr"), format!("{:?}", s.base_lr));
    file.set_metadata(&format!("{prefix}.last_lr"), format!("{:?}", s.last_lr));
    file.set_metadata(&format!("{prefix}.children"), s.children.len().to_string());
    for (i, c) in s.children.iter().enumerate() {
        put_scheduler(file, &format!("{prefix}.{i}"), c);
    }
}

fn get_scheduler(file: &TensorFile, prefix: &str) -> Result<SchedulerState> {
    let name: String = file.metadata_parsed(&format!("{prefix}.kind"), "a scheduler name")?;
    let kind = KINDS
        .into_iter()
        .find(|k| k.name() == name)
        .ok_or_else(|| {
            bad(
                "TrainingCheckpoint::restore_scheduler",
                format!("metadata entry `{prefix}.kind` = `{name}` names no scheduler"),
            )
        })?;
    let children: usize = file.metadata_parsed(&format!("{prefix}.children"), "a count")?;
    Ok(SchedulerState {
        kind,
        last_epoch: file.metadata_parsed(&format!("{prefix}.last_epoch"), "a step count")?,
        base_lr: file.metadata_parsed(&format!("{prefix}.base_lr"), "a learning rate")?,
        last_lr: file.metadata_parsed(&format!("{prefix}.last_lr"), "a learning rate")?,
        children: (0..children)
            .map(|i| get_scheduler(file, &format!("{prefix}.{i}")))
            .collect::<Result<_>>()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::{TransformerEncoderLayer, TransformerEncoderLayerConfig};
    use exactgrad_autograd::Tensor;
    use exactgrad_backends::ScalarRefBackend;

    #[test]
    fn the_dropout_streams_of_modules_are_saved_and_restored() -> Result<()> {
        let b = ScalarRefBackend;
        let config = TransformerEncoderLayerConfig {
            dropout: 0.3,
            batch_first: true,
            ..TransformerEncoderLayerConfig::new(8, 2)
        };
        let layer = TransformerEncoderLayer::new(&b, config, &mut Philox::new(1))?;
        let x = Tensor::randn(&b, [2, 3, 8], 0.0, 1.0, &mut Philox::new(2))?;
        layer.forward(&x)?; // moves the streams
        let mut names = Vec::new();
        layer.visit_rngs("", &mut |n, _| names.push(n.to_string()));
        assert_eq!(names, ["dropout_rng", "self_attn.dropout_rng"]);
        let mut ckpt = TrainingCheckpoint::new();
        ckpt.set_model(&layer)?;
        let want = layer.forward(&x)?.to_vec()?;

        let fresh = TransformerEncoderLayer::new(&b, config, &mut Philox::new(9))?;
        assert_ne!(fresh.forward(&x)?.to_vec()?, want);
        ckpt.restore_model(&fresh)?;
        assert_eq!(
            fresh.forward(&x)?.to_vec()?,
            want,
            "same weights, same dropout masks"
        );

        // A checkpoint without the streams is refused by name.
        let mut no_rng = TensorFile::new();
        no_rng.extend_prefixed(MODEL, &layer.state_dict()?);
        let err = TrainingCheckpoint::from_file(no_rng)
            .restore_model(&fresh)
            .unwrap_err()
            .to_string();
        assert!(err.contains("rng.model.dropout_rng"), "{err}");
        Ok(())
    }

    #[test]
    fn scheduler_states_round_trip_through_the_metadata() -> Result<()> {
        let child = SchedulerState {
            kind: SchedulerKind::CosineAnnealing,
            last_epoch: -1,
            base_lr: 0.1,
            last_lr: 0.1 / 3.0,
            children: Vec::new(),
        };
        let state = SchedulerState {
            kind: SchedulerKind::Sequential,
            last_epoch: 7,
            base_lr: 0.1,
            last_lr: 1.0 / 3.0 * 1e-3,
            children: vec![child.clone(), child],
        };
        let mut f = TensorFile::new();
        put_scheduler(&mut f, "scheduler", &state);
        let bytes = f.to_bytes()?;
        let back = get_scheduler(&TensorFile::from_bytes(&bytes)?, "scheduler")?;
        assert_eq!(back, state, "every f64 parses back to the same bits");
        f.set_metadata("scheduler.kind", "NoSuchLr");
        let err = get_scheduler(&f, "scheduler").unwrap_err().to_string();
        assert!(err.contains("`NoSuchLr` names no scheduler"), "{err}");
        Ok(())
    }
}
