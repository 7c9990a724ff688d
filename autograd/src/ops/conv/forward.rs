//! The forward convolution: `W · cols` per block of items (or folded items), then the
//! bias, and `conv2d_core`, which records it with its backward rule.

use super::*;

/// `Σ64` over `(n, oh, ow)` of a contiguous `[N, O, OH, OW]` gradient: the bias gradient.
pub(super) fn bias_grad<B: Backend>(g: &Tensor<B>) -> Result<Tensor<B>> {
    sum_unrecorded(g, &[true, false, true, true])
}

/// The unrecorded convolution `out[n, g] = W_g · cols_{n, g}` of 4-D `x` and `w` (no
/// bias): `[N, O, OH, OW]`. Also the input gradient of `conv_transpose2d`.
pub(super) fn conv_forward_raw<B: Backend>(
    be: &B,
    x: &Tensor<B>,
    w: &Tensor<B>,
    g: &ConvGeom,
) -> Result<Tensor<B>> {
    if is_depthwise(g) {
        return depthwise_forward(be, x, w, g);
    }
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
pub(super) fn weight_product<B: Backend>(
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
pub(super) fn conv_forward_folded<B: Backend>(
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
pub(super) fn add_channel_bias<B: Backend>(
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
    crate::ops::new_tensor(be, op, shape, |sum| {
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
pub(super) fn conv2d_core<B: Backend>(
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
