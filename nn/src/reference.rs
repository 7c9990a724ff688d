//! The two reference models of the PyTorch oracle, and loading weights from
//! safetensors.
//!
//! `tools/autograd_oracle.py` builds these models in PyTorch 2.15.0 from seeded weights,
//! runs one forward and backward pass and writes weights, inputs, loss and every
//! gradient to `testdata/autograd/{conv_net,encoder}.safetensors`. The same models are
//! defined here so that the oracle test, the `reproduce` example and the benches build
//! them identically:
//!
//! - [`ConvNet`]: `conv1 → bn1 → relu → max_pool2d(2) → conv2 → bn2 → relu →
//!   avg_pool2d(2) → adaptive_avg_pool2d(2, 2) → flatten → fc1 → relu → fc2`, with
//!   cross entropy (15 operators). The convolutions have biases although batch norms
//!   follow them, so those gradients are zero in theory.
//! - [`TransformerEncoder`]: `layers.0` (post-norm) and `layers.1` (pre-norm)
//!   [`TransformerEncoderLayer`]s, batch first with GELU, then `norm` and a linear
//!   `head`, with cross entropy over the tokens that the key padding mask keeps.
//!
//! [`ConvNetCase`] and [`EncoderCase`] hold a model with its inputs; their
//! [`ReferenceCase::forward_backward`] runs one pass and returns every gradient, in the
//! order the pinned hashes use: parameters in `state_dict` order, then the input.
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
//! println!("loss {} hash {:#018x}", step.loss.item()?, step.hash());
//! # Ok(())
//! # }
//! ```

use crate::attention::{
    FeedForwardActivation, TransformerEncoderLayer, TransformerEncoderLayerConfig,
};
use crate::conv::Conv2d;
use crate::error::{DataError, Error, Result};
use crate::linear::Linear;
use crate::module::{join_name, Module};
use crate::norm::{BatchNorm2d, LayerNorm};
use exactgrad_autograd::{
    hash_tensors, no_grad, AvgPool2dOptions, Conv2dOptions, CrossEntropyOptions, MaxPool2dOptions,
    Tensor,
};
use exactgrad_core::{Backend, Philox};
use safetensors::{Dtype, SafeTensors};
use std::collections::BTreeMap;
use std::fmt;

/// The exact-mode gradient hashes of the oracle cases ([`ConvNetCase::from_oracle`] and
/// [`EncoderCase::from_oracle`] on the files in `testdata/autograd/`), as
/// [`Gradients::hash`] computes them on `ScalarRefBackend`, the scalar oracle of the
/// arithmetic contract. Every exact path and thread count must give these values; the
/// test `tests/reference_models.rs` pins the same numbers and the `reproduce` example
/// checks a machine against them.
pub const PINNED_HASHES: [(&str, u64); 2] = [
    ("conv_net", 0xa021_2c7f_3b4e_3698),
    ("encoder", 0x1215_42c7_8634_3692),
];

// ----- safetensors ------------------------------------------------------------------

/// The tensors and metadata of a safetensors file, decoded: `F32` tensors as `f32`,
/// integer (`I64`, `I32`, `U8`) and `BOOL` tensors as `i64`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TensorFile {
    floats: BTreeMap<String, (Vec<usize>, Vec<f32>)>,
    ints: BTreeMap<String, (Vec<usize>, Vec<i64>)>,
    metadata: BTreeMap<String, String>,
}

fn file_error(message: impl Into<String>) -> Error {
    Error::Data(DataError::BadHeader {
        format: "safetensors",
        message: message.into(),
    })
}

impl TensorFile {
    /// Decodes the bytes of a safetensors file.
    ///
    /// Fails when the bytes are not a valid safetensors file or hold a tensor of
    /// another element type.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let st = SafeTensors::deserialize(bytes).map_err(|e| file_error(e.to_string()))?;
        let (_, meta) = SafeTensors::read_metadata(bytes).map_err(|e| file_error(e.to_string()))?;
        let mut out = TensorFile::default();
        if let Some(m) = meta.metadata() {
            out.metadata = m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        }
        for (name, view) in st.tensors() {
            let shape = view.shape().to_vec();
            let data = view.data();
            match view.dtype() {
                Dtype::F32 => {
                    let v = data
                        .chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .collect();
                    out.floats.insert(name, (shape, v));
                }
                Dtype::I64 => {
                    let v = data
                        .chunks_exact(8)
                        .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
                        .collect();
                    out.ints.insert(name, (shape, v));
                }
                Dtype::I32 => {
                    let v = data
                        .chunks_exact(4)
                        .map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                        .collect();
                    out.ints.insert(name, (shape, v));
                }
                Dtype::U8 | Dtype::BOOL => {
                    let v = data.iter().map(|&b| i64::from(b)).collect();
                    out.ints.insert(name, (shape, v));
                }
                other => {
                    return Err(file_error(format!(
                        "tensor `{name}` has element type {other:?}; F32, I64, I32, U8 and BOOL are read"
                    )))
                }
            }
        }
        Ok(out)
    }

    /// The names of all tensors, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self
            .floats
            .keys()
            .chain(self.ints.keys())
            .map(String::as_str)
            .collect();
        v.sort_unstable();
        v
    }

    /// A `__metadata__` entry.
    pub fn metadata(&self, key: &str) -> Option<&str> {
        self.metadata.get(key).map(String::as_str)
    }

    /// A `__metadata__` entry parsed as an unsigned integer.
    pub fn metadata_usize(&self, key: &str) -> Result<usize> {
        let v = self
            .metadata(key)
            .ok_or_else(|| file_error(format!("metadata entry `{key}` is missing")))?;
        v.parse().map_err(|_| {
            file_error(format!(
                "metadata entry `{key}` = `{v}` is not an unsigned integer"
            ))
        })
    }

    /// The shape and values of the float tensor `name`.
    pub fn floats(&self, name: &str) -> Result<(&[usize], &[f32])> {
        self.floats
            .get(name)
            .map(|(s, v)| (s.as_slice(), v.as_slice()))
            .ok_or_else(|| file_error(format!("no float tensor named `{name}`")))
    }

    /// The shape and values of the integer or boolean tensor `name`.
    pub fn ints(&self, name: &str) -> Result<(&[usize], &[i64])> {
        self.ints
            .get(name)
            .map(|(s, v)| (s.as_slice(), v.as_slice()))
            .ok_or_else(|| file_error(format!("no integer tensor named `{name}`")))
    }

    /// The float tensor `name` on `backend`.
    pub fn tensor<B: Backend>(&self, backend: &B, name: &str) -> Result<Tensor<B>> {
        let (shape, values) = self.floats(name)?;
        Ok(Tensor::from_slice(backend, values, shape)?)
    }
}

/// Copies the values of every parameter and buffer of `module` from the float tensor
/// named `prefix` + its `state_dict` name (PyTorch's `load_state_dict(strict=True)`
/// for the module's entries; other tensors in the file are ignored).
///
/// Fails, before changing anything, when an entry is missing or has another shape.
pub fn load_state_dict<B: Backend, M: Module<B> + ?Sized>(
    module: &M,
    file: &TensorFile,
    prefix: &str,
) -> Result<()> {
    let mut entries = module.named_parameters();
    entries.extend(module.named_buffers());
    let mut values = Vec::with_capacity(entries.len());
    for (name, t) in &entries {
        let key = format!("{prefix}{name}");
        let (shape, v) = file.floats(&key).map_err(|_| {
            Error::invalid(
                "load_state_dict",
                "state_dict",
                format!("no entry `{key}` for `{name}` of shape {:?}", t.dims()),
            )
        })?;
        if shape != t.dims() {
            return Err(Error::invalid(
                "load_state_dict",
                "state_dict",
                format!(
                    "entry `{key}` has shape {shape:?}, `{name}` has shape {:?}",
                    t.dims()
                ),
            ));
        }
        values.push(v);
    }
    let backend = match entries.first() {
        Some((_, t)) => t.backend().clone(),
        None => return Ok(()),
    };
    let _guard = no_grad();
    for ((_, t), v) in entries.iter().zip(values) {
        t.copy_(&Tensor::from_slice(&backend, v, t.dims())?)?;
    }
    Ok(())
}

// ----- results ----------------------------------------------------------------------

/// The result of one forward and backward pass of a reference model.
pub struct Gradients<B: Backend> {
    /// The loss (one element).
    pub loss: Tensor<B>,
    /// The model's output.
    pub logits: Tensor<B>,
    /// Every parameter's gradient in `state_dict` order, then the input's (named
    /// `input`).
    pub gradients: Vec<(String, Tensor<B>)>,
}

impl<B: Backend> Gradients<B> {
    /// The gradient hash (see `docs/arithmetic.md`) of [`Gradients::gradients`], in order:
    /// the value the pinned hashes of the reference models are compared with.
    pub fn hash(&self) -> u64 {
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
            .field("loss", &self.loss.to_vec())
            .field(
                "gradients",
                &self
                    .gradients
                    .iter()
                    .map(|(n, t)| (n.as_str(), t.dims().to_vec()))
                    .collect::<Vec<_>>(),
            )
            .field("hash", &format_args!("{:#018x}", self.hash()))
            .finish()
    }
}

/// A reference model with its inputs.
pub trait ReferenceCase<B: Backend> {
    /// A short name (`conv_net`, `encoder`).
    fn name(&self) -> &'static str;

    /// The model's parameters in `state_dict` order (for an optimizer).
    fn parameters(&self) -> Vec<Tensor<B>>;

    /// Clears the gradients of the parameters and the input, runs the forward pass and
    /// the loss, and backward from the loss.
    fn forward_backward(&self) -> Result<Gradients<B>>;
}

fn collect<B: Backend>(
    model: &dyn Module<B>,
    input: &Tensor<B>,
    loss: Tensor<B>,
    logits: Tensor<B>,
) -> Gradients<B> {
    let grad_of = |t: &Tensor<B>| {
        t.grad()
            .unwrap_or_else(|| Tensor::zeros(t.backend(), t.shape().clone()))
    };
    let mut gradients: Vec<(String, Tensor<B>)> = model
        .named_parameters()
        .into_iter()
        .map(|(n, t)| {
            let g = grad_of(&t);
            (n, g)
        })
        .collect();
    gradients.push(("input".to_string(), grad_of(input)));
    Gradients {
        loss,
        logits,
        gradients,
    }
}

fn leaf<B: Backend>(t: Tensor<B>) -> Tensor<B> {
    t.requires_grad()
        .expect("a freshly created tensor is a leaf")
}

// ----- the conv net -----------------------------------------------------------------

/// Sizes of [`ConvNet`]; the default is the oracle's model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvNetConfig {
    /// Input channels (3).
    pub in_channels: usize,
    /// Channels of the first convolution (16).
    pub c1: usize,
    /// Channels of the second convolution (32).
    pub c2: usize,
    /// Width of the hidden linear layer (64).
    pub hidden: usize,
    /// Number of classes (10).
    pub classes: usize,
}

impl Default for ConvNetConfig {
    fn default() -> Self {
        Self {
            in_channels: 3,
            c1: 16,
            c2: 32,
            hidden: 64,
            classes: 10,
        }
    }
}

/// The reference conv net (see the module documentation); parameters `conv1.*`,
/// `bn1.*`, `conv2.*`, `bn2.*`, `fc1.*`, `fc2.*`, buffers `bn1.running_*` and
/// `bn2.running_*`. Inputs are `[N, C, H, W]` with `H` and `W` at least 4.
pub struct ConvNet<B: Backend> {
    conv1: Conv2d<B>,
    bn1: BatchNorm2d<B>,
    conv2: Conv2d<B>,
    bn2: BatchNorm2d<B>,
    fc1: Linear<B>,
    fc2: Linear<B>,
    config: ConvNetConfig,
}

impl<B: Backend> ConvNet<B> {
    /// A model initialised as PyTorch initialises its layers, drawing `conv1`, `conv2`,
    /// `fc1` and `fc2` in that order from `rng`.
    ///
    /// Fails when a size is 0.
    pub fn new(backend: &B, config: ConvNetConfig, rng: &mut Philox) -> Result<Self> {
        let pad1 = Conv2dOptions {
            padding: [1, 1],
            ..Conv2dOptions::default()
        };
        let conv1 = Conv2d::with_options(
            backend,
            config.in_channels,
            config.c1,
            [3, 3],
            pad1,
            true,
            rng,
        )?;
        let conv2 = Conv2d::with_options(backend, config.c1, config.c2, [3, 3], pad1, true, rng)?;
        if config.hidden == 0 || config.classes == 0 {
            return Err(Error::invalid(
                "ConvNet::new",
                "config",
                format!("hidden and classes must be positive, got {config:?}"),
            ));
        }
        let fc1 = Linear::new(backend, config.c2 * 4, config.hidden, rng);
        let fc2 = Linear::new(backend, config.hidden, config.classes, rng);
        Ok(Self {
            conv1,
            bn1: BatchNorm2d::new(backend, config.c1),
            conv2,
            bn2: BatchNorm2d::new(backend, config.c2),
            fc1,
            fc2,
            config,
        })
    }

    /// The sizes.
    pub fn config(&self) -> ConvNetConfig {
        self.config
    }

    /// The mean cross entropy of the logits of `input` against `targets` (one class per
    /// image).
    pub fn loss(&self, input: &Tensor<B>, targets: &[i64]) -> Result<Tensor<B>> {
        let logits = self.forward(input)?;
        Ok(logits.cross_entropy(targets, CrossEntropyOptions::default())?)
    }
}

impl<B: Backend> Module<B> for ConvNet<B> {
    /// The logits `[N, classes]` of `input` `[N, C, H, W]`.
    fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        let x = self.bn1.forward(&self.conv1.forward(input)?)?.relu()?;
        let x = x.max_pool2d(MaxPool2dOptions::new([2, 2]))?;
        let x = self.bn2.forward(&self.conv2.forward(&x)?)?.relu()?;
        let x = x.avg_pool2d(AvgPool2dOptions::new([2, 2]))?;
        let x = x.adaptive_avg_pool2d([2, 2])?.flatten(1, -1)?;
        let x = self.fc1.forward(&x)?.relu()?;
        self.fc2.forward(&x)
    }

    fn visit_parameters(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor<B>)) {
        self.conv1.visit_parameters(&join_name(prefix, "conv1"), f);
        self.bn1.visit_parameters(&join_name(prefix, "bn1"), f);
        self.conv2.visit_parameters(&join_name(prefix, "conv2"), f);
        self.bn2.visit_parameters(&join_name(prefix, "bn2"), f);
        self.fc1.visit_parameters(&join_name(prefix, "fc1"), f);
        self.fc2.visit_parameters(&join_name(prefix, "fc2"), f);
    }

    fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor<B>)) {
        self.bn1.visit_buffers(&join_name(prefix, "bn1"), f);
        self.bn2.visit_buffers(&join_name(prefix, "bn2"), f);
    }

    fn set_training(&mut self, training: bool) {
        self.bn1.set_training(training);
        self.bn2.set_training(training);
    }
}

impl<B: Backend> fmt::Debug for ConvNet<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConvNet")
            .field("conv1", &self.conv1)
            .field("bn1", &self.bn1)
            .field("conv2", &self.conv2)
            .field("bn2", &self.bn2)
            .field("fc1", &self.fc1)
            .field("fc2", &self.fc2)
            .finish()
    }
}

/// A [`ConvNet`] with a batch of images and their classes.
pub struct ConvNetCase<B: Backend> {
    /// The model (in training mode).
    pub model: ConvNet<B>,
    /// The images `[N, C, H, W]`, a leaf that requires grad.
    pub input: Tensor<B>,
    /// One class per image.
    pub targets: Vec<i64>,
}

impl<B: Backend> ConvNetCase<B> {
    /// The oracle's case from the bytes of `conv_net.safetensors`: sizes from the
    /// metadata, parameters and buffers from `init/…`, the input from `input/x` and the
    /// classes from `input/targets`.
    pub fn from_oracle(backend: &B, bytes: &[u8]) -> Result<Self> {
        Self::from_file(backend, &TensorFile::from_bytes(bytes)?)
    }

    /// As [`ConvNetCase::from_oracle`], from a decoded file.
    pub fn from_file(backend: &B, file: &TensorFile) -> Result<Self> {
        let config = ConvNetConfig {
            in_channels: file.metadata_usize("c_in")?,
            c1: file.metadata_usize("c1")?,
            c2: file.metadata_usize("c2")?,
            hidden: file.metadata_usize("hidden")?,
            classes: file.metadata_usize("classes")?,
        };
        let model = ConvNet::new(backend, config, &mut Philox::new(0))?;
        load_state_dict(&model, file, "init/")?;
        Ok(Self {
            model,
            input: leaf(file.tensor(backend, "input/x")?),
            targets: file.ints("input/targets")?.1.to_vec(),
        })
    }

    /// A model initialised from `Philox::new(seed)` with a batch of `batch` standard
    /// normal images of size `hw` and classes from the same stream (for benches).
    pub fn random(
        backend: &B,
        config: ConvNetConfig,
        batch: usize,
        hw: [usize; 2],
        seed: u64,
    ) -> Result<Self> {
        let mut rng = Philox::new(seed);
        let model = ConvNet::new(backend, config, &mut rng)?;
        let input = leaf(Tensor::randn(
            backend,
            [batch, config.in_channels, hw[0], hw[1]],
            0.0,
            1.0,
            &mut rng,
        ));
        let targets = (0..batch)
            .map(|_| i64::from(rng.below(config.classes as u32)))
            .collect();
        Ok(Self {
            model,
            input,
            targets,
        })
    }
}

impl<B: Backend> ReferenceCase<B> for ConvNetCase<B> {
    fn name(&self) -> &'static str {
        "conv_net"
    }

    fn parameters(&self) -> Vec<Tensor<B>> {
        self.model.parameters()
    }

    fn forward_backward(&self) -> Result<Gradients<B>> {
        self.model.clear_grad();
        self.input.clear_grad();
        let logits = self.model.forward(&self.input)?;
        let loss = logits.cross_entropy(&self.targets, CrossEntropyOptions::default())?;
        loss.backward(None, false)?;
        Ok(collect(&self.model, &self.input, loss, logits))
    }
}

// ----- the transformer encoder ------------------------------------------------------

/// Sizes of [`TransformerEncoder`]; the default is the oracle's model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EncoderConfig {
    /// Model width (32).
    pub d_model: usize,
    /// Attention heads (4).
    pub nhead: usize,
    /// Feed-forward width (64).
    pub dim_feedforward: usize,
    /// Number of token classes (8).
    pub classes: usize,
}

impl Default for EncoderConfig {
    fn default() -> Self {
        Self {
            d_model: 32,
            nhead: 4,
            dim_feedforward: 64,
            classes: 8,
        }
    }
}

/// The reference transformer encoder (see the module documentation): parameters
/// `layers.0.*` (post-norm), `layers.1.*` (pre-norm), `norm.*`, `head.*`. Batch first,
/// GELU, dropout 0.
pub struct TransformerEncoder<B: Backend> {
    layers: Vec<TransformerEncoderLayer<B>>,
    norm: LayerNorm<B>,
    head: Linear<B>,
    config: EncoderConfig,
}

impl<B: Backend> TransformerEncoder<B> {
    /// A model initialised from `rng`: `layers.0`, `layers.1` (see
    /// [`TransformerEncoderLayer::new`]), then `head`.
    ///
    /// Fails when a size is 0 or `nhead` does not divide `d_model`.
    pub fn new(backend: &B, config: EncoderConfig, rng: &mut Philox) -> Result<Self> {
        let layers = [false, true]
            .into_iter()
            .map(|norm_first| {
                TransformerEncoderLayer::new(
                    backend,
                    TransformerEncoderLayerConfig {
                        dim_feedforward: config.dim_feedforward,
                        dropout: 0.0,
                        activation: FeedForwardActivation::Gelu,
                        batch_first: true,
                        norm_first,
                        ..TransformerEncoderLayerConfig::new(config.d_model, config.nhead)
                    },
                    rng,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        if config.classes == 0 {
            return Err(Error::invalid(
                "TransformerEncoder::new",
                "config",
                "classes must be positive",
            ));
        }
        Ok(Self {
            layers,
            norm: LayerNorm::new(backend, &[config.d_model])?,
            head: Linear::new(backend, config.d_model, config.classes, rng),
            config,
        })
    }

    /// The sizes.
    pub fn config(&self) -> EncoderConfig {
        self.config
    }

    /// The encoder layers.
    pub fn layers(&self) -> &[TransformerEncoderLayer<B>] {
        &self.layers
    }

    /// The logits `[N, S, classes]` of `input` `[N, S, d_model]`; `key_padding_mask`
    /// `[N, S]` is non-zero at padded positions, which attention ignores.
    pub fn forward_masked(
        &self,
        input: &Tensor<B>,
        key_padding_mask: Option<&Tensor<B>>,
    ) -> Result<Tensor<B>> {
        let mut x = input.clone();
        for layer in &self.layers {
            x = layer.forward_masked(&x, None, key_padding_mask)?;
        }
        self.head.forward(&self.norm.forward(&x)?)
    }
}

impl<B: Backend> Module<B> for TransformerEncoder<B> {
    /// [`TransformerEncoder::forward_masked`] without a mask.
    fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        self.forward_masked(input, None)
    }

    fn visit_parameters(&self, prefix: &str, f: &mut dyn FnMut(&str, &Tensor<B>)) {
        let layers = join_name(prefix, "layers");
        for (i, layer) in self.layers.iter().enumerate() {
            layer.visit_parameters(&join_name(&layers, &i.to_string()), f);
        }
        self.norm.visit_parameters(&join_name(prefix, "norm"), f);
        self.head.visit_parameters(&join_name(prefix, "head"), f);
    }

    fn set_training(&mut self, training: bool) {
        for layer in &mut self.layers {
            layer.set_training(training);
        }
    }
}

impl<B: Backend> fmt::Debug for TransformerEncoder<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransformerEncoder")
            .field("layers", &self.layers)
            .field("norm", &self.norm)
            .field("head", &self.head)
            .finish()
    }
}

/// A [`TransformerEncoder`] with a batch of sequences, their padding and token classes.
pub struct EncoderCase<B: Backend> {
    /// The model (in training mode).
    pub model: TransformerEncoder<B>,
    /// The sequences `[N, S, d_model]`, a leaf that requires grad.
    pub input: Tensor<B>,
    /// `[N, S]`, 1 at padded positions.
    pub key_padding_mask: Tensor<B>,
    /// One class per token, row-major `[N, S]`; −100 (ignored) at padded positions.
    pub targets: Vec<i64>,
}

impl<B: Backend> EncoderCase<B> {
    /// The oracle's case from the bytes of `encoder.safetensors`: sizes from the
    /// metadata, parameters from `init/…`, the input from `input/x`, the padding from
    /// `input/key_padding_mask` and the classes from `input/targets`.
    pub fn from_oracle(backend: &B, bytes: &[u8]) -> Result<Self> {
        Self::from_file(backend, &TensorFile::from_bytes(bytes)?)
    }

    /// As [`EncoderCase::from_oracle`], from a decoded file.
    pub fn from_file(backend: &B, file: &TensorFile) -> Result<Self> {
        let config = EncoderConfig {
            d_model: file.metadata_usize("d_model")?,
            nhead: file.metadata_usize("nhead")?,
            dim_feedforward: file.metadata_usize("dim_feedforward")?,
            classes: file.metadata_usize("classes")?,
        };
        let model = TransformerEncoder::new(backend, config, &mut Philox::new(0))?;
        load_state_dict(&model, file, "init/")?;
        let (mshape, mask) = file.ints("input/key_padding_mask")?;
        let mask: Vec<f32> = mask.iter().map(|&m| (m != 0) as u8 as f32).collect();
        Ok(Self {
            model,
            input: leaf(file.tensor(backend, "input/x")?),
            key_padding_mask: Tensor::from_vec(backend, mask, mshape)?,
            targets: file.ints("input/targets")?.1.to_vec(),
        })
    }

    /// A model initialised from `Philox::new(seed)`, with `batch` standard normal
    /// sequences of length `seq`; sequence `i` is padded after
    /// `seq − (i · seq / (2 · batch))` tokens, and classes are drawn from the same
    /// stream (for benches).
    pub fn random(
        backend: &B,
        config: EncoderConfig,
        batch: usize,
        seq: usize,
        seed: u64,
    ) -> Result<Self> {
        let mut rng = Philox::new(seed);
        let model = TransformerEncoder::new(backend, config, &mut rng)?;
        let input = leaf(Tensor::randn(
            backend,
            [batch, seq, config.d_model],
            0.0,
            1.0,
            &mut rng,
        ));
        let mut mask = Vec::with_capacity(batch * seq);
        let mut targets = Vec::with_capacity(batch * seq);
        for i in 0..batch {
            let len = seq - i * seq / (2 * batch.max(1));
            for j in 0..seq {
                mask.push(if j < len { 0.0 } else { 1.0 });
                targets.push(if j < len {
                    i64::from(rng.below(config.classes as u32))
                } else {
                    -100
                });
            }
        }
        Ok(Self {
            model,
            input,
            key_padding_mask: Tensor::from_vec(backend, mask, [batch, seq])?,
            targets,
        })
    }
}

impl<B: Backend> ReferenceCase<B> for EncoderCase<B> {
    fn name(&self) -> &'static str {
        "encoder"
    }

    fn parameters(&self) -> Vec<Tensor<B>> {
        self.model.parameters()
    }

    fn forward_backward(&self) -> Result<Gradients<B>> {
        self.model.clear_grad();
        self.input.clear_grad();
        let logits = self
            .model
            .forward_masked(&self.input, Some(&self.key_padding_mask))?;
        let classes = self.model.config().classes as isize;
        let loss = logits
            .reshape(&[-1, classes])?
            .cross_entropy(&self.targets, CrossEntropyOptions::default())?;
        loss.backward(None, false)?;
        Ok(collect(&self.model, &self.input, loss, logits))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use exactgrad_backends::ScalarRefBackend;
    use safetensors::tensor::TensorView;
    use std::collections::HashMap;

    /// A safetensors file holding `tensors` (all F32) and one metadata entry.
    fn file(tensors: &[(&str, Vec<usize>, Vec<f32>)]) -> Vec<u8> {
        let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
            .iter()
            .map(|(n, s, v)| {
                (
                    n.to_string(),
                    s.clone(),
                    v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                )
            })
            .collect();
        let views: Vec<(String, TensorView<'_>)> = bytes
            .iter()
            .map(|(n, s, b)| {
                (
                    n.clone(),
                    TensorView::new(Dtype::F32, s.clone(), b).unwrap(),
                )
            })
            .collect();
        let meta = HashMap::from([("answer".to_string(), "42".to_string())]);
        safetensors::serialize(views, Some(meta)).unwrap()
    }

    #[test]
    fn tensor_file_reads_tensors_and_metadata() {
        let bytes = file(&[
            ("a", vec![2, 2], vec![1., 2., 3., 4.]),
            ("b", vec![1], vec![5.]),
        ]);
        let f = TensorFile::from_bytes(&bytes).unwrap();
        assert_eq!(f.names(), ["a", "b"]);
        assert_eq!(
            f.floats("a").unwrap(),
            (&[2usize, 2][..], &[1f32, 2., 3., 4.][..])
        );
        assert_eq!(f.metadata_usize("answer").unwrap(), 42);
        assert!(f.metadata_usize("missing").is_err());
        assert!(f.ints("a").is_err());
        assert_eq!(f.tensor(&ScalarRefBackend, "b").unwrap().to_vec(), [5.0]);
        assert!(TensorFile::from_bytes(&bytes[..bytes.len() - 3]).is_err());
        assert!(TensorFile::from_bytes(b"not a file").is_err());
    }

    #[test]
    fn load_state_dict_copies_or_fails_before_changing_anything() {
        let b = ScalarRefBackend;
        let lin = Linear::new(&b, 2, 1, &mut Philox::new(1));
        let before = lin.weight().to_vec();
        let f = TensorFile::from_bytes(&file(&[
            ("m.weight", vec![1, 2], vec![7., 8.]),
            ("m.bias", vec![1], vec![9.]),
        ]))
        .unwrap();
        load_state_dict(&lin, &f, "m.").unwrap();
        assert_eq!(lin.weight().to_vec(), [7., 8.]);
        assert_eq!(lin.bias().unwrap().to_vec(), [9.]);
        assert!(lin.weight().is_requires_grad());

        let lin = Linear::new(&b, 2, 1, &mut Philox::new(1));
        let missing =
            TensorFile::from_bytes(&file(&[("weight", vec![1, 2], vec![7., 8.])])).unwrap();
        let err = load_state_dict(&lin, &missing, "").unwrap_err();
        assert!(err.to_string().contains("no entry `bias`"), "{err}");
        assert_eq!(lin.weight().to_vec(), before);
        let wrong = TensorFile::from_bytes(&file(&[
            ("weight", vec![2, 1], vec![7., 8.]),
            ("bias", vec![1], vec![9.]),
        ]))
        .unwrap();
        let err = load_state_dict(&lin, &wrong, "").unwrap_err();
        assert!(err.to_string().contains("has shape [2, 1]"), "{err}");
    }

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
        assert_eq!(a.hash(), c.hash(), "gradients are cleared between passes");
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
        assert_eq!(g.hash(), enc.forward_backward().unwrap().hash());
        assert_eq!(g.logits.dims(), [2, 6, 5]);
        assert_eq!(g.gradients.len(), 2 * 12 + 4 + 1);
        // Sequence 1 has 6 − 1·6/(2·2) = 5 tokens.
        assert_eq!(enc.key_padding_mask.to_vec()[6..], [0., 0., 0., 0., 0., 1.]);
        assert_eq!(enc.targets[11], -100);
        assert!(enc.targets[..11].iter().all(|&t| (0..5).contains(&t)));
        assert!(g.get("layers.1.norm2.bias").is_some());
        assert!(format!("{g:?}").contains("hash"));
    }
}
