//! Heap and pool use of training steps, measured by a counting global allocator that
//! serves this whole test binary: `memory_steps` (the reference models' scoped steps)
//! and `memory_threads` (a scoped step at one and two threads). The tests take turns
//! ([`alone`]), so neither counts the other's allocations.

use stats_alloc::{StatsAlloc, INSTRUMENTED_SYSTEM};
use std::alloc::System;
use std::sync::{Mutex, MutexGuard};

mod memory_steps;
mod memory_threads;

/// The allocator that counts every heap allocation of this process.
#[global_allocator]
pub static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Held by each test for its whole run: the counts are process-wide.
pub fn alone() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}
