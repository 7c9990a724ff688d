//! Operation traces (`docs/debugging.md`): two runs with one difference, traced and
//! diffed, must name the record where they parted — a kernel call one ulp off, exact
//! against fast mode, a learning rate, the data order, a random stream re-keyed after a
//! resume — and runs that must agree (every exact path and thread count, an interrupted
//! and resumed run) must diff as identical. A module of the `suite` test binary
//! (`tests/suite.rs`): `cargo test --release --test suite trace::`.

mod trace_cli;
mod trace_diff;
mod trace_files;
mod trace_index_ops;

use exactgrad::nn::data::Digits;
use exactgrad::prelude::*;
use exactgrad::trace::{
    diff::DiffReport, Kind, Record, RecordId, TraceConfig, TraceLevel, TraceModel, TraceSteps,
    TraceSummary,
};
use std::path::{Path, PathBuf};

/// A fresh path in the temporary directory for a test's file.
fn temp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("exactgrad-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    path
}

/// The two models of these tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arch {
    /// Linear(64, 16) – ReLU – Linear(16, 10): five matrix products per step (two
    /// forward, three backward).
    Mlp,
    /// Conv2d(1, 4, 3, padding 1) – BatchNorm2d – ReLU – MaxPool2d(2) – Flatten –
    /// Dropout(0.25) – Linear(64, 10): every kind of record a training step makes.
    ConvNet,
}

fn model<B: Backend>(b: &B, arch: Arch) -> exactgrad::Result<Sequential<B>> {
    let mut rng = Philox::new(3);
    Ok(match arch {
        Arch::Mlp => Sequential::new()
            .push(Linear::new(b, 64, 16, &mut rng)?)
            .push(Relu)
            .push(Linear::new(b, 16, 10, &mut rng)?),
        Arch::ConvNet => Sequential::new()
            .push(Conv2d::new(
                b,
                Conv2dConfig {
                    padding: [1, 1],
                    ..Conv2dConfig::new(1, 4, [3, 3])
                },
                &mut rng,
            )?)
            .push(BatchNorm2d::new(b, 4)?)
            .push(Relu)
            .push(MaxPool2d::new([2, 2])?)
            .push(Flatten)
            .push(Dropout::new(0.25)?)
            .push(Linear::new(b, 64, 10, &mut rng)?),
    })
}

/// One training run: its settings.
#[derive(Clone, Debug)]
struct Run {
    arch: Arch,
    steps: usize,
    level: TraceLevel,
    /// The learning rate from step 5 on (the same as before when `None`).
    lr_from_5: Option<f64>,
    shuffle: u64,
    /// Batches of the first epoch skipped before training.
    skip: usize,
    values_up_to: usize,
    capture: Vec<RecordId>,
}

impl Run {
    fn new(arch: Arch) -> Self {
        Self {
            arch,
            steps: 6,
            level: TraceLevel::Ops,
            lr_from_5: None,
            shuffle: 1,
            skip: 0,
            values_up_to: 1,
            capture: Vec::new(),
        }
    }
}

/// The 8×8 digits as `[N, 1, 8, 8]` images (the conv net) or rows of 64 (the MLP), 96
/// of them.
fn data() -> exactgrad::Result<ClassificationData> {
    let train = Digits::bundled().split()?.train;
    train.subset(&(0..96).collect::<Vec<_>>())
}

/// Trains `run` on `b` with SGD (momentum 0.9), traced to `path`.
fn train<B: Backend>(b: &B, run: &Run, path: &Path) -> exactgrad::Result<TraceSummary> {
    let data = data()?;
    let loader = DataLoader::new(b, &data, 16)?.shuffle(run.shuffle);
    loader.set_position(LoaderPosition {
        epoch: 0,
        batch: run.skip,
    })?;
    let model = model(b, run.arch)?;
    model.seed_streams(7)?;
    let mut opt = Sgd::new(
        model.parameters(),
        SgdConfig {
            momentum: 0.9,
            ..SgdConfig::new(0.05)
        },
    )?;
    let mut config = TraceConfig::new(path)
        .level(run.level)
        .model(&model)
        .values_up_to(run.values_up_to);
    for &id in &run.capture {
        config = config.capture(id);
    }
    let trace = config.start()?;
    let mut step = 0;
    while step < run.steps {
        for batch in &loader {
            let batch = batch?;
            step += 1;
            if step == 5 {
                if let Some(lr) = run.lr_from_5 {
                    opt.set_lr(lr)?;
                }
            }
            train_step(&model, &mut opt, run.arch, batch)?;
            if step == run.steps {
                break;
            }
        }
    }
    Ok(trace.finish()?)
}

/// One training step of `model` on `batch` (images `[N, 1, 8, 8]` for the conv net).
fn train_step<B: Backend>(
    model: &Sequential<B>,
    opt: &mut dyn Optimizer<B>,
    arch: Arch,
    batch: Batch<B>,
) -> exactgrad::Result<()> {
    let x = match arch {
        Arch::Mlp => batch.inputs.clone(),
        Arch::ConvNet => batch.inputs.reshape([batch.targets.len(), 1, 8, 8])?,
    };
    let loss = model
        .forward(&x)?
        .cross_entropy(&batch.targets, CrossEntropyOptions::default())?;
    opt.clear_grad();
    loss.backward()?;
    opt.step()
}

/// The diff of two traces.
fn diff(a: &Path, b: &Path) -> DiffReport {
    exactgrad::trace::diff::diff(&[a], &[b]).expect("readable traces")
}

/// Every record of a trace, step by step, in order.
fn records(path: &Path) -> Vec<Record> {
    let mut steps = TraceSteps::open(&[path]).expect("a readable trace");
    let mut out = Vec::new();
    while let Some(s) = steps.next_step().expect("a readable step") {
        assert!(s.complete, "step {} is incomplete", s.step);
        out.extend(s.records);
    }
    out
}

/// The first record (in trace order) whose outputs differ, found without the diff: an
/// independent check of what the diff reports.
fn first_differing(a: &Path, b: &Path) -> Option<(Record, Record)> {
    records(a).into_iter().zip(records(b)).find(|(x, y)| {
        x.outputs.len() != y.outputs.len()
            || x.outputs
                .iter()
                .zip(&y.outputs)
                .any(|(p, q)| p.digest != q.digest)
            || (x.outputs.is_empty() && x.state != y.state)
    })
}

/// The kinds of record a trace holds, each with its count.
fn kinds(path: &Path) -> Vec<(Kind, usize)> {
    let all = records(path);
    Kind::ALL
        .iter()
        .map(|&k| (k, all.iter().filter(|r| r.kind == k).count()))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// Two traced AdamW steps of the MLP with the standard groups (matrices decay, vectors
/// do not, at another rate), capturing the records `capture`.
fn train_groups(path: &Path, capture: &[RecordId]) -> exactgrad::Result<()> {
    let b = ScalarRefBackend;
    let model = model(&b, Arch::Mlp)?;
    let (decay, no_decay): (Vec<_>, Vec<_>) = model
        .parameters()
        .into_iter()
        .partition(|p| p.dims().len() >= 2);
    let mut opt = AdamW::with_groups(
        vec![
            ParamGroup::new(decay).weight_decay(0.1),
            ParamGroup::new(no_decay).lr(0.002).weight_decay(0.0),
        ],
        AdamWConfig::new(0.001),
    )?;
    let data = data()?;
    let loader = DataLoader::new(&b, &data, 16)?;
    let mut config = TraceConfig::new(path).model(&model);
    for &id in capture {
        config = config.capture(id);
    }
    let trace = config.start()?;
    for batch in loader.iter().take(2) {
        train_step(&model, &mut opt, Arch::Mlp, batch?)?;
    }
    trace.finish()?;
    Ok(())
}

#[test]
fn optimizer_records_carry_each_groups_hyper_parameters_and_replay() -> exactgrad::Result<()> {
    let path = temp("groups.trace");
    train_groups(&path, &[])?;
    let updates: Vec<Record> = records(&path)
        .into_iter()
        .filter(|r| r.kind == Kind::Optimizer)
        .collect();
    assert_eq!(updates.len(), 8, "four parameters, two steps");
    let state = |r: &Record, key: &str| {
        r.state
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    for r in &updates {
        let matrix = r.params().iter().all(|p| p.ends_with("weight"));
        let (lr, wd) = if matrix { (0.001, 0.1) } else { (0.002, 0.0) };
        assert_eq!(
            state(r, "lr"),
            Some(exactgrad::trace::Value::F64(lr)),
            "{:?}",
            r.params()
        );
        assert_eq!(
            state(r, "weight_decay"),
            Some(exactgrad::trace::Value::F64(wd)),
            "{:?}",
            r.params()
        );
    }
    // The second step's updates, captured in a second run, replay to their bits.
    let ids: Vec<RecordId> = updates.iter().skip(4).map(|r| r.id).collect();
    let again = temp("groups-capture.trace");
    train_groups(&again, &ids)?;
    let mut capture = again.into_os_string();
    capture.push(".capture");
    let reports = exactgrad::trace::replay_file(Path::new(&capture), &[])?;
    assert_eq!(reports.len(), 4);
    for r in &reports {
        assert_eq!(
            r.exact,
            exactgrad::trace::replay::Verdict::Reproduced,
            "{} {}",
            r.id,
            r.op
        );
    }
    Ok(())
}
