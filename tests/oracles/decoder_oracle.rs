//! The decoder (a convolution, two transposed convolutions, nearest and bilinear resizes,
//! activations and the mean squared error) against PyTorch 2.15.0
//! (`testdata/autograd/decoder.safetensors`, written by `tools/rnn_oracle.py`), on every
//! backend, and the exact-mode hash of its training run pinned.
//!
//! - One forward and backward pass: the loss within 1e-5 relative, the output and every
//!   parameter and input gradient within 1e-4 scaled error
//!   (`max |ours − torch| / max |torch|`), on ScalarRef, the fast scalar reference, every
//!   supported ExactBackend path and FastBackend's best path.
//! - The oracle's training run (SGD with momentum on the one batch): the change of every
//!   parameter within 1e-4 scaled of PyTorch's.
//! - The hash of the parameters after that run equals the pinned value on ScalarRef and
//!   on every ExactBackend path at 1, 3 and 8 threads.

use super::oracle_support::{compare_gradients, scaled_error};
use exactgrad::nn::reference::{DecoderCase, ReferenceCase, TensorFile, PINNED_HASHES};
use exactgrad::prelude::*;

/// The hash of the decoder's parameters after the oracle's training run
/// ([`DecoderCase::train`]) in exact mode, as ScalarRefBackend (the oracle of the
/// arithmetic contract) computes it; every exact path and thread count must reproduce it.
const DECODER_HASH: u64 = 0x683e_30cf_8bb1_ca11;

const DECODER: &[u8] = include_bytes!("../../testdata/autograd/decoder.safetensors");

fn against_torch<B: Backend>(b: &B, label: &str) -> String {
    let file = TensorFile::from_bytes(DECODER).unwrap();
    let case = DecoderCase::from_file(b, &file).unwrap();
    let step = case.forward_backward().unwrap();
    let torch_loss = f64::from(file.floats("loss").unwrap().1[0]);
    let loss_rel = (f64::from(step.loss.item().unwrap()) - torch_loss).abs() / torch_loss.abs();
    assert!(
        loss_rel <= 1e-5,
        "{label}/decoder: loss relative error {loss_rel:.2e}"
    );
    let (shape, y) = file.floats("output/y").unwrap();
    assert_eq!(step.logits.dims(), shape);
    let e_out = scaled_error(&step.logits.to_vec().unwrap(), y);
    assert!(
        e_out <= 1e-4,
        "{label}/decoder: output scaled error {e_out:.2e}"
    );
    let (worst, at) = compare_gradients(&format!("{label}/decoder"), &file, &step.gradients);
    // The training run on a fresh case: each parameter's change against PyTorch's.
    let case = DecoderCase::from_file(b, &file).unwrap();
    case.train().unwrap();
    let mut worst_step = 0.0f64;
    for (name, p) in case.model.named_parameters() {
        let init = file.floats(&format!("init/{name}")).unwrap().1;
        let after = file.floats(&format!("after/{name}")).unwrap().1;
        let ours: Vec<f32> = p
            .to_vec()
            .unwrap()
            .iter()
            .zip(init)
            .map(|(a, i)| a - i)
            .collect();
        let torch: Vec<f32> = after.iter().zip(init).map(|(a, i)| a - i).collect();
        let e = scaled_error(&ours, &torch);
        assert!(
            e <= 1e-4,
            "{label}/decoder: change of {name} after training: scaled error {e:.2e}"
        );
        worst_step = worst_step.max(e);
    }
    format!(
        "{label:<18} decoder worst gradient {worst:.2e} at {at:<16} output {e_out:.2e}  loss rel {loss_rel:.2e}  training {worst_step:.2e}"
    )
}

#[test]
fn decoder_matches_pytorch_on_every_backend() {
    let mut rows = vec![
        against_torch(&ScalarRefBackend, "scalar-ref"),
        against_torch(&FastScalarRefBackend, "fast-scalar-ref"),
    ];
    for isa in Isa::ALL {
        match ExactBackend::with_isa(isa, 3) {
            Ok(b) => rows.push(against_torch(&b, &format!("exact/{isa}/3t"))),
            Err(_) => rows.push(format!(
                "exact/{isa:<12} SKIPPED (not supported by this CPU)"
            )),
        }
    }
    let best = Isa::best(ComputeMode::Fast);
    let fast = FastBackend::with_isa(best, 3).unwrap();
    rows.push(against_torch(&fast, &format!("fast/{best}/3t")));
    println!("{}", rows.join("\n"));
}

fn train_hash<B: Backend>(b: &B) -> u64 {
    DecoderCase::from_oracle(b, DECODER)
        .unwrap()
        .train()
        .unwrap()
}

#[test]
fn decoder_training_hash_is_pinned_on_every_exact_path_and_thread_count() {
    let reference = train_hash(&ScalarRefBackend);
    let mut table = vec![format!("{:<20} {reference:#018x}", "scalar-ref")];
    let mut failures = Vec::new();
    if reference != DECODER_HASH {
        failures.push("scalar-ref".to_string());
    }
    for isa in Isa::ALL {
        for threads in [1, 3, 8] {
            let label = format!("exact/{isa}/{threads}t");
            match ExactBackend::with_isa(isa, threads) {
                Ok(b) => {
                    let h = train_hash(&b);
                    if h != DECODER_HASH {
                        failures.push(label.clone());
                    }
                    table.push(format!("{label:<20} {h:#018x}"));
                }
                Err(_) => table.push(format!("{label:<20} SKIPPED")),
            }
        }
    }
    println!("{}", table.join("\n"));
    assert_eq!(
        PINNED_HASHES
            .iter()
            .find(|(n, _)| *n == "decoder")
            .map(|p| p.1),
        Some(DECODER_HASH),
        "exactgrad::nn::reference::PINNED_HASHES (used by the reproduce example) must hold the decoder hash pinned here"
    );
    assert!(
        failures.is_empty(),
        "decoder hashes differ from the pinned ScalarRef value {DECODER_HASH:#018x}: {failures:?}\n{}",
        table.join("\n")
    );
}

/// The gradient hash of one pass is the same on every exact path too, and a second pass
/// (gradients cleared in between) repeats it.
#[test]
fn decoder_gradients_have_the_same_bits_on_every_exact_path() {
    let hash = |b: &dyn Fn() -> u64| b();
    let reference = {
        let case = DecoderCase::from_oracle(&ScalarRefBackend, DECODER).unwrap();
        let h = case.forward_backward().unwrap().hash().unwrap();
        assert_eq!(case.forward_backward().unwrap().hash().unwrap(), h);
        h
    };
    for isa in Isa::ALL {
        for threads in [1, 3, 8] {
            if let Ok(b) = ExactBackend::with_isa(isa, threads) {
                let h = hash(&|| {
                    DecoderCase::from_oracle(&b, DECODER)
                        .unwrap()
                        .forward_backward()
                        .unwrap()
                        .hash()
                        .unwrap()
                });
                assert_eq!(h, reference, "exact/{isa}/{threads}t");
            }
        }
    }
}

#[test]
fn decoder_names_match_the_state_dict() {
    let file = TensorFile::from_bytes(DECODER).unwrap();
    let case = DecoderCase::from_file(&ScalarRefBackend, &file).unwrap();
    let mut ours: Vec<String> = case
        .model
        .state_dict()
        .unwrap()
        .names()
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut theirs: Vec<String> = file
        .names()
        .iter()
        .filter_map(|n| n.strip_prefix("init/"))
        .map(String::from)
        .collect();
    assert!(ours.contains(&"deconv1.bias".to_string()));
    assert!(!ours.contains(&"deconv2.bias".to_string()));
    ours.sort();
    theirs.sort();
    assert_eq!(ours, theirs);
    assert_eq!(case.model.named_parameters().len(), theirs.len());
}
