//! LSTM, GRU, CTC loss and interpolate: gradient checks (the check of
//! `exactgrad_autograd::gradcheck`) on random shapes, both cells, both directions, one or
//! two layers, batch first or not, with and without biases and initial states, unbatched
//! inputs, transposed and strided input views; the forward orders of `docs/recurrent.md`
//! checked bit for bit against the same steps written with the element-wise operators;
//! CTC with repeated labels, empty targets, unequal lengths, a non-zero blank and
//! impossible alignments under zero_infinity, also on raw (unnormalised)
//! log-probabilities, whose gradient is the true partial derivative (`docs/ctc.md` §4);
//! and the errors of bad arguments.
//!
//! Over 800 lines because the recurrent steps written with the element-wise operators
//! (the bit-for-bit references) stand beside the checks that use them; one file per
//! family of operators, as the other modules of this subject.

use exactgrad::autograd::Result;
use exactgrad::autograd::{
    CtcBatch, CtcLossOptions, CtcTargets, GruOptions, InterpolateMode, InterpolateOptions,
    InterpolateSize, LstmOptions, RnnWeights,
};
use exactgrad::prelude::*;
use proptest::prelude::*;

use super::common::*;

/// Values uniform in [-0.6, 0.6): weights of the size PyTorch initialises them to.
fn weight(shape: &[usize], seed: u64) -> T {
    uniform(shape, seed, -0.6, 0.6)
}

/// A recurrent configuration drawn by the property tests.
#[derive(Clone, Copy, Debug)]
struct Rnn {
    lstm: bool,
    t: usize,
    b: usize,
    i: usize,
    h: usize,
    layers: usize,
    bidirectional: bool,
    batch_first: bool,
    bias: bool,
    h0: bool,
    c0: bool,
    unbatched: bool,
}

impl Rnn {
    fn dirs(&self) -> usize {
        if self.bidirectional {
            2
        } else {
            1
        }
    }

    fn gates(&self) -> usize {
        if self.lstm {
            4
        } else {
            3
        }
    }

    /// The weight tensors of every layer and direction: w_ih, w_hh (and b_ih, b_hh).
    fn weights(&self, seed: u64) -> Vec<T> {
        let (g, h) = (self.gates(), self.h);
        let mut v = Vec::new();
        for l in 0..self.layers {
            let input = if l == 0 { self.i } else { self.dirs() * h };
            for d in 0..self.dirs() {
                let s = seed ^ ((l * 2 + d) as u64 * 16);
                v.push(weight(&[g * h, input], s));
                v.push(weight(&[g * h, h], s ^ 1));
                if self.bias {
                    v.push(weight(&[g * h], s ^ 2));
                    v.push(weight(&[g * h], s ^ 3));
                }
            }
        }
        v
    }

    /// The input `[T, B, I]` (batch first `[B, T, I]`, unbatched `[T, I]`).
    fn input_shape(&self) -> Vec<usize> {
        if self.unbatched {
            vec![self.t, self.i]
        } else if self.batch_first {
            vec![self.b, self.t, self.i]
        } else {
            vec![self.t, self.b, self.i]
        }
    }

    fn state_shape(&self) -> Vec<usize> {
        let ld = self.layers * self.dirs();
        if self.unbatched {
            vec![ld, self.h]
        } else {
            vec![ld, self.b, self.h]
        }
    }

    /// Runs the layer on `x`, the optional states and the weights (`v` in the order of
    /// [`Rnn::weights`]); returns output, h_n and c_n flattened and concatenated.
    fn run(&self, x: &T, h0: Option<&T>, c0: Option<&T>, v: &[T]) -> Result<T> {
        let per = if self.bias { 4 } else { 2 };
        let weights: Vec<RnnWeights<'_, ScalarRefBackend>> = v
            .chunks(per)
            .map(|w| RnnWeights {
                weight_ih: &w[0],
                weight_hh: &w[1],
                bias_ih: w.get(2),
                bias_hh: w.get(3),
            })
            .collect();
        let parts = if self.lstm {
            let o = x.lstm(
                &weights,
                LstmOptions {
                    h0,
                    c0,
                    bidirectional: self.bidirectional,
                    batch_first: self.batch_first,
                },
            )?;
            vec![o.output, o.h_n, o.c_n]
        } else {
            let o = x.gru(
                &weights,
                GruOptions {
                    h0,
                    bidirectional: self.bidirectional,
                    batch_first: self.batch_first,
                },
            )?;
            vec![o.output, o.h_n]
        };
        let flat = parts
            .iter()
            .map(|p| p.reshape([p.numel()]))
            .collect::<Result<Vec<_>>>()?;
        T::concat(&flat.iter().collect::<Vec<_>>(), 0)
    }
}

fn rnn_strategy() -> impl Strategy<Value = Rnn> {
    (
        (any::<bool>(), 1usize..5, 1usize..3, 1usize..4, 1usize..4),
        (1usize..3, any::<bool>(), any::<bool>(), any::<bool>()),
        (any::<bool>(), any::<bool>(), 0u8..5),
    )
        .prop_map(
            |((lstm, t, b, i, h), (layers, bidirectional, batch_first, bias), (h0, c0, u))| Rnn {
                lstm,
                t,
                b,
                i,
                h,
                layers,
                bidirectional,
                batch_first,
                bias,
                h0,
                c0: c0 && lstm,
                unbatched: u == 0,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10, failure_persistence: None, ..ProptestConfig::default() })]

    /// Every input, initial state and parameter of a random LSTM or GRU, through output,
    /// h_n and c_n; the input reached through a transposed or strided view.
    #[test]
    fn lstm_and_gru_random(r in rnn_strategy(), view in view_strategy(), seed in any::<u64>()) {
        let x = uniform(&leaf_shape(view, &r.input_shape()), seed, -1.0, 1.0);
        let mut inputs = vec![x];
        if r.h0 {
            inputs.push(uniform(&r.state_shape(), seed ^ 7, -0.8, 0.8));
        }
        if r.c0 {
            inputs.push(uniform(&r.state_shape(), seed ^ 8, -0.8, 0.8));
        }
        let first_weight = inputs.len();
        inputs.extend(r.weights(seed));
        check(&format!("{r:?} {view:?}"), &inputs, |v| {
            let mut k = 1;
            let mut next = |on: bool| {
                let t = on.then(|| &v[k]);
                k += usize::from(on);
                t
            };
            let (h0, c0) = (next(r.h0), next(r.c0));
            r.run(&apply_view(view, &v[0])?, h0, c0, &v[first_weight..])
        });
    }
}

/// Two layers, bidirectional, every option on: a fixed case that covers everything the
/// random one may miss in a given run.
#[test]
fn lstm_and_gru_with_everything() {
    for lstm in [true, false] {
        let r = Rnn {
            lstm,
            t: 3,
            b: 2,
            i: 2,
            h: 2,
            layers: 2,
            bidirectional: true,
            batch_first: true,
            bias: true,
            h0: true,
            c0: lstm,
            unbatched: false,
        };
        let mut inputs = vec![uniform(&r.input_shape(), 1, -1.0, 1.0)];
        inputs.push(uniform(&r.state_shape(), 2, -0.8, 0.8));
        if lstm {
            inputs.push(uniform(&r.state_shape(), 3, -0.8, 0.8));
        }
        let first = inputs.len();
        inputs.extend(r.weights(4));
        check(&format!("{r:?}"), &inputs, |v| {
            r.run(&v[0], Some(&v[1]), lstm.then(|| &v[2]), &v[first..])
        });
    }
}

/// The fused layers give, bit for bit, the steps of `docs/recurrent.md` written with the
/// element-wise operators and matmul (the forward pass; the backward sums differ in order
/// by design: one GEMM over all steps instead of a sum of per-step products).
#[test]
fn recurrent_forward_equals_the_documented_steps() {
    let (t, b, i, h) = (5, 3, 4, 6);
    let x = uniform(&[t, b, i], 11, -2.0, 2.0);
    for lstm in [true, false] {
        let g = if lstm { 4 } else { 3 };
        let (w_ih, w_hh) = (weight(&[g * h, i], 12), weight(&[g * h, h], 13));
        let (b_ih, b_hh) = (weight(&[g * h], 14), weight(&[g * h], 15));
        let h0 = uniform(&[1, b, h], 16, -1.0, 1.0);
        let c0 = uniform(&[1, b, h], 17, -1.0, 1.0);
        for reverse in [false, true] {
            // The fused operator (one direction: the reverse one through a second
            // direction whose forward half is discarded).
            let ws = RnnWeights::new(&w_ih, &w_hh, &b_ih, &b_hh);
            let two = T::concat(&[&h0, &h0], 0).unwrap();
            let two_c = T::concat(&[&c0, &c0], 0).unwrap();
            let (fused, fused_h) = if lstm {
                let o = x
                    .lstm(
                        &[ws, ws],
                        LstmOptions {
                            h0: Some(&two),
                            c0: Some(&two_c),
                            bidirectional: true,
                            batch_first: false,
                        },
                    )
                    .unwrap();
                (o.output, o.c_n)
            } else {
                let o = x
                    .gru(
                        &[ws, ws],
                        GruOptions {
                            h0: Some(&two),
                            bidirectional: true,
                            batch_first: false,
                        },
                    )
                    .unwrap();
                (o.output, o.h_n)
            };
            let part = usize::from(reverse);
            let fused = fused.narrow(2, part * h, h).unwrap();
            let fused_last = fused_h.narrow(0, part, 1).unwrap();
            // The documented steps.
            let wt_ih = w_ih.t().unwrap();
            let wt_hh = w_hh.t().unwrap();
            let mut hp = h0.reshape([b, h]).unwrap();
            let mut cp = c0.reshape([b, h]).unwrap();
            let mut ys = vec![None; t];
            for s in 0..t {
                let tt = if reverse { t - 1 - s } else { s };
                let xt = x.narrow(0, tt, 1).unwrap().reshape([b, i]).unwrap();
                let px = xt.matmul(&wt_ih).unwrap().add(&b_ih).unwrap();
                let ph = hp.matmul(&wt_hh).unwrap().add(&b_hh).unwrap();
                let blk = |m: &T, k: usize| m.narrow(1, k * h, h).unwrap();
                if lstm {
                    let a = px.add(&ph).unwrap();
                    let ig = blk(&a, 0).sigmoid().unwrap();
                    let fg = blk(&a, 1).sigmoid().unwrap();
                    let gg = blk(&a, 2).tanh().unwrap();
                    let og = blk(&a, 3).sigmoid().unwrap();
                    cp = fg.mul(&cp).unwrap().add(&ig.mul(&gg).unwrap()).unwrap();
                    hp = og.mul(&cp.tanh().unwrap()).unwrap();
                } else {
                    let r = blk(&px, 0).add(&blk(&ph, 0)).unwrap().sigmoid().unwrap();
                    let z = blk(&px, 1).add(&blk(&ph, 1)).unwrap().sigmoid().unwrap();
                    let n = blk(&px, 2)
                        .add(&r.mul(&blk(&ph, 2)).unwrap())
                        .unwrap()
                        .tanh()
                        .unwrap();
                    hp = n.add(&z.mul(&hp.sub(&n).unwrap()).unwrap()).unwrap();
                }
                ys[tt] = Some(hp.clone());
            }
            let ys: Vec<T> = ys.into_iter().map(Option::unwrap).collect();
            let steps = T::stack(&ys.iter().collect::<Vec<_>>(), 0).unwrap();
            let last = if lstm { &cp } else { &hp };
            assert_eq!(
                bits(&fused.to_vec().unwrap()),
                bits(&steps.to_vec().unwrap()),
                "lstm={lstm} reverse={reverse}: output"
            );
            assert_eq!(
                bits(&fused_last.to_vec().unwrap()),
                bits(&last.to_vec().unwrap()),
                "lstm={lstm} reverse={reverse}: final state"
            );
        }
    }
}

// ----- CTC ------------------------------------------------------------------------------------

/// A CTC batch: padded targets `[B, S]`, lengths, blank.
#[derive(Clone, Debug)]
struct Ctc {
    labels: Vec<i64>,
    s: usize,
    input_lengths: Vec<usize>,
    target_lengths: Vec<usize>,
    blank: usize,
}

impl Ctc {
    fn batch(&self) -> CtcBatch<'_> {
        CtcBatch {
            targets: CtcTargets::Padded {
                labels: &self.labels,
                shape: [self.input_lengths.len(), self.s],
            },
            input_lengths: &self.input_lengths,
            target_lengths: &self.target_lengths,
        }
    }
}

/// A random batch of `b` entries over `t` steps and `c` classes: labels avoiding the
/// blank, often repeated; lengths from 0; some alignments impossible.
fn random_ctc(t: usize, b: usize, c: usize, blank: usize, seed: u64) -> Ctc {
    let mut r = Philox::new(seed);
    let s = 1 + r.below(4) as usize;
    let mut labels = vec![0i64; b * s];
    let (mut il, mut tl) = (Vec::new(), Vec::new());
    for e in 0..b {
        il.push(1 + r.below(t as u32) as usize);
        tl.push(r.below(s as u32 + 1) as usize);
        for j in 0..s {
            let prev = if j > 0 { labels[e * s + j - 1] } else { -1 };
            labels[e * s + j] = if prev >= 0 && r.below(3) == 0 {
                prev
            } else {
                let mut l = r.below(c as u32 - 1) as i64;
                if l >= blank as i64 {
                    l += 1;
                }
                l
            };
        }
    }
    Ctc {
        labels,
        s,
        input_lengths: il,
        target_lengths: tl,
        blank,
    }
}

const REDUCTIONS: [Reduction; 3] = [Reduction::None, Reduction::Mean, Reduction::Sum];

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, failure_persistence: None, ..ProptestConfig::default() })]

    /// Through log_softmax, every reduction, zero_infinity (some entries impossible),
    /// any blank.
    #[test]
    fn ctc_random(
        t in 1usize..7, b in 1usize..4, c in 2usize..6, blank_pick in any::<u32>(),
        red in 0usize..3, seed in any::<u64>(),
    ) {
        let blank = blank_pick as usize % c;
        let set = random_ctc(t, b, c, blank, seed);
        let logits = uniform(&[t, b, c], seed ^ 5, -2.0, 2.0);
        let opts = CtcLossOptions { blank: set.blank, reduction: REDUCTIONS[red], zero_infinity: true };
        check(&format!("ctc {set:?} t={t} c={c} {opts:?}"), &[logits], |v| {
            v[0].log_softmax(-1)?.ctc_loss(set.batch(), opts)
        });
    }
}

/// The gradient is the partial derivative with respect to the log-probabilities
/// themselves: it passes the check on raw values that are not normalised (PyTorch's
/// gradient, which adds `exp(lp)`, would not).
#[test]
fn ctc_gradient_is_the_partial_derivative_of_raw_log_probs() {
    let set = Ctc {
        // Repeated labels (1 1), an empty target, unequal lengths, blank 2.
        labels: vec![1, 1, 3, 0, 0, 0, 3, 4, 0],
        s: 3,
        input_lengths: vec![6, 3, 4],
        target_lengths: vec![3, 0, 2],
        blank: 2,
    };
    for reduction in REDUCTIONS {
        let lp = uniform(&[6, 3, 5], 21, -3.0, -0.2);
        let opts = CtcLossOptions {
            blank: set.blank,
            reduction,
            zero_infinity: false,
        };
        check(&format!("ctc raw {reduction:?}"), &[lp], |v| {
            v[0].ctc_loss(set.batch(), opts)
        });
    }
    // Unbatched.
    let lp = uniform(&[5, 4], 22, -3.0, -0.2);
    let batch = CtcBatch {
        targets: CtcTargets::Concatenated(&[1, 1]),
        input_lengths: &[5],
        target_lengths: &[2],
    };
    check("ctc raw unbatched", &[lp], |v| {
        v[0].ctc_loss(batch, CtcLossOptions::default())
    });
}

/// An impossible alignment: +∞ (or 0 with zero_infinity) and a zero gradient either way;
/// an empty input with an empty target costs 0.
#[test]
fn ctc_impossible_alignments() {
    let lp = uniform(&[3, 2, 4], 31, -2.0, -0.5).requires_grad().unwrap();
    // Entry 0: labels 1 1 need 3 steps (it has 2); entry 1: empty input, empty target.
    let batch = CtcBatch {
        targets: CtcTargets::Concatenated(&[1, 1]),
        input_lengths: &[2, 0],
        target_lengths: &[2, 0],
    };
    for zero_infinity in [false, true] {
        let opts = CtcLossOptions {
            reduction: Reduction::None,
            zero_infinity,
            ..Default::default()
        };
        let loss = lp.ctc_loss(batch, opts).unwrap();
        let v = loss.to_vec().unwrap();
        assert_eq!(v[0], if zero_infinity { 0.0 } else { f32::INFINITY });
        assert_eq!(v[1], 0.0);
        lp.clear_grad();
        loss.backward_with(BackwardOptions::default().gradient(&T::ones(&B, [2]).unwrap()))
            .unwrap();
        assert!(lp
            .grad()
            .unwrap()
            .to_vec()
            .unwrap()
            .iter()
            .all(|&g| g == 0.0));
    }
    // Three steps suffice: finite loss, non-zero gradient.
    let ok = CtcBatch {
        input_lengths: &[3, 0],
        ..batch
    };
    let loss = lp.ctc_loss(ok, CtcLossOptions::default()).unwrap();
    assert!(loss.item().unwrap().is_finite());
}

/// The reductions from the per-entry losses: mean divides each by max(1, target length).
#[test]
fn ctc_reductions_combine_the_entries() {
    let lp = uniform(&[5, 3, 4], 41, -2.0, 2.0).log_softmax(-1).unwrap();
    let batch = CtcBatch {
        targets: CtcTargets::Padded {
            labels: &[1, 2, 3, 3, 0, 0, 0, 0, 0],
            shape: [3, 3],
        },
        input_lengths: &[5, 4, 2],
        target_lengths: &[3, 1, 0],
    };
    let opts = |reduction| CtcLossOptions {
        reduction,
        ..Default::default()
    };
    let none = lp
        .ctc_loss(batch, opts(Reduction::None))
        .unwrap()
        .to_vec()
        .unwrap();
    let sum = lp
        .ctc_loss(batch, opts(Reduction::Sum))
        .unwrap()
        .item()
        .unwrap();
    let mean = lp
        .ctc_loss(batch, opts(Reduction::Mean))
        .unwrap()
        .item()
        .unwrap();
    let n: Vec<f64> = none.iter().map(|&v| f64::from(v)).collect();
    assert!((f64::from(sum) - n.iter().sum::<f64>()).abs() < 1e-5);
    let want = (n[0] / 3.0 + n[1] / 1.0 + n[2] / 1.0) / 3.0;
    assert!((f64::from(mean) - want).abs() < 1e-5, "{mean} vs {want}");
}

// ----- interpolate ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn interpolate_random(
        n in 1usize..3, c in 1usize..3, h in 1usize..6, w in 1usize..6,
        oh in 1usize..9, ow in 1usize..9, by_scale in any::<bool>(), scale in (0.5f64..3.0, 0.5f64..3.0),
        bilinear in any::<bool>(), align in any::<bool>(), view in view_strategy(), seed in any::<u64>(),
    ) {
        let size = if by_scale && (h as f64 * scale.0).floor() >= 1.0 && (w as f64 * scale.1).floor() >= 1.0 {
            InterpolateSize::ScaleFactor([scale.0, scale.1])
        } else {
            InterpolateSize::Size([oh, ow])
        };
        let options = InterpolateOptions {
            mode: if bilinear { InterpolateMode::Bilinear } else { InterpolateMode::Nearest },
            align_corners: bilinear && align,
        };
        let x = uniform(&leaf_shape(view, &[n, c, h, w]), seed, -1.0, 1.0);
        check(&format!("interpolate [{n},{c},{h},{w}] {size:?} {options:?} {view:?}"), &[x], |v| {
            apply_view(view, &v[0])?.interpolate(size, options)
        });
    }
}

#[test]
fn interpolate_coordinates_follow_pytorch() {
    // Nearest: floor(dst · (in/out as f32)), not the exact rational floor(dst·in/out),
    // which differs for in = 2, out = 82 at dst = 41 (PyTorch 2.15 picks 0 there).
    let x = T::from_vec(&B, vec![10.0, 20.0], [1, 1, 1, 2]).unwrap();
    let y = x
        .interpolate(
            InterpolateSize::Size([1, 82]),
            InterpolateOptions::default(),
        )
        .unwrap()
        .to_vec()
        .unwrap();
    let scale = 2.0f32 / 82.0;
    for (d, &v) in y.iter().enumerate() {
        let src = ((d as f32 * scale).floor() as usize).min(1);
        assert_eq!(v, [10.0, 20.0][src], "dst {d}");
    }
    assert_eq!(y[41], 10.0);
    // Bilinear, half-pixel centres clamped at 0: out 4 from in 2 gives
    // 10, 12.5, 17.5, 20; align_corners gives 10, 13.33, 16.67, 20.
    let y = x
        .interpolate(
            InterpolateSize::Size([1, 4]),
            InterpolateOptions::bilinear(),
        )
        .unwrap();
    assert_eq!(y.to_vec().unwrap(), [10.0, 12.5, 17.5, 20.0]);
    let opts = InterpolateOptions {
        mode: InterpolateMode::Bilinear,
        align_corners: true,
    };
    let y = x
        .interpolate(InterpolateSize::Size([1, 4]), opts)
        .unwrap()
        .to_vec()
        .unwrap();
    assert_eq!(y[0], 10.0);
    assert_eq!(y[3], 20.0);
    assert!((y[1] - 40.0 / 3.0).abs() < 1e-5);
}

// ----- errors --------------------------------------------------------------------------------

#[test]
fn bad_arguments_are_errors_naming_operator_and_argument() {
    let x = uniform(&[4, 2, 3], 1, -1.0, 1.0);
    let (w_ih, w_hh) = (weight(&[20, 3], 2), weight(&[20, 5], 3));
    let ws = [RnnWeights::without_bias(&w_ih, &w_hh)];
    // Mismatched hidden sizes: weight_ih for H = 5, weight_hh for H = 4.
    let w_hh4 = weight(&[16, 4], 4);
    expect_err(
        "lstm hidden sizes",
        || {
            x.lstm(
                &[RnnWeights::without_bias(&w_ih, &w_hh4)],
                LstmOptions::default(),
            )
        },
        &["lstm", "weight_ih", "weight_ih_l0"],
    );
    // Layer 1 with another hidden size.
    let (w_ih1, w_hh1) = (weight(&[16, 5], 5), weight(&[16, 4], 6));
    expect_err(
        "lstm layer 1 hidden size",
        || {
            x.lstm(
                &[ws[0], RnnWeights::without_bias(&w_ih1, &w_hh1)],
                LstmOptions::default(),
            )
        },
        &["lstm", "weight_ih_l1"],
    );
    // Input features.
    let x4 = uniform(&[4, 2, 4], 7, -1.0, 1.0);
    expect_err(
        "lstm input size",
        || x4.lstm(&ws, LstmOptions::default()),
        &["lstm", "weight_ih", "input size 4"],
    );
    // Wrong h0 and c0 shapes.
    let h0 = uniform(&[1, 3, 5], 8, -1.0, 1.0);
    expect_err(
        "lstm h0",
        || {
            x.lstm(
                &ws,
                LstmOptions {
                    h0: Some(&h0),
                    ..Default::default()
                },
            )
        },
        &["lstm", "h0", "[1, 2, 5]"],
    );
    let c0 = uniform(&[2, 2, 5], 9, -1.0, 1.0);
    expect_err(
        "lstm c0",
        || {
            x.lstm(
                &ws,
                LstmOptions {
                    c0: Some(&c0),
                    ..Default::default()
                },
            )
        },
        &["lstm", "c0"],
    );
    // Bidirectional with one set of weights; a bias of the wrong length.
    expect_err(
        "lstm weights count",
        || {
            x.lstm(
                &ws,
                LstmOptions {
                    bidirectional: true,
                    ..Default::default()
                },
            )
        },
        &["lstm", "weights"],
    );
    let (g_ih, g_hh, g_b) = (
        weight(&[15, 3], 10),
        weight(&[15, 5], 11),
        weight(&[14], 12),
    );
    expect_err(
        "gru bias",
        || {
            x.gru(
                &[RnnWeights {
                    bias_ih: Some(&g_b),
                    ..RnnWeights::without_bias(&g_ih, &g_hh)
                }],
                GruOptions::default(),
            )
        },
        &["gru", "bias_ih", "bias_ih_l0"],
    );
    // LSTM weights given to the GRU; an empty sequence; a 4-D input.
    expect_err(
        "gru with lstm weights",
        || x.gru(&ws, GruOptions::default()),
        &["gru", "weight_ih"],
    );
    let empty = T::zeros(&B, [0, 2, 3]).unwrap();
    expect_err(
        "lstm empty sequence",
        || empty.lstm(&ws, LstmOptions::default()),
        &["lstm", "input", "at least 1"],
    );
    let x4d = T::zeros(&B, [1, 4, 2, 3]).unwrap();
    expect_err(
        "gru rank",
        || x4d.gru(&ws, GruOptions::default()),
        &["gru", "input"],
    );

    // CTC.
    let lp = uniform(&[5, 2, 4], 13, -2.0, 0.0);
    let padded = |labels: &'static [i64]| CtcTargets::Padded {
        labels,
        shape: [2, 2],
    };
    let run = |targets, il: &[usize], tl: &[usize], blank| {
        lp.ctc_loss(
            CtcBatch {
                targets,
                input_lengths: il,
                target_lengths: tl,
            },
            CtcLossOptions {
                blank,
                ..Default::default()
            },
        )
    };
    expect_err(
        "ctc input length",
        || run(padded(&[1, 2, 3, 1]), &[6, 5], &[2, 2], 0),
        &["ctc_loss", "input_lengths", "longer than the input"],
    );
    expect_err(
        "ctc target length",
        || run(padded(&[1, 2, 3, 1]), &[5, 5], &[3, 2], 0),
        &["ctc_loss", "target_lengths"],
    );
    expect_err(
        "ctc lengths count",
        || run(padded(&[1, 2, 3, 1]), &[5], &[2, 2], 0),
        &["ctc_loss", "input_lengths"],
    );
    expect_err(
        "ctc label range",
        || run(padded(&[1, 4, 3, 1]), &[5, 5], &[2, 2], 0),
        &["ctc_loss", "targets", "out of range"],
    );
    expect_err(
        "ctc blank in targets",
        || run(padded(&[1, 2, 3, 1]), &[5, 5], &[2, 2], 2),
        &["ctc_loss", "targets", "blank"],
    );
    expect_err(
        "ctc blank range",
        || run(padded(&[1, 2, 3, 1]), &[5, 5], &[2, 2], 4),
        &["ctc_loss", "blank"],
    );
    expect_err(
        "ctc concatenated lengths",
        || run(CtcTargets::Concatenated(&[1, 2, 3]), &[5, 5], &[2, 2], 0),
        &["ctc_loss", "target_lengths"],
    );
    expect_err(
        "ctc padded shape",
        || {
            run(
                CtcTargets::Padded {
                    labels: &[1, 2, 3],
                    shape: [2, 2],
                },
                &[5, 5],
                &[1, 1],
                0,
            )
        },
        &["ctc_loss", "targets"],
    );

    // interpolate.
    let img = uniform(&[1, 2, 4, 4], 14, -1.0, 1.0);
    expect_err(
        "interpolate zero size",
        || img.interpolate(InterpolateSize::Size([0, 3]), InterpolateOptions::default()),
        &["interpolate", "size", "greater than 0"],
    );
    expect_err(
        "interpolate zero scaled size",
        || {
            img.interpolate(
                InterpolateSize::ScaleFactor([0.1, 1.0]),
                InterpolateOptions::bilinear(),
            )
        },
        &["interpolate", "size"],
    );
    expect_err(
        "interpolate bad factor",
        || {
            img.interpolate(
                InterpolateSize::ScaleFactor([f64::NAN, 1.0]),
                InterpolateOptions::default(),
            )
        },
        &["interpolate", "scale_factor"],
    );
    expect_err(
        "interpolate align_corners with nearest",
        || {
            img.interpolate(
                InterpolateSize::Size([8, 8]),
                InterpolateOptions {
                    mode: InterpolateMode::Nearest,
                    align_corners: true,
                },
            )
        },
        &["interpolate", "align_corners"],
    );
    expect_err(
        "interpolate rank",
        || x.interpolate(InterpolateSize::Size([2, 2]), InterpolateOptions::default()),
        &["interpolate", "input"],
    );
    // A huge size on an empty batch is refused before anything is allocated.
    let none = T::zeros(&B, [0, 1, 2, 2]).unwrap();
    expect_err(
        "interpolate huge size",
        || {
            none.interpolate(
                InterpolateSize::Size([1 << 60, 1 << 10]),
                InterpolateOptions::default(),
            )
        },
        &["interpolate"],
    );
}
