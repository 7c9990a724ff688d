//! The buffers of the CPU backends: [`CpuStorage`], a vector of f32 that goes back to its
//! compute context's [`BufferPool`] when dropped, so that a training loop, which asks for
//! the same sizes every step, reuses warm memory instead of asking the system allocator
//! for fresh pages (each of which costs a page fault and a zero-fill by the kernel) every
//! step. The design and the reasons for it are in `docs/memory.md`.
//!
//! - **Size classes.** A request of `len` elements is served by a buffer of its class:
//!   16 elements for `len ≤ 16`, above that eight classes per power of two (the class of
//!   `len` in `(2^(k−1), 2^k]` is `len` rounded up to a multiple of `2^(k−4)`), so a
//!   buffer is at most 12.5 % longer than the request. A [`CpuStorage`] shows exactly the
//!   `len` elements asked for.
//! - **No global lock.** Each class has its own free list behind its own lock, held only
//!   to push or pop one buffer; the counters are atomics. Buffers may be released on any
//!   thread.
//! - **Statistics, trim, limit** through [`MemoryPool`]: a request that would take the
//!   bytes held (in use plus idle) over the limit first frees idle buffers, then fails
//!   with [`Error::MemoryLimit`].
//! - At most [`MAX_POOLED_BYTES`] of idle buffers are kept; a buffer released beyond that
//!   goes back to the system allocator.
//!
//! A reused buffer's values are whatever it held: [`Backend::uninit`] promises only
//! initialised values, and [`BackendImpl::zeros`] fills it with `+0`.
//!
//! [`Backend::uninit`]: exactgrad_core::Backend::uninit
//! [`BackendImpl::zeros`]: exactgrad_core::BackendImpl::zeros

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use exactgrad_core::backend::try_zeroed_vec;
use exactgrad_core::{Error, MemoryPool, PoolStats, Result, MAX_ELEMENTS};
use std::sync::Mutex;

/// The smallest class: requests of up to 16 elements get a buffer of 16.
const SMALLEST: usize = 16;
/// At most this many bytes of idle buffers are kept per compute context.
pub const MAX_POOLED_BYTES: usize = 512 << 20;
/// The number of size classes (the class of [`MAX_ELEMENTS`] is the last).
const CLASSES: usize = class_of(MAX_ELEMENTS) + 1;
const F32: usize = core::mem::size_of::<f32>();

/// The index of the smallest class whose buffers hold `len` elements.
const fn class_of(len: usize) -> usize {
    if len <= SMALLEST {
        return 0;
    }
    // 2^(k−1) < len ≤ 2^k with k ≥ 5; steps of 2^(k−4) give q ∈ 9 ..= 16.
    let k = (usize::BITS - (len - 1).leading_zeros()) as usize;
    let q = len.div_ceil(1 << (k - 4));
    1 + 8 * (k - 5) + (q - 9)
}

/// The length of the buffers of class `class`.
const fn class_len(class: usize) -> usize {
    if class == 0 {
        return SMALLEST;
    }
    let j = class - 1;
    (9 + j % 8) << (5 + j / 8 - 4)
}

/// The largest class whose buffers fit in `capacity` elements, if any does.
fn floor_class(capacity: usize) -> Option<usize> {
    if capacity < SMALLEST {
        return None;
    }
    let c = class_of(capacity.min(MAX_ELEMENTS));
    Some(if class_len(c) > capacity { c - 1 } else { c })
}

/// The free lists of one compute context, one per size class, with the counters of
/// [`PoolStats`].
pub(crate) struct BufferPool {
    /// Idle buffers by class; every buffer in list `c` has length `class_len(c)`.
    free: Box<[Mutex<Vec<Vec<f32>>>]>,
    native_allocations: AtomicU64,
    native_bytes: AtomicU64,
    adopted: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    outstanding: AtomicUsize,
    pooled: AtomicUsize,
    /// `outstanding + pooled`, the quantity the limit bounds (reserved before it grows).
    held: AtomicUsize,
    peak: AtomicUsize,
    /// The limit on `held`; `usize::MAX` when none is set.
    limit: AtomicUsize,
}

impl Default for BufferPool {
    fn default() -> Self {
        Self {
            free: (0..CLASSES).map(|_| Mutex::default()).collect(),
            native_allocations: AtomicU64::new(0),
            native_bytes: AtomicU64::new(0),
            adopted: AtomicU64::new(0),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            outstanding: AtomicUsize::new(0),
            pooled: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            limit: AtomicUsize::new(usize::MAX),
        }
    }
}

impl fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.stats(), f)
    }
}

impl BufferPool {
    fn list(&self, class: usize) -> std::sync::MutexGuard<'_, Vec<Vec<f32>>> {
        self.free[class].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts `bytes` of storage as in use and updates the peak.
    fn add_outstanding(&self, bytes: usize) {
        let now = self.outstanding.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.peak.fetch_max(now, Ordering::Relaxed);
    }

    /// Reserves `bytes` more under the limit, freeing idle buffers if that makes room;
    /// fails with [`Error::MemoryLimit`] otherwise.
    fn reserve(&self, op: &'static str, bytes: usize) -> Result<()> {
        let mut trimmed = false;
        loop {
            let held = self.held.load(Ordering::Relaxed);
            let limit = self.limit.load(Ordering::Relaxed);
            let next = held.saturating_add(bytes);
            if next > limit {
                if !trimmed && self.pooled.load(Ordering::Relaxed) > 0 {
                    self.trim();
                    trimmed = true;
                    continue;
                }
                return Err(Error::MemoryLimit {
                    op,
                    bytes,
                    in_use: held,
                    limit,
                });
            }
            if self
                .held
                .compare_exchange_weak(held, next, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                return Ok(());
            }
        }
    }

    /// A buffer of at least `len` elements (a class's length) with its first `len`
    /// elements zeroed when `zero`: an idle one of the class, or a new one.
    fn take(&self, op: &'static str, len: usize, zero: bool) -> Result<Vec<f32>> {
        if len > MAX_ELEMENTS {
            // The error of an impossible request, named as any other.
            return try_zeroed_vec(op, len);
        }
        let class = class_of(len);
        let reused = self.list(class).pop();
        if let Some(mut v) = reused {
            let bytes = v.capacity() * F32;
            self.pooled.fetch_sub(bytes, Ordering::Relaxed);
            self.add_outstanding(bytes);
            self.hits.fetch_add(1, Ordering::Relaxed);
            if zero {
                v[..len].fill(0.0);
            }
            return Ok(v);
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        // The class length, unless that passes the element limit (then exactly `len`).
        let n = match class_len(class) {
            c if c <= MAX_ELEMENTS => c,
            _ => len,
        };
        self.reserve(op, n * F32)?;
        let v = match try_zeroed_vec(op, n) {
            Ok(v) => v,
            Err(e) => {
                self.held.fetch_sub(n * F32, Ordering::Relaxed);
                return Err(e);
            }
        };
        // Account for any extra capacity the allocator gave.
        let bytes = v.capacity() * F32;
        self.held.fetch_add(bytes - n * F32, Ordering::Relaxed);
        self.add_outstanding(bytes);
        self.native_allocations.fetch_add(1, Ordering::Relaxed);
        self.native_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        Ok(v)
    }

    /// Takes the caller's vector `v` into the pool's care (it counts as in use).
    fn adopt(&self, op: &'static str, capacity: usize) -> Result<()> {
        let bytes = capacity * F32;
        self.reserve(op, bytes)?;
        self.add_outstanding(bytes);
        self.adopted.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Stops counting a buffer of `capacity` elements (it leaves the pool's care).
    fn forget(&self, capacity: usize) {
        let bytes = capacity * F32;
        self.outstanding.fetch_sub(bytes, Ordering::Relaxed);
        self.held.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Keeps a released buffer for reuse in the largest class it holds, or frees it when
    /// it is smaller than every class, or idle buffers already fill their allowance, or
    /// it was adopted and its class has an idle buffer already (adopted vectors come
    /// from outside the pool every step, and would otherwise pile up in classes that no
    /// request asks for).
    fn put(&self, mut v: Vec<f32>, adopted: bool) {
        let bytes = v.capacity() * F32;
        self.outstanding.fetch_sub(bytes, Ordering::Relaxed);
        let keep = floor_class(v.capacity()).filter(|_| {
            self.pooled.load(Ordering::Relaxed) + bytes <= MAX_POOLED_BYTES
                && self.held.load(Ordering::Relaxed) <= self.limit.load(Ordering::Relaxed)
        });
        let Some(class) = keep else {
            self.held.fetch_sub(bytes, Ordering::Relaxed);
            return;
        };
        let mut list = self.list(class);
        if adopted && !list.is_empty() {
            drop(list);
            self.held.fetch_sub(bytes, Ordering::Relaxed);
            return;
        }
        // Within the capacity: no reallocation (an adopted vector's tail is zero-filled
        // once).
        v.resize(class_len(class), 0.0);
        self.pooled.fetch_add(bytes, Ordering::Relaxed);
        list.push(v);
    }
}

impl MemoryPool for BufferPool {
    fn stats(&self) -> PoolStats {
        let limit = self.limit.load(Ordering::Relaxed);
        PoolStats {
            native_allocations: self.native_allocations.load(Ordering::Relaxed),
            native_bytes: self.native_bytes.load(Ordering::Relaxed),
            adopted: self.adopted.load(Ordering::Relaxed),
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            outstanding_bytes: self.outstanding.load(Ordering::Relaxed),
            pooled_bytes: self.pooled.load(Ordering::Relaxed),
            peak_bytes: self.peak.load(Ordering::Relaxed),
            limit: (limit != usize::MAX).then_some(limit),
        }
    }

    fn trim(&self) -> usize {
        let mut freed = 0;
        for class in 0..CLASSES {
            let drained = core::mem::take(&mut *self.list(class));
            let bytes: usize = drained.iter().map(|v| v.capacity() * F32).sum();
            if bytes > 0 {
                self.pooled.fetch_sub(bytes, Ordering::Relaxed);
                self.held.fetch_sub(bytes, Ordering::Relaxed);
                freed += bytes;
            }
        }
        freed
    }

    fn set_limit(&self, limit: Option<usize>) -> Result<()> {
        exactgrad_core::memory::check_limit(limit)?;
        let limit = limit.unwrap_or(usize::MAX);
        self.limit.store(limit, Ordering::Relaxed);
        if self.held.load(Ordering::Relaxed) > limit {
            self.trim();
        }
        Ok(())
    }

    fn reset_peak(&self) {
        self.peak
            .store(self.outstanding.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

/// A buffer of `ExactBackend` and `FastBackend`: it dereferences to the `[f32]` of the
/// length asked for, and returns to its compute context's pool when dropped.
pub struct CpuStorage {
    /// The whole buffer (a size class's length, or an adopted vector).
    data: Vec<f32>,
    /// The elements shown.
    len: usize,
    pool: Option<Arc<BufferPool>>,
    /// Whether `data` came from the caller (`storage_from_vec`) rather than the pool.
    adopted: bool,
}

impl CpuStorage {
    /// The elements as a vector (the buffer then leaves the pool's care).
    pub fn into_vec(mut self) -> Vec<f32> {
        let mut data = core::mem::take(&mut self.data);
        if let Some(p) = self.pool.take() {
            p.forget(data.capacity());
        }
        data.truncate(self.len);
        data
    }
}

impl Drop for CpuStorage {
    fn drop(&mut self) {
        if let Some(p) = self.pool.take() {
            p.put(core::mem::take(&mut self.data), self.adopted);
        }
    }
}

impl Deref for CpuStorage {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        &self.data[..self.len]
    }
}

impl DerefMut for CpuStorage {
    fn deref_mut(&mut self) -> &mut [f32] {
        &mut self.data[..self.len]
    }
}

impl AsRef<[f32]> for CpuStorage {
    fn as_ref(&self) -> &[f32] {
        self
    }
}

impl AsMut<[f32]> for CpuStorage {
    fn as_mut(&mut self) -> &mut [f32] {
        self
    }
}

impl fmt::Debug for CpuStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

/// A buffer of `len` elements from `pool`, zero-filled when `zero`.
pub(crate) fn buffer(
    pool: &Arc<BufferPool>,
    op: &'static str,
    len: usize,
    zero: bool,
) -> Result<CpuStorage> {
    let data = pool.take(op, len, zero)?;
    Ok(CpuStorage {
        data,
        len,
        pool: Some(Arc::clone(pool)),
        adopted: false,
    })
}

/// A buffer owning the caller's `data`, which returns to `pool` when dropped.
pub(crate) fn adopt(pool: &Arc<BufferPool>, data: Vec<f32>) -> Result<CpuStorage> {
    pool.adopt("storage_from_vec", data.capacity())?;
    Ok(CpuStorage {
        len: data.len(),
        data,
        pool: Some(Arc::clone(pool)),
        adopted: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_cover_every_length_with_at_most_an_eighth_to_spare() {
        assert_eq!(CLASSES, class_of(MAX_ELEMENTS) + 1);
        let mut prev = 0;
        for c in 0..CLASSES - 1 {
            let l = class_len(c);
            assert!(l > prev, "class lengths increase");
            assert_eq!(class_of(l), c);
            assert_eq!(class_of(l + 1), c + 1);
            assert_eq!(floor_class(l), Some(c));
            assert_eq!(floor_class(l + 1), Some(c));
            prev = l;
        }
        for len in (1..5000).chain([1 << 20, (1 << 20) + 1, 3 << 29, MAX_ELEMENTS]) {
            let l = class_len(class_of(len));
            assert!(
                l >= len && (len <= SMALLEST || 8 * l as u128 <= 9 * len as u128),
                "{len} → {l}"
            );
        }
        assert_eq!(floor_class(SMALLEST - 1), None);
    }

    #[test]
    fn buffers_are_reused_within_their_class_and_zeroed_on_request() {
        let pool = Arc::new(BufferPool::default());
        let mut a = buffer(&pool, "t", 1000, false).unwrap();
        assert_eq!(a.len(), 1000);
        a.fill(3.0);
        let p = a.as_ptr();
        drop(a);
        // 1000 and 1010 are in one class (1024 = 16·64: steps of 64 above 512).
        let b = buffer(&pool, "t", 1010, false).unwrap();
        assert_eq!((b.as_ptr(), b.len()), (p, 1010), "the freed buffer again");
        assert!(b[..1000].iter().all(|&v| v == 3.0));
        drop(b);
        let z = buffer(&pool, "t", 999, true).unwrap();
        assert_eq!(z.as_ptr(), p);
        assert!(z.iter().all(|&v| v.to_bits() == 0));
        // Another class is not served from it.
        let other = buffer(&pool, "t", 2000, false).unwrap();
        assert_ne!(other.as_ptr(), p);
        let s = pool.stats();
        assert_eq!((s.hits, s.misses, s.native_allocations), (2, 2, 2));
        assert_eq!(s.outstanding_bytes, (1024 + 2048) * 4);
        assert_eq!(s.native_bytes, (1024 + 2048) * 4);
        assert_eq!(s.pooled_bytes, 0);
        assert_eq!(s.peak_bytes, (1024 + 2048) * 4);
        assert_eq!(z.into_vec().len(), 999);
        let s = pool.stats();
        assert_eq!(s.outstanding_bytes, 2048 * 4, "into_vec leaves the pool");
        assert_eq!((s.pooled_bytes, s.peak_bytes), (0, (1024 + 2048) * 4));
        drop(other);
        let s = pool.stats();
        assert_eq!((s.outstanding_bytes, s.pooled_bytes), (0, 2048 * 4));
        pool.reset_peak();
        assert_eq!(pool.stats().peak_bytes, 0);
        assert_eq!(pool.trim(), 2048 * 4);
        assert_eq!(pool.stats().pooled_bytes, 0);
    }

    #[test]
    fn adopted_vectors_return_to_the_largest_class_they_hold() {
        let pool = Arc::new(BufferPool::default());
        let v = vec![1.0f32; 40];
        let cap = v.capacity();
        let s = adopt(&pool, v).unwrap();
        assert_eq!((s.len(), pool.stats().adopted), (40, 1));
        assert_eq!(pool.stats().outstanding_bytes, cap * 4);
        let p = s.as_ptr();
        drop(s);
        assert_eq!(pool.stats().pooled_bytes, cap * 4);
        // The class of 40 elements holds 40; a request of 39 gets the adopted buffer.
        let t = buffer(&pool, "t", 39, true).unwrap();
        assert_eq!(t.as_ptr(), p);
        assert_eq!(pool.stats().native_allocations, 0);
        // A vector shorter than the smallest class is not kept.
        drop(adopt(&pool, vec![0.0; 3]).unwrap());
        assert_eq!(pool.stats().pooled_bytes, 0);
        // Adopted vectors of a class that has an idle buffer are freed, not hoarded.
        drop(t);
        for _ in 0..4 {
            drop(adopt(&pool, vec![2.0; 40]).unwrap());
        }
        assert_eq!(pool.stats().pooled_bytes, cap * 4);
    }

    #[test]
    fn a_limit_frees_idle_buffers_then_refuses_with_an_error() {
        let pool = Arc::new(BufferPool::default());
        assert!(pool.set_limit(Some(0)).is_err());
        drop(buffer(&pool, "t", 4096, false).unwrap());
        assert_eq!(pool.stats().pooled_bytes, 4096 * 4);
        pool.set_limit(Some(20_000)).unwrap();
        assert_eq!(pool.stats().limit, Some(20_000));
        // 16 KiB fits but only once the idle 16 KiB are freed.
        let a = buffer(&pool, "t", 4000, false).unwrap();
        let s = pool.stats();
        assert_eq!((s.pooled_bytes, s.outstanding_bytes), (0, 4096 * 4));
        let e = buffer(&pool, "grow", 2000, false).unwrap_err();
        assert!(
            matches!(
                e,
                Error::MemoryLimit {
                    op: "grow",
                    bytes: 8192,
                    in_use: 16384,
                    limit: 20_000
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("memory limit of 20000 bytes"), "{e}");
        assert!(adopt(&pool, vec![0.0; 2000]).is_err());
        // Small requests still fit.
        let b = buffer(&pool, "t", 100, false).unwrap();
        drop((a, b));
        pool.set_limit(None).unwrap();
        assert!(buffer(&pool, "t", 1 << 20, false).is_ok());
    }

    #[test]
    fn buffers_released_on_other_threads_return_to_the_pool() {
        let pool = Arc::new(BufferPool::default());
        let bufs: Vec<CpuStorage> = (0..64)
            .map(|i| buffer(&pool, "t", 100 + i, false).unwrap())
            .collect();
        std::thread::scope(|s| {
            let mut it = bufs.into_iter();
            for _ in 0..4 {
                let part: Vec<CpuStorage> = it.by_ref().take(16).collect();
                s.spawn(move || drop(part));
            }
        });
        let st = pool.stats();
        assert_eq!(st.outstanding_bytes, 0);
        assert_eq!(st.pooled_bytes as u64, st.native_bytes);
    }
}
