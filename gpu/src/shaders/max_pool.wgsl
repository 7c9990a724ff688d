// max_pool2d forward: p = [zero, outputs, oh, ow, h, w, max taps, start, len, dh, dw].
// `geo` holds per output row (first input row of a tap inside, taps inside) and per
// output column the same (core's `taps_inside`). One invocation per output: the taps
// start ≤ t < start + len in row-major order; a tap replaces the best so far when it is
// the first, greater, or NaN (core's `max_pool2d`: the first maximum, the last NaN); the
// best value and its index in the plane (0xffffffff: none) are carried across dispatches
// in `acc`; the last one writes the value (−∞ without taps) and the index.
@group(0) @binding(1) var<storage, read> xs: array<f32>;
@group(0) @binding(2) var<storage, read> geo: array<u32>;
@group(0) @binding(3) var<storage, read_write> acc: array<u32>;
@group(0) @binding(4) var<storage, read_write> dst: array<f32>;
@group(0) @binding(5) var<storage, read_write> idx: array<u32>;

const NONE: u32 = 0xffffffffu;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p[1] { return; }
    let oh = p[2];
    let ow = p[3];
    let w = p[5];
    let start = p[7];
    let len = p[8];
    let ohw = oh * ow;
    let plane = i / ohw;
    let rem = i % ohw;
    let oy = rem / ow;
    let ox = rem % ow;
    let r0 = geo[2u * oy];
    let ni = geo[2u * oy + 1u];
    let q0 = geo[2u * oh + 2u * ox];
    let nj = geo[2u * oh + 2u * ox + 1u];
    let base = plane * p[4] * w;
    var best = bitcast<f32>(0xff800000u);
    var at = NONE;
    if start != 0u {
        best = bitcast<f32>(acc[2u * i]);
        at = acc[2u * i + 1u];
    }
    let end = min(start + len, ni * nj);
    for (var t = start; t < end; t = t + 1u) {
        let r = r0 + (t / nj) * p[9];
        let q = q0 + (t % nj) * p[10];
        let k = r * w + q;
        let v = xs[base + k];
        if at == NONE || v > best || is_nan(v) {
            best = v;
            at = k;
        }
    }
    if start + len >= p[6] {
        dst[i] = canon(best);
        idx[i] = at;
    } else {
        acc[2u * i] = bitcast<u32>(best);
        acc[2u * i + 1u] = at;
    }
}
