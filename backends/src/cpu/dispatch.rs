//! The implementation of `BackendImpl` for the CPU backends: each kernel's dispatch to
//! its ISA path (the arguments arrive checked), and the strided element-wise driver.

use super::*;

/// Runs one broadcast binary row on `isa` (binary ops form no FMA, so both modes share it).
///
/// # Safety
/// `isa.is_supported(M::MODE)` must hold on this CPU.
#[allow(clippy::too_many_arguments)]
unsafe fn binary_row<M: ModeSpec>(
    isa: Isa,
    op: BinaryOp,
    a: &[f32],
    ia: usize,
    sa: usize,
    b: &[f32],
    ib: usize,
    sb: usize,
    out: &mut [f32],
) {
    // SAFETY: the caller guarantees `isa.is_supported(M::MODE)`: the features of the
    // chosen instantiation (avx512f; avx2 + fma; SSE2 only on the 128-bit path, as binary
    // rows form no FMA; neon).
    unsafe {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => k_avx512::binary_row::<M>(op, a, ia, sa, b, ib, sb, out),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => k_avx2::binary_row::<M>(op, a, ia, sa, b, ib, sb, out),
            #[cfg(target_arch = "x86_64")]
            Isa::V128 => k_v128::binary_row::<M>(op, a, ia, sa, b, ib, sb, out),
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => k_neon::binary_row::<M>(op, a, ia, sa, b, ib, sb, out),
            _ => k_scalar::binary_row::<M>(op, a, ia, sa, b, ib, sb, out),
        }
    }
}

/// Merges adjacent dimensions that are contiguous with each other in every layout, so the
/// innermost loop is as long as possible. Returns the merged shape and strides.
pub(super) fn coalesce<const N: usize>(layouts: [&Layout; N]) -> (Vec<usize>, [Vec<usize>; N]) {
    let shape = &layouts[0].shape;
    let mut dims: Vec<usize> = Vec::new();
    let mut strides: [Vec<usize>; N] = core::array::from_fn(|_| Vec::new());
    for d in 0..shape.rank() {
        if shape[d] == 1 {
            continue;
        }
        let mergeable = !dims.is_empty()
            && (0..N).all(|i| {
                let last = *strides[i].last().unwrap();
                last == layouts[i].strides[d] * shape[d]
            });
        if mergeable {
            let n = dims.len() - 1;
            dims[n] *= shape[d];
            for (i, s) in strides.iter_mut().enumerate() {
                let l = s.len() - 1;
                s[l] = layouts[i].strides[d];
            }
        } else {
            dims.push(shape[d]);
            for (i, s) in strides.iter_mut().enumerate() {
                s.push(layouts[i].strides[d]);
            }
        }
    }
    if dims.is_empty() {
        dims.push(1);
        for s in strides.iter_mut() {
            s.push(0);
        }
    }
    (dims, strides)
}

impl<M: CpuMode> BackendImpl for CpuBackend<M> {
    type Storage = CpuStorage;
    exactgrad_core::host_views!();

    fn name(&self) -> String {
        alloc::format!("{}/{}/{}t", M::MODE, self.isa, self.ctx.threads)
    }

    fn mode(&self) -> ComputeMode {
        M::MODE
    }

    fn zeros(&self, len: usize) -> Result<CpuStorage> {
        buffers::buffer(&self.ctx.buffers, "zeros", len, true)
    }

    fn uninit(&self, len: usize) -> Result<CpuStorage> {
        buffers::buffer(&self.ctx.buffers, "uninit", len, false)
    }

    fn storage_from_vec(&self, data: Vec<f32>) -> Result<CpuStorage> {
        buffers::adopt(&self.ctx.buffers, data)
    }

    fn memory(&self) -> Option<&dyn exactgrad_core::MemoryPool> {
        Some(&*self.ctx.buffers)
    }

    fn copy_strided_impl(&self, args: Checked<CopyStridedArgs<'_>>) -> Result<()> {
        let CopyStridedArgs { src, layout, out } = args.into_inner();
        rows::copy_strided::<M>(self.isa, &self.ctx, src, layout, out);
        Ok(())
    }

    fn digest_impl(&self, args: Checked<DigestArgs<'_>>) -> Result<u64> {
        let DigestArgs { x } = args.into_inner();
        Ok(digest::digest(self.isa, &self.ctx, x))
    }

    fn unary_impl(&self, args: Checked<UnaryArgs<'_>>) -> Result<()> {
        let UnaryArgs { op, x, out } = args.into_inner();
        let isa = self.isa;
        self.ctx.for_each_chunk(out, ELEMENTWISE_CHUNK, |i, o| {
            let s = i * ELEMENTWISE_CHUNK;
            // SAFETY: `isa` is the backend's, supported in this mode on this CPU (the
            // invariant of `CpuBackend::isa`).
            unsafe { M::unary(isa, op, &x[s..s + o.len()], o) };
        });
        Ok(())
    }

    fn unary_backward_impl(&self, args: Checked<UnaryBackwardArgs<'_>>) -> Result<()> {
        let UnaryBackwardArgs { op, x, y, g, out } = args.into_inner();
        let isa = self.isa;
        self.ctx.for_each_chunk(out, ELEMENTWISE_CHUNK, |i, o| {
            let s = i * ELEMENTWISE_CHUNK;
            let e = s + o.len();
            // SAFETY: `isa` is the backend's, supported in this mode on this CPU (the
            // invariant of `CpuBackend::isa`).
            unsafe { M::unary_backward(isa, op, &x[s..e], &y[s..e], &g[s..e], o) };
        });
        Ok(())
    }

    fn binary_impl(&self, args: Checked<BinaryArgs<'_>>) -> Result<()> {
        let BinaryArgs {
            op,
            a,
            la,
            b,
            lb,
            out,
        } = args.into_inner();
        if out.is_empty() {
            return Ok(());
        }
        let (dims, [sa, sb]) = coalesce([la, lb]);
        let inner = *dims.last().unwrap();
        let (isa_, sa_in, sb_in) = (self.isa, *sa.last().unwrap(), *sb.last().unwrap());
        // Row offsets of both operands, in row-major order of the outer dimensions.
        let outer = Layout {
            shape: dims[..dims.len() - 1].to_vec().into(),
            strides: sa[..sa.len() - 1].to_vec(),
            offset: la.offset,
        };
        let outer_b = Layout {
            shape: outer.shape.clone(),
            strides: sb[..sb.len() - 1].to_vec(),
            offset: lb.offset,
        };
        let mut rows = Vec::new();
        rows.try_reserve_exact(outer.numel())
            .map_err(|_| exactgrad_core::Error::Alloc {
                op: op.name(),
                bytes: outer.numel().saturating_mul(16),
                reason: "the allocator refused the row table",
            })?;
        walk([&outer, &outer_b], |[ia, ib]| rows.push((ia, ib)));
        // Chunks of whole rows, or of ELEMENTWISE_CHUNK elements when a row is longer (a
        // same-shape operation coalesces into one row, which would otherwise be one task).
        let chunk = if inner >= ELEMENTWISE_CHUNK {
            ELEMENTWISE_CHUNK
        } else {
            ELEMENTWISE_CHUNK.div_ceil(inner) * inner
        };
        self.ctx.for_each_chunk(out, chunk, |ci, o| {
            for_each_piece(o, ci * chunk, inner, |r, j, piece| {
                let (ia, ib) = rows[r];
                let (ia, ib) = (ia + j * sa_in, ib + j * sb_in);
                // SAFETY: `isa_` is the backend's, supported in this mode on this CPU
                // (the invariant of `CpuBackend::isa`).
                unsafe { binary_row::<M>(isa_, op, a, ia, sa_in, b, ib, sb_in, piece) };
            });
        });
        Ok(())
    }

    fn select_impl(&self, args: Checked<SelectArgs<'_>>) -> Result<()> {
        let SelectArgs {
            cond,
            lc,
            a,
            la,
            b,
            lb,
            out,
        } = args.into_inner();
        // SAFETY: `self.isa` is supported in this mode on this CPU (the invariant of
        // `CpuBackend::isa`); the arguments are `Checked`: core's check keeps every layout inside
        // its buffer.
        unsafe { rows::select::<M>(self.isa, &self.ctx, cond, lc, a, la, b, lb, out) };
        Ok(())
    }

    fn sum_impl(&self, args: Checked<SumArgs<'_>>) -> Result<()> {
        let SumArgs {
            x,
            layout,
            reduce,
            out,
        } = args.into_inner();
        // SAFETY: `self.isa` is supported in this mode on this CPU (the invariant of
        // `CpuBackend::isa`); the arguments are `Checked`: core's check keeps the layout inside
        // `x`.
        unsafe { rows::sum::<M>(self.isa, &self.ctx, x, layout, reduce, out) };
        Ok(())
    }

    fn matmul_impl(&self, args: Checked<MatmulArgs<'_>>) -> Result<()> {
        let MatmulArgs { spec, a, b, out } = args.into_inner();
        self.ctx.count_product(spec);
        // SAFETY: `self.isa` is supported in this mode on this CPU (the invariant of
        // `CpuBackend::isa`); the arguments are `Checked`: core's check keeps every operand inside
        // its buffer.
        unsafe { gemm::matmul::<M>(self.isa, &self.ctx, spec, 0, a, b, out) }
    }

    fn matmul_acc_impl(&self, args: Checked<MatmulAccArgs<'_>>) -> Result<()> {
        let MatmulAccArgs {
            spec,
            seg,
            a,
            b,
            out,
        } = args.into_inner();
        self.ctx.count_product(spec);
        // SAFETY: as for `matmul_impl`; core's check also keeps `seg` positive and a
        // divisor of `k`.
        unsafe { gemm::matmul::<M>(self.isa, &self.ctx, spec, seg, a, b, out) }
    }

    fn softmax_impl(&self, args: Checked<SoftmaxArgs<'_>>) -> Result<()> {
        let SoftmaxArgs {
            x,
            rows,
            cols,
            log,
            out,
        } = args.into_inner();
        // SAFETY: `self.isa` is supported in this mode on this CPU (the invariant of
        // `CpuBackend::isa`); the arguments are `Checked`: core's check sizes both buffers `rows ×
        // cols`.
        unsafe { rows::softmax::<M>(self.isa, &self.ctx, x, rows, cols, log, out) };
        Ok(())
    }

    fn softmax_backward_impl(&self, args: Checked<SoftmaxBackwardArgs<'_>>) -> Result<()> {
        let SoftmaxBackwardArgs {
            y,
            g,
            rows,
            cols,
            log,
            out,
        } = args.into_inner();
        // SAFETY: `self.isa` is supported in this mode on this CPU (the invariant of
        // `CpuBackend::isa`); the arguments are `Checked`: core's check sizes every buffer `rows ×
        // cols`.
        unsafe { rows::softmax_backward::<M>(self.isa, &self.ctx, y, g, rows, cols, log, out) };
        Ok(())
    }

    // ----- recurrent cells (`recurrent.rs`) --------------------------------------------

    fn lstm_cell_impl(&self, args: Checked<LstmCellArgs<'_>>) -> Result<()> {
        let LstmCellArgs {
            shape,
            inputs,
            outputs,
        } = args.into_inner();
        recurrent::lstm_cell::<M>(self.isa, &self.ctx, shape, inputs, outputs);
        Ok(())
    }

    fn lstm_cell_backward_impl(&self, args: Checked<LstmCellBackwardArgs<'_>>) -> Result<()> {
        let LstmCellBackwardArgs {
            shape,
            inputs,
            outputs,
        } = args.into_inner();
        recurrent::lstm_cell_backward::<M>(self.isa, &self.ctx, shape, inputs, outputs);
        Ok(())
    }

    fn gru_cell_impl(&self, args: Checked<GruCellArgs<'_>>) -> Result<()> {
        let GruCellArgs {
            shape,
            inputs,
            outputs,
        } = args.into_inner();
        recurrent::gru_cell::<M>(self.isa, &self.ctx, shape, inputs, outputs);
        Ok(())
    }

    fn gru_cell_backward_impl(&self, args: Checked<GruCellBackwardArgs<'_>>) -> Result<()> {
        let GruCellBackwardArgs {
            shape,
            inputs,
            outputs,
        } = args.into_inner();
        recurrent::gru_cell_backward::<M>(self.isa, &self.ctx, shape, inputs, outputs);
        Ok(())
    }

    fn norm_stats_impl(&self, args: Checked<NormStatsArgs<'_>>) -> Result<()> {
        let NormStatsArgs {
            spec,
            x,
            mean,
            corr,
            sq_sum,
        } = args.into_inner();
        train::norm_stats(self.isa, &self.ctx, M::MODE, spec, x, mean, corr, sq_sum);
        Ok(())
    }

    fn norm_forward_impl(&self, args: Checked<NormForwardArgs<'_>>) -> Result<()> {
        let NormForwardArgs {
            spec,
            x,
            stats,
            weight,
            bias,
            out,
        } = args.into_inner();
        train::norm_forward(
            self.isa,
            &self.ctx,
            M::MODE,
            spec,
            x,
            stats,
            weight,
            bias,
            out,
        );
        Ok(())
    }

    fn norm_backward_impl(&self, args: Checked<NormBackwardArgs<'_>>) -> Result<()> {
        let NormBackwardArgs {
            spec,
            x,
            g,
            stats,
            weight,
            stats_depend,
            grads,
        } = args.into_inner();
        train::norm_backward(
            self.isa,
            &self.ctx,
            M::MODE,
            spec,
            x,
            g,
            stats,
            weight,
            stats_depend,
            grads,
        );
        Ok(())
    }

    fn max_pool2d_impl(&self, args: Checked<MaxPool2dArgs<'_>>) -> Result<()> {
        let MaxPool2dArgs {
            spec,
            x,
            out,
            argmax,
        } = args.into_inner();
        train::max_pool2d(self.isa, &self.ctx, M::MODE, spec, x, out, argmax)
    }

    fn max_pool2d_backward_impl(&self, args: Checked<MaxPool2dBackwardArgs<'_>>) -> Result<()> {
        let MaxPool2dBackwardArgs {
            spec,
            argmax,
            g,
            gx,
        } = args.into_inner();
        train::max_pool2d_backward(&self.ctx, M::MODE, spec, argmax, g, gx)
    }

    fn avg_pool2d_impl(&self, args: Checked<AvgPool2dArgs<'_>>) -> Result<()> {
        let AvgPool2dArgs { spec, x, out } = args.into_inner();
        train::avg_pool2d(self.isa, &self.ctx, M::MODE, spec, x, out)
    }

    fn avg_pool2d_backward_impl(&self, args: Checked<AvgPool2dBackwardArgs<'_>>) -> Result<()> {
        let AvgPool2dBackwardArgs { spec, g, gx } = args.into_inner();
        train::avg_pool2d_backward(self.isa, &self.ctx, M::MODE, spec, g, gx)
    }

    fn adaptive_avg_pool2d_impl(&self, args: Checked<AdaptiveAvgPool2dArgs<'_>>) -> Result<()> {
        let AdaptiveAvgPool2dArgs { spec, x, out } = args.into_inner();
        train::adaptive_avg_pool2d(self.isa, &self.ctx, M::MODE, spec, x, out)
    }

    fn adaptive_avg_pool2d_backward_impl(
        &self,
        args: Checked<AdaptiveAvgPool2dBackwardArgs<'_>>,
    ) -> Result<()> {
        let AdaptiveAvgPool2dBackwardArgs { spec, g, gx } = args.into_inner();
        train::adaptive_avg_pool2d_backward(self.isa, &self.ctx, M::MODE, spec, g, gx)
    }

    fn im2col_impl(&self, args: Checked<Im2colArgs<'_>>) -> Result<()> {
        let Im2colArgs { spec, image, cols } = args.into_inner();
        train::im2col(self.isa, &self.ctx, spec, image, cols);
        Ok(())
    }

    fn col2im_impl(&self, args: Checked<Col2imArgs<'_>>) -> Result<()> {
        let Col2imArgs { spec, cols, image } = args.into_inner();
        train::col2im(self.isa, &self.ctx, M::MODE, spec, cols, image);
        Ok(())
    }

    fn depthwise_conv_impl(&self, args: Checked<DepthwiseArgs<'_>>) -> Result<()> {
        let DepthwiseArgs { spec, x, w, out } = args.into_inner();
        train::depthwise_conv::<M>(self.isa, &self.ctx, spec, x, w, out);
        Ok(())
    }

    fn depthwise_grad_input_impl(&self, args: Checked<DepthwiseGradInputArgs<'_>>) -> Result<()> {
        let DepthwiseGradInputArgs { spec, g, w, gx } = args.into_inner();
        train::depthwise_grad_input::<M>(self.isa, &self.ctx, spec, g, w, gx);
        Ok(())
    }

    fn depthwise_grad_weight_impl(&self, args: Checked<DepthwiseGradWeightArgs<'_>>) -> Result<()> {
        let DepthwiseGradWeightArgs { spec, g, x, gw } = args.into_inner();
        train::depthwise_grad_weight::<M>(self.isa, &self.ctx, spec, g, x, gw);
        Ok(())
    }

    fn attention_scores_impl(&self, args: Checked<AttentionScoresArgs<'_>>) -> Result<()> {
        let AttentionScoresArgs { spec, scores, mask } = args.into_inner();
        train::attention_scores(self.isa, &self.ctx, M::MODE, spec, scores, mask);
        Ok(())
    }

    fn dropout_mask_impl(&self, args: Checked<DropoutMaskArgs<'_>>) -> Result<()> {
        let DropoutMaskArgs {
            key,
            p,
            scale,
            start,
            out,
        } = args.into_inner();
        train::dropout_mask(&self.ctx, key, p, scale, start, out);
        Ok(())
    }

    fn sgd_step_impl(&self, args: Checked<SgdStepArgs<'_>>) -> Result<()> {
        let SgdStepArgs {
            spec,
            param,
            grad,
            momentum_buffer,
        } = args.into_inner();
        train::sgd_step(
            self.isa,
            &self.ctx,
            M::MODE,
            spec,
            param,
            grad,
            momentum_buffer,
        );
        Ok(())
    }

    fn adam_step_impl(&self, args: Checked<AdamStepArgs<'_>>) -> Result<()> {
        let AdamStepArgs {
            spec,
            param,
            grad,
            exp_avg,
            exp_avg_sq,
            max_exp_avg_sq,
        } = args.into_inner();
        train::adam_step(
            self.isa,
            &self.ctx,
            M::MODE,
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
