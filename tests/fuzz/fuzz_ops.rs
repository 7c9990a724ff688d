//! Property-based fuzzing of every tensor operator: random shapes (0 to 5 per dimension,
//! rank 0 to 4), operands reached through views (transposed, strided, offset, expanded,
//! permuted), values with NaN, ±∞, subnormals and random bit patterns, and arguments at
//! their extremes (0, `usize::MAX`, products that overflow, dimensions far out of range,
//! NaN scalars). Each case runs forward and backward on `ScalarRefBackend` and on every
//! ISA path and thread count of `ExactBackend` (`fuzz_support::check`): no panic, no
//! overrun of the time limit, and either an error everywhere or the same bits
//! everywhere.

use super::fuzz_support::*;
use exactgrad::prelude::*;
use proptest::prelude::*;

/// A scalar argument: ordinary, or special (0, −0, ±∞, NaN, subnormal, ±MAX).
fn scalar_arg() -> impl Strategy<Value = f32> {
    prop_oneof![
        3 => -4.0f32..4.0,
        1 => prop::sample::select(SPECIALS.to_vec()),
    ]
}

// ----- element-wise operators and reductions of one operand ------------------------------

#[derive(Clone, Debug)]
enum Unary {
    Neg,
    Abs,
    Relu,
    LeakyRelu(f32),
    Sigmoid,
    Tanh,
    Gelu(GeluApproximation),
    Exp,
    Log,
    Sqrt,
    Pow(f32),
    Clamp(Option<f32>, Option<f32>),
    AddScalar(f32),
    MulScalar(f32),
    DivScalar(f32),
    Softmax(isize),
    LogSoftmax(isize),
    Sum,
    Mean,
    SumDims(Vec<isize>, bool),
    MeanDims(Vec<isize>, bool),
    Contiguous,
    CopyContiguous,
    Dropout(f32, bool, u64),
    Item,
}

fn unary() -> impl Strategy<Value = Unary> {
    let dims = || prop::collection::vec(dim_arg(), 0..=3);
    prop_oneof![
        Just(Unary::Neg),
        Just(Unary::Abs),
        Just(Unary::Relu),
        scalar_arg().prop_map(Unary::LeakyRelu),
        Just(Unary::Sigmoid),
        Just(Unary::Tanh),
        Just(Unary::Gelu(GeluApproximation::None)),
        Just(Unary::Gelu(GeluApproximation::Tanh)),
        Just(Unary::Exp),
        Just(Unary::Log),
        Just(Unary::Sqrt),
        scalar_arg().prop_map(Unary::Pow),
        (
            prop::option::of(scalar_arg()),
            prop::option::of(scalar_arg())
        )
            .prop_map(|(a, b)| Unary::Clamp(a, b)),
        scalar_arg().prop_map(Unary::AddScalar),
        scalar_arg().prop_map(Unary::MulScalar),
        scalar_arg().prop_map(Unary::DivScalar),
        dim_arg().prop_map(Unary::Softmax),
        dim_arg().prop_map(Unary::LogSoftmax),
        Just(Unary::Sum),
        Just(Unary::Mean),
        (dims(), any::<bool>()).prop_map(|(d, k)| Unary::SumDims(d, k)),
        (dims(), any::<bool>()).prop_map(|(d, k)| Unary::MeanDims(d, k)),
        Just(Unary::Contiguous),
        Just(Unary::CopyContiguous),
        (
            prop_oneof![0.0f32..=1.0, scalar_arg()],
            any::<bool>(),
            any::<u64>()
        )
            .prop_map(|(p, t, s)| Unary::Dropout(p, t, s)),
        Just(Unary::Item),
    ]
}

#[derive(Clone, Debug)]
struct UnaryCase {
    x: Operand,
    op: Unary,
}

impl Case for UnaryCase {
    fn call<B: Backend>(&self, b: &B) -> CaseResult<Outcome<B>> {
        let (leaf, x) = self.x.make(b, true)?;
        let y = match &self.op {
            Unary::Neg => x.neg()?,
            Unary::Abs => x.abs()?,
            Unary::Relu => x.relu()?,
            Unary::LeakyRelu(s) => x.leaky_relu(*s)?,
            Unary::Sigmoid => x.sigmoid()?,
            Unary::Tanh => x.tanh()?,
            Unary::Gelu(a) => x.gelu(*a)?,
            Unary::Exp => x.exp()?,
            Unary::Log => x.log()?,
            Unary::Sqrt => x.sqrt()?,
            Unary::Pow(e) => x.pow(*e)?,
            Unary::Clamp(lo, hi) => x.clamp(*lo, *hi)?,
            Unary::AddScalar(c) => x.add_scalar(*c)?,
            Unary::MulScalar(c) => x.mul_scalar(*c)?,
            Unary::DivScalar(c) => x.div_scalar(*c)?,
            Unary::Softmax(d) => x.softmax(*d)?,
            Unary::LogSoftmax(d) => x.log_softmax(*d)?,
            Unary::Sum => x.sum()?,
            Unary::Mean => x.mean()?,
            Unary::SumDims(d, k) => x.sum_dims(d, *k)?,
            Unary::MeanDims(d, k) => x.mean_dims(d, *k)?,
            Unary::Contiguous => x.contiguous()?,
            Unary::CopyContiguous => x.copy_contiguous()?,
            Unary::Dropout(p, t, s) => x.dropout(*p, *t, &mut Philox::new(*s))?,
            Unary::Item => Tensor::scalar(b, x.item()?)?,
        };
        Ok(Outcome::one(y, vec![leaf]))
    }
}

// ----- operators of two or three operands with broadcasting -----------------------------

#[derive(Clone, Copy, Debug)]
enum Binary {
    Add,
    Sub,
    Mul,
    Div,
    Where,
    Mse(Reduction),
}

/// Two shapes that usually broadcast (one derived from the other by dropping leading
/// dimensions and setting some to 1) and sometimes do not.
fn broadcast_pair() -> impl Strategy<Value = (Vec<usize>, Vec<usize>)> {
    (
        small_shape(0, 4),
        0usize..=4,
        prop::collection::vec(any::<bool>(), 4),
        any::<bool>(),
        small_shape(0, 3),
        0u8..8,
    )
        .prop_map(|(a, drop, ones, swap, other, pick)| {
            if pick == 0 {
                return (a, other);
            }
            let mut b: Vec<usize> = a[drop.min(a.len())..].to_vec();
            for (d, one) in b.iter_mut().zip(ones) {
                if one {
                    *d = 1;
                }
            }
            if swap {
                (b, a)
            } else {
                (a, b)
            }
        })
}

#[derive(Clone, Debug)]
struct BinaryCase {
    a: Operand,
    b: Operand,
    cond: Operand,
    op: Binary,
}

fn binary_case() -> impl Strategy<Value = BinaryCase> {
    (
        broadcast_pair(),
        (view(), view(), view()),
        (fill(), fill(), fill()),
        any::<u64>(),
        prop_oneof![
            Just(Binary::Add),
            Just(Binary::Sub),
            Just(Binary::Mul),
            Just(Binary::Div),
            Just(Binary::Where),
            Just(Binary::Mse(Reduction::None)),
            Just(Binary::Mse(Reduction::Mean)),
            Just(Binary::Mse(Reduction::Sum)),
        ],
        any::<bool>(),
    )
        .prop_map(|((sa, sb), (va, vb, vc), (fa, fb, fc), seed, op, cond_a)| {
            let cond_shape = if cond_a { sa.clone() } else { sb.clone() };
            BinaryCase {
                a: Operand {
                    shape: sa,
                    view: va,
                    fill: fa,
                    seed,
                },
                b: Operand {
                    shape: sb,
                    view: vb,
                    fill: fb,
                    seed: seed ^ 1,
                },
                cond: Operand {
                    shape: cond_shape,
                    view: vc,
                    fill: fc,
                    seed: seed ^ 2,
                },
                op,
            }
        })
}

impl Case for BinaryCase {
    fn call<B: Backend>(&self, be: &B) -> CaseResult<Outcome<B>> {
        let (la, a) = self.a.make(be, true)?;
        let (lb, b) = self.b.make(be, true)?;
        let y = match self.op {
            Binary::Add => a.add(&b)?,
            Binary::Sub => a.sub(&b)?,
            Binary::Mul => a.mul(&b)?,
            Binary::Div => a.div(&b)?,
            Binary::Where => {
                // Zeros and other values, NaN included (non-zero counts as true).
                let (_, c) = self.cond.make(be, false)?;
                let c = c.relu()?;
                Tensor::where_cond(&c, &a, &b)?
            }
            Binary::Mse(r) => a.mse_loss(&b, r)?,
        };
        Ok(Outcome::one(y, vec![la, lb]))
    }
}

// ----- matmul and linear ----------------------------------------------------------------

#[derive(Clone, Debug)]
struct MatmulCase {
    a: Operand,
    b: Operand,
    bias: Option<Operand>,
    linear: bool,
}

fn matmul_case() -> impl Strategy<Value = MatmulCase> {
    (
        small_shape(1, 2),
        (small_dim(), small_dim(), small_dim()),
        small_shape(1, 4),
        0u8..6,
        any::<bool>(),
        (view(), view(), view()),
        (fill(), fill()),
        any::<u64>(),
        any::<bool>(),
    )
        .prop_map(
            |(batch, (m, k, n), wild, pick, linear, (va, vb, vc), (fa, fb), seed, bias)| {
                // Mostly compatible operands of ranks 1 to 4; sometimes one of any shape.
                let (sa, sb) = match pick {
                    0 => (vec![k], vec![k]),
                    1 => (vec![k], vec![k, n]),
                    2 => (vec![m, k], vec![k]),
                    3 => {
                        let mut a = batch.clone();
                        a.extend([m, k]);
                        (a, vec![k, n])
                    }
                    4 => {
                        let mut a = batch.clone();
                        a.extend([m, k]);
                        let mut b = batch[batch.len() - 1..].to_vec();
                        b.extend([k, n]);
                        (a, b)
                    }
                    _ => (vec![m, k], wild),
                };
                let sb = if linear {
                    // linear takes the weight as [out, in].
                    let mut w = sb.clone();
                    if w.len() >= 2 {
                        let r = w.len();
                        w.swap(r - 2, r - 1);
                    }
                    w
                } else {
                    sb
                };
                let bias_shape = vec![if linear && sb.len() == 2 { sb[0] } else { n }];
                let op = |shape, view, fill, s| Operand {
                    shape,
                    view,
                    fill,
                    seed: seed ^ s,
                };
                MatmulCase {
                    a: op(sa, va, fa, 0),
                    b: op(sb, vb, fb, 1),
                    bias: bias.then(|| op(bias_shape, vc, fb, 2)),
                    linear,
                }
            },
        )
}

impl Case for MatmulCase {
    fn call<B: Backend>(&self, be: &B) -> CaseResult<Outcome<B>> {
        let (la, a) = self.a.make(be, true)?;
        let (lb, b) = self.b.make(be, true)?;
        let mut leaves = vec![la, lb];
        let y = if self.linear {
            let bias = match &self.bias {
                Some(o) => {
                    let (l, t) = o.make(be, true)?;
                    leaves.push(l);
                    Some(t)
                }
                None => None,
            };
            a.linear(&b, bias.as_ref())?
        } else {
            a.matmul(&b)?
        };
        Ok(Outcome::one(y, leaves))
    }
}

// ----- losses, indexing, splitting, padding, joining ------------------------------------

/// An index argument: in range for small sizes, negative, or at the limits of `i64`.
fn index_arg() -> impl Strategy<Value = i64> {
    prop_oneof![
        6 => -2i64..6,
        1 => prop::sample::select(vec![i64::MIN, i64::MAX, -100, 1 << 40]),
    ]
}

#[derive(Clone, Debug)]
enum Misc {
    CrossEntropy {
        targets: Vec<i64>,
        reduction: Reduction,
        ignore_index: i64,
        label_smoothing: f32,
    },
    IndexSelect(isize, Vec<i64>),
    Embedding {
        indices: Vec<i64>,
        shape: Vec<usize>,
        padding_idx: Option<i64>,
    },
    Split(usize, isize),
    SplitSizes(Vec<usize>, isize),
    Chunk(usize, isize),
    Pad(Vec<usize>, f32),
    Concat(Vec<Vec<usize>>, isize),
    Stack(usize, isize),
}

fn misc() -> impl Strategy<Value = Misc> {
    let reduction = prop_oneof![
        Just(Reduction::None),
        Just(Reduction::Mean),
        Just(Reduction::Sum)
    ];
    prop_oneof![
        (
            prop::collection::vec(index_arg(), 0..=8),
            reduction,
            prop_oneof![Just(-100i64), index_arg()],
            prop_oneof![3 => Just(0.0f32), 2 => 0.0f32..=1.0, 1 => scalar_arg()],
        )
            .prop_map(|(targets, reduction, ignore_index, label_smoothing)| {
                Misc::CrossEntropy {
                    targets,
                    reduction,
                    ignore_index,
                    label_smoothing,
                }
            }),
        (dim_arg(), prop::collection::vec(index_arg(), 0..=6))
            .prop_map(|(d, i)| Misc::IndexSelect(d, i)),
        (
            prop::collection::vec(index_arg(), 0..=6),
            prop::collection::vec(size_arg(), 0..=3),
            prop::option::of(index_arg()),
            any::<bool>(),
        )
            .prop_map(|(indices, shape, padding_idx, fit)| {
                // Mostly an indices_shape that matches the number of indices.
                let shape = if fit { vec![indices.len()] } else { shape };
                Misc::Embedding {
                    indices,
                    shape,
                    padding_idx,
                }
            }),
        (size_arg(), dim_arg()).prop_map(|(s, d)| Misc::Split(s, d)),
        (prop::collection::vec(size_arg(), 0..=4), dim_arg())
            .prop_map(|(s, d)| Misc::SplitSizes(s, d)),
        (size_arg(), dim_arg()).prop_map(|(s, d)| Misc::Chunk(s, d)),
        (prop::collection::vec(size_arg(), 0..=9), scalar_arg()).prop_map(|(p, v)| Misc::Pad(p, v)),
        (prop::collection::vec(small_shape(0, 4), 0..=3), dim_arg())
            .prop_map(|(s, d)| Misc::Concat(s, d)),
        (0usize..=3, dim_arg()).prop_map(|(n, d)| Misc::Stack(n, d)),
    ]
}

#[derive(Clone, Debug)]
struct MiscCase {
    x: Operand,
    op: Misc,
}

fn misc_case() -> impl Strategy<Value = MiscCase> {
    (
        operand_of(small_shape(0, 4)),
        misc(),
        prop_oneof![3 => Just(true), 1 => Just(false)],
        any::<u64>(),
    )
        .prop_map(|(mut x, mut op, fit, seed)| {
            // Mostly arguments that fit the operand; the rest as drawn.
            let mut r = Philox::new(seed);
            let rank = x.shape.len();
            let in_rank = |d: isize| {
                if rank == 0 {
                    0
                } else {
                    d.rem_euclid(rank as isize)
                }
            };
            if fit {
                match &mut op {
                    Misc::CrossEntropy {
                        targets,
                        ignore_index,
                        ..
                    } => {
                        if rank == 0 {
                            x.shape = vec![3];
                        }
                        let c = if x.shape.len() == 1 {
                            x.shape[0]
                        } else {
                            x.shape[1]
                        };
                        let n = if x.shape.len() == 1 {
                            1
                        } else {
                            x.shape.iter().product::<usize>() / c.max(1)
                        };
                        *targets = (0..n)
                            .map(|_| match r.below(8) {
                                0 => *ignore_index,
                                _ => i64::from(r.below(c.max(1) as u32)),
                            })
                            .collect();
                    }
                    Misc::IndexSelect(d, i) => {
                        *d = in_rank(*d);
                        let size = x.shape.get(*d as usize).copied().unwrap_or(1);
                        for v in i.iter_mut() {
                            *v = v.rem_euclid(size.max(1) as i64);
                        }
                    }
                    Misc::Embedding {
                        indices,
                        padding_idx,
                        ..
                    } => {
                        x.shape = vec![x.shape.first().copied().unwrap_or(2).max(1), 3];
                        for v in indices.iter_mut() {
                            *v = v.rem_euclid(x.shape[0] as i64);
                        }
                        if let Some(p) = padding_idx {
                            *p = p.rem_euclid(x.shape[0] as i64);
                        }
                    }
                    Misc::Split(_, d) | Misc::SplitSizes(_, d) | Misc::Chunk(_, d) => {
                        *d = in_rank(*d);
                        if let (Misc::SplitSizes(sizes, d), true) = (&mut op, rank > 0) {
                            let size = x.shape[*d as usize];
                            let k = sizes.len().max(1);
                            *sizes = (0..k)
                                .map(|i| size / k + usize::from(i < size % k))
                                .collect();
                        }
                    }
                    Misc::Pad(p, _) => {
                        p.truncate(2 * rank);
                        if p.len() % 2 == 1 {
                            p.pop();
                        }
                    }
                    Misc::Concat(others, d) => {
                        *d = in_rank(*d);
                        for o in others.iter_mut() {
                            let mut s = x.shape.clone();
                            if rank > 0 {
                                s[*d as usize] = r.below(4) as usize;
                            }
                            *o = s;
                        }
                    }
                    Misc::Stack(_, d) => *d = d.rem_euclid(rank as isize + 1),
                }
            }
            MiscCase { x, op }
        })
}

impl Case for MiscCase {
    fn call<B: Backend>(&self, be: &B) -> CaseResult<Outcome<B>> {
        let (leaf, x) = self.x.make(be, true)?;
        let mut leaves = vec![leaf];
        let outputs = match &self.op {
            Misc::CrossEntropy {
                targets,
                reduction,
                ignore_index,
                label_smoothing,
            } => vec![x.cross_entropy(
                targets,
                CrossEntropyOptions {
                    reduction: *reduction,
                    ignore_index: *ignore_index,
                    label_smoothing: *label_smoothing,
                },
            )?],
            Misc::IndexSelect(d, i) => vec![x.index_select(*d, i)?],
            Misc::Embedding {
                indices,
                shape,
                padding_idx,
            } => vec![Tensor::embedding(&x, indices, shape, *padding_idx)?],
            Misc::Split(s, d) => x.split(*s, *d)?,
            Misc::SplitSizes(s, d) => x.split_sizes(s, *d)?,
            Misc::Chunk(n, d) => x.chunk(*n, *d)?,
            Misc::Pad(p, v) => vec![x.pad(p, *v)?],
            Misc::Concat(shapes, d) => {
                let mut ts = vec![x.clone()];
                for (i, s) in shapes.iter().enumerate() {
                    let o = Operand {
                        shape: s.clone(),
                        view: self.x.view,
                        fill: self.x.fill,
                        seed: self.x.seed ^ (i as u64 + 1),
                    };
                    let (l, t) = o.make(be, true)?;
                    leaves.push(l);
                    ts.push(t);
                }
                let refs: Vec<&Tensor<B>> = ts.iter().collect();
                vec![Tensor::concat(&refs, *d)?]
            }
            Misc::Stack(n, d) => {
                let mut ts = Vec::new();
                for i in 0..*n {
                    let o = Operand {
                        seed: self.x.seed ^ (i as u64 + 1),
                        ..self.x.clone()
                    };
                    let (l, t) = o.make(be, true)?;
                    leaves.push(l);
                    ts.push(t);
                }
                let refs: Vec<&Tensor<B>> = ts.iter().collect();
                vec![Tensor::stack(&refs, *d)?]
            }
        };
        Ok(Outcome {
            outputs,
            state: Vec::new(),
            leaves,
        })
    }
}

// ----- creation and in-place writes -----------------------------------------------------

#[derive(Clone, Debug)]
enum Create {
    Zeros,
    Ones,
    Full(f32),
    Uniform(f32, f32),
    Randn(f32, f32),
    FromVec(usize),
    Scalar(f32),
}

#[derive(Clone, Debug)]
struct CreateCase {
    shape: Vec<usize>,
    kind: Create,
    seed: u64,
}

/// A shape for creation: small, or with one of [`HUGE`] among its dimensions, or with
/// dimensions whose product overflows.
fn creation_shape() -> impl Strategy<Value = Vec<usize>> {
    prop_oneof![
        2 => small_shape(0, 4),
        2 => (small_shape(0, 3), prop::sample::select(HUGE.to_vec()), 0usize..4).prop_map(
            |(mut s, h, at)| {
                s.insert(at.min(s.len()), h);
                s
            }
        ),
        1 => prop::collection::vec(prop::sample::select(vec![1usize << 32, 1 << 33, 1 << 40]), 2..=3),
    ]
}

fn create_case() -> impl Strategy<Value = CreateCase> {
    (
        creation_shape(),
        prop_oneof![
            Just(Create::Zeros),
            Just(Create::Ones),
            scalar_arg().prop_map(Create::Full),
            (scalar_arg(), scalar_arg()).prop_map(|(a, b)| Create::Uniform(a, b)),
            (scalar_arg(), scalar_arg()).prop_map(|(a, b)| Create::Randn(a, b)),
            (0usize..=40).prop_map(Create::FromVec),
            scalar_arg().prop_map(Create::Scalar),
        ],
        any::<u64>(),
    )
        .prop_map(|(shape, kind, seed)| CreateCase { shape, kind, seed })
}

impl CreateCase {
    /// Whether the shape's element count fits the small budget (else the call must fail).
    fn small(&self) -> bool {
        self.shape.contains(&0)
            || self
                .shape
                .iter()
                .try_fold(1usize, |a, &d| a.checked_mul(d))
                .is_some_and(|n| n <= SMALL)
    }
}

impl Case for CreateCase {
    fn call<B: Backend>(&self, b: &B) -> CaseResult<Outcome<B>> {
        let s = self.shape.clone();
        let mut rng = Philox::new(self.seed);
        let t = match self.kind {
            Create::Zeros => Tensor::zeros(b, s)?,
            Create::Ones => Tensor::ones(b, s)?,
            Create::Full(v) => Tensor::full(b, s, v)?,
            Create::Uniform(lo, hi) => Tensor::rand_uniform(b, s, lo, hi, &mut rng)?,
            Create::Randn(m, sd) => Tensor::randn(b, s, m, sd, &mut rng)?,
            Create::FromVec(n) => Tensor::from_vec(b, values(n, self.seed, Fill::Bits), s)?,
            Create::Scalar(v) => Tensor::scalar(b, v)?.reshape(s)?,
        };
        Ok(Outcome::one(t, Vec::new()))
    }
}

#[derive(Clone, Debug)]
enum InPlace {
    Fill(f32),
    Copy(Operand),
    Add(Operand),
    MulScalar(f32),
    OnGradLeaf,
}

#[derive(Clone, Debug)]
struct InPlaceCase {
    x: Operand,
    op: InPlace,
}

fn in_place_case() -> impl Strategy<Value = InPlaceCase> {
    (
        operand_of(small_shape(0, 4)),
        any::<u64>(),
        0u8..5,
        scalar_arg(),
        broadcast_pair(),
    )
        .prop_map(|(mut x, seed, pick, c, (sa, sb))| {
            // In-place writes do not go to an expansion (several elements share storage).
            if x.view == View::Expanded {
                x.view = View::Plain;
            }
            let (view, fill) = (x.view, x.fill);
            let other = |shape| Operand {
                shape,
                view,
                fill,
                seed: seed ^ 1,
            };
            let op = match pick {
                0 => InPlace::Fill(c),
                1 => InPlace::Copy(other(if c > 0.0 { x.shape.clone() } else { sb })),
                2 => {
                    x.shape = sa;
                    InPlace::Add(other(sb))
                }
                3 => InPlace::MulScalar(c),
                _ => InPlace::OnGradLeaf,
            };
            InPlaceCase { x, op }
        })
}

impl Case for InPlaceCase {
    fn call<B: Backend>(&self, be: &B) -> CaseResult<Outcome<B>> {
        let grad = matches!(self.op, InPlace::OnGradLeaf);
        let (leaf, x) = self.x.make(be, grad)?;
        match &self.op {
            InPlace::Fill(v) => x.fill_(*v)?,
            InPlace::Copy(o) => x.copy_(&o.make(be, false)?.1)?,
            InPlace::Add(o) => x.add_(&o.make(be, false)?.1)?,
            InPlace::MulScalar(c) => x.mul_scalar_(*c)?,
            InPlace::OnGradLeaf => x.fill_(1.0)?,
        }
        Ok(Outcome {
            outputs: Vec::new(),
            state: vec![x, leaf],
            leaves: Vec::new(),
        })
    }
}

// ----- the properties -------------------------------------------------------------------

proptest! {
    #![proptest_config(config(3000))]

    #[test]
    fn unary_operators_and_reductions(x in operand_of(small_shape(0, 4)), op in unary()) {
        check(UnaryCase { x, op })?;
    }

    #[test]
    fn binary_operators_where_and_mse(case in binary_case()) {
        check(case)?;
    }

    #[test]
    fn matmul_and_linear(case in matmul_case()) {
        check(case)?;
    }

    #[test]
    fn losses_indexing_splitting_padding_joining(case in misc_case()) {
        check(case)?;
    }

    #[test]
    fn creation_with_extreme_shapes(case in create_case()) {
        if case.small() {
            check(case)?;
        } else {
            check_err(case)?;
        }
    }

    #[test]
    fn in_place_writes(case in in_place_case()) {
        check(case)?;
    }
}
