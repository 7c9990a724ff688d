//! `scale`: multiplication by a constant.
//!
//! Forward `y = x · c`; backward `gx = g · c` (the eager engine's `mul_scalar`).

use super::record::{Buffers, Elementwise, Live};
use super::{operator_type, Acc, Operator};
use crate::graph::Graph;
use crate::scalar::TapeScalar;
use crate::view::{BufferView, Output, Role, NO_RECORD};

operator_type!(
    /// The operator type of [`scale()`]; register it with `tape.register_operator::<Scale<f32>>()`.
    Scale,
    "scale"
);

/// The record of [`scale()`]: `x`'s gradient, `y`'s gradient and the constant.
#[doc(hidden)]
#[derive(Clone, Copy)]
pub struct ScaleSaved<T> {
    buffers: Buffers<T, 1, 0, Elementwise>,
    c: T,
}

impl<T: TapeScalar> Operator<T> for Scale<T> {
    const NAME: &'static str = "scale";
    const INPUTS: usize = 1;
    type Saved = ScaleSaved<T>;
    fn backward(s: &ScaleSaved<T>, live: &mut Live<'_>, acc: [Acc; 3]) {
        let (b, c) = (&s.buffers, s.c);
        let gy = b.gy(live);
        b.emit(live, 0, acc[0], |i| (gy[i] * c).canon());
    }
}

/// Records `y = x · c` element-wise for a constant `c` (which gets no gradient).
pub fn scale<'g, 'x, 'y, T: TapeScalar, R: Role, const M: usize>(
    g: &mut Graph<'g, '_, T, M>,
    x: &'g BufferView<'x, T, R>,
    c: T,
    y: &'g mut BufferView<'y, T, Output>,
) -> &'g BufferView<'y, T, Output> {
    let (xr, n) = (&x.raw, y.raw.len);
    let Some(pending) = g.begin::<Scale<T>, 1>([xr], &y.raw, xr.len >= n, || xr.len == n) else {
        y.raw.record = NO_RECORD;
        return y;
    };
    let xv = xr.values();
    for (i, o) in y.values_mut().iter_mut().enumerate() {
        *o = (xv[i] * c).canon();
    }
    g.finish(pending, y, |v| ScaleSaved {
        buffers: v.keep([], Elementwise { len: n }),
        c,
    })
}
