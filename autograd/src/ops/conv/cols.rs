//! The column matrices: the im2col source of a block of items, the grouped, folded and
//! segmented product specs over them (`docs/conv.md` §1).

use super::*;

/// The im2col source: `x` itself when there is no padding, else a zero-padded copy.
pub(super) fn padded_source<B: Backend>(x: &Tensor<B>, g: &ConvGeom) -> Result<Tensor<B>> {
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
pub(super) fn im2col<B: Backend>(
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
pub(super) fn col_spec(g: &ConvGeom) -> Col2imSpec {
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
pub(super) enum ColSource<B: Backend> {
    Dense(Tensor<B>),
    Strided(Tensor<B>),
}

impl<B: Backend> ColSource<B> {
    pub(super) fn new(x: &Tensor<B>, g: &ConvGeom) -> Result<Self> {
        if x.is_contiguous() {
            Ok(ColSource::Dense(x.clone()))
        } else {
            Ok(ColSource::Strided(padded_source(x, g)?))
        }
    }

    pub(super) fn tensor(&self) -> &Tensor<B> {
        match self {
            ColSource::Dense(t) | ColSource::Strided(t) => t,
        }
    }

    /// Gathers the columns of items `range`, one after another, into `cols` (which holds
    /// at least that many items' columns).
    pub(super) fn gather_items(
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
    pub(super) fn gather(
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
pub(super) fn group_spec(
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
pub(super) const COL_BUDGET: usize = 1 << 17;

/// Items whose columns are gathered together and whose products run as one batched
/// `matmul` (fewer and larger kernel calls): with one group, as many as fit in
/// [`COL_BUDGET`]; with several groups one (the batch is then the groups). Each output
/// still sees the canonical GEMM of its own item, so the block size changes no bits.
pub(super) fn items_per_block(g: &ConvGeom) -> usize {
    if g.groups != 1 {
        return 1;
    }
    let per_item = (g.c * g.kh * g.kw * g.p()).max(1);
    (COL_BUDGET / per_item).clamp(1, g.n.max(1))
}

/// Output positions per item below which the items of a block are folded into the
/// columns of one product (see [`folded_items`]).
pub(super) const FOLD_BELOW_P: usize = 64;

/// Columns a folded product aims for: several full micro-tiles on every path.
pub(super) const FOLD_COLUMNS: usize = 256;

/// Column elements a folded block may hold at once (8 MiB of f32).
pub(super) const FOLD_BUDGET: usize = 1 << 21;

/// Items whose column matrices are laid side by side into one `[C·KH·KW, items·OH·OW]`
/// matrix, so that a convolution with few output positions per item (the last stages of
/// a ResNet: `OH·OW` = 16) runs one product with many columns instead of one product
/// per item whose few columns fill a fraction of the micro-tile. 1 when not folded
/// (several groups, a single item, or enough positions per item). Each output element is
/// still the canonical sum of its own item's column, so folding changes no bits.
pub(super) fn folded_items(g: &ConvGeom) -> usize {
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
pub(super) const SEGMENT_MAX_P: usize = 64;

/// Items whose weight-gradient contributions are formed by one segmented product
/// ([`Backend::matmul_acc`] with the items along `k`, one segment of `OH·OW` steps per
/// item), so that a convolution with few output positions per item does not write and
/// re-read a `[O, C·KH·KW]` product per item. 1 when not (several groups, a single item,
/// or more positions per item than [`SEGMENT_MAX_P`]). Each item's contribution is still
/// its own canonical sum, added in item order, so the bits are those of the per-item
/// products.
pub(super) fn segmented_items(g: &ConvGeom) -> usize {
    let p = g.p();
    if g.groups != 1 || p == 0 || p > SEGMENT_MAX_P || g.n < 2 || g.o == 0 || g.c == 0 {
        return 1;
    }
    let per_item = (g.c * g.kh * g.kw * p).max(1);
    (FOLD_BUDGET / per_item).min(g.n).max(1)
}

/// Copies the contiguous `[a, b, c]` block `src` into `out` as `[b, a, c]` (the backend's
/// strided copy: the bits move unchanged).
pub(super) fn swap_outer<B: Backend>(
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
pub(super) fn block_spec(
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

/// `t` itself when contiguous, else an unrecorded contiguous copy.
pub(super) fn dense<B: Backend>(t: &Tensor<B>) -> Result<Tensor<B>> {
    if t.is_contiguous() {
        Ok(t.clone())
    } else {
        t.copy_contiguous()
    }
}
