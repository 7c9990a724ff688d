//! Max, average and adaptive average pooling and their backward rules (reference:
//! `exactgrad_core::kernels::pool`).

use super::{canon_all, part, per_task, ranges};
use crate::cpu::{ComputeContext, Isa, SendPtr};
use alloc::vec::Vec;
use exactgrad_core::kernels::{canon, taps_inside, AdaptivePool2dSpec, AvgPool2dSpec, Pool2dSpec};
use exactgrad_core::{ComputeMode, Error, Result};

pub(crate) fn max_pool2d(
    isa: Isa,
    ctx: &ComputeContext,
    mode: ComputeMode,
    s: &Pool2dSpec,
    x: &[f32],
    out: &mut [f32],
    argmax: &mut [usize],
) -> Result<()> {
    let (hw, ohw) = (s.h * s.w, s.oh * s.ow);
    let rt = try_table(s.oh, |o| {
        taps_inside(
            o,
            s.stride[0],
            s.dilation[0],
            s.padding[0],
            s.kernel[0],
            s.h,
        )
    })?;
    let ct = try_table(s.ow, |o| {
        taps_inside(
            o,
            s.stride[1],
            s.dilation[1],
            s.padding[1],
            s.kernel[1],
            s.w,
        )
    })?;
    let (po, pa) = (SendPtr(out.as_mut_ptr()), SendPtr(argmax.as_mut_ptr()));
    // No padding and the last tap of the last window inside the input: every window
    // has all its taps.
    let inside = |o: usize, st: usize, k: usize, d: usize, size: usize| {
        o > 0
            && (o - 1)
                .checked_mul(st)
                .zip((k - 1).checked_mul(d))
                .and_then(|(a, b)| a.checked_add(b))
                .is_some_and(|v| v < size)
    };
    let interior = s.padding == [0, 0]
        && inside(s.oh, s.stride[0], s.kernel[0], s.dilation[0], s.h)
        && inside(s.ow, s.stride[1], s.kernel[1], s.dilation[1], s.w);
    let two_by_two = interior && s.kernel == [2, 2] && s.stride == [2, 2] && s.dilation == [1, 1];
    ranges(ctx, s.planes, per_task(hw), |p0, p1| {
        // SAFETY: `isa` is the backend's; the task owns planes p0..p1 of both outputs.
        unsafe {
            on_isa!(isa, {
                let out = part(po, p0 * ohw, (p1 - p0) * ohw);
                let am = part(pa, p0 * ohw, (p1 - p0) * ohw);
                for plane in p0..p1 {
                    let xp = &x[plane * hw..(plane + 1) * hw];
                    let ob = (plane - p0) * ohw;
                    if interior {
                        // Every window lies inside the input: visit the taps in order for a
                        // whole output row at once (each output keeps its own sequence).
                        for oy in 0..s.oh {
                            let orow = &mut out[ob + oy * s.ow..ob + (oy + 1) * s.ow];
                            let arow = &mut am[ob + oy * s.ow..ob + (oy + 1) * s.ow];
                            if two_by_two {
                                // The 2×2, stride-2 window: taps (0,0), (0,1), (1,0), (1,1).
                                let r0 = 2 * oy;
                                let x0 = &xp[r0 * s.w..(r0 + 1) * s.w];
                                let x1 = &xp[(r0 + 1) * s.w..(r0 + 2) * s.w];
                                // One pass over the row pair, the taps of each window
                                // in order; the tap taken so far is a number 0–3 and the
                                // input index is formed from it at the end, so that the
                                // loop vectorises (pairs of columns read as interleaved
                                // loads, compares and selects on whole lanes).
                                let w = s.w;
                                let pairs = x0.chunks_exact(2).zip(x1.chunks_exact(2));
                                let outs = orow.iter_mut().zip(arow.iter_mut());
                                for (ox, ((p0, p1), (o, a))) in pairs.zip(outs).enumerate() {
                                    let (mut best, mut t) = (p0[0], 0usize);
                                    for (v, tap) in [(p0[1], 1), (p1[0], 2), (p1[1], 3)] {
                                        let take = (v > best) | v.is_nan();
                                        best = if take { v } else { best };
                                        t = if take { tap } else { t };
                                    }
                                    *o = canon(mode, best);
                                    *a = (r0 + (t >> 1)) * w + 2 * ox + (t & 1);
                                }
                                continue;
                            }
                            for i in 0..s.kernel[0] {
                                let r = oy * s.stride[0] + i * s.dilation[0];
                                let xr = &xp[r * s.w..(r + 1) * s.w];
                                for j in 0..s.kernel[1] {
                                    let off = j * s.dilation[1];
                                    if i == 0 && j == 0 {
                                        for ox in 0..s.ow {
                                            let q = ox * s.stride[1];
                                            orow[ox] = xr[q];
                                            arow[ox] = r * s.w + q;
                                        }
                                        continue;
                                    }
                                    for ox in 0..s.ow {
                                        let q = ox * s.stride[1] + off;
                                        // SAFETY: interior windows: `q ≤ (OW − 1)·sw +
                                        // (KW − 1)·dw < W = xr.len()`.
                                        let v = *xr.get_unchecked(q);
                                        let best = orow[ox];
                                        // Bit selects: `v` when greater or NaN.
                                        let take = (v > best) | v.is_nan();
                                        let m32 = (take as u32).wrapping_neg();
                                        let m = (take as usize).wrapping_neg();
                                        orow[ox] = f32::from_bits(
                                            (v.to_bits() & m32) | (best.to_bits() & !m32),
                                        );
                                        arow[ox] = ((r * s.w + q) & m) | (arow[ox] & !m);
                                    }
                                }
                            }
                            canon_all(mode, orow);
                        }
                        continue;
                    }
                    for (oy, &(i0, i1)) in rt.iter().enumerate() {
                        for (ox, &(j0, j1)) in ct.iter().enumerate() {
                            let mut best = f32::NEG_INFINITY;
                            let mut at = usize::MAX;
                            if i0 < i1 && j0 < j1 {
                                // The first tap is taken; a later one replaces it when
                                // greater or NaN (selects, not branches).
                                let r0 = oy * s.stride[0] + i0 * s.dilation[0] - s.padding[0];
                                let c0 = ox * s.stride[1] + j0 * s.dilation[1] - s.padding[1];
                                at = r0 * s.w + c0;
                                best = xp[at];
                                for i in i0..i1 {
                                    let r = oy * s.stride[0] + i * s.dilation[0] - s.padding[0];
                                    for j in j0..j1 {
                                        let q = ox * s.stride[1] + j * s.dilation[1] - s.padding[1];
                                        let idx = r * s.w + q;
                                        let v = xp[idx];
                                        let take = (v > best) | v.is_nan();
                                        best = if take { v } else { best };
                                        at = if take { idx } else { at };
                                    }
                                }
                            }
                            out[ob + oy * s.ow + ox] = canon(mode, best);
                            am[ob + oy * s.ow + ox] = at;
                        }
                    }
                }
            })
        }
    });
    Ok(())
}

pub(crate) fn max_pool2d_backward(
    ctx: &ComputeContext,
    mode: ComputeMode,
    s: &Pool2dSpec,
    argmax: &[usize],
    g: &[f32],
    gx: &mut [f32],
) -> Result<()> {
    let (hw, ohw) = (s.h * s.w, s.oh * s.ow);
    let pg = SendPtr(gx.as_mut_ptr());
    ranges(ctx, s.planes, per_task(hw), |p0, p1| {
        // SAFETY: the task owns planes p0..p1 of `gx` (every argmax index is below `hw`:
        // the arguments passed `Pool2dSpec::check_max_backward`).
        let gx = unsafe { part(pg, p0 * hw, (p1 - p0) * hw) };
        gx.fill(0.0);
        for plane in p0..p1 {
            let gxp = &mut gx[(plane - p0) * hw..(plane - p0 + 1) * hw];
            for j in plane * ohw..(plane + 1) * ohw {
                let at = argmax[j];
                if at != usize::MAX {
                    gxp[at] += g[j];
                }
            }
            canon_all(mode, gxp);
        }
    });
    Ok(())
}

/// A table of `n` entries, allocated fallibly.
fn try_table<T>(n: usize, f: impl Fn(usize) -> T) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| Error::Alloc {
        op: "pool",
        bytes: n.saturating_mul(core::mem::size_of::<T>()),
        reason: "the allocator refused the window table",
    })?;
    v.extend((0..n).map(f));
    Ok(v)
}

/// The windows of an average pooling: `(r0, r1, c0, c1, divisor)` per output row and
/// column pair, computed from the spec's `window` (none for an empty output).
struct Windows {
    rows: Vec<(usize, usize)>,
    cols: Vec<(usize, usize)>,
    div: Vec<f32>,
    ow: usize,
}

impl Windows {
    /// The first column `cb` when the eight columns of outputs `ox … ox + 7` are the
    /// windows `[cb + 2k, cb + 2k + 2)` side by side inside a row of `w` elements.
    #[inline(always)]
    fn pairs8(&self, ox: usize, w: usize) -> Option<usize> {
        let cols = self.cols.get(ox..ox + 8)?;
        let cb = cols[0].0;
        (cb + 16 <= w
            && cols
                .iter()
                .enumerate()
                .all(|(k, &c)| c == (cb + 2 * k, cb + 2 * k + 2)))
        .then_some(cb)
    }

    fn new(
        planes: usize,
        oh: usize,
        ow: usize,
        win: impl Fn(usize, usize) -> (usize, usize, usize, usize, f32),
    ) -> Result<Windows> {
        // An empty output has no windows, however large its other dimensions.
        let (oh, ow) = if planes == 0 || oh == 0 || ow == 0 {
            (0, 0)
        } else {
            (oh, ow)
        };
        let rows = try_table(oh, |o| {
            let (r0, r1, ..) = win(o, 0);
            (r0, r1)
        })?;
        let cols = try_table(ow, |o| {
            let (_, _, c0, c1, _) = win(0, o);
            (c0, c1)
        })?;
        let div = try_table(oh * ow, |i| win(i / ow.max(1), i % ow.max(1)).4)?;
        Ok(Windows {
            rows,
            cols,
            div,
            ow,
        })
    }
}

#[allow(clippy::too_many_arguments)]
fn avg_forward(
    isa: Isa,
    ctx: &ComputeContext,
    mode: ComputeMode,
    planes: usize,
    (h, w): (usize, usize),
    win: &Windows,
    x: &[f32],
    out: &mut [f32],
) {
    let (hw, ohw) = (h * w, win.div.len());
    let po = SendPtr(out.as_mut_ptr());
    ranges(ctx, planes, per_task(hw), |p0, p1| {
        // SAFETY: `isa` is the backend's; the task owns planes p0..p1 of `out`.
        unsafe {
            on_isa!(isa, {
                let out = part(po, p0 * ohw, (p1 - p0) * ohw);
                for plane in p0..p1 {
                    let xp = &x[plane * hw..(plane + 1) * hw];
                    for (oy, &(r0, r1)) in win.rows.iter().enumerate() {
                        let mut ox = 0;
                        if r1 == r0 + 2 {
                            // Blocks of eight 2 × 2 windows side by side, as lane arrays.
                            while let Some(cb) = win.pairs8(ox, w) {
                                let o = oy * win.ow + ox;
                                let (x0, x1) = (
                                    &xp[r0 * w + cb..r0 * w + cb + 16],
                                    &xp[(r0 + 1) * w + cb..(r0 + 1) * w + cb + 16],
                                );
                                let orow = &mut out[(plane - p0) * ohw + o..][..8];
                                for k in 0..8 {
                                    let mut acc = 0.0f64;
                                    acc += f64::from(x0[2 * k]);
                                    acc += f64::from(x0[2 * k + 1]);
                                    acc += f64::from(x1[2 * k]);
                                    acc += f64::from(x1[2 * k + 1]);
                                    orow[k] = canon(mode, (acc as f32) / win.div[o + k]);
                                }
                                ox += 8;
                            }
                        }
                        for (ox, &(c0, c1)) in win.cols.iter().enumerate().skip(ox) {
                            let o = oy * win.ow + ox;
                            let v = if r0 >= r1 || c0 >= c1 {
                                0.0
                            } else {
                                let mut acc = 0.0f64;
                                for r in r0..r1 {
                                    for &v in &xp[r * w + c0..r * w + c1] {
                                        acc += f64::from(v);
                                    }
                                }
                                canon(mode, (acc as f32) / win.div[o])
                            };
                            out[(plane - p0) * ohw + o] = v;
                        }
                    }
                }
            })
        }
    });
}

#[allow(clippy::too_many_arguments)]
fn avg_backward(
    isa: Isa,
    ctx: &ComputeContext,
    mode: ComputeMode,
    planes: usize,
    (h, w): (usize, usize),
    win: &Windows,
    g: &[f32],
    gx: &mut [f32],
) {
    let (hw, ohw) = (h * w, win.div.len());
    let pg = SendPtr(gx.as_mut_ptr());
    ranges(ctx, planes, per_task(hw), |p0, p1| {
        // SAFETY: `isa` is the backend's; the task owns planes p0..p1 of `gx`.
        unsafe {
            on_isa!(isa, {
                let gx = part(pg, p0 * hw, (p1 - p0) * hw);
                gx.fill(0.0);
                for plane in p0..p1 {
                    let gxp = &mut gx[(plane - p0) * hw..(plane - p0 + 1) * hw];
                    for (oy, &(r0, r1)) in win.rows.iter().enumerate() {
                        let mut ox = 0;
                        if r1 == r0 + 2 {
                            // Blocks of eight 2 × 2 windows side by side, as lane arrays
                            // (distinct elements, visited in the same order of outputs).
                            while let Some(cb) = win.pairs8(ox, w) {
                                let o = oy * win.ow + ox;
                                let d: [f32; 8] = core::array::from_fn(|k| {
                                    g[plane * ohw + o + k] / win.div[o + k]
                                });
                                for r in r0..r1 {
                                    let row = &mut gxp[r * w + cb..r * w + cb + 16];
                                    for k in 0..8 {
                                        row[2 * k] += d[k];
                                        row[2 * k + 1] += d[k];
                                    }
                                }
                                ox += 8;
                            }
                        }
                        for (ox, &(c0, c1)) in win.cols.iter().enumerate().skip(ox) {
                            if r0 >= r1 || c0 >= c1 {
                                continue;
                            }
                            let o = oy * win.ow + ox;
                            let d = g[plane * ohw + o] / win.div[o];
                            for r in r0..r1 {
                                for v in &mut gxp[r * w + c0..r * w + c1] {
                                    *v += d;
                                }
                            }
                        }
                    }
                    canon_all(mode, gxp);
                }
            })
        }
    });
}

pub(crate) fn avg_pool2d(
    isa: Isa,
    ctx: &ComputeContext,
    mode: ComputeMode,
    s: &AvgPool2dSpec,
    x: &[f32],
    out: &mut [f32],
) -> Result<()> {
    let p = &s.pool;
    let win = Windows::new(p.planes, p.oh, p.ow, |a, b| s.window(a, b))?;
    avg_forward(isa, ctx, mode, p.planes, (p.h, p.w), &win, x, out);
    Ok(())
}

pub(crate) fn avg_pool2d_backward(
    isa: Isa,
    ctx: &ComputeContext,
    mode: ComputeMode,
    s: &AvgPool2dSpec,
    g: &[f32],
    gx: &mut [f32],
) -> Result<()> {
    let p = &s.pool;
    let win = Windows::new(p.planes, p.oh, p.ow, |a, b| s.window(a, b))?;
    avg_backward(isa, ctx, mode, p.planes, (p.h, p.w), &win, g, gx);
    Ok(())
}

pub(crate) fn adaptive_avg_pool2d(
    isa: Isa,
    ctx: &ComputeContext,
    mode: ComputeMode,
    s: &AdaptivePool2dSpec,
    x: &[f32],
    out: &mut [f32],
) -> Result<()> {
    let win = Windows::new(s.planes, s.oh, s.ow, |a, b| s.window(a, b))?;
    avg_forward(isa, ctx, mode, s.planes, (s.h, s.w), &win, x, out);
    Ok(())
}

pub(crate) fn adaptive_avg_pool2d_backward(
    isa: Isa,
    ctx: &ComputeContext,
    mode: ComputeMode,
    s: &AdaptivePool2dSpec,
    g: &[f32],
    gx: &mut [f32],
) -> Result<()> {
    let win = Windows::new(s.planes, s.oh, s.ow, |a, b| s.window(a, b))?;
    avg_backward(isa, ctx, mode, s.planes, (s.h, s.w), &win, g, gx);
    Ok(())
}
