//! The vector forms of the exact transcendental functions equal their scalar form bit for
//! bit over all 2^32 f32 inputs, on every x86-64 vector path of this machine (the NEON path
//! has the sampled twin `sampled_vector.rs`, which runs on every target).
//!
//! For each function (exp, log, tanh, sigmoid, erf, gelu_erf, gelu_tanh, gelu_erf_grad,
//! gelu_tanh_grad) the scalar form is the `f32` instantiation of
//! `transcendental::generic` with `Exact`; each vector form is the same generic code
//! instantiated on a path's lane type inside a function compiled with that path's target
//! features, exactly as the CPU backends instantiate it (reached through the safe
//! `exactgrad_backends::cpu::vector_forms::vector_form`, which checks the CPU first).
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
    use exactgrad_backends::cpu::vector_forms::{vector_form, Transcendental};
    use exactgrad_backends::cpu::Isa;
    use exactgrad_backends::lane::Exact;
    use exactgrad_backends::transcendental::generic as g;
    use exactgrad_core::ComputeMode;
    use std::time::Instant;

    /// Inputs per block.
    const BLOCK: usize = 1 << 16;

    macro_rules! exhaustive {
        ($test:ident, $f:ident, $which:expr) => {
            mod $f {
                use super::*;

                #[inline(never)]
                pub fn scalar(x0: u32, out: &mut [f32; BLOCK]) {
                    for (i, o) in out.iter_mut().enumerate() {
                        *o = g::$f::<f32, Exact>(f32::from_bits(x0.wrapping_add(i as u32)));
                    }
                }

                /// The same scalar loop compiled with AVX-512 enabled (auto-vectorised).
                ///
                /// # Safety
                /// The CPU must have AVX-512F.
                #[target_feature(enable = "avx512f")]
                pub unsafe fn scalar_wide(x0: u32, out: &mut [f32; BLOCK]) {
                    for (i, o) in out.iter_mut().enumerate() {
                        *o = g::$f::<f32, Exact>(f32::from_bits(x0.wrapping_add(i as u32)));
                    }
                }
            }

            #[test]
            fn $test() {
                run(stringify!($f), $which, $f::scalar, $f::scalar_wide);
            }
        };
    }

    type WideFn = unsafe fn(u32, &mut [f32; BLOCK]);

    fn run(
        name: &str,
        which: Transcendental,
        scalar: fn(u32, &mut [f32; BLOCK]),
        scalar_wide: WideFn,
    ) {
        if cfg!(debug_assertions) {
            println!("{name}: the exhaustive comparison needs --release (skipped in debug builds)");
            return;
        }
        let paths: Vec<Isa> = [Isa::Avx512, Isa::Avx2, Isa::V128]
            .into_iter()
            .filter(|isa| {
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
            for &isa in &paths {
                vector_form(isa, which, x0, &mut got[..]).expect("the path was checked above");
                if got
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
        let names: Vec<&str> = paths.iter().map(|p| p.name()).collect();
        println!(
            "{name}: 2^32 inputs on {names:?} in {:.1} s",
            t.elapsed().as_secs_f64()
        );
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    exhaustive!(exp_vector_equals_scalar, exp, Transcendental::Exp);
    exhaustive!(log_vector_equals_scalar, log, Transcendental::Log);
    exhaustive!(tanh_vector_equals_scalar, tanh, Transcendental::Tanh);
    exhaustive!(
        sigmoid_vector_equals_scalar,
        sigmoid,
        Transcendental::Sigmoid
    );
    exhaustive!(erf_vector_equals_scalar, erf, Transcendental::Erf);
    exhaustive!(
        gelu_erf_vector_equals_scalar,
        gelu_erf,
        Transcendental::GeluErf
    );
    exhaustive!(
        gelu_tanh_vector_equals_scalar,
        gelu_tanh,
        Transcendental::GeluTanh
    );
    exhaustive!(
        gelu_erf_grad_vector_equals_scalar,
        gelu_erf_grad,
        Transcendental::GeluErfGrad
    );
    exhaustive!(
        gelu_tanh_grad_vector_equals_scalar,
        gelu_tanh_grad,
        Transcendental::GeluTanhGrad
    );
}
