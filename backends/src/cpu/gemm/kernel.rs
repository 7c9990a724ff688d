//! The micro-kernels of the GEMM (`docs/gemm.md` §3): the generic register-tiled
//! kernel [`micro`], the ways a product is formed ([`Step`]), and its instantiations per
//! ISA path and mode ([`Kernel`], declared by `kernel!` inside functions compiled with
//! the path's target features).

use super::pack::pack_a;
use super::Job;
use crate::cpu::simd::SimdLane;
#[cfg(target_arch = "x86_64")]
use crate::cpu::simd::{F32x16, F32x4, F32x8};
#[cfg(target_arch = "x86_64")]
use crate::lane::Lane;
use crate::lane::{Exact, Fast, Madd};
use crate::scalar::ModeSpec;

/// The layout of the `A` micro-panels of a packed block: row `i`, step `p` of a
/// micro-panel at `i · row + p · step`. The packer chooses it so that packing is a copy
/// of contiguous runs: `row = kc, step = 1` (rows one after another) for a row-major `A`,
/// `row = 1, step = MR` (the steps one after another) for a transposed one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct APanel {
    pub(super) row: usize,
    pub(super) step: usize,
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
pub(super) trait Kernel {
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
        seg: usize,
        c: *mut f32,
        ldc: usize,
        load: bool,
        last: bool,
    );

    /// One edge tile of `rows × cols` (at most `MR × NR`) at `c` (row stride `ldc`), on
    /// the smallest kernel covering it: [`Kernel::edge_rows`] rows,
    /// [`Kernel::edge_lanes`] lanes; `bstep` as for [`Kernel::full`]. The kernel reads
    /// and writes all the rows and lanes it covers.
    ///
    /// # Safety
    /// The contract of [`micro`] for a tile of `edge_rows(rows, edge_lanes(cols))` rows of
    /// `edge_lanes(cols)` lanes at `c` with row stride `ldc`, and the CPU has the
    /// kernel's target features.
    #[allow(clippy::too_many_arguments)]
    unsafe fn edge(
        kc: usize,
        a: *const f32,
        al: APanel,
        b: *const f32,
        bstep: usize,
        seg: usize,
        c: *mut f32,
        ldc: usize,
        rows: usize,
        cols: usize,
        load: bool,
        last: bool,
    );

    /// Row counts below `MR` other than `MH` that have a kernel of their own over all
    /// `NR / W` lanes: the last tile of a product whose rows are not a multiple of `MR`
    /// (64 rows on a 6-row tile leave 4) then runs on exactly its rows, in place, rather
    /// than on the `MR`-row kernel over a scratch tile.
    const SHORT: &'static [usize];

    /// The rows the edge kernel computes for a tile of `rows` rows over `lanes` lanes:
    /// `rows` itself when it is `MR`, `MH` or, over all lanes, one of [`Kernel::SHORT`];
    /// otherwise `MH` when `rows <= MH`, else `MR`.
    fn edge_rows(rows: usize, lanes: usize) -> usize {
        if rows == Self::MR
            || rows == Self::MH
            || (lanes == Self::NR / Self::W && Self::SHORT.contains(&rows))
        {
            rows
        } else if rows <= Self::MH {
            Self::MH
        } else {
            Self::MR
        }
    }

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
    ($name:ident, $lane:ty, $mode:ty, $step:ty, $mr:literal, $mh:literal, $nv:literal, [$($short:literal),*] $(, $feature:literal)?) => {
        pub(super) struct $name;

        impl Kernel for $name {
            const MR: usize = $mr;
            const MH: usize = $mh;
            const W: usize = <$lane as SimdLane>::WIDTH;
            const NR: usize = $nv * <$lane as SimdLane>::WIDTH;
            const SHORT: &'static [usize] = &[$($short),*];

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
        seg: usize,
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
        seg: usize,
                    c: *mut f32,
                    ldc: usize,
                    load: bool,
                    last: bool,
                ) {
                    // SAFETY: the caller of `full` guarantees `micro`'s contract for one
                    // MR × NR tile with this A layout and bstep (the `Kernel::full`
                    // contract); the target features are those `imp` is compiled with.
                    unsafe { micro::<$lane, $mode, $step, $mr, $nv>(kc, a, al, b, bstep, seg, c, ldc, load, last) }
                }
                // SAFETY: `imp` needs the kernel's target features and `micro`'s pointer
                // contract, both guaranteed by the caller of `full`.
                unsafe { imp(kc, a, al, b, bstep, seg, c, ldc, load, last) }
            }

            #[inline(always)]
            unsafe fn edge(
                kc: usize,
                a: *const f32,
                al: APanel,
                b: *const f32,
                bstep: usize,
        seg: usize,
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
        seg: usize,
                    c: *mut f32,
                    ldc: usize,
                    rows: usize,
                    lanes: usize,
                    load: bool,
                    last: bool,
                ) {
                    // SAFETY: `edge`'s caller guarantees `micro`'s contract for
                    // `edge_rows(rows, lanes)` rows of `lanes` lanes at `c` (1, 2 when 2 <
                    // NV, or NV: `edge_lanes`) and the target features `imp` is compiled
                    // with; each arm runs the kernel of exactly those rows and lanes.
                    unsafe {
                        match (rows, lanes) {
                            $(($short, _) if lanes == $nv => micro::<$lane, $mode, $step, $short, $nv>(kc, a, al, b, bstep, seg, c, ldc, load, last),)*
                            (r, 1) if r <= $mh => micro::<$lane, $mode, $step, $mh, 1>(kc, a, al, b, bstep, seg, c, ldc, load, last),
                            (r, 2) if r <= $mh && 2 < $nv => micro::<$lane, $mode, $step, $mh, 2>(kc, a, al, b, bstep, seg, c, ldc, load, last),
                            (r, _) if r <= $mh => micro::<$lane, $mode, $step, $mh, $nv>(kc, a, al, b, bstep, seg, c, ldc, load, last),
                            (_, 1) => micro::<$lane, $mode, $step, $mr, 1>(kc, a, al, b, bstep, seg, c, ldc, load, last),
                            (_, 2) if 2 < $nv => micro::<$lane, $mode, $step, $mr, 2>(kc, a, al, b, bstep, seg, c, ldc, load, last),
                            _ => micro::<$lane, $mode, $step, $mr, $nv>(kc, a, al, b, bstep, seg, c, ldc, load, last),
                        }
                    }
                }
                // SAFETY: `imp` needs the kernel's target features and `micro`'s pointer
                // contract for the tile at `c`, both guaranteed by the caller of `edge`.
                unsafe {
                    imp(kc, a, al, b, bstep, seg, c, ldc, rows, Self::edge_lanes(cols), load, last)
                }
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
kernel!(
    Avx512Exact,
    F32x16,
    Exact,
    BroadcastMul,
    6,
    3,
    4,
    [1, 2, 4, 5],
    "avx512f"
);
#[cfg(target_arch = "x86_64")]
kernel!(
    Avx512Fast,
    F32x16,
    Fast,
    Broadcast,
    6,
    3,
    4,
    [1, 2, 4, 5],
    "avx512f"
);
#[cfg(target_arch = "x86_64")]
kernel!(
    Avx2Exact,
    F32x8,
    Exact,
    Broadcast,
    6,
    3,
    2,
    [1, 2, 4, 5],
    "avx2,fma"
);
#[cfg(target_arch = "x86_64")]
kernel!(
    Avx2Fast,
    F32x8,
    Fast,
    Broadcast,
    6,
    3,
    2,
    [1, 2, 4, 5],
    "avx2,fma"
);
#[cfg(target_arch = "x86_64")]
kernel!(
    V128Exact,
    F32x4,
    Exact,
    Broadcast,
    6,
    3,
    2,
    [1, 2, 4, 5],
    "sse2"
);
#[cfg(target_arch = "x86_64")]
kernel!(
    V128Fast,
    F32x4,
    Fast,
    Broadcast,
    6,
    3,
    2,
    [1, 2, 4, 5],
    "sse2,fma"
);
// NEON (`docs/gemm.md` §3): 12 columns (three lanes) in both modes; fast mode keeps
// 8 × 12 accumulators (24 of the 32 vector registers, plus 3 B lanes and the A values),
// exact mode 6 × 12, since its separate products need registers of their own and LLVM
// spills accumulators of an 8 × 12 exact tile inside the loop.
#[cfg(target_arch = "aarch64")]
kernel!(
    NeonExact,
    crate::cpu::simd::F32x4,
    Exact,
    Broadcast,
    6,
    3,
    3,
    [1, 2, 4, 5],
    "neon"
);
#[cfg(target_arch = "aarch64")]
kernel!(
    NeonFast,
    crate::cpu::simd::F32x4,
    Fast,
    Broadcast,
    8,
    4,
    3,
    [1, 2, 3, 5, 6, 7],
    "neon"
);
kernel!(ScalarExact, f32, Exact, Broadcast, 4, 2, 4, []);
kernel!(ScalarFast, f32, Fast, Broadcast, 4, 2, 4, []);
// The scalar fast kernel with the FMA instruction instead of a call to the C library's
// `fmaf` (both are the correctly rounded fused multiply-add: the same bits).
#[cfg(target_arch = "x86_64")]
kernel!(ScalarFastFma, f32, Fast, Broadcast, 4, 2, 4, [], "fma");

/// The register-tiled micro-kernel: `MR × NV` lanes of accumulators, `kc` steps.
///
/// With `seg == 0`: starts from `+0.0` (or, when `load`, from the f32 values in `c`: the
/// same sequence continued), adds `a[i,p] × b[p,j]` with the mode's multiply-add (formed
/// as `S` does) for each step in increasing `p`, and stores to `c`, NaN-canonicalised in
/// exact mode when `last`.
///
/// With `seg > 0` (`kc` a multiple of `seg`; `load` is ignored): each segment of `seg`
/// steps is summed from `+0.0` as above and then added to the value in `c` (the running
/// sum of the segments, which `c` holds between segments), canonicalised after the last
/// segment when `last`.
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
    seg: usize,
    c: *mut f32,
    ldc: usize,
    load: bool,
    last: bool,
) {
    let w = L::WIDTH;
    // The rows of the A micro-panel; each advances by `al.step` per step. Pointers past
    // the panel are formed with `wrapping_add` and only dereferenced inside it.
    let mut ar: [*const f32; MR] = core::array::from_fn(|i| a.wrapping_add(i * al.row));
    let mut b = b;
    if let Some(segments) = kc.checked_div(seg) {
        for s in 0..segments {
            let mut acc = [[L::splat(0.0); NV]; MR];
            // SAFETY: the segment's steps lie inside the kc steps of the caller's contract.
            unsafe { steps::<L, M, S, MR, NV>(seg, &mut acc, &mut ar, al, &mut b, bstep) };
            let end = last && s + 1 == segments;
            for (i, row) in acc.iter().enumerate() {
                for (v, &x) in row.iter().enumerate() {
                    // SAFETY: row i < MR, lanes v·W..(v+1)·W with v < NV lie inside the
                    // tile at `c` (the caller's contract); the lane's target features are
                    // the caller's too.
                    unsafe {
                        let p = c.add(i * ldc + v * w);
                        let sum = L::load(p).add(x);
                        let sum = if end {
                            crate::cpu::elementwise::finish::<L, M>(sum)
                        } else {
                            sum
                        };
                        sum.store(p);
                    }
                }
            }
        }
        return;
    }
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
    // SAFETY: the kc steps of the caller's contract.
    unsafe { steps::<L, M, S, MR, NV>(kc, &mut acc, &mut ar, al, &mut b, bstep) };
    for (i, row) in acc.iter().enumerate() {
        for (v, &x) in row.iter().enumerate() {
            let x = if last {
                crate::cpu::elementwise::finish::<L, M>(x)
            } else {
                x
            };
            // SAFETY: row i < MR, lanes v·W..(v+1)·W with v < NV lie inside the tile at
            // `c` (the caller's contract); the lane's target features are the caller's too.
            unsafe { x.store(c.add(i * ldc + v * w)) };
        }
    }
}

/// `n` steps of the micro-kernel into `acc`, advancing the row pointers `ar` and `b`.
///
/// # Safety
/// The `n` steps read `ar[i][p · al.step]` and `b[p · bstep ..][.. NV × WIDTH]` for
/// `p < n`, which must be readable; the CPU must have the target features of `L` and `S`.
#[inline(always)]
unsafe fn steps<L: SimdLane, M: Madd<L>, S: Step<L, M>, const MR: usize, const NV: usize>(
    n: usize,
    acc: &mut [[L; NV]; MR],
    ar: &mut [*const f32; MR],
    al: APanel,
    b: &mut *const f32,
    bstep: usize,
) {
    let w = L::WIDTH;
    for _ in 0..n {
        // SAFETY: step p reads a[i·row + p·step] (i < MR) and b[p·bstep..][..NV·WIDTH], inside
        // what the caller guarantees (pointers advance by `wrapping_add`, dereferenced only
        // at steps inside); the target features are the caller's guarantee too.
        unsafe {
            // A plain loop rather than `array::from_fn`, whose closure LLVM may leave out
            // of line (without the path's target features) once the kernel grows.
            let mut bv = [L::splat(0.0); NV];
            for (v, x) in bv.iter_mut().enumerate() {
                *x = L::load(b.add(v * w));
            }
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
        *b = b.wrapping_add(bstep);
    }
}
