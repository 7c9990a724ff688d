//! [`Backend`]: the kernels as callers see them, each checking its arguments against
//! its buffers before the backend's `*_impl` method runs; implemented once, for every
//! [`BackendImpl`].

use super::*;

/// A compute backend as its callers see it: storage type, mode and kernels.
///
/// Implemented once, for every [`BackendImpl`] (a backend implements [`BackendImpl`];
/// this trait is sealed, so its kernels, the provided methods below, cannot be
/// overridden). Each kernel here checks its arguments against its buffers
/// (lengths, and every [`Layout`] with [`Layout::check_within`], in checked arithmetic,
/// once per call) and returns an error instead of reading or writing out of bounds; only
/// arguments that passed reach the backend's `*_impl` method, as [`Checked`] arguments.
/// The checks are those of [`crate::check`], the spec types' `check*` methods
/// ([`MatmulSpec::check`], [`crate::kernels`]) and [`crate::recurrent`]'s.
pub trait Backend: BackendImpl + sealed::Sealed {
    /// Gathers the elements of `src` under `layout` into `out` in row-major order.
    /// Copies bits exactly (no canonicalisation).
    fn copy_strided(
        &self,
        src: ViewOf<'_, Self>,
        layout: &Layout,
        out: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        check::copy_strided(src.len(), layout, out.len())?;
        self.copy_strided_impl(Checked::new(CopyStridedArgs {
            src: Self::shorten(src),
            layout,
            out: Self::shorten_mut(out),
        }))
    }

    /// The trace digest of the elements of `x` ([`crate::TraceHasher`]): what an operation
    /// trace records of a tensor (`docs/debugging.md`). Integer arithmetic only, so the
    /// same on every backend, path and thread count.
    fn digest(&self, x: ViewOf<'_, Self>) -> Result<u64> {
        self.digest_impl(Checked::new(DigestArgs {
            x: Self::shorten(x),
        }))
    }

    /// `out[i] = op(x[i])` over contiguous slices of equal length.
    fn unary(&self, op: UnaryOp, x: ViewOf<'_, Self>, out: ViewMutOf<'_, Self>) -> Result<()> {
        check::unary(x.len(), out.len())?;
        self.unary_impl(Checked::new(UnaryArgs {
            op,
            x: Self::shorten(x),
            out: Self::shorten_mut(out),
        }))
    }

    /// The backward rule of `op`: `out[i] = g[i] · op'(…)`, given the forward input `x`
    /// and output `y` (both contiguous, same length as `g`).
    fn unary_backward(
        &self,
        op: UnaryOp,
        x: ViewOf<'_, Self>,
        y: ViewOf<'_, Self>,
        g: ViewOf<'_, Self>,
        out: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        check::unary_backward(x.len(), y.len(), g.len(), out.len())?;
        self.unary_backward_impl(Checked::new(UnaryBackwardArgs {
            op,
            x: Self::shorten(x),
            y: Self::shorten(y),
            g: Self::shorten(g),
            out: Self::shorten_mut(out),
        }))
    }

    /// `out = op(a, b)` where `la` and `lb` are layouts already broadcast to the output
    /// shape (stride 0 along broadcast dimensions); `out` is contiguous.
    fn binary(
        &self,
        op: BinaryOp,
        a: ViewOf<'_, Self>,
        la: &Layout,
        b: ViewOf<'_, Self>,
        lb: &Layout,
        out: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        check::binary(op.name(), a.len(), la, b.len(), lb, out.len())?;
        self.binary_impl(Checked::new(BinaryArgs {
            op,
            a: Self::shorten(a),
            la,
            b: Self::shorten(b),
            lb,
            out: Self::shorten_mut(out),
        }))
    }

    /// `out = cond != 0 ? a : b` with all three layouts broadcast to the output shape.
    #[allow(clippy::too_many_arguments)]
    fn select(
        &self,
        cond: ViewOf<'_, Self>,
        lc: &Layout,
        a: ViewOf<'_, Self>,
        la: &Layout,
        b: ViewOf<'_, Self>,
        lb: &Layout,
        out: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        check::select(cond.len(), lc, a.len(), la, b.len(), lb, out.len())?;
        self.select_impl(Checked::new(SelectArgs {
            cond: Self::shorten(cond),
            lc,
            a: Self::shorten(a),
            la,
            b: Self::shorten(b),
            lb,
            out: Self::shorten_mut(out),
        }))
    }

    /// Sums `x` under `layout` over the dimensions flagged in `reduce`, writing the
    /// remaining dimensions row-major into `out`. Each output accumulates in f64, its
    /// reduced elements in increasing row-major order of their index, from +0, rounded
    /// once to f32.
    fn sum(
        &self,
        x: ViewOf<'_, Self>,
        layout: &Layout,
        reduce: &[bool],
        out: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        check::sum(x.len(), layout, reduce, out.len())?;
        self.sum_impl(Checked::new(SumArgs {
            x: Self::shorten(x),
            layout,
            reduce,
            out: Self::shorten_mut(out),
        }))
    }

    /// The batched matrix product of [`MatmulSpec`]: each output is one f32 accumulator
    /// starting at +0, `k` increasing; exact mode rounds the product and the sum
    /// separately, fast mode may fuse them.
    fn matmul(
        &self,
        spec: &MatmulSpec,
        a: ViewOf<'_, Self>,
        b: ViewOf<'_, Self>,
        out: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        spec.check(a.len(), b.len(), out.len())?;
        self.matmul_impl(Checked::new(MatmulArgs {
            spec,
            a: Self::shorten(a),
            b: Self::shorten(b),
            out: Self::shorten_mut(out),
        }))
    }

    /// Adds to `out` the products of [`MatmulSpec`] over consecutive segments of `seg`
    /// steps of `k`: `out ← out + P₀ + P₁ + …` in segment order, each `Pₛ` the sum of
    /// steps `s·seg .. (s+1)·seg` as [`Backend::matmul`] forms it (one accumulator from
    /// +0, `k` increasing), then NaN canonicalised in exact mode. With the items of a
    /// batch laid along `k`, this is the item-ordered sum of per-item products (a
    /// convolution's weight gradient). `seg` must divide `k` and be positive.
    fn matmul_acc(
        &self,
        spec: &MatmulSpec,
        seg: usize,
        a: ViewOf<'_, Self>,
        b: ViewOf<'_, Self>,
        out: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        spec.check(a.len(), b.len(), out.len())?;
        if seg == 0 || !spec.k.is_multiple_of(seg) {
            return Err(Error::invalid(
                "matmul_acc",
                "seg",
                alloc::format!(
                    "the segment length {seg} must be positive and divide k = {}",
                    spec.k
                ),
            ));
        }
        self.matmul_acc_impl(Checked::new(MatmulAccArgs {
            spec,
            seg,
            a: Self::shorten(a),
            b: Self::shorten(b),
            out: Self::shorten_mut(out),
        }))
    }

    /// Softmax (or log-softmax when `log`) of each row of a contiguous `rows × cols` `x`.
    fn softmax(
        &self,
        x: ViewOf<'_, Self>,
        rows: usize,
        cols: usize,
        log: bool,
        out: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        check::softmax("softmax", x.len(), rows, cols, out.len())?;
        self.softmax_impl(Checked::new(SoftmaxArgs {
            x: Self::shorten(x),
            rows,
            cols,
            log,
            out: Self::shorten_mut(out),
        }))
    }

    /// The backward rule of [`Backend::softmax`] given its output `y` and the incoming
    /// gradient `g` (both contiguous `rows × cols`).
    #[allow(clippy::too_many_arguments)]
    fn softmax_backward(
        &self,
        y: ViewOf<'_, Self>,
        g: ViewOf<'_, Self>,
        rows: usize,
        cols: usize,
        log: bool,
        out: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        check::softmax_backward(y.len(), g.len(), rows, cols, out.len())?;
        self.softmax_backward_impl(Checked::new(SoftmaxBackwardArgs {
            y: Self::shorten(y),
            g: Self::shorten(g),
            rows,
            cols,
            log,
            out: Self::shorten_mut(out),
        }))
    }

    /// One LSTM step (`docs/recurrent.md` §2): gate sums, activations, `c_t` and `h_t`
    /// from the step's two products and biases.
    fn lstm_cell<'a>(
        &self,
        shape: CellShape,
        inputs: LstmCellInputs<'a, Self::Views>,
        outputs: LstmCellOutputs<'a, Self::Views>,
    ) -> Result<()> {
        recurrent::check_lstm_cell(shape, &inputs, &outputs)?;
        self.lstm_cell_impl(Checked::new(LstmCellArgs {
            shape,
            inputs,
            outputs,
        }))
    }

    /// The backward rule of [`Backend::lstm_cell`] (`docs/recurrent.md` §2): the gradient
    /// of the gate pre-activations and of `c_{t−1}`.
    fn lstm_cell_backward<'a>(
        &self,
        shape: CellShape,
        inputs: LstmCellGradInputs<'a, Self::Views>,
        outputs: LstmCellGradOutputs<'a, Self::Views>,
    ) -> Result<()> {
        recurrent::check_lstm_cell_backward(shape, &inputs, &outputs)?;
        self.lstm_cell_backward_impl(Checked::new(LstmCellBackwardArgs {
            shape,
            inputs,
            outputs,
        }))
    }

    /// One GRU step (`docs/recurrent.md` §3): `r`, `z`, `n` and `h_t` from the step's two
    /// products and biases.
    fn gru_cell<'a>(
        &self,
        shape: CellShape,
        inputs: GruCellInputs<'a, Self::Views>,
        outputs: GruCellOutputs<'a, Self::Views>,
    ) -> Result<()> {
        recurrent::check_gru_cell(shape, &inputs, &outputs)?;
        self.gru_cell_impl(Checked::new(GruCellArgs {
            shape,
            inputs,
            outputs,
        }))
    }

    /// The backward rule of [`Backend::gru_cell`] (`docs/recurrent.md` §3): the gradients
    /// of both products' pre-activations and the direct part of the gradient of `h_{t−1}`.
    fn gru_cell_backward<'a>(
        &self,
        shape: CellShape,
        inputs: GruCellGradInputs<'a, Self::Views>,
        outputs: GruCellGradOutputs<'a, Self::Views>,
    ) -> Result<()> {
        recurrent::check_gru_cell_backward(shape, &inputs, &outputs)?;
        self.gru_cell_backward_impl(Checked::new(GruCellBackwardArgs {
            shape,
            inputs,
            outputs,
        }))
    }

    /// Normalisation statistics per group of a contiguous `[P, Q, R]` `x`
    /// (`docs/arithmetic.md` §5, steps 1–3): `mean = μ`, `corr = c` and `sq_sum = s2`,
    /// `Q` elements each.
    fn norm_stats(
        &self,
        spec: &NormSpec,
        x: ViewOf<'_, Self>,
        mean: ViewMutOf<'_, Self>,
        corr: ViewMutOf<'_, Self>,
        sq_sum: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        spec.check_stats(x.len(), mean.len(), corr.len(), sq_sum.len())?;
        self.norm_stats_impl(Checked::new(NormStatsArgs {
            spec,
            x: Self::shorten(x),
            mean: Self::shorten_mut(mean),
            corr: Self::shorten_mut(corr),
            sq_sum: Self::shorten_mut(sq_sum),
        }))
    }

    /// Normalisation output `y = ((((x ⊖ μ) ⊖ c) ⊗ r) ⊗ w) ⊕ b` (`docs/arithmetic.md` §5,
    /// step 5), `weight` and `bias` optional.
    fn norm_forward(
        &self,
        spec: &NormSpec,
        x: ViewOf<'_, Self>,
        stats: &NormStats<'_, Self::Views>,
        weight: Option<ViewOf<'_, Self>>,
        bias: Option<ViewOf<'_, Self>>,
        out: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        spec.check_forward(
            x.len(),
            stats,
            weight.map(|w| w.len()),
            bias.map(|w| w.len()),
            out.len(),
        )?;
        self.norm_forward_impl(Checked::new(NormForwardArgs {
            spec,
            x: Self::shorten(x),
            stats: &stats.shorten(),
            weight: weight.map(Self::shorten),
            bias: bias.map(Self::shorten),
            out: Self::shorten_mut(out),
        }))
    }

    /// Normalisation backward (`docs/arithmetic.md` §5): the gradients asked for in
    /// `grads`; `stats_depend` when the statistics were computed from `x`. `x` may be
    /// empty when only `db` is asked for.
    #[allow(clippy::too_many_arguments)]
    fn norm_backward(
        &self,
        spec: &NormSpec,
        x: ViewOf<'_, Self>,
        g: ViewOf<'_, Self>,
        stats: &NormStats<'_, Self::Views>,
        weight: Option<ViewOf<'_, Self>>,
        stats_depend: bool,
        grads: NormGrads<'_, Self::Views>,
    ) -> Result<()> {
        spec.check_backward(x.len(), g.len(), stats, weight.map(|w| w.len()), &grads)?;
        self.norm_backward_impl(Checked::new(NormBackwardArgs {
            spec,
            x: Self::shorten(x),
            g: Self::shorten(g),
            stats: &stats.shorten(),
            weight: weight.map(Self::shorten),
            stats_depend,
            grads: grads.shorten(),
        }))
    }

    /// 2-D max pooling of contiguous planes (`docs/conv.md` §2): the maxima and, per
    /// output, the flat index in its plane of the selected input (`usize::MAX` for a
    /// window without taps).
    fn max_pool2d(
        &self,
        spec: &Pool2dSpec,
        x: ViewOf<'_, Self>,
        out: ViewMutOf<'_, Self>,
        argmax: &mut [usize],
    ) -> Result<()> {
        spec.check_max(x.len(), out.len(), argmax.len())?;
        self.max_pool2d_impl(Checked::new(MaxPool2dArgs {
            spec,
            x: Self::shorten(x),
            out: Self::shorten_mut(out),
            argmax,
        }))
    }

    /// The backward rule of [`Backend::max_pool2d`]: `gx` (overwritten) from `+0`, each
    /// output's gradient added at its argmax in increasing output order.
    fn max_pool2d_backward(
        &self,
        spec: &Pool2dSpec,
        argmax: &[usize],
        g: ViewOf<'_, Self>,
        gx: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        spec.check_max_backward(argmax, g.len(), gx.len())?;
        self.max_pool2d_backward_impl(Checked::new(MaxPool2dBackwardArgs {
            spec,
            argmax,
            g: Self::shorten(g),
            gx: Self::shorten_mut(gx),
        }))
    }

    /// 2-D average pooling of contiguous planes (`docs/conv.md` §2).
    fn avg_pool2d(
        &self,
        spec: &AvgPool2dSpec,
        x: ViewOf<'_, Self>,
        out: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        spec.check("avg_pool2d", x.len(), out.len())?;
        self.avg_pool2d_impl(Checked::new(AvgPool2dArgs {
            spec,
            x: Self::shorten(x),
            out: Self::shorten_mut(out),
        }))
    }

    /// The backward rule of [`Backend::avg_pool2d`]; `gx` is overwritten.
    fn avg_pool2d_backward(
        &self,
        spec: &AvgPool2dSpec,
        g: ViewOf<'_, Self>,
        gx: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        spec.check("avg_pool2d_backward", gx.len(), g.len())?;
        self.avg_pool2d_backward_impl(Checked::new(AvgPool2dBackwardArgs {
            spec,
            g: Self::shorten(g),
            gx: Self::shorten_mut(gx),
        }))
    }

    /// 2-D adaptive average pooling of contiguous planes (`docs/conv.md` §2).
    fn adaptive_avg_pool2d(
        &self,
        spec: &AdaptivePool2dSpec,
        x: ViewOf<'_, Self>,
        out: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        spec.check("adaptive_avg_pool2d", x.len(), out.len())?;
        self.adaptive_avg_pool2d_impl(Checked::new(AdaptiveAvgPool2dArgs {
            spec,
            x: Self::shorten(x),
            out: Self::shorten_mut(out),
        }))
    }

    /// The backward rule of [`Backend::adaptive_avg_pool2d`]; `gx` is overwritten.
    fn adaptive_avg_pool2d_backward(
        &self,
        spec: &AdaptivePool2dSpec,
        g: ViewOf<'_, Self>,
        gx: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        spec.check("adaptive_avg_pool2d_backward", gx.len(), g.len())?;
        self.adaptive_avg_pool2d_backward_impl(Checked::new(AdaptiveAvgPool2dBackwardArgs {
            spec,
            g: Self::shorten(g),
            gx: Self::shorten_mut(gx),
        }))
    }

    /// im2col of one contiguous item `[C, H, W]` into `cols` `[C·KH·KW, OH·OW]`
    /// (`docs/conv.md` §1), `+0` in the padding; copies bits.
    fn im2col(
        &self,
        spec: &Col2imSpec,
        image: ViewOf<'_, Self>,
        cols: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        spec.check("im2col", image.len(), cols.len())?;
        self.im2col_impl(Checked::new(Im2colArgs {
            spec,
            image: Self::shorten(image),
            cols: Self::shorten_mut(cols),
        }))
    }

    /// col2im of one item (`docs/conv.md` §1): `image` (overwritten) from `+0`, each
    /// element adding its column gradients in increasing column order.
    fn col2im(
        &self,
        spec: &Col2imSpec,
        cols: ViewOf<'_, Self>,
        image: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        spec.check("col2im", image.len(), cols.len())?;
        self.col2im_impl(Checked::new(Col2imArgs {
            spec,
            cols: Self::shorten(cols),
            image: Self::shorten_mut(image),
        }))
    }

    /// The depthwise convolution of one contiguous item `x` `[C, H, W]` (one filter per
    /// channel: `groups = C = O`) with `w` `[C, KH·KW]` into `out` `[C, OH·OW]`; the bits
    /// of [`Backend::im2col`] followed by the per-channel [`Backend::matmul`] of the
    /// filter row and the channel's column rows (`docs/conv.md` §1), which is also the
    /// default implementation.
    fn depthwise_conv(
        &self,
        spec: &Col2imSpec,
        x: ViewOf<'_, Self>,
        w: ViewOf<'_, Self>,
        out: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        spec.check_depthwise("depthwise_conv", x.len(), w.len(), out.len())?;
        self.depthwise_conv_impl(Checked::new(DepthwiseArgs {
            spec,
            x: Self::shorten(x),
            w: Self::shorten(w),
            out: Self::shorten_mut(out),
        }))
    }

    /// The input gradient of [`Backend::depthwise_conv`] for one item: `gx` `[C, H, W]`
    /// (overwritten) from `g` `[C, OH·OW]` and `w` `[C, KH·KW]`; the bits of the
    /// per-channel [`Backend::matmul`] `w_cᵀ · g_c` followed by [`Backend::col2im`].
    fn depthwise_grad_input(
        &self,
        spec: &Col2imSpec,
        g: ViewOf<'_, Self>,
        w: ViewOf<'_, Self>,
        gx: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        spec.check_depthwise("depthwise_grad_input", gx.len(), w.len(), g.len())?;
        self.depthwise_grad_input_impl(Checked::new(DepthwiseGradInputArgs {
            spec,
            g: Self::shorten(g),
            w: Self::shorten(w),
            gx: Self::shorten_mut(gx),
        }))
    }

    /// Adds one item's weight gradient of [`Backend::depthwise_conv`] into `gw`
    /// `[C, KH·KW]`: per channel and tap, the sum over the output positions of column ×
    /// `g` from +0 in increasing position, added to `gw` (NaN canonicalised in exact
    /// mode); the bits of [`Backend::im2col`] and one [`Backend::matmul_acc`] segment per
    /// item. With no output positions nothing is added.
    fn depthwise_grad_weight(
        &self,
        spec: &Col2imSpec,
        g: ViewOf<'_, Self>,
        x: ViewOf<'_, Self>,
        gw: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        spec.check_depthwise("depthwise_grad_weight", x.len(), gw.len(), g.len())?;
        self.depthwise_grad_weight_impl(Checked::new(DepthwiseGradWeightArgs {
            spec,
            g: Self::shorten(g),
            x: Self::shorten(x),
            gw: Self::shorten_mut(gw),
        }))
    }

    /// The attention scores of `docs/arithmetic.md` §5 in place: `scores` holds the
    /// products `T` (`[rows, S]`) and receives `(T ⊗ scale)` with the mask (a layout
    /// broadcast to `[…, L, S]` over its buffer) and the causal `−∞`.
    fn attention_scores(
        &self,
        spec: &AttentionScoresSpec,
        scores: ViewMutOf<'_, Self>,
        mask: Option<(ScoreMask, ViewOf<'_, Self>, &Layout)>,
    ) -> Result<()> {
        spec.check(scores.len(), mask.map(|(_, m, l)| (m.len(), l)))?;
        self.attention_scores_impl(Checked::new(AttentionScoresArgs {
            spec,
            scores: Self::shorten_mut(scores),
            mask: mask.map(|(k, m, l)| (k, Self::shorten(m), l)),
        }))
    }

    /// The dropout mask of `docs/arithmetic.md` §5 for elements `start …` of the stream of
    /// `key`: `scale` where kept, `+0` elsewhere. `p` must be in `[0, 1]`.
    fn dropout_mask(
        &self,
        key: u64,
        p: f32,
        scale: f32,
        start: u64,
        out: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        kernels::check_dropout(p)?;
        self.dropout_mask_impl(Checked::new(DropoutMaskArgs {
            key,
            p,
            scale,
            start,
            out: Self::shorten_mut(out),
        }))
    }

    /// One fused SGD update of `param` in place ([`SgdSpec`]); `momentum_buffer` is
    /// empty without momentum.
    fn sgd_step(
        &self,
        spec: &SgdSpec,
        param: ViewMutOf<'_, Self>,
        grad: ViewOf<'_, Self>,
        momentum_buffer: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        spec.check(param.len(), grad.len(), momentum_buffer.len())?;
        self.sgd_step_impl(Checked::new(SgdStepArgs {
            spec,
            param: Self::shorten_mut(param),
            grad: Self::shorten(grad),
            momentum_buffer: Self::shorten_mut(momentum_buffer),
        }))
    }

    /// One fused Adam/AdamW update of `param` and its moments in place ([`AdamSpec`]);
    /// `max_exp_avg_sq` is empty without AMSGrad.
    fn adam_step(
        &self,
        spec: &AdamSpec,
        param: ViewMutOf<'_, Self>,
        grad: ViewOf<'_, Self>,
        exp_avg: ViewMutOf<'_, Self>,
        exp_avg_sq: ViewMutOf<'_, Self>,
        max_exp_avg_sq: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        spec.check(
            param.len(),
            grad.len(),
            exp_avg.len(),
            exp_avg_sq.len(),
            max_exp_avg_sq.len(),
        )?;
        self.adam_step_impl(Checked::new(AdamStepArgs {
            spec,
            param: Self::shorten_mut(param),
            grad: Self::shorten(grad),
            exp_avg: Self::shorten_mut(exp_avg),
            exp_avg_sq: Self::shorten_mut(exp_avg_sq),
            max_exp_avg_sq: Self::shorten_mut(max_exp_avg_sq),
        }))
    }
}

/// The one implementation of [`Backend`]: the storage and the backend's identity; the
/// kernels are the trait's own (checked) bodies.
impl<B: BackendImpl> Backend for B {}
