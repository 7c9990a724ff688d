//! The packers of the GEMM (`docs/gemm.md` §2): the copies of `B` into panels and of `A`
//! into micro-panels, from any strides, the cache-line alignment of the packing buffers
//! and the prefetch hint. Packing is a copy: it changes no bit of any product.

use super::kernel::{APanel, Kernel};
use super::{Job, LINE, TRANSPOSE_RUN};
use exactgrad_core::backend::MatmulSpec;

/// Asks the CPU to bring the `len` f32 elements at `p` into level 1 (no effect on the
/// results; a prefetch never faults, so `p` need not be valid).
#[inline(always)]
pub(super) fn prefetch(p: *const f32, len: usize) {
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
pub(super) fn line_aligned(buf: &mut [f32], len: usize) -> &mut [f32] {
    let off = buf
        .as_ptr()
        .align_offset(LINE * core::mem::size_of::<f32>())
        .min(LINE - 1);
    &mut buf[off..off + len]
}

/// The columns of a packed panel holding `cols` columns of `B` that a kernel reads: all
/// `NR` of a full panel; of a partial one, the lanes its edge kernel runs
/// ([`Kernel::edge_lanes`]). The packers zero the columns from `cols` up to this count and
/// leave the rest of the panel as it was, since no kernel reads it.
fn read_cols<K: Kernel>(cols: usize) -> usize {
    if cols >= K::NR {
        K::NR
    } else {
        K::edge_lanes(cols) * K::W
    }
}

/// Packs the panels `first ..` (panel `idx` holds the columns `(idx % npanels)·NR ..` of
/// the `B` of batch `idx / npanels`) of a row-major `B` into `panels` (`k × NR` each,
/// the columns past `n` that a kernel reads zero: [`read_cols`]), step by step across the
/// panels.
pub(super) fn pack_b_rows<K: Kernel>(
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
                dst[cols..read_cols::<K>(cols)].fill(0.0);
            }
        }
    }
}

/// Packs the columns `j0 .. j0 + NR` of the `B` of batch `bb` into `panel` (`k × NR`,
/// row-major, the columns past `n` that a kernel reads zero: [`read_cols`]).
pub(super) fn pack_b<K: Kernel>(
    spec: &MatmulSpec,
    b: &[f32],
    bb: usize,
    j0: usize,
    panel: &mut [f32],
) {
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
                dst[cols..read_cols::<K>(cols)].fill(0.0);
            }
        }
        return;
    }
    let read = read_cols::<K>(cols);
    if cols < read {
        for dst in panel.chunks_exact_mut(nr) {
            dst[cols..read].fill(0.0);
        }
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
pub(crate) unsafe fn transpose8(src: *const f32, ss: usize, dst: *mut f32, ds: usize) {
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
pub(super) fn pack_a<const MR: usize>(
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
