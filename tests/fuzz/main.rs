//! The property-based fuzz tests (`docs/robustness.md`): operators, views, windows,
//! modules and checkpoint files, with their shared checks in `fuzz_support`. One test
//! binary: `--test fuzz`, a module's tests by filter (`cargo test --release --test fuzz
//! fuzz_ops::`).

mod fuzz_support;

mod fuzz_checkpoint;
mod fuzz_modules;
mod fuzz_ops;
mod fuzz_views;
mod fuzz_windows;
