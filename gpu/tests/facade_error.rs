//! `WgpuError` converts into the facade's one error type: `?` on `WgpuBackend::exact()`
//! in a function returning `exactgrad::Result`, and the backend's error recovered from
//! it. (Its own test binary: the device is chosen once per process, and one test names
//! an adapter that does not exist.)

use exactgrad::{Error, Result};
use exactgrad_wgpu::{adapters, WgpuBackend, WgpuError, ADAPTER_ENV};

/// Opens the device in exact mode with `?` in a function of the facade's result type.
fn open_exact() -> Result<String> {
    let b = WgpuBackend::exact()?;
    Ok(b.adapter().name.clone())
}

#[test]
fn a_wgpu_error_is_a_facade_error() {
    // No adapter matches: the conversion is exercised whether or not a device exists.
    std::env::set_var(ADAPTER_ENV, "no-such-device-anywhere");
    let e = open_exact().unwrap_err();
    let Error::Backend { backend, source } = &e else {
        panic!("not a backend error: {e:?}")
    };
    assert_eq!(*backend, "wgpu");
    let w = source
        .downcast_ref::<WgpuError>()
        .expect("the source is the WgpuError");
    assert!(matches!(w, WgpuError::NoAdapter(_)), "{w}");
    let msg = e.to_string();
    assert!(msg.starts_with("wgpu: no Vulkan adapter"), "{msg}");
    if !adapters().is_empty() {
        assert!(msg.contains("no-such-device-anywhere"), "{msg}");
    }
    // std's error chain reaches the backend's error.
    let chained = std::error::Error::source(&e).map(|s| s.to_string());
    assert_eq!(chained, Some(w.to_string()));
}
