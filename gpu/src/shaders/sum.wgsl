// sum: p = [zero, outputs, kept layout, reduced layout, reduced count, start, len]; one
// invocation per output: the reduced elements start ≤ r < start + len converted to f64
// and added in increasing row-major order to the f64 accumulator (from +0 at start 0),
// which several dispatches carry in `accs`; the last one rounds it once to f32
// (docs/arithmetic.md §1, rule 3).
@group(0) @binding(1) var<storage, read> xs: array<f32>;
@group(0) @binding(2) var<storage, read_write> accs: array<F64>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p[1] { return; }
    let lk = 2u;
    let lr = lk + layout_words(lk);
    let at = lr + layout_words(lr);
    let count = p[at];
    let start = p[at + 1u];
    let len = p[at + 2u];
    let base = layout_offset(lk, i);
    var acc = d_zero();
    if start != 0u { acc = accs[i]; }
    for (var r = start; r < start + len; r = r + 1u) {
        acc = d_add(acc, d_from(xs[base + layout_offset(lr, r)]));
    }
    if start + len == count {
        dst[i] = canon(d_to32(acc));
    } else {
        accs[i] = acc;
    }
}
