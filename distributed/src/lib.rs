//! Data-parallel training of exactgrad models across processes and machines on MPI,
//! with results that have the same bits for every number of processes.
//!
//! The global batch of every step is cut into a fixed number of shards (a constant of
//! the run, never derived from the world size). Each rank computes the gradients of its
//! shards with the ordinary single-process code; the shards' gradients are combined by
//! a fixed binary tree over the shard numbers (f64 inner sums, one rounding to f32, one
//! division by the batch size), evaluated partly where the shards live and partly at the
//! rank that owns each chunk of the gradient vector, with MPI's `Alltoallv` and
//! `Allgatherv` carrying the pieces. The one-process run computes the same shards in turn
//! and the same tree, so a run on 1, 2, 3 or 64 processes ends with the same parameters,
//! bit for bit, in exact mode (and in fast mode when every rank uses the same path).
//! `docs/distributed.md` states the arithmetic, the bytes sent and a scaling model.
//!
//! ```no_run
//! use exactgrad::nn::data::{BatchSampler, Digits};
//! use exactgrad::nn::{Linear, Module, ModuleExt, Relu, Sequential};
//! use exactgrad::prelude::*;
//! use exactgrad_distributed::{run, DataParallel, DdpConfig};
//!
//! fn main() -> exactgrad_distributed::Result<()> {
//!     run(|comm| -> exactgrad_distributed::Result<()> {
//!         let b = ScalarRefBackend;
//!         let data = Digits::bundled().split()?.train;
//!         let mut rng = Philox::new(0);
//!         let model = Sequential::new()
//!             .push(Linear::new(&b, 64, 32, &mut rng)?)
//!             .push(Relu)
//!             .push(Linear::new(&b, 32, 10, &mut rng)?);
//!         let mut ddp = DataParallel::new(comm, &model, DdpConfig::new(8))?;
//!         let mut opt = Adam::new(model.parameters(), AdamConfig::new(1e-3))?;
//!         for batch in BatchSampler::new(data.len(), 64)?.shuffle(1).batches(0)? {
//!             let report = ddp.step(batch.len(), |shard| -> exactgrad::nn::Result<_> {
//!                 let x = data.batch(&b, &batch[shard.range.clone()])?;
//!                 let options = CrossEntropyOptions { reduction: Reduction::None, ..Default::default() };
//!                 Ok(model.forward(&x.inputs)?.cross_entropy(&x.targets, options)?)
//!             })?;
//!             opt.step()?;
//!             comm.run_on_root(|| -> std::io::Result<()> {
//!                 println!("loss {}", report.loss);
//!                 Ok(())
//!             })?;
//!         }
//!         Ok(())
//!     })
//! }
//! ```
//!
//! Failures: [`run`] turns an error returned on any rank, or a panic, into `MPI_Abort`,
//! so every rank exits within seconds instead of waiting in a collective.
//! [`DataParallel::new`] refuses ranks whose configurations differ.
//! [`Comm::run_on_root`] runs file writes (checkpoints) on rank 0 alone and reports
//! their failure to every rank.
#![warn(missing_docs)]

mod comm;
mod ddp;
mod error;
mod plan;
pub mod tree;

pub use comm::{run, Comm, EXIT_ERROR, EXIT_PANIC};
pub use ddp::DataParallel;
pub use error::{Error, Result};
pub use plan::{Assignment, DdpConfig, ReductionPlan, Shard, ShardResults, StepReport};
