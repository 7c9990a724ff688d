//! Scaled dot-product attention: gradient checks (the check of
//! `exactgrad_autograd::gradcheck`) on random shapes with transposed views, masks of
//! every kind, causal attention and broadcast batch dimensions; the forward equal bit
//! for bit to its composition (`docs/arithmetic.md` §5); fully masked rows; empty
//! sequences; and the errors of bad arguments.

use exactgrad::prelude::*;
use proptest::prelude::*;

use super::common::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn attention_random(
        batch in prop::collection::vec(1usize..3, 0..3), l in 1usize..5, s in 1usize..5,
        e in 1usize..5, ev in 1usize..4, mask_kind in 0u8..4, causal in any::<bool>(),
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
            if transposed { uniform(&shape(b, a), sd, -1.0, 1.0) } else { uniform(&shape(a, b), sd, -1.0, 1.0) }
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
            inputs.push(uniform(&mask_shape, seed ^ 4, -1.0, 1.0));
        }
        check(&format!("sdpa batch={batch:?} L={l} S={s} E={e} Ev={ev} mask={mask_kind} causal={causal} scale={scale:?} transposed={transposed}"), &inputs, |v| {
            let mask = match mask_kind {
                0 => None,
                1 => Some(AttentionMask::Allow(&bool_mask)),
                2 => Some(AttentionMask::Additive(&v[3])),
                _ => Some(AttentionMask::Block(&bool_mask)),
            };
            view(&v[0])?.scaled_dot_product_attention(&view(&v[1])?, &view(&v[2])?, AttentionOptions { mask, is_causal: causal, scale })
        });
    }

    #[test]
    fn attention_broadcast_batch(l in 1usize..4, s in 1usize..4, e in 1usize..4, seed in any::<u64>()) {
        // query [2, 3, L, E], key [1, 3, S, E], value [S, E] (rank broadcast).
        let inputs = vec![
            uniform(&[2, 3, l, e], seed, -1.0, 1.0),
            uniform(&[1, 3, s, e], seed ^ 1, -1.0, 1.0),
            uniform(&[s, e], seed ^ 2, -1.0, 1.0),
        ];
        check("sdpa broadcast batch", &inputs, |v| {
            v[0].scaled_dot_product_attention(&v[1], &v[2], AttentionOptions::default())
        });
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, failure_persistence: None, ..ProptestConfig::default() })]

    /// The fused attention's forward equals, bit for bit, the same steps written with the
    /// recorded operators (matmul, mul_scalar, add/where, softmax, matmul); its gradients
    /// agree with theirs to rounding.
    #[test]
    fn attention_equals_its_composition(
        l in 1usize..6, s in 1usize..6, e in 1usize..6, ev in 1usize..5, kind in 0u8..4, seed in any::<u64>(),
    ) {
        let q = uniform(&[2, l, e], seed, -2.0, 2.0).requires_grad().unwrap();
        let k = uniform(&[2, s, e], seed ^ 1, -2.0, 2.0).requires_grad().unwrap();
        let v = uniform(&[2, s, ev], seed ^ 2, -2.0, 2.0).requires_grad().unwrap();
        let scale = 0.43f32;
        // Every row keeps its first key, so no row is fully masked.
        let keep: Vec<f32> = values(l * s, seed ^ 3, 0.0, 1.0)
            .iter()
            .enumerate()
            .map(|(i, &u)| if i % s == 0 || u < 0.6 { 1.0 } else { 0.0 })
            .collect();
        let bool_mask = T::from_vec(&B, keep, [l, s]).unwrap();
        let add_mask = uniform(&[1, l, s], seed ^ 4, -1.0, 1.0);
        let causal_mask = T::from_vec(&B, (0..l * s).map(|i| if i % s <= i / s { 1.0 } else { 0.0 }).collect(), [l, s]).unwrap();
        let (mask, causal) = match kind {
            0 => (None, false),
            1 => (Some(AttentionMask::Allow(&bool_mask)), false),
            2 => (Some(AttentionMask::Additive(&add_mask)), false),
            _ => (None, true),
        };
        let fused = q.scaled_dot_product_attention(&k, &v, AttentionOptions { mask, is_causal: causal, scale: Some(scale) }).unwrap();
        let scores = q.matmul(&k.transpose(-1, -2).unwrap()).unwrap().mul_scalar(scale).unwrap();
        let ninf = T::scalar(&B, f32::NEG_INFINITY).unwrap();
        let scores = match kind {
            0 => scores,
            1 => T::where_cond(&bool_mask, &scores, &ninf).unwrap(),
            2 => scores.add(&add_mask).unwrap(),
            _ => T::where_cond(&causal_mask, &scores, &ninf).unwrap(),
        };
        let composed = scores.softmax(-1).unwrap().matmul(&v).unwrap();
        prop_assert_eq!(bits(&fused.to_vec().unwrap()), bits(&composed.to_vec().unwrap()));
        let g = uniform(&[2, l, ev], seed ^ 5, -1.0, 1.0);
        let grads = |y: &T| -> Vec<Vec<f32>> {
            for t in [&q, &k, &v] {
                t.clear_grad();
            }
            y.backward_with(BackwardOptions::default().gradient(&g)).unwrap();
            [&q, &k, &v].iter().map(|t| t.grad().unwrap().to_vec().unwrap()).collect()
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

// ----- special cases ----------------------------------------------------------------------

/// Empty sequences: results of PyTorch's shapes, no panic.
#[test]
fn empty_shapes() {
    let t = |s: &[usize]| uniform(s, 1, -1.0, 1.0).requires_grad().unwrap();
    let y = t(&[1, 2, 4])
        .scaled_dot_product_attention(&t(&[1, 0, 4]), &t(&[1, 0, 3]), AttentionOptions::default())
        .unwrap();
    assert_eq!(
        (y.dims(), y.to_vec().unwrap()),
        (&[1usize, 2, 3][..], vec![0.0; 6])
    );
    let (q, k, v) = (t(&[1, 0, 4]), t(&[1, 3, 4]), t(&[1, 3, 3]));
    let y = q
        .scaled_dot_product_attention(&k, &v, AttentionOptions::causal())
        .unwrap();
    assert_eq!(y.dims(), &[1, 0, 3]);
    y.sum().unwrap().backward().unwrap();
    assert_eq!(k.grad().unwrap().to_vec().unwrap(), vec![0.0; 12]);
}

/// `Allow(m)` and `Block(1 − m)` are the same mask; the same tensor read as `Allow` and
/// as `Block` selects complementary keys.
#[test]
fn allow_and_block_are_complements() {
    let q = uniform(&[2, 3, 4], 1, -1.0, 1.0);
    let k = uniform(&[2, 5, 4], 2, -1.0, 1.0);
    let v = uniform(&[2, 5, 3], 3, -1.0, 1.0);
    let keep: Vec<f32> = values(15, 4, 0.0, 1.0)
        .iter()
        .enumerate()
        .map(|(i, &u)| if i % 5 == 0 || u < 0.5 { 1.0 } else { 0.0 })
        .collect();
    // Every row also drops one key, so that both readings leave a key in every row.
    let keep: Vec<f32> = keep
        .iter()
        .enumerate()
        .map(|(i, &k)| if i % 5 == 4 { 0.0 } else { k })
        .collect();
    let allow = T::from_vec(&B, keep.clone(), [3, 5]).unwrap();
    let block = T::from_vec(&B, keep.iter().map(|&k| 1.0 - k).collect(), [3, 5]).unwrap();
    let run = |m: AttentionMask<'_, ScalarRefBackend>| {
        q.scaled_dot_product_attention(&k, &v, AttentionOptions::masked(m))
            .unwrap()
            .to_vec()
            .unwrap()
    };
    let a = run(AttentionMask::Allow(&allow));
    assert_eq!(bits(&a), bits(&run(AttentionMask::Block(&block))));
    let flipped = run(AttentionMask::Block(&allow));
    assert_eq!(bits(&flipped), bits(&run(AttentionMask::Allow(&block))));
    assert_ne!(bits(&a), bits(&flipped));
    // Any non-zero value counts as one.
    let allow2 = T::from_vec(&B, keep.iter().map(|&k| k * -3.5).collect(), [3, 5]).unwrap();
    assert_eq!(bits(&a), bits(&run(AttentionMask::Allow(&allow2))));
    let opts = AttentionOptions::masked(AttentionMask::Allow(&allow)).scale(0.5);
    assert_eq!(opts.scale, Some(0.5));
    assert!(format!("{opts:?}").contains("Allow"));
}

#[test]
fn attention_fully_masked_rows_give_zeros() {
    let q = uniform(&[2, 3, 4], 1, -1.0, 1.0).requires_grad().unwrap();
    let k = uniform(&[2, 5, 4], 2, -1.0, 1.0).requires_grad().unwrap();
    let v = uniform(&[2, 5, 3], 3, -1.0, 1.0).requires_grad().unwrap();
    let mut keep = vec![1.0f32; 15];
    keep[5..10].fill(0.0); // query 1 sees no key
    let mask = T::from_vec(&B, keep.clone(), [3, 5]).unwrap();
    let y = q
        .scaled_dot_product_attention(
            &k,
            &v,
            AttentionOptions::masked(AttentionMask::Allow(&mask)),
        )
        .unwrap();
    let yv = y.to_vec().unwrap();
    for b in 0..2 {
        assert!(yv[b * 9 + 3..b * 9 + 6].iter().all(|&x| x == 0.0));
        assert!(yv[b * 9..b * 9 + 3].iter().all(|&x| x != 0.0));
    }
    y.sum().unwrap().backward().unwrap();
    let gq = q.grad().unwrap().to_vec().unwrap();
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
    let y2 = q
        .scaled_dot_product_attention(
            &k,
            &v,
            AttentionOptions::masked(AttentionMask::Additive(&add)),
        )
        .unwrap();
    assert_eq!(bits(&y2.to_vec().unwrap()), bits(&yv));
}

// ----- errors -----------------------------------------------------------------------------

#[test]
fn attention_errors() {
    let op = "scaled_dot_product_attention";
    let sdpa = |q: &[usize],
                k: &[usize],
                v: &[usize],
                mask: Option<AttentionMask<'_, ScalarRefBackend>>,
                causal: bool| {
        let (q, k, v) = (
            uniform(q, 1, -1.0, 1.0),
            uniform(k, 2, -1.0, 1.0),
            uniform(v, 3, -1.0, 1.0),
        );
        let opts = AttentionOptions {
            mask,
            is_causal: causal,
            scale: None,
        };
        q.scaled_dot_product_attention(&k, &v, opts)
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
    let m_bad = uniform(&[3, 4], 4, 0.0, 1.0);
    expect_err(
        "mask shape",
        || {
            sdpa(
                &[2, 3, 4],
                &[2, 5, 4],
                &[2, 5, 2],
                Some(AttentionMask::Allow(&m_bad)),
                false,
            )
        },
        &[op, "mask", "[3, 4]", "[2, 3, 5]"],
    );
    let m_big = uniform(&[2, 2, 3, 5], 4, 0.0, 1.0);
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
    let m_ok = uniform(&[3, 5], 4, 0.0, 1.0);
    expect_err(
        "mask and causal",
        || {
            sdpa(
                &[2, 3, 4],
                &[2, 5, 4],
                &[2, 5, 2],
                Some(AttentionMask::Allow(&m_ok)),
                true,
            )
        },
        &[op, "is_causal"],
    );
    assert!(sdpa(
        &[2, 3, 4],
        &[2, 5, 4],
        &[2, 5, 2],
        Some(AttentionMask::Allow(&m_ok)),
        false
    )
    .is_ok());
}
