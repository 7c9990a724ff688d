//! im2col and col2im (reference: `exactgrad_core::kernels::pool`, `Col2imSpec`).

use super::{part, per_task, ranges};
use crate::cpu::{ComputeContext, Isa, SendPtr};
use exactgrad_core::kernels::{canon, Col2imSpec};
use exactgrad_core::ComputeMode;

pub(crate) fn im2col(isa: Isa, ctx: &ComputeContext, s: &Col2imSpec, x: &[f32], cols: &mut [f32]) {
    let p = s.oh * s.ow;
    let rows = s.c * s.kh * s.kw;
    let pc = SendPtr(cols.as_mut_ptr());
    ranges(ctx, rows, per_task(p), |r0, r1| {
        // SAFETY: `isa` is the backend's; the task owns rows r0..r1 of `cols`; every
        // source index lies inside the checked image (`Col2imSpec::source`).
        unsafe {
            on_isa!(isa, {
                let out = part(pc, r0 * p, (r1 - r0) * p);
                for row in r0..r1 {
                    let (c, i, j) = (row / (s.kh * s.kw), (row / s.kw) % s.kh, row % s.kw);
                    let o = &mut out[(row - r0) * p..(row - r0 + 1) * p];
                    let plane = &x[c * s.h * s.w..(c + 1) * s.h * s.w];
                    for y in 0..s.oh {
                        let orow = &mut o[y * s.ow..(y + 1) * s.ow];
                        match Col2imSpec::source(
                            y,
                            i,
                            s.stride[0],
                            s.dilation[0],
                            s.padding[0],
                            s.h,
                        ) {
                            None => orow.fill(0.0),
                            Some(r) if s.stride[1] == 1 => {
                                // Columns xo with 0 ≤ xo + j·dw − pw < w: one copy, +0 around.
                                let src = &plane[r * s.w..(r + 1) * s.w];
                                let off = j * s.dilation[1];
                                let lo = s.padding[1].saturating_sub(off).min(s.ow);
                                let hi = (s.w + s.padding[1]).saturating_sub(off).min(s.ow).max(lo);
                                orow[..lo].fill(0.0);
                                if lo < hi {
                                    let d0 = lo + off - s.padding[1];
                                    orow[lo..hi].copy_from_slice(&src[d0..d0 + (hi - lo)]);
                                }
                                orow[hi..].fill(0.0);
                            }
                            Some(r) => {
                                let src = &plane[r * s.w..(r + 1) * s.w];
                                for (xo, v) in orow.iter_mut().enumerate() {
                                    *v = match Col2imSpec::source(
                                        xo,
                                        j,
                                        s.stride[1],
                                        s.dilation[1],
                                        s.padding[1],
                                        s.w,
                                    ) {
                                        Some(q) => src[q],
                                        None => 0.0,
                                    };
                                }
                            }
                        }
                    }
                }
            })
        }
    });
}

pub(crate) fn col2im(
    isa: Isa,
    ctx: &ComputeContext,
    mode: ComputeMode,
    s: &Col2imSpec,
    cols: &[f32],
    image: &mut [f32],
) {
    let (h, w, kh, kw) = (s.h, s.w, s.kh, s.kw);
    let p = s.oh * s.ow;
    let pi = SendPtr(image.as_mut_ptr());
    ranges(ctx, s.c, per_task(kh * kw * p), |c0, c1| {
        // SAFETY: `isa` is the backend's; the task owns channels c0..c1 of `image`; the
        // checked spec keeps every source inside its plane.
        unsafe {
            on_isa!(isa, {
                let img = part(pi, c0 * h * w, (c1 - c0) * h * w);
                img.fill(0.0);
                for c in c0..c1 {
                    let plane = &mut img[(c - c0) * h * w..(c - c0 + 1) * h * w];
                    let rows = &cols[c * kh * kw * p..(c + 1) * kh * kw * p];
                    // An element's contributions come from taps (i, j) at columns
                    // (y, x) with y decreasing in i and x decreasing in j, so visiting
                    // the taps from the last one adds them in increasing column order.
                    for i in (0..kh).rev() {
                        for j in (0..kw).rev() {
                            let src = &rows[(i * kw + j) * p..(i * kw + j + 1) * p];
                            for y in 0..s.oh {
                                let Some(r) = Col2imSpec::source(
                                    y,
                                    i,
                                    s.stride[0],
                                    s.dilation[0],
                                    s.padding[0],
                                    h,
                                ) else {
                                    continue;
                                };
                                let dst = &mut plane[r * w..(r + 1) * w];
                                let srow = &src[y * s.ow..(y + 1) * s.ow];
                                if s.stride[1] == 1 {
                                    // Columns x with 0 ≤ x + j·dw − pw < w.
                                    let off = j * s.dilation[1];
                                    let lo = s.padding[1].saturating_sub(off);
                                    let hi = (w + s.padding[1]).saturating_sub(off).min(s.ow);
                                    if lo < hi {
                                        let d0 = lo + off - s.padding[1];
                                        for (d, &v) in
                                            dst[d0..d0 + (hi - lo)].iter_mut().zip(&srow[lo..hi])
                                        {
                                            *d += v;
                                        }
                                    }
                                } else {
                                    for (x, &v) in srow.iter().enumerate() {
                                        if let Some(q) = Col2imSpec::source(
                                            x,
                                            j,
                                            s.stride[1],
                                            s.dilation[1],
                                            s.padding[1],
                                            w,
                                        ) {
                                            dst[q] += v;
                                        }
                                    }
                                }
                            }
                        }
                    }
                    for v in plane.iter_mut() {
                        *v = canon(mode, *v);
                    }
                }
            })
        }
    });
}
