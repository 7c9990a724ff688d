//! The convolutions: `conv1d` and `conv2d` (stride, padding, dilation, groups,
//! depthwise) by im2col and the canonical GEMM, and `conv_transpose2d` (their adjoint,
//! the same kernels in swapped roles), with their backward rules.
//!
//! Over 800 lines on purpose: the transposed convolution is the adjoint of the
//! convolution computed by the same private pieces (the column source, the grouped GEMM
//! specs, the folded and segmented products, col2im of a block of items), and the orders
//! that `docs/conv.md` §1 and §6 fix for both are easier to check against each other in
//! one file; pooling and padding live in their own files.
//!
//! The orders of every sum are written down in `docs/conv.md` §1 (normative):
//!
//! - **im2col** gathers, for one batch item, the column matrix `[C·KH·KW, OH·OW]` (row
//!   `(c, kh, kw)`, column `(oh, ow)`, both row-major) with the backend's `im2col` kernel
//!   (a contiguous input), or as a strided view of the padded input copied with its
//!   `copy_strided` kernel;
//! - **forward**: per item one batched backend `matmul` over the groups, `out[n, g] =
//!   W_g · cols_{n, g}` (`[O/G, K] · [K, OH·OW]`, `K = C/G·KH·KW`), then `⊕ bias[o]`;
//!   with one group and fewer than 64 output positions per item, a block of items is
//!   folded into one product with the items' columns side by side (the same sums; the
//!   input gradient likewise);
//! - **grad weight**: per item `g_{n, g} · cols_{n, g}ᵀ` (canonical GEMM, `k = OH·OW`),
//!   the items' contributions added in item order into an accumulator starting at `+0`;
//! - **grad input**: per item `W_gᵀ · g_{n, g}` (canonical GEMM, `k = O/G`), then the
//!   backend's col2im kernel: each input element starts at `+0` and adds its
//!   contributions in increasing column order `(oh, ow)`;
//! - **grad bias**: Σ64 over `(n, oh, ow)` in row-major order.
//!
//! `conv_transpose2d` (`docs/conv.md` §6) is the input-gradient computation of the
//! convolution whose output has the transposed input's shape: forward = grad input
//! (`Wᵀ · x` then col2im), ∂x = the convolution forward of the gradient, ∂W = grad weight
//! with `x` and the gradient in swapped roles, ∂b = Σ64 over `(n, h, w)`.
//!
//! Pooling is in [`super::pool`], constant padding (which the im2col source uses) in
//! [`super::pad`].
//!
//! Over 800 lines on purpose: conv1d, conv2d and conv_transpose2d share one geometry,
//! one im2col/col2im path and three gradient kernels that call each other with roles
//! swapped; kept in one file so the accumulation orders of `docs/conv.md` read together.

use super::pad::pad_forward;
use super::{fmt_pair, sum_unrecorded};
use crate::engine::{record_with, Saved};
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::trace::{ints_of, OpInfo, Value};
use exactgrad_core::backend::MatmulSpec;
use exactgrad_core::kernels::Col2imSpec;
use exactgrad_core::{Backend, BinaryOp, Layout, Shape, ViewMutOf, ViewOf};

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

/// Options of [`Tensor::conv_transpose2d`] (PyTorch's `F.conv_transpose2d` arguments,
/// `[height, width]`; defaults stride 1, padding 0, output padding 0, dilation 1, groups 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvTranspose2dOptions {
    /// Step between the positions one input element scatters to (each ≥ 1).
    pub stride: [usize; 2],
    /// Rows and columns removed from both sides of the full output
    /// (`dilation·(kernel − 1) − padding` zeros of the equivalent direct convolution).
    pub padding: [usize; 2],
    /// Rows and columns added at the end (bottom, right) of the output; each must be
    /// smaller than the stride or the dilation of its dimension.
    pub output_padding: [usize; 2],
    /// Spacing between kernel taps (each ≥ 1).
    pub dilation: [usize; 2],
    /// Number of channel groups; must divide both the input and output channels.
    pub groups: usize,
}

impl Default for ConvTranspose2dOptions {
    fn default() -> Self {
        Self {
            stride: [1, 1],
            padding: [0, 0],
            output_padding: [0, 0],
            dilation: [1, 1],
            groups: 1,
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

    /// Input elements per item: `C · H · W`. Exact when the batch has items (it is at
    /// most the input's count); an empty batch may have items whose size alone
    /// overflows, and then no item is addressed, so the product saturates.
    fn chw(&self) -> usize {
        self.c.saturating_mul(self.h).saturating_mul(self.w)
    }
}

/// The padded input size `input + 2·pad` and the dilated kernel size `dil·(kernel − 1) + 1`
/// along one dimension, in checked arithmetic (an overflow is an error naming `op`).
pub(super) fn padded_and_effective(
    op: &'static str,
    input: usize,
    kernel: usize,
    pad: usize,
    dil: usize,
) -> Result<(usize, usize)> {
    let padded = pad
        .checked_mul(2)
        .and_then(|p| p.checked_add(input))
        .ok_or_else(|| {
            Error::overflow(
                op,
                "padding",
                format!("input size {input} + 2 × padding {pad} overflows usize"),
            )
        })?;
    let eff = kernel
        .saturating_sub(1)
        .checked_mul(dil)
        .and_then(|e| e.checked_add(1))
        .ok_or_else(|| {
            Error::overflow(
                op,
                "dilation",
                format!("dilation {dil} × (kernel size {kernel} − 1) + 1 overflows usize"),
            )
        })?;
    Ok((padded, eff))
}

/// The output size of a convolution along one dimension (`None` when the effective kernel
/// is larger than the padded input), with the padded and effective sizes.
fn conv_out_size(
    op: &'static str,
    input: usize,
    kernel: usize,
    stride: usize,
    pad: usize,
    dil: usize,
) -> Result<(Option<usize>, usize, usize)> {
    let (padded, eff) = padded_and_effective(op, input, kernel, pad, dil)?;
    Ok((
        (padded >= eff).then(|| (padded - eff) / stride + 1),
        padded,
        eff,
    ))
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
    let (oh, ph, eh) = conv_out_size(op, h, kh, stride[0], padding[0], dilation[0])?;
    let (ow, pw, ew) = conv_out_size(op, wd, kw, stride[1], padding[1], dilation[1])?;
    let (Some(oh), Some(ow)) = (oh, ow) else {
        return Err(Error::mismatch(
            op,
            orig_x,
            orig_w,
            format!(
                "the kernel (dilated: {}) is larger than the padded input ({})",
                fmt_spatial(op, [eh, ew]),
                fmt_spatial(op, [ph, pw])
            ),
        ));
    };
    // Every buffer the computation allocates must have a representable size: the
    // output, one item's column matrix and the padded copy of the input.
    Shape::from([n, o, oh, ow]).numel_for(op)?;
    Shape::from([c, kh, kw, oh, ow]).numel_for(op)?;
    Shape::from([n, c, ph, pw]).numel_for(op)?;
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
fn padded_source<B: Backend>(x: &Tensor<B>, g: &ConvGeom) -> Result<Tensor<B>> {
    if g.padding == [0, 0] {
        Ok(x.clone())
    } else {
        let [ph, pw] = g.padding;
        pad_forward("conv2d", x, &[0, 0, ph, pw], &[0, 0, ph, pw], 0.0)
    }
}

/// Gathers item `n`'s column matrix `[C·KH·KW, OH·OW]` from the (padded) input `src`
/// with the backend's strided copy: the strided view `[C, KH, KW, OH, OW]` with strides
/// `[sC, dh·sH, dw·sW, sh·sH, sw·sW]` at offset `offset + n·sN`.
fn im2col<B: Backend>(
    be: &B,
    src: ViewOf<'_, B>,
    layout: &Layout,
    g: &ConvGeom,
    n: usize,
    out: ViewMutOf<'_, B>,
) -> Result<()> {
    let s = &layout.strides;
    let [sh, sw] = g.stride;
    let [dh, dw] = g.dilation;
    // A stride along a dimension of size 1 is never applied; saturating keeps a huge
    // stride or dilation there from overflowing, and `copy_strided` checks the view's
    // extent against the buffer in checked arithmetic.
    let view = Layout {
        shape: Shape::from([g.c, g.kh, g.kw, g.oh, g.ow]),
        strides: vec![
            s[1],
            dh.saturating_mul(s[2]),
            dw.saturating_mul(s[3]),
            sh.saturating_mul(s[2]),
            sw.saturating_mul(s[3]),
        ],
        offset: layout.offset + n * s[0],
    };
    if view.numel() > 0 {
        be.copy_strided(src, &view, out)?;
    }
    Ok(())
}

/// The im2col/col2im spec of one item.
fn col_spec(g: &ConvGeom) -> Col2imSpec {
    Col2imSpec {
        c: g.c,
        h: g.h,
        w: g.w,
        kh: g.kh,
        kw: g.kw,
        stride: g.stride,
        padding: g.padding,
        dilation: g.dilation,
        oh: g.oh,
        ow: g.ow,
    }
}

/// The im2col source of a convolution: the contiguous input itself, read by the
/// backend's `im2col` kernel (which writes the padding's `+0`), or else the strided
/// view of a padded copy read by `copy_strided` (`docs/conv.md` §1; both give the same
/// columns).
enum ColSource<B: Backend> {
    Dense(Tensor<B>),
    Strided(Tensor<B>),
}

impl<B: Backend> ColSource<B> {
    fn new(x: &Tensor<B>, g: &ConvGeom) -> Result<Self> {
        if x.is_contiguous() {
            Ok(ColSource::Dense(x.clone()))
        } else {
            Ok(ColSource::Strided(padded_source(x, g)?))
        }
    }

    fn tensor(&self) -> &Tensor<B> {
        match self {
            ColSource::Dense(t) | ColSource::Strided(t) => t,
        }
    }

    /// Gathers the columns of items `range`, one after another, into `cols` (which holds
    /// at least that many items' columns).
    fn gather_items(
        &self,
        be: &B,
        data: ViewOf<'_, B>,
        g: &ConvGeom,
        range: core::ops::Range<usize>,
        mut cols: ViewMutOf<'_, B>,
    ) -> Result<()> {
        let len = g.c * g.kh * g.kw * g.p();
        for (i, n) in range.enumerate() {
            let part = B::slice_mut(B::reborrow(&mut cols), i * len..(i + 1) * len);
            self.gather(be, data, g, n, part)?;
        }
        Ok(())
    }

    /// Gathers item `n`'s columns from `data` (this source's storage).
    fn gather(
        &self,
        be: &B,
        data: ViewOf<'_, B>,
        g: &ConvGeom,
        n: usize,
        cols: ViewMutOf<'_, B>,
    ) -> Result<()> {
        match self {
            ColSource::Dense(t) => {
                let chw = g.chw();
                let start = t.layout().offset + n * chw;
                Ok(be.im2col(&col_spec(g), B::slice(data, start..start + chw), cols)?)
            }
            ColSource::Strided(t) => im2col(be, data, t.layout(), g, n, cols),
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

/// Column elements a block of items may hold at once (512 KiB of f32, about a core's L2).
const COL_BUDGET: usize = 1 << 17;

/// Items whose columns are gathered together and whose products run as one batched
/// `matmul` (fewer and larger kernel calls): with one group, as many as fit in
/// [`COL_BUDGET`]; with several groups one (the batch is then the groups). Each output
/// still sees the canonical GEMM of its own item, so the block size changes no bits.
fn items_per_block(g: &ConvGeom) -> usize {
    if g.groups != 1 {
        return 1;
    }
    let per_item = (g.c * g.kh * g.kw * g.p()).max(1);
    (COL_BUDGET / per_item).clamp(1, g.n.max(1))
}

/// Output positions per item below which the items of a block are folded into the
/// columns of one product (see [`folded_items`]).
const FOLD_BELOW_P: usize = 64;

/// Columns a folded product aims for: several full micro-tiles on every path.
const FOLD_COLUMNS: usize = 256;

/// Column elements a folded block may hold at once (8 MiB of f32).
const FOLD_BUDGET: usize = 1 << 21;

/// Items whose column matrices are laid side by side into one `[C·KH·KW, items·OH·OW]`
/// matrix, so that a convolution with few output positions per item (the last stages of
/// a ResNet: `OH·OW` = 16) runs one product with many columns instead of one product
/// per item whose few columns fill a fraction of the micro-tile. 1 when not folded
/// (several groups, a single item, or enough positions per item). Each output element is
/// still the canonical sum of its own item's column, so folding changes no bits.
fn folded_items(g: &ConvGeom) -> usize {
    let p = g.p();
    if g.groups != 1 || p == 0 || p >= FOLD_BELOW_P || g.n < 2 || g.o == 0 || g.c == 0 {
        return 1;
    }
    let per_item = (g.c * g.kh * g.kw * p).max(1);
    FOLD_COLUMNS
        .div_ceil(p)
        .min(FOLD_BUDGET / per_item)
        .min(g.n)
        .max(1)
}

/// Output positions per item up to which the weight gradient sums a block of items in
/// one segmented product (see [`segmented_items`]).
const SEGMENT_MAX_P: usize = 64;

/// Items whose weight-gradient contributions are formed by one segmented product
/// ([`Backend::matmul_acc`] with the items along `k`, one segment of `OH·OW` steps per
/// item), so that a convolution with few output positions per item does not write and
/// re-read a `[O, C·KH·KW]` product per item. 1 when not (several groups, a single item,
/// or more positions per item than [`SEGMENT_MAX_P`]). Each item's contribution is still
/// its own canonical sum, added in item order, so the bits are those of the per-item
/// products.
fn segmented_items(g: &ConvGeom) -> usize {
    let p = g.p();
    if g.groups != 1 || p == 0 || p > SEGMENT_MAX_P || g.n < 2 || g.o == 0 || g.c == 0 {
        return 1;
    }
    let per_item = (g.c * g.kh * g.kw * p).max(1);
    (FOLD_BUDGET / per_item).min(g.n).max(1)
}

/// Copies the contiguous `[a, b, c]` block `src` into `out` as `[b, a, c]` (the backend's
/// strided copy: the bits move unchanged).
fn swap_outer<B: Backend>(
    be: &B,
    src: ViewOf<'_, B>,
    (a, b, c): (usize, usize, usize),
    out: ViewMutOf<'_, B>,
) -> Result<()> {
    let layout = Layout {
        shape: Shape::from([b, a, c]),
        strides: vec![c, b * c, 1],
        offset: 0,
    };
    be.copy_strided(
        B::slice(src, 0..a * b * c),
        &layout,
        B::slice_mut(out, 0..a * b * c),
    )?;
    Ok(())
}

/// The product spec of a block of `items` items: with one item the per-group spec of
/// [`group_spec`]; with more (one group) the items are the batch, `a` and `b` advancing
/// by `a_item` and `b_item` elements per item.
#[allow(clippy::too_many_arguments)]
fn block_spec(
    g: &ConvGeom,
    items: usize,
    (m, k, n): (usize, usize, usize),
    (a_offset, a_strides, a_item): (usize, [usize; 3], usize),
    (b_offset, b_strides, b_item): (usize, [usize; 3], usize),
) -> MatmulSpec {
    if items == 1 {
        return group_spec(g, m, k, n, a_offset, a_strides, b_offset, b_strides);
    }
    MatmulSpec {
        batch: items,
        m,
        k,
        n,
        a_offset,
        a_strides: [a_item, a_strides[1], a_strides[2]],
        b_offset,
        b_strides: [b_item, b_strides[1], b_strides[2]],
    }
}

/// `Σ64` over `(n, oh, ow)` of a contiguous `[N, O, OH, OW]` gradient: the bias gradient.
fn bias_grad<B: Backend>(g: &Tensor<B>) -> Result<Tensor<B>> {
    sum_unrecorded(g, &[true, false, true, true])
}

/// The unrecorded convolution `out[n, g] = W_g · cols_{n, g}` of 4-D `x` and `w` (no
/// bias): `[N, O, OH, OW]`. Also the input gradient of `conv_transpose2d`.
fn conv_forward_raw<B: Backend>(
    be: &B,
    x: &Tensor<B>,
    w: &Tensor<B>,
    g: &ConvGeom,
) -> Result<Tensor<B>> {
    let (o, p, k, og) = (g.o, g.p(), g.k(), g.og());
    let ck = g.c * g.kh * g.kw;
    let mut out = be.uninit(g.n * o * p)?;
    let fold = folded_items(g);
    if fold > 1 {
        conv_forward_folded(be, x, w, g, fold, &mut out)?;
        return Tensor::from_storage(be, out, Shape::from([g.n, o, g.oh, g.ow]));
    }
    {
        let src = ColSource::new(x, g)?;
        let w_c = dense(w)?;
        let (sd, wd) = (src.tensor().read()?, w_c.read()?);
        let nb = items_per_block(g);
        let mut cols = be.uninit(nb * ck * p)?;
        let mut n0 = 0;
        while n0 < g.n {
            let items = nb.min(g.n - n0);
            src.gather_items(be, sd.as_ref(), g, n0..n0 + items, B::view_mut(&mut cols))?;
            if og * p > 0 {
                let spec = block_spec(
                    g,
                    items,
                    (og, k, p),
                    (w_c.layout().offset, [og * k, k, 1], 0),
                    (0, [k * p, p, 1], ck * p),
                );
                be.matmul(
                    &spec,
                    wd.as_ref(),
                    B::slice(B::view(&cols), 0..items * ck * p),
                    B::slice_mut(B::view_mut(&mut out), n0 * o * p..(n0 + items) * o * p),
                )?;
            }
            n0 += items;
        }
    }
    Tensor::from_storage(be, out, Shape::from([g.n, o, g.oh, g.ow]))
}

/// `W · rhs` (`[O, CK] · [CK, cols]`) or, when `transposed`, `Wᵀ · rhs` (`[CK, O] · [O,
/// cols]`) of the dense weight `w` (`(data, offset, (O, CK))`) and a contiguous `rhs`,
/// into the contiguous `out`: the product of a folded block of items.
fn weight_product<B: Backend>(
    be: &B,
    (wd, w_offset, (o, ck)): (ViewOf<'_, B>, usize, (usize, usize)),
    transposed: bool,
    rhs: ViewOf<'_, B>,
    cols: usize,
    out: ViewMutOf<'_, B>,
) -> Result<()> {
    let (m, k, a_strides) = if transposed {
        (ck, o, [o * ck, 1, ck])
    } else {
        (o, ck, [o * ck, ck, 1])
    };
    let spec = MatmulSpec {
        batch: 1,
        m,
        k,
        n: cols,
        a_offset: w_offset,
        a_strides,
        b_offset: 0,
        b_strides: [k * cols, cols, 1],
    };
    be.matmul(
        &spec,
        wd,
        B::slice(rhs, 0..k * cols),
        B::slice_mut(out, 0..m * cols),
    )?;
    Ok(())
}

/// [`conv_forward_raw`] with `fold` items per product (one group): the items' columns
/// side by side, `W · [cols_0 … cols_{fold−1}]`, the product's `[O, items, OH·OW]` then
/// copied into the items' places.
fn conv_forward_folded<B: Backend>(
    be: &B,
    x: &Tensor<B>,
    w: &Tensor<B>,
    g: &ConvGeom,
    fold: usize,
    out: &mut B::Storage,
) -> Result<()> {
    let (o, p) = (g.o, g.p());
    let ck = g.c * g.kh * g.kw;
    let src = ColSource::new(x, g)?;
    let w_c = dense(w)?;
    let (sd, wd) = (src.tensor().read()?, w_c.read()?);
    let mut cols = be.uninit(fold * ck * p)?;
    let mut side = be.uninit(fold * ck * p)?;
    let mut prod = be.uninit(fold * o * p)?;
    let mut n0 = 0;
    while n0 < g.n {
        let items = fold.min(g.n - n0);
        src.gather_items(be, sd.as_ref(), g, n0..n0 + items, B::view_mut(&mut cols))?;
        swap_outer(be, B::view(&cols), (items, ck, p), B::view_mut(&mut side))?;
        let w = (wd.as_ref(), w_c.layout().offset, (o, ck));
        weight_product(
            be,
            w,
            false,
            B::view(&side),
            items * p,
            B::view_mut(&mut prod),
        )?;
        swap_outer(
            be,
            B::view(&prod),
            (o, items, p),
            B::slice_mut(B::view_mut(out), n0 * o * p..(n0 + items) * o * p),
        )?;
        n0 += items;
    }
    Ok(())
}

/// `y ⊕ bias[channel]` for a contiguous 4-D `y` `[N, C, H, W]` and `bias` `[C]`, by the
/// backend's element-wise add (unrecorded).
fn add_channel_bias<B: Backend>(
    op: &'static str,
    y: Tensor<B>,
    b: &Tensor<B>,
) -> Result<Tensor<B>> {
    let be = y.backend();
    let shape = y.shape().clone();
    let bl = Layout {
        shape: shape.clone(),
        strides: vec![0, b.layout().strides[0], 0, 0],
        offset: b.layout().offset,
    };
    super::new_tensor(be, op, shape, |sum| {
        let (yd, bd) = (y.read()?, b.read()?);
        Ok(be.binary(
            BinaryOp::Add,
            yd.as_ref(),
            y.layout(),
            bd.as_ref(),
            &bl,
            sum,
        )?)
    })
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
    let mut y = conv_forward_raw(be, x, w, &g)?;
    if let Some(b) = bias {
        y = add_channel_bias(op, y, b)?;
    }
    let need_x = x.is_requires_grad();
    let need_w = w.is_requires_grad();
    let need_b = bias.is_some_and(|b| b.is_requires_grad());
    let mut inputs = vec![x, w];
    inputs.extend(bias);
    let (x_keep, w_keep) = (x.clone(), w.clone());
    let has_bias = bias.is_some();
    let info = crate::trace::info(|| {
        OpInfo::new()
            .names(&["input", "weight", "bias"])
            .attr("stride", ints_of(&g.stride))
            .attr("padding", ints_of(&g.padding))
            .attr("dilation", ints_of(&g.dilation))
            .attr("groups", Value::Int(g.groups as i64))
    });
    Ok(record_with(op, y, &inputs, info, move || {
        let sx = need_w.then(|| Saved::new(op, &x_keep));
        let sw = need_x.then(|| Saved::new(op, &w_keep));
        move |gy: &Tensor<B>| {
            let be = gy.backend();
            let gy = dense(gy)?;
            let mut grads = Vec::with_capacity(3);
            grads.push(match &sw {
                Some(sw) => Some(conv_grad_input(be, &gy, sw.get()?, &g)?),
                None => None,
            });
            grads.push(match &sx {
                Some(sx) => Some(conv_grad_weight(be, &gy, sx.get()?, &g)?),
                None => None,
            });
            if has_bias {
                grads.push(if need_b { Some(bias_grad(&gy)?) } else { None });
            }
            Ok(grads)
        }
    }))
}

/// `∂L/∂x`: per item `W_gᵀ · g_{n, g}` per group, then col2im (see the module docs).
fn conv_grad_input<B: Backend>(
    be: &B,
    gy: &Tensor<B>,
    w: &Tensor<B>,
    g: &ConvGeom,
) -> Result<Tensor<B>> {
    let (o, p, k, og) = (g.o, g.p(), g.k(), g.og());
    let ck = g.c * g.kh * g.kw;
    let chw = g.chw();
    let mut gx = be.uninit(g.n * chw)?;
    let w_c = dense(w)?;
    let (gd, wd) = (gy.read()?, w_c.read()?);
    let fold = folded_items(g);
    if fold > 1 && ck * p > 0 {
        // The items' gradients side by side, `Wᵀ · [g_0 … g_{fold−1}]`, the product's
        // `[C·KH·KW, items, OH·OW]` copied back into per-item column matrices (see
        // [`folded_items`]): the same sums, so the same bits.
        let mut side = be.uninit(fold * o * p)?;
        let mut big = be.uninit(fold * ck * p)?;
        let mut cols = be.uninit(fold * ck * p)?;
        let mut n0 = 0;
        while n0 < g.n {
            let items = fold.min(g.n - n0);
            let g0 = gy.layout().offset + n0 * o * p;
            swap_outer(
                be,
                B::slice(gd.as_ref(), g0..g0 + items * o * p),
                (items, o, p),
                B::view_mut(&mut side),
            )?;
            let w = (wd.as_ref(), w_c.layout().offset, (o, ck));
            weight_product(
                be,
                w,
                true,
                B::view(&side),
                items * p,
                B::view_mut(&mut big),
            )?;
            swap_outer(be, B::view(&big), (ck, items, p), B::view_mut(&mut cols))?;
            col2im_items(be, g, B::view(&cols), n0..n0 + items, B::view_mut(&mut gx))?;
            n0 += items;
        }
        return Tensor::from_storage(be, gx, Shape::from([g.n, g.c, g.h, g.w]));
    }
    let nb = items_per_block(g);
    let mut cols = be.uninit(nb * ck * p)?;
    let mut n0 = 0;
    while n0 < g.n {
        let items = nb.min(g.n - n0);
        if ck * p > 0 {
            // a = W_gᵀ [K, O/G]: element (r, c) of group gi at gi·(O/G)·K + c·K + r.
            let spec = block_spec(
                g,
                items,
                (k, og, p),
                (w_c.layout().offset, [og * k, 1, k], 0),
                (gy.layout().offset + n0 * o * p, [og * p, p, 1], o * p),
            );
            be.matmul(
                &spec,
                wd.as_ref(),
                gd.as_ref(),
                B::slice_mut(B::view_mut(&mut cols), 0..items * ck * p),
            )?;
        }
        col2im_items(be, g, B::view(&cols), n0..n0 + items, B::view_mut(&mut gx))?;
        n0 += items;
    }
    Tensor::from_storage(be, gx, Shape::from([g.n, g.c, g.h, g.w]))
}

/// col2im of the column matrices of items `range` (one after another in `cols`) into
/// their places in the input gradient `gx`.
fn col2im_items<B: Backend>(
    be: &B,
    g: &ConvGeom,
    cols: ViewOf<'_, B>,
    range: core::ops::Range<usize>,
    mut gx: ViewMutOf<'_, B>,
) -> Result<()> {
    let (len, chw) = (g.c * g.kh * g.kw * g.p(), g.chw());
    for (i, n) in range.enumerate() {
        be.col2im(
            &col_spec(g),
            B::slice(cols, i * len..(i + 1) * len),
            B::slice_mut(B::reborrow(&mut gx), n * chw..(n + 1) * chw),
        )?;
    }
    Ok(())
}

/// `∂L/∂W`: per item `g_{n, g} · cols_{n, g}ᵀ` per group, added in item order from `+0`.
///
/// Both operands of that product have the summed positions `(oh, ow)` as their unit
/// stride, so one of them reaches the GEMM transposed. The product is formed as its
/// transpose `cols_{n, g} · g_{n, g}ᵀ` (`[K, O/G]`): the same products (a product of
/// two floats does not depend on their order) summed over the same positions in the
/// same order, so the same bits, with the transposed operand the gradient (`O/G` rows)
/// instead of the columns (`K = C/G·KH·KW` rows, several times more). The items'
/// contributions are added by [`Backend::matmul_acc`] into that transpose, which is
/// copied into the weight's layout at the end (a copy: the bits move unchanged).
fn conv_grad_weight<B: Backend>(
    be: &B,
    gy: &Tensor<B>,
    x: &Tensor<B>,
    g: &ConvGeom,
) -> Result<Tensor<B>> {
    let (o, p, k, og) = (g.o, g.p(), g.k(), g.og());
    let ck = g.c * g.kh * g.kw;
    // The transposed weight gradient `[G, K, O/G]`, from +0.
    let mut gwt = be.zeros(o * k)?;
    let src = ColSource::new(x, g)?;
    let (gd, sd) = (gy.read()?, src.tensor().read()?);
    let segmented = segmented_items(g);
    if o * k > 0 && p > 0 && segmented > 1 {
        // The items' gradients `[O, items·P]` and columns `[C·KH·KW, items·P]` side by
        // side, one product whose k runs over the items, summed per item (a segment of
        // `P` steps from +0) and added in item order: the same sums in the same order,
        // without a product per item.
        let mut cols = be.uninit(segmented * ck * p)?;
        let mut side = be.uninit(segmented * ck * p)?;
        let mut g_side = be.uninit(segmented * o * p)?;
        let mut n0 = 0;
        while n0 < g.n {
            let items = segmented.min(g.n - n0);
            src.gather_items(be, sd.as_ref(), g, n0..n0 + items, B::view_mut(&mut cols))?;
            swap_outer(be, B::view(&cols), (items, ck, p), B::view_mut(&mut side))?;
            let g0 = gy.layout().offset + n0 * o * p;
            let g_items = B::slice(gd.as_ref(), g0..g0 + items * o * p);
            swap_outer(be, g_items, (items, o, p), B::view_mut(&mut g_side))?;
            let spec = MatmulSpec {
                batch: 1,
                m: ck,
                k: items * p,
                n: o,
                a_offset: 0,
                a_strides: [0, items * p, 1],
                b_offset: 0,
                b_strides: [0, 1, items * p],
            };
            be.matmul_acc(
                &spec,
                p,
                B::slice(B::view(&side), 0..items * ck * p),
                B::slice(B::view(&g_side), 0..items * o * p),
                B::view_mut(&mut gwt),
            )?;
            n0 += items;
        }
    } else if o * k > 0 && p > 0 {
        // One item at a time: each contribution is its own `matmul_acc`.
        let mut cols = be.uninit(ck * p)?;
        for n in 0..g.n {
            src.gather(be, sd.as_ref(), g, n, B::view_mut(&mut cols))?;
            // a = cols_g [K, P]; b = g_gᵀ [P, O/G]: element (r, c) of group gi at
            // gi·(O/G)·P + c·P + r.
            let spec = group_spec(
                g,
                k,
                p,
                og,
                0,
                [k * p, p, 1],
                gy.layout().offset + n * o * p,
                [og * p, 1, p],
            );
            be.matmul_acc(&spec, p, B::view(&cols), gd.as_ref(), B::view_mut(&mut gwt))?;
        }
    }
    // gw[gi, oc, r] = gwt[gi, r, oc].
    let mut gw = be.uninit(o * k)?;
    let layout = Layout {
        shape: Shape::from([g.groups, og, k]),
        strides: vec![k * og, 1, og],
        offset: 0,
    };
    be.copy_strided(B::view(&gwt), &layout, B::view_mut(&mut gw))?;
    Tensor::from_storage(be, gw, [o, g.c / g.groups, g.kh, g.kw].into())
}

// ----- transposed convolution ------------------------------------------------------------

/// Checks the arguments of a transposed 2-D convolution on 4-D `x` `[N, C_in, H, W]` and
/// `w` `[C_in, C_out/G, KH, KW]` and returns the geometry of the convolution it is the
/// adjoint of: input `[N, C_out, H_out, W_out]`, weight `[C_in, C_out/G, KH, KW]`,
/// output `[N, C_in, H, W]` (`docs/conv.md` §6).
fn conv_transpose_geom(
    orig_x: &[usize],
    x: &[usize],
    w: &[usize],
    bias: Option<&[usize]>,
    opts: &ConvTranspose2dOptions,
) -> Result<ConvGeom> {
    let op = "conv_transpose2d";
    let ConvTranspose2dOptions {
        stride,
        padding,
        output_padding,
        dilation,
        groups,
    } = *opts;
    if groups == 0 {
        return Err(Error::invalid(op, "groups", "must be at least 1, got 0"));
    }
    if stride.contains(&0) {
        return Err(Error::invalid(
            op,
            "stride",
            format!("must be at least 1, got {}", fmt_pair(stride)),
        ));
    }
    if dilation.contains(&0) {
        return Err(Error::invalid(
            op,
            "dilation",
            format!("must be at least 1, got {}", fmt_pair(dilation)),
        ));
    }
    for d in 0..2 {
        if output_padding[d] >= stride[d].max(dilation[d]) {
            return Err(Error::invalid(
                op,
                "output_padding",
                format!(
                    "must be smaller than the stride or the dilation in each dimension, got output_padding {}, stride {}, dilation {}",
                    fmt_pair(output_padding),
                    fmt_pair(stride),
                    fmt_pair(dilation)
                ),
            ));
        }
    }
    let (n, c_in, h, wd) = (x[0], x[1], x[2], x[3]);
    let (wc, cog, kh, kw) = (w[0], w[1], w[2], w[3]);
    if kh == 0 || kw == 0 {
        return Err(Error::invalid(
            op,
            "weight",
            format!("kernel size must be positive, got weight of shape {w:?}"),
        ));
    }
    if wc == 0 {
        return Err(Error::invalid(
            op,
            "weight",
            format!("expected at least one input channel, got weight of shape {w:?}"),
        ));
    }
    if wc % groups != 0 {
        return Err(Error::invalid(
            op,
            "groups",
            format!("groups = {groups} does not divide the {wc} input channels of weight {w:?}"),
        ));
    }
    if c_in != wc {
        return Err(Error::mismatch(
            op,
            orig_x,
            w,
            format!("the input must have {wc} channels (weight dim 0), got {c_in}"),
        ));
    }
    let c_out = cog.checked_mul(groups).ok_or_else(|| {
        Error::overflow(
            op,
            "groups",
            format!("weight dim 1 ({cog}) × groups ({groups}) overflows usize"),
        )
    })?;
    if let Some(b) = bias {
        if b != [c_out] {
            return Err(Error::mismatch(
                op,
                b,
                w,
                format!("bias must have shape [{c_out}] (weight dim 1 × groups output channels)"),
            ));
        }
    }
    if h == 0 || wd == 0 {
        return Err(Error::invalid(
            op,
            "input",
            format!("expects a positive height and width, got input of shape {orig_x:?}"),
        ));
    }
    // H_out = (H − 1)·stride − 2·padding + dilation·(KH − 1) + output_padding + 1, the
    // positive part first, in checked arithmetic.
    let mut out = [0usize; 2];
    for (d, size, k) in [(0, h, kh), (1, wd, kw)] {
        let full = (size - 1)
            .checked_mul(stride[d])
            .and_then(|a| (k - 1).checked_mul(dilation[d]).and_then(|b| a.checked_add(b)))
            .and_then(|a| a.checked_add(output_padding[d]))
            .and_then(|a| a.checked_add(1))
            .ok_or_else(|| {
                Error::overflow(
                    op,
                    "stride",
                    format!(
                        "the output size of input {orig_x:?} with weight {w:?}, stride {}, dilation {} overflows usize",
                        fmt_pair(stride),
                        fmt_pair(dilation)
                    ),
                )
            })?;
        let cut = padding[d].checked_mul(2).ok_or_else(|| {
            Error::overflow(
                op,
                "padding",
                format!("2 × padding {} overflows usize", padding[d]),
            )
        })?;
        if cut >= full {
            return Err(Error::invalid(
                op,
                "padding",
                format!(
                    "the output size (H − 1)·stride − 2·padding + dilation·(K − 1) + output_padding + 1 is {} − {cut} ≤ 0 in dimension {d} for input {orig_x:?}, weight {w:?}, padding {}",
                    full,
                    fmt_pair(padding)
                ),
            ));
        }
        out[d] = full - cut;
    }
    // Every buffer the computation allocates must have a representable size: the output,
    // one item's column matrix, the input gradient.
    Shape::from([n, c_out, out[0], out[1]]).numel_for(op)?;
    Shape::from([c_out, kh, kw, h, wd]).numel_for(op)?;
    Shape::from([n, c_in, h, wd]).numel_for(op)?;
    Ok(ConvGeom {
        n,
        c: c_out,
        h: out[0],
        w: out[1],
        o: c_in,
        groups,
        kh,
        kw,
        stride,
        padding,
        dilation,
        oh: h,
        ow: wd,
    })
}

/// The recorded transposed convolution of 4-D `x` `[N, C_in, H, W]` with `w`
/// `[C_in, C_out/G, KH, KW]`: the input gradient of the convolution `g` describes
/// (`docs/conv.md` §6), then `⊕ bias`.
fn conv_transpose2d_core<B: Backend>(
    x: &Tensor<B>,
    w: &Tensor<B>,
    bias: Option<&Tensor<B>>,
    g: ConvGeom,
) -> Result<Tensor<B>> {
    let op = "conv_transpose2d";
    let be = x.backend();
    let mut y = conv_grad_input(be, &dense(x)?, w, &g)?;
    if let Some(b) = bias {
        y = add_channel_bias(op, y, b)?;
    }
    let need_x = x.is_requires_grad();
    let need_w = w.is_requires_grad();
    let need_b = bias.is_some_and(|b| b.is_requires_grad());
    let mut inputs = vec![x, w];
    inputs.extend(bias);
    let (x_keep, w_keep) = (x.clone(), w.clone());
    let has_bias = bias.is_some();
    let info = crate::trace::info(|| {
        // The output padding that gave this output size.
        let extra = |d: usize, size: usize, k: usize, out: usize| {
            out + 2 * g.padding[d] - ((size - 1) * g.stride[d] + g.dilation[d] * (k - 1) + 1)
        };
        OpInfo::new()
            .names(&["input", "weight", "bias"])
            .attr("stride", ints_of(&g.stride))
            .attr("padding", ints_of(&g.padding))
            .attr(
                "output_padding",
                ints_of(&[extra(0, g.oh, g.kh, g.h), extra(1, g.ow, g.kw, g.w)]),
            )
            .attr("dilation", ints_of(&g.dilation))
            .attr("groups", Value::Int(g.groups as i64))
    });
    Ok(record_with(op, y, &inputs, info, move || {
        let sx = need_w.then(|| Saved::new(op, &x_keep));
        let sw = need_x.then(|| Saved::new(op, &w_keep));
        move |gy: &Tensor<B>| {
            let be = gy.backend();
            let gy = dense(gy)?;
            let mut grads = Vec::with_capacity(3);
            // ∂x: the convolution of the output gradient with the same weight.
            grads.push(match &sw {
                Some(sw) => Some(conv_forward_raw(be, &gy, sw.get()?, &g)?),
                None => None,
            });
            // ∂W: the convolution's weight gradient with x in the role of the output
            // gradient and the output gradient in the role of the input.
            grads.push(match &sx {
                Some(sx) => Some(conv_grad_weight(be, &dense(sx.get()?)?, &gy, &g)?),
                None => None,
            });
            if has_bias {
                grads.push(if need_b { Some(bias_grad(&gy)?) } else { None });
            }
            Ok(grads)
        }
    }))
}

/// `t` itself when contiguous, else an unrecorded contiguous copy.
fn dense<B: Backend>(t: &Tensor<B>) -> Result<Tensor<B>> {
    if t.is_contiguous() {
        Ok(t.clone())
    } else {
        t.copy_contiguous()
    }
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
        let _public = crate::engine::PublicOp::new("conv2d");
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
        let _public = crate::engine::PublicOp::new("conv1d");
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

    /// Transposed 2-D convolution (PyTorch's `F.conv_transpose2d`, the adjoint of
    /// [`Tensor::conv2d`]) of `self` `[N, C_in, H, W]` (or unbatched `[C_in, H, W]`) with
    /// `weight` `[C_in, C_out/groups, KH, KW]` and an optional `bias` `[C_out]`; the output
    /// is `[N, C_out, H_out, W_out]` with
    /// `H_out = (H − 1)·sh − 2·ph + dh·(KH − 1) + oph + 1` (likewise W_out).
    ///
    /// Computed with the convolution's kernels in swapped roles: per group the columns
    /// `Wᵀ · x` (canonical GEMM) scattered by col2im, then the bias; the orders of every
    /// sum, forward and backward, are in `docs/conv.md` §6. Errors: input not 3-D or 4-D,
    /// weight not 4-D, input channels ≠ weight dim 0, groups not dividing them, a bias
    /// that is not `[C_out]`, zero stride, dilation, groups or kernel size, an output
    /// padding not below the stride or the dilation, an empty height or width and an
    /// output size below 1.
    pub fn conv_transpose2d(
        &self,
        weight: &Tensor<B>,
        bias: Option<&Tensor<B>>,
        opts: ConvTranspose2dOptions,
    ) -> Result<Tensor<B>> {
        let _public = crate::engine::PublicOp::new("conv_transpose2d");
        let op = "conv_transpose2d";
        let (xd, wd) = (self.dims(), weight.dims());
        if xd.len() != 3 && xd.len() != 4 {
            return Err(Error::invalid(
                op,
                "input",
                format!("expects a 3-D [C_in, H, W] (unbatched) or 4-D [N, C_in, H, W] input, got shape {xd:?}"),
            ));
        }
        if wd.len() != 4 {
            return Err(Error::invalid(
                op,
                "weight",
                format!("expects a 4-D weight [C_in, C_out/groups, KH, KW], got shape {wd:?}"),
            ));
        }
        if let Some(b) = bias {
            if b.rank() != 1 {
                return Err(Error::invalid(
                    op,
                    "bias",
                    format!("expects a 1-D bias [C_out], got shape {:?}", b.dims()),
                ));
            }
        }
        let unbatched = xd.len() == 3;
        let x4 = if unbatched {
            let mut d = vec![1];
            d.extend_from_slice(xd);
            d
        } else {
            xd.to_vec()
        };
        let g = conv_transpose_geom(xd, &x4, wd, bias.map(|b| b.dims()), &opts)?;
        if unbatched {
            conv_transpose2d_core(&self.unsqueeze(0)?, weight, bias, g)?.squeeze(0)
        } else {
            conv_transpose2d_core(self, weight, bias, g)
        }
    }
}
