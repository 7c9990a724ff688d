//! The scalar definitions of every kernel: plain loops in the canonical order.
//!
//! These functions are the arithmetic contract of exact mode written as simply as
//! possible (see `docs/arithmetic.md`). They are `no_std` and allocation-free so that the
//! arena tape can reuse them. Every SIMD path must reproduce their bits. The per-element
//! formulas of the element-wise operators ([`unary`], [`unary_backward`], [`binary`],
//! [`powf`]) are the `f32` instantiations of [`crate::elementwise`], which the SIMD
//! kernels instantiate on their lanes.

use crate::elementwise;
use crate::lane::{Exact, Madd};
pub use crate::sqrt::{sqrt, sqrt_digits};
use crate::transcendental::generic as tr;
use exactgrad_core::{BinaryOp, UnaryOp, CANONICAL_NAN};

/// What a compute mode means for the kernels: its multiply-add and whether NaN results
/// are canonicalised. Implemented by the markers [`Exact`] and [`crate::lane::Fast`].
pub trait ModeSpec: Madd<f32> + Copy + Default + Send + Sync + core::fmt::Debug + 'static {
    /// The mode this marker stands for.
    const MODE: exactgrad_core::ComputeMode;

    /// `canon(v)` in exact mode, `v` unchanged in fast mode.
    #[inline(always)]
    fn out(v: f32) -> f32 {
        if matches!(Self::MODE, exactgrad_core::ComputeMode::Exact) {
            canon(v)
        } else {
            v
        }
    }
}

impl ModeSpec for Exact {
    const MODE: exactgrad_core::ComputeMode = exactgrad_core::ComputeMode::Exact;
}

#[cfg(feature = "std")]
impl ModeSpec for crate::lane::Fast {
    const MODE: exactgrad_core::ComputeMode = exactgrad_core::ComputeMode::Fast;
}

/// Rewrites any NaN to the canonical NaN `0x7FC00000`; other values pass unchanged.
#[inline]
pub fn canon(x: f32) -> f32 {
    if x.is_nan() {
        CANONICAL_NAN
    } else {
        x
    }
}

/// `x^p` for a scalar exponent, as exact mode defines it: the `f32` instantiation of
/// [`elementwise::pow`] (see there and `docs/arithmetic.md` §3).
pub fn powf(x: f32, p: f32) -> f32 {
    powf_in::<Exact>(x, p)
}

/// [`powf`] with the polynomials evaluated by the multiply-add `M` (Fast mode uses FMA).
pub fn powf_in<M: Madd<f32>>(x: f32, p: f32) -> f32 {
    elementwise::pow::<f32, M>(x, p)
}

/// One element of [`UnaryOp`] in exact mode (before NaN canonicalisation).
#[inline]
pub fn unary(op: UnaryOp, x: f32) -> f32 {
    unary_in::<Exact>(op, x)
}

/// One element of [`UnaryOp`] with the transcendental polynomials evaluated by `M`: the
/// `f32` instantiation of [`elementwise::unary`], where the formulas are.
#[inline]
pub fn unary_in<M: Madd<f32>>(op: UnaryOp, x: f32) -> f32 {
    elementwise::unary::<f32, M>(op, x)
}

/// One element of the backward rule of a [`UnaryOp`]: the gradient with respect to `x`
/// given the forward input `x`, output `y` and incoming gradient `g`.
#[inline]
pub fn unary_backward(op: UnaryOp, x: f32, y: f32, g: f32) -> f32 {
    unary_backward_in::<Exact>(op, x, y, g)
}

/// [`unary_backward`] with the polynomials (of `pow`) evaluated by `M`: the `f32`
/// instantiation of [`elementwise::unary_backward`], where the formulas are.
#[inline]
pub fn unary_backward_in<M: Madd<f32>>(op: UnaryOp, x: f32, y: f32, g: f32) -> f32 {
    elementwise::unary_backward::<f32, M>(op, x, y, g)
}

/// One element of a [`BinaryOp`] (the `f32` instantiation of [`elementwise::binary`]).
#[inline]
pub fn binary(op: BinaryOp, a: f32, b: f32) -> f32 {
    elementwise::binary::<f32>(op, a, b)
}

/// Sum of `x` in f64, increasing index order, from +0, rounded once to f32.
///
/// Not `Iterator::sum`, which starts at `−0.0`: the two differ where the sum is a zero.
///
/// ```
/// use exactgrad_backends::scalar::sum_f64;
/// assert_eq!(sum_f64(&[]).to_bits(), 0.0f32.to_bits()); // +0
/// assert_eq!(sum_f64(&[-0.0, -0.0]).to_bits(), 0.0f32.to_bits()); // +0 ⊕ −0 = +0
/// let std_sum: f64 = [-0.0f32, -0.0].iter().map(|&v| f64::from(v)).sum();
/// assert_eq!(std_sum.to_bits(), (-0.0f64).to_bits()); // std's start, −0.0
/// let empty: f32 = [0.0f32; 0].iter().sum();
/// assert_eq!(empty.to_bits(), (-0.0f32).to_bits());
/// ```
pub fn sum_f64(x: &[f32]) -> f32 {
    let mut acc = 0.0f64;
    for &v in x {
        acc += f64::from(v);
    }
    acc as f32
}

/// The canonical dot product: one f32 accumulator from +0, index increasing, each
/// product rounded before it is added.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "dot: lengths differ");
    let mut acc = 0.0f32;
    for i in 0..a.len() {
        acc += a[i] * b[i];
    }
    acc
}

/// The canonical GEMM over strided row-major-addressed matrices:
/// `c[i*ldc + j] = Σ_p a[i*rsa + p*csa] * b[p*rsb + j*csb]`, each output one f32
/// accumulator from +0, `p` increasing, multiply and add rounded separately. Outputs are
/// overwritten (not accumulated into).
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    m: usize,
    k: usize,
    n: usize,
    a: &[f32],
    rsa: usize,
    csa: usize,
    b: &[f32],
    rsb: usize,
    csb: usize,
    c: &mut [f32],
    ldc: usize,
) {
    gemm_in::<Exact>(m, k, n, a, rsa, csa, b, rsb, csb, c, ldc)
}

/// [`gemm`] with each step `acc = M::madd(a, b, acc)`: [`Exact`] rounds product and sum
/// separately, `Fast` fuses them.
#[allow(clippy::too_many_arguments)]
pub fn gemm_in<M: Madd<f32>>(
    m: usize,
    k: usize,
    n: usize,
    a: &[f32],
    rsa: usize,
    csa: usize,
    b: &[f32],
    rsb: usize,
    csb: usize,
    c: &mut [f32],
    ldc: usize,
) {
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0.0f32;
            for p in 0..k {
                acc = M::madd(a[i * rsa + p * csa], b[p * rsb + j * csb], acc);
            }
            c[i * ldc + j] = acc;
        }
    }
}

/// Largest element of a row, NaN if any element is NaN, with a zero maximum taken as
/// `+0` (`m + 0`), so the result does not depend on the order in which elements are
/// compared. Every SIMD path computes the same value.
pub fn row_max(x: &[f32]) -> f32 {
    let mut m = f32::NEG_INFINITY;
    for &v in x {
        if v.is_nan() {
            return CANONICAL_NAN;
        }
        if v > m {
            m = v;
        }
    }
    m + 0.0
}

/// Softmax of one row: `m = max x`, `e_i = exp(x_i - m)`, `s = Σ e_i` in f64 rounded once,
/// `y_i = e_i / s`. An empty row writes nothing.
pub fn softmax_row(x: &[f32], out: &mut [f32]) {
    softmax_row_in::<Exact>(x, out)
}

/// [`softmax_row`] with `exp` evaluated by `M`.
pub fn softmax_row_in<M: Madd<f32>>(x: &[f32], out: &mut [f32]) {
    let m = row_max(x);
    let mut s = 0.0f64;
    for (o, &v) in out.iter_mut().zip(x) {
        let e = tr::exp::<f32, M>(v - m);
        *o = e;
        s += f64::from(e);
    }
    let s = s as f32;
    for o in out.iter_mut() {
        *o /= s;
    }
}

/// Log-softmax of one row: `y_i = (x_i - m) - log(s)` with `m` and `s` as in
/// [`softmax_row`].
pub fn log_softmax_row(x: &[f32], out: &mut [f32]) {
    log_softmax_row_in::<Exact>(x, out)
}

/// [`log_softmax_row`] with `exp` and `log` evaluated by `M`.
pub fn log_softmax_row_in<M: Madd<f32>>(x: &[f32], out: &mut [f32]) {
    let m = row_max(x);
    let mut s = 0.0f64;
    for &v in x {
        s += f64::from(tr::exp::<f32, M>(v - m));
    }
    let ls = tr::log::<f32, M>(s as f32);
    for (o, &v) in out.iter_mut().zip(x) {
        *o = (v - m) - ls;
    }
}

/// Backward of [`softmax_row`]: `d = Σ g_i·y_i` (exact f64 products, f64 sum, rounded
/// once), `out_i = y_i · (g_i − d)`.
pub fn softmax_row_backward(y: &[f32], g: &[f32], out: &mut [f32]) {
    let mut d = 0.0f64;
    for (&yi, &gi) in y.iter().zip(g) {
        d += f64::from(yi) * f64::from(gi);
    }
    let d = d as f32;
    for ((o, &yi), &gi) in out.iter_mut().zip(y).zip(g) {
        *o = yi * (gi - d);
    }
}

/// Backward of [`log_softmax_row`]: `s = Σ g_i` in f64 rounded once,
/// `out_i = g_i − exp(y_i)·s`.
pub fn log_softmax_row_backward(y: &[f32], g: &[f32], out: &mut [f32]) {
    log_softmax_row_backward_in::<Exact>(y, g, out)
}

/// [`log_softmax_row_backward`] with `exp` evaluated by `M`.
pub fn log_softmax_row_backward_in<M: Madd<f32>>(y: &[f32], g: &[f32], out: &mut [f32]) {
    let s = sum_f64(g);
    for ((o, &yi), &gi) in out.iter_mut().zip(y).zip(g) {
        *o = gi - tr::exp::<f32, M>(yi) * s;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_powers_are_products() {
        assert_eq!(powf(3.0, 2.0), 9.0);
        assert_eq!(powf(2.0, -2.0), 0.25);
        assert_eq!(powf(-2.0, 3.0), -8.0);
        assert_eq!(powf(f32::NAN, 0.0), 1.0);
        assert!(powf(-2.0, 0.5).is_nan());
        assert_eq!(powf(0.0, -1.0), f32::INFINITY);
    }

    #[test]
    fn gemm_is_canonical_order() {
        // 1e8 + 1 - 1e8 in f32 loses the 1 only if added in this order.
        let a = [1e8f32, 1.0, -1e8];
        let b = [1.0f32, 1.0, 1.0];
        let mut c = [0.0f32];
        gemm(1, 3, 1, &a, 3, 1, &b, 1, 1, &mut c, 1);
        assert_eq!(c[0], ((1e8f32 + 1.0) - 1e8));
        assert_eq!(c[0], dot(&a, &b));
    }

    #[test]
    fn relu_and_clamp_keep_nan() {
        assert!(unary(UnaryOp::Relu, f32::NAN).is_nan());
        assert!(unary(UnaryOp::Clamp(0.0, 1.0), f32::NAN).is_nan());
        assert_eq!(unary(UnaryOp::Clamp(0.0, 1.0), 2.0), 1.0);
        assert_eq!(unary(UnaryOp::Relu, -0.0).to_bits(), 0.0f32.to_bits());
    }
}
