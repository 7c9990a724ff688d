//! The transposed 2-D convolution layer.

use crate::conv::{check_positive, check_sizes, check_weight};
use crate::error::{Error, Result};
use crate::init;
use crate::module::{Module, Visitor};
use exactgrad_autograd::{ConvTranspose2dOptions, Tensor};
use exactgrad_core::{Backend, Philox};
use std::fmt;

/// A transposed 2-D convolution over inputs `[N, C_in, H, W]` (or unbatched
/// `[C_in, H, W]`), PyTorch's `nn.ConvTranspose2d` with `padding_mode = "zeros"` (the
/// output size is fixed by the options; `forward` takes no `output_size`).
///
/// Parameters: `weight` of shape `[C_in, C_out / groups, KH, KW]` (PyTorch's layout for
/// transposed convolutions) and, unless built without one, `bias` of shape `[C_out]`.
/// The product runs on [`Tensor::conv_transpose2d`] (`docs/conv.md` §6).
pub struct ConvTranspose2d<B: Backend> {
    weight: Tensor<B>,
    bias: Option<Tensor<B>>,
    options: ConvTranspose2dOptions,
}

/// The sizes and options of a [`ConvTranspose2d`] layer, with PyTorch's defaults except
/// the three sizes (`nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=1,
/// padding=0, output_padding=0, groups=1, bias=True, dilation=1)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvTranspose2dConfig {
    /// Input channels `C_in`.
    pub in_channels: usize,
    /// Output channels `C_out`.
    pub out_channels: usize,
    /// Kernel height and width.
    pub kernel_size: [usize; 2],
    /// Step between input positions in the output (default `[1, 1]`).
    pub stride: [usize; 2],
    /// Removed from both sides of the output (default `[0, 0]`).
    pub padding: [usize; 2],
    /// Added to one side of the output (default `[0, 0]`); smaller than the stride or
    /// the dilation of its dimension.
    pub output_padding: [usize; 2],
    /// Blocked connections: `groups` must divide both channel counts (default 1).
    pub groups: usize,
    /// Whether the layer has a `bias` (default true).
    pub bias: bool,
    /// Spacing between kernel taps (default `[1, 1]`).
    pub dilation: [usize; 2],
}

impl ConvTranspose2dConfig {
    /// PyTorch's defaults with the given sizes.
    pub fn new(in_channels: usize, out_channels: usize, kernel_size: [usize; 2]) -> Self {
        let o = ConvTranspose2dOptions::default();
        Self {
            in_channels,
            out_channels,
            kernel_size,
            stride: o.stride,
            padding: o.padding,
            output_padding: o.output_padding,
            groups: o.groups,
            bias: true,
            dilation: o.dilation,
        }
    }

    /// The operator's options: stride, padding, output padding, dilation and groups.
    pub fn options(&self) -> ConvTranspose2dOptions {
        ConvTranspose2dOptions {
            stride: self.stride,
            padding: self.padding,
            output_padding: self.output_padding,
            dilation: self.dilation,
            groups: self.groups,
        }
    }
}

impl<B: Backend> ConvTranspose2d<B> {
    /// A layer initialised as PyTorch does: weight, then bias, each drawn row-major from
    /// U(−1/√fan_in, 1/√fan_in) where `fan_in = weight.size(1) · KH · KW = C_out / groups
    /// · KH · KW` (PyTorch computes the fan from the transposed weight `[C_in, C_out /
    /// groups, KH, KW]` as for any weight; the bound is that of `kaiming_uniform_(a =
    /// √5)`, see [`init::default_uniform_bound`]).
    ///
    /// Fails when a size or the stride, dilation or groups is 0, when `groups` does not
    /// divide both channel counts, or when an output padding is not smaller than the
    /// stride or the dilation of its dimension.
    pub fn new(backend: &B, config: ConvTranspose2dConfig, rng: &mut Philox) -> Result<Self> {
        let ConvTranspose2dConfig {
            in_channels,
            out_channels,
            kernel_size,
            bias,
            ..
        } = config;
        let options = config.options();
        let op = "ConvTranspose2d::new";
        check_options(op, &options)?;
        check_sizes(
            op,
            in_channels,
            out_channels,
            kernel_size,
            !kernel_size.contains(&0),
            options.groups,
        )?;
        let opg = out_channels / options.groups;
        let fan_in = opg
            .checked_mul(kernel_size[0])
            .and_then(|v| v.checked_mul(kernel_size[1]))
            .ok_or_else(|| {
                Error::invalid(
                    op,
                    "kernel_size",
                    format!("the weight of kernel size {kernel_size:?} is too large"),
                )
            })?;
        let (weight, bias) = init::default_parameters(
            backend,
            [in_channels, opg, kernel_size[0], kernel_size[1]],
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
    /// `weight` must be `[C_in, C_out / groups, KH, KW]` with `C_in` divisible by
    /// `options.groups`, and `bias`, if given, `[C_out]`.
    pub fn from_tensors(
        weight: &Tensor<B>,
        bias: Option<&Tensor<B>>,
        options: ConvTranspose2dOptions,
    ) -> Result<Self> {
        let op = "ConvTranspose2d::from_tensors";
        check_options(op, &options)?;
        check_weight(
            op,
            weight.dims(),
            &["C_in", "C_out / groups", "KH", "KW"],
            options.groups,
        )?;
        let out = weight.dims()[1]
            .checked_mul(options.groups)
            .ok_or_else(|| Error::invalid(op, "groups", "weight dim 1 × groups overflows usize"))?;
        let (weight, bias) = init::leaf_parameters(op, weight, bias, out)?;
        Ok(Self {
            weight,
            bias,
            options,
        })
    }

    /// The weight, `[C_in, C_out / groups, KH, KW]`.
    pub fn weight(&self) -> &Tensor<B> {
        &self.weight
    }

    /// The bias, `[C_out]`, if the layer has one.
    pub fn bias(&self) -> Option<&Tensor<B>> {
        self.bias.as_ref()
    }

    /// Stride, padding, output padding, dilation and groups.
    pub fn options(&self) -> ConvTranspose2dOptions {
        self.options
    }

    /// Number of input channels (`C_in`).
    pub fn in_channels(&self) -> usize {
        self.weight.dims()[0]
    }

    /// Number of output channels (`C_out`).
    pub fn out_channels(&self) -> usize {
        self.weight.dims()[1] * self.options.groups
    }

    /// The kernel's height and width.
    pub fn kernel_size(&self) -> [usize; 2] {
        [self.weight.dims()[2], self.weight.dims()[3]]
    }
}

fn check_options(op: &'static str, o: &ConvTranspose2dOptions) -> Result<()> {
    let positive = o.groups > 0 && !o.stride.contains(&0) && !o.dilation.contains(&0);
    check_positive(op, positive, o.stride, o.dilation, o.groups)?;
    if (0..2).any(|d| o.output_padding[d] >= o.stride[d].max(o.dilation[d])) {
        return Err(Error::invalid(
            op,
            "output_padding",
            format!(
                "must be smaller than the stride or the dilation in each dimension, got output_padding = {:?}, stride = {:?}, dilation = {:?}",
                o.output_padding, o.stride, o.dilation
            ),
        ));
    }
    Ok(())
}

impl<B: Backend> Module<B> for ConvTranspose2d<B> {
    fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        let _scope = crate::trace::module_scope::<B>(self);
        input.conv_transpose2d(&self.weight, self.bias.as_ref(), self.options)
    }

    fn visit(&self, v: &mut Visitor<'_, B>) {
        v.parameter("weight", &self.weight);
        v.parameter("bias", self.bias.as_ref());
    }

    fn describe(&self) -> String {
        format!("{self:?}")
    }
}

impl<B: Backend> fmt::Debug for ConvTranspose2d<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        write!(
            f,
            "ConvTranspose2d({}, {}, kernel_size={:?}, stride={:?}, padding={:?}, output_padding={:?}, dilation={:?}, groups={}, bias={})",
            self.in_channels(),
            self.out_channels(),
            self.kernel_size(),
            o.stride,
            o.padding,
            o.output_padding,
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
        let config = ConvTranspose2dConfig {
            groups: 2,
            stride: [2, 1],
            padding: [1, 0],
            output_padding: [1, 0],
            ..ConvTranspose2dConfig::new(4, 6, [3, 2])
        };
        let conv = ConvTranspose2d::new(&b, config, &mut rng).unwrap();
        assert_eq!(conv.options(), config.options());
        let names: Vec<String> = conv
            .named_parameters()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, ["weight", "bias"]);
        assert_eq!(conv.weight().dims(), [4, 3, 3, 2]);
        assert_eq!((conv.in_channels(), conv.out_channels()), (4, 6));
        assert_eq!(conv.kernel_size(), [3, 2]);
        // fan_in = weight.size(1) · KH · KW = 3 · 3 · 2 = 18 (not C_in / groups · KH · KW).
        let bound = (1.0 / 18f64.sqrt()) as f32;
        for t in conv.parameters() {
            assert!(t.to_vec().unwrap().iter().all(|v| v.abs() <= bound));
            assert!(t.to_vec().unwrap().iter().any(|v| v.abs() > bound * 0.8));
        }
        // H_out = (5 − 1)·2 − 2 + 2 + 1 + 1 = 10, W_out = 4 − 0 + 1 + 0 + 1 = 6.
        let x = Tensor::ones(&b, [2, 4, 5, 5]).unwrap();
        assert_eq!(conv.forward(&x).unwrap().dims(), [2, 6, 10, 6]);
        let sd = conv.state_dict().unwrap();
        assert_eq!(sd.names(), ["bias", "weight"]);
        let config = ConvTranspose2dConfig {
            bias: false,
            ..ConvTranspose2dConfig::new(4, 6, [3, 3])
        };
        let plain = ConvTranspose2d::new(&b, config, &mut rng).unwrap();
        assert_eq!(plain.named_parameters().len(), 1);
        assert!(format!("{plain:?}").contains("ConvTranspose2d(4, 6, kernel_size=[3, 3]"));
        assert!(format!("{plain:?}").contains("bias=false"));
    }

    #[test]
    fn same_seed_same_weights_and_from_tensors_copies() {
        let b = ScalarRefBackend;
        let a = ConvTranspose2d::new(
            &b,
            ConvTranspose2dConfig::new(3, 4, [3, 3]),
            &mut Philox::new(9),
        )
        .unwrap();
        let c = ConvTranspose2d::new(
            &b,
            ConvTranspose2dConfig::new(3, 4, [3, 3]),
            &mut Philox::new(9),
        )
        .unwrap();
        assert_eq!(a.weight().to_vec().unwrap(), c.weight().to_vec().unwrap());
        let d = ConvTranspose2d::from_tensors(a.weight(), a.bias(), a.options()).unwrap();
        assert!(!d.weight().shares_storage(a.weight()));
        assert!(d.weight().is_requires_grad());
        assert_eq!(d.weight().to_vec().unwrap(), a.weight().to_vec().unwrap());
        assert_eq!(d.bias().unwrap().dims(), [4]);
    }

    #[test]
    fn bad_arguments_are_errors() {
        let b = ScalarRefBackend;
        let mut rng = Philox::new(1);
        let g3 = |i, o| ConvTranspose2dConfig {
            groups: 3,
            ..ConvTranspose2dConfig::new(i, o, [3, 3])
        };
        let err = ConvTranspose2d::new(&b, g3(4, 6), &mut rng).unwrap_err();
        assert!(
            err.to_string()
                .contains("in_channels = 4 must be divisible by groups = 3"),
            "{err}"
        );
        let err = ConvTranspose2d::new(&b, g3(6, 4), &mut rng).unwrap_err();
        assert!(err.to_string().contains("out_channels"), "{err}");
        assert!(
            ConvTranspose2d::new(&b, ConvTranspose2dConfig::new(3, 4, [0, 3]), &mut rng).is_err()
        );
        let op = ConvTranspose2dConfig {
            output_padding: [0, 2],
            stride: [1, 2],
            ..ConvTranspose2dConfig::new(3, 4, [3, 3])
        };
        let err = ConvTranspose2d::new(&b, op, &mut rng).unwrap_err();
        assert!(
            err.to_string().contains("ConvTranspose2d::new")
                && err.to_string().contains("output_padding"),
            "{err}"
        );
        let w = Tensor::zeros(&b, [4, 3, 3]).unwrap();
        assert!(
            ConvTranspose2d::from_tensors(&w, None, ConvTranspose2dOptions::default()).is_err()
        );
        let w = Tensor::zeros(&b, [4, 3, 3, 3]).unwrap();
        let bias = Tensor::zeros(&b, [4]).unwrap();
        assert!(
            ConvTranspose2d::from_tensors(&w, Some(&bias), ConvTranspose2dOptions::default())
                .is_err()
        );
        // A wrong channel count in the input is the operator's error.
        let conv =
            ConvTranspose2d::new(&b, ConvTranspose2dConfig::new(3, 4, [3, 3]), &mut rng).unwrap();
        let err = conv
            .forward(&Tensor::zeros(&b, [1, 2, 5, 5]).unwrap())
            .unwrap_err();
        assert!(err.to_string().contains("conv_transpose2d"), "{err}");
    }
}
