//! `relu`: the rectifier.
//!
//! Forward `y = x > 0 || x is NaN ? x : 0`; backward `gx = y <= 0 ? 0 : g` (the formulas of
//! `exactgrad_backends::scalar::unary` / `unary_backward`, NaN canonicalised).

use super::{unary, unary_operator};
use crate::graph::Graph;
use crate::scalar::TapeScalar;
use crate::view::{BufferView, Output, Role};

unary_operator!(
    /// The operator type of [`relu()`]; register it with `tape.register_operator::<Relu<f32>>()`.
    Relu,
    "relu"
);

impl<T: TapeScalar> unary::Rule<T> for Relu<T> {
    const READS_INPUT: bool = false;
    #[inline]
    fn forward(x: T) -> T {
        if x > T::ZERO || x.is_nan() {
            x
        } else {
            T::ZERO
        }
    }
    #[inline]
    fn backward(s: T, g: T) -> T {
        if s <= T::ZERO {
            T::ZERO
        } else {
            g
        }
    }
}

/// Records `y = relu(x)` element-wise; `x` and `y` have the same length.
pub fn relu<'g, 'x, 'y, T: TapeScalar, R: Role, const M: usize>(
    g: &mut Graph<'g, '_, T, M>,
    x: &'g BufferView<'x, T, R>,
    y: &'g mut BufferView<'y, T, Output>,
) -> &'g BufferView<'y, T, Output> {
    unary::apply::<T, R, Relu<T>, M>(g, x, y)
}
