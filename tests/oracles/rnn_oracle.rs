//! The recurrent layers, the CTC loss and interpolate against PyTorch 2.15.0
//! (`testdata/autograd/{crnn,gru,resize}.safetensors`, written by `tools/rnn_oracle.py`),
//! on every backend, and the exact-mode gradient hash of the CRNN pinned.
//!
//! - The CRNN (convolutions, a two-layer bidirectional LSTM, log_softmax, mean CTC
//!   loss): every parameter and input gradient within 1e-4 scaled error
//!   (`max |ours − torch| / max |torch|`), the log-probabilities likewise and the loss
//!   within 1e-5 relative, on ScalarRef, the fast scalar reference, every supported
//!   ExactBackend path and FastBackend's best path.
//! - A bidirectional two-layer batch-first GRU with an initial state, and a
//!   bidirectional LSTM without biases with both initial states: outputs, final states
//!   and every gradient (parameters, input, initial states) within 1e-4 scaled.
//! - CTC alone on random logits (padded and concatenated targets, blank 0 and 3,
//!   repeated labels, an empty target, unequal lengths, an impossible alignment): every
//!   loss within 1e-5 relative for each reduction, with and without zero_infinity
//!   (infinite where PyTorch's is), and the gradient of the logits upstream of
//!   log_softmax within 1e-6 scaled of PyTorch's float64 run (1e-5 of its float32 run,
//!   whose own error reaches 2e-6); PyTorch's gradient is NaN for the impossible entry
//!   without zero_infinity, ours is 0 (`docs/ctc.md` §4). The loss and the gradient of
//!   given log-probabilities have the same bits on every backend, fast mode included.
//! - interpolate (nearest and bilinear, by size and by scale factor, with and without
//!   align_corners): output and input gradient within 1e-5 scaled (nearest exact).
//! - The CRNN's gradient hash equals the pinned value on ScalarRef and on every
//!   ExactBackend path at 1, 3 and 8 threads.

use super::oracle_support::{compare_gradients, scaled_error};
use exactgrad::autograd::{
    CtcBatch, CtcLossOptions, CtcTargets, InterpolateMode, InterpolateOptions, InterpolateSize,
};
use exactgrad::nn::reference::{
    load_state_dict, CrnnCase, ReferenceCase, TensorFile, PINNED_HASHES,
};
use exactgrad::nn::{Gru, Lstm, RnnConfig};
use exactgrad::prelude::*;

/// `hash_tensors` of the CRNN's gradients in exact mode, as ScalarRefBackend (the oracle
/// of the arithmetic contract) computes it; every exact path and thread count must
/// reproduce it.
const CRNN_HASH: u64 = 0x6671_5a90_3e97_922e;

const CRNN: &[u8] = include_bytes!("../../testdata/autograd/crnn.safetensors");
const GRU: &[u8] = include_bytes!("../../testdata/autograd/gru.safetensors");
const RESIZE: &[u8] = include_bytes!("../../testdata/autograd/resize.safetensors");

/// Runs `f` on ScalarRef, the fast scalar reference, every supported exact path and the
/// best fast path (3 threads each), collecting one report line per backend.
macro_rules! on_every_backend {
    ($f:ident) => {{
        let mut rows = Vec::new();
        rows.push($f(&ScalarRefBackend, "scalar-ref"));
        rows.push($f(&FastScalarRefBackend, "fast-scalar-ref"));
        for isa in Isa::ALL {
            match ExactBackend::with_isa(isa, 3) {
                Ok(b) => rows.push($f(&b, &format!("exact/{isa}/3t"))),
                Err(_) => rows.push(format!(
                    "exact/{isa:<12} SKIPPED (not supported by this CPU)"
                )),
            }
        }
        let best = Isa::best(ComputeMode::Fast);
        let fast = FastBackend::with_isa(best, 3).unwrap();
        rows.push($f(&fast, &format!("fast/{best}/3t")));
        println!("{}", rows.join("\n"));
    }};
}

// ----- the CRNN ----------------------------------------------------------------------------

fn crnn_against_torch<B: Backend>(b: &B, label: &str) -> String {
    let file = TensorFile::from_bytes(CRNN).unwrap();
    let case = CrnnCase::from_file(b, &file).unwrap();
    let step = case.forward_backward().unwrap();
    let torch_loss = f64::from(file.floats("loss").unwrap().1[0]);
    let loss_rel = (f64::from(step.loss.item().unwrap()) - torch_loss).abs() / torch_loss.abs();
    assert!(
        loss_rel <= 1e-5,
        "{label}/crnn: loss relative error {loss_rel:.2e}"
    );
    let (shape, lp) = file.floats("output/log_probs").unwrap();
    assert_eq!(step.logits.dims(), shape);
    let e = scaled_error(&step.logits.to_vec().unwrap(), lp);
    assert!(e <= 1e-4, "{label}/crnn: log_probs scaled error {e:.2e}");
    let (worst, at) = compare_gradients(&format!("{label}/crnn"), &file, &step.gradients);
    format!("{label:<18} crnn  worst {worst:.2e} at {at:<26} loss rel {loss_rel:.2e}")
}

#[test]
fn crnn_with_ctc_matches_pytorch_on_every_backend() {
    on_every_backend!(crnn_against_torch);
}

fn crnn_hash<B: Backend>(b: &B) -> u64 {
    CrnnCase::from_oracle(b, CRNN)
        .unwrap()
        .forward_backward()
        .unwrap()
        .hash()
        .unwrap()
}

#[test]
fn crnn_hash_is_pinned_on_every_exact_path_and_thread_count() {
    let mut table = vec![format!(
        "{:<20} {:#018x}",
        "scalar-ref",
        crnn_hash(&ScalarRefBackend)
    )];
    let mut failures = Vec::new();
    if crnn_hash(&ScalarRefBackend) != CRNN_HASH {
        failures.push("scalar-ref".to_string());
    }
    for isa in Isa::ALL {
        for threads in [1, 3, 8] {
            let label = format!("exact/{isa}/{threads}t");
            match ExactBackend::with_isa(isa, threads) {
                Ok(b) => {
                    let h = crnn_hash(&b);
                    if h != CRNN_HASH {
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
        PINNED_HASHES.iter().find(|(n, _)| *n == "crnn").map(|p| p.1),
        Some(CRNN_HASH),
        "exactgrad::nn::reference::PINNED_HASHES (used by the reproduce example) must hold the crnn hash pinned here"
    );
    assert!(
        failures.is_empty(),
        "crnn hashes differ from the pinned ScalarRef value {CRNN_HASH:#018x}: {failures:?}\n{}",
        table.join("\n")
    );
}

#[test]
fn crnn_names_match_the_state_dict() {
    let file = TensorFile::from_bytes(CRNN).unwrap();
    let case = CrnnCase::from_file(&ScalarRefBackend, &file).unwrap();
    let mut ours: Vec<String> = case
        .model
        .named_parameters()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    let mut theirs: Vec<String> = file
        .names()
        .iter()
        .filter_map(|n| n.strip_prefix("init/"))
        .map(String::from)
        .collect();
    assert!(ours.contains(&"lstm.weight_hh_l1_reverse".to_string()));
    ours.sort();
    theirs.sort();
    assert_eq!(ours, theirs);
}

// ----- GRU and LSTM with initial states -------------------------------------------------------

/// Compares the gradients of `named` (name, tensor) with `grad/<name>` under `prefix`.
fn compare_grads<B: Backend>(
    label: &str,
    file: &TensorFile,
    prefix: &str,
    named: &[(String, Tensor<B>)],
) -> f64 {
    let mut worst = 0.0f64;
    for (name, t) in named {
        let torch = file.floats(&format!("{prefix}grad/{name}")).unwrap().1;
        let ours = t
            .grad()
            .unwrap_or_else(|| panic!("{label}: no gradient of {name}"));
        let e = scaled_error(&ours.to_vec().unwrap(), torch);
        assert!(
            e <= 1e-4,
            "{label}: gradient of {prefix}{name}: scaled error {e:.2e}"
        );
        worst = worst.max(e);
    }
    let theirs = file
        .names()
        .iter()
        .filter(|n| n.starts_with(&format!("{prefix}grad/")))
        .count();
    assert_eq!(
        theirs,
        named.len(),
        "{label}: every {prefix}gradient compared"
    );
    worst
}

fn output_error<B: Backend>(label: &str, file: &TensorFile, name: &str, t: &Tensor<B>) -> f64 {
    let (shape, torch) = file.floats(name).unwrap();
    assert_eq!(t.dims(), shape, "{label}: shape of {name}");
    let e = scaled_error(&t.to_vec().unwrap(), torch);
    assert!(e <= 1e-4, "{label}: {name} scaled error {e:.2e}");
    e
}

fn recurrent_against_torch<B: Backend>(b: &B, label: &str) -> String {
    let file = TensorFile::from_bytes(GRU).unwrap();
    let meta = |k: &str| file.metadata_usize(k).unwrap();
    let input = |n: &str| file.tensor(b, n).unwrap().requires_grad().unwrap();
    // The GRU.
    let cfg = RnnConfig {
        num_layers: meta("num_layers"),
        bidirectional: true,
        batch_first: true,
        ..RnnConfig::new(meta("input_size"), meta("hidden_size"))
    };
    let gru = Gru::new(b, cfg, &mut Philox::new(0)).unwrap();
    load_state_dict(&gru, &file, "init/").unwrap();
    let (x, h0) = (input("input/x"), input("input/h0"));
    let out = gru.forward_with_state(&x, Some(&h0)).unwrap();
    let up = |n: &str| file.tensor(b, n).unwrap();
    let loss = out
        .output
        .mul(&up("input/up_out"))
        .unwrap()
        .sum()
        .unwrap()
        .add(&out.h_n.mul(&up("input/up_h")).unwrap().sum().unwrap())
        .unwrap();
    loss.backward().unwrap();
    let mut e_out = output_error(label, &file, "output/output", &out.output);
    e_out = e_out.max(output_error(label, &file, "output/h_n", &out.h_n));
    let mut named = gru.named_parameters();
    named.extend([("input".into(), x), ("h0".into(), h0)]);
    let e_gru = compare_grads(label, &file, "", &named);

    // The LSTM without biases, with h0 and c0.
    let cfg = RnnConfig {
        bias: false,
        bidirectional: true,
        ..RnnConfig::new(meta("lstm_input_size"), meta("lstm_hidden_size"))
    };
    let lstm = Lstm::new(b, cfg, &mut Philox::new(0)).unwrap();
    load_state_dict(&lstm, &file, "lstm/init/").unwrap();
    let (x, h0, c0) = (
        input("lstm/input/x"),
        input("lstm/input/h0"),
        input("lstm/input/c0"),
    );
    let out = lstm.forward_with_state(&x, Some(&h0), Some(&c0)).unwrap();
    let mut loss = Tensor::scalar(b, 0.0).unwrap();
    for (t, u) in [
        (&out.output, "lstm/input/up_out"),
        (&out.h_n, "lstm/input/up_h"),
        (&out.c_n, "lstm/input/up_c"),
    ] {
        loss = loss.add(&t.mul(&up(u)).unwrap().sum().unwrap()).unwrap();
    }
    loss.backward().unwrap();
    for (name, t) in [
        ("lstm/output/output", &out.output),
        ("lstm/output/h_n", &out.h_n),
        ("lstm/output/c_n", &out.c_n),
    ] {
        e_out = e_out.max(output_error(label, &file, name, t));
    }
    let mut named = lstm.named_parameters();
    named.extend([("input".into(), x), ("h0".into(), h0), ("c0".into(), c0)]);
    let e_lstm = compare_grads(label, &file, "lstm/", &named);
    format!("{label:<18} gru worst {e_gru:.2e}  lstm worst {e_lstm:.2e}  outputs {e_out:.2e}")
}

#[test]
fn gru_and_lstm_with_initial_states_match_pytorch_on_every_backend() {
    on_every_backend!(recurrent_against_torch);
}

// ----- CTC alone ----------------------------------------------------------------------------

/// The targets and options of one oracle CTC set.
struct CtcSet {
    name: &'static str,
    labels: Vec<i64>,
    padded: Option<[usize; 2]>,
    input_lengths: Vec<usize>,
    target_lengths: Vec<usize>,
    blank: usize,
}

fn ctc_sets(file: &TensorFile) -> Vec<CtcSet> {
    let lengths = |k: &str| -> Vec<usize> {
        file.ints(k)
            .unwrap()
            .1
            .iter()
            .map(|&v| v as usize)
            .collect()
    };
    ["a", "b"]
        .into_iter()
        .map(|name| {
            let (shape, labels) = file.ints(&format!("ctc/{name}/targets")).unwrap();
            CtcSet {
                name,
                labels: labels.to_vec(),
                padded: (shape.len() == 2).then(|| [shape[0], shape[1]]),
                input_lengths: lengths(&format!("ctc/{name}/input_lengths")),
                target_lengths: lengths(&format!("ctc/{name}/target_lengths")),
                blank: if name == "a" { 0 } else { 3 },
            }
        })
        .collect()
}

impl CtcSet {
    fn batch(&self) -> CtcBatch<'_> {
        CtcBatch {
            targets: match self.padded {
                Some(shape) => CtcTargets::Padded {
                    labels: &self.labels,
                    shape,
                },
                None => CtcTargets::Concatenated(&self.labels),
            },
            input_lengths: &self.input_lengths,
            target_lengths: &self.target_lengths,
        }
    }
}

const REDUCTIONS: [(Reduction, &str); 3] = [
    (Reduction::None, "none"),
    (Reduction::Mean, "mean"),
    (Reduction::Sum, "sum"),
];

fn ctc_against_torch<B: Backend>(b: &B, label: &str) -> String {
    let file = TensorFile::from_bytes(CRNN).unwrap();
    let (mut worst_loss, mut worst_grad) = (0.0f64, 0.0f64);
    let mut impossible = 0;
    for set in ctc_sets(&file) {
        for (reduction, rname) in REDUCTIONS {
            for zero_infinity in [false, true] {
                let key = format!(
                    "ctc/{}/{rname}/{}",
                    set.name,
                    if zero_infinity {
                        "zero_infinity"
                    } else {
                        "keep_infinity"
                    }
                );
                let logits = file
                    .tensor(b, "ctc/logits")
                    .unwrap()
                    .requires_grad()
                    .unwrap();
                let lp = logits.log_softmax(-1).unwrap();
                let opts = CtcLossOptions {
                    blank: set.blank,
                    reduction,
                    zero_infinity,
                };
                let loss = lp.ctc_loss(set.batch(), opts).unwrap();
                let ours = loss.to_vec().unwrap();
                for suffix in ["", "_f32"] {
                    let torch = file.floats(&format!("{key}/loss{suffix}")).unwrap().1;
                    assert_eq!(ours.len(), torch.len(), "{label}/{key}: loss shape");
                    for (i, (&o, &t)) in ours.iter().zip(torch).enumerate() {
                        if t.is_infinite() {
                            assert_eq!(o, t, "{label}/{key}: loss[{i}] must be {t}");
                            impossible += 1;
                            continue;
                        }
                        let rel =
                            (f64::from(o) - f64::from(t)).abs() / f64::from(t).abs().max(1e-30);
                        assert!(
                            rel <= 1e-5,
                            "{label}/{key}: loss{suffix}[{i}] {o} vs torch {t} ({rel:.2e})"
                        );
                        worst_loss = worst_loss.max(rel);
                    }
                }
                let upstream = file.floats(&format!("{key}/upstream")).unwrap().1;
                let up = Tensor::from_slice(b, upstream, loss.dims()).unwrap();
                loss.mul(&up).unwrap().sum().unwrap().backward().unwrap();
                let grad = logits.grad().unwrap().to_vec().unwrap();
                // PyTorch in float64 is the reference of the gradient (its float32
                // recursions are off by up to 2e-6 scaled themselves); float32 PyTorch
                // within 1e-5.
                for (suffix, tol) in [("", 1e-6), ("_f32", 1e-5)] {
                    let mut theirs = file
                        .floats(&format!("{key}/grad_logits{suffix}"))
                        .unwrap()
                        .1
                        .to_vec();
                    let mut ours_g = grad.clone();
                    // PyTorch's gradient of an impossible entry without zero_infinity is
                    // NaN; ours is 0. Compare it apart and the rest together.
                    let (t_steps, n, c) = (12, set.input_lengths.len(), 7);
                    for e in 0..n {
                        if (0..t_steps).any(|t| theirs[(t * n + e) * c].is_nan()) {
                            for t in 0..t_steps {
                                for k in 0..c {
                                    let i = (t * n + e) * c + k;
                                    assert_eq!(
                                        ours_g[i], 0.0,
                                        "{label}/{key}: impossible entry {e} has a gradient"
                                    );
                                    ours_g[i] = 0.0;
                                    theirs[i] = 0.0;
                                }
                            }
                        }
                    }
                    let e = scaled_error(&ours_g, &theirs);
                    assert!(
                        e <= tol,
                        "{label}/{key}: logits gradient scaled error {e:.2e} > {tol:e} against float{}",
                        if suffix.is_empty() { "64" } else { "32" }
                    );
                    if suffix.is_empty() {
                        worst_grad = worst_grad.max(e);
                    }
                }
            }
        }
    }
    assert!(impossible > 0, "the oracle has an impossible alignment");
    format!(
        "{label:<18} ctc   worst loss rel {worst_loss:.2e}  worst logits-gradient {worst_grad:.2e}"
    )
}

#[test]
fn ctc_loss_matches_pytorch_for_every_reduction_and_zero_infinity() {
    on_every_backend!(ctc_against_torch);
}

/// The loss and gradient of given log-probabilities, hashed.
fn ctc_bits<B: Backend>(b: &B) -> u64 {
    let file = TensorFile::from_bytes(CRNN).unwrap();
    let (shape, v) = file.floats("ctc/logits").unwrap();
    // Log-probabilities computed once (in f64), so that every backend sees the same input.
    let mut lp = v.to_vec();
    for row in lp.chunks_mut(shape[2]) {
        let m = row
            .iter()
            .fold(f64::NEG_INFINITY, |m, &x| m.max(f64::from(x)));
        let s: f64 = row.iter().map(|&x| (f64::from(x) - m).exp()).sum();
        row.iter_mut()
            .for_each(|x| *x = (f64::from(*x) - m - s.ln()) as f32);
    }
    let mut h = exactgrad::core::GradHasher::new();
    for set in ctc_sets(&file) {
        for (reduction, _) in REDUCTIONS {
            let x = Tensor::from_slice(b, &lp, shape)
                .unwrap()
                .requires_grad()
                .unwrap();
            let opts = CtcLossOptions {
                blank: set.blank,
                reduction,
                zero_infinity: true,
            };
            let loss = x.ctc_loss(set.batch(), opts).unwrap();
            let seed = Tensor::ones(b, loss.dims()).unwrap();
            loss.backward_with(BackwardOptions::default().gradient(&seed))
                .unwrap();
            h.update(&loss.to_vec().unwrap());
            h.update(&x.grad().unwrap().to_vec().unwrap());
        }
    }
    h.finish()
}

#[test]
fn ctc_has_the_same_bits_in_both_modes_and_on_every_path() {
    let want = ctc_bits(&ScalarRefBackend);
    assert_eq!(ctc_bits(&FastScalarRefBackend), want, "fast-scalar-ref");
    for isa in Isa::ALL {
        for threads in [1, 3] {
            if let Ok(b) = ExactBackend::with_isa(isa, threads) {
                assert_eq!(ctc_bits(&b), want, "exact/{isa}/{threads}t");
            }
            if let Ok(b) = FastBackend::with_isa(isa, threads) {
                assert_eq!(ctc_bits(&b), want, "fast/{isa}/{threads}t");
            }
        }
    }
}

// ----- interpolate --------------------------------------------------------------------------

fn resize_against_torch<B: Backend>(b: &B, label: &str) -> String {
    let file = TensorFile::from_bytes(RESIZE).unwrap();
    let cases = file.metadata("cases").unwrap().to_string();
    let mut worst = 0.0f64;
    for name in cases.split(',') {
        let (size, options) = match name {
            "nearest_size_up" => (
                InterpolateSize::Size([8, 11]),
                InterpolateOptions::default(),
            ),
            "nearest_size_down" => (InterpolateSize::Size([3, 4]), InterpolateOptions::default()),
            "nearest_scale_2" => (
                InterpolateSize::ScaleFactor([2.0, 2.0]),
                InterpolateOptions::default(),
            ),
            "nearest_scale_1.5" => (
                InterpolateSize::ScaleFactor([1.5, 1.7]),
                InterpolateOptions::default(),
            ),
            "bilinear_size_up" => (
                InterpolateSize::Size([8, 11]),
                InterpolateOptions::bilinear(),
            ),
            "bilinear_size_down" => (
                InterpolateSize::Size([3, 4]),
                InterpolateOptions::bilinear(),
            ),
            "bilinear_scale" => (
                InterpolateSize::ScaleFactor([1.7, 2.5]),
                InterpolateOptions::bilinear(),
            ),
            "bilinear_align_up" | "bilinear_align_down" => (
                InterpolateSize::Size(if name.ends_with("up") {
                    [8, 11]
                } else {
                    [3, 1]
                }),
                InterpolateOptions {
                    mode: InterpolateMode::Bilinear,
                    align_corners: true,
                },
            ),
            other => panic!("unknown resize case {other}"),
        };
        let x = file.tensor(b, "input/x").unwrap().requires_grad().unwrap();
        let y = x.interpolate(size, options).unwrap();
        let (shape, torch) = file.floats(&format!("{name}/output")).unwrap();
        assert_eq!(y.dims(), shape, "{label}/{name}: output shape");
        let ours = y.to_vec().unwrap();
        let e = scaled_error(&ours, torch);
        if options.mode == InterpolateMode::Nearest {
            assert_eq!(
                ours, torch,
                "{label}/{name}: nearest copies the picked pixels"
            );
        }
        assert!(e <= 1e-5, "{label}/{name}: output scaled error {e:.2e}");
        let up = file.tensor(b, &format!("{name}/upstream")).unwrap();
        y.mul(&up).unwrap().sum().unwrap().backward().unwrap();
        let g = x.grad().unwrap().to_vec().unwrap();
        let eg = scaled_error(&g, file.floats(&format!("{name}/grad")).unwrap().1);
        assert!(eg <= 1e-5, "{label}/{name}: gradient scaled error {eg:.2e}");
        worst = worst.max(e).max(eg);
    }
    format!("{label:<18} interpolate worst {worst:.2e}")
}

#[test]
fn interpolate_matches_pytorch_on_every_backend() {
    on_every_backend!(resize_against_torch);
}
