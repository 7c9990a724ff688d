//! The resizing layer.

use crate::error::Result;
use crate::module::{Module, Visitor};
use exactgrad_autograd::{InterpolateOptions, InterpolateSize, Tensor};
use exactgrad_core::Backend;

/// Resizes `[N, C, H, W]` inputs to a fixed size or by a scale factor (PyTorch's
/// `nn.Upsample` for 4-D inputs, modes `nearest` and `bilinear`), by
/// [`Tensor::interpolate`] (coordinates and sums in `docs/resize.md`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Upsample {
    /// The output size or the scale factors.
    pub size: InterpolateSize,
    /// Mode and `align_corners`.
    pub options: InterpolateOptions,
}

impl Upsample {
    /// Nearest-neighbour upsampling by `factor` in both dimensions (PyTorch's
    /// `nn.Upsample(scale_factor=factor)`).
    pub fn nearest(factor: f64) -> Self {
        Self {
            size: InterpolateSize::ScaleFactor([factor, factor]),
            options: InterpolateOptions::default(),
        }
    }

    /// Bilinear upsampling by `factor` with half-pixel centres (PyTorch's
    /// `nn.Upsample(scale_factor=factor, mode="bilinear")`).
    pub fn bilinear(factor: f64) -> Self {
        Self {
            size: InterpolateSize::ScaleFactor([factor, factor]),
            options: InterpolateOptions::bilinear(),
        }
    }
}

impl<B: Backend> Module<B> for Upsample {
    fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        input.interpolate(self.size, self.options)
    }

    fn visit(&self, _v: &mut Visitor<'_, B>) {}

    fn describe(&self) -> String {
        format!("{self:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use exactgrad_backends::ScalarRefBackend;

    #[test]
    fn upsample_is_interpolate() {
        let b = ScalarRefBackend;
        let x = Tensor::from_vec(&b, (0..6).map(|v| v as f32).collect(), [1, 1, 2, 3]).unwrap();
        let up = Upsample::nearest(2.0);
        let y = Module::<ScalarRefBackend>::forward(&up, &x).unwrap();
        assert_eq!(y.dims(), [1, 1, 4, 6]);
        assert_eq!(y.to_vec().unwrap()[..6], [0., 0., 1., 1., 2., 2.]);
        let bl = Upsample::bilinear(2.0);
        let z = Module::<ScalarRefBackend>::forward(&bl, &x).unwrap();
        let want = x
            .interpolate(
                InterpolateSize::ScaleFactor([2.0, 2.0]),
                InterpolateOptions::bilinear(),
            )
            .unwrap();
        assert_eq!(z.to_vec().unwrap(), want.to_vec().unwrap());
        let zero = Upsample {
            size: InterpolateSize::Size([0, 2]),
            options: InterpolateOptions::default(),
        };
        let e = Module::<ScalarRefBackend>::forward(&zero, &x).unwrap_err();
        assert!(e.to_string().contains("interpolate"), "{e}");
    }
}
