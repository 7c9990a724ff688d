//! Row kernels of the CPU backends: softmax and log-softmax with their backward rules,
//! sums over dimensions, select and strided copies.
//!
//! Every kernel gives the bits of [`RefKernels`] of its mode. The f64 sums (the
//! normalisers of softmax and every reduction) keep each output's own accumulation order:
//! they are vectorised across outputs (see [`simd64`]), never within one. The row maximum
//! of softmax is order-independent by definition (`scalar::row_max`), so it is computed
//! lane-wise and then across lanes. Work is split over outputs (rows, groups of sums) in
//! chunks whose size is a constant of the kernel and the shape.
//!
//! Kernels never allocate: strided iteration uses fixed-size index arrays of
//! [`MAX_DIMS`] merged dimensions (a layout that still has more after merging runs the
//! reference loop, which gives the same bits).

#[path = "simd64.rs"]
pub mod simd64;

use self::simd64::RowSum;
use super::elementwise::finish;
use super::simd::SimdLane;
use super::{ComputeContext, Isa};
use crate::lane::{Exact, Fast, Madd};
use crate::scalar::ModeSpec;
use crate::scalar_ref::RefKernels;
use crate::transcendental::generic as tr;
use exactgrad_core::{ComputeMode, Layout, CANONICAL_NAN};

/// The most dimensions a kernel iterates after merging contiguous ones.
pub const MAX_DIMS: usize = 16;

/// Elements of work per parallel chunk (a constant: chunking never depends on threads).
const WORK_PER_CHUNK: usize = 1 << 14;
/// Outputs of a sum accumulated together in one f64 tile (strategy "columns").
const SUM_TILE: usize = 256;
/// Rows per tile of a transposing copy.
const COPY_TILE: usize = 32;

// ---------------------------------------------------------------------------------------
// Strided iteration without allocation
// ---------------------------------------------------------------------------------------

/// Dimensions of a strided iteration over `N` layouts of one shape, size-1 dimensions
/// dropped and dimensions that are contiguous with each other in every layout merged.
#[derive(Clone, Copy, Debug)]
struct Dims<const N: usize> {
    rank: usize,
    len: [usize; MAX_DIMS],
    stride: [[usize; MAX_DIMS]; N],
}

impl<const N: usize> Dims<N> {
    fn new() -> Self {
        Self {
            rank: 0,
            len: [0; MAX_DIMS],
            stride: [[0; MAX_DIMS]; N],
        }
    }

    /// The merged dimensions of `shape` under `strides`, or `None` if more than
    /// [`MAX_DIMS`] remain.
    fn of(shape: &[usize], strides: [&[usize]; N]) -> Option<Self> {
        let mut d = Self::new();
        for (i, &len) in shape.iter().enumerate() {
            if !d.push(len, core::array::from_fn(|k| strides[k][i])) {
                return None;
            }
        }
        Some(d)
    }

    /// Appends a dimension (outermost first); false if there is no room.
    fn push(&mut self, len: usize, strides: [usize; N]) -> bool {
        if len == 1 {
            return true;
        }
        if self.rank > 0 {
            let l = self.rank - 1;
            if (0..N).all(|k| self.stride[k][l] == strides[k] * len) {
                self.len[l] *= len;
                for (k, s) in strides.iter().enumerate() {
                    self.stride[k][l] = *s;
                }
                return true;
            }
        }
        if self.rank == MAX_DIMS {
            return false;
        }
        self.len[self.rank] = len;
        for (k, s) in strides.iter().enumerate() {
            self.stride[k][self.rank] = *s;
        }
        self.rank += 1;
        true
    }

    /// Number of elements.
    fn numel(&self) -> usize {
        self.len[..self.rank].iter().product()
    }

    /// Length and strides of the innermost dimension (1 and 0 for rank 0).
    fn inner(&self) -> (usize, [usize; N]) {
        if self.rank == 0 {
            (1, [0; N])
        } else {
            let l = self.rank - 1;
            (self.len[l], core::array::from_fn(|k| self.stride[k][l]))
        }
    }

    /// Number of rows: the product of all but the innermost dimension.
    fn rows(&self) -> usize {
        self.len[..self.rank.saturating_sub(1)].iter().product()
    }
}

/// The storage offsets of consecutive rows (all dimensions but the innermost) of a
/// [`Dims`], in row-major order.
struct RowWalk<'a, const N: usize> {
    d: &'a Dims<N>,
    outer: usize,
    idx: [usize; MAX_DIMS],
    off: [usize; N],
}

impl<'a, const N: usize> RowWalk<'a, N> {
    /// The walk positioned at row `row`, offsets relative to `base`.
    fn at(d: &'a Dims<N>, base: [usize; N], row: usize) -> Self {
        let outer = d.rank.saturating_sub(1);
        let mut w = Self {
            d,
            outer,
            idx: [0; MAX_DIMS],
            off: base,
        };
        let mut r = row;
        for i in (0..outer).rev() {
            let q = r % d.len[i];
            r /= d.len[i];
            w.idx[i] = q;
            for k in 0..N {
                w.off[k] += q * d.stride[k][i];
            }
        }
        w
    }

    /// Moves to the next row (wrapping to the first after the last).
    fn next(&mut self) {
        let d = self.d;
        let mut i = self.outer;
        while i > 0 {
            i -= 1;
            self.idx[i] += 1;
            for k in 0..N {
                self.off[k] += d.stride[k][i];
            }
            if self.idx[i] < d.len[i] {
                return;
            }
            for k in 0..N {
                self.off[k] -= d.stride[k][i] * d.len[i];
            }
            self.idx[i] = 0;
        }
    }
}

/// `value` rounded up to a multiple of `m`.
fn round_up(value: usize, m: usize) -> usize {
    value.div_ceil(m) * m
}

// ---------------------------------------------------------------------------------------
// Lane kernels (generic; instantiated per ISA path below)
// ---------------------------------------------------------------------------------------

/// `scalar::row_max` of `x`: the largest element plus +0, the canonical NaN if any is
/// NaN (order-independent, so computed lane-wise and then across lanes).
#[inline(always)]
fn row_max<L: SimdLane>(x: &[f32]) -> f32 {
    let (n, w) = (x.len(), L::WIDTH);
    assert!(w <= 16, "row_max: lane wider than 16");
    let mut lanes = [f32::NEG_INFINITY; 16];
    let mut i = 0;
    if n >= w {
        let mut m = L::splat(f32::NEG_INFINITY);
        while i + w <= n {
            // SAFETY: i + w <= n = x.len().
            let v = unsafe { L::load(x.as_ptr().add(i)) };
            // A NaN lane stays NaN: nothing compares greater than it.
            m = L::select(L::mask_or(v.gt(m), v.is_nan()), v, m);
            i += w;
        }
        // SAFETY: `lanes` holds 16 >= w elements.
        unsafe { m.store(lanes.as_mut_ptr()) };
    }
    let mut m = f32::NEG_INFINITY;
    for &v in lanes[..w].iter().chain(&x[i..]) {
        if v.is_nan() {
            return CANONICAL_NAN;
        }
        if v > m {
            m = v;
        }
    }
    m + 0.0
}

/// `out[j] = exp(x[j] − m)` (the mode's polynomial).
#[inline(always)]
fn exp_shifted<L: SimdLane, M: ModeSpec + Madd<L>>(x: &[f32], m: f32, out: &mut [f32]) {
    let n = x.len();
    assert_eq!(out.len(), n, "softmax: row lengths");
    let (w, mv) = (L::WIDTH, L::splat(m));
    let mut j = 0;
    while j + w <= n {
        // SAFETY: j + w <= n bounds both slices.
        unsafe {
            let v = L::load(x.as_ptr().add(j));
            tr::exp::<L, M>(v.sub(mv)).store(out.as_mut_ptr().add(j));
        }
        j += w;
    }
    for j in j..n {
        out[j] = tr::exp::<f32, M>(x[j] - m);
    }
}

/// The pointers to eight rows of `cols` elements starting at row `r` of `base`, the rows
/// past `rows` replaced by the last one (their sums are computed and discarded).
#[inline(always)]
fn row_ptrs(base: *const f32, r: usize, nb: usize, cols: usize) -> [*const f32; 8] {
    // SAFETY (of the caller's later reads): rows r..r+nb lie inside the buffer.
    core::array::from_fn(|i| base.wrapping_add((r + i.min(nb - 1)) * cols))
}

/// Softmax (or log-softmax) of the whole rows of `x` (`cols` elements each), as
/// `scalar::softmax_row_in` / `log_softmax_row_in` followed by `M::out`.
#[inline(always)]
fn softmax_rows<L: RowSum, M: ModeSpec + Madd<L>>(
    x: &[f32],
    out: &mut [f32],
    cols: usize,
    log: bool,
) {
    assert!(
        cols > 0 && x.len() == out.len() && x.len() / cols * cols == x.len(),
        "softmax: lengths"
    );
    let rows = x.len() / cols;
    let w = L::WIDTH;
    let mut r = 0;
    while r < rows {
        let nb = (rows - r).min(8);
        let mut m = [0.0f32; 8];
        for (i, mi) in m.iter_mut().enumerate().take(nb) {
            let s = (r + i) * cols..(r + i + 1) * cols;
            *mi = row_max::<L>(&x[s.clone()]);
            exp_shifted::<L, M>(&x[s.clone()], *mi, &mut out[s]);
        }
        let mut acc = [0.0f64; 8];
        let p = row_ptrs(out.as_ptr(), r, nb, cols);
        // SAFETY: every pointer starts a row of `cols` elements inside `out`.
        unsafe { L::sum8(&mut acc, &p, cols) };
        for i in 0..nb {
            let s = acc[i] as f32;
            let (xs, os) = (
                &x[(r + i) * cols..(r + i + 1) * cols],
                &mut out[(r + i) * cols..(r + i + 1) * cols],
            );
            let mut j = 0;
            if log {
                let ls = tr::log::<f32, M>(s);
                let (mv, lv) = (L::splat(m[i]), L::splat(ls));
                while j + w <= cols {
                    // SAFETY: j + w <= cols bounds both rows.
                    unsafe {
                        let v = L::load(xs.as_ptr().add(j));
                        finish::<L, M>(v.sub(mv).sub(lv)).store(os.as_mut_ptr().add(j));
                    }
                    j += w;
                }
                for j in j..cols {
                    os[j] = M::out((xs[j] - m[i]) - ls);
                }
            } else {
                let sv = L::splat(s);
                while j + w <= cols {
                    // SAFETY: j + w <= cols bounds the row.
                    unsafe {
                        let e = L::load(os.as_ptr().add(j));
                        finish::<L, M>(e.div(sv)).store(os.as_mut_ptr().add(j));
                    }
                    j += w;
                }
                for o in &mut os[j..] {
                    *o = M::out(*o / s);
                }
            }
        }
        r += nb;
    }
}

/// Backward of [`softmax_rows`] over whole rows: `scalar::softmax_row_backward` or
/// `log_softmax_row_backward_in`, then `M::out`.
#[inline(always)]
fn softmax_backward_rows<L: RowSum, M: ModeSpec + Madd<L>>(
    y: &[f32],
    g: &[f32],
    out: &mut [f32],
    cols: usize,
    log: bool,
) {
    assert!(
        cols > 0
            && y.len() == out.len()
            && g.len() == out.len()
            && out.len() / cols * cols == out.len(),
        "softmax_backward: lengths"
    );
    let rows = out.len() / cols;
    let w = L::WIDTH;
    let mut r = 0;
    while r < rows {
        let nb = (rows - r).min(8);
        let mut acc = [0.0f64; 8];
        let pg = row_ptrs(g.as_ptr(), r, nb, cols);
        if log {
            // SAFETY: every pointer starts a row of `cols` elements inside `g`.
            unsafe { L::sum8(&mut acc, &pg, cols) };
        } else {
            let py = row_ptrs(y.as_ptr(), r, nb, cols);
            // SAFETY: every pointer starts a row of `cols` elements inside `y` or `g`.
            unsafe { L::dot8(&mut acc, &py, &pg, cols) };
        }
        for (i, &a) in acc.iter().enumerate().take(nb) {
            let d = a as f32;
            let s = (r + i) * cols..(r + i + 1) * cols;
            let (ys, gs, os) = (&y[s.clone()], &g[s.clone()], &mut out[s]);
            let dv = L::splat(d);
            let mut j = 0;
            while j + w <= cols {
                // SAFETY: j + w <= cols bounds the three rows.
                unsafe {
                    let yv = L::load(ys.as_ptr().add(j));
                    let gv = L::load(gs.as_ptr().add(j));
                    let v = if log {
                        gv.sub(tr::exp::<L, M>(yv).mul(dv))
                    } else {
                        yv.mul(gv.sub(dv))
                    };
                    finish::<L, M>(v).store(os.as_mut_ptr().add(j));
                }
                j += w;
            }
            for j in j..cols {
                os[j] = M::out(if log {
                    gs[j] - tr::exp::<f32, M>(ys[j]) * d
                } else {
                    ys[j] * (gs[j] - d)
                });
            }
        }
        r += nb;
    }
}

/// A sum over flagged dimensions: kept and reduced dimensions merged separately.
#[derive(Clone, Copy, Debug)]
struct SumPlan {
    kept: Dims<1>,
    red: Dims<1>,
    offset: usize,
}

impl SumPlan {
    /// Whether the kernel accumulates tiles of consecutive outputs ("columns": the
    /// innermost kept dimension is contiguous) rather than groups of eight outputs whose
    /// elements are walked run by run.
    fn columns(&self) -> bool {
        let (len, [s]) = self.kept.inner();
        self.kept.rank > 0 && s == 1 && len >= 8
    }
}

/// Outputs `first..first + out.len()` of a sum whose innermost kept dimension is
/// contiguous: tiles of up to [`SUM_TILE`] outputs, one f64 accumulator each, that add one
/// reduced element at a time in increasing order (vectorised across the tile).
#[inline(always)]
fn sum_columns<L: RowSum, M: ModeSpec>(x: &[f32], p: &SumPlan, first: usize, out: &mut [f32]) {
    let (lk, _) = p.kept.inner();
    let (lr, [sr]) = p.red.inner();
    let red_rows = p.red.rows();
    let w = L::WIDTH;
    let mut rows = RowWalk::at(&p.kept, [p.offset], first / lk);
    let mut col = first % lk;
    let mut done = 0;
    let mut acc = [0.0f64; SUM_TILE];
    while done < out.len() {
        let seg = (lk - col).min(out.len() - done);
        let mut t0 = 0;
        while t0 < seg {
            let tile = (seg - t0).min(SUM_TILE);
            let base = rows.off[0] + col + t0;
            acc[..tile].fill(0.0);
            let mut red = RowWalk::at(&p.red, [0], 0);
            for _ in 0..red_rows {
                for t in 0..lr {
                    let src = x.as_ptr().wrapping_add(base + red.off[0] + t * sr);
                    let mut j = 0;
                    while j + w <= tile {
                        // SAFETY: every element of a tile is an element of the layout,
                        // whose extent `sum` checked against `x.len()`.
                        unsafe { L::add_wide(acc.as_mut_ptr().add(j), src.add(j)) };
                        j += w;
                    }
                    while j < tile {
                        // SAFETY: as above.
                        unsafe { f32::add_wide(acc.as_mut_ptr().add(j), src.add(j)) };
                        j += 1;
                    }
                }
                red.next();
            }
            for (o, &a) in out[done + t0..done + t0 + tile]
                .iter_mut()
                .zip(&acc[..tile])
            {
                *o = M::out(a as f32);
            }
            t0 += tile;
        }
        done += seg;
        col = 0;
        rows.next();
    }
}

/// Outputs `first..first + out.len()` of a sum, eight at a time: the reduced elements of
/// each output are walked run by run (the innermost reduced dimension), the eight
/// accumulators advancing together.
#[inline(always)]
fn sum_groups<L: RowSum, M: ModeSpec>(x: &[f32], p: &SumPlan, first: usize, out: &mut [f32]) {
    let (lk, [sk]) = p.kept.inner();
    let (lr, [sr]) = p.red.inner();
    let red_rows = p.red.rows();
    let mut rows = RowWalk::at(&p.kept, [p.offset], first / lk);
    let mut col = first % lk;
    let mut done = 0;
    while done < out.len() {
        let nb = (out.len() - done).min(8);
        let mut bases = [0usize; 8];
        for b in bases.iter_mut().take(nb) {
            *b = rows.off[0] + col * sk;
            col += 1;
            if col == lk {
                col = 0;
                rows.next();
            }
        }
        for i in nb..8 {
            bases[i] = bases[nb - 1];
        }
        let mut acc = [0.0f64; 8];
        let mut red = RowWalk::at(&p.red, [0], 0);
        for _ in 0..red_rows {
            let ptrs: [*const f32; 8] =
                core::array::from_fn(|i| x.as_ptr().wrapping_add(bases[i] + red.off[0]));
            if sr == 1 {
                // SAFETY: each run of `lr` elements belongs to the layout, whose extent
                // `sum` checked against `x.len()`.
                unsafe { L::sum8(&mut acc, &ptrs, lr) };
            } else {
                for t in 0..lr {
                    for (a, ptr) in acc.iter_mut().zip(&ptrs) {
                        // SAFETY: as above.
                        *a += f64::from(unsafe { *ptr.add(t * sr) });
                    }
                }
            }
            red.next();
        }
        for (o, &a) in out[done..done + nb].iter_mut().zip(&acc) {
            *o = M::out(a as f32);
        }
        done += nb;
    }
}

/// Outputs `first..first + out.len()` of a sum.
#[inline(always)]
fn sum_chunk<L: RowSum, M: ModeSpec>(x: &[f32], p: &SumPlan, first: usize, out: &mut [f32]) {
    if p.columns() {
        sum_columns::<L, M>(x, p, first, out)
    } else {
        sum_groups::<L, M>(x, p, first, out)
    }
}

/// Operands of a select: merged dimensions of the condition and both values.
#[derive(Clone, Copy, Debug)]
struct SelectPlan {
    d: Dims<3>,
    base: [usize; 3],
}

/// Rows `first_row..` of a select (as many as fill `out`).
#[inline(always)]
fn select_chunk<L: SimdLane>(
    c: &[f32],
    a: &[f32],
    b: &[f32],
    p: &SelectPlan,
    first_row: usize,
    out: &mut [f32],
) {
    let (n, [sc, sa, sb]) = p.d.inner();
    let w = L::WIDTH;
    let zero = L::splat(0.0);
    let mut rows = RowWalk::at(&p.d, p.base, first_row);
    for orow in out.chunks_mut(n) {
        let [ic, ia, ib] = rows.off;
        let (pc, pa, pb) = (
            c.as_ptr().wrapping_add(ic),
            a.as_ptr().wrapping_add(ia),
            b.as_ptr().wrapping_add(ib),
        );
        let mut j = 0;
        if sc <= 1 && sa <= 1 && sb <= 1 {
            while j + w <= orow.len() {
                // SAFETY: every index ic + j·sc (and likewise for a, b) with j < n is an
                // element of its layout, whose extent `select` checked.
                unsafe {
                    let cv = if sc == 0 {
                        L::splat(*pc)
                    } else {
                        L::load(pc.add(j))
                    };
                    let av = if sa == 0 {
                        L::splat(*pa)
                    } else {
                        L::load(pa.add(j))
                    };
                    let bv = if sb == 0 {
                        L::splat(*pb)
                    } else {
                        L::load(pb.add(j))
                    };
                    // `c != 0` is `!(c == 0)`: true for NaN, as in the reference.
                    L::select(L::mask_not(cv.eq(zero)), av, bv).store(orow.as_mut_ptr().add(j));
                }
                j += w;
            }
        }
        for (j, o) in orow.iter_mut().enumerate().skip(j) {
            // SAFETY: as above.
            *o = unsafe {
                if *pc.add(j * sc) != 0.0 {
                    *pa.add(j * sa)
                } else {
                    *pb.add(j * sb)
                }
            };
        }
        rows.next();
    }
}

// ---------------------------------------------------------------------------------------
// Per-path instantiation and dispatch
// ---------------------------------------------------------------------------------------

/// Instantiates the lane kernels for one ISA path inside functions compiled with the
/// path's target features.
macro_rules! row_kernels {
    ($module:ident, $lane:ty, $($feature:literal)?) => {
        #[allow(dead_code)]
        mod $module {
            use super::*;

            $(#[target_feature(enable = $feature)])?
            pub(super) unsafe fn softmax<M: ModeSpec + Madd<$lane>>(
                x: &[f32],
                out: &mut [f32],
                cols: usize,
                log: bool,
            ) {
                softmax_rows::<$lane, M>(x, out, cols, log)
            }

            $(#[target_feature(enable = $feature)])?
            pub(super) unsafe fn softmax_backward<M: ModeSpec + Madd<$lane>>(
                y: &[f32],
                g: &[f32],
                out: &mut [f32],
                cols: usize,
                log: bool,
            ) {
                softmax_backward_rows::<$lane, M>(y, g, out, cols, log)
            }

            $(#[target_feature(enable = $feature)])?
            pub(super) unsafe fn sum<M: ModeSpec + Madd<$lane>>(
                x: &[f32],
                p: &SumPlan,
                first: usize,
                out: &mut [f32],
            ) {
                sum_chunk::<$lane, M>(x, p, first, out)
            }

            $(#[target_feature(enable = $feature)])?
            #[allow(clippy::extra_unused_type_parameters)]
            pub(super) unsafe fn select<M: ModeSpec + Madd<$lane>>(
                c: &[f32],
                a: &[f32],
                b: &[f32],
                p: &SelectPlan,
                first_row: usize,
                out: &mut [f32],
            ) {
                select_chunk::<$lane>(c, a, b, p, first_row, out)
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
row_kernels!(r_avx512, crate::cpu::simd::F32x16, "avx512f");
#[cfg(target_arch = "x86_64")]
row_kernels!(r_avx2, crate::cpu::simd::F32x8, "avx2,fma");
#[cfg(target_arch = "x86_64")]
row_kernels!(r_v128, crate::cpu::simd::F32x4, "sse2");
#[cfg(target_arch = "x86_64")]
row_kernels!(r_v128_fma, crate::cpu::simd::F32x4, "sse2,fma");
row_kernels!(r_scalar, f32,);

/// A concrete mode whose multiply-add serves every lane type of this machine.
#[cfg(target_arch = "x86_64")]
trait RowMode:
    ModeSpec
    + Madd<crate::cpu::simd::F32x4>
    + Madd<crate::cpu::simd::F32x8>
    + Madd<crate::cpu::simd::F32x16>
{
}
/// A concrete mode whose multiply-add serves every lane type of this machine.
#[cfg(not(target_arch = "x86_64"))]
trait RowMode: ModeSpec {}
impl RowMode for Exact {}
impl RowMode for Fast {}

/// Calls kernel `$f` of `$isa`'s instantiation in mode `$m`.
macro_rules! on_isa {
    ($isa:expr, $m:ty, $f:ident($($arg:expr),* $(,)?)) => {
        // SAFETY: a backend only holds an `isa` that `Isa::is_supported` confirmed for its
        // mode, so the target features of the chosen instantiation are present (fast mode
        // on the 128-bit path requires FMA; exact mode there needs only SSE2, which every
        // x86-64 CPU has).
        unsafe {
            match $isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => r_avx512::$f::<$m>($($arg),*),
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => r_avx2::$f::<$m>($($arg),*),
                #[cfg(target_arch = "x86_64")]
                Isa::V128 if <$m as ModeSpec>::MODE == ComputeMode::Fast => {
                    r_v128_fma::$f::<$m>($($arg),*)
                }
                #[cfg(target_arch = "x86_64")]
                Isa::V128 => r_v128::$f::<$m>($($arg),*),
                _ => r_scalar::$f::<$m>($($arg),*),
            }
        }
    };
}

/// Runs `$body` with the type alias `$m` naming the concrete mode marker of `M`.
macro_rules! by_mode {
    ($mode:ty, $m:ident => $body:expr) => {
        match <$mode as ModeSpec>::MODE {
            ComputeMode::Exact => {
                type $m = Exact;
                $body
            }
            ComputeMode::Fast => {
                type $m = Fast;
                $body
            }
        }
    };
}

/// Rows per parallel chunk of a row kernel: about [`WORK_PER_CHUNK`] elements, a
/// multiple of the eight rows the f64 sums advance together.
fn rows_per_chunk(cols: usize) -> usize {
    round_up((WORK_PER_CHUNK / cols.max(1)).max(1), 8)
}

// ---------------------------------------------------------------------------------------
// Entry points (called by `CpuBackend`)
// ---------------------------------------------------------------------------------------

/// Softmax (or log-softmax) of each row, as [`RefKernels::softmax`].
pub(crate) fn softmax<M: ModeSpec>(
    isa: Isa,
    ctx: &ComputeContext,
    x: &[f32],
    rows: usize,
    cols: usize,
    log: bool,
    out: &mut [f32],
) {
    let n = rows.checked_mul(cols).expect("softmax: size overflows");
    assert!(x.len() == n && out.len() == n, "softmax: lengths");
    if n == 0 {
        return;
    }
    let chunk = rows_per_chunk(cols) * cols;
    by_mode!(M, Mo => softmax_on::<Mo>(isa, ctx, x, cols, log, out, chunk))
}

fn softmax_on<M: RowMode>(
    isa: Isa,
    ctx: &ComputeContext,
    x: &[f32],
    cols: usize,
    log: bool,
    out: &mut [f32],
    chunk: usize,
) {
    ctx.for_each_chunk(out, chunk, |ci, o| {
        let s = ci * chunk;
        on_isa!(isa, M, softmax(&x[s..s + o.len()], o, cols, log));
    });
}

/// Backward of [`softmax`], as [`RefKernels::softmax_backward`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn softmax_backward<M: ModeSpec>(
    isa: Isa,
    ctx: &ComputeContext,
    y: &[f32],
    g: &[f32],
    rows: usize,
    cols: usize,
    log: bool,
    out: &mut [f32],
) {
    let n = rows
        .checked_mul(cols)
        .expect("softmax_backward: size overflows");
    assert!(
        y.len() == n && g.len() == n && out.len() == n,
        "softmax_backward: lengths"
    );
    if n == 0 {
        return;
    }
    let chunk = rows_per_chunk(cols) * cols;
    by_mode!(M, Mo => softmax_backward_on::<Mo>(isa, ctx, y, g, cols, log, out, chunk))
}

#[allow(clippy::too_many_arguments)]
fn softmax_backward_on<M: RowMode>(
    isa: Isa,
    ctx: &ComputeContext,
    y: &[f32],
    g: &[f32],
    cols: usize,
    log: bool,
    out: &mut [f32],
    chunk: usize,
) {
    ctx.for_each_chunk(out, chunk, |ci, o| {
        let s = ci * chunk;
        let e = s + o.len();
        on_isa!(isa, M, softmax_backward(&y[s..e], &g[s..e], o, cols, log));
    });
}

/// Sum over flagged dimensions, as [`RefKernels::sum`].
pub(crate) fn sum<M: ModeSpec>(
    isa: Isa,
    ctx: &ComputeContext,
    x: &[f32],
    layout: &Layout,
    reduce: &[bool],
    out: &mut [f32],
) {
    assert_eq!(
        reduce.len(),
        layout.rank(),
        "sum: reduce flags do not match rank"
    );
    let kept_numel: usize = (0..layout.rank())
        .filter(|&d| !reduce[d])
        .map(|d| layout.shape[d])
        .product();
    assert_eq!(out.len(), kept_numel, "sum: output length");
    if out.is_empty() {
        return;
    }
    if layout.numel() == 0 {
        // Some reduced dimension is empty: every output is the empty sum, +0.
        out.fill(M::out(0.0));
        return;
    }
    assert!(
        layout.storage_extent() <= x.len(),
        "sum: layout exceeds storage"
    );
    let mut plan = SumPlan {
        kept: Dims::new(),
        red: Dims::new(),
        offset: layout.offset,
    };
    for d in 0..layout.rank() {
        let (len, s) = (layout.shape[d], layout.strides[d]);
        let room = if reduce[d] {
            plan.red.push(len, [s])
        } else {
            plan.kept.push(len, [s])
        };
        if !room {
            return RefKernels::<M>::sum(x, layout, reduce, out);
        }
    }
    debug_assert_eq!(plan.kept.numel(), out.len());
    let work = plan.red.numel().max(1);
    let chunk = round_up((WORK_PER_CHUNK / work).max(1), 64);
    by_mode!(M, Mo => sum_on::<Mo>(isa, ctx, x, &plan, out, chunk))
}

fn sum_on<M: RowMode>(
    isa: Isa,
    ctx: &ComputeContext,
    x: &[f32],
    plan: &SumPlan,
    out: &mut [f32],
    chunk: usize,
) {
    ctx.for_each_chunk(out, chunk, |ci, o| {
        on_isa!(isa, M, sum(x, plan, ci * chunk, o));
    });
}

/// Element-wise select, as [`RefKernels::select`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn select<M: ModeSpec>(
    isa: Isa,
    ctx: &ComputeContext,
    cond: &[f32],
    lc: &Layout,
    a: &[f32],
    la: &Layout,
    b: &[f32],
    lb: &Layout,
    out: &mut [f32],
) {
    assert_eq!(out.len(), lc.numel(), "select: output length");
    assert!(
        la.shape == lc.shape && lb.shape == lc.shape,
        "select: layouts not broadcast to one shape"
    );
    if out.is_empty() {
        return;
    }
    assert!(
        lc.storage_extent() <= cond.len()
            && la.storage_extent() <= a.len()
            && lb.storage_extent() <= b.len(),
        "select: layout exceeds storage"
    );
    let Some(d) = Dims::of(&lc.shape, [&lc.strides, &la.strides, &lb.strides]) else {
        return RefKernels::<M>::select(cond, lc, a, la, b, lb, out);
    };
    let plan = SelectPlan {
        d,
        base: [lc.offset, la.offset, lb.offset],
    };
    let (inner, _) = d.inner();
    let rows = (WORK_PER_CHUNK / inner).max(1);
    by_mode!(M, Mo => select_on::<Mo>(isa, ctx, cond, a, b, &plan, out, rows, inner))
}

#[allow(clippy::too_many_arguments)]
fn select_on<M: RowMode>(
    isa: Isa,
    ctx: &ComputeContext,
    c: &[f32],
    a: &[f32],
    b: &[f32],
    plan: &SelectPlan,
    out: &mut [f32],
    rows: usize,
    inner: usize,
) {
    ctx.for_each_chunk(out, rows * inner, |ci, o| {
        on_isa!(isa, M, select(c, a, b, plan, ci * rows, o));
    });
}

/// Strided gather, as [`RefKernels::copy_strided`]: pure data movement (bits unchanged),
/// so every path runs the same code: row copies for contiguous rows, fills for broadcast
/// rows, tiles for transposes and a gather loop otherwise.
pub(crate) fn copy_strided<M: ModeSpec>(
    isa: Isa,
    ctx: &ComputeContext,
    src: &[f32],
    layout: &Layout,
    out: &mut [f32],
) {
    let _ = isa;
    assert_eq!(out.len(), layout.numel(), "copy_strided: output length");
    if out.is_empty() {
        return;
    }
    assert!(
        layout.storage_extent() <= src.len(),
        "copy_strided: layout exceeds storage"
    );
    let Some(d) = Dims::of(&layout.shape, [&layout.strides]) else {
        return RefKernels::<M>::copy_strided(src, layout, out);
    };
    let (n, [s]) = d.inner();
    // A transpose: the innermost dimension is strided and the next one contiguous.
    let tiled = d.rank >= 2 && s > 1 && d.stride[0][d.rank - 2] == 1;
    let mut rows = (WORK_PER_CHUNK / n).max(1);
    if tiled {
        rows = round_up(rows, COPY_TILE);
    }
    let base = layout.offset;
    ctx.for_each_chunk(out, rows * n, |ci, o| {
        if tiled {
            copy_tiles(src, &d, base, ci * rows, o);
        } else {
            copy_rows(src, &d, base, ci * rows, o);
        }
    });
}

/// Rows `first_row..` of a strided copy (as many as fill `out`).
fn copy_rows(src: &[f32], d: &Dims<1>, base: usize, first_row: usize, out: &mut [f32]) {
    let (n, [s]) = d.inner();
    let mut rows = RowWalk::at(d, [base], first_row);
    for orow in out.chunks_mut(n) {
        let o = rows.off[0];
        match s {
            1 => orow.copy_from_slice(&src[o..o + n]),
            0 => orow.fill(src[o]),
            _ => {
                // The last index was checked by `storage_extent` at entry.
                let row = &src[o..=o + (n - 1) * s];
                for (j, v) in orow.iter_mut().enumerate() {
                    *v = row[j * s];
                }
            }
        }
        rows.next();
    }
}

/// Rows `first_row..` of a transposing copy, in tiles of [`COPY_TILE`]² elements so that
/// the strided reads of consecutive rows share cache lines.
fn copy_tiles(src: &[f32], d: &Dims<1>, base: usize, first_row: usize, out: &mut [f32]) {
    let (n, [s]) = d.inner();
    let a_len = d.len[d.rank - 2];
    let nrows = out.len() / n;
    let mut r = 0;
    let mut rows = RowWalk::at(d, [base], first_row);
    while r < nrows {
        // A band of rows that are consecutive along the contiguous dimension.
        let a = (first_row + r) % a_len;
        let band = (a_len - a).min(COPY_TILE).min(nrows - r);
        let o0 = rows.off[0];
        let extent = o0 + (band - 1) + (n - 1) * s;
        let block = &src[o0..=extent];
        for j0 in (0..n).step_by(COPY_TILE) {
            let j1 = (j0 + COPY_TILE).min(n);
            for i in 0..band {
                let orow = &mut out[(r + i) * n..(r + i + 1) * n];
                for j in j0..j1 {
                    orow[j] = block[i + j * s];
                }
            }
        }
        for _ in 0..band {
            rows.next();
        }
        r += band;
    }
}
