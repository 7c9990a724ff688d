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
//! The safetensors reader and writer are in `tensor_file.rs`, the state-dict loader in
//! `load.rs` (which reads a module through its entries, so that the module traits can
//! call it without a circle of imports), the atomic writer and training checkpoints in
//! modules of their own.

mod atomic;
pub(crate) mod load;
mod sha256;
pub(crate) mod tensor_file;
mod training;

pub use crate::error::StateDictMismatch;
pub(crate) use atomic::read_regular;
pub use atomic::write_atomic;
pub use load::{LoadOptions, LoadReport};
pub use tensor_file::{bf16_to_f32, f16_to_f32, Integrity, StateDict, TensorFile, CHECKSUM_KEY};
pub use training::{ResumableLoader, TrainingCheckpoint, TrainingState};

use crate::error::Result;
use crate::module::{Module, ModuleExt};
use exactgrad_core::Backend;

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
    load::load_entries(&|f| module.visit_entries(f), file, prefix, options)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::linear::Linear;
    use crate::Result;
    use exactgrad_backends::ScalarRefBackend;
    use exactgrad_core::Philox;
    use safetensors::tensor::TensorView;
    use safetensors::Dtype;
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

    /// The digest: written by `to_bytes_with_checksum` as docs/checkpoints.md states
    /// (the SHA-256 of the file with its 64 digits as `0`s), verified on reading, and
    /// absent from `to_bytes` (whose bytes stay PyTorch's).
    #[test]
    fn a_digest_covers_every_byte_and_a_file_without_one_loads_unverified() -> Result<()> {
        let mut f = TensorFile::new();
        f.insert_floats("w", &[2, 3], vec![1.0, -2.5, 3.25, 0.0, 7.0, -1e-3])?;
        f.insert_ints("n", &[], vec![3])?;
        f.set_metadata("note", "x\"exactgrad.sha256\":\"");
        let plain = f.to_bytes()?;
        let sealed = f.to_bytes_with_checksum()?;
        let read = TensorFile::from_bytes(&sealed)?;
        assert_eq!(read, f);
        assert_eq!(read.integrity(), Integrity::Verified);
        assert_eq!(
            read.metadata(CHECKSUM_KEY),
            None,
            "the digest is not content"
        );
        let unsealed = TensorFile::from_bytes(&plain)?;
        assert_eq!(unsealed, f);
        assert_eq!(unsealed.integrity(), Integrity::Unverified);
        assert!(plain.len() < sealed.len());

        // The procedure of the docs, by hand: find `"exactgrad.sha256":"` in the header
        // (the escaped copy inside the note does not count), zero the 64 digits, hash.
        let header_end = 8 + u64::from_le_bytes(sealed[..8].try_into().unwrap()) as usize;
        let key = b"\"exactgrad.sha256\":\"";
        let at = (8..header_end)
            .find(|&i| sealed[i..].starts_with(key) && sealed[i - 1] != b'\\')
            .unwrap()
            + key.len();
        let mut zeroed = sealed.clone();
        zeroed[at..at + 64].fill(b'0');
        let mut h = sha256::Sha256::new();
        h.update(&zeroed);
        assert_eq!(sha256::hex(&h.finish()).as_bytes(), &sealed[at..at + 64]);

        // Every bit of the file flipped: refused, or — a flip in the digest's key, which
        // leaves no digest — read unverified with the changed key as an entry of its own
        // (a training checkpoint refuses that entry); never verified.
        for byte in 0..sealed.len() {
            for bit in 0..8 {
                let mut b = sealed.clone();
                b[byte] ^= 1 << bit;
                if let Ok(g) = TensorFile::from_bytes(&b) {
                    assert_eq!(g.integrity(), Integrity::Unverified, "{byte}.{bit}");
                    assert!(
                        g.metadata_entries().any(|(k, _)| k != "note"),
                        "{byte}.{bit}"
                    );
                }
            }
        }
        // The key is reserved; a malformed digest is refused.
        let mut g = f.clone();
        g.set_metadata(CHECKSUM_KEY, "0".repeat(64));
        assert!(g.to_bytes().is_err() && g.to_bytes_with_checksum().is_err());
        let mut upper = sealed.clone();
        upper[at..at + 64].fill(b'A');
        let err = TensorFile::from_bytes(&upper).unwrap_err();
        assert!(err.to_string().contains("hex digits"), "{err}");
        Ok(())
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
