//! Cases of the training kernels (`exactgrad_core::kernels`): normalisation, pooling,
//! im2col/col2im, dropout masks and the optimizer updates. A kernel with several outputs
//! (statistics, argmax indices, gradients, updated state) is compared on all of them,
//! concatenated in a fixed order; argmax indices enter as two f32 bit patterns each.

use super::cases::{Kernel, View};
use super::check::upload;
use exactgrad_core::kernels::{
    pool_out_size, AdamSpec, AdaptivePool2dSpec, AttentionScoresSpec, AvgPool2dSpec, Col2imSpec,
    NormGrads, NormParam, NormSpec, NormStats, Pool2dSpec, ScoreMask, SgdSpec,
};
use exactgrad_core::{Backend, Philox, Result};
use std::format;
use std::string::String;
use std::vec;
use std::vec::Vec;

/// One call of a training kernel, with its spec.
#[derive(Clone, Debug, PartialEq)]
pub enum TrainCall {
    /// `norm_stats`.
    NormStats(NormSpec),
    /// `norm_forward`, with or without weight and bias.
    NormForward(NormSpec, bool, bool),
    /// `norm_backward`: with a weight, statistics from the input, and which of
    /// `dx`, `dw`, `db` are asked for.
    NormBackward(NormSpec, bool, bool, [bool; 3]),
    /// `max_pool2d`.
    MaxPool2d(Pool2dSpec),
    /// `max_pool2d_backward` (argmax from the reference's forward pass).
    MaxPool2dBackward(Pool2dSpec),
    /// `avg_pool2d`.
    AvgPool2d(AvgPool2dSpec),
    /// `avg_pool2d_backward`.
    AvgPool2dBackward(AvgPool2dSpec),
    /// `adaptive_avg_pool2d`.
    AdaptiveAvgPool2d(AdaptivePool2dSpec),
    /// `adaptive_avg_pool2d_backward`.
    AdaptiveAvgPool2dBackward(AdaptivePool2dSpec),
    /// `im2col`.
    Im2col(Col2imSpec),
    /// `col2im`.
    Col2im(Col2imSpec),
    /// `depthwise_conv` (the spec's `c` channels, one filter each).
    DepthwiseConv(Col2imSpec),
    /// `depthwise_grad_input`.
    DepthwiseGradInput(Col2imSpec),
    /// `depthwise_grad_weight`, added to a gradient of random values.
    DepthwiseGradWeight(Col2imSpec),
    /// `attention_scores`, with a mask of the given kind read through a view of shape
    /// `[batch, L, S]` (broadcast dimensions and strides as the kit's views).
    AttentionScores(AttentionScoresSpec, Option<(ScoreMask, View)>),
    /// `dropout_mask(key, p, scale, start)` over `len` elements.
    DropoutMask {
        /// Stream key.
        key: u64,
        /// Drop probability.
        p: f32,
        /// First element index.
        start: u64,
        /// Elements.
        len: usize,
    },
    /// `sgd_step` over `len` elements.
    SgdStep(SgdSpec, usize),
    /// `adam_step` over `len` elements.
    AdamStep(AdamSpec, usize),
}

impl TrainCall {
    /// The kernel called.
    pub fn kernel(&self) -> Kernel {
        match self {
            TrainCall::NormStats(..) => Kernel::NormStats,
            TrainCall::NormForward(..) => Kernel::NormForward,
            TrainCall::NormBackward(..) => Kernel::NormBackward,
            TrainCall::MaxPool2d(..) => Kernel::MaxPool2d,
            TrainCall::MaxPool2dBackward(..) => Kernel::MaxPool2dBackward,
            TrainCall::AvgPool2d(..) => Kernel::AvgPool2d,
            TrainCall::AvgPool2dBackward(..) => Kernel::AvgPool2dBackward,
            TrainCall::AdaptiveAvgPool2d(..) => Kernel::AdaptiveAvgPool2d,
            TrainCall::AdaptiveAvgPool2dBackward(..) => Kernel::AdaptiveAvgPool2dBackward,
            TrainCall::Im2col(..) => Kernel::Im2col,
            TrainCall::Col2im(..) => Kernel::Col2im,
            TrainCall::DepthwiseConv(..) => Kernel::DepthwiseConv,
            TrainCall::DepthwiseGradInput(..) => Kernel::DepthwiseGradInput,
            TrainCall::DepthwiseGradWeight(..) => Kernel::DepthwiseGradWeight,
            TrainCall::AttentionScores(..) => Kernel::AttentionScores,
            TrainCall::DropoutMask { .. } => Kernel::DropoutMask,
            TrainCall::SgdStep(..) => Kernel::SgdStep,
            TrainCall::AdamStep(..) => Kernel::AdamStep,
        }
    }

    /// The sizes, as printed in reports.
    pub fn shape(&self) -> String {
        format!("{self:?}")
    }
}

fn below(rng: &mut Philox, n: usize) -> usize {
    rng.below(n.max(1) as u32) as usize
}

fn norm_spec(rng: &mut Philox, big: bool) -> NormSpec {
    let p = 1 + below(rng, 4);
    let scale = if big { 8 } else { 1 };
    match below(rng, 3) {
        0 => NormSpec {
            p,
            q: below(rng, 20 * scale),
            r: below(rng, 40 * scale),
            param: NormParam::PerQ,
        },
        1 => NormSpec {
            p,
            q: below(rng, 20 * scale),
            r: below(rng, 70),
            param: NormParam::PerR,
        },
        _ => {
            let (groups, cpg, spatial) =
                (1 + below(rng, 4), 1 + below(rng, 4), below(rng, 20 * scale));
            NormSpec {
                p: 1,
                q: groups * below(rng, 6),
                r: cpg * spatial,
                param: NormParam::Group {
                    groups,
                    cpg,
                    spatial,
                },
            }
        }
    }
}

fn pool_spec(rng: &mut Philox, big: bool, dilated: bool) -> Pool2dSpec {
    let planes = 1 + below(rng, if big { 300 } else { 5 });
    if below(rng, 4) == 0 {
        // The most common window (2 × 2, stride 2, no padding), which backends may treat
        // apart: rows wide enough for several blocks of lanes, odd and even sizes.
        let (h, w) = (2 + below(rng, 20), 2 + below(rng, 70));
        return Pool2dSpec {
            planes,
            h,
            w,
            oh: h / 2,
            ow: w / 2,
            kernel: [2, 2],
            stride: [2, 2],
            padding: [0, 0],
            dilation: [1, 1],
        };
    }
    let (h, w) = (1 + below(rng, 20), 1 + below(rng, 20));
    let kernel = [1 + below(rng, 4), 1 + below(rng, 4)];
    let stride = [1 + below(rng, 3), 1 + below(rng, 3)];
    let dilation = if dilated {
        [1 + below(rng, 2), 1 + below(rng, 2)]
    } else {
        [1, 1]
    };
    let padding = [below(rng, kernel[0] / 2 + 1), below(rng, kernel[1] / 2 + 1)];
    let ceil = below(rng, 2) == 0;
    let oh = pool_out_size(h, kernel[0], stride[0], padding[0], dilation[0], ceil).max(1) as usize;
    let ow = pool_out_size(w, kernel[1], stride[1], padding[1], dilation[1], ceil).max(1) as usize;
    Pool2dSpec {
        planes,
        h,
        w,
        oh,
        ow,
        kernel,
        stride,
        padding,
        dilation,
    }
}

fn col_spec(rng: &mut Philox, big: bool) -> Col2imSpec {
    let c = below(rng, if big { 12 } else { 4 });
    // One case in four is a wide, short image (16 to 41 columns), so that rows of the
    // columns are long enough for the vector copies of a backend's im2col and col2im.
    let (h, w) = if below(rng, 4) == 0 {
        (1 + below(rng, 6), 16 + below(rng, 26))
    } else {
        (1 + below(rng, 14), 1 + below(rng, 14))
    };
    let (kh, kw) = (1 + below(rng, 4), 1 + below(rng, 4));
    let stride = [1 + below(rng, 3), 1 + below(rng, 3)];
    let padding = [below(rng, 3), below(rng, 3)];
    let mut dilation = [1 + below(rng, 2), 1 + below(rng, 2)];
    let out = |size: usize, k: usize, s: usize, p: usize, d: &mut usize| -> usize {
        if *d * (k - 1) + 1 > size + 2 * p {
            *d = 1;
        }
        if k > size + 2 * p {
            return 0;
        }
        (size + 2 * p - *d * (k - 1) - 1) / s + 1
    };
    let oh = out(h, kh, stride[0], padding[0], &mut dilation[0]);
    let ow = out(w, kw, stride[1], padding[1], &mut dilation[1]);
    Col2imSpec {
        c,
        h,
        w,
        kh: if oh == 0 { 1 } else { kh },
        kw: if ow == 0 { 1 } else { kw },
        stride,
        padding,
        dilation,
        oh: if oh == 0 {
            (h + 2 * padding[0] - 1) / stride[0] + 1
        } else {
            oh
        },
        ow: if ow == 0 {
            (w + 2 * padding[1] - 1) / stride[1] + 1
        } else {
            ow
        },
    }
}

fn some_f32(rng: &mut Philox, v: f32) -> Option<f32> {
    (below(rng, 3) != 0).then_some(v)
}

/// A random call of training kernel `kernel`; `big` asks for sizes above the parallel
/// chunks of typical backends.
pub fn random_call(kernel: Kernel, rng: &mut Philox, big: bool) -> TrainCall {
    let len = if big {
        (1 << 14) + below(rng, 1 << 15)
    } else {
        below(rng, 150)
    };
    match kernel {
        Kernel::NormStats => TrainCall::NormStats(norm_spec(rng, big)),
        Kernel::NormForward => {
            TrainCall::NormForward(norm_spec(rng, big), below(rng, 2) == 0, below(rng, 2) == 0)
        }
        Kernel::NormBackward => TrainCall::NormBackward(
            norm_spec(rng, big),
            below(rng, 2) == 0,
            below(rng, 4) != 0,
            [below(rng, 4) != 0, below(rng, 2) == 0, below(rng, 2) == 0],
        ),
        Kernel::MaxPool2d => TrainCall::MaxPool2d(pool_spec(rng, big, true)),
        Kernel::MaxPool2dBackward => TrainCall::MaxPool2dBackward(pool_spec(rng, big, true)),
        Kernel::AvgPool2d | Kernel::AvgPool2dBackward => {
            let spec = AvgPool2dSpec {
                pool: pool_spec(rng, big, false),
                count_include_pad: below(rng, 2) == 0,
                divisor_override: (below(rng, 4) == 0).then(|| 1 + below(rng, 9)),
            };
            if kernel == Kernel::AvgPool2d {
                TrainCall::AvgPool2d(spec)
            } else {
                TrainCall::AvgPool2dBackward(spec)
            }
        }
        Kernel::AdaptiveAvgPool2d | Kernel::AdaptiveAvgPool2dBackward => {
            let spec = AdaptivePool2dSpec {
                planes: 1 + below(rng, if big { 300 } else { 5 }),
                h: 1 + below(rng, 20),
                w: 1 + below(rng, 20),
                oh: 1 + below(rng, 8),
                ow: 1 + below(rng, 8),
            };
            if kernel == Kernel::AdaptiveAvgPool2d {
                TrainCall::AdaptiveAvgPool2d(spec)
            } else {
                TrainCall::AdaptiveAvgPool2dBackward(spec)
            }
        }
        Kernel::Im2col => TrainCall::Im2col(col_spec(rng, big)),
        Kernel::Col2im => TrainCall::Col2im(col_spec(rng, big)),
        Kernel::DepthwiseConv => TrainCall::DepthwiseConv(col_spec(rng, big)),
        Kernel::DepthwiseGradInput => TrainCall::DepthwiseGradInput(col_spec(rng, big)),
        Kernel::DepthwiseGradWeight => TrainCall::DepthwiseGradWeight(col_spec(rng, big)),
        Kernel::AttentionScores => {
            let (batch, l, s) = (
                below(rng, 4),
                1 + below(rng, 20),
                below(rng, if big { 700 } else { 40 }),
            );
            let spec = AttentionScoresSpec {
                rows: batch * l,
                l,
                s,
                scale: [0.125, 1.0, rng.uniform(-2.0, 2.0)][below(rng, 3)],
                causal: below(rng, 2) == 0,
            };
            let mask = (below(rng, 4) != 0).then(|| {
                let kind = [ScoreMask::Additive, ScoreMask::Allow, ScoreMask::Block][below(rng, 3)];
                let mut v = View::random(&[batch, l, s], rng);
                // Masks are often broadcast over queries (key padding) or batches.
                if below(rng, 2) == 0 {
                    v.expand[1] = true;
                }
                (kind, v)
            });
            TrainCall::AttentionScores(spec, mask)
        }
        Kernel::DropoutMask => TrainCall::DropoutMask {
            key: rng.next_u64(),
            p: [0.0, 0.1, 0.5, 0.9, 1.0, rng.next_f32()][below(rng, 6)],
            start: if below(rng, 2) == 0 {
                0
            } else {
                rng.next_u64() >> 4
            },
            len,
        },
        Kernel::SgdStep => {
            let (mu, wd) = (rng.uniform(0.0, 1.0), rng.uniform(0.0, 0.1));
            let momentum = some_f32(rng, mu);
            TrainCall::SgdStep(
                SgdSpec {
                    neg_lr: -rng.uniform(0.0, 0.5),
                    weight_decay: some_f32(rng, wd),
                    momentum,
                    dampening: rng.uniform(0.5, 1.0),
                    nesterov: below(rng, 2) == 0,
                    first: below(rng, 3) == 0,
                    maximize: below(rng, 4) == 0,
                },
                len,
            )
        }
        _ => {
            let amsgrad = below(rng, 2) == 0;
            let decoupled = below(rng, 2) == 0;
            TrainCall::AdamStep(
                AdamSpec {
                    neg_step: -rng.uniform(0.0, 0.1),
                    w1: [0.1, 0.6, rng.next_f32()][below(rng, 3)],
                    beta2: 0.999,
                    w2: 1.0 - 0.999,
                    bc2_sqrt: rng.uniform(0.01, 1.0),
                    eps: [1e-8, 0.0][below(rng, 2)],
                    weight_decay: if decoupled { None } else { some_f32(rng, 0.01) },
                    decay: if decoupled {
                        some_f32(rng, 0.999)
                    } else {
                        None
                    },
                    amsgrad,
                    maximize: below(rng, 4) == 0,
                },
                len,
            )
        }
    }
}

/// The input buffers of `call` (values from `vals(i, n)`) and the output length.
pub fn inputs<R: Backend>(
    call: &TrainCall,
    reference: &R,
    vals: &dyn Fn(u64, usize) -> Vec<f32>,
) -> (Vec<Vec<f32>>, usize) {
    let numel = |s: &NormSpec| s.p * s.q * s.r;
    match call {
        TrainCall::NormStats(s) => (vec![vals(0, numel(s))], 3 * s.q),
        TrainCall::NormForward(s, ..) => (
            vec![
                vals(0, numel(s)),
                vals(1, s.q),
                vals(2, s.q),
                vals(3, s.q),
                vals(4, s.params()),
                vals(5, s.params()),
            ],
            numel(s),
        ),
        TrainCall::NormBackward(s, ..) => (
            vec![
                vals(0, numel(s)),
                vals(1, numel(s)),
                vals(2, s.q),
                vals(3, s.q),
                vals(4, s.q),
                vals(5, s.params()),
            ],
            numel(s) + 2 * s.params(),
        ),
        TrainCall::MaxPool2d(s) => {
            let ohw = s.planes * s.oh * s.ow;
            (vec![vals(0, s.planes * s.h * s.w)], 3 * ohw)
        }
        TrainCall::MaxPool2dBackward(s) => {
            let ohw = s.planes * s.oh * s.ow;
            let x = vals(0, s.planes * s.h * s.w);
            let mut argmax = vec![usize::MAX; ohw];
            let forward = |argmax: &mut [usize]| -> Result<()> {
                let x = upload(reference, &x)?;
                let mut y = reference.storage_from_vec(vec![0.0; ohw])?;
                reference.max_pool2d(s, R::view(&x), R::view_mut(&mut y), argmax)
            };
            if forward(&mut argmax).is_err() {
                argmax.fill(usize::MAX);
            }
            // The indices travel as f32 bit patterns, two per index.
            let idx: Vec<f32> = argmax
                .iter()
                .flat_map(|&a| {
                    let a = a as u64;
                    [f32::from_bits(a as u32), f32::from_bits((a >> 32) as u32)]
                })
                .collect();
            (vec![idx, vals(1, ohw)], s.planes * s.h * s.w)
        }
        TrainCall::AvgPool2d(s) => (
            vec![vals(0, s.pool.planes * s.pool.h * s.pool.w)],
            s.pool.planes * s.pool.oh * s.pool.ow,
        ),
        TrainCall::AvgPool2dBackward(s) => (
            vec![vals(0, s.pool.planes * s.pool.oh * s.pool.ow)],
            s.pool.planes * s.pool.h * s.pool.w,
        ),
        TrainCall::AdaptiveAvgPool2d(s) => {
            (vec![vals(0, s.planes * s.h * s.w)], s.planes * s.oh * s.ow)
        }
        TrainCall::AdaptiveAvgPool2dBackward(s) => {
            (vec![vals(0, s.planes * s.oh * s.ow)], s.planes * s.h * s.w)
        }
        TrainCall::Im2col(s) => (
            vec![vals(0, s.c * s.h * s.w)],
            s.c * s.kh * s.kw * s.oh * s.ow,
        ),
        TrainCall::Col2im(s) => (
            vec![vals(0, s.c * s.kh * s.kw * s.oh * s.ow)],
            s.c * s.h * s.w,
        ),
        TrainCall::DepthwiseConv(s) => (
            vec![vals(0, s.c * s.h * s.w), vals(1, s.c * s.kh * s.kw)],
            s.c * s.oh * s.ow,
        ),
        TrainCall::DepthwiseGradInput(s) => (
            vec![vals(0, s.c * s.oh * s.ow), vals(1, s.c * s.kh * s.kw)],
            s.c * s.h * s.w,
        ),
        TrainCall::DepthwiseGradWeight(s) => (
            vec![
                vals(0, s.c * s.oh * s.ow),
                vals(1, s.c * s.h * s.w),
                vals(2, s.c * s.kh * s.kw),
            ],
            s.c * s.kh * s.kw,
        ),
        TrainCall::AttentionScores(s, mask) => {
            let mut bufs = vec![vals(0, s.rows * s.s)];
            if let Some((kind, v)) = mask {
                let (_, len) = v.layout();
                let mut m = vals(1, len);
                if *kind != ScoreMask::Additive {
                    // Half zeros, so that both branches of the boolean masks run.
                    for (i, x) in m.iter_mut().enumerate() {
                        if i % 2 == 0 {
                            *x = 0.0;
                        }
                    }
                }
                bufs.push(m);
            }
            (bufs, s.rows * s.s)
        }
        TrainCall::DropoutMask { len, .. } => (Vec::new(), *len),
        TrainCall::SgdStep(_, n) => (vec![vals(0, *n), vals(1, *n), vals(2, *n)], 2 * n),
        TrainCall::AdamStep(_, n) => (
            vec![
                vals(0, *n),
                vals(1, *n),
                vals(2, *n),
                vals(3, *n).iter().map(|v| v.abs()).collect(),
                vals(4, *n),
            ],
            4 * n,
        ),
    }
}

/// Runs `call` on `backend` and returns its outputs, concatenated.
pub fn run<B: Backend>(
    call: &TrainCall,
    bufs: &[Vec<f32>],
    out_len: usize,
    backend: &B,
) -> Result<Vec<f32>> {
    let b = bufs;
    let mut out = vec![super::check::UNWRITTEN; out_len];
    let up = |i: usize| upload(backend, &b[i]);
    Ok(match call {
        TrainCall::NormStats(s) => {
            let x = up(0)?;
            let mut o = backend.storage_from_vec(out)?;
            let (m, rest) = B::split_at_mut(B::view_mut(&mut o), s.q);
            let (c, q) = B::split_at_mut(rest, s.q);
            backend.norm_stats(s, B::view(&x), m, c, q)?;
            B::storage_to_vec(&o)?
        }
        TrainCall::NormForward(s, w, bias) => {
            let (x, mean, corr, rstd) = (up(0)?, up(1)?, up(2)?, up(3)?);
            let (weight, bias_buf) = (up(4)?, up(5)?);
            let st = NormStats {
                mean: B::view(&mean),
                corr: B::view(&corr),
                rstd: B::view(&rstd),
            };
            let mut o = backend.storage_from_vec(out)?;
            backend.norm_forward(
                s,
                B::view(&x),
                &st,
                w.then_some(B::view(&weight)),
                bias.then_some(B::view(&bias_buf)),
                B::view_mut(&mut o),
            )?;
            B::storage_to_vec(&o)?
        }
        TrainCall::NormBackward(s, w, depend, need) => {
            let (x, g, mean, corr, rstd) = (up(0)?, up(1)?, up(2)?, up(3)?, up(4)?);
            let weight = up(5)?;
            let st = NormStats {
                mean: B::view(&mean),
                corr: B::view(&corr),
                rstd: B::view(&rstd),
            };
            let n = s.p * s.q * s.r;
            let mut o = backend.storage_from_vec(out)?;
            let (dx, rest) = B::split_at_mut(B::view_mut(&mut o), n);
            let (dw, db) = B::split_at_mut(rest, s.params());
            let x = if need[0] || need[1] {
                B::view(&x)
            } else {
                B::slice(B::view(&x), 0..0)
            };
            backend.norm_backward(
                s,
                x,
                B::view(&g),
                &st,
                w.then_some(B::view(&weight)),
                *depend,
                NormGrads {
                    dx: need[0].then_some(dx),
                    dw: need[1].then_some(dw),
                    db: need[2].then_some(db),
                },
            )?;
            B::storage_to_vec(&o)?
        }
        TrainCall::MaxPool2d(s) => {
            let ohw = s.planes * s.oh * s.ow;
            let mut argmax = vec![0usize; ohw];
            let x = up(0)?;
            let mut o = backend.storage_from_vec(out)?;
            backend.max_pool2d(
                s,
                B::view(&x),
                B::slice_mut(B::view_mut(&mut o), 0..ohw),
                &mut argmax,
            )?;
            let mut out = B::storage_to_vec(&o)?;
            for (i, a) in argmax.iter().enumerate() {
                let a = *a as u64;
                out[ohw + 2 * i] = f32::from_bits(a as u32);
                out[ohw + 2 * i + 1] = f32::from_bits((a >> 32) as u32);
            }
            out
        }
        TrainCall::MaxPool2dBackward(s) => {
            let argmax: Vec<usize> = b[0]
                .chunks(2)
                .map(|c| (u64::from(c[0].to_bits()) | u64::from(c[1].to_bits()) << 32) as usize)
                .collect();
            let g = up(1)?;
            let mut o = backend.storage_from_vec(out)?;
            backend.max_pool2d_backward(s, &argmax, B::view(&g), B::view_mut(&mut o))?;
            B::storage_to_vec(&o)?
        }
        TrainCall::AvgPool2d(s) => {
            let x = up(0)?;
            let mut o = backend.storage_from_vec(out)?;
            backend.avg_pool2d(s, B::view(&x), B::view_mut(&mut o))?;
            B::storage_to_vec(&o)?
        }
        TrainCall::AvgPool2dBackward(s) => {
            let g = up(0)?;
            let mut o = backend.storage_from_vec(out)?;
            backend.avg_pool2d_backward(s, B::view(&g), B::view_mut(&mut o))?;
            B::storage_to_vec(&o)?
        }
        TrainCall::AdaptiveAvgPool2d(s) => {
            let x = up(0)?;
            let mut o = backend.storage_from_vec(out)?;
            backend.adaptive_avg_pool2d(s, B::view(&x), B::view_mut(&mut o))?;
            B::storage_to_vec(&o)?
        }
        TrainCall::AdaptiveAvgPool2dBackward(s) => {
            let g = up(0)?;
            let mut o = backend.storage_from_vec(out)?;
            backend.adaptive_avg_pool2d_backward(s, B::view(&g), B::view_mut(&mut o))?;
            B::storage_to_vec(&o)?
        }
        TrainCall::Im2col(s) => {
            let image = up(0)?;
            let mut o = backend.storage_from_vec(out)?;
            backend.im2col(s, B::view(&image), B::view_mut(&mut o))?;
            B::storage_to_vec(&o)?
        }
        TrainCall::Col2im(s) => {
            let cols = up(0)?;
            let mut o = backend.storage_from_vec(out)?;
            backend.col2im(s, B::view(&cols), B::view_mut(&mut o))?;
            B::storage_to_vec(&o)?
        }
        TrainCall::DepthwiseConv(s) => {
            let (x, w) = (up(0)?, up(1)?);
            let mut o = backend.storage_from_vec(out)?;
            backend.depthwise_conv(s, B::view(&x), B::view(&w), B::view_mut(&mut o))?;
            B::storage_to_vec(&o)?
        }
        TrainCall::DepthwiseGradInput(s) => {
            let (g, w) = (up(0)?, up(1)?);
            let mut o = backend.storage_from_vec(out)?;
            backend.depthwise_grad_input(s, B::view(&g), B::view(&w), B::view_mut(&mut o))?;
            B::storage_to_vec(&o)?
        }
        TrainCall::DepthwiseGradWeight(s) => {
            let (g, x) = (up(0)?, up(1)?);
            out.copy_from_slice(&b[2]);
            let mut o = backend.storage_from_vec(out)?;
            backend.depthwise_grad_weight(s, B::view(&g), B::view(&x), B::view_mut(&mut o))?;
            B::storage_to_vec(&o)?
        }
        TrainCall::AttentionScores(s, mask) => {
            out.copy_from_slice(&b[0]);
            let mut o = backend.storage_from_vec(out)?;
            match mask {
                Some((kind, v)) => {
                    let (lay, _) = v.layout();
                    let m = up(1)?;
                    backend.attention_scores(
                        s,
                        B::view_mut(&mut o),
                        Some((*kind, B::view(&m), &lay)),
                    )?
                }
                None => backend.attention_scores(s, B::view_mut(&mut o), None)?,
            }
            B::storage_to_vec(&o)?
        }
        TrainCall::DropoutMask { key, p, start, .. } => {
            let scale = 1.0f32 / (1.0f32 - p);
            let mut o = backend.storage_from_vec(out)?;
            backend.dropout_mask(*key, *p, scale, *start, B::view_mut(&mut o))?;
            B::storage_to_vec(&o)?
        }
        TrainCall::SgdStep(s, n) => {
            let (p, buf) = out.split_at_mut(*n);
            p.copy_from_slice(&b[0]);
            buf.copy_from_slice(&b[2]);
            let grad = up(1)?;
            let mut o = backend.storage_from_vec(out)?;
            let (p, buf) = B::split_at_mut(B::view_mut(&mut o), *n);
            let buf = if s.momentum.is_some() {
                buf
            } else {
                B::slice_mut(buf, 0..0)
            };
            backend.sgd_step(s, p, B::view(&grad), buf)?;
            B::storage_to_vec(&o)?
        }
        TrainCall::AdamStep(s, n) => {
            let (p, rest) = out.split_at_mut(*n);
            let (m, rest) = rest.split_at_mut(*n);
            let (v, x) = rest.split_at_mut(*n);
            p.copy_from_slice(&b[0]);
            m.copy_from_slice(&b[2]);
            v.copy_from_slice(&b[3]);
            x.copy_from_slice(&b[4]);
            let grad = up(1)?;
            let mut o = backend.storage_from_vec(out)?;
            let (p, rest) = B::split_at_mut(B::view_mut(&mut o), *n);
            let (m, rest) = B::split_at_mut(rest, *n);
            let (v, x) = B::split_at_mut(rest, *n);
            let x = if s.amsgrad { x } else { B::slice_mut(x, 0..0) };
            backend.adam_step(s, p, B::view(&grad), m, v, x)?;
            B::storage_to_vec(&o)?
        }
    })
}
