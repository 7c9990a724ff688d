//! Kernels and backends of exactgrad.
//!
//! [`ScalarRefBackend`] is the in-tree oracle: plain loops in the canonical order defined by
//! `docs/arithmetic.md`. The [`scalar`] module holds its per-element definitions, which are
//! `no_std` and allocation-free so that the arena tape reuses them, and [`transcendental`]
//! the exact polynomial functions.
#![cfg_attr(not(feature = "std"), no_std)]
#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

#[cfg(feature = "alloc")]
extern crate alloc;

#[cfg(feature = "std")]
pub mod conformance;
#[cfg(feature = "std")]
pub mod cpu;
pub mod elementwise;
pub mod lane;
pub mod scalar;
#[cfg(feature = "alloc")]
pub mod scalar_ref;
pub mod transcendental;

#[cfg(feature = "std")]
pub use cpu::{ExactBackend, FastBackend, Isa};
#[cfg(feature = "std")]
pub use scalar_ref::FastScalarRefBackend;
#[cfg(feature = "alloc")]
pub use scalar_ref::ScalarRefBackend;
