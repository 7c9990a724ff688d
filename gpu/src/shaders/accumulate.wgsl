// accumulate: p = [zero, n, add]; `dst[i] = canon(dst[i] + src[i])` when `add` is 1, else
// `dst[i] = canon(dst[i])`: the additions of `matmul_acc`, one per segment in order (each
// a single IEEE addition; canonicalising a NaN at every step gives the bits of doing it
// once at the end, since a NaN stays a NaN).
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p[1] { return; }
    var r = dst[i];
    if p[2] == 1u {
        r = r + src[i];
    }
    dst[i] = canon(r);
}
