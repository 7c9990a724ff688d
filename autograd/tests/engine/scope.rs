//! The contract of `ActivationScope` (`autograd/src/scope.rs`, `docs/memory.md` §2):
//! what a scope remembers, what it releases when it ends and to which pool, what it
//! leaves alone (constructors, `no_grad`, the engine, leaf gradients, kept tensors), and
//! the error of a use after release.

use exactgrad_autograd::{no_grad, ActivationScope, Error, Tensor};
use exactgrad_backends::{ExactBackend, ScalarRefBackend};
use exactgrad_core::Backend;
use exactgrad_core::BackendImpl as _;

fn leaf<B: Backend>(b: &B, v: &[f32], shape: &[usize]) -> Tensor<B> {
    Tensor::from_slice(b, v, shape)
        .unwrap()
        .requires_grad()
        .unwrap()
}

fn is_released<T>(r: Result<T, Error>) -> bool {
    matches!(r, Err(Error::Released { .. }))
}

#[test]
fn operator_results_are_released_when_the_scope_ends_and_reads_fail() {
    let b = ScalarRefBackend;
    let x = leaf(&b, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let (y, view, report) = {
        let scope = ActivationScope::new();
        let y = x.mul_scalar(2.0).unwrap();
        let view = y.transpose(0, 1).unwrap();
        assert_eq!(y.to_vec().unwrap(), [2.0, 4.0, 6.0, 8.0, 10.0, 12.0]);
        assert_eq!(
            scope.remembered(),
            1,
            "one result, the view shares its storage"
        );
        (y, view, scope.close())
    };
    assert_eq!((report.released, report.elements), (1, 6));
    assert!(y.is_released() && view.is_released());
    // Every access is the error, through a read, an operator or an in-place write.
    assert!(is_released(y.to_vec()));
    assert!(is_released(view.to_vec()));
    assert!(is_released(y.add(&x.detach())));
    assert!(is_released(y.detach().fill_(1.0)));
    let e = y.sum().unwrap_err();
    assert!(e.to_string().contains("was released"), "{e}");
    assert!(format!("{y:?}").contains("<released>"));
    // The leaf is the caller's: untouched.
    assert_eq!(x.to_vec().unwrap()[5], 6.0);
}

#[test]
fn copies_made_by_contiguous_and_reshape_are_remembered() {
    let b = ScalarRefBackend;
    let x = Tensor::from_slice(&b, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3]).unwrap();
    let scope = ActivationScope::new();
    let c = x.transpose(0, 1).unwrap().contiguous().unwrap();
    let r = x.transpose(0, 1).unwrap().reshape([6]).unwrap();
    assert!(!c.shares_storage(&x) && !r.shares_storage(&x));
    assert_eq!(r.to_vec().unwrap(), [1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    assert_eq!(scope.remembered(), 2);
    assert_eq!(scope.close().released, 2);
    assert!(c.is_released() && r.is_released());
    assert!(!x.is_released());
}

#[test]
fn constructors_and_no_grad_results_are_not_tied_to_the_scope() {
    let b = ScalarRefBackend;
    let w = leaf(&b, &[1.0, -2.0], &[2]);
    let (made, state, out) = {
        let scope = ActivationScope::new();
        let made = Tensor::zeros(&b, [3]).unwrap();
        let state = {
            let _g = no_grad();
            // As an optimizer's state update: kept by its owner past the step.
            w.mul_scalar(0.5).unwrap()
        };
        let out = w.relu().unwrap();
        assert_eq!(scope.remembered(), 1);
        drop(scope);
        (made, state, out)
    };
    assert_eq!(made.to_vec().unwrap(), [0.0; 3]);
    assert_eq!(state.to_vec().unwrap(), [0.5, -1.0]);
    assert!(out.is_released());
}

#[test]
fn kept_tensors_and_their_views_survive_the_scope() {
    let b = ScalarRefBackend;
    let x = leaf(&b, &[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let scope = ActivationScope::new();
    let a = x.exp().unwrap();
    let c = x.neg().unwrap();
    let d = x.abs().unwrap();
    let va = a.transpose(0, 1).unwrap();
    scope.keep(&a);
    c.keep().keep(); // twice is the same as once
    let expected_a = a.to_vec().unwrap();
    let report = scope.close();
    assert_eq!((report.remembered, report.released), (3, 1));
    assert_eq!(a.to_vec().unwrap(), expected_a);
    assert_eq!(va.to_vec().unwrap()[1], expected_a[2]);
    assert_eq!(c.to_vec().unwrap(), [-1.0, -2.0, -3.0, -4.0]);
    assert!(d.is_released());
    // A kept result still differentiates (its record and saved tensors are alive).
    a.sum().unwrap().backward().unwrap();
    assert_eq!(x.grad().unwrap().to_vec().unwrap(), expected_a);
}

#[test]
fn tensors_freed_before_the_end_are_skipped() {
    let b = ScalarRefBackend;
    let x = leaf(&b, &[1.0, 2.0], &[2]);
    let scope = ActivationScope::new();
    drop(x.exp().unwrap());
    drop(x.neg().unwrap());
    let kept = x.abs().unwrap();
    let report = scope.close();
    assert_eq!((report.remembered, report.released), (3, 1));
    assert!(kept.is_released());
    // A second scope over a released tensor releases nothing again.
    let again = ActivationScope::new();
    assert!(is_released(kept.exp()));
    assert_eq!(again.close().released, 0);
}

#[test]
fn the_engine_runs_outside_the_scope_and_leaf_gradients_stay() {
    let b = ScalarRefBackend;
    let w = leaf(&b, &[0.5, -1.0, 2.0, 0.25], &[2, 2]);
    let x = Tensor::from_slice(&b, &[1.0, 2.0, 3.0, 4.0], [2, 2]).unwrap();
    // The same step without a scope, for the expected gradient.
    let step = || {
        let h = x.matmul(&w).unwrap().tanh().unwrap();
        h.mul(&h).unwrap().mean().unwrap()
    };
    step().backward().unwrap();
    let expected = w.grad().unwrap().to_vec().unwrap();
    w.clear_grad();

    let scope = ActivationScope::new();
    let loss = step();
    let before = scope.remembered();
    loss.backward().unwrap();
    assert_eq!(
        scope.remembered(),
        before,
        "nothing the engine allocates is remembered"
    );
    let report = scope.close();
    // matmul, tanh, mul, the sum and the division of the mean: the backward without
    // retain_graph already freed every intermediate (its records dropped their saved
    // tensors), so only the loss the caller holds is left to release.
    assert_eq!((report.remembered, report.released), (5, 1), "{report:?}");
    assert!(loss.is_released());
    let g = w.grad().expect("the leaf's gradient outlives the scope");
    assert!(!g.is_released());
    assert_eq!(g.to_vec().unwrap(), expected);
    // A second step accumulates into it as usual.
    {
        let _scope = ActivationScope::new();
        step().backward().unwrap();
    }
    let twice: Vec<f32> = expected.iter().map(|v| v + v).collect();
    assert_eq!(w.grad().unwrap().to_vec().unwrap(), twice);
}

#[test]
fn a_backward_after_the_scope_ended_is_an_error_not_a_read_of_reused_memory() {
    let b = ExactBackend::new();
    let w = leaf(&b, &[0.5; 8], &[8]);
    let loss = {
        let _scope = ActivationScope::new();
        // `exp` saves its output for backward; `mul` saves both operands.
        w.exp().unwrap().mul(&w).unwrap().sum().unwrap()
    };
    // Refill the pool's buffers with other values.
    for _ in 0..4 {
        let _junk = Tensor::full(&b, [8], 7.0).unwrap();
    }
    let e = loss.backward().unwrap_err();
    assert!(matches!(e, Error::Released { .. }), "{e}");
    assert!(w.grad().is_none_or(|g| g.to_vec().unwrap() != [7.0; 8]));
}

#[test]
fn nested_scopes_release_their_own_tensors() {
    let b = ScalarRefBackend;
    let x = leaf(&b, &[1.0, 2.0], &[2]);
    let outer = ActivationScope::new();
    let a = x.exp().unwrap();
    let inner = ActivationScope::new();
    let c = a.neg().unwrap();
    assert_eq!((outer.remembered(), inner.remembered()), (1, 1));
    assert_eq!(inner.close().released, 1);
    assert!(c.is_released() && !a.is_released());
    let d = a.abs().unwrap();
    assert_eq!(outer.close().released, 2);
    assert!(a.is_released() && d.is_released());
    // With no scope open nothing is remembered.
    let e = x.exp().unwrap();
    let later = ActivationScope::new();
    assert_eq!(later.close().released, 0);
    assert!(!e.is_released());
}

#[test]
fn scopes_are_per_thread() {
    let b = ScalarRefBackend;
    let x = leaf(&b, &[1.0, 2.0], &[2]);
    let scope = ActivationScope::new();
    let other = std::thread::scope(|s| s.spawn(|| x.exp().unwrap()).join().unwrap());
    let mine = x.exp().unwrap();
    assert_eq!(scope.close().released, 1);
    assert!(mine.is_released() && !other.is_released());
}

#[test]
fn released_storage_returns_to_the_pool_while_tensors_are_still_held() {
    let b = ExactBackend::new();
    let pool = b.memory().expect("the CPU backends have a pool");
    let x = leaf(&b, &vec![0.25; 4096], &[64, 64]);
    let base = pool.stats().outstanding_bytes;
    let mut held = Vec::new();
    for step in 0..3 {
        let scope = ActivationScope::new();
        let h = x.matmul(&x).unwrap().relu().unwrap();
        let loss = h.sum().unwrap();
        loss.backward().unwrap();
        held.push((h, loss)); // held past the scope, yet released
        let during = pool.stats().outstanding_bytes;
        assert!(during > base);
        scope.close();
        let s = pool.stats();
        // The leaf's gradient (16 KiB) is the only new storage after a step.
        assert_eq!(s.outstanding_bytes, base + 4096 * 4, "step {step}");
        if step > 0 {
            assert!(s.hits > 0);
        }
    }
    assert!(held.iter().all(|(h, l)| h.is_released() && l.is_released()));
}

#[test]
fn a_memory_limit_is_an_error_naming_the_operator_not_an_abort() {
    let b = ExactBackend::new();
    let pool = b.memory().unwrap();
    let x = Tensor::full(&b, [256, 256], 1.0).unwrap(); // 256 KiB
    pool.set_limit(Some(600 << 10)).unwrap();
    let y = x.exp().unwrap(); // 512 KiB held: a third buffer would pass the limit
    let e = y.neg().unwrap_err();
    match &e {
        Error::Core(exactgrad_core::Error::MemoryLimit {
            op, bytes, limit, ..
        }) => {
            assert_eq!((*op, *bytes, *limit), ("neg", 256 << 10, 600 << 10));
        }
        other => panic!("{other:?}"),
    }
    assert!(e.to_string().contains("memory limit"), "{e}");
    // Releasing memory makes room again (the freed buffer is reused); removing the
    // limit lifts it.
    drop(y);
    assert!(x.neg().is_ok());
    pool.set_limit(None).unwrap();
    assert!(x.exp().unwrap().neg().is_ok());
}
