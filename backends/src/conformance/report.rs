//! What a run reports: the [`Mismatch`] of a failing kernel (kernel, backend, case and
//! first differing element with both values and their bits) and the [`Report`] of a
//! passing run (cases per kernel).

use super::cases::{Case, Kernel};
use std::fmt;
use std::string::{String, ToString};
use std::vec::Vec;

/// A kernel whose output differs from the reference's.
#[derive(Clone, Debug, PartialEq)]
pub struct Mismatch {
    /// The kernel and its operation (`unary(Exp)`, `softmax(log)`, …).
    pub kernel: String,
    /// The name of the backend under test.
    pub backend: String,
    /// The name of the reference backend.
    pub reference: String,
    /// Shapes and layouts of the inputs.
    pub shape: String,
    /// The whole case (to reproduce it with [`check_case`](super::check_case)).
    pub case: Case,
    /// Index of the first differing output element (row-major).
    pub index: usize,
    /// The backend's value there (`None` if its output is too short).
    pub got: Option<f32>,
    /// The reference's value there (`None` if its output is too short).
    pub want: Option<f32>,
    /// The error a kernel returned instead of an output (on a valid case), if any.
    pub error: Option<String>,
}

fn show(v: Option<f32>) -> String {
    match v {
        Some(v) => format!("{v:e} (0x{:08X})", v.to_bits()),
        None => "nothing (output too short)".to_string(),
    }
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(e) = &self.error {
            return write!(
                f,
                "kernel {} on backend {} returned an error on a valid case (shape {}): {e}; case {:?}",
                self.kernel, self.backend, self.shape, self.case
            );
        }
        write!(
            f,
            "kernel {} on backend {} differs from {}: shape {}; first difference at element {}: got {}, want {}; case {:?}",
            self.kernel,
            self.backend,
            self.reference,
            self.shape,
            self.index,
            show(self.got),
            show(self.want),
            self.case
        )
    }
}

impl std::error::Error for Mismatch {}

/// The number of cases each kernel ran.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Cases per kernel, in the order of [`Kernel::ALL`].
    pub cases: Vec<(Kernel, usize)>,
}

impl Report {
    /// Total number of cases.
    pub fn total(&self) -> usize {
        self.cases.iter().map(|c| c.1).sum()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} cases:", self.total())?;
        for (k, n) in &self.cases {
            write!(f, " {k} {n}")?;
        }
        Ok(())
    }
}
