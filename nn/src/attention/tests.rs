//! Unit tests of the attention layers.

use super::*;
use crate::module::{Module, ModuleExt};
use exactgrad_autograd::Tensor;
use exactgrad_backends::ScalarRefBackend;
use exactgrad_core::Philox;

type T = Tensor<ScalarRefBackend>;

fn close(a: &T, b: &T, tol: f32) {
    assert_eq!(a.dims(), b.dims());
    for (i, (x, y)) in a
        .to_vec()
        .unwrap()
        .iter()
        .zip(b.to_vec().unwrap())
        .enumerate()
    {
        assert!((x - y).abs() <= tol, "element {i}: {x} vs {y}");
    }
}

fn mha(batch_first: bool, dropout: f32) -> MultiheadAttention<ScalarRefBackend> {
    let config = MultiheadAttentionConfig {
        batch_first,
        dropout,
        ..MultiheadAttentionConfig::new(8, 2)
    };
    MultiheadAttention::new(&ScalarRefBackend, config, &mut Philox::new(4)).unwrap()
}

fn randn(shape: &[usize], seed: u64) -> T {
    Tensor::randn(
        &ScalarRefBackend,
        shape.to_vec(),
        0.0,
        1.0,
        &mut Philox::new(seed),
    )
    .unwrap()
}

#[test]
fn multihead_attention_names_and_init() {
    let m = mha(true, 0.0);
    let names: Vec<String> = m.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "in_proj_weight",
            "in_proj_bias",
            "out_proj.weight",
            "out_proj.bias"
        ]
    );
    let xavier = (6.0f64 / 32.0).sqrt() as f32;
    let w = m.in_proj_weight().to_vec().unwrap();
    assert_eq!(m.in_proj_weight().dims(), [24, 8]);
    assert!(w.iter().all(|v| v.abs() <= xavier) && w.iter().any(|v| v.abs() > 0.5 * xavier));
    assert!(m
        .in_proj_bias()
        .unwrap()
        .to_vec()
        .unwrap()
        .iter()
        .all(|&v| v == 0.0));
    assert!(m
        .out_proj()
        .bias()
        .unwrap()
        .to_vec()
        .unwrap()
        .iter()
        .all(|&v| v == 0.0));
    let bound = (1.0 / 8f64.sqrt()) as f32;
    assert!(m
        .out_proj()
        .weight()
        .to_vec()
        .unwrap()
        .iter()
        .all(|v| v.abs() <= bound));
    assert!(m
        .parameters()
        .iter()
        .all(|p| p.is_leaf() && p.is_requires_grad()));
    let nb = MultiheadAttentionConfig {
        bias: false,
        ..MultiheadAttentionConfig::new(8, 2)
    };
    let nb = MultiheadAttention::new(&ScalarRefBackend, nb, &mut Philox::new(1)).unwrap();
    assert_eq!(nb.named_parameters().len(), 2);
}

#[test]
fn sequence_first_batch_first_and_unbatched_agree() {
    let (bf, sf) = (mha(true, 0.0), mha(false, 0.0));
    let x = randn(&[3, 5, 8], 1);
    let y = bf.forward(&x).unwrap();
    assert_eq!(y.dims(), [3, 5, 8]);
    let ys = sf.forward(&x.transpose(0, 1).unwrap()).unwrap();
    close(&ys.transpose(0, 1).unwrap().contiguous().unwrap(), &y, 0.0);
    let x0 = x.narrow(0, 1, 1).unwrap().squeeze(0).unwrap();
    let y0 = bf.forward(&x0).unwrap();
    close(&y0, &y.narrow(0, 1, 1).unwrap().squeeze(0).unwrap(), 0.0);
}

#[test]
fn masks_combine_as_in_pytorch() {
    let b = ScalarRefBackend;
    let m = mha(true, 0.0);
    let (q, kv) = (randn(&[2, 3, 8], 1), randn(&[2, 4, 8], 2));
    let tensor = |v: Vec<f32>, shape: &[usize]| Tensor::from_vec(&b, v, shape).unwrap();
    // Key padding [N, S] (PyTorch's True = padding) equals the same exclusion as a
    // per-head attn_mask, in each of the three conventions.
    let pad = vec![0., 0., 1., 1., 0., 0., 0., 1.];
    let kpm = tensor(pad.clone(), &[2, 4]);
    let kpm_allow = tensor(pad.iter().map(|&v| 1.0 - v).collect(), &[2, 4]);
    let additive = |v: &[f32]| -> Vec<f32> {
        v.iter()
            .map(|&v| if v != 0.0 { f32::NEG_INFINITY } else { 0.0 })
            .collect()
    };
    let kpm_add = tensor(additive(&pad), &[2, 4]);
    let per_head: Vec<f32> = (0..2)
        .flat_map(|n| std::iter::repeat_n(pad[n * 4..n * 4 + 4].to_vec(), 2 * 3).flatten())
        .collect();
    let block_mask = tensor(per_head.clone(), &[4, 3, 4]);
    let float_mask = tensor(additive(&per_head), &[4, 3, 4]);
    let run = |kpm: Option<AttentionMask<'_, ScalarRefBackend>>,
               attn: Option<AttentionMask<'_, ScalarRefBackend>>| {
        m.forward_attention(&q, &kv, &kv, kpm, attn).unwrap()
    };
    let a = run(Some(AttentionMask::Block(&kpm)), None);
    close(&run(Some(AttentionMask::Allow(&kpm_allow)), None), &a, 0.0);
    close(
        &run(Some(AttentionMask::Additive(&kpm_add)), None),
        &a,
        1e-6,
    );
    close(&run(None, Some(AttentionMask::Block(&block_mask))), &a, 0.0);
    close(
        &run(None, Some(AttentionMask::Additive(&float_mask))),
        &a,
        1e-6,
    );
    // The conventions differ: the same tensor read as Allow excludes the other keys.
    let flipped = run(Some(AttentionMask::Allow(&kpm)), None);
    assert_ne!(flipped.to_vec().unwrap(), a.to_vec().unwrap());
    close(
        &flipped,
        &run(Some(AttentionMask::Block(&kpm_allow)), None),
        0.0,
    );
    // Two additive masks add: attn_mask ⊕ key_padding_mask.
    let bias_kpm = randn(&[2, 4], 5);
    let bias_attn = randn(&[3, 4], 6);
    let summed: Vec<f32> = (0..2)
        .flat_map(|n| {
            let (k, at) = (bias_kpm.to_vec().unwrap(), bias_attn.to_vec().unwrap());
            (0..2).flat_map(move |_| {
                let (k, at) = (k.clone(), at.clone());
                (0..3).flat_map(move |i| {
                    let (k, at) = (k.clone(), at.clone());
                    (0..4).map(move |j| at[i * 4 + j] + k[n * 4 + j])
                })
            })
        })
        .collect();
    let summed = tensor(summed, &[4, 3, 4]);
    close(
        &run(
            Some(AttentionMask::Additive(&bias_kpm)),
            Some(AttentionMask::Additive(&bias_attn)),
        ),
        &run(None, Some(AttentionMask::Additive(&summed))),
        0.0,
    );
    // A 2-D [L, S] mask applies to every batch item and head; a position excluded by
    // either mask is excluded.
    let causal = tensor(
        (0..3)
            .flat_map(|i| (0..4).map(move |j| (j > i + 1) as u8 as f32))
            .collect(),
        &[3, 4],
    );
    let both = run(
        Some(AttentionMask::Block(&kpm)),
        Some(AttentionMask::Block(&causal)),
    );
    let combined: Vec<f32> = (0..2)
        .flat_map(|n| {
            let (pad, causal) = (pad.clone(), causal.to_vec().unwrap());
            (0..2 * 3).flat_map(move |hi| {
                let (pad, causal) = (pad.clone(), causal.clone());
                (0..4).map(move |j| {
                    let i = hi % 3;
                    ((pad[n * 4 + j] != 0.0) || (causal[i * 4 + j] != 0.0)) as u8 as f32
                })
            })
        })
        .collect();
    let combined = tensor(combined, &[4, 3, 4]);
    close(
        &both,
        &run(None, Some(AttentionMask::Block(&combined))),
        0.0,
    );
    // Wrong shapes are errors naming the mask.
    let bad = Tensor::zeros(&b, [2, 5]).unwrap();
    let err = m
        .forward_attention(&q, &kv, &kv, Some(AttentionMask::Block(&bad)), None)
        .unwrap_err();
    assert!(err.to_string().contains("key_padding_mask"), "{err}");
    let bad = Tensor::zeros(&b, [3, 3, 4]).unwrap();
    let err = m
        .forward_attention(&q, &kv, &kv, None, Some(AttentionMask::Block(&bad)))
        .unwrap_err();
    assert!(err.to_string().contains("attn_mask"), "{err}");
    let err = m.forward(&randn(&[2, 3, 6], 3)).unwrap_err();
    assert!(err.to_string().contains("query"), "{err}");
}

#[test]
fn attention_dropout_is_seeded_and_off_in_evaluation() {
    let x = randn(&[2, 5, 8], 1);
    let kpm = Tensor::from_vec(
        &ScalarRefBackend,
        vec![0., 0., 0., 1., 1., 0., 0., 0., 0., 0.],
        [2, 5],
    )
    .unwrap();
    let reference = mha(true, 0.0)
        .forward_attention(&x, &x, &x, Some(AttentionMask::Block(&kpm)), None)
        .unwrap();
    // The explicit path (softmax, dropout) with a negligible p gives the fused result.
    let tiny = mha(true, 1e-12);
    tiny.seed_streams(3).unwrap();
    let y = tiny
        .forward_attention(&x, &x, &x, Some(AttentionMask::Block(&kpm)), None)
        .unwrap();
    close(&y, &reference, 1e-5);
    let half = mha(true, 0.5);
    half.seed_streams(11).unwrap();
    let a = half.forward(&x).unwrap();
    half.seed_streams(11).unwrap();
    let b = half.forward(&x).unwrap();
    close(&a, &b, 0.0);
    let c = half.forward(&x).unwrap();
    assert_ne!(a.to_vec().unwrap(), c.to_vec().unwrap());
    half.set_training(false);
    close(
        &half.forward(&x).unwrap(),
        &mha(true, 0.0).forward(&x).unwrap(),
        0.0,
    );
}

fn layer(norm_first: bool, dropout: f32) -> TransformerEncoderLayer<ScalarRefBackend> {
    let config = TransformerEncoderLayerConfig {
        dim_feedforward: 16,
        dropout,
        activation: FeedForwardActivation::Gelu,
        batch_first: true,
        norm_first,
        ..TransformerEncoderLayerConfig::new(8, 2)
    };
    TransformerEncoderLayer::new(&ScalarRefBackend, config, &mut Philox::new(6)).unwrap()
}

#[test]
fn encoder_layer_names_norms_and_dropout() {
    let post = layer(false, 0.0);
    let names: Vec<String> = post
        .named_parameters()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        names,
        [
            "self_attn.in_proj_weight",
            "self_attn.in_proj_bias",
            "self_attn.out_proj.weight",
            "self_attn.out_proj.bias",
            "linear1.weight",
            "linear1.bias",
            "linear2.weight",
            "linear2.bias",
            "norm1.weight",
            "norm1.bias",
            "norm2.weight",
            "norm2.bias"
        ]
    );
    let x = randn(&[2, 5, 8], 3);
    let y_post = post.forward(&x).unwrap();
    // Post-norm ends with a layer norm: rows have zero mean.
    for row in y_post.to_vec().unwrap().chunks(8) {
        assert!(row.iter().sum::<f32>().abs() < 1e-4);
    }
    let pre = layer(true, 0.0);
    let y_pre = pre.forward(&x).unwrap();
    assert_ne!(y_pre.to_vec().unwrap(), y_post.to_vec().unwrap());
    // Same weights (same seed) with dropout: seeded in training, identity in evaluation.
    let drop = layer(true, 0.3);
    drop.seed_streams(1).unwrap();
    let a = drop.forward(&x).unwrap();
    drop.seed_streams(1).unwrap();
    close(&drop.forward(&x).unwrap(), &a, 0.0);
    assert_ne!(a.to_vec().unwrap(), y_pre.to_vec().unwrap());
    drop.set_training(false);
    close(&drop.forward(&x).unwrap(), &y_pre, 0.0);
    // Gradients reach every parameter.
    post.forward(&x).unwrap().sum().unwrap().backward().unwrap();
    assert!(post.parameters().iter().all(|p| p.grad().is_some()));
    assert!(TransformerEncoderLayer::new(
        &ScalarRefBackend,
        TransformerEncoderLayerConfig::new(8, 3),
        &mut Philox::new(1)
    )
    .is_err());
}

/// The causal block `[L, S]` of PyTorch's `generate_square_subsequent_mask` as a boolean
/// (1 = not allowed) mask.
fn causal_block(l: usize) -> T {
    let v = (0..l)
        .flat_map(|i| (0..l).map(move |j| if j > i { 1.0 } else { 0.0 }))
        .collect();
    Tensor::from_vec(&ScalarRefBackend, v, [l, l]).unwrap()
}

fn encoder_config(norm_first: bool, dropout: f32) -> TransformerEncoderLayerConfig {
    TransformerEncoderLayerConfig {
        dim_feedforward: 12,
        dropout,
        activation: FeedForwardActivation::Gelu,
        batch_first: true,
        norm_first,
        ..TransformerEncoderLayerConfig::new(8, 2)
    }
}

#[test]
fn causal_layer_is_the_encoder_layer_with_a_causal_mask() {
    let b = ScalarRefBackend;
    for norm_first in [false, true] {
        let config = encoder_config(norm_first, 0.0);
        let causal = CausalTransformerLayer::new(&b, config, &mut Philox::new(7)).unwrap();
        let plain = TransformerEncoderLayer::new(&b, config, &mut Philox::new(7)).unwrap();
        // Same keys, streams and values as the encoder layer (PyTorch's composition).
        let names = |m: &dyn Module<ScalarRefBackend>| -> Vec<String> {
            m.named_parameters().into_iter().map(|(n, _)| n).collect()
        };
        assert_eq!(names(&causal), names(&plain));
        assert_eq!(
            causal.stream_names(),
            ["dropout_rng", "self_attn.dropout_rng"]
        );
        assert_eq!(causal.state_dict().unwrap(), plain.state_dict().unwrap());
        assert_eq!(causal.config(), config);
        let x = randn(&[2, 5, 8], 3);
        let mask = causal_block(5);
        let want = plain
            .forward_masked(&x, Some(AttentionMask::Block(&mask)), None)
            .unwrap();
        // The fused is_causal path gives the explicit mask's bits.
        let got = causal.forward(&x).unwrap();
        assert_eq!(got.to_vec().unwrap(), want.to_vec().unwrap());
        assert_eq!(
            Module::forward(&causal, &x).unwrap().to_vec().unwrap(),
            want.to_vec().unwrap()
        );
        // With a key padding mask the causal block is combined with it.
        let padding =
            Tensor::from_vec(&b, vec![0., 0., 0., 0., 0., 0., 0., 0., 1., 1.], [2, 5]).unwrap();
        let want = plain
            .forward_masked(
                &x,
                Some(AttentionMask::Block(&mask)),
                Some(AttentionMask::Block(&padding)),
            )
            .unwrap();
        let got = causal
            .forward_masked(&x, Some(AttentionMask::Block(&padding)))
            .unwrap();
        assert_eq!(got.to_vec().unwrap(), want.to_vec().unwrap());
    }
}

#[test]
fn causal_layer_does_not_look_ahead() {
    let b = ScalarRefBackend;
    let layer =
        CausalTransformerLayer::new(&b, encoder_config(true, 0.0), &mut Philox::new(2)).unwrap();
    let x = randn(&[1, 6, 8], 4);
    let y = layer.forward(&x).unwrap().to_vec().unwrap();
    // Changing position 3 changes no output before it.
    let mut v = x.to_vec().unwrap();
    for e in &mut v[3 * 8..4 * 8] {
        *e += 1.0;
    }
    let x2 = Tensor::from_vec(&b, v, [1, 6, 8]).unwrap();
    let y2 = layer.forward(&x2).unwrap().to_vec().unwrap();
    assert_eq!(y[..3 * 8], y2[..3 * 8]);
    assert_ne!(y[3 * 8..4 * 8], y2[3 * 8..4 * 8]);
    // Unbatched [L, E] input, as the encoder layer.
    let u = x.squeeze(0).unwrap();
    assert_eq!(layer.forward(&u).unwrap().to_vec().unwrap(), y);
}

#[test]
fn causal_layer_dropout_draws_from_its_streams() {
    let b = ScalarRefBackend;
    let config = encoder_config(false, 0.3);
    let causal = CausalTransformerLayer::new(&b, config, &mut Philox::new(5)).unwrap();
    let plain = TransformerEncoderLayer::new(&b, config, &mut Philox::new(5)).unwrap();
    let x = randn(&[2, 4, 8], 6);
    let err = causal.forward(&x).unwrap_err().to_string();
    assert!(err.contains("seed_streams"), "{err}");
    causal.seed_streams(11).unwrap();
    plain.seed_streams(11).unwrap();
    // Attention dropout takes the explicit path; the masks equal the encoder layer's.
    let mask = causal_block(4);
    let want = plain
        .forward_masked(&x, Some(AttentionMask::Block(&mask)), None)
        .unwrap();
    assert_eq!(
        causal.forward(&x).unwrap().to_vec().unwrap(),
        want.to_vec().unwrap()
    );
    causal.eval();
    assert!(!causal.is_training());
    plain.eval();
    assert_eq!(
        causal.forward(&x).unwrap().to_vec().unwrap(),
        plain
            .forward_masked(&x, Some(AttentionMask::Block(&mask)), None)
            .unwrap()
            .to_vec()
            .unwrap()
    );
}

#[test]
fn multihead_causal_attention_matches_the_block_mask() {
    for dropout in [0.0, 0.25] {
        let m = mha(true, dropout);
        m.seed_streams(3).unwrap();
        let twin = mha(true, dropout);
        twin.seed_streams(3).unwrap();
        let x = randn(&[2, 5, 8], 9);
        let mask = causal_block(5);
        let want = twin
            .forward_attention(&x, &x, &x, None, Some(AttentionMask::Block(&mask)))
            .unwrap();
        // With attention dropout (training) both draw the same masks from equal streams.
        let got = m.forward_causal(&x, &x, &x, None).unwrap();
        assert_eq!(got.to_vec().unwrap(), want.to_vec().unwrap());
    }
}
