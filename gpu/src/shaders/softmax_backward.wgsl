// softmax_backward: p = [zero, rows, cols, phase, start, len, log]. Softmax: d = Σ64 y·g
// (f64 products, exact), out = y ⊗ (g ⊖ d); log-softmax: d = Σ64 g, out = g ⊖ exp(y) ⊗ d;
// d rounded once to f32 (docs/arithmetic.md §3). Phase 0, one invocation per row: d over
// the columns start ≤ j < start + len, from +0 at start 0, carried across dispatches in
// `accs`. Phase 1, one invocation per element: the output.
@group(0) @binding(1) var<storage, read> ys: array<f32>;
@group(0) @binding(2) var<storage, read> gs: array<f32>;
@group(0) @binding(3) var<storage, read_write> accs: array<F64>;
@group(0) @binding(4) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    let rows = p[1];
    let cols = p[2];
    let log = p[6] != 0u;
    if p[3] == 0u {
        if i >= rows { return; }
        let start = p[4];
        let len = p[5];
        var d = d_zero();
        if start != 0u { d = accs[i]; }
        let at = i * cols;
        for (var j = start; j < start + len; j = j + 1u) {
            if log {
                d = d_add(d, d_from(gs[at + j]));
            } else {
                d = d_add(d, d_mul(ys[at + j], gs[at + j]));
            }
        }
        accs[i] = d;
    } else {
        if i >= rows * cols { return; }
        let d32 = d_to32(accs[i / cols]);
        if log {
            dst[i] = canon(sub(gs[i], mul(tr_exp(ys[i]), d32)));
        } else {
            dst[i] = canon(mul(ys[i], sub(gs[i], d32)));
        }
    }
}
