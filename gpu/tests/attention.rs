//! `attention_scores` and `dropout_mask` beyond what the conformance kit generates: a
//! dropout threshold exactly on a drawn value (kept: the comparison is `>=`), subnormal
//! and extreme `p`, counters whose element index carries into the high word, NaN and
//! signed scales; attention scores with NaN, ±∞, ±0 and subnormal products and masks,
//! a mask at an offset with broadcast strides, causal masks over several matrices, views
//! into the middle of a buffer. Each against `ScalarRefBackend` (exact mode) and
//! `FastScalarRefBackend` (fast mode), bit for bit (NaN equal to any NaN in fast mode).
//!
//! Without a Vulkan adapter each test prints why and passes, unless
//! `EXACTGRAD_REQUIRE_GPU=1` makes that a failure.

use exactgrad_backends::{FastScalarRefBackend, ScalarRefBackend};
use exactgrad_core::kernels::{AttentionScoresSpec, ScoreMask};
use exactgrad_core::rng::unit_f32;
use exactgrad_core::{Backend, ComputeMode, Layout, Philox};

mod common;
use common::backend;

/// `n` values with NaNs (payloads and signs), ±∞, ±0 and subnormals sprinkled in.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Philox::new(seed);
    (0..n)
        .map(|_| {
            let v = rng.next_f32() * 4.0 - 2.0;
            match (rng.next_f32() * 30.0) as u32 {
                0 => f32::from_bits(0x7fc0_0001 + (rng.next_f32() * 1000.0) as u32),
                1 => f32::from_bits(0xffc0_0000),
                2 => f32::INFINITY,
                3 => f32::NEG_INFINITY,
                4 | 5 => 0.0,
                6 | 7 => -0.0,
                8 => f32::from_bits(1 + (rng.next_f32() * 1000.0) as u32),
                9 => f32::MAX,
                _ => v,
            }
        })
        .collect()
}

/// The bits of `v`, every NaN as `0x7FC00000` in fast mode (where any NaN is equal).
fn bits(mode: ComputeMode, v: &[f32]) -> Vec<u32> {
    v.iter()
        .map(|x| match mode {
            ComputeMode::Fast if x.is_nan() => 0x7fc0_0000,
            _ => x.to_bits(),
        })
        .collect()
}

/// `body` on the device and on each mode's reference, compared bit for bit.
macro_rules! check {
    (|$b:ident| $body:expr) => {{
        for mode in [ComputeMode::Fast, ComputeMode::Exact] {
            let Some(gpu) = backend(mode) else { return };
            let got = {
                let $b = &gpu;
                $body
            };
            let want = match mode {
                ComputeMode::Exact => {
                    let $b = &ScalarRefBackend;
                    $body
                }
                ComputeMode::Fast => {
                    let $b = &FastScalarRefBackend;
                    $body
                }
            };
            assert_eq!(got.len(), want.len());
            assert_eq!(bits(mode, &got), bits(mode, &want), "{mode} mode");
        }
    }};
}

/// The dropout mask of `n` elements written into the middle of a buffer of `n + 5`.
fn dropout<B: Backend>(b: &B, key: u64, p: f32, scale: f32, start: u64, n: usize) -> Vec<f32> {
    let mut out = b.storage_from_vec(vec![7.0; n + 5]).unwrap();
    let v = B::slice_mut(B::view_mut(&mut out), 2..2 + n);
    b.dropout_mask(key, p, scale, start, v).unwrap();
    B::storage_to_vec(&out).unwrap()
}

#[test]
fn dropout_threshold_on_a_drawn_value_keeps_it() {
    for (key, start) in [(3u64, 0u64), (0xdead_beef_0123_4567, 5), (9, (1 << 32) - 2)] {
        // p equal to the value drawn for element 0 (and so for every element with the
        // same top 24 bits): kept by `>=`, dropped by `>`.
        let p = unit_f32(Philox::at(key, start));
        let want = dropout(&ScalarRefBackend, key, p, 2.0, start, 9);
        assert_eq!(want[2], 2.0);
        check!(|b| dropout(b, key, p, 2.0, start, 9));
        // Just above it: dropped.
        let q = f32::from_bits(p.to_bits() + 1);
        check!(|b| dropout(b, key, q, 2.0, start, 9));
    }
}

#[test]
fn dropout_extreme_probabilities_scales_and_counters() {
    let ps = [
        0.0,
        f32::from_bits(1),
        f32::MIN_POSITIVE,
        1.0 / 16_777_216.0,
        0.5,
        1.0 - 1.0 / 16_777_216.0,
        1.0 - 1.0 / 33_554_432.0,
        1.0,
    ];
    let scales = [1.25, -3.0, 0.0, -0.0, f32::INFINITY, f32::NAN];
    let starts = [
        0u64,
        1,
        3,
        (1 << 32) - 3,
        (1 << 34) - 7,
        0x1234_5678_9abc_def1,
        u64::MAX - 1000,
    ];
    for (i, &start) in starts.iter().enumerate() {
        for (j, &p) in ps.iter().enumerate() {
            let scale = scales[(i + j) % scales.len()];
            let key = Philox::at(77, (i * 10 + j) as u64) as u64 * 0x9e37_79b9_7f4a_7c15;
            check!(|b| dropout(b, key, p, scale, start, 301));
        }
    }
}

/// `attention_scores` on scores in the middle of a buffer, with `mask` (kind, values,
/// layout) when given.
fn scores<B: Backend>(
    b: &B,
    spec: &AttentionScoresSpec,
    seed: u64,
    mask: Option<(ScoreMask, &[f32], &Layout)>,
) -> Vec<f32> {
    let n = spec.rows * spec.s;
    let mut s = b.storage_from_vec(values(n + 3, seed)).unwrap();
    let v = B::slice_mut(B::view_mut(&mut s), 1..1 + n);
    match mask {
        Some((kind, m, lay)) => {
            let m = b.storage_from_vec(m.to_vec()).unwrap();
            b.attention_scores(spec, v, Some((kind, B::view(&m), lay)))
                .unwrap();
        }
        None => b.attention_scores(spec, v, None).unwrap(),
    }
    B::storage_to_vec(&s).unwrap()
}

#[test]
fn attention_scores_special_values_masks_and_causal() {
    let (batch, l, s) = (3, 5, 7);
    let scales = [0.125, -1.5, 0.0, f32::INFINITY, f32::NAN, f32::from_bits(3)];
    for (k, &scale) in scales.iter().enumerate() {
        for causal in [false, true] {
            let spec = AttentionScoresSpec {
                rows: batch * l,
                l,
                s,
                scale,
                causal,
            };
            let seed = 100 + k as u64;
            check!(|b| scores(b, &spec, seed, None));
            // A mask [batch, 1, s] broadcast over the queries, at offset 4 in its buffer.
            let m = values(4 + batch * s, seed + 50);
            let lay = Layout {
                shape: vec![batch, l, s].into(),
                strides: vec![s, 0, 1],
                offset: 4,
            };
            for kind in [ScoreMask::Additive, ScoreMask::Allow, ScoreMask::Block] {
                check!(|b| scores(b, &spec, seed, Some((kind, &m, &lay))));
            }
            // A full mask, transposed in its buffer.
            let m = values(batch * l * s, seed + 60);
            let lay = Layout {
                shape: vec![batch, l, s].into(),
                strides: vec![l * s, 1, l],
                offset: 0,
            };
            for kind in [ScoreMask::Additive, ScoreMask::Allow, ScoreMask::Block] {
                check!(|b| scores(b, &spec, seed, Some((kind, &m, &lay))));
            }
        }
    }
}
