//! Helpers shared by the gradient-check test files: seeded inputs, the check itself, the
//! views an input reaches an operator through, bit comparisons and error expectations.
#![allow(dead_code)]

use exactgrad::autograd::Result;
use exactgrad::prelude::*;
use proptest::prelude::*;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Tensors of the scalar reference backend.
pub type T = Tensor<ScalarRefBackend>;
/// The scalar reference backend.
pub const B: ScalarRefBackend = ScalarRefBackend;

/// `n` values uniform in [lo, hi) from a seed.
pub fn values(n: usize, seed: u64, lo: f32, hi: f32) -> Vec<f32> {
    let mut r = Philox::new(seed);
    (0..n).map(|_| r.uniform(lo, hi)).collect()
}

/// A tensor of values uniform in [lo, hi) from a seed.
pub fn uniform(shape: &[usize], seed: u64, lo: f32, hi: f32) -> T {
    T::from_vec(&B, values(shape.iter().product(), seed, lo, hi), shape).unwrap()
}

/// Distinct values `step·(π(i) − n/2)` for a seeded permutation π: no two elements are
/// closer than `step`, so a ±1e-2 perturbation never changes an ordering (max pooling)
/// and every group has a healthy variance (normalisation).
pub fn permuted_grid(shape: &[usize], seed: u64, step: f32) -> T {
    let n: usize = shape.iter().product();
    let mut perm: Vec<usize> = (0..n).collect();
    let mut r = Philox::new(seed);
    for i in (1..n).rev() {
        perm.swap(i, r.below(i as u32 + 1) as usize);
    }
    let v = perm
        .iter()
        .map(|&p| step * (p as f32 - n as f32 / 2.0))
        .collect();
    T::from_vec(&B, v, shape).unwrap()
}

/// The bit patterns of `v`, for comparisons that must be exact.
pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// `f` must return an `Err` (not panic) whose message mentions every needle (the
/// operator and the argument or shapes at fault).
#[track_caller]
pub fn expect_err<R: std::fmt::Debug>(what: &str, f: impl FnOnce() -> Result<R>, needles: &[&str]) {
    let r = catch_unwind(AssertUnwindSafe(f))
        .unwrap_or_else(|_| panic!("{what}: panicked instead of returning Err"));
    match r {
        Ok(v) => panic!("{what}: expected an error, got {v:?}"),
        Err(e) => {
            let msg = e.to_string();
            for n in needles {
                assert!(
                    msg.contains(n),
                    "{what}: the message `{msg}` does not mention `{n}`"
                );
            }
        }
    }
}

/// Runs the default gradient check and panics with its report on failure.
pub fn check(name: &str, inputs: &[T], f: impl Fn(&[T]) -> Result<T>) {
    GradCheck::default()
        .run(name, inputs, f)
        .unwrap()
        .assert_passed();
}

/// How an input reaches the operator.
#[derive(Clone, Copy, Debug)]
pub enum View {
    /// The leaf itself.
    Plain,
    /// A leaf with the last two dimensions swapped, transposed back.
    Transposed,
    /// Every second element of a leaf twice as wide.
    Strided,
    /// A leaf with the first two dimensions swapped, permuted back.
    Permuted,
}

/// Any of the views.
pub fn view_strategy() -> impl Strategy<Value = View> {
    prop_oneof![
        Just(View::Plain),
        Just(View::Transposed),
        Just(View::Strided),
        Just(View::Permuted)
    ]
}

/// The view actually used at `rank`: those that need two dimensions fall back to
/// `Plain` on rank-1 shapes.
pub fn effective(view: View, rank: usize) -> View {
    match view {
        View::Transposed | View::Permuted if rank < 2 => View::Plain,
        v => v,
    }
}

/// The leaf shape whose view under `view` has `shape`.
pub fn leaf_shape(view: View, shape: &[usize]) -> Vec<usize> {
    let mut s = shape.to_vec();
    let r = s.len();
    match effective(view, r) {
        View::Plain => {}
        View::Transposed => s.swap(r - 2, r - 1),
        View::Strided => s[r - 1] *= 2,
        View::Permuted => s.swap(0, 1),
    }
    s
}

/// The view of a leaf made with [`leaf_shape`].
pub fn apply_view(view: View, x: &T) -> Result<T> {
    match effective(view, x.rank()) {
        View::Plain => Ok(x.clone()),
        View::Transposed => x.transpose(-1, -2),
        View::Strided => x.slice(-1, 0, x.dims()[x.rank() - 1] as isize, 2),
        View::Permuted => x.transpose(0, 1),
    }
}
