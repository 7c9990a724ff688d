//! The device-specific behaviour of the Vulkan backend beyond the conformance kit: the
//! fused multiply-add of fast-mode products on the inputs that defeat rounding through
//! f64 twice, the separate roundings of exact-mode products, what the probes report, and
//! kernels on parts of device buffers.
//!
//! Without a Vulkan adapter each test prints why and passes, unless
//! `EXACTGRAD_REQUIRE_GPU=1` makes that a failure.

use exactgrad_backends::{FastScalarRefBackend, ScalarRefBackend};
use exactgrad_core::backend::MatmulSpec;
use exactgrad_core::{Backend, BackendImpl, ComputeMode, UnaryOp, ViewLen};
use exactgrad_wgpu::{double_rounding_cases, WgpuBackend};

mod common;
use common::backend;

/// Rows `[c, a]` times columns `[1, b]`: each output is `c·1 + a·b` in the canonical
/// order, so its second step is the multiply-add `a·b + c`.
fn products<B: Backend>(b: &B, cases: &[[f32; 3]]) -> Vec<u32> {
    let n = cases.len();
    let a: Vec<f32> = cases.iter().flat_map(|&[x, _, z]| [z, x]).collect();
    let bm: Vec<f32> = cases.iter().flat_map(|&[_, y, _]| [1.0, y]).collect();
    // Batch of n products of 1×2 by 2×1.
    let spec = MatmulSpec {
        batch: n,
        m: 1,
        k: 2,
        n: 1,
        a_offset: 0,
        a_strides: [2, 2, 1],
        b_offset: 0,
        b_strides: [2, 1, 1],
    };
    let (sa, sb) = (
        b.storage_from_vec(a).unwrap(),
        b.storage_from_vec(bm).unwrap(),
    );
    let mut out = b.zeros(n).unwrap();
    b.matmul(&spec, B::view(&sa), B::view(&sb), B::view_mut(&mut out))
        .unwrap();
    let out = B::storage_to_vec(&out).unwrap();
    out.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn fast_products_round_each_multiply_add_once() {
    let Some(gpu) = backend(ComputeMode::Fast) else {
        return;
    };
    let cases = double_rounding_cases();
    let want = products(&FastScalarRefBackend, &cases);
    assert_eq!(products(&gpu, &cases), want);
    for (&[a, b, c], &w) in cases.iter().zip(&want) {
        assert_eq!(w, a.mul_add(b, c).to_bits());
    }
}

#[test]
fn exact_products_round_the_product_and_the_sum() {
    let Some(gpu) = backend(ComputeMode::Exact) else {
        return;
    };
    // (1 + 2^-23)^2 - (1 + 2^-22): 0 with two roundings, 2^-46 fused.
    let one = 1.0 + 2f32.powi(-23);
    let mut cases = vec![[one, one, -(1.0 + 2f32.powi(-22))]];
    cases.extend(double_rounding_cases());
    let got = products(&gpu, &cases);
    assert_eq!(got[0], 0);
    assert_eq!(got, products(&ScalarRefBackend, &cases));
}

#[test]
fn the_probes_justify_the_modes_offered() {
    let Some(gpu) = backend(ComputeMode::Fast) else {
        return;
    };
    let f = gpu.findings();
    assert!(f.samples > 30_000);
    assert!(f.missing(ComputeMode::Fast).is_empty(), "{f}");
    assert_eq!(f.barrier_mismatches, 0, "{f}");
    assert_eq!(f.div_mismatches, 0, "{f}");
    assert_eq!(f.sqrt_mismatches, 0, "{f}");
    assert_eq!(f.subnormals_flushed, 0, "{f}");
    assert!(
        f.fma_native() || f.fma_emulated_mismatches == Some(0),
        "{f}"
    );
    println!("{}\n{f}", gpu.adapter().name);
}

#[test]
fn kernels_on_parts_of_buffers_read_and_write_only_those_parts() {
    let Some(gpu) = backend(ComputeMode::Exact) else {
        return;
    };
    type W = WgpuBackend;
    let x = gpu
        .storage_from_vec((1..=10).map(|i| i as f32).collect())
        .unwrap();
    let mut out = gpu.storage_from_vec(vec![7.0; 10]).unwrap();
    // x[2..5] negated into out[4..7]: both a part of their buffer (copied on the device).
    let src = W::slice(W::view(&x), 2..5);
    let dst = W::slice_mut(W::view_mut(&mut out), 4..7);
    gpu.unary(UnaryOp::Neg, src, dst).unwrap();
    assert_eq!(
        W::storage_to_vec(&out).unwrap(),
        [7.0, 7.0, 7.0, 7.0, -3.0, -4.0, -5.0, 7.0, 7.0, 7.0]
    );
    // The two halves of one buffer, one written from the other.
    let (left, right) = W::split_at_mut(W::view_mut(&mut out), 5);
    gpu.unary(UnaryOp::Abs, W::freeze(&left), right).unwrap();
    assert_eq!(
        W::storage_to_vec(&out).unwrap(),
        [7.0, 7.0, 7.0, 7.0, -3.0, 7.0, 7.0, 7.0, 7.0, 3.0]
    );
    // Reads and host writes of a part.
    let part = W::slice(W::view(&out), 3..6);
    assert_eq!(&*W::to_host(part).unwrap(), [7.0, -3.0, 7.0]);
    W::with_host_mut(W::slice_mut(W::view_mut(&mut out), 8..10), |h| {
        assert_eq!(h, [7.0, 3.0]);
        h[1] = 0.5;
    })
    .unwrap();
    assert_eq!(W::storage_to_vec(&out).unwrap()[7..], [7.0, 7.0, 0.5]);
    // A range outside the view panics, as slice indexing does.
    let outside = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        W::slice(W::view(&x), 8..11).len()
    }));
    assert!(outside.is_err());
}
