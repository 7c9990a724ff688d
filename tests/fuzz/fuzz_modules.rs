//! Property-based fuzzing of the module constructors and their forward passes: sizes,
//! channel counts, group and head counts at 0, small and near `usize::MAX`; options at
//! their extremes; special values in configs (`eps`, `momentum`, `dropout`, slopes); and
//! inputs that fit the module or not. Each case builds the module from a seeded stream,
//! runs forward and backward (through its parameters) on `ScalarRefBackend` and on every
//! ISA path and thread count of `ExactBackend` (`fuzz_support::check`): no panic, no
//! overrun of the time limit, and either an error everywhere or the same bits (output,
//! parameter gradients, running statistics) everywhere.

use super::fuzz_support::*;
use exactgrad::nn::Module;
use exactgrad::prelude::*;
use proptest::prelude::*;

fn scalar_arg() -> impl Strategy<Value = f32> {
    prop_oneof![
        3 => -2.0f32..2.0,
        1 => prop::sample::select(SPECIALS.to_vec()),
    ]
}

/// A probability-like argument: mostly in [0, 1], sometimes special.
fn prob_arg() -> impl Strategy<Value = f32> {
    prop_oneof![3 => Just(0.0f32), 2 => 0.0f32..=1.0, 1 => scalar_arg()]
}

fn pair(s: impl Strategy<Value = usize> + Clone) -> impl Strategy<Value = [usize; 2]> + Clone {
    (s.clone(), s).prop_map(|(a, b)| [a, b])
}

#[derive(Clone, Debug)]
enum Spec {
    Linear {
        i: usize,
        o: usize,
        bias: bool,
    },
    LinearFrom {
        w: Operand,
        b: Option<Operand>,
    },
    Conv {
        i: usize,
        o: usize,
        kernel: [usize; 2],
        opts: Conv2dOptions,
        bias: bool,
    },
    ConvFrom {
        w: Operand,
        b: Option<Operand>,
        opts: Conv2dOptions,
    },
    BatchNorm {
        c: usize,
        config: BatchNormConfig,
        training: bool,
    },
    LayerNorm {
        shape: Vec<usize>,
        eps: f32,
        affine: bool,
        bias: bool,
    },
    Attention(MultiheadAttentionConfig, bool),
    Encoder(TransformerEncoderLayerConfig, bool),
    Activation(u8, f32),
}

fn spec() -> impl Strategy<Value = Spec> {
    let conv_opts = || {
        (
            pair(size_arg()),
            pair(prop_oneof![4 => 0usize..=1, 1 => size_arg()]),
            pair(size_arg()),
            prop_oneof![4 => Just(1usize), 1 => size_arg()],
        )
            .prop_map(|(stride, padding, dilation, groups)| Conv2dOptions {
                stride,
                padding,
                dilation,
                groups,
            })
    };
    prop_oneof![
        (size_arg(), size_arg(), any::<bool>()).prop_map(|(i, o, bias)| Spec::Linear {
            i,
            o,
            bias
        }),
        (
            operand_of(small_shape(1, 3)),
            prop::option::of(operand_of(small_shape(1, 2)))
        )
            .prop_map(|(w, b)| Spec::LinearFrom { w, b }),
        (
            size_arg(),
            size_arg(),
            pair(size_arg()),
            conv_opts(),
            any::<bool>()
        )
            .prop_map(|(i, o, kernel, opts, bias)| Spec::Conv {
                i,
                o,
                kernel,
                opts,
                bias
            }),
        (
            operand_of(small_shape(3, 5)),
            prop::option::of(operand_of(small_shape(1, 2))),
            conv_opts()
        )
            .prop_map(|(w, b, opts)| Spec::ConvFrom { w, b, opts }),
        (
            size_arg(),
            prop_oneof![3 => Just(1e-5f32), 1 => scalar_arg()],
            prop::option::of(prob_arg()),
            (any::<bool>(), any::<bool>(), any::<bool>())
        )
            .prop_map(
                |(c, eps, momentum, (affine, track, training))| Spec::BatchNorm {
                    c,
                    config: BatchNormConfig {
                        eps,
                        momentum,
                        affine,
                        track_running_stats: track,
                    },
                    training,
                }
            ),
        (
            prop::collection::vec(size_arg(), 0..=3),
            prop_oneof![3 => Just(1e-5f32), 1 => scalar_arg()],
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(|(shape, eps, affine, bias)| Spec::LayerNorm {
                shape,
                eps,
                affine,
                bias
            }),
        (
            size_arg(),
            prop_oneof![3 => 1usize..=2, 1 => size_arg()],
            prob_arg(),
            (any::<bool>(), any::<bool>(), any::<bool>())
        )
            .prop_map(|(e, h, dropout, (bias, batch_first, training))| {
                // Mostly an embedding size the head count divides.
                let e = if e <= 4 { e * h.min(4) } else { e };
                Spec::Attention(
                    MultiheadAttentionConfig {
                        embed_dim: e,
                        num_heads: h,
                        dropout,
                        bias,
                        batch_first,
                    },
                    training,
                )
            }),
        (
            (1usize..=2, 1usize..=2),
            prop_oneof![4 => 1usize..=6, 1 => size_arg()],
            prob_arg(),
            (
                any::<bool>(),
                any::<bool>(),
                any::<bool>(),
                any::<bool>(),
                any::<bool>()
            ),
            prop_oneof![3 => Just(1e-5f32), 1 => scalar_arg()],
        )
            .prop_map(
                |((h, m), ff, dropout, (gelu, batch_first, norm_first, bias, training), eps)| {
                    Spec::Encoder(
                        TransformerEncoderLayerConfig {
                            d_model: h * m,
                            nhead: h,
                            dim_feedforward: ff,
                            dropout,
                            activation: if gelu {
                                FeedForwardActivation::Gelu
                            } else {
                                FeedForwardActivation::Relu
                            },
                            layer_norm_eps: eps,
                            batch_first,
                            norm_first,
                            bias,
                        },
                        training,
                    )
                }
            ),
        (0u8..6, scalar_arg()).prop_map(|(k, s)| Spec::Activation(k, s)),
    ]
}

type Model<B> = Box<dyn Module<B>>;

impl Spec {
    fn build<B: Backend>(&self, b: &B, rng: &mut Philox) -> CaseResult<Model<B>> {
        Ok(match self {
            Spec::Linear { i, o, bias: true } => Box::new(Linear::new(b, *i, *o, rng)?),
            Spec::Linear { i, o, bias: false } => Box::new(Linear::without_bias(b, *i, *o, rng)?),
            Spec::LinearFrom { w, b: bias } => {
                let w = w.make(b, false)?.1;
                let bias = bias.as_ref().map(|o| o.make(b, false)).transpose()?;
                Box::new(Linear::from_tensors(&w, bias.as_ref().map(|t| &t.1))?)
            }
            Spec::Conv {
                i,
                o,
                kernel,
                opts,
                bias,
            } => {
                let config = Conv2dConfig {
                    stride: opts.stride,
                    padding: opts.padding,
                    dilation: opts.dilation,
                    groups: opts.groups,
                    bias: *bias,
                    ..Conv2dConfig::new(*i, *o, *kernel)
                };
                Box::new(Conv2d::new(b, config, rng)?)
            }
            Spec::ConvFrom { w, b: bias, opts } => {
                let w = w.make(b, false)?.1;
                let bias = bias.as_ref().map(|o| o.make(b, false)).transpose()?;
                Box::new(Conv2d::from_tensors(
                    &w,
                    bias.as_ref().map(|t| &t.1),
                    *opts,
                )?)
            }
            Spec::BatchNorm {
                c,
                config,
                training,
            } => {
                let m = BatchNorm2d::with_config(b, *c, *config)?;
                m.set_training(*training);
                Box::new(m)
            }
            Spec::LayerNorm {
                shape,
                eps,
                affine,
                bias,
            } => {
                let config = LayerNormConfig {
                    eps: *eps,
                    elementwise_affine: *affine,
                    bias: *bias,
                };
                Box::new(LayerNorm::with_config(b, shape, config)?)
            }
            Spec::Attention(config, training) => {
                let m = MultiheadAttention::new(b, *config, rng)?;
                m.set_training(*training);
                Box::new(m)
            }
            Spec::Encoder(config, training) => {
                let m = TransformerEncoderLayer::new(b, *config, rng)?;
                m.set_training(*training);
                Box::new(m)
            }
            Spec::Activation(k, s) => match k {
                0 => Box::new(Relu),
                1 => Box::new(LeakyRelu { negative_slope: *s }),
                2 => Box::new(Tanh),
                3 => Box::new(Sigmoid),
                4 => Box::new(Gelu {
                    approximate: GeluApproximation::Tanh,
                }),
                _ => Box::new(Flatten),
            },
        })
    }

    /// The input shape the module expects when its sizes are small (`[2, 3]` otherwise,
    /// which such a module must refuse or never be built for).
    fn input_shape(&self, n: usize, hw: [usize; 2]) -> Vec<usize> {
        let small = |v: usize| if v <= 4 { v } else { 3 };
        match self {
            Spec::Linear { i, .. } => vec![n, small(*i)],
            Spec::LinearFrom { w, .. } => vec![n, w.shape.last().copied().unwrap_or(1)],
            Spec::Conv { i, .. } => vec![n, small(*i), hw[0], hw[1]],
            Spec::ConvFrom { w, opts, .. } => vec![
                n,
                w.shape.get(1).copied().unwrap_or(1) * opts.groups.min(4),
                hw[0],
                hw[1],
            ],
            Spec::BatchNorm { c, .. } => vec![n, small(*c), hw[0], hw[1]],
            Spec::LayerNorm { shape, .. } => {
                let mut s = vec![n];
                s.extend(shape.iter().map(|&d| small(d)));
                s
            }
            Spec::Attention(c, _) => vec![hw[0], n, small(c.embed_dim)],
            Spec::Encoder(c, _) => vec![hw[0], n, small(c.d_model)],
            Spec::Activation(..) => vec![n, hw[0], hw[1]],
        }
    }
}

#[derive(Clone, Debug)]
struct ModuleCase {
    spec: Spec,
    seed: u64,
    n: usize,
    hw: [usize; 2],
    fill: Fill,
    view: View,
}

fn module_case() -> impl Strategy<Value = ModuleCase> {
    (
        spec(),
        any::<u64>(),
        0usize..=3,
        pair(1usize..=4),
        fill(),
        view(),
    )
        .prop_map(|(spec, seed, n, hw, fill, view)| ModuleCase {
            spec,
            seed,
            n,
            hw,
            fill,
            view,
        })
}

impl Case for ModuleCase {
    fn call<B: Backend>(&self, b: &B) -> CaseResult<Outcome<B>> {
        let mut rng = Philox::new(self.seed);
        let model = self.spec.build(b, &mut rng)?;
        let x = Operand {
            shape: self.spec.input_shape(self.n, self.hw),
            view: self.view,
            fill: self.fill,
            seed: self.seed ^ 7,
        };
        let (lx, x) = x.make(b, true)?;
        let y = model.forward(&x)?;
        let mut leaves = vec![lx];
        leaves.extend(model.parameters());
        Ok(Outcome {
            outputs: vec![y],
            state: model.named_buffers().into_iter().map(|(_, t)| t).collect(),
            leaves,
        })
    }
}

proptest! {
    #![proptest_config(config(4000))]

    #[test]
    fn module_constructors_and_forward(case in module_case()) {
        check(case)?;
    }
}

/// A module whose parameters would need more memory than exists (or whose element
/// count overflows) is refused at construction, on every backend, promptly.
#[test]
fn oversized_modules_are_refused() {
    #[derive(Clone, Debug)]
    struct Build(Spec);
    impl Case for Build {
        fn call<B: Backend>(&self, b: &B) -> CaseResult<Outcome<B>> {
            let m = self.0.build(b, &mut Philox::new(1))?;
            Ok(Outcome {
                outputs: Vec::new(),
                state: Vec::new(),
                leaves: m.parameters(),
            })
        }
    }
    let huge = [1usize << 56, usize::MAX];
    for &h in &huge {
        for spec in [
            Spec::Linear {
                i: h,
                o: 2,
                bias: true,
            },
            Spec::Linear {
                i: 2,
                o: h,
                bias: false,
            },
            Spec::Conv {
                i: h,
                o: 1,
                kernel: [3, 3],
                opts: Conv2dOptions::default(),
                bias: true,
            },
            Spec::Conv {
                i: 1,
                o: 1,
                kernel: [h, 2],
                opts: Conv2dOptions::default(),
                bias: true,
            },
            Spec::BatchNorm {
                c: h,
                config: BatchNormConfig::default(),
                training: true,
            },
            Spec::LayerNorm {
                shape: vec![h],
                eps: 1e-5,
                affine: true,
                bias: true,
            },
            Spec::Attention(MultiheadAttentionConfig::new(h, 1), true),
            Spec::Encoder(
                TransformerEncoderLayerConfig {
                    dim_feedforward: h,
                    ..TransformerEncoderLayerConfig::new(2, 1)
                },
                true,
            ),
        ] {
            check_err(Build(spec)).unwrap();
        }
    }
}

/// A regression case: a rank-5 weight of 5s read through a strided view (a leaf of 6250
/// elements for an operand of 3125) with a dilation far past the input.
#[test]
fn a_strided_weight_of_the_largest_small_shape() {
    let case = ModuleCase {
        spec: Spec::ConvFrom {
            w: Operand {
                shape: vec![5, 5, 5, 5, 4],
                view: View::Strided,
                fill: Fill::Normal,
                seed: 100044253997,
            },
            b: Some(Operand {
                shape: vec![4, 5],
                view: View::Plain,
                fill: Fill::Special,
                seed: 192614791828191267,
            }),
            opts: Conv2dOptions {
                stride: [4, 1],
                padding: [0, 0],
                dilation: [(1 << 61) + 1, 1],
                groups: 2,
            },
        },
        seed: 3139713876772713895,
        n: 1,
        hw: [2, 3],
        fill: Fill::Normal,
        view: View::Plain,
    };
    check(case).unwrap();
}
