//! Dropout, embedding, index_select and split/chunk: gradient checks (the check of
//! `exactgrad_autograd::gradcheck`) on random shapes with strided, transposed and
//! permuted views; embedding's f64 accumulation; the pieces of split and chunk as views;
//! dropout's statistics and reproducibility (`docs/arithmetic.md` §5); and the errors of
//! bad arguments.

use exactgrad::autograd::Result;
use exactgrad::prelude::*;
use proptest::prelude::*;

use super::common::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 8, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn embedding_and_index_select(
        num in 1usize..6, dim in 1usize..4, count in 0usize..8, pad in any::<bool>(),
        shape in prop::collection::vec(1usize..4, 1..4), seed in any::<u64>(), pick in any::<u64>(),
        view in view_strategy(),
    ) {
        let mut r = Philox::new(pick);
        let indices: Vec<i64> = (0..count).map(|_| r.below(num as u32) as i64).collect();
        let padding_idx = pad.then(|| r.below(num as u32) as i64 - if r.below(2) == 0 { num as i64 } else { 0 });
        let w = uniform(&leaf_shape(view, &[num, dim]), seed, -1.0, 1.0);
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
        let x = uniform(&leaf_shape(view, &shape), seed ^ 1, -1.0, 1.0);
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
        let x = uniform(&leaf_shape(view, &shape), seed, -1.0, 1.0);
        // A consumer that weights each piece differently and skips the second one.
        let consume = |pieces: Vec<T>| -> Result<T> {
            let used: Vec<T> = pieces
                .iter()
                .enumerate()
                .filter(|(k, _)| *k != 1)
                .map(|(k, p)| p.reshape([p.numel()])?.mul_scalar(k as f32 + 0.5))
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
        let x = uniform(&leaf_shape(view, &shape), seed, -1.0, 1.0);
        check(&format!("dropout {shape:?} p={p} {view:?}"), &[x], |v| {
            // The same generator state at every call gives the same mask.
            apply_view(view, &v[0])?.dropout(p, true, &mut Philox::new(seed ^ 9))
        });
    }
}

/// Repeated indices add their gradients in f64 in position order, rounded once.
#[test]
fn embedding_accumulates_in_f64() {
    let w = T::zeros(&B, [3, 1]).unwrap().requires_grad().unwrap();
    let y = T::embedding(&w, &[1, 1, 1, 0], &[4], Some(0)).unwrap();
    assert_eq!(y.dims(), &[4, 1]);
    let g = T::from_vec(&B, vec![1.0, 1e-8, -1.0, 5.0], [4, 1]).unwrap();
    y.backward_with(BackwardOptions::default().gradient(&g))
        .unwrap();
    // f32 additions in order would give 0 for row 1; row 0 is the padding row.
    assert_eq!(w.grad().unwrap().to_vec().unwrap(), vec![0.0, 1e-8, 0.0]);
}

#[test]
fn split_and_chunk_are_views_with_pytorchs_sizes() {
    let x = uniform(&[5, 7], 1, -1.0, 1.0);
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
    let e = T::zeros(&B, [2, 0]).unwrap();
    assert_eq!(e.chunk(3, 1).unwrap().len(), 3);
    assert_eq!(e.split(0, 1).unwrap().len(), 1);
    assert_eq!(e.split(2, 1).unwrap().len(), 1);
    let pieces = x.split(2, 0).unwrap();
    assert_eq!(
        pieces[1].to_vec().unwrap(),
        x.narrow(0, 2, 2).unwrap().to_vec().unwrap()
    );
}

// ----- dropout ----------------------------------------------------------------------------

#[test]
fn dropout_statistics_and_reproducibility() {
    let n = 1 << 16;
    let x = T::from_vec(&B, values(n, 1, 0.5, 1.5), [n]).unwrap();
    let xv = x.to_vec().unwrap();
    for p in [0.1f32, 0.5, 0.9] {
        let mut rng = Philox::new(42);
        let y = x.dropout(p, true, &mut rng).unwrap().to_vec().unwrap();
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
        let again = x
            .dropout(p, true, &mut Philox::new(42))
            .unwrap()
            .to_vec()
            .unwrap();
        assert_eq!(bits(&again), bits(&y));
        let next = x.dropout(p, true, &mut rng).unwrap().to_vec().unwrap();
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
    let y0 = x
        .dropout(0.0, true, &mut Philox::new(1))
        .unwrap()
        .to_vec()
        .unwrap();
    assert_eq!(bits(&y0), bits(&xv));
    let y1 = x
        .dropout(1.0, true, &mut Philox::new(1))
        .unwrap()
        .to_vec()
        .unwrap();
    assert!(y1.iter().all(|&v| v == 0.0));
}

/// The mask depends on the row-major element index only: not on the layout, the
/// backend, the ISA path or the thread count.
#[test]
fn dropout_mask_is_independent_of_layout_backend_and_threads() {
    let x = uniform(&[37, 29], 3, -1.0, 1.0);
    let xt = x.t().unwrap();
    let a = xt
        .dropout(0.4, true, &mut Philox::new(9))
        .unwrap()
        .to_vec()
        .unwrap();
    let b = xt
        .contiguous()
        .unwrap()
        .dropout(0.4, true, &mut Philox::new(9))
        .unwrap()
        .to_vec()
        .unwrap();
    assert_eq!(bits(&a), bits(&b));
    for isa in Isa::ALL {
        if !isa.is_supported(ComputeMode::Exact) {
            continue;
        }
        for threads in [1, 3, 8] {
            let be = ExactBackend::with_isa(isa, threads).unwrap();
            let xe = Tensor::from_vec(&be, x.to_vec().unwrap(), [37, 29])
                .unwrap()
                .t()
                .unwrap();
            let c = xe
                .dropout(0.4, true, &mut Philox::new(9))
                .unwrap()
                .to_vec()
                .unwrap();
            assert_eq!(bits(&c), bits(&a), "exact/{isa}/{threads}t");
        }
    }
}

// ----- errors -----------------------------------------------------------------------------

#[test]
fn dropout_embedding_index_and_split_errors() {
    let x = uniform(&[4, 3], 1, -1.0, 1.0);
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
        || T::embedding(&uniform(&[4], 1, 0.0, 1.0), &[0], &[1], None),
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
    let s = T::scalar(&B, 1.0).unwrap();
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
