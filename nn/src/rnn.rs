//! Recurrent layers: [`Lstm`] and [`Gru`] (PyTorch's `nn.LSTM` and `nn.GRU` without
//! projections), on the fused operators [`Tensor::lstm`] and [`Tensor::gru`].

use crate::dropout::Dropout;
use crate::error::{Error, Result};
use crate::init;
use crate::module::{Module, TrainingFlag, Visitor};
use crate::random::RandomStream;
use exactgrad_autograd::{GruOptions, GruOutput, LstmOptions, LstmOutput, RnnWeights, Tensor};
use exactgrad_core::{Backend, Philox};
use std::fmt;

/// The sizes and flags of an [`Lstm`] or [`Gru`], with PyTorch's defaults except the two
/// sizes: one layer, biases, sequence first, no dropout, one direction.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RnnConfig {
    /// Features of each input step.
    pub input_size: usize,
    /// Features of the hidden state.
    pub hidden_size: usize,
    /// Stacked layers (default 1).
    pub num_layers: usize,
    /// Whether the layers have `bias_ih` and `bias_hh` (default true).
    pub bias: bool,
    /// Inputs and outputs `[B, T, features]` instead of `[T, B, features]` (default
    /// false).
    pub batch_first: bool,
    /// Dropout probability on the outputs of every layer but the last, in training
    /// (default 0).
    pub dropout: f32,
    /// Two directions per layer (default false).
    pub bidirectional: bool,
}

impl RnnConfig {
    /// PyTorch's defaults with the given sizes.
    pub fn new(input_size: usize, hidden_size: usize) -> Self {
        Self {
            input_size,
            hidden_size,
            num_layers: 1,
            bias: true,
            batch_first: false,
            dropout: 0.0,
            bidirectional: false,
        }
    }

    /// Checks the sizes and the dropout probability (`op` names the caller).
    fn check(&self, op: &'static str) -> Result<()> {
        if self.input_size == 0 || self.hidden_size == 0 || self.num_layers == 0 {
            return Err(Error::invalid(
                op,
                "config",
                format!(
                    "input_size, hidden_size and num_layers must be positive, got {}, {} and {}",
                    self.input_size, self.hidden_size, self.num_layers
                ),
            ));
        }
        if !(0.0..=1.0).contains(&self.dropout) {
            return Err(Error::invalid(
                op,
                "dropout",
                format!("must be in [0, 1], got {}", self.dropout),
            ));
        }
        Ok(())
    }

    fn directions(&self) -> usize {
        if self.bidirectional {
            2
        } else {
            1
        }
    }
}

/// The parameters of one layer and direction.
struct LayerParams<B: Backend> {
    weight_ih: Tensor<B>,
    weight_hh: Tensor<B>,
    bias_ih: Option<Tensor<B>>,
    bias_hh: Option<Tensor<B>>,
}

impl<B: Backend> LayerParams<B> {
    fn weights(&self) -> RnnWeights<'_, B> {
        RnnWeights {
            weight_ih: &self.weight_ih,
            weight_hh: &self.weight_hh,
            bias_ih: self.bias_ih.as_ref(),
            bias_hh: self.bias_hh.as_ref(),
        }
    }
}

/// The shared parts of both layers: parameters, config, training flag and the dropout
/// stream.
struct Stack<B: Backend> {
    owner: &'static str,
    params: Vec<LayerParams<B>>,
    config: RnnConfig,
    training: TrainingFlag,
    rng: RandomStream,
}

impl<B: Backend> Stack<B> {
    /// Parameters of `gates` blocks per layer and direction, drawn as PyTorch does: every
    /// tensor from U(−1/√hidden, 1/√hidden), in the order weight_ih, weight_hh, bias_ih,
    /// bias_hh, layer by layer, forward before reverse; then one more `u64` (which keyed
    /// the dropout stream before streams were keyed by path).
    fn new(
        op: &'static str,
        backend: &B,
        config: RnnConfig,
        gates: usize,
        rng: &mut Philox,
    ) -> Result<Self> {
        config.check(op)?;
        let (h, dirs) = (config.hidden_size, config.directions());
        let overflow = || {
            Error::invalid(
                op,
                "config",
                format!("{gates} gates × hidden_size {h} (× {dirs} directions) overflows usize"),
            )
        };
        let gate_rows = gates.checked_mul(h).ok_or_else(overflow)?;
        let stacked = dirs.checked_mul(h).ok_or_else(overflow)?;
        let bound = init::default_uniform_bound(h);
        let mut params = Vec::new();
        for l in 0..config.num_layers {
            let in_l = if l == 0 { config.input_size } else { stacked };
            for _ in 0..dirs {
                let weight_ih = init::uniform_parameter(backend, [gate_rows, in_l], bound, rng)?;
                let weight_hh = init::uniform_parameter(backend, [gate_rows, h], bound, rng)?;
                let (bias_ih, bias_hh) = if config.bias {
                    (
                        Some(init::uniform_parameter(backend, [gate_rows], bound, rng)?),
                        Some(init::uniform_parameter(backend, [gate_rows], bound, rng)?),
                    )
                } else {
                    (None, None)
                };
                params.push(LayerParams {
                    weight_ih,
                    weight_hh,
                    bias_ih,
                    bias_hh,
                });
            }
        }
        let _ = rng.next_u64();
        let owner = if gates == 4 { "Lstm" } else { "Gru" };
        Ok(Self {
            owner,
            params,
            config,
            training: TrainingFlag::new(),
            rng: RandomStream::new(),
        })
    }

    /// The parameters (PyTorch's names), the inter-layer dropout stream `dropout_rng` and
    /// the training flag.
    fn visit(&self, v: &mut Visitor<'_, B>) {
        let dirs = self.config.directions();
        for (k, p) in self.params.iter().enumerate() {
            let suffix = format!(
                "_l{}{}",
                k / dirs,
                if k % dirs == 1 { "_reverse" } else { "" }
            );
            v.parameter(&format!("weight_ih{suffix}"), &p.weight_ih);
            v.parameter(&format!("weight_hh{suffix}"), &p.weight_hh);
            v.parameter(&format!("bias_ih{suffix}"), p.bias_ih.as_ref());
            v.parameter(&format!("bias_hh{suffix}"), p.bias_hh.as_ref());
        }
        v.stream("dropout_rng", &self.rng);
        v.training(&self.training);
    }

    fn weights(&self, layers: std::ops::Range<usize>) -> Vec<RnnWeights<'_, B>> {
        let dirs = self.config.directions();
        self.params[layers.start * dirs..layers.end * dirs]
            .iter()
            .map(LayerParams::weights)
            .collect()
    }

    /// Whether dropout runs between layers.
    fn drops(&self) -> bool {
        self.training.get() && self.config.dropout > 0.0 && self.config.num_layers > 1
    }

    /// Runs `layer(input, layers, h0 slice, c0 slice)` over all layers at once, or one
    /// layer at a time with dropout between them; returns the output and the final
    /// states of every layer, concatenated (for `c_n` when `cell`).
    #[allow(clippy::type_complexity)]
    fn run(
        &self,
        input: &Tensor<B>,
        states: [Option<&Tensor<B>>; 2],
        layer: &dyn Fn(
            &Tensor<B>,
            &[RnnWeights<'_, B>],
            [Option<&Tensor<B>>; 2],
            bool,
        ) -> Result<(Tensor<B>, Tensor<B>, Option<Tensor<B>>)>,
    ) -> Result<(Tensor<B>, Tensor<B>, Option<Tensor<B>>)> {
        let cfg = &self.config;
        if !self.drops() {
            return layer(
                input,
                &self.weights(0..cfg.num_layers),
                states,
                cfg.batch_first,
            );
        }
        let dirs = cfg.directions();
        // One layer at a time, sequence first, dropout on every output but the last.
        let unbatched = input.rank() == 2;
        let mut x = if cfg.batch_first && !unbatched {
            input.transpose(0, 1)?
        } else {
            input.clone()
        };
        let (mut hs, mut cs) = (Vec::new(), Vec::new());
        for l in 0..cfg.num_layers {
            let slice = |s: Option<&Tensor<B>>| s.map(|s| s.narrow(0, l * dirs, dirs)).transpose();
            let (h0, c0) = (slice(states[0])?, slice(states[1])?);
            let (y, h, c) = layer(
                &x,
                &self.weights(l..l + 1),
                [h0.as_ref(), c0.as_ref()],
                false,
            )?;
            hs.push(h);
            cs.extend(c);
            x = if l + 1 < cfg.num_layers {
                Dropout::apply(self.owner, &y, cfg.dropout, true, &self.rng)?
            } else {
                y
            };
        }
        let output = if cfg.batch_first && !unbatched {
            x.transpose(0, 1)?
        } else {
            x
        };
        let cat = |v: Vec<Tensor<B>>| -> Result<Tensor<B>> {
            Tensor::concat(&v.iter().collect::<Vec<_>>(), 0)
        };
        let c_n = if cs.is_empty() { None } else { Some(cat(cs)?) };
        Ok((output, cat(hs)?, c_n))
    }
}

impl<B: Backend> fmt::Debug for Stack<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        write!(
            f,
            "({}, {}, num_layers={}, bias={}, batch_first={}, dropout={}, bidirectional={})",
            c.input_size,
            c.hidden_size,
            c.num_layers,
            c.bias,
            c.batch_first,
            c.dropout,
            c.bidirectional
        )
    }
}

/// A multi-layer long short-term memory network (PyTorch's `nn.LSTM` with
/// `proj_size = 0`).
///
/// Parameters, named as PyTorch's `state_dict` so that a PyTorch checkpoint loads by
/// name: for every layer `k` and direction, `weight_ih_l{k}` `[4·H, in]`,
/// `weight_hh_l{k}` `[4·H, H]` and (with biases) `bias_ih_l{k}`, `bias_hh_l{k}` `[4·H]`,
/// the reverse direction with the suffix `_reverse`; gate rows `i, f, g, o`.
/// [`Module::forward`] returns the output; [`Lstm::forward_with_state`] also takes
/// initial states and returns `h_n` and `c_n`. The arithmetic is
/// [`Tensor::lstm`]'s (`docs/recurrent.md`).
///
/// ```
/// use exactgrad_autograd::Tensor;
/// use exactgrad_backends::ScalarRefBackend;
/// use exactgrad_core::Philox;
/// use exactgrad_nn::{Lstm, ModuleExt, RnnConfig};
///
/// # fn main() -> exactgrad_nn::Result<()> {
/// let b = ScalarRefBackend;
/// let mut rng = Philox::new(5);
/// let config = RnnConfig { num_layers: 2, bidirectional: true, ..RnnConfig::new(3, 4) };
/// let lstm = Lstm::new(&b, config, &mut rng)?;
/// let names: Vec<String> = lstm.named_parameters().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names[..4], ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"]);
/// assert_eq!(names[4], "weight_ih_l0_reverse");
/// let x = Tensor::randn(&b, [7, 2, 3], 0.0, 1.0, &mut rng)?;
/// let out = lstm.forward_with_state(&x, None, None)?;
/// assert_eq!(out.output.dims(), [7, 2, 8]);
/// assert_eq!(out.c_n.dims(), [4, 2, 4]);
/// # Ok(())
/// # }
/// ```
pub struct Lstm<B: Backend> {
    stack: Stack<B>,
}

impl<B: Backend> Lstm<B> {
    /// An LSTM initialised as PyTorch does (see [`RnnConfig`]; every parameter from
    /// U(−1/√hidden_size, 1/√hidden_size), drawn from `rng` in `state_dict` order).
    ///
    /// Fails when a size is 0 or the dropout probability is outside `[0, 1]`.
    pub fn new(backend: &B, config: RnnConfig, rng: &mut Philox) -> Result<Self> {
        Ok(Self {
            stack: Stack::new("Lstm::new", backend, config, 4, rng)?,
        })
    }

    /// The configuration.
    pub fn config(&self) -> RnnConfig {
        self.stack.config
    }

    /// The output, `h_n` and `c_n` of `input` (`[T, B, input_size]`, batch first
    /// `[B, T, input_size]`, or unbatched `[T, input_size]`) from the initial states
    /// `h0` and `c0` (`[num_layers·num_directions, B, hidden_size]`, zeros when absent).
    ///
    /// Fails (naming `lstm` and the argument) on an input of the wrong feature size or
    /// states of the wrong shape.
    pub fn forward_with_state(
        &self,
        input: &Tensor<B>,
        h0: Option<&Tensor<B>>,
        c0: Option<&Tensor<B>>,
    ) -> Result<LstmOutput<B>> {
        let _scope = crate::trace::module_scope::<B>(self);
        let (output, h_n, c_n) = self.stack.run(input, [h0, c0], &|x, w, [h0, c0], bf| {
            let o = x.lstm(
                w,
                LstmOptions {
                    h0,
                    c0,
                    bidirectional: self.stack.config.bidirectional,
                    batch_first: bf,
                },
            )?;
            Ok((o.output, o.h_n, Some(o.c_n)))
        })?;
        Ok(LstmOutput {
            output,
            h_n,
            c_n: c_n.expect("an LSTM returns c_n"),
        })
    }
}

impl<B: Backend> Module<B> for Lstm<B> {
    /// The output only (see [`Lstm::forward_with_state`]).
    fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        let _scope = crate::trace::module_scope::<B>(self);
        Ok(self.forward_with_state(input, None, None)?.output)
    }

    fn visit(&self, v: &mut Visitor<'_, B>) {
        self.stack.visit(v)
    }

    fn describe(&self) -> String {
        format!("{self:?}")
    }
}

impl<B: Backend> fmt::Debug for Lstm<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LSTM{:?}", self.stack)
    }
}

/// A multi-layer gated recurrent unit network (PyTorch's `nn.GRU`).
///
/// Parameters as [`Lstm`]'s with `3·H` gate rows `r, z, n`: `weight_ih_l{k}`,
/// `weight_hh_l{k}`, `bias_ih_l{k}`, `bias_hh_l{k}` (and `_reverse`).
/// [`Gru::forward_with_state`] takes the initial state and returns `h_n`; the
/// arithmetic is [`Tensor::gru`]'s.
pub struct Gru<B: Backend> {
    stack: Stack<B>,
}

impl<B: Backend> Gru<B> {
    /// A GRU initialised as PyTorch does (as [`Lstm::new`]).
    ///
    /// Fails when a size is 0 or the dropout probability is outside `[0, 1]`.
    pub fn new(backend: &B, config: RnnConfig, rng: &mut Philox) -> Result<Self> {
        Ok(Self {
            stack: Stack::new("Gru::new", backend, config, 3, rng)?,
        })
    }

    /// The configuration.
    pub fn config(&self) -> RnnConfig {
        self.stack.config
    }

    /// The output and `h_n` of `input` from the initial state `h0` (as
    /// [`Lstm::forward_with_state`]).
    pub fn forward_with_state(
        &self,
        input: &Tensor<B>,
        h0: Option<&Tensor<B>>,
    ) -> Result<GruOutput<B>> {
        let _scope = crate::trace::module_scope::<B>(self);
        let (output, h_n, _) = self.stack.run(input, [h0, None], &|x, w, [h0, _], bf| {
            let o = x.gru(
                w,
                GruOptions {
                    h0,
                    bidirectional: self.stack.config.bidirectional,
                    batch_first: bf,
                },
            )?;
            Ok((o.output, o.h_n, None))
        })?;
        Ok(GruOutput { output, h_n })
    }
}

impl<B: Backend> Module<B> for Gru<B> {
    /// The output only (see [`Gru::forward_with_state`]).
    fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        let _scope = crate::trace::module_scope::<B>(self);
        Ok(self.forward_with_state(input, None)?.output)
    }

    fn visit(&self, v: &mut Visitor<'_, B>) {
        self.stack.visit(v)
    }

    fn describe(&self) -> String {
        format!("{self:?}")
    }
}

impl<B: Backend> fmt::Debug for Gru<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GRU{:?}", self.stack)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::module::ModuleExt;
    use exactgrad_backends::ScalarRefBackend;

    #[test]
    fn names_shapes_and_init_bounds() {
        let b = ScalarRefBackend;
        let cfg = RnnConfig {
            num_layers: 2,
            bidirectional: true,
            ..RnnConfig::new(3, 5)
        };
        let gru = Gru::new(&b, cfg, &mut Philox::new(1)).unwrap();
        let p = gru.named_parameters();
        assert_eq!(p.len(), 16);
        let shapes: Vec<(String, Vec<usize>)> = p
            .iter()
            .map(|(n, t)| (n.clone(), t.dims().to_vec()))
            .collect();
        assert_eq!(shapes[0], ("weight_ih_l0".into(), vec![15, 3]));
        assert_eq!(shapes[5], ("weight_hh_l0_reverse".into(), vec![15, 5]));
        assert_eq!(shapes[8], ("weight_ih_l1".into(), vec![15, 10]));
        assert_eq!(shapes[15], ("bias_hh_l1_reverse".into(), vec![15]));
        let bound = (1.0 / 5f64.sqrt()) as f32;
        for (_, t) in &p {
            assert!(t.to_vec().unwrap().iter().all(|v| v.abs() <= bound));
        }
        let no_bias = Lstm::new(
            &b,
            RnnConfig {
                bias: false,
                ..RnnConfig::new(2, 3)
            },
            &mut Philox::new(1),
        )
        .unwrap();
        assert_eq!(no_bias.named_parameters().len(), 2);
        assert!(format!("{no_bias:?}").starts_with("LSTM(2, 3"));
    }

    #[test]
    fn bad_configs_and_inputs_are_errors() {
        let b = ScalarRefBackend;
        let mut rng = Philox::new(2);
        assert!(Lstm::new(&b, RnnConfig::new(0, 3), &mut rng).is_err());
        let bad_dropout = RnnConfig {
            dropout: 1.5,
            ..RnnConfig::new(2, 3)
        };
        let e = Gru::new(&b, bad_dropout, &mut rng).unwrap_err();
        assert!(e.to_string().contains("dropout"), "{e}");
        let lstm = Lstm::new(&b, RnnConfig::new(2, 3), &mut rng).unwrap();
        let e = lstm
            .forward(&Tensor::zeros(&b, [4, 1, 3]).unwrap())
            .unwrap_err();
        assert!(
            e.to_string().contains("lstm") && e.to_string().contains("weight_ih_l0"),
            "{e}"
        );
        let h0 = Tensor::zeros(&b, [2, 1, 3]).unwrap();
        let e = lstm
            .forward_with_state(&Tensor::zeros(&b, [4, 1, 2]).unwrap(), Some(&h0), None)
            .unwrap_err();
        assert!(e.to_string().contains("h0"), "{e}");
    }

    #[test]
    fn dropout_between_layers_only_in_training() {
        let b = ScalarRefBackend;
        let cfg = RnnConfig {
            num_layers: 2,
            dropout: 0.5,
            batch_first: true,
            ..RnnConfig::new(3, 4)
        };
        let gru = Gru::new(&b, cfg, &mut Philox::new(3)).unwrap();
        let x = Tensor::randn(&b, [2, 6, 3], 0.0, 1.0, &mut Philox::new(4)).unwrap();
        let err = gru.forward(&x).unwrap_err().to_string();
        assert!(err.contains("Gru") && err.contains("seed_streams"), "{err}");
        assert_eq!(gru.stream_names(), ["dropout_rng"]);
        gru.seed_streams(5).unwrap();
        let a = gru.forward(&x).unwrap().to_vec().unwrap();
        let c = gru.forward(&x).unwrap().to_vec().unwrap();
        assert_ne!(a, c, "a new mask every call in training");
        gru.set_training(false);
        let e1 = gru.forward_with_state(&x, None).unwrap();
        let plain = RnnConfig {
            dropout: 0.0,
            ..cfg
        };
        let reference = Gru::new(&b, plain, &mut Philox::new(3)).unwrap();
        let e2 = reference.forward_with_state(&x, None).unwrap();
        assert_eq!(e1.output.to_vec().unwrap(), e2.output.to_vec().unwrap());
        assert_eq!(e1.h_n.to_vec().unwrap(), e2.h_n.to_vec().unwrap());
    }
}
