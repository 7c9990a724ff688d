//! The pooling kernels on the device (`docs/gpu.md` §2): average and adaptive average
//! pooling (forward with an f64 accumulator, backward as a gather in the reference's
//! order) and max pooling (forward with the argmax downloaded, backward as a gather of
//! the outputs that chose each element). The window geometry is computed on the host
//! by core's own functions and uploaded as tables, so the device does only the
//! arithmetic of the reference's loops.

use crate::device::{BufView, Dispatch, Kernel};
use crate::{word, WgpuBackend, WgpuStorage, WgpuView, WgpuViewMut, WgpuViews, LOOP_BUDGET};
use exactgrad_core::backend::{try_collect, try_reserve, try_vec_filled, try_vec_with_capacity};
use exactgrad_core::kernels::{taps_inside, AdaptivePool2dSpec, AvgPool2dSpec, Pool2dSpec};
use exactgrad_core::{Backend, BackendImpl, Result, ViewFamily, ViewLen};

/// The windows of an average pooling as the reference computes them: per output row
/// `(r0, r1)`, per output column `(c0, c1)`, per output position the divisor.
struct Windows {
    rows: Vec<(usize, usize)>,
    cols: Vec<(usize, usize)>,
    divs: Vec<f32>,
}

impl Windows {
    /// The windows of `window(oy, ox)` over `oh × ow` outputs.
    /// The tables are sized by the output, allocated fallibly (host memory may hold less
    /// than the device).
    fn new(
        oh: usize,
        ow: usize,
        window: impl Fn(usize, usize) -> (usize, usize, usize, usize, f32),
    ) -> Result<Self> {
        let op = "wgpu pooling windows";
        let rows = try_collect(
            op,
            (0..oh).map(|oy| {
                let (r0, r1, ..) = window(oy, 0);
                (r0, r1.max(r0))
            }),
        )?;
        let cols = try_collect(
            op,
            (0..ow).map(|ox| {
                let (_, _, c0, c1, _) = window(0, ox);
                (c0, c1.max(c0))
            }),
        )?;
        let mut divs = try_vec_with_capacity(op, oh.saturating_mul(ow))?;
        for oy in 0..oh {
            for ox in 0..ow {
                divs.push(window(oy, ox).4);
            }
        }
        Ok(Self { rows, cols, divs })
    }

    /// The forward tables: `(r0, rows)` per output row, `(c0, columns)` per output
    /// column, the divisors' bits; and the most taps of a window.
    fn forward(&self) -> Result<(Vec<u32>, usize)> {
        let mut geo = try_vec_with_capacity(
            "wgpu pooling tables",
            2 * self.rows.len() + 2 * self.cols.len() + self.divs.len(),
        )?;
        for &(a, b) in self.rows.iter().chain(&self.cols) {
            geo.push(word(a)?);
            geo.push(word(b - a)?);
        }
        geo.extend(self.divs.iter().map(|d| d.to_bits()));
        let span = |v: &[(usize, usize)]| v.iter().map(|&(a, b)| b - a).max().unwrap_or(0);
        Ok((geo, span(&self.rows) * span(&self.cols)))
    }

    /// The backward tables over an `h × w` input: per input row the output rows whose
    /// windows contain it `(first, count)`, the same per input column, the divisors' bits;
    /// and the most windows containing one element.
    fn backward(&self, h: usize, w: usize) -> Result<(Vec<u32>, usize)> {
        let len = h
            .checked_add(w)
            .and_then(|n| n.checked_mul(2))
            .and_then(|n| n.checked_add(self.divs.len()));
        let mut geo = try_vec_with_capacity("wgpu pooling tables", len.unwrap_or(usize::MAX))?;
        let mut most = [0usize; 2];
        for (k, (size, windows)) in [(h, &self.rows), (w, &self.cols)].into_iter().enumerate() {
            // The windows' bounds never decrease with the output index, so the windows
            // containing position y are the contiguous range [first with end > y,
            // first with start > y).
            let (mut lo, mut hi) = (0, 0);
            for y in 0..size {
                while lo < windows.len() && windows[lo].1 <= y {
                    lo += 1;
                }
                while hi < windows.len() && windows[hi].0 <= y {
                    hi += 1;
                }
                let n = hi.saturating_sub(lo);
                most[k] = most[k].max(n);
                geo.push(word(lo)?);
                geo.push(word(n)?);
            }
        }
        geo.extend(self.divs.iter().map(|d| d.to_bits()));
        Ok((geo, most[0] * most[1]))
    }

    /// Whether the bounds never decrease along both dimensions (the backward gather's
    /// assumption; true of the reference's windows).
    fn monotone(&self) -> bool {
        let up = |v: &[(usize, usize)]| v.windows(2).all(|p| p[0].0 <= p[1].0 && p[0].1 <= p[1].1);
        up(&self.rows) && up(&self.cols)
    }
}

/// [`crate::params::chunked`] with the loop budget: one dispatch per range of
/// `LOOP_BUDGET` taps, its parameters `params`, the range, then `tail`.
fn chunked(params: &[u32], taps: usize, threads: usize, tail: &[u32]) -> Result<Vec<Dispatch>> {
    crate::params::chunked(params, taps, LOOP_BUDGET, threads, tail)
}

impl WgpuBackend {
    /// `words` in a new device buffer (the tables of a kernel).
    fn upload_words(&self, words: &[u32]) -> Result<WgpuStorage> {
        let s = WgpuStorage::new(&self.shared, words.len(), false)?;
        self.shared.gpu.write(&s.buf, 0, words)?;
        Ok(s)
    }

    /// `kernel` as `dispatches` on the views `inputs`, with `scratch` words of scratch.
    fn run_pool(
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

    /// The average poolings' forward: `x` (`planes` planes of `h × w`) to `out` (`oh × ow`
    /// per plane) through `windows`; `empty_zero`: an empty window gives +0.
    fn avg_forward(
        &self,
        [planes, h, w, oh, ow]: [usize; 5],
        windows: &Windows,
        empty_zero: bool,
        x: WgpuView<'_>,
        out: WgpuViewMut<'_>,
    ) -> Result<()> {
        let n = out.len();
        if n == 0 || planes == 0 {
            return Ok(());
        }
        word(x.len())?;
        let (geo, taps) = windows.forward()?;
        let geo = self.upload_words(&geo)?;
        let p = [
            0,
            word(n)?,
            word(oh)?,
            word(ow)?,
            word(h)?,
            word(w)?,
            u32::from(empty_zero),
            word(taps)?,
        ];
        self.run_pool(
            Kernel::AvgPool,
            &chunked(&p, taps, n, &[])?,
            &[x, geo.view()],
            2 * n,
            &[out.buf_view()],
        )
    }

    /// The average poolings' backward: `g` (`oh × ow` per plane) to `gx` (`h × w`).
    fn avg_backward(
        &self,
        [planes, h, w, oh, ow]: [usize; 5],
        windows: &Windows,
        g: WgpuView<'_>,
        gx: WgpuViewMut<'_>,
    ) -> Result<()> {
        let n = gx.len();
        if n == 0 || planes == 0 {
            return Ok(());
        }
        word(g.len())?;
        let (geo, taps) = windows.backward(h, w)?;
        let geo = self.upload_words(&geo)?;
        let p = [
            0,
            word(n)?,
            word(h)?,
            word(w)?,
            word(oh)?,
            word(ow)?,
            word(taps)?,
        ];
        self.run_pool(
            Kernel::PoolBackward,
            &chunked(&p, taps, n, &[])?,
            &[g, geo.view()],
            0,
            &[gx.buf_view()],
        )
    }
}

/// [`Backend::avg_pool2d`] with f64 on the device, else the reference on the host.
pub(crate) fn avg_pool2d(
    b: &WgpuBackend,
    s: &AvgPool2dSpec,
    x: WgpuView<'_>,
    out: WgpuViewMut<'_>,
) -> Result<()> {
    // No output: the tables (one entry per output) are not built.
    if out.len() == 0 {
        return Ok(());
    }
    if !b.f64_on_device() {
        let x = WgpuViews::to_host(x)?;
        return WgpuViews::with_host_mut(out, |o| reference!(b.mode, avg_pool2d(s, &x, o)))?;
    }
    let p = &s.pool;
    let windows = Windows::new(p.oh, p.ow, |oy, ox| s.window(oy, ox))?;
    b.avg_forward([p.planes, p.h, p.w, p.oh, p.ow], &windows, true, x, out)
}

/// [`Backend::adaptive_avg_pool2d`] with f64 on the device, else the reference on the
/// host.
pub(crate) fn adaptive_avg_pool2d(
    b: &WgpuBackend,
    s: &AdaptivePool2dSpec,
    x: WgpuView<'_>,
    out: WgpuViewMut<'_>,
) -> Result<()> {
    // No output: the tables (one entry per output) are not built.
    if out.len() == 0 {
        return Ok(());
    }
    if !b.f64_on_device() {
        let x = WgpuViews::to_host(x)?;
        return WgpuViews::with_host_mut(out, |o| {
            reference!(b.mode, adaptive_avg_pool2d(s, &x, o))
        })?;
    }
    let windows = Windows::new(s.oh, s.ow, |oy, ox| s.window(oy, ox))?;
    b.avg_forward([s.planes, s.h, s.w, s.oh, s.ow], &windows, false, x, out)
}

/// [`Backend::avg_pool2d_backward`] on the device.
pub(crate) fn avg_pool2d_backward(
    b: &WgpuBackend,
    s: &AvgPool2dSpec,
    g: WgpuView<'_>,
    gx: WgpuViewMut<'_>,
) -> Result<()> {
    // No element, or no gradient: the tables (one entry per output) are not built.
    if gx.len() == 0 {
        return Ok(());
    }
    if g.len() == 0 {
        return gx.zero();
    }
    let p = &s.pool;
    let windows = Windows::new(p.oh, p.ow, |oy, ox| s.window(oy, ox))?;
    if !windows.monotone() {
        let g = WgpuViews::to_host(g)?;
        return WgpuViews::with_host_mut(gx, |o| {
            reference!(b.mode, avg_pool2d_backward(s, &g, o))
        })?;
    }
    b.avg_backward([p.planes, p.h, p.w, p.oh, p.ow], &windows, g, gx)
}

/// [`Backend::adaptive_avg_pool2d_backward`] on the device.
pub(crate) fn adaptive_avg_pool2d_backward(
    b: &WgpuBackend,
    s: &AdaptivePool2dSpec,
    g: WgpuView<'_>,
    gx: WgpuViewMut<'_>,
) -> Result<()> {
    // No element, or no gradient: the tables (one entry per output) are not built.
    if gx.len() == 0 {
        return Ok(());
    }
    if g.len() == 0 {
        return gx.zero();
    }
    let windows = Windows::new(s.oh, s.ow, |oy, ox| s.window(oy, ox))?;
    if !windows.monotone() {
        let g = WgpuViews::to_host(g)?;
        return WgpuViews::with_host_mut(gx, |o| {
            reference!(b.mode, adaptive_avg_pool2d_backward(s, &g, o))
        })?;
    }
    b.avg_backward([s.planes, s.h, s.w, s.oh, s.ow], &windows, g, gx)
}

/// [`Backend::max_pool2d`] on the device: the indices come back as words into `argmax`.
pub(crate) fn max_pool2d(
    b: &WgpuBackend,
    s: &Pool2dSpec,
    x: WgpuView<'_>,
    out: WgpuViewMut<'_>,
    argmax: &mut [usize],
) -> Result<()> {
    let n = out.len();
    if n == 0 || s.planes == 0 {
        return Ok(());
    }
    word(x.len())?;
    // Per output row and column: the first input position of a tap inside and the taps
    // inside (core's `taps_inside`).
    let mut geo = try_vec_with_capacity("wgpu max pooling", 2 * (s.oh + s.ow))?;
    let mut most = [0usize; 2];
    for (k, (o, size)) in [(s.oh, s.h), (s.ow, s.w)].into_iter().enumerate() {
        let (st, d, pd, kk) = (s.stride[k], s.dilation[k], s.padding[k], s.kernel[k]);
        for i in 0..o {
            let (lo, hi) = taps_inside(i, st, d, pd, kk, size);
            let first = if hi > lo { i * st + lo * d - pd } else { 0 };
            most[k] = most[k].max(hi - lo);
            geo.push(word(first)?);
            geo.push(word(hi - lo)?);
        }
    }
    let taps = most[0] * most[1];
    let geo = b.upload_words(&geo)?;
    let idx = b.zeros(n)?;
    let p = [
        0,
        word(n)?,
        word(s.oh)?,
        word(s.ow)?,
        word(s.h)?,
        word(s.w)?,
        word(taps)?,
    ];
    // The range, then the tap spacing.
    let tail = [word(s.dilation[0])?, word(s.dilation[1])?];
    b.run_pool(
        Kernel::MaxPool,
        &chunked(&p, taps, n, &tail)?,
        &[x, geo.view()],
        2 * n,
        &[out.buf_view(), idx.view().buf_view()],
    )?;
    let words = b.shared.gpu.read(&idx.buf, 0, n)?;
    for (a, w) in argmax.iter_mut().zip(words) {
        *a = if w == u32::MAX {
            usize::MAX
        } else {
            w as usize
        };
    }
    Ok(())
}

/// [`Backend::max_pool2d_backward`] on the device: the host's argmax becomes, per input
/// element, the list of the outputs that chose it in increasing order (uploaded).
pub(crate) fn max_pool2d_backward(
    b: &WgpuBackend,
    s: &Pool2dSpec,
    argmax: &[usize],
    g: WgpuView<'_>,
    gx: WgpuViewMut<'_>,
) -> Result<()> {
    let n = gx.len();
    if n == 0 {
        return Ok(());
    }
    word(n + 1)?;
    word(g.len())?;
    let (hw, ohw) = (s.h * s.w, s.oh * s.ow);
    // A counting sort of the outputs by the element they chose (stable: each element's
    // outputs stay in increasing order).
    let target = |j: usize| match argmax[j] {
        usize::MAX => None,
        a => Some((j / ohw.max(1)) * hw + a),
    };
    let op = "wgpu max pooling backward";
    let mut geo = try_vec_filled(op, n + 1, 0u32)?;
    for j in 0..argmax.len() {
        if let Some(e) = target(j) {
            geo[e + 1] += 1;
        }
    }
    let most = geo.iter().copied().max().unwrap_or(0) as usize;
    for e in 0..n {
        geo[e + 1] += geo[e];
    }
    let total = geo[n] as usize;
    // The shader indexes the list from word n + 1.
    word(n + 1 + total)?;
    let mut next: Vec<u32> = try_collect(op, geo[..n].iter().copied())?;
    try_reserve(op, &mut geo, total)?;
    geo.resize(n + 1 + total, 0);
    for j in 0..argmax.len() {
        if let Some(e) = target(j) {
            geo[n + 1 + next[e] as usize] = word(j)?;
            next[e] += 1;
        }
    }
    let geo = b.upload_words(&geo)?;
    let p = [0, word(n)?, word(most)?];
    b.run_pool(
        Kernel::MaxPoolBackward,
        &chunked(&p, most, n, &[])?,
        &[g, geo.view()],
        0,
        &[gx.buf_view()],
    )
}
