//! The vector forms of the exact transcendental functions, callable safely on any path.
//!
//! [`vector_form`] evaluates one of the [`Transcendental`] functions with the lane type of
//! an ISA path, inside a function compiled with that path's target features, exactly as
//! the kernels instantiate them. It checks that the CPU supports the path first, so the
//! lane types themselves never need to be reachable from safe code. The exhaustive test
//! (`backends/tests/exhaustive_vector.rs`) compares these forms with the scalar
//! definitions over all 2^32 inputs, and `backends/tests/sampled_vector.rs` on a dense
//! sample of them on every target (it is the check of the NEON path under emulation).
//!
//! The lane types are not part of the public API, so no safe call can execute an
//! instruction of a path the CPU lacks:
//!
//! ```compile_fail,E0603
//! use exactgrad_backends::cpu::simd::F32x16;
//! ```

use super::simd::SimdLane;
use super::{unsupported_isa, Isa};
use crate::lane::{Exact, Pair};
use crate::transcendental::generic as g;
use exactgrad_core::ComputeMode;

/// The exact transcendental functions (the forms of `docs/transcendentals.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transcendental {
    /// `exp(x)`.
    Exp,
    /// `ln(x)`.
    Log,
    /// `tanh(x)`.
    Tanh,
    /// `1 / (1 + exp(−x))`.
    Sigmoid,
    /// `erf(x)`.
    Erf,
    /// GELU, erf form.
    GeluErf,
    /// GELU, tanh form.
    GeluTanh,
    /// The slope of the erf form of GELU.
    GeluErfGrad,
    /// The slope of the tanh form of GELU.
    GeluTanhGrad,
}

impl Transcendental {
    /// Every function, in the order of `docs/transcendentals.md`.
    pub const ALL: [Transcendental; 9] = [
        Transcendental::Exp,
        Transcendental::Log,
        Transcendental::Tanh,
        Transcendental::Sigmoid,
        Transcendental::Erf,
        Transcendental::GeluErf,
        Transcendental::GeluTanh,
        Transcendental::GeluErfGrad,
        Transcendental::GeluTanhGrad,
    ];

    /// The function's name.
    pub fn name(self) -> &'static str {
        match self {
            Transcendental::Exp => "exp",
            Transcendental::Log => "log",
            Transcendental::Tanh => "tanh",
            Transcendental::Sigmoid => "sigmoid",
            Transcendental::Erf => "erf",
            Transcendental::GeluErf => "gelu_erf",
            Transcendental::GeluTanh => "gelu_tanh",
            Transcendental::GeluErfGrad => "gelu_erf_grad",
            Transcendental::GeluTanhGrad => "gelu_tanh_grad",
        }
    }

    /// The scalar definition (the `f32` instantiation of the exact form).
    pub fn scalar(self, x: f32) -> f32 {
        eval::<f32>(self, x)
    }
}

/// One lane of `f` (the exact form); called by name inside the target-feature functions
/// below so that it is inlined with their features.
#[inline(always)]
fn eval<L: crate::lane::Lane>(f: Transcendental, x: L) -> L {
    match f {
        Transcendental::Exp => g::exp::<L, Exact>(x),
        Transcendental::Log => g::log::<L, Exact>(x),
        Transcendental::Tanh => g::tanh::<L, Exact>(x),
        Transcendental::Sigmoid => g::sigmoid::<L, Exact>(x),
        Transcendental::Erf => g::erf::<L, Exact>(x),
        Transcendental::GeluErf => g::gelu_erf::<L, Exact>(x),
        Transcendental::GeluTanh => g::gelu_tanh::<L, Exact>(x),
        Transcendental::GeluErfGrad => g::gelu_erf_grad::<L, Exact>(x),
        Transcendental::GeluTanhGrad => g::gelu_tanh_grad::<L, Exact>(x),
    }
}

/// `out[i] = f(from_bits(x0 + i))` (wrapping) with lane `L`: pairs of full lanes
/// ([`Pair`]), one full lane, then the scalar tail (as the element-wise kernels do).
#[inline(always)]
fn run<L: SimdLane>(f: Transcendental, x0: u32, out: &mut [f32]) {
    let w = L::WIDTH;
    let n = out.len();
    let mut lane_in = [0.0f32; 32];
    let mut i = 0;
    while i + 2 * w <= n {
        for (j, v) in lane_in[..2 * w].iter_mut().enumerate() {
            *v = f32::from_bits(x0.wrapping_add((i + j) as u32));
        }
        // SAFETY: `lane_in` holds 32 ≥ 2·WIDTH readable f32s and `i + 2w <= n` bounds the
        // stores into `out`; as in the loop below, only under `L`'s target features.
        unsafe {
            let (p, q) = (lane_in.as_ptr(), out.as_mut_ptr().add(i));
            let r = eval::<Pair<L>>(f, Pair(L::load(p), L::load(p.add(w))));
            r.0.store(q);
            r.1.store(q.add(w));
        }
        i += 2 * w;
    }
    while i + w <= n {
        for (j, v) in lane_in[..w].iter_mut().enumerate() {
            *v = f32::from_bits(x0.wrapping_add((i + j) as u32));
        }
        // SAFETY: `lane_in` holds 32 ≥ WIDTH readable f32s and `i + w <= n` bounds the
        // store into `out`; the callers below run this only inside a function compiled
        // with `L`'s target features, on a CPU that `Isa::is_supported` confirmed has them.
        unsafe { eval::<L>(f, L::load(lane_in.as_ptr())).store(out.as_mut_ptr().add(i)) };
        i += w;
    }
    while i < n {
        out[i] = eval::<f32>(f, f32::from_bits(x0.wrapping_add(i as u32)));
        i += 1;
    }
}

macro_rules! path_fn {
    ($arch:literal, $name:ident, $lane:ty, $feature:literal) => {
        #[cfg(target_arch = $arch)]
        #[target_feature(enable = $feature)]
        /// # Safety
        /// The CPU must have the target features of this function.
        unsafe fn $name(f: Transcendental, x0: u32, out: &mut [f32]) {
            run::<$lane>(f, x0, out)
        }
    };
}

path_fn!("x86_64", run_avx512, super::simd::F32x16, "avx512f");
path_fn!("x86_64", run_avx2, super::simd::F32x8, "avx2,fma");
path_fn!("x86_64", run_v128, super::simd::F32x4, "sse2");
path_fn!("aarch64", run_neon, super::simd::F32x4, "neon");

/// Writes `f(from_bits(x0 + i))` (the bit patterns counting up from `x0`, wrapping) to
/// `out[i]` with the vector form of the exact function on path `isa`. Fails when the CPU
/// does not support the path (in exact mode).
pub fn vector_form(
    isa: Isa,
    f: Transcendental,
    x0: u32,
    out: &mut [f32],
) -> exactgrad_core::Result<()> {
    if !isa.is_supported(ComputeMode::Exact) {
        return Err(unsupported_isa(isa, ComputeMode::Exact));
    }
    match isa {
        // SAFETY: `is_supported` confirmed the path's target features on this CPU.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { run_avx512(f, x0, out) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { run_avx2(f, x0, out) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Isa::V128 => unsafe { run_v128(f, x0, out) },
        // SAFETY: as above.
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => unsafe { run_neon(f, x0, out) },
        _ => run::<f32>(f, x0, out),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_supported_path_gives_the_scalar_bits_on_a_sample() {
        let mut out = [0.0f32; 1000];
        for f in Transcendental::ALL {
            for isa in Isa::ALL {
                for x0 in [0u32, 0x3f80_0000, 0x7f7f_fc00, 0xbf00_0000, 0xffff_fe00] {
                    if vector_form(isa, f, x0, &mut out).is_err() {
                        continue;
                    }
                    for (i, v) in out.iter().enumerate() {
                        let want = f.scalar(f32::from_bits(x0.wrapping_add(i as u32)));
                        assert_eq!(v.to_bits(), want.to_bits(), "{} on {isa}", f.name());
                    }
                }
            }
        }
    }
}
