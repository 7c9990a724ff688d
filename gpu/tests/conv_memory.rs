//! The column matrices of a convolution on the device stay bounded (`docs/gpu.md` §5.6):
//! autograd gathers the columns of a block of items at a time (`COL_BUDGET`), so the
//! device memory a convolution's forward and backward pass hold at once, beyond their
//! tensors, is a small fraction of the whole batch's column matrix; and the gradients
//! are the reference's bits.
//!
//! Without a Vulkan adapter the test prints why and passes, unless
//! `EXACTGRAD_REQUIRE_GPU=1` makes that a failure.

use exactgrad::prelude::*;
use exactgrad_backends::ScalarRefBackend;
use exactgrad_core::BackendImpl;

mod common;
use common::backend;

const N: usize = 64;
const C: usize = 16;
const O: usize = 4;
const H: usize = 16;
const K: usize = 3;

/// The gradient hash of `sum(conv2d(x, w))` (padding 1) on `b`.
fn conv_grads<B: Backend>(b: &B) -> u64 {
    let mut rng = Philox::new(11);
    let x: Vec<f32> = (0..N * C * H * H).map(|_| rng.next_f32() - 0.5).collect();
    let w: Vec<f32> = (0..O * C * K * K).map(|_| rng.next_f32() - 0.5).collect();
    let x = Tensor::from_vec(b, x, [N, C, H, H])
        .unwrap()
        .requires_grad()
        .unwrap();
    let w = Tensor::from_vec(b, w, [O, C, K, K])
        .unwrap()
        .requires_grad()
        .unwrap();
    let opts = Conv2dOptions {
        padding: [1, 1],
        ..Default::default()
    };
    let y = x.conv2d(&w, None, opts).unwrap();
    y.sum().unwrap().backward().unwrap();
    let (gx, gw) = (x.grad().unwrap(), w.grad().unwrap());
    hash_tensors(&[&gx, &gw]).unwrap()
}

#[test]
fn a_convolution_holds_a_block_of_columns_not_the_batch() {
    let Some(gpu) = backend(ComputeMode::Exact) else {
        return;
    };
    let pool = gpu.memory().expect("the Vulkan backend has a pool");
    pool.reset_peak();
    let base = pool.stats().outstanding_bytes;
    let got = conv_grads(&gpu);
    let peak = pool.stats().peak_bytes - base;
    // The batch's whole column matrix, and the tensors the pass must hold: x and its
    // gradient, y and its gradient (4 bytes per element, size classes up to 12.5 % more).
    let all_columns = N * C * K * K * H * H * 4;
    let tensors = (2 * N * C * H * H + 2 * N * O * H * H) * 4;
    println!(
        "peak {peak} bytes beyond the {base} held before; tensors {tensors}, whole column matrix {all_columns}"
    );
    assert!(
        peak < tensors * 9 / 8 + all_columns / 4,
        "the pass held {peak} bytes: more than a block of columns beyond its tensors"
    );
    assert_eq!(
        got,
        conv_grads(&ScalarRefBackend),
        "the gradients' bits differ"
    );
}
