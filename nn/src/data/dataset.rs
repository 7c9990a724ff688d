//! The [`Dataset`] trait and the [`Collate`] rule that stacks items into batches.

use super::loader::Batch;
use super::ClassificationData;
use crate::error::{Error, Result};
use exactgrad_autograd::trace::RecordBuilder;
use exactgrad_autograd::Tensor;
use exactgrad_core::Backend;
use std::sync::Arc;

/// A data set: a length and one item per index (PyTorch's map-style `Dataset`).
///
/// The [`DataLoader`](super::DataLoader) asks for the items of a mini-batch and stacks them
/// with [`Collate`]; an item is anything that collates — a [`HostTensor`] (stacked into a
/// `[B, …]` tensor), an `i64` class label (into a `Vec<i64>`), a [`Labeled`] pair (into a
/// [`Batch`]), or a tuple of those.
pub trait Dataset {
    /// One example.
    type Item;

    /// Number of items.
    fn len(&self) -> usize;

    /// Whether there are no items.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The item at `index` (`< len()`); fails when the index is out of range or the item
    /// cannot be read.
    fn get(&self, index: usize) -> Result<Self::Item>;
}

impl<D: Dataset + ?Sized> Dataset for &D {
    type Item = D::Item;
    fn len(&self) -> usize {
        (**self).len()
    }
    fn get(&self, index: usize) -> Result<D::Item> {
        (**self).get(index)
    }
}

impl<D: Dataset + ?Sized> Dataset for Arc<D> {
    type Item = D::Item;
    fn len(&self) -> usize {
        (**self).len()
    }
    fn get(&self, index: usize) -> Result<D::Item> {
        (**self).get(index)
    }
}

/// How items of a data set become one batch on a backend (PyTorch's `default_collate`).
pub trait Collate<B: Backend>: Sized {
    /// The batch.
    type Batch;

    /// Stacks `items` (in order) into a batch. Fails when they do not fit together
    /// (different shapes) or a tensor cannot be allocated.
    fn collate(backend: &B, items: Vec<Self>) -> Result<Self::Batch>;

    /// Adds the batch's tensors and integer data, named from `name`, to the trace record
    /// of the batch (`docs/debugging.md`), so that a trace tells batches apart by their
    /// contents and the records that read them name the batch. The default adds nothing:
    /// the record of such a batch holds only the loader's position.
    fn trace_batch(batch: &Self::Batch, name: &str, record: &mut RecordBuilder) {
        let _ = (batch, name, record);
    }
}

/// An f32 tensor on the host: the values (row-major) and the shape of one example.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    /// The shape.
    pub shape: Vec<usize>,
    /// The values, row-major; as many as the shape's product.
    pub values: Vec<f32>,
}

impl HostTensor {
    /// A tensor of `shape` holding `values`; fails when the counts differ.
    pub fn new(values: Vec<f32>, shape: impl Into<Vec<usize>>) -> Result<Self> {
        let shape = shape.into();
        let n = shape
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .ok_or_else(|| {
                Error::invalid("HostTensor::new", "shape", format!("{shape:?} overflows"))
            })?;
        if n != values.len() {
            return Err(Error::invalid(
                "HostTensor::new",
                "values",
                format!("{} values for shape {shape:?} ({n} expected)", values.len()),
            ));
        }
        Ok(Self { shape, values })
    }
}

impl<B: Backend> Collate<B> for HostTensor {
    /// `[items, …shape]`.
    type Batch = Tensor<B>;

    fn collate(backend: &B, items: Vec<Self>) -> Result<Tensor<B>> {
        let shape = items.first().map(|t| t.shape.clone()).unwrap_or_default();
        // The fields are public: a shape whose product overflows is an error, not a
        // wrapped count.
        let per = exactgrad_core::Shape::from(shape.clone())
            .checked_numel()
            .ok_or_else(|| {
                Error::invalid(
                    "collate",
                    "items",
                    format!("item 0 has shape {shape:?}, whose element count overflows"),
                )
            })?;
        let total = per.checked_mul(items.len()).ok_or_else(|| {
            Error::invalid("collate", "items", "the batch's element count overflows")
        })?;
        let mut values = Vec::new();
        values.try_reserve_exact(total).map_err(|_| {
            Error::invalid(
                "collate",
                "items",
                format!("cannot allocate a batch of {total} values"),
            )
        })?;
        for (i, t) in items.iter().enumerate() {
            if t.shape != shape || t.values.len() != per {
                return Err(Error::invalid(
                    "collate",
                    "items",
                    format!(
                        "item {i} has shape {:?}, item 0 has shape {shape:?}",
                        t.shape
                    ),
                ));
            }
            values.extend_from_slice(&t.values);
        }
        let mut dims = Vec::with_capacity(shape.len() + 1);
        dims.push(items.len());
        dims.extend_from_slice(&shape);
        Tensor::from_vec(backend, values, dims)
    }

    fn trace_batch(batch: &Tensor<B>, name: &str, record: &mut RecordBuilder) {
        record.output(name, batch);
    }
}

impl<B: Backend> Collate<B> for i64 {
    /// The labels in order.
    type Batch = Vec<i64>;

    fn collate(_: &B, items: Vec<Self>) -> Result<Vec<i64>> {
        Ok(items)
    }

    fn trace_batch(batch: &Vec<i64>, name: &str, record: &mut RecordBuilder) {
        record.ints(name, &[batch.len()], batch, true);
    }
}

impl<B: Backend> Collate<B> for Vec<i64> {
    /// The sequences concatenated (row-major `[items, length]`); all have one length.
    type Batch = Vec<i64>;

    fn collate(_: &B, items: Vec<Self>) -> Result<Vec<i64>> {
        let len = items.first().map_or(0, Vec::len);
        if let Some((i, s)) = items.iter().enumerate().find(|(_, s)| s.len() != len) {
            return Err(Error::invalid(
                "collate",
                "items",
                format!("item {i} has {} values, item 0 has {len}", s.len()),
            ));
        }
        Ok(items.concat())
    }

    fn trace_batch(batch: &Vec<i64>, name: &str, record: &mut RecordBuilder) {
        record.ints(name, &[batch.len()], batch, true);
    }
}

impl<B: Backend, X: Collate<B>, Y: Collate<B>> Collate<B> for (X, Y) {
    /// Each part collated.
    type Batch = (X::Batch, Y::Batch);

    fn collate(backend: &B, items: Vec<Self>) -> Result<Self::Batch> {
        let (x, y): (Vec<X>, Vec<Y>) = items.into_iter().unzip();
        Ok((X::collate(backend, x)?, Y::collate(backend, y)?))
    }

    fn trace_batch(batch: &Self::Batch, name: &str, record: &mut RecordBuilder) {
        X::trace_batch(&batch.0, &format!("{name}.0"), record);
        Y::trace_batch(&batch.1, &format!("{name}.1"), record);
    }
}

impl<B: Backend, X: Collate<B>, Y: Collate<B>, Z: Collate<B>> Collate<B> for (X, Y, Z) {
    /// Each part collated.
    type Batch = (X::Batch, Y::Batch, Z::Batch);

    fn collate(backend: &B, items: Vec<Self>) -> Result<Self::Batch> {
        let mut x = Vec::with_capacity(items.len());
        let mut y = Vec::with_capacity(items.len());
        let mut z = Vec::with_capacity(items.len());
        for (a, b, c) in items {
            x.push(a);
            y.push(b);
            z.push(c);
        }
        Ok((
            X::collate(backend, x)?,
            Y::collate(backend, y)?,
            Z::collate(backend, z)?,
        ))
    }

    fn trace_batch(batch: &Self::Batch, name: &str, record: &mut RecordBuilder) {
        X::trace_batch(&batch.0, &format!("{name}.0"), record);
        Y::trace_batch(&batch.1, &format!("{name}.1"), record);
        Z::trace_batch(&batch.2, &format!("{name}.2"), record);
    }
}

impl<B: Backend> Collate<B> for Vec<HostTensor> {
    /// The `k`-th tensors of the items stacked into the `k`-th batch tensor; all items
    /// have as many tensors.
    type Batch = Vec<Tensor<B>>;

    fn collate(backend: &B, items: Vec<Self>) -> Result<Vec<Tensor<B>>> {
        let count = items.first().map_or(0, Vec::len);
        if let Some((i, item)) = items.iter().enumerate().find(|(_, t)| t.len() != count) {
            return Err(Error::invalid(
                "collate",
                "items",
                format!("item {i} has {} tensors, item 0 has {count}", item.len()),
            ));
        }
        let mut columns: Vec<Vec<HostTensor>> = (0..count)
            .map(|_| Vec::with_capacity(items.len()))
            .collect();
        for item in items {
            for (column, t) in columns.iter_mut().zip(item) {
                column.push(t);
            }
        }
        columns
            .into_iter()
            .map(|c| HostTensor::collate(backend, c))
            .collect()
    }

    fn trace_batch(batch: &Vec<Tensor<B>>, name: &str, record: &mut RecordBuilder) {
        for (k, t) in batch.iter().enumerate() {
            record.output(&format!("{name}.{k}"), t);
        }
    }
}

/// An input and its class label: the item of a classification data set, collated into a
/// [`Batch`].
#[derive(Clone, Debug, PartialEq)]
pub struct Labeled {
    /// The input.
    pub input: HostTensor,
    /// The class index.
    pub target: i64,
}

impl<B: Backend> Collate<B> for Labeled {
    /// Inputs `[B, …]` and targets.
    type Batch = Batch<B>;

    fn collate(backend: &B, items: Vec<Self>) -> Result<Batch<B>> {
        let (inputs, targets): (Vec<HostTensor>, Vec<i64>) =
            items.into_iter().map(|l| (l.input, l.target)).unzip();
        Ok(Batch {
            inputs: HostTensor::collate(backend, inputs)?,
            targets,
        })
    }

    fn trace_batch(batch: &Batch<B>, _name: &str, record: &mut RecordBuilder) {
        record.output("inputs", &batch.inputs);
        record.ints("targets", &[batch.targets.len()], &batch.targets, true);
    }
}

impl Dataset for ClassificationData {
    /// Row `index` as a `[feature_len]` tensor and its label.
    type Item = Labeled;

    fn len(&self) -> usize {
        ClassificationData::len(self)
    }

    fn get(&self, index: usize) -> Result<Labeled> {
        let row = self.row(index).ok_or_else(|| {
            Error::invalid(
                "ClassificationData::get",
                "index",
                format!("row {index} is out of range for {} rows", self.len()),
            )
        })?;
        Ok(Labeled {
            input: HostTensor {
                shape: vec![self.feature_len()],
                values: row.to_vec(),
            },
            target: self.labels()[index],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use exactgrad_backends::ScalarRefBackend;

    #[test]
    fn items_stack_into_batches() -> Result<()> {
        let b = ScalarRefBackend;
        let items = vec![
            (HostTensor::new(vec![1.0, 2.0], [2, 1])?, 3i64),
            (HostTensor::new(vec![3.0, 4.0], [2, 1])?, 5),
        ];
        let (x, y) = <(HostTensor, i64)>::collate(&b, items)?;
        assert_eq!(x.dims(), [2, 2, 1]);
        assert_eq!(x.to_vec()?, [1.0, 2.0, 3.0, 4.0]);
        assert_eq!(y, [3, 5]);
        let bad = vec![
            HostTensor::new(vec![1.0, 2.0], [2])?,
            HostTensor::new(vec![1.0], [1])?,
        ];
        let err = HostTensor::collate(&b, bad).unwrap_err().to_string();
        assert!(err.contains("item 1 has shape [1]"), "{err}");
        assert!(HostTensor::new(vec![1.0], [2]).is_err());
        // A shape built by hand whose count overflows (2^63 · 2 wraps to 0, which the
        // empty values would have matched) is refused by name.
        let wrapped = HostTensor {
            shape: vec![1 << 63, 2],
            values: Vec::new(),
        };
        let err = HostTensor::collate(&b, vec![wrapped])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("item 0 has shape [9223372036854775808, 2]"),
            "{err}"
        );
        let seqs = <Vec<i64>>::collate(&b, vec![vec![1, 2], vec![3, 4]])?;
        assert_eq!(seqs, [1, 2, 3, 4]);
        assert!(<Vec<i64>>::collate(&b, vec![vec![1, 2], vec![3]]).is_err());
        Ok(())
    }
}
