//! Running a case: the oracle's view language, the comparison with PyTorch's values,
//! one case forward and backward, and all cases of one operator.

use super::call::call_op;
use super::oracle::{cases, parse_ints, Array, Case, TOL};
use super::T;
use exactgrad::prelude::*;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The sizes of a shape argument without `-1`.
fn sizes(a: &[isize]) -> Result<Vec<usize>, String> {
    a.iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("invalid size {d} in {a:?}")))
        .collect()
}

/// The view language of the oracle: `name(a,b,...)` applied to a tensor.
pub(crate) fn apply_view(t: &T, name: &str, a: &[isize]) -> Result<T, String> {
    let arg = |i: usize| {
        a.get(i)
            .copied()
            .ok_or_else(|| format!("{name}: missing argument {i} in {a:?}"))
    };
    let r = match name {
        "transpose" => t.transpose(arg(0)?, arg(1)?),
        "permute" => t.permute(a),
        // PyTorch's shape argument may hold one -1: the `_infer` forms take it.
        "reshape" if a.contains(&-1) => t.reshape_infer(a),
        "view" if a.contains(&-1) => t.view_infer(a),
        "reshape" => t.reshape(sizes(a)?),
        "view" => t.view(sizes(a)?),
        "narrow" => t.narrow(arg(0)?, arg(1)? as usize, arg(2)? as usize),
        "slice" => t.slice(arg(0)?, arg(1)?, arg(2)?, arg(3)? as usize),
        "expand" => t.expand(&a.iter().map(|&d| d as usize).collect::<Vec<_>>()),
        "squeeze" => t.squeeze(arg(0)?),
        "unsqueeze" => t.unsqueeze(arg(0)?),
        "flatten" => t.flatten(arg(0)?, arg(1)?),
        "contiguous" => t.contiguous(),
        _ => return Err(format!("unknown view `{name}`")),
    };
    r.map_err(|e| format!("view {name}{a:?}: {e}"))
}

pub(crate) fn apply_chain(t: &T, chain: &str) -> Result<T, String> {
    let mut t = t.clone();
    for part in chain.split('|') {
        let (name, rest) = part
            .split_once('(')
            .ok_or_else(|| format!("bad view `{part}`"))?;
        let args = parse_ints(rest.trim_end_matches(')'))?;
        t = apply_view(&t, name, &args)?;
    }
    Ok(t)
}

/// Compares `ours` with PyTorch's `want`; on success returns the worst scaled error.
pub(crate) fn compare(what: &str, ours: &T, want: &Array, scaled: bool) -> Result<f64, String> {
    if ours.dims() != want.shape.as_slice() {
        return Err(format!(
            "{what}: shape {:?}, torch has {:?}",
            ours.dims(),
            want.shape
        ));
    }
    let got = ours.to_vec().map_err(|e| e.to_string())?;
    let tensor_scale = want
        .data
        .iter()
        .filter(|v| v.is_finite())
        .fold(1.0f64, |m, &v| m.max(f64::from(v).abs()));
    let mut worst = 0.0f64;
    let mut bad = 0usize;
    let mut first: Option<String> = None;
    for (i, (&o, &t)) in got.iter().zip(&want.data).enumerate() {
        let (ok, err) = if t.is_nan() {
            (o.is_nan(), if o.is_nan() { 0.0 } else { f64::INFINITY })
        } else if t.is_infinite() {
            (o == t, if o == t { 0.0 } else { f64::INFINITY })
        } else if !o.is_finite() {
            (false, f64::INFINITY)
        } else {
            let scale = if scaled {
                tensor_scale
            } else {
                f64::from(t).abs().max(1.0)
            };
            let err = (f64::from(o) - f64::from(t)).abs() / scale;
            (err <= TOL, err)
        };
        worst = worst.max(err);
        if !ok {
            bad += 1;
            if first.is_none() {
                first = Some(format!(
                    "first differing element {:?} (flat {i}): ours {o:e} ({:#010x}), torch {t:e} ({:#010x}), scaled error {err:.3e}",
                    unravel(i, &want.shape),
                    o.to_bits(),
                    t.to_bits()
                ));
            }
        }
    }
    match first {
        None => Ok(worst),
        Some(f) => Err(format!(
            "{what} differs from PyTorch in {bad} of {} elements (tolerance {TOL:e}, {} scale); {f}",
            got.len(),
            if scaled { "tensor" } else { "element" }
        )),
    }
}

pub(crate) fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = i % shape[d].max(1);
        i /= shape[d].max(1);
    }
    idx
}

/// Cases where exactgrad deliberately differs from PyTorch by returning an error, with
/// the reason.
pub(crate) fn deliberate_error(name: &str) -> Option<&'static str> {
    match name {
        "cross_entropy_negative_smoothing" => Some(
            "label_smoothing must lie in [0, 1]; PyTorch accepts negative values, which have no meaning",
        ),
        _ => None,
    }
}

/// Runs one case: forward, comparison, backward with PyTorch's upstream gradient,
/// comparison of every gradient. Returns (worst forward error, worst gradient error).
pub(crate) fn run_case(c: &Case) -> Result<(f64, f64), String> {
    let b = ScalarRefBackend;
    if let Some(why) = deliberate_error(&c.name) {
        // A case PyTorch accepts and exactgrad refuses on purpose: the op must return an
        // error, not a value.
        let leaves: Vec<T> = c
            .inputs
            .iter()
            .map(|a| T::from_vec(&b, a.data.clone(), a.shape.clone()).map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?;
        return match call_op(c, &leaves) {
            Err(_) => Ok((0.0, 0.0)),
            Ok(_) => Err(format!("expected an error ({why}), got a value")),
        };
    }
    let scaled = match c.arg("tol")? {
        "elem" => false,
        "scaled" => true,
        t => return Err(format!("unknown tolerance `{t}`")),
    };
    let mut leaves = Vec::new();
    for (i, a) in c.inputs.iter().enumerate() {
        let t = T::from_vec(&b, a.data.clone(), a.shape.clone()).map_err(|e| e.to_string())?;
        let t = if c.grads.iter().any(|(j, _)| *j == i) {
            t.requires_grad().map_err(|e| e.to_string())?
        } else {
            t
        };
        leaves.push(t);
    }
    let operands = leaves
        .iter()
        .enumerate()
        .map(|(i, t)| match c.spec.get(&format!("view{i}")) {
            Some(chain) => apply_chain(t, chain),
            None => Ok(t.clone()),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let out = call_op(c, &operands).map_err(|e| format!("forward: {e}"))?;
    let fwd = compare("forward output", &out, &c.y, scaled)?;
    let gy = T::from_vec(&b, c.gy.data.clone(), c.gy.shape.clone()).map_err(|e| e.to_string())?;
    out.backward_with(BackwardOptions::default().gradient(&gy))
        .map_err(|e| format!("backward returned an error: {e}"))?;
    let mut bwd = 0.0f64;
    for (i, want) in &c.grads {
        let what = format!("gradient of x{i}");
        match leaves[*i].grad() {
            Some(g) => bwd = bwd.max(compare(&what, &g, want, scaled)?),
            None if want.data.iter().all(|&v| v == 0.0) => {}
            None => return Err(format!("{what}: none, torch has {:?}", want.data)),
        }
    }
    Ok((fwd, bwd))
}

pub(crate) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".to_string()
    }
}

/// Runs every case of `op`; fails with every disagreement listed.
pub(crate) fn check_op(op: &str) {
    let selected: Vec<&Case> = cases().iter().filter(|c| c.op() == op).collect();
    assert!(!selected.is_empty(), "no oracle case for operator `{op}`");
    let mut failures = Vec::new();
    let (mut worst_fwd, mut worst_bwd) = ((0.0f64, ""), (0.0f64, ""));
    for c in &selected {
        let r = catch_unwind(AssertUnwindSafe(|| run_case(c)))
            .unwrap_or_else(|p| Err(format!("panicked: {}", panic_message(&*p))));
        match r {
            Ok((f, g)) => {
                if f >= worst_fwd.0 {
                    worst_fwd = (f, &c.name);
                }
                if g >= worst_bwd.0 {
                    worst_bwd = (g, &c.name);
                }
            }
            Err(msg) => failures.push(format!(
                "  op `{op}`, case `{}` ({}):\n    inputs: {}\n    {msg}",
                c.name,
                c.file,
                c.describe_inputs()
            )),
        }
    }
    println!(
        "{op:>14}: {:>3} cases, {} failed; worst scaled error forward {:.2e} ({}), gradients {:.2e} ({})",
        selected.len(),
        failures.len(),
        worst_fwd.0,
        worst_fwd.1,
        worst_bwd.0,
        worst_bwd.1
    );
    if !failures.is_empty() {
        panic!(
            "{} of {} PyTorch cases of `{op}` disagree with PyTorch 2.15.0:\n{}",
            failures.len(),
            selected.len(),
            failures.join("\n")
        );
    }
}
