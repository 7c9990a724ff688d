//! What the device tests share: the backend they run on.

use exactgrad_core::{Backend, ComputeMode};
use exactgrad_wgpu::{WgpuBackend, WgpuError, REQUIRE_GPU_ENV};

/// The device backend in `mode`, or `None` (the test then passes) without a Vulkan
/// adapter, unless `EXACTGRAD_REQUIRE_GPU=1` makes that a failure.
pub fn backend(mode: ComputeMode) -> Option<WgpuBackend> {
    match WgpuBackend::new(mode) {
        Ok(b) => Some(b),
        Err(WgpuError::NoAdapter(m)) if std::env::var_os(REQUIRE_GPU_ENV).is_none() => {
            eprintln!("skipped: {m} (set {REQUIRE_GPU_ENV}=1 to make this a failure)");
            None
        }
        Err(e) => panic!("{e}"),
    }
}

/// The elements of `s` (a storage of `B`) as bit patterns, for comparing results bit for
/// bit. Not every test file uses it.
#[allow(dead_code)]
pub fn bits_of<B: Backend>(s: &B::Storage) -> Vec<u32> {
    B::storage_to_vec(s)
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}
