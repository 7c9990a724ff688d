//! The operators `+ - * /` and unary `-` (`autograd/src/ops/operators.rs`): each is one
//! call of its named method, so the value, the gradient and the record are the method's,
//! bit for bit, with broadcasting and on strided views; a mismatch is an error.

use exactgrad_autograd::{Result, Tensor};
use exactgrad_backends::{ExactBackend, ScalarRefBackend};
use exactgrad_core::{Backend, Philox};

fn bits<B: Backend>(t: &Tensor<B>) -> Vec<u32> {
    t.to_vec().unwrap().iter().map(|v| v.to_bits()).collect()
}

/// `[value bits, gradient bits of a, gradient bits of b, record name]` of `f(a, b)`.
type Outcome = (Vec<u32>, Vec<u32>, Vec<u32>, String);

fn run<B: Backend>(
    a: &Tensor<B>,
    b: &Tensor<B>,
    f: impl Fn(&Tensor<B>, &Tensor<B>) -> Result<Tensor<B>>,
) -> Outcome {
    let (a, b) = (
        a.detach().requires_grad().unwrap(),
        b.detach().requires_grad().unwrap(),
    );
    let y = f(&a, &b).unwrap();
    let debug = format!("{y:?}");
    let record = debug[debug.find("grad_fn").expect("recorded")..].to_string();
    // A seed that is not all ones, so that the backward's arithmetic shows.
    let seed = y
        .detach()
        .mul_scalar(0.37)
        .unwrap()
        .add_scalar(1.5)
        .unwrap();
    y.mul(&seed).unwrap().sum().unwrap().backward().unwrap();
    (
        bits(&y),
        bits(&a.grad().unwrap()),
        bits(&b.grad().unwrap()),
        record,
    )
}

fn check_backend<B: Backend>(be: &B) {
    let mut rng = Philox::new(11);
    let a = Tensor::rand_uniform(be, [3, 4], 0.5, 2.0, &mut rng).unwrap();
    // b broadcasts along the rows; bt is a strided view (a transpose) of a [4, 3] tensor.
    let b = Tensor::rand_uniform(be, [4], 0.5, 2.0, &mut rng).unwrap();
    let bt = Tensor::rand_uniform(be, [4, 3], 0.5, 2.0, &mut rng)
        .unwrap()
        .t()
        .unwrap();
    for other in [&b, &bt] {
        type Pair<B> = (
            fn(&Tensor<B>, &Tensor<B>) -> Result<Tensor<B>>,
            fn(&Tensor<B>, &Tensor<B>) -> Result<Tensor<B>>,
        );
        let pairs: [(&str, Pair<B>); 4] = [
            ("add", (|x, y| x + y, |x, y| x.add(y))),
            ("sub", (|x, y| x - y, |x, y| x.sub(y))),
            ("mul", (|x, y| x * y, |x, y| x.mul(y))),
            ("div", (|x, y| x / y, |x, y| x.div(y))),
        ];
        for (name, (op, method)) in pairs {
            assert_eq!(run(&a, other, op), run(&a, other, method), "{name}");
        }
        // Owned operands give the same as borrowed ones.
        let owned = run(&a, other, |x, y| x.clone() * y.clone());
        assert_eq!(owned, run(&a, other, |x, y| x.mul(y)));
        let mixed = run(&a, other, |x, y| (x - y.clone())? / x);
        assert_eq!(mixed, run(&a, other, |x, y| x.sub(y)?.div(x)));
    }
    // Scalars on either side; the other operand of `run` enters through a product so
    // that it has a gradient.
    type Scalar<B> = fn(&Tensor<B>) -> Result<Tensor<B>>;
    let scalars: [(&str, Scalar<B>, Scalar<B>); 9] = [
        ("x + c", |x| x + 0.3, |x| x.add_scalar(0.3)),
        ("c + x", |x| 0.3 + x, |x| x.add_scalar(0.3)),
        ("x - c", |x| x - 0.3, |x| x.sub_scalar(0.3)),
        ("c - x", |x| 1.0 - x, |x| x.rsub_scalar(1.0)),
        ("x * c", |x| x * 0.3, |x| x.mul_scalar(0.3)),
        ("c * x", |x| 0.3 * x, |x| x.mul_scalar(0.3)),
        ("x / c", |x| x / 0.3, |x| x.div_scalar(0.3)),
        ("c / x", |x| 0.3 / x, |x| x.rdiv_scalar(0.3)),
        ("-x", |x| -x, |x| x.neg()),
    ];
    for (name, op, method) in scalars {
        let via_op = run(&a, &b, |x, y| op(&x.mul(y)?));
        let via_method = run(&a, &b, |x, y| method(&x.mul(y)?));
        assert_eq!(via_op, via_method, "{name}");
        let owned = run(&a, &b, |x, y| op(&(x * y)?));
        assert_eq!(owned, via_method, "{name}, owned");
    }
}

#[test]
fn operators_are_their_methods_bit_for_bit() {
    check_backend(&ScalarRefBackend);
    check_backend(&ExactBackend::with_threads(2));
}

#[test]
fn scalar_forms_are_one_ieee_operation() {
    // Values where x - c, c - x and c / x round differently from x + (-c), -(x - c) and
    // c * (1/x) would not tell them apart; check against f32 arithmetic directly.
    let b = ScalarRefBackend;
    let v = [0.1f32, 3.0, -7.25, 1.0e-3, 123.456];
    let x = Tensor::from_slice(&b, &v, [5]).unwrap();
    let c = 0.7f32;
    let want = |f: fn(f32, f32) -> f32| v.iter().map(|&x| f(x, c).to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&(&x - c).unwrap()), want(|x, c| x - c));
    assert_eq!(bits(&(c - &x).unwrap()), want(|x, c| c - x));
    assert_eq!(bits(&(c / &x).unwrap()), want(|x, c| c / x));
    assert_eq!(bits(&(&x / c).unwrap()), want(|x, c| x / c));
    assert_eq!(bits(&(c * &x).unwrap()), want(|x, c| c * x));
    assert_eq!(bits(&(c + &x).unwrap()), want(|x, c| c + x));
}

#[test]
fn operator_shape_mismatch_is_an_error() {
    let b = ScalarRefBackend;
    let x = Tensor::zeros(&b, [2, 3]).unwrap();
    let y = Tensor::zeros(&b, [4]).unwrap();
    let err = (&x + &y).unwrap_err().to_string();
    assert!(err.contains("add"), "{err}");
    assert!((&x * &y).is_err() && (&x - &y).is_err() && (&x / &y).is_err());
}
