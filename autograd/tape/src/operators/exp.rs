//! `exp`: the exponential.
//!
//! Forward `y = exp(x)`; backward `gx = g · y` (the formulas of
//! `exactgrad_backends::scalar::unary` / `unary_backward`, NaN canonicalised).

use super::{unary, unary_operator};
use crate::graph::Graph;
use crate::scalar::TapeScalar;
use crate::view::{BufferView, Output, Role};

unary_operator!(
    /// The operator type of [`exp()`]; register it with `tape.register_operator::<Exp<f32>>()`.
    Exp,
    "exp"
);

impl<T: TapeScalar> unary::Rule<T> for Exp<T> {
    const READS_INPUT: bool = false;
    #[inline]
    fn forward(x: T) -> T {
        x.exp()
    }
    #[inline]
    fn backward(s: T, g: T) -> T {
        g * s
    }
}

/// Records `y = exp(x)` element-wise; `x` and `y` have the same length.
pub fn exp<'g, 'x, 'y, T: TapeScalar, R: Role, const M: usize>(
    g: &mut Graph<'g, '_, T, M>,
    x: &'g BufferView<'x, T, R>,
    y: &'g mut BufferView<'y, T, Output>,
) -> &'g BufferView<'y, T, Output> {
    unary::apply::<T, R, Exp<T>, M>(g, x, y)
}
