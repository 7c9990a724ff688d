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
//! panels `k × NR`, zero-padded up to the lanes a kernel reads; each chunk packs its rows
//! of `A` into zero-padded micro-panels `kc × MR`. The packers read any strides —
//! row-major, transposed or general — and write the layout the micro-kernel reads;
//! packing is a copy, so the layout of an operand changes no bit. Padded lanes compute
//! values that are never stored. The packing buffers come from the compute context's
//! buffer pool, one for `B` and one per thread that can run a chunk, so a training loop
//! reuses them.
//!
//! The files: this one holds the driver (the choice of orientation, the chunks, the
//! blocks and the tiles); `kernel.rs` the micro-kernels; `pack.rs` the packers;
//! `blocking.rs` the block sizes from the caches; `tests.rs` the unit tests of the
//! driver with block sizes other than the machine's.

mod blocking;
mod kernel;
mod pack;
#[cfg(test)]
mod tests;

use super::buffers;
use super::{for_each_piece, ComputeContext, Isa, SendPtr};
use crate::scalar::ModeSpec;
use blocking::Blocking;
use exactgrad_core::backend::MatmulSpec;
use exactgrad_core::{ComputeMode, Result};
use kernel::*;
#[cfg(target_arch = "x86_64")]
pub(crate) use pack::transpose8;
use pack::{line_aligned, pack_b, pack_b_rows, prefetch};
use std::sync::Mutex;

/// Fewest multiply-adds worth a parallel chunk (a few microseconds of work).
const MIN_CHUNK_MADDS: usize = 1 << 17;

/// Fewest packed elements of `B` (whole panels of `NR` columns) worth a parallel chunk of
/// the transposing packer: 32 KiB of panel, a few microseconds.
const MIN_PACK_CHUNK: usize = 1 << 13;
/// Parallel chunks aimed at per thread when the product is large enough: two, so that a
/// thread that is descheduled for a while leaves work the other can take, and no more,
/// since each chunk sweeps all of packed `B` for its own rows (`docs/gemm.md` §4).
const CHUNKS_PER_THREAD: usize = 2;
/// Most chunks a product is cut into.
const MAX_CHUNKS: usize = 8;
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

/// The batched product of [`MatmulSpec`] on `isa`, in the canonical order of `M`; with
/// `seg > 0` (dividing `k`) the segmented product added to `out` (`Backend::matmul_acc`:
/// each segment of `seg` steps summed from +0, then added to the output in order).
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
    seg: usize,
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
) -> Result<()> {
    if seg > 0 && spec.k == 0 {
        // No segment to add: the output, canonicalised.
        out.iter_mut()
            .for_each(|o| *o = exactgrad_core::kernels::canon(M::MODE, *o));
        return Ok(());
    }
    let blk = blocking::for_machine(blocking::tile(isa, M::MODE));
    // SAFETY: the caller guarantees `isa.is_supported(M::MODE)`, which implies each arm's
    // features (avx512f; avx2 + fma; sse2, or sse2 + fma in fast mode; neon); the scalar
    // fast kernel takes `fma` only after detecting it.
    unsafe {
        match M::MODE {
            ComputeMode::Exact => match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => run::<Avx512Exact>(ctx, blk, spec, seg, a, b, out),
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => run::<Avx2Exact>(ctx, blk, spec, seg, a, b, out),
                #[cfg(target_arch = "x86_64")]
                Isa::V128 => run::<V128Exact>(ctx, blk, spec, seg, a, b, out),
                #[cfg(target_arch = "aarch64")]
                Isa::Neon => run::<NeonExact>(ctx, blk, spec, seg, a, b, out),
                _ => run::<ScalarExact>(ctx, blk, spec, seg, a, b, out),
            },
            ComputeMode::Fast => match isa {
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => run::<Avx512Fast>(ctx, blk, spec, seg, a, b, out),
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => run::<Avx2Fast>(ctx, blk, spec, seg, a, b, out),
                #[cfg(target_arch = "x86_64")]
                Isa::V128 => run::<V128Fast>(ctx, blk, spec, seg, a, b, out),
                #[cfg(target_arch = "aarch64")]
                Isa::Neon => run::<NeonFast>(ctx, blk, spec, seg, a, b, out),
                #[cfg(target_arch = "x86_64")]
                _ if std::is_x86_feature_detected!("fma") => {
                    run::<ScalarFastFma>(ctx, blk, spec, seg, a, b, out)
                }
                _ => run::<ScalarFast>(ctx, blk, spec, seg, a, b, out),
            },
        }
    }
}

/// What a chunk of rows needs to know about the product.
struct Job<'a> {
    m: usize,
    k: usize,
    n: usize,
    /// Segment length of a segmented product (0 for a plain one).
    seg: usize,
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

/// The driver: checks, chooses the orientation, packs `B`, cuts the rows into chunks and
/// runs them on `ctx`.
///
/// # Safety
/// The CPU must have `K`'s target features.
unsafe fn run<K: Kernel>(
    ctx: &ComputeContext,
    blk: Blocking,
    spec: &MatmulSpec,
    seg: usize,
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
        if seg == 0 {
            // An empty sum: every accumulator stays +0.
            out.fill(0.0);
        }
        // A segmented product without segments leaves the output to the caller.
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
        // SAFETY: the caller guarantees `K`'s features; `t` addresses the elements of `b`
        // and `a` that `spec` does; `dst` maps (bi, i, j) of Cᵀ one to one onto element
        // bi·m·n + j·n + i of `out` (batch·m·n elements).
        return unsafe { drive::<K>(ctx, blk, &t, seg, b, a, dst) };
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
    unsafe { drive::<K>(ctx, blk, spec, seg, a, b, dst) }
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
    seg: usize,
    a: &[f32],
    b: &[f32],
    dst: Out,
) -> Result<()> {
    let MatmulSpec { batch, m, k, n, .. } = *spec;
    let (mr, nr) = (K::MR, K::NR);
    // k is cut into blocks of equal length (at most KC), so that no short last block pays
    // the tile's load and store for a few steps; a segmented product into blocks of whole
    // segments (at least one, however long), so that a segment never spans two blocks.
    let kc = match k.checked_div(seg) {
        None => k.div_ceil(k.div_ceil(blk.kc.max(1))),
        Some(segments) => {
            let per_block = (blk.kc / seg).max(1);
            segments.div_ceil(segments.div_ceil(per_block)) * seg
        }
    };
    let blk = Blocking {
        kc,
        mc: blk.mc.max(1).div_ceil(mr) * mr,
        nc: blk.nc.max(1).div_ceil(nr) * nr,
    };
    let npanels = n.div_ceil(nr);
    let b_shared = batch == 1 || spec.b_strides[0] == 0;
    let b_batches = if b_shared { 1 } else { batch };
    // In checked arithmetic: `k` comes from the caller (an operand broadcast along `k` has
    // any length up to `MatmulSpec::MAX_K`), and a product that wrapped to 0 was divided
    // by below.
    let too_large = || exactgrad_core::Error::TooLarge {
        op: "matmul",
        dims: vec![b_batches, npanels, k, nr],
        limit: exactgrad_core::MAX_ELEMENTS,
    };
    let panel_len = k.checked_mul(nr).ok_or_else(too_large)?;
    let b_batch_len = npanels.checked_mul(panel_len).ok_or_else(too_large)?;
    // A product with few rows per `B` reads each packed panel only a few times, so the
    // copy costs about as much as the products; with unit column stride the full panels
    // are then read in place (the same values in the same order: the same bits) when B
    // is row-major (rows at least `n` apart, so that a step's `NR` columns are contiguous).
    let rows_per_b = if b_shared { batch * m } else { m };
    let [_, sb1, sb2] = spec.b_strides;
    let direct = sb2 == 1 && sb1 >= n && rows_per_b <= DIRECT_B_MAX_ROWS;

    // The product as the chunks see it; the general path below adds packed B.
    let job = Job {
        m,
        k,
        n,
        seg,
        blk,
        a,
        a_offset: spec.a_offset,
        a_strides: spec.a_strides,
        bpack: &[],
        b_batch_len: 0,
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
    let target = (CHUNKS_PER_THREAD * ctx.threads()).clamp(1, MAX_CHUNKS);

    // One block of A (at most MC rows, one batch) sweeps each panel of B once, so nothing
    // is gained by packing all of B before the products: B is packed panel by panel and
    // k block by k block just before the tiles that read it, into a scratch panel that
    // stays in level 1 or 2 instead of making a round trip through memory (the same copy,
    // so the same bits). The chunks are then ranges of panels, each packing its own.
    if !direct && batch == 1 && m <= blk.mc && npanels >= 2 {
        let min_panels = MIN_CHUNK_MADDS.div_ceil(m.saturating_mul(panel_len));
        let panels_per_chunk = npanels.div_ceil(target).max(min_panels);
        let chunks = npanels.div_ceil(panels_per_chunk);
        let slots = ctx.threads().min(chunks).min(MAX_CHUNKS);
        let apack_len = (m.div_ceil(mr) * mr * blk.kc.min(k)).div_ceil(LINE) * LINE;
        let slot_len = apack_len + (blk.kc.min(k) * nr).div_ceil(LINE) * LINE;
        let mut store =
            buffers::buffer(&ctx.buffers, "matmul", slots * slot_len + LINE - 1, false)?;
        let buf = line_aligned(&mut store, slots * slot_len);
        let slot = slots_of(buf, slot_len);
        ctx.run(chunks, |ci| {
            let mut scratch = take_slot(&slot[..slots]);
            let (apack, bpanel) = scratch.split_at_mut(apack_len);
            let first = ci * panels_per_chunk;
            let panels = first..npanels.min(first + panels_per_chunk);
            // SAFETY: `drive`'s caller guarantees `K`'s features and a one-to-one `dst`
            // onto a buffer nothing else accesses; this chunk writes only the columns of
            // its panels, which no other chunk writes.
            unsafe { rows::<K>(&job, 0, m, dst, apack, panels, Some(bpanel)) };
        });
        return Ok(());
    }

    // Chunks of whole rows of the batch-folded output: CHUNKS_PER_THREAD per thread (at
    // most MAX_CHUNKS), none smaller than MIN_CHUNK_MADDS, a multiple of MR. The chunks
    // decide which thread computes an output, never how: no bit depends on them.
    let total_rows = batch * m;
    let min_rows = MIN_CHUNK_MADDS.div_ceil(n.saturating_mul(k));
    let rows_per_chunk = total_rows.div_ceil(target).max(min_rows).div_ceil(mr) * mr;
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
    let blen = b_batches.checked_mul(b_batch_len).ok_or_else(too_large)?;
    let mut bstore = buffers::buffer(&ctx.buffers, "matmul", blen + LINE - 1, false)?;
    let mut astore = buffers::buffer(&ctx.buffers, "matmul", slots * apack_len + LINE - 1, false)?;
    let bbuf = line_aligned(&mut bstore, blen);
    let abuf = line_aligned(&mut astore, slots * apack_len);

    // Pack B: panel `jp` of batch `bb` holds rows 0..k of columns jp*NR.. (zero-padded).
    let bpack = &mut bbuf[..];
    let panels_per_chunk = (MIN_CHUNK_MADDS / panel_len).max(1);
    if sb2 == 1 && !direct && bpack.len() >= 2 * panels_per_chunk * panel_len {
        // Row-major B of at least two chunks of panels: step by step, the chunk's panels
        // side by side, so that each step of B is read as one run across the panels.
        ctx.for_each_chunk(bpack, panels_per_chunk * panel_len, |ci, chunk| {
            pack_b_rows::<K>(spec, b, ci * panels_per_chunk, npanels, chunk);
        });
    } else {
        // A smaller row-major B, a transposed or strided one, or the partial panel of a B
        // read in place: chunks of whole steps, which may cut a panel in pieces, so that
        // the few panels of a small or narrow B (one panel for the 16 columns of a
        // gradient's transpose) are packed by every thread.
        let steps = (bpack.len() / nr)
            .div_ceil(target)
            .max(MIN_PACK_CHUNK.div_ceil(nr));
        ctx.for_each_chunk(bpack, steps * nr, |ci, chunk| {
            // Pieces of panels (`k · NR` elements each), a whole number of steps each.
            for_each_piece(chunk, ci * steps * nr, panel_len, |idx, at, piece| {
                let j0 = (idx % npanels) * nr;
                if !direct || j0 + nr > n {
                    // Steps p0 .. p0 + len of the panel.
                    let (p0, len) = (at / nr, piece.len() / nr);
                    let part = MatmulSpec {
                        k: len,
                        b_offset: spec.b_offset + p0 * spec.b_strides[1],
                        ..*spec
                    };
                    pack_b::<K>(&part, b, idx / npanels, j0, piece);
                }
            });
        });
    }

    let job = Job {
        bpack: &bbuf[..],
        b_batch_len: if b_shared { 0 } else { b_batch_len },
        ..job
    };

    // The slots of packed A: a chunk takes the first free one (there is always one, as
    // no more chunks run at once than there are slots) and gives it back when done.
    let slot = slots_of(abuf, apack_len);
    ctx.run(chunks, |ci| {
        let mut apack = take_slot(&slot[..slots]);
        let r0 = ci * rows_per_chunk;
        let nrows = rows_per_chunk.min(total_rows - r0);
        // SAFETY: `drive`'s caller guarantees `K`'s features and a one-to-one `dst` onto a
        // buffer nothing else accesses; this chunk writes only its rows r0 .. r0 + nrows,
        // which no other chunk writes.
        unsafe { rows::<K>(&job, r0, nrows, dst, &mut apack, 0..npanels, None) };
    });
    Ok(())
}

/// `buf` cut into slots of `len` elements (empty ones past its end), each behind a lock
/// that a chunk holds while it uses the slot.
fn slots_of(buf: &mut [f32], len: usize) -> [Mutex<&mut [f32]>; MAX_CHUNKS] {
    let mut parts = buf.chunks_mut(len.max(1));
    core::array::from_fn(|_| Mutex::new(parts.next().unwrap_or_default()))
}

/// The first free slot of scratch among `slots`, waited for (there is always one soon:
/// no more chunks run at once than there are slots); it is given back when the guard
/// drops.
fn take_slot<'s, 'b>(
    slots: &'s [Mutex<&'b mut [f32]>],
) -> std::sync::MutexGuard<'s, &'b mut [f32]> {
    let mut spins = 0u32;
    loop {
        if let Some(g) = slots.iter().find_map(|s| s.try_lock().ok()) {
            return g;
        }
        spins += 1;
        if spins < 64 {
            core::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// Computes output rows `r0 .. r0 + nrows`, columns of the panels `panels`, of the
/// batch-folded product into `dst`, using `apack` (at least `MC` rounded up to `MR`, times
/// `min(KC, k)` elements, or the chunk's rows rounded up to `MR` when fewer) as scratch.
/// With `jit` (at least `min(KC, k) × NR` elements; one batch) each panel of `B` is packed
/// there, one k block at a time, just before its tiles; without, the panels are those of
/// `job.bpack` (or `B` in place).
///
/// # Safety
/// The CPU must have `K`'s target features; `dst` must map rows `r0 .. r0 + nrows` and
/// columns `0 .. n` one to one onto elements valid for reads and writes that nothing
/// else accesses during the call.
unsafe fn rows<K: Kernel>(
    job: &Job<'_>,
    r0: usize,
    nrows: usize,
    dst: Out,
    apack: &mut [f32],
    panels: core::ops::Range<usize>,
    mut jit: Option<&mut [f32]>,
) {
    let (m, k, n) = (job.m, job.k, job.n);
    let (mr, nr) = (K::MR, K::NR);
    let Blocking { kc: kcb, mc, nc } = job.blk;
    let panels_per_block = nc / nr;
    // Output rows equally spaced with unit column stride (batches one after another).
    let uniform = dst.cs == 1 && dst.bs == dst.m * dst.rs;
    // Blocks of A of equal height (at most MC, a multiple of MR), so that no short last
    // block sweeps all of B for a few rows.
    let mc = nrows.div_ceil(nrows.div_ceil(mc.max(1))).div_ceil(mr) * mr;
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
        for jb in panels.clone().step_by(panels_per_block) {
            let jend = panels.end.min(jb + panels_per_block);
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
                // A segmented product keeps its running sum in the output throughout.
                let (load, last) = (pc > 0 || job.seg > 0, pc + kc == k);
                for jp in jb..jend {
                    let j0 = jp * nr;
                    let cols = nr.min(n - j0);
                    let (bpanel, bstep) = if let Some(scratch) = jit.as_deref_mut() {
                        // Steps pc..pc+kc of columns j0..j0+NR of B, packed now.
                        let part = MatmulSpec {
                            batch: 1,
                            m,
                            k: kc,
                            n,
                            a_offset: 0,
                            a_strides: [0; 3],
                            b_offset: b_base + pc * job.b_strides[1],
                            b_strides: job.b_strides,
                        };
                        let panel = &mut scratch[..kc * nr];
                        pack_b::<K>(&part, job.b, 0, j0, panel);
                        (&panel[..], nr)
                    } else if job.direct && cols == nr {
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
                                job.seg,
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
    seg: usize,
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
        // SAFETY: the panels hold kc steps of MR rows and NR columns (asserted above); the
        // tile is elements c0 + i·rs + j of `dst` (uniform rows, unit column stride), valid
        // and this call's own; the caller guarantees the kernel's target features.
        unsafe {
            K::full(
                kc,
                a,
                al,
                b,
                bstep,
                seg,
                dst.ptr.0.add(c0),
                dst.rs,
                load,
                last,
            )
        }
        return;
    }
    if uniform && lanes * K::W == cols && K::edge_rows(rows, lanes) == rows {
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
                seg,
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
    // SAFETY: the panels hold kc steps of MR rows and NR columns (asserted above); `t` has
    // TILE_MAX >= MR × NR elements at row stride NR, all any edge kernel touches; the
    // caller guarantees the kernel's target features.
    unsafe {
        K::edge(
            kc,
            a,
            al,
            b,
            bstep,
            seg,
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
