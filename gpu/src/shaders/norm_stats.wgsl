// norm_stats: p = [zero, Q, R, count, n bits, phase, start, len]. The input is a
// contiguous [P, Q, R] array, group q the elements (p·Q + q)·R + r in increasing row-major
// order, count = P·R of them (core's `norm_stats`). One invocation per group; each phase is
// an f64 sum over the group's elements start ≤ t < start + len (from +0 at start 0),
// carried across dispatches in `accs[q]`; the last range of a phase rounds it once to f32:
// phase 0 sums x, μ = canon(canon(Σ) ⊘ n) into `mean`; phase 1 sums x ⊖ μ, c =
// canon(canon(Σ) ⊘ n) into `corr`; phase 2 sums e·e with e = (x ⊖ μ) ⊖ c (an exact f64
// product), canon(Σ) into `sq`.
@group(0) @binding(1) var<storage, read> xs: array<f32>;
@group(0) @binding(2) var<storage, read_write> accs: array<F64>;
@group(0) @binding(3) var<storage, read_write> mean: array<f32>;
@group(0) @binding(4) var<storage, read_write> corr: array<f32>;
@group(0) @binding(5) var<storage, read_write> sq: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let q = linear(gid, nwg);
    let qq = p[1];
    if q >= qq { return; }
    let rr = p[2];
    let count = p[3];
    let n = bitcast<f32>(p[4]);
    let phase = p[5];
    let start = p[6];
    let len = p[7];
    // +0 the compiler cannot see (so `0 + x` is not folded to `x`: −0 must become +0).
    var acc = d_from(opaque(0.0));
    if start != 0u { acc = accs[q]; }
    if phase == 0u {
        for (var t = start; t < start + len; t = t + 1u) {
            let i = ((t / rr) * qq + q) * rr + t % rr;
            acc = d_add(acc, d_from(xs[i]));
        }
    } else if phase == 1u {
        let mu = mean[q];
        for (var t = start; t < start + len; t = t + 1u) {
            let i = ((t / rr) * qq + q) * rr + t % rr;
            acc = d_add(acc, d_from(sep_sub(xs[i], mu)));
        }
    } else {
        let mu = mean[q];
        let c = corr[q];
        for (var t = start; t < start + len; t = t + 1u) {
            let i = ((t / rr) * qq + q) * rr + t % rr;
            let e = sep_sub(sep_sub(xs[i], mu), c);
            acc = d_add(acc, d_mul(e, e));
        }
    }
    if start + len < count {
        accs[q] = acc;
        return;
    }
    let s = canon(d_to32(acc));
    if phase == 0u {
        mean[q] = canon(sep_div(s, n));
    } else if phase == 1u {
        corr[q] = canon(sep_div(s, n));
    } else {
        sq[q] = s;
    }
}
