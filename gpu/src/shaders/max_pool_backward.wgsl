// max_pool2d backward as a gather: p = [zero, inputs, max count, start, len]. `geo`
// holds, per input element e, the offsets geo[e] .. geo[e + 1] into the list (from word
// inputs + 1) of the outputs whose argmax is e, in increasing order (built on the host
// from the host's argmax). One invocation per input element: the f32 sum from +0 of those
// outputs' gradients in that order (the order in which core's scatter adds them), each
// addition rounded on its own; the terms start ≤ t < start + len, the accumulator carried
// across dispatches in the output.
@group(0) @binding(1) var<storage, read> g: array<f32>;
@group(0) @binding(2) var<storage, read> geo: array<u32>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    let n = p[1];
    if i >= n { return; }
    let start = p[3];
    let len = p[4];
    let lo = geo[i];
    let list = n + 1u + lo;
    // +0 the compiler cannot see (so `0 + x` is not folded to `x`: −0 must become +0).
    var acc = opaque(0.0);
    if start != 0u { acc = dst[i]; }
    let end = min(start + len, geo[i + 1u] - lo);
    for (var t = start; t < end; t = t + 1u) {
        acc = sep_add(acc, g[geo[list + t]]);
    }
    if start + len >= p[2] {
        dst[i] = canon(acc);
    } else {
        dst[i] = acc;
    }
}
