// The arithmetic probes run at construction: p = [zero, n, what]; per element i the
// operation `what` on a[i], b[i], c[i]. 0: a * b + c as written; 1: a / b; 2: sqrt(a);
// 3: fma(a, b, c); 4: a * b; 5: a + b; 6: f32(f64(a) + f64(b) * 2^-30) (f64 adds and the
// rounding of f64 to f32, only compiled when the device has f64); 7: a * b + c with the
// product through `opaque`; 8: the emulated fused multiply-add (with f64 only).
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
        case 7u: { r = opaque(x * y) + z; }
        default: { r = 0.0; }
    }
    dst[i] = r;
}
