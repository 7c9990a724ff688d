//! The character-level GPT example's training loop (included from
//! `examples/char_gpt.rs`, so this checks the example itself) on a tiny configuration:
//! a run interrupted after a checkpoint and resumed ends with the same parameter hash
//! as one that was never interrupted; the same bits on `ScalarRefBackend` and on
//! `ExactBackend` at one and two threads; a checkpoint of another configuration and bad
//! arguments are refused with an error.

#[path = "../../examples/char_gpt.rs"]
#[allow(dead_code)]
mod char_gpt;

use char_gpt::{parse_args, train, Checkpointing, Config, Corpus, Event, Report, TEXT};
use exactgrad::prelude::*;
use std::path::{Path, PathBuf};

fn tiny() -> Config {
    Config {
        steps: 6,
        seed: 3,
        batch_size: 2,
        context: 8,
        width: 16,
        heads: 2,
        layers: 2,
        lr: 1e-2,
        report_every: 2,
        sample_len: 8,
        temperature: 0.8,
    }
}

fn corpus() -> Corpus {
    Corpus::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join(TEXT)).unwrap()
}

fn scratch(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "char_gpt-{name}-{}.safetensors",
        std::process::id()
    ));
    std::fs::remove_file(&path).ok();
    path
}

fn run<B: Backend>(b: &B, config: &Config, ckpt: &Checkpointing) -> (Report, Vec<Event>) {
    let mut events = Vec::new();
    let report = train(b, &corpus(), config, ckpt, |e| events.push(e.clone())).unwrap();
    (report, events)
}

#[test]
fn the_text_is_the_shipped_novel() {
    let c = corpus();
    assert_eq!(c.vocab.len(), 75);
    assert_eq!(c.train.len() + c.held_out.len(), 684_768);
    assert!(c.decode(&c.train[..19]).starts_with("PRIDE AND PREJUDICE"));
    assert_eq!(c.decode(&c.encode("a truth")), "a truth");
}

#[test]
fn an_interrupted_and_resumed_run_ends_with_the_same_hash() {
    let b = ExactBackend::with_threads(2);
    let config = tiny();
    let (whole, events) = run(&b, &config, &Checkpointing::default());
    assert_eq!((whole.steps, whole.stopped), (6, false));
    let losses: Vec<f64> = events
        .iter()
        .filter_map(|e| match e {
            Event::Step { loss, .. } => Some(*loss),
            _ => None,
        })
        .collect();
    assert_eq!(losses.len(), 6);
    // The initial loss is near ln(75) = 4.3 (a uniform guess over the vocabulary).
    assert!(
        (losses[0] - 75f64.ln()).abs() < 0.5,
        "first loss {}",
        losses[0]
    );
    let samples = events
        .iter()
        .filter(|e| matches!(e, Event::Report { sample, .. } if sample.len() == 8))
        .count();
    assert_eq!(samples, 3);

    let path = scratch("resume");
    let mut ckpt = Checkpointing {
        path: Some(path.clone()),
        resume: true,
        stop_after: Some(3),
    };
    let (first, _) = run(&b, &config, &ckpt);
    assert_eq!((first.steps, first.stopped), (3, true));
    assert_ne!(first.parameter_hash, whole.parameter_hash);
    ckpt.stop_after = None;
    let (second, events) = run(&b, &config, &ckpt);
    assert_eq!(events.first(), Some(&Event::Resumed { step: 3 }));
    let resumed_losses: Vec<f64> = events
        .iter()
        .filter_map(|e| match e {
            Event::Step { loss, .. } => Some(*loss),
            _ => None,
        })
        .collect();
    assert_eq!(resumed_losses, losses[3..]);
    assert_eq!((second.steps, second.stopped), (6, false));
    assert_eq!(second.parameter_hash, whole.parameter_hash);
    std::fs::remove_file(&path).ok();
}

#[test]
fn the_hash_is_the_same_on_every_exact_backend() {
    let mut config = tiny();
    config.steps = 2;
    config.sample_len = 2;
    let none = Checkpointing::default();
    let (reference, _) = run(&ScalarRefBackend, &config, &none);
    for threads in [1, 2] {
        let (exact, _) = run(&ExactBackend::with_threads(threads), &config, &none);
        assert_eq!(
            exact.parameter_hash, reference.parameter_hash,
            "{threads} threads"
        );
    }
}

#[test]
fn a_checkpoint_of_another_configuration_is_refused() {
    let b = ExactBackend::with_threads(1);
    let mut config = tiny();
    config.steps = 2;
    let path = scratch("other");
    let ckpt = Checkpointing {
        path: Some(path.clone()),
        resume: false,
        stop_after: Some(1),
    };
    run(&b, &config, &ckpt);
    config.seed += 1;
    let resume = Checkpointing {
        resume: true,
        ..ckpt
    };
    let err = train(&b, &corpus(), &config, &resume, |_| {}).unwrap_err();
    assert!(
        err.to_string().contains("was written by a run with"),
        "{err}"
    );
    std::fs::remove_file(&path).ok();
}

#[test]
fn bad_arguments_are_errors() {
    let args = |v: &[&str]| parse_args(v.iter().map(|s| s.to_string()));
    assert!(args(&["--steps", "x"])
        .unwrap_err()
        .contains("not a valid number"));
    assert!(args(&["--backend", "gpu"])
        .unwrap_err()
        .contains("unknown backend"));
    assert!(args(&["--bogus"]).unwrap_err().contains("unknown argument"));
    let ok = args(&["--steps=5", "--resume", "--backend", "scalar-ref"]).unwrap();
    assert_eq!(ok.config.steps, 5);
    assert!(ok.checkpointing.resume);

    let b = ScalarRefBackend;
    let none = Checkpointing::default();
    let mut config = tiny();
    config.context = 10_000_000;
    let err = train(&b, &corpus(), &config, &none, |_| {}).unwrap_err();
    assert!(err.to_string().contains("--context"), "{err}");
    config = tiny();
    config.heads = 3; // does not divide the width
    assert!(train(&b, &corpus(), &config, &none, |_| {}).is_err());
    assert!(Corpus::new(b"too short").is_err());
}
