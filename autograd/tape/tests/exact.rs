//! In f32 the tape computes the bits of the eager engine on `ScalarRefBackend` (exact
//! mode): every operator's values and gradients, and a small network's gradients.

use exactgrad_autograd::{BackwardOptions, CrossEntropyOptions, Reduction, Tensor};
use exactgrad_backends::ScalarRefBackend;
use exactgrad_core::Philox;
use exactgrad_tape::operators::*;
use exactgrad_tape::{Arena, Tape};

const B: ScalarRefBackend = ScalarRefBackend;

fn leaf(v: &[f32]) -> Tensor<ScalarRefBackend> {
    Tensor::from_slice(&B, v, [v.len()])
        .unwrap()
        .requires_grad()
        .unwrap()
}

fn matrix(v: &[f32], rows: usize, cols: usize) -> Tensor<ScalarRefBackend> {
    Tensor::from_slice(&B, v, [rows, cols])
        .unwrap()
        .requires_grad()
        .unwrap()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn grad(t: &Tensor<ScalarRefBackend>) -> Vec<u32> {
    bits(&t.grad().expect("eager gradient").to_vec().unwrap())
}

fn random(rng: &mut Philox, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|_| rng.uniform(lo, hi)).collect()
}

/// Runs one operator of one or two vector inputs on the tape and eagerly, with the same
/// output seed, and compares outputs and input gradients bit for bit.
macro_rules! compare {
    ($name:literal, $ty:ident, |$g:ident, $a:ident, $y:ident| $tape_op:expr, |$ea:ident| $eager_op:expr, $x:expr, $out:expr) => {{
        let xv: Vec<f32> = $x;
        let seed: Vec<f32> = (0..$out).map(|i| 0.5 + 0.25 * i as f32).collect();
        let mut arena = Arena::<1024>::new();
        let tape: Tape<f32> = Tape::new(&mut arena);
        tape.register_operator::<$ty<f32>>();
        let mut xb = xv.clone();
        let mut yb = vec![0.0f32; $out];
        let mut $a = tape.parameter(&mut xb);
        let mut $y = tape.output(&mut yb);
        {
            let mut $g = tape.graph();
            let r = $tape_op;
            assert!(
                $g.backward_with_seed(r, &seed),
                "{}: {}",
                $name,
                tape.status()
            );
        }
        let $ea = leaf(&xv);
        let ey = $eager_op;
        ey.backward_with(
            BackwardOptions::default()
                .gradient(&Tensor::from_slice(&B, &seed, ey.dims().to_vec()).unwrap()),
        )
        .unwrap();
        assert_eq!(
            bits($y.values()),
            bits(&ey.to_vec().unwrap()),
            "{}: values",
            $name
        );
        assert_eq!(bits($a.grad()), grad(&$ea), "{}: gradient", $name);
    }};
}

macro_rules! compare2 {
    ($name:literal, $ty:ident, |$g:ident, $a:ident, $b:ident, $y:ident| $tape_op:expr, |$ea:ident, $eb:ident| $eager_op:expr, $x:expr, $z:expr, $out:expr) => {{
        let (xv, zv): (Vec<f32>, Vec<f32>) = ($x, $z);
        let seed: Vec<f32> = (0..$out).map(|i| 0.5 + 0.25 * i as f32).collect();
        let mut arena = Arena::<1024>::new();
        let tape: Tape<f32> = Tape::new(&mut arena);
        tape.register_operator::<$ty<f32>>();
        let (mut xb, mut zb) = (xv.clone(), zv.clone());
        let mut yb = vec![0.0f32; $out];
        let mut $a = tape.parameter(&mut xb);
        let mut $b = tape.parameter(&mut zb);
        let mut $y = tape.output(&mut yb);
        {
            let mut $g = tape.graph();
            let r = $tape_op;
            assert!($g.backward_with_seed(r, &seed), "{}: {}", $name, tape.status());
        }
        let ($ea, $eb) = (leaf(&xv), leaf(&zv));
        let ey = $eager_op;
        ey.backward_with(BackwardOptions::default().gradient(&Tensor::from_slice(&B, &seed, ey.dims().to_vec()).unwrap())).unwrap();
        assert_eq!(bits($y.values()), bits(&ey.to_vec().unwrap()), "{}: values", $name);
        assert_eq!(bits($a.grad()), grad(&$ea), "{}: gradient of the first input", $name);
        assert_eq!(bits($b.grad()), grad(&$eb), "{}: gradient of the second input", $name);
    }};
}

#[test]
fn every_operator_matches_the_eager_engine() {
    let mut rng = Philox::new(7);
    for _ in 0..20 {
        let n = 1 + (rng.below(9) as usize);
        let x = random(&mut rng, n, -3.0, 3.0);
        let z = random(&mut rng, n, -3.0, 3.0);
        let pos = random(&mut rng, n, 0.01, 5.0);
        compare!(
            "relu",
            Relu,
            |g, a, y| relu(&mut g, &a, &mut y),
            |e| e.relu().unwrap(),
            x.clone(),
            n
        );
        compare!(
            "sigmoid",
            Sigmoid,
            |g, a, y| sigmoid(&mut g, &a, &mut y),
            |e| e.sigmoid().unwrap(),
            x.clone(),
            n
        );
        compare!(
            "tanh",
            Tanh,
            |g, a, y| tanh(&mut g, &a, &mut y),
            |e| e.tanh().unwrap(),
            x.clone(),
            n
        );
        compare!(
            "exp",
            Exp,
            |g, a, y| exp(&mut g, &a, &mut y),
            |e| e.exp().unwrap(),
            x.clone(),
            n
        );
        compare!(
            "log",
            Log,
            |g, a, y| log(&mut g, &a, &mut y),
            |e| e.log().unwrap(),
            pos.clone(),
            n
        );
        compare!(
            "scale",
            Scale,
            |g, a, y| scale(&mut g, &a, -0.37, &mut y),
            |e| e.mul_scalar(-0.37).unwrap(),
            x.clone(),
            n
        );
        compare!(
            "softmax",
            Softmax,
            |g, a, y| softmax(&mut g, &a, &mut y),
            |e| e.softmax(0).unwrap(),
            x.clone(),
            n
        );
        compare!(
            "sum",
            Sum,
            |g, a, y| sum(&mut g, &a, &mut y),
            |e| e.sum().unwrap(),
            x.clone(),
            1
        );
        let t = rng.below(n as u32) as usize;
        compare!(
            "cross_entropy",
            CrossEntropy,
            |g, a, y| cross_entropy(&mut g, &a, t, &mut y),
            |e| e
                .cross_entropy(&[t as i64], CrossEntropyOptions::default())
                .unwrap(),
            x.clone(),
            1
        );
        compare2!(
            "add",
            Add,
            |g, a, b, y| add(&mut g, &a, &b, &mut y),
            |p, q| p.add(&q).unwrap(),
            x.clone(),
            z.clone(),
            n
        );
        compare2!(
            "sub",
            Sub,
            |g, a, b, y| sub(&mut g, &a, &b, &mut y),
            |p, q| p.sub(&q).unwrap(),
            x.clone(),
            z.clone(),
            n
        );
        compare2!(
            "mul",
            Mul,
            |g, a, b, y| mul(&mut g, &a, &b, &mut y),
            |p, q| p.mul(&q).unwrap(),
            x.clone(),
            z.clone(),
            n
        );
        compare2!(
            "dot",
            Dot,
            |g, a, b, y| dot(&mut g, &a, &b, &mut y),
            |p, q| p.matmul(&q).unwrap(),
            x.clone(),
            z.clone(),
            1
        );
        compare2!(
            "mse",
            Mse,
            |g, a, b, y| mse(&mut g, &a, &b, &mut y),
            |p, q| p.mse_loss(&q, Reduction::Mean).unwrap(),
            x.clone(),
            z.clone(),
            1
        );
    }
}

#[test]
fn matvec_and_linear_match_the_eager_engine() {
    let mut rng = Philox::new(11);
    for _ in 0..20 {
        let rows = 1 + rng.below(6) as usize;
        let cols = 1 + rng.below(6) as usize;
        let (wv, xv, bv) = (
            random(&mut rng, rows * cols, -1.0, 1.0),
            random(&mut rng, cols, -2.0, 2.0),
            random(&mut rng, rows, -1.0, 1.0),
        );
        let seed: Vec<f32> = random(&mut rng, rows, -1.0, 1.0);
        for with_bias in [false, true] {
            let mut arena = Arena::<2048>::new();
            let tape: Tape<f32> = Tape::new(&mut arena);
            tape.register_operator::<MatVec<f32>>();
            tape.register_operator::<Linear<f32>>();
            let (mut wb, mut xb, mut bb, mut yb) =
                (wv.clone(), xv.clone(), bv.clone(), vec![0.0f32; rows]);
            let mut w = tape.parameter_matrix(&mut wb, rows, cols);
            let mut x = tape.parameter(&mut xb);
            let mut b = tape.parameter(&mut bb);
            let mut y = tape.output(&mut yb);
            {
                let mut g = tape.graph();
                let r = if with_bias {
                    linear(&mut g, &w, &x, &b, &mut y)
                } else {
                    matvec(&mut g, &w, &x, &mut y)
                };
                assert!(g.backward_with_seed(r, &seed));
            }
            let (ew, ex, eb) = (matrix(&wv, rows, cols), leaf(&xv), leaf(&bv));
            let ey = if with_bias {
                ex.linear(&ew, Some(&eb)).unwrap()
            } else {
                ew.matmul(&ex).unwrap()
            };
            ey.backward_with(
                BackwardOptions::default()
                    .gradient(&Tensor::from_slice(&B, &seed, [rows]).unwrap()),
            )
            .unwrap();
            assert_eq!(
                bits(y.values()),
                bits(&ey.to_vec().unwrap()),
                "values (bias {with_bias})"
            );
            assert_eq!(
                bits(w.grad()),
                grad(&ew),
                "weight gradient (bias {with_bias})"
            );
            assert_eq!(
                bits(x.grad()),
                grad(&ex),
                "input gradient (bias {with_bias})"
            );
            if with_bias {
                assert_eq!(bits(b.grad()), grad(&eb), "bias gradient");
            }
        }
    }
}

#[test]
fn a_network_matches_the_eager_engine_over_several_samples() {
    const IN: usize = 5;
    const HID: usize = 7;
    const OUT: usize = 3;
    let mut rng = Philox::new(3);
    let (w1v, b1v) = (
        random(&mut rng, HID * IN, -0.8, 0.8),
        random(&mut rng, HID, -0.2, 0.2),
    );
    let (w2v, b2v) = (
        random(&mut rng, OUT * HID, -0.8, 0.8),
        random(&mut rng, OUT, -0.2, 0.2),
    );
    let samples: Vec<(Vec<f32>, usize)> = (0..4)
        .map(|_| {
            (
                random(&mut rng, IN, -1.0, 1.0),
                rng.below(OUT as u32) as usize,
            )
        })
        .collect();

    // Eager: gradients of the parameters accumulate over the samples.
    let (ew1, eb1, ew2, eb2) = (
        matrix(&w1v, HID, IN),
        leaf(&b1v),
        matrix(&w2v, OUT, HID),
        leaf(&b2v),
    );
    for (x, t) in &samples {
        let x = Tensor::from_slice(&B, x, [IN]).unwrap();
        let h = x.linear(&ew1, Some(&eb1)).unwrap().tanh().unwrap();
        let z = h.linear(&ew2, Some(&eb2)).unwrap();
        z.cross_entropy(&[*t as i64], CrossEntropyOptions::default())
            .unwrap()
            .backward()
            .unwrap();
    }

    let mut arena = Arena::<4096>::new();
    let tape: Tape<f32> = Tape::new(&mut arena);
    tape.register_operator::<Linear<f32>>();
    tape.register_operator::<Tanh<f32>>();
    tape.register_operator::<CrossEntropy<f32>>();
    let (mut w1b, mut b1b, mut w2b, mut b2b) = (w1v.clone(), b1v.clone(), w2v.clone(), b2v.clone());
    let mut w1 = tape.parameter_matrix(&mut w1b, HID, IN);
    let mut b1 = tape.parameter(&mut b1b);
    let mut w2 = tape.parameter_matrix(&mut w2b, OUT, HID);
    let mut b2 = tape.parameter(&mut b2b);
    let (mut hb, mut ab, mut zb, mut lb) = ([0.0f32; HID], [0.0f32; HID], [0.0f32; OUT], [0.0f32]);
    let mut h = tape.output(&mut hb);
    let mut a = tape.output(&mut ab);
    let mut z = tape.output(&mut zb);
    let mut l = tape.output(&mut lb);
    tape.begin_graph();
    for (x, t) in &samples {
        tape.rewind_graph();
        let x = tape.input(x);
        let mut g = tape.graph();
        let hr = linear(&mut g, &w1, &x, &b1, &mut h);
        let ar = tanh(&mut g, hr, &mut a);
        let zr = linear(&mut g, &w2, ar, &b2, &mut z);
        let lr = cross_entropy(&mut g, zr, *t, &mut l);
        assert!(g.backward(lr));
    }
    assert_eq!(bits(w1.grad()), grad(&ew1));
    assert_eq!(bits(b1.grad()), grad(&eb1));
    assert_eq!(bits(w2.grad()), grad(&ew2));
    assert_eq!(bits(b2.grad()), grad(&eb2));
}

#[test]
fn a_row_whose_maximum_is_negative_zero_matches_the_eager_engine() {
    // The scalar kernels take a maximum of −0 as +0, so log-softmax of [−0] is −0 and its
    // cross entropy +0 (with a maximum of −0 they would be +0 and −0).
    for z in [
        vec![-0.0f32],
        vec![0.0],
        vec![0.5],
        vec![-0.0, -200.0],
        vec![-0.0, -0.0],
        vec![-5.0, -0.0],
    ] {
        compare!(
            "softmax",
            Softmax,
            |g, a, y| softmax(&mut g, &a, &mut y),
            |e| e.softmax(0).unwrap(),
            z.clone(),
            z.len()
        );
        compare!(
            "cross_entropy",
            CrossEntropy,
            |g, a, y| cross_entropy(&mut g, &a, 0, &mut y),
            |e| e
                .cross_entropy(&[0], CrossEntropyOptions::default())
                .unwrap(),
            z.clone(),
            1
        );
    }
}
