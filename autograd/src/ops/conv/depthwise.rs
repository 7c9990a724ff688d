//! Depthwise convolutions (`groups = C = O`: one filter per channel) through the
//! backend's depthwise kernels, which give the bits of the column-matrix path (im2col,
//! the per-channel product, col2im) without writing the column matrix (`docs/conv.md`
//! §1): a product of one row per channel is a poor fit for the GEMM's tiles.

use super::*;

/// Whether `g` is a depthwise convolution with one filter per channel.
pub(super) fn is_depthwise(g: &ConvGeom) -> bool {
    g.groups == g.c && g.o == g.c && g.c > 0
}

/// The forward depthwise convolution of `x` `[N, C, H, W]` with `w` `[C, 1, KH, KW]`
/// (no bias): `[N, C, OH, OW]`, item by item.
pub(super) fn depthwise_forward<B: Backend>(
    be: &B,
    x: &Tensor<B>,
    w: &Tensor<B>,
    g: &ConvGeom,
) -> Result<Tensor<B>> {
    let (p, chw) = (g.c * g.p(), g.chw());
    let mut out = be.uninit(g.n * p)?;
    let (x, w) = (dense(x)?, dense(w)?);
    let (xd, wd) = (x.read()?, w.read()?);
    let (x0, w0) = (x.layout().offset, w.layout().offset);
    let wv = B::slice(wd.as_ref(), w0..w0 + w.numel());
    for n in 0..g.n {
        be.depthwise_conv(
            &col_spec(g),
            B::slice(xd.as_ref(), x0 + n * chw..x0 + (n + 1) * chw),
            wv,
            B::slice_mut(B::view_mut(&mut out), n * p..(n + 1) * p),
        )?;
    }
    Tensor::from_storage(be, out, Shape::from([g.n, g.c, g.oh, g.ow]))
}

/// The input gradient of [`depthwise_forward`] from the dense gradient `gy`.
pub(super) fn depthwise_grad_input<B: Backend>(
    be: &B,
    gy: &Tensor<B>,
    w: &Tensor<B>,
    g: &ConvGeom,
) -> Result<Tensor<B>> {
    let (p, chw) = (g.c * g.p(), g.chw());
    let mut gx = be.uninit(g.n * chw)?;
    let (gy, w) = (dense(gy)?, dense(w)?);
    let (gd, wd) = (gy.read()?, w.read()?);
    let (g0, w0) = (gy.layout().offset, w.layout().offset);
    let wv = B::slice(wd.as_ref(), w0..w0 + w.numel());
    for n in 0..g.n {
        be.depthwise_grad_input(
            &col_spec(g),
            B::slice(gd.as_ref(), g0 + n * p..g0 + (n + 1) * p),
            wv,
            B::slice_mut(B::view_mut(&mut gx), n * chw..(n + 1) * chw),
        )?;
    }
    Tensor::from_storage(be, gx, Shape::from([g.n, g.c, g.h, g.w]))
}

/// The weight gradient of [`depthwise_forward`]: `[C, 1, KH, KW]` from `+0`, the items'
/// contributions added in item order.
pub(super) fn depthwise_grad_weight<B: Backend>(
    be: &B,
    gy: &Tensor<B>,
    x: &Tensor<B>,
    g: &ConvGeom,
) -> Result<Tensor<B>> {
    let (p, chw) = (g.c * g.p(), g.chw());
    let mut gw = be.zeros(g.c * g.kh * g.kw)?;
    if g.p() > 0 {
        let (gy, x) = (dense(gy)?, dense(x)?);
        let (gd, xd) = (gy.read()?, x.read()?);
        let (g0, x0) = (gy.layout().offset, x.layout().offset);
        for n in 0..g.n {
            be.depthwise_grad_weight(
                &col_spec(g),
                B::slice(gd.as_ref(), g0 + n * p..g0 + (n + 1) * p),
                B::slice(xd.as_ref(), x0 + n * chw..x0 + (n + 1) * chw),
                B::view_mut(&mut gw),
            )?;
        }
    }
    Tensor::from_storage(be, gw, Shape::from([g.c, 1, g.kh, g.kw]))
}
