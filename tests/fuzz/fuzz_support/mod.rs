//! The harness of the property-based fuzz tests (`tests/fuzz_*.rs`): random values with
//! special floats, the views an operand reaches a call through, and the differential
//! check.
//!
//! A case is a call of the public API described by data ([`Case`]). [`check`] runs it,
//! forward and backward, on `ScalarRefBackend` and on `ExactBackend` on every ISA path
//! this CPU supports with 1 and 3 threads, each run on a worker thread under
//! `catch_unwind` and a time limit, and requires that no run panics or overruns and that
//! either every run fails or every run succeeds with the same bits (`docs/arithmetic.md`:
//! exact mode gives the bits of the scalar reference on every path and thread count).
//!
//! `EXACTGRAD_FUZZ_SCALE=n` multiplies every property's case count by `n` (a longer
//! local run); `EXACTGRAD_FUZZ_VERBOSE=1` prints each case and its reference result
//! (with `--nocapture`).
#![allow(dead_code)]

pub mod programs;

use exactgrad::prelude::*;
use exactgrad::Result;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use std::fmt::Debug;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{mpsc, OnceLock};
use std::time::{Duration, Instant};

/// The most elements a fuzz case computes; larger shapes only appear where the call must
/// fail before touching an element (a count that overflows, an allocation no machine can
/// satisfy) or where it only makes a view.
pub const SMALL: usize = 1 << 12;

/// Dimensions so large that any shape holding one (and no zero) has at least 2^56
/// elements: more bytes than a 57-bit address space, so an allocation of that many
/// `f32` fails on every machine whatever its overcommit policy, and beyond
/// `MAX_ELEMENTS` (2^61) for most.
pub const HUGE: [usize; 7] = [
    1 << 56,
    1 << 61,
    (1 << 61) + 1,
    1 << 62,
    isize::MAX as usize,
    (1 << 63) + 1,
    usize::MAX,
];

/// How long one case (every backend, forward and backward) may take. A correct case
/// takes milliseconds; a loop that runs over a huge count overruns this by far.
pub const CASE_LIMIT: Duration = Duration::from_secs(20);

/// The number of cases of a property: `n` times the `EXACTGRAD_FUZZ_SCALE` environment
/// variable (default 1), so that a longer local run needs no code change.
pub fn cases(n: u32) -> u32 {
    let scale = std::env::var("EXACTGRAD_FUZZ_SCALE")
        .ok()
        .and_then(|s| s.parse::<u32>().ok())
        .unwrap_or(1)
        .max(1);
    n.saturating_mul(scale)
}

/// The proptest configuration of a fuzz property with `n` cases: no persistence file
/// (a failure prints its minimal case), and a bounded shrink so that a case that hangs
/// does not keep the suite busy while it shrinks.
pub fn config(n: u32) -> ProptestConfig {
    ProptestConfig {
        cases: cases(n),
        failure_persistence: None,
        max_shrink_iters: 64,
        max_shrink_time: 60_000,
        ..ProptestConfig::default()
    }
}

// ----- values ---------------------------------------------------------------------------

/// What an operand holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fill {
    /// Uniform in [−3, 3).
    Normal,
    /// Ordinary values with one in four special: ±0, subnormals, ±∞, NaN, ±MAX, ±MIN_POSITIVE.
    Special,
    /// Random bit patterns (NaNs with any payload, infinities, subnormals, huge values).
    Bits,
}

/// Any fill.
pub fn fill() -> impl Strategy<Value = Fill> {
    prop_oneof![
        2 => Just(Fill::Normal),
        2 => Just(Fill::Special),
        1 => Just(Fill::Bits)
    ]
}

/// The special values of [`Fill::Special`].
pub const SPECIALS: [f32; 14] = [
    0.0,
    -0.0,
    1e-40,
    -3e-39,
    f32::MIN_POSITIVE,
    -f32::MIN_POSITIVE,
    f32::INFINITY,
    f32::NEG_INFINITY,
    f32::NAN,
    f32::MAX,
    f32::MIN,
    1.0,
    -1.0,
    88.7,
];

/// `n` values of kind `fill` from a seed.
pub fn values(n: usize, seed: u64, fill: Fill) -> Vec<f32> {
    let mut r = Philox::new(seed);
    (0..n)
        .map(|_| match fill {
            Fill::Normal => r.uniform(-3.0, 3.0),
            Fill::Special => {
                if r.below(4) == 0 {
                    SPECIALS[r.below(SPECIALS.len() as u32) as usize]
                } else {
                    r.uniform(-3.0, 3.0)
                }
            }
            Fill::Bits => f32::from_bits(r.next_u64() as u32),
        })
        .collect()
}

// ----- operands -------------------------------------------------------------------------

/// How an operand reaches the call: the leaf itself or a view of a larger or smaller leaf.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    /// The leaf.
    Plain,
    /// A leaf with the last two dimensions swapped, transposed back.
    Transposed,
    /// Every second element of a leaf twice as long in the last dimension.
    Strided,
    /// Rows 1.. of a leaf with one more row in the first dimension (a non-zero offset).
    Offset,
    /// A leaf with size 1 in the first dimension, expanded (stride 0).
    Expanded,
    /// A leaf with the dimensions reversed, permuted back.
    Reversed,
}

/// Any view.
pub fn view() -> impl Strategy<Value = View> {
    prop_oneof![
        3 => Just(View::Plain),
        1 => Just(View::Transposed),
        1 => Just(View::Strided),
        1 => Just(View::Offset),
        1 => Just(View::Expanded),
        1 => Just(View::Reversed),
    ]
}

/// An operand: its shape as the call sees it, how it gets there, and its values.
#[derive(Clone, Debug)]
pub struct Operand {
    /// The shape the call sees.
    pub shape: Vec<usize>,
    /// How the call sees it.
    pub view: View,
    /// What it holds.
    pub fill: Fill,
    /// The values' seed.
    pub seed: u64,
}

/// An operand of `shape` with any view, fill and seed.
pub fn operand_of(shape: impl Strategy<Value = Vec<usize>>) -> impl Strategy<Value = Operand> {
    (shape, view(), fill(), any::<u64>()).prop_map(|(shape, view, fill, seed)| Operand {
        shape,
        view,
        fill,
        seed,
    })
}

/// A small dimension (0 to 5, mostly positive).
pub fn small_dim() -> impl Strategy<Value = usize> {
    prop_oneof![1 => Just(0usize), 8 => 1usize..=5]
}

/// A small shape of rank `lo..=hi`.
pub fn small_shape(lo: usize, hi: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(small_dim(), lo..=hi)
}

/// A size argument: mostly small, sometimes 0 or one of [`HUGE`] (never a size between
/// [`SMALL`] and 2^56, which a machine might legitimately allocate and compute).
pub fn size_arg() -> impl Strategy<Value = usize> + Clone {
    prop_oneof![
        6 => 1usize..=4,
        1 => Just(0usize),
        2 => prop::sample::select(HUGE.to_vec()),
    ]
}

/// A dimension index: in range, negative, or far out of range.
pub fn dim_arg() -> impl Strategy<Value = isize> {
    prop_oneof![
        6 => -4isize..=4,
        1 => prop::sample::select(vec![isize::MIN, isize::MIN + 1, isize::MAX, -5, 5, 64]),
    ]
}

impl Operand {
    /// The leaf's shape and how to get the operand from it.
    fn leaf_shape(&self) -> (Vec<usize>, View) {
        let mut s = self.shape.clone();
        let r = s.len();
        let view = match self.view {
            View::Transposed | View::Reversed if r < 2 => View::Plain,
            View::Strided | View::Offset | View::Expanded if r < 1 => View::Plain,
            v => v,
        };
        match view {
            View::Plain => {}
            View::Transposed => s.swap(r - 2, r - 1),
            View::Strided => s[r - 1] = s[r - 1].saturating_mul(2),
            View::Offset => s[0] = s[0].saturating_add(1),
            View::Expanded => s[0] = 1,
            View::Reversed => s.reverse(),
        }
        (s, view)
    }

    /// The leaf (requiring a gradient when `grad`) and the operand made from it.
    pub fn make<B: Backend>(&self, b: &B, grad: bool) -> Result<(Tensor<B>, Tensor<B>)> {
        let (shape, view) = self.leaf_shape();
        // The operand has at most `SMALL` elements; a strided or offset view reaches it
        // from a leaf up to twice as large (a rank-5 shape of 5s, strided: 6250).
        let n: usize = shape.iter().product();
        assert!(
            n <= 2 * SMALL,
            "operand strategies make small leaves, got {shape:?}"
        );
        let mut leaf = Tensor::from_vec(b, values(n, self.seed, self.fill), shape)?;
        if grad {
            leaf = leaf.requires_grad()?;
        }
        let r = self.shape.len();
        let x = match view {
            View::Plain => leaf.clone(),
            View::Transposed => leaf.transpose(-1, -2)?,
            View::Strided => leaf.slice(-1, 0, (self.shape[r - 1] * 2) as isize, 2)?,
            View::Offset => leaf.narrow(0, 1, self.shape[0])?,
            View::Expanded => leaf.expand(&self.shape)?,
            View::Reversed => {
                let p: Vec<isize> = (0..r as isize).rev().collect();
                leaf.permute(&p)?
            }
        };
        Ok((leaf, x))
    }
}

// ----- the differential check -----------------------------------------------------------

/// What a call gives: the tensors to compare bit for bit (outputs, then in-place
/// changed state), the outputs to differentiate and the leaves whose gradients to
/// compare.
pub struct Outcome<B: Backend> {
    /// Outputs, compared and (when they require a gradient) differentiated.
    pub outputs: Vec<Tensor<B>>,
    /// Further tensors compared after the call (running statistics, in-place targets).
    pub state: Vec<Tensor<B>>,
    /// Leaves whose gradients are compared after backward.
    pub leaves: Vec<Tensor<B>>,
}

impl<B: Backend> Outcome<B> {
    /// One output and the leaves.
    pub fn one(out: Tensor<B>, leaves: Vec<Tensor<B>>) -> Self {
        Self {
            outputs: vec![out],
            state: Vec::new(),
            leaves,
        }
    }
}

/// The result of a case: the errors of the autograd and nn crates both convert.
pub type CaseResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// A call of the public API, described by data, runnable on any backend.
pub trait Case: Debug + Clone + Send + 'static {
    /// Makes the operands on `b` and performs the call.
    fn call<B: Backend>(&self, b: &B) -> CaseResult<Outcome<B>>;
}

/// What one run gave, in bits: the forward result, then the backward result. Two runs
/// agree when both fail or both give the same shapes and bits, at each stage (the
/// messages of errors may differ).
#[derive(Debug)]
pub struct Bits {
    forward: std::result::Result<Vec<Shaped>, String>,
    backward: Option<std::result::Result<Vec<Option<Vec<u32>>>, String>>,
}

/// A tensor's shape and the bits of its elements.
type Shaped = (Vec<usize>, Vec<u32>);

impl PartialEq for Bits {
    fn eq(&self, other: &Self) -> bool {
        fn same<T: PartialEq>(
            a: &std::result::Result<T, String>,
            b: &std::result::Result<T, String>,
        ) -> bool {
            match (a, b) {
                (Ok(x), Ok(y)) => x == y,
                (Err(_), Err(_)) => true,
                _ => false,
            }
        }
        same(&self.forward, &other.forward)
            && match (&self.backward, &other.backward) {
                (None, None) => true,
                (Some(a), Some(b)) => same(a, b),
                _ => false,
            }
    }
}

fn tensor_bits<B: Backend>(t: &Tensor<B>) -> Result<Shaped> {
    // A legitimately huge view (an expansion) is compared by its shape only.
    if t.numel() > SMALL {
        return Ok((t.dims().to_vec(), Vec::new()));
    }
    Ok((
        t.dims().to_vec(),
        t.to_vec()?.iter().map(|v| v.to_bits()).collect(),
    ))
}

fn run_on<B: Backend, C: Case>(case: &C, b: &B) -> Bits {
    let outcome = match case.call(b) {
        Ok(o) => o,
        Err(e) => {
            let msg = e.to_string();
            return Bits {
                forward: Err(msg),
                backward: None,
            };
        }
    };
    let forward: Result<Vec<_>> = outcome
        .outputs
        .iter()
        .chain(&outcome.state)
        .map(tensor_bits)
        .collect();
    let forward = match forward {
        Ok(f) => f,
        Err(e) => {
            return Bits {
                forward: Err(e.to_string()),
                backward: None,
            }
        }
    };
    let diff: Vec<&Tensor<B>> = outcome
        .outputs
        .iter()
        .filter(|t| t.is_requires_grad() && t.numel() <= SMALL)
        .collect();
    let backward = if diff.is_empty() {
        None
    } else {
        let r = (|| -> Result<Vec<Option<Vec<u32>>>> {
            let last = diff.len() - 1;
            for (i, y) in diff.iter().enumerate() {
                let seed = Tensor::from_vec(
                    b,
                    values(y.numel(), 77 + i as u64, Fill::Normal),
                    y.shape().clone(),
                )?;
                y.backward_with(
                    BackwardOptions::default()
                        .gradient(&seed)
                        .retain_graph(i != last),
                )?;
            }
            outcome
                .leaves
                .iter()
                .map(|l| {
                    l.grad()
                        .map(|g| Ok(g.to_vec()?.iter().map(|v| v.to_bits()).collect()))
                        .transpose()
                })
                .collect()
        })();
        Some(r.map_err(|e| e.to_string()))
    };
    Bits {
        forward: Ok(forward),
        backward,
    }
}

/// The backends every case runs on after `ScalarRefBackend`: `ExactBackend` on each
/// supported ISA path with 1 and 3 threads (made once; their thread pools are reused).
pub fn exact_backends() -> &'static [ExactBackend] {
    static BACKENDS: OnceLock<Vec<ExactBackend>> = OnceLock::new();
    BACKENDS.get_or_init(|| {
        let mut v = Vec::new();
        for isa in Isa::ALL {
            for threads in [1, 3] {
                if let Ok(b) = ExactBackend::with_isa(isa, threads) {
                    v.push(b);
                }
            }
        }
        v
    })
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(non-string panic)".into())
}

/// Runs `f` on a worker thread under `catch_unwind`, failing the case when it panics or
/// does not return within `limit`.
pub fn bounded<R: Send + 'static>(
    what: &str,
    limit: Duration,
    f: impl FnOnce() -> R + Send + 'static,
) -> std::result::Result<R, TestCaseError> {
    let (tx, rx) = mpsc::channel();
    let start = Instant::now();
    std::thread::Builder::new()
        .name("fuzz-case".into())
        .spawn(move || {
            let r = catch_unwind(AssertUnwindSafe(f)).map_err(panic_message);
            let _ = tx.send(r);
        })
        .map_err(|e| TestCaseError::fail(format!("{what}: cannot start a worker: {e}")))?;
    match rx.recv_timeout(limit) {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(p)) => Err(TestCaseError::fail(format!("{what}: panicked: {p}"))),
        Err(_) => Err(TestCaseError::fail(format!(
            "{what}: did not return within {limit:?} (ran {:?})",
            start.elapsed()
        ))),
    }
}

/// The differential check of one case (see the module documentation).
pub fn check<C: Case>(case: C) -> std::result::Result<(), TestCaseError> {
    let what = format!("{case:?}");
    let mismatch = bounded(&what, CASE_LIMIT, move || {
        let reference = run_on(&case, &ScalarRefBackend);
        if std::env::var_os("EXACTGRAD_FUZZ_VERBOSE").is_some() {
            eprintln!("{case:?}\n  -> {reference:?}");
        }
        for b in exact_backends() {
            let got = run_on(&case, b);
            if got != reference {
                return Some(format!(
                    "{b:?} differs from ScalarRef:\n  scalar-ref: {reference:?}\n  {b:?}: {got:?}"
                ));
            }
        }
        None
    })?;
    match mismatch {
        None => Ok(()),
        Some(m) => Err(TestCaseError::fail(format!("{what}: {m}"))),
    }
}

/// Like [`check`], for a call that must fail: every backend must return an error (no
/// panic, within the time limit).
pub fn check_err<C: Case>(case: C) -> std::result::Result<(), TestCaseError> {
    let what = format!("{case:?}");
    let accepted = bounded(&what, CASE_LIMIT, move || {
        let mut accepted = Vec::new();
        if case.call(&ScalarRefBackend).is_ok() {
            accepted.push("scalar-ref".to_string());
        }
        for b in exact_backends() {
            if case.call(b).is_ok() {
                accepted.push(format!("{b:?}"));
            }
        }
        accepted
    })?;
    if accepted.is_empty() {
        Ok(())
    } else {
        Err(TestCaseError::fail(format!(
            "{what}: must fail, accepted by {accepted:?}"
        )))
    }
}
