//! Normalisation, dropout, embedding, index_select, split/chunk and scaled dot-product
//! attention: gradient checks (seed §6) on random shapes with strided, transposed and
//! permuted views, masks of both kinds, causal attention, with and without affine
//! parameters; the documented orders checked bit for bit; dropout's statistics and
//! reproducibility; the running-statistics update; and the errors of bad arguments.

use exactgrad::autograd::AttentionMask;
use exactgrad::prelude::*;
use exactgrad::Result;
use proptest::prelude::*;
use std::panic::{catch_unwind, AssertUnwindSafe};

mod common;
use common::*;

/// Values uniform in [lo, hi).
fn tensor(shape: &[usize], seed: u64, lo: f32, hi: f32) -> T {
    uniform(shape, seed, lo, hi)
}

/// Values at least 0.3 apart: every normalisation group has a healthy variance.
fn spread(shape: &[usize], seed: u64) -> T {
    permuted_grid(shape, seed, 0.3)
}

/// Optional parameters: the list of inputs after the first, and which ones exist.
fn params(weight: bool, bias: bool, shape: &[usize], seed: u64) -> (Vec<T>, bool, bool) {
    let mut v = Vec::new();
    if weight {
        v.push(tensor(shape, seed ^ 0x11, 0.5, 1.5));
    }
    if bias {
        v.push(tensor(shape, seed ^ 0x22, -1.0, 1.0));
    }
    (v, weight, bias)
}

/// Splits `v[1..]` back into (weight, bias).
fn wb(v: &[T], weight: bool, bias: bool) -> (Option<&T>, Option<&T>) {
    let w = weight.then(|| &v[1]);
    let b = bias.then(|| &v[1 + weight as usize]);
    (w, b)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn batch_norm_random(
        n in 1usize..4, c in 1usize..4, spatial in prop::collection::vec(1usize..4, 0..3),
        view in view_strategy(), training in any::<bool>(), weight in any::<bool>(),
        bias in any::<bool>(), seed in any::<u64>(),
    ) {
        let mut shape = vec![n, c];
        shape.extend(&spatial);
        let count = n * spatial.iter().product::<usize>();
        let training = training && count > 1;
        let x = spread(&leaf_shape(view, &shape), seed);
        let (p, weight, bias) = params(weight, bias, &[c], seed);
        let mut inputs = vec![x];
        inputs.extend(p);
        let rm = tensor(&[c], seed ^ 3, -0.5, 0.5);
        let rv = tensor(&[c], seed ^ 4, 0.5, 2.0);
        check(&format!("batch_norm {shape:?} {view:?} training={training} w={weight} b={bias}"), &inputs, |v| {
            let (w, b) = wb(v, weight, bias);
            // Fresh running statistics per call: their update must not leak into y.
            let (rm, rv) = (rm.copy_contiguous(), rv.copy_contiguous());
            apply_view(view, &v[0])?.batch_norm(Some(&rm), Some(&rv), w, b, training, 0.1, 1e-5)
        });
    }

    #[test]
    fn layer_norm_random(
        shape in prop::collection::vec(1usize..5, 1..4), k in 1usize..4,
        view in view_strategy(), weight in any::<bool>(), bias in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let k = k.min(shape.len());
        let normalized = shape[shape.len() - k..].to_vec();
        let x = spread(&leaf_shape(view, &shape), seed);
        let (p, weight, bias) = params(weight, bias, &normalized, seed);
        let mut inputs = vec![x];
        inputs.extend(p);
        check(&format!("layer_norm {shape:?} over {normalized:?} {view:?} w={weight} b={bias}"), &inputs, |v| {
            let (w, b) = wb(v, weight, bias);
            apply_view(view, &v[0])?.layer_norm(&normalized, w, b, 1e-5)
        });
    }

    #[test]
    fn group_norm_random(
        n in 1usize..3, groups in 1usize..4, cpg in 1usize..3,
        spatial in prop::collection::vec(1usize..4, 0..3), view in view_strategy(),
        weight in any::<bool>(), bias in any::<bool>(), seed in any::<u64>(),
    ) {
        let c = groups * cpg;
        let mut shape = vec![n, c];
        shape.extend(&spatial);
        let x = spread(&leaf_shape(view, &shape), seed);
        let (p, weight, bias) = params(weight, bias, &[c], seed);
        let mut inputs = vec![x];
        inputs.extend(p);
        check(&format!("group_norm {shape:?} groups={groups} {view:?} w={weight} b={bias}"), &inputs, |v| {
            let (w, b) = wb(v, weight, bias);
            apply_view(view, &v[0])?.group_norm(groups, w, b, 1e-5)
        });
    }

    #[test]
    fn attention_random(
        batch in prop::collection::vec(1usize..3, 0..3), l in 1usize..5, s in 1usize..5,
        e in 1usize..5, ev in 1usize..4, mask_kind in 0u8..3, causal in any::<bool>(),
        scale in prop_oneof![Just(None), Just(Some(0.7f32)), Just(Some(1.6f32))],
        transposed in any::<bool>(), broadcast_mask in any::<bool>(), seed in any::<u64>(),
    ) {
        let causal = causal && mask_kind == 0;
        let shape = |a: usize, b: usize| {
            let mut v = batch.clone();
            v.extend([a, b]);
            v
        };
        // Transposed: leaves [..., E, L] viewed as [..., L, E] (and the same for k, v).
        let leaf = |a: usize, b: usize, sd: u64| {
            if transposed { tensor(&shape(b, a), sd, -1.0, 1.0) } else { tensor(&shape(a, b), sd, -1.0, 1.0) }
        };
        let view = |t: &T| if transposed { t.transpose(-1, -2) } else { Ok(t.clone()) };
        let mut inputs = vec![leaf(l, e, seed), leaf(s, e, seed ^ 1), leaf(s, ev, seed ^ 2)];
        let mask_shape = if broadcast_mask { vec![l, s] } else { shape(l, s) };
        let bool_mask = T::from_vec(
            &B,
            values(mask_shape.iter().product(), seed ^ 3, 0.0, 1.0)
                .into_iter()
                .map(|u| if u < 0.7 { 1.0 } else { 0.0 })
                .collect(),
            mask_shape.clone(),
        ).unwrap();
        if mask_kind == 2 {
            inputs.push(tensor(&mask_shape, seed ^ 4, -1.0, 1.0));
        }
        check(&format!("sdpa batch={batch:?} L={l} S={s} E={e} Ev={ev} mask={mask_kind} causal={causal} scale={scale:?} transposed={transposed}"), &inputs, |v| {
            let mask = match mask_kind {
                0 => None,
                1 => Some(AttentionMask::Bool(&bool_mask)),
                _ => Some(AttentionMask::Additive(&v[3])),
            };
            T::scaled_dot_product_attention(&view(&v[0])?, &view(&v[1])?, &view(&v[2])?, mask, causal, scale)
        });
    }

    #[test]
    fn attention_broadcast_batch(l in 1usize..4, s in 1usize..4, e in 1usize..4, seed in any::<u64>()) {
        // query [2, 3, L, E], key [1, 3, S, E], value [S, E] (rank broadcast).
        let inputs = vec![
            tensor(&[2, 3, l, e], seed, -1.0, 1.0),
            tensor(&[1, 3, s, e], seed ^ 1, -1.0, 1.0),
            tensor(&[s, e], seed ^ 2, -1.0, 1.0),
        ];
        check("sdpa broadcast batch", &inputs, |v| {
            T::scaled_dot_product_attention(&v[0], &v[1], &v[2], None, false, None)
        });
    }

    #[test]
    fn embedding_and_index_select(
        num in 1usize..6, dim in 1usize..4, count in 0usize..8, pad in any::<bool>(),
        shape in prop::collection::vec(1usize..4, 1..4), seed in any::<u64>(), pick in any::<u64>(),
        view in view_strategy(),
    ) {
        let mut r = Philox::new(pick);
        let indices: Vec<i64> = (0..count).map(|_| r.below(num as u32) as i64).collect();
        let padding_idx = pad.then(|| r.below(num as u32) as i64 - if r.below(2) == 0 { num as i64 } else { 0 });
        let w = tensor(&leaf_shape(view, &[num, dim]), seed, -1.0, 1.0);
        // The padding row gets no gradient by definition: the positions that pick it are
        // multiplied by 0, so that the numeric gradient agrees.
        let pad_row = padding_idx.map(|p| if p < 0 { p + num as i64 } else { p });
        let keep: Vec<f32> = indices.iter().map(|&i| if Some(i) == pad_row { 0.0 } else { 1.0 }).collect();
        let keep = T::from_vec(&B, keep, [count, 1]).unwrap();
        check(&format!("embedding {num}x{dim} {indices:?} pad={padding_idx:?} {view:?}"), &[w], |v| {
            T::embedding(&apply_view(view, &v[0])?, &indices, &[count], padding_idx)?.mul(&keep)
        });
        let d = r.below(shape.len() as u32) as usize;
        let sel: Vec<i64> = (0..count).map(|_| r.below(shape[d] as u32) as i64).collect();
        let x = tensor(&leaf_shape(view, &shape), seed ^ 1, -1.0, 1.0);
        check(&format!("index_select {shape:?} dim {d} {sel:?} {view:?}"), &[x], |v| {
            apply_view(view, &v[0])?.index_select(d as isize - shape.len() as isize, &sel)
        });
    }

    #[test]
    fn split_and_chunk(
        shape in prop::collection::vec(1usize..6, 1..4), size in 1usize..4, chunks in 1usize..5,
        view in view_strategy(), seed in any::<u64>(), pick in any::<u64>(),
    ) {
        let mut r = Philox::new(pick);
        let d = r.below(shape.len() as u32) as isize;
        let x = tensor(&leaf_shape(view, &shape), seed, -1.0, 1.0);
        // A consumer that weights each piece differently and skips the second one.
        let consume = |pieces: Vec<T>| -> Result<T> {
            let used: Vec<T> = pieces
                .iter()
                .enumerate()
                .filter(|(k, _)| *k != 1)
                .map(|(k, p)| p.reshape(&[-1])?.mul_scalar(k as f32 + 0.5))
                .collect::<Result<_>>()?;
            T::concat(&used.iter().collect::<Vec<_>>(), 0)
        };
        check(&format!("split {shape:?} {size} dim {d} {view:?}"), std::slice::from_ref(&x), |v| {
            consume(apply_view(view, &v[0])?.split(size, d)?)
        });
        check(&format!("chunk {shape:?} {chunks} dim {d} {view:?}"), std::slice::from_ref(&x), |v| {
            consume(apply_view(view, &v[0])?.chunk(chunks, d)?)
        });
        let n = shape[d as usize];
        let first = r.below(n as u32 + 1) as usize;
        check(&format!("split_sizes {shape:?} [{first}, {}] dim {d} {view:?}", n - first), &[x], |v| {
            consume(apply_view(view, &v[0])?.split_sizes(&[first, 0, n - first], d)?)
        });
    }

    #[test]
    fn dropout_random(shape in prop::collection::vec(1usize..6, 1..4), p in prop_oneof![Just(0.0f32), Just(0.3), Just(0.8), Just(1.0)], view in view_strategy(), seed in any::<u64>()) {
        let x = tensor(&leaf_shape(view, &shape), seed, -1.0, 1.0);
        check(&format!("dropout {shape:?} p={p} {view:?}"), &[x], |v| {
            // The same generator state at every call gives the same mask.
            apply_view(view, &v[0])?.dropout(p, true, &mut Philox::new(seed ^ 9))
        });
    }
}

// ----- the documented orders, bit for bit -------------------------------------------------

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// layer_norm over the last dimension written straight from `docs/arithmetic.md` §5.
fn layer_norm_reference(
    x: &[f32],
    m: usize,
    w: &[f32],
    b: &[f32],
    g: &[f32],
    eps: f32,
) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
    let rows = x.len() / m;
    let n = m as f32;
    let (mut y, mut dx) = (vec![0.0; x.len()], vec![0.0; x.len()]);
    let (mut dw, mut db) = (vec![0.0f64; m], vec![0.0f64; m]);
    for r in 0..rows {
        let xs = &x[r * m..(r + 1) * m];
        let gs = &g[r * m..(r + 1) * m];
        let mu = (xs.iter().map(|&v| f64::from(v)).sum::<f64>() as f32) / n;
        let c = (xs.iter().map(|&v| f64::from(v - mu)).sum::<f64>() as f32) / n;
        let e: Vec<f32> = xs.iter().map(|&v| (v - mu) - c).collect();
        let s2 = e.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() as f32;
        let rstd = 1.0 / (s2 / n + eps).sqrt();
        let xhat: Vec<f32> = e.iter().map(|&v| v * rstd).collect();
        let gh: Vec<f32> = (0..m).map(|j| gs[j] * w[j]).collect();
        let a = gh.iter().map(|&v| f64::from(v)).sum::<f64>() as f32;
        let bx = (0..m)
            .map(|j| f64::from(gh[j]) * f64::from(xhat[j]))
            .sum::<f64>() as f32;
        for j in 0..m {
            y[r * m + j] = xhat[j] * w[j] + b[j];
            dx[r * m + j] = ((gh[j] - a / n) - xhat[j] * (bx / n)) * rstd;
            dw[j] += f64::from(gs[j]) * f64::from(xhat[j]);
            db[j] += f64::from(gs[j]);
        }
    }
    let round = |v: Vec<f64>| v.into_iter().map(|s| s as f32).collect();
    (y, dx, round(dw), round(db))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn layer_norm_follows_the_documented_order(rows in 1usize..5, m in 1usize..40, offset in prop_oneof![Just(0.0f32), Just(100.0)], seed in any::<u64>()) {
        let xv: Vec<f32> = values(rows * m, seed, -2.0, 2.0).iter().map(|v| v + offset).collect();
        let (wv, bv) = (values(m, seed ^ 1, 0.5, 1.5), values(m, seed ^ 2, -1.0, 1.0));
        let gv = values(rows * m, seed ^ 3, -1.0, 1.0);
        let x = T::from_vec(&B, xv.clone(), [rows, m]).unwrap().requires_grad().unwrap();
        let w = T::from_slice(&B, &wv, [m]).unwrap().requires_grad().unwrap();
        let b = T::from_slice(&B, &bv, [m]).unwrap().requires_grad().unwrap();
        let y = x.layer_norm(&[m], Some(&w), Some(&b), 1e-5).unwrap();
        y.backward(Some(&T::from_slice(&B, &gv, [rows, m]).unwrap()), false).unwrap();
        let (ry, rdx, rdw, rdb) = layer_norm_reference(&xv, m, &wv, &bv, &gv, 1e-5);
        prop_assert_eq!(bits(&y.to_vec()), bits(&ry));
        prop_assert_eq!(bits(&x.grad().unwrap().to_vec()), bits(&rdx));
        prop_assert_eq!(bits(&w.grad().unwrap().to_vec()), bits(&rdw));
        prop_assert_eq!(bits(&b.grad().unwrap().to_vec()), bits(&rdb));
    }

    /// The fused attention's forward equals, bit for bit, the same steps written with the
    /// recorded operators (matmul, mul_scalar, add/where, softmax, matmul); its gradients
    /// agree with theirs to rounding.
    #[test]
    fn attention_equals_its_composition(
        l in 1usize..6, s in 1usize..6, e in 1usize..6, ev in 1usize..5, kind in 0u8..4, seed in any::<u64>(),
    ) {
        let q = tensor(&[2, l, e], seed, -2.0, 2.0).requires_grad().unwrap();
        let k = tensor(&[2, s, e], seed ^ 1, -2.0, 2.0).requires_grad().unwrap();
        let v = tensor(&[2, s, ev], seed ^ 2, -2.0, 2.0).requires_grad().unwrap();
        let scale = 0.43f32;
        // Every row keeps its first key, so no row is fully masked.
        let keep: Vec<f32> = values(l * s, seed ^ 3, 0.0, 1.0)
            .iter()
            .enumerate()
            .map(|(i, &u)| if i % s == 0 || u < 0.6 { 1.0 } else { 0.0 })
            .collect();
        let bool_mask = T::from_vec(&B, keep, [l, s]).unwrap();
        let add_mask = tensor(&[1, l, s], seed ^ 4, -1.0, 1.0);
        let causal_mask = T::from_vec(&B, (0..l * s).map(|i| if i % s <= i / s { 1.0 } else { 0.0 }).collect(), [l, s]).unwrap();
        let (mask, causal) = match kind {
            0 => (None, false),
            1 => (Some(AttentionMask::Bool(&bool_mask)), false),
            2 => (Some(AttentionMask::Additive(&add_mask)), false),
            _ => (None, true),
        };
        let fused = T::scaled_dot_product_attention(&q, &k, &v, mask, causal, Some(scale)).unwrap();
        let scores = q.matmul(&k.transpose(-1, -2).unwrap()).unwrap().mul_scalar(scale).unwrap();
        let ninf = T::scalar(&B, f32::NEG_INFINITY);
        let scores = match kind {
            0 => scores,
            1 => T::where_cond(&bool_mask, &scores, &ninf).unwrap(),
            2 => scores.add(&add_mask).unwrap(),
            _ => T::where_cond(&causal_mask, &scores, &ninf).unwrap(),
        };
        let composed = scores.softmax(-1).unwrap().matmul(&v).unwrap();
        prop_assert_eq!(bits(&fused.to_vec()), bits(&composed.to_vec()));
        let g = tensor(&[2, l, ev], seed ^ 5, -1.0, 1.0);
        let grads = |y: &T| -> Vec<Vec<f32>> {
            for t in [&q, &k, &v] {
                t.clear_grad();
            }
            y.backward(Some(&g), false).unwrap();
            [&q, &k, &v].iter().map(|t| t.grad().unwrap().to_vec()).collect()
        };
        let (gf, gc) = (grads(&fused), grads(&composed));
        for (a, b) in gf.iter().zip(&gc) {
            let scale = b.iter().fold(1.0f32, |m, x| m.max(x.abs()));
            for (x, y) in a.iter().zip(b) {
                prop_assert!((x - y).abs() <= 1e-6 * scale, "fused {x} composed {y}");
            }
        }
    }
}

// ----- accuracy and exact special cases -----------------------------------------------------

/// Data far from zero against its spread: the corrected two-pass statistics keep `x̂`
/// within a few ulp of the f64 result (PyTorch 2.15.0's own layer_norm is off by ~1e-5
/// here, which is why the oracle's offset case uses a smaller offset).
#[test]
fn layer_norm_is_accurate_for_large_offsets() {
    for offset in [1000.0f32, 1.0e5] {
        let m = 64;
        let xv: Vec<f32> = values(3 * m, 7, -1.0, 1.0)
            .iter()
            .map(|v| v + offset)
            .collect();
        let y = T::from_slice(&B, &xv, [3, m])
            .unwrap()
            .layer_norm(&[m], None, None, 1e-5)
            .unwrap()
            .to_vec();
        for r in 0..3 {
            let row: Vec<f64> = xv[r * m..(r + 1) * m]
                .iter()
                .map(|&v| f64::from(v))
                .collect();
            let mu = row.iter().sum::<f64>() / m as f64;
            let var = row.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / m as f64;
            for j in 0..m {
                let want = (row[j] - mu) / (var + 1e-5).sqrt();
                let err = (f64::from(y[r * m + j]) - want).abs();
                assert!(
                    err < 1e-6,
                    "offset {offset}: element {j} of row {r}: {} vs {want} (error {err:e})",
                    y[r * m + j]
                );
            }
        }
    }
}

/// With one value per group, `x̂ = 0` exactly: `y = b` and the input gradient is 0.
#[test]
fn one_value_per_group_is_exact() {
    let x = tensor(&[4, 1], 1, -3.0, 3.0).requires_grad().unwrap();
    let w = tensor(&[1], 2, 0.5, 1.5);
    let b = tensor(&[1], 3, -1.0, 1.0);
    let y = x.layer_norm(&[1], Some(&w), Some(&b), 1e-5).unwrap();
    assert_eq!(y.to_vec(), vec![b.to_vec()[0]; 4]);
    y.backward(Some(&tensor(&[4, 1], 4, -1.0, 1.0)), false)
        .unwrap();
    assert!(x.grad().unwrap().to_vec().iter().all(|&g| g == 0.0));
    let x = tensor(&[2, 4], 5, -3.0, 3.0);
    let b = tensor(&[4], 6, -1.0, 1.0);
    let y = x
        .group_norm(4, Some(&tensor(&[4], 7, 0.5, 1.5)), Some(&b), 1e-5)
        .unwrap();
    assert_eq!(y.to_vec(), [b.to_vec(), b.to_vec()].concat());
}

#[test]
fn batch_norm_running_statistics() {
    let x = spread(&[4, 3, 5], 11).requires_grad().unwrap();
    let rm = tensor(&[3], 12, -0.5, 0.5);
    let rv = tensor(&[3], 13, 0.5, 2.0);
    let (rm0, rv0) = (rm.to_vec(), rv.to_vec());
    let (v0, v1) = (rm.version(), rv.version());
    let momentum = 0.25f32;
    let y = x
        .batch_norm(Some(&rm), Some(&rv), None, None, true, momentum, 1e-5)
        .unwrap();
    assert!(
        rm.version() > v0 && rv.version() > v1,
        "in-place update bumps the version"
    );
    let xv = x.to_vec();
    for c in 0..3 {
        let vals: Vec<f64> = (0..4)
            .flat_map(|n| (0..5).map(move |s| (n, s)))
            .map(|(n, s)| f64::from(xv[(n * 3 + c) * 5 + s]))
            .collect();
        let mu = vals.iter().sum::<f64>() / 20.0;
        let ss = vals.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>();
        let want_m = (1.0 - f64::from(momentum)) * f64::from(rm0[c]) + f64::from(momentum) * mu;
        let want_v =
            (1.0 - f64::from(momentum)) * f64::from(rv0[c]) + f64::from(momentum) * ss / 19.0;
        assert!((f64::from(rm.to_vec()[c]) - want_m).abs() < 1e-6);
        assert!((f64::from(rv.to_vec()[c]) - want_v).abs() < 1e-5 * want_v);
        // The output is normalised with the biased variance.
        let yv = y.to_vec();
        let out: Vec<f64> = (0..4)
            .flat_map(|n| (0..5).map(move |s| (n, s)))
            .map(|(n, s)| f64::from(yv[(n * 3 + c) * 5 + s]))
            .collect();
        let var_out = out.iter().map(|v| v * v).sum::<f64>() / 20.0;
        assert!((var_out - ss / 20.0 / (ss / 20.0 + 1e-5)).abs() < 1e-5);
    }
    // The update is not recorded: backward works and the statistics get no gradient.
    y.sum().unwrap().backward(None, false).unwrap();
    assert!(rm.grad().is_none() && rv.grad().is_none());
    // Evaluation normalises with the running statistics and leaves them alone.
    let (m1, v1) = (rm.to_vec(), rv.to_vec());
    let ver = rm.version();
    let y = x
        .detach()
        .batch_norm(Some(&rm), Some(&rv), None, None, false, momentum, 1e-5)
        .unwrap()
        .to_vec();
    assert_eq!(rm.version(), ver);
    assert_eq!((rm.to_vec(), rv.to_vec()), (m1.clone(), v1.clone()));
    for (i, &yv) in y.iter().enumerate() {
        let c = (i / 5) % 3;
        let want = (xv[i] - m1[c]) * (1.0 / (v1[c] + 1e-5).sqrt());
        assert_eq!(yv.to_bits(), want.to_bits());
    }
    // Training without running statistics is allowed.
    assert!(x
        .batch_norm(None, None, None, None, true, 0.1, 1e-5)
        .is_ok());
}

/// Empty batches, sequences and groups: results of PyTorch's shapes, no panic.
#[test]
fn empty_shapes() {
    let t = |s: &[usize]| tensor(s, 1, -1.0, 1.0).requires_grad().unwrap();
    let y = T::scaled_dot_product_attention(
        &t(&[1, 2, 4]),
        &t(&[1, 0, 4]),
        &t(&[1, 0, 3]),
        None,
        false,
        None,
    )
    .unwrap();
    assert_eq!((y.dims(), y.to_vec()), (&[1usize, 2, 3][..], vec![0.0; 6]));
    let (q, k, v) = (t(&[1, 0, 4]), t(&[1, 3, 4]), t(&[1, 3, 3]));
    let y = T::scaled_dot_product_attention(&q, &k, &v, None, true, None).unwrap();
    assert_eq!(y.dims(), &[1, 0, 3]);
    y.sum().unwrap().backward(None, false).unwrap();
    assert_eq!(k.grad().unwrap().to_vec(), vec![0.0; 12]);
    let x = t(&[0, 4]);
    let w = t(&[4]);
    let y = x.layer_norm(&[4], Some(&w), None, 1e-5).unwrap();
    assert_eq!(y.dims(), &[0, 4]);
    y.sum().unwrap().backward(None, false).unwrap();
    assert_eq!(w.grad().unwrap().to_vec(), vec![0.0; 4]);
    assert_eq!(
        t(&[0, 4, 2])
            .group_norm(2, None, None, 1e-5)
            .unwrap()
            .dims(),
        &[0, 4, 2]
    );
    let (rm, rv) = (T::zeros(&B, [2]), T::ones(&B, [2]));
    let y = t(&[0, 2])
        .batch_norm(Some(&rm), Some(&rv), None, None, true, 0.1, 1e-5)
        .unwrap();
    assert_eq!(y.dims(), &[0, 2]);
    assert_eq!((rm.to_vec(), rv.to_vec()), (vec![0.0; 2], vec![1.0; 2]));
}

#[test]
fn attention_fully_masked_rows_give_zeros() {
    let q = tensor(&[2, 3, 4], 1, -1.0, 1.0).requires_grad().unwrap();
    let k = tensor(&[2, 5, 4], 2, -1.0, 1.0).requires_grad().unwrap();
    let v = tensor(&[2, 5, 3], 3, -1.0, 1.0).requires_grad().unwrap();
    let mut keep = vec![1.0f32; 15];
    keep[5..10].fill(0.0); // query 1 sees no key
    let mask = T::from_vec(&B, keep.clone(), [3, 5]).unwrap();
    let y =
        T::scaled_dot_product_attention(&q, &k, &v, Some(AttentionMask::Bool(&mask)), false, None)
            .unwrap();
    let yv = y.to_vec();
    for b in 0..2 {
        assert!(yv[b * 9 + 3..b * 9 + 6].iter().all(|&x| x == 0.0));
        assert!(yv[b * 9..b * 9 + 3].iter().all(|&x| x != 0.0));
    }
    y.sum().unwrap().backward(None, false).unwrap();
    let gq = q.grad().unwrap().to_vec();
    for b in 0..2 {
        assert!(gq[b * 12 + 4..b * 12 + 8].iter().all(|&x| x == 0.0));
    }
    assert!(gq.iter().all(|x| x.is_finite()));
    // The same with an additive mask of −∞.
    let add = T::from_vec(
        &B,
        keep.iter()
            .map(|&k| if k == 0.0 { f32::NEG_INFINITY } else { 0.0 })
            .collect(),
        [3, 5],
    )
    .unwrap();
    let y2 = T::scaled_dot_product_attention(
        &q,
        &k,
        &v,
        Some(AttentionMask::Additive(&add)),
        false,
        None,
    )
    .unwrap();
    assert_eq!(bits(&y2.to_vec()), bits(&yv));
}

/// Repeated indices add their gradients in f64 in position order, rounded once.
#[test]
fn embedding_accumulates_in_f64() {
    let w = T::zeros(&B, [3, 1]).requires_grad().unwrap();
    let y = T::embedding(&w, &[1, 1, 1, 0], &[4], Some(0)).unwrap();
    assert_eq!(y.dims(), &[4, 1]);
    let g = T::from_vec(&B, vec![1.0, 1e-8, -1.0, 5.0], [4, 1]).unwrap();
    y.backward(Some(&g), false).unwrap();
    // f32 additions in order would give 0 for row 1; row 0 is the padding row.
    assert_eq!(w.grad().unwrap().to_vec(), vec![0.0, 1e-8, 0.0]);
}

#[test]
fn split_and_chunk_are_views_with_pytorchs_sizes() {
    let x = tensor(&[5, 7], 1, -1.0, 1.0);
    let sizes = |v: Vec<T>| -> Vec<usize> {
        assert!(v.iter().all(|p| p.shares_storage(&x)), "pieces are views");
        v.iter().map(|p| p.dims()[1]).collect()
    };
    assert_eq!(sizes(x.split(3, 1).unwrap()), vec![3, 3, 1]);
    assert_eq!(sizes(x.split(7, -1).unwrap()), vec![7]);
    assert_eq!(sizes(x.split(10, 1).unwrap()), vec![7]);
    assert_eq!(sizes(x.split_sizes(&[0, 7, 0], 1).unwrap()), vec![0, 7, 0]);
    assert_eq!(sizes(x.chunk(3, 1).unwrap()), vec![3, 3, 1]);
    assert_eq!(sizes(x.chunk(6, 1).unwrap()), vec![2, 2, 2, 1]);
    assert_eq!(sizes(x.chunk(9, 1).unwrap()), vec![1; 7]);
    let e = T::zeros(&B, [2, 0]);
    assert_eq!(e.chunk(3, 1).unwrap().len(), 3);
    assert_eq!(e.split(0, 1).unwrap().len(), 1);
    assert_eq!(e.split(2, 1).unwrap().len(), 1);
    let pieces = x.split(2, 0).unwrap();
    assert_eq!(pieces[1].to_vec(), x.narrow(0, 2, 2).unwrap().to_vec());
}

// ----- dropout ----------------------------------------------------------------------------

#[test]
fn dropout_statistics_and_reproducibility() {
    let n = 1 << 16;
    let x = T::from_vec(&B, values(n, 1, 0.5, 1.5), [n]).unwrap();
    let xv = x.to_vec();
    for p in [0.1f32, 0.5, 0.9] {
        let mut rng = Philox::new(42);
        let y = x.dropout(p, true, &mut rng).unwrap().to_vec();
        let scale = 1.0 / (1.0 - p);
        let kept: Vec<bool> = y.iter().map(|&v| v != 0.0).collect();
        for (i, (&yv, &k)) in y.iter().zip(&kept).enumerate() {
            if k {
                assert_eq!(yv.to_bits(), (xv[i] * scale).to_bits());
            }
        }
        // The kept fraction, overall and per eighth, within 5 standard deviations.
        let expect = 1.0 - f64::from(p);
        let within = |count: usize, total: usize| {
            let sd = (expect * (1.0 - expect) / total as f64).sqrt();
            ((count as f64 / total as f64) - expect).abs() < 5.0 * sd
        };
        let total = kept.iter().filter(|&&k| k).count();
        assert!(within(total, n), "p = {p}: kept {total} of {n}");
        for part in kept.chunks(n / 8) {
            assert!(within(part.iter().filter(|&&k| k).count(), part.len()));
        }
        // Neighbours are independent: both kept with probability (1 − p)².
        let pairs = kept.windows(2).filter(|w| w[0] && w[1]).count() as f64 / (n - 1) as f64;
        let sd = (expect * expect * (1.0 - expect * expect) / n as f64).sqrt();
        assert!(
            (pairs - expect * expect).abs() < 6.0 * sd,
            "p = {p}: pairs {pairs}"
        );
        // The mean is preserved.
        let (mx, my) = (
            xv.iter().map(|&v| f64::from(v)).sum::<f64>() / n as f64,
            y.iter().map(|&v| f64::from(v)).sum::<f64>() / n as f64,
        );
        assert!((mx - my).abs() < 0.02 * mx, "p = {p}: mean {my} vs {mx}");
        // The same generator state gives the same mask; the next call another one.
        let again = x.dropout(p, true, &mut Philox::new(42)).unwrap().to_vec();
        assert_eq!(bits(&again), bits(&y));
        let next = x.dropout(p, true, &mut rng).unwrap().to_vec();
        assert_ne!(bits(&next), bits(&y));
        // Exactly one u64 was drawn per call.
        let mut expected = Philox::new(42);
        expected.next_u64();
        expected.next_u64();
        assert_eq!(rng.next_u32(), expected.next_u32());
    }
    // Outside training: the input itself, and the generator is not touched.
    let mut rng = Philox::new(5);
    let y = x.dropout(0.5, false, &mut rng).unwrap();
    assert!(y.shares_storage(&x));
    assert_eq!(rng, Philox::new(5));
    // p = 0 keeps everything, p = 1 drops everything.
    let y0 = x.dropout(0.0, true, &mut Philox::new(1)).unwrap().to_vec();
    assert_eq!(bits(&y0), bits(&xv));
    let y1 = x.dropout(1.0, true, &mut Philox::new(1)).unwrap().to_vec();
    assert!(y1.iter().all(|&v| v == 0.0));
}

/// The mask depends on the row-major element index only: not on the layout, the
/// backend, the ISA path or the thread count.
#[test]
fn dropout_mask_is_independent_of_layout_backend_and_threads() {
    let x = tensor(&[37, 29], 3, -1.0, 1.0);
    let xt = x.t().unwrap();
    let a = xt.dropout(0.4, true, &mut Philox::new(9)).unwrap().to_vec();
    let b = xt
        .contiguous()
        .dropout(0.4, true, &mut Philox::new(9))
        .unwrap()
        .to_vec();
    assert_eq!(bits(&a), bits(&b));
    for isa in Isa::ALL {
        if !isa.is_supported(ComputeMode::Exact) {
            continue;
        }
        for threads in [1, 3, 8] {
            let be = ExactBackend::with_isa(isa, threads).unwrap();
            let xe = Tensor::from_vec(&be, x.to_vec(), [37, 29])
                .unwrap()
                .t()
                .unwrap();
            let c = xe.dropout(0.4, true, &mut Philox::new(9)).unwrap().to_vec();
            assert_eq!(bits(&c), bits(&a), "exact/{isa}/{threads}t");
        }
    }
}

// ----- errors -----------------------------------------------------------------------------

/// `f` must return an `Err` (not panic) whose message mentions every needle.
#[track_caller]
fn expect_err<R: std::fmt::Debug>(what: &str, f: impl FnOnce() -> Result<R>, needles: &[&str]) {
    let r = catch_unwind(AssertUnwindSafe(f))
        .unwrap_or_else(|_| panic!("{what}: panicked instead of returning Err"));
    match r {
        Ok(v) => panic!("{what}: expected an error, got {v:?}"),
        Err(e) => {
            let msg = e.to_string();
            for n in needles {
                assert!(
                    msg.contains(n),
                    "{what}: the message `{msg}` does not mention `{n}`"
                );
            }
        }
    }
}

#[test]
fn normalisation_errors() {
    let x = tensor(&[2, 3, 4], 1, -1.0, 1.0);
    let c3 = tensor(&[3], 2, 0.5, 1.0);
    let c2 = tensor(&[2], 3, 0.5, 1.0);
    let bn = "batch_norm";
    expect_err(
        "bn 1-D",
        || tensor(&[3], 1, 0.0, 1.0).batch_norm(None, None, None, None, true, 0.1, 1e-5),
        &[bn, "[3]"],
    );
    expect_err(
        "bn weight",
        || x.batch_norm(None, None, Some(&c2), None, true, 0.1, 1e-5),
        &[bn, "weight", "[2]", "[3]"],
    );
    expect_err(
        "bn bias",
        || x.batch_norm(None, None, None, Some(&c2), true, 0.1, 1e-5),
        &[bn, "bias", "[2]"],
    );
    expect_err(
        "bn running_mean",
        || x.batch_norm(Some(&c2), Some(&c3), None, None, true, 0.1, 1e-5),
        &[bn, "running_mean", "[2]"],
    );
    expect_err(
        "bn running_var",
        || x.batch_norm(Some(&c3), Some(&c2), None, None, false, 0.1, 1e-5),
        &[bn, "running_var", "[2]"],
    );
    expect_err(
        "bn eval without stats",
        || x.batch_norm(None, None, None, None, false, 0.1, 1e-5),
        &[bn, "evaluation"],
    );
    expect_err(
        "bn one value",
        || tensor(&[1, 3, 1], 1, 0.0, 1.0).batch_norm(None, None, None, None, true, 0.1, 1e-5),
        &[bn, "more than 1 value", "[1, 3, 1]"],
    );
    let rg = c3.copy_contiguous().requires_grad().unwrap();
    expect_err(
        "bn stats with grad",
        || x.batch_norm(Some(&rg), None, None, None, true, 0.1, 1e-5),
        &[bn, "running_mean"],
    );
    let ln = "layer_norm";
    expect_err(
        "ln empty",
        || x.layer_norm(&[], None, None, 1e-5),
        &[ln, "normalized_shape"],
    );
    expect_err(
        "ln trailing",
        || x.layer_norm(&[3], None, None, 1e-5),
        &[ln, "[2, 3, 4]", "[3]"],
    );
    expect_err(
        "ln too long",
        || x.layer_norm(&[1, 2, 3, 4], None, None, 1e-5),
        &[ln, "[1, 2, 3, 4]"],
    );
    expect_err(
        "ln weight",
        || x.layer_norm(&[3, 4], Some(&tensor(&[4, 3], 1, 0.0, 1.0)), None, 1e-5),
        &[ln, "weight", "[4, 3]", "[3, 4]"],
    );
    expect_err(
        "ln bias",
        || x.layer_norm(&[4], None, Some(&c3), 1e-5),
        &[ln, "bias", "[3]"],
    );
    let gn = "group_norm";
    let x6 = tensor(&[2, 6, 3], 1, -1.0, 1.0);
    expect_err(
        "gn divides",
        || x6.group_norm(4, None, None, 1e-5),
        &[gn, "num_groups = 4", "6"],
    );
    expect_err(
        "gn zero groups",
        || x6.group_norm(0, None, None, 1e-5),
        &[gn, "num_groups = 0"],
    );
    expect_err(
        "gn 1-D",
        || tensor(&[6], 1, 0.0, 1.0).group_norm(3, None, None, 1e-5),
        &[gn, "[6]"],
    );
    expect_err(
        "gn weight",
        || x6.group_norm(3, Some(&c3), None, 1e-5),
        &[gn, "weight", "[3]", "[6]"],
    );
}

#[test]
fn dropout_embedding_index_and_split_errors() {
    let x = tensor(&[4, 3], 1, -1.0, 1.0);
    for p in [-0.1f32, 1.5, f32::NAN] {
        expect_err(
            "dropout p",
            || x.dropout(p, true, &mut Philox::new(1)),
            &["dropout", "probability"],
        );
        expect_err(
            "dropout p (eval)",
            || x.dropout(p, false, &mut Philox::new(1)),
            &["dropout"],
        );
    }
    let em = "embedding";
    expect_err(
        "index too large",
        || T::embedding(&x, &[0, 4], &[2], None),
        &[em, "index 4", "position 1", "size 4"],
    );
    expect_err(
        "negative index",
        || T::embedding(&x, &[-1], &[1], None),
        &[em, "index -1"],
    );
    expect_err(
        "indices shape",
        || T::embedding(&x, &[0, 1, 2], &[2, 2], None),
        &[em, "3 indices", "[2, 2]"],
    );
    expect_err(
        "padding_idx",
        || T::embedding(&x, &[0], &[1], Some(4)),
        &[em, "padding_idx", "4"],
    );
    expect_err(
        "padding_idx negative",
        || T::embedding(&x, &[0], &[1], Some(-5)),
        &[em, "padding_idx", "-5"],
    );
    expect_err(
        "1-D weight",
        || T::embedding(&tensor(&[4], 1, 0.0, 1.0), &[0], &[1], None),
        &[em, "2-D", "[4]"],
    );
    let is = "index_select";
    expect_err(
        "index_select range",
        || x.index_select(1, &[0, 3]),
        &[is, "index 3", "size 3"],
    );
    expect_err(
        "index_select negative",
        || x.index_select(0, &[-1]),
        &[is, "index -1"],
    );
    expect_err(
        "index_select dim",
        || x.index_select(2, &[0]),
        &[is, "2", "rank 2"],
    );
    let s = T::scalar(&B, 1.0);
    expect_err(
        "index_select 0-d",
        || s.index_select(0, &[0, 0]),
        &[is, "one index"],
    );
    expect_err(
        "index_select 0-d range",
        || s.index_select(0, &[1]),
        &[is, "index 1"],
    );
    expect_err(
        "split 0",
        || x.split(0, 0),
        &["split", "split_size", "[4, 3]"],
    );
    expect_err("split dim", || x.split(1, 2), &["split", "2", "rank 2"]);
    expect_err("split 0-d", || s.split(1, 0), &["split"]);
    expect_err(
        "split_sizes sum",
        || x.split_sizes(&[1, 1], 0),
        &["split_sizes", "[1, 1]", "4"],
    );
    expect_err(
        "split_sizes overflow",
        || x.split_sizes(&[usize::MAX, 5], 0),
        &["split_sizes"],
    );
    expect_err("chunk 0", || x.chunk(0, 0), &["chunk", "chunks"]);
    expect_err("chunk dim", || x.chunk(2, -3), &["chunk", "-3"]);
}

#[test]
fn attention_errors() {
    let op = "scaled_dot_product_attention";
    let sdpa = |q: &[usize],
                k: &[usize],
                v: &[usize],
                mask: Option<AttentionMask<'_, ScalarRefBackend>>,
                causal: bool| {
        let (q, k, v) = (
            tensor(q, 1, -1.0, 1.0),
            tensor(k, 2, -1.0, 1.0),
            tensor(v, 3, -1.0, 1.0),
        );
        T::scaled_dot_product_attention(&q, &k, &v, mask, causal, None)
    };
    expect_err(
        "E mismatch",
        || sdpa(&[2, 3, 4], &[2, 5, 3], &[2, 5, 2], None, false),
        &[op, "[2, 3, 4]", "[2, 5, 3]", "embedding"],
    );
    expect_err(
        "S mismatch",
        || sdpa(&[2, 3, 4], &[2, 5, 4], &[2, 6, 2], None, false),
        &[op, "[2, 5, 4]", "[2, 6, 2]", "sequence"],
    );
    expect_err(
        "batch mismatch",
        || sdpa(&[2, 3, 4], &[3, 5, 4], &[3, 5, 2], None, false),
        &[op, "[2, 3, 4]", "[3, 5, 4]", "batch"],
    );
    expect_err(
        "rank 1",
        || sdpa(&[4], &[5, 4], &[5, 2], None, false),
        &[op, "[4]", "2 dimensions"],
    );
    let m_bad = tensor(&[3, 4], 4, 0.0, 1.0);
    expect_err(
        "mask shape",
        || {
            sdpa(
                &[2, 3, 4],
                &[2, 5, 4],
                &[2, 5, 2],
                Some(AttentionMask::Bool(&m_bad)),
                false,
            )
        },
        &[op, "mask", "[3, 4]", "[2, 3, 5]"],
    );
    let m_big = tensor(&[2, 2, 3, 5], 4, 0.0, 1.0);
    expect_err(
        "mask rank",
        || {
            sdpa(
                &[2, 3, 4],
                &[2, 5, 4],
                &[2, 5, 2],
                Some(AttentionMask::Additive(&m_big)),
                false,
            )
        },
        &[op, "mask", "[2, 2, 3, 5]"],
    );
    let m_ok = tensor(&[3, 5], 4, 0.0, 1.0);
    expect_err(
        "mask and causal",
        || {
            sdpa(
                &[2, 3, 4],
                &[2, 5, 4],
                &[2, 5, 2],
                Some(AttentionMask::Bool(&m_ok)),
                true,
            )
        },
        &[op, "is_causal"],
    );
    assert!(sdpa(
        &[2, 3, 4],
        &[2, 5, 4],
        &[2, 5, 2],
        Some(AttentionMask::Bool(&m_ok)),
        false
    )
    .is_ok());
}
