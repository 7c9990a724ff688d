//! The geometry of a convolution: the checked sizes of input, kernel and output,
//! from the options (`docs/conv.md` §1), and the messages of its errors.

use super::*;

/// Sizes of one 2-D convolution.
#[derive(Clone, Copy, Debug)]
pub(super) struct ConvGeom {
    pub(super) n: usize,
    pub(super) c: usize,
    pub(super) h: usize,
    pub(super) w: usize,
    pub(super) o: usize,
    pub(super) groups: usize,
    pub(super) kh: usize,
    pub(super) kw: usize,
    pub(super) stride: [usize; 2],
    pub(super) padding: [usize; 2],
    pub(super) dilation: [usize; 2],
    pub(super) oh: usize,
    pub(super) ow: usize,
}

impl ConvGeom {
    /// Output channels per group.
    pub(super) fn og(&self) -> usize {
        self.o / self.groups
    }

    /// Rows of one group's column matrix: `C/G · KH · KW`.
    pub(super) fn k(&self) -> usize {
        self.c / self.groups * self.kh * self.kw
    }

    /// Output positions per item: `OH · OW`.
    pub(super) fn p(&self) -> usize {
        self.oh * self.ow
    }

    /// Input elements per item: `C · H · W`. Exact when the batch has items (it is at
    /// most the input's count); an empty batch may have items whose size alone
    /// overflows, and then no item is addressed, so the product saturates.
    pub(super) fn chw(&self) -> usize {
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
pub(super) fn conv_out_size(
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
pub(super) fn conv_geom(
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
pub(super) fn fmt_arg(op: &str, v: [usize; 2]) -> String {
    if op == "conv1d" {
        v[1].to_string()
    } else {
        fmt_pair(v)
    }
}

pub(super) fn fmt_spatial(op: &str, v: [usize; 2]) -> String {
    if op == "conv1d" {
        v[1].to_string()
    } else {
        format!("{} x {}", v[0], v[1])
    }
}
