// The correctly rounded fused multiply-add of fast mode, `fma_rn(a, b, c)` =
// round-to-nearest-even(a·b + c). Where the device's own `fma` is not correctly rounded
// (the probes decide; lavapipe computes it as a separate multiply and add), it is
// emulated in f64: the product of two f32 values is exact in f64, the sum `s` is
// rounded once to f64 and its error `e` found exactly (Knuth's two-sum); rounding `s` to
// f32 is then correct unless `s` lies exactly on a midpoint of two f32 values while the
// exact sum does not (`e ≠ 0`), and in that case the neighbour on the side of `e` is the
// correctly rounded result.
fn fma_emulated(a: f32, b: f32, c: f32) -> f32 {
    let pr = f64(a) * f64(b);
    let cc = f64(c);
    // The barrier keeps the shader compiler from simplifying the two-sum algebraically
    // (to e = 0), which it may do with operations not marked exact.
    let s = opaque64(pr + cc);
    let r = f32(s);
    let bb = opaque64(s - pr);
    let e = (pr - (s - bb)) + (cc - bb);
    // Only an inexact sum (finite operands) can be rounded twice.
    if e == f64(0.0) || e != e {
        return r;
    }
    if abs(r) > 3.4028235e38 {
        // Overflowed: only the midpoint between the largest f32 and 2^128, with the
        // exact sum below it, rounds to the largest f32 instead.
        if abs(s) == f64(340282356779733661637539395458142568448.0) && (e > f64(0.0)) != (s > f64(0.0)) {
            return sign(r) * 3.4028235e38;
        }
        return r;
    }
    let other = f64(2.0) * s - f64(r);
    let o = f32(other);
    if f64(o) != other || o == r {
        return r;
    }
    // `s` is the midpoint of `r` and `o`: take the one on the side of the exact sum.
    if (e > f64(0.0)) == (other > s) {
        return o;
    }
    return r;
}

// `v` times a one the compiler cannot see (parameter word 0 is zero at run time; see
// `opaque`): exact, and no algebraic rule can look through it.
fn opaque64(v: f64) -> f64 {
    return v * (f64(1.0) + f64(p[0]));
}

fn fma_rn(a: f32, b: f32, c: f32) -> f32 {
    if FMA_NATIVE {
        return fma(a, b, c);
    }
    return fma_emulated(a, b, c);
}
