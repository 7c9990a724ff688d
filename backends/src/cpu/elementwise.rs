//! Element-wise lane loops over slices: every [`UnaryOp`], its backward rule and every
//! [`BinaryOp`]. The per-element formulas are those of [`crate::elementwise`], the same
//! functions the scalar reference instantiates on `f32`; the vector body instantiates
//! them on the path's lane and the scalar tail on `f32`, so both give the bits of
//! [`crate::scalar`].

use super::simd::SimdLane;
use crate::elementwise::{binary, unary, unary_backward};
use crate::lane::{Lane, Madd, Pair};
use crate::scalar::ModeSpec;
use exactgrad_core::{BinaryOp, ComputeMode, UnaryOp, CANONICAL_NAN};

/// Rewrites NaN lanes to the canonical NaN in exact mode.
#[inline(always)]
pub(crate) fn finish<L: Lane, M: ModeSpec>(v: L) -> L {
    if M::MODE == ComputeMode::Exact {
        L::select(v.is_nan(), L::splat(CANONICAL_NAN), v)
    } else {
        v
    }
}

/// `out[i] = op(x[i])`: full lanes, then the scalar tail.
#[inline(always)]
pub(crate) fn unary_slice<L: SimdLane, M: ModeSpec + Madd<L> + Madd<Pair<L>>>(
    op: UnaryOp,
    x: &[f32],
    out: &mut [f32],
) {
    let n = x.len().min(out.len());
    let w = L::WIDTH;
    let mut i = 0;
    while i + 2 * w <= n {
        // SAFETY: i + 2w <= n = min(x.len(), out.len()) bounds both slices; the lane's
        // target features are the calling instantiation's (`cpu::simd`).
        unsafe {
            let (p, q) = (x.as_ptr().add(i), out.as_mut_ptr().add(i));
            let v = Pair(L::load(p), L::load(p.add(w)));
            let r = finish::<Pair<L>, M>(unary::<Pair<L>, M>(op, v));
            r.0.store(q);
            r.1.store(q.add(w));
        }
        i += 2 * w;
    }
    while i + w <= n {
        // SAFETY: i + w <= n = min(x.len(), out.len()) bounds both slices; the lane's
        // target features are the calling instantiation's (`cpu::simd`).
        unsafe {
            let v = L::load(x.as_ptr().add(i));
            finish::<L, M>(unary::<L, M>(op, v)).store(out.as_mut_ptr().add(i));
        }
        i += w;
    }
    while i < n {
        out[i] = finish::<f32, M>(unary::<f32, M>(op, x[i]));
        i += 1;
    }
}

/// `out[i] = op'(x[i], y[i], g[i])`: full lanes, then the scalar tail.
#[inline(always)]
pub(crate) fn unary_backward_slice<L: SimdLane, M: ModeSpec + Madd<L> + Madd<Pair<L>>>(
    op: UnaryOp,
    x: &[f32],
    y: &[f32],
    g: &[f32],
    out: &mut [f32],
) {
    let n = out.len();
    assert!(
        x.len() >= n && y.len() >= n && g.len() >= n,
        "unary_backward: lengths"
    );
    let w = L::WIDTH;
    let mut i = 0;
    while i + 2 * w <= n {
        // SAFETY: i + 2w <= n = out.len(), and every input holds at least n elements
        // (asserted above); the lane's target features are the calling instantiation's
        // (`cpu::simd`).
        unsafe {
            let (xp, yp, gp) = (x.as_ptr().add(i), y.as_ptr().add(i), g.as_ptr().add(i));
            let (xv, yv, gv) = (
                Pair(L::load(xp), L::load(xp.add(w))),
                Pair(L::load(yp), L::load(yp.add(w))),
                Pair(L::load(gp), L::load(gp.add(w))),
            );
            let r = finish::<Pair<L>, M>(unary_backward::<Pair<L>, M>(op, xv, yv, gv));
            r.0.store(out.as_mut_ptr().add(i));
            r.1.store(out.as_mut_ptr().add(i + w));
        }
        i += 2 * w;
    }
    while i + w <= n {
        // SAFETY: i + w <= n = out.len(), and every input holds at least n elements
        // (asserted above); the lane's target features are the calling instantiation's
        // (`cpu::simd`).
        unsafe {
            let (xv, yv, gv) = (
                L::load(x.as_ptr().add(i)),
                L::load(y.as_ptr().add(i)),
                L::load(g.as_ptr().add(i)),
            );
            finish::<L, M>(unary_backward::<L, M>(op, xv, yv, gv)).store(out.as_mut_ptr().add(i));
        }
        i += w;
    }
    while i < n {
        out[i] = finish::<f32, M>(unary_backward::<f32, M>(op, x[i], y[i], g[i]));
        i += 1;
    }
}

/// One row of a broadcast binary operation: `a` and `b` have inner strides `sa`, `sb`
/// in {0, 1} (vectorised) or anything else (scalar loop of the same operations).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn binary_row<L: SimdLane, M: ModeSpec>(
    op: BinaryOp,
    a: &[f32],
    ia: usize,
    sa: usize,
    b: &[f32],
    ib: usize,
    sb: usize,
    out: &mut [f32],
) {
    let n = out.len();
    if n == 0 {
        return;
    }
    assert!(
        ia + (n - 1) * sa < a.len() && ib + (n - 1) * sb < b.len(),
        "binary: operand bounds"
    );
    let w = L::WIDTH;
    let mut i = 0;
    if sa <= 1 && sb <= 1 {
        let av = if sa == 0 { Some(L::splat(a[ia])) } else { None };
        let bv = if sb == 0 { Some(L::splat(b[ib])) } else { None };
        while i + w <= n {
            // SAFETY: the assertion above bounds every index ia + j·sa and ib + j·sb for j
            // < n, and i + w <= n = out.len(); the lane's target features are the calling
            // instantiation's (`cpu::simd`).
            unsafe {
                let x = av.unwrap_or_else(|| L::load(a.as_ptr().add(ia + i)));
                let y = bv.unwrap_or_else(|| L::load(b.as_ptr().add(ib + i)));
                finish::<L, M>(binary(op, x, y)).store(out.as_mut_ptr().add(i));
            }
            i += w;
        }
    }
    while i < n {
        out[i] = finish::<f32, M>(binary(op, a[ia + i * sa], b[ib + i * sb]));
        i += 1;
    }
}
