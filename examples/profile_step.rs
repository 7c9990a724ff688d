//! Runs a training step of `benches/models.rs` (the conv net, the encoder, the CRNN,
//! ResNet-18 or the GPT) in a loop, for a profiler, and prints the time of each step and
//! the median and least CPU time of the process per step.
//!
//! ```text
//! cargo run --release --example profile_step -- conv_net|encoder|crnn|resnet18|gpt exact|fast THREADS [STEPS]
//! ```
//!
//! For perf, build it with the `profiling` profile (the release profile with debug
//! info, which plain release builds leave out): `cargo build --profile profiling
//! --example profile_step`, then run `target/profiling/examples/profile_step`.
//!
//! The step is the bench's (`ConvNetCase` on 32 images of 3×32×32 and `EncoderCase`
//! at width 128, 4 heads, feed-forward 512, batch 8 of 64 tokens, both with Adam;
//! `ResNetCase::pinned` with SGD, momentum 0.9, weight decay
//! 5e-4; `GptCase::pinned` with AdamW) on the best path of this CPU; two untimed steps
//! come first. To profile the timed steps only, let `perf` start disabled and have this
//! program switch it on and off around the loop through perf's control fifos
//! (`PERF_CTL_FIFO`, and `PERF_ACK_FIFO` to wait for perf's acknowledgement):
//!
//! ```text
//! mkfifo /tmp/ctl /tmp/ack
//! PERF_CTL_FIFO=/tmp/ctl PERF_ACK_FIFO=/tmp/ack perf record -e cpu-clock -D -1 \
//!     --control fifo:/tmp/ctl,/tmp/ack -o step.data -- \
//!     target/profiling/examples/profile_step resnet18 exact 1 10
//! perf report -i step.data --no-children --sort symbol
//! ```

use exactgrad::nn::optim::{Adam, AdamConfig, AdamW, AdamWConfig, Optimizer, Sgd, SgdConfig};
use exactgrad::nn::reference::{
    ConvNetCase, ConvNetConfig, CrnnCase, EncoderCase, EncoderConfig, GptCase, ReferenceCase,
    ResNetCase,
};
use exactgrad::prelude::*;
use std::error::Error;
use std::io::{BufRead, BufReader, Write};
use std::process::ExitCode;
use std::time::Instant;

/// Sends `command` to perf's control fifo and waits for the acknowledgement, when the
/// environment names the fifos.
fn perf_control(command: &str) -> std::io::Result<()> {
    let Ok(ctl) = std::env::var("PERF_CTL_FIFO") else {
        return Ok(());
    };
    std::fs::OpenOptions::new()
        .write(true)
        .open(ctl)?
        .write_all(format!("{command}\n").as_bytes())?;
    if let Ok(ack) = std::env::var("PERF_ACK_FIFO") {
        let mut line = String::new();
        BufReader::new(std::fs::File::open(ack)?).read_line(&mut line)?;
    }
    Ok(())
}

/// Runs `steps` timed steps of the model on `backend` after two untimed ones.
fn run<B: Backend>(backend: &B, model: &str, steps: usize) -> Result<(), Box<dyn Error>> {
    let mut step: Box<dyn FnMut() -> exactgrad::Result<()>> = match model {
        "conv_net" => {
            let case = ConvNetCase::random(backend, ConvNetConfig::default(), 32, [32, 32], 3)?;
            let mut opt = Adam::new(case.parameters(), AdamConfig::new(1e-3))?;
            Box::new(move || {
                case.forward_backward()?;
                opt.step()
            })
        }
        "encoder" => {
            let config = EncoderConfig {
                d_model: 128,
                nhead: 4,
                dim_feedforward: 512,
                classes: 16,
            };
            let case = EncoderCase::random(backend, config, 8, 64, 4)?;
            let mut opt = Adam::new(case.parameters(), AdamConfig::new(1e-3))?;
            Box::new(move || {
                case.forward_backward()?;
                opt.step()
            })
        }
        "crnn" => {
            let case = CrnnCase::bench(backend)?;
            let mut opt = Sgd::new(case.parameters(), SgdConfig::new(0.01))?;
            Box::new(move || {
                case.forward_backward()?;
                opt.step()
            })
        }
        "resnet18" => {
            let case = ResNetCase::pinned(backend)?;
            let config = SgdConfig {
                momentum: 0.9,
                weight_decay: 5e-4,
                ..SgdConfig::new(0.1)
            };
            let mut opt = Sgd::new(case.parameters(), config)?;
            Box::new(move || {
                case.forward_backward()?;
                opt.step()
            })
        }
        _ => {
            let case = GptCase::pinned(backend)?;
            let mut opt = AdamW::new(case.parameters(), AdamWConfig::new(3e-4))?;
            Box::new(move || {
                case.forward_backward()?;
                opt.step()
            })
        }
    };
    step()?;
    step()?;
    perf_control("enable")?;
    let mut times = Vec::with_capacity(steps);
    let mut cpu = Vec::with_capacity(steps);
    for _ in 0..steps {
        let t = Instant::now();
        let c = cpu_time::ProcessTime::try_now().ok();
        step()?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        if let Some(d) = c.and_then(|c| c.try_elapsed().ok()) {
            cpu.push(d.as_secs_f64() * 1e3);
        }
    }
    perf_control("disable")?;
    let line: Vec<String> = times.iter().map(|t| format!("{t:.1}")).collect();
    println!("step ms: {}", line.join(" "));
    times.sort_by(f64::total_cmp);
    println!(
        "median {:.1} ms, min {:.1} ms over {steps} steps",
        times[steps / 2],
        times[0]
    );
    // The process's CPU time (every thread of the pool, spinning included), which other
    // processes on a loaded machine inflate less than the wall time.
    if cpu.len() == steps {
        cpu.sort_by(f64::total_cmp);
        println!(
            "process CPU per step: median {:.1} ms, min {:.1} ms",
            cpu[steps / 2],
            cpu[0]
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: profile_step conv_net|encoder|crnn|resnet18|gpt exact|fast THREADS [STEPS]";
    let (Some(model), Some(mode), Some(threads)) = (args.first(), args.get(1), args.get(2)) else {
        eprintln!("{usage}");
        return ExitCode::from(2);
    };
    let threads: usize = threads.parse().unwrap_or(0);
    let steps: usize = args.get(3).map_or(Ok(10), |s| s.parse()).unwrap_or(0);
    if !["conv_net", "encoder", "crnn", "resnet18", "gpt"].contains(&model.as_str())
        || threads == 0
        || steps == 0
    {
        eprintln!("{usage}");
        return ExitCode::from(2);
    }
    let result = match mode.as_str() {
        "exact" => {
            let b = ExactBackend::with_threads(threads);
            println!("{model} exact/{}/{threads}t", b.isa());
            run(&b, model, steps)
        }
        "fast" => {
            let b = FastBackend::with_threads(threads);
            println!("{model} fast/{}/{threads}t", b.isa());
            run(&b, model, steps)
        }
        _ => {
            eprintln!("{usage}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
