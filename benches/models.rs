//! The reference models' operators and training steps on `ExactBackend` and
//! `FastBackend` (best path of this CPU), at 1 and 2 threads.
//!
//! Run with `cargo bench --bench models` (a filter such as `-- step/encoder` selects a
//! subset). Benchmarks (the models of `nn::reference` at benchmark sizes):
//!
//! - `conv1`, `conv2`: conv2d forward and backward at the conv net's two convolutions
//!   for a batch of 32 images of 3×32×32 (`[32, 3, 32, 32] * [16, 3, 3, 3]` and
//!   `[32, 16, 16, 16] * [32, 16, 3, 3]`, padding 1, with bias);
//! - `attention`: scaled dot-product attention forward and backward at the encoder's
//!   shapes (`[8, 4, 64, 32]` queries, keys and values, a key padding mask given as
//!   `AttentionMask::Allow`);
//! - `step/conv_net`: a training step (forward, cross entropy, backward, Adam) of the
//!   reference conv net on a batch of 32 × 3×32×32;
//! - `step/encoder`: a training step of the reference encoder (2 layers, batch 8,
//!   sequence 64, width 128, 4 heads, feed-forward 512, padding mask);
//! - `step/crnn`: a training step (forward, log_softmax, CTC, backward, SGD) of the
//!   reference CRNN on a batch of 8 line images of 1×32×128: conv 1→16 and 16→32 (3×3,
//!   padding 1, ReLU, max pool 2) to `[8, 32, 8, 32]`, a sequence of 32 steps of 32·8
//!   features, a two-layer bidirectional LSTM of 64, Linear(128, 11), log_softmax and
//!   the mean CTC loss with input lengths 32 and target lengths 5 to 10 of labels 1…10;
//! - `step/resnet18`: a training step (forward, cross entropy, backward, SGD with
//!   momentum 0.9, weight decay 5e-4, learning rate 0.1) of ResNet-18 in the CIFAR layout
//!   (`ResNetCase::pinned`: 11.2 M parameters) on a batch of 32 × 3×32×32;
//! - `step/gpt`: a training step (forward, cross entropy over every position, backward,
//!   AdamW with learning rate 3e-4 and weight decay 0.01) of the GPT-style decoder
//!   (`GptCase::pinned`: vocabulary 256, context 128, 6 pre-norm blocks of width 256 with
//!   4 heads and a GELU feed-forward block of 1024) on 8 sequences of 128 tokens.
//! - `step/resnet18/…/trace-steps`, `…/trace-ops` and the same for `step/gpt` (exact
//!   mode): those steps with an operation trace recording at each level
//!   (`docs/debugging.md`), streamed to a temporary file, for the overhead of tracing;
//!   the summary gives each trace's records and bytes per step.
//!
//! Each benchmark's inputs are made only when it runs (a filtered-out benchmark makes
//! nothing), so a profile of one benchmark (`--profile-time`) holds its own work.
//!
//! `tools/bench_torch.py --shapes models` times the same work in PyTorch. At the end the
//! bench prints one summary line per benchmark in the format of that script: the median,
//! fastest and slowest of the individually timed calls of the measured samples, in ms,
//! and the mean CPU time of the calling thread per call, which at one thread
//! is the work's CPU time and is not inflated by other processes on a loaded machine.
//! Then, for each training step, the peak memory of one step: the bytes the backend's
//! pool holds at rest (parameters, optimizer state, inputs; after two warm-up steps and
//! with the gradients freed) and the peak above that during the step, beside which
//! `tools/bench_torch.py` prints PyTorch's for the same step (`docs/memory.md` §5).
//! Last, the gradient hash (`docs/arithmetic.md` §2) of each step's first pass, from the
//! case's initial parameters: in exact mode the same on every path and thread count (for
//! `step/resnet18` and `step/gpt` the pinned values of `reproduce`), in fast mode the
//! value of `FastScalarRefBackend` (`docs/arithmetic.md` §6). Then the multiply-adds of
//! one training step, as the backend counted them (`ComputeContext::multiply_adds`: every
//! product's `batch · m · n · k`), for the arithmetic rate of `tools/compare_speed.py`.

use criterion::Criterion;
use exactgrad::autograd::{AttentionMask, Conv2dOptions};
use exactgrad::nn::optim::{Adam, AdamConfig, AdamW, AdamWConfig, Optimizer, Sgd, SgdConfig};
use exactgrad::nn::reference::{
    ConvNetCase, ConvNetConfig, CrnnCase, EncoderCase, EncoderConfig, GptCase, ReferenceCase,
    ResNetCase,
};
use exactgrad::prelude::*;
use exactgrad::trace::{TraceConfig, TraceLevel, TraceModel, TraceSteps};
use std::cell::RefCell;
use std::time::{Duration, Instant};

/// Samples per benchmark (criterion's minimum).
const SAMPLES: usize = 10;

/// The encoder of the benches: 128 wide, 4 heads, feed-forward 512.
const ENCODER: EncoderConfig = EncoderConfig {
    d_model: 128,
    nhead: 4,
    dim_feedforward: 512,
    classes: 16,
};
const ENC_BATCH: usize = 8;
const ENC_SEQ: usize = 64;
const CONV_BATCH: usize = 32;
const CONV_HW: [usize; 2] = [32, 32];

/// The calling thread's CPU time in ns, or `None` where it is not available. At one
/// thread this is the CPU time of the work, which other processes on a loaded machine do
/// not inflate.
fn thread_cpu_ns() -> Option<u64> {
    cpu_time::ThreadTime::try_now()
        .ok()
        .map(|t| t.as_duration().as_nanos() as u64)
}

/// Times the work `make()` returns, once per criterion iteration, and returns the summary
/// line. The work is built only when the benchmark runs (not when a filter leaves it out),
/// so a profile of one benchmark holds that benchmark's work and its setup only once.
fn bench<F: FnMut()>(c: &mut Criterion, label: &str, make: impl FnOnce() -> F) -> String {
    let samples: RefCell<Vec<Vec<Duration>>> = RefCell::new(Vec::new());
    let cpu: RefCell<Vec<Vec<f64>>> = RefCell::new(Vec::new());
    let mut make = Some(make);
    let mut work: Option<F> = None;
    c.bench_function(label, |b| {
        if let Some(m) = make.take() {
            work = Some(m());
        }
        let Some(f) = work.as_mut() else { return };
        b.iter_custom(|iters| {
            let mut calls = Vec::with_capacity(iters as usize);
            let mut cpu_ms = Vec::with_capacity(iters as usize);
            for _ in 0..iters {
                let c0 = thread_cpu_ns();
                let t = Instant::now();
                f();
                calls.push(t.elapsed());
                if let (Some(a), Some(b)) = (c0, thread_cpu_ns()) {
                    cpu_ms.push(b.saturating_sub(a) as f64 / 1e6);
                }
            }
            let total = calls.iter().sum();
            samples.borrow_mut().push(calls);
            cpu.borrow_mut().push(cpu_ms);
            total
        })
    });
    // The last SAMPLES routine calls are the measurement (earlier ones warm up).
    let samples = samples.into_inner();
    let mut ms: Vec<f64> = samples
        .iter()
        .rev()
        .take(SAMPLES)
        .flatten()
        .map(|d| d.as_secs_f64() * 1e3)
        .collect();
    ms.sort_by(f64::total_cmp);
    if ms.is_empty() {
        return format!("{label:<44} (filtered out)");
    }
    let cpu_ms: Vec<f64> = cpu
        .into_inner()
        .iter()
        .rev()
        .take(SAMPLES)
        .flatten()
        .copied()
        .collect();
    // The calling thread's mean CPU time per call (the whole work's at one thread; at
    // more threads only the caller's share). The mean, because some systems account
    // thread CPU time in scheduler ticks, which a median would round.
    let cpu_note = if cpu_ms.is_empty() {
        String::new()
    } else {
        format!(
            "   caller cpu mean {:.3} ms",
            cpu_ms.iter().sum::<f64>() / cpu_ms.len() as f64
        )
    };
    format!(
        "{label:<44} median {:9.3} ms   (min {:.3}, max {:.3}, {} calls){cpu_note}",
        ms[ms.len() / 2],
        ms[0],
        ms[ms.len() - 1],
        ms.len()
    )
}

fn leaf<B: Backend>(b: &B, shape: &[usize], rng: &mut Philox) -> Tensor<B> {
    Tensor::randn(b, shape.to_vec(), 0.0, 1.0, rng)
        .unwrap()
        .requires_grad()
        .unwrap()
}

/// Forward and backward of one convolution (input, weight and bias require grad).
fn conv<B: Backend>(c: &mut Criterion, b: &B, label: &str, x: [usize; 4], w: [usize; 4]) -> String {
    bench(c, label, || conv_work(b, x, w))
}

fn conv_work<B: Backend>(b: &B, x: [usize; 4], w: [usize; 4]) -> impl FnMut() {
    let mut rng = Philox::new(1);
    let (x, w, bias) = (
        leaf(b, &x, &mut rng),
        leaf(b, &w, &mut rng),
        leaf(b, &[w[0]], &mut rng),
    );
    let opts = Conv2dOptions {
        padding: [1, 1],
        ..Conv2dOptions::default()
    };
    let y = x.conv2d(&w, Some(&bias), opts).unwrap();
    let g = Tensor::randn(b, y.shape().clone(), 0.0, 1.0, &mut rng).unwrap();
    move || {
        for t in [&x, &w, &bias] {
            t.clear_grad();
        }
        let y = x.conv2d(&w, Some(&bias), opts).unwrap();
        y.backward_with(BackwardOptions::default().gradient(&g))
            .unwrap();
    }
}

/// Forward and backward of scaled dot-product attention with a key padding mask.
fn attention<B: Backend>(c: &mut Criterion, b: &B, label: &str) -> String {
    bench(c, label, || attention_work(b))
}

fn attention_work<B: Backend>(b: &B) -> impl FnMut() {
    let mut rng = Philox::new(2);
    let hd = ENCODER.d_model / ENCODER.nhead;
    let shape = [ENC_BATCH, ENCODER.nhead, ENC_SEQ, hd];
    let (q, k, v) = (
        leaf(b, &shape, &mut rng),
        leaf(b, &shape, &mut rng),
        leaf(b, &shape, &mut rng),
    );
    // 1 = takes part; sequence i has length ENC_SEQ − i·ENC_SEQ/(2·ENC_BATCH), as EncoderCase::random.
    let keep: Vec<f32> = (0..ENC_BATCH)
        .flat_map(|i| {
            let len = ENC_SEQ - i * ENC_SEQ / (2 * ENC_BATCH);
            (0..ENC_SEQ).map(move |j| if j < len { 1.0 } else { 0.0 })
        })
        .collect();
    let mask = Tensor::from_vec(b, keep, [ENC_BATCH, 1, 1, ENC_SEQ]).unwrap();
    let g = Tensor::randn(b, shape.to_vec(), 0.0, 1.0, &mut rng).unwrap();
    move || {
        for t in [&q, &k, &v] {
            t.clear_grad();
        }
        let o = q
            .scaled_dot_product_attention(
                &k,
                &v,
                AttentionOptions::masked(AttentionMask::Allow(&mask)),
            )
            .unwrap();
        o.backward_with(BackwardOptions::default().gradient(&g))
            .unwrap();
    }
}

/// The memory of one training step by the backend's pool (`docs/memory.md` §5): after
/// two warm-up steps and with every gradient freed (the step's first action), the bytes
/// held at rest (parameters, optimizer state, inputs) and the peak of the bytes held
/// during the step above that. `None` for a backend without a pool.
fn step_peak<B: Backend>(
    b: &B,
    clear: impl Fn(),
    step: &mut impl FnMut(),
) -> Option<(usize, usize)> {
    let pool = b.memory()?;
    step();
    step();
    clear();
    let rest = pool.stats().outstanding_bytes;
    pool.reset_peak();
    step();
    Some((rest, pool.stats().peak_bytes - rest))
}

/// The line of [`step_peak`] for the summary, in the format of `tools/bench_torch.py`.
fn peak_line(label: &str, peak: Option<(usize, usize)>) -> String {
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    match peak {
        Some((rest, peak)) => format!(
            "{label:<44} peak {:9.3} MiB above rest   (at rest {:.3} MiB)",
            mib(peak),
            mib(rest)
        ),
        None => format!("{label:<44} peak (no pool)"),
    }
}

/// One training step — forward, loss, backward and the update of the optimizer that
/// `optimizer` makes — whose peak memory, the gradient hash of its first pass (from the
/// case's initial parameters, before any update) and the multiply-adds of one step
/// (`multiply_adds` reads the backend's count) go to `reports`.
fn step<B: Backend, C: ReferenceCase<B> + 'static, O: Optimizer<B> + 'static>(
    c: &mut Criterion,
    label: &str,
    make: impl FnOnce() -> (C, Option<Tensor<B>>),
    optimizer: impl FnOnce(Vec<Tensor<B>>) -> O,
    reports: &Reports,
    multiply_adds: &dyn Fn() -> u64,
) -> String {
    bench(c, label, || {
        let (case, input) = make();
        let hash = case.forward_backward().unwrap().hash().unwrap();
        reports
            .hashes
            .borrow_mut()
            .push(format!("{label:<44} hash {hash:#018x}"));
        let mut leaves = case.parameters();
        leaves.extend(input);
        let mut opt = optimizer(case.parameters());
        let mut work = move || {
            case.forward_backward().unwrap();
            opt.step().unwrap();
        };
        let before = multiply_adds();
        work();
        let done = multiply_adds() - before;
        reports.arithmetic.borrow_mut().push(format!(
            "{label:<44} arithmetic {done} multiply-adds per step ({:.3} GFLOP)",
            2.0 * done as f64 / 1e9
        ));
        let clear = || leaves.iter().for_each(Tensor::clear_grad);
        let peak = step_peak(leaves[0].backend(), clear, &mut work);
        reports.peaks.borrow_mut().push(peak_line(label, peak));
        work
    })
}

/// What the training steps report beside their times: the peak memory, the gradient hash
/// of the first pass and the multiply-adds of a step.
#[derive(Default)]
struct Reports {
    peaks: RefCell<Vec<String>>,
    hashes: RefCell<Vec<String>>,
    arithmetic: RefCell<Vec<String>>,
}

/// [`step`] with an operation trace recording at `level` for as long as the benchmark
/// runs (one trace step per training step, streamed to a temporary file); the file's
/// records and bytes per step go to `sizes`.
#[allow(clippy::too_many_arguments)]
fn traced_step<
    B: Backend,
    M: Module<B>,
    C: ReferenceCase<B> + 'static,
    O: Optimizer<B> + 'static,
>(
    c: &mut Criterion,
    label: &str,
    level: TraceLevel,
    make: impl FnOnce() -> C,
    model: impl Fn(&C) -> &M,
    optimizer: impl FnOnce(Vec<Tensor<B>>) -> O,
    sizes: &RefCell<Vec<String>>,
) -> String {
    let path = std::env::temp_dir().join(format!(
        "exactgrad-bench-{}-{}.trace",
        std::process::id(),
        label.replace('/', "-")
    ));
    let line = bench(c, label, || {
        let case = make();
        let trace = TraceConfig::new(&path)
            .level(level)
            .model(model(&case))
            .start()
            .unwrap();
        let mut opt = optimizer(case.parameters());
        move || {
            let _recording = &trace;
            case.forward_backward().unwrap();
            opt.step().unwrap();
        }
    });
    if let Ok(mut steps) = TraceSteps::open(&[&path]) {
        let (mut n, mut records) = (0u64, 0u64);
        while let Ok(Some(s)) = steps.next_step() {
            n += 1;
            records += s.records.len() as u64;
        }
        let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        if n > 0 && records > 0 {
            sizes.borrow_mut().push(format!(
                "{label:<44} {:.0} records, {:.1} KiB per step; {:.1} bytes per record ({n} steps)",
                records as f64 / n as f64,
                bytes as f64 / n as f64 / 1024.0,
                bytes as f64 / records as f64
            ));
        }
    }
    let _ = std::fs::remove_file(&path);
    line
}

/// The ResNet-18 and GPT steps with a trace at each level, beside the untraced steps of
/// [`run`] (the overhead of tracing, `docs/debugging.md`).
fn run_traced<B: Backend>(
    c: &mut Criterion,
    b: &B,
    tag: &str,
    summary: &mut Vec<String>,
    sizes: &RefCell<Vec<String>>,
) {
    for level in [TraceLevel::Steps, TraceLevel::Ops] {
        let label = format!("models/step/resnet18/{tag}/trace-{}", level.name());
        summary.push(traced_step(
            c,
            &label,
            level,
            || ResNetCase::pinned(b).unwrap(),
            |case| &case.model,
            sgd_momentum,
            sizes,
        ));
        let label = format!("models/step/gpt/{tag}/trace-{}", level.name());
        summary.push(traced_step(
            c,
            &label,
            level,
            || GptCase::pinned(b).unwrap(),
            |case| &case.model,
            adamw,
            sizes,
        ));
    }
}

/// Adam with learning rate 1e-3 (the conv net and encoder steps).
fn adam<B: Backend>(params: Vec<Tensor<B>>) -> Adam<B> {
    Adam::new(params, AdamConfig::new(1e-3)).unwrap()
}

/// SGD with learning rate 0.01 (the CRNN step).
fn sgd<B: Backend>(params: Vec<Tensor<B>>) -> Sgd<B> {
    Sgd::new(params, SgdConfig::new(0.01)).unwrap()
}

/// SGD with momentum 0.9 and weight decay 5e-4, learning rate 0.1 (the ResNet step).
fn sgd_momentum<B: Backend>(params: Vec<Tensor<B>>) -> Sgd<B> {
    let config = SgdConfig {
        momentum: 0.9,
        weight_decay: 5e-4,
        ..SgdConfig::new(0.1)
    };
    Sgd::new(params, config).unwrap()
}

/// AdamW with learning rate 3e-4 and PyTorch's other defaults (weight decay 0.01; the
/// GPT step).
fn adamw<B: Backend>(params: Vec<Tensor<B>>) -> AdamW<B> {
    AdamW::new(params, AdamWConfig::new(3e-4)).unwrap()
}

fn run<B: Backend>(
    c: &mut Criterion,
    b: &B,
    tag: &str,
    summary: &mut Vec<String>,
    reports: &Reports,
    multiply_adds: &dyn Fn() -> u64,
) {
    summary.push(conv(
        c,
        b,
        &format!("models/conv1/{tag}"),
        [CONV_BATCH, 3, CONV_HW[0], CONV_HW[1]],
        [16, 3, 3, 3],
    ));
    summary.push(conv(
        c,
        b,
        &format!("models/conv2/{tag}"),
        [CONV_BATCH, 16, CONV_HW[0] / 2, CONV_HW[1] / 2],
        [32, 16, 3, 3],
    ));
    summary.push(attention(c, b, &format!("models/attention/{tag}")));
    let label = format!("models/step/conv_net/{tag}");
    summary.push(step(
        c,
        &label,
        || {
            let case =
                ConvNetCase::random(b, ConvNetConfig::default(), CONV_BATCH, CONV_HW, 3).unwrap();
            let input = case.input.clone();
            (case, Some(input))
        },
        adam,
        reports,
        multiply_adds,
    ));
    let label = format!("models/step/encoder/{tag}");
    summary.push(step(
        c,
        &label,
        || {
            let case = EncoderCase::random(b, ENCODER, ENC_BATCH, ENC_SEQ, 4).unwrap();
            let input = case.input.clone();
            (case, Some(input))
        },
        adam,
        reports,
        multiply_adds,
    ));
    let label = format!("models/step/crnn/{tag}");
    summary.push(step(
        c,
        &label,
        || {
            let case = CrnnCase::bench(b).unwrap();
            let input = case.input.clone();
            (case, Some(input))
        },
        sgd,
        reports,
        multiply_adds,
    ));
    let label = format!("models/step/resnet18/{tag}");
    summary.push(step(
        c,
        &label,
        || {
            let case = ResNetCase::pinned(b).unwrap();
            let input = case.input.clone();
            (case, Some(input))
        },
        sgd_momentum,
        reports,
        multiply_adds,
    ));
    let label = format!("models/step/gpt/{tag}");
    summary.push(step(
        c,
        &label,
        || (GptCase::pinned(b).unwrap(), None),
        adamw,
        reports,
        multiply_adds,
    ));
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(SAMPLES)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .configure_from_args();
    let mut summary = Vec::new();
    let reports = Reports::default();
    let sizes = RefCell::new(Vec::new());
    for threads in [1, 2] {
        let exact = Isa::best(ComputeMode::Exact);
        let b = ExactBackend::with_isa(exact, threads).unwrap();
        run(
            &mut c,
            &b,
            &format!("exact/{exact}/t{threads}"),
            &mut summary,
            &reports,
            &|| b.context().multiply_adds(),
        );
        run_traced(
            &mut c,
            &b,
            &format!("exact/{exact}/t{threads}"),
            &mut summary,
            &sizes,
        );
        let fast = Isa::best(ComputeMode::Fast);
        let b = FastBackend::with_isa(fast, threads).unwrap();
        run(
            &mut c,
            &b,
            &format!("fast/{fast}/t{threads}"),
            &mut summary,
            &reports,
            &|| b.context().multiply_adds(),
        );
    }
    c.final_summary();
    println!("\nModel summary (median of individually timed calls):");
    for line in summary.iter().filter(|l| !l.ends_with("(filtered out)")) {
        println!("{line}");
    }
    let Reports {
        peaks,
        hashes,
        arithmetic,
    } = reports;
    let peaks = peaks.into_inner();
    if !peaks.is_empty() {
        println!("\nPeak memory of one step (the backend's pool, docs/memory.md §5):");
        for line in peaks {
            println!("{line}");
        }
    }
    let sizes = sizes.into_inner();
    if !sizes.is_empty() {
        println!("\nOperation traces of the traced steps (docs/debugging.md):");
        for line in sizes {
            println!("{line}");
        }
    }
    let hashes = hashes.into_inner();
    if !hashes.is_empty() {
        println!("\nGradient hash of each step's first pass (docs/arithmetic.md §2, §6):");
        for line in hashes {
            println!("{line}");
        }
    }
    let arithmetic = arithmetic.into_inner();
    if !arithmetic.is_empty() {
        println!("\nMultiply-adds of one training step, counted by the backend (docs/gemm.md):");
        for line in arithmetic {
            println!("{line}");
        }
    }
}
