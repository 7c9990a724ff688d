//! [`ActivationScope`]: returns the storage of a step's activations to the backend's pool
//! when the step ends, whoever still holds the tensors (`docs/memory.md` §2).
//!
//! While a scope is open on a thread, every tensor that an operator allocates on that
//! thread with grad mode on (outputs, and the copies `contiguous` and `reshape` make) is
//! remembered by the innermost open scope. When the scope ends ([`ActivationScope::close`]
//! or drop), the storage of each remembered tensor that is still alive is released: its
//! buffer goes back to the backend (to the pool of a backend that has one), and every
//! later read or write of the tensor, of its views and of the copies saved for backward
//! fails with [`Error::Released`](crate::Error::Released) — never a read of reused memory.
//! Storage that was already freed is skipped.
//!
//! Not remembered: tensors made by the constructors (`zeros`, `from_vec`, `randn`, …),
//! which are the caller's; everything allocated under [`no_grad`](crate::no_grad)
//! (optimizer steps and other state updates); everything the engine allocates during
//! `backward` (its temporaries, freed as it goes, and the leaves' gradients, which are
//! never tied to a scope). A tensor to keep past the scope is detached from it with
//! [`ActivationScope::keep`] or [`Tensor::keep`].
//!
//! ```
//! use exactgrad_autograd::{ActivationScope, Error, Tensor};
//! use exactgrad_backends::ScalarRefBackend;
//!
//! let b = ScalarRefBackend;
//! let w = Tensor::from_vec(&b, vec![1.0, 2.0], [2]).unwrap().requires_grad().unwrap();
//! let (loss, twice) = {
//!     let scope = ActivationScope::new();
//!     let twice = w.mul_scalar(2.0).unwrap();
//!     let loss = twice.sum().unwrap();
//!     loss.backward().unwrap();
//!     scope.keep(&loss);
//!     (loss, twice)
//! }; // the scope ends: `twice` is released, `loss` was kept
//! assert_eq!(loss.item().unwrap(), 6.0);
//! assert!(matches!(twice.to_vec(), Err(Error::Released { .. })));
//! assert_eq!(w.grad().unwrap().to_vec().unwrap(), [2.0, 2.0]); // gradients stay
//! ```

use crate::grad_mode::is_grad_enabled;
use crate::tensor::{next_id, Tensor};
use exactgrad_core::Backend;
use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::sync::Weak;

/// Storage that a scope can release.
pub(crate) trait Release: Send + Sync {
    /// Releases the buffer if it still belongs to scope `scope`; returns the number of
    /// elements released (0 when it was kept, already released, or another scope's).
    fn release_from(&self, scope: u64) -> usize;
}

/// One open scope: its id and the storage it remembers.
struct Frame {
    id: u64,
    entries: Vec<Weak<dyn Release>>,
}

thread_local! {
    /// The open scopes of this thread, innermost last.
    static OPEN: RefCell<Vec<Frame>> = const { RefCell::new(Vec::new()) };
    /// Emptied lists of closed scopes, kept so that a scope per training step does not
    /// allocate its list again.
    static SPARE: RefCell<Vec<Vec<Weak<dyn Release>>>> = const { RefCell::new(Vec::new()) };
    /// Nesting depth of [`Unscoped`] guards: nothing is remembered while it is positive.
    static SUSPENDED: Cell<usize> = const { Cell::new(0) };
}

/// The scope (if any) that remembers a tensor allocated now on this thread, and adds
/// `cell` to it; returns the scope's id, or 0 when none remembers it.
pub(crate) fn remember(cell: Weak<dyn Release>) -> u64 {
    if SUSPENDED.with(Cell::get) > 0 || !is_grad_enabled() {
        return 0;
    }
    OPEN.with(|open| match open.borrow_mut().last_mut() {
        Some(frame) => {
            frame.entries.push(cell);
            frame.id
        }
        None => 0,
    })
}

/// Whether a scope would remember a tensor allocated now on this thread (so that the
/// caller can skip making the weak reference).
pub(crate) fn is_remembering() -> bool {
    SUSPENDED.with(Cell::get) == 0
        && is_grad_enabled()
        && OPEN.with(|open| !open.borrow().is_empty())
}

/// While alive, nothing allocated on this thread is remembered by a scope (the engine
/// holds one during `backward`).
pub(crate) struct Unscoped(());

impl Unscoped {
    pub(crate) fn new() -> Self {
        SUSPENDED.with(|s| s.set(s.get() + 1));
        Unscoped(())
    }
}

impl Drop for Unscoped {
    fn drop(&mut self) {
        SUSPENDED.with(|s| s.set(s.get() - 1));
    }
}

/// What a scope released when it ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScopeReport {
    /// Storage buffers released (alive and not kept at the end).
    pub released: usize,
    /// Their elements.
    pub elements: usize,
    /// Storage remembered in all (including those freed before the end or kept).
    pub remembered: usize,
}

/// A region of a thread whose activations return to the pool when it ends; see the
/// [module documentation](self). Scopes nest: a tensor belongs to the innermost open
/// scope. A scope belongs to the thread that opened it (it is not `Send`).
#[must_use = "the scope releases its tensors when dropped"]
#[derive(Debug)]
pub struct ActivationScope {
    id: u64,
    closed: bool,
    _thread: PhantomData<*const ()>,
}

impl Default for ActivationScope {
    fn default() -> Self {
        Self::new()
    }
}

impl ActivationScope {
    /// Opens a scope on this thread; it remembers what operators allocate until it ends.
    pub fn new() -> Self {
        let entries = SPARE.with(|s| s.borrow_mut().pop()).unwrap_or_default();
        let id = next_id();
        OPEN.with(|open| open.borrow_mut().push(Frame { id, entries }));
        Self {
            id,
            closed: false,
            _thread: PhantomData,
        }
    }

    /// Detaches `t`'s storage from every scope, so that it (and every view of it) stays
    /// usable after the scope ends; returns `t` for chaining.
    pub fn keep<'t, B: Backend>(&self, t: &'t Tensor<B>) -> &'t Tensor<B> {
        t.keep()
    }

    /// The number of storage buffers this scope has remembered so far.
    pub fn remembered(&self) -> usize {
        OPEN.with(|open| {
            open.borrow()
                .iter()
                .find(|f| f.id == self.id)
                .map_or(0, |f| f.entries.len())
        })
    }

    /// Ends the scope now and reports what it released (dropping the scope does the same
    /// without the report).
    pub fn close(mut self) -> ScopeReport {
        self.end()
    }

    fn end(&mut self) -> ScopeReport {
        if self.closed {
            return ScopeReport::default();
        }
        self.closed = true;
        let frame = OPEN.with(|open| {
            let mut open = open.borrow_mut();
            let at = open.iter().rposition(|f| f.id == self.id)?;
            Some(open.remove(at))
        });
        let Some(Frame { mut entries, .. }) = frame else {
            return ScopeReport::default();
        };
        let mut report = ScopeReport {
            remembered: entries.len(),
            ..ScopeReport::default()
        };
        // The buffers are dropped (returned to the pool) outside the thread-local borrows.
        for e in entries.drain(..) {
            if let Some(cell) = e.upgrade() {
                let n = cell.release_from(self.id);
                if n > 0 {
                    report.released += 1;
                    report.elements += n;
                }
            }
        }
        SPARE.with(|s| s.borrow_mut().push(entries));
        report
    }
}

impl Drop for ActivationScope {
    fn drop(&mut self) {
        self.end();
    }
}
