//! Every operator's gradient against central differences, in f64 and in f32.
//!
//! Each case makes every differentiable input a parameter, runs the operator with a fixed
//! seed `s` for the output gradient (so `L = Σ s_i · y_i`), and compares the gradient the
//! tape computes with `(L(p + h) − L(p − h)) / 2h` for every element of every input.

use exactgrad_tape::operators::*;
use exactgrad_tape::{Arena, Tape, TapeScalar};

const SEED: [f64; 4] = [0.7, -1.3, 0.4, 1.1];

fn conv<T: TapeScalar>(p: &[f64]) -> Vec<T> {
    p.iter().map(|&v| T::from_f64(v)).collect()
}

fn grads<T: TapeScalar>(g: &[T]) -> Vec<f64> {
    g.iter().map(|v| v.to_f64()).collect()
}

fn loss<T: TapeScalar>(y: &[T], seed: &[T]) -> f64 {
    y.iter()
        .zip(seed)
        .map(|(a, b)| a.to_f64() * b.to_f64())
        .sum()
}

fn check<T: TapeScalar>(name: &str, p0: &[f64], case: fn(&[f64]) -> (f64, Vec<f64>)) {
    let (_, analytic) = case(p0);
    assert_eq!(analytic.len(), p0.len(), "{name}: gradient length");
    let wide = core::mem::size_of::<T>() == 8;
    let (h, tol) = if wide { (1e-6, 1e-6) } else { (1e-2, 2e-2) };
    for k in 0..p0.len() {
        let mut p = p0.to_vec();
        p[k] = p0[k] + h;
        let (up, _) = case(&p);
        p[k] = p0[k] - h;
        let (down, _) = case(&p);
        let numeric = (up - down) / (2.0 * h);
        let err = (numeric - analytic[k]).abs();
        assert!(
            err <= tol * (1.0 + numeric.abs()),
            "{name} ({}): element {k}: analytic {} numeric {numeric}",
            if wide { "f64" } else { "f32" },
            analytic[k]
        );
    }
}

/// An element-wise operator of one input, as a gradient-check case.
macro_rules! unary_case {
    ($case:ident, $op:ident, $ty:ident) => {
        fn $case<T: TapeScalar>(p: &[f64]) -> (f64, Vec<f64>) {
            let seed: Vec<T> = conv(&SEED[..p.len()]);
            let mut arena = Arena::<1024>::new();
            let tape: Tape<T> = Tape::new(&mut arena);
            tape.register_operator::<$ty<T>>();
            let (mut xv, mut yv) = (conv::<T>(p), vec![T::ZERO; p.len()]);
            let mut x = tape.parameter(&mut xv);
            let mut y = tape.output(&mut yv);
            {
                let mut g = tape.graph();
                let r = $op(&mut g, &x, &mut y);
                assert!(g.backward_with_seed(r, &seed));
            }
            assert!(tape.good());
            (loss(y.values(), &seed), grads(x.grad()))
        }
    };
}

unary_case!(relu_case, relu, Relu);
unary_case!(sigmoid_case, sigmoid, Sigmoid);
unary_case!(tanh_case, tanh, Tanh);
unary_case!(exp_case, exp, Exp);
unary_case!(log_case, log, Log);
unary_case!(softmax_case, softmax, Softmax);

/// An element-wise operator of two inputs.
macro_rules! binary_case {
    ($case:ident, $op:ident, $ty:ident) => {
        binary_case!($case, $op, $ty, |n| n);
    };
    ($case:ident, $op:ident, $ty:ident, $out:expr) => {
        fn $case<T: TapeScalar>(p: &[f64]) -> (f64, Vec<f64>) {
            let n = p.len() / 2;
            let out: fn(usize) -> usize = $out;
            let seed: Vec<T> = conv(&SEED[..out(n)]);
            let mut arena = Arena::<1024>::new();
            let tape: Tape<T> = Tape::new(&mut arena);
            tape.register_operator::<$ty<T>>();
            let (mut av, mut bv, mut yv) = (
                conv::<T>(&p[..n]),
                conv::<T>(&p[n..]),
                vec![T::ZERO; out(n)],
            );
            let mut a = tape.parameter(&mut av);
            let mut b = tape.parameter(&mut bv);
            let mut y = tape.output(&mut yv);
            {
                let mut g = tape.graph();
                let r = $op(&mut g, &a, &b, &mut y);
                assert!(g.backward_with_seed(r, &seed));
            }
            assert!(tape.good());
            let mut gr = grads(a.grad());
            gr.extend(grads(b.grad()));
            (loss(y.values(), &seed), gr)
        }
    };
}

binary_case!(add_case, add, Add);
binary_case!(sub_case, sub, Sub);
binary_case!(mul_case, mul, Mul);
binary_case!(dot_case, dot, Dot, |_| 1);
binary_case!(mse_case, mse, Mse, |_| 1);

fn scale_case<T: TapeScalar>(p: &[f64]) -> (f64, Vec<f64>) {
    let seed: Vec<T> = conv(&SEED[..p.len()]);
    let mut arena = Arena::<1024>::new();
    let tape: Tape<T> = Tape::new(&mut arena);
    tape.register_operator::<Scale<T>>();
    let (mut xv, mut yv) = (conv::<T>(p), vec![T::ZERO; p.len()]);
    let mut x = tape.parameter(&mut xv);
    let mut y = tape.output(&mut yv);
    {
        let mut g = tape.graph();
        let r = scale(&mut g, &x, T::from_f64(-1.5), &mut y);
        assert!(g.backward_with_seed(r, &seed));
    }
    (loss(y.values(), &seed), grads(x.grad()))
}

fn sum_case<T: TapeScalar>(p: &[f64]) -> (f64, Vec<f64>) {
    let seed = [T::from_f64(0.7)];
    let mut arena = Arena::<1024>::new();
    let tape: Tape<T> = Tape::new(&mut arena);
    tape.register_operator::<Sum<T>>();
    let (mut xv, mut yv) = (conv::<T>(p), [T::ZERO]);
    let mut x = tape.parameter(&mut xv);
    let mut y = tape.output(&mut yv);
    {
        let mut g = tape.graph();
        let r = sum(&mut g, &x, &mut y);
        assert!(g.backward_with_seed(r, &seed));
    }
    (loss(y.values(), &seed), grads(x.grad()))
}

fn cross_entropy_case<T: TapeScalar>(p: &[f64]) -> (f64, Vec<f64>) {
    let mut arena = Arena::<1024>::new();
    let tape: Tape<T> = Tape::new(&mut arena);
    tape.register_operator::<CrossEntropy<T>>();
    let (mut zv, mut yv) = (conv::<T>(p), [T::ZERO]);
    let mut z = tape.parameter(&mut zv);
    let mut y = tape.output(&mut yv);
    {
        let mut g = tape.graph();
        let r = cross_entropy(&mut g, &z, 2, &mut y);
        assert!(g.backward(r));
    }
    (y.values()[0].to_f64(), grads(z.grad()))
}

const ROWS: usize = 3;
const COLS: usize = 4;

fn matvec_case<T: TapeScalar>(p: &[f64]) -> (f64, Vec<f64>) {
    let seed: Vec<T> = conv(&SEED[..ROWS]);
    let mut arena = Arena::<1024>::new();
    let tape: Tape<T> = Tape::new(&mut arena);
    tape.register_operator::<MatVec<T>>();
    let (mut wv, mut xv, mut yv) = (
        conv::<T>(&p[..ROWS * COLS]),
        conv::<T>(&p[ROWS * COLS..]),
        vec![T::ZERO; ROWS],
    );
    let mut w = tape.parameter_matrix(&mut wv, ROWS, COLS);
    let mut x = tape.parameter(&mut xv);
    let mut y = tape.output(&mut yv);
    {
        let mut g = tape.graph();
        let r = matvec(&mut g, &w, &x, &mut y);
        assert!(g.backward_with_seed(r, &seed));
    }
    let mut gr = grads(w.grad());
    gr.extend(grads(x.grad()));
    (loss(y.values(), &seed), gr)
}

fn linear_case<T: TapeScalar>(p: &[f64]) -> (f64, Vec<f64>) {
    let seed: Vec<T> = conv(&SEED[..ROWS]);
    let mut arena = Arena::<1024>::new();
    let tape: Tape<T> = Tape::new(&mut arena);
    tape.register_operator::<Linear<T>>();
    let (wp, rest) = p.split_at(ROWS * COLS);
    let (xp, bp) = rest.split_at(COLS);
    let (mut wv, mut xv, mut bv, mut yv) = (
        conv::<T>(wp),
        conv::<T>(xp),
        conv::<T>(bp),
        vec![T::ZERO; ROWS],
    );
    let mut w = tape.parameter_matrix(&mut wv, ROWS, COLS);
    let mut x = tape.parameter(&mut xv);
    let mut b = tape.parameter(&mut bv);
    let mut y = tape.output(&mut yv);
    {
        let mut g = tape.graph();
        let r = linear(&mut g, &w, &x, &b, &mut y);
        assert!(g.backward_with_seed(r, &seed));
    }
    let mut gr = grads(w.grad());
    gr.extend(grads(x.grad()));
    gr.extend(grads(b.grad()));
    (loss(y.values(), &seed), gr)
}

/// A chain of operators: `sum(softmax(tanh(W·x + b)) · exp(x₀…) )`-like composition,
/// exercising gradients that flow through several records and into shared inputs.
fn chain_case<T: TapeScalar>(p: &[f64]) -> (f64, Vec<f64>) {
    let mut arena = Arena::<4096>::new();
    let tape: Tape<T> = Tape::new(&mut arena);
    tape.register_operator::<Linear<T>>();
    tape.register_operator::<Tanh<T>>();
    tape.register_operator::<Softmax<T>>();
    tape.register_operator::<Exp<T>>();
    tape.register_operator::<Mul<T>>();
    tape.register_operator::<Sum<T>>();
    let (wp, rest) = p.split_at(ROWS * COLS);
    let (xp, bp) = rest.split_at(COLS);
    let (mut wv, mut xv, mut bv) = (conv::<T>(wp), conv::<T>(xp), conv::<T>(bp));
    let (mut hv, mut av, mut sv, mut ev, mut mv, mut lv) = (
        [T::ZERO; ROWS],
        [T::ZERO; ROWS],
        [T::ZERO; ROWS],
        [T::ZERO; ROWS],
        [T::ZERO; ROWS],
        [T::ZERO],
    );
    let mut w = tape.parameter_matrix(&mut wv, ROWS, COLS);
    let mut x = tape.parameter(&mut xv);
    let mut b = tape.parameter(&mut bv);
    let (mut h, mut a, mut s) = (
        tape.output(&mut hv),
        tape.output(&mut av),
        tape.output(&mut sv),
    );
    let (mut e, mut m, mut l) = (
        tape.output(&mut ev),
        tape.output(&mut mv),
        tape.output(&mut lv),
    );
    {
        let mut g = tape.graph();
        let hr = linear(&mut g, &w, &x, &b, &mut h);
        let ar = tanh(&mut g, hr, &mut a);
        let sr = softmax(&mut g, ar, &mut s);
        let er = exp(&mut g, &b, &mut e);
        let mr = mul(&mut g, sr, er, &mut m);
        let lr = sum(&mut g, mr, &mut l);
        assert!(g.backward(lr));
    }
    assert!(tape.good());
    let mut gr = grads(w.grad());
    gr.extend(grads(x.grad()));
    gr.extend(grads(b.grad()));
    (l.values()[0].to_f64(), gr)
}

const X4: [f64; 4] = [0.3, -1.2, 0.8, -0.45];
const P4: [f64; 4] = [0.3, 1.7, 0.8, 2.4];
const X8: [f64; 8] = [0.3, -1.2, 0.8, -0.45, 1.1, 0.25, -0.6, 0.9];

fn mat_params(extra: usize) -> Vec<f64> {
    (0..ROWS * COLS + COLS + extra)
        .map(|i| ((i * 7 % 11) as f64 - 5.0) * 0.13)
        .collect()
}

fn all<T: TapeScalar>() {
    check::<T>("relu", &X4, relu_case::<T>);
    check::<T>("sigmoid", &X4, sigmoid_case::<T>);
    check::<T>("tanh", &X4, tanh_case::<T>);
    check::<T>("exp", &X4, exp_case::<T>);
    check::<T>("log", &P4, log_case::<T>);
    check::<T>("softmax", &X4, softmax_case::<T>);
    check::<T>("scale", &X4, scale_case::<T>);
    check::<T>("add", &X8, add_case::<T>);
    check::<T>("sub", &X8, sub_case::<T>);
    check::<T>("mul", &X8, mul_case::<T>);
    check::<T>("dot", &X8, dot_case::<T>);
    check::<T>("mse", &X8, mse_case::<T>);
    check::<T>("sum", &X4, sum_case::<T>);
    check::<T>("cross_entropy", &X4, cross_entropy_case::<T>);
    check::<T>("matvec", &mat_params(0), matvec_case::<T>);
    check::<T>("linear", &mat_params(ROWS), linear_case::<T>);
    check::<T>("chain", &mat_params(ROWS), chain_case::<T>);
}

#[test]
fn every_operator_f64() {
    all::<f64>();
}

#[test]
fn every_operator_f32() {
    all::<f32>();
}
