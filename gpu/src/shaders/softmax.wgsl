// softmax and log-softmax of rows: p = [zero, rows, cols, phase, start, len, log]. Per
// row (docs/arithmetic.md §3): m = the row's maximum (the canonical NaN if any element
// is NaN), plus +0; e_i = exp(x_i ⊖ m); s = Σ64 e_i rounded once; softmax y_i = e_i ⊘ s,
// log-softmax y_i = (x_i ⊖ m) ⊖ log(s). Phase 0, one workgroup per row: each invocation
// takes the maximum of the columns start + lid, start + lid + WG, … below start + len,
// then the workgroup combines the WG maxima as a tree, carried across dispatches in
// `accs[2·row]`. The maximum does not depend on the order of its comparisons (NaN if any
// is NaN, else the largest value, of which only a zero's sign depends on the order, and
// `+0` is added to it before any use), so splitting the row gives the reference's bits.
// Phase 1, per row: the f64 sum of the exponentials over a range of columns in
// increasing order, carried in `accs[2·row + 1]` (not split: f64 addition is not
// associative). Phase 2, one invocation per element: the output.
@group(0) @binding(1) var<storage, read> xs: array<f32>;
@group(0) @binding(2) var<storage, read_write> accs: array<F64>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;

var<workgroup> part: array<f32, WG>;

// The maximum of two partial maxima: a NaN (canonical) wins, else the larger.
fn max_of(a: f32, b: f32) -> f32 {
    if is_nan(a) { return a; }
    if is_nan(b) || b > a { return b; }
    return a;
}

// Phase 0 for the row of workgroup `row` (every invocation of the workgroup calls it:
// the barriers stay uniform).
fn max_phase(row: u32, lid: u32, cols: u32, start: u32, len: u32, rows: u32) {
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

fn row_max(row: u32) -> f32 {
    return add(d_to32(accs[2u * row]), zero());
}

@compute @workgroup_size(WG)
fn main(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = linear(gid, nwg);
    let rows = p[1];
    let cols = p[2];
    let phase = p[3];
    let start = p[4];
    let len = p[5];
    if phase == 0u {
        max_phase(wid.x + wid.y * nwg.x, lid, cols, start, len, rows);
    } else if phase == 1u {
        if i >= rows { return; }
        let m = row_max(i);
        var s = d_zero();
        if start != 0u { s = accs[2u * i + 1u]; }
        for (var j = start; j < start + len; j = j + 1u) {
            s = d_add(s, d_from(tr_exp(sub(xs[i * cols + j], m))));
        }
        accs[2u * i + 1u] = s;
    } else {
        if i >= rows * cols { return; }
        let row = i / cols;
        let m = row_max(row);
        let s = d_to32(accs[2u * row + 1u]);
        if p[6] == 0u {
            dst[i] = canon(div(tr_exp(sub(xs[i], m)), s));
        } else {
            dst[i] = canon(sub(sub(xs[i], m), tr_log(s)));
        }
    }
}
