//! The integration tests of the modules, optimizers, schedulers and data loading, one
//! module per subject, in one test binary: `cargo test -p exactgrad-nn --release --test
//! nn`, a module's tests by filter (`... --test nn schedulers::`).

mod data;
mod fused_optim;
mod modules;
mod param_groups;
mod schedulers;
mod torch_oracle;
