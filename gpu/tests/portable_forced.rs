//! Both portable paths forced through the environment (`EXACTGRAD_GPU_SOFT_DIV_SQRT=1`,
//! `EXACTGRAD_GPU_INT_F64=1`): the probes report them in use, and the kernels that
//! divide, take square roots or sum in f64 still give the scalar reference's bits in
//! both modes (the conformance kit's quick configuration on every kernel). `.ci/gpu`
//! and `.ci/gpu-all` run the whole kit and the digits run this way as well. (Its own
//! test binary: the environment is read once per process.)

use exactgrad_backends::conformance::{self, Config};
use exactgrad_backends::{FastScalarRefBackend, ScalarRefBackend};
use exactgrad_core::ComputeMode;
use exactgrad_wgpu::{INT_F64_ENV, SOFT_DIV_SQRT_ENV};

mod common;
use common::backend;

#[test]
fn forced_portable_paths_give_the_references_bits() {
    std::env::set_var(SOFT_DIV_SQRT_ENV, "1");
    std::env::set_var(INT_F64_ENV, "1");
    let Some(exact) = backend(ComputeMode::Exact) else {
        return;
    };
    let f = exact.findings();
    assert!(f.soft_div_sqrt && f.soft_div_sqrt_forced, "{f}");
    assert!(f.int_f64 && f.int_f64_forced, "{f}");
    assert!(exact.f64_on_device(), "{f}");
    assert_eq!(f.soft_div_mismatches + f.soft_sqrt_mismatches, 0, "{f}");
    assert_eq!(f.int_f64_mismatches, 0, "{f}");
    let text = f.to_string();
    assert!(
        text.contains("in integers (forced by the environment)"),
        "{text}"
    );
    let report = conformance::check_backend(&exact, &ScalarRefBackend, &Config::quick())
        .unwrap_or_else(|m| panic!("exact mode: {m}"));
    assert!(report.total() > 0);
    let Some(fast) = backend(ComputeMode::Fast) else {
        return;
    };
    let report = conformance::check_backend(&fast, &FastScalarRefBackend, &Config::quick())
        .unwrap_or_else(|m| panic!("fast mode: {m}"));
    assert!(report.total() > 0);
}
