//! Calls beyond one row of workgroups (more than 65,535 × 64 invocations, so the dispatch
//! is two-dimensional) give the reference's bits, and a buffer beyond the device's largest
//! storage binding is a clear error, not a panic.
//!
//! Without a Vulkan adapter each test prints why and passes, unless
//! `EXACTGRAD_REQUIRE_GPU=1` makes that a failure.

use exactgrad_backends::ScalarRefBackend;
use exactgrad_core::{Backend, BackendImpl, BinaryOp, ComputeMode, Error, Layout, Philox, UnaryOp};
use exactgrad_wgpu::WgpuBackend;

mod common;
use common::backend;

/// The bits of `a / b` on `backend`.
fn divided<B: Backend>(backend: &B, a: &[f32], la: &Layout, b: &[f32], lb: &Layout) -> Vec<u32> {
    let sa = backend.storage_from_vec(a.to_vec()).unwrap();
    let sb = backend.storage_from_vec(b.to_vec()).unwrap();
    let mut out = backend.zeros(la.numel()).unwrap();
    let (va, vb) = (B::view(&sa), B::view(&sb));
    backend
        .binary(BinaryOp::Div, va, la, vb, lb, B::view_mut(&mut out))
        .unwrap();
    let out = B::storage_to_vec(&out).unwrap();
    out.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn five_million_elements_use_a_two_dimensional_dispatch() {
    let Some(gpu) = backend(ComputeMode::Exact) else {
        return;
    };
    let n = 5_000_000;
    let mut rng = Philox::new(7);
    let a: Vec<f32> = (0..n).map(|_| rng.next_f32() * 4.0 - 2.0).collect();
    let b: Vec<f32> = (0..1000).map(|_| rng.next_f32() + 0.5).collect();
    // a viewed as [5000, 1000] divided by b broadcast along the rows.
    let la = Layout::contiguous(vec![5000, 1000]);
    let lb = Layout {
        shape: vec![5000, 1000].into(),
        strides: vec![0, 1],
        offset: 0,
    };
    let got = divided(&gpu, &a, &la, &b, &lb);
    let want = divided(&ScalarRefBackend, &a, &la, &b, &lb);
    assert!(got == want, "the last invocations differ");
    let sa = gpu.storage_from_vec(a.clone()).unwrap();
    let mut out = gpu.zeros(n).unwrap();
    gpu.unary(
        UnaryOp::Tanh,
        WgpuBackend::view(&sa),
        WgpuBackend::view_mut(&mut out),
    )
    .unwrap();
    let got = WgpuBackend::storage_to_vec(&out).unwrap();
    let mut want = vec![0.0f32; n];
    ScalarRefBackend
        .unary(UnaryOp::Tanh, &a, &mut want)
        .unwrap();
    assert!(
        got.iter()
            .zip(&want)
            .all(|(x, y)| x.to_bits() == y.to_bits()),
        "tanh over 5,000,000 elements differs"
    );
}

#[test]
fn a_buffer_beyond_the_largest_binding_is_an_error() {
    let Some(gpu) = backend(ComputeMode::Fast) else {
        return;
    };
    // lavapipe's largest storage binding is 128 MiB; other devices allow more (up to
    // 4 GiB, where 32-bit indices end). Step up until the device refuses, up to 2^28
    // elements (1 GiB): beyond its limit the call must be an error, never a panic.
    let mut len = 1usize << 25;
    loop {
        // The refusal may come when the buffers are made or when the kernel binds them.
        let run = || -> exactgrad_core::Result<f32> {
            let x = gpu.storage_from_vec(vec![1.0f32; len + 1])?;
            let mut out = gpu.zeros(len + 1)?;
            gpu.unary(
                UnaryOp::Neg,
                WgpuBackend::view(&x),
                WgpuBackend::view_mut(&mut out),
            )?;
            let last = WgpuBackend::slice(WgpuBackend::view(&out), len..len + 1);
            Ok(WgpuBackend::to_host(last)?[0])
        };
        match run() {
            Err(Error::Alloc { op: "wgpu", .. }) => return,
            Err(e) => panic!("{e}"),
            Ok(last) => {
                assert_eq!(last, -1.0);
                if len >= 1 << 27 {
                    eprintln!("the device took {} elements; no limit reached", len + 1);
                    return;
                }
                len *= 2;
            }
        }
    }
}
