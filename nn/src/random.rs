//! Random streams of modules: keyed by the run's seed and the module's path, registered
//! with the module tree, captured by training checkpoints without a hook per module.
//!
//! A module that draws random numbers in `forward` (dropout masks) holds a
//! [`RandomStream`] and reports it in [`Module::visit`](crate::Module::visit). A new
//! stream has no key and refuses to draw; the only ways to key it are walks of the module
//! tree — [`ModuleExt::seed_streams`](crate::ModuleExt::seed_streams) and the restore of a
//! training checkpoint — which find exactly the reported streams. So a stream that is not
//! reported cannot draw, and a stream that draws is always saved and restored: a resumed
//! run continues with the same masks as one that never stopped (`docs/checkpoints.md`).
//!
//! The key of the stream at path `p` (`"3.rng"`, `"layers.0.self_attn.dropout_rng"`) in a
//! run seeded with `s` is [`stream_seed`]`(s, p)`; the stream is then the [`Philox`]
//! stream of that key, and its position (words drawn) is its only state
//! (`docs/arithmetic.md`, "Random streams of modules").

use crate::error::{Error, Result};
use exactgrad_core::rng::philox4x32_10;
use exactgrad_core::Philox;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

/// FNV-1a's 64-bit offset basis and prime.
const FNV_OFFSET: u64 = 0xCBF2_9CE4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01B3;
/// The third counter word of the key derivation: ASCII `"strm"`, which keeps the
/// derivation's Philox blocks apart from any stream's own blocks (whose third word is 0).
const DOMAIN: u32 = u32::from_le_bytes(*b"strm");

/// The key of the stream at module path `path` in a run seeded with `run_seed`: the
/// first two words (low word first) of the Philox4x32-10 block at counter
/// `[h, h >> 32, "strm", 0]` under the key `run_seed`, where `h` is the 64-bit FNV-1a hash
/// of the path's UTF-8 bytes.
pub fn stream_seed(run_seed: u64, path: &str) -> u64 {
    let h = path.bytes().fold(FNV_OFFSET, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(FNV_PRIME)
    });
    let out = philox4x32_10(
        [h as u32, (h >> 32) as u32, DOMAIN, 0],
        [run_seed as u32, (run_seed >> 32) as u32],
    );
    u64::from(out[0]) | (u64::from(out[1]) << 32)
}

/// What a stream holds: its generator once keyed, and whether a training checkpoint set
/// it (a restored stream is not re-keyed by [`ModuleExt::seed_streams`]).
///
/// [`ModuleExt::seed_streams`]: crate::ModuleExt::seed_streams
#[derive(Debug, Default)]
struct StreamState {
    rng: Option<Philox>,
    restored: bool,
}

/// A module's random stream (see the [module documentation](self)): unkeyed until the
/// module tree is seeded, then a [`Philox`] stream whose key is derived from the run's
/// seed and the stream's path.
#[derive(Default)]
pub struct RandomStream {
    /// Shared with the trace of a run (which reads the positions at every step's end).
    state: Arc<Mutex<StreamState>>,
}

/// What [`RandomStream::seed_at`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Seeding {
    /// Keyed at position 0.
    Keyed,
    /// Restored from a checkpoint with this very key: kept at its position.
    Kept,
}

impl RandomStream {
    /// A stream without a key; it draws once its module tree is seeded.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, StreamState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the stream has a key.
    pub fn is_seeded(&self) -> bool {
        self.lock().rng.is_some()
    }

    /// Whether the stream's key and position were set by a restored training checkpoint.
    pub fn is_restored(&self) -> bool {
        self.lock().restored
    }

    /// Calls `f` with the stream's generator; `owner` names the module in the error.
    ///
    /// Fails with [`Error::UnseededStream`] when the stream has no key.
    pub fn with<R>(&self, owner: &'static str, f: impl FnOnce(&mut Philox) -> R) -> Result<R> {
        match self.lock().rng.as_mut() {
            Some(rng) => Ok(f(rng)),
            None => Err(Error::UnseededStream { owner }),
        }
    }

    /// The next 64-bit word (one dropout mask's key); `owner` names the module in the
    /// error. Fails when the stream has no key.
    pub fn next_u64(&self, owner: &'static str) -> Result<u64> {
        self.with(owner, Philox::next_u64)
    }

    /// The key and position (words drawn) of the stream, when it has a key.
    pub fn state(&self) -> Option<(u64, u64)> {
        self.lock().rng.as_ref().map(|r| (r.seed(), r.position()))
    }

    /// Whether keying the stream for `path` of a run seeded with `run_seed` would replace
    /// a restored state: the key that restored state has, when it differs.
    pub(crate) fn conflict(&self, run_seed: u64, path: &str) -> Option<u64> {
        let st = self.lock();
        let key = stream_seed(run_seed, path);
        match (&st.rng, st.restored) {
            (Some(r), true) if r.seed() != key => Some(r.seed()),
            _ => None,
        }
    }

    /// Keys the stream for path `path` of a run seeded with `run_seed`, at position 0 —
    /// unless a restored checkpoint gave it that very key, which it keeps at its position.
    /// (A restored stream with another key is refused by the caller first.)
    pub(crate) fn seed_at(&self, run_seed: u64, path: &str) -> Seeding {
        let mut st = self.lock();
        let key = stream_seed(run_seed, path);
        if st.restored && st.rng.as_ref().is_some_and(|r| r.seed() == key) {
            return Seeding::Kept;
        }
        *st = StreamState {
            rng: Some(Philox::new(key)),
            restored: false,
        };
        Seeding::Keyed
    }

    /// Keys the stream for `path` of a run seeded with `run_seed` at position 0, whatever
    /// it held.
    pub(crate) fn reseed_at(&self, run_seed: u64, path: &str) {
        *self.lock() = StreamState {
            rng: Some(Philox::new(stream_seed(run_seed, path))),
            restored: false,
        };
    }

    /// Removes the key (a restored checkpoint's stream that was never seeded).
    pub(crate) fn clear(&self) {
        *self.lock() = StreamState {
            rng: None,
            restored: true,
        };
    }

    /// Sets the key and position (a restored checkpoint's).
    pub(crate) fn restore(&self, seed: u64, position: u64) {
        *self.lock() = StreamState {
            rng: Some(Philox::at_position(seed, position)),
            restored: true,
        };
    }

    /// A handle on the stream's state that a trace keeps to read its position at every
    /// step's end; its address names the stream.
    pub(crate) fn trace_handle(&self) -> Arc<dyn std::any::Any + Send + Sync> {
        Arc::clone(&self.state) as _
    }

    /// The key and position behind a handle of [`RandomStream::trace_handle`].
    pub(crate) fn state_of(handle: &Arc<dyn std::any::Any + Send + Sync>) -> Option<(u64, u64)> {
        let st = handle.downcast_ref::<Mutex<StreamState>>()?;
        let st = st.lock().unwrap_or_else(|e| e.into_inner());
        st.rng.as_ref().map(|r| (r.seed(), r.position()))
    }
}

impl fmt::Debug for RandomStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.state() {
            Some((seed, position)) => write!(f, "RandomStream({seed:#x} at {position})"),
            None => write!(f, "RandomStream(unseeded)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_differ_by_path_and_seed_and_are_fixed() {
        let a = stream_seed(1, "0.rng");
        assert_eq!(a, stream_seed(1, "0.rng"));
        assert_ne!(a, stream_seed(1, "1.rng"));
        assert_ne!(a, stream_seed(2, "0.rng"));
        // The derivation written out: FNV-1a of the path, then one Philox block.
        let mut h = FNV_OFFSET;
        for b in "0.rng".bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(FNV_PRIME);
        }
        let block = philox4x32_10([h as u32, (h >> 32) as u32, 0x6d72_7473, 0], [1, 0]);
        assert_eq!(a, u64::from(block[0]) | u64::from(block[1]) << 32);
    }

    #[test]
    fn an_unseeded_stream_refuses_to_draw() {
        let s = RandomStream::new();
        let err = s.next_u64("Dropout").unwrap_err().to_string();
        assert!(
            err.contains("Dropout") && err.contains("seed_streams"),
            "{err}"
        );
        assert_eq!(s.seed_at(7, "rng"), Seeding::Keyed);
        let first = s.next_u64("Dropout").unwrap();
        assert_eq!(first, Philox::new(stream_seed(7, "rng")).next_u64());
        let (seed, position) = s.state().unwrap();
        let t = RandomStream::new();
        t.restore(seed, position);
        assert_eq!(t.next_u64("x").unwrap(), s.next_u64("x").unwrap());
    }
}
