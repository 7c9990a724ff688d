//! The recurrent layers, the CTC loss and interpolate, forward and backward, on every ISA
//! path and thread count of ExactBackend give the bits of ScalarRefBackend, and on every
//! path of FastBackend (the FMA paths and the scalar path) those of FastScalarRefBackend
//! (`docs/arithmetic.md` §1 and §6), at 1, 2, 3 and 8 threads. Each case hashes its
//! outputs and every input gradient; values include NaN, ±∞, ±0 and subnormals where
//! marked.

use exactgrad::autograd::{
    CtcBatch, CtcLossOptions, CtcTargets, GruOptions, InterpolateMode, InterpolateOptions,
    InterpolateSize, LstmOptions, RnnWeights,
};
use exactgrad::prelude::*;
use exactgrad::Result;

/// Values uniform in [−2, 2) with a sprinkling of special values where `specials`.
fn values(n: usize, seed: u64, specials: bool) -> Vec<f32> {
    let mut r = Philox::new(seed);
    let sp = [
        0.0f32,
        -0.0,
        1e-40,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    (0..n)
        .map(|i| {
            if specials && i % 13 == 7 {
                sp[r.below(sp.len() as u32) as usize]
            } else {
                r.uniform(-2.0, 2.0)
            }
        })
        .collect()
}

/// Fresh leaves of `shapes` (values from seeds 100, 101, …), `f` on them, backward with a
/// fixed seed gradient per output; the hash of the outputs and every gradient. NaN is
/// hashed as the canonical NaN in fast mode (its payloads are not part of fast mode's
/// contract); exact mode's bits are hashed as they are.
fn case<B: Backend>(
    b: &B,
    shapes: &[&[usize]],
    specials: bool,
    f: impl Fn(&[Tensor<B>]) -> Result<Vec<Tensor<B>>>,
) -> u64 {
    let leaves: Vec<Tensor<B>> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let n = s.iter().product();
            Tensor::from_vec(b, values(n, 100 + i as u64, specials), *s)
                .unwrap()
                .requires_grad()
                .unwrap()
        })
        .collect();
    let outs = f(&leaves).unwrap();
    let mut total: Option<Tensor<B>> = None;
    for (k, y) in outs.iter().enumerate() {
        let seed = Tensor::from_vec(
            b,
            values(y.numel(), 77 + k as u64, false),
            y.shape().clone(),
        )
        .unwrap();
        let s = y.mul(&seed).unwrap().sum().unwrap();
        total = Some(match total {
            None => s,
            Some(t) => t.add(&s).unwrap(),
        });
    }
    total.unwrap().backward().unwrap();
    let mut h = exactgrad::core::GradHasher::new();
    let fast = b.mode() == ComputeMode::Fast;
    let mut feed = |t: &Tensor<B>| {
        let v: Vec<f32> = t
            .to_vec()
            .unwrap()
            .into_iter()
            .map(|x| if fast && x.is_nan() { f32::NAN } else { x })
            .collect();
        h.update(&v);
    };
    outs.iter().for_each(&mut feed);
    for l in &leaves {
        feed(&l.grad().unwrap_or_else(|| l.detach()));
    }
    h.finish()
}

fn run<B: Backend>(b: &B) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    // (cell, bidirectional, batch_first, bias, states, specials, hidden)
    let configs = [
        (true, false, false, true, false, false, 17),
        (true, true, true, true, true, false, 33),
        (true, true, false, false, true, true, 8),
        (false, false, true, true, true, false, 17),
        (false, true, false, true, false, true, 33),
        (false, true, true, false, true, false, 5),
    ];
    for (lstm, bi, bf, bias, states, specials, h) in configs {
        let (t, n, i, layers) = (6, 3, 7, 2);
        let dirs = if bi { 2 } else { 1 };
        let g = if lstm { 4 } else { 3 };
        let mut shapes: Vec<Vec<usize>> = vec![if bf { vec![n, t, i] } else { vec![t, n, i] }];
        if states {
            shapes.push(vec![layers * dirs, n, h]);
            if lstm {
                shapes.push(vec![layers * dirs, n, h]);
            }
        }
        let first = shapes.len();
        for l in 0..layers {
            for _ in 0..dirs {
                shapes.push(vec![g * h, if l == 0 { i } else { dirs * h }]);
                shapes.push(vec![g * h, h]);
                if bias {
                    shapes.extend([vec![g * h], vec![g * h]]);
                }
            }
        }
        let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        let name = format!(
            "{} bi={bi} batch_first={bf} bias={bias} states={states} specials={specials} h={h}",
            if lstm { "lstm" } else { "gru" }
        );
        let hash = case(b, &refs, specials, |v| {
            let per = if bias { 4 } else { 2 };
            let ws: Vec<RnnWeights<'_, B>> = v[first..]
                .chunks(per)
                .map(|w| RnnWeights {
                    weight_ih: &w[0],
                    weight_hh: &w[1],
                    bias_ih: w.get(2),
                    bias_hh: w.get(3),
                })
                .collect();
            let h0 = states.then(|| &v[1]);
            if lstm {
                let c0 = states.then(|| &v[2]);
                let o = v[0].lstm(
                    &ws,
                    LstmOptions {
                        h0,
                        c0,
                        bidirectional: bi,
                        batch_first: bf,
                    },
                )?;
                Ok(vec![o.output, o.h_n, o.c_n])
            } else {
                let o = v[0].gru(
                    &ws,
                    GruOptions {
                        h0,
                        bidirectional: bi,
                        batch_first: bf,
                    },
                )?;
                Ok(vec![o.output, o.h_n])
            }
        });
        out.push((name, hash));
    }
    // CTC through log_softmax, every reduction.
    for (reduction, zero_infinity) in [
        (Reduction::None, true),
        (Reduction::Mean, false),
        (Reduction::Sum, true),
    ] {
        let hash = case(b, &[&[9, 3, 6]], false, |v| {
            let batch = CtcBatch {
                targets: CtcTargets::Padded {
                    labels: &[1, 1, 3, 4, 5, 0, 0, 0, 2, 2, 2, 2],
                    shape: [3, 4],
                },
                input_lengths: &[9, 7, 5],
                target_lengths: &[4, 0, 4],
            };
            let opts = CtcLossOptions {
                blank: 0,
                reduction,
                zero_infinity,
            };
            Ok(vec![v[0].log_softmax(-1)?.ctc_loss(batch, opts)?])
        });
        out.push((
            format!("ctc {reduction:?} zero_infinity={zero_infinity}"),
            hash,
        ));
    }
    // interpolate.
    for (size, mode, align) in [
        (
            InterpolateSize::Size([13, 17]),
            InterpolateMode::Nearest,
            false,
        ),
        (
            InterpolateSize::ScaleFactor([1.7, 0.6]),
            InterpolateMode::Nearest,
            false,
        ),
        (
            InterpolateSize::Size([13, 17]),
            InterpolateMode::Bilinear,
            false,
        ),
        (
            InterpolateSize::ScaleFactor([2.5, 1.3]),
            InterpolateMode::Bilinear,
            false,
        ),
        (
            InterpolateSize::Size([4, 19]),
            InterpolateMode::Bilinear,
            true,
        ),
    ] {
        let hash = case(b, &[&[2, 3, 7, 9]], true, |v| {
            let opts = InterpolateOptions {
                mode,
                align_corners: align,
            };
            Ok(vec![v[0].transpose(2, 3)?.interpolate(size, opts)?])
        });
        out.push((format!("interpolate {size:?} {mode:?} align={align}"), hash));
    }
    out
}

fn compare(reference: &[(String, u64)], got: &[(String, u64)], what: &str) {
    assert_eq!(reference.len(), got.len());
    for ((name, want), (_, have)) in reference.iter().zip(got) {
        assert_eq!(
            want, have,
            "{what}: case `{name}` differs from the reference (hash {have:#018x}, want {want:#018x})"
        );
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

/// The cell kernels' chunking across threads: a step wide enough to be split (batch ×
/// 4·hidden above one chunk) gives the same bits at every thread count.
#[test]
fn wide_steps_split_across_threads_keep_their_bits() {
    let wide = |b: &dyn Fn() -> u64| b();
    let reference = {
        let r = ScalarRefBackend;
        wide(&|| wide_case(&r))
    };
    for threads in [1, 2, 8] {
        let b = ExactBackend::with_threads(threads);
        assert_eq!(wide_case(&b), reference, "exact, {threads} threads");
    }
}

fn wide_case<B: Backend>(b: &B) -> u64 {
    // batch 70, hidden 65: 70 × 260 units, above one chunk of 2^14.
    case(b, &[&[2, 70, 3], &[260, 3], &[260, 65]], false, |v| {
        let o = v[0].lstm(
            &[RnnWeights::without_bias(&v[1], &v[2])],
            LstmOptions::default(),
        )?;
        Ok(vec![o.output, o.c_n])
    })
}
