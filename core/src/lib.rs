//! Foundation types of exactgrad: shapes and strided layouts, the [`Backend`] trait that
//! every compute backend implements, the [`ComputeMode`], the crate's error type, the
//! documented gradient hash and a counter-based random number generator whose output is
//! the same on every platform.
//!
//! The crate is `no_std`. The `alloc` feature enables the heap-backed types (shapes,
//! layouts, the backend trait); `std` (the default) implies `alloc`.
#![cfg_attr(not(feature = "std"), no_std)]
#![warn(missing_docs)]
#![forbid(unsafe_code)]

#[cfg(feature = "alloc")]
extern crate alloc;

#[cfg(feature = "alloc")]
pub mod backend;
#[cfg(feature = "alloc")]
pub mod check;
pub mod error;
pub mod hash;
#[cfg(feature = "alloc")]
pub mod kernels;
pub mod memory;
pub mod mode;
pub mod ops;
#[cfg(feature = "alloc")]
pub mod recurrent;
pub mod rng;
#[cfg(feature = "alloc")]
pub mod shape;
#[cfg(feature = "alloc")]
pub mod view;

#[cfg(feature = "alloc")]
pub use backend::{Backend, BackendImpl, Checked, ViewMutOf, ViewOf};
pub use error::{Error, Result};
pub use hash::{BlockLanes, GradHasher, TraceHasher};
pub use memory::{MemoryPool, PoolStats};
pub use mode::ComputeMode;
pub use ops::{BackwardReads, BinaryOp, UnaryOp};
pub use rng::Philox;
#[cfg(feature = "alloc")]
pub use shape::{Layout, Shape, MAX_ELEMENTS};
#[cfg(feature = "alloc")]
pub use view::{HostViews, ViewFamily, ViewLen};

/// The canonical NaN that exact mode writes for every NaN result (bit pattern 0x7FC00000).
pub const CANONICAL_NAN: f32 = f32::from_bits(0x7FC0_0000);
