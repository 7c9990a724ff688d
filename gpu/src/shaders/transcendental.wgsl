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
fn div(a: f32, b: f32) -> f32 { return opaque(f_div(a, b)); }
// +0 at run time (parameter word 0).
fn zero() -> f32 { return bitcast<f32>(p[0]); }

// `fused` is `!EXACT` for the functions whose polynomials follow the mode, false for
// GELU's, which are exact mode's in both modes.
fn madd(a: f32, b: f32, c: f32, fused: bool) -> f32 {
    if fused {
        return opaque(fma_rn(a, b, c));
    }
    return add(mul(a, b), c);
}

fn nan_canonical() -> f32 { return bitcast<f32>(0x7fc00000u); }
fn inf() -> f32 { return bitcast<f32>(0x7f800000u); }

// The result `r`, or the canonical NaN where `x` or `r` is NaN.
fn tr_canon(x: f32, r: f32) -> f32 {
    if is_nan(x) || is_nan(r) { return nan_canonical(); }
    return r;
}

fn poly_exp(x: f32, fused: bool) -> f32 {
    var acc = bitcast<f32>(0x394efddeu);
    acc = madd(acc, x, bitcast<f32>(0x3ab6a65fu), fused);
    acc = madd(acc, x, bitcast<f32>(0x3c088987u), fused);
    acc = madd(acc, x, bitcast<f32>(0x3d2aaa74u), fused);
    acc = madd(acc, x, bitcast<f32>(0x3e2aaaaau), fused);
    acc = madd(acc, x, bitcast<f32>(0x3f000000u), fused);
    return acc;
}

fn poly_log(x: f32, fused: bool) -> f32 {
    var acc = bitcast<f32>(0x3e78a09du);
    acc = madd(acc, x, bitcast<f32>(0x3e91e9e7u), fused);
    acc = madd(acc, x, bitcast<f32>(0x3eccce13u), fused);
    acc = madd(acc, x, bitcast<f32>(0x3f2aaaaau), fused);
    return acc;
}

fn poly_tanh(x: f32, fused: bool) -> f32 {
    var acc = bitcast<f32>(0x3b0d13ffu);
    acc = madd(acc, x, bitcast<f32>(0xbc062f67u), fused);
    acc = madd(acc, x, bitcast<f32>(0x3cb1d2a8u), fused);
    acc = madd(acc, x, bitcast<f32>(0xbd5cf8c4u), fused);
    acc = madd(acc, x, bitcast<f32>(0x3e08883du), fused);
    acc = madd(acc, x, bitcast<f32>(0xbeaaaaaau), fused);
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
fn exp_parts(xh: f32, xl0: f32, fused: bool) -> vec3<f32> {
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
    let q = mul(mul(r, r), poly_exp(r, fused));
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
    let e = exp_parts(x, zero(), !EXACT);
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
    let r = mul(z, poly_log(z, !EXACT));
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
    let small = add(ax, mul(ax, mul(z, poly_tanh(z, !EXACT))));
    var axc = 9.5;
    if ax < 9.5 { axc = ax; }
    let ep = exp_parts(add(axc, axc), zero(), !EXACT);
    let e = mul(mul(ep.x, ep.y), ep.z);
    let large = sub(1.0, div(2.0, add(e, 1.0)));
    var r = large;
    if ax < 0.625 { r = small; }
    return tr_canon(x, bitcast<f32>(bitcast<u32>(r) | sgn));
}

fn tr_sigmoid(x: f32) -> f32 {
    let ax = abs_bits(x);
    let ep = exp_parts(sub(zero(), ax), zero(), !EXACT);
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

// Knuth's sum: a + b = s + e exactly.
fn two_sum(a: f32, b: f32) -> vec2<f32> {
    let s = add(a, b);
    let bb = sub(s, a);
    return vec2<f32>(s, add(sub(a, sub(s, bb)), sub(b, bb)));
}

// min(x, m) for a non-NaN m; a NaN x becomes m.
fn min_c(x: f32, m: f32) -> f32 {
    if x < m { return x; }
    return m;
}

fn poly_mills_p(x: f32) -> f32 {
    var acc = bitcast<f32>(0xbaf941adu);
    acc = madd(acc, x, bitcast<f32>(0xbca926cfu), false);
    acc = madd(acc, x, bitcast<f32>(0xbdd5547au), false);
    acc = madd(acc, x, bitcast<f32>(0xbe9059abu), false);
    acc = madd(acc, x, bitcast<f32>(0xbeba0cfau), false);
    return acc;
}

fn poly_mills_q(x: f32) -> f32 {
    var acc = bitcast<f32>(0x3b1c32a9u);
    acc = madd(acc, x, bitcast<f32>(0x3cec79e7u), false);
    acc = madd(acc, x, bitcast<f32>(0x3e2ab568u), false);
    acc = madd(acc, x, bitcast<f32>(0x3f0e86a6u), false);
    acc = madd(acc, x, bitcast<f32>(0x3f89b556u), false);
    acc = madd(acc, x, bitcast<f32>(0x3f800000u), false);
    return acc;
}

// D(u) = (u + H0) + u·R(u), the denominator of Φ(−u) = φ(u)/D(u), for 0 ≤ u ≤ 15.
fn mills_den(u: f32) -> f32 {
    let r = div(poly_mills_p(u), poly_mills_q(u));
    let s = two_sum(u, bitcast<f32>(0x3f4c422au));
    return add(s.x, add(add(mul(u, r), bitcast<f32>(0xb2c2bc9bu)), s.y));
}

// 1/d for d = dh + dl: 1/dh corrected by −dl/dh².
fn recip2(dh: f32, dl: f32) -> f32 {
    let q = div(1.0, dh);
    return sub(q, mul(mul(q, q), dl));
}

struct PhiTail {
    axc: f32,
    p: f32,
    f1: f32,
    f2: f32,
    den: f32,
}

// For a = min(|x|, 15): φ(a) = (p·f1)·f2 and Φ(−a) = ((p/den)·f1)·f2, den = D(a).
fn phi_tail(x: f32) -> PhiTail {
    let ax = abs_bits(x);
    let axc = min_c(ax, 15.0);
    let hl = two_prod(axc, axc);
    let e = two_sum(mul(hl.x, -0.5), bitcast<f32>(0xbf6b3f8eu));
    var eh = e.x;
    if ax > 15.0 { eh = -171.0; }
    let el = sub(e.y, add(mul(hl.y, 0.5), bitcast<f32>(0x32864bebu)));
    let ep = exp_parts(eh, el, false);
    return PhiTail(axc, ep.x, ep.y, ep.z, mills_den(axc));
}

// GELU, erf form: x·Φ(x).
fn gelu_erf(x: f32) -> f32 {
    let t = phi_tail(x);
    // One quotient: of −a·p for x < 0 (x·Φ(x) itself), of p otherwise (Φ(−a)).
    var num = t.p;
    if x < 0.0 { num = mul(sub(zero(), t.axc), t.p); }
    let q = mul(mul(div(num, t.den), t.f1), t.f2);
    var r = mul(x, sub(1.0, q));
    if x < 0.0 { r = q; }
    return tr_canon(x, r);
}

// Derivative of the erf-form GELU: Φ(x) + x·φ(x).
fn gelu_erf_grad(x: f32) -> f32 {
    let t = phi_tail(x);
    let m = two_prod(t.axc, t.den);
    let u = sub(sub(1.0, m.x), m.y);
    let tt = mul(mul(div(mul(t.p, u), t.den), t.f1), t.f2);
    let pos = sub(1.0, tt);
    var r = pos;
    if x < 0.0 { r = tt; }
    return tr_canon(x, r);
}

struct TanhArg {
    a: f32,
    v: f32,
    vl: f32,
    w: f32,
    wl: f32,
}

// For a = min(|x|, 12): v + vl = 2·√(2/π)·(a + 0.044715·a³) and w + wl = a·dv/da.
fn gelu_tanh_arg(x: f32) -> TanhArg {
    let a = min_c(abs_bits(x), 12.0);
    let hl = two_prod(a, a);
    let cc = two_prod(a, hl.x);
    let ce = add(cc.y, mul(a, hl.y));
    let c = cc.x;
    let c1_hi = bitcast<f32>(0x3fcc422au);
    let c1_lo = bitcast<f32>(0xb342bc9bu);
    let c3_hi = bitcast<f32>(0x3d922279u);
    let c3_lo = bitcast<f32>(0x3124d8b5u);
    let pe1 = two_prod(c1_hi, a);
    let pe3 = two_prod(c3_hi, c);
    let vv = two_sum(pe1.x, pe3.x);
    var v = vv.x;
    if abs_bits(x) > 12.0 { v = 171.0; }
    let c1l = add(pe1.y, mul(c1_lo, a));
    let c3l = add(pe3.y, add(mul(c3_hi, ce), mul(c3_lo, c)));
    let vl = add(vv.y, add(c1l, c3l));
    let t3 = two_sum(add(pe3.x, pe3.x), pe3.x);
    let ww = two_sum(pe1.x, t3.x);
    let wl = add(add(ww.y, t3.y), add(c1l, mul(c3l, 3.0)));
    return TanhArg(a, v, vl, ww.x, wl);
}

// GELU, tanh form: x·σ(2u), u = √(2/π)·(x + 0.044715·x³).
fn gelu_tanh(x: f32) -> f32 {
    let t = gelu_tanh_arg(x);
    let ep = exp_parts(sub(zero(), t.v), sub(zero(), t.vl), false);
    let e = mul(mul(ep.x, ep.y), ep.z);
    let d = fast_two_sum(1.0, e);
    let rq = div(1.0, d.x);
    let c = mul(rq, d.y);
    let pos = sub(div(x, d.x), mul(mul(t.a, rq), c));
    let tn = div(mul(sub(zero(), t.a), ep.x), d.x);
    let neg = mul(mul(sub(tn, mul(tn, c)), ep.y), ep.z);
    var r = pos;
    if x < 0.0 { r = neg; }
    return tr_canon(x, r);
}

// Derivative of the tanh-form GELU: σ(V) + x·σ(V)·(1 − σ(V))·V′, V = 2u.
fn gelu_tanh_grad(x: f32) -> f32 {
    let t = gelu_tanh_arg(x);
    let ep = exp_parts(sub(zero(), t.v), sub(zero(), t.vl), false);
    let e = mul(mul(ep.x, ep.y), ep.z);
    let d = fast_two_sum(1.0, e);
    let r = recip2(d.x, d.y);
    let wr = add(mul(t.w, r), mul(t.wl, r));
    let neg = mul(mul(mul(mul(ep.x, r), sub(1.0, wr)), ep.y), ep.z);
    let pos = mul(r, add(1.0, mul(mul(t.w, e), r)));
    var res = pos;
    if x < 0.0 { res = neg; }
    return tr_canon(x, res);
}
