//! `log`: the natural logarithm.
//!
//! Forward `y = log(x)`; backward `gx = g / x` (the formulas of
//! `exactgrad_backends::scalar::unary` / `unary_backward`, NaN canonicalised).

use super::{unary, unary_operator};
use crate::graph::Graph;
use crate::scalar::TapeScalar;
use crate::view::{BufferView, Output, Role};

unary_operator!(
    /// The operator type of [`log()`]; register it with `tape.register_operator::<Log<f32>>()`.
    Log,
    "log"
);

impl<T: TapeScalar> unary::Rule<T> for Log<T> {
    const READS_INPUT: bool = true;
    #[inline]
    fn forward(x: T) -> T {
        x.ln()
    }
    #[inline]
    fn backward(s: T, g: T) -> T {
        g / s
    }
}

/// Records `y = log(x)` element-wise; `x` and `y` have the same length.
pub fn log<'g, 'x, 'y, T: TapeScalar, R: Role, const M: usize>(
    g: &mut Graph<'g, '_, T, M>,
    x: &'g BufferView<'x, T, R>,
    y: &'g mut BufferView<'y, T, Output>,
) -> &'g BufferView<'y, T, Output> {
    unary::apply::<T, R, Log<T>, M>(g, x, y)
}
