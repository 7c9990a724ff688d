//! The thread-local gradient-recording switch.

use std::cell::Cell;

thread_local! {
    static GRAD_ENABLED: Cell<bool> = const { Cell::new(true) };
}

/// Whether operators on this thread record backward information.
pub fn is_grad_enabled() -> bool {
    GRAD_ENABLED.with(Cell::get)
}

/// Restores the previous grad mode of this thread when dropped.
#[must_use = "grad mode is restored when the guard is dropped"]
#[derive(Debug)]
pub struct GradModeGuard {
    previous: bool,
}

impl Drop for GradModeGuard {
    fn drop(&mut self) {
        GRAD_ENABLED.with(|g| g.set(self.previous));
    }
}

/// Sets this thread's grad mode until the returned guard drops.
pub fn set_grad_enabled(enabled: bool) -> GradModeGuard {
    let previous = GRAD_ENABLED.with(|g| g.replace(enabled));
    GradModeGuard { previous }
}

/// Turns gradient recording off on this thread until the returned guard drops.
///
/// ```
/// # use exactgrad_autograd::{no_grad, is_grad_enabled};
/// {
///     let _guard = no_grad();
///     assert!(!is_grad_enabled());
/// }
/// assert!(is_grad_enabled());
/// ```
pub fn no_grad() -> GradModeGuard {
    set_grad_enabled(false)
}
