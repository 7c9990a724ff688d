//! `sigmoid`: the logistic function.
//!
//! Forward `y = 1 / (1 + exp(-x))`; backward `gx = g · (y · (1 − y))` (the formulas of
//! `exactgrad_backends::scalar::unary` / `unary_backward`, NaN canonicalised).

use super::{unary, unary_operator};
use crate::graph::Graph;
use crate::scalar::TapeScalar;
use crate::view::{BufferView, Output, Role};

unary_operator!(
    /// The operator type of [`sigmoid()`]; register it with `tape.register_operator::<Sigmoid<f32>>()`.
    Sigmoid,
    "sigmoid"
);

impl<T: TapeScalar> unary::Rule<T> for Sigmoid<T> {
    const READS_INPUT: bool = false;
    #[inline]
    fn forward(x: T) -> T {
        x.sigmoid()
    }
    #[inline]
    fn backward(s: T, g: T) -> T {
        g * (s * (T::ONE - s))
    }
}

/// Records `y = sigmoid(x)` element-wise; `x` and `y` have the same length.
pub fn sigmoid<'g, 'x, 'y, T: TapeScalar, R: Role, const M: usize>(
    g: &mut Graph<'g, '_, T, M>,
    x: &'g BufferView<'x, T, R>,
    y: &'g mut BufferView<'y, T, Output>,
) -> &'g BufferView<'y, T, Output> {
    unary::apply::<T, R, Sigmoid<T>, M>(g, x, y)
}
