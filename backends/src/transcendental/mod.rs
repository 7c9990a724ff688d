//! The exact transcendental functions: fixed polynomial and rational evaluations that use
//! only IEEE f32 `+ − × ÷`, compare/select and integer operations on the bit pattern.
//!
//! The algorithms are written once in [`generic`] (`generic.rs`), over a
//! [`Lane`](crate::lane::Lane) and a multiply-add strategy [`Madd`](crate::lane::Madd),
//! with the coefficient tables in [`coeffs`] (`coeffs.rs`). The plain `fn(f32) -> f32`
//! functions of this module are the [`Exact`] scalar instantiation: they *are* the
//! definition of Exact mode, and every vector instantiation must return the same bits.
//! [`fast`] holds the FMA instantiation (Fast mode, std only). The algorithms,
//! coefficients and measured errors are written in `docs/transcendentals.md`;
//! `tools/fit_transcendentals.py` derives the coefficients. The unit tests are in
//! `tests.rs`, the exhaustive ones (every f32 input) in
//! `backends/tests/exhaustive_transcendentals.rs` and `exhaustive_vector.rs`.
//!
//! Every function returns the canonical NaN `f32::from_bits(0x7FC0_0000)` for a NaN
//! input (and `log` for a negative one).

use crate::lane::Exact;

/// The bit pattern of the NaN every function returns.
pub const CANONICAL_NAN_BITS: u32 = 0x7FC0_0000;

/// e^x (≤ 1 ulp; 0 below −103.98, +∞ above 88.73).
#[inline]
pub fn exp(x: f32) -> f32 {
    generic::exp::<f32, Exact>(x)
}

/// Natural logarithm (≤ 1 ulp; log(±0) = −∞, log(x < 0) = NaN, log(+∞) = +∞).
#[inline]
pub fn log(x: f32) -> f32 {
    generic::log::<f32, Exact>(x)
}

/// Hyperbolic tangent (odd; tanh(±∞) = ±1).
#[inline]
pub fn tanh(x: f32) -> f32 {
    generic::tanh::<f32, Exact>(x)
}

/// Logistic sigmoid 1 / (1 + e^−x), accurate also in the tiny negative tail.
#[inline]
pub fn sigmoid(x: f32) -> f32 {
    generic::sigmoid::<f32, Exact>(x)
}

/// Error function (odd; relatively accurate near 0).
#[inline]
pub fn erf(x: f32) -> f32 {
    generic::erf::<f32, Exact>(x)
}

/// GELU, erf form: x·Φ(x) = x·(1 + erf(x/√2))/2, via the lower tail for x < 0.
#[inline]
pub fn gelu_erf(x: f32) -> f32 {
    generic::gelu_erf::<f32, Exact>(x)
}

/// GELU, tanh form: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), computed as x·σ(2u).
#[inline]
pub fn gelu_tanh(x: f32) -> f32 {
    generic::gelu_tanh::<f32, Exact>(x)
}

/// Derivative of [`gelu_erf`]: Φ(x) + x·φ(x).
#[inline]
pub fn gelu_erf_grad(x: f32) -> f32 {
    generic::gelu_erf_grad::<f32, Exact>(x)
}

/// Derivative of [`gelu_tanh`] with respect to x.
#[inline]
pub fn gelu_tanh_grad(x: f32) -> f32 {
    generic::gelu_tanh_grad::<f32, Exact>(x)
}

/// Fast-mode scalar instantiations: the same algorithms with fused multiply-add in the
/// polynomial evaluations. Deterministic, but not bit-equal to the exact functions.
#[cfg(feature = "std")]
pub mod fast {
    use super::generic;
    use crate::lane::Fast;

    /// e^x, Fast mode.
    pub fn exp(x: f32) -> f32 {
        generic::exp::<f32, Fast>(x)
    }
    /// Natural logarithm, Fast mode.
    pub fn log(x: f32) -> f32 {
        generic::log::<f32, Fast>(x)
    }
    /// Hyperbolic tangent, Fast mode.
    pub fn tanh(x: f32) -> f32 {
        generic::tanh::<f32, Fast>(x)
    }
    /// Logistic sigmoid, Fast mode.
    pub fn sigmoid(x: f32) -> f32 {
        generic::sigmoid::<f32, Fast>(x)
    }
}

/// Coefficient tables (see `docs/transcendentals.md`; each is `c0, c1, …` in increasing
/// powers, evaluated by Horner's rule from the highest power down).
pub mod coeffs;

/// The algorithms, generic over the lane type `L` and the polynomial multiply-add `M`.
///
/// Instantiate with `L = f32, M = Exact` for the definition of Exact mode; a vector lane
/// with `M = Exact` gives the same bits in every lane.
pub mod generic;

#[cfg(test)]
mod tests;
