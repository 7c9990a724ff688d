//! Checkpoints: state dicts in safetensors files, written atomically, and training
//! checkpoints for bit-identical resume (`docs/checkpoints.md`).
//!
//! - [`TensorFile`] (alias [`StateDict`]) holds named host tensors — `f32` values or
//!   `i64` values — and string metadata. It reads what PyTorch's
//!   `safetensors.torch.save_file` writes (`F32`, `F16`, `BF16` and `F64` tensors become
//!   `f32`, see [`TensorFile::from_bytes`] for the rounding; integer and boolean tensors
//!   become `i64`) and writes `F32` and `I64` tensors ([`TensorFile::save`], atomic).
//! - [`ModuleExt::state_dict`] and [`ModuleExt::load_state_dict`] (or [`load_state_dict_with`]
//!   with a prefix) move a module's parameters and buffers in and out, by their PyTorch
//!   names; loading reports missing, unexpected, wrong-shape, wrong-type and non-finite
//!   entries by name ([`StateDictMismatch`]).
//! - [`TrainingState`] captures a model (with its modules' random streams), an
//!   optimizer, a learning-rate scheduler, a data loader's position and the loop's random
//!   streams into a [`TrainingCheckpoint`] in one call, and restores them in one call, so
//!   that an interrupted run resumes with the same bits as an uninterrupted one.
//!
//! [`TensorFile`] and [`load_state_dict`] are also re-exported from [`crate::reference`],
//! where they first lived.
//!
//! Over 800 lines on purpose: the safetensors reader, its element-type conversions and
//! the state-dict loader with its mismatch report share one entry table; the atomic
//! writer and training checkpoints are in their own modules.

mod atomic;
mod training;

pub use atomic::write_atomic;
pub use training::{ResumableLoader, TrainingCheckpoint, TrainingState};

use crate::error::{DataError, Error, Result};
use crate::module::{Entry, Module, ModuleExt};
use exactgrad_autograd::{no_grad, Tensor};
use exactgrad_core::Backend;
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// A state dict: named host tensors and metadata (see [`TensorFile`]).
pub type StateDict = TensorFile;

/// Named host tensors (`f32` or `i64` values, each with a shape) and string metadata:
/// the contents of a safetensors file, or a state dict on its way to or from one.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TensorFile {
    floats: BTreeMap<String, (Vec<usize>, Vec<f32>)>,
    ints: BTreeMap<String, (Vec<usize>, Vec<i64>)>,
    /// The element type of every tensor as stored in the file (`F32` for the float
    /// tensors and `I64` for the integer ones inserted by hand).
    dtypes: BTreeMap<String, Dtype>,
    metadata: BTreeMap<String, String>,
}

fn file_error(message: impl Into<String>) -> Error {
    Error::Data(DataError::BadHeader {
        format: "safetensors",
        message: message.into(),
    })
}

/// The `f32` with the value of the IEEE binary16 number `h` (exact: every binary16 value
/// is an `f32`).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1f);
    let mant = u32::from(h & 0x3ff);
    let bits = match (exp, mant) {
        (0, 0) => sign,
        (0, m) => {
            // Subnormal: m · 2^-24, normalised for f32.
            let shift = m.leading_zeros() - 21; // brings the top bit to position 10
            let m = (m << shift) & 0x3ff;
            let e = 127 - 15 + 1 - shift;
            sign | (e << 23) | (m << 13)
        }
        (0x1f, 0) => sign | 0x7f80_0000,
        (0x1f, m) => sign | 0x7f80_0000 | (m << 13) | 0x0040_0000,
        (e, m) => sign | ((e + 127 - 15) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

/// The `f32` with the value of the bfloat16 number `b` (exact: its bits are the top half
/// of an `f32`'s).
pub fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits(u32::from(b) << 16)
}

impl TensorFile {
    /// An empty file.
    pub fn new() -> Self {
        Self::default()
    }

    /// Decodes the bytes of a safetensors file.
    ///
    /// Element types: `F32` as is; `F16` and `BF16` converted to `f32` exactly (every
    /// value of both is an `f32`); `F64` rounded to the nearest `f32`, ties to even (values
    /// beyond the `f32` range become ±∞, which loading refuses unless non-finite values are
    /// allowed); `I64`, `I32`, `I16`, `I8`, `U8` and `BOOL` as `i64`. Fails when the bytes
    /// are not a valid safetensors file or hold a tensor of another element type (`U64`,
    /// `F8_*`, …), naming it.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let st = SafeTensors::deserialize(bytes).map_err(|e| file_error(e.to_string()))?;
        let (_, meta) = SafeTensors::read_metadata(bytes).map_err(|e| file_error(e.to_string()))?;
        let mut out = TensorFile::default();
        if let Some(m) = meta.metadata() {
            out.metadata = m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        }
        for (name, view) in st.tensors() {
            let shape = view.shape().to_vec();
            let data = view.data();
            let dtype = view.dtype();
            let floats = |n: usize, f: &dyn Fn(&[u8]) -> f32| -> Vec<f32> {
                data.chunks_exact(n).map(f).collect()
            };
            let ints = |n: usize, f: &dyn Fn(&[u8]) -> i64| -> Vec<i64> {
                data.chunks_exact(n).map(f).collect()
            };
            match dtype {
                Dtype::F32 => {
                    let v = floats(4, &|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
                    out.floats.insert(name.clone(), (shape, v));
                }
                Dtype::F16 => {
                    let v = floats(2, &|c| f16_to_f32(u16::from_le_bytes([c[0], c[1]])));
                    out.floats.insert(name.clone(), (shape, v));
                }
                Dtype::BF16 => {
                    let v = floats(2, &|c| bf16_to_f32(u16::from_le_bytes([c[0], c[1]])));
                    out.floats.insert(name.clone(), (shape, v));
                }
                Dtype::F64 => {
                    let v = floats(8, &|c| {
                        f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])
                            as f32
                    });
                    out.floats.insert(name.clone(), (shape, v));
                }
                Dtype::I64 => {
                    let v = ints(8, &|c| {
                        i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])
                    });
                    out.ints.insert(name.clone(), (shape, v));
                }
                Dtype::I32 => {
                    let v = ints(4, &|c| {
                        i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    });
                    out.ints.insert(name.clone(), (shape, v));
                }
                Dtype::I16 => {
                    let v = ints(2, &|c| i64::from(i16::from_le_bytes([c[0], c[1]])));
                    out.ints.insert(name.clone(), (shape, v));
                }
                Dtype::I8 => {
                    let v = ints(1, &|c| i64::from(c[0] as i8));
                    out.ints.insert(name.clone(), (shape, v));
                }
                Dtype::U8 | Dtype::BOOL => {
                    let v = ints(1, &|c| i64::from(c[0]));
                    out.ints.insert(name.clone(), (shape, v));
                }
                other => {
                    return Err(file_error(format!(
                        "tensor `{name}` has element type {other:?}; F32, F16, BF16, F64, I64, I32, I16, I8, U8 and BOOL are read"
                    )))
                }
            }
            out.dtypes.insert(name, dtype);
        }
        Ok(out)
    }

    /// Reads and decodes the safetensors file at `path` (see [`TensorFile::from_bytes`]).
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_bytes(&bytes)
    }

    /// The bytes of a safetensors file holding every tensor (float ones as `F32`, integer
    /// ones as `I64`, little-endian) and the metadata (none when there is none, as
    /// `safetensors.torch.save_file` without metadata). The tensors are laid out as the
    /// safetensors library lays them out (by element type, then by name), so a state dict
    /// without metadata gives the same bytes as `save_file` on the same tensors in PyTorch.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut data: Vec<(&str, Dtype, &[usize], Vec<u8>)> = Vec::new();
        for (name, (shape, v)) in &self.floats {
            let bytes = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            data.push((name, Dtype::F32, shape, bytes));
        }
        for (name, (shape, v)) in &self.ints {
            let bytes = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            data.push((name, Dtype::I64, shape, bytes));
        }
        let mut views = Vec::with_capacity(data.len());
        for (name, dtype, shape, bytes) in &data {
            let view = TensorView::new(*dtype, shape.to_vec(), bytes)
                .map_err(|e| file_error(format!("tensor `{name}`: {e}")))?;
            views.push((name.to_string(), view));
        }
        let bytes = safetensors::serialize(views, None::<HashMap<String, String>>)
            .map_err(|e| file_error(e.to_string()))?;
        if self.metadata.is_empty() {
            return Ok(bytes);
        }
        with_sorted_metadata(&bytes, &self.metadata)
    }

    /// Writes the file to `path` atomically (see [`write_atomic`]): a crash or error while
    /// writing leaves the previous file at `path` intact.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        write_atomic(path.as_ref(), &self.to_bytes()?)
    }

    /// Adds (or replaces) the float tensor `name`. Fails when `values` does not hold
    /// the product of `shape`.
    pub fn insert_floats(&mut self, name: &str, shape: &[usize], values: Vec<f32>) -> Result<()> {
        check_len("TensorFile::insert_floats", name, shape, values.len())?;
        self.remove(name);
        self.dtypes.insert(name.to_string(), Dtype::F32);
        self.floats
            .insert(name.to_string(), (shape.to_vec(), values));
        Ok(())
    }

    /// Adds (or replaces) the integer tensor `name`. Fails when `values` does not hold
    /// the product of `shape`.
    pub fn insert_ints(&mut self, name: &str, shape: &[usize], values: Vec<i64>) -> Result<()> {
        check_len("TensorFile::insert_ints", name, shape, values.len())?;
        self.remove(name);
        self.dtypes.insert(name.to_string(), Dtype::I64);
        self.ints.insert(name.to_string(), (shape.to_vec(), values));
        Ok(())
    }

    /// Adds (or replaces) the values of `tensor` as the float tensor `name`.
    pub fn insert_tensor<B: Backend>(&mut self, name: &str, tensor: &Tensor<B>) -> Result<()> {
        self.insert_floats(name, tensor.dims(), tensor.to_vec()?)
    }

    /// Removes tensor `name`; returns whether there was one.
    pub fn remove(&mut self, name: &str) -> bool {
        self.dtypes.remove(name);
        self.floats.remove(name).is_some() | self.ints.remove(name).is_some()
    }

    /// Sets a `__metadata__` entry.
    pub fn set_metadata(&mut self, key: &str, value: impl Into<String>) {
        self.metadata.insert(key.to_string(), value.into());
    }

    /// Every tensor and metadata entry of `other`, with `prefix` put before its name.
    pub fn extend_prefixed(&mut self, prefix: &str, other: &TensorFile) {
        for (n, v) in &other.floats {
            self.remove(&format!("{prefix}{n}"));
            self.floats.insert(format!("{prefix}{n}"), v.clone());
        }
        for (n, v) in &other.ints {
            self.remove(&format!("{prefix}{n}"));
            self.ints.insert(format!("{prefix}{n}"), v.clone());
        }
        for (n, d) in &other.dtypes {
            self.dtypes.insert(format!("{prefix}{n}"), *d);
        }
        for (k, v) in &other.metadata {
            self.metadata.insert(format!("{prefix}{k}"), v.clone());
        }
    }

    /// The tensors and metadata entries whose name starts with `prefix`, with the prefix
    /// removed.
    pub fn strip_prefix(&self, prefix: &str) -> TensorFile {
        let strip = |n: &String| n.strip_prefix(prefix).map(str::to_string);
        let mut out = TensorFile::default();
        for (n, v) in &self.floats {
            if let Some(k) = strip(n) {
                out.floats.insert(k, v.clone());
            }
        }
        for (n, v) in &self.ints {
            if let Some(k) = strip(n) {
                out.ints.insert(k, v.clone());
            }
        }
        for (n, d) in &self.dtypes {
            if let Some(k) = strip(n) {
                out.dtypes.insert(k, *d);
            }
        }
        for (n, v) in &self.metadata {
            if let Some(k) = strip(n) {
                out.metadata.insert(k, v.clone());
            }
        }
        out
    }

    /// The names of all tensors, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.dtypes.keys().map(String::as_str).collect()
    }

    /// Whether there is a tensor named `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.dtypes.contains_key(name)
    }

    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.dtypes.len()
    }

    /// Whether there are no tensors.
    pub fn is_empty(&self) -> bool {
        self.dtypes.is_empty()
    }

    /// A `__metadata__` entry.
    pub fn metadata(&self, key: &str) -> Option<&str> {
        self.metadata.get(key).map(String::as_str)
    }

    /// The `__metadata__` entries, sorted by key.
    pub fn metadata_entries(&self) -> impl Iterator<Item = (&str, &str)> {
        self.metadata.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// A `__metadata__` entry parsed as an unsigned integer.
    pub fn metadata_usize(&self, key: &str) -> Result<usize> {
        self.metadata_parsed(key, "an unsigned integer")
    }

    /// A `__metadata__` entry parsed with [`str::parse`]; `what` names the expected kind
    /// of value in the error.
    pub fn metadata_parsed<T: std::str::FromStr>(&self, key: &str, what: &str) -> Result<T> {
        let v = self
            .metadata(key)
            .ok_or_else(|| file_error(format!("metadata entry `{key}` is missing")))?;
        v.parse()
            .map_err(|_| file_error(format!("metadata entry `{key}` = `{v}` is not {what}")))
    }

    /// The shape and values of the float tensor `name`.
    pub fn floats(&self, name: &str) -> Result<(&[usize], &[f32])> {
        self.floats
            .get(name)
            .map(|(s, v)| (s.as_slice(), v.as_slice()))
            .ok_or_else(|| file_error(format!("no float tensor named `{name}`")))
    }

    /// The shape and values of the integer or boolean tensor `name`.
    pub fn ints(&self, name: &str) -> Result<(&[usize], &[i64])> {
        self.ints
            .get(name)
            .map(|(s, v)| (s.as_slice(), v.as_slice()))
            .ok_or_else(|| file_error(format!("no integer tensor named `{name}`")))
    }

    /// The float tensor `name` on `backend`.
    pub fn tensor<B: Backend>(&self, backend: &B, name: &str) -> Result<Tensor<B>> {
        let (shape, values) = self.floats(name)?;
        Ok(Tensor::from_slice(backend, values, shape)?)
    }

    /// The element type of tensor `name` as stored in the file (`F32`, `BF16`, `I64`, …).
    pub fn dtype(&self, name: &str) -> Option<String> {
        self.dtypes.get(name).map(|d| format!("{d:?}"))
    }
}

fn check_len(op: &'static str, name: &str, shape: &[usize], len: usize) -> Result<()> {
    let n = exactgrad_core::Shape::from(shape.to_vec()).checked_numel();
    if n != Some(len) {
        return Err(Error::invalid(
            op,
            "values",
            format!("tensor `{name}` of shape {shape:?} needs {n:?} values, got {len}"),
        ));
    }
    Ok(())
}

/// The state dict of `module` (see [`Module::state_dict`]).
pub(crate) fn module_state_dict<B: Backend, M: Module<B> + ?Sized>(
    module: &M,
) -> Result<TensorFile> {
    let mut out = TensorFile::default();
    let mut result = Ok(());
    let mut add = |name: &str, t: &Tensor<B>| {
        if result.is_ok() {
            result = out.insert_tensor(name, t);
        }
    };
    let mut ints = Vec::new();
    module.visit_entries(&mut |name, e| match e {
        Entry::Parameter(t) | Entry::Buffer(t) => add(name, t),
        Entry::IntBuffer(b) => ints.push((name.to_string(), b.get())),
        Entry::Stream(_) | Entry::Training(_) => {}
    });
    result?;
    for (name, v) in ints {
        out.insert_ints(&name, &[], vec![v])?;
    }
    Ok(out)
}

/// `bytes` (a safetensors file without metadata) with `metadata` as its `__metadata__`
/// entry, keys in sorted order: the safetensors library takes metadata as a `HashMap`,
/// whose order changes from one process to the next, so the entry is written here and the
/// same state always gives the same bytes. The header stays padded with spaces to a
/// multiple of 8 bytes, as the library pads it; tensor offsets are relative to the data
/// and do not move.
fn with_sorted_metadata(bytes: &[u8], metadata: &BTreeMap<String, String>) -> Result<Vec<u8>> {
    let bad = || file_error("the serialised header is malformed".to_string());
    let n = u64::from_le_bytes(
        bytes
            .get(..8)
            .ok_or_else(bad)?
            .try_into()
            .map_err(|_| bad())?,
    );
    let end = usize::try_from(n)
        .ok()
        .and_then(|n| n.checked_add(8))
        .filter(|&e| e <= bytes.len())
        .ok_or_else(bad)?;
    let header = std::str::from_utf8(&bytes[8..end])
        .map_err(|_| bad())?
        .trim_end();
    let rest = header.strip_prefix('{').ok_or_else(bad)?;
    let meta = serde_json::to_string(metadata).map_err(|e| file_error(e.to_string()))?;
    let sep = if rest.trim_start().starts_with('}') {
        ""
    } else {
        ","
    };
    let mut new_header = format!("{{\"__metadata__\":{meta}{sep}{rest}").into_bytes();
    new_header.resize(new_header.len().next_multiple_of(8), b' ');
    let mut out = Vec::with_capacity(8 + new_header.len() + bytes.len() - end);
    out.extend_from_slice(&(new_header.len() as u64).to_le_bytes());
    out.extend_from_slice(&new_header);
    out.extend_from_slice(&bytes[end..]);
    Ok(out)
}

/// How [`load_state_dict_with`] treats entries that do not match the module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadOptions {
    /// Refuse the file when an entry of the module is missing or the file holds an
    /// entry under the prefix that the module does not have (PyTorch's `strict=True`,
    /// the default). Without it, both are only reported in the [`LoadReport`].
    pub strict: bool,
    /// Accept NaN and ±∞ in the loaded values. By default a non-finite value is an error
    /// naming the entry (a checkpoint of a diverged run is refused, not trained on).
    pub allow_non_finite: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            strict: true,
            allow_non_finite: false,
        }
    }
}

impl LoadOptions {
    /// The defaults with `strict` (PyTorch's `load_state_dict(…, strict)`).
    pub fn strict(strict: bool) -> Self {
        Self {
            strict,
            ..Self::default()
        }
    }
}

/// What [`load_state_dict_with`] did not load (both lists are empty after a strict load).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Entries of the module that the file lacks (their values are unchanged).
    pub missing: Vec<String>,
    /// Entries of the file, under the prefix, that the module does not have.
    pub unexpected: Vec<String>,
}

/// Why a file cannot be loaded into a module: every problem, each named.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StateDictMismatch {
    /// Entries of the module missing from the file (strict loading).
    pub missing: Vec<String>,
    /// Entries of the file the module does not have (strict loading).
    pub unexpected: Vec<String>,
    /// Entries whose shape differs: name, shape in the file, shape in the module.
    pub wrong_shape: Vec<(String, Vec<usize>, Vec<usize>)>,
    /// Entries whose element type does not fit: name, type in the file, kind the module
    /// needs (`"floating-point"` for parameters and float buffers, `"integer"` for
    /// integer buffers).
    pub wrong_dtype: Vec<(String, String, &'static str)>,
    /// Entries holding NaN or ±∞ (unless allowed): name and index of the first one.
    pub non_finite: Vec<(String, usize)>,
}

impl StateDictMismatch {
    fn is_empty(&self) -> bool {
        self.missing.is_empty()
            && self.unexpected.is_empty()
            && self.wrong_shape.is_empty()
            && self.wrong_dtype.is_empty()
            && self.non_finite.is_empty()
    }
}

impl std::fmt::Display for StateDictMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if !self.missing.is_empty() {
            parts.push(format!("missing entries {:?}", self.missing));
        }
        if !self.unexpected.is_empty() {
            parts.push(format!("unexpected entries {:?}", self.unexpected));
        }
        for (n, file, module) in &self.wrong_shape {
            parts.push(format!(
                "entry `{n}` has shape {file:?}, the module's has shape {module:?}"
            ));
        }
        for (n, d, want) in &self.wrong_dtype {
            parts.push(format!(
                "entry `{n}` has element type {d}, not a {want} type"
            ));
        }
        for (n, i) in &self.non_finite {
            parts.push(format!(
                "entry `{n}` holds a non-finite value at element {i}"
            ));
        }
        f.write_str(&parts.join("; "))
    }
}

/// Copies the values of every parameter and buffer of `module` from the tensor named
/// `prefix` + its `state_dict` name, strictly ([`load_state_dict_with`] with the default
/// [`LoadOptions`]): PyTorch's `load_state_dict(strict=True)` over the entries under
/// `prefix` (tensors outside the prefix are other parts of the file and ignored).
///
/// Fails, before changing anything, when an entry is missing, the file has an entry
/// under the prefix that the module lacks, an entry has another shape or an element type
/// of the wrong kind, or holds NaN or ±∞; the error names every one.
pub fn load_state_dict<B: Backend, M: Module<B> + ?Sized>(
    module: &M,
    file: &TensorFile,
    prefix: &str,
) -> Result<()> {
    load_state_dict_with(module, file, prefix, LoadOptions::default()).map(|_| ())
}

/// [`load_state_dict`] with explicit [`LoadOptions`]; returns what was not loaded.
///
/// Parameters and float buffers load from floating-point entries (any element type
/// [`TensorFile::from_bytes`] converts), integer buffers ([`IntBuffer`](crate::module::IntBuffer))
/// from integer entries of shape `[]`. An optional integer buffer
/// (`num_batches_tracked`) that the file lacks keeps its value and is not reported, as in
/// PyTorch. Every problem is collected before anything changes; when any is fatal (a
/// missing or unexpected entry in strict mode, a wrong shape or element type, a
/// non-finite value that is not allowed) the module is left untouched and the error
/// lists them all.
pub fn load_state_dict_with<B: Backend, M: Module<B> + ?Sized>(
    module: &M,
    file: &TensorFile,
    prefix: &str,
    options: LoadOptions,
) -> Result<LoadReport> {
    let mut entries = module.named_parameters();
    entries.extend(module.named_buffers());
    let mut problems = StateDictMismatch::default();
    let mut report = LoadReport::default();
    let mut values = Vec::with_capacity(entries.len());
    let mut known = std::collections::BTreeSet::new();
    for (name, t) in &entries {
        let key = format!("{prefix}{name}");
        known.insert(key.clone());
        match file.floats(&key) {
            Ok((shape, v)) => {
                if shape != t.dims() {
                    problems
                        .wrong_shape
                        .push((key, shape.to_vec(), t.dims().to_vec()));
                } else if let (false, Some(i)) = (
                    options.allow_non_finite,
                    v.iter().position(|x| !x.is_finite()),
                ) {
                    problems.non_finite.push((key, i));
                } else {
                    values.push((t, v));
                }
            }
            Err(_) => match file.dtype(&key) {
                Some(d) => problems.wrong_dtype.push((key, d, "floating-point")),
                None => report.missing.push(key),
            },
        }
    }
    let mut int_values = Vec::new();
    module.visit_entries(&mut |name, e| {
        let Entry::IntBuffer(b) = e else { return };
        let key = format!("{prefix}{name}");
        known.insert(key.clone());
        match file.ints(&key) {
            Ok((shape, v)) => {
                if shape.is_empty() && v.len() == 1 {
                    int_values.push(Some(v[0]));
                } else {
                    problems.wrong_shape.push((key, shape.to_vec(), Vec::new()));
                }
            }
            Err(_) => {
                int_values.push(None);
                match file.dtype(&key) {
                    Some(d) => problems.wrong_dtype.push((key, d, "integer")),
                    None if b.is_optional() => {}
                    None => report.missing.push(key),
                }
            }
        }
    });
    report.unexpected = file
        .names()
        .into_iter()
        .filter(|n| n.starts_with(prefix) && !known.contains(*n))
        .map(str::to_string)
        .collect();
    if options.strict {
        problems.missing = std::mem::take(&mut report.missing);
        problems.unexpected = std::mem::take(&mut report.unexpected);
    }
    if !problems.is_empty() {
        return Err(Error::StateDict(Box::new(problems)));
    }
    let _guard = no_grad();
    for (t, v) in values {
        t.copy_(&Tensor::from_slice(t.backend(), v, t.dims())?)?;
    }
    // The integer buffers, in the same visiting order (a missing optional one keeps its
    // value).
    let mut i = 0;
    module.visit_entries(&mut |_, e| {
        let Entry::IntBuffer(b) = e else { return };
        if let Some(Some(v)) = int_values.get(i) {
            b.set(*v);
        }
        i += 1;
    });
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linear::Linear;
    use exactgrad_backends::ScalarRefBackend;
    use exactgrad_core::Philox;
    use safetensors::tensor::TensorView;
    use std::collections::HashMap;

    /// A safetensors file holding `tensors` (all F32) and one metadata entry.
    fn file(tensors: &[(&str, Vec<usize>, Vec<f32>)]) -> Vec<u8> {
        let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
            .iter()
            .map(|(n, s, v)| {
                (
                    n.to_string(),
                    s.clone(),
                    v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                )
            })
            .collect();
        let views: Vec<(String, TensorView<'_>)> = bytes
            .iter()
            .map(|(n, s, b)| {
                (
                    n.clone(),
                    TensorView::new(Dtype::F32, s.clone(), b).unwrap(),
                )
            })
            .collect();
        let meta = HashMap::from([("answer".to_string(), "42".to_string())]);
        safetensors::serialize(views, Some(meta)).unwrap()
    }

    #[test]
    fn tensor_file_reads_tensors_and_metadata() {
        let bytes = file(&[
            ("a", vec![2, 2], vec![1., 2., 3., 4.]),
            ("b", vec![1], vec![5.]),
        ]);
        let f = TensorFile::from_bytes(&bytes).unwrap();
        assert_eq!(f.names(), ["a", "b"]);
        assert_eq!(
            f.floats("a").unwrap(),
            (&[2usize, 2][..], &[1f32, 2., 3., 4.][..])
        );
        assert_eq!(f.metadata_usize("answer").unwrap(), 42);
        assert!(f.metadata_usize("missing").is_err());
        assert!(f.ints("a").is_err());
        assert_eq!(
            f.tensor(&ScalarRefBackend, "b").unwrap().to_vec().unwrap(),
            [5.0]
        );
        assert!(TensorFile::from_bytes(&bytes[..bytes.len() - 3]).is_err());
        assert!(TensorFile::from_bytes(b"not a file").is_err());
    }

    #[test]
    fn load_state_dict_copies_or_fails_before_changing_anything() {
        let b = ScalarRefBackend;
        let lin = Linear::new(&b, 2, 1, &mut Philox::new(1)).unwrap();
        let before = lin.weight().to_vec().unwrap();
        let f = TensorFile::from_bytes(&file(&[
            ("m.weight", vec![1, 2], vec![7., 8.]),
            ("m.bias", vec![1], vec![9.]),
        ]))
        .unwrap();
        load_state_dict(&lin, &f, "m.").unwrap();
        assert_eq!(lin.weight().to_vec().unwrap(), [7., 8.]);
        assert_eq!(lin.bias().unwrap().to_vec().unwrap(), [9.]);
        assert!(lin.weight().is_requires_grad());

        let lin = Linear::new(&b, 2, 1, &mut Philox::new(1)).unwrap();
        let missing =
            TensorFile::from_bytes(&file(&[("weight", vec![1, 2], vec![7., 8.])])).unwrap();
        let err = load_state_dict(&lin, &missing, "").unwrap_err();
        assert!(
            err.to_string().contains("missing entries [\"bias\"]"),
            "{err}"
        );
        assert_eq!(lin.weight().to_vec().unwrap(), before);
        let wrong = TensorFile::from_bytes(&file(&[
            ("weight", vec![2, 1], vec![7., 8.]),
            ("bias", vec![1], vec![9.]),
        ]))
        .unwrap();
        let err = load_state_dict(&lin, &wrong, "").unwrap_err();
        assert!(err.to_string().contains("has shape [2, 1]"), "{err}");
    }

    /// A safetensors file with one I64 tensor `name` of shape `shape`.
    fn int_file(
        name: &str,
        shape: Vec<usize>,
        values: &[i64],
        extra: &[(&str, Vec<usize>, Vec<f32>)],
    ) -> Vec<u8> {
        let ints: Vec<u8> = values.iter().flat_map(|x| x.to_le_bytes()).collect();
        let floats: Vec<(String, Vec<usize>, Vec<u8>)> = extra
            .iter()
            .map(|(n, s, v)| {
                (
                    n.to_string(),
                    s.clone(),
                    v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                )
            })
            .collect();
        let mut views = vec![(
            name.to_string(),
            TensorView::new(Dtype::I64, shape, &ints).unwrap(),
        )];
        for (n, s, b) in &floats {
            views.push((
                n.clone(),
                TensorView::new(Dtype::F32, s.clone(), b).unwrap(),
            ));
        }
        safetensors::serialize(views, None).unwrap()
    }

    #[test]
    fn strict_loading_refuses_unexpected_entries_and_non_strict_reports_them() {
        let b = ScalarRefBackend;
        let lin = Linear::new(&b, 2, 1, &mut Philox::new(1)).unwrap();
        let before = lin.weight().to_vec().unwrap();
        let f = TensorFile::from_bytes(&file(&[
            ("m.weight", vec![1, 2], vec![7., 8.]),
            ("m.bias", vec![1], vec![9.]),
            ("m.extra", vec![1], vec![1.]),
            ("other.x", vec![1], vec![1.]),
        ]))
        .unwrap();
        let err = load_state_dict(&lin, &f, "m.").unwrap_err().to_string();
        assert!(err.contains("unexpected entries [\"m.extra\"]"), "{err}");
        assert!(
            !err.contains("other.x"),
            "entries outside the prefix are not the module's: {err}"
        );
        assert_eq!(
            lin.weight().to_vec().unwrap(),
            before,
            "nothing changes on error"
        );
        let opts = LoadOptions {
            strict: false,
            ..LoadOptions::default()
        };
        let report = load_state_dict_with(&lin, &f, "m.", opts).unwrap();
        assert_eq!(report.unexpected, ["m.extra"]);
        assert!(report.missing.is_empty());
        assert_eq!(lin.weight().to_vec().unwrap(), [7., 8.]);
        // Non-strict: a missing entry is reported and the others load.
        let partial =
            TensorFile::from_bytes(&file(&[("weight", vec![1, 2], vec![1., 2.])])).unwrap();
        let report = load_state_dict_with(&lin, &partial, "", opts).unwrap();
        assert_eq!(report.missing, ["bias"]);
        assert_eq!(lin.weight().to_vec().unwrap(), [1., 2.]);
        assert_eq!(lin.bias().unwrap().to_vec().unwrap(), [9.]);
    }

    #[test]
    fn an_integer_entry_is_a_wrong_element_type_not_a_missing_one() {
        let b = ScalarRefBackend;
        let lin = Linear::new(&b, 2, 1, &mut Philox::new(1)).unwrap();
        let f = TensorFile::from_bytes(&int_file(
            "weight",
            vec![1, 2],
            &[7, 8],
            &[("bias", vec![1], vec![9.])],
        ))
        .unwrap();
        let err = load_state_dict(&lin, &f, "").unwrap_err().to_string();
        assert!(err.contains("entry `weight` has element type I64"), "{err}");
        assert!(!err.contains("missing"), "{err}");
        // Also in non-strict mode: a wrong type is never silently skipped.
        let opts = LoadOptions {
            strict: false,
            ..LoadOptions::default()
        };
        assert!(load_state_dict_with(&lin, &f, "", opts).is_err());
    }

    #[test]
    fn non_finite_values_are_refused_unless_allowed() {
        let b = ScalarRefBackend;
        let lin = Linear::new(&b, 2, 1, &mut Philox::new(1)).unwrap();
        let f = TensorFile::from_bytes(&file(&[
            ("weight", vec![1, 2], vec![7., f32::NAN]),
            ("bias", vec![1], vec![f32::INFINITY]),
        ]))
        .unwrap();
        let err = load_state_dict(&lin, &f, "").unwrap_err().to_string();
        assert!(
            err.contains("entry `weight` holds a non-finite value at element 1"),
            "{err}"
        );
        assert!(
            err.contains("entry `bias` holds a non-finite value at element 0"),
            "{err}"
        );
        let opts = LoadOptions {
            allow_non_finite: true,
            ..LoadOptions::default()
        };
        load_state_dict_with(&lin, &f, "", opts).unwrap();
        assert!(lin.weight().to_vec().unwrap()[1].is_nan());
        assert_eq!(lin.bias().unwrap().to_vec().unwrap(), [f32::INFINITY]);
    }
}
