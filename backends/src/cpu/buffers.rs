//! The buffers of the CPU backends: [`CpuStorage`], a `Vec<f32>` that goes back to its
//! compute context's cache when dropped, so that a training loop, which allocates the
//! same sizes every step, reuses warm memory instead of asking the system for fresh pages
//! (each of which costs a page fault and a zero-fill by the kernel) every step.
//!
//! Only buffers of at least [`MIN_LEN`] elements are kept, up to [`MAX_BYTES`] per
//! context; a buffer is handed out again only for a request of exactly its length. A
//! reused buffer's values are whatever it held: [`Backend::uninit`] promises only
//! initialised values, and [`Backend::zeros`] fills it with `+0`.
//!
//! [`Backend::uninit`]: exactgrad_core::Backend::uninit
//! [`Backend::zeros`]: exactgrad_core::Backend::zeros

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::ops::{Deref, DerefMut};
use exactgrad_core::backend::try_zeroed_vec;
use exactgrad_core::Result;
use std::collections::HashMap;
use std::sync::Mutex;

/// Buffers shorter than this (16 KiB) are left to the allocator.
pub const MIN_LEN: usize = 1 << 12;
/// At most this many bytes of free buffers are kept per compute context.
pub const MAX_BYTES: usize = 512 << 20;

/// Free buffers by length, and their total size in bytes.
type FreeLists = (HashMap<usize, Vec<Vec<f32>>>, usize);

/// Free buffers by length.
#[derive(Default)]
pub(crate) struct BufferCache {
    free: Mutex<FreeLists>,
}

impl BufferCache {
    /// A cached buffer of exactly `len` elements, if there is one.
    fn take(&self, len: usize) -> Option<Vec<f32>> {
        if len < MIN_LEN {
            return None;
        }
        let mut g = self.free.lock().unwrap_or_else(|e| e.into_inner());
        let (map, bytes) = &mut *g;
        let v = map.get_mut(&len)?.pop()?;
        *bytes -= v.capacity() * core::mem::size_of::<f32>();
        Some(v)
    }

    /// Keeps `v` for reuse, or frees it when it is small or the cache is full.
    fn put(&self, v: Vec<f32>) {
        let size = v.capacity() * core::mem::size_of::<f32>();
        if v.len() < MIN_LEN {
            return;
        }
        let mut g = self.free.lock().unwrap_or_else(|e| e.into_inner());
        let (map, bytes) = &mut *g;
        if *bytes + size > MAX_BYTES {
            return;
        }
        *bytes += size;
        map.entry(v.len()).or_default().push(v);
    }
}

/// A buffer of `ExactBackend` and `FastBackend`: it dereferences to `[f32]`, and returns
/// to its compute context's cache when dropped.
pub struct CpuStorage {
    data: Vec<f32>,
    cache: Option<Arc<BufferCache>>,
}

impl CpuStorage {
    /// A buffer owning `data` that goes back to `cache` when dropped.
    pub(crate) fn new(data: Vec<f32>, cache: &Arc<BufferCache>) -> Self {
        Self {
            data,
            cache: Some(Arc::clone(cache)),
        }
    }

    /// The elements as a vector (the buffer then leaves the cache's care).
    pub fn into_vec(mut self) -> Vec<f32> {
        self.cache = None;
        core::mem::take(&mut self.data)
    }
}

impl Drop for CpuStorage {
    fn drop(&mut self) {
        if let Some(c) = self.cache.take() {
            c.put(core::mem::take(&mut self.data));
        }
    }
}

impl Deref for CpuStorage {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        &self.data
    }
}

impl DerefMut for CpuStorage {
    fn deref_mut(&mut self) -> &mut [f32] {
        &mut self.data
    }
}

impl AsRef<[f32]> for CpuStorage {
    fn as_ref(&self) -> &[f32] {
        &self.data
    }
}

impl AsMut<[f32]> for CpuStorage {
    fn as_mut(&mut self) -> &mut [f32] {
        &mut self.data
    }
}

impl fmt::Debug for CpuStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.data, f)
    }
}

/// A buffer of `len` elements from `cache` or the allocator, zero-filled when `zero`.
pub(crate) fn buffer(
    cache: &Arc<BufferCache>,
    op: &'static str,
    len: usize,
    zero: bool,
) -> Result<CpuStorage> {
    let data = match cache.take(len) {
        Some(mut v) => {
            if zero {
                v.fill(0.0);
            }
            v
        }
        None => try_zeroed_vec(op, len)?,
    };
    Ok(CpuStorage::new(data, cache))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_reused_by_length_and_zeroed_on_request() {
        let cache = Arc::new(BufferCache::default());
        let mut a = buffer(&cache, "t", MIN_LEN, false).unwrap();
        a.fill(3.0);
        let p = a.as_ptr();
        drop(a);
        let b = buffer(&cache, "t", MIN_LEN, false).unwrap();
        assert_eq!(b.as_ptr(), p, "the freed buffer is handed out again");
        assert!(b.iter().all(|&v| v == 3.0));
        drop(b);
        let z = buffer(&cache, "t", MIN_LEN, true).unwrap();
        assert_eq!(z.as_ptr(), p);
        assert!(z.iter().all(|&v| v.to_bits() == 0));
        // Another length is not served from it; a small buffer is not kept.
        let other = buffer(&cache, "t", MIN_LEN + 1, false).unwrap();
        assert_ne!(other.as_ptr(), p);
        let small = buffer(&cache, "t", 8, false).unwrap();
        drop(small);
        assert!(cache.take(8).is_none());
        assert_eq!(z.into_vec().len(), MIN_LEN);
        assert!(
            cache.take(MIN_LEN).is_none(),
            "into_vec takes the buffer out of the cache"
        );
    }
}
