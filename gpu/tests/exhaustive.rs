//! The device checks that take minutes on lavapipe, built only with the `exhaustive`
//! feature (as the CPU backends' exhaustive checks are): the integer square root on all
//! 2^32 inputs and the large reference models' pinned hashes. `.ci/gpu-all` runs them:
//! `cargo test --release --features exhaustive --test exhaustive -- --nocapture`.
//! `.ci/gpu`, on every submission, runs the dense samples of the square root
//! (`tests/portable.rs`) and the small reference models (`tests/reference_models.rs`).
//!
//! Without a Vulkan adapter each test prints why and passes, unless
//! `EXACTGRAD_REQUIRE_GPU=1` makes that a failure.

use exactgrad::nn::reference::{ReferenceCase, PINNED_HASHES};
use exactgrad_core::ComputeMode;

mod common;
use common::backend;

/// Equal bits, or both NaN (a NaN's payload is not part of the contract).
fn same32(a: u32, b: u32) -> bool {
    a == b || (f32::from_bits(a).is_nan() && f32::from_bits(b).is_nan())
}

/// The integer square root on all 2^32 inputs against the host (blocks of 2^24
/// computed on the device from their index, no upload).
#[test]
fn soft_sqrt_on_every_input() {
    let Some(dev) = backend(ComputeMode::Exact) else {
        return;
    };
    let block = 1usize << 24;
    let mut bad = 0u64;
    let mut first = Vec::new();
    let t = std::time::Instant::now();
    for k in 0..(1u64 << 32) / block as u64 {
        let start = (k * block as u64) as u32;
        let got = dev.soft_sqrt_range(start, block).unwrap();
        for (j, &g) in got.iter().enumerate() {
            let x = start.wrapping_add(j as u32);
            let want = f32::from_bits(x).sqrt().to_bits();
            if !same32(g, want) {
                bad += 1;
                if first.len() < 8 {
                    first.push(format!("{x:#010x}: {g:#010x}, host {want:#010x}"));
                }
            }
        }
    }
    println!(
        "integer sqrt on all 2^32 inputs: {bad} differ ({:.0} s)",
        t.elapsed().as_secs_f64()
    );
    assert_eq!(bad, 0, "{first:?}");
}

/// ResNet-18 and the GPT-style decoder at bench size (`ResNetCase::pinned`,
/// `GptCase::pinned`) in exact mode: the pinned gradient hashes.
#[test]
fn exact_mode_gives_the_pinned_hashes_of_the_large_models() {
    use exactgrad::nn::reference::{GptCase, ResNetCase};
    let Some(gpu) = backend(ComputeMode::Exact) else {
        return;
    };
    let t = std::time::Instant::now();
    let gpt = GptCase::pinned(&gpu)
        .unwrap()
        .forward_backward()
        .unwrap()
        .hash()
        .unwrap();
    println!("gpt: {gpt:#018x} ({:.0} s)", t.elapsed().as_secs_f64());
    let t = std::time::Instant::now();
    let resnet = ResNetCase::pinned(&gpu)
        .unwrap()
        .forward_backward()
        .unwrap()
        .hash()
        .unwrap();
    println!(
        "resnet18: {resnet:#018x} ({:.0} s)",
        t.elapsed().as_secs_f64()
    );
    assert_eq!(gpt, PINNED_HASHES[5].1);
    assert_eq!(resnet, PINNED_HASHES[4].1);
}
