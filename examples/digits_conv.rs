//! Trains a small conv net on the shipped 8×8 digits, with a training checkpoint after
//! every epoch and `--resume`: a run that is interrupted and resumed ends with the same
//! parameter hash as one that never stopped.
//!
//! ```text
//! cargo run --release --example digits_conv -- [--epochs N] [--seed S] [--batch-size N]
//!     [--lr X] [--backend scalar-ref|exact|fast] [--threads N]
//!     [--checkpoint FILE] [--resume] [--stop-after EPOCHS] [--plot FILE.svg] [--csv FILE.csv]
//! ```
//!
//! The model is conv(1→8, 3×3, pad 1)–BN–ReLU–maxpool 2 – conv(8→16)–BN–ReLU–maxpool 2 –
//! linear(64→10), trained with AdamW under a linear warm-up (one epoch) followed by cosine
//! annealing, on mini-batches shuffled from the seed. After every epoch the model,
//! optimizer, scheduler, data-loader position and the curves so far are saved atomically
//! to the checkpoint file (default `digits_conv.safetensors`). `--resume` continues from
//! it; `--stop-after K` stops after epoch K (an interruption, for trying `--resume`).

use exactgrad::nn::checkpoint::TrainingCheckpoint;
use exactgrad::nn::data::{ClassificationData, DataLoader, Digits};
use exactgrad::nn::metrics::accuracy;
use exactgrad::nn::optim::{SchedulerConfig, SequentialLr};
use exactgrad::nn::{BatchNorm2d, Conv2d, Linear, Module};
use exactgrad::prelude::*;
use std::path::PathBuf;
use std::time::Instant;

use exactgrad::train::{History, Progress};

/// The conv net. `#[derive(Module)]` names its children once, from the fields; its
/// parameters, buffers, training mode and state dict follow from that.
#[derive(Module)]
struct DigitsConvNet<B: Backend> {
    conv1: Conv2d<B>,
    bn1: BatchNorm2d<B>,
    conv2: Conv2d<B>,
    bn2: BatchNorm2d<B>,
    fc: Linear<B>,
}

impl<B: Backend> DigitsConvNet<B> {
    fn new(b: &B, seed: u64) -> exactgrad::Result<Self> {
        let mut rng = Philox::new(seed);
        let conv = |i, o| Conv2dConfig {
            padding: [1, 1],
            ..Conv2dConfig::new(i, o, [3, 3])
        };
        Ok(Self {
            conv1: Conv2d::new(b, conv(1, 8), &mut rng)?,
            bn1: BatchNorm2d::new(b, 8)?,
            conv2: Conv2d::new(b, conv(8, 16), &mut rng)?,
            bn2: BatchNorm2d::new(b, 16)?,
            fc: Linear::new(b, 64, Digits::CLASSES, &mut rng)?,
        })
    }

    /// Logits `[N, 10]` of images `[N, 64]` (reshaped to `[N, 1, 8, 8]`).
    fn forward(&self, x: &Tensor<B>) -> exactgrad::Result<Tensor<B>> {
        let n = x.dims()[0];
        let pool = MaxPool2dOptions::new([2, 2]);
        let x = x.reshape([n, 1, 8, 8])?;
        let x = self
            .bn1
            .forward(&self.conv1.forward(&x)?)?
            .relu()?
            .max_pool2d(pool)?;
        let x = self
            .bn2
            .forward(&self.conv2.forward(&x)?)?
            .relu()?
            .max_pool2d(pool)?;
        self.fc.forward(&x.flatten(1, -1)?)
    }
}

/// The command line.
#[derive(Clone, Debug)]
struct Args {
    epochs: usize,
    seed: u64,
    batch_size: usize,
    lr: f64,
    backend: String,
    threads: usize,
    checkpoint: PathBuf,
    resume: bool,
    stop_after: Option<usize>,
    plot: Option<PathBuf>,
    csv: Option<PathBuf>,
}

const USAGE: &str = "usage: digits_conv [--epochs N] [--seed S] [--batch-size N] [--lr X] \
[--backend scalar-ref|exact|fast] [--threads N] [--checkpoint FILE] [--resume] \
[--stop-after EPOCHS] [--plot FILE.svg] [--csv FILE.csv]";

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        epochs: 6,
        seed: 0,
        batch_size: 32,
        lr: 5e-3,
        backend: "scalar-ref".into(),
        threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
        checkpoint: PathBuf::from("digits_conv.safetensors"),
        resume: false,
        stop_after: None,
        plot: None,
        csv: None,
    };
    let mut it = std::env::args().skip(1);
    fn num<T: std::str::FromStr>(flag: &str, v: Option<String>) -> Result<T, String> {
        let v = v.ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        v.parse()
            .map_err(|_| format!("{flag}: `{v}` is not a valid number"))
    }
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--epochs" => a.epochs = num(&flag, it.next())?,
            "--seed" => a.seed = num(&flag, it.next())?,
            "--batch-size" => a.batch_size = num(&flag, it.next())?,
            "--lr" => a.lr = num(&flag, it.next())?,
            "--threads" => a.threads = num(&flag, it.next())?,
            "--stop-after" => a.stop_after = Some(num(&flag, it.next())?),
            "--backend" => a.backend = it.next().ok_or(USAGE)?,
            "--checkpoint" => a.checkpoint = it.next().ok_or(USAGE)?.into(),
            "--plot" => a.plot = Some(it.next().ok_or(USAGE)?.into()),
            "--csv" => a.csv = Some(it.next().ok_or(USAGE)?.into()),
            "--resume" => a.resume = true,
            "-h" | "--help" => return Err(USAGE.into()),
            _ => return Err(format!("unknown argument `{flag}`\n{USAGE}")),
        }
    }
    Ok(a)
}

/// The run's hyper-parameters as stored in (and checked against) the checkpoint.
fn run_config(a: &Args) -> String {
    format!(
        "epochs={};seed={};batch_size={};lr={:?}",
        a.epochs, a.seed, a.batch_size, a.lr
    )
}

fn evaluate<B: Backend>(
    b: &B,
    model: &mut DigitsConvNet<B>,
    data: &ClassificationData,
) -> exactgrad::Result<f64> {
    model.eval();
    let _guard = no_grad();
    let (x, y) = data.to_tensors(b)?;
    let acc = accuracy(&model.forward(&x)?, &y);
    model.train();
    acc
}

fn run<B: Backend>(b: &B, a: &Args) -> exactgrad::Result<()> {
    let start = Instant::now();
    let split = Digits::bundled().split()?;
    let loader = DataLoader::new(b, &split.train, a.batch_size)?.shuffle(a.seed ^ 0x5eed);
    let per_epoch = loader.num_batches();
    let mut model = DigitsConvNet::new(b, a.seed)?;
    let mut opt = AdamW::new(model.parameters(), AdamWConfig::new(a.lr))?;
    let schedules: Vec<SchedulerConfig> = vec![
        LinearLrConfig {
            start_factor: 0.1,
            end_factor: 1.0,
            total_iters: per_epoch as u64,
        }
        .into(),
        CosineAnnealingLrConfig {
            t_max: ((a.epochs.max(2) - 1) * per_epoch) as u64,
            eta_min: 0.0,
        }
        .into(),
    ];
    let mut sched = SequentialLr::new(&mut opt, schedules, vec![per_epoch as u64])?;
    println!(
        "digits_conv: {} parameters, AdamW lr {} (warm-up, cosine), batch {}, {} epochs, seed {}; backend {} ({:?} mode)",
        model.num_parameters(),
        a.lr,
        a.batch_size,
        a.epochs,
        a.seed,
        b.name(),
        b.mode()
    );

    let mut curves = History::new("epoch", &["train_loss", "test_accuracy"]);
    if a.resume && a.checkpoint.exists() {
        let ckpt = TrainingCheckpoint::load(&a.checkpoint)?;
        if ckpt.value("config") != Some(run_config(a).as_str()) {
            return Err(exactgrad::Error::invalid(
                "digits_conv",
                "--resume",
                format!(
                    "{} was written by a run with {:?}, this one has {}",
                    a.checkpoint.display(),
                    ckpt.value("config").unwrap_or("no configuration"),
                    run_config(a)
                ),
            ));
        }
        TrainingState::new(&model, &mut opt)
            .scheduler(&mut sched)
            .loader(&loader)
            .restore(&ckpt)?;
        if let Some(text) = ckpt.value("curves") {
            curves = History::from_csv(text)?;
        }
        let pos = loader.position();
        println!(
            "resumed from {} at epoch {}, batch {}",
            a.checkpoint.display(),
            pos.epoch,
            pos.batch
        );
        for (epoch, r) in curves.rows() {
            println!(
                "epoch {epoch:>3}/{}: loss {:.6}, test accuracy {:.4} (before the interruption)",
                a.epochs, r[0], r[1]
            );
        }
    } else if a.resume {
        println!(
            "no checkpoint at {}: starting from scratch",
            a.checkpoint.display()
        );
    }

    let total = (a.epochs * per_epoch) as u64;
    let pos = loader.position();
    let done = pos.epoch * per_epoch as u64 + pos.batch as u64;
    let progress = Progress::new(total, done.min(total));
    let mut stopped = false;
    while loader.epoch() < a.epochs as u64 {
        let epoch = loader.epoch();
        let mut sum = 0.0f64;
        let mut seen = 0usize;
        for batch in &loader {
            let batch = batch?;
            let loss = model
                .forward(&batch.inputs)?
                .cross_entropy(&batch.targets, CrossEntropyOptions::default())?;
            opt.clear_grad();
            loss.backward()?;
            opt.step()?;
            sched.step(&mut opt)?;
            let l = f64::from(loss.item()?);
            sum += l * batch.targets.len() as f64;
            seen += batch.targets.len();
            progress.step(l);
        }
        let epoch = epoch as usize + 1;
        let (loss, test_accuracy) = (
            sum / seen.max(1) as f64,
            evaluate(b, &mut model, &split.test)?,
        );
        curves.push(epoch, &[loss, test_accuracy])?;
        // The checkpoint of this epoch: everything the next one needs.
        let mut ckpt = TrainingState::new(&model, &mut opt)
            .scheduler(&mut sched)
            .loader(&loader)
            .capture()?;
        ckpt.set_value("config", run_config(a));
        ckpt.set_value("curves", curves.to_csv());
        ckpt.save(&a.checkpoint)?;
        progress.println(&format!(
            "epoch {:>3}/{}: loss {:.6}, test accuracy {:.4}, lr {:.2e}; checkpoint {}",
            epoch,
            a.epochs,
            loss,
            test_accuracy,
            opt.lr(),
            a.checkpoint.display()
        ));
        if a.stop_after == Some(epoch) && epoch < a.epochs {
            stopped = true;
            break;
        }
    }
    progress.finish();
    if let Some(path) = &a.csv {
        curves.write_csv(path)?;
        println!("curves (CSV): {}", path.display());
    }
    if let Some(path) = &a.plot {
        let title = format!("digits conv net, {} ({:?} mode)", b.name(), b.mode());
        curves.write_svg(path, &title)?;
        println!("plot (SVG): {}", path.display());
    }
    let mut state = model.parameters();
    state.extend(model.named_buffers().into_iter().map(|(_, t)| t));
    let hash = hash_tensors(&state.iter().collect::<Vec<_>>())?;
    if stopped {
        println!(
            "stopped after epoch {} (run again with --resume to continue)",
            pos.epoch
        );
    } else {
        println!(
            "test accuracy: {:.4}",
            curves.rows().last().map_or(0.0, |(_, r)| r[1])
        );
    }
    println!("parameter and buffer hash: {hash:#018x}");
    println!("time: {:.2} s", start.elapsed().as_secs_f64());
    Ok(())
}

fn main() -> exactgrad::Result<()> {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    match args.backend.as_str() {
        "scalar-ref" => run(&ScalarRefBackend, &args),
        "exact" => run(
            &ExactBackend::with_isa(Isa::best(ComputeMode::Exact), args.threads)?,
            &args,
        ),
        "fast" => run(
            &FastBackend::with_isa(Isa::best(ComputeMode::Fast), args.threads)?,
            &args,
        ),
        other => {
            eprintln!("unknown backend `{other}`\n{USAGE}");
            std::process::exit(2);
        }
    }
}
