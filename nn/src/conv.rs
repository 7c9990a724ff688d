//! The 2-D convolution layer.

use crate::error::{Error, Result};
use crate::init;
use crate::module::{Module, Visitor};
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

/// The sizes and options of a [`Conv2d`] layer, with PyTorch's defaults except the three
/// sizes (`nn.Conv2d(in_channels, out_channels, kernel_size, stride=1, padding=0,
/// dilation=1, groups=1, bias=True)`).
///
/// ```
/// # use exactgrad_nn::Conv2dConfig;
/// let config = Conv2dConfig { padding: [1, 1], ..Conv2dConfig::new(1, 8, [3, 3]) };
/// assert!(config.bias);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dConfig {
    /// Input channels `C_in`.
    pub in_channels: usize,
    /// Output channels `C_out`.
    pub out_channels: usize,
    /// Kernel height and width.
    pub kernel_size: [usize; 2],
    /// Step between output positions (default `[1, 1]`).
    pub stride: [usize; 2],
    /// Zero padding on both sides (default `[0, 0]`).
    pub padding: [usize; 2],
    /// Spacing between kernel taps (default `[1, 1]`).
    pub dilation: [usize; 2],
    /// Blocked connections: `groups` must divide both channel counts (default 1).
    pub groups: usize,
    /// Whether the layer has a `bias` (default true).
    pub bias: bool,
}

impl Conv2dConfig {
    /// PyTorch's defaults with the given sizes.
    pub fn new(in_channels: usize, out_channels: usize, kernel_size: [usize; 2]) -> Self {
        let o = Conv2dOptions::default();
        Self {
            in_channels,
            out_channels,
            kernel_size,
            stride: o.stride,
            padding: o.padding,
            dilation: o.dilation,
            groups: o.groups,
            bias: true,
        }
    }

    /// The operator's options: stride, padding, dilation and groups.
    pub fn options(&self) -> Conv2dOptions {
        Conv2dOptions {
            stride: self.stride,
            padding: self.padding,
            dilation: self.dilation,
            groups: self.groups,
        }
    }
}

impl<B: Backend> Conv2d<B> {
    /// A layer initialised as PyTorch does: weight, then bias, each drawn row-major from
    /// U(−1/√fan_in, 1/√fan_in) with `fan_in = C_in / groups · KH · KW` (PyTorch's
    /// `kaiming_uniform_(a = √5)` bound, see [`init::default_uniform_bound`]).
    ///
    /// Fails when a size or the stride, dilation or groups is 0, or when `groups` does
    /// not divide both channel counts.
    pub fn new(backend: &B, config: Conv2dConfig, rng: &mut Philox) -> Result<Self> {
        let op = "Conv2d::new";
        let Conv2dConfig {
            in_channels,
            out_channels,
            kernel_size,
            bias,
            ..
        } = config;
        let options = config.options();
        check_options(op, &options)?;
        check_sizes(
            op,
            in_channels,
            out_channels,
            kernel_size,
            !kernel_size.contains(&0),
            options.groups,
        )?;
        let cpg = in_channels / options.groups;
        // The fan-in saturates only when the weight's element count overflows, which the
        // allocation below then refuses.
        let fan_in = cpg
            .saturating_mul(kernel_size[0])
            .saturating_mul(kernel_size[1]);
        let (weight, bias) = init::default_parameters(
            backend,
            [out_channels, cpg, kernel_size[0], kernel_size[1]],
            out_channels,
            fan_in,
            bias,
            rng,
        )?;
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
        let out = check_weight(
            op,
            weight.dims(),
            &["C_out", "C_in / groups", "KH", "KW"],
            options.groups,
        )?;
        let (weight, bias) = init::leaf_parameters(op, weight, bias, out)?;
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
    let positive = o.groups > 0 && !o.stride.contains(&0) && !o.dilation.contains(&0);
    check_positive(op, positive, o.stride, o.dilation, o.groups)
}

// ----- the validation shared by the convolution layers (Conv1d, Conv2d, ConvTranspose2d) --

/// Stride, dilation and groups positive (`positive`), else the layers' common error.
pub(crate) fn check_positive(
    op: &'static str,
    positive: bool,
    stride: impl fmt::Debug,
    dilation: impl fmt::Debug,
    groups: usize,
) -> Result<()> {
    if positive {
        return Ok(());
    }
    Err(Error::invalid(
        op,
        "options",
        format!(
            "stride, dilation and groups must be positive, got stride = {stride:?}, dilation = {dilation:?}, groups = {groups}"
        ),
    ))
}

/// A constructor's sizes: both channel counts and every kernel size (`kernel_positive`)
/// positive, and `groups` dividing both channel counts.
pub(crate) fn check_sizes(
    op: &'static str,
    in_channels: usize,
    out_channels: usize,
    kernel_size: impl fmt::Debug,
    kernel_positive: bool,
    groups: usize,
) -> Result<()> {
    if in_channels == 0 || out_channels == 0 || !kernel_positive {
        return Err(Error::invalid(
            op,
            "sizes",
            format!(
                "channels and kernel size must be positive, got in_channels = {in_channels}, out_channels = {out_channels}, kernel_size = {kernel_size:?}"
            ),
        ));
    }
    for (arg, c) in [("in_channels", in_channels), ("out_channels", out_channels)] {
        if !c.is_multiple_of(groups) {
            return Err(Error::invalid(
                op,
                arg,
                format!("{arg} = {c} must be divisible by groups = {groups}"),
            ));
        }
    }
    Ok(())
}

/// A given weight: of rank `layout.len()` (its dimensions named by `layout`, as
/// `[C_out, C_in / groups, KH, KW]`), its first dimension (channel count `layout[0]`)
/// divisible by `groups`. Returns that first dimension.
pub(crate) fn check_weight(
    op: &'static str,
    dims: &[usize],
    layout: &[&str],
    groups: usize,
) -> Result<usize> {
    if dims.len() != layout.len() {
        return Err(Error::invalid(
            op,
            "weight",
            format!(
                "must be {}-D [{}], got shape {dims:?}",
                layout.len(),
                layout.join(", ")
            ),
        ));
    }
    let first = dims[0];
    if !first.is_multiple_of(groups) {
        return Err(Error::invalid(
            op,
            "weight",
            format!(
                "{} = {first} must be divisible by groups = {groups}",
                layout[0]
            ),
        ));
    }
    Ok(first)
}

impl<B: Backend> Module<B> for Conv2d<B> {
    fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        let _scope = crate::trace::module_scope::<B>(self);
        input.conv2d(&self.weight, self.bias.as_ref(), self.options)
    }

    fn visit(&self, v: &mut Visitor<'_, B>) {
        v.parameter("weight", &self.weight);
        v.parameter("bias", self.bias.as_ref());
    }

    fn describe(&self) -> String {
        format!("{self:?}")
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::module::ModuleExt;
    use exactgrad_backends::ScalarRefBackend;

    #[test]
    fn names_shapes_and_init_bounds() {
        let b = ScalarRefBackend;
        let mut rng = Philox::new(3);
        let config = Conv2dConfig {
            groups: 2,
            padding: [1, 2],
            ..Conv2dConfig::new(4, 6, [3, 2])
        };
        let conv = Conv2d::new(&b, config, &mut rng).unwrap();
        assert_eq!(conv.options(), config.options());
        assert_eq!(conv.options().padding, [1, 2]);
        let names: Vec<String> = conv
            .named_parameters()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, ["weight", "bias"]);
        assert_eq!(conv.weight().dims(), [6, 2, 3, 2]);
        assert_eq!((conv.in_channels(), conv.out_channels()), (4, 6));
        assert_eq!(conv.kernel_size(), [3, 2]);
        // fan_in = C_in / groups · KH · KW = 12.
        let bound = (1.0 / 12f64.sqrt()) as f32;
        for t in conv.parameters() {
            assert!(t.to_vec().unwrap().iter().all(|v| v.abs() <= bound));
            assert!(t.to_vec().unwrap().iter().any(|v| v.abs() > bound / 2.0));
        }
        let x = Tensor::ones(&b, [2, 4, 5, 5]).unwrap();
        assert_eq!(conv.forward(&x).unwrap().dims(), [2, 6, 5, 8]);
        let config = Conv2dConfig {
            bias: false,
            ..Conv2dConfig::new(4, 6, [3, 3])
        };
        let plain = Conv2d::new(&b, config, &mut rng).unwrap();
        assert_eq!(plain.named_parameters().len(), 1);
        assert!(format!("{plain:?}").contains("bias=false"));
    }

    #[test]
    fn same_seed_same_weights_and_from_tensors_copies() {
        let b = ScalarRefBackend;
        let a = Conv2d::new(&b, Conv2dConfig::new(3, 4, [3, 3]), &mut Philox::new(9)).unwrap();
        let c = Conv2d::new(&b, Conv2dConfig::new(3, 4, [3, 3]), &mut Philox::new(9)).unwrap();
        assert_eq!(a.weight().to_vec().unwrap(), c.weight().to_vec().unwrap());
        let d = Conv2d::from_tensors(a.weight(), a.bias(), Conv2dOptions::default()).unwrap();
        assert!(!d.weight().shares_storage(a.weight()));
        assert!(d.weight().is_requires_grad());
        assert_eq!(d.weight().to_vec().unwrap(), a.weight().to_vec().unwrap());
    }

    #[test]
    fn bad_arguments_are_errors() {
        let b = ScalarRefBackend;
        let mut rng = Philox::new(1);
        let g3 = |i, o| Conv2dConfig {
            groups: 3,
            ..Conv2dConfig::new(i, o, [3, 3])
        };
        let err = Conv2d::new(&b, g3(4, 6), &mut rng).unwrap_err();
        assert!(
            err.to_string()
                .contains("in_channels = 4 must be divisible by groups = 3"),
            "{err}"
        );
        let err = Conv2d::new(&b, g3(6, 4), &mut rng).unwrap_err();
        assert!(err.to_string().contains("out_channels"), "{err}");
        assert!(Conv2d::new(&b, Conv2dConfig::new(3, 4, [0, 3]), &mut rng).is_err());
        let s0 = Conv2dConfig {
            stride: [0, 1],
            ..Conv2dConfig::new(3, 4, [3, 3])
        };
        assert!(Conv2d::new(&b, s0, &mut rng).is_err());
        let w = Tensor::zeros(&b, [4, 3, 3]).unwrap();
        assert!(Conv2d::from_tensors(&w, None, Conv2dOptions::default()).is_err());
        let w = Tensor::zeros(&b, [4, 3, 3, 3]).unwrap();
        let bias = Tensor::zeros(&b, [5]).unwrap();
        assert!(Conv2d::from_tensors(&w, Some(&bias), Conv2dOptions::default()).is_err());
        // A wrong channel count in the input is the operator's error.
        let conv = Conv2d::new(&b, Conv2dConfig::new(3, 4, [3, 3]), &mut rng).unwrap();
        assert!(conv
            .forward(&Tensor::zeros(&b, [1, 2, 5, 5]).unwrap())
            .is_err());
    }
}
