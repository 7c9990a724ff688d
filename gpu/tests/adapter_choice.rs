//! `EXACTGRAD_WGPU_ADAPTER` naming no adapter is a clear error that lists the adapters,
//! not a panic or a silent fallback. (Its own test binary: the device is opened once per
//! process.)

use exactgrad_core::ComputeMode;
use exactgrad_wgpu::{adapters, WgpuBackend, WgpuError, ADAPTER_ENV, REQUIRE_GPU_ENV};

#[test]
fn an_adapter_name_that_matches_nothing_is_an_error() {
    let list = adapters();
    if list.is_empty() {
        assert!(
            std::env::var_os(REQUIRE_GPU_ENV).is_none(),
            "no Vulkan adapter, and {REQUIRE_GPU_ENV} is set"
        );
        eprintln!("skipped: no Vulkan adapter");
        return;
    }
    std::env::set_var(ADAPTER_ENV, "no-such-device-anywhere");
    let e = WgpuBackend::new(ComputeMode::Fast).unwrap_err();
    let WgpuError::NoAdapter(msg) = &e else {
        panic!("{e}")
    };
    assert!(msg.contains("no-such-device-anywhere"), "{msg}");
    assert!(msg.contains(&list[0].name), "{msg}");
    // The error stays (the device is chosen once per process).
    assert_eq!(WgpuBackend::new(ComputeMode::Exact).unwrap_err(), e);
}
