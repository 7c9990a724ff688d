//! Sums over flagged dimensions: kept and reduced dimensions merged separately, then
//! either tiles of consecutive outputs whose f64 accumulators advance one reduced element
//! at a time ([`RowSum::add_wide`], across the tile) or groups of eight outputs whose
//! contiguous runs are walked together ([`RowSum::sum8`]).

use super::dims::{round_up, Dims, RowWalk};
use super::{RowMode, WORK_PER_CHUNK};
use crate::cpu::simd64::RowSum;
use crate::cpu::{ComputeContext, Isa};
use crate::scalar::ModeSpec;
use crate::scalar_ref::RefKernels;
use exactgrad_core::Layout;

/// Outputs of a sum accumulated together in one f64 tile (strategy "columns").
const SUM_TILE: usize = 256;

/// A sum over flagged dimensions: kept and reduced dimensions merged separately.
#[derive(Clone, Copy, Debug)]
pub(super) struct SumPlan {
    kept: Dims<1>,
    red: Dims<1>,
    offset: usize,
}

impl SumPlan {
    /// Whether the kernel accumulates tiles of consecutive outputs ("columns": the
    /// innermost kept dimension is contiguous) rather than groups of eight outputs whose
    /// elements are walked run by run.
    fn columns(&self) -> bool {
        let (len, [s]) = self.kept.inner();
        self.kept.rank > 0 && s == 1 && len >= 8
    }
}

/// Outputs `first..first + out.len()` of a sum whose innermost kept dimension is
/// contiguous: tiles of up to [`SUM_TILE`] outputs, one f64 accumulator each, that add one
/// reduced element at a time in increasing order (vectorised across the tile).
#[inline(always)]
fn sum_columns<L: RowSum, M: ModeSpec>(x: &[f32], p: &SumPlan, first: usize, out: &mut [f32]) {
    let (lk, _) = p.kept.inner();
    let (lr, [sr]) = p.red.inner();
    let red_rows = p.red.rows();
    let w = L::WIDTH;
    let mut rows = RowWalk::at(&p.kept, [p.offset], first / lk);
    let mut col = first % lk;
    let mut done = 0;
    let mut acc = [0.0f64; SUM_TILE];
    while done < out.len() {
        let seg = (lk - col).min(out.len() - done);
        let mut t0 = 0;
        while t0 < seg {
            let tile = (seg - t0).min(SUM_TILE);
            let base = rows.off[0] + col + t0;
            acc[..tile].fill(0.0);
            let mut red = RowWalk::at(&p.red, [0], 0);
            for _ in 0..red_rows {
                for t in 0..lr {
                    let src = x.as_ptr().wrapping_add(base + red.off[0] + t * sr);
                    let mut j = 0;
                    while j + w <= tile {
                        // SAFETY: acc[j..j+w] is in the tile (j + w <= tile <= SUM_TILE);
                        // src + j.. + w are layout elements (extent checked by `sum`); the
                        // lane's features are those of the calling instantiation.
                        unsafe { L::add_wide(acc.as_mut_ptr().add(j), src.add(j)) };
                        j += w;
                    }
                    while j < tile {
                        // SAFETY: j < tile: `acc[j]` and the layout element `src + j` as
                        // for the full lanes above (the `f32` lane needs no feature).
                        unsafe { f32::add_wide(acc.as_mut_ptr().add(j), src.add(j)) };
                        j += 1;
                    }
                }
                red.next();
            }
            for (o, &a) in out[done + t0..done + t0 + tile]
                .iter_mut()
                .zip(&acc[..tile])
            {
                *o = M::out(a as f32);
            }
            t0 += tile;
        }
        done += seg;
        col = 0;
        rows.next();
    }
}

/// Outputs `first..first + out.len()` of a sum, eight at a time: the reduced elements of
/// each output are walked run by run (the innermost reduced dimension), the eight
/// accumulators advancing together.
#[inline(always)]
fn sum_groups<L: RowSum, M: ModeSpec>(x: &[f32], p: &SumPlan, first: usize, out: &mut [f32]) {
    let (lk, [sk]) = p.kept.inner();
    let (lr, [sr]) = p.red.inner();
    let red_rows = p.red.rows();
    let mut rows = RowWalk::at(&p.kept, [p.offset], first / lk);
    let mut col = first % lk;
    let mut done = 0;
    while done < out.len() {
        let nb = (out.len() - done).min(8);
        let mut bases = [0usize; 8];
        for b in bases.iter_mut().take(nb) {
            *b = rows.off[0] + col * sk;
            col += 1;
            if col == lk {
                col = 0;
                rows.next();
            }
        }
        for i in nb..8 {
            bases[i] = bases[nb - 1];
        }
        let mut acc = [0.0f64; 8];
        let mut red = RowWalk::at(&p.red, [0], 0);
        for _ in 0..red_rows {
            let ptrs: [*const f32; 8] =
                core::array::from_fn(|i| x.as_ptr().wrapping_add(bases[i] + red.off[0]));
            if sr == 1 {
                // SAFETY: each pointer starts a run of `lr` contiguous elements (sr = 1) of
                // the layout (the padding entries repeat the last output's run), whose
                // extent `sum` checked against `x.len()`; the lane's target features are
                // those of the instantiation that called this kernel.
                unsafe { L::sum8(&mut acc, &ptrs, lr) };
            } else {
                for t in 0..lr {
                    for (a, ptr) in acc.iter_mut().zip(&ptrs) {
                        // SAFETY: t < lr, so `ptr + t·sr` is an element of the layout,
                        // inside `x` (the extent `sum` checked).
                        *a += f64::from(unsafe { *ptr.add(t * sr) });
                    }
                }
            }
            red.next();
        }
        for (o, &a) in out[done..done + nb].iter_mut().zip(&acc) {
            *o = M::out(a as f32);
        }
        done += nb;
    }
}

/// Outputs `first..first + out.len()` of a sum.
#[inline(always)]
pub(super) fn sum_chunk<L: RowSum, M: ModeSpec>(
    x: &[f32],
    p: &SumPlan,
    first: usize,
    out: &mut [f32],
) {
    if p.columns() {
        sum_columns::<L, M>(x, p, first, out)
    } else {
        sum_groups::<L, M>(x, p, first, out)
    }
}

/// Sum over flagged dimensions, as [`RefKernels::sum`].
///
/// # Safety
/// `isa.is_supported(M::MODE)` must hold on this CPU.
pub(crate) unsafe fn sum<M: ModeSpec>(
    isa: Isa,
    ctx: &ComputeContext,
    x: &[f32],
    layout: &Layout,
    reduce: &[bool],
    out: &mut [f32],
) {
    assert_eq!(
        reduce.len(),
        layout.rank(),
        "sum: reduce flags do not match rank"
    );
    let kept_numel: usize = (0..layout.rank())
        .filter(|&d| !reduce[d])
        .map(|d| layout.shape[d])
        .product();
    assert_eq!(out.len(), kept_numel, "sum: output length");
    if out.is_empty() {
        return;
    }
    if layout.numel() == 0 {
        // Some reduced dimension is empty: every output is the empty sum, +0.
        out.fill(M::out(0.0));
        return;
    }
    assert!(
        layout.storage_extent() <= x.len(),
        "sum: layout exceeds storage"
    );
    let mut plan = SumPlan {
        kept: Dims::new(),
        red: Dims::new(),
        offset: layout.offset,
    };
    for d in 0..layout.rank() {
        let (len, s) = (layout.shape[d], layout.strides[d]);
        let room = if reduce[d] {
            plan.red.push(len, [s])
        } else {
            plan.kept.push(len, [s])
        };
        if !room {
            // The arguments were validated at the kernel's entry, so the reference loop cannot fail.
            let checked = RefKernels::<M>::sum(x, layout, reduce, out);
            debug_assert!(checked.is_ok());
            return;
        }
    }
    debug_assert_eq!(plan.kept.numel(), out.len());
    let work = plan.red.numel().max(1);
    // Whole blocks of the kernel's outputs per chunk: 64 along a contiguous kept
    // dimension (whole tiles of vectors), 8 otherwise (the groups summed together), so
    // that a sum into a few long outputs (a bias gradient: 16 channels of 32 K elements)
    // still has a chunk per thread. Each output's sum is its own, so the chunks change
    // no bit.
    let unit = if plan.columns() { 64 } else { 8 };
    let chunk = round_up((WORK_PER_CHUNK / work).max(1), unit);
    by_mode!(M, Mo => {
        // SAFETY: the caller guarantees `isa.is_supported(M::MODE)`, and `Mo` is `M`'s
        // concrete marker (same mode).
        unsafe { sum_on::<Mo>(isa, ctx, x, &plan, out, chunk) }
    })
}

/// Runs [`sum`]'s kernel over the chunks of `out` on `ctx`.
///
/// # Safety
/// `isa.is_supported(M::MODE)` must hold on this CPU.
unsafe fn sum_on<M: RowMode>(
    isa: Isa,
    ctx: &ComputeContext,
    x: &[f32],
    plan: &SumPlan,
    out: &mut [f32],
    chunk: usize,
) {
    ctx.for_each_chunk(out, chunk, |ci, o| {
        on_isa!(isa, M, sum(x, plan, ci * chunk, o));
    });
}
