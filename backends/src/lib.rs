//! Kernels and backends of exactgrad.
#![cfg_attr(not(feature = "std"), no_std)]
#![warn(missing_docs)]
