// softmax and log-softmax of rows: p = [zero, rows, cols, phase, start, len, log]. Per
// row (docs/arithmetic.md §3): m = the row's maximum (the canonical NaN if any element
// is NaN), plus +0; e_i = exp(x_i ⊖ m); s = Σ64 e_i rounded once; softmax y_i = e_i ⊘ s,
// log-softmax y_i = (x_i ⊖ m) ⊖ log(s). Phase 0: the row maximum over the columns
// start ≤ j < start + len, carried across dispatches in `accs[2·row]`; two kernels share
// this file and differ only there: `softmax_rows.wgsl` takes it with one invocation per
// row, `softmax_split.wgsl` with one workgroup per row (docs/gpu.md §5.5; the host
// chooses by the adapter). The maximum does not depend on the order of its comparisons
// (NaN if any is NaN, else the largest value, of which only a zero's sign depends on the
// order, and `+0` is added to it before any use), so both give the reference's bits.
// Phase 1, per row: the f64 sum of the exponentials over a range of columns in
// increasing order, carried in `accs[2·row + 1]` (not split: f64 addition is not
// associative). Phase 2, one invocation per element: the output.
@group(0) @binding(1) var<storage, read> xs: array<f32>;
@group(0) @binding(2) var<storage, read_write> accs: array<F64>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;

fn row_max(row: u32) -> f32 {
    return add(d_to32(accs[2u * row]), zero());
}

// Phase 0 with one invocation per row (`i`): NaN once any element is NaN, else the
// largest, from the carried maximum or `-∞`.
fn max_per_row(i: u32) {
    let rows = p[1];
    let cols = p[2];
    let start = p[4];
    let len = p[5];
    if i >= rows { return; }
    var m = -inf();
    if start != 0u { m = d_to32(accs[2u * i]); }
    for (var j = start; j < start + len; j = j + 1u) {
        if is_nan(m) { break; }
        let v = xs[i * cols + j];
        if is_nan(v) {
            m = nan_canonical();
        } else if v > m {
            m = v;
        }
    }
    accs[2u * i] = d_from(m);
}

// Phases 1 and 2 for invocation `i`.
fn sum_and_output(i: u32) {
    let rows = p[1];
    let cols = p[2];
    let start = p[4];
    let len = p[5];
    if p[3] == 1u {
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
