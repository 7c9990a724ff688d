//! im2col and col2im (reference: `exactgrad_core::kernels::pool`, `Col2imSpec`).

use super::{canon_all, part, per_task, ranges};
use crate::cpu::{add_run, copy_run, ComputeContext, Isa, SendPtr};
use exactgrad_core::kernels::Col2imSpec;
use exactgrad_core::ComputeMode;

pub(crate) fn im2col(isa: Isa, ctx: &ComputeContext, s: &Col2imSpec, x: &[f32], cols: &mut [f32]) {
    let p = s.oh * s.ow;
    let rows = s.c * s.kh * s.kw;
    let pc = SendPtr(cols.as_mut_ptr());
    let plane_len = padded_len(s, [s.padding[0], s.padding[1]]);
    ranges(ctx, rows, per_task(p), |r0, r1| {
        with_plane(plane_len, |buf| {
            // SAFETY: `isa` is the backend's; the task owns rows r0..r1 of `cols`; every
            // source index lies inside the checked image (`Col2imSpec::source`).
            unsafe {
                on_isa!(isa, {
                    let out = part(pc, r0 * p, (r1 - r0) * p);
                    let mut padded = PaddedPlane { buf, channel: None };
                    for row in r0..r1 {
                        let (c, i, j) = (row / (s.kh * s.kw), (row / s.kw) % s.kh, row % s.kw);
                        let o = &mut out[(row - r0) * p..(row - r0 + 1) * p];
                        let plane = &x[c * s.h * s.w..(c + 1) * s.h * s.w];
                        if padded.gather(s, c, plane, (i, j), o) {
                            continue;
                        }
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
                                    let hi =
                                        (s.w + s.padding[1]).saturating_sub(off).min(s.ow).max(lo);
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
        })
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
    let plane_len = padded_len(s, [s.padding[0], s.padding[1]]);
    ranges(ctx, s.c, per_task(kh * kw * p), |c0, c1| {
        with_plane(plane_len, |mut buf| {
            // SAFETY: `isa` is the backend's; the task owns channels c0..c1 of `image`; the
            // checked spec keeps every source inside its plane.
            unsafe {
                on_isa!(isa, {
                    let img = part(pi, c0 * h * w, (c1 - c0) * h * w);
                    for c in c0..c1 {
                        let plane = &mut img[(c - c0) * h * w..(c - c0 + 1) * h * w];
                        let rows = &cols[c * kh * kw * p..(c + 1) * kh * kw * p];
                        if let Some(buf) = buf.as_deref_mut() {
                            col2im_padded(s, mode, rows, plane, buf);
                            continue;
                        }
                        plane.fill(0.0);
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
                                            for (d, &v) in dst[d0..d0 + (hi - lo)]
                                                .iter_mut()
                                                .zip(&srow[lo..hi])
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
                        canon_all(mode, plane);
                    }
                })
            }
        })
    });
}

/// Most elements of a channel's plane with its padding written out that im2col and
/// col2im hold in a thread's scratch (16 KiB); larger planes take the general loops.
const PADDED_PLANE: usize = 4096;

std::thread_local! {
    /// Each thread's scratch for padded planes: grown once to the largest plane asked
    /// for (at most [`PADDED_PLANE`] elements) and kept, so that a training loop does not
    /// allocate.
    static PLANE: core::cell::RefCell<Vec<f32>> = const { core::cell::RefCell::new(Vec::new()) };
}

/// Elements of one channel's plane widened by `pad` rows and columns on each side, when
/// it is not empty and fits in [`PADDED_PLANE`].
fn padded_len(s: &Col2imSpec, pad: [usize; 2]) -> Option<usize> {
    let hp = s.h.checked_add(pad[0].checked_mul(2)?)?;
    let wp = s.w.checked_add(pad[1].checked_mul(2)?)?;
    let len = hp.checked_mul(wp)?;
    (s.h > 0 && s.w > 0 && len <= PADDED_PLANE).then_some(len)
}

/// Runs `f` with `len` elements of this thread's plane scratch, or with `None` when
/// `len` is `None` or the scratch is in use.
fn with_plane<R>(len: Option<usize>, f: impl FnOnce(Option<&mut [f32]>) -> R) -> R {
    let Some(len) = len else {
        return f(None);
    };
    PLANE.with(|cell| match cell.try_borrow_mut() {
        Ok(mut v) => {
            if v.len() < len {
                v.resize(len, 0.0);
            }
            f(Some(&mut v[..len]))
        }
        Err(_) => f(None),
    })
}

/// col2im of one channel into `padded` (`(H + 2·ph) × (W + 2·pw)` elements), the plane
/// with its padding written out, so that every row of a tap adds all its `OW` columns
/// with no bounds to compute (the additions that land in the padding are dropped when the
/// plane is copied out). Each element receives the same additions in the same order as
/// in `col2im`'s general loop, so the bits are the same.
#[inline(always)]
fn col2im_padded(
    s: &Col2imSpec,
    mode: ComputeMode,
    rows: &[f32],
    plane: &mut [f32],
    padded: &mut [f32],
) {
    let (h, w, kh, kw, ow) = (s.h, s.w, s.kh, s.kw, s.ow);
    let (ph, pw) = (s.padding[0], s.padding[1]);
    let wp = w + 2 * pw;
    let padded = &mut padded[..(h + 2 * ph) * wp];
    padded.fill(0.0);
    let p = s.oh * ow;
    // No output columns: no tap adds anything (and `ow − 1` below needs one).
    let taps = if ow == 0 { 0 } else { kh };
    for i in (0..taps).rev() {
        for j in (0..kw).rev() {
            let src = &rows[(i * kw + j) * p..(i * kw + j + 1) * p];
            // Output (y, x) lands on widened row y·sh + i·dh and column x·sw + j·dw,
            // below H + 2·ph and W + 2·pw (the spec's check: the last tap of the last
            // window lies inside the padded input).
            let (off, sw) = (j * s.dilation[1], s.stride[1]);
            for (y, srow) in src.chunks_exact(ow).enumerate() {
                let r = y * s.stride[0] + i * s.dilation[0];
                let dst = &mut padded[r * wp + off..r * wp + off + (ow - 1) * sw + 1];
                if sw == 1 {
                    add_run(dst, srow);
                } else {
                    for (x, &v) in srow.iter().enumerate() {
                        dst[x * sw] += v;
                    }
                }
            }
        }
    }
    for (row, prow) in plane
        .chunks_exact_mut(w)
        .zip(padded[ph * wp..].chunks_exact(wp))
    {
        copy_run(row, &prow[pw..pw + w]);
        canon_all(mode, row);
    }
}

/// Writes one channel's plane (`H × W`) into `padded` (`(H + 2·ph) × (W + 2·pw)`
/// elements) with its padding as `+0`: what im2col's `+0` and the depthwise kernels'
/// taps read.
#[inline(always)]
pub(super) fn pad_plane(s: &Col2imSpec, plane: &[f32], padded: &mut [f32]) {
    let (ph, pw) = (s.padding[0], s.padding[1]);
    let wp = s.w + 2 * pw;
    padded.fill(0.0);
    if s.w > 0 {
        for (r, src) in plane.chunks_exact(s.w).enumerate() {
            copy_run(&mut padded[(r + ph) * wp + pw..][..s.w], src);
        }
    }
}

/// One channel of the image with its padding written out as `+0` (in the thread's
/// scratch), so that im2col reads every tap's rows without bounds.
struct PaddedPlane<'a> {
    /// The padded plane (`(H + 2·ph) × (W + 2·pw)` elements), or `None` when it does not
    /// fit (every row then takes the general loop).
    buf: Option<&'a mut [f32]>,
    /// The channel the buffer holds, if any.
    channel: Option<usize>,
}

impl PaddedPlane<'_> {
    /// Writes row `(c, i, j)` of the column matrix into `o` (`OH·OW` elements) from the
    /// padded copy of channel `c` (`plane`), copying it first if the buffer holds another
    /// channel. The bits are those of the general loop (a copy, `+0` in the padding).
    /// Returns `false` (and does nothing) when there is no padded plane.
    #[inline(always)]
    fn gather(
        &mut self,
        s: &Col2imSpec,
        c: usize,
        plane: &[f32],
        (i, j): (usize, usize),
        o: &mut [f32],
    ) -> bool {
        let Some(buf) = self.buf.as_deref_mut() else {
            return false;
        };
        let (ph, pw) = (s.padding[0], s.padding[1]);
        let wp = s.w + 2 * pw;
        let padded = &mut buf[..(s.h + 2 * ph) * wp];
        if self.channel != Some(c) {
            pad_plane(s, plane, padded);
            self.channel = Some(c);
        }
        // Output (y, x) reads padded row y·sh + i·dh, column x·sw + j·dw: inside the
        // padded plane, as the output size makes the last tap end at its border.
        let (sw, ow) = (s.stride[1], s.ow);
        if sw == 1 {
            // Output row y is the run at base0 + y·step: for the common widths, one
            // fixed-size copy per row.
            let (base0, step) = (i * s.dilation[0] * wp + j * s.dilation[1], s.stride[0] * wp);
            let o = &mut o[..s.oh * ow];
            if matches!(ow, 4 | 8 | 16 | 32) {
                match ow {
                    4 => copy_rows::<4>(o, padded, base0, step),
                    8 => copy_rows::<8>(o, padded, base0, step),
                    16 => copy_rows::<16>(o, padded, base0, step),
                    _ => copy_rows::<32>(o, padded, base0, step),
                }
                return true;
            }
        }
        for (y, orow) in o.chunks_exact_mut(ow.max(1)).take(s.oh).enumerate() {
            let base = (y * s.stride[0] + i * s.dilation[0]) * wp + j * s.dilation[1];
            if sw == 1 {
                copy_run(orow, &padded[base..base + ow]);
            } else if sw == 2 && base + 2 * ow <= padded.len() {
                copy_even(orow, &padded[base..base + 2 * ow]);
            } else {
                let src = &padded[base..base + (ow - 1) * sw + 1];
                for (v, &x) in orow.iter_mut().zip(src.iter().step_by(sw)) {
                    *v = x;
                }
            }
        }
        true
    }
}

/// Copies the elements of `src` at even positions into `dst` (`src` holds `2 · dst.len()`):
/// a column stride of 2, eight outputs from sixteen inputs at a time, which the compiler
/// turns into vector loads and shuffles.
#[inline(always)]
fn copy_even(dst: &mut [f32], src: &[f32]) {
    assert_eq!(src.len(), 2 * dst.len(), "copy_even: lengths");
    let mut d = dst.chunks_exact_mut(8);
    let mut s = src.chunks_exact(16);
    for (d, s) in (&mut d).zip(&mut s) {
        let s: &[f32; 16] = s.try_into().expect("16 elements");
        let v: [f32; 8] = core::array::from_fn(|t| s[2 * t]);
        d.copy_from_slice(&v);
    }
    for (v, pair) in d
        .into_remainder()
        .iter_mut()
        .zip(s.remainder().chunks_exact(2))
    {
        *v = pair[0];
    }
}

/// The rows of one tap of im2col with unit column stride and `OW` output columns: output
/// row `y` (`OW` elements of `o`) is the run of the padded plane at `base0 + y · step`.
#[inline(always)]
fn copy_rows<const OW: usize>(o: &mut [f32], padded: &[f32], base0: usize, step: usize) {
    for (y, orow) in o.chunks_exact_mut(OW).enumerate() {
        let b = base0 + y * step;
        let src: [f32; OW] = padded[b..b + OW].try_into().expect("OW elements");
        orow.copy_from_slice(&src);
    }
}
