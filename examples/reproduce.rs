//! Checks that this machine reproduces the pinned exact-mode gradients of the three
//! reference models, bit for bit.
//!
//! ```text
//! cargo run --release --example reproduce
//! ```
//!
//! The models are the conv net, the two-layer transformer encoder and the CRNN (with
//! its CTC loss) of `exactgrad::nn::reference`, with the weights and inputs of the
//! PyTorch oracle (`testdata/autograd/*.safetensors`, embedded in the program). For ScalarRefBackend
//! and for every ISA path of ExactBackend at 1, 3 and 8 threads it runs one forward and
//! backward pass of each model and hashes every gradient (parameters in `state_dict`
//! order, then the input; see `docs/arithmetic.md`). It prints one row per backend with
//! each hash and PASS when it equals the pinned value (the one `tests/reference_models.rs`
//! and `tests/rnn_oracle.rs` pin), FAIL otherwise; paths this CPU lacks are SKIPPED. The exit status is non-zero
//! when any hash differs.

use exactgrad::nn::reference::{ConvNetCase, CrnnCase, EncoderCase, ReferenceCase, PINNED_HASHES};
use exactgrad::prelude::*;
use std::process::ExitCode;
use std::time::Instant;

/// The pinned hashes (computed by ScalarRefBackend, see `tests/reference_models.rs` and
/// `tests/rnn_oracle.rs`).
const PINNED: [(&str, u64); 3] = PINNED_HASHES;

const CONV_NET: &[u8] = include_bytes!("../testdata/autograd/conv_net.safetensors");
const ENCODER: &[u8] = include_bytes!("../testdata/autograd/encoder.safetensors");
const CRNN: &[u8] = include_bytes!("../testdata/autograd/crnn.safetensors");

/// The hash of each model's gradients on `backend`.
fn hashes<B: Backend>(backend: &B) -> exactgrad::nn::Result<[u64; 3]> {
    let conv = ConvNetCase::from_oracle(backend, CONV_NET)?;
    let enc = EncoderCase::from_oracle(backend, ENCODER)?;
    let crnn = CrnnCase::from_oracle(backend, CRNN)?;
    Ok([
        conv.forward_backward()?.hash()?,
        enc.forward_backward()?.hash()?,
        crnn.forward_backward()?.hash()?,
    ])
}

fn main() -> ExitCode {
    println!(
        "exactgrad {} — reproducing the pinned exact-mode gradient hashes",
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
    println!(
        "{:<18} {:<25} {:<25} {:<25} {:>9}",
        "backend", PINNED[0].0, PINNED[1].0, PINNED[2].0, "time"
    );
    println!(
        "{:<18} {:<25} {:<25} {:<25}",
        "pinned",
        format!("{:#018x}", PINNED[0].1),
        format!("{:#018x}", PINNED[1].1),
        format!("{:#018x}", PINNED[2].1)
    );
    let mut failed = 0usize;
    let mut passed = 0usize;
    let mut report = |label: &str, run: Option<(exactgrad::nn::Result<[u64; 3]>, f64)>| {
        let Some((result, secs)) = run else {
            println!(
                "{label:<18} {:<25} {:<25} {:<25}",
                "SKIPPED", "SKIPPED", "SKIPPED"
            );
            return;
        };
        match result {
            Ok(h) => {
                let cell = |i: usize, ok: bool| {
                    format!("{:#018x} {}", h[i], if ok { "PASS" } else { "FAIL" })
                };
                let ok = [
                    h[0] == PINNED[0].1,
                    h[1] == PINNED[1].1,
                    h[2] == PINNED[2].1,
                ];
                for o in ok {
                    if o {
                        passed += 1;
                    } else {
                        failed += 1;
                    }
                }
                println!(
                    "{label:<18} {:<25} {:<25} {:<25} {:>6.1} ms",
                    cell(0, ok[0]),
                    cell(1, ok[1]),
                    cell(2, ok[2]),
                    secs * 1e3
                );
            }
            Err(e) => {
                failed += 3;
                println!("{label:<18} FAIL: {e}");
            }
        }
    };
    let timed = |f: &dyn Fn() -> exactgrad::nn::Result<[u64; 3]>| {
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
