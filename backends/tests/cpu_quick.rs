use exactgrad_backends::cpu::{CpuBackend, Isa};
use exactgrad_backends::lane::{Exact, Fast};
use exactgrad_backends::{FastScalarRefBackend, ScalarRefBackend};
use exactgrad_core::{Backend, BinaryOp, ComputeMode, Layout, Philox, UnaryOp};

fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut r = Philox::new(seed);
    let specials = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        1e-40,
        -1e-40,
        1.0,
        -1.0,
        88.7,
        -104.0,
    ];
    (0..n)
        .map(|i| {
            if i % 7 == 3 {
                specials[r.below(specials.len() as u32) as usize]
            } else {
                (r.next_f32() - 0.5) * 20.0
            }
        })
        .collect()
}

const OPS: &[UnaryOp] = &[
    UnaryOp::Neg,
    UnaryOp::Abs,
    UnaryOp::Relu,
    UnaryOp::LeakyRelu(0.1),
    UnaryOp::Sigmoid,
    UnaryOp::Tanh,
    UnaryOp::Exp,
    UnaryOp::Log,
    UnaryOp::Sqrt,
    UnaryOp::GeluErf,
    UnaryOp::GeluTanh,
    UnaryOp::Pow(2.0),
    UnaryOp::Pow(3.0),
    UnaryOp::Pow(-1.0),
    UnaryOp::Pow(0.5),
    UnaryOp::Pow(-0.5),
    UnaryOp::Pow(2.5),
    UnaryOp::Pow(0.0),
    UnaryOp::Clamp(-1.0, 1.0),
    UnaryOp::Clamp(f32::NEG_INFINITY, 0.5),
    UnaryOp::AddScalar(1.5),
    UnaryOp::MulScalar(-2.0),
];

fn same(a: &[f32], b: &[f32], what: &str) {
    for i in 0..a.len() {
        assert!(
            a[i].to_bits() == b[i].to_bits(),
            "{what}: element {i}: {:e} ({:#x}) vs {:e} ({:#x})",
            a[i],
            a[i].to_bits(),
            b[i],
            b[i].to_bits()
        );
    }
}

#[test]
fn unary_all_paths() {
    for isa in Isa::ALL {
        for (mode, _) in [(ComputeMode::Exact, 0), (ComputeMode::Fast, 1)] {
            if !isa.is_supported(mode) {
                eprintln!("skipped {isa} {mode}");
                continue;
            }
            for n in [1usize, 3, 15, 16, 17, 33, 150] {
                let x = data(n, n as u64);
                let y = data(n, n as u64 + 100);
                let g = data(n, n as u64 + 200);
                for &op in OPS {
                    let mut want = vec![0.0; n];
                    let mut got = vec![0.0; n];
                    let mut wb = vec![0.0; n];
                    let mut gb = vec![0.0; n];
                    if mode == ComputeMode::Exact {
                        let b = CpuBackend::<Exact>::with_isa(isa, 1).unwrap();
                        ScalarRefBackend.unary(op, &x, &mut want);
                        b.unary(op, &x, &mut got);
                        ScalarRefBackend.unary_backward(op, &x, &y, &g, &mut wb);
                        b.unary_backward(op, &x, &y, &g, &mut gb);
                    } else {
                        if isa == Isa::V128 || isa == Isa::Scalar {}
                        let b = CpuBackend::<Fast>::with_isa(isa, 1).unwrap();
                        FastScalarRefBackend.unary(op, &x, &mut want);
                        b.unary(op, &x, &mut got);
                        FastScalarRefBackend.unary_backward(op, &x, &y, &g, &mut wb);
                        b.unary_backward(op, &x, &y, &g, &mut gb);
                        // Fast mode does not canonicalise NaN: compare NaN-ness only.
                        for v in [&mut want, &mut got, &mut wb, &mut gb] {
                            for e in v.iter_mut() {
                                if e.is_nan() {
                                    *e = f32::NAN;
                                }
                            }
                        }
                    }
                    same(&want, &got, &format!("{mode} {isa} {op:?} n={n}"));
                    same(&wb, &gb, &format!("{mode} {isa} {op:?}' n={n}"));
                }
            }
        }
    }
}

#[test]
fn binary_all_paths() {
    let shapes: &[(&[usize], &[usize])] = &[
        (&[7, 33], &[33]),
        (&[5, 1, 17], &[4, 1]),
        (&[150], &[150]),
        (&[3, 40], &[3, 1]),
    ];
    for isa in Isa::ALL {
        let b = CpuBackend::<Exact>::with_isa(isa, 3).unwrap();
        for &(sa, sb) in shapes {
            let out = exactgrad_core::Shape::broadcast("t", sa, sb).unwrap();
            let a = data(sa.iter().product(), 1);
            let bb = data(sb.iter().product(), 2);
            let la = Layout::contiguous(sa).broadcast_to("t", &out).unwrap();
            let lb = Layout::contiguous(sb).broadcast_to("t", &out).unwrap();
            for op in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div] {
                let mut want = vec![0.0; out.numel()];
                let mut got = vec![0.0; out.numel()];
                ScalarRefBackend.binary(op, &a, &la, &bb, &lb, &mut want);
                b.binary(op, &a, &la, &bb, &lb, &mut got);
                same(&want, &got, &format!("{isa} {op:?} {sa:?} {sb:?}"));
            }
        }
    }
}
