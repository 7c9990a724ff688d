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
/// Definition. The elements' bit patterns in row-major order, each NaN replaced by the
/// canonical NaN `0x7FC00000` (NaN payloads, which fast mode may leave differing between
/// machines, never count as a difference), are cut into **blocks** of
/// [`TraceHasher::BLOCK`] elements (the last one shorter). A block is digested in
/// **chunks** of 32 elements (the last chunk completed with zeros): element pairs form
/// 64-bit words `w_l = e[2l] | e[2l+1] << 32`, and word `l` of each chunk goes to lane `l`
/// of 16 ([`TraceHasher::LANES`]), whose state `a` — initially
/// `seed_l = fmix((l + 1) · P)` with `P = 0x9E3779B97F4A7C15` — becomes
/// `rotl((a ^ w) · P, 31)` (wrapping). The block's digest is `h = m · P ^ 0x6A09E667F3BCC909`
/// (`m` its element count), `h = fmix(h ^ a_l)` for the lanes in order, then
/// `fmix(h ^ m)`. The digest of the whole is `h = D`, then `h = fmix(h ^ d_b)` for the
/// blocks' digests in order, then `fmix(h ^ n · P)` (`n` the element count,
/// `D = 0x2545F4914F6CDD1D`). `fmix` is MurmurHash3's 64-bit finalizer.
///
/// Every step is a bijection of a lane's state for a fixed word and of the word for a
/// fixed state, and `fmix` is a bijection, so two inputs of one length that differ in a
/// single element always get different digests. Blocks are independent, so a backend may
/// digest them on several threads, and sixteen lanes suit vector units
/// (`BackendImpl::digest_impl`); the result never depends on either. Integer data
/// (class labels, indices) is fed with [`TraceHasher::update_i64`]: each integer as two
/// 32-bit words (low, high, not canonicalised, so `n` counts two per integer) and
/// `D = 0x9C6E6B2AF0D13E47`, a domain of its own.
///
/// The digest is integer arithmetic only: the same on every platform. Feeding the
/// elements in pieces gives the digest of the whole (the pieces' boundaries do not
/// matter).
#[derive(Clone, Debug)]
pub struct TraceHasher {
    /// The lanes of the current block.
    block: BlockLanes,
    /// Words of the current incomplete chunk.
    pending: [u32; 32],
    buffered: usize,
    /// Elements (words) taken into the current block, complete chunks and pending.
    in_block: usize,
    /// The chain over the completed blocks' digests.
    chain: u64,
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
/// The domain constant of float data.
const DOMAIN_F32: u64 = 0x2545_F491_4F6C_DD1D;
/// The domain constant of integer data.
const DOMAIN_I64: u64 = 0x9C6E_6B2A_F0D1_3E47;
/// The constant of a block's fold.
const BLOCK_FOLD: u64 = 0x6A09_E667_F3BC_C909;

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
pub const fn canonical_bits(w: u32) -> u32 {
    if w & 0x7fff_ffff > 0x7f80_0000 {
        0x7fc0_0000
    } else {
        w
    }
}

/// The sixteen lanes of one block of the trace digest (see [`TraceHasher`]): what a
/// vectorised digest of a block starts from, updates chunk by chunk, and finishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockLanes {
    /// The lanes' states.
    pub lanes: [u64; 16],
}

impl Default for BlockLanes {
    fn default() -> Self {
        Self::new()
    }
}

impl BlockLanes {
    /// The lanes' initial states, `fmix((l + 1) · P)`.
    pub const SEEDS: [u64; 16] = {
        let mut s = [0u64; 16];
        let mut l = 0;
        while l < 16 {
            s[l] = fmix64((l as u64 + 1).wrapping_mul(TRACE_P));
            l += 1;
        }
        s
    };

    /// The lanes of a block before any chunk.
    pub const fn new() -> Self {
        Self { lanes: Self::SEEDS }
    }

    /// One lane's step with word `w`: `rotl((a ^ w) · P, 31)`.
    #[inline(always)]
    pub const fn step(a: u64, w: u64) -> u64 {
        (a ^ w).wrapping_mul(TRACE_P).rotate_left(31)
    }

    /// Takes one chunk of 32 words (already canonical where they are floats).
    #[inline(always)]
    pub fn absorb(&mut self, w: &[u32; 32]) {
        for (l, lane) in self.lanes.iter_mut().enumerate() {
            let word = u64::from(w[2 * l]) | u64::from(w[2 * l + 1]) << 32;
            *lane = Self::step(*lane, word);
        }
    }

    /// Takes the elements of `values` (whole chunks, then a last one completed with
    /// zeros), canonicalising NaNs: the scalar form of a block's chunks.
    pub fn absorb_f32(&mut self, values: &[f32]) {
        let mut buf = [0u32; 32];
        for c in values.chunks(32) {
            buf.iter_mut().for_each(|w| *w = 0);
            for (d, v) in buf.iter_mut().zip(c) {
                *d = canonical_bits(v.to_bits());
            }
            self.absorb(&buf);
        }
    }

    /// The digest of a block of `m` elements whose chunks these lanes took.
    pub fn finish(&self, m: u64) -> u64 {
        let mut h = m.wrapping_mul(TRACE_P) ^ BLOCK_FOLD;
        for a in self.lanes {
            h = fmix64(h ^ a);
        }
        fmix64(h ^ m)
    }
}

impl TraceHasher {
    /// Elements per block.
    pub const BLOCK: usize = 1 << 16;
    /// Lanes per block.
    pub const LANES: usize = 16;

    /// A hasher in its initial state (the digest of no elements so far).
    pub const fn new() -> Self {
        Self {
            block: BlockLanes::new(),
            pending: [0; 32],
            buffered: 0,
            in_block: 0,
            chain: DOMAIN_F32,
            count: 0,
            domain: DOMAIN_F32,
        }
    }

    /// The digest of one block of at most [`TraceHasher::BLOCK`] elements (the scalar
    /// reference of a vectorised block digest).
    pub fn block_digest(values: &[f32]) -> u64 {
        let mut b = BlockLanes::new();
        b.absorb_f32(values);
        b.finish(values.len() as u64)
    }

    /// The digest of `n` float elements whose blocks have the digests `blocks`, in
    /// order.
    pub fn combine(n: u64, blocks: impl IntoIterator<Item = u64>) -> u64 {
        let mut h = DOMAIN_F32;
        for d in blocks {
            h = fmix64(h ^ d);
        }
        fmix64(h ^ n.wrapping_mul(TRACE_P))
    }

    /// Takes canonical words, continuing the sequence.
    fn words(&mut self, mut words: &[u32]) {
        while !words.is_empty() {
            // Never past the end of the current block.
            let room = Self::BLOCK - self.in_block;
            let take = room.min(words.len());
            let (now, rest) = words.split_at(take);
            words = rest;
            self.in_block += take;
            self.count = self.count.wrapping_add(take as u64);
            let mut now = now;
            if self.buffered > 0 {
                let fill = (32 - self.buffered).min(now.len());
                self.pending[self.buffered..self.buffered + fill].copy_from_slice(&now[..fill]);
                self.buffered += fill;
                now = &now[fill..];
                if self.buffered == 32 {
                    let p = self.pending;
                    self.block.absorb(&p);
                    self.buffered = 0;
                }
            }
            let mut chunks = now.chunks_exact(32);
            for c in &mut chunks {
                self.block.absorb(c.try_into().expect("chunks of 32"));
            }
            let tail = chunks.remainder();
            self.pending[..tail.len()].copy_from_slice(tail);
            self.buffered += tail.len();
            if self.in_block == Self::BLOCK {
                self.close_block();
            }
        }
    }

    /// Ends the current block (its pending words completed with zeros) into the chain.
    fn close_block(&mut self) {
        if self.buffered > 0 {
            let mut last = [0u32; 32];
            last[..self.buffered].copy_from_slice(&self.pending[..self.buffered]);
            self.block.absorb(&last);
        }
        let d = self.block.finish(self.in_block as u64);
        self.chain = fmix64(self.chain ^ d);
        self.block = BlockLanes::new();
        self.buffered = 0;
        self.in_block = 0;
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
        self.domain = DOMAIN_I64;
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
        let mut h = self.clone();
        if h.in_block > 0 {
            h.close_block();
        }
        // The chain started from the float domain; integer data switches it here.
        let chain = if h.domain == DOMAIN_F32 {
            h.chain
        } else {
            fmix64(h.chain ^ h.domain)
        };
        fmix64(chain ^ h.count.wrapping_mul(TRACE_P))
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
        // The definition written out for two elements (one block, one chunk: lane 0 takes
        // the word, lanes 1 to 15 the zero words that complete it).
        let v = [1.0f32, -2.5];
        let word = u64::from(1.0f32.to_bits()) | u64::from((-2.5f32).to_bits()) << 32;
        let mut lanes = [0u64; 16];
        for (l, a) in lanes.iter_mut().enumerate() {
            let seed = fmix64((l as u64 + 1).wrapping_mul(TRACE_P));
            let w = if l == 0 { word } else { 0 };
            *a = (seed ^ w).wrapping_mul(TRACE_P).rotate_left(31);
        }
        let mut b = 2u64.wrapping_mul(TRACE_P) ^ 0x6A09_E667_F3BC_C909;
        for a in lanes {
            b = fmix64(b ^ a);
        }
        let block = fmix64(b ^ 2);
        let whole = fmix64(fmix64(0x2545_F491_4F6C_DD1D ^ block) ^ 2u64.wrapping_mul(TRACE_P));
        assert_eq!(TraceHasher::of(&v), whole);
        assert_eq!(TraceHasher::block_digest(&v), block);
        assert_eq!(TraceHasher::combine(2, [block]), whole);
    }

    #[test]
    fn trace_digest_blocks_combine_to_the_whole() {
        // Three blocks, the last one partial: the blocks' digests combine to the digest
        // of the whole, fed in any pieces.
        let n = 2 * TraceHasher::BLOCK + 77;
        let v: std::vec::Vec<f32> = (0..n).map(|i| (i as f32 * 0.001).sin()).collect();
        let blocks = v.chunks(TraceHasher::BLOCK).map(TraceHasher::block_digest);
        let whole = TraceHasher::combine(n as u64, blocks);
        assert_eq!(TraceHasher::of(&v), whole);
        for cut in [
            1,
            31,
            32,
            33,
            TraceHasher::BLOCK - 1,
            TraceHasher::BLOCK,
            n - 5,
        ] {
            let mut h = TraceHasher::new();
            h.update(&v[..cut]);
            h.update(&v[cut..]);
            assert_eq!(h.finish(), whole, "cut at {cut}");
        }
        // One flipped bit anywhere changes it.
        for i in [0, 40_000, TraceHasher::BLOCK, n - 1] {
            let mut w = v.clone();
            w[i] = f32::from_bits(w[i].to_bits() ^ 1);
            assert_ne!(TraceHasher::of(&w), whole, "element {i}");
        }
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
