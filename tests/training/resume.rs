//! Bit-identical resume (docs/checkpoints.md, "Resume"): train 2N steps in one go, or N
//! steps, capture the training state in a file, rebuild everything from other seeds (or
//! start a new process), restore it in one call and train N more: the final parameters
//! and buffers have the same hash, on ScalarRef, on every exact path and thread count
//! (where they also equal ScalarRef's), and in fast mode on the same path.
//!
//! The models draw random numbers in every way nn has — `Dropout`, attention dropout
//! (`MultiheadAttention`, `TransformerEncoderLayer`), the inter-layer dropout of `Lstm`
//! and `Gru` — and the loop has a stream of its own, so every stream must come back.

use exactgrad::nn::checkpoint::TrainingCheckpoint;
use exactgrad::nn::optim::{SchedulerConfig, SequentialLr};
use exactgrad::prelude::*;
use std::path::{Path, PathBuf};

/// Steps before the interruption; the run trains twice as many. With 96 images in
/// batches of 32 an epoch has 3 batches, so the run crosses an epoch boundary and stops
/// in the middle of one.
const N: usize = 4;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Opt {
    Sgd,
    Adam,
    AdamW,
}

/// The two models: a conv net with batch norm, and one with every random module.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Arch {
    Conv,
    Stochastic,
}

/// Conv → BatchNorm2d → ReLU → Dropout(0.3) → max pool → LSTM (2 layers, dropout 0.3
/// between them) → GRU (2 layers, dropout 0.3) → transformer encoder layer (dropout 0.2,
/// so attention dropout too) → multi-head attention (dropout 0.2) → mean over time →
/// Linear.
#[derive(Module)]
struct Stochastic<B: Backend> {
    conv: Conv2d<B>,
    bn: BatchNorm2d<B>,
    drop: Dropout,
    lstm: Lstm<B>,
    gru: Gru<B>,
    encoder: TransformerEncoderLayer<B>,
    attention: MultiheadAttention<B>,
    fc: Linear<B>,
}

impl<B: Backend> Stochastic<B> {
    fn new(b: &B, rng: &mut Philox) -> exactgrad::Result<Self> {
        let rnn = |input, rng: &mut Philox, gru: bool| -> exactgrad::Result<_> {
            let config = RnnConfig {
                num_layers: 2,
                dropout: 0.3,
                batch_first: true,
                ..RnnConfig::new(input, 8)
            };
            Ok(if gru {
                (None, Some(Gru::new(b, config, rng)?))
            } else {
                (Some(Lstm::new(b, config, rng)?), None)
            })
        };
        let conv = Conv2d::new(
            b,
            Conv2dConfig {
                padding: [1, 1],
                ..Conv2dConfig::new(1, 4, [3, 3])
            },
            rng,
        )?;
        let (lstm, _) = rnn(16, rng, false)?;
        let (_, gru) = rnn(8, rng, true)?;
        let encoder = TransformerEncoderLayer::new(
            b,
            TransformerEncoderLayerConfig {
                dim_feedforward: 16,
                dropout: 0.2,
                batch_first: true,
                ..TransformerEncoderLayerConfig::new(8, 2)
            },
            rng,
        )?;
        let attention = MultiheadAttention::new(
            b,
            MultiheadAttentionConfig {
                dropout: 0.2,
                batch_first: true,
                ..MultiheadAttentionConfig::new(8, 2)
            },
            rng,
        )?;
        Ok(Self {
            conv,
            bn: BatchNorm2d::new(b, 4)?,
            drop: Dropout::new(0.3)?,
            lstm: lstm.expect("built"),
            gru: gru.expect("built"),
            encoder,
            attention,
            fc: Linear::new(b, 8, 10, rng)?,
        })
    }
}

impl<B: Backend> Stochastic<B> {
    fn forward(&self, x: &Tensor<B>) -> exactgrad::Result<Tensor<B>> {
        let n = x.dims()[0];
        let x = self.bn.forward(&self.conv.forward(x)?)?.relu()?;
        let x = self.drop.forward(&x)?;
        let x = x.max_pool2d(MaxPool2dOptions::new([2, 2]))?; // [N, 4, 4, 4]
        let seq = x.permute(&[0, 2, 1, 3])?.reshape([n, 4, 16])?; // 4 steps of 16
        let y = self.lstm.forward(&seq)?;
        let y = self.gru.forward(&y)?;
        let y = self.encoder.forward(&y)?;
        let y = self.attention.forward(&y)?;
        self.fc.forward(&y.mean_dims(&[1], false)?)
    }
}

fn model<B: Backend>(b: &B, arch: Arch, seed: u64) -> exactgrad::Result<Box<dyn Module<B>>> {
    let mut rng = Philox::new(seed);
    Ok(match arch {
        Arch::Conv => {
            let conv = Conv2dConfig {
                padding: [1, 1],
                ..Conv2dConfig::new(1, 3, [3, 3])
            };
            Box::new(
                Sequential::new()
                    .push(Conv2d::new(b, conv, &mut rng)?)
                    .push(BatchNorm2d::new(b, 3)?)
                    .push(Relu)
                    .push(Flatten)
                    .push(Linear::new(b, 192, 10, &mut rng)?),
            )
        }
        Arch::Stochastic => Box::new(Stochastic::new(b, &mut rng)?),
    })
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
        Opt::AdamW => Box::new(AdamW::new(
            params,
            AdamWConfig {
                weight_decay: 0.05,
                ..AdamWConfig::new(1e-2)
            },
        )?),
    })
}

/// A one-cycle schedule for the stochastic model; warm-up then cosine annealing for the
/// conv net.
fn scheduler<B: Backend>(
    arch: Arch,
    opt: &mut dyn Optimizer<B>,
) -> exactgrad::Result<Box<dyn LrScheduler>> {
    if arch == Arch::Stochastic {
        return Ok(Box::new(OneCycleLr::new(
            opt,
            OneCycleLrConfig::new(2e-2, 2 * N as u64),
        )?));
    }
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
    Ok(Box::new(SequentialLr::new(opt, configs, vec![2])?))
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "exactgrad-resume-{}-{name}.safetensors",
        std::process::id()
    ))
}

/// One training run's objects.
struct Run<B: Backend> {
    model: Box<dyn Module<B>>,
    opt: Box<dyn Optimizer<B>>,
    sched: Box<dyn LrScheduler>,
    noise: Philox,
    loader: DataLoader<B, ClassificationData>,
}

impl<B: Backend> Run<B> {
    /// Everything built from `seed` (a restored run is built from another one, so that
    /// only the checkpoint can make it equal).
    fn new(b: &B, arch: Arch, kind: Opt, seed: u64) -> exactgrad::Result<Self> {
        let model = model(b, arch, seed)?;
        model.seed_streams(seed ^ 0x5eed).unwrap();
        let mut opt = optimizer(kind, model.parameters())?;
        let sched = scheduler(arch, &mut *opt)?;
        Ok(Self {
            model,
            opt,
            sched,
            noise: Philox::new(seed ^ 0xa0a0),
            loader: DataLoader::new(b, data()?, 32)?.shuffle(seed),
        })
    }

    fn state(&mut self) -> TrainingState<'_, B> {
        TrainingState::new(&*self.model, &mut *self.opt)
            .scheduler(&mut *self.sched)
            .loader(&self.loader)
            .stream("noise", &mut self.noise)
    }

    /// `steps` training steps, taking batches where the loader stands.
    fn train(&mut self, b: &B, steps: usize) -> exactgrad::Result<()> {
        let mut done = 0;
        while done < steps {
            for batch in &self.loader {
                let batch = batch?;
                let n = batch.targets.len();
                // A little noise from the run's own stream (an augmentation).
                let jitter = Tensor::randn(b, [n, 64], 0.0, 0.05, &mut self.noise)?;
                let x = batch.inputs.add(&jitter)?.reshape([n, 1, 8, 8])?;
                let loss = self
                    .model
                    .forward(&x)?
                    .cross_entropy(&batch.targets, CrossEntropyOptions::default())?;
                self.opt.clear_grad();
                loss.backward()?;
                clip_grad_norm(self.opt.parameters(), 1.0)?;
                self.opt.step()?;
                self.sched.step(&mut *self.opt)?;
                done += 1;
                if done == steps {
                    break;
                }
            }
        }
        Ok(())
    }

    /// The hash of the parameters and float buffers, and the batch counters.
    fn hash(&self) -> exactgrad::Result<(u64, Vec<i64>)> {
        let mut state = self.model.parameters();
        state.extend(self.model.named_buffers().into_iter().map(|(_, t)| t));
        let mut counts = Vec::new();
        self.model.visit_entries(&mut |_, e| {
            if let Entry::IntBuffer(c) = e {
                counts.push(c.get());
            }
        });
        Ok((hash_tensors(&state.iter().collect::<Vec<_>>())?, counts))
    }
}

fn data() -> exactgrad::Result<ClassificationData> {
    let train = Digits::bundled().split()?.train;
    train.subset(&(0..96).collect::<Vec<_>>())
}

/// 2N steps in one go.
fn whole<B: Backend>(b: &B, arch: Arch, kind: Opt) -> exactgrad::Result<(u64, Vec<i64>)> {
    let mut run = Run::new(b, arch, kind, 1)?;
    run.train(b, 2 * N)?;
    run.hash()
}

/// N steps, a checkpoint at `path`; returns the run's model streams (for the checks).
fn first_half<B: Backend>(b: &B, arch: Arch, kind: Opt, path: &Path) -> exactgrad::Result<()> {
    let mut run = Run::new(b, arch, kind, 1)?;
    run.train(b, N)?;
    run.state().save(path)
}

/// Everything rebuilt from other seeds, restored from `path`, N more steps.
fn second_half<B: Backend>(
    b: &B,
    arch: Arch,
    kind: Opt,
    path: &Path,
) -> exactgrad::Result<(u64, Vec<i64>)> {
    let mut run = Run::new(b, arch, kind, 77)?;
    run.state().load(path)?;
    run.train(b, N)?;
    run.hash()
}

fn check<B: Backend>(b: &B, arch: Arch, kind: Opt) -> exactgrad::Result<u64> {
    let tag = format!("{}-{arch:?}-{kind:?}", b.name()).replace('/', "-");
    let (whole, counts) = whole(b, arch, kind)?;
    let path = temp(&tag);
    first_half(b, arch, kind, &path)?;
    let (resumed, counts2) = second_half(b, arch, kind, &path)?;
    std::fs::remove_file(&path).ok();
    println!("{tag}: uninterrupted {whole:#018x}, resumed {resumed:#018x}");
    assert_eq!(counts, vec![(2 * N) as i64]);
    assert_eq!(counts2, counts, "{tag}: num_batches_tracked");
    assert_eq!(
        resumed, whole,
        "{tag}: the resumed run differs from the uninterrupted one"
    );
    Ok(whole)
}

#[test]
fn every_random_module_of_nn_is_in_the_stochastic_model_and_draws() -> exactgrad::Result<()> {
    let b = ScalarRefBackend;
    let m = model(&b, Arch::Stochastic, 1)?;
    assert_eq!(
        m.stream_names(),
        [
            "drop.rng",
            "lstm.dropout_rng",
            "gru.dropout_rng",
            "encoder.dropout_rng",
            "encoder.self_attn.dropout_rng",
            "attention.dropout_rng",
        ]
    );
    m.seed_streams(3).unwrap();
    m.forward(&Tensor::randn(
        &b,
        [2, 1, 8, 8],
        0.0,
        1.0,
        &mut Philox::new(1),
    )?)?;
    m.visit_entries(&mut |name, e| {
        if let Entry::Stream(s) = e {
            let (_, position) = s.state().expect("seeded");
            assert!(position > 0, "{name} did not draw");
        }
    });
    Ok(())
}

#[test]
fn resume_is_bit_identical_on_every_exact_path_and_equals_scalar_ref() -> exactgrad::Result<()> {
    for (arch, kind) in [
        (Arch::Stochastic, Opt::AdamW),
        (Arch::Conv, Opt::Sgd),
        (Arch::Conv, Opt::Adam),
    ] {
        let reference = check(&ScalarRefBackend, arch, kind)?;
        for isa in Isa::ALL
            .into_iter()
            .filter(|i| i.is_supported(ComputeMode::Exact))
        {
            for threads in [1, 2] {
                let h = check(&ExactBackend::with_isa(isa, threads)?, arch, kind)?;
                assert_eq!(
                    h, reference,
                    "{arch:?} {kind:?} on exact {isa} with {threads} threads"
                );
            }
        }
    }
    Ok(())
}

#[test]
fn resume_is_bit_identical_in_fast_mode_on_the_same_path() -> exactgrad::Result<()> {
    for (arch, kind) in [(Arch::Stochastic, Opt::AdamW), (Arch::Conv, Opt::Adam)] {
        check(&FastScalarRefBackend, arch, kind)?;
        check(
            &FastBackend::with_isa(Isa::best(ComputeMode::Fast), 2)?,
            arch,
            kind,
        )?;
    }
    Ok(())
}

/// The environment variable that makes [`resume_in_a_new_process`] the second half.
const CHILD: &str = "EXACTGRAD_RESUME_CHILD";

/// The second half runs in a new process of this test binary: nothing of the first half
/// survives but the file.
#[test]
fn resume_in_a_new_process() -> exactgrad::Result<()> {
    let b = ScalarRefBackend;
    if let Ok(path) = std::env::var(CHILD) {
        let (h, _) = second_half(&b, Arch::Stochastic, Opt::AdamW, Path::new(&path))?;
        std::fs::write(format!("{path}.hash"), h.to_string()).expect("writable");
        return Ok(());
    }
    let (whole, _) = whole(&b, Arch::Stochastic, Opt::AdamW)?;
    let path = temp("new-process");
    first_half(&b, Arch::Stochastic, Opt::AdamW, &path)?;
    let status = std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            &super::test_name(module_path!(), "resume_in_a_new_process"),
            "--test-threads",
            "1",
        ])
        .env(CHILD, &path)
        .status()
        .expect("the test binary starts");
    assert!(status.success());
    let hash_file = format!("{}.hash", path.display());
    let resumed: u64 = std::fs::read_to_string(&hash_file)
        .expect("the child wrote its hash")
        .parse()
        .expect("a number");
    std::fs::remove_file(&path).ok();
    std::fs::remove_file(&hash_file).ok();
    assert_eq!(resumed, whole, "the run resumed in a new process differs");
    Ok(())
}

/// The tests above can fail: a checkpoint with any one part changed gives another run.
#[test]
fn a_checkpoint_with_any_part_changed_gives_another_run() -> exactgrad::Result<()> {
    let b = ScalarRefBackend;
    let (arch, kind) = (Arch::Stochastic, Opt::AdamW);
    let (whole, _) = whole(&b, arch, kind)?;
    let path = temp("control");
    first_half(&b, arch, kind, &path)?;
    let good = TrainingCheckpoint::load(&path)?;
    // (what, metadata entry, new value)
    let edits = [
        ("a dropout stream", "stream.drop.rng", "1:0"),
        (
            "the LSTM's dropout stream",
            "stream.lstm.dropout_rng",
            "1:0",
        ),
        ("attention dropout", "stream.attention.dropout_rng", "1:0"),
        ("the loader's position", "loader.batch", "0"),
        ("the loop's stream", "rng.noise", "1:0"),
    ];
    for (what, key, value) in edits {
        let mut file = good.file().clone();
        file.set_metadata(key, value);
        TrainingCheckpoint::from_file(file).save(&path)?;
        let (h, _) = second_half(&b, arch, kind, &path)?;
        assert_ne!(h, whole, "with {what} changed the run must differ");
    }
    std::fs::remove_file(&path).ok();
    Ok(())
}

#[test]
fn restoring_refuses_what_does_not_fit_and_changes_nothing() -> exactgrad::Result<()> {
    let b = ScalarRefBackend;
    let path = temp("refuse");
    first_half(&b, Arch::Conv, Opt::Sgd, &path)?;
    let ckpt = TrainingCheckpoint::load(&path)?;
    std::fs::remove_file(&path).ok();

    // Another optimizer type: refused, and the model keeps its own values.
    let mut adam = Run::new(&b, Arch::Conv, Opt::Adam, 9)?;
    let before = adam.hash()?;
    let err = adam.state().restore(&ckpt).unwrap_err().to_string();
    assert!(
        err.contains("is the state of a Sgd optimizer, not Adam"),
        "{err}"
    );
    assert_eq!(adam.hash()?, before, "nothing changed");
    assert_eq!(adam.loader.position(), LoaderPosition::default());

    // Another model: refused by name.
    let mut other = Run::new(&b, Arch::Stochastic, Opt::Sgd, 9)?;
    let err = other.state().restore(&ckpt).unwrap_err().to_string();
    assert!(err.contains("stream"), "{err}");

    // A part given that the file lacks, or held that was not given.
    let mut sgd = Run::new(&b, Arch::Conv, Opt::Sgd, 9)?;
    let err = TrainingState::new(&*sgd.model, &mut *sgd.opt)
        .restore(&ckpt)
        .unwrap_err()
        .to_string();
    assert!(err.contains("give the scheduler"), "{err}");

    // Values an optimizer or scheduler cannot produce, named.
    let bad: [(&str, &str, &str); 3] = [
        ("scheduler.last_lr", "-1.0", "last_lr"),
        ("scheduler.last_epoch", "-5", "last_epoch"),
        ("loader.batch", "7", "beyond"),
    ];
    for (key, value, named) in bad {
        let mut file = ckpt.file().clone();
        file.set_metadata(key, value);
        let before = sgd.hash()?;
        let err = sgd
            .state()
            .restore(&TrainingCheckpoint::from_file(file))
            .unwrap_err()
            .to_string();
        assert!(err.contains(named), "{key} = {value}: {err}");
        assert_eq!(sgd.hash()?, before, "nothing changed");
    }
    let mut file = ckpt.file().clone();
    let (shape, mut v) = {
        let (s, v) = file.floats("optimizer.state.0.momentum_buffer")?;
        (s.to_vec(), v.to_vec())
    };
    v[3] = f32::NAN;
    file.insert_floats("optimizer.state.0.momentum_buffer", &shape, v)?;
    let err = sgd
        .state()
        .restore(&TrainingCheckpoint::from_file(file))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("momentum_buffer") && err.contains("element 3"),
        "{err}"
    );
    assert_eq!(sgd.loader.position(), LoaderPosition::default());
    Ok(())
}

#[test]
fn the_same_state_gives_the_same_bytes() -> exactgrad::Result<()> {
    let b = ScalarRefBackend;
    let mut run = Run::new(&b, Arch::Stochastic, Opt::AdamW, 1)?;
    run.train(&b, 2)?;
    let mut a = run.state().capture()?;
    a.set_value("note", "x");
    let mut c = run.state().capture()?;
    c.set_value("note", "x");
    assert_eq!(a.file().to_bytes()?, c.file().to_bytes()?);
    // And a metadata entry inserted in another order gives the same bytes.
    let mut f = TensorFile::new();
    f.set_metadata("b", "2");
    f.set_metadata("a", "1");
    let mut g = TensorFile::new();
    g.set_metadata("a", "1");
    g.set_metadata("b", "2");
    assert_eq!(f.to_bytes()?, g.to_bytes()?);
    assert_eq!(TensorFile::from_bytes(&f.to_bytes()?)?, f);
    Ok(())
}
