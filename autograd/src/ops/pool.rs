//! Pooling: `max_pool2d`, `avg_pool2d` and `adaptive_avg_pool2d`, each with its backward
//! rule.
//!
//! The backend's pooling kernels (`Backend::max_pool2d`, `avg_pool2d`,
//! `adaptive_avg_pool2d` and their backward rules); the window rules and the orders of
//! every sum are in `docs/conv.md` §2 (normative).

use super::fmt_pair;
use crate::engine::record_with;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::trace::{ints_of, OpInfo, Value};
use exactgrad_core::kernels::{pool_out_size, AdaptivePool2dSpec, AvgPool2dSpec, Pool2dSpec};
use exactgrad_core::{Backend, ViewLen};

// ----- options ---------------------------------------------------------------------------

/// Options of [`Tensor::max_pool2d`] (PyTorch's `F.max_pool2d` arguments).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaxPool2dOptions {
    /// Window size `[KH, KW]` (each ≥ 1).
    pub kernel_size: [usize; 2],
    /// Step between windows; `None` means `kernel_size` (PyTorch's default).
    pub stride: Option<[usize; 2]>,
    /// Implicit `−∞` padding on both sides; at most half the kernel size.
    pub padding: [usize; 2],
    /// Spacing between window taps (each ≥ 1).
    pub dilation: [usize; 2],
    /// Rounds the output size up instead of down (the last window must still start
    /// inside the input or the left padding).
    pub ceil_mode: bool,
}

impl MaxPool2dOptions {
    /// The options for a `kernel_size` window with PyTorch's defaults for the rest
    /// (stride = kernel size, no padding, dilation 1, floor mode).
    pub fn new(kernel_size: [usize; 2]) -> Self {
        Self {
            kernel_size,
            ..Self::default()
        }
    }
}

impl Default for MaxPool2dOptions {
    /// A 1×1 window (PyTorch has no default kernel size; use [`MaxPool2dOptions::new`]).
    fn default() -> Self {
        Self {
            kernel_size: [1, 1],
            stride: None,
            padding: [0, 0],
            dilation: [1, 1],
            ceil_mode: false,
        }
    }
}

/// Options of [`Tensor::avg_pool2d`] (PyTorch's `F.avg_pool2d` arguments).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AvgPool2dOptions {
    /// Window size `[KH, KW]` (each ≥ 1).
    pub kernel_size: [usize; 2],
    /// Step between windows; `None` means `kernel_size` (PyTorch's default).
    pub stride: Option<[usize; 2]>,
    /// Implicit zero padding on both sides; at most half the kernel size.
    pub padding: [usize; 2],
    /// Rounds the output size up instead of down (the last window must still start
    /// inside the input or the left padding).
    pub ceil_mode: bool,
    /// Whether the padding zeros count in the divisor (default `true`).
    pub count_include_pad: bool,
    /// Divides every window sum by this instead (must be non-zero).
    pub divisor_override: Option<usize>,
}

impl AvgPool2dOptions {
    /// The options for a `kernel_size` window with PyTorch's defaults for the rest.
    pub fn new(kernel_size: [usize; 2]) -> Self {
        Self {
            kernel_size,
            ..Self::default()
        }
    }
}

impl Default for AvgPool2dOptions {
    /// A 1×1 window (PyTorch has no default kernel size; use [`AvgPool2dOptions::new`]).
    fn default() -> Self {
        Self {
            kernel_size: [1, 1],
            stride: None,
            padding: [0, 0],
            ceil_mode: false,
            count_include_pad: true,
            divisor_override: None,
        }
    }
}

// ----- pooling ---------------------------------------------------------------------------

/// Sizes of a 2-D pooling over `planes = N·C` planes of `h × w`.
#[derive(Clone, Copy, Debug)]
struct PoolGeom {
    planes: usize,
    h: usize,
    w: usize,
    oh: usize,
    ow: usize,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
}

impl PoolGeom {
    /// The kernel spec of this geometry.
    fn spec(&self) -> Pool2dSpec {
        Pool2dSpec {
            planes: self.planes,
            h: self.h,
            w: self.w,
            oh: self.oh,
            ow: self.ow,
            kernel: self.kernel,
            stride: self.stride,
            padding: self.padding,
            dilation: self.dilation,
        }
    }
}

/// Checks a pooling input (3-D or 4-D, non-empty channel and spatial dimensions); returns
/// the 4-D view of it and whether it was unbatched.
fn pool_input<B: Backend>(op: &'static str, x: &Tensor<B>) -> Result<(Tensor<B>, bool)> {
    let d = x.dims();
    if !(d.len() == 3 || d.len() == 4) || d[d.len() - 3..].contains(&0) {
        return Err(Error::invalid(
            op,
            "input",
            format!(
                "expects a 3-D [C, H, W] or 4-D [N, C, H, W] input with non-zero C, H and W, got shape {d:?}"
            ),
        ));
    }
    if d.len() == 3 {
        Ok((x.unsqueeze(0)?, true))
    } else {
        Ok((x.clone(), false))
    }
}

/// Checks the window arguments and computes the pooling sizes of 4-D `x`.
#[allow(clippy::too_many_arguments)]
fn pool_geom(
    op: &'static str,
    orig: &[usize],
    x: &[usize],
    kernel: [usize; 2],
    stride: Option<[usize; 2]>,
    padding: [usize; 2],
    dilation: [usize; 2],
    ceil: bool,
) -> Result<PoolGeom> {
    if kernel.contains(&0) {
        return Err(Error::invalid(
            op,
            "kernel_size",
            format!("must be positive, got {}", fmt_pair(kernel)),
        ));
    }
    let stride = stride.unwrap_or(kernel);
    if stride.contains(&0) {
        return Err(Error::invalid(
            op,
            "stride",
            format!("must be positive, got {}", fmt_pair(stride)),
        ));
    }
    if dilation.contains(&0) {
        return Err(Error::invalid(
            op,
            "dilation",
            format!("must be positive, got {}", fmt_pair(dilation)),
        ));
    }
    if padding[0] > kernel[0] / 2 || padding[1] > kernel[1] / 2 {
        return Err(Error::invalid(
            op,
            "padding",
            format!(
                "must be at most half the kernel size, got padding {} for kernel {}",
                fmt_pair(padding),
                fmt_pair(kernel)
            ),
        ));
    }
    let (h, w) = (x[2], x[3]);
    let oh = pool_out_size(h, kernel[0], stride[0], padding[0], dilation[0], ceil);
    let ow = pool_out_size(w, kernel[1], stride[1], padding[1], dilation[1], ceil);
    if oh < 1 || ow < 1 {
        return Err(Error::invalid(
            op,
            "kernel_size",
            format!(
                "input of shape {orig:?} gives output size {oh} x {ow} for kernel {}, stride {}, padding {}, dilation {}: too small",
                fmt_pair(kernel),
                fmt_pair(stride),
                fmt_pair(padding),
                fmt_pair(dilation)
            ),
        ));
    }
    let too_large = || {
        Error::Core(exactgrad_core::Error::TooLarge {
            op,
            dims: orig.to_vec(),
            limit: exactgrad_core::MAX_ELEMENTS,
        })
    };
    let (oh, ow) = (
        usize::try_from(oh).map_err(|_| too_large())?,
        usize::try_from(ow).map_err(|_| too_large())?,
    );
    exactgrad_core::Shape::from([x[0], x[1], oh, ow]).numel_for(op)?;
    Ok(PoolGeom {
        planes: x[0] * x[1],
        h,
        w,
        oh,
        ow,
        kernel,
        stride,
        padding,
        dilation,
    })
}

/// Wraps a 4-D pooling result back to 3-D when the input was unbatched.
fn unbatch<B: Backend>(y: Tensor<B>, unbatched: bool) -> Result<Tensor<B>> {
    if unbatched {
        y.squeeze(0)
    } else {
        Ok(y)
    }
}

// ----- the operators ---------------------------------------------------------------------

impl<B: Backend> Tensor<B> {
    /// 2-D max pooling (PyTorch's `F.max_pool2d`) of `[N, C, H, W]` or `[C, H, W]`.
    ///
    /// Each output is the maximum of its window in row-major window order, skipping
    /// padding: the first maximum wins ties, a NaN wins over numbers and the last NaN
    /// of the window is the one selected (as PyTorch's CPU kernel). The selected index is
    /// kept; backward scatter-adds each output gradient into it, output positions in
    /// increasing order (f32, from `+0`).
    pub fn max_pool2d(&self, opts: MaxPool2dOptions) -> Result<Tensor<B>> {
        let op = "max_pool2d";
        let (x, unbatched) = pool_input(op, self)?;
        let pg = pool_geom(
            op,
            self.dims(),
            x.dims(),
            opts.kernel_size,
            opts.stride,
            opts.padding,
            opts.dilation,
            opts.ceil_mode,
        )?;
        let be = x.backend();
        let spec = pg.spec();
        let mut dims = x.dims()[..2].to_vec();
        dims.extend([pg.oh, pg.ow]);
        // The output's count (checked by `pool_geom`); an empty batch may have planes
        // whose size alone overflows, so no per-plane product is formed.
        let numel = exactgrad_core::Shape::from(dims.as_slice()).numel();
        let mut argmax = super::IndexBuffer::new(op, numel, usize::MAX)?;
        let y = super::new_tensor(be, op, dims.into(), |out| {
            if !out.is_empty() {
                x.with_contiguous(|xs| be.max_pool2d(&spec, xs, out, &mut argmax))??;
            }
            Ok(())
        })?;
        let info = crate::trace::info(|| {
            OpInfo::new()
                .attr("kernel_size", ints_of(&pg.kernel))
                .attr("stride", ints_of(&pg.stride))
                .attr("padding", ints_of(&pg.padding))
                .attr("dilation", ints_of(&pg.dilation))
                .attr("ceil_mode", Value::Bool(opts.ceil_mode))
        });
        let y = record_with(op, y, &[&x], info, move || {
            move |gy: &Tensor<B>| {
                let be = gy.backend();
                let mut dims = gy.dims()[..2].to_vec();
                dims.extend([pg.h, pg.w]);
                let gx = super::new_tensor(be, op, dims.into(), |gx| {
                    if !gx.is_empty() {
                        gy.with_contiguous(|gv| be.max_pool2d_backward(&spec, &argmax, gv, gx))??;
                    }
                    Ok(())
                })?;
                Ok(vec![Some(gx)])
            }
        });
        unbatch(y, unbatched)
    }

    /// 2-D average pooling (PyTorch's `F.avg_pool2d`) of `[N, C, H, W]` or `[C, H, W]`.
    ///
    /// With PyTorch's window rules: a window `[o·s − p, o·s − p + k)` is clipped to the
    /// padded input for the `count_include_pad` divisor and to the input for the sum and
    /// the other divisor; `divisor_override` replaces both. Each output is
    /// `(Σ64 of the window, row-major, rounded) ⊘ divisor`; backward adds `g ⊘ divisor`
    /// into every element of the window, output positions in increasing order.
    pub fn avg_pool2d(&self, opts: AvgPool2dOptions) -> Result<Tensor<B>> {
        let op = "avg_pool2d";
        if opts.divisor_override == Some(0) {
            return Err(Error::invalid(op, "divisor_override", "must be non-zero"));
        }
        let (x, unbatched) = pool_input(op, self)?;
        let pg = pool_geom(
            op,
            self.dims(),
            x.dims(),
            opts.kernel_size,
            opts.stride,
            opts.padding,
            [1, 1],
            opts.ceil_mode,
        )?;
        let be = x.backend();
        let spec = AvgPool2dSpec {
            pool: pg.spec(),
            count_include_pad: opts.count_include_pad,
            divisor_override: opts.divisor_override,
        };
        let mut dims = x.dims()[..2].to_vec();
        dims.extend([pg.oh, pg.ow]);
        let y = super::new_tensor(be, op, dims.into(), |out| {
            if !out.is_empty() {
                x.with_contiguous(|xs| be.avg_pool2d(&spec, xs, out))??;
            }
            Ok(())
        })?;
        let info = crate::trace::info(|| {
            let mut info = OpInfo::new()
                .attr("kernel_size", ints_of(&pg.kernel))
                .attr("stride", ints_of(&pg.stride))
                .attr("padding", ints_of(&pg.padding))
                .attr("ceil_mode", Value::Bool(opts.ceil_mode))
                .attr("count_include_pad", Value::Bool(opts.count_include_pad));
            if let Some(d) = opts.divisor_override {
                info = info.attr("divisor_override", Value::Int(d as i64));
            }
            info
        });
        let y = record_with(op, y, &[&x], info, move || {
            move |gy: &Tensor<B>| {
                let be = gy.backend();
                let mut dims = gy.dims()[..2].to_vec();
                dims.extend([pg.h, pg.w]);
                let gx = super::new_tensor(be, op, dims.into(), |gx| {
                    if !gx.is_empty() {
                        gy.with_contiguous(|gv| be.avg_pool2d_backward(&spec, gv, gx))??;
                    }
                    Ok(())
                })?;
                Ok(vec![Some(gx)])
            }
        });
        unbatch(y, unbatched)
    }

    /// 2-D adaptive average pooling (PyTorch's `F.adaptive_avg_pool2d`) of
    /// `[N, C, H, W]` or `[C, H, W]` to `output_size` `[OH, OW]`.
    ///
    /// Window `i` of a dimension covers `[⌊i·in/out⌋, ⌈(i+1)·in/out⌉)`; each output is
    /// `(Σ64 of the window, row-major, rounded) ⊘ (window rows · window columns)`, and
    /// backward adds `g ⊘ count` into the window, output positions in increasing order.
    pub fn adaptive_avg_pool2d(&self, output_size: [usize; 2]) -> Result<Tensor<B>> {
        let _public = crate::engine::PublicOp::new("adaptive_avg_pool2d");
        let op = "adaptive_avg_pool2d";
        let (x, unbatched) = pool_input(op, self)?;
        let (h, w) = (x.dims()[2], x.dims()[3]);
        let [oh, ow] = output_size;
        let planes = x.dims()[0] * x.dims()[1];
        exactgrad_core::Shape::from([x.dims()[0], x.dims()[1], oh, ow]).numel_for(op)?;
        let be = x.backend();
        let spec = AdaptivePool2dSpec {
            planes,
            h,
            w,
            oh,
            ow,
        };
        let mut dims = x.dims()[..2].to_vec();
        dims.extend([oh, ow]);
        let y = super::new_tensor(be, op, dims.into(), |out| {
            if !out.is_empty() {
                x.with_contiguous(|xs| be.adaptive_avg_pool2d(&spec, xs, out))??;
            }
            Ok(())
        })?;
        let info = crate::trace::info(|| OpInfo::new().attr("output_size", ints_of(&output_size)));
        let y = record_with(op, y, &[&x], info, move || {
            move |gy: &Tensor<B>| {
                let be = gy.backend();
                let mut dims = gy.dims()[..2].to_vec();
                dims.extend([h, w]);
                let gx = super::new_tensor(be, op, dims.into(), |gx| {
                    if !gx.is_empty() {
                        gy.with_contiguous(|gv| be.adaptive_avg_pool2d_backward(&spec, gv, gx))??;
                    }
                    Ok(())
                })?;
                Ok(vec![Some(gx)])
            }
        });
        unbatch(y, unbatched)
    }
}
