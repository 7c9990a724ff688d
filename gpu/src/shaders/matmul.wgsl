// matmul: p = [zero, batch, m, k, n, a_off, a_s0, a_s1, a_s2, b_off, b_s0, b_s1, b_s2,
// k_start, k_len]; one invocation per output element, the steps k_start ≤ q < k_start +
// k_len of the canonical GEMM (from +0, q increasing). A long reduction is cut into
// several dispatches that carry the f32 accumulator in the output (the same sequence of
// roundings). Exact mode: each product rounded, then added (the product passes `opaque`,
// so the compiler cannot fuse the two). Fast mode: one correctly rounded fused
// multiply-add per step.
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    let m = p[2];
    let k = p[3];
    let n = p[4];
    if i >= p[1] * m * n { return; }
    let bi = i / (m * n);
    let row = (i / n) % m;
    let col = i % n;
    let start = p[13];
    let len = p[14];
    let sa = p[8];
    let sb = p[11];
    var ai = p[5] + bi * p[6] + row * p[7] + start * sa;
    var bj = p[9] + bi * p[10] + col * p[12] + start * sb;
    var acc = 0.0;
    if start != 0u { acc = dst[i]; }
    for (var q = 0u; q < len; q = q + 1u) {
        if EXACT {
            acc = acc + opaque(a[ai] * b[bj]);
        } else {
            acc = fma_rn(a[ai], b[bj], acc);
        }
        ai = ai + sa;
        bj = bj + sb;
    }
    if start + len == k {
        dst[i] = canon(acc);
    } else {
        dst[i] = acc;
    }
}
