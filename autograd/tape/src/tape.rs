//! The tape: arena bookkeeping, the operator registry, views, status and recording.

use crate::arena::{Arena, ALIGN};
use crate::graph::Graph;
use crate::operators::{record_layout, Acc, Operator};
use crate::scalar::TapeScalar;
use crate::status::Status;
use crate::view::{
    no_grad, BufferView, Input, MatrixView, Output, Parameter, Raw, Role, NO_RECORD,
};
use core::any::TypeId;
use core::cell::Cell;
use core::marker::PhantomData;
use core::mem::size_of;

/// Whether shapes and tape identity of views are checked by operators: always in debug
/// builds, with the `validation` feature in release builds.
pub const VALIDATION: bool = cfg!(any(debug_assertions, feature = "validation"));

/// The backward rule of one registered operator type, called with a record's payload.
pub(crate) type BackwardFn = unsafe fn(*const u8, [Acc; 3]);

/// One slot of the operator registry.
#[derive(Clone, Copy)]
pub(crate) struct OpEntry {
    pub(crate) id: TypeId,
    pub(crate) backward: BackwardFn,
    /// Record size in bytes (header, producers, payload; a multiple of [`ALIGN`]).
    pub(crate) size: u32,
    /// Offset of the payload inside the record.
    pub(crate) payload: u32,
}

/// Where a new view's gradient comes from.
enum GradSource<T> {
    None,
    Arena,
    Caller(*mut T, usize),
}

/// Reverse-mode automatic differentiation on a fixed arena: the record of operations and
/// the gradient storage.
///
/// `MAX_OPS` is the number of operator types that can be registered (at most 255).
/// Everything a tape stores lives in its [`Arena`]; when that is full the tape reports
/// [`Status::OutOfMemory`] and never allocates elsewhere.
///
/// Views borrow the tape (shared), so [`reset`](Self::reset), which takes `&mut self`,
/// cannot be called while any view exists. Operations are recorded through a [`Graph`].
pub struct Tape<'a, T: TapeScalar, const MAX_OPS: usize = 16> {
    base: *mut u8,
    top: usize,
    low: Cell<usize>,
    high: Cell<usize>,
    peak: Cell<usize>,
    mark: Cell<Option<usize>>,
    epoch: Cell<u64>,
    status: Cell<Status>,
    recording: Cell<bool>,
    registry: [Cell<Option<OpEntry>>; MAX_OPS],
    _arena: PhantomData<(&'a mut [u8], T)>,
}

impl<'a, T: TapeScalar, const MAX_OPS: usize> Tape<'a, T, MAX_OPS> {
    /// A tape working in `arena` (recording on, status [`Status::Ok`], no operators).
    pub fn new<const BYTES: usize>(arena: &'a mut Arena<BYTES>) -> Self {
        const { assert!(MAX_OPS >= 1 && MAX_OPS <= 255, "MAX_OPS must be in 1..=255") };
        let (base, top) = arena.raw_parts();
        Self {
            base,
            top,
            low: Cell::new(0),
            high: Cell::new(top),
            peak: Cell::new(0),
            mark: Cell::new(None),
            epoch: Cell::new(1),
            status: Cell::new(Status::Ok),
            recording: Cell::new(true),
            registry: [const { Cell::new(None) }; MAX_OPS],
            _arena: PhantomData,
        }
    }

    // ----- status -----------------------------------------------------------------------

    /// The first error since the status was last cleared.
    pub fn status(&self) -> Status {
        self.status.get()
    }

    /// Whether the status is [`Status::Ok`].
    pub fn good(&self) -> bool {
        self.status.get().is_ok()
    }

    /// Clears the status to [`Status::Ok`].
    pub fn clear_status(&self) {
        self.status.set(Status::Ok);
    }

    /// Records `status` unless an earlier error is already kept.
    pub(crate) fn fail(&self, status: Status) {
        if self.status.get().is_ok() {
            self.status.set(status);
        }
    }

    // ----- memory -----------------------------------------------------------------------

    /// The bytes the tape can use: the arena's size rounded down to a multiple of [`ALIGN`].
    pub fn capacity(&self) -> usize {
        self.top
    }

    /// Bytes in use now: gradients plus records.
    pub fn used(&self) -> usize {
        self.low.get() + (self.top - self.high.get())
    }

    /// The largest [`used`](Self::used) since the tape was made (size arenas with this).
    pub fn peak(&self) -> usize {
        self.peak.get()
    }

    /// Bytes still free.
    pub fn available(&self) -> usize {
        self.high.get() - self.low.get()
    }

    fn note_peak(&self) {
        let used = self.used();
        if used > self.peak.get() {
            self.peak.set(used);
        }
    }

    /// Takes `bytes` (rounded up to [`ALIGN`]) from the gradient end of the arena.
    fn alloc_low(&self, bytes: usize) -> Option<*mut u8> {
        let n = bytes.checked_add(ALIGN - 1)? & !(ALIGN - 1);
        let low = self.low.get();
        if n > self.high.get() - low {
            return None;
        }
        self.low.set(low + n);
        self.note_peak();
        // SAFETY: `low + n <= high <= top <= BYTES`: the offset is inside the arena's
        // allocation (or one past its end for an empty allocation at the top).
        Some(unsafe { self.base.add(low) })
    }

    /// Takes `size` bytes (a multiple of [`ALIGN`]) from the record end; returns the offset.
    pub(crate) fn alloc_record(&self, size: usize) -> Option<u32> {
        let high = self.high.get();
        if size > high - self.low.get() {
            return None;
        }
        let off = high - size;
        let off32 = u32::try_from(off).ok().filter(|&o| o != NO_RECORD)?;
        self.high.set(off);
        self.note_peak();
        Some(off32)
    }

    /// Identity of the tape, stored in its views.
    pub(crate) fn id(&self) -> *const u8 {
        self.base
    }

    /// Pointer to arena byte `off` (callers pass offsets of records, inside the arena;
    /// dereferencing it is theirs to justify).
    pub(crate) fn at(&self, off: usize) -> *mut u8 {
        debug_assert!(off < self.top);
        self.base.wrapping_add(off)
    }

    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.get()
    }

    pub(crate) fn high(&self) -> usize {
        self.high.get()
    }

    // ----- registry ---------------------------------------------------------------------

    /// Registers operator type `Op`, so that its operations can be recorded; `false` (and
    /// [`Status::OperatorRegistryFull`]) when all `MAX_OPS` slots are taken. Registering a
    /// type twice is harmless. Registrations survive [`reset`](Self::reset).
    pub fn register_operator<Op: Operator<T>>(&self) -> bool {
        let id = TypeId::of::<Op>();
        for slot in &self.registry {
            match slot.get() {
                Some(e) if e.id == id => return true,
                Some(_) => {}
                None => {
                    let (payload, size) = record_layout::<T, Op>();
                    slot.set(Some(OpEntry {
                        id,
                        backward: crate::operators::record::trampoline::<T, Op>,
                        size: size as u32,
                        payload: payload as u32,
                    }));
                    return true;
                }
            }
        }
        self.fail(Status::OperatorRegistryFull);
        false
    }

    /// Whether operator type `Op` is registered.
    pub fn is_registered<Op: Operator<T>>(&self) -> bool {
        self.slot_of::<Op>().is_some()
    }

    /// Number of registered operator types.
    pub fn registered(&self) -> usize {
        self.registry.iter().filter(|s| s.get().is_some()).count()
    }

    pub(crate) fn slot_of<Op: Operator<T>>(&self) -> Option<u8> {
        let id = TypeId::of::<Op>();
        self.registry
            .iter()
            .position(|s| s.get().is_some_and(|e| e.id == id))
            .map(|p| p as u8)
    }

    pub(crate) fn entry(&self, slot: u8) -> OpEntry {
        self.registry[usize::from(slot)]
            .get()
            .expect("record of a registered operator")
    }

    // ----- recording and storage reuse ---------------------------------------------------

    /// Whether operations are recorded (see [`RecordingScope`]).
    pub fn is_recording(&self) -> bool {
        self.recording.get()
    }

    /// Turns recording on or off; returns the previous setting. Prefer [`RecordingScope`].
    pub fn set_recording(&self, on: bool) -> bool {
        self.recording.replace(on)
    }

    /// Opens a graph: the scope in which operations are recorded and `backward` runs.
    ///
    /// Opening a graph ends any graph opened before it (that one's operations and backward
    /// then fail with [`Status::TapeMismatch`]). Records stay in the arena until
    /// [`rewind_graph`](Self::rewind_graph) or [`reset`](Self::reset).
    pub fn graph(&self) -> Graph<'_, 'a, T, MAX_OPS> {
        let epoch = self.epoch.get() + 1;
        self.epoch.set(epoch);
        Graph::new(self, epoch, self.high.get())
    }

    /// Saves the current arena position for [`rewind_graph`](Self::rewind_graph) and clears
    /// the status. O(1).
    pub fn begin_graph(&self) {
        self.mark.set(Some(self.high.get()));
        self.status.set(Status::Ok);
    }

    /// Returns the record storage to the position saved by
    /// [`begin_graph`](Self::begin_graph) and forgets every record; views (and their
    /// gradients) stay valid. Clears the status; without a saved position sets
    /// [`Status::InvalidOutput`] and returns `false`. Ends any open graph. O(1).
    pub fn rewind_graph(&self) -> bool {
        self.status.set(Status::Ok);
        match self.mark.get() {
            None => {
                self.fail(Status::InvalidOutput);
                false
            }
            Some(mark) => {
                self.high.set(mark);
                self.epoch.set(self.epoch.get() + 1);
                true
            }
        }
    }

    /// Releases every gradient and record in the arena, forgets the saved position and
    /// clears the status; registrations are kept and recording is switched on. O(1).
    ///
    /// It takes `&mut self`: no view, graph or recording scope of this tape may still be
    /// in use, so no stale view can be used afterwards.
    pub fn reset(&mut self) {
        self.low.set(0);
        self.high.set(self.top);
        self.mark.set(None);
        self.epoch.set(self.epoch.get() + 1);
        self.status.set(Status::Ok);
        self.recording.set(true);
    }

    // ----- views ------------------------------------------------------------------------

    fn make(&self, values: *mut T, available: usize, len: usize, grad: GradSource<T>) -> Raw<T> {
        let mut raw = Raw {
            values,
            grad: no_grad(),
            len,
            tape: self.id(),
            epoch: 0,
            record: NO_RECORD,
            valid: true,
        };
        if len > available {
            self.fail(Status::TapeMismatch);
            raw.len = 0;
            raw.valid = false;
            return raw;
        }
        match grad {
            GradSource::None => {}
            GradSource::Caller(g, glen) => {
                if glen != len {
                    self.fail(Status::TapeMismatch);
                    raw.valid = false;
                } else {
                    raw.grad = g;
                }
            }
            GradSource::Arena => {
                let bytes = len.checked_mul(size_of::<T>());
                match bytes.and_then(|b| self.alloc_low(b)) {
                    Some(p) => raw.grad = p.cast::<T>(),
                    None => {
                        self.fail(Status::OutOfMemory);
                        raw.valid = false;
                    }
                }
            }
        }
        if !raw.grad.is_null() {
            for i in 0..len {
                // SAFETY: a non-null `grad` was just set to the caller's slice of exactly
                // `len` elements (borrowed mutably for the view's life) or to a fresh arena
                // allocation of `len × size_of::<T>()` bytes aligned to `ALIGN`; nothing
                // else refers to it yet, and writing needs no prior initialisation.
                unsafe { raw.grad.add(i).write(T::ZERO) };
            }
        }
        raw
    }

    fn view<'t, R: Role>(
        &'t self,
        values: *mut T,
        available: usize,
        len: usize,
        grad: GradSource<T>,
    ) -> BufferView<'t, T, R> {
        BufferView::from_raw(self.make(values, available, len, grad))
    }

    fn matrix<'t, R: Role>(
        &'t self,
        values: *mut T,
        available: usize,
        rows: usize,
        cols: usize,
        grad: impl FnOnce(usize) -> GradSource<T>,
    ) -> MatrixView<'t, T, R> {
        match rows.checked_mul(cols) {
            Some(len) => MatrixView::new(self.view(values, available, len, grad(len)), rows, cols),
            None => {
                self.fail(Status::TapeMismatch);
                MatrixView::new(self.view(values, 0, 1, GradSource::None), 0, 0)
            }
        }
    }

    /// An input over `values` (an array or a slice; the length comes with it). Inputs have
    /// no gradient and use no arena space.
    pub fn input<'t>(&'t self, values: &'t [T]) -> BufferView<'t, T, Input> {
        let n = values.len();
        self.view(values.as_ptr().cast_mut(), n, n, GradSource::None)
    }

    /// An input over the first `len` elements of `values` ([`Status::TapeMismatch`] and an
    /// invalid view if `len` exceeds the slice).
    pub fn input_with_len<'t>(&'t self, values: &'t [T], len: usize) -> BufferView<'t, T, Input> {
        self.view(
            values.as_ptr().cast_mut(),
            values.len(),
            len,
            GradSource::None,
        )
    }

    /// An input matrix of `rows × cols` elements, row-major, over the start of `values`.
    pub fn input_matrix<'t>(
        &'t self,
        values: &'t [T],
        rows: usize,
        cols: usize,
    ) -> MatrixView<'t, T, Input> {
        self.matrix(values.as_ptr().cast_mut(), values.len(), rows, cols, |_| {
            GradSource::None
        })
    }

    /// A trainable parameter over `values`, its gradient taken from the arena.
    pub fn parameter<'t>(&'t self, values: &'t mut [T]) -> BufferView<'t, T, Parameter> {
        let n = values.len();
        self.view(values.as_mut_ptr(), n, n, GradSource::Arena)
    }

    /// A parameter over the first `len` elements of `values`.
    pub fn parameter_with_len<'t>(
        &'t self,
        values: &'t mut [T],
        len: usize,
    ) -> BufferView<'t, T, Parameter> {
        let n = values.len();
        self.view(values.as_mut_ptr(), n, len, GradSource::Arena)
    }

    /// A parameter matrix of `rows × cols`, row-major, its gradient from the arena.
    pub fn parameter_matrix<'t>(
        &'t self,
        values: &'t mut [T],
        rows: usize,
        cols: usize,
    ) -> MatrixView<'t, T, Parameter> {
        let n = values.len();
        self.matrix(values.as_mut_ptr(), n, rows, cols, |_| GradSource::Arena)
    }

    /// A parameter whose gradient lives in the caller's `grad` (same length; no arena use).
    pub fn parameter_with_grad<'t>(
        &'t self,
        values: &'t mut [T],
        grad: &'t mut [T],
    ) -> BufferView<'t, T, Parameter> {
        let n = values.len();
        self.view(
            values.as_mut_ptr(),
            n,
            n,
            GradSource::Caller(grad.as_mut_ptr(), grad.len()),
        )
    }

    /// A parameter matrix whose gradient lives in the caller's `grad` (`rows × cols` long).
    pub fn parameter_matrix_with_grad<'t>(
        &'t self,
        values: &'t mut [T],
        grad: &'t mut [T],
        rows: usize,
        cols: usize,
    ) -> MatrixView<'t, T, Parameter> {
        let n = values.len();
        let g = (grad.as_mut_ptr(), grad.len());
        self.matrix(values.as_mut_ptr(), n, rows, cols, |_| {
            GradSource::Caller(g.0, g.1)
        })
    }

    /// An intermediate or result over `values`, its gradient taken from the arena.
    pub fn output<'t>(&'t self, values: &'t mut [T]) -> BufferView<'t, T, Output> {
        let n = values.len();
        self.view(values.as_mut_ptr(), n, n, GradSource::Arena)
    }

    /// An output over the first `len` elements of `values`.
    pub fn output_with_len<'t>(
        &'t self,
        values: &'t mut [T],
        len: usize,
    ) -> BufferView<'t, T, Output> {
        let n = values.len();
        self.view(values.as_mut_ptr(), n, len, GradSource::Arena)
    }

    /// An output matrix of `rows × cols`, row-major, its gradient from the arena.
    pub fn output_matrix<'t>(
        &'t self,
        values: &'t mut [T],
        rows: usize,
        cols: usize,
    ) -> MatrixView<'t, T, Output> {
        let n = values.len();
        self.matrix(values.as_mut_ptr(), n, rows, cols, |_| GradSource::Arena)
    }

    /// An output whose gradient lives in the caller's `grad` (same length; no arena use).
    pub fn output_with_grad<'t>(
        &'t self,
        values: &'t mut [T],
        grad: &'t mut [T],
    ) -> BufferView<'t, T, Output> {
        let n = values.len();
        self.view(
            values.as_mut_ptr(),
            n,
            n,
            GradSource::Caller(grad.as_mut_ptr(), grad.len()),
        )
    }

    /// An output matrix whose gradient lives in the caller's `grad` (`rows × cols` long).
    pub fn output_matrix_with_grad<'t>(
        &'t self,
        values: &'t mut [T],
        grad: &'t mut [T],
        rows: usize,
        cols: usize,
    ) -> MatrixView<'t, T, Output> {
        let n = values.len();
        let g = (grad.as_mut_ptr(), grad.len());
        self.matrix(values.as_mut_ptr(), n, rows, cols, |_| {
            GradSource::Caller(g.0, g.1)
        })
    }
}

impl<T: TapeScalar, const MAX_OPS: usize> core::fmt::Debug for Tape<'_, T, MAX_OPS> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Tape")
            .field("capacity", &self.top)
            .field("used", &self.used())
            .field("peak", &self.peak())
            .field("status", &self.status())
            .field("recording", &self.is_recording())
            .field("registered", &self.registered())
            .finish()
    }
}

/// Sets a tape's recording on or off for one block and restores the previous setting when
/// dropped (also on early return and panic unwinding).
///
/// The name means "the scope in which recording has this setting". Operations computed
/// while recording is off write their outputs but add no record, so those outputs have no
/// producer and cannot be the root of `backward` ([`Status::InvalidOutput`]).
#[must_use = "the setting is restored when the scope is dropped"]
pub struct RecordingScope<'t> {
    flag: &'t Cell<bool>,
    previous: bool,
}

impl<'t> RecordingScope<'t> {
    /// Applies `enabled` to `tape` until the scope is dropped.
    pub fn new<T: TapeScalar, const MAX_OPS: usize>(
        tape: &'t Tape<'_, T, MAX_OPS>,
        enabled: bool,
    ) -> Self {
        let previous = tape.recording.replace(enabled);
        Self {
            flag: &tape.recording,
            previous,
        }
    }

    /// The setting that will be restored.
    pub fn previous(&self) -> bool {
        self.previous
    }
}

impl Drop for RecordingScope<'_> {
    fn drop(&mut self) {
        self.flag.set(self.previous);
    }
}

impl core::fmt::Debug for RecordingScope<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RecordingScope")
            .field("enabled", &self.flag.get())
            .field("previous", &self.previous)
            .finish()
    }
}
