// avg_pool2d and adaptive_avg_pool2d forward: p = [zero, outputs, oh, ow, h, w, empty is
// zero, max taps, start, len]. `geo` holds per output row (r0, rows), per output column
// (c0, columns) and per output position the divisor's bits (computed on the host by the
// reference's `window`). One invocation per output: the window's taps start ≤ t < start
// + len in row-major order converted to f64 and added to the f64 accumulator (from +0 at
// start 0), which several dispatches carry in `accs`; the last one rounds it once to f32
// and divides by the divisor (core's `avg_pool2d`/`adaptive_avg_pool2d`). An empty window
// gives +0 when `empty is zero` (average pooling).
@group(0) @binding(1) var<storage, read> xs: array<f32>;
@group(0) @binding(2) var<storage, read> geo: array<u32>;
@group(0) @binding(3) var<storage, read_write> accs: array<F64>;
@group(0) @binding(4) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p[1] { return; }
    let oh = p[2];
    let ow = p[3];
    let w = p[5];
    let start = p[8];
    let len = p[9];
    let ohw = oh * ow;
    let plane = i / ohw;
    let rem = i % ohw;
    let oy = rem / ow;
    let ox = rem % ow;
    let r0 = geo[2u * oy];
    let nr = geo[2u * oy + 1u];
    let c0 = geo[2u * oh + 2u * ox];
    let nc = geo[2u * oh + 2u * ox + 1u];
    if p[6] != 0u && (nr == 0u || nc == 0u) {
        dst[i] = 0.0;
        return;
    }
    let base = plane * p[4] * w;
    let taps = nr * nc;
    // +0 the compiler cannot see (so `0 + x` is not folded to `x`: −0 must become +0).
    var acc = d_from(opaque(0.0));
    if start != 0u { acc = accs[i]; }
    let end = min(start + len, taps);
    for (var t = start; t < end; t = t + 1u) {
        let r = r0 + t / nc;
        let c = c0 + t % nc;
        acc = d_add(acc, d_from(xs[base + r * w + c]));
    }
    if start + len >= p[7] {
        let d = bitcast<f32>(geo[2u * oh + 2u * ow + rem]);
        dst[i] = canon(sep_div(d_to32(acc), d));
    } else {
        accs[i] = acc;
    }
}
