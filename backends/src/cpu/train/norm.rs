//! Normalisation: the statistics, the output and the backward rule (reference:
//! `exactgrad_core::kernels::norm`).

// Lane loops index several arrays by the lane number.
#![allow(clippy::needless_range_loop)]

use super::{part, per_task, ranges};
/// Σ64 of `f(lane, x)` over the elements of groups `q0 … q0 + lanes − 1`, each group's
/// elements in increasing order, the groups advancing together.
use crate::cpu::{ComputeContext, Isa, SendPtr};
use exactgrad_core::kernels::{canon, NormGrads, NormParam, NormSpec, NormStats};
use exactgrad_core::ComputeMode;

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

/// Groups whose sums advance together.
const LANES: usize = 8;

/// Outputs per task of the per-position parameter gradients (`PerR`): eight AVX-512
/// vectors of f64 sums each for dw and db. Measured against 32 and 128 on an AMD EPYC
/// (family 25 model 17, one thread): a layer norm's backward over `[8192, 768]` took
/// 22.5–22.8, 16.6–18.8 and 18.0–20.1 ms.
const PER_R: usize = 64;

/// As [`sums8n`] for a full block of [`LANES`] groups, with `f(ga, xa, r)` given the
/// lanes' elements at one position `r` of `a` and `b` (two arrays of the input's layout)
/// as vectors, so that the lane loops of `f` and the accumulation vectorise across the
/// groups. Each group's elements are still taken in increasing order, so the sums are
/// those of [`sums8n`]. On the AVX paths (`avx`) blocks of 8 × 8 elements are transposed
/// in registers; elsewhere each lane vector is gathered element by element.
#[inline(always)]
fn sums8t<const N: usize>(
    s: &NormSpec,
    avx: bool,
    a: &[f32],
    b: &[f32],
    q0: usize,
    f: impl Fn(&[f32; LANES], &[f32; LANES], usize) -> [[f64; LANES]; N],
) -> [[f64; LANES]; N] {
    let mut acc = [[0.0f64; LANES]; N];
    let end = (s.p * s.q).saturating_mul(s.r);
    if q0 + LANES > s.q || a.len() < end || b.len() < end {
        // Not reached: the callers pass a full block of the input's groups.
        return acc;
    }
    #[inline(always)]
    fn add<const N: usize>(acc: &mut [[f64; LANES]; N], t: [[f64; LANES]; N]) {
        for k in 0..N {
            for l in 0..LANES {
                acc[k][l] += t[k][l];
            }
        }
    }
    for p in 0..s.p {
        let base = (p * s.q + q0) * s.r;
        #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
        let mut r = 0;
        #[cfg(target_arch = "x86_64")]
        if avx {
            let (mut at, mut bt) = ([[0.0f32; LANES]; 8], [[0.0f32; LANES]; 8]);
            while r + 8 <= s.r {
                // SAFETY: the blocks read rows `base + l·R + r … + 8` for l < 8, inside
                // `a` and `b` (whose `P·Q·R` elements were checked above, and
                // `q0 + 8 ≤ Q`); the CPU has AVX (`avx` is set on the AVX paths only).
                unsafe {
                    transpose8(a.as_ptr().add(base + r), s.r, &mut at);
                    transpose8(b.as_ptr().add(base + r), s.r, &mut bt);
                }
                for j in 0..8 {
                    add(&mut acc, f(&at[j], &bt[j], r + j));
                }
                r += 8;
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = avx;
        for r in r..s.r {
            let va: [f32; LANES] = core::array::from_fn(|l| a[base + l * s.r + r]);
            let vb: [f32; LANES] = core::array::from_fn(|l| b[base + l * s.r + r]);
            add(&mut acc, f(&va, &vb, r));
        }
    }
    acc
}

/// `out[j][l] = src[l · ss + j]` for `j, l < 8` (an 8 × 8 transpose in registers: the
/// GEMM packer's [`crate::cpu::gemm::transpose8`]).
///
/// # Safety
/// `src + l · ss + j` must be readable for `l, j < 8`, and the CPU must have AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn transpose8(src: *const f32, ss: usize, out: &mut [[f32; LANES]; 8]) {
    // SAFETY: the caller's bounds for `src` and AVX; `out` is 8 rows of LANES = 8
    // contiguous f32, written at row stride LANES.
    unsafe { crate::cpu::gemm::transpose8(src, ss, out.as_mut_ptr().cast::<f32>(), LANES) }
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
    let avx = matches!(isa, Isa::Avx512 | Isa::Avx2);
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
                let full = lanes == LANES;
                let s1 = if full {
                    sums8t::<1>(
                        s,
                        avx,
                        x,
                        x,
                        q0,
                        #[inline(always)]
                        |v, _, _| [v.map(f64::from)],
                    )[0]
                } else {
                    sums8(s, x, q0, lanes, |_, _, _, v| f64::from(v))
                };
                for l in 0..lanes {
                    mean[l] = canon(mode, canon(mode, s1[l] as f32) / n);
                }
                let mu: [f32; LANES] =
                    core::array::from_fn(|l| if l < lanes { mean[l] } else { 0.0 });
                let s2 = if full {
                    sums8t::<1>(
                        s,
                        avx,
                        x,
                        x,
                        q0,
                        #[inline(always)]
                        |v, _, _| [core::array::from_fn(|l| f64::from(v[l] - mu[l]))],
                    )[0]
                } else {
                    sums8(s, x, q0, lanes, |l, _, _, v| f64::from(v - mu[l]))
                };
                for l in 0..lanes {
                    corr[l] = canon(mode, canon(mode, s2[l] as f32) / n);
                }
                let c: [f32; LANES] =
                    core::array::from_fn(|l| if l < lanes { corr[l] } else { 0.0 });
                let s3 = if full {
                    sums8t::<1>(
                        s,
                        avx,
                        x,
                        x,
                        q0,
                        #[inline(always)]
                        |v, _, _| {
                            [core::array::from_fn(|l| {
                                let e = f64::from((v[l] - mu[l]) - c[l]);
                                e * e
                            })]
                        },
                    )[0]
                } else {
                    sums8(s, x, q0, lanes, |l, _, _, v| {
                        let e = f64::from((v - mu[l]) - c[l]);
                        e * e
                    })
                };
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
    let avx = matches!(isa, Isa::Avx512 | Isa::Avx2);
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
                    // The full blocks of the layouts whose ĝ is a product by a lane's
                    // or a position's weight go through lane tiles.
                    let tiled = lanes == LANES && !matches!(s.param, NormParam::Group { .. });
                    let ght = |v: &[f32; LANES], r: usize| -> [f32; LANES] {
                        match weight {
                            Some(_) if per_q => core::array::from_fn(|l| v[l] * wq[l]),
                            Some(w) => {
                                let wr = w[r];
                                v.map(|v| v * wr)
                            }
                            None => *v,
                        }
                    };
                    let xht = |xv: &[f32; LANES]| -> [f32; LANES] {
                        core::array::from_fn(|l| ((xv[l] - mu[l]) - cc[l]) * rr[l])
                    };
                    if fused && tiled {
                        let [a, bx, gx, g1] = sums8t::<4>(
                            s,
                            avx,
                            g,
                            x,
                            q0,
                            #[inline(always)]
                            |v, xv, r| {
                                let (h, xv) = (ght(v, r), xht(xv));
                                [
                                    h.map(f64::from),
                                    core::array::from_fn(|l| f64::from(h[l]) * f64::from(xv[l])),
                                    core::array::from_fn(|l| f64::from(v[l]) * f64::from(xv[l])),
                                    v.map(f64::from),
                                ]
                            },
                        );
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
                    } else if stats_depend && tiled {
                        let [a, bx] = sums8t::<2>(
                            s,
                            avx,
                            g,
                            x,
                            q0,
                            #[inline(always)]
                            |v, xv, r| {
                                let (h, xv) = (ght(v, r), xht(xv));
                                [
                                    h.map(f64::from),
                                    core::array::from_fn(|l| f64::from(h[l]) * f64::from(xv[l])),
                                ]
                            },
                        );
                        for l in 0..lanes {
                            mg[l] = (a[l] as f32) / n;
                            mgx[l] = (bx[l] as f32) / n;
                        }
                    } else if fused {
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
    if matches!(s.param, NormParam::PerR) && (dw.is_some() || db.is_some()) {
        // Outputs are consecutive r; their elements lie one row apart. Tasks of PER_R
        // outputs (a layer norm's 128 parameters are two tasks, not one), dw and db in
        // one pass over the rows, each output its
        // own sum in row order (the same sums as one output at a time). A whole task's
        // outputs are fixed-size arrays, which the compiler keeps in vector registers.
        let pw = dw.take().map(|v| SendPtr(v.as_mut_ptr()));
        let pb = db.take().map(|v| SendPtr(v.as_mut_ptr()));
        ranges(ctx, params, PER_R, |k0, k1| {
            // SAFETY: `isa` is the backend's; the task owns outputs k0..k1 of dw and db.
            unsafe {
                on_isa!(isa, {
                    let (mut aw, mut ab) = ([0.0f64; PER_R], [0.0f64; PER_R]);
                    let len = k1 - k0;
                    for p in 0..s.p {
                        for q in 0..s.q {
                            let base = (p * s.q + q) * s.r + k0;
                            let (mu, c, rs) = (st.mean[q], st.corr[q], st.rstd[q]);
                            let gr = &g[base..base + len];
                            // x is read only for dw (it may be empty when only db is asked).
                            let xr = if pw.is_some() {
                                &x[base..base + len]
                            } else {
                                &[]
                            };
                            if len == PER_R {
                                let gr: &[f32; PER_R] = gr.try_into().expect("PER_R elements");
                                if let Ok(xr) = <&[f32; PER_R]>::try_from(xr) {
                                    for j in 0..PER_R {
                                        let xh = ((xr[j] - mu) - c) * rs;
                                        aw[j] += f64::from(gr[j]) * f64::from(xh);
                                    }
                                }
                                if pb.is_some() {
                                    for j in 0..PER_R {
                                        ab[j] += f64::from(gr[j]);
                                    }
                                }
                            } else {
                                for (j, &gv) in gr.iter().enumerate() {
                                    if let Some(&xv) = xr.get(j) {
                                        let xh = ((xv - mu) - c) * rs;
                                        aw[j] += f64::from(gv) * f64::from(xh);
                                    }
                                    ab[j] += f64::from(gv);
                                }
                            }
                        }
                    }
                    for (out, acc) in [(pw, &aw), (pb, &ab)] {
                        if let Some(po) = out {
                            let o = part(po, k0, len);
                            for (o, a) in o.iter_mut().zip(acc.iter()) {
                                *o = canon(mode, *a as f32);
                            }
                        }
                    }
                })
            }
        });
        return;
    }
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
            // Any parameter layout, one output at a time (`PerR` takes the pass above).
            NormParam::Group { .. } | NormParam::PerR => {
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
