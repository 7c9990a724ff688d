//! Checks that this machine reproduces the pinned exact-mode hashes of the four
//! reference models, bit for bit.
//!
//! ```text
//! cargo run --release --example reproduce
//! ```
//!
//! The models are the conv net, the two-layer transformer encoder, the CRNN (with its
//! CTC loss) and the decoder (transposed convolutions and resizes, MSE loss) of
//! `exactgrad::nn::reference`, with the weights and inputs of the PyTorch oracle
//! (`testdata/autograd/*.safetensors`, embedded in the program). For ScalarRefBackend
//! and for every ISA path of ExactBackend at 1, 3 and 8 threads it runs one forward and
//! backward pass of the first three models and hashes every gradient (parameters in
//! `state_dict` order, then the input; see `docs/arithmetic.md`), and trains the decoder
//! for the oracle's few SGD steps and hashes its parameters. It prints one row per
//! backend with each hash and PASS when it equals the pinned value (the one
//! `tests/reference_models.rs`, `tests/rnn_oracle.rs` and `tests/decoder_oracle.rs` pin),
//! FAIL otherwise; paths this CPU lacks are SKIPPED. The exit status is non-zero when any
//! hash differs.

use exactgrad::nn::reference::{
    ConvNetCase, CrnnCase, DecoderCase, EncoderCase, ReferenceCase, PINNED_HASHES,
};
use exactgrad::prelude::*;
use std::process::ExitCode;
use std::time::Instant;

/// The pinned hashes (computed by ScalarRefBackend, see `tests/reference_models.rs`,
/// `tests/rnn_oracle.rs` and `tests/decoder_oracle.rs`).
const PINNED: [(&str, u64); MODELS] = PINNED_HASHES;

/// The number of reference models.
const MODELS: usize = 4;

const CONV_NET: &[u8] = include_bytes!("../testdata/autograd/conv_net.safetensors");
const ENCODER: &[u8] = include_bytes!("../testdata/autograd/encoder.safetensors");
const CRNN: &[u8] = include_bytes!("../testdata/autograd/crnn.safetensors");
const DECODER: &[u8] = include_bytes!("../testdata/autograd/decoder.safetensors");

/// The hash of each model's gradients (the decoder's: of its trained parameters) on
/// `backend`.
fn hashes<B: Backend>(backend: &B) -> exactgrad::nn::Result<[u64; MODELS]> {
    let conv = ConvNetCase::from_oracle(backend, CONV_NET)?;
    let enc = EncoderCase::from_oracle(backend, ENCODER)?;
    let crnn = CrnnCase::from_oracle(backend, CRNN)?;
    let decoder = DecoderCase::from_oracle(backend, DECODER)?;
    Ok([
        conv.forward_backward()?.hash()?,
        enc.forward_backward()?.hash()?,
        crnn.forward_backward()?.hash()?,
        decoder.train()?,
    ])
}

fn main() -> ExitCode {
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
    let names: Vec<String> = PINNED.iter().map(|p| p.0.to_string()).collect();
    row("backend", &names, &format!("{:>9}", "time"));
    let pinned: Vec<String> = PINNED.iter().map(|p| format!("{:#018x}", p.1)).collect();
    row("pinned", &pinned, "");
    let mut failed = 0usize;
    let mut passed = 0usize;
    let mut report = |label: &str, run: Option<(exactgrad::nn::Result<[u64; MODELS]>, f64)>| {
        let Some((result, secs)) = run else {
            row(label, &vec!["SKIPPED".to_string(); MODELS], "");
            return;
        };
        match result {
            Ok(h) => {
                let cells: Vec<String> = h
                    .iter()
                    .zip(PINNED)
                    .map(|(&h, (_, want))| {
                        if h == want {
                            passed += 1;
                        } else {
                            failed += 1;
                        }
                        format!("{h:#018x} {}", if h == want { "PASS" } else { "FAIL" })
                    })
                    .collect();
                row(label, &cells, &format!("{:>6.1} ms", secs * 1e3));
            }
            Err(e) => {
                failed += MODELS;
                println!("{label:<18} FAIL: {e}");
            }
        }
    };
    let timed = |f: &dyn Fn() -> exactgrad::nn::Result<[u64; MODELS]>| {
        let t = Instant::now();
        let r = f();
        (r, t.elapsed().as_secs_f64())
    };
    report("scalar-ref", Some(timed(&|| hashes(&ScalarRefBackend))));
    for isa in Isa::ALL {
        for threads in [1, 3, 8] {
            let label = format!("exact/{isa}/{threads}t");
            let run = ExactBackend::with_isa(isa, threads)
                .ok()
                .map(|b| timed(&|| hashes(&b)));
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
