//! The blocked GEMM of the CPU backends (see `docs/gemm.md`).
//!
//! Every output element gets exactly the canonical sequence of
//! [`crate::scalar::gemm_in`]: one f32 accumulator starting at `+0.0`, then
//! `acc = M::madd(a[i,p], b[p,j], acc)` for `p = 0, 1, …, k−1`, then `M::out`. Blocking
//! only changes *where* that accumulator lives between steps:
//!
//! - rows (`m`, with the batch folded in) are cut into parallel chunks and, inside a
//!   chunk, into blocks of at most `MC` rows whose packed `A` stays in level 2;
//! - `k` is cut into blocks of at most `KC` steps. Between two k blocks the accumulator
//!   is stored to the output as an f32 and loaded back: the store and the load are exact,
//!   so the next block continues the same sequence. A k block never starts a new sum;
//!   nothing is ever added across threads or registers;
//! - columns are cut into blocks of at most `NC` (the part of packed `B` that one block
//!   of `A` sweeps), panels of `NR` (a few vector lanes) and rows into micro-panels of
//!   `MR`: the micro-kernel keeps the `MR × NR` accumulators in registers.
//!
//! `KC`, `MC` and `NC` come from the caches of the machine ([`blocking`]); they change
//! the speed only. `B` is packed once per call (in parallel, pure data movement) into
//! zero-padded panels `k × NR`; each chunk packs its rows of `A` into zero-padded
//! micro-panels `kc × MR`. The packers read any strides — row-major, transposed or
//! general — and write the layout the micro-kernel reads; packing is a copy, so the
//! layout of an operand changes no bit. Padded lanes compute values that are never
//! stored. The packing buffers come from the compute context's buffer pool, one for `B`
//! and one per thread that can run a chunk, so a training loop reuses them.

mod blocking;

use super::buffers;
use super::simd::SimdLane;
use super::{ComputeContext, Isa, SendPtr};
use crate::lane::{Exact, Fast, Madd};
use crate::scalar::ModeSpec;
use blocking::Blocking;
use exactgrad_core::backend::MatmulSpec;
use exactgrad_core::{ComputeMode, Result};
use std::sync::Mutex;

/// Fewest multiply-adds worth a parallel chunk (a few microseconds of work).
const MIN_CHUNK_MADDS: usize = 1 << 17;
/// Parallel chunks aimed at when the product is large enough (a constant, so that the
/// chunking depends only on the shape and the kernel).
const TARGET_CHUNKS: usize = 8;
/// Most chunks a product is cut into: `TARGET_CHUNKS`, each rounded up to whole
/// micro-panels, never make more.
const MAX_CHUNKS: usize = TARGET_CHUNKS;
/// Capacity of the scratch tile of partial (edge) micro-tiles: at least `MR × NR`.
const TILE_MAX: usize = 512;
/// Most rows of a micro-tile (at least `MR`).
const TILE_ROWS: usize = 8;
/// Most rows per `B` for which full panels of a unit-column-stride `B` are read in place
/// rather than packed (each panel then serves at most this many rows: its copy would cost
/// about as much as its products).
const DIRECT_B_MAX_ROWS: usize = 48;
/// Fewest steps of a k block for which the output rows of the next tile are prefetched.
const PREFETCH_MIN_STEPS: usize = 64;
/// Most column panels for which a block of `A` is read in place rather than packed.
const DIRECT_A_MAX_PANELS: usize = 2;
/// f32 elements per cache line (64 bytes): the packing buffers start at a line.
const LINE: usize = 16;
/// Steps of `k` per block of the transposing packer of `B`.
const TRANSPOSE_RUN: usize = 32;

/// The batched product of [`MatmulSpec`] on `isa`, in the canonical order of `M`.
///
/// The mode's multiply-add is that of [`Exact`] or [`Fast`], chosen by `M::MODE`. Fails
/// only when the packing buffers cannot be had (the pool's memory limit, or the
/// allocator refusing).
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
) -> Result<()> {
    let blk = blocking::for_machine(blocking::tile(isa, M::MODE));
    // SAFETY: the caller guarantees `isa.is_supported(M::MODE)`; each arm runs the kernel
    // whose target features that implies (avx512f; avx2 + fma; sse2, part of every x86-64
    // CPU, for exact mode on the 128-bit path and sse2 + fma for fast mode there, whose
    // support requires FMA; neon, whose fused multiply-add is part of every AArch64 CPU;
    // `fma` for the scalar fast kernel only after detecting it).
    unsafe {
        match M::MODE {
            ComputeMode::Exact => match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => run::<Avx512Exact>(ctx, blk, spec, a, b, out),
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => run::<Avx2Exact>(ctx, blk, spec, a, b, out),
                #[cfg(target_arch = "x86_64")]
                Isa::V128 => run::<V128Exact>(ctx, blk, spec, a, b, out),
                #[cfg(target_arch = "aarch64")]
                Isa::Neon => run::<NeonExact>(ctx, blk, spec, a, b, out),
                _ => run::<ScalarExact>(ctx, blk, spec, a, b, out),
            },
            ComputeMode::Fast => match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => run::<Avx512Fast>(ctx, blk, spec, a, b, out),
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => run::<Avx2Fast>(ctx, blk, spec, a, b, out),
                #[cfg(target_arch = "x86_64")]
                Isa::V128 => run::<V128Fast>(ctx, blk, spec, a, b, out),
                #[cfg(target_arch = "aarch64")]
                Isa::Neon => run::<NeonFast>(ctx, blk, spec, a, b, out),
                #[cfg(target_arch = "x86_64")]
                _ if std::is_x86_feature_detected!("fma") => {
                    run::<ScalarFastFma>(ctx, blk, spec, a, b, out)
                }
                _ => run::<ScalarFast>(ctx, blk, spec, a, b, out),
            },
        }
    }
}

/// What a chunk of rows needs to know about the product.
struct Job<'a> {
    m: usize,
    k: usize,
    n: usize,
    blk: Blocking,
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
    /// The layout in which full micro-panels of `A` can be read in place (`A` has unit
    /// stride along `k` or along `m`), if any.
    a_place: Option<APanel>,
}

/// The layout of the `A` micro-panels of a packed block: row `i`, step `p` of a
/// micro-panel at `i · row + p · step`. The packer chooses it so that packing is a copy
/// of contiguous runs: `row = kc, step = 1` (rows one after another) for a row-major `A`,
/// `row = 1, step = MR` (the steps one after another) for a transposed one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct APanel {
    row: usize,
    step: usize,
}

/// How the micro-kernel forms `acc + a·b` from a value of the packed `A` (in memory) and
/// a lane of `B` (in a register), in the mode's rounding.
trait Step<L: SimdLane, M: Madd<L>> {
    /// What is computed once per row and step from `a[0]` (the broadcast, for kernels
    /// that multiply by a register).
    ///
    /// # Safety
    /// `a` must point to a readable f32; the CPU must have the lane's target features.
    unsafe fn row(a: *const f32) -> L;

    /// `M::madd(a[0], b, acc)` per lane, `av` being `Self::row(a)`.
    ///
    /// # Safety
    /// As for [`Step::row`].
    unsafe fn madd(a: *const f32, av: L, b: L, acc: L) -> L;
}

/// The value of `A` broadcast to a register once per row, then the mode's multiply-add
/// with each lane of `B`.
struct Broadcast;

impl<L: SimdLane, M: Madd<L>> Step<L, M> for Broadcast {
    #[inline(always)]
    unsafe fn row(a: *const f32) -> L {
        // SAFETY: the caller guarantees that `a` points to a readable f32.
        L::splat(unsafe { *a })
    }

    #[inline(always)]
    unsafe fn madd(_a: *const f32, av: L, b: L, acc: L) -> L {
        M::madd(av, b, acc)
    }
}

/// AVX-512, exact mode: each product multiplies the lane of `B` by the value of `A`
/// broadcast from memory inside the multiply (`vmulps zmm, zmm, m32{1to16}`), then adds
/// it to the accumulator — the same multiply and add as [`Exact`]'s `madd`. On cores that
/// execute 512-bit operations in two halves (AMD Zen 4), a broadcast into a register
/// takes a slot of the floating-point pipes that exact mode's adds need, while the
/// broadcast of a memory operand is done by the load unit (`docs/gemm.md` §3).
#[cfg(target_arch = "x86_64")]
struct BroadcastMul;

#[cfg(target_arch = "x86_64")]
impl Step<F32x16, Exact> for BroadcastMul {
    #[inline(always)]
    unsafe fn row(_a: *const f32) -> F32x16 {
        F32x16::splat(0.0)
    }

    #[inline(always)]
    unsafe fn madd(a: *const f32, _av: F32x16, b: F32x16, acc: F32x16) -> F32x16 {
        // SAFETY: the caller guarantees that `a` points to a readable f32 and that the
        // CPU has avx512f, the feature `mul_broadcast_avx512` is compiled with.
        let p = unsafe { mul_broadcast_avx512(b, a) };
        p.add(acc)
    }
}

/// `b · a[0]` per lane, rounded (one `vmulps` with an embedded broadcast).
///
/// # Safety
/// `a` must point to a readable f32; the CPU must have avx512f.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn mul_broadcast_avx512(b: F32x16, a: *const f32) -> F32x16 {
    let r: core::arch::x86_64::__m512;
    // SAFETY: the instruction reads the one f32 at `a` (readable, by the caller's
    // contract) and writes only the output register; it touches no stack and no flags.
    // The function is compiled with avx512f, which the zmm registers need.
    unsafe {
        core::arch::asm!(
            "vmulps {r}, {b}, dword ptr [{a}]{{1to16}}",
            r = lateout(zmm_reg) r,
            b = in(zmm_reg) b.0,
            a = in(reg) a,
            options(pure, readonly, nostack, preserves_flags),
        );
    }
    F32x16(r)
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
    fn pack_a(
        job: &Job<'_>,
        r0: usize,
        rows: usize,
        pc: usize,
        kc: usize,
        apack: &mut [f32],
    ) -> APanel;

    /// One full `MR × NR` tile in place, as [`micro`] with the given `A` micro-panel
    /// layout and `bstep` (`NR` for a packed panel, the row stride of `B` when read in
    /// place).
    ///
    /// # Safety
    /// The contract of [`micro`], and the CPU has the kernel's target features.
    #[allow(clippy::too_many_arguments)]
    unsafe fn full(
        kc: usize,
        a: *const f32,
        al: APanel,
        b: *const f32,
        bstep: usize,
        c: *mut f32,
        ldc: usize,
        load: bool,
        last: bool,
    );

    /// One edge tile of `rows × cols` (at most `MR × NR`) at `c` (row stride `ldc`), on
    /// the smallest kernel covering it: `MH` or `MR` rows; [`Kernel::edge_lanes`] lanes;
    /// `bstep` as for [`Kernel::full`]. The kernel reads and writes all the rows and
    /// lanes it covers.
    ///
    /// # Safety
    /// The contract of [`micro`] for a tile of `MH` (when `rows <= MH`) or `MR` rows of
    /// `edge_lanes(cols)` lanes at `c` with row stride `ldc`, and the CPU has the
    /// kernel's target features.
    #[allow(clippy::too_many_arguments)]
    unsafe fn edge(
        kc: usize,
        a: *const f32,
        al: APanel,
        b: *const f32,
        bstep: usize,
        c: *mut f32,
        ldc: usize,
        rows: usize,
        cols: usize,
        load: bool,
        last: bool,
    );

    /// The lanes the edge kernel runs for `cols` columns: one, two or all `NR / W`.
    fn edge_lanes(cols: usize) -> usize {
        let (lanes, all) = (cols.div_ceil(Self::W), Self::NR / Self::W);
        match lanes {
            1 => 1,
            2 if 2 < all => 2,
            _ => all,
        }
    }
}

/// Declares a [`Kernel`]: the generic micro-kernel instantiated inside functions compiled
/// with the path's target features, forming its products as `$step` does.
macro_rules! kernel {
    ($name:ident, $lane:ty, $mode:ty, $step:ty, $mr:literal, $mh:literal, $nv:literal $(, $feature:literal)?) => {
        struct $name;

        impl Kernel for $name {
            const MR: usize = $mr;
            const MH: usize = $mh;
            const W: usize = <$lane as SimdLane>::WIDTH;
            const NR: usize = $nv * <$lane as SimdLane>::WIDTH;

            fn pack_a(
                job: &Job<'_>,
                r0: usize,
                rows: usize,
                pc: usize,
                kc: usize,
                apack: &mut [f32],
            ) -> APanel {
                pack_a::<$mr>(job, r0, rows, pc, kc, apack)
            }

            #[inline(always)]
            unsafe fn full(
                kc: usize,
                a: *const f32,
                al: APanel,
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
                    al: APanel,
                    b: *const f32,
                    bstep: usize,
                    c: *mut f32,
                    ldc: usize,
                    load: bool,
                    last: bool,
                ) {
                    // SAFETY: the caller of `full` guarantees `micro`'s contract for one
                    // MR × NR tile with this A layout and bstep (the `Kernel::full`
                    // contract); the target features are those `imp` is compiled with.
                    unsafe { micro::<$lane, $mode, $step, $mr, $nv>(kc, a, al, b, bstep, c, ldc, load, last) }
                }
                // SAFETY: `imp` needs the kernel's target features and `micro`'s pointer
                // contract, both guaranteed by the caller of `full`.
                unsafe { imp(kc, a, al, b, bstep, c, ldc, load, last) }
            }

            #[inline(always)]
            unsafe fn edge(
                kc: usize,
                a: *const f32,
                al: APanel,
                b: *const f32,
                bstep: usize,
                c: *mut f32,
                ldc: usize,
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
                    al: APanel,
                    b: *const f32,
                    bstep: usize,
                    c: *mut f32,
                    ldc: usize,
                    short: bool,
                    lanes: usize,
                    load: bool,
                    last: bool,
                ) {
                    // SAFETY: the caller of `edge` guarantees `micro`'s contract for a
                    // tile of MH (short) or MR rows of `lanes` lanes at `c` (row stride
                    // ldc, B steps of bstep) and the target features `imp` is compiled
                    // with; `lanes` is 1, 2 (when 2 < NV) or NV (`edge_lanes`).
                    unsafe {
                        match (short, lanes) {
                            (true, 1) => micro::<$lane, $mode, $step, $mh, 1>(kc, a, al, b, bstep, c, ldc, load, last),
                            (true, 2) if 2 < $nv => micro::<$lane, $mode, $step, $mh, 2>(kc, a, al, b, bstep, c, ldc, load, last),
                            (true, _) => micro::<$lane, $mode, $step, $mh, $nv>(kc, a, al, b, bstep, c, ldc, load, last),
                            (false, 1) => micro::<$lane, $mode, $step, $mr, 1>(kc, a, al, b, bstep, c, ldc, load, last),
                            (false, 2) if 2 < $nv => micro::<$lane, $mode, $step, $mr, 2>(kc, a, al, b, bstep, c, ldc, load, last),
                            (false, _) => micro::<$lane, $mode, $step, $mr, $nv>(kc, a, al, b, bstep, c, ldc, load, last),
                        }
                    }
                }
                // SAFETY: `imp` needs the kernel's target features and `micro`'s pointer
                // contract for the tile at `c`, both guaranteed by the caller of `edge`.
                unsafe {
                    imp(kc, a, al, b, bstep, c, ldc, rows <= $mh, Self::edge_lanes(cols), load, last)
                }
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
use super::simd::{F32x16, F32x4, F32x8};
#[cfg(target_arch = "x86_64")]
use crate::lane::Lane;

#[cfg(target_arch = "x86_64")]
kernel!(Avx512Exact, F32x16, Exact, BroadcastMul, 6, 3, 4, "avx512f");
#[cfg(target_arch = "x86_64")]
kernel!(Avx512Fast, F32x16, Fast, Broadcast, 6, 3, 4, "avx512f");
#[cfg(target_arch = "x86_64")]
kernel!(Avx2Exact, F32x8, Exact, Broadcast, 6, 3, 2, "avx2,fma");
#[cfg(target_arch = "x86_64")]
kernel!(Avx2Fast, F32x8, Fast, Broadcast, 6, 3, 2, "avx2,fma");
#[cfg(target_arch = "x86_64")]
kernel!(V128Exact, F32x4, Exact, Broadcast, 6, 3, 2, "sse2");
#[cfg(target_arch = "x86_64")]
kernel!(V128Fast, F32x4, Fast, Broadcast, 6, 3, 2, "sse2,fma");
// NEON (`docs/gemm.md` §3): 12 columns (three lanes) in both modes; fast mode keeps
// 8 × 12 accumulators (24 of the 32 vector registers, plus 3 B lanes and the A values),
// exact mode 6 × 12, since its separate products need registers of their own and LLVM
// spills accumulators of an 8 × 12 exact tile inside the loop.
#[cfg(target_arch = "aarch64")]
kernel!(
    NeonExact,
    super::simd::F32x4,
    Exact,
    Broadcast,
    6,
    3,
    3,
    "neon"
);
#[cfg(target_arch = "aarch64")]
kernel!(
    NeonFast,
    super::simd::F32x4,
    Fast,
    Broadcast,
    8,
    4,
    3,
    "neon"
);
kernel!(ScalarExact, f32, Exact, Broadcast, 4, 2, 4);
kernel!(ScalarFast, f32, Fast, Broadcast, 4, 2, 4);
// The scalar fast kernel with the FMA instruction instead of a call to the C library's
// `fmaf` (both are the correctly rounded fused multiply-add: the same bits).
#[cfg(target_arch = "x86_64")]
kernel!(ScalarFastFma, f32, Fast, Broadcast, 4, 2, 4, "fma");

/// The driver: checks, chooses the orientation, packs `B`, cuts the rows into chunks and
/// runs them on `ctx`.
///
/// # Safety
/// The CPU must have `K`'s target features.
unsafe fn run<K: Kernel>(
    ctx: &ComputeContext,
    blk: Blocking,
    spec: &MatmulSpec,
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
) -> Result<()> {
    let MatmulSpec { batch, m, k, n, .. } = *spec;
    assert_eq!(out.len(), batch * m * n, "matmul: output length");
    if out.is_empty() {
        return Ok(());
    }
    if k == 0 {
        // An empty sum: every accumulator stays +0.
        out.fill(0.0);
        return Ok(());
    }
    let [sa0, sa1, sa2] = spec.a_strides;
    let [sb0, sb1, sb2] = spec.b_strides;
    let a_shared = batch == 1 || sa0 == 0;
    let swapped_b_rows = if a_shared { batch * n } else { n };
    if sa1 == 1 && sa2 != 1 && sb2 == 1 && m >= K::NR && swapped_b_rows <= DIRECT_B_MAX_ROWS {
        // A transposed and few columns (the input gradient `Wᵀ·g` of a convolution with
        // few output positions): computed as Cᵀ = Bᵀ·Aᵀ, whose B is Aᵀ, row-major and
        // read in place by few rows, and whose A is Bᵀ (small); each tile of Cᵀ is
        // written to C transposed. Every output element is the same sequence of
        // multiply-adds of the same products in increasing k (a product and a fused
        // multiply-add do not depend on the order of their two factors; exact mode
        // canonicalises NaN), so the bits are the same.
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
        let dst = Out {
            ptr: SendPtr(out.as_mut_ptr()),
            m: n,
            rs: 1,
            cs: n,
            bs: m * n,
        };
        // SAFETY: the caller guarantees `K`'s target features; `t` addresses exactly the
        // elements of `b` and `a` that `spec` does; `dst` maps row i and column j of
        // batch bi of Cᵀ to element bi·m·n + j·n + i of `out` (which holds batch·m·n
        // elements), a one-to-one map onto `out`.
        return unsafe { drive::<K>(ctx, blk, &t, b, a, dst) };
    }
    let dst = Out {
        ptr: SendPtr(out.as_mut_ptr()),
        m,
        rs: n,
        cs: 1,
        bs: m * n,
    };
    // SAFETY: the caller guarantees `K`'s target features; `dst` maps row i and column j
    // of batch bi to element (bi·m + i)·n + j of `out`, one to one.
    unsafe { drive::<K>(ctx, blk, spec, a, b, dst) }
}

/// Where the rows of the batch-folded output go: row `r` (batch `r / m`, row `r % m`),
/// column `j` at `ptr + (r / m) · bs + (r % m) · rs + j · cs`.
#[derive(Clone, Copy)]
struct Out {
    ptr: SendPtr<f32>,
    m: usize,
    rs: usize,
    cs: usize,
    bs: usize,
}

impl Out {
    /// The offset of row `r` (batch-folded), column `j`.
    #[inline(always)]
    fn at(&self, r: usize, j: usize) -> usize {
        if self.bs == self.m * self.rs {
            // Batches one after another: the folded rows are equally spaced.
            r * self.rs + j * self.cs
        } else {
            (r / self.m) * self.bs + (r % self.m) * self.rs + j * self.cs
        }
    }
}

/// Packs `B`, cuts the rows of the product `spec` into chunks and runs them on `ctx`,
/// writing through `dst`.
///
/// # Safety
/// The CPU must have `K`'s target features; `dst` must map the rows (`spec.batch ·
/// spec.m`, `dst.m = spec.m`) and columns (`spec.n`) of the product one to one onto
/// elements of one buffer, valid for writes and reads, that nothing else accesses during
/// the call; `spec.k > 0`.
unsafe fn drive<K: Kernel>(
    ctx: &ComputeContext,
    blk: Blocking,
    spec: &MatmulSpec,
    a: &[f32],
    b: &[f32],
    dst: Out,
) -> Result<()> {
    let MatmulSpec { batch, m, k, n, .. } = *spec;
    let (mr, nr) = (K::MR, K::NR);
    // k is cut into blocks of equal length (at most KC), so that no short last block pays
    // the tile's load and store for a few steps.
    let kblocks = k.div_ceil(blk.kc.max(1));
    let blk = Blocking {
        kc: k.div_ceil(kblocks),
        mc: blk.mc.max(1).div_ceil(mr) * mr,
        nc: blk.nc.max(1).div_ceil(nr) * nr,
    };
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

    // Chunks of whole rows of the batch-folded output: about TARGET_CHUNKS of them, none
    // smaller than MIN_CHUNK_MADDS, a multiple of MR. Only the shape and the kernel
    // decide.
    let total_rows = batch * m;
    let min_rows = MIN_CHUNK_MADDS.div_ceil(n * k);
    let rows_per_chunk = total_rows
        .div_ceil(TARGET_CHUNKS)
        .max(min_rows)
        .div_ceil(mr)
        * mr;
    let chunks = total_rows.div_ceil(rows_per_chunk);
    debug_assert!(chunks <= MAX_CHUNKS);

    // The packing buffers, from the context's pool: packed B, and one packed block of A
    // per thread that can run a chunk at the same time (at most one chunk per thread
    // runs at once). How many depends only on the shape and the thread count, so a
    // training loop asks the pool for the same buffers every step.
    // Both start at a cache line (64 bytes) whatever address the allocator gave, and each
    // slot of A is a whole number of lines, so that no vector load of a panel straddles
    // two lines in one process and not in the next.
    let slots = ctx.threads().min(chunks).min(MAX_CHUNKS);
    let apack_len =
        (blk.mc.min(rows_per_chunk).div_ceil(mr) * mr * blk.kc.min(k)).div_ceil(LINE) * LINE;
    let blen = b_batches * b_batch_len;
    let mut bstore = buffers::buffer(&ctx.buffers, "matmul", blen + LINE - 1, false)?;
    let mut astore = buffers::buffer(&ctx.buffers, "matmul", slots * apack_len + LINE - 1, false)?;
    let bbuf = line_aligned(&mut bstore, blen);
    let abuf = line_aligned(&mut astore, slots * apack_len);

    // Pack B: panel `jp` of batch `bb` holds rows 0..k of columns jp*NR.. (zero-padded).
    let bpack = &mut bbuf[..];
    let panels_per_chunk = (MIN_CHUNK_MADDS / panel_len).max(1);
    ctx.for_each_chunk(bpack, panels_per_chunk * panel_len, |ci, chunk| {
        let first = ci * panels_per_chunk;
        if sb2 == 1 && !direct {
            // Row-major B: step by step, the chunk's panels side by side, so that each
            // step of B is read as one run across the panels.
            pack_b_rows::<K>(spec, b, first, npanels, chunk);
            return;
        }
        for (pi, panel) in chunk.chunks_mut(panel_len).enumerate() {
            let idx = first + pi;
            let j0 = (idx % npanels) * nr;
            if !direct || j0 + nr > n {
                pack_b::<K>(spec, b, idx / npanels, j0, panel);
            }
        }
    });

    let job = Job {
        m,
        k,
        n,
        blk,
        a,
        a_offset: spec.a_offset,
        a_strides: spec.a_strides,
        bpack: &bbuf[..],
        b_batch_len: if b_shared { 0 } else { b_batch_len },
        b,
        b_offset: spec.b_offset,
        b_strides: spec.b_strides,
        direct,
        a_place: match spec.a_strides {
            [_, sa1, 1] => Some(APanel { row: sa1, step: 1 }),
            [_, 1, sa2] => Some(APanel { row: 1, step: sa2 }),
            _ => None,
        },
    };

    // The slots of packed A: a chunk takes the first free one (there is always one, as
    // no more chunks run at once than there are slots) and gives it back when done.
    let mut parts = abuf.chunks_mut(apack_len.max(1));
    let slot: [Mutex<&mut [f32]>; MAX_CHUNKS] =
        core::array::from_fn(|_| Mutex::new(parts.next().unwrap_or_default()));
    ctx.run(chunks, |ci| {
        let mut spins = 0u32;
        let mut apack = loop {
            if let Some(g) = slot[..slots].iter().find_map(|s| s.try_lock().ok()) {
                break g;
            }
            spins += 1;
            if spins < 64 {
                core::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        };
        let r0 = ci * rows_per_chunk;
        let nrows = rows_per_chunk.min(total_rows - r0);
        // SAFETY: the caller of `drive` guarantees `K`'s target features and that `dst`
        // maps the rows and columns of the product one to one onto a buffer nothing else
        // accesses; this chunk writes only its own rows r0 .. r0 + nrows, which no other
        // chunk writes.
        unsafe { rows::<K>(&job, r0, nrows, dst, &mut apack) };
    });
    Ok(())
}

/// Asks the CPU to bring the `len` f32 elements at `p` into level 1 (no effect on the
/// results; a prefetch never faults, so `p` need not be valid).
#[inline(always)]
fn prefetch(p: *const f32, len: usize) {
    #[cfg(target_arch = "x86_64")]
    for line in (0..len).step_by(LINE) {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: SSE is part of every x86-64 CPU; a prefetch hint reads nothing
        // architecturally and never faults, whatever the address (`wrapping_add` forms it
        // without claiming it is in bounds).
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(line) as *const i8) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, len);
}

/// The `len` elements of `buf` (which holds at least `len + LINE − 1`) from the first one
/// at a multiple of 64 bytes.
fn line_aligned(buf: &mut [f32], len: usize) -> &mut [f32] {
    let off = buf
        .as_ptr()
        .align_offset(LINE * core::mem::size_of::<f32>())
        .min(LINE - 1);
    &mut buf[off..off + len]
}

/// Packs the panels `first ..` (panel `idx` holds the columns `(idx % npanels)·NR ..` of
/// the `B` of batch `idx / npanels`) of a row-major `B` into `panels` (`k × NR` each,
/// columns past `n` zero), step by step across the panels. Writes every element of
/// `panels`.
fn pack_b_rows<K: Kernel>(
    spec: &MatmulSpec,
    b: &[f32],
    first: usize,
    npanels: usize,
    panels: &mut [f32],
) {
    let (k, n, nr) = (spec.k, spec.n, K::NR);
    let [sb0, sb1, _] = spec.b_strides;
    let count = panels.len() / (k * nr);
    for p in 0..k {
        for pi in 0..count {
            let idx = first + pi;
            let j0 = (idx % npanels) * nr;
            let cols = nr.min(n - j0);
            let s = spec.b_offset + (idx / npanels) * sb0 + p * sb1 + j0;
            let dst = &mut panels[(pi * k + p) * nr..][..nr];
            if cols == nr {
                dst[..K::NR].copy_from_slice(&b[s..s + K::NR]);
            } else {
                dst[..cols].copy_from_slice(&b[s..s + cols]);
                dst[cols..].fill(0.0);
            }
        }
    }
}

/// Packs the columns `j0 .. j0 + NR` of the `B` of batch `bb` into `panel` (`k × NR`,
/// row-major, columns past `n` zero). Writes every element of `panel`.
fn pack_b<K: Kernel>(spec: &MatmulSpec, b: &[f32], bb: usize, j0: usize, panel: &mut [f32]) {
    let (k, n, nr) = (spec.k, spec.n, K::NR);
    let [sb0, sb1, sb2] = spec.b_strides;
    let base = spec.b_offset + bb * sb0;
    let cols = nr.min(n - j0);
    if sb2 == 1 {
        // Row-major: each step's columns are contiguous (a copy of a constant length,
        // inlined, for full panels).
        for (p, dst) in panel.chunks_exact_mut(nr).enumerate() {
            let s = base + p * sb1 + j0;
            if cols == nr {
                dst[..K::NR].copy_from_slice(&b[s..s + K::NR]);
            } else {
                dst[..cols].copy_from_slice(&b[s..s + cols]);
                dst[cols..].fill(0.0);
            }
        }
        return;
    }
    if cols < nr {
        panel.fill(0.0);
    }
    #[cfg(target_arch = "x86_64")]
    if sb1 == 1 && cols >= 8 && k >= 8 && std::is_x86_feature_detected!("avx") {
        // Transposed, with AVX: blocks of 8 columns by 8 steps transposed in registers.
        let last = base + (j0 + cols - 1) * sb2 + k - 1;
        assert!(
            last < b.len() && panel.len() == k * nr,
            "gemm: transposed panel"
        );
        let (c8, k8) = (cols / 8 * 8, k / 8 * 8);
        // SAFETY: every block reads columns j0 + c0 .. + 8 (c0 + 8 <= cols) at steps
        // p0 .. p0 + 8 (p0 + 8 <= k) of B, inside `b` by the assertion above, and writes
        // steps p0 .. p0 + 8 of columns c0 .. c0 + 8 of the panel, inside its k × NR
        // elements; the CPU has AVX (detected just above).
        unsafe {
            for c0 in (0..c8).step_by(8) {
                let src = b.as_ptr().add(base + (j0 + c0) * sb2);
                for p0 in (0..k8).step_by(8) {
                    transpose8(src.add(p0), sb2, panel.as_mut_ptr().add(p0 * nr + c0), nr);
                }
            }
        }
        // The steps past the last block of 8 and the columns past the last block of 8.
        for c in 0..cols {
            let s = base + (j0 + c) * sb2;
            let from = if c < c8 { k8 } else { 0 };
            for p in from..k {
                panel[p * nr + c] = b[s + p];
            }
        }
        return;
    }
    // Transposed or strided: a blocked transpose, so that the block of the panel being
    // written stays in level 1 while each column of B is read in runs of TRANSPOSE_RUN
    // steps (contiguous when B is transposed).
    for p0 in (0..k).step_by(TRANSPOSE_RUN) {
        let pn = TRANSPOSE_RUN.min(k - p0);
        let dst = &mut panel[p0 * nr..(p0 + pn) * nr];
        for c in 0..cols {
            let s = base + (j0 + c) * sb2 + p0 * sb1;
            if sb1 == 1 {
                for (d, &v) in dst[c..].iter_mut().step_by(nr).zip(&b[s..s + pn]) {
                    *d = v;
                }
            } else {
                for (p, d) in dst[c..].iter_mut().step_by(nr).enumerate() {
                    *d = b[s + p * sb1];
                }
            }
        }
    }
}

/// Writes the transpose of the 8 × 8 block at `src` (rows `ss` apart) to `dst` (rows
/// `ds` apart): `dst[q · ds + c] = src[c · ss + q]`.
///
/// # Safety
/// `src + c · ss + q` must be readable and `dst + q · ds + c` writable for `c, q < 8`,
/// and the CPU must have AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn transpose8(src: *const f32, ss: usize, dst: *mut f32, ds: usize) {
    use core::arch::x86_64::*;
    // SAFETY: the loads read rows c < 8 of 8 elements at `src + c · ss` and the stores
    // write rows q < 8 of 8 elements at `dst + q · ds`, inside the caller's bounds; the
    // CPU has AVX (the caller's contract).
    unsafe {
        let r: [__m256; 8] = core::array::from_fn(|c| _mm256_loadu_ps(src.add(c * ss)));
        let t = [
            _mm256_unpacklo_ps(r[0], r[1]),
            _mm256_unpackhi_ps(r[0], r[1]),
            _mm256_unpacklo_ps(r[2], r[3]),
            _mm256_unpackhi_ps(r[2], r[3]),
            _mm256_unpacklo_ps(r[4], r[5]),
            _mm256_unpackhi_ps(r[4], r[5]),
            _mm256_unpacklo_ps(r[6], r[7]),
            _mm256_unpackhi_ps(r[6], r[7]),
        ];
        let u = [
            _mm256_shuffle_ps::<0x44>(t[0], t[2]),
            _mm256_shuffle_ps::<0xEE>(t[0], t[2]),
            _mm256_shuffle_ps::<0x44>(t[1], t[3]),
            _mm256_shuffle_ps::<0xEE>(t[1], t[3]),
            _mm256_shuffle_ps::<0x44>(t[4], t[6]),
            _mm256_shuffle_ps::<0xEE>(t[4], t[6]),
            _mm256_shuffle_ps::<0x44>(t[5], t[7]),
            _mm256_shuffle_ps::<0xEE>(t[5], t[7]),
        ];
        for q in 0..4 {
            _mm256_storeu_ps(
                dst.add(q * ds),
                _mm256_permute2f128_ps::<0x20>(u[q], u[q + 4]),
            );
            _mm256_storeu_ps(
                dst.add((q + 4) * ds),
                _mm256_permute2f128_ps::<0x31>(u[q], u[q + 4]),
            );
        }
    }
}

/// Packs rows `r0 .. r0 + rows` (batch-folded) and steps `pc .. pc + kc` of `A` into
/// micro-panels of `MR` rows (`MR × kc` elements each; rows past the end zero) and
/// returns their layout: rows one after another when `A` is row-major (each row a copy
/// of a contiguous run), steps one after another otherwise (each step a copy of `MR`
/// contiguous values when `A` is transposed). Writes every element of
/// `apack[.. rows.div_ceil(MR) * MR * kc]`.
#[inline(always)]
fn pack_a<const MR: usize>(
    job: &Job<'_>,
    r0: usize,
    rows: usize,
    pc: usize,
    kc: usize,
    apack: &mut [f32],
) -> APanel {
    let [sa0, sa1, sa2] = job.a_strides;
    let a = job.a;
    let row_major = sa2 == 1;
    if !row_major && sa1 == 1 && r0 / job.m == (r0 + rows - 1) / job.m {
        // Transposed A (the rows in one batch): step p of all the block's rows is one
        // contiguous run, read once and cut into the micro-panels (so that the matrix is
        // read line by line, not MR values per line).
        let base = job.a_offset + (r0 / job.m) * sa0 + r0 % job.m + pc * sa2;
        let full = rows / MR;
        for p in 0..kc {
            let src = &a[base + p * sa2..][..rows];
            for (ip, run) in src.chunks_exact(MR).enumerate() {
                apack[ip * MR * kc + p * MR..][..MR].copy_from_slice(run);
            }
            if full * MR < rows {
                let d = &mut apack[full * MR * kc + p * MR..][..MR];
                let tail = &src[full * MR..];
                d[..tail.len()].copy_from_slice(tail);
                d[tail.len()..].fill(0.0);
            }
        }
        return APanel { row: 1, step: MR };
    }
    for (ip, dst) in apack[..rows.div_ceil(MR) * MR * kc]
        .chunks_exact_mut(MR * kc)
        .enumerate()
    {
        let valid = MR.min(rows - ip * MR);
        let base: [usize; MR] = core::array::from_fn(|i| {
            let r = r0 + ip * MR + i.min(valid - 1);
            job.a_offset + (r / job.m) * sa0 + (r % job.m) * sa1 + pc * sa2
        });
        if row_major {
            for (i, d) in dst.chunks_exact_mut(kc).enumerate() {
                if i < valid {
                    d.copy_from_slice(&a[base[i]..base[i] + kc]);
                } else {
                    d.fill(0.0);
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
    if row_major {
        APanel { row: kc, step: 1 }
    } else {
        APanel { row: 1, step: MR }
    }
}

/// Computes output rows `r0 .. r0 + nrows` of the batch-folded product into `dst`, using
/// `apack` (at least `MC` rounded up to `MR`, times `min(KC, k)` elements, or the chunk's
/// rows rounded up to `MR` when fewer) as scratch.
///
/// # Safety
/// The CPU must have `K`'s target features; `dst` must map rows `r0 .. r0 + nrows` and
/// columns `0 .. n` one to one onto elements valid for reads and writes that nothing
/// else accesses during the call.
unsafe fn rows<K: Kernel>(job: &Job<'_>, r0: usize, nrows: usize, dst: Out, apack: &mut [f32]) {
    let (m, k, n) = (job.m, job.k, job.n);
    let (mr, nr) = (K::MR, K::NR);
    let Blocking { kc: kcb, mc, nc } = job.blk;
    let npanels = n.div_ceil(nr);
    let panels_per_block = nc / nr;
    // Output rows equally spaced with unit column stride (batches one after another).
    let uniform = dst.cs == 1 && dst.bs == dst.m * dst.rs;
    let mut s = 0;
    while s < nrows {
        // A block: at most MC rows, inside one batch when the batches have their own B.
        let r = r0 + s;
        let mut e = nrows.min(s + mc);
        let mut bpack = job.bpack;
        let mut b_base = job.b_offset;
        if job.b_batch_len != 0 {
            e = e.min(s + (m - r % m));
            bpack = &bpack[(r / m) * job.b_batch_len..];
            b_base += (r / m) * job.b_strides[0];
        }
        let block_rows = e - s;
        // Column blocks of NC: the part of packed B that this block of A sweeps.
        for jb in (0..npanels).step_by(panels_per_block) {
            let jend = npanels.min(jb + panels_per_block);
            // A block that serves few panels is read in place (a copy would cost about
            // as much as its products) when A has unit stride along k or along m; only
            // micro-panels with fewer than MR rows, or rows from two batches, are packed.
            let a_place = job.a_place.filter(|_| jend - jb <= DIRECT_A_MAX_PANELS);
            let mut pc = 0;
            while pc < k {
                let kc = kcb.min(k - pc);
                let al = match a_place {
                    Some(al) => al,
                    None => K::pack_a(job, r, block_rows, pc, kc, apack),
                };
                let (load, last) = (pc > 0, pc + kc == k);
                for jp in jb..jend {
                    let j0 = jp * nr;
                    let cols = nr.min(n - j0);
                    let (bpanel, bstep) = if job.direct && cols == nr {
                        // Steps pc..pc+kc of columns j0..j0+NR of B, in place.
                        let sb1 = job.b_strides[1];
                        (&job.b[b_base + pc * sb1 + j0..], sb1)
                    } else {
                        (&bpack[(jp * k + pc) * nr..][..kc * nr], nr)
                    };
                    for i0 in (0..block_rows).step_by(mr) {
                        let rws = mr.min(block_rows - i0);
                        let row = r + i0;
                        if kc >= PREFETCH_MIN_STEPS && i0 + 2 * mr <= block_rows && uniform {
                            // The next tile's rows of the output, which its kernel loads
                            // (after the first k block) or stores, are fetched while this
                            // tile computes (worth it when the tile is long enough to
                            // hide the fetch).
                            let next = dst.ptr.0.wrapping_add((row + mr) * dst.rs + j0);
                            for q in 0..mr {
                                prefetch(next.wrapping_add(q * dst.rs), cols);
                            }
                        }
                        let (apanel, al): (&[f32], APanel) = match a_place {
                            Some(al) if rws == mr && row / m == (row + mr - 1) / m => {
                                let [sa0, sa1, sa2] = job.a_strides;
                                let base = job.a_offset + (row / m) * sa0 + (row % m) * sa1;
                                (&job.a[base + pc * sa2..], al)
                            }
                            Some(_) => {
                                let al = K::pack_a(job, row, rws, pc, kc, apack);
                                (&apack[..mr * kc], al)
                            }
                            None => (&apack[i0 * kc..][..mr * kc], al),
                        };
                        // SAFETY: the caller of `rows` guarantees `K`'s target features and
                        // that `dst` maps this tile's rows and columns (inside the chunk's
                        // rows and 0 .. n) onto elements only this call accesses.
                        unsafe {
                            tile::<K>(
                                kc,
                                apanel,
                                al,
                                bpanel,
                                bstep,
                                dst,
                                r + i0,
                                j0,
                                rws,
                                cols,
                                load,
                                last,
                            )
                        };
                    }
                }
                pc += kc;
            }
        }
        s = e;
    }
}

/// One micro-tile at batch-folded rows `r..r+rows`, columns `j0..j0+cols` of `dst`: a
/// full tile, or an edge tile whose kernel covers it exactly, runs in place when its rows
/// are equally spaced with unit column stride; any other tile runs on a scratch tile
/// that is then copied out element by element.
///
/// # Safety
/// The CPU must have `K`'s target features; `dst` must map the tile's rows and columns
/// one to one onto elements valid for reads and writes that nothing else accesses during
/// the call.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn tile<K: Kernel>(
    kc: usize,
    apanel: &[f32],
    al: APanel,
    bpanel: &[f32],
    bstep: usize,
    dst: Out,
    r: usize,
    j0: usize,
    rows: usize,
    cols: usize,
    load: bool,
    last: bool,
) {
    let (mr, nr) = (K::MR, K::NR);
    assert!(
        mr * nr <= TILE_MAX && mr <= TILE_ROWS && K::MH <= mr && nr % K::W == 0,
        "gemm: tile shape"
    );
    assert!(
        bstep >= nr
            && apanel.len() > (mr - 1) * al.row + (kc - 1) * al.step
            && bpanel.len() >= (kc - 1) * bstep + nr,
        "gemm: panels"
    );
    assert!(
        (1..=mr).contains(&rows) && (1..=nr).contains(&cols),
        "gemm: tile size"
    );
    let (a, b) = (apanel.as_ptr(), bpanel.as_ptr());
    let c0 = dst.at(r, j0);
    // Rows equally spaced by `rs` with unit column stride: inside one batch, or batches
    // laid one after another.
    let uniform = dst.cs == 1 && (r / dst.m == (r + rows - 1) / dst.m || dst.bs == dst.m * dst.rs);
    let lanes = K::edge_lanes(cols);
    if uniform && rows == mr && cols == nr {
        // SAFETY: the A panel holds the MR rows of kc steps of its layout, the B panel kc
        // steps of NR elements bstep apart (asserted above); the tile's MR rows of NR
        // columns are the elements c0 + i·rs + j of `dst` (uniform rows, unit column
        // stride), which the caller guarantees valid and this call's own; the caller of
        // `tile` guarantees the kernel's target features.
        unsafe { K::full(kc, a, al, b, bstep, dst.ptr.0.add(c0), dst.rs, load, last) }
        return;
    }
    if uniform && lanes * K::W == cols && (rows == mr || rows == K::MH) {
        // The edge kernel covers exactly the tile: it runs in place.
        // SAFETY: as for the full tile, for the tile's rows (MH or MR) and its `lanes`
        // whole lanes (`lanes · W == cols` columns).
        unsafe {
            K::edge(
                kc,
                a,
                al,
                b,
                bstep,
                dst.ptr.0.add(c0),
                dst.rs,
                rows,
                cols,
                load,
                last,
            )
        }
        return;
    }
    let mut t = [0.0f32; TILE_MAX];
    // Row i of the tile starts at row_at[i]; its column j is j·cs further.
    let row_at: [usize; TILE_ROWS] = core::array::from_fn(|i| dst.at(r + i.min(rows - 1), j0));
    if load {
        for (i, &at) in row_at.iter().enumerate().take(rows) {
            for j in 0..cols {
                // SAFETY: row r + i, column j0 + j is an element of the tile, valid for
                // reads (the caller's contract).
                t[i * nr + j] = unsafe { *dst.ptr.0.add(at + j * dst.cs) };
            }
        }
    }
    // SAFETY: the A panel holds the MR rows of kc steps of its layout and the B panel kc
    // steps of NR elements bstep apart (asserted above); `t` holds TILE_MAX >= MR × NR
    // elements, a tile of MR rows of NR columns at row stride NR, which covers what any
    // edge kernel reads and writes; the caller of `tile` guarantees the kernel's target
    // features.
    unsafe {
        K::edge(
            kc,
            a,
            al,
            b,
            bstep,
            t.as_mut_ptr(),
            nr,
            rows,
            cols,
            load,
            last,
        )
    }
    for (i, &at) in row_at.iter().enumerate().take(rows) {
        for j in 0..cols {
            // SAFETY: row r + i, column j0 + j is an element of the tile, valid for
            // writes and accessed by this call only (the caller's contract).
            unsafe { *dst.ptr.0.add(at + j * dst.cs) = t[i * nr + j] };
        }
    }
}

/// The register-tiled micro-kernel: `MR × NV` lanes of accumulators, `kc` steps.
///
/// Starts from `+0.0` (or, when `load`, from the f32 values in `c`: the same sequence
/// continued), adds `a[i,p] × b[p,j]` with the mode's multiply-add (formed as `S` does)
/// for each step in increasing `p`, and stores to `c`, NaN-canonicalised in exact mode
/// when `last`.
///
/// # Safety
/// `a` must be valid for reads of the elements `i · al.row + p · al.step` for `i < MR`,
/// `p < kc`; `b` of `(kc − 1) × bstep + NV × WIDTH` elements with `NV × WIDTH <= bstep`
/// (step `p` reads `b[p·bstep ..][.. NV × WIDTH]`); `c` must have `MR` rows of
/// `NV × WIDTH` elements at row stride `ldc`, readable and writable; the CPU must have
/// the target features of `L` (and of `S`).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn micro<
    L: SimdLane,
    M: ModeSpec + Madd<L>,
    S: Step<L, M>,
    const MR: usize,
    const NV: usize,
>(
    kc: usize,
    a: *const f32,
    al: APanel,
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
    // The rows of the A micro-panel; each advances by `al.step` per step. Pointers past
    // the panel are formed with `wrapping_add` and only dereferenced inside it.
    let mut ar: [*const f32; MR] = core::array::from_fn(|i| a.wrapping_add(i * al.row));
    let mut b = b;
    for _ in 0..kc {
        // SAFETY: step p reads a[i·row + p·step] for i < MR and b[p·bstep ..][..NV·WIDTH],
        // inside the elements the caller guarantees; the pointers then advance by one
        // step with `wrapping_add` (they may end past the buffers and are dereferenced
        // only at steps inside). The lane's and the step's target features are the
        // caller's guarantee too.
        unsafe {
            let bv: [L; NV] = core::array::from_fn(|v| L::load(b.add(v * w)));
            for (row, &ai) in acc.iter_mut().zip(ar.iter()) {
                let av = S::row(ai);
                for (x, &bj) in row.iter_mut().zip(bv.iter()) {
                    *x = S::madd(ai, av, bj, *x);
                }
            }
        }
        for p in ar.iter_mut() {
            *p = p.wrapping_add(al.step);
        }
        b = b.wrapping_add(bstep);
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

#[cfg(test)]
mod tests {
    //! The driver with block sizes other than this machine's: every kernel this CPU runs,
    //! tiny and odd `KC`, `MC` and `NC` (many k blocks, row blocks and column blocks),
    //! row-major, transposed and strided operands, against the three-loop definition.
    //! The k blocks continue each accumulator in the same order, so the bits are those of
    //! `scalar::gemm_in` whatever the blocks.

    use super::*;
    use crate::scalar::gemm_in;
    use exactgrad_core::Philox;

    /// Fills a strided operand of `batches × rows × cols` with wide-magnitude values (the
    /// order of the additions shows in the bits) and a few NaN, infinities and zeros.
    fn operand(
        r: &mut Philox,
        batches: usize,
        rows: usize,
        cols: usize,
        t: bool,
    ) -> (Vec<f32>, [usize; 3]) {
        let per = rows * cols;
        let data = (0..batches * per + 3)
            .map(|_| match r.below(64) {
                0 => f32::NAN,
                1 => f32::INFINITY,
                2 => -0.0,
                _ => (r.next_f32() - 0.5) * 2f32.powi(r.below(30) as i32 - 15),
            })
            .collect();
        let strides = if t { [per, 1, rows] } else { [per, cols, 1] };
        (
            data,
            [
                if batches == 1 { 0 } else { strides[0] },
                strides[1],
                strides[2],
            ],
        )
    }

    /// The batched product by the three-loop definition, with the mode's output.
    fn reference<M: ModeSpec>(spec: &MatmulSpec, a: &[f32], b: &[f32]) -> Vec<f32> {
        let MatmulSpec { batch, m, k, n, .. } = *spec;
        let mut out = vec![0.0; batch * m * n];
        for (bi, c) in out.chunks_mut(m * n).enumerate() {
            let [sa0, sa1, sa2] = spec.a_strides;
            let [sb0, sb1, sb2] = spec.b_strides;
            gemm_in::<M>(
                m,
                k,
                n,
                &a[spec.a_offset + bi * sa0..],
                sa1,
                sa2,
                &b[spec.b_offset + bi * sb0..],
                sb1,
                sb2,
                c,
                n,
            );
            c.iter_mut().for_each(|v| *v = M::out(*v));
        }
        out
    }

    fn same(x: f32, y: f32, exact: bool) -> bool {
        x.to_bits() == y.to_bits() || (!exact && x.is_nan() && y.is_nan())
    }

    /// `K` on every shape, layout and block size of the test, at one and three threads.
    fn check<K: Kernel, M: ModeSpec>(name: &str) {
        let contexts = [ComputeContext::new(1), ComputeContext::new(3)];
        let mut r = Philox::new(5);
        let blocks = [
            Blocking {
                kc: 1,
                mc: 1,
                nc: 1,
            },
            Blocking {
                kc: 3,
                mc: 7,
                nc: 1,
            },
            Blocking {
                kc: 16,
                mc: K::MR,
                nc: 2 * K::NR,
            },
            Blocking {
                kc: 37,
                mc: 3 * K::MR,
                nc: 5 * K::NR,
            },
            Blocking {
                kc: 512,
                mc: 144,
                nc: 4096,
            },
        ];
        let shapes = [
            (1, 1, 1, 1),
            (1, 7, 5, 17),
            (2, 13, 33, 65),
            (3, 9, 70, 2 * K::NR + 3),
            (1, 40, 129, 9),
            // A transposed, few columns: computed transposed (Cᵀ = Bᵀ·Aᵀ).
            (2, K::NR + 7, 20, 5),
            (1, 2 * K::NR, 9, DIRECT_B_MAX_ROWS),
        ];
        for blk in blocks {
            for &(batch, m, k, n) in &shapes {
                for (ta, tb, share) in [
                    (false, false, 0),
                    (true, false, 1),
                    (false, true, 2),
                    (true, true, 0),
                ] {
                    let (a, sa) = operand(&mut r, if share == 1 { 1 } else { batch }, m, k, ta);
                    let (b, sb) = operand(&mut r, if share == 2 { 1 } else { batch }, k, n, tb);
                    let spec = MatmulSpec {
                        batch,
                        m,
                        k,
                        n,
                        a_offset: 1,
                        a_strides: sa,
                        b_offset: 2,
                        b_strides: sb,
                    };
                    let want = reference::<M>(&spec, &a, &b);
                    for ctx in &contexts {
                        let mut out = vec![f32::NAN; batch * m * n];
                        // SAFETY: the caller of `check` runs only kernels this CPU has.
                        unsafe { run::<K>(ctx, blk, &spec, &a, &b, &mut out) }.unwrap();
                        for (i, (&x, &y)) in out.iter().zip(&want).enumerate() {
                            assert!(
                                same(x, y, M::MODE == ComputeMode::Exact),
                                "{name} {blk:?} {spec:?} threads {}: element {i} is {x:e} ({:#x}), the definition gives {y:e} ({:#x})",
                                ctx.threads(),
                                x.to_bits(),
                                y.to_bits()
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn any_block_sizes_give_the_bits_of_the_definition() {
        check::<ScalarExact, Exact>("scalar exact");
        check::<ScalarFast, Fast>("scalar fast");
        #[cfg(target_arch = "x86_64")]
        {
            check::<V128Exact, Exact>("v128 exact");
            if std::is_x86_feature_detected!("fma") {
                check::<V128Fast, Fast>("v128 fast");
                check::<ScalarFastFma, Fast>("scalar fast fma");
            }
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                check::<Avx2Exact, Exact>("avx2 exact");
                check::<Avx2Fast, Fast>("avx2 fast");
            }
            if std::is_x86_feature_detected!("avx512f") {
                check::<Avx512Exact, Exact>("avx512 exact");
                check::<Avx512Fast, Fast>("avx512 fast");
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            check::<NeonExact, Exact>("neon exact");
            check::<NeonFast, Fast>("neon fast");
        }
    }

    #[test]
    fn packing_buffers_start_at_a_cache_line() {
        let mut v = vec![0.0f32; 200];
        for start in 0..LINE {
            let buf = &mut v[start..start + 100 + LINE - 1];
            let len = buf.len();
            let s = line_aligned(buf, 100);
            assert_eq!(s.len(), 100);
            assert_eq!(s.as_ptr() as usize % 64, 0, "start {start} of {len}");
        }
    }

    #[test]
    fn the_tiles_of_the_block_rule_are_the_kernels() {
        let t = |isa, mode| blocking::tile(isa, mode);
        let shape = |mr, nr| blocking::Tile { mr, nr };
        #[cfg(target_arch = "x86_64")]
        {
            assert_eq!(
                t(Isa::Avx512, ComputeMode::Exact),
                shape(Avx512Exact::MR, Avx512Exact::NR)
            );
            assert_eq!(
                t(Isa::Avx512, ComputeMode::Fast),
                shape(Avx512Fast::MR, Avx512Fast::NR)
            );
            assert_eq!(
                t(Isa::Avx2, ComputeMode::Exact),
                shape(Avx2Exact::MR, Avx2Exact::NR)
            );
            assert_eq!(
                t(Isa::Avx2, ComputeMode::Fast),
                shape(Avx2Fast::MR, Avx2Fast::NR)
            );
            assert_eq!(
                t(Isa::V128, ComputeMode::Exact),
                shape(V128Exact::MR, V128Exact::NR)
            );
            assert_eq!(
                t(Isa::V128, ComputeMode::Fast),
                shape(V128Fast::MR, V128Fast::NR)
            );
        }
        #[cfg(target_arch = "aarch64")]
        {
            assert_eq!(
                t(Isa::Neon, ComputeMode::Exact),
                shape(NeonExact::MR, NeonExact::NR)
            );
            assert_eq!(
                t(Isa::Neon, ComputeMode::Fast),
                shape(NeonFast::MR, NeonFast::NR)
            );
        }
        assert_eq!(
            t(Isa::Scalar, ComputeMode::Exact),
            shape(ScalarExact::MR, ScalarExact::NR)
        );
        assert_eq!(
            t(Isa::Scalar, ComputeMode::Fast),
            shape(ScalarFast::MR, ScalarFast::NR)
        );
    }
}
