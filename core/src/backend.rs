//! The [`Backend`] trait: storage and the kernels every operator is built from.
//!
//! A backend is a value (cheap to clone) that tensors carry; it names its storage type and
//! its compute mode and provides kernels over slices with explicit layouts. Kernels never
//! allocate their outputs (the caller passes them) and never read global state. Outputs
//! are contiguous and row-major. The bits each kernel must produce in exact mode are
//! defined by `ScalarRefBackend` (crate `exactgrad-backends`) and written down in
//! `docs/arithmetic.md`.
//!
//! Every kernel is a safe function that first checks its arguments against its buffers
//! (lengths, and every [`Layout`] with [`Layout::check_within`], in checked arithmetic,
//! once per call) and returns an error instead of reading or writing out of bounds; the
//! helpers of this module ([`check_len`], [`MatmulSpec::check`]) do the common checks.
//! Buffers are obtained fallibly: an allocation the allocator refuses, or a size above
//! [`MAX_ELEMENTS`], is an [`Error::Alloc`] or [`Error::TooLarge`], never an abort.

use crate::error::{Error, Result};
use crate::kernels::{
    self, AdamSpec, AdaptivePool2dSpec, AttentionScoresSpec, AvgPool2dSpec, Col2imSpec, NormGrads,
    NormSpec, NormStats, Pool2dSpec, ScoreMask, SgdSpec,
};
use crate::mode::ComputeMode;
pub use crate::ops::{BinaryOp, UnaryOp};
use crate::shape::{Layout, MAX_ELEMENTS};
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Debug;

/// The length and overflow checks, defined in [`crate::check`] (re-exported here, where
/// they were first defined).
pub use crate::check::{check_len, checked_mul};

/// A zero-filled vector of `len` f32, obtained fallibly: a length above [`MAX_ELEMENTS`]
/// is an [`Error::TooLarge`] and a refused allocation an [`Error::Alloc`].
pub fn try_zeroed_vec(op: &'static str, len: usize) -> Result<Vec<f32>> {
    if len > MAX_ELEMENTS {
        return Err(Error::TooLarge {
            op,
            dims: alloc::vec![len],
            limit: MAX_ELEMENTS,
        });
    }
    try_vec_filled(op, len, 0.0)
}

/// Reserves room for `additional` more elements in `v`, fallibly: a request above
/// `isize::MAX` bytes, or one the allocator refuses, is an [`Error::Alloc`] naming `op`
/// (never an abort). For the scratch tables and index lists whose length comes from the
/// caller's sizes.
pub fn try_reserve<T>(op: &'static str, v: &mut Vec<T>, additional: usize) -> Result<()> {
    v.try_reserve_exact(additional).map_err(|_| {
        let bytes = v
            .len()
            .saturating_add(additional)
            .saturating_mul(core::mem::size_of::<T>());
        Error::Alloc {
            op,
            bytes,
            reason: if bytes > isize::MAX as usize {
                "the size exceeds isize::MAX bytes"
            } else {
                "the allocator refused the request"
            },
        }
    })
}

/// An empty vector with room for `len` elements, obtained fallibly (see [`try_reserve`]).
pub fn try_vec_with_capacity<T>(op: &'static str, len: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    try_reserve(op, &mut v, len)?;
    Ok(v)
}

/// A vector of `len` copies of `value`, obtained fallibly (see [`try_reserve`]).
pub fn try_vec_filled<T: Clone>(op: &'static str, len: usize, value: T) -> Result<Vec<T>> {
    let mut v = try_vec_with_capacity(op, len)?;
    v.resize(len, value);
    Ok(v)
}

/// The items of `iter` in a vector whose memory is obtained fallibly up front (see
/// [`try_reserve`]), for iterators whose length comes from the caller's sizes.
pub fn try_collect<T>(op: &'static str, iter: impl ExactSizeIterator<Item = T>) -> Result<Vec<T>> {
    let mut v = try_vec_with_capacity(op, iter.len())?;
    v.extend(iter);
    Ok(v)
}

/// Sizes and element strides of a batched matrix product `out[b] = a[b] · b[b]` with
/// `a[b]: m×k`, `b[b]: k×n` and a contiguous `out` of shape `[batch, m, n]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulSpec {
    /// Number of matrices in the batch.
    pub batch: usize,
    /// Rows of each `a` and of each output.
    pub m: usize,
    /// Columns of `a`, rows of `b`: the reduction length.
    pub k: usize,
    /// Columns of each `b` and of each output.
    pub n: usize,
    /// Storage offset of `a[0][0][0]`.
    pub a_offset: usize,
    /// Strides of `a`: batch, row, column (a batch stride of 0 repeats one matrix).
    pub a_strides: [usize; 3],
    /// Storage offset of `b[0][0][0]`.
    pub b_offset: usize,
    /// Strides of `b`: batch, row, column.
    pub b_strides: [usize; 3],
}

impl MatmulSpec {
    /// Checks the spec against the buffers of a product: `out` holds exactly
    /// `batch · m · n` elements and every element of `a` (`batch × m × k`) and `b`
    /// (`batch × k × n`) that the strides address lies inside its buffer, all in checked
    /// arithmetic.
    pub fn check(&self, a_len: usize, b_len: usize, out_len: usize) -> Result<()> {
        let op = "matmul";
        let mn = checked_mul(op, "n", self.m, self.n)?;
        check_len(
            op,
            "out",
            out_len,
            checked_mul(op, "batch", self.batch, mn)?,
        )?;
        let extent = |dims: [usize; 3], offset: usize, strides: [usize; 3]| -> Option<usize> {
            if dims.contains(&0) {
                return Some(0);
            }
            let mut last = offset;
            for (d, s) in dims.iter().zip(strides) {
                last = last.checked_add((d - 1).checked_mul(s)?)?;
            }
            last.checked_add(1)
        };
        for (arg, dims, offset, strides, len) in [
            (
                "a",
                [self.batch, self.m, self.k],
                self.a_offset,
                self.a_strides,
                a_len,
            ),
            (
                "b",
                [self.batch, self.k, self.n],
                self.b_offset,
                self.b_strides,
                b_len,
            ),
        ] {
            match extent(dims, offset, strides) {
                Some(e) if e <= len => {}
                _ => {
                    return Err(Error::invalid(
                        op,
                        arg,
                        alloc::format!(
                            "operand of sizes {dims:?}, strides {strides:?}, offset {offset} does not fit in its buffer of {len} elements"
                        ),
                    ))
                }
            }
        }
        Ok(())
    }
}

/// A compute backend: storage type, mode and kernels.
///
/// Implementations must produce, in [`ComputeMode::Exact`], exactly the bits of
/// `ScalarRefBackend` for every kernel (the conformance kit checks this), and in any mode
/// results that do not depend on the number of threads. Every kernel validates its
/// arguments (see the module documentation) and returns an error for buffers or layouts
/// that do not agree; it never reads or writes outside its buffers.
pub trait Backend: Clone + Send + Sync + Debug + 'static {
    /// An owned buffer of f32 elements.
    type Storage: AsRef<[f32]> + AsMut<[f32]> + Send + Sync + Debug + 'static;

    /// A short name for reports, such as `scalar-ref` or `exact/avx2`.
    fn name(&self) -> String;

    /// The arithmetic contract this backend's kernels follow.
    fn mode(&self) -> ComputeMode;

    /// A zero-filled buffer of `len` elements; an [`Error::Alloc`] or [`Error::TooLarge`]
    /// when the memory cannot be obtained.
    fn zeros(&self, len: usize) -> Result<Self::Storage>;

    /// A buffer of `len` elements whose values are unspecified (but initialised), for an
    /// output that a kernel overwrites completely. The default is [`Backend::zeros`].
    fn uninit(&self, len: usize) -> Result<Self::Storage> {
        self.zeros(len)
    }

    /// A buffer holding `data`.
    fn storage_from_vec(&self, data: Vec<f32>) -> Result<Self::Storage>;

    /// The pool that keeps this backend's released buffers for reuse (statistics, trim,
    /// limit: [`crate::memory`]), or `None` for a backend that leaves every buffer to the
    /// system allocator (the default).
    fn memory(&self) -> Option<&dyn crate::memory::MemoryPool> {
        None
    }

    /// Gathers the elements of `src` under `layout` into `out` in row-major order.
    /// Copies bits exactly (no canonicalisation).
    fn copy_strided(&self, src: &[f32], layout: &Layout, out: &mut [f32]) -> Result<()>;

    /// `out[i] = op(x[i])` over contiguous slices of equal length.
    fn unary(&self, op: UnaryOp, x: &[f32], out: &mut [f32]) -> Result<()>;

    /// The backward rule of `op`: `out[i] = g[i] · op'(…)`, given the forward input `x`
    /// and output `y` (both contiguous, same length as `g`).
    fn unary_backward(
        &self,
        op: UnaryOp,
        x: &[f32],
        y: &[f32],
        g: &[f32],
        out: &mut [f32],
    ) -> Result<()>;

    /// `out = op(a, b)` where `la` and `lb` are layouts already broadcast to the output
    /// shape (stride 0 along broadcast dimensions); `out` is contiguous.
    fn binary(
        &self,
        op: BinaryOp,
        a: &[f32],
        la: &Layout,
        b: &[f32],
        lb: &Layout,
        out: &mut [f32],
    ) -> Result<()>;

    /// `out = cond != 0 ? a : b` with all three layouts broadcast to the output shape.
    #[allow(clippy::too_many_arguments)]
    fn select(
        &self,
        cond: &[f32],
        lc: &Layout,
        a: &[f32],
        la: &Layout,
        b: &[f32],
        lb: &Layout,
        out: &mut [f32],
    ) -> Result<()>;

    /// Sums `x` under `layout` over the dimensions flagged in `reduce`, writing the
    /// remaining dimensions row-major into `out`. Each output accumulates in f64, its
    /// reduced elements in increasing row-major order of their index, from +0, rounded
    /// once to f32.
    fn sum(&self, x: &[f32], layout: &Layout, reduce: &[bool], out: &mut [f32]) -> Result<()>;

    /// The batched matrix product of [`MatmulSpec`]: each output is one f32 accumulator
    /// starting at +0, `k` increasing; exact mode rounds the product and the sum
    /// separately, fast mode may fuse them.
    fn matmul(&self, spec: &MatmulSpec, a: &[f32], b: &[f32], out: &mut [f32]) -> Result<()>;

    /// Softmax (or log-softmax when `log`) of each row of a contiguous `rows × cols` `x`.
    fn softmax(
        &self,
        x: &[f32],
        rows: usize,
        cols: usize,
        log: bool,
        out: &mut [f32],
    ) -> Result<()>;

    /// The backward rule of [`Backend::softmax`] given its output `y` and the incoming
    /// gradient `g` (both contiguous `rows × cols`).
    #[allow(clippy::too_many_arguments)]
    fn softmax_backward(
        &self,
        y: &[f32],
        g: &[f32],
        rows: usize,
        cols: usize,
        log: bool,
        out: &mut [f32],
    ) -> Result<()>;

    // ----- recurrent cells (docs/recurrent.md) -------------------------------------------
    //
    // One step of an LSTM or GRU layer between two matrix products. The default bodies
    // are the reference definitions of `crate::recurrent`, written with this backend's
    // element-wise kernels; a backend may fuse them but must give the same bits.

    /// One LSTM step (`docs/recurrent.md` §2): gate sums, activations, `c_t` and `h_t`
    /// from the step's two products and biases.
    fn lstm_cell(
        &self,
        shape: crate::recurrent::CellShape,
        inputs: crate::recurrent::LstmCellInputs<'_>,
        outputs: crate::recurrent::LstmCellOutputs<'_>,
    ) -> Result<()> {
        crate::recurrent::lstm_cell(self, shape, inputs, outputs)
    }

    /// The backward rule of [`Backend::lstm_cell`] (`docs/recurrent.md` §2): the gradient
    /// of the gate pre-activations and of `c_{t−1}`.
    fn lstm_cell_backward(
        &self,
        shape: crate::recurrent::CellShape,
        inputs: crate::recurrent::LstmCellGradInputs<'_>,
        outputs: crate::recurrent::LstmCellGradOutputs<'_>,
    ) -> Result<()> {
        crate::recurrent::lstm_cell_backward(self, shape, inputs, outputs)
    }

    /// One GRU step (`docs/recurrent.md` §3): `r`, `z`, `n` and `h_t` from the step's two
    /// products and biases.
    fn gru_cell(
        &self,
        shape: crate::recurrent::CellShape,
        inputs: crate::recurrent::GruCellInputs<'_>,
        outputs: crate::recurrent::GruCellOutputs<'_>,
    ) -> Result<()> {
        crate::recurrent::gru_cell(self, shape, inputs, outputs)
    }

    /// The backward rule of [`Backend::gru_cell`] (`docs/recurrent.md` §3): the gradients
    /// of both products' pre-activations and the direct part of the gradient of `h_{t−1}`.
    fn gru_cell_backward(
        &self,
        shape: crate::recurrent::CellShape,
        inputs: crate::recurrent::GruCellGradInputs<'_>,
        outputs: crate::recurrent::GruCellGradOutputs<'_>,
    ) -> Result<()> {
        crate::recurrent::gru_cell_backward(self, shape, inputs, outputs)
    }

    // ----- training kernels (`crate::kernels`) -----------------------------------------
    //
    // Each default body is the reference definition (`crate::kernels`): a backend that
    // does not override a kernel computes exactly these bits.

    /// Normalisation statistics per group of a contiguous `[P, Q, R]` `x`
    /// (`docs/arithmetic.md` §5, steps 1–3): `mean = μ`, `corr = c` and `sq_sum = s2`,
    /// `Q` elements each.
    fn norm_stats(
        &self,
        spec: &NormSpec,
        x: &[f32],
        mean: &mut [f32],
        corr: &mut [f32],
        sq_sum: &mut [f32],
    ) -> Result<()> {
        spec.check_stats(x.len(), mean.len(), corr.len(), sq_sum.len())?;
        kernels::norm_stats(self.mode(), spec, x, mean, corr, sq_sum);
        Ok(())
    }

    /// Normalisation output `y = ((((x ⊖ μ) ⊖ c) ⊗ r) ⊗ w) ⊕ b` (`docs/arithmetic.md` §5,
    /// step 5), `weight` and `bias` optional.
    fn norm_forward(
        &self,
        spec: &NormSpec,
        x: &[f32],
        stats: &NormStats<'_>,
        weight: Option<&[f32]>,
        bias: Option<&[f32]>,
        out: &mut [f32],
    ) -> Result<()> {
        spec.check_forward(
            x.len(),
            stats,
            weight.map(<[f32]>::len),
            bias.map(<[f32]>::len),
            out.len(),
        )?;
        kernels::norm_forward(self.mode(), spec, x, stats, weight, bias, out);
        Ok(())
    }

    /// Normalisation backward (`docs/arithmetic.md` §5): the gradients asked for in
    /// `grads`; `stats_depend` when the statistics were computed from `x`. `x` may be
    /// empty when only `db` is asked for.
    #[allow(clippy::too_many_arguments)]
    fn norm_backward(
        &self,
        spec: &NormSpec,
        x: &[f32],
        g: &[f32],
        stats: &NormStats<'_>,
        weight: Option<&[f32]>,
        stats_depend: bool,
        grads: NormGrads<'_>,
    ) -> Result<()> {
        spec.check_backward(x.len(), g.len(), stats, weight.map(<[f32]>::len), &grads)?;
        kernels::norm_backward(self.mode(), spec, x, g, stats, weight, stats_depend, grads);
        Ok(())
    }

    /// 2-D max pooling of contiguous planes (`docs/conv.md` §2): the maxima and, per
    /// output, the flat index in its plane of the selected input (`usize::MAX` for a
    /// window without taps).
    fn max_pool2d(
        &self,
        spec: &Pool2dSpec,
        x: &[f32],
        out: &mut [f32],
        argmax: &mut [usize],
    ) -> Result<()> {
        spec.check_max(x.len(), out.len(), argmax.len())?;
        kernels::max_pool2d(self.mode(), spec, x, out, argmax);
        Ok(())
    }

    /// The backward rule of [`Backend::max_pool2d`]: `gx` (overwritten) from `+0`, each
    /// output's gradient added at its argmax in increasing output order.
    fn max_pool2d_backward(
        &self,
        spec: &Pool2dSpec,
        argmax: &[usize],
        g: &[f32],
        gx: &mut [f32],
    ) -> Result<()> {
        spec.check_max_backward(argmax.len(), g.len(), gx.len())?;
        kernels::max_pool2d_backward(self.mode(), spec, argmax, g, gx)
    }

    /// 2-D average pooling of contiguous planes (`docs/conv.md` §2).
    fn avg_pool2d(&self, spec: &AvgPool2dSpec, x: &[f32], out: &mut [f32]) -> Result<()> {
        spec.check("avg_pool2d", x.len(), out.len())?;
        kernels::avg_pool2d(self.mode(), spec, x, out);
        Ok(())
    }

    /// The backward rule of [`Backend::avg_pool2d`]; `gx` is overwritten.
    fn avg_pool2d_backward(&self, spec: &AvgPool2dSpec, g: &[f32], gx: &mut [f32]) -> Result<()> {
        spec.check("avg_pool2d_backward", gx.len(), g.len())?;
        kernels::avg_pool2d_backward(self.mode(), spec, g, gx);
        Ok(())
    }

    /// 2-D adaptive average pooling of contiguous planes (`docs/conv.md` §2).
    fn adaptive_avg_pool2d(
        &self,
        spec: &AdaptivePool2dSpec,
        x: &[f32],
        out: &mut [f32],
    ) -> Result<()> {
        spec.check("adaptive_avg_pool2d", x.len(), out.len())?;
        kernels::adaptive_avg_pool2d(self.mode(), spec, x, out);
        Ok(())
    }

    /// The backward rule of [`Backend::adaptive_avg_pool2d`]; `gx` is overwritten.
    fn adaptive_avg_pool2d_backward(
        &self,
        spec: &AdaptivePool2dSpec,
        g: &[f32],
        gx: &mut [f32],
    ) -> Result<()> {
        spec.check("adaptive_avg_pool2d_backward", gx.len(), g.len())?;
        kernels::adaptive_avg_pool2d_backward(self.mode(), spec, g, gx);
        Ok(())
    }

    /// im2col of one contiguous item `[C, H, W]` into `cols` `[C·KH·KW, OH·OW]`
    /// (`docs/conv.md` §1), `+0` in the padding; copies bits.
    fn im2col(&self, spec: &Col2imSpec, image: &[f32], cols: &mut [f32]) -> Result<()> {
        spec.check("im2col", image.len(), cols.len())?;
        kernels::im2col(spec, image, cols);
        Ok(())
    }

    /// col2im of one item (`docs/conv.md` §1): `image` (overwritten) from `+0`, each
    /// element adding its column gradients in increasing column order.
    fn col2im(&self, spec: &Col2imSpec, cols: &[f32], image: &mut [f32]) -> Result<()> {
        spec.check("col2im", image.len(), cols.len())?;
        kernels::col2im(self.mode(), spec, cols, image);
        Ok(())
    }

    /// The attention scores of `docs/arithmetic.md` §5 in place: `scores` holds the
    /// products `T` (`[rows, S]`) and receives `(T ⊗ scale)` with the mask (a layout
    /// broadcast to `[…, L, S]` over its buffer) and the causal `−∞`.
    fn attention_scores(
        &self,
        spec: &AttentionScoresSpec,
        scores: &mut [f32],
        mask: Option<(ScoreMask, &[f32], &Layout)>,
    ) -> Result<()> {
        spec.check(scores.len(), mask.map(|(_, m, l)| (m, l)))?;
        kernels::attention_scores(self.mode(), spec, scores, mask);
        Ok(())
    }

    /// The dropout mask of `docs/arithmetic.md` §5 for elements `start …` of the stream of
    /// `key`: `scale` where kept, `+0` elsewhere. `p` must be in `[0, 1]`.
    fn dropout_mask(
        &self,
        key: u64,
        p: f32,
        scale: f32,
        start: u64,
        out: &mut [f32],
    ) -> Result<()> {
        kernels::check_dropout(p)?;
        kernels::dropout_mask(key, p, scale, start, out);
        Ok(())
    }

    /// One fused SGD update of `param` in place ([`SgdSpec`]); `momentum_buffer` is
    /// empty without momentum.
    fn sgd_step(
        &self,
        spec: &SgdSpec,
        param: &mut [f32],
        grad: &[f32],
        momentum_buffer: &mut [f32],
    ) -> Result<()> {
        spec.check(param.len(), grad.len(), momentum_buffer.len())?;
        kernels::sgd_step(self.mode(), spec, param, grad, momentum_buffer);
        Ok(())
    }

    /// One fused Adam/AdamW update of `param` and its moments in place ([`AdamSpec`]);
    /// `max_exp_avg_sq` is empty without AMSGrad.
    fn adam_step(
        &self,
        spec: &AdamSpec,
        param: &mut [f32],
        grad: &[f32],
        exp_avg: &mut [f32],
        exp_avg_sq: &mut [f32],
        max_exp_avg_sq: &mut [f32],
    ) -> Result<()> {
        spec.check(
            param.len(),
            grad.len(),
            exp_avg.len(),
            exp_avg_sq.len(),
            max_exp_avg_sq.len(),
        )?;
        kernels::adam_step(
            self.mode(),
            spec,
            param,
            grad,
            exp_avg,
            exp_avg_sq,
            max_exp_avg_sq,
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallible_vectors_refuse_impossible_sizes_with_a_named_error() {
        // 2^62 × 8 bytes does not fit in isize::MAX.
        match try_vec_filled("t", 1usize << 62, 0u64) {
            Err(Error::Alloc { op, bytes, reason }) => {
                assert_eq!(op, "t");
                assert_eq!(bytes, usize::MAX);
                assert!(reason.contains("isize::MAX"), "{reason}");
            }
            other => panic!("accepted or wrong error: {:?}", other.map(|v| v.len())),
        }
        // 2^48 bytes fit in isize but in no address space of a 64-bit process: refused by
        // the allocator, not an abort.
        let e = try_vec_with_capacity::<f64>("t", 1usize << 45).unwrap_err();
        assert!(
            matches!(e, Error::Alloc { op: "t", bytes, .. } if bytes == 1 << 48),
            "{e:?}"
        );
        let e = try_collect("t", (0..1usize << 46).map(|i| i as u32)).unwrap_err();
        assert!(matches!(e, Error::Alloc { op: "t", .. }), "{e:?}");
        let mut v = alloc::vec![1u8];
        assert!(try_reserve("t", &mut v, usize::MAX).is_err());
        assert_eq!(v, [1]);
        // Ordinary sizes work.
        assert_eq!(try_vec_filled("t", 3, 7u16).unwrap(), [7, 7, 7]);
        assert_eq!(
            try_collect("t", (0..4).map(|i| i * 2)).unwrap(),
            [0, 2, 4, 6]
        );
        assert_eq!(try_zeroed_vec("t", 2).unwrap(), [0.0, 0.0]);
        assert!(matches!(
            try_zeroed_vec("t", MAX_ELEMENTS + 1),
            Err(Error::TooLarge { .. })
        ));
    }
}
