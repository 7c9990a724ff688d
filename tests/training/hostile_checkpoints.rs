//! Training checkpoints as a hostile user makes them (docs/checkpoints.md, sections 4
//! and 6): a checkpoint is all or nothing. Every bit flipped in a saved file is refused
//! (the digest covers header and data), every entry must belong to exactly one part
//! (strays, orphans and incomplete optimizer states are refused by name), the optimizer's
//! hyper-parameters — a learning rate set by hand included — are part of its state, and a
//! refused restore leaves model, optimizer, scheduler, loader and streams bit-identical.

use exactgrad::nn::checkpoint::{Integrity, TrainingCheckpoint};
use exactgrad::prelude::*;

type B = ScalarRefBackend;

/// A small run with every part a checkpoint holds: a model with a dropout stream, Adam
/// with AMSGrad (or SGD with momentum), a recursive scheduler (so the optimizer's rate
/// carries into it), a shuffled loader and a stream of the loop.
struct Run {
    model: Box<dyn Module<B>>,
    opt: Box<dyn Optimizer<B>>,
    sched: Box<dyn LrScheduler>,
    noise: Philox,
    loader: DataLoader<B, ClassificationData>,
}

fn data() -> exactgrad::Result<ClassificationData> {
    let features = (0..48)
        .map(|i| ((i * 7) % 11) as f32 * 0.25 - 1.0)
        .collect();
    ClassificationData::new(features, (0..12).map(|i| i % 3).collect(), 4, 3)
}

impl Run {
    fn new(adam: bool, seed: u64) -> exactgrad::Result<Self> {
        let b = ScalarRefBackend;
        let mut rng = Philox::new(seed);
        let model: Box<dyn Module<B>> = Box::new(
            Sequential::new()
                .push(Linear::new(&b, 4, 5, &mut rng)?)
                .push(Relu)
                .push(Dropout::new(0.25)?)
                .push(Linear::new(&b, 5, 3, &mut rng)?),
        );
        model.seed_streams(seed ^ 0x5eed).unwrap();
        let mut opt: Box<dyn Optimizer<B>> = if adam {
            Box::new(Adam::new(
                model.parameters(),
                AdamConfig {
                    amsgrad: true,
                    ..AdamConfig::new(0.01)
                },
            )?)
        } else {
            Box::new(Sgd::new(
                model.parameters(),
                SgdConfig {
                    momentum: 0.9,
                    ..SgdConfig::new(0.05)
                },
            )?)
        };
        let sched: Box<dyn LrScheduler> = Box::new(StepLr::new(
            &mut *opt,
            StepLrConfig {
                step_size: 2,
                gamma: 0.5,
            },
        )?);
        Ok(Self {
            model,
            opt,
            sched,
            noise: Philox::new(seed ^ 0xa0a0),
            loader: DataLoader::new(&b, data()?, 4)?.shuffle(seed),
        })
    }

    fn state(&mut self) -> TrainingState<'_, B> {
        TrainingState::new(&*self.model, &mut *self.opt)
            .scheduler(&mut *self.sched)
            .loader(&self.loader)
            .stream("noise", &mut self.noise)
    }

    fn train(&mut self, steps: usize) -> exactgrad::Result<()> {
        let b = ScalarRefBackend;
        for _ in 0..steps {
            let batch = match self.loader.iter().next() {
                Some(batch) => batch?,
                None => self.loader.iter().next().expect("a batch")?,
            };
            let n = batch.targets.len();
            let jitter = Tensor::randn(&b, [n, 4], 0.0, 0.1, &mut self.noise)?;
            let x = batch.inputs.add(&jitter)?;
            let loss = self
                .model
                .forward(&x)?
                .cross_entropy(&batch.targets, CrossEntropyOptions::default())?;
            self.opt.clear_grad();
            loss.backward()?;
            self.opt.step()?;
            self.sched.step(&mut *self.opt)?;
        }
        Ok(())
    }

    /// A hash of everything a checkpoint holds (the model's values and streams, the
    /// optimizer's buffers, hyper-parameters and rate, the scheduler, the loader and the
    /// loop's stream: the bytes of its file), and the optimizer's rate.
    fn fingerprint(&mut self) -> exactgrad::Result<(u64, u64)> {
        let lr = self.opt.lr().to_bits();
        let bytes = self.state().capture()?.file().to_bytes()?;
        // FNV-1a over the bytes.
        let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        Ok((hash, lr))
    }
}

/// A run of 3 steps (the loader stands inside its second epoch), and its saved bytes.
fn saved(adam: bool) -> exactgrad::Result<(Run, Vec<u8>)> {
    let mut run = Run::new(adam, 1)?;
    run.train(3)?;
    let path = std::env::temp_dir().join(format!(
        "exactgrad-hostile-{}-{adam}-{:?}.safetensors",
        std::process::id(),
        std::thread::current().id()
    ));
    run.state().save(&path)?;
    let bytes = std::fs::read(&path)
        .map_err(|e| exactgrad::Error::invalid("test", "read", e.to_string()))?;
    std::fs::remove_file(&path).ok();
    Ok((run, bytes))
}

/// The checkpoint `bytes` decode to, restored into `run`: `Err` when either step refuses.
fn restore(run: &mut Run, bytes: &[u8]) -> exactgrad::Result<()> {
    let file = TensorFile::from_bytes(bytes)?;
    run.state().restore(&TrainingCheckpoint::from_file(file))?;
    Ok(())
}

/// The length of the header (the 8-byte prefix included).
fn header_end(bytes: &[u8]) -> usize {
    8 + u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize
}

#[test]
fn every_bit_flipped_in_the_header_is_refused_and_changes_nothing() -> exactgrad::Result<()> {
    let (_, bytes) = saved(true)?;
    let mut target = Run::new(true, 9)?;
    let before = target.fingerprint()?;
    let mut accepted = Vec::new();
    for byte in 0..header_end(&bytes) {
        for bit in [byte % 8, (byte + 3) % 8] {
            let mut b = bytes.clone();
            b[byte] ^= 1 << bit;
            if restore(&mut target, &b).is_ok() {
                accepted.push((byte, bit));
                target = Run::new(true, 9)?;
            }
        }
    }
    assert!(
        accepted.is_empty(),
        "{} header flips accepted, e.g. {:?}",
        accepted.len(),
        &accepted[..accepted.len().min(8)]
    );
    assert_eq!(
        target.fingerprint()?,
        before,
        "a refused load changed the run"
    );
    // The intact file loads.
    restore(&mut target, &bytes)?;
    Ok(())
}

#[test]
fn every_bit_flipped_in_the_data_is_refused() -> exactgrad::Result<()> {
    let (_, bytes) = saved(true)?;
    let mut target = Run::new(true, 9)?;
    let before = target.fingerprint()?;
    let mut accepted = 0;
    for byte in header_end(&bytes)..bytes.len() {
        for bit in [byte % 8, 7 - byte % 8] {
            let mut b = bytes.clone();
            b[byte] ^= 1 << bit;
            if restore(&mut target, &b).is_ok() {
                accepted += 1;
                target = Run::new(true, 9)?;
            }
        }
    }
    assert_eq!(accepted, 0, "data flips accepted");
    assert_eq!(
        target.fingerprint()?,
        before,
        "a refused load changed the run"
    );
    Ok(())
}

#[test]
fn a_file_without_a_digest_loads_and_says_it_was_not_verified() -> exactgrad::Result<()> {
    let (_, bytes) = saved(false)?;
    let sealed = TrainingCheckpoint::from_bytes(&bytes)?;
    assert_eq!(sealed.integrity(), Integrity::Verified);
    // The same checkpoint as PyTorch or a hand-made tool would write it: no digest.
    let plain_bytes = sealed.file().to_bytes()?;
    assert!(plain_bytes.len() < bytes.len());
    let plain = TrainingCheckpoint::from_bytes(&plain_bytes)?;
    assert_eq!(plain.integrity(), Integrity::Unverified);
    assert_eq!(plain, sealed, "the same contents");
    let (mut a, mut b) = (Run::new(false, 5)?, Run::new(false, 6)?);
    assert_eq!(a.state().restore(&sealed)?, Integrity::Verified);
    assert_eq!(b.state().restore(&plain)?, Integrity::Unverified);
    assert_eq!(a.fingerprint()?, b.fingerprint()?);
    // A checkpoint captured in memory was read from no bytes.
    assert_eq!(a.state().capture()?.integrity(), Integrity::Unverified);
    Ok(())
}

/// Changes `file` and restores it into a fresh run: the error, and whether the run
/// stayed as it was.
fn refused(
    good: &TrainingCheckpoint,
    adam: bool,
    edit: impl FnOnce(&mut TensorFile) -> exactgrad::Result<()>,
) -> exactgrad::Result<String> {
    let mut file = good.file().clone();
    edit(&mut file)?;
    let mut run = Run::new(adam, 9)?;
    run.opt.set_lr(0.0123)?;
    let before = run.fingerprint()?;
    let err = match run.state().restore(&TrainingCheckpoint::from_file(file)) {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    };
    assert_eq!(
        run.fingerprint()?,
        before,
        "changed by a refused load: {err}"
    );
    Ok(err)
}

#[test]
fn entries_that_belong_to_no_part_are_refused_by_name() -> exactgrad::Result<()> {
    let (_, bytes) = saved(true)?;
    let good = TrainingCheckpoint::from_file(TensorFile::from_bytes(&bytes)?);
    type Edit = Box<dyn FnOnce(&mut TensorFile) -> exactgrad::Result<()>>;
    let cases: Vec<(&str, Edit)> = vec![
        (
            "junk",
            Box::new(|f| f.insert_floats("junk", &[1], vec![1.0])),
        ),
        (
            "optimizer.state.9.exp_avg",
            Box::new(|f| f.insert_floats("optimizer.state.9.exp_avg", &[3], vec![0.0; 3])),
        ),
        (
            "optimizer.note",
            Box::new(|f| {
                f.set_metadata("optimizer.note", "x");
                Ok(())
            }),
        ),
        (
            "bogus",
            Box::new(|f| {
                f.set_metadata("bogus", "1");
                Ok(())
            }),
        ),
        (
            "model.extra",
            Box::new(|f| {
                f.set_metadata("model.extra", "1");
                Ok(())
            }),
        ),
        (
            "scheduler.3.kind",
            Box::new(|f| {
                f.set_metadata("scheduler.3.kind", "StepLr");
                Ok(())
            }),
        ),
        (
            "loader.extra",
            Box::new(|f| {
                f.set_metadata("loader.extra", "0");
                Ok(())
            }),
        ),
        (
            "stream.x",
            Box::new(|f| f.insert_floats("stream.x", &[1], vec![0.0])),
        ),
    ];
    for (name, edit) in cases {
        let err = refused(&good, true, edit)?;
        // The optimizer names the entries of its part without their prefix.
        let short = name.strip_prefix("optimizer.").unwrap_or(name);
        assert!(err.contains(short), "{name}: {err}");
    }
    Ok(())
}

#[test]
fn an_incomplete_optimizer_state_is_refused_naming_what_is_missing() -> exactgrad::Result<()> {
    let (_, bytes) = saved(true)?;
    let good = TrainingCheckpoint::from_file(TensorFile::from_bytes(&bytes)?);
    for name in [
        "optimizer.state.0.step",
        "optimizer.state.1.exp_avg_sq",
        "optimizer.state.3.max_exp_avg_sq",
    ] {
        let err = refused(&good, true, |f| {
            assert!(f.remove(name), "{name}");
            Ok(())
        })?;
        let short = name.strip_prefix("optimizer.").unwrap();
        assert!(
            err.contains("missing") && err.contains(short),
            "{name}: {err}"
        );
    }
    // One bit of a name flipped: the entry is missing and the new name left over.
    let err = refused(&good, true, |f| {
        let (s, v) = f.ints("optimizer.state.2.step")?;
        let (s, v) = (s.to_vec(), v.to_vec());
        f.remove("optimizer.state.2.step");
        f.insert_ints("optimizer.state.2.stdp", &s, v)
    })?;
    assert!(
        err.contains("state.2.step") && err.contains("state.2.stdp"),
        "{err}"
    );
    // A missing hyper-parameter.
    let err = refused(&good, true, |f| {
        let mut g = TensorFile::new();
        for n in f.names() {
            match f.floats(n) {
                Ok((s, v)) => g.insert_floats(n, s, v.to_vec())?,
                Err(_) => {
                    let (s, v) = f.ints(n)?;
                    g.insert_ints(n, s, v.to_vec())?
                }
            }
        }
        for (k, v) in f.metadata_entries() {
            if k != "optimizer.param_groups.0.beta2" {
                g.set_metadata(k, v);
            }
        }
        *f = g;
        Ok(())
    })?;
    assert!(err.contains("beta2"), "{err}");
    Ok(())
}

#[test]
fn a_learning_rate_set_by_hand_is_part_of_the_state() -> exactgrad::Result<()> {
    // Set by hand (not by the scheduler), saved, restored into a run built otherwise.
    let mut run = Run::new(false, 1)?;
    run.train(3)?;
    run.opt.set_lr(0.0123)?;
    let ckpt = run.state().capture()?;
    let mut other = Run::new(false, 2)?;
    other.state().restore(&ckpt)?;
    assert_eq!(other.opt.lr(), 0.0123);
    // And the runs continue alike (the recursive schedule starts from that rate).
    run.train(3)?;
    other.train(3)?;
    assert_eq!(other.fingerprint()?, run.fingerprint()?);
    // Steps 4 and 6 of a step size of 2 halve the rate.
    assert_eq!(other.opt.lr(), 0.0123 * 0.25);
    Ok(())
}

#[test]
fn a_refused_restore_leaves_every_part_bit_identical() -> exactgrad::Result<()> {
    for adam in [false, true] {
        let (_, bytes) = saved(adam)?;
        let good = TrainingCheckpoint::from_file(TensorFile::from_bytes(&bytes)?);
        let buffer = if adam {
            "optimizer.state.0.exp_avg"
        } else {
            "optimizer.state.0.momentum_buffer"
        };
        // A value the optimizer cannot hold: refused after the scheduler took its state,
        // which must be put back without touching the hand-set rate.
        let err = refused(&good, adam, |f| {
            let (s, v) = f.floats(buffer)?;
            let (s, mut v) = (s.to_vec(), v.to_vec());
            v[1] = f32::NAN;
            f.insert_floats(buffer, &s, v)
        })?;
        assert!(
            err.contains(buffer.strip_prefix("optimizer.").unwrap()),
            "{err}"
        );
        let edits: [(&str, &str); 4] = [
            ("scheduler.last_epoch", "-5"),
            ("loader.batch", "7"),
            ("rng.noise", "not a stream"),
            ("optimizer.param_groups.0.lr", "-1.0"),
        ];
        for (key, value) in edits {
            refused(&good, adam, |f| {
                f.set_metadata(key, value);
                Ok(())
            })?;
        }
        // A parameter of another shape.
        refused(&good, adam, |f| {
            f.insert_floats("model.0.bias", &[2], vec![0.0; 2])
        })?;
    }
    // A damaged file: refused before anything is read.
    let (_, mut bytes) = saved(true)?;
    let n = bytes.len();
    bytes[n - 3] ^= 1;
    let mut run = Run::new(true, 9)?;
    run.opt.set_lr(0.0123)?;
    let before = run.fingerprint()?;
    assert!(restore(&mut run, &bytes).is_err());
    assert_eq!(run.fingerprint()?, before);
    Ok(())
}

#[test]
fn the_optimizer_hyper_parameters_are_restored() -> exactgrad::Result<()> {
    let b = ScalarRefBackend;
    let lin = Linear::new(&b, 2, 2, &mut Philox::new(1))?;
    let sgd = Sgd::new(
        lin.parameters(),
        SgdConfig {
            momentum: 0.9,
            weight_decay: 1e-3,
            nesterov: true,
            ..SgdConfig::new(0.1)
        },
    )?;
    let mut other = Sgd::new(
        lin.parameters(),
        SgdConfig {
            momentum: 0.5,
            ..SgdConfig::new(0.2)
        },
    )?;
    other.load_state_dict(&sgd.state_dict()?)?;
    assert_eq!(other.config(), sgd.config());
    let adam = AdamW::new(
        lin.parameters(),
        AdamWConfig {
            betas: (0.8, 0.99),
            eps: 1e-6,
            weight_decay: 0.05,
            amsgrad: true,
            ..AdamWConfig::new(3e-3)
        },
    )?;
    let mut other = AdamW::new(lin.parameters(), AdamWConfig::new(1e-3))?;
    other.load_state_dict(&adam.state_dict()?)?;
    assert_eq!(other.config(), adam.config());
    // A state with hyper-parameters no optimizer can have is refused, changing nothing.
    let mut state = adam.state_dict()?;
    state.set_metadata("param_groups.0.beta1", "1.5");
    let mut fresh = AdamW::new(lin.parameters(), AdamWConfig::new(1e-3))?;
    let err = fresh.load_state_dict(&state).unwrap_err().to_string();
    assert!(err.contains("betas.0"), "{err}");
    assert_eq!(fresh.config(), &AdamConfig::from(AdamWConfig::new(1e-3)));
    Ok(())
}
