// norm_backward, ∂x: p = [zero, elements, Q, R, count, n bits, has weight, param kind,
// groups, cpg, spatial, stats depend, phase, start, len] (core's `norm_backward`). With
// x̂ = ((x ⊖ μ) ⊖ c) ⊗ r and ĝ = g ⊗ w (g without a weight), each operation rounded on
// its own. Phase 0, one invocation per group q (only when the statistics depend on x):
// a = Σ64 ĝ and b = Σ64 ĝ·x̂ (exact f64 products) over the group's elements start ≤ t <
// start + len in increasing row-major order, carried in `accs[2q]`, `accs[2q + 1]`.
// Phase 1, one invocation per element: ∂x = canon(((ĝ ⊖ a/n) ⊖ x̂ ⊗ b/n) ⊗ r) with a and
// b rounded once to f32 and divided by n, or canon(ĝ ⊗ r) without the statistics' terms.
@group(0) @binding(1) var<storage, read> xs: array<f32>;
@group(0) @binding(2) var<storage, read> gs: array<f32>;
@group(0) @binding(3) var<storage, read> mean: array<f32>;
@group(0) @binding(4) var<storage, read> corr: array<f32>;
@group(0) @binding(5) var<storage, read> rstd: array<f32>;
@group(0) @binding(6) var<storage, read> weight: array<f32>;
@group(0) @binding(7) var<storage, read_write> accs: array<F64>;
@group(0) @binding(8) var<storage, read_write> dst: array<f32>;

// The parameter index of (q, r) (core's `NormSpec::param_index`).
fn param_index(q: u32, r: u32) -> u32 {
    let kind = p[7];
    if kind == 0u { return q; }
    if kind == 1u { return r; }
    return (q % p[8]) * p[9] + r / max(p[10], 1u);
}

fn xhat(q: u32, i: u32) -> f32 {
    return sep_mul(sep_sub(sep_sub(xs[i], mean[q]), corr[q]), rstd[q]);
}

fn ghat(q: u32, r: u32, i: u32) -> f32 {
    if p[6] != 0u { return sep_mul(gs[i], weight[param_index(q, r)]); }
    return gs[i];
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let j = linear(gid, nwg);
    let qq = p[2];
    let rr = p[3];
    let n = bitcast<f32>(p[5]);
    if p[12] == 0u {
        let q = j;
        if q >= qq { return; }
        let start = p[13];
        let len = p[14];
        var a = d_from(opaque(0.0));
        var b = d_from(opaque(0.0));
        if start != 0u {
            a = accs[2u * q];
            b = accs[2u * q + 1u];
        }
        for (var t = start; t < start + len; t = t + 1u) {
            let r = t % rr;
            let i = ((t / rr) * qq + q) * rr + r;
            let gh = ghat(q, r, i);
            a = d_add(a, d_from(gh));
            b = d_add(b, d_mul(gh, xhat(q, i)));
        }
        accs[2u * q] = a;
        accs[2u * q + 1u] = b;
        return;
    }
    let i = j;
    if i >= p[1] { return; }
    let q = (i / rr) % qq;
    let r = i % rr;
    let gh = ghat(q, r, i);
    var v: f32;
    if p[11] != 0u {
        let mean_g = sep_div(d_to32(accs[2u * q]), n);
        let mean_gx = sep_div(d_to32(accs[2u * q + 1u]), n);
        v = sep_mul(sep_sub(sep_sub(gh, mean_g), sep_mul(xhat(q, i), mean_gx)), rstd[q]);
    } else {
        v = sep_mul(gh, rstd[q]);
    }
    dst[i] = canon(v);
}
