//! The gradient check (its definition is the module docs of
//! `exactgrad_autograd::gradcheck`, `autograd/src/gradcheck.rs`) for every operator, on
//! random shapes with broadcasting and strided, transposed and expanded views.

use exactgrad::autograd::Result;
use exactgrad::prelude::*;
use proptest::prelude::*;

type T = Tensor<ScalarRefBackend>;
const B: ScalarRefBackend = ScalarRefBackend;

/// Values uniform in [lo, hi) from a seed.
fn values(n: usize, seed: u64, lo: f32, hi: f32) -> Vec<f32> {
    let mut r = Philox::new(seed);
    (0..n).map(|_| r.uniform(lo, hi)).collect()
}

fn tensor(shape: &[usize], seed: u64, lo: f32, hi: f32) -> T {
    T::from_vec(&B, values(shape.iter().product(), seed, lo, hi), shape).unwrap()
}

/// Values in [-2, 2) moved at least `gap` away from each of `kinks` (for functions that
/// are not differentiable there).
fn away_from(shape: &[usize], seed: u64, gap: f32, kinks: &[f32]) -> T {
    let v = values(shape.iter().product(), seed, -2.0, 2.0)
        .into_iter()
        .map(|mut x| {
            for &k in kinks {
                if (x - k).abs() < gap {
                    x = k + if x >= k { gap } else { -gap } + (x - k);
                }
            }
            x
        })
        .collect();
    T::from_vec(&B, v, shape).unwrap()
}

/// Values at least `gap` away from 0.
fn away_from_zero(shape: &[usize], seed: u64, gap: f32) -> T {
    away_from(shape, seed, gap, &[0.0])
}

fn check(name: &str, inputs: &[T], f: impl Fn(&[T]) -> Result<T>) {
    let report = GradCheck::default().run(name, inputs, f).unwrap();
    report.assert_passed();
}

fn shape_strategy(max_rank: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..5, 1..=max_rank)
}

/// An output shape and two shapes that broadcast to it (dims dropped from the front or
/// set to 1).
fn broadcast_pair() -> impl Strategy<Value = (Vec<usize>, Vec<usize>)> {
    (shape_strategy(3), any::<u64>()).prop_map(|(out, bits)| {
        let mut r = Philox::new(bits);
        let mut derive = |out: &[usize]| {
            let drop = r.below(out.len() as u32 + 1) as usize;
            out[drop.min(out.len() - 1)..]
                .iter()
                .map(|&d| if r.below(3) == 0 { 1 } else { d })
                .collect::<Vec<usize>>()
        };
        let a = derive(&out);
        let b = derive(&out);
        (a, b)
    })
}

/// The view variants every element-wise operator is checked through.
#[derive(Clone, Copy, Debug)]
enum View {
    Plain,
    Transposed,
    Strided,
    Expanded,
}

fn view_strategy() -> impl Strategy<Value = View> {
    prop_oneof![
        Just(View::Plain),
        Just(View::Transposed),
        Just(View::Strided),
        Just(View::Expanded)
    ]
}

/// The leaf shape needed so that `apply_view` gives a tensor of `shape`.
fn leaf_shape(view: View, shape: &[usize]) -> Vec<usize> {
    match view {
        View::Plain | View::Expanded => shape.to_vec(),
        View::Transposed => shape.iter().rev().copied().collect(),
        View::Strided => {
            let mut s = shape.to_vec();
            let last = s.len() - 1;
            s[last] *= 2;
            s
        }
    }
}

fn apply_view(view: View, x: &T) -> Result<T> {
    match view {
        View::Plain => Ok(x.clone()),
        View::Transposed => {
            let r = x.rank() as isize;
            let perm: Vec<isize> = (0..r).rev().collect();
            x.permute(&perm)
        }
        View::Strided => x.slice(-1, 0, x.dims()[x.rank() - 1] as isize, 2),
        View::Expanded => {
            // Expand a leading broadcast dimension of size 3 and average it away: every
            // output depends on three stride-0 copies, and the values stay those of x.
            let mut s = vec![3];
            s.extend_from_slice(x.dims());
            x.unsqueeze(0)?.expand(&s)?.mean_dims(&[0], false)
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Domain {
    Any,
    Positive,
    AwayFromZero,
    AwayFromUnit,
}

fn unary_case(
    name: &str,
    view: View,
    shape: &[usize],
    seed: u64,
    domain: Domain,
    f: impl Fn(&T) -> Result<T>,
) {
    let ls = leaf_shape(view, shape);
    let x = match domain {
        Domain::Any => tensor(&ls, seed, -2.0, 2.0),
        Domain::Positive => tensor(&ls, seed, 0.5, 2.0),
        Domain::AwayFromZero => away_from_zero(&ls, seed, 0.1),
        Domain::AwayFromUnit => away_from(&ls, seed, 0.1, &[-1.0, 1.0]),
    };
    check(&format!("{name} {view:?} {shape:?}"), &[x], |v| {
        f(&apply_view(view, &v[0])?)
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn unary_ops(shape in shape_strategy(3), view in view_strategy(), seed in any::<u64>()) {
        unary_case("neg", view, &shape, seed, Domain::Any, |x| x.neg());
        unary_case("add_scalar", view, &shape, seed, Domain::Any, |x| x.add_scalar(0.75));
        unary_case("mul_scalar", view, &shape, seed, Domain::Any, |x| x.mul_scalar(-1.5));
        unary_case("div_scalar", view, &shape, seed, Domain::Any, |x| x.div_scalar(3.0));
        unary_case("relu", view, &shape, seed, Domain::AwayFromZero, |x| x.relu());
        unary_case("leaky_relu", view, &shape, seed, Domain::AwayFromZero, |x| x.leaky_relu(0.1));
        unary_case("abs", view, &shape, seed, Domain::AwayFromZero, |x| x.abs());
        unary_case("clamp", view, &shape, seed, Domain::AwayFromUnit, |x| x.clamp(Some(-1.0), Some(1.0)));
        unary_case("clamp min", view, &shape, seed, Domain::AwayFromUnit, |x| x.clamp(Some(1.0), None));
        unary_case("sigmoid", view, &shape, seed, Domain::Any, |x| x.sigmoid());
        unary_case("tanh", view, &shape, seed, Domain::Any, |x| x.tanh());
        unary_case("gelu", view, &shape, seed, Domain::Any, |x| x.gelu(GeluApproximation::None));
        unary_case("gelu_tanh", view, &shape, seed, Domain::Any, |x| x.gelu(GeluApproximation::Tanh));
        unary_case("exp", view, &shape, seed, Domain::Any, |x| x.exp());
        unary_case("log", view, &shape, seed, Domain::Positive, |x| x.log());
        unary_case("sqrt", view, &shape, seed, Domain::Positive, |x| x.sqrt());
        unary_case("pow2", view, &shape, seed, Domain::Any, |x| x.pow(2.0));
        unary_case("pow3", view, &shape, seed, Domain::Any, |x| x.pow(3.0));
        unary_case("pow-1", view, &shape, seed, Domain::AwayFromZero, |x| x.pow(-1.0));
        unary_case("pow2.5", view, &shape, seed, Domain::Positive, |x| x.pow(2.5));
        unary_case("pow-0.5", view, &shape, seed, Domain::Positive, |x| x.pow(-0.5));
        unary_case("pow0", view, &shape, seed, Domain::Any, |x| x.pow(0.0));
    }

    #[test]
    fn binary_ops_broadcast((sa, sb) in broadcast_pair(), seed in any::<u64>(), transpose_b in any::<bool>()) {
        let a = tensor(&sa, seed, -2.0, 2.0);
        // A transposed leaf for b when it has rank 2 or more.
        let (b_leaf, b_view): (T, fn(&T) -> Result<T>) = if transpose_b && sb.len() >= 2 {
            let rev: Vec<usize> = sb.iter().rev().copied().collect();
            (away_from_zero(&rev, seed ^ 1, 0.5), |t: &T| {
                let perm: Vec<isize> = (0..t.rank() as isize).rev().collect();
                t.permute(&perm)
            })
        } else {
            (away_from_zero(&sb, seed ^ 1, 0.5), |t: &T| Ok(t.clone()))
        };
        let name = format!("{sa:?} {sb:?} transposed={transpose_b}");
        check(&format!("add {name}"), &[a.clone(), b_leaf.clone()], |v| v[0].add(&b_view(&v[1])?));
        check(&format!("sub {name}"), &[a.clone(), b_leaf.clone()], |v| v[0].sub(&b_view(&v[1])?));
        check(&format!("mul {name}"), &[a.clone(), b_leaf.clone()], |v| v[0].mul(&b_view(&v[1])?));
        check(&format!("div {name}"), &[a.clone(), b_leaf.clone()], |v| v[0].div(&b_view(&v[1])?));
    }

    #[test]
    fn where_with_a_broadcast_mask((sa, sb) in broadcast_pair(), seed in any::<u64>()) {
        let a = tensor(&sa, seed, -2.0, 2.0);
        let b = tensor(&sb, seed ^ 7, -2.0, 2.0);
        let out = exactgrad_core::Shape::broadcast("t", &sa, &sb).unwrap();
        // The mask broadcasts along its first dimension.
        let mut ms = out.to_vec();
        ms[0] = 1;
        let mask_vals: Vec<f32> = values(ms.iter().product(), seed ^ 3, 0.0, 1.0).into_iter().map(|u| if u < 0.5 { 0.0 } else { 1.0 }).collect();
        let mask = T::from_vec(&B, mask_vals, ms).unwrap();
        check(&format!("where {sa:?} {sb:?}"), &[a, b], |v| T::where_cond(&mask, &v[0], &v[1]));
    }

    #[test]
    fn reductions(shape in shape_strategy(4), seed in any::<u64>(), pick in any::<u64>(), keepdim in any::<bool>()) {
        let x = tensor(&shape, seed, -2.0, 2.0);
        let mut r = Philox::new(pick);
        let rank = shape.len();
        let mut dims: Vec<isize> = (0..rank as isize).filter(|_| r.below(2) == 0).collect();
        if dims.is_empty() {
            dims.push(-1);
        } else if r.below(2) == 0 {
            dims[0] -= rank as isize; // a negative index for the same dimension
        }
        check(&format!("sum all {shape:?}"), std::slice::from_ref(&x), |v| v[0].sum());
        check(&format!("mean all {shape:?}"), std::slice::from_ref(&x), |v| v[0].mean());
        check(&format!("sum {dims:?} {keepdim} {shape:?}"), std::slice::from_ref(&x), |v| v[0].sum_dims(&dims, keepdim));
        check(&format!("mean {dims:?} {keepdim} {shape:?}"), std::slice::from_ref(&x), |v| v[0].mean_dims(&dims, keepdim));
        check(&format!("sum of transposed {shape:?}"), &[x], |v| {
            let perm: Vec<isize> = (0..rank as isize).rev().collect();
            v[0].permute(&perm)?.sum_dims(&[0], keepdim)
        });
    }

    #[test]
    fn matmul_shapes(m in 1usize..5, k in 1usize..5, n in 1usize..5, batch in 1usize..4, seed in any::<u64>()) {
        let a2 = tensor(&[m, k], seed, -1.0, 1.0);
        let b2 = tensor(&[k, n], seed ^ 1, -1.0, 1.0);
        check("matmul 2d", &[a2.clone(), b2.clone()], |v| v[0].matmul(&v[1]));
        // Transposed operands as views.
        let at = tensor(&[k, m], seed ^ 2, -1.0, 1.0);
        let bt = tensor(&[n, k], seed ^ 3, -1.0, 1.0);
        check("matmul transposed views", &[at, bt], |v| v[0].t()?.matmul(&v[1].t()?));
        // 1-D cases.
        let va = tensor(&[k], seed ^ 4, -1.0, 1.0);
        let vb = tensor(&[k], seed ^ 5, -1.0, 1.0);
        check("matmul 1d·1d", &[va.clone(), vb.clone()], |v| v[0].matmul(&v[1]));
        check("matmul 1d·2d", &[va.clone(), b2.clone()], |v| v[0].matmul(&v[1]));
        check("matmul 2d·1d", &[a2.clone(), vb], |v| v[0].matmul(&v[1]));
        // Batched with broadcast batch dimensions, and a stack times a matrix.
        let ab = tensor(&[batch, 1, m, k], seed ^ 6, -1.0, 1.0);
        let bb = tensor(&[2, k, n], seed ^ 7, -1.0, 1.0);
        check("matmul batched broadcast", &[ab, bb], |v| v[0].matmul(&v[1]));
        let a3 = tensor(&[batch, m, k], seed ^ 8, -1.0, 1.0);
        check("matmul 3d·2d", &[a3.clone(), b2.clone()], |v| v[0].matmul(&v[1]));
        check("matmul 2d·3d", &[a2, tensor(&[batch, k, n], seed ^ 9, -1.0, 1.0)], |v| v[0].matmul(&v[1]));
        // Linear with and without bias, 3-D input.
        let w = tensor(&[n, k], seed ^ 10, -1.0, 1.0);
        let bias = tensor(&[n], seed ^ 11, -1.0, 1.0);
        check("linear", &[a3.clone(), w.clone(), bias], |v| v[0].linear(&v[1], Some(&v[2])));
        check("linear no bias", &[a3, w], |v| v[0].linear(&v[1], None));
    }

    #[test]
    fn shape_ops(shape in shape_strategy(3), seed in any::<u64>(), pick in any::<u64>()) {
        let x = tensor(&shape, seed, -2.0, 2.0);
        let rank = shape.len();
        let mut r = Philox::new(pick);
        let d = r.below(rank as u32) as usize;
        let w = |t: &T| -> Result<T> {
            // A fixed non-trivial consumer so the gradient is not all ones.
            let u = tensor(t.dims(), 99, -1.0, 1.0);
            t.mul(&u)
        };
        check("reshape", std::slice::from_ref(&x), |v| w(&v[0].reshape([v[0].numel()])?));
        check("reshape_infer", std::slice::from_ref(&x), |v| w(&v[0].reshape_infer(&[-1])?));
        check("reshape of transpose (copy)", std::slice::from_ref(&x), |v| {
            let perm: Vec<isize> = (0..rank as isize).rev().collect();
            w(&v[0].permute(&perm)?.reshape_infer(&[-1])?)
        });
        check("unsqueeze/squeeze", std::slice::from_ref(&x), |v| w(&v[0].unsqueeze(d as isize)?.squeeze(d as isize)?.unsqueeze(-1)?));
        check("flatten", std::slice::from_ref(&x), |v| w(&v[0].flatten(0, -1)?));
        let start = r.below(shape[d] as u32) as usize;
        let len = 1 + r.below((shape[d] - start) as u32) as usize;
        check("narrow", std::slice::from_ref(&x), |v| w(&v[0].narrow(d as isize, start, len)?));
        check("slice step 2", std::slice::from_ref(&x), |v| w(&v[0].slice(d as isize, 0, shape[d] as isize, 2)?));
        check("contiguous of transpose", std::slice::from_ref(&x), |v| w(&v[0].transpose(0, -1)?.contiguous().unwrap()));
        let mut big = vec![2];
        big.extend_from_slice(&shape);
        check("expand", std::slice::from_ref(&x), |v| w(&v[0].expand(&big)?));
        let y = tensor(&shape, seed ^ 5, -2.0, 2.0);
        let mut s2 = shape.clone();
        s2[d] += 1;
        let z = tensor(&s2, seed ^ 6, -2.0, 2.0);
        check("concat", &[x.clone(), z, y.clone()], |v| {
            let t = T::concat(&[&v[0], &v[1], &v[0].mul_scalar(2.0)?, &v[2]], d as isize - rank as isize);
            w(&t?)
        });
        check("stack", &[x, y], |v| w(&T::stack(&[&v[0], &v[1]], d as isize)?));
    }

    #[test]
    fn softmax_family(shape in shape_strategy(3), seed in any::<u64>(), pick in any::<u64>()) {
        let x = tensor(&shape, seed, -3.0, 3.0);
        let d = (Philox::new(pick).below(shape.len() as u32)) as isize;
        check(&format!("softmax {d} {shape:?}"), std::slice::from_ref(&x), |v| v[0].softmax(d));
        check(&format!("log_softmax {d} {shape:?}"), std::slice::from_ref(&x), |v| v[0].log_softmax(d));
        check(&format!("softmax of transposed {shape:?}"), &[x], |v| v[0].transpose(0, -1)?.softmax(-1));
    }

    #[test]
    fn losses(n in 1usize..5, c in 2usize..6, extra in 0usize..3, seed in any::<u64>(), smoothing in prop_oneof![Just(0.0f32), Just(0.1), Just(0.3)]) {
        let mut shape = vec![n, c];
        if extra > 0 {
            shape.push(extra);
        }
        let x = tensor(&shape, seed, -2.0, 2.0);
        let rows = n * extra.max(1);
        let mut r = Philox::new(seed ^ 1);
        let targets: Vec<i64> = (0..rows).map(|i| if i == 1 { -100 } else { r.below(c as u32) as i64 }).collect();
        for reduction in [Reduction::None, Reduction::Mean, Reduction::Sum] {
            let opts = CrossEntropyOptions { reduction, label_smoothing: smoothing, ..Default::default() };
            check(&format!("cross_entropy {shape:?} {reduction:?} {smoothing}"), std::slice::from_ref(&x), |v| v[0].cross_entropy(&targets, opts));
            let t = tensor(&shape, seed ^ 2, -2.0, 2.0);
            check(&format!("mse {shape:?} {reduction:?}"), &[x.clone(), t], |v| v[0].mse_loss(&v[1], reduction));
        }
        // [C]-shaped logits with a single target.
        let x1 = tensor(&[c], seed ^ 3, -2.0, 2.0);
        check("cross_entropy [C]", &[x1], |v| v[0].cross_entropy(&[0], CrossEntropyOptions::default()));
    }
}
