//! The operators: one module and one type per operation, registered on a tape with
//! [`Tape::register_operator`](crate::Tape::register_operator) before use.
//!
//! Each module holds the operator type (e.g. [`Relu`]) and the function that records it
//! (e.g. [`relu()`]). Every function takes the [`Graph`](crate::Graph), borrows its inputs
//! and its output for the graph's life, writes the output's values and returns the output
//! for the next operation. On error it leaves the output alone and sets the tape's status.
//!
//! The arithmetic is that of `ScalarRefBackend` in exact mode (for `f32`); each module
//! states its forward and backward formulas.
//!
//! A record keeps pointers to the caller's buffers; only the private module `record` turns them
//! back into slices, so every other module here denies `unsafe` code.
#![deny(unsafe_code)]

use crate::arena::ALIGN;
use crate::scalar::TapeScalar;
use core::mem::{align_of, size_of};

pub mod add;
pub mod cross_entropy;
pub mod dot;
pub mod exp;
pub mod linear;
pub mod log;
pub mod matvec;
pub mod mse;
pub mod mul;
pub(crate) mod record;
pub mod relu;
pub mod scale;
pub mod sigmoid;
pub mod softmax;
pub mod sub;
pub mod sum;
pub mod tanh;

pub use add::{add, Add};
pub use cross_entropy::{cross_entropy, CrossEntropy};
pub use dot::{dot, Dot};
pub use exp::{exp, Exp};
pub use linear::{linear, Linear};
pub use log::{log, Log};
pub use matvec::{matvec, MatVec};
pub use mse::{mse, Mse};
pub use mul::{mul, Mul};
pub use relu::{relu, Relu};
pub use scale::{scale, Scale};
pub use sigmoid::{sigmoid, Sigmoid};
pub use softmax::{softmax, Softmax};
pub use sub::{sub, Sub};
pub use sum::{sum, Sum};
pub use tanh::{tanh, Tanh};

pub(crate) mod sealed {
    /// Only this crate's operators can be registered (their records hold pointers to the
    /// caller's buffers, which only `operators::record` reads).
    pub trait Sealed {}
}

/// How a backward rule adds into one input's gradient.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acc {
    /// The first contribution to an output's gradient: stored as is.
    Set,
    /// Added to what the gradient holds.
    Add,
}

/// An operator type that can be registered on a tape of `T` (implemented by this crate's
/// operators only).
pub trait Operator<T: TapeScalar>: sealed::Sealed + 'static {
    /// The operator's name.
    const NAME: &'static str;
    /// Number of inputs its records track.
    #[doc(hidden)]
    const INPUTS: usize;
    /// What a record keeps for the backward rule: constants, and the caller's buffers as a
    /// `record::Buffers`, whose pointers only `operators::record` can read.
    #[doc(hidden)]
    type Saved: Copy;
    /// The backward rule: adds the record's contributions to its inputs' gradients, in
    /// input order, input `k` with mode `acc[k]`.
    ///
    /// It reads the record's buffers through `live`, which only the backward walk of the
    /// graph that made the record can make (`record::trampoline`), so the rule is safe:
    /// the memory-safety contract is that of `trampoline` and of `record::Views::new`.
    #[doc(hidden)]
    fn backward(saved: &Self::Saved, live: &mut record::Live<'_>, acc: [Acc; 3]);
}

/// The bytes one record of `Op` takes in the arena: a 4-byte header, one 4-byte producer
/// offset per input, then the payload, rounded up to [`ALIGN`].
pub const fn record_size<T: TapeScalar, Op: Operator<T>>() -> usize {
    record_layout::<T, Op>().1
}

/// Payload offset and total size of a record of `Op`.
pub(crate) const fn record_layout<T: TapeScalar, Op: Operator<T>>() -> (usize, usize) {
    assert!(align_of::<Op::Saved>() <= ALIGN && Op::INPUTS <= 3);
    let payload = round_up(4 + 4 * Op::INPUTS, ALIGN);
    (payload, round_up(payload + size_of::<Op::Saved>(), ALIGN))
}

const fn round_up(n: usize, a: usize) -> usize {
    n.div_ceil(a) * a
}

/// The element-wise operators of one input: the formulas and what their record keeps.
pub(crate) mod unary {
    use super::record::{Buffers, Elementwise, Live, Source};
    use super::{Acc, Operator};
    use crate::graph::Graph;
    use crate::scalar::TapeScalar;
    use crate::view::{BufferView, Output, Role};

    /// The formulas of an element-wise operator.
    pub(crate) trait Rule<T: TapeScalar> {
        /// Whether the backward rule reads the input (else the output).
        const READS_INPUT: bool;
        /// `y = f(x)`, before NaN canonicalisation.
        fn forward(x: T) -> T;
        /// The contribution to `x`'s gradient from the saved value (`x` or `y`) and `g`.
        fn backward(saved: T, g: T) -> T;
    }

    /// The record of an element-wise operator: `x`'s gradient, the values the rule reads
    /// (`x` or `y`), `y`'s gradient.
    pub type Saved<T> = Buffers<T, 1, 1, Elementwise>;

    /// Backward rule shared by the element-wise operators.
    pub(crate) fn backward<T: TapeScalar, Op: Rule<T>>(
        s: &Saved<T>,
        live: &mut Live<'_>,
        acc: [Acc; 3],
    ) {
        let [saved] = s.values(live);
        let gy = s.gy(live);
        s.emit(live, 0, acc[0], |i| Op::backward(saved[i], gy[i]).canon());
    }

    /// Records `y = f(x)` element-wise.
    pub(crate) fn apply<'g, 'x, 'y, T, R, Op, const M: usize>(
        g: &mut Graph<'g, '_, T, M>,
        x: &'g BufferView<'x, T, R>,
        y: &'g mut BufferView<'y, T, Output>,
    ) -> &'g BufferView<'y, T, Output>
    where
        T: TapeScalar,
        R: Role,
        Op: Operator<T, Saved = Saved<T>> + Rule<T>,
    {
        let (xr, len) = (&x.raw, y.raw.len);
        let Some(pending) = g.begin::<Op, 1>([xr], &y.raw, xr.len >= len, || xr.len == len) else {
            y.raw.record = crate::view::NO_RECORD;
            return y;
        };
        let xs = xr.values();
        let ys = y.values_mut();
        for (o, &v) in ys.iter_mut().zip(xs) {
            *o = Op::forward(v).canon();
        }
        let source = if Op::READS_INPUT {
            Source::Input
        } else {
            Source::Output
        };
        g.finish(pending, y, |v| v.keep([source], Elementwise { len }))
    }
}

/// Records `y = f(a, b)` element-wise for two inputs of `y`'s length (add, sub, mul):
/// validation, the forward loop and the record, which keeps the values of `a` and `b` as
/// `values` says (both or neither).
pub(crate) fn apply_pair<'g, 'a, 'b, 'y, T, RA, RB, Op, const V: usize, const M: usize>(
    g: &mut crate::graph::Graph<'g, '_, T, M>,
    a: &'g crate::view::BufferView<'a, T, RA>,
    b: &'g crate::view::BufferView<'b, T, RB>,
    y: &'g mut crate::view::BufferView<'y, T, crate::view::Output>,
    f: impl Fn(T, T) -> T,
    values: [record::Source; V],
) -> &'g crate::view::BufferView<'y, T, crate::view::Output>
where
    T: TapeScalar,
    RA: crate::view::Role,
    RB: crate::view::Role,
    Op: Operator<T, Saved = record::Buffers<T, 2, V, record::Elementwise>>,
{
    let (ar, br, n) = (&a.raw, &b.raw, y.raw.len);
    let fits = ar.len >= n && br.len >= n;
    let Some(pending) = g.begin::<Op, 2>([ar, br], &y.raw, fits, || ar.len == n && br.len == n)
    else {
        y.raw.record = crate::view::NO_RECORD;
        return y;
    };
    let (av, bv) = (ar.values(), br.values());
    for (i, o) in y.values_mut().iter_mut().enumerate() {
        *o = f(av[i], bv[i]).canon();
    }
    g.finish(pending, y, |v| {
        v.keep(values, record::Elementwise { len: n })
    })
}

/// Declares an element-wise operator type with its rule.
macro_rules! unary_operator {
    ($(#[$doc:meta])* $name:ident, $label:literal) => {
        $(#[$doc])*
        pub struct $name<T>(core::marker::PhantomData<T>);

        impl<T> crate::operators::sealed::Sealed for $name<T> {}

        impl<T: crate::scalar::TapeScalar> crate::operators::Operator<T> for $name<T> {
            const NAME: &'static str = $label;
            const INPUTS: usize = 1;
            type Saved = crate::operators::unary::Saved<T>;
            fn backward(
                saved: &Self::Saved,
                live: &mut crate::operators::record::Live<'_>,
                acc: [crate::operators::Acc; 3],
            ) {
                crate::operators::unary::backward::<T, Self>(saved, live, acc)
            }
        }

        impl<T> core::fmt::Debug for $name<T> {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str($label)
            }
        }
    };
}
pub(crate) use unary_operator;

/// Declares an operator type (the struct, `Sealed` and `Debug`).
macro_rules! operator_type {
    ($(#[$doc:meta])* $name:ident, $label:literal) => {
        $(#[$doc])*
        pub struct $name<T>(core::marker::PhantomData<T>);

        impl<T> crate::operators::sealed::Sealed for $name<T> {}

        impl<T> core::fmt::Debug for $name<T> {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str($label)
            }
        }
    };
}
pub(crate) use operator_type;
