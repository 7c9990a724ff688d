// unary_backward: p = [zero, n, code, c0 bits, c1 bits, pow path, pow n, pow negative,
// clamp flags (bit 0: no lower bound, bit 1: no upper bound)].
@group(0) @binding(1) var<storage, read> xs: array<f32>;
@group(0) @binding(2) var<storage, read> ys: array<f32>;
@group(0) @binding(3) var<storage, read> gs: array<f32>;
@group(0) @binding(4) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p[1] { return; }
    let x = xs[i];
    let y = ys[i];
    let g = gs[i];
    let c0 = bitcast<f32>(p[3]);
    let c1 = bitcast<f32>(p[4]);
    var r: f32;
    switch p[2] {
        case 0u: { r = neg(g); }
        case 1u: { if x > 0.0 { r = g; } else if x < 0.0 { r = neg(g); } else { r = 0.0; } }
        case 2u: { if y <= 0.0 { r = 0.0; } else { r = g; } }
        case 3u: { if x > 0.0 { r = g; } else { r = g * c0; } }
        case 4u: { r = g * (y * (1.0 - y)); }
        case 5u: { r = g * (1.0 - opaque(y * y)); }
        case 6u: { r = g * y; }
        case 7u: { r = f_div(g, x); }
        case 8u: { r = f_div(g, 2.0 * y); }
        case 9u: { r = 0.0; }
        case 10u: { r = g * (c0 * pow_path(x, p[5], p[6], p[7], c1)); }
        case 11u: {
            let above = (p[8] & 1u) != 0u || x > c0;
            let below = (p[8] & 2u) != 0u || x < c1;
            if above && below { r = g; } else { r = 0.0; }
        }
        case 12u: { r = g; }
        case 13u: { r = g * c0; }
        case 14u: { r = g * gelu_erf_grad(x); }
        default: { r = g * gelu_tanh_grad(x); }
    }
    dst[i] = canon(r);
}
