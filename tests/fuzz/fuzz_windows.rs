//! Property-based fuzzing of the window and normalisation operators: convolution,
//! pooling, batch, layer and group normalisation and attention, with random small
//! shapes, special values, and window arguments (stride, padding, dilation, kernel,
//! groups, output sizes, group counts) at 0 and at sizes near `usize::MAX`. Each case
//! runs forward and backward on `ScalarRefBackend` and on every ISA path and thread count
//! of `ExactBackend` (`fuzz_support::check`): no panic, no overrun of the time limit,
//! and either an error everywhere or the same bits everywhere.

use super::fuzz_support::*;
use exactgrad::prelude::*;
use exactgrad::Result;
use proptest::prelude::*;

/// A window argument (kernel, stride, padding, dilation): mostly 1 to 3, sometimes 0 or
/// huge.
fn win() -> impl Strategy<Value = usize> + Clone {
    prop_oneof![
        20 => 1usize..=3,
        1 => Just(0usize),
        3 => prop::sample::select(HUGE.to_vec()),
    ]
}

/// A dilation: mostly 1, sometimes 2 or 3, 0 or huge.
fn dil() -> impl Strategy<Value = usize> + Clone {
    prop_oneof![
        12 => Just(1usize),
        4 => 2usize..=3,
        1 => Just(0usize),
        2 => prop::sample::select(HUGE.to_vec()),
    ]
}

/// A shape of rank `lo..=hi`, mostly without zero dimensions.
fn shape(lo: usize, hi: usize) -> impl Strategy<Value = Vec<usize>> {
    prop_oneof![
        4 => prop::collection::vec(1usize..=5, lo..=hi),
        1 => small_shape(lo, hi),
    ]
}

/// A padding: mostly 0 or 1, sometimes huge.
fn pad() -> impl Strategy<Value = usize> + Clone {
    prop_oneof![12 => Just(0usize), 4 => Just(1usize), 1 => prop::sample::select(HUGE.to_vec())]
}

fn pair(s: impl Strategy<Value = usize> + Clone) -> impl Strategy<Value = [usize; 2]> {
    (s.clone(), s).prop_map(|(a, b)| [a, b])
}

fn scalar_arg() -> impl Strategy<Value = f32> {
    prop_oneof![
        3 => -4.0f32..4.0,
        1 => prop::sample::select(SPECIALS.to_vec()),
    ]
}

// ----- convolution ----------------------------------------------------------------------

#[derive(Clone, Debug)]
struct ConvCase {
    x: Operand,
    w: Operand,
    bias: Option<Operand>,
    opts: Conv2dOptions,
    one_d: bool,
}

fn conv_case() -> impl Strategy<Value = ConvCase> {
    (
        (
            0usize..=2,
            prop_oneof![1 => Just(0usize), 6 => 1usize..=4],
            0usize..=6,
            0usize..=6,
        ),
        (1usize..=4, 1usize..=3, 1usize..=3),
        prop_oneof![
            12 => Just(None),
            1 => prop::sample::select(HUGE.to_vec()).prop_map(Some),
            1 => (0usize..=4).prop_map(Some)
        ],
        (pair(win()), pair(pad()), pair(dil())),
        (any::<bool>(), any::<bool>(), any::<bool>(), 0u8..12),
        (view(), view(), fill(), fill(), any::<u64>()),
    )
        .prop_map(
            |(
                (n, c, h, w),
                (o, kh, kw),
                groups,
                (stride, padding, dilation),
                (one_d, bias, unbatched, wild),
                (vx, vw, fx, fw, seed),
            )| {
                // Groups: mostly one that divides both channel counts.
                let groups = groups.unwrap_or(if c % 2 == 0 && o % 2 == 0 { 2 } else { 1 });
                let cg = if groups == 0 || c % groups != 0 {
                    c.max(1)
                } else {
                    c / groups
                };
                let (mut xs, mut ws) = if one_d {
                    (vec![n, c, w], vec![o, cg, kw])
                } else {
                    (vec![n, c, h, w], vec![o, cg, kh, kw])
                };
                if unbatched {
                    xs.remove(0);
                }
                // Sometimes a weight or input of the wrong rank or channel count.
                match wild {
                    0 => {
                        ws.pop();
                    }
                    1 => ws[1] += 1,
                    2 => xs.push(2),
                    _ => {}
                }
                let (stride, padding, dilation) = if one_d {
                    ([1, stride[1]], [0, padding[1]], [1, dilation[1]])
                } else {
                    (stride, padding, dilation)
                };
                let op = |shape, view, fill, s| Operand {
                    shape,
                    view,
                    fill,
                    seed: seed ^ s,
                };
                ConvCase {
                    x: op(xs, vx, fx, 0),
                    w: op(ws, vw, fw, 1),
                    bias: bias
                        .then(|| op(vec![if wild == 3 { o + 1 } else { o }], View::Plain, fw, 2)),
                    opts: Conv2dOptions {
                        stride,
                        padding,
                        dilation,
                        groups,
                    },
                    one_d,
                }
            },
        )
}

impl Case for ConvCase {
    fn call<B: Backend>(&self, b: &B) -> CaseResult<Outcome<B>> {
        let (lx, x) = self.x.make(b, true)?;
        let (lw, w) = self.w.make(b, true)?;
        let mut leaves = vec![lx, lw];
        let bias = match &self.bias {
            Some(o) => {
                let (l, t) = o.make(b, true)?;
                leaves.push(l);
                Some(t)
            }
            None => None,
        };
        let y = if self.one_d {
            let o = self.opts;
            x.conv1d(
                &w,
                bias.as_ref(),
                Conv1dOptions {
                    stride: o.stride[1],
                    padding: o.padding[1],
                    dilation: o.dilation[1],
                    groups: o.groups,
                },
            )?
        } else {
            x.conv2d(&w, bias.as_ref(), self.opts)?
        };
        Ok(Outcome::one(y, leaves))
    }
}

// ----- pooling --------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Pool {
    Max(MaxPool2dOptions),
    Avg(AvgPool2dOptions),
    Adaptive([usize; 2]),
}

fn pool() -> impl Strategy<Value = Pool> {
    prop_oneof![
        (
            pair(win()),
            prop::option::of(pair(win())),
            pair(pad()),
            pair(dil()),
            any::<bool>()
        )
            .prop_map(|(kernel_size, stride, padding, dilation, ceil_mode)| {
                Pool::Max(MaxPool2dOptions {
                    kernel_size,
                    stride,
                    padding,
                    dilation,
                    ceil_mode,
                })
            }),
        (
            pair(win()),
            prop::option::of(pair(win())),
            pair(pad()),
            (any::<bool>(), any::<bool>()),
            prop::option::of(win())
        )
            .prop_map(
                |(
                    kernel_size,
                    stride,
                    padding,
                    (ceil_mode, count_include_pad),
                    divisor_override,
                )| {
                    Pool::Avg(AvgPool2dOptions {
                        kernel_size,
                        stride,
                        padding,
                        ceil_mode,
                        count_include_pad,
                        divisor_override,
                    })
                }
            ),
        pair(prop_oneof![4 => 0usize..=5, 1 => prop::sample::select(HUGE.to_vec())])
            .prop_map(Pool::Adaptive),
    ]
}

#[derive(Clone, Debug)]
struct PoolCase {
    x: Operand,
    pool: Pool,
}

impl Case for PoolCase {
    fn call<B: Backend>(&self, b: &B) -> CaseResult<Outcome<B>> {
        let (lx, x) = self.x.make(b, true)?;
        let y = match self.pool {
            Pool::Max(o) => x.max_pool2d(o)?,
            Pool::Avg(o) => x.avg_pool2d(o)?,
            Pool::Adaptive(s) => x.adaptive_avg_pool2d(s)?,
        };
        Ok(Outcome::one(y, vec![lx]))
    }
}

// ----- normalisation --------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Norm {
    Batch {
        training: bool,
        stats: bool,
        momentum: Momentum,
    },
    Layer(Vec<usize>),
    Group(usize),
}

#[derive(Clone, Debug)]
struct NormCase {
    x: Operand,
    norm: Norm,
    /// Shape of weight, bias and running statistics (`None`: not given).
    params: Option<Vec<usize>>,
    eps: f32,
    seed: u64,
}

fn norm_case() -> impl Strategy<Value = NormCase> {
    (
        operand_of(prop_oneof![6 => shape(2, 4), 1 => small_shape(1, 4)]),
        0u8..3,
        (any::<bool>(), any::<bool>()),
        prop_oneof![
            3 => scalar_arg().prop_map(Momentum::Exponential),
            1 => prop::sample::select(vec![0u64, 1, 2, u64::MAX])
                .prop_map(|n| Momentum::CumulativeAverage { num_batches_tracked: n }),
        ],
        (0usize..=4, prop_oneof![4 => 1usize..=4, 1 => Just(0usize), 1 => prop::sample::select(HUGE.to_vec())]),
        (any::<bool>(), 0u8..4),
        prop_oneof![3 => Just(1e-5f32), 1 => scalar_arg()],
        any::<u64>(),
    )
        .prop_map(
            |(x, kind, (training, stats), momentum, (trail, groups), (affine, wild), eps, seed)| {
                let dims = x.shape.clone();
                let channel = if dims.len() >= 2 { dims[1] } else { dims[0] };
                let (norm, params) = match kind {
                    0 => (
                        Norm::Batch {
                            training,
                            stats,
                            momentum,
                        },
                        vec![channel],
                    ),
                    1 => {
                        let k = trail.clamp(1, dims.len());
                        let ns = dims[dims.len() - k..].to_vec();
                        let ns = if trail == 0 { vec![] } else { ns };
                        (Norm::Layer(ns.clone()), ns)
                    }
                    _ => (Norm::Group(groups), vec![channel]),
                };
                // Sometimes parameters of the wrong shape.
                let params = match wild {
                    0 => {
                        let mut p = params;
                        p.push(1);
                        p
                    }
                    _ => params,
                };
                NormCase {
                    x,
                    norm,
                    params: (affine || stats).then_some(params),
                    eps,
                    seed,
                }
            },
        )
}

impl Case for NormCase {
    fn call<B: Backend>(&self, b: &B) -> CaseResult<Outcome<B>> {
        let (lx, x) = self.x.make(b, true)?;
        let mut leaves = vec![lx];
        let mut state = Vec::new();
        let param = |s: u64, grad: bool| -> Result<Option<Tensor<B>>> {
            match &self.params {
                None => Ok(None),
                Some(shape) => {
                    let n: usize = shape.iter().product();
                    let t =
                        Tensor::from_vec(b, values(n, self.seed ^ s, Fill::Normal), shape.clone())?;
                    Ok(Some(if grad { t.requires_grad()? } else { t }))
                }
            }
        };
        let (w, bias) = (param(1, true)?, param(2, true)?);
        if let (Some(w), Some(bias)) = (&w, &bias) {
            leaves.push(w.clone());
            leaves.push(bias.clone());
        }
        let y = match &self.norm {
            Norm::Batch {
                training,
                stats,
                momentum,
            } => {
                let (rm, rv) = (param(3, false)?, param(4, false)?);
                let rv = rv.map(|v| v.abs()).transpose()?;
                let mut o = BatchNormOptions {
                    training: *training,
                    momentum: *momentum,
                    eps: self.eps,
                    ..BatchNormOptions::default()
                };
                if *stats {
                    o.running_mean = rm.as_ref();
                    o.running_var = rv.as_ref();
                }
                o.weight = w.as_ref();
                o.bias = bias.as_ref();
                let y = x.batch_norm(o)?;
                state.extend(rm);
                state.extend(rv);
                y
            }
            Norm::Layer(ns) => x.layer_norm(
                ns,
                LayerNormOptions {
                    weight: w.as_ref(),
                    bias: bias.as_ref(),
                    eps: self.eps,
                },
            )?,
            Norm::Group(g) => x.group_norm(
                *g,
                GroupNormOptions {
                    weight: w.as_ref(),
                    bias: bias.as_ref(),
                    eps: self.eps,
                },
            )?,
        };
        Ok(Outcome {
            outputs: vec![y],
            state,
            leaves,
        })
    }
}

// ----- attention ------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum MaskKind {
    Allow,
    Block,
    Additive,
}

#[derive(Clone, Debug)]
struct AttentionCase {
    q: Operand,
    k: Operand,
    v: Operand,
    mask: Option<(MaskKind, Operand)>,
    causal: bool,
    scale: Option<f32>,
}

fn attention_case() -> impl Strategy<Value = AttentionCase> {
    (
        small_shape(0, 2),
        (small_dim(), small_dim(), small_dim(), small_dim()),
        (0u8..10, prop::bool::weighted(0.2)),
        prop::option::of(prop_oneof![
            Just(MaskKind::Allow),
            Just(MaskKind::Block),
            Just(MaskKind::Additive)
        ]),
        prop::option::of(scalar_arg()),
        (view(), view(), view(), fill(), fill()),
        any::<u64>(),
        small_shape(0, 3),
    )
        .prop_map(
            |(
                batch,
                (l, s, e, ev),
                (wild, causal),
                mask,
                scale,
                (vq, vk, vv, fq, fm),
                seed,
                other,
            )| {
                let with = |tail: [usize; 2]| {
                    let mut d = batch.clone();
                    d.extend(tail);
                    d
                };
                let (mut qs, mut ks, mut vs) = (with([l, e]), with([s, e]), with([s, ev]));
                match wild {
                    0 => ks = with([s, e + 1]),
                    1 => vs = with([s + 1, ev]),
                    2 => qs = vec![e],
                    _ => {}
                }
                let mask_shape = match wild {
                    3 => other,
                    4 => vec![1, s],
                    _ => vec![l, s],
                };
                let op = |shape, view, fill, x| Operand {
                    shape,
                    view,
                    fill,
                    seed: seed ^ x,
                };
                AttentionCase {
                    q: op(qs, vq, fq, 0),
                    k: op(ks, vk, fq, 1),
                    v: op(vs, vv, fq, 2),
                    mask: mask.map(|m| (m, op(mask_shape, View::Plain, fm, 3))),
                    causal,
                    scale,
                }
            },
        )
}

impl Case for AttentionCase {
    fn call<B: Backend>(&self, b: &B) -> CaseResult<Outcome<B>> {
        let (lq, q) = self.q.make(b, true)?;
        let (lk, k) = self.k.make(b, true)?;
        let (lv, v) = self.v.make(b, true)?;
        let mut leaves = vec![lq, lk, lv];
        let mask = match &self.mask {
            Some((kind, o)) => {
                let additive = matches!(kind, MaskKind::Additive);
                let (l, t) = o.make(b, additive)?;
                if additive {
                    leaves.push(l);
                    Some((*kind, t))
                } else {
                    // Zeros and ones (and NaN, which is non-zero).
                    Some((*kind, t.relu()?.clamp(None, Some(1.0))?))
                }
            }
            None => None,
        };
        let opts = AttentionOptions {
            mask: mask.as_ref().map(|(kind, t)| match kind {
                MaskKind::Allow => AttentionMask::Allow(t),
                MaskKind::Block => AttentionMask::Block(t),
                MaskKind::Additive => AttentionMask::Additive(t),
            }),
            is_causal: self.causal,
            scale: self.scale,
        };
        let y = q.scaled_dot_product_attention(&k, &v, opts)?;
        Ok(Outcome::one(y, leaves))
    }
}

// ----- the properties -------------------------------------------------------------------

proptest! {
    #![proptest_config(config(3000))]

    #[test]
    fn convolution(case in conv_case()) {
        check(case)?;
    }

    #[test]
    fn pooling(
        x in operand_of(prop_oneof![6 => shape(3, 4), 1 => small_shape(0, 4)]),
        pool in pool(),
    ) {
        check(PoolCase { x, pool })?;
    }

    #[test]
    fn normalisation(case in norm_case()) {
        check(case)?;
    }

    #[test]
    fn attention(case in attention_case()) {
        check(case)?;
    }
}
