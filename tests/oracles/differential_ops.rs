//! Every operator, forward and backward, on every ISA path and thread count of
//! ExactBackend gives the bits of ScalarRefBackend, and on every path of FastBackend (the
//! FMA paths and the scalar path) those of FastScalarRefBackend (`docs/arithmetic.md` §1
//! and §6), at 1, 2, 3 and 8 threads. Each case hashes its output and all input
//! gradients.

use exactgrad::autograd::Result;
use exactgrad::prelude::*;

/// Values with a sprinkling of special values (NaN only where `specials`).
fn values(n: usize, seed: u64, specials: bool) -> Vec<f32> {
    let mut r = Philox::new(seed);
    let sp = [
        0.0f32,
        -0.0,
        1e-40,
        -3e-39,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    (0..n)
        .map(|i| {
            if specials && i % 11 == 5 {
                sp[r.below(sp.len() as u32) as usize]
            } else {
                r.uniform(-3.0, 3.0)
            }
        })
        .collect()
}

struct Cases<'a, B: Backend> {
    b: &'a B,
    out: Vec<(String, u64)>,
}

impl<B: Backend> Cases<'_, B> {
    fn leaf(&self, shape: &[usize], seed: u64, specials: bool) -> Tensor<B> {
        let n = shape.iter().product();
        Tensor::from_vec(self.b, values(n, seed, specials), shape)
            .unwrap()
            .requires_grad()
            .unwrap()
    }

    /// Runs `f` on fresh leaves of the given shapes, backward with a fixed seed
    /// gradient, and records the hash of output and gradients.
    fn case(
        &mut self,
        name: &str,
        shapes: &[&[usize]],
        specials: bool,
        f: impl Fn(&[Tensor<B>]) -> Result<Tensor<B>>,
    ) {
        let leaves: Vec<Tensor<B>> = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| self.leaf(s, 1000 + i as u64, specials))
            .collect();
        let y = f(&leaves).unwrap_or_else(|e| panic!("{name}: {e}"));
        let seed =
            Tensor::from_vec(self.b, values(y.numel(), 77, false), y.shape().clone()).unwrap();
        y.backward_with(BackwardOptions::default().gradient(&seed))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let grads: Vec<Tensor<B>> = leaves
            .iter()
            .map(|l| l.grad().unwrap_or_else(|| l.detach()))
            .collect();
        let mut all = vec![&y];
        all.extend(grads.iter());
        // NaN payloads are not part of fast mode's contract (it does not canonicalise), so
        // every NaN is hashed as the canonical one there; exact mode's bits are hashed as they
        // are (it must write only the canonical NaN).
        let mut hasher = exactgrad::core::GradHasher::new();
        for t in all {
            let fast = self.b.mode() == ComputeMode::Fast;
            let v: Vec<f32> = t
                .to_vec()
                .unwrap()
                .into_iter()
                .map(|x| if fast && x.is_nan() { f32::NAN } else { x })
                .collect();
            hasher.update(&v);
        }
        let h = hasher.finish();
        self.out.push((name.to_string(), h));
    }
}

/// A named operator of one operand.
type UnaryCase<B> = (&'static str, fn(&Tensor<B>) -> Result<Tensor<B>>);
/// A named conv_transpose2d case: input shape, weight shape, specials, options.
type TransposedCase = (
    &'static str,
    Vec<usize>,
    [usize; 4],
    bool,
    exactgrad::autograd::ConvTranspose2dOptions,
);
/// A named operator of two operands.
type BinaryCase<B> = (
    &'static str,
    fn(&Tensor<B>, &Tensor<B>) -> Result<Tensor<B>>,
);

fn run<B: Backend>(b: &B) -> Vec<(String, u64)> {
    let mut c = Cases { b, out: Vec::new() };
    let unary: Vec<UnaryCase<B>> = vec![
        ("neg", |x| x.neg()),
        ("abs", |x| x.abs()),
        ("relu", |x| x.relu()),
        ("leaky_relu", |x| x.leaky_relu(0.02)),
        ("sigmoid", |x| x.sigmoid()),
        ("tanh", |x| x.tanh()),
        ("gelu", |x| x.gelu(GeluApproximation::None)),
        ("gelu_tanh", |x| x.gelu(GeluApproximation::Tanh)),
        ("exp", |x| x.exp()),
        ("log", |x| x.abs()?.log()),
        ("sqrt", |x| x.abs()?.sqrt()),
        ("pow3", |x| x.pow(3.0)),
        ("pow2.5", |x| x.abs()?.pow(2.5)),
        ("clamp", |x| x.clamp(Some(-1.0), Some(0.5))),
        ("add_scalar", |x| x.add_scalar(0.3)),
        ("div_scalar", |x| x.div_scalar(7.0)),
    ];
    for len in [1usize, 3, 15, 16, 17, 33, 150] {
        for (name, f) in &unary {
            c.case(&format!("{name} [{len}]"), &[&[len]], true, |v| f(&v[0]));
        }
    }
    for (name, f) in &unary {
        c.case(&format!("{name} transposed"), &[&[17, 9]], true, |v| {
            f(&v[0].t()?)
        });
    }
    let bin: Vec<BinaryCase<B>> = vec![
        ("add", |a, b| a.add(b)),
        ("sub", |a, b| a.sub(b)),
        ("mul", |a, b| a.mul(b)),
        ("div", |a, b| a.div(b)),
    ];
    for (name, f) in &bin {
        for (sa, sb) in [
            (&[33usize][..], &[33usize][..]),
            (&[7, 33], &[33]),
            (&[5, 1, 17], &[4, 1]),
            (&[3, 40], &[3, 1]),
        ] {
            c.case(&format!("{name} {sa:?} {sb:?}"), &[sa, sb], true, |v| {
                f(&v[0], &v[1])
            });
        }
        c.case(
            &format!("{name} strided"),
            &[&[6, 34], &[17, 6]],
            false,
            |v| f(&v[0].slice(1, 0, 34, 2)?, &v[1].t()?),
        );
    }
    c.case("where", &[&[4, 33], &[33]], true, |v| {
        let mask = Tensor::from_vec(
            v[0].backend(),
            values(33, 5, false)
                .iter()
                .map(|&u| (u > 0.0) as u8 as f32)
                .collect(),
            [33],
        )?;
        Tensor::where_cond(&mask, &v[0], &v[1])
    });
    for (dims, keep) in [
        (&[0isize][..], false),
        (&[1], true),
        (&[0, 2], false),
        (&[-1], false),
    ] {
        c.case(&format!("sum {dims:?}"), &[&[5, 17, 33]], false, |v| {
            v[0].sum_dims(dims, keep)
        });
        c.case(&format!("mean {dims:?}"), &[&[5, 17, 33]], false, |v| {
            v[0].mean_dims(dims, keep)
        });
    }
    c.case("sum all", &[&[150, 3]], true, |v| v[0].sum());
    for (m, k, n) in [(1, 1, 1), (3, 17, 33), (17, 64, 15), (65, 33, 129)] {
        c.case(
            &format!("matmul {m}x{k}x{n}"),
            &[&[m, k], &[k, n]],
            false,
            |v| v[0].matmul(&v[1]),
        );
        c.case(
            &format!("matmul transposed {m}x{k}x{n}"),
            &[&[k, m], &[n, k]],
            false,
            |v| v[0].t()?.matmul(&v[1].t()?),
        );
    }
    c.case(
        "matmul batched broadcast",
        &[&[3, 1, 5, 7], &[2, 7, 9]],
        false,
        |v| v[0].matmul(&v[1]),
    );
    c.case("linear", &[&[4, 6, 20], &[10, 20], &[10]], false, |v| {
        v[0].linear(&v[1], Some(&v[2]))
    });
    for dim in [0isize, 1, -1] {
        c.case(&format!("softmax {dim}"), &[&[9, 33]], false, |v| {
            v[0].softmax(dim)
        });
        c.case(&format!("log_softmax {dim}"), &[&[9, 33]], false, |v| {
            v[0].log_softmax(dim)
        });
    }
    c.case("softmax with specials", &[&[4, 17]], true, |v| {
        v[0].softmax(-1)
    });
    c.case("concat", &[&[3, 5], &[3, 2]], false, |v| {
        Tensor::concat(&[&v[0], &v[1]], 1)
    });
    c.case("stack", &[&[3, 5], &[3, 5]], false, |v| {
        Tensor::stack(&[&v[0], &v[1]], 0)
    });
    for reduction in [Reduction::None, Reduction::Mean, Reduction::Sum] {
        let opts = CrossEntropyOptions {
            reduction,
            label_smoothing: 0.1,
            ..Default::default()
        };
        c.case(
            &format!("cross_entropy {reduction:?}"),
            &[&[6, 17]],
            false,
            |v| v[0].cross_entropy(&[0, 16, -100, 3, 8, 1], opts),
        );
        c.case(
            &format!("mse {reduction:?}"),
            &[&[5, 33], &[5, 33]],
            false,
            |v| v[0].mse_loss(&v[1], reduction),
        );
    }
    // Convolution family (exactgrad::autograd::ops::conv).
    {
        use exactgrad::autograd::{
            AvgPool2dOptions, Conv1dOptions, Conv2dOptions, MaxPool2dOptions,
        };
        let conv2d: [(&str, [usize; 4], [usize; 4], Conv2dOptions); 4] = [
            (
                "plain",
                [2, 5, 9, 11],
                [7, 5, 3, 3],
                Conv2dOptions {
                    padding: [1, 1],
                    ..Default::default()
                },
            ),
            (
                "stride dilation",
                [3, 4, 13, 10],
                [6, 4, 3, 2],
                Conv2dOptions {
                    stride: [2, 3],
                    padding: [2, 0],
                    dilation: [2, 1],
                    groups: 1,
                },
            ),
            (
                "groups",
                [2, 6, 8, 8],
                [9, 2, 3, 3],
                Conv2dOptions {
                    groups: 3,
                    ..Default::default()
                },
            ),
            (
                "depthwise",
                [2, 8, 10, 9],
                [16, 1, 3, 3],
                Conv2dOptions {
                    groups: 8,
                    padding: [1, 1],
                    ..Default::default()
                },
            ),
        ];
        for (name, xs, ws, opts) in conv2d {
            c.case(
                &format!("conv2d {name}"),
                &[&xs, &ws, &[ws[0]]],
                false,
                |v| v[0].conv2d(&v[1], Some(&v[2]), opts),
            );
        }
        c.case(
            "conv2d transposed input",
            &[&[2, 3, 12, 7], &[4, 3, 2, 3]],
            false,
            |v| {
                v[0].transpose(2, 3)?
                    .conv2d(&v[1], None, Conv2dOptions::default())
            },
        );
        // conv_transpose2d: stride with output padding, groups, dilation, padding; a
        // transposed input view; unbatched; specials in the input.
        use exactgrad::autograd::ConvTranspose2dOptions;
        let ct: [TransposedCase; 4] = [
            (
                "stride output_padding groups",
                vec![2, 6, 7, 5],
                [6, 2, 3, 3],
                false,
                ConvTranspose2dOptions {
                    stride: [2, 3],
                    padding: [1, 0],
                    output_padding: [1, 2],
                    groups: 3,
                    ..Default::default()
                },
            ),
            (
                "dilation padding",
                vec![3, 4, 9, 8],
                [4, 5, 2, 3],
                true,
                ConvTranspose2dOptions {
                    padding: [2, 1],
                    dilation: [3, 2],
                    output_padding: [2, 0],
                    ..Default::default()
                },
            ),
            (
                "depthwise",
                vec![2, 8, 6, 6],
                [8, 2, 3, 3],
                false,
                ConvTranspose2dOptions {
                    stride: [2, 2],
                    padding: [1, 1],
                    groups: 8,
                    ..Default::default()
                },
            ),
            (
                "unbatched",
                vec![5, 11, 13],
                [5, 7, 4, 2],
                false,
                ConvTranspose2dOptions {
                    stride: [1, 2],
                    output_padding: [0, 1],
                    ..Default::default()
                },
            ),
        ];
        for (name, xs, ws, specials, opts) in ct {
            let bias = [ws[1] * opts.groups];
            c.case(
                &format!("conv_transpose2d {name}"),
                &[&xs, &ws, &bias],
                specials,
                |v| v[0].conv_transpose2d(&v[1], Some(&v[2]), opts),
            );
        }
        c.case(
            "conv_transpose2d transposed input",
            &[&[2, 3, 7, 12], &[3, 4, 2, 3]],
            false,
            |v| {
                v[0].transpose(2, 3)?.conv_transpose2d(
                    &v[1],
                    None,
                    ConvTranspose2dOptions {
                        stride: [3, 2],
                        output_padding: [2, 1],
                        ..Default::default()
                    },
                )
            },
        );
        // Enough items to be gathered in blocks (one group) and wide enough to be split
        // across threads.
        c.case(
            "conv_transpose2d large",
            &[&[9, 16, 12, 12], &[16, 8, 4, 4], &[8]],
            false,
            |v| {
                v[0].conv_transpose2d(
                    &v[1],
                    Some(&v[2]),
                    ConvTranspose2dOptions {
                        stride: [2, 2],
                        padding: [1, 1],
                        ..Default::default()
                    },
                )
            },
        );
        let opts1 = Conv1dOptions {
            stride: 2,
            padding: 3,
            dilation: 2,
            groups: 2,
        };
        c.case("conv1d", &[&[3, 6, 33], &[10, 3, 4], &[10]], false, |v| {
            v[0].conv1d(&v[1], Some(&v[2]), opts1)
        });
        let mp = MaxPool2dOptions {
            stride: Some([2, 1]),
            padding: [1, 1],
            dilation: [1, 2],
            ceil_mode: true,
            ..MaxPool2dOptions::new([3, 3])
        };
        c.case("max_pool2d", &[&[2, 3, 11, 9]], true, |v| {
            v[0].max_pool2d(mp)
        });
        for include in [true, false] {
            let ap = AvgPool2dOptions {
                stride: Some([2, 2]),
                padding: [1, 1],
                ceil_mode: true,
                count_include_pad: include,
                ..AvgPool2dOptions::new([3, 3])
            };
            c.case(
                &format!("avg_pool2d include_pad={include}"),
                &[&[2, 3, 10, 9]],
                true,
                |v| v[0].avg_pool2d(ap),
            );
        }
        c.case("adaptive_avg_pool2d", &[&[2, 3, 11, 7]], true, |v| {
            v[0].adaptive_avg_pool2d([4, 3])
        });
        // Large enough that the kernels split into several tasks (planes, channels).
        c.case(
            "max_pool2d 2x2 split over threads",
            &[&[4, 17, 32, 32]],
            true,
            |v| v[0].max_pool2d(MaxPool2dOptions::new([2, 2])),
        );
        // Output rows of blocks of eight 2 × 2 windows and a tail.
        c.case("avg_pool2d 2x2 row tail", &[&[2, 3, 6, 38]], true, |v| {
            v[0].avg_pool2d(AvgPool2dOptions::new([2, 2]))
        });
        c.case(
            "adaptive_avg_pool2d 2x2 windows",
            &[&[2, 3, 6, 34]],
            true,
            |v| v[0].adaptive_avg_pool2d([3, 17]),
        );
        // Output rows of blocks of eight and a tail of three.
        c.case("max_pool2d 2x2 row tail", &[&[2, 3, 6, 38]], true, |v| {
            v[0].max_pool2d(MaxPool2dOptions::new([2, 2]))
        });
        c.case(
            "avg_pool2d split over threads",
            &[&[4, 17, 32, 32]],
            false,
            |v| v[0].avg_pool2d(AvgPool2dOptions::new([2, 2])),
        );
        c.case("pad", &[&[2, 3, 5]], true, |v| {
            v[0].pad(&[1, 2, 0, 3], -0.5)
        });
    }
    // Normalisation, dropout, embedding, index_select, split/chunk and attention
    // (exactgrad::autograd::ops::{norm, misc, attention}).
    {
        use exactgrad::autograd::{
            AttentionMask, AttentionOptions, BatchNormOptions, GroupNormOptions, LayerNormOptions,
        };
        let consts = |b: &B, n: usize, seed: u64, lo: f32| {
            let v = values(n, seed, false)
                .iter()
                .map(|x| lo + x.abs())
                .collect();
            Tensor::from_vec(b, v, [n])
        };
        for training in [true, false] {
            c.case(
                &format!("batch_norm training={training}"),
                &[&[4, 5, 3, 7], &[5], &[5]],
                false,
                |v| {
                    let rm = consts(v[0].backend(), 5, 7, -1.0)?;
                    let rv = consts(v[0].backend(), 5, 8, 0.5)?;
                    v[0].batch_norm(BatchNormOptions {
                        training,
                        ..BatchNormOptions::default()
                            .running_stats(&rm, &rv)
                            .affine(&v[1], &v[2])
                    })
                },
            );
        }
        c.case("batch_norm specials", &[&[6, 4, 5]], true, |v| {
            v[0].batch_norm(BatchNormOptions::training())
        });
        c.case(
            "batch_norm split over threads",
            &[&[4, 19, 16, 16], &[19], &[19]],
            false,
            |v| v[0].batch_norm(BatchNormOptions::training().affine(&v[1], &v[2])),
        );
        // Eight or more groups: blocks of eight groups whose sums advance together, rows
        // of 8 × 8 tiles and a tail, then the groups left over.
        c.case(
            "batch_norm specials eight groups",
            &[&[3, 17, 11]],
            true,
            |v| v[0].batch_norm(BatchNormOptions::training()),
        );
        c.case(
            "layer_norm eight rows",
            &[&[19, 37], &[37], &[37]],
            false,
            |v| v[0].layer_norm(&[37], LayerNormOptions::default().affine(&v[1], &v[2])),
        );
        c.case("layer_norm specials eight rows", &[&[16, 21]], true, |v| {
            v[0].layer_norm(&[21], LayerNormOptions::default())
        });
        c.case("layer_norm", &[&[6, 33], &[33], &[33]], false, |v| {
            v[0].layer_norm(&[33], LayerNormOptions::default().affine(&v[1], &v[2]))
        });
        c.case(
            "layer_norm two dims transposed",
            &[&[17, 3, 2]],
            false,
            |v| {
                v[0].permute(&[2, 1, 0])?
                    .layer_norm(&[3, 17], LayerNormOptions::default())
            },
        );
        c.case("layer_norm specials", &[&[11, 17]], true, |v| {
            v[0].layer_norm(&[17], LayerNormOptions::default())
        });
        c.case("group_norm", &[&[3, 6, 5, 4], &[6], &[6]], false, |v| {
            v[0].group_norm(3, GroupNormOptions::default().affine(&v[1], &v[2]))
        });
        c.case("dropout", &[&[9, 33]], true, |v| {
            v[0].dropout(0.3, true, &mut Philox::new(17))
        });
        c.case("dropout transposed", &[&[9, 33]], false, |v| {
            v[0].t()?.dropout(0.6, true, &mut Philox::new(18))
        });
        c.case("embedding", &[&[10, 33]], true, |v| {
            Tensor::embedding(&v[0], &[3, 1, 3, 9, 0, 3, 2, 2], &[2, 4], Some(2))
        });
        c.case("index_select", &[&[7, 33]], true, |v| {
            v[0].index_select(1, &[32, 0, 5, 5, 17, 5])
        });
        c.case("split and chunk", &[&[7, 33]], false, |v| {
            let a = v[0].split(10, 1)?;
            let b = v[0].chunk(3, 0)?;
            let s = v[0].split_sizes(&[2, 30, 1], -1)?;
            let flat = [&a[3], &a[1], &b[2], &b[0], &s[1]]
                .iter()
                .map(|t| t.reshape([t.numel()]))
                .collect::<Result<Vec<_>>>()?;
            Tensor::concat(&flat.iter().collect::<Vec<_>>(), 0)
        });
        let attn: [(&str, u8, bool); 5] = [
            ("plain", 0, false),
            ("bool mask", 1, false),
            ("additive mask", 2, false),
            ("causal", 0, true),
            ("fully masked rows", 3, false),
        ];
        for (name, kind, causal) in attn {
            c.case(
                &format!("scaled_dot_product_attention {name}"),
                &[
                    &[2, 3, 9, 17],
                    &[2, 3, 13, 17],
                    &[2, 3, 13, 11],
                    &[1, 3, 9, 13],
                ],
                false,
                |v| {
                    let keep: Vec<f32> = values(9 * 13, 23, false)
                        .iter()
                        .enumerate()
                        .map(|(i, &u)| {
                            if kind == 3 && i / 13 == 4 {
                                0.0
                            } else {
                                (u > -1.5) as u8 as f32
                            }
                        })
                        .collect();
                    let bool_mask = Tensor::from_vec(v[0].backend(), keep, [9, 13])?;
                    let mask = match kind {
                        0 => None,
                        2 => Some(AttentionMask::Additive(&v[3])),
                        _ => Some(AttentionMask::Allow(&bool_mask)),
                    };
                    let opts = AttentionOptions {
                        mask,
                        is_causal: causal,
                        scale: None,
                    };
                    v[0].scaled_dot_product_attention(&v[1], &v[2], opts)
                },
            );
        }
        c.case(
            "scaled_dot_product_attention heads transposed",
            &[&[2, 9, 3, 17], &[2, 13, 3, 17], &[2, 13, 3, 11]],
            false,
            |v| {
                v[0].transpose(1, 2)?.scaled_dot_product_attention(
                    &v[1].transpose(1, 2)?,
                    &v[2].transpose(1, 2)?,
                    AttentionOptions::default().scale(0.3),
                )
            },
        );
    }
    c.out
}

fn compare(reference: &[(String, u64)], got: &[(String, u64)], what: &str) {
    assert_eq!(reference.len(), got.len());
    for ((name, want), (_, have)) in reference.iter().zip(got) {
        assert_eq!(want, have, "{what}: case `{name}` differs from the reference (hash {have:#018x}, want {want:#018x})");
    }
}

#[test]
fn exact_backend_matches_scalar_ref_on_every_path_and_thread_count() {
    let reference = run(&ScalarRefBackend);
    for isa in Isa::ALL {
        if !isa.is_supported(ComputeMode::Exact) {
            println!("skipped: exact {isa} is not supported by this CPU");
            continue;
        }
        for threads in [1, 2, 3, 8] {
            let b = ExactBackend::with_isa(isa, threads).unwrap();
            compare(&reference, &run(&b), &format!("exact/{isa}/{threads}t"));
        }
    }
}

#[test]
fn fast_backend_matches_the_fast_reference_on_every_path_and_thread_count() {
    let reference = run(&FastScalarRefBackend);
    for isa in Isa::ALL {
        if !isa.is_supported(ComputeMode::Fast) {
            println!("skipped: fast {isa} is not supported by this CPU");
            continue;
        }
        for threads in [1, 2, 3, 8] {
            let b = FastBackend::with_isa(isa, threads).unwrap();
            compare(&reference, &run(&b), &format!("fast/{isa}/{threads}t"));
        }
    }
}
