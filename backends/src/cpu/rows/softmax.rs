//! Softmax and log-softmax of whole rows and their backward rules: the row maximum
//! (lane-wise, then across lanes), `exp(x − m)` per lane, the f64 normalisers of eight
//! rows at a time ([`RowSum::sum8`], [`RowSum::dot8`]) and the final division or
//! subtraction per lane.

use super::dims::round_up;
use super::{RowMode, WORK_PER_CHUNK};
use crate::cpu::elementwise::finish;
use crate::cpu::simd::SimdLane;
use crate::cpu::simd64::RowSum;
use crate::cpu::{ComputeContext, Isa};
use crate::lane::{Madd, Pair};
use crate::scalar::ModeSpec;
use crate::transcendental::generic as tr;
use exactgrad_core::CANONICAL_NAN;

/// `scalar::row_max` of `x`: the largest element plus +0, the canonical NaN if any is
/// NaN (order-independent, so computed lane-wise and then across lanes).
#[inline(always)]
fn row_max<L: SimdLane>(x: &[f32]) -> f32 {
    let (n, w) = (x.len(), L::WIDTH);
    assert!(w <= 16, "row_max: lane wider than 16");
    let mut lanes = [f32::NEG_INFINITY; 16];
    let mut i = 0;
    if n >= w {
        let mut m = L::splat(f32::NEG_INFINITY);
        while i + w <= n {
            // SAFETY: i + w <= n = x.len() bounds the load; the lane's target features are
            // the calling instantiation's (`cpu::simd`).
            let v = unsafe { L::load(x.as_ptr().add(i)) };
            // A NaN lane stays NaN: nothing compares greater than it.
            m = L::select(L::mask_or(v.gt(m), v.is_nan()), v, m);
            i += w;
        }
        // SAFETY: `lanes` holds 16 >= w elements (asserted above); the lane's target
        // features are the calling instantiation's (`cpu::simd`).
        unsafe { m.store(lanes.as_mut_ptr()) };
    }
    let mut m = f32::NEG_INFINITY;
    for &v in lanes[..w].iter().chain(&x[i..]) {
        if v.is_nan() {
            return CANONICAL_NAN;
        }
        if v > m {
            m = v;
        }
    }
    m + 0.0
}

/// `out[j] = exp(x[j] − m)` (the mode's polynomial).
#[inline(always)]
fn exp_shifted<L: SimdLane, M: ModeSpec + Madd<L> + Madd<Pair<L>>>(
    x: &[f32],
    m: f32,
    out: &mut [f32],
) {
    let n = x.len();
    assert_eq!(out.len(), n, "softmax: row lengths");
    let (w, mv) = (L::WIDTH, L::splat(m));
    let mut j = 0;
    while j + 2 * w <= n {
        // SAFETY: j + 2w <= n = x.len() = out.len() bounds both slices; the lane's target
        // features are the calling instantiation's (`cpu::simd`).
        unsafe {
            let (p, q) = (x.as_ptr().add(j), out.as_mut_ptr().add(j));
            let v = Pair(L::load(p).sub(mv), L::load(p.add(w)).sub(mv));
            let r = tr::exp::<Pair<L>, M>(v);
            r.0.store(q);
            r.1.store(q.add(w));
        }
        j += 2 * w;
    }
    while j + w <= n {
        // SAFETY: j + w <= n = x.len() = out.len() bounds both slices; the lane's target
        // features are the calling instantiation's (`cpu::simd`).
        unsafe {
            let v = L::load(x.as_ptr().add(j));
            tr::exp::<L, M>(v.sub(mv)).store(out.as_mut_ptr().add(j));
        }
        j += w;
    }
    for j in j..n {
        out[j] = tr::exp::<f32, M>(x[j] - m);
    }
}

/// The pointers to eight rows of `cols` elements starting at row `r` of `base`, the rows
/// past `rows` replaced by the last one (their sums are computed and discarded).
#[inline(always)]
fn row_ptrs(base: *const f32, r: usize, nb: usize, cols: usize) -> [*const f32; 8] {
    // No access here (`wrapping_add`); the callers' reads are justified where they happen:
    // rows r..r+nb lie inside the buffer.
    core::array::from_fn(|i| base.wrapping_add((r + i.min(nb - 1)) * cols))
}

/// Softmax (or log-softmax) of the whole rows of `x` (`cols` elements each), as
/// `scalar::softmax_row_in` / `log_softmax_row_in` followed by `M::out`.
#[inline(always)]
pub(super) fn softmax_rows<L: RowSum, M: ModeSpec + Madd<L> + Madd<Pair<L>>>(
    x: &[f32],
    out: &mut [f32],
    cols: usize,
    log: bool,
) {
    assert!(
        cols > 0 && x.len() == out.len() && x.len() / cols * cols == x.len(),
        "softmax: lengths"
    );
    let rows = x.len() / cols;
    let w = L::WIDTH;
    let mut r = 0;
    while r < rows {
        let nb = (rows - r).min(8);
        let mut m = [0.0f32; 8];
        for (i, mi) in m.iter_mut().enumerate().take(nb) {
            let s = (r + i) * cols..(r + i + 1) * cols;
            *mi = row_max::<L>(&x[s.clone()]);
            exp_shifted::<L, M>(&x[s.clone()], *mi, &mut out[s]);
        }
        let mut acc = [0.0f64; 8];
        let p = row_ptrs(out.as_ptr(), r, nb, cols);
        // SAFETY: every pointer starts one of rows r..r+nb of `cols` elements, inside `out`
        // (rows·cols = out.len()); the lane's target features are the calling
        // instantiation's (`cpu::simd`).
        unsafe { L::sum8(&mut acc, &p, cols) };
        for i in 0..nb {
            let s = acc[i] as f32;
            let (xs, os) = (
                &x[(r + i) * cols..(r + i + 1) * cols],
                &mut out[(r + i) * cols..(r + i + 1) * cols],
            );
            let mut j = 0;
            if log {
                let ls = tr::log::<f32, M>(s);
                let (mv, lv) = (L::splat(m[i]), L::splat(ls));
                while j + w <= cols {
                    // SAFETY: j + w <= cols bounds both rows (`cols` elements each); the
                    // lane's target features are the calling instantiation's (`cpu::simd`).
                    unsafe {
                        let v = L::load(xs.as_ptr().add(j));
                        finish::<L, M>(v.sub(mv).sub(lv)).store(os.as_mut_ptr().add(j));
                    }
                    j += w;
                }
                for j in j..cols {
                    os[j] = M::out((xs[j] - m[i]) - ls);
                }
            } else {
                let sv = L::splat(s);
                while j + w <= cols {
                    // SAFETY: j + w <= cols bounds the row (`cols` elements); the lane's
                    // target features are the calling instantiation's (`cpu::simd`).
                    unsafe {
                        let e = L::load(os.as_ptr().add(j));
                        finish::<L, M>(e.div(sv)).store(os.as_mut_ptr().add(j));
                    }
                    j += w;
                }
                for o in &mut os[j..] {
                    *o = M::out(*o / s);
                }
            }
        }
        r += nb;
    }
}

/// Backward of [`softmax_rows`] over whole rows: `scalar::softmax_row_backward` or
/// `log_softmax_row_backward_in`, then `M::out`.
#[inline(always)]
pub(super) fn softmax_backward_rows<L: RowSum, M: ModeSpec + Madd<L>>(
    y: &[f32],
    g: &[f32],
    out: &mut [f32],
    cols: usize,
    log: bool,
) {
    assert!(
        cols > 0
            && y.len() == out.len()
            && g.len() == out.len()
            && out.len() / cols * cols == out.len(),
        "softmax_backward: lengths"
    );
    let rows = out.len() / cols;
    let w = L::WIDTH;
    let mut r = 0;
    while r < rows {
        let nb = (rows - r).min(8);
        let mut acc = [0.0f64; 8];
        let pg = row_ptrs(g.as_ptr(), r, nb, cols);
        if log {
            // SAFETY: every pointer starts one of rows r..r+nb of `cols` elements, inside
            // `g` (rows·cols = g.len()); the lane's target features are the calling
            // instantiation's (`cpu::simd`).
            unsafe { L::sum8(&mut acc, &pg, cols) };
        } else {
            let py = row_ptrs(y.as_ptr(), r, nb, cols);
            // SAFETY: every pointer starts one of rows r..r+nb of `cols` elements, inside
            // `y` or `g` (rows·cols = their lengths); the lane's target features are the
            // calling instantiation's (`cpu::simd`).
            unsafe { L::dot8(&mut acc, &py, &pg, cols) };
        }
        for (i, &a) in acc.iter().enumerate().take(nb) {
            let d = a as f32;
            let s = (r + i) * cols..(r + i + 1) * cols;
            let (ys, gs, os) = (&y[s.clone()], &g[s.clone()], &mut out[s]);
            let dv = L::splat(d);
            let mut j = 0;
            while j + w <= cols {
                // SAFETY: j + w <= cols bounds the three rows (`cols` elements each); the
                // lane's target features are the calling instantiation's (`cpu::simd`).
                unsafe {
                    let yv = L::load(ys.as_ptr().add(j));
                    let gv = L::load(gs.as_ptr().add(j));
                    let v = if log {
                        gv.sub(tr::exp::<L, M>(yv).mul(dv))
                    } else {
                        yv.mul(gv.sub(dv))
                    };
                    finish::<L, M>(v).store(os.as_mut_ptr().add(j));
                }
                j += w;
            }
            for j in j..cols {
                os[j] = M::out(if log {
                    gs[j] - tr::exp::<f32, M>(ys[j]) * d
                } else {
                    ys[j] * (gs[j] - d)
                });
            }
        }
        r += nb;
    }
}

/// Rows per parallel chunk of a row kernel: about [`WORK_PER_CHUNK`] elements, a
/// multiple of the eight rows the f64 sums advance together.
fn rows_per_chunk(cols: usize) -> usize {
    round_up((WORK_PER_CHUNK / cols.max(1)).max(1), 8)
}

/// Softmax (or log-softmax) of each row, as
/// [`RefKernels::softmax`](crate::scalar_ref::RefKernels::softmax).
///
/// # Safety
/// `isa.is_supported(M::MODE)` must hold on this CPU.
pub(crate) unsafe fn softmax<M: ModeSpec>(
    isa: Isa,
    ctx: &ComputeContext,
    x: &[f32],
    rows: usize,
    cols: usize,
    log: bool,
    out: &mut [f32],
) {
    let n = rows.checked_mul(cols).expect("softmax: size overflows");
    assert!(x.len() == n && out.len() == n, "softmax: lengths");
    if n == 0 {
        return;
    }
    let chunk = rows_per_chunk(cols) * cols;
    by_mode!(M, Mo => {
        // SAFETY: the caller guarantees `isa.is_supported(M::MODE)`, and `Mo` is `M`'s
        // concrete marker (same mode).
        unsafe { softmax_on::<Mo>(isa, ctx, x, cols, log, out, chunk) }
    })
}

/// Runs [`softmax`]'s kernel over the chunks of `out` on `ctx`.
///
/// # Safety
/// `isa.is_supported(M::MODE)` must hold on this CPU.
unsafe fn softmax_on<M: RowMode>(
    isa: Isa,
    ctx: &ComputeContext,
    x: &[f32],
    cols: usize,
    log: bool,
    out: &mut [f32],
    chunk: usize,
) {
    ctx.for_each_chunk(out, chunk, |ci, o| {
        let s = ci * chunk;
        on_isa!(isa, M, softmax(&x[s..s + o.len()], o, cols, log));
    });
}

/// Backward of [`softmax`], as
/// [`RefKernels::softmax_backward`](crate::scalar_ref::RefKernels::softmax_backward).
///
/// # Safety
/// `isa.is_supported(M::MODE)` must hold on this CPU.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn softmax_backward<M: ModeSpec>(
    isa: Isa,
    ctx: &ComputeContext,
    y: &[f32],
    g: &[f32],
    rows: usize,
    cols: usize,
    log: bool,
    out: &mut [f32],
) {
    let n = rows
        .checked_mul(cols)
        .expect("softmax_backward: size overflows");
    assert!(
        y.len() == n && g.len() == n && out.len() == n,
        "softmax_backward: lengths"
    );
    if n == 0 {
        return;
    }
    let chunk = rows_per_chunk(cols) * cols;
    by_mode!(M, Mo => {
        // SAFETY: the caller guarantees `isa.is_supported(M::MODE)`, and `Mo` is `M`'s
        // concrete marker (same mode).
        unsafe { softmax_backward_on::<Mo>(isa, ctx, y, g, cols, log, out, chunk) }
    })
}

/// Runs [`softmax_backward`]'s kernel over the chunks of `out` on `ctx`.
///
/// # Safety
/// `isa.is_supported(M::MODE)` must hold on this CPU.
#[allow(clippy::too_many_arguments)]
unsafe fn softmax_backward_on<M: RowMode>(
    isa: Isa,
    ctx: &ComputeContext,
    y: &[f32],
    g: &[f32],
    cols: usize,
    log: bool,
    out: &mut [f32],
    chunk: usize,
) {
    ctx.for_each_chunk(out, chunk, |ci, o| {
        let s = ci * chunk;
        let e = s + o.len();
        on_isa!(isa, M, softmax_backward(&y[s..e], &g[s..e], o, cols, log));
    });
}
