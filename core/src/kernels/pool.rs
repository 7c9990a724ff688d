//! Pooling and the im2col/col2im of convolution (`docs/conv.md` §1–2).

use super::{canon, checked_product};
use crate::check::check_len;
use crate::error::{Error, Result};
use crate::mode::ComputeMode;

/// PyTorch's pooling output size: floor (or ceil) of `(in + 2p − d(k−1) − 1) / s` plus 1;
/// in ceil mode a last window that would start at or past `in + p` is dropped. Computed
/// without overflow for any `usize` arguments (`k`, `s`, `d` ≥ 1); a result below 1 is
/// returned as 0.
pub fn pool_out_size(input: usize, k: usize, s: usize, p: usize, d: usize, ceil: bool) -> u128 {
    let (input, k, s, p, d) = (input as u128, k as u128, s as u128, p as u128, d as u128);
    let padded = input + 2 * p;
    let Some(eff) = d.checked_mul(k - 1).and_then(|e| e.checked_add(1)) else {
        return 0;
    };
    let slack = if ceil { s - 1 } else { 0 };
    if eff > padded + slack {
        return 0;
    }
    let mut out = (padded + slack - eff) / s + 1;
    if ceil && (out - 1) * s >= input + p {
        out -= 1;
    }
    out
}

/// The taps `[lo, hi)` of a window (start `o·s`, taps `i·d`, in padded coordinates) whose
/// positions `o·s + i·d − p` fall inside `[0, size)`.
pub fn taps_inside(
    o: usize,
    s: usize,
    d: usize,
    p: usize,
    k: usize,
    size: usize,
) -> (usize, usize) {
    let (o, s, d, p, k, size) = (
        o as u128,
        s as u128,
        d as u128,
        p as u128,
        k as u128,
        size as u128,
    );
    let start = o * s;
    let lo = if start >= p {
        0
    } else {
        (p - start).div_ceil(d.max(1))
    };
    let hi = if p + size > start {
        ((p + size - 1 - start) / d.max(1) + 1).min(k)
    } else {
        0
    };
    (lo.min(k) as usize, hi.max(lo.min(k)) as usize)
}

/// The rows (or columns) `[start, end)` of one average-pooling window along a dimension
/// and the window length clamped to the padded input (PyTorch's `pool_size` factor).
pub fn avg_window(o: usize, size: usize, k: usize, s: usize, p: usize) -> (usize, usize, u128) {
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

/// `[start, end)` of adaptive window `i` of `out` over `size`: `⌊i·size/out⌋` to
/// `⌈(i+1)·size/out⌉`.
pub fn adaptive_window(i: usize, size: usize, out: usize) -> (usize, usize) {
    let (i, size, out) = (i as u128, size as u128, out.max(1) as u128);
    (
        ((i * size / out) as usize).min(size as usize),
        (((i + 1) * size).div_ceil(out) as usize).min(size as usize),
    )
}

/// The geometry of a 2-D pooling over `planes` planes of `h × w` giving `oh × ow`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pool2dSpec {
    /// Planes (`N·C`).
    pub planes: usize,
    /// Input height.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Output height.
    pub oh: usize,
    /// Output width.
    pub ow: usize,
    /// Window `[KH, KW]`.
    pub kernel: [usize; 2],
    /// Window step.
    pub stride: [usize; 2],
    /// Implicit padding on both sides.
    pub padding: [usize; 2],
    /// Tap spacing (1 for the average pools).
    pub dilation: [usize; 2],
}

impl Pool2dSpec {
    /// Checks the sizes (non-zero kernel, stride and dilation; every count in checked
    /// arithmetic) and returns the input and output element counts.
    pub fn check(&self, op: &'static str) -> Result<(usize, usize)> {
        for (arg, v) in [
            ("kernel_size", self.kernel),
            ("stride", self.stride),
            ("dilation", self.dilation),
        ] {
            if v.contains(&0) {
                return Err(Error::invalid(
                    op,
                    arg,
                    alloc::format!("must be positive, got {v:?}"),
                ));
            }
        }
        // Window starts `o·s` and input positions `< size + p` fit in usize, so the
        // window arithmetic (u128/i128 for the bounds, usize for taps inside the input)
        // cannot overflow.
        for (o, st, size, pd) in [
            (self.oh, self.stride[0], self.h, self.padding[0]),
            (self.ow, self.stride[1], self.w, self.padding[1]),
        ] {
            let fits =
                o.saturating_sub(1).checked_mul(st).is_some() && size.checked_add(pd).is_some();
            if !fits {
                return Err(Error::overflow(
                    op,
                    "spec",
                    alloc::format!("the windows of {self:?} overflow usize"),
                ));
            }
        }
        // The kernels form the plane sizes `h·w` and `oh·ow` whatever the number of
        // planes: they must be representable even when there are none.
        checked_product(op, "input", &[self.h, self.w])?;
        checked_product(op, "output", &[self.oh, self.ow])?;
        Ok((
            checked_product(op, "input", &[self.planes, self.h, self.w])?,
            checked_product(op, "output", &[self.planes, self.oh, self.ow])?,
        ))
    }

    /// Checks [`Backend::max_pool2d`](crate::Backend::max_pool2d) buffers.
    pub fn check_max(&self, x: usize, out: usize, argmax: usize) -> Result<()> {
        let op = "max_pool2d";
        let (ni, no) = self.check(op)?;
        check_len(op, "x", x, ni)?;
        check_len(op, "out", out, no)?;
        check_len(op, "argmax", argmax, no)
    }

    /// Checks [`Backend::max_pool2d_backward`](crate::Backend::max_pool2d_backward)
    /// buffers (the indices themselves are checked as they are read).
    pub fn check_max_backward(&self, argmax: &[usize], g: usize, gx: usize) -> Result<()> {
        let op = "max_pool2d_backward";
        let (ni, no) = self.check(op)?;
        check_len(op, "argmax", argmax.len(), no)?;
        check_len(op, "g", g, no)?;
        check_len(op, "gx", gx, ni)?;
        // Every index inside its plane (or `usize::MAX`, a window without taps); the first
        // one outside, in output order, is the error.
        let hw = self.h * self.w;
        // `a + 1 > hw` (wrapping) is `a ≥ hw` for every index but `usize::MAX`, which wraps
        // to 0: one comparison per index in a branch-free pass; the search for the first
        // bad index runs only when there is one.
        let bad = |a: usize| a.wrapping_add(1) > hw;
        if !argmax.iter().fold(false, |any, &a| any | bad(a)) {
            return Ok(());
        }
        match argmax.iter().find(|&&a| bad(a)) {
            Some(&first) => Err(bad_max_index(first, hw)),
            None => Ok(()),
        }
    }
}

/// An average pooling: the window geometry (dilation 1) and PyTorch's divisor rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AvgPool2dSpec {
    /// The windows.
    pub pool: Pool2dSpec,
    /// Whether the padding counts in the divisor.
    pub count_include_pad: bool,
    /// A divisor replacing both rules (non-zero).
    pub divisor_override: Option<usize>,
}

impl AvgPool2dSpec {
    /// Checks the buffers of the forward (`a` = x, `b` = out) or backward (`a` = gx,
    /// `b` = g) kernel.
    pub fn check(&self, op: &'static str, input: usize, output: usize) -> Result<()> {
        let (ni, no) = self.pool.check(op)?;
        if self.pool.dilation != [1, 1] {
            return Err(Error::invalid(
                op,
                "dilation",
                "must be [1, 1] for average pooling",
            ));
        }
        if self.divisor_override == Some(0) {
            return Err(Error::invalid(op, "divisor_override", "must be non-zero"));
        }
        check_len(op, "input", input, ni)?;
        check_len(op, "output", output, no)
    }

    /// The window of output `(oy, ox)`: input rows `[r0, r1)`, columns `[c0, c1)`, and
    /// its divisor.
    #[inline(always)]
    pub fn window(&self, oy: usize, ox: usize) -> (usize, usize, usize, usize, f32) {
        let p = &self.pool;
        let (r0, r1, rs) = avg_window(oy, p.h, p.kernel[0], p.stride[0], p.padding[0]);
        let (c0, c1, cs) = avg_window(ox, p.w, p.kernel[1], p.stride[1], p.padding[1]);
        let d = match self.divisor_override {
            Some(d) => d as f32,
            None if self.count_include_pad => rs.saturating_mul(cs) as f32,
            None => ((r1 - r0) * (c1 - c0)) as f32,
        };
        (r0, r1, c0, c1, d)
    }
}

/// An adaptive average pooling of `planes` planes `h × w` to `oh × ow`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdaptivePool2dSpec {
    /// Planes (`N·C`).
    pub planes: usize,
    /// Input height.
    pub h: usize,
    /// Input width.
    pub w: usize,
    /// Output height.
    pub oh: usize,
    /// Output width.
    pub ow: usize,
}

impl AdaptivePool2dSpec {
    /// Checks the buffers of the forward (`input` = x, `output` = out) or backward
    /// (`input` = gx, `output` = g) kernel.
    pub fn check(&self, op: &'static str, input: usize, output: usize) -> Result<()> {
        // The plane sizes, representable even when there are no planes (the kernels
        // form them).
        checked_product(op, "input", &[self.h, self.w])?;
        checked_product(op, "output", &[self.oh, self.ow])?;
        check_len(
            op,
            "input",
            input,
            checked_product(op, "input", &[self.planes, self.h, self.w])?,
        )?;
        check_len(
            op,
            "output",
            output,
            checked_product(op, "output", &[self.planes, self.oh, self.ow])?,
        )
    }

    /// The window of output `(oy, ox)`: rows `[r0, r1)`, columns `[c0, c1)`, and its count.
    #[inline(always)]
    pub fn window(&self, oy: usize, ox: usize) -> (usize, usize, usize, usize, f32) {
        let (r0, r1) = adaptive_window(oy, self.h, self.oh);
        let (c0, c1) = adaptive_window(ox, self.w, self.ow);
        (r0, r1, c0, c1, ((r1 - r0) * (c1 - c0)) as f32)
    }
}

/// The geometry of one item's im2col/col2im (`docs/conv.md` §1): `c` channels of
/// `h × w`, kernel `kh × kw`, output `oh × ow`; the column matrix is
/// `[c·kh·kw, oh·ow]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Col2imSpec {
    /// Channels.
    pub c: usize,
    /// Input height (unpadded).
    pub h: usize,
    /// Input width (unpadded).
    pub w: usize,
    /// Kernel height.
    pub kh: usize,
    /// Kernel width.
    pub kw: usize,
    /// Stride `[sh, sw]`.
    pub stride: [usize; 2],
    /// Zero padding `[ph, pw]`.
    pub padding: [usize; 2],
    /// Dilation `[dh, dw]`.
    pub dilation: [usize; 2],
    /// Output height.
    pub oh: usize,
    /// Output width.
    pub ow: usize,
}

impl Col2imSpec {
    /// Checks the sizes (every product in checked arithmetic, the last window inside the
    /// padded input) and the buffers: `image` holds `c·h·w` elements, `cols`
    /// `c·kh·kw·oh·ow`.
    pub fn check(&self, op: &'static str, image: usize, cols: usize) -> Result<()> {
        // The partial products the kernels form whatever the channel count (the column
        // rows and the column length) must be representable even when a factor is 0.
        checked_product(op, "cols", &[self.c, self.kh, self.kw])?;
        checked_product(op, "cols", &[self.oh, self.ow])?;
        check_len(
            op,
            "image",
            image,
            checked_product(op, "image", &[self.c, self.h, self.w])?,
        )?;
        check_len(
            op,
            "cols",
            cols,
            checked_product(op, "cols", &[self.c, self.kh, self.kw, self.oh, self.ow])?,
        )?;
        if self.oh == 0 || self.ow == 0 || self.kh == 0 || self.kw == 0 {
            return Ok(());
        }
        // Row of the last tap of the last window, in padded coordinates, must lie inside
        // the padded input (so the loops' arithmetic cannot overflow).
        for (o, s, k, d, size, p) in [
            (
                self.oh,
                self.stride[0],
                self.kh,
                self.dilation[0],
                self.h,
                self.padding[0],
            ),
            (
                self.ow,
                self.stride[1],
                self.kw,
                self.dilation[1],
                self.w,
                self.padding[1],
            ),
        ] {
            let last = (o - 1)
                .checked_mul(s)
                .and_then(|a| (k - 1).checked_mul(d).and_then(|b| a.checked_add(b)));
            let padded = size.checked_add(p).and_then(|v| v.checked_add(p));
            match (last, padded) {
                (Some(l), Some(pd)) if l < pd => {}
                _ => {
                    return Err(Error::invalid(
                        op,
                        "spec",
                        alloc::format!("the windows of {self:?} do not fit in the padded input"),
                    ))
                }
            }
        }
        Ok(())
    }

    /// Checks the sizes as [`Col2imSpec::check`] does for the column matrix these
    /// channels would have, and the buffers of a depthwise convolution: `image` holds
    /// `c·h·w` elements, `filters` `c·kh·kw` and `plane` (the output or its gradient)
    /// `c·oh·ow`.
    pub fn check_depthwise(
        &self,
        op: &'static str,
        image: usize,
        filters: usize,
        plane: usize,
    ) -> Result<()> {
        let cols = checked_product(op, "cols", &[self.c, self.kh, self.kw, self.oh, self.ow])?;
        self.check(op, image, cols)?;
        check_len(
            op,
            "w",
            filters,
            checked_product(op, "w", &[self.c, self.kh, self.kw])?,
        )?;
        check_len(
            op,
            "out",
            plane,
            checked_product(op, "out", &[self.c, self.oh, self.ow])?,
        )
    }

    /// The input row (or column) of output position `o`, tap `i`: `Some(o·s + i·d − p)`
    /// when inside `[0, size)`.
    #[inline(always)]
    pub fn source(o: usize, i: usize, s: usize, d: usize, p: usize, size: usize) -> Option<usize> {
        let r = o * s + i * d;
        if r < p || r - p >= size {
            None
        } else {
            Some(r - p)
        }
    }
}

/// max_pool2d forward (`docs/conv.md` §2): the first maximum in row-major tap order, a
/// NaN replacing any number (so the last NaN wins); `−∞` and index `usize::MAX` for a
/// window without taps.
pub(crate) fn max_pool2d(
    mode: ComputeMode,
    s: &Pool2dSpec,
    x: &[f32],
    out: &mut [f32],
    argmax: &mut [usize],
) {
    let (hw, ohw) = (s.h * s.w, s.oh * s.ow);
    for plane in 0..s.planes {
        let xp = &x[plane * hw..(plane + 1) * hw];
        for oy in 0..s.oh {
            let (i0, i1) = taps_inside(
                oy,
                s.stride[0],
                s.dilation[0],
                s.padding[0],
                s.kernel[0],
                s.h,
            );
            for ox in 0..s.ow {
                let (j0, j1) = taps_inside(
                    ox,
                    s.stride[1],
                    s.dilation[1],
                    s.padding[1],
                    s.kernel[1],
                    s.w,
                );
                let mut best = f32::NEG_INFINITY;
                let mut at = usize::MAX;
                for i in i0..i1 {
                    let r = oy * s.stride[0] + i * s.dilation[0] - s.padding[0];
                    for j in j0..j1 {
                        let q = ox * s.stride[1] + j * s.dilation[1] - s.padding[1];
                        let idx = r * s.w + q;
                        let v = xp[idx];
                        if at == usize::MAX || v > best || v.is_nan() {
                            best = v;
                            at = idx;
                        }
                    }
                }
                let o = plane * ohw + oy * s.ow + ox;
                out[o] = canon(mode, best);
                argmax[o] = at;
            }
        }
    }
}

/// The error of an argmax index outside its plane.
pub fn bad_max_index(at: usize, hw: usize) -> Error {
    Error::invalid(
        "max_pool2d_backward",
        "argmax",
        alloc::format!("index {at} is outside a plane of {hw} elements"),
    )
}

/// max_pool2d backward: `∂x` from `+0`, `∂x[argmax] ⊕= g` for outputs in increasing order
/// (every index inside its plane: [`Pool2dSpec::check_max_backward`]).
pub(crate) fn max_pool2d_backward(
    mode: ComputeMode,
    s: &Pool2dSpec,
    argmax: &[usize],
    g: &[f32],
    gx: &mut [f32],
) {
    let (hw, ohw) = (s.h * s.w, s.oh * s.ow);
    gx.fill(0.0);
    for plane in 0..s.planes {
        let gxp = &mut gx[plane * hw..(plane + 1) * hw];
        for j in plane * ohw..(plane + 1) * ohw {
            let at = argmax[j];
            if at == usize::MAX {
                continue;
            }
            gxp[at] += g[j];
        }
    }
    for v in gx.iter_mut() {
        *v = canon(mode, *v);
    }
}

/// avg_pool2d forward: `(Σ64 of the window, row-major, rounded) ⊘ divisor`, `+0` for an
/// empty window.
pub(crate) fn avg_pool2d(mode: ComputeMode, s: &AvgPool2dSpec, x: &[f32], out: &mut [f32]) {
    let p = &s.pool;
    let (hw, ohw) = (p.h * p.w, p.oh * p.ow);
    for plane in 0..p.planes {
        let xp = &x[plane * hw..(plane + 1) * hw];
        for oy in 0..p.oh {
            for ox in 0..p.ow {
                let (r0, r1, c0, c1, d) = s.window(oy, ox);
                let o = plane * ohw + oy * p.ow + ox;
                if r0 >= r1 || c0 >= c1 {
                    out[o] = 0.0;
                    continue;
                }
                let mut acc = 0.0f64;
                for r in r0..r1 {
                    for &v in &xp[r * p.w + c0..r * p.w + c1] {
                        acc += f64::from(v);
                    }
                }
                out[o] = canon(mode, (acc as f32) / d);
            }
        }
    }
}

/// avg_pool2d backward: `∂x` from `+0`; for outputs in increasing order `d = g ⊘ divisor`
/// added into every element of the window, row-major.
pub(crate) fn avg_pool2d_backward(mode: ComputeMode, s: &AvgPool2dSpec, g: &[f32], gx: &mut [f32]) {
    let p = &s.pool;
    let (hw, ohw) = (p.h * p.w, p.oh * p.ow);
    gx.fill(0.0);
    for plane in 0..p.planes {
        let gxp = &mut gx[plane * hw..(plane + 1) * hw];
        for oy in 0..p.oh {
            for ox in 0..p.ow {
                let (r0, r1, c0, c1, div) = s.window(oy, ox);
                if r0 >= r1 || c0 >= c1 {
                    continue;
                }
                let d = g[plane * ohw + oy * p.ow + ox] / div;
                for r in r0..r1 {
                    for v in &mut gxp[r * p.w + c0..r * p.w + c1] {
                        *v += d;
                    }
                }
            }
        }
    }
    for v in gx.iter_mut() {
        *v = canon(mode, *v);
    }
}

/// adaptive_avg_pool2d forward: `(Σ64 of the window, row-major, rounded) ⊘ count`.
pub(crate) fn adaptive_avg_pool2d(
    mode: ComputeMode,
    s: &AdaptivePool2dSpec,
    x: &[f32],
    out: &mut [f32],
) {
    let (hw, ohw) = (s.h * s.w, s.oh * s.ow);
    for plane in 0..s.planes {
        let xp = &x[plane * hw..(plane + 1) * hw];
        for oy in 0..s.oh {
            for ox in 0..s.ow {
                let (r0, r1, c0, c1, count) = s.window(oy, ox);
                let mut acc = 0.0f64;
                for r in r0..r1 {
                    for &v in &xp[r * s.w + c0..r * s.w + c1] {
                        acc += f64::from(v);
                    }
                }
                out[plane * ohw + oy * s.ow + ox] = canon(mode, (acc as f32) / count);
            }
        }
    }
}

/// adaptive_avg_pool2d backward: as avg_pool2d's with the window count.
pub(crate) fn adaptive_avg_pool2d_backward(
    mode: ComputeMode,
    s: &AdaptivePool2dSpec,
    g: &[f32],
    gx: &mut [f32],
) {
    let (hw, ohw) = (s.h * s.w, s.oh * s.ow);
    gx.fill(0.0);
    for plane in 0..s.planes {
        let gxp = &mut gx[plane * hw..(plane + 1) * hw];
        for oy in 0..s.oh {
            for ox in 0..s.ow {
                let (r0, r1, c0, c1, count) = s.window(oy, ox);
                let d = g[plane * ohw + oy * s.ow + ox] / count;
                for r in r0..r1 {
                    for v in &mut gxp[r * s.w + c0..r * s.w + c1] {
                        *v += d;
                    }
                }
            }
        }
    }
    for v in gx.iter_mut() {
        *v = canon(mode, *v);
    }
}

/// im2col of one item: `cols[(c·KH + i)·KW + j, oh·OW + ow] = x[c, oh·sh + i·dh − ph,
/// ow·sw + j·dw − pw]`, `+0` in the padding. Copies bits.
pub(crate) fn im2col(s: &Col2imSpec, x: &[f32], cols: &mut [f32]) {
    let p = s.oh * s.ow;
    let mut row = 0;
    for c in 0..s.c {
        for i in 0..s.kh {
            for j in 0..s.kw {
                let out = &mut cols[row * p..(row + 1) * p];
                for y in 0..s.oh {
                    let src_r =
                        Col2imSpec::source(y, i, s.stride[0], s.dilation[0], s.padding[0], s.h);
                    for xo in 0..s.ow {
                        let src_c = Col2imSpec::source(
                            xo,
                            j,
                            s.stride[1],
                            s.dilation[1],
                            s.padding[1],
                            s.w,
                        );
                        out[y * s.ow + xo] = match (src_r, src_c) {
                            (Some(r), Some(q)) => x[(c * s.h + r) * s.w + q],
                            _ => 0.0,
                        };
                    }
                }
                row += 1;
            }
        }
    }
}

/// col2im of one item: every element of `image` starts at `+0` and adds, in f32, the
/// column gradients that map onto it in increasing column order (`docs/conv.md` §1).
pub(crate) fn col2im(mode: ComputeMode, s: &Col2imSpec, cols: &[f32], image: &mut [f32]) {
    let (h, w, kh, kw) = (s.h, s.w, s.kh, s.kw);
    let p = s.oh * s.ow;
    image.fill(0.0);
    for c in 0..s.c {
        let plane = &mut image[c * h * w..(c + 1) * h * w];
        let rows = &cols[c * kh * kw * p..(c + 1) * kh * kw * p];
        for y in 0..s.oh {
            for x in 0..s.ow {
                let col = y * s.ow + x;
                for i in 0..kh {
                    let Some(r) =
                        Col2imSpec::source(y, i, s.stride[0], s.dilation[0], s.padding[0], h)
                    else {
                        continue;
                    };
                    for j in 0..kw {
                        let Some(q) =
                            Col2imSpec::source(x, j, s.stride[1], s.dilation[1], s.padding[1], w)
                        else {
                            continue;
                        };
                        plane[r * w + q] += rows[(i * kw + j) * p + col];
                    }
                }
            }
        }
    }
    for v in image.iter_mut() {
        *v = canon(mode, *v);
    }
}
