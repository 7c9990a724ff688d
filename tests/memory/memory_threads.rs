//! The heap of a scoped training step stays flat at every thread count
//! (`docs/memory.md` §4): a small model with a convolution, group normalisation,
//! multi-head self-attention and layer normalisation, trained with AdamW, each step
//! inside an `ActivationScope`, on `ExactBackend` at one and at two threads.
//!
//! A counting global allocator (this binary's, `main.rs`) gives the heap bytes live after each
//! step. From the third step on, the backend's pool makes no native allocation, and no
//! step leaves more live heap bytes than the third did: the compute threads' scratch
//! (the GEMM's packing buffers) comes from the pool in the same sizes every step,
//! whichever thread happens to run which part of a kernel. (The third step may still
//! grow the pool's own free lists, whose length follows the most buffers of one size
//! that were ever idle at once.) Both thread counts give the same losses, bit for bit.
//!
//! Run with `cargo test --release --test memory memory_threads -- --nocapture` to see the heap per
//! step.

use crate::GLOBAL;
use exactgrad::autograd::AttentionMask;
use exactgrad::prelude::*;

const STEPS: usize = 50;

/// Heap bytes currently live (allocated and not yet freed) in this process.
fn live_heap() -> isize {
    let s = GLOBAL.stats();
    s.bytes_allocated as isize - s.bytes_deallocated as isize
}

/// What one step left behind.
#[derive(Clone, Copy, Debug)]
struct Step {
    loss: u32,
    live_after: isize,
    heap_allocations: usize,
    heap_bytes: usize,
    native_allocations: u64,
}

/// Conv 3→32 (3×3, padding 1) on 4 images of 16×16 → group norm (4 groups) → ReLU →
/// the 16×16 positions as a sequence of 32-wide tokens → 2-head self-attention with a
/// residual → layer norm → mean over the sequence → linear 32→10 → cross-entropy; AdamW.
fn train(threads: usize) -> Vec<Step> {
    let b = ExactBackend::with_threads(threads);
    let pool = b.memory().expect("ExactBackend has a pool");
    let mut rng = Philox::new(11);
    let (n, c, hw) = (4usize, 32usize, 16usize);
    let conv = Conv2d::new(
        &b,
        Conv2dConfig {
            padding: [1, 1],
            ..Conv2dConfig::new(3, c, [3, 3])
        },
        &mut rng,
    )
    .unwrap();
    let gn_w = Tensor::full(&b, [c], 1.0).unwrap().requires_grad().unwrap();
    let gn_b = Tensor::full(&b, [c], 0.0).unwrap().requires_grad().unwrap();
    let mut cfg = MultiheadAttentionConfig::new(c, 2);
    cfg.batch_first = true;
    let mha = MultiheadAttention::new(&b, cfg, &mut rng).unwrap();
    let ln = LayerNorm::new(&b, &[c]).unwrap();
    let head = Linear::new(&b, c, 10, &mut rng).unwrap();
    let x = Tensor::rand_uniform(&b, [n, 3, hw, hw], -1.0, 1.0, &mut rng).unwrap();
    let targets: [i64; 4] = [1, 7, 3, 0];
    let padding = Tensor::zeros(&b, [n, hw * hw]).unwrap();
    let mut params = conv.parameters();
    params.extend([gn_w.clone(), gn_b.clone()]);
    params.extend(mha.parameters());
    params.extend(ln.parameters());
    params.extend(head.parameters());
    let mut opt = AdamW::new(params, AdamWConfig::new(1e-3)).unwrap();

    let mut steps = Vec::with_capacity(STEPS);
    for _ in 0..STEPS {
        let before = pool.stats();
        let (allocs, bytes) = (GLOBAL.stats().allocations, GLOBAL.stats().bytes_allocated);
        let loss = {
            let scope = ActivationScope::new();
            opt.clear_grad();
            let y = conv.forward(&x).unwrap();
            let y = y
                .group_norm(
                    4,
                    GroupNormOptions {
                        weight: Some(&gn_w),
                        bias: Some(&gn_b),
                        ..GroupNormOptions::default()
                    },
                )
                .unwrap()
                .relu()
                .unwrap();
            let tokens = y
                .reshape([n, c, hw * hw])
                .unwrap()
                .permute(&[0, 2, 1])
                .unwrap();
            let att = mha
                .forward_attention(
                    &tokens,
                    &tokens,
                    &tokens,
                    Some(AttentionMask::Block(&padding)),
                    None,
                )
                .unwrap();
            let z = ln.forward(&att.add(&tokens).unwrap()).unwrap();
            let pooled = z.mean_dims(&[1], false).unwrap();
            let loss = head
                .forward(&pooled)
                .unwrap()
                .cross_entropy(&targets, CrossEntropyOptions::default())
                .unwrap();
            loss.backward().unwrap();
            opt.step().unwrap();
            let value = loss.item().unwrap();
            scope.close();
            value
        };
        steps.push(Step {
            loss: loss.to_bits(),
            live_after: live_heap(),
            heap_allocations: GLOBAL.stats().allocations - allocs,
            heap_bytes: GLOBAL.stats().bytes_allocated - bytes,
            native_allocations: pool.stats().native_allocations - before.native_allocations,
        });
    }
    steps
}

/// Checks the promises of the module documentation for one run.
fn check(threads: usize, steps: &[Step]) {
    for (i, s) in steps.iter().enumerate().skip(2) {
        assert_eq!(
            s.native_allocations,
            0,
            "{threads} threads: the pool allocated at step {}",
            i + 1
        );
        assert!(
            s.live_after <= steps[2].live_after,
            "{threads} threads: step {} left {} more heap bytes live than step 3",
            i + 1,
            s.live_after - steps[2].live_after
        );
    }
}

/// The allocator's counters are process-wide, so this binary has one test, which runs
/// the thread counts one after the other. Which thread runs which part of a kernel
/// changes from run to run, so two threads are run three times, each with a fresh
/// backend (scratch that a thread made for itself the first time it ran some part of a
/// kernel showed in about half of the runs).
#[test]
fn scoped_steps_keep_the_heap_flat_at_one_and_two_threads() {
    let _alone = crate::alone();
    let one = train(1);
    let two = train(2);
    println!("step, then per thread count (1, 2): heap bytes live after the step (relative to step 3), heap allocations and bytes of the step, pool native allocations");
    for (i, (a, b)) in one.iter().zip(&two).enumerate() {
        println!(
            "{:>3}  {:>8} {:>6} {:>9} {:>3}   {:>8} {:>6} {:>9} {:>3}",
            i + 1,
            a.live_after - one[2].live_after,
            a.heap_allocations,
            a.heap_bytes,
            a.native_allocations,
            b.live_after - two[2].live_after,
            b.heap_allocations,
            b.heap_bytes,
            b.native_allocations
        );
    }
    check(1, &one);
    check(2, &two);
    let bits = |s: &[Step]| s.iter().map(|s| s.loss).collect::<Vec<_>>();
    assert_eq!(bits(&one), bits(&two), "the thread count changed a loss");
    for _ in 0..2 {
        let again = train(2);
        check(2, &again);
        assert_eq!(bits(&one), bits(&again), "the thread count changed a loss");
    }
}
