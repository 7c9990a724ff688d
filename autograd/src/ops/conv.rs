//! The convolution family: `conv1d` and `conv2d` (stride, padding, dilation, groups,
//! depthwise) by im2col and the canonical GEMM, `max_pool2d`, `avg_pool2d`,
//! `adaptive_avg_pool2d` and constant `pad`, each with its backward rule.
//!
//! The orders of every sum are written down in `docs/conv.md` (normative):
//!
//! - **im2col** gathers, for one batch item, the column matrix `[C·KH·KW, OH·OW]` (row
//!   `(c, kh, kw)`, column `(oh, ow)`, both row-major) as a strided view of the padded
//!   input copied with the backend's `copy_strided` kernel;
//! - **forward**: per item one batched backend `matmul` over the groups, `out[n, g] =
//!   W_g · cols_{n, g}` (`[O/G, K] · [K, OH·OW]`, `K = C/G·KH·KW`), then `⊕ bias[o]`;
//! - **grad weight**: per item `g_{n, g} · cols_{n, g}ᵀ` (canonical GEMM, `k = OH·OW`),
//!   the items' contributions added in item order into an accumulator starting at `+0`;
//! - **grad input**: per item `W_gᵀ · g_{n, g}` (canonical GEMM, `k = O/G`), then col2im:
//!   each input element starts at `+0` and adds its contributions in increasing column
//!   order `(oh, ow)`;
//! - **grad bias**: Σ64 over `(n, oh, ow)` in row-major order.
//!
//! Pools and `pad` are scalar loops in a fixed order, identical for every backend.

use super::{canon, sum_unrecorded};
use crate::engine::{record, Saved};
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use exactgrad_core::backend::MatmulSpec;
use exactgrad_core::{Backend, BinaryOp, ComputeMode, Layout, Shape};

// ----- options ---------------------------------------------------------------------------

/// Options of [`Tensor::conv1d`] (PyTorch's `F.conv1d` arguments; defaults 1, 0, 1, 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv1dOptions {
    /// Step between window starts (≥ 1).
    pub stride: usize,
    /// Zeros added on both sides of the input.
    pub padding: usize,
    /// Spacing between kernel taps (≥ 1).
    pub dilation: usize,
    /// Number of channel groups; must divide both the input and output channels.
    pub groups: usize,
}

impl Default for Conv1dOptions {
    fn default() -> Self {
        Self {
            stride: 1,
            padding: 0,
            dilation: 1,
            groups: 1,
        }
    }
}

/// Options of [`Tensor::conv2d`] (PyTorch's `F.conv2d` arguments, `[height, width]`;
/// defaults stride 1, padding 0, dilation 1, groups 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dOptions {
    /// Step between window starts (each ≥ 1).
    pub stride: [usize; 2],
    /// Zeros added on both sides of each spatial dimension.
    pub padding: [usize; 2],
    /// Spacing between kernel taps (each ≥ 1).
    pub dilation: [usize; 2],
    /// Number of channel groups; must divide both the input and output channels
    /// (`groups = C` with weight `[C·m, 1, KH, KW]` is a depthwise convolution).
    pub groups: usize,
}

impl Default for Conv2dOptions {
    fn default() -> Self {
        Self {
            stride: [1, 1],
            padding: [0, 0],
            dilation: [1, 1],
            groups: 1,
        }
    }
}

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

// ----- convolution -----------------------------------------------------------------------

/// Sizes of one 2-D convolution.
#[derive(Clone, Copy, Debug)]
struct ConvGeom {
    n: usize,
    c: usize,
    h: usize,
    w: usize,
    o: usize,
    groups: usize,
    kh: usize,
    kw: usize,
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
    oh: usize,
    ow: usize,
}

impl ConvGeom {
    /// Output channels per group.
    fn og(&self) -> usize {
        self.o / self.groups
    }

    /// Rows of one group's column matrix: `C/G · KH · KW`.
    fn k(&self) -> usize {
        self.c / self.groups * self.kh * self.kw
    }

    /// Output positions per item: `OH · OW`.
    fn p(&self) -> usize {
        self.oh * self.ow
    }
}

/// The output size of a convolution along one dimension,
/// or `None` when the effective kernel is larger than the padded input.
fn conv_out_size(
    input: usize,
    kernel: usize,
    stride: usize,
    pad: usize,
    dil: usize,
) -> Option<usize> {
    let padded = input + 2 * pad;
    let eff = dil * (kernel - 1) + 1;
    (padded >= eff).then(|| (padded - eff) / stride + 1)
}

fn fmt_pair(v: [usize; 2]) -> String {
    format!("[{}, {}]", v[0], v[1])
}

/// Checks the arguments of a 2-D convolution on 4-D `x` and `w` (`op` and `orig` name
/// the operator and the shapes the caller gave) and returns its sizes.
fn conv_geom(
    op: &'static str,
    orig_x: &[usize],
    orig_w: &[usize],
    x: &[usize],
    w: &[usize],
    bias: Option<&[usize]>,
    opts: &Conv2dOptions,
) -> Result<ConvGeom> {
    let (stride, padding, dilation, groups) =
        (opts.stride, opts.padding, opts.dilation, opts.groups);
    if groups == 0 {
        return Err(Error::invalid(op, "groups", "must be at least 1, got 0"));
    }
    if stride.contains(&0) {
        return Err(Error::invalid(
            op,
            "stride",
            format!("must be at least 1, got {}", fmt_arg(op, stride)),
        ));
    }
    if dilation.contains(&0) {
        return Err(Error::invalid(
            op,
            "dilation",
            format!("must be at least 1, got {}", fmt_arg(op, dilation)),
        ));
    }
    let (n, c, h, wd) = (x[0], x[1], x[2], x[3]);
    let (o, cg, kh, kw) = (w[0], w[1], w[2], w[3]);
    if kh == 0 || kw == 0 {
        return Err(Error::invalid(
            op,
            "weight",
            format!("kernel size must be positive, got weight of shape {orig_w:?}"),
        ));
    }
    if o == 0 {
        return Err(Error::invalid(
            op,
            "weight",
            format!("expected at least one output channel, got weight of shape {orig_w:?}"),
        ));
    }
    if o % groups != 0 {
        return Err(Error::invalid(
            op,
            "groups",
            format!(
                "groups = {groups} does not divide the {o} output channels of weight {orig_w:?}"
            ),
        ));
    }
    if cg * groups != c {
        let reason = if c % groups != 0 {
            format!("groups = {groups} does not divide the {c} input channels")
        } else {
            format!(
                "with groups = {groups} the input must have {} channels (weight dim 1 × groups), got {c}",
                cg * groups
            )
        };
        return Err(Error::mismatch(op, orig_x, orig_w, reason));
    }
    if let Some(b) = bias {
        if b != [o] {
            return Err(Error::mismatch(
                op,
                b,
                orig_w,
                format!("bias must have shape [{o}] (one value per output channel of the weight)"),
            ));
        }
    }
    let oh = conv_out_size(h, kh, stride[0], padding[0], dilation[0]);
    let ow = conv_out_size(wd, kw, stride[1], padding[1], dilation[1]);
    let (Some(oh), Some(ow)) = (oh, ow) else {
        return Err(Error::mismatch(
            op,
            orig_x,
            orig_w,
            format!(
                "the kernel (dilated: {}) is larger than the padded input ({})",
                fmt_spatial(op, [dilation[0] * (kh - 1) + 1, dilation[1] * (kw - 1) + 1]),
                fmt_spatial(op, [h + 2 * padding[0], wd + 2 * padding[1]])
            ),
        ));
    };
    Ok(ConvGeom {
        n,
        c,
        h,
        w: wd,
        o,
        groups,
        kh,
        kw,
        stride,
        padding,
        dilation,
        oh,
        ow,
    })
}

/// A 2-D argument as the caller wrote it: one number for conv1d (whose height is 1).
fn fmt_arg(op: &str, v: [usize; 2]) -> String {
    if op == "conv1d" {
        v[1].to_string()
    } else {
        fmt_pair(v)
    }
}

fn fmt_spatial(op: &str, v: [usize; 2]) -> String {
    if op == "conv1d" {
        v[1].to_string()
    } else {
        format!("{} x {}", v[0], v[1])
    }
}

/// The im2col source: `x` itself when there is no padding, else a zero-padded copy.
fn padded_source<B: Backend>(x: &Tensor<B>, g: &ConvGeom) -> Tensor<B> {
    if g.padding == [0, 0] {
        x.clone()
    } else {
        let [ph, pw] = g.padding;
        pad_forward(x, &[0, 0, ph, pw], &[0, 0, ph, pw], 0.0)
    }
}

/// Gathers item `n`'s column matrix `[C·KH·KW, OH·OW]` from the (padded) input `src`
/// with the backend's strided copy: the strided view `[C, KH, KW, OH, OW]` with strides
/// `[sC, dh·sH, dw·sW, sh·sH, sw·sW]` at offset `offset + n·sN`.
fn im2col<B: Backend>(
    be: &B,
    src: &[f32],
    layout: &Layout,
    g: &ConvGeom,
    n: usize,
    out: &mut [f32],
) {
    let s = &layout.strides;
    let [sh, sw] = g.stride;
    let [dh, dw] = g.dilation;
    let view = Layout {
        shape: Shape::from([g.c, g.kh, g.kw, g.oh, g.ow]),
        strides: vec![s[1], dh * s[2], dw * s[3], sh * s[2], sw * s[3]],
        offset: layout.offset + n * s[0],
    };
    if view.numel() > 0 {
        be.copy_strided(src, &view, out);
    }
}

/// Adds item `n`'s column gradients `cols` (`[C·KH·KW, OH·OW]`) into the unpadded input
/// gradient `gx` (`[C, H, W]` of that item, zero on entry): every element adds its
/// contributions in increasing column order `(oh, ow)`, f32, from `+0`.
fn col2im(cols: &[f32], g: &ConvGeom, gx: &mut [f32]) {
    let (h, w, kh, kw, oh, ow) = (g.h, g.w, g.kh, g.kw, g.oh, g.ow);
    let [sh, sw] = g.stride;
    let [ph, pw] = g.padding;
    let [dh, dw] = g.dilation;
    let p = oh * ow;
    for c in 0..g.c {
        let plane = &mut gx[c * h * w..(c + 1) * h * w];
        let rows = &cols[c * kh * kw * p..(c + 1) * kh * kw * p];
        for y in 0..oh {
            for x in 0..ow {
                let col = y * ow + x;
                for i in 0..kh {
                    // Input row of tap i (in padded coordinates minus the padding).
                    let r = y * sh + i * dh;
                    if r < ph || r - ph >= h {
                        continue;
                    }
                    let r = r - ph;
                    for j in 0..kw {
                        let q = x * sw + j * dw;
                        if q < pw || q - pw >= w {
                            continue;
                        }
                        plane[r * w + q - pw] += rows[(i * kw + j) * p + col];
                    }
                }
            }
        }
    }
}

/// The per-group batched product spec: `batch = groups`, the given operand offsets and
/// strides `[group, row, column]`.
#[allow(clippy::too_many_arguments)]
fn group_spec(
    g: &ConvGeom,
    m: usize,
    k: usize,
    n: usize,
    a_offset: usize,
    a_strides: [usize; 3],
    b_offset: usize,
    b_strides: [usize; 3],
) -> MatmulSpec {
    MatmulSpec {
        batch: g.groups,
        m,
        k,
        n,
        a_offset,
        a_strides,
        b_offset,
        b_strides,
    }
}

/// `Σ64` over `(n, oh, ow)` of a contiguous `[N, O, OH, OW]` gradient: the bias gradient.
fn bias_grad<B: Backend>(g: &Tensor<B>) -> Tensor<B> {
    sum_unrecorded(g, &[true, false, true, true])
}

/// The recorded 2-D convolution of 4-D `x` `[N, C, H, W]` and `w` `[O, C/G, KH, KW]`.
fn conv2d_core<B: Backend>(
    op: &'static str,
    x: &Tensor<B>,
    w: &Tensor<B>,
    bias: Option<&Tensor<B>>,
    g: ConvGeom,
) -> Result<Tensor<B>> {
    let be = x.backend();
    let (o, p, k, og) = (g.o, g.p(), g.k(), g.og());
    let ck = g.c * g.kh * g.kw;
    let mut out = be.zeros(g.n * o * p);
    {
        let src = padded_source(x, &g);
        let w_c = dense(w);
        let (sd, wd) = (src.read(), w_c.read());
        let mut cols = be.zeros(ck * p);
        let spec = group_spec(
            &g,
            og,
            k,
            p,
            w_c.layout().offset,
            [og * k, k, 1],
            0,
            [k * p, p, 1],
        );
        for n in 0..g.n {
            im2col(be, sd.as_ref(), src.layout(), &g, n, cols.as_mut());
            if og * p > 0 {
                be.matmul(
                    &spec,
                    wd.as_ref(),
                    cols.as_ref(),
                    &mut out.as_mut()[n * o * p..(n + 1) * o * p],
                );
            }
        }
    }
    let shape = Shape::from([g.n, o, g.oh, g.ow]);
    let mut y = Tensor::from_storage(be, out, shape.clone());
    if let Some(b) = bias {
        let bl = Layout {
            shape: shape.clone(),
            strides: vec![0, b.layout().strides[0], 0, 0],
            offset: b.layout().offset,
        };
        let mut sum = be.zeros(shape.numel());
        {
            let (yd, bd) = (y.read(), b.read());
            be.binary(
                BinaryOp::Add,
                yd.as_ref(),
                y.layout(),
                bd.as_ref(),
                &bl,
                sum.as_mut(),
            );
        }
        y = Tensor::from_storage(be, sum, shape);
    }
    let need_x = x.is_requires_grad();
    let need_w = w.is_requires_grad();
    let need_b = bias.is_some_and(|b| b.is_requires_grad());
    let mut inputs = vec![x, w];
    inputs.extend(bias);
    let (x_keep, w_keep) = (x.clone(), w.clone());
    let has_bias = bias.is_some();
    Ok(record(op, y, &inputs, move || {
        let sx = need_w.then(|| Saved::new(op, &x_keep));
        let sw = need_x.then(|| Saved::new(op, &w_keep));
        move |gy: &Tensor<B>| {
            let be = gy.backend();
            let gy = dense(gy);
            let mut grads = Vec::with_capacity(3);
            grads.push(match &sw {
                Some(sw) => Some(conv_grad_input(be, &gy, sw.get()?, &g)),
                None => None,
            });
            grads.push(match &sx {
                Some(sx) => Some(conv_grad_weight(be, &gy, sx.get()?, &g)),
                None => None,
            });
            if has_bias {
                grads.push(need_b.then(|| bias_grad(&gy)));
            }
            Ok(grads)
        }
    }))
}

/// `∂L/∂x`: per item `W_gᵀ · g_{n, g}` per group, then col2im (see the module docs).
fn conv_grad_input<B: Backend>(be: &B, gy: &Tensor<B>, w: &Tensor<B>, g: &ConvGeom) -> Tensor<B> {
    let (o, p, k, og) = (g.o, g.p(), g.k(), g.og());
    let ck = g.c * g.kh * g.kw;
    let chw = g.c * g.h * g.w;
    let mut gx = vec![0.0f32; g.n * chw];
    let w_c = dense(w);
    let (gd, wd) = (gy.read(), w_c.read());
    let mut cols = be.zeros(ck * p);
    for n in 0..g.n {
        if ck * p > 0 {
            // a = W_gᵀ [K, O/G]: element (r, c) of group gi at gi·(O/G)·K + c·K + r.
            let spec = group_spec(
                g,
                k,
                og,
                p,
                w_c.layout().offset,
                [og * k, 1, k],
                gy.layout().offset + n * o * p,
                [og * p, p, 1],
            );
            be.matmul(&spec, wd.as_ref(), gd.as_ref(), cols.as_mut());
        }
        col2im(cols.as_ref(), g, &mut gx[n * chw..(n + 1) * chw]);
    }
    canon_all(be.mode(), &mut gx);
    Tensor::from_vec(be, gx, [g.n, g.c, g.h, g.w]).expect("conv: input gradient size")
}

/// `∂L/∂W`: per item `g_{n, g} · cols_{n, g}ᵀ` per group, added in item order from `+0`.
fn conv_grad_weight<B: Backend>(be: &B, gy: &Tensor<B>, x: &Tensor<B>, g: &ConvGeom) -> Tensor<B> {
    let (o, p, k, og) = (g.o, g.p(), g.k(), g.og());
    let ck = g.c * g.kh * g.kw;
    let mut gw = vec![0.0f32; o * k];
    let src = padded_source(x, g);
    let (gd, sd) = (gy.read(), src.read());
    let mut cols = be.zeros(ck * p);
    let mut part = be.zeros(o * k);
    for n in 0..g.n {
        im2col(be, sd.as_ref(), src.layout(), g, n, cols.as_mut());
        if o * k > 0 {
            // b = cols_gᵀ [OH·OW, K]: element (r, c) of group gi at gi·K·P + c·P + r.
            let spec = group_spec(
                g,
                og,
                p,
                k,
                gy.layout().offset + n * o * p,
                [og * p, p, 1],
                0,
                [k * p, 1, p],
            );
            be.matmul(&spec, gd.as_ref(), cols.as_ref(), part.as_mut());
        }
        for (acc, &v) in gw.iter_mut().zip(part.as_ref()) {
            *acc += v;
        }
    }
    canon_all(be.mode(), &mut gw);
    Tensor::from_vec(be, gw, [o, g.c / g.groups, g.kh, g.kw]).expect("conv: weight gradient size")
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
/// in ceil mode a last window that would start at or past `in + p` is dropped.
fn pool_out_size(input: usize, k: usize, s: usize, p: usize, d: usize, ceil: bool) -> i64 {
    let (input, k, s, p, d) = (input as i64, k as i64, s as i64, p as i64, d as i64);
    let num = input + 2 * p - d * (k - 1) - 1 + if ceil { s - 1 } else { 0 };
    let mut out = num.div_euclid(s) + 1;
    if ceil && (out - 1) * s >= input + p {
        out -= 1;
    }
    out
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
    Ok(PoolGeom {
        planes: x[0] * x[1],
        h,
        w,
        oh: oh as usize,
        ow: ow as usize,
        kernel,
        stride,
        padding,
        dilation,
    })
}

/// The rows (or columns) `[start, end)` of one average-pooling window along a dimension
/// and the window length clamped to the padded input (PyTorch's `pool_size` factor).
fn avg_window(o: usize, size: usize, k: usize, s: usize, p: usize) -> (usize, usize, usize) {
    let (size, p) = (size as i64, p as i64);
    let start = (o * s) as i64 - p;
    let end = (start + k as i64).min(size + p);
    let span = (end - start) as usize;
    (start.max(0) as usize, end.min(size).max(0) as usize, span)
}

/// The windows of an average pooling: per output row and column the clipped range
/// `[start, end)` and the span clipped to the padded input.
struct AvgPlan {
    rows: Vec<(usize, usize, usize)>,
    cols: Vec<(usize, usize, usize)>,
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
            None if self.count_include_pad => (rs * cs) as f32,
            None => ((r1 - r0) * (c1 - c0)) as f32,
        }
    }
}

/// `[start, end)` of adaptive window `i` of `out` over `size`: `floor(i·size/out)` to
/// `ceil((i+1)·size/out)`.
fn adaptive_window(i: usize, size: usize, out: usize) -> (usize, usize) {
    (i * size / out, ((i + 1) * size).div_ceil(out))
}

/// Wraps a 4-D pooling result back to 3-D when the input was unbatched.
fn unbatch<B: Backend>(y: Tensor<B>, unbatched: bool) -> Result<Tensor<B>> {
    if unbatched {
        y.squeeze(0)
    } else {
        Ok(y)
    }
}

/// Zeroes every NaN's payload to the canonical NaN in exact mode.
fn canon_all(mode: ComputeMode, v: &mut [f32]) {
    if mode == ComputeMode::Exact {
        v.iter_mut().for_each(|x| *x = canon(mode, *x));
    }
}

/// `t` itself when contiguous, else an unrecorded contiguous copy.
fn dense<B: Backend>(t: &Tensor<B>) -> Tensor<B> {
    if t.is_contiguous() {
        t.clone()
    } else {
        t.copy_contiguous()
    }
}

// ----- pad -------------------------------------------------------------------------------

/// `x` with `before[i]` and `after[i]` elements of `value` added around dimension `i`
/// (unrecorded, contiguous; the elements of `x` are copied bit for bit).
fn pad_forward<B: Backend>(
    x: &Tensor<B>,
    before: &[usize],
    after: &[usize],
    value: f32,
) -> Tensor<B> {
    let dims = x.dims();
    let rank = dims.len();
    let out_dims: Vec<usize> = (0..rank).map(|i| dims[i] + before[i] + after[i]).collect();
    let out_shape = Shape::from(out_dims.clone());
    let mut buf = vec![value; out_shape.numel()];
    if x.numel() > 0 {
        let xs = x.to_vec();
        if rank == 0 {
            buf[0] = xs[0];
        } else {
            let ostrides = out_shape.contiguous_strides();
            let len = dims[rank - 1];
            let mut idx = vec![0usize; rank - 1];
            for row in xs.chunks_exact(len) {
                let mut dst = before[rank - 1];
                for d in 0..rank - 1 {
                    dst += (idx[d] + before[d]) * ostrides[d];
                }
                buf[dst..dst + len].copy_from_slice(row);
                for d in (0..rank - 1).rev() {
                    idx[d] += 1;
                    if idx[d] < dims[d] {
                        break;
                    }
                    idx[d] = 0;
                }
            }
        }
    }
    Tensor::from_vec(x.backend(), buf, out_shape).expect("pad: sizes agree")
}

// ----- the operators ---------------------------------------------------------------------

impl<B: Backend> Tensor<B> {
    /// 2-D convolution (PyTorch's `F.conv2d`, a cross-correlation) of `self`
    /// `[N, C, H, W]` (or unbatched `[C, H, W]`) with `weight` `[O, C/groups, KH, KW]` and
    /// an optional `bias` `[O]`; the output is `[N, O, OH, OW]` with
    /// `OH = ⌊(H + 2·ph − dh·(KH − 1) − 1) / sh⌋ + 1` (likewise OW).
    ///
    /// Computed by im2col and the canonical GEMM (Chellapilla, Puri and Simard 2006); the
    /// orders of every sum, forward and backward, are in `docs/conv.md`. Errors: input
    /// not 3-D or 4-D, weight not 4-D, channel counts that disagree with `groups`, a bias
    /// that is not `[O]`, zero stride, dilation or groups, and a kernel larger than the
    /// padded input.
    pub fn conv2d(
        &self,
        weight: &Tensor<B>,
        bias: Option<&Tensor<B>>,
        opts: Conv2dOptions,
    ) -> Result<Tensor<B>> {
        let op = "conv2d";
        let (xd, wd) = (self.dims(), weight.dims());
        if xd.len() != 3 && xd.len() != 4 {
            return Err(Error::invalid(
                op,
                "input",
                format!("expects a 3-D [C, H, W] (unbatched) or 4-D [N, C, H, W] input, got shape {xd:?}"),
            ));
        }
        if wd.len() != 4 {
            return Err(Error::invalid(
                op,
                "weight",
                format!("expects a 4-D weight [O, C/groups, KH, KW], got shape {wd:?}"),
            ));
        }
        let unbatched = xd.len() == 3;
        let x4 = if unbatched {
            let mut d = vec![1];
            d.extend_from_slice(xd);
            d
        } else {
            xd.to_vec()
        };
        let g = conv_geom(op, xd, wd, &x4, wd, bias.map(|b| b.dims()), &opts)?;
        if unbatched {
            conv2d_core(op, &self.unsqueeze(0)?, weight, bias, g)?.squeeze(0)
        } else {
            conv2d_core(op, self, weight, bias, g)
        }
    }

    /// 1-D convolution (PyTorch's `F.conv1d`) of `self` `[N, C, L]` (or unbatched
    /// `[C, L]`) with `weight` `[O, C/groups, K]` and an optional `bias` `[O]`; the output
    /// is `[N, O, OL]`, `OL = ⌊(L + 2·p − d·(K − 1) − 1) / s⌋ + 1`.
    ///
    /// The same computation as [`Tensor::conv2d`] with a height of 1 (`docs/conv.md`),
    /// with the same errors.
    pub fn conv1d(
        &self,
        weight: &Tensor<B>,
        bias: Option<&Tensor<B>>,
        opts: Conv1dOptions,
    ) -> Result<Tensor<B>> {
        let op = "conv1d";
        let (xd, wd) = (self.dims(), weight.dims());
        if xd.len() != 2 && xd.len() != 3 {
            return Err(Error::invalid(
                op,
                "input",
                format!(
                    "expects a 2-D [C, L] (unbatched) or 3-D [N, C, L] input, got shape {xd:?}"
                ),
            ));
        }
        if wd.len() != 3 {
            return Err(Error::invalid(
                op,
                "weight",
                format!("expects a 3-D weight [O, C/groups, K], got shape {wd:?}"),
            ));
        }
        let opts2 = Conv2dOptions {
            stride: [1, opts.stride],
            padding: [0, opts.padding],
            dilation: [1, opts.dilation],
            groups: opts.groups,
        };
        let unbatched = xd.len() == 2;
        let x4 = if unbatched {
            vec![1, xd[0], 1, xd[1]]
        } else {
            vec![xd[0], xd[1], 1, xd[2]]
        };
        let w4 = [wd[0], wd[1], 1, wd[2]];
        let g = conv_geom(op, xd, wd, &x4, &w4, bias.map(|b| b.dims()), &opts2)?;
        let x = if unbatched {
            self.reshape_to(&x4)?
        } else {
            self.unsqueeze(2)?
        };
        let y = conv2d_core(op, &x, &weight.unsqueeze(2)?, bias, g)?;
        if unbatched {
            y.reshape_to(&[g.o, g.ow])
        } else {
            y.squeeze(2)
        }
    }

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
        let xs = x.to_vec();
        let (hw, ohw) = (pg.h * pg.w, pg.oh * pg.ow);
        let mut out = vec![0.0f32; pg.planes * ohw];
        let mut argmax = vec![usize::MAX; pg.planes * ohw];
        let [kh, kw] = pg.kernel;
        let [sh, sw] = pg.stride;
        let [ph, pw] = pg.padding;
        let [dh, dw] = pg.dilation;
        for plane in 0..pg.planes {
            let xp = &xs[plane * hw..(plane + 1) * hw];
            for oy in 0..pg.oh {
                for ox in 0..pg.ow {
                    let mut best = f32::NEG_INFINITY;
                    let mut at = usize::MAX;
                    for i in 0..kh {
                        let r = oy * sh + i * dh;
                        if r < ph || r - ph >= pg.h {
                            continue;
                        }
                        for j in 0..kw {
                            let q = ox * sw + j * dw;
                            if q < pw || q - pw >= pg.w {
                                continue;
                            }
                            let idx = (r - ph) * pg.w + q - pw;
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
                let gv = gy.to_vec();
                let mut gx = vec![0.0f32; pg.planes * hw];
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
        let plan = AvgPlan {
            rows: (0..pg.oh)
                .map(|o| avg_window(o, pg.h, pg.kernel[0], pg.stride[0], pg.padding[0]))
                .collect(),
            cols: (0..pg.ow)
                .map(|o| avg_window(o, pg.w, pg.kernel[1], pg.stride[1], pg.padding[1]))
                .collect(),
            count_include_pad: opts.count_include_pad,
            divisor_override: opts.divisor_override,
        };
        let be = x.backend();
        let mode = be.mode();
        let xs = x.to_vec();
        let (hw, ohw) = (pg.h * pg.w, pg.oh * pg.ow);
        let mut out = vec![0.0f32; pg.planes * ohw];
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
                let gv = gy.to_vec();
                let mut gx = vec![0.0f32; pg.planes * hw];
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
        let rows: Vec<(usize, usize)> = (0..oh).map(|i| adaptive_window(i, h, oh)).collect();
        let cols: Vec<(usize, usize)> = (0..ow).map(|i| adaptive_window(i, w, ow)).collect();
        let be = x.backend();
        let mode = be.mode();
        let xs = x.to_vec();
        let (hw, ohw) = (h * w, oh * ow);
        let mut out = vec![0.0f32; planes * ohw];
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
                let gv = gy.to_vec();
                let mut gx = vec![0.0f32; planes * hw];
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

    /// Constant padding (PyTorch's `F.pad(x, pads, value=value)`): `pads` lists
    /// `(before, after)` pairs starting with the last dimension, then the one before it,
    /// …; at most `2·rank` entries, an even number. Backward takes the interior of the
    /// gradient.
    pub fn pad(&self, pads: &[usize], value: f32) -> Result<Tensor<B>> {
        let op = "pad";
        let rank = self.rank();
        if !pads.len().is_multiple_of(2) {
            return Err(Error::invalid(
                op,
                "pads",
                format!(
                    "must have an even length ((before, after) pairs), got {} values {pads:?}",
                    pads.len()
                ),
            ));
        }
        if pads.len() > 2 * rank {
            return Err(Error::invalid(
                op,
                "pads",
                format!(
                    "{} values {pads:?} pad more dimensions than the input of shape {:?} has (at most {})",
                    pads.len(),
                    self.dims(),
                    2 * rank
                ),
            ));
        }
        let mut before = vec![0usize; rank];
        let mut after = vec![0usize; rank];
        for (i, pair) in pads.chunks_exact(2).enumerate() {
            before[rank - 1 - i] = pair[0];
            after[rank - 1 - i] = pair[1];
        }
        let y = pad_forward(self, &before, &after, value);
        let in_dims = self.dims().to_vec();
        Ok(record(op, y, &[self], move || {
            move |gy: &Tensor<B>| {
                let l = gy.layout();
                let interior = Layout {
                    shape: Shape::from(in_dims.clone()),
                    strides: l.strides.clone(),
                    offset: l.offset
                        + before
                            .iter()
                            .zip(&l.strides)
                            .map(|(b, s)| b * s)
                            .sum::<usize>(),
                };
                let be = gy.backend();
                let mut out = be.zeros(interior.numel());
                if interior.numel() > 0 {
                    let d = gy.read();
                    be.copy_strided(d.as_ref(), &interior, out.as_mut());
                }
                Ok(vec![Some(Tensor::from_storage(be, out, interior.shape))])
            }
        }))
    }
}
