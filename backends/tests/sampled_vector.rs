//! The vector forms of the exact transcendental functions equal their scalar form bit for
//! bit on a dense sample of the 2^32 f32 inputs, on every vector path of this machine
//! (AVX-512, AVX2 and 128-bit on x86-64, NEON on AArch64).
//!
//! The sampled twin of `exhaustive_vector.rs`, cheap enough to run on every target with
//! the default test command (and under emulation): for each function, the vector form of
//! each path (`exactgrad_backends::cpu::vector_forms::vector_form`, the generic code on
//! the path's lane type, compiled with its target features) is compared with the scalar
//! form (`Transcendental::scalar`, the `f32` instantiation) on
//!
//! - one run of [`RUN`] consecutive bit patterns in every window of `2^STRIDE_LOG2`
//!   patterns (so every `2^STRIDE_LOG2`-th pattern of the whole range, at an offset inside
//!   its window that varies from window to window, so that low mantissa bits vary too);
//! - runs of [`ANCHOR_RUN`] patterns centred on every special value (±0, the subnormal
//!   and normal limits, ±1, ±MAX, ±inf, signalling and quiet NaNs of both signs) and on
//!   the thresholds where the algorithms switch branches or saturate, for both signs.
//!
//! Every run is a whole number of lanes of every path, so every sampled input goes
//! through a vector lane. The release build samples every 2^14-th window (about 4.4
//! million inputs per function), a debug build every 2^18-th.

use exactgrad_backends::cpu::vector_forms::{vector_form, Transcendental};
use exactgrad_backends::cpu::Isa;
use exactgrad_core::ComputeMode;
use std::time::Instant;

/// log2 of the window in which one run is sampled.
const STRIDE_LOG2: u32 = if cfg!(debug_assertions) { 18 } else { 14 };
/// Consecutive patterns per sampled window (a multiple of every lane width).
const RUN: usize = 16;
/// Consecutive patterns around each special value and threshold.
const ANCHOR_RUN: usize = 4096;

/// Special values (bit patterns; both signs are added).
const SPECIALS: [u32; 10] = [
    0x0000_0000, // +0
    0x0000_0001, // smallest subnormal
    0x007F_FFFF, // largest subnormal
    0x0080_0000, // smallest normal
    0x3F80_0000, // 1
    0x7F7F_FFFF, // MAX
    0x7F80_0000, // inf
    0x7F80_0001, // smallest signalling NaN
    0x7FC0_0000, // quiet NaN
    0x7FFF_FFFF, // largest NaN payload
];

/// Where the algorithms switch branches, clamp or saturate (values; both signs are
/// added): the small-argument branches of tanh (0.625) and erf (1), the reduction of log
/// (√2), the clamps of exp (89, −170), the exponent clamps inside erf and its slope (15,
/// 12), exp's overflow (88.72…) and underflow to subnormals (−87.34…) and to zero
/// (−103.97…), tanh's and sigmoid's saturation, 0.5 and 2.
const THRESHOLDS: [f32; 15] = [
    0.625,
    1.0,
    core::f32::consts::SQRT_2,
    89.0,
    170.0,
    15.0,
    12.0,
    88.722_84,
    87.336_55,
    103.972_08,
    9.01,
    17.33,
    3.92,
    0.5,
    2.0,
];

/// A fixed scramble of the window index (a multiplicative hash), for the run's offset.
fn offset(j: u32) -> u32 {
    let h = j.wrapping_mul(0x9E37_79B9).rotate_right(13) ^ j;
    h % ((1u32 << STRIDE_LOG2) - RUN as u32 + 1)
}

/// The sampled runs: `(first bit pattern, length)`.
fn runs() -> Vec<(u32, usize)> {
    let windows = 1u32 << (32 - STRIDE_LOG2);
    let mut v: Vec<(u32, usize)> = (0..windows)
        .map(|j| ((j << STRIDE_LOG2) + offset(j), RUN))
        .collect();
    let anchors = SPECIALS
        .into_iter()
        .chain(THRESHOLDS.iter().map(|t| t.to_bits()));
    for a in anchors {
        for bits in [a, a | 0x8000_0000] {
            v.push((bits.wrapping_sub(ANCHOR_RUN as u32 / 2), ANCHOR_RUN));
        }
    }
    v
}

/// The vector paths of this machine.
fn vector_paths() -> Vec<Isa> {
    Isa::ALL
        .into_iter()
        .filter(|&isa| isa != Isa::Scalar)
        .filter(|isa| {
            let ok = isa.is_supported(ComputeMode::Exact);
            if !ok {
                println!("skipped: the {isa} path (not supported by this CPU)");
            }
            ok
        })
        .collect()
}

#[test]
fn vector_forms_equal_the_scalar_forms_on_a_dense_sample() {
    let paths = vector_paths();
    if cfg!(target_arch = "aarch64") {
        assert!(
            paths.contains(&Isa::Neon),
            "the NEON path is not detected on this AArch64 CPU"
        );
    }
    if cfg!(target_arch = "x86_64") {
        assert!(
            paths.contains(&Isa::V128),
            "the 128-bit path is not detected on this x86-64 CPU"
        );
    }
    let runs = runs();
    let inputs: usize = runs.iter().map(|r| r.1).sum();
    let mut want = vec![0.0f32; ANCHOR_RUN];
    let mut got = vec![0.0f32; ANCHOR_RUN];
    let mut failures = Vec::new();
    let t = Instant::now();
    for f in Transcendental::ALL {
        for &(x0, len) in &runs {
            for (i, w) in want[..len].iter_mut().enumerate() {
                *w = f.scalar(f32::from_bits(x0.wrapping_add(i as u32)));
            }
            for &isa in &paths {
                vector_form(isa, f, x0, &mut got[..len]).expect("the path was checked above");
                for i in 0..len {
                    if got[i].to_bits() != want[i].to_bits() && failures.len() < 20 {
                        failures.push(format!(
                            "{} on {isa}: x = 0x{:08X}: vector 0x{:08X}, scalar 0x{:08X}",
                            f.name(),
                            x0.wrapping_add(i as u32),
                            got[i].to_bits(),
                            want[i].to_bits()
                        ));
                    }
                }
            }
        }
    }
    let names: Vec<&str> = paths.iter().map(|p| p.name()).collect();
    println!(
        "{} functions × {inputs} sampled inputs on {names:?} in {:.1} s",
        Transcendental::ALL.len(),
        t.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The sample is what the documentation says: every window of `2^STRIDE_LOG2` patterns
/// holds one run inside it, and every special value and threshold sits in a run.
#[test]
fn the_sample_covers_every_window_and_anchor() {
    let runs = runs();
    let windows = 1usize << (32 - STRIDE_LOG2);
    for (j, &(x0, len)) in runs[..windows].iter().enumerate() {
        let last = x0 as u64 + len as u64 - 1;
        assert_eq!(
            x0 as u64 >> STRIDE_LOG2,
            j as u64,
            "run {j} starts in its window"
        );
        assert_eq!(last >> STRIDE_LOG2, j as u64, "run {j} ends in its window");
    }
    let covered = |bits: u32| {
        runs[windows..]
            .iter()
            .any(|&(x0, len)| (bits.wrapping_sub(x0) as usize) < len)
    };
    for a in SPECIALS
        .into_iter()
        .chain(THRESHOLDS.iter().map(|t| t.to_bits()))
    {
        assert!(covered(a) && covered(a | 0x8000_0000), "0x{a:08X}");
    }
    assert!(runs.iter().all(|r| r.1 % 16 == 0 && r.1 <= ANCHOR_RUN));
}
