//! `sum`: the sum of all elements.
//!
//! Forward `y = Σ x_i`, accumulated in f64 in increasing index order and rounded once
//! (`scalar::sum_f64`); backward `gx_i = g`.

use super::record::{Buffers, Live, Reduction};
use super::{operator_type, Acc, Operator};
use crate::graph::Graph;
use crate::scalar::TapeScalar;
use crate::view::{BufferView, Output, Role, NO_RECORD};

operator_type!(
    /// The operator type of [`sum()`]; register it with `tape.register_operator::<Sum<f32>>()`.
    Sum,
    "sum"
);

/// The record of [`sum()`]: `x`'s gradient and the gradient of the one-element `y`.
#[doc(hidden)]
pub type SumSaved<T> = Buffers<T, 1, 0, Reduction>;

impl<T: TapeScalar> Operator<T> for Sum<T> {
    const NAME: &'static str = "sum";
    const INPUTS: usize = 1;
    type Saved = SumSaved<T>;
    fn backward(s: &SumSaved<T>, live: &mut Live<'_>, acc: [Acc; 3]) {
        let g = s.gy(live)[0];
        s.emit(live, 0, acc[0], |_| g);
    }
}

/// Records `y[0] = Σ x`; `y` has one element.
pub fn sum<'g, 'x, 'y, T: TapeScalar, R: Role, const M: usize>(
    g: &mut Graph<'g, '_, T, M>,
    x: &'g BufferView<'x, T, R>,
    y: &'g mut BufferView<'y, T, Output>,
) -> &'g BufferView<'y, T, Output> {
    let (xr, n) = (&x.raw, x.raw.len);
    let Some(pending) = g.begin::<Sum<T>, 1>([xr], &y.raw, y.raw.len >= 1, || y.raw.len == 1)
    else {
        y.raw.record = NO_RECORD;
        return y;
    };
    y.values_mut()[0] = T::sum(xr.values()).canon();
    g.finish(pending, y, |v| v.keep([], Reduction { len: n }))
}
