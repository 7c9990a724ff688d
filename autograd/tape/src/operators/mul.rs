//! `mul`: element-wise product of two buffers of one length.
//!
//! Forward `y = a · b`; backward `ga = g · b`, `gb = g · a` (as the eager engine's `mul`).

use super::record::{Buffers, Elementwise, Live, Source};
use super::{operator_type, Acc, Operator};
use crate::graph::Graph;
use crate::scalar::TapeScalar;
use crate::view::{BufferView, Output, Role};

operator_type!(
    /// The operator type of [`mul()`]; register it with `tape.register_operator::<Mul<f32>>()`.
    Mul,
    "mul"
);

/// The record of [`mul()`]: the gradients of `a` and `b`, their values, and `y`'s gradient.
#[doc(hidden)]
pub type MulSaved<T> = Buffers<T, 2, 2, Elementwise>;

impl<T: TapeScalar> Operator<T> for Mul<T> {
    const NAME: &'static str = "mul";
    const INPUTS: usize = 2;
    type Saved = MulSaved<T>;
    fn backward(s: &MulSaved<T>, live: &mut Live<'_>, acc: [Acc; 3]) {
        let ([a, b], gy) = (s.values(live), s.gy(live));
        s.emit(live, 0, acc[0], |i| (gy[i] * b[i]).canon());
        s.emit(live, 1, acc[1], |i| (gy[i] * a[i]).canon());
    }
}

/// Records `y = a · b` element-wise; all three have one length.
pub fn mul<'g, 'a, 'b, 'y, T: TapeScalar, RA: Role, RB: Role, const M: usize>(
    g: &mut Graph<'g, '_, T, M>,
    a: &'g BufferView<'a, T, RA>,
    b: &'g BufferView<'b, T, RB>,
    y: &'g mut BufferView<'y, T, Output>,
) -> &'g BufferView<'y, T, Output> {
    let values = [Source::Input, Source::Input];
    super::apply_pair::<_, _, _, Mul<T>, 2, M>(g, a, b, y, |x, z| x * z, values)
}
