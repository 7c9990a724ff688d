// IEEE 754 binary64 from 32-bit integer operations only (docs/gpu.md §5): a double is a
// vec2<u32> of its bit pattern, (low word, high word), as it lies in memory. What the
// sums of rule 3 need: f32 to f64 (exact), the product of two f32 values (exact in f64),
// the addition of two doubles rounded to nearest, ties to even (subnormals, signed zeros,
// ±∞ and NaN included), and the rounding of a double to f32 (once, to nearest even).
// Straight-line code (no loops), built on `pack_rn` and `unpack32` of portable.wgsl.

// 64-bit words as (low, high).
fn w_add(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let lo = a.x + b.x;
    return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}

// a − b for a ≥ b.
fn w_sub(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    return vec2<u32>(a.x - b.x, a.y - b.y - select(0u, 1u, a.x < b.x));
}

fn w_lt(a: vec2<u32>, b: vec2<u32>) -> bool {
    return a.y < b.y || (a.y == b.y && a.x < b.x);
}

fn w_is_zero(a: vec2<u32>) -> bool {
    return (a.x | a.y) == 0u;
}

// a shifted left by n < 64.
fn w_shl(a: vec2<u32>, n: u32) -> vec2<u32> {
    if n == 0u { return a; }
    if n >= 32u { return vec2<u32>(0u, a.x << (n - 32u)); }
    return vec2<u32>(a.x << n, (a.y << n) | (a.x >> (32u - n)));
}

// a shifted right by n < 64.
fn w_shr(a: vec2<u32>, n: u32) -> vec2<u32> {
    if n == 0u { return a; }
    if n >= 32u { return vec2<u32>(a.y >> (n - 32u), 0u); }
    return vec2<u32>((a.x >> n) | (a.y << (32u - n)), a.y >> n);
}

// a shifted right by any n, the bits shifted out or-ed into bit 0 (the sticky bit).
fn w_shr_sticky(a: vec2<u32>, n: u32) -> vec2<u32> {
    if n == 0u { return a; }
    if n >= 64u { return vec2<u32>(select(0u, 1u, !w_is_zero(a)), 0u); }
    let r = w_shr(a, n);
    let back = w_shl(r, n);
    let lost = (back.x != a.x) || (back.y != a.y);
    return vec2<u32>(r.x | select(0u, 1u, lost), r.y);
}

fn w_clz(a: vec2<u32>) -> u32 {
    if a.y != 0u { return countLeadingZeros(a.y); }
    return 32u + countLeadingZeros(a.x);
}

const D_QUIET: u32 = 0x00080000u;
const D_NAN: vec2<u32> = vec2<u32>(0u, 0x7ff80000u);

fn soft64_is_nan(a: vec2<u32>) -> bool {
    let h = a.y & 0x7fffffffu;
    return h > 0x7ff00000u || (h == 0x7ff00000u && a.x != 0u);
}

// f64(x) for an f32 x (exact; a NaN keeps its payload).
fn soft64_from32(x: f32) -> vec2<u32> {
    let bits = bitcast<u32>(x);
    let sign = bits & 0x80000000u;
    let f = (bits >> 23u) & 0xffu;
    var m = bits & 0x007fffffu;
    var e: u32;
    if f == 0xffu {
        e = 0x7ffu;
    } else if f == 0u {
        if m == 0u { return vec2<u32>(0u, sign); }
        let sh = countLeadingZeros(m) - 8u;
        m = (m << sh) & 0x007fffffu;
        e = 897u - sh;
    } else {
        e = f + 896u;
    }
    return vec2<u32>(m << 29u, sign | (e << 20u) | (m >> 3u));
}

// f64(x) · f64(y) for f32 x and y: exact (48 bits of significand; never subnormal or
// beyond the f64 range).
fn soft64_mul32(x: f32, y: f32) -> vec2<u32> {
    let a = bitcast<u32>(x);
    let b = bitcast<u32>(y);
    let sign = (a ^ b) & 0x80000000u;
    let aa = a & 0x7fffffffu;
    let ab = b & 0x7fffffffu;
    if aa > 0x7f800000u { return soft64_from32(quiet_nan(a)); }
    if ab > 0x7f800000u { return soft64_from32(quiet_nan(b)); }
    if aa == 0x7f800000u || ab == 0x7f800000u {
        if aa == 0u || ab == 0u { return D_NAN; }
        return vec2<u32>(0u, sign | 0x7ff00000u);
    }
    if aa == 0u || ab == 0u { return vec2<u32>(0u, sign); }
    let ua = unpack32(aa);
    let ub = unpack32(ab);
    // The 48-bit product of two 24-bit significands from 16-bit pieces.
    let al = ua.m & 0xffffu;
    let ah = ua.m >> 16u;
    let bl = ub.m & 0xffffu;
    let bh = ub.m >> 16u;
    let mid = al * bh + ah * bl;
    let ll = al * bl;
    let lo = ll + ((mid & 0xffffu) << 16u);
    let hi = ah * bh + (mid >> 16u) + select(0u, 1u, lo < ll);
    var prod = vec2<u32>(lo, hi);
    // The leading bit at 46 or 47; moved to bit 52, the hidden bit.
    var lead = 46u;
    if hi >= 0x8000u { lead = 47u; }
    prod = w_shl(prod, 52u - lead);
    // Biased exponent of the leading bit; the hidden bit adds one to the field.
    let e = ua.e + ub.e + i32(lead) + 1023;
    return vec2<u32>(prod.x, sign | (prod.y + (u32(e - 1) << 20u)));
}

// a + b rounded to nearest, ties to even (binary64).
fn soft64_add(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    return soft64_add_mode(a, b, false);
}

// The fused multiply-add of fast mode without a correctly rounded device `fma`: the exact
// product (soft64_mul32) plus c, rounded to odd at 53 bits (exact sums stay exact, inexact
// ones get their last bit set), then once to nearest even at 24 bits: with at least two
// more bits than the target, a result rounded to odd rounds to nearest as the exact sum
// would, so a·b + c is rounded once. No f64 on the device is needed.
fn soft_fma(a: f32, b: f32, c: f32) -> f32 {
    return soft64_to32(soft64_add_mode(soft64_mul32(a, b), soft64_from32(c), true));
}

// a + b rounded to nearest, ties to even, or to odd when `odd` (binary64).
fn soft64_add_mode(a0: vec2<u32>, b0: vec2<u32>, odd: bool) -> vec2<u32> {
    if soft64_is_nan(a0) { return vec2<u32>(a0.x, a0.y | D_QUIET); }
    if soft64_is_nan(b0) { return vec2<u32>(b0.x, b0.y | D_QUIET); }
    // |a| ≥ |b| from here.
    var a = a0;
    var b = b0;
    let ma = vec2<u32>(a0.x, a0.y & 0x7fffffffu);
    let mb = vec2<u32>(b0.x, b0.y & 0x7fffffffu);
    if w_lt(ma, mb) {
        a = b0;
        b = a0;
    }
    let sign = a.y & 0x80000000u;
    let subtract = ((a.y ^ b.y) & 0x80000000u) != 0u;
    let fa = (a.y >> 20u) & 0x7ffu;
    let fb = (b.y >> 20u) & 0x7ffu;
    if fa == 0x7ffu {
        // ∞ (b is not NaN): ∞ − ∞ is NaN, anything else the infinity.
        if fb == 0x7ffu && subtract { return D_NAN; }
        return a;
    }
    // Significands with the hidden bit (none for subnormals, whose exponent is that of
    // the smallest normal), three guard bits below: bit 55 is the hidden bit.
    var sa = vec2<u32>(a.x, a.y & 0x000fffffu);
    var sb = vec2<u32>(b.x, b.y & 0x000fffffu);
    var ea = fa;
    var eb = fb;
    if fa == 0u { ea = 1u; } else { sa.y = sa.y | 0x00100000u; }
    if fb == 0u { eb = 1u; } else { sb.y = sb.y | 0x00100000u; }
    sa = w_shl(sa, 3u);
    sb = w_shr_sticky(w_shl(sb, 3u), ea - eb);
    var e = ea;
    var s: vec2<u32>;
    if subtract {
        s = w_sub(sa, sb);
        if w_is_zero(s) { return vec2<u32>(0u, 0u); }
        // Normalise: the leading bit back to 55, not below the smallest exponent.
        let lz = w_clz(s) - 8u;
        let sh = min(lz, e - 1u);
        s = w_shl(s, sh);
        e = e - sh;
    } else {
        s = w_add(sa, sb);
        if s.y >= 0x01000000u {
            s = w_shr_sticky(s, 1u);
            e = e + 1u;
        }
    }
    // Round to nearest even on the three guard bits (to odd: set the last bit when any is
    // set; never a carry).
    let g = s.x & 7u;
    var kept = w_shr(s, 3u);
    if odd {
        if g != 0u { kept.x = kept.x | 1u; }
    } else if g > 4u || (g == 4u && (kept.x & 1u) == 1u) {
        kept = w_add(kept, vec2<u32>(1u, 0u));
        if kept.y >= 0x00200000u {
            kept = w_shr(kept, 1u);
            e = e + 1u;
        }
    }
    if e >= 0x7ffu { return vec2<u32>(0u, sign | 0x7ff00000u); }
    // A normal significand holds the hidden bit, which adds one to the field; a
    // subnormal one (e = 1, no hidden bit) is encoded with field 0.
    return vec2<u32>(kept.x, sign | (kept.y + ((e - 1u) << 20u)));
}

// f32(a): a double rounded once to the nearest f32, ties to even.
fn soft64_to32(a: vec2<u32>) -> f32 {
    let sign = a.y & 0x80000000u;
    let f = (a.y >> 20u) & 0x7ffu;
    let hi = a.y & 0x000fffffu;
    if f == 0x7ffu {
        if (hi | a.x) != 0u {
            return bitcast<f32>(sign | 0x7fc00000u | (hi << 3u) | (a.x >> 29u));
        }
        return bitcast<f32>(sign | 0x7f800000u);
    }
    if f == 0u {
        // Below 2^-1022: rounds to a signed zero in f32.
        return bitcast<f32>(sign);
    }
    // The 53-bit significand's top 26 bits and the sticky bit of the other 27.
    let q = ((hi | 0x00100000u) << 5u) | (a.x >> 27u);
    return pack_rn(sign, q, (a.x & 0x07ffffffu) != 0u, i32(f) - 1048);
}
