//! Trains a character-level GPT-style language model on Jane Austen's *Pride and
//! Prejudice* and prints generated text as it learns.
//!
//! ```text
//! cargo run --release --example char_gpt -- [--backend NAME] [--threads N] [--steps N]
//!     [--seed S] [--batch-size N] [--context N] [--width N] [--heads N] [--layers N]
//!     [--lr X] [--report-every N] [--sample-len N] [--temperature X]
//!     [--checkpoint FILE] [--resume] [--stop-after STEPS] [--text FILE]
//! ```
//!
//! The text is `testdata/text/pride_and_prejudice.txt` (684,768 bytes of ASCII; public
//! domain, taken from Debian's `r-cran-janeaustenr` package by `tools/austen_text.py`;
//! `testdata/text/README.md` gives the package, version, source and licence). Its
//! distinct bytes, sorted, are the vocabulary (75 characters). The first 90 % of the text
//! is for training, the rest for a held-out loss.
//!
//! The model is `nn::reference::Gpt`: token and learned position embeddings, pre-norm
//! decoder blocks with causal self-attention (each a `TransformerEncoderLayer` with
//! `norm_first`, GELU and the causal mask, the block of GPT-2), a final layer norm and a
//! linear head; by default 4 blocks of width 128 with 4 heads and a feed-forward width
//! of 512 (0.8 M parameters), on windows of 64 characters. It trains with AdamW (a
//! linear warm-up over the first 5 % of the steps, then cosine annealing) on the mean
//! cross entropy of every next character of a batch of windows whose starts are drawn
//! from a `Philox` stream of the seed. Every `--report-every` steps it prints the mean
//! training loss since the last report, the held-out loss on 16 fixed windows, and a
//! sample: the text that follows a fixed prompt, drawn character by character from the
//! model's distribution at `--temperature` (0: greedy) with a random stream of its own
//! (so sampling never changes the training). At the end it prints a hash of the
//! parameters (`hash_tensors`, `state_dict` order): in exact mode the same on every
//! backend, ISA path and thread count.
//!
//! After every report (and when stopped) the whole training state — parameters,
//! AdamW's moments, the scheduler, the batch stream and the step — goes to the
//! checkpoint file (`TrainingState`, default `char_gpt.safetensors`). `--resume`
//! continues from it, and the run ends with the same hash as one that was never
//! interrupted; `--stop-after K` stops after step K (an interruption, for trying
//! `--resume`). `tests/training/char_gpt.rs` checks this on a tiny configuration.
//!
//! `tools/bench_torch.py --shapes models --models char_gpt` times the same model's
//! training step in PyTorch; this example prints its own mean step time at the end
//! (wall time, and the calling thread's CPU time, which at `--threads 1` is the whole
//! step's and does not count other processes' time slices: compare it with the
//! script's "caller cpu mean" at one thread).
//!
//! The training loop ([`train`]) is generic over the backend; `main` picks one by name
//! (default `exact`: `ExactBackend`, one thread per core).

use exactgrad::nn::checkpoint::TrainingCheckpoint;
use exactgrad::nn::reference::{Gpt, GptConfig};
use exactgrad::prelude::*;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The bundled text, relative to the repository's root.
pub const TEXT: &str = "testdata/text/pride_and_prejudice.txt";

/// The prompt that every sample continues.
pub const PROMPT: &str = "It is a truth universally acknowledged, that ";

/// Windows of the held-out text whose mean loss is reported.
const HELD_OUT_WINDOWS: usize = 16;

/// Hyper-parameters of a run (stored in the checkpoint and checked on `--resume`).
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Optimizer steps in the whole run.
    pub steps: usize,
    /// Seeds the initial weights, the batches and the samples.
    pub seed: u64,
    /// Windows per batch.
    pub batch_size: usize,
    /// Characters per window (the model's context).
    pub context: usize,
    /// Model width.
    pub width: usize,
    /// Attention heads.
    pub heads: usize,
    /// Decoder blocks.
    pub layers: usize,
    /// AdamW's peak learning rate.
    pub lr: f64,
    /// Steps between reports, samples and checkpoints.
    pub report_every: usize,
    /// Characters per sample.
    pub sample_len: usize,
    /// Sampling temperature (0: always the most likely character).
    pub temperature: f32,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            steps: 600,
            seed: 0,
            batch_size: 16,
            context: 64,
            width: 128,
            heads: 4,
            layers: 4,
            lr: 3e-3,
            report_every: 100,
            sample_len: 160,
            temperature: 0.8,
        }
    }
}

impl Config {
    /// The model's sizes for a vocabulary of `vocab` characters.
    pub fn model(&self, vocab: usize) -> GptConfig {
        GptConfig {
            vocab,
            context: self.context,
            d_model: self.width,
            nhead: self.heads,
            layers: self.layers,
            dim_feedforward: 4 * self.width,
        }
    }

    /// The settings a resumed run must share with the one that wrote the checkpoint
    /// (everything but the reporting).
    fn key(&self) -> String {
        format!(
            "steps={};seed={};batch_size={};context={};width={};heads={};layers={};lr={:?}",
            self.steps,
            self.seed,
            self.batch_size,
            self.context,
            self.width,
            self.heads,
            self.layers,
            self.lr
        )
    }
}

/// A text as token indices, split into training and held-out parts.
#[derive(Clone, Debug)]
pub struct Corpus {
    /// The distinct bytes of the text, sorted: token `i` is `vocab[i]`.
    pub vocab: Vec<u8>,
    /// The first 90 % of the text, as tokens.
    pub train: Vec<i64>,
    /// The rest, as tokens.
    pub held_out: Vec<i64>,
}

impl Corpus {
    /// The corpus of `text`.
    ///
    /// Fails when the text has fewer than 1,000 bytes.
    pub fn new(text: &[u8]) -> exactgrad::Result<Self> {
        if text.len() < 1000 {
            return Err(exactgrad::Error::invalid(
                "char_gpt",
                "--text",
                format!("needs at least 1000 bytes of text, got {}", text.len()),
            ));
        }
        let mut seen = [false; 256];
        for &b in text {
            seen[usize::from(b)] = true;
        }
        let vocab: Vec<u8> = (0..=255u8).filter(|&b| seen[usize::from(b)]).collect();
        let mut index = [0i64; 256];
        for (i, &b) in vocab.iter().enumerate() {
            index[usize::from(b)] = i as i64;
        }
        let tokens: Vec<i64> = text.iter().map(|&b| index[usize::from(b)]).collect();
        let cut = tokens.len() * 9 / 10;
        Ok(Self {
            vocab,
            held_out: tokens[cut..].to_vec(),
            train: tokens[..cut].to_vec(),
        })
    }

    /// The corpus of the text file at `path`.
    pub fn load(path: &Path) -> exactgrad::Result<Self> {
        let text = std::fs::read(path).map_err(|source| exactgrad::Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::new(&text)
    }

    /// The tokens of `text`; characters outside the vocabulary become its first one.
    pub fn encode(&self, text: &str) -> Vec<i64> {
        text.bytes()
            .map(|b| self.vocab.iter().position(|&v| v == b).unwrap_or(0) as i64)
            .collect()
    }

    /// The text of `tokens`.
    pub fn decode(&self, tokens: &[i64]) -> String {
        tokens
            .iter()
            .map(|&t| char::from(self.vocab[t as usize]))
            .collect()
    }
}

/// `count` windows of `context + 1` tokens of `tokens` starting at `starts`, as inputs
/// (the first `context`) and targets (the last `context`), both row-major `[count,
/// context]`.
fn windows(tokens: &[i64], starts: &[usize], context: usize) -> (Vec<i64>, Vec<i64>) {
    let mut inputs = Vec::with_capacity(starts.len() * context);
    let mut targets = Vec::with_capacity(starts.len() * context);
    for &s in starts {
        inputs.extend_from_slice(&tokens[s..s + context]);
        targets.extend_from_slice(&tokens[s + 1..s + context + 1]);
    }
    (inputs, targets)
}

/// Mean cross entropy of the next character over every position of the windows.
fn window_loss<B: Backend>(
    model: &Gpt<B>,
    inputs: &[i64],
    targets: &[i64],
    shape: [usize; 2],
) -> exactgrad::Result<Tensor<B>> {
    let vocab = model.config().vocab;
    let logits = model.forward_tokens(inputs, shape)?;
    logits
        .reshape([shape[0] * shape[1], vocab])?
        .cross_entropy(targets, CrossEntropyOptions::default())
}

/// `len` characters that follow `prompt`, each drawn from the model's distribution at
/// `temperature` with `rng` (0: the most likely one).
pub fn sample<B: Backend>(
    model: &Gpt<B>,
    corpus: &Corpus,
    prompt: &str,
    len: usize,
    temperature: f32,
    rng: &mut Philox,
) -> exactgrad::Result<String> {
    let _guard = no_grad();
    let config = model.config();
    let mut tokens = corpus.encode(prompt);
    if tokens.is_empty() {
        tokens.push(0);
    }
    let start = tokens.len();
    for _ in 0..len {
        let from = tokens.len().saturating_sub(config.context);
        let window = &tokens[from..];
        let logits = model.forward_tokens(window, [1, window.len()])?.to_vec()?;
        let last = &logits[(window.len() - 1) * config.vocab..];
        let next = if temperature <= 0.0 {
            (0..last.len()).fold(0, |best, i| if last[i] > last[best] { i } else { best })
        } else {
            let top = last.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let weights: Vec<f64> = last
                .iter()
                .map(|&l| f64::from((l - top) / temperature).exp())
                .collect();
            let mut u = f64::from(rng.next_f32()) * weights.iter().sum::<f64>();
            let mut pick = weights.len() - 1;
            for (i, w) in weights.iter().enumerate() {
                if u < *w {
                    pick = i;
                    break;
                }
                u -= w;
            }
            pick
        };
        tokens.push(next as i64);
    }
    Ok(corpus.decode(&tokens[start..]))
}

/// Where a run keeps its checkpoint and when it stops early.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Checkpointing {
    /// The checkpoint file (`None`: no checkpoints).
    pub path: Option<PathBuf>,
    /// Continue from the checkpoint when it exists.
    pub resume: bool,
    /// Stop (after writing the checkpoint) once this step is done.
    pub stop_after: Option<usize>,
}

/// What a run reports as it goes.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The run continues from a checkpoint, after `step` steps.
    Resumed {
        /// Steps done before the interruption.
        step: usize,
    },
    /// An optimizer step ended.
    Step {
        /// 1-based step number.
        step: usize,
        /// The batch's loss.
        loss: f64,
    },
    /// A report: losses and a sample.
    Report {
        /// Steps done.
        step: usize,
        /// Mean training loss since the last report.
        train_loss: f64,
        /// Mean loss on the held-out windows.
        held_out_loss: f64,
        /// The text generated after [`PROMPT`].
        sample: String,
    },
}

/// The outcome of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// Steps done (fewer than configured when stopped early).
    pub steps: usize,
    /// Whether the run stopped early (`stop_after`).
    pub stopped: bool,
    /// `hash_tensors` over the parameters in `state_dict` order.
    pub parameter_hash: u64,
    /// Number of parameter elements.
    pub parameters: usize,
    /// Mean wall time of the training steps this process ran (batch, forward, backward,
    /// optimizer; not the reports), in seconds.
    pub step_seconds: f64,
    /// Mean CPU time of the calling thread over the same steps, in seconds (all of a
    /// step's work at one thread; unaffected by other processes' time slices), when the
    /// platform tells it.
    pub step_cpu_seconds: Option<f64>,
}

/// Trains on `corpus` with `backend`, reporting through `on_event`.
pub fn train<B: Backend>(
    backend: &B,
    corpus: &Corpus,
    config: &Config,
    checkpointing: &Checkpointing,
    mut on_event: impl FnMut(&Event),
) -> exactgrad::Result<Report> {
    let invalid =
        |arg: &'static str, message: String| exactgrad::Error::invalid("char_gpt", arg, message);
    if config.steps == 0 || config.batch_size == 0 || config.report_every == 0 {
        return Err(invalid(
            "--steps",
            "steps, batch size and report interval must be positive".into(),
        ));
    }
    let shortest = corpus.train.len().min(corpus.held_out.len());
    if config.context == 0 || config.context >= shortest {
        return Err(invalid(
            "--context",
            format!(
                "must be between 1 and {}, got {}",
                shortest - 1,
                config.context
            ),
        ));
    }
    let mut rng = Philox::new(config.seed);
    let model = Gpt::new(backend, config.model(corpus.vocab.len()), &mut rng)?;
    let params = model.parameters();
    let mut opt = AdamW::new(params.clone(), AdamWConfig::new(config.lr))?;
    let warm_up = (config.steps / 20).max(1);
    let schedules: Vec<SchedulerConfig> = vec![
        LinearLrConfig {
            start_factor: 0.1,
            end_factor: 1.0,
            total_iters: warm_up as u64,
        }
        .into(),
        CosineAnnealingLrConfig {
            t_max: config.steps.saturating_sub(warm_up).max(1) as u64,
            eta_min: config.lr / 10.0,
        }
        .into(),
    ];
    let mut sched = SequentialLr::new(&mut opt, schedules, vec![warm_up as u64])?;
    // The batches' stream, distinct from the weights' stream of the same seed.
    let mut batches = Philox::new(config.seed ^ 0x0ba7_c4e5);

    let mut step = 0usize;
    if let (Some(path), true) = (&checkpointing.path, checkpointing.resume) {
        if path.exists() {
            let ckpt = TrainingCheckpoint::load(path)?;
            if ckpt.value("config") != Some(config.key().as_str()) {
                return Err(invalid(
                    "--resume",
                    format!(
                        "{} was written by a run with {:?}, this one has {}",
                        path.display(),
                        ckpt.value("config").unwrap_or("no configuration"),
                        config.key()
                    ),
                ));
            }
            let saved = ckpt
                .value("step")
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| invalid("--resume", format!("{} has no step", path.display())))?;
            TrainingState::new(&model, &mut opt)
                .scheduler(&mut sched)
                .stream("batches", &mut batches)
                .restore(&ckpt)?;
            step = saved;
            on_event(&Event::Resumed { step });
        }
    }

    let [n, l] = [config.batch_size, config.context];
    let held_out_starts: Vec<usize> = (0..HELD_OUT_WINDOWS)
        .map(|i| i * (corpus.held_out.len() - l - 1) / HELD_OUT_WINDOWS)
        .collect();
    let (held_in, held_next) = windows(&corpus.held_out, &held_out_starts, l);
    let (mut wall, mut cpu) = (Duration::ZERO, Some(Duration::ZERO));
    let first = step;
    let mut since_report = (0.0f64, 0usize);
    let mut stopped = false;
    while step < config.steps {
        let (wall_start, cpu_start) = (Instant::now(), cpu_time::ThreadTime::try_now().ok());
        let starts: Vec<usize> = (0..n)
            .map(|_| batches.below((corpus.train.len() - l - 1) as u32) as usize)
            .collect();
        let (inputs, targets) = windows(&corpus.train, &starts, l);
        let loss = window_loss(&model, &inputs, &targets, [n, l])?;
        opt.clear_grad();
        loss.backward()?;
        opt.step()?;
        sched.step(&mut opt)?;
        let loss = f64::from(loss.item()?);
        wall += wall_start.elapsed();
        cpu = match (cpu, cpu_start) {
            (Some(total), Some(t)) => Some(total + t.elapsed()),
            _ => None,
        };
        step += 1;
        since_report = (since_report.0 + loss, since_report.1 + 1);
        on_event(&Event::Step { step, loss });

        let stop = checkpointing.stop_after == Some(step) && step < config.steps;
        if step.is_multiple_of(config.report_every) || step == config.steps || stop {
            let held_out_loss = {
                let _guard = no_grad();
                let shape = [HELD_OUT_WINDOWS, l];
                f64::from(window_loss(&model, &held_in, &held_next, shape)?.item()?)
            };
            // The samples' stream depends on the step only, never on the training's.
            let mut sampler = Philox::new(config.seed ^ 0x05a3_91e5 ^ ((step as u64) << 20));
            let text = sample(
                &model,
                corpus,
                PROMPT,
                config.sample_len,
                config.temperature,
                &mut sampler,
            )?;
            on_event(&Event::Report {
                step,
                train_loss: since_report.0 / since_report.1.max(1) as f64,
                held_out_loss,
                sample: text,
            });
            since_report = (0.0, 0);
            if let Some(path) = &checkpointing.path {
                let mut ckpt = TrainingState::new(&model, &mut opt)
                    .scheduler(&mut sched)
                    .stream("batches", &mut batches)
                    .capture()?;
                ckpt.set_value("config", config.key());
                ckpt.set_value("step", step.to_string());
                ckpt.save(path)?;
            }
        }
        if stop {
            stopped = true;
            break;
        }
    }
    let ran = (step - first).max(1);
    Ok(Report {
        steps: step,
        stopped,
        parameter_hash: hash_tensors(&params.iter().collect::<Vec<_>>())?,
        parameters: model.num_parameters(),
        step_seconds: wall.as_secs_f64() / ran as f64,
        step_cpu_seconds: cpu.map(|c| c.as_secs_f64() / ran as f64),
    })
}

/// The backends this example can run on, by command-line name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendChoice {
    /// `ScalarRefBackend`: the exact scalar oracle (slow).
    ScalarRef,
    /// `ExactBackend`: SIMD, threads, the same bits as the oracle.
    Exact,
    /// `FastBackend`: SIMD with FMA, threads.
    Fast,
}

/// Parsed command line.
#[derive(Clone, Debug, PartialEq)]
pub struct Args {
    /// Which backend to train on.
    pub backend: BackendChoice,
    /// Threads of the exact and fast backends (`None`: one per core).
    pub threads: Option<usize>,
    /// The run's hyper-parameters.
    pub config: Config,
    /// Checkpoint file, `--resume` and `--stop-after`.
    pub checkpointing: Checkpointing,
    /// The text to learn.
    pub text: PathBuf,
    /// `--help` was given.
    pub help: bool,
}

const USAGE: &str = "usage: char_gpt [--backend scalar-ref|exact|fast] [--threads N] [--steps N] \
[--seed S] [--batch-size N] [--context N] [--width N] [--heads N] [--layers N] [--lr X] \
[--report-every N] [--sample-len N] [--temperature X] [--checkpoint FILE] [--resume] \
[--stop-after STEPS] [--text FILE]";

/// Parses the arguments after the program name.
pub fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Args, String> {
    let mut out = Args {
        backend: BackendChoice::Exact,
        threads: None,
        config: Config::default(),
        checkpointing: Checkpointing {
            path: Some(PathBuf::from("char_gpt.safetensors")),
            ..Checkpointing::default()
        },
        text: Path::new(env!("CARGO_MANIFEST_DIR")).join(TEXT),
        help: false,
    };
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (arg.clone(), None),
        };
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
        let c = &mut out.config;
        match flag.as_str() {
            "-h" | "--help" => out.help = true,
            "--backend" => {
                out.backend = match value()?.as_str() {
                    "scalar-ref" => BackendChoice::ScalarRef,
                    "exact" => BackendChoice::Exact,
                    "fast" => BackendChoice::Fast,
                    other => {
                        return Err(format!(
                            "unknown backend `{other}`; choose one of: scalar-ref, exact, fast"
                        ))
                    }
                }
            }
            "--threads" => out.threads = Some(num(&flag, value()?)?),
            "--steps" => c.steps = num(&flag, value()?)?,
            "--seed" => c.seed = num(&flag, value()?)?,
            "--batch-size" => c.batch_size = num(&flag, value()?)?,
            "--context" => c.context = num(&flag, value()?)?,
            "--width" => c.width = num(&flag, value()?)?,
            "--heads" => c.heads = num(&flag, value()?)?,
            "--layers" => c.layers = num(&flag, value()?)?,
            "--lr" => c.lr = num(&flag, value()?)?,
            "--report-every" => c.report_every = num(&flag, value()?)?,
            "--sample-len" => c.sample_len = num(&flag, value()?)?,
            "--temperature" => c.temperature = num(&flag, value()?)?,
            "--checkpoint" => out.checkpointing.path = Some(PathBuf::from(value()?)),
            "--resume" => out.checkpointing.resume = true,
            "--stop-after" => out.checkpointing.stop_after = Some(num(&flag, value()?)?),
            "--text" => out.text = PathBuf::from(value()?),
            _ => return Err(format!("unknown argument `{arg}`\n{USAGE}")),
        }
    }
    Ok(out)
}

fn run<B: Backend>(backend: &B, args: &Args) -> exactgrad::Result<()> {
    let corpus = Corpus::load(&args.text)?;
    let c = &args.config;
    println!(
        "char_gpt: {} ({} training / {} held-out characters, vocabulary {}); {} blocks of width {}, {} heads, \
context {}; AdamW lr {}, batch {}, {} steps, seed {}; backend {} ({:?} mode)",
        args.text.display(),
        corpus.train.len(),
        corpus.held_out.len(),
        corpus.vocab.len(),
        c.layers,
        c.width,
        c.heads,
        c.context,
        c.lr,
        c.batch_size,
        c.steps,
        c.seed,
        backend.name(),
        backend.mode(),
    );
    let report = train(
        backend,
        &corpus,
        c,
        &args.checkpointing,
        |event| match event {
            Event::Resumed { step } => println!("resumed after step {step}"),
            Event::Step { .. } => {}
            Event::Report {
                step,
                train_loss,
                held_out_loss,
                sample,
            } => {
                println!(
                    "step {step:>6}/{}: loss {train_loss:.4}, held-out loss {held_out_loss:.4}",
                    c.steps
                );
                println!("  | {PROMPT}{}", sample.replace('\n', "\n  | "));
            }
        },
    )?;
    if report.stopped {
        println!(
            "stopped after step {} (run again with --resume to continue)",
            report.steps
        );
    }
    println!(
        "parameter hash: {:#018x} ({} parameters, step {})",
        report.parameter_hash, report.parameters, report.steps
    );
    match report.step_cpu_seconds {
        Some(cpu) => println!(
            "mean step time: {:.1} ms (calling thread's CPU time {:.1} ms)",
            report.step_seconds * 1e3,
            cpu * 1e3
        ),
        None => println!("mean step time: {:.1} ms", report.step_seconds * 1e3),
    }
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
        println!("{USAGE}\nbackends: scalar-ref, exact (default), fast");
        return;
    }
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let result = match args.backend {
        BackendChoice::ScalarRef => run(&ScalarRefBackend, &args),
        BackendChoice::Exact => run(&ExactBackend::with_threads(threads), &args),
        BackendChoice::Fast => run(&FastBackend::with_threads(threads), &args),
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
