//! The recorder: the state of the trace recording on this thread, and the hooks that the
//! engine, the operators and the training code call.
//!
//! Everything here is reached only after [`active`] (one relaxed atomic load) says that a
//! trace is recording somewhere in the process; the recorder itself is thread-local, so a
//! trace sees the operations of the thread that started it, in that thread's order.

use super::file::FileWriter;
use super::format::{
    Capture, Dtype, Header, Kind, ParamInfo, Record, RecordId, Section, StepEnd, TensorInfo, Value,
};
use super::{TraceLevel, TraceSummary};
use crate::tensor::Tensor;
use exactgrad_core::hash::mix64;
use exactgrad_core::{Backend, TraceHasher};
use std::any::Any;
use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// How many recorders are open in the process (on any thread).
static ACTIVE: AtomicUsize = AtomicUsize::new(0);
/// The source of session numbers: a tag of an earlier trace is never taken for one of
/// this trace.
static SESSIONS: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static RECORDER: RefCell<Option<Recorder>> = const { RefCell::new(None) };
}

/// Whether a trace is recording anywhere in the process: the one check the hot paths make
/// when no trace is on.
#[inline(always)]
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed) != 0
}

/// What a trace knows about a tensor's elements: their digest and the record that wrote
/// them, valid for one trace session and one version of the storage.
#[derive(Clone, Debug)]
pub(crate) struct Tag {
    session: u64,
    version: u64,
    pub(crate) digest: u64,
    pub(crate) from: Option<RecordId>,
}

/// A named tensor (a parameter or buffer) the trace was told about.
pub(crate) struct Named {
    pub(crate) key: usize,
    pub(crate) path: Arc<str>,
    pub(crate) role: &'static str,
    pub(crate) shape: Vec<usize>,
    pub(crate) digest: u64,
    /// Keeps the storage alive, so that its address names it for the trace's life.
    pub(crate) keep: Arc<dyn Any + Send + Sync>,
}

/// A closure run at every step's end that returns state to record (a model's random
/// streams).
pub(crate) type Probe = Box<dyn FnMut() -> Vec<(String, Value)>>;

/// The recording state of one thread.
pub(crate) struct Recorder {
    session: u64,
    level: TraceLevel,
    out: FileWriter,
    capture_out: Option<FileWriter>,
    header: Header,
    header_written: bool,
    step: u64,
    section: Section,
    counters: HashMap<Section, u32>,
    /// Records are not made while positive (inside a backward rule, an optimizer's
    /// update, the recorder itself).
    suppress: u32,
    modules: Vec<Arc<str>>,
    named: HashMap<usize, (Arc<str>, &'static str)>,
    _keep: Vec<Arc<dyn Any + Send + Sync>>,
    probes: Vec<Probe>,
    values_up_to: usize,
    capture: BTreeSet<RecordId>,
    captured: usize,
    step_records: u64,
    step_digest: u64,
    records: u64,
    steps: u64,
}

/// Runs `f` on this thread's recorder, if it records and is not suppressed.
#[inline]
pub(crate) fn with<R>(f: impl FnOnce(&mut Recorder) -> R) -> Option<R> {
    if !active() {
        return None;
    }
    RECORDER.with(|cell| {
        let mut guard = cell.try_borrow_mut().ok()?;
        let r = guard.as_mut()?;
        if r.suppress > 0 {
            return None;
        }
        Some(f(r))
    })
}

/// Runs `f` on this thread's recorder whether or not it is suppressed.
fn with_any<R>(f: impl FnOnce(&mut Recorder) -> R) -> Option<R> {
    if !active() {
        return None;
    }
    RECORDER.with(|cell| {
        let mut guard = cell.try_borrow_mut().ok()?;
        guard.as_mut().map(f)
    })
}

/// The settings a recorder starts from (made by [`super::TraceConfig::start`]).
pub(crate) struct Start {
    pub(crate) level: TraceLevel,
    pub(crate) out: FileWriter,
    pub(crate) capture_out: Option<FileWriter>,
    pub(crate) header: Header,
    pub(crate) first_step: u64,
    pub(crate) named: Vec<Named>,
    pub(crate) probes: Vec<Probe>,
    pub(crate) values_up_to: usize,
    pub(crate) capture: BTreeSet<RecordId>,
}

/// Installs a recorder on this thread; fails when one records here already.
pub(crate) fn install(start: Start) -> Result<u64, &'static str> {
    RECORDER.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_some() {
            return Err("a trace is already recording on this thread");
        }
        let session = SESSIONS.fetch_add(1, Ordering::Relaxed);
        let mut header = start.header;
        header.set("first_step", start.first_step.to_string());
        let mut named_map = HashMap::new();
        let mut keep = Vec::new();
        for n in start.named {
            header.params.push(ParamInfo {
                name: n.path.to_string(),
                role: n.role.to_string(),
                shape: n.shape,
                digest: n.digest,
            });
            named_map.insert(n.key, (n.path, n.role));
            keep.push(n.keep);
        }
        *slot = Some(Recorder {
            session,
            level: start.level,
            out: start.out,
            capture_out: start.capture_out,
            header,
            header_written: false,
            step: start.first_step,
            section: Section::Main,
            counters: HashMap::new(),
            suppress: 0,
            modules: Vec::new(),
            named: named_map,
            _keep: keep,
            probes: start.probes,
            values_up_to: start.values_up_to,
            capture: start.capture,
            captured: 0,
            step_records: 0,
            step_digest: 0,
            records: 0,
            steps: 0,
        });
        ACTIVE.fetch_add(1, Ordering::Relaxed);
        Ok(session)
    })
}

/// Removes this thread's recorder (session `session`), closing its open step (if it has
/// records) and flushing its files.
pub(crate) fn uninstall(session: u64) -> Option<std::io::Result<TraceSummary>> {
    let mut rec = RECORDER.with(|cell| {
        let mut slot = cell.try_borrow_mut().ok()?;
        if slot.as_ref().map(|r| r.session) != Some(session) {
            return None;
        }
        slot.take()
    })?;
    ACTIVE.fetch_sub(1, Ordering::Relaxed);
    rec.ensure_header();
    if rec.step_records > 0 {
        rec.close_step(false);
    }
    let result = rec.out.finish();
    let capture = rec.capture_out.as_mut().map(FileWriter::finish);
    let summary = TraceSummary {
        records: rec.records,
        steps: rec.steps,
        bytes: rec.out.bytes(),
        captured: rec.captured,
    };
    Some(result.and(capture.unwrap_or(Ok(()))).map(|()| summary))
}

/// The summary so far of this thread's recorder of session `session`.
pub(crate) fn summary(session: u64) -> Option<TraceSummary> {
    with_any(|r| {
        (r.session == session).then(|| TraceSummary {
            records: r.records,
            steps: r.steps,
            bytes: r.out.bytes(),
            captured: r.captured,
        })
    })
    .flatten()
}

/// The step the recorder on this thread is in.
pub(crate) fn current_step() -> Option<u64> {
    with_any(|r| r.step)
}

/// The digest of a tensor's elements in row-major order, by its backend's digest kernel
/// (where its storage lives, on its threads): of its storage's range when it is
/// contiguous, of a contiguous copy otherwise.
pub(crate) fn digest_of<B: Backend>(t: &Tensor<B>) -> u64 {
    // A released tensor has no elements to digest: a fixed marker stands for it.
    const RELEASED: u64 = 0x7265_6c65_6173_6564;
    let b = t.backend();
    let l = t.layout();
    if l.is_contiguous() {
        let Ok(data) = t.read() else { return RELEASED };
        let view = B::slice(data.as_ref(), l.offset..l.offset + l.numel());
        if let Ok(d) = b.digest(view) {
            return d;
        }
    } else if let Ok(c) = crate::ops::contiguous_storage(t) {
        if let Ok(d) = b.digest(B::view(&c)) {
            return d;
        }
    }
    match t.to_vec() {
        Ok(v) => TraceHasher::of(&v),
        Err(_) => RELEASED,
    }
}

/// The tag of `t` if it is valid for this session and storage version.
fn valid_tag<B: Backend>(session: u64, t: &Tensor<B>) -> Option<Tag> {
    let tag = t.inner.trace.lock().unwrap_or_else(|e| e.into_inner());
    let tag = tag.as_ref()?;
    (tag.session == session && tag.version == t.version()).then(|| tag.clone())
}

/// Sets the tag of `t`.
fn set_tag<B: Backend>(session: u64, t: &Tensor<B>, digest: u64, from: Option<RecordId>) {
    *t.inner.trace.lock().unwrap_or_else(|e| e.into_inner()) = Some(Tag {
        session,
        version: t.version(),
        digest,
        from,
    });
}

/// Gives `to` the valid tag of `from` (the same elements: a detached handle).
pub(crate) fn copy_tag<B: Backend>(from: &Tensor<B>, to: &Tensor<B>) {
    with_any(|r| {
        if let Some(tag) = valid_tag(r.session, from) {
            *to.inner.trace.lock().unwrap_or_else(|e| e.into_inner()) = Some(tag);
        }
    });
}

/// The ops whose output is a rearrangement of their single input's elements: their
/// digest is derived from the input's and their arguments, never read.
const REARRANGEMENTS: [&str; 4] = ["reshape", "permute", "slice", "expand"];

/// What a forward record left for the backward rule of its node.
#[derive(Clone, Debug)]
pub(crate) struct NodeTrace {
    pub(crate) forward: RecordId,
    pub(crate) module: Option<String>,
    pub(crate) inputs: Vec<TensorInfo>,
    pub(crate) output: TensorInfo,
}

/// The information a forward operator gives the trace besides its tensors: the names of
/// the inputs, its arguments (structure), state that decides its result, and integer
/// inputs (labels, indices) by role.
pub(crate) struct OpInfo<B: Backend> {
    pub(crate) names: Vec<&'static str>,
    pub(crate) attrs: Vec<(&'static str, Value)>,
    pub(crate) state: Vec<(&'static str, Value)>,
    pub(crate) ints: Vec<(&'static str, Vec<usize>, Vec<i64>)>,
    /// Tensors the operation reads that are not inputs of its backward graph (a mask, a
    /// condition, running statistics).
    pub(crate) tensors: Vec<(&'static str, Tensor<B>)>,
    /// Tensors the operation writes in place besides its output (running statistics).
    pub(crate) outputs: Vec<(&'static str, Tensor<B>)>,
}

impl<B: Backend> Default for OpInfo<B> {
    fn default() -> Self {
        Self {
            names: Vec::new(),
            attrs: Vec::new(),
            state: Vec::new(),
            ints: Vec::new(),
            tensors: Vec::new(),
            outputs: Vec::new(),
        }
    }
}

/// `make()` while a trace records (on any thread), else `None`: what an operator passes
/// to `record_with`, made only when it is needed.
#[inline]
pub(crate) fn info<B: Backend>(make: impl FnOnce() -> OpInfo<B>) -> Option<OpInfo<B>> {
    if active() {
        Some(make())
    } else {
        None
    }
}

impl<B: Backend> OpInfo<B> {
    /// No names, arguments or integer inputs.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// A tensor the operation reads besides its differentiable inputs.
    pub(crate) fn tensor(mut self, key: &'static str, t: &Tensor<B>) -> Self {
        self.tensors.push((key, t.clone()));
        self
    }

    /// A tensor the operation wrote in place besides its output.
    pub(crate) fn output(mut self, key: &'static str, t: &Tensor<B>) -> Self {
        self.outputs.push((key, t.clone()));
        self
    }

    /// The names of the tensor inputs, in order (default `input`, or `input.0`, …).
    pub(crate) fn names(mut self, names: &[&'static str]) -> Self {
        self.names = names.to_vec();
        self
    }

    /// An argument.
    pub(crate) fn attr(mut self, key: &'static str, value: Value) -> Self {
        self.attrs.push((key, value));
        self
    }

    /// A state value.
    pub(crate) fn state(mut self, key: &'static str, value: Value) -> Self {
        self.state.push((key, value));
        self
    }

    /// An integer input of `shape`.
    pub(crate) fn ints(mut self, key: &'static str, shape: Vec<usize>, values: Vec<i64>) -> Self {
        self.ints.push((key, shape, values));
        self
    }
}

/// Converts `usize` sizes to an attribute value.
pub(crate) fn ints_of(v: &[usize]) -> Value {
    Value::Ints(v.iter().map(|&d| d as i64).collect())
}

impl Recorder {
    fn ensure_header(&mut self) {
        if !self.header_written {
            self.out.header(&self.header);
            if let Some(c) = &mut self.capture_out {
                c.header(&self.header);
            }
            self.header_written = true;
        }
    }

    /// The backend's facts, learned from the first tensor the trace sees.
    fn learn_backend<B: Backend>(&mut self, b: &B) {
        if self.header_written || self.header.field("backend").is_some() {
            return;
        }
        let name = b.name();
        self.header.set("backend", name.clone());
        self.header.set(
            "mode",
            match b.mode() {
                exactgrad_core::ComputeMode::Exact => "exact",
                exactgrad_core::ComputeMode::Fast => "fast",
            },
        );
        // The CPU backends name themselves `MODE/ISA/Nt`.
        let parts: Vec<&str> = name.split('/').collect();
        if let [_, isa, threads] = parts.as_slice() {
            self.header.set("isa", *isa);
            if let Some(t) = threads.strip_suffix('t') {
                self.header.set("threads", t);
            }
        }
    }

    fn next_id(&mut self) -> RecordId {
        let c = self.counters.entry(self.section).or_insert(0);
        let id = RecordId {
            step: self.step,
            section: self.section,
            index: *c,
        };
        *c += 1;
        id
    }

    fn module(&self) -> Option<String> {
        self.modules.last().map(|m| m.to_string())
    }

    fn param_of<B: Backend>(&self, t: &Tensor<B>) -> Option<String> {
        let key = Arc::as_ptr(&t.inner.storage) as *const () as usize;
        self.named.get(&key).map(|(p, _)| p.to_string())
    }

    /// The info of an input: its tag's digest when valid, else its digest now (and it is
    /// tagged, so a second read does not digest it again).
    fn input_info<B: Backend>(&mut self, name: &str, t: &Tensor<B>) -> TensorInfo {
        let (digest, from) = match valid_tag(self.session, t) {
            Some(tag) => (tag.digest, tag.from),
            None => {
                let d = digest_of(t);
                set_tag(self.session, t, d, None);
                (d, None)
            }
        };
        TensorInfo {
            name: name.to_string(),
            param: self.param_of(t),
            from,
            dtype: Dtype::F32,
            shape: t.dims().to_vec(),
            digest: Some(digest),
            values: None,
        }
    }

    /// The info of an output written by record `id` (digested now, tagged with `id`).
    fn output_info<B: Backend>(
        &mut self,
        name: &str,
        t: &Tensor<B>,
        id: RecordId,
        digest: Option<u64>,
    ) -> TensorInfo {
        // A tensor the trace already knows unchanged (a gradient a rule passes through)
        // keeps its digest; anything else is digested now.
        let d = digest.unwrap_or_else(|| match valid_tag(self.session, t) {
            Some(tag) => tag.digest,
            None => digest_of(t),
        });
        set_tag(self.session, t, d, Some(id));
        let values = (t.numel() <= self.values_up_to)
            .then(|| t.to_vec().ok())
            .flatten();
        TensorInfo {
            name: name.to_string(),
            param: self.param_of(t),
            from: None,
            dtype: Dtype::F32,
            shape: t.dims().to_vec(),
            digest: Some(d),
            values,
        }
    }

    fn ints_info(name: &str, shape: &[usize], v: &[i64]) -> TensorInfo {
        TensorInfo {
            name: name.to_string(),
            param: None,
            from: None,
            dtype: Dtype::I64,
            shape: shape.to_vec(),
            digest: Some(TraceHasher::of_i64(v)),
            values: None,
        }
    }

    /// Writes a record (and its capture when it is one of the records to capture).
    fn write(&mut self, r: &Record) {
        self.ensure_header();
        self.out.record(r);
        self.records += 1;
        self.step_records += 1;
        self.step_digest = mix64(self.step_digest, r.result_digest());
    }

    /// Drops the values (kept for a capture) that the trace does not keep.
    fn strip_values(&self, r: &mut Record) {
        for t in r.inputs.iter_mut().chain(r.outputs.iter_mut()) {
            if t.values
                .as_ref()
                .is_some_and(|v| v.len() > self.values_up_to)
            {
                t.values = None;
            }
        }
    }

    fn wants_capture(&self, id: RecordId) -> bool {
        !self.capture.is_empty() && self.capture.contains(&id)
    }

    fn write_capture(&mut self, record: Record, ints: Vec<(String, Vec<i64>)>) {
        self.ensure_header();
        let c = Capture {
            record,
            ints,
            header: self.header.clone(),
        };
        match &mut self.capture_out {
            Some(w) => w.capture(&c),
            None => self.out.capture(&c),
        }
        self.captured += 1;
    }

    /// Closes the current step: the probes' state record (at every level), the step's
    /// end, a flush of the buffer.
    pub(crate) fn close_step(&mut self, probes: bool) {
        if probes && !self.probes.is_empty() {
            let mut state = Vec::new();
            for p in &mut self.probes {
                state.extend(p());
            }
            if !state.is_empty() {
                self.section = Section::After;
                let id = self.next_id();
                let r = Record {
                    id,
                    kind: Kind::State,
                    op: "streams".into(),
                    module: None,
                    forward: None,
                    attrs: Vec::new(),
                    state,
                    inputs: Vec::new(),
                    outputs: Vec::new(),
                };
                self.write(&r);
            }
        }
        self.ensure_header();
        self.out.step_end(&StepEnd {
            step: self.step,
            records: self.step_records,
            digest: self.step_digest,
        });
        self.out.flush();
        if let Some(c) = &mut self.capture_out {
            c.flush();
        }
        self.steps += 1;
        self.step += 1;
        self.section = Section::Main;
        self.counters.clear();
        self.step_records = 0;
        self.step_digest = 0;
    }
}

// ----- hooks of the engine and the operators ------------------------------------------

/// Records a forward operation `name` that read `inputs` and wrote `out`; returns what its
/// node keeps for the backward record, and the tag to give the final output tensor.
pub(crate) fn forward<B: Backend>(
    name: &'static str,
    out: &Tensor<B>,
    inputs: &[&Tensor<B>],
    info: OpInfo<B>,
) -> Option<(NodeTrace, u64)> {
    with(|r| {
        if r.level != TraceLevel::Ops {
            return None;
        }
        r.learn_backend(out.backend());
        let id = r.next_id();
        let capture = r.wants_capture(id);
        let mut tensors = Vec::with_capacity(inputs.len() + info.ints.len());
        for (i, t) in inputs.iter().enumerate() {
            let name = match info.names.get(i) {
                Some(n) => (*n).to_string(),
                None if inputs.len() == 1 => "input".to_string(),
                None => format!("input.{i}"),
            };
            let mut ti = r.input_info(&name, t);
            if capture {
                ti.values = t.to_vec().ok();
            }
            tensors.push(ti);
        }
        let n_graph = tensors.len();
        for (k, t) in &info.tensors {
            let mut ti = r.input_info(k, t);
            if capture {
                ti.values = t.to_vec().ok();
            }
            tensors.push(ti);
        }
        for (k, shape, v) in &info.ints {
            tensors.push(Recorder::ints_info(k, shape, v));
        }
        let attrs: Vec<(String, Value)> = info
            .attrs
            .iter()
            .map(|(k, v)| ((*k).to_string(), v.clone()))
            .collect();
        let derived = if REARRANGEMENTS.contains(&name) && tensors.len() == 1 {
            // The digest of a rearrangement follows from its input's and its arguments.
            let mut h = mix64(
                tensors[0].digest.unwrap_or(0),
                TraceHasher::of_i64(&[name.len() as i64]),
            );
            h = mix64(h, digest_str(name));
            for (k, v) in &attrs {
                h = mix64(h, digest_str(k));
                h = mix64(h, digest_str(&v.to_string()));
            }
            h = mix64(
                h,
                TraceHasher::of_i64(&out.dims().iter().map(|&d| d as i64).collect::<Vec<_>>()),
            );
            Some(h)
        } else {
            None
        };
        let mut output = r.output_info("output", out, id, derived);
        if capture {
            output.values = out.to_vec().ok();
        }
        let mut outputs = vec![output];
        for (k, t) in &info.outputs {
            let mut o = r.output_info(k, t, id, None);
            if capture {
                o.values = t.to_vec().ok();
            }
            outputs.push(o);
        }
        let record = Record {
            id,
            kind: Kind::Forward,
            op: name.to_string(),
            module: r.module(),
            forward: None,
            attrs,
            state: info
                .state
                .iter()
                .map(|(k, v)| ((*k).to_string(), v.clone()))
                .collect(),
            inputs: tensors,
            outputs,
        };
        if capture {
            let ints = info
                .ints
                .iter()
                .map(|(k, _, v)| ((*k).to_string(), v.clone()))
                .collect();
            r.write_capture(record.clone(), ints);
        }
        let mut plain = record;
        r.strip_values(&mut plain);
        r.write(&plain);
        let digest = plain.outputs[0].digest.unwrap_or(0);
        let Record {
            id,
            module,
            mut inputs,
            mut outputs,
            ..
        } = plain;
        // The node's inputs are the graph's (a backward rule emits one gradient each);
        // the other tensors it read are listed after them.
        let _ = n_graph;
        for t in inputs.iter_mut().chain(outputs.iter_mut()) {
            t.values = None;
        }
        // As an input of the backward rule, the output comes from this record.
        outputs[0].from = Some(id);
        Some((
            NodeTrace {
                forward: id,
                module,
                inputs,
                output: outputs.remove(0),
            },
            digest,
        ))
    })
    .flatten()
}

fn digest_str(s: &str) -> u64 {
    let bytes: Vec<i64> = s.bytes().map(i64::from).collect();
    TraceHasher::of_i64(&bytes)
}

/// Tags the final output of a forward record.
pub(crate) fn tag_output<B: Backend>(t: &Tensor<B>, node: &NodeTrace, digest: u64) {
    with_any(|r| set_tag(r.session, t, digest, Some(node.forward)));
}

/// A guard that suppresses records while it lives (backward rules, optimizer updates).
#[must_use = "records are suppressed until the guard drops"]
#[derive(Debug)]
pub struct Suppress {
    on: bool,
}

impl Drop for Suppress {
    fn drop(&mut self) {
        if self.on {
            with_any(|r| r.suppress -= 1);
        }
    }
}

/// Suppresses records on this thread until the guard drops.
pub(crate) fn suppress() -> Suppress {
    Suppress {
        on: with_any(|r| r.suppress += 1).is_some(),
    }
}

/// Records the start of a backward pass from `root` with seed `seed` (at both levels: the
/// loss of a step).
pub(crate) fn backward_start<B: Backend>(root: &Tensor<B>, seed: &Tensor<B>) {
    with(|r| {
        r.learn_backend(root.backend());
        let id = r.next_id();
        let input = r.input_info("output", root);
        let output = r.output_info("seed", seed, id, None);
        let mut state = Vec::new();
        if root.numel() == 1 {
            if let Ok(v) = root.item() {
                state.push(("loss".to_string(), Value::F32(v)));
            }
        }
        let record = Record {
            id,
            kind: Kind::Backward,
            op: "backward".into(),
            module: None,
            forward: None,
            attrs: Vec::new(),
            state,
            inputs: vec![input],
            outputs: vec![output],
        };
        if r.wants_capture(id) {
            r.write_capture(record.clone(), Vec::new());
        }
        r.write(&record);
    });
}

/// Records a backward rule of the node traced as `node` that ran on `grad` and emitted
/// `grads` (one per input, `None` where it emitted none). Tags the emitted gradients.
pub(crate) fn backward_rule<B: Backend>(
    name: &'static str,
    node: &NodeTrace,
    grad: &Tensor<B>,
    grads: &[Option<Tensor<B>>],
) {
    with(|r| {
        if r.level != TraceLevel::Ops {
            return;
        }
        let id = r.next_id();
        let capture = r.wants_capture(id);
        let mut g = r.input_info("grad", grad);
        if capture {
            g.values = grad.to_vec().ok();
        }
        let mut inputs = vec![g];
        for t in node.inputs.iter().chain(std::iter::once(&node.output)) {
            let mut t = t.clone();
            t.name = format!("forward.{}", t.name);
            t.values = None;
            inputs.push(t);
        }
        let outputs = node
            .inputs
            .iter()
            .zip(grads)
            .map(|(input, g)| match g {
                Some(g) => {
                    let mut o = r.output_info(&format!("grad.{}", input.name), g, id, None);
                    o.param = input.param.clone();
                    if capture {
                        o.values = g.to_vec().ok();
                    }
                    o
                }
                None => TensorInfo {
                    name: format!("grad.{}", input.name),
                    param: input.param.clone(),
                    from: None,
                    dtype: input.dtype,
                    shape: input.shape.clone(),
                    digest: None,
                    values: None,
                },
            })
            .collect();
        let record = Record {
            id,
            kind: Kind::Backward,
            op: name.to_string(),
            module: node.module.clone(),
            forward: Some(node.forward),
            attrs: Vec::new(),
            state: Vec::new(),
            inputs,
            outputs,
        };
        if capture {
            r.write_capture(record.clone(), Vec::new());
        }
        let mut plain = record;
        r.strip_values(&mut plain);
        r.write(&plain);
    });
}

/// Records a sum of gradients: `parts` added into `sum` (a record's pending gradient, op
/// `grad_sum`; a leaf's gradient, op `accumulate_grad`, naming the leaf).
pub(crate) fn grad_sum<B: Backend>(
    op: &'static str,
    leaf: Option<&Tensor<B>>,
    parts: &[(&str, &Tensor<B>)],
    sum: &Tensor<B>,
) {
    with(|r| {
        if r.level != TraceLevel::Ops {
            return;
        }
        let id = r.next_id();
        let inputs: Vec<TensorInfo> = parts.iter().map(|(n, t)| r.input_info(n, t)).collect();
        // A copy of one part has that part's digest (digests are of the elements).
        let known = (parts.len() == 1).then(|| inputs[0].digest).flatten();
        let mut out = r.output_info("sum", sum, id, known);
        let path = leaf.and_then(|l| r.param_of(l));
        out.param = path.clone();
        let record = Record {
            id,
            kind: Kind::Backward,
            op: op.to_string(),
            module: None,
            forward: None,
            attrs: Vec::new(),
            state: Vec::new(),
            inputs,
            outputs: vec![out],
        };
        if r.wants_capture(id) {
            r.write_capture(record.clone(), Vec::new());
        }
        r.write(&record);
    });
}

// ----- the public hooks for training code -----------------------------------------------

/// Closes the current step on this thread's recorder (see [`super::end_step`]).
pub(crate) fn end_step() {
    with(|r| r.close_step(true));
}

/// Sets the number of the next step (see [`super::set_step`]).
pub(crate) fn set_step(step: u64) -> bool {
    with_any(|r| {
        if r.step_records > 0 {
            r.close_step(false);
        }
        if r.step != step {
            let was = r.step;
            r.step = step;
            if !r.header_written {
                // Nothing written yet: the segment starts at this step.
                r.header.set("first_step", step.to_string());
            }
            r.ensure_header();
            r.out
                .note(&format!("resumed: the next step is {step} (was {was})"));
        }
    })
    .is_some()
}

/// Pushes a module path; the guard pops it.
pub(crate) fn push_module(path: Arc<str>) -> bool {
    with_any(|r| r.modules.push(path)).is_some()
}

pub(crate) fn pop_module() {
    with_any(|r| {
        r.modules.pop();
    });
}

/// The path of a named tensor (a parameter or buffer the trace was told about).
pub(crate) fn name_of<B: Backend>(t: &Tensor<B>) -> Option<Arc<str>> {
    with_any(|r| {
        let key = Arc::as_ptr(&t.inner.storage) as *const () as usize;
        r.named.get(&key).map(|(p, _)| Arc::clone(p))
    })
    .flatten()
}

/// The path named by the address `key`.
pub(crate) fn name_of_key(key: usize) -> Option<Arc<str>> {
    with_any(|r| r.named.get(&key).map(|(p, _)| Arc::clone(p))).flatten()
}

/// Enters the section of shard `k`; returns the section to go back to.
pub(crate) fn enter_section(section: Section) -> Option<Section> {
    with_any(|r| std::mem::replace(&mut r.section, section))
}

pub(crate) fn leave_section(_previous: Section) {
    with_any(|r| r.section = Section::After);
}

/// A record in the making for training code (optimizer, loader, reduction).
pub(crate) struct Pending {
    pub(crate) record: Record,
    pub(crate) capture: bool,
    pub(crate) ints: Vec<(String, Vec<i64>)>,
}

/// Starts a record of `kind` (written at both levels for every kind but forward and
/// backward, which only [`TraceLevel::Ops`] writes).
pub(crate) fn begin(kind: Kind, op: &str) -> Option<Pending> {
    with(|r| {
        if r.level != TraceLevel::Ops && matches!(kind, Kind::Forward | Kind::Backward) {
            return None;
        }
        let id = r.next_id();
        Some(Pending {
            capture: r.wants_capture(id),
            record: Record {
                id,
                kind,
                op: op.to_string(),
                module: r.module(),
                forward: None,
                attrs: Vec::new(),
                state: Vec::new(),
                inputs: Vec::new(),
                outputs: Vec::new(),
            },
            ints: Vec::new(),
        })
    })
    .flatten()
}

impl Pending {
    pub(crate) fn input<B: Backend>(&mut self, name: &str, t: &Tensor<B>) {
        let capture = self.capture;
        if let Some(mut info) = with_any(|r| {
            r.learn_backend(t.backend());
            r.input_info(name, t)
        }) {
            if capture {
                info.values = t.to_vec().ok();
            }
            self.record.inputs.push(info);
        }
    }

    pub(crate) fn output<B: Backend>(&mut self, name: &str, t: &Tensor<B>) {
        let id = self.record.id;
        let capture = self.capture;
        if let Some(mut info) = with_any(|r| {
            r.learn_backend(t.backend());
            r.output_info(name, t, id, None)
        }) {
            if capture {
                info.values = t.to_vec().ok();
            }
            self.record.outputs.push(info);
        }
    }

    pub(crate) fn ints(&mut self, name: &str, shape: &[usize], v: &[i64], output: bool) {
        let info = Recorder::ints_info(name, shape, v);
        if self.capture {
            self.ints.push((name.to_string(), v.to_vec()));
        }
        if output {
            self.record.outputs.push(info);
        } else {
            self.record.inputs.push(info);
        }
    }

    pub(crate) fn host(&mut self, name: &str, shape: &[usize], v: &[f32], output: bool) {
        let keep = with_any(|r| v.len() <= r.values_up_to).unwrap_or(false);
        let info = TensorInfo {
            name: name.to_string(),
            param: None,
            from: None,
            dtype: Dtype::F32,
            shape: shape.to_vec(),
            digest: Some(TraceHasher::of(v)),
            values: (keep || self.capture).then(|| v.to_vec()),
        };
        if output {
            self.record.outputs.push(info);
        } else {
            self.record.inputs.push(info);
        }
    }

    pub(crate) fn write(self) -> RecordId {
        let Pending {
            record,
            capture,
            ints,
        } = self;
        let id = record.id;
        with_any(|r| {
            if capture {
                r.write_capture(record.clone(), ints);
            }
            let mut plain = record;
            r.strip_values(&mut plain);
            r.write(&plain);
        });
        id
    }
}

/// The recorder's level on this thread, if one records.
pub(crate) fn level() -> Option<TraceLevel> {
    with_any(|r| r.level)
}
