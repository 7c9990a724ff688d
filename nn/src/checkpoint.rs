//! Reading checkpoints: [`TensorFile`] decodes a safetensors file (the format of
//! PyTorch's `safetensors.torch.save_file`), and [`load_state_dict`] copies its tensors
//! into a module's parameters and buffers by their `state_dict` names.
//!
//! Both are also re-exported from [`crate::reference`], where they first lived.

use crate::error::{DataError, Error, Result};
use crate::module::Module;
use exactgrad_autograd::{no_grad, Tensor};
use exactgrad_core::Backend;
use safetensors::{Dtype, SafeTensors};
use std::collections::BTreeMap;

/// The tensors and metadata of a safetensors file, decoded: `F32` tensors as `f32`,
/// integer (`I64`, `I32`, `U8`) and `BOOL` tensors as `i64`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TensorFile {
    floats: BTreeMap<String, (Vec<usize>, Vec<f32>)>,
    ints: BTreeMap<String, (Vec<usize>, Vec<i64>)>,
    /// The element type of every tensor as stored in the file.
    dtypes: BTreeMap<String, Dtype>,
    metadata: BTreeMap<String, String>,
}

fn file_error(message: impl Into<String>) -> Error {
    Error::Data(DataError::BadHeader {
        format: "safetensors",
        message: message.into(),
    })
}

impl TensorFile {
    /// Decodes the bytes of a safetensors file.
    ///
    /// Fails when the bytes are not a valid safetensors file or hold a tensor of
    /// another element type.
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
            out.dtypes.insert(name.clone(), view.dtype());
            match view.dtype() {
                Dtype::F32 => {
                    let v = data
                        .chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .collect();
                    out.floats.insert(name, (shape, v));
                }
                Dtype::I64 => {
                    let v = data
                        .chunks_exact(8)
                        .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
                        .collect();
                    out.ints.insert(name, (shape, v));
                }
                Dtype::I32 => {
                    let v = data
                        .chunks_exact(4)
                        .map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                        .collect();
                    out.ints.insert(name, (shape, v));
                }
                Dtype::U8 | Dtype::BOOL => {
                    let v = data.iter().map(|&b| i64::from(b)).collect();
                    out.ints.insert(name, (shape, v));
                }
                other => {
                    return Err(file_error(format!(
                        "tensor `{name}` has element type {other:?}; F32, I64, I32, U8 and BOOL are read"
                    )))
                }
            }
        }
        Ok(out)
    }

    /// The names of all tensors, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self
            .floats
            .keys()
            .chain(self.ints.keys())
            .map(String::as_str)
            .collect();
        v.sort_unstable();
        v
    }

    /// A `__metadata__` entry.
    pub fn metadata(&self, key: &str) -> Option<&str> {
        self.metadata.get(key).map(String::as_str)
    }

    /// A `__metadata__` entry parsed as an unsigned integer.
    pub fn metadata_usize(&self, key: &str) -> Result<usize> {
        let v = self
            .metadata(key)
            .ok_or_else(|| file_error(format!("metadata entry `{key}` is missing")))?;
        v.parse().map_err(|_| {
            file_error(format!(
                "metadata entry `{key}` = `{v}` is not an unsigned integer"
            ))
        })
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

    /// The element type of tensor `name` as stored in the file (`F32`, `I64`, …).
    pub fn dtype(&self, name: &str) -> Option<String> {
        self.dtypes.get(name).map(|d| format!("{d:?}"))
    }
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
    /// Entries of an element type that is not a floating-point tensor: name and type.
    pub wrong_dtype: Vec<(String, String)>,
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
        for (n, d) in &self.wrong_dtype {
            parts.push(format!(
                "entry `{n}` has element type {d}, not a floating-point type"
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

/// Copies the values of every parameter and buffer of `module` from the float tensor
/// named `prefix` + its `state_dict` name, strictly ([`load_state_dict_with`] with the
/// default [`LoadOptions`]): PyTorch's `load_state_dict(strict=True)` over the entries
/// under `prefix` (tensors outside the prefix are other parts of the file and ignored).
///
/// Fails, before changing anything, when an entry is missing, the file has an entry
/// under the prefix that the module lacks, an entry has another shape or a
/// non-floating-point element type, or holds NaN or ±∞; the error names every one.
pub fn load_state_dict<B: Backend, M: Module<B> + ?Sized>(
    module: &M,
    file: &TensorFile,
    prefix: &str,
) -> Result<()> {
    load_state_dict_with(module, file, prefix, LoadOptions::default()).map(|_| ())
}

/// [`load_state_dict`] with explicit [`LoadOptions`]; returns what was not loaded.
///
/// Every problem is collected before anything changes; when any is fatal (a missing or
/// unexpected entry in strict mode, a wrong shape or element type, a non-finite value
/// that is not allowed) the module is left untouched and the error lists them all.
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
    for (name, t) in &entries {
        let key = format!("{prefix}{name}");
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
                Some(d) => problems.wrong_dtype.push((key, d)),
                None => report.missing.push(key),
            },
        }
    }
    let known: std::collections::BTreeSet<String> = entries
        .iter()
        .map(|(n, _)| format!("{prefix}{n}"))
        .collect();
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
