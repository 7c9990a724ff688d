//! Invalid arguments: every kernel must refuse buffers and layouts that do not agree
//! (with an error, never a panic, never a read or write outside its buffers).
//!
//! [`check_invalid_arguments`] calls each kernel with hand-built arguments a caller could
//! pass through the safe API: output buffers of the wrong length, layouts whose offset
//! or strides reach past the buffer (also by overflowing `usize`), strides that do not
//! match the rank, mismatched broadcast shapes, `rows × cols` that overflows, and
//! product specs whose operands do not fit their buffers; for the training kernels also
//! specs whose sizes overflow or do not fit, argmax indices outside their plane, a
//! dropout probability outside `[0, 1]` and missing optimizer state. Each call runs under
//! `catch_unwind`; it passes when the kernel returns an error.
//!
//! The probes are one flat list per family, a few per kernel, each a closure with its
//! hand-built arguments: `kernels.rs` (copy, element-wise, select, sums, products,
//! softmax), `cells.rs` (the recurrent cells), `training.rs` (the training kernels); this
//! file holds the harness that runs them.

use exactgrad_core::backend::MatmulSpec;
use exactgrad_core::kernels::{
    AdamSpec, AdaptivePool2dSpec, AttentionScoresSpec, AvgPool2dSpec, Col2imSpec, NormGrads,
    NormParam, NormSpec, NormStats, Pool2dSpec, ScoreMask, SgdSpec,
};
use exactgrad_core::recurrent::{
    CellShape, GruCellGradInputs, GruCellGradOutputs, GruCellInputs, GruCellOutputs,
    LstmCellGradInputs, LstmCellGradOutputs, LstmCellInputs, LstmCellOutputs,
};
use exactgrad_core::{Backend, BinaryOp, Layout, Shape, UnaryOp, ViewMutOf, ViewOf};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::string::String;
use std::sync::Arc;
use std::vec;
use std::vec::Vec;

mod cells;
mod kernels;
mod training;

use cells::*;
use kernels::*;
use training::*;

/// A call of one kernel on a given output buffer (a view of the backend's storage).
pub(super) type KernelCall<B> =
    Box<dyn for<'x> Fn(ViewMutOf<'x, B>) -> Result<(), exactgrad_core::Error>>;

/// One invalid call that must be refused.
pub(super) struct Probe<B: Backend> {
    what: &'static str,
    run: KernelCall<B>,
}

pub(super) fn layout(shape: &[usize], strides: &[usize], offset: usize) -> Layout {
    Layout {
        shape: Shape::from(shape),
        strides: strides.to_vec(),
        offset,
    }
}

/// Normalisation statistics of two groups, each a view of the first two elements of `d`.
pub(super) fn stats<B: Backend>(d: ViewOf<'_, B>) -> NormStats<'_, B::Views> {
    NormStats {
        mean: B::slice(d, 0..2),
        corr: B::slice(d, 0..2),
        rstd: B::slice(d, 0..2),
    }
}

/// Runs every invalid call on `backend`; returns how many were refused, or a message
/// naming the first call that was accepted or panicked.
pub fn check_invalid_arguments<B: Backend>(backend: &B) -> Result<usize, String> {
    let all = probes(backend).map_err(|e| {
        format!(
            "backend {} could not create the probes' buffers: {e}",
            backend.name()
        )
    })?;
    for p in &all {
        let mut out = backend.zeros(256).map_err(|e| {
            format!(
                "backend {} could not create an output buffer: {e}",
                backend.name()
            )
        })?;
        match catch_unwind(AssertUnwindSafe(|| (p.run)(B::view_mut(&mut out)))) {
            Ok(Err(_)) => {}
            Ok(Ok(())) => {
                return Err(format!(
                    "backend {} accepted invalid arguments: {}",
                    backend.name(),
                    p.what
                ))
            }
            Err(_) => {
                return Err(format!(
                    "backend {} panicked on invalid arguments instead of returning an error: {}",
                    backend.name(),
                    p.what
                ))
            }
        }
    }
    Ok(all.len())
}

impl<B: Backend> core::fmt::Debug for Probe<B> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.what)
    }
}
