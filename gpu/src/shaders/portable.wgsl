// Correctly rounded f32 division and square root from 32-bit integer operations only
// (docs/gpu.md §5): the operands' bit patterns are decoded, the quotient or root is
// computed digit by digit in u32 (long division, the restoring square root), and the
// result is rounded to nearest, ties to even, with the sticky bit of the remainder,
// subnormal results and overflow as IEEE 754 says. No loop: each digit is a call, so no
// loop limit of a driver (llvmpipe cuts loops at 65,535 iterations, counting those of the
// loops around them) can shorten the computation. `f_div` and `f_sqrt` are what the
// kernels call: the device's own operation, or these when `SOFT_DIV_SQRT` (set by the
// host from the probes or `EXACTGRAD_GPU_SOFT_DIV_SQRT`).

// The quiet NaN of `bits` (a NaN keeps its payload, as IEEE hardware does).
fn quiet_nan(bits: u32) -> f32 {
    return bitcast<f32>(bits | 0x00400000u);
}

// The value (q + f)·2^s, with 2^25 ≤ q < 2^26 and 0 < f < 1 when `sticky` (f = 0 else),
// rounded to the nearest f32, ties to even, with sign bit `sign`: a subnormal result
// rounds once at its own precision, a result beyond the largest finite value is ±∞.
fn pack_rn(sign: u32, q: u32, sticky: bool, s: i32) -> f32 {
    // The biased exponent of q's leading bit.
    let e = s + 152;
    var shift = 2u;
    if e < 1 {
        shift = u32(min(3 - e, 27));
    }
    let kept = q >> shift;
    let half = (q >> (shift - 1u)) & 1u;
    let below = (q & ((1u << (shift - 1u)) - 1u)) != 0u || sticky;
    var r = kept;
    if half == 1u && (below || (kept & 1u) == 1u) {
        r = r + 1u;
    }
    if e < 1 {
        // Subnormal (a carry into bit 23 gives the smallest normal's encoding).
        return bitcast<f32>(sign | r);
    }
    if e >= 255 {
        return bitcast<f32>(sign | 0x7f800000u);
    }
    // r holds the hidden bit (2^23 ≤ r ≤ 2^24), which adds one to the exponent field; a
    // rounding carry to 2^24 adds another, up to the encoding of ∞.
    let bits = (u32(e - 1) << 23u) + r;
    return bitcast<f32>(sign | min(bits, 0x7f800000u));
}

// A finite non-zero magnitude `bits` as m·2^e with 2^23 ≤ m < 2^24 (subnormals
// normalised).
struct Unpacked {
    m: u32,
    e: i32,
}

fn unpack32(bits: u32) -> Unpacked {
    let f = bits >> 23u;
    let m = bits & 0x007fffffu;
    if f == 0u {
        let sh = countLeadingZeros(m) - 8u;
        return Unpacked(m << sh, -149 - i32(sh));
    }
    return Unpacked(m | 0x00800000u, i32(f) - 150);
}

// One digit of the long division: (quotient, remainder) with the divisor `d`.
fn div_digit(s: vec2<u32>, d: u32) -> vec2<u32> {
    var q = s.x << 1u;
    var r = s.y;
    if r >= d {
        r = r - d;
        q = q | 1u;
    }
    return vec2<u32>(q, r << 1u);
}

fn div_digits2(s: vec2<u32>, d: u32) -> vec2<u32> {
    return div_digit(div_digit(s, d), d);
}

fn div_digits8(s: vec2<u32>, d: u32) -> vec2<u32> {
    return div_digits2(div_digits2(div_digits2(div_digits2(s, d), d), d), d);
}

// `a / b` correctly rounded (IEEE 754 binary32, round to nearest even).
fn soft_div(a: f32, b: f32) -> f32 {
    let x = bitcast<u32>(a);
    let y = bitcast<u32>(b);
    let sign = (x ^ y) & 0x80000000u;
    let ax = x & 0x7fffffffu;
    let ay = y & 0x7fffffffu;
    if ax > 0x7f800000u { return quiet_nan(x); }
    if ay > 0x7f800000u { return quiet_nan(y); }
    if ax == 0x7f800000u {
        if ay == 0x7f800000u { return bitcast<f32>(0x7fc00000u); }
        return bitcast<f32>(sign | 0x7f800000u);
    }
    if ay == 0x7f800000u { return bitcast<f32>(sign); }
    if ay == 0u {
        if ax == 0u { return bitcast<f32>(0x7fc00000u); }
        return bitcast<f32>(sign | 0x7f800000u);
    }
    if ax == 0u { return bitcast<f32>(sign); }
    let ua = unpack32(ax);
    let ub = unpack32(ay);
    var ma = ua.m;
    var e = ua.e - ub.e;
    if ma < ub.m {
        ma = ma << 1u;
        e = e - 1;
    }
    // ma / mb in [1, 2): 26 digits, q = ⌊ma / mb · 2^25⌋, the remainder below 2·mb.
    var s = vec2<u32>(0u, ma);
    s = div_digits8(s, ub.m);
    s = div_digits8(s, ub.m);
    s = div_digits8(s, ub.m);
    s = div_digits2(s, ub.m);
    return pack_rn(sign, s.x, s.y != 0u, e - 25);
}

// One digit of the restoring square root: (root, remainder) with the next two bits of
// the radicand.
fn sqrt_digit(s: vec2<u32>, two: u32) -> vec2<u32> {
    let r = (s.y << 2u) | two;
    let trial = (s.x << 2u) | 1u;
    if r >= trial {
        return vec2<u32>((s.x << 1u) | 1u, r - trial);
    }
    return vec2<u32>(s.x << 1u, r);
}

// Two digits from four bits of the radicand.
fn sqrt_digits2(s: vec2<u32>, four: u32) -> vec2<u32> {
    return sqrt_digit(sqrt_digit(s, (four >> 2u) & 3u), four & 3u);
}

// `sqrt(a)` correctly rounded (a square root is never a tie; NaN for a < 0, −0 for −0).
fn soft_sqrt(a: f32) -> f32 {
    let x = bitcast<u32>(a);
    let ax = x & 0x7fffffffu;
    if ax > 0x7f800000u { return quiet_nan(x); }
    if ax == 0u { return a; }
    if x >= 0x80000000u { return bitcast<f32>(0x7fc00000u); }
    if x == 0x7f800000u { return a; }
    let u = unpack32(x);
    // m·2^e with e even and 2^24 ≤ m < 2^26.
    var m = u.m << 2u;
    var e = u.e - 2;
    if (u.e & 1) != 0 {
        m = u.m << 1u;
        e = u.e - 1;
    }
    // The root of M = m·2^26 (in [2^50, 2^52)): 26 digits, r = ⌊√M⌋ in [2^25, 2^26);
    // √a = √M · 2^((e − 26) / 2). m gives the first 13 pairs of bits, zeros the rest.
    var s = vec2<u32>(0u, 0u);
    s = sqrt_digit(s, m >> 24u);
    s = sqrt_digits2(s, (m >> 20u) & 15u);
    s = sqrt_digits2(s, (m >> 16u) & 15u);
    s = sqrt_digits2(s, (m >> 12u) & 15u);
    s = sqrt_digits2(s, (m >> 8u) & 15u);
    s = sqrt_digits2(s, (m >> 4u) & 15u);
    s = sqrt_digits2(s, m & 15u);
    s = sqrt_digits2(s, 0u);
    s = sqrt_digits2(s, 0u);
    s = sqrt_digits2(s, 0u);
    s = sqrt_digits2(s, 0u);
    s = sqrt_digits2(s, 0u);
    s = sqrt_digits2(s, 0u);
    s = sqrt_digit(s, 0u);
    return pack_rn(0u, s.x, s.y != 0u, (e - 26) / 2);
}

// The division and square root of the kernels: the device's own, or the integer ones.
fn f_div(a: f32, b: f32) -> f32 {
    if SOFT_DIV_SQRT { return soft_div(a, b); }
    return a / b;
}

fn f_sqrt(a: f32) -> f32 {
    if SOFT_DIV_SQRT { return soft_sqrt(a); }
    return sqrt(a);
}
