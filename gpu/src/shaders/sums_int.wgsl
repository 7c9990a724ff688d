// The f64 of the sums of rule 3 (docs/arithmetic.md §1) without device f64, or when
// `EXACTGRAD_GPU_INT_F64` asks for it: binary64 emulated in 32-bit integers
// (f64_int.wgsl), the same bits as the host's f64.
alias F64 = vec2<u32>;
fn d_zero() -> F64 { return vec2<u32>(0u, 0u); }
fn d_from(x: f32) -> F64 { return soft64_from32(x); }
fn d_add(a: F64, b: F64) -> F64 { return soft64_add(a, b); }
fn d_mul(x: f32, y: f32) -> F64 { return soft64_mul32(x, y); }
fn d_to32(a: F64) -> f32 { return soft64_to32(a); }
