//! The error type of distributed training.

/// What can go wrong in distributed training.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A tensor operation, a module or the backward pass failed on this rank (the one
    /// error type of exactgrad, `exactgrad::Error`).
    #[error(transparent)]
    Nn(#[from] exactgrad::nn::Error),
    /// An argument outside its valid range.
    #[error("{op}: invalid `{arg}`: {message}")]
    InvalidArgument {
        /// The function that rejected the argument.
        op: &'static str,
        /// The argument at fault.
        arg: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// The ranks were started with different configurations (parameter shapes, shard
    /// counts, assignment or compute mode); detected before any training.
    #[error("{op}: the ranks' configurations differ: {detail}")]
    Inconsistent {
        /// The function that compared the configurations.
        op: &'static str,
        /// The first difference, naming the ranks and the entry.
        detail: String,
    },
    /// A closure given to [`crate::Comm::run_on_root`] failed on rank 0; every rank
    /// returns this error.
    #[error("rank 0 failed in run_on_root: {message}")]
    Root {
        /// The error rank 0 reported.
        message: String,
    },
    /// MPI could not be started.
    #[error("MPI: {0}")]
    Mpi(String),
}

impl From<exactgrad::core::Error> for Error {
    fn from(e: exactgrad::core::Error) -> Self {
        Error::Nn(e.into())
    }
}

impl Error {
    /// Shorthand for [`Error::InvalidArgument`].
    pub(crate) fn invalid(op: &'static str, arg: &'static str, message: impl Into<String>) -> Self {
        Error::InvalidArgument {
            op,
            arg,
            message: message.into(),
        }
    }
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
