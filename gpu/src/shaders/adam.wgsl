// adam_step: p = [zero, n, neg_step, w1, 1 − w1, |w1| < 0.5, beta2, w2, bc2_sqrt, eps,
// has weight decay, weight decay, has decoupled decay, decay, amsgrad, maximize]. One
// invocation per element: the operations of `AdamSpec::element`
// (core/src/kernels/optim.rs), each rounded on its own, in its order (`1 − w1` and
// `|w1| < 0.5` are the host's, computed once). `vmax` is read and written only with
// AMSGrad (it is empty otherwise).
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(2) var<storage, read_write> param: array<f32>;
@group(0) @binding(3) var<storage, read_write> exp_avg: array<f32>;
@group(0) @binding(4) var<storage, read_write> exp_avg_sq: array<f32>;
@group(0) @binding(5) var<storage, read_write> vmax: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p[1] { return; }
    var pi = param[i];
    var d = grad[i];
    if p[15] != 0u { d = flip_sign(d); }
    if p[12] != 0u { pi = sep_mul(pi, bitcast<f32>(p[13])); }
    if p[10] != 0u { d = sep_add(d, sep_mul(pi, bitcast<f32>(p[11]))); }
    let m0 = exp_avg[i];
    let delta = sep_sub(d, m0);
    var m: f32;
    if p[5] != 0u {
        m = sep_add(m0, sep_mul(delta, bitcast<f32>(p[3])));
    } else {
        m = sep_sub(d, sep_mul(delta, bitcast<f32>(p[4])));
    }
    let w2 = bitcast<f32>(p[7]);
    let v = sep_add(sep_mul(exp_avg_sq[i], bitcast<f32>(p[6])), sep_mul(sep_mul(d, w2), d));
    var second = v;
    if p[14] != 0u {
        let mx = vmax[i];
        // `vmax is NaN or vmax ≥ v`, with both NaN tests on the bits (a comparison with a
        // NaN `v` is false), and the choice made on the bits: the compiler may rewrite
        // neither into a maximum.
        let keep = is_nan(mx) || (!is_nan(v) && mx >= v);
        second = bitcast<f32>(select(bitcast<u32>(v), bitcast<u32>(mx), keep));
        vmax[i] = canon(second);
    }
    let denom = sep_add(sep_div(sep_sqrt(second), bitcast<f32>(p[8])), bitcast<f32>(p[9]));
    param[i] = canon(sep_add(pi, sep_div(sep_mul(m, bitcast<f32>(p[2])), denom)));
    exp_avg[i] = canon(m);
    exp_avg_sq[i] = canon(v);
}
