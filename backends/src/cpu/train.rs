//! The training kernels of the CPU backends: normalisation, pooling, im2col/col2im,
//! dropout masks and the optimizer updates (`exactgrad_core::kernels` holds their
//! reference definitions, which these reproduce bit for bit in both modes).
//!
//! Each kernel is written once as plain element loops over independent outputs and run
//! inside [`on_isa`], which compiles it with the ISA path's target features so that the
//! compiler vectorises it across outputs; no operation is reordered (no FMA is formed,
//! no sum is split). The f64 sums of the normalisation statistics advance eight groups
//! at once (eight independent accumulators, each adding its own elements in increasing
//! order), which removes the latency chain of a single accumulator. Work is split over
//! groups, planes, channels or element chunks whose sizes are constants of the kernel
//! and the shape.
//!
//! Over 800 lines on purpose: the training kernels (normalisation, pooling, im2col/col2im,
//! attention scores, dropout, optimizer updates) share the per-ISA dispatch macro, the
//! task-splitting helpers and the row-run helpers defined at the top.

// Lane loops index several arrays by the lane number.
#![allow(clippy::needless_range_loop)]

use super::{ComputeContext, Isa, SendPtr};
use alloc::vec::Vec;
use exactgrad_core::kernels::{
    canon, taps_inside, AdamSpec, AdaptivePool2dSpec, AvgPool2dSpec, Col2imSpec, NormGrads,
    NormParam, NormSpec, NormStats, Pool2dSpec, SgdSpec,
};
use exactgrad_core::kernels::{AttentionScoresSpec, ScoreMask};
use exactgrad_core::{ComputeMode, Error, Layout, Result};

/// Elements per parallel chunk of the element-wise training kernels.
const CHUNK: usize = 1 << 14;
/// Groups whose sums advance together.
const LANES: usize = 8;

/// Runs `$body` compiled with the target features of `isa`: one closure per path (so each
/// has one call site and is inlined into the function that carries the features).
///
/// Must be used inside `unsafe`: `isa` must be supported by this CPU.
macro_rules! on_isa {
    ($isa:expr, $body:block) => {{
        #[cfg(target_arch = "x86_64")]
        {
            #[target_feature(enable = "avx512f")]
            unsafe fn avx512<R>(f: impl FnOnce() -> R) -> R {
                f()
            }
            #[target_feature(enable = "avx2,fma")]
            unsafe fn avx2<R>(f: impl FnOnce() -> R) -> R {
                f()
            }
            fn baseline<R>(f: impl FnOnce() -> R) -> R {
                f()
            }
            // The features of the path, supported by this CPU (the caller's contract);
            // the code compiled under them is plain Rust whose float operations the
            // features do not change (no contraction).
            match $isa {
                Isa::Avx512 => avx512(|| $body),
                Isa::Avx2 => avx2(|| $body),
                _ => baseline(|| $body),
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            #[target_feature(enable = "neon")]
            unsafe fn neon<R>(f: impl FnOnce() -> R) -> R {
                f()
            }
            fn baseline<R>(f: impl FnOnce() -> R) -> R {
                f()
            }
            // NEON, supported by this CPU (the caller's contract; it is also the baseline
            // of AArch64): the compiler vectorises the loops with it and, as on x86-64,
            // never contracts a multiply and an add into a fused one.
            match $isa {
                Isa::Neon => neon(|| $body),
                _ => baseline(|| $body),
            }
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        {
            let _ = $isa;
            $body
        }
    }};
}

/// Splits `0..n` into tasks of `per` items and runs `f(start, end)` for each on `ctx`.
fn ranges(ctx: &ComputeContext, n: usize, per: usize, f: impl Fn(usize, usize) + Sync) {
    let per = per.max(1);
    ctx.run(n.div_ceil(per), |t| f(t * per, ((t + 1) * per).min(n)));
}

/// Items per task so that a task holds about `CHUNK` elements of `item_len` each.
fn per_task(item_len: usize) -> usize {
    (CHUNK / item_len.max(1)).max(1)
}

/// A mutable view of `len` elements at `base + start` of a buffer split over tasks.
///
/// # Safety
/// `start + len` must lie inside the buffer, and no other task may access the range.
#[inline(always)]
unsafe fn part<'a, T>(base: SendPtr<T>, start: usize, len: usize) -> &'a mut [T] {
    // SAFETY: the caller's contract.
    unsafe { core::slice::from_raw_parts_mut(base.0.add(start), len) }
}

// ----- normalisation ---------------------------------------------------------------------

/// Σ64 of `f(lane, x)` over the elements of groups `q0 … q0 + lanes − 1`, each group's
/// elements in increasing order, the groups advancing together.
#[inline(always)]
fn sums8(
    s: &NormSpec,
    x: &[f32],
    q0: usize,
    lanes: usize,
    f: impl Fn(usize, usize, usize, f32) -> f64,
) -> [f64; LANES] {
    let mut acc = [0.0f64; LANES];
    for p in 0..s.p {
        let base = (p * s.q + q0) * s.r;
        if lanes == LANES {
            let rows: [&[f32]; LANES] =
                core::array::from_fn(|l| &x[base + l * s.r..base + (l + 1) * s.r]);
            for r in 0..s.r {
                for l in 0..LANES {
                    acc[l] += f(l, base + l * s.r + r, r, rows[l][r]);
                }
            }
        } else {
            for r in 0..s.r {
                for (l, a) in acc.iter_mut().enumerate().take(lanes) {
                    let i = base + l * s.r + r;
                    *a += f(l, i, r, x[i]);
                }
            }
        }
    }
    acc
}

/// As [`sums8`] for `N` sums at once (one pass over the elements).
#[inline(always)]
fn sums8n<const N: usize>(
    s: &NormSpec,
    x: &[f32],
    q0: usize,
    lanes: usize,
    f: impl Fn(usize, usize, usize, f32) -> [f64; N],
) -> [[f64; LANES]; N] {
    let mut acc = [[0.0f64; LANES]; N];
    for p in 0..s.p {
        let base = (p * s.q + q0) * s.r;
        for r in 0..s.r {
            for l in 0..lanes {
                let i = base + l * s.r + r;
                let t = f(l, i, r, x[i]);
                for k in 0..N {
                    acc[k][l] += t[k];
                }
            }
        }
    }
    acc
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn norm_stats(
    isa: Isa,
    ctx: &ComputeContext,
    mode: ComputeMode,
    s: &NormSpec,
    x: &[f32],
    mean: &mut [f32],
    corr: &mut [f32],
    sq_sum: &mut [f32],
) {
    let n = s.count() as f32;
    let (pm, pc, ps) = (
        SendPtr(mean.as_mut_ptr()),
        SendPtr(corr.as_mut_ptr()),
        SendPtr(sq_sum.as_mut_ptr()),
    );
    ranges(ctx, s.q.div_ceil(LANES), 1, |b, _| {
        let q0 = b * LANES;
        let lanes = LANES.min(s.q - q0);
        // SAFETY: `isa` is the backend's (supported); the task owns groups q0..q0+lanes
        // of the three outputs (each `Q` long, checked by the caller).
        unsafe {
            on_isa!(isa, {
                let (mean, corr, sq) = (
                    part(pm, q0, lanes),
                    part(pc, q0, lanes),
                    part(ps, q0, lanes),
                );
                let s1 = sums8(s, x, q0, lanes, |_, _, _, v| f64::from(v));
                for l in 0..lanes {
                    mean[l] = canon(mode, canon(mode, s1[l] as f32) / n);
                }
                let mu: [f32; LANES] =
                    core::array::from_fn(|l| if l < lanes { mean[l] } else { 0.0 });
                let s2 = sums8(s, x, q0, lanes, |l, _, _, v| f64::from(v - mu[l]));
                for l in 0..lanes {
                    corr[l] = canon(mode, canon(mode, s2[l] as f32) / n);
                }
                let c: [f32; LANES] =
                    core::array::from_fn(|l| if l < lanes { corr[l] } else { 0.0 });
                let s3 = sums8(s, x, q0, lanes, |l, _, _, v| {
                    let e = f64::from((v - mu[l]) - c[l]);
                    e * e
                });
                for l in 0..lanes {
                    sq[l] = canon(mode, s3[l] as f32);
                }
            })
        }
    });
}

/// Parameter values along one row `(p, q)` of `R` elements.
enum RowParam<'a> {
    None,
    Scalar(f32),
    Slice(&'a [f32]),
}

impl RowParam<'_> {
    /// The parameter of row `q` for `r` in `r0 .. r0 + len` (a run over which a group
    /// layout's channel is constant).
    #[inline(always)]
    fn of<'a>(s: &NormSpec, p: Option<&'a [f32]>, q: usize, r0: usize, len: usize) -> RowParam<'a> {
        match (p, s.param) {
            (None, _) => RowParam::None,
            (Some(w), NormParam::PerQ) => RowParam::Scalar(w[q]),
            (Some(w), NormParam::PerR) => RowParam::Slice(&w[r0..r0 + len]),
            (Some(w), NormParam::Group { .. }) => RowParam::Scalar(w[s.param_index(q, r0)]),
        }
    }
}

/// The runs of one row along which the parameter index is an affine function of `r`:
/// the whole row, or one run per channel for a group layout.
#[inline(always)]
fn row_runs(s: &NormSpec) -> usize {
    match s.param {
        NormParam::Group { spatial, .. } => spatial.max(1),
        _ => s.r.max(1),
    }
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn norm_row(
    mode: ComputeMode,
    x: &[f32],
    out: &mut [f32],
    mu: f32,
    c: f32,
    rs: f32,
    w: RowParam<'_>,
    b: RowParam<'_>,
) {
    macro_rules! body {
        ($wf:expr, $bf:expr) => {
            for i in 0..x.len() {
                let y = ((x[i] - mu) - c) * rs;
                let y = $wf(i, y);
                let y = $bf(i, y);
                out[i] = canon(mode, y);
            }
        };
    }
    match (w, b) {
        (RowParam::None, RowParam::None) => body!(|_, y| y, |_, y| y),
        (RowParam::Scalar(w), RowParam::None) => body!(|_, y: f32| y * w, |_, y| y),
        (RowParam::Scalar(w), RowParam::Scalar(b)) => body!(|_, y: f32| y * w, |_, y: f32| y + b),
        (RowParam::None, RowParam::Scalar(b)) => body!(|_, y| y, |_, y: f32| y + b),
        (RowParam::Slice(w), RowParam::Slice(b)) => {
            body!(|i: usize, y: f32| y * w[i], |i: usize, y: f32| y + b[i])
        }
        (RowParam::Slice(w), RowParam::None) => body!(|i: usize, y: f32| y * w[i], |_, y| y),
        (RowParam::None, RowParam::Slice(b)) => body!(|_, y| y, |i: usize, y: f32| y + b[i]),
        (w, b) => {
            for i in 0..x.len() {
                let mut y = ((x[i] - mu) - c) * rs;
                match w {
                    RowParam::Scalar(w) => y *= w,
                    RowParam::Slice(w) => y *= w[i],
                    RowParam::None => {}
                }
                match b {
                    RowParam::Scalar(b) => y += b,
                    RowParam::Slice(b) => y += b[i],
                    RowParam::None => {}
                }
                out[i] = canon(mode, y);
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn norm_forward(
    isa: Isa,
    ctx: &ComputeContext,
    mode: ComputeMode,
    s: &NormSpec,
    x: &[f32],
    st: &NormStats<'_>,
    weight: Option<&[f32]>,
    bias: Option<&[f32]>,
    out: &mut [f32],
) {
    let rows = s.p * s.q;
    let po = SendPtr(out.as_mut_ptr());
    let run = row_runs(s);
    ranges(ctx, rows, per_task(s.r), |r0, r1| {
        // SAFETY: `isa` is the backend's; the task owns rows r0..r1 of `out` (`P·Q·R`
        // elements, checked by the caller).
        unsafe {
            on_isa!(isa, {
                let out = part(po, r0 * s.r, (r1 - r0) * s.r);
                for row in r0..r1 {
                    let q = row % s.q;
                    let xr = &x[row * s.r..(row + 1) * s.r];
                    let or = &mut out[(row - r0) * s.r..(row - r0 + 1) * s.r];
                    let mut k = 0;
                    while k < s.r {
                        let len = run.min(s.r - k);
                        norm_row(
                            mode,
                            &xr[k..k + len],
                            &mut or[k..k + len],
                            st.mean[q],
                            st.corr[q],
                            st.rstd[q],
                            RowParam::of(s, weight, q, k, len),
                            RowParam::of(s, bias, q, k, len),
                        );
                        k += len;
                    }
                }
            })
        }
    });
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn norm_backward(
    isa: Isa,
    ctx: &ComputeContext,
    mode: ComputeMode,
    s: &NormSpec,
    x: &[f32],
    g: &[f32],
    st: &NormStats<'_>,
    weight: Option<&[f32]>,
    stats_depend: bool,
    grads: NormGrads<'_>,
) {
    let n = s.count() as f32;
    let xhat = |q: usize, i: usize| ((x[i] - st.mean[q]) - st.corr[q]) * st.rstd[q];
    let wv = |q: usize, r: usize| weight.map_or(1.0, |w| w[s.param_index(q, r)]);
    let NormGrads { dx, mut dw, mut db } = grads;
    // With per-group parameters, dw and db are per-group sums too: the pass that sums
    // for dx computes them as well.
    let fused = matches!(s.param, NormParam::PerQ) && dx.is_some();
    let (pw, pb) = if fused {
        (
            dw.take().map(|v| SendPtr(v.as_mut_ptr())),
            db.take().map(|v| SendPtr(v.as_mut_ptr())),
        )
    } else {
        (None, None)
    };
    if let Some(dx) = dx {
        // Per group: A = Σ64 ĝ, Bx = Σ64 ĝ·x̂ (and Σ64 g·x̂, Σ64 g when fused), then dx of
        // the group's rows.
        let pd = SendPtr(dx.as_mut_ptr());
        ranges(ctx, s.q.div_ceil(LANES), 1, |b, _| {
            let q0 = b * LANES;
            let lanes = LANES.min(s.q - q0);
            // SAFETY: `isa` is the backend's; the task writes only the rows of groups
            // q0..q0+lanes of `dx` and, when fused, entries q0..q0+lanes of dw and db
            // (each checked by the caller).
            unsafe {
                on_isa!(isa, {
                    let (mut mg, mut mgx) = ([0.0f32; LANES], [0.0f32; LANES]);
                    let lane = |v: &[f32], l: usize| if l < lanes { v[q0 + l] } else { 0.0 };
                    let mu: [f32; LANES] = core::array::from_fn(|l| lane(st.mean, l));
                    let cc: [f32; LANES] = core::array::from_fn(|l| lane(st.corr, l));
                    let rr: [f32; LANES] = core::array::from_fn(|l| lane(st.rstd, l));
                    let xh = |l: usize, i: usize| ((x[i] - mu[l]) - cc[l]) * rr[l];
                    // ĝ = g ⊗ w (or g); a per-group weight is read once per lane.
                    let wq: [f32; LANES] = core::array::from_fn(|l| match (weight, s.param) {
                        (Some(w), NormParam::PerQ) if l < lanes => w[q0 + l],
                        _ => 1.0,
                    });
                    let per_q = matches!(s.param, NormParam::PerQ);
                    let gh = |l: usize, r: usize, v: f32| -> f32 {
                        match weight {
                            Some(_) if per_q => v * wq[l],
                            Some(_) => v * wv(q0 + l, r),
                            None => v,
                        }
                    };
                    if fused {
                        let [a, bx, gx, g1] = sums8n::<4>(s, g, q0, lanes, |l, i, r, v| {
                            let (h, xv) = (gh(l, r, v), xh(l, i));
                            [
                                f64::from(h),
                                f64::from(h) * f64::from(xv),
                                f64::from(v) * f64::from(xv),
                                f64::from(v),
                            ]
                        });
                        for l in 0..lanes {
                            mg[l] = (a[l] as f32) / n;
                            mgx[l] = (bx[l] as f32) / n;
                        }
                        if let Some(pw) = pw {
                            let o = part(pw, q0, lanes);
                            for l in 0..lanes {
                                o[l] = canon(mode, gx[l] as f32);
                            }
                        }
                        if let Some(pb) = pb {
                            let o = part(pb, q0, lanes);
                            for l in 0..lanes {
                                o[l] = canon(mode, g1[l] as f32);
                            }
                        }
                    } else if stats_depend {
                        let [a, bx] = sums8n::<2>(s, g, q0, lanes, |l, i, r, v| {
                            let h = gh(l, r, v);
                            [f64::from(h), f64::from(h) * f64::from(xh(l, i))]
                        });
                        for l in 0..lanes {
                            mg[l] = (a[l] as f32) / n;
                            mgx[l] = (bx[l] as f32) / n;
                        }
                    }
                    let run = row_runs(s);
                    for p in 0..s.p {
                        for l in 0..lanes {
                            let q = q0 + l;
                            let base = (p * s.q + q) * s.r;
                            let d = part(pd, base, s.r);
                            let (mu, c, rs) = (st.mean[q], st.corr[q], st.rstd[q]);
                            let mut k = 0;
                            while k < s.r {
                                let len = run.min(s.r - k);
                                let gr = &g[base + k..base + k + len];
                                let xr = &x[base + k..base + k + len];
                                let dr = &mut d[k..k + len];
                                let w = RowParam::of(s, weight, q, k, len);
                                // One loop per form of ĝ, so that each vectorises.
                                macro_rules! dx_loop {
                                    ($gh:expr) => {
                                        if stats_depend {
                                            let (a, b) = (mg[l], mgx[l]);
                                            for i in 0..len {
                                                let xh = ((xr[i] - mu) - c) * rs;
                                                let g = $gh(i);
                                                dr[i] = canon(mode, ((g - a) - xh * b) * rs);
                                            }
                                        } else {
                                            for i in 0..len {
                                                dr[i] = canon(mode, $gh(i) * rs);
                                            }
                                        }
                                    };
                                }
                                match w {
                                    RowParam::None => dx_loop!(|i: usize| gr[i]),
                                    RowParam::Scalar(w) => dx_loop!(|i: usize| gr[i] * w),
                                    RowParam::Slice(w) => dx_loop!(|i: usize| gr[i] * w[i]),
                                }
                                k += len;
                            }
                        }
                    }
                })
            }
        });
    }
    let params = s.params();
    for (out, with_x) in [(dw, true), (db, false)] {
        let Some(out) = out else { continue };
        let term = |i: usize, q: usize| {
            if with_x {
                f64::from(g[i]) * f64::from(xhat(q, i))
            } else {
                f64::from(g[i])
            }
        };
        match s.param {
            NormParam::PerQ => {
                let po = SendPtr(out.as_mut_ptr());
                ranges(ctx, s.q.div_ceil(LANES), 1, |b, _| {
                    let q0 = b * LANES;
                    let lanes = LANES.min(s.q - q0);
                    // SAFETY: `isa` is the backend's; the task owns outputs q0..q0+lanes.
                    unsafe {
                        on_isa!(isa, {
                            let acc = sums8(s, g, q0, lanes, |l, i, _, _| term(i, q0 + l));
                            let o = part(po, q0, lanes);
                            for l in 0..lanes {
                                o[l] = canon(mode, acc[l] as f32);
                            }
                        })
                    }
                });
            }
            NormParam::PerR => {
                // Outputs are consecutive r; their elements lie one row apart.
                let po = SendPtr(out.as_mut_ptr());
                let per = 256;
                ranges(ctx, params, per, |k0, k1| {
                    // SAFETY: `isa` is the backend's; the task owns outputs k0..k1.
                    unsafe {
                        on_isa!(isa, {
                            let mut acc = [0.0f64; 256];
                            let acc = &mut acc[..k1 - k0];
                            for p in 0..s.p {
                                for q in 0..s.q {
                                    let base = (p * s.q + q) * s.r;
                                    let (mu, c, rs) = (st.mean[q], st.corr[q], st.rstd[q]);
                                    for (j, a) in acc.iter_mut().enumerate() {
                                        let i = base + k0 + j;
                                        *a += if with_x {
                                            let xh = ((x[i] - mu) - c) * rs;
                                            f64::from(g[i]) * f64::from(xh)
                                        } else {
                                            f64::from(g[i])
                                        };
                                    }
                                }
                            }
                            let o = part(po, k0, k1 - k0);
                            for (o, a) in o.iter_mut().zip(acc.iter()) {
                                *o = canon(mode, *a as f32);
                            }
                        })
                    }
                });
            }
            NormParam::Group { .. } => {
                let po = SendPtr(out.as_mut_ptr());
                ranges(ctx, params, 1, |k, _| {
                    let mut acc = 0.0f64;
                    s.for_param(k, |i, q, _| acc += term(i, q));
                    // SAFETY: the task owns output k.
                    unsafe { part(po, k, 1)[0] = canon(mode, acc as f32) };
                });
            }
        }
    }
}

// ----- pooling ---------------------------------------------------------------------------

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
                                let sel = |take: bool, v: f32, b: f32, i: usize, a: usize| {
                                    let m32 = (take as u32).wrapping_neg();
                                    let m = (take as usize).wrapping_neg();
                                    (
                                        f32::from_bits((v.to_bits() & m32) | (b.to_bits() & !m32)),
                                        (i & m) | (a & !m),
                                    )
                                };
                                for ox in 0..s.ow {
                                    let q = 2 * ox;
                                    let (mut best, mut at) = (x0[q], r0 * s.w + q);
                                    for (v, idx) in [
                                        (x0[q + 1], r0 * s.w + q + 1),
                                        (x1[q], (r0 + 1) * s.w + q),
                                        (x1[q + 1], (r0 + 1) * s.w + q + 1),
                                    ] {
                                        (best, at) = sel((v > best) | v.is_nan(), v, best, idx, at);
                                    }
                                    orow[ox] = canon(mode, best);
                                    arow[ox] = at;
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
                            for v in orow.iter_mut() {
                                *v = canon(mode, *v);
                            }
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
    if let Some(&bad) = argmax.iter().find(|&&a| a != usize::MAX && a >= hw) {
        return Err(exactgrad_core::kernels::bad_max_index(bad, hw));
    }
    let pg = SendPtr(gx.as_mut_ptr());
    ranges(ctx, s.planes, per_task(hw), |p0, p1| {
        // SAFETY: the task owns planes p0..p1 of `gx`; every index is below `hw`
        // (checked above).
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
            for v in gxp.iter_mut() {
                *v = canon(mode, *v);
            }
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
                        for (ox, &(c0, c1)) in win.cols.iter().enumerate() {
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
                        for (ox, &(c0, c1)) in win.cols.iter().enumerate() {
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
                    for v in gxp.iter_mut() {
                        *v = canon(mode, *v);
                    }
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

// ----- im2col / col2im -------------------------------------------------------------------

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

// ----- attention scores ------------------------------------------------------------------

/// The storage index of element `(row, 0)` of a layout whose last dimension is the row.
fn row_offset(lay: &Layout, mut row: usize) -> usize {
    let mut off = lay.offset;
    for d in (0..lay.rank().saturating_sub(1)).rev() {
        let n = lay.shape[d].max(1);
        off += (row % n) * lay.strides[d];
        row /= n;
    }
    off
}

pub(crate) fn attention_scores(
    isa: Isa,
    ctx: &ComputeContext,
    mode: ComputeMode,
    s: &AttentionScoresSpec,
    scores: &mut [f32],
    mask: Option<(ScoreMask, &[f32], &Layout)>,
) {
    let cols = s.s.max(1);
    let rows_per = per_task(cols);
    ctx.for_each_chunk(scores, rows_per * cols, |ci, chunk| {
        // SAFETY: `isa` is the backend's; the mask layout lies inside its buffer and has
        // the scores' shape (checked by the caller), so every index read is in bounds.
        unsafe {
            on_isa!(isa, {
                for (k, row_v) in chunk.chunks_mut(cols).enumerate() {
                    let row = ci * rows_per + k;
                    // Scores past `lim` are causally masked (`j > i`).
                    let lim = if s.causal {
                        row % s.l.max(1)
                    } else {
                        usize::MAX
                    };
                    let fin =
                        |j: usize, x: f32| canon(mode, if j > lim { f32::NEG_INFINITY } else { x });
                    let scale = s.scale;
                    match mask {
                        None => {
                            for (j, v) in row_v.iter_mut().enumerate() {
                                *v = fin(j, *v * scale);
                            }
                        }
                        Some((kind, m, lay)) => {
                            let off = row_offset(lay, row);
                            let sl = lay.strides.last().copied().unwrap_or(0);
                            let mv = |j: usize| m[off + j * sl];
                            match kind {
                                ScoreMask::Additive => {
                                    for (j, v) in row_v.iter_mut().enumerate() {
                                        *v = fin(j, *v * scale + mv(j));
                                    }
                                }
                                ScoreMask::Allow => {
                                    for (j, v) in row_v.iter_mut().enumerate() {
                                        let x = *v * scale;
                                        *v = fin(
                                            j,
                                            if mv(j) == 0.0 { f32::NEG_INFINITY } else { x },
                                        );
                                    }
                                }
                                ScoreMask::Block => {
                                    for (j, v) in row_v.iter_mut().enumerate() {
                                        let x = *v * scale;
                                        *v = fin(
                                            j,
                                            if mv(j) != 0.0 { f32::NEG_INFINITY } else { x },
                                        );
                                    }
                                }
                            }
                        }
                    }
                }
            })
        }
    });
}

// ----- dropout and optimizers ------------------------------------------------------------

pub(crate) fn dropout_mask(
    ctx: &ComputeContext,
    key: u64,
    p: f32,
    scale: f32,
    start: u64,
    out: &mut [f32],
) {
    ctx.for_each_chunk(out, CHUNK, |ci, o| {
        exactgrad_core::kernels::dropout_mask(key, p, scale, start + (ci * CHUNK) as u64, o);
    });
}

pub(crate) fn sgd_step(
    isa: Isa,
    ctx: &ComputeContext,
    mode: ComputeMode,
    s: &SgdSpec,
    param: &mut [f32],
    grad: &[f32],
    buf: &mut [f32],
) {
    let n = param.len();
    let (pp, pb) = (SendPtr(param.as_mut_ptr()), SendPtr(buf.as_mut_ptr()));
    let with_buf = s.momentum.is_some();
    ranges(ctx, n, CHUNK, |a, b| {
        // SAFETY: `isa` is the backend's; the task owns elements a..b of `param` and of
        // the momentum buffer (as long as `param` when present, checked by the caller).
        unsafe {
            on_isa!(isa, {
                let p = part(pp, a, b - a);
                let g = &grad[a..b];
                if with_buf {
                    let bf = part(pb, a, b - a);
                    for i in 0..p.len() {
                        let (np, nb) = s.element(p[i], g[i], bf[i]);
                        p[i] = canon(mode, np);
                        bf[i] = canon(mode, nb);
                    }
                } else {
                    for i in 0..p.len() {
                        p[i] = canon(mode, s.element(p[i], g[i], 0.0).0);
                    }
                }
            })
        }
    });
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn adam_step(
    isa: Isa,
    ctx: &ComputeContext,
    mode: ComputeMode,
    s: &AdamSpec,
    param: &mut [f32],
    grad: &[f32],
    m: &mut [f32],
    v: &mut [f32],
    vmax: &mut [f32],
) {
    let n = param.len();
    let (pp, pm, pv, px) = (
        SendPtr(param.as_mut_ptr()),
        SendPtr(m.as_mut_ptr()),
        SendPtr(v.as_mut_ptr()),
        SendPtr(vmax.as_mut_ptr()),
    );
    ranges(ctx, n, CHUNK, |a, b| {
        // SAFETY: `isa` is the backend's; the task owns elements a..b of every buffer
        // (all as long as `param`, `vmax` only with AMSGrad; checked by the caller).
        unsafe {
            on_isa!(isa, {
                let (p, m, v) = (part(pp, a, b - a), part(pm, a, b - a), part(pv, a, b - a));
                let g = &grad[a..b];
                if s.amsgrad {
                    let x = part(px, a, b - a);
                    for i in 0..p.len() {
                        let (np, nm, nv, nx) = s.element(p[i], g[i], m[i], v[i], x[i]);
                        p[i] = canon(mode, np);
                        m[i] = canon(mode, nm);
                        v[i] = canon(mode, nv);
                        x[i] = canon(mode, nx);
                    }
                } else {
                    for i in 0..p.len() {
                        let (np, nm, nv, _) = s.element(p[i], g[i], m[i], v[i], 0.0);
                        p[i] = canon(mode, np);
                        m[i] = canon(mode, nm);
                        v[i] = canon(mode, nv);
                    }
                }
            })
        }
    });
}
