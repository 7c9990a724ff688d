// attention_scores: p = [zero, n, cols (S, at least 1), l (at least 1), scale, causal,
// mask kind (0 none, 1 additive, 2 allow, 3 block), mask layout (with a mask)]. One
// invocation per score, in place: the operations of `AttentionScoresSpec::element`
// (core/src/kernels/attention.rs), each rounded on its own, then `canon`. The mask tests
// compare bits (`±0` is zero, a NaN is not), as the reference's `== 0.0` and `!= 0.0`.
@group(0) @binding(1) var<storage, read> mask: array<f32>;
@group(0) @binding(2) var<storage, read_write> scores: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = linear(gid, nwg);
    if i >= p[1] { return; }
    let neg_inf = bitcast<f32>(0xff800000u);
    var x = sep_mul(scores[i], bitcast<f32>(p[4]));
    let kind = p[6];
    if kind != 0u {
        let mv = mask[layout_offset(7u, i)];
        let zero = (bitcast<u32>(mv) & 0x7fffffffu) == 0u;
        if kind == 1u {
            x = sep_add(x, mv);
        } else if kind == 2u && zero {
            x = neg_inf;
        } else if kind == 3u && !zero {
            x = neg_inf;
        }
    }
    if p[5] != 0u && i % p[2] > (i / p[2]) % p[3] {
        x = neg_inf;
    }
    scores[i] = canon(x);
}
