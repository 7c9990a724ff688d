//! Row kernels of the CPU backends: softmax and log-softmax with their backward rules,
//! sums over dimensions, select and strided copies.

use super::{ComputeContext, Isa};
use crate::scalar::ModeSpec;
use crate::scalar_ref::RefKernels;
use exactgrad_core::Layout;

/// Softmax (or log-softmax) of each row, as [`RefKernels::softmax`].
pub(crate) fn softmax<M: ModeSpec>(
    isa: Isa,
    ctx: &ComputeContext,
    x: &[f32],
    rows: usize,
    cols: usize,
    log: bool,
    out: &mut [f32],
) {
    let _ = (isa, ctx);
    RefKernels::<M>::softmax(x, rows, cols, log, out)
}

/// Backward of [`softmax`], as [`RefKernels::softmax_backward`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn softmax_backward<M: ModeSpec>(
    isa: Isa,
    ctx: &ComputeContext,
    y: &[f32],
    g: &[f32],
    rows: usize,
    cols: usize,
    log: bool,
    out: &mut [f32],
) {
    let _ = (isa, ctx);
    RefKernels::<M>::softmax_backward(y, g, rows, cols, log, out)
}

/// Sum over flagged dimensions, as [`RefKernels::sum`].
pub(crate) fn sum<M: ModeSpec>(
    isa: Isa,
    ctx: &ComputeContext,
    x: &[f32],
    layout: &Layout,
    reduce: &[bool],
    out: &mut [f32],
) {
    let _ = (isa, ctx);
    RefKernels::<M>::sum(x, layout, reduce, out)
}

/// Element-wise select, as [`RefKernels::select`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn select<M: ModeSpec>(
    isa: Isa,
    ctx: &ComputeContext,
    cond: &[f32],
    lc: &Layout,
    a: &[f32],
    la: &Layout,
    b: &[f32],
    lb: &Layout,
    out: &mut [f32],
) {
    let _ = (isa, ctx);
    RefKernels::<M>::select(cond, lc, a, la, b, lb, out)
}

/// Strided gather, as [`RefKernels::copy_strided`].
pub(crate) fn copy_strided<M: ModeSpec>(
    isa: Isa,
    ctx: &ComputeContext,
    src: &[f32],
    layout: &Layout,
    out: &mut [f32],
) {
    let _ = (isa, ctx);
    RefKernels::<M>::copy_strided(src, layout, out)
}
