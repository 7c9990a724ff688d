//! The error type of the core crate: shape and argument errors shared by every layer.

#[cfg(feature = "alloc")]
use alloc::{string::String, vec::Vec};

/// Result type of fallible core operations.
pub type Result<T, E = Error> = core::result::Result<T, E>;

/// A shape or argument error. Every message names the operator, the shapes and the
/// argument at fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Two shapes cannot be broadcast together.
    #[cfg(feature = "alloc")]
    #[error("{op}: shapes {lhs:?} and {rhs:?} cannot be broadcast together")]
    Broadcast {
        /// Operator name.
        op: &'static str,
        /// Left operand's shape.
        lhs: Vec<usize>,
        /// Right operand's shape.
        rhs: Vec<usize>,
    },
    /// Two shapes that must agree do not.
    #[cfg(feature = "alloc")]
    #[error("{op}: shapes {lhs:?} and {rhs:?} do not match: {reason}")]
    ShapeMismatch {
        /// Operator name.
        op: &'static str,
        /// First shape.
        lhs: Vec<usize>,
        /// Second shape.
        rhs: Vec<usize>,
        /// What had to agree.
        reason: String,
    },
    /// A dimension index is out of range for the tensor's rank.
    #[error("{op}: dimension {dim} is out of range for a tensor of rank {rank}")]
    DimOutOfRange {
        /// Operator name.
        op: &'static str,
        /// The dimension given (negative counts from the end).
        dim: isize,
        /// The tensor's rank.
        rank: usize,
    },
    /// A reshape or view to a shape with a different element count.
    #[cfg(feature = "alloc")]
    #[error("{op}: cannot view shape {from:?} ({from_numel} elements) as {to:?}")]
    Reshape {
        /// Operator name.
        op: &'static str,
        /// Source shape.
        from: Vec<usize>,
        /// Number of elements of the source.
        from_numel: usize,
        /// Requested shape (as given).
        to: Vec<isize>,
    },
    /// An argument value is invalid for the operator.
    #[cfg(feature = "alloc")]
    #[error("{op}: invalid argument `{arg}`: {msg}")]
    InvalidArgument {
        /// Operator name.
        op: &'static str,
        /// Argument name.
        arg: &'static str,
        /// What is wrong with it.
        msg: String,
    },
}

#[cfg(feature = "alloc")]
impl Error {
    /// Builds an [`Error::InvalidArgument`].
    pub fn invalid(op: &'static str, arg: &'static str, msg: impl Into<String>) -> Self {
        Error::InvalidArgument {
            op,
            arg,
            msg: msg.into(),
        }
    }

    /// Builds an [`Error::ShapeMismatch`].
    pub fn mismatch(
        op: &'static str,
        lhs: &[usize],
        rhs: &[usize],
        reason: impl Into<String>,
    ) -> Self {
        Error::ShapeMismatch {
            op,
            lhs: lhs.to_vec(),
            rhs: rhs.to_vec(),
            reason: reason.into(),
        }
    }
}
