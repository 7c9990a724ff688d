//! Starting MPI, failing fast, and work done by rank 0 alone.

use crate::error::{Error, Result};
use mpi::environment::{self, Threading, Universe};
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::Root;
use std::fmt::Display;

/// Exit code of every rank when one rank's closure returned an error.
pub const EXIT_ERROR: i32 = 1;
/// Exit code of every rank when one rank panicked.
pub const EXIT_PANIC: i32 = 101;

/// The processes of a run (MPI's `COMM_WORLD`), as given to the closure of [`run`].
pub struct Comm {
    world: SimpleCommunicator,
}

impl Comm {
    /// This process's rank, `0..size`.
    pub fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    /// Number of processes.
    pub fn size(&self) -> usize {
        self.world.size() as usize
    }

    /// Whether this is rank 0, the root that broadcasts parameters and writes files.
    pub fn is_root(&self) -> bool {
        self.world.rank() == 0
    }

    /// The MPI communicator, for collectives of the caller's own.
    pub fn mpi(&self) -> &SimpleCommunicator {
        &self.world
    }

    /// Waits until every rank has called it.
    pub fn barrier(&self) {
        mpi::traits::CommunicatorCollectives::barrier(&self.world);
    }

    /// Runs `f` on rank 0 only (writing a checkpoint, a log, a report) and tells every
    /// rank how it went: rank 0 gets `Ok(Some(value))`, the others `Ok(None)`; when `f`
    /// fails, every rank gets [`Error::Root`] with rank 0's message.
    ///
    /// Collective: every rank must call it, in the same order relative to the other
    /// collectives. A panic in `f` aborts every rank (see [`run`]).
    pub fn run_on_root<T, E: Display>(
        &self,
        f: impl FnOnce() -> std::result::Result<T, E>,
    ) -> Result<Option<T>> {
        let root = self.world.process_at_rank(0);
        let (value, mut message) = if self.is_root() {
            match f() {
                Ok(v) => (Some(v), Vec::new()),
                Err(e) => (None, e.to_string().into_bytes()),
            }
        } else {
            (None, Vec::new())
        };
        // Status and message length, then the message when there is one.
        let mut header = [
            u64::from(value.is_none() && self.is_root()),
            message.len() as u64,
        ];
        root.broadcast_into(&mut header[..]);
        if header[0] == 0 {
            return Ok(value);
        }
        // (An empty Vec<u8> points at address 1, Open MPI's MPI_IN_PLACE: not sent.)
        if header[1] > 0 {
            message.resize(header[1] as usize, 0);
            root.broadcast_into(&mut message[..]);
        }
        Err(Error::Root {
            message: String::from_utf8_lossy(&message).into_owned(),
        })
    }

    /// Ends every process of the run now with `code` (MPI's `MPI_Abort`).
    pub fn abort(&self, code: i32) -> ! {
        self.world.abort(code)
    }
}

/// Starts MPI (threads allowed, MPI called from this thread only), runs `f` on every
/// rank and shuts MPI down, returning `f`'s value.
///
/// A failure on one rank ends every rank within seconds instead of leaving the others
/// waiting in a collective: when `f` returns an error on a rank, that rank prints it and
/// calls `MPI_Abort` with [`EXIT_ERROR`]; a panic on any thread prints the panic message
/// and calls `MPI_Abort` with [`EXIT_PANIC`]. `mpirun` then exits with that code.
///
/// Fails only when MPI cannot be started (it was already started in this process).
pub fn run<T, E: Display>(f: impl FnOnce(&Comm) -> std::result::Result<T, E>) -> Result<T> {
    let (universe, _threading): (Universe, Threading) =
        environment::initialize_with_threading(Threading::Funneled)
            .ok_or_else(|| Error::Mpi("MPI was already initialised in this process".into()))?;
    let comm = Comm {
        world: universe.world(),
    };
    let (rank, size) = (comm.rank(), comm.size());
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        previous(info);
        if environment::is_initialized() && !environment::is_finalized() {
            eprintln!("rank {rank} of {size}: panicked; aborting every rank");
            SimpleCommunicator::world().abort(EXIT_PANIC);
        }
    }));
    match f(&comm) {
        Ok(value) => {
            drop(comm);
            drop(universe);
            Ok(value)
        }
        Err(e) => {
            eprintln!("rank {rank} of {size}: error: {e}; aborting every rank");
            comm.abort(EXIT_ERROR)
        }
    }
}
