//! The pooling kernels beyond what the conformance kit generates: windows and gathers
//! longer than a shader loop may run on llvmpipe (split across dispatches), windows left
//! empty by an output size larger than PyTorch's, padding beyond half the window, argmax
//! indices chosen by hand (several outputs on one element, windows without taps), NaN and
//! tied inputs. Each against `ScalarRefBackend` (exact mode) and `FastScalarRefBackend`
//! (fast mode), bit for bit (NaN equal to any NaN in fast mode).
//!
//! Without a Vulkan adapter each test prints why and passes, unless
//! `EXACTGRAD_REQUIRE_GPU=1` makes that a failure.

use exactgrad_backends::{FastScalarRefBackend, ScalarRefBackend};
use exactgrad_core::kernels::{AdaptivePool2dSpec, AvgPool2dSpec, Pool2dSpec};
use exactgrad_core::{Backend, ComputeMode, Philox};

mod common;
use common::backend;

/// `n` values in [−1, 1) with, when `specials`, NaNs (with payloads and signs), ±∞, ±0
/// and repeated values sprinkled in.
fn values(n: usize, seed: u64, specials: bool) -> Vec<f32> {
    let mut rng = Philox::new(seed);
    (0..n)
        .map(|_| {
            let v = rng.next_f32() * 2.0 - 1.0;
            if !specials {
                return v;
            }
            match (rng.next_f32() * 40.0) as u32 {
                0 => f32::from_bits(0x7fc0_0001 + (rng.next_f32() * 1000.0) as u32),
                1 => f32::from_bits(0xffc0_0000),
                2 => f32::INFINITY,
                3 => f32::NEG_INFINITY,
                4 => 0.0,
                5 => -0.0,
                6..=9 => 0.5,
                _ => v,
            }
        })
        .collect()
}

/// The bits of `v`, every NaN as `0x7FC00000` in fast mode (where any NaN is equal).
fn bits(mode: ComputeMode, v: &[f32]) -> Vec<u32> {
    v.iter()
        .map(|x| match mode {
            ComputeMode::Fast if x.is_nan() => 0x7fc0_0000,
            _ => x.to_bits(),
        })
        .collect()
}

/// Runs `body` on the device and on the reference of each mode and compares the results.
macro_rules! compare {
    ($name:ident, |$b:ident| $body:expr) => {
        #[test]
        fn $name() {
            for mode in [ComputeMode::Fast, ComputeMode::Exact] {
                let Some(gpu) = backend(mode) else { return };
                let got = {
                    let $b = &gpu;
                    $body
                };
                let want = match mode {
                    ComputeMode::Exact => {
                        let $b = &ScalarRefBackend;
                        $body
                    }
                    ComputeMode::Fast => {
                        let $b = &FastScalarRefBackend;
                        $body
                    }
                };
                assert_eq!(got.1, want.1, "{mode} mode: argmax");
                assert_eq!(bits(mode, &got.0), bits(mode, &want.0), "{mode} mode");
            }
        }
    };
}

/// avg_pool2d and its backward rule on `spec`, the outputs concatenated.
fn avg<B: Backend>(b: &B, s: &AvgPool2dSpec, seed: u64, specials: bool) -> (Vec<f32>, Vec<usize>) {
    let p = &s.pool;
    let (ni, no) = (p.planes * p.h * p.w, p.planes * p.oh * p.ow);
    let x = b.storage_from_vec(values(ni, seed, specials)).unwrap();
    let g = b.storage_from_vec(values(no, seed + 1, specials)).unwrap();
    let mut out = b.zeros(no).unwrap();
    let mut gx = b.zeros(ni).unwrap();
    b.avg_pool2d(s, B::view(&x), B::view_mut(&mut out)).unwrap();
    b.avg_pool2d_backward(s, B::view(&g), B::view_mut(&mut gx))
        .unwrap();
    let mut r = B::storage_to_vec(&out).unwrap();
    r.extend(B::storage_to_vec(&gx).unwrap());
    (r, Vec::new())
}

/// adaptive_avg_pool2d and its backward rule on `spec`, the outputs concatenated.
fn adaptive<B: Backend>(
    b: &B,
    s: &AdaptivePool2dSpec,
    seed: u64,
    specials: bool,
) -> (Vec<f32>, Vec<usize>) {
    let (ni, no) = (s.planes * s.h * s.w, s.planes * s.oh * s.ow);
    let x = b.storage_from_vec(values(ni, seed, specials)).unwrap();
    let g = b.storage_from_vec(values(no, seed + 1, specials)).unwrap();
    let mut out = b.zeros(no).unwrap();
    let mut gx = b.zeros(ni).unwrap();
    b.adaptive_avg_pool2d(s, B::view(&x), B::view_mut(&mut out))
        .unwrap();
    b.adaptive_avg_pool2d_backward(s, B::view(&g), B::view_mut(&mut gx))
        .unwrap();
    let mut r = B::storage_to_vec(&out).unwrap();
    r.extend(B::storage_to_vec(&gx).unwrap());
    (r, Vec::new())
}

/// max_pool2d on `spec` (values and argmax), then its backward rule with that argmax.
fn max<B: Backend>(b: &B, s: &Pool2dSpec, seed: u64, specials: bool) -> (Vec<f32>, Vec<usize>) {
    let (ni, no) = (s.planes * s.h * s.w, s.planes * s.oh * s.ow);
    let x = b.storage_from_vec(values(ni, seed, specials)).unwrap();
    let g = b.storage_from_vec(values(no, seed + 1, specials)).unwrap();
    let mut out = b.zeros(no).unwrap();
    let mut argmax = vec![0; no];
    let mut gx = b.zeros(ni).unwrap();
    b.max_pool2d(s, B::view(&x), B::view_mut(&mut out), &mut argmax)
        .unwrap();
    b.max_pool2d_backward(s, &argmax, B::view(&g), B::view_mut(&mut gx))
        .unwrap();
    let mut r = B::storage_to_vec(&out).unwrap();
    r.extend(B::storage_to_vec(&gx).unwrap());
    (r, argmax)
}

/// A square pooling spec of one size per axis.
fn pool(planes: usize, hw: [usize; 2], o: [usize; 2], k: usize, s: usize, p: usize) -> Pool2dSpec {
    Pool2dSpec {
        planes,
        h: hw[0],
        w: hw[1],
        oh: o[0],
        ow: o[1],
        kernel: [k, k],
        stride: [s, s],
        padding: [p, p],
        dilation: [1, 1],
    }
}

compare!(an_adaptive_window_of_90000_elements, |b| {
    // Forward: one window of 300 × 300 taps; then 2 × 3 windows.
    let mut r = adaptive(
        b,
        &AdaptivePool2dSpec {
            planes: 2,
            h: 300,
            w: 300,
            oh: 1,
            ow: 1,
        },
        1,
        false,
    );
    r.0.extend(
        adaptive(
            b,
            &AdaptivePool2dSpec {
                planes: 1,
                h: 300,
                w: 300,
                oh: 2,
                ow: 3,
            },
            2,
            false,
        )
        .0,
    );
    r
});

compare!(an_element_in_90000_adaptive_windows, |b| adaptive(
    b,
    &AdaptivePool2dSpec {
        planes: 2,
        h: 1,
        w: 1,
        oh: 300,
        ow: 300,
    },
    3,
    false
));

compare!(an_average_window_of_90000_elements, |b| avg(
    b,
    &AvgPool2dSpec {
        pool: pool(1, [300, 300], [1, 1], 301, 1, 1),
        count_include_pad: false,
        divisor_override: None,
    },
    4,
    false
));

compare!(an_element_in_90000_average_windows, |b| avg(
    b,
    // Padding beyond half the window and more outputs than PyTorch's size: windows
    // partly or wholly outside the input.
    &AvgPool2dSpec {
        pool: pool(1, [1, 1], [300, 300], 300, 1, 299),
        count_include_pad: true,
        divisor_override: None,
    },
    5,
    false
));

compare!(a_max_window_of_90000_elements, |b| max(
    b,
    &pool(2, [300, 300], [1, 2], 300, 1, 0),
    6,
    true
));

compare!(empty_and_odd_average_windows, |b| {
    // Every divisor rule, output sizes beyond PyTorch's (empty windows), large padding.
    let mut all = Vec::new();
    let mut rng = Philox::new(7);
    let mut below = |n: usize| ((rng.next_f32() * n as f32) as usize).min(n - 1);
    for case in 0..60 {
        let (h, w) = (1 + below(9), 1 + below(9));
        let k = 1 + below(5);
        let spec = AvgPool2dSpec {
            pool: Pool2dSpec {
                planes: 1 + below(3),
                h,
                w,
                oh: 1 + below(h + 6),
                ow: 1 + below(w + 6),
                kernel: [k, 1 + below(5)],
                stride: [1 + below(3), 1 + below(3)],
                padding: [below(k + 2), below(4)],
                dilation: [1, 1],
            },
            count_include_pad: below(2) == 0,
            divisor_override: (below(4) == 0).then(|| 1 + below(9)),
        };
        all.extend(avg(b, &spec, 100 + case, true).0);
        let ad = AdaptivePool2dSpec {
            planes: 1 + below(3),
            h,
            w,
            oh: 1 + below(2 * h + 2),
            ow: 1 + below(2 * w + 2),
        };
        all.extend(adaptive(b, &ad, 200 + case, true).0);
    }
    (all, Vec::<usize>::new())
});

compare!(max_windows_without_taps_dilated_and_padded, |b| {
    let mut all = (Vec::new(), Vec::new());
    let mut rng = Philox::new(8);
    let mut below = |n: usize| ((rng.next_f32() * n as f32) as usize).min(n - 1);
    for case in 0..60 {
        let (h, w) = (1 + below(9), 1 + below(9));
        let spec = Pool2dSpec {
            planes: 1 + below(3),
            h,
            w,
            oh: 1 + below(h + 6),
            ow: 1 + below(w + 6),
            kernel: [1 + below(4), 1 + below(4)],
            stride: [1 + below(3), 1 + below(3)],
            padding: [below(5), below(5)],
            dilation: [1 + below(3), 1 + below(3)],
        };
        let (v, a) = max(b, &spec, 300 + case, true);
        all.0.extend(v);
        all.1.extend(a);
    }
    all
});

/// max_pool2d_backward with indices chosen by hand: most outputs on element 0 of their
/// plane, some on others, some without taps.
fn max_backward<B: Backend>(
    b: &B,
    s: &Pool2dSpec,
    seed: u64,
    specials: bool,
) -> (Vec<f32>, Vec<usize>) {
    let no = s.planes * s.oh * s.ow;
    let argmax: Vec<usize> = (0..no)
        .map(|j| match j % 11 {
            3 => 3,
            5 => usize::MAX,
            7 => 1,
            _ => 0,
        })
        .collect();
    let g = b.storage_from_vec(values(no, seed, specials)).unwrap();
    let mut gx = b.zeros(s.planes * s.h * s.w).unwrap();
    b.max_pool2d_backward(s, &argmax, B::view(&g), B::view_mut(&mut gx))
        .unwrap();
    (B::storage_to_vec(&gx).unwrap(), Vec::new())
}

compare!(max_backward_with_76000_outputs_on_one_element, |b| {
    max_backward(b, &pool(2, [2, 2], [1, 120_000], 1, 1, 0), 9, false)
});
