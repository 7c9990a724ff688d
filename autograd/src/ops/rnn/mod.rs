//! Recurrent layers: multi-layer, optionally bidirectional LSTM and GRU (PyTorch's
//! `nn.LSTM` and `nn.GRU` without projections), each layer and direction one fused
//! operator with its own backward rule.
//!
//! The order of every operation is written in `docs/recurrent.md` (normative). In short,
//! for one layer and direction over `T` steps of a batch of `B` (`G = 4` gate blocks for
//! the LSTM, `i, f, g, o`; `G = 3` for the GRU, `r, z, n`):
//!
//! - **input projection**: one canonical GEMM `XG = X · W_ihᵀ` for all steps
//!   (`[T·B, I] × [I, G·H]`);
//! - **each step** (in time order, or reversed for the reverse direction): one canonical
//!   GEMM `HG = h_{t−1} · W_hhᵀ` (`[B, H] × [H, G·H]`), then the backend's cell kernel
//!   ([`Backend::lstm_cell`], [`Backend::gru_cell`]): gate sums, activations and the
//!   state update;
//! - **backward**, steps in the reverse of the forward order: the cell kernel's backward
//!   rule, then `δ_t · W_hh` (canonical GEMM) as the gradient reaching `h_{t−1}` (for the
//!   GRU added to the direct part `dh ⊗ z`); after the last step, `dX = Δ · W_ih`,
//!   `dW_ih = Δᵀ · X` and `dW_hh = Δ_hᵀ · H_prev` (canonical GEMMs over all `T·B` rows in
//!   time order), `db = Σ64` of the rows of `Δ` (resp. `Δ_h`) in time order.
//!
//! Layers are composed from these operators: layer `l + 1` reads the concatenation of
//! layer `l`'s two directions along the feature dimension; `h_n` (and `c_n`) stack the
//! final state of every layer and direction in PyTorch's order (layer-major, forward
//! before reverse). All three results are differentiable.
//!
//! The LSTM and GRU share one layer/direction driver: its forward step loop and what it
//! keeps for the backward rule are in `layer`, the backward rule that reads them in
//! `backward`; this file holds the options, the checks and the multi-layer composition.

mod backward;
mod layer;

use super::{new_tensor, sum_unrecorded};
use crate::engine::{needs_record, record_with, Saved};
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::trace::{OpInfo, Value};
use exactgrad_core::backend::MatmulSpec;
use exactgrad_core::recurrent::{
    CellShape, GruCellGradInputs, GruCellGradOutputs, GruCellInputs, GruCellOutputs,
    LstmCellGradInputs, LstmCellGradOutputs, LstmCellInputs, LstmCellOutputs,
};
use exactgrad_core::{Backend, BinaryOp, Layout, Shape, ViewLen, ViewMutOf, ViewOf};

// ----- arguments and results ---------------------------------------------------------------

use backward::*;
pub use layer::RnnWeights;
use layer::*;
pub(crate) use layer::{layer, Cell};

/// The optional arguments of [`Tensor::lstm`], with PyTorch's defaults (zero initial
/// states, one direction, sequence first).
pub struct LstmOptions<'a, B: Backend> {
    /// Initial hidden states `[L·D, B, H]` (`[L·D, H]` for an unbatched input); zeros
    /// when absent.
    pub h0: Option<&'a Tensor<B>>,
    /// Initial cell states, same shape as `h0`; zeros when absent.
    pub c0: Option<&'a Tensor<B>>,
    /// Two directions per layer (the weights list holds forward, then reverse, per layer).
    pub bidirectional: bool,
    /// The input and output are `[B, T, features]` instead of `[T, B, features]`.
    pub batch_first: bool,
}

borrowed_options!(LstmOptions {
    h0,
    c0,
    bidirectional,
    batch_first
});

impl<B: Backend> Default for LstmOptions<'_, B> {
    fn default() -> Self {
        Self {
            h0: None,
            c0: None,
            bidirectional: false,
            batch_first: false,
        }
    }
}

/// The optional arguments of [`Tensor::gru`], with PyTorch's defaults (zero initial
/// state, one direction, sequence first). A GRU has no cell state, so there is no `c0`.
pub struct GruOptions<'a, B: Backend> {
    /// Initial hidden states `[L·D, B, H]` (`[L·D, H]` for an unbatched input); zeros
    /// when absent.
    pub h0: Option<&'a Tensor<B>>,
    /// Two directions per layer (the weights list holds forward, then reverse, per layer).
    pub bidirectional: bool,
    /// The input and output are `[B, T, features]` instead of `[T, B, features]`.
    pub batch_first: bool,
}

borrowed_options!(GruOptions {
    h0,
    bidirectional,
    batch_first
});

impl<B: Backend> Default for GruOptions<'_, B> {
    fn default() -> Self {
        Self {
            h0: None,
            bidirectional: false,
            batch_first: false,
        }
    }
}

/// What [`Tensor::lstm`] returns (PyTorch's `output, (h_n, c_n)`).
#[derive(Clone, Debug)]
pub struct LstmOutput<B: Backend> {
    /// The last layer's hidden state at every step, `[T, B, D·H]` (`[B, T, D·H]` batch
    /// first, `[T, D·H]` unbatched); the reverse direction's half is the second.
    pub output: Tensor<B>,
    /// The final hidden state of every layer and direction, `[L·D, B, H]`.
    pub h_n: Tensor<B>,
    /// The final cell state of every layer and direction, `[L·D, B, H]`.
    pub c_n: Tensor<B>,
}

/// What [`Tensor::gru`] returns (PyTorch's `output, h_n`).
#[derive(Clone, Debug)]
pub struct GruOutput<B: Backend> {
    /// The last layer's hidden state at every step, `[T, B, D·H]` (as [`LstmOutput`]).
    pub output: Tensor<B>,
    /// The final hidden state of every layer and direction, `[L·D, B, H]`.
    pub h_n: Tensor<B>,
}

// ----- validation and the multi-layer composition ------------------------------------------

/// Checks the weights of every layer and direction; returns `(hidden, layers)`.
fn check_weights<B: Backend>(
    cell: Cell,
    weights: &[RnnWeights<'_, B>],
    input_size: usize,
    dirs: usize,
) -> Result<(usize, usize)> {
    let op = cell.name();
    let g = cell.gates();
    if weights.is_empty() || !weights.len().is_multiple_of(dirs) {
        return Err(Error::invalid(
            op,
            "weights",
            format!(
                "expects num_layers × {dirs} sets of weights (forward{} per layer), got {}",
                if dirs == 2 { " then reverse" } else { "" },
                weights.len()
            ),
        ));
    }
    let layers = weights.len() / dirs;
    let w0 = weights[0].weight_hh;
    if w0.rank() != 2 || w0.dims()[1] == 0 {
        return Err(Error::invalid(
            op,
            "weight_hh",
            format!(
                "layer 0: must be [{g}·hidden_size, hidden_size] with hidden_size ≥ 1, got shape {:?}",
                w0.dims()
            ),
        ));
    }
    let h = w0.dims()[1];
    // G·H and D·H in checked arithmetic: an empty weight_hh may have any hidden size,
    // and a product that wrapped would accept weights of the wrong shape.
    let (gh, dh) = match (g.checked_mul(h), dirs.checked_mul(h)) {
        (Some(gh), Some(dh)) => (gh, dh),
        _ => {
            return Err(Error::overflow(
                op,
                "weight_hh",
                format!(
                    "layer 0: hidden_size {h} (from weight_hh of shape {:?}) × {g} gates overflows usize",
                    w0.dims()
                ),
            ))
        }
    };
    for (k, w) in weights.iter().enumerate() {
        let (l, suffix) = (k / dirs, if k % dirs == 1 { "_reverse" } else { "" });
        let in_l = if l == 0 { input_size } else { dh };
        let want_ih = [gh, in_l];
        if w.weight_ih.dims() != want_ih {
            return Err(Error::invalid(
                op,
                "weight_ih",
                format!(
                    "weight_ih_l{l}{suffix} must have shape {want_ih:?} ({g}·hidden_size = {gh}, input size {in_l}), got {:?}",
                    w.weight_ih.dims()
                ),
            ));
        }
        if w.weight_hh.dims() != [gh, h] {
            return Err(Error::invalid(
                op,
                "weight_hh",
                format!(
                    "weight_hh_l{l}{suffix} must have shape [{gh}, {h}] (the hidden size of weight_hh_l0 is {h}), got {:?}",
                    w.weight_hh.dims()
                ),
            ));
        }
        for (arg, b) in [("bias_ih", w.bias_ih), ("bias_hh", w.bias_hh)] {
            if let Some(b) = b {
                if b.dims() != [gh] {
                    return Err(Error::invalid(
                        op,
                        arg,
                        format!(
                            "{arg}_l{l}{suffix} must have shape [{gh}], got {:?}",
                            b.dims()
                        ),
                    ));
                }
            }
        }
    }
    Ok((h, layers))
}

/// The initial state `[L·D, B, H]` (after unsqueezing an unbatched one), checked.
fn check_state<B: Backend>(
    op: &'static str,
    arg: &'static str,
    s: Option<&Tensor<B>>,
    want: [usize; 3],
    unbatched: bool,
) -> Result<Option<Tensor<B>>> {
    let Some(s) = s else { return Ok(None) };
    let shown: Vec<usize> = if unbatched {
        vec![want[0], want[2]]
    } else {
        want.to_vec()
    };
    if s.dims() != shown.as_slice() {
        return Err(Error::invalid(
            op,
            arg,
            format!(
                "expected shape {shown:?} (num_layers × num_directions, {}hidden_size), got {:?}",
                if unbatched { "" } else { "batch, " },
                s.dims()
            ),
        ));
    }
    Ok(Some(if unbatched {
        s.unsqueeze(1)?
    } else {
        s.clone()
    }))
}

/// Output, `h_n` and (LSTM) `c_n`.
type Results<B> = (Tensor<B>, Tensor<B>, Option<Tensor<B>>);

/// The shared body of [`Tensor::lstm`] and [`Tensor::gru`]: returns output, `h_n` and
/// (LSTM) `c_n`.
#[allow(clippy::too_many_arguments)]
fn run<B: Backend>(
    cell: Cell,
    x: &Tensor<B>,
    weights: &[RnnWeights<'_, B>],
    h0: Option<&Tensor<B>>,
    c0: Option<&Tensor<B>>,
    bidirectional: bool,
    batch_first: bool,
) -> Result<Results<B>> {
    let op = cell.name();
    let unbatched = match x.rank() {
        2 => true,
        3 => false,
        _ => {
            return Err(Error::invalid(
                op,
                "input",
                format!(
                    "expects [T, B, input_size]{} or unbatched [T, input_size], got shape {:?}",
                    if batch_first {
                        " (batch_first: [B, T, input_size])"
                    } else {
                        ""
                    },
                    x.dims()
                ),
            ))
        }
    };
    let x3 = if unbatched {
        x.unsqueeze(1)?
    } else if batch_first {
        x.transpose(0, 1)?
    } else {
        x.clone()
    };
    let (t, b, i) = (x3.dims()[0], x3.dims()[1], x3.dims()[2]);
    if t == 0 {
        return Err(Error::invalid(
            op,
            "input",
            format!(
                "the sequence length must be at least 1, got input shape {:?}",
                x.dims()
            ),
        ));
    }
    let dirs = if bidirectional { 2 } else { 1 };
    let (h, layers) = check_weights(cell, weights, i, dirs)?;
    // The largest buffers of a layer, the gates of every step `[T, B, 4·H]` (the input
    // projection `[T, B, G·H]` and the output `[T, B, D·H]` are no larger), must have a
    // representable size; an input without features may have any T and B.
    Shape::from([t, b, 4, h]).numel_for(op)?;
    let want = [layers * dirs, b, h];
    let h0 = check_state(op, "h0", h0, want, unbatched)?;
    let c0 = check_state(op, "c0", c0, want, unbatched)?;
    let be = x.backend();
    let state = |s: &Option<Tensor<B>>, k: usize| -> Result<Tensor<B>> {
        match s {
            Some(s) => s.narrow(0, k, 1)?.reshape_to(&[b, h]),
            None => Tensor::zeros(be, [b, h]),
        }
    };
    let mut input = x3;
    let (mut h_n, mut c_n) = (Vec::new(), Vec::new());
    for l in 0..layers {
        let mut outs = Vec::new();
        for dir in 0..dirs {
            let k = l * dirs + dir;
            let reverse = dir == 1;
            let hk = state(&h0, k)?;
            let ck = match cell {
                Cell::Lstm => Some(state(&c0, k)?),
                Cell::Gru => None,
            };
            let packed = layer(cell, &input, &hk, ck.as_ref(), weights[k], reverse)?;
            outs.push(packed.narrow(0, 0, t)?);
            h_n.push(packed.narrow(0, if reverse { 0 } else { t - 1 }, 1)?);
            if cell == Cell::Lstm {
                c_n.push(packed.narrow(0, t, 1)?);
            }
        }
        input = if dirs == 1 {
            outs.pop().expect("one direction")
        } else {
            Tensor::concat(&[&outs[0], &outs[1]], 2)?
        };
    }
    let finish_state = |parts: Vec<Tensor<B>>| -> Result<Tensor<B>> {
        let s = Tensor::concat(&parts.iter().collect::<Vec<_>>(), 0)?;
        if unbatched {
            s.squeeze(1)
        } else {
            Ok(s)
        }
    };
    let output = if unbatched {
        input.squeeze(1)?
    } else if batch_first {
        input.transpose(0, 1)?
    } else {
        input
    };
    let h_n = finish_state(h_n)?;
    let c_n = match cell {
        Cell::Lstm => Some(finish_state(c_n)?),
        Cell::Gru => None,
    };
    Ok((output, h_n, c_n))
}

impl<B: Backend> Tensor<B> {
    /// A multi-layer LSTM over the sequence `self` (PyTorch's `nn.LSTM` forward with the
    /// given parameters, without projections or inter-layer dropout).
    ///
    /// `self` is `[T, B, input_size]` (`[B, T, input_size]` with `batch_first`, or
    /// unbatched `[T, input_size]`); `weights` lists the parameters of every layer and
    /// direction, layer by layer, forward before reverse (see [`RnnWeights`]). Gate rows
    /// are stacked `i, f, g, o`; with `σ` the sigmoid, per step
    ///
    /// `i, f, o = σ(x W_i,f,oᵀ + b_ih + h W_hi,hf,hoᵀ + b_hh)`, `g = tanh(…)`,
    /// `c' = f·c + i·g`, `h' = o·tanh(c')`,
    ///
    /// in the order of `docs/recurrent.md` §2. Returns the output, `h_n` and `c_n`, all
    /// differentiable with respect to the input, the initial states and every parameter.
    ///
    /// Fails (naming `lstm` and the argument) when the input is not 2-D or 3-D or has no
    /// steps, when the number of weight sets is not a multiple of the directions, when a
    /// weight or bias shape does not match the input size and the hidden size of
    /// `weight_hh_l0` (named `weight_ih_l{k}`, …), or when `h0` or `c0` is not
    /// `[num_layers·num_directions, B, hidden_size]`.
    ///
    /// ```
    /// use exactgrad_autograd::{LstmOptions, RnnWeights, Tensor};
    /// use exactgrad_backends::ScalarRefBackend;
    /// use exactgrad_core::Philox;
    ///
    /// # fn main() -> exactgrad_autograd::Result<()> {
    /// let b = ScalarRefBackend;
    /// let mut rng = Philox::new(1);
    /// let (t, n, i, h) = (5, 2, 3, 4);
    /// let w_ih = Tensor::rand_uniform(&b, [4 * h, i], -0.5, 0.5, &mut rng)?;
    /// let w_hh = Tensor::rand_uniform(&b, [4 * h, h], -0.5, 0.5, &mut rng)?;
    /// let x = Tensor::randn(&b, [t, n, i], 0.0, 1.0, &mut rng)?.requires_grad()?;
    /// let out = x.lstm(&[RnnWeights::without_bias(&w_ih, &w_hh)], LstmOptions::default())?;
    /// assert_eq!(out.output.dims(), [t, n, h]);
    /// assert_eq!(out.h_n.dims(), [1, n, h]);
    /// // h_n is the output's last step.
    /// assert_eq!(out.h_n.to_vec()?, out.output.narrow(0, t - 1, 1)?.to_vec()?);
    /// out.output.sum()?.add(&out.c_n.sum()?)?.backward()?;
    /// assert_eq!(x.grad().unwrap().dims(), [t, n, i]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn lstm(
        &self,
        weights: &[RnnWeights<'_, B>],
        options: LstmOptions<'_, B>,
    ) -> Result<LstmOutput<B>> {
        let _public = crate::engine::PublicOp::new("lstm");
        let (output, h_n, c_n) = run(
            Cell::Lstm,
            self,
            weights,
            options.h0,
            options.c0,
            options.bidirectional,
            options.batch_first,
        )?;
        Ok(LstmOutput {
            output,
            h_n,
            c_n: c_n.expect("an LSTM has a cell state"),
        })
    }

    /// A multi-layer GRU over the sequence `self` (PyTorch's `nn.GRU` forward with the
    /// given parameters, without inter-layer dropout): as [`Tensor::lstm`], with gate
    /// rows stacked `r, z, n` and per step
    ///
    /// `r, z = σ(x W_ir,izᵀ + b_ir,iz + h W_hr,hzᵀ + b_hr,hz)`,
    /// `n = tanh(x W_inᵀ + b_in + r·(h W_hnᵀ + b_hn))`, `h' = n + z·(h − n)`
    ///
    /// (`= (1 − z)·n + z·h`), in the order of `docs/recurrent.md` §3. Returns the output
    /// and `h_n`; fails as [`Tensor::lstm`] does (naming `gru`).
    pub fn gru(
        &self,
        weights: &[RnnWeights<'_, B>],
        options: GruOptions<'_, B>,
    ) -> Result<GruOutput<B>> {
        let _public = crate::engine::PublicOp::new("gru");
        let (output, h_n, _) = run(
            Cell::Gru,
            self,
            weights,
            options.h0,
            None,
            options.bidirectional,
            options.batch_first,
        )?;
        Ok(GruOutput { output, h_n })
    }
}
