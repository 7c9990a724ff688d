//! The property-based fuzz tests (`docs/robustness.md`): operators, views, windows,
//! modules and checkpoint files, with their shared checks in `fuzz_support`. A module of
//! the `suite` test binary (`tests/suite.rs`); a module's tests by filter (`cargo test
//! --release --test suite fuzz_ops::`).

mod fuzz_support;

mod fuzz_checkpoint;
mod fuzz_modules;
mod fuzz_ops;
mod fuzz_views;
mod fuzz_windows;
