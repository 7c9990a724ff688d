//! The error type: the one of the autograd crate, re-exported, so that tensor operations
//! and the functions of this crate return the same [`Result`] (`docs/api.md`, "Errors").

pub use exactgrad_autograd::error::{DataError, Error, Result, StateDictMismatch};
