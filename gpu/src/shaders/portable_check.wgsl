// The integer arithmetic of the portable paths on its own, for tests and device checks:
// p = [zero, n, op, start]; per element i, on the words a[i], b[i], c[i], d[i]:
// 0: soft_div(a, b); 1: soft_sqrt(a); 2: the device's a / b; 3: the device's sqrt(a);
// 4: soft64_add((a, b), (c, d)) (doubles as (low, high) words; two words out); 5:
// soft64_mul32(a, b) (two words out); 6: soft64_from32(a) (two words out); 7:
// soft64_to32((a, b)); 8: soft_sqrt of the bit pattern start + i (no input read); 9:
// soft_fma(a, b, c).
@group(0) @binding(1) var<storage, read> a: array<u32>;
@group(0) @binding(2) var<storage, read> b: array<u32>;
@group(0) @binding(3) var<storage, read> c: array<u32>;
@group(0) @binding(4) var<storage, read> d: array<u32>;
@group(0) @binding(5) var<storage, read_write> dst: array<u32>;

fn put2(i: u32, v: vec2<u32>) {
    dst[2u * i] = v.x;
    dst[2u * i + 1u] = v.y;
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p[1] { return; }
    switch p[2] {
        case 0u: { dst[i] = bitcast<u32>(soft_div(bitcast<f32>(a[i]), bitcast<f32>(b[i]))); }
        case 1u: { dst[i] = bitcast<u32>(soft_sqrt(bitcast<f32>(a[i]))); }
        case 2u: { dst[i] = bitcast<u32>(bitcast<f32>(a[i]) / bitcast<f32>(b[i])); }
        case 3u: { dst[i] = bitcast<u32>(sqrt(bitcast<f32>(a[i]))); }
        case 4u: { put2(i, soft64_add(vec2<u32>(a[i], b[i]), vec2<u32>(c[i], d[i]))); }
        case 5u: { put2(i, soft64_mul32(bitcast<f32>(a[i]), bitcast<f32>(b[i]))); }
        case 6u: { put2(i, soft64_from32(bitcast<f32>(a[i]))); }
        case 7u: { dst[i] = bitcast<u32>(soft64_to32(vec2<u32>(a[i], b[i]))); }
        case 8u: { dst[i] = bitcast<u32>(soft_sqrt(bitcast<f32>(p[3] + i))); }
        case 9u: {
            dst[i] = bitcast<u32>(soft_fma(bitcast<f32>(a[i]), bitcast<f32>(b[i]), bitcast<f32>(c[i])));
        }
        default: { dst[i] = 0u; }
    }
}
