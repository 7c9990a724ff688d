//! The reference models of the PyTorch oracle.
//!
//! `tools/autograd_oracle.py`, `tools/rnn_oracle.py` and `tools/models_oracle.py` build
//! these models in PyTorch 2.15.0 from seeded weights, run one forward and backward pass
//! and write weights, inputs, loss and every gradient to
//! `testdata/autograd/{conv_net,encoder,crnn,decoder,resnet,gpt}.safetensors`.
//! The same models are defined here so that the oracle tests, the `reproduce` example and
//! the benches build them identically:
//!
//! - [`ConvNet`]: `conv1 → bn1 → relu → max_pool2d(2) → conv2 → bn2 → relu →
//!   avg_pool2d(2) → adaptive_avg_pool2d(2, 2) → flatten → fc1 → relu → fc2`, with
//!   cross entropy (15 operators). The convolutions have biases although batch norms
//!   follow them, so those gradients are zero in theory.
//! - [`TransformerEncoder`]: `layers.0` (post-norm) and `layers.1` (pre-norm)
//!   [`TransformerEncoderLayer`](crate::TransformerEncoderLayer)s, batch first with GELU, then `norm` and a linear
//!   `head`, with cross entropy over the tokens that the key padding mask keeps.
//! - [`Crnn`]: `conv1 → relu → max_pool2d(2) → conv2 → relu → max_pool2d(2)`, the height
//!   collapsed into the features, a two-layer bidirectional [`Lstm`](crate::Lstm), a
//!   linear layer and `log_softmax`, with the mean CTC loss over targets of unequal
//!   lengths (a repeated label among them).
//! - [`Decoder`]: `conv → relu → deconv1` (a strided, grouped transposed convolution
//!   with output padding) `→ tanh → nearest → deconv2` (dilated, no bias) `→ leaky_relu
//!   → bilinear → bilinear (align_corners) → sigmoid`, with the mean squared error.
//! - [`ResNet`]: ResNet-18 in the CIFAR layout (a 3×3 stem without max pool, four
//!   stages of two [`BasicBlock`]s, global average pooling, a linear layer), with cross
//!   entropy; `tools/models_oracle.py` writes a small one to `resnet.safetensors`.
//! - [`Gpt`]: a GPT-style decoder (token and position embeddings, pre-norm blocks with
//!   causal self-attention, a final layer norm, a linear head), with cross entropy over
//!   every position; `tools/models_oracle.py` writes a small one to `gpt.safetensors`.
//!
//! [`ConvNetCase`], [`EncoderCase`], [`CrnnCase`], [`DecoderCase`], [`ResNetCase`] and
//! [`GptCase`] hold a model with its inputs; their [`ReferenceCase::forward_backward`]
//! runs one pass and returns every gradient, in the order the gradient hashes use:
//! parameters in `state_dict` order, then the input (for the four models whose input
//! takes a gradient). The decoder's pinned value is that of a short training run instead
//! ([`DecoderCase::train`]: the parameters after a few SGD steps); those of ResNet-18 and
//! the GPT-style decoder are of their benches' steps from seeded initial parameters
//! ([`ResNetCase::pinned`], [`GptCase::pinned`]).
//!
//! Files: this module holds the pinned hashes, [`Gradients`] and [`ReferenceCase`];
//! [`conv_net`] the conv net and its case, [`encoder`] the transformer encoder and its
//! case, [`crnn`] the CRNN and its case, [`decoder`] the decoder and its case, [`resnet`]
//! the ResNet and its case, [`gpt`] the GPT-style decoder and its case. The oracle files
//! are read with [`TensorFile`] and [`load_state_dict`] of [`crate::checkpoint`]
//! (re-exported here).
//!
//! ```
//! use exactgrad_backends::ScalarRefBackend;
//! use exactgrad_nn::reference::{ConvNetCase, ConvNetConfig, ReferenceCase};
//!
//! # fn main() -> exactgrad_nn::Result<()> {
//! let b = ScalarRefBackend;
//! let config = ConvNetConfig { c1: 4, c2: 8, hidden: 16, ..ConvNetConfig::default() };
//! let case = ConvNetCase::random(&b, config, 2, [8, 8], 7)?;
//! let step = case.forward_backward()?;
//! assert_eq!(step.gradients.last().unwrap().0, "input");
//! println!("loss {} hash {:#018x}", step.loss.item()?, step.hash()?);
//! # Ok(())
//! # }
//! ```

pub mod conv_net;
pub mod crnn;
pub mod decoder;
pub mod encoder;
pub mod gpt;
pub mod resnet;

pub use crate::checkpoint::{load_state_dict, TensorFile};
pub use conv_net::{ConvNet, ConvNetCase, ConvNetConfig};
pub use crnn::{Crnn, CrnnCase, CrnnConfig};
pub use decoder::{Decoder, DecoderCase, DecoderTraining};
pub use encoder::{EncoderCase, EncoderConfig, TransformerEncoder};
pub use gpt::{Gpt, GptCase, GptConfig};
pub use resnet::{BasicBlock, ResNet, ResNetCase, ResNetConfig};

use crate::error::Result;
use crate::module::{Module, ModuleExt};
use exactgrad_autograd::{hash_tensors, Tensor};
use exactgrad_core::Backend;
use std::fmt;

/// The exact-mode hashes of the reference cases, as `ScalarRefBackend` (the scalar
/// oracle of the arithmetic contract) computes them. Every exact path and thread count
/// must give these values.
///
/// - `conv_net`, `encoder`, `crnn`: the gradient hash ([`Gradients::hash`]) of
///   [`ConvNetCase::from_oracle`], [`EncoderCase::from_oracle`] and
///   [`CrnnCase::from_oracle`] on the files in `testdata/autograd/`; `decoder`: the
///   parameter hash after the training run of [`DecoderCase::from_oracle`]
///   ([`DecoderCase::train`]). The tests `tests/oracles/reference_models.rs` (conv net,
///   encoder), `tests/oracles/rnn_oracle.rs` (crnn) and `tests/oracles/decoder_oracle.rs` (decoder) pin
///   the same numbers.
/// - `resnet18`, `gpt`: the gradient hash of one pass of [`ResNetCase::pinned`] and
///   [`GptCase::pinned`] (ResNet-18 on 32 images of 3×32×32 and the GPT-style decoder
///   on 8 sequences of 128 tokens, from seeded initial parameters: the steps of
///   `benches/models.rs`). `ScalarRefBackend` needs minutes for them, so only the
///   `reproduce` example computes them (the tests pin the same models at a small size,
///   on PyTorch's weights: `RESNET_HASH` and `GPT_HASH` of `tests/oracles/reference_models.rs`).
///
/// The `reproduce` example checks a machine against all six.
pub const PINNED_HASHES: [(&str, u64); 6] = [
    ("conv_net", 0xa021_2c7f_3b4e_3698),
    ("encoder", 0x1215_42c7_8634_3692),
    ("crnn", 0x6671_5a90_3e97_922e),
    ("decoder", 0x683e_30cf_8bb1_ca11),
    ("resnet18", 0x7c4a_cc3a_face_30e0),
    ("gpt", 0x5410_af3f_dea1_4a59),
];

// ----- results ----------------------------------------------------------------------

/// The result of one forward and backward pass of a reference model.
pub struct Gradients<B: Backend> {
    /// The loss (one element).
    pub loss: Tensor<B>,
    /// The model's output.
    pub logits: Tensor<B>,
    /// Every parameter's gradient in `state_dict` order, then the input's (named
    /// `input`) for the models whose input takes a gradient (not [`ResNetCase`] and
    /// [`GptCase`]).
    pub gradients: Vec<(String, Tensor<B>)>,
}

impl<B: Backend> Gradients<B> {
    /// The gradient hash (see `docs/arithmetic.md`) of [`Gradients::gradients`], in order:
    /// the value the pinned hashes of the reference models are compared with.
    pub fn hash(&self) -> Result<u64> {
        let refs: Vec<&Tensor<B>> = self.gradients.iter().map(|(_, t)| t).collect();
        hash_tensors(&refs)
    }

    /// The gradient named `name` (`input` for the input's).
    pub fn get(&self, name: &str) -> Option<&Tensor<B>> {
        self.gradients
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t)
    }
}

impl<B: Backend> fmt::Debug for Gradients<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gradients")
            .field("loss", &self.loss.to_vec().ok())
            .field(
                "gradients",
                &self
                    .gradients
                    .iter()
                    .map(|(n, t)| (n.as_str(), t.dims().to_vec()))
                    .collect::<Vec<_>>(),
            )
            .field("hash", &self.hash().map(|h| format!("{h:#018x}")).ok())
            .finish()
    }
}

/// A reference model with its inputs.
pub trait ReferenceCase<B: Backend> {
    /// A short name (`conv_net`, `encoder`, `crnn`, `decoder`).
    fn name(&self) -> &'static str;

    /// The model's parameters in `state_dict` order (for an optimizer).
    fn parameters(&self) -> Vec<Tensor<B>>;

    /// Clears the gradients of the parameters and the input, runs the forward pass and
    /// the loss, and backward from the loss.
    fn forward_backward(&self) -> Result<Gradients<B>>;
}

/// The gradient of `t`, zeros when it has none.
fn grad_of<B: Backend>(t: &Tensor<B>) -> Result<Tensor<B>> {
    match t.grad() {
        Some(g) => Ok(g),
        None => Ok(Tensor::zeros(t.backend(), t.shape().clone())?),
    }
}

/// The parameters' gradients in `state_dict` order, then the input's.
fn collect<B: Backend>(
    model: &dyn Module<B>,
    input: &Tensor<B>,
    loss: Tensor<B>,
    logits: Tensor<B>,
) -> Result<Gradients<B>> {
    let mut step = collect_parameters(model, loss, logits)?;
    step.gradients.push(("input".to_string(), grad_of(input)?));
    Ok(step)
}

/// The parameters' gradients in `state_dict` order (a model whose input takes no
/// gradient: token indices, or images in ordinary training).
fn collect_parameters<B: Backend>(
    model: &dyn Module<B>,
    loss: Tensor<B>,
    logits: Tensor<B>,
) -> Result<Gradients<B>> {
    let gradients: Vec<(String, Tensor<B>)> = model
        .named_parameters()
        .into_iter()
        .map(|(n, t)| Ok((n, grad_of(&t)?)))
        .collect::<Result<_>>()?;
    Ok(Gradients {
        loss,
        logits,
        gradients,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use exactgrad_backends::ScalarRefBackend;
    use exactgrad_core::Philox;

    #[test]
    fn cases_repeat_their_gradients_and_name_them_in_order() {
        let b = ScalarRefBackend;
        let config = ConvNetConfig {
            c1: 4,
            c2: 6,
            hidden: 8,
            classes: 3,
            ..ConvNetConfig::default()
        };
        let conv = ConvNetCase::random(&b, config, 3, [8, 8], 1).unwrap();
        let (a, c) = (
            conv.forward_backward().unwrap(),
            conv.forward_backward().unwrap(),
        );
        assert_eq!(
            a.hash().unwrap(),
            c.hash().unwrap(),
            "gradients are cleared between passes"
        );
        let names: Vec<&str> = a.gradients.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names[..4],
            ["conv1.weight", "conv1.bias", "bn1.weight", "bn1.bias"]
        );
        assert_eq!(names.last(), Some(&"input"));
        assert_eq!(a.logits.dims(), [3, 3]);
        assert_eq!(conv.model.named_buffers().len(), 4);

        let config = EncoderConfig {
            d_model: 8,
            nhead: 2,
            dim_feedforward: 12,
            classes: 5,
        };
        let enc = EncoderCase::random(&b, config, 2, 6, 2).unwrap();
        let g = enc.forward_backward().unwrap();
        assert_eq!(
            g.hash().unwrap(),
            enc.forward_backward().unwrap().hash().unwrap()
        );
        assert_eq!(g.logits.dims(), [2, 6, 5]);
        assert_eq!(g.gradients.len(), 2 * 12 + 4 + 1);
        // Sequence 1 has 6 − 1·6/(2·2) = 5 tokens.
        assert_eq!(
            enc.key_padding_mask.to_vec().unwrap()[6..],
            [0., 0., 0., 0., 0., 1.]
        );
        assert_eq!(enc.targets[11], -100);
        assert!(enc.targets[..11].iter().all(|&t| (0..5).contains(&t)));
        assert!(g.get("layers.1.norm2.bias").is_some());
        assert!(format!("{g:?}").contains("hash"));
    }

    #[test]
    fn resnet_layout_and_bad_input() {
        let b = ScalarRefBackend;
        let config = ResNetConfig {
            widths: [2, 4, 4, 6],
            blocks: [2, 1, 1, 1],
            classes: 3,
            ..ResNetConfig::default()
        };
        let case = ResNetCase::random(&b, config, 2, [8, 8], 1).unwrap();
        let names: Vec<String> = case
            .model
            .named_parameters()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        // Stage 1 keeps its width and stride (no shortcut); the first block of every
        // later stage has stride 2 and a shortcut; 2 stem + 5 blocks' (6 or 9) + 2 fc.
        assert!(!names.iter().any(|n| n.starts_with("layer1.0.downsample")));
        assert!(names.contains(&"layer3.0.downsample.0.weight".to_string()));
        assert!(names.contains(&"layer4.0.downsample.1.bias".to_string()));
        assert!(!names.iter().any(|n| n.ends_with("conv1.bias")));
        assert_eq!(names.len(), 3 + 2 * 6 + 3 * 9 + 2);
        let step = case.forward_backward().unwrap();
        assert_eq!(step.logits.dims(), [2, 3]);
        assert_eq!(step.gradients.len(), names.len(), "no input gradient");
        assert_eq!(
            step.hash().unwrap(),
            case.forward_backward().unwrap().hash().unwrap()
        );
        let zero = ResNetConfig {
            blocks: [2, 0, 2, 2],
            ..ResNetConfig::default()
        };
        assert!(ResNet::new(&b, zero, &mut Philox::new(0))
            .unwrap_err()
            .to_string()
            .contains("positive"));
        // ResNet-18 itself: 11 173 962 parameters, as torchvision's CIFAR variants.
        let full = ResNet::new(&b, ResNetConfig::default(), &mut Philox::new(0)).unwrap();
        assert_eq!(full.num_parameters(), 11_173_962);
    }

    #[test]
    fn gpt_is_causal_and_refuses_bad_tokens() {
        let b = ScalarRefBackend;
        let config = GptConfig {
            vocab: 7,
            context: 5,
            d_model: 8,
            nhead: 2,
            layers: 2,
            dim_feedforward: 12,
        };
        let case = GptCase::random(&b, config, 2, 4, 3).unwrap();
        assert_eq!(
            case.tokens[1..4],
            case.targets[..3],
            "targets are the next tokens"
        );
        let step = case.forward_backward().unwrap();
        assert_eq!(step.logits.dims(), [2, 4, 7]);
        assert_eq!(step.gradients[0].0, "tok_emb.weight");
        assert_eq!(step.gradients.last().unwrap().0, "head.weight");
        // Causal: changing the last token changes no earlier position's logits.
        let model = &case.model;
        let a = model.forward_tokens(&[1, 2, 3, 4], [1, 4]).unwrap();
        let c = model.forward_tokens(&[1, 2, 3, 6], [1, 4]).unwrap();
        let (a, c) = (a.to_vec().unwrap(), c.to_vec().unwrap());
        assert_eq!(a[..21], c[..21]);
        assert_ne!(a[21..], c[21..]);
        // A token tensor goes through Module::forward.
        let t = Tensor::from_vec(&b, vec![1.0, 2.0, 3.0, 4.0], [1, 4]).unwrap();
        assert_eq!(model.forward(&t).unwrap().to_vec().unwrap(), a);
        let long = model
            .forward_tokens(&[0; 6], [1, 6])
            .unwrap_err()
            .to_string();
        assert!(long.contains("1 to 5 tokens"), "{long}");
        assert!(
            model.forward_tokens(&[0, 7], [1, 2]).is_err(),
            "token 7 of 7"
        );
        let half = Tensor::from_vec(&b, vec![0.5, 1.0], [1, 2]).unwrap();
        assert!(model
            .forward(&half)
            .unwrap_err()
            .to_string()
            .contains("whole-number"));
        let flat = Tensor::from_vec(&b, vec![0.0, 1.0], [2]).unwrap();
        assert!(model.forward(&flat).is_err());
        let none = GptConfig {
            layers: 0,
            ..config
        };
        assert!(Gpt::new(&b, none, &mut Philox::new(0)).is_err());
    }
}
