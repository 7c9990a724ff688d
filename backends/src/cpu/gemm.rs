//! The blocked GEMM of the CPU backends (see `docs/gemm.md`).

use super::{ComputeContext, Isa};
use crate::scalar::ModeSpec;
use crate::scalar_ref::RefKernels;
use exactgrad_core::backend::MatmulSpec;

/// The batched product of [`MatmulSpec`] on `isa`, in the canonical order of `M`.
pub(crate) fn matmul<M: ModeSpec>(
    isa: Isa,
    ctx: &ComputeContext,
    spec: &MatmulSpec,
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
) {
    let _ = (isa, ctx);
    RefKernels::<M>::matmul(spec, a, b, out)
}
