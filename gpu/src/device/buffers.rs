//! The device's buffer pool (`docs/gpu.md` §6.1): the buffers of tensors, of kernels'
//! temporary copies, scratch and parameters, and the staging buffers of read-backs are
//! taken from it and given back to it, so that a training step allocates no device
//! memory once the sizes it uses have been seen.
//!
//! A request of `len` words is served from its size class: 64 words for `len ≤ 64`,
//! above that eight classes per power of two (the class of `len` in `(2^(k−1), 2^k]` is
//! `len` rounded up to a multiple of `2^(k−4)`, at most the device's largest binding),
//! so a buffer is at most 12.5 % larger than asked. Idle buffers are kept per (use,
//! class) while their bytes stay within [`IDLE_BYTES`] (or the limit set through
//! [`MemoryPool::set_limit`], if lower); a buffer released beyond that is freed. One
//! mutex guards the lists and the counters; it is held only to push or pop a buffer,
//! never while the device works.

use super::*;
use exactgrad_core::{MemoryPool, PoolStats};

/// The most bytes of idle buffers the pool keeps (256 MiB); beyond it a released buffer
/// is freed.
pub const IDLE_BYTES: usize = 256 << 20;

/// The smallest class, in words (parameter buffers and small tensors share it).
const MIN_WORDS: u64 = 64;

/// What a pooled buffer is for: its wgpu usages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Use {
    /// Tensors, temporary copies, scratch and parameters: storage, copy source and
    /// destination.
    Storage,
    /// Read-backs: mappable for reading, copy destination.
    Staging,
}

impl Use {
    pub(crate) fn usages(self) -> wgpu::BufferUsages {
        match self {
            Use::Storage => {
                wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_SRC
                    | wgpu::BufferUsages::COPY_DST
            }
            Use::Staging => wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        }
    }
}

#[derive(Default)]
struct Inner {
    idle: HashMap<(Use, u64), Vec<wgpu::Buffer>>,
    stats: PoolStats,
}

impl Inner {
    /// Frees idle buffers until `need` more bytes fit under `cap` (or none is left);
    /// returns the bytes freed.
    fn evict(&mut self, need: usize, cap: usize) -> usize {
        let mut freed = 0;
        let keys: Vec<(Use, u64)> = self.idle.keys().copied().collect();
        for key in keys {
            let list = self.idle.entry(key).or_default();
            while self.stats.outstanding_bytes + self.stats.pooled_bytes + need > cap {
                let Some(b) = list.pop() else { break };
                let bytes = b.size() as usize;
                self.stats.pooled_bytes -= bytes;
                freed += bytes;
                // Dropped, not destroyed: wgpu frees it once the submissions that use it
                // have finished.
                drop(b);
            }
        }
        self.idle.retain(|_, l| !l.is_empty());
        freed
    }
}

/// The pool of one device (see the module documentation). Thread-safe.
pub(crate) struct BufferPool {
    max_binding: u64,
    inner: Mutex<Inner>,
}

impl BufferPool {
    pub(crate) fn new(max_binding: u64) -> Self {
        Self {
            max_binding,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // The lists stay consistent whatever a panicking holder did: every update is one
        // push or pop and its counter.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The byte size of the class of `bytes` (a multiple of 4 that [`Gpu::bytes`]
    /// accepted).
    pub(crate) fn class(&self, bytes: u64) -> u64 {
        let words = bytes.div_ceil(4).max(MIN_WORDS);
        let class = if words <= MIN_WORDS {
            MIN_WORDS
        } else {
            // (2^(k−1), 2^k] rounded up to a multiple of 2^(k−4).
            let k = 64 - (words - 1).leading_zeros();
            let step = 1u64 << (k.saturating_sub(4));
            words.div_ceil(step) * step
        };
        (class * 4).min(self.max_binding.max(bytes))
    }

    /// An idle buffer of `class` bytes for `usage` (a hit), or `None` after checking that a
    /// new one fits under the limit (a miss, counted when [`Self::created`] is called).
    pub(crate) fn take(&self, usage: Use, class: u64) -> Result<Option<wgpu::Buffer>> {
        let mut g = self.lock();
        if let Some(b) = g.idle.get_mut(&(usage, class)).and_then(Vec::pop) {
            g.stats.hits += 1;
            g.stats.pooled_bytes -= class as usize;
            g.stats.outstanding_bytes += class as usize;
            g.stats.peak_bytes = g.stats.peak_bytes.max(g.stats.outstanding_bytes);
            return Ok(Some(b));
        }
        if let Some(limit) = g.stats.limit {
            let need = class as usize;
            g.evict(need, limit);
            if g.stats.outstanding_bytes + g.stats.pooled_bytes + need > limit {
                return Err(Error::MemoryLimit {
                    op: "wgpu",
                    bytes: need,
                    in_use: g.stats.outstanding_bytes,
                    limit,
                });
            }
        }
        Ok(None)
    }

    /// Counts a new buffer of `class` bytes, made after [`Self::take`] found none idle.
    pub(crate) fn created(&self, class: u64) {
        let mut g = self.lock();
        g.stats.misses += 1;
        g.stats.native_allocations += 1;
        g.stats.native_bytes += class;
        g.stats.outstanding_bytes += class as usize;
        g.stats.peak_bytes = g.stats.peak_bytes.max(g.stats.outstanding_bytes);
    }

    /// Gives `buf` (taken or created for `usage`) back: kept idle if it fits the idle
    /// allowance, else freed.
    pub(crate) fn release(&self, usage: Use, buf: wgpu::Buffer) {
        let bytes = buf.size() as usize;
        let mut g = self.lock();
        g.stats.outstanding_bytes = g.stats.outstanding_bytes.saturating_sub(bytes);
        let cap = IDLE_BYTES.min(g.stats.limit.unwrap_or(usize::MAX));
        if g.stats.pooled_bytes + bytes <= cap {
            g.stats.pooled_bytes += bytes;
            g.idle.entry((usage, buf.size())).or_default().push(buf);
        } else {
            drop(g);
            drop(buf);
        }
    }

    /// Forgets `buf` (taken or created) without keeping it: a buffer whose state is not
    /// known (a read-back that failed while it was mapped).
    pub(crate) fn discard(&self, buf: wgpu::Buffer) {
        let bytes = buf.size() as usize;
        let mut g = self.lock();
        g.stats.outstanding_bytes = g.stats.outstanding_bytes.saturating_sub(bytes);
    }
}

impl MemoryPool for BufferPool {
    fn stats(&self) -> PoolStats {
        self.lock().stats
    }

    fn trim(&self) -> usize {
        let mut g = self.lock();
        let freed = g.stats.pooled_bytes;
        for (_, list) in g.idle.drain() {
            drop(list);
        }
        g.stats.pooled_bytes = 0;
        freed
    }

    fn set_limit(&self, limit: Option<usize>) -> Result<()> {
        exactgrad_core::memory::check_limit(limit)?;
        let mut g = self.lock();
        g.stats.limit = limit;
        if let Some(l) = limit {
            g.evict(0, l);
        }
        Ok(())
    }

    fn reset_peak(&self) {
        let mut g = self.lock();
        g.stats.peak_bytes = g.stats.outstanding_bytes;
    }
}

/// A buffer taken from the pool for the length of one device call (a temporary copy,
/// scratch, parameters or a staging buffer), given back when dropped.
pub(crate) struct Lease<'p> {
    pool: &'p BufferPool,
    usage: Use,
    pub(crate) buf: wgpu::Buffer,
    /// Whether it was taken from the idle buffers (its contents are stale) rather than
    /// created (zero-filled by wgpu).
    pub(crate) recycled: bool,
    end: End,
}

/// What becomes of a [`Lease`] when it is dropped.
#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    /// Given back to the pool.
    Keep,
    /// Forgotten by the pool and freed.
    Discard,
    /// Handed to a [`crate::WgpuStorage`], which gives it back when dropped.
    Detached,
}

impl Lease<'_> {
    /// Drops it without giving it back (its state is unknown).
    pub(crate) fn discard(mut self) {
        self.end = End::Discard;
    }

    /// The buffer, now owned by a tensor's storage (which gives it back to the pool).
    pub(crate) fn detach(mut self) -> wgpu::Buffer {
        self.end = End::Detached;
        self.buf.clone()
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        match self.end {
            End::Keep => self.pool.release(self.usage, self.buf.clone()),
            End::Discard => self.pool.discard(self.buf.clone()),
            End::Detached => {}
        }
    }
}

impl Gpu {
    /// A buffer of at least `len` words for `usage`, from the pool or new (a new one is
    /// zero-filled by wgpu; a recycled one holds stale words). Must be called with the
    /// `calls` lock held and an out-of-memory error scope pushed.
    pub(crate) fn lease(&self, len: usize, usage: Use) -> Result<Lease<'_>> {
        let class = self.pool.class(self.bytes(len)?);
        let (buf, recycled) = match self.pool.take(usage, class)? {
            Some(b) => (b, true),
            None => {
                let b = self.device.create_buffer(&wgpu::BufferDescriptor {
                    label: None,
                    size: class,
                    usage: usage.usages(),
                    mapped_at_creation: false,
                });
                self.pool.created(class);
                (b, false)
            }
        };
        Ok(Lease {
            pool: &self.pool,
            usage,
            buf,
            recycled,
            end: End::Keep,
        })
    }
}
