//! Checks that this machine reproduces the pinned exact-mode hashes of the six
//! reference models, bit for bit.
//!
//! ```text
//! cargo run --release --example reproduce [-- --small]
//! ```
//!
//! The models are those of `exactgrad::nn::reference`: the conv net, the two-layer
//! transformer encoder, the CRNN (with its CTC loss) and the decoder (transposed
//! convolutions and resizes, MSE loss), with the weights and inputs of the PyTorch oracle
//! (`testdata/autograd/*.safetensors`, embedded in the program), and ResNet-18 (32 images
//! of 3×32×32) and the GPT-style decoder (8 sequences of 128 tokens) from seeded initial
//! parameters, the training steps of `benches/models.rs`. For ScalarRefBackend and for
//! every ISA path of ExactBackend at 1, 2, 3 and 8 threads it runs one forward and
//! backward pass of each model but the decoder and hashes every gradient (parameters in
//! `state_dict` order, then the input where it takes one; see `docs/arithmetic.md`), and
//! trains the decoder for the oracle's few SGD steps and hashes its parameters. It prints
//! one row per backend with each hash and PASS when it equals the pinned value
//! (`exactgrad::nn::reference::PINNED_HASHES`; the tests `tests/oracles/reference_models.rs`,
//! `tests/oracles/rnn_oracle.rs` and `tests/oracles/decoder_oracle.rs` pin the first four too), FAIL
//! otherwise; paths this CPU lacks are SKIPPED. The exit status is non-zero when any hash
//! differs.
//!
//! ScalarRefBackend needs a few minutes for ResNet-18 (its plain loops run about a
//! hundred times slower than the AVX-512 path), so the whole check takes about five
//! minutes on a two-core machine; `--small` leaves out the two bigger models (seconds).

use exactgrad::nn::reference::{
    ConvNetCase, CrnnCase, DecoderCase, EncoderCase, GptCase, ReferenceCase, ResNetCase,
    PINNED_HASHES,
};
use exactgrad::prelude::*;
use std::process::ExitCode;
use std::time::Instant;

/// The pinned hashes (computed by ScalarRefBackend, see
/// `exactgrad::nn::reference::PINNED_HASHES`).
const PINNED: [(&str, u64); MODELS] = PINNED_HASHES;

/// The number of reference models.
const MODELS: usize = 6;

/// The number of the small models (the first ones), which `--small` keeps.
const SMALL: usize = 4;

const CONV_NET: &[u8] = include_bytes!("../testdata/autograd/conv_net.safetensors");
const ENCODER: &[u8] = include_bytes!("../testdata/autograd/encoder.safetensors");
const CRNN: &[u8] = include_bytes!("../testdata/autograd/crnn.safetensors");
const DECODER: &[u8] = include_bytes!("../testdata/autograd/decoder.safetensors");

/// The hash of each of the first `models` models' gradients (the decoder's: of its
/// trained parameters) on `backend`.
fn hashes<B: Backend>(backend: &B, models: usize) -> exactgrad::nn::Result<Vec<u64>> {
    let mut out = vec![
        ConvNetCase::from_oracle(backend, CONV_NET)?
            .forward_backward()?
            .hash()?,
        EncoderCase::from_oracle(backend, ENCODER)?
            .forward_backward()?
            .hash()?,
        CrnnCase::from_oracle(backend, CRNN)?
            .forward_backward()?
            .hash()?,
        DecoderCase::from_oracle(backend, DECODER)?.train()?,
    ];
    if models > SMALL {
        out.push(ResNetCase::pinned(backend)?.forward_backward()?.hash()?);
        out.push(GptCase::pinned(backend)?.forward_backward()?.hash()?);
    }
    Ok(out)
}

fn main() -> ExitCode {
    let mut models = MODELS;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--small" => models = SMALL,
            other => {
                eprintln!("unknown argument {other:?} (the only option is --small)");
                return ExitCode::from(2);
            }
        }
    }
    let pinned_models = &PINNED[..models];
    println!(
        "exactgrad {} — reproducing the pinned exact-mode hashes",
        env!("CARGO_PKG_VERSION")
    );
    println!(
        "CPU paths: {}",
        Isa::ALL
            .iter()
            .map(|i| format!(
                "{i} {}",
                if i.is_supported(ComputeMode::Exact) {
                    "yes"
                } else {
                    "no"
                }
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!();
    let row = |label: &str, cells: &[String], tail: &str| {
        let cells: String = cells.iter().map(|c| format!(" {c:<25}")).collect();
        println!("{}", format!("{label:<18}{cells} {tail}").trim_end());
    };
    let names: Vec<String> = pinned_models.iter().map(|p| p.0.to_string()).collect();
    row("backend", &names, &format!("{:>9}", "time"));
    let pinned: Vec<String> = pinned_models
        .iter()
        .map(|p| format!("{:#018x}", p.1))
        .collect();
    row("pinned", &pinned, "");
    let mut failed = 0usize;
    let mut passed = 0usize;
    let mut report = |label: &str, run: Option<(exactgrad::nn::Result<Vec<u64>>, f64)>| {
        let Some((result, secs)) = run else {
            row(label, &vec!["SKIPPED".to_string(); models], "");
            return;
        };
        match result {
            Ok(h) => {
                let cells: Vec<String> = h
                    .iter()
                    .zip(pinned_models)
                    .map(|(&h, &(_, want))| {
                        if h == want {
                            passed += 1;
                        } else {
                            failed += 1;
                        }
                        format!("{h:#018x} {}", if h == want { "PASS" } else { "FAIL" })
                    })
                    .collect();
                let time = if secs < 10.0 {
                    format!("{:>7.1} ms", secs * 1e3)
                } else {
                    format!("{secs:>8.1} s")
                };
                row(label, &cells, &time);
            }
            Err(e) => {
                failed += models;
                println!("{label:<18} FAIL: {e}");
            }
        }
    };
    let timed = |f: &dyn Fn() -> exactgrad::nn::Result<Vec<u64>>| {
        let t = Instant::now();
        let r = f();
        (r, t.elapsed().as_secs_f64())
    };
    report(
        "scalar-ref",
        Some(timed(&|| hashes(&ScalarRefBackend, models))),
    );
    for isa in Isa::ALL {
        for threads in [1, 2, 3, 8] {
            let label = format!("exact/{isa}/{threads}t");
            let run = ExactBackend::with_isa(isa, threads)
                .ok()
                .map(|b| timed(&|| hashes(&b, models)));
            report(&label, run);
        }
    }
    println!();
    if failed == 0 {
        println!("PASS: all {passed} hashes equal the pinned values");
        ExitCode::SUCCESS
    } else {
        println!(
            "FAIL: {failed} of {} hashes differ from the pinned values",
            passed + failed
        );
        ExitCode::FAILURE
    }
}
