//! 2-D resizing: `interpolate` with nearest or bilinear sampling (PyTorch's
//! `F.interpolate` for 4-D inputs), by output size or by scale factor.
//!
//! The source coordinates are PyTorch's, computed in f32 (`docs/resize.md`, normative):
//!
//! - **scale** per dimension: `in ⊘ out` (both converted to f32) when the size is given;
//!   `1/scale_factor` (f64, rounded to f32) when the size comes from a scale factor;
//!   `(in − 1) ⊘ (out − 1)` (0 when `out = 1`) for bilinear with `align_corners`;
//! - **nearest**: `src = min(⌊dst ⊗ scale⌋, in − 1)` (the identity when `out = in`,
//!   `dst / 2` when `out = 2·in`);
//! - **bilinear**: `x = dst ⊗ scale` (align_corners) or `max((dst ⊕ 0.5) ⊗ scale ⊖ 0.5,
//!   0)` (half-pixel centres), `i0 = min(⌊x⌋, in − 1)`, `i1 = i0 + 1` unless `i0` is the
//!   last index, `λ1 = min(max(x ⊖ i0, 0), 1)`, `λ0 = 1 ⊖ λ1`.
//!
//! Forward: nearest copies bits; bilinear is
//! `(λh0 ⊗ ((λw0 ⊗ x00) ⊕ (λw1 ⊗ x01))) ⊕ (λh1 ⊗ ((λw0 ⊗ x10) ⊕ (λw1 ⊗ x11)))`.
//! Backward: `∂x` starts at `+0`; for output positions in increasing row-major order it
//! adds (f32) `g` to the picked element (nearest), or `(g ⊗ λh) ⊗ λw` to the four
//! neighbours in the order `00, 01, 10, 11` (bilinear). Scalar code, the same for every
//! backend; NaN written canonical in exact mode.

use super::canon;
use crate::engine::record_with;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::trace::{ints_of, OpInfo, Value};
use exactgrad_core::backend::try_vec_with_capacity;
use exactgrad_core::{Backend, ComputeMode, Shape};

/// The output size of [`Tensor::interpolate`]: given, or the input size times a factor.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum InterpolateSize {
    /// The output height and width.
    Size([usize; 2]),
    /// Factors for height and width: the output is `⌊in · factor⌋` (computed in f64),
    /// and the coordinates use `1/factor` (PyTorch's `scale_factor` with
    /// `recompute_scale_factor` unset).
    ScaleFactor([f64; 2]),
}

/// How [`Tensor::interpolate`] samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum InterpolateMode {
    /// The nearest source pixel below the scaled coordinate (PyTorch's `"nearest"`).
    #[default]
    Nearest,
    /// Bilinear interpolation of the four neighbours (PyTorch's `"bilinear"`).
    Bilinear,
}

/// The options of [`Tensor::interpolate`], with PyTorch's defaults (nearest,
/// `align_corners` unset).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct InterpolateOptions {
    /// The sampling mode.
    pub mode: InterpolateMode,
    /// Bilinear only: corner pixels of input and output are aligned (`(in − 1)/(out − 1)`
    /// scale) instead of their centres. Setting it with `Nearest` is an error, as in
    /// PyTorch.
    pub align_corners: bool,
}

impl InterpolateOptions {
    /// Bilinear sampling with half-pixel centres (`align_corners = false`).
    pub fn bilinear() -> Self {
        Self {
            mode: InterpolateMode::Bilinear,
            align_corners: false,
        }
    }
}

/// The sampling of one dimension: for each output index, the two source indices and
/// their weights (nearest: `i1 = i0`, `λ0 = 1`, `λ1 = 0`, unused).
struct Axis {
    i0: Vec<usize>,
    i1: Vec<usize>,
    l0: Vec<f32>,
    l1: Vec<f32>,
}

/// PyTorch's scale of one dimension (see the module documentation).
fn axis_scale(input: usize, output: usize, factor: Option<f64>, align: bool) -> f32 {
    if align {
        if output > 1 {
            (input - 1) as f32 / (output - 1) as f32
        } else {
            0.0
        }
    } else {
        match factor {
            Some(f) if f > 0.0 => (1.0 / f) as f32,
            _ => input as f32 / output as f32,
        }
    }
}

impl Axis {
    /// Empty tables with room for `output` entries, obtained fallibly (their length is
    /// the caller's output size: a size no memory holds is an error, not an abort).
    fn with_capacity(output: usize) -> Result<Axis> {
        let op = "interpolate";
        Ok(Axis {
            i0: try_vec_with_capacity(op, output)?,
            i1: try_vec_with_capacity(op, output)?,
            l0: try_vec_with_capacity(op, output)?,
            l1: try_vec_with_capacity(op, output)?,
        })
    }
}

fn nearest_axis(input: usize, output: usize, factor: Option<f64>) -> Result<Axis> {
    let scale = axis_scale(input, output, factor, false);
    let mut a = Axis::with_capacity(output)?;
    a.i0.extend((0..output).map(|d| {
        if output == input {
            d
        } else if output == 2 * input {
            d >> 1
        } else {
            let s = ((d as f32) * scale).floor();
            (s as usize).min(input - 1)
        }
    }));
    a.i1.extend_from_slice(&a.i0);
    a.l0.resize(output, 1.0);
    a.l1.resize(output, 0.0);
    Ok(a)
}

fn linear_axis(input: usize, output: usize, factor: Option<f64>, align: bool) -> Result<Axis> {
    let scale = axis_scale(input, output, factor, align);
    let mut a = Axis::with_capacity(output)?;
    for d in 0..output {
        let x = if align {
            scale * d as f32
        } else {
            let s = scale * (d as f32 + 0.5) - 0.5;
            if s < 0.0 {
                0.0
            } else {
                s
            }
        };
        let i0 = (x.floor() as usize).min(input - 1);
        let i1 = if i0 < input - 1 { i0 + 1 } else { i0 };
        let l1 = (x - i0 as f32).clamp(0.0, 1.0);
        a.i0.push(i0);
        a.i1.push(i1);
        a.l1.push(l1);
        a.l0.push(1.0 - l1);
    }
    Ok(a)
}

/// The output size of one dimension from a scale factor: `⌊in · factor⌋` in f64.
fn scaled_size(op: &'static str, input: usize, factor: f64) -> Result<usize> {
    let v = (input as f64 * factor).floor();
    if !(v.is_finite() && v >= 0.0 && v < (1u64 << 52) as f64) {
        return Err(Error::invalid(
            op,
            "scale_factor",
            format!("scale factor {factor} gives an invalid output size for an input of {input}"),
        ));
    }
    Ok(v as usize)
}

impl<B: Backend> Tensor<B> {
    /// Resizes the last two dimensions of a 4-D input `[N, C, H, W]` (PyTorch's
    /// `F.interpolate` with `mode="nearest"` or `"bilinear"`); see the module
    /// documentation and `docs/resize.md` for the coordinates and the order of the sums.
    ///
    /// Fails (naming `interpolate` and the argument) when the input is not 4-D or has an
    /// empty spatial dimension, when an output size is 0 (or a scale factor gives 0, or is
    /// not finite and positive), or when `align_corners` is set with `Nearest`.
    ///
    /// ```
    /// use exactgrad_autograd::{InterpolateOptions, InterpolateSize, Tensor};
    /// use exactgrad_backends::ScalarRefBackend;
    ///
    /// # fn main() -> exactgrad_autograd::Result<()> {
    /// let b = ScalarRefBackend;
    /// let x = Tensor::from_vec(&b, vec![1.0, 2.0, 3.0, 4.0], [1, 1, 2, 2])?;
    /// let y = x.interpolate(InterpolateSize::ScaleFactor([2.0, 2.0]), InterpolateOptions::default())?;
    /// assert_eq!(y.to_vec()?[..4], [1.0, 1.0, 2.0, 2.0]);
    /// let z = x.interpolate(InterpolateSize::Size([3, 3]), InterpolateOptions::bilinear())?;
    /// assert_eq!(z.dims(), [1, 1, 3, 3]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn interpolate(
        &self,
        size: InterpolateSize,
        options: InterpolateOptions,
    ) -> Result<Tensor<B>> {
        let _public = crate::engine::PublicOp::new("interpolate");
        let op = "interpolate";
        if self.rank() != 4 {
            return Err(Error::invalid(
                op,
                "input",
                format!(
                    "2-D interpolation expects a 4-D input [N, C, H, W], got shape {:?}",
                    self.dims()
                ),
            ));
        }
        let (n, c, h, w) = (
            self.dims()[0],
            self.dims()[1],
            self.dims()[2],
            self.dims()[3],
        );
        if h == 0 || w == 0 {
            return Err(Error::invalid(
                op,
                "input",
                format!(
                    "input and output sizes must be greater than 0, got input shape {:?}",
                    self.dims()
                ),
            ));
        }
        let nearest = options.mode == InterpolateMode::Nearest;
        if nearest && options.align_corners {
            return Err(Error::invalid(
                op,
                "align_corners",
                "can only be set with the interpolating mode bilinear, not nearest",
            ));
        }
        let (out, factors) = match size {
            InterpolateSize::Size(s) => (s, [None, None]),
            InterpolateSize::ScaleFactor(f) => {
                for &v in &f {
                    if !(v.is_finite() && v > 0.0) {
                        return Err(Error::invalid(
                            op,
                            "scale_factor",
                            format!("must be finite and positive, got {f:?}"),
                        ));
                    }
                }
                (
                    [scaled_size(op, h, f[0])?, scaled_size(op, w, f[1])?],
                    [Some(f[0]), Some(f[1])],
                )
            }
        };
        if out.contains(&0) {
            return Err(Error::invalid(
                op,
                "size",
                format!(
                    "input and output sizes must be greater than 0, got output size {out:?} for input [{h}, {w}]"
                ),
            ));
        }
        let (oh, ow) = (out[0], out[1]);
        // Both sizes are checked before the tables of each axis are built (an empty batch
        // would otherwise let any size through).
        Shape::from([oh, ow]).numel_for(op)?;
        let out_shape = Shape::from([n, c, oh, ow]);
        let numel = out_shape.numel_for(op)?;
        // The output first, then the index tables (both fallible); an empty batch reads
        // no table, so it builds none, whatever the output size.
        let mut y = super::zeroed_vec(op, numel)?;
        let planes = n * c;
        let (th, tw) = if planes == 0 { (0, 0) } else { (oh, ow) };
        let (ah, aw) = if nearest {
            (
                nearest_axis(h, th, factors[0])?,
                nearest_axis(w, tw, factors[1])?,
            )
        } else {
            (
                linear_axis(h, th, factors[0], options.align_corners)?,
                linear_axis(w, tw, factors[1], options.align_corners)?,
            )
        };
        let be = self.backend();
        let mode = be.mode();
        let xv = self.to_vec()?;
        for p in 0..planes {
            let src = &xv[p * h * w..(p + 1) * h * w];
            let dst = &mut y[p * oh * ow..(p + 1) * oh * ow];
            for i in 0..oh {
                for j in 0..ow {
                    dst[i * ow + j] = if nearest {
                        src[ah.i0[i] * w + aw.i0[j]]
                    } else {
                        let r0 = aw.l0[j] * src[ah.i0[i] * w + aw.i0[j]]
                            + aw.l1[j] * src[ah.i0[i] * w + aw.i1[j]];
                        let r1 = aw.l0[j] * src[ah.i1[i] * w + aw.i0[j]]
                            + aw.l1[j] * src[ah.i1[i] * w + aw.i1[j]];
                        canon(mode, ah.l0[i] * r0 + ah.l1[i] * r1)
                    };
                }
            }
        }
        let out = Tensor::from_op_vec(be, y, out_shape)?;
        let in_shape = self.dims().to_vec();
        let info = crate::trace::info(|| {
            let info = OpInfo::new()
                .attr(
                    "mode",
                    Value::Str(if nearest { "nearest" } else { "bilinear" }.into()),
                )
                .attr("align_corners", Value::Bool(options.align_corners));
            match size {
                InterpolateSize::Size(s) => info.attr("size", ints_of(&s)),
                InterpolateSize::ScaleFactor(f) => info
                    .attr("scale_factor.0", Value::F64(f[0]))
                    .attr("scale_factor.1", Value::F64(f[1])),
            }
        });
        Ok(record_with(op, out, &[self], info, move || {
            move |g: &Tensor<B>| {
                let gv = g.to_vec()?;
                let be = g.backend();
                let mut dx = super::zeroed_vec(op, planes * h * w)?;
                for p in 0..planes {
                    let gp = &gv[p * oh * ow..(p + 1) * oh * ow];
                    let dp = &mut dx[p * h * w..(p + 1) * h * w];
                    for i in 0..oh {
                        for j in 0..ow {
                            let gij = gp[i * ow + j];
                            if nearest {
                                dp[ah.i0[i] * w + aw.i0[j]] += gij;
                            } else {
                                for (hi, lh) in [(ah.i0[i], ah.l0[i]), (ah.i1[i], ah.l1[i])] {
                                    let gh = gij * lh;
                                    for (wi, lw) in [(aw.i0[j], aw.l0[j]), (aw.i1[j], aw.l1[j])] {
                                        dp[hi * w + wi] += gh * lw;
                                    }
                                }
                            }
                        }
                    }
                }
                if be.mode() == ComputeMode::Exact {
                    super::canon_all(ComputeMode::Exact, &mut dx);
                }
                Ok(vec![Some(Tensor::from_vec(be, dx, in_shape.clone())?)])
            }
        }))
    }
}
