//! Exhaustive accuracy test of the exact transcendental functions over all 2^32 f32
//! inputs against f64 references (std `exp`/`ln`/`tanh`, `libm::erf`/`libm::erfc`).
//!
//! The error of a result `y` for a reference `r` is |y − r| / ulp(r32), where r32 is
//! `r` rounded to f32 and ulp(r32) is the spacing of f32 numbers at |r32| (2^−149 for
//! subnormals and zero). For the two GELU derivatives, whose reference passes through
//! zero, the ulp is taken at max(|r|, s), where s is the sum of the magnitudes of the two
//! terms of the derivative (see `docs/transcendentals.md`).
//!
//! The bounds asserted here are the ones documented in `docs/transcendentals.md`. Each
//! test also checks that NaN inputs give exactly the canonical NaN and that the special
//! values are exact. Built without optimisation the tests only print that they need
//! `--release` (the exhaustive scan would take hours).
//!
//! Not part of `cargo test --workspace`: the test needs the `exhaustive` feature and runs,
//! with its twin, as
//! `cargo test -p exactgrad-backends --release --features exhaustive --test exhaustive_transcendentals --test exhaustive_vector`.

use exactgrad_backends::transcendental as tr;
use std::time::Instant;

const CANONICAL_NAN: u32 = 0x7FC0_0000;
/// Distance between scanned bit patterns: 1, every input.
const STEP: u32 = 1;
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4; // sqrt(2/pi)

/// Documented worst-case bounds, in ulp.
const BOUND_EXP: f64 = 1.0;
const BOUND_LOG: f64 = 1.0;
const BOUND_TANH: f64 = 1.5;
const BOUND_SIGMOID: f64 = 2.0;
const BOUND_ERF: f64 = 1.5;
const BOUND_GELU_ERF: f64 = 4.0;
const BOUND_GELU_TANH: f64 = 3.0;
const BOUND_GELU_ERF_GRAD: f64 = 3.0;
const BOUND_GELU_TANH_GRAD: f64 = 4.5;

fn needs_release(name: &str) -> bool {
    if cfg!(debug_assertions) {
        println!("{name}: the exhaustive scan needs --release (skipped in debug builds)");
        true
    } else {
        false
    }
}

/// Spacing of f32 numbers at the finite non-negative `a`.
fn ulp_of(a: f32) -> f64 {
    let e = u64::from(a.to_bits() >> 23).max(1);
    // 2^(e - 150) built from its f64 exponent field
    f64::from_bits((e + 1023 - 150) << 52)
}

/// Error of `y` in ulp against the reference `r`, the ulp taken at max(|r|, scale).
fn ulp_error(y: f32, r: f64, scale: f64) -> f64 {
    if r.is_nan() {
        return if y.to_bits() == CANONICAL_NAN {
            0.0
        } else {
            f64::INFINITY
        };
    }
    let r32 = r as f32;
    if r32.is_infinite() || y.is_infinite() || y.is_nan() {
        return if y == r32 { 0.0 } else { f64::INFINITY };
    }
    let at = r.abs().max(scale) as f32;
    (f64::from(y) - r).abs() / ulp_of(at)
}

#[derive(Clone, Copy, Debug)]
struct Worst {
    ulp: f64,
    x: f32,
    y: f32,
    r: f64,
}

/// Scans the bit patterns `lo..=hi` (non-NaN ones against `reference`, which returns the
/// reference value and the ulp scale; NaN ones must give the canonical NaN). The function
/// is evaluated over blocks of inputs in a plain loop, which the compiler may vectorise:
/// that changes nothing in the results, the operations being IEEE per element.
fn scan(lo: u32, hi: u32, f: impl Fn(f32) -> f32, reference: impl Fn(f64) -> (f64, f64)) -> Worst {
    const N: usize = 4096;
    let step = u64::from(STEP);
    let mut w = Worst {
        ulp: -1.0,
        x: 0.0,
        y: 0.0,
        r: 0.0,
    };
    let mut xs = [0f32; N];
    let mut ys = [0f32; N];
    let mut start = u64::from(lo);
    let end = u64::from(hi) + 1;
    while start < end {
        let n = (end - start).div_ceil(step).min(N as u64) as usize;
        for (i, x) in xs[..n].iter_mut().enumerate() {
            *x = f32::from_bits((start + i as u64 * step) as u32);
        }
        for (y, &x) in ys[..n].iter_mut().zip(&xs[..n]) {
            *y = f(x);
        }
        for (&x, &y) in xs[..n].iter().zip(&ys[..n]) {
            let e = if x.is_nan() {
                if y.to_bits() == CANONICAL_NAN {
                    0.0
                } else {
                    f64::INFINITY
                }
            } else {
                let (r, s) = reference(f64::from(x));
                ulp_error(y, r, s)
            };
            if e > w.ulp || e.is_nan() {
                w = Worst {
                    ulp: e,
                    x,
                    y,
                    r: 0.0,
                };
            }
        }
        start += n as u64 * step;
    }
    if !w.x.is_nan() {
        w.r = reference(f64::from(w.x)).0;
    }
    w
}

fn report(name: &str, half: &str, w: Worst, bound: f64, t: Instant) {
    println!(
        "{name} {half}: worst {:.4} ulp at x = {:e} ({:#010x}): got {:e}, reference {:e} [{:.1} s]",
        w.ulp,
        w.x,
        w.x.to_bits(),
        w.y,
        w.r,
        t.elapsed().as_secs_f64()
    );
    assert!(
        w.ulp <= bound,
        "{name} {half}: worst error {} ulp exceeds the documented bound {bound}",
        w.ulp
    );
}

const POS: (u32, u32, &str) = (0x0000_0000, 0x7FFF_FFFF, "x >= +0");
const NEG: (u32, u32, &str) = (0x8000_0000, 0xFFFF_FFFF, "x <= -0");

fn run(
    name: &str,
    half: (u32, u32, &str),
    bound: f64,
    f: impl Fn(f32) -> f32,
    reference: impl Fn(f64) -> (f64, f64),
) {
    if needs_release(name) {
        return;
    }
    let t = Instant::now();
    let w = scan(half.0, half.1, f, reference);
    report(name, half.2, w, bound, t);
}

/// For an odd function: f(−x) has exactly the bits of −f(x) for every x ≥ +0, so the
/// error over the negative half equals the error over the positive half.
fn check_odd(name: &str, f: impl Fn(f32) -> f32) {
    if needs_release(name) {
        return;
    }
    const N: usize = 4096;
    let t = Instant::now();
    let (mut xs, mut yp, mut yn) = ([0f32; N], [0f32; N], [0f32; N]);
    let mut start = 0u64;
    while start < 0x8000_0000 {
        for (i, x) in xs.iter_mut().enumerate() {
            *x = f32::from_bits((start + i as u64 * u64::from(STEP)) as u32);
        }
        for ((p, n), &x) in yp.iter_mut().zip(yn.iter_mut()).zip(&xs) {
            *p = f(x);
            *n = f(-x);
        }
        for ((&x, &p), &n) in xs.iter().zip(&yp).zip(&yn) {
            let ok = if x.is_nan() {
                p.to_bits() == CANONICAL_NAN && n.to_bits() == CANONICAL_NAN
            } else {
                n.to_bits() == p.to_bits() ^ 0x8000_0000
            };
            assert!(ok, "{name}: f(-x) != -f(x) at x = {x:e}: {p:e} vs {n:e}");
        }
        start += N as u64 * u64::from(STEP);
    }
    println!(
        "{name} x <= -0: f(-x) == -f(x) bit for bit for all x [{:.1} s]",
        t.elapsed().as_secs_f64()
    );
}

fn exact(r: f64) -> (f64, f64) {
    (r, 0.0)
}

// The references below return early, without calling the f64 functions, where the
// value returned is exactly what the f64 formula itself gives (saturated results), and
// the GELU references use their Taylor polynomials for |x| < 2^-30, where the omitted
// terms are below 2^-58 relative. This keeps the scan fast.

/// |x| < 2^-30: the GELU references are their first-order Taylor polynomials.
const TINY: f64 = 9.313_225_746_154_785e-10;
const PHI0: f64 = 0.398_942_280_401_432_7; // 1/sqrt(2 pi)

/// e^x, taken as 0 below −110: there e^x < 2^−158 rounds to 0 in f32 and the value
/// left out is below 2^−9 ulp of the smallest subnormal (f64 `exp` is slow on its
/// subnormal and underflowing results).
fn exp_ref(x: f64) -> f64 {
    if x < -110.0 {
        return 0.0;
    }
    x.exp()
}

/// ln x; NaN for x < 0 without calling `ln` (which is slow on invalid arguments).
fn log_ref(x: f64) -> f64 {
    if x < 0.0 {
        return f64::NAN;
    }
    x.ln()
}

fn tanh_ref(x: f64) -> f64 {
    if x.abs() > 20.0 {
        // 1 − tanh(20) = 8.5e−18 < ulp(1)/2 in f64
        return x.signum();
    }
    x.tanh()
}

fn sigmoid_ref(x: f64) -> f64 {
    if x > 40.0 {
        return 1.0; // e^−40 < ulp(1)/2 in f64
    }
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = exp_ref(x);
        e / (1.0 + e)
    }
}

/// Φ(x) in f64 via erfc (relatively accurate in the lower tail).
fn phi_cdf(x: f64) -> f64 {
    0.5 * libm::erfc(-x * std::f64::consts::FRAC_1_SQRT_2)
}

fn gelu_erf_ref(x: f64) -> f64 {
    // Φ(x) is 1.0 in f64 above 10 and erfc underflows to 0 below −40
    if x > 10.0 {
        return x;
    }
    if x < -40.0 {
        return -0.0;
    }
    if x.abs() < TINY {
        return x * (0.5 + x * PHI0);
    }
    x * phi_cdf(x)
}

fn gelu_erf_grad_ref(x: f64) -> (f64, f64) {
    // Φ(x) + xφ(x) is 1.0 in f64 above 10; both terms underflow to 0 below −40
    if x > 10.0 {
        return (1.0, 1.0);
    }
    if x < -40.0 {
        return (-0.0, 0.0);
    }
    if x.abs() < TINY {
        return (0.5 + 2.0 * x * PHI0, 0.5 + x * PHI0 + (x * PHI0).abs());
    }
    let pdf = (-0.5 * x * x).exp() * PHI0;
    let cdf = phi_cdf(x);
    (cdf + x * pdf, cdf + (x * pdf).abs())
}

/// (σ(V), 1 − σ(V), V'(x)) for V = 2·√(2/π)·(x + 0.044715·x³), x clamped to ±30.
fn gelu_tanh_parts(x: f64) -> (f64, f64, f64) {
    let x = x.clamp(-30.0, 30.0);
    let v = 2.0 * SQRT_2_OVER_PI * (x + 0.044715 * x * x * x);
    let dv = 2.0 * SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * x * x);
    // one exponential, of −|V|: each of σ and 1 − σ is a quotient without cancellation
    let e = (-v.abs()).exp();
    let d = 1.0 + e;
    if v >= 0.0 {
        (1.0 / d, e / d, dv)
    } else {
        (e / d, 1.0 / d, dv)
    }
}

fn gelu_tanh_ref(x: f64) -> f64 {
    // σ(V) is 1.0 in f64 above 10 (V > 87) and 0 below −30 (V < −1900)
    if x > 10.0 {
        return x;
    }
    if x < -40.0 {
        return -0.0;
    }
    if x.abs() < TINY {
        // σ(V) = 1/2 + V/4 + O(V³), V = 2√(2/π)·x + O(x³)
        return x * (0.5 + 0.5 * SQRT_2_OVER_PI * x);
    }
    x * gelu_tanh_parts(x).0
}

fn gelu_tanh_grad_ref(x: f64) -> (f64, f64) {
    if x > 10.0 {
        return (1.0, 1.0);
    }
    if x < -40.0 {
        return (-0.0, 0.0);
    }
    if x.abs() < TINY {
        let t = 0.5 * SQRT_2_OVER_PI * x; // x·σ(1−σ)·V' = V/4 + O(x³) = σ − 1/2 + O(x³)
        return (0.5 + 2.0 * t, 0.5 + t + t.abs());
    }
    let (s, sm, dv) = gelu_tanh_parts(x);
    let xc = x.clamp(-30.0, 30.0);
    let t = xc * s * sm * dv;
    (s + t, s + t.abs())
}

// ---------------------------------------------------------------- exp

#[test]
fn exhaustive_exp_pos() {
    run("exp", POS, BOUND_EXP, tr::exp, |x| exact(exp_ref(x)));
}
#[test]
fn exhaustive_exp_neg() {
    run("exp", NEG, BOUND_EXP, tr::exp, |x| exact(exp_ref(x)));
}

// ---------------------------------------------------------------- log

#[test]
fn exhaustive_log_pos() {
    run("log", POS, BOUND_LOG, tr::log, |x| exact(log_ref(x)));
}
#[test]
fn exhaustive_log_neg() {
    // log(-0) = -inf, log(x < 0) = NaN (canonical)
    run("log", NEG, BOUND_LOG, tr::log, |x| exact(log_ref(x)));
}

// ---------------------------------------------------------------- tanh

#[test]
fn exhaustive_tanh_pos() {
    run("tanh", POS, BOUND_TANH, tr::tanh, |x| exact(tanh_ref(x)));
}
#[test]
fn exhaustive_tanh_neg() {
    check_odd("tanh", tr::tanh);
}

// ---------------------------------------------------------------- sigmoid

#[test]
fn exhaustive_sigmoid_pos() {
    run("sigmoid", POS, BOUND_SIGMOID, tr::sigmoid, |x| {
        exact(sigmoid_ref(x))
    });
}
#[test]
fn exhaustive_sigmoid_neg() {
    run("sigmoid", NEG, BOUND_SIGMOID, tr::sigmoid, |x| {
        exact(sigmoid_ref(x))
    });
}

// ---------------------------------------------------------------- erf

#[test]
fn exhaustive_erf_pos() {
    run("erf", POS, BOUND_ERF, tr::erf, |x| exact(libm::erf(x)));
}
#[test]
fn exhaustive_erf_neg() {
    check_odd("erf", tr::erf);
}

// ---------------------------------------------------------------- GELU

#[test]
fn exhaustive_gelu_erf_pos() {
    run("gelu_erf", POS, BOUND_GELU_ERF, tr::gelu_erf, |x| {
        exact(gelu_erf_ref(x))
    });
}
#[test]
fn exhaustive_gelu_erf_neg() {
    run("gelu_erf", NEG, BOUND_GELU_ERF, tr::gelu_erf, |x| {
        exact(gelu_erf_ref(x))
    });
}
#[test]
fn exhaustive_gelu_tanh_pos() {
    run("gelu_tanh", POS, BOUND_GELU_TANH, tr::gelu_tanh, |x| {
        exact(gelu_tanh_ref(x))
    });
}
#[test]
fn exhaustive_gelu_tanh_neg() {
    run("gelu_tanh", NEG, BOUND_GELU_TANH, tr::gelu_tanh, |x| {
        exact(gelu_tanh_ref(x))
    });
}
#[test]
fn exhaustive_gelu_erf_grad_pos() {
    run(
        "gelu_erf_grad",
        POS,
        BOUND_GELU_ERF_GRAD,
        tr::gelu_erf_grad,
        gelu_erf_grad_ref,
    );
}
#[test]
fn exhaustive_gelu_erf_grad_neg() {
    run(
        "gelu_erf_grad",
        NEG,
        BOUND_GELU_ERF_GRAD,
        tr::gelu_erf_grad,
        gelu_erf_grad_ref,
    );
}
#[test]
fn exhaustive_gelu_tanh_grad_pos() {
    run(
        "gelu_tanh_grad",
        POS,
        BOUND_GELU_TANH_GRAD,
        tr::gelu_tanh_grad,
        gelu_tanh_grad_ref,
    );
}
#[test]
fn exhaustive_gelu_tanh_grad_neg() {
    run(
        "gelu_tanh_grad",
        NEG,
        BOUND_GELU_TANH_GRAD,
        tr::gelu_tanh_grad,
        gelu_tanh_grad_ref,
    );
}
