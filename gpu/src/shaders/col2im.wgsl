// col2im: p = [zero, n, h, w, kh, kw, oh, ow, sh, sw, dh, dw, ph, pw, nr, nc, sr, sc,
// total, start, len]; one invocation per image element `(c, r, q)`: from `+0` it adds, each
// addition rounded on its own, the column values that map onto it in the order of the
// reference's loops (`exactgrad_core::kernels::col2im`: output position `(y, x)`, then tap
// `(i, j)`, lexicographically), and the last dispatch stores `canon` of the sum; a longer
// sum is cut into dispatches that carry it in `image` (`start` > 0 reads it back).
//
// The contributions are the pairs (y, i) with y·sh + i·dh = r + ph (in `nr` groups of `sr`
// taps, grouped by y in increasing order) times the pairs (x, j) with x·sw + j·dw = q + pw
// (`nc` groups of `sc`), visited as (row group, column group, i, j) through one flat index
// `t` < `total` = nr·nc·sr·sc. The host keeps every padded coordinate below 2^32.
@group(0) @binding(1) var<storage, read> cols: array<f32>;
@group(0) @binding(2) var<storage, read_write> image: array<f32>;

// Group `g` of the taps along one axis onto padded coordinate `v` (`k` taps, `o` output
// positions, stride `s`, dilation `d`): (1 when it has taps, output position, first tap).
// With d ≥ 1 each output position has at most one tap, and s ≥ 1 orders the positions by
// decreasing tap (k groups); with s = 0 every position has the same tap (o groups); with
// d = 0 a position has all k taps or none (one group with s ≥ 1, o groups with s = 0).
fn tap_group(g: u32, v: u32, k: u32, o: u32, s: u32, d: u32) -> vec3<u32> {
    if d != 0u {
        if s != 0u {
            let i = k - 1u - g;
            let id = i * d;
            if id > v { return vec3<u32>(0u, 0u, 0u); }
            let rest = v - id;
            if rest % s != 0u || rest / s >= o { return vec3<u32>(0u, 0u, 0u); }
            return vec3<u32>(1u, rest / s, i);
        }
        if v % d != 0u || v / d >= k { return vec3<u32>(0u, 0u, 0u); }
        return vec3<u32>(1u, g, v / d);
    }
    if s != 0u {
        if v % s != 0u || v / s >= o { return vec3<u32>(0u, 0u, 0u); }
        return vec3<u32>(1u, v / s, 0u);
    }
    if v != 0u { return vec3<u32>(0u, 0u, 0u); }
    return vec3<u32>(1u, g, 0u);
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = linear(gid, nwg);
    if e >= p[1] { return; }
    let h = p[2];
    let w = p[3];
    let kh = p[4];
    let kw = p[5];
    let oh = p[6];
    let ow = p[7];
    let nc = p[15];
    let sr = p[16];
    let sc = p[17];
    let total = p[18];
    let start = p[19];
    let len = p[20];
    let q = e % w;
    let r = (e / w) % h;
    let ch = e / (w * h);
    let vr = r + p[12];
    let vc = q + p[13];
    let plen = oh * ow;
    var acc = 0.0;
    if start != 0u { acc = image[e]; }
    for (var t = start; t < start + len; t = t + 1u) {
        let jj = t % sc;
        let t1 = t / sc;
        let ii = t1 % sr;
        let t2 = t1 / sr;
        let gc = t2 % nc;
        let gr = t2 / nc;
        let rg = tap_group(gr, vr, kh, oh, p[8], p[10]);
        if rg.x == 0u { continue; }
        let cg = tap_group(gc, vc, kw, ow, p[9], p[11]);
        if cg.x == 0u { continue; }
        let i = rg.z + ii;
        let j = cg.z + jj;
        acc = sep_add(acc, cols[((ch * kh + i) * kw + j) * plen + rg.y * ow + cg.y]);
    }
    if start + len == total {
        image[e] = canon(acc);
    } else {
        image[e] = acc;
    }
}
