//! The fused SGD and Adam/AdamW updates (reference: `exactgrad_core::kernels::optim`).

use super::{part, ranges, CHUNK};
use crate::cpu::{ComputeContext, Isa, SendPtr};
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
