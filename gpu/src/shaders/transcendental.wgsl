// exp, log, tanh and sigmoid: the algorithms of the project's transcendental functions
// (backends/src/transcendental/generic.rs, docs/transcendentals.md), operation for
// operation. Every arithmetic result passes through `opaque`, so the shader compiler can
// neither simplify an error-free transformation, nor fold a constant addition such as
// `m + 0`, nor contract a product into a sum: each operation is one IEEE rounding, as
// in the reference. `madd` is the polynomial multiply-add of the mode: the product
// rounded, then the sum (exact mode), or one correctly rounded fused multiply-add (fast
// mode).

fn add(a: f32, b: f32) -> f32 { return opaque(a + b); }
fn sub(a: f32, b: f32) -> f32 { return opaque(a - b); }
fn mul(a: f32, b: f32) -> f32 { return opaque(a * b); }
fn div(a: f32, b: f32) -> f32 { return opaque(a / b); }
// +0 at run time (parameter word 0).
fn zero() -> f32 { return bitcast<f32>(p[0]); }

fn madd(a: f32, b: f32, c: f32) -> f32 {
    if EXACT {
        return add(mul(a, b), c);
    }
    return opaque(fma_rn(a, b, c));
}

fn nan_canonical() -> f32 { return bitcast<f32>(0x7fc00000u); }
fn inf() -> f32 { return bitcast<f32>(0x7f800000u); }

// The result `r`, or the canonical NaN where `x` or `r` is NaN.
fn tr_canon(x: f32, r: f32) -> f32 {
    if is_nan(x) || is_nan(r) { return nan_canonical(); }
    return r;
}

fn poly_exp(x: f32) -> f32 {
    var acc = bitcast<f32>(0x394efddeu);
    acc = madd(acc, x, bitcast<f32>(0x3ab6a65fu));
    acc = madd(acc, x, bitcast<f32>(0x3c088987u));
    acc = madd(acc, x, bitcast<f32>(0x3d2aaa74u));
    acc = madd(acc, x, bitcast<f32>(0x3e2aaaaau));
    acc = madd(acc, x, bitcast<f32>(0x3f000000u));
    return acc;
}

fn poly_log(x: f32) -> f32 {
    var acc = bitcast<f32>(0x3e78a09du);
    acc = madd(acc, x, bitcast<f32>(0x3e91e9e7u));
    acc = madd(acc, x, bitcast<f32>(0x3eccce13u));
    acc = madd(acc, x, bitcast<f32>(0x3f2aaaaau));
    return acc;
}

fn poly_tanh(x: f32) -> f32 {
    var acc = bitcast<f32>(0x3b0d13ffu);
    acc = madd(acc, x, bitcast<f32>(0xbc062f67u));
    acc = madd(acc, x, bitcast<f32>(0x3cb1d2a8u));
    acc = madd(acc, x, bitcast<f32>(0xbd5cf8c4u));
    acc = madd(acc, x, bitcast<f32>(0x3e08883du));
    acc = madd(acc, x, bitcast<f32>(0xbeaaaaaau));
    return acc;
}

fn abs_bits(x: f32) -> f32 { return bitcast<f32>(bitcast<u32>(x) & 0x7fffffffu); }

// Veltkamp split: a = hi + lo, hi with at most 12 significant bits.
fn split(a: f32) -> vec2<f32> {
    let t = mul(a, 4097.0);
    let hi = sub(t, sub(t, a));
    return vec2<f32>(hi, sub(a, hi));
}

// Dekker's product: a·b = p + e exactly (barring underflow/overflow).
fn two_prod(a: f32, b: f32) -> vec2<f32> {
    let pr = mul(a, b);
    let sa = split(a);
    let sb = split(b);
    let e = add(add(add(sub(mul(sa.x, sb.x), pr), mul(sa.x, sb.y)), mul(sa.y, sb.x)), mul(sa.y, sb.y));
    return vec2<f32>(pr, e);
}

// Dekker's sum for |a| ≥ |b| (or a = 0): a + b = s + e exactly.
fn fast_two_sum(a: f32, b: f32) -> vec2<f32> {
    let s = add(a, b);
    return vec2<f32>(s, sub(b, sub(s, a)));
}

// e^(xh + xl) as (p * f1) * f2 (see exp_parts in the reference).
fn exp_parts(xh: f32, xl0: f32) -> vec3<f32> {
    let lo_lim = xh < -170.0;
    let hi_lim = xh > 89.0;
    var xc = xh;
    if hi_lim { xc = 89.0; }
    if lo_lim { xc = -170.0; }
    var xl = xl0;
    if lo_lim || hi_lim { xl = zero(); }
    let t = add(mul(xc, bitcast<f32>(0x3fb8aa3bu)), 12582912.0);
    let kf = sub(t, 12582912.0);
    let ki = bitcast<i32>(bitcast<u32>(t) - 0x4b400000u);
    let hi = sub(xc, mul(kf, bitcast<f32>(0x3f317200u)));
    let lo = sub(mul(kf, bitcast<f32>(0x35bfbe8eu)), xl);
    let r = sub(hi, lo);
    let q = mul(mul(r, r), poly_exp(r));
    let st = fast_two_sum(1.0, hi);
    let pp = add(st.x, add(st.y, sub(q, lo)));
    let k1 = ki >> 1u;
    let k2 = ki - k1;
    var f1 = bitcast<f32>(u32(k1 + 127) << 23u);
    if lo_lim { f1 = 0.0; }
    let f2 = bitcast<f32>(u32(k2 + 127) << 23u);
    return vec3<f32>(pp, f1, f2);
}

fn tr_exp(x: f32) -> f32 {
    let e = exp_parts(x, zero());
    return tr_canon(x, mul(mul(e.x, e.y), e.z));
}

fn tr_log(x: f32) -> f32 {
    let tiny = x < bitcast<f32>(0x00800000u);
    var xs = x;
    if tiny { xs = mul(x, 33554432.0); }
    let b = bitcast<u32>(xs);
    let eb = bitcast<f32>((b >> 23u) | 0x4b000000u);
    let e_raw = sub(eb, 8388735.0);
    var m = bitcast<f32>((b & 0x007fffffu) | 0x3f800000u);
    let big = m > bitcast<f32>(0x3fb504f3u);
    if big { m = mul(m, 0.5); }
    var one_if_big = zero();
    if big { one_if_big = 1.0; }
    var tiny_shift = zero();
    if tiny { tiny_shift = 25.0; }
    let ef = sub(add(e_raw, one_if_big), tiny_shift);
    let f = sub(m, 1.0);
    let s = div(f, add(2.0, f));
    let z = mul(s, s);
    let r = mul(z, poly_log(z));
    let sq = two_prod(f, f);
    let hh = mul(sq.x, 0.5);
    let hl = mul(sq.y, 0.5);
    let b1 = fast_two_sum(f, sub(zero(), hh));
    let s1 = fast_two_sum(mul(ef, bitcast<f32>(0x3f317200u)), b1.x);
    let t1 = sub(mul(s, add(hh, r)), hl);
    let t2 = add(t1, mul(ef, bitcast<f32>(0x35bfbe8eu)));
    let t3 = add(t2, add(b1.y, s1.y));
    var res = add(s1.x, t3);
    if x == inf() { res = inf(); }
    if x < 0.0 { res = nan_canonical(); }
    if x == 0.0 { res = -inf(); }
    return tr_canon(x, res);
}

fn tr_tanh(x: f32) -> f32 {
    let sgn = bitcast<u32>(x) & 0x80000000u;
    let ax = abs_bits(x);
    let z = mul(ax, ax);
    let small = add(ax, mul(ax, mul(z, poly_tanh(z))));
    var axc = 9.5;
    if ax < 9.5 { axc = ax; }
    let ep = exp_parts(add(axc, axc), zero());
    let e = mul(mul(ep.x, ep.y), ep.z);
    let large = sub(1.0, div(2.0, add(e, 1.0)));
    var r = large;
    if ax < 0.625 { r = small; }
    return tr_canon(x, bitcast<f32>(bitcast<u32>(r) | sgn));
}

fn tr_sigmoid(x: f32) -> f32 {
    let ax = abs_bits(x);
    let ep = exp_parts(sub(zero(), ax), zero());
    let e = mul(mul(ep.x, ep.y), ep.z);
    let d = fast_two_sum(1.0, e);
    // recip2(dh, dl): 1/dh corrected by -dl/dh^2.
    let q = div(1.0, d.x);
    let pos = sub(q, mul(mul(q, q), d.y));
    let qn = div(ep.x, d.x);
    let neg = mul(mul(sub(qn, mul(mul(qn, pos), d.y)), ep.y), ep.z);
    var r = pos;
    if x < 0.0 { r = neg; }
    return tr_canon(x, r);
}

// x^p by exp(p · log x) for an exponent without a shorter path (docs/arithmetic.md §3).
fn pow_general(x: f32, e: f32) -> f32 {
    let general = tr_exp(mul(e, tr_log(x)));
    var at_inf = 0.0;
    var at_zero = inf();
    if e > 0.0 {
        at_inf = inf();
        at_zero = 0.0;
    }
    var r = general;
    if x == inf() { r = at_inf; }
    if x == 0.0 { r = at_zero; }
    if x < 0.0 || is_nan(x) { r = nan_canonical(); }
    return r;
}
