//! Views: non-owning descriptions of the caller's buffers, typed by their role.

use core::marker::PhantomData;
use core::ops::{Deref, DerefMut};
use core::ptr;
use core::slice;

/// The record offset of a view that no recorded operation produced.
pub(crate) const NO_RECORD: u32 = u32::MAX;

/// What a view describes, without lifetimes or role: the operators and the tape work on it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Raw<T> {
    /// The caller's values (never written through for an [`Input`]).
    pub(crate) values: *mut T,
    /// The gradient (arena or caller-owned), null when the view has none.
    pub(crate) grad: *mut T,
    /// Number of elements of `values` (and of `grad`).
    pub(crate) len: usize,
    /// Identity of the owning tape: the start of its arena.
    pub(crate) tape: *const u8,
    /// The graph epoch of the producing record (valid only together with `record`).
    pub(crate) epoch: u64,
    /// Arena offset of the producing record, or [`NO_RECORD`].
    pub(crate) record: u32,
    /// False when the view could not be made (its creation set the tape's status).
    pub(crate) valid: bool,
}

impl<T> Raw<T> {
    pub(crate) fn values(&self) -> &[T] {
        if self.values.is_null() || self.len == 0 {
            return &[];
        }
        // SAFETY: a `Raw` lives in the `BufferView` made from it by `Tape::make`, whose
        // `values` points to at least `len` initialised elements of the caller's slice
        // (`len` is 0 when it did not fit), aligned as any slice; the view borrows that
        // slice for its life. Nothing writes the elements while the returned borrow of
        // `self` lives: writes go through `BufferView::values_mut` (which needs the view
        // mutably) or through an operator writing its output view, which it holds mutably
        // and never reads through this method at the same time.
        unsafe { slice::from_raw_parts(self.values, self.len) }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Input {}
    impl Sealed for super::Parameter {}
    impl Sealed for super::Output {}
}

/// The role of a view: [`Input`], [`Parameter`] or [`Output`].
pub trait Role: sealed::Sealed {
    /// The role's name.
    const NAME: &'static str;
}

/// The roles that carry a gradient: [`Parameter`] and [`Output`].
pub trait HasGrad: Role {}

/// An ordinary input: read-only values, no gradient storage.
#[derive(Debug)]
pub enum Input {}
/// A trainable parameter: its gradient accumulates over backward passes until zeroed.
#[derive(Debug)]
pub enum Parameter {}
/// An intermediate or result that operators write: its gradient is set by backward.
#[derive(Debug)]
pub enum Output {}

impl Role for Input {
    const NAME: &'static str = "input";
}
impl Role for Parameter {
    const NAME: &'static str = "parameter";
}
impl Role for Output {
    const NAME: &'static str = "output";
}
impl HasGrad for Parameter {}
impl HasGrad for Output {}

/// A non-owning view of one of the caller's buffers (and of its gradient) on a tape.
///
/// `'t` is a borrow both of the tape and of the caller's buffers: the buffers cannot be
/// dropped, moved or touched while the view exists, and the tape cannot be
/// [`reset`](crate::Tape::reset) while the view exists. The role `R` decides what the view
/// can be used for: only an [`Output`] can be written by an operator, only a [`Parameter`]
/// or an [`Output`] has a gradient.
pub struct BufferView<'t, T, R: Role = Output> {
    pub(crate) raw: Raw<T>,
    _borrow: PhantomData<(&'t mut [T], R)>,
}

impl<'t, T, R: Role> BufferView<'t, T, R> {
    pub(crate) fn from_raw(raw: Raw<T>) -> Self {
        Self {
            raw,
            _borrow: PhantomData,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.raw.len
    }

    /// Whether the view has no elements.
    pub fn is_empty(&self) -> bool {
        self.raw.len == 0
    }

    /// Whether the view was made without error (an invalid view makes operators fail).
    pub fn is_valid(&self) -> bool {
        self.raw.valid
    }

    /// Whether the last operation that wrote this view recorded itself (false for a view
    /// never written, written with recording off, or whose operation failed).
    pub fn has_producer(&self) -> bool {
        self.raw.record != NO_RECORD
    }

    /// The role's name: `"input"`, `"parameter"` or `"output"`.
    pub fn role(&self) -> &'static str {
        R::NAME
    }

    /// The values.
    pub fn values(&self) -> &[T] {
        self.raw.values()
    }
}

impl<'t, T, R: HasGrad> BufferView<'t, T, R> {
    /// The gradient (empty for an invalid view). Borrowing the view mutably guarantees
    /// that no graph that could write the gradient is using it.
    pub fn grad(&mut self) -> &[T] {
        self.grad_mut()
    }

    /// The gradient, writable.
    pub fn grad_mut(&mut self) -> &mut [T] {
        if self.raw.grad.is_null() || self.raw.len == 0 {
            return &mut [];
        }
        // SAFETY: a non-null `grad` points to `len` elements that belong to this view
        // alone: an arena allocation of `len × size_of::<T>()` bytes aligned to `ALIGN`
        // (at least the alignment of `T`), or the caller's gradient slice of `len`
        // elements, borrowed mutably for the view's life. They were zeroed when the view
        // was made (initialised). Holding the view mutably proves no graph uses it (graphs
        // borrow their views until backward ends), so no other reference exists.
        unsafe { slice::from_raw_parts_mut(self.raw.grad, self.raw.len) }
    }

    /// Sets the gradient to zero.
    pub fn zero_grad(&mut self)
    where
        T: Copy + Default,
    {
        for g in self.grad_mut() {
            *g = T::default();
        }
    }

    /// The values, writable (for an optimizer step or new data). No graph can be reading
    /// them: every graph that used the view borrowed it until its backward ended.
    pub fn values_mut(&mut self) -> &mut [T] {
        if self.raw.values.is_null() || self.raw.len == 0 {
            return &mut [];
        }
        // SAFETY: roles with gradients are only made from `&mut [T]` slices of at least
        // `len` initialised, aligned elements, borrowed mutably for the view's life; the
        // view is held mutably here, so no graph and no other slice refers to them.
        unsafe { slice::from_raw_parts_mut(self.raw.values, self.raw.len) }
    }

    /// The values and the gradient together, both writable (for an optimizer step).
    pub fn values_and_grad_mut(&mut self) -> (&mut [T], &mut [T]) {
        let len = self.raw.len;
        let values = if self.raw.values.is_null() || len == 0 {
            &mut [][..]
        } else {
            // SAFETY: as in `values_mut`; the gradient below is arena memory or another
            // slice the caller lent mutably, so the two never overlap.
            unsafe { slice::from_raw_parts_mut(self.raw.values, len) }
        };
        let grad = if self.raw.grad.is_null() || len == 0 {
            &mut [][..]
        } else {
            // SAFETY: as in `grad_mut`; disjoint from the values above.
            unsafe { slice::from_raw_parts_mut(self.raw.grad, len) }
        };
        (values, grad)
    }
}

impl<T, R: Role> core::fmt::Debug for BufferView<'_, T, R> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("BufferView")
            .field("role", &R::NAME)
            .field("len", &self.raw.len)
            .field("valid", &self.raw.valid)
            .field("has_grad", &!self.raw.grad.is_null())
            .field("recorded", &(self.raw.record != NO_RECORD))
            .finish()
    }
}

/// A [`BufferView`] of a row-major `rows × cols` matrix; it dereferences to the buffer view.
pub struct MatrixView<'t, T, R: Role = Output> {
    view: BufferView<'t, T, R>,
    rows: usize,
    cols: usize,
}

impl<'t, T, R: Role> MatrixView<'t, T, R> {
    pub(crate) fn new(view: BufferView<'t, T, R>, rows: usize, cols: usize) -> Self {
        Self { view, rows, cols }
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The underlying buffer view.
    pub fn as_view(&self) -> &BufferView<'t, T, R> {
        &self.view
    }

    /// The underlying buffer view, by value.
    pub fn into_view(self) -> BufferView<'t, T, R> {
        self.view
    }
}

impl<'t, T, R: Role> Deref for MatrixView<'t, T, R> {
    type Target = BufferView<'t, T, R>;
    fn deref(&self) -> &Self::Target {
        &self.view
    }
}

impl<'t, T, R: Role> DerefMut for MatrixView<'t, T, R> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.view
    }
}

impl<T, R: Role> core::fmt::Debug for MatrixView<'_, T, R> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MatrixView")
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .field("view", &self.view)
            .finish()
    }
}

/// A null gradient pointer (inputs and failed views).
pub(crate) fn no_grad<T>() -> *mut T {
    ptr::null_mut()
}
