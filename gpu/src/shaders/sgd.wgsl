// sgd_step: p = [zero, n, neg_lr, has weight decay, weight decay, has momentum, momentum,
// dampening (1 − τ), nesterov, first, maximize]. One invocation per element: the
// operations of `SgdSpec::element` (core/src/kernels/optim.rs), each rounded on its own,
// in its order. The momentum buffer is read and written only with momentum (it is empty
// otherwise).
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(2) var<storage, read_write> param: array<f32>;
@group(0) @binding(3) var<storage, read_write> buf: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p[1] { return; }
    let neg_lr = bitcast<f32>(p[2]);
    let pi = param[i];
    var d = grad[i];
    if p[10] != 0u { d = flip_sign(d); }
    if p[3] != 0u { d = sep_add(d, sep_mul(pi, bitcast<f32>(p[4]))); }
    if p[5] != 0u {
        let mu = bitcast<f32>(p[6]);
        var b = d;
        if p[9] == 0u {
            b = sep_add(sep_mul(buf[i], mu), sep_mul(d, bitcast<f32>(p[7])));
        }
        if p[8] != 0u {
            d = sep_add(d, sep_mul(b, mu));
        } else {
            d = b;
        }
        buf[i] = canon(b);
    }
    param[i] = canon(sep_add(pi, sep_mul(d, neg_lr)));
}
