// The arithmetic probes run at construction: p = [zero, n, what]; per element i the
// operation `what` on a[i], b[i], c[i]. 0: a * b + c as written; 1: a / b; 2: sqrt(a);
// 3: fma(a, b, c); 4: a * b; 5: a + b; 6: f32(f64(a) + f64(b)) (the host passes a small b, so the
// f64 sum is exact and its rounding to f32 is what is tested; only with f64); 7: a * b + c with the
// product through `opaque`; 8: the emulated fused multiply-add (with f64 only); 9:
// f32(f64(a) * f64(b) + f64(c)) as the device converts, out-of-range values included
// (with f64 only); 10: the number of iterations a loop of `bits(a)` iterations runs; 11:
// the integer division a / b; 12: the integer sqrt(a); 13: f32(f64(a) + f64(b)) and 14:
// f32(f64(a) * f64(b) + f64(c)) with the integer binary64 (portable.wgsl, f64_int.wgsl);
// 15: the integer fused multiply-add.
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read> c: array<f32>;
@group(0) @binding(4) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p[1] { return; }
    let x = a[i];
    let y = b[i];
    let z = c[i];
    var r: f32;
    switch p[2] {
        case 0u: { r = x * y + z; }
        case 1u: { r = x / y; }
        case 2u: { r = sqrt(x); }
        case 3u: { r = fma(x, y, z); }
        case 4u: { r = x * y; }
        case 5u: { r = x + y; }
        case 6u: { r = F64_PROBE; }
        case 8u: { r = FMA_PROBE; }
        case 9u: { r = F64_WIDE_PROBE; }
        case 10u: {
            var count = 0u;
            for (var j = 0u; j < bitcast<u32>(x); j = j + 1u) { count = count + 1u; }
            r = bitcast<f32>(count);
        }
        case 7u: { r = opaque(x * y) + z; }
        case 11u: { r = soft_div(x, y); }
        case 12u: { r = soft_sqrt(x); }
        case 13u: { r = soft64_to32(soft64_add(soft64_from32(x), soft64_from32(y))); }
        case 14u: { r = soft64_to32(soft64_add(soft64_mul32(x, y), soft64_from32(z))); }
        case 15u: { r = soft_fma(x, y, z); }
        default: { r = 0.0; }
    }
    dst[i] = r;
}
