//! `softmax`: the softmax of one row.
//!
//! Forward `m = max x`, `e_i = exp(x_i − m)`, `s = Σ e_i` in f64 rounded once,
//! `y_i = e_i / s` (`scalar::softmax_row`); backward `d = Σ y_i · g_i` (exact products,
//! f64 sum, rounded once), `gx_i = y_i · (g_i − d)` (`scalar::softmax_row_backward`).

use super::record::{Buffers, Elementwise, Live, Source};
use super::{operator_type, Acc, Operator};
use crate::graph::Graph;
use crate::scalar::TapeScalar;
use crate::view::{BufferView, Output, Role, NO_RECORD};

operator_type!(
    /// The operator type of [`softmax()`]; register it with `tape.register_operator::<Softmax<f32>>()`.
    Softmax,
    "softmax"
);

/// The record of [`softmax()`]: `x`'s gradient, `y`'s values and `y`'s gradient.
#[doc(hidden)]
pub type SoftmaxSaved<T> = Buffers<T, 1, 1, Elementwise>;

impl<T: TapeScalar> Operator<T> for Softmax<T> {
    const NAME: &'static str = "softmax";
    const INPUTS: usize = 1;
    type Saved = SoftmaxSaved<T>;
    fn backward(s: &SoftmaxSaved<T>, live: &mut Live<'_>, acc: [Acc; 3]) {
        let ([y], gy) = (s.values(live), s.gy(live));
        let mut d = T::WIDE_ZERO;
        for (&yi, &gi) in y.iter().zip(gy) {
            d = d + yi.widen() * gi.widen();
        }
        let d = T::narrow(d);
        s.emit(live, 0, acc[0], |i| (y[i] * (gy[i] - d)).canon());
    }
}

/// Records `y = softmax(x)` over the whole buffer; `x` and `y` have one length.
pub fn softmax<'g, 'x, 'y, T: TapeScalar, R: Role, const M: usize>(
    g: &mut Graph<'g, '_, T, M>,
    x: &'g BufferView<'x, T, R>,
    y: &'g mut BufferView<'y, T, Output>,
) -> &'g BufferView<'y, T, Output> {
    let (xr, n) = (&x.raw, y.raw.len);
    let Some(pending) = g.begin::<Softmax<T>, 1>([xr], &y.raw, xr.len >= n, || xr.len == n) else {
        y.raw.record = NO_RECORD;
        return y;
    };
    let ys = y.values_mut();
    T::softmax(&xr.values()[..n], ys);
    for v in ys.iter_mut() {
        *v = v.canon();
    }
    g.finish(pending, y, |v| {
        v.keep([Source::Output], Elementwise { len: n })
    })
}
