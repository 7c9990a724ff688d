//! The training example, run as a test: it must reach its stated accuracy within its
//! arena, and the whole training loop must not touch the heap (a counting global allocator
//! sees every allocation of this test binary and counts those made on the thread that
//! trains while it trains; the test harness's own thread may allocate at any moment).
#![deny(clippy::undocumented_unsafe_blocks)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

#[path = "../examples/tape_train.rs"]
#[allow(dead_code)]
mod tape_train;

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Whether this thread's allocations are counted (a `const` thread-local without a
    /// destructor: reading it never allocates).
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

/// Counts one allocation if the current thread is the one training.
fn count() {
    if COUNTING.try_with(Cell::get).unwrap_or(false) {
        ALLOCATIONS.fetch_add(1, Ordering::SeqCst);
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged, so
// `Counting` keeps the contract of `GlobalAlloc` exactly as `System` does; counting is a
// thread-local read and an atomic increment, which neither allocate nor unwind.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract for `layout`.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by this allocator, hence by `System`, with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller upholds `GlobalAlloc::alloc_zeroed`'s contract for `layout`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: `ptr` was allocated by `System` with `layout`, and the caller upholds
        // `GlobalAlloc::realloc`'s contract for `new_size`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
#[cfg_attr(
    miri,
    ignore = "200 epochs of training take well over half an hour under Miri"
)]
fn training_reaches_its_accuracy_in_its_arena_without_heap_allocations() {
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    COUNTING.with(|c| c.set(true));
    let report = tape_train::train();
    COUNTING.with(|c| c.set(false));
    let after = ALLOCATIONS.load(Ordering::SeqCst);
    assert_eq!(
        after - before,
        0,
        "heap allocations during training: {}",
        after - before
    );
    assert!(report.all_good, "a step left the tape's status not ok");
    assert!(
        report.train_accuracy >= 0.95,
        "training accuracy {}",
        report.train_accuracy
    );
    assert!(
        report.test_accuracy >= 0.95,
        "held-out accuracy {}",
        report.test_accuracy
    );
    assert!(report.peak_bytes <= tape_train::ARENA_BYTES);
    #[cfg(target_pointer_width = "64")]
    assert_eq!(
        report.peak_bytes,
        tape_train::ARENA_BYTES,
        "the arena is sized to the peak"
    );
    println!("{report:?}");
}
