//! What a data-parallel run fixes before its first step: which rank computes which shard
//! ([`Assignment`], [`DdpConfig`]), the shards themselves ([`Shard`]), the communication
//! plan of the reduction ([`ReductionPlan`]: the tree's pieces, the chunk each rank owns,
//! the bytes sent) and what a step reports ([`StepReport`], [`ShardResults`]).

use crate::error::{Error, Result};
use crate::tree::{self, Piece};
use exactgrad::nn::data::permutation;
use exactgrad::prelude::Philox;
use std::fmt;
use std::ops::Range;
use std::time::Duration;

/// Which rank computes which shard. Every choice gives the same bits; they differ only
/// in how much travels (see [`ReductionPlan::bytes_sent`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Assignment {
    /// Contiguous blocks: shard `s` of `S` on rank `⌊s·P/S⌋`. With `S/P` a power of two
    /// every rank sends one piece per chunk (the fewest bytes).
    Blocked,
    /// The shards permuted from `seed` (Fisher–Yates on `Philox::new(seed)`, see
    /// `exactgrad::nn::data::permutation`), then cut into contiguous blocks: shard
    /// `perm[i]` on rank `⌊i·P/S⌋`.
    Shuffled {
        /// Seed of the permutation.
        seed: u64,
    },
    /// Shard `s` on rank `ranks[s]`; one entry per shard, each below the world size.
    Explicit(Vec<usize>),
}

impl Assignment {
    /// The rank of every shard, for `shards` shards over `ranks` processes.
    ///
    /// Fails when `ranks` is 0, or an explicit list has the wrong length or names a rank
    /// that does not exist.
    pub fn resolve(&self, shards: usize, ranks: usize) -> Result<Vec<usize>> {
        if ranks == 0 {
            return Err(Error::invalid(
                "Assignment::resolve",
                "ranks",
                "must be at least 1",
            ));
        }
        // In u128, so that `i · ranks` cannot wrap.
        let blocked = |i: usize| (i as u128 * ranks as u128 / shards as u128) as usize;
        let op = "Assignment::resolve";
        let nn = |e: exactgrad::core::Error| Error::Nn(e.into());
        match self {
            Assignment::Blocked => {
                exactgrad::core::backend::try_collect(op, (0..shards).map(blocked)).map_err(nn)
            }
            Assignment::Shuffled { seed } => {
                let n = u32::try_from(shards).map_err(|_| {
                    Error::invalid("Assignment::resolve", "shards", "at most 2^32 - 1 shards")
                })?;
                let perm = permutation(n, &mut Philox::new(*seed))?;
                let mut owner =
                    exactgrad::core::backend::try_vec_filled(op, shards, 0).map_err(nn)?;
                for (i, &s) in perm.iter().enumerate() {
                    owner[s] = blocked(i);
                }
                Ok(owner)
            }
            Assignment::Explicit(list) => {
                if list.len() != shards {
                    return Err(Error::invalid(
                        "Assignment::resolve",
                        "assignment",
                        format!("{} ranks given for {shards} shards", list.len()),
                    ));
                }
                if let Some((s, &r)) = list.iter().enumerate().find(|(_, &r)| r >= ranks) {
                    return Err(Error::invalid(
                        "Assignment::resolve",
                        "assignment",
                        format!("shard {s} is given to rank {r}, but there are {ranks} ranks"),
                    ));
                }
                Ok(list.clone())
            }
        }
    }
}

/// How a global batch is cut and spread over the ranks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DdpConfig {
    /// Number of shards of every global batch: a constant of the run, never derived
    /// from the world size (the results depend on it, not on the world size).
    pub shards: usize,
    /// Which rank computes which shard.
    pub assignment: Assignment,
}

impl DdpConfig {
    /// `shards` shards per global batch, assigned in contiguous blocks.
    pub fn new(shards: usize) -> Self {
        Self {
            shards,
            assignment: Assignment::Blocked,
        }
    }

    /// The same with another assignment.
    #[must_use]
    pub fn with_assignment(mut self, assignment: Assignment) -> Self {
        self.assignment = assignment;
        self
    }
}

/// One shard of a step's global batch, as given to the loss closure of
/// [`DataParallel::step`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shard {
    /// Shard number, `0..shards`.
    pub index: usize,
    /// Its examples: positions `⌊index·N/S⌋..⌊(index+1)·N/S⌋` of the global batch of `N`.
    pub range: Range<usize>,
    /// The step number (0 for the first call of [`DataParallel::step`]), for seeding
    /// per-shard randomness (dropout) from `(step, index)` only.
    pub step: u64,
}

/// What one [`DataParallel::step`] did.
#[derive(Clone, Debug, PartialEq)]
pub struct StepReport {
    /// The mean loss over the global batch: the reduced sum of the shards' losses,
    /// rounded to f32, divided by `N`.
    pub loss: f32,
    /// Examples in the global batch (`N`).
    pub examples: usize,
    /// Shards this rank computed.
    pub local_shards: usize,
    /// Bytes this rank handed to MPI for other ranks (see [`ReductionPlan::bytes_sent`]).
    pub bytes_sent: usize,
    /// Time spent in the shards' forward and backward passes.
    pub compute: Duration,
    /// Time spent combining: local pieces, MPI exchange, the owner's sums, gather,
    /// installing gradients and buffers.
    pub exchange: Duration,
}

/// What [`DataParallel::compute_shards`] computed on this rank, for
/// [`DataParallel::combine`].
pub struct ShardResults {
    pub(crate) step: u64,
    pub(crate) batch: usize,
    pub(crate) leaves: Vec<Option<Vec<f32>>>,
    pub(crate) buffers0: Vec<f32>,
    pub(crate) local: usize,
    pub(crate) compute: Duration,
}

impl fmt::Debug for ShardResults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardResults")
            .field("step", &self.step)
            .field("batch", &self.batch)
            .field("local_shards", &self.local)
            .finish()
    }
}

/// The communication of a step, fixed at construction: the tree's pieces and the chunk
/// each rank owns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReductionPlan {
    pub(crate) ranks: usize,
    pub(crate) owner: Vec<usize>,
    pub(crate) pieces: Vec<Piece>,
    pub(crate) len: usize,
}

impl ReductionPlan {
    /// The plan for shards held by `owner` (shard → rank) over `ranks` processes, for
    /// vectors of `len` f32 elements (gradients, buffers, loss and count).
    ///
    /// Fails when there are no shards or no ranks, or a shard's rank does not exist.
    pub fn new(owner: Vec<usize>, ranks: usize, len: usize) -> Result<Self> {
        let op = "ReductionPlan::new";
        if owner.is_empty() {
            return Err(Error::invalid(
                op,
                "owner",
                "there must be at least one shard",
            ));
        }
        if ranks == 0 {
            return Err(Error::invalid(op, "ranks", "must be at least 1"));
        }
        if let Some((s, &r)) = owner.iter().enumerate().find(|(_, &r)| r >= ranks) {
            return Err(Error::invalid(
                op,
                "owner",
                format!("shard {s} is on rank {r}, but there are {ranks} ranks"),
            ));
        }
        let pieces = tree::pieces(&owner);
        Ok(Self {
            ranks,
            owner,
            pieces,
            len,
        })
    }

    /// The rank of every shard.
    pub fn owner(&self) -> &[usize] {
        &self.owner
    }

    /// The pieces of the reduction tree in tree order (see [`crate::tree`]).
    pub fn pieces(&self) -> &[Piece] {
        &self.pieces
    }

    /// Elements of the reduced vector: gradients, buffers, loss and example count.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the reduced vector is empty (never: it holds at least the loss).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The elements whose sums `rank` computes.
    pub fn chunk(&self, rank: usize) -> Range<usize> {
        tree::chunk(self.len, self.ranks, rank)
    }

    /// Bytes of `rank`'s pieces per element.
    pub(crate) fn piece_width(&self, rank: usize) -> usize {
        self.pieces
            .iter()
            .filter(|p| p.rank == rank)
            .map(|p| p.node.width())
            .sum()
    }

    /// Bytes `rank` sends per step to the other ranks: its pieces' slices of every other
    /// rank's chunk (`MPI_Alltoallv`), plus its own reduced chunk in f32 for each of the
    /// other ranks (`MPI_Allgatherv`).
    pub fn bytes_sent(&self, rank: usize) -> usize {
        let width = self.piece_width(rank);
        let scatter: usize = (0..self.ranks)
            .filter(|&d| d != rank)
            .map(|d| self.chunk(d).len() * width)
            .sum();
        scatter + (self.ranks - 1) * self.chunk(rank).len() * 4
    }

    /// Bytes a rank sends in a ring all-reduce of the same `len` f32 elements:
    /// `2·(P−1)/P·4·len` (reduce-scatter then all-gather), for comparison.
    pub fn ring_allreduce_bytes(&self) -> usize {
        let p = self.ranks;
        (0..p)
            .filter(|&d| d != 0)
            .map(|d| 2 * 4 * tree::chunk(self.len, p, d).len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ddp::first_difference;

    #[test]
    fn assignments_resolve_for_any_world_size() {
        assert_eq!(
            Assignment::Blocked.resolve(8, 3).unwrap(),
            vec![0, 0, 0, 1, 1, 1, 2, 2]
        );
        for ranks in 1..=5 {
            let o = Assignment::Shuffled { seed: 9 }.resolve(8, ranks).unwrap();
            let mut per_rank = vec![0; ranks];
            o.iter().for_each(|&r| per_rank[r] += 1);
            let blocked = Assignment::Blocked.resolve(8, ranks).unwrap();
            let mut want = vec![0; ranks];
            blocked.iter().for_each(|&r| want[r] += 1);
            assert_eq!(per_rank, want, "same load as blocked at {ranks} ranks");
        }
        assert_ne!(
            Assignment::Shuffled { seed: 9 }.resolve(8, 4).unwrap(),
            Assignment::Blocked.resolve(8, 4).unwrap()
        );
        let e = Assignment::Explicit(vec![0, 3]).resolve(2, 2).unwrap_err();
        assert!(e.to_string().contains("shard 1 is given to rank 3"), "{e}");
        let e = Assignment::Explicit(vec![0]).resolve(2, 2).unwrap_err();
        assert!(e.to_string().contains("1 ranks given for 2 shards"), "{e}");
    }

    #[test]
    fn first_difference_names_ranks_and_entries() {
        let t = |s: &str| s.to_string();
        assert_eq!(first_difference(&[t("a\nb"), t("a\nb")]), None);
        let d = first_difference(&[t("a\nb"), t("a\nb"), t("a\nc")]).unwrap();
        assert_eq!(d, "rank 0 has b, rank 2 has c");
        let d = first_difference(&[t("a"), t("a\nx"), t("z")]).unwrap();
        assert_eq!(
            d,
            "rank 0 has nothing, rank 1 has x (ranks [1, 2] differ from rank 0)"
        );
    }

    #[test]
    fn bytes_equal_a_ring_all_reduce_with_one_shard_per_rank() {
        for p in 1..=8 {
            let plan = ReductionPlan::new((0..p).collect(), p, 1000).unwrap();
            for r in 0..p {
                // Leaves (f32) to the other owners, then the own chunk to the others.
                let c = plan.chunk(r).len();
                assert_eq!(plan.bytes_sent(r), 4 * (1000 - c) + 4 * (p - 1) * c);
                // Within the unevenness of the chunks of a ring all-reduce's 2(P-1)/P·4L.
                let ring = 2 * (p - 1) * 1000 * 4 / p;
                assert!(plan.bytes_sent(r).abs_diff(ring) <= 8 * p, "p {p} rank {r}");
            }
        }
        // Two shards per rank, blocked: one f64 piece per rank, 1.5 times the ring.
        let plan = ReductionPlan::new(vec![0, 0, 1, 1], 2, 1000).unwrap();
        assert_eq!(plan.bytes_sent(0), 500 * 8 + 500 * 4);
        assert_eq!(plan.ring_allreduce_bytes(), 4000);
        let e = ReductionPlan::new(vec![0, 2], 2, 10).unwrap_err();
        assert!(
            e.to_string()
                .contains("shard 1 is on rank 2, but there are 2 ranks"),
            "{e}"
        );
        assert!(ReductionPlan::new(vec![], 2, 10).is_err());
        assert!(ReductionPlan::new(vec![0], 0, 10).is_err());
        assert!(Assignment::Blocked.resolve(4, 0).is_err());
    }
}
