//! Pooling layers: [`MaxPool2d`], [`AvgPool2d`] and [`AdaptiveAvgPool2d`] (PyTorch's
//! modules of the same names), on [`Tensor::max_pool2d`], [`Tensor::avg_pool2d`] and
//! [`Tensor::adaptive_avg_pool2d`]. They hold no parameters; their options are the
//! functional operators' option structs, checked when the layer is built.

use crate::error::{Error, Result};
use crate::module::{Module, Visitor};
use exactgrad_autograd::{AvgPool2dOptions, MaxPool2dOptions, Tensor};
use exactgrad_core::Backend;
use std::fmt;

/// Checks a window: positive kernel, stride and dilation, padding at most half the
/// kernel (the rules of the functional operators, checked at construction).
fn check_window(
    op: &'static str,
    kernel_size: [usize; 2],
    stride: Option<[usize; 2]>,
    padding: [usize; 2],
    dilation: [usize; 2],
) -> Result<()> {
    for (arg, v) in [
        ("kernel_size", kernel_size),
        ("stride", stride.unwrap_or(kernel_size)),
        ("dilation", dilation),
    ] {
        if v.contains(&0) {
            return Err(Error::invalid(
                op,
                arg,
                format!("must be positive, got {v:?}"),
            ));
        }
    }
    if padding[0] > kernel_size[0] / 2 || padding[1] > kernel_size[1] / 2 {
        return Err(Error::invalid(
            op,
            "padding",
            format!(
                "must be at most half the kernel size, got padding {padding:?} for kernel {kernel_size:?}"
            ),
        ));
    }
    Ok(())
}

/// 2-D max pooling over inputs `[N, C, H, W]` or `[C, H, W]` (PyTorch's `nn.MaxPool2d`
/// without `return_indices`): [`Tensor::max_pool2d`] with the layer's options.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct MaxPool2d {
    options: MaxPool2dOptions,
}

impl MaxPool2d {
    /// A `kernel_size` window with PyTorch's defaults: stride = kernel size, no padding,
    /// dilation 1, floor mode (`nn.MaxPool2d(kernel_size)`).
    ///
    /// Fails when a size is 0.
    pub fn new(kernel_size: [usize; 2]) -> Result<Self> {
        Self::with_options(MaxPool2dOptions::new(kernel_size))
    }

    /// A layer with the given stride, padding, dilation and ceil mode.
    ///
    /// Fails when the kernel size, stride or dilation has a 0, or the padding is more
    /// than half the kernel size.
    pub fn with_options(options: MaxPool2dOptions) -> Result<Self> {
        check_window(
            "MaxPool2d::new",
            options.kernel_size,
            options.stride,
            options.padding,
            options.dilation,
        )?;
        Ok(Self { options })
    }

    /// The options.
    pub fn options(&self) -> MaxPool2dOptions {
        self.options
    }
}

impl<B: Backend> Module<B> for MaxPool2d {
    /// Fails when the input is not 3-D or 4-D or is smaller than the window.
    fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        input.max_pool2d(self.options)
    }

    fn visit(&self, _v: &mut Visitor<'_, B>) {}

    fn describe(&self) -> String {
        format!("{self:?}")
    }
}

impl fmt::Debug for MaxPool2d {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        write!(
            f,
            "MaxPool2d(kernel_size={:?}, stride={:?}, padding={:?}, dilation={:?}, ceil_mode={})",
            o.kernel_size,
            o.stride.unwrap_or(o.kernel_size),
            o.padding,
            o.dilation,
            o.ceil_mode
        )
    }
}

/// 2-D average pooling over inputs `[N, C, H, W]` or `[C, H, W]` (PyTorch's
/// `nn.AvgPool2d`): [`Tensor::avg_pool2d`] with the layer's options.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct AvgPool2d {
    options: AvgPool2dOptions,
}

impl AvgPool2d {
    /// A `kernel_size` window with PyTorch's defaults: stride = kernel size, no padding,
    /// floor mode, padding counted in the divisor (`nn.AvgPool2d(kernel_size)`).
    ///
    /// Fails when a size is 0.
    pub fn new(kernel_size: [usize; 2]) -> Result<Self> {
        Self::with_options(AvgPool2dOptions::new(kernel_size))
    }

    /// A layer with the given stride, padding, ceil mode, `count_include_pad` and
    /// `divisor_override`.
    ///
    /// Fails when the kernel size or stride has a 0, the padding is more than half the
    /// kernel size, or `divisor_override` is `Some(0)`.
    pub fn with_options(options: AvgPool2dOptions) -> Result<Self> {
        let op = "AvgPool2d::new";
        check_window(
            op,
            options.kernel_size,
            options.stride,
            options.padding,
            [1, 1],
        )?;
        if options.divisor_override == Some(0) {
            return Err(Error::invalid(op, "divisor_override", "must be non-zero"));
        }
        Ok(Self { options })
    }

    /// The options.
    pub fn options(&self) -> AvgPool2dOptions {
        self.options
    }
}

impl<B: Backend> Module<B> for AvgPool2d {
    /// Fails when the input is not 3-D or 4-D or is smaller than the window.
    fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        input.avg_pool2d(self.options)
    }

    fn visit(&self, _v: &mut Visitor<'_, B>) {}

    fn describe(&self) -> String {
        format!("{self:?}")
    }
}

impl fmt::Debug for AvgPool2d {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        write!(
            f,
            "AvgPool2d(kernel_size={:?}, stride={:?}, padding={:?}, ceil_mode={}, count_include_pad={}, divisor_override={:?})",
            o.kernel_size,
            o.stride.unwrap_or(o.kernel_size),
            o.padding,
            o.ceil_mode,
            o.count_include_pad,
            o.divisor_override
        )
    }
}

/// 2-D adaptive average pooling of inputs `[N, C, H, W]` or `[C, H, W]` to a fixed output
/// size (PyTorch's `nn.AdaptiveAvgPool2d`): [`Tensor::adaptive_avg_pool2d`]. A `None`
/// dimension keeps the input's size, as PyTorch's `None`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct AdaptiveAvgPool2d {
    output_size: [Option<usize>; 2],
}

impl AdaptiveAvgPool2d {
    /// Pools to `[OH, OW]` (`nn.AdaptiveAvgPool2d((OH, OW))`).
    ///
    /// Fails when a size is 0.
    pub fn new(output_size: [usize; 2]) -> Result<Self> {
        Self::with_output_size(output_size.map(Some))
    }

    /// Pools to `output_size`, keeping the input's size in a `None` dimension
    /// (`nn.AdaptiveAvgPool2d((None, 7))`).
    ///
    /// Fails when a size is 0.
    pub fn with_output_size(output_size: [Option<usize>; 2]) -> Result<Self> {
        if output_size.contains(&Some(0)) {
            return Err(Error::invalid(
                "AdaptiveAvgPool2d::new",
                "output_size",
                format!("must be positive, got {output_size:?}"),
            ));
        }
        Ok(Self { output_size })
    }

    /// The output size (`None`: the input's).
    pub fn output_size(&self) -> [Option<usize>; 2] {
        self.output_size
    }
}

impl<B: Backend> Module<B> for AdaptiveAvgPool2d {
    /// Fails when the input is not 3-D or 4-D.
    fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        let d = input.dims();
        let hw = if d.len() >= 2 {
            [d[d.len() - 2], d[d.len() - 1]]
        } else {
            [0, 0]
        };
        let size = [
            self.output_size[0].unwrap_or(hw[0]),
            self.output_size[1].unwrap_or(hw[1]),
        ];
        input.adaptive_avg_pool2d(size)
    }

    fn visit(&self, _v: &mut Visitor<'_, B>) {}

    fn describe(&self) -> String {
        format!("{self:?}")
    }
}

impl fmt::Debug for AdaptiveAvgPool2d {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AdaptiveAvgPool2d(output_size={:?})", self.output_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::module::ModuleExt;
    use exactgrad_backends::ScalarRefBackend;
    use exactgrad_core::Philox;

    type Sr = ScalarRefBackend;

    fn input() -> Tensor<Sr> {
        Tensor::randn(
            &ScalarRefBackend,
            [2, 3, 7, 6],
            0.0,
            1.0,
            &mut Philox::new(4),
        )
        .unwrap()
    }

    fn run(m: &dyn Module<Sr>, x: &Tensor<Sr>) -> Vec<f32> {
        m.forward(x).unwrap().to_vec().unwrap()
    }

    #[test]
    fn forward_is_the_functional_operator() {
        let x = input();
        let opts = MaxPool2dOptions {
            stride: Some([2, 1]),
            padding: [1, 1],
            dilation: [1, 2],
            ceil_mode: true,
            ..MaxPool2dOptions::new([3, 2])
        };
        let m = MaxPool2d::with_options(opts).unwrap();
        assert_eq!(run(&m, &x), x.max_pool2d(opts).unwrap().to_vec().unwrap());
        let m2 = MaxPool2d::new([2, 2]).unwrap();
        assert_eq!(
            run(&m2, &x),
            x.max_pool2d(MaxPool2dOptions::new([2, 2]))
                .unwrap()
                .to_vec()
                .unwrap()
        );
        let aopts = AvgPool2dOptions {
            padding: [1, 0],
            count_include_pad: false,
            ..AvgPool2dOptions::new([3, 2])
        };
        let a = AvgPool2d::with_options(aopts).unwrap();
        assert_eq!(run(&a, &x), x.avg_pool2d(aopts).unwrap().to_vec().unwrap());
        let ad = AdaptiveAvgPool2d::new([3, 2]).unwrap();
        assert_eq!(
            run(&ad, &x),
            x.adaptive_avg_pool2d([3, 2]).unwrap().to_vec().unwrap()
        );
        // None keeps the input's size.
        let keep = AdaptiveAvgPool2d::with_output_size([None, Some(2)]).unwrap();
        let y = Module::<Sr>::forward(&keep, &x).unwrap();
        assert_eq!(y.dims(), [2, 3, 7, 2]);
        assert_eq!(
            y.to_vec().unwrap(),
            x.adaptive_avg_pool2d([7, 2]).unwrap().to_vec().unwrap()
        );
        // Unbatched inputs, as the operators.
        let u = x.narrow(0, 0, 1).unwrap().squeeze(0).unwrap();
        assert_eq!(Module::<Sr>::forward(&m2, &u).unwrap().dims(), [3, 3, 3]);
        // No parameters, PyTorch's repr.
        for l in [&m as &dyn Module<Sr>, &a, &ad] {
            assert!(l.named_parameters().is_empty() && l.stream_names().is_empty());
        }
        assert_eq!(
            Module::<Sr>::describe(&m2),
            "MaxPool2d(kernel_size=[2, 2], stride=[2, 2], padding=[0, 0], dilation=[1, 1], ceil_mode=false)"
        );
        assert!(Module::<Sr>::describe(&a).starts_with("AvgPool2d(kernel_size=[3, 2]"));
        assert_eq!(
            Module::<Sr>::describe(&keep),
            "AdaptiveAvgPool2d(output_size=[None, Some(2)])"
        );
        assert_eq!(m.options(), opts);
        assert_eq!(a.options(), aopts);
        assert_eq!(keep.output_size(), [None, Some(2)]);
    }

    #[test]
    fn bad_arguments_are_errors() {
        let err = MaxPool2d::new([0, 2]).unwrap_err().to_string();
        assert!(err.contains("kernel_size"), "{err}");
        let bad_stride = MaxPool2dOptions {
            stride: Some([1, 0]),
            ..MaxPool2dOptions::new([2, 2])
        };
        assert!(MaxPool2d::with_options(bad_stride).is_err());
        let bad_dilation = MaxPool2dOptions {
            dilation: [0, 1],
            ..MaxPool2dOptions::new([2, 2])
        };
        assert!(MaxPool2d::with_options(bad_dilation).is_err());
        let bad_padding = MaxPool2dOptions {
            padding: [2, 0],
            ..MaxPool2dOptions::new([3, 3])
        };
        let err = MaxPool2d::with_options(bad_padding)
            .unwrap_err()
            .to_string();
        assert!(err.contains("half the kernel"), "{err}");
        assert!(AvgPool2d::new([2, 0]).is_err());
        let zero_divisor = AvgPool2dOptions {
            divisor_override: Some(0),
            ..AvgPool2dOptions::new([2, 2])
        };
        assert!(AvgPool2d::with_options(zero_divisor).is_err());
        assert!(AdaptiveAvgPool2d::new([0, 1]).is_err());
        // Inputs that do not fit are the operators' errors.
        let x = Tensor::<Sr>::zeros(&ScalarRefBackend, [1, 1, 1, 1]).unwrap();
        let e = Module::<Sr>::forward(&MaxPool2d::new([2, 2]).unwrap(), &x).unwrap_err();
        assert!(e.to_string().contains("max_pool2d"), "{e}");
        let flat = Tensor::<Sr>::zeros(&ScalarRefBackend, [4]).unwrap();
        assert!(Module::<Sr>::forward(&AdaptiveAvgPool2d::new([1, 1]).unwrap(), &flat).is_err());
        assert!(Module::<Sr>::forward(&AvgPool2d::new([2, 2]).unwrap(), &flat).is_err());
    }
}
