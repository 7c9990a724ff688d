//! The normalisation kernels on the device (`docs/gpu.md` §2): `norm_stats` (three f64
//! group sums in the reference's order, each rounded once), `norm_forward` (one
//! invocation per element) and `norm_backward` (`∂x` with the statistics' terms as f64
//! group sums, `∂w` and `∂b` as f64 sums per parameter in `NormSpec::for_param`'s order).
//! Every loop over a group is cut into dispatches of at most `LOOP_BUDGET` iterations
//! that carry their f64 accumulators in scratch. The kernels with f64 sums (`norm_stats`,
//! `norm_backward`) run on the host on a device without f64.

use crate::device::{BufView, Dispatch, Kernel};
use crate::{word, WgpuBackend, WgpuView, WgpuViewMut, WgpuViews, LOOP_BUDGET};
use exactgrad_core::backend::{host_stats, with_opt_host_mut};
use exactgrad_core::kernels::{NormGrads, NormParam, NormSpec, NormStats};
use exactgrad_core::{Backend, BackendImpl, Result, ViewFamily, ViewLen};

/// The parameter layout as words: `[kind, groups, cpg, spatial]`.
fn param_words(s: &NormSpec) -> Result<[u32; 4]> {
    Ok(match s.param {
        NormParam::PerQ => [0, 0, 0, 0],
        NormParam::PerR => [1, 0, 0, 0],
        NormParam::Group {
            groups,
            cpg,
            spatial,
        } => [2, word(groups)?, word(cpg)?, word(spatial)?],
    })
}

/// The elements that use one parameter (the length of `NormSpec::for_param`'s loop).
fn param_count(s: &NormSpec) -> usize {
    match s.param {
        NormParam::PerQ => s.p * s.r,
        NormParam::PerR => s.p * s.q,
        NormParam::Group {
            groups, spatial, ..
        } => s.p * (s.q / groups.max(1)) * spatial,
    }
}

/// One dispatch over `threads` invocations per range of `chunks(count, LOOP_BUDGET)`: its
/// parameters are `params` then the range.
fn chunked(params: &[u32], count: usize, threads: usize) -> Result<Vec<Dispatch>> {
    crate::params::chunked(params, count, LOOP_BUDGET, threads, &[])
}

impl WgpuBackend {
    /// `kernel` as `dispatches` on the views `inputs`, with `scratch` words of scratch,
    /// writing `outs`.
    fn run_norm(
        &self,
        kernel: Kernel,
        dispatches: &[Dispatch],
        inputs: &[WgpuView<'_>],
        scratch: usize,
        outs: &[BufView<'_>],
    ) -> Result<()> {
        let views: Vec<BufView<'_>> = inputs.iter().map(WgpuView::buf_view).collect();
        self.shared
            .gpu
            .dispatch(kernel, self.is_exact(), dispatches, &views, scratch, outs)
    }
}

/// [`Backend::norm_stats`] with f64 on the device, else the reference on the host.
pub(crate) fn norm_stats(
    b: &WgpuBackend,
    s: &NormSpec,
    x: WgpuView<'_>,
    mean: WgpuViewMut<'_>,
    corr: WgpuViewMut<'_>,
    sq_sum: WgpuViewMut<'_>,
) -> Result<()> {
    if s.q == 0 {
        return Ok(());
    }
    if !b.f64_on_device() {
        let x = WgpuViews::to_host(x)?;
        WgpuViews::with_host_mut(mean, |m| {
            WgpuViews::with_host_mut(corr, |c| {
                WgpuViews::with_host_mut(sq_sum, |q| reference!(b.mode, norm_stats(s, &x, m, c, q)))
            })
        })????;
        return Ok(());
    }
    word(x.len())?;
    let count = s.count();
    let n = s.count() as f32;
    let mut dispatches = Vec::new();
    for phase in 0..3 {
        let p = [0, word(s.q)?, word(s.r)?, word(count)?, n.to_bits(), phase];
        dispatches.extend(chunked(&p, count, s.q)?);
    }
    b.run_norm(
        Kernel::NormStats,
        &dispatches,
        &[x],
        2 * s.q,
        &[mean.buf_view(), corr.buf_view(), sq_sum.buf_view()],
    )
}

/// [`Backend::norm_forward`] on the device (no f64: every element a chain of f32
/// operations).
pub(crate) fn norm_forward(
    b: &WgpuBackend,
    s: &NormSpec,
    x: WgpuView<'_>,
    st: &NormStats<'_, WgpuViews>,
    weight: Option<WgpuView<'_>>,
    bias: Option<WgpuView<'_>>,
    out: WgpuViewMut<'_>,
) -> Result<()> {
    let n = out.len();
    if n == 0 {
        return Ok(());
    }
    let none = b.zeros(0)?;
    let [kind, groups, cpg, spatial] = param_words(s)?;
    let p = vec![
        0,
        word(n)?,
        word(s.q)?,
        word(s.r)?,
        u32::from(weight.is_some()),
        u32::from(bias.is_some()),
        kind,
        groups,
        cpg,
        spatial,
    ];
    let inputs = [
        x,
        st.mean,
        st.corr,
        st.rstd,
        weight.unwrap_or(none.view()),
        bias.unwrap_or(none.view()),
    ];
    b.run_norm(
        Kernel::NormForward,
        &[Dispatch::new(p, n)],
        &inputs,
        0,
        &[out.buf_view()],
    )
}

/// [`Backend::norm_backward`] with f64 on the device, else the reference on the host.
#[allow(clippy::too_many_arguments)]
pub(crate) fn norm_backward(
    b: &WgpuBackend,
    s: &NormSpec,
    x: WgpuView<'_>,
    g: WgpuView<'_>,
    st: &NormStats<'_, WgpuViews>,
    weight: Option<WgpuView<'_>>,
    stats_depend: bool,
    grads: NormGrads<'_, WgpuViews>,
) -> Result<()> {
    if !b.f64_on_device() {
        let (x, g) = (WgpuViews::to_host(x)?, WgpuViews::to_host(g)?);
        let (mean, corr, rstd) = host_stats::<WgpuBackend>(st)?;
        let hs = NormStats {
            mean: &mean[..],
            corr: &corr[..],
            rstd: &rstd[..],
        };
        let w = weight.map(WgpuViews::to_host).transpose()?;
        let w = w.as_deref();
        with_opt_host_mut::<WgpuBackend, _>(grads.dx, |dx| {
            with_opt_host_mut::<WgpuBackend, _>(grads.dw, |dw| {
                with_opt_host_mut::<WgpuBackend, _>(grads.db, |db| {
                    let grads = NormGrads { dx, dw, db };
                    reference!(
                        b.mode,
                        norm_backward(s, &x, &g, &hs, w, stats_depend, grads)
                    )
                })
            })
        })????;
        return Ok(());
    }
    let none = b.zeros(0)?;
    let numel = s.numel("norm_backward")?;
    word(numel)?;
    let n = s.count() as f32;
    let [kind, groups, cpg, spatial] = param_words(s)?;
    let stats = [st.mean, st.corr, st.rstd];
    if let Some(dx) = grads.dx {
        let count = s.count();
        let base = [
            0,
            word(numel)?,
            word(s.q)?,
            word(s.r)?,
            word(count)?,
            n.to_bits(),
            u32::from(weight.is_some()),
            kind,
            groups,
            cpg,
            spatial,
            u32::from(stats_depend),
        ];
        let mut dispatches = Vec::new();
        if stats_depend {
            let mut p = base.to_vec();
            p.push(0);
            dispatches.extend(chunked(&p, count, s.q)?);
        }
        let mut p = base.to_vec();
        p.extend_from_slice(&[1, 0, 0]);
        dispatches.push(Dispatch::new(p, numel));
        let inputs = [
            x,
            g,
            stats[0],
            stats[1],
            stats[2],
            weight.unwrap_or(none.view()),
        ];
        b.run_norm(
            Kernel::NormBackward,
            &dispatches,
            &inputs,
            4 * s.q,
            &[dx.buf_view()],
        )?;
    }
    let params = s.params();
    let count = param_count(s);
    for (which, out) in [(0u32, grads.dw), (1, grads.db)] {
        let Some(out) = out else { continue };
        let p = [
            0,
            word(params)?,
            word(s.p)?,
            word(s.q)?,
            word(s.r)?,
            kind,
            groups,
            cpg,
            spatial,
            word(count)?,
            which,
        ];
        // ∂b reads only g (x may be empty).
        let xv = if which == 0 { x } else { none.view() };
        b.run_norm(
            Kernel::NormParamGrad,
            &chunked(&p, count, params)?,
            &[xv, g, stats[0], stats[1], stats[2]],
            2 * params,
            &[out.buf_view()],
        )?;
    }
    Ok(())
}
