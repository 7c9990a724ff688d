//! The element types a tape works on, and the few places where `f32` and `f64` differ.
//!
//! Everything that is plain IEEE `+ − × ÷` and comparison is written once, generically,
//! in the operators. What differs lives here: the transcendental functions, the wide
//! accumulator of long sums, and NaN canonicalisation. The `f32` implementation calls the
//! exact kernels of `exactgrad_backends::scalar` and `exactgrad_backends::transcendental`,
//! so a tape in `f32` computes the same bits as `ScalarRefBackend`; the `f64`
//! implementation uses the same loops in the same order, with `libm` for `exp`, `log` and
//! `tanh`.

use core::fmt::Debug;
use core::ops::{Add, Div, Mul, Neg, Sub};
use exactgrad_backends::{scalar as kernels, transcendental as tr};

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

/// An element type of a tape: `f32` (exact mode, the bits of `ScalarRefBackend`) or `f64`.
pub trait TapeScalar:
    Copy
    + Default
    + Debug
    + PartialEq
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + 'static
    + sealed::Sealed
{
    /// The wider type long sums accumulate in (`f64` for both).
    type Wide: Copy + Add<Output = Self::Wide> + Mul<Output = Self::Wide>;
    /// `+0`.
    const ZERO: Self;
    /// `1`.
    const ONE: Self;
    /// `2`.
    const TWO: Self;
    /// `−∞`.
    const NEG_INFINITY: Self;
    /// `+0` of the wide type.
    const WIDE_ZERO: Self::Wide;

    /// `n` rounded to this type.
    fn from_usize(n: usize) -> Self;
    /// `x` rounded to this type.
    fn from_f64(x: f64) -> Self;
    /// The value as `f64` (exact).
    fn to_f64(self) -> f64;
    /// The value widened exactly.
    fn widen(self) -> Self::Wide;
    /// A wide value rounded once to this type.
    fn narrow(w: Self::Wide) -> Self;
    /// Whether the value is NaN.
    fn is_nan(self) -> bool;
    /// Rewrites a NaN as the canonical NaN (`0x7FC00000` for `f32`); other values pass.
    fn canon(self) -> Self;
    /// `e^x`.
    fn exp(self) -> Self;
    /// The natural logarithm.
    fn ln(self) -> Self;
    /// The hyperbolic tangent.
    fn tanh(self) -> Self;
    /// The logistic function `1 / (1 + e^−x)`.
    fn sigmoid(self) -> Self;

    /// The canonical dot product: one accumulator of this type from `+0`, index increasing.
    fn dot(a: &[Self], b: &[Self]) -> Self;
    /// `y = W·x` for a row-major `rows × cols` matrix by the canonical GEMM (each output
    /// one accumulator from `+0`, column index increasing); `y` is overwritten.
    fn matvec(w: &[Self], rows: usize, cols: usize, x: &[Self], y: &mut [Self]);
    /// The sum in the wide type, increasing index, rounded once.
    fn sum(x: &[Self]) -> Self;
    /// Softmax of one row: `e_i = exp(x_i − max)`, `s = Σ e_i` in the wide type rounded
    /// once, `y_i = e_i / s`.
    fn softmax(x: &[Self], y: &mut [Self]);
}

/// The largest element of a row, the first NaN if there is one (as the ScalarRef kernels).
pub(crate) fn row_max<T: TapeScalar>(x: &[T]) -> T {
    let mut m = T::NEG_INFINITY;
    for &v in x {
        if v.is_nan() {
            return v;
        }
        if v > m {
            m = v;
        }
    }
    // As the scalar kernels' `row_max`: a maximum of −0 is +0.
    m + T::ZERO
}

impl TapeScalar for f32 {
    type Wide = f64;
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    const TWO: Self = 2.0;
    const NEG_INFINITY: Self = f32::NEG_INFINITY;
    const WIDE_ZERO: f64 = 0.0;

    #[inline]
    fn from_usize(n: usize) -> Self {
        n as f32
    }
    #[inline]
    fn from_f64(x: f64) -> Self {
        x as f32
    }
    #[inline]
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    #[inline]
    fn widen(self) -> f64 {
        f64::from(self)
    }
    #[inline]
    fn narrow(w: f64) -> Self {
        w as f32
    }
    #[inline]
    fn is_nan(self) -> bool {
        f32::is_nan(self)
    }
    #[inline]
    fn canon(self) -> Self {
        kernels::canon(self)
    }
    #[inline]
    fn exp(self) -> Self {
        tr::exp(self)
    }
    #[inline]
    fn ln(self) -> Self {
        tr::log(self)
    }
    #[inline]
    fn tanh(self) -> Self {
        tr::tanh(self)
    }
    #[inline]
    fn sigmoid(self) -> Self {
        tr::sigmoid(self)
    }
    fn dot(a: &[Self], b: &[Self]) -> Self {
        kernels::dot(a, b)
    }
    fn matvec(w: &[Self], rows: usize, cols: usize, x: &[Self], y: &mut [Self]) {
        kernels::gemm(rows, cols, 1, w, cols, 1, x, 1, 1, y, 1);
    }
    fn sum(x: &[Self]) -> Self {
        kernels::sum_f64(x)
    }
    fn softmax(x: &[Self], y: &mut [Self]) {
        kernels::softmax_row(x, y);
    }
}

impl TapeScalar for f64 {
    type Wide = f64;
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
    const TWO: Self = 2.0;
    const NEG_INFINITY: Self = f64::NEG_INFINITY;
    const WIDE_ZERO: f64 = 0.0;

    #[inline]
    fn from_usize(n: usize) -> Self {
        n as f64
    }
    #[inline]
    fn from_f64(x: f64) -> Self {
        x
    }
    #[inline]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline]
    fn widen(self) -> f64 {
        self
    }
    #[inline]
    fn narrow(w: f64) -> Self {
        w
    }
    #[inline]
    fn is_nan(self) -> bool {
        f64::is_nan(self)
    }
    #[inline]
    fn canon(self) -> Self {
        self
    }
    #[inline]
    fn exp(self) -> Self {
        libm::exp(self)
    }
    #[inline]
    fn ln(self) -> Self {
        libm::log(self)
    }
    #[inline]
    fn tanh(self) -> Self {
        libm::tanh(self)
    }
    #[inline]
    fn sigmoid(self) -> Self {
        1.0 / (1.0 + libm::exp(-self))
    }
    fn dot(a: &[Self], b: &[Self]) -> Self {
        let mut acc = 0.0;
        for (&x, &y) in a.iter().zip(b) {
            acc += x * y;
        }
        acc
    }
    fn matvec(w: &[Self], rows: usize, cols: usize, x: &[Self], y: &mut [Self]) {
        for i in 0..rows {
            let mut acc = 0.0;
            for p in 0..cols {
                acc += w[i * cols + p] * x[p];
            }
            y[i] = acc;
        }
    }
    fn sum(x: &[Self]) -> Self {
        let mut acc = 0.0;
        for &v in x {
            acc += v;
        }
        acc
    }
    fn softmax(x: &[Self], y: &mut [Self]) {
        let m = row_max(x);
        let mut s = 0.0;
        for (o, &v) in y.iter_mut().zip(x) {
            let e = libm::exp(v - m);
            *o = e;
            s += e;
        }
        for o in y.iter_mut() {
            *o /= s;
        }
    }
}
