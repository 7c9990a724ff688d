//! The tiled matrix product (`EXACTGRAD_GPU_TILED_MATMUL=1`) gives the scalar
//! reference's bits in both modes: sizes that are not multiples of the 8 × 8 block,
//! a reduction longer than one dispatch (the accumulator carried in the output),
//! broadcast and transposed operands at offsets, and the values whose sums depend on
//! the order and on never adding a missing term (−0, NaN, ±∞, subnormals). (Its own test
//! binary: the environment is read once per process.)

use exactgrad_backends::{FastScalarRefBackend, ScalarRefBackend};
use exactgrad_core::backend::MatmulSpec;
use exactgrad_core::{Backend, ComputeMode, Philox};
use exactgrad_wgpu::TILED_MATMUL_ENV;

mod common;
use common::{backend, bits_of};

fn product<B: Backend>(be: &B, spec: &MatmulSpec, a: &[f32], b: &[f32], len: usize) -> Vec<u32> {
    let sa = be.storage_from_vec(a.to_vec()).unwrap();
    let sb = be.storage_from_vec(b.to_vec()).unwrap();
    let mut out = be.zeros(len).unwrap();
    be.matmul(spec, B::view(&sa), B::view(&sb), B::view_mut(&mut out))
        .unwrap();
    bits_of::<B>(&out)
}

/// Random values with a share of −0, +0, ±∞, NaN, subnormals and cancelling pairs.
fn values(rng: &mut Philox, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| match rng.next_u32() % 16 {
            0 => -0.0,
            1 => 0.0,
            2 => f32::from_bits(rng.next_u32() & 0x807f_ffff),
            3 if rng.next_u32().is_multiple_of(64) => f32::INFINITY,
            4 if rng.next_u32().is_multiple_of(64) => f32::NAN,
            5 => 1e30,
            6 => -1e30,
            _ => rng.next_f32() * 4.0 - 2.0,
        })
        .collect()
}

#[test]
fn tiled_products_give_the_references_bits() {
    std::env::set_var(TILED_MATMUL_ENV, "1");
    let mut rng = Philox::new(11);
    for mode in [ComputeMode::Exact, ComputeMode::Fast] {
        let Some(gpu) = backend(mode) else { return };
        assert!(gpu.tiled_matmul());
        // (batch, m, k, n, transposed a, b broadcast over the batch)
        let shapes = [
            (1, 8, 8, 8, false, false),
            (1, 13, 29, 11, false, false),
            (3, 17, 9, 23, true, false),
            (2, 9, 70, 5, false, true),
            (1, 2, 20_000, 3, false, false),
            (4, 1, 33, 40, false, true),
            (1, 64, 1, 64, true, false),
        ];
        for &(batch, m, k, n, ta, bcast) in &shapes {
            let off = 5;
            let a = values(&mut rng, off + batch * m * k);
            let b = values(&mut rng, off + if bcast { k * n } else { batch * k * n });
            let spec = MatmulSpec {
                batch,
                m,
                k,
                n,
                a_offset: off,
                a_strides: if ta { [m * k, 1, m] } else { [m * k, k, 1] },
                b_offset: off,
                b_strides: [if bcast { 0 } else { k * n }, n, 1],
            };
            let len = batch * m * n;
            let got = product(&gpu, &spec, &a, &b, len);
            let want = match mode {
                ComputeMode::Exact => product(&ScalarRefBackend, &spec, &a, &b, len),
                ComputeMode::Fast => product(&FastScalarRefBackend, &spec, &a, &b, len),
            };
            let bad = got
                .iter()
                .zip(&want)
                .filter(|(g, w)| {
                    g != w && !(f32::from_bits(**g).is_nan() && f32::from_bits(**w).is_nan())
                })
                .count();
            assert_eq!(
                bad, 0,
                "{mode:?} {batch}x{m}x{k}x{n}: {bad} of {len} differ"
            );
        }
    }
}
