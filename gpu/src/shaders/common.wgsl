// Shared by every kernel: the parameter words (binding 0), the linear invocation index
// and the storage offset of an element of a strided layout. `EXACT` and `WG` are
// prepended by the host.

@group(0) @binding(0) var<storage, read> p: array<u32>;

// The linear index of this invocation over a two-dimensional dispatch.
fn linear(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * WG;
}

// A layout packed at `base`: [rank, offset, shape[rank], strides[rank]]; returns the
// storage offset of the element with row-major index `i`.
fn layout_offset(base: u32, i: u32) -> u32 {
    let rank = p[base];
    var off = p[base + 1u];
    var r = i;
    var d = rank;
    loop {
        if d == 0u { break; }
        d = d - 1u;
        let size = p[base + 2u + d];
        let stride = p[base + 2u + rank + d];
        off = off + (r % size) * stride;
        r = r / size;
    }
    return off;
}

// Words a layout takes in the parameters.
fn layout_words(base: u32) -> u32 {
    return 2u + 2u * p[base];
}

fn is_nan(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}

// The canonical NaN in exact mode; any value unchanged otherwise.
fn canon(v: f32) -> f32 {
    if EXACT && is_nan(v) {
        return bitcast<f32>(0x7fc00000u);
    }
    return v;
}

// A value the compiler cannot see through: `v` with its bits xor-ed with parameter word 0,
// which the host sets to zero in every kernel. Keeps a product a separate rounding: no
// contraction into a fused multiply-add is possible across it.
fn opaque(v: f32) -> f32 {
    return bitcast<f32>(bitcast<u32>(v) ^ p[0]);
}

// One IEEE operation, rounded on its own: the result passes `opaque`, so the compiler can
// neither contract it with a neighbouring operation nor rewrite a chain of them with its
// inexact algebraic rules (the optimizer kernels; the transcendental functions have their
// own `add`, `sub`, `mul`, `div`).
fn sep_add(a: f32, b: f32) -> f32 { return opaque(a + b); }
fn sep_sub(a: f32, b: f32) -> f32 { return opaque(a - b); }
fn sep_mul(a: f32, b: f32) -> f32 { return opaque(a * b); }
fn sep_div(a: f32, b: f32) -> f32 { return opaque(f_div(a, b)); }
fn sep_sqrt(a: f32) -> f32 { return opaque(f_sqrt(a)); }

// `v` with its sign flipped (a bit operation, as Rust's `-v`).
fn flip_sign(v: f32) -> f32 {
    return bitcast<f32>(bitcast<u32>(v) ^ 0x80000000u);
}
