//! The integration tests of the engine (`engine`: the tape, backward and gradient
//! accumulation; `scope`: activation scopes), in one test binary: `cargo test -p
//! exactgrad-autograd --release --test engine`, a module's tests by filter
//! (`... --test engine scope::`).

mod engine;
mod scope;
