//! Helpers shared by the tests that compare with the PyTorch oracle files in `testdata/`.
#![allow(dead_code)]

use exactgrad::nn::reference::TensorFile;
use exactgrad::prelude::*;

/// `max |a − b| / max |b|` (0 when both are all zero).
pub fn scaled_error(ours: &[f32], torch: &[f32]) -> f64 {
    assert_eq!(ours.len(), torch.len());
    let scale = torch.iter().fold(0.0f64, |m, &v| m.max(f64::from(v).abs()));
    let diff = ours.iter().zip(torch).fold(0.0f64, |m, (&a, &b)| {
        m.max((f64::from(a) - f64::from(b)).abs())
    });
    if diff == 0.0 {
        0.0
    } else {
        diff / scale
    }
}

/// Compares each gradient with the oracle's `grad/<name>` (same shape, at most 1e-4
/// scaled error), requires the oracle to hold no gradient that was not compared, and
/// returns the worst error and the gradient it belongs to. `what` (backend/model) starts
/// every message.
pub fn compare_gradients<B: Backend>(
    what: &str,
    file: &TensorFile,
    gradients: &[(String, Tensor<B>)],
) -> (f64, String) {
    let (mut worst, mut at) = (0.0f64, String::new());
    for (name, g) in gradients {
        let (shape, torch) = file.floats(&format!("grad/{name}")).unwrap();
        assert_eq!(g.dims(), shape, "{what}: shape of gradient {name}");
        let e = scaled_error(&g.to_vec().unwrap(), torch);
        assert!(
            e <= 1e-4,
            "{what}: gradient of {name}: scaled error {e:.2e} > 1e-4"
        );
        if e >= worst {
            worst = e;
            at = name.clone();
        }
    }
    let theirs = file
        .names()
        .iter()
        .filter(|n| n.starts_with("grad/"))
        .count();
    assert_eq!(
        theirs,
        gradients.len(),
        "{what}: every oracle gradient compared"
    );
    (worst, at)
}
