//! Reductions longer than a shader loop may run on llvmpipe (65,535 iterations, counted
//! over nested loops): the kernels split them into dispatches that carry the
//! accumulator, so a sum over 200,000 elements, a product with k = 70,000, a softmax
//! backward over 70,000 columns and normalisations over groups of 140,000 elements give
//! the reference's bits in both modes.
//!
//! Without a Vulkan adapter each test prints why and passes, unless
//! `EXACTGRAD_REQUIRE_GPU=1` makes that a failure.

use exactgrad_backends::{FastScalarRefBackend, ScalarRefBackend};
use exactgrad_core::backend::MatmulSpec;
use exactgrad_core::{Backend, BackendImpl, ComputeMode, Layout, Philox, ViewMutOf, ViewOf};

mod common;
use common::backend;

fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Philox::new(seed);
    (0..n).map(|_| rng.next_f32() * 2.0 - 1.0).collect()
}

/// `v` in a new buffer of `b`.
fn up<B: Backend>(b: &B, v: Vec<f32>) -> B::Storage {
    b.storage_from_vec(v).unwrap()
}

/// The elements of `s`, on the host.
fn down<B: Backend>(_: &B, s: &B::Storage) -> Vec<f32> {
    B::storage_to_vec(s).unwrap()
}

fn v<'a, B: Backend>(_: &B, s: &'a B::Storage) -> ViewOf<'a, B> {
    B::view(s)
}

fn vm<'a, B: Backend>(_: &B, s: &'a mut B::Storage) -> ViewMutOf<'a, B> {
    B::view_mut(s)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

macro_rules! compare {
    ($name:ident, |$b:ident| $body:expr) => {
        #[test]
        fn $name() {
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
                assert_eq!(bits(&got), bits(&want), "{mode} mode");
            }
        }
    };
}

compare!(a_sum_over_200000_elements, |b| {
    let x = up(b, values(200_000, 1));
    let mut out = b.zeros(2).unwrap();
    // Two outputs of 100,000 elements each, the reduced dimension strided.
    let l = Layout {
        shape: vec![100_000, 2].into(),
        strides: vec![2, 1],
        offset: 0,
    };
    b.sum(v(b, &x), &l, &[true, false], vm(b, &mut out))
        .unwrap();
    down(b, &out)
});

compare!(a_product_with_k_70000, |b| {
    let k = 70_000;
    let a = up(b, values(2 * k, 2));
    let bm = up(b, values(k * 3, 3));
    let spec = MatmulSpec {
        batch: 1,
        m: 2,
        k,
        n: 3,
        a_offset: 0,
        a_strides: [0, k, 1],
        b_offset: 0,
        b_strides: [0, 3, 1],
    };
    let mut out = b.zeros(6).unwrap();
    b.matmul(&spec, v(b, &a), v(b, &bm), vm(b, &mut out))
        .unwrap();
    down(b, &out)
});

compare!(a_softmax_backward_over_70000_columns, |b| {
    let cols = 70_000;
    let y = up(b, values(2 * cols, 4));
    let g = up(b, values(2 * cols, 5));
    let mut out = b.zeros(2 * cols).unwrap();
    b.softmax_backward(v(b, &y), v(b, &g), 2, cols, false, vm(b, &mut out))
        .unwrap();
    down(b, &out)
});

compare!(a_normalisation_over_groups_of_140000, |b| {
    use exactgrad_core::kernels::{NormGrads, NormParam, NormSpec, NormStats};
    // Two groups of P·R = 140,000 elements (batch_norm's layout), and the parameter sums
    // of a group layout over as many.
    let spec = NormSpec {
        p: 20,
        q: 2,
        r: 7_000,
        param: NormParam::PerQ,
    };
    let n = 280_000;
    let x = up(b, values(n, 6));
    let g = up(b, values(n, 7));
    let (mut mean, mut corr, mut sq) = (
        b.zeros(2).unwrap(),
        b.zeros(2).unwrap(),
        b.zeros(2).unwrap(),
    );
    b.norm_stats(
        &spec,
        v(b, &x),
        vm(b, &mut mean),
        vm(b, &mut corr),
        vm(b, &mut sq),
    )
    .unwrap();
    let rstd = up(b, vec![0.75, 1.25]);
    let stats = NormStats {
        mean: v(b, &mean),
        corr: v(b, &corr),
        rstd: v(b, &rstd),
    };
    let mut dx = b.zeros(n).unwrap();
    let (mut dw, mut db) = (b.zeros(2).unwrap(), b.zeros(2).unwrap());
    let grads = NormGrads {
        dx: Some(vm(b, &mut dx)),
        dw: Some(vm(b, &mut dw)),
        db: Some(vm(b, &mut db)),
    };
    b.norm_backward(&spec, v(b, &x), v(b, &g), &stats, None, true, grads)
        .unwrap();
    let group = NormSpec {
        p: 20,
        q: 2,
        r: 7_000,
        param: NormParam::Group {
            groups: 1,
            cpg: 2,
            spatial: 3_500,
        },
    };
    let mut gw = b.zeros(2).unwrap();
    let grads = NormGrads {
        dx: None,
        dw: Some(vm(b, &mut gw)),
        db: None,
    };
    b.norm_backward(&group, v(b, &x), v(b, &g), &stats, None, true, grads)
        .unwrap();
    let mut all = down(b, &mean);
    for s in [&corr, &sq, &dw, &db, &gw] {
        all.extend(down(b, s));
    }
    all.extend(down(b, &dx).into_iter().step_by(97));
    all
});
