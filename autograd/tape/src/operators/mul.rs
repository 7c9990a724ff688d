//! `mul`: element-wise product of two buffers of one length.
//!
//! Forward `y = a · b`; backward `ga = g · b`, `gb = g · a` (as the eager engine's `mul`).

use super::{emit, operator_type, slice_of, Acc, Operator};
use crate::graph::Graph;
use crate::scalar::TapeScalar;
use crate::view::{BufferView, Output, Role};

operator_type!(
    /// The operator type of [`mul()`]; register it with `tape.register_operator::<Mul<f32>>()`.
    Mul,
    "mul"
);

/// The record of [`mul()`], [`dot()`](super::dot()) and [`mse()`](super::mse()).
#[doc(hidden)]
#[derive(Clone, Copy)]
pub struct PairSaved<T> {
    pub(crate) a: *const T,
    pub(crate) ga: *mut T,
    pub(crate) b: *const T,
    pub(crate) gb: *mut T,
    pub(crate) gy: *const T,
    pub(crate) len: usize,
}

impl<T: TapeScalar> Operator<T> for Mul<T> {
    const NAME: &'static str = "mul";
    const INPUTS: usize = 2;
    type Saved = PairSaved<T>;
    unsafe fn backward(s: &PairSaved<T>, acc: [Acc; 3]) {
        let (a, b, gy) = unsafe {
            (
                slice_of(s.a, s.len),
                slice_of(s.b, s.len),
                slice_of(s.gy, s.len),
            )
        };
        unsafe { emit(s.ga, s.len, acc[0], |i| (gy[i] * b[i]).canon()) };
        unsafe { emit(s.gb, s.len, acc[1], |i| (gy[i] * a[i]).canon()) };
    }
}

/// Records `y = a · b` element-wise; all three have one length.
pub fn mul<'g, 'a, 'b, 'y, T: TapeScalar, RA: Role, RB: Role, const M: usize>(
    g: &mut Graph<'g, '_, T, M>,
    a: &'g BufferView<'a, T, RA>,
    b: &'g BufferView<'b, T, RB>,
    y: &'g mut BufferView<'y, T, Output>,
) -> &'g BufferView<'y, T, Output> {
    super::apply_pair::<_, _, _, Mul<T>, M>(
        g,
        a,
        b,
        y,
        |x, z| x * z,
        |ar, br, yr| PairSaved {
            a: ar.values,
            ga: ar.grad,
            b: br.values,
            gb: br.grad,
            gy: yr.grad,
            len: yr.len,
        },
    )
}
