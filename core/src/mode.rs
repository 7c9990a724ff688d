//! The arithmetic contract a backend follows.

/// Which arithmetic contract a backend's kernels follow (see `docs/arithmetic.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ComputeMode {
    /// Fused multiply-add in products and polynomials; deterministic for a given ISA path
    /// and thread count, but not across paths.
    Fast,
    /// Separate multiply and add in a canonical order; the same bits on every CPU, ISA path
    /// and thread count. NaN results are written as `0x7FC00000`.
    Exact,
}

impl core::fmt::Display for ComputeMode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ComputeMode::Fast => f.write_str("fast"),
            ComputeMode::Exact => f.write_str("exact"),
        }
    }
}
