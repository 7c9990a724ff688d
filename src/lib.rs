//! exactgrad: reverse-mode automatic differentiation with bit-reproducible training.
#![warn(missing_docs)]
