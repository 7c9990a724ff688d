//! Times a data-parallel training step of the reference conv net and compares the
//! world-size-independent reduction with a plain `MPI_Allreduce` of the same gradients.
//!
//! ```text
//! cargo build --release --example ddp_bench
//! for np in 1 2 4; do mpirun --oversubscribe -np $np target/release/examples/ddp_bench; done
//!   [--steps N] [--light-steps N] [--warmup N] [--batch N] [--shards S] [--hw H]
//!   [--threads N]
//! ```
//!
//! The model is `exactgrad::nn::reference::ConvNet` at its reference sizes (3→16→32
//! channels, 64 hidden, 10 classes) on a global batch of 32 standard-normal 3×32×32
//! images (the `step/conv_net` bench of the workspace), cut into 8 shards, on
//! ExactBackend's best path with 1 thread per process, Adam after every step. Two kinds
//! of step are timed, alternating:
//!
//! - `tree`: [`DataParallel::step`] (each rank's shards, the fixed-tree reduction of
//!   gradients and batch-norm buffers, gradients installed) then Adam;
//! - `allreduce`: the same shard passes, the rank's shard gradients summed locally in
//!   f32, one `MPI_Allreduce(MPI_SUM)` of the f32 gradient vector, scaled by `1/N` and
//!   installed, then Adam: the arithmetic of a conventional data-parallel step, whose
//!   result depends on the world size.
//!
//! Each step waits at a barrier between the shards' passes and the combination, so the
//! combination is timed without waiting for the slowest rank's shards. A second, `light`
//! run repeats both kinds of step (300 times by default) on one 3×4×4 image per shard, so
//! that a step is almost all combination and its distribution is well sampled. Rank 0
//! prints the median (and minimum) step time of each kind and of its combining part,
//! the bytes it sends per step with the tree reduction and with a ring all-reduce of the
//! same gradients, and the overhead of the tree over the all-reduce.

use exactgrad::nn::reference::{ConvNet, ConvNetConfig};
use exactgrad::nn::ModuleExt;
use exactgrad::prelude::*;
use exactgrad_distributed::{run, Comm, DataParallel, DdpConfig, Error, Result, Shard};
use mpi::collective::SystemOperation;
use mpi::traits::CommunicatorCollectives;
use std::time::{Duration, Instant};

#[derive(Clone)]
struct Args {
    steps: usize,
    light_steps: usize,
    warmup: usize,
    batch: usize,
    shards: usize,
    hw: usize,
    threads: usize,
}

fn parse() -> std::result::Result<Args, String> {
    let mut a = Args {
        steps: 30,
        light_steps: 300,
        warmup: 3,
        batch: 32,
        shards: 8,
        hw: 32,
        threads: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v: usize = it
            .next()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{flag} needs a number"))?;
        match flag.as_str() {
            "--steps" => a.steps = v,
            "--light-steps" => a.light_steps = v,
            "--warmup" => a.warmup = v,
            "--batch" => a.batch = v,
            "--shards" => a.shards = v,
            "--hw" => a.hw = v,
            "--threads" => a.threads = v,
            _ => return Err(format!("unknown argument `{flag}`")),
        }
    }
    Ok(a)
}

/// Median and minimum in ms.
fn stats(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    (v[v.len() / 2].as_secs_f64() * 1e3, v[0].as_secs_f64() * 1e3)
}

/// The per-example losses of `shard`'s images.
fn shard_losses<B: Backend>(
    b: &B,
    model: &ConvNet<B>,
    images: &[f32],
    targets: &[i64],
    shard: &Shard,
) -> exactgrad::nn::Result<Tensor<B>> {
    let r = &shard.range;
    let per = images.len() / targets.len();
    let hw = ((per / 3) as f64).sqrt() as usize;
    let x = Tensor::from_slice(b, &images[r.start * per..r.end * per], [r.len(), 3, hw, hw])?;
    let ce = CrossEntropyOptions {
        reduction: Reduction::None,
        ..CrossEntropyOptions::default()
    };
    Ok(model.forward(&x)?.cross_entropy(&targets[r.clone()], ce)?)
}

fn bench<B: Backend>(comm: &Comm, b: &B, a: &Args, label: &str) -> Result<()> {
    let mut rng = Philox::new(0);
    let model = ConvNet::new(b, ConvNetConfig::default(), &mut rng)?;
    let images = Tensor::randn(b, [a.batch, 3, a.hw, a.hw], 0.0, 1.0, &mut rng)?.to_vec()?;
    let targets: Vec<i64> = (0..a.batch).map(|_| i64::from(rng.below(10))).collect();
    let mut ddp = DataParallel::new(comm, &model, DdpConfig::new(a.shards))?;
    let params = model.parameters();
    let mut opt = Adam::new(params.clone(), AdamConfig::new(1e-3))?;
    let grad_len: usize = params.iter().map(|p| p.numel()).sum();

    // The two kinds of step alternate, so that a change of the machine's load affects
    // both alike.
    let local = ddp.local_shards();
    let (mut tree_step, mut tree_comb) = (Vec::new(), Vec::new());
    let (mut ar_step, mut ar_comb) = (Vec::new(), Vec::new());
    let mut bytes = 0;
    for i in 0..a.warmup + a.steps {
        // The tree reduction.
        comm.barrier();
        let t = Instant::now();
        let shards =
            ddp.compute_shards(a.batch, |s| shard_losses(b, &model, &images, &targets, s))?;
        // Time the combination alone: no rank waits for another's shards in it.
        comm.barrier();
        let report = ddp.combine(shards)?;
        opt.step()?;
        if i >= a.warmup {
            tree_step.push(t.elapsed());
            tree_comb.push(report.exchange);
        }
        bytes = report.bytes_sent;

        // The same shards and a plain all-reduce of their f32 gradient sum.
        comm.barrier();
        let t = Instant::now();
        let mut sum = vec![0f32; grad_len];
        for &s in &local {
            for p in &params {
                p.clear_grad();
            }
            let shard = Shard {
                index: s,
                range: ddp.shard_range(s, a.batch),
                step: 0,
            };
            shard_losses(b, &model, &images, &targets, &shard)?
                .sum()?
                .backward()?;
            let mut at = 0;
            for p in &params {
                let g = p.grad().map(|g| g.to_vec()).transpose()?;
                for j in 0..p.numel() {
                    sum[at + j] += g.as_ref().map_or(0.0, |g| g[j]);
                }
                at += p.numel();
            }
        }
        comm.barrier();
        let c = Instant::now();
        let mut total = vec![0f32; grad_len];
        comm.mpi()
            .all_reduce_into(&sum[..], &mut total[..], SystemOperation::sum());
        let mut at = 0;
        for p in &params {
            let n = p.numel();
            let g: Vec<f32> = total[at..at + n]
                .iter()
                .map(|&x| x / a.batch as f32)
                .collect();
            p.set_grad(Some(Tensor::from_vec(b, g, p.dims())?))?;
            at += n;
        }
        let comb = c.elapsed();
        opt.step()?;
        if i >= a.warmup {
            ar_step.push(t.elapsed());
            ar_comb.push(comb);
        }
    }

    if comm.is_root() {
        let p = comm.size();
        let ring = 2 * (p - 1) * grad_len * 4 / p;
        let ((ts, tsm), (tc, tcm)) = (stats(tree_step), stats(tree_comb));
        let ((as_, asm), (ac, acm)) = (stats(ar_step), stats(ar_comb));
        println!(
            "ddp_bench, {label}: {p} processes; conv net {grad_len} parameters; batch {} of 3x{}x{} in {} shards ({} on rank 0); backend {}; {} steps of each kind after {} warm-up",
            a.batch, a.hw, a.hw, a.shards, local.len(), b.name(), a.steps, a.warmup
        );
        println!(
            "  step, median (min)        tree {ts:8.3} ({tsm:.3}) ms   allreduce {as_:8.3} ({asm:.3}) ms   overhead {:+.3} ms ({:+.1}%)",
            ts - as_,
            100.0 * (ts - as_) / as_
        );
        println!(
            "  combining, median (min)   tree {tc:8.3} ({tcm:.3}) ms   allreduce {ac:8.3} ({acm:.3}) ms   difference {:+.3} ms",
            tc - ac
        );
        println!("  bytes sent per step       tree {bytes:>9}   ring all-reduce {ring:>9}");
        println!(
            "RESULT {label} np {p} step_tree_ms {ts:.3} step_allreduce_ms {as_:.3} combine_tree_ms {tc:.3} combine_allreduce_ms {ac:.3} bytes_tree {bytes} bytes_ring {ring}"
        );
    }
    Ok(())
}

fn main() {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("usage: ddp_bench [--steps N] [--light-steps N] [--warmup N] [--batch N] [--shards S] [--hw H] [--threads N]\n{e}");
            std::process::exit(2);
        }
    };
    let result = run(|comm| -> Result<()> {
        let b =
            ExactBackend::with_isa(Isa::best(ComputeMode::Exact), args.threads).map_err(|e| {
                Error::InvalidArgument {
                    op: "ddp_bench",
                    arg: "backend",
                    message: e.to_string(),
                }
            })?;
        bench(comm, &b, &args, "full")?;
        // The same model on one 3x4x4 image per shard: the step is almost all combination.
        let light = Args {
            batch: args.shards,
            hw: 4,
            steps: args.light_steps,
            warmup: 10,
            ..args.clone()
        };
        bench(comm, &b, &light, "light")
    });
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
