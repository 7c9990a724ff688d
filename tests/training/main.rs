//! Training loops end to end: the digits and character-level GPT examples, checkpoints
//! that resume bit for bit, and the known defects that must not crash. A module of the `suite` test binary (`tests/suite.rs`);
//! a module's tests by filter (`cargo test --release --test suite training::resume::`).

mod hostile_checkpoints;
mod nn_char_gpt;
mod nn_digits;
mod no_crash;
mod resume;

/// The harness's name of the test `test` in the module `module` (a `module_path!()`): the
/// module's path without the crate, for running that one test again in a child process.
fn test_name(module: &str, test: &str) -> String {
    let path = module.split_once("::").map_or("", |(_, rest)| rest);
    format!("{path}::{test}")
}
