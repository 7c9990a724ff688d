//! The convolution family: gradient checks (the check of `exactgrad_autograd::gradcheck`)
//! on random shapes, strides, padding, output padding, dilation, groups, depthwise
//! weights and strided/transposed/broadcast input views; the orders of `docs/conv.md`
//! (conv2d and conv_transpose2d) checked bit for bit against direct loops; and the errors
//! of bad arguments.
//!
//! Over 800 lines because the direct loops that write each order of `docs/conv.md` out
//! stand beside the checks that compare with them; one file per family of operators, as
//! the other modules of this subject.

use exactgrad::autograd::{
    AvgPool2dOptions, BackwardOptions, Conv1dOptions, Conv2dOptions, ConvTranspose2dOptions,
    MaxPool2dOptions,
};
use proptest::prelude::*;

use super::common::*;

/// Values uniform in [-1, 1).
fn tensor(shape: &[usize], seed: u64) -> T {
    uniform(shape, seed, -1.0, 1.0)
}

/// Values at least 0.1 apart, so a window's maximum never changes under perturbation.
fn distinct(shape: &[usize], seed: u64) -> T {
    permuted_grid(shape, seed, 0.1)
}

/// A spatial size for which a kernel of `k` taps with dilation `d` and padding `p` fits.
fn fitting(extra: usize, k: usize, d: usize, p: usize) -> usize {
    (d * (k - 1) + 1).saturating_sub(2 * p).max(1) + extra
}

/// How the input reaches `conv_transpose2d`: a view of [`View`], or a broadcast one (a
/// leaf with one row, expanded over the height: every output row reads it).
#[derive(Clone, Copy, Debug)]
enum TView {
    View(View),
    Broadcast,
}

fn tview_strategy() -> impl Strategy<Value = TView> {
    prop_oneof![
        view_strategy().prop_map(TView::View),
        Just(TView::Broadcast)
    ]
}

fn tview_leaf_shape(view: TView, shape: &[usize]) -> Vec<usize> {
    match view {
        TView::View(v) => leaf_shape(v, shape),
        TView::Broadcast => {
            let mut s = shape.to_vec();
            let r = s.len();
            s[r - 2] = 1;
            s
        }
    }
}

fn tapply_view(view: TView, x: &T, shape: &[usize]) -> exactgrad::autograd::Result<T> {
    match view {
        TView::View(v) => apply_view(v, x),
        TView::Broadcast => x.expand(shape),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn conv2d_random(
        n in 1usize..3, groups in 1usize..4, cg in 1usize..3, og in 1usize..3,
        k in (1usize..4, 1usize..4), s in (1usize..3, 1usize..4), p in (0usize..3, 0usize..2),
        d in (1usize..3, 1usize..3), extra in (0usize..4, 0usize..4), bias in any::<bool>(),
        view in view_strategy(), weight_transposed in any::<bool>(), seed in any::<u64>(),
    ) {
        let (c, o) = (cg * groups, og * groups);
        let h = fitting(extra.0, k.0, d.0, p.0);
        let w = fitting(extra.1, k.1, d.1, p.1);
        let x = tensor(&leaf_shape(view, &[n, c, h, w]), seed);
        let wshape = if weight_transposed { [cg, o, k.0, k.1] } else { [o, cg, k.0, k.1] };
        let wt = tensor(&wshape, seed ^ 1);
        let opts = Conv2dOptions { stride: [s.0, s.1], padding: [p.0, p.1], dilation: [d.0, d.1], groups };
        let name = format!("conv2d x[{n},{c},{h},{w}] {view:?} w{wshape:?} t={weight_transposed} {opts:?}");
        let weight = move |t: &T| if weight_transposed { t.transpose(0, 1) } else { Ok(t.clone()) };
        if bias {
            check(&name, &[x, wt, tensor(&[o], seed ^ 2)], |v| {
                apply_view(view, &v[0])?.conv2d(&weight(&v[1])?, Some(&v[2]), opts)
            });
        } else {
            check(&name, &[x, wt], |v| apply_view(view, &v[0])?.conv2d(&weight(&v[1])?, None, opts));
        }
    }

    #[test]
    fn conv2d_depthwise(
        n in 1usize..3, c in 1usize..5, mult in 1usize..3, k in (1usize..4, 1usize..4),
        s in (1usize..3, 1usize..3), p in (0usize..2, 0usize..2), d in (1usize..3, 1usize..3),
        extra in (0usize..3, 0usize..3), view in view_strategy(), unbatched in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let h = fitting(extra.0, k.0, d.0, p.0);
        let w = fitting(extra.1, k.1, d.1, p.1);
        let shape: Vec<usize> = if unbatched { vec![c, h, w] } else { vec![n, c, h, w] };
        let x = tensor(&leaf_shape(view, &shape), seed);
        let wt = tensor(&[c * mult, 1, k.0, k.1], seed ^ 1);
        let b = tensor(&[c * mult], seed ^ 2);
        let opts = Conv2dOptions { stride: [s.0, s.1], padding: [p.0, p.1], dilation: [d.0, d.1], groups: c };
        check(&format!("depthwise conv2d {shape:?} {view:?} x{mult} {opts:?}"), &[x, wt, b], |v| {
            apply_view(view, &v[0])?.conv2d(&v[1], Some(&v[2]), opts)
        });
    }

    #[test]
    fn conv1d_random(
        n in 1usize..3, groups in 1usize..4, cg in 1usize..3, og in 1usize..3, k in 1usize..5,
        s in 1usize..4, p in 0usize..3, d in 1usize..3, extra in 0usize..5, bias in any::<bool>(),
        view in view_strategy(), unbatched in any::<bool>(), seed in any::<u64>(),
    ) {
        let (c, o) = (cg * groups, og * groups);
        let l = fitting(extra, k, d, p);
        let shape: Vec<usize> = if unbatched { vec![c, l] } else { vec![n, c, l] };
        let x = tensor(&leaf_shape(view, &shape), seed);
        let wt = tensor(&[o, cg, k], seed ^ 1);
        let b = tensor(&[o], seed ^ 2);
        let opts = Conv1dOptions { stride: s, padding: p, dilation: d, groups };
        let name = format!("conv1d {shape:?} {view:?} w[{o},{cg},{k}] {opts:?} bias={bias}");
        check(&name, &[x, wt, b], |v| {
            apply_view(view, &v[0])?.conv1d(&v[1], bias.then_some(&v[2]), opts)
        });
    }

    #[test]
    fn conv_transpose2d_random(
        n in 1usize..3, groups in 1usize..3, cig in 1usize..3, cog in 1usize..3,
        k in (1usize..4, 1usize..4), s in (1usize..4, 1usize..4), p in (0usize..3, 0usize..3),
        d in (1usize..3, 1usize..3), op in (0usize..3, 0usize..3), hw in (1usize..5, 1usize..5),
        bias in any::<bool>(), view in tview_strategy(), unbatched in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let (c, o) = (cig * groups, cog * groups);
        // An output padding below max(stride, dilation), a padding that keeps the output
        // non-empty.
        let op = [op.0 % s.0.max(d.0), op.1 % s.1.max(d.1)];
        let full = |i: usize, sz: usize, kk: usize, st: usize, dl: usize| (sz - 1) * st + dl * (kk - 1) + op[i] + 1;
        let fh = full(0, hw.0, k.0, s.0, d.0);
        let fw = full(1, hw.1, k.1, s.1, d.1);
        let pad = [p.0.min((fh - 1) / 2), p.1.min((fw - 1) / 2)];
        let shape: Vec<usize> = if unbatched { vec![c, hw.0, hw.1] } else { vec![n, c, hw.0, hw.1] };
        let x = tensor(&tview_leaf_shape(view, &shape), seed);
        let wt = tensor(&[c, cog, k.0, k.1], seed ^ 1);
        let opts = ConvTranspose2dOptions {
            stride: [s.0, s.1], padding: pad, output_padding: op, dilation: [d.0, d.1], groups,
        };
        let name = format!("conv_transpose2d {shape:?} {view:?} w[{c},{cog},{},{}] {opts:?} bias={bias}", k.0, k.1);
        let y = tapply_view(view, &x, &shape).unwrap().conv_transpose2d(&wt, None, opts).unwrap();
        let dims = y.dims();
        prop_assert_eq!(dims[dims.len() - 2..].to_vec(), vec![fh - 2 * pad[0], fw - 2 * pad[1]]);
        prop_assert_eq!(dims[dims.len() - 3], o);
        if bias {
            check(&name, &[x, wt, tensor(&[o], seed ^ 2)], |v| {
                tapply_view(view, &v[0], &shape)?.conv_transpose2d(&v[1], Some(&v[2]), opts)
            });
        } else {
            check(&name, &[x, wt], |v| tapply_view(view, &v[0], &shape)?.conv_transpose2d(&v[1], None, opts));
        }
    }

    #[test]
    fn max_pool2d_random(
        n in 1usize..3, c in 1usize..3, k in (1usize..4, 1usize..4), s in (1usize..4, 1usize..4),
        default_stride in any::<bool>(), pad in (0usize..2, 0usize..2), d in (1usize..3, 1usize..3),
        extra in (0usize..4, 0usize..4), ceil_mode in any::<bool>(), view in view_strategy(),
        unbatched in any::<bool>(), seed in any::<u64>(),
    ) {
        let padding = [pad.0.min(k.0 / 2), pad.1.min(k.1 / 2)];
        let h = fitting(extra.0, k.0, d.0, padding[0]);
        let w = fitting(extra.1, k.1, d.1, padding[1]);
        let shape: Vec<usize> = if unbatched { vec![c, h, w] } else { vec![n, c, h, w] };
        let x = distinct(&leaf_shape(view, &shape), seed);
        let opts = MaxPool2dOptions {
            kernel_size: [k.0, k.1],
            stride: (!default_stride).then_some([s.0, s.1]),
            padding,
            dilation: [d.0, d.1],
            ceil_mode,
        };
        // A dilated window can fall entirely into the padding: its output is −∞ and has
        // no gradient, where central differences give NaN.
        let y = apply_view(view, &x).unwrap().max_pool2d(opts).unwrap();
        prop_assume!(y.to_vec().unwrap().iter().all(|v| v.is_finite()));
        check(&format!("max_pool2d {shape:?} {view:?} {opts:?}"), &[x], |v| {
            apply_view(view, &v[0])?.max_pool2d(opts)
        });
    }

    #[test]
    fn avg_pool2d_random(
        n in 1usize..3, c in 1usize..3, k in (1usize..4, 1usize..4), s in (1usize..4, 1usize..4),
        default_stride in any::<bool>(), pad in (0usize..2, 0usize..2), extra in (0usize..4, 0usize..4),
        ceil_mode in any::<bool>(), count_include_pad in any::<bool>(),
        divisor in prop_oneof![Just(None), (1usize..7).prop_map(Some)], view in view_strategy(),
        unbatched in any::<bool>(), seed in any::<u64>(),
    ) {
        let padding = [pad.0.min(k.0 / 2), pad.1.min(k.1 / 2)];
        let h = fitting(extra.0, k.0, 1, padding[0]);
        let w = fitting(extra.1, k.1, 1, padding[1]);
        let shape: Vec<usize> = if unbatched { vec![c, h, w] } else { vec![n, c, h, w] };
        let x = tensor(&leaf_shape(view, &shape), seed);
        let opts = AvgPool2dOptions {
            kernel_size: [k.0, k.1],
            stride: (!default_stride).then_some([s.0, s.1]),
            padding,
            ceil_mode,
            count_include_pad,
            divisor_override: divisor,
        };
        check(&format!("avg_pool2d {shape:?} {view:?} {opts:?}"), &[x], |v| {
            apply_view(view, &v[0])?.avg_pool2d(opts)
        });
    }

    #[test]
    fn adaptive_avg_pool2d_random(
        n in 1usize..3, c in 1usize..3, h in 1usize..8, w in 1usize..8, oh in 1usize..6,
        ow in 1usize..6, view in view_strategy(), unbatched in any::<bool>(), seed in any::<u64>(),
    ) {
        let shape: Vec<usize> = if unbatched { vec![c, h, w] } else { vec![n, c, h, w] };
        let x = tensor(&leaf_shape(view, &shape), seed);
        check(&format!("adaptive_avg_pool2d {shape:?} -> [{oh}, {ow}] {view:?}"), &[x], |v| {
            apply_view(view, &v[0])?.adaptive_avg_pool2d([oh, ow])
        });
    }

    #[test]
    fn pad_random(
        shape in prop::collection::vec(1usize..4, 2..=4), pads in prop::collection::vec(0usize..3, 0..=8),
        value in -2.0f32..2.0, view in view_strategy(), seed in any::<u64>(),
    ) {
        let pairs = (pads.len() / 2).min(shape.len());
        let pads = &pads[..2 * pairs];
        let x = tensor(&leaf_shape(view, &shape), seed);
        // A weighted consumer so that the padding's own (constant) values matter too.
        check(&format!("pad {shape:?} {pads:?} {view:?}"), &[x], |v| {
            let y = apply_view(view, &v[0])?.pad(pads, value)?;
            y.mul(&tensor(y.dims(), 7))
        });
    }
}

// ----- the orders of docs/conv.md, bit for bit ----------------------------------------------

/// Conv2d forward and every gradient computed by direct loops that follow the orders
/// written in `docs/conv.md`, for comparison with the operator's bits.
struct Direct {
    y: Vec<f32>,
    gx: Vec<f32>,
    gw: Vec<f32>,
    gb: Vec<f32>,
}

#[allow(clippy::too_many_arguments)]
fn direct_conv2d(
    x: &[f32],
    xs: [usize; 4],
    w: &[f32],
    ws: [usize; 4],
    b: &[f32],
    gy: &[f32],
    opts: Conv2dOptions,
) -> Direct {
    let [n, c, h, wd] = xs;
    let [o, cg, kh, kw] = ws;
    let g = opts.groups;
    let og = o / g;
    let [sh, sw] = opts.stride;
    let [ph, pw] = opts.padding;
    let [dh, dw] = opts.dilation;
    let oh = (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1;
    let ow = (wd + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
    // The padded input, zeros included: the GEMM multiplies them too.
    let (hp, wp) = (h + 2 * ph, wd + 2 * pw);
    let mut xp = vec![0.0f32; n * c * hp * wp];
    for i in 0..n * c {
        for r in 0..h {
            for q in 0..wd {
                xp[(i * hp + r + ph) * wp + q + pw] = x[(i * h + r) * wd + q];
            }
        }
    }
    let xpad = |ni: usize, ci: usize, r: usize, q: usize| xp[((ni * c + ci) * hp + r) * wp + q];
    let wat = |oi: usize, ci: usize, i: usize, j: usize| w[((oi * cg + ci) * kh + i) * kw + j];
    let p = oh * ow;
    let mut y = vec![0.0f32; n * o * p];
    for ni in 0..n {
        for oi in 0..o {
            let gi = oi / og;
            for (pi, yv) in y[(ni * o + oi) * p..(ni * o + oi + 1) * p]
                .iter_mut()
                .enumerate()
            {
                let (a, bq) = (pi / ow, pi % ow);
                let mut acc = 0.0f32;
                for ci in 0..cg {
                    for i in 0..kh {
                        for j in 0..kw {
                            let t = wat(oi, ci, i, j)
                                * xpad(ni, gi * cg + ci, a * sh + i * dh, bq * sw + j * dw);
                            acc += t;
                        }
                    }
                }
                *yv = acc + b[oi];
            }
        }
    }
    // Weight: per item a GEMM over (oh, ow), items added in order from +0.
    let mut gw = vec![0.0f32; o * cg * kh * kw];
    for ni in 0..n {
        for oi in 0..o {
            let gi = oi / og;
            for ci in 0..cg {
                for i in 0..kh {
                    for j in 0..kw {
                        let mut acc = 0.0f32;
                        for pi in 0..p {
                            let (a, bq) = (pi / ow, pi % ow);
                            acc += gy[(ni * o + oi) * p + pi]
                                * xpad(ni, gi * cg + ci, a * sh + i * dh, bq * sw + j * dw);
                        }
                        gw[((oi * cg + ci) * kh + i) * kw + j] += acc;
                    }
                }
            }
        }
    }
    // Input: per item column gradients over the group's output channels, then each input
    // element adds its contributions in increasing column order (oh, ow).
    let mut gx = vec![0.0f32; n * c * h * wd];
    for ni in 0..n {
        for ci_all in 0..c {
            let (gi, ci) = (ci_all / cg, ci_all % cg);
            for pi in 0..p {
                let (a, bq) = (pi / ow, pi % ow);
                for i in 0..kh {
                    for j in 0..kw {
                        let (r, q) = (a * sh + i * dh, bq * sw + j * dw);
                        if r < ph || r - ph >= h || q < pw || q - pw >= wd {
                            continue;
                        }
                        let mut acc = 0.0f32;
                        for oo in 0..og {
                            let oi = gi * og + oo;
                            acc += wat(oi, ci, i, j) * gy[(ni * o + oi) * p + pi];
                        }
                        gx[((ni * c + ci_all) * h + r - ph) * wd + q - pw] += acc;
                    }
                }
            }
        }
    }
    let gb = (0..o)
        .map(|oi| {
            let mut s = 0.0f64;
            for ni in 0..n {
                for pi in 0..p {
                    s += f64::from(gy[(ni * o + oi) * p + pi]);
                }
            }
            s as f32
        })
        .collect();
    Direct { y, gx, gw, gb }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, failure_persistence: None, ..ProptestConfig::default() })]

    /// The operator's forward and gradients are exactly the orders of `docs/conv.md`.
    #[test]
    fn conv2d_follows_the_documented_order(
        n in 1usize..4, groups in 1usize..3, cg in 1usize..4, og in 1usize..3,
        k in (1usize..4, 1usize..4), s in (1usize..3, 1usize..3), p in (0usize..3, 0usize..3),
        d in (1usize..3, 1usize..3), extra in (0usize..5, 0usize..5), seed in any::<u64>(),
    ) {
        let (c, o) = (cg * groups, og * groups);
        let h = fitting(extra.0, k.0, d.0, p.0);
        let w = fitting(extra.1, k.1, d.1, p.1);
        let opts = Conv2dOptions { stride: [s.0, s.1], padding: [p.0, p.1], dilation: [d.0, d.1], groups };
        let xs = [n, c, h, w];
        let ws = [o, cg, k.0, k.1];
        let x = tensor(&xs, seed).requires_grad().unwrap();
        let wt = tensor(&ws, seed ^ 1).requires_grad().unwrap();
        let b = tensor(&[o], seed ^ 2).requires_grad().unwrap();
        let y = x.conv2d(&wt, Some(&b), opts).unwrap();
        let gy = tensor(y.dims(), seed ^ 3);
        y.backward_with(BackwardOptions::default().gradient(&gy)).unwrap();
        let want = direct_conv2d(&x.to_vec().unwrap(), xs, &wt.to_vec().unwrap(), ws, &b.to_vec().unwrap(), &gy.to_vec().unwrap(), opts);
        prop_assert_eq!(bits(&y.to_vec().unwrap()), bits(&want.y), "forward");
        prop_assert_eq!(bits(&x.grad().unwrap().to_vec().unwrap()), bits(&want.gx), "grad input");
        prop_assert_eq!(bits(&wt.grad().unwrap().to_vec().unwrap()), bits(&want.gw), "grad weight");
        prop_assert_eq!(bits(&b.grad().unwrap().to_vec().unwrap()), bits(&want.gb), "grad bias");
    }
}

/// Max pooling picks the first maximum on ties, and the last NaN of a window (PyTorch's
/// CPU rule); gradients go to the selected element only.
#[test]
fn max_pool2d_ties_and_nan() {
    let nan = f32::NAN;
    let x = T::from_vec(
        &B,
        vec![
            3.0,
            1.0,
            3.0,
            nan,
            2.0,
            nan,
            f32::NEG_INFINITY,
            f32::NEG_INFINITY,
        ],
        [1, 1, 1, 8],
    )
    .unwrap()
    .requires_grad()
    .unwrap();
    let opts = MaxPool2dOptions::new([1, 2]);
    let y = x.max_pool2d(opts).unwrap();
    let yv = y.to_vec().unwrap();
    assert_eq!(yv[0], 3.0);
    assert!(yv[1].is_nan() && yv[2].is_nan());
    assert_eq!(yv[3], f32::NEG_INFINITY);
    y.backward_with(
        BackwardOptions::default()
            .gradient(&T::from_vec(&B, vec![1.0, 2.0, 3.0, 4.0], [1, 1, 1, 4]).unwrap()),
    )
    .unwrap();
    assert_eq!(
        x.grad().unwrap().to_vec().unwrap(),
        vec![1.0, 0.0, 0.0, 2.0, 0.0, 3.0, 4.0, 0.0]
    );
    // Overlapping windows: [3, 1, 3] then [1, 3, NaN]: first maximum, then the NaN.
    let x = T::from_vec(&B, vec![3.0, 1.0, 3.0, nan, 5.0], [1, 1, 5])
        .unwrap()
        .requires_grad()
        .unwrap();
    let opts = MaxPool2dOptions {
        stride: Some([1, 1]),
        ..MaxPool2dOptions::new([1, 3])
    };
    let y = x.max_pool2d(opts).unwrap();
    y.backward_with(
        BackwardOptions::default()
            .gradient(&T::from_vec(&B, vec![1.0, 10.0, 100.0], [1, 1, 3]).unwrap()),
    )
    .unwrap();
    assert_eq!(
        x.grad().unwrap().to_vec().unwrap(),
        vec![1.0, 0.0, 0.0, 110.0, 0.0]
    );
    // A dilated window that lies entirely in the padding: −∞ and no gradient.
    let x = T::from_vec(&B, vec![1.0, 2.0], [1, 1, 2, 1])
        .unwrap()
        .requires_grad()
        .unwrap();
    let opts = MaxPool2dOptions {
        stride: Some([1, 1]),
        padding: [0, 1],
        dilation: [1, 2],
        ..MaxPool2dOptions::new([1, 2])
    };
    let y = x.max_pool2d(opts).unwrap();
    assert_eq!(y.to_vec().unwrap(), vec![f32::NEG_INFINITY; 2]);
    y.backward_with(BackwardOptions::default().gradient(&T::ones(&B, [1, 1, 2, 1]).unwrap()))
        .unwrap();
    assert_eq!(x.grad().unwrap().to_vec().unwrap(), vec![0.0, 0.0]);
}

/// PyTorch's ceil-mode rule: the last window must start inside the input or the left
/// padding, so 5 columns with kernel 2 and stride 4 give 2 windows, not 3.
#[test]
fn pool_output_sizes() {
    let x = tensor(&[1, 1, 5, 5], 1);
    let s = |o: MaxPool2dOptions| x.max_pool2d(o).unwrap().dims().to_vec();
    let ceil = |k, st, p| MaxPool2dOptions {
        stride: Some([st, st]),
        padding: [p, p],
        ceil_mode: true,
        ..MaxPool2dOptions::new([k, k])
    };
    assert_eq!(s(MaxPool2dOptions::new([2, 2])), [1, 1, 2, 2]);
    assert_eq!(s(ceil(2, 2, 0)), [1, 1, 3, 3]);
    assert_eq!(s(ceil(2, 4, 0)), [1, 1, 2, 2]);
    assert_eq!(s(ceil(3, 2, 1)), [1, 1, 3, 3]);
    let a = AvgPool2dOptions {
        stride: Some([2, 2]),
        padding: [1, 1],
        ceil_mode: true,
        ..AvgPool2dOptions::new([3, 3])
    };
    assert_eq!(
        tensor(&[1, 1, 4, 4], 2).avg_pool2d(a).unwrap().dims(),
        [1, 1, 3, 3]
    );
    assert_eq!(
        tensor(&[2, 3, 7, 5], 3)
            .adaptive_avg_pool2d([3, 2])
            .unwrap()
            .dims(),
        [2, 3, 3, 2]
    );
}

// ----- errors -----------------------------------------------------------------------------

#[test]
fn conv_errors() {
    let c2 = |x: &[usize], w: &[usize], b: Option<&[usize]>, o: Conv2dOptions| {
        let (x, w) = (tensor(x, 1), tensor(w, 2));
        let b = b.map(|s| tensor(s, 3));
        move || x.conv2d(&w, b.as_ref(), o)
    };
    let d = Conv2dOptions::default();
    expect_err(
        "channels",
        c2(&[1, 3, 5, 5], &[2, 2, 3, 3], None, d),
        &["conv2d", "[1, 3, 5, 5]", "[2, 2, 3, 3]", "channels"],
    );
    expect_err(
        "channels with groups",
        c2(
            &[1, 4, 5, 5],
            &[2, 1, 3, 3],
            None,
            Conv2dOptions { groups: 2, ..d },
        ),
        &["conv2d", "[1, 4, 5, 5]", "[2, 1, 3, 3]", "groups = 2"],
    );
    expect_err(
        "groups do not divide input channels",
        c2(
            &[1, 3, 5, 5],
            &[4, 1, 3, 3],
            None,
            Conv2dOptions { groups: 2, ..d },
        ),
        &["conv2d", "groups = 2", "3 input channels"],
    );
    expect_err(
        "groups do not divide output channels",
        c2(
            &[1, 4, 5, 5],
            &[3, 2, 3, 3],
            None,
            Conv2dOptions { groups: 2, ..d },
        ),
        &["conv2d", "groups = 2", "3 output channels", "[3, 2, 3, 3]"],
    );
    expect_err(
        "zero groups",
        c2(
            &[1, 4, 5, 5],
            &[3, 2, 3, 3],
            None,
            Conv2dOptions { groups: 0, ..d },
        ),
        &["conv2d", "groups"],
    );
    expect_err(
        "kernel larger than the padded input",
        c2(&[1, 1, 5, 5], &[1, 1, 6, 6], None, d),
        &[
            "conv2d",
            "[1, 1, 5, 5]",
            "[1, 1, 6, 6]",
            "larger than the padded input",
        ],
    );
    expect_err(
        "dilated kernel larger than the padded input",
        c2(
            &[1, 1, 5, 5],
            &[1, 1, 3, 3],
            None,
            Conv2dOptions {
                dilation: [4, 1],
                padding: [1, 1],
                ..d
            },
        ),
        &["conv2d", "9 x 3", "7 x 7"],
    );
    expect_err(
        "zero stride",
        c2(
            &[1, 1, 5, 5],
            &[1, 1, 3, 3],
            None,
            Conv2dOptions {
                stride: [1, 0],
                ..d
            },
        ),
        &["conv2d", "stride", "[1, 0]"],
    );
    expect_err(
        "zero dilation",
        c2(
            &[1, 1, 5, 5],
            &[1, 1, 3, 3],
            None,
            Conv2dOptions {
                dilation: [0, 1],
                ..d
            },
        ),
        &["conv2d", "dilation"],
    );
    expect_err(
        "5-D input",
        c2(&[1, 1, 1, 5, 5], &[1, 1, 3, 3], None, d),
        &["conv2d", "[1, 1, 1, 5, 5]"],
    );
    expect_err(
        "2-D input",
        c2(&[5, 5], &[1, 1, 3, 3], None, d),
        &["conv2d", "[5, 5]"],
    );
    expect_err(
        "3-D weight",
        c2(&[1, 1, 5, 5], &[1, 1, 3], None, d),
        &["conv2d", "weight", "[1, 1, 3]"],
    );
    expect_err(
        "bias of the wrong length",
        c2(&[1, 2, 5, 5], &[4, 2, 3, 3], Some(&[3]), d),
        &["conv2d", "[3]", "[4]"],
    );
    expect_err(
        "2-D bias",
        c2(&[1, 2, 5, 5], &[4, 2, 3, 3], Some(&[4, 1]), d),
        &["conv2d", "[4, 1]", "bias"],
    );
    expect_err(
        "zero kernel",
        c2(&[1, 2, 5, 5], &[4, 2, 0, 3], None, d),
        &["conv2d", "kernel"],
    );
    expect_err(
        "no output channels",
        c2(&[1, 2, 5, 5], &[0, 2, 3, 3], None, d),
        &["conv2d", "output channel"],
    );

    let c1 = |x: &[usize], w: &[usize], b: Option<&[usize]>, o: Conv1dOptions| {
        let (x, w) = (tensor(x, 1), tensor(w, 2));
        let b = b.map(|s| tensor(s, 3));
        move || x.conv1d(&w, b.as_ref(), o)
    };
    let d1 = Conv1dOptions::default();
    expect_err(
        "conv1d channels",
        c1(&[2, 3, 8], &[4, 2, 3], None, d1),
        &["conv1d", "[2, 3, 8]", "[4, 2, 3]", "channels"],
    );
    expect_err(
        "conv1d kernel too large",
        c1(
            &[2, 3, 4],
            &[4, 3, 7],
            None,
            Conv1dOptions { padding: 1, ..d1 },
        ),
        &["conv1d", "larger than the padded input", "7", "6"],
    );
    expect_err(
        "conv1d zero stride",
        c1(
            &[2, 3, 8],
            &[4, 3, 3],
            None,
            Conv1dOptions { stride: 0, ..d1 },
        ),
        &["conv1d", "stride", "0"],
    );
    expect_err(
        "conv1d zero dilation",
        c1(
            &[2, 3, 8],
            &[4, 3, 3],
            None,
            Conv1dOptions { dilation: 0, ..d1 },
        ),
        &["conv1d", "dilation"],
    );
    expect_err(
        "conv1d groups",
        c1(
            &[2, 4, 8],
            &[3, 2, 3],
            None,
            Conv1dOptions { groups: 2, ..d1 },
        ),
        &["conv1d", "groups = 2"],
    );
    expect_err(
        "conv1d 4-D input",
        c1(&[1, 2, 4, 8], &[3, 2, 3], None, d1),
        &["conv1d", "[1, 2, 4, 8]"],
    );
    expect_err(
        "conv1d 4-D weight",
        c1(&[2, 4, 8], &[3, 2, 3, 3], None, d1),
        &["conv1d", "weight", "[3, 2, 3, 3]"],
    );
    expect_err(
        "conv1d bias",
        c1(&[2, 3, 8], &[4, 3, 3], Some(&[3]), d1),
        &["conv1d", "[3]", "[4]"],
    );
}

#[test]
fn pool_and_pad_errors() {
    let x = tensor(&[1, 2, 5, 5], 1);
    let mp = |o: MaxPool2dOptions| {
        let x = x.clone();
        move || x.max_pool2d(o)
    };
    let ap = |o: AvgPool2dOptions| {
        let x = x.clone();
        move || x.avg_pool2d(o)
    };
    let m = MaxPool2dOptions::new([3, 3]);
    let a = AvgPool2dOptions::new([3, 3]);
    expect_err(
        "max pad > k/2",
        mp(MaxPool2dOptions {
            padding: [2, 0],
            ..m
        }),
        &["max_pool2d", "padding", "half"],
    );
    expect_err(
        "max pad > k/2 even with dilation",
        mp(MaxPool2dOptions {
            padding: [2, 2],
            dilation: [2, 2],
            ..m
        }),
        &["max_pool2d", "padding"],
    );
    expect_err(
        "max zero kernel",
        mp(MaxPool2dOptions::new([0, 2])),
        &["max_pool2d", "kernel_size"],
    );
    expect_err(
        "max zero stride",
        mp(MaxPool2dOptions {
            stride: Some([1, 0]),
            ..m
        }),
        &["max_pool2d", "stride"],
    );
    expect_err(
        "max zero dilation",
        mp(MaxPool2dOptions {
            dilation: [1, 0],
            ..m
        }),
        &["max_pool2d", "dilation"],
    );
    expect_err(
        "max kernel too large",
        mp(MaxPool2dOptions::new([6, 6])),
        &["max_pool2d", "[1, 2, 5, 5]", "too small"],
    );
    expect_err(
        "avg pad > k/2",
        ap(AvgPool2dOptions {
            padding: [0, 2],
            ..a
        }),
        &["avg_pool2d", "padding"],
    );
    expect_err(
        "avg kernel too large",
        ap(AvgPool2dOptions::new([2, 6])),
        &["avg_pool2d", "too small"],
    );
    expect_err(
        "avg zero divisor",
        ap(AvgPool2dOptions {
            divisor_override: Some(0),
            ..a
        }),
        &["avg_pool2d", "divisor_override"],
    );
    expect_err(
        "avg zero stride",
        ap(AvgPool2dOptions {
            stride: Some([0, 1]),
            ..a
        }),
        &["avg_pool2d", "stride"],
    );
    for (what, shape) in [
        ("2-D", &[5usize, 5][..]),
        ("5-D", &[1, 1, 1, 5, 5]),
        ("empty channel", &[1, 0, 5, 5]),
        ("empty H", &[2, 0, 5]),
    ] {
        let x = tensor(shape, 4);
        let dims = format!("{shape:?}");
        expect_err(what, || x.max_pool2d(m), &["max_pool2d", &dims]);
        expect_err(what, || x.avg_pool2d(a), &["avg_pool2d", &dims]);
        expect_err(
            what,
            || x.adaptive_avg_pool2d([2, 2]),
            &["adaptive_avg_pool2d", &dims],
        );
    }
    let y = tensor(&[2, 3], 5);
    expect_err(
        "pad odd length",
        || y.pad(&[1, 2, 3], 0.0),
        &["pad", "even"],
    );
    expect_err(
        "pad too long",
        || y.pad(&[1, 1, 1, 1, 1, 1], 0.0),
        &["pad", "[2, 3]", "at most 4"],
    );
    let s = T::scalar(&B, 1.0).unwrap();
    expect_err(
        "pad of a scalar",
        || s.pad(&[1, 1], 0.0),
        &["pad", "at most 0"],
    );
    // What PyTorch accepts: an empty batch, an empty pad list, a zero-sized output size.
    assert_eq!(
        tensor(&[0, 2, 5, 5], 6).max_pool2d(m).unwrap().dims(),
        [0, 2, 1, 1]
    );
    assert_eq!(
        y.pad(&[], 1.0).unwrap().to_vec().unwrap(),
        y.to_vec().unwrap()
    );
    assert_eq!(x.adaptive_avg_pool2d([0, 2]).unwrap().dims(), [1, 2, 0, 2]);
    let e = tensor(&[0, 3, 5, 5], 7)
        .conv2d(&tensor(&[4, 3, 3, 3], 8), None, Conv2dOptions::default())
        .unwrap();
    assert_eq!(e.dims(), [0, 4, 3, 3]);
}

// ----- conv_transpose2d: the order of docs/conv.md §6 and the errors -----------------------

/// conv_transpose2d forward and every gradient by direct loops following `docs/conv.md`
/// §6, for comparison with the operator's bits.
#[allow(clippy::too_many_arguments)]
fn direct_conv_transpose2d(
    x: &[f32],
    xs: [usize; 4],
    w: &[f32],
    ws: [usize; 4],
    b: &[f32],
    gy: &[f32],
    opts: ConvTranspose2dOptions,
) -> Direct {
    let [n, c, h, wd] = xs;
    let [_, cog, kh, kw] = ws;
    let g = opts.groups;
    let (cig, o) = (c / g, cog * g);
    let [sh, sw] = opts.stride;
    let [ph, pw] = opts.padding;
    let [dh, dw] = opts.dilation;
    let [oph, opw] = opts.output_padding;
    let oh = (h - 1) * sh + dh * (kh - 1) + oph + 1 - 2 * ph;
    let ow = (wd - 1) * sw + dw * (kw - 1) + opw + 1 - 2 * pw;
    let p = h * wd;
    let k = cog * kh * kw;
    let wat = |ci: usize, r: usize| w[ci * k + r];
    // Forward: per item and group the columns Wᵀ·x (one accumulator per element, input
    // channels increasing), then every output element from +0 adds its contributions in
    // increasing column order (ih, iw), then the bias.
    let mut y = vec![0.0f32; n * o * oh * ow];
    for ni in 0..n {
        for gi in 0..g {
            let mut cols = vec![0.0f32; k * p];
            for r in 0..k {
                for q in 0..p {
                    let mut acc = 0.0f32;
                    for cl in 0..cig {
                        let ci = gi * cig + cl;
                        acc += wat(ci, r) * x[(ni * c + ci) * p + q];
                    }
                    cols[r * p + q] = acc;
                }
            }
            for q in 0..p {
                let (ih, iw) = (q / wd, q % wd);
                for r in 0..k {
                    let (col, i, j) = (r / (kh * kw), (r / kw) % kh, r % kw);
                    let (yy, xx) = (ih * sh + i * dh, iw * sw + j * dw);
                    if yy < ph || yy - ph >= oh || xx < pw || xx - pw >= ow {
                        continue;
                    }
                    y[((ni * o + gi * cog + col) * oh + yy - ph) * ow + xx - pw] += cols[r * p + q];
                }
            }
        }
    }
    for (i, v) in y.iter_mut().enumerate() {
        *v += b[(i / (oh * ow)) % o];
    }
    // The gradient, zero-padded by (ph, pw): the convolution reads the zeros too.
    let (hp, wp) = (oh + 2 * ph, ow + 2 * pw);
    let mut gp = vec![0.0f32; n * o * hp * wp];
    for i in 0..n * o {
        for r in 0..oh {
            for q in 0..ow {
                gp[(i * hp + r + ph) * wp + q + pw] = gy[(i * oh + r) * ow + q];
            }
        }
    }
    let gcol = |ni: usize, gi: usize, r: usize, q: usize| {
        let (col, i, j) = (r / (kh * kw), (r / kw) % kh, r % kw);
        let (ih, iw) = (q / wd, q % wd);
        gp[((ni * o + gi * cog + col) * hp + ih * sh + i * dh) * wp + iw * sw + j * dw]
    };
    // Input: the convolution of the gradient, one accumulator over r = (c_out, i, j).
    let mut gx = vec![0.0f32; n * c * p];
    for ni in 0..n {
        for ci in 0..c {
            let gi = ci / cig;
            for q in 0..p {
                let mut acc = 0.0f32;
                for r in 0..k {
                    acc += wat(ci, r) * gcol(ni, gi, r, q);
                }
                gx[(ni * c + ci) * p + q] = acc;
            }
        }
    }
    // Weight: per item a GEMM over the input positions, items added in order from +0.
    let mut gw = vec![0.0f32; c * k];
    for ni in 0..n {
        for ci in 0..c {
            let gi = ci / cig;
            for r in 0..k {
                let mut acc = 0.0f32;
                for q in 0..p {
                    acc += x[(ni * c + ci) * p + q] * gcol(ni, gi, r, q);
                }
                gw[ci * k + r] += acc;
            }
        }
    }
    let gb = (0..o)
        .map(|oi| {
            let mut s = 0.0f64;
            for ni in 0..n {
                for v in &gy[(ni * o + oi) * oh * ow..(ni * o + oi + 1) * oh * ow] {
                    s += f64::from(*v);
                }
            }
            s as f32
        })
        .collect();
    Direct { y, gx, gw, gb }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, failure_persistence: None, ..ProptestConfig::default() })]

    /// conv_transpose2d's forward and gradients are exactly the orders of `docs/conv.md` §6.
    #[test]
    fn conv_transpose2d_follows_the_documented_order(
        n in 1usize..4, groups in 1usize..3, cig in 1usize..4, cog in 1usize..3,
        k in (1usize..4, 1usize..4), s in (1usize..4, 1usize..4), p in (0usize..3, 0usize..3),
        d in (1usize..3, 1usize..3), op in (0usize..3, 0usize..3), hw in (1usize..6, 1usize..6),
        seed in any::<u64>(),
    ) {
        let c = cig * groups;
        let op = [op.0 % s.0.max(d.0), op.1 % s.1.max(d.1)];
        let fh = (hw.0 - 1) * s.0 + d.0 * (k.0 - 1) + op[0] + 1;
        let fw = (hw.1 - 1) * s.1 + d.1 * (k.1 - 1) + op[1] + 1;
        let opts = ConvTranspose2dOptions {
            stride: [s.0, s.1],
            padding: [p.0.min((fh - 1) / 2), p.1.min((fw - 1) / 2)],
            output_padding: op,
            dilation: [d.0, d.1],
            groups,
        };
        let xs = [n, c, hw.0, hw.1];
        let ws = [c, cog, k.0, k.1];
        let x = tensor(&xs, seed).requires_grad().unwrap();
        let wt = tensor(&ws, seed ^ 1).requires_grad().unwrap();
        let b = tensor(&[cog * groups], seed ^ 2).requires_grad().unwrap();
        let y = x.conv_transpose2d(&wt, Some(&b), opts).unwrap();
        let gy = tensor(y.dims(), seed ^ 3);
        y.backward_with(BackwardOptions::default().gradient(&gy)).unwrap();
        let want = direct_conv_transpose2d(&x.to_vec().unwrap(), xs, &wt.to_vec().unwrap(), ws, &b.to_vec().unwrap(), &gy.to_vec().unwrap(), opts);
        prop_assert_eq!(bits(&y.to_vec().unwrap()), bits(&want.y), "forward");
        prop_assert_eq!(bits(&x.grad().unwrap().to_vec().unwrap()), bits(&want.gx), "grad input");
        prop_assert_eq!(bits(&wt.grad().unwrap().to_vec().unwrap()), bits(&want.gw), "grad weight");
        prop_assert_eq!(bits(&b.grad().unwrap().to_vec().unwrap()), bits(&want.gb), "grad bias");
    }
}

/// conv_transpose2d is the adjoint of conv2d: `⟨conv2d(u, W), v⟩ = ⟨u, conv_transpose2d(v, W)⟩`
/// (in f64 up to rounding) with the same options, and the output size follows PyTorch's
/// formula; an unbatched input is an item of a batch of one; empty batches and zero
/// output channels give empty results.
#[test]
fn conv_transpose2d_is_the_adjoint_of_conv2d() {
    let (n, c_in, c_out, g) = (2, 4, 6, 2);
    let w = tensor(&[c_in, c_out / g, 3, 2], 5);
    let ct = ConvTranspose2dOptions {
        stride: [2, 3],
        padding: [1, 0],
        output_padding: [1, 2],
        dilation: [1, 2],
        groups: g,
    };
    let v = tensor(&[n, c_in, 4, 3], 6);
    let y = v.conv_transpose2d(&w, None, ct).unwrap();
    // (4 − 1)·2 − 2 + 1·2 + 1 + 1 = 8; (3 − 1)·3 − 0 + 2·1 + 2 + 1 = 11.
    assert_eq!(y.dims(), [n, c_out, 8, 11]);
    let u = tensor(y.dims(), 7);
    let c2 = Conv2dOptions {
        stride: ct.stride,
        padding: ct.padding,
        dilation: ct.dilation,
        groups: g,
    };
    let cu = u.conv2d(&w, None, c2).unwrap();
    assert_eq!(cu.dims(), v.dims());
    let dot = |a: &T, b: &T| -> f64 {
        let (a, b) = (a.to_vec().unwrap(), b.to_vec().unwrap());
        a.iter()
            .zip(&b)
            .map(|(x, y)| f64::from(*x) * f64::from(*y))
            .sum()
    };
    let (l, r) = (dot(&cu, &v), dot(&u, &y));
    assert!((l - r).abs() <= 1e-5 * l.abs().max(1.0), "{l} vs {r}");
    // Unbatched: the first item's bits.
    let b = tensor(&[c_out], 8);
    let batched = v.conv_transpose2d(&w, Some(&b), ct).unwrap();
    let single = v
        .slice(0, 0, 1, 1)
        .unwrap()
        .squeeze(0)
        .unwrap()
        .conv_transpose2d(&w, Some(&b), ct)
        .unwrap();
    assert_eq!(single.dims(), [c_out, 8, 11]);
    assert_eq!(
        bits(&single.to_vec().unwrap()),
        bits(
            &batched
                .slice(0, 0, 1, 1)
                .unwrap()
                .squeeze(0)
                .unwrap()
                .to_vec()
                .unwrap()
        )
    );
    // N = 0 and C_out = 0.
    let empty = tensor(&[0, c_in, 4, 3], 9)
        .conv_transpose2d(&w, None, ct)
        .unwrap();
    assert_eq!(empty.dims(), [0, c_out, 8, 11]);
    let w0 = tensor(&[c_in, 0, 3, 2], 10);
    assert_eq!(
        v.conv_transpose2d(&w0, None, ct).unwrap().dims(),
        [n, 0, 8, 11]
    );
}

#[test]
fn conv_transpose2d_errors() {
    let ct = |x: &[usize], w: &[usize], b: Option<&[usize]>, o: ConvTranspose2dOptions| {
        let (x, w) = (tensor(x, 1), tensor(w, 2));
        let b = b.map(|s| tensor(s, 3));
        move || x.conv_transpose2d(&w, b.as_ref(), o)
    };
    let d = ConvTranspose2dOptions::default();
    let op = "conv_transpose2d";
    expect_err(
        "input rank",
        ct(&[3, 5], &[3, 2, 3, 3], None, d),
        &[op, "input", "[3, 5]"],
    );
    expect_err(
        "weight rank",
        ct(&[1, 3, 5, 5], &[3, 2, 3], None, d),
        &[op, "weight", "[3, 2, 3]"],
    );
    expect_err(
        "channels",
        ct(&[1, 3, 5, 5], &[2, 2, 3, 3], None, d),
        &[op, "[1, 3, 5, 5]", "[2, 2, 3, 3]", "channels"],
    );
    expect_err(
        "groups do not divide the input channels",
        ct(
            &[1, 3, 5, 5],
            &[3, 1, 3, 3],
            None,
            ConvTranspose2dOptions { groups: 2, ..d },
        ),
        &[op, "groups = 2", "3 input channels"],
    );
    expect_err(
        "zero groups",
        ct(
            &[1, 4, 5, 5],
            &[4, 1, 3, 3],
            None,
            ConvTranspose2dOptions { groups: 0, ..d },
        ),
        &[op, "groups"],
    );
    expect_err(
        "zero stride",
        ct(
            &[1, 4, 5, 5],
            &[4, 1, 3, 3],
            None,
            ConvTranspose2dOptions {
                stride: [1, 0],
                ..d
            },
        ),
        &[op, "stride"],
    );
    expect_err(
        "zero dilation",
        ct(
            &[1, 4, 5, 5],
            &[4, 1, 3, 3],
            None,
            ConvTranspose2dOptions {
                dilation: [0, 1],
                ..d
            },
        ),
        &[op, "dilation"],
    );
    expect_err(
        "zero kernel",
        ct(&[1, 4, 5, 5], &[4, 1, 0, 3], None, d),
        &[op, "weight", "kernel size"],
    );
    expect_err(
        "no input channel",
        ct(&[1, 0, 5, 5], &[0, 1, 3, 3], None, d),
        &[op, "weight", "input channel"],
    );
    expect_err(
        "bias shape",
        ct(&[1, 4, 5, 5], &[4, 2, 3, 3], Some(&[4]), d),
        &[op, "bias", "[2]"],
    );
    expect_err(
        "bias rank",
        ct(&[1, 4, 5, 5], &[4, 2, 3, 3], Some(&[2, 1]), d),
        &[op, "bias"],
    );
    for (stride, dilation, opad) in [
        ([1, 1], [1, 1], [1, 0]),
        ([2, 3], [1, 1], [0, 3]),
        ([1, 2], [3, 1], [3, 0]),
    ] {
        expect_err(
            "output padding too large",
            ct(
                &[1, 4, 5, 5],
                &[4, 2, 3, 3],
                None,
                ConvTranspose2dOptions {
                    stride,
                    dilation,
                    output_padding: opad,
                    ..d
                },
            ),
            &[
                op,
                "output_padding",
                "smaller than the stride or the dilation",
            ],
        );
    }
    // Output padding below the dilation (not the stride) is allowed, as in PyTorch.
    let y = tensor(&[1, 4, 5, 5], 1)
        .conv_transpose2d(
            &tensor(&[4, 3, 3, 3], 2),
            None,
            ConvTranspose2dOptions {
                dilation: [2, 1],
                output_padding: [1, 0],
                ..d
            },
        )
        .unwrap();
    assert_eq!(y.dims(), [1, 3, 10, 7]);
    expect_err(
        "output size not positive",
        ct(
            &[1, 4, 5, 5],
            &[4, 2, 3, 3],
            None,
            ConvTranspose2dOptions {
                padding: [0, 4],
                ..d
            },
        ),
        &[op, "padding", "≤ 0"],
    );
    expect_err(
        "empty height",
        ct(&[1, 4, 0, 5], &[4, 2, 3, 3], None, d),
        &[op, "input", "[1, 4, 0, 5]"],
    );
    expect_err(
        "overflowing output size",
        ct(
            &[1, 4, 3, 5],
            &[4, 2, 3, 3],
            None,
            ConvTranspose2dOptions {
                stride: [usize::MAX / 2, 1],
                ..d
            },
        ),
        &[op, "stride", "overflows"],
    );
    expect_err(
        "overflowing padding",
        ct(
            &[1, 4, 3, 5],
            &[4, 2, 3, 3],
            None,
            ConvTranspose2dOptions {
                padding: [usize::MAX, 0],
                ..d
            },
        ),
        &[op, "padding", "overflows"],
    );
    expect_err(
        "an output too large to allocate",
        ct(
            &[1, 4, 3, 5],
            &[4, 2, 3, 3],
            None,
            ConvTranspose2dOptions {
                stride: [1 << 31, 1 << 31],
                ..d
            },
        ),
        &[op],
    );
}
