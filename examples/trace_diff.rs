//! Trains the same small model twice with one deliberate change, traces both runs, and
//! prints where they parted; then captures that record and replays it on the scalar
//! references (the walk-through of `docs/debugging.md`).
//!
//! ```text
//! cargo run --release --example trace_diff -- [--change lr|shuffle|fast|dropout|none]
//!                                             [--steps N] [--dir DIR]
//! ```
//!
//! The model is Linear(64, 32)–ReLU–Dropout(0.1)–Linear(32, 10) on the shipped digits,
//! trained with SGD (momentum 0.9) for `--steps` steps (default 8) on `ExactBackend`,
//! traced at the level of operations. The second run differs by `--change`:
//!
//! - `lr` (default): the learning rate is halved from step 5 on;
//! - `shuffle`: the data loader shuffles with another seed;
//! - `fast`: the second run is on `FastBackend` (fused multiply-adds);
//! - `dropout`: the dropout streams are keyed from another seed;
//! - `none`: no change (the diff says the runs are identical).
//!
//! The traces go to `DIR` (default `target/trace-demo`): `a.trace`, `b.trace`, and the
//! capture of the root cause in `b.trace.capture`.

use exactgrad::nn::data::{DataLoader, Digits};
use exactgrad::prelude::*;
use exactgrad::trace::{self, TraceConfig, TraceLevel, TraceModel};
use exactgrad::Error;
use std::path::{Path, PathBuf};

/// The difference of the second run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    Lr,
    Shuffle,
    Fast,
    Dropout,
    None,
}

/// One traced run: `change` applied when `changed`; records in `ids` captured.
fn train<B: Backend>(
    b: &B,
    steps: usize,
    change: Change,
    changed: bool,
    path: &Path,
    capture: &[trace::RecordId],
) -> exactgrad::Result<()> {
    let split = Digits::bundled().split()?;
    let shuffle = if changed && change == Change::Shuffle {
        2
    } else {
        1
    };
    let loader = DataLoader::new(b, &split.train, 32)?.shuffle(shuffle);
    let mut rng = Philox::new(0);
    let model = Sequential::new()
        .push(Linear::new(b, Digits::FEATURES, 32, &mut rng)?)
        .push(Relu)
        .push(Dropout::new(0.1)?)
        .push(Linear::new(b, 32, Digits::CLASSES, &mut rng)?);
    model.seed_streams(if changed && change == Change::Dropout {
        8
    } else {
        7
    })?;
    let mut opt = Sgd::new(
        model.parameters(),
        SgdConfig {
            momentum: 0.9,
            ..SgdConfig::new(0.05)
        },
    )?;
    let mut config = TraceConfig::new(path)
        .level(TraceLevel::Ops)
        .seed(0)
        .model(&model)
        .values_up_to(16);
    for &id in capture {
        config = config.capture(id);
    }
    let trace = config.start()?;
    let mut step = 0;
    while step < steps {
        for batch in &loader {
            let batch = batch?;
            step += 1;
            if changed && change == Change::Lr && step == 5 {
                opt.set_lr(0.025)?;
            }
            let loss = model
                .forward(&batch.inputs)?
                .cross_entropy(&batch.targets, CrossEntropyOptions::default())?;
            opt.clear_grad();
            loss.backward()?;
            opt.step()?;
            if step == steps {
                break;
            }
        }
    }
    let summary = trace.finish()?;
    println!(
        "{}: {} steps, {} records, {} bytes",
        path.display(),
        summary.steps,
        summary.records,
        summary.bytes
    );
    Ok(())
}

fn run_b(
    steps: usize,
    change: Change,
    path: &Path,
    capture: &[trace::RecordId],
) -> exactgrad::Result<()> {
    if change == Change::Fast {
        train(&FastBackend::new(), steps, change, true, path, capture)
    } else {
        train(&ExactBackend::new(), steps, change, true, path, capture)
    }
}

fn main() -> exactgrad::Result<()> {
    let mut change = Change::Lr;
    let mut steps = 8;
    let mut dir = PathBuf::from("target/trace-demo");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || {
            it.next().cloned().ok_or_else(|| {
                Error::invalid("trace_diff", "arguments", format!("{a} needs a value"))
            })
        };
        match a.as_str() {
            "--change" => {
                change = match value()?.as_str() {
                    "lr" => Change::Lr,
                    "shuffle" => Change::Shuffle,
                    "fast" => Change::Fast,
                    "dropout" => Change::Dropout,
                    "none" => Change::None,
                    other => {
                        return Err(Error::invalid(
                            "trace_diff",
                            "--change",
                            format!("`{other}`: one of lr, shuffle, fast, dropout, none"),
                        ))
                    }
                }
            }
            "--steps" => {
                steps = value()?.parse().map_err(|_| {
                    Error::invalid("trace_diff", "--steps", "a positive number of steps")
                })?
            }
            "--dir" => dir = PathBuf::from(value()?),
            other => {
                return Err(Error::invalid(
                    "trace_diff",
                    "arguments",
                    format!("unknown argument `{other}`"),
                ))
            }
        }
    }
    std::fs::create_dir_all(&dir).map_err(|error| trace::TraceError::Io {
        path: dir.clone(),
        error,
    })?;
    let (a, b) = (dir.join("a.trace"), dir.join("b.trace"));
    train(&ExactBackend::new(), steps, change, false, &a, &[])?;
    run_b(steps, change, &b, &[])?;

    let report = trace::diff::diff(&[&a], &[&b])?;
    println!(
        "\n$ exactgrad trace diff {} {}\n{report}",
        a.display(),
        b.display()
    );

    // Capture the root cause (with its forward record, for a backward rule) in a second
    // run of the changed program, and replay it on the scalar references.
    if let Some(rc) = &report.root_cause {
        let r = &rc.records.b;
        let mut ids: Vec<trace::RecordId> = r.forward.into_iter().collect();
        ids.push(r.id);
        run_b(steps, change, &b, &ids)?;
        let capture = dir.join("b.trace.capture");
        println!("\n$ exactgrad trace replay {}", capture.display());
        for rep in trace::replay_file(&capture, &[r.id])? {
            println!(
                "record {} ({} `{}`): {}",
                rep.id,
                rep.kind.name(),
                rep.op,
                rep.conclusion()
            );
        }
    }
    Ok(())
}
