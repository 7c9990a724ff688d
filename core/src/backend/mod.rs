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
//! The files: this one holds the argument types ([`MatmulSpec`], [`Checked`] and the
//! argument structs), the fallible buffers and the seal; `backend_impl.rs` the trait a
//! backend implements; `checked.rs` the trait its callers use.

mod backend_impl;
mod checked;

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

pub use backend_impl::{host_stats, with_opt_host_mut, BackendImpl, HostStats};
pub use checked::Backend;

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
    /// The arguments of [`Backend::depthwise_conv`].
    DepthwiseArgs<'a, F> { spec: &'a Col2imSpec, x: F::View<'a>, w: F::View<'a>, out: F::ViewMut<'a> }
    /// The arguments of [`Backend::depthwise_grad_input`].
    DepthwiseGradInputArgs<'a, F> {
        spec: &'a Col2imSpec, g: F::View<'a>, w: F::View<'a>, gx: F::ViewMut<'a>,
    }
    /// The arguments of [`Backend::depthwise_grad_weight`].
    DepthwiseGradWeightArgs<'a, F> {
        spec: &'a Col2imSpec, g: F::View<'a>, x: F::View<'a>, gw: F::ViewMut<'a>,
    }
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
