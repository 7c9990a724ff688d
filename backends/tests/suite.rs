//! The integration tests of the backends, in one test binary: each file of `tests/` is a
//! module here, and `cargo test -p exactgrad-backends --release --test suite <module>::`
//! runs one of them (`arithmetic_doc`, `differential`, `gemm`, `miri_kernels`, `sampled_vector`,
//! `unchecked_backend`, `wrong_backends`).
//!
//! One binary instead of one per file: each file instantiates the kernels and the
//! conformance kit for the same backends and paths, and a release build compiles those
//! instantiations (and links the kernels) once per binary; merged, these tests build in
//! about a third of the processor time. The exhaustive tests (`--features exhaustive`)
//! stay binaries of their own.

#[path = "arithmetic_doc.rs"]
mod arithmetic_doc;
#[path = "differential.rs"]
mod differential;
#[path = "gemm.rs"]
mod gemm;
#[path = "miri_kernels.rs"]
mod miri_kernels;
#[path = "sampled_vector.rs"]
mod sampled_vector;
#[path = "unchecked_backend.rs"]
mod unchecked_backend;
#[path = "wrong_backends.rs"]
mod wrong_backends;
