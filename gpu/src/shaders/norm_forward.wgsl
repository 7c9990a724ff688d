// norm_forward: p = [zero, elements, Q, R, has weight, has bias, param kind, groups, cpg,
// spatial]. One invocation per element i = (p·Q + q)·R + r of the [P, Q, R] input (core's
// `norm_forward`): y = ((x ⊖ μ) ⊖ c) ⊗ r, then ⊗ w and ⊕ b when given, each operation
// rounded on its own; canon(y).
@group(0) @binding(1) var<storage, read> xs: array<f32>;
@group(0) @binding(2) var<storage, read> mean: array<f32>;
@group(0) @binding(3) var<storage, read> corr: array<f32>;
@group(0) @binding(4) var<storage, read> rstd: array<f32>;
@group(0) @binding(5) var<storage, read> weight: array<f32>;
@group(0) @binding(6) var<storage, read> bias: array<f32>;
@group(0) @binding(7) var<storage, read_write> dst: array<f32>;

// The parameter index of (q, r) (core's `NormSpec::param_index`).
fn param_index(q: u32, r: u32) -> u32 {
    let kind = p[6];
    if kind == 0u { return q; }
    if kind == 1u { return r; }
    return (q % p[7]) * p[8] + r / max(p[9], 1u);
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p[1] { return; }
    let qq = p[2];
    let rr = p[3];
    let q = (i / rr) % qq;
    let r = i % rr;
    var y = sep_mul(sep_sub(sep_sub(xs[i], mean[q]), corr[q]), rstd[q]);
    if p[4] != 0u { y = sep_mul(y, weight[param_index(q, r)]); }
    if p[5] != 0u { y = sep_add(y, bias[param_index(q, r)]); }
    dst[i] = canon(y);
}
