//! Modules, losses, optimizers and data sets of exactgrad.
#![warn(missing_docs)]
