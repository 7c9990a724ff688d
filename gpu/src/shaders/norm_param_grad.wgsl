// norm_backward, ∂w and ∂b: p = [zero, params, P, Q, R, param kind, groups, cpg, spatial,
// count, which, start, len] (core's `norm_backward` through `NormSpec::for_param`). One
// invocation per parameter k: over the elements that use k in increasing row-major order
// (count of them; those start ≤ t < start + len in this dispatch), ∂w (which = 0) sums
// g·x̂ with x̂ = ((x ⊖ μ) ⊖ c) ⊗ r (exact f64 products), ∂b (which = 1) sums g, in f64
// from +0, carried across dispatches in `accs[k]`; the last range rounds once to f32.
@group(0) @binding(1) var<storage, read> xs: array<f32>;
@group(0) @binding(2) var<storage, read> gs: array<f32>;
@group(0) @binding(3) var<storage, read> mean: array<f32>;
@group(0) @binding(4) var<storage, read> corr: array<f32>;
@group(0) @binding(5) var<storage, read> rstd: array<f32>;
@group(0) @binding(6) var<storage, read_write> accs: array<F64>;
@group(0) @binding(7) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let k = linear(gid, nwg);
    if k >= p[1] { return; }
    let qq = p[3];
    let rr = p[4];
    let kind = p[5];
    let groups = p[6];
    let cpg = max(p[7], 1u);
    let spatial = p[8];
    let count = p[9];
    let which = p[10];
    let start = p[11];
    let len = p[12];
    // Group layout: the groups' channels k / cpg + m·groups, positions of channel k % cpg.
    let per_p = (qq / max(groups, 1u)) * spatial;
    var acc = d_from(opaque(0.0));
    if start != 0u { acc = accs[k]; }
    for (var t = start; t < start + len; t = t + 1u) {
        var q: u32;
        var r: u32;
        var pp: u32;
        if kind == 0u {
            pp = t / rr;
            q = k;
            r = t % rr;
        } else if kind == 1u {
            pp = t / qq;
            q = t % qq;
            r = k;
        } else {
            pp = t / per_p;
            let rem = t % per_p;
            q = k / cpg + (rem / spatial) * groups;
            r = (k % cpg) * spatial + rem % spatial;
        }
        let i = (pp * qq + q) * rr + r;
        if which == 0u {
            let xh = sep_mul(sep_sub(sep_sub(xs[i], mean[q]), corr[q]), rstd[q]);
            acc = d_add(acc, d_mul(gs[i], xh));
        } else {
            acc = d_add(acc, d_from(gs[i]));
        }
    }
    if start + len < count {
        accs[k] = acc;
    } else {
        dst[k] = canon(d_to32(acc));
    }
}
