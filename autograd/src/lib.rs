//! Tensors and the reverse-mode engine of exactgrad.
#![warn(missing_docs)]
