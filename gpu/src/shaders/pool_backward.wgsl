// avg_pool2d and adaptive_avg_pool2d backward as a gather: p = [zero, inputs, h, w, oh,
// ow, max taps, start, len]. `geo` holds per input row the outputs rows whose windows
// contain it (first, count), per input column the output columns (first, count), and per
// output position the divisor's bits. One invocation per input element: the f32 sum
// from +0 of g ⊘ divisor over the windows that contain it, in increasing output order
// (the order in which core's scatter adds them), each operation rounded on its own; the
// terms start ≤ t < start + len, the accumulator carried across dispatches in the output.
@group(0) @binding(1) var<storage, read> g: array<f32>;
@group(0) @binding(2) var<storage, read> geo: array<u32>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p[1] { return; }
    let h = p[2];
    let w = p[3];
    let ow = p[5];
    let start = p[7];
    let len = p[8];
    let hw = h * w;
    let plane = i / hw;
    let rem = i % hw;
    let y = rem / w;
    let x = rem % w;
    let oy0 = geo[2u * y];
    let ny = geo[2u * y + 1u];
    let ox0 = geo[2u * h + 2u * x];
    let nx = geo[2u * h + 2u * x + 1u];
    let divs = 2u * h + 2u * w;
    let base = plane * p[4] * ow;
    // +0 the compiler cannot see (so `0 + x` is not folded to `x`: −0 must become +0).
    var acc = opaque(0.0);
    if start != 0u { acc = dst[i]; }
    let end = min(start + len, ny * nx);
    for (var t = start; t < end; t = t + 1u) {
        let o = (oy0 + t / nx) * ow + ox0 + t % nx;
        acc = sep_add(acc, sep_div(g[base + o], bitcast<f32>(geo[divs + o])));
    }
    if start + len >= p[6] {
        dst[i] = canon(acc);
    } else {
        dst[i] = acc;
    }
}
