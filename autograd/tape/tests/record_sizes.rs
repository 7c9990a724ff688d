//! Measures the arena bytes one record of each operator takes, and prints them
//! (`cargo test -p exactgrad-tape --test suite record_sizes -- --nocapture`). `docs/tape.md`
//! quotes this table for a 64-bit target.

use exactgrad_tape::operators::*;
use exactgrad_tape::{record_size, Arena, Operator, Tape, TapeScalar};

/// Records one operation of `Op` on fresh views and returns the bytes the record took.
fn measure<T: TapeScalar, Op: Operator<T>>(run: fn(&Tape<T>) -> usize) -> usize {
    let bytes = {
        let mut arena = Arena::<4096>::new();
        let tape: Tape<T> = Tape::new(&mut arena);
        tape.register_operator::<Op>();
        let bytes = run(&tape);
        assert!(tape.good(), "{}: {}", Op::NAME, tape.status());
        bytes
    };
    assert_eq!(bytes, record_size::<T, Op>(), "{}", Op::NAME);
    bytes
}

macro_rules! unary {
    ($op:ident) => {
        |tape| {
            let (xv, mut yv) = ([T::ONE; 4], [T::ZERO; 4]);
            let x = tape.input(&xv);
            let mut y = tape.output(&mut yv);
            let mut g = tape.graph();
            $op(&mut g, &x, &mut y);
            g.record_bytes()
        }
    };
}

macro_rules! binary {
    ($op:ident, $out:expr) => {
        |tape| {
            let (av, bv, mut yv) = ([T::ONE; 4], [T::ONE; 4], [T::ZERO; $out]);
            let (a, b) = (tape.input(&av), tape.input(&bv));
            let mut y = tape.output(&mut yv);
            let mut g = tape.graph();
            $op(&mut g, &a, &b, &mut y);
            g.record_bytes()
        }
    };
}

fn table<T: TapeScalar>() -> Vec<(&'static str, usize)> {
    vec![
        ("add", measure::<T, Add<T>>(binary!(add, 4))),
        ("sub", measure::<T, Sub<T>>(binary!(sub, 4))),
        ("mul", measure::<T, Mul<T>>(binary!(mul, 4))),
        (
            "scale",
            measure::<T, Scale<T>>(|tape| {
                let (xv, mut yv) = ([T::ONE; 4], [T::ZERO; 4]);
                let x = tape.input(&xv);
                let mut y = tape.output(&mut yv);
                let mut g = tape.graph();
                scale(&mut g, &x, T::TWO, &mut y);
                g.record_bytes()
            }),
        ),
        ("relu", measure::<T, Relu<T>>(unary!(relu))),
        ("sigmoid", measure::<T, Sigmoid<T>>(unary!(sigmoid))),
        ("tanh", measure::<T, Tanh<T>>(unary!(tanh))),
        ("exp", measure::<T, Exp<T>>(unary!(exp))),
        ("log", measure::<T, Log<T>>(unary!(log))),
        ("dot", measure::<T, Dot<T>>(binary!(dot, 1))),
        (
            "matvec",
            measure::<T, MatVec<T>>(|tape| {
                let (wv, xv, mut yv) = ([T::ONE; 6], [T::ONE; 3], [T::ZERO; 2]);
                let w = tape.input_matrix(&wv, 2, 3);
                let x = tape.input(&xv);
                let mut y = tape.output(&mut yv);
                let mut g = tape.graph();
                matvec(&mut g, &w, &x, &mut y);
                g.record_bytes()
            }),
        ),
        (
            "linear",
            measure::<T, Linear<T>>(|tape| {
                let (wv, xv, bv, mut yv) = ([T::ONE; 6], [T::ONE; 3], [T::ONE; 2], [T::ZERO; 2]);
                let w = tape.input_matrix(&wv, 2, 3);
                let (x, b) = (tape.input(&xv), tape.input(&bv));
                let mut y = tape.output(&mut yv);
                let mut g = tape.graph();
                linear(&mut g, &w, &x, &b, &mut y);
                g.record_bytes()
            }),
        ),
        ("softmax", measure::<T, Softmax<T>>(unary!(softmax))),
        (
            "cross_entropy",
            measure::<T, CrossEntropy<T>>(|tape| {
                let (zv, mut yv) = ([T::ONE; 4], [T::ZERO]);
                let z = tape.input(&zv);
                let mut y = tape.output(&mut yv);
                let mut g = tape.graph();
                cross_entropy(&mut g, &z, 1, &mut y);
                g.record_bytes()
            }),
        ),
        ("mse", measure::<T, Mse<T>>(binary!(mse, 1))),
        (
            "sum",
            measure::<T, Sum<T>>(|tape| {
                let (xv, mut yv) = ([T::ONE; 4], [T::ZERO]);
                let x = tape.input(&xv);
                let mut y = tape.output(&mut yv);
                let mut g = tape.graph();
                sum(&mut g, &x, &mut y);
                g.record_bytes()
            }),
        ),
    ]
}

#[test]
fn bytes_per_record() {
    let (single, double) = (table::<f32>(), table::<f64>());
    println!("bytes per record ({}-bit target)", usize::BITS);
    println!("{:<14} {:>5} {:>5}", "operator", "f32", "f64");
    for ((name, a), (_, b)) in single.iter().zip(&double) {
        println!("{name:<14} {a:>5} {b:>5}");
    }
    // Every record keeps the arena aligned; none depends on the length of the data.
    assert!(single.iter().all(|&(_, b)| b % exactgrad_tape::ALIGN == 0));
}
