//! One layer and direction of a recurrent layer, forward: the weights, the cell kind,
//! the sizes, the input projection and the step loop, and what the backward rule keeps.

use super::*;

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

/// The two cell types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cell {
    Lstm,
    Gru,
}

impl Cell {
    /// Gate blocks of the products.
    pub(super) fn gates(self) -> usize {
        match self {
            Cell::Lstm => 4,
            Cell::Gru => 3,
        }
    }

    /// The public operator's name (errors).
    pub(super) fn name(self) -> &'static str {
        match self {
            Cell::Lstm => "lstm",
            Cell::Gru => "gru",
        }
    }

    /// The name of one layer's record.
    pub(super) fn layer_name(self) -> &'static str {
        match self {
            Cell::Lstm => "lstm_layer",
            Cell::Gru => "gru_layer",
        }
    }
}

/// Sizes of one layer and direction.
#[derive(Clone, Copy, Debug)]
pub(super) struct Dims {
    pub(super) t: usize,
    pub(super) b: usize,
    pub(super) i: usize,
    pub(super) h: usize,
    pub(super) g: usize,
    pub(super) reverse: bool,
}

impl Dims {
    /// The time index of processing step `s`.
    pub(super) fn time(&self, s: usize) -> usize {
        if self.reverse {
            self.t - 1 - s
        } else {
            s
        }
    }

    pub(super) fn bh(&self) -> usize {
        self.b * self.h
    }

    pub(super) fn gh(&self) -> usize {
        self.g * self.h
    }
}

/// `out = a · b` for row-major-addressed `a` (`m × k`, strides `sa`) and `b` (`k × n`,
/// strides `sb`): one canonical GEMM on the backend.
#[allow(clippy::too_many_arguments)]
pub(super) fn gemm<B: Backend>(
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
pub(super) fn values<B: Backend>(t: &Tensor<B>) -> Result<B::Storage> {
    let be = t.backend();
    let n = t.numel();
    let mut out = be.uninit(n)?;
    t.with_contiguous(|v| copy(be, v, B::view_mut(&mut out)))??;
    Ok(out)
}

/// Copies `src` into `dst` (same length), bits unchanged.
pub(super) fn copy<B: Backend>(be: &B, src: ViewOf<'_, B>, dst: ViewMutOf<'_, B>) -> Result<()> {
    copy_as(be, src, &Layout::contiguous([src.len()]), dst)
}

/// [`copy`] with the contiguous layout of `src` given (built once for the copies of every
/// time step).
pub(super) fn copy_as<B: Backend>(
    be: &B,
    src: ViewOf<'_, B>,
    layout: &Layout,
    dst: ViewMutOf<'_, B>,
) -> Result<()> {
    Ok(be.copy_strided(src, layout, dst)?)
}

/// Elements `start .. start + len` of `s`.
pub(super) fn part<B: Backend>(s: &B::Storage, start: usize, len: usize) -> ViewOf<'_, B> {
    B::slice(B::view(s), start..start + len)
}

/// Elements `start .. start + len` of `s`, exclusively.
pub(super) fn part_mut<B: Backend>(
    s: &mut B::Storage,
    start: usize,
    len: usize,
) -> ViewMutOf<'_, B> {
    B::slice_mut(B::view_mut(s), start..start + len)
}

/// What the backward rule of one layer keeps.
pub(super) struct Kept<B: Backend> {
    pub(super) dims: Dims,
    pub(super) cell: Cell,
    pub(super) x: Saved<B>,
    pub(super) h0: Saved<B>,
    pub(super) c0: Option<Saved<B>>,
    pub(super) w_ih: Saved<B>,
    pub(super) w_hh: Saved<B>,
    /// The layer's packed output (`y`, then `c_n` for the LSTM).
    pub(super) out: Saved<B>,
    /// The kept gates of every step, `[T, B, 4·H]` in time order.
    pub(super) gates: B::Storage,
    /// The LSTM's cell states `c_t`, `[T, B, H]` in time order.
    pub(super) cs: B::Storage,
    /// Which inputs need a gradient: x, h0, c0, w_ih, w_hh, b_ih, b_hh.
    pub(super) need: [bool; 7],
    pub(super) has_bias: [bool; 2],
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
pub(super) fn zeros_of<B: Backend>(be: &B, op: &'static str, n: usize) -> Result<B::Storage> {
    be.zeros(n)
        .map_err(|e| crate::ops::alloc_error_of(op, e).into())
}
