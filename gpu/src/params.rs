//! The parameter words of the kernels: sizes as 32-bit words, layouts, the unary
//! operators' codes, the column kernels' geometry, and how long loops are cut into
//! dispatches.

use crate::device::Dispatch;
use exactgrad_core::kernels::Col2imSpec;
use exactgrad_core::{Error, Layout, Result, UnaryOp};

/// Loop iterations one invocation runs in one dispatch, at most. Mesa's llvmpipe (and so
/// lavapipe) ends any shader loop after 65,535 iterations (counting those of the loops
/// inside it) without an error, which would silently cut a long reduction short; a longer
/// reduction is split into dispatches that carry its accumulator (`docs/gpu.md`).
pub(crate) const LOOP_BUDGET: usize = 16_384;

/// The ranges `[start, start + len)` that cut `0..count` into pieces of at most `chunk`
/// (one empty range when `count` is 0).
pub(crate) fn chunks(count: usize, chunk: usize) -> Result<Vec<[u32; 2]>> {
    let chunk = chunk.max(1);
    let mut v = Vec::new();
    let mut start = 0;
    loop {
        let len = chunk.min(count - start);
        v.push([word(start)?, word(len)?]);
        start += len;
        if start >= count {
            return Ok(v);
        }
    }
}

/// `v` as a parameter word, or an error when the device's 32-bit indices cannot hold it.
pub(crate) fn word(v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::Alloc {
        op: "wgpu",
        bytes: v.saturating_mul(4),
        reason: "an index beyond the device's 32-bit indices",
    })
}

/// Appends a layout as `[rank, offset, shape…, strides…]` (the stride of a dimension of
/// size 1 is never used and is written as 0).
pub(crate) fn push_layout(p: &mut Vec<u32>, l: &Layout) -> Result<()> {
    p.push(word(l.rank())?);
    p.push(word(l.offset)?);
    for d in 0..l.rank() {
        p.push(word(l.shape[d])?);
    }
    for d in 0..l.rank() {
        p.push(if l.shape[d] <= 1 {
            0
        } else {
            word(l.strides[d])?
        });
    }
    Ok(())
}

/// The shader's path for `x^e` (`pow_path` in `shaders/pow.wgsl`): (path, n, negative),
/// chosen in the order of the reference's `pow`.
pub(crate) fn pow_path(e: f32) -> [u32; 3] {
    if e == 0.0 {
        [0, 0, 0]
    } else if e == 1.0 {
        [1, 0, 0]
    } else if e == 0.5 {
        [2, 0, 0]
    } else if e == -0.5 {
        [3, 0, 0]
    } else if e == (e as i32) as f32 && e.abs() <= 64.0 {
        [4, (e as i32).unsigned_abs(), u32::from(e < 0.0)]
    } else if e.is_nan() {
        [6, 0, 0]
    } else {
        [5, 0, 0]
    }
}

/// The unary kernel's parameters after `[zero, n]`.
pub(crate) fn unary_code(op: UnaryOp) -> [u32; 6] {
    let f = f32::to_bits;
    match op {
        UnaryOp::Neg => [0, 0, 0, 0, 0, 0],
        UnaryOp::Abs => [1, 0, 0, 0, 0, 0],
        UnaryOp::Relu => [2, 0, 0, 0, 0, 0],
        UnaryOp::LeakyRelu(s) => [3, f(s), 0, 0, 0, 0],
        UnaryOp::Sqrt => [4, 0, 0, 0, 0, 0],
        UnaryOp::Pow(e) => {
            let [path, n, neg] = pow_path(e);
            [5, f(e), 0, path, n, neg]
        }
        UnaryOp::Clamp(lo, hi) => [6, f(lo), f(hi), 0, 0, 0],
        UnaryOp::AddScalar(c) => [7, f(c), 0, 0, 0, 0],
        UnaryOp::MulScalar(c) => [8, f(c), 0, 0, 0, 0],
        UnaryOp::Sigmoid => [9, 0, 0, 0, 0, 0],
        UnaryOp::Tanh => [10, 0, 0, 0, 0, 0],
        UnaryOp::Exp => [11, 0, 0, 0, 0, 0],
        UnaryOp::Log => [12, 0, 0, 0, 0, 0],
        UnaryOp::GeluErf => [13, 0, 0, 0, 0, 0],
        UnaryOp::GeluTanh => [14, 0, 0, 0, 0, 0],
    }
}

/// The unary backward kernel's parameters after `[zero, n]`.
pub(crate) fn unary_backward_code(op: UnaryOp) -> [u32; 7] {
    let f = f32::to_bits;
    match op {
        UnaryOp::Neg => [0, 0, 0, 0, 0, 0, 0],
        UnaryOp::Abs => [1, 0, 0, 0, 0, 0, 0],
        UnaryOp::Relu => [2, 0, 0, 0, 0, 0, 0],
        UnaryOp::LeakyRelu(s) => [3, f(s), 0, 0, 0, 0, 0],
        UnaryOp::Sigmoid => [4, 0, 0, 0, 0, 0, 0],
        UnaryOp::Tanh => [5, 0, 0, 0, 0, 0, 0],
        UnaryOp::Exp => [6, 0, 0, 0, 0, 0, 0],
        UnaryOp::Log => [7, 0, 0, 0, 0, 0, 0],
        UnaryOp::Sqrt => [8, 0, 0, 0, 0, 0, 0],
        // p = 0 (either zero).
        UnaryOp::Pow(0.0) => [9, 0, 0, 0, 0, 0, 0],
        UnaryOp::Pow(e) => {
            let [path, n, neg] = pow_path(e - 1.0);
            [10, f(e), f(e - 1.0), path, n, neg, 0]
        }
        UnaryOp::Clamp(lo, hi) => {
            let flags = u32::from(lo == f32::NEG_INFINITY) | (u32::from(hi == f32::INFINITY) << 1);
            [11, f(lo), f(hi), 0, 0, 0, flags]
        }
        UnaryOp::AddScalar(_) => [12, 0, 0, 0, 0, 0, 0],
        UnaryOp::MulScalar(c) => [13, f(c), 0, 0, 0, 0, 0],
        UnaryOp::GeluErf => [14, 0, 0, 0, 0, 0, 0],
        UnaryOp::GeluTanh => [15, 0, 0, 0, 0, 0, 0],
    }
}

/// The parameters `[zero, n, h, w, kh, kw, oh, ow, sh, sw, dh, dw, ph, pw]` of the im2col
/// and col2im kernels, or `None` when a padded size `h + 2·ph` or `w + 2·pw` does not fit
/// in 32 bits (such a spec runs on the host).
pub(crate) fn col2im_params(s: &Col2imSpec, n: usize) -> Result<Option<Vec<u32>>> {
    let padded = |size: usize, pad: usize| {
        pad.checked_mul(2)
            .and_then(|v| v.checked_add(size))
            .filter(|&v| u32::try_from(v).is_ok())
    };
    let (Some(ph), Some(pw)) = (padded(s.h, s.padding[0]), padded(s.w, s.padding[1])) else {
        return Ok(None);
    };
    // A stride or dilation larger than its padded size is used only multiplied by 0 (the
    // spec's check puts the last tap of the last window inside the padded input), so it
    // is clamped to that size, 0 staying 0.
    let clamp = |v: usize, padded: usize| v.min(padded.max(1));
    Ok(Some(vec![
        0,
        word(n)?,
        word(s.h)?,
        word(s.w)?,
        word(s.kh)?,
        word(s.kw)?,
        word(s.oh)?,
        word(s.ow)?,
        word(clamp(s.stride[0], ph))?,
        word(clamp(s.stride[1], pw))?,
        word(clamp(s.dilation[0], ph))?,
        word(clamp(s.dilation[1], pw))?,
        word(s.padding[0])?,
        word(s.padding[1])?,
    ]))
}

/// The tap groups of one axis of col2im (`tap_group` in `shaders/col2im.wgsl`): (groups,
/// taps per group) for `k` taps, `o` output positions, stride `s` and dilation `d`.
pub(crate) fn tap_groups(k: usize, o: usize, s: usize, d: usize) -> (usize, usize) {
    match (s != 0, d != 0) {
        (true, true) => (k, 1),
        (false, true) => (o, 1),
        (true, false) => (1, k),
        (false, false) => (o, k),
    }
}

/// One dispatch over `threads` invocations per range of `chunks(count, per)`: its
/// parameters are `params`, the range `[start, len]`, then `tail` (a long loop cut into
/// dispatches that carry its accumulator).
pub(crate) fn chunked(
    params: &[u32],
    count: usize,
    per: usize,
    threads: usize,
    tail: &[u32],
) -> Result<Vec<Dispatch>> {
    Ok(chunks(count, per)?
        .into_iter()
        .map(|range| {
            let mut q = params.to_vec();
            q.extend_from_slice(&range);
            q.extend_from_slice(tail);
            Dispatch::new(q, threads)
        })
        .collect())
}
