//! The recurrent cell kernels of [`Backend`]: one step of an LSTM or GRU layer, forward
//! and backward, element-wise over `batch × hidden` units.
//!
//! The matrix products of a recurrent layer (the input projection of all steps, the
//! `[batch, hidden] × [hidden, gates·hidden]` product of each step) are the backend's
//! [`Backend::matmul`]; these kernels do everything between two products: the gate sums,
//! the activations and the cell update, and their backward rules. The order of every
//! operation is fixed by `docs/recurrent.md` (normative); the functions of this module
//! are that text written as calls of the backend's element-wise kernels
//! ([`Backend::binary`], [`Backend::unary`], [`Backend::unary_backward`],
//! [`Backend::copy_strided`]). They are the default bodies of the trait methods, so a
//! backend that does not override them gets the reference bits from its own element-wise
//! kernels; a backend that fuses them must reproduce these bits (in exact mode; in fast
//! mode those of its fast element-wise kernels).
//!
//! Layouts: every buffer is contiguous and row-major. A gate buffer holds, per batch row,
//! the gate blocks one after the other, each `hidden` wide: LSTM `i, f, g, o` (PyTorch's
//! order), GRU `r, z, n`. The activations an LSTM step keeps for its backward pass are
//! `[batch, 4·hidden]` (`i, f, g, o` after their activation); a GRU step keeps
//! `[batch, 4·hidden]` too: `r, z, n` and `hn = h·W_hnᵀ ⊕ b_hn`, which the gradient of `r`
//! needs.
//!
//! The argument checks ([`check_lstm_cell`] and its siblings) run once, in the kernels
//! of [`Backend`], before any implementation: lengths must match the [`CellShape`]
//! (computed in checked arithmetic). The reference definitions here therefore take
//! [`Checked`] arguments.

use crate::backend::{
    Backend, Checked, GruCellArgs, GruCellBackwardArgs, LstmCellArgs, LstmCellBackwardArgs,
    ViewMutOf, ViewOf,
};
use crate::check::{check_len, checked_mul};
use crate::error::Result;
use crate::ops::{BinaryOp, UnaryOp};
use crate::shape::{Layout, Shape};
use crate::view::{HostViews, ViewFamily, ViewLen};
use alloc::vec;

/// The sizes of one recurrent step: `batch` rows of `hidden` units.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CellShape {
    /// Rows (batch entries) of the step.
    pub batch: usize,
    /// Hidden units per row.
    pub hidden: usize,
}

impl CellShape {
    /// `batch · hidden` and `batch · gates · hidden`, in checked arithmetic.
    fn sizes(&self, op: &'static str, gates: usize) -> Result<(usize, usize)> {
        let bh = checked_mul(op, "hidden", self.batch, self.hidden)?;
        let gh = checked_mul(op, "hidden", gates, self.hidden)?;
        Ok((bh, checked_mul(op, "batch", self.batch, gh)?))
    }
}

/// The inputs of [`Backend::lstm_cell`].
#[derive(Clone, Copy, Debug)]
pub struct LstmCellInputs<'a, F: ViewFamily = HostViews> {
    /// `x_t · W_ihᵀ`, `[batch, 4·hidden]` (blocks `i, f, g, o`).
    pub xg: F::View<'a>,
    /// `h_{t−1} · W_hhᵀ`, `[batch, 4·hidden]`.
    pub hg: F::View<'a>,
    /// `b_ih`, `[4·hidden]`, if the layer has input biases.
    pub bias_ih: Option<F::View<'a>>,
    /// `b_hh`, `[4·hidden]`, if the layer has recurrent biases.
    pub bias_hh: Option<F::View<'a>>,
    /// The previous cell state `c_{t−1}`, `[batch, hidden]`.
    pub c_prev: F::View<'a>,
}

/// The outputs of [`Backend::lstm_cell`] (every element is written).
#[derive(Debug)]
pub struct LstmCellOutputs<'a, F: ViewFamily = HostViews> {
    /// The activated gates `i, f, g, o`, `[batch, 4·hidden]` (kept for the backward pass).
    pub gates: F::ViewMut<'a>,
    /// The new cell state `c_t`, `[batch, hidden]`.
    pub c: F::ViewMut<'a>,
    /// The new hidden state `h_t`, `[batch, hidden]`.
    pub h: F::ViewMut<'a>,
}

/// The inputs of [`Backend::lstm_cell_backward`].
#[derive(Clone, Copy, Debug)]
pub struct LstmCellGradInputs<'a, F: ViewFamily = HostViews> {
    /// The activated gates of the step, `[batch, 4·hidden]`.
    pub gates: F::View<'a>,
    /// `c_{t−1}`, `[batch, hidden]`.
    pub c_prev: F::View<'a>,
    /// `c_t`, `[batch, hidden]`.
    pub c: F::View<'a>,
    /// The gradient of the step's output `h_t` from the layer's output, `[batch, hidden]`.
    pub dy: F::View<'a>,
    /// The gradient of `h_t` from the next step (`δ_{t+1} · W_hh`), `[batch, hidden]`.
    pub dh_next: F::View<'a>,
    /// The gradient of `c_t` from the next step (or from `c_n`), `[batch, hidden]`.
    pub dc_next: F::View<'a>,
}

/// The outputs of [`Backend::lstm_cell_backward`] (every element is written).
#[derive(Debug)]
pub struct LstmCellGradOutputs<'a, F: ViewFamily = HostViews> {
    /// The gradient `δ_t` of the gate pre-activations, `[batch, 4·hidden]`.
    pub dgates: F::ViewMut<'a>,
    /// The gradient of `c_{t−1}`, `[batch, hidden]`.
    pub dc_prev: F::ViewMut<'a>,
}

/// The inputs of [`Backend::gru_cell`].
#[derive(Clone, Copy, Debug)]
pub struct GruCellInputs<'a, F: ViewFamily = HostViews> {
    /// `x_t · W_ihᵀ`, `[batch, 3·hidden]` (blocks `r, z, n`).
    pub xg: F::View<'a>,
    /// `h_{t−1} · W_hhᵀ`, `[batch, 3·hidden]`.
    pub hg: F::View<'a>,
    /// `b_ih`, `[3·hidden]`, if the layer has input biases.
    pub bias_ih: Option<F::View<'a>>,
    /// `b_hh`, `[3·hidden]`, if the layer has recurrent biases.
    pub bias_hh: Option<F::View<'a>>,
    /// `h_{t−1}`, `[batch, hidden]`.
    pub h_prev: F::View<'a>,
}

/// The outputs of [`Backend::gru_cell`] (every element is written).
#[derive(Debug)]
pub struct GruCellOutputs<'a, F: ViewFamily = HostViews> {
    /// `r, z, n` and `hn = (h_{t−1}·W_hnᵀ) ⊕ b_hn`, `[batch, 4·hidden]` (kept for the
    /// backward pass).
    pub gates: F::ViewMut<'a>,
    /// The new hidden state `h_t`, `[batch, hidden]`.
    pub h: F::ViewMut<'a>,
}

/// The inputs of [`Backend::gru_cell_backward`].
#[derive(Clone, Copy, Debug)]
pub struct GruCellGradInputs<'a, F: ViewFamily = HostViews> {
    /// The gates kept by the forward step, `[batch, 4·hidden]`.
    pub gates: F::View<'a>,
    /// `h_{t−1}`, `[batch, hidden]`.
    pub h_prev: F::View<'a>,
    /// The gradient of `h_t` from the layer's output, `[batch, hidden]`.
    pub dy: F::View<'a>,
    /// The gradient of `h_t` from the next step, `[batch, hidden]`.
    pub dh_next: F::View<'a>,
}

/// The outputs of [`Backend::gru_cell_backward`] (every element is written).
#[derive(Debug)]
pub struct GruCellGradOutputs<'a, F: ViewFamily = HostViews> {
    /// The gradient of `x_t·W_ihᵀ ⊕ b_ih`, `[batch, 3·hidden]`.
    pub dxg: F::ViewMut<'a>,
    /// The gradient of `h_{t−1}·W_hhᵀ ⊕ b_hh`, `[batch, 3·hidden]` (the `n` block is
    /// the `xg` one times `r`).
    pub dhg: F::ViewMut<'a>,
    /// The direct part of the gradient of `h_{t−1}`: `dh ⊗ z`, `[batch, hidden]`.
    pub dh_prev: F::ViewMut<'a>,
}

fn check_bias(op: &'static str, arg: &'static str, b: Option<usize>, len: usize) -> Result<()> {
    match b {
        Some(b) => check_len(op, arg, b, len),
        None => Ok(()),
    }
}

/// Checks the buffers of [`Backend::lstm_cell`] against `shape`.
pub fn check_lstm_cell<F: ViewFamily>(
    shape: CellShape,
    i: &LstmCellInputs<'_, F>,
    o: &LstmCellOutputs<'_, F>,
) -> Result<()> {
    let op = "lstm_cell";
    let (bh, bg) = shape.sizes(op, 4)?;
    check_len(op, "xg", i.xg.len(), bg)?;
    check_len(op, "hg", i.hg.len(), bg)?;
    check_bias(op, "bias_ih", i.bias_ih.map(|b| b.len()), 4 * shape.hidden)?;
    check_bias(op, "bias_hh", i.bias_hh.map(|b| b.len()), 4 * shape.hidden)?;
    check_len(op, "c_prev", i.c_prev.len(), bh)?;
    check_len(op, "gates", o.gates.len(), bg)?;
    check_len(op, "c", o.c.len(), bh)?;
    check_len(op, "h", o.h.len(), bh)
}

/// Checks the buffers of [`Backend::lstm_cell_backward`] against `shape`.
pub fn check_lstm_cell_backward<F: ViewFamily>(
    shape: CellShape,
    i: &LstmCellGradInputs<'_, F>,
    o: &LstmCellGradOutputs<'_, F>,
) -> Result<()> {
    let op = "lstm_cell_backward";
    let (bh, bg) = shape.sizes(op, 4)?;
    check_len(op, "gates", i.gates.len(), bg)?;
    for (arg, len) in [
        ("c_prev", i.c_prev.len()),
        ("c", i.c.len()),
        ("dy", i.dy.len()),
        ("dh_next", i.dh_next.len()),
        ("dc_next", i.dc_next.len()),
        ("dc_prev", o.dc_prev.len()),
    ] {
        check_len(op, arg, len, bh)?;
    }
    check_len(op, "dgates", o.dgates.len(), bg)
}

/// Checks the buffers of [`Backend::gru_cell`] against `shape`.
pub fn check_gru_cell<F: ViewFamily>(
    shape: CellShape,
    i: &GruCellInputs<'_, F>,
    o: &GruCellOutputs<'_, F>,
) -> Result<()> {
    let op = "gru_cell";
    let (bh, bg) = shape.sizes(op, 3)?;
    let (_, b4) = shape.sizes(op, 4)?;
    check_len(op, "xg", i.xg.len(), bg)?;
    check_len(op, "hg", i.hg.len(), bg)?;
    check_bias(op, "bias_ih", i.bias_ih.map(|b| b.len()), 3 * shape.hidden)?;
    check_bias(op, "bias_hh", i.bias_hh.map(|b| b.len()), 3 * shape.hidden)?;
    check_len(op, "h_prev", i.h_prev.len(), bh)?;
    check_len(op, "gates", o.gates.len(), b4)?;
    check_len(op, "h", o.h.len(), bh)
}

/// Checks the buffers of [`Backend::gru_cell_backward`] against `shape`.
pub fn check_gru_cell_backward<F: ViewFamily>(
    shape: CellShape,
    i: &GruCellGradInputs<'_, F>,
    o: &GruCellGradOutputs<'_, F>,
) -> Result<()> {
    let op = "gru_cell_backward";
    let (bh, bg) = shape.sizes(op, 3)?;
    let (_, b4) = shape.sizes(op, 4)?;
    check_len(op, "gates", i.gates.len(), b4)?;
    for (arg, len) in [
        ("h_prev", i.h_prev.len()),
        ("dy", i.dy.len()),
        ("dh_next", i.dh_next.len()),
        ("dh_prev", o.dh_prev.len()),
    ] {
        check_len(op, arg, len, bh)?;
    }
    check_len(op, "dxg", o.dxg.len(), bg)?;
    check_len(op, "dhg", o.dhg.len(), bg)
}

// ----- the reference definitions ----------------------------------------------------------

/// The `[rows, cols]` view with row stride `stride` starting at `offset` (a gate block of
/// a gate buffer, or a whole contiguous matrix).
fn block(rows: usize, cols: usize, stride: usize, offset: usize) -> Layout {
    Layout {
        shape: Shape::from([rows, cols]),
        strides: vec![stride, 1],
        offset,
    }
}

/// The `[rows, cols]` view of a vector of `cols` elements starting at `offset`, repeated
/// on every row (a gate block of a bias).
fn repeated(rows: usize, cols: usize, offset: usize) -> Layout {
    Layout {
        shape: Shape::from([rows, cols]),
        strides: vec![0, 1],
        offset,
    }
}

/// A contiguous `[rows, cols]` matrix.
fn mat(rows: usize, cols: usize) -> Layout {
    block(rows, cols, cols, 0)
}

/// A scratch buffer of `n` elements (zero-filled, fallible).
fn scratch<B: Backend>(b: &B, n: usize) -> Result<B::Storage> {
    b.zeros(n)
}

/// `out = x ⊕ bias` (bias repeated on every row), or `x` itself without a bias (as
/// `x ⊗ 1`, which keeps every value and writes NaN as the mode's kernels do).
fn add_bias<B: Backend>(
    b: &B,
    x: ViewOf<'_, B>,
    bias: Option<ViewOf<'_, B>>,
    rows: usize,
    cols: usize,
    out: ViewMutOf<'_, B>,
) -> Result<()> {
    match bias {
        Some(bias) => b.binary(
            BinaryOp::Add,
            x,
            &mat(rows, cols),
            bias,
            &repeated(rows, cols, 0),
            out,
        ),
        None => b.unary(UnaryOp::MulScalar(1.0), x, out),
    }
}

/// `op` applied to gate block `k` (of `blocks`, each `hidden` wide) of every row of `src`
/// (a `[rows, blocks·hidden]` buffer), written to block `k` of `dst` (same layout).
fn activate_block<B: Backend>(
    b: &B,
    op: UnaryOp,
    src: ViewOf<'_, B>,
    mut dst: ViewMutOf<'_, B>,
    shape: CellShape,
    width: usize,
    k: usize,
) -> Result<()> {
    let h = shape.hidden;
    for r in 0..shape.batch {
        let s = r * width + k * h;
        let d = B::slice_mut(B::reborrow(&mut dst), s..s + h);
        b.unary(op, B::slice(src, s..s + h), d)?;
    }
    Ok(())
}

/// The backward rule of `op` (which reads its output `y`) on gate block `ky` of `y` (rows
/// of `wy` elements) with the gradient `g` (`[rows, hidden]`), written to block `kd` of
/// `dst` (rows of `wd` elements).
#[allow(clippy::too_many_arguments)]
fn backward_block<B: Backend>(
    b: &B,
    op: UnaryOp,
    y: ViewOf<'_, B>,
    wy: usize,
    ky: usize,
    g: ViewOf<'_, B>,
    mut dst: ViewMutOf<'_, B>,
    wd: usize,
    kd: usize,
    shape: CellShape,
) -> Result<()> {
    let h = shape.hidden;
    for r in 0..shape.batch {
        let (sy, sd, sg) = (r * wy + ky * h, r * wd + kd * h, r * h);
        let yr = B::slice(y, sy..sy + h);
        let d = B::slice_mut(B::reborrow(&mut dst), sd..sd + h);
        b.unary_backward(op, yr, yr, B::slice(g, sg..sg + h), d)?;
    }
    Ok(())
}

/// Copies row `r` of the contiguous `[rows, h]` buffer `src` into elements
/// `at .. at + h` of `dst` (bits unchanged).
fn copy_row<B: Backend>(
    b: &B,
    src: ViewOf<'_, B>,
    r: usize,
    h: usize,
    dst: &mut ViewMutOf<'_, B>,
    at: usize,
) -> Result<()> {
    let d = B::slice_mut(B::reborrow(dst), at..at + h);
    b.copy_strided(B::slice(src, r * h..(r + 1) * h), &mat(1, h), d)
}

/// The reference definition of [`Backend::lstm_cell`] (`docs/recurrent.md` §2), written
/// with the backend's element-wise kernels.
pub fn lstm_cell<B: Backend>(b: &B, args: Checked<LstmCellArgs<'_, B::Views>>) -> Result<()> {
    let LstmCellArgs {
        shape,
        inputs: i,
        outputs: mut o,
    } = args.into_inner();
    let (n, h) = (shape.batch, shape.hidden);
    let w = 4 * h;
    let m = mat(n, w);
    let mut px = scratch(b, n * w)?;
    let mut ph = scratch(b, n * w)?;
    add_bias(b, i.xg, i.bias_ih, n, w, B::view_mut(&mut px))?;
    add_bias(b, i.hg, i.bias_hh, n, w, B::view_mut(&mut ph))?;
    let mut pre = scratch(b, n * w)?;
    b.binary(
        BinaryOp::Add,
        B::view(&px),
        &m,
        B::view(&ph),
        &m,
        B::view_mut(&mut pre),
    )?;
    for (k, act) in [
        (0, UnaryOp::Sigmoid),
        (1, UnaryOp::Sigmoid),
        (2, UnaryOp::Tanh),
        (3, UnaryOp::Sigmoid),
    ] {
        activate_block(
            b,
            act,
            B::view(&pre),
            B::reborrow(&mut o.gates),
            shape,
            w,
            k,
        )?;
    }
    let g = B::freeze(&o.gates);
    let mut fc = scratch(b, n * h)?;
    let mut ig = scratch(b, n * h)?;
    b.binary(
        BinaryOp::Mul,
        g,
        &block(n, h, w, h),
        i.c_prev,
        &mat(n, h),
        B::view_mut(&mut fc),
    )?;
    b.binary(
        BinaryOp::Mul,
        g,
        &block(n, h, w, 0),
        g,
        &block(n, h, w, 2 * h),
        B::view_mut(&mut ig),
    )?;
    b.binary(
        BinaryOp::Add,
        B::view(&fc),
        &mat(n, h),
        B::view(&ig),
        &mat(n, h),
        B::reborrow(&mut o.c),
    )?;
    let mut tc = scratch(b, n * h)?;
    b.unary(UnaryOp::Tanh, B::freeze(&o.c), B::view_mut(&mut tc))?;
    b.binary(
        BinaryOp::Mul,
        g,
        &block(n, h, w, 3 * h),
        B::view(&tc),
        &mat(n, h),
        o.h,
    )
}

/// The reference definition of [`Backend::lstm_cell_backward`] (`docs/recurrent.md` §2).
pub fn lstm_cell_backward<B: Backend>(
    b: &B,
    args: Checked<LstmCellBackwardArgs<'_, B::Views>>,
) -> Result<()> {
    let LstmCellBackwardArgs {
        shape,
        inputs: i,
        outputs: mut o,
    } = args.into_inner();
    let (n, h) = (shape.batch, shape.hidden);
    let w = 4 * h;
    let mh = mat(n, h);
    let gate = |k: usize| block(n, h, w, k * h);
    let mut dh = scratch(b, n * h)?;
    b.binary(
        BinaryOp::Add,
        i.dy,
        &mh,
        i.dh_next,
        &mh,
        B::view_mut(&mut dh),
    )?;
    let mut tc = scratch(b, n * h)?;
    b.unary(UnaryOp::Tanh, i.c, B::view_mut(&mut tc))?;
    let (dh, tc) = (B::view(&dh), B::view(&tc));
    // dc = dc_next ⊕ tanh'((dh ⊗ o), tc)
    let mut u = scratch(b, n * h)?;
    b.binary(
        BinaryOp::Mul,
        dh,
        &mh,
        i.gates,
        &gate(3),
        B::view_mut(&mut u),
    )?;
    let mut v = scratch(b, n * h)?;
    b.unary_backward(UnaryOp::Tanh, tc, tc, B::view(&u), B::view_mut(&mut v))?;
    let mut dc = scratch(b, n * h)?;
    b.binary(
        BinaryOp::Add,
        i.dc_next,
        &mh,
        B::view(&v),
        &mh,
        B::view_mut(&mut dc),
    )?;
    let dc = B::view(&dc);
    // The four gate gradients: (factor ⊗ other) through the activation's backward rule,
    // in the order o, i, f, g.
    let mut t = scratch(b, n * h)?;
    let dg = &mut o.dgates;
    let gates = B::shorten(i.gates);
    let (sig, tanh) = (UnaryOp::Sigmoid, UnaryOp::Tanh);
    for (factor, other, lo, k, act) in [
        (dh, tc, mat(n, h), 3, sig),
        (dc, gates, gate(2), 0, sig),
        (dc, B::shorten(i.c_prev), mat(n, h), 1, sig),
        (dc, gates, gate(0), 2, tanh),
    ] {
        b.binary(BinaryOp::Mul, factor, &mh, other, &lo, B::view_mut(&mut t))?;
        backward_block(
            b,
            act,
            gates,
            w,
            k,
            B::view(&t),
            B::reborrow(dg),
            w,
            k,
            shape,
        )?;
    }
    b.binary(BinaryOp::Mul, dc, &mh, i.gates, &gate(1), o.dc_prev)
}

/// The reference definition of [`Backend::gru_cell`] (`docs/recurrent.md` §3).
pub fn gru_cell<B: Backend>(b: &B, args: Checked<GruCellArgs<'_, B::Views>>) -> Result<()> {
    let GruCellArgs {
        shape,
        inputs: i,
        outputs: mut o,
    } = args.into_inner();
    let (n, h) = (shape.batch, shape.hidden);
    let (w3, w4) = (3 * h, 4 * h);
    let mh = mat(n, h);
    let mut px = scratch(b, n * w3)?;
    let mut ph = scratch(b, n * w3)?;
    add_bias(b, i.xg, i.bias_ih, n, w3, B::view_mut(&mut px))?;
    add_bias(b, i.hg, i.bias_hh, n, w3, B::view_mut(&mut ph))?;
    let (px, ph) = (B::view(&px), B::view(&ph));
    // r and z: σ(px ⊕ ph) on the first two blocks.
    let mut pre = scratch(b, n * 2 * h)?;
    b.binary(
        BinaryOp::Add,
        px,
        &block(n, 2 * h, w3, 0),
        ph,
        &block(n, 2 * h, w3, 0),
        B::view_mut(&mut pre),
    )?;
    for r in 0..n {
        let (s, d) = (r * 2 * h, r * w4);
        b.unary(
            UnaryOp::Sigmoid,
            B::slice(B::view(&pre), s..s + 2 * h),
            B::slice_mut(B::reborrow(&mut o.gates), d..d + 2 * h),
        )?;
    }
    // hn, kept in block 3.
    let mut hn = scratch(b, n * h)?;
    b.copy_strided(ph, &block(n, h, w3, 2 * h), B::view_mut(&mut hn))?;
    for r in 0..n {
        copy_row(b, B::view(&hn), r, h, &mut o.gates, r * w4 + 3 * h)?;
    }
    // n = tanh(px_n ⊕ (r ⊗ hn)).
    let mut rh = scratch(b, n * h)?;
    b.binary(
        BinaryOp::Mul,
        B::freeze(&o.gates),
        &block(n, h, w4, 0),
        B::view(&hn),
        &mh,
        B::view_mut(&mut rh),
    )?;
    let mut an = scratch(b, n * h)?;
    b.binary(
        BinaryOp::Add,
        px,
        &block(n, h, w3, 2 * h),
        B::view(&rh),
        &mh,
        B::view_mut(&mut an),
    )?;
    activate_block(
        b,
        UnaryOp::Tanh,
        B::view(&an),
        B::view_mut(&mut rh),
        CellShape {
            batch: n,
            hidden: h,
        },
        h,
        0,
    )?;
    for r in 0..n {
        copy_row(b, B::view(&rh), r, h, &mut o.gates, r * w4 + 2 * h)?;
    }
    // h = n ⊕ (z ⊗ (h_prev ⊖ n)).
    let nn = B::view(&rh);
    let mut d = scratch(b, n * h)?;
    b.binary(BinaryOp::Sub, i.h_prev, &mh, nn, &mh, B::view_mut(&mut d))?;
    let mut e = scratch(b, n * h)?;
    b.binary(
        BinaryOp::Mul,
        B::freeze(&o.gates),
        &block(n, h, w4, h),
        B::view(&d),
        &mh,
        B::view_mut(&mut e),
    )?;
    b.binary(BinaryOp::Add, nn, &mh, B::view(&e), &mh, o.h)
}

/// The reference definition of [`Backend::gru_cell_backward`] (`docs/recurrent.md` §3).
pub fn gru_cell_backward<B: Backend>(
    b: &B,
    args: Checked<GruCellBackwardArgs<'_, B::Views>>,
) -> Result<()> {
    let GruCellBackwardArgs {
        shape,
        inputs: i,
        outputs: mut o,
    } = args.into_inner();
    let (n, h) = (shape.batch, shape.hidden);
    let (w3, w4) = (3 * h, 4 * h);
    let mh = mat(n, h);
    let gate = |k: usize| block(n, h, w4, k * h);
    let mut dh = scratch(b, n * h)?;
    b.binary(
        BinaryOp::Add,
        i.dy,
        &mh,
        i.dh_next,
        &mh,
        B::view_mut(&mut dh),
    )?;
    let dh = B::view(&dh);
    b.binary(BinaryOp::Mul, dh, &mh, i.gates, &gate(1), o.dh_prev)?;
    // dn = dh ⊗ (1 ⊖ z); dz = dh ⊗ (h_prev ⊖ n).
    let one = b.storage_from_vec(vec![1.0f32])?;
    let mut omz = scratch(b, n * h)?;
    b.binary(
        BinaryOp::Sub,
        B::view(&one),
        &repeated_scalar(n, h),
        i.gates,
        &gate(1),
        B::view_mut(&mut omz),
    )?;
    let mut dn = scratch(b, n * h)?;
    b.binary(
        BinaryOp::Mul,
        dh,
        &mh,
        B::view(&omz),
        &mh,
        B::view_mut(&mut dn),
    )?;
    let mut hmn = scratch(b, n * h)?;
    b.binary(
        BinaryOp::Sub,
        i.h_prev,
        &mh,
        i.gates,
        &gate(2),
        B::view_mut(&mut hmn),
    )?;
    let mut dz = scratch(b, n * h)?;
    b.binary(
        BinaryOp::Mul,
        dh,
        &mh,
        B::view(&hmn),
        &mh,
        B::view_mut(&mut dz),
    )?;
    // da_n (block 2 of dxg), da_z (block 1 of both), da_r (block 0 of both).
    let (sig, tanh) = (UnaryOp::Sigmoid, UnaryOp::Tanh);
    let dxg = &mut o.dxg;
    backward_block(
        b,
        tanh,
        i.gates,
        w4,
        2,
        B::view(&dn),
        B::reborrow(dxg),
        w3,
        2,
        shape,
    )?;
    backward_block(
        b,
        sig,
        i.gates,
        w4,
        1,
        B::view(&dz),
        B::reborrow(dxg),
        w3,
        1,
        shape,
    )?;
    let mut dr = scratch(b, n * h)?;
    b.binary(
        BinaryOp::Mul,
        B::freeze(dxg),
        &block(n, h, w3, 2 * h),
        i.gates,
        &gate(3),
        B::view_mut(&mut dr),
    )?;
    backward_block(
        b,
        sig,
        i.gates,
        w4,
        0,
        B::view(&dr),
        B::reborrow(dxg),
        w3,
        0,
        shape,
    )?;
    // dhg: da_r, da_z as in dxg, and da_n ⊗ r.
    let mut dhn = scratch(b, n * h)?;
    b.binary(
        BinaryOp::Mul,
        B::freeze(dxg),
        &block(n, h, w3, 2 * h),
        i.gates,
        &gate(0),
        B::view_mut(&mut dhn),
    )?;
    for r in 0..n {
        let s = r * w3;
        let d = B::slice_mut(B::reborrow(&mut o.dhg), s..s + 2 * h);
        b.copy_strided(B::slice(B::freeze(dxg), s..s + 2 * h), &mat(1, 2 * h), d)?;
        copy_row(b, B::view(&dhn), r, h, &mut o.dhg, s + 2 * h)?;
    }
    Ok(())
}

/// One scalar repeated over `[rows, cols]` (a constant operand).
fn repeated_scalar(rows: usize, cols: usize) -> Layout {
    Layout {
        shape: Shape::from([rows, cols]),
        strides: vec![0, 0],
        offset: 0,
    }
}
