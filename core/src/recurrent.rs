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
    try_zeroed_vec, Backend, Checked, GruCellArgs, GruCellBackwardArgs, LstmCellArgs,
    LstmCellBackwardArgs,
};
use crate::check::{check_len, checked_mul};
use crate::error::Result;
use crate::ops::{BinaryOp, UnaryOp};
use crate::shape::{Layout, Shape};
use alloc::vec;
use alloc::vec::Vec;

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
pub struct LstmCellInputs<'a> {
    /// `x_t · W_ihᵀ`, `[batch, 4·hidden]` (blocks `i, f, g, o`).
    pub xg: &'a [f32],
    /// `h_{t−1} · W_hhᵀ`, `[batch, 4·hidden]`.
    pub hg: &'a [f32],
    /// `b_ih`, `[4·hidden]`, if the layer has input biases.
    pub bias_ih: Option<&'a [f32]>,
    /// `b_hh`, `[4·hidden]`, if the layer has recurrent biases.
    pub bias_hh: Option<&'a [f32]>,
    /// The previous cell state `c_{t−1}`, `[batch, hidden]`.
    pub c_prev: &'a [f32],
}

/// The outputs of [`Backend::lstm_cell`] (every element is written).
#[derive(Debug)]
pub struct LstmCellOutputs<'a> {
    /// The activated gates `i, f, g, o`, `[batch, 4·hidden]` (kept for the backward pass).
    pub gates: &'a mut [f32],
    /// The new cell state `c_t`, `[batch, hidden]`.
    pub c: &'a mut [f32],
    /// The new hidden state `h_t`, `[batch, hidden]`.
    pub h: &'a mut [f32],
}

/// The inputs of [`Backend::lstm_cell_backward`].
#[derive(Clone, Copy, Debug)]
pub struct LstmCellGradInputs<'a> {
    /// The activated gates of the step, `[batch, 4·hidden]`.
    pub gates: &'a [f32],
    /// `c_{t−1}`, `[batch, hidden]`.
    pub c_prev: &'a [f32],
    /// `c_t`, `[batch, hidden]`.
    pub c: &'a [f32],
    /// The gradient of the step's output `h_t` from the layer's output, `[batch, hidden]`.
    pub dy: &'a [f32],
    /// The gradient of `h_t` from the next step (`δ_{t+1} · W_hh`), `[batch, hidden]`.
    pub dh_next: &'a [f32],
    /// The gradient of `c_t` from the next step (or from `c_n`), `[batch, hidden]`.
    pub dc_next: &'a [f32],
}

/// The outputs of [`Backend::lstm_cell_backward`] (every element is written).
#[derive(Debug)]
pub struct LstmCellGradOutputs<'a> {
    /// The gradient `δ_t` of the gate pre-activations, `[batch, 4·hidden]`.
    pub dgates: &'a mut [f32],
    /// The gradient of `c_{t−1}`, `[batch, hidden]`.
    pub dc_prev: &'a mut [f32],
}

/// The inputs of [`Backend::gru_cell`].
#[derive(Clone, Copy, Debug)]
pub struct GruCellInputs<'a> {
    /// `x_t · W_ihᵀ`, `[batch, 3·hidden]` (blocks `r, z, n`).
    pub xg: &'a [f32],
    /// `h_{t−1} · W_hhᵀ`, `[batch, 3·hidden]`.
    pub hg: &'a [f32],
    /// `b_ih`, `[3·hidden]`, if the layer has input biases.
    pub bias_ih: Option<&'a [f32]>,
    /// `b_hh`, `[3·hidden]`, if the layer has recurrent biases.
    pub bias_hh: Option<&'a [f32]>,
    /// `h_{t−1}`, `[batch, hidden]`.
    pub h_prev: &'a [f32],
}

/// The outputs of [`Backend::gru_cell`] (every element is written).
#[derive(Debug)]
pub struct GruCellOutputs<'a> {
    /// `r, z, n` and `hn = (h_{t−1}·W_hnᵀ) ⊕ b_hn`, `[batch, 4·hidden]` (kept for the
    /// backward pass).
    pub gates: &'a mut [f32],
    /// The new hidden state `h_t`, `[batch, hidden]`.
    pub h: &'a mut [f32],
}

/// The inputs of [`Backend::gru_cell_backward`].
#[derive(Clone, Copy, Debug)]
pub struct GruCellGradInputs<'a> {
    /// The gates kept by the forward step, `[batch, 4·hidden]`.
    pub gates: &'a [f32],
    /// `h_{t−1}`, `[batch, hidden]`.
    pub h_prev: &'a [f32],
    /// The gradient of `h_t` from the layer's output, `[batch, hidden]`.
    pub dy: &'a [f32],
    /// The gradient of `h_t` from the next step, `[batch, hidden]`.
    pub dh_next: &'a [f32],
}

/// The outputs of [`Backend::gru_cell_backward`] (every element is written).
#[derive(Debug)]
pub struct GruCellGradOutputs<'a> {
    /// The gradient of `x_t·W_ihᵀ ⊕ b_ih`, `[batch, 3·hidden]`.
    pub dxg: &'a mut [f32],
    /// The gradient of `h_{t−1}·W_hhᵀ ⊕ b_hh`, `[batch, 3·hidden]` (the `n` block is
    /// the `xg` one times `r`).
    pub dhg: &'a mut [f32],
    /// The direct part of the gradient of `h_{t−1}`: `dh ⊗ z`, `[batch, hidden]`.
    pub dh_prev: &'a mut [f32],
}

fn check_bias(op: &'static str, arg: &'static str, b: Option<&[f32]>, len: usize) -> Result<()> {
    match b {
        Some(b) => check_len(op, arg, b.len(), len),
        None => Ok(()),
    }
}

/// Checks the buffers of [`Backend::lstm_cell`] against `shape`.
pub fn check_lstm_cell(
    shape: CellShape,
    i: &LstmCellInputs<'_>,
    o: &LstmCellOutputs<'_>,
) -> Result<()> {
    let op = "lstm_cell";
    let (bh, bg) = shape.sizes(op, 4)?;
    check_len(op, "xg", i.xg.len(), bg)?;
    check_len(op, "hg", i.hg.len(), bg)?;
    check_bias(op, "bias_ih", i.bias_ih, 4 * shape.hidden)?;
    check_bias(op, "bias_hh", i.bias_hh, 4 * shape.hidden)?;
    check_len(op, "c_prev", i.c_prev.len(), bh)?;
    check_len(op, "gates", o.gates.len(), bg)?;
    check_len(op, "c", o.c.len(), bh)?;
    check_len(op, "h", o.h.len(), bh)
}

/// Checks the buffers of [`Backend::lstm_cell_backward`] against `shape`.
pub fn check_lstm_cell_backward(
    shape: CellShape,
    i: &LstmCellGradInputs<'_>,
    o: &LstmCellGradOutputs<'_>,
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
pub fn check_gru_cell(
    shape: CellShape,
    i: &GruCellInputs<'_>,
    o: &GruCellOutputs<'_>,
) -> Result<()> {
    let op = "gru_cell";
    let (bh, bg) = shape.sizes(op, 3)?;
    let (_, b4) = shape.sizes(op, 4)?;
    check_len(op, "xg", i.xg.len(), bg)?;
    check_len(op, "hg", i.hg.len(), bg)?;
    check_bias(op, "bias_ih", i.bias_ih, 3 * shape.hidden)?;
    check_bias(op, "bias_hh", i.bias_hh, 3 * shape.hidden)?;
    check_len(op, "h_prev", i.h_prev.len(), bh)?;
    check_len(op, "gates", o.gates.len(), b4)?;
    check_len(op, "h", o.h.len(), bh)
}

/// Checks the buffers of [`Backend::gru_cell_backward`] against `shape`.
pub fn check_gru_cell_backward(
    shape: CellShape,
    i: &GruCellGradInputs<'_>,
    o: &GruCellGradOutputs<'_>,
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
fn scratch(op: &'static str, n: usize) -> Result<Vec<f32>> {
    try_zeroed_vec(op, n)
}

/// `out = x ⊕ bias` (bias repeated on every row), or `x` itself without a bias (as
/// `x ⊗ 1`, which keeps every value and writes NaN as the mode's kernels do).
fn add_bias<B: Backend>(
    b: &B,
    x: &[f32],
    bias: Option<&[f32]>,
    rows: usize,
    cols: usize,
    out: &mut [f32],
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
    src: &[f32],
    dst: &mut [f32],
    shape: CellShape,
    width: usize,
    k: usize,
) -> Result<()> {
    let h = shape.hidden;
    for r in 0..shape.batch {
        let s = r * width + k * h;
        b.unary(op, &src[s..s + h], &mut dst[s..s + h])?;
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
    y: &[f32],
    wy: usize,
    ky: usize,
    g: &[f32],
    dst: &mut [f32],
    wd: usize,
    kd: usize,
    shape: CellShape,
) -> Result<()> {
    let h = shape.hidden;
    for r in 0..shape.batch {
        let (sy, sd, sg) = (r * wy + ky * h, r * wd + kd * h, r * h);
        let yr = &y[sy..sy + h];
        b.unary_backward(op, yr, yr, &g[sg..sg + h], &mut dst[sd..sd + h])?;
    }
    Ok(())
}

/// The reference definition of [`Backend::lstm_cell`] (`docs/recurrent.md` §2), written
/// with the backend's element-wise kernels.
pub fn lstm_cell<B: Backend>(b: &B, args: Checked<LstmCellArgs<'_>>) -> Result<()> {
    let LstmCellArgs {
        shape,
        inputs: i,
        outputs: o,
    } = args.into_inner();
    let op = "lstm_cell";
    let (n, h) = (shape.batch, shape.hidden);
    let w = 4 * h;
    let m = mat(n, w);
    let mut px = scratch(op, n * w)?;
    let mut ph = scratch(op, n * w)?;
    add_bias(b, i.xg, i.bias_ih, n, w, &mut px)?;
    add_bias(b, i.hg, i.bias_hh, n, w, &mut ph)?;
    let mut pre = scratch(op, n * w)?;
    b.binary(BinaryOp::Add, &px, &m, &ph, &m, &mut pre)?;
    for (k, act) in [
        (0, UnaryOp::Sigmoid),
        (1, UnaryOp::Sigmoid),
        (2, UnaryOp::Tanh),
        (3, UnaryOp::Sigmoid),
    ] {
        activate_block(b, act, &pre, o.gates, shape, w, k)?;
    }
    let g = &*o.gates;
    let mut fc = scratch(op, n * h)?;
    let mut ig = scratch(op, n * h)?;
    b.binary(
        BinaryOp::Mul,
        g,
        &block(n, h, w, h),
        i.c_prev,
        &mat(n, h),
        &mut fc,
    )?;
    b.binary(
        BinaryOp::Mul,
        g,
        &block(n, h, w, 0),
        g,
        &block(n, h, w, 2 * h),
        &mut ig,
    )?;
    b.binary(BinaryOp::Add, &fc, &mat(n, h), &ig, &mat(n, h), o.c)?;
    let mut tc = scratch(op, n * h)?;
    b.unary(UnaryOp::Tanh, o.c, &mut tc)?;
    b.binary(
        BinaryOp::Mul,
        g,
        &block(n, h, w, 3 * h),
        &tc,
        &mat(n, h),
        o.h,
    )
}

/// The reference definition of [`Backend::lstm_cell_backward`] (`docs/recurrent.md` §2).
pub fn lstm_cell_backward<B: Backend>(
    b: &B,
    args: Checked<LstmCellBackwardArgs<'_>>,
) -> Result<()> {
    let LstmCellBackwardArgs {
        shape,
        inputs: i,
        outputs: o,
    } = args.into_inner();
    let op = "lstm_cell_backward";
    let (n, h) = (shape.batch, shape.hidden);
    let w = 4 * h;
    let mh = mat(n, h);
    let gate = |k: usize| block(n, h, w, k * h);
    let mut dh = scratch(op, n * h)?;
    b.binary(BinaryOp::Add, i.dy, &mh, i.dh_next, &mh, &mut dh)?;
    let mut tc = scratch(op, n * h)?;
    b.unary(UnaryOp::Tanh, i.c, &mut tc)?;
    // dc = dc_next ⊕ tanh'((dh ⊗ o), tc)
    let mut u = scratch(op, n * h)?;
    b.binary(BinaryOp::Mul, &dh, &mh, i.gates, &gate(3), &mut u)?;
    let mut v = scratch(op, n * h)?;
    b.unary_backward(UnaryOp::Tanh, &tc, &tc, &u, &mut v)?;
    let mut dc = scratch(op, n * h)?;
    b.binary(BinaryOp::Add, i.dc_next, &mh, &v, &mh, &mut dc)?;
    // The four gate gradients: (factor ⊗ other) through the activation's backward rule.
    let mut t = scratch(op, n * h)?;
    b.binary(BinaryOp::Mul, &dh, &mh, &tc, &mh, &mut t)?;
    backward_block(
        b,
        UnaryOp::Sigmoid,
        i.gates,
        w,
        3,
        &t,
        o.dgates,
        w,
        3,
        shape,
    )?;
    b.binary(BinaryOp::Mul, &dc, &mh, i.gates, &gate(2), &mut t)?;
    backward_block(
        b,
        UnaryOp::Sigmoid,
        i.gates,
        w,
        0,
        &t,
        o.dgates,
        w,
        0,
        shape,
    )?;
    b.binary(BinaryOp::Mul, &dc, &mh, i.c_prev, &mh, &mut t)?;
    backward_block(
        b,
        UnaryOp::Sigmoid,
        i.gates,
        w,
        1,
        &t,
        o.dgates,
        w,
        1,
        shape,
    )?;
    b.binary(BinaryOp::Mul, &dc, &mh, i.gates, &gate(0), &mut t)?;
    backward_block(b, UnaryOp::Tanh, i.gates, w, 2, &t, o.dgates, w, 2, shape)?;
    b.binary(BinaryOp::Mul, &dc, &mh, i.gates, &gate(1), o.dc_prev)
}

/// The reference definition of [`Backend::gru_cell`] (`docs/recurrent.md` §3).
pub fn gru_cell<B: Backend>(b: &B, args: Checked<GruCellArgs<'_>>) -> Result<()> {
    let GruCellArgs {
        shape,
        inputs: i,
        outputs: o,
    } = args.into_inner();
    let op = "gru_cell";
    let (n, h) = (shape.batch, shape.hidden);
    let (w3, w4) = (3 * h, 4 * h);
    let mh = mat(n, h);
    let mut px = scratch(op, n * w3)?;
    let mut ph = scratch(op, n * w3)?;
    add_bias(b, i.xg, i.bias_ih, n, w3, &mut px)?;
    add_bias(b, i.hg, i.bias_hh, n, w3, &mut ph)?;
    // r and z: σ(px ⊕ ph) on the first two blocks.
    let mut pre = scratch(op, n * 2 * h)?;
    b.binary(
        BinaryOp::Add,
        &px,
        &block(n, 2 * h, w3, 0),
        &ph,
        &block(n, 2 * h, w3, 0),
        &mut pre,
    )?;
    for r in 0..n {
        let (s, d) = (r * 2 * h, r * w4);
        b.unary(
            UnaryOp::Sigmoid,
            &pre[s..s + 2 * h],
            &mut o.gates[d..d + 2 * h],
        )?;
    }
    // hn, kept in block 3.
    let mut hn = scratch(op, n * h)?;
    b.copy_strided(&ph, &block(n, h, w3, 2 * h), &mut hn)?;
    for r in 0..n {
        o.gates[r * w4 + 3 * h..r * w4 + 4 * h].copy_from_slice(&hn[r * h..(r + 1) * h]);
    }
    // n = tanh(px_n ⊕ (r ⊗ hn)).
    let mut rh = scratch(op, n * h)?;
    b.binary(
        BinaryOp::Mul,
        o.gates,
        &block(n, h, w4, 0),
        &hn,
        &mh,
        &mut rh,
    )?;
    let mut an = scratch(op, n * h)?;
    b.binary(
        BinaryOp::Add,
        &px,
        &block(n, h, w3, 2 * h),
        &rh,
        &mh,
        &mut an,
    )?;
    activate_block(
        b,
        UnaryOp::Tanh,
        &an,
        &mut rh,
        CellShape {
            batch: n,
            hidden: h,
        },
        h,
        0,
    )?;
    for r in 0..n {
        o.gates[r * w4 + 2 * h..r * w4 + 3 * h].copy_from_slice(&rh[r * h..(r + 1) * h]);
    }
    // h = n ⊕ (z ⊗ (h_prev ⊖ n)).
    let nn = &rh;
    let mut d = scratch(op, n * h)?;
    b.binary(BinaryOp::Sub, i.h_prev, &mh, nn, &mh, &mut d)?;
    let mut e = scratch(op, n * h)?;
    b.binary(BinaryOp::Mul, o.gates, &block(n, h, w4, h), &d, &mh, &mut e)?;
    b.binary(BinaryOp::Add, nn, &mh, &e, &mh, o.h)
}

/// The reference definition of [`Backend::gru_cell_backward`] (`docs/recurrent.md` §3).
pub fn gru_cell_backward<B: Backend>(b: &B, args: Checked<GruCellBackwardArgs<'_>>) -> Result<()> {
    let GruCellBackwardArgs {
        shape,
        inputs: i,
        outputs: o,
    } = args.into_inner();
    let op = "gru_cell_backward";
    let (n, h) = (shape.batch, shape.hidden);
    let (w3, w4) = (3 * h, 4 * h);
    let mh = mat(n, h);
    let gate = |k: usize| block(n, h, w4, k * h);
    let mut dh = scratch(op, n * h)?;
    b.binary(BinaryOp::Add, i.dy, &mh, i.dh_next, &mh, &mut dh)?;
    b.binary(BinaryOp::Mul, &dh, &mh, i.gates, &gate(1), o.dh_prev)?;
    // dn = dh ⊗ (1 ⊖ z); dz = dh ⊗ (h_prev ⊖ n).
    let one = [1.0f32];
    let mut omz = scratch(op, n * h)?;
    b.binary(
        BinaryOp::Sub,
        &one,
        &repeated_scalar(n, h),
        i.gates,
        &gate(1),
        &mut omz,
    )?;
    let mut dn = scratch(op, n * h)?;
    b.binary(BinaryOp::Mul, &dh, &mh, &omz, &mh, &mut dn)?;
    let mut hmn = scratch(op, n * h)?;
    b.binary(BinaryOp::Sub, i.h_prev, &mh, i.gates, &gate(2), &mut hmn)?;
    let mut dz = scratch(op, n * h)?;
    b.binary(BinaryOp::Mul, &dh, &mh, &hmn, &mh, &mut dz)?;
    // da_n (block 2 of dxg), da_z (block 1 of both), da_r (block 0 of both).
    backward_block(b, UnaryOp::Tanh, i.gates, w4, 2, &dn, o.dxg, w3, 2, shape)?;
    backward_block(
        b,
        UnaryOp::Sigmoid,
        i.gates,
        w4,
        1,
        &dz,
        o.dxg,
        w3,
        1,
        shape,
    )?;
    let mut dr = scratch(op, n * h)?;
    b.binary(
        BinaryOp::Mul,
        o.dxg,
        &block(n, h, w3, 2 * h),
        i.gates,
        &gate(3),
        &mut dr,
    )?;
    backward_block(
        b,
        UnaryOp::Sigmoid,
        i.gates,
        w4,
        0,
        &dr,
        o.dxg,
        w3,
        0,
        shape,
    )?;
    // dhg: da_r, da_z as in dxg, and da_n ⊗ r.
    let mut dhn = scratch(op, n * h)?;
    b.binary(
        BinaryOp::Mul,
        o.dxg,
        &block(n, h, w3, 2 * h),
        i.gates,
        &gate(0),
        &mut dhn,
    )?;
    for r in 0..n {
        let s = r * w3;
        o.dhg[s..s + 2 * h].copy_from_slice(&o.dxg[s..s + 2 * h]);
        o.dhg[s + 2 * h..s + w3].copy_from_slice(&dhn[r * h..(r + 1) * h]);
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
