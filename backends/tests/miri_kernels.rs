//! Every kernel of `ExactBackend` and `FastBackend` on a few small cases of the
//! conformance kit (bits equal to the scalar references) and the kit's invalid-argument
//! probes. Small enough to run under Miri (`.ci/miri`, docs/robustness.md, "Miri"),
//! which then checks the `unsafe` blocks of the kernels (lane loads and stores, GEMM
//! packing, the row kernels) for undefined behaviour. Under Miri: the scalar path on one
//! thread (Miri does not implement the x86 SIMD intrinsics of the vector paths); outside
//! Miri: every path this CPU supports, on 1 and 2 threads.

use exactgrad_backends::conformance::{check_invalid_arguments, check_kernel, Config, Kernel};
use exactgrad_backends::cpu::{CpuBackend, Isa};
use exactgrad_backends::lane::{Exact, Fast};
use exactgrad_backends::scalar::ModeSpec;
use exactgrad_backends::{FastScalarRefBackend, ScalarRefBackend};
use exactgrad_core::Backend;

/// The paths under test: the scalar path on one thread under Miri, else every supported
/// path on 1 and 2 threads.
fn paths<M: ModeSpec>() -> Vec<CpuBackend<M>> {
    let (isas, threads): (&[Isa], &[usize]) = if cfg!(miri) {
        (&[Isa::Scalar], &[1])
    } else {
        (&Isa::ALL, &[1, 2])
    };
    let mut v = Vec::new();
    for &isa in isas {
        for &threads in threads {
            if let Ok(b) = CpuBackend::<M>::with_isa(isa, threads) {
                v.push(b);
            }
        }
    }
    assert!(!v.is_empty(), "the scalar path is always supported");
    v
}

/// A few small cases per kernel (under Miri every case costs seconds).
fn config() -> Config {
    Config {
        cases: if cfg!(miri) { 2 } else { 16 },
        seed: 0x5EED_0001,
        max_elems: if cfg!(miri) { 32 } else { 1 << 12 },
    }
}

fn conforms<B: Backend, R: Backend>(backends: &[B], reference: &R, isa: impl Fn(&B) -> Isa) {
    let config = config();
    for b in backends {
        for kernel in Kernel::ALL {
            if let Err(m) = check_kernel(b, reference, kernel, &config) {
                panic!("{} on the {} path: {m}", kernel.name(), isa(b));
            }
        }
        let refused = check_invalid_arguments(b).unwrap_or_else(|m| panic!("{m}"));
        assert!(refused > 0, "no invalid call was refused");
    }
}

#[test]
fn exact_kernels_give_the_reference_bits() {
    conforms(&paths::<Exact>(), &ScalarRefBackend, |b| b.isa());
}

#[test]
fn fast_kernels_give_the_reference_bits() {
    conforms(&paths::<Fast>(), &FastScalarRefBackend, |b| b.isa());
}
