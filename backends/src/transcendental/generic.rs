//! The algorithms, generic over the lane type `L` and the polynomial multiply-add `M`.
//!
//! Instantiate with `L = f32, M = Exact` for the definition of Exact mode; a vector lane
//! with `M = Exact` gives the same bits in every lane.

use super::coeffs::*;
use super::CANONICAL_NAN_BITS;
use crate::lane::{Lane, Madd};

const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23: (t + MAGIC) - MAGIC rounds t to an integer
const MAGIC_BITS: u32 = 0x4B40_0000;
const LOG2E: f32 = core::f32::consts::LOG2_E; // 0x3FB8AA3B
const LN2_HI: f32 = 0.693_145_75; // 0x3F317200 = 45426 * 2^-16, 16 significant bits
const LN2_LO: f32 = 1.428_606_8e-6; // 0x35BFBE8E, ln2 - LN2_HI rounded
const SQRT2: f32 = core::f32::consts::SQRT_2; // 0x3FB504F3
                                              // ln(sqrt(2 pi)) and ln(sqrt(pi/2)) as hi + lo
const LN_SQRT_2PI_HI: f32 = 0.918_938_5; // 0x3F6B3F8E
const LN_SQRT_2PI_LO: f32 = 1.563_417_7e-8; // 0x32864BEB
const LN_SQRT_PI_2_HI: f32 = 0.225_791_35; // 0x3E6735D9
const LN_SQRT_PI_2_LO: f32 = 2.637_670_3e-9; // 0x31354263
const TANH_SMALL: f32 = 0.625;
const ERF_SMALL: f32 = 1.0;
// 2*sqrt(2/pi) and 2*sqrt(2/pi)*0.044715 as unevaluated sums hi + lo.
const GT_C1_HI: f32 = 1.595_769_2; // 0x3FCC422A
const GT_C1_LO: f32 = -4.534_068e-8; // 0xB342BC9B
const GT_C3_HI: f32 = 0.071_354_814; // 0x3D922279
const GT_C3_LO: f32 = 2.398_832_5e-9; // 0x3124D8B5

#[cfg(test)]
#[test]
fn constant_literals_have_the_documented_bits() {
    let c = [
        (LOG2E, 0x3FB8_AA3B),
        (LN2_HI, 0x3F31_7200),
        (LN2_LO, 0x35BF_BE8E),
        (SQRT2, 0x3FB5_04F3),
        (LN_SQRT_2PI_HI, 0x3F6B_3F8E),
        (LN_SQRT_2PI_LO, 0x3286_4BEB),
        (LN_SQRT_PI_2_HI, 0x3E67_35D9),
        (LN_SQRT_PI_2_LO, 0x3135_4263),
        (GT_C1_HI, 0x3FCC_422A),
        (GT_C1_LO, 0xB342_BC9B),
        (GT_C3_HI, 0x3D92_2279),
        (GT_C3_LO, 0x3124_D8B5),
    ];
    for (i, (v, b)) in c.iter().enumerate() {
        assert_eq!(v.to_bits(), *b, "constant {i}");
    }
}

#[inline(always)]
fn k<L: Lane>(v: f32) -> L {
    L::splat(v)
}

/// `c[0] + x·(c[1] + x·(… + x·c[n−1]))`, each step `M::madd(acc, x, c[i])`.
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
    let e = ah
        .mul(bh)
        .sub(p)
        .add(ah.mul(bl))
        .add(al.mul(bh))
        .add(al.mul(bl));
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
    // below −170 every consumer's result is ±0: make it exactly so (f1 = 0) instead of
    // underflowing, which is slow on many CPUs
    let f1 = L::select(
        lo_lim,
        k(0.0),
        L::from_bits(L::bits_shl::<23>(L::bits_add(k1, bias))),
    );
    let f2 = L::from_bits(L::bits_shl::<23>(L::bits_add(k2, bias)));
    (p, f1, f2)
}

/// D(u) = (u + H0) + u·R(u), the denominator of Φ(−u) = φ(u)/D(u), for 0 ≤ u ≤ 15.
#[inline(always)]
fn mills_den<L: Lane, M: Madd<L>>(u: L) -> L {
    let r = poly::<L, M>(u, &MILLS_P).div(poly::<L, M>(u, &MILLS_Q));
    let (s, se) = two_sum(u, k(MILLS_H0[0])); // u + H0_HI exactly
    s.add(u.mul(r).add(k(MILLS_H0[1])).add(se))
}

/// 1/d for d = dh + dl (|dl| ≤ ulp(dh)/2, dh ≥ 1): 1/dh corrected by −dl/dh².
#[inline(always)]
fn recip2<L: Lane>(dh: L, dl: L) -> L {
    let q = k::<L>(1.0).div(dh);
    q.sub(q.mul(q).mul(dl))
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
    let res = L::select(
        x.lt(k(0.0)),
        L::from_bits(L::bits_splat(CANONICAL_NAN_BITS)),
        res,
    );
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
    let (dh, dl) = fast_two_sum(k(1.0), e); // 1 + e exactly
    let pos = recip2(dh, dl);
    let qn = p.div(dh);
    let neg = qn.sub(qn.mul(pos).mul(dl)).mul(f1).mul(f2);
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
    // erfc(a) = 2 Φ(−a√2) = e^(−a² − ln√(π/2)) / D(u), u = a√2
    let (eh, el) = two_sum(k::<L>(0.0).sub(h), k(-LN_SQRT_PI_2_HI));
    let el = el.sub(l.add(k(LN_SQRT_PI_2_LO)));
    let (p, f1, f2) = exp_parts::<L, M>(eh, el);
    let den = mills_den::<L, M>(axc.mul(k(SQRT2)));
    let erfc = p.div(den).mul(f1).mul(f2);
    let large = k::<L>(1.0).sub(erfc);
    let r = L::select(ax.lt(k(ERF_SMALL)), small, large);
    canon(x, with_sign(r, sgn))
}

/// For a = min(|x|, 15): (a, p, f1, f2, den) with φ(a) = (p·f1)·f2 and
/// Φ(−a) = ((p/den)·f1)·f2, den = D(a).
#[inline(always)]
fn phi_tail<L: Lane, M: Madd<L>>(x: L) -> (L, L, L, L, L) {
    let ax = abs(x);
    let axc = min_c(ax, 15.0);
    let (h, l) = two_prod(axc, axc);
    // φ(a) = e^(−a²/2 − ln√(2π)), the argument as hi + lo; beyond 15 every tail
    // product is ±0, given by exp_parts' exact zero below −170
    let (eh, el) = two_sum(h.mul(k(-0.5)), k(-LN_SQRT_2PI_HI));
    let eh = L::select(ax.gt(k(15.0)), k(-171.0), eh);
    let el = el.sub(l.mul(k(0.5)).add(k(LN_SQRT_2PI_LO)));
    let (p, f1, f2) = exp_parts::<L, M>(eh, el);
    (axc, p, f1, f2, mills_den::<L, M>(axc))
}

/// GELU, erf form: x·Φ(x).
#[inline(always)]
pub fn gelu_erf<L: Lane, M: Madd<L>>(x: L) -> L {
    let (axc, p, f1, f2, den) = phi_tail::<L, M>(x);
    // x < 0: x·Φ(x) = ((−a·p)/den·f1)·f2; otherwise Φ(−a) = ((p/den)·f1)·f2 and
    // x·Φ(x) = x·(1 − Φ(−a)). One quotient serves both (the numerator is chosen first).
    let neg = x.lt(k(0.0));
    let num = L::select(neg, k::<L>(0.0).sub(axc).mul(p), p);
    let r = num.div(den).mul(f1).mul(f2);
    canon(x, L::select(neg, r, x.mul(k::<L>(1.0).sub(r))))
}

/// Derivative of the erf-form GELU: Φ(x) + x·φ(x).
#[inline(always)]
pub fn gelu_erf_grad<L: Lane, M: Madd<L>>(x: L) -> L {
    let (axc, p, f1, f2, den) = phi_tail::<L, M>(x);
    // Φ(−a) − a·φ(a) = φ(a)·(1 − a·den)/den, with a·den = m + me exactly
    let (m, me) = two_prod(axc, den);
    let t = k::<L>(1.0).sub(m).sub(me);
    let tt = p.mul(t).div(den).mul(f1).mul(f2);
    let pos = k::<L>(1.0).sub(tt);
    canon(x, L::select(x.lt(k(0.0)), tt, pos))
}

/// For a = min(|x|, 12): (a, v, vl, w, wl) with v + vl = 2·√(2/π)·(a + 0.044715·a³)
/// and w + wl = a·dv/da = 2·√(2/π)·(a + 3·0.044715·a³).
#[inline(always)]
fn gelu_tanh_arg<L: Lane>(x: L) -> (L, L, L, L, L) {
    let a = min_c(abs(x), 12.0);
    let (h, l) = two_prod(a, a);
    let (c, ce) = two_prod(a, h);
    let ce = ce.add(a.mul(l)); // a³ = c + ce
    let (p1, e1) = two_prod(k(GT_C1_HI), a);
    let (p3, e3) = two_prod(k(GT_C3_HI), c);
    let (v, ve) = two_sum(p1, p3);
    // beyond 12 every tail product is ±0, given by exp_parts' exact zero below −170
    let v = L::select(abs(x).gt(k(12.0)), k(171.0), v);
    let c1l = e1.add(k::<L>(GT_C1_LO).mul(a));
    let c3l = e3.add(k::<L>(GT_C3_HI).mul(ce).add(k::<L>(GT_C3_LO).mul(c)));
    let vl = ve.add(c1l.add(c3l));
    let (t3, t3e) = two_sum(p3.add(p3), p3); // 3·p3 exactly
    let (w, we) = two_sum(p1, t3);
    let wl = we.add(t3e).add(c1l.add(c3l.mul(k(3.0))));
    (a, v, vl, w, wl)
}

/// GELU, tanh form: x·σ(2u), u = √(2/π)·(x + 0.044715·x³).
#[inline(always)]
pub fn gelu_tanh<L: Lane, M: Madd<L>>(x: L) -> L {
    let (a, v, vl, _, _) = gelu_tanh_arg(x);
    let zero = k::<L>(0.0);
    let (p, f1, f2) = exp_parts::<L, M>(zero.sub(v), zero.sub(vl));
    let e = p.mul(f1).mul(f2);
    let (dh, dl) = fast_two_sum(k(1.0), e); // d = 1 + e^(−v) exactly
    let rq = k::<L>(1.0).div(dh);
    let c = rq.mul(dl); // 1/d = (1/dh)·(1 − c)
                        // x ≥ 0: x/d = x/dh − (x/dh)·c, the correction formed from the finite a
    let pos = x.div(dh).sub(a.mul(rq).mul(c));
    let tn = zero.sub(a).mul(p).div(dh);
    let neg = tn.sub(tn.mul(c)).mul(f1).mul(f2);
    canon(x, L::select(x.lt(zero), neg, pos))
}

/// Derivative of the tanh-form GELU: σ(V) + x·σ(V)·(1 − σ(V))·V′, V = 2u.
#[inline(always)]
pub fn gelu_tanh_grad<L: Lane, M: Madd<L>>(x: L) -> L {
    let (_, v, vl, w, wl) = gelu_tanh_arg(x);
    let zero = k::<L>(0.0);
    let one = k::<L>(1.0);
    let (p, f1, f2) = exp_parts::<L, M>(zero.sub(v), zero.sub(vl));
    let e = p.mul(f1).mul(f2);
    let (dh, dl) = fast_two_sum(one, e);
    let r = recip2(dh, dl); // 1/d
                            // x < 0: (e/d)·(1 − w/d);  x ≥ 0: (1/d)·(1 + w·e/d)
    let wr = w.mul(r).add(wl.mul(r));
    let neg = p.mul(r).mul(one.sub(wr)).mul(f1).mul(f2);
    let pos = r.mul(one.add(w.mul(e).mul(r)));
    canon(x, L::select(x.lt(zero), neg, pos))
}
