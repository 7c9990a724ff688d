// binary: p = [zero, n, op, layout a, layout b]; one IEEE operation per element.
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p[1] { return; }
    let la = 3u;
    let lb = la + layout_words(la);
    let x = a[layout_offset(la, i)];
    let y = b[layout_offset(lb, i)];
    var r: f32;
    switch p[2] {
        case 0u: { r = x + y; }
        case 1u: { r = x - y; }
        case 2u: { r = x * y; }
        default: { r = f_div(x, y); }
    }
    dst[i] = canon(r);
}
