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
//! Over 800 lines on purpose: the LSTM and GRU forward and backward passes share one
//! layer/direction driver and step loop (`docs/recurrent.md`); splitting them would
//! separate each backward rule from the forward whose saved values it reads.

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

/// The parameters of one layer and direction of [`Tensor::lstm`] or [`Tensor::gru`]
/// (PyTorch's `weight_ih_l{k}`, `weight_hh_l{k}`, `bias_ih_l{k}`, `bias_hh_l{k}`, with
/// the suffix `_reverse` for the reverse direction).
///
/// Shapes, with `G = 4` gate blocks for the LSTM (`i, f, g, o`) and `G = 3` for the GRU
/// (`r, z, n`), `H` the hidden size and `I` the layer's input size (the input's features
/// for the first layer, `D·H` for the others): `weight_ih` `[G·H, I]`, `weight_hh`
/// `[G·H, H]`, `bias_ih` and `bias_hh` `[G·H]`.
pub struct RnnWeights<'a, B: Backend> {
    /// Input-to-hidden weights `[G·H, I]`.
    pub weight_ih: &'a Tensor<B>,
    /// Hidden-to-hidden weights `[G·H, H]`.
    pub weight_hh: &'a Tensor<B>,
    /// Input-to-hidden bias `[G·H]`, if any.
    pub bias_ih: Option<&'a Tensor<B>>,
    /// Hidden-to-hidden bias `[G·H]`, if any.
    pub bias_hh: Option<&'a Tensor<B>>,
}

borrowed_options!(RnnWeights {
    weight_ih,
    weight_hh,
    bias_ih,
    bias_hh
});

impl<'a, B: Backend> RnnWeights<'a, B> {
    /// Weights with both biases.
    pub fn new(
        weight_ih: &'a Tensor<B>,
        weight_hh: &'a Tensor<B>,
        bias_ih: &'a Tensor<B>,
        bias_hh: &'a Tensor<B>,
    ) -> Self {
        Self {
            weight_ih,
            weight_hh,
            bias_ih: Some(bias_ih),
            bias_hh: Some(bias_hh),
        }
    }

    /// Weights without biases (PyTorch's `bias=False`).
    pub fn without_bias(weight_ih: &'a Tensor<B>, weight_hh: &'a Tensor<B>) -> Self {
        Self {
            weight_ih,
            weight_hh,
            bias_ih: None,
            bias_hh: None,
        }
    }
}

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

// ----- one layer and direction -------------------------------------------------------------

/// The two cell types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cell {
    Lstm,
    Gru,
}

impl Cell {
    /// Gate blocks of the products.
    fn gates(self) -> usize {
        match self {
            Cell::Lstm => 4,
            Cell::Gru => 3,
        }
    }

    /// The public operator's name (errors).
    fn name(self) -> &'static str {
        match self {
            Cell::Lstm => "lstm",
            Cell::Gru => "gru",
        }
    }

    /// The name of one layer's record.
    fn layer_name(self) -> &'static str {
        match self {
            Cell::Lstm => "lstm_layer",
            Cell::Gru => "gru_layer",
        }
    }
}

/// Sizes of one layer and direction.
#[derive(Clone, Copy, Debug)]
struct Dims {
    t: usize,
    b: usize,
    i: usize,
    h: usize,
    g: usize,
    reverse: bool,
}

impl Dims {
    /// The time index of processing step `s`.
    fn time(&self, s: usize) -> usize {
        if self.reverse {
            self.t - 1 - s
        } else {
            s
        }
    }

    fn bh(&self) -> usize {
        self.b * self.h
    }

    fn gh(&self) -> usize {
        self.g * self.h
    }
}

/// `out = a · b` for row-major-addressed `a` (`m × k`, strides `sa`) and `b` (`k × n`,
/// strides `sb`): one canonical GEMM on the backend.
#[allow(clippy::too_many_arguments)]
fn gemm<B: Backend>(
    be: &B,
    (m, k, n): (usize, usize, usize),
    a: ViewOf<'_, B>,
    sa: [usize; 2],
    b: ViewOf<'_, B>,
    sb: [usize; 2],
    out: ViewMutOf<'_, B>,
) -> Result<()> {
    if m == 0 || n == 0 {
        return Ok(());
    }
    let spec = MatmulSpec {
        batch: 1,
        m,
        k,
        n,
        a_offset: 0,
        a_strides: [0, sa[0], sa[1]],
        b_offset: 0,
        b_strides: [0, sb[0], sb[1]],
    };
    Ok(be.matmul(&spec, a, b, out)?)
}

/// The elements of `t` in row-major order, in a new buffer of its backend.
fn values<B: Backend>(t: &Tensor<B>) -> Result<B::Storage> {
    let be = t.backend();
    let n = t.numel();
    let mut out = be.uninit(n)?;
    t.with_contiguous(|v| copy(be, v, B::view_mut(&mut out)))??;
    Ok(out)
}

/// Copies `src` into `dst` (same length), bits unchanged.
fn copy<B: Backend>(be: &B, src: ViewOf<'_, B>, dst: ViewMutOf<'_, B>) -> Result<()> {
    copy_as(be, src, &Layout::contiguous([src.len()]), dst)
}

/// [`copy`] with the contiguous layout of `src` given (built once for the copies of every
/// time step).
fn copy_as<B: Backend>(
    be: &B,
    src: ViewOf<'_, B>,
    layout: &Layout,
    dst: ViewMutOf<'_, B>,
) -> Result<()> {
    Ok(be.copy_strided(src, layout, dst)?)
}

/// Elements `start .. start + len` of `s`.
fn part<B: Backend>(s: &B::Storage, start: usize, len: usize) -> ViewOf<'_, B> {
    B::slice(B::view(s), start..start + len)
}

/// Elements `start .. start + len` of `s`, exclusively.
fn part_mut<B: Backend>(s: &mut B::Storage, start: usize, len: usize) -> ViewMutOf<'_, B> {
    B::slice_mut(B::view_mut(s), start..start + len)
}

/// What the backward rule of one layer keeps.
struct Kept<B: Backend> {
    dims: Dims,
    cell: Cell,
    x: Saved<B>,
    h0: Saved<B>,
    c0: Option<Saved<B>>,
    w_ih: Saved<B>,
    w_hh: Saved<B>,
    /// The layer's packed output (`y`, then `c_n` for the LSTM).
    out: Saved<B>,
    /// The kept gates of every step, `[T, B, 4·H]` in time order.
    gates: B::Storage,
    /// The LSTM's cell states `c_t`, `[T, B, H]` in time order.
    cs: B::Storage,
    /// Which inputs need a gradient: x, h0, c0, w_ih, w_hh, b_ih, b_hh.
    need: [bool; 7],
    has_bias: [bool; 2],
}

/// One layer and direction: `x` `[T, B, I]`, `h0` (and `c0`) `[B, H]`. Returns the packed
/// result `[T, B, H]` (`y`, GRU) or `[T + 1, B, H]` (`y`, then `c_n`, LSTM), recorded.
pub(crate) fn layer<B: Backend>(
    cell: Cell,
    x: &Tensor<B>,
    h0: &Tensor<B>,
    c0: Option<&Tensor<B>>,
    w: RnnWeights<'_, B>,
    reverse: bool,
) -> Result<Tensor<B>> {
    let op = cell.layer_name();
    let be = x.backend();
    let d = Dims {
        t: x.dims()[0],
        b: x.dims()[1],
        i: x.dims()[2],
        h: w.weight_hh.dims()[1],
        g: cell.gates(),
        reverse,
    };
    let (t, bh, gh) = (d.t, d.bh(), d.gh());
    let mut inputs: Vec<&Tensor<B>> = vec![x, h0];
    inputs.extend(c0);
    inputs.extend([w.weight_ih, w.weight_hh]);
    inputs.extend(w.bias_ih);
    inputs.extend(w.bias_hh);
    let recording = needs_record(&inputs);

    let xs = values(x)?;
    let w_ih = values(w.weight_ih)?;
    let w_hh = values(w.weight_hh)?;
    let b_ih = w.bias_ih.map(values).transpose()?;
    let b_hh = w.bias_hh.map(values).transpose()?;
    let zeros = |n: usize| zeros_of(be, op, n);
    // The input projection of every step: XG = X · W_ihᵀ, [T·B, G·H].
    let mut xg = zeros(t * d.b * gh)?;
    gemm(
        be,
        (t * d.b, d.i, gh),
        B::view(&xs),
        [d.i, 1],
        B::view(&w_ih),
        [1, d.i],
        B::view_mut(&mut xg),
    )?;
    // W_hhᵀ, [H, G·H], copied once so that every step's product reads it row-major.
    let mut w_hh_t = zeros(d.h * gh)?;
    let lt = Layout {
        shape: Shape::from([d.h, gh]),
        strides: vec![1, d.h],
        offset: 0,
    };
    be.copy_strided(B::view(&w_hh), &lt, B::view_mut(&mut w_hh_t))?;

    let packed_rows = if cell == Cell::Lstm { t + 1 } else { t };
    let keep_steps = if recording { t } else { 1 };
    let mut gates = zeros(keep_steps * d.b * 4 * d.h)?;
    let mut cs = zeros(if cell == Cell::Lstm {
        keep_steps * bh
    } else {
        0
    })?;
    let mut hp = values(h0)?;
    let mut cp = match c0 {
        Some(c) => values(c)?,
        None => zeros(0)?,
    };
    let mut hg = zeros(d.b * gh)?;
    let shape = CellShape {
        batch: d.b,
        hidden: d.h,
    };
    let row = Layout::contiguous([bh]);
    let out = new_tensor(be, op, Shape::from([packed_rows, d.b, d.h]), |mut y| {
        for s in 0..t {
            let tt = d.time(s);
            let k = if recording { tt } else { 0 };
            let hg_v = B::view_mut(&mut hg);
            gemm(
                be,
                (d.b, d.h, gh),
                B::view(&hp),
                [d.h, 1],
                B::view(&w_hh_t),
                [gh, 1],
                hg_v,
            )?;
            let xg_t = part::<B>(&xg, tt * d.b * gh, d.b * gh);
            let g_t = part_mut::<B>(&mut gates, k * 4 * bh, 4 * bh);
            let y_t = B::slice_mut(B::reborrow(&mut y), tt * bh..(tt + 1) * bh);
            let (bias_ih, bias_hh) = (b_ih.as_ref().map(B::view), b_hh.as_ref().map(B::view));
            match cell {
                Cell::Lstm => {
                    be.lstm_cell(
                        shape,
                        LstmCellInputs {
                            xg: xg_t,
                            hg: B::view(&hg),
                            bias_ih,
                            bias_hh,
                            c_prev: B::view(&cp),
                        },
                        LstmCellOutputs {
                            gates: g_t,
                            c: part_mut::<B>(&mut cs, k * bh, bh),
                            h: y_t,
                        },
                    )?;
                    copy_as(be, part::<B>(&cs, k * bh, bh), &row, B::view_mut(&mut cp))?;
                }
                Cell::Gru => {
                    be.gru_cell(
                        shape,
                        GruCellInputs {
                            xg: xg_t,
                            hg: B::view(&hg),
                            bias_ih,
                            bias_hh,
                            h_prev: B::view(&hp),
                        },
                        GruCellOutputs { gates: g_t, h: y_t },
                    )?;
                }
            }
            let y_t = B::slice(B::freeze(&y), tt * bh..(tt + 1) * bh);
            copy_as(be, y_t, &row, B::view_mut(&mut hp))?;
        }
        if cell == Cell::Lstm {
            // The final cell state (c0 itself for an empty sequence).
            copy(be, B::view(&cp), B::slice_mut(y, t * bh..(t + 1) * bh))?;
        }
        Ok(())
    })?;
    let info = || {
        crate::trace::info(|| {
            let mut names = vec!["input", "h0"];
            if c0.is_some() {
                names.push("c0");
            }
            names.extend(["weight_ih", "weight_hh"]);
            if w.bias_ih.is_some() {
                names.push("bias_ih");
            }
            if w.bias_hh.is_some() {
                names.push("bias_hh");
            }
            OpInfo::new()
                .names(&names)
                .attr("reverse", Value::Bool(reverse))
        })
    };
    if !recording {
        return Ok(record_with(op, out, &inputs, info(), || {
            |_: &Tensor<B>| -> Result<Vec<Option<Tensor<B>>>> {
                Err(Error::invalid(
                    "rnn",
                    "graph",
                    "an unrecorded layer has no rule",
                ))
            }
        }));
    }
    let need = [
        x.is_requires_grad(),
        h0.is_requires_grad(),
        c0.is_some_and(|c| c.is_requires_grad()),
        w.weight_ih.is_requires_grad(),
        w.weight_hh.is_requires_grad(),
        w.bias_ih.is_some_and(|b| b.is_requires_grad()),
        w.bias_hh.is_some_and(|b| b.is_requires_grad()),
    ];
    let kept = Kept {
        dims: d,
        cell,
        x: Saved::new(op, x),
        h0: Saved::new(op, h0),
        c0: c0.map(|c| Saved::new(op, c)),
        w_ih: Saved::new(op, w.weight_ih),
        w_hh: Saved::new(op, w.weight_hh),
        out: Saved::new(op, &out),
        gates,
        cs,
        need,
        has_bias: [w.bias_ih.is_some(), w.bias_hh.is_some()],
    };
    Ok(record_with(op, out, &inputs, info(), move || {
        move |g: &Tensor<B>| layer_backward(&kept, g)
    }))
}

/// A zero-filled buffer of `n` elements of the backend, its errors named after `op`.
fn zeros_of<B: Backend>(be: &B, op: &'static str, n: usize) -> Result<B::Storage> {
    be.zeros(n).map_err(|e| super::alloc_error_of(op, e).into())
}

/// The backward rule of [`layer`]: one gradient per recorded input (x, h0, c0 when
/// given, w_ih, w_hh, the biases when given).
fn layer_backward<B: Backend>(k: &Kept<B>, g: &Tensor<B>) -> Result<Vec<Option<Tensor<B>>>> {
    let d = k.dims;
    let op = k.cell.layer_name();
    let be = g.backend();
    let (t, bh, gh) = (d.t, d.bh(), d.gh());
    let shape = CellShape {
        batch: d.b,
        hidden: d.h,
    };
    let zeros = |n: usize| zeros_of(be, op, n);
    let gv = values(g)?;
    let y = values(k.out.get()?)?;
    let h0 = values(k.h0.get()?)?;
    let c0 = match &k.c0 {
        Some(c) => values(c.get()?)?,
        None => zeros(bh)?,
    };
    let w_hh = values(k.w_hh.get()?)?;
    // The state before step `tt` (in time order): h0 / c0 for the first processed step.
    let prev = |tt: usize| -> Option<usize> {
        if d.reverse {
            (tt + 1 < t).then_some(tt + 1)
        } else {
            tt.checked_sub(1)
        }
    };
    let mut da = zeros(t * d.b * gh)?;
    let mut dhg_all = zeros(if k.cell == Cell::Gru { t * d.b * gh } else { 0 })?;
    let mut dh_next = zeros(bh)?;
    let mut dc_next = if k.cell == Cell::Lstm {
        let mut c = zeros(bh)?;
        copy(be, part::<B>(&gv, t * bh, bh), B::view_mut(&mut c))?;
        c
    } else {
        zeros(0)?
    };
    let mut dc_prev = zeros(bh)?;
    let mut dh_direct = zeros(bh)?;
    let mut m = zeros(bh)?;
    for s in (0..t).rev() {
        let tt = d.time(s);
        let gates = part::<B>(&k.gates, tt * 4 * bh, 4 * bh);
        let dy = part::<B>(&gv, tt * bh, bh);
        match k.cell {
            Cell::Lstm => {
                let c_prev = match prev(tt) {
                    Some(p) => part::<B>(&k.cs, p * bh, bh),
                    None => B::view(&c0),
                };
                be.lstm_cell_backward(
                    shape,
                    LstmCellGradInputs {
                        gates,
                        c_prev,
                        c: part::<B>(&k.cs, tt * bh, bh),
                        dy,
                        dh_next: B::view(&dh_next),
                        dc_next: B::view(&dc_next),
                    },
                    LstmCellGradOutputs {
                        dgates: part_mut::<B>(&mut da, tt * d.b * gh, d.b * gh),
                        dc_prev: B::view_mut(&mut dc_prev),
                    },
                )?;
                std::mem::swap(&mut dc_next, &mut dc_prev);
                gemm(
                    be,
                    (d.b, gh, d.h),
                    part::<B>(&da, tt * d.b * gh, d.b * gh),
                    [gh, 1],
                    B::view(&w_hh),
                    [d.h, 1],
                    B::view_mut(&mut dh_next),
                )?;
            }
            Cell::Gru => {
                let h_prev = match prev(tt) {
                    Some(p) => part::<B>(&y, p * bh, bh),
                    None => B::view(&h0),
                };
                be.gru_cell_backward(
                    shape,
                    GruCellGradInputs {
                        gates,
                        h_prev,
                        dy,
                        dh_next: B::view(&dh_next),
                    },
                    GruCellGradOutputs {
                        dxg: part_mut::<B>(&mut da, tt * d.b * gh, d.b * gh),
                        dhg: part_mut::<B>(&mut dhg_all, tt * d.b * gh, d.b * gh),
                        dh_prev: B::view_mut(&mut dh_direct),
                    },
                )?;
                let dhg_t = part::<B>(&dhg_all, tt * d.b * gh, d.b * gh);
                let (wv, mv) = (B::view(&w_hh), B::view_mut(&mut m));
                gemm(be, (d.b, gh, d.h), dhg_t, [gh, 1], wv, [d.h, 1], mv)?;
                let l = Layout::contiguous([bh]);
                let (dd, mv) = (B::view(&dh_direct), B::view(&m));
                be.binary(BinaryOp::Add, dd, &l, mv, &l, B::view_mut(&mut dh_next))?;
            }
        }
    }
    let dh_all = if k.cell == Cell::Gru { &dhg_all } else { &da };
    let [need_x, need_h0, need_c0, need_wih, need_whh, need_bih, need_bhh] = k.need;
    let mut grads: Vec<Option<Tensor<B>>> = Vec::new();
    // x: Δ · W_ih.
    grads.push(if need_x {
        let w_ih = values(k.w_ih.get()?)?;
        Some(new_tensor(be, op, Shape::from([t, d.b, d.i]), |dx| {
            let (dv, wv) = (B::view(&da), B::view(&w_ih));
            gemm(be, (t * d.b, gh, d.i), dv, [gh, 1], wv, [d.i, 1], dx)
        })?)
    } else {
        None
    });
    grads.push(if need_h0 {
        Some(Tensor::leaf_from_storage(be, dh_next, [d.b, d.h].into())?)
    } else {
        None
    });
    if k.c0.is_some() {
        grads.push(if need_c0 {
            Some(Tensor::leaf_from_storage(be, dc_next, [d.b, d.h].into())?)
        } else {
            None
        });
    }
    // W_ih: Δᵀ · X over the T·B rows in time order.
    grads.push(if need_wih {
        let xs = values(k.x.get()?)?;
        Some(new_tensor(be, op, Shape::from([gh, d.i]), |dw| {
            let (dv, xv) = (B::view(&da), B::view(&xs));
            gemm(be, (gh, t * d.b, d.i), dv, [1, gh], xv, [d.i, 1], dw)
        })?)
    } else {
        None
    });
    // W_hh: Δ_hᵀ · H_prev, H_prev the state before each step, in time order.
    grads.push(if need_whh {
        let mut h_prev = zeros(t * bh)?;
        let row = Layout::contiguous([bh]);
        for tt in 0..t {
            let src = match prev(tt) {
                Some(p) => part::<B>(&y, p * bh, bh),
                None => B::view(&h0),
            };
            copy_as(be, src, &row, part_mut::<B>(&mut h_prev, tt * bh, bh))?;
        }
        Some(new_tensor(be, op, Shape::from([gh, d.h]), |dw| {
            gemm(
                be,
                (gh, t * d.b, d.h),
                B::view(dh_all),
                [1, gh],
                B::view(&h_prev),
                [d.h, 1],
                dw,
            )
        })?)
    } else {
        None
    });
    // Biases: Σ64 of the rows of Δ (b_ih) and Δ_h (b_hh), in time order.
    let bias_sum = |rows: &B::Storage| -> Result<Tensor<B>> {
        let mut copied = be.uninit(t * d.b * gh)?;
        copy(be, B::view(rows), B::view_mut(&mut copied))?;
        let m = Tensor::leaf_from_storage(be, copied, [t * d.b, gh].into())?;
        sum_unrecorded(&m, &[true, false])
    };
    if k.has_bias[0] {
        grads.push(if need_bih { Some(bias_sum(&da)?) } else { None });
    }
    if k.has_bias[1] {
        grads.push(if need_bhh {
            Some(bias_sum(dh_all)?)
        } else {
            None
        });
    }
    Ok(grads)
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
