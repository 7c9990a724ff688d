// dropout_mask: p = [zero, n, key lo, key hi, start lo, start hi, threshold, scale bits].
// One invocation per element `i`: the Philox4x32-10 block (core/src/rng.rs) at counter
// `[block lo, block hi, 0, 0]` with `block = (start + i) / 4`, its word `(start + i) mod 4`;
// the element keeps (`scale`'s bits) when the word's top 24 bits are at least the
// threshold `⌈p · 2^24⌉` (the reference's `unit_f32(word) >= p`, in integers), else +0.
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;

// The high word of the 64-bit product `a · b`, from 16-bit pieces.
fn mulhi(a: u32, b: u32) -> u32 {
    let a0 = a & 0xffffu;
    let a1 = a >> 16u;
    let b0 = b & 0xffffu;
    let b1 = b >> 16u;
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let p11 = a1 * b1;
    let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
    return p11 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
}

fn philox(counter: vec4<u32>, key: vec2<u32>) -> vec4<u32> {
    var c = counter;
    var k = key;
    for (var round = 0u; round < 10u; round = round + 1u) {
        if round > 0u {
            k = k + vec2<u32>(0x9E3779B9u, 0xBB67AE85u);
        }
        let hi0 = mulhi(0xD2511F53u, c.x);
        let lo0 = 0xD2511F53u * c.x;
        let hi1 = mulhi(0xCD9E8D57u, c.z);
        let lo1 = 0xCD9E8D57u * c.z;
        c = vec4<u32>(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
    }
    return c;
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p[1] { return; }
    // index = start + i in 64 bits.
    let lo = p[4] + i;
    let hi = p[5] + select(0u, 1u, lo < i);
    let block = vec2<u32>((lo >> 2u) | (hi << 30u), hi >> 2u);
    let words = philox(vec4<u32>(block.x, block.y, 0u, 0u), vec2<u32>(p[2], p[3]));
    let w = words[lo & 3u];
    dst[i] = select(0u, p[7], (w >> 8u) >= p[6]);
}
