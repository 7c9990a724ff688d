//! `linear`: a fully-connected layer, `y = W · x + b`.
//!
//! Forward: the canonical GEMM `W · x` (as [`matvec()`](super::matvec())), then
//! `y_i = (W · x)_i + b_i` (the eager engine's `linear`: `matmul` then `add`); backward
//! `gW_ij = 0 + g_i · x_j`, `gx_j = Σ_i W_ij · g_i`, `gb_i = g_i`.

use super::matvec::fits;
use super::record::{Buffers, Gemv, Live, Source};
use super::{operator_type, Acc, Operator};
use crate::graph::Graph;
use crate::scalar::TapeScalar;
use crate::view::{BufferView, MatrixView, Output, Role, NO_RECORD};

operator_type!(
    /// The operator type of [`linear()`]; register it with `tape.register_operator::<Linear<f32>>()`.
    Linear,
    "linear"
);

/// The record of [`linear()`]: the gradients of `W`, `x` and `b`, the values of `W` and
/// `x`, and `y`'s gradient.
#[doc(hidden)]
pub type LinearSaved<T> = Buffers<T, 3, 2, Gemv>;

impl<T: TapeScalar> Operator<T> for Linear<T> {
    const NAME: &'static str = "linear";
    const INPUTS: usize = 3;
    type Saved = LinearSaved<T>;
    fn backward(s: &LinearSaved<T>, live: &mut Live<'_>, acc: [Acc; 3]) {
        super::matvec::backward(s, live, acc[0], acc[1]);
        let gy = s.gy(live);
        s.emit(live, 2, acc[2], |i| gy[i]);
    }
}

/// Records `y = W · x + b`; `x` has `W.cols()` elements, `b` and `y` have `W.rows()`.
pub fn linear<'g, 'w, 'x, 'b, 'y, T: TapeScalar, RW: Role, RX: Role, RB: Role, const M: usize>(
    g: &mut Graph<'g, '_, T, M>,
    w: &'g MatrixView<'w, T, RW>,
    x: &'g BufferView<'x, T, RX>,
    b: &'g BufferView<'b, T, RB>,
    y: &'g mut BufferView<'y, T, Output>,
) -> &'g BufferView<'y, T, Output> {
    let (wr, xr, br, rows, cols) = (&w.raw, &x.raw, &b.raw, w.rows(), w.cols());
    let (fits, exact) = fits(wr, rows, cols, xr, &y.raw);
    let inputs = [wr, xr, br];
    let Some(pending) = g.begin::<Linear<T>, 3>(inputs, &y.raw, fits && br.len >= rows, || {
        exact && br.len == rows
    }) else {
        y.raw.record = NO_RECORD;
        return y;
    };
    let ys = &mut y.values_mut()[..rows];
    T::matvec(wr.values(), rows, cols, xr.values(), ys);
    let bv = br.values();
    for (i, v) in ys.iter_mut().enumerate() {
        *v = (v.canon() + bv[i]).canon();
    }
    let values = [Source::Input, Source::Input];
    g.finish(pending, y, |v| v.keep(values, Gemv { rows, cols }))
}
