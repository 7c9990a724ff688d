//! The integration tests of the engine (`engine`: the tape, backward and gradient
//! accumulation; `scope`: activation scopes; `conv_fold`: convolutions whose items are
//! folded into one product give each item's bits; `operators`: `+ - * /` on tensors;
//! `indexing`: gather, one_hot, argmax, where_ and masked_fill), in one test binary: `cargo test -p
//! exactgrad-autograd --release --test engine`, a module's tests by filter
//! (`... --test engine scope::`).

mod conv_fold;
mod engine;
mod indexing;
mod operators;
mod scope;
