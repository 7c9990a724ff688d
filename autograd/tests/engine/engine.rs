//! The engine's contract (the module docs of `exactgrad_autograd::engine`, in
//! `autograd/src/engine.rs`): traversal order, accumulation, release, version checks and
//! the errors of backward; and the shared `requires_grad` flag (`docs/api.md` §4).

use exactgrad_autograd::{no_grad, BackwardOptions, Error, Tensor};
use exactgrad_backends::ScalarRefBackend;

type T = Tensor<ScalarRefBackend>;
const B: ScalarRefBackend = ScalarRefBackend;

fn leaf(v: &[f32], shape: &[usize]) -> T {
    T::from_slice(&B, v, shape)
        .unwrap()
        .requires_grad()
        .unwrap()
}

fn c(v: &[f32], shape: &[usize]) -> T {
    T::from_slice(&B, v, shape).unwrap()
}

#[test]
fn tensors_are_send_and_sync() {
    fn check<X: Send + Sync>() {}
    check::<T>();
}

#[test]
fn diamond_graph_sums_both_paths() {
    // a = x*x, b = a + x, y = b * a  =>  dy/dx = (2x + 1)·x² + (x² + x)·2x
    let x = leaf(&[1.5, -2.0], &[2]);
    let a = x.mul(&x).unwrap();
    let b = a.add(&x).unwrap();
    let y = b.mul(&a).unwrap().sum().unwrap();
    y.backward().unwrap();
    let g = x.grad().unwrap().to_vec().unwrap();
    for (i, &xv) in [1.5f32, -2.0].iter().enumerate() {
        let want = (2.0 * xv + 1.0) * xv * xv + (xv * xv + xv) * 2.0 * xv;
        assert!(
            (g[i] - want).abs() <= 1e-5 * want.abs().max(1.0),
            "{i}: {} vs {want}",
            g[i]
        );
    }
}

#[test]
fn emission_order_is_fixed_by_the_graph() {
    // Gradients arriving at x from three consumers are added in traversal order; the sum
    // of 1e8, 1 and -1e8 in f32 depends on that order, so this pins it.
    let run = || {
        let x = leaf(&[1.0], &[1]);
        let y1 = x.mul_scalar(1e8).unwrap();
        let y2 = x.mul_scalar(1.0).unwrap();
        let y3 = x.mul_scalar(-1e8).unwrap();
        let s = y1.add(&y2).unwrap().add(&y3).unwrap().sum().unwrap();
        s.backward().unwrap();
        x.grad().unwrap().to_vec().unwrap()[0]
    };
    let g = run();
    assert_eq!(g.to_bits(), run().to_bits());
    // Post-order is [y1, y2, add, y3, add, sum]; run in reverse, the leaf receives -1e8
    // (from y3), then 1 (y2), then 1e8 (y1): (-1e8 + 1) + 1e8 = 0 in f32.
    assert_eq!(g, (-1e8f32 + 1.0) + 1e8);
    assert_eq!(g, 0.0);
}

#[test]
fn leaf_gradients_accumulate_and_can_be_zeroed_or_cleared() {
    let x = leaf(&[1.0, 2.0], &[2]);
    for _ in 0..3 {
        x.mul_scalar(2.0)
            .unwrap()
            .sum()
            .unwrap()
            .backward()
            .unwrap();
    }
    assert_eq!(x.grad().unwrap().to_vec().unwrap(), vec![6.0, 6.0]);
    x.fill_grad_zero().unwrap();
    assert_eq!(x.grad().unwrap().to_vec().unwrap(), vec![0.0, 0.0]);
    x.clear_grad();
    assert!(x.grad().is_none());
    // zero_grad is PyTorch's default: the gradient is freed, not filled.
    x.fill_grad_zero().unwrap();
    x.zero_grad();
    assert!(x.grad().is_none());
}

#[test]
fn second_backward_after_release_fails_before_any_work() {
    let x = leaf(&[3.0], &[1]);
    let w = leaf(&[2.0], &[1]);
    let y = x.mul(&w).unwrap().sum().unwrap();
    y.backward().unwrap();
    let before = (
        x.grad().unwrap().to_vec().unwrap(),
        w.grad().unwrap().to_vec().unwrap(),
    );
    let err = y.backward().unwrap_err();
    assert!(matches!(err, Error::GraphReleased { .. }), "{err}");
    assert!(err.to_string().contains("retain_graph"), "{err}");
    assert_eq!(
        (
            x.grad().unwrap().to_vec().unwrap(),
            w.grad().unwrap().to_vec().unwrap()
        ),
        before
    );
}

#[test]
fn second_backward_names_the_public_operator_and_the_call_to_make() {
    // cross_entropy is made of several records (a permute among them); the message names
    // the operator the program called and the option that keeps the graph.
    let x = leaf(&[0.5, -1.0, 2.0, 0.0, 1.0, -0.5, 0.25, 3.0], &[2, 2, 2]);
    let loss = x.cross_entropy(&[1, 0, 0, 1], Default::default()).unwrap();
    loss.backward().unwrap();
    let err = loss.backward().unwrap_err();
    assert!(
        matches!(
            err,
            Error::GraphReleased {
                op: "cross_entropy"
            }
        ),
        "{err}"
    );
    let msg = err.to_string();
    assert!(msg.contains("`cross_entropy`"), "{msg}");
    assert!(!msg.contains("permute"), "{msg}");
    assert!(
        msg.contains("backward_with(BackwardOptions::default().retain_graph(true))"),
        "{msg}"
    );
    // A plain operator is named by itself, and nested composites by the outermost.
    let y = x.mul_scalar(2.0).unwrap().sum().unwrap();
    y.backward().unwrap();
    assert!(matches!(
        y.backward(),
        Err(Error::GraphReleased { op: "sum" })
    ));
    // With the graph kept, the second backward runs.
    let loss = x.cross_entropy(&[1, 0, 0, 1], Default::default()).unwrap();
    loss.backward_with(BackwardOptions::default().retain_graph(true))
        .unwrap();
    loss.backward().unwrap();
}

#[test]
fn partially_released_graph_is_detected_before_any_work() {
    // z shares the record of a with y; after y's backward released it, z's backward must
    // fail without touching x's gradient.
    let x = leaf(&[3.0], &[1]);
    let a = x.mul_scalar(2.0).unwrap();
    a.mul_scalar(3.0)
        .unwrap()
        .sum()
        .unwrap()
        .backward()
        .unwrap();
    let before = x.grad().unwrap().to_vec().unwrap();
    let z = a.add_scalar(1.0).unwrap().sum().unwrap();
    assert!(matches!(z.backward(), Err(Error::GraphReleased { .. })));
    assert_eq!(x.grad().unwrap().to_vec().unwrap(), before);
}

#[test]
fn retain_graph_allows_a_second_backward() {
    let x = leaf(&[3.0], &[1]);
    let y = x.mul(&x).unwrap().sum().unwrap();
    y.backward_with(BackwardOptions::default().retain_graph(true))
        .unwrap();
    y.backward().unwrap();
    assert_eq!(x.grad().unwrap().to_vec().unwrap(), vec![12.0]);
}

#[test]
fn in_place_change_of_a_saved_tensor_is_a_version_error() {
    let w = leaf(&[1.0, 2.0], &[2]);
    let a = c(&[3.0, 4.0], &[2]);
    let y = w.mul(&a).unwrap().sum().unwrap();
    let v0 = a.version();
    a.add_(&c(&[1.0], &[1])).unwrap();
    assert_eq!(a.version(), v0 + 1);
    let err = y.backward().unwrap_err();
    assert!(
        matches!(err, Error::TensorVersion { op: "mul", .. }),
        "{err}"
    );
}

#[test]
fn in_place_through_a_view_bumps_the_shared_version() {
    let w = leaf(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let a = c(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let y = w.mul(&a).unwrap().sum().unwrap();
    a.t().unwrap().narrow(0, 0, 1).unwrap().fill_(0.0).unwrap();
    assert_eq!(a.to_vec().unwrap(), vec![0.0, 2.0, 0.0, 4.0]);
    assert!(matches!(y.backward(), Err(Error::TensorVersion { .. })));
}

#[test]
fn in_place_on_a_tensor_requiring_grad_is_refused_in_grad_mode() {
    let w = leaf(&[1.0], &[1]);
    assert!(matches!(
        w.fill_(0.0),
        Err(Error::InPlaceOnGrad { op: "fill_" })
    ));
    {
        let _g = no_grad();
        w.fill_(5.0).unwrap();
    }
    assert_eq!(w.to_vec().unwrap(), vec![5.0]);
}

#[test]
fn backward_errors() {
    let x = c(&[1.0, 2.0], &[2]);
    assert!(matches!(
        x.sum().unwrap().backward(),
        Err(Error::NoGrad { .. })
    ));
    let w = leaf(&[1.0, 2.0], &[2]);
    let y = w.mul_scalar(2.0).unwrap();
    let e = y.backward().unwrap_err();
    assert!(matches!(e, Error::ImplicitSeed { .. }), "{e}");
    let e = y
        .backward_with(BackwardOptions::default().gradient(&c(&[1.0, 2.0, 3.0], &[3])))
        .unwrap_err();
    assert!(matches!(e, Error::SeedShape { .. }), "{e}");
    assert!(
        e.to_string().contains("[3]") && e.to_string().contains("[2]"),
        "{e}"
    );
    // The failed attempts did no work: the graph is still usable.
    y.backward_with(BackwardOptions::default().gradient(&c(&[1.0, 10.0], &[2])))
        .unwrap();
    assert_eq!(w.grad().unwrap().to_vec().unwrap(), vec![2.0, 20.0]);
}

#[test]
fn backward_on_a_leaf_seeds_its_gradient() {
    let w = leaf(&[1.0, 2.0], &[2]);
    w.backward_with(BackwardOptions::default().gradient(&c(&[3.0, 4.0], &[2])))
        .unwrap();
    assert_eq!(w.grad().unwrap().to_vec().unwrap(), vec![3.0, 4.0]);
}

#[test]
fn no_grad_records_nothing() {
    let w = leaf(&[1.0], &[1]);
    let y = {
        let _g = no_grad();
        w.mul_scalar(2.0).unwrap()
    };
    assert!(!y.is_requires_grad() && y.grad_fn_name().is_none());
    let z = w.mul_scalar(2.0).unwrap();
    assert_eq!(z.grad_fn_name(), Some("mul_scalar"));
}

#[test]
fn requires_grad_only_on_leaves() {
    let w = leaf(&[1.0], &[1]);
    let y = w.mul_scalar(2.0).unwrap();
    for err in [
        y.clone().requires_grad().unwrap_err(),
        y.requires_grad_(true).unwrap_err(),
        y.requires_grad_(false).unwrap_err(),
    ] {
        let msg = err.to_string();
        assert!(
            msg.contains("requires_grad_") && msg.contains("leaf") && msg.contains("mul_scalar"),
            "{msg}"
        );
    }
    // The failed calls changed nothing: y still carries its record.
    assert!(y.is_requires_grad() && y.grad_fn_name() == Some("mul_scalar"));
    assert!(y.detach().requires_grad().is_ok());
}

/// The flag is shared by every clone: a clone taken before `requires_grad` requires
/// gradients too and receives the gradient of backward.
#[test]
fn a_clone_taken_before_requires_grad_receives_the_gradient() {
    let x = c(&[1.0, -2.0, 3.0], &[3]);
    let kept = x.clone();
    assert!(!kept.is_requires_grad());
    let marked = x.requires_grad().unwrap();
    assert!(kept.is_requires_grad() && kept.is_leaf());
    marked
        .mul_scalar(3.0)
        .unwrap()
        .sum()
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(kept.grad().unwrap().to_vec().unwrap(), [3.0, 3.0, 3.0]);
    // The in-place form on a clone: the original sees it, and an operation on the
    // original is recorded.
    let y = c(&[2.0], &[1]);
    let alias = y.clone();
    assert!(std::ptr::eq(alias.requires_grad_(true).unwrap(), &alias));
    let z = y.mul(&y).unwrap();
    assert_eq!(z.grad_fn_name(), Some("mul"));
    z.backward().unwrap();
    assert_eq!(alias.grad().unwrap().to_vec().unwrap(), [4.0]);
    // Turning it off again: operations on any clone are no longer recorded, and
    // in-place changes are allowed in grad mode.
    y.requires_grad_(false).unwrap();
    assert!(!alias.is_requires_grad());
    assert!(alias.mul(&alias).unwrap().grad_fn_name().is_none());
    y.fill_(1.0).unwrap();
    assert_eq!(alias.to_vec().unwrap(), [1.0]);
    // A detached tensor has its own flag.
    let d = alias.detach();
    d.requires_grad_(true).unwrap();
    assert!(!alias.is_requires_grad());
}

#[test]
fn gradients_flow_only_to_inputs_that_need_them() {
    let w = leaf(&[2.0], &[1]);
    let x = c(&[3.0], &[1]);
    w.mul(&x).unwrap().sum().unwrap().backward().unwrap();
    assert_eq!(w.grad().unwrap().to_vec().unwrap(), vec![3.0]);
    assert!(x.grad().is_none());
}

#[test]
fn very_long_chains_neither_recurse_in_backward_nor_in_drop() {
    let x = leaf(&[1.0], &[1]);
    let mut y = x.clone();
    for _ in 0..200_000 {
        y = y.add_scalar(0.0).unwrap();
    }
    y.sum().unwrap().backward().unwrap();
    assert_eq!(x.grad().unwrap().to_vec().unwrap(), vec![1.0]);
    drop(y);
}

#[test]
fn views_share_storage_and_gradients_map_back() {
    let x = leaf(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let t = x.t().unwrap();
    assert!(t.shares_storage(&x) && !t.is_contiguous());
    let s = t.slice(0, 0, 3, 2).unwrap(); // rows 0 and 2 of the transpose
    assert_eq!(s.to_vec().unwrap(), vec![1.0, 4.0, 3.0, 6.0]);
    let w = c(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    s.mul(&w).unwrap().sum().unwrap().backward().unwrap();
    assert_eq!(
        x.grad().unwrap().to_vec().unwrap(),
        vec![1.0, 0.0, 3.0, 2.0, 0.0, 4.0]
    );
    assert_eq!(x.grad().unwrap().dims(), &[2, 3]);
}
