//! Strided copies: pure data movement, the same code on every path (row copies, fills of
//! broadcast rows, tiled transposes and a gather loop).

use super::dims::{round_up, Dims, RowWalk};
use super::WORK_PER_CHUNK;
use crate::cpu::{copy_run, for_each_piece, ComputeContext, Isa};
use crate::scalar::ModeSpec;
use crate::scalar_ref::RefKernels;
use exactgrad_core::Layout;

/// Rows per tile of a transposing copy.
const COPY_TILE: usize = 32;

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
        // The arguments were validated at the kernel's entry, so the reference loop cannot fail.
        let checked = RefKernels::<M>::copy_strided(src, layout, out);
        debug_assert!(checked.is_ok());
        return;
    };
    let (n, [s]) = d.inner();
    // A transpose: the innermost dimension is strided and the next one contiguous.
    let tiled = d.rank >= 2 && s > 1 && d.stride[0][d.rank - 2] == 1;
    let mut rows = (WORK_PER_CHUNK / n).max(1);
    if tiled {
        rows = round_up(rows, COPY_TILE);
    }
    let base = layout.offset;
    if tiled {
        ctx.for_each_chunk(out, rows * n, |ci, o| {
            copy_tiles(src, &d, base, ci * rows, o);
        });
        return;
    }
    // Chunks of whole rows, or of WORK_PER_CHUNK elements that cut rows longer than that
    // (a contiguous copy coalesces into one row, which would otherwise be one task).
    let chunk = if n > WORK_PER_CHUNK {
        WORK_PER_CHUNK
    } else {
        rows * n
    };
    ctx.for_each_chunk(out, chunk, |ci, o| {
        copy_pieces(src, &d, base, ci * chunk, o);
    });
}

/// Longest contiguous piece copied inline rather than by the C library's `memcpy`. This
/// code is compiled for baseline x86-64 (16-byte moves), where the library's call (with
/// the widest moves of the CPU) is the faster for longer pieces: pieces of 64 elements
/// (a GPT step's attention heads) took 3.9 % of the step's profile inline against 3.3 %
/// with the call.
const SHORT_PIECE: usize = 16;

/// Elements `first..` of a strided copy whose rows are not transposed (as many as fill
/// `out`): whole rows, or pieces of rows that may start and end inside one.
fn copy_pieces(src: &[f32], d: &Dims<1>, base: usize, first: usize, out: &mut [f32]) {
    let (n, [s]) = d.inner();
    let mut rows = RowWalk::at(d, [base], first / n);
    for_each_piece(out, first, n, |_, j, piece| {
        let len = piece.len();
        let o = rows.off[0] + j * s;
        match s {
            // Short pieces (a convolution's 4 × 4 output planes) inline.
            1 if len <= SHORT_PIECE => copy_run(piece, &src[o..o + len]),
            1 => piece.copy_from_slice(&src[o..o + len]),
            0 => piece.fill(src[o]),
            _ => {
                // Inside the row, whose last index was checked by `storage_extent`.
                let run = &src[o..=o + (len - 1) * s];
                for (t, v) in piece.iter_mut().enumerate() {
                    *v = run[t * s];
                }
            }
        }
        rows.next();
    });
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
