// The softmax kernel whose row maximum (phase 0) is split across a workgroup
// (`softmax.wgsl`, docs/gpu.md §5.5): one workgroup per row; each invocation takes the
// maximum of the columns start + lid, start + lid + WG, … below start + len, then the
// workgroup combines the WG maxima as a tree in workgroup memory, carried across
// dispatches in `accs[2·row]` by the same rule.

var<workgroup> part: array<f32, WG>;

// The maximum of two partial maxima: a NaN (canonical) wins, else the larger.
fn max_of(a: f32, b: f32) -> f32 {
    if is_nan(a) { return a; }
    if is_nan(b) || b > a { return b; }
    return a;
}

// Phase 0 for the row of workgroup `row` (every invocation of the workgroup calls it:
// the barriers stay uniform).
fn max_phase(row: u32, lid: u32) {
    let rows = p[1];
    let cols = p[2];
    let start = p[4];
    let len = p[5];
    var m = -inf();
    if row < rows {
        for (var j = start + lid; j < start + len; j = j + WG) {
            let v = xs[row * cols + j];
            if is_nan(v) {
                m = nan_canonical();
                break;
            }
            if v > m { m = v; }
        }
    }
    part[lid] = m;
    workgroupBarrier();
    for (var half = WG / 2u; half > 0u; half = half / 2u) {
        if lid < half {
            part[lid] = max_of(part[lid], part[lid + half]);
        }
        workgroupBarrier();
    }
    if row < rows && lid == 0u {
        var r = part[0];
        if start != 0u { r = max_of(d_to32(accs[2u * row]), r); }
        accs[2u * row] = d_from(r);
    }
}

@compute @workgroup_size(WG)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    if p[3] == 0u {
        max_phase(wid.x + wid.y * nwg.x, lid);
    } else {
        sum_and_output(linear(gid, nwg));
    }
}
