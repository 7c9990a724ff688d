//! The depthwise convolution (one filter per channel) and its two gradients, without the
//! column matrix: each output receives the same multiply-adds in the same order as
//! im2col followed by the per-channel product, and each input-gradient element the same
//! additions as the product followed by col2im (reference: the default bodies of
//! `BackendImpl::depthwise_conv_impl` and its two gradients; `docs/conv.md` §1).
//!
//! A channel's taps are read from its plane with the padding written out as `+0` (in the
//! thread's scratch), so that a tap in the padding adds `w · (+0)` exactly as the `+0` of
//! im2col does; when that plane would be much larger than the image (a padding far
//! larger than the plane), the taps are read through bounds instead, with the same `+0`.

use super::cols::pad_plane;
use super::{canon_all, part, per_task, ranges};
use crate::cpu::{ComputeContext, Isa, SendPtr};
use crate::scalar::ModeSpec;
use exactgrad_core::kernels::Col2imSpec;

std::thread_local! {
    /// Each thread's scratch for a padded plane, grown to the largest asked for and kept.
    static PLANE: core::cell::RefCell<Vec<f32>> = const { core::cell::RefCell::new(Vec::new()) };
}

/// A channel's plane as the taps read it.
struct Taps<'a> {
    s: &'a Col2imSpec,
    /// The padded plane (`(H + 2·ph) × (W + 2·pw)`), or the plane itself when `!padded`.
    data: &'a [f32],
    padded: bool,
}

impl Taps<'_> {
    /// Row width of `data`.
    #[inline(always)]
    fn width(&self) -> usize {
        if self.padded {
            self.s.w + 2 * self.s.padding[1]
        } else {
            self.s.w
        }
    }

    /// The value tap `(i, j)` of output `(y, x)` reads: the input element, `+0` in the
    /// padding.
    #[inline(always)]
    fn at(&self, y: usize, i: usize, x: usize, j: usize) -> f32 {
        let s = self.s;
        let (r, q) = (
            y * s.stride[0] + i * s.dilation[0],
            x * s.stride[1] + j * s.dilation[1],
        );
        if self.padded {
            return self.data[r * self.width() + q];
        }
        match (
            Col2imSpec::source(y, i, s.stride[0], s.dilation[0], s.padding[0], s.h),
            Col2imSpec::source(x, j, s.stride[1], s.dilation[1], s.padding[1], s.w),
        ) {
            (Some(r), Some(q)) => self.data[r * s.w + q],
            _ => 0.0,
        }
    }

    /// The run of `OW` values tap `(i, j)` of output row `y` reads, when the plane is
    /// padded and the column stride is 1.
    #[inline(always)]
    fn run(&self, y: usize, i: usize, j: usize) -> Option<&[f32]> {
        let s = self.s;
        (self.padded && s.stride[1] == 1).then(|| {
            let base = (y * s.stride[0] + i * s.dilation[0]) * self.width() + j * s.dilation[1];
            &self.data[base..base + s.ow]
        })
    }
}

/// Elements of a padded plane, when it is worth writing out: not much larger than the
/// plane itself.
fn padded_len(s: &Col2imSpec) -> Option<usize> {
    let hp = s.h.checked_add(s.padding[0].checked_mul(2)?)?;
    let wp = s.w.checked_add(s.padding[1].checked_mul(2)?)?;
    let len = hp.checked_mul(wp)?;
    (len <= 4 * s.h * s.w + (1 << 16)).then_some(len)
}

/// The taps of `plane` (`H × W`): padded in `scratch` (grown as needed and kept for the
/// next channel) when [`padded_len`] allows, else the plane read through bounds.
#[inline(always)]
fn taps<'a>(s: &'a Col2imSpec, plane: &'a [f32], scratch: &'a mut Vec<f32>) -> Taps<'a> {
    let Some(len) = padded_len(s) else {
        return Taps {
            s,
            data: plane,
            padded: false,
        };
    };
    if scratch.len() < len {
        scratch.resize(len, 0.0);
    }
    let padded = &mut scratch[..len];
    pad_plane(s, plane, padded);
    Taps {
        s,
        data: padded,
        padded: true,
    }
}

/// This thread's plane scratch, taken out of its slot (so that no borrow is held while
/// the kernel runs).
fn take_scratch() -> Vec<f32> {
    PLANE.with(|cell| cell.take())
}

/// Puts `scratch` back into this thread's slot for the next task.
fn put_scratch(scratch: Vec<f32>) {
    PLANE.with(|cell| cell.replace(scratch));
}

/// `out[c] = w[c] · cols_c` per channel (`x` `[C, H, W]`, `w` `[C, KH·KW]`, `out`
/// `[C, OH·OW]`): each output from `+0`, its taps in increasing order with the mode's
/// multiply-add, NaN canonicalised in exact mode.
pub(crate) fn depthwise_conv<M: ModeSpec>(
    isa: Isa,
    ctx: &ComputeContext,
    s: &Col2imSpec,
    x: &[f32],
    w: &[f32],
    out: &mut [f32],
) {
    let (kk, p, hw) = (s.kh * s.kw, s.oh * s.ow, s.h * s.w);
    let po = SendPtr(out.as_mut_ptr());
    ranges(ctx, s.c, per_task(p * kk.max(1)), |c0, c1| {
        // SAFETY: `isa` is the backend's; the task owns channels c0..c1 of `out`, inside
        // its checked `c·oh·ow` elements.
        unsafe {
            on_isa!(isa, {
                let out = part(po, c0 * p, (c1 - c0) * p);
                let mut scratch = take_scratch();
                let mut wide = Vec::new();
                for c in c0..c1 {
                    let acc = &mut out[(c - c0) * p..(c - c0 + 1) * p];
                    let taps = taps(s, &x[c * hw..(c + 1) * hw], &mut scratch);
                    if taps.padded && s.stride == [1, 1] && p > 0 {
                        // Unit strides: every tap reads one run of the padded plane, the
                        // outputs laid at the plane's width (the columns past OW of each
                        // row are computed and dropped), so each tap is one long loop.
                        let wp = taps.width();
                        let len = (s.oh - 1) * wp + s.ow;
                        wide.clear();
                        wide.resize(len, 0.0);
                        for i in 0..s.kh {
                            for j in 0..s.kw {
                                let wt = w[c * kk + i * s.kw + j];
                                let base = i * s.dilation[0] * wp + j * s.dilation[1];
                                for (a, &v) in wide.iter_mut().zip(&taps.data[base..base + len]) {
                                    *a = M::madd(wt, v, *a);
                                }
                            }
                        }
                        for (row, src) in acc.chunks_exact_mut(s.ow).zip(wide.chunks(wp)) {
                            row.copy_from_slice(&src[..s.ow]);
                        }
                        canon_all(M::MODE, acc);
                        continue;
                    }
                    acc.fill(0.0);
                    for i in 0..s.kh {
                        for j in 0..s.kw {
                            let wt = w[c * kk + i * s.kw + j];
                            for (y, row) in acc.chunks_exact_mut(s.ow.max(1)).enumerate() {
                                if let Some(src) = taps.run(y, i, j) {
                                    for (a, &v) in row.iter_mut().zip(src) {
                                        *a = M::madd(wt, v, *a);
                                    }
                                } else {
                                    for (xo, a) in row.iter_mut().enumerate() {
                                        *a = M::madd(wt, taps.at(y, i, xo, j), *a);
                                    }
                                }
                            }
                        }
                    }
                    canon_all(M::MODE, acc);
                }
                put_scratch(scratch);
            })
        }
    });
}

/// The input gradient of [`depthwise_conv`]: `gx` `[C, H, W]` from `+0`, each element
/// adding the products `w[c, t] · g[c, p]` that land on it in increasing column order
/// (taps from the last), NaN canonicalised in exact mode.
pub(crate) fn depthwise_grad_input<M: ModeSpec>(
    isa: Isa,
    ctx: &ComputeContext,
    s: &Col2imSpec,
    g: &[f32],
    w: &[f32],
    gx: &mut [f32],
) {
    let (kk, p, hw) = (s.kh * s.kw, s.oh * s.ow, s.h * s.w);
    let pg = SendPtr(gx.as_mut_ptr());
    ranges(ctx, s.c, per_task(p * kk.max(1)), |c0, c1| {
        // SAFETY: `isa` is the backend's; the task owns channels c0..c1 of `gx`, inside
        // its checked `c·h·w` elements.
        unsafe {
            on_isa!(isa, {
                let gx = part(pg, c0 * hw, (c1 - c0) * hw);
                let mut scratch = take_scratch();
                for c in c0..c1 {
                    let plane = &mut gx[(c - c0) * hw..(c - c0 + 1) * hw];
                    let gc = &g[c * p..(c + 1) * p];
                    if let Some(len) = padded_len(s).filter(|_| s.stride[1] == 1 && p > 0 && hw > 0)
                    {
                        // Unit column stride: the products are added into the plane with
                        // its padding written out, each output row one run with no bounds
                        // (those landing in the padding are dropped when the plane is
                        // copied out), in the same order as below.
                        let wp = s.w + 2 * s.padding[1];
                        if scratch.len() < len {
                            scratch.resize(len, 0.0);
                        }
                        let padded = &mut scratch[..len];
                        padded.fill(0.0);
                        for i in (0..s.kh).rev() {
                            for j in (0..s.kw).rev() {
                                let wt = w[c * kk + i * s.kw + j];
                                for (y, grow) in gc.chunks_exact(s.ow).enumerate() {
                                    let at = (y * s.stride[0] + i * s.dilation[0]) * wp
                                        + j * s.dilation[1];
                                    for (d, &v) in padded[at..at + s.ow].iter_mut().zip(grow) {
                                        *d += M::madd(wt, v, 0.0);
                                    }
                                }
                            }
                        }
                        for (row, src) in plane
                            .chunks_exact_mut(s.w)
                            .zip(padded[s.padding[0] * wp..].chunks(wp))
                        {
                            row.copy_from_slice(&src[s.padding[1]..s.padding[1] + s.w]);
                        }
                        canon_all(M::MODE, plane);
                        continue;
                    }
                    plane.fill(0.0);
                    // An element's products come from taps (i, j) at outputs (y, x) with y
                    // decreasing in i and x decreasing in j: visiting the taps from the
                    // last one adds them in increasing column order, as col2im does.
                    for i in (0..s.kh).rev() {
                        for j in (0..s.kw).rev() {
                            let wt = w[c * kk + i * s.kw + j];
                            for (y, grow) in gc.chunks_exact(s.ow.max(1)).enumerate() {
                                let Some(r) = Col2imSpec::source(
                                    y,
                                    i,
                                    s.stride[0],
                                    s.dilation[0],
                                    s.padding[0],
                                    s.h,
                                ) else {
                                    continue;
                                };
                                let dst = &mut plane[r * s.w..(r + 1) * s.w];
                                if s.stride[1] == 1 {
                                    // Columns x with 0 ≤ x + j·dw − pw < w.
                                    let off = j * s.dilation[1];
                                    let lo = s.padding[1].saturating_sub(off).min(s.ow);
                                    let hi = (s.w + s.padding[1]).saturating_sub(off).min(s.ow);
                                    if lo < hi {
                                        let d0 = lo + off - s.padding[1];
                                        for (d, &v) in
                                            dst[d0..d0 + (hi - lo)].iter_mut().zip(&grow[lo..hi])
                                        {
                                            *d += M::madd(wt, v, 0.0);
                                        }
                                    }
                                } else {
                                    for (xo, &v) in grow.iter().enumerate() {
                                        if let Some(q) = Col2imSpec::source(
                                            xo,
                                            j,
                                            s.stride[1],
                                            s.dilation[1],
                                            s.padding[1],
                                            s.w,
                                        ) {
                                            dst[q] += M::madd(wt, v, 0.0);
                                        }
                                    }
                                }
                            }
                        }
                    }
                    canon_all(M::MODE, plane);
                }
                put_scratch(scratch);
            })
        }
    });
}

/// Most taps whose sums [`depthwise_grad_weight`] advances together (independent
/// chains, kept in registers).
const TAP_GROUP: usize = 8;

/// Adds one item's weight gradient of [`depthwise_conv`] into `gw` `[C, KH·KW]`: per
/// channel and tap, `Σ_p column · g` from `+0` in increasing position with the mode's
/// multiply-add, added to `gw`, NaN canonicalised in exact mode.
pub(crate) fn depthwise_grad_weight<M: ModeSpec>(
    isa: Isa,
    ctx: &ComputeContext,
    s: &Col2imSpec,
    g: &[f32],
    x: &[f32],
    gw: &mut [f32],
) {
    let (kk, p, hw) = (s.kh * s.kw, s.oh * s.ow, s.h * s.w);
    if p == 0 || kk == 0 {
        return;
    }
    // The taps in groups of nearly equal size, at most TAP_GROUP each (9 taps: 5 and 4).
    let groups = kk.div_ceil(TAP_GROUP);
    let pw = SendPtr(gw.as_mut_ptr());
    ranges(ctx, s.c, per_task(p * kk), |c0, c1| {
        // SAFETY: `isa` is the backend's; the task owns channels c0..c1 of `gw`, inside
        // its checked `c·kh·kw` elements.
        unsafe {
            on_isa!(isa, {
                let gw = part(pw, c0 * kk, (c1 - c0) * kk);
                let mut scratch = take_scratch();
                for c in c0..c1 {
                    let gc = &g[c * p..(c + 1) * p];
                    let sums = &mut gw[(c - c0) * kk..(c - c0 + 1) * kk];
                    let taps = &taps(s, &x[c * hw..(c + 1) * hw], &mut scratch);
                    let mut t0 = 0;
                    for gi in 0..groups {
                        let n = (kk - t0).div_ceil(groups - gi);
                        let out = &mut sums[t0..t0 + n];
                        match n {
                            1 => tap_sums::<M, 1>(taps, gc, t0, out),
                            2 => tap_sums::<M, 2>(taps, gc, t0, out),
                            3 => tap_sums::<M, 3>(taps, gc, t0, out),
                            4 => tap_sums::<M, 4>(taps, gc, t0, out),
                            5 => tap_sums::<M, 5>(taps, gc, t0, out),
                            6 => tap_sums::<M, 6>(taps, gc, t0, out),
                            7 => tap_sums::<M, 7>(taps, gc, t0, out),
                            _ => tap_sums::<M, TAP_GROUP>(taps, gc, t0, out),
                        }
                        t0 += n;
                    }
                }
                put_scratch(scratch);
            })
        }
    });
}

/// The sums of taps `t0 .. t0 + G` of one channel (`g` its output gradient), each from
/// `+0` over the positions in increasing order, added into `out` (`G` elements) and
/// canonicalised as the mode's output.
#[inline(always)]
fn tap_sums<M: ModeSpec, const G: usize>(taps: &Taps<'_>, g: &[f32], t0: usize, out: &mut [f32]) {
    let s = taps.s;
    let mut acc = [0.0f32; G];
    if taps.padded {
        // Offsets of the taps in the padded plane, from the window's corner.
        let wp = taps.width();
        let off: [usize; G] = core::array::from_fn(|u| {
            let t = t0 + u;
            (t / s.kw) * s.dilation[0] * wp + (t % s.kw) * s.dilation[1]
        });
        let (sh, sw) = (s.stride[0], s.stride[1]);
        // Every read is inside the plane: the last tap of the last window lies inside
        // the padded input (the spec's check), and the corners and offsets grow with
        // the position and the tap.
        let last = (s.oh - 1) * sh * wp + (s.ow - 1) * sw + off[G - 1];
        assert!(
            last < taps.data.len() && g.len() == s.oh * s.ow,
            "depthwise: taps"
        );
        for (y, grow) in g.chunks_exact(s.ow).enumerate() {
            let corner = y * sh * wp;
            for (xo, &gv) in grow.iter().enumerate() {
                let at = corner + xo * sw;
                for u in 0..G {
                    // SAFETY: at + off[u] <= last < data.len() (asserted above).
                    let v = unsafe { *taps.data.get_unchecked(at + off[u]) };
                    acc[u] = M::madd(v, gv, acc[u]);
                }
            }
        }
    } else {
        for (y, grow) in g.chunks_exact(s.ow).enumerate() {
            for (xo, &gv) in grow.iter().enumerate() {
                for (u, a) in acc.iter_mut().enumerate() {
                    let t = t0 + u;
                    *a = M::madd(taps.at(y, t / s.kw, xo, t % s.kw), gv, *a);
                }
            }
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        *o = M::out(*o + a);
    }
}

#[cfg(test)]
mod tests {
    use crate::cpu::{CpuBackend, Isa};
    use crate::lane::{Exact, Fast};
    use crate::scalar::ModeSpec;
    use crate::scalar_ref::{FastScalarRefBackend, ScalarRefBackend};
    use exactgrad_core::kernels::Col2imSpec;
    use exactgrad_core::{Backend, Philox};

    /// Values of wide magnitude with a few NaN, infinities and signed zeros.
    fn values(rng: &mut Philox, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| match rng.below(40) {
                0 => f32::NAN,
                1 => f32::INFINITY,
                2 => -0.0,
                3 => 0.0,
                _ => (rng.next_f32() - 0.5) * 2f32.powi(rng.below(20) as i32 - 10),
            })
            .collect()
    }

    /// The three kernels on `be` for `s` and the given inputs: forward, input gradient,
    /// weight gradient (added to `gw0`).
    fn run<B: Backend>(
        be: &B,
        s: &Col2imSpec,
        x: &[f32],
        w: &[f32],
        g: &[f32],
        gw0: &[f32],
    ) -> [Vec<f32>; 3] {
        let up = |v: &[f32]| be.storage_from_vec(v.to_vec()).unwrap();
        let (x, w, g) = (up(x), up(w), up(g));
        let mut out = be.zeros(s.c * s.oh * s.ow).unwrap();
        be.depthwise_conv(s, B::view(&x), B::view(&w), B::view_mut(&mut out))
            .unwrap();
        let mut gx = be.zeros(s.c * s.h * s.w).unwrap();
        be.depthwise_grad_input(s, B::view(&g), B::view(&w), B::view_mut(&mut gx))
            .unwrap();
        let mut gw = up(gw0);
        be.depthwise_grad_weight(s, B::view(&g), B::view(&x), B::view_mut(&mut gw))
            .unwrap();
        [out, gx, gw].map(|v| B::storage_to_vec(&v).unwrap())
    }

    fn same_bits<M: ModeSpec + crate::cpu::CpuMode, R: Backend>(
        reference: &R,
        s: &Col2imSpec,
        seed: u64,
    ) {
        let mut rng = Philox::new(seed);
        let x = values(&mut rng, s.c * s.h * s.w);
        let w = values(&mut rng, s.c * s.kh * s.kw);
        let g = values(&mut rng, s.c * s.oh * s.ow);
        let gw0 = values(&mut rng, s.c * s.kh * s.kw);
        let want = run(reference, s, &x, &w, &g, &gw0);
        for isa in Isa::ALL.into_iter().filter(|i| i.is_supported(M::MODE)) {
            for threads in [1, 3] {
                let be = CpuBackend::<M>::with_isa(isa, threads).unwrap();
                let got = run(&be, s, &x, &w, &g, &gw0);
                for (k, (got, want)) in got.iter().zip(&want).enumerate() {
                    for (i, (a, b)) in got.iter().zip(want).enumerate() {
                        let same = a.to_bits() == b.to_bits()
                            || (M::MODE == exactgrad_core::ComputeMode::Fast
                                && a.is_nan()
                                && b.is_nan());
                        assert!(same, "{isa:?} t{threads} kernel {k} element {i}: {a:e} against {b:e} ({s:?})");
                    }
                }
            }
        }
    }

    #[test]
    fn a_padding_far_larger_than_the_plane_reads_the_taps_through_bounds() {
        // 403 × 404 padded elements for a 3 × 4 plane: the taps are read through bounds,
        // with the +0 of the padding, not from a padded copy.
        let s = Col2imSpec {
            c: 3,
            h: 3,
            w: 4,
            kh: 2,
            kw: 3,
            stride: [1, 2],
            padding: [200, 200],
            dilation: [2, 1],
            oh: 401,
            ow: 201,
        };
        assert!(super::padded_len(&s).is_none());
        same_bits::<Exact, _>(&ScalarRefBackend, &s, 1);
        same_bits::<Fast, _>(&FastScalarRefBackend, &s, 2);
    }

    #[test]
    fn empty_planes_with_padding_give_the_column_path_bits() {
        // No input columns (or rows), outputs only from the padding.
        for (h, w, ph, pw) in [(3, 0, 0, 1), (0, 4, 1, 0), (0, 0, 1, 1)] {
            let s = Col2imSpec {
                c: 2,
                h,
                w,
                kh: 1,
                kw: 1,
                stride: [1, 1],
                padding: [ph, pw],
                dilation: [1, 1],
                oh: h + 2 * ph,
                ow: w + 2 * pw,
            };
            same_bits::<Exact, _>(&ScalarRefBackend, &s, 7);
            same_bits::<Fast, _>(&FastScalarRefBackend, &s, 8);
        }
    }

    #[test]
    fn unit_strides_and_larger_filters_match_the_column_path() {
        for (k, pad, dil, seed) in [(5, 2, 1, 3), (7, 3, 1, 4), (3, 2, 2, 5), (1, 0, 1, 6)] {
            let (h, w) = (13, 17);
            let s = Col2imSpec {
                c: 5,
                h,
                w,
                kh: k,
                kw: k,
                stride: [1, 1],
                padding: [pad, pad],
                dilation: [dil, dil],
                oh: h + 2 * pad - dil * (k - 1),
                ow: w + 2 * pad - dil * (k - 1),
            };
            same_bits::<Exact, _>(&ScalarRefBackend, &s, seed);
            same_bits::<Fast, _>(&FastScalarRefBackend, &s, seed + 10);
        }
    }
}
