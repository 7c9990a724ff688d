//! [`DataLoader`]: mini-batches of a [`Dataset`] in a seeded order, with a position that
//! advances as batches are taken and that training checkpoints save.

use super::dataset::{Collate, Dataset};
use super::{mix_seed, permutation};
use crate::error::{Error, Result};
use exactgrad_autograd::Tensor;
use exactgrad_core::{Backend, Philox};
use std::cell::{Cell, RefCell};

/// One mini-batch of a classification data set: inputs `[batch, …]` and class targets.
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

    /// Number of items.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no items.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Items per batch.
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// The shuffle seed, if the epochs are shuffled.
    pub fn shuffle_seed(&self) -> Option<u64> {
        self.shuffle_seed
    }

    /// Whether a last batch smaller than the batch size is dropped.
    pub fn drops_last(&self) -> bool {
        self.drop_last
    }

    /// Number of batches per epoch.
    pub fn num_batches(&self) -> usize {
        if self.drop_last {
            self.len / self.batch_size
        } else {
            self.len.div_ceil(self.batch_size)
        }
    }

    /// The order in which epoch `epoch` visits the items. Fails when it cannot be
    /// allocated (a data set of billions of items).
    pub fn order(&self, epoch: u64) -> Result<Vec<usize>> {
        match self.shuffle_seed {
            None => Ok(exactgrad_core::backend::try_collect(
                "BatchSampler::order",
                0..self.len,
            )?),
            Some(seed) => {
                let mut rng = Philox::new(mix_seed(seed ^ mix_seed(epoch)));
                permutation(self.len as u32, &mut rng)
            }
        }
    }

    /// The mini-batches of indices of epoch `epoch`. Fails when they cannot be allocated
    /// (every vector is obtained fallibly; an epoch of one batch is the order itself, not
    /// a copy of it).
    pub fn batches(&self, epoch: u64) -> Result<Vec<Vec<usize>>> {
        let op = "BatchSampler::batches";
        let mut order = self.order(epoch)?;
        let n = self.num_batches();
        let mut out = exactgrad_core::backend::try_vec_with_capacity(op, n)?;
        if n == 1 {
            order.truncate(self.batch_size);
            out.push(order);
            return Ok(out);
        }
        // With `drop_last`, the `n` full batches; without, every chunk.
        for chunk in order.chunks(self.batch_size).take(n) {
            out.push(exactgrad_core::backend::try_collect(
                op,
                chunk.iter().copied(),
            )?);
        }
        Ok(out)
    }
}

/// Where a loader stands in its data: `batch` batches (0-based count) of epoch `epoch`
/// (0-based) have been taken. The next batch is batch `batch` of that epoch, or, when the
/// epoch is used up, the first of the next one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LoaderPosition {
    /// The epoch.
    pub epoch: u64,
    /// Batches of the epoch taken so far.
    pub batch: usize,
}

/// The state of a [`DataLoader`] that a training checkpoint saves: its configuration
/// (checked on restore) and its shuffle seed and position (set on restore).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoaderState {
    /// Items of the data set.
    pub len: usize,
    /// Items per batch.
    pub batch_size: usize,
    /// Whether a last batch smaller than the batch size is dropped.
    pub drop_last: bool,
    /// The shuffle seed, if shuffled.
    pub shuffle_seed: Option<u64>,
    /// The position.
    pub position: LoaderPosition,
}

/// Mini-batches of a [`Dataset`] as batches on a backend (PyTorch's `DataLoader`), in
/// order or shuffled from a seed (see [`BatchSampler`]).
///
/// The loader keeps its **position**: iterating it (`for batch in &loader`) yields the
/// remaining batches of the current epoch and advances the position past each batch it
/// yields; when the epoch is used up, the next iteration starts the next epoch. A
/// training checkpoint ([`TrainingState`](crate::checkpoint::TrainingState)) saves the
/// position and the shuffle seed, so a resumed run takes exactly the batches an
/// uninterrupted one would, without the loop counting anything:
///
/// ```
/// use exactgrad_backends::ScalarRefBackend;
/// use exactgrad_nn::data::{ClassificationData, DataLoader, LoaderPosition};
///
/// # fn main() -> exactgrad_nn::Result<()> {
/// let b = ScalarRefBackend;
/// let data = ClassificationData::new((0..20).map(|i| i as f32).collect(), vec![0; 10], 2, 1)?;
/// let loader = DataLoader::new(&b, &data, 4)?.shuffle(7); // 3 batches per epoch
/// let mut seen = 0;
/// while loader.epoch() < 2 {
///     for batch in &loader {
///         let batch = batch?;
///         seen += batch.targets.len();
///     }
/// }
/// assert_eq!(seen, 20);
/// assert_eq!(loader.position(), LoaderPosition { epoch: 2, batch: 0 });
/// # Ok(())
/// # }
/// ```
pub struct DataLoader<B: Backend, D: Dataset> {
    dataset: D,
    sampler: Cell<BatchSampler>,
    backend: B,
    position: Cell<LoaderPosition>,
    /// The order of the current epoch, computed once per epoch.
    order: RefCell<Option<(u64, Vec<usize>)>>,
}

impl<B: Backend, D: Dataset> DataLoader<B, D>
where
    D::Item: Collate<B>,
{
    /// Batches of `batch_size` items of `dataset`, in order (see [`DataLoader::shuffle`]),
    /// from the start of epoch 0. `dataset` may be a reference (`&data`).
    ///
    /// Fails when `batch_size` is 0 or the data set has 2^32 items or more.
    pub fn new(backend: &B, dataset: D, batch_size: usize) -> Result<Self> {
        Ok(Self {
            sampler: Cell::new(BatchSampler::new(dataset.len(), batch_size)?),
            dataset,
            backend: backend.clone(),
            position: Cell::new(LoaderPosition::default()),
            order: RefCell::new(None),
        })
    }

    /// Shuffles every epoch from `seed` (see [`BatchSampler`]).
    #[must_use]
    pub fn shuffle(self, seed: u64) -> Self {
        self.sampler.set(self.sampler.get().shuffle(seed));
        *self.order.borrow_mut() = None;
        self
    }

    /// Drops the last batch when it is smaller than the batch size.
    #[must_use]
    pub fn drop_last(self, drop_last: bool) -> Self {
        self.sampler.set(self.sampler.get().drop_last(drop_last));
        self
    }

    /// The data set.
    pub fn dataset(&self) -> &D {
        &self.dataset
    }

    /// The sampler that orders the items.
    pub fn sampler(&self) -> BatchSampler {
        self.sampler.get()
    }

    /// Number of batches per epoch.
    pub fn num_batches(&self) -> usize {
        self.sampler.get().num_batches()
    }

    /// The position: the epoch and the batches of it taken so far.
    pub fn position(&self) -> LoaderPosition {
        self.position.get()
    }

    /// The current epoch (0-based): the one the next iteration takes batches from, or
    /// the one after it when it is used up.
    pub fn epoch(&self) -> u64 {
        let p = self.position.get();
        if p.batch >= self.num_batches() {
            p.epoch.saturating_add(1)
        } else {
            p.epoch
        }
    }

    /// Moves to `position` (the next batch taken is batch `position.batch` of
    /// `position.epoch`). Fails when the epoch has fewer batches.
    pub fn set_position(&self, position: LoaderPosition) -> Result<()> {
        if position.batch > self.num_batches() {
            return Err(Error::invalid(
                "DataLoader::set_position",
                "position",
                format!(
                    "batch {} of an epoch of {} batches",
                    position.batch,
                    self.num_batches()
                ),
            ));
        }
        self.position.set(position);
        Ok(())
    }

    /// The remaining batches of the current epoch, built as they are taken; each advances
    /// the position. Also `for batch in &loader`.
    pub fn iter(&self) -> Batches<'_, B, D> {
        Batches { loader: self }
    }

    /// The batches of epoch `epoch` (0-based) without touching the position (for
    /// evaluation, or to look at an epoch's order).
    pub fn batches_of_epoch(
        &self,
        epoch: u64,
    ) -> impl Iterator<Item = Result<<D::Item as Collate<B>>::Batch>> + '_ {
        let (batches, error) = match self.sampler.get().batches(epoch) {
            Ok(b) => (b, None),
            Err(e) => (Vec::new(), Some(e)),
        };
        error
            .map(Err)
            .into_iter()
            .chain(batches.into_iter().map(move |idx| self.build(&idx)))
    }

    fn build(&self, indices: &[usize]) -> Result<<D::Item as Collate<B>>::Batch> {
        let mut items =
            exactgrad_core::backend::try_vec_with_capacity("DataLoader::batch", indices.len())?;
        for &i in indices {
            items.push(self.dataset.get(i)?);
        }
        D::Item::collate(&self.backend, items)
    }

    /// The indices of batch `batch` of epoch `epoch`.
    fn indices(&self, epoch: u64, batch: usize) -> Result<Vec<usize>> {
        let mut order = self.order.borrow_mut();
        if order.as_ref().map(|(e, _)| *e) != Some(epoch) {
            *order = Some((epoch, self.sampler.get().order(epoch)?));
        }
        let (_, o) = order.as_ref().expect("set above");
        let bs = self.sampler.get().batch_size();
        // batch < num_batches, so the start lies inside the order.
        let start = batch.saturating_mul(bs).min(o.len());
        let batch = &o[start..start.saturating_add(bs).min(o.len())];
        Ok(exactgrad_core::backend::try_collect(
            "DataLoader::batch",
            batch.iter().copied(),
        )?)
    }

    /// The state a training checkpoint saves.
    pub fn state(&self) -> LoaderState {
        let s = self.sampler.get();
        LoaderState {
            len: s.len(),
            batch_size: s.batch_size(),
            drop_last: s.drops_last(),
            shuffle_seed: s.shuffle_seed(),
            position: self.position.get(),
        }
    }

    /// Restores a saved state: the shuffle seed and the position. Fails, changing
    /// nothing, when the state does not fit ([`check_state`](Self::check_state)).
    pub fn restore_state(&self, state: &LoaderState) -> Result<()> {
        self.check_state(state)?;
        // The order cache belongs to the old seed.
        self.sampler.set(BatchSampler {
            shuffle_seed: state.shuffle_seed,
            ..self.sampler.get()
        });
        *self.order.borrow_mut() = None;
        self.position.set(state.position);
        Ok(())
    }

    /// Checks that a saved state fits this loader: the same number of items, batch size
    /// and `drop_last`, and a position within an epoch.
    pub fn check_state(&self, state: &LoaderState) -> Result<()> {
        let s = self.sampler.get();
        if (state.len, state.batch_size, state.drop_last)
            != (s.len(), s.batch_size(), s.drops_last())
        {
            return Err(Error::invalid(
                "DataLoader::check_state",
                "state",
                format!(
                    "saved from a loader of {} items in batches of {} (drop_last {}), this one has {} in batches of {} (drop_last {})",
                    state.len, state.batch_size, state.drop_last, s.len(), s.batch_size(), s.drops_last()
                ),
            ));
        }
        if state.position.batch > self.num_batches() {
            return Err(Error::invalid(
                "DataLoader::check_state",
                "state",
                format!(
                    "position batch {} is beyond the epoch's {} batches",
                    state.position.batch,
                    self.num_batches()
                ),
            ));
        }
        Ok(())
    }
}

/// The remaining batches of a [`DataLoader`]'s current epoch (see [`DataLoader::iter`]).
pub struct Batches<'a, B: Backend, D: Dataset> {
    loader: &'a DataLoader<B, D>,
}

impl<B: Backend, D: Dataset> Iterator for Batches<'_, B, D>
where
    D::Item: Collate<B>,
{
    type Item = Result<<D::Item as Collate<B>>::Batch>;

    fn next(&mut self) -> Option<Self::Item> {
        let l = self.loader;
        let p = l.position.get();
        if p.batch >= l.num_batches() {
            // The epoch is used up: the next iteration starts the next one.
            l.position.set(LoaderPosition {
                epoch: p.epoch.saturating_add(1),
                batch: 0,
            });
            return None;
        }
        l.position.set(LoaderPosition {
            epoch: p.epoch,
            batch: p.batch + 1,
        });
        let batch = l
            .indices(p.epoch, p.batch)
            .and_then(|indices| l.build(&indices));
        if let Ok(b) = &batch {
            if exactgrad_autograd::trace::is_recording() {
                trace_batch::<B, D>(b, p, l.sampler.get().shuffle_seed());
            }
        }
        Some(batch)
    }
}

/// Records a batch taken at `position` in the trace of this thread: its contents
/// ([`Collate::trace_batch`]) and the position (state, so that two runs that take other
/// batches differ at this record).
fn trace_batch<B: Backend, D: Dataset>(
    batch: &<D::Item as Collate<B>>::Batch,
    position: LoaderPosition,
    shuffle_seed: Option<u64>,
) where
    D::Item: Collate<B>,
{
    use exactgrad_autograd::trace::{record, Kind, Value};
    let mut r = record(Kind::Data, "batch")
        .state("epoch", Value::Int(position.epoch as i64))
        .state("batch", Value::Int(position.batch as i64))
        .state(
            "shuffle_seed",
            shuffle_seed.map_or(Value::Str("none".into()), Value::U64),
        );
    D::Item::trace_batch(batch, "batch", &mut r);
    r.write();
}

impl<'a, B: Backend, D: Dataset> IntoIterator for &'a DataLoader<B, D>
where
    D::Item: Collate<B>,
{
    type Item = Result<<D::Item as Collate<B>>::Batch>;
    type IntoIter = Batches<'a, B, D>;

    fn into_iter(self) -> Batches<'a, B, D> {
        self.iter()
    }
}

impl<B: Backend, D: Dataset> std::fmt::Debug for DataLoader<B, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataLoader")
            .field("sampler", &self.sampler.get())
            .field("position", &self.position.get())
            .finish()
    }
}
