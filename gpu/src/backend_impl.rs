//! The kernels of [`WgpuBackend`]: its implementation of `BackendImpl`, each kernel
//! dispatched to its shader (or to the host where `docs/gpu.md` says so).

use super::*;

impl BackendImpl for WgpuBackend {
    type Storage = WgpuStorage;
    type Views = WgpuViews;

    fn view(s: &WgpuStorage) -> WgpuView<'_> {
        s.view()
    }

    fn view_mut(s: &mut WgpuStorage) -> WgpuViewMut<'_> {
        s.view_mut()
    }

    fn name(&self) -> String {
        format!("wgpu ({})", self.shared.gpu.summary.name)
    }

    fn mode(&self) -> ComputeMode {
        self.mode
    }

    fn zeros(&self, len: usize) -> Result<WgpuStorage> {
        if len > MAX_ELEMENTS {
            return Err(Error::TooLarge {
                op: "zeros",
                dims: vec![len],
                limit: MAX_ELEMENTS,
            });
        }
        WgpuStorage::new(&self.shared, len, true)
    }

    fn uninit(&self, len: usize) -> Result<WgpuStorage> {
        if len > MAX_ELEMENTS {
            return Err(Error::TooLarge {
                op: "uninit",
                dims: vec![len],
                limit: MAX_ELEMENTS,
            });
        }
        // A recycled buffer keeps its stale words: the caller overwrites all of them.
        WgpuStorage::new(&self.shared, len, false)
    }

    fn memory(&self) -> Option<&dyn MemoryPool> {
        Some(&self.shared.gpu.pool)
    }

    fn storage_from_vec(&self, data: Vec<f32>) -> Result<WgpuStorage> {
        let s = self.uninit(data.len())?;
        self.shared
            .gpu
            .write(&s.buf, 0, bytemuck::cast_slice(&data))?;
        Ok(s)
    }

    fn avg_pool2d_impl(&self, args: Checked<AvgPool2dArgs<'_, WgpuViews>>) -> Result<()> {
        let AvgPool2dArgs { spec, x, out } = args.into_inner();
        pool::avg_pool2d(self, spec, x, out)
    }

    fn avg_pool2d_backward_impl(
        &self,
        args: Checked<AvgPool2dBackwardArgs<'_, WgpuViews>>,
    ) -> Result<()> {
        let AvgPool2dBackwardArgs { spec, g, gx } = args.into_inner();
        pool::avg_pool2d_backward(self, spec, g, gx)
    }

    fn adaptive_avg_pool2d_impl(
        &self,
        args: Checked<AdaptiveAvgPool2dArgs<'_, WgpuViews>>,
    ) -> Result<()> {
        let AdaptiveAvgPool2dArgs { spec, x, out } = args.into_inner();
        pool::adaptive_avg_pool2d(self, spec, x, out)
    }

    fn adaptive_avg_pool2d_backward_impl(
        &self,
        args: Checked<AdaptiveAvgPool2dBackwardArgs<'_, WgpuViews>>,
    ) -> Result<()> {
        let AdaptiveAvgPool2dBackwardArgs { spec, g, gx } = args.into_inner();
        pool::adaptive_avg_pool2d_backward(self, spec, g, gx)
    }

    fn max_pool2d_impl(&self, args: Checked<MaxPool2dArgs<'_, WgpuViews>>) -> Result<()> {
        let MaxPool2dArgs {
            spec,
            x,
            out,
            argmax,
        } = args.into_inner();
        pool::max_pool2d(self, spec, x, out, argmax)
    }

    fn norm_stats_impl(&self, args: Checked<NormStatsArgs<'_, WgpuViews>>) -> Result<()> {
        let NormStatsArgs {
            spec,
            x,
            mean,
            corr,
            sq_sum,
        } = args.into_inner();
        norm::norm_stats(self, spec, x, mean, corr, sq_sum)
    }

    fn norm_forward_impl(&self, args: Checked<NormForwardArgs<'_, WgpuViews>>) -> Result<()> {
        let NormForwardArgs {
            spec,
            x,
            stats,
            weight,
            bias,
            out,
        } = args.into_inner();
        norm::norm_forward(self, spec, x, stats, weight, bias, out)
    }

    fn norm_backward_impl(&self, args: Checked<NormBackwardArgs<'_, WgpuViews>>) -> Result<()> {
        let NormBackwardArgs {
            spec,
            x,
            g,
            stats,
            weight,
            stats_depend,
            grads,
        } = args.into_inner();
        norm::norm_backward(self, spec, x, g, stats, weight, stats_depend, grads)
    }

    fn max_pool2d_backward_impl(
        &self,
        args: Checked<MaxPool2dBackwardArgs<'_, WgpuViews>>,
    ) -> Result<()> {
        let MaxPool2dBackwardArgs {
            spec,
            argmax,
            g,
            gx,
        } = args.into_inner();
        pool::max_pool2d_backward(self, spec, argmax, g, gx)
    }

    fn copy_strided_impl(&self, args: Checked<CopyStridedArgs<'_, WgpuViews>>) -> Result<()> {
        let CopyStridedArgs { src, layout, out } = args.into_inner();
        let n = out.len();
        let mut p = vec![0, word(n)?];
        push_layout(&mut p, layout)?;
        self.run(Kernel::Copy, p, &[src], out, n)
    }

    fn unary_impl(&self, args: Checked<UnaryArgs<'_, WgpuViews>>) -> Result<()> {
        let UnaryArgs { op, x, out } = args.into_inner();
        let code = unary_code(op);
        let n = out.len();
        let mut p = vec![0, word(n)?];
        p.extend_from_slice(&code);
        self.run(Kernel::Unary, p, &[x], out, n)
    }

    fn unary_backward_impl(&self, args: Checked<UnaryBackwardArgs<'_, WgpuViews>>) -> Result<()> {
        let UnaryBackwardArgs { op, x, y, g, out } = args.into_inner();
        let code = unary_backward_code(op);
        let n = out.len();
        let mut p = vec![0, word(n)?];
        p.extend_from_slice(&code);
        self.run(Kernel::UnaryBackward, p, &[x, y, g], out, n)
    }

    fn binary_impl(&self, args: Checked<BinaryArgs<'_, WgpuViews>>) -> Result<()> {
        let BinaryArgs {
            op,
            a,
            la,
            b,
            lb,
            out,
        } = args.into_inner();
        let n = out.len();
        let code = match op {
            exactgrad_core::BinaryOp::Add => 0,
            exactgrad_core::BinaryOp::Sub => 1,
            exactgrad_core::BinaryOp::Mul => 2,
            exactgrad_core::BinaryOp::Div => 3,
        };
        let mut p = vec![0, word(n)?, code];
        push_layout(&mut p, la)?;
        push_layout(&mut p, lb)?;
        self.run(Kernel::Binary, p, &[a, b], out, n)
    }

    fn select_impl(&self, args: Checked<SelectArgs<'_, WgpuViews>>) -> Result<()> {
        let SelectArgs {
            cond,
            lc,
            a,
            la,
            b,
            lb,
            out,
        } = args.into_inner();
        let n = out.len();
        let mut p = vec![0, word(n)?];
        push_layout(&mut p, lc)?;
        push_layout(&mut p, la)?;
        push_layout(&mut p, lb)?;
        self.run(Kernel::Select, p, &[cond, a, b], out, n)
    }

    fn sum_impl(&self, args: Checked<SumArgs<'_, WgpuViews>>) -> Result<()> {
        let SumArgs {
            x,
            layout,
            reduce,
            out,
        } = args.into_inner();
        if !self.f64_on_device() {
            return on_host!(self, [x], out, sum(layout, reduce));
        }
        let (kept, red) = split_reduce(layout, reduce);
        let n = out.len();
        let mut p = vec![0, word(n)?];
        push_layout(&mut p, &kept)?;
        push_layout(&mut p, &red)?;
        let count = red.shape.numel();
        p.push(word(count)?);
        let per = LOOP_BUDGET / (red.rank() + 2);
        let dispatches = chunked(&p, count, per, n, &[])?;
        self.run_all(Kernel::Sum, &dispatches, &[x], 2 * n, out)
    }

    fn matmul_impl(&self, args: Checked<MatmulArgs<'_, WgpuViews>>) -> Result<()> {
        let MatmulArgs { spec, a, b, out } = args.into_inner();
        let s = *spec;
        if s.m == 0 || s.n == 0 || s.batch == 0 {
            return Ok(());
        }
        if s.k == 0 {
            // The empty sum: no operand element is read (the offsets need not lie inside
            // the buffers).
            return out.zero();
        }
        // A stride along a dimension of size 1 is never used.
        let st = |size: usize, stride: usize| if size <= 1 { 0 } else { stride };
        let p = vec![
            0,
            word(s.batch)?,
            word(s.m)?,
            word(s.k)?,
            word(s.n)?,
            word(s.a_offset)?,
            word(st(s.batch, s.a_strides[0]))?,
            word(st(s.m, s.a_strides[1]))?,
            word(st(s.k, s.a_strides[2]))?,
            word(s.b_offset)?,
            word(st(s.batch, s.b_strides[0]))?,
            word(st(s.k, s.b_strides[1]))?,
            word(st(s.n, s.b_strides[2]))?,
        ];
        let n = out.len();
        word(n)?;
        if self.shared.tiled_matmul && s.m > 1 && s.n > 1 {
            // One workgroup of 64 invocations per 8 × 8 block of outputs.
            let tiles = s.batch * s.m.div_ceil(8) * s.n.div_ceil(8);
            let threads = tiles.checked_mul(64).ok_or_else(|| {
                Error::invalid("matmul", "spec", "too many output blocks for one dispatch")
            })?;
            let dispatches = chunked(&p, s.k, LOOP_BUDGET, threads, &[])?;
            return self.run_all(Kernel::MatmulTiled, &dispatches, &[a, b], 0, out);
        }
        let dispatches = chunked(&p, s.k, LOOP_BUDGET, n, &[])?;
        self.run_all(Kernel::Matmul, &dispatches, &[a, b], 0, out)
    }

    fn matmul_acc_impl(&self, args: Checked<MatmulAccArgs<'_, WgpuViews>>) -> Result<()> {
        // Core's reference definition on the device: each segment's product into a
        // scratch buffer by `matmul`, added into `out` in segment order, NaN made
        // canonical (exact mode).
        let MatmulAccArgs {
            spec,
            seg,
            a,
            b,
            mut out,
        } = args.into_inner();
        let n = out.len();
        if n == 0 {
            return Ok(());
        }
        let threads = word(n)? as usize;
        if spec.k == 0 {
            let none = self.zeros(0)?;
            return self.run(
                Kernel::Accumulate,
                vec![0, word(n)?, 0],
                &[none.view()],
                out,
                threads,
            );
        }
        let mut part = self.uninit(n)?;
        for s in 0..spec.k / seg {
            // Steps s·seg .. (s+1)·seg: a sub-product of the checked one.
            let sub = spec.segment(s, seg);
            Backend::matmul(self, &sub, a, b, part.view_mut())?;
            let acc = WgpuViews::reborrow(&mut out);
            self.run(
                Kernel::Accumulate,
                vec![0, word(n)?, 1],
                &[part.view()],
                acc,
                threads,
            )?;
        }
        Ok(())
    }

    fn softmax_impl(&self, args: Checked<SoftmaxArgs<'_, WgpuViews>>) -> Result<()> {
        let SoftmaxArgs {
            x,
            rows,
            cols,
            log,
            out,
        } = args.into_inner();
        if !self.f64_on_device() {
            return on_host!(self, [x], out, softmax(rows, cols, log));
        }
        if rows == 0 || cols == 0 {
            return Ok(());
        }
        let n = out.len();
        word(n)?;
        let (r, c, l) = (word(rows)?, word(cols)?, u32::from(log));
        // Phase 0, the row maximum (order-free): split, one workgroup of `WG`
        // invocations per row, each at most LOOP_BUDGET columns per dispatch; or not, one
        // invocation per row (a kernel without workgroup memory or barriers). Chosen per
        // adapter (`split_row_max`). Phase 1 (the f64 sum, in order): one invocation per
        // row. Phase 2: one per element.
        let ranges = chunks(cols, LOOP_BUDGET)?;
        let mut dispatches = Vec::with_capacity(2 * ranges.len() + 1);
        let kernel = if self.split_row_max {
            let max_threads = rows.checked_mul(WG).ok_or_else(|| {
                Error::invalid("softmax", "rows", "too many rows for one dispatch")
            })?;
            for &[start, len] in &chunks(cols, LOOP_BUDGET * WG)? {
                dispatches.push(Dispatch::new(vec![0, r, c, 0, start, len, l], max_threads));
            }
            Kernel::SoftmaxSplit
        } else {
            for &[start, len] in &ranges {
                dispatches.push(Dispatch::new(vec![0, r, c, 0, start, len, l], rows));
            }
            Kernel::Softmax
        };
        for &[start, len] in &ranges {
            dispatches.push(Dispatch::new(vec![0, r, c, 1, start, len, l], rows));
        }
        dispatches.push(Dispatch::new(vec![0, r, c, 2, 0, 0, l], n));
        self.run_all(kernel, &dispatches, &[x], 4 * rows, out)
    }

    fn softmax_backward_impl(
        &self,
        args: Checked<SoftmaxBackwardArgs<'_, WgpuViews>>,
    ) -> Result<()> {
        let SoftmaxBackwardArgs {
            y,
            g,
            rows,
            cols,
            log,
            out,
        } = args.into_inner();
        if !self.f64_on_device() {
            return on_host!(self, [y, g], out, softmax_backward(rows, cols, log));
        }
        if rows == 0 || cols == 0 {
            return Ok(());
        }
        let n = out.len();
        word(n)?;
        let (r, c, l) = (word(rows)?, word(cols)?, u32::from(log));
        let mut dispatches: Vec<Dispatch> = chunks(cols, LOOP_BUDGET)?
            .into_iter()
            .map(|[start, len]| Dispatch::new(vec![0, r, c, 0, start, len, l], rows))
            .collect();
        dispatches.push(Dispatch::new(vec![0, r, c, 1, 0, 0, l], n));
        self.run_all(Kernel::SoftmaxBackward, &dispatches, &[y, g], 2 * rows, out)
    }

    fn sgd_step_impl(&self, args: Checked<SgdStepArgs<'_, WgpuViews>>) -> Result<()> {
        let SgdStepArgs {
            spec,
            param,
            grad,
            momentum_buffer,
        } = args.into_inner();
        let n = param.len();
        let f = f32::to_bits;
        let p = vec![
            0,
            word(n)?,
            f(spec.neg_lr),
            u32::from(spec.weight_decay.is_some()),
            f(spec.weight_decay.unwrap_or(0.0)),
            u32::from(spec.momentum.is_some()),
            f(spec.momentum.unwrap_or(0.0)),
            f(spec.dampening),
            u32::from(spec.nesterov),
            u32::from(spec.first),
            u32::from(spec.maximize),
        ];
        self.run_outs(Kernel::SgdStep, p, &[grad], &[param, momentum_buffer], n)
    }

    fn adam_step_impl(&self, args: Checked<AdamStepArgs<'_, WgpuViews>>) -> Result<()> {
        let AdamStepArgs {
            spec,
            param,
            grad,
            exp_avg,
            exp_avg_sq,
            max_exp_avg_sq,
        } = args.into_inner();
        let n = param.len();
        let f = f32::to_bits;
        // `1 − w1` and the choice of the lerp's form, as `AdamSpec::element` computes
        // them (one f32 subtraction, the same on the host as on the device).
        let p = vec![
            0,
            word(n)?,
            f(spec.neg_step),
            f(spec.w1),
            f(1.0 - spec.w1),
            u32::from(spec.w1.abs() < 0.5),
            f(spec.beta2),
            f(spec.w2),
            f(spec.bc2_sqrt),
            f(spec.eps),
            u32::from(spec.weight_decay.is_some()),
            f(spec.weight_decay.unwrap_or(0.0)),
            u32::from(spec.decay.is_some()),
            f(spec.decay.unwrap_or(0.0)),
            u32::from(spec.amsgrad),
            u32::from(spec.maximize),
        ];
        self.run_outs(
            Kernel::AdamStep,
            p,
            &[grad],
            &[param, exp_avg, exp_avg_sq, max_exp_avg_sq],
            n,
        )
    }

    fn im2col_impl(&self, args: Checked<Im2colArgs<'_, WgpuViews>>) -> Result<()> {
        let Im2colArgs { spec, image, cols } = args.into_inner();
        let n = cols.len();
        let Some(p) = col2im_params(spec, n)? else {
            let image = WgpuViews::to_host(image)?;
            return WgpuViews::with_host_mut(cols, |o| {
                reference!(self.mode, im2col(spec, &image, o))
            })?;
        };
        self.run(Kernel::Im2col, p, &[image], cols, n)
    }

    fn attention_scores_impl(
        &self,
        args: Checked<AttentionScoresArgs<'_, WgpuViews>>,
    ) -> Result<()> {
        let AttentionScoresArgs { spec, scores, mask } = args.into_inner();
        attention::attention_scores(self, spec, scores, mask)
    }

    fn dropout_mask_impl(&self, args: Checked<DropoutMaskArgs<'_, WgpuViews>>) -> Result<()> {
        let DropoutMaskArgs {
            key,
            p,
            scale,
            start,
            out,
        } = args.into_inner();
        attention::dropout_mask(self, key, p, scale, start, out)
    }

    fn col2im_impl(&self, args: Checked<Col2imArgs<'_, WgpuViews>>) -> Result<()> {
        let Col2imArgs { spec, cols, image } = args.into_inner();
        let n = image.len();
        let Some(mut p) = col2im_params(spec, n)? else {
            let cols = WgpuViews::to_host(cols)?;
            return WgpuViews::with_host_mut(image, |o| {
                reference!(self.mode, col2im(spec, &cols, o))
            })?;
        };
        let s = spec;
        let (nr, sr) = tap_groups(s.kh, s.oh, s.stride[0], s.dilation[0]);
        let (nc, sc) = tap_groups(s.kw, s.ow, s.stride[1], s.dilation[1]);
        // No window or no tap: every element is `+0` (one dispatch of no additions).
        let total = if s.kh == 0 || s.kw == 0 || s.oh == 0 || s.ow == 0 {
            0
        } else {
            // At most kh·kw·oh·ow, the length of one channel's columns.
            [nc, sr, sc]
                .into_iter()
                .try_fold(nr, usize::checked_mul)
                .ok_or(Error::Alloc {
                    op: "wgpu",
                    bytes: usize::MAX,
                    reason: "an index beyond the device's 32-bit indices",
                })?
        };
        p.extend_from_slice(&[word(nr)?, word(nc)?, word(sr)?, word(sc)?, word(total)?]);
        // The shader's loop has no loop inside it: LOOP_BUDGET iterations per dispatch.
        let dispatches = chunked(&p, total, LOOP_BUDGET, n, &[])?;
        self.run_all(Kernel::Col2im, &dispatches, &[cols], 0, image)
    }
}
