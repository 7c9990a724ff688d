// im2col: p = [zero, n, h, w, kh, kw, oh, ow, sh, sw, dh, dw, ph, pw]; one invocation per
// element of the columns `[c·kh·kw, oh·ow]`: the image's word at `(c, oh·sh + i·dh − ph,
// ow·sw + j·dw − pw)`, or `+0` (bits 0) in the padding (`exactgrad_core::kernels::im2col`).
// The host keeps every padded coordinate below 2^32.
@group(0) @binding(1) var<storage, read> image: array<u32>;
@group(0) @binding(2) var<storage, read_write> cols: array<u32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let m = linear(gid, nwg);
    if m >= p[1] { return; }
    let h = p[2];
    let w = p[3];
    let kh = p[4];
    let kw = p[5];
    let oh = p[6];
    let ow = p[7];
    let plen = oh * ow;
    let row = m / plen;
    let col = m % plen;
    let y = col / ow;
    let x = col % ow;
    let j = row % kw;
    let i = (row / kw) % kh;
    let ch = row / (kw * kh);
    let vr = y * p[8] + i * p[10];
    let vc = x * p[9] + j * p[11];
    let ph = p[12];
    let pw = p[13];
    var v = 0u;
    if vr >= ph && vr - ph < h && vc >= pw && vc - pw < w {
        v = image[(ch * h + (vr - ph)) * w + (vc - pw)];
    }
    cols[m] = v;
}
