//! The f64 reference gradient check (`ReferenceGradCheck`, `autograd/src/gradcheck.rs`):
//! it passes correct rules at f32-rounding tolerances, and it detects a gradient that is
//! wrong by 0.3 %, which the f32 check (`GradCheck`) cannot.

use exactgrad_autograd::{GradCheck, ReferenceGradCheck, Result, Tensor};
use exactgrad_backends::{ExactBackend, ScalarRefBackend};
use exactgrad_core::{Backend, Philox};

/// `x` with the gradient of `1.003·x`: the value is exactly `x` (the added term is
/// `c − c`), the backward rule is 0.3 % too large.
fn slightly_wrong<B: Backend>(x: &Tensor<B>) -> Result<Tensor<B>> {
    let c = x.mul_scalar(0.003)?;
    x.add(&c.sub(&c.detach())?)
}

#[test]
fn a_gradient_wrong_by_a_few_thousandths_is_caught_only_by_the_reference_check() {
    let b = ScalarRefBackend;
    let x = Tensor::rand_uniform(&b, [6], -2.0, 2.0, &mut Philox::new(1)).unwrap();
    // The f32 check's tolerance (1e-3 + 1e-2·|g|) lets it through …
    let f32_check = GradCheck::default()
        .run("slightly wrong", std::slice::from_ref(&x), |v| {
            slightly_wrong(&v[0])?.tanh()
        })
        .unwrap();
    assert!(f32_check.passed(), "{f32_check}");
    // … the reference check does not, and its forward comparison passes (the value is
    // right, only the rule is wrong).
    let report = ReferenceGradCheck::default()
        .run(
            "slightly wrong",
            std::slice::from_ref(&x),
            |v| slightly_wrong(&v[0])?.tanh(),
            |x| x[0].iter().map(|v| v.tanh()).collect(),
        )
        .unwrap();
    assert!(report.forward_passed, "{report}");
    assert!(!report.passed(), "{report}");
    let worst = &report.inputs[0];
    assert!(worst.worst_rel > 2e-3 && worst.worst_rel < 4e-3, "{report}");
}

fn correct_rules_pass<B: Backend>(b: &B) {
    let mut rng = Philox::new(7);
    let x = Tensor::rand_uniform(b, [3, 4], -1.5, 1.5, &mut rng).unwrap();
    let y = Tensor::rand_uniform(b, [4], -1.5, 1.5, &mut rng).unwrap();
    // tanh(x) · sigmoid(y) with y broadcast over rows, then divided by (1 + x²).
    ReferenceGradCheck::default()
        .run(
            "tanh·sigmoid/(1+x²)",
            &[x.clone(), y.clone()],
            |v| {
                let num = (&v[0].tanh()? * &v[1].sigmoid()?)?;
                &num / &(1.0 + &(&v[0] * &v[0])?)?
            },
            |v| {
                (0..12)
                    .map(|i| {
                        let (x, y) = (v[0][i], v[1][i % 4]);
                        x.tanh() / (1.0 + (-y).exp()) / (1.0 + x * x)
                    })
                    .collect()
            },
        )
        .unwrap()
        .assert_passed();
    // gather along dim 1 of a transposed view, then squared.
    let idx = (vec![2i64, 0, 1, 1, 0, 2, 2, 2], [4, 2]);
    ReferenceGradCheck::default()
        .run(
            "gather of a transpose",
            std::slice::from_ref(&x),
            |v| {
                let g = v[0].t()?.gather(1, &idx)?;
                &g * &g
            },
            |v| {
                // xt[r][c] = x[c][r]; out[r][k] = xt[r][idx[r][k]]
                (0..8)
                    .map(|p| {
                        let (r, k) = (p / 2, p % 2);
                        let c = idx.0[r * 2 + k] as usize;
                        let val = v[0][c * 4 + r];
                        val * val
                    })
                    .collect()
            },
        )
        .unwrap()
        .assert_passed();
}

#[test]
fn correct_rules_pass_at_f32_rounding_tolerances() {
    correct_rules_pass(&ScalarRefBackend);
    correct_rules_pass(&ExactBackend::with_threads(2));
}

#[test]
fn a_reference_of_another_function_is_reported() {
    let b = ScalarRefBackend;
    let x = Tensor::rand_uniform(&b, [5], 0.5, 1.0, &mut Philox::new(3)).unwrap();
    let report = ReferenceGradCheck::default()
        .run(
            "exp vs 1.001·exp",
            std::slice::from_ref(&x),
            |v| v[0].exp(),
            |x| x[0].iter().map(|v| 1.001 * v.exp()).collect(),
        )
        .unwrap();
    assert!(!report.forward_passed && !report.passed(), "{report}");
    assert!(report.to_string().contains("forward: FAILED"), "{report}");
    // A reference with the wrong number of values is an error, not a pass.
    let err = ReferenceGradCheck::default()
        .run(
            "short",
            std::slice::from_ref(&x),
            |v| v[0].exp(),
            |_| vec![0.0],
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("returned 1 values for an output of 5 elements"),
        "{err}"
    );
}
