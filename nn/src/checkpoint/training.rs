//! Training checkpoints: [`TrainingState`] captures and restores everything a run needs
//! to continue with the same bits, in one call each; [`TrainingCheckpoint`] is the file.

use super::load::{load_entries, prepare_entries, LoadOptions, Prepared};
use super::tensor_file::{Integrity, TensorFile};
use crate::data::{Collate, DataLoader, Dataset, LoaderPosition, LoaderState};
use crate::error::{Error, Result};
use crate::module::{Entry, Module, ModuleExt};
use crate::optim::{GroupLrs, LrScheduler, Optimizer, SchedulerKind, SchedulerState};
use exactgrad_core::{Backend, Philox};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const MODEL: &str = "model.";
const OPTIMIZER: &str = "optimizer.";
/// The metadata entry naming the format and its version.
const FORMAT_KEY: &str = "format";
const FORMAT: &str = "exactgrad training checkpoint 4";

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
/// metadata the random streams of the model's modules (`stream.<path>`), the scheduler's
/// progress (`scheduler.*`), the data loader's configuration, shuffle seed and position
/// (`loader.*`), the loop's own random streams (`rng.<name>`) and free entries
/// (`user.*`). Made by [`TrainingState::capture`] and read by [`TrainingState::restore`]
/// (`docs/checkpoints.md` lists the entries). The same state always gives the same bytes.
///
/// [`save`](Self::save) and [`to_bytes`](Self::to_bytes) add a SHA-256 digest of the
/// whole file, which [`load`](Self::load) and [`from_bytes`](Self::from_bytes) verify
/// ([`integrity`](Self::integrity)); a file without one (written by hand or by other
/// tools) still loads, as [`Integrity::Unverified`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TrainingCheckpoint {
    file: TensorFile,
}

fn bad(op: &'static str, message: impl Into<String>) -> Error {
    Error::invalid(op, "checkpoint", message)
}

impl TrainingCheckpoint {
    /// A checkpoint holding the tensors and metadata of `file`.
    pub fn from_file(file: TensorFile) -> Self {
        Self { file }
    }

    /// The tensors and metadata.
    pub fn file(&self) -> &TensorFile {
        &self.file
    }

    /// Reads the checkpoint at `path`, verifying its digest if it has one (see
    /// [`TensorFile::from_bytes`]; a damaged file is an error).
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        Ok(Self {
            file: TensorFile::load(path)?,
        })
    }

    /// Decodes a checkpoint's bytes, verifying its digest if it has one.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        Ok(Self {
            file: TensorFile::from_bytes(bytes)?,
        })
    }

    /// The bytes of the checkpoint's file, with the SHA-256 digest of the whole file
    /// ([`TensorFile::to_bytes_with_checksum`]).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        self.file.to_bytes_with_checksum()
    }

    /// Writes the checkpoint, with its digest, to `path` atomically: a crash while
    /// writing leaves the previous checkpoint at `path` intact ([`super::write_atomic`]).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        self.file.save_with_checksum(path)
    }

    /// Whether the bytes the checkpoint was read from matched their digest
    /// ([`Integrity::Verified`]), or held none ([`Integrity::Unverified`]; also for a
    /// checkpoint captured in memory).
    pub fn integrity(&self) -> Integrity {
        self.file.integrity()
    }

    /// Stores a free entry (a run's configuration, its history) as metadata `user.<key>`.
    pub fn set_value(&mut self, key: &str, value: impl Into<String>) {
        self.file.set_metadata(&format!("user.{key}"), value);
    }

    /// A free entry stored by [`set_value`](Self::set_value).
    pub fn value(&self, key: &str) -> Option<&str> {
        self.file.metadata(&format!("user.{key}"))
    }

    /// The data loader's position stored in the checkpoint, if it holds a loader.
    pub fn position(&self) -> Option<LoaderPosition> {
        get_loader(&self.file).ok().flatten().map(|s| s.position)
    }
}

/// A data loader whose state a training checkpoint saves (every [`DataLoader`]).
pub trait ResumableLoader {
    /// The configuration, shuffle seed and position.
    fn loader_state(&self) -> LoaderState;

    /// Checks that a saved state fits this loader (see
    /// [`DataLoader::check_state`]).
    fn check_loader_state(&self, state: &LoaderState) -> Result<()>;

    /// Restores a saved state; fails, changing nothing, when it does not fit.
    fn restore_loader_state(&self, state: &LoaderState) -> Result<()>;
}

impl<B: Backend, D: Dataset> ResumableLoader for DataLoader<B, D>
where
    D::Item: Collate<B>,
{
    fn loader_state(&self) -> LoaderState {
        self.state()
    }

    fn check_loader_state(&self, state: &LoaderState) -> Result<()> {
        self.check_state(state)
    }

    fn restore_loader_state(&self, state: &LoaderState) -> Result<()> {
        self.restore_state(state)
    }
}

/// The parts of a training run — model, optimizer, and optionally a learning-rate
/// scheduler, a data loader and the loop's own random streams — gathered so that one call
/// captures them into a [`TrainingCheckpoint`] (or a file) and one restores them.
///
/// What is captured: the model's parameters and buffers and the key and position of every
/// random stream its modules report (dropout: [`RandomStream`](crate::RandomStream)), the
/// optimizer's state and rate, the scheduler's progress, the loader's shuffle seed and
/// position (the loader advances it itself as batches are taken), and each named
/// [`Philox`] stream. A run restored from it continues with the same bits as one that
/// never stopped (`docs/checkpoints.md`).
///
/// Restoring is strict: the checkpoint must hold exactly the parts given (a scheduler
/// given with no scheduler state in the file is an error, and so is a scheduler state with
/// no scheduler given), the model's streams by their paths, and values that the
/// optimizer and scheduler can hold; every tensor and metadata entry of the file must
/// belong to exactly one part (the error names what is missing and what is left over).
/// When anything does not fit, nothing changes.
///
/// ```
/// use exactgrad_autograd::Tensor;
/// use exactgrad_backends::ScalarRefBackend;
/// use exactgrad_core::Philox;
/// use exactgrad_nn::checkpoint::TrainingState;
/// use exactgrad_nn::data::{ClassificationData, DataLoader};
/// use exactgrad_nn::optim::{Optimizer, Sgd, SgdConfig};
/// use exactgrad_nn::{Linear, ModuleExt, Module};
///
/// # fn main() -> exactgrad_nn::Result<()> {
/// let b = ScalarRefBackend;
/// let data = ClassificationData::new((0..24).map(|i| i as f32).collect(), vec![0, 1, 0, 1, 1, 0, 0, 1], 3, 2)?;
/// let run = |steps: usize, path: Option<&std::path::Path>| -> exactgrad_nn::Result<Vec<f32>> {
///     let model = Linear::new(&b, 3, 2, &mut Philox::new(1))?;
///     let mut opt = Sgd::new(model.parameters(), SgdConfig { momentum: 0.9, ..SgdConfig::new(0.01) })?;
///     let loader = DataLoader::new(&b, &data, 2)?.shuffle(5);
///     if let Some(p) = path.filter(|p| p.exists()) {
///         TrainingState::new(&model, &mut opt).loader(&loader).load(p)?;
///     }
///     for _ in 0..steps {
///         let batch = match loader.iter().next() {
///             Some(batch) => batch?,
///             None => loader.iter().next().expect("a batch")?, // the next epoch
///         };
///         let loss = model.forward(&batch.inputs)?.cross_entropy(&batch.targets, Default::default())?;
///         opt.clear_grad();
///         loss.backward()?;
///         opt.step()?;
///     }
///     if let Some(p) = path {
///         TrainingState::new(&model, &mut opt).loader(&loader).save(p)?;
///     }
///     Ok(model.weight().to_vec()?)
/// };
/// let path = std::env::temp_dir().join(format!("doc-state-{}.safetensors", std::process::id()));
/// let whole = run(6, None)?;
/// run(3, Some(&path))?; // 3 steps, then saved
/// assert_eq!(run(3, Some(&path))?, whole); // restored, 3 more: the same bits
/// # std::fs::remove_file(&path).ok();
/// # Ok(())
/// # }
/// ```
pub struct TrainingState<'a, B: Backend> {
    model: &'a dyn Module<B>,
    optimizer: &'a mut dyn Optimizer<B>,
    scheduler: Option<&'a mut dyn LrScheduler>,
    loader: Option<&'a dyn ResumableLoader>,
    streams: Vec<(&'a str, &'a mut Philox)>,
}

/// A model stream's saved state: the key and position, or `None` for a stream that was
/// never seeded.
type StreamState = Option<(u64, u64)>;

/// Everything a checkpoint says, read and checked before anything changes.
struct Plan<'f, B: Backend> {
    model: Prepared<'f, B>,
    model_streams: BTreeMap<String, StreamState>,
    scheduler: Option<SchedulerState>,
    loader: Option<LoaderState>,
    streams: Vec<Philox>,
}

impl<'a, B: Backend> TrainingState<'a, B> {
    /// The model and its optimizer.
    pub fn new(model: &'a dyn Module<B>, optimizer: &'a mut dyn Optimizer<B>) -> Self {
        Self {
            model,
            optimizer,
            scheduler: None,
            loader: None,
            streams: Vec::new(),
        }
    }

    /// Adds the learning-rate scheduler.
    #[must_use]
    pub fn scheduler(mut self, scheduler: &'a mut dyn LrScheduler) -> Self {
        self.scheduler = Some(scheduler);
        self
    }

    /// Adds the data loader (its shuffle seed and position).
    #[must_use]
    pub fn loader(mut self, loader: &'a dyn ResumableLoader) -> Self {
        self.loader = Some(loader);
        self
    }

    /// Adds a random stream of the training loop itself (input noise, augmentation),
    /// saved as `rng.<name>`.
    #[must_use]
    pub fn stream(mut self, name: &'a str, rng: &'a mut Philox) -> Self {
        self.streams.push((name, rng));
        self
    }

    /// The checkpoint of the current state.
    ///
    /// Fails when a tensor cannot be read.
    pub fn capture(&self) -> Result<TrainingCheckpoint> {
        let mut file = TensorFile::new();
        file.set_metadata(FORMAT_KEY, FORMAT);
        file.extend_prefixed(MODEL, &self.model.state_dict()?);
        let mut streams = Vec::new();
        self.model.visit_entries(&mut |name, e| {
            if let Entry::Stream(s) = e {
                streams.push((name.to_string(), s.state()));
            }
        });
        for (name, state) in streams {
            file.set_metadata(&format!("stream.{name}"), put_stream(state));
        }
        file.extend_prefixed(OPTIMIZER, &self.optimizer.state_dict()?);
        if let Some(s) = &self.scheduler {
            put_scheduler(&mut file, "scheduler", &s.state());
        }
        if let Some(l) = &self.loader {
            put_loader(&mut file, &l.loader_state());
        }
        for (name, rng) in &self.streams {
            file.set_metadata(
                &format!("rng.{name}"),
                put_stream(Some((rng.seed(), rng.position()))),
            );
        }
        if let Some(step) = exactgrad_autograd::trace::current_step() {
            // A traced run's checkpoint says which step comes next, so that the trace of a
            // run resumed from it continues the step numbers (`docs/debugging.md`).
            file.set_metadata(TRACE_STEP_KEY, step.to_string());
        }
        Ok(TrainingCheckpoint { file })
    }

    /// Captures the state and writes it to `path` atomically.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        self.capture()?.save(path)
    }

    /// Reads the checkpoint at `path` and restores it (see [`restore`](Self::restore));
    /// returns whether the file's digest was verified.
    pub fn load(&mut self, path: impl AsRef<Path>) -> Result<Integrity> {
        self.restore(&TrainingCheckpoint::load(path)?)
    }

    /// Restores every part from `checkpoint`: the model's parameters, buffers and random
    /// streams, the optimizer's state (its buffers and hyper-parameters, the learning
    /// rate included, whether a scheduler or the program set it), the scheduler's
    /// progress, the loader's shuffle seed and position, and the named streams. Returns
    /// whether the bytes the checkpoint was read from matched their digest
    /// ([`Integrity::Verified`]) or held none ([`Integrity::Unverified`]).
    ///
    /// Fails, changing nothing, when the checkpoint is not of this format, lacks a part
    /// given here or holds one not given, holds an entry that belongs to no part, does
    /// not fit the model (the error names every entry), or holds optimizer or scheduler
    /// values they cannot hold (named).
    pub fn restore(&mut self, checkpoint: &TrainingCheckpoint) -> Result<Integrity> {
        let plan = self.plan(checkpoint)?;
        let before = self.capture()?;
        let scheduler_before = self.scheduler.as_ref().map(|s| s.state());
        // The parts that can still refuse their state go first, each all or nothing: the
        // scheduler, whose own state always loads back, then the optimizer.
        if let (Some(s), Some(state)) = (self.scheduler.as_deref_mut(), &plan.scheduler) {
            s.load_state(state)?;
        }
        if let Err(e) = self
            .optimizer
            .load_state_dict(&checkpoint.file.strip_prefix(OPTIMIZER))
        {
            if let (Some(s), Some(state)) = (self.scheduler.as_deref_mut(), &scheduler_before) {
                let _ = s.load_state(state);
            }
            return Err(e);
        }
        if let Err(e) = self.apply_checked(plan) {
            // Only an allocation can fail here: put everything back as well as possible.
            self.roll_back(&before, scheduler_before.as_ref());
            return Err(e);
        }
        if let Some(step) = checkpoint
            .file
            .metadata(TRACE_STEP_KEY)
            .and_then(|v| v.parse::<u64>().ok())
        {
            // The trace of the resumed run continues the step numbers.
            exactgrad_autograd::trace::set_step(step);
        }
        Ok(checkpoint.integrity())
    }

    /// Applies the parts of a plan that were checked in full (the model's values, the
    /// loader's position, the streams).
    fn apply_checked(&mut self, plan: Plan<'_, B>) -> Result<()> {
        plan.model.commit(&|f| self.model.visit_entries(f))?;
        if let (Some(l), Some(state)) = (self.loader, &plan.loader) {
            l.restore_loader_state(state)?;
        }
        self.model.visit_entries(&mut |name, e| {
            if let Entry::Stream(s) = e {
                match plan.model_streams.get(name) {
                    Some(Some((seed, position))) => s.restore(*seed, *position),
                    Some(None) => s.clear(),
                    None => {}
                }
            }
        });
        for ((_, rng), state) in self.streams.iter_mut().zip(plan.streams) {
            **rng = state;
        }
        Ok(())
    }

    /// Puts back the state captured in `before` (best effort, after a failed
    /// allocation): the model's values (any value: they are its own), the optimizer's
    /// and the scheduler's states and the loader's position. The streams are set last,
    /// so they never changed.
    fn roll_back(&mut self, before: &TrainingCheckpoint, scheduler: Option<&SchedulerState>) {
        let file = &before.file;
        let own = LoadOptions {
            allow_non_finite: true,
            ..LoadOptions::default()
        };
        let _ = load_entries(&|f| self.model.visit_entries(f), file, MODEL, own);
        let _ = self
            .optimizer
            .load_state_dict(&file.strip_prefix(OPTIMIZER));
        if let (Some(s), Some(state)) = (self.scheduler.as_deref_mut(), scheduler) {
            let _ = s.load_state(state);
        }
        if let (Some(l), Ok(Some(state))) = (self.loader, get_loader(file)) {
            let _ = l.restore_loader_state(&state);
        }
    }

    /// Reads and checks everything `checkpoint` holds for the parts given, and that every
    /// entry belongs to one of them.
    fn plan<'f>(&self, checkpoint: &'f TrainingCheckpoint) -> Result<Plan<'f, B>> {
        let op = "TrainingState::restore";
        let file = &checkpoint.file;
        match file.metadata(FORMAT_KEY) {
            Some(FORMAT) => {}
            Some(other) => {
                return Err(bad(op, format!("is `{other}`, this build reads `{FORMAT}`")))
            }
            None => {
                return Err(bad(
                    op,
                    format!("has no `{FORMAT_KEY}` entry: not a training checkpoint of this format ({FORMAT})"),
                ))
            }
        }
        // Every entry must belong to exactly one part: what each part reads is counted
        // here, and whatever is left is refused by name.
        let mut used: BTreeSet<String> = BTreeSet::from([FORMAT_KEY.to_string()]);
        let metadata_under = |prefix: &str| -> Vec<String> {
            file.metadata_entries()
                .filter(|(k, _)| k.starts_with(prefix))
                .map(|(k, _)| k.to_string())
                .collect()
        };
        // The model's tensors (its strict load refuses an unknown one) and the
        // optimizer's tensors and metadata (so does its load).
        used.extend(
            file.names()
                .into_iter()
                .filter(|n| n.starts_with(MODEL) || n.starts_with(OPTIMIZER))
                .map(str::to_string),
        );
        used.extend(metadata_under(OPTIMIZER));
        used.extend(metadata_under("user."));
        // The next step of the trace that recorded the run (read by `restore`).
        if let Some(v) = file.metadata(TRACE_STEP_KEY) {
            if v.parse::<u64>().is_err() {
                return Err(bad(
                    op,
                    format!("metadata entry `{TRACE_STEP_KEY}` = `{v}` is not a step number"),
                ));
            }
            used.insert(TRACE_STEP_KEY.to_string());
        }
        // The model's streams, by path, strictly.
        let mut paths = Vec::new();
        self.model.visit_entries(&mut |name, e| {
            if let Entry::Stream(_) = e {
                paths.push(name.to_string());
            }
        });
        let mut model_streams = BTreeMap::new();
        let mut missing = Vec::new();
        for p in &paths {
            match file.metadata(&format!("stream.{p}")) {
                Some(v) => {
                    model_streams.insert(p.clone(), parse_stream(op, &format!("stream.{p}"), v)?);
                }
                None => missing.push(format!("stream.{p}")),
            }
        }
        let unexpected: Vec<&str> = file
            .metadata_entries()
            .filter_map(|(k, _)| k.strip_prefix("stream."))
            .filter(|p| !paths.iter().any(|q| q == p))
            .collect();
        if !missing.is_empty() || !unexpected.is_empty() {
            return Err(bad(
                op,
                format!(
                    "the model's random streams do not match: missing {missing:?}, unexpected {:?}",
                    unexpected
                        .iter()
                        .map(|p| format!("stream.{p}"))
                        .collect::<Vec<_>>()
                ),
            ));
        }
        used.extend(metadata_under("stream."));
        let model = prepare_entries(
            &|f| self.model.visit_entries(f),
            file,
            MODEL,
            LoadOptions::default(),
        )?;
        let held = |prefix: &str| !metadata_under(prefix).is_empty();
        let scheduler = match (&self.scheduler, held("scheduler.")) {
            (Some(_), true) => {
                let state = get_scheduler(file, "scheduler")?;
                let mut keys = TensorFile::new();
                put_scheduler(&mut keys, "scheduler", &state);
                used.extend(keys.metadata_entries().map(|(k, _)| k.to_string()));
                Some(state)
            }
            (None, false) => None,
            (Some(_), false) => {
                return Err(bad(op, "holds no scheduler state, but a scheduler was given"))
            }
            (None, true) => {
                return Err(bad(
                    op,
                    "holds a scheduler's state: give the scheduler (`.scheduler(&mut s)`) to restore it",
                ))
            }
        };
        let loader = match (&self.loader, held("loader.")) {
            (Some(_), true) => {
                let state = get_loader(file)?.ok_or_else(|| {
                    bad(op, "holds part of a data loader's state but no `loader.epoch`")
                })?;
                let mut keys = TensorFile::new();
                put_loader(&mut keys, &state);
                used.extend(keys.metadata_entries().map(|(k, _)| k.to_string()));
                Some(state)
            }
            (None, false) => None,
            (Some(_), false) => {
                return Err(bad(op, "holds no data loader state, but a loader was given"))
            }
            (None, true) => {
                return Err(bad(
                    op,
                    "holds a data loader's position: give the loader (`.loader(&loader)`) to restore it",
                ))
            }
        };
        let mut streams = Vec::with_capacity(self.streams.len());
        for (name, _) in &self.streams {
            let key = format!("rng.{name}");
            let v = file
                .metadata(&key)
                .ok_or_else(|| bad(op, format!("holds no random stream `{key}`")))?;
            match parse_stream(op, &key, v)? {
                Some((seed, position)) => streams.push(Philox::at_position(seed, position)),
                None => return Err(bad(op, format!("entry `{key}` has no seed"))),
            }
            used.insert(key);
        }
        let extra: Vec<&str> = file
            .metadata_entries()
            .filter_map(|(k, _)| k.strip_prefix("rng."))
            .filter(|n| !self.streams.iter().any(|(m, _)| m == n))
            .collect();
        if !extra.is_empty() {
            return Err(bad(
                op,
                format!("holds random streams that were not given: {extra:?}"),
            ));
        }
        let left: Vec<String> = file
            .names()
            .into_iter()
            .map(str::to_string)
            .chain(file.metadata_entries().map(|(k, _)| k.to_string()))
            .filter(|k| !used.contains(k))
            .collect();
        if !left.is_empty() {
            return Err(bad(
                op,
                format!("holds entries that belong to no part given: {left:?}"),
            ));
        }
        if let (Some(l), Some(state)) = (&self.loader, &loader) {
            l.check_loader_state(state)?;
        }
        Ok(Plan {
            model,
            model_streams,
            scheduler,
            loader,
            streams,
        })
    }
}

/// The metadata key of the next step of the trace that recorded a run, when one did.
const TRACE_STEP_KEY: &str = "trace.next_step";

fn put_stream(state: StreamState) -> String {
    match state {
        Some((seed, position)) => format!("{seed}:{position}"),
        None => "unseeded".to_string(),
    }
}

fn parse_stream(op: &'static str, key: &str, v: &str) -> Result<StreamState> {
    if v == "unseeded" {
        return Ok(None);
    }
    v.split_once(':')
        .and_then(|(s, p)| Some((s.parse::<u64>().ok()?, p.parse::<u64>().ok()?)))
        .map(Some)
        .ok_or_else(|| {
            bad(
                op,
                format!("metadata entry `{key}` = `{v}` is not SEED:POSITION"),
            )
        })
}

fn put_loader(file: &mut TensorFile, s: &LoaderState) {
    file.set_metadata("loader.len", s.len.to_string());
    file.set_metadata("loader.batch_size", s.batch_size.to_string());
    file.set_metadata("loader.drop_last", s.drop_last.to_string());
    file.set_metadata(
        "loader.shuffle_seed",
        s.shuffle_seed
            .map_or_else(|| "none".to_string(), |seed| seed.to_string()),
    );
    file.set_metadata("loader.epoch", s.position.epoch.to_string());
    file.set_metadata("loader.batch", s.position.batch.to_string());
}

fn get_loader(file: &TensorFile) -> Result<Option<LoaderState>> {
    if file.metadata("loader.epoch").is_none() {
        return Ok(None);
    }
    let seed: String = file.metadata_parsed("loader.shuffle_seed", "a seed or `none`")?;
    let shuffle_seed = match seed.as_str() {
        "none" => None,
        s => Some(s.parse::<u64>().map_err(|_| {
            bad(
                "TrainingState::restore",
                format!("metadata entry `loader.shuffle_seed` = `{s}` is not a seed or `none`"),
            )
        })?),
    };
    Ok(Some(LoaderState {
        len: file.metadata_parsed("loader.len", "a length")?,
        batch_size: file.metadata_parsed("loader.batch_size", "a batch size")?,
        drop_last: file.metadata_parsed("loader.drop_last", "true or false")?,
        shuffle_seed,
        position: LoaderPosition {
            epoch: file.metadata_parsed("loader.epoch", "an epoch")?,
            batch: file.metadata_parsed("loader.batch", "a batch count")?,
        },
    }))
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
    file.set_metadata(&format!("{prefix}.groups"), s.groups.len().to_string());
    for (g, lrs) in s.groups.iter().enumerate() {
        // Group 0 is the scheduler's own rates; these are the groups after it.
        let key = |what: &str| format!("{prefix}.group.{}.{what}", g + 1);
        file.set_metadata(&key("base_lr"), format!("{:?}", lrs.base_lr));
        file.set_metadata(&key("last_lr"), format!("{:?}", lrs.last_lr));
    }
}

fn get_scheduler(file: &TensorFile, prefix: &str) -> Result<SchedulerState> {
    let name: String = file.metadata_parsed(&format!("{prefix}.kind"), "a scheduler name")?;
    let kind = KINDS
        .into_iter()
        .find(|k| k.name() == name)
        .ok_or_else(|| {
            bad(
                "TrainingState::restore",
                format!("metadata entry `{prefix}.kind` = `{name}` names no scheduler"),
            )
        })?;
    let children: usize = file.metadata_parsed(&format!("{prefix}.children"), "a count")?;
    if children > KINDS.len() * 64 {
        return Err(bad(
            "TrainingState::restore",
            format!("metadata entry `{prefix}.children` = {children} is not a scheduler count"),
        ));
    }
    let groups: usize = file.metadata_parsed(&format!("{prefix}.groups"), "a count")?;
    if groups > file.metadata_entries().count() {
        return Err(bad(
            "TrainingState::restore",
            format!("metadata entry `{prefix}.groups` = {groups} is not a group count"),
        ));
    }
    Ok(SchedulerState {
        kind,
        last_epoch: file.metadata_parsed(&format!("{prefix}.last_epoch"), "a step count")?,
        base_lr: file.metadata_parsed(&format!("{prefix}.base_lr"), "a learning rate")?,
        last_lr: file.metadata_parsed(&format!("{prefix}.last_lr"), "a learning rate")?,
        children: (0..children)
            .map(|i| get_scheduler(file, &format!("{prefix}.{i}")))
            .collect::<Result<_>>()?,
        groups: (1..=groups)
            .map(|g| {
                let key = |what: &str| format!("{prefix}.group.{g}.{what}");
                Ok(GroupLrs {
                    base_lr: file.metadata_parsed(&key("base_lr"), "a learning rate")?,
                    last_lr: file.metadata_parsed(&key("last_lr"), "a learning rate")?,
                })
            })
            .collect::<Result<_>>()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheduler_states_round_trip_through_the_metadata() -> Result<()> {
        let child = SchedulerState {
            kind: SchedulerKind::CosineAnnealing,
            last_epoch: -1,
            base_lr: 0.1,
            last_lr: 0.1 / 3.0,
            children: Vec::new(),
            groups: Vec::new(),
        };
        let state = SchedulerState {
            kind: SchedulerKind::Sequential,
            last_epoch: 7,
            base_lr: 0.1,
            last_lr: 1.0 / 3.0 * 1e-3,
            children: vec![child.clone(), child],
            groups: vec![GroupLrs {
                base_lr: 0.01,
                last_lr: 0.01 / 3.0,
            }],
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
