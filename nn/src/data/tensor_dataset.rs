//! [`TensorDataset`]: a data set made of arrays that share their first dimension
//! (PyTorch's `torch.utils.data.TensorDataset`).

use super::dataset::{Collate, Dataset, HostTensor};
use super::ClassificationData;
use crate::error::{Error, Result};
use exactgrad_autograd::Tensor;
use exactgrad_core::Backend;

/// The arrays of a [`TensorDataset`]: each indexes its examples along its first
/// dimension. Implemented for a [`HostTensor`] (item: the row, a [`HostTensor`] of the
/// remaining dimensions), a `Vec<i64>` of class labels (item: one `i64`), a
/// `Vec<HostTensor>` (item: one row of each) and pairs and triples of columns (item: the
/// tuple of their items).
pub trait Columns {
    /// One example: a row of every array.
    type Item;

    /// The number of rows; fails when an array has no first dimension, when there is
    /// no array, or when the arrays' first dimensions differ. `at` is the position of
    /// the first array, for the messages.
    fn rows(&self, at: usize) -> Result<usize>;

    /// The number of arrays.
    fn count(&self) -> usize;

    /// Row `index` of every array (`index < rows`, which [`TensorDataset::get`] checks).
    fn row(&self, index: usize) -> Self::Item;
}

const NEW: &str = "TensorDataset::new";

impl Columns for HostTensor {
    type Item = HostTensor;

    fn rows(&self, at: usize) -> Result<usize> {
        let numel = exactgrad_core::Shape::from(self.shape.clone()).checked_numel();
        if numel != Some(self.values.len()) {
            return Err(Error::invalid(
                NEW,
                "tensors",
                format!(
                    "tensor {at} of shape {:?} holds {} values",
                    self.shape,
                    self.values.len()
                ),
            ));
        }
        match self.shape.first() {
            Some(&n) => Ok(n),
            None => Err(Error::invalid(
                NEW,
                "tensors",
                format!("tensor {at} has shape [] and no first dimension to index examples by"),
            )),
        }
    }

    fn count(&self) -> usize {
        1
    }

    fn row(&self, index: usize) -> HostTensor {
        let per: usize = self.shape[1..].iter().product();
        HostTensor {
            shape: self.shape[1..].to_vec(),
            values: self.values[index * per..(index + 1) * per].to_vec(),
        }
    }
}

impl Columns for Vec<i64> {
    type Item = i64;

    fn rows(&self, _: usize) -> Result<usize> {
        Ok(self.len())
    }

    fn count(&self) -> usize {
        1
    }

    fn row(&self, index: usize) -> i64 {
        self[index]
    }
}

impl Columns for Vec<HostTensor> {
    type Item = Vec<HostTensor>;

    fn rows(&self, at: usize) -> Result<usize> {
        let Some(first) = self.first() else {
            return Err(Error::invalid(
                NEW,
                "tensors",
                "needs at least one tensor (got an empty list)",
            ));
        };
        let n = first.rows(at)?;
        for (k, t) in self.iter().enumerate().skip(1) {
            same_rows(at, n, at + k, t.rows(at + k)?)?;
        }
        Ok(n)
    }

    fn count(&self) -> usize {
        self.len()
    }

    fn row(&self, index: usize) -> Vec<HostTensor> {
        self.iter().map(|t| t.row(index)).collect()
    }
}

/// Fails unless array `k` has as many rows (`m`) as array `first` (`n`).
fn same_rows(first: usize, n: usize, k: usize, m: usize) -> Result<()> {
    if m == n {
        Ok(())
    } else {
        Err(Error::invalid(
            NEW,
            "tensors",
            format!(
                "tensor {k} has first dimension {m}, tensor {first} has {n}: every tensor \
                 must have one row per example"
            ),
        ))
    }
}

impl<X: Columns, Y: Columns> Columns for (X, Y) {
    type Item = (X::Item, Y::Item);

    fn rows(&self, at: usize) -> Result<usize> {
        let n = self.0.rows(at)?;
        let k = at + self.0.count();
        same_rows(at, n, k, self.1.rows(k)?)?;
        Ok(n)
    }

    fn count(&self) -> usize {
        self.0.count() + self.1.count()
    }

    fn row(&self, index: usize) -> Self::Item {
        (self.0.row(index), self.1.row(index))
    }
}

impl<X: Columns, Y: Columns, Z: Columns> Columns for (X, Y, Z) {
    type Item = (X::Item, Y::Item, Z::Item);

    fn rows(&self, at: usize) -> Result<usize> {
        let n = (&self.0, &self.1).rows(at)?;
        let k = at + self.0.count() + self.1.count();
        same_rows(at, n, k, self.2.rows(k)?)?;
        Ok(n)
    }

    fn count(&self) -> usize {
        self.0.count() + self.1.count() + self.2.count()
    }

    fn row(&self, index: usize) -> Self::Item {
        (self.0.row(index), self.1.row(index), self.2.row(index))
    }
}

impl<C: Columns> Columns for &C {
    type Item = C::Item;

    fn rows(&self, at: usize) -> Result<usize> {
        (**self).rows(at)
    }

    fn count(&self) -> usize {
        (**self).count()
    }

    fn row(&self, index: usize) -> C::Item {
        (**self).row(index)
    }
}

/// A data set over arrays that share their first dimension: item `i` is row `i` of each
/// (PyTorch's `TensorDataset`). The arrays are [`Columns`]: a [`HostTensor`] `[N, …]`, a
/// `Vec<i64>` of `N` labels, a `Vec<HostTensor>`, or a pair or triple of those; a
/// [`DataLoader`](super::DataLoader) stacks the items with [`Collate`](super::Collate), so
/// a `(HostTensor, Vec<i64>)` data set gives `(Tensor<B> [batch, …], Vec<i64>)` batches.
///
/// ```
/// use exactgrad_nn::data::{DataLoader, HostTensor, TensorDataset};
/// # fn main() -> exactgrad_nn::Result<()> {
/// let b = exactgrad_backends::ScalarRefBackend;
/// let images = HostTensor::new((0..24).map(|v| v as f32).collect(), [3, 2, 2, 2])?;
/// let data = TensorDataset::new((images, vec![0i64, 1, 0]))?;
/// let loader = DataLoader::new(&b, &data, 2)?;
/// let (x, y) = loader.iter().next().unwrap()?;
/// assert_eq!((x.dims(), y), (&[2, 2, 2, 2][..], vec![0, 1]));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct TensorDataset<C> {
    columns: C,
    len: usize,
}

impl<C: Columns> TensorDataset<C> {
    /// A data set over `columns`; fails when there is no array, an array has no first
    /// dimension (shape `[]`), or the first dimensions differ (the error names both
    /// arrays by position and their sizes).
    pub fn new(columns: C) -> Result<Self> {
        let len = columns.rows(0)?;
        Ok(Self { columns, len })
    }

    /// The arrays.
    pub fn columns(&self) -> &C {
        &self.columns
    }

    /// The arrays, giving the data set up.
    pub fn into_columns(self) -> C {
        self.columns
    }

    /// Every row as one batch on `backend`, stacked as the [`DataLoader`] stacks a batch
    /// (the same tensors as an unshuffled loader with `batch_size = len()`): for a
    /// [`classification`](TensorDataset::classification) data set, the `[len, …item_shape]`
    /// inputs and the labels. The evaluation of a test split in one call:
    /// `TensorDataset::classification(&split.test, &[1, 8, 8])?.full_batch(&b)?`.
    ///
    /// Fails when the batch cannot be allocated.
    ///
    /// [`DataLoader`]: crate::data::DataLoader
    pub fn full_batch<B: Backend>(&self, backend: &B) -> Result<<C::Item as Collate<B>>::Batch>
    where
        C::Item: Collate<B>,
    {
        let op = "TensorDataset::full_batch";
        let mut items = exactgrad_core::backend::try_vec_with_capacity(op, self.len)?;
        for i in 0..self.len {
            items.push(self.columns.row(i));
        }
        <C::Item as Collate<B>>::collate(backend, items)
    }
}

impl TensorDataset<(HostTensor, Vec<i64>)> {
    /// The rows of `data` as inputs of shape `item_shape` (whose product is the feature
    /// length: `[1, 8, 8]` makes the digits images) and their labels; fails when the
    /// shape does not hold one row.
    pub fn classification(data: &ClassificationData, item_shape: &[usize]) -> Result<Self> {
        let per = exactgrad_core::Shape::from(item_shape.to_vec()).checked_numel();
        if per != Some(data.feature_len()) {
            return Err(Error::invalid(
                "TensorDataset::classification",
                "item_shape",
                format!(
                    "{item_shape:?} does not hold a row of {} features",
                    data.feature_len()
                ),
            ));
        }
        let mut shape = vec![data.len()];
        shape.extend_from_slice(item_shape);
        let inputs = HostTensor::new(data.features().to_vec(), shape)?;
        Self::new((inputs, data.labels().to_vec()))
    }
}

impl<C: Columns> Dataset for TensorDataset<C> {
    type Item = C::Item;

    fn len(&self) -> usize {
        self.len
    }

    fn get(&self, index: usize) -> Result<C::Item> {
        if index >= self.len {
            return Err(Error::invalid(
                "TensorDataset::get",
                "index",
                format!("row {index} is out of range for {} rows", self.len),
            ));
        }
        Ok(self.columns.row(index))
    }
}

impl HostTensor {
    /// A copy on the host of `tensor` (its values in row-major order and its shape), for
    /// a [`TensorDataset`] built from tensors on a backend.
    pub fn from_tensor<B: Backend>(tensor: &Tensor<B>) -> Result<Self> {
        Ok(Self {
            shape: tensor.dims().to_vec(),
            values: tensor.to_vec()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{Collate, DataLoader, Digits};
    use exactgrad_backends::ScalarRefBackend;

    fn counting(shape: &[usize]) -> HostTensor {
        let n = shape.iter().product::<usize>();
        HostTensor::new((0..n).map(|v| v as f32).collect(), shape).unwrap()
    }

    #[test]
    fn full_batch_is_the_test_split_in_one_call() -> Result<()> {
        let b = ScalarRefBackend;
        let split = Digits::bundled().split()?;
        let (images, labels) =
            TensorDataset::classification(&split.test, &[1, 8, 8])?.full_batch(&b)?;
        // The same as the hand-made path: all features, reshaped, and the labels.
        let (flat, want_labels) = split.test.to_tensors(&b)?;
        assert_eq!(images.dims(), &[split.test.len(), 1, 8, 8]);
        assert_eq!(images.to_vec()?, flat.to_vec()?);
        assert_eq!(labels, want_labels);
        // And the same as a loader's single batch over the whole set.
        let data = TensorDataset::classification(&split.test, &[1, 8, 8])?;
        let loader = DataLoader::new(&b, &data, data.len())?;
        let (x, y) = loader.iter().next().unwrap()?;
        assert_eq!((x.to_vec()?, y), (images.to_vec()?, labels));
        // Other columns stack the same way.
        let pair = TensorDataset::new((counting(&[3, 2]), vec![4i64, 5, 6]))?;
        let (x, y) = pair.full_batch(&b)?;
        assert_eq!((x.dims(), y), (&[3, 2][..], vec![4, 5, 6]));
        Ok(())
    }

    #[test]
    fn items_are_rows_of_every_array() -> Result<()> {
        let data = TensorDataset::new((counting(&[4, 3]), vec![7i64, 8, 9, 10]))?;
        assert_eq!(data.len(), 4);
        let (x, y) = data.get(2)?;
        assert_eq!((x.shape, x.values, y), (vec![3], vec![6.0, 7.0, 8.0], 9));
        // A one-dimensional tensor gives rows of shape [].
        let flat = TensorDataset::new(counting(&[5]))?;
        assert_eq!(flat.get(4)?, HostTensor::new(vec![4.0], [])?);
        // Any number of float tensors, and triples.
        let many = TensorDataset::new(vec![counting(&[2, 2]), counting(&[2])])?;
        assert_eq!(many.get(1)?[1].values, [1.0]);
        let triple = TensorDataset::new((counting(&[2, 1]), counting(&[2, 2]), vec![0i64, 1]))?;
        assert_eq!(triple.get(1)?.1.values, [2.0, 3.0]);
        assert_eq!(triple.get(1)?.2, 1);
        Ok(())
    }

    #[test]
    fn the_loader_stacks_batches_in_order_and_shuffled() -> Result<()> {
        let b = ScalarRefBackend;
        let data = TensorDataset::new((counting(&[5, 2, 3]), vec![0i64, 1, 2, 3, 4]))?;
        let loader = DataLoader::new(&b, &data, 2)?;
        let batches: Vec<_> = loader.iter().collect::<Result<_>>()?;
        assert_eq!(batches.len(), 3);
        assert_eq!(batches[0].0.dims(), [2, 2, 3]);
        assert_eq!(batches[2].0.dims(), [1, 2, 3]);
        assert_eq!(batches[1].0.to_vec()?, counting(&[5, 2, 3]).values[12..24]);
        assert_eq!(batches[2].1, [4]);
        // Shuffled: every row once, each input still with its label.
        let shuffled = DataLoader::new(&b, &data, 2)?.shuffle(3).drop_last(true);
        let mut seen = Vec::new();
        for batch in &shuffled {
            let (x, y) = batch?;
            let x = x.to_vec()?;
            for (i, &label) in y.iter().enumerate() {
                assert_eq!(x[i * 6], label as f32 * 6.0);
                seen.push(label);
            }
        }
        assert_eq!(seen.len(), 4);
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 4);
        // A list of tensors collates into a list of batches.
        let many = TensorDataset::new(vec![counting(&[3, 2]), counting(&[3])])?;
        let batch = <Vec<HostTensor>>::collate(&b, vec![many.get(0)?, many.get(2)?])?;
        assert_eq!(batch.len(), 2);
        assert_eq!(batch[0].to_vec()?, [0.0, 1.0, 4.0, 5.0]);
        assert_eq!(batch[1].dims(), [2]);
        Ok(())
    }

    #[test]
    fn digits_as_images() -> Result<()> {
        let split = Digits::bundled().split()?;
        let data = TensorDataset::classification(&split.test, &[1, 8, 8])?;
        assert_eq!(data.len(), split.test.len());
        let (x, y) = data.get(3)?;
        assert_eq!(x.shape, [1, 8, 8]);
        assert_eq!(x.values, split.test.row(3).unwrap());
        assert_eq!(y, split.test.labels()[3]);
        let err = TensorDataset::classification(&split.test, &[8, 9]).unwrap_err();
        assert!(
            err.to_string().contains("does not hold a row of 64"),
            "{err}"
        );
        Ok(())
    }

    #[test]
    fn bad_arrays_are_refused_with_their_positions() {
        let err = TensorDataset::new((counting(&[4, 3]), vec![1i64, 2, 3])).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("tensor 1 has first dimension 3, tensor 0 has 4"),
            "{msg}"
        );
        let err = TensorDataset::new((counting(&[2]), counting(&[2]), counting(&[3, 1])))
            .unwrap_err()
            .to_string();
        assert!(err.contains("tensor 2 has first dimension 3"), "{err}");
        let err = TensorDataset::new(vec![counting(&[2]), counting(&[1, 2])])
            .unwrap_err()
            .to_string();
        assert!(err.contains("tensor 1 has first dimension 1"), "{err}");
        // No array at all, and an array without a first dimension.
        let err = TensorDataset::new(Vec::<HostTensor>::new())
            .unwrap_err()
            .to_string();
        assert!(err.contains("at least one tensor"), "{err}");
        let err = TensorDataset::new((vec![1i64], counting(&[])))
            .unwrap_err()
            .to_string();
        assert!(err.contains("tensor 1 has shape []"), "{err}");
        // A tensor whose values do not fill its shape (the fields are public).
        let broken = HostTensor {
            shape: vec![2, 2],
            values: vec![0.0; 3],
        };
        let err = TensorDataset::new(broken).unwrap_err().to_string();
        assert!(err.contains("holds 3 values"), "{err}");
        // Out-of-range index.
        let data = TensorDataset::new(vec![0i64; 3]).unwrap();
        let err = data.get(3).unwrap_err().to_string();
        assert!(err.contains("row 3 is out of range for 3 rows"), "{err}");
        // Zero rows is an empty data set, as in PyTorch; its loader has no batches.
        let empty = TensorDataset::new((counting(&[0, 2]), Vec::<i64>::new())).unwrap();
        assert!(empty.is_empty());
        let loader = DataLoader::new(&ScalarRefBackend, &empty, 4).unwrap();
        assert_eq!(loader.iter().count(), 0);
    }

    #[test]
    fn a_tensor_comes_to_the_host() -> Result<()> {
        let b = ScalarRefBackend;
        let t = Tensor::from_vec(&b, vec![1.0, 2.0, 3.0, 4.0], [2, 2])?;
        let h = HostTensor::from_tensor(&t)?;
        assert_eq!(
            (h.shape.as_slice(), h.values.as_slice()),
            (&[2, 2][..], &[1.0, 2.0, 3.0, 4.0][..])
        );
        Ok(())
    }
}
