//! The fixed byte budget a [`Tape`](crate::Tape) works in.

use crate::scalar::TapeScalar;
use crate::tape::Tape;
use core::cell::UnsafeCell;
use core::mem::MaybeUninit;

/// Every allocation in an arena starts at a multiple of this many bytes and has a size
/// that is a multiple of it (it covers `f64`, pointers and `usize` on every target).
pub const ALIGN: usize = 8;

/// Exactly `BYTES` bytes of storage for one [`Tape`]; nothing is ever allocated elsewhere.
///
/// The bytes are aligned to [`ALIGN`], so the first allocation needs no padding. Gradient
/// arrays grow from the start and operation records from the end (see `docs/tape.md`);
/// when `BYTES` is not a multiple of [`ALIGN`] the last `BYTES % ALIGN` bytes stay unused.
#[repr(C, align(8))]
pub struct Arena<const BYTES: usize> {
    bytes: UnsafeCell<[MaybeUninit<u8>; BYTES]>,
}

impl<const BYTES: usize> Arena<BYTES> {
    /// A new arena (its bytes are uninitialised until a tape writes them).
    pub const fn new() -> Self {
        Self {
            bytes: UnsafeCell::new([MaybeUninit::uninit(); BYTES]),
        }
    }

    /// The number of bytes this arena supplies: `BYTES`.
    pub const fn capacity(&self) -> usize {
        BYTES
    }

    /// A tape with the default operator registry size (16) working in this arena.
    pub fn tape<T: TapeScalar>(&mut self) -> Tape<'_, T> {
        Tape::new(self)
    }

    /// The start of the storage and its usable length (a multiple of [`ALIGN`]).
    pub(crate) fn raw_parts(&mut self) -> (*mut u8, usize) {
        (self.bytes.get().cast::<u8>(), BYTES - BYTES % ALIGN)
    }
}

impl<const BYTES: usize> Default for Arena<BYTES> {
    fn default() -> Self {
        Self::new()
    }
}
