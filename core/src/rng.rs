//! A seeded counter-based random number generator (Philox4x32-10, Salmon et al. 2011)
//! whose output depends only on the seed and the counter, so it is the same on every
//! platform, thread count and build.

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

#[inline]
fn mulhilo(a: u32, b: u32) -> (u32, u32) {
    let p = u64::from(a) * u64::from(b);
    ((p >> 32) as u32, p as u32)
}

/// The Philox4x32-10 block function: four 32-bit outputs from a 128-bit counter and a
/// 64-bit key.
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let mut c = counter;
    let mut k = key;
    for round in 0..10 {
        if round > 0 {
            k[0] = k[0].wrapping_add(W0);
            k[1] = k[1].wrapping_add(W1);
        }
        let (hi0, lo0) = mulhilo(M0, c[0]);
        let (hi1, lo1) = mulhilo(M1, c[2]);
        c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0];
    }
    c
}

/// A seeded stream of random numbers built on [`philox4x32_10`].
///
/// The stream is the sequence of blocks at counters 0, 1, 2, … under the key given by the
/// seed, each block yielding four `u32` words in order. [`Philox::at`] gives random access
/// to the same words without a stream position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Philox {
    key: [u32; 2],
    counter: u64,
    buf: [u32; 4],
    used: usize,
}

impl Philox {
    /// A stream keyed by `seed`, positioned at its first word.
    pub fn new(seed: u64) -> Self {
        Self {
            key: [seed as u32, (seed >> 32) as u32],
            counter: 0,
            buf: [0; 4],
            used: 4,
        }
    }

    /// The `index`-th word of the stream of `seed`, independent of any stream position.
    pub fn at(seed: u64, index: u64) -> u32 {
        let block = index / 4;
        let key = [seed as u32, (seed >> 32) as u32];
        let out = philox4x32_10([block as u32, (block >> 32) as u32, 0, 0], key);
        out[(index % 4) as usize]
    }

    /// The seed that keys this stream.
    pub fn seed(&self) -> u64 {
        u64::from(self.key[0]) | (u64::from(self.key[1]) << 32)
    }

    /// The number of 32-bit words drawn from the stream so far (its position; streams
    /// are assumed shorter than 2^64 words).
    pub fn position(&self) -> u64 {
        self.counter
            .wrapping_mul(4)
            .wrapping_sub(4 - self.used as u64)
    }

    /// The stream of `seed` positioned after its first `position` words: the same
    /// state as `Philox::new(seed)` after `position` calls of [`Self::next_u32`], so
    /// `Philox::at_position(r.seed(), r.position())` continues exactly where `r` is
    /// (the state a checkpoint saves).
    pub fn at_position(seed: u64, position: u64) -> Self {
        let mut r = Self::new(seed);
        r.counter = position / 4;
        if !position.is_multiple_of(4) {
            // Refill the partly used block, as next_u32 would have.
            let c = r.counter;
            r.buf = philox4x32_10([c as u32, (c >> 32) as u32, 0, 0], r.key);
            r.counter = c.wrapping_add(1);
            r.used = (position % 4) as usize;
        }
        r
    }

    /// The next 32-bit word.
    pub fn next_u32(&mut self) -> u32 {
        if self.used == 4 {
            let c = self.counter;
            self.buf = philox4x32_10([c as u32, (c >> 32) as u32, 0, 0], self.key);
            self.counter = self.counter.wrapping_add(1);
            self.used = 0;
        }
        let v = self.buf[self.used];
        self.used += 1;
        v
    }

    /// The next 64-bit word (two 32-bit words, the first one low).
    pub fn next_u64(&mut self) -> u64 {
        let lo = u64::from(self.next_u32());
        let hi = u64::from(self.next_u32());
        lo | (hi << 32)
    }

    /// A uniform f32 in [0, 1): the top 24 bits of the next word times 2^-24.
    pub fn next_f32(&mut self) -> f32 {
        unit_f32(self.next_u32())
    }

    /// A uniform f32 in [low, high): `low + (high - low) * u` with `u` from [`Self::next_f32`].
    pub fn uniform(&mut self, low: f32, high: f32) -> f32 {
        low + (high - low) * self.next_f32()
    }

    /// A uniform f64 in [0, 1) from 53 bits of the next two words.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform integer in [0, n) by rejection (no modulo bias). `n` must be positive.
    pub fn below(&mut self, n: u32) -> u32 {
        assert!(n > 0, "Philox::below: n must be positive");
        let zone = u32::MAX - (u32::MAX % n + 1) % n;
        loop {
            let v = self.next_u32();
            if v <= zone {
                return v % n;
            }
        }
    }

    /// A standard normal sample by Marsaglia's polar method, computed in f64 with IEEE
    /// operations and [`ln_f64`] only, then rounded once to f32.
    pub fn normal(&mut self) -> f32 {
        loop {
            let u = 2.0 * self.next_f64() - 1.0;
            let v = 2.0 * self.next_f64() - 1.0;
            let s = u * u + v * v;
            if s > 0.0 && s < 1.0 {
                let factor = sqrt_f64(-2.0 * ln_f64(s) / s);
                return (u * factor) as f32;
            }
        }
    }
}

/// Maps a word to [0, 1) using its top 24 bits.
#[inline]
pub fn unit_f32(word: u32) -> f32 {
    (word >> 8) as f32 * (1.0 / 16_777_216.0)
}

/// Correctly rounded f64 square root: the hardware instruction with std, the digit
/// recurrence [`sqrt_f64_digits`] without (both give the IEEE result).
pub(crate) fn sqrt_f64(x: f64) -> f64 {
    #[cfg(feature = "std")]
    {
        x.sqrt()
    }
    #[cfg(not(feature = "std"))]
    {
        sqrt_f64_digits(x)
    }
}

/// Correctly rounded square root by digit recurrence on the significand, for builds
/// without std.
#[cfg_attr(feature = "std", allow(dead_code))]
fn sqrt_f64_digits(x: f64) -> f64 {
    {
        if x <= 0.0 || x.is_nan() || x.is_infinite() {
            return if x >= 0.0 { x } else { f64::NAN };
        }
        let bits = x.to_bits();
        let mut exp = ((bits >> 52) & 0x7ff) as i64;
        let mut mant = bits & ((1u64 << 52) - 1);
        if exp == 0 {
            // Subnormal: normalise.
            let shift = mant.leading_zeros() as i64 - 11;
            mant <<= shift;
            exp = 1 - shift;
            mant &= (1u64 << 52) - 1;
        }
        mant |= 1u64 << 52;
        let mut e = exp - 1023;
        if e & 1 != 0 {
            mant <<= 1;
            e -= 1;
        }
        // Integer square root of mant << 52 gives 53 significant bits plus remainder.
        let m = u128::from(mant) << 52;
        let mut r: u128 = 0;
        let mut bit: u128 = 1u128 << 106;
        let mut n = m;
        while bit > n {
            bit >>= 2;
        }
        while bit != 0 {
            if n >= r + bit {
                n -= r + bit;
                r = (r >> 1) + bit;
            } else {
                r >>= 1;
            }
            bit >>= 2;
        }
        // Round to nearest (ties cannot occur for square roots of finite doubles).
        if n > r {
            r += 1;
        }
        let result_exp = (e / 2 + 1023) as u64;
        let r = r as u64;
        let (r, result_exp) = if r >> 53 != 0 {
            (r >> 1, result_exp + 1)
        } else {
            (r, result_exp)
        };
        f64::from_bits((result_exp << 52) | (r & ((1u64 << 52) - 1)))
    }
}

/// Natural logarithm in f64 using only IEEE + − × ÷ and exponent extraction: the same
/// result on every platform. Used for sampling, where a few ulp of error do not matter but
/// bit-reproducibility does. Returns NaN for negative input and −∞ for zero.
pub fn ln_f64(x: f64) -> f64 {
    if x.is_nan() || x < 0.0 {
        return f64::NAN;
    }
    if x == 0.0 {
        return f64::NEG_INFINITY;
    }
    if x.is_infinite() {
        return x;
    }
    let mut bits = x.to_bits();
    let mut e: i64 = 0;
    if (bits >> 52) & 0x7ff == 0 {
        bits = (x * 18_014_398_509_481_984.0).to_bits(); // 2^54
        e -= 54;
    }
    e += ((bits >> 52) & 0x7ff) as i64 - 1023;
    let mut m = f64::from_bits((bits & ((1u64 << 52) - 1)) | (1023u64 << 52));
    if m > core::f64::consts::SQRT_2 {
        m *= 0.5;
        e += 1;
    }
    let f = m - 1.0;
    let s = f / (2.0 + f);
    let s2 = s * s;
    // 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...), |s| <= 0.1716.
    let mut poly = 0.0;
    let mut k = 27.0;
    while k > 1.0 {
        poly = poly * s2 + 1.0 / k;
        k -= 2.0;
    }
    let log_m = 2.0 * s * (1.0 + s2 * poly);
    e as f64 * core::f64::consts::LN_2 + log_m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn philox_known_answer() {
        // Known-answer vectors of the Random123 distribution for Philox4x32-10.
        assert_eq!(
            philox4x32_10([0, 0, 0, 0], [0, 0]),
            [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]
        );
        assert_eq!(
            philox4x32_10([u32::MAX; 4], [u32::MAX; 2]),
            [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]
        );
    }

    #[test]
    fn stream_equals_random_access() {
        let mut r = Philox::new(0x1234_5678_9abc_def0);
        for i in 0..37 {
            assert_eq!(r.next_u32(), Philox::at(0x1234_5678_9abc_def0, i));
        }
    }

    #[test]
    fn uniform_in_range_and_mean() {
        let mut r = Philox::new(7);
        let mut sum = 0.0f64;
        for _ in 0..20_000 {
            let u = r.next_f32();
            assert!((0.0..1.0).contains(&u));
            sum += f64::from(u);
        }
        assert!((sum / 20_000.0 - 0.5).abs() < 0.01);
    }

    #[test]
    fn normal_moments() {
        let mut r = Philox::new(42);
        let n = 40_000;
        let (mut s1, mut s2) = (0.0f64, 0.0f64);
        for _ in 0..n {
            let x = f64::from(r.normal());
            s1 += x;
            s2 += x * x;
        }
        let mean = s1 / n as f64;
        let var = s2 / n as f64 - mean * mean;
        assert!(mean.abs() < 0.02, "mean {mean}");
        assert!((var - 1.0).abs() < 0.03, "var {var}");
    }

    #[test]
    fn ln_matches_std_closely() {
        for &x in &[
            1e-310, 1e-300, 0.001, 0.5, 0.7, 1.0, 1.5, 2.0, 10.0, 1e10, 1e300,
        ] {
            let d = (ln_f64(x) - x.ln()).abs();
            assert!(d <= 4.0 * f64::EPSILON * x.ln().abs().max(1.0), "{x}: {d}");
        }
        assert!(ln_f64(-1.0).is_nan());
        assert_eq!(ln_f64(0.0), f64::NEG_INFINITY);
    }

    #[test]
    fn sqrt_is_correctly_rounded() {
        let mut r = Philox::new(9);
        let mut xs = [
            2.0f64, 3.0, 0.5, 1e-310, 123456.789, 1e300, 4.0, 1.0, 0.0, 5e-324,
        ]
        .to_vec();
        for _ in 0..2000 {
            xs.push(f64::from_bits(r.next_u64() & 0x7fef_ffff_ffff_ffff));
        }
        for x in xs {
            assert_eq!(sqrt_f64_digits(x), x.sqrt(), "{x}");
        }
    }

    #[test]
    fn below_is_in_range() {
        let mut r = Philox::new(3);
        for n in 1..50 {
            assert!(r.below(n) < n);
        }
    }

    #[test]
    fn a_stream_restored_at_its_position_continues_identically() {
        for seed in [0u64, 7, 0xdead_beef_1234_5678] {
            for drawn in 0..9u64 {
                let mut r = Philox::new(seed);
                for _ in 0..drawn {
                    r.next_u32();
                }
                assert_eq!(r.position(), drawn);
                assert_eq!(r.seed(), seed);
                let mut copy = Philox::at_position(r.seed(), r.position());
                assert_eq!(copy.position(), drawn);
                for _ in 0..10 {
                    assert_eq!(copy.next_u32(), r.next_u32());
                }
            }
        }
    }
}
