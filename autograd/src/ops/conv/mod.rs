//! The convolutions: `conv1d` and `conv2d` (stride, padding, dilation, groups,
//! depthwise) by im2col and the canonical GEMM, and `conv_transpose2d` (their adjoint,
//! the same kernels in swapped roles), with their backward rules.
//!
//! The transposed convolution is the adjoint of the convolution computed by the same
//! private pieces, one file each: the checked sizes (`geom`), the column source and the
//! grouped, folded and segmented product specs (`cols`), the forward product (`forward`),
//! the input and weight gradients (`backward`) and the transposed convolution built from
//! them (`transpose`); this file holds the options and the public operators.
//!
//! The orders of every sum are written down in `docs/conv.md` §1 (normative):
//!
//! - **im2col** gathers, for one batch item, the column matrix `[C·KH·KW, OH·OW]` (row
//!   `(c, kh, kw)`, column `(oh, ow)`, both row-major) with the backend's `im2col` kernel
//!   (a contiguous input), or as a strided view of the padded input copied with its
//!   `copy_strided` kernel;
//! - **forward**: per item one batched backend `matmul` over the groups, `out[n, g] =
//!   W_g · cols_{n, g}` (`[O/G, K] · [K, OH·OW]`, `K = C/G·KH·KW`), then `⊕ bias[o]`;
//!   with one group and fewer than 64 output positions per item, a block of items is
//!   folded into one product with the items' columns side by side (the same sums; the
//!   input gradient likewise);
//! - **grad weight**: per item `g_{n, g} · cols_{n, g}ᵀ` (canonical GEMM, `k = OH·OW`),
//!   the items' contributions added in item order into an accumulator starting at `+0`;
//! - **grad input**: per item `W_gᵀ · g_{n, g}` (canonical GEMM, `k = O/G`), then the
//!   backend's col2im kernel: each input element starts at `+0` and adds its
//!   contributions in increasing column order `(oh, ow)`;
//! - **grad bias**: Σ64 over `(n, oh, ow)` in row-major order.
//!
//! `conv_transpose2d` (`docs/conv.md` §6) is the input-gradient computation of the
//! convolution whose output has the transposed input's shape: forward = grad input
//! (`Wᵀ · x` then col2im), ∂x = the convolution forward of the gradient, ∂W = grad weight
//! with `x` and the gradient in swapped roles, ∂b = Σ64 over `(n, h, w)`.
//!
//! Pooling is in [`super::pool`], constant padding (which the im2col source uses) in
//! [`super::pad`].

mod backward;
mod cols;
mod depthwise;
mod forward;
mod geom;
mod transpose;

use super::pad::pad_forward;
use super::{fmt_pair, sum_unrecorded};
use crate::engine::{record_with, Saved};
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::trace::{ints_of, OpInfo, Value};
use exactgrad_core::backend::MatmulSpec;
use exactgrad_core::kernels::Col2imSpec;
use exactgrad_core::{Backend, BinaryOp, Layout, Shape, ViewMutOf, ViewOf};

use backward::*;
use cols::*;
use depthwise::*;
use forward::*;
use geom::*;
use transpose::*;

// ----- options ---------------------------------------------------------------------------

/// Options of [`Tensor::conv1d`] (PyTorch's `F.conv1d` arguments; defaults 1, 0, 1, 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv1dOptions {
    /// Step between window starts (≥ 1).
    pub stride: usize,
    /// Zeros added on both sides of the input.
    pub padding: usize,
    /// Spacing between kernel taps (≥ 1).
    pub dilation: usize,
    /// Number of channel groups; must divide both the input and output channels.
    pub groups: usize,
}

impl Default for Conv1dOptions {
    fn default() -> Self {
        Self {
            stride: 1,
            padding: 0,
            dilation: 1,
            groups: 1,
        }
    }
}

/// Options of [`Tensor::conv2d`] (PyTorch's `F.conv2d` arguments, `[height, width]`;
/// defaults stride 1, padding 0, dilation 1, groups 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dOptions {
    /// Step between window starts (each ≥ 1).
    pub stride: [usize; 2],
    /// Zeros added on both sides of each spatial dimension.
    pub padding: [usize; 2],
    /// Spacing between kernel taps (each ≥ 1).
    pub dilation: [usize; 2],
    /// Number of channel groups; must divide both the input and output channels
    /// (`groups = C` with weight `[C·m, 1, KH, KW]` is a depthwise convolution).
    pub groups: usize,
}

impl Default for Conv2dOptions {
    fn default() -> Self {
        Self {
            stride: [1, 1],
            padding: [0, 0],
            dilation: [1, 1],
            groups: 1,
        }
    }
}

/// Options of [`Tensor::conv_transpose2d`] (PyTorch's `F.conv_transpose2d` arguments,
/// `[height, width]`; defaults stride 1, padding 0, output padding 0, dilation 1, groups 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvTranspose2dOptions {
    /// Step between the positions one input element scatters to (each ≥ 1).
    pub stride: [usize; 2],
    /// Rows and columns removed from both sides of the full output
    /// (`dilation·(kernel − 1) − padding` zeros of the equivalent direct convolution).
    pub padding: [usize; 2],
    /// Rows and columns added at the end (bottom, right) of the output; each must be
    /// smaller than the stride or the dilation of its dimension.
    pub output_padding: [usize; 2],
    /// Spacing between kernel taps (each ≥ 1).
    pub dilation: [usize; 2],
    /// Number of channel groups; must divide both the input and output channels.
    pub groups: usize,
}

impl Default for ConvTranspose2dOptions {
    fn default() -> Self {
        Self {
            stride: [1, 1],
            padding: [0, 0],
            output_padding: [0, 0],
            dilation: [1, 1],
            groups: 1,
        }
    }
}

// ----- convolution -----------------------------------------------------------------------

impl<B: Backend> Tensor<B> {
    /// 2-D convolution (PyTorch's `F.conv2d`, a cross-correlation) of `self`
    /// `[N, C, H, W]` (or unbatched `[C, H, W]`) with `weight` `[O, C/groups, KH, KW]` and
    /// an optional `bias` `[O]`; the output is `[N, O, OH, OW]` with
    /// `OH = ⌊(H + 2·ph − dh·(KH − 1) − 1) / sh⌋ + 1` (likewise OW).
    ///
    /// Computed by im2col and the canonical GEMM (Chellapilla, Puri and Simard 2006); the
    /// orders of every sum, forward and backward, are in `docs/conv.md`. Errors: input
    /// not 3-D or 4-D, weight not 4-D, channel counts that disagree with `groups`, a bias
    /// that is not `[O]`, zero stride, dilation or groups, and a kernel larger than the
    /// padded input.
    pub fn conv2d(
        &self,
        weight: &Tensor<B>,
        bias: Option<&Tensor<B>>,
        opts: Conv2dOptions,
    ) -> Result<Tensor<B>> {
        let _public = crate::engine::PublicOp::new("conv2d");
        let op = "conv2d";
        let (xd, wd) = (self.dims(), weight.dims());
        if xd.len() != 3 && xd.len() != 4 {
            return Err(Error::invalid(
                op,
                "input",
                format!("expects a 3-D [C, H, W] (unbatched) or 4-D [N, C, H, W] input, got shape {xd:?}"),
            ));
        }
        if wd.len() != 4 {
            return Err(Error::invalid(
                op,
                "weight",
                format!("expects a 4-D weight [O, C/groups, KH, KW], got shape {wd:?}"),
            ));
        }
        let unbatched = xd.len() == 3;
        let x4 = if unbatched {
            let mut d = vec![1];
            d.extend_from_slice(xd);
            d
        } else {
            xd.to_vec()
        };
        let g = conv_geom(op, xd, wd, &x4, wd, bias.map(|b| b.dims()), &opts)?;
        if unbatched {
            conv2d_core(op, &self.unsqueeze(0)?, weight, bias, g)?.squeeze(0)
        } else {
            conv2d_core(op, self, weight, bias, g)
        }
    }

    /// 1-D convolution (PyTorch's `F.conv1d`) of `self` `[N, C, L]` (or unbatched
    /// `[C, L]`) with `weight` `[O, C/groups, K]` and an optional `bias` `[O]`; the output
    /// is `[N, O, OL]`, `OL = ⌊(L + 2·p − d·(K − 1) − 1) / s⌋ + 1`.
    ///
    /// The same computation as [`Tensor::conv2d`] with a height of 1 (`docs/conv.md`),
    /// with the same errors.
    pub fn conv1d(
        &self,
        weight: &Tensor<B>,
        bias: Option<&Tensor<B>>,
        opts: Conv1dOptions,
    ) -> Result<Tensor<B>> {
        let _public = crate::engine::PublicOp::new("conv1d");
        let op = "conv1d";
        let (xd, wd) = (self.dims(), weight.dims());
        if xd.len() != 2 && xd.len() != 3 {
            return Err(Error::invalid(
                op,
                "input",
                format!(
                    "expects a 2-D [C, L] (unbatched) or 3-D [N, C, L] input, got shape {xd:?}"
                ),
            ));
        }
        if wd.len() != 3 {
            return Err(Error::invalid(
                op,
                "weight",
                format!("expects a 3-D weight [O, C/groups, K], got shape {wd:?}"),
            ));
        }
        let opts2 = Conv2dOptions {
            stride: [1, opts.stride],
            padding: [0, opts.padding],
            dilation: [1, opts.dilation],
            groups: opts.groups,
        };
        let unbatched = xd.len() == 2;
        let x4 = if unbatched {
            vec![1, xd[0], 1, xd[1]]
        } else {
            vec![xd[0], xd[1], 1, xd[2]]
        };
        let w4 = [wd[0], wd[1], 1, wd[2]];
        let g = conv_geom(op, xd, wd, &x4, &w4, bias.map(|b| b.dims()), &opts2)?;
        let x = if unbatched {
            self.reshape_to(&x4)?
        } else {
            self.unsqueeze(2)?
        };
        let y = conv2d_core(op, &x, &weight.unsqueeze(2)?, bias, g)?;
        if unbatched {
            y.reshape_to(&[g.o, g.ow])
        } else {
            y.squeeze(2)
        }
    }

    /// Transposed 2-D convolution (PyTorch's `F.conv_transpose2d`, the adjoint of
    /// [`Tensor::conv2d`]) of `self` `[N, C_in, H, W]` (or unbatched `[C_in, H, W]`) with
    /// `weight` `[C_in, C_out/groups, KH, KW]` and an optional `bias` `[C_out]`; the output
    /// is `[N, C_out, H_out, W_out]` with
    /// `H_out = (H − 1)·sh − 2·ph + dh·(KH − 1) + oph + 1` (likewise W_out).
    ///
    /// Computed with the convolution's kernels in swapped roles: per group the columns
    /// `Wᵀ · x` (canonical GEMM) scattered by col2im, then the bias; the orders of every
    /// sum, forward and backward, are in `docs/conv.md` §6. Errors: input not 3-D or 4-D,
    /// weight not 4-D, input channels ≠ weight dim 0, groups not dividing them, a bias
    /// that is not `[C_out]`, zero stride, dilation, groups or kernel size, an output
    /// padding not below the stride or the dilation, an empty height or width and an
    /// output size below 1.
    pub fn conv_transpose2d(
        &self,
        weight: &Tensor<B>,
        bias: Option<&Tensor<B>>,
        opts: ConvTranspose2dOptions,
    ) -> Result<Tensor<B>> {
        let _public = crate::engine::PublicOp::new("conv_transpose2d");
        let op = "conv_transpose2d";
        let (xd, wd) = (self.dims(), weight.dims());
        if xd.len() != 3 && xd.len() != 4 {
            return Err(Error::invalid(
                op,
                "input",
                format!("expects a 3-D [C_in, H, W] (unbatched) or 4-D [N, C_in, H, W] input, got shape {xd:?}"),
            ));
        }
        if wd.len() != 4 {
            return Err(Error::invalid(
                op,
                "weight",
                format!("expects a 4-D weight [C_in, C_out/groups, KH, KW], got shape {wd:?}"),
            ));
        }
        if let Some(b) = bias {
            if b.rank() != 1 {
                return Err(Error::invalid(
                    op,
                    "bias",
                    format!("expects a 1-D bias [C_out], got shape {:?}", b.dims()),
                ));
            }
        }
        let unbatched = xd.len() == 3;
        let x4 = if unbatched {
            let mut d = vec![1];
            d.extend_from_slice(xd);
            d
        } else {
            xd.to_vec()
        };
        let g = conv_transpose_geom(xd, &x4, wd, bias.map(|b| b.dims()), &opts)?;
        if unbatched {
            conv_transpose2d_core(&self.unsqueeze(0)?, weight, bias, g)?.squeeze(0)
        } else {
            conv_transpose2d_core(self, weight, bias, g)
        }
    }
}
