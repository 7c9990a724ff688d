//! The records of a trace and their encoding in a trace file (`docs/debugging.md`, "The
//! file format").
//!
//! A trace file is the magic `EXGTRACE`, a little-endian `u32` format version, then
//! frames: a type byte, the payload's length as a little-endian `u32`, the payload, and a
//! little-endian `u32` check of the payload ([`frame_check`]). Integers in payloads are
//! LEB128 varints (signed ones zigzag-encoded), strings are varint indices into the
//! segment's string table (a [`FrameType::Str`] frame adds the next entry), floats are
//! their bit patterns. A [`FrameType::Header`] frame starts a segment (a file that a
//! resumed run appends to holds several); [`FrameType::Record`] frames hold the records
//! of [`Record`], [`FrameType::StepEnd`] closes a step, [`FrameType::Note`] carries a
//! line of text, [`FrameType::Capture`] the values of a captured record.

use std::collections::HashMap;
use std::fmt;

/// The first eight bytes of a trace file.
pub const MAGIC: &[u8; 8] = b"EXGTRACE";
/// The version of the format this crate writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// The part of a step a record belongs to. A data-parallel step computes its shards in
/// sections of their own, so that the traces of every rank merge into one sequence that
/// does not depend on the number of processes: the records before the first shard
/// ([`Section::Main`]), each shard's in shard order, then the records after them
/// ([`Section::After`]). A run without shards has only `Main`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Section {
    /// The records of a step outside shards, before the first shard.
    Main,
    /// The records of one shard of a data-parallel step.
    Shard(u32),
    /// The records of a step outside shards, after a shard.
    After,
}

impl Section {
    fn code(self) -> u64 {
        match self {
            Section::Main => 0,
            Section::Shard(s) => 2 + u64::from(s),
            Section::After => 1,
        }
    }

    fn from_code(c: u64) -> Option<Self> {
        Some(match c {
            0 => Section::Main,
            1 => Section::After,
            s => Section::Shard(u32::try_from(s - 2).ok()?),
        })
    }
}

/// Where a record is: its step, section and position in the section (from 0). Written
/// `STEP:INDEX` for the main section, `STEP:sK:INDEX` for shard `K` and `STEP:a:INDEX`
/// after the shards (`5:127`, `3:s2:40`), which [`RecordId::parse`] reads back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecordId {
    /// The step (the first is the trace's first step, 1 unless a resumed run continues).
    pub step: u64,
    /// The section of the step.
    pub section: Section,
    /// The position in the section.
    pub index: u32,
}

impl fmt::Display for RecordId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.section {
            Section::Main => write!(f, "{}:{}", self.step, self.index),
            Section::Shard(s) => write!(f, "{}:s{}:{}", self.step, s, self.index),
            Section::After => write!(f, "{}:a:{}", self.step, self.index),
        }
    }
}

impl RecordId {
    /// Reads `STEP:INDEX`, `STEP:sK:INDEX` or `STEP:a:INDEX` (see [`RecordId`]).
    pub fn parse(s: &str) -> Option<Self> {
        let parts: Vec<&str> = s.trim().split(':').collect();
        let (step, section, index) = match parts.as_slice() {
            [step, index] => (step, Section::Main, index),
            [step, "a", index] => (step, Section::After, index),
            [step, shard, index] => (
                step,
                Section::Shard(shard.strip_prefix('s')?.parse().ok()?),
                index,
            ),
            _ => return None,
        };
        Some(Self {
            step: step.parse().ok()?,
            section,
            index: index.parse().ok()?,
        })
    }
}

/// What a record stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A mini-batch taken from a data loader (its tensors and labels, its position).
    Data,
    /// A forward operation.
    Forward,
    /// A backward rule (the gradient it emits per input), the start of a backward pass,
    /// or a gradient summed into a record's pending gradient or a leaf's gradient.
    Backward,
    /// An optimizer's update of one parameter (and its state).
    Optimizer,
    /// A data-parallel combination of the shards' gradients.
    Reduction,
    /// State at the end of a step (the random streams' positions).
    State,
}

impl Kind {
    /// Every kind, in the order of their codes.
    pub const ALL: [Kind; 6] = [
        Kind::Data,
        Kind::Forward,
        Kind::Backward,
        Kind::Optimizer,
        Kind::Reduction,
        Kind::State,
    ];

    /// The kind's name as printed (`forward`, `optimizer`, …).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Data => "data",
            Kind::Forward => "forward",
            Kind::Backward => "backward",
            Kind::Optimizer => "optimizer",
            Kind::Reduction => "reduction",
            Kind::State => "state",
        }
    }

    fn code(self) -> u64 {
        Self::ALL.iter().position(|&k| k == self).unwrap_or(0) as u64
    }
}

/// The element type of a recorded tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// 32-bit floats (every tensor of exactgrad).
    F32,
    /// 64-bit integers (class labels, indices passed to an operator).
    I64,
}

impl Dtype {
    /// The name as printed (`f32`, `i64`).
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::I64 => "i64",
        }
    }
}

/// An attribute or state value of a record. Floats compare by their bits.
#[derive(Clone, Debug)]
pub enum Value {
    /// A flag.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A list of integers (sizes, dimensions).
    Ints(Vec<i64>),
    /// An f32 (compared by its bits).
    F32(f32),
    /// A list of f32s (compared by their bits).
    F32s(Vec<f32>),
    /// An f64 (compared by its bits).
    F64(f64),
    /// A 64-bit word (keys, digests, positions).
    U64(u64),
    /// Text.
    Str(String),
}

impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        use Value::*;
        match (self, other) {
            (Bool(a), Bool(b)) => a == b,
            (Int(a), Int(b)) => a == b,
            (Ints(a), Ints(b)) => a == b,
            (F32(a), F32(b)) => a.to_bits() == b.to_bits(),
            (F32s(a), F32s(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
            }
            (F64(a), F64(b)) => a.to_bits() == b.to_bits(),
            (U64(a), U64(b)) => a == b,
            (Str(a), Str(b)) => a == b,
            _ => false,
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Ints(v) => write!(f, "{v:?}"),
            Value::F32(x) => write!(f, "{x:e} ({:#010x})", x.to_bits()),
            Value::F32s(v) => write!(f, "{v:?}"),
            Value::F64(x) => write!(f, "{x:e} ({:#018x})", x.to_bits()),
            Value::U64(u) => write!(f, "{u:#018x}"),
            Value::Str(s) => write!(f, "{s}"),
        }
    }
}

impl Value {
    /// The value as an integer, if it is one.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The value as a list of integers, if it is one.
    pub fn as_ints(&self) -> Option<&[i64]> {
        match self {
            Value::Ints(v) => Some(v),
            _ => None,
        }
    }

    /// The value as an f32, if it is one.
    pub fn as_f32(&self) -> Option<f32> {
        match self {
            Value::F32(x) => Some(*x),
            _ => None,
        }
    }

    /// The value as a list of f32s, if it is one.
    pub fn as_f32s(&self) -> Option<&[f32]> {
        match self {
            Value::F32s(v) => Some(v),
            _ => None,
        }
    }

    /// The value as an f64, if it is one.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::F64(x) => Some(*x),
            _ => None,
        }
    }

    /// The value as a 64-bit word, if it is one.
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Value::U64(u) => Some(*u),
            _ => None,
        }
    }

    /// The value as a flag, if it is one.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The value as text, if it is text.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// A tensor (or integer data) that a record read or wrote: its role, where it came from,
/// its element type and shape, and the digest of its elements
/// ([`exactgrad_core::TraceHasher`]).
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    /// The role in the record (`input`, `weight`, `grad`, `exp_avg`, `targets`, …).
    pub name: String,
    /// The parameter or buffer path when the tensor is (a view of) one the trace was told
    /// about (`layer1.0.conv1.weight`).
    pub param: Option<String>,
    /// The record that produced it, when a traced record did. For information only: a
    /// resumed run's first step reads parameters that no record of its trace produced.
    pub from: Option<RecordId>,
    /// The element type.
    pub dtype: Dtype,
    /// The shape.
    pub shape: Vec<usize>,
    /// The digest; `None` for a gradient that a backward rule did not emit.
    pub digest: Option<u64>,
    /// The elements, when the trace keeps them (small outputs, captured records).
    pub values: Option<Vec<f32>>,
}

impl TensorInfo {
    /// Whether two infos describe the same kind of tensor in the same place (role, path,
    /// type, shape, presence): what alignment compares, not the digests.
    pub fn same_structure(&self, other: &Self) -> bool {
        self.name == other.name
            && self.param == other.param
            && self.dtype == other.dtype
            && self.shape == other.shape
            && self.digest.is_some() == other.digest.is_some()
    }
}

/// One record of a trace: an operation, a backward rule, an optimizer update, a batch, a
/// reduction or step state, with the digests of what it read and wrote.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// Where it is.
    pub id: RecordId,
    /// What it stands for.
    pub kind: Kind,
    /// The operation (`conv2d`, `matmul`, `adam`, `batch`, …).
    pub op: String,
    /// The module path (`layer1.0.conv1`), where the module tree supplies one.
    pub module: Option<String>,
    /// For a backward rule, the forward record it belongs to (for information).
    pub forward: Option<RecordId>,
    /// The arguments that fix what the operation computes (padding, dimensions, …): part
    /// of the structure that alignment compares.
    pub attrs: Vec<(String, Value)>,
    /// State that is not structure but decides the result (a learning rate, a random
    /// stream's key and position, a loader's position): compared, and shown when it
    /// differs.
    pub state: Vec<(String, Value)>,
    /// What the record read.
    pub inputs: Vec<TensorInfo>,
    /// What the record wrote.
    pub outputs: Vec<TensorInfo>,
}

impl Record {
    /// An attribute's value.
    pub fn attr(&self, key: &str) -> Option<&Value> {
        self.attrs.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// A state value.
    pub fn state_value(&self, key: &str) -> Option<&Value> {
        self.state.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Whether two records have the same structure: kind, operation, module, attributes,
    /// state keys and the structure of every input and output (not their digests, not
    /// where inputs came from).
    pub fn same_structure(&self, other: &Self) -> bool {
        self.kind == other.kind
            && self.op == other.op
            && self.module == other.module
            && self.attrs == other.attrs
            && self.state.len() == other.state.len()
            && self.state.iter().zip(&other.state).all(|(a, b)| a.0 == b.0)
            && self.inputs.len() == other.inputs.len()
            && self.outputs.len() == other.outputs.len()
            && self
                .inputs
                .iter()
                .zip(&other.inputs)
                .all(|(a, b)| a.same_structure(b))
            && self
                .outputs
                .iter()
                .zip(&other.outputs)
                .all(|(a, b)| a.same_structure(b))
    }

    /// The parameter paths among the inputs and outputs, in order, without repeats.
    pub fn params(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for t in self.inputs.iter().chain(&self.outputs) {
            if let Some(p) = &t.param {
                if !out.contains(&p.as_str()) {
                    out.push(p);
                }
            }
        }
        out
    }

    /// A digest of the record's outputs and state (what the step summary combines).
    pub fn result_digest(&self) -> u64 {
        let mut h = 0x5eed_u64;
        for t in &self.outputs {
            h = exactgrad_core::hash::mix64(h, t.digest.unwrap_or(0x6e6f_6e65));
        }
        h
    }
}

/// A parameter or buffer the trace was told about, as listed in the header.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamInfo {
    /// The path (`layer1.0.conv1.weight`).
    pub name: String,
    /// `parameter` or `buffer`.
    pub role: String,
    /// The shape.
    pub shape: Vec<usize>,
    /// The digest of the values when the trace started.
    pub digest: u64,
}

/// The header of a trace segment: where and how the run was made.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Header {
    /// Named facts: `library`, `backend`, `mode`, `threads`, `cpu`, `level`, `seed`,
    /// `rank`, `world_size`, `first_step`, … (see `docs/debugging.md`).
    pub fields: Vec<(String, String)>,
    /// The parameters and buffers the trace was told about, in the model's order.
    pub params: Vec<ParamInfo>,
}

impl Header {
    /// A field's value.
    pub fn field(&self, key: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Sets a field (replacing an earlier value).
    pub fn set(&mut self, key: &str, value: impl Into<String>) {
        let value = value.into();
        match self.fields.iter_mut().find(|(k, _)| k == key) {
            Some(f) => f.1 = value,
            None => self.fields.push((key.to_string(), value)),
        }
    }
}

/// The end of a step: how many records it had and a digest of their results.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepEnd {
    /// The step.
    pub step: u64,
    /// Its records (all sections).
    pub records: u64,
    /// A digest of every record's outputs, in order.
    pub digest: u64,
}

/// The values of a captured record: every input and output in full, so that the
/// operation can be run again elsewhere (`exactgrad trace replay`).
#[derive(Clone, Debug, PartialEq)]
pub struct Capture {
    /// The record, its inputs' and outputs' `values` filled in (integer data as f32
    /// values of the integers, which are exact below 2^24; larger ones are kept in
    /// `ints`).
    pub record: Record,
    /// The integer inputs by role, in full.
    pub ints: Vec<(String, Vec<i64>)>,
    /// The header of the run that captured it (backend, mode, …).
    pub header: Header,
}

/// The frame types of a trace file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameType {
    /// A segment's header.
    Header = 1,
    /// A string table entry.
    Str = 2,
    /// A record.
    Record = 3,
    /// The end of a step.
    StepEnd = 4,
    /// A line of text (a resume, a warning).
    Note = 5,
    /// A captured record.
    Capture = 6,
}

impl FrameType {
    /// The frame type of a type byte.
    pub fn from_byte(b: u8) -> Option<Self> {
        Some(match b {
            1 => FrameType::Header,
            2 => FrameType::Str,
            3 => FrameType::Record,
            4 => FrameType::StepEnd,
            5 => FrameType::Note,
            6 => FrameType::Capture,
            _ => return None,
        })
    }
}

/// The check of a frame's payload: the low 32 bits of `mix64(d, len)`, where `d` is the
/// [`TraceHasher`] digest of the payload's bytes in groups of four (little-endian, the
/// last group completed with zeros) fed as integers, and `len` the byte count.
///
/// [`TraceHasher`]: exactgrad_core::TraceHasher
pub fn frame_check(payload: &[u8]) -> u32 {
    let mut h = exactgrad_core::TraceHasher::new();
    // Raw words as integers (no NaN canonicalisation), 64 at a time.
    let mut words = [0i64; 64];
    for chunk in payload.chunks(256) {
        let n = chunk.len().div_ceil(4);
        for (i, w) in words[..n].iter_mut().enumerate() {
            let mut b = [0u8; 4];
            let part = &chunk[4 * i..(4 * i + 4).min(chunk.len())];
            b[..part.len()].copy_from_slice(part);
            *w = i64::from(u32::from_le_bytes(b));
        }
        h.update_i64(&words[..n]);
    }
    exactgrad_core::hash::mix64(h.finish(), payload.len() as u64) as u32
}

// ----- encoding ------------------------------------------------------------------------

/// Writes payloads, interning strings: a new string is announced in a [`FrameType::Str`]
/// frame before the payload that uses it (the caller writes `pending` first).
#[derive(Debug, Default)]
pub(crate) struct Encoder {
    strings: HashMap<String, u64>,
    /// Strings added by the payloads encoded since the last [`Encoder::take_new`].
    new: Vec<String>,
}

impl Encoder {
    /// Forgets the string table (a new segment starts).
    pub(crate) fn reset(&mut self) {
        self.strings.clear();
        self.new.clear();
    }

    /// The strings added since the last call, in order.
    pub(crate) fn take_new(&mut self) -> Vec<String> {
        std::mem::take(&mut self.new)
    }

    fn string(&mut self, out: &mut Vec<u8>, s: &str) {
        let id = match self.strings.get(s) {
            Some(&id) => id,
            None => {
                let id = self.strings.len() as u64;
                self.strings.insert(s.to_string(), id);
                self.new.push(s.to_string());
                id
            }
        };
        put_u(out, id);
    }

    fn opt_string(&mut self, out: &mut Vec<u8>, s: Option<&str>) {
        match s {
            None => put_u(out, 0),
            Some(s) => {
                put_u(out, 1);
                self.string(out, s);
            }
        }
    }

    fn value(&mut self, out: &mut Vec<u8>, v: &Value) {
        match v {
            Value::Bool(b) => {
                out.push(0);
                out.push(u8::from(*b));
            }
            Value::Int(i) => {
                out.push(1);
                put_i(out, *i);
            }
            Value::Ints(v) => {
                out.push(2);
                put_u(out, v.len() as u64);
                v.iter().for_each(|&i| put_i(out, i));
            }
            Value::F32(x) => {
                out.push(3);
                out.extend_from_slice(&x.to_bits().to_le_bytes());
            }
            Value::F32s(v) => {
                out.push(4);
                put_u(out, v.len() as u64);
                v.iter()
                    .for_each(|x| out.extend_from_slice(&x.to_bits().to_le_bytes()));
            }
            Value::F64(x) => {
                out.push(5);
                out.extend_from_slice(&x.to_bits().to_le_bytes());
            }
            Value::U64(u) => {
                out.push(6);
                out.extend_from_slice(&u.to_le_bytes());
            }
            Value::Str(s) => {
                out.push(7);
                self.string(out, s);
            }
        }
    }

    fn pairs(&mut self, out: &mut Vec<u8>, pairs: &[(String, Value)]) {
        put_u(out, pairs.len() as u64);
        for (k, v) in pairs {
            self.string(out, k);
            self.value(out, v);
        }
    }

    fn tensor(&mut self, out: &mut Vec<u8>, t: &TensorInfo) {
        self.string(out, &t.name);
        self.opt_string(out, t.param.as_deref());
        put_opt_id(out, t.from);
        out.push(match t.dtype {
            Dtype::F32 => 0,
            Dtype::I64 => 1,
        });
        put_u(out, t.shape.len() as u64);
        t.shape.iter().for_each(|&d| put_u(out, d as u64));
        match t.digest {
            None => out.push(0),
            Some(d) => {
                out.push(1);
                out.extend_from_slice(&d.to_le_bytes());
            }
        }
        match &t.values {
            None => out.push(0),
            Some(v) => {
                out.push(1);
                put_u(out, v.len() as u64);
                v.iter()
                    .for_each(|x| out.extend_from_slice(&x.to_bits().to_le_bytes()));
            }
        }
    }

    /// The payload of a record frame.
    pub(crate) fn record(&mut self, out: &mut Vec<u8>, r: &Record) {
        put_id(out, r.id);
        put_u(out, r.kind.code());
        self.string(out, &r.op);
        self.opt_string(out, r.module.as_deref());
        put_opt_id(out, r.forward);
        self.pairs(out, &r.attrs);
        self.pairs(out, &r.state);
        put_u(out, r.inputs.len() as u64);
        for t in &r.inputs {
            self.tensor(out, t);
        }
        put_u(out, r.outputs.len() as u64);
        for t in &r.outputs {
            self.tensor(out, t);
        }
    }

    /// The payload of a header frame (strings inline: the table starts after it).
    pub(crate) fn header(out: &mut Vec<u8>, h: &Header) {
        put_u(out, h.fields.len() as u64);
        for (k, v) in &h.fields {
            put_str(out, k);
            put_str(out, v);
        }
        put_u(out, h.params.len() as u64);
        for p in &h.params {
            put_str(out, &p.name);
            put_str(out, &p.role);
            put_u(out, p.shape.len() as u64);
            p.shape.iter().for_each(|&d| put_u(out, d as u64));
            out.extend_from_slice(&p.digest.to_le_bytes());
        }
    }

    /// The payload of a capture frame (self-contained: strings inline).
    pub(crate) fn capture(out: &mut Vec<u8>, c: &Capture) {
        Self::header(out, &c.header);
        put_u(out, c.ints.len() as u64);
        for (k, v) in &c.ints {
            put_str(out, k);
            put_u(out, v.len() as u64);
            v.iter().for_each(|&i| put_i(out, i));
        }
        let mut e = Encoder::default();
        let mut body = Vec::new();
        e.record(&mut body, &c.record);
        let table = e.take_new();
        put_u(out, table.len() as u64);
        for s in &table {
            put_str(out, s);
        }
        out.extend_from_slice(&body);
    }
}

/// A step-end payload.
pub(crate) fn step_end_payload(out: &mut Vec<u8>, s: &StepEnd) {
    put_u(out, s.step);
    put_u(out, s.records);
    out.extend_from_slice(&s.digest.to_le_bytes());
}

pub(crate) fn put_u(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn put_i(out: &mut Vec<u8>, v: i64) {
    put_u(out, ((v << 1) ^ (v >> 63)) as u64);
}

pub(crate) fn put_str(out: &mut Vec<u8>, s: &str) {
    put_u(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

fn put_id(out: &mut Vec<u8>, id: RecordId) {
    put_u(out, id.step);
    put_u(out, id.section.code());
    put_u(out, u64::from(id.index));
}

fn put_opt_id(out: &mut Vec<u8>, id: Option<RecordId>) {
    match id {
        None => out.push(0),
        Some(id) => {
            out.push(1);
            put_id(out, id);
        }
    }
}

// ----- decoding ------------------------------------------------------------------------

/// Why a payload could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError(pub String);

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

type Dec<T> = Result<T, DecodeError>;

fn bad<T>(what: &str) -> Dec<T> {
    Err(DecodeError(format!("malformed payload: {what}")))
}

/// Reads payloads, with the string table of the current segment.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    pub(crate) strings: Vec<String>,
}

/// A cursor over a payload.
pub(crate) struct Cursor<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Self { data, at: 0 }
    }

    pub(crate) fn is_done(&self) -> bool {
        self.at == self.data.len()
    }

    fn byte(&mut self) -> Dec<u8> {
        let b = *self
            .data
            .get(self.at)
            .ok_or(DecodeError("malformed payload: it ends early".to_string()))?;
        self.at += 1;
        Ok(b)
    }

    fn bytes(&mut self, n: usize) -> Dec<&'a [u8]> {
        if self.data.len() - self.at < n {
            return bad("it ends early");
        }
        let s = &self.data[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    pub(crate) fn u(&mut self) -> Dec<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        bad("a varint longer than 64 bits")
    }

    fn i(&mut self) -> Dec<i64> {
        let u = self.u()?;
        Ok(((u >> 1) as i64) ^ -((u & 1) as i64))
    }

    fn len(&mut self) -> Dec<usize> {
        let n = self.u()?;
        // Every element takes at least one byte: a count beyond what is left is corrupt
        // (and would otherwise allocate without bound).
        if n > (self.data.len() - self.at) as u64 {
            return bad("a count larger than the payload");
        }
        Ok(n as usize)
    }

    fn u32le(&mut self) -> Dec<u32> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64le(&mut self) -> Dec<u64> {
        let b = self.bytes(8)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    pub(crate) fn str_inline(&mut self) -> Dec<String> {
        let n = self.len()?;
        let b = self.bytes(n)?;
        String::from_utf8(b.to_vec()).or_else(|_| bad("a string that is not UTF-8"))
    }

    fn f32s(&mut self) -> Dec<Vec<f32>> {
        let n = self.len()?;
        (0..n).map(|_| self.u32le().map(f32::from_bits)).collect()
    }

    fn id(&mut self) -> Dec<RecordId> {
        let step = self.u()?;
        let section = Section::from_code(self.u()?)
            .ok_or_else(|| DecodeError("malformed payload: a section".into()))?;
        let index = u32::try_from(self.u()?).or_else(|_| bad("a record index"))?;
        Ok(RecordId {
            step,
            section,
            index,
        })
    }

    fn opt_id(&mut self) -> Dec<Option<RecordId>> {
        Ok(match self.byte()? {
            0 => None,
            1 => Some(self.id()?),
            _ => return bad("an optional record id"),
        })
    }
}

impl Decoder {
    fn string(&self, c: &mut Cursor<'_>) -> Dec<String> {
        let id = c.u()?;
        self.strings
            .get(id as usize)
            .cloned()
            .ok_or_else(|| DecodeError(format!("malformed payload: string {id} is not defined")))
    }

    fn opt_string(&self, c: &mut Cursor<'_>) -> Dec<Option<String>> {
        Ok(match c.u()? {
            0 => None,
            1 => Some(self.string(c)?),
            _ => return bad("an optional string"),
        })
    }

    fn value(&self, c: &mut Cursor<'_>) -> Dec<Value> {
        Ok(match c.byte()? {
            0 => Value::Bool(c.byte()? != 0),
            1 => Value::Int(c.i()?),
            2 => {
                let n = c.len()?;
                Value::Ints((0..n).map(|_| c.i()).collect::<Dec<_>>()?)
            }
            3 => Value::F32(f32::from_bits(c.u32le()?)),
            4 => Value::F32s(c.f32s()?),
            5 => Value::F64(f64::from_bits(c.u64le()?)),
            6 => Value::U64(c.u64le()?),
            7 => Value::Str(self.string(c)?),
            _ => return bad("a value type"),
        })
    }

    fn pairs(&self, c: &mut Cursor<'_>) -> Dec<Vec<(String, Value)>> {
        let n = c.len()?;
        (0..n)
            .map(|_| Ok((self.string(c)?, self.value(c)?)))
            .collect()
    }

    fn tensor(&self, c: &mut Cursor<'_>) -> Dec<TensorInfo> {
        let name = self.string(c)?;
        let param = self.opt_string(c)?;
        let from = c.opt_id()?;
        let dtype = match c.byte()? {
            0 => Dtype::F32,
            1 => Dtype::I64,
            _ => return bad("an element type"),
        };
        let rank = c.len()?;
        let shape = (0..rank)
            .map(|_| c.u().map(|d| d as usize))
            .collect::<Dec<_>>()?;
        let digest = match c.byte()? {
            0 => None,
            1 => Some(c.u64le()?),
            _ => return bad("an optional digest"),
        };
        let values = match c.byte()? {
            0 => None,
            1 => Some(c.f32s()?),
            _ => return bad("optional values"),
        };
        Ok(TensorInfo {
            name,
            param,
            from,
            dtype,
            shape,
            digest,
            values,
        })
    }

    /// A record payload.
    pub(crate) fn record(&self, data: &[u8]) -> Dec<Record> {
        let mut c = Cursor::new(data);
        let id = c.id()?;
        let kind = *Kind::ALL
            .get(c.u()? as usize)
            .ok_or_else(|| DecodeError("malformed payload: a record kind".into()))?;
        let op = self.string(&mut c)?;
        let module = self.opt_string(&mut c)?;
        let forward = c.opt_id()?;
        let attrs = self.pairs(&mut c)?;
        let state = self.pairs(&mut c)?;
        let n = c.len()?;
        let inputs = (0..n).map(|_| self.tensor(&mut c)).collect::<Dec<_>>()?;
        let n = c.len()?;
        let outputs = (0..n).map(|_| self.tensor(&mut c)).collect::<Dec<_>>()?;
        if !c.is_done() {
            return bad("bytes after a record");
        }
        Ok(Record {
            id,
            kind,
            op,
            module,
            forward,
            attrs,
            state,
            inputs,
            outputs,
        })
    }

    /// A header payload.
    pub(crate) fn header(data: &[u8]) -> Dec<Header> {
        let mut c = Cursor::new(data);
        let h = Self::header_from(&mut c)?;
        if !c.is_done() {
            return bad("bytes after a header");
        }
        Ok(h)
    }

    fn header_from(c: &mut Cursor<'_>) -> Dec<Header> {
        let n = c.len()?;
        let fields = (0..n)
            .map(|_| Ok((c.str_inline()?, c.str_inline()?)))
            .collect::<Dec<_>>()?;
        let n = c.len()?;
        let params = (0..n)
            .map(|_| {
                let name = c.str_inline()?;
                let role = c.str_inline()?;
                let rank = c.len()?;
                let shape = (0..rank)
                    .map(|_| c.u().map(|d| d as usize))
                    .collect::<Dec<_>>()?;
                let digest = c.u64le()?;
                Ok(ParamInfo {
                    name,
                    role,
                    shape,
                    digest,
                })
            })
            .collect::<Dec<_>>()?;
        Ok(Header { fields, params })
    }

    /// A step-end payload.
    pub(crate) fn step_end(data: &[u8]) -> Dec<StepEnd> {
        let mut c = Cursor::new(data);
        let s = StepEnd {
            step: c.u()?,
            records: c.u()?,
            digest: c.u64le()?,
        };
        if !c.is_done() {
            return bad("bytes after a step end");
        }
        Ok(s)
    }

    /// A capture payload.
    pub(crate) fn capture(data: &[u8]) -> Dec<Capture> {
        let mut c = Cursor::new(data);
        let header = Self::header_from(&mut c)?;
        let n = c.len()?;
        let ints = (0..n)
            .map(|_| {
                let k = c.str_inline()?;
                let m = c.len()?;
                Ok((k, (0..m).map(|_| c.i()).collect::<Dec<Vec<i64>>>()?))
            })
            .collect::<Dec<_>>()?;
        let n = c.len()?;
        let strings = (0..n).map(|_| c.str_inline()).collect::<Dec<_>>()?;
        let d = Decoder { strings };
        let record = d.record(&c.data[c.at..])?;
        Ok(Capture {
            record,
            ints,
            header,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Record {
        Record {
            id: RecordId {
                step: 3,
                section: Section::Shard(2),
                index: 41,
            },
            kind: Kind::Backward,
            op: "conv2d".into(),
            module: Some("layer1.0.conv1".into()),
            forward: Some(RecordId {
                step: 3,
                section: Section::Shard(2),
                index: 7,
            }),
            attrs: vec![
                ("stride".into(), Value::Ints(vec![1, -2])),
                ("eps".into(), Value::F64(1e-5)),
                ("causal".into(), Value::Bool(true)),
            ],
            state: vec![
                ("lr".into(), Value::F32(f32::from_bits(0x7fc0_0001))),
                ("key".into(), Value::U64(u64::MAX)),
                ("mode".into(), Value::Str("conv2d".into())),
                ("scale".into(), Value::F32s(vec![1.0, -0.0])),
                ("n".into(), Value::Int(i64::MIN)),
            ],
            inputs: vec![TensorInfo {
                name: "input".into(),
                param: None,
                from: None,
                dtype: Dtype::I64,
                shape: vec![2, 0, 3],
                digest: Some(0x0123_4567_89ab_cdef),
                values: None,
            }],
            outputs: vec![TensorInfo {
                name: "weight".into(),
                param: Some("layer1.0.conv1.weight".into()),
                from: Some(RecordId {
                    step: 2,
                    section: Section::After,
                    index: 0,
                }),
                dtype: Dtype::F32,
                shape: vec![],
                digest: None,
                values: Some(vec![f32::NAN, 1.5]),
            }],
        }
    }

    #[test]
    fn records_round_trip_with_an_interned_string_table() {
        let r = sample();
        let mut e = Encoder::default();
        let mut payload = Vec::new();
        e.record(&mut payload, &r);
        let table = e.take_new();
        // Strings repeat: `conv2d` is stored once.
        assert_eq!(table.iter().filter(|s| *s == "conv2d").count(), 1);
        let d = Decoder { strings: table };
        let back = d.record(&payload).unwrap();
        // NaN values compare by bits through `Value`; the tensor values hold a NaN, so
        // compare those separately.
        assert_eq!(
            back.outputs[0].values.as_ref().unwrap()[0].to_bits(),
            f32::NAN.to_bits()
        );
        let mut a = r.clone();
        let mut b = back.clone();
        a.outputs[0].values = None;
        b.outputs[0].values = None;
        assert_eq!(a, b);
        assert!(r.same_structure(&back));
        // A second record reuses the table: no new strings.
        let mut again = Vec::new();
        e.record(&mut again, &r);
        assert!(e.take_new().is_empty());
        // Every truncation is an error, never a panic.
        for cut in 0..payload.len() {
            assert!(d.record(&payload[..cut]).is_err(), "cut {cut}");
        }
    }

    #[test]
    fn headers_step_ends_and_captures_round_trip() {
        let mut h = Header::default();
        h.set("backend", "Exact/avx2/1t");
        h.set("backend", "Exact/avx2/2t");
        h.params.push(ParamInfo {
            name: "fc.weight".into(),
            role: "parameter".into(),
            shape: vec![10, 64],
            digest: 7,
        });
        let mut p = Vec::new();
        Encoder::header(&mut p, &h);
        let back = Decoder::header(&p).unwrap();
        assert_eq!(back, h);
        assert_eq!(back.field("backend"), Some("Exact/avx2/2t"));
        let s = StepEnd {
            step: 9,
            records: 1234,
            digest: 42,
        };
        let mut p = Vec::new();
        step_end_payload(&mut p, &s);
        assert_eq!(Decoder::step_end(&p).unwrap(), s);
        let mut r = sample();
        r.outputs[0].values = Some(vec![1.0, 2.0]);
        let c = Capture {
            record: r,
            ints: vec![("targets".into(), vec![3, -1, i64::MAX])],
            header: h,
        };
        let mut p = Vec::new();
        Encoder::capture(&mut p, &c);
        assert_eq!(Decoder::capture(&p).unwrap(), c);
        for cut in 0..p.len() {
            assert!(Decoder::capture(&p[..cut]).is_err(), "cut {cut}");
        }
    }

    #[test]
    fn record_ids_print_and_parse() {
        for (s, id) in [
            ("5:127", (5, Section::Main, 127)),
            ("3:s2:40", (3, Section::Shard(2), 40)),
            ("8:a:0", (8, Section::After, 0)),
        ] {
            let want = RecordId {
                step: id.0,
                section: id.1,
                index: id.2,
            };
            assert_eq!(RecordId::parse(s), Some(want));
            assert_eq!(want.to_string(), s);
        }
        for bad in ["", "5", "5:x", "5:s:1", "a:1", "5:b:1", "1:2:3:4", "-1:0"] {
            assert_eq!(RecordId::parse(bad), None, "{bad}");
        }
        // Sections order as the merged sequence: main, shards, after.
        assert!(Section::Main < Section::Shard(0));
        assert!(Section::Shard(9) < Section::After);
    }

    #[test]
    fn the_frame_check_sees_a_flipped_bit_and_the_length() {
        let p: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
        let c = frame_check(&p);
        for i in 0..p.len() {
            let mut q = p.clone();
            q[i] ^= 0x10;
            assert_ne!(frame_check(&q), c, "byte {i}");
        }
        assert_ne!(frame_check(&p[..299]), c);
        let mut longer = p.clone();
        longer.push(0);
        assert_ne!(frame_check(&longer), c);
    }
}
