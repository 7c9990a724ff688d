//! The device's buffer pool (`docs/gpu.md` §6.1): a training step of the digits MLP
//! creates no device buffer once the warm-up has run (one step; two with Adam, whose
//! first step creates its state), recycled storage handed out by
//! `zeros` holds `+0`, and the limit, trim and idle allowance behave as documented.
//!
//! The pool is the device's, shared by every backend of the process, so the tests of this
//! file run one at a time.
//!
//! Without a Vulkan adapter each test prints why and passes, unless
//! `EXACTGRAD_REQUIRE_GPU=1` makes that a failure.

use exactgrad::nn::data::{DataLoader, Digits};
use exactgrad::nn::optim::{Adam, AdamConfig, Optimizer, Sgd, SgdConfig};
use exactgrad::nn::{Linear, Relu, Sequential};
use exactgrad::prelude::*;
use exactgrad_core::{BackendImpl, Error};
use exactgrad_wgpu::{WgpuBackend, IDLE_BYTES};
use std::sync::Mutex;

mod common;
use common::backend;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Device buffers created by each of the first `steps` training steps of the digits MLP
/// (the `digits` example's model, batches of 32) with the optimizer `make` builds.
fn created_per_step(
    gpu: &WgpuBackend,
    steps: usize,
    make: impl FnOnce(Vec<Tensor<WgpuBackend>>) -> Box<dyn Optimizer<WgpuBackend>>,
) -> Vec<u64> {
    let split = Digits::bundled().split().unwrap();
    let mut rng = Philox::new(0);
    let model = Sequential::new()
        .push(Linear::new(gpu, Digits::FEATURES, 128, &mut rng).unwrap())
        .push(Relu)
        .push(Linear::new(gpu, 128, Digits::CLASSES, &mut rng).unwrap());
    let mut opt = make(model.parameters());
    let loader = DataLoader::new(gpu, &split.train, 32)
        .unwrap()
        .shuffle(0x5eed);
    let mut created = Vec::new();
    for batch in loader.batches_of_epoch(0).take(steps) {
        let before = gpu.pool_stats();
        let batch = batch.unwrap();
        opt.clear_grad();
        let logits = model.forward(&batch.inputs).unwrap();
        let loss = logits
            .cross_entropy(&batch.targets, CrossEntropyOptions::default())
            .unwrap();
        loss.backward().unwrap();
        opt.step().unwrap();
        assert!(loss.item().unwrap().is_finite());
        drop((batch, logits, loss));
        let after = gpu.pool_stats();
        assert!(after.hits > before.hits, "a step reused no buffer");
        created.push(after.native_allocations - before.native_allocations);
    }
    created
}

#[test]
fn a_training_step_after_the_warm_up_allocates_nothing_on_the_device() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(gpu) = backend(ComputeMode::Exact) else {
        return;
    };
    // SGD keeps no state: the second step finds every buffer it needs idle.
    let sgd = created_per_step(&gpu, 3, |p| {
        Box::new(Sgd::new(p, SgdConfig::new(0.1)).unwrap())
    });
    println!("SGD: device buffers created per step: {sgd:?}");
    assert!(sgd[0] > 0, "the first step must create its buffers");
    assert_eq!(
        &sgd[1..],
        &[0, 0],
        "SGD steps after the first created buffers"
    );
    // Adam creates its state in its first step, from buffers the pool held idle; the
    // second step replaces those, and from the third on nothing is created.
    let adam = created_per_step(&gpu, 4, |p| {
        Box::new(Adam::new(p, AdamConfig::new(5e-3)).unwrap())
    });
    println!("Adam: device buffers created per step: {adam:?}");
    assert!(
        adam[1] <= 8,
        "the second Adam step created {} buffers",
        adam[1]
    );
    assert_eq!(
        &adam[2..],
        &[0, 0],
        "Adam steps after the second created buffers"
    );
}

#[test]
fn recycled_storage_is_zeroed_and_the_limit_holds() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(gpu) = backend(ComputeMode::Exact) else {
        return;
    };
    let pool = gpu.memory().expect("the Vulkan backend has a pool");
    // A buffer full of non-zero words, dropped, then asked for again through `zeros`
    // (same size class): served from the pool and cleared.
    let n = 3000;
    drop(gpu.storage_from_vec(vec![-1.5; n]).unwrap());
    let hits = pool.stats().hits;
    let z = gpu.zeros(n - 5).unwrap();
    assert_eq!(
        pool.stats().hits,
        hits + 1,
        "zeros did not reuse the buffer"
    );
    let words = WgpuBackend::storage_to_vec(&z).unwrap();
    assert!(
        words.iter().all(|v| v.to_bits() == 0),
        "recycled zeros not +0"
    );
    drop(z);

    // Idle bytes stay within the allowance and trim frees them.
    assert!(pool.stats().pooled_bytes <= IDLE_BYTES);
    let pooled = pool.stats().pooled_bytes;
    assert!(pooled > 0);
    assert_eq!(pool.trim(), pooled);
    assert_eq!(pool.stats().pooled_bytes, 0);

    // A limit below what a request needs is an error, not a panic; removing it restores
    // service.
    assert!(pool.set_limit(Some(0)).is_err());
    let in_use = pool.stats().outstanding_bytes;
    pool.set_limit(Some(in_use + 4096)).unwrap();
    match gpu.zeros(1 << 20) {
        Err(Error::MemoryLimit { bytes, limit, .. }) => {
            assert!(bytes >= 4 << 20);
            assert_eq!(limit, in_use + 4096);
        }
        other => panic!("expected a memory-limit error, got {other:?}"),
    }
    pool.set_limit(None).unwrap();
    let big = gpu.zeros(1 << 20).unwrap();
    assert_eq!(WgpuBackend::storage_len(&big), 1 << 20);
    assert!(pool.stats().peak_bytes >= 4 << 20);
}
