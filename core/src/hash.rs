//! The gradient hash: a documented 64-bit digest of f32 bit patterns.
//!
//! Definition (also in `docs/arithmetic.md`): FNV-1a with 64-bit offset basis
//! `0xcbf29ce484222325` and prime `0x100000001b3`, fed, for every tensor in the given
//! order, the tensor's element count as 8 little-endian bytes, then every element's
//! `f32::to_bits()` as 4 little-endian bytes in row-major order. Two runs hash equal
//! exactly when they produced the same bits in the same shapes and order.

const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// Incremental gradient hash (FNV-1a 64 over the f32 bit patterns; see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GradHasher {
    state: u64,
}

impl Default for GradHasher {
    fn default() -> Self {
        Self::new()
    }
}

impl GradHasher {
    /// A hasher in its initial state.
    pub const fn new() -> Self {
        Self { state: OFFSET }
    }

    fn bytes(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.state ^= u64::from(b);
            self.state = self.state.wrapping_mul(PRIME);
        }
    }

    /// Feeds one tensor: its element count, then its elements in row-major order.
    pub fn update(&mut self, values: &[f32]) {
        self.bytes(&(values.len() as u64).to_le_bytes());
        for v in values {
            self.bytes(&v.to_bits().to_le_bytes());
        }
    }

    /// The digest of everything fed so far.
    pub const fn finish(&self) -> u64 {
        self.state
    }

    /// The hash of a sequence of tensors given as slices.
    pub fn of<'a>(tensors: impl IntoIterator<Item = &'a [f32]>) -> u64 {
        let mut h = Self::new();
        for t in tensors {
            h.update(t);
        }
        h.finish()
    }
}

/// The trace digest: a fast 64-bit digest of f32 bit patterns (and of integer data) that
/// an operation trace records for every tensor (`docs/debugging.md`, "The digest").
///
/// Definition: the elements' bit patterns in row-major order, each NaN replaced by the
/// canonical NaN `0x7FC00000` (so that NaN payloads, which fast mode may leave differing
/// between machines, never count as a difference), are taken in pairs as 64-bit words
/// `w = lo | hi << 32`, and the words in blocks of four, the last block completed with
/// zero words. Word `l` of every block goes to lane `l`, whose state `a` (initially
/// [`TraceHasher::LANE_SEEDS`]) becomes `rotl((a ^ w) · P, 31)` with
/// `P = 0x9E3779B97F4A7C15` (wrapping). The digest is `h = n · P ^ D` (`n` the number of
/// elements, `D = 0x2545F4914F6CDD1D`), then `h = fmix(h ^ a_l)` for the lanes in order,
/// and last `fmix(h ^ n)`, where `fmix` is MurmurHash3's 64-bit finalizer.
///
/// Each step of a lane is a bijection of its state for a fixed word and of the word for a
/// fixed state, so two inputs of one length that differ in a single word always give
/// different lane states, and `fmix` is a bijection: a difference confined to one lane
/// always changes the digest. Integer data (class labels, indices) is fed with
/// [`TraceHasher::update_i64`]: each integer as two words (low, high, not canonicalised,
/// so `n` counts two per integer) and `D = 0x9C6E6B2AF0D13E47`, a domain of its own.
///
/// The digest is integer arithmetic only: the same on every platform. Feeding a tensor in
/// pieces gives the digest of the whole (the pieces' boundaries do not matter).
#[derive(Clone, Debug)]
pub struct TraceHasher {
    lanes: [u64; 4],
    /// Words of an incomplete block of eight.
    pending: [u32; 8],
    buffered: usize,
    count: u64,
    domain: u64,
}

impl Default for TraceHasher {
    fn default() -> Self {
        Self::new()
    }
}

/// The lanes' multiplier (odd: multiplication by it is a bijection).
const TRACE_P: u64 = 0x9E37_79B9_7F4A_7C15;

/// MurmurHash3's 64-bit finalizer (a bijection).
#[inline]
pub const fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The canonical form of an f32 bit pattern for the digest: every NaN becomes 0x7FC00000.
#[inline(always)]
fn canonical_bits(w: u32) -> u32 {
    if w & 0x7fff_ffff > 0x7f80_0000 {
        0x7fc0_0000
    } else {
        w
    }
}

impl TraceHasher {
    /// The initial states of the four lanes.
    pub const LANE_SEEDS: [u64; 4] = [
        0x243F_6A88_85A3_08D3,
        0x1319_8A2E_0370_7344,
        0xA409_3822_299F_31D0,
        0x082E_FA98_EC4E_6C89,
    ];

    /// A hasher in its initial state (the digest of no elements so far).
    pub const fn new() -> Self {
        Self {
            lanes: Self::LANE_SEEDS,
            pending: [0; 8],
            buffered: 0,
            count: 0,
            domain: 0x2545_F491_4F6C_DD1D,
        }
    }

    #[inline(always)]
    fn block(lanes: &mut [u64; 4], w: &[u32; 8]) {
        for (l, lane) in lanes.iter_mut().enumerate() {
            let word = u64::from(w[2 * l]) | u64::from(w[2 * l + 1]) << 32;
            *lane = (*lane ^ word).wrapping_mul(TRACE_P).rotate_left(31);
        }
    }

    fn words(&mut self, mut words: &[u32]) {
        self.count = self.count.wrapping_add(words.len() as u64);
        if self.buffered > 0 {
            let take = (8 - self.buffered).min(words.len());
            self.pending[self.buffered..self.buffered + take].copy_from_slice(&words[..take]);
            self.buffered += take;
            words = &words[take..];
            if self.buffered < 8 {
                return;
            }
            let p = self.pending;
            Self::block(&mut self.lanes, &p);
            self.buffered = 0;
        }
        let mut chunks = words.chunks_exact(8);
        let mut lanes = self.lanes;
        for c in &mut chunks {
            let c: &[u32; 8] = c.try_into().expect("chunks of eight");
            Self::block(&mut lanes, c);
        }
        self.lanes = lanes;
        let rest = chunks.remainder();
        self.pending[..rest.len()].copy_from_slice(rest);
        self.buffered = rest.len();
    }

    /// Feeds f32 elements (their bit patterns, NaNs canonical), continuing the sequence.
    pub fn update(&mut self, values: &[f32]) {
        let mut buf = [0u32; 256];
        for chunk in values.chunks(256) {
            for (d, v) in buf.iter_mut().zip(chunk) {
                *d = canonical_bits(v.to_bits());
            }
            self.words(&buf[..chunk.len()]);
        }
    }

    /// Feeds f32 bit patterns (NaNs canonical), as [`update`](Self::update) does.
    pub fn update_bits(&mut self, bits: &[u32]) {
        let mut buf = [0u32; 256];
        for chunk in bits.chunks(256) {
            for (d, &w) in buf.iter_mut().zip(chunk) {
                *d = canonical_bits(w);
            }
            self.words(&buf[..chunk.len()]);
        }
    }

    /// Feeds integers (labels, indices), each as two 32-bit words, low first, taken as
    /// they are; a digest that integers entered is kept apart from one of floats (see the
    /// type's documentation).
    pub fn update_i64(&mut self, values: &[i64]) {
        self.domain = 0x9C6E_6B2A_F0D1_3E47;
        let mut buf = [0u32; 256];
        for chunk in values.chunks(128) {
            for (d, &v) in buf.chunks_exact_mut(2).zip(chunk) {
                d[0] = v as u32;
                d[1] = ((v as u64) >> 32) as u32;
            }
            self.words(&buf[..2 * chunk.len()]);
        }
    }

    /// The number of elements (or words) fed so far.
    pub const fn count(&self) -> u64 {
        self.count
    }

    /// The digest of everything fed so far.
    pub fn finish(&self) -> u64 {
        let mut lanes = self.lanes;
        if self.buffered > 0 {
            let mut last = [0u32; 8];
            last[..self.buffered].copy_from_slice(&self.pending[..self.buffered]);
            Self::block(&mut lanes, &last);
        }
        let mut h = self.count.wrapping_mul(TRACE_P) ^ self.domain;
        for a in lanes {
            h = fmix64(h ^ a);
        }
        fmix64(h ^ self.count)
    }

    /// The digest of `values`.
    pub fn of(values: &[f32]) -> u64 {
        let mut h = Self::new();
        h.update(values);
        h.finish()
    }

    /// The digest of integer data.
    pub fn of_i64(values: &[i64]) -> u64 {
        let mut h = Self::new();
        h.update_i64(values);
        h.finish()
    }
}

/// Combines digests and small values into one (order matters): `fmix(a · P ^ b)`. Used
/// for digests derived from others (a view's from its input's, a record's summary).
#[inline]
pub const fn mix64(a: u64, b: u64) -> u64 {
    fmix64(a.wrapping_mul(TRACE_P) ^ b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_is_offset_basis() {
        assert_eq!(GradHasher::new().finish(), 0xcbf2_9ce4_8422_2325);
    }

    #[test]
    fn fnv1a_known_vector() {
        // FNV-1a 64 of the single byte 'a' is a published test vector.
        let mut h = GradHasher::new();
        h.bytes(b"a");
        assert_eq!(h.finish(), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn trace_digest_ignores_piece_boundaries_and_nan_payloads() {
        let v: [f32; 21] = core::array::from_fn(|i| i as f32 * 0.37 - 2.0);
        let whole = TraceHasher::of(&v);
        for cut in 0..=v.len() {
            let mut h = TraceHasher::new();
            h.update(&v[..cut]);
            h.update(&v[cut..]);
            assert_eq!(h.finish(), whole, "cut at {cut}");
        }
        let bits: [u32; 21] = core::array::from_fn(|i| v[i].to_bits());
        let mut h = TraceHasher::new();
        h.update_bits(&bits);
        assert_eq!(h.finish(), whole);
        // NaN payloads and signs are one NaN; signed zeros are not one zero.
        let a = [f32::from_bits(0x7fc0_0000), 1.0];
        let b = [f32::from_bits(0xffc0_0123), 1.0];
        assert_eq!(TraceHasher::of(&a), TraceHasher::of(&b));
        assert_ne!(TraceHasher::of(&[0.0]), TraceHasher::of(&[-0.0]));
        // Infinities are numbers, not NaN.
        assert_ne!(
            TraceHasher::of(&[f32::INFINITY]),
            TraceHasher::of(&[f32::NAN])
        );
    }

    #[test]
    fn trace_digest_sees_every_single_word_change_and_the_length() {
        let v: [f32; 37] = core::array::from_fn(|i| (i as f32).sin());
        let base = TraceHasher::of(&v);
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..v.len() {
            for bit in [0, 1, 22, 31] {
                let mut w = v;
                w[i] = f32::from_bits(w[i].to_bits() ^ (1 << bit));
                assert!(seen.insert(TraceHasher::of(&w)), "element {i} bit {bit}");
            }
        }
        assert!(!seen.contains(&base));
        // Zeros of other lengths, trailing zeros and an empty input all differ.
        let z: Vec<u64> = (0..20).map(|n| TraceHasher::of(&vec![0.0; n])).collect();
        let distinct: std::collections::BTreeSet<_> = z.iter().collect();
        assert_eq!(distinct.len(), z.len());
        // Integers are a domain of their own.
        assert_ne!(TraceHasher::of_i64(&[]), TraceHasher::of(&[]));
        assert_ne!(TraceHasher::of_i64(&[1, 2]), TraceHasher::of_i64(&[2, 1]));
        assert_ne!(TraceHasher::of_i64(&[-1]), TraceHasher::of_i64(&[i64::MAX]));
    }

    #[test]
    fn trace_digest_is_pinned() {
        // The definition written out for two elements (one word, lane 0).
        let v = [1.0f32, -2.5];
        let word = u64::from(1.0f32.to_bits()) | u64::from((-2.5f32).to_bits()) << 32;
        let mut lanes = TraceHasher::LANE_SEEDS;
        lanes[0] = (lanes[0] ^ word).wrapping_mul(TRACE_P).rotate_left(31);
        // Lanes 1 to 3 take the zero words that complete the block.
        for lane in &mut lanes[1..] {
            *lane = lane.wrapping_mul(TRACE_P).rotate_left(31);
        }
        let mut h = 2u64.wrapping_mul(TRACE_P) ^ 0x2545_F491_4F6C_DD1D;
        for a in lanes {
            h = fmix64(h ^ a);
        }
        assert_eq!(TraceHasher::of(&v), fmix64(h ^ 2));
    }

    #[test]
    fn distinguishes_signed_zero_and_split() {
        assert_ne!(
            GradHasher::of([&[0.0f32][..]]),
            GradHasher::of([&[-0.0f32][..]])
        );
        let joined = GradHasher::of([&[1.0f32, 2.0][..]]);
        let split = GradHasher::of([&[1.0f32][..], &[2.0f32][..]]);
        assert_ne!(joined, split);
    }
}
