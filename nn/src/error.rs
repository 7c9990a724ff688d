//! The error type of the nn crate.

use std::path::PathBuf;

/// Result type of the nn crate.
pub type Result<T, E = Error> = core::result::Result<T, E>;

/// An error from a module, an optimizer, a data set or a loader.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A tensor operation or the engine failed (shapes, arguments, backward).
    #[error(transparent)]
    Autograd(#[from] exactgrad_autograd::Error),
    /// A backend was asked for an instruction-set path this CPU lacks
    /// (`ExactBackend::with_isa`, `FastBackend::with_isa`).
    #[error(transparent)]
    UnsupportedIsa(#[from] exactgrad_backends::cpu::UnsupportedIsa),
    /// A data file could not be parsed.
    #[error(transparent)]
    Data(#[from] DataError),
    /// An argument outside its valid range (hyper-parameters, sizes, shapes of
    /// parameters given to a module).
    #[error("{op}: invalid `{arg}`: {message}")]
    InvalidArgument {
        /// The function or type that rejected the argument.
        op: &'static str,
        /// The argument at fault.
        arg: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// A checkpoint does not fit a module: the missing, unexpected, wrong-shape,
    /// wrong-type and non-finite entries, by name.
    #[error("load_state_dict: {0}")]
    StateDict(Box<crate::checkpoint::StateDictMismatch>),
    /// Reading a file failed.
    #[error("reading {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A module drew from a random stream that has no key: its model was not seeded with
    /// [`ModuleExt::seed_streams`](crate::ModuleExt::seed_streams) (or restored from a
    /// training checkpoint), or the module does not report the stream in
    /// [`Module::visit`](crate::Module::visit).
    #[error(
        "{owner}: its random stream has no seed; call `seed_streams(seed)` on the model after \
         building it (a module must report each RandomStream in `Module::visit`)"
    )]
    UnseededStream {
        /// The module that drew.
        owner: &'static str,
    },
    /// Writing a file failed (the previous file at that path, if any, is intact).
    #[error("writing {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

impl From<exactgrad_core::Error> for Error {
    fn from(e: exactgrad_core::Error) -> Self {
        Error::Autograd(e.into())
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
