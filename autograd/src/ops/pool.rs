//! Pooling: `max_pool2d`, `avg_pool2d` and `adaptive_avg_pool2d`, each with its backward
//! rule.
//!
//! Scalar loops in a fixed order, identical for every backend; the window rules and the
//! orders of every sum are in `docs/conv.md` §2 (normative).

use super::{canon, canon_all, fmt_pair};
use crate::engine::record;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use exactgrad_core::Backend;

// ----- options ---------------------------------------------------------------------------

/// Options of [`Tensor::max_pool2d`] (PyTorch's `F.max_pool2d` arguments).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaxPool2dOptions {
    /// Window size `[KH, KW]` (each ≥ 1).
    pub kernel_size: [usize; 2],
    /// Step between windows; `None` means `kernel_size` (PyTorch's default).
    pub stride: Option<[usize; 2]>,
    /// Implicit `−∞` padding on both sides; at most half the kernel size.
    pub padding: [usize; 2],
    /// Spacing between window taps (each ≥ 1).
    pub dilation: [usize; 2],
    /// Rounds the output size up instead of down (the last window must still start
    /// inside the input or the left padding).
    pub ceil_mode: bool,
}

impl MaxPool2dOptions {
    /// The options for a `kernel_size` window with PyTorch's defaults for the rest
    /// (stride = kernel size, no padding, dilation 1, floor mode).
    pub fn new(kernel_size: [usize; 2]) -> Self {
        Self {
            kernel_size,
            ..Self::default()
        }
    }
}

impl Default for MaxPool2dOptions {
    /// A 1×1 window (PyTorch has no default kernel size; use [`MaxPool2dOptions::new`]).
    fn default() -> Self {
        Self {
            kernel_size: [1, 1],
            stride: None,
            padding: [0, 0],
            dilation: [1, 1],
            ceil_mode: false,
        }
    }
}

/// Options of [`Tensor::avg_pool2d`] (PyTorch's `F.avg_pool2d` arguments).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AvgPool2dOptions {
    /// Window size `[KH, KW]` (each ≥ 1).
    pub kernel_size: [usize; 2],
    /// Step between windows; `None` means `kernel_size` (PyTorch's default).
    pub stride: Option<[usize; 2]>,
    /// Implicit zero padding on both sides; at most half the kernel size.
    pub padding: [usize; 2],
    /// Rounds the output size up instead of down (the last window must still start
    /// inside the input or the left padding).
    pub ceil_mode: bool,
    /// Whether the padding zeros count in the divisor (default `true`).
    pub count_include_pad: bool,
    /// Divides every window sum by this instead (must be non-zero).
    pub divisor_override: Option<usize>,
}

impl AvgPool2dOptions {
    /// The options for a `kernel_size` window with PyTorch's defaults for the rest.
    pub fn new(kernel_size: [usize; 2]) -> Self {
        Self {
            kernel_size,
            ..Self::default()
        }
    }
}

impl Default for AvgPool2dOptions {
    /// A 1×1 window (PyTorch has no default kernel size; use [`AvgPool2dOptions::new`]).
    fn default() -> Self {
        Self {
            kernel_size: [1, 1],
            stride: None,
            padding: [0, 0],
            ceil_mode: false,
            count_include_pad: true,
            divisor_override: None,
        }
    }
}

// ----- pooling ---------------------------------------------------------------------------

/// Sizes of a 2-D pooling over `planes = N·C` planes of `h × w`.
#[derive(Clone, Copy, Debug)]
struct PoolGeom {
    planes: usize,
    h: usize,
    w: usize,
    oh: usize,
    ow: usize,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
}

/// PyTorch's pooling output size: floor (or ceil) of `(in + 2p − d(k−1) − 1) / s` plus 1;
/// in ceil mode a last window that would start at or past `in + p` is dropped. Computed
/// without overflow for any `usize` arguments (`k`, `s`, `d` ≥ 1); a result below 1 is
/// returned as 0.
fn pool_out_size(input: usize, k: usize, s: usize, p: usize, d: usize, ceil: bool) -> u128 {
    let (input, k, s, p, d) = (input as u128, k as u128, s as u128, p as u128, d as u128);
    let padded = input + 2 * p;
    // The dilated kernel d·(k − 1) + 1; when it exceeds the padded input by more than a
    // stride the output is empty in both modes.
    let Some(eff) = d.checked_mul(k - 1).and_then(|e| e.checked_add(1)) else {
        return 0;
    };
    let slack = if ceil { s - 1 } else { 0 };
    if eff > padded + slack {
        return 0;
    }
    // Now every quantity is below 2^67.
    let mut out = (padded + slack - eff) / s + 1;
    if ceil && (out - 1) * s >= input + p {
        out -= 1;
    }
    out
}

/// The taps `[lo, hi)` of a window (start `o·s`, taps `i·d`, in padded coordinates) whose
/// positions `o·s + i·d − p` fall inside `[0, size)`: the loop bounds of a window, so that
/// the work is bounded by the input and not by the kernel size.
fn taps_inside(o: usize, s: usize, d: usize, p: usize, k: usize, size: usize) -> (usize, usize) {
    let (o, s, d, p, k, size) = (
        o as u128,
        s as u128,
        d as u128,
        p as u128,
        k as u128,
        size as u128,
    );
    let start = o * s; // < 2^67: o < out ≤ padded / s + 1
    let lo = if start >= p {
        0
    } else {
        (p - start).div_ceil(d)
    };
    let hi = if p + size > start {
        ((p + size - 1 - start) / d + 1).min(k)
    } else {
        0
    };
    (lo.min(k) as usize, hi.max(lo.min(k)) as usize)
}

/// Checks a pooling input (3-D or 4-D, non-empty channel and spatial dimensions); returns
/// the 4-D view of it and whether it was unbatched.
fn pool_input<B: Backend>(op: &'static str, x: &Tensor<B>) -> Result<(Tensor<B>, bool)> {
    let d = x.dims();
    if !(d.len() == 3 || d.len() == 4) || d[d.len() - 3..].contains(&0) {
        return Err(Error::invalid(
            op,
            "input",
            format!(
                "expects a 3-D [C, H, W] or 4-D [N, C, H, W] input with non-zero C, H and W, got shape {d:?}"
            ),
        ));
    }
    if d.len() == 3 {
        Ok((x.unsqueeze(0)?, true))
    } else {
        Ok((x.clone(), false))
    }
}

/// Checks the window arguments and computes the pooling sizes of 4-D `x`.
#[allow(clippy::too_many_arguments)]
fn pool_geom(
    op: &'static str,
    orig: &[usize],
    x: &[usize],
    kernel: [usize; 2],
    stride: Option<[usize; 2]>,
    padding: [usize; 2],
    dilation: [usize; 2],
    ceil: bool,
) -> Result<PoolGeom> {
    if kernel.contains(&0) {
        return Err(Error::invalid(
            op,
            "kernel_size",
            format!("must be positive, got {}", fmt_pair(kernel)),
        ));
    }
    let stride = stride.unwrap_or(kernel);
    if stride.contains(&0) {
        return Err(Error::invalid(
            op,
            "stride",
            format!("must be positive, got {}", fmt_pair(stride)),
        ));
    }
    if dilation.contains(&0) {
        return Err(Error::invalid(
            op,
            "dilation",
            format!("must be positive, got {}", fmt_pair(dilation)),
        ));
    }
    if padding[0] > kernel[0] / 2 || padding[1] > kernel[1] / 2 {
        return Err(Error::invalid(
            op,
            "padding",
            format!(
                "must be at most half the kernel size, got padding {} for kernel {}",
                fmt_pair(padding),
                fmt_pair(kernel)
            ),
        ));
    }
    let (h, w) = (x[2], x[3]);
    let oh = pool_out_size(h, kernel[0], stride[0], padding[0], dilation[0], ceil);
    let ow = pool_out_size(w, kernel[1], stride[1], padding[1], dilation[1], ceil);
    if oh < 1 || ow < 1 {
        return Err(Error::invalid(
            op,
            "kernel_size",
            format!(
                "input of shape {orig:?} gives output size {oh} x {ow} for kernel {}, stride {}, padding {}, dilation {}: too small",
                fmt_pair(kernel),
                fmt_pair(stride),
                fmt_pair(padding),
                fmt_pair(dilation)
            ),
        ));
    }
    let too_large = || {
        Error::Core(exactgrad_core::Error::TooLarge {
            op,
            dims: orig.to_vec(),
            limit: exactgrad_core::MAX_ELEMENTS,
        })
    };
    let (oh, ow) = (
        usize::try_from(oh).map_err(|_| too_large())?,
        usize::try_from(ow).map_err(|_| too_large())?,
    );
    exactgrad_core::Shape::from([x[0], x[1], oh, ow]).numel_for(op)?;
    Ok(PoolGeom {
        planes: x[0] * x[1],
        h,
        w,
        oh,
        ow,
        kernel,
        stride,
        padding,
        dilation,
    })
}

/// The rows (or columns) `[start, end)` of one average-pooling window along a dimension
/// and the window length clamped to the padded input (PyTorch's `pool_size` factor).
fn avg_window(o: usize, size: usize, k: usize, s: usize, p: usize) -> (usize, usize, u128) {
    // o < out ≤ (size + 2p) / s + 1, so every quantity is far below 2^127.
    let (o, size, k, s, p) = (o as i128, size as i128, k as i128, s as i128, p as i128);
    let start = o * s - p;
    let end = (start + k).min(size + p);
    let span = (end - start).max(0) as u128;
    (
        start.clamp(0, size) as usize,
        end.clamp(0, size) as usize,
        span,
    )
}

/// The windows of an average pooling: per output row and column the clipped range
/// `[start, end)` and the span clipped to the padded input.
struct AvgPlan {
    rows: Vec<(usize, usize, u128)>,
    cols: Vec<(usize, usize, u128)>,
    count_include_pad: bool,
    divisor_override: Option<usize>,
}

impl AvgPlan {
    /// `(r0, r1, c0, c1)`: the input rows and columns of window `(oy, ox)`.
    fn window(&self, oy: usize, ox: usize) -> (usize, usize, usize, usize) {
        let ((r0, r1, _), (c0, c1, _)) = (self.rows[oy], self.cols[ox]);
        (r0, r1, c0, c1)
    }

    /// PyTorch's divisor of window `(oy, ox)`.
    fn divisor(&self, oy: usize, ox: usize) -> f32 {
        let ((r0, r1, rs), (c0, c1, cs)) = (self.rows[oy], self.cols[ox]);
        match self.divisor_override {
            Some(d) => d as f32,
            // Spans are at most the kernel sizes; their product fits in u128 and is
            // rounded once to f32.
            None if self.count_include_pad => rs.saturating_mul(cs) as f32,
            None => ((r1 - r0) * (c1 - c0)) as f32,
        }
    }
}

/// `[start, end)` of adaptive window `i` of `out` over `size`: `floor(i·size/out)` to
/// `ceil((i+1)·size/out)`.
fn adaptive_window(i: usize, size: usize, out: usize) -> (usize, usize) {
    let (i, size, out) = (i as u128, size as u128, out as u128);
    (
        (i * size / out) as usize,
        ((i + 1) * size).div_ceil(out) as usize,
    )
}

/// Wraps a 4-D pooling result back to 3-D when the input was unbatched.
fn unbatch<B: Backend>(y: Tensor<B>, unbatched: bool) -> Result<Tensor<B>> {
    if unbatched {
        y.squeeze(0)
    } else {
        Ok(y)
    }
}

// ----- the operators ---------------------------------------------------------------------

impl<B: Backend> Tensor<B> {
    /// 2-D max pooling (PyTorch's `F.max_pool2d`) of `[N, C, H, W]` or `[C, H, W]`.
    ///
    /// Each output is the maximum of its window in row-major window order, skipping
    /// padding: the first maximum wins ties, a NaN wins over numbers and the last NaN
    /// of the window is the one selected (as PyTorch's CPU kernel). The selected index is
    /// kept; backward scatter-adds each output gradient into it, output positions in
    /// increasing order (f32, from `+0`).
    pub fn max_pool2d(&self, opts: MaxPool2dOptions) -> Result<Tensor<B>> {
        let op = "max_pool2d";
        let (x, unbatched) = pool_input(op, self)?;
        let pg = pool_geom(
            op,
            self.dims(),
            x.dims(),
            opts.kernel_size,
            opts.stride,
            opts.padding,
            opts.dilation,
            opts.ceil_mode,
        )?;
        let be = x.backend();
        let mode = be.mode();
        let (hw, ohw) = (pg.h * pg.w, pg.oh * pg.ow);
        let mut out = super::zeroed_vec(op, pg.planes * ohw)?;
        let mut argmax = super::try_vec(op, pg.planes * ohw, |_| usize::MAX)?;
        let xs = x.to_vec()?;
        let [kh, kw] = pg.kernel;
        let [sh, sw] = pg.stride;
        let [ph, pw] = pg.padding;
        let [dh, dw] = pg.dilation;
        // The taps of each window row and column that land inside the input (the others
        // are padding and skipped), so the loops never run over a huge kernel.
        let row_taps = super::try_vec(op, pg.oh, |oy| taps_inside(oy, sh, dh, ph, kh, pg.h))?;
        let col_taps = super::try_vec(op, pg.ow, |ox| taps_inside(ox, sw, dw, pw, kw, pg.w))?;
        for plane in 0..pg.planes {
            let xp = &xs[plane * hw..(plane + 1) * hw];
            for (oy, &(i0, i1)) in row_taps.iter().enumerate() {
                for (ox, &(j0, j1)) in col_taps.iter().enumerate() {
                    let mut best = f32::NEG_INFINITY;
                    let mut at = usize::MAX;
                    for i in i0..i1 {
                        let r = oy * sh + i * dh - ph;
                        for j in j0..j1 {
                            let q = ox * sw + j * dw - pw;
                            let idx = r * pg.w + q;
                            let v = xp[idx];
                            if at == usize::MAX || v > best || v.is_nan() {
                                best = v;
                                at = idx;
                            }
                        }
                    }
                    let o = plane * ohw + oy * pg.ow + ox;
                    out[o] = canon(mode, best);
                    argmax[o] = at;
                }
            }
        }
        let mut dims = x.dims()[..2].to_vec();
        dims.extend([pg.oh, pg.ow]);
        let y = Tensor::from_vec(be, out, dims)?;
        let y = record(op, y, &[&x], move || {
            move |gy: &Tensor<B>| {
                let gv = gy.to_vec()?;
                let mut gx = super::zeroed_vec(op, pg.planes * hw)?;
                for plane in 0..pg.planes {
                    let gxp = &mut gx[plane * hw..(plane + 1) * hw];
                    for j in plane * ohw..(plane + 1) * ohw {
                        if argmax[j] != usize::MAX {
                            gxp[argmax[j]] += gv[j];
                        }
                    }
                }
                let be = gy.backend();
                canon_all(be.mode(), &mut gx);
                let mut dims = gy.dims()[..2].to_vec();
                dims.extend([pg.h, pg.w]);
                Ok(vec![Some(Tensor::from_vec(be, gx, dims)?)])
            }
        });
        unbatch(y, unbatched)
    }

    /// 2-D average pooling (PyTorch's `F.avg_pool2d`) of `[N, C, H, W]` or `[C, H, W]`.
    ///
    /// With PyTorch's window rules: a window `[o·s − p, o·s − p + k)` is clipped to the
    /// padded input for the `count_include_pad` divisor and to the input for the sum and
    /// the other divisor; `divisor_override` replaces both. Each output is
    /// `(Σ64 of the window, row-major, rounded) ⊘ divisor`; backward adds `g ⊘ divisor`
    /// into every element of the window, output positions in increasing order.
    pub fn avg_pool2d(&self, opts: AvgPool2dOptions) -> Result<Tensor<B>> {
        let op = "avg_pool2d";
        if opts.divisor_override == Some(0) {
            return Err(Error::invalid(op, "divisor_override", "must be non-zero"));
        }
        let (x, unbatched) = pool_input(op, self)?;
        let pg = pool_geom(
            op,
            self.dims(),
            x.dims(),
            opts.kernel_size,
            opts.stride,
            opts.padding,
            [1, 1],
            opts.ceil_mode,
        )?;
        let be = x.backend();
        let mode = be.mode();
        let (hw, ohw) = (pg.h * pg.w, pg.oh * pg.ow);
        let mut out = super::zeroed_vec(op, pg.planes * ohw)?;
        let plan = AvgPlan {
            rows: super::try_vec(op, pg.oh, |o| {
                avg_window(o, pg.h, pg.kernel[0], pg.stride[0], pg.padding[0])
            })?,
            cols: super::try_vec(op, pg.ow, |o| {
                avg_window(o, pg.w, pg.kernel[1], pg.stride[1], pg.padding[1])
            })?,
            count_include_pad: opts.count_include_pad,
            divisor_override: opts.divisor_override,
        };
        let xs = x.to_vec()?;
        for plane in 0..pg.planes {
            let xp = &xs[plane * hw..(plane + 1) * hw];
            for oy in 0..pg.oh {
                for ox in 0..pg.ow {
                    let (r0, r1, c0, c1) = plan.window(oy, ox);
                    if r0 >= r1 || c0 >= c1 {
                        continue;
                    }
                    let mut s = 0.0f64;
                    for r in r0..r1 {
                        for c in c0..c1 {
                            s += f64::from(xp[r * pg.w + c]);
                        }
                    }
                    out[plane * ohw + oy * pg.ow + ox] =
                        canon(mode, (s as f32) / plan.divisor(oy, ox));
                }
            }
        }
        let mut dims = x.dims()[..2].to_vec();
        dims.extend([pg.oh, pg.ow]);
        let y = Tensor::from_vec(be, out, dims)?;
        let y = record(op, y, &[&x], move || {
            move |gy: &Tensor<B>| {
                let gv = gy.to_vec()?;
                let mut gx = super::zeroed_vec(op, pg.planes * hw)?;
                for plane in 0..pg.planes {
                    let gxp = &mut gx[plane * hw..(plane + 1) * hw];
                    for oy in 0..pg.oh {
                        for ox in 0..pg.ow {
                            let (r0, r1, c0, c1) = plan.window(oy, ox);
                            if r0 >= r1 || c0 >= c1 {
                                continue;
                            }
                            let d = gv[plane * ohw + oy * pg.ow + ox] / plan.divisor(oy, ox);
                            for r in r0..r1 {
                                for c in c0..c1 {
                                    gxp[r * pg.w + c] += d;
                                }
                            }
                        }
                    }
                }
                let be = gy.backend();
                canon_all(be.mode(), &mut gx);
                let mut dims = gy.dims()[..2].to_vec();
                dims.extend([pg.h, pg.w]);
                Ok(vec![Some(Tensor::from_vec(be, gx, dims)?)])
            }
        });
        unbatch(y, unbatched)
    }

    /// 2-D adaptive average pooling (PyTorch's `F.adaptive_avg_pool2d`) of
    /// `[N, C, H, W]` or `[C, H, W]` to `output_size` `[OH, OW]`.
    ///
    /// Window `i` of a dimension covers `[⌊i·in/out⌋, ⌈(i+1)·in/out⌉)`; each output is
    /// `(Σ64 of the window, row-major, rounded) ⊘ (window rows · window columns)`, and
    /// backward adds `g ⊘ count` into the window, output positions in increasing order.
    pub fn adaptive_avg_pool2d(&self, output_size: [usize; 2]) -> Result<Tensor<B>> {
        let op = "adaptive_avg_pool2d";
        let (x, unbatched) = pool_input(op, self)?;
        let (h, w) = (x.dims()[2], x.dims()[3]);
        let [oh, ow] = output_size;
        let planes = x.dims()[0] * x.dims()[1];
        exactgrad_core::Shape::from([x.dims()[0], x.dims()[1], oh, ow]).numel_for(op)?;
        let be = x.backend();
        let mode = be.mode();
        let (hw, ohw) = (h * w, oh * ow);
        let mut out = super::zeroed_vec(op, planes * ohw)?;
        let rows = super::try_vec(op, oh, |i| adaptive_window(i, h, oh))?;
        let cols = super::try_vec(op, ow, |i| adaptive_window(i, w, ow))?;
        let xs = x.to_vec()?;
        for plane in 0..planes {
            let xp = &xs[plane * hw..(plane + 1) * hw];
            for (oy, &(r0, r1)) in rows.iter().enumerate() {
                for (ox, &(c0, c1)) in cols.iter().enumerate() {
                    let mut s = 0.0f64;
                    for r in r0..r1 {
                        for c in c0..c1 {
                            s += f64::from(xp[r * w + c]);
                        }
                    }
                    let count = ((r1 - r0) * (c1 - c0)) as f32;
                    out[plane * ohw + oy * ow + ox] = canon(mode, (s as f32) / count);
                }
            }
        }
        let mut dims = x.dims()[..2].to_vec();
        dims.extend([oh, ow]);
        let y = Tensor::from_vec(be, out, dims)?;
        let y = record(op, y, &[&x], move || {
            move |gy: &Tensor<B>| {
                let gv = gy.to_vec()?;
                let mut gx = super::zeroed_vec(op, planes * hw)?;
                for plane in 0..planes {
                    let gxp = &mut gx[plane * hw..(plane + 1) * hw];
                    for (oy, &(r0, r1)) in rows.iter().enumerate() {
                        for (ox, &(c0, c1)) in cols.iter().enumerate() {
                            let count = ((r1 - r0) * (c1 - c0)) as f32;
                            let d = gv[plane * ohw + oy * ow + ox] / count;
                            for r in r0..r1 {
                                for c in c0..c1 {
                                    gxp[r * w + c] += d;
                                }
                            }
                        }
                    }
                }
                let be = gy.backend();
                canon_all(be.mode(), &mut gx);
                let mut dims = gy.dims()[..2].to_vec();
                dims.extend([h, w]);
                Ok(vec![Some(Tensor::from_vec(be, gx, dims)?)])
            }
        });
        unbatch(y, unbatched)
    }
}
