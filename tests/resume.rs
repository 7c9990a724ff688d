//! Bit-identical resume (docs/checkpoints.md, "Resume"): train 2N steps in one go, or N
//! steps, save a training checkpoint, restore it into a fresh model, optimizer,
//! scheduler and random stream, and train N more: the final parameters and buffers have
//! the same hash, on ScalarRef, on every exact path and thread count (where they also
//! equal ScalarRef's), and in fast mode on the same path.

use exactgrad::nn::checkpoint::TrainingCheckpoint;
use exactgrad::nn::data::ClassificationData;
use exactgrad::nn::optim::{SchedulerConfig, SequentialLr};
use exactgrad::nn::{BatchNorm2d, Conv2d, Flatten, Linear, Module, Relu, Sequential};
use exactgrad::prelude::*;
use std::path::PathBuf;

/// Steps before the interruption; the run trains twice as many. With 96 images in
/// batches of 32 an epoch has 3 batches, so the run crosses epoch boundaries and stops
/// in the middle of one.
const N: usize = 4;

#[derive(Clone, Copy, Debug)]
enum Opt {
    Sgd,
    Adam,
    AdamW,
}

fn model<B: Backend>(b: &B, seed: u64) -> exactgrad::Result<Sequential<B>> {
    let mut rng = Philox::new(seed);
    let pad = Conv2dOptions {
        padding: [1, 1],
        ..Conv2dOptions::default()
    };
    Ok(Sequential::new()
        .push(Conv2d::with_options(b, 1, 3, [3, 3], pad, true, &mut rng)?)
        .push(BatchNorm2d::new(b, 3)?)
        .push(Relu)
        .push(Flatten)
        .push(Linear::new(b, 192, 10, &mut rng)?))
}

fn optimizer<B: Backend>(
    kind: Opt,
    params: Vec<Tensor<B>>,
) -> exactgrad::Result<Box<dyn Optimizer<B>>> {
    Ok(match kind {
        Opt::Sgd => Box::new(Sgd::new(
            params,
            SgdConfig {
                momentum: 0.9,
                nesterov: true,
                weight_decay: 1e-4,
                ..SgdConfig::new(0.05)
            },
        )?),
        Opt::Adam => Box::new(Adam::new(
            params,
            AdamConfig {
                amsgrad: true,
                ..AdamConfig::new(1e-2)
            },
        )?),
        Opt::AdamW => Box::new(AdamW::new(params, AdamWConfig::new(1e-2))?),
    })
}

/// Warm-up over 2 steps, then cosine annealing.
fn scheduler<B: Backend>(opt: &mut dyn Optimizer<B>) -> exactgrad::Result<SequentialLr> {
    let configs: Vec<SchedulerConfig> = vec![
        LinearLrConfig {
            start_factor: 0.25,
            end_factor: 1.0,
            total_iters: 2,
        }
        .into(),
        CosineAnnealingLrConfig {
            t_max: 10,
            eta_min: 1e-4,
        }
        .into(),
    ];
    SequentialLr::new(opt, configs, vec![2])
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "exactgrad-resume-{}-{name}.safetensors",
        std::process::id()
    ))
}

/// Trains `2N` steps; with `interrupt`, saves a checkpoint after `N`, drops everything
/// and continues from the checkpoint in fresh objects built from other seeds. Returns
/// the hash of the final parameters and float buffers, and the batch counter.
fn run<B: Backend>(
    b: &B,
    data: &ClassificationData,
    kind: Opt,
    interrupt: bool,
    tag: &str,
) -> exactgrad::Result<(u64, i64)> {
    run_with(b, data, kind, interrupt, None, tag)
}

/// What a negative control leaves out of the restore.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Skip {
    Optimizer,
    Scheduler,
    Noise,
}

fn run_with<B: Backend>(
    b: &B,
    data: &ClassificationData,
    kind: Opt,
    interrupt: bool,
    skip: Option<Skip>,
    tag: &str,
) -> exactgrad::Result<(u64, i64)> {
    let loader = DataLoader::new(b, data, 32)?.shuffle(5);
    let per_epoch = loader.num_batches();
    let build = |seed: u64| -> exactgrad::Result<_> {
        let m = model(b, seed)?;
        let mut opt = optimizer(kind, m.parameters())?;
        let sched = scheduler(&mut *opt)?;
        Ok((m, opt, sched, Philox::new(seed ^ 0xa0a0)))
    };
    let (mut m, mut opt, mut sched, mut noise) = build(1)?;
    let mut pos = LoaderPosition::default();
    for step in 0..2 * N {
        if interrupt && step == N {
            let path = temp(tag);
            let mut ckpt = TrainingCheckpoint::new();
            ckpt.set_model(&m)?;
            ckpt.set_optimizer(&*opt)?;
            ckpt.set_scheduler(&sched);
            ckpt.set_rng("noise", &noise);
            ckpt.set_position(pos);
            ckpt.save(&path)?;
            drop((m, opt, sched, noise));
            // A fresh process would start here.
            let restored = TrainingCheckpoint::load(&path)?;
            std::fs::remove_file(&path).ok();
            let (m2, mut opt2, mut sched2, _) = build(77)?;
            restored.restore_model(&m2)?;
            if skip != Some(Skip::Optimizer) {
                restored.restore_optimizer(&mut *opt2)?;
            }
            if skip != Some(Skip::Scheduler) {
                restored.restore_scheduler(&mut sched2, &mut *opt2)?;
            }
            let (_, _, _, fresh_noise) = build(1)?;
            (m, opt, sched) = (m2, opt2, sched2);
            noise = if skip == Some(Skip::Noise) {
                fresh_noise
            } else {
                restored.rng("noise")?
            };
            assert_eq!(restored.position()?, pos);
        }
        let batch = loader
            .epoch_from(pos.epoch, pos.batch)
            .next()
            .expect("the position is inside its epoch")?;
        let n = batch.targets.len();
        // Inputs with a little noise from the run's own stream (an augmentation).
        let jitter = Tensor::randn(b, [n, 64], 0.0, 0.05, &mut noise)?;
        let x = batch.inputs.add(&jitter)?.reshape([n, 1, 8, 8])?;
        let loss = m
            .forward(&x)?
            .cross_entropy(&batch.targets, CrossEntropyOptions::default())?;
        opt.clear_grad();
        loss.backward(None, false)?;
        opt.step()?;
        sched.step(&mut *opt)?;
        pos = pos.next(per_epoch);
    }
    let mut state = m.parameters();
    state.extend(m.named_buffers().into_iter().map(|(_, t)| t));
    let mut count = 0;
    m.visit_int_buffers("", &mut |_, c| count = c.get());
    Ok((hash_tensors(&state.iter().collect::<Vec<_>>())?, count))
}

fn data() -> exactgrad::Result<ClassificationData> {
    let train = Digits::bundled().split()?.train;
    train.subset(&(0..96).collect::<Vec<_>>())
}

fn check<B: Backend>(b: &B, kind: Opt) -> exactgrad::Result<u64> {
    let d = data()?;
    let tag = format!("{}-{kind:?}", b.name()).replace('/', "-");
    let (whole, count) = run(b, &d, kind, false, &tag)?;
    let (resumed, count2) = run(b, &d, kind, true, &tag)?;
    assert_eq!(count, (2 * N) as i64);
    assert_eq!(count2, count, "{tag}: num_batches_tracked");
    assert_eq!(
        resumed, whole,
        "{tag}: the resumed run differs from the uninterrupted one"
    );
    Ok(whole)
}

#[test]
fn resume_is_bit_identical_on_every_exact_path_and_equals_scalar_ref() -> exactgrad::Result<()> {
    for kind in [Opt::Sgd, Opt::Adam, Opt::AdamW] {
        let reference = check(&ScalarRefBackend, kind)?;
        for isa in Isa::ALL
            .into_iter()
            .filter(|i| i.is_supported(ComputeMode::Exact))
        {
            for threads in [1, 2] {
                let h = check(&ExactBackend::with_isa(isa, threads)?, kind)?;
                assert_eq!(
                    h, reference,
                    "{kind:?} on exact {isa} with {threads} threads"
                );
            }
        }
    }
    Ok(())
}

#[test]
fn resume_is_bit_identical_in_fast_mode_on_the_same_path() -> exactgrad::Result<()> {
    for kind in [Opt::Sgd, Opt::Adam, Opt::AdamW] {
        check(&FastScalarRefBackend, kind)?;
        check(
            &FastBackend::with_isa(Isa::best(ComputeMode::Fast), 2)?,
            kind,
        )?;
    }
    Ok(())
}

/// The test above can fail: leaving out any part of the restore changes the result.
#[test]
fn resume_without_any_one_part_of_the_checkpoint_differs() -> exactgrad::Result<()> {
    let d = data()?;
    let b = ScalarRefBackend;
    let (whole, _) = run(&b, &d, Opt::Adam, false, "control")?;
    for skip in [Skip::Optimizer, Skip::Scheduler, Skip::Noise] {
        let (h, _) = run_with(
            &b,
            &d,
            Opt::Adam,
            true,
            Some(skip),
            &format!("control-{skip:?}"),
        )?;
        assert_ne!(h, whole, "without restoring {skip:?} the run must differ");
    }
    Ok(())
}

#[test]
fn a_checkpoint_of_another_optimizer_or_model_is_refused() -> exactgrad::Result<()> {
    let b = ScalarRefBackend;
    let m = model(&b, 1)?;
    let sgd = optimizer(Opt::Sgd, m.parameters())?;
    let mut ckpt = TrainingCheckpoint::new();
    ckpt.set_model(&m)?;
    ckpt.set_optimizer(&*sgd)?;
    let mut adam = optimizer(Opt::Adam, m.parameters())?;
    let err = ckpt.restore_optimizer(&mut *adam).unwrap_err().to_string();
    assert!(
        err.contains("is the state of a Sgd optimizer, not Adam"),
        "{err}"
    );
    let other = Sequential::new().push(Linear::new(&b, 4, 2, &mut Philox::new(0))?);
    let err = ckpt.restore_model(&other).unwrap_err().to_string();
    assert!(
        err.contains("missing entries [\"model.0.bias\", \"model.0.weight\"]")
            || err.contains("model.0.weight"),
        "{err}"
    );
    assert!(ckpt.position().is_err(), "no position was stored");
    Ok(())
}
