//! A portable-path switch with a value other than `0` or `1` is a clear error naming the
//! variable, not a panic or a silent default. (Its own test binary: the environment is
//! read once per process.)

use exactgrad_core::ComputeMode;
use exactgrad_wgpu::{WgpuBackend, WgpuError, SOFT_DIV_SQRT_ENV};

#[test]
fn a_bad_switch_value_is_an_error() {
    std::env::set_var(SOFT_DIV_SQRT_ENV, "yes");
    let e = WgpuBackend::new(ComputeMode::Exact).unwrap_err();
    let WgpuError::Setting(msg) = &e else {
        panic!("{e}")
    };
    assert!(
        msg.contains(SOFT_DIV_SQRT_ENV) && msg.contains("\"yes\""),
        "{msg}"
    );
    assert!(e.to_string().starts_with("invalid setting: "), "{e}");
}
