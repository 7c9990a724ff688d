//! A cosine in f64 built from IEEE `+ − × ÷` only, so that schedules have the same bits on
//! every platform (the system's `cos` differs between maths libraries).
//!
//! The algorithm (`docs/schedulers.md`, "The fixed cosine"):
//!
//! 1. `n = round(|x| · 2/π)` (round half to even through the `1.5·2^52` trick) and
//!    `r = |x| − n·π/2` in double-double arithmetic, with π/2 split into four doubles
//!    `P1 + P2 + P3 + P4` (about 217 bits); each `n·Pi` is an exact Dekker product.
//! 2. `cos r` or `sin r` (by `n mod 4`) from their Taylor series, evaluated by Horner's
//!    rule in double-double arithmetic: `cos r = Σ (−1)^k z^k / (2k)!`, `sin r = r · Σ
//!    (−1)^k z^k / (2k+1)!` with `z = r²`, `|r| ≤ π/4`, 14 terms each (truncation below
//!    2^−107 relative). The coefficients are double-double quotients computed at compile
//!    time from `1` by exact-integer divisions.
//! 3. The double-double result is rounded once to f64.
//!
//! The error before the final rounding is far below 2^−80 relative, so the result is the
//! correctly rounded cosine except where the exact value lies within that distance of a
//! rounding boundary. Arguments with `|x| > 2^30` (and NaN, ±∞) give NaN: the schedules
//! never need them and the reduction is only analysed up to there.

/// `round(a)` for `0 ≤ a < 2^51`, ties to even, with two additions.
fn round_half_even(a: f64) -> f64 {
    const MAGIC: f64 = 6_755_399_441_055_744.0; // 1.5 · 2^52
    (a + MAGIC) - MAGIC
}

/// Largest |x| accepted by [`cos`].
pub(crate) const MAX_COS_ARG: f64 = 1_073_741_824.0; // 2^30

/// π/2 as the unevaluated sum of four doubles, each the f64 nearest to what remains of
/// π/2 after the ones before it.
const P1: f64 = std::f64::consts::FRAC_PI_2; // 1.5707963267948966, 0x3FF921FB54442D18
const P2: f64 = 6.123_233_995_736_766e-17; // 0x3C91A62633145C07
const P3: f64 = -1.497_384_904_859_169_8e-33; // 0xB91F1976B7ED8FBC
const P4: f64 = 5.562_271_104_316_826e-50; // 0x35B4CF98E804177D

/// 2/π rounded to f64; only picks the quadrant, so its rounding does not matter.
const TWO_OVER_PI: f64 = std::f64::consts::FRAC_2_PI; // 0.6366197723675814, 0x3FE45F306DC9C883

/// A double-double number `hi + lo` with `|lo| ≤ ulp(hi)/2`.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Dd {
    hi: f64,
    lo: f64,
}

/// Knuth's two-sum: `s + e = a + b` exactly.
const fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    let bb = s - a;
    let e = (a - (s - bb)) + (b - bb);
    (s, e)
}

/// Dekker's fast two-sum (`|a| ≥ |b|` or `a = 0`): `s + e = a + b` exactly.
const fn fast_two_sum(a: f64, b: f64) -> Dd {
    let s = a + b;
    let e = b - (s - a);
    Dd { hi: s, lo: e }
}

/// Veltkamp's split of `a` into two halves of at most 26 significant bits each.
const fn split(a: f64) -> (f64, f64) {
    let t = 134_217_729.0 * a; // 2^27 + 1
    let hi = t - (t - a);
    (hi, a - hi)
}

/// Dekker's product: `p + e = a · b` exactly (no overflow or underflow here).
const fn two_prod(a: f64, b: f64) -> (f64, f64) {
    let p = a * b;
    let (ah, al) = split(a);
    let (bh, bl) = split(b);
    let e = (((ah * bh - p) + ah * bl) + al * bh) + al * bl;
    (p, e)
}

impl Dd {
    const fn new(hi: f64) -> Self {
        Dd { hi, lo: 0.0 }
    }

    const fn neg(self) -> Self {
        Dd {
            hi: -self.hi,
            lo: -self.lo,
        }
    }

    /// Sum with both parts added by two-sums (accurate also under cancellation).
    const fn add(self, o: Dd) -> Dd {
        let (s1, s2) = two_sum(self.hi, o.hi);
        let (t1, t2) = two_sum(self.lo, o.lo);
        let r = fast_two_sum(s1, s2 + t1);
        fast_two_sum(r.hi, r.lo + t2)
    }

    const fn mul(self, o: Dd) -> Dd {
        let (p, e) = two_prod(self.hi, o.hi);
        fast_two_sum(p, e + (self.hi * o.lo + self.lo * o.hi))
    }

    /// Quotient by a double.
    const fn div_f64(self, b: f64) -> Dd {
        let q1 = self.hi / b;
        let (p, e) = two_prod(q1, b);
        let q2 = (((self.hi - p) - e) + self.lo) / b;
        fast_two_sum(q1, q2)
    }
}

/// Terms of each series.
const TERMS: usize = 14;

/// `c[k] = (−1)^k / (first + 2k)!`, for `first` 0 (cosine) or 1 (sine).
const fn series(first: u32) -> [Dd; TERMS] {
    let mut c = [Dd::new(1.0); TERMS];
    let mut k = 1;
    while k < TERMS {
        let m = (first + 2 * k as u32) as f64;
        // (m − 1) · m is an exact integer below 2^53.
        c[k] = c[k - 1].div_f64(-((m - 1.0) * m));
        k += 1;
    }
    c
}

const COS_SERIES: [Dd; TERMS] = series(0);
const SIN_SERIES: [Dd; TERMS] = series(1);

/// `Σ c[k] z^k` by Horner's rule in double-double arithmetic.
fn horner(c: &[Dd; TERMS], z: Dd) -> Dd {
    let mut acc = c[TERMS - 1];
    for ck in c[..TERMS - 1].iter().rev() {
        acc = acc.mul(z).add(*ck);
    }
    acc
}

/// The cosine of `x`, correctly rounded except within about 2^−80 relative of a
/// rounding boundary; NaN for NaN, ±∞ and `|x| > 2^30`. Uses IEEE `+ − × ÷` only.
pub(crate) fn cos(x: f64) -> f64 {
    let a = x.abs();
    // Also NaN and ±∞.
    if a.is_nan() || a > MAX_COS_ARG {
        return f64::NAN;
    }
    let n = round_half_even(a * TWO_OVER_PI);
    // r = a − n·(P1 + P2 + P3 + P4). `a − n·P1` is exact (two-sum of an exact product).
    let (p1, e1) = two_prod(n, P1);
    let (s, t) = two_sum(a, -p1);
    let mut r = Dd { hi: s, lo: t }.add(Dd::new(-e1));
    let (p2, e2) = two_prod(n, P2);
    r = r.add(Dd { hi: p2, lo: e2 }.neg());
    let (p3, e3) = two_prod(n, P3);
    r = r.add(Dd { hi: p3, lo: e3 }.neg());
    r = r.add(Dd::new(-(n * P4)));
    let z = r.mul(r);
    // n ≤ 2^30 · 2/π, so the conversion is exact.
    let quadrant = (n as u64) & 3;
    let v = match quadrant {
        0 => horner(&COS_SERIES, z),
        1 => r.mul(horner(&SIN_SERIES, z)).neg(),
        2 => horner(&COS_SERIES, z).neg(),
        _ => r.mul(horner(&SIN_SERIES, z)),
    };
    // fast_two_sum leaves hi = fl(hi + lo): the one final rounding.
    v.hi
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in ulps: the number of doubles between `a` and `b`.
    fn ulps(a: f64, b: f64) -> u64 {
        fn key(v: f64) -> i64 {
            let bits = v.to_bits() as i64;
            if bits < 0 {
                i64::MIN - bits
            } else {
                bits
            }
        }
        key(a).abs_diff(key(b))
    }

    #[test]
    fn constants_have_their_bit_patterns() {
        assert_eq!(P1.to_bits(), 0x3FF9_21FB_5444_2D18);
        assert_eq!(P2.to_bits(), 0x3C91_A626_3314_5C07);
        assert_eq!(P3.to_bits(), 0xB91F_1976_B7ED_8FBC);
        assert_eq!(P4.to_bits(), 0x35B4_CF98_E804_177D);
        assert_eq!(TWO_OVER_PI.to_bits(), 0x3FE4_5F30_6DC9_C883);
    }

    /// `P1 + P2 + P3 + P4` against the first 256 bits of π/2 (its hexadecimal expansion,
    /// `1.921FB54442D18469898CC51701B839A2…`), in exact integer arithmetic: the parts are
    /// integers once scaled by 2^256.
    #[test]
    fn pi_over_two_parts_match_the_expansion() {
        // floor(π/2 · 2^256), most significant 64-bit limb first.
        const PI_OVER_2_SCALED: [u64; 5] = [
            0x1,
            0x921F_B544_42D1_8469,
            0x898C_C517_01B8_39A2,
            0x5204_9C11_14CF_98E8,
            0x0417_7D4C_7627_3644,
        ];
        // Little-endian limbs of a signed 320-bit accumulator (two's complement).
        let mut acc = [0u64; 5];
        let add_shifted = |acc: &mut [u64; 5], m: u64, shift: i32, negative: bool| {
            // value = m · 2^shift, 0 ≤ shift, as little-endian limbs.
            let mut limbs = [0u64; 5];
            let (q, r) = ((shift / 64) as usize, (shift % 64) as u32);
            let wide = (m as u128) << r;
            limbs[q] = wide as u64;
            if q + 1 < 5 {
                limbs[q + 1] = (wide >> 64) as u64;
            }
            if negative {
                // Two's complement negation.
                let mut carry = 1u64;
                for l in limbs.iter_mut() {
                    let (v, c) = (!*l).overflowing_add(carry);
                    *l = v;
                    carry = u64::from(c);
                }
            }
            let mut carry = 0u64;
            for (a, l) in acc.iter_mut().zip(limbs) {
                let (s1, c1) = a.overflowing_add(l);
                let (s2, c2) = s1.overflowing_add(carry);
                *a = s2;
                carry = u64::from(c1) + u64::from(c2);
            }
        };
        for p in [P1, P2, P3, P4] {
            let bits = p.to_bits();
            let exp = ((bits >> 52) & 0x7FF) as i32;
            let mant = (bits & ((1 << 52) - 1)) | (1 << 52);
            // p = mant · 2^(exp − 1075); scaled by 2^256.
            let shift = exp - 1075 + 256;
            assert!(shift >= 0, "{p:e} has bits below 2^-256");
            add_shifted(&mut acc, mant, shift, p < 0.0);
        }
        // acc − floor(π/2 · 2^256) must be small: the parts agree with π/2 to 2^-215.
        let want: Vec<u64> = PI_OVER_2_SCALED.iter().rev().copied().collect();
        let mut diff = [0u64; 5];
        let mut borrow = 0u64;
        for i in 0..5 {
            let (d1, b1) = acc[i].overflowing_sub(want[i]);
            let (d2, b2) = d1.overflowing_sub(borrow);
            diff[i] = d2;
            borrow = u64::from(b1) + u64::from(b2);
        }
        let negative = diff[4] >> 63 == 1;
        let magnitude: i128 = if negative {
            assert!(diff[1..].iter().all(|&l| l == u64::MAX), "{diff:x?}");
            -(((!diff[0]) as i128) + 1)
        } else {
            assert!(diff[1..].iter().all(|&l| l == 0), "{diff:x?}");
            diff[0] as i128
        };
        assert!(magnitude.unsigned_abs() < 1 << 41, "{magnitude}");
    }

    #[test]
    fn series_coefficients_are_reciprocal_factorials() {
        let mut f = 1.0f64;
        for (k, (c, s)) in COS_SERIES.iter().zip(&SIN_SERIES).enumerate() {
            let sign = if k % 2 == 0 { 1.0 } else { -1.0 };
            if k > 0 {
                f *= (2 * k - 1) as f64 * (2 * k) as f64;
            }
            // 1/(2k)! and 1/(2k+1)! to about 2^-100 relative.
            let want_c = sign / f;
            let want_s = sign / (f * (2 * k + 1) as f64);
            assert!((c.hi - want_c).abs() <= want_c.abs() * 1e-15, "cos {k}");
            assert!((s.hi - want_s).abs() <= want_s.abs() * 1e-15, "sin {k}");
            assert!(c.lo.abs() <= c.hi.abs() * 1.2e-16 && s.lo.abs() <= s.hi.abs() * 1.2e-16);
            // The double-double value times the factorial is 1 to ~2^-100 where the
            // factorial is exact (k! < 2^53 up to 18!).
            if 2 * k < 18 {
                let fs = f * (2 * k + 1) as f64;
                for (d, fact) in [(c, f), (s, fs)] {
                    let (p, e) = two_prod(d.hi, fact);
                    let (q, g) = two_prod(d.lo, fact);
                    let one = Dd { hi: p, lo: e }.add(Dd { hi: q, lo: g });
                    assert_eq!(one.hi.abs(), 1.0, "{k}");
                    assert!(one.lo.abs() < 1e-30, "{k}: {:e}", one.lo);
                }
            }
        }
    }

    #[test]
    fn special_values() {
        assert_eq!(cos(0.0), 1.0);
        assert_eq!(cos(-0.0), 1.0);
        assert_eq!(cos(std::f64::consts::PI), -1.0);
        assert_eq!(cos(2.0 * std::f64::consts::PI), 1.0);
        assert!(cos(f64::NAN).is_nan());
        assert!(cos(f64::INFINITY).is_nan());
        assert!(cos(f64::NEG_INFINITY).is_nan());
        assert!(cos(MAX_COS_ARG * 1.000_000_1).is_nan());
        assert!(!cos(MAX_COS_ARG).is_nan());
        // cos(fl(π/2)) = π/2 − fl(π/2) to first order.
        assert_eq!(cos(std::f64::consts::FRAC_PI_2), 6.123_233_995_736_766e-17);
        assert_eq!(cos(1e-300), 1.0);
    }

    /// Worst ulp distance to the platform's `f64::cos` over `args`, and how many differ.
    fn compare(args: impl Iterator<Item = f64>) -> (u64, usize, usize, f64) {
        let (mut worst, mut differ, mut count, mut at) = (0u64, 0usize, 0usize, 0.0);
        for x in args {
            let d = ulps(cos(x), x.cos());
            if d > 0 {
                differ += 1;
            }
            if d > worst {
                worst = d;
                at = x;
            }
            count += 1;
        }
        (worst, differ, count, at)
    }

    /// Measured error against the platform's cosine (`docs/schedulers.md` records the
    /// numbers): at most 1 ulp on every sample, on a dense grid over [−8π, 8π], on small
    /// arguments, on doubles next to multiples of π/2, and on every argument the
    /// schedules form (`π·k/T` of cosine annealing for T ≤ 400, `π·pct` of one-cycle).
    #[test]
    fn within_one_ulp_of_the_platform_cosine() {
        let pi = std::f64::consts::PI;
        let n = 1 << 20;
        let dense = (0..=n).map(|i| -8.0 * pi + 16.0 * pi * (i as f64) / (n as f64));
        let small = (1..=1 << 16).map(|i| (i as f64) * 1e-6);
        let near_half_pi = (1..=20_000i64).flat_map(|j| {
            let x = (j as f64) * std::f64::consts::FRAC_PI_2;
            let b = x.to_bits();
            [f64::from_bits(b - 1), x, f64::from_bits(b + 1)]
        });
        let annealing =
            (1..=400u32).flat_map(|t| (0..=3 * t).map(move |k| pi * k as f64 / t as f64));
        let one_cycle = (0..=100_000u32).map(|i| pi * (i as f64 / 100_000.0));
        let large = (0..=1 << 12).map(|i| (i as f64) * 262_143.937_5);
        for (name, r) in [
            ("dense", compare(dense)),
            ("small", compare(small)),
            ("near k·π/2", compare(near_half_pi)),
            ("annealing", compare(annealing)),
            ("one-cycle", compare(one_cycle)),
            ("large", compare(large)),
        ] {
            let (worst, differ, count, at) = r;
            println!("{name}: {count} arguments, {differ} differ, worst {worst} ulp at {at:e}");
            assert!(worst <= 1, "{name}: {worst} ulp at {at:e}");
        }
    }

    /// Against the correctly rounded cosine (mpmath at 300 bits) that
    /// `tools/sched_oracle.py` stores with the schedules: 4,096 seeded arguments in
    /// [−8π, 8π] and every schedule argument where the platform's cosine misrounds.
    #[test]
    fn correctly_rounded_at_the_reference_arguments() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testdata/nn/schedulers.safetensors"
        );
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let st = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors file");
        let read = |name: &str| -> Vec<f64> {
            let t = st.tensor(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(t.dtype(), safetensors::Dtype::F64);
            t.data()
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
                .collect()
        };
        let (xs, want) = (read("cos/x"), read("cos/value"));
        assert_eq!(xs.len(), want.len());
        assert!(xs.len() > 4096, "{} arguments", xs.len());
        let mut platform_off = 0;
        for (&x, &w) in xs.iter().zip(&want) {
            assert_eq!(cos(x).to_bits(), w.to_bits(), "cos({x:e})");
            platform_off += usize::from(x.cos().to_bits() != w.to_bits());
        }
        println!(
            "{} arguments: all correctly rounded ({platform_off} misrounded by the platform)",
            xs.len()
        );
    }
}
