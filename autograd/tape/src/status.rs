//! The sticky status of a tape.

/// What went wrong first on a tape since the status was last cleared.
///
/// The first error is kept ("sticky") until [`Tape::clear_status`](crate::Tape::clear_status),
/// [`Tape::reset`](crate::Tape::reset), [`Tape::begin_graph`](crate::Tape::begin_graph) or
/// [`Tape::rewind_graph`](crate::Tape::rewind_graph); later errors do not overwrite it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Status {
    /// No error.
    #[default]
    Ok,
    /// A gradient array or an operation record did not fit in the arena (`out_of_memory`).
    OutOfMemory,
    /// Views, lengths, shapes or the graph do not fit the operation (`tape_mismatch`).
    TapeMismatch,
    /// The backward root or seed is invalid, or a rewind was asked for without a mark
    /// (`invalid_output`).
    InvalidOutput,
    /// An operation's operator type was not registered on the tape
    /// (`operator_not_registered`).
    OperatorNotRegistered,
    /// No registry slot was left for another operator type (`operator_registry_full`).
    OperatorRegistryFull,
}

impl Status {
    /// Whether this is [`Status::Ok`].
    pub const fn is_ok(self) -> bool {
        matches!(self, Status::Ok)
    }

    /// The name the specification uses (`"out_of_memory"`, …; `"ok"`).
    pub const fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::OutOfMemory => "out_of_memory",
            Status::TapeMismatch => "tape_mismatch",
            Status::InvalidOutput => "invalid_output",
            Status::OperatorNotRegistered => "operator_not_registered",
            Status::OperatorRegistryFull => "operator_registry_full",
        }
    }
}

impl core::fmt::Display for Status {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}
