//! The integration tests of the engine (`engine`: the tape, backward and gradient
//! accumulation; `scope`: activation scopes; `conv_fold`: convolutions whose items are
//! folded into one product give each item's bits; `operators`: `+ - * /` on tensors;
//! `indexing`: gather, one_hot, argmax, argmin and masked_fill;
//! `reference_gradcheck`: the gradient check against an f64 reference), in one test binary: `cargo test -p
//! exactgrad-autograd --release --test engine`, a module's tests by filter
//! (`... --test engine scope::`).

mod conv_fold;
mod engine;
mod indexing;
mod operators;
mod reference_gradcheck;
mod scope;
