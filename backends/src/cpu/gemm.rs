//! The blocked GEMM of the CPU backends (see `docs/gemm.md`).
//!
//! Every output element gets exactly the canonical sequence of
//! [`crate::scalar::gemm_in`]: one f32 accumulator starting at `+0.0`, then
//! `acc = M::madd(a[i,p], b[p,j], acc)` for `p = 0, 1, …, k−1`, then `M::out`. Blocking
//! only changes *where* that accumulator lives between steps:
//!
//! - rows (`m`, with the batch folded in) are cut into parallel chunks and, inside a
//!   chunk, into blocks of at most `MC` rows whose packed `A` stays in L2;
//! - `k` is cut into blocks of at most `KC` steps. Between two k blocks the accumulator
//!   is stored to the output as an f32 and loaded back: the store and the load are exact,
//!   so the next block continues the same sequence. A k block never starts a new sum;
//!   nothing is ever added across threads or registers;
//! - columns are cut into panels of `NR` (a few vector lanes) and rows into micro-panels
//!   of `MR`: the micro-kernel keeps the `MR × NR` accumulators in registers.
//!
//! `B` is packed once per call (in parallel, pure data movement) into zero-padded panels
//! `k × NR`; each chunk packs its rows of `A` into zero-padded micro-panels `kc × MR`.
//! Packing is also how transposed and strided operands are handled: they are copied into
//! the row-major scratch layout that the micro-kernel reads. Padded lanes compute values
//! that are never stored.

use super::simd::SimdLane;
use super::{ComputeContext, Isa};
use crate::lane::{Exact, Fast, Madd};
use crate::scalar::ModeSpec;
use core::cell::Cell;
use exactgrad_core::backend::MatmulSpec;
use exactgrad_core::ComputeMode;

/// Steps of `k` per block: a `KC × NR` panel of packed `B` stays in L1.
const KC: usize = 512;
/// Rows per block of packed `A` (an `MC × KC` block stays in L2).
const MC: usize = 144;
/// Fewest multiply-adds worth a parallel chunk (a few microseconds of work).
const MIN_CHUNK_MADDS: usize = 1 << 17;
/// Parallel chunks aimed at when the product is large enough (a constant, so that the
/// chunking depends only on the shape).
const TARGET_CHUNKS: usize = 8;
/// Steps of `k` per block of the transposing packer.
const TRANSPOSE_RUN: usize = 32;
/// Capacity of the scratch tile of partial (edge) micro-tiles: at least `MR × NR`.
const TILE_MAX: usize = 512;
/// Most rows per `B` for which full panels of a unit-column-stride `B` are read in place
/// rather than packed (each panel then serves at most this many rows: its copy would cost
/// about as much as its products).
const DIRECT_B_MAX_ROWS: usize = 48;

/// The batched product of [`MatmulSpec`] on `isa`, in the canonical order of `M`.
///
/// The mode's multiply-add is that of [`Exact`] or [`Fast`], chosen by `M::MODE`.
///
/// # Safety
/// `isa.is_supported(M::MODE)` must hold on this CPU.
pub(crate) unsafe fn matmul<M: ModeSpec>(
    isa: Isa,
    ctx: &ComputeContext,
    spec: &MatmulSpec,
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
) {
    // SAFETY: the caller guarantees `isa.is_supported(M::MODE)`; each arm runs the kernel
    // whose target features that implies (avx512f; avx2 + fma; sse2, part of every x86-64
    // CPU, for exact mode on the 128-bit path and sse2 + fma for fast mode there, whose
    // support requires FMA; neon, whose fused multiply-add is part of every AArch64 CPU;
    // `fma` for the scalar fast kernel only after detecting it).
    unsafe {
        match M::MODE {
            ComputeMode::Exact => match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => run::<Avx512Exact>(ctx, spec, a, b, out),
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => run::<Avx2Exact>(ctx, spec, a, b, out),
                #[cfg(target_arch = "x86_64")]
                Isa::V128 => run::<V128Exact>(ctx, spec, a, b, out),
                #[cfg(target_arch = "aarch64")]
                Isa::Neon => run::<NeonExact>(ctx, spec, a, b, out),
                _ => run::<ScalarExact>(ctx, spec, a, b, out),
            },
            ComputeMode::Fast => match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => run::<Avx512Fast>(ctx, spec, a, b, out),
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => run::<Avx2Fast>(ctx, spec, a, b, out),
                #[cfg(target_arch = "x86_64")]
                Isa::V128 => run::<V128Fast>(ctx, spec, a, b, out),
                #[cfg(target_arch = "aarch64")]
                Isa::Neon => run::<NeonFast>(ctx, spec, a, b, out),
                #[cfg(target_arch = "x86_64")]
                _ if std::is_x86_feature_detected!("fma") => {
                    run::<ScalarFastFma>(ctx, spec, a, b, out)
                }
                _ => run::<ScalarFast>(ctx, spec, a, b, out),
            },
        }
    }
}

/// What a chunk of rows needs to know about the product.
struct Job<'a> {
    m: usize,
    k: usize,
    n: usize,
    a: &'a [f32],
    a_offset: usize,
    a_strides: [usize; 3],
    /// Packed `B`: per batch of `B`, `n / NR` (rounded up) panels of `k × NR` (with
    /// `direct`, only the last, partial panel of each batch is packed).
    bpack: &'a [f32],
    /// Elements of `bpack` per batch, 0 when every batch shares one `B`.
    b_batch_len: usize,
    /// `B` itself, its offset and strides.
    b: &'a [f32],
    b_offset: usize,
    b_strides: [usize; 3],
    /// Full panels read `B` in place (row stride `b_strides[1]`) instead of a packed copy.
    direct: bool,
}

/// One instantiation of the micro-kernels: a lane type, a mode and a micro-tile shape.
///
/// The kernels are separate functions compiled with the path's target features (and
/// never inlined into the driver), so each keeps its accumulators in registers.
trait Kernel {
    /// Rows of a full micro-tile.
    const MR: usize;
    /// Rows of the short kernel used for edge tiles of at most `MH` rows.
    const MH: usize;
    /// Elements of one lane.
    const W: usize;
    /// Columns of a full micro-tile (a whole number of lanes).
    const NR: usize;

    /// [`pack_a`] with this kernel's `MR`.
    fn pack_a(job: &Job<'_>, r0: usize, rows: usize, pc: usize, kc: usize, apack: &mut [f32]);

    /// One full `MR × NR` tile in place, as [`micro`] with `astep = MR` and the given
    /// `bstep` (`NR` for a packed panel, the row stride of `B` when read in place).
    ///
    /// # Safety
    /// The contract of [`micro`], and the CPU has the kernel's target features.
    #[allow(clippy::too_many_arguments)]
    unsafe fn full(
        kc: usize,
        a: *const f32,
        b: *const f32,
        bstep: usize,
        c: *mut f32,
        ldc: usize,
        load: bool,
        last: bool,
    );

    /// One edge tile of `rows × cols` (at most `MR × NR`) into the scratch tile `t` (row
    /// stride `NR`), on the smallest kernel covering it: `MH` or `MR` rows; one, two or
    /// `NR / W` lanes; `bstep` as for [`Kernel::full`].
    ///
    /// # Safety
    /// The contract of [`micro`] for an `MR × NR` tile at `t` with `ldc = NR`, and the CPU
    /// has the kernel's target features.
    #[allow(clippy::too_many_arguments)]
    unsafe fn edge(
        kc: usize,
        a: *const f32,
        b: *const f32,
        bstep: usize,
        t: *mut f32,
        rows: usize,
        cols: usize,
        load: bool,
        last: bool,
    );
}

/// Declares a [`Kernel`]: the generic micro-kernel instantiated inside functions compiled
/// with the path's target features.
macro_rules! kernel {
    ($name:ident, $lane:ty, $mode:ty, $mr:literal, $mh:literal, $nv:literal $(, $feature:literal)?) => {
        struct $name;

        impl Kernel for $name {
            const MR: usize = $mr;
            const MH: usize = $mh;
            const W: usize = <$lane as SimdLane>::WIDTH;
            const NR: usize = $nv * <$lane as SimdLane>::WIDTH;

            fn pack_a(job: &Job<'_>, r0: usize, rows: usize, pc: usize, kc: usize, apack: &mut [f32]) {
                pack_a::<$mr>(job, r0, rows, pc, kc, apack)
            }

            #[inline(always)]
            unsafe fn full(
                kc: usize,
                a: *const f32,
                b: *const f32,
                bstep: usize,
                c: *mut f32,
                ldc: usize,
                load: bool,
                last: bool,
            ) {
                #[inline(never)]
                #[allow(clippy::too_many_arguments)]
                $(#[target_feature(enable = $feature)])?
                unsafe fn imp(
                    kc: usize,
                    a: *const f32,
                    b: *const f32,
                    bstep: usize,
                    c: *mut f32,
                    ldc: usize,
                    load: bool,
                    last: bool,
                ) {
                    // SAFETY: the caller of `full` guarantees `micro`'s contract for one
                    // MR × NR tile with astep = MR and this bstep (the `Kernel::full`
                    // contract); the target features are those `imp` is compiled with.
                    unsafe { micro::<$lane, $mode, $mr, $nv>(kc, a, $mr, b, bstep, c, ldc, load, last) }
                }
                // SAFETY: `imp` needs the kernel's target features and `micro`'s pointer
                // contract, both guaranteed by the caller of `full`.
                unsafe { imp(kc, a, b, bstep, c, ldc, load, last) }
            }

            #[inline(always)]
            unsafe fn edge(
                kc: usize,
                a: *const f32,
                b: *const f32,
                bstep: usize,
                t: *mut f32,
                rows: usize,
                cols: usize,
                load: bool,
                last: bool,
            ) {
                #[inline(never)]
                #[allow(clippy::too_many_arguments)]
                $(#[target_feature(enable = $feature)])?
                unsafe fn imp(
                    kc: usize,
                    a: *const f32,
                    b: *const f32,
                    bstep: usize,
                    t: *mut f32,
                    rows: usize,
                    cols: usize,
                    load: bool,
                    last: bool,
                ) {
                    const W: usize = <$lane as SimdLane>::WIDTH;
                    const NR: usize = $nv * W;
                    // SAFETY: the caller of `edge` guarantees `micro`'s contract for an
                    // MR × NR tile at `t` (row stride NR, B steps of bstep) and the target
                    // features `imp` is compiled with; each variant reads only the first MH
                    // or MR rows of the A panel and the first 1, 2 or NV lanes of each B
                    // step and of `t`'s rows (2 < NV when chosen), a part of that tile.
                    unsafe {
                        match (rows <= $mh, cols.div_ceil(W)) {
                            (true, 1) => micro::<$lane, $mode, $mh, 1>(kc, a, $mr, b, bstep, t, NR, load, last),
                            (true, 2) if 2 < $nv => micro::<$lane, $mode, $mh, 2>(kc, a, $mr, b, bstep, t, NR, load, last),
                            (true, _) => micro::<$lane, $mode, $mh, $nv>(kc, a, $mr, b, bstep, t, NR, load, last),
                            (false, 1) => micro::<$lane, $mode, $mr, 1>(kc, a, $mr, b, bstep, t, NR, load, last),
                            (false, 2) if 2 < $nv => micro::<$lane, $mode, $mr, 2>(kc, a, $mr, b, bstep, t, NR, load, last),
                            (false, _) => micro::<$lane, $mode, $mr, $nv>(kc, a, $mr, b, bstep, t, NR, load, last),
                        }
                    }
                }
                // SAFETY: `imp` needs the kernel's target features and `micro`'s pointer
                // contract for the tile at `t`, both guaranteed by the caller of `edge`.
                unsafe { imp(kc, a, b, bstep, t, rows, cols, load, last) }
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
use super::simd::{F32x16, F32x4, F32x8};

#[cfg(target_arch = "x86_64")]
kernel!(Avx512Exact, F32x16, Exact, 6, 3, 4, "avx512f");
#[cfg(target_arch = "x86_64")]
kernel!(Avx512Fast, F32x16, Fast, 6, 3, 4, "avx512f");
#[cfg(target_arch = "x86_64")]
kernel!(Avx2Exact, F32x8, Exact, 6, 3, 2, "avx2,fma");
#[cfg(target_arch = "x86_64")]
kernel!(Avx2Fast, F32x8, Fast, 6, 3, 2, "avx2,fma");
#[cfg(target_arch = "x86_64")]
kernel!(V128Exact, F32x4, Exact, 6, 3, 2, "sse2");
#[cfg(target_arch = "x86_64")]
kernel!(V128Fast, F32x4, Fast, 6, 3, 2, "sse2,fma");
// NEON (`docs/gemm.md` §3): 12 columns (three lanes) in both modes; fast mode keeps
// 8 × 12 accumulators (24 of the 32 vector registers, plus 3 B lanes and the A values),
// exact mode 6 × 12, since its separate products need registers of their own and LLVM
// spills accumulators of an 8 × 12 exact tile inside the loop.
#[cfg(target_arch = "aarch64")]
kernel!(NeonExact, super::simd::F32x4, Exact, 6, 3, 3, "neon");
#[cfg(target_arch = "aarch64")]
kernel!(NeonFast, super::simd::F32x4, Fast, 8, 4, 3, "neon");
kernel!(ScalarExact, f32, Exact, 4, 2, 4);
kernel!(ScalarFast, f32, Fast, 4, 2, 4);
// The scalar fast kernel with the FMA instruction instead of a call to the C library's
// `fmaf` (both are the correctly rounded fused multiply-add: the same bits).
#[cfg(target_arch = "x86_64")]
kernel!(ScalarFastFma, f32, Fast, 4, 2, 4, "fma");

/// The driver: checks, packs `B`, cuts the rows into chunks and runs them on `ctx`.
///
/// # Safety
/// The CPU must have `K`'s target features.
unsafe fn run<K: Kernel>(
    ctx: &ComputeContext,
    spec: &MatmulSpec,
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
) {
    let MatmulSpec { batch, m, k, n, .. } = *spec;
    assert_eq!(out.len(), batch * m * n, "matmul: output length");
    if out.is_empty() {
        return;
    }
    if k == 0 {
        // An empty sum: every accumulator stays +0.
        out.fill(0.0);
        return;
    }
    if spec.b_strides[2] != 1 && spec.a_strides[2] == 1 && m < n {
        // B would go through the transposing packer (k × n elements) while A is
        // row-major: compute Cᵀ = Bᵀ·Aᵀ instead, whose packed B is Aᵀ (k × m, fewer
        // elements) and whose A is Bᵀ, row-major. Every output element is the same
        // sequence of multiply-adds of the same products in increasing k (a product
        // and a fused multiply-add do not depend on the order of their two factors;
        // exact mode canonicalises NaN), so the bits are the same.
        let [sa0, sa1, sa2] = spec.a_strides;
        let [sb0, sb1, sb2] = spec.b_strides;
        let t = MatmulSpec {
            batch,
            m: n,
            k,
            n: m,
            a_offset: spec.b_offset,
            a_strides: [sb0, sb2, sb1],
            b_offset: spec.a_offset,
            b_strides: [sa0, sa2, sa1],
        };
        let len = batch * m * n;
        let mut tbuf = Scratch::take(&SCRATCH_T, len);
        let ct = &mut tbuf.buf[..len];
        // SAFETY: the caller guarantees `K`'s target features; `t` addresses exactly the
        // elements of `b` and `a` that `spec` does, and `ct` holds batch·n·m elements.
        unsafe { run::<K>(ctx, &t, b, a, ct) };
        for (src, dst) in ct.chunks_exact(m * n).zip(out.chunks_exact_mut(m * n)) {
            transpose_into(src, n, m, dst);
        }
        return;
    }
    let (mr, nr) = (K::MR, K::NR);
    let npanels = n.div_ceil(nr);
    let b_shared = batch == 1 || spec.b_strides[0] == 0;
    let b_batches = if b_shared { 1 } else { batch };
    let panel_len = k * nr;
    let b_batch_len = npanels * panel_len;
    // A product with few rows per `B` reads each packed panel only a few times, so the
    // copy costs about as much as the products; with unit column stride the full panels
    // are then read in place (the same values in the same order: the same bits) when B
    // is row-major (rows at least `n` apart, so that a step's `NR` columns are contiguous).
    let rows_per_b = if b_shared { batch * m } else { m };
    let [_, sb1, sb2] = spec.b_strides;
    let direct = sb2 == 1 && sb1 >= n && rows_per_b <= DIRECT_B_MAX_ROWS;

    // Pack B: panel `jp` of batch `bb` holds rows 0..k of columns jp*NR.. (zero-padded).
    let mut bbuf = Scratch::take(&SCRATCH_B, b_batches * b_batch_len);
    let bpack = &mut bbuf.buf[..b_batches * b_batch_len];
    let panels_per_chunk = (MIN_CHUNK_MADDS / panel_len).max(1);
    ctx.for_each_chunk(bpack, panels_per_chunk * panel_len, |ci, chunk| {
        for (pi, panel) in chunk.chunks_mut(panel_len).enumerate() {
            let idx = ci * panels_per_chunk + pi;
            let j0 = (idx % npanels) * nr;
            if !direct || j0 + nr > n {
                pack_b(spec, b, idx / npanels, j0, nr, panel);
            }
        }
    });

    let job = Job {
        m,
        k,
        n,
        a,
        a_offset: spec.a_offset,
        a_strides: spec.a_strides,
        bpack,
        b_batch_len: if b_shared { 0 } else { b_batch_len },
        b,
        b_offset: spec.b_offset,
        b_strides: spec.b_strides,
        direct,
    };

    // Chunks of whole rows of the batch-folded output: about TARGET_CHUNKS of them, none
    // smaller than MIN_CHUNK_MADDS, a multiple of MR. Only the shape decides.
    let total_rows = batch * m;
    let min_rows = MIN_CHUNK_MADDS.div_ceil(n * k);
    let rows_per_chunk = total_rows
        .div_ceil(TARGET_CHUNKS)
        .max(min_rows)
        .div_ceil(mr)
        * mr;
    let apack_len = MC.div_ceil(mr) * mr * KC.min(k);
    ctx.for_each_chunk(out, rows_per_chunk * n, |ci, chunk| {
        let mut abuf = Scratch::take(&SCRATCH_A, apack_len);
        // SAFETY: the caller of `run` guarantees `K`'s target features.
        unsafe { rows::<K>(&job, ci * rows_per_chunk, chunk, &mut abuf.buf[..apack_len]) };
    });
}

std::thread_local! {
    /// This thread's packing buffer for `B` (kept between calls, so that a training loop
    /// does not map and fault in fresh pages for every product).
    static SCRATCH_B: Cell<Vec<f32>> = const { Cell::new(Vec::new()) };
    /// This thread's packing buffer for `A`.
    static SCRATCH_A: Cell<Vec<f32>> = const { Cell::new(Vec::new()) };
    /// This thread's buffer for a product computed transposed.
    static SCRATCH_T: Cell<Vec<f32>> = const { Cell::new(Vec::new()) };
}

/// Writes the transpose of `src` (`rows × cols`, row-major) into `dst` (`cols × rows`),
/// in square blocks so that both sides stay in cache.
fn transpose_into(src: &[f32], rows: usize, cols: usize, dst: &mut [f32]) {
    const BLOCK: usize = 32;
    assert!(
        src.len() == rows * cols && dst.len() == rows * cols,
        "gemm: transpose"
    );
    for r0 in (0..rows).step_by(BLOCK) {
        for c0 in (0..cols).step_by(BLOCK) {
            for r in r0..rows.min(r0 + BLOCK) {
                for c in c0..cols.min(c0 + BLOCK) {
                    dst[c * rows + r] = src[r * cols + c];
                }
            }
        }
    }
}

/// Largest buffer (in f32 elements) a thread keeps after a call: 16 MiB.
const SCRATCH_KEEP: usize = 1 << 22;

/// A per-thread scratch buffer taken out of its slot for one use and put back on drop.
/// Its contents are never read before they are written: the packers write every
/// element, padding included.
struct Scratch {
    buf: Vec<f32>,
    slot: &'static std::thread::LocalKey<Cell<Vec<f32>>>,
}

impl Scratch {
    fn take(slot: &'static std::thread::LocalKey<Cell<Vec<f32>>>, len: usize) -> Self {
        let mut buf = slot.take();
        if buf.len() < len {
            buf.resize(len, 0.0);
        }
        Scratch { buf, slot }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if self.buf.len() <= SCRATCH_KEEP {
            self.slot.set(core::mem::take(&mut self.buf));
        }
    }
}

/// Packs the columns `j0 .. j0 + NR` of the `B` of batch `bb` into `panel` (`k × NR`,
/// row-major, columns past `n` zero). Writes every element of `panel`.
fn pack_b(spec: &MatmulSpec, b: &[f32], bb: usize, j0: usize, nr: usize, panel: &mut [f32]) {
    let (k, n) = (spec.k, spec.n);
    let [sb0, sb1, sb2] = spec.b_strides;
    let base = spec.b_offset + bb * sb0;
    let cols = nr.min(n - j0);
    if cols < nr {
        panel.fill(0.0);
    }
    if sb2 == 1 {
        for (p, dst) in panel.chunks_exact_mut(nr).enumerate() {
            let s = base + p * sb1 + j0;
            dst[..cols].copy_from_slice(&b[s..s + cols]);
        }
    } else {
        // Transposed or strided: a blocked transpose, so that the block of the panel being
        // written stays in L1 while each column of B is read in runs of TRANSPOSE_RUN.
        for p0 in (0..k).step_by(TRANSPOSE_RUN) {
            let pn = TRANSPOSE_RUN.min(k - p0);
            let dst = &mut panel[p0 * nr..(p0 + pn) * nr];
            for c in 0..cols {
                let s = base + (j0 + c) * sb2 + p0 * sb1;
                for p in 0..pn {
                    dst[p * nr + c] = b[s + p * sb1];
                }
            }
        }
    }
}

/// Packs rows `r0 .. r0 + rows` (batch-folded) and steps `pc .. pc + kc` of `A` into
/// micro-panels of `MR` rows (`kc × MR`, p-major; rows past the end zero). Writes every
/// element of `apack[.. rows.div_ceil(MR) * MR * kc]`.
#[inline(always)]
fn pack_a<const MR: usize>(
    job: &Job<'_>,
    r0: usize,
    rows: usize,
    pc: usize,
    kc: usize,
    apack: &mut [f32],
) {
    let [sa0, sa1, sa2] = job.a_strides;
    let a = job.a;
    for (ip, dst) in apack[..rows.div_ceil(MR) * MR * kc]
        .chunks_exact_mut(MR * kc)
        .enumerate()
    {
        let valid = MR.min(rows - ip * MR);
        let base: [usize; MR] = core::array::from_fn(|i| {
            let r = r0 + ip * MR + i.min(valid - 1);
            job.a_offset + (r / job.m) * sa0 + (r % job.m) * sa1 + pc * sa2
        });
        if valid == MR && sa2 == 1 {
            // Row-major A: MR rows read side by side, the panel written in order.
            let src: [&[f32]; MR] = core::array::from_fn(|i| &a[base[i]..base[i] + kc]);
            for (p, d) in dst.chunks_exact_mut(MR).enumerate().take(kc) {
                for (x, row) in d.iter_mut().zip(src.iter()) {
                    *x = row[p];
                }
            }
        } else if valid == MR && sa1 == 1 && base[MR - 1] == base[0] + MR - 1 {
            // Transposed A (one batch): each step's MR values are contiguous.
            for (p, d) in dst.chunks_exact_mut(MR).enumerate() {
                let s = base[0] + p * sa2;
                d.copy_from_slice(&a[s..s + MR]);
            }
        } else {
            for (p, d) in dst.chunks_exact_mut(MR).enumerate() {
                for i in 0..valid {
                    d[i] = a[base[i] + p * sa2];
                }
                d[valid..].fill(0.0);
            }
        }
    }
}

/// Computes output rows `r0 .. r0 + out.len() / n` of the batch-folded product, using
/// `apack` (at least `MC` rounded up to `MR`, times `min(KC, k)` elements) as scratch.
///
/// # Safety
/// The CPU must have `K`'s target features.
unsafe fn rows<K: Kernel>(job: &Job<'_>, r0: usize, out: &mut [f32], apack: &mut [f32]) {
    let (m, k, n) = (job.m, job.k, job.n);
    let (mr, nr) = (K::MR, K::NR);
    let npanels = n.div_ceil(nr);
    let nrows = out.len() / n;
    let mut s = 0;
    while s < nrows {
        // A block: at most MC rows, inside one batch when the batches have their own B.
        let r = r0 + s;
        let mut e = nrows.min(s + MC);
        let mut bpack = job.bpack;
        let mut b_base = job.b_offset;
        if job.b_batch_len != 0 {
            e = e.min(s + (m - r % m));
            bpack = &bpack[(r / m) * job.b_batch_len..];
            b_base += (r / m) * job.b_strides[0];
        }
        let block_rows = e - s;
        let c = &mut out[s * n..e * n];
        let mut pc = 0;
        while pc < k {
            let kc = KC.min(k - pc);
            K::pack_a(job, r, block_rows, pc, kc, apack);
            let (load, last) = (pc > 0, pc + kc == k);
            for jp in 0..npanels {
                let j0 = jp * nr;
                let cols = nr.min(n - j0);
                let (bpanel, bstep) = if job.direct && cols == nr {
                    // Steps pc..pc+kc of columns j0..j0+NR of B, in place.
                    let sb1 = job.b_strides[1];
                    (&job.b[b_base + pc * sb1 + j0..], sb1)
                } else {
                    (&bpack[(jp * k + pc) * nr..][..kc * nr], nr)
                };
                for (ip, apanel) in apack[..block_rows.div_ceil(mr) * mr * kc]
                    .chunks_exact(mr * kc)
                    .enumerate()
                {
                    let i0 = ip * mr;
                    let rws = mr.min(block_rows - i0);
                    // SAFETY: the caller of `rows` guarantees `K`'s target features.
                    unsafe {
                        tile::<K>(
                            kc, apanel, bpanel, bstep, c, n, i0, j0, rws, cols, load, last,
                        )
                    };
                }
            }
            pc += kc;
        }
        s = e;
    }
}

/// One micro-tile at rows `i0..i0+rows`, columns `j0..j0+cols` of `c` (row stride
/// `ldc`): full tiles run in place, edge tiles through a scratch tile.
///
/// # Safety
/// The CPU must have `K`'s target features.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn tile<K: Kernel>(
    kc: usize,
    apanel: &[f32],
    bpanel: &[f32],
    bstep: usize,
    c: &mut [f32],
    ldc: usize,
    i0: usize,
    j0: usize,
    rows: usize,
    cols: usize,
    load: bool,
    last: bool,
) {
    let (mr, nr) = (K::MR, K::NR);
    assert!(
        mr * nr <= TILE_MAX && K::MH <= mr && nr % K::W == 0,
        "gemm: tile shape"
    );
    assert!(
        bstep >= nr && apanel.len() >= kc * mr && bpanel.len() >= (kc - 1) * bstep + nr,
        "gemm: panels"
    );
    assert!(
        (1..=mr).contains(&rows) && (1..=nr).contains(&cols),
        "gemm: tile size"
    );
    assert!((i0 + rows - 1) * ldc + j0 + cols <= c.len(), "gemm: tile");
    let (a, b) = (apanel.as_ptr(), bpanel.as_ptr());
    if rows == mr && cols == nr {
        // SAFETY: the A panel holds kc steps of MR elements, the B panel kc steps of NR
        // elements bstep apart, and the tile's MR rows of NR columns at row stride ldc lie
        // inside `c` (all asserted above); the caller of `tile` guarantees the kernel's
        // target features.
        unsafe {
            K::full(
                kc,
                a,
                b,
                bstep,
                c.as_mut_ptr().add(i0 * ldc + j0),
                ldc,
                load,
                last,
            )
        }
        return;
    }
    let mut t = [0.0f32; TILE_MAX];
    if load {
        for i in 0..rows {
            let s = (i0 + i) * ldc + j0;
            t[i * nr..i * nr + cols].copy_from_slice(&c[s..s + cols]);
        }
    }
    // SAFETY: the panels hold kc steps of MR elements and of NR elements bstep apart
    // (asserted above) and `t` holds TILE_MAX >= MR × NR elements; the caller of `tile`
    // guarantees the kernel's target features.
    unsafe { K::edge(kc, a, b, bstep, t.as_mut_ptr(), rows, cols, load, last) }
    for i in 0..rows {
        let s = (i0 + i) * ldc + j0;
        c[s..s + cols].copy_from_slice(&t[i * nr..i * nr + cols]);
    }
}

/// The register-tiled micro-kernel: `MR × NV` lanes of accumulators, `kc` steps.
///
/// Starts from `+0.0` (or, when `load`, from the f32 values in `c`: the same sequence
/// continued), adds `a[i,p] × b[p,j]` with the mode's multiply-add for each step in
/// increasing `p`, and stores to `c`, NaN-canonicalised in exact mode when `last`.
///
/// # Safety
/// `a` must be valid for reads of `kc × astep` elements with `MR <= astep` (step `p` reads
/// `a[p·astep ..][.. MR]`), `b` of `(kc − 1) × bstep + NV × WIDTH` elements with
/// `NV × WIDTH <= bstep` (step `p` reads `b[p·bstep ..][.. NV × WIDTH]`); `c`
/// must have `MR` rows of `NV × WIDTH` elements at row stride `ldc`, readable and
/// writable; the CPU must have the target features of `L`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn micro<L: SimdLane, M: ModeSpec + Madd<L>, const MR: usize, const NV: usize>(
    kc: usize,
    a: *const f32,
    astep: usize,
    b: *const f32,
    bstep: usize,
    c: *mut f32,
    ldc: usize,
    load: bool,
    last: bool,
) {
    let w = L::WIDTH;
    let mut acc = [[L::splat(0.0); NV]; MR];
    if load {
        for (i, row) in acc.iter_mut().enumerate() {
            for (v, x) in row.iter_mut().enumerate() {
                // SAFETY: row i < MR, lanes v·W..(v+1)·W with v < NV lie inside the tile
                // at `c` (the caller's contract); the lane's target features are the
                // caller's too.
                *x = unsafe { L::load(c.add(i * ldc + v * w)) };
            }
        }
    }
    let (mut a, mut b) = (a, b);
    for _ in 0..kc {
        // SAFETY: step p reads a[p·astep ..][..MR] and b[p·bstep ..][..NV·WIDTH], inside
        // the kc·astep and (kc − 1)·bstep + NV·WIDTH elements the caller guarantees, then
        // advances both pointers by one step: `a` ends one past its elements, which `add`
        // allows; `b` may end further (B read in place), so it advances with
        // `wrapping_add` and is only dereferenced at steps inside. The lane's target
        // features are the caller's guarantee too.
        unsafe {
            let bv: [L; NV] = core::array::from_fn(|v| L::load(b.add(v * w)));
            for (i, row) in acc.iter_mut().enumerate() {
                let av = L::splat(*a.add(i));
                for (x, &bj) in row.iter_mut().zip(bv.iter()) {
                    *x = <M as Madd<L>>::madd(av, bj, *x);
                }
            }
            a = a.add(astep);
            b = b.wrapping_add(bstep);
        }
    }
    for (i, row) in acc.iter().enumerate() {
        for (v, &x) in row.iter().enumerate() {
            let x = if last {
                super::elementwise::finish::<L, M>(x)
            } else {
                x
            };
            // SAFETY: row i < MR, lanes v·W..(v+1)·W with v < NV lie inside the tile at
            // `c` (the caller's contract); the lane's target features are the caller's too.
            unsafe { x.store(c.add(i * ldc + v * w)) };
        }
    }
}
