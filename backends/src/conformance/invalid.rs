//! Invalid arguments: every kernel must refuse buffers and layouts that do not agree
//! (with an error, never a panic, never a read or write outside its buffers).
//!
//! [`check_invalid_arguments`] calls each kernel with hand-built arguments a caller could
//! pass through the safe API: output buffers of the wrong length, layouts whose offset
//! or strides reach past the buffer (also by overflowing `usize`), strides that do not
//! match the rank, mismatched broadcast shapes, `rows × cols` that overflows, and
//! product specs whose operands do not fit their buffers; for the training kernels also
//! specs whose sizes overflow or do not fit, argmax indices outside their plane, a
//! dropout probability outside `[0, 1]` and missing optimizer state. Each call runs under
//! `catch_unwind`; it passes when the kernel returns an error.
//!
//! Over 800 lines on purpose: one flat list of probes, a few per kernel, each a closure
//! with its hand-built arguments; split by kernel they would repeat the harness in every
//! part, and together they show at a glance which refusals each kernel has.
use exactgrad_core::backend::MatmulSpec;
use exactgrad_core::kernels::{
    AdamSpec, AdaptivePool2dSpec, AttentionScoresSpec, AvgPool2dSpec, Col2imSpec, NormGrads,
    NormParam, NormSpec, NormStats, Pool2dSpec, ScoreMask, SgdSpec,
};
use exactgrad_core::recurrent::{
    CellShape, GruCellGradInputs, GruCellGradOutputs, GruCellInputs, GruCellOutputs,
    LstmCellGradInputs, LstmCellGradOutputs, LstmCellInputs, LstmCellOutputs,
};
use exactgrad_core::{Backend, BinaryOp, Layout, Shape, UnaryOp, ViewMutOf, ViewOf};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::string::String;
use std::sync::Arc;
use std::vec;
use std::vec::Vec;

/// A call of one kernel on a given output buffer (a view of the backend's storage).
type KernelCall<B> = Box<dyn for<'x> Fn(ViewMutOf<'x, B>) -> Result<(), exactgrad_core::Error>>;

/// One invalid call that must be refused.
struct Probe<B: Backend> {
    what: &'static str,
    run: KernelCall<B>,
}

fn layout(shape: &[usize], strides: &[usize], offset: usize) -> Layout {
    Layout {
        shape: Shape::from(shape),
        strides: strides.to_vec(),
        offset,
    }
}

/// Normalisation statistics of two groups, each a view of the first two elements of `d`.
fn stats<B: Backend>(d: ViewOf<'_, B>) -> NormStats<'_, B::Views> {
    NormStats {
        mean: B::slice(d, 0..2),
        corr: B::slice(d, 0..2),
        rstd: B::slice(d, 0..2),
    }
}

fn probes<B: Backend>(b: &B) -> exactgrad_core::Result<Vec<Probe<B>>> {
    let data = Arc::new(b.storage_from_vec(vec![1.0f32; 16])?);
    let mut v: Vec<Probe<B>> = Vec::new();
    let mut add = |what: &'static str, f: KernelCall<B>| v.push(Probe { what, run: f });
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "copy_strided: offset past the buffer",
        Box::new(move |out| {
            b1.copy_strided(
                B::view(&d1),
                &layout(&[4], &[1], 14),
                B::slice_mut(out, 0..4),
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "copy_strided: stride overflowing usize",
        Box::new(move |out| {
            b1.copy_strided(
                B::view(&d1),
                &layout(&[2, 2], &[usize::MAX / 2 + 1, 1], 0),
                B::slice_mut(out, 0..4),
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "copy_strided: offset near usize::MAX",
        Box::new(move |out| {
            b1.copy_strided(
                B::view(&d1),
                &layout(&[2], &[1], usize::MAX - 1),
                B::slice_mut(out, 0..2),
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "copy_strided: one stride for two dimensions",
        Box::new(move |out| {
            b1.copy_strided(
                B::view(&d1),
                &layout(&[2, 2], &[1], 0),
                B::slice_mut(out, 0..4),
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "copy_strided: output too short",
        Box::new(move |out| {
            b1.copy_strided(
                B::view(&d1),
                &layout(&[4], &[1], 0),
                B::slice_mut(out, 0..3),
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "unary: output length",
        Box::new(move |out| {
            let d = B::view(&d1);
            b1.unary(UnaryOp::Exp, B::slice(d, 0..5), B::slice_mut(out, 0..4))
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "unary_backward: input lengths",
        Box::new(move |out| {
            let d = B::view(&d1);
            b1.unary_backward(
                UnaryOp::Tanh,
                B::slice(d, 0..4),
                B::slice(d, 0..3),
                B::slice(d, 0..4),
                B::slice_mut(out, 0..4),
            )
        }),
    );
    for op in BinaryOp::ALL {
        let (b1, d1) = (b.clone(), data.clone());
        add(
            "binary: operand layout past the buffer",
            Box::new(move |out| {
                let d = B::view(&d1);
                let la = layout(&[4, 4], &[4, 1], 4);
                let lb = layout(&[4, 4], &[0, 1], 0);
                b1.binary(op, d, &la, d, &lb, B::slice_mut(out, 0..16))
            }),
        );
        let (b1, d1) = (b.clone(), data.clone());
        add(
            "binary: offset wrapping around usize",
            Box::new(move |out| {
                let d = B::view(&d1);
                let la = layout(&[8], &[1], usize::MAX - 3);
                let lb = layout(&[8], &[1], 0);
                b1.binary(op, d, &la, d, &lb, B::slice_mut(out, 0..8))
            }),
        );
        let (b1, d1) = (b.clone(), data.clone());
        add(
            "binary: layouts of different shapes",
            Box::new(move |out| {
                let d = B::view(&d1);
                let la = layout(&[2, 8], &[8, 1], 0);
                let lb = layout(&[8, 2], &[2, 1], 0);
                b1.binary(op, d, &la, d, &lb, B::slice_mut(out, 0..16))
            }),
        );
    }
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "select: condition layout past the buffer",
        Box::new(move |out| {
            let d = B::view(&d1);
            let l = layout(&[4], &[1], 0);
            b1.select(B::slice(d, 0..2), &l, d, &l, d, &l, B::slice_mut(out, 0..4))
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "sum: huge stride",
        Box::new(move |out| {
            b1.sum(
                B::view(&d1),
                &layout(&[2, 4], &[1 << 40, 1], 0),
                &[true, false],
                B::slice_mut(out, 0..4),
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "sum: element count overflowing usize",
        Box::new(move |out| {
            b1.sum(
                B::view(&d1),
                &layout(&[(1 << 62) + 1, 4], &[0, 1], 0),
                &[true, false],
                B::slice_mut(out, 0..4),
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "sum: flags for another rank",
        Box::new(move |out| {
            b1.sum(
                B::view(&d1),
                &layout(&[4, 4], &[4, 1], 0),
                &[true],
                B::slice_mut(out, 0..4),
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "matmul: operand past its buffer",
        Box::new(move |out| {
            let spec = MatmulSpec {
                batch: 1,
                m: 4,
                k: 4,
                n: 4,
                a_offset: 1,
                a_strides: [0, 4, 1],
                b_offset: 0,
                b_strides: [0, 4, 1],
            };
            let d = B::view(&d1);
            b1.matmul(&spec, d, d, B::slice_mut(out, 0..16))
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "matmul: batch stride overflowing usize",
        Box::new(move |out| {
            let spec = MatmulSpec {
                batch: 2,
                m: 2,
                k: 2,
                n: 2,
                a_offset: 0,
                a_strides: [usize::MAX, 2, 1],
                b_offset: 0,
                b_strides: [0, 2, 1],
            };
            let d = B::view(&d1);
            b1.matmul(&spec, d, d, B::slice_mut(out, 0..8))
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "matmul: output length",
        Box::new(move |out| {
            let spec = MatmulSpec {
                batch: 1,
                m: 2,
                k: 2,
                n: 2,
                a_offset: 0,
                a_strides: [0, 2, 1],
                b_offset: 0,
                b_strides: [0, 2, 1],
            };
            let d = B::view(&d1);
            b1.matmul(&spec, d, d, B::slice_mut(out, 0..3))
        }),
    );
    // Operands broadcast along k (stride 0) fit any buffer: a reduction beyond
    // `MatmulSpec::MAX_K`, or an operand of more than MAX_ELEMENTS elements, is refused
    // (the CPU driver divided by `k · NR`, which wrapped to 0).
    for (what, k, n) in [
        ("matmul: k = 2^60 broadcast steps", 1usize << 60, 1),
        ("matmul: k = 2^63 broadcast steps", 1 << 63, 1),
        (
            "matmul: k = 2^56 broadcast steps over 128 columns",
            1 << 56,
            128,
        ),
    ] {
        let (b1, d1) = (b.clone(), data.clone());
        add(
            what,
            Box::new(move |out| {
                let spec = MatmulSpec {
                    batch: 1,
                    m: 1,
                    k,
                    n,
                    a_offset: 0,
                    a_strides: [0, 0, 0],
                    b_offset: 0,
                    b_strides: [0, 0, 0],
                };
                let d = B::view(&d1);
                b1.matmul(&spec, d, d, B::slice_mut(out, 0..n))
            }),
        );
    }
    for (what, seg, k) in [
        ("matmul_acc: segment length 0", 0, 4),
        ("matmul_acc: segment length not dividing k", 3, 4),
        ("matmul_acc: operand past its buffer", 2, 40),
    ] {
        let (b1, d1) = (b.clone(), data.clone());
        add(
            what,
            Box::new(move |out| {
                let spec = MatmulSpec {
                    batch: 1,
                    m: 2,
                    k,
                    n: 2,
                    a_offset: 0,
                    a_strides: [0, k, 1],
                    b_offset: 0,
                    b_strides: [0, 2, 1],
                };
                let d = B::view(&d1);
                b1.matmul_acc(&spec, seg, d, d, B::slice_mut(out, 0..4))
            }),
        );
    }
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "softmax: rows × cols overflowing usize",
        Box::new(move |out| {
            b1.softmax(B::view(&d1), usize::MAX, 2, false, B::slice_mut(out, 0..16))
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "softmax: rows × cols past the buffer",
        Box::new(move |out| b1.softmax(B::view(&d1), 4, 8, true, B::slice_mut(out, 0..16))),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "softmax_backward: gradient length",
        Box::new(move |out| {
            let d = B::view(&d1);
            b1.softmax_backward(d, B::slice(d, 0..8), 4, 4, false, B::slice_mut(out, 0..16))
        }),
    );
    training_probes(b, &data, &mut add)?;
    v.extend(cell_probes(b)?);
    Ok(v)
}

// ----- recurrent cells ------------------------------------------------------------------------

/// Invalid calls of the recurrent cell kernels: buffers shorter or longer than the
/// [`CellShape`] says, a bias of the wrong length, `batch × hidden` overflowing `usize`.
fn cell_probes<B: Backend>(b: &B) -> exactgrad_core::Result<Vec<Probe<B>>> {
    let mut v: Vec<Probe<B>> = Vec::new();
    let mut add = |what: &'static str, f: KernelCall<B>| v.push(Probe { what, run: f });
    let s = CellShape {
        batch: 2,
        hidden: 2,
    };
    let data = Arc::new(b.storage_from_vec(vec![0.5f32; 16])?);
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "lstm_cell: xg shorter than batch × 4·hidden",
        Box::new(move |out| {
            let d = B::view(&d1);
            let (gates, rest) = B::split_at_mut(B::shorten_mut(out), 16);
            let (c, h) = B::split_at_mut(rest, 4);
            b1.lstm_cell(
                s,
                LstmCellInputs {
                    xg: B::slice(d, 0..15),
                    hg: d,
                    bias_ih: None,
                    bias_hh: None,
                    c_prev: B::slice(d, 0..4),
                },
                LstmCellOutputs {
                    gates,
                    c,
                    h: B::slice_mut(h, 0..4),
                },
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "lstm_cell: bias of the wrong length",
        Box::new(move |out| {
            let d = B::view(&d1);
            let (gates, rest) = B::split_at_mut(B::shorten_mut(out), 16);
            let (c, h) = B::split_at_mut(rest, 4);
            b1.lstm_cell(
                s,
                LstmCellInputs {
                    xg: d,
                    hg: d,
                    bias_ih: Some(B::slice(d, 0..7)),
                    bias_hh: None,
                    c_prev: B::slice(d, 0..4),
                },
                LstmCellOutputs {
                    gates,
                    c,
                    h: B::slice_mut(h, 0..4),
                },
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "lstm_cell: batch × hidden overflowing usize",
        Box::new(move |out| {
            let d = B::view(&d1);
            let (gates, rest) = B::split_at_mut(B::shorten_mut(out), 16);
            let (c, h) = B::split_at_mut(rest, 4);
            b1.lstm_cell(
                CellShape {
                    batch: usize::MAX / 2,
                    hidden: 4,
                },
                LstmCellInputs {
                    xg: d,
                    hg: d,
                    bias_ih: None,
                    bias_hh: None,
                    c_prev: B::slice(d, 0..4),
                },
                LstmCellOutputs {
                    gates,
                    c,
                    h: B::slice_mut(h, 0..4),
                },
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "lstm_cell_backward: dc_prev too long",
        Box::new(move |out| {
            let d = B::view(&d1);
            let (dgates, dc_prev) = B::split_at_mut(B::shorten_mut(out), 16);
            b1.lstm_cell_backward(
                s,
                LstmCellGradInputs {
                    gates: d,
                    c_prev: B::slice(d, 0..4),
                    c: B::slice(d, 0..4),
                    dy: B::slice(d, 0..4),
                    dh_next: B::slice(d, 0..4),
                    dc_next: B::slice(d, 0..4),
                },
                LstmCellGradOutputs {
                    dgates,
                    dc_prev: B::slice_mut(dc_prev, 0..5),
                },
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "gru_cell: gates holding 3·hidden per row instead of 4·hidden",
        Box::new(move |out| {
            let d = B::view(&d1);
            let (gates, h) = B::split_at_mut(B::shorten_mut(out), 12);
            b1.gru_cell(
                s,
                GruCellInputs {
                    xg: B::slice(d, 0..12),
                    hg: B::slice(d, 0..12),
                    bias_ih: None,
                    bias_hh: Some(B::slice(d, 0..6)),
                    h_prev: B::slice(d, 0..4),
                },
                GruCellOutputs {
                    gates,
                    h: B::slice_mut(h, 0..4),
                },
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "gru_cell_backward: h_prev shorter than batch × hidden",
        Box::new(move |out| {
            let d = B::view(&d1);
            let (dxg, rest) = B::split_at_mut(B::shorten_mut(out), 12);
            let (dhg, dh_prev) = B::split_at_mut(rest, 12);
            b1.gru_cell_backward(
                s,
                GruCellGradInputs {
                    gates: d,
                    h_prev: B::slice(d, 0..3),
                    dy: B::slice(d, 0..4),
                    dh_next: B::slice(d, 0..4),
                },
                GruCellGradOutputs {
                    dxg,
                    dhg,
                    dh_prev: B::slice_mut(dh_prev, 0..4),
                },
            )
        }),
    );
    Ok(v)
}

/// The probes of the training kernels (`exactgrad_core::kernels`).
fn training_probes<B: Backend>(
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

/// Runs every invalid call on `backend`; returns how many were refused, or a message
/// naming the first call that was accepted or panicked.
pub fn check_invalid_arguments<B: Backend>(backend: &B) -> Result<usize, String> {
    let all = probes(backend).map_err(|e| {
        format!(
            "backend {} could not create the probes' buffers: {e}",
            backend.name()
        )
    })?;
    for p in &all {
        let mut out = backend.zeros(256).map_err(|e| {
            format!(
                "backend {} could not create an output buffer: {e}",
                backend.name()
            )
        })?;
        match catch_unwind(AssertUnwindSafe(|| (p.run)(B::view_mut(&mut out)))) {
            Ok(Err(_)) => {}
            Ok(Ok(())) => {
                return Err(format!(
                    "backend {} accepted invalid arguments: {}",
                    backend.name(),
                    p.what
                ))
            }
            Err(_) => {
                return Err(format!(
                    "backend {} panicked on invalid arguments instead of returning an error: {}",
                    backend.name(),
                    p.what
                ))
            }
        }
    }
    Ok(all.len())
}

impl<B: Backend> core::fmt::Debug for Probe<B> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.what)
    }
}
