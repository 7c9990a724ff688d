//! im2col and col2im on the device beyond the conformance kit's random specs: a col2im
//! sum longer than one dispatch's loop budget, stride 0 and dilation 0 (several windows
//! or several taps on one position), views inside larger buffers, NaN payloads, `−0` and
//! magnitudes that make the order of the additions show, and a padding beyond 32 bits
//! (run on the host). Each against `FastScalarRefBackend` in fast mode and
//! `ScalarRefBackend` in exact mode, bit for bit.
//!
//! Without a Vulkan adapter each test prints why and passes, unless
//! `EXACTGRAD_REQUIRE_GPU=1` makes that a failure.

use exactgrad_backends::{FastScalarRefBackend, ScalarRefBackend};
use exactgrad_core::kernels::Col2imSpec;
use exactgrad_core::{Backend, ComputeMode, Philox};

mod common;
use common::backend;

/// `n` values of mixed magnitudes (so that the order of additions changes the sum),
/// with `−0`, `+0`, infinities and NaNs of several payloads among them when `specials`.
fn values(n: usize, seed: u64, specials: bool) -> Vec<f32> {
    let mut rng = Philox::new(seed);
    (0..n)
        .map(|i| match if specials { i % 97 } else { 0 } {
            5 => -0.0,
            11 => 0.0,
            23 => f32::from_bits(0x7f80_0001 + (i as u32 & 0xff)),
            41 => f32::from_bits(0xffc0_1234),
            67 if i % 3 == 0 => f32::INFINITY,
            _ => (rng.next_f32() * 2.0 - 1.0) * (2.0f32).powi((i % 29) as i32 - 14),
        })
        .collect()
}

/// A spec from its parts (`[h, w]`, `[kh, kw]`, stride, padding, dilation, `[oh, ow]`).
fn spec(
    c: usize,
    [h, w]: [usize; 2],
    [kh, kw]: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
    [oh, ow]: [usize; 2],
) -> Col2imSpec {
    Col2imSpec {
        c,
        h,
        w,
        kh,
        kw,
        stride,
        padding,
        dilation,
        oh,
        ow,
    }
}

/// im2col (`col2im` false) or col2im of `s` on `b`, the input and the output each a view
/// at offset 3 inside a larger buffer whose other elements must be left alone; returns
/// the whole output buffer.
fn cols_call<B: Backend>(b: &B, s: &Col2imSpec, col2im: bool, specials: bool) -> Vec<f32> {
    let (image, cols) = (s.c * s.h * s.w, s.c * s.kh * s.kw * s.oh * s.ow);
    let (n_in, n_out) = if col2im { (cols, image) } else { (image, cols) };
    let input = b.storage_from_vec(values(n_in + 5, 7, specials)).unwrap();
    let mut out = b.storage_from_vec(values(n_out + 7, 8, specials)).unwrap();
    let x = B::slice(B::view(&input), 3..3 + n_in);
    let o = B::slice_mut(B::view_mut(&mut out), 3..3 + n_out);
    if col2im {
        b.col2im(s, x, o).unwrap();
    } else {
        b.im2col(s, x, o).unwrap();
    }
    B::storage_to_vec(&out).unwrap()
}

/// Checks both kernels on `s` in both modes against the reference of the mode, with
/// and without special values (a long sum with a NaN in it is NaN in any order).
fn check(s: Col2imSpec) {
    for mode in [ComputeMode::Fast, ComputeMode::Exact] {
        let Some(gpu) = backend(mode) else { return };
        for (col2im, specials) in [(false, true), (true, true), (true, false)] {
            let got = cols_call(&gpu, &s, col2im, specials);
            let want = match mode {
                ComputeMode::Exact => cols_call(&ScalarRefBackend, &s, col2im, specials),
                ComputeMode::Fast => cols_call(&FastScalarRefBackend, &s, col2im, specials),
            };
            // Fast mode: a NaN equals any NaN (its payload is the device's).
            let same = |a: f32, b: f32| {
                a.to_bits() == b.to_bits()
                    || (mode == ComputeMode::Fast && a.is_nan() && b.is_nan())
            };
            let first = got.iter().zip(&want).position(|(&a, &b)| !same(a, b));
            assert!(
                first.is_none(),
                "{mode} mode, {} of {s:?} (specials: {specials}): first difference at {first:?}: \
                 got {:?}, want {:?}",
                if col2im { "col2im" } else { "im2col" },
                first.map(|i| got[i].to_bits()),
                first.map(|i| want[i].to_bits()),
            );
        }
    }
}

#[test]
fn a_col2im_sum_longer_than_one_dispatch() {
    // 130 × 130 taps on each element of a 1 × 1 image (16,900 loop iterations).
    check(spec(
        2,
        [1, 1],
        [130, 130],
        [1, 1],
        [65, 65],
        [1, 1],
        [2, 2],
    ));
}

#[test]
fn stride_zero_stacks_every_window_on_one_position() {
    // 20,000 windows on the same rows: 20,000 additions per element, two dispatches.
    check(spec(2, [3, 2], [2, 2], [0, 1], [1, 0], [2, 1], [20_000, 1]));
    check(spec(1, [2, 3], [3, 2], [0, 0], [0, 1], [0, 1], [5, 7]));
}

#[test]
fn dilation_zero_stacks_every_tap_on_one_position() {
    check(spec(3, [5, 4], [3, 5], [2, 1], [1, 2], [0, 0], [3, 8]));
    check(spec(2, [6, 6], [4, 3], [1, 2], [2, 0], [0, 2], [9, 1]));
    check(spec(1, [1, 1], [20_000, 1], [1, 1], [0, 0], [0, 1], [1, 1]));
}

#[test]
fn ordinary_convolutions_and_empty_windows() {
    check(spec(4, [9, 11], [3, 3], [1, 1], [1, 1], [1, 1], [9, 11]));
    check(spec(3, [14, 13], [4, 2], [3, 2], [2, 1], [2, 3], [4, 6]));
    check(spec(2, [5, 5], [0, 3], [1, 1], [0, 0], [1, 1], [5, 3]));
    check(spec(2, [5, 5], [2, 2], [1, 1], [0, 0], [1, 1], [0, 4]));
    // A stride and a dilation far beyond the image, used only multiplied by 0.
    check(spec(
        2,
        [4, 3],
        [1, 2],
        [1 << 40, 3],
        [0, 1],
        [1 << 41, 1],
        [1, 2],
    ));
}

#[cfg(target_pointer_width = "64")]
#[test]
fn a_padding_beyond_32_bits_runs_on_the_host() {
    check(spec(
        2,
        [1, 2],
        [1, 1],
        [1, 1],
        [1 << 33, 0],
        [1, 1],
        [1, 2],
    ));
}
