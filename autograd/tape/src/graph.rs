//! A graph: the borrow scope in which operations are recorded and `backward` runs.

use crate::operators::record::Views;
use crate::operators::{Acc, Operator};
use crate::scalar::TapeScalar;
use crate::status::Status;
use crate::tape::{Tape, VALIDATION};
use crate::view::{BufferView, Output, Raw, NO_RECORD};
use core::marker::PhantomData;

/// Header flag: the record is reachable from the backward root.
const NEEDED: u8 = 1;
/// Header flag: the record's output gradient has received its first contribution.
const GRAD_SET: u8 = 2;

/// One recording session on a [`Tape`], ended by [`backward`](Self::backward).
///
/// Every operator takes the graph and borrows its input views for `'g`, the whole life of
/// the graph, and its output view mutably for `'g`; it returns a shared reference to the
/// output for the next operation. Hence, until `backward` has finished:
/// - the caller's buffers behind those views stay alive and unchanged;
/// - an output is written by at most one operation and never aliases that operation's
///   inputs.
///
/// Records made through a graph are only ever read by that graph's `backward`.
pub struct Graph<'g, 'a, T: TapeScalar, const MAX_OPS: usize = 16> {
    tape: &'g Tape<'a, T, MAX_OPS>,
    epoch: u64,
    start: usize,
    _invariant: PhantomData<fn(&'g ()) -> &'g ()>,
}

/// What an operator of type `Op` may do after [`Graph::begin`]: run, and record at
/// `record` if given, with the `N` inputs `begin` checked.
pub(crate) struct Pending<'g, T, Op, const N: usize> {
    slot: u8,
    record: Option<u32>,
    inputs: [&'g Raw<T>; N],
    _op: PhantomData<fn() -> Op>,
}

impl<'g, 'a, T: TapeScalar, const MAX_OPS: usize> Graph<'g, 'a, T, MAX_OPS> {
    pub(crate) fn new(tape: &'g Tape<'a, T, MAX_OPS>, epoch: u64, start: usize) -> Self {
        Self {
            tape,
            epoch,
            start,
            _invariant: PhantomData,
        }
    }

    /// The tape this graph records on.
    pub fn tape(&self) -> &'g Tape<'a, T, MAX_OPS> {
        self.tape
    }

    /// Whether the graph is still the tape's current one (not ended by a newer graph,
    /// [`Tape::rewind_graph`] or [`Tape::begin_graph`]).
    pub fn is_current(&self) -> bool {
        self.epoch == self.tape.epoch()
    }

    /// Number of bytes of records made in this graph so far.
    pub fn record_bytes(&self) -> usize {
        self.start.saturating_sub(self.tape.high())
    }

    /// The producer of `raw` in this graph, or [`NO_RECORD`].
    fn producer(&self, raw: &Raw<T>) -> u32 {
        if raw.record != NO_RECORD && raw.epoch == self.epoch && raw.tape == self.tape.id() {
            raw.record
        } else {
            NO_RECORD
        }
    }

    /// Checks an operation before it touches anything: graph current, views valid and of
    /// this tape, every buffer long enough for what the operation reads and writes
    /// (`fits`), exact shapes (`exact`, when [`VALIDATION`] is on), operator registered,
    /// record space. `None` means the operation must leave its output alone (the status
    /// says why).
    ///
    /// The inputs are borrowed for `'g`, the life of the graph: they are the views of an
    /// operator that borrows them that long, which is what makes their buffers outlive the
    /// record (see `operators::record`).
    pub(crate) fn begin<Op: Operator<T>, const N: usize>(
        &self,
        inputs: [&'g Raw<T>; N],
        output: &Raw<T>,
        fits: bool,
        exact: impl FnOnce() -> bool,
    ) -> Option<Pending<'g, T, Op, N>> {
        const {
            assert!(
                N == Op::INPUTS,
                "an operator records as many inputs as it declares"
            )
        };
        let tape = self.tape;
        let id = tape.id();
        // Always checked, as memory safety depends on them: a stale graph's records may
        // have been overwritten, a view of another tape names records of that tape, and
        // the records' slices must stay inside the caller's buffers.
        if !self.is_current()
            || !fits
            || !output.valid
            || output.tape != id
            || inputs.iter().any(|r| !r.valid || r.tape != id)
        {
            tape.fail(Status::TapeMismatch);
            return None;
        }
        if VALIDATION && !exact() {
            tape.fail(Status::TapeMismatch);
            return None;
        }
        let Some(slot) = tape.slot_of::<Op>() else {
            tape.fail(Status::OperatorNotRegistered);
            return None;
        };
        let pending = |record| Pending {
            slot,
            record,
            inputs,
            _op: PhantomData,
        };
        if !tape.is_recording() {
            return Some(pending(None));
        }
        let size = tape.entry(slot).size as usize;
        match tape.alloc_record(size) {
            Some(off) => Some(pending(Some(off))),
            None => {
                tape.fail(Status::OutOfMemory);
                None
            }
        }
    }

    /// Completes an operation whose output values are written: stores the record (if
    /// recording) with the payload `saved` makes from the operation's views, zeroes the
    /// output gradient, names the record as the output's producer and returns the output.
    pub(crate) fn finish<'y, Op: Operator<T>, const N: usize>(
        &self,
        pending: Pending<'g, T, Op, N>,
        output: &'g mut BufferView<'y, T, Output>,
        saved: impl FnOnce(&Views<'_, T, N>) -> Op::Saved,
    ) -> &'g BufferView<'y, T, Output> {
        let Some(off) = pending.record else {
            output.raw.record = NO_RECORD;
            return output;
        };
        // SAFETY: `begin` took the inputs as `&'g Raw<T>`: the raws of views the operator
        // borrows (shared) for `'g`, the whole life of this graph (only a view lives that
        // long); `output` is the output view, borrowed mutably for `'g`. That is the
        // contract of `Views::new`.
        let views = unsafe { Views::new(pending.inputs, &output.raw) };
        let saved = saved(&views);
        let out = &mut output.raw;
        let entry = self.tape.entry(pending.slot);
        let base = self.tape.at(off as usize);
        // SAFETY: the record's `entry.size` bytes at `off` were just allocated for it by
        // `begin` (inside the arena, not yet read by anything); the header is 4 bytes,
        // then one u32 per input (`N == Op::INPUTS`, checked in `begin`), then the
        // payload at `entry.payload`, aligned for `Op::Saved` (see `record_layout`).
        unsafe {
            base.write(pending.slot);
            base.add(1).write(0);
            base.add(2).write(N as u8);
            base.add(3).write(0);
            let producers = base.add(4).cast::<u32>();
            for (i, raw) in pending.inputs.iter().enumerate() {
                producers.add(i).write(self.producer(raw));
            }
            base.add(entry.payload as usize)
                .cast::<Op::Saved>()
                .write(saved);
        }
        if !out.grad.is_null() {
            for i in 0..out.len {
                // SAFETY: a valid view's non-null gradient has `len` elements (`begin`
                // refused invalid outputs), and nothing else refers to it now: the output
                // view is borrowed mutably by this operation.
                unsafe { out.grad.add(i).write(T::ZERO) };
            }
        }
        out.epoch = self.epoch;
        out.record = off;
        output
    }

    /// Runs reverse-mode differentiation from `root`, a one-element output recorded in this
    /// graph, with seed 1. See [`backward_with_seed`](Self::backward_with_seed).
    pub fn backward(self, root: &BufferView<'_, T, Output>) -> bool {
        self.backward_with_seed(root, &[T::ONE])
    }

    /// Runs reverse-mode differentiation from `root` with the gradient `seed` (as long as
    /// `root`); returns whether it ran.
    ///
    /// It does nothing and returns `false` when the status is not [`Status::Ok`], when the
    /// graph is no longer current ([`Status::TapeMismatch`]), or when `root` has no
    /// producer in this graph or `seed` has the wrong length ([`Status::InvalidOutput`]).
    ///
    /// Only the records reachable from `root` run, newest first; each adds its
    /// contributions to its inputs' gradients in input order. An output's gradient takes
    /// its first contribution as is and adds later ones; a parameter's gradient (and that
    /// of an output not produced in this graph) adds every contribution to what it held.
    pub fn backward_with_seed(self, root: &BufferView<'_, T, Output>, seed: &[T]) -> bool {
        let tape = self.tape;
        if !tape.good() {
            return false;
        }
        if !self.is_current() || root.raw.tape != tape.id() {
            tape.fail(Status::TapeMismatch);
            return false;
        }
        let r = &root.raw;
        let off = self.producer(r);
        if !r.valid || off == NO_RECORD || r.grad.is_null() || seed.len() != r.len {
            tape.fail(Status::InvalidOutput);
            return false;
        }
        for (i, &s) in seed.iter().enumerate() {
            // SAFETY: the root is a valid view with a non-null gradient (checked above),
            // which has `len == seed.len()` elements; no slice of it is alive (the
            // caller's `grad` needs the view mutably, and no backward rule runs yet).
            unsafe { r.grad.add(i).write(s) };
        }
        // SAFETY: this graph is current (checked above), so no rewind, reset or newer
        // graph has reused its record space: the records in [off, start) are exactly the
        // ones it wrote, contiguous, newest first. Each starts with its 4-byte header (slot
        // of a registered operator, flags, number of inputs) and that many producer
        // offsets; a record's size and payload offset come from its registry entry, so
        // `o` steps from record to record and stays below `start`. A producer offset is
        // `NO_RECORD` or, by `producer`, a record of this graph older than the one naming
        // it, so `flags(p)` is the flags byte of a record in [off, start). Every record in
        // the range was written by `finish::<Op>` with `entry.backward ==
        // trampoline::<T, Op>`, and the views it was made from are still borrowed by this
        // graph, which is the contract of `trampoline`; no reference into the records is
        // alive while a rule runs (the rule's own payload reference excepted, which
        // nothing writes).
        unsafe {
            let flags = |o: u32| tape.at(o as usize).add(1);
            *flags(off) |= NEEDED | GRAD_SET;
            let mut o = off as usize;
            while o < self.start {
                let base = tape.at(o);
                let entry = tape.entry(*base);
                if *base.add(1) & NEEDED != 0 {
                    let n = usize::from(*base.add(2));
                    let producers = base.add(4).cast::<u32>();
                    let mut acc = [Acc::Add; 3];
                    for (i, mode) in acc.iter_mut().enumerate().take(n) {
                        let p = producers.add(i).read();
                        if p != NO_RECORD && *flags(p) & GRAD_SET == 0 {
                            *flags(p) |= GRAD_SET;
                            *mode = Acc::Set;
                        }
                    }
                    (entry.backward)(base.add(entry.payload as usize), acc);
                    for i in 0..n {
                        let p = producers.add(i).read();
                        if p != NO_RECORD {
                            *flags(p) |= NEEDED;
                        }
                    }
                }
                o += entry.size as usize;
            }
        }
        true
    }
}

impl<T: TapeScalar, const MAX_OPS: usize> core::fmt::Debug for Graph<'_, '_, T, MAX_OPS> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Graph")
            .field("current", &self.is_current())
            .field("record_bytes", &self.record_bytes())
            .finish()
    }
}
