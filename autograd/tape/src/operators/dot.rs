//! `dot`: the inner product of two buffers of one length.
//!
//! Forward `y = Σ a_i · b_i`, the canonical dot product (one accumulator from +0, index
//! increasing, products rounded before adding: `scalar::dot`); backward, as the eager
//! engine's 1-D `matmul`, `ga_i = 0 + g · b_i`, `gb_i = 0 + a_i · g`.

use super::record::{Buffers, Live, Reduction, Source};
use super::{operator_type, Acc, Operator};
use crate::graph::Graph;
use crate::scalar::TapeScalar;
use crate::view::{BufferView, Output, Role, NO_RECORD};

operator_type!(
    /// The operator type of [`dot()`]; register it with `tape.register_operator::<Dot<f32>>()`.
    Dot,
    "dot"
);

/// The record of [`dot()`] and [`mse()`](super::mse()): the gradients of `a` and `b`,
/// their values, and the gradient of the one-element `y`.
#[doc(hidden)]
pub type PairSaved<T> = Buffers<T, 2, 2, Reduction>;

impl<T: TapeScalar> Operator<T> for Dot<T> {
    const NAME: &'static str = "dot";
    const INPUTS: usize = 2;
    type Saved = PairSaved<T>;
    fn backward(s: &PairSaved<T>, live: &mut Live<'_>, acc: [Acc; 3]) {
        let ([a, b], g) = (s.values(live), s.gy(live)[0]);
        s.emit(live, 0, acc[0], |i| (T::ZERO + g * b[i]).canon());
        s.emit(live, 1, acc[1], |i| (T::ZERO + a[i] * g).canon());
    }
}

/// Records `y[0] = a · b`; `a` and `b` have one length, `y` has one element.
pub fn dot<'g, 'a, 'b, 'y, T: TapeScalar, RA: Role, RB: Role, const M: usize>(
    g: &mut Graph<'g, '_, T, M>,
    a: &'g BufferView<'a, T, RA>,
    b: &'g BufferView<'b, T, RB>,
    y: &'g mut BufferView<'y, T, Output>,
) -> &'g BufferView<'y, T, Output> {
    let (ar, br, n) = (&a.raw, &b.raw, a.raw.len);
    let fits = br.len >= n && y.raw.len >= 1;
    let Some(pending) =
        g.begin::<Dot<T>, 2>([ar, br], &y.raw, fits, || br.len == n && y.raw.len == 1)
    else {
        y.raw.record = NO_RECORD;
        return y;
    };
    y.values_mut()[0] = T::dot(ar.values(), &br.values()[..n]).canon();
    let values = [Source::Input, Source::Input];
    g.finish(pending, y, |v| v.keep(values, Reduction { len: n }))
}
