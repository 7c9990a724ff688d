//! Kernels and backends of exactgrad.
//!
//! [`ScalarRefBackend`] is the in-tree oracle: plain loops in the canonical order defined by
//! `docs/arithmetic.md`. The [`scalar`] module holds its per-element definitions, which are
//! `no_std` and allocation-free so that the arena tape reuses them, and [`transcendental`]
//! the exact polynomial functions.
//!
//! # Where things are
//!
//! | module | file(s) | what |
//! |---|---|---|
//! | [`lane`] | `src/lane.rs` | the [`Lane`](lane::Lane) trait every generic kernel is written against, the multiply-add strategies `Exact` and `Fast` |
//! | [`elementwise`] | `src/elementwise.rs` | the forward and backward formula of every element-wise operator, once, over a lane (the operators' table is `exactgrad_core::ops`) |
//! | [`transcendental`] | `src/transcendental/` | exp, log, tanh, sigmoid, erf and GELU: `generic.rs` (the algorithms), `coeffs.rs`, the scalar and fast instantiations in `mod.rs`, unit tests in `tests.rs` |
//! | [`scalar`] | `src/scalar/mod.rs` | the scalar reference definitions: `f32` formulas, sums, dot, GEMM, softmax rows, `sqrt` without std |
//! | [`scalar_ref`] | `src/scalar_ref.rs` | `ScalarRefBackend` and `FastScalarRefBackend`: plain loops over [`scalar`] |
//! | [`cpu`] | `src/cpu/` | `ExactBackend`/`FastBackend`: ISA detection and dispatch (`mod.rs`), lane types (`simd.rs`: x86-64 and NEON), f64 row sums (`simd64.rs`), element-wise loops (`elementwise.rs`), GEMM (`gemm.rs`), row kernels (`rows/`: copy, select, sum, softmax), the recurrent cells (`recurrent.rs`: LSTM and GRU steps, `docs/recurrent.md`) |
//! | [`conformance`] | `src/conformance/` | the conformance kit for any backend: `cases.rs`, `check.rs`, `report.rs`, `invalid.rs` |
//!
//! `unsafe` is confined to the SIMD kernels of [`cpu`]; every block carries a `// SAFETY:`
//! note (the lint `clippy::undocumented_unsafe_blocks` is denied), and the target-feature
//! contract those notes rest on is written in the `cpu::simd` module. That module is
//! crate-private: the lane types are reached only through the kernels and
//! [`cpu::vector_forms`], which check the CPU first, so no safe call can run an
//! instruction the CPU lacks. The exhaustive tests over all 2^32 inputs need the
//! `exhaustive` feature (see `Cargo.toml`).
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
mod sqrt;
pub mod transcendental;

#[cfg(feature = "std")]
pub use cpu::{CpuStorage, ExactBackend, FastBackend, Isa};
#[cfg(feature = "std")]
pub use scalar_ref::FastScalarRefBackend;
#[cfg(feature = "alloc")]
pub use scalar_ref::ScalarRefBackend;
