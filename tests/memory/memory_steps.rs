//! Ten training steps of each reference model (`nn::reference`: the conv net, the
//! encoder and the CRNN, from the oracle files) on `ExactBackend`, each step inside an
//! `ActivationScope` (`docs/memory.md`):
//!
//! - the first step's gradients hash to the pinned value (the scope changes nothing);
//! - from the third step on the backend's pool makes **no native allocation**, and the
//!   bytes outstanding after every step are the same (nothing leaks, nothing grows);
//! - the step's activations are released when its scope ends (the loss held past it
//!   reads as `Error::Released`);
//! - a counting global allocator (this binary's, `main.rs`) measures the heap allocations that
//!   remain per step (records, tensor handles, shapes and layouts, scratch vectors):
//!   printed per model beside the figures `docs/memory.md` §4 starts from (17 KB per
//!   step for the conv net, 58 KB for the encoder), and asserted not to grow from step
//!   to step and to be given back by the end of each step.
//!
//! Run with `cargo test --release --test memory memory_steps -- --nocapture` to see the table.

use crate::GLOBAL;
use exactgrad::autograd::{ActivationScope, AttentionMask, CrossEntropyOptions, Error};
use exactgrad::nn::optim::{Adam, AdamConfig, Optimizer, Sgd, SgdConfig};
use exactgrad::nn::reference::{ConvNetCase, CrnnCase, EncoderCase, ReferenceCase, PINNED_HASHES};
use exactgrad::prelude::*;
use stats_alloc::Region;

const STEPS: usize = 10;

/// What one step cost.
#[derive(Clone, Copy, Debug)]
struct StepCost {
    native_allocations: u64,
    hits: u64,
    outstanding_after: usize,
    peak: usize,
    heap_allocations: usize,
    heap_bytes: usize,
    heap_net: isize,
}

fn pinned(name: &str) -> u64 {
    PINNED_HASHES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, h)| *h)
        .unwrap()
}

/// Runs `STEPS` steps: the first with `case.forward_backward()` (its gradients must
/// hash to the pinned value), the others with `step` (forward, loss, backward, no
/// gradient collection); each followed by `opt.step()` and inside its own scope.
fn train<C: ReferenceCase<ExactBackend>>(
    b: &ExactBackend,
    case: &C,
    opt: &mut dyn Optimizer<ExactBackend>,
    step: impl Fn() -> Tensor<ExactBackend>,
) -> Vec<StepCost> {
    let pool = b.memory().expect("ExactBackend has a pool");
    let mut costs = Vec::with_capacity(STEPS);
    for i in 0..STEPS {
        let before = pool.stats();
        pool.reset_peak();
        let region = Region::new(GLOBAL);
        {
            let scope = ActivationScope::new();
            let loss = if i == 0 {
                let g = case.forward_backward().unwrap();
                assert_eq!(g.hash().unwrap(), pinned(case.name()), "{}", case.name());
                g.loss
            } else {
                step()
            };
            opt.step().unwrap();
            let report = scope.close();
            assert!(report.released >= 1, "{report:?}");
            // The loss, held past its scope, was released with it.
            assert!(matches!(loss.item(), Err(Error::Released { .. })));
        }
        let heap = region.change();
        let after = pool.stats();
        costs.push(StepCost {
            native_allocations: after.native_allocations - before.native_allocations,
            hits: after.hits - before.hits,
            outstanding_after: after.outstanding_bytes,
            peak: after.peak_bytes,
            heap_allocations: heap.allocations + heap.reallocations,
            // `bytes_allocated` includes what reallocations added.
            heap_bytes: heap.bytes_allocated,
            heap_net: heap.bytes_allocated as isize - heap.bytes_deallocated as isize,
        });
    }
    costs
}

/// Prints the table and checks the promises; `reference` is the figure of heap bytes
/// per step `docs/memory.md` §4 compares with (printed beside the measurement).
fn check(model: &str, costs: &[StepCost], reference: Option<usize>) {
    println!("{model}: step, pool native allocations, pool hits, outstanding bytes after, pool peak bytes, heap allocations, heap bytes, heap net");
    for (i, c) in costs.iter().enumerate() {
        println!(
            "{model} {i:>2} {:>5} {:>6} {:>10} {:>10} {:>6} {:>8} {:>7}",
            c.native_allocations,
            c.hits,
            c.outstanding_after,
            c.peak,
            c.heap_allocations,
            c.heap_bytes,
            c.heap_net
        );
    }
    let steady = &costs[2..];
    let n = steady.len();
    let mean = |f: fn(&StepCost) -> usize| steady.iter().map(f).sum::<usize>() / n;
    println!(
        "{model} per step after warm-up: {} native allocations by the pool; heap {} allocations, {} bytes (reference {}); pool peak {} bytes",
        steady.iter().map(|c| c.native_allocations).sum::<u64>() / n as u64,
        mean(|c| c.heap_allocations),
        mean(|c| c.heap_bytes),
        reference.map_or("none".to_string(), |r| format!("{r} bytes")),
        steady[0].peak
    );
    for (i, c) in steady.iter().enumerate() {
        assert_eq!(
            c.native_allocations,
            0,
            "{model}: step {} allocated from the system",
            i + 2
        );
        assert!(c.hits > 0);
        assert_eq!(
            c.outstanding_after,
            costs[1].outstanding_after,
            "{model}: outstanding bytes after step {} differ from step 1",
            i + 2
        );
        // The remaining heap allocations do not grow with the steps (the hash maps of
        // the engine may differ by a few allocations from step to step).
        assert!(
            c.heap_allocations <= steady[0].heap_allocations + 8,
            "{model}: step {} made {} heap allocations, step 2 {}",
            i + 2,
            c.heap_allocations,
            steady[0].heap_allocations
        );
    }
    // What a step allocates on the heap it frees by its end (a one-time growth of a
    // few bytes at most).
    let kept: isize = steady.iter().map(|c| c.heap_net).sum();
    assert!(
        kept.unsigned_abs() <= 1024,
        "{model}: the steps kept {kept} heap bytes"
    );
}

/// The allocator's counters are process-wide, so this binary has one test, which runs
/// the models one after the other (a second test running on another thread would count
/// its allocations in the same counters).
#[test]
fn reference_model_steps_allocate_nothing_from_the_system_after_warm_up() {
    let _alone = crate::alone();
    conv_net();
    encoder();
    crnn();
}

fn conv_net() {
    let b = ExactBackend::new();
    let bytes = include_bytes!("../../testdata/autograd/conv_net.safetensors");
    let case = ConvNetCase::from_oracle(&b, bytes).unwrap();
    let mut opt = Adam::new(case.parameters(), AdamConfig::new(1e-3)).unwrap();
    let params = case.parameters();
    let costs = train(&b, &case, &mut opt, || {
        params.iter().for_each(Tensor::clear_grad);
        case.input.clear_grad();
        let logits = case.model.forward(&case.input).unwrap();
        let loss = logits
            .cross_entropy(&case.targets, CrossEntropyOptions::default())
            .unwrap();
        loss.backward().unwrap();
        loss
    });
    check("conv_net", &costs, Some(17_000));
}

fn encoder() {
    let b = ExactBackend::new();
    let bytes = include_bytes!("../../testdata/autograd/encoder.safetensors");
    let case = EncoderCase::from_oracle(&b, bytes).unwrap();
    let mut opt = Adam::new(case.parameters(), AdamConfig::new(1e-3)).unwrap();
    let params = case.parameters();
    let classes = case.model.config().classes as isize;
    let costs = train(&b, &case, &mut opt, || {
        params.iter().for_each(Tensor::clear_grad);
        case.input.clear_grad();
        let logits = case
            .model
            .forward_masked(
                &case.input,
                Some(AttentionMask::Block(&case.key_padding_mask)),
            )
            .unwrap();
        let loss = logits
            .reshape_infer(&[-1, classes])
            .unwrap()
            .cross_entropy(&case.targets, CrossEntropyOptions::default())
            .unwrap();
        loss.backward().unwrap();
        loss
    });
    check("encoder", &costs, Some(58_000));
}

fn crnn() {
    let b = ExactBackend::new();
    let bytes = include_bytes!("../../testdata/autograd/crnn.safetensors");
    let case = CrnnCase::from_oracle(&b, bytes).unwrap();
    let mut opt = Sgd::new(case.parameters(), SgdConfig::new(0.01)).unwrap();
    let params = case.parameters();
    let costs = train(&b, &case, &mut opt, || {
        params.iter().for_each(Tensor::clear_grad);
        case.input.clear_grad();
        let lp = case.model.forward(&case.input).unwrap();
        let loss = case.loss(&lp).unwrap();
        loss.backward().unwrap();
        loss
    });
    check("crnn", &costs, None);
}
