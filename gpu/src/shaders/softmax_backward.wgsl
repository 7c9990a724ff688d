// softmax_backward (softmax, not log-softmax): p = [zero, rows, cols]; one invocation per
// row: d = Σ64 y·g (f64 products, exact), rounded once; out = y ⊗ (g ⊖ d).
@group(0) @binding(1) var<storage, read> ys: array<f32>;
@group(0) @binding(2) var<storage, read> gs: array<f32>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = linear(gid, nwg);
    if row >= p[1] { return; }
    let cols = p[2];
    let start = row * cols;
    var d = f64(0.0);
    for (var j = 0u; j < cols; j = j + 1u) {
        d = d + f64(ys[start + j]) * f64(gs[start + j]);
    }
    let d32 = f32(d);
    for (var j = 0u; j < cols; j = j + 1u) {
        dst[start + j] = canon(ys[start + j] * (gs[start + j] - d32));
    }
}
