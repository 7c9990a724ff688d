//! The correctly rounded f32 square root of every path: the hardware instruction with
//! `std`, an integer digit recurrence giving the same bits without. Its own file so that
//! the lanes ([`crate::lane`]) and the scalar definitions ([`crate::scalar`], which
//! re-exports it) both use it without depending on each other.

use exactgrad_core::CANONICAL_NAN;

/// Correctly rounded IEEE square root (the hardware instruction with std; an integer
/// digit recurrence giving the same bits without).
#[inline]
pub fn sqrt(x: f32) -> f32 {
    #[cfg(feature = "std")]
    {
        x.sqrt()
    }
    #[cfg(not(feature = "std"))]
    {
        sqrt_digits(x)
    }
}

/// Correctly rounded f32 square root by integer digit recurrence (no floating-point
/// instruction involved); equal to IEEE `sqrt` for every input.
pub fn sqrt_digits(x: f32) -> f32 {
    if x.is_nan() || x < 0.0 {
        return if x == 0.0 { x } else { CANONICAL_NAN };
    }
    if x == 0.0 || x.is_infinite() {
        return x;
    }
    let bits = x.to_bits();
    let mut exp = ((bits >> 23) & 0xff) as i32;
    let mut mant = bits & 0x7f_ffff;
    if exp == 0 {
        let shift = mant.leading_zeros() as i32 - 8;
        mant <<= shift;
        exp = 1 - shift;
        mant &= 0x7f_ffff;
    }
    let mut m = u64::from(mant | 0x80_0000);
    let mut e = exp - 127;
    if e & 1 != 0 {
        m <<= 1;
        e -= 1;
    }
    // sqrt(m * 2^-23) * 2^(e/2): integer square root of m << 23 has 24 or 25 bits.
    let n = m << 25;
    let mut r: u64 = 0;
    let mut rem = n;
    let mut bit: u64 = 1 << 62;
    while bit > rem {
        bit >>= 2;
    }
    while bit != 0 {
        if rem >= r + bit {
            rem -= r + bit;
            r = (r >> 1) + bit;
        } else {
            r >>= 1;
        }
        bit >>= 2;
    }
    // r = floor(sqrt(m << 25)) carries one extra bit beyond the 24-bit significand.
    let round_bit = r & 1;
    let mut sig = r >> 1;
    if round_bit == 1 {
        // Exactly half way is impossible for a square root unless the remainder is zero
        // and the low bit pattern matches; check the remainder to decide ties.
        if rem != 0 || (sig & 1) == 1 {
            sig += 1;
        }
    }
    let mut result_exp = e / 2 + 127;
    if sig >> 24 != 0 {
        sig >>= 1;
        result_exp += 1;
    }
    f32::from_bits(((result_exp as u32) << 23) | (sig as u32 & 0x7f_ffff))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqrt_digits_matches_hardware_on_samples() {
        let mut state = 0x9E37_79B9u32;
        let check = |x: f32| {
            let want = x.sqrt();
            let got = sqrt_digits(x);
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "sqrt({x:e}) = {got:e}, want {want:e}"
            );
        };
        for x in [
            0.0,
            -0.0,
            1.0,
            2.0,
            4.0,
            1e-45,
            1e-40,
            3.4e38,
            f32::INFINITY,
            -1.0,
        ] {
            check(x);
        }
        for _ in 0..200_000 {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            check(f32::from_bits(state & 0x7fff_ffff));
        }
    }
}
