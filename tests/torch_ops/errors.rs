//! Errors that PyTorch also raises: each must be an `Err` naming the operator (and the
//! shapes or argument at fault), never a panic.

use super::run::panic_message;
use super::T;
use exactgrad::prelude::*;
use std::panic::{catch_unwind, AssertUnwindSafe};

fn t(shape: &[usize]) -> T {
    let n: usize = shape.iter().product();
    let data = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
    T::from_vec(&ScalarRefBackend, data, shape.to_vec())
        .unwrap()
        .requires_grad()
        .unwrap()
}

/// `r` must be an `Err` whose message contains every needle (the operator first).
#[track_caller]
fn expect_err(what: &str, r: exactgrad::autograd::Result<T>, needles: &[&str]) {
    match r {
        Ok(t) => panic!(
            "{what}: expected an error, got a tensor of shape {:?}",
            t.dims()
        ),
        Err(e) => {
            let msg = e.to_string();
            for n in needles {
                assert!(
                    msg.contains(n),
                    "{what}: the error message `{msg}` does not mention `{n}`"
                );
            }
        }
    }
}

/// Runs `f`, turning a panic into a test failure that says the call panicked.
#[track_caller]
fn no_panic(
    what: &str,
    f: impl FnOnce() -> exactgrad::autograd::Result<T>,
) -> exactgrad::autograd::Result<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        panic!(
            "{what}: panicked instead of returning Err: {}",
            panic_message(&*p)
        )
    })
}

#[test]
fn errors_binary_shape_mismatch() {
    type BinOp = fn(&T, &T) -> exactgrad::autograd::Result<T>;
    let ops: [(&str, BinOp); 4] = [
        ("add", T::add),
        ("sub", T::sub),
        ("mul", T::mul),
        ("div", T::div),
    ];
    for (name, f) in ops {
        for (a, b) in [
            (&[2usize, 3][..], &[4usize, 3][..]),
            (&[3], &[4]),
            (&[2, 3, 4], &[3, 3]),
            (&[2, 1, 3], &[4, 2]),
        ] {
            let (x, y) = (t(a), t(b));
            let r = no_panic(name, || f(&x, &y));
            expect_err(
                &format!("{name} {a:?} {b:?}"),
                r,
                &[name, &format!("{a:?}"), &format!("{b:?}")],
            );
        }
    }
    let (c, x, y) = (t(&[2, 3]), t(&[4, 3]), t(&[3]));
    expect_err(
        "where",
        no_panic("where", || T::where_cond(&c, &x, &y)),
        &["where", "[2, 3]", "[4, 3]"],
    );
    let (c, x, y) = (t(&[3]), t(&[3]), t(&[2, 4]));
    expect_err(
        "where",
        no_panic("where", || T::where_cond(&c, &x, &y)),
        &["where", "[2, 4]"],
    );
    let (x, y) = (t(&[2, 3]), t(&[4, 3]));
    expect_err(
        "mse_loss",
        no_panic("mse_loss", || x.mse_loss(&y, Reduction::Mean)),
        &["mse_loss", "[2, 3]", "[4, 3]"],
    );
}

#[test]
fn errors_matmul_and_linear() {
    let cases: [(&[usize], &[usize]); 3] = [(&[2, 3], &[4, 5]), (&[2, 3, 4], &[5, 2]), (&[], &[3])];
    for (a, b) in cases {
        let (x, y) = (t(a), t(b));
        let r = no_panic("matmul", || x.matmul(&y));
        expect_err(
            &format!("matmul {a:?} {b:?}"),
            r,
            &["matmul", &format!("{a:?}"), &format!("{b:?}")],
        );
    }
    let (x, w, bias) = (t(&[3, 4]), t(&[5, 3]), t(&[5]));
    expect_err(
        "linear in_features",
        no_panic("linear", || x.linear(&w, Some(&bias))),
        &["linear", "[3, 4]", "[5, 3]"],
    );
    let (x, w, bias) = (t(&[3, 4]), t(&[5, 4]), t(&[4]));
    expect_err(
        "linear bias",
        no_panic("linear", || x.linear(&w, Some(&bias))),
        &["linear", "[4]", "[5, 4]"],
    );
    let (x, w) = (t(&[3, 4]), t(&[2, 5, 4]));
    expect_err(
        "linear 3-D weight",
        no_panic("linear", || x.linear(&w, None)),
        &["linear", "[2, 5, 4]"],
    );
}

/// An error must name the shapes the caller passed: not the 1-D operands promoted to
/// matrices, nor only the batch dimensions that failed to broadcast.
#[test]
fn errors_matmul_name_the_shapes_given() {
    let cases: [(&[usize], &[usize]); 5] = [
        (&[3], &[4]),
        (&[3], &[4, 5]),
        (&[2, 3], &[4]),
        (&[2, 3, 4], &[3, 4, 5]),
        (&[3], &[2, 4, 5]),
    ];
    for (a, b) in cases {
        let (x, y) = (t(a), t(b));
        let r = no_panic("matmul", || x.matmul(&y));
        expect_err(
            &format!("matmul {a:?} {b:?}"),
            r,
            &["matmul", &format!("{a:?}"), &format!("{b:?}")],
        );
    }
}

/// An operator name, a call that must fail, and what its message must mention.
type ErrCase<'a> = (
    &'static str,
    Box<dyn Fn() -> exactgrad::autograd::Result<T> + 'a>,
    Vec<&'static str>,
);

#[test]
fn errors_bad_dims() {
    let x = t(&[2, 3]);
    let calls: Vec<ErrCase<'_>> = vec![
        (
            "sum",
            Box::new(|| x.sum_dims(&[2], false)),
            vec!["sum", "2", "rank 2"],
        ),
        (
            "sum",
            Box::new(|| x.sum_dims(&[-3], true)),
            vec!["sum", "-3", "rank 2"],
        ),
        (
            "sum",
            Box::new(|| x.sum_dims(&[0, -2], false)),
            vec!["sum", "more than once"],
        ),
        (
            "mean",
            Box::new(|| x.mean_dims(&[5], false)),
            vec!["mean", "5", "rank 2"],
        ),
        (
            "mean",
            Box::new(|| x.mean_dims(&[1, 1], false)),
            vec!["mean", "more than once"],
        ),
        (
            "softmax",
            Box::new(|| x.softmax(2)),
            vec!["softmax", "2", "rank 2"],
        ),
        (
            "log_softmax",
            Box::new(|| x.log_softmax(-3)),
            vec!["log_softmax", "-3", "rank 2"],
        ),
        (
            "transpose",
            Box::new(|| x.transpose(0, 2)),
            vec!["transpose", "2", "rank 2"],
        ),
        (
            "permute",
            Box::new(|| x.permute(&[0])),
            vec!["permute", "[0]"],
        ),
        (
            "permute",
            Box::new(|| x.permute(&[1, 1])),
            vec!["permute", "[1, 1]"],
        ),
        (
            "narrow",
            Box::new(|| x.narrow(1, 2, 2)),
            vec!["narrow", "[2, 3]"],
        ),
        (
            "narrow",
            Box::new(|| x.narrow(2, 0, 1)),
            vec!["narrow", "2", "rank 2"],
        ),
        (
            "slice",
            Box::new(|| x.slice(-3, 0, 1, 1)),
            vec!["slice", "-3", "rank 2"],
        ),
        (
            "slice",
            Box::new(|| x.slice(0, 0, 1, 0)),
            vec!["slice", "step"],
        ),
        (
            "unsqueeze",
            Box::new(|| x.unsqueeze(3)),
            vec!["unsqueeze", "3"],
        ),
        ("flatten", Box::new(|| x.flatten(1, 0)), vec!["flatten"]),
        (
            "flatten",
            Box::new(|| x.flatten(0, 2)),
            vec!["flatten", "2", "rank 2"],
        ),
        (
            "reshape",
            Box::new(|| x.reshape([4, 2])),
            vec!["reshape", "[2, 3]", "[4, 2]"],
        ),
        (
            "reshape_infer",
            Box::new(|| x.reshape_infer(&[-1, -1])),
            vec!["reshape_infer", "exactly one", "-1"],
        ),
        (
            "reshape_infer",
            Box::new(|| x.reshape_infer(&[2, 3])),
            vec!["reshape_infer", "exactly one", "use reshape"],
        ),
        (
            "reshape_infer",
            Box::new(|| x.reshape_infer(&[-2, 3])),
            vec!["reshape_infer", "-2"],
        ),
        (
            "reshape_infer",
            Box::new(|| x.reshape_infer(&[4, -1])),
            vec!["reshape_infer", "[2, 3]", "[4, -1]"],
        ),
        (
            "view_infer",
            Box::new(|| x.view_infer(&[-1, 2, -1])),
            vec!["view_infer", "exactly one"],
        ),
        (
            "view_infer",
            Box::new(|| x.transpose(0, 1)?.view_infer(&[-1])),
            vec!["view_infer", "[3, 2]"],
        ),
        (
            "view",
            Box::new(|| x.transpose(0, 1)?.view([6])),
            vec!["view", "[3, 2]"],
        ),
        (
            "expand",
            Box::new(|| x.expand(&[4, 3, 2])),
            vec!["expand", "[2, 3]", "[4, 3, 2]"],
        ),
        (
            "expand",
            Box::new(|| x.expand(&[3])),
            vec!["expand", "[2, 3]", "[3]"],
        ),
        (
            "concat",
            Box::new(|| T::concat(&[&x, &x], 2)),
            vec!["concat", "2", "rank 2"],
        ),
        (
            "concat",
            Box::new(|| T::concat(&[&x, &t(&[3, 2])], 0)),
            vec!["concat", "[2, 3]", "[3, 2]"],
        ),
        (
            "concat",
            Box::new(|| T::concat(&[&x, &t(&[2, 3, 1])], 0)),
            vec!["concat", "[2, 3]", "[2, 3, 1]"],
        ),
        ("concat", Box::new(|| T::concat(&[], 0)), vec!["concat"]),
        (
            "stack",
            Box::new(|| T::stack(&[&x, &x], 3)),
            vec!["stack", "3"],
        ),
        (
            "stack",
            Box::new(|| T::stack(&[&x, &x], -4)),
            vec!["stack", "-4"],
        ),
        (
            "stack",
            Box::new(|| T::stack(&[&x, &t(&[3, 2])], 0)),
            vec!["stack", "[2, 3]", "[3, 2]"],
        ),
        ("clamp", Box::new(|| x.clamp(None, None)), vec!["clamp"]),
    ];
    for (name, f, needles) in &calls {
        let r = no_panic(name, f);
        expect_err(name, r, needles);
    }
}

#[test]
fn errors_invalid_labels() {
    let logits = t(&[3, 4]);
    let ce = |targets: &[i64], options: CrossEntropyOptions| {
        no_panic("cross_entropy", || logits.cross_entropy(targets, options))
    };
    let d = CrossEntropyOptions::default();
    expect_err(
        "label = classes",
        ce(&[0, 4, 1], d),
        &["cross_entropy", "4", "4 classes"],
    );
    expect_err(
        "negative label",
        ce(&[0, 1, -1], d),
        &["cross_entropy", "-1", "4 classes"],
    );
    expect_err(
        "default ignore index is -100",
        ce(&[-100, 1, -7], d),
        &["cross_entropy", "-7"],
    );
    let custom = CrossEntropyOptions {
        ignore_index: 2,
        ..d
    };
    expect_err(
        "-100 is a label when ignore_index = 2",
        ce(&[-100, 1, 2], custom),
        &["cross_entropy", "-100"],
    );
    expect_err(
        "too few targets",
        ce(&[0, 1], d),
        &["cross_entropy", "[3, 4]", "2 targets"],
    );
    expect_err(
        "too many targets",
        ce(&[0, 1, 2, 3], d),
        &["cross_entropy", "[3, 4]", "4 targets"],
    );
    let bad_smoothing = CrossEntropyOptions {
        label_smoothing: 1.5,
        ..d
    };
    expect_err(
        "label_smoothing > 1",
        ce(&[0, 1, 2], bad_smoothing),
        &["cross_entropy", "label_smoothing"],
    );
    let scalar = T::scalar(&ScalarRefBackend, 1.0).unwrap();
    expect_err(
        "scalar logits",
        no_panic("cross_entropy", || scalar.cross_entropy(&[0], d)),
        &["cross_entropy", "scalar"],
    );
    let nchw = t(&[2, 3, 2]);
    expect_err(
        "[N, C, d] label out of range",
        no_panic("cross_entropy", || nchw.cross_entropy(&[0, 1, 2, 3], d)),
        &["cross_entropy", "3", "3 classes"],
    );
    // What PyTorch accepts must be accepted: a label equal to a custom ignore index.
    let neg_ignore = CrossEntropyOptions {
        ignore_index: -1,
        ..d
    };
    assert!(
        ce(&[0, -1, 3], neg_ignore).is_ok(),
        "ignore_index = -1 must accept label -1"
    );
}
