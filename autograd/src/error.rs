//! The error type of the autograd crate.

/// Result type of tensor operations.
pub type Result<T, E = Error> = core::result::Result<T, E>;

/// An error from a tensor operation or from the engine. Messages name the operator and
/// the shapes or argument at fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A shape or argument error (broadcast, dimension, reshape, invalid argument).
    #[error(transparent)]
    Core(#[from] exactgrad_core::Error),
    /// `backward` on a tensor that does not require gradients.
    #[error("backward: the tensor of shape {shape:?} does not require grad (call requires_grad() on a leaf it depends on)")]
    NoGrad {
        /// Shape of the tensor backward was called on.
        shape: Vec<usize>,
    },
    /// `backward` without a seed on a tensor with more than one element.
    #[error("backward: an implicit gradient needs a single-element output, got shape {shape:?}; pass a gradient of that shape")]
    ImplicitSeed {
        /// Shape of the output.
        shape: Vec<usize>,
    },
    /// The seed gradient's shape differs from the output's.
    #[error("backward: gradient of shape {got:?} given for an output of shape {expected:?}")]
    SeedShape {
        /// Shape of the output.
        expected: Vec<usize>,
        /// Shape of the gradient given.
        got: Vec<usize>,
    },
    /// A record on the path was already released by an earlier backward.
    #[error("backward: the graph through `{op}` was already released by an earlier backward; pass retain_graph = true to backward through it twice")]
    GraphReleased {
        /// The operator whose record was released.
        op: &'static str,
    },
    /// A tensor saved for backward was modified in place after the forward pass.
    #[error("backward of `{op}`: a tensor saved for the backward pass was modified in place (version {saved} at save, {now} now)")]
    TensorVersion {
        /// The operator whose saved tensor changed.
        op: &'static str,
        /// Storage version when it was saved.
        saved: u64,
        /// Storage version now.
        now: u64,
    },
    /// An in-place operation on a tensor that takes part in gradient recording.
    #[error("{op}: in-place operation on a tensor that requires grad while grad mode is on (use no_grad(), or detach())")]
    InPlaceOnGrad {
        /// The in-place operator.
        op: &'static str,
    },
    /// A class label outside `[0, classes)` that is not the ignore index.
    #[error("{op}: target {label} at position {index} is out of range for {classes} classes")]
    InvalidLabel {
        /// Operator name.
        op: &'static str,
        /// The label given.
        label: i64,
        /// Its position in the flattened targets.
        index: usize,
        /// Number of classes.
        classes: usize,
    },
    /// The tensor's storage was released (returned to its backend's memory) and can no
    /// longer be read or written.
    #[error("the storage of this tensor (shape {shape:?}) was released; keep the tensor past its scope with ActivationScope::keep, or detach a copy first")]
    Released {
        /// Shape of the tensor that was accessed.
        shape: Vec<usize>,
    },
    /// A backward pass would accumulate into a leaf's gradient while another thread's
    /// backward pass is accumulating into it (the sum would depend on arrival order).
    #[error("backward: another backward pass is accumulating into the gradient of a leaf of shape {shape:?} on another thread; run backward passes that share leaves one after the other")]
    ConcurrentBackward {
        /// Shape of the shared leaf.
        shape: Vec<usize>,
    },
}

impl Error {
    /// Shorthand for an invalid-argument error.
    pub(crate) fn invalid(op: &'static str, arg: &'static str, msg: impl Into<String>) -> Self {
        Error::Core(exactgrad_core::Error::invalid(op, arg, msg))
    }

    /// Shorthand for an overflow error.
    pub(crate) fn overflow(op: &'static str, arg: &'static str, msg: impl Into<String>) -> Self {
        Error::Core(exactgrad_core::Error::overflow(op, arg, msg))
    }

    /// Shorthand for a shape-mismatch error.
    pub(crate) fn mismatch(
        op: &'static str,
        lhs: &[usize],
        rhs: &[usize],
        reason: impl Into<String>,
    ) -> Self {
        Error::Core(exactgrad_core::Error::mismatch(op, lhs, rhs, reason))
    }
}
