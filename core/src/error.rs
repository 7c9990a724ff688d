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
    /// A shape whose element count overflows `usize` or exceeds the documented limit
    /// (`shape::MAX_ELEMENTS`).
    #[cfg(feature = "alloc")]
    #[error("{op}: a tensor of shape {dims:?} has more than {limit} elements (or its element count overflows)")]
    TooLarge {
        /// Operator name.
        op: &'static str,
        /// The shape asked for.
        dims: Vec<usize>,
        /// The largest element count allowed.
        limit: usize,
    },
    /// A size computed from the arguments (an output size, a padded extent, a window)
    /// overflows `usize`.
    #[cfg(feature = "alloc")]
    #[error("{op}: argument `{arg}` makes a size overflow: {msg}")]
    Overflow {
        /// Operator name.
        op: &'static str,
        /// The argument at fault.
        arg: &'static str,
        /// The computation that overflowed.
        msg: String,
    },
    /// The memory for a buffer could not be obtained (the allocator refused it, or a
    /// memory budget would be exceeded).
    #[error("{op}: cannot allocate {bytes} bytes: {reason}")]
    Alloc {
        /// Operator name.
        op: &'static str,
        /// Bytes asked for.
        bytes: usize,
        /// Why it failed.
        reason: &'static str,
    },
    /// A backend was asked for an instruction-set path this CPU lacks (the CPU backends'
    /// `with_isa`, the vector forms of the transcendentals).
    #[error("the {isa} path is not supported by this CPU in {mode} mode (choose one that `Isa::is_supported` accepts, or `Isa::best`)")]
    UnsupportedIsa {
        /// The path asked for (`avx512`, `avx2`, `v128`, `neon`, `scalar`).
        isa: &'static str,
        /// The mode asked for.
        mode: crate::ComputeMode,
    },
    /// A buffer would take a backend's pool over the limit set with
    /// [`crate::MemoryPool::set_limit`] (after its idle buffers were freed).
    #[error("{op}: cannot allocate {bytes} bytes: the backend's buffers would exceed their memory limit of {limit} bytes ({in_use} bytes in use); raise the limit with MemoryPool::set_limit or release tensors")]
    MemoryLimit {
        /// Operator name.
        op: &'static str,
        /// Bytes asked for.
        bytes: usize,
        /// Bytes held by the pool's buffers when the request was refused.
        in_use: usize,
        /// The limit.
        limit: usize,
    },
}

#[cfg(feature = "alloc")]
impl Error {
    /// Builds an [`Error::Overflow`].
    pub fn overflow(op: &'static str, arg: &'static str, msg: impl Into<String>) -> Self {
        Error::Overflow {
            op,
            arg,
            msg: msg.into(),
        }
    }

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
