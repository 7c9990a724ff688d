//! `mse`: the mean squared error of a prediction and a target of one length.
//!
//! Forward, as the eager engine's `mse_loss` (`sub`, `pow(2)`, `mean`): `d_i = a_i − b_i`,
//! `y = (Σ d_i · d_i in f64, rounded once) / n`; backward `h = g / n`,
//! `ga_i = h · (2 · d_i)`, `gb_i = −(h · (2 · d_i))`.

use super::dot::PairSaved;
use super::record::{Live, Reduction, Source};
use super::{operator_type, Acc, Operator};
use crate::graph::Graph;
use crate::scalar::TapeScalar;
use crate::view::{BufferView, Output, Role, NO_RECORD};

operator_type!(
    /// The operator type of [`mse()`]; register it with `tape.register_operator::<Mse<f32>>()`.
    Mse,
    "mse"
);

impl<T: TapeScalar> Operator<T> for Mse<T> {
    const NAME: &'static str = "mse";
    const INPUTS: usize = 2;
    type Saved = PairSaved<T>;
    fn backward(s: &PairSaved<T>, live: &mut Live<'_>, acc: [Acc; 3]) {
        let ([a, b], g) = (s.values(live), s.gy(live)[0]);
        let h = (g / T::from_usize(s.shape().len)).canon();
        let c = |i: usize| (h * (T::TWO * (a[i] - b[i]).canon())).canon();
        s.emit(live, 0, acc[0], &c);
        s.emit(live, 1, acc[1], |i| (-c(i)).canon());
    }
}

/// Records `y[0] = mean((a − b)²)`; `a` and `b` have one length, `y` has one element.
pub fn mse<'g, 'a, 'b, 'y, T: TapeScalar, RA: Role, RB: Role, const M: usize>(
    g: &mut Graph<'g, '_, T, M>,
    a: &'g BufferView<'a, T, RA>,
    b: &'g BufferView<'b, T, RB>,
    y: &'g mut BufferView<'y, T, Output>,
) -> &'g BufferView<'y, T, Output> {
    let (ar, br, n) = (&a.raw, &b.raw, a.raw.len);
    let fits = br.len >= n && y.raw.len >= 1;
    let Some(pending) =
        g.begin::<Mse<T>, 2>([ar, br], &y.raw, fits, || br.len == n && y.raw.len == 1)
    else {
        y.raw.record = NO_RECORD;
        return y;
    };
    let (av, bv) = (ar.values(), br.values());
    let mut s = T::WIDE_ZERO;
    for i in 0..n {
        let d = (av[i] - bv[i]).canon();
        s = s + (d * d).canon().widen();
    }
    y.values_mut()[0] = (T::narrow(s).canon() / T::from_usize(n)).canon();
    let values = [Source::Input, Source::Input];
    g.finish(pending, y, |v| v.keep(values, Reduction { len: n }))
}
