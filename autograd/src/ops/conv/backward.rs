//! The gradients of a convolution: the input gradient (`Wᵀ · g`, then col2im) and the
//! weight gradient (`g · colsᵀ`, items added in item order), `docs/conv.md` §1.

use super::*;

/// `∂L/∂x`: per item `W_gᵀ · g_{n, g}` per group, then col2im (see the module docs).
pub(super) fn conv_grad_input<B: Backend>(
    be: &B,
    gy: &Tensor<B>,
    w: &Tensor<B>,
    g: &ConvGeom,
) -> Result<Tensor<B>> {
    if is_depthwise(g) {
        return depthwise_grad_input(be, gy, w, g);
    }
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
pub(super) fn col2im_items<B: Backend>(
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
pub(super) fn conv_grad_weight<B: Backend>(
    be: &B,
    gy: &Tensor<B>,
    x: &Tensor<B>,
    g: &ConvGeom,
) -> Result<Tensor<B>> {
    if is_depthwise(g) {
        return depthwise_grad_weight(be, gy, x, g);
    }
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
