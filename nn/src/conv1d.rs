//! The 1-D convolution layer.

use crate::conv::{check_positive, check_sizes, check_weight};
use crate::error::{Error, Result};
use crate::init;
use crate::module::{Module, Visitor};
use exactgrad_autograd::{Conv1dOptions, Tensor};
use exactgrad_core::{Backend, Philox};
use std::fmt;

/// A 1-D convolution over inputs `[N, C_in, L]` (or unbatched `[C_in, L]`), PyTorch's
/// `nn.Conv1d` with `padding_mode = "zeros"`.
///
/// Parameters: `weight` of shape `[C_out, C_in / groups, K]` and, unless built without
/// one, `bias` of shape `[C_out]`. The product runs on [`Tensor::conv1d`] (im2col and the
/// canonical GEMM, `docs/conv.md`).
pub struct Conv1d<B: Backend> {
    weight: Tensor<B>,
    bias: Option<Tensor<B>>,
    options: Conv1dOptions,
}

/// The sizes and options of a [`Conv1d`] layer, with PyTorch's defaults except the three
/// sizes (`nn.Conv1d(in_channels, out_channels, kernel_size, stride=1, padding=0,
/// dilation=1, groups=1, bias=True)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv1dConfig {
    /// Input channels `C_in`.
    pub in_channels: usize,
    /// Output channels `C_out`.
    pub out_channels: usize,
    /// Kernel length.
    pub kernel_size: usize,
    /// Step between output positions (default 1).
    pub stride: usize,
    /// Zero padding on both sides (default 0).
    pub padding: usize,
    /// Spacing between kernel taps (default 1).
    pub dilation: usize,
    /// Blocked connections: `groups` must divide both channel counts (default 1).
    pub groups: usize,
    /// Whether the layer has a `bias` (default true).
    pub bias: bool,
}

impl Conv1dConfig {
    /// PyTorch's defaults with the given sizes.
    pub fn new(in_channels: usize, out_channels: usize, kernel_size: usize) -> Self {
        let o = Conv1dOptions::default();
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
    pub fn options(&self) -> Conv1dOptions {
        Conv1dOptions {
            stride: self.stride,
            padding: self.padding,
            dilation: self.dilation,
            groups: self.groups,
        }
    }
}

impl<B: Backend> Conv1d<B> {
    /// A layer initialised as PyTorch does: weight, then bias, each drawn row-major from
    /// U(−1/√fan_in, 1/√fan_in) with `fan_in = C_in / groups · K`.
    ///
    /// Fails when a size or the stride, dilation or groups is 0, or when `groups` does
    /// not divide both channel counts.
    pub fn new(backend: &B, config: Conv1dConfig, rng: &mut Philox) -> Result<Self> {
        let op = "Conv1d::new";
        let Conv1dConfig {
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
            kernel_size != 0,
            options.groups,
        )?;
        let cpg = in_channels / options.groups;
        let fan_in = cpg.checked_mul(kernel_size).ok_or_else(|| {
            Error::invalid(
                "Conv1d::new",
                "kernel_size",
                format!("{cpg} channels per group × kernel size {kernel_size} overflows usize"),
            )
        })?;
        let (weight, bias) = init::default_parameters(
            backend,
            [out_channels, cpg, kernel_size],
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
    /// `weight` must be `[C_out, C_in / groups, K]` with `C_out` divisible by
    /// `options.groups`, and `bias`, if given, `[C_out]`.
    pub fn from_tensors(
        weight: &Tensor<B>,
        bias: Option<&Tensor<B>>,
        options: Conv1dOptions,
    ) -> Result<Self> {
        let op = "Conv1d::from_tensors";
        check_options(op, &options)?;
        let out = check_weight(
            op,
            weight.dims(),
            &["C_out", "C_in / groups", "K"],
            options.groups,
        )?;
        let (weight, bias) = init::leaf_parameters(op, weight, bias, out)?;
        Ok(Self {
            weight,
            bias,
            options,
        })
    }

    /// The weight, `[C_out, C_in / groups, K]`.
    pub fn weight(&self) -> &Tensor<B> {
        &self.weight
    }

    /// The bias, `[C_out]`, if the layer has one.
    pub fn bias(&self) -> Option<&Tensor<B>> {
        self.bias.as_ref()
    }

    /// Stride, padding, dilation and groups.
    pub fn options(&self) -> Conv1dOptions {
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

    /// The kernel's length.
    pub fn kernel_size(&self) -> usize {
        self.weight.dims()[2]
    }
}

fn check_options(op: &'static str, o: &Conv1dOptions) -> Result<()> {
    let positive = o.groups > 0 && o.stride > 0 && o.dilation > 0;
    check_positive(op, positive, o.stride, o.dilation, o.groups)
}

impl<B: Backend> Module<B> for Conv1d<B> {
    fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        let _scope = crate::trace::module_scope::<B>(self);
        input.conv1d(&self.weight, self.bias.as_ref(), self.options)
    }

    fn visit(&self, v: &mut Visitor<'_, B>) {
        v.parameter("weight", &self.weight);
        v.parameter("bias", self.bias.as_ref());
    }

    fn describe(&self) -> String {
        format!("{self:?}")
    }
}

impl<B: Backend> fmt::Debug for Conv1d<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        write!(
            f,
            "Conv1d({}, {}, kernel_size={}, stride={}, padding={}, dilation={}, groups={}, bias={})",
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
    fn shapes_names_bounds_and_errors() {
        let b = ScalarRefBackend;
        let mut rng = Philox::new(3);
        let config = Conv1dConfig {
            padding: 1,
            groups: 2,
            ..Conv1dConfig::new(4, 6, 3)
        };
        let opts = config.options();
        let conv = Conv1d::new(&b, config, &mut rng).unwrap();
        let names: Vec<String> = conv
            .named_parameters()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, ["weight", "bias"]);
        assert_eq!(conv.weight().dims(), [6, 2, 3]);
        let bound = (1.0 / 6f64.sqrt()) as f32;
        for t in conv.parameters() {
            assert!(t.to_vec().unwrap().iter().all(|v| v.abs() <= bound));
        }
        let y = conv.forward(&Tensor::ones(&b, [2, 4, 9]).unwrap()).unwrap();
        assert_eq!(y.dims(), [2, 6, 9]);
        // The layer is the functional convolution with its parameters.
        let x = Tensor::randn(&b, [2, 4, 9], 0.0, 1.0, &mut rng).unwrap();
        let want = x.conv1d(conv.weight(), conv.bias(), opts).unwrap();
        assert_eq!(
            conv.forward(&x).unwrap().to_vec().unwrap(),
            want.to_vec().unwrap()
        );
        assert!(Conv1d::new(&b, Conv1dConfig::new(3, 4, 0), &mut rng).is_err());
        let odd_groups = Conv1dConfig {
            groups: 2,
            ..Conv1dConfig::new(3, 4, 3)
        };
        assert!(Conv1d::new(&b, odd_groups, &mut rng).is_err());
        let no_bias = Conv1dConfig {
            bias: false,
            ..Conv1dConfig::new(3, 4, 3)
        };
        assert!(Conv1d::new(&b, no_bias, &mut rng).unwrap().bias().is_none());
        let w = Tensor::zeros(&b, [4, 3, 3, 3]).unwrap();
        assert!(Conv1d::from_tensors(&w, None, Conv1dOptions::default()).is_err());
        assert!(format!("{conv:?}").contains("Conv1d(4, 6, kernel_size=3"));
    }
}
