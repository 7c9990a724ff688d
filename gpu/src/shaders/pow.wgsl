// `x^e` as docs/arithmetic.md §3 defines pow, by the path the host chose for `e`: 0: 1;
// 1: x; 2: sqrt(x); 3: 1 / sqrt(x); 4: binary powering by `n` (square the base, multiply
// into the accumulator at each set bit from the lowest, the first factor taken as is),
// then `1 / acc` when `negative` is not 0; 5: exp(e · log x) with its special cases; 6:
// the canonical NaN (a NaN exponent).
fn pow_path(x: f32, path: u32, n0: u32, negative: u32, e: f32) -> f32 {
    switch path {
        case 0u: { return 1.0; }
        case 1u: { return x; }
        case 2u: { return f_sqrt(x); }
        case 3u: { return f_div(1.0, f_sqrt(x)); }
        case 5u: { return pow_general(x, e); }
        case 6u: { return bitcast<f32>(0x7fc00000u); }
        default: {
            var n = n0;
            var base = x;
            var acc = 1.0;
            var first = true;
            loop {
                if n == 0u { break; }
                if (n & 1u) == 1u {
                    if first { acc = base; } else { acc = acc * base; }
                    first = false;
                }
                n = n >> 1u;
                if n != 0u { base = base * base; }
            }
            if negative != 0u { return f_div(1.0, acc); }
            return acc;
        }
    }
}

fn neg(v: f32) -> f32 {
    return bitcast<f32>(bitcast<u32>(v) ^ 0x80000000u);
}
