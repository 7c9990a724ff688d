//! Gradient checks by central differences, one module per family of operations
//! (`gradcheck_norm`, `gradcheck_attention`, `gradcheck_misc`, `gradcheck_conv`,
//! `gradcheck_rnn`; `gradcheck_ops` for the elementwise, reduction and view operations),
//! with their shared helpers in `common`. A module of the `suite` test binary
//! (`tests/suite.rs`); a module's tests by filter (`cargo test --release --test suite
//! gradcheck_conv::`).

mod common;

mod gradcheck_attention;
mod gradcheck_conv;
mod gradcheck_misc;
mod gradcheck_norm;
mod gradcheck_ops;
mod gradcheck_rnn;
