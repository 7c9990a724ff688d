//! A backend written the way a downstream crate would write one, with no argument checks
//! of its own: its kernels index their buffers directly, trusting every length and layout.
//! Core's kernels ([`Backend`], implemented for every [`BackendImpl`]) check the arguments
//! before any of them runs, so the invalid-argument probes of the conformance kit are all
//! refused without reaching the backend, and valid calls give the reference bits.

use exactgrad_backends::conformance::{self, Config};
use exactgrad_backends::scalar;
use exactgrad_backends::scalar_ref::walk;
use exactgrad_backends::ScalarRefBackend;
use exactgrad_core::backend::{
    BinaryArgs, Checked, CopyStridedArgs, DropoutMaskArgs, MatmulArgs, MaxPool2dBackwardArgs,
    SelectArgs, SoftmaxArgs, SoftmaxBackwardArgs, SumArgs, UnaryArgs, UnaryBackwardArgs,
};
use exactgrad_core::kernels::Pool2dSpec;
use exactgrad_core::{Backend, BackendImpl, ComputeMode, Error, Result, UnaryOp};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Plain loops over the buffers, no checks; counts the calls that reach its kernels.
#[derive(Clone, Debug, Default)]
struct Unchecked {
    reached: Arc<AtomicUsize>,
}

impl Unchecked {
    fn reach(&self) {
        self.reached.fetch_add(1, Ordering::Relaxed);
    }

    fn reached(&self) -> usize {
        self.reached.load(Ordering::Relaxed)
    }
}

impl BackendImpl for Unchecked {
    type Storage = Vec<f32>;
    exactgrad_core::host_views!();

    fn name(&self) -> String {
        "unchecked-downstream".into()
    }
    fn mode(&self) -> ComputeMode {
        ComputeMode::Exact
    }
    fn zeros(&self, len: usize) -> Result<Vec<f32>> {
        Ok(vec![0.0; len])
    }
    fn storage_from_vec(&self, data: Vec<f32>) -> Result<Vec<f32>> {
        Ok(data)
    }

    fn copy_strided_impl(&self, args: Checked<CopyStridedArgs<'_>>) -> Result<()> {
        self.reach();
        let CopyStridedArgs { src, layout, out } = args.into_inner();
        let mut i = 0;
        layout.for_each_index(|s| {
            out[i] = src[s];
            i += 1;
        });
        Ok(())
    }

    fn unary_impl(&self, args: Checked<UnaryArgs<'_>>) -> Result<()> {
        self.reach();
        let UnaryArgs { op, x, out } = args.into_inner();
        for i in 0..x.len() {
            out[i] = scalar::canon(scalar::unary(op, x[i]));
        }
        Ok(())
    }

    fn unary_backward_impl(&self, args: Checked<UnaryBackwardArgs<'_>>) -> Result<()> {
        self.reach();
        let UnaryBackwardArgs { op, x, y, g, out } = args.into_inner();
        for i in 0..g.len() {
            out[i] = scalar::canon(scalar::unary_backward(op, x[i], y[i], g[i]));
        }
        Ok(())
    }

    fn binary_impl(&self, args: Checked<BinaryArgs<'_>>) -> Result<()> {
        self.reach();
        let BinaryArgs {
            op,
            a,
            la,
            b,
            lb,
            out,
        } = args.into_inner();
        let mut i = 0;
        walk([la, lb], |[ia, ib]| {
            out[i] = scalar::canon(scalar::binary(op, a[ia], b[ib]));
            i += 1;
        });
        Ok(())
    }

    fn select_impl(&self, args: Checked<SelectArgs<'_>>) -> Result<()> {
        self.reach();
        let SelectArgs {
            cond,
            lc,
            a,
            la,
            b,
            lb,
            out,
        } = args.into_inner();
        let mut i = 0;
        walk([lc, la, lb], |[ic, ia, ib]| {
            out[i] = if cond[ic] != 0.0 { a[ia] } else { b[ib] };
            i += 1;
        });
        Ok(())
    }

    // The remaining required kernels hand their checked arguments on to the reference.

    fn sum_impl(&self, args: Checked<SumArgs<'_>>) -> Result<()> {
        self.reach();
        ScalarRefBackend.sum_impl(args)
    }

    fn matmul_impl(&self, args: Checked<MatmulArgs<'_>>) -> Result<()> {
        self.reach();
        ScalarRefBackend.matmul_impl(args)
    }

    fn softmax_impl(&self, args: Checked<SoftmaxArgs<'_>>) -> Result<()> {
        self.reach();
        ScalarRefBackend.softmax_impl(args)
    }

    fn softmax_backward_impl(&self, args: Checked<SoftmaxBackwardArgs<'_>>) -> Result<()> {
        self.reach();
        ScalarRefBackend.softmax_backward_impl(args)
    }

    // Two training kernels overridden, also without checks: the argmax indices are used
    // as they come.

    fn max_pool2d_backward_impl(&self, args: Checked<MaxPool2dBackwardArgs<'_>>) -> Result<()> {
        self.reach();
        let MaxPool2dBackwardArgs {
            spec,
            argmax,
            g,
            gx,
        } = args.into_inner();
        let (hw, ohw) = (spec.h * spec.w, spec.oh * spec.ow);
        gx.fill(0.0);
        for (j, (&at, &gj)) in argmax.iter().zip(g).enumerate() {
            if at != usize::MAX {
                let plane = j / ohw;
                gx[plane * hw + at] += gj;
            }
        }
        for v in gx.iter_mut() {
            *v = scalar::canon(*v);
        }
        Ok(())
    }

    fn dropout_mask_impl(&self, args: Checked<DropoutMaskArgs<'_>>) -> Result<()> {
        self.reach();
        let DropoutMaskArgs {
            key,
            p,
            scale,
            start,
            out,
        } = args.into_inner();
        exactgrad_core::kernels::dropout_mask(key, p, scale, start, out);
        Ok(())
    }
}

#[test]
fn every_invalid_argument_probe_is_refused_before_the_backend_runs() {
    let backend = Unchecked::default();
    let refused = conformance::check_invalid_arguments(&backend).unwrap_or_else(|m| panic!("{m}"));
    assert!(refused > 50, "only {refused} probes");
    assert_eq!(
        backend.reached(),
        0,
        "an invalid call reached the backend's kernels"
    );
}

#[test]
fn the_unchecked_backend_conforms_and_valid_calls_reach_it() {
    let backend = Unchecked::default();
    conformance::check_backend(&backend, &ScalarRefBackend, &Config::quick())
        .unwrap_or_else(|m| panic!("{m}"));
    assert!(backend.reached() > 0);
}

#[test]
fn lengths_and_argmax_indices_that_do_not_fit_are_errors_not_panics() {
    let backend = Unchecked::default();
    let x = [1.0f32, 2.0, 3.0];
    let mut out = [0.0f32; 5];
    let e = backend.unary(UnaryOp::Exp, &x, &mut out).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "unary", .. }),
        "{e:?}"
    );
    // One 2×2 plane pooled to 1×1: index 4 lies outside the plane.
    let spec = Pool2dSpec {
        planes: 1,
        h: 2,
        w: 2,
        oh: 1,
        ow: 1,
        kernel: [2, 2],
        stride: [2, 2],
        padding: [0, 0],
        dilation: [1, 1],
    };
    let mut gx = [0.0f32; 4];
    let e = backend
        .max_pool2d_backward(&spec, &[4], &[1.0], &mut gx)
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                op: "max_pool2d_backward",
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(backend.reached(), 0);
    // The same call with a valid index runs on the backend.
    backend
        .max_pool2d_backward(&spec, &[3], &[1.0], &mut gx)
        .unwrap();
    assert_eq!(gx, [0.0, 0.0, 0.0, 1.0]);
    assert_eq!(backend.reached(), 1);
}
