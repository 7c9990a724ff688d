//! Data sets and mini-batch loading.
//!
//! A [`Dataset`] has a length and gives one item per index; [`Collate`] stacks items into
//! a batch of tensors. [`ClassificationData`] (rows of f32 features with one class label
//! each) is one data set, [`TensorDataset`] (arrays sharing their first dimension, such
//! as images `[N, C, H, W]` and `N` labels) another; [`BatchSampler`] cuts an epoch into mini-batches of indices,
//! shuffled from a seed; [`DataLoader`] turns those into batches and keeps its position in
//! the data, which training checkpoints save. [`Digits`] is the shipped 8×8 handwritten
//! digits data set.

mod dataset;
mod digits;
mod loader;
mod tensor_dataset;

pub use dataset::{Collate, Dataset, HostTensor, Labeled};
pub use digits::{Digits, DigitsSplit};
pub use loader::{Batch, BatchSampler, Batches, DataLoader, LoaderPosition, LoaderState};
pub use tensor_dataset::{Columns, TensorDataset};

use crate::error::{Error, Result};
use exactgrad_autograd::Tensor;
use exactgrad_core::{Backend, Philox};

/// A uniformly random permutation of `0..n` by Fisher–Yates: for `i` from `n − 1` down
/// to 1, `j = rng.below(i + 1)` and elements `i` and `j` swap. The draws, and so the
/// permutation, are fixed by the state of `rng`. Fails when the `n` indices cannot be
/// allocated.
pub fn permutation(n: u32, rng: &mut Philox) -> Result<Vec<usize>> {
    let mut p = identity("permutation", n as usize)?;
    for i in (1..n).rev() {
        let j = rng.below(i + 1) as usize;
        p.swap(i as usize, j);
    }
    Ok(p)
}

/// `0..n` in a vector allocated fallibly (`op` names the caller in the error).
fn identity(op: &'static str, n: usize) -> Result<Vec<usize>> {
    Ok(exactgrad_core::backend::try_collect(op, 0..n)?)
}

/// SplitMix64's finaliser: a bijective mixing of 64 bits, used to derive independent
/// seeds from (seed, epoch).
pub fn mix_seed(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// An in-memory classification data set: `len` rows of `feature_len` f32 features and a
/// class label in `[0, classes)` per row.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassificationData {
    features: Vec<f32>,
    labels: Vec<i64>,
    feature_len: usize,
    classes: usize,
}

impl ClassificationData {
    /// A data set from row-major features and one label per row.
    pub fn new(
        features: Vec<f32>,
        labels: Vec<i64>,
        feature_len: usize,
        classes: usize,
    ) -> Result<Self> {
        let op = "ClassificationData::new";
        // Checked: a product that wraps must not match the number of values given.
        let expected = labels.len().checked_mul(feature_len);
        if expected != Some(features.len()) {
            return Err(Error::invalid(
                op,
                "features",
                format!(
                    "{} values for {} labels of {feature_len} features ({} expected)",
                    features.len(),
                    labels.len(),
                    expected.map_or_else(|| "more than usize::MAX".to_string(), |n| n.to_string())
                ),
            ));
        }
        if let Some((i, &l)) = labels
            .iter()
            .enumerate()
            .find(|(_, &l)| l < 0 || l as u64 >= classes as u64)
        {
            return Err(Error::invalid(
                op,
                "labels",
                format!("label {l} of row {i} is outside [0, {classes})"),
            ));
        }
        Ok(Self {
            features,
            labels,
            feature_len,
            classes,
        })
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Features per row.
    pub fn feature_len(&self) -> usize {
        self.feature_len
    }

    /// Number of classes.
    pub fn classes(&self) -> usize {
        self.classes
    }

    /// All features, row-major.
    pub fn features(&self) -> &[f32] {
        &self.features
    }

    /// All labels.
    pub fn labels(&self) -> &[i64] {
        &self.labels
    }

    /// The features of row `index` (`None` past the last row).
    pub fn row(&self, index: usize) -> Option<&[f32]> {
        if index >= self.len() {
            return None;
        }
        // index < len, so index · d ≤ features.len() does not overflow.
        let d = self.feature_len;
        self.features.get(index * d..(index + 1) * d)
    }

    /// The rows at `indices`, in that order, as a new data set.
    pub fn subset(&self, indices: &[usize]) -> Result<Self> {
        let (features, labels) = self.gather("ClassificationData::subset", indices)?;
        Ok(Self {
            features,
            labels,
            feature_len: self.feature_len,
            classes: self.classes,
        })
    }

    /// All features as a `[len, feature_len]` tensor and the labels.
    pub fn to_tensors<B: Backend>(&self, backend: &B) -> Result<(Tensor<B>, Vec<i64>)> {
        let x = Tensor::from_slice(backend, &self.features, [self.len(), self.feature_len])?;
        Ok((x, self.labels.clone()))
    }

    /// The rows at `indices` as a `[indices.len(), feature_len]` tensor and their labels.
    pub fn batch<B: Backend>(&self, backend: &B, indices: &[usize]) -> Result<Batch<B>> {
        let (features, targets) = self.gather("ClassificationData::batch", indices)?;
        let inputs = Tensor::from_vec(backend, features, [indices.len(), self.feature_len])?;
        Ok(Batch { inputs, targets })
    }

    fn gather(&self, op: &'static str, indices: &[usize]) -> Result<(Vec<f32>, Vec<i64>)> {
        let d = self.feature_len;
        let n = exactgrad_core::backend::checked_mul(op, "indices", indices.len(), d)?;
        let mut features = exactgrad_core::backend::try_vec_with_capacity(op, n)?;
        let mut labels = exactgrad_core::backend::try_vec_with_capacity(op, indices.len())?;
        for &i in indices {
            if i >= self.len() {
                return Err(Error::invalid(
                    op,
                    "indices",
                    format!("row {i} is out of range for {} rows", self.len()),
                ));
            }
            features.extend_from_slice(&self.features[i * d..(i + 1) * d]);
            labels.push(self.labels[i]);
        }
        Ok((features, labels))
    }
}
