//! Tensors' buffers on the device: [`WgpuStorage`] and its views (`docs/gpu.md` §6).
//!
//! A storage is a device buffer of f32 words. Kernels take views of it — a range of
//! words, shared ([`WgpuView`]) or exclusive ([`WgpuViewMut`]) — and run on the device
//! without a copy to the host; only [`ViewFamily::to_host`] (and so `Tensor::to_vec`)
//! and [`ViewFamily::with_host_mut`] move data to or from the host, explicitly.
//!
//! Exclusivity is kept by construction: an exclusive view is made only from
//! `&mut WgpuStorage` (by `BackendImpl::view_mut`) or from another exclusive view
//! (sliced, split in two disjoint parts, or reborrowed), as for `&mut [f32]`.

use crate::device::BufView;
use crate::Shared;
use exactgrad_core::{Result, ViewFamily, ViewLen};
use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::Arc;

/// A buffer of f32 elements on the device (the storage of [`crate::WgpuBackend`]).
pub struct WgpuStorage {
    pub(crate) shared: Arc<Shared>,
    pub(crate) buf: wgpu::Buffer,
    pub(crate) len: usize,
}

impl fmt::Debug for WgpuStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WgpuStorage")
            .field("len", &self.len)
            .finish()
    }
}

impl Drop for WgpuStorage {
    /// Gives the buffer back to the device's pool (`docs/gpu.md` §6.1).
    fn drop(&mut self) {
        self.shared
            .gpu
            .pool
            .release(crate::device::Use::Storage, self.buf.clone());
    }
}

impl WgpuStorage {
    /// A storage of `len` words on the device: `+0` when `zeroed`, else stale words from
    /// the pool (an output that a kernel or an upload overwrites completely).
    pub(crate) fn new(shared: &Arc<Shared>, len: usize, zeroed: bool) -> Result<Self> {
        let buf = shared.gpu.buffer(len, zeroed)?.detach();
        Ok(WgpuStorage {
            shared: Arc::clone(shared),
            buf,
            len,
        })
    }

    /// A shared view of all of it.
    pub(crate) fn view(&self) -> WgpuView<'_> {
        WgpuView {
            storage: self,
            start: 0,
            len: self.len,
        }
    }

    /// An exclusive view of all of it.
    pub(crate) fn view_mut(&mut self) -> WgpuViewMut<'_> {
        WgpuViewMut {
            storage: self,
            start: 0,
            len: self.len,
            _exclusive: PhantomData,
        }
    }
}

/// Elements `start .. start + len` of a [`WgpuStorage`], shared.
#[derive(Clone, Copy)]
pub struct WgpuView<'a> {
    storage: &'a WgpuStorage,
    start: usize,
    len: usize,
}

/// Elements `start .. start + len` of a [`WgpuStorage`], exclusively (a kernel writes
/// them).
pub struct WgpuViewMut<'a> {
    storage: &'a WgpuStorage,
    start: usize,
    len: usize,
    _exclusive: PhantomData<&'a mut WgpuStorage>,
}

impl fmt::Debug for WgpuView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WgpuView({}..{})", self.start, self.start + self.len)
    }
}

impl fmt::Debug for WgpuViewMut<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WgpuViewMut({}..{})", self.start, self.start + self.len)
    }
}

impl ViewLen for WgpuView<'_> {
    fn len(&self) -> usize {
        self.len
    }
}

impl ViewLen for WgpuViewMut<'_> {
    fn len(&self) -> usize {
        self.len
    }
}

impl<'a> WgpuView<'a> {
    /// The words the device binds.
    pub(crate) fn buf_view(&self) -> BufView<'a> {
        BufView {
            buf: &self.storage.buf,
            start: self.start,
            len: self.len,
            cap: self.storage.len,
        }
    }
}

impl WgpuViewMut<'_> {
    /// The words the device binds.
    pub(crate) fn buf_view(&self) -> BufView<'_> {
        WgpuViews::freeze(self).buf_view()
    }

    /// Fills the view with `+0` (an upload, in pieces of at most 1 Mi words from one
    /// buffer of zeros allocated fallibly: a view may be larger than the host's free
    /// memory).
    pub(crate) fn zero(self) -> Result<()> {
        const PIECE: usize = 1 << 20;
        let zeros =
            exactgrad_core::backend::try_vec_filled("wgpu zero", self.len.min(PIECE), 0u32)?;
        let mut at = 0;
        while at < self.len {
            let n = PIECE.min(self.len - at);
            self.storage
                .shared
                .gpu
                .write(&self.storage.buf, self.start + at, &zeros[..n])?;
            at += n;
        }
        Ok(())
    }
}

/// The sub-range `range` of a view of `len` elements starting at `start`, as slice
/// indexing checks it (a range outside the view panics: callers compute ranges from the
/// sizes the kernels' checks then verify).
fn sub(start: usize, len: usize, range: Range<usize>) -> (usize, usize) {
    assert!(
        range.start <= range.end && range.end <= len,
        "range {range:?} out of a view of {len} elements"
    );
    (start + range.start, range.end - range.start)
}

/// The view family of [`crate::WgpuBackend`]: device buffers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WgpuViews;

impl ViewFamily for WgpuViews {
    type View<'a> = WgpuView<'a>;
    type ViewMut<'a> = WgpuViewMut<'a>;

    fn slice<'a>(v: Self::View<'a>, range: Range<usize>) -> Self::View<'a> {
        let (start, len) = sub(v.start, v.len, range);
        WgpuView { start, len, ..v }
    }

    fn slice_mut<'a>(v: Self::ViewMut<'a>, range: Range<usize>) -> Self::ViewMut<'a> {
        let (start, len) = sub(v.start, v.len, range);
        WgpuViewMut { start, len, ..v }
    }

    fn split_at_mut<'a>(
        v: Self::ViewMut<'a>,
        mid: usize,
    ) -> (Self::ViewMut<'a>, Self::ViewMut<'a>) {
        assert!(
            mid <= v.len,
            "split at {mid} of a view of {} elements",
            v.len
        );
        let storage = v.storage;
        (
            WgpuViewMut {
                storage,
                start: v.start,
                len: mid,
                _exclusive: PhantomData,
            },
            WgpuViewMut {
                storage,
                start: v.start + mid,
                len: v.len - mid,
                _exclusive: PhantomData,
            },
        )
    }

    fn reborrow<'s>(v: &'s mut Self::ViewMut<'_>) -> Self::ViewMut<'s> {
        WgpuViewMut {
            storage: v.storage,
            start: v.start,
            len: v.len,
            _exclusive: PhantomData,
        }
    }

    fn freeze<'s>(v: &'s Self::ViewMut<'_>) -> Self::View<'s> {
        WgpuView {
            storage: v.storage,
            start: v.start,
            len: v.len,
        }
    }

    fn shorten<'s, 'a: 's>(v: Self::View<'a>) -> Self::View<'s> {
        v
    }

    fn shorten_mut<'s, 'a: 's>(v: Self::ViewMut<'a>) -> Self::ViewMut<'s> {
        v
    }

    fn to_host<'a>(v: Self::View<'a>) -> Result<Cow<'a, [f32]>> {
        let words = v.storage.shared.gpu.read(&v.storage.buf, v.start, v.len)?;
        Ok(Cow::Owned(words.into_iter().map(f32::from_bits).collect()))
    }

    fn with_host_mut<R>(v: Self::ViewMut<'_>, f: impl FnOnce(&mut [f32]) -> R) -> Result<R> {
        let gpu = &v.storage.shared.gpu;
        let mut host: Vec<f32> = gpu
            .read(&v.storage.buf, v.start, v.len)?
            .into_iter()
            .map(f32::from_bits)
            .collect();
        let r = f(&mut host);
        gpu.write(&v.storage.buf, v.start, bytemuck::cast_slice(&host))?;
        Ok(r)
    }
}
