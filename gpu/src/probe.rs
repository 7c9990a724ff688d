//! The arithmetic probes run once per device before a backend is built: whether the
//! shader compiler contracts a separate multiply and add, whether fused multiply-add,
//! division, square root, multiplication and addition give the host's IEEE bits on
//! random and edge inputs (subnormals included), and whether f64 additions and the
//! rounding of f64 to f32 do.

use crate::device::{Dispatch, Gpu, Kernel};
use exactgrad_core::{ComputeMode, Result};
use std::fmt;

/// The inputs each probe runs on: random bit patterns, subnormal-heavy random patterns
/// and every pair of a list of edge values.
const RANDOM: usize = 1 << 15;

/// What the probes measured on a device (more findings may come: read it through its
/// fields, never build it).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Findings {
    /// Inputs per probe.
    pub samples: usize,
    /// `a * b + c` written as two operations came back as one fused multiply-add (the
    /// shader compiler or driver contracted it): on `(1 + 2⁻²³)² − (1 + 2⁻²²)` it gave
    /// `2⁻⁴⁶` instead of `0`.
    pub contracts_mul_add: bool,
    /// Inputs on which `a * b + c` as written differed from the host's unfused result.
    pub mul_add_mismatches: usize,
    /// Inputs on which `a * b + c` with the product through the kernels' `opaque`
    /// barrier differed from the host's unfused result (must be 0 for exact mode).
    pub barrier_mismatches: usize,
    /// Inputs on which `fma(a, b, c)` differed from `f32::mul_add`.
    pub fma_mismatches: usize,
    /// Inputs on which `fma(a, b, c)` differed from the unfused `a * b + c` (0 when the
    /// device computes `fma` as two roundings).
    pub fma_unfused_mismatches: usize,
    /// With f64 in shaders: inputs on which the kernels' f64 emulation of the fused
    /// multiply-add differed from `f32::mul_add`; `None` without f64.
    pub fma_emulated_mismatches: Option<usize>,
    /// Inputs on which `a / b` differed from the host's correctly rounded quotient.
    pub div_mismatches: usize,
    /// Inputs on which `sqrt(a)` differed from the host's.
    pub sqrt_mismatches: usize,
    /// Inputs on which `a * b` differed from the host's.
    pub mul_mismatches: usize,
    /// Inputs on which `a + b` differed from the host's.
    pub add_mismatches: usize,
    /// Subnormal inputs or results that the device flushed to zero (over all probes).
    pub subnormals_flushed: usize,
    /// With f64 in shaders: inputs on which `f32(f64(a) · f64(b) + f64(c))` (products
    /// exact, values beyond the f32 range included) differed from the host's; `None`
    /// without f64.
    pub f64_wide_mismatches: Option<usize>,
    /// Iterations that a shader loop written for 100,000 iterations ran (llvmpipe ends
    /// every loop after 65,535).
    pub loop_of_100000_ran: u32,
    /// Up to four differing inputs of each probe: probe, operands and both results, as bits.
    pub examples: Vec<String>,
    /// With f64 in shaders: inputs on which `f32(f64(a) + f64(b))` differed from the
    /// host's; `None` without f64.
    pub f64_mismatches: Option<usize>,
    /// Inputs on which the integer division of `shaders/portable.wgsl` differed from the
    /// host's correctly rounded quotient (0 on every device: it uses integer operations only).
    pub soft_div_mismatches: usize,
    /// Inputs on which the integer square root differed from the host's.
    pub soft_sqrt_mismatches: usize,
    /// Inputs on which the integer fused multiply-add (`soft_fma`: the exact product plus
    /// the addend rounded to odd in the integer binary64, then to f32) differed from
    /// `f32::mul_add`.
    pub fma_int_mismatches: usize,
    /// Inputs on which the integer binary64 (`shaders/f64_int.wgsl`) gave other bits than
    /// the host's f64 in `f32(f64(a) + f64(b))` and `f32(f64(a) · f64(b) + f64(c))`.
    pub int_f64_mismatches: usize,
    /// Whether the kernels divide and take square roots with the integer algorithms: the
    /// device's own are not correctly rounded, or [`crate::SOFT_DIV_SQRT_ENV`] asked for it.
    pub soft_div_sqrt: bool,
    /// Whether [`crate::SOFT_DIV_SQRT_ENV`] forced the integer division and square root.
    pub soft_div_sqrt_forced: bool,
    /// Whether the f64 sums of rule 3 use the integer binary64: the device has no exact
    /// f64, or [`crate::INT_F64_ENV`] asked for it.
    pub int_f64: bool,
    /// Whether [`crate::INT_F64_ENV`] forced the integer binary64.
    pub int_f64_forced: bool,
}

/// Which portable paths to use whatever the probes find (from the environment).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Overrides {
    /// Division and square root by the integer algorithms.
    pub(crate) soft_div_sqrt: bool,
    /// The f64 sums by the integer binary64.
    pub(crate) int_f64: bool,
}

impl Findings {
    /// What `mode` needs and this device lacks (empty: nothing). Both modes need
    /// separately rounded products and sums, IEEE division, square root, multiplication
    /// and addition, subnormals, and loops of the kernels' length; fast mode also a
    /// correctly rounded fused multiply-add, the device's own or its emulation (in f64,
    /// or in integers where the sums use the integer binary64).
    pub fn missing(&self, mode: ComputeMode) -> Vec<String> {
        let mut m = Vec::new();
        if mode == ComputeMode::Fast && !self.fma_native() && self.int_f64 {
            if self.fma_int_mismatches != 0 {
                m.push(format!(
                    "a correctly rounded fused multiply-add (the device's and its integer emulation's: {} of {} inputs differ)",
                    self.fma_int_mismatches, self.samples
                ));
            }
        } else if mode == ComputeMode::Fast && !self.fma_native() {
            match self.fma_emulated_mismatches {
                Some(0) => {}
                Some(n) => m.push(format!(
                    "a correctly rounded fused multiply-add (the device's and its f64 emulation's: {n} of {} inputs differ)",
                    self.samples
                )),
                None => m.push(format!(
                    "a correctly rounded fused multiply-add ({} of {} inputs differ) or f64 to emulate one",
                    self.fma_mismatches, self.samples
                )),
            }
        }
        let mut check = |n: usize, what: &str| {
            if n != 0 {
                m.push(format!("{what} ({n} of {} inputs differ)", self.samples));
            }
        };
        check(
            self.barrier_mismatches,
            "separately rounded multiply and add",
        );
        if self.soft_div_sqrt {
            check(
                self.soft_div_mismatches,
                "correctly rounded integer division",
            );
            check(
                self.soft_sqrt_mismatches,
                "correctly rounded integer square root",
            );
        } else {
            check(self.div_mismatches, "correctly rounded division");
            check(self.sqrt_mismatches, "correctly rounded square root");
        }
        check(self.mul_mismatches, "IEEE multiplication");
        check(self.add_mismatches, "IEEE addition");
        check(self.subnormals_flushed, "preserved subnormals");
        // The kernels keep every loop under `LOOP_BUDGET` (16,384) iterations per
        // dispatch, with room for the layout arithmetic inside them.
        if self.loop_of_100000_ran < 32_768 {
            m.push(format!(
                "shader loops of 32768 iterations (a loop of 100000 ran {})",
                self.loop_of_100000_ran
            ));
        }
        m
    }

    /// Whether the device's own `fma` is correctly rounded.
    pub fn fma_native(&self) -> bool {
        self.fma_mismatches == 0
    }

    /// Whether the device's own f64 gave the host's bits in the probes.
    pub fn f64_exact(&self) -> bool {
        self.f64_mismatches == Some(0) && self.f64_wide_mismatches == Some(0)
    }

    /// Whether the kernels with f64 sums (sum, softmax, normalisation, average pooling)
    /// run on the device: with its own f64, or with the integer binary64 where that is
    /// in use and gave the host's bits (else they run on the host).
    pub fn sums_on_device(&self) -> bool {
        if self.int_f64 {
            self.int_f64_mismatches == 0
        } else {
            self.f64_exact()
        }
    }
}

impl fmt::Display for Findings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "probes of {} inputs each:", self.samples)?;
        writeln!(
            f,
            "  a*b+c as written: {} (mismatches vs unfused host: {})",
            if self.contracts_mul_add {
                "contracted into an FMA"
            } else {
                "kept separate"
            },
            self.mul_add_mismatches
        )?;
        writeln!(
            f,
            "  a*b+c with the product behind a barrier: {} mismatches",
            self.barrier_mismatches
        )?;
        writeln!(
            f,
            "  fma: {} mismatches vs the fused host result, {} vs the unfused one",
            self.fma_mismatches, self.fma_unfused_mismatches
        )?;
        match self.fma_emulated_mismatches {
            Some(n) => writeln!(f, "  fma emulated in f64: {n} mismatches")?,
            None => writeln!(f, "  fma emulated in f64: not available (no f64)")?,
        }
        writeln!(
            f,
            "  fma emulated in integers: {} mismatches{}",
            self.fma_int_mismatches,
            if !self.fma_native() && self.int_f64 {
                " (fast mode's fused multiply-add)"
            } else {
                ""
            }
        )?;
        writeln!(f, "  division: {} mismatches", self.div_mismatches)?;
        writeln!(f, "  sqrt: {} mismatches", self.sqrt_mismatches)?;
        writeln!(
            f,
            "  integer division: {}, integer sqrt: {} mismatches",
            self.soft_div_mismatches, self.soft_sqrt_mismatches
        )?;
        writeln!(
            f,
            "  integer binary64 (sums rounded to f32): {} mismatches",
            self.int_f64_mismatches
        )?;
        let why = |forced: bool| {
            if forced {
                "forced by the environment"
            } else {
                "the device's own fail the probes"
            }
        };
        if self.soft_div_sqrt {
            writeln!(
                f,
                "  kernels divide and take square roots in integers ({})",
                why(self.soft_div_sqrt_forced)
            )?;
        } else {
            writeln!(f, "  kernels use the device's division and square root")?;
        }
        if self.int_f64 {
            writeln!(
                f,
                "  f64 sums in integer binary64 ({}; {})",
                if self.int_f64_forced {
                    "forced by the environment"
                } else {
                    "the device's f64 is missing or fails the probes"
                },
                if self.sums_on_device() {
                    "on the device"
                } else {
                    "failed its probe: on the host"
                }
            )?;
        } else if self.f64_exact() {
            writeln!(f, "  f64 sums in the device's f64")?;
        } else {
            writeln!(f, "  f64 sums on the host")?;
        }
        writeln!(
            f,
            "  mul: {}, add: {} mismatches",
            self.mul_mismatches, self.add_mismatches
        )?;
        writeln!(f, "  subnormals flushed: {}", self.subnormals_flushed)?;
        writeln!(
            f,
            "  a loop of 100000 iterations ran {} (the kernels split longer loops)",
            self.loop_of_100000_ran
        )?;
        match self.f64_mismatches {
            Some(n) => writeln!(
                f,
                "  f64 add and rounding to f32: {n} mismatches; with exact products and out-of-range values: {} mismatches",
                self.f64_wide_mismatches.unwrap_or(0)
            )?,
            None => writeln!(f, "  f64: not offered by the device")?,
        }
        for e in &self.examples {
            writeln!(f, "  {e}")?;
        }
        Ok(())
    }
}

/// A xorshift generator for the probe inputs (fixed seed: the same inputs every run).
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 16) as u32
    }
}

/// Edge values: zeros, ones, infinities, NaN, the subnormal and normal boundaries.
const EDGES: [u32; 16] = [
    0x0000_0000,
    0x8000_0000,
    0x3f80_0000,
    0xbf80_0000,
    0x7f80_0000,
    0xff80_0000,
    0x7fc0_0000,
    0x0000_0001,
    0x8000_0001,
    0x007f_ffff,
    0x0080_0000,
    0x0040_0000,
    0x7f7f_ffff,
    0x3f80_0001,
    0x4040_0000,
    0x3400_0000,
];

/// Fused multiply-adds whose exact value lies just off a midpoint of two f32 values by
/// less than half an f64 unit, so that rounding first to f64 and then to f32 gives the
/// wrong neighbour: below and above the midpoint, at 1, at the overflow threshold, in the
/// subnormal range, each with both signs.
pub fn double_rounding_cases() -> Vec<[f32; 3]> {
    let p2 = |e: i32| 2f32.powi(e);
    let mut v = vec![
        // 2^-24 (1 - 2^-30) + (1 + 2^-23): just below 1 + 2^-23 + 2^-24.
        [p2(-24) * (1.0 + p2(-15)), 1.0 - p2(-15), 1.0 + p2(-23)],
        // 2^-24 (1 + 2^-36) + (1 + 2^-22): just above 1 + 2^-22 + 2^-24.
        [
            p2(-24) * (1.0 + p2(-12)),
            1.0 - p2(-12) + p2(-24),
            1.0 + p2(-22),
        ],
        // Just below the midpoint between the largest f32 and 2^128.
        [p2(103) * (1.0 + p2(-15)), 1.0 - p2(-15), f32::MAX],
        // Subnormal results: 2^-149 (1 ± tiny) + 2^-149 · 3 / 2 …
        [
            p2(-126) * (1.0 + p2(-15)),
            p2(-24) * (1.0 - p2(-15)),
            p2(-148),
        ],
        [
            p2(-126) * (1.0 + p2(-12)),
            p2(-24) * (1.0 - p2(-12) + p2(-24)),
            p2(-147),
        ],
    ];
    let negated: Vec<[f32; 3]> = v.iter().map(|&[a, b, c]| [-a, b, -c]).collect();
    v.extend(negated);
    v
}

fn inputs() -> (Vec<u32>, Vec<u32>, Vec<u32>) {
    let mut r = XorShift(0x9e37_79b9_7f4a_7c15);
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    for [x, y, z] in double_rounding_cases() {
        a.push(x.to_bits());
        b.push(y.to_bits());
        c.push(z.to_bits());
    }
    for &x in &EDGES {
        for &y in &EDGES {
            a.push(x);
            b.push(y);
            c.push(r.next());
        }
    }
    for i in 0..RANDOM {
        let (x, y, z) = (r.next(), r.next(), r.next());
        if i % 4 == 0 {
            // Subnormal operands and results: small exponents.
            a.push(x & 0x807f_ffff);
            b.push((y & 0x81ff_ffff) | 0x3f00_0000);
            c.push(z & 0x80ff_ffff);
        } else if i % 4 == 1 {
            // Near-cancelling sums and products of similar magnitude.
            a.push(x & 0xbfff_ffff | 0x3f00_0000);
            b.push(y & 0xbfff_ffff | 0x3f00_0000);
            c.push((z & 0x807f_ffff) | 0x3f80_0000);
        } else {
            a.push(x);
            b.push(y);
            c.push(z);
        }
    }
    (a, b, c)
}

fn same(a: u32, b: u32) -> bool {
    let (x, y) = (f32::from_bits(a), f32::from_bits(b));
    a == b || (x.is_nan() && y.is_nan())
}

fn is_subnormal(bits: u32) -> bool {
    bits & 0x7f80_0000 == 0 && bits & 0x007f_ffff != 0
}

/// Runs every probe on `gpu`, then sets which portable paths its kernels use (the
/// integer division and square root where the device's own differ from the host's, the
/// integer binary64 where its f64 does, or where `over` forces either).
pub(crate) fn run(gpu: &Gpu, over: Overrides) -> Result<Findings> {
    let (a, b, c) = inputs();
    let n = a.len();
    let mut flushed = 0;
    let mut examples = Vec::new();
    let mut probe = |what: u32,
                     a: &[u32],
                     b: &[u32],
                     c: &[u32],
                     host: &dyn Fn(f32, f32, f32) -> f32|
     -> Result<usize> {
        let mut out = vec![0u32; a.len()];
        gpu.run(
            Kernel::Probe,
            false,
            &[Dispatch::new(vec![0, a.len() as u32, what], a.len())],
            &[a, b, c],
            0,
            &mut out,
        )?;
        let mut bad = 0;
        for i in 0..a.len() {
            let want = host(
                f32::from_bits(a[i]),
                f32::from_bits(b[i]),
                f32::from_bits(c[i]),
            )
            .to_bits();
            if !same(out[i], want) {
                if bad < 4 {
                    examples.push(format!(
                        "probe {what}: a {:#010x} b {:#010x} c {:#010x}: device {:#010x}, host {want:#010x}",
                        a[i], b[i], c[i], out[i]
                    ));
                }
                bad += 1;
                if is_subnormal(want) && out[i] & 0x7fff_ffff == 0 {
                    flushed += 1;
                }
            }
        }
        Ok(bad)
    };
    // The contraction probe on its own: (1 + 2^-23)^2 - (1 + 2^-22).
    let one = [0x3f80_0001u32];
    let minus = [0xbf80_0002u32];
    let mut out = [0u32];
    gpu.run(
        Kernel::Probe,
        false,
        &[Dispatch::new(vec![0, 1, 0], 1)],
        &[&one, &one, &minus],
        0,
        &mut out,
    )?;
    let contracts_mul_add = out[0] != 0;
    let mut ran = [0u32];
    gpu.run(
        Kernel::Probe,
        false,
        &[Dispatch::new(vec![0, 1, 10], 1)],
        &[&[100_000], &[0], &[0]],
        0,
        &mut ran,
    )?;
    let mul_add_mismatches = probe(0, &a, &b, &c, &|x, y, z| x * y + z)?;
    let barrier_mismatches = probe(7, &a, &b, &c, &|x, y, z| x * y + z)?;
    let fma_mismatches = probe(3, &a, &b, &c, &|x, y, z| x.mul_add(y, z))?;
    let fma_unfused_mismatches = probe(3, &a, &b, &c, &|x, y, z| x * y + z)?;
    let div_mismatches = probe(1, &a, &b, &c, &|x, y, _| x / y)?;
    let sqrt_mismatches = probe(2, &a, &b, &c, &|x, _, _| x.sqrt())?;
    let mul_mismatches = probe(4, &a, &b, &c, &|x, y, _| x * y)?;
    let add_mismatches = probe(5, &a, &b, &c, &|x, y, _| x + y)?;
    let f64_mismatches = if gpu.summary.shader_f64 {
        // A tiny second term: the f64 sum is exact and its rounding to f32 is tested.
        let small: Vec<u32> = b
            .iter()
            .map(|&y| (f32::from_bits(y) * 2f32.powi(-30)).to_bits())
            .collect();
        Some(probe(6, &a, &small, &c, &|x, y, _| {
            (f64::from(x) + f64::from(y)) as f32
        })?)
    } else {
        None
    };
    let f64_wide_mismatches = if gpu.summary.shader_f64 {
        Some(probe(9, &a, &b, &c, &|x, y, z| {
            (f64::from(x) * f64::from(y) + f64::from(z)) as f32
        })?)
    } else {
        None
    };
    let fma_emulated_mismatches = if gpu.summary.shader_f64 {
        Some(probe(8, &a, &b, &c, &|x, y, z| x.mul_add(y, z))?)
    } else {
        None
    };
    let soft_div_mismatches = probe(11, &a, &b, &c, &|x, y, _| x / y)?;
    let fma_int_mismatches = probe(15, &a, &b, &c, &|x, y, z| x.mul_add(y, z))?;
    let soft_sqrt_mismatches = probe(12, &a, &b, &c, &|x, _, _| x.sqrt())?;
    let small: Vec<u32> = b
        .iter()
        .map(|&y| (f32::from_bits(y) * 2f32.powi(-30)).to_bits())
        .collect();
    let int_f64_mismatches = probe(13, &a, &small, &c, &|x, y, _| {
        (f64::from(x) + f64::from(y)) as f32
    })? + probe(13, &a, &b, &c, &|x, y, _| {
        (f64::from(x) + f64::from(y)) as f32
    })? + probe(14, &a, &b, &c, &|x, y, z| {
        (f64::from(x) * f64::from(y) + f64::from(z)) as f32
    })?;
    use std::sync::atomic::Ordering::SeqCst;
    gpu.fma_native.store(fma_mismatches == 0, SeqCst);
    let soft_div_sqrt = over.soft_div_sqrt || div_mismatches != 0 || sqrt_mismatches != 0;
    gpu.soft_div_sqrt.store(soft_div_sqrt, SeqCst);
    let f64_exact = f64_mismatches == Some(0) && f64_wide_mismatches == Some(0);
    let int_f64 = over.int_f64 || !f64_exact;
    gpu.int_f64.store(int_f64, SeqCst);
    Ok(Findings {
        samples: n,
        contracts_mul_add,
        mul_add_mismatches,
        barrier_mismatches,
        fma_mismatches,
        fma_unfused_mismatches,
        fma_emulated_mismatches,
        div_mismatches,
        sqrt_mismatches,
        mul_mismatches,
        add_mismatches,
        subnormals_flushed: flushed,
        loop_of_100000_ran: ran[0],
        examples,
        f64_mismatches,
        f64_wide_mismatches,
        soft_div_mismatches,
        soft_sqrt_mismatches,
        fma_int_mismatches,
        int_f64_mismatches,
        soft_div_sqrt,
        soft_div_sqrt_forced: over.soft_div_sqrt,
        int_f64,
        int_f64_forced: over.int_f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The crafted cases do what they are for: rounding through f64 gives another
    /// result than the fused multiply-add, so the probe of the emulation would see a
    /// naive one fail.
    #[test]
    fn double_rounding_cases_defeat_a_naive_emulation() {
        let mut defeated = 0;
        for [a, b, c] in double_rounding_cases() {
            let naive = (f64::from(a) * f64::from(b) + f64::from(c)) as f32;
            if naive.to_bits() != a.mul_add(b, c).to_bits() {
                defeated += 1;
            }
        }
        assert!(defeated >= 6, "only {defeated} cases defeat rounding twice");
    }

    fn clean() -> Findings {
        Findings {
            samples: 100,
            contracts_mul_add: false,
            mul_add_mismatches: 0,
            barrier_mismatches: 0,
            fma_mismatches: 0,
            fma_unfused_mismatches: 40,
            fma_emulated_mismatches: Some(0),
            div_mismatches: 0,
            sqrt_mismatches: 0,
            mul_mismatches: 0,
            add_mismatches: 0,
            subnormals_flushed: 0,
            f64_mismatches: Some(0),
            f64_wide_mismatches: Some(0),
            loop_of_100000_ran: 100_000,
            examples: Vec::new(),
            soft_div_mismatches: 0,
            soft_sqrt_mismatches: 0,
            fma_int_mismatches: 0,
            int_f64_mismatches: 0,
            soft_div_sqrt: false,
            soft_div_sqrt_forced: false,
            int_f64: false,
            int_f64_forced: false,
        }
    }

    /// A device that lacks something is refused with a message naming it; fast mode
    /// alone needs the fused multiply-add.
    #[test]
    fn what_is_missing_is_named() {
        assert!(clean().missing(ComputeMode::Exact).is_empty());
        assert!(clean().missing(ComputeMode::Fast).is_empty());
        let f = Findings {
            div_mismatches: 7,
            subnormals_flushed: 3,
            ..clean()
        };
        let m = f.missing(ComputeMode::Exact).join(", ");
        assert!(m.contains("correctly rounded division (7 of 100"), "{m}");
        assert!(m.contains("preserved subnormals (3 of 100"), "{m}");
        let f = Findings {
            fma_mismatches: 9,
            fma_emulated_mismatches: None,
            ..clean()
        };
        assert!(f.missing(ComputeMode::Exact).is_empty());
        let m = f.missing(ComputeMode::Fast).join(", ");
        assert!(
            m.contains("fused multiply-add (9 of 100 inputs differ) or f64"),
            "{m}"
        );
        let f = Findings {
            fma_mismatches: 9,
            fma_emulated_mismatches: Some(2),
            ..clean()
        };
        assert!(f.missing(ComputeMode::Fast)[0].contains("emulation's: 2 of 100"));
        let f = Findings {
            loop_of_100000_ran: 1000,
            ..clean()
        };
        assert!(f.missing(ComputeMode::Exact)[0].contains("a loop of 100000 ran 1000"));
        // A device whose own fma is correct needs no emulation.
        let f = Findings {
            fma_emulated_mismatches: Some(5),
            ..clean()
        };
        assert!(f.missing(ComputeMode::Fast).is_empty());
    }

    /// With the integer division and square root in use, the device's own no longer
    /// count, but the integer ones do; the sums leave the device only when the path
    /// they use failed its probe.
    #[test]
    fn portable_paths_change_what_is_needed() {
        let f = Findings {
            div_mismatches: 7,
            sqrt_mismatches: 2,
            soft_div_sqrt: true,
            ..clean()
        };
        assert!(f.missing(ComputeMode::Exact).is_empty());
        let f = Findings {
            soft_sqrt_mismatches: 1,
            soft_div_sqrt: true,
            ..clean()
        };
        let m = f.missing(ComputeMode::Exact).join(", ");
        assert!(m.contains("integer square root (1 of 100"), "{m}");
        let f = Findings {
            f64_mismatches: None,
            f64_wide_mismatches: None,
            int_f64: true,
            ..clean()
        };
        assert!(f.sums_on_device());
        let f = Findings {
            int_f64_mismatches: 3,
            ..f
        };
        assert!(!f.sums_on_device());
        assert!(f.to_string().contains("failed its probe: on the host"));
        let f = Findings {
            f64_mismatches: Some(4),
            ..clean()
        };
        assert!(!f.sums_on_device());
        // Without exact f64, fast mode's fused multiply-add is the integer one.
        let f = Findings {
            fma_mismatches: 9,
            fma_emulated_mismatches: None,
            f64_mismatches: None,
            f64_wide_mismatches: None,
            int_f64: true,
            ..clean()
        };
        assert!(f.missing(ComputeMode::Fast).is_empty());
        let f = Findings {
            fma_int_mismatches: 2,
            ..f
        };
        let m = f.missing(ComputeMode::Fast).join(", ");
        assert!(m.contains("integer emulation's: 2 of 100"), "{m}");
        assert!(f.missing(ComputeMode::Exact).is_empty());
    }
}
