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
