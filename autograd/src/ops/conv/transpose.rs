//! The transposed convolution (`docs/conv.md` §6): its geometry, and its forward and
//! backward as the convolution's gradients with the roles swapped.

use super::*;

/// Checks the arguments of a transposed 2-D convolution on 4-D `x` `[N, C_in, H, W]` and
/// `w` `[C_in, C_out/G, KH, KW]` and returns the geometry of the convolution it is the
/// adjoint of: input `[N, C_out, H_out, W_out]`, weight `[C_in, C_out/G, KH, KW]`,
/// output `[N, C_in, H, W]` (`docs/conv.md` §6).
pub(super) fn conv_transpose_geom(
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
pub(super) fn conv_transpose2d_core<B: Backend>(
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
