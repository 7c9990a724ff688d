//! Normalisation (batch_norm, layer_norm, group_norm): gradient checks (the check of
//! `exactgrad_autograd::gradcheck`) on random shapes with strided, transposed and
//! permuted views, with and without affine parameters; the order of
//! `docs/arithmetic.md` §5 checked bit for bit; accuracy for large offsets; the
//! running-statistics update (exponential and cumulative); and the errors of bad
//! arguments.

use exactgrad::prelude::*;
use proptest::prelude::*;

use super::common::*;

/// Values at least 0.3 apart: every normalisation group has a healthy variance.
fn spread(shape: &[usize], seed: u64) -> T {
    permuted_grid(shape, seed, 0.3)
}

/// Optional parameters: the list of inputs after the first, and which ones exist.
fn params(weight: bool, bias: bool, shape: &[usize], seed: u64) -> (Vec<T>, bool, bool) {
    let mut v = Vec::new();
    if weight {
        v.push(uniform(shape, seed ^ 0x11, 0.5, 1.5));
    }
    if bias {
        v.push(uniform(shape, seed ^ 0x22, -1.0, 1.0));
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
        let rm = uniform(&[c], seed ^ 3, -0.5, 0.5);
        let rv = uniform(&[c], seed ^ 4, 0.5, 2.0);
        check(&format!("batch_norm {shape:?} {view:?} training={training} w={weight} b={bias}"), &inputs, |v| {
            let (w, b) = wb(v, weight, bias);
            // Fresh running statistics per call: their update must not leak into y.
            let (rm, rv) = (rm.copy_contiguous().unwrap(), rv.copy_contiguous().unwrap());
            apply_view(view, &v[0])?.batch_norm(BatchNormOptions {
                running_mean: Some(&rm),
                running_var: Some(&rv),
                weight: w,
                bias: b,
                training,
                ..BatchNormOptions::default()
            })
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
            apply_view(view, &v[0])?.layer_norm(&normalized, LayerNormOptions { weight: w, bias: b, ..LayerNormOptions::default() })
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
            apply_view(view, &v[0])?.group_norm(groups, GroupNormOptions { weight: w, bias: b, ..GroupNormOptions::default() })
        });
    }
}

// ----- the documented order, bit for bit --------------------------------------------------

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
        let y = x.layer_norm(&[m], LayerNormOptions::default().affine(&w, &b)).unwrap();
        y.backward_with(BackwardOptions::default().gradient(&T::from_slice(&B, &gv, [rows, m]).unwrap())).unwrap();
        let (ry, rdx, rdw, rdb) = layer_norm_reference(&xv, m, &wv, &bv, &gv, 1e-5);
        prop_assert_eq!(bits(&y.to_vec().unwrap()), bits(&ry));
        prop_assert_eq!(bits(&x.grad().unwrap().to_vec().unwrap()), bits(&rdx));
        prop_assert_eq!(bits(&w.grad().unwrap().to_vec().unwrap()), bits(&rdw));
        prop_assert_eq!(bits(&b.grad().unwrap().to_vec().unwrap()), bits(&rdb));
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
            .layer_norm(&[m], LayerNormOptions::default())
            .unwrap()
            .to_vec()
            .unwrap();
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
    let x = uniform(&[4, 1], 1, -3.0, 3.0).requires_grad().unwrap();
    let w = uniform(&[1], 2, 0.5, 1.5);
    let b = uniform(&[1], 3, -1.0, 1.0);
    let y = x
        .layer_norm(&[1], LayerNormOptions::default().affine(&w, &b))
        .unwrap();
    assert_eq!(y.to_vec().unwrap(), vec![b.to_vec().unwrap()[0]; 4]);
    y.backward_with(BackwardOptions::default().gradient(&uniform(&[4, 1], 4, -1.0, 1.0)))
        .unwrap();
    assert!(x
        .grad()
        .unwrap()
        .to_vec()
        .unwrap()
        .iter()
        .all(|&g| g == 0.0));
    let x = uniform(&[2, 4], 5, -3.0, 3.0);
    let b = uniform(&[4], 6, -1.0, 1.0);
    let y = x
        .group_norm(
            4,
            GroupNormOptions::default().affine(&uniform(&[4], 7, 0.5, 1.5), &b),
        )
        .unwrap();
    assert_eq!(
        y.to_vec().unwrap(),
        [b.to_vec().unwrap(), b.to_vec().unwrap()].concat()
    );
}

#[test]
fn batch_norm_running_statistics() {
    let x = spread(&[4, 3, 5], 11).requires_grad().unwrap();
    let rm = uniform(&[3], 12, -0.5, 0.5);
    let rv = uniform(&[3], 13, 0.5, 2.0);
    let (rm0, rv0) = (rm.to_vec().unwrap(), rv.to_vec().unwrap());
    let (v0, v1) = (rm.version(), rv.version());
    let momentum = 0.25f32;
    let y = x
        .batch_norm(BatchNormOptions {
            running_mean: Some(&rm),
            running_var: Some(&rv),
            training: true,
            momentum: Momentum::Exponential(momentum),
            ..BatchNormOptions::default()
        })
        .unwrap();
    assert!(
        rm.version() > v0 && rv.version() > v1,
        "in-place update bumps the version"
    );
    let xv = x.to_vec().unwrap();
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
        assert!((f64::from(rm.to_vec().unwrap()[c]) - want_m).abs() < 1e-6);
        assert!((f64::from(rv.to_vec().unwrap()[c]) - want_v).abs() < 1e-5 * want_v);
        // The output is normalised with the biased variance.
        let yv = y.to_vec().unwrap();
        let out: Vec<f64> = (0..4)
            .flat_map(|n| (0..5).map(move |s| (n, s)))
            .map(|(n, s)| f64::from(yv[(n * 3 + c) * 5 + s]))
            .collect();
        let var_out = out.iter().map(|v| v * v).sum::<f64>() / 20.0;
        assert!((var_out - ss / 20.0 / (ss / 20.0 + 1e-5)).abs() < 1e-5);
    }
    // The update is not recorded: backward works and the statistics get no gradient.
    y.sum().unwrap().backward().unwrap();
    assert!(rm.grad().is_none() && rv.grad().is_none());
    // Evaluation normalises with the running statistics and leaves them alone.
    let (m1, v1) = (rm.to_vec().unwrap(), rv.to_vec().unwrap());
    let ver = rm.version();
    let y = x
        .detach()
        .batch_norm(BatchNormOptions {
            running_mean: Some(&rm),
            running_var: Some(&rv),
            momentum: Momentum::Exponential(momentum),
            ..BatchNormOptions::default()
        })
        .unwrap()
        .to_vec()
        .unwrap();
    assert_eq!(rm.version(), ver);
    assert_eq!(
        (rm.to_vec().unwrap(), rv.to_vec().unwrap()),
        (m1.clone(), v1.clone())
    );
    for (i, &yv) in y.iter().enumerate() {
        let c = (i / 5) % 3;
        let want = (xv[i] - m1[c]) * (1.0 / (v1[c] + 1e-5).sqrt());
        assert_eq!(yv.to_bits(), want.to_bits());
    }
    // Training without running statistics is allowed.
    assert!(x
        .batch_norm(BatchNormOptions {
            training: true,
            ..BatchNormOptions::default()
        })
        .is_ok());
}

/// Empty batches and groups: results of PyTorch's shapes, no panic.
#[test]
fn empty_shapes() {
    let t = |s: &[usize]| uniform(s, 1, -1.0, 1.0).requires_grad().unwrap();
    let x = t(&[0, 4]);
    let w = t(&[4]);
    let opts = LayerNormOptions {
        weight: Some(&w),
        ..LayerNormOptions::default()
    };
    let y = x.layer_norm(&[4], opts).unwrap();
    assert_eq!(y.dims(), &[0, 4]);
    y.sum().unwrap().backward().unwrap();
    assert_eq!(w.grad().unwrap().to_vec().unwrap(), vec![0.0; 4]);
    assert_eq!(
        t(&[0, 4, 2])
            .group_norm(2, GroupNormOptions::default())
            .unwrap()
            .dims(),
        &[0, 4, 2]
    );
    let (rm, rv) = (T::zeros(&B, [2]).unwrap(), T::ones(&B, [2]).unwrap());
    let y = t(&[0, 2])
        .batch_norm(BatchNormOptions::training().running_stats(&rm, &rv))
        .unwrap();
    assert_eq!(y.dims(), &[0, 2]);
    assert_eq!(
        (rm.to_vec().unwrap(), rv.to_vec().unwrap()),
        (vec![0.0; 2], vec![1.0; 2])
    );
}

/// PyTorch's `momentum=None`: the factor of batch `n` is `1/n` rounded from f64, so the
/// running statistics are the plain average of the batch statistics.
#[test]
fn batch_norm_cumulative_average() {
    let batches: Vec<T> = (0..3).map(|i| spread(&[4, 2, 3], 20 + i)).collect();
    let (rm, rv) = (T::zeros(&B, [2]).unwrap(), T::ones(&B, [2]).unwrap());
    let (em, ev) = (T::zeros(&B, [2]).unwrap(), T::ones(&B, [2]).unwrap());
    for (i, x) in batches.iter().enumerate() {
        let n = i as u64 + 1;
        let cumulative = Momentum::CumulativeAverage {
            num_batches_tracked: n,
        };
        let opts = BatchNormOptions::training()
            .running_stats(&rm, &rv)
            .momentum(cumulative);
        x.batch_norm(opts).unwrap();
        // The same bits as the exponential update with the factor 1/n.
        let factor = (1.0 / n as f64) as f32;
        assert_eq!(cumulative.factor().unwrap(), factor);
        let opts = BatchNormOptions::training()
            .running_stats(&em, &ev)
            .momentum(Momentum::Exponential(factor));
        x.batch_norm(opts).unwrap();
        assert_eq!(bits(&rm.to_vec().unwrap()), bits(&em.to_vec().unwrap()));
        assert_eq!(bits(&rv.to_vec().unwrap()), bits(&ev.to_vec().unwrap()));
    }
    // After three batches: the average of the three batch means (f64 reference).
    for c in 0..2 {
        let want = batches
            .iter()
            .map(|x| {
                let v = x.to_vec().unwrap();
                (0..4)
                    .flat_map(|n| (0..3).map(move |s| (n, s)))
                    .map(|(n, s)| f64::from(v[(n * 2 + c) * 3 + s]))
                    .sum::<f64>()
                    / 12.0
            })
            .sum::<f64>()
            / 3.0;
        assert!(
            (f64::from(rm.to_vec().unwrap()[c]) - want).abs() < 1e-6,
            "channel {c}"
        );
    }
    // The first batch replaces the initial statistics whatever they were.
    let (a, b) = (
        T::full(&B, [2], 7.0).unwrap(),
        T::full(&B, [2], 9.0).unwrap(),
    );
    let first = Momentum::CumulativeAverage {
        num_batches_tracked: 1,
    };
    batches[0]
        .batch_norm(
            BatchNormOptions::training()
                .running_stats(&a, &b)
                .momentum(first),
        )
        .unwrap();
    let (c, d) = (T::zeros(&B, [2]).unwrap(), T::ones(&B, [2]).unwrap());
    batches[0]
        .batch_norm(
            BatchNormOptions::training()
                .running_stats(&c, &d)
                .momentum(first),
        )
        .unwrap();
    assert_eq!(bits(&a.to_vec().unwrap()), bits(&c.to_vec().unwrap()));
    assert_eq!(bits(&b.to_vec().unwrap()), bits(&d.to_vec().unwrap()));
}

/// The builders set the same fields as the struct literal.
#[test]
fn option_builders_name_their_fields() {
    let (m, v, w, b) = (
        uniform(&[3], 1, -1.0, 1.0),
        uniform(&[3], 2, 0.5, 1.5),
        uniform(&[3], 3, 0.5, 1.5),
        uniform(&[3], 4, -1.0, 1.0),
    );
    let built = BatchNormOptions::training()
        .running_stats(&m, &v)
        .affine(&w, &b)
        .momentum(Momentum::Exponential(0.3))
        .eps(1e-3);
    assert!(built.training);
    assert!(built.running_mean.unwrap().shares_storage(&m));
    assert!(built.running_var.unwrap().shares_storage(&v));
    assert!(built.weight.unwrap().shares_storage(&w));
    assert!(built.bias.unwrap().shares_storage(&b));
    assert_eq!(
        (built.momentum, built.eps),
        (Momentum::Exponential(0.3), 1e-3)
    );
    let eval = BatchNormOptions::evaluation(&m, &v);
    assert!(!eval.training && eval.running_mean.unwrap().shares_storage(&m));
    // PyTorch's defaults.
    let d = BatchNormOptions::<ScalarRefBackend>::default();
    assert!(!d.training && d.running_mean.is_none() && d.weight.is_none());
    assert_eq!((d.momentum, d.eps), (Momentum::Exponential(0.1), 1e-5));
    assert_eq!(LayerNormOptions::<ScalarRefBackend>::default().eps, 1e-5);
    assert_eq!(GroupNormOptions::<ScalarRefBackend>::default().eps, 1e-5);
    let ln = LayerNormOptions::default().affine(&w, &b).eps(1e-6);
    assert!(ln.weight.unwrap().shares_storage(&w) && ln.bias.unwrap().shares_storage(&b));
    assert_eq!(ln.eps, 1e-6);
    let gn = GroupNormOptions::default().affine(&w, &b).eps(1e-6);
    assert!(gn.weight.unwrap().shares_storage(&w) && gn.bias.unwrap().shares_storage(&b));
    assert!(format!("{built:?}").contains("running_mean"));
}

// ----- errors -----------------------------------------------------------------------------

#[test]
fn normalisation_errors() {
    let x = uniform(&[2, 3, 4], 1, -1.0, 1.0);
    let c3 = uniform(&[3], 2, 0.5, 1.0);
    let c2 = uniform(&[2], 3, 0.5, 1.0);
    let bn = "batch_norm";
    expect_err(
        "bn 1-D",
        || {
            uniform(&[3], 1, 0.0, 1.0).batch_norm(BatchNormOptions {
                training: true,
                ..BatchNormOptions::default()
            })
        },
        &[bn, "[3]"],
    );
    expect_err(
        "bn weight",
        || {
            x.batch_norm(BatchNormOptions {
                weight: Some(&c2),
                training: true,
                ..BatchNormOptions::default()
            })
        },
        &[bn, "weight", "[2]", "[3]"],
    );
    expect_err(
        "bn bias",
        || {
            x.batch_norm(BatchNormOptions {
                bias: Some(&c2),
                training: true,
                ..BatchNormOptions::default()
            })
        },
        &[bn, "bias", "[2]"],
    );
    expect_err(
        "bn running_mean",
        || {
            x.batch_norm(BatchNormOptions {
                running_mean: Some(&c2),
                running_var: Some(&c3),
                training: true,
                ..BatchNormOptions::default()
            })
        },
        &[bn, "running_mean", "[2]"],
    );
    expect_err(
        "bn running_var",
        || {
            x.batch_norm(BatchNormOptions {
                running_mean: Some(&c3),
                running_var: Some(&c2),
                ..BatchNormOptions::default()
            })
        },
        &[bn, "running_var", "[2]"],
    );
    expect_err(
        "bn eval without stats",
        || x.batch_norm(BatchNormOptions::default()),
        &[bn, "evaluation"],
    );
    expect_err(
        "bn one value",
        || {
            uniform(&[1, 3, 1], 1, 0.0, 1.0).batch_norm(BatchNormOptions {
                training: true,
                ..BatchNormOptions::default()
            })
        },
        &[bn, "more than 1 value", "[1, 3, 1]"],
    );
    let rg = c3.copy_contiguous().unwrap().requires_grad().unwrap();
    expect_err(
        "bn stats with grad",
        || {
            x.batch_norm(BatchNormOptions {
                running_mean: Some(&rg),
                training: true,
                ..BatchNormOptions::default()
            })
        },
        &[bn, "running_mean"],
    );
    let zero = Momentum::CumulativeAverage {
        num_batches_tracked: 0,
    };
    expect_err(
        "bn cumulative average over 0 batches",
        || x.batch_norm(BatchNormOptions::training().momentum(zero)),
        &[bn, "momentum", "num_batches_tracked", "got 0"],
    );
    expect_err("Momentum::factor", || zero.factor(), &[bn, "momentum"]);
    let ln = "layer_norm";
    expect_err(
        "ln empty",
        || x.layer_norm(&[], LayerNormOptions::default()),
        &[ln, "normalized_shape"],
    );
    expect_err(
        "ln trailing",
        || x.layer_norm(&[3], LayerNormOptions::default()),
        &[ln, "[2, 3, 4]", "[3]"],
    );
    expect_err(
        "ln too long",
        || x.layer_norm(&[1, 2, 3, 4], LayerNormOptions::default()),
        &[ln, "[1, 2, 3, 4]"],
    );
    expect_err(
        "ln weight",
        || {
            x.layer_norm(
                &[3, 4],
                LayerNormOptions {
                    weight: Some(&uniform(&[4, 3], 1, 0.0, 1.0)),
                    ..LayerNormOptions::default()
                },
            )
        },
        &[ln, "weight", "[4, 3]", "[3, 4]"],
    );
    expect_err(
        "ln bias",
        || {
            x.layer_norm(
                &[4],
                LayerNormOptions {
                    bias: Some(&c3),
                    ..LayerNormOptions::default()
                },
            )
        },
        &[ln, "bias", "[3]"],
    );
    let gn = "group_norm";
    let x6 = uniform(&[2, 6, 3], 1, -1.0, 1.0);
    expect_err(
        "gn divides",
        || x6.group_norm(4, GroupNormOptions::default()),
        &[gn, "num_groups = 4", "6"],
    );
    expect_err(
        "gn zero groups",
        || x6.group_norm(0, GroupNormOptions::default()),
        &[gn, "num_groups = 0"],
    );
    expect_err(
        "gn 1-D",
        || uniform(&[6], 1, 0.0, 1.0).group_norm(3, GroupNormOptions::default()),
        &[gn, "[6]"],
    );
    expect_err(
        "gn weight",
        || {
            x6.group_norm(
                3,
                GroupNormOptions {
                    weight: Some(&c3),
                    ..GroupNormOptions::default()
                },
            )
        },
        &[gn, "weight", "[3]", "[6]"],
    );
}
