//! Runs of rows: cutting a buffer into pieces at the ends of rows, and short copies and
//! additions written inline.

/// Runs `f(r, at, piece)` for the pieces of `out` cut at the ends of rows of `row`
/// elements laid end to end, `out` starting at element `first` of them: `piece` is the
/// elements `at..` of row `r` (the first and the last piece may be parts of rows).
pub(crate) fn for_each_piece(
    out: &mut [f32],
    first: usize,
    row: usize,
    mut f: impl FnMut(usize, usize, &mut [f32]),
) {
    let mut pos = first;
    let mut rest = out;
    while !rest.is_empty() {
        let (r, at) = (pos / row, pos % row);
        let len = (row - at).min(rest.len());
        let (piece, tail) = core::mem::take(&mut rest).split_at_mut(len);
        f(r, at, piece);
        rest = tail;
        pos += len;
    }
}

/// Copies `src` into `dst` (of the same length), inline: for short runs (a
/// convolution's rows at CIFAR sizes are 4 to 32 elements), where a call of the C
/// library's `memcpy` costs more than the copy.
#[inline(always)]
pub(crate) fn copy_run(dst: &mut [f32], src: &[f32]) {
    zip_run(dst, src, |_, s| s);
}

/// `dst[t] += src[t]` for the elements of a row (of the same length), inline: one f32
/// addition per element, so the bits of a plain loop.
#[inline(always)]
pub(crate) fn add_run(dst: &mut [f32], src: &[f32]) {
    zip_run(dst, src, |d, s| d + s);
}

/// `dst[t] = op(dst[t], src[t])` in blocks of 16, 8 and 4 elements of fixed size (which
/// the compiler turns into vector operations of the caller's target features) and at
/// most three single elements, written out one by one because a loop over them would be
/// turned back into a call of `memcpy` when `op` is a copy.
#[inline(always)]
fn zip_run(dst: &mut [f32], src: &[f32], op: impl Fn(f32, f32) -> f32) {
    assert_eq!(dst.len(), src.len(), "zip_run: lengths");
    let mut d = dst.chunks_exact_mut(16);
    let mut s = src.chunks_exact(16);
    for (d, s) in (&mut d).zip(&mut s) {
        zip_block::<16>(d, s, &op);
    }
    let (mut d, mut s) = (d.into_remainder(), s.remainder());
    if d.len() >= 8 {
        zip_block::<8>(&mut d[..8], &s[..8], &op);
        (d, s) = (&mut d[8..], &s[8..]);
    }
    if d.len() >= 4 {
        zip_block::<4>(&mut d[..4], &s[..4], &op);
        (d, s) = (&mut d[4..], &s[4..]);
    }
    for t in 0..3 {
        if let (Some(d), Some(&s)) = (d.get_mut(t), s.get(t)) {
            *d = op(*d, s);
        }
    }
}

/// `dst[t] = op(dst[t], src[t])` for `N` elements as one fixed-size block.
#[inline(always)]
fn zip_block<const N: usize>(dst: &mut [f32], src: &[f32], op: &impl Fn(f32, f32) -> f32) {
    let a: [f32; N] = (&*dst).try_into().expect("N elements");
    let b: [f32; N] = src.try_into().expect("N elements");
    dst.copy_from_slice(&core::array::from_fn::<f32, N, _>(|t| op(a[t], b[t])));
}
