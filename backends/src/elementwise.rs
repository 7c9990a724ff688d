//! The formulas of the element-wise operators, each written once over a [`Lane`].
//!
//! [`unary`] and [`unary_backward`] hold the forward value and the backward rule of every
//! [`UnaryOp`], [`binary`] those of every [`BinaryOp`]. Their `f32` instantiation is the
//! scalar reference (`crate::scalar::unary_in` and the loops of `ScalarRefBackend` call
//! it), and the SIMD kernels of `crate::cpu` instantiate the same functions on their lane
//! types, so a vector lane evaluates exactly the scalar sequence of operations
//! (`docs/arithmetic.md` §1, rule 2) and gives its bits. Like the transcendental
//! functions, the formulas never branch on data: special cases are computed and chosen by
//! [`Lane::select`]; they branch only on the operator and its scalar parameters.
//!
//! The operators themselves (names, what each backward rule reads, the parameters the
//! conformance kit tries) are the table of `exactgrad_core::ops`; a new operator is a row
//! there and one arm in each of [`unary`] and [`unary_backward`] here. The results are
//! before NaN canonicalisation, which the kernels apply in exact mode.

use crate::lane::{Exact, Lane, Madd};
use crate::transcendental::generic as tr;
use exactgrad_core::{BinaryOp, UnaryOp, CANONICAL_NAN};

/// Every lane set to `v`.
#[inline(always)]
fn k<L: Lane>(v: f32) -> L {
    L::splat(v)
}

/// `-x` by flipping the sign bit only (adding 2^31 modulo 2^32 flips bit 31), which is
/// IEEE negation (NaN payloads included).
#[inline(always)]
fn neg<L: Lane>(x: L) -> L {
    L::from_bits(L::bits_add(x.to_bits(), L::bits_splat(0x8000_0000)))
}

/// `x^p` for a scalar exponent, as exact mode defines it (`docs/arithmetic.md` §3):
/// `p = 0` gives 1 and `p = 1` gives `x`; `p = 0.5` the IEEE square root and `p = −0.5`
/// its reciprocal (as PyTorch does); an integer `|p| <= 64` repeated squaring (then one
/// reciprocal for negative `p`); anything else `exp(p · log(x))` with the polynomials
/// evaluated by `M`, NaN for a NaN or negative `x` or a NaN `p`, `x = 0` and `x = +∞`
/// giving their limits.
#[inline(always)]
pub fn pow<L: Lane, M: Madd<L>>(x: L, p: f32) -> L {
    if p == 0.0 {
        return k(1.0);
    }
    if p == 1.0 {
        return x;
    }
    if p == 0.5 {
        return x.sqrt();
    }
    if p == -0.5 {
        return k::<L>(1.0).div(x.sqrt());
    }
    if p == (p as i32) as f32 && p.abs() <= 64.0 {
        let mut n = (p as i32).unsigned_abs();
        let mut base = x;
        let mut acc = k::<L>(1.0);
        let mut first = true;
        while n != 0 {
            if n & 1 == 1 {
                acc = if first { base } else { acc.mul(base) };
                first = false;
            }
            n >>= 1;
            if n != 0 {
                base = base.mul(base);
            }
        }
        return if p < 0.0 { k::<L>(1.0).div(acc) } else { acc };
    }
    if p.is_nan() {
        return k(CANONICAL_NAN);
    }
    let general = tr::exp::<L, M>(k::<L>(p).mul(tr::log::<L, M>(x)));
    let (at_inf, at_zero) = if p > 0.0 {
        (f32::INFINITY, 0.0)
    } else {
        (0.0, f32::INFINITY)
    };
    let r = L::select(x.eq(k(f32::INFINITY)), k(at_inf), general);
    let r = L::select(x.eq(k(0.0)), k(at_zero), r);
    L::select(L::mask_or(x.lt(k(0.0)), x.is_nan()), k(CANONICAL_NAN), r)
}

/// The forward value of `op` at `x`, the transcendental polynomials (of sigmoid, tanh,
/// exp, log and pow) evaluated by `M`; GELU always uses the exact definitions, in both
/// modes.
#[inline(always)]
pub fn unary<L: Lane, M: Madd<L>>(op: UnaryOp, x: L) -> L {
    match op {
        UnaryOp::Neg => neg(x),
        UnaryOp::Abs => L::from_bits(L::bits_and(x.to_bits(), L::bits_splat(0x7fff_ffff))),
        UnaryOp::Relu => L::select(L::mask_or(x.gt(k(0.0)), x.is_nan()), x, k(0.0)),
        UnaryOp::LeakyRelu(s) => L::select(x.gt(k(0.0)), x, x.mul(k(s))),
        UnaryOp::Sigmoid => tr::sigmoid::<L, M>(x),
        UnaryOp::Tanh => tr::tanh::<L, M>(x),
        UnaryOp::Exp => tr::exp::<L, M>(x),
        UnaryOp::Log => tr::log::<L, M>(x),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::GeluErf => tr::gelu_erf::<L, Exact>(x),
        UnaryOp::GeluTanh => tr::gelu_tanh::<L, Exact>(x),
        UnaryOp::Pow(p) => pow::<L, M>(x, p),
        UnaryOp::Clamp(lo, hi) => {
            let t = L::select(x.lt(k(lo)), k(lo), x);
            let r = L::select(t.gt(k(hi)), k(hi), t);
            L::select(x.is_nan(), x, r)
        }
        UnaryOp::AddScalar(c) => x.add(k(c)),
        UnaryOp::MulScalar(c) => x.mul(k(c)),
    }
}

/// The backward rule of `op`: the gradient with respect to `x` given the forward input
/// `x`, output `y` and incoming gradient `g`. A rule reads only what
/// [`UnaryOp::backward_reads`] says (the other forward value may be anything); `pow`'s
/// polynomials are evaluated by `M`, GELU's slope is always the exact definition.
#[inline(always)]
pub fn unary_backward<L: Lane, M: Madd<L>>(op: UnaryOp, x: L, y: L, g: L) -> L {
    let zero = k::<L>(0.0);
    match op {
        UnaryOp::Neg => neg(g),
        // Zero and NaN: PyTorch's sgn gives 0 for both.
        UnaryOp::Abs => L::select(x.gt(zero), g, L::select(x.lt(zero), neg(g), zero)),
        UnaryOp::Relu => L::select(y.le(zero), zero, g),
        UnaryOp::LeakyRelu(s) => L::select(x.gt(zero), g, g.mul(k(s))),
        UnaryOp::Sigmoid => g.mul(y.mul(k::<L>(1.0).sub(y))),
        UnaryOp::Tanh => g.mul(k::<L>(1.0).sub(y.mul(y))),
        UnaryOp::Exp => g.mul(y),
        UnaryOp::Log => g.div(x),
        UnaryOp::Sqrt => g.div(k::<L>(2.0).mul(y)),
        UnaryOp::GeluErf => g.mul(tr::gelu_erf_grad::<L, Exact>(x)),
        UnaryOp::GeluTanh => g.mul(tr::gelu_tanh_grad::<L, Exact>(x)),
        UnaryOp::Pow(p) => {
            if p == 0.0 {
                zero
            } else {
                g.mul(k::<L>(p).mul(pow::<L, M>(x, p - 1.0)))
            }
        }
        UnaryOp::Clamp(lo, hi) => {
            // PyTorch passes the gradient strictly inside the bounds; an absent (infinite)
            // bound does not stop it, even at NaN.
            let t = x.eq(x);
            let all = L::mask_or(t, L::mask_not(t));
            let above = if lo == f32::NEG_INFINITY {
                all
            } else {
                x.gt(k(lo))
            };
            let below = if hi == f32::INFINITY {
                all
            } else {
                x.lt(k(hi))
            };
            L::select(L::mask_and(above, below), g, zero)
        }
        UnaryOp::AddScalar(_) => g,
        UnaryOp::MulScalar(c) => g.mul(k(c)),
    }
}

/// The value of `op` at `a`, `b` (one IEEE operation).
#[inline(always)]
pub fn binary<L: Lane>(op: BinaryOp, a: L, b: L) -> L {
    match op {
        BinaryOp::Add => a.add(b),
        BinaryOp::Sub => a.sub(b),
        BinaryOp::Mul => a.mul(b),
        BinaryOp::Div => a.div(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use exactgrad_core::BackwardReads;

    /// Test inputs: a sweep of bit patterns (every sign, exponent and some mantissas) and
    /// the special values.
    fn inputs() -> impl Iterator<Item = f32> {
        let specials = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            2.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ];
        (0..u32::MAX / 0x0003_0001)
            .map(|i| f32::from_bits(i * 0x0003_0001))
            .chain(specials)
            .chain([f32::NAN, f32::from_bits(0xFFC0_0001)])
    }

    fn same(a: f32, b: f32) -> bool {
        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
    }

    /// The backward rules read only what the table says: the other forward value is
    /// replaced by the gradient, as autograd passes it.
    #[test]
    fn backward_rules_read_only_what_the_table_says() {
        for &op in UnaryOp::SAMPLES {
            for (i, x) in inputs().enumerate() {
                let y = unary::<f32, Exact>(op, x);
                let g = f32::from_bits(0x3F80_0000 ^ (i as u32).wrapping_mul(0x9E37_79B9));
                let want = unary_backward::<f32, Exact>(op, x, y, g);
                let got = match op.backward_reads() {
                    BackwardReads::Input => unary_backward::<f32, Exact>(op, x, g, g),
                    BackwardReads::Output => unary_backward::<f32, Exact>(op, g, y, g),
                    BackwardReads::Neither => unary_backward::<f32, Exact>(op, g, g, g),
                };
                assert!(
                    same(got, want),
                    "{op:?} at x = {x:e}, g = {g:e}: {got:e} with only what it reads, {want:e}"
                );
            }
        }
    }

    #[test]
    fn pow_special_cases() {
        let p = |x: f32, e: f32| pow::<f32, Exact>(x, e);
        assert_eq!(p(3.0, 2.0), 9.0);
        assert_eq!(p(2.0, -2.0), 0.25);
        assert_eq!(p(-2.0, 3.0), -8.0);
        assert_eq!(p(f32::NAN, 0.0), 1.0);
        assert!(p(-2.0, 0.5).is_nan());
        assert!(p(-2.0, 2.5).is_nan());
        assert!(p(2.0, f32::NAN).is_nan());
        assert_eq!(p(0.0, -1.0), f32::INFINITY);
        assert_eq!(p(0.0, 2.5), 0.0);
        assert_eq!(p(0.0, -2.5), f32::INFINITY);
        assert_eq!(p(f32::INFINITY, 2.5), f32::INFINITY);
        assert_eq!(p(f32::INFINITY, -2.5), 0.0);
        assert_eq!(p(4.0, -0.5), 0.5);
    }

    #[test]
    fn neg_and_abs_touch_only_the_sign_bit() {
        for x in inputs() {
            let n = unary::<f32, Exact>(UnaryOp::Neg, x);
            assert_eq!(n.to_bits(), x.to_bits() ^ 0x8000_0000);
            let a = unary::<f32, Exact>(UnaryOp::Abs, x);
            assert_eq!(a.to_bits(), x.to_bits() & 0x7FFF_FFFF);
        }
    }
}
