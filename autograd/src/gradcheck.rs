//! The gradient check: analytic gradients against central differences, in float32
//! ([`GradCheck`]) or in float64 through a reference of the function
//! ([`ReferenceGradCheck`]).
//!
//! For a function `f` of some input tensors, the check builds `L = Σ W·f(x)` with a fixed
//! pseudo-random weight tensor `W` (uniform in [−1, 1), from a seeded Philox stream),
//! summed in f64. The analytic gradient is `backward` of `f(x)` seeded with `W`; the
//! numeric one perturbs each input element by ±`eps` in f32 and divides the change of `L`
//! by the actual distance between the two perturbed f32 values. An element passes when
//! `|analytic − numeric| ≤ atol + rtol·|numeric|`. Setting the environment variable
//! `EXACTGRAD_GRADCHECK_LOG` to a file path appends one line per checked input with its
//! worst errors.
//!
//! # What each check can and cannot detect
//!
//! Tensors are f32, so [`GradCheck`]'s differences are too: with `eps = 1e-2` the
//! numeric gradient carries a truncation error of order `eps²·f‴` and a rounding error of
//! order `ulp(f)/eps` (about 1e-5 relative), hence its tolerances (`atol = 1e-3`,
//! `rtol = 1e-2`). It detects a backward rule that is wrong by more than about a percent:
//! a wrong formula or sign, a missing or extra term of that size, gradients sent to the
//! wrong elements (indices, transposes, broadcasting), a rule that ignores a strided view.
//! It **cannot** detect an error below that: a gradient scaled by 1.003, a term of
//! relative size 1e-3, or anything at the level of rounding. PyTorch's `gradcheck` runs
//! in f64 with `eps = 1e-6` and tolerances near 1e-5, which this check cannot match
//! because the operators have no f64 kernels.
//!
//! [`ReferenceGradCheck`] is the stronger check the design allows: the caller gives an
//! f64 reference of the function on the host (the formula the operator implements),
//! the check first verifies that the reference agrees with `f`'s forward values, then
//! compares `f`'s analytic f32 gradient with central differences of the reference in
//! f64 (`eps = 1e-6` relative), with tolerances at the level of f32 rounding
//! (`atol = 1e-5`, `rtol = 1e-4`). It detects errors of a backward rule down to about
//! 1e-4 relative, a hundred times smaller. It cannot detect an error that the reference
//! shares (the reference is the caller's formula) or one below f32 rounding, and it
//! needs inputs away from kinks (ReLU at 0, ties of a max). Neither check says anything
//! about bits: that every backend and thread count gives the same bits, and PyTorch's,
//! is what the pinned hashes and the PyTorch oracle tests check (`docs/arithmetic.md`).

use crate::engine::BackwardOptions;
use crate::error::Result;
use crate::grad_mode::no_grad;
use crate::tensor::Tensor;
use exactgrad_core::backend::{try_collect, try_vec_filled};
use exactgrad_core::{Backend, Philox};
use std::fmt;

/// Settings of a gradient check in f32 (see the [module documentation](self) for what it
/// can and cannot detect; [`ReferenceGradCheck`] is the stronger check).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GradCheck {
    /// Perturbation added to and subtracted from each input element.
    pub eps: f32,
    /// Absolute tolerance.
    pub atol: f64,
    /// Tolerance relative to the numeric gradient's magnitude.
    pub rtol: f64,
    /// Seed of the weight tensor `W`.
    pub seed: u64,
}

impl Default for GradCheck {
    fn default() -> Self {
        Self {
            eps: 1e-2,
            atol: 1e-3,
            rtol: 1e-2,
            seed: 0x5eed,
        }
    }
}

/// The worst disagreement found for one input.
#[derive(Clone, Debug, PartialEq)]
pub struct InputReport {
    /// Position of the input in the list given to the check.
    pub input: usize,
    /// Largest `|analytic − numeric|` over the input's elements.
    pub worst_abs: f64,
    /// Largest `|analytic − numeric| / max(|analytic|, |numeric|)` (0 where both are 0).
    pub worst_rel: f64,
    /// Flat index of the element with the largest excess over the tolerance.
    pub worst_index: usize,
    /// Analytic gradient at that element.
    pub analytic: f64,
    /// Numeric gradient at that element.
    pub numeric: f64,
    /// Whether every element passed.
    pub passed: bool,
}

/// The outcome of [`GradCheck::run`]: one report per input.
#[derive(Clone, Debug, PartialEq)]
pub struct GradCheckReport {
    /// Name given to the check (for messages and the log).
    pub name: String,
    /// Per-input results, in input order.
    pub inputs: Vec<InputReport>,
}

impl GradCheckReport {
    /// Whether every element of every input passed.
    pub fn passed(&self) -> bool {
        self.inputs.iter().all(|r| r.passed)
    }

    /// Panics with the report if any element failed (for tests).
    #[track_caller]
    pub fn assert_passed(&self) {
        assert!(self.passed(), "gradient check failed:\n{self}");
    }
}

impl fmt::Display for GradCheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for r in &self.inputs {
            writeln!(
                f,
                "{} input {}: {} worst abs {:.3e} rel {:.3e} at [{}] analytic {:.6e} numeric {:.6e}",
                self.name,
                r.input,
                if r.passed { "ok" } else { "FAILED" },
                r.worst_abs,
                r.worst_rel,
                r.worst_index,
                r.analytic,
                r.numeric
            )?;
        }
        Ok(())
    }
}

fn weighted_sum(y: &[f32], w: &[f32]) -> f64 {
    y.iter()
        .zip(w)
        .map(|(&a, &b)| f64::from(a) * f64::from(b))
        .sum()
}

impl GradCheck {
    /// Checks the gradients of `f` with respect to every tensor in `inputs` (their values
    /// are copied into fresh leaves; anything `f` captures is treated as a constant).
    pub fn run<B, F>(&self, name: &str, inputs: &[Tensor<B>], f: F) -> Result<GradCheckReport>
    where
        B: Backend,
        F: Fn(&[Tensor<B>]) -> Result<Tensor<B>>,
    {
        let values: Vec<Vec<f32>> = inputs.iter().map(Tensor::to_vec).collect::<Result<_>>()?;
        let fresh = |vals: &[Vec<f32>], grad: bool| -> Result<Vec<Tensor<B>>> {
            vals.iter()
                .zip(inputs)
                .map(|(v, t)| {
                    let x = Tensor::from_vec(t.backend(), v.clone(), t.shape().clone())?;
                    if grad {
                        x.requires_grad()
                    } else {
                        Ok(x)
                    }
                })
                .collect()
        };
        // Analytic gradients.
        let leaves = fresh(&values, true)?;
        let y = f(&leaves)?;
        let mut rng = Philox::new(self.seed);
        // Fallible: `f` may return a broadcast view of any size.
        let w = try_collect("gradcheck", (0..y.numel()).map(|_| rng.uniform(-1.0, 1.0)))?;
        let w_t = Tensor::from_vec(y.backend(), w.clone(), y.shape().clone())?;
        if y.is_requires_grad() {
            y.backward_with(BackwardOptions::default().gradient(&w_t))?;
        }
        let analytic: Vec<Vec<f32>> = leaves
            .iter()
            .map(|l| match l.grad() {
                Some(g) => g.to_vec(),
                None => Ok(try_vec_filled("gradcheck", l.numel(), 0.0)?),
            })
            .collect::<Result<_>>()?;
        // Numeric gradients.
        let _guard = no_grad();
        let mut reports = Vec::with_capacity(inputs.len());
        for (i, vals) in values.iter().enumerate() {
            let mut rep = InputReport {
                input: i,
                worst_abs: 0.0,
                worst_rel: 0.0,
                worst_index: 0,
                analytic: 0.0,
                numeric: 0.0,
                passed: true,
            };
            let mut worst_excess = f64::NEG_INFINITY;
            for j in 0..vals.len() {
                let mut pert = values.clone();
                let x0 = vals[j];
                let (xp, xm) = (x0 + self.eps, x0 - self.eps);
                pert[i][j] = xp;
                let lp = weighted_sum(&f(&fresh(&pert, false)?)?.to_vec()?, &w);
                pert[i][j] = xm;
                let lm = weighted_sum(&f(&fresh(&pert, false)?)?.to_vec()?, &w);
                let numeric = (lp - lm) / (f64::from(xp) - f64::from(xm));
                let a = f64::from(analytic[i][j]);
                let err = (a - numeric).abs();
                let scale = a.abs().max(numeric.abs());
                let rel = if scale > 0.0 { err / scale } else { 0.0 };
                let tol = self.atol + self.rtol * numeric.abs();
                let ok = err <= tol || (a.is_nan() && numeric.is_nan());
                rep.passed &= ok;
                rep.worst_abs = rep.worst_abs.max(err);
                rep.worst_rel = rep.worst_rel.max(rel);
                let excess = if err.is_nan() {
                    f64::INFINITY
                } else {
                    err - tol
                };
                if excess > worst_excess {
                    worst_excess = excess;
                    rep.worst_index = j;
                    rep.analytic = a;
                    rep.numeric = numeric;
                }
            }
            reports.push(rep);
        }
        let report = GradCheckReport {
            name: name.to_string(),
            inputs: reports,
        };
        if let Ok(path) = std::env::var("EXACTGRAD_GRADCHECK_LOG") {
            use std::io::Write;
            if let Ok(mut file) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
            {
                let _ = write!(file, "{report}");
            }
        }
        Ok(report)
    }
}

/// Settings of a gradient check against an f64 reference of the function: central
/// differences computed on the host in f64 (see the [module documentation](self)).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReferenceGradCheck {
    /// Perturbation, relative to `max(1, |x|)`, added to and subtracted from each input
    /// element (in f64).
    pub eps: f64,
    /// Absolute tolerance (of the forward values and of the gradients).
    pub atol: f64,
    /// Tolerance relative to the reference's magnitude.
    pub rtol: f64,
    /// Seed of the weight tensor `W`.
    pub seed: u64,
}

impl Default for ReferenceGradCheck {
    fn default() -> Self {
        Self {
            eps: 1e-6,
            atol: 1e-5,
            rtol: 1e-4,
            seed: 0x5eed,
        }
    }
}

/// The outcome of [`ReferenceGradCheck::run`]: the agreement of the forward values with
/// the reference, and one report per input.
#[derive(Clone, Debug, PartialEq)]
pub struct ReferenceReport {
    /// Name given to the check.
    pub name: String,
    /// Largest `|f(x) − reference(x)|` over the output's elements.
    pub forward_worst_abs: f64,
    /// Whether every forward value is within the tolerance of the reference (otherwise
    /// the reference is not `f`'s formula, or the forward is wrong).
    pub forward_passed: bool,
    /// Per-input gradient results, in input order.
    pub inputs: Vec<InputReport>,
}

impl ReferenceReport {
    /// Whether the forward values and every gradient element passed.
    pub fn passed(&self) -> bool {
        self.forward_passed && self.inputs.iter().all(|r| r.passed)
    }

    /// Panics with the report if anything failed (for tests).
    #[track_caller]
    pub fn assert_passed(&self) {
        assert!(self.passed(), "reference gradient check failed:\n{self}");
    }
}

impl fmt::Display for ReferenceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} forward: {} worst abs {:.3e}",
            self.name,
            if self.forward_passed { "ok" } else { "FAILED" },
            self.forward_worst_abs
        )?;
        let inputs = GradCheckReport {
            name: self.name.clone(),
            inputs: self.inputs.clone(),
        };
        write!(f, "{inputs}")
    }
}

impl ReferenceGradCheck {
    /// Checks the gradients of `f` with respect to every tensor in `inputs` against the
    /// central differences of `reference`, which computes the same function in f64 on
    /// the host: it receives every input's elements (row-major, as f64) and returns the
    /// output's elements (row-major).
    ///
    /// Fails when `f` fails or `reference` returns another number of elements than `f`.
    pub fn run<B, F, R>(
        &self,
        name: &str,
        inputs: &[Tensor<B>],
        f: F,
        reference: R,
    ) -> Result<ReferenceReport>
    where
        B: Backend,
        F: Fn(&[Tensor<B>]) -> Result<Tensor<B>>,
        R: Fn(&[Vec<f64>]) -> Vec<f64>,
    {
        let values: Vec<Vec<f32>> = inputs.iter().map(Tensor::to_vec).collect::<Result<_>>()?;
        let leaves: Vec<Tensor<B>> = values
            .iter()
            .zip(inputs)
            .map(|(v, t)| {
                Tensor::from_vec(t.backend(), v.clone(), t.shape().clone())?.requires_grad()
            })
            .collect::<Result<_>>()?;
        let y = f(&leaves)?;
        let y_vals = y.to_vec()?;
        let x64: Vec<Vec<f64>> = values
            .iter()
            .map(|v| v.iter().map(|&x| f64::from(x)).collect())
            .collect();
        let r0 = reference(&x64);
        if r0.len() != y_vals.len() {
            return Err(crate::Error::invalid(
                "ReferenceGradCheck::run",
                "reference",
                format!(
                    "returned {} values for an output of {} elements",
                    r0.len(),
                    y_vals.len()
                ),
            ));
        }
        let mut forward_worst_abs = 0.0f64;
        let mut forward_passed = true;
        for (&a, &r) in y_vals.iter().zip(&r0) {
            let err = (f64::from(a) - r).abs();
            forward_worst_abs = forward_worst_abs.max(err);
            forward_passed &= err <= self.atol + self.rtol * r.abs();
        }
        let mut rng = Philox::new(self.seed);
        let w = try_collect("gradcheck", (0..y.numel()).map(|_| rng.uniform(-1.0, 1.0)))?;
        let w_t = Tensor::from_vec(y.backend(), w.clone(), y.shape().clone())?;
        if y.is_requires_grad() {
            y.backward_with(BackwardOptions::default().gradient(&w_t))?;
        }
        let loss = |x: &[Vec<f64>]| -> f64 {
            reference(x)
                .iter()
                .zip(&w)
                .map(|(&r, &w)| r * f64::from(w))
                .sum()
        };
        let mut reports = Vec::with_capacity(inputs.len());
        for (i, leaf) in leaves.iter().enumerate() {
            let analytic = match leaf.grad() {
                Some(g) => g.to_vec()?,
                None => try_vec_filled("gradcheck", leaf.numel(), 0.0)?,
            };
            let mut rep = InputReport {
                input: i,
                worst_abs: 0.0,
                worst_rel: 0.0,
                worst_index: 0,
                analytic: 0.0,
                numeric: 0.0,
                passed: true,
            };
            let mut worst_excess = f64::NEG_INFINITY;
            let mut pert = x64.clone();
            for (j, &a) in analytic.iter().enumerate() {
                let x0 = x64[i][j];
                let h = self.eps * x0.abs().max(1.0);
                pert[i][j] = x0 + h;
                let lp = loss(&pert);
                pert[i][j] = x0 - h;
                let lm = loss(&pert);
                pert[i][j] = x0;
                let numeric = (lp - lm) / (2.0 * h);
                let a = f64::from(a);
                let err = (a - numeric).abs();
                let scale = a.abs().max(numeric.abs());
                let rel = if scale > 0.0 { err / scale } else { 0.0 };
                let tol = self.atol + self.rtol * numeric.abs();
                let ok = err <= tol || (a.is_nan() && numeric.is_nan());
                rep.passed &= ok;
                rep.worst_abs = rep.worst_abs.max(err);
                rep.worst_rel = rep.worst_rel.max(rel);
                let excess = if err.is_nan() {
                    f64::INFINITY
                } else {
                    err - tol
                };
                if excess > worst_excess {
                    worst_excess = excess;
                    rep.worst_index = j;
                    rep.analytic = a;
                    rep.numeric = numeric;
                }
            }
            reports.push(rep);
        }
        Ok(ReferenceReport {
            name: name.to_string(),
            forward_worst_abs,
            forward_passed,
            inputs: reports,
        })
    }
}
