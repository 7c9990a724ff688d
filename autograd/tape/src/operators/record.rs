//! What a record keeps of the caller's buffers, and the only way a backward rule reads
//! and writes them.
//!
//! A record's payload holds raw pointers into the values and gradients of the views its
//! operation used. This module is the only code that turns them back into slices, and the
//! only module under `operators` allowed to contain `unsafe` (the others deny
//! `unsafe_code`):
//!
//! * An operator keeps its buffers as a [`Buffers`], which only [`Views::keep`] makes, from
//!   the views [`Graph::begin`](crate::graph::Graph::begin) checked and
//!   [`Graph::finish`](crate::graph::Graph::finish) records, borrowed for the whole life of
//!   the graph. Its pointers are private to this module.
//! * A backward rule reads a [`Buffers`] only through methods that take a [`Live`], which
//!   only [`trampoline`] makes, when the backward walk of the graph that made the record
//!   runs that record.
//!
//! # Why the slices are sound
//!
//! These are the invariants the two `unsafe` blocks that make slices rest on; each is
//! established where it says, and checked by [`Views::keep`] where it can be.
//!
//! 1. **In bounds.** A view's `values` points to `len` elements of one of the caller's
//!    slices, its `grad` is null or points to `len` elements (of the arena, zeroed when the
//!    view is made, or of the caller's gradient slice); see `Tape::make`. [`Views::keep`]
//!    checks each view against the lengths the [`Shape`] of the record gives it, and a
//!    shape gives the same lengths every time it is asked (it is plain data, and only
//!    this module implements [`Shape`]).
//! 2. **Valid, aligned, initialised.** The pointers come from `&[T]` / `&mut [T]` or from
//!    the arena, whose allocations are aligned to [`ALIGN`](crate::ALIGN) (at least the
//!    alignment of `T`); values are the caller's initialised elements, gradients are
//!    written (zeroed) when the view is made and again when an operation records its
//!    output.
//! 3. **Alive and unchanged.** The views a record was made from are borrowed by the graph
//!    for its whole life `'g` (inputs shared, the output exclusively: [`Views::new`]
//!    states this), so until its backward walk has finished the buffers are alive, their
//!    values have not changed since the forward operation, and the caller holds no
//!    reference to them or to their gradients (`grad`, `values_mut` need `&mut` views).
//!    A record is only read while [`Live`] exists: during that walk, which runs the
//!    records of its own graph only (see `Graph::backward_with_seed`).
//! 4. **Not aliased.** A rule writes only its inputs' gradients, and reads only views'
//!    values and its output's gradient. A gradient never overlaps any view's values (it is
//!    arena memory, or a caller slice borrowed mutably by its one view), the output is
//!    another view than each input (it is borrowed mutably, they shared), and two views
//!    never share gradient storage: so no gradient a rule writes overlaps what it reads.
//!    One view may be two inputs of one operation (`add(g, x, x, y)`); the rule then
//!    writes that gradient twice, one [`Buffers::emit`] after the other, never through
//!    two live `&mut` at once. Rules run one at a time, and each slice lives only as long
//!    as the rule's borrow of its record.
#![allow(unsafe_code)]

use super::{Acc, Operator};
use crate::scalar::TapeScalar;
use crate::view::Raw;
use core::marker::PhantomData;
use core::slice;

mod sealed {
    /// Only this module's shapes exist (their lengths bound every slice of a record).
    pub trait Sealed {}
    impl Sealed for super::Elementwise {}
    impl Sealed for super::Reduction {}
    impl Sealed for super::Gemv {}
}

/// The lengths of an operation's buffers: input `k`'s values and gradient, and the output's.
///
/// Implemented by [`Elementwise`], [`Reduction`] and [`Gemv`] only; each answer depends
/// only on the shape's fields.
pub trait Shape: Copy + sealed::Sealed {
    /// Whether the lengths can be computed without overflow.
    fn is_valid(&self) -> bool;
    /// Number of elements of input `k` (its values and its gradient).
    fn input_len(&self, k: usize) -> usize;
    /// Number of elements of the output (its values and its gradient).
    fn output_len(&self) -> usize;
}

/// Every input and the output have `len` elements.
#[derive(Clone, Copy, Debug)]
pub struct Elementwise {
    /// The common length.
    pub(crate) len: usize,
}

/// Every input has `len` elements; the output has one.
#[derive(Clone, Copy, Debug)]
pub struct Reduction {
    /// The inputs' length.
    pub(crate) len: usize,
}

/// A matrix times a vector (plus a bias): input 0 is a row-major `rows × cols` matrix,
/// input 1 has `cols` elements, input 2 (if any) and the output have `rows`.
#[derive(Clone, Copy, Debug)]
pub struct Gemv {
    /// Rows of the matrix, elements of the output.
    pub(crate) rows: usize,
    /// Columns of the matrix, elements of the vector.
    pub(crate) cols: usize,
}

impl Shape for Elementwise {
    fn is_valid(&self) -> bool {
        true
    }
    fn input_len(&self, _: usize) -> usize {
        self.len
    }
    fn output_len(&self) -> usize {
        self.len
    }
}

impl Shape for Reduction {
    fn is_valid(&self) -> bool {
        true
    }
    fn input_len(&self, _: usize) -> usize {
        self.len
    }
    fn output_len(&self) -> usize {
        1
    }
}

impl Shape for Gemv {
    fn is_valid(&self) -> bool {
        self.rows.checked_mul(self.cols).is_some()
    }
    fn input_len(&self, k: usize) -> usize {
        match k {
            0 => self.rows * self.cols,
            1 => self.cols,
            _ => self.rows,
        }
    }
    fn output_len(&self) -> usize {
        self.rows
    }
}

/// Which view's values a record keeps in one of its value slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// Slot `j` keeps the values of input `j`.
    Input,
    /// The slot keeps the output's values (as long as input `j`, checked).
    Output,
}

/// Proof that a record is being read by the backward walk of the graph that made it.
///
/// Only [`trampoline`] makes one, for the duration of one backward rule; every read of a
/// [`Buffers`] takes it, so no record is read while recording, nor after its graph ended.
/// It is neither `Copy` nor `Clone`: [`Buffers::emit`] borrows it mutably, so a
/// contribution cannot itself emit (which could make two `&mut` to one gradient).
pub struct Live<'r> {
    _walk: PhantomData<&'r ()>,
}

impl core::fmt::Debug for Live<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Live")
    }
}

/// The caller's buffers one record keeps: the gradients of its `N` inputs (written by the
/// backward rule), the values of `V` views and the output's gradient (read), with their
/// lengths given by the shape `S`.
///
/// Value slot `j` has `shape.input_len(j)` elements, input `k`'s gradient
/// `shape.input_len(k)`, the output's gradient `shape.output_len()`. It is made by
/// [`Views::keep`] and read with a [`Live`] (see the module documentation).
#[derive(Clone, Copy)]
pub struct Buffers<T, const N: usize, const V: usize, S> {
    grads: [*mut T; N],
    values: [*const T; V],
    gy: *const T,
    shape: S,
}

impl<T: TapeScalar, const N: usize, const V: usize, S: Shape> Buffers<T, N, V, S> {
    /// The lengths of the buffers.
    pub(crate) fn shape(&self) -> &S {
        &self.shape
    }

    /// The kept values, slot by slot.
    pub(crate) fn values<'r>(&'r self, live: &Live<'r>) -> [&'r [T]; V] {
        core::array::from_fn(|j| shared(self.values[j], self.shape.input_len(j), live))
    }

    /// The output's gradient.
    pub(crate) fn gy<'r>(&'r self, live: &Live<'r>) -> &'r [T] {
        shared(self.gy, self.shape.output_len(), live)
    }

    /// Adds `contribution(i)` for every element `i` of input `k`'s gradient (nothing if the
    /// input has none): with [`Acc::Set`] the contribution is stored, with [`Acc::Add`] it
    /// is added as `canon(g + c)`. `contribution` cannot reach `live`, hence cannot emit.
    pub(crate) fn emit(
        &self,
        _live: &mut Live<'_>,
        k: usize,
        acc: Acc,
        mut contribution: impl FnMut(usize) -> T,
    ) {
        let (grad, len) = (self.grads[k], self.shape.input_len(k));
        if grad.is_null() || len == 0 {
            return;
        }
        // SAFETY: `grad` is the gradient of input `k`, checked by `Views::keep` to hold at
        // least `len` elements, aligned and initialised, and alive while `Live` exists
        // (module invariants 1–3). Nothing else refers to it during this call: the slices
        // a rule reads never overlap a gradient it writes (invariant 4), `contribution`
        // cannot emit (`live` is borrowed mutably here), and `g` is dropped before `emit`
        // returns.
        let g = unsafe { slice::from_raw_parts_mut(grad, len) };
        match acc {
            Acc::Set => {
                for (i, v) in g.iter_mut().enumerate() {
                    *v = contribution(i);
                }
            }
            Acc::Add => {
                for (i, v) in g.iter_mut().enumerate() {
                    *v = (*v + contribution(i)).canon();
                }
            }
        }
    }
}

/// The slice a record reads at `p` (empty for a null pointer or no elements).
fn shared<'r, T>(p: *const T, len: usize, _live: &Live<'r>) -> &'r [T] {
    if p.is_null() || len == 0 {
        return &[];
    }
    // SAFETY: `p` is a value slot or the output gradient of a `Buffers` made by
    // `Views::keep`, which checked that it holds at least `len` elements (the shape's
    // length for it); it is aligned, initialised and alive, and its elements unchanged,
    // while `Live<'r>` exists (module invariants 1–3); no gradient written during `'r`
    // overlaps it (invariant 4).
    unsafe { slice::from_raw_parts(p, len) }
}

/// The views of one operation being recorded: its `N` inputs and its output.
pub(crate) struct Views<'v, T, const N: usize> {
    inputs: [&'v Raw<T>; N],
    output: &'v Raw<T>,
}

impl<'v, T: TapeScalar, const N: usize> Views<'v, T, N> {
    /// The views of an operation, for [`keep`](Self::keep).
    ///
    /// # Safety
    /// `inputs` and `output` describe the views of one operation that a graph records:
    /// each input view borrowed (shared) and the output view borrowed mutably for the
    /// whole life of that graph, and each `Raw` the one of its view (not a copy of it).
    pub(crate) unsafe fn new(inputs: [&'v Raw<T>; N], output: &'v Raw<T>) -> Self {
        Self { inputs, output }
    }

    /// What the record keeps: every input's gradient, the output's gradient, and for
    /// each slot `j` the values of input `j` or of the output (`values[j]`), for the
    /// lengths of `shape`.
    ///
    /// # Panics
    /// If a view is shorter than `shape` says (the operator's checks in
    /// [`Graph::begin`](crate::graph::Graph::begin) exclude this).
    pub(crate) fn keep<const V: usize, S: Shape>(
        &self,
        values: [Source; V],
        shape: S,
    ) -> Buffers<T, N, V, S> {
        assert!(shape.is_valid(), "record shape overflows");
        for (k, raw) in self.inputs.iter().enumerate() {
            assert!(
                raw.len >= shape.input_len(k),
                "record input longer than its view"
            );
        }
        assert!(
            self.output.len >= shape.output_len(),
            "record output longer than its view"
        );
        Buffers {
            grads: core::array::from_fn(|k| self.inputs[k].grad),
            values: core::array::from_fn(|j| {
                let raw = match values[j] {
                    Source::Input => self.inputs[j],
                    Source::Output => {
                        assert!(
                            self.output.len >= shape.input_len(j),
                            "record slot longer than the output"
                        );
                        self.output
                    }
                };
                raw.values.cast_const()
            }),
            gy: self.output.grad.cast_const(),
            shape,
        }
    }
}

/// The registry's entry point for `Op`'s backward rule.
///
/// # Safety
/// `payload` is the payload of a record of `Op`, written by
/// [`Graph::finish`](crate::graph::Graph::finish), of the graph whose backward walk is
/// running and calls this (that graph still current, its views still borrowed).
pub(crate) unsafe fn trampoline<T: TapeScalar, Op: Operator<T>>(payload: *const u8, acc: [Acc; 3]) {
    // SAFETY: `Graph::finish` wrote an `Op::Saved` at `payload`, aligned for it (the
    // arena and every record offset and payload offset are multiples of `ALIGN`, and
    // `record_layout` asserts the alignment of `Op::Saved` is at most `ALIGN`); nothing
    // writes the record while the walk runs, and the reference does not outlive this call.
    let saved = unsafe { &*payload.cast::<Op::Saved>() };
    // The caller's contract is what a `Live` certifies.
    Op::backward(saved, &mut Live { _walk: PhantomData }, acc);
}
