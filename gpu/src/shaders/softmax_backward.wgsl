// softmax_backward (softmax, not log-softmax): p = [zero, rows, cols, phase, start, len].
// Phase 0, one invocation per row: d += y·g (f64 products, exact) over the columns
// start ≤ j < start + len, from +0 at start 0, carried in `accs` across dispatches.
// Phase 1, one invocation per element: out = y ⊗ (g ⊖ d), with d rounded once to f32.
@group(0) @binding(1) var<storage, read> ys: array<f32>;
@group(0) @binding(2) var<storage, read> gs: array<f32>;
@group(0) @binding(3) var<storage, read_write> accs: array<f64>;
@group(0) @binding(4) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    let rows = p[1];
    let cols = p[2];
    if p[3] == 0u {
        if i >= rows { return; }
        let start = p[4];
        let len = p[5];
        var d = f64(0.0);
        if start != 0u { d = accs[i]; }
        let at = i * cols;
        for (var j = start; j < start + len; j = j + 1u) {
            d = d + f64(ys[at + j]) * f64(gs[at + j]);
        }
        accs[i] = d;
    } else {
        if i >= rows * cols { return; }
        let d32 = f32(accs[i / cols]);
        dst[i] = canon(ys[i] * (gs[i] - d32));
    }
}
