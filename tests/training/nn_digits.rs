//! The digits example's training loop: accuracy after a short run, and reproducible
//! gradient and parameter hashes.
//!
//! The loop is the one `examples/digits.rs` runs (included from there), so this test
//! checks the example itself.

#[path = "../../examples/digits.rs"]
#[allow(dead_code)]
mod digits;

use digits::{parse_args, train, BackendChoice, Config, Event};
use exactgrad::prelude::*;

fn short() -> Config {
    Config {
        epochs: 5,
        ..Config::default()
    }
}

#[test]
fn short_training_reaches_90_percent_and_repeats_bit_for_bit() {
    let config = short();
    let mut events = Vec::new();
    let report = train(&ScalarRefBackend, &config, |e| events.push(e.clone())).unwrap();
    assert!(
        report.test_accuracy >= 0.90,
        "test accuracy {}",
        report.test_accuracy
    );
    assert!(
        report.train_accuracy >= 0.90,
        "train accuracy {}",
        report.train_accuracy
    );
    assert_eq!(report.epoch_losses.len(), config.epochs);
    assert!(
        report.epoch_losses[4] < report.epoch_losses[0] / 3.0,
        "{:?}",
        report.epoch_losses
    );
    assert_eq!(report.parameters, 64 * 128 + 128 + 128 * 10 + 10);
    assert_eq!(
        events[0],
        Event::FirstStep {
            gradient_hash: report.first_step_hash
        }
    );
    let epochs: Vec<f64> = events
        .iter()
        .filter_map(|e| match e {
            Event::Epoch { loss, .. } => Some(*loss),
            _ => None,
        })
        .collect();
    assert_eq!(epochs, report.epoch_losses);
    let steps = events
        .iter()
        .filter(|e| matches!(e, Event::Step { .. }))
        .count();
    assert_eq!(
        steps,
        config.epochs * Digits::TRAIN_LEN.div_ceil(config.batch_size)
    );

    // The same run on another thread: every bit the same.
    let again = std::thread::spawn(move || train(&ScalarRefBackend, &config, |_| {}).unwrap())
        .join()
        .unwrap();
    assert_eq!(again.first_step_hash, report.first_step_hash);
    assert_eq!(again.parameter_hash, report.parameter_hash);
    assert_eq!(again, report);
}

#[test]
fn first_step_hash_is_reproducible_and_seed_dependent() {
    let one_epoch = |seed| Config {
        epochs: 1,
        seed,
        ..Config::default()
    };
    let a = train(&ScalarRefBackend, &one_epoch(0), |_| {}).unwrap();
    let b = train(&ScalarRefBackend, &one_epoch(0), |_| {}).unwrap();
    let c = train(&ScalarRefBackend, &one_epoch(1), |_| {}).unwrap();
    assert_eq!(a.first_step_hash, b.first_step_hash);
    assert_eq!(a.parameter_hash, b.parameter_hash);
    assert_ne!(a.first_step_hash, c.first_step_hash);
    // The first-step hash does not depend on how many epochs follow.
    let long = train(&ScalarRefBackend, &short(), |_| {}).unwrap();
    assert_eq!(long.first_step_hash, a.first_step_hash);
}

#[test]
fn command_line_is_parsed_with_clear_errors() {
    let args = |s: &str| parse_args(s.split_whitespace().map(str::to_string));
    let a = args("--backend scalar-ref --epochs 3 --seed=7 --lr 0.01").unwrap();
    assert_eq!(a.backend, BackendChoice::ScalarRef);
    assert_eq!((a.config.epochs, a.config.seed, a.config.lr), (3, 7, 0.01));
    assert_eq!(args("").unwrap().config, Config::default());

    let err = args("--backend avx9000").unwrap_err();
    assert_eq!(
        err,
        "unknown backend `avx9000`; choose one of: scalar-ref, exact, fast, scalar-ref-fast"
    );
    let a = args("--backend exact --isa avx2 --threads 3").unwrap();
    assert_eq!(
        (a.backend, a.isa, a.threads),
        (BackendChoice::Exact, Some(Isa::Avx2), Some(3))
    );
    assert!(args("--isa sse9")
        .unwrap_err()
        .contains("unknown ISA path `sse9`"));
    assert!(args("--epochs many")
        .unwrap_err()
        .contains("--epochs: `many` is not a valid number"));
    assert!(args("--seed").unwrap_err().contains("--seed needs a value"));
    assert!(args("--frobnicate")
        .unwrap_err()
        .contains("unknown argument `--frobnicate`"));
}
