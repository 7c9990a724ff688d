//! Trains the digits MLP of the workspace's `digits` example on the Vulkan backend, then on
//! the scalar reference of the same mode on the CPU, and prints both final parameter
//! hashes.
//!
//! ```text
//! cargo run --release --example digits_gpu -- [--mode exact|fast] [--epochs N] [--seed S]
//! ```
//!
//! The run is the `digits` example's (`docs/digits.md`): Linear(64, 128)–ReLU–Linear(128,
//! 10) initialised from `Philox::new(seed)`, Adam (lr 5e-3) on the mean cross entropy of
//! mini-batches of 32 shuffled from the seed, 20 epochs. In exact mode the CPU reference
//! is `ScalarRefBackend`, and with the defaults both hashes must be the pinned
//! `0x22f4e62902a28255`; in fast mode it is `FastScalarRefBackend`. Without `--mode` the
//! example runs exact mode when the device offers it and fast mode otherwise. It exits
//! with an error when the two hashes differ.

use exactgrad::nn::data::{DataLoader, Digits};
use exactgrad::nn::optim::{Adam, AdamConfig, Optimizer};
use exactgrad::nn::{Linear, Relu, Sequential};
use exactgrad::prelude::*;
use exactgrad_wgpu::{WgpuBackend, WgpuError};
use std::process::ExitCode;
use std::time::Instant;

/// The final parameter hash of the default exact-mode run (`docs/digits.md`).
const PINNED_EXACT: u64 = 0x22f4_e629_02a2_8255;

/// The command line.
struct Args {
    mode: Option<ComputeMode>,
    epochs: usize,
    seed: u64,
}

const USAGE: &str = "usage: digits_gpu [--mode exact|fast] [--epochs N] [--seed S]";

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        mode: None,
        epochs: 20,
        seed: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value\n{USAGE}"));
        match flag.as_str() {
            "--mode" => {
                a.mode = Some(match value()?.as_str() {
                    "exact" => ComputeMode::Exact,
                    "fast" => ComputeMode::Fast,
                    m => return Err(format!("unknown mode `{m}`\n{USAGE}")),
                })
            }
            "--epochs" => a.epochs = value()?.parse().map_err(|e| format!("--epochs: {e}"))?,
            "--seed" => a.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--help" | "-h" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument `{other}`\n{USAGE}")),
        }
    }
    Ok(a)
}

/// Trains with `backend` exactly as the `digits` example does; returns the hash of the
/// final parameters in `state_dict` order and the number of training steps.
fn train<B: Backend>(backend: &B, epochs: usize, seed: u64) -> exactgrad::nn::Result<(u64, usize)> {
    let split = Digits::bundled().split()?;
    let mut rng = Philox::new(seed);
    let model = Sequential::new()
        .push(Linear::new(backend, Digits::FEATURES, 128, &mut rng)?)
        .push(Relu)
        .push(Linear::new(backend, 128, Digits::CLASSES, &mut rng)?);
    let params = model.parameters();
    let mut opt = Adam::new(params.clone(), AdamConfig::new(5e-3))?;
    let loader = DataLoader::new(backend, &split.train, 32)?.shuffle(seed ^ 0x5eed);
    let mut steps = 0;
    for epoch in 0..epochs {
        for batch in loader.batches_of_epoch(epoch as u64) {
            let batch = batch?;
            opt.clear_grad();
            let logits = model.forward(&batch.inputs)?;
            let loss = logits.cross_entropy(&batch.targets, CrossEntropyOptions::default())?;
            loss.backward()?;
            opt.step()?;
            steps += 1;
        }
    }
    Ok((hash_tensors(&params.iter().collect::<Vec<_>>())?, steps))
}

fn run() -> Result<bool, String> {
    let args = parse_args()?;
    let gpu = match args.mode {
        Some(mode) => WgpuBackend::new(mode).map_err(|e| e.to_string())?,
        None => match WgpuBackend::exact() {
            Ok(b) => b,
            Err(WgpuError::ExactUnsupported(why)) => {
                println!("exact mode refused ({why}); running fast mode");
                WgpuBackend::fast().map_err(|e| e.to_string())?
            }
            Err(e) => return Err(e.to_string()),
        },
    };
    let mode = exactgrad::core::BackendImpl::mode(&gpu);
    println!(
        "device: {} ({}, {})",
        gpu.adapter().name,
        gpu.adapter().device_type,
        gpu.adapter().driver
    );
    println!("mode: {mode}, {} epochs, seed {}", args.epochs, args.seed);
    let t = Instant::now();
    let f = gpu.findings();
    println!(
        "division and square root: {}; f64 sums: {}",
        if f.soft_div_sqrt {
            "integer"
        } else {
            "the device's"
        },
        if !f.sums_on_device() {
            "on the host"
        } else if f.int_f64 {
            "integer binary64"
        } else {
            "the device's f64"
        }
    );
    let (on_gpu, steps) = train(&gpu, args.epochs, args.seed).map_err(|e| e.to_string())?;
    let s = t.elapsed().as_secs_f64();
    println!(
        "gpu: {s:.1} s, {steps} steps, {:.2} ms per step",
        1e3 * s / steps.max(1) as f64
    );
    let t = Instant::now();
    let (on_cpu, steps) = match mode {
        ComputeMode::Exact => train(&ScalarRefBackend, args.epochs, args.seed),
        ComputeMode::Fast => train(&FastScalarRefBackend, args.epochs, args.seed),
    }
    .map_err(|e| e.to_string())?;
    let s = t.elapsed().as_secs_f64();
    println!(
        "cpu: {s:.1} s, {steps} steps, {:.2} ms per step",
        1e3 * s / steps.max(1) as f64
    );
    println!("cpu final parameter hash: {on_cpu:#018x}");
    println!("final parameter hash: {on_gpu:#018x}");
    let mut ok = on_gpu == on_cpu;
    if mode == ComputeMode::Exact && args.epochs == 20 && args.seed == 0 {
        println!("pinned exact-mode hash: {PINNED_EXACT:#018x}");
        ok &= on_gpu == PINNED_EXACT;
    }
    println!(
        "{}",
        if ok {
            "the device gives the CPU's bits"
        } else {
            "MISMATCH: the device's parameters differ from the CPU's"
        }
    );
    Ok(ok)
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
