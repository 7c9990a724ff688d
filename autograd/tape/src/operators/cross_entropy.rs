//! `cross_entropy`: the cross entropy of logits and one class index.
//!
//! Forward, as the eager engine's `cross_entropy` of `[C]` logits: `m = max z`,
//! `s = Σ exp(z_c − m)` in f64 rounded once, `ls = log(s)`, `lp_c = (z_c − m) − ls`
//! (`scalar::log_softmax_row`), `y = −lp_t`; backward `p_c = exp(lp_c)`,
//! `gz_c = (p_c − [c = t]) · g`.

use super::record::{Buffers, Live, Reduction, Source};
use super::{operator_type, Acc, Operator};
use crate::graph::Graph;
use crate::scalar::{row_max, TapeScalar};
use crate::view::{BufferView, Output, Role, NO_RECORD};

operator_type!(
    /// The operator type of [`cross_entropy()`]; register it with
    /// `tape.register_operator::<CrossEntropy<f32>>()`.
    CrossEntropy,
    "cross_entropy"
);

/// The record of [`cross_entropy()`]: `z`'s gradient and values, the gradient of the
/// one-element `y`, and the target class, maximum and log-sum of the forward operation.
#[doc(hidden)]
#[derive(Clone, Copy)]
pub struct CrossEntropySaved<T> {
    buffers: Buffers<T, 1, 1, Reduction>,
    target: usize,
    max: T,
    log_sum: T,
}

impl<T: TapeScalar> Operator<T> for CrossEntropy<T> {
    const NAME: &'static str = "cross_entropy";
    const INPUTS: usize = 1;
    type Saved = CrossEntropySaved<T>;
    fn backward(s: &CrossEntropySaved<T>, live: &mut Live<'_>, acc: [Acc; 3]) {
        let b = &s.buffers;
        let ([z], g) = (b.values(live), b.gy(live)[0]);
        b.emit(live, 0, acc[0], |c| {
            let lp = ((z[c] - s.max) - s.log_sum).canon();
            let p = lp.exp().canon();
            let t = if c == s.target { T::ONE } else { T::ZERO };
            ((p - t) * g).canon()
        });
    }
}

/// Records `y[0] = −log softmax(z)[target]`; `target < z.len()`, `y` has one element.
pub fn cross_entropy<'g, 'z, 'y, T: TapeScalar, R: Role, const M: usize>(
    g: &mut Graph<'g, '_, T, M>,
    z: &'g BufferView<'z, T, R>,
    target: usize,
    y: &'g mut BufferView<'y, T, Output>,
) -> &'g BufferView<'y, T, Output> {
    let (zr, n) = (&z.raw, z.raw.len);
    let fits = target < n && y.raw.len >= 1;
    let Some(pending) = g.begin::<CrossEntropy<T>, 1>([zr], &y.raw, fits, || y.raw.len == 1) else {
        y.raw.record = NO_RECORD;
        return y;
    };
    let zv = zr.values();
    let max = row_max(zv);
    let mut s = T::WIDE_ZERO;
    for &v in zv {
        s = s + (v - max).exp().widen();
    }
    let log_sum = T::narrow(s).ln();
    let lp = ((zv[target] - max) - log_sum).canon();
    y.values_mut()[0] = (-lp).canon();
    g.finish(pending, y, |v| CrossEntropySaved {
        buffers: v.keep([Source::Input], Reduction { len: n }),
        target,
        max,
        log_sum,
    })
}
