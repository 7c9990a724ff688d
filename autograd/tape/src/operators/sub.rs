//! `sub`: element-wise difference of two buffers of one length.
//!
//! Forward `y = a − b`; backward `ga = g`, `gb = −g` (as the eager engine's `sub`).

use super::add::AddSaved;
use super::record::Live;
use super::{operator_type, Acc, Operator};
use crate::graph::Graph;
use crate::scalar::TapeScalar;
use crate::view::{BufferView, Output, Role};

operator_type!(
    /// The operator type of [`sub()`]; register it with `tape.register_operator::<Sub<f32>>()`.
    Sub,
    "sub"
);

impl<T: TapeScalar> Operator<T> for Sub<T> {
    const NAME: &'static str = "sub";
    const INPUTS: usize = 2;
    type Saved = AddSaved<T>;
    fn backward(s: &AddSaved<T>, live: &mut Live<'_>, acc: [Acc; 3]) {
        let gy = s.gy(live);
        s.emit(live, 0, acc[0], |i| gy[i]);
        s.emit(live, 1, acc[1], |i| (-gy[i]).canon());
    }
}

/// Records `y = a − b`; all three have one length.
pub fn sub<'g, 'a, 'b, 'y, T: TapeScalar, RA: Role, RB: Role, const M: usize>(
    g: &mut Graph<'g, '_, T, M>,
    a: &'g BufferView<'a, T, RA>,
    b: &'g BufferView<'b, T, RB>,
    y: &'g mut BufferView<'y, T, Output>,
) -> &'g BufferView<'y, T, Output> {
    super::apply_pair::<_, _, _, Sub<T>, 0, M>(g, a, b, y, |x, z| x - z, [])
}
