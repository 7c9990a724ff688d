//! `dot`: the inner product of two buffers of one length.
//!
//! Forward `y = Σ a_i · b_i`, the canonical dot product (one accumulator from +0, index
//! increasing, products rounded before adding: `scalar::dot`); backward, as the eager
//! engine's 1-D `matmul`, `ga_i = 0 + g · b_i`, `gb_i = 0 + a_i · g`.

use super::mul::PairSaved;
use super::{emit, operator_type, slice_of, Acc, Operator};
use crate::graph::Graph;
use crate::scalar::TapeScalar;
use crate::view::{BufferView, Output, Role, NO_RECORD};

operator_type!(
    /// The operator type of [`dot()`]; register it with `tape.register_operator::<Dot<f32>>()`.
    Dot,
    "dot"
);

impl<T: TapeScalar> Operator<T> for Dot<T> {
    const NAME: &'static str = "dot";
    const INPUTS: usize = 2;
    type Saved = PairSaved<T>;
    unsafe fn backward(s: &PairSaved<T>, acc: [Acc; 3]) {
        let (a, b) = unsafe { (slice_of(s.a, s.len), slice_of(s.b, s.len)) };
        let g = unsafe { *s.gy };
        unsafe { emit(s.ga, s.len, acc[0], |i| (T::ZERO + g * b[i]).canon()) };
        unsafe { emit(s.gb, s.len, acc[1], |i| (T::ZERO + a[i] * g).canon()) };
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
        g.begin::<Dot<T>>(&[ar, br], &y.raw, fits, || br.len == n && y.raw.len == 1)
    else {
        y.raw.record = NO_RECORD;
        return y;
    };
    y.values_mut()[0] = T::dot(ar.values(), &br.values()[..n]).canon();
    let saved = PairSaved {
        a: ar.values,
        ga: ar.grad,
        b: br.values,
        gb: br.grad,
        gy: y.raw.grad,
        len: n,
    };
    g.finish::<Dot<T>>(pending, &[ar, br], saved, &mut y.raw);
    y
}
