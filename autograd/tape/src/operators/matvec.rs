//! `matvec`: a matrix times a vector.
//!
//! Forward `y = W · x` for a row-major `rows × cols` matrix `W`, by the canonical GEMM
//! (`scalar::gemm`: each output one accumulator from +0, column index increasing);
//! backward, as the eager engine's `matmul`, `gW_ij = 0 + g_i · x_j` and
//! `gx_j = Σ_i W_ij · g_i` (one accumulator from +0, row index increasing).

use super::record::{Buffers, Gemv, Live, Source};
use super::{operator_type, Acc, Operator};
use crate::graph::Graph;
use crate::scalar::TapeScalar;
use crate::view::{BufferView, MatrixView, Output, Raw, Role, NO_RECORD};

operator_type!(
    /// The operator type of [`matvec()`]; register it with `tape.register_operator::<MatVec<f32>>()`.
    MatVec,
    "matvec"
);

/// The record of [`matvec()`]: the gradients and values of `W` and `x`, and `y`'s
/// gradient.
#[doc(hidden)]
pub type MatVecSaved<T> = Buffers<T, 2, 2, Gemv>;

/// The backward rule of `y = W · x` for a record whose inputs 0 and 1 are `W` and `x`
/// (`linear` adds its bias as input 2).
pub(crate) fn backward<T: TapeScalar, const N: usize>(
    s: &Buffers<T, N, 2, Gemv>,
    live: &mut Live<'_>,
    acc_w: Acc,
    acc_x: Acc,
) {
    let Gemv { rows, cols } = *s.shape();
    let ([w, x], gy) = (s.values(live), s.gy(live));
    s.emit(live, 0, acc_w, |k| {
        (T::ZERO + gy[k / cols] * x[k % cols]).canon()
    });
    s.emit(live, 1, acc_x, |j| {
        let mut s = T::ZERO;
        for i in 0..rows {
            s = s + w[i * cols + j] * gy[i];
        }
        s.canon()
    });
}

impl<T: TapeScalar> Operator<T> for MatVec<T> {
    const NAME: &'static str = "matvec";
    const INPUTS: usize = 2;
    type Saved = MatVecSaved<T>;
    fn backward(s: &MatVecSaved<T>, live: &mut Live<'_>, acc: [Acc; 3]) {
        backward(s, live, acc[0], acc[1]);
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
    let Some(pending) = g.begin::<MatVec<T>, 2>([wr, xr], &y.raw, fits, || exact) else {
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
    let values = [Source::Input, Source::Input];
    g.finish(pending, y, |v| v.keep(values, Gemv { rows, cols }))
}
