//! The integration tests of the facade, in one test binary: each subject is a module
//! whose files live in `tests/<subject>/`, and `cargo test --release --test suite
//! <subject>::` runs one subject.
//!
//! One binary instead of one per subject: every subject instantiates the operators,
//! modules and kernels for the same backends, and a release build compiles those
//! instantiations once per binary. Merged, the build of these tests takes about half the
//! processor time. The heap counting of `tests/memory/` stays a binary of its own: its
//! global allocator would count the other tests' allocations.

#[path = "fuzz/main.rs"]
mod fuzz;
#[path = "gradcheck/main.rs"]
mod gradcheck;
#[path = "oracles/main.rs"]
mod oracles;
#[path = "torch_ops/main.rs"]
mod torch_ops;
#[path = "trace/main.rs"]
mod trace;
#[path = "training/main.rs"]
mod training;
