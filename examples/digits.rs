//! Trains a small MLP on the shipped 8×8 handwritten digits and reports the test accuracy.
//!
//! ```text
//! cargo run --release --example digits -- [--backend NAME] [--epochs N] [--seed S]
//!                                         [--batch-size N] [--hidden N] [--lr X]
//!                                         [--plot FILE.svg] [--csv FILE.csv]
//! ```
//!
//! The model is Linear(64, hidden)–ReLU–Linear(hidden, 10), initialised from
//! `Philox::new(seed)` as PyTorch initialises `nn.Linear`, trained with Adam on the mean
//! cross entropy over mini-batches shuffled from the seed, on the fixed 1,437/360 split
//! of `exactgrad::nn::data::Digits`. It prints the gradient hash of the first step (all
//! parameter gradients in `state_dict` order, see `docs/arithmetic.md`), the mean loss of
//! every epoch with the test accuracy after it, and a hash of the final parameters. In
//! exact mode the hashes are the same on every backend, path and thread count. On a
//! terminal a progress bar shows the steps, steps/s, the loss and the ETA; `--plot`
//! draws the loss and accuracy curves as SVG and `--csv` writes them as CSV.
//!
//! The training loop is generic over the backend; `main` picks one by name.

use exactgrad::nn::data::{DataLoader, Digits};
use exactgrad::nn::metrics::accuracy;
use exactgrad::nn::optim::{Adam, AdamConfig, Optimizer};
use exactgrad::nn::{Linear, Relu, Sequential};
use exactgrad::prelude::*;
use std::path::PathBuf;
use std::time::Instant;

use exactgrad::train::{History, Progress};

/// Hyper-parameters of a training run.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Passes over the training set.
    pub epochs: usize,
    /// Seeds the initial weights and the mini-batch order.
    pub seed: u64,
    /// Images per mini-batch.
    pub batch_size: usize,
    /// Width of the hidden layer.
    pub hidden: usize,
    /// Adam's learning rate.
    pub lr: f64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            epochs: 20,
            seed: 0,
            batch_size: 32,
            hidden: 128,
            lr: 5e-3,
        }
    }
}

/// What a run reports as it goes.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The first optimizer step's gradients were computed; their hash.
    FirstStep {
        /// `hash_tensors` over every parameter gradient in `state_dict` order.
        gradient_hash: u64,
    },
    /// An optimizer step ended.
    Step {
        /// 1-based step number.
        step: usize,
        /// Steps in the whole run.
        total: usize,
        /// The loss of the step's mini-batch.
        loss: f64,
    },
    /// An epoch ended.
    Epoch {
        /// 1-based epoch number.
        epoch: usize,
        /// Mean cross entropy over the epoch's training images.
        loss: f64,
        /// Accuracy on the test images after the epoch.
        test_accuracy: f64,
    },
}

/// The outcome of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// Mean training loss of every epoch.
    pub epoch_losses: Vec<f64>,
    /// Accuracy on the 360 test images.
    pub test_accuracy: f64,
    /// Accuracy on the 1,437 training images.
    pub train_accuracy: f64,
    /// Gradient hash of the first step.
    pub first_step_hash: u64,
    /// Hash of the trained parameters in `state_dict` order.
    pub parameter_hash: u64,
    /// Number of parameter elements.
    pub parameters: usize,
}

/// The MLP, initialised from `Philox::new(seed)`.
pub fn model<B: Backend>(
    backend: &B,
    hidden: usize,
    seed: u64,
) -> exactgrad::nn::Result<Sequential<B>> {
    let mut rng = Philox::new(seed);
    Ok(Sequential::new()
        .push(Linear::new(backend, Digits::FEATURES, hidden, &mut rng)?)
        .push(Relu)
        .push(Linear::new(backend, hidden, Digits::CLASSES, &mut rng)?))
}

fn hash_of<B: Backend>(tensors: &[Tensor<B>]) -> exactgrad::Result<u64> {
    hash_tensors(&tensors.iter().collect::<Vec<_>>())
}

/// Trains on the fixed split with `backend`, reporting progress through `on_event`.
pub fn train<B: Backend>(
    backend: &B,
    config: &Config,
    mut on_event: impl FnMut(&Event),
) -> exactgrad::nn::Result<Report> {
    let split = Digits::bundled().split()?;
    let model = model(backend, config.hidden, config.seed)?;
    let params = model.parameters();
    let mut opt = Adam::new(params.clone(), AdamConfig::new(config.lr))?;
    // The shuffle stream is derived from the seed but distinct from the weights' stream.
    let loader =
        DataLoader::new(backend, &split.train, config.batch_size)?.shuffle(config.seed ^ 0x5eed);

    let eval = |data: &exactgrad::nn::data::ClassificationData| -> exactgrad::nn::Result<f64> {
        let _guard = no_grad();
        let (x, y) = data.to_tensors(backend)?;
        accuracy(&model.forward(&x)?, &y)
    };
    let total = config.epochs * loader.num_batches();
    let mut step = 0;
    let mut first_step_hash = None;
    let mut epoch_losses = Vec::with_capacity(config.epochs);
    for epoch in 0..config.epochs {
        let mut sum = 0.0f64;
        for batch in loader.batches_of_epoch(epoch as u64) {
            let batch = batch?;
            opt.clear_grad();
            let logits = model.forward(&batch.inputs)?;
            let loss = logits.cross_entropy(&batch.targets, CrossEntropyOptions::default())?;
            loss.backward()?;
            if first_step_hash.is_none() {
                let grads: Vec<Tensor<B>> = params.iter().filter_map(Tensor::grad).collect();
                let gradient_hash = hash_of(&grads)?;
                first_step_hash = Some(gradient_hash);
                on_event(&Event::FirstStep { gradient_hash });
            }
            opt.step()?;
            let batch_loss = f64::from(loss.item()?);
            sum += batch_loss * batch.targets.len() as f64;
            step += 1;
            on_event(&Event::Step {
                step,
                total,
                loss: batch_loss,
            });
        }
        let loss = sum / split.train.len() as f64;
        epoch_losses.push(loss);
        on_event(&Event::Epoch {
            epoch: epoch + 1,
            loss,
            test_accuracy: eval(&split.test)?,
        });
    }

    Ok(Report {
        epoch_losses,
        test_accuracy: eval(&split.test)?,
        train_accuracy: eval(&split.train)?,
        first_step_hash: first_step_hash.unwrap_or(0),
        parameter_hash: hash_of(&params)?,
        parameters: model.num_parameters(),
    })
}

/// The backends this example can run on, by command-line name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendChoice {
    /// `ScalarRefBackend`: the exact scalar oracle.
    ScalarRef,
    /// `ExactBackend`: SIMD, threads, the same bits as the oracle.
    Exact,
    /// `FastBackend`: SIMD with FMA, threads.
    Fast,
    /// `FastScalarRefBackend`: the fast-mode scalar reference.
    ScalarRefFast,
}

impl BackendChoice {
    /// Every choice with its name, in the order `--help` lists them.
    pub const ALL: &'static [(&'static str, BackendChoice)] = &[
        ("scalar-ref", BackendChoice::ScalarRef),
        ("exact", BackendChoice::Exact),
        ("fast", BackendChoice::Fast),
        ("scalar-ref-fast", BackendChoice::ScalarRefFast),
    ];

    /// The choice called `name`, or an error listing the names.
    pub fn parse(name: &str) -> Result<Self, String> {
        Self::ALL
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, c)| c)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|(n, _)| *n).collect();
                format!(
                    "unknown backend `{name}`; choose one of: {}",
                    names.join(", ")
                )
            })
    }
}

/// Parsed command line.
#[derive(Clone, Debug, PartialEq)]
pub struct Args {
    /// Which backend to train on.
    pub backend: BackendChoice,
    /// ISA path of the exact and fast backends (`None`: the best this CPU has).
    pub isa: Option<Isa>,
    /// Threads of the exact and fast backends (`None`: one per core).
    pub threads: Option<usize>,
    /// The run's hyper-parameters.
    pub config: Config,
    /// Where to draw the loss and accuracy curves (SVG).
    pub plot: Option<PathBuf>,
    /// Where to write the curves as CSV.
    pub csv: Option<PathBuf>,
    /// `--help` was given.
    pub help: bool,
}

const USAGE: &str =
    "usage: digits [--backend NAME] [--isa avx512|avx2|v128|neon|scalar] [--threads N] \
[--epochs N] [--seed S] [--batch-size N] [--hidden N] [--lr X] [--plot FILE.svg] [--csv FILE.csv]";

/// Parses the arguments after the program name.
pub fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Args, String> {
    let mut out = Args {
        backend: BackendChoice::ScalarRef,
        isa: None,
        threads: None,
        config: Config::default(),
        plot: None,
        csv: None,
        help: false,
    };
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
        if flag == "-h" || flag == "--help" {
            out.help = true;
            continue;
        }
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
        };
        fn num<T: std::str::FromStr>(flag: &str, v: String) -> Result<T, String> {
            v.parse()
                .map_err(|_| format!("{flag}: `{v}` is not a valid number"))
        }
        match flag.as_str() {
            "--backend" => out.backend = BackendChoice::parse(&value()?)?,
            "--isa" => {
                let v = value()?;
                out.isa = Some(
                    Isa::ALL
                        .into_iter()
                        .find(|i| i.name() == v)
                        .ok_or_else(|| {
                            let names: Vec<&str> = Isa::ALL.iter().map(|i| i.name()).collect();
                            format!(
                                "unknown ISA path `{v}`; choose one of: {}",
                                names.join(", ")
                            )
                        })?,
                )
            }
            "--threads" => out.threads = Some(num(&flag, value()?)?),
            "--epochs" => out.config.epochs = num(&flag, value()?)?,
            "--seed" => out.config.seed = num(&flag, value()?)?,
            "--batch-size" => out.config.batch_size = num(&flag, value()?)?,
            "--hidden" => out.config.hidden = num(&flag, value()?)?,
            "--lr" => out.config.lr = num(&flag, value()?)?,
            "--plot" => out.plot = Some(PathBuf::from(value()?)),
            "--csv" => out.csv = Some(PathBuf::from(value()?)),
            _ => return Err(format!("unknown argument `{arg}`\n{USAGE}")),
        }
    }
    Ok(out)
}

fn run<B: Backend>(backend: &B, args: &Args) -> exactgrad::nn::Result<()> {
    let config = &args.config;
    let start = Instant::now();
    println!(
        "digits: {} train / {} test images; MLP 64-{}-10, Adam lr {}, batch {}, {} epochs, seed {}; backend {} ({:?} mode)",
        Digits::TRAIN_LEN,
        Digits::TEST_LEN,
        config.hidden,
        config.lr,
        config.batch_size,
        config.epochs,
        config.seed,
        backend.name(),
        backend.mode(),
    );
    let mut progress: Option<Progress> = None;
    let mut curves = History::new("epoch", &["train_loss", "test_accuracy"]);
    let mut pushed = Ok(());
    let report = train(backend, config, |event| match event {
        Event::FirstStep { gradient_hash } => {
            println!("first-step gradient hash: {gradient_hash:#018x}")
        }
        Event::Step { total, loss, .. } => progress
            .get_or_insert_with(|| Progress::new(*total as u64, 0))
            .step(*loss),
        Event::Epoch {
            epoch,
            loss,
            test_accuracy,
        } => {
            let line = format!(
                "epoch {epoch:>3}/{}: loss {loss:.6}, test accuracy {test_accuracy:.4}",
                config.epochs
            );
            match &progress {
                Some(p) => p.println(&line),
                None => println!("{line}"),
            }
            if pushed.is_ok() {
                pushed = curves.push(*epoch, &[*loss, *test_accuracy]);
            }
        }
    })?;
    pushed?;
    if let Some(p) = &progress {
        p.finish();
    }
    println!("train accuracy: {:.4}", report.train_accuracy);
    println!(
        "test accuracy: {:.4} ({}/{})",
        report.test_accuracy,
        (report.test_accuracy * Digits::TEST_LEN as f64).round(),
        Digits::TEST_LEN
    );
    println!(
        "final parameter hash: {:#018x} ({} parameters)",
        report.parameter_hash, report.parameters
    );
    if let Some(path) = &args.csv {
        curves.write_csv(path)?;
        println!("curves (CSV): {}", path.display());
    }
    if let Some(path) = &args.plot {
        let title = format!("digits MLP, {} ({:?} mode)", backend.name(), backend.mode());
        curves.write_svg(path, &title)?;
        println!("plot (SVG): {}", path.display());
    }
    println!("time: {:.2} s", start.elapsed().as_secs_f64());
    Ok(())
}

fn main() {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    if args.help {
        let names: Vec<&str> = BackendChoice::ALL.iter().map(|(n, _)| *n).collect();
        println!(
            "{USAGE}\nbackends: {} (default scalar-ref)",
            names.join(", ")
        );
        return;
    }
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let result = match args.backend {
        BackendChoice::ScalarRef => run(&ScalarRefBackend, &args),
        BackendChoice::ScalarRefFast => run(&FastScalarRefBackend, &args),
        BackendChoice::Exact => {
            let isa = args.isa.unwrap_or_else(|| Isa::best(ComputeMode::Exact));
            match ExactBackend::with_isa(isa, threads) {
                Ok(b) => run(&b, &args),
                Err(e) => {
                    eprintln!("error: {e}");
                    std::process::exit(2);
                }
            }
        }
        BackendChoice::Fast => {
            let isa = args.isa.unwrap_or_else(|| Isa::best(ComputeMode::Fast));
            match FastBackend::with_isa(isa, threads) {
                Ok(b) => run(&b, &args),
                Err(e) => {
                    eprintln!("error: {e}");
                    std::process::exit(2);
                }
            }
        }
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
