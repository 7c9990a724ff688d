//! Element-wise select on broadcast layouts: the merged dimensions of the condition and
//! both values, rows of lanes where every inner stride is 0 or 1, a scalar loop otherwise.

use super::dims::{Dims, RowWalk};
use super::{RowMode, WORK_PER_CHUNK};
use crate::cpu::simd::SimdLane;
use crate::cpu::{ComputeContext, Isa};
use crate::scalar::ModeSpec;
use crate::scalar_ref::RefKernels;
use exactgrad_core::Layout;

/// Operands of a select: merged dimensions of the condition and both values.
#[derive(Clone, Copy, Debug)]
pub(super) struct SelectPlan {
    d: Dims<3>,
    base: [usize; 3],
}

/// Rows `first_row..` of a select (as many as fill `out`).
#[inline(always)]
pub(super) fn select_chunk<L: SimdLane>(
    c: &[f32],
    a: &[f32],
    b: &[f32],
    p: &SelectPlan,
    first_row: usize,
    out: &mut [f32],
) {
    let (n, [sc, sa, sb]) = p.d.inner();
    let w = L::WIDTH;
    let zero = L::splat(0.0);
    let mut rows = RowWalk::at(&p.d, p.base, first_row);
    for orow in out.chunks_mut(n) {
        let [ic, ia, ib] = rows.off;
        let (pc, pa, pb) = (
            c.as_ptr().wrapping_add(ic),
            a.as_ptr().wrapping_add(ia),
            b.as_ptr().wrapping_add(ib),
        );
        let mut j = 0;
        if sc <= 1 && sa <= 1 && sb <= 1 {
            while j + w <= orow.len() {
                // SAFETY: for j + w <= n every index ic + (j..j+w)·sc (likewise ia, sa and
                // ib, sb) is an element of its layout in this chunk's rows, and `select`
                // checked each layout's extent against its buffer before building the
                // plan; the lane's target features are those of the instantiation that
                // called this kernel (the target-feature contract of `cpu::simd`).
                unsafe {
                    let cv = if sc == 0 {
                        L::splat(*pc)
                    } else {
                        L::load(pc.add(j))
                    };
                    let av = if sa == 0 {
                        L::splat(*pa)
                    } else {
                        L::load(pa.add(j))
                    };
                    let bv = if sb == 0 {
                        L::splat(*pb)
                    } else {
                        L::load(pb.add(j))
                    };
                    // `c != 0` is `!(c == 0)`: true for NaN, as in the reference.
                    L::select(L::mask_not(cv.eq(zero)), av, bv).store(orow.as_mut_ptr().add(j));
                }
                j += w;
            }
        }
        for (j, o) in orow.iter_mut().enumerate().skip(j) {
            // SAFETY: j < n, so ic + j·sc, ia + j·sa and ib + j·sb are elements of their
            // layouts, inside their buffers (the extents `select` checked).
            *o = unsafe {
                if *pc.add(j * sc) != 0.0 {
                    *pa.add(j * sa)
                } else {
                    *pb.add(j * sb)
                }
            };
        }
        rows.next();
    }
}

/// Element-wise select, as [`RefKernels::select`].
///
/// # Safety
/// `isa.is_supported(M::MODE)` must hold on this CPU.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn select<M: ModeSpec>(
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
    assert_eq!(out.len(), lc.numel(), "select: output length");
    assert!(
        la.shape == lc.shape && lb.shape == lc.shape,
        "select: layouts not broadcast to one shape"
    );
    if out.is_empty() {
        return;
    }
    assert!(
        lc.storage_extent() <= cond.len()
            && la.storage_extent() <= a.len()
            && lb.storage_extent() <= b.len(),
        "select: layout exceeds storage"
    );
    let Some(d) = Dims::of(&lc.shape, [&lc.strides, &la.strides, &lb.strides]) else {
        // The arguments were validated at the kernel's entry, so the reference loop cannot fail.
        let checked = RefKernels::<M>::select(cond, lc, a, la, b, lb, out);
        debug_assert!(checked.is_ok());
        return;
    };
    let plan = SelectPlan {
        d,
        base: [lc.offset, la.offset, lb.offset],
    };
    let (inner, _) = d.inner();
    let rows = (WORK_PER_CHUNK / inner).max(1);
    by_mode!(M, Mo => {
        // SAFETY: the caller guarantees `isa.is_supported(M::MODE)`, and `Mo` is `M`'s
        // concrete marker (same mode).
        unsafe { select_on::<Mo>(isa, ctx, cond, a, b, &plan, out, rows, inner) }
    })
}

/// Runs [`select`]'s kernel over the chunks of `out` on `ctx`.
///
/// # Safety
/// `isa.is_supported(M::MODE)` must hold on this CPU.
#[allow(clippy::too_many_arguments)]
unsafe fn select_on<M: RowMode>(
    isa: Isa,
    ctx: &ComputeContext,
    c: &[f32],
    a: &[f32],
    b: &[f32],
    plan: &SelectPlan,
    out: &mut [f32],
    rows: usize,
    inner: usize,
) {
    ctx.for_each_chunk(out, rows * inner, |ci, o| {
        on_isa!(isa, M, select(c, a, b, plan, ci * rows, o));
    });
}
