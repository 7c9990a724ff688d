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
}

/// Copies the values of every parameter and buffer of `module` from the float tensor
/// named `prefix` + its `state_dict` name (PyTorch's `load_state_dict(strict=True)`
/// for the module's entries; other tensors in the file are ignored).
///
/// Fails, before changing anything, when an entry is missing or has another shape.
pub fn load_state_dict<B: Backend, M: Module<B> + ?Sized>(
    module: &M,
    file: &TensorFile,
    prefix: &str,
) -> Result<()> {
    let mut entries = module.named_parameters();
    entries.extend(module.named_buffers());
    let mut values = Vec::with_capacity(entries.len());
    for (name, t) in &entries {
        let key = format!("{prefix}{name}");
        let (shape, v) = file.floats(&key).map_err(|_| {
            Error::invalid(
                "load_state_dict",
                "state_dict",
                format!("no entry `{key}` for `{name}` of shape {:?}", t.dims()),
            )
        })?;
        if shape != t.dims() {
            return Err(Error::invalid(
                "load_state_dict",
                "state_dict",
                format!(
                    "entry `{key}` has shape {shape:?}, `{name}` has shape {:?}",
                    t.dims()
                ),
            ));
        }
        values.push(v);
    }
    let backend = match entries.first() {
        Some((_, t)) => t.backend().clone(),
        None => return Ok(()),
    };
    let _guard = no_grad();
    for ((_, t), v) in entries.iter().zip(values) {
        t.copy_(&Tensor::from_slice(&backend, v, t.dims())?)?;
    }
    Ok(())
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
        assert_eq!(f.tensor(&ScalarRefBackend, "b").unwrap().to_vec().unwrap(), [5.0]);
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
        assert!(err.to_string().contains("no entry `bias`"), "{err}");
        assert_eq!(lin.weight().to_vec().unwrap(), before);
        let wrong = TensorFile::from_bytes(&file(&[
            ("weight", vec![2, 1], vec![7., 8.]),
            ("bias", vec![1], vec![9.]),
        ]))
        .unwrap();
        let err = load_state_dict(&lin, &wrong, "").unwrap_err();
        assert!(err.to_string().contains("has shape [2, 1]"), "{err}");
    }
}
