//! `matvec`: a matrix times a vector.
//!
//! Forward `y = W · x` for a row-major `rows × cols` matrix `W`, by the canonical GEMM
//! (`scalar::gemm`: each output one accumulator from +0, column index increasing);
//! backward, as the eager engine's `matmul`, `gW_ij = 0 + g_i · x_j` and
//! `gx_j = Σ_i W_ij · g_i` (one accumulator from +0, row index increasing).

use super::{emit, operator_type, slice_of, Acc, Operator};
use crate::graph::Graph;
use crate::scalar::TapeScalar;
use crate::view::{BufferView, MatrixView, Output, Raw, Role, NO_RECORD};

operator_type!(
    /// The operator type of [`matvec()`]; register it with `tape.register_operator::<MatVec<f32>>()`.
    MatVec,
    "matvec"
);

/// The record of [`matvec()`] and [`linear()`](super::linear()).
#[doc(hidden)]
#[derive(Clone, Copy)]
pub struct MatVecSaved<T> {
    pub(crate) w: *const T,
    pub(crate) gw: *mut T,
    pub(crate) x: *const T,
    pub(crate) gx: *mut T,
    pub(crate) gy: *const T,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
}

impl<T: TapeScalar> MatVecSaved<T> {
    /// The backward rule of `y = W · x` (the bias of `linear` is handled by the caller).
    pub(crate) unsafe fn backward(&self, acc_w: Acc, acc_x: Acc) {
        let (rows, cols) = (self.rows, self.cols);
        let (w, x, gy) = unsafe {
            (
                slice_of(self.w, rows * cols),
                slice_of(self.x, cols),
                slice_of(self.gy, rows),
            )
        };
        unsafe {
            emit(self.gw, rows * cols, acc_w, |k| {
                (T::ZERO + gy[k / cols] * x[k % cols]).canon()
            })
        };
        unsafe {
            emit(self.gx, cols, acc_x, |j| {
                let mut s = T::ZERO;
                for i in 0..rows {
                    s = s + w[i * cols + j] * gy[i];
                }
                s.canon()
            })
        };
    }
}

impl<T: TapeScalar> Operator<T> for MatVec<T> {
    const NAME: &'static str = "matvec";
    const INPUTS: usize = 2;
    type Saved = MatVecSaved<T>;
    unsafe fn backward(s: &MatVecSaved<T>, acc: [Acc; 3]) {
        unsafe { s.backward(acc[0], acc[1]) }
    }
}

/// Whether `w` (`rows × cols`), `x` and `y` are long enough, and whether they agree exactly.
pub(crate) fn fits<T>(
    w: &Raw<T>,
    rows: usize,
    cols: usize,
    x: &Raw<T>,
    y: &Raw<T>,
) -> (bool, bool) {
    let n = rows.checked_mul(cols);
    let fits = n.is_some_and(|n| w.len >= n) && x.len >= cols && y.len >= rows;
    (fits, n == Some(w.len) && x.len == cols && y.len == rows)
}

/// Records `y = W · x`; `x` has `W.cols()` elements and `y` has `W.rows()`.
pub fn matvec<'g, 'w, 'x, 'y, T: TapeScalar, RW: Role, RX: Role, const M: usize>(
    g: &mut Graph<'g, '_, T, M>,
    w: &'g MatrixView<'w, T, RW>,
    x: &'g BufferView<'x, T, RX>,
    y: &'g mut BufferView<'y, T, Output>,
) -> &'g BufferView<'y, T, Output> {
    let (wr, xr, rows, cols) = (&w.raw, &x.raw, w.rows(), w.cols());
    let (fits, exact) = fits(wr, rows, cols, xr, &y.raw);
    let Some(pending) = g.begin::<MatVec<T>>(&[wr, xr], &y.raw, fits, || exact) else {
        y.raw.record = NO_RECORD;
        return y;
    };
    T::matvec(
        wr.values(),
        rows,
        cols,
        xr.values(),
        &mut y.values_mut()[..rows],
    );
    for v in y.values_mut()[..rows].iter_mut() {
        *v = v.canon();
    }
    let saved = MatVecSaved {
        w: wr.values,
        gw: wr.grad,
        x: xr.values,
        gx: xr.grad,
        gy: y.raw.grad,
        rows,
        cols,
    };
    g.finish::<MatVec<T>>(pending, &[wr, xr], saved, &mut y.raw);
    y
}
