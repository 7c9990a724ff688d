// select: p = [zero, n, layout c, layout a, layout b]; `c != 0` read from the bits (a
// subnormal condition is non-zero, NaN too), values copied bit for bit.
@group(0) @binding(1) var<storage, read> c: array<u32>;
@group(0) @binding(2) var<storage, read> a: array<u32>;
@group(0) @binding(3) var<storage, read> b: array<u32>;
@group(0) @binding(4) var<storage, read_write> dst: array<u32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p[1] { return; }
    let lc = 2u;
    let la = lc + layout_words(lc);
    let lb = la + layout_words(la);
    if (c[layout_offset(lc, i)] & 0x7fffffffu) != 0u {
        dst[i] = a[layout_offset(la, i)];
    } else {
        dst[i] = b[layout_offset(lb, i)];
    }
}
