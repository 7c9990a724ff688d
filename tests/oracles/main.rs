//! Results against the PyTorch oracles and the scalar reference: the conformance kit,
//! the reference models and their pinned hashes, the recurrent and decoder oracles,
//! checkpoints written by PyTorch, and the differential checks of the operators and the
//! recurrent layers across backends. A module of the `suite` test binary
//! (`tests/suite.rs`); a module's tests by filter (`cargo test --release --test suite
//! reference_models::`).

mod oracle_support;

mod checkpoint_torch;
mod conformance_kit;
mod decoder_oracle;
mod differential_ops;
mod differential_rnn;
mod reference_models;
mod rnn_oracle;
