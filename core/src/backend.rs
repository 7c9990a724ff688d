//! The [`Backend`] trait that callers use, and [`BackendImpl`], what a backend
//! implements: storage and the kernels every operator is built from.
//!
//! A backend is a value (cheap to clone) that tensors carry; it names its storage type and
//! its compute mode and provides kernels over views of its storage with explicit layouts
//! (slices on a host backend; [`crate::view`] and `docs/backends.md` §4). Kernels never
//! allocate their outputs (the caller passes them) and never read global state. Outputs
//! are contiguous and row-major. The bits each kernel must produce in exact mode are
//! defined by `ScalarRefBackend` (crate `exactgrad-backends`) and written down in
//! `docs/arithmetic.md`.
//!
//! Every kernel of [`Backend`] is a safe function that first checks its arguments against
//! its buffers (lengths, and every [`Layout`] with [`Layout::check_within`], in checked
//! arithmetic, once per call) and returns an error instead of reading or writing out of
//! bounds. [`Backend`] is implemented once, here, for every [`BackendImpl`]: the check
//! runs there, and only arguments that passed it reach the backend's `*_impl` method, as
//! [`Checked`] arguments that nothing outside this crate can build (`docs/backends.md`).
//! Buffers are obtained fallibly: an allocation the allocator refuses, or a size above
//! [`MAX_ELEMENTS`], is an [`Error::Alloc`] or [`Error::TooLarge`], never an abort.
//!
//! Over 800 lines on purpose: the two traits, the one checked implementation of
//! [`Backend`] and the 28 argument structs it hands on are one contract, read together;
//! the argument structs cannot move to a file of their own before [`MatmulSpec`] does,
//! or the files would import each other.

use crate::check;
use crate::error::{Error, Result};
use crate::kernels::{
    self, AdamSpec, AdaptivePool2dSpec, AttentionScoresSpec, AvgPool2dSpec, Col2imSpec, NormGrads,
    NormSpec, NormStats, Pool2dSpec, ScoreMask, SgdSpec,
};
use crate::mode::ComputeMode;
pub use crate::ops::{BinaryOp, UnaryOp};
use crate::recurrent::{
    self, CellShape, GruCellGradInputs, GruCellGradOutputs, GruCellInputs, GruCellOutputs,
    LstmCellGradInputs, LstmCellGradOutputs, LstmCellInputs, LstmCellOutputs,
};
use crate::shape::{Layout, MAX_ELEMENTS};
pub use crate::view::{HostViews, ViewFamily, ViewLen};
use alloc::borrow::Cow;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Debug;
use core::ops::Range;

/// A shared view of backend `B`'s storage (`&'a [f32]` on a host backend).
pub type ViewOf<'a, B> = <<B as BackendImpl>::Views as ViewFamily>::View<'a>;

/// An exclusive view of backend `B`'s storage (`&'a mut [f32]` on a host backend).
pub type ViewMutOf<'a, B> = <<B as BackendImpl>::Views as ViewFamily>::ViewMut<'a>;

/// The length and overflow checks, defined in [`crate::check`] (re-exported here, where
/// they were first defined).
pub use crate::check::{check_len, checked_mul};

/// A zero-filled vector of `len` f32, obtained fallibly: a length above [`MAX_ELEMENTS`]
/// is an [`Error::TooLarge`] and a refused allocation an [`Error::Alloc`].
pub fn try_zeroed_vec(op: &'static str, len: usize) -> Result<Vec<f32>> {
    if len > MAX_ELEMENTS {
        return Err(Error::TooLarge {
            op,
            dims: alloc::vec![len],
            limit: MAX_ELEMENTS,
        });
    }
    try_vec_filled(op, len, 0.0)
}

/// Reserves room for `additional` more elements in `v`, fallibly: a request above
/// `isize::MAX` bytes, or one the allocator refuses, is an [`Error::Alloc`] naming `op`
/// (never an abort). For the scratch tables and index lists whose length comes from the
/// caller's sizes.
pub fn try_reserve<T>(op: &'static str, v: &mut Vec<T>, additional: usize) -> Result<()> {
    v.try_reserve_exact(additional).map_err(|_| {
        let bytes = v
            .len()
            .saturating_add(additional)
            .saturating_mul(core::mem::size_of::<T>());
        Error::Alloc {
            op,
            bytes,
            reason: if bytes > isize::MAX as usize {
                "the size exceeds isize::MAX bytes"
            } else {
                "the allocator refused the request"
            },
        }
    })
}

/// An empty vector with room for `len` elements, obtained fallibly (see [`try_reserve`]).
pub fn try_vec_with_capacity<T>(op: &'static str, len: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    try_reserve(op, &mut v, len)?;
    Ok(v)
}

/// A vector of `len` copies of `value`, obtained fallibly (see [`try_reserve`]).
pub fn try_vec_filled<T: Clone>(op: &'static str, len: usize, value: T) -> Result<Vec<T>> {
    let mut v = try_vec_with_capacity(op, len)?;
    v.resize(len, value);
    Ok(v)
}

/// The items of `iter` in a vector whose memory is obtained fallibly up front (see
/// [`try_reserve`]), for iterators whose length comes from the caller's sizes.
pub fn try_collect<T>(op: &'static str, iter: impl ExactSizeIterator<Item = T>) -> Result<Vec<T>> {
    let mut v = try_vec_with_capacity(op, iter.len())?;
    v.extend(iter);
    Ok(v)
}

/// Sizes and element strides of a batched matrix product `out[b] = a[b] · b[b]` with
/// `a[b]: m×k`, `b[b]: k×n` and a contiguous `out` of shape `[batch, m, n]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulSpec {
    /// Number of matrices in the batch.
    pub batch: usize,
    /// Rows of each `a` and of each output.
    pub m: usize,
    /// Columns of `a`, rows of `b`: the reduction length.
    pub k: usize,
    /// Columns of each `b` and of each output.
    pub n: usize,
    /// Storage offset of `a[0][0][0]`.
    pub a_offset: usize,
    /// Strides of `a`: batch, row, column (a batch stride of 0 repeats one matrix).
    pub a_strides: [usize; 3],
    /// Storage offset of `b[0][0][0]`.
    pub b_offset: usize,
    /// Strides of `b`: batch, row, column.
    pub b_strides: [usize; 3],
}

impl MatmulSpec {
    /// The longest reduction a product takes: [`MAX_ELEMENTS`] / 64, so that a panel of
    /// `k` steps of 64 columns (the widest that the CPU backends pack) is a buffer that can
    /// exist. Only operands broadcast along `k` (stride 0) reach it; every backend refuses
    /// a longer one the same way.
    pub const MAX_K: usize = MAX_ELEMENTS / 64;

    /// The product of segment `s` of length `seg` along `k`: steps `s·seg .. (s+1)·seg`,
    /// every element of which this spec addresses (`matmul_acc`'s segments).
    pub fn segment(&self, s: usize, seg: usize) -> MatmulSpec {
        MatmulSpec {
            k: seg,
            a_offset: self.a_offset + s * seg * self.a_strides[2],
            b_offset: self.b_offset + s * seg * self.b_strides[1],
            ..*self
        }
    }

    /// Checks the spec against the buffers of a product: `out` holds exactly
    /// `batch · m · n` elements, every element of `a` (`batch × m × k`) and `b`
    /// (`batch × k × n`) that the strides address lies inside its buffer, all in checked
    /// arithmetic; each operand has at most [`MAX_ELEMENTS`] elements (as a tensor view
    /// has, broadcast ones included) and `k` is at most [`MatmulSpec::MAX_K`].
    pub fn check(&self, a_len: usize, b_len: usize, out_len: usize) -> Result<()> {
        let op = "matmul";
        let mn = checked_mul(op, "n", self.m, self.n)?;
        check_len(
            op,
            "out",
            out_len,
            checked_mul(op, "batch", self.batch, mn)?,
        )?;
        self.check_layouts(a_len, b_len)?;
        if self.m > 0 && self.n > 0 && self.batch > 0 {
            for dims in [[self.batch, self.m, self.k], [self.batch, self.k, self.n]] {
                let count = dims
                    .iter()
                    .try_fold(1usize, |c, &d| c.checked_mul(d))
                    .filter(|&c| c <= MAX_ELEMENTS);
                if count.is_none() {
                    return Err(Error::TooLarge {
                        op,
                        dims: dims.to_vec(),
                        limit: MAX_ELEMENTS,
                    });
                }
            }
            if self.k > Self::MAX_K {
                return Err(Error::invalid(
                    op,
                    "k",
                    alloc::format!(
                        "a reduction of {} steps exceeds the longest a product takes, {} (MAX_ELEMENTS / 64)",
                        self.k,
                        Self::MAX_K
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The layout part of [`MatmulSpec::check`]: every element of `a` and `b` that the
    /// strides address lies inside its buffer.
    fn check_layouts(&self, a_len: usize, b_len: usize) -> Result<()> {
        let op = "matmul";
        let extent = |dims: [usize; 3], offset: usize, strides: [usize; 3]| -> Option<usize> {
            if dims.contains(&0) {
                return Some(0);
            }
            let mut last = offset;
            for (d, s) in dims.iter().zip(strides) {
                last = last.checked_add((d - 1).checked_mul(s)?)?;
            }
            last.checked_add(1)
        };
        for (arg, dims, offset, strides, len) in [
            (
                "a",
                [self.batch, self.m, self.k],
                self.a_offset,
                self.a_strides,
                a_len,
            ),
            (
                "b",
                [self.batch, self.k, self.n],
                self.b_offset,
                self.b_strides,
                b_len,
            ),
        ] {
            match extent(dims, offset, strides) {
                Some(e) if e <= len => {}
                _ => {
                    return Err(Error::invalid(
                        op,
                        arg,
                        alloc::format!(
                            "operand of sizes {dims:?}, strides {strides:?}, offset {offset} does not fit in its buffer of {len} elements"
                        ),
                    ))
                }
            }
        }
        Ok(())
    }
}

/// Arguments that passed their kernel's check in [`Backend`].
///
/// Only core builds one: the kernels of [`Backend`] (implemented once, here, for every
/// [`BackendImpl`]) run the kernel's check and hand its arguments, wrapped, to the
/// backend's `*_impl` method. A backend's kernel therefore receives lengths and layouts
/// that agree with its buffers, without checking them itself, and cannot be reached with
/// arguments that did not pass the check (`docs/backends.md`, "Checked by construction").
/// Each kernel has its own argument type, so arguments checked for one kernel cannot be
/// passed to another. There is no mutable access to the wrapped arguments: a kernel
/// reads them through [`Deref`](core::ops::Deref) or takes them apart with
/// [`Checked::into_inner`].
#[derive(Debug)]
pub struct Checked<A>(A);

impl<A> Checked<A> {
    /// Wraps arguments that passed their kernel's check (core's kernels only).
    pub(crate) fn new(args: A) -> Self {
        Self(args)
    }

    /// The checked arguments, taken apart by the kernel that runs on them.
    pub fn into_inner(self) -> A {
        self.0
    }
}

impl<A> core::ops::Deref for Checked<A> {
    type Target = A;

    fn deref(&self) -> &A {
        &self.0
    }
}

/// Defines the argument struct of each kernel: the parameters of the [`Backend`] method
/// of the same name, in the same order, as public fields.
macro_rules! kernel_args {
    ($(
        $(#[$doc:meta])*
        $name:ident<$a:lifetime, $f:ident> { $($field:ident: $ty:ty),* $(,)? }
    )*) => {$(
        $(#[$doc])*
        #[derive(Debug)]
        #[allow(missing_docs)]
        pub struct $name<$a, $f: ViewFamily = HostViews> {
            $(pub $field: $ty,)*
        }
    )*};
}

kernel_args! {
    /// The arguments of [`Backend::copy_strided`].
    CopyStridedArgs<'a, F> { src: F::View<'a>, layout: &'a Layout, out: F::ViewMut<'a> }
    /// The arguments of [`Backend::unary`].
    UnaryArgs<'a, F> { op: UnaryOp, x: F::View<'a>, out: F::ViewMut<'a> }
    /// The arguments of [`Backend::digest`].
    DigestArgs<'a, F> { x: F::View<'a> }
    /// The arguments of [`Backend::unary_backward`].
    UnaryBackwardArgs<'a, F> { op: UnaryOp, x: F::View<'a>, y: F::View<'a>, g: F::View<'a>, out: F::ViewMut<'a> }
    /// The arguments of [`Backend::binary`].
    BinaryArgs<'a, F> {
        op: BinaryOp, a: F::View<'a>, la: &'a Layout, b: F::View<'a>, lb: &'a Layout,
        out: F::ViewMut<'a>,
    }
    /// The arguments of [`Backend::select`].
    SelectArgs<'a, F> {
        cond: F::View<'a>, lc: &'a Layout, a: F::View<'a>, la: &'a Layout, b: F::View<'a>,
        lb: &'a Layout, out: F::ViewMut<'a>,
    }
    /// The arguments of [`Backend::sum`].
    SumArgs<'a, F> { x: F::View<'a>, layout: &'a Layout, reduce: &'a [bool], out: F::ViewMut<'a> }
    /// The arguments of [`Backend::matmul`].
    MatmulArgs<'a, F> { spec: &'a MatmulSpec, a: F::View<'a>, b: F::View<'a>, out: F::ViewMut<'a> }
    /// The arguments of [`Backend::matmul_acc`].
    MatmulAccArgs<'a, F> {
        spec: &'a MatmulSpec, seg: usize, a: F::View<'a>, b: F::View<'a>, out: F::ViewMut<'a>,
    }
    /// The arguments of [`Backend::softmax`].
    SoftmaxArgs<'a, F> { x: F::View<'a>, rows: usize, cols: usize, log: bool, out: F::ViewMut<'a> }
    /// The arguments of [`Backend::softmax_backward`].
    SoftmaxBackwardArgs<'a, F> {
        y: F::View<'a>, g: F::View<'a>, rows: usize, cols: usize, log: bool, out: F::ViewMut<'a>,
    }
    /// The arguments of [`Backend::lstm_cell`].
    LstmCellArgs<'a, F> { shape: CellShape, inputs: LstmCellInputs<'a, F>, outputs: LstmCellOutputs<'a, F> }
    /// The arguments of [`Backend::lstm_cell_backward`].
    LstmCellBackwardArgs<'a, F> {
        shape: CellShape, inputs: LstmCellGradInputs<'a, F>, outputs: LstmCellGradOutputs<'a, F>,
    }
    /// The arguments of [`Backend::gru_cell`].
    GruCellArgs<'a, F> { shape: CellShape, inputs: GruCellInputs<'a, F>, outputs: GruCellOutputs<'a, F> }
    /// The arguments of [`Backend::gru_cell_backward`].
    GruCellBackwardArgs<'a, F> {
        shape: CellShape, inputs: GruCellGradInputs<'a, F>, outputs: GruCellGradOutputs<'a, F>,
    }
    /// The arguments of [`Backend::norm_stats`].
    NormStatsArgs<'a, F> {
        spec: &'a NormSpec, x: F::View<'a>, mean: F::ViewMut<'a>, corr: F::ViewMut<'a>,
        sq_sum: F::ViewMut<'a>,
    }
    /// The arguments of [`Backend::norm_forward`].
    NormForwardArgs<'a, F> {
        spec: &'a NormSpec, x: F::View<'a>, stats: &'a NormStats<'a, F>, weight: Option<F::View<'a>>,
        bias: Option<F::View<'a>>, out: F::ViewMut<'a>,
    }
    /// The arguments of [`Backend::norm_backward`].
    NormBackwardArgs<'a, F> {
        spec: &'a NormSpec, x: F::View<'a>, g: F::View<'a>, stats: &'a NormStats<'a, F>,
        weight: Option<F::View<'a>>, stats_depend: bool, grads: NormGrads<'a, F>,
    }
    /// The arguments of [`Backend::max_pool2d`].
    MaxPool2dArgs<'a, F> {
        spec: &'a Pool2dSpec, x: F::View<'a>, out: F::ViewMut<'a>, argmax: &'a mut [usize],
    }
    /// The arguments of [`Backend::max_pool2d_backward`].
    MaxPool2dBackwardArgs<'a, F> {
        spec: &'a Pool2dSpec, argmax: &'a [usize], g: F::View<'a>, gx: F::ViewMut<'a>,
    }
    /// The arguments of [`Backend::avg_pool2d`].
    AvgPool2dArgs<'a, F> { spec: &'a AvgPool2dSpec, x: F::View<'a>, out: F::ViewMut<'a> }
    /// The arguments of [`Backend::avg_pool2d_backward`].
    AvgPool2dBackwardArgs<'a, F> { spec: &'a AvgPool2dSpec, g: F::View<'a>, gx: F::ViewMut<'a> }
    /// The arguments of [`Backend::adaptive_avg_pool2d`].
    AdaptiveAvgPool2dArgs<'a, F> { spec: &'a AdaptivePool2dSpec, x: F::View<'a>, out: F::ViewMut<'a> }
    /// The arguments of [`Backend::adaptive_avg_pool2d_backward`].
    AdaptiveAvgPool2dBackwardArgs<'a, F> {
        spec: &'a AdaptivePool2dSpec, g: F::View<'a>, gx: F::ViewMut<'a>,
    }
    /// The arguments of [`Backend::im2col`].
    Im2colArgs<'a, F> { spec: &'a Col2imSpec, image: F::View<'a>, cols: F::ViewMut<'a> }
    /// The arguments of [`Backend::col2im`].
    Col2imArgs<'a, F> { spec: &'a Col2imSpec, cols: F::View<'a>, image: F::ViewMut<'a> }
    /// The arguments of [`Backend::attention_scores`].
    AttentionScoresArgs<'a, F> {
        spec: &'a AttentionScoresSpec, scores: F::ViewMut<'a>,
        mask: Option<(ScoreMask, F::View<'a>, &'a Layout)>,
    }
    /// The arguments of [`Backend::dropout_mask`].
    DropoutMaskArgs<'a, F> { key: u64, p: f32, scale: f32, start: u64, out: F::ViewMut<'a> }
    /// The arguments of [`Backend::sgd_step`].
    SgdStepArgs<'a, F> {
        spec: &'a SgdSpec, param: F::ViewMut<'a>, grad: F::View<'a>,
        momentum_buffer: F::ViewMut<'a>,
    }
    /// The arguments of [`Backend::adam_step`].
    AdamStepArgs<'a, F> {
        spec: &'a AdamSpec, param: F::ViewMut<'a>, grad: F::View<'a>, exp_avg: F::ViewMut<'a>,
        exp_avg_sq: F::ViewMut<'a>, max_exp_avg_sq: F::ViewMut<'a>,
    }
}

/// What a compute backend implements: storage, mode and the kernels, each kernel on
/// arguments that core has already checked ([`Checked`]).
///
/// Every type implementing this trait is a [`Backend`] (the one implementation of
/// [`Backend`] is for all of them): callers use [`Backend`], whose kernels run each
/// kernel's argument check once and then call the `*_impl` method here. A backend
/// therefore writes no argument checks of its own, and none of its kernels can be reached
/// with arguments that failed them (`docs/backends.md`).
///
/// Implementations must produce, in [`ComputeMode::Exact`], exactly the bits of
/// `ScalarRefBackend` for every kernel (the conformance kit checks this), and in any mode
/// results that do not depend on the number of threads. The nine kernels every operator
/// needs are required; the recurrent cells and the training kernels have default bodies,
/// the reference definitions of [`crate::recurrent`] and [`crate::kernels`].
///
/// The required items, all of them (this example implements nothing else, so a kernel
/// that became required would stop it compiling):
///
/// ```
/// use exactgrad_core::backend::*;
/// use exactgrad_core::{ComputeMode, Result};
///
/// #[derive(Clone, Debug)]
/// struct Mine;
///
/// impl BackendImpl for Mine {
///     type Storage = Vec<f32>;
///     // `type Views`, `view` and `view_mut` for host memory:
///     exactgrad_core::host_views!();
///     fn name(&self) -> String { "mine".into() }
///     fn mode(&self) -> ComputeMode { ComputeMode::Exact }
///     fn zeros(&self, len: usize) -> Result<Vec<f32>> { Ok(vec![0.0; len]) }
///     fn storage_from_vec(&self, data: Vec<f32>) -> Result<Vec<f32>> { Ok(data) }
///     // The nine kernels (bodies elided here; `docs/backends.md` §3 writes one):
///     fn copy_strided_impl(&self, _: Checked<CopyStridedArgs<'_>>) -> Result<()> { Ok(()) }
///     fn unary_impl(&self, _: Checked<UnaryArgs<'_>>) -> Result<()> { Ok(()) }
///     fn unary_backward_impl(&self, _: Checked<UnaryBackwardArgs<'_>>) -> Result<()> { Ok(()) }
///     fn binary_impl(&self, _: Checked<BinaryArgs<'_>>) -> Result<()> { Ok(()) }
///     fn select_impl(&self, _: Checked<SelectArgs<'_>>) -> Result<()> { Ok(()) }
///     fn sum_impl(&self, _: Checked<SumArgs<'_>>) -> Result<()> { Ok(()) }
///     fn matmul_impl(&self, _: Checked<MatmulArgs<'_>>) -> Result<()> { Ok(()) }
///     fn softmax_impl(&self, _: Checked<SoftmaxArgs<'_>>) -> Result<()> { Ok(()) }
///     fn softmax_backward_impl(&self, _: Checked<SoftmaxBackwardArgs<'_>>) -> Result<()> { Ok(()) }
/// }
/// ```
pub trait BackendImpl: Clone + Send + Sync + Debug + 'static {
    /// An owned buffer of f32 elements: host memory ([`HostViews`]) or a device's.
    type Storage: Send + Sync + Debug + 'static;

    /// The views kernels take of [`BackendImpl::Storage`]: [`HostViews`] (slices) on a
    /// host backend.
    type Views: ViewFamily;

    /// A shared view of all of `s`.
    fn view(s: &Self::Storage) -> ViewOf<'_, Self>;

    /// An exclusive view of all of `s`.
    fn view_mut(s: &mut Self::Storage) -> ViewMutOf<'_, Self>;

    /// The number of elements `s` holds.
    fn storage_len(s: &Self::Storage) -> usize {
        Self::view(s).len()
    }

    /// The elements of `s` as a vector on the host (a copy on a host backend, a download
    /// on a device).
    fn storage_to_vec(s: &Self::Storage) -> Result<Vec<f32>> {
        Ok(Self::to_host(Self::view(s))?.into_owned())
    }

    /// The elements `range` of `v` ([`ViewFamily::slice`]).
    fn slice<'a>(v: ViewOf<'a, Self>, range: Range<usize>) -> ViewOf<'a, Self> {
        Self::Views::slice(v, range)
    }

    /// The elements `range` of `v`, exclusively ([`ViewFamily::slice_mut`]).
    fn slice_mut<'a>(v: ViewMutOf<'a, Self>, range: Range<usize>) -> ViewMutOf<'a, Self> {
        Self::Views::slice_mut(v, range)
    }

    /// `v` split at element `mid`, both parts exclusive ([`ViewFamily::split_at_mut`]).
    fn split_at_mut(
        v: ViewMutOf<'_, Self>,
        mid: usize,
    ) -> (ViewMutOf<'_, Self>, ViewMutOf<'_, Self>) {
        Self::Views::split_at_mut(v, mid)
    }

    /// A shorter exclusive borrow of `v` ([`ViewFamily::reborrow`]).
    fn reborrow<'s>(v: &'s mut ViewMutOf<'_, Self>) -> ViewMutOf<'s, Self> {
        Self::Views::reborrow(v)
    }

    /// A shared view of what `v` holds ([`ViewFamily::freeze`]).
    fn freeze<'s>(v: &'s ViewMutOf<'_, Self>) -> ViewOf<'s, Self> {
        Self::Views::freeze(v)
    }

    /// `v` with a shorter lifetime ([`ViewFamily::shorten`]).
    fn shorten<'s, 'a: 's>(v: ViewOf<'a, Self>) -> ViewOf<'s, Self> {
        Self::Views::shorten(v)
    }

    /// `v` with a shorter lifetime, exclusively ([`ViewFamily::shorten_mut`]).
    fn shorten_mut<'s, 'a: 's>(v: ViewMutOf<'a, Self>) -> ViewMutOf<'s, Self> {
        Self::Views::shorten_mut(v)
    }

    /// The elements of `v` on the host ([`ViewFamily::to_host`]).
    fn to_host(v: ViewOf<'_, Self>) -> Result<Cow<'_, [f32]>> {
        Self::Views::to_host(v)
    }

    /// Runs `f` on the elements of `v` as a host slice ([`ViewFamily::with_host_mut`]).
    fn with_host_mut<R>(v: ViewMutOf<'_, Self>, f: impl FnOnce(&mut [f32]) -> R) -> Result<R> {
        Self::Views::with_host_mut(v, f)
    }

    /// A short name for reports, such as `scalar-ref` or `exact/avx2`.
    fn name(&self) -> String;

    /// The arithmetic contract this backend's kernels follow.
    fn mode(&self) -> ComputeMode;

    /// A zero-filled buffer of `len` elements; an [`Error::Alloc`] or [`Error::TooLarge`]
    /// when the memory cannot be obtained.
    fn zeros(&self, len: usize) -> Result<Self::Storage>;

    /// A buffer of `len` elements whose values are unspecified (but initialised), for an
    /// output that a kernel overwrites completely. The default is [`BackendImpl::zeros`].
    fn uninit(&self, len: usize) -> Result<Self::Storage> {
        self.zeros(len)
    }

    /// A buffer holding `data`.
    fn storage_from_vec(&self, data: Vec<f32>) -> Result<Self::Storage>;

    /// The pool that keeps this backend's released buffers for reuse (statistics, trim,
    /// limit: [`crate::memory`]), or `None` for a backend that leaves every buffer to the
    /// system allocator (the default).
    fn memory(&self) -> Option<&dyn crate::memory::MemoryPool> {
        None
    }

    /// [`Backend::copy_strided`] on checked arguments.
    fn copy_strided_impl(&self, args: Checked<CopyStridedArgs<'_, Self::Views>>) -> Result<()>;

    /// [`Backend::digest`] on checked arguments. The default digests the elements on the
    /// host with the scalar reference ([`crate::TraceHasher`]); a backend may digest its
    /// blocks in parallel or with vector units, and must give the same value.
    fn digest_impl(&self, args: Checked<DigestArgs<'_, Self::Views>>) -> Result<u64> {
        let x = Self::to_host(args.into_inner().x)?;
        Ok(crate::TraceHasher::of(&x))
    }

    /// [`Backend::unary`] on checked arguments.
    fn unary_impl(&self, args: Checked<UnaryArgs<'_, Self::Views>>) -> Result<()>;

    /// [`Backend::unary_backward`] on checked arguments.
    fn unary_backward_impl(&self, args: Checked<UnaryBackwardArgs<'_, Self::Views>>) -> Result<()>;

    /// [`Backend::binary`] on checked arguments.
    fn binary_impl(&self, args: Checked<BinaryArgs<'_, Self::Views>>) -> Result<()>;

    /// [`Backend::select`] on checked arguments.
    fn select_impl(&self, args: Checked<SelectArgs<'_, Self::Views>>) -> Result<()>;

    /// [`Backend::sum`] on checked arguments.
    fn sum_impl(&self, args: Checked<SumArgs<'_, Self::Views>>) -> Result<()>;

    /// [`Backend::matmul`] on checked arguments.
    fn matmul_impl(&self, args: Checked<MatmulArgs<'_, Self::Views>>) -> Result<()>;

    /// [`Backend::matmul_acc`] on checked arguments. The default body is the reference
    /// definition: each segment's product by [`BackendImpl::matmul_impl`] into a scratch
    /// buffer, added into `out` in segment order.
    fn matmul_acc_impl(&self, args: Checked<MatmulAccArgs<'_, Self::Views>>) -> Result<()> {
        let MatmulAccArgs {
            spec,
            seg,
            a,
            b,
            mut out,
        } = args.into_inner();
        if !out.is_empty() && spec.k > 0 {
            let mut part = self.uninit(out.len())?;
            for s in 0..spec.k / seg {
                // Steps s·seg .. (s+1)·seg: a sub-product of the checked one (every
                // element it addresses is one `spec` addresses, and out is non-empty, so
                // the offsets lie inside the checked extents).
                let sub = spec.segment(s, seg);
                self.matmul_impl(Checked::new(MatmulArgs {
                    spec: &sub,
                    a: Self::shorten(a),
                    b: Self::shorten(b),
                    out: Self::view_mut(&mut part),
                }))?;
                let p = Self::to_host(Self::view(&part))?;
                Self::with_host_mut(Self::reborrow(&mut out), |out| {
                    for (o, &p) in out.iter_mut().zip(p.iter()) {
                        *o += p;
                    }
                })?;
            }
        }
        let mode = self.mode();
        Self::with_host_mut(out, |out| {
            out.iter_mut().for_each(|o| *o = kernels::canon(mode, *o))
        })
    }

    /// [`Backend::softmax`] on checked arguments.
    fn softmax_impl(&self, args: Checked<SoftmaxArgs<'_, Self::Views>>) -> Result<()>;

    /// [`Backend::softmax_backward`] on checked arguments.
    fn softmax_backward_impl(
        &self,
        args: Checked<SoftmaxBackwardArgs<'_, Self::Views>>,
    ) -> Result<()>;

    // ----- recurrent cells (docs/recurrent.md) -------------------------------------------
    //
    // One step of an LSTM or GRU layer between two matrix products. The default bodies
    // are the reference definitions of `crate::recurrent`, written with this backend's
    // element-wise kernels; a backend may fuse them but must give the same bits.

    /// [`Backend::lstm_cell`] on checked arguments.
    fn lstm_cell_impl(&self, args: Checked<LstmCellArgs<'_, Self::Views>>) -> Result<()> {
        crate::recurrent::lstm_cell::<Self>(self, args)
    }

    /// [`Backend::lstm_cell_backward`] on checked arguments.
    fn lstm_cell_backward_impl(
        &self,
        args: Checked<LstmCellBackwardArgs<'_, Self::Views>>,
    ) -> Result<()> {
        crate::recurrent::lstm_cell_backward::<Self>(self, args)
    }

    /// [`Backend::gru_cell`] on checked arguments.
    fn gru_cell_impl(&self, args: Checked<GruCellArgs<'_, Self::Views>>) -> Result<()> {
        crate::recurrent::gru_cell::<Self>(self, args)
    }

    /// [`Backend::gru_cell_backward`] on checked arguments.
    fn gru_cell_backward_impl(
        &self,
        args: Checked<GruCellBackwardArgs<'_, Self::Views>>,
    ) -> Result<()> {
        crate::recurrent::gru_cell_backward::<Self>(self, args)
    }

    // ----- training kernels (`crate::kernels`) -----------------------------------------
    //
    // Each default body is the reference definition (`crate::kernels`): a backend that
    // does not override a kernel computes exactly these bits.

    /// [`Backend::norm_stats`] on checked arguments.
    fn norm_stats_impl(&self, args: Checked<NormStatsArgs<'_, Self::Views>>) -> Result<()> {
        let NormStatsArgs {
            spec,
            x,
            mean,
            corr,
            sq_sum,
        } = args.into_inner();
        let (mode, x) = (self.mode(), Self::to_host(x)?);
        Self::with_host_mut(mean, |mean| {
            Self::with_host_mut(corr, |corr| {
                Self::with_host_mut(sq_sum, |sq_sum| {
                    kernels::norm_stats(mode, spec, &x, mean, corr, sq_sum)
                })
            })
        })???;
        Ok(())
    }

    /// [`Backend::norm_forward`] on checked arguments.
    fn norm_forward_impl(&self, args: Checked<NormForwardArgs<'_, Self::Views>>) -> Result<()> {
        let NormForwardArgs {
            spec,
            x,
            stats,
            weight,
            bias,
            out,
        } = args.into_inner();
        let x = Self::to_host(x)?;
        let (mean, corr, rstd) = host_stats::<Self>(stats)?;
        let stats = NormStats {
            mean: &mean[..],
            corr: &corr[..],
            rstd: &rstd[..],
        };
        let weight = weight.map(Self::to_host).transpose()?;
        let bias = bias.map(Self::to_host).transpose()?;
        let mode = self.mode();
        Self::with_host_mut(out, |out| {
            kernels::norm_forward(
                mode,
                spec,
                &x,
                &stats,
                weight.as_deref(),
                bias.as_deref(),
                out,
            )
        })
    }

    /// [`Backend::norm_backward`] on checked arguments.
    fn norm_backward_impl(&self, args: Checked<NormBackwardArgs<'_, Self::Views>>) -> Result<()> {
        let NormBackwardArgs {
            spec,
            x,
            g,
            stats,
            weight,
            stats_depend,
            grads,
        } = args.into_inner();
        let (x, g) = (Self::to_host(x)?, Self::to_host(g)?);
        let (mean, corr, rstd) = host_stats::<Self>(stats)?;
        let stats = NormStats {
            mean: &mean[..],
            corr: &corr[..],
            rstd: &rstd[..],
        };
        let weight = weight.map(Self::to_host).transpose()?;
        let mode = self.mode();
        with_opt_host_mut::<Self, _>(grads.dx, |dx| {
            with_opt_host_mut::<Self, _>(grads.dw, |dw| {
                with_opt_host_mut::<Self, _>(grads.db, |db| {
                    let grads = NormGrads { dx, dw, db };
                    let w = weight.as_deref();
                    kernels::norm_backward(mode, spec, &x, &g, &stats, w, stats_depend, grads)
                })
            })
        })???;
        Ok(())
    }

    /// [`Backend::max_pool2d`] on checked arguments.
    fn max_pool2d_impl(&self, args: Checked<MaxPool2dArgs<'_, Self::Views>>) -> Result<()> {
        let MaxPool2dArgs {
            spec,
            x,
            out,
            argmax,
        } = args.into_inner();
        let (mode, x) = (self.mode(), Self::to_host(x)?);
        Self::with_host_mut(out, |out| kernels::max_pool2d(mode, spec, &x, out, argmax))
    }

    /// [`Backend::max_pool2d_backward`] on checked arguments.
    fn max_pool2d_backward_impl(
        &self,
        args: Checked<MaxPool2dBackwardArgs<'_, Self::Views>>,
    ) -> Result<()> {
        let MaxPool2dBackwardArgs {
            spec,
            argmax,
            g,
            gx,
        } = args.into_inner();
        let (mode, g) = (self.mode(), Self::to_host(g)?);
        Self::with_host_mut(gx, |gx| {
            kernels::max_pool2d_backward(mode, spec, argmax, &g, gx)
        })
    }

    /// [`Backend::avg_pool2d`] on checked arguments.
    fn avg_pool2d_impl(&self, args: Checked<AvgPool2dArgs<'_, Self::Views>>) -> Result<()> {
        let AvgPool2dArgs { spec, x, out } = args.into_inner();
        let (mode, x) = (self.mode(), Self::to_host(x)?);
        Self::with_host_mut(out, |out| kernels::avg_pool2d(mode, spec, &x, out))
    }

    /// [`Backend::avg_pool2d_backward`] on checked arguments.
    fn avg_pool2d_backward_impl(
        &self,
        args: Checked<AvgPool2dBackwardArgs<'_, Self::Views>>,
    ) -> Result<()> {
        let AvgPool2dBackwardArgs { spec, g, gx } = args.into_inner();
        let (mode, g) = (self.mode(), Self::to_host(g)?);
        Self::with_host_mut(gx, |gx| kernels::avg_pool2d_backward(mode, spec, &g, gx))
    }

    /// [`Backend::adaptive_avg_pool2d`] on checked arguments.
    fn adaptive_avg_pool2d_impl(
        &self,
        args: Checked<AdaptiveAvgPool2dArgs<'_, Self::Views>>,
    ) -> Result<()> {
        let AdaptiveAvgPool2dArgs { spec, x, out } = args.into_inner();
        let (mode, x) = (self.mode(), Self::to_host(x)?);
        Self::with_host_mut(out, |out| kernels::adaptive_avg_pool2d(mode, spec, &x, out))
    }

    /// [`Backend::adaptive_avg_pool2d_backward`] on checked arguments.
    fn adaptive_avg_pool2d_backward_impl(
        &self,
        args: Checked<AdaptiveAvgPool2dBackwardArgs<'_, Self::Views>>,
    ) -> Result<()> {
        let AdaptiveAvgPool2dBackwardArgs { spec, g, gx } = args.into_inner();
        let (mode, g) = (self.mode(), Self::to_host(g)?);
        Self::with_host_mut(gx, |gx| {
            kernels::adaptive_avg_pool2d_backward(mode, spec, &g, gx)
        })
    }

    /// [`Backend::im2col`] on checked arguments.
    fn im2col_impl(&self, args: Checked<Im2colArgs<'_, Self::Views>>) -> Result<()> {
        let Im2colArgs { spec, image, cols } = args.into_inner();
        let image = Self::to_host(image)?;
        Self::with_host_mut(cols, |cols| kernels::im2col(spec, &image, cols))
    }

    /// [`Backend::col2im`] on checked arguments.
    fn col2im_impl(&self, args: Checked<Col2imArgs<'_, Self::Views>>) -> Result<()> {
        let Col2imArgs { spec, cols, image } = args.into_inner();
        let (mode, cols) = (self.mode(), Self::to_host(cols)?);
        Self::with_host_mut(image, |image| kernels::col2im(mode, spec, &cols, image))
    }

    /// [`Backend::attention_scores`] on checked arguments.
    fn attention_scores_impl(
        &self,
        args: Checked<AttentionScoresArgs<'_, Self::Views>>,
    ) -> Result<()> {
        let AttentionScoresArgs { spec, scores, mask } = args.into_inner();
        let mode = self.mode();
        let mask = match mask {
            Some((kind, m, lay)) => Some((kind, Self::to_host(m)?, lay)),
            None => None,
        };
        Self::with_host_mut(scores, |scores| {
            let mask = mask.as_ref().map(|(kind, m, lay)| (*kind, &**m, *lay));
            kernels::attention_scores(mode, spec, scores, mask)
        })
    }

    /// [`Backend::dropout_mask`] on checked arguments.
    fn dropout_mask_impl(&self, args: Checked<DropoutMaskArgs<'_, Self::Views>>) -> Result<()> {
        let DropoutMaskArgs {
            key,
            p,
            scale,
            start,
            out,
        } = args.into_inner();
        Self::with_host_mut(out, |out| kernels::dropout_mask(key, p, scale, start, out))
    }

    /// [`Backend::sgd_step`] on checked arguments.
    fn sgd_step_impl(&self, args: Checked<SgdStepArgs<'_, Self::Views>>) -> Result<()> {
        let SgdStepArgs {
            spec,
            param,
            grad,
            momentum_buffer,
        } = args.into_inner();
        let (mode, grad) = (self.mode(), Self::to_host(grad)?);
        Self::with_host_mut(param, |param| {
            Self::with_host_mut(momentum_buffer, |m| {
                kernels::sgd_step(mode, spec, param, &grad, m)
            })
        })?
    }

    /// [`Backend::adam_step`] on checked arguments.
    fn adam_step_impl(&self, args: Checked<AdamStepArgs<'_, Self::Views>>) -> Result<()> {
        let AdamStepArgs {
            spec,
            param,
            grad,
            exp_avg,
            exp_avg_sq,
            max_exp_avg_sq,
        } = args.into_inner();
        let (mode, grad) = (self.mode(), Self::to_host(grad)?);
        Self::with_host_mut(param, |param| {
            Self::with_host_mut(exp_avg, |m| {
                Self::with_host_mut(exp_avg_sq, |v| {
                    Self::with_host_mut(max_exp_avg_sq, |vmax| {
                        kernels::adam_step(mode, spec, param, &grad, m, v, vmax)
                    })
                })
            })
        })????;
        Ok(())
    }
}

/// The three statistics of a normalisation on the host (borrowed on a host backend).
pub type HostStats<'a> = (Cow<'a, [f32]>, Cow<'a, [f32]>, Cow<'a, [f32]>);

/// `stats` on the host, for host reference bodies (the defaults here, a device
/// backend's host fallbacks).
pub fn host_stats<'a, B: BackendImpl>(stats: &NormStats<'a, B::Views>) -> Result<HostStats<'a>> {
    Ok((
        B::to_host(stats.mean)?,
        B::to_host(stats.corr)?,
        B::to_host(stats.rstd)?,
    ))
}

/// Runs `f` on an optional output as a host slice ([`BackendImpl::with_host_mut`]), or on
/// `None`.
pub fn with_opt_host_mut<B: BackendImpl, R>(
    v: Option<ViewMutOf<'_, B>>,
    f: impl FnOnce(Option<&mut [f32]>) -> R,
) -> Result<R> {
    match v {
        Some(v) => B::with_host_mut(v, |v| f(Some(v))),
        None => Ok(f(None)),
    }
}

mod sealed {
    /// Implemented exactly for the [`BackendImpl`](super::BackendImpl) types, so that
    /// [`Backend`](super::Backend) has no other implementation; gives the kernels of
    /// [`Backend`](super::Backend) the backend they hand checked arguments to.
    pub trait Sealed {
        /// The backend (the type itself).
        type Impl: super::BackendImpl;
        /// The backend (`self`).
        fn backend_impl(&self) -> &Self::Impl;
    }

    impl<T: super::BackendImpl> Sealed for T {
        type Impl = T;
        fn backend_impl(&self) -> &T {
            self
        }
    }
}

/// A compute backend as its callers see it: storage type, mode and kernels.
///
/// Implemented once, for every [`BackendImpl`] (a backend implements [`BackendImpl`];
/// this trait is sealed, so its kernels, the provided methods below, cannot be
/// overridden). Each kernel here checks its arguments against its buffers
/// (lengths, and every [`Layout`] with [`Layout::check_within`], in checked arithmetic,
/// once per call) and returns an error instead of reading or writing out of bounds; only
/// arguments that passed reach the backend's `*_impl` method, as [`Checked`] arguments.
/// The checks are those of [`crate::check`], the spec types' `check*` methods
/// ([`MatmulSpec::check`], [`crate::kernels`]) and [`crate::recurrent`]'s.
pub trait Backend: BackendImpl + sealed::Sealed {
    /// Gathers the elements of `src` under `layout` into `out` in row-major order.
    /// Copies bits exactly (no canonicalisation).
    fn copy_strided(
        &self,
        src: ViewOf<'_, Self>,
        layout: &Layout,
        out: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        check::copy_strided(src.len(), layout, out.len())?;
        self.copy_strided_impl(Checked::new(CopyStridedArgs {
            src: Self::shorten(src),
            layout,
            out: Self::shorten_mut(out),
        }))
    }

    /// The trace digest of the elements of `x` ([`crate::TraceHasher`]): what an operation
    /// trace records of a tensor (`docs/debugging.md`). Integer arithmetic only, so the
    /// same on every backend, path and thread count.
    fn digest(&self, x: ViewOf<'_, Self>) -> Result<u64> {
        self.digest_impl(Checked::new(DigestArgs {
            x: Self::shorten(x),
        }))
    }

    /// `out[i] = op(x[i])` over contiguous slices of equal length.
    fn unary(&self, op: UnaryOp, x: ViewOf<'_, Self>, out: ViewMutOf<'_, Self>) -> Result<()> {
        check::unary(x.len(), out.len())?;
        self.unary_impl(Checked::new(UnaryArgs {
            op,
            x: Self::shorten(x),
            out: Self::shorten_mut(out),
        }))
    }

    /// The backward rule of `op`: `out[i] = g[i] · op'(…)`, given the forward input `x`
    /// and output `y` (both contiguous, same length as `g`).
    fn unary_backward(
        &self,
        op: UnaryOp,
        x: ViewOf<'_, Self>,
        y: ViewOf<'_, Self>,
        g: ViewOf<'_, Self>,
        out: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        check::unary_backward(x.len(), y.len(), g.len(), out.len())?;
        self.unary_backward_impl(Checked::new(UnaryBackwardArgs {
            op,
            x: Self::shorten(x),
            y: Self::shorten(y),
            g: Self::shorten(g),
            out: Self::shorten_mut(out),
        }))
    }

    /// `out = op(a, b)` where `la` and `lb` are layouts already broadcast to the output
    /// shape (stride 0 along broadcast dimensions); `out` is contiguous.
    fn binary(
        &self,
        op: BinaryOp,
        a: ViewOf<'_, Self>,
        la: &Layout,
        b: ViewOf<'_, Self>,
        lb: &Layout,
        out: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        check::binary(op.name(), a.len(), la, b.len(), lb, out.len())?;
        self.binary_impl(Checked::new(BinaryArgs {
            op,
            a: Self::shorten(a),
            la,
            b: Self::shorten(b),
            lb,
            out: Self::shorten_mut(out),
        }))
    }

    /// `out = cond != 0 ? a : b` with all three layouts broadcast to the output shape.
    #[allow(clippy::too_many_arguments)]
    fn select(
        &self,
        cond: ViewOf<'_, Self>,
        lc: &Layout,
        a: ViewOf<'_, Self>,
        la: &Layout,
        b: ViewOf<'_, Self>,
        lb: &Layout,
        out: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        check::select(cond.len(), lc, a.len(), la, b.len(), lb, out.len())?;
        self.select_impl(Checked::new(SelectArgs {
            cond: Self::shorten(cond),
            lc,
            a: Self::shorten(a),
            la,
            b: Self::shorten(b),
            lb,
            out: Self::shorten_mut(out),
        }))
    }

    /// Sums `x` under `layout` over the dimensions flagged in `reduce`, writing the
    /// remaining dimensions row-major into `out`. Each output accumulates in f64, its
    /// reduced elements in increasing row-major order of their index, from +0, rounded
    /// once to f32.
    fn sum(
        &self,
        x: ViewOf<'_, Self>,
        layout: &Layout,
        reduce: &[bool],
        out: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        check::sum(x.len(), layout, reduce, out.len())?;
        self.sum_impl(Checked::new(SumArgs {
            x: Self::shorten(x),
            layout,
            reduce,
            out: Self::shorten_mut(out),
        }))
    }

    /// The batched matrix product of [`MatmulSpec`]: each output is one f32 accumulator
    /// starting at +0, `k` increasing; exact mode rounds the product and the sum
    /// separately, fast mode may fuse them.
    fn matmul(
        &self,
        spec: &MatmulSpec,
        a: ViewOf<'_, Self>,
        b: ViewOf<'_, Self>,
        out: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        spec.check(a.len(), b.len(), out.len())?;
        self.matmul_impl(Checked::new(MatmulArgs {
            spec,
            a: Self::shorten(a),
            b: Self::shorten(b),
            out: Self::shorten_mut(out),
        }))
    }

    /// Adds to `out` the products of [`MatmulSpec`] over consecutive segments of `seg`
    /// steps of `k`: `out ← out + P₀ + P₁ + …` in segment order, each `Pₛ` the sum of
    /// steps `s·seg .. (s+1)·seg` as [`Backend::matmul`] forms it (one accumulator from
    /// +0, `k` increasing), then NaN canonicalised in exact mode. With the items of a
    /// batch laid along `k`, this is the item-ordered sum of per-item products (a
    /// convolution's weight gradient). `seg` must divide `k` and be positive.
    fn matmul_acc(
        &self,
        spec: &MatmulSpec,
        seg: usize,
        a: ViewOf<'_, Self>,
        b: ViewOf<'_, Self>,
        out: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        spec.check(a.len(), b.len(), out.len())?;
        if seg == 0 || !spec.k.is_multiple_of(seg) {
            return Err(Error::invalid(
                "matmul_acc",
                "seg",
                alloc::format!(
                    "the segment length {seg} must be positive and divide k = {}",
                    spec.k
                ),
            ));
        }
        self.matmul_acc_impl(Checked::new(MatmulAccArgs {
            spec,
            seg,
            a: Self::shorten(a),
            b: Self::shorten(b),
            out: Self::shorten_mut(out),
        }))
    }

    /// Softmax (or log-softmax when `log`) of each row of a contiguous `rows × cols` `x`.
    fn softmax(
        &self,
        x: ViewOf<'_, Self>,
        rows: usize,
        cols: usize,
        log: bool,
        out: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        check::softmax("softmax", x.len(), rows, cols, out.len())?;
        self.softmax_impl(Checked::new(SoftmaxArgs {
            x: Self::shorten(x),
            rows,
            cols,
            log,
            out: Self::shorten_mut(out),
        }))
    }

    /// The backward rule of [`Backend::softmax`] given its output `y` and the incoming
    /// gradient `g` (both contiguous `rows × cols`).
    #[allow(clippy::too_many_arguments)]
    fn softmax_backward(
        &self,
        y: ViewOf<'_, Self>,
        g: ViewOf<'_, Self>,
        rows: usize,
        cols: usize,
        log: bool,
        out: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        check::softmax_backward(y.len(), g.len(), rows, cols, out.len())?;
        self.softmax_backward_impl(Checked::new(SoftmaxBackwardArgs {
            y: Self::shorten(y),
            g: Self::shorten(g),
            rows,
            cols,
            log,
            out: Self::shorten_mut(out),
        }))
    }

    /// One LSTM step (`docs/recurrent.md` §2): gate sums, activations, `c_t` and `h_t`
    /// from the step's two products and biases.
    fn lstm_cell<'a>(
        &self,
        shape: CellShape,
        inputs: LstmCellInputs<'a, Self::Views>,
        outputs: LstmCellOutputs<'a, Self::Views>,
    ) -> Result<()> {
        recurrent::check_lstm_cell(shape, &inputs, &outputs)?;
        self.lstm_cell_impl(Checked::new(LstmCellArgs {
            shape,
            inputs,
            outputs,
        }))
    }

    /// The backward rule of [`Backend::lstm_cell`] (`docs/recurrent.md` §2): the gradient
    /// of the gate pre-activations and of `c_{t−1}`.
    fn lstm_cell_backward<'a>(
        &self,
        shape: CellShape,
        inputs: LstmCellGradInputs<'a, Self::Views>,
        outputs: LstmCellGradOutputs<'a, Self::Views>,
    ) -> Result<()> {
        recurrent::check_lstm_cell_backward(shape, &inputs, &outputs)?;
        self.lstm_cell_backward_impl(Checked::new(LstmCellBackwardArgs {
            shape,
            inputs,
            outputs,
        }))
    }

    /// One GRU step (`docs/recurrent.md` §3): `r`, `z`, `n` and `h_t` from the step's two
    /// products and biases.
    fn gru_cell<'a>(
        &self,
        shape: CellShape,
        inputs: GruCellInputs<'a, Self::Views>,
        outputs: GruCellOutputs<'a, Self::Views>,
    ) -> Result<()> {
        recurrent::check_gru_cell(shape, &inputs, &outputs)?;
        self.gru_cell_impl(Checked::new(GruCellArgs {
            shape,
            inputs,
            outputs,
        }))
    }

    /// The backward rule of [`Backend::gru_cell`] (`docs/recurrent.md` §3): the gradients
    /// of both products' pre-activations and the direct part of the gradient of `h_{t−1}`.
    fn gru_cell_backward<'a>(
        &self,
        shape: CellShape,
        inputs: GruCellGradInputs<'a, Self::Views>,
        outputs: GruCellGradOutputs<'a, Self::Views>,
    ) -> Result<()> {
        recurrent::check_gru_cell_backward(shape, &inputs, &outputs)?;
        self.gru_cell_backward_impl(Checked::new(GruCellBackwardArgs {
            shape,
            inputs,
            outputs,
        }))
    }

    /// Normalisation statistics per group of a contiguous `[P, Q, R]` `x`
    /// (`docs/arithmetic.md` §5, steps 1–3): `mean = μ`, `corr = c` and `sq_sum = s2`,
    /// `Q` elements each.
    fn norm_stats(
        &self,
        spec: &NormSpec,
        x: ViewOf<'_, Self>,
        mean: ViewMutOf<'_, Self>,
        corr: ViewMutOf<'_, Self>,
        sq_sum: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        spec.check_stats(x.len(), mean.len(), corr.len(), sq_sum.len())?;
        self.norm_stats_impl(Checked::new(NormStatsArgs {
            spec,
            x: Self::shorten(x),
            mean: Self::shorten_mut(mean),
            corr: Self::shorten_mut(corr),
            sq_sum: Self::shorten_mut(sq_sum),
        }))
    }

    /// Normalisation output `y = ((((x ⊖ μ) ⊖ c) ⊗ r) ⊗ w) ⊕ b` (`docs/arithmetic.md` §5,
    /// step 5), `weight` and `bias` optional.
    fn norm_forward(
        &self,
        spec: &NormSpec,
        x: ViewOf<'_, Self>,
        stats: &NormStats<'_, Self::Views>,
        weight: Option<ViewOf<'_, Self>>,
        bias: Option<ViewOf<'_, Self>>,
        out: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        spec.check_forward(
            x.len(),
            stats,
            weight.map(|w| w.len()),
            bias.map(|w| w.len()),
            out.len(),
        )?;
        self.norm_forward_impl(Checked::new(NormForwardArgs {
            spec,
            x: Self::shorten(x),
            stats: &stats.shorten(),
            weight: weight.map(Self::shorten),
            bias: bias.map(Self::shorten),
            out: Self::shorten_mut(out),
        }))
    }

    /// Normalisation backward (`docs/arithmetic.md` §5): the gradients asked for in
    /// `grads`; `stats_depend` when the statistics were computed from `x`. `x` may be
    /// empty when only `db` is asked for.
    #[allow(clippy::too_many_arguments)]
    fn norm_backward(
        &self,
        spec: &NormSpec,
        x: ViewOf<'_, Self>,
        g: ViewOf<'_, Self>,
        stats: &NormStats<'_, Self::Views>,
        weight: Option<ViewOf<'_, Self>>,
        stats_depend: bool,
        grads: NormGrads<'_, Self::Views>,
    ) -> Result<()> {
        spec.check_backward(x.len(), g.len(), stats, weight.map(|w| w.len()), &grads)?;
        self.norm_backward_impl(Checked::new(NormBackwardArgs {
            spec,
            x: Self::shorten(x),
            g: Self::shorten(g),
            stats: &stats.shorten(),
            weight: weight.map(Self::shorten),
            stats_depend,
            grads: grads.shorten(),
        }))
    }

    /// 2-D max pooling of contiguous planes (`docs/conv.md` §2): the maxima and, per
    /// output, the flat index in its plane of the selected input (`usize::MAX` for a
    /// window without taps).
    fn max_pool2d(
        &self,
        spec: &Pool2dSpec,
        x: ViewOf<'_, Self>,
        out: ViewMutOf<'_, Self>,
        argmax: &mut [usize],
    ) -> Result<()> {
        spec.check_max(x.len(), out.len(), argmax.len())?;
        self.max_pool2d_impl(Checked::new(MaxPool2dArgs {
            spec,
            x: Self::shorten(x),
            out: Self::shorten_mut(out),
            argmax,
        }))
    }

    /// The backward rule of [`Backend::max_pool2d`]: `gx` (overwritten) from `+0`, each
    /// output's gradient added at its argmax in increasing output order.
    fn max_pool2d_backward(
        &self,
        spec: &Pool2dSpec,
        argmax: &[usize],
        g: ViewOf<'_, Self>,
        gx: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        spec.check_max_backward(argmax, g.len(), gx.len())?;
        self.max_pool2d_backward_impl(Checked::new(MaxPool2dBackwardArgs {
            spec,
            argmax,
            g: Self::shorten(g),
            gx: Self::shorten_mut(gx),
        }))
    }

    /// 2-D average pooling of contiguous planes (`docs/conv.md` §2).
    fn avg_pool2d(
        &self,
        spec: &AvgPool2dSpec,
        x: ViewOf<'_, Self>,
        out: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        spec.check("avg_pool2d", x.len(), out.len())?;
        self.avg_pool2d_impl(Checked::new(AvgPool2dArgs {
            spec,
            x: Self::shorten(x),
            out: Self::shorten_mut(out),
        }))
    }

    /// The backward rule of [`Backend::avg_pool2d`]; `gx` is overwritten.
    fn avg_pool2d_backward(
        &self,
        spec: &AvgPool2dSpec,
        g: ViewOf<'_, Self>,
        gx: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        spec.check("avg_pool2d_backward", gx.len(), g.len())?;
        self.avg_pool2d_backward_impl(Checked::new(AvgPool2dBackwardArgs {
            spec,
            g: Self::shorten(g),
            gx: Self::shorten_mut(gx),
        }))
    }

    /// 2-D adaptive average pooling of contiguous planes (`docs/conv.md` §2).
    fn adaptive_avg_pool2d(
        &self,
        spec: &AdaptivePool2dSpec,
        x: ViewOf<'_, Self>,
        out: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        spec.check("adaptive_avg_pool2d", x.len(), out.len())?;
        self.adaptive_avg_pool2d_impl(Checked::new(AdaptiveAvgPool2dArgs {
            spec,
            x: Self::shorten(x),
            out: Self::shorten_mut(out),
        }))
    }

    /// The backward rule of [`Backend::adaptive_avg_pool2d`]; `gx` is overwritten.
    fn adaptive_avg_pool2d_backward(
        &self,
        spec: &AdaptivePool2dSpec,
        g: ViewOf<'_, Self>,
        gx: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        spec.check("adaptive_avg_pool2d_backward", gx.len(), g.len())?;
        self.adaptive_avg_pool2d_backward_impl(Checked::new(AdaptiveAvgPool2dBackwardArgs {
            spec,
            g: Self::shorten(g),
            gx: Self::shorten_mut(gx),
        }))
    }

    /// im2col of one contiguous item `[C, H, W]` into `cols` `[C·KH·KW, OH·OW]`
    /// (`docs/conv.md` §1), `+0` in the padding; copies bits.
    fn im2col(
        &self,
        spec: &Col2imSpec,
        image: ViewOf<'_, Self>,
        cols: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        spec.check("im2col", image.len(), cols.len())?;
        self.im2col_impl(Checked::new(Im2colArgs {
            spec,
            image: Self::shorten(image),
            cols: Self::shorten_mut(cols),
        }))
    }

    /// col2im of one item (`docs/conv.md` §1): `image` (overwritten) from `+0`, each
    /// element adding its column gradients in increasing column order.
    fn col2im(
        &self,
        spec: &Col2imSpec,
        cols: ViewOf<'_, Self>,
        image: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        spec.check("col2im", image.len(), cols.len())?;
        self.col2im_impl(Checked::new(Col2imArgs {
            spec,
            cols: Self::shorten(cols),
            image: Self::shorten_mut(image),
        }))
    }

    /// The attention scores of `docs/arithmetic.md` §5 in place: `scores` holds the
    /// products `T` (`[rows, S]`) and receives `(T ⊗ scale)` with the mask (a layout
    /// broadcast to `[…, L, S]` over its buffer) and the causal `−∞`.
    fn attention_scores(
        &self,
        spec: &AttentionScoresSpec,
        scores: ViewMutOf<'_, Self>,
        mask: Option<(ScoreMask, ViewOf<'_, Self>, &Layout)>,
    ) -> Result<()> {
        spec.check(scores.len(), mask.map(|(_, m, l)| (m.len(), l)))?;
        self.attention_scores_impl(Checked::new(AttentionScoresArgs {
            spec,
            scores: Self::shorten_mut(scores),
            mask: mask.map(|(k, m, l)| (k, Self::shorten(m), l)),
        }))
    }

    /// The dropout mask of `docs/arithmetic.md` §5 for elements `start …` of the stream of
    /// `key`: `scale` where kept, `+0` elsewhere. `p` must be in `[0, 1]`.
    fn dropout_mask(
        &self,
        key: u64,
        p: f32,
        scale: f32,
        start: u64,
        out: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        kernels::check_dropout(p)?;
        self.dropout_mask_impl(Checked::new(DropoutMaskArgs {
            key,
            p,
            scale,
            start,
            out: Self::shorten_mut(out),
        }))
    }

    /// One fused SGD update of `param` in place ([`SgdSpec`]); `momentum_buffer` is
    /// empty without momentum.
    fn sgd_step(
        &self,
        spec: &SgdSpec,
        param: ViewMutOf<'_, Self>,
        grad: ViewOf<'_, Self>,
        momentum_buffer: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        spec.check(param.len(), grad.len(), momentum_buffer.len())?;
        self.sgd_step_impl(Checked::new(SgdStepArgs {
            spec,
            param: Self::shorten_mut(param),
            grad: Self::shorten(grad),
            momentum_buffer: Self::shorten_mut(momentum_buffer),
        }))
    }

    /// One fused Adam/AdamW update of `param` and its moments in place ([`AdamSpec`]);
    /// `max_exp_avg_sq` is empty without AMSGrad.
    fn adam_step(
        &self,
        spec: &AdamSpec,
        param: ViewMutOf<'_, Self>,
        grad: ViewOf<'_, Self>,
        exp_avg: ViewMutOf<'_, Self>,
        exp_avg_sq: ViewMutOf<'_, Self>,
        max_exp_avg_sq: ViewMutOf<'_, Self>,
    ) -> Result<()> {
        spec.check(
            param.len(),
            grad.len(),
            exp_avg.len(),
            exp_avg_sq.len(),
            max_exp_avg_sq.len(),
        )?;
        self.adam_step_impl(Checked::new(AdamStepArgs {
            spec,
            param: Self::shorten_mut(param),
            grad: Self::shorten(grad),
            exp_avg: Self::shorten_mut(exp_avg),
            exp_avg_sq: Self::shorten_mut(exp_avg_sq),
            max_exp_avg_sq: Self::shorten_mut(max_exp_avg_sq),
        }))
    }
}

/// The one implementation of [`Backend`]: the storage and the backend's identity; the
/// kernels are the trait's own (checked) bodies.
impl<B: BackendImpl> Backend for B {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallible_vectors_refuse_impossible_sizes_with_a_named_error() {
        // 2^62 × 8 bytes does not fit in isize::MAX.
        match try_vec_filled("t", 1usize << 62, 0u64) {
            Err(Error::Alloc { op, bytes, reason }) => {
                assert_eq!(op, "t");
                assert_eq!(bytes, usize::MAX);
                assert!(reason.contains("isize::MAX"), "{reason}");
            }
            other => panic!("accepted or wrong error: {:?}", other.map(|v| v.len())),
        }
        // 2^48 bytes fit in isize but in no address space of a 64-bit process: refused by
        // the allocator, not an abort.
        let e = try_vec_with_capacity::<f64>("t", 1usize << 45).unwrap_err();
        assert!(
            matches!(e, Error::Alloc { op: "t", bytes, .. } if bytes == 1 << 48),
            "{e:?}"
        );
        let e = try_collect("t", (0..1usize << 46).map(|i| i as u32)).unwrap_err();
        assert!(matches!(e, Error::Alloc { op: "t", .. }), "{e:?}");
        let mut v = alloc::vec![1u8];
        assert!(try_reserve("t", &mut v, usize::MAX).is_err());
        assert_eq!(v, [1]);
        // Ordinary sizes work.
        assert_eq!(try_vec_filled("t", 3, 7u16).unwrap(), [7, 7, 7]);
        assert_eq!(
            try_collect("t", (0..4).map(|i| i * 2)).unwrap(),
            [0, 2, 4, 6]
        );
        assert_eq!(try_zeroed_vec("t", 2).unwrap(), [0.0, 0.0]);
        assert!(matches!(
            try_zeroed_vec("t", MAX_ELEMENTS + 1),
            Err(Error::TooLarge { .. })
        ));
    }
}
