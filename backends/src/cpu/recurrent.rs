//! The recurrent cells of the CPU backends: one LSTM or GRU step, forward and backward,
//! fused into one pass over the `batch × hidden` units.
//!
//! The reference definitions (`exactgrad_core::recurrent`, written out in
//! `docs/recurrent.md`) chain the element-wise kernels: gate sums with `binary`, the
//! activations with `unary`, their slopes with `unary_backward`. Here every unit runs the
//! same sequence of operations in registers: the sums and products are the lane's IEEE
//! operations in the reference's order, the activations are the polynomials of
//! [`crate::transcendental::generic`] with the mode's multiply-add (as `unary` evaluates
//! them), and the slopes are [`crate::elementwise::unary_backward`] itself. So each lane
//! gives the reference's bits (NaN canonicalised once, at the store, in exact mode: a NaN
//! stays NaN through every operation of the sequence, and the polynomials return the
//! canonical NaN for a NaN input).
//!
//! Rows are independent; large steps are cut into chunks of rows whose size depends only
//! on `hidden` (never on the thread count). Within a row, the units run in full lanes,
//! then a scalar tail of the same functions instantiated on `f32`.

use super::elementwise::finish;
use super::simd::SimdLane;
use super::{ComputeContext, Isa};
use crate::elementwise::unary_backward as slope;
use crate::lane::{Exact, Fast, Madd};
use crate::scalar::ModeSpec;
use crate::transcendental::generic as tr;
use exactgrad_core::recurrent::{
    CellShape, GruCellGradInputs, GruCellGradOutputs, GruCellInputs, GruCellOutputs,
    LstmCellGradInputs, LstmCellGradOutputs, LstmCellInputs, LstmCellOutputs,
};
use exactgrad_core::UnaryOp;

/// Units (`rows × gate width`) per parallel chunk: a constant, so the chunking never
/// depends on the thread count.
const UNITS_PER_CHUNK: usize = 1 << 14;

/// `L::WIDTH` elements of `s` from `at`; panics (never reads out of bounds) when they
/// are not all inside `s`.
#[inline(always)]
fn ld<L: SimdLane>(s: &[f32], at: usize) -> L {
    assert!(
        at <= s.len() && L::WIDTH <= s.len() - at,
        "recurrent: load out of bounds"
    );
    // SAFETY: the assertion keeps `at..at + WIDTH` inside `s`; the lane's target features
    // are the calling instantiation's (`cpu::simd`).
    unsafe { L::load(s.as_ptr().add(at)) }
}

/// Stores `v` (NaN canonicalised in exact mode) to `s[at..at + L::WIDTH]`; panics (never
/// writes out of bounds) when that is not inside `s`.
#[inline(always)]
fn st<L: SimdLane, M: ModeSpec>(v: L, s: &mut [f32], at: usize) {
    assert!(
        at <= s.len() && L::WIDTH <= s.len() - at,
        "recurrent: store out of bounds"
    );
    // SAFETY: the assertion keeps `at..at + WIDTH` inside `s`; the lane's target features
    // are the calling instantiation's (`cpu::simd`).
    unsafe { finish::<L, M>(v).store(s.as_mut_ptr().add(at)) }
}

/// `(x ⊕ bx) ⊕ (h ⊕ bh)`, each bias term only when the bias is given.
#[inline(always)]
fn gate_sum<L: SimdLane>(x: L, bx: Option<L>, h: L, bh: Option<L>) -> L {
    let a = match bx {
        Some(b) => x.add(b),
        None => x,
    };
    let c = match bh {
        Some(b) => h.add(b),
        None => h,
    };
    a.add(c)
}

/// The lane of an optional bias at `at`.
#[inline(always)]
fn bias<L: SimdLane>(b: Option<&[f32]>, at: usize) -> Option<L> {
    b.map(|b| ld::<L>(b, at))
}

// ----- the row kernels (generic over the lane) ---------------------------------------------

/// The units `j0, j0 + W, …` below `j1` of rows `0..rows` of an LSTM step. Inputs are
/// indexed from row `first` (the chunk's first row), outputs from row 0.
#[inline(always)]
fn lstm_units<L: SimdLane, M: ModeSpec + Madd<L>>(
    h: usize,
    first: usize,
    (j0, j1): (usize, usize),
    i: &LstmCellInputs<'_>,
    o: &mut LstmCellOutputs<'_>,
) {
    let w = 4 * h;
    let rows = o.c.len() / h;
    for r in 0..rows {
        let (gi, ci) = ((first + r) * w, (first + r) * h);
        let (go, co) = (r * w, r * h);
        let mut j = j0;
        while j + L::WIDTH <= j1 {
            let a: [L; 4] = core::array::from_fn(|k| {
                gate_sum(
                    ld(i.xg, gi + k * h + j),
                    bias(i.bias_ih, k * h + j),
                    ld(i.hg, gi + k * h + j),
                    bias(i.bias_hh, k * h + j),
                )
            });
            let ig = tr::sigmoid::<L, M>(a[0]);
            let fg = tr::sigmoid::<L, M>(a[1]);
            let gg = tr::tanh::<L, M>(a[2]);
            let og = tr::sigmoid::<L, M>(a[3]);
            let c = fg.mul(ld(i.c_prev, ci + j)).add(ig.mul(gg));
            let hv = og.mul(tr::tanh::<L, M>(c));
            for (k, v) in [ig, fg, gg, og].into_iter().enumerate() {
                st::<L, M>(v, o.gates, go + k * h + j);
            }
            st::<L, M>(c, o.c, co + j);
            st::<L, M>(hv, o.h, co + j);
            j += L::WIDTH;
        }
    }
}

/// The backward units of an LSTM step (see [`lstm_units`] for the indexing).
#[inline(always)]
fn lstm_backward_units<L: SimdLane, M: ModeSpec + Madd<L>>(
    h: usize,
    first: usize,
    (j0, j1): (usize, usize),
    i: &LstmCellGradInputs<'_>,
    o: &mut LstmCellGradOutputs<'_>,
) {
    let w = 4 * h;
    let rows = o.dc_prev.len() / h;
    for r in 0..rows {
        let (gi, ci) = ((first + r) * w, (first + r) * h);
        let (go, co) = (r * w, r * h);
        let mut j = j0;
        while j + L::WIDTH <= j1 {
            let g: [L; 4] = core::array::from_fn(|k| ld(i.gates, gi + k * h + j));
            let dh = ld::<L>(i.dy, ci + j).add(ld(i.dh_next, ci + j));
            let tc = tr::tanh::<L, M>(ld(i.c, ci + j));
            let v = slope::<L, M>(UnaryOp::Tanh, tc, tc, dh.mul(g[3]));
            let dc = ld::<L>(i.dc_next, ci + j).add(v);
            let d_o = slope::<L, M>(UnaryOp::Sigmoid, g[3], g[3], dh.mul(tc));
            let d_i = slope::<L, M>(UnaryOp::Sigmoid, g[0], g[0], dc.mul(g[2]));
            let d_f = slope::<L, M>(UnaryOp::Sigmoid, g[1], g[1], dc.mul(ld(i.c_prev, ci + j)));
            let d_g = slope::<L, M>(UnaryOp::Tanh, g[2], g[2], dc.mul(g[0]));
            for (k, v) in [d_i, d_f, d_g, d_o].into_iter().enumerate() {
                st::<L, M>(v, o.dgates, go + k * h + j);
            }
            st::<L, M>(dc.mul(g[1]), o.dc_prev, co + j);
            j += L::WIDTH;
        }
    }
}

/// The units of a GRU step (see [`lstm_units`] for the indexing).
#[inline(always)]
fn gru_units<L: SimdLane, M: ModeSpec + Madd<L>>(
    h: usize,
    first: usize,
    (j0, j1): (usize, usize),
    i: &GruCellInputs<'_>,
    o: &mut GruCellOutputs<'_>,
) {
    let (w3, w4) = (3 * h, 4 * h);
    let rows = o.h.len() / h;
    for r in 0..rows {
        let (gi, ci) = ((first + r) * w3, (first + r) * h);
        let (go, co) = (r * w4, r * h);
        let mut j = j0;
        while j + L::WIDTH <= j1 {
            let pre = |k: usize| {
                gate_sum(
                    ld::<L>(i.xg, gi + k * h + j),
                    bias(i.bias_ih, k * h + j),
                    ld(i.hg, gi + k * h + j),
                    bias(i.bias_hh, k * h + j),
                )
            };
            let rg = tr::sigmoid::<L, M>(pre(0));
            let zg = tr::sigmoid::<L, M>(pre(1));
            let with = |v: L, b: Option<L>| match b {
                Some(b) => v.add(b),
                None => v,
            };
            let hn = with(ld(i.hg, gi + 2 * h + j), bias(i.bias_hh, 2 * h + j));
            let xn = with(ld(i.xg, gi + 2 * h + j), bias(i.bias_ih, 2 * h + j));
            let ng = tr::tanh::<L, M>(xn.add(rg.mul(hn)));
            let hv = ng.add(zg.mul(ld::<L>(i.h_prev, ci + j).sub(ng)));
            for (k, v) in [rg, zg, ng, hn].into_iter().enumerate() {
                st::<L, M>(v, o.gates, go + k * h + j);
            }
            st::<L, M>(hv, o.h, co + j);
            j += L::WIDTH;
        }
    }
}

/// The backward units of a GRU step (see [`lstm_units`] for the indexing).
#[inline(always)]
fn gru_backward_units<L: SimdLane, M: ModeSpec + Madd<L>>(
    h: usize,
    first: usize,
    (j0, j1): (usize, usize),
    i: &GruCellGradInputs<'_>,
    o: &mut GruCellGradOutputs<'_>,
) {
    let (w3, w4) = (3 * h, 4 * h);
    let rows = o.dh_prev.len() / h;
    for r in 0..rows {
        let (gi, ci) = ((first + r) * w4, (first + r) * h);
        let (go, co) = (r * w3, r * h);
        let mut j = j0;
        while j + L::WIDTH <= j1 {
            let g: [L; 4] = core::array::from_fn(|k| ld(i.gates, gi + k * h + j));
            let dh = ld::<L>(i.dy, ci + j).add(ld(i.dh_next, ci + j));
            let dn = dh.mul(L::splat(1.0).sub(g[1]));
            let dz = dh.mul(ld::<L>(i.h_prev, ci + j).sub(g[2]));
            let da_n = slope::<L, M>(UnaryOp::Tanh, g[2], g[2], dn);
            let da_z = slope::<L, M>(UnaryOp::Sigmoid, g[1], g[1], dz);
            let da_r = slope::<L, M>(UnaryOp::Sigmoid, g[0], g[0], da_n.mul(g[3]));
            for (k, v) in [da_r, da_z, da_n].into_iter().enumerate() {
                st::<L, M>(v, o.dxg, go + k * h + j);
            }
            st::<L, M>(da_r, o.dhg, go + j);
            st::<L, M>(da_z, o.dhg, go + h + j);
            st::<L, M>(da_n.mul(g[0]), o.dhg, go + 2 * h + j);
            st::<L, M>(dh.mul(g[1]), o.dh_prev, co + j);
            j += L::WIDTH;
        }
    }
}

/// The units of a row of `h` that fill whole lanes of `width`.
#[inline(always)]
fn full_lanes(h: usize, width: usize) -> usize {
    h - h % width
}

/// Runs `units` over every unit of a chunk: full lanes of `L`, then the scalar tail.
macro_rules! lanes_then_tail {
    ($units:ident, $lane:ty, $m:ty, $h:expr, $first:expr, $i:expr, $o:expr) => {{
        let h = $h;
        let full = full_lanes(h, <$lane as SimdLane>::WIDTH);
        $units::<$lane, $m>(h, $first, (0, full), $i, $o);
        $units::<f32, $m>(h, $first, (full, h), $i, $o);
    }};
}

/// Instantiates the chunk kernels for one ISA path inside functions compiled with the
/// path's target features.
macro_rules! recurrent_kernels {
    ($module:ident, $lane:ty, $($feature:literal)?) => {
        #[allow(dead_code)]
        mod $module {
            use super::*;

            $(#[target_feature(enable = $feature)])?
            pub(super) unsafe fn lstm<M: ModeSpec + Madd<$lane>>(
                h: usize,
                first: usize,
                i: &LstmCellInputs<'_>,
                o: &mut LstmCellOutputs<'_>,
            ) {
                lanes_then_tail!(lstm_units, $lane, M, h, first, i, o)
            }

            $(#[target_feature(enable = $feature)])?
            pub(super) unsafe fn lstm_backward<M: ModeSpec + Madd<$lane>>(
                h: usize,
                first: usize,
                i: &LstmCellGradInputs<'_>,
                o: &mut LstmCellGradOutputs<'_>,
            ) {
                lanes_then_tail!(lstm_backward_units, $lane, M, h, first, i, o)
            }

            $(#[target_feature(enable = $feature)])?
            pub(super) unsafe fn gru<M: ModeSpec + Madd<$lane>>(
                h: usize,
                first: usize,
                i: &GruCellInputs<'_>,
                o: &mut GruCellOutputs<'_>,
            ) {
                lanes_then_tail!(gru_units, $lane, M, h, first, i, o)
            }

            $(#[target_feature(enable = $feature)])?
            pub(super) unsafe fn gru_backward<M: ModeSpec + Madd<$lane>>(
                h: usize,
                first: usize,
                i: &GruCellGradInputs<'_>,
                o: &mut GruCellGradOutputs<'_>,
            ) {
                lanes_then_tail!(gru_backward_units, $lane, M, h, first, i, o)
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
recurrent_kernels!(c_avx512, crate::cpu::simd::F32x16, "avx512f");
#[cfg(target_arch = "x86_64")]
recurrent_kernels!(c_avx2, crate::cpu::simd::F32x8, "avx2,fma");
#[cfg(target_arch = "x86_64")]
recurrent_kernels!(c_v128, crate::cpu::simd::F32x4, "sse2");
#[cfg(target_arch = "x86_64")]
recurrent_kernels!(c_v128_fma, crate::cpu::simd::F32x4, "sse2,fma");
#[cfg(target_arch = "aarch64")]
recurrent_kernels!(c_neon, crate::cpu::simd::F32x4, "neon");
recurrent_kernels!(c_scalar, f32,);

/// A concrete mode whose multiply-add serves every lane type of this machine.
#[cfg(target_arch = "x86_64")]
pub(crate) trait CellMode:
    ModeSpec
    + Madd<crate::cpu::simd::F32x4>
    + Madd<crate::cpu::simd::F32x8>
    + Madd<crate::cpu::simd::F32x16>
{
}
/// A concrete mode whose multiply-add serves every lane type of this machine.
#[cfg(target_arch = "aarch64")]
pub(crate) trait CellMode: ModeSpec + Madd<crate::cpu::simd::F32x4> {}
/// A concrete mode whose multiply-add serves every lane type of this machine.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(crate) trait CellMode: ModeSpec {}
impl CellMode for Exact {}
impl CellMode for Fast {}

/// Calls kernel `$f` of `$isa`'s instantiation in mode `$m`; the caller guarantees that
/// `$isa` is supported in mode `$m` on this CPU.
macro_rules! on_isa {
    ($isa:expr, $m:ty, $f:ident($($arg:expr),* $(,)?)) => {
        // SAFETY: `$isa` is the backend's path, supported in mode `$m` on this CPU (the
        // invariant of `CpuBackend::isa`, which every caller passes), and that is exactly
        // the target features of the instantiation chosen here: avx512f, avx2 + fma,
        // sse2 + fma (fast mode on the 128-bit path), sse2 (exact mode there; part of
        // every x86-64 CPU), neon or none. The kernels bound-check their own accesses.
        unsafe {
            match $isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => c_avx512::$f::<$m>($($arg),*),
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => c_avx2::$f::<$m>($($arg),*),
                #[cfg(target_arch = "x86_64")]
                Isa::V128 if <$m as ModeSpec>::MODE == exactgrad_core::ComputeMode::Fast => {
                    c_v128_fma::$f::<$m>($($arg),*)
                }
                #[cfg(target_arch = "x86_64")]
                Isa::V128 => c_v128::$f::<$m>($($arg),*),
                #[cfg(target_arch = "aarch64")]
                Isa::Neon => c_neon::$f::<$m>($($arg),*),
                _ => c_scalar::$f::<$m>($($arg),*),
            }
        }
    };
}

/// Rows per parallel chunk for gate rows `width` units wide.
fn rows_per_chunk(width: usize) -> usize {
    (UNITS_PER_CHUNK / width.max(1)).max(1)
}

/// Runs `f(first_row, rows)` over the rows of a step, in chunks of [`rows_per_chunk`]
/// rows, on the context's threads when there is more than one chunk. `f` receives the
/// chunk's first row and its row count and must touch only those rows of the outputs;
/// the outputs are handed out as disjoint chunks by `split`.
fn for_each_row_chunk<T: Send>(
    ctx: &ComputeContext,
    batch: usize,
    width: usize,
    chunks: Vec<T>,
    f: impl Fn(usize, T) + Sync + Send,
) {
    let per = rows_per_chunk(width);
    if ctx.pool.is_none() || batch <= per {
        chunks
            .into_iter()
            .enumerate()
            .for_each(|(k, c)| f(k * per, c));
        return;
    }
    // Each task takes its own chunk out of its slot (one task per slot).
    let slots: Vec<std::sync::Mutex<Option<T>>> = chunks
        .into_iter()
        .map(|c| std::sync::Mutex::new(Some(c)))
        .collect();
    ctx.run(slots.len(), |k| {
        let taken = slots[k].lock().ok().and_then(|mut s| s.take());
        if let Some(c) = taken {
            f(k * per, c);
        }
    });
}

/// Cuts `s` (rows of `row` elements) into chunks of `per` rows.
fn row_chunks(s: &mut [f32], row: usize, per: usize) -> impl Iterator<Item = &mut [f32]> {
    s.chunks_mut((row * per).max(1))
}

/// [`Backend::lstm_cell`](exactgrad_core::Backend::lstm_cell) on `isa` (arguments already
/// checked; `isa` supported in mode `M` on this CPU).
fn lstm_cell_on<M: CellMode>(
    isa: Isa,
    ctx: &ComputeContext,
    shape: CellShape,
    i: LstmCellInputs<'_>,
    o: LstmCellOutputs<'_>,
) {
    let h = shape.hidden;
    if shape.batch == 0 || h == 0 {
        return;
    }
    let per = rows_per_chunk(4 * h);
    let chunks: Vec<LstmCellOutputs<'_>> = row_chunks(o.gates, 4 * h, per)
        .zip(row_chunks(o.c, h, per))
        .zip(row_chunks(o.h, h, per))
        .map(|((gates, c), hh)| LstmCellOutputs { gates, c, h: hh })
        .collect();
    for_each_row_chunk(ctx, shape.batch, 4 * h, chunks, |first, mut out| {
        on_isa!(isa, M, lstm(h, first, &i, &mut out));
    });
}

/// [`Backend::lstm_cell_backward`](exactgrad_core::Backend::lstm_cell_backward) on `isa`
/// (arguments already checked).
fn lstm_cell_backward_on<M: CellMode>(
    isa: Isa,
    ctx: &ComputeContext,
    shape: CellShape,
    i: LstmCellGradInputs<'_>,
    o: LstmCellGradOutputs<'_>,
) {
    let h = shape.hidden;
    if shape.batch == 0 || h == 0 {
        return;
    }
    let per = rows_per_chunk(4 * h);
    let chunks: Vec<LstmCellGradOutputs<'_>> = row_chunks(o.dgates, 4 * h, per)
        .zip(row_chunks(o.dc_prev, h, per))
        .map(|(dgates, dc_prev)| LstmCellGradOutputs { dgates, dc_prev })
        .collect();
    for_each_row_chunk(ctx, shape.batch, 4 * h, chunks, |first, mut out| {
        on_isa!(isa, M, lstm_backward(h, first, &i, &mut out));
    });
}

/// [`Backend::gru_cell`](exactgrad_core::Backend::gru_cell) on `isa` (arguments already
/// checked).
fn gru_cell_on<M: CellMode>(
    isa: Isa,
    ctx: &ComputeContext,
    shape: CellShape,
    i: GruCellInputs<'_>,
    o: GruCellOutputs<'_>,
) {
    let h = shape.hidden;
    if shape.batch == 0 || h == 0 {
        return;
    }
    let per = rows_per_chunk(4 * h);
    let chunks: Vec<GruCellOutputs<'_>> = row_chunks(o.gates, 4 * h, per)
        .zip(row_chunks(o.h, h, per))
        .map(|(gates, hh)| GruCellOutputs { gates, h: hh })
        .collect();
    for_each_row_chunk(ctx, shape.batch, 4 * h, chunks, |first, mut out| {
        on_isa!(isa, M, gru(h, first, &i, &mut out));
    });
}

/// [`Backend::gru_cell_backward`](exactgrad_core::Backend::gru_cell_backward) on `isa`
/// (arguments already checked).
fn gru_cell_backward_on<M: CellMode>(
    isa: Isa,
    ctx: &ComputeContext,
    shape: CellShape,
    i: GruCellGradInputs<'_>,
    o: GruCellGradOutputs<'_>,
) {
    let h = shape.hidden;
    if shape.batch == 0 || h == 0 {
        return;
    }
    let per = rows_per_chunk(4 * h);
    let chunks: Vec<GruCellGradOutputs<'_>> = row_chunks(o.dxg, 3 * h, per)
        .zip(row_chunks(o.dhg, 3 * h, per))
        .zip(row_chunks(o.dh_prev, h, per))
        .map(|((dxg, dhg), dh_prev)| GruCellGradOutputs { dxg, dhg, dh_prev })
        .collect();
    for_each_row_chunk(ctx, shape.batch, 4 * h, chunks, |first, mut out| {
        on_isa!(isa, M, gru_backward(h, first, &i, &mut out));
    });
}

/// Calls `$f::<Exact>` or `$f::<Fast>` as `M`'s mode says (the concrete markers carry the
/// lane bounds the kernels need).
macro_rules! by_mode {
    ($m:ty, $f:ident($($arg:expr),* $(,)?)) => {
        match <$m as ModeSpec>::MODE {
            exactgrad_core::ComputeMode::Exact => $f::<Exact>($($arg),*),
            exactgrad_core::ComputeMode::Fast => $f::<Fast>($($arg),*),
        }
    };
}

/// [`Backend::lstm_cell`](exactgrad_core::Backend::lstm_cell) on `isa` in mode `M`
/// (arguments already checked; `isa` supported in mode `M` on this CPU).
pub(crate) fn lstm_cell<M: ModeSpec>(
    isa: Isa,
    ctx: &ComputeContext,
    shape: CellShape,
    i: LstmCellInputs<'_>,
    o: LstmCellOutputs<'_>,
) {
    by_mode!(M, lstm_cell_on(isa, ctx, shape, i, o))
}

/// [`Backend::lstm_cell_backward`](exactgrad_core::Backend::lstm_cell_backward) on `isa`
/// in mode `M` (as [`lstm_cell`]).
pub(crate) fn lstm_cell_backward<M: ModeSpec>(
    isa: Isa,
    ctx: &ComputeContext,
    shape: CellShape,
    i: LstmCellGradInputs<'_>,
    o: LstmCellGradOutputs<'_>,
) {
    by_mode!(M, lstm_cell_backward_on(isa, ctx, shape, i, o))
}

/// [`Backend::gru_cell`](exactgrad_core::Backend::gru_cell) on `isa` in mode `M` (as
/// [`lstm_cell`]).
pub(crate) fn gru_cell<M: ModeSpec>(
    isa: Isa,
    ctx: &ComputeContext,
    shape: CellShape,
    i: GruCellInputs<'_>,
    o: GruCellOutputs<'_>,
) {
    by_mode!(M, gru_cell_on(isa, ctx, shape, i, o))
}

/// [`Backend::gru_cell_backward`](exactgrad_core::Backend::gru_cell_backward) on `isa` in
/// mode `M` (as [`lstm_cell`]).
pub(crate) fn gru_cell_backward<M: ModeSpec>(
    isa: Isa,
    ctx: &ComputeContext,
    shape: CellShape,
    i: GruCellGradInputs<'_>,
    o: GruCellGradOutputs<'_>,
) {
    by_mode!(M, gru_cell_backward_on(isa, ctx, shape, i, o))
}
