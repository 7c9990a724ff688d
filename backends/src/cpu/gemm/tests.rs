//! The driver with block sizes other than this machine's: every kernel this CPU runs,
//! tiny and odd `KC`, `MC` and `NC` (many k blocks, row blocks and column blocks),
//! row-major, transposed and strided operands, against the three-loop definition.
//! The k blocks continue each accumulator in the same order, so the bits are those of
//! `scalar::gemm_in` whatever the blocks.

use super::kernel::*;
use super::pack::line_aligned;
use super::*;
use crate::lane::{Exact, Fast};
use crate::scalar::gemm_in;
use exactgrad_core::Philox;

/// Fills a strided operand of `batches × rows × cols` with wide-magnitude values (the
/// order of the additions shows in the bits) and a few NaN, infinities and zeros.
fn operand(
    r: &mut Philox,
    batches: usize,
    rows: usize,
    cols: usize,
    t: bool,
) -> (Vec<f32>, [usize; 3]) {
    let per = rows * cols;
    let data = (0..batches * per + 3)
        .map(|_| match r.below(64) {
            0 => f32::NAN,
            1 => f32::INFINITY,
            2 => -0.0,
            _ => (r.next_f32() - 0.5) * 2f32.powi(r.below(30) as i32 - 15),
        })
        .collect();
    let strides = if t { [per, 1, rows] } else { [per, cols, 1] };
    (
        data,
        [
            if batches == 1 { 0 } else { strides[0] },
            strides[1],
            strides[2],
        ],
    )
}

/// Random operands of the product `(batch, m, k, n)` (`A` of `a_batches` matrices, `B`
/// of `b_batches`, each shared by every batch when 1, either transposed) and its spec,
/// with the offsets 1 and 2.
fn product(
    r: &mut Philox,
    (batch, m, k, n): (usize, usize, usize, usize),
    (a_batches, b_batches): (usize, usize),
    (ta, tb): (bool, bool),
) -> (Vec<f32>, Vec<f32>, MatmulSpec) {
    let (a, sa) = operand(r, a_batches, m, k, ta);
    let (b, sb) = operand(r, b_batches, k, n, tb);
    let spec = MatmulSpec {
        batch,
        m,
        k,
        n,
        a_offset: 1,
        a_strides: sa,
        b_offset: 2,
        b_strides: sb,
    };
    (a, b, spec)
}

/// The batched product by the three-loop definition, with the mode's output.
fn reference<M: ModeSpec>(spec: &MatmulSpec, a: &[f32], b: &[f32]) -> Vec<f32> {
    let MatmulSpec { batch, m, k, n, .. } = *spec;
    let mut out = vec![0.0; batch * m * n];
    for (bi, c) in out.chunks_mut(m * n).enumerate() {
        let [sa0, sa1, sa2] = spec.a_strides;
        let [sb0, sb1, sb2] = spec.b_strides;
        gemm_in::<M>(
            m,
            k,
            n,
            &a[spec.a_offset + bi * sa0..],
            sa1,
            sa2,
            &b[spec.b_offset + bi * sb0..],
            sb1,
            sb2,
            c,
            n,
        );
        c.iter_mut().for_each(|v| *v = M::out(*v));
    }
    out
}

fn same(x: f32, y: f32, exact: bool) -> bool {
    x.to_bits() == y.to_bits() || (!exact && x.is_nan() && y.is_nan())
}

/// `K` on every shape, layout and block size of the test, at one and three threads.
fn check<K: Kernel, M: ModeSpec>(name: &str) {
    let contexts = [ComputeContext::new(1), ComputeContext::new(3)];
    let mut r = Philox::new(5);
    let blocks = [
        Blocking {
            kc: 1,
            mc: 1,
            nc: 1,
        },
        Blocking {
            kc: 3,
            mc: 7,
            nc: 1,
        },
        Blocking {
            kc: 16,
            mc: K::MR,
            nc: 2 * K::NR,
        },
        Blocking {
            kc: 37,
            mc: 3 * K::MR,
            nc: 5 * K::NR,
        },
        Blocking {
            kc: 512,
            mc: 144,
            nc: 4096,
        },
    ];
    let shapes = [
        (1, 1, 1, 1),
        (1, 7, 5, 17),
        (2, 13, 33, 65),
        (3, 9, 70, 2 * K::NR + 3),
        (1, 40, 129, 9),
        // A transposed, few columns: computed transposed (Cᵀ = Bᵀ·Aᵀ).
        (2, K::NR + 7, 20, 5),
        (1, 2 * K::NR, 9, DIRECT_B_MAX_ROWS),
        // One block of A over several panels: B packed panel by panel as the tiles go.
        (1, DIRECT_B_MAX_ROWS + 2, 70, 2 * K::NR + 5),
        // Last tiles of MR − 2 and MR − 1 rows over whole panels: the short kernels.
        (1, 2 * K::MR + K::MR - 2, 40, 2 * K::NR),
        (2, K::MR + K::MR - 1, 21, K::NR + 1),
    ];
    for blk in blocks {
        for &(batch, m, k, n) in &shapes {
            for (ta, tb, share) in [
                (false, false, 0),
                (true, false, 1),
                (false, true, 2),
                (true, true, 0),
            ] {
                let batches = (
                    if share == 1 { 1 } else { batch },
                    if share == 2 { 1 } else { batch },
                );
                let (a, b, spec) = product(&mut r, (batch, m, k, n), batches, (ta, tb));
                let want = reference::<M>(&spec, &a, &b);
                for ctx in &contexts {
                    let mut out = vec![f32::NAN; batch * m * n];
                    // SAFETY: the caller of `check` runs only kernels this CPU has.
                    unsafe { run::<K>(ctx, blk, &spec, 0, &a, &b, &mut out) }.unwrap();
                    for (i, (&x, &y)) in out.iter().zip(&want).enumerate() {
                        assert!(
                            same(x, y, M::MODE == ComputeMode::Exact),
                            "{name} {blk:?} {spec:?} threads {}: element {i} is {x:e} ({:#x}), the definition gives {y:e} ({:#x})",
                            ctx.threads(),
                            x.to_bits(),
                            y.to_bits()
                        );
                    }
                }
                check_segments::<K, M>(name, &contexts, blk, &spec, &a, &b, &mut r);
            }
        }
    }
}

/// The segmented product of `spec` (`Backend::matmul_acc`) for segment lengths 1, `k`
/// and the least other divisor of `k`, added to an output of random values: the
/// definition is the output plus each segment's product in order, then canonicalised.
fn check_segments<K: Kernel, M: ModeSpec>(
    name: &str,
    contexts: &[ComputeContext],
    blk: Blocking,
    spec: &MatmulSpec,
    a: &[f32],
    b: &[f32],
    r: &mut Philox,
) {
    let k = spec.k;
    let least = (2..k).find(|&d| k.is_multiple_of(d)).unwrap_or(k);
    for seg in [1, k, least] {
        let (init, _) = operand(r, 1, spec.batch * spec.m, spec.n, false);
        let init = &init[..spec.batch * spec.m * spec.n];
        let mut want = init.to_vec();
        for s in 0..k / seg {
            let sub = MatmulSpec {
                k: seg,
                a_offset: spec.a_offset + s * seg * spec.a_strides[2],
                b_offset: spec.b_offset + s * seg * spec.b_strides[1],
                ..*spec
            };
            for (w, p) in want.iter_mut().zip(reference::<M>(&sub, a, b)) {
                *w += p;
            }
        }
        want.iter_mut()
            .for_each(|w| *w = exactgrad_core::kernels::canon(M::MODE, *w));
        for ctx in contexts {
            let mut out = init.to_vec();
            // SAFETY: the caller of `check` runs only kernels this CPU has.
            unsafe { run::<K>(ctx, blk, spec, seg, a, b, &mut out) }.unwrap();
            if k == 0 {
                continue;
            }
            for (i, (&x, &y)) in out.iter().zip(&want).enumerate() {
                assert!(
                    same(x, y, M::MODE == ComputeMode::Exact),
                    "{name} {blk:?} {spec:?} seg {seg} threads {}: element {i} is {x:e} ({:#x}), the definition gives {y:e} ({:#x})",
                    ctx.threads(),
                    x.to_bits(),
                    y.to_bits()
                );
            }
        }
    }
}

/// Calls `$check::<K, M>(name)` for every kernel this CPU runs.
macro_rules! each_kernel {
    ($check:ident) => {{
        $check::<ScalarExact, Exact>("scalar exact");
        $check::<ScalarFast, Fast>("scalar fast");
        #[cfg(target_arch = "x86_64")]
        {
            $check::<V128Exact, Exact>("v128 exact");
            if std::is_x86_feature_detected!("fma") {
                $check::<V128Fast, Fast>("v128 fast");
                $check::<ScalarFastFma, Fast>("scalar fast fma");
            }
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                $check::<Avx2Exact, Exact>("avx2 exact");
                $check::<Avx2Fast, Fast>("avx2 fast");
            }
            if std::is_x86_feature_detected!("avx512f") {
                $check::<Avx512Exact, Exact>("avx512 exact");
                $check::<Avx512Fast, Fast>("avx512 fast");
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            $check::<NeonExact, Exact>("neon exact");
            $check::<NeonFast, Fast>("neon fast");
        }
    }};
}

#[test]
fn any_block_sizes_give_the_bits_of_the_definition() {
    each_kernel!(check);
}

/// A `B` of several chunks of panels (two batches of `128 × 1000`), row-major (packed
/// step by step across each chunk's panels) and transposed (packed in runs of steps that
/// cut panels), at three threads: the bits of the definition.
fn check_large_b<K: Kernel, M: ModeSpec>(name: &str) {
    let ctx = ComputeContext::new(3);
    let blk = Blocking {
        kc: 512,
        mc: 144,
        nc: 4096,
    };
    let (batch, m, k, n) = (2, DIRECT_B_MAX_ROWS + 1, 128, 1000);
    let mut r = Philox::new(9);
    for tb in [false, true] {
        let (a, b, spec) = product(&mut r, (batch, m, k, n), (batch, batch), (false, tb));
        let want = reference::<M>(&spec, &a, &b);
        let mut out = vec![f32::NAN; batch * m * n];
        // SAFETY: `each_kernel!` runs only kernels this CPU has.
        unsafe { run::<K>(&ctx, blk, &spec, 0, &a, &b, &mut out) }.unwrap();
        let bad = out
            .iter()
            .zip(&want)
            .position(|(&x, &y)| !same(x, y, M::MODE == ComputeMode::Exact));
        assert!(
            bad.is_none(),
            "{name} B transposed {tb}: element {bad:?} differs from the definition"
        );
    }
}

#[test]
fn a_large_b_gives_the_bits_of_the_definition() {
    each_kernel!(check_large_b);
}

#[test]
fn packing_buffers_start_at_a_cache_line() {
    let mut v = vec![0.0f32; 200];
    for start in 0..LINE {
        let buf = &mut v[start..start + 100 + LINE - 1];
        let len = buf.len();
        let s = line_aligned(buf, 100);
        assert_eq!(s.len(), 100);
        assert_eq!(s.as_ptr() as usize % 64, 0, "start {start} of {len}");
    }
}

#[test]
fn the_tiles_of_the_block_rule_are_the_kernels() {
    let t = |isa, mode| blocking::tile(isa, mode);
    let shape = |mr, nr| blocking::Tile { mr, nr };
    #[cfg(target_arch = "x86_64")]
    {
        assert_eq!(
            t(Isa::Avx512, ComputeMode::Exact),
            shape(Avx512Exact::MR, Avx512Exact::NR)
        );
        assert_eq!(
            t(Isa::Avx512, ComputeMode::Fast),
            shape(Avx512Fast::MR, Avx512Fast::NR)
        );
        assert_eq!(
            t(Isa::Avx2, ComputeMode::Exact),
            shape(Avx2Exact::MR, Avx2Exact::NR)
        );
        assert_eq!(
            t(Isa::Avx2, ComputeMode::Fast),
            shape(Avx2Fast::MR, Avx2Fast::NR)
        );
        assert_eq!(
            t(Isa::V128, ComputeMode::Exact),
            shape(V128Exact::MR, V128Exact::NR)
        );
        assert_eq!(
            t(Isa::V128, ComputeMode::Fast),
            shape(V128Fast::MR, V128Fast::NR)
        );
    }
    #[cfg(target_arch = "aarch64")]
    {
        assert_eq!(
            t(Isa::Neon, ComputeMode::Exact),
            shape(NeonExact::MR, NeonExact::NR)
        );
        assert_eq!(
            t(Isa::Neon, ComputeMode::Fast),
            shape(NeonFast::MR, NeonFast::NR)
        );
    }
    assert_eq!(
        t(Isa::Scalar, ComputeMode::Exact),
        shape(ScalarExact::MR, ScalarExact::NR)
    );
    assert_eq!(
        t(Isa::Scalar, ComputeMode::Fast),
        shape(ScalarFast::MR, ScalarFast::NR)
    );
}

/// The driver on its own (without core's check): a reduction whose packed panel `k · NR`
/// overflows is an error, not a division by the product wrapped to 0, on every path.
#[test]
fn a_reduction_whose_panel_overflows_is_an_error() {
    let ctx = ComputeContext::new(1);
    let (a, b) = (vec![1.0f32], vec![1.0f32]);
    for isa in Isa::ALL {
        if !isa.is_supported(ComputeMode::Exact) {
            continue;
        }
        for (k, n) in [
            (1usize << 60, 1),
            (1 << 60, 300),
            (1 << 63, 1),
            (1 << 63, 300),
        ] {
            let spec = MatmulSpec {
                batch: 1,
                m: 1,
                k,
                n,
                a_offset: 0,
                a_strides: [0, 0, 0],
                b_offset: 0,
                b_strides: [0, 0, 0],
            };
            let mut out = vec![0.0f32; n];
            // SAFETY: the path is supported on this CPU (checked above).
            let r = unsafe { matmul::<Exact>(isa, &ctx, &spec, 0, &a, &b, &mut out) };
            assert!(r.is_err(), "{isa:?}: k = {k}, n = {n} accepted");
        }
    }
}
