// matmul, tiled: the parameters of matmul.wgsl. One workgroup of 8 × 8 invocations per
// 8 × 8 block of outputs of one batch element. The block's rows of `a` and columns of `b`
// are staged in workgroup memory eight steps of k at a time (each invocation loads one
// element of each), then every invocation adds its products for those steps from its
// accumulator, q increasing, exactly as matmul.wgsl does: each output sums its k terms in
// increasing order from +0 (or from the carried accumulator), each step rounded as there
// (exact: the product through `opaque`, then the addition; fast: one `fma_rn`). Only the
// loads are shared; a step beyond the range is never added (not even as +0).
const T: u32 = 8u;
var<workgroup> ta: array<f32, 64>;
var<workgroup> tb: array<f32, 64>;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let m = p[2];
    let k = p[3];
    let n = p[4];
    let tm = (m + T - 1u) / T;
    let tn = (n + T - 1u) / T;
    let tile = wid.x + wid.y * nwg.x;
    // The same for every invocation of the workgroup: the barriers stay uniform.
    if tile >= p[1] * tm * tn { return; }
    let bi = tile / (tm * tn);
    let rem = tile % (tm * tn);
    let r0 = (rem / tn) * T;
    let c0 = (rem % tn) * T;
    let lr = li / T;
    let lc = li % T;
    let row = r0 + lr;
    let col = c0 + lc;
    let inside = row < m && col < n;
    let i = (bi * m + row) * n + col;
    let start = p[13];
    let end = start + p[14];
    let sa = p[8];
    let sb = p[11];
    let abase = p[5] + bi * p[6];
    let bbase = p[9] + bi * p[10];
    var acc = 0.0;
    if inside && start != 0u { acc = dst[i]; }
    for (var q0 = start; q0 < end; q0 = q0 + T) {
        let steps = min(T, end - q0);
        // ta[lr·8 + lc] = a[row r0 + lr, step q0 + lc]; tb[lr·8 + lc] = b[step q0 + lr,
        // column c0 + lc].
        var av = 0.0;
        var bv = 0.0;
        if row < m && lc < steps { av = a[abase + row * p[7] + (q0 + lc) * sa]; }
        if c0 + lc < n && lr < steps { bv = b[bbase + (q0 + lr) * sb + (c0 + lc) * p[12]]; }
        ta[li] = av;
        tb[li] = bv;
        workgroupBarrier();
        for (var t = 0u; t < steps; t = t + 1u) {
            let x = ta[lr * T + t];
            let y = tb[t * T + lc];
            if EXACT {
                acc = acc + opaque(x * y);
            } else {
                acc = fma_rn(x, y, acc);
            }
        }
        workgroupBarrier();
    }
    if !inside { return; }
    if end == k {
        dst[i] = canon(acc);
    } else {
        dst[i] = acc;
    }
}
