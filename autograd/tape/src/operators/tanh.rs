//! `tanh`: the hyperbolic tangent.
//!
//! Forward `y = tanh(x)`; backward `gx = g · (1 − y · y)` (the formulas of
//! `exactgrad_backends::scalar::unary` / `unary_backward`, NaN canonicalised).

use super::{unary, unary_operator};
use crate::graph::Graph;
use crate::scalar::TapeScalar;
use crate::view::{BufferView, Output, Role};

unary_operator!(
    /// The operator type of [`tanh()`]; register it with `tape.register_operator::<Tanh<f32>>()`.
    Tanh,
    "tanh"
);

impl<T: TapeScalar> unary::Rule<T> for Tanh<T> {
    const READS_INPUT: bool = false;
    #[inline]
    fn forward(x: T) -> T {
        x.tanh()
    }
    #[inline]
    fn backward(s: T, g: T) -> T {
        g * (T::ONE - s * s)
    }
}

/// Records `y = tanh(x)` element-wise; `x` and `y` have the same length.
pub fn tanh<'g, 'x, 'y, T: TapeScalar, R: Role, const M: usize>(
    g: &mut Graph<'g, '_, T, M>,
    x: &'g BufferView<'x, T, R>,
    y: &'g mut BufferView<'y, T, Output>,
) -> &'g BufferView<'y, T, Output> {
    unary::apply::<T, R, Tanh<T>, M>(g, x, y)
}
