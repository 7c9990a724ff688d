//! Four reference models of `exactgrad::nn::reference` — the conv net, the encoder, a
//! small ResNet and a small GPT-style decoder — against PyTorch 2.15.0
//! (`testdata/autograd/*.safetensors`, written by `tools/autograd_oracle.py` and
//! `tools/models_oracle.py`), on every backend, and their gradient hashes pinned in both
//! modes.
//!
//! - Every gradient (parameters, and the input where it takes one) within 1e-4 scaled
//!   error, `max |ours − torch| / max |torch|`, on ScalarRef, the fast scalar reference,
//!   every supported ExactBackend path and FastBackend's best path; the loss within 1e-5
//!   relative; the logits and the updated batch-norm running statistics likewise.
//! - Gradients that are zero in theory (the convolution biases feeding batch norms, the
//!   key part of every `in_proj_bias`) below 1e-5 of the model's largest gradient.
//! - Exact mode: the hash of all gradients (parameters in `state_dict` order, then the
//!   input) equals the pinned constant on ScalarRef and on every ExactBackend path at 1,
//!   2, 3 and 8 threads.
//! - Fast mode (`docs/arithmetic.md` §6): the same hashes equal the pinned constants of
//!   FastScalarRefBackend on every path FastBackend supports on this CPU, at 1, 2, 3 and 8
//!   threads.

use super::oracle_support::scaled_error;
use exactgrad::nn::reference::load_state_dict;
use exactgrad::nn::reference::{
    ConvNetCase, EncoderCase, GptCase, ReferenceCase, ResNetCase, TensorFile, PINNED_HASHES,
};
use exactgrad::nn::{AttentionMask, MultiheadAttention, MultiheadAttentionConfig};
use exactgrad::prelude::*;

/// `hash_tensors` of the conv net's gradients in exact mode. This is the value
/// ScalarRefBackend (the oracle of the arithmetic contract) computes; every exact path
/// and thread count must reproduce it.
const CONV_NET_HASH: u64 = 0xa021_2c7f_3b4e_3698;
/// `hash_tensors` of the encoder's gradients in exact mode, as computed by
/// ScalarRefBackend.
const ENCODER_HASH: u64 = 0x1215_42c7_8634_3692;

/// `hash_tensors` of the small ResNet's parameter gradients (`resnet.safetensors`) in
/// exact mode, as computed by ScalarRefBackend.
const RESNET_HASH: u64 = 0xbf70_56d1_5a0d_28b2;
/// `hash_tensors` of the small GPT-style decoder's parameter gradients
/// (`gpt.safetensors`) in exact mode, as computed by ScalarRefBackend.
const GPT_HASH: u64 = 0x61ed_0f41_5928_ccff;

/// The same four hashes in fast mode, as computed by FastScalarRefBackend (conv net,
/// encoder, ResNet, GPT).
const FAST_HASHES: [u64; 4] = [
    0x3916_948f_6fec_ff88,
    0xb9fd_7bd9_4256_72fc,
    0xedb8_dcfe_68f2_98dc,
    0xdaca_5a7e_af03_be83,
];

/// The models of the pinned hashes, in order.
const MODELS: [&str; 4] = ["conv_net", "encoder", "resnet", "gpt"];

/// The thread counts every path is checked at.
const THREADS: [usize; 4] = [1, 2, 3, 8];

const CONV_NET: &[u8] = include_bytes!("../../testdata/autograd/conv_net.safetensors");
const ENCODER: &[u8] = include_bytes!("../../testdata/autograd/encoder.safetensors");
const RESNET: &[u8] = include_bytes!("../../testdata/autograd/resnet.safetensors");
const GPT: &[u8] = include_bytes!("../../testdata/autograd/gpt.safetensors");

fn files() -> (TensorFile, TensorFile) {
    (
        TensorFile::from_bytes(CONV_NET).unwrap(),
        TensorFile::from_bytes(ENCODER).unwrap(),
    )
}

fn big_files() -> (TensorFile, TensorFile) {
    (
        TensorFile::from_bytes(RESNET).unwrap(),
        TensorFile::from_bytes(GPT).unwrap(),
    )
}

/// The worst scaled error over a model's gradients, and where.
#[derive(Debug, Default)]
struct Worst {
    error: f64,
    name: String,
    loss_rel: f64,
    zero_rel: f64,
}

/// Runs `case` and compares it with the oracle `file`. Panics on any failure.
fn compare<B: Backend>(
    label: &str,
    case: &dyn ReferenceCase<B>,
    file: &TensorFile,
    zero_in_theory: &[(&str, std::ops::Range<usize>)],
    buffers: &[(String, Tensor<B>)],
) -> Worst {
    let model = case.name();
    let step = case.forward_backward().unwrap();
    let mut w = Worst::default();

    let torch_loss = f64::from(file.floats("loss").unwrap().1[0]);
    let ours = f64::from(step.loss.item().unwrap());
    w.loss_rel = (ours - torch_loss).abs() / torch_loss.abs();
    assert!(
        w.loss_rel <= 1e-5,
        "{label}/{model}: loss {ours} vs torch {torch_loss} (relative {:.2e})",
        w.loss_rel
    );
    let (shape, logits) = file.floats("output/logits").unwrap();
    assert_eq!(step.logits.dims(), shape);
    let e = scaled_error(&step.logits.to_vec().unwrap(), logits);
    assert!(e <= 1e-4, "{label}/{model}: logits scaled error {e:.2e}");

    let mut largest = 0.0f64;
    for (name, g) in &step.gradients {
        let (shape, torch) = file.floats(&format!("grad/{name}")).unwrap();
        assert_eq!(g.dims(), shape, "{label}/{model}: shape of gradient {name}");
        largest = torch
            .iter()
            .fold(largest, |m, &v| m.max(f64::from(v).abs()));
        // Elements that are zero in theory are rounding noise on both sides: they are
        // held to the bound below instead; the rest of the tensor is compared.
        let zero = zero_in_theory
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, r)| r.clone())
            .unwrap_or(0..0);
        let keep = |v: &[f32]| -> Vec<f32> {
            v.iter()
                .enumerate()
                .filter(|(i, _)| !zero.contains(i))
                .map(|(_, &x)| x)
                .collect()
        };
        let e = scaled_error(&keep(&g.to_vec().unwrap()), &keep(torch));
        assert!(
            e <= 1e-4,
            "{label}/{model}: gradient of {name}: scaled error {e:.2e} > 1e-4"
        );
        if e >= w.error {
            w.error = e;
            w.name = name.clone();
        }
    }
    // Every gradient the oracle has, we have.
    let ours: Vec<&str> = step.gradients.iter().map(|(n, _)| n.as_str()).collect();
    for n in file.names() {
        if let Some(name) = n.strip_prefix("grad/") {
            assert!(ours.contains(&name), "{label}/{model}: no gradient {name}");
        }
    }
    for (name, range) in zero_in_theory {
        let g = step.get(name).unwrap().to_vec().unwrap();
        let m = g[range.clone()]
            .iter()
            .fold(0.0f64, |m, &v| m.max(f64::from(v).abs()));
        let rel = m / largest;
        assert!(
            rel < 1e-5,
            "{label}/{model}: {name}[{range:?}] is zero in theory but reaches {rel:.2e} of the largest gradient"
        );
        w.zero_rel = w.zero_rel.max(rel);
    }
    for (name, t) in buffers {
        let (_, torch) = file.floats(&format!("after/{name}")).unwrap();
        let e = scaled_error(&t.to_vec().unwrap(), torch);
        assert!(
            e <= 1e-5,
            "{label}/{model}: buffer {name} after the step: scaled error {e:.2e}"
        );
    }
    w
}

fn against_torch<B: Backend>(b: &B, label: &str, rows: &mut Vec<String>) {
    let (cf, ef) = files();
    let conv = ConvNetCase::from_file(b, &cf).unwrap();
    let enc = EncoderCase::from_file(b, &ef).unwrap();
    let e = ef.metadata_usize("d_model").unwrap();
    // Buffers are updated by the forward pass; compare after it ran.
    let buffers = conv.model.named_buffers();
    let wc = compare(
        label,
        &conv,
        &cf,
        &[
            ("conv1.bias", 0..conv.model.config().c1),
            ("conv2.bias", 0..conv.model.config().c2),
        ],
        &buffers,
    );
    let we = compare(
        label,
        &enc,
        &ef,
        &[
            ("layers.0.self_attn.in_proj_bias", e..2 * e),
            ("layers.1.self_attn.in_proj_bias", e..2 * e),
        ],
        &[],
    );
    let (rf, gf) = big_files();
    let resnet = ResNetCase::from_file(b, &rf).unwrap();
    let gpt = GptCase::from_file(b, &gf).unwrap();
    let buffers = resnet.model.named_buffers();
    let wr = compare(label, &resnet, &rf, &[], &buffers);
    let e = gf.metadata_usize("d_model").unwrap();
    let layers = gf.metadata_usize("layers").unwrap();
    let zero: Vec<(String, std::ops::Range<usize>)> = (0..layers)
        .map(|i| (format!("layers.{i}.self_attn.in_proj_bias"), e..2 * e))
        .collect();
    let zero: Vec<(&str, std::ops::Range<usize>)> =
        zero.iter().map(|(n, r)| (n.as_str(), r.clone())).collect();
    let wg = compare(label, &gpt, &gf, &zero, &[]);
    for (model, w) in [
        ("conv_net", wc),
        ("encoder", we),
        ("resnet", wr),
        ("gpt", wg),
    ] {
        rows.push(format!(
            "{label:<18} {model:<9} {:>9.2e}  {:<32} {:>9.2e} {:>9.2e}",
            w.error, w.name, w.zero_rel, w.loss_rel
        ));
    }
}

const MHA: &[u8] = include_bytes!("../../testdata/autograd/mha.safetensors");

/// `nn.MultiheadAttention` alone (sequence first, cross-attention, a boolean key padding
/// mask with a float per-head attention mask) against `mha.safetensors`; returns the
/// worst scaled error.
fn mha_against_torch<B: Backend>(b: &B, label: &str) -> (f64, f64) {
    let file = TensorFile::from_bytes(MHA).unwrap();
    let e = file.metadata_usize("embed_dim").unwrap();
    let h = file.metadata_usize("num_heads").unwrap();
    let mha = MultiheadAttention::new(b, MultiheadAttentionConfig::new(e, h), &mut Philox::new(0))
        .unwrap();
    load_state_dict(&mha, &file, "init/").unwrap();
    let input = |n: &str| {
        file.tensor(b, &format!("input/{n}"))
            .unwrap()
            .requires_grad()
            .unwrap()
    };
    let (q, k, v) = (input("query"), input("key"), input("value"));
    let (mshape, m) = file.ints("input/key_padding_mask").unwrap();
    let kpm = Tensor::from_vec(b, m.iter().map(|&x| x as f32).collect(), mshape).unwrap();
    let attn = file.tensor(b, "input/attn_mask").unwrap();
    let out = mha
        .forward_attention(
            &q,
            &k,
            &v,
            Some(AttentionMask::Block(&kpm)),
            Some(AttentionMask::Additive(&attn)),
        )
        .unwrap();
    let loss = out
        .mul(&file.tensor(b, "input/upstream").unwrap())
        .unwrap()
        .sum()
        .unwrap();
    loss.backward().unwrap();
    let e_out = scaled_error(&out.to_vec().unwrap(), file.floats("output/out").unwrap().1);
    assert!(
        e_out <= 1e-4,
        "{label}/mha: output scaled error {e_out:.2e}"
    );
    let mut grads = mha.named_parameters();
    grads.extend([("query".into(), q), ("key".into(), k), ("value".into(), v)]);
    let mut worst = 0.0f64;
    let mut largest = 0.0f64;
    for (name, t) in &grads {
        let torch = file.floats(&format!("grad/{name}")).unwrap().1;
        largest = torch
            .iter()
            .fold(largest, |m, &v| m.max(f64::from(v).abs()));
        let mut ours = t.grad().unwrap().to_vec().unwrap();
        let mut theirs = torch.to_vec();
        if name == "in_proj_bias" {
            // The key bias (zero in theory) is checked below.
            ours.drain(e..2 * e);
            theirs.drain(e..2 * e);
        }
        let err = scaled_error(&ours, &theirs);
        assert!(
            err <= 1e-4,
            "{label}/mha: gradient of {name}: scaled error {err:.2e}"
        );
        worst = worst.max(err);
    }
    let kb = mha
        .in_proj_bias()
        .unwrap()
        .grad()
        .unwrap()
        .to_vec()
        .unwrap()[e..2 * e]
        .iter()
        .fold(0.0f64, |m, &v| m.max(f64::from(v).abs()));
    assert!(
        kb / largest < 1e-5,
        "{label}/mha: key bias gradient {:.2e} of the largest",
        kb / largest
    );
    (worst, kb / largest)
}

#[test]
fn multihead_attention_matches_pytorch_on_every_backend() {
    let mut rows = Vec::new();
    let mut row = |label: &str, (w, z): (f64, f64)| {
        rows.push(format!(
            "{label:<18} mha       {w:>9.2e}  {:<32} {z:>9.2e}",
            ""
        ));
    };
    row(
        "scalar-ref",
        mha_against_torch(&ScalarRefBackend, "scalar-ref"),
    );
    row(
        "fast-scalar-ref",
        mha_against_torch(&FastScalarRefBackend, "fast-scalar-ref"),
    );
    for isa in Isa::ALL {
        if let Ok(b) = ExactBackend::with_isa(isa, 3) {
            let label = format!("exact/{isa}/3t");
            row(&label, mha_against_torch(&b, &label));
        }
    }
    let best = Isa::best(ComputeMode::Fast);
    let label = format!("fast/{best}/3t");
    row(
        &label,
        mha_against_torch(&FastBackend::with_isa(best, 3).unwrap(), &label),
    );
    println!("{}", rows.join("\n"));
}

#[test]
fn reference_models_match_pytorch_on_every_backend() {
    let mut rows = vec![format!(
        "{:<18} {:<9} {:>9}  {:<32} {:>9} {:>9}",
        "backend", "model", "worst", "at gradient", "zero/max", "loss rel"
    )];
    against_torch(&ScalarRefBackend, "scalar-ref", &mut rows);
    against_torch(&FastScalarRefBackend, "fast-scalar-ref", &mut rows);
    for isa in Isa::ALL {
        if !isa.is_supported(ComputeMode::Exact) {
            rows.push(format!(
                "exact/{isa:<16} SKIPPED (not supported by this CPU)"
            ));
            continue;
        }
        let b = ExactBackend::with_isa(isa, 3).unwrap();
        against_torch(&b, &format!("exact/{isa}/3t"), &mut rows);
    }
    let best = Isa::best(ComputeMode::Fast);
    let b = FastBackend::with_isa(best, 3).unwrap();
    against_torch(&b, &format!("fast/{best}/3t"), &mut rows);
    println!("{}", rows.join("\n"));
}

fn hashes<B: Backend>(b: &B) -> [u64; 4] {
    let (cf, ef) = files();
    let (rf, gf) = big_files();
    [
        ConvNetCase::from_file(b, &cf).unwrap().forward_backward(),
        EncoderCase::from_file(b, &ef).unwrap().forward_backward(),
        ResNetCase::from_file(b, &rf).unwrap().forward_backward(),
        GptCase::from_file(b, &gf).unwrap().forward_backward(),
    ]
    .map(|step| step.unwrap().hash().unwrap())
}

/// The rows of a pinned-hash table: every backend's four hashes against `pinned`; the
/// models whose hash differs are pushed to `failures`.
struct HashTable {
    pinned: [u64; 4],
    rows: Vec<String>,
    failures: Vec<String>,
}

impl HashTable {
    fn new(pinned: [u64; 4]) -> Self {
        let mut rows = vec![format!("{:<20}", "backend")];
        for m in MODELS {
            rows[0].push_str(&format!(" {m:<22}"));
        }
        Self {
            pinned,
            rows,
            failures: Vec::new(),
        }
    }

    fn row(&mut self, label: String, got: Option<[u64; 4]>) {
        let Some(h) = got else {
            self.rows
                .push(format!("{label:<20} SKIPPED (not supported by this CPU)"));
            return;
        };
        let mut row = format!("{label:<20}");
        for (i, model) in MODELS.iter().enumerate() {
            let ok = h[i] == self.pinned[i];
            if !ok {
                self.failures.push(format!("{label} {model}"));
            }
            row.push_str(&format!(
                " {:#018x} {:<3}",
                h[i],
                if ok { "ok" } else { "FAIL" }
            ));
        }
        self.rows.push(row);
    }

    fn check(self, what: &str) {
        let table = self.rows.join("\n");
        println!("{table}");
        assert!(
            self.failures.is_empty(),
            "{what}: hashes differ from the pinned values: {:?}\n{table}\n\
             If every row agrees and the arithmetic contract changed on purpose (a new \
             polynomial, a new operator order), re-pin to the reference row.",
            self.failures
        );
    }
}

#[test]
fn exact_mode_hashes_are_pinned() {
    let pinned = [CONV_NET_HASH, ENCODER_HASH, RESNET_HASH, GPT_HASH];
    let mut table = HashTable::new(pinned);
    table.row("scalar-ref".into(), Some(hashes(&ScalarRefBackend)));
    for isa in Isa::ALL {
        for threads in THREADS {
            let got = ExactBackend::with_isa(isa, threads)
                .ok()
                .map(|b| hashes(&b));
            table.row(format!("exact/{isa}/{threads}t"), got);
        }
    }
    assert_eq!(
        [PINNED_HASHES[0].1, PINNED_HASHES[1].1],
        [CONV_NET_HASH, ENCODER_HASH],
        "exactgrad::nn::reference::PINNED_HASHES (used by the reproduce example) must equal the constants pinned here"
    );
    table.check("exact mode");
}

/// Fast mode's promise (`docs/arithmetic.md` §6): every path FastBackend supports on
/// this CPU — the FMA paths and the scalar path — gives the bits of FastScalarRefBackend
/// at every thread count, and those bits are the pinned ones on every machine.
#[test]
fn fast_mode_hashes_are_pinned() {
    let mut table = HashTable::new(FAST_HASHES);
    table.row(
        "fast-scalar-ref".into(),
        Some(hashes(&FastScalarRefBackend)),
    );
    for isa in Isa::ALL {
        for threads in THREADS {
            let got = FastBackend::with_isa(isa, threads).ok().map(|b| hashes(&b));
            table.row(format!("fast/{isa}/{threads}t"), got);
        }
    }
    table.check("fast mode");
}

#[test]
fn oracle_names_match_the_state_dict() {
    let (cf, ef) = files();
    let (rf, gf) = big_files();
    let b = ScalarRefBackend;
    let conv = ConvNetCase::from_file(&b, &cf).unwrap();
    let enc = EncoderCase::from_file(&b, &ef).unwrap();
    let resnet = ResNetCase::from_file(&b, &rf).unwrap();
    let gpt = GptCase::from_file(&b, &gf).unwrap();
    for (file, names) in [
        (&cf, conv.model.named_parameters()),
        (&ef, enc.model.named_parameters()),
        (&rf, resnet.model.named_parameters()),
        (&gf, gpt.model.named_parameters()),
    ] {
        let ours: Vec<String> = names.into_iter().map(|(n, _)| n).collect();
        let mut theirs: Vec<String> = file
            .names()
            .iter()
            .filter_map(|n| n.strip_prefix("grad/"))
            .filter(|&n| n != "input")
            .map(String::from)
            .collect();
        let mut sorted = ours.clone();
        sorted.sort();
        theirs.sort();
        assert_eq!(sorted, theirs);
    }
    let buffers: Vec<String> = conv
        .model
        .named_buffers()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        buffers,
        [
            "bn1.running_mean",
            "bn1.running_var",
            "bn2.running_mean",
            "bn2.running_var"
        ]
    );
    // The ResNet's running statistics are those of PyTorch's model (the oracle stores
    // every one), in the same order up to sorting.
    let mut ours: Vec<String> = resnet
        .model
        .named_buffers()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    let mut theirs: Vec<String> = rf
        .names()
        .iter()
        .filter_map(|n| n.strip_prefix("after/"))
        .map(String::from)
        .collect();
    assert_eq!(
        ours.len(),
        2 * 20,
        "20 batch norms (17 in the blocks, 3 shortcuts)"
    );
    ours.sort();
    theirs.sort();
    assert_eq!(ours, theirs);
}

#[test]
fn oracle_files_that_do_not_fit_are_refused() {
    let b = ScalarRefBackend;
    let (rf, gf) = big_files();
    let check = |e: Option<String>, what: &str| {
        let e = e.unwrap_or_else(|| panic!("{what}: accepted"));
        assert!(e.contains(what), "{what}: {e}");
    };
    let resnet = |f: &TensorFile| ResNetCase::from_file(&b, f).err().map(|e| e.to_string());
    let gpt = |f: &TensorFile| GptCase::from_file(&b, f).err().map(|e| e.to_string());
    let mut f = rf.clone();
    f.set_metadata("widths", "4,8,8");
    check(resnet(&f), "widths");
    f.set_metadata("widths", "4,8,8,x");
    check(resnet(&f), "widths");
    let mut f = rf.clone();
    f.remove("init/layer2.0.downsample.0.weight");
    check(resnet(&f), "layer2.0.downsample.0.weight");
    let mut f = gf.clone();
    let (shape, tokens) = f.ints("input/tokens").unwrap();
    let (shape, tokens) = (shape.to_vec(), tokens.to_vec());
    f.insert_ints("input/tokens", &[tokens.len()], tokens.clone())
        .unwrap();
    check(gpt(&f), "[N, L]");
    f.insert_ints("input/tokens", &shape, tokens).unwrap();
    f.insert_ints("input/targets", &[2], vec![0, 1]).unwrap();
    check(gpt(&f), "targets");
    let mut f = gf.clone();
    f.set_metadata("nhead", "3");
    assert!(gpt(&f).is_some(), "3 heads do not divide a width of 16");
}
