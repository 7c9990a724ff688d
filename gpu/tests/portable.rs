//! The integer arithmetic of the portable paths against the host's IEEE arithmetic:
//! the division and square root of `shaders/portable.wgsl` (correctly rounded f32 from
//! u32 operations) and the binary64 of `shaders/f64_int.wgsl` (the f64 of the sums),
//! bit for bit, on dense samples with every exponent and the hard cases. The square root
//! on all 2^32 inputs is the ignored test `soft_sqrt_on_every_input` (`.ci/gpu-all`).
//!
//! Without a Vulkan adapter each test prints why and passes, unless
//! `EXACTGRAD_REQUIRE_GPU=1` makes that a failure.

use exactgrad_core::ComputeMode;
use exactgrad_wgpu::{PortableOp, WgpuBackend};

mod common;
use common::backend;

/// A xorshift generator (fixed seeds: the same inputs every run).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 16) as u32
    }

    fn next64(&mut self) -> u64 {
        (u64::from(self.next()) << 32) | u64::from(self.next())
    }
}

/// Equal bits, or both NaN (a NaN's payload is not part of the contract: exact mode
/// makes every NaN canonical, fast mode compares NaN as NaN).
fn same32(a: u32, b: u32) -> bool {
    a == b || (f32::from_bits(a).is_nan() && f32::from_bits(b).is_nan())
}

fn same64(a: u64, b: u64) -> bool {
    a == b || (f64::from_bits(a).is_nan() && f64::from_bits(b).is_nan())
}

/// Edge values of f32: zeros, ones, infinities, NaNs, the subnormal and normal boundaries,
/// the largest finite value and their neighbours, both signs.
fn edges32() -> Vec<u32> {
    let mut v = vec![
        0x0000_0000,
        0x0000_0001,
        0x0000_0002,
        0x0000_0003,
        0x0040_0000,
        0x007f_ffff,
        0x0080_0000,
        0x0080_0001,
        0x0100_0000,
        0x3f00_0000,
        0x3f7f_ffff,
        0x3f80_0000,
        0x3f80_0001,
        0x3fff_ffff,
        0x4000_0000,
        0x4040_0000,
        0x4b7f_ffff,
        0x7effffff,
        0x7f00_0000,
        0x7f7f_fffe,
        0x7f7f_ffff,
        0x7f80_0000,
        0x7f80_0001,
        0x7fc0_0000,
        0x7fff_ffff,
        0x3400_0000,
        0x3380_0000,
        0x0b80_0000,
    ];
    let neg: Vec<u32> = v.iter().map(|x| x | 0x8000_0000).collect();
    v.extend(neg);
    v
}

/// Runs `op` on the device and compares with `host` element by element; the first
/// differences are in the panic message.
fn check32(
    b: &WgpuBackend,
    what: &str,
    op: PortableOp,
    args: &[&[u32]],
    host: impl Fn(usize) -> u32,
) {
    let got = b.eval_portable(op, args).unwrap();
    assert_eq!(got.len(), args[0].len());
    let mut bad = Vec::new();
    for (i, &g) in got.iter().enumerate() {
        let want = host(i);
        if !same32(g, want) {
            bad.push(format!(
                "{:#010x?}: device {g:#010x}, host {want:#010x}",
                args.iter().map(|a| a[i]).collect::<Vec<_>>()
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "{what}: {} of {} differ, e.g. {:?}",
        bad.len(),
        got.len(),
        &bad[..bad.len().min(8)]
    );
}

/// Square-root inputs: for every sign and exponent field, the first and last 96
/// significands and 1,024 random ones; values whose root lies within a few units of the
/// last place of a midpoint of two f32 values (the squares of midpoints, rounded, and
/// their neighbours); the edge values.
fn sqrt_inputs() -> Vec<u32> {
    let mut r = Rng(0x5eed_0001);
    let mut v = edges32();
    for se in 0..512u32 {
        let top = se << 23;
        for m in 0..96 {
            v.push(top | m);
            v.push(top | (0x007f_ffff - m));
        }
        for _ in 0..1024 {
            v.push(top | (r.next() & 0x007f_ffff));
        }
    }
    for _ in 0..(1 << 16) {
        // A midpoint of two f32 values in [1, 4) scaled by an even power of two, squared
        // in f64 (exact: 50 bits) and rounded to f32: its root is within an ulp of the
        // midpoint.
        let root = f32::from_bits(0x3f80_0000 | (r.next() & 0x00ff_ffff));
        let mid = f64::from(root) + f64::from(root) * 2f64.powi(-24);
        let scale = 2f64.powi(2 * (r.next() % 120) as i32 - 120);
        let sq = ((mid * scale) * (mid * scale)) as f32;
        for d in [-2i32, -1, 0, 1, 2] {
            v.push(sq.to_bits().wrapping_add_signed(d));
        }
    }
    v
}

#[test]
fn soft_sqrt_matches_the_host_on_every_exponent_and_near_midpoints() {
    let Some(b) = backend(ComputeMode::Exact) else {
        return;
    };
    let a = sqrt_inputs();
    assert!(a.len() > 800_000);
    check32(&b, "integer sqrt", PortableOp::SoftSqrt, &[&a], |i| {
        f32::from_bits(a[i]).sqrt().to_bits()
    });
    // Signed zeros keep their sign, ∞ is ∞, negative values are NaN.
    let special = [0x8000_0000u32, 0, 0x7f80_0000, 0xbf80_0000, 0xff80_0000];
    let got = b.eval_portable(PortableOp::SoftSqrt, &[&special]).unwrap();
    assert_eq!(got[..3], special[..3]);
    assert!(f32::from_bits(got[3]).is_nan() && f32::from_bits(got[4]).is_nan());
}

/// Division inputs: every pair of edge values; random bit patterns; quotients in the
/// subnormal range, with exact ties there (odd multiples of 2^-149 by powers of two);
/// quotients near the largest finite value and 2^128 (overflow), and near the smallest
/// subnormal (underflow to zero); dividends and divisors a few ulps from each other.
fn div_inputs() -> (Vec<u32>, Vec<u32>) {
    let mut r = Rng(0x5eed_0002);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let e = edges32();
    for &x in &e {
        for &y in &e {
            a.push(x);
            b.push(y);
        }
    }
    let mut push = |x: u32, y: u32| {
        a.push(x);
        b.push(y);
    };
    for _ in 0..(1 << 18) {
        push(r.next(), r.next());
    }
    for _ in 0..(1 << 16) {
        // Subnormal results, exact ties among them.
        let k = r.next() & 0x00ff_ffff;
        let p = 0x3f80_0000 + ((r.next() % 24) << 23);
        push(k, p);
        push(k | 1, 0x4000_0000);
        // Normal over large: results from the normal range down to zero.
        push(
            r.next() & 0x0fff_ffff,
            (r.next() & 0x00ff_ffff) | 0x3f80_0000 | ((r.next() % 0x7f) << 23),
        );
        // Near overflow: large over just below 1, and the largest value over 1 ± ulps.
        push(
            0x7f7f_ffff - (r.next() & 0xff),
            0x3f7f_ffff - (r.next() & 0xff),
        );
        push(
            0x7f7f_ffff - (r.next() & 0xf),
            0x3f80_0000 + (r.next() & 0xf),
        );
        // Near underflow: the smallest values over numbers near 1 and 2.
        push(r.next() & 0xf, 0x3f80_0000 + (r.next() & 0x00ff_ffff));
        push(r.next() & 0x7, 0x4000_0000 - (r.next() & 0xf));
        // Quotients near 1 and near powers of two.
        let x = r.next() & 0x7fff_ffff;
        push(x, x.wrapping_add(r.next() & 7).wrapping_sub(3));
        // Subnormal dividends and divisors.
        push(r.next() & 0x807f_ffff, r.next() & 0x807f_ffff);
        push(r.next(), r.next() & 0x807f_ffff);
    }
    (a, b)
}

#[test]
fn soft_div_matches_the_host_on_hard_cases() {
    let Some(dev) = backend(ComputeMode::Exact) else {
        return;
    };
    let (a, b) = div_inputs();
    assert!(a.len() > 600_000);
    check32(
        &dev,
        "integer division",
        PortableOp::SoftDiv,
        &[&a, &b],
        |i| (f32::from_bits(a[i]) / f32::from_bits(b[i])).to_bits(),
    );
    // Ties in the subnormal range go to even: 3·2^-149 / 2 = 2·2^-149, 5·2^-149 / 2 =
    // 2·2^-149, 2^-149 / 2 = +0; x / ±0 is ±∞, 0 / 0 and ∞ / ∞ are NaN.
    let x = [3u32, 5, 1, 0x3f80_0000, 0xbf80_0000, 0, 0x7f80_0000];
    let y = [
        0x4000_0000u32,
        0x4000_0000,
        0x4000_0000,
        0x8000_0000,
        0,
        0,
        0x7f80_0000,
    ];
    let got = dev.eval_portable(PortableOp::SoftDiv, &[&x, &y]).unwrap();
    assert_eq!(got[..5], [2, 2, 0, 0xff80_0000, 0xff80_0000]);
    assert!(f32::from_bits(got[5]).is_nan() && f32::from_bits(got[6]).is_nan());
}

/// The device's own division and square root on the same inputs, for comparison: what
/// the probes would see on this device (a report, no assertion on the device's own;
/// the integer ones are asserted above).
#[test]
fn the_devices_own_division_and_sqrt_are_reported() {
    let Some(dev) = backend(ComputeMode::Exact) else {
        return;
    };
    let (a, b) = div_inputs();
    let got = dev.eval_portable(PortableOp::DeviceDiv, &[&a, &b]).unwrap();
    let div_bad = (0..a.len())
        .filter(|&i| {
            !same32(
                got[i],
                (f32::from_bits(a[i]) / f32::from_bits(b[i])).to_bits(),
            )
        })
        .count();
    let s = sqrt_inputs();
    let got = dev.eval_portable(PortableOp::DeviceSqrt, &[&s]).unwrap();
    let sqrt_bad = (0..s.len())
        .filter(|&i| !same32(got[i], f32::from_bits(s[i]).sqrt().to_bits()))
        .count();
    println!(
        "{}: the device's division differs on {div_bad} of {}, its sqrt on {sqrt_bad} of {}",
        dev.adapter().name,
        a.len(),
        s.len()
    );
    // Where the device's own differ, the kernels use the integer ones.
    if div_bad + sqrt_bad > 0 {
        assert!(dev.findings().soft_div_sqrt, "{}", dev.findings());
    }
}

/// Doubles as (low, high) word lists.
fn split(v: &[u64]) -> (Vec<u32>, Vec<u32>) {
    (
        v.iter().map(|&x| x as u32).collect(),
        v.iter().map(|&x| (x >> 32) as u32).collect(),
    )
}

/// Interesting doubles: zeros, subnormals, the normal boundary, ones, the largest,
/// infinities, NaNs, both signs.
fn edges64() -> Vec<u64> {
    let mut v = vec![
        0,
        1,
        2,
        0x000f_ffff_ffff_ffff,
        0x0010_0000_0000_0000,
        0x0010_0000_0000_0001,
        0x3ff0_0000_0000_0000,
        0x3ff0_0000_0000_0001,
        0x3fef_ffff_ffff_ffff,
        0x4340_0000_0000_0000,
        0x7fef_ffff_ffff_ffff,
        0x7fe0_0000_0000_0000,
        0x7ff0_0000_0000_0000,
        0x7ff8_0000_0000_0000,
        0x7ff0_0000_0000_0001,
        0x3690_0000_0000_0000,
    ];
    let neg: Vec<u64> = v.iter().map(|x| x | (1 << 63)).collect();
    v.extend(neg);
    v
}

#[test]
fn integer_f64_addition_matches_the_host() {
    let Some(dev) = backend(ComputeMode::Exact) else {
        return;
    };
    let mut r = Rng(0x5eed_0003);
    let (mut x, mut y) = (Vec::new(), Vec::new());
    let e = edges64();
    for &p in &e {
        for &q in &e {
            x.push(p);
            y.push(q);
        }
    }
    for i in 0..(1 << 18) {
        let p = r.next64();
        let q = match i % 6 {
            // Any bit patterns (every exponent, subnormals, ∞, NaN).
            0 => r.next64(),
            // Exponents within 60 of each other: alignment, sticky bits, cancellation.
            1 => {
                let shift = (u64::from(r.next() % 121)) << 52;
                (p & 0x800f_ffff_ffff_ffff)
                    | (((p >> 52) & 0x7ff)
                        .wrapping_add(shift >> 52)
                        .wrapping_sub(60)
                        & 0x7ff)
                        << 52
            }
            // Near-negation: massive cancellation.
            2 => (p ^ (1 << 63)).wrapping_add(u64::from(r.next() & 0xff)),
            // Subnormals and the normal boundary.
            3 => r.next64() & 0x801f_ffff_ffff_ffff,
            // Same sign, close values: carries into a new exponent, ties.
            4 => p.wrapping_add(u64::from(r.next() & 0xffff)),
            // Values as the sums see them: f32 values and exact f32 products.
            _ => {
                let (a, b) = (f32::from_bits(r.next()), f32::from_bits(r.next()));
                (f64::from(a) * f64::from(b)).to_bits()
            }
        };
        x.push(if i % 6 == 3 {
            p & 0x801f_ffff_ffff_ffff
        } else {
            p
        });
        y.push(q);
    }
    // Exact ties: a value with the lowest bit set plus a value half its ulp.
    for _ in 0..4096 {
        let p = (r.next64() & 0x3fff_ffff_ffff_ffff) | 1 | (0x3ff << 52);
        let ulp_half = ((p >> 52) - 53) << 52;
        x.push(p);
        y.push(ulp_half);
        x.push(p & !1);
        y.push(ulp_half);
    }
    let (xl, xh) = split(&x);
    let (yl, yh) = split(&y);
    let got = dev
        .eval_portable(PortableOp::F64Add, &[&xl, &xh, &yl, &yh])
        .unwrap();
    let mut bad = Vec::new();
    for i in 0..x.len() {
        let g = u64::from(got[2 * i]) | (u64::from(got[2 * i + 1]) << 32);
        let want = (f64::from_bits(x[i]) + f64::from_bits(y[i])).to_bits();
        if !same64(g, want) {
            bad.push(format!(
                "{:#018x} + {:#018x}: device {g:#018x}, host {want:#018x}",
                x[i], y[i]
            ));
        }
    }
    assert!(
        bad.is_empty(),
        "{} of {} differ, e.g. {:?}",
        bad.len(),
        x.len(),
        &bad[..bad.len().min(8)]
    );
}

#[test]
fn integer_f64_conversions_and_products_match_the_host() {
    let Some(dev) = backend(ComputeMode::Exact) else {
        return;
    };
    let mut r = Rng(0x5eed_0004);
    // f32 to f64 and the exact products: every exponent field, random significands.
    let mut a: Vec<u32> = edges32();
    let mut b: Vec<u32> = edges32().into_iter().rev().collect();
    for se in 0..512u32 {
        for _ in 0..256 {
            a.push((se << 23) | (r.next() & 0x007f_ffff));
            b.push(r.next());
        }
    }
    let got = dev.eval_portable(PortableOp::F64FromF32, &[&a]).unwrap();
    for (i, &x) in a.iter().enumerate() {
        let g = u64::from(got[2 * i]) | (u64::from(got[2 * i + 1]) << 32);
        let want = f64::from(f32::from_bits(x)).to_bits();
        assert!(
            same64(g, want),
            "f64({x:#010x}): {g:#018x}, host {want:#018x}"
        );
    }
    let got = dev.eval_portable(PortableOp::F64MulF32, &[&a, &b]).unwrap();
    for i in 0..a.len() {
        let g = u64::from(got[2 * i]) | (u64::from(got[2 * i + 1]) << 32);
        let want = (f64::from(f32::from_bits(a[i])) * f64::from(f32::from_bits(b[i]))).to_bits();
        assert!(
            same64(g, want),
            "{:#010x} * {:#010x}: {g:#018x}, host {want:#018x}",
            a[i],
            b[i]
        );
    }
    // f64 to f32: every exponent around and beyond the f32 range, exact midpoints of two
    // f32 values (ties to even) and their f64 neighbours, subnormal results.
    let mut d: Vec<u64> = edges64();
    for e in 0..2048u64 {
        for _ in 0..64 {
            d.push((e << 52) | (r.next64() & 0x000f_ffff_ffff_ffff) | (r.next64() & (1 << 63)));
        }
    }
    for _ in 0..(1 << 16) {
        // A midpoint: an f32 with one more bit set just below its last place.
        let e = 0x380 + u64::from(r.next() % 0x100) - 30;
        let m = u64::from(r.next() & 0x007f_ffff) << 29 | (1 << 28);
        let mid = (e << 52) | m;
        for delta in [-1i64, 0, 1] {
            d.push(mid.wrapping_add_signed(delta));
        }
    }
    let (lo, hi) = split(&d);
    let got = dev
        .eval_portable(PortableOp::F64ToF32, &[&lo, &hi])
        .unwrap();
    for (i, &x) in d.iter().enumerate() {
        let want = (f64::from_bits(x) as f32).to_bits();
        assert!(
            same32(got[i], want),
            "f32({x:#018x}): {:#010x}, host {want:#010x}",
            got[i]
        );
    }
}

#[test]
fn eval_portable_rejects_bad_arguments() {
    let Some(dev) = backend(ComputeMode::Exact) else {
        return;
    };
    let e = dev
        .eval_portable(PortableOp::SoftDiv, &[&[1, 2]])
        .unwrap_err();
    assert!(e.to_string().contains("takes 2 operands, got 1"), "{e}");
    let e = dev
        .eval_portable(PortableOp::SoftDiv, &[&[1, 2], &[3]])
        .unwrap_err();
    assert!(e.to_string().contains("differ in length"), "{e}");
    assert!(dev
        .eval_portable(PortableOp::SoftSqrt, &[&[]])
        .unwrap()
        .is_empty());
}

/// The integer fused multiply-add (fast mode's without a correctly rounded device `fma`
/// and without exact f64) against `f32::mul_add`: the inputs that defeat rounding through
/// f64 twice, products that cancel the addend, subnormal and overflowing results, edge
/// values, and random bit patterns.
#[test]
fn integer_fma_matches_the_host() {
    let Some(dev) = backend(ComputeMode::Exact) else {
        return;
    };
    let mut r = Rng(0x5eed_0005);
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    for [x, y, z] in exactgrad_wgpu::double_rounding_cases() {
        a.push(x.to_bits());
        b.push(y.to_bits());
        c.push(z.to_bits());
    }
    let e = edges32();
    for &x in &e {
        for &y in &e {
            a.push(x);
            b.push(y);
            c.push(e[(r.next() as usize) % e.len()]);
        }
    }
    for i in 0..(1 << 18) {
        let (x, y) = (r.next(), r.next());
        a.push(x);
        b.push(y);
        c.push(match i % 4 {
            // Near-cancellation: the addend is minus the rounded product, nudged.
            0 => (-(f32::from_bits(x) * f32::from_bits(y)))
                .to_bits()
                .wrapping_add(r.next() & 3),
            // Subnormal addends, small exponents.
            1 => r.next() & 0x80ff_ffff,
            // An addend of similar magnitude to the product.
            2 => {
                let p = (f32::from_bits(x) * f32::from_bits(y)).to_bits();
                p ^ (r.next() & 0x8000_ffff)
            }
            _ => r.next(),
        });
    }
    check32(
        &dev,
        "integer fma",
        PortableOp::FmaF32,
        &[&a, &b, &c],
        |i| {
            f32::from_bits(a[i])
                .mul_add(f32::from_bits(b[i]), f32::from_bits(c[i]))
                .to_bits()
        },
    );
}
