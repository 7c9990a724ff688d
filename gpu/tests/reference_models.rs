//! The reference models on the device: the four small cases of
//! `exactgrad::nn::reference` (conv net, encoder, CRNN: gradient hashes of one pass on the
//! oracle files in `testdata/autograd/`; decoder: the parameter hash after its training
//! run) give the pinned exact-mode hashes in exact mode and `FastScalarRefBackend`'s
//! hashes in fast mode.
//!
//! Without a Vulkan adapter each test prints why and passes, unless
//! `EXACTGRAD_REQUIRE_GPU=1` makes that a failure.

use exactgrad::nn::reference::{
    ConvNetCase, CrnnCase, DecoderCase, EncoderCase, ReferenceCase, PINNED_HASHES,
};
use exactgrad::prelude::*;

mod common;
use common::backend;

const CONV_NET: &[u8] = include_bytes!("../../testdata/autograd/conv_net.safetensors");
const ENCODER: &[u8] = include_bytes!("../../testdata/autograd/encoder.safetensors");
const CRNN: &[u8] = include_bytes!("../../testdata/autograd/crnn.safetensors");
const DECODER: &[u8] = include_bytes!("../../testdata/autograd/decoder.safetensors");

/// The hashes of the four small reference cases on `b`, in the order of
/// `PINNED_HASHES`.
fn hashes<B: Backend>(b: &B) -> [u64; 4] {
    [
        ConvNetCase::from_oracle(b, CONV_NET)
            .unwrap()
            .forward_backward()
            .unwrap()
            .hash()
            .unwrap(),
        EncoderCase::from_oracle(b, ENCODER)
            .unwrap()
            .forward_backward()
            .unwrap()
            .hash()
            .unwrap(),
        CrnnCase::from_oracle(b, CRNN)
            .unwrap()
            .forward_backward()
            .unwrap()
            .hash()
            .unwrap(),
        DecoderCase::from_oracle(b, DECODER)
            .unwrap()
            .train()
            .unwrap(),
    ]
}

#[test]
fn exact_mode_gives_the_pinned_hashes() {
    let Some(gpu) = backend(ComputeMode::Exact) else {
        return;
    };
    let got = hashes(&gpu);
    for (g, (name, want)) in got.iter().zip(PINNED_HASHES) {
        println!("{name}: {g:#018x} (pinned {want:#018x})");
    }
    let want: Vec<u64> = PINNED_HASHES[..4].iter().map(|p| p.1).collect();
    assert_eq!(got.to_vec(), want);
}

#[test]
fn fast_mode_gives_the_hashes_of_the_fast_scalar_reference() {
    let Some(gpu) = backend(ComputeMode::Fast) else {
        return;
    };
    let got = hashes(&gpu);
    let want = hashes(&FastScalarRefBackend);
    for ((g, w), (name, _)) in got.iter().zip(&want).zip(PINNED_HASHES) {
        println!("{name}: {g:#018x} (FastScalarRefBackend {w:#018x})");
    }
    assert_eq!(got, want);
}
