//! The exact transcendental functions: fixed polynomial and rational evaluations that use
//! only IEEE f32 `+ − × ÷`, compare/select and integer operations on the bit pattern.
//!
//! The algorithms are written once in [`generic`], over a [`Lane`] and a multiply-add
//! strategy [`Madd`]. The plain `fn(f32) -> f32` functions of this module are the
//! [`Exact`] scalar instantiation: they *are* the definition of Exact mode, and every
//! vector instantiation must return the same bits. [`fast`] holds the FMA instantiation
//! (Fast mode, std only). The algorithms, coefficients and measured errors are written
//! in `docs/transcendentals.md`; `tools/fit_transcendentals.py` derives the coefficients.
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
pub mod coeffs {
    /// exp: e^r = 1 + r + r²·P(r), |r| ≤ ln2/2.
    pub const EXP_P: [f32; 6] = [
        0.5,            // 0x3F000000
        0.16666666,     // 0x3E2AAAAA
        0.041666463,    // 0x3D2AAA74
        0.00833357,     // 0x3C088987
        0.001393508,    // 0x3AB6A65F
        0.00019740264,  // 0x394EFDDE
    ];
    /// log: log(1+f) = f − f²/2 + s·(f²/2 + z·R(z)), s = f/(2+f), z = s².
    pub const LOG_R: [f32; 4] = [
        0.6666666,   // 0x3F2AAAAA
        0.40000972,  // 0x3ECCCE13
        0.28498766,  // 0x3E91E9E7
        0.24280019,  // 0x3E78A09D
    ];
    /// tanh: tanh(x) = x + x·(z·P(z)), z = x², |x| < 0.625.
    pub const TANH_P: [f32; 6] = [
        -0.3333333,    // 0xBEAAAAAA
        0.13333221,    // 0x3E08883D
        -0.05394818,   // 0xBD5CF8C4
        0.021706894,   // 0x3CB1D2A8
        -0.008190013,  // 0xBC062F67
        0.0021526811,  // 0x3B0D13FF
    ];
    /// erf: erf(x) = x + x·Q(z), z = x², |x| < 1.
    pub const ERF_Q: [f32; 7] = [
        0.12837917,     // 0x3E0375D4
        -0.37612626,    // 0xBEC0939F
        0.11283579,     // 0x3DE71673
        -0.026853347,   // 0xBCDBFB8D
        0.005187162,    // 0x3BA9F912
        -0.0007997853,  // 0xBA51A8AF
        7.806903e-5,    // 0x38A3B8FE
    ];
    /// G(u) = Φ(−u)·e^(u²/2) ≈ GP(u)/GQ(u) on 0 ≤ u ≤ 15: numerator.
    pub const G_P: [f32; 6] = [
        0.5,            // 0x3F000000
        0.5085894,      // 0x3F0232EA
        0.25151074,     // 0x3E80C604
        0.07170716,     // 0x3D92DB34
        0.01173338,     // 0x3C403D5D
        0.00089895504,  // 0x3A6BA7DA
    ];
    /// G(u) ≈ GP(u)/GQ(u): denominator.
    pub const G_Q: [f32; 7] = [
        1.0,           // 0x3F800000
        1.8150634,     // 0x3FE853FF
        1.4512326,     // 0x3FB9C1FD
        0.65975946,    // 0x3F28E5FF
        0.1820019,     // 0x3E3A5EB5
        0.029411037,   // 0x3CF0EF6A
        0.0022533492,  // 0x3B13ACED
    ];
}

/// The algorithms, generic over the lane type `L` and the polynomial multiply-add `M`.
///
/// Instantiate with `L = f32, M = Exact` for the definition of Exact mode; a vector lane
/// with `M = Exact` gives the same bits in every lane.
pub mod generic {
    use super::coeffs::*;
    use super::CANONICAL_NAN_BITS;
    use crate::lane::{Lane, Madd};

    const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23: (t + MAGIC) - MAGIC rounds t to an integer
    const MAGIC_BITS: u32 = 0x4B40_0000;
    const LOG2E: f32 = 1.442_695; // 0x3FB8AA3B
    const LN2_HI: f32 = 0.693_145_751_953_125; // 45426 * 2^-16, 16 significant bits
    const LN2_LO: f32 = 1.428_606_8e-6; // 0x35BFBE8E, ln2 - LN2_HI rounded
    const SQRT2: f32 = 1.414_213_5; // 0x3FB504F3
    const FRAC_1_SQRT_2PI: f32 = 0.398_942_3; // 0x3ECC422A, 1/sqrt(2 pi)
    const TANH_SMALL: f32 = 0.625;
    const ERF_SMALL: f32 = 1.0;
    // 2*sqrt(2/pi) and 2*sqrt(2/pi)*0.044715 as unevaluated sums hi + lo.
    const GT_C1_HI: f32 = 1.595_769_2; // 0x3FCC422A
    const GT_C1_LO: f32 = -4.534_068e-8; // 0xB342BC9B
    const GT_C3_HI: f32 = 0.071_354_814; // 0x3D922279
    const GT_C3_LO: f32 = 2.398_832_5e-9; // 0x3124D8B5
    const GT_3C3: f32 = 0.214_064_45; // 0x3E5B33B6, 3 * 2*sqrt(2/pi)*0.044715

    #[inline(always)]
    fn k<L: Lane>(v: f32) -> L {
        L::splat(v)
    }

    /// c[0] + x·(c[1] + x·(… + x·c[n−1])), each step `M::madd(acc, x, c[i])`.
    #[inline(always)]
    fn poly<L: Lane, M: Madd<L>>(x: L, c: &[f32]) -> L {
        let mut i = c.len() - 1;
        let mut acc = k::<L>(c[i]);
        while i > 0 {
            i -= 1;
            acc = M::madd(acc, x, k(c[i]));
        }
        acc
    }

    #[inline(always)]
    fn abs<L: Lane>(x: L) -> L {
        L::from_bits(L::bits_and(x.to_bits(), L::bits_splat(0x7FFF_FFFF)))
    }

    #[inline(always)]
    fn sign_bits<L: Lane>(x: L) -> L::Bits {
        L::bits_and(x.to_bits(), L::bits_splat(0x8000_0000))
    }

    /// `r` (non-negative or ±0) with the sign bit `s` or-ed in.
    #[inline(always)]
    fn with_sign<L: Lane>(r: L, s: L::Bits) -> L {
        L::from_bits(L::bits_or(r.to_bits(), s))
    }

    /// `min(x, m)` for non-NaN `m`; a NaN `x` becomes `m` (NaN inputs are restored by `canon`).
    #[inline(always)]
    fn min_c<L: Lane>(x: L, m: f32) -> L {
        L::select(x.lt(k(m)), x, k(m))
    }

    /// The result `r`, or the canonical NaN where `x` or `r` is NaN.
    #[inline(always)]
    fn canon<L: Lane>(x: L, r: L) -> L {
        let nan = L::mask_or(x.is_nan(), r.is_nan());
        L::select(nan, L::from_bits(L::bits_splat(CANONICAL_NAN_BITS)), r)
    }

    /// Veltkamp split: a = hi + lo, hi with at most 12 significant bits.
    #[inline(always)]
    fn split<L: Lane>(a: L) -> (L, L) {
        let t = a.mul(k(4097.0));
        let hi = t.sub(t.sub(a));
        (hi, a.sub(hi))
    }

    /// Dekker's product: a·b = p + e exactly (barring underflow/overflow).
    #[inline(always)]
    fn two_prod<L: Lane>(a: L, b: L) -> (L, L) {
        let p = a.mul(b);
        let (ah, al) = split(a);
        let (bh, bl) = split(b);
        let e = ah.mul(bh).sub(p).add(ah.mul(bl)).add(al.mul(bh)).add(al.mul(bl));
        (p, e)
    }

    /// Knuth's sum: a + b = s + e exactly.
    #[inline(always)]
    fn two_sum<L: Lane>(a: L, b: L) -> (L, L) {
        let s = a.add(b);
        let bb = s.sub(a);
        let e = a.sub(s.sub(bb)).add(b.sub(bb));
        (s, e)
    }

    /// Dekker's sum for |a| ≥ |b| (or a = 0): a + b = s + e exactly.
    #[inline(always)]
    fn fast_two_sum<L: Lane>(a: L, b: L) -> (L, L) {
        let s = a.add(b);
        (s, b.sub(s.sub(a)))
    }

    /// e^(xh + xl) as `(p * f1) * f2`: p in [0.7, 1.42] and two powers of two.
    ///
    /// `xl` is a small correction (|xl| ≲ ulp(xh)). The argument is clamped to
    /// [−170, 89]; callers scale `p` by their own factor before `f1` and `f2` so that a
    /// subnormal result is rounded once.
    #[inline(always)]
    fn exp_parts<L: Lane, M: Madd<L>>(xh: L, xl: L) -> (L, L, L) {
        let lo_lim = xh.lt(k(-170.0));
        let hi_lim = xh.gt(k(89.0));
        let xc = L::select(lo_lim, k(-170.0), L::select(hi_lim, k(89.0), xh));
        let xl = L::select(L::mask_or(lo_lim, hi_lim), k(0.0), xl);
        let t = xc.mul(k(LOG2E)).add(k(MAGIC));
        let kf = t.sub(k(MAGIC));
        let ki = L::bits_sub(t.to_bits(), L::bits_splat(MAGIC_BITS));
        let hi = xc.sub(kf.mul(k(LN2_HI))); // exact
        let lo = kf.mul(k(LN2_LO)).sub(xl);
        let r = hi.sub(lo);
        let q = r.mul(r).mul(poly::<L, M>(r, &EXP_P));
        let (s, e) = fast_two_sum(k(1.0), hi);
        let p = s.add(e.add(q.sub(lo)));
        let k1 = L::bits_sar::<1>(ki);
        let k2 = L::bits_sub(ki, k1);
        let bias = L::bits_splat(127);
        let f1 = L::from_bits(L::bits_shl::<23>(L::bits_add(k1, bias)));
        let f2 = L::from_bits(L::bits_shl::<23>(L::bits_add(k2, bias)));
        (p, f1, f2)
    }

    /// G(u) = Φ(−u)·e^(u²/2) for 0 ≤ u ≤ 15 (rational approximation).
    #[inline(always)]
    fn g_ratio<L: Lane, M: Madd<L>>(u: L) -> L {
        poly::<L, M>(u, &G_P).div(poly::<L, M>(u, &G_Q))
    }

    /// e^x.
    #[inline(always)]
    pub fn exp<L: Lane, M: Madd<L>>(x: L) -> L {
        let (p, f1, f2) = exp_parts::<L, M>(x, k(0.0));
        canon(x, p.mul(f1).mul(f2))
    }

    /// Natural logarithm.
    #[inline(always)]
    pub fn log<L: Lane, M: Madd<L>>(x: L) -> L {
        let tiny = x.lt(k(f32::MIN_POSITIVE));
        let xs = L::select(tiny, x.mul(k(33_554_432.0)), x); // 2^25
        let b = xs.to_bits();
        // biased exponent as an exact float: (2^23 + e) - (2^23 + 127)
        let eb = L::from_bits(L::bits_or(L::bits_shr::<23>(b), L::bits_splat(0x4B00_0000)));
        let e_raw = eb.sub(k(8_388_735.0));
        let m = L::from_bits(L::bits_or(
            L::bits_and(b, L::bits_splat(0x007F_FFFF)),
            L::bits_splat(0x3F80_0000),
        ));
        let big = m.gt(k(SQRT2));
        let m = L::select(big, m.mul(k(0.5)), m);
        let ef = e_raw
            .add(L::select(big, k(1.0), k(0.0)))
            .sub(L::select(tiny, k(25.0), k(0.0)));
        let f = m.sub(k(1.0)); // exact, f in [-0.293, 0.415]
        let s = f.div(k::<L>(2.0).add(f));
        let z = s.mul(s);
        let r = z.mul(poly::<L, M>(z, &LOG_R));
        let (sq, sqe) = two_prod(f, f);
        let hh = sq.mul(k(0.5));
        let hl = sqe.mul(k(0.5));
        let (b1, b1e) = fast_two_sum(f, k::<L>(0.0).sub(hh));
        let (s1, s1e) = fast_two_sum(ef.mul(k(LN2_HI)), b1);
        let t1 = s.mul(hh.add(r)).sub(hl);
        let t2 = t1.add(ef.mul(k(LN2_LO)));
        let t3 = t2.add(b1e.add(s1e));
        let res = s1.add(t3);
        let res = L::select(x.eq(k(f32::INFINITY)), k(f32::INFINITY), res);
        let res = L::select(x.lt(k(0.0)), L::from_bits(L::bits_splat(CANONICAL_NAN_BITS)), res);
        let res = L::select(x.eq(k(0.0)), k(f32::NEG_INFINITY), res);
        canon(x, res)
    }

    /// Hyperbolic tangent.
    #[inline(always)]
    pub fn tanh<L: Lane, M: Madd<L>>(x: L) -> L {
        let sgn = sign_bits(x);
        let ax = abs(x);
        let z = ax.mul(ax);
        let small = ax.add(ax.mul(z.mul(poly::<L, M>(z, &TANH_P))));
        let axc = min_c(ax, 9.5);
        let (p, f1, f2) = exp_parts::<L, M>(axc.add(axc), k(0.0));
        let e = p.mul(f1).mul(f2);
        let large = k::<L>(1.0).sub(k::<L>(2.0).div(e.add(k(1.0))));
        let r = L::select(ax.lt(k(TANH_SMALL)), small, large);
        canon(x, with_sign(r, sgn))
    }

    /// Logistic sigmoid.
    #[inline(always)]
    pub fn sigmoid<L: Lane, M: Madd<L>>(x: L) -> L {
        let ax = abs(x);
        let (p, f1, f2) = exp_parts::<L, M>(k::<L>(0.0).sub(ax), k(0.0));
        let e = p.mul(f1).mul(f2);
        let d = k::<L>(1.0).add(e);
        let pos = k::<L>(1.0).div(d);
        let neg = p.div(d).mul(f1).mul(f2);
        canon(x, L::select(x.lt(k(0.0)), neg, pos))
    }

    /// Error function.
    #[inline(always)]
    pub fn erf<L: Lane, M: Madd<L>>(x: L) -> L {
        let sgn = sign_bits(x);
        let ax = abs(x);
        let z = ax.mul(ax);
        let small = ax.add(ax.mul(poly::<L, M>(z, &ERF_Q)));
        let axc = min_c(ax, 4.0);
        let (h, l) = two_prod(axc, axc);
        let (p, f1, f2) = exp_parts::<L, M>(k::<L>(0.0).sub(h), k::<L>(0.0).sub(l));
        let g = g_ratio::<L, M>(axc.mul(k(SQRT2)));
        // erfc(a) = 2 Φ(−a√2) = 2 e^(−a²) G(a√2)
        let erfc = p.mul(g.add(g)).mul(f1).mul(f2);
        let large = k::<L>(1.0).sub(erfc);
        let r = L::select(ax.lt(k(ERF_SMALL)), small, large);
        canon(x, with_sign(r, sgn))
    }

    /// (p, f1, f2, G) with Φ(−a) = ((p·G)·f1)·f2 for a = min(|x|, 15).
    #[inline(always)]
    fn phi_tail<L: Lane, M: Madd<L>>(x: L) -> (L, L, L, L, L) {
        let axc = min_c(abs(x), 15.0);
        let (h, l) = two_prod(axc, axc);
        let (p, f1, f2) =
            exp_parts::<L, M>(h.mul(k(-0.5)), l.mul(k(-0.5)));
        (axc, p, f1, f2, g_ratio::<L, M>(axc))
    }

    /// GELU, erf form: x·Φ(x).
    #[inline(always)]
    pub fn gelu_erf<L: Lane, M: Madd<L>>(x: L) -> L {
        let (axc, p, f1, f2, g) = phi_tail::<L, M>(x);
        let pg = p.mul(g);
        let q = pg.mul(f1).mul(f2); // Φ(−|x|)
        let xc = k::<L>(0.0).sub(axc);
        let neg = xc.mul(pg).mul(f1).mul(f2);
        let pos = x.mul(k::<L>(1.0).sub(q));
        canon(x, L::select(x.lt(k(0.0)), neg, pos))
    }

    /// Derivative of the erf-form GELU: Φ(x) + x·φ(x).
    #[inline(always)]
    pub fn gelu_erf_grad<L: Lane, M: Madd<L>>(x: L) -> L {
        let (axc, p, f1, f2, g) = phi_tail::<L, M>(x);
        // Φ(−a) − a·φ(a) = e^(−a²/2)·(G(a) − a/√(2π))
        let t = g.sub(axc.mul(k(FRAC_1_SQRT_2PI)));
        let tt = p.mul(t).mul(f1).mul(f2);
        let pos = k::<L>(1.0).sub(tt);
        canon(x, L::select(x.lt(k(0.0)), tt, pos))
    }

    /// v = 2·√(2/π)·(a + 0.044715·a³) as hi + lo, for a = min(|x|, 12); also returns a.
    #[inline(always)]
    fn gelu_tanh_arg<L: Lane>(x: L) -> (L, L, L, L) {
        let a = min_c(abs(x), 12.0);
        let (h, l) = two_prod(a, a);
        let (c, ce) = two_prod(a, h);
        let ce = ce.add(a.mul(l)); // a³ = c + ce
        let (p1, e1) = two_prod(k(GT_C1_HI), a);
        let (p3, e3) = two_prod(k(GT_C3_HI), c);
        let (v, ve) = two_sum(p1, p3);
        let corr = k::<L>(GT_C1_LO)
            .mul(a)
            .add(k::<L>(GT_C3_HI).mul(ce).add(k::<L>(GT_C3_LO).mul(c)));
        let lo = ve.add(e1.add(e3)).add(corr);
        (a, h, v, lo)
    }

    /// GELU, tanh form: x·σ(2u), u = √(2/π)·(x + 0.044715·x³).
    #[inline(always)]
    pub fn gelu_tanh<L: Lane, M: Madd<L>>(x: L) -> L {
        let (a, _, v, vl) = gelu_tanh_arg(x);
        let zero = k::<L>(0.0);
        let (p, f1, f2) = exp_parts::<L, M>(zero.sub(v), zero.sub(vl));
        let e = p.mul(f1).mul(f2);
        let d = k::<L>(1.0).add(e);
        let neg = zero.sub(a).mul(p).div(d).mul(f1).mul(f2);
        let pos = x.div(d);
        canon(x, L::select(x.lt(zero), neg, pos))
    }

    /// Derivative of the tanh-form GELU.
    #[inline(always)]
    pub fn gelu_tanh_grad<L: Lane, M: Madd<L>>(x: L) -> L {
        let (a, h, v, vl) = gelu_tanh_arg(x);
        let zero = k::<L>(0.0);
        let one = k::<L>(1.0);
        let (p, f1, f2) = exp_parts::<L, M>(zero.sub(v), zero.sub(vl));
        let e = p.mul(f1).mul(f2);
        let d = one.add(e);
        // w = a·dv/da, dv/da = 2√(2/π)(1 + 3·0.044715·a²)
        let w = a.mul(k::<L>(GT_C1_HI).add(k::<L>(GT_3C3).mul(h)));
        let neg = p.div(d).mul(one.sub(w.div(d))).mul(f1).mul(f2);
        let pos = one.div(d).mul(one.add(w.mul(e).div(d)));
        canon(x, L::select(x.lt(zero), neg, pos))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smoke() {
        for &x in &[-3.0f32, -1.0, -0.5, 0.0, 0.1, 0.5, 1.0, 2.0, 10.0] {
            let ex = f64::from(x);
            std::println!(
                "{x}: exp {} {} log {} tanh {} {} sig {} erf {}",
                exp(x),
                ex.exp(),
                log(x.abs() + 0.1),
                tanh(x),
                ex.tanh(),
                sigmoid(x),
                erf(x)
            );
        }
    }
}
