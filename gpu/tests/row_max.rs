//! The softmax's row maximum, split across the invocations of a workgroup and with one
//! invocation per row (`docs/gpu.md` §5.5; each test forces both paths through
//! `WgpuBackend::with_split_row_max`, whatever the adapter would choose): rows whose
//! maximum is a zero of either sign, NaNs (payloads and signs) at the first, last and
//! middle columns and in a later dispatch, rows of ±∞, subnormals, repeated maxima in
//! different invocations, rows shorter and longer than a workgroup, and rows of more
//! than one dispatch's columns give the reference's bits in both modes, for the softmax
//! and the log-softmax (exact mode: every bit; fast mode: a NaN equals any NaN, as the
//! conformance kit compares).
//!
//! Without a Vulkan adapter each test prints why and passes, unless
//! `EXACTGRAD_REQUIRE_GPU=1` makes that a failure.

use exactgrad_backends::{FastScalarRefBackend, ScalarRefBackend};
use exactgrad_core::{Backend, ComputeMode, Philox};

mod common;
use common::{backend, bits_of};

/// The softmax (or log-softmax) of `x` as `rows × cols` on `b`, as bit patterns.
fn softmax<B: Backend>(b: &B, x: &[f32], rows: usize, cols: usize, log: bool) -> Vec<u32> {
    let xs = b.storage_from_vec(x.to_vec()).unwrap();
    let mut out = b.zeros(x.len()).unwrap();
    b.softmax(B::view(&xs), rows, cols, log, B::view_mut(&mut out))
        .unwrap();
    bits_of::<B>(&out)
}

/// Compares the device, with the row maximum split and not, with the reference of each
/// mode on `x` (`rows × cols`).
fn check(x: &[f32], rows: usize, cols: usize, what: &str) {
    for mode in [ComputeMode::Exact, ComputeMode::Fast] {
        let Some(gpu) = backend(mode) else { return };
        for log in [false, true] {
            let want = match mode {
                ComputeMode::Exact => softmax(&ScalarRefBackend, x, rows, cols, log),
                ComputeMode::Fast => softmax(&FastScalarRefBackend, x, rows, cols, log),
            };
            for split in [true, false] {
                let gpu = gpu.clone().with_split_row_max(split);
                assert_eq!(gpu.split_row_max(), split);
                let got = softmax(&gpu, x, rows, cols, log);
                let nan = |w: u32| f32::from_bits(w).is_nan();
                let bad = got.iter().zip(&want).position(|(&g, &w)| {
                    g != w && !(mode == ComputeMode::Fast && nan(g) && nan(w))
                });
                if let Some(i) = bad {
                    panic!(
                        "{what}, {mode}, log {log}, split {split}: element {i} (row {}, column {}): got {:#010x}, want {:#010x}",
                        i / cols,
                        i % cols,
                        got[i],
                        want[i]
                    );
                }
            }
        }
    }
}

fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Philox::new(seed);
    (0..n).map(|_| rng.next_f32() * 8.0 - 4.0).collect()
}

#[test]
fn crafted_rows_give_the_reference_bits() {
    let cols = 1000;
    let mut rows: Vec<Vec<f32>> = Vec::new();
    rows.push(vec![-0.0; cols]);
    rows.push(
        (0..cols)
            .map(|j| if j % 2 == 0 { -0.0 } else { 0.0 })
            .collect(),
    );
    rows.push((0..cols).map(|j| if j == 0 { 0.0 } else { -0.0 }).collect());
    // Negative values and a zero maximum of each sign in different invocations.
    rows.push(
        (0..cols)
            .map(|j| match j {
                70 => -0.0,
                5 => 0.0,
                _ => -1.0,
            })
            .collect(),
    );
    for (at, bits) in [
        (0, 0x7fc0_0000u32),
        (cols - 1, 0xffc0_0001),
        (64 * 3 + 7, 0x7f80_0001),
    ] {
        let mut r = random(cols, at as u64);
        r[at] = f32::from_bits(bits);
        rows.push(r);
    }
    rows.push(vec![f32::NEG_INFINITY; cols]);
    rows.push(
        (0..cols)
            .map(|j| {
                if j == cols - 1 {
                    f32::INFINITY
                } else {
                    f32::NEG_INFINITY
                }
            })
            .collect(),
    );
    rows.push(
        (0..cols)
            .map(|j| f32::from_bits(1 + (j as u32 * 7919) % 5000))
            .collect(),
    );
    // The maximum repeated in invocations 3 and 40 and the last column.
    rows.push(
        (0..cols)
            .map(|j| {
                if j == 3 || j == 40 || j == cols - 1 {
                    3.5
                } else {
                    (j % 17) as f32 * 0.1
                }
            })
            .collect(),
    );
    rows.push(
        (0..cols)
            .map(|j| if j % 3 == 0 { f32::MAX } else { -f32::MAX })
            .collect(),
    );
    rows.push(random(cols, 99));
    let n = rows.len();
    let x: Vec<f32> = rows.concat();
    check(&x, n, cols, "crafted rows of 1000 columns");
}

#[test]
fn rows_shorter_and_longer_than_a_workgroup() {
    for cols in [1, 2, 31, 63, 64, 65, 127, 129, 4097] {
        let rows = 5;
        let mut x = random(rows * cols, cols as u64);
        // A NaN in the last row, a zero maximum in the first.
        x[(rows - 1) * cols + cols / 2] = f32::NAN;
        for v in &mut x[..cols] {
            *v = -v.abs();
        }
        x[cols - 1] = -0.0;
        check(&x, rows, cols, &format!("{rows} rows of {cols} columns"));
    }
}

#[test]
fn rows_longer_than_one_dispatch() {
    // One dispatch of the split maximum takes 64 · 16,384 columns (one invocation per
    // row: 16,384).
    let cols = 64 * 16_384 + 777;
    let mut x = random(2 * cols, 5);
    // Row 0's maximum in the first dispatch (invocation 50), carried past a smaller
    // value in the second (invocation 60); row 1 a NaN in the second.
    x[64 * 1000 + 50] = 7.75;
    x[64 * 16_384 + 700] = 7.5;
    x[cols + 64 * 16_384 + 100] = f32::NAN;
    check(&x, 2, cols, "rows of 1,049,353 columns");
}
