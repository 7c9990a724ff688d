// sum: p = [zero, outputs, kept layout, reduced layout, reduced count]; one invocation per
// output: the reduced elements converted to f64 and added from +0 in increasing
// row-major order, rounded once to f32 (docs/arithmetic.md §1, rule 3).
@group(0) @binding(1) var<storage, read> xs: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p[1] { return; }
    let lk = 2u;
    let lr = lk + layout_words(lk);
    let count = p[lr + layout_words(lr)];
    let base = layout_offset(lk, i);
    var acc = f64(0.0);
    for (var r = 0u; r < count; r = r + 1u) {
        acc = acc + f64(xs[base + layout_offset(lr, r)]);
    }
    dst[i] = canon(f32(acc));
}
