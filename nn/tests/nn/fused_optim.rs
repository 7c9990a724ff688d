//! The fused optimizer kernels (`Backend::sgd_step`, `Backend::adam_step`) give the bits
//! of the same update written as tensor operations: a contiguous parameter takes the
//! fused path, a transposed view of the same values the tensor-operation path, and after
//! several steps with changing gradients (special values included) both hold the same
//! bits, on the scalar reference and on the CPU backend at one and three threads. In fast
//! mode a NaN's sign and payload are not part of the promise (`docs/arithmetic.md` §6:
//! they follow the instruction forms the compiler chose), so there a NaN matches any NaN.

use exactgrad_autograd::Tensor;
use exactgrad_backends::{ExactBackend, FastBackend, ScalarRefBackend};
use exactgrad_core::{Backend, ComputeMode, Philox};
use exactgrad_nn::optim::{Adam, AdamConfig, AdamW, AdamWConfig, Optimizer, Sgd, SgdConfig};

const ROWS: usize = 7;
const COLS: usize = 5;

/// Values with a few infinities, zeros of both signs and a NaN.
fn values(seed: u64) -> Vec<f32> {
    let mut r = Philox::new(seed);
    (0..ROWS * COLS)
        .map(|i| match i % 17 {
            3 => -0.0,
            11 if seed.is_multiple_of(3) => f32::INFINITY,
            13 if seed.is_multiple_of(5) => f32::NAN,
            _ => r.uniform(-2.0, 2.0),
        })
        .collect()
}

/// The parameter twice: contiguous `[COLS, ROWS]` (fused path) and as the transposed
/// view of a contiguous `[ROWS, COLS]` (tensor-operation path), with equal values.
fn twins<B: Backend>(b: &B) -> (Tensor<B>, Tensor<B>) {
    let v = values(1);
    let base = Tensor::from_vec(b, v, [ROWS, COLS]).unwrap();
    let contiguous = base.t().unwrap().copy_contiguous().unwrap();
    let view = base.t().unwrap();
    assert!(!view.is_contiguous());
    (
        contiguous.requires_grad().unwrap(),
        view.requires_grad().unwrap(),
    )
}

fn bits<B: Backend>(t: &Tensor<B>) -> Vec<u32> {
    t.to_vec().unwrap().iter().map(|v| v.to_bits()).collect()
}

/// Runs three steps of the optimizer `make` builds on both twins and compares.
fn check<B: Backend, O: Optimizer<B>>(b: &B, what: &str, make: impl Fn(Tensor<B>) -> O) {
    let (fused, plain) = twins(b);
    let mut of = make(fused.clone());
    let mut op = make(plain.clone());
    for step in 0..3u64 {
        let g = Tensor::from_vec(b, values(10 + step), [COLS, ROWS]).unwrap();
        fused.set_grad(Some(g.clone())).unwrap();
        plain.set_grad(Some(g)).unwrap();
        of.step().unwrap();
        op.step().unwrap();
        let (f, p) = (bits(&fused), bits(&plain));
        let same = |(x, y): (&u32, &u32)| {
            x == y
                || (b.mode() == ComputeMode::Fast
                    && f32::from_bits(*x).is_nan()
                    && f32::from_bits(*y).is_nan())
        };
        assert!(
            f.iter().zip(&p).all(same),
            "{what} on {}: step {step} differs\n fused {f:?}\n plain {p:?}",
            b.name()
        );
    }
}

fn all_configs<B: Backend>(b: &B) {
    for momentum in [0.0, 0.9] {
        for (nesterov, maximize, weight_decay, dampening) in [
            (false, false, 0.0, 0.0),
            (true, false, 0.01, 0.0),
            (false, true, 0.1, 0.25),
        ] {
            if nesterov && momentum == 0.0 {
                continue;
            }
            let config = SgdConfig {
                lr: 0.05,
                momentum,
                dampening,
                weight_decay,
                nesterov,
                maximize,
            };
            check(b, &format!("{config:?}"), |p| {
                Sgd::new(vec![p], config).unwrap()
            });
        }
    }
    for (amsgrad, maximize, weight_decay, beta1) in [
        (false, false, 0.0, 0.9),
        (true, false, 0.01, 0.9),
        (false, true, 0.1, 0.2),
        (true, true, 0.0, 0.0),
    ] {
        let config = AdamConfig {
            amsgrad,
            maximize,
            weight_decay,
            betas: (beta1, 0.999),
            ..AdamConfig::new(0.01)
        };
        check(b, &format!("{config:?}"), |p| {
            Adam::new(vec![p], config).unwrap()
        });
        let config = AdamWConfig {
            amsgrad,
            maximize,
            weight_decay: weight_decay + 0.01,
            betas: (beta1, 0.99),
            ..AdamWConfig::new(0.02)
        };
        check(b, &format!("{config:?}"), |p| {
            AdamW::new(vec![p], config).unwrap()
        });
    }
}

#[test]
fn fused_updates_equal_the_tensor_operations_on_the_reference() {
    all_configs(&ScalarRefBackend);
}

#[test]
fn fused_updates_equal_the_tensor_operations_on_the_cpu_backends() {
    for threads in [1, 3] {
        all_configs(&ExactBackend::with_threads(threads));
        all_configs(&FastBackend::with_threads(threads));
    }
}
