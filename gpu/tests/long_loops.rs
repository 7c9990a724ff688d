//! Reductions longer than a shader loop may run on llvmpipe (65,535 iterations, counted
//! over nested loops): the kernels split them into dispatches that carry the
//! accumulator, so a sum over 200,000 elements, a product with k = 70,000 and a softmax
//! backward over 70,000 columns give the reference's bits in both modes.
//!
//! Without a Vulkan adapter each test prints why and passes, unless
//! `EXACTGRAD_REQUIRE_GPU=1` makes that a failure.

use exactgrad_backends::{FastScalarRefBackend, ScalarRefBackend};
use exactgrad_core::backend::MatmulSpec;
use exactgrad_core::{Backend, ComputeMode, Layout, Philox};
use exactgrad_wgpu::{WgpuBackend, WgpuError, REQUIRE_GPU_ENV};

fn backend(mode: ComputeMode) -> Option<WgpuBackend> {
    match WgpuBackend::new(mode) {
        Ok(b) => Some(b),
        Err(WgpuError::NoAdapter(m)) if std::env::var_os(REQUIRE_GPU_ENV).is_none() => {
            eprintln!("skipped: {m} (set {REQUIRE_GPU_ENV}=1 to make this a failure)");
            None
        }
        Err(e) => panic!("{e}"),
    }
}

fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Philox::new(seed);
    (0..n).map(|_| rng.next_f32() * 2.0 - 1.0).collect()
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
    let x = values(200_000, 1);
    let mut out = vec![0.0f32; 2];
    // Two outputs of 100,000 elements each, the reduced dimension strided.
    let l = Layout {
        shape: vec![100_000, 2].into(),
        strides: vec![2, 1],
        offset: 0,
    };
    b.sum(&x, &l, &[true, false], &mut out).unwrap();
    out
});

compare!(a_product_with_k_70000, |b| {
    let k = 70_000;
    let a = values(2 * k, 2);
    let bm = values(k * 3, 3);
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
    let mut out = vec![0.0f32; 6];
    b.matmul(&spec, &a, &bm, &mut out).unwrap();
    out
});

compare!(a_softmax_backward_over_70000_columns, |b| {
    let cols = 70_000;
    let y = values(2 * cols, 4);
    let g = values(2 * cols, 5);
    let mut out = vec![0.0f32; 2 * cols];
    b.softmax_backward(&y, &g, 2, cols, false, &mut out)
        .unwrap();
    out
});
