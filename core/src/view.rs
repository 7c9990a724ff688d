//! Views: how a kernel sees a part of a backend's storage.
//!
//! A backend's storage need not be host memory (`docs/gpu.md` §6). Kernels therefore take
//! *views* — a part of a buffer, by shared or exclusive borrow — whose types the backend
//! names through a [`ViewFamily`]. On a host backend ([`HostViews`]) a view is a slice,
//! `&'a [f32]` or `&'a mut [f32]`, so its kernels keep their slice signatures and bodies;
//! a device backend's view is a buffer handle with a range. Code generic over the backend
//! (autograd, the reference definitions) moves views around with the family's functions
//! and reads or writes elements only through [`ViewFamily::to_host`] and
//! [`ViewFamily::with_host_mut`], which are free on a host backend and an explicit
//! download or upload on a device.

use crate::error::Result;
use alloc::borrow::Cow;
use core::fmt::Debug;
use core::ops::Range;

/// The number of f32 elements a view covers.
pub trait ViewLen {
    /// The number of elements.
    fn len(&self) -> usize;

    /// Whether the view covers no element.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl ViewLen for &[f32] {
    fn len(&self) -> usize {
        <[f32]>::len(self)
    }
}

impl ViewLen for &mut [f32] {
    fn len(&self) -> usize {
        <[f32]>::len(self)
    }
}

/// The view types of a backend's storage and the operations generic code needs on them.
///
/// Ranges are in elements; a range outside the view panics, as slice indexing does (the
/// callers compute them from sizes that the kernels' checks then verify).
pub trait ViewFamily: Copy + Debug + Send + Sync + 'static {
    /// A shared view of `len` elements (a slice on the host).
    type View<'a>: Copy + Debug + Send + Sync + ViewLen;
    /// An exclusive view that a kernel writes (a mutable slice on the host).
    type ViewMut<'a>: Debug + Send + ViewLen;

    /// The elements `range` of `v`.
    fn slice<'a>(v: Self::View<'a>, range: Range<usize>) -> Self::View<'a>;

    /// The elements `range` of `v`, exclusively.
    fn slice_mut<'a>(v: Self::ViewMut<'a>, range: Range<usize>) -> Self::ViewMut<'a>;

    /// `v` split at element `mid` into `[0, mid)` and `[mid, len)`, both exclusive.
    fn split_at_mut<'a>(v: Self::ViewMut<'a>, mid: usize)
        -> (Self::ViewMut<'a>, Self::ViewMut<'a>);

    /// A shorter exclusive borrow of `v`, so that `v` can be used again afterwards.
    fn reborrow<'s>(v: &'s mut Self::ViewMut<'_>) -> Self::ViewMut<'s>;

    /// A shared view of what `v` holds, for reading an output after a kernel wrote it.
    fn freeze<'s>(v: &'s Self::ViewMut<'_>) -> Self::View<'s>;

    /// `v` with a shorter lifetime (views are invariant in their lifetime in generic
    /// code; on the host this is the identity).
    fn shorten<'s, 'a: 's>(v: Self::View<'a>) -> Self::View<'s>;

    /// `v` with a shorter lifetime, exclusively.
    fn shorten_mut<'s, 'a: 's>(v: Self::ViewMut<'a>) -> Self::ViewMut<'s>;

    /// The elements of `v` on the host: borrowed on a host backend, a download on a
    /// device.
    fn to_host<'a>(v: Self::View<'a>) -> Result<Cow<'a, [f32]>>;

    /// Runs `f` on the elements of `v` as a host slice and keeps what it wrote: in place
    /// on a host backend; on a device a download, `f`, and an upload.
    fn with_host_mut<R>(v: Self::ViewMut<'_>, f: impl FnOnce(&mut [f32]) -> R) -> Result<R>;
}

/// The views of host memory: slices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostViews;

impl ViewFamily for HostViews {
    type View<'a> = &'a [f32];
    type ViewMut<'a> = &'a mut [f32];

    fn slice<'a>(v: Self::View<'a>, range: Range<usize>) -> Self::View<'a> {
        &v[range]
    }

    fn slice_mut<'a>(v: Self::ViewMut<'a>, range: Range<usize>) -> Self::ViewMut<'a> {
        &mut v[range]
    }

    fn split_at_mut<'a>(
        v: Self::ViewMut<'a>,
        mid: usize,
    ) -> (Self::ViewMut<'a>, Self::ViewMut<'a>) {
        v.split_at_mut(mid)
    }

    fn reborrow<'s>(v: &'s mut &mut [f32]) -> &'s mut [f32] {
        v
    }

    fn freeze<'s>(v: &'s &mut [f32]) -> &'s [f32] {
        v
    }

    fn shorten<'s, 'a: 's>(v: &'a [f32]) -> &'s [f32] {
        v
    }

    fn shorten_mut<'s, 'a: 's>(v: &'a mut [f32]) -> &'s mut [f32] {
        v
    }

    fn to_host<'a>(v: Self::View<'a>) -> Result<Cow<'a, [f32]>> {
        Ok(Cow::Borrowed(v))
    }

    fn with_host_mut<R>(v: &mut [f32], f: impl FnOnce(&mut [f32]) -> R) -> Result<R> {
        Ok(f(v))
    }
}

/// The view items of a [`BackendImpl`](crate::BackendImpl) whose storage is host memory
/// (`AsRef<[f32]> + AsMut<[f32]>`, such as `Vec<f32>`): `type Views = HostViews` and
/// `view`/`view_mut` as slices. Written inside the `impl` block.
///
/// ```
/// use exactgrad_core::backend::{BackendImpl, Checked, CopyStridedArgs};
/// # use exactgrad_core::backend::*;
/// # use exactgrad_core::{ComputeMode, Result};
/// #[derive(Clone, Debug)]
/// struct Mine;
/// impl BackendImpl for Mine {
///     type Storage = Vec<f32>;
///     exactgrad_core::host_views!();
///     fn name(&self) -> String { "mine".into() }
///     fn mode(&self) -> ComputeMode { ComputeMode::Exact }
///     fn zeros(&self, len: usize) -> Result<Vec<f32>> { Ok(vec![0.0; len]) }
///     fn storage_from_vec(&self, data: Vec<f32>) -> Result<Vec<f32>> { Ok(data) }
///     // ... the nine required kernels, on slices:
/// #   fn copy_strided_impl(&self, _: Checked<CopyStridedArgs<'_>>) -> Result<()> { Ok(()) }
/// #   fn unary_impl(&self, _: Checked<UnaryArgs<'_>>) -> Result<()> { Ok(()) }
/// #   fn unary_backward_impl(&self, _: Checked<UnaryBackwardArgs<'_>>) -> Result<()> { Ok(()) }
/// #   fn binary_impl(&self, _: Checked<BinaryArgs<'_>>) -> Result<()> { Ok(()) }
/// #   fn select_impl(&self, _: Checked<SelectArgs<'_>>) -> Result<()> { Ok(()) }
/// #   fn sum_impl(&self, _: Checked<SumArgs<'_>>) -> Result<()> { Ok(()) }
/// #   fn matmul_impl(&self, _: Checked<MatmulArgs<'_>>) -> Result<()> { Ok(()) }
/// #   fn softmax_impl(&self, _: Checked<SoftmaxArgs<'_>>) -> Result<()> { Ok(()) }
/// #   fn softmax_backward_impl(&self, _: Checked<SoftmaxBackwardArgs<'_>>) -> Result<()> { Ok(()) }
/// }
/// ```
#[macro_export]
macro_rules! host_views {
    () => {
        type Views = $crate::HostViews;

        fn view(s: &Self::Storage) -> &[f32] {
            ::core::convert::AsRef::<[f32]>::as_ref(s)
        }

        fn view_mut(s: &mut Self::Storage) -> &mut [f32] {
            ::core::convert::AsMut::<[f32]>::as_mut(s)
        }
    };
}
