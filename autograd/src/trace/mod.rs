//! Operation traces: a record of every step (and, at the finer level, every operation) of
//! a training run, streamed to a file, so that two runs can be compared and the first
//! operation where they parted can be named (`docs/debugging.md`).
//!
//! A trace is off unless started, and costs one relaxed atomic load per operation when
//! off. Started on a thread ([`TraceConfig::start`]), it records that thread's work until
//! the returned [`Trace`] is finished or dropped:
//!
//! - at [`TraceLevel::Steps`], per step: each batch a data loader yields (the digest of
//!   its tensors and labels, its position), each backward pass's loss, each optimizer
//!   update (the digests of the parameter, its gradient and its state before and after,
//!   the learning rate and the other hyper-parameters), each data-parallel reduction and
//!   the positions of the model's random streams;
//! - at [`TraceLevel::Ops`], in addition, every forward operation (its name, its
//!   arguments, the digest of its output and of each input, the record each input came
//!   from, the module and parameter it belongs to) and every backward rule (the gradient
//!   it emits per input), in the engine's order.
//!
//! A digest ([`exactgrad_core::TraceHasher`]) stands for a tensor's bits. In exact mode,
//! two runs of one program give the same digests on every CPU, path and thread count, so
//! every difference in a diff of two traces is a real one: the first record whose outputs
//! differ while all of its inputs matched is where the runs parted ([`diff`]).
//!
//! ```
//! use exactgrad_autograd::trace::{TraceConfig, TraceLevel, TraceSteps};
//! use exactgrad_autograd::Tensor;
//! use exactgrad_backends::ScalarRefBackend;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let path = std::env::temp_dir().join(format!("doc-{}.trace", std::process::id()));
//! let trace = TraceConfig::new(&path).level(TraceLevel::Ops).start()?;
//! let b = ScalarRefBackend;
//! let w = Tensor::from_vec(&b, vec![1.0, -2.0], [2])?.requires_grad()?;
//! let loss = w.mul(&w)?.sum()?;
//! loss.backward()?;
//! exactgrad_autograd::trace::end_step(); // optimizers do this at the end of `step`
//! let summary = trace.finish()?;
//! assert_eq!(summary.steps, 1);
//! let mut steps = TraceSteps::open(&[&path])?;
//! let step = steps.next_step()?.unwrap();
//! let ops: Vec<&str> = step.records.iter().map(|r| r.op.as_str()).collect();
//! // `w · w`: the rule of `mul` emits a gradient into `w` twice, summed into its gradient.
//! assert_eq!(ops, ["mul", "sum", "backward", "sum", "mul", "accumulate_grad", "accumulate_grad"]);
//! # std::fs::remove_file(&path)?;
//! # Ok(())
//! # }
//! ```

pub mod diff;
mod file;
pub mod format;
mod recorder;
pub mod replay;

pub use file::{read_captures, read_notes, ReadError, Step, TraceSteps, BUFFER_BYTES};
pub use format::{
    Capture, Dtype, Header, Kind, ParamInfo, Record, RecordId, Section, StepEnd, TensorInfo, Value,
};
pub use recorder::Suppress;
pub(crate) use recorder::{active, copy_tag, info, NodeTrace, OpInfo, Tag};
pub(crate) use recorder::{backward_rule, backward_start, forward, grad_sum, ints_of, tag_output};

use crate::tensor::Tensor;
use exactgrad_core::Backend;
use std::collections::BTreeSet;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How much a trace records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum TraceLevel {
    /// Per step: batches, losses, optimizer updates, reductions, random streams.
    #[default]
    Steps,
    /// Per operation: everything of [`TraceLevel::Steps`] and every forward operation and
    /// backward rule.
    Ops,
}

impl TraceLevel {
    /// The level's name (`steps`, `ops`).
    pub fn name(self) -> &'static str {
        match self {
            TraceLevel::Steps => "steps",
            TraceLevel::Ops => "ops",
        }
    }
}

/// What a finished trace wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TraceSummary {
    /// Records written.
    pub records: u64,
    /// Steps closed.
    pub steps: u64,
    /// Bytes of the trace file (this segment and any it appended to).
    pub bytes: u64,
    /// Records captured in full.
    pub captured: usize,
}

/// Why a trace could not start or finish.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The trace file could not be created or written.
    #[error("trace file {path}: {error}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        error: std::io::Error,
    },
    /// A trace records on this thread already.
    #[error("a trace is already recording on this thread; finish it before starting another")]
    AlreadyRecording,
    /// A setting is invalid (a capture id that does not parse, …).
    #[error("trace setting `{setting}`: {message}")]
    Invalid {
        /// The setting.
        setting: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A trace or capture file could not be read.
    #[error(transparent)]
    Read(#[from] ReadError),
}

/// The environment variable that names records to capture when the configuration names
/// none (`EXACTGRAD_TRACE_CAPTURE=5:127,5:40`): a run can be captured without changing
/// its code.
pub const CAPTURE_ENV: &str = "EXACTGRAD_TRACE_CAPTURE";

/// The settings of a trace; [`TraceConfig::start`] starts recording.
pub struct TraceConfig {
    path: PathBuf,
    level: TraceLevel,
    append: bool,
    values_up_to: usize,
    capture: Vec<RecordId>,
    capture_path: Option<PathBuf>,
    fields: Vec<(String, String)>,
    first_step: u64,
    named: Vec<recorder::Named>,
    probes: Vec<recorder::Probe>,
    error: Option<TraceError>,
}

impl std::fmt::Debug for TraceConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceConfig")
            .field("path", &self.path)
            .field("level", &self.level)
            .field("append", &self.append)
            .field("values_up_to", &self.values_up_to)
            .field("capture", &self.capture)
            .field("first_step", &self.first_step)
            .field("named", &self.named.len())
            .finish()
    }
}

impl TraceConfig {
    /// A trace to the file at `path` at [`TraceLevel::Steps`], starting at step 1, keeping
    /// the values of one-element outputs (losses).
    pub fn new(path: impl AsRef<Path>) -> Self {
        Self {
            path: path.as_ref().to_path_buf(),
            level: TraceLevel::Steps,
            append: false,
            values_up_to: 1,
            capture: Vec::new(),
            capture_path: None,
            fields: Vec::new(),
            first_step: 1,
            named: Vec::new(),
            probes: Vec::new(),
            error: None,
        }
    }

    /// Records at `level`.
    #[must_use]
    pub fn level(mut self, level: TraceLevel) -> Self {
        self.level = level;
        self
    }

    /// Appends a segment to the trace file at the path instead of replacing it (a resumed
    /// run continuing its trace; a torn tail that a crash left is cut off first). When
    /// the trace is read, the new segment replaces the earlier one's steps from its first
    /// step on.
    #[must_use]
    pub fn append(mut self, append: bool) -> Self {
        self.append = append;
        self
    }

    /// Keeps the values (not only the digest) of every output of at most `n` elements, so
    /// that a diff can show the largest absolute and ulp difference there (default 1).
    #[must_use]
    pub fn values_up_to(mut self, n: usize) -> Self {
        self.values_up_to = n;
        self
    }

    /// Captures record `id` in full (every input and output value) so that it can be
    /// replayed (`exactgrad trace replay`). Without a call, the records named by the
    /// environment variable [`CAPTURE_ENV`] are captured.
    #[must_use]
    pub fn capture(mut self, id: RecordId) -> Self {
        self.capture.push(id);
        self
    }

    /// Writes captures to `path` (default: the trace file's path with `.capture`
    /// appended).
    #[must_use]
    pub fn capture_to(mut self, path: impl AsRef<Path>) -> Self {
        self.capture_path = Some(path.as_ref().to_path_buf());
        self
    }

    /// The number of the first step (default 1; a resumed run's traces continue where the
    /// checkpoint was taken: `TrainingState` sets it when it restores one).
    #[must_use]
    pub fn first_step(mut self, step: u64) -> Self {
        self.first_step = step;
        self
    }

    /// The run's seed, in the header.
    #[must_use]
    pub fn seed(self, seed: u64) -> Self {
        self.field("seed", seed.to_string())
    }

    /// The rank and world size of a data-parallel run, in the header.
    #[must_use]
    pub fn rank(self, rank: usize, world_size: usize) -> Self {
        self.field("rank", rank.to_string())
            .field("world_size", world_size.to_string())
    }

    /// A fact of the header (`key` = `value`).
    #[must_use]
    pub fn field(mut self, key: &str, value: impl Into<String>) -> Self {
        let value = value.into();
        match self.fields.iter_mut().find(|(k, _)| k == key) {
            Some(f) => f.1 = value,
            None => self.fields.push((key.to_string(), value)),
        }
        self
    }

    /// Names a tensor (a parameter or a buffer, `role`), so that the records that read or
    /// write it (or a view of it) give its path; the header lists it with its shape and
    /// its digest now.
    #[must_use]
    pub fn name_tensor<B: Backend>(
        mut self,
        path: &str,
        role: &'static str,
        t: &Tensor<B>,
    ) -> Self {
        let storage = Arc::clone(&t.inner.storage);
        let key = Arc::as_ptr(&storage) as *const () as usize;
        self.named.push(recorder::Named {
            key,
            path: Arc::from(path),
            role,
            shape: t.dims().to_vec(),
            digest: recorder::digest_of(t),
            keep: storage,
        });
        self
    }

    /// Names an object other than a tensor (a module's random stream) by the address of
    /// its shared state, for [`name_of_object`]; the header lists it with `role`.
    #[must_use]
    pub fn name_object(
        mut self,
        path: &str,
        role: &'static str,
        object: Arc<dyn std::any::Any + Send + Sync>,
    ) -> Self {
        let key = Arc::as_ptr(&object) as *const () as usize;
        self.named.push(recorder::Named {
            key,
            path: Arc::from(path),
            role,
            shape: Vec::new(),
            digest: 0,
            keep: object,
        });
        self
    }

    /// A closure run at the end of every step whose `(key, value)` pairs are recorded (the
    /// positions of a model's random streams).
    #[must_use]
    pub fn on_step_end(mut self, probe: impl FnMut() -> Vec<(String, Value)> + 'static) -> Self {
        self.probes.push(Box::new(probe));
        self
    }

    /// Starts recording on this thread.
    ///
    /// Fails when the file cannot be created, when a trace already records on this thread,
    /// or when [`CAPTURE_ENV`] holds an id that does not parse.
    pub fn start(self) -> Result<Trace, TraceError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let mut capture: BTreeSet<RecordId> = self.capture.into_iter().collect();
        if capture.is_empty() {
            if let Ok(v) = std::env::var(CAPTURE_ENV) {
                for part in v.split(',').filter(|p| !p.trim().is_empty()) {
                    let id = RecordId::parse(part).ok_or_else(|| TraceError::Invalid {
                        setting: CAPTURE_ENV,
                        message: format!("`{part}` is not a record id (STEP:INDEX, STEP:sK:INDEX or STEP:a:INDEX)"),
                    })?;
                    capture.insert(id);
                }
            }
        }
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |error| TraceError::Io { path, error }
        };
        let out = file::FileWriter::open(&self.path, self.append).map_err(io(&self.path))?;
        let capture_out = if capture.is_empty() {
            None
        } else {
            let p = self.capture_path.clone().unwrap_or_else(|| {
                let mut s = self.path.clone().into_os_string();
                s.push(".capture");
                PathBuf::from(s)
            });
            Some(file::FileWriter::open(&p, false).map_err(io(&p))?)
        };
        let mut header = Header::default();
        header.set("library", concat!("exactgrad ", env!("CARGO_PKG_VERSION")));
        header.set("format", format::FORMAT_VERSION.to_string());
        header.set("level", self.level.name());
        header.set("cpu", cpu_model());
        header.set("arch", std::env::consts::ARCH);
        header.set("os", std::env::consts::OS);
        for (k, v) in self.fields {
            header.set(&k, v);
        }
        let session = recorder::install(recorder::Start {
            level: self.level,
            out,
            capture_out,
            header,
            first_step: self.first_step,
            named: self.named,
            probes: self.probes,
            values_up_to: self.values_up_to,
            capture,
        })
        .map_err(|_| TraceError::AlreadyRecording)?;
        Ok(Trace {
            session,
            path: self.path,
            _thread: PhantomData,
        })
    }
}

/// The CPU's model name and family/model numbers (Linux), or the architecture.
fn cpu_model() -> String {
    let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
        return std::env::consts::ARCH.to_string();
    };
    let field = |key: &str| {
        info.lines()
            .find(|l| l.split(':').next().is_some_and(|k| k.trim() == key))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    };
    let name = field("model name")
        .or_else(|| field("CPU part").map(|p| format!("CPU part {p}")))
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    match (field("cpu family"), field("model")) {
        (Some(f), Some(m)) => format!("{name} (family {f}, model {m})"),
        _ => name,
    }
}

/// A trace recording on this thread (see the [module documentation](self)). Finish it
/// with [`Trace::finish`] to learn whether everything was written; dropping it finishes
/// it too, ignoring errors.
#[derive(Debug)]
pub struct Trace {
    session: u64,
    path: PathBuf,
    /// A trace belongs to the thread that started it.
    _thread: PhantomData<*const ()>,
}

impl Trace {
    /// The trace file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The step being recorded.
    pub fn step(&self) -> u64 {
        recorder::current_step().unwrap_or(0)
    }

    /// What was written so far.
    pub fn summary(&self) -> TraceSummary {
        recorder::summary(self.session).unwrap_or_default()
    }

    /// Stops recording: closes the open step (if it has records), flushes and syncs the
    /// file, and says what was written.
    ///
    /// Fails when a write failed at any point of the trace.
    pub fn finish(self) -> Result<TraceSummary, TraceError> {
        let path = self.path.clone();
        let r = recorder::uninstall(self.session);
        std::mem::forget(self);
        match r {
            Some(Ok(s)) => Ok(s),
            Some(Err(error)) => Err(TraceError::Io { path, error }),
            None => Ok(TraceSummary::default()),
        }
    }
}

impl Drop for Trace {
    fn drop(&mut self) {
        let _ = recorder::uninstall(self.session);
    }
}

/// Whether a trace records on this thread.
pub fn is_recording() -> bool {
    recorder::level().is_some()
}

/// The level of the trace recording on this thread, if one does.
pub fn recording_level() -> Option<TraceLevel> {
    recorder::level()
}

/// The step the trace on this thread is recording, if one records.
pub fn current_step() -> Option<u64> {
    recorder::current_step()
}

/// Ends the current step of the trace on this thread (nothing when none records). The
/// optimizers of exactgrad call it at the end of every `step`; a training loop with its
/// own update calls it once per step.
pub fn end_step() {
    recorder::end_step()
}

/// Sets the number of the next step of the trace on this thread (closing an open step
/// first); a restored training checkpoint sets the step it was taken at, so that a
/// resumed run's trace continues the numbers. Returns whether a trace records here.
pub fn set_step(step: u64) -> bool {
    recorder::set_step(step)
}

/// Suppresses records on this thread until the returned guard drops: the operations an
/// update is made of are recorded as one record of the update, not one each.
pub fn suppress() -> Suppress {
    recorder::suppress()
}

/// While the returned guard lives, records on this thread belong to module `path`.
pub fn module_scope(path: impl Into<Arc<str>>) -> ModuleScope {
    if !active() {
        return ModuleScope { on: false };
    }
    ModuleScope {
        on: recorder::push_module(path.into()),
    }
}

/// Ends a module's scope when dropped (see [`module_scope`]).
#[must_use = "the module scope ends when the guard drops"]
#[derive(Debug)]
pub struct ModuleScope {
    on: bool,
}

impl ModuleScope {
    /// A guard that ends no scope (for code that enters a scope only sometimes).
    pub fn none() -> Self {
        ModuleScope { on: false }
    }
}

impl Drop for ModuleScope {
    fn drop(&mut self) {
        if self.on {
            recorder::pop_module();
        }
    }
}

/// The path the trace on this thread knows a tensor (or a view of it) by: a parameter or
/// buffer given to [`TraceConfig::name_tensor`].
pub fn name_of<B: Backend>(t: &Tensor<B>) -> Option<Arc<str>> {
    if !active() {
        return None;
    }
    recorder::name_of(t)
}

/// The path the trace on this thread knows an object by (see
/// [`TraceConfig::name_object`]).
pub fn name_of_object(object: &Arc<dyn std::any::Any + Send + Sync>) -> Option<Arc<str>> {
    if !active() {
        return None;
    }
    recorder::name_of_key(Arc::as_ptr(object) as *const () as usize)
}

/// While the returned guard lives, records on this thread belong to shard `shard` of the
/// step (a data-parallel step computes each shard in its own section, so that the traces
/// of every world size merge into one sequence); afterwards they belong to the section
/// after the shards.
pub fn shard(shard: usize) -> ShardScope {
    let previous = if active() {
        recorder::enter_section(Section::Shard(shard as u32))
    } else {
        None
    };
    ShardScope { previous }
}

/// Ends a shard's section when dropped (see [`shard`]).
#[must_use = "the shard's section ends when the guard drops"]
#[derive(Debug)]
pub struct ShardScope {
    previous: Option<Section>,
}

impl Drop for ShardScope {
    fn drop(&mut self) {
        if let Some(p) = self.previous {
            recorder::leave_section(p);
        }
    }
}

/// A record that training code writes itself: an optimizer's update, a batch, a
/// reduction (see [`record`]). Inputs are digested when added (so add them before an
/// update in place); outputs when added, and tagged with the record, so that the records
/// that read them later name it.
pub struct RecordBuilder {
    pending: Option<recorder::Pending>,
}

impl std::fmt::Debug for RecordBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordBuilder")
            .field("recording", &self.pending.is_some())
            .finish()
    }
}

/// Starts a record of `kind` named `op` on the trace of this thread. When no trace
/// records (or its level leaves `kind` out), every method of the builder does nothing.
pub fn record(kind: Kind, op: &str) -> RecordBuilder {
    RecordBuilder {
        pending: if active() {
            recorder::begin(kind, op)
        } else {
            None
        },
    }
}

impl RecordBuilder {
    /// Whether the record will be written.
    pub fn is_recording(&self) -> bool {
        self.pending.is_some()
    }

    /// The module path of the record.
    pub fn module(mut self, path: &str) -> Self {
        if let Some(p) = &mut self.pending {
            p.record.module = Some(path.to_string());
        }
        self
    }

    /// An argument (structure).
    pub fn attr(mut self, key: &str, value: Value) -> Self {
        if let Some(p) = &mut self.pending {
            p.record.attrs.push((key.to_string(), value));
        }
        self
    }

    /// A state value (compared; shown when it differs).
    pub fn state(mut self, key: &str, value: Value) -> Self {
        if let Some(p) = &mut self.pending {
            p.record.state.push((key.to_string(), value));
        }
        self
    }

    /// A tensor the record reads, digested now.
    pub fn input<B: Backend>(&mut self, name: &str, t: &Tensor<B>) -> &mut Self {
        if let Some(p) = &mut self.pending {
            p.input(name, t);
        }
        self
    }

    /// A tensor the record writes, digested now and tagged with the record.
    pub fn output<B: Backend>(&mut self, name: &str, t: &Tensor<B>) -> &mut Self {
        if let Some(p) = &mut self.pending {
            p.output(name, t);
        }
        self
    }

    /// Integer data the record reads (`output = false`) or writes, of `shape`.
    pub fn ints(&mut self, name: &str, shape: &[usize], values: &[i64], output: bool) -> &mut Self {
        if let Some(p) = &mut self.pending {
            p.ints(name, shape, values, output);
        }
        self
    }

    /// Host values the record reads (`output = false`) or writes, of `shape` (a buffer of
    /// a data-parallel exchange).
    pub fn host(&mut self, name: &str, shape: &[usize], values: &[f32], output: bool) -> &mut Self {
        if let Some(p) = &mut self.pending {
            p.host(name, shape, values, output);
        }
        self
    }

    /// Writes the record; its id when a trace records.
    pub fn write(self) -> Option<RecordId> {
        self.pending.map(recorder::Pending::write)
    }
}
