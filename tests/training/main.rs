//! Training loops end to end: the digits and character-level GPT examples, checkpoints
//! that resume bit for bit, and the known defects that must not crash. One test binary:
//! `--test training`, a module's tests by filter (`cargo test --release --test training
//! resume::`).

mod nn_char_gpt;
mod nn_digits;
mod no_crash;
mod resume;
