//! [`BackendImpl`]: what a backend implements — its storage, the nine required kernels
//! and the defaulted ones with their host reference bodies.

use super::*;

/// What a compute backend implements: storage, mode and the kernels, each kernel on
/// arguments that core has already checked ([`Checked`]).
///
/// Every type implementing this trait is a [`Backend`] (the one implementation of
/// [`Backend`] is for all of them): callers use [`Backend`], whose kernels run each
/// kernel's argument check once and then call the `*_impl` method here. A backend
/// therefore writes no argument checks of its own, and none of its kernels can be reached
/// with arguments that failed them (`docs/backends.md`).
///
/// Implementations must produce, in [`ComputeMode::Exact`], exactly the bits of
/// `ScalarRefBackend` for every kernel (the conformance kit checks this), and in any mode
/// results that do not depend on the number of threads. The nine kernels every operator
/// needs are required; the recurrent cells and the training kernels have default bodies,
/// the reference definitions of [`crate::recurrent`] and [`crate::kernels`].
///
/// The required items, all of them (this example implements nothing else, so a kernel
/// that became required would stop it compiling):
///
/// ```
/// use exactgrad_core::backend::*;
/// use exactgrad_core::{ComputeMode, Result};
///
/// #[derive(Clone, Debug)]
/// struct Mine;
///
/// impl BackendImpl for Mine {
///     type Storage = Vec<f32>;
///     // `type Views`, `view` and `view_mut` for host memory:
///     exactgrad_core::host_views!();
///     fn name(&self) -> String { "mine".into() }
///     fn mode(&self) -> ComputeMode { ComputeMode::Exact }
///     fn zeros(&self, len: usize) -> Result<Vec<f32>> { Ok(vec![0.0; len]) }
///     fn storage_from_vec(&self, data: Vec<f32>) -> Result<Vec<f32>> { Ok(data) }
///     // The nine kernels (bodies elided here; `docs/backends.md` §3 writes one):
///     fn copy_strided_impl(&self, _: Checked<CopyStridedArgs<'_>>) -> Result<()> { Ok(()) }
///     fn unary_impl(&self, _: Checked<UnaryArgs<'_>>) -> Result<()> { Ok(()) }
///     fn unary_backward_impl(&self, _: Checked<UnaryBackwardArgs<'_>>) -> Result<()> { Ok(()) }
///     fn binary_impl(&self, _: Checked<BinaryArgs<'_>>) -> Result<()> { Ok(()) }
///     fn select_impl(&self, _: Checked<SelectArgs<'_>>) -> Result<()> { Ok(()) }
///     fn sum_impl(&self, _: Checked<SumArgs<'_>>) -> Result<()> { Ok(()) }
///     fn matmul_impl(&self, _: Checked<MatmulArgs<'_>>) -> Result<()> { Ok(()) }
///     fn softmax_impl(&self, _: Checked<SoftmaxArgs<'_>>) -> Result<()> { Ok(()) }
///     fn softmax_backward_impl(&self, _: Checked<SoftmaxBackwardArgs<'_>>) -> Result<()> { Ok(()) }
/// }
/// ```
pub trait BackendImpl: Clone + Send + Sync + Debug + 'static {
    /// An owned buffer of f32 elements: host memory ([`HostViews`]) or a device's.
    type Storage: Send + Sync + Debug + 'static;

    /// The views kernels take of [`BackendImpl::Storage`]: [`HostViews`] (slices) on a
    /// host backend.
    type Views: ViewFamily;

    /// A shared view of all of `s`.
    fn view(s: &Self::Storage) -> ViewOf<'_, Self>;

    /// An exclusive view of all of `s`.
    fn view_mut(s: &mut Self::Storage) -> ViewMutOf<'_, Self>;

    /// The number of elements `s` holds.
    fn storage_len(s: &Self::Storage) -> usize {
        Self::view(s).len()
    }

    /// The elements of `s` as a vector on the host (a copy on a host backend, a download
    /// on a device).
    fn storage_to_vec(s: &Self::Storage) -> Result<Vec<f32>> {
        Ok(Self::to_host(Self::view(s))?.into_owned())
    }

    /// The elements `range` of `v` ([`ViewFamily::slice`]).
    fn slice<'a>(v: ViewOf<'a, Self>, range: Range<usize>) -> ViewOf<'a, Self> {
        Self::Views::slice(v, range)
    }

    /// The elements `range` of `v`, exclusively ([`ViewFamily::slice_mut`]).
    fn slice_mut<'a>(v: ViewMutOf<'a, Self>, range: Range<usize>) -> ViewMutOf<'a, Self> {
        Self::Views::slice_mut(v, range)
    }

    /// `v` split at element `mid`, both parts exclusive ([`ViewFamily::split_at_mut`]).
    fn split_at_mut(
        v: ViewMutOf<'_, Self>,
        mid: usize,
    ) -> (ViewMutOf<'_, Self>, ViewMutOf<'_, Self>) {
        Self::Views::split_at_mut(v, mid)
    }

    /// A shorter exclusive borrow of `v` ([`ViewFamily::reborrow`]).
    fn reborrow<'s>(v: &'s mut ViewMutOf<'_, Self>) -> ViewMutOf<'s, Self> {
        Self::Views::reborrow(v)
    }

    /// A shared view of what `v` holds ([`ViewFamily::freeze`]).
    fn freeze<'s>(v: &'s ViewMutOf<'_, Self>) -> ViewOf<'s, Self> {
        Self::Views::freeze(v)
    }

    /// `v` with a shorter lifetime ([`ViewFamily::shorten`]).
    fn shorten<'s, 'a: 's>(v: ViewOf<'a, Self>) -> ViewOf<'s, Self> {
        Self::Views::shorten(v)
    }

    /// `v` with a shorter lifetime, exclusively ([`ViewFamily::shorten_mut`]).
    fn shorten_mut<'s, 'a: 's>(v: ViewMutOf<'a, Self>) -> ViewMutOf<'s, Self> {
        Self::Views::shorten_mut(v)
    }

    /// The elements of `v` on the host ([`ViewFamily::to_host`]).
    fn to_host(v: ViewOf<'_, Self>) -> Result<Cow<'_, [f32]>> {
        Self::Views::to_host(v)
    }

    /// Runs `f` on the elements of `v` as a host slice ([`ViewFamily::with_host_mut`]).
    fn with_host_mut<R>(v: ViewMutOf<'_, Self>, f: impl FnOnce(&mut [f32]) -> R) -> Result<R> {
        Self::Views::with_host_mut(v, f)
    }

    /// A short name for reports, such as `scalar-ref` or `exact/avx2`.
    fn name(&self) -> String;

    /// The arithmetic contract this backend's kernels follow.
    fn mode(&self) -> ComputeMode;

    /// A zero-filled buffer of `len` elements; an [`Error::Alloc`] or [`Error::TooLarge`]
    /// when the memory cannot be obtained.
    fn zeros(&self, len: usize) -> Result<Self::Storage>;

    /// A buffer of `len` elements whose values are unspecified (but initialised), for an
    /// output that a kernel overwrites completely. The default is [`BackendImpl::zeros`].
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

    /// [`Backend::copy_strided`] on checked arguments.
    fn copy_strided_impl(&self, args: Checked<CopyStridedArgs<'_, Self::Views>>) -> Result<()>;

    /// [`Backend::digest`] on checked arguments. The default digests the elements on the
    /// host with the scalar reference ([`crate::TraceHasher`]); a backend may digest its
    /// blocks in parallel or with vector units, and must give the same value.
    fn digest_impl(&self, args: Checked<DigestArgs<'_, Self::Views>>) -> Result<u64> {
        let x = Self::to_host(args.into_inner().x)?;
        Ok(crate::TraceHasher::of(&x))
    }

    /// [`Backend::unary`] on checked arguments.
    fn unary_impl(&self, args: Checked<UnaryArgs<'_, Self::Views>>) -> Result<()>;

    /// [`Backend::unary_backward`] on checked arguments.
    fn unary_backward_impl(&self, args: Checked<UnaryBackwardArgs<'_, Self::Views>>) -> Result<()>;

    /// [`Backend::binary`] on checked arguments.
    fn binary_impl(&self, args: Checked<BinaryArgs<'_, Self::Views>>) -> Result<()>;

    /// [`Backend::select`] on checked arguments.
    fn select_impl(&self, args: Checked<SelectArgs<'_, Self::Views>>) -> Result<()>;

    /// [`Backend::sum`] on checked arguments.
    fn sum_impl(&self, args: Checked<SumArgs<'_, Self::Views>>) -> Result<()>;

    /// [`Backend::matmul`] on checked arguments.
    fn matmul_impl(&self, args: Checked<MatmulArgs<'_, Self::Views>>) -> Result<()>;

    /// [`Backend::matmul_acc`] on checked arguments. The default body is the reference
    /// definition: each segment's product by [`BackendImpl::matmul_impl`] into a scratch
    /// buffer, added into `out` in segment order.
    fn matmul_acc_impl(&self, args: Checked<MatmulAccArgs<'_, Self::Views>>) -> Result<()> {
        let MatmulAccArgs {
            spec,
            seg,
            a,
            b,
            mut out,
        } = args.into_inner();
        if !out.is_empty() && spec.k > 0 {
            let mut part = self.uninit(out.len())?;
            for s in 0..spec.k / seg {
                // Steps s·seg .. (s+1)·seg: a sub-product of the checked one (every
                // element it addresses is one `spec` addresses, and out is non-empty, so
                // the offsets lie inside the checked extents).
                let sub = spec.segment(s, seg);
                self.matmul_impl(Checked::new(MatmulArgs {
                    spec: &sub,
                    a: Self::shorten(a),
                    b: Self::shorten(b),
                    out: Self::view_mut(&mut part),
                }))?;
                let p = Self::to_host(Self::view(&part))?;
                Self::with_host_mut(Self::reborrow(&mut out), |out| {
                    for (o, &p) in out.iter_mut().zip(p.iter()) {
                        *o += p;
                    }
                })?;
            }
        }
        let mode = self.mode();
        Self::with_host_mut(out, |out| {
            out.iter_mut().for_each(|o| *o = kernels::canon(mode, *o))
        })
    }

    /// [`Backend::softmax`] on checked arguments.
    fn softmax_impl(&self, args: Checked<SoftmaxArgs<'_, Self::Views>>) -> Result<()>;

    /// [`Backend::softmax_backward`] on checked arguments.
    fn softmax_backward_impl(
        &self,
        args: Checked<SoftmaxBackwardArgs<'_, Self::Views>>,
    ) -> Result<()>;

    // ----- recurrent cells (docs/recurrent.md) -------------------------------------------
    //
    // One step of an LSTM or GRU layer between two matrix products. The default bodies
    // are the reference definitions of `crate::recurrent`, written with this backend's
    // element-wise kernels; a backend may fuse them but must give the same bits.

    /// [`Backend::lstm_cell`] on checked arguments.
    fn lstm_cell_impl(&self, args: Checked<LstmCellArgs<'_, Self::Views>>) -> Result<()> {
        crate::recurrent::lstm_cell::<Self>(self, args)
    }

    /// [`Backend::lstm_cell_backward`] on checked arguments.
    fn lstm_cell_backward_impl(
        &self,
        args: Checked<LstmCellBackwardArgs<'_, Self::Views>>,
    ) -> Result<()> {
        crate::recurrent::lstm_cell_backward::<Self>(self, args)
    }

    /// [`Backend::gru_cell`] on checked arguments.
    fn gru_cell_impl(&self, args: Checked<GruCellArgs<'_, Self::Views>>) -> Result<()> {
        crate::recurrent::gru_cell::<Self>(self, args)
    }

    /// [`Backend::gru_cell_backward`] on checked arguments.
    fn gru_cell_backward_impl(
        &self,
        args: Checked<GruCellBackwardArgs<'_, Self::Views>>,
    ) -> Result<()> {
        crate::recurrent::gru_cell_backward::<Self>(self, args)
    }

    // ----- training kernels (`crate::kernels`) -----------------------------------------
    //
    // Each default body is the reference definition (`crate::kernels`): a backend that
    // does not override a kernel computes exactly these bits.

    /// [`Backend::norm_stats`] on checked arguments.
    fn norm_stats_impl(&self, args: Checked<NormStatsArgs<'_, Self::Views>>) -> Result<()> {
        let NormStatsArgs {
            spec,
            x,
            mean,
            corr,
            sq_sum,
        } = args.into_inner();
        let (mode, x) = (self.mode(), Self::to_host(x)?);
        Self::with_host_mut(mean, |mean| {
            Self::with_host_mut(corr, |corr| {
                Self::with_host_mut(sq_sum, |sq_sum| {
                    kernels::norm_stats(mode, spec, &x, mean, corr, sq_sum)
                })
            })
        })???;
        Ok(())
    }

    /// [`Backend::norm_forward`] on checked arguments.
    fn norm_forward_impl(&self, args: Checked<NormForwardArgs<'_, Self::Views>>) -> Result<()> {
        let NormForwardArgs {
            spec,
            x,
            stats,
            weight,
            bias,
            out,
        } = args.into_inner();
        let x = Self::to_host(x)?;
        let (mean, corr, rstd) = host_stats::<Self>(stats)?;
        let stats = NormStats {
            mean: &mean[..],
            corr: &corr[..],
            rstd: &rstd[..],
        };
        let weight = weight.map(Self::to_host).transpose()?;
        let bias = bias.map(Self::to_host).transpose()?;
        let mode = self.mode();
        Self::with_host_mut(out, |out| {
            kernels::norm_forward(
                mode,
                spec,
                &x,
                &stats,
                weight.as_deref(),
                bias.as_deref(),
                out,
            )
        })
    }

    /// [`Backend::norm_backward`] on checked arguments.
    fn norm_backward_impl(&self, args: Checked<NormBackwardArgs<'_, Self::Views>>) -> Result<()> {
        let NormBackwardArgs {
            spec,
            x,
            g,
            stats,
            weight,
            stats_depend,
            grads,
        } = args.into_inner();
        let (x, g) = (Self::to_host(x)?, Self::to_host(g)?);
        let (mean, corr, rstd) = host_stats::<Self>(stats)?;
        let stats = NormStats {
            mean: &mean[..],
            corr: &corr[..],
            rstd: &rstd[..],
        };
        let weight = weight.map(Self::to_host).transpose()?;
        let mode = self.mode();
        with_opt_host_mut::<Self, _>(grads.dx, |dx| {
            with_opt_host_mut::<Self, _>(grads.dw, |dw| {
                with_opt_host_mut::<Self, _>(grads.db, |db| {
                    let grads = NormGrads { dx, dw, db };
                    let w = weight.as_deref();
                    kernels::norm_backward(mode, spec, &x, &g, &stats, w, stats_depend, grads)
                })
            })
        })???;
        Ok(())
    }

    /// [`Backend::max_pool2d`] on checked arguments.
    fn max_pool2d_impl(&self, args: Checked<MaxPool2dArgs<'_, Self::Views>>) -> Result<()> {
        let MaxPool2dArgs {
            spec,
            x,
            out,
            argmax,
        } = args.into_inner();
        let (mode, x) = (self.mode(), Self::to_host(x)?);
        Self::with_host_mut(out, |out| kernels::max_pool2d(mode, spec, &x, out, argmax))
    }

    /// [`Backend::max_pool2d_backward`] on checked arguments.
    fn max_pool2d_backward_impl(
        &self,
        args: Checked<MaxPool2dBackwardArgs<'_, Self::Views>>,
    ) -> Result<()> {
        let MaxPool2dBackwardArgs {
            spec,
            argmax,
            g,
            gx,
        } = args.into_inner();
        let (mode, g) = (self.mode(), Self::to_host(g)?);
        Self::with_host_mut(gx, |gx| {
            kernels::max_pool2d_backward(mode, spec, argmax, &g, gx)
        })
    }

    /// [`Backend::avg_pool2d`] on checked arguments.
    fn avg_pool2d_impl(&self, args: Checked<AvgPool2dArgs<'_, Self::Views>>) -> Result<()> {
        let AvgPool2dArgs { spec, x, out } = args.into_inner();
        let (mode, x) = (self.mode(), Self::to_host(x)?);
        Self::with_host_mut(out, |out| kernels::avg_pool2d(mode, spec, &x, out))
    }

    /// [`Backend::avg_pool2d_backward`] on checked arguments.
    fn avg_pool2d_backward_impl(
        &self,
        args: Checked<AvgPool2dBackwardArgs<'_, Self::Views>>,
    ) -> Result<()> {
        let AvgPool2dBackwardArgs { spec, g, gx } = args.into_inner();
        let (mode, g) = (self.mode(), Self::to_host(g)?);
        Self::with_host_mut(gx, |gx| kernels::avg_pool2d_backward(mode, spec, &g, gx))
    }

    /// [`Backend::adaptive_avg_pool2d`] on checked arguments.
    fn adaptive_avg_pool2d_impl(
        &self,
        args: Checked<AdaptiveAvgPool2dArgs<'_, Self::Views>>,
    ) -> Result<()> {
        let AdaptiveAvgPool2dArgs { spec, x, out } = args.into_inner();
        let (mode, x) = (self.mode(), Self::to_host(x)?);
        Self::with_host_mut(out, |out| kernels::adaptive_avg_pool2d(mode, spec, &x, out))
    }

    /// [`Backend::adaptive_avg_pool2d_backward`] on checked arguments.
    fn adaptive_avg_pool2d_backward_impl(
        &self,
        args: Checked<AdaptiveAvgPool2dBackwardArgs<'_, Self::Views>>,
    ) -> Result<()> {
        let AdaptiveAvgPool2dBackwardArgs { spec, g, gx } = args.into_inner();
        let (mode, g) = (self.mode(), Self::to_host(g)?);
        Self::with_host_mut(gx, |gx| {
            kernels::adaptive_avg_pool2d_backward(mode, spec, &g, gx)
        })
    }

    /// [`Backend::im2col`] on checked arguments.
    fn im2col_impl(&self, args: Checked<Im2colArgs<'_, Self::Views>>) -> Result<()> {
        let Im2colArgs { spec, image, cols } = args.into_inner();
        let image = Self::to_host(image)?;
        Self::with_host_mut(cols, |cols| kernels::im2col(spec, &image, cols))
    }

    /// [`Backend::col2im`] on checked arguments.
    fn col2im_impl(&self, args: Checked<Col2imArgs<'_, Self::Views>>) -> Result<()> {
        let Col2imArgs { spec, cols, image } = args.into_inner();
        let (mode, cols) = (self.mode(), Self::to_host(cols)?);
        Self::with_host_mut(image, |image| kernels::col2im(mode, spec, &cols, image))
    }

    /// [`Backend::depthwise_conv`] on checked arguments. The default is the definition:
    /// [`BackendImpl::im2col_impl`] into a scratch column matrix, then one
    /// [`BackendImpl::matmul_impl`] batched over the channels (`[1, KH·KW] · [KH·KW,
    /// OH·OW]` each).
    fn depthwise_conv_impl(&self, args: Checked<DepthwiseArgs<'_, Self::Views>>) -> Result<()> {
        let DepthwiseArgs { spec, x, w, out } = args.into_inner();
        if out.is_empty() {
            return Ok(());
        }
        let cols = depthwise_columns(self, spec, x)?;
        let product = depthwise_product(spec, false);
        self.matmul_impl(Checked::new(MatmulArgs {
            spec: &product,
            a: Self::shorten(w),
            b: Self::view(&cols),
            out: Self::shorten_mut(out),
        }))
    }

    /// [`Backend::depthwise_grad_input`] on checked arguments. The default is the
    /// definition: one [`BackendImpl::matmul_impl`] batched over the channels (`[KH·KW,
    /// 1] · [1, OH·OW]` each) into a scratch column matrix, then
    /// [`BackendImpl::col2im_impl`].
    fn depthwise_grad_input_impl(
        &self,
        args: Checked<DepthwiseGradInputArgs<'_, Self::Views>>,
    ) -> Result<()> {
        let DepthwiseGradInputArgs { spec, g, w, gx } = args.into_inner();
        let (kk, p) = (spec.kh * spec.kw, spec.oh * spec.ow);
        let mut cols = self.uninit(spec.c * kk * p)?;
        if spec.c * kk * p > 0 {
            let product = depthwise_product(spec, true);
            self.matmul_impl(Checked::new(MatmulArgs {
                spec: &product,
                a: Self::shorten(w),
                b: Self::shorten(g),
                out: Self::view_mut(&mut cols),
            }))?;
        }
        self.col2im_impl(Checked::new(Col2imArgs {
            spec,
            cols: Self::view(&cols),
            image: Self::shorten_mut(gx),
        }))
    }

    /// [`Backend::depthwise_grad_weight`] on checked arguments. The default is the
    /// definition: [`BackendImpl::im2col_impl`] into a scratch column matrix, then one
    /// [`BackendImpl::matmul_acc_impl`] batched over the channels (`[KH·KW, OH·OW] ·
    /// [OH·OW, 1]` each, one segment).
    fn depthwise_grad_weight_impl(
        &self,
        args: Checked<DepthwiseGradWeightArgs<'_, Self::Views>>,
    ) -> Result<()> {
        let DepthwiseGradWeightArgs { spec, g, x, gw } = args.into_inner();
        let (kk, p) = (spec.kh * spec.kw, spec.oh * spec.ow);
        if p == 0 || gw.is_empty() {
            return Ok(());
        }
        let cols = depthwise_columns(self, spec, x)?;
        let product = MatmulSpec {
            batch: spec.c,
            m: kk,
            k: p,
            n: 1,
            a_offset: 0,
            a_strides: [kk * p, p, 1],
            b_offset: 0,
            b_strides: [p, 1, p],
        };
        self.matmul_acc_impl(Checked::new(MatmulAccArgs {
            spec: &product,
            seg: p,
            a: Self::view(&cols),
            b: Self::shorten(g),
            out: Self::shorten_mut(gw),
        }))
    }

    /// [`Backend::attention_scores`] on checked arguments.
    fn attention_scores_impl(
        &self,
        args: Checked<AttentionScoresArgs<'_, Self::Views>>,
    ) -> Result<()> {
        let AttentionScoresArgs { spec, scores, mask } = args.into_inner();
        let mode = self.mode();
        let mask = match mask {
            Some((kind, m, lay)) => Some((kind, Self::to_host(m)?, lay)),
            None => None,
        };
        Self::with_host_mut(scores, |scores| {
            let mask = mask.as_ref().map(|(kind, m, lay)| (*kind, &**m, *lay));
            kernels::attention_scores(mode, spec, scores, mask)
        })
    }

    /// [`Backend::dropout_mask`] on checked arguments.
    fn dropout_mask_impl(&self, args: Checked<DropoutMaskArgs<'_, Self::Views>>) -> Result<()> {
        let DropoutMaskArgs {
            key,
            p,
            scale,
            start,
            out,
        } = args.into_inner();
        Self::with_host_mut(out, |out| kernels::dropout_mask(key, p, scale, start, out))
    }

    /// [`Backend::sgd_step`] on checked arguments.
    fn sgd_step_impl(&self, args: Checked<SgdStepArgs<'_, Self::Views>>) -> Result<()> {
        let SgdStepArgs {
            spec,
            param,
            grad,
            momentum_buffer,
        } = args.into_inner();
        let (mode, grad) = (self.mode(), Self::to_host(grad)?);
        Self::with_host_mut(param, |param| {
            Self::with_host_mut(momentum_buffer, |m| {
                kernels::sgd_step(mode, spec, param, &grad, m)
            })
        })?
    }

    /// [`Backend::adam_step`] on checked arguments.
    fn adam_step_impl(&self, args: Checked<AdamStepArgs<'_, Self::Views>>) -> Result<()> {
        let AdamStepArgs {
            spec,
            param,
            grad,
            exp_avg,
            exp_avg_sq,
            max_exp_avg_sq,
        } = args.into_inner();
        let (mode, grad) = (self.mode(), Self::to_host(grad)?);
        Self::with_host_mut(param, |param| {
            Self::with_host_mut(exp_avg, |m| {
                Self::with_host_mut(exp_avg_sq, |v| {
                    Self::with_host_mut(max_exp_avg_sq, |vmax| {
                        kernels::adam_step(mode, spec, param, &grad, m, v, vmax)
                    })
                })
            })
        })????;
        Ok(())
    }
}

/// The three statistics of a normalisation on the host (borrowed on a host backend).
pub type HostStats<'a> = (Cow<'a, [f32]>, Cow<'a, [f32]>, Cow<'a, [f32]>);

/// `stats` on the host, for host reference bodies (the defaults here, a device
/// backend's host fallbacks).
pub fn host_stats<'a, B: BackendImpl>(stats: &NormStats<'a, B::Views>) -> Result<HostStats<'a>> {
    Ok((
        B::to_host(stats.mean)?,
        B::to_host(stats.corr)?,
        B::to_host(stats.rstd)?,
    ))
}

/// Runs `f` on an optional output as a host slice ([`BackendImpl::with_host_mut`]), or on
/// `None`.
pub fn with_opt_host_mut<B: BackendImpl, R>(
    v: Option<ViewMutOf<'_, B>>,
    f: impl FnOnce(Option<&mut [f32]>) -> R,
) -> Result<R> {
    match v {
        Some(v) => B::with_host_mut(v, |v| f(Some(v))),
        None => Ok(f(None)),
    }
}

/// The per-channel product of a depthwise convolution over its column matrix: the
/// forward `w_c · cols_c` (`[1, KH·KW] · [KH·KW, OH·OW]`) or, `transposed`, the input
/// gradient's `w_cᵀ · g_c` (`[KH·KW, 1] · [1, OH·OW]`), batched over the channels.
fn depthwise_product(spec: &Col2imSpec, transposed: bool) -> MatmulSpec {
    let (kk, p) = (spec.kh * spec.kw, spec.oh * spec.ow);
    if transposed {
        MatmulSpec {
            batch: spec.c,
            m: kk,
            k: 1,
            n: p,
            a_offset: 0,
            a_strides: [kk, 1, kk],
            b_offset: 0,
            b_strides: [p, p, 1],
        }
    } else {
        MatmulSpec {
            batch: spec.c,
            m: 1,
            k: kk,
            n: p,
            a_offset: 0,
            a_strides: [kk, kk, 1],
            b_offset: 0,
            b_strides: [kk * p, p, 1],
        }
    }
}

/// The column matrix of one item of a depthwise convolution (`spec` checked, so its
/// `c·kh·kw·oh·ow` elements are representable), by the backend's own im2col.
fn depthwise_columns<B: BackendImpl>(
    be: &B,
    spec: &Col2imSpec,
    x: ViewOf<'_, B>,
) -> Result<B::Storage> {
    let mut cols = be.uninit(spec.c * spec.kh * spec.kw * spec.oh * spec.ow)?;
    be.im2col_impl(Checked::new(Im2colArgs {
        spec,
        image: B::shorten(x),
        cols: B::view_mut(&mut cols),
    }))?;
    Ok(cols)
}
