//! [`TensorFile`]: named host tensors and metadata, read from and written to safetensors
//! files.

use super::atomic::write_atomic;
use super::sha256::{hex, Sha256};
use crate::error::{DataError, Error, Result};
use exactgrad_autograd::Tensor;
use exactgrad_core::Backend;
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// A state dict: named host tensors and metadata (see [`TensorFile`]).
pub type StateDict = TensorFile;

/// The `__metadata__` key under which a file stores its SHA-256 digest
/// ([`TensorFile::to_bytes_with_checksum`]; `docs/checkpoints.md`, "Integrity").
pub const CHECKSUM_KEY: &str = "exactgrad.sha256";

/// Whether the bytes a [`TensorFile`] was read from were checked against a digest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Integrity {
    /// The file stored a SHA-256 digest ([`CHECKSUM_KEY`]) and its bytes matched it.
    Verified,
    /// Nothing was checked: the file stored no digest (one written by PyTorch, by hand,
    /// or by [`TensorFile::to_bytes`]), or the value was not read from a file.
    #[default]
    Unverified,
}

/// Named host tensors (`f32` or `i64` values, each with a shape) and string metadata:
/// the contents of a safetensors file, or a state dict on its way to or from one.
///
/// Two files are equal when their contents are (tensors, element types and metadata);
/// whether they were verified ([`TensorFile::integrity`]) is not compared.
#[derive(Clone, Debug, Default)]
pub struct TensorFile {
    floats: BTreeMap<String, (Vec<usize>, Vec<f32>)>,
    ints: BTreeMap<String, (Vec<usize>, Vec<i64>)>,
    /// The element type of every tensor as stored in the file (`F32` for the float
    /// tensors and `I64` for the integer ones inserted by hand).
    dtypes: BTreeMap<String, Dtype>,
    metadata: BTreeMap<String, String>,
    /// Whether the bytes this was read from matched their digest.
    integrity: Integrity,
}

impl PartialEq for TensorFile {
    fn eq(&self, other: &Self) -> bool {
        self.floats == other.floats
            && self.ints == other.ints
            && self.dtypes == other.dtypes
            && self.metadata == other.metadata
    }
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
    ///
    /// A file that stores a digest ([`CHECKSUM_KEY`], written by
    /// [`to_bytes_with_checksum`](Self::to_bytes_with_checksum)) is verified: a digest that
    /// differs from its bytes' is [`DataError::DigestMismatch`], a malformed one an error
    /// too; the digest is then not kept as metadata and [`integrity`](Self::integrity)
    /// is [`Integrity::Verified`]. A file without one loads as [`Integrity::Unverified`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let st = SafeTensors::deserialize(bytes).map_err(|e| file_error(e.to_string()))?;
        let (_, meta) = SafeTensors::read_metadata(bytes).map_err(|e| file_error(e.to_string()))?;
        let mut out = TensorFile::default();
        if let Some(m) = meta.metadata() {
            out.metadata = m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        }
        if let Some(stored) = out.metadata.remove(CHECKSUM_KEY) {
            verify_checksum(bytes, &stored)?;
            out.integrity = Integrity::Verified;
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

    /// Reads and decodes the safetensors file at `path` (see [`TensorFile::from_bytes`]);
    /// anything but a regular file (or a symlink to one) is refused before it is opened.
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let bytes = super::atomic::read_regular(path).map_err(|source| Error::Io {
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
    ///
    /// No digest is written (see [`to_bytes_with_checksum`](Self::to_bytes_with_checksum));
    /// metadata under the key [`CHECKSUM_KEY`], which a digest uses, is an error.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        self.check_reserved()?;
        self.serialize(&self.metadata)
    }

    /// The bytes of [`to_bytes`](Self::to_bytes) with a SHA-256 digest of the whole file
    /// in the metadata (key [`CHECKSUM_KEY`], 64 lowercase hex digits): the digest of
    /// every byte of the file — length prefix, header and data — with the 64 digits
    /// replaced by 64 `0` characters (`docs/checkpoints.md`, "Integrity"). The file
    /// remains a safetensors file that PyTorch reads (`load_file` ignores metadata);
    /// [`from_bytes`](Self::from_bytes) verifies it.
    pub fn to_bytes_with_checksum(&self) -> Result<Vec<u8>> {
        self.check_reserved()?;
        let mut metadata = self.metadata.clone();
        metadata.insert(CHECKSUM_KEY.to_string(), "0".repeat(64));
        let mut bytes = self.serialize(&metadata)?;
        let at = checksum_position(&bytes)?;
        let mut h = Sha256::new();
        h.update(&bytes);
        let digest = hex(&h.finish());
        bytes[at..at + 64].copy_from_slice(digest.as_bytes());
        Ok(bytes)
    }

    /// Writes [`to_bytes_with_checksum`](Self::to_bytes_with_checksum) to `path`
    /// atomically (see [`write_atomic`]).
    pub fn save_with_checksum(&self, path: impl AsRef<Path>) -> Result<()> {
        write_atomic(path.as_ref(), &self.to_bytes_with_checksum()?)
    }

    /// Whether the bytes this file was read from matched a stored digest
    /// ([`Integrity::Verified`]) or stored none ([`Integrity::Unverified`], also the value
    /// of a file built in memory).
    pub fn integrity(&self) -> Integrity {
        self.integrity
    }

    fn check_reserved(&self) -> Result<()> {
        if self.metadata.contains_key(CHECKSUM_KEY) {
            return Err(Error::invalid(
                "TensorFile::to_bytes",
                "metadata",
                format!("the key `{CHECKSUM_KEY}` is reserved for the file's digest"),
            ));
        }
        Ok(())
    }

    /// The file's bytes with `metadata` as its `__metadata__` (none when empty).
    fn serialize(&self, metadata: &BTreeMap<String, String>) -> Result<Vec<u8>> {
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
        if metadata.is_empty() {
            return Ok(bytes);
        }
        with_sorted_metadata(&bytes, metadata)
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
        Tensor::from_slice(backend, values, shape)
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

/// Where the 64 hex digits of the digest lie in `bytes`: right after the one occurrence
/// in the header of `"exactgrad.sha256":"` whose first `"` is not escaped (not preceded
/// by an odd number of backslashes: inside a JSON string every `"` is escaped, so only the
/// key itself starts so), followed by `"`.
fn checksum_position(bytes: &[u8]) -> Result<usize> {
    let malformed = |why: &str| file_error(format!("the digest `{CHECKSUM_KEY}` {why}"));
    let n = bytes
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes)
        .and_then(|n| usize::try_from(n).ok())
        .and_then(|n| n.checked_add(8))
        .filter(|&end| end <= bytes.len())
        .ok_or_else(|| malformed("lies outside the header"))?;
    let header = &bytes[8..n];
    let pattern = format!("\"{CHECKSUM_KEY}\":\"");
    let pattern = pattern.as_bytes();
    let mut found = header
        .windows(pattern.len())
        .enumerate()
        .filter(|&(i, w)| {
            w == pattern
                && header[..i]
                    .iter()
                    .rev()
                    .take_while(|&&b| b == b'\\')
                    .count()
                    % 2
                    == 0
        })
        .map(|(i, _)| 8 + i + pattern.len());
    let (Some(at), None) = (found.next(), found.next()) else {
        return Err(malformed(
            "is not written as `\"exactgrad.sha256\":\"` once in the header",
        ));
    };
    if at + 64 >= n || bytes[at + 64] != b'"' {
        return Err(malformed("is not 64 characters long"));
    }
    Ok(at)
}

/// Checks `bytes` against the digest `stored` (the metadata value of [`CHECKSUM_KEY`]).
fn verify_checksum(bytes: &[u8], stored: &str) -> Result<()> {
    let at = checksum_position(bytes)?;
    let digits = &bytes[at..at + 64];
    if !digits
        .iter()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
        || digits != stored.as_bytes()
    {
        return Err(file_error(format!(
            "the digest `{CHECKSUM_KEY}` = `{stored}` is not 64 lowercase hex digits"
        )));
    }
    let mut h = Sha256::new();
    h.update(&bytes[..at]);
    h.update(&[b'0'; 64]);
    h.update(&bytes[at + 64..]);
    let computed = hex(&h.finish());
    if computed != stored {
        return Err(Error::Data(DataError::DigestMismatch {
            format: "safetensors",
            algorithm: "SHA-256",
            stored: stored.to_string(),
            computed,
        }));
    }
    Ok(())
}
