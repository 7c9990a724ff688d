//! The [`Backend`] trait: storage and the kernels every operator is built from.
//!
//! A backend is a value (cheap to clone) that tensors carry; it names its storage type and
//! its compute mode and provides kernels over slices with explicit layouts. Kernels never
//! allocate their outputs (the caller passes them) and never read global state. Outputs
//! are contiguous and row-major. The bits each kernel must produce in exact mode are
//! defined by `ScalarRefBackend` (crate `exactgrad-backends`) and written down in
//! `docs/arithmetic.md`.

use crate::mode::ComputeMode;
pub use crate::ops::{BinaryOp, UnaryOp};
use crate::shape::Layout;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Debug;

/// Sizes and element strides of a batched matrix product `out[b] = a[b] · b[b]` with
/// `a[b]: m×k`, `b[b]: k×n` and a contiguous `out` of shape `[batch, m, n]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulSpec {
    /// Number of matrices in the batch.
    pub batch: usize,
    /// Rows of each `a` and of each output.
    pub m: usize,
    /// Columns of `a`, rows of `b`: the reduction length.
    pub k: usize,
    /// Columns of each `b` and of each output.
    pub n: usize,
    /// Storage offset of `a[0][0][0]`.
    pub a_offset: usize,
    /// Strides of `a`: batch, row, column (a batch stride of 0 repeats one matrix).
    pub a_strides: [usize; 3],
    /// Storage offset of `b[0][0][0]`.
    pub b_offset: usize,
    /// Strides of `b`: batch, row, column.
    pub b_strides: [usize; 3],
}

/// A compute backend: storage type, mode and kernels.
///
/// Implementations must produce, in [`ComputeMode::Exact`], exactly the bits of
/// `ScalarRefBackend` for every kernel (the conformance kit checks this), and in any mode
/// results that do not depend on the number of threads.
pub trait Backend: Clone + Send + Sync + Debug + 'static {
    /// An owned buffer of f32 elements.
    type Storage: AsRef<[f32]> + AsMut<[f32]> + Send + Sync + Debug + 'static;

    /// A short name for reports, such as `scalar-ref` or `exact/avx2`.
    fn name(&self) -> String;

    /// The arithmetic contract this backend's kernels follow.
    fn mode(&self) -> ComputeMode;

    /// A zero-filled buffer of `len` elements.
    fn zeros(&self, len: usize) -> Self::Storage;

    /// A buffer holding `data`.
    fn storage_from_vec(&self, data: Vec<f32>) -> Self::Storage;

    /// Gathers the elements of `src` under `layout` into `out` in row-major order.
    /// Copies bits exactly (no canonicalisation).
    fn copy_strided(&self, src: &[f32], layout: &Layout, out: &mut [f32]);

    /// `out[i] = op(x[i])` over contiguous slices of equal length.
    fn unary(&self, op: UnaryOp, x: &[f32], out: &mut [f32]);

    /// The backward rule of `op`: `out[i] = g[i] · op'(…)`, given the forward input `x`
    /// and output `y` (both contiguous, same length as `g`).
    fn unary_backward(&self, op: UnaryOp, x: &[f32], y: &[f32], g: &[f32], out: &mut [f32]);

    /// `out = op(a, b)` where `la` and `lb` are layouts already broadcast to the output
    /// shape (stride 0 along broadcast dimensions); `out` is contiguous.
    fn binary(&self, op: BinaryOp, a: &[f32], la: &Layout, b: &[f32], lb: &Layout, out: &mut [f32]);

    /// `out = cond != 0 ? a : b` with all three layouts broadcast to the output shape.
    #[allow(clippy::too_many_arguments)]
    fn select(
        &self,
        cond: &[f32],
        lc: &Layout,
        a: &[f32],
        la: &Layout,
        b: &[f32],
        lb: &Layout,
        out: &mut [f32],
    );

    /// Sums `x` under `layout` over the dimensions flagged in `reduce`, writing the
    /// remaining dimensions row-major into `out`. Each output accumulates in f64, its
    /// reduced elements in increasing row-major order of their index, from +0, rounded
    /// once to f32.
    fn sum(&self, x: &[f32], layout: &Layout, reduce: &[bool], out: &mut [f32]);

    /// The batched matrix product of [`MatmulSpec`]: each output is one f32 accumulator
    /// starting at +0, `k` increasing; exact mode rounds the product and the sum
    /// separately, fast mode may fuse them.
    fn matmul(&self, spec: &MatmulSpec, a: &[f32], b: &[f32], out: &mut [f32]);

    /// Softmax (or log-softmax when `log`) of each row of a contiguous `rows × cols` `x`.
    fn softmax(&self, x: &[f32], rows: usize, cols: usize, log: bool, out: &mut [f32]);

    /// The backward rule of [`Backend::softmax`] given its output `y` and the incoming
    /// gradient `g` (both contiguous `rows × cols`).
    #[allow(clippy::too_many_arguments)]
    fn softmax_backward(
        &self,
        y: &[f32],
        g: &[f32],
        rows: usize,
        cols: usize,
        log: bool,
        out: &mut [f32],
    );
}
