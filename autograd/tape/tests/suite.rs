//! The integration tests of the tape, in one test binary: each file of `tests/` is a module
//! here, and `cargo test -p exactgrad-tape --release --test suite <module>::` runs one of
//! them (`exact`, `fuzz`, `gradcheck`, `record_sizes`, `status`). One binary compiles and
//! links the tape and the eager engine they compare with once instead of once per file.
//! `train.rs` stays a binary of its own: its global allocator counts every allocation of
//! its process.

#[path = "exact.rs"]
mod exact;
#[path = "fuzz.rs"]
mod fuzz;
#[path = "gradcheck.rs"]
mod gradcheck;
#[path = "record_sizes.rs"]
mod record_sizes;
#[path = "status.rs"]
mod status;
