//! The vector forms of the exact transcendental functions equal their scalar form bit for
//! bit over all 2^32 f32 inputs, on every vector path of this machine.
//!
//! For each function (exp, log, tanh, sigmoid, erf, gelu_erf, gelu_tanh, gelu_erf_grad,
//! gelu_tanh_grad) the scalar form is the `f32` instantiation of
//! `transcendental::generic` with `Exact`; each vector form is the same generic code
//! instantiated on a lane type (`F32x16`, `F32x8`, `F32x4`) inside a function compiled
//! with that path's target features, exactly as the CPU backends instantiate it.
//!
//! The scalar form is evaluated by a plain loop over `f32` compiled with AVX-512 enabled
//! when the CPU has it, which lets the compiler auto-vectorise it: that is a
//! semantics-preserving compilation of the same scalar IEEE operations, independent of
//! the hand-written lane types under test, and four to five times faster than the
//! baseline build (which would take the scan well past its time budget). Every 64th block
//! is also checked against the scalar form compiled for the baseline target. Inputs are
//! visited in blocks; a path the CPU lacks is reported as skipped. Release only: a debug
//! build prints that it needs `--release`.
//!
//! Not part of `cargo test --workspace`: the test needs the `exhaustive` feature and runs,
//! with its twin, as
//! `cargo test -p exactgrad-backends --release --features exhaustive --test exhaustive_transcendentals --test exhaustive_vector`.

#[cfg(target_arch = "x86_64")]
mod x86 {
    use exactgrad_backends::cpu::simd::{F32x16, F32x4, F32x8, SimdLane};
    use exactgrad_backends::cpu::Isa;
    use exactgrad_backends::lane::{Exact, Lane};

    use exactgrad_backends::transcendental::generic as g;
    use exactgrad_core::ComputeMode;
    use std::time::Instant;

    /// Inputs per block.
    const BLOCK: usize = 1 << 16;

    /// `f32::from_bits(j)` for the lane index `j`: added to a splatted base as integers,
    /// it gives consecutive bit patterns in consecutive lanes.
    const IOTA: [f32; 16] = {
        let mut a = [0.0f32; 16];
        let mut j = 0;
        while j < 16 {
            a[j] = f32::from_bits(j as u32);
            j += 1;
        }
        a
    };

    /// A target-feature function writing `f(from_bits(x0 + i))` to `out[i]` with lane type
    /// `$lane` (BLOCK is a multiple of every width). The generic function is called by name
    /// inside the function so that it is inlined with the path's features, as in the
    /// backends (passing it as a value would compile it without them).
    macro_rules! vector_fn {
        ($name:ident, $lane:ty, $feature:literal, $f:ident) => {
            #[target_feature(enable = $feature)]
            pub unsafe fn $name(x0: u32, out: &mut [f32; BLOCK]) {
                type L = $lane;
                // SAFETY: IOTA holds 16 >= WIDTH elements; the lane's target features are
                // this function's, which `run` calls only after `Isa::is_supported`.
                let iota = unsafe { L::load(IOTA.as_ptr()) }.to_bits();
                let mut i = 0;
                while i < BLOCK {
                    let x =
                        L::from_bits(L::bits_add(iota, L::bits_splat(x0.wrapping_add(i as u32))));
                    // SAFETY: i + WIDTH <= BLOCK = out.len() (BLOCK is a multiple of
                    // WIDTH); the lane's target features are this function's.
                    unsafe { g::$f::<L, Exact>(x).store(out.as_mut_ptr().add(i)) };
                    i += L::WIDTH;
                }
            }
        };
    }

    macro_rules! exhaustive {
        ($test:ident, $f:ident) => {
            mod $f {
                use super::*;

                #[inline(never)]
                pub fn scalar(x0: u32, out: &mut [f32; BLOCK]) {
                    for (i, o) in out.iter_mut().enumerate() {
                        *o = g::$f::<f32, Exact>(f32::from_bits(x0.wrapping_add(i as u32)));
                    }
                }

                /// The same scalar loop compiled with AVX-512 enabled (auto-vectorised).
                #[target_feature(enable = "avx512f")]
                pub unsafe fn scalar_wide(x0: u32, out: &mut [f32; BLOCK]) {
                    for (i, o) in out.iter_mut().enumerate() {
                        *o = g::$f::<f32, Exact>(f32::from_bits(x0.wrapping_add(i as u32)));
                    }
                }

                vector_fn!(avx512, F32x16, "avx512f", $f);
                vector_fn!(avx2, F32x8, "avx2,fma", $f);
                vector_fn!(v128, F32x4, "sse2", $f);
            }

            #[test]
            fn $test() {
                run(
                    stringify!($f),
                    $f::scalar,
                    $f::scalar_wide,
                    [
                        (Isa::Avx512, $f::avx512 as unsafe fn(u32, &mut [f32; BLOCK])),
                        (Isa::Avx2, $f::avx2),
                        (Isa::V128, $f::v128),
                    ],
                );
            }
        };
    }

    type VectorFn = unsafe fn(u32, &mut [f32; BLOCK]);

    fn run(
        name: &str,
        scalar: fn(u32, &mut [f32; BLOCK]),
        scalar_wide: VectorFn,
        paths: [(Isa, VectorFn); 3],
    ) {
        if cfg!(debug_assertions) {
            println!("{name}: the exhaustive comparison needs --release (skipped in debug builds)");
            return;
        }
        let paths: Vec<(Isa, VectorFn)> = paths
            .into_iter()
            .filter(|(isa, _)| {
                let ok = isa.is_supported(ComputeMode::Exact);
                if !ok {
                    println!("{name}: skipped the {isa} path (not supported by this CPU)");
                }
                ok
            })
            .collect();
        let t = Instant::now();
        let mut want = Box::new([0.0f32; BLOCK]);
        let mut got = Box::new([0.0f32; BLOCK]);
        let mut failures = Vec::new();
        let wide = std::is_x86_feature_detected!("avx512f");
        let mut x0 = 0u32;
        let mut block = 0usize;
        loop {
            if wide {
                // SAFETY: AVX-512F was detected.
                unsafe { scalar_wide(x0, &mut want) };
                if block & 63 == 0 {
                    scalar(x0, &mut got);
                    let same = got
                        .iter()
                        .zip(want.iter())
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(
                        same,
                        "{name}: the two compilations of the scalar form differ near 0x{x0:08X}"
                    );
                }
            } else {
                scalar(x0, &mut want);
            }
            block += 1;
            for &(isa, f) in &paths {
                // SAFETY: the path's target features were confirmed above.
                unsafe { f(x0, &mut got) };
                if got[..] != want[..]
                    || got
                        .iter()
                        .zip(want.iter())
                        .any(|(a, b)| a.to_bits() != b.to_bits())
                {
                    for i in 0..BLOCK {
                        if got[i].to_bits() != want[i].to_bits() && failures.len() < 10 {
                            failures.push(format!(
                                "{name} on {isa}: x = 0x{:08X}: vector 0x{:08X}, scalar 0x{:08X}",
                                x0.wrapping_add(i as u32),
                                got[i].to_bits(),
                                want[i].to_bits()
                            ));
                        }
                    }
                }
            }
            x0 = x0.wrapping_add(BLOCK as u32);
            if x0 == 0 {
                break;
            }
        }
        let names: Vec<&str> = paths.iter().map(|p| p.0.name()).collect();
        println!(
            "{name}: 2^32 inputs on {names:?} in {:.1} s",
            t.elapsed().as_secs_f64()
        );
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    exhaustive!(exp_vector_equals_scalar, exp);
    exhaustive!(log_vector_equals_scalar, log);
    exhaustive!(tanh_vector_equals_scalar, tanh);
    exhaustive!(sigmoid_vector_equals_scalar, sigmoid);
    exhaustive!(erf_vector_equals_scalar, erf);
    exhaustive!(gelu_erf_vector_equals_scalar, gelu_erf);
    exhaustive!(gelu_tanh_vector_equals_scalar, gelu_tanh);
    exhaustive!(gelu_erf_grad_vector_equals_scalar, gelu_erf_grad);
    exhaustive!(gelu_tanh_grad_vector_equals_scalar, gelu_tanh_grad);
}

#[cfg(not(target_arch = "x86_64"))]
#[test]
fn vector_paths_need_x86_64() {
    println!("skipped: this machine has no vector path (only the scalar one)");
}
