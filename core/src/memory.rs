//! The memory interface of a backend's buffer pool ([`MemoryPool`], [`PoolStats`]):
//! statistics, trimming and a byte limit. A backend that keeps the buffers its tensors
//! release for reuse exposes its pool through [`crate::BackendImpl::memory`]; the design of
//! the CPU backends' pool is written down in `docs/memory.md`.

use crate::error::Result;

/// Counters and sizes of a buffer pool. The counters count since the pool was made; the
/// peak since it was made or since the last [`MemoryPool::reset_peak`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Buffers the pool obtained from the system allocator (every miss).
    pub native_allocations: u64,
    /// Bytes of those buffers, summed.
    pub native_bytes: u64,
    /// Buffers handed to the pool by their owner instead of allocated by it
    /// (`Backend::storage_from_vec`).
    pub adopted: u64,
    /// Requests served from an idle buffer.
    pub hits: u64,
    /// Requests that needed a new buffer from the system allocator.
    pub misses: u64,
    /// Bytes of the buffers held by storage right now.
    pub outstanding_bytes: usize,
    /// Bytes of the idle buffers the pool keeps for reuse.
    pub pooled_bytes: usize,
    /// The largest value `outstanding_bytes` took.
    pub peak_bytes: usize,
    /// The limit on `outstanding_bytes + pooled_bytes`, if one is set.
    pub limit: Option<usize>,
}

/// A backend's buffer pool: what a backend with one returns from
/// [`crate::BackendImpl::memory`]. Every method is safe to call from any thread at any time.
pub trait MemoryPool: Send + Sync {
    /// A snapshot of the counters and sizes (each read atomically; taken while other
    /// threads allocate, they need not agree with one another).
    fn stats(&self) -> PoolStats;

    /// Frees every idle buffer; returns the bytes given back to the system allocator.
    fn trim(&self) -> usize;

    /// Caps the bytes the pool holds (buffers in use plus idle ones); `None` removes the
    /// cap. Idle buffers are freed to fit under a new limit. While the cap is set, a
    /// request that would exceed it, after freeing idle buffers, fails with
    /// [`crate::Error::MemoryLimit`]. Fails when `limit` is 0.
    fn set_limit(&self, limit: Option<usize>) -> Result<()>;

    /// Starts a new peak measurement: `peak_bytes` becomes `outstanding_bytes`.
    fn reset_peak(&self);
}

/// Checks the argument of [`MemoryPool::set_limit`], the same way for every pool: a limit
/// of 0 bytes admits no buffer and is refused (`None` removes the limit).
#[cfg(feature = "alloc")]
pub fn check_limit(limit: Option<usize>) -> Result<()> {
    if limit == Some(0) {
        return Err(crate::Error::invalid(
            "set_limit",
            "limit",
            "a limit of 0 bytes admits no buffer; pass None to remove the limit",
        ));
    }
    Ok(())
}
