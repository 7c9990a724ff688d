//! The 2-D convolution layer.

use crate::error::{Error, Result};
use crate::init;
use crate::module::{join_name, Module};
use exactgrad_autograd::{Conv2dOptions, Tensor};
use exactgrad_core::{Backend, Philox};
use std::fmt;

/// A 2-D convolution over inputs `[N, C_in, H, W]` (or unbatched `[C_in, H, W]`),
/// PyTorch's `nn.Conv2d` with `padding_mode = "zeros"`.
///
/// Parameters: `weight` of shape `[C_out, C_in / groups, KH, KW]` and, unless built
/// without one, `bias` of shape `[C_out]`. The product runs on
/// [`Tensor::conv2d`] (im2col and the canonical GEMM).
pub struct Conv2d<B: Backend> {
    weight: Tensor<B>,
    bias: Option<Tensor<B>>,
    options: Conv2dOptions,
}

impl<B: Backend> Conv2d<B> {
    /// A layer with bias, stride 1, no padding, no dilation and one group, initialised as
    /// [`Conv2d::with_options`] does.
    ///
    /// Fails when a size is 0.
    pub fn new(
        backend: &B,
        in_channels: usize,
        out_channels: usize,
        kernel_size: [usize; 2],
        rng: &mut Philox,
    ) -> Result<Self> {
        Self::with_options(
            backend,
            in_channels,
            out_channels,
            kernel_size,
            Conv2dOptions::default(),
            true,
            rng,
        )
    }

    /// A layer with the given stride, padding, dilation and groups, with or without
    /// bias, initialised as PyTorch does: weight, then bias, each drawn row-major from
    /// U(−1/√fan_in, 1/√fan_in) with `fan_in = C_in / groups · KH · KW` (PyTorch's
    /// `kaiming_uniform_(a = √5)` bound, see [`init::default_uniform_bound`]).
    ///
    /// Fails when a size or the stride, dilation or groups is 0, or when `groups` does
    /// not divide both channel counts.
    pub fn with_options(
        backend: &B,
        in_channels: usize,
        out_channels: usize,
        kernel_size: [usize; 2],
        options: Conv2dOptions,
        bias: bool,
        rng: &mut Philox,
    ) -> Result<Self> {
        let op = "Conv2d::new";
        check_options(op, &options)?;
        if in_channels == 0 || out_channels == 0 || kernel_size.contains(&0) {
            return Err(Error::invalid(
                op,
                "sizes",
                format!(
                    "channels and kernel size must be positive, got in_channels = {in_channels}, out_channels = {out_channels}, kernel_size = {kernel_size:?}"
                ),
            ));
        }
        for (arg, c) in [("in_channels", in_channels), ("out_channels", out_channels)] {
            if c % options.groups != 0 {
                return Err(Error::invalid(
                    op,
                    arg,
                    format!(
                        "{arg} = {c} must be divisible by groups = {}",
                        options.groups
                    ),
                ));
            }
        }
        let cpg = in_channels / options.groups;
        let bound = init::default_uniform_bound(cpg * kernel_size[0] * kernel_size[1]);
        let leaf = |t: Tensor<B>| {
            t.requires_grad()
                .expect("a freshly created tensor is a leaf")
        };
        let weight = leaf(init::uniform(
            backend,
            [out_channels, cpg, kernel_size[0], kernel_size[1]],
            bound,
            rng,
        ));
        let bias = bias.then(|| leaf(init::uniform(backend, [out_channels], bound, rng)));
        Ok(Self {
            weight,
            bias,
            options,
        })
    }

    /// A layer holding the given values (copied into fresh leaves that require grad).
    ///
    /// `weight` must be `[C_out, C_in / groups, KH, KW]` with `C_out` divisible by
    /// `options.groups`, and `bias`, if given, `[C_out]`.
    pub fn from_tensors(
        weight: &Tensor<B>,
        bias: Option<&Tensor<B>>,
        options: Conv2dOptions,
    ) -> Result<Self> {
        let op = "Conv2d::from_tensors";
        check_options(op, &options)?;
        if weight.rank() != 4 {
            return Err(Error::invalid(
                op,
                "weight",
                format!(
                    "must be 4-D [C_out, C_in / groups, KH, KW], got shape {:?}",
                    weight.dims()
                ),
            ));
        }
        let out = weight.dims()[0];
        if out % options.groups != 0 {
            return Err(Error::invalid(
                op,
                "weight",
                format!(
                    "C_out = {out} must be divisible by groups = {}",
                    options.groups
                ),
            ));
        }
        if let Some(b) = bias {
            if b.dims() != [out] {
                return Err(Error::invalid(
                    op,
                    "bias",
                    format!("must have shape [{out}], got {:?}", b.dims()),
                ));
            }
        }
        let weight = weight.detach().copy_contiguous().requires_grad()?;
        let bias = bias
            .map(|b| b.detach().copy_contiguous().requires_grad())
            .transpose()?;
        Ok(Self {
            weight,
            bias,
            options,
        })
    }

    /// The weight, `[C_out, C_in / groups, KH, KW]`.
    pub fn weight(&self) -> &Tensor<B> {
        &self.weight
    }

    /// The bias, `[C_out]`, if the layer has one.
    pub fn bias(&self) -> Option<&Tensor<B>> {
        self.bias.as_ref()
    }

    /// Stride, padding, dilation and groups.
    pub fn options(&self) -> Conv2dOptions {
        self.options
    }

    /// Number of input channels (`C_in`).
    pub fn in_channels(&self) -> usize {
        self.weight.dims()[1] * self.options.groups
    }

    /// Number of output channels (`C_out`).
    pub fn out_channels(&self) -> usize {
        self.weight.dims()[0]
    }

    /// The kernel's height and width.
    pub fn kernel_size(&self) -> [usize; 2] {
        [self.weight.dims()[2], self.weight.dims()[3]]
    }
}

fn check_options(op: &'static str, o: &Conv2dOptions) -> Result<()> {
    if o.groups == 0 || o.stride.contains(&0) || o.dilation.contains(&0) {
        return Err(Error::invalid(
            op,
            "options",
            format!(
                "stride, dilation and groups must be positive, got stride = {:?}, dilation = {:?}, groups = {}",
                o.stride, o.dilation, o.groups
            ),
        ));
    }
    Ok(())
}

impl<B: Backend> Module<B> for Conv2d<B> {
    fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        Ok(input.conv2d(&self.weight, self.bias.as_ref(), self.options)?)
    }

    fn visit_parameters(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor<B>)) {
        f(&join_name(prefix, "weight"), &self.weight);
        if let Some(b) = &self.bias {
            f(&join_name(prefix, "bias"), b);
        }
    }
}

impl<B: Backend> fmt::Debug for Conv2d<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        write!(
            f,
            "Conv2d({}, {}, kernel_size={:?}, stride={:?}, padding={:?}, dilation={:?}, groups={}, bias={})",
            self.in_channels(),
            self.out_channels(),
            self.kernel_size(),
            o.stride,
            o.padding,
            o.dilation,
            o.groups,
            self.bias.is_some()
        )
    }
}
