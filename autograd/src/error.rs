//! The one error type of exactgrad above the kernels: tensor operations, the engine,
//! modules, optimizers, schedulers, data sets, loaders and checkpoints all return
//! [`Result`], and the nn crate and the facade re-export it (`docs/api.md`, "Errors").
//!
//! The errors of the layers below arrive through `From`: [`exactgrad_core::Error`]
//! (shapes, arguments, memory, an instruction-set path this CPU lacks) becomes
//! [`Error::Core`], so `?` works on every crate's results in a function or closure that
//! returns this [`Result`], and a bare tensor operation is already of that type.

use std::path::PathBuf;

/// Result type of every fallible function of autograd and nn (and so of the facade).
pub type Result<T, E = Error> = core::result::Result<T, E>;

/// An error from a tensor operation, the engine, a module, an optimizer, a data set or a
/// checkpoint. Messages name the operator and the shapes, argument or file at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A shape or argument error (broadcast, dimension, reshape, invalid argument,
    /// hyper-parameters out of range), a failed allocation, or an instruction-set path
    /// this CPU lacks.
    #[error(transparent)]
    Core(#[from] exactgrad_core::Error),
    /// An operation trace could not start, be written or be read (`docs/debugging.md`).
    #[error(transparent)]
    Trace(#[from] crate::trace::TraceError),
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
    #[error("backward: the graph through `{op}` was already released by an earlier backward; to run backward through it twice, call the first one as `backward_with(BackwardOptions::default().retain_graph(true))`")]
    GraphReleased {
        /// The public operator whose record was released (for a record made inside a
        /// composite operator, such as a `permute` inside `cross_entropy`, the composite
        /// operator the program called).
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
    /// A data file could not be parsed.
    #[error(transparent)]
    Data(#[from] DataError),
    /// A checkpoint does not fit a module: the missing, unexpected, wrong-shape,
    /// wrong-type and non-finite entries, by name.
    #[error("load_state_dict: {0}")]
    StateDict(Box<StateDictMismatch>),
    /// Reading a file failed.
    #[error("reading {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Writing a file failed (the previous file at that path, if any, is intact when
    /// the file is written atomically, as checkpoints are).
    #[error("writing {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A module drew from a random stream that has no key: its model was not seeded with
    /// `ModuleExt::seed_streams` (or restored from a training checkpoint), or the module
    /// does not report the stream in `Module::visit`.
    #[error(
        "{owner}: its random stream has no seed; call `seed_streams(seed)` on the model after \
         building it (a module must report each RandomStream in `Module::visit`)"
    )]
    UnseededStream {
        /// The module that drew.
        owner: &'static str,
    },
    /// A backend outside the root workspace could not be built or failed (a Vulkan
    /// backend without an adapter, or on a device that cannot give a mode's bits); its
    /// own error is the source, which `downcast_ref` recovers.
    #[error("{backend}: {source}")]
    Backend {
        /// The backend, e.g. `wgpu`.
        backend: &'static str,
        /// The backend's own error.
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

impl From<crate::trace::ReadError> for Error {
    fn from(e: crate::trace::ReadError) -> Self {
        Error::Trace(e.into())
    }
}

impl Error {
    /// An invalid-argument error ([`exactgrad_core::Error::InvalidArgument`]): `op`
    /// rejected `arg` because of `msg`.
    pub fn invalid(op: &'static str, arg: &'static str, msg: impl Into<String>) -> Self {
        Error::Core(exactgrad_core::Error::invalid(op, arg, msg))
    }

    /// A [`Error::Write`] error for `path`.
    pub fn write(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Write {
            path: path.into(),
            source,
        }
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

/// Why a data file was rejected. Every variant names what was expected and what was found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DataError {
    /// The file ends before the part that its header announces.
    #[error("{format} file truncated: {part} needs {needed} bytes in total, the file has {got}")]
    Truncated {
        /// The file format.
        format: &'static str,
        /// The part that does not fit (header, pixels, labels, checksum).
        part: &'static str,
        /// Bytes needed up to the end of that part.
        needed: usize,
        /// Bytes the file has.
        got: usize,
    },
    /// Bytes follow the checksum.
    #[error(
        "{format} file has {extra} unexpected bytes after its end ({expected} bytes expected)"
    )]
    TrailingBytes {
        /// The file format.
        format: &'static str,
        /// The size the header implies.
        expected: usize,
        /// Bytes beyond it.
        extra: usize,
    },
    /// The file does not start with the format's magic bytes.
    #[error("not a {format} file: magic bytes {found:02x?}, expected {expected:02x?}")]
    BadMagic {
        /// The file format.
        format: &'static str,
        /// The first bytes of the file.
        found: Vec<u8>,
        /// The magic of the format.
        expected: &'static [u8],
    },
    /// A format version this build does not read.
    #[error(
        "{format} file version {found} is not supported (this build reads version {supported})"
    )]
    UnsupportedVersion {
        /// The file format.
        format: &'static str,
        /// The version in the file.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// A header field with an impossible value.
    #[error("{format} file header: {message}")]
    BadHeader {
        /// The file format.
        format: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The stored checksum differs from the one of the contents.
    #[error("{format} file is corrupt: stored checksum {stored:#018x}, contents hash to {computed:#018x}")]
    Checksum {
        /// The file format.
        format: &'static str,
        /// The checksum stored in the file.
        stored: u64,
        /// The checksum of the bytes read.
        computed: u64,
    },
    /// The digest a file stores differs from the digest of its contents.
    #[error("{format} file is damaged: it stores the {algorithm} digest {stored}, its contents hash to {computed}")]
    DigestMismatch {
        /// The file format.
        format: &'static str,
        /// The digest's algorithm (`SHA-256`).
        algorithm: &'static str,
        /// The digest stored in the file (hexadecimal).
        stored: String,
        /// The digest of the bytes read (hexadecimal).
        computed: String,
    },
    /// A value outside the range the header declares.
    #[error("{format} file: {what} {value} of item {item} is out of range (maximum {max})")]
    OutOfRange {
        /// The file format.
        format: &'static str,
        /// Which kind of value (pixel, label).
        what: &'static str,
        /// The item (image) it belongs to.
        item: usize,
        /// The value found.
        value: u32,
        /// The largest value allowed.
        max: u32,
    },
}

/// Why a file cannot be loaded into a module: every problem, each named.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StateDictMismatch {
    /// Entries of the module missing from the file (strict loading).
    pub missing: Vec<String>,
    /// Entries of the file the module does not have (strict loading).
    pub unexpected: Vec<String>,
    /// Entries whose shape differs: name, shape in the file, shape in the module.
    pub wrong_shape: Vec<(String, Vec<usize>, Vec<usize>)>,
    /// Entries whose element type does not fit: name, type in the file, kind the module
    /// needs (`"floating-point"` for parameters and float buffers, `"integer"` for
    /// integer buffers).
    pub wrong_dtype: Vec<(String, String, &'static str)>,
    /// Entries holding NaN or ±∞ (unless allowed): name and index of the first one.
    pub non_finite: Vec<(String, usize)>,
}

impl StateDictMismatch {
    /// Whether there is no problem.
    pub fn is_empty(&self) -> bool {
        self.missing.is_empty()
            && self.unexpected.is_empty()
            && self.wrong_shape.is_empty()
            && self.wrong_dtype.is_empty()
            && self.non_finite.is_empty()
    }
}

impl std::fmt::Display for StateDictMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if !self.missing.is_empty() {
            parts.push(format!("missing entries {:?}", self.missing));
        }
        if !self.unexpected.is_empty() {
            parts.push(format!("unexpected entries {:?}", self.unexpected));
        }
        for (n, file, module) in &self.wrong_shape {
            parts.push(format!(
                "entry `{n}` has shape {file:?}, the module's has shape {module:?}"
            ));
        }
        for (n, d, want) in &self.wrong_dtype {
            parts.push(format!(
                "entry `{n}` has element type {d}, not a {want} type"
            ));
        }
        for (n, i) in &self.non_finite {
            parts.push(format!(
                "entry `{n}` holds a non-finite value at element {i}"
            ));
        }
        f.write_str(&parts.join("; "))
    }
}
