//! `add`: element-wise sum of two buffers of one length.
//!
//! Forward `y = a + b`; backward `ga = g`, `gb = g` (as the eager engine's `add`).

use super::{emit, operator_type, slice_of, Acc, Operator};
use crate::graph::Graph;
use crate::scalar::TapeScalar;
use crate::view::{BufferView, Output, Role};

operator_type!(
    /// The operator type of [`add()`]; register it with `tape.register_operator::<Add<f32>>()`.
    Add,
    "add"
);

/// The record of [`add()`] and [`sub()`](super::sub()).
#[doc(hidden)]
#[derive(Clone, Copy)]
pub struct AddSaved<T> {
    pub(crate) ga: *mut T,
    pub(crate) gb: *mut T,
    pub(crate) gy: *const T,
    pub(crate) len: usize,
}

impl<T: TapeScalar> Operator<T> for Add<T> {
    const NAME: &'static str = "add";
    const INPUTS: usize = 2;
    type Saved = AddSaved<T>;
    unsafe fn backward(s: &AddSaved<T>, acc: [Acc; 3]) {
        let gy = unsafe { slice_of(s.gy, s.len) };
        unsafe { emit(s.ga, s.len, acc[0], |i| gy[i]) };
        unsafe { emit(s.gb, s.len, acc[1], |i| gy[i]) };
    }
}

/// Records `y = a + b`; all three have one length.
pub fn add<'g, 'a, 'b, 'y, T: TapeScalar, RA: Role, RB: Role, const M: usize>(
    g: &mut Graph<'g, '_, T, M>,
    a: &'g BufferView<'a, T, RA>,
    b: &'g BufferView<'b, T, RB>,
    y: &'g mut BufferView<'y, T, Output>,
) -> &'g BufferView<'y, T, Output> {
    super::apply_pair::<_, _, _, Add<T>, M>(
        g,
        a,
        b,
        y,
        |x, z| x + z,
        |ar, br, yr| AddSaved {
            ga: ar.grad,
            gb: br.grad,
            gy: yr.grad,
            len: yr.len,
        },
    )
}
