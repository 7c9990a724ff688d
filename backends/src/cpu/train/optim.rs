//! The fused SGD and Adam/AdamW updates (reference: `exactgrad_core::kernels::optim`).

use super::{part, ranges, CHUNK};
use crate::cpu::{ComputeContext, Isa, SendPtr};
use crate::lane::{Exact, Fast};
use crate::scalar::ModeSpec;
use exactgrad_core::kernels::{canon, AdamSpec, SgdSpec};
use exactgrad_core::ComputeMode;

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
    let exact = mode == ComputeMode::Exact;
    ranges(ctx, n, CHUNK, |a, b| {
        // SAFETY: `isa` is the backend's; the task owns elements a..b of `param` and of
        // the momentum buffer (as long as `param` when present, checked by the caller).
        unsafe {
            on_isa!(isa, {
                let p = part(pp, a, b - a);
                let g = &grad[a..b];
                let bf = if with_buf {
                    part(pb, a, b - a)
                } else {
                    &mut []
                };
                // The mode chosen outside the loop (see `adam_step`).
                if exact {
                    sgd_range::<Exact>(s, p, g, bf);
                } else {
                    sgd_range::<Fast>(s, p, g, bf);
                }
            })
        }
    });
}

/// The SGD update of the elements of one range (`bf` empty without momentum), NaN
/// canonicalised in exact mode.
#[inline(always)]
fn sgd_range<M: ModeSpec>(s: &SgdSpec, p: &mut [f32], g: &[f32], bf: &mut [f32]) {
    let c = |y: f32| canon(M::MODE, y);
    let n = p.len();
    let g = &g[..n];
    if s.momentum.is_some() {
        let bf = &mut bf[..n];
        for i in 0..n {
            let (np, nb) = s.element(p[i], g[i], bf[i]);
            (p[i], bf[i]) = (c(np), c(nb));
        }
    } else {
        for i in 0..n {
            p[i] = c(s.element(p[i], g[i], 0.0).0);
        }
    }
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
    let exact = mode == ComputeMode::Exact;
    ranges(ctx, n, CHUNK, |a, b| {
        // SAFETY: `isa` is the backend's; the task owns elements a..b of every buffer
        // (all as long as `param`, `vmax` only with AMSGrad; checked by the caller).
        unsafe {
            on_isa!(isa, {
                let (p, m, v) = (part(pp, a, b - a), part(pm, a, b - a), part(pv, a, b - a));
                let g = &grad[a..b];
                let x = if s.amsgrad {
                    part(px, a, b - a)
                } else {
                    &mut []
                };
                // The mode chosen outside the loop: a run-time mode inside it made LLVM
                // store every element twice with masked stores (slow on AMD cores).
                if exact {
                    adam_range::<Exact>(s, p, g, m, v, x);
                } else {
                    adam_range::<Fast>(s, p, g, m, v, x);
                }
            })
        }
    });
}

/// The Adam update of the elements of one range (`x` empty without AMSGrad), NaN
/// canonicalised in exact mode.
#[inline(always)]
fn adam_range<M: ModeSpec>(
    s: &AdamSpec,
    p: &mut [f32],
    g: &[f32],
    m: &mut [f32],
    v: &mut [f32],
    x: &mut [f32],
) {
    let c = |y: f32| canon(M::MODE, y);
    let n = p.len();
    let (g, m, v) = (&g[..n], &mut m[..n], &mut v[..n]);
    if s.amsgrad {
        let x = &mut x[..n];
        for i in 0..n {
            let (np, nm, nv, nx) = s.element(p[i], g[i], m[i], v[i], x[i]);
            (p[i], m[i], v[i], x[i]) = (c(np), c(nm), c(nv), c(nx));
        }
    } else {
        for i in 0..n {
            let (np, nm, nv, _) = s.element(p[i], g[i], m[i], v[i], 0.0);
            (p[i], m[i], v[i]) = (c(np), c(nm), c(nv));
        }
    }
}
