//! Trains the digits MLP data-parallel across MPI processes; every world size prints the
//! same final parameter hash.
//!
//! ```text
//! cargo build --release --example ddp_digits
//! mpirun -np 2 target/release/examples/ddp_digits      # two processes
//! target/release/examples/ddp_digits                   # one process: the same hash
//!   [--backend exact|scalar-ref|fast] [--isa avx512|avx2|v128|neon|scalar] [--threads N]
//!   [--shards S] [--shuffle-shards SEED] [--epochs N] [--seed S] [--batch-size N]
//!   [--hidden N] [--lr X] [--save PATH] [--trace DIR]
//! ```
//!
//! The model and data are those of the workspace's `digits` example: Linear(64,
//! hidden)–ReLU–Linear(hidden, 10) initialised from `Philox::new(seed)`, Adam, the fixed
//! 1,437/360 split of the shipped digits, mini-batches shuffled from the seed. Every
//! mini-batch is cut into `--shards` shards (8 by default) that the processes share; the
//! gradients are combined as `docs/distributed.md` describes, so the run on any number
//! of processes ends with the same parameters. (The sharded mean gradient is rounded
//! differently from the one-batch gradient of the `digits` example, so its hashes
//! differ from that example's.) Rank 0 prints; `--save PATH` writes the final
//! parameters (little-endian f32 in `state_dict` order) from rank 0 only. `--trace DIR`
//! records an operation trace per rank, `DIR/rank{R}.trace`; `exactgrad trace diff DIR1
//! DIR2` then compares two runs across world sizes (`docs/debugging.md`).

use exactgrad::nn::data::{DataLoader, Digits};
use exactgrad::nn::metrics::accuracy;
use exactgrad::nn::{Linear, ModuleExt, Relu, Sequential};
use exactgrad::prelude::*;
use exactgrad::trace::{TraceConfig, TraceLevel, TraceModel};
use exactgrad_distributed::{run, Assignment, Comm, DataParallel, DdpConfig, Error, Result};
use std::time::Instant;

/// The command line.
#[derive(Clone, Debug)]
struct Args {
    backend: String,
    isa: Option<Isa>,
    threads: usize,
    shards: usize,
    shuffle_shards: Option<u64>,
    epochs: usize,
    seed: u64,
    batch_size: usize,
    hidden: usize,
    lr: f64,
    save: Option<String>,
    trace: Option<String>,
}

const USAGE: &str =
    "usage: ddp_digits [--backend exact|scalar-ref|fast] [--isa avx512|avx2|v128|neon|scalar] \
[--threads N] [--shards S] [--shuffle-shards SEED] [--epochs N] [--seed S] [--batch-size N] \
[--hidden N] [--lr X] [--save PATH] [--trace DIR]";

fn parse_args() -> std::result::Result<Args, String> {
    let mut a = Args {
        backend: "exact".into(),
        isa: None,
        threads: 1,
        shards: 8,
        shuffle_shards: None,
        epochs: 20,
        seed: 0,
        batch_size: 32,
        hidden: 128,
        lr: 5e-3,
        save: None,
        trace: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "-h" || flag == "--help" {
            return Err(USAGE.into());
        }
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        fn num<T: std::str::FromStr>(flag: &str, v: &str) -> std::result::Result<T, String> {
            v.parse()
                .map_err(|_| format!("{flag}: `{v}` is not a valid number"))
        }
        match flag.as_str() {
            "--backend" => a.backend = value,
            "--isa" => {
                a.isa = Some(
                    Isa::ALL
                        .into_iter()
                        .find(|i| i.name() == value)
                        .ok_or_else(|| format!("unknown ISA path `{value}`"))?,
                )
            }
            "--threads" => a.threads = num(&flag, &value)?,
            "--shards" => a.shards = num(&flag, &value)?,
            "--shuffle-shards" => a.shuffle_shards = Some(num(&flag, &value)?),
            "--epochs" => a.epochs = num(&flag, &value)?,
            "--seed" => a.seed = num(&flag, &value)?,
            "--batch-size" => a.batch_size = num(&flag, &value)?,
            "--hidden" => a.hidden = num(&flag, &value)?,
            "--lr" => a.lr = num(&flag, &value)?,
            "--save" => a.save = Some(value),
            "--trace" => a.trace = Some(value),
            _ => return Err(format!("unknown argument `{flag}`\n{USAGE}")),
        }
    }
    Ok(a)
}

fn train<B: Backend>(comm: &Comm, b: &B, args: &Args) -> Result<()> {
    let start = Instant::now();
    let split = Digits::bundled().split()?;
    let mut rng = Philox::new(args.seed);
    let model = Sequential::new()
        .push(Linear::new(b, Digits::FEATURES, args.hidden, &mut rng)?)
        .push(Relu)
        .push(Linear::new(b, args.hidden, Digits::CLASSES, &mut rng)?);
    let assignment = match args.shuffle_shards {
        Some(seed) => Assignment::Shuffled { seed },
        None => Assignment::Blocked,
    };
    let mut ddp = DataParallel::new(
        comm,
        &model,
        DdpConfig::new(args.shards).with_assignment(assignment),
    )?;
    let mut opt = Adam::new(model.parameters(), AdamConfig::new(args.lr))?;
    let trace = match &args.trace {
        Some(dir) => {
            let path = std::path::Path::new(dir).join(format!("rank{}.trace", comm.rank()));
            let config = TraceConfig::new(path)
                .level(TraceLevel::Ops)
                .seed(args.seed)
                .rank(comm.rank(), comm.size())
                .model(&model);
            Some(config.start().map_err(exactgrad::Error::from)?)
        }
        None => None,
    };
    // Every rank draws the same batches; each computes only its shards' examples.
    let loader = DataLoader::new(b, &split.train, args.batch_size)?.shuffle(args.seed ^ 0x5eed);
    let say = |line: String| {
        if comm.is_root() {
            println!("{line}");
        }
    };
    say(format!(
        "ddp_digits: {} processes, {} shards per batch ({} on rank 0); MLP 64-{}-10, Adam lr {}, batch {}, {} epochs, seed {}; backend {} ({:?} mode)",
        comm.size(),
        args.shards,
        ddp.local_shards().len(),
        args.hidden,
        args.lr,
        args.batch_size,
        args.epochs,
        args.seed,
        b.name(),
        b.mode()
    ));
    let mut bytes = 0;
    let (mut compute, mut exchange) = (0.0, 0.0);
    let ce = CrossEntropyOptions {
        reduction: Reduction::None,
        ..CrossEntropyOptions::default()
    };
    for epoch in 0..args.epochs {
        let mut total = 0.0f64;
        for indices in loader.sampler().batches(epoch as u64)? {
            let report = ddp.step(indices.len(), |shard| -> exactgrad::nn::Result<_> {
                let batch = split.train.batch(b, &indices[shard.range.clone()])?;
                Ok(model
                    .forward(&batch.inputs)?
                    .cross_entropy(&batch.targets, ce)?)
            })?;
            opt.step()?;
            total += f64::from(report.loss) * report.examples as f64;
            bytes = report.bytes_sent;
            compute += report.compute.as_secs_f64();
            exchange += report.exchange.as_secs_f64();
        }
        say(format!(
            "epoch {:>3}/{}: loss {:.6}",
            epoch + 1,
            args.epochs,
            total / split.train.len() as f64
        ));
    }
    if let Some(t) = trace {
        let summary = t.finish().map_err(exactgrad::Error::from)?;
        say(format!(
            "trace: {} steps, {} records, {} bytes on rank 0",
            summary.steps, summary.records, summary.bytes
        ));
    }
    let params = model.parameters();
    let hash = hash_tensors(&params.iter().collect::<Vec<_>>())?;
    let test_accuracy = {
        let _guard = no_grad();
        let (x, y) = split.test.to_tensors(b)?;
        accuracy(&model.forward(&x)?, &y)?
    };
    say(format!(
        "test accuracy: {test_accuracy:.4} ({}/{})",
        (test_accuracy * Digits::TEST_LEN as f64).round(),
        Digits::TEST_LEN
    ));
    say(format!(
        "final parameter hash: {hash:#018x} ({} parameters)",
        model.num_parameters()
    ));
    say(format!(
        "rank 0: {} bytes sent per step; {:.2} s computing shards, {:.2} s combining; {:.2} s in all",
        bytes,
        compute,
        exchange,
        start.elapsed().as_secs_f64()
    ));
    if let Some(path) = &args.save {
        // Written once, by rank 0; a failure there is an error on every rank.
        comm.run_on_root(|| -> std::result::Result<(), String> {
            let mut out = Vec::new();
            for p in &params {
                p.to_vec()
                    .map_err(|e| e.to_string())?
                    .iter()
                    .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
            }
            std::fs::write(path, out).map_err(|e| e.to_string())
        })?;
        say(format!("saved the parameters to {path}"));
    }
    Ok(())
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let result = run(|comm| -> Result<()> {
        let backend_error = |e: &dyn std::fmt::Display| Error::InvalidArgument {
            op: "ddp_digits",
            arg: "--isa",
            message: e.to_string(),
        };
        match args.backend.as_str() {
            "scalar-ref" => train(comm, &ScalarRefBackend, &args),
            "exact" => {
                let isa = args.isa.unwrap_or_else(|| Isa::best(ComputeMode::Exact));
                let b = ExactBackend::with_isa(isa, args.threads).map_err(|e| backend_error(&e))?;
                train(comm, &b, &args)
            }
            "fast" => {
                let isa = args.isa.unwrap_or_else(|| Isa::best(ComputeMode::Fast));
                let b = FastBackend::with_isa(isa, args.threads).map_err(|e| backend_error(&e))?;
                train(comm, &b, &args)
            }
            other => Err(Error::InvalidArgument {
                op: "ddp_digits",
                arg: "--backend",
                message: format!("unknown backend `{other}`; choose exact, scalar-ref or fast"),
            }),
        }
    });
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
