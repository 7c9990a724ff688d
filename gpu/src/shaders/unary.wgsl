// unary: p = [zero, n, code, c0 bits, c1 bits, pow path, pow n, pow negative].
@group(0) @binding(1) var<storage, read> xs: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p[1] { return; }
    let x = xs[i];
    let c0 = bitcast<f32>(p[3]);
    let c1 = bitcast<f32>(p[4]);
    var r: f32;
    switch p[2] {
        case 0u: { r = neg(x); }
        case 1u: { r = bitcast<f32>(bitcast<u32>(x) & 0x7fffffffu); }
        case 2u: { if x > 0.0 || is_nan(x) { r = x; } else { r = 0.0; } }
        case 3u: { if x > 0.0 { r = x; } else { r = x * c0; } }
        case 4u: { r = f_sqrt(x); }
        case 5u: { r = pow_path(x, p[5], p[6], p[7], c0); }
        case 6u: {
            var t = x;
            if x < c0 { t = c0; }
            r = t;
            if t > c1 { r = c1; }
            if is_nan(x) { r = x; }
        }
        case 7u: { r = x + c0; }
        case 8u: { r = x * c0; }
        case 9u: { r = tr_sigmoid(x); }
        case 10u: { r = tr_tanh(x); }
        case 11u: { r = tr_exp(x); }
        case 12u: { r = tr_log(x); }
        case 13u: { r = gelu_erf(x); }
        default: { r = gelu_tanh(x); }
    }
    dst[i] = canon(r);
}
