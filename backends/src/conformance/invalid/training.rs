//! Probes of the training kernels: im2col and col2im, pooling, normalisation, attention
//! scores, dropout masks and the optimizer steps.

use super::*;

/// The probes of the training kernels (`exactgrad_core::kernels`).
pub(super) fn training_probes<B: Backend>(
    b: &B,
    data: &Arc<B::Storage>,
    add: &mut dyn FnMut(&'static str, KernelCall<B>),
) -> exactgrad_core::Result<()> {
    let norm = NormSpec {
        p: 2,
        q: 2,
        r: 4,
        param: NormParam::PerQ,
    };
    let huge = NormSpec {
        p: usize::MAX,
        q: 2,
        r: 2,
        ..norm
    };
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "norm_stats: input length",
        Box::new(move |out| {
            let (m, rest) = B::split_at_mut(out, 2);
            let (c, q) = B::split_at_mut(rest, 2);
            let d = B::view(&d1);
            b1.norm_stats(&norm, B::slice(d, 0..15), m, c, B::slice_mut(q, 0..2))
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "norm_stats: P·Q·R overflowing usize",
        Box::new(move |out| {
            let (m, rest) = B::split_at_mut(out, 2);
            let (c, q) = B::split_at_mut(rest, 2);
            b1.norm_stats(&huge, B::view(&d1), m, c, B::slice_mut(q, 0..2))
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "norm_stats: group layout not matching R",
        Box::new(move |out| {
            let bad = NormSpec {
                p: 1,
                q: 2,
                r: 8,
                param: NormParam::Group {
                    groups: 2,
                    cpg: 3,
                    spatial: 2,
                },
            };
            let (m, rest) = B::split_at_mut(out, 2);
            let (c, q) = B::split_at_mut(rest, 2);
            b1.norm_stats(&bad, B::view(&d1), m, c, B::slice_mut(q, 0..2))
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "norm_forward: weight length",
        Box::new(move |out| {
            let d = B::view(&d1);
            let st = stats::<B>(d);
            b1.norm_forward(
                &norm,
                d,
                &st,
                Some(B::slice(d, 0..3)),
                None,
                B::slice_mut(out, 0..16),
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "norm_forward: statistics length",
        Box::new(move |out| {
            let d = B::view(&d1);
            let st = NormStats {
                rstd: B::slice(d, 0..1),
                ..stats::<B>(d)
            };
            b1.norm_forward(&norm, d, &st, None, None, B::slice_mut(out, 0..16))
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "norm_backward: dx length",
        Box::new(move |out| {
            let d = B::view(&d1);
            let st = stats::<B>(d);
            let grads = NormGrads {
                dx: Some(B::slice_mut(out, 0..15)),
                dw: None,
                db: None,
            };
            b1.norm_backward(&norm, d, d, &st, None, true, grads)
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "norm_backward: no input for dw",
        Box::new(move |out| {
            let d = B::view(&d1);
            let st = stats::<B>(d);
            let grads = NormGrads {
                dx: None,
                dw: Some(B::slice_mut(out, 0..2)),
                db: None,
            };
            b1.norm_backward(&norm, B::slice(d, 0..0), d, &st, None, true, grads)
        }),
    );
    let pool = Pool2dSpec {
        planes: 1,
        h: 4,
        w: 4,
        oh: 2,
        ow: 2,
        kernel: [2, 2],
        stride: [2, 2],
        padding: [0, 0],
        dilation: [1, 1],
    };
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "max_pool2d: argmax length",
        Box::new(move |out| {
            b1.max_pool2d(
                &pool,
                B::view(&d1),
                B::slice_mut(out, 0..4),
                &mut [0usize; 3],
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "max_pool2d: zero kernel",
        Box::new(move |out| {
            let bad = Pool2dSpec {
                kernel: [0, 2],
                ..pool
            };
            b1.max_pool2d(
                &bad,
                B::view(&d1),
                B::slice_mut(out, 0..4),
                &mut [0usize; 4],
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "max_pool2d: windows overflowing usize",
        Box::new(move |out| {
            let bad = Pool2dSpec {
                padding: [usize::MAX, 0],
                ..pool
            };
            b1.max_pool2d(
                &bad,
                B::view(&d1),
                B::slice_mut(out, 0..4),
                &mut [0usize; 4],
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "max_pool2d: no planes, a plane size overflowing usize",
        Box::new(move |out| {
            let bad = Pool2dSpec {
                planes: 0,
                h: 1 << 40,
                w: 1 << 40,
                oh: 1 << 40,
                ow: 1 << 40,
                kernel: [1, 1],
                stride: [1, 1],
                ..pool
            };
            b1.max_pool2d(
                &bad,
                B::slice(B::view(&d1), 0..0),
                B::slice_mut(out, 0..0),
                &mut [],
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "max_pool2d_backward: argmax index outside its plane",
        Box::new(move |out| {
            b1.max_pool2d_backward(
                &pool,
                &[0, 1, 16, 3],
                B::slice(B::view(&d1), 0..4),
                B::slice_mut(out, 0..16),
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "max_pool2d_backward: gradient length",
        Box::new(move |out| {
            b1.max_pool2d_backward(
                &pool,
                &[0, 1, 2, 3],
                B::slice(B::view(&d1), 0..3),
                B::slice_mut(out, 0..16),
            )
        }),
    );
    let avg = AvgPool2dSpec {
        pool,
        count_include_pad: true,
        divisor_override: None,
    };
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "avg_pool2d: output length",
        Box::new(move |out| b1.avg_pool2d(&avg, B::view(&d1), B::slice_mut(out, 0..5))),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "avg_pool2d: divisor_override 0",
        Box::new(move |out| {
            let bad = AvgPool2dSpec {
                divisor_override: Some(0),
                ..avg
            };
            b1.avg_pool2d(&bad, B::view(&d1), B::slice_mut(out, 0..4))
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "avg_pool2d_backward: input-gradient length",
        Box::new(move |out| {
            b1.avg_pool2d_backward(&avg, B::slice(B::view(&d1), 0..4), B::slice_mut(out, 0..15))
        }),
    );
    let ad = AdaptivePool2dSpec {
        planes: 1,
        h: 4,
        w: 4,
        oh: 3,
        ow: 3,
    };
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "adaptive_avg_pool2d: output length",
        Box::new(move |out| b1.adaptive_avg_pool2d(&ad, B::view(&d1), B::slice_mut(out, 0..8))),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "adaptive_avg_pool2d: planes × h × w overflowing usize",
        Box::new(move |out| {
            let bad = AdaptivePool2dSpec {
                planes: usize::MAX,
                h: 2,
                ..ad
            };
            b1.adaptive_avg_pool2d(&bad, B::view(&d1), B::slice_mut(out, 0..9))
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "adaptive_avg_pool2d: no planes, a plane size overflowing usize",
        Box::new(move |out| {
            let bad = AdaptivePool2dSpec {
                planes: 0,
                h: 1 << 40,
                w: 1 << 40,
                ..ad
            };
            b1.adaptive_avg_pool2d(&bad, B::slice(B::view(&d1), 0..0), B::slice_mut(out, 0..0))
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "avg_pool2d_backward: no planes, an output plane overflowing usize",
        Box::new(move |out| {
            let bad = AvgPool2dSpec {
                pool: Pool2dSpec {
                    planes: 0,
                    h: 1 << 40,
                    w: 1 << 40,
                    oh: 1 << 40,
                    ow: 1 << 40,
                    kernel: [1, 1],
                    stride: [1, 1],
                    ..pool
                },
                ..avg
            };
            b1.avg_pool2d_backward(&bad, B::slice(B::view(&d1), 0..0), B::slice_mut(out, 0..0))
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "adaptive_avg_pool2d_backward: gradient length",
        Box::new(move |out| {
            b1.adaptive_avg_pool2d_backward(
                &ad,
                B::slice(B::view(&d1), 0..8),
                B::slice_mut(out, 0..16),
            )
        }),
    );
    let col = Col2imSpec {
        c: 1,
        h: 4,
        w: 4,
        kh: 3,
        kw: 3,
        stride: [1, 1],
        padding: [1, 1],
        dilation: [1, 1],
        oh: 4,
        ow: 4,
    };
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "im2col: columns length",
        Box::new(move |out| b1.im2col(&col, B::view(&d1), B::slice_mut(out, 0..63))),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "im2col: windows past the padded input",
        Box::new(move |out| {
            let bad = Col2imSpec {
                oh: 5,
                ow: 2,
                ..col
            };
            b1.im2col(&bad, B::view(&d1), B::slice_mut(out, 0..90))
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "col2im: no channels, a column length overflowing usize",
        Box::new(move |out| {
            let bad = Col2imSpec {
                c: 0,
                h: 1 << 40,
                w: 1 << 40,
                kh: 1,
                kw: 1,
                padding: [0, 0],
                oh: 1 << 40,
                ow: 1 << 40,
                ..col
            };
            b1.col2im(&bad, B::slice(B::view(&d1), 0..0), B::slice_mut(out, 0..0))
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    let cols = b.storage_from_vec(vec![1.0f32; 144])?;
    add(
        "col2im: image length",
        Box::new(move |out| {
            b1.col2im(
                &col,
                B::view(&cols),
                B::slice_mut(out, 0..B::storage_len(&d1) - 1),
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "depthwise_conv: filters length",
        Box::new(move |out| {
            let v = B::view(&d1);
            b1.depthwise_conv(
                &col,
                B::slice(v, 0..16),
                B::slice(v, 0..8),
                B::slice_mut(out, 0..16),
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "depthwise_conv: windows past the padded input",
        Box::new(move |out| {
            let bad = Col2imSpec { oh: 5, ..col };
            let v = B::view(&d1);
            b1.depthwise_conv(
                &bad,
                B::slice(v, 0..16),
                B::slice(v, 0..9),
                B::slice_mut(out, 0..20),
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "depthwise_grad_input: gradient length",
        Box::new(move |out| {
            let v = B::view(&d1);
            b1.depthwise_grad_input(
                &col,
                B::slice(v, 0..15),
                B::slice(v, 0..9),
                B::slice_mut(out, 0..16),
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "depthwise_grad_weight: weight gradient length",
        Box::new(move |out| {
            let v = B::view(&d1);
            b1.depthwise_grad_weight(
                &col,
                B::slice(v, 0..16),
                B::slice(v, 0..16),
                B::slice_mut(out, 0..10),
            )
        }),
    );
    let spec = AttentionScoresSpec {
        rows: 4,
        l: 2,
        s: 4,
        scale: 1.0,
        causal: true,
    };
    let b1 = b.clone();
    add(
        "attention_scores: scores length",
        Box::new(move |out| b1.attention_scores(&spec, B::slice_mut(out, 0..15), None)),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "attention_scores: mask past its buffer",
        Box::new(move |out| {
            let lay = Layout::contiguous([4, 4]);
            b1.attention_scores(
                &spec,
                B::slice_mut(out, 0..16),
                Some((ScoreMask::Allow, B::slice(B::view(&d1), 0..15), &lay)),
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "attention_scores: mask of another shape",
        Box::new(move |out| {
            let lay = Layout::contiguous([2, 8]);
            b1.attention_scores(
                &spec,
                B::slice_mut(out, 0..16),
                Some((ScoreMask::Block, B::view(&d1), &lay)),
            )
        }),
    );
    let b1 = b.clone();
    add(
        "dropout_mask: p above 1",
        Box::new(move |out| b1.dropout_mask(7, 1.5, 1.0, 0, B::slice_mut(out, 0..8))),
    );
    let b1 = b.clone();
    add(
        "dropout_mask: p NaN",
        Box::new(move |out| b1.dropout_mask(7, f32::NAN, 1.0, 0, B::slice_mut(out, 0..8))),
    );
    let sgd = SgdSpec {
        neg_lr: -0.1,
        weight_decay: None,
        momentum: Some(0.9),
        dampening: 1.0,
        nesterov: false,
        first: false,
        maximize: false,
    };
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "sgd_step: momentum buffer missing",
        Box::new(move |out| {
            let (p, rest) = B::split_at_mut(out, 16);
            b1.sgd_step(&sgd, p, B::view(&d1), B::slice_mut(rest, 0..0))
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "sgd_step: gradient length",
        Box::new(move |out| {
            let (p, buf) = B::split_at_mut(out, 16);
            b1.sgd_step(
                &sgd,
                p,
                B::slice(B::view(&d1), 0..15),
                B::slice_mut(buf, 0..16),
            )
        }),
    );
    let adam = AdamSpec {
        neg_step: -0.001,
        w1: 0.1,
        beta2: 0.999,
        w2: 0.001,
        bc2_sqrt: 1.0,
        eps: 1e-8,
        weight_decay: None,
        decay: None,
        amsgrad: true,
        maximize: false,
    };
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "adam_step: AMSGrad without max_exp_avg_sq",
        Box::new(move |out| {
            let (p, rest) = B::split_at_mut(out, 8);
            let (m, rest) = B::split_at_mut(rest, 8);
            let (v, rest) = B::split_at_mut(rest, 8);
            b1.adam_step(
                &adam,
                p,
                B::slice(B::view(&d1), 0..8),
                m,
                v,
                B::slice_mut(rest, 0..0),
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "adam_step: moment length",
        Box::new(move |out| {
            let (p, rest) = B::split_at_mut(out, 8);
            let (m, rest) = B::split_at_mut(rest, 7);
            let (v, x) = B::split_at_mut(rest, 8);
            b1.adam_step(
                &adam,
                p,
                B::slice(B::view(&d1), 0..8),
                m,
                v,
                B::slice_mut(x, 0..8),
            )
        }),
    );
    Ok(())
}
