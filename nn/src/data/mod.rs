//! Data sets and mini-batch loading.
//!
//! [`ClassificationData`] holds rows of f32 features with one class label each;
//! [`BatchSampler`] cuts an epoch into mini-batches of indices, shuffled from a seed;
//! [`DataLoader`] turns those into tensors. [`Digits`] is the shipped 8×8 handwritten
//! digits data set.

mod digits;

pub use digits::{Digits, DigitsSplit};

use crate::error::{Error, Result};
use exactgrad_autograd::Tensor;
use exactgrad_core::{Backend, Philox};

/// A uniformly random permutation of `0..n` by Fisher–Yates: for `i` from `n − 1` down
/// to 1, `j = rng.below(i + 1)` and elements `i` and `j` swap. The draws, and so the
/// permutation, are fixed by the state of `rng`.
pub fn permutation(n: u32, rng: &mut Philox) -> Vec<usize> {
    let mut p: Vec<usize> = (0..n as usize).collect();
    for i in (1..n).rev() {
        let j = rng.below(i + 1) as usize;
        p.swap(i as usize, j);
    }
    p
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

/// One mini-batch: inputs `[batch, features]` and class targets.
#[derive(Clone, Debug)]
pub struct Batch<B: Backend> {
    /// The inputs, one row per example.
    pub inputs: Tensor<B>,
    /// The class index of each row.
    pub targets: Vec<i64>,
}

/// Splits `0..len` into mini-batches of indices, in order or shuffled from a seed
/// (PyTorch's `BatchSampler` over a sequential or random sampler).
///
/// Shuffled, epoch `e` visits the permutation [`permutation`]`(len,
/// Philox::new(mix_seed(seed ^ mix_seed(e))))`, so every epoch has its own order and any
/// epoch can be replayed alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchSampler {
    len: usize,
    batch_size: usize,
    shuffle_seed: Option<u64>,
    drop_last: bool,
}

impl BatchSampler {
    /// Batches of `batch_size` (> 0) over `len` (< 2³²) items, in order, the last one
    /// possibly smaller.
    pub fn new(len: usize, batch_size: usize) -> Result<Self> {
        if batch_size == 0 {
            return Err(Error::invalid(
                "BatchSampler::new",
                "batch_size",
                "must be > 0",
            ));
        }
        if u32::try_from(len).is_err() {
            return Err(Error::invalid(
                "BatchSampler::new",
                "len",
                format!("{len} items exceed the limit of 2^32 - 1"),
            ));
        }
        Ok(Self {
            len,
            batch_size,
            shuffle_seed: None,
            drop_last: false,
        })
    }

    /// Shuffles every epoch from `seed`.
    #[must_use]
    pub fn shuffle(mut self, seed: u64) -> Self {
        self.shuffle_seed = Some(seed);
        self
    }

    /// Drops the last batch when it is smaller than `batch_size`.
    #[must_use]
    pub fn drop_last(mut self, drop_last: bool) -> Self {
        self.drop_last = drop_last;
        self
    }

    /// Number of batches per epoch.
    pub fn num_batches(&self) -> usize {
        if self.drop_last {
            self.len / self.batch_size
        } else {
            self.len.div_ceil(self.batch_size)
        }
    }

    /// The order in which epoch `epoch` visits the items.
    pub fn order(&self, epoch: u64) -> Vec<usize> {
        match self.shuffle_seed {
            None => (0..self.len).collect(),
            Some(seed) => {
                let mut rng = Philox::new(mix_seed(seed ^ mix_seed(epoch)));
                permutation(self.len as u32, &mut rng)
            }
        }
    }

    /// The mini-batches of indices of epoch `epoch` from batch `first` on (the ones a
    /// run resumed at [`LoaderPosition`] `{ epoch, batch: first }` still has to visit).
    pub fn batches_from(&self, epoch: u64, first: usize) -> Vec<Vec<usize>> {
        let mut b = self.batches(epoch);
        b.drain(..first.min(b.len()));
        b
    }

    /// The mini-batches of indices of epoch `epoch`.
    pub fn batches(&self, epoch: u64) -> Vec<Vec<usize>> {
        let order = self.order(epoch);
        order
            .chunks(self.batch_size)
            .filter(|c| !self.drop_last || c.len() == self.batch_size)
            .map(<[usize]>::to_vec)
            .collect()
    }
}

/// Where a run stands in its data: the next batch to train on is batch `batch`
/// (0-based) of epoch `epoch` (0-based). A training checkpoint saves it; a resumed run
/// continues with [`DataLoader::epoch_from`]`(epoch, batch)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LoaderPosition {
    /// The epoch.
    pub epoch: u64,
    /// The next batch within the epoch.
    pub batch: usize,
}

impl LoaderPosition {
    /// The position after the batch at this one, in epochs of `batches_per_epoch`
    /// batches (the next epoch's first batch after the last one).
    pub fn next(self, batches_per_epoch: usize) -> Self {
        if self.batch + 1 >= batches_per_epoch {
            Self {
                epoch: self.epoch + 1,
                batch: 0,
            }
        } else {
            Self {
                epoch: self.epoch,
                batch: self.batch + 1,
            }
        }
    }
}

/// Mini-batches of a [`ClassificationData`] as tensors on a backend.
#[derive(Clone, Debug)]
pub struct DataLoader<'a, B: Backend> {
    data: &'a ClassificationData,
    sampler: BatchSampler,
    backend: B,
}

impl<'a, B: Backend> DataLoader<'a, B> {
    /// Batches of `batch_size` rows of `data`, in order (see [`DataLoader::shuffle`]).
    pub fn new(backend: &B, data: &'a ClassificationData, batch_size: usize) -> Result<Self> {
        Ok(Self {
            data,
            sampler: BatchSampler::new(data.len(), batch_size)?,
            backend: backend.clone(),
        })
    }

    /// Shuffles every epoch from `seed` (see [`BatchSampler`]).
    #[must_use]
    pub fn shuffle(mut self, seed: u64) -> Self {
        self.sampler = self.sampler.shuffle(seed);
        self
    }

    /// Drops the last batch when it is smaller than the batch size.
    #[must_use]
    pub fn drop_last(mut self, drop_last: bool) -> Self {
        self.sampler = self.sampler.drop_last(drop_last);
        self
    }

    /// The sampler that orders the rows.
    pub fn sampler(&self) -> &BatchSampler {
        &self.sampler
    }

    /// Number of batches per epoch.
    pub fn num_batches(&self) -> usize {
        self.sampler.num_batches()
    }

    /// The batches of epoch `epoch` from batch `first` on (0-based), built as they are
    /// consumed: where a run resumed at `LoaderPosition { epoch, batch: first }` goes on.
    pub fn epoch_from(
        &self,
        epoch: u64,
        first: usize,
    ) -> impl Iterator<Item = Result<Batch<B>>> + '_ {
        self.sampler
            .batches_from(epoch, first)
            .into_iter()
            .map(move |idx| self.data.batch(&self.backend, &idx))
    }

    /// The batches of epoch `epoch` (0-based), built as they are consumed.
    pub fn epoch(&self, epoch: u64) -> impl Iterator<Item = Result<Batch<B>>> + '_ {
        self.sampler
            .batches(epoch)
            .into_iter()
            .map(move |idx| self.data.batch(&self.backend, &idx))
    }
}
