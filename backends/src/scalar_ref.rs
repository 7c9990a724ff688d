//! The scalar reference backends: plain loops over [`crate::scalar`], no SIMD, no threads.
//!
//! [`ScalarRefBackend`] is the exact-mode oracle: every other backend's exact mode must
//! reproduce its bits. [`FastScalarRefBackend`] is the same code with fused multiply-add
//! in products and polynomials and no NaN canonicalisation: it defines the bits of
//! `FastBackend` on every FMA path.

use crate::lane::Exact;
use crate::scalar::{self, ModeSpec};
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::marker::PhantomData;
use exactgrad_core::backend::{
    try_zeroed_vec, BinaryArgs, Checked, CopyStridedArgs, MatmulArgs, MatmulSpec, SelectArgs,
    SoftmaxArgs, SoftmaxBackwardArgs, SumArgs, UnaryArgs, UnaryBackwardArgs,
};
use exactgrad_core::{BackendImpl, Result};
use exactgrad_core::{BinaryOp, Layout, UnaryOp};

/// The scalar reference backend (exact mode): the definition of every kernel's bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ScalarRefBackend;

/// The fast-mode scalar reference: `f32::mul_add` in products and polynomials.
#[cfg(feature = "std")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FastScalarRefBackend;

/// Calls `f` with the storage offsets of every element of several layouts of one shape,
/// walked together in row-major order.
pub fn walk<const N: usize>(layouts: [&Layout; N], mut f: impl FnMut([usize; N])) {
    let shape = &layouts[0].shape;
    let n = shape.numel();
    if n == 0 {
        return;
    }
    let rank = shape.rank();
    let mut pos: [usize; N] = core::array::from_fn(|i| layouts[i].offset);
    if rank == 0 {
        f(pos);
        return;
    }
    let last = rank - 1;
    let inner = shape[last];
    let inner_strides: [usize; N] = core::array::from_fn(|i| layouts[i].strides[last]);
    let mut idx = vec![0usize; rank];
    // Every offset computed stays inside its layout's extent: a dimension of size 1 may
    // have any stride (even one near usize::MAX), which is never added.
    loop {
        for k in 0..inner {
            f(core::array::from_fn(|i| pos[i] + k * inner_strides[i]));
        }
        let mut d = last;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            if idx[d] + 1 < shape[d] {
                idx[d] += 1;
                for i in 0..N {
                    pos[i] += layouts[i].strides[d];
                }
                break;
            }
            for i in 0..N {
                pos[i] -= layouts[i].strides[d] * (shape[d] - 1);
            }
            idx[d] = 0;
        }
    }
}

/// Splits a layout into the layout of its kept dimensions and that of its reduced ones.
pub fn split_reduce(layout: &Layout, reduce: &[bool]) -> (Layout, Layout) {
    assert_eq!(
        reduce.len(),
        layout.rank(),
        "sum: reduce flags do not match rank"
    );
    let mut kept = (Vec::new(), Vec::new());
    let mut red = (Vec::new(), Vec::new());
    for (d, &r) in reduce.iter().enumerate() {
        let target = if r { &mut red } else { &mut kept };
        target.0.push(layout.shape[d]);
        target.1.push(layout.strides[d]);
    }
    (
        Layout {
            shape: kept.0.into(),
            strides: kept.1,
            offset: layout.offset,
        },
        Layout {
            shape: red.0.into(),
            strides: red.1,
            offset: 0,
        },
    )
}

/// The reference kernels of one mode, shared by both scalar backends (and the fallbacks
/// of the CPU row kernels). Their arguments have passed the kernel's check in
/// [`exactgrad_core::Backend`] before they get here.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RefKernels<M: ModeSpec>(PhantomData<M>);

impl<M: ModeSpec> RefKernels<M> {
    /// Gathers `src` under `layout` into `out` (bits unchanged).
    pub fn copy_strided(src: &[f32], layout: &Layout, out: &mut [f32]) -> Result<()> {
        let mut i = 0;
        layout.for_each_index(|s| {
            out[i] = src[s];
            i += 1;
        });
        Ok(())
    }

    /// Element-wise unary operation.
    pub fn unary(op: UnaryOp, x: &[f32], out: &mut [f32]) -> Result<()> {
        for (o, &v) in out.iter_mut().zip(x) {
            *o = M::out(scalar::unary_in::<M>(op, v));
        }
        Ok(())
    }

    /// Element-wise backward rule of a unary operation.
    pub fn unary_backward(
        op: UnaryOp,
        x: &[f32],
        y: &[f32],
        g: &[f32],
        out: &mut [f32],
    ) -> Result<()> {
        for i in 0..g.len() {
            out[i] = M::out(scalar::unary_backward_in::<M>(op, x[i], y[i], g[i]));
        }
        Ok(())
    }

    /// Element-wise binary operation on broadcast layouts.
    pub fn binary(
        op: BinaryOp,
        a: &[f32],
        la: &Layout,
        b: &[f32],
        lb: &Layout,
        out: &mut [f32],
    ) -> Result<()> {
        let mut i = 0;
        walk([la, lb], |[ia, ib]| {
            out[i] = M::out(scalar::binary(op, a[ia], b[ib]));
            i += 1;
        });
        Ok(())
    }

    /// Element-wise select on broadcast layouts.
    #[allow(clippy::too_many_arguments)]
    pub fn select(
        cond: &[f32],
        lc: &Layout,
        a: &[f32],
        la: &Layout,
        b: &[f32],
        lb: &Layout,
        out: &mut [f32],
    ) -> Result<()> {
        let mut i = 0;
        walk([lc, la, lb], |[ic, ia, ib]| {
            out[i] = if cond[ic] != 0.0 { a[ia] } else { b[ib] };
            i += 1;
        });
        Ok(())
    }

    /// Sum over flagged dimensions (f64, increasing order, rounded once).
    pub fn sum(x: &[f32], layout: &Layout, reduce: &[bool], out: &mut [f32]) -> Result<()> {
        let (kept, red) = split_reduce(layout, reduce);
        let mut i = 0;
        kept.for_each_index(|base| {
            let mut acc = 0.0f64;
            let inner = Layout {
                offset: base,
                ..red.clone()
            };
            inner.for_each_index(|s| acc += f64::from(x[s]));
            out[i] = M::out(acc as f32);
            i += 1;
        });
        Ok(())
    }

    /// Batched matrix product in the canonical order.
    pub fn matmul(spec: &MatmulSpec, a: &[f32], b: &[f32], out: &mut [f32]) -> Result<()> {
        let MatmulSpec { batch, m, k, n, .. } = *spec;
        if m == 0 || n == 0 {
            return Ok(());
        }
        for bi in 0..batch {
            let c = &mut out[bi * m * n..(bi + 1) * m * n];
            // With k = 0 no operand element is read (and the offsets need not be inside
            // the buffers); every output is the empty sum +0.
            let (ao, bo) = if k == 0 {
                (a.len(), b.len())
            } else {
                (
                    spec.a_offset + bi * spec.a_strides[0],
                    spec.b_offset + bi * spec.b_strides[0],
                )
            };
            scalar::gemm_in::<M>(
                m,
                k,
                n,
                &a[ao..],
                spec.a_strides[1],
                spec.a_strides[2],
                &b[bo..],
                spec.b_strides[1],
                spec.b_strides[2],
                c,
                n,
            );
            for v in c.iter_mut() {
                *v = M::out(*v);
            }
        }
        Ok(())
    }

    /// Softmax or log-softmax of each row.
    pub fn softmax(x: &[f32], rows: usize, cols: usize, log: bool, out: &mut [f32]) -> Result<()> {
        for r in 0..rows {
            let (xs, os) = (
                &x[r * cols..(r + 1) * cols],
                &mut out[r * cols..(r + 1) * cols],
            );
            if log {
                scalar::log_softmax_row_in::<M>(xs, os);
            } else {
                scalar::softmax_row_in::<M>(xs, os);
            }
            for v in os.iter_mut() {
                *v = M::out(*v);
            }
        }
        Ok(())
    }

    /// Backward of [`Self::softmax`].
    pub fn softmax_backward(
        y: &[f32],
        g: &[f32],
        rows: usize,
        cols: usize,
        log: bool,
        out: &mut [f32],
    ) -> Result<()> {
        for r in 0..rows {
            let s = r * cols..(r + 1) * cols;
            let os = &mut out[s.clone()];
            if log {
                scalar::log_softmax_row_backward_in::<M>(&y[s.clone()], &g[s], os);
            } else {
                scalar::softmax_row_backward(&y[s.clone()], &g[s], os);
            }
            for v in os.iter_mut() {
                *v = M::out(*v);
            }
        }
        Ok(())
    }
}

/// Implements [`BackendImpl`] for a unit-struct scalar backend by forwarding to
/// [`RefKernels`] of the given mode.
macro_rules! scalar_backend {
    ($ty:ty, $mode:ty, $name:expr) => {
        impl BackendImpl for $ty {
            type Storage = Vec<f32>;
            exactgrad_core::host_views!();

            fn name(&self) -> String {
                String::from($name)
            }

            fn mode(&self) -> exactgrad_core::ComputeMode {
                <$mode as ModeSpec>::MODE
            }

            fn zeros(&self, len: usize) -> Result<Vec<f32>> {
                try_zeroed_vec("zeros", len)
            }

            fn storage_from_vec(&self, data: Vec<f32>) -> Result<Vec<f32>> {
                Ok(data)
            }

            fn copy_strided_impl(&self, args: Checked<CopyStridedArgs<'_>>) -> Result<()> {
                let CopyStridedArgs { src, layout, out } = args.into_inner();
                RefKernels::<$mode>::copy_strided(src, layout, out)
            }

            fn unary_impl(&self, args: Checked<UnaryArgs<'_>>) -> Result<()> {
                let UnaryArgs { op, x, out } = args.into_inner();
                RefKernels::<$mode>::unary(op, x, out)
            }

            fn unary_backward_impl(&self, args: Checked<UnaryBackwardArgs<'_>>) -> Result<()> {
                let UnaryBackwardArgs { op, x, y, g, out } = args.into_inner();
                RefKernels::<$mode>::unary_backward(op, x, y, g, out)
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
                RefKernels::<$mode>::binary(op, a, la, b, lb, out)
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
                RefKernels::<$mode>::select(cond, lc, a, la, b, lb, out)
            }

            fn sum_impl(&self, args: Checked<SumArgs<'_>>) -> Result<()> {
                let SumArgs {
                    x,
                    layout,
                    reduce,
                    out,
                } = args.into_inner();
                RefKernels::<$mode>::sum(x, layout, reduce, out)
            }

            fn matmul_impl(&self, args: Checked<MatmulArgs<'_>>) -> Result<()> {
                let MatmulArgs { spec, a, b, out } = args.into_inner();
                RefKernels::<$mode>::matmul(spec, a, b, out)
            }

            fn softmax_impl(&self, args: Checked<SoftmaxArgs<'_>>) -> Result<()> {
                let SoftmaxArgs {
                    x,
                    rows,
                    cols,
                    log,
                    out,
                } = args.into_inner();
                RefKernels::<$mode>::softmax(x, rows, cols, log, out)
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
                RefKernels::<$mode>::softmax_backward(y, g, rows, cols, log, out)
            }
        }
    };
}

scalar_backend!(ScalarRefBackend, Exact, "scalar-ref");
#[cfg(feature = "std")]
scalar_backend!(FastScalarRefBackend, crate::lane::Fast, "scalar-ref-fast");
