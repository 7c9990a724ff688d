//! The trace digest of a buffer ([`TraceHasher`], `docs/debugging.md` §8): its blocks
//! digested on the context's threads, each block's sixteen lanes with the vector units of
//! the path (AVX-512 with 64-bit multiplies, AVX2 with them composed of 32-bit ones), the
//! last incomplete chunk and every path without a vector form by the scalar reference.
//! Integer arithmetic only: the same value on every path and thread count as
//! [`TraceHasher::of`] (`tests` below, and the conformance kit).

use super::{ComputeContext, Isa};
use exactgrad_core::{BlockLanes, TraceHasher};
use std::sync::atomic::{AtomicU64, Ordering};

/// The digest of `x`, its blocks on `ctx`'s threads.
pub(crate) fn digest(isa: Isa, ctx: &ComputeContext, x: &[f32]) -> u64 {
    let n = x.len();
    let blocks = n.div_ceil(TraceHasher::BLOCK);
    if blocks <= 1 || ctx.threads() == 1 {
        return TraceHasher::combine(
            n as u64,
            x.chunks(TraceHasher::BLOCK).map(|b| block(isa, b)),
        );
    }
    let out: Vec<AtomicU64> = (0..blocks).map(|_| AtomicU64::new(0)).collect();
    ctx.run(blocks, |i| {
        let s = i * TraceHasher::BLOCK;
        let e = (s + TraceHasher::BLOCK).min(n);
        out[i].store(block(isa, &x[s..e]), Ordering::Relaxed);
    });
    TraceHasher::combine(n as u64, out.iter().map(|d| d.load(Ordering::Relaxed)))
}

/// The digest of one block of at most [`TraceHasher::BLOCK`] elements.
fn block(isa: Isa, b: &[f32]) -> u64 {
    let full = b.len() / 32 * 32;
    let mut lanes = BlockLanes::new();
    if !vector_chunks(isa, &mut lanes, &b[..full]) {
        lanes.absorb_f32(&b[..full]);
    }
    lanes.absorb_f32(&b[full..]);
    lanes.finish(b.len() as u64)
}

/// Takes the whole chunks `x` (a multiple of 32 elements) into `lanes` with the vector
/// form of `isa`; false when the path has none (then nothing was taken).
#[cfg(target_arch = "x86_64")]
fn vector_chunks(isa: Isa, lanes: &mut BlockLanes, x: &[f32]) -> bool {
    debug_assert!(x.len().is_multiple_of(32));
    match isa {
        Isa::Avx512 if std::is_x86_feature_detected!("avx512dq") => {
            // SAFETY: the path is the backend's, supported on this CPU (`avx512f`, the
            // invariant of `CpuBackend::isa`), and `avx512dq` was detected just now;
            // `x` holds whole chunks, which is all the function reads.
            unsafe { x86::chunks_avx512(lanes, x) };
            true
        }
        Isa::Avx512 | Isa::Avx2 => {
            // SAFETY: both paths imply AVX2 on this CPU (the invariant of
            // `CpuBackend::isa`: AVX-512 CPUs have AVX2); `x` holds whole chunks.
            unsafe { x86::chunks_avx2(lanes, x) };
            true
        }
        _ => false,
    }
}

/// Takes the whole chunks `x` with a vector form: none on this architecture.
#[cfg(not(target_arch = "x86_64"))]
fn vector_chunks(_isa: Isa, _lanes: &mut BlockLanes, _x: &[f32]) -> bool {
    false
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The lanes' steps `a = rotl((a ^ w) · P, 31)` on vector registers: sixteen 64-bit
    //! lanes, one chunk of 32 elements per step, each element's NaN made canonical first.

    use exactgrad_core::BlockLanes;
    use std::arch::x86_64::*;

    /// The lanes' multiplier.
    const P: u64 = 0x9E37_79B9_7F4A_7C15;

    /// [`super::vector_chunks`] with AVX-512 (`vpmullq`, `vprolq`).
    ///
    /// # Safety
    /// The CPU must have AVX-512 F and DQ, and `x.len()` must be a multiple of 32.
    #[target_feature(enable = "avx512f,avx512dq")]
    pub(super) unsafe fn chunks_avx512(lanes: &mut BlockLanes, x: &[f32]) {
        let l = lanes.lanes.as_mut_ptr();
        // SAFETY: `lanes.lanes` holds 16 u64: two unaligned loads of 8.
        let (mut a0, mut a1) = unsafe {
            (
                _mm512_loadu_si512(l.cast()),
                _mm512_loadu_si512(l.add(8).cast()),
            )
        };
        let p = _mm512_set1_epi64(P as i64);
        let abs = _mm512_set1_epi32(0x7fff_ffff);
        let inf = _mm512_set1_epi32(0x7f80_0000);
        let nan = _mm512_set1_epi32(0x7fc0_0000);
        for c in x.chunks_exact(32) {
            // SAFETY: a chunk holds 32 f32: two unaligned loads of 16.
            let (x0, x1) = unsafe {
                (
                    _mm512_loadu_si512(c.as_ptr().cast()),
                    _mm512_loadu_si512(c.as_ptr().add(16).cast()),
                )
            };
            let x0 = _mm512_mask_mov_epi32(
                x0,
                _mm512_cmpgt_epu32_mask(_mm512_and_si512(x0, abs), inf),
                nan,
            );
            let x1 = _mm512_mask_mov_epi32(
                x1,
                _mm512_cmpgt_epu32_mask(_mm512_and_si512(x1, abs), inf),
                nan,
            );
            // Element pairs are the little-endian 64-bit words `e[2l] | e[2l+1] << 32`.
            a0 = _mm512_rol_epi64::<31>(_mm512_mullo_epi64(_mm512_xor_si512(a0, x0), p));
            a1 = _mm512_rol_epi64::<31>(_mm512_mullo_epi64(_mm512_xor_si512(a1, x1), p));
        }
        // SAFETY: as the loads above.
        unsafe {
            _mm512_storeu_si512(l.cast(), a0);
            _mm512_storeu_si512(l.add(8).cast(), a1);
        }
    }

    /// `a · P` (wrapping) in each 64-bit lane, from 32-bit multiplies:
    /// `lo(a)·lo(P) + ((hi(a)·lo(P) + lo(a)·hi(P)) << 32)`.
    #[inline(always)]
    fn mul_p(a: __m256i, plo: __m256i, phi: __m256i) -> __m256i {
        // SAFETY: none needed: register arithmetic; the caller runs with AVX2.
        unsafe {
            let lo = _mm256_mul_epu32(a, plo);
            let cross = _mm256_add_epi64(
                _mm256_mul_epu32(_mm256_srli_epi64::<32>(a), plo),
                _mm256_mul_epu32(a, phi),
            );
            _mm256_add_epi64(lo, _mm256_slli_epi64::<32>(cross))
        }
    }

    /// [`super::vector_chunks`] with AVX2.
    ///
    /// # Safety
    /// The CPU must have AVX2, and `x.len()` must be a multiple of 32.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn chunks_avx2(lanes: &mut BlockLanes, x: &[f32]) {
        let l = lanes.lanes.as_mut_ptr();
        let mut a = [_mm256_setzero_si256(); 4];
        for (i, v) in a.iter_mut().enumerate() {
            // SAFETY: `lanes.lanes` holds 16 u64: four unaligned loads of 4.
            *v = unsafe { _mm256_loadu_si256(l.add(4 * i).cast()) };
        }
        let plo = _mm256_set1_epi64x((P & 0xffff_ffff) as i64);
        let phi = _mm256_set1_epi64x((P >> 32) as i64);
        let abs = _mm256_set1_epi32(0x7fff_ffff);
        let inf = _mm256_set1_epi32(0x7f80_0000);
        let nan = _mm256_set1_epi32(0x7fc0_0000);
        for c in x.chunks_exact(32) {
            for (i, v) in a.iter_mut().enumerate() {
                // SAFETY: a chunk holds 32 f32: four unaligned loads of 8.
                let w = unsafe { _mm256_loadu_si256(c.as_ptr().add(8 * i).cast()) };
                // The magnitudes are below 2^31, so the signed comparison is the
                // unsigned one.
                let is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(w, abs), inf);
                let w = _mm256_blendv_epi8(w, nan, is_nan);
                let t = mul_p(_mm256_xor_si256(*v, w), plo, phi);
                *v = _mm256_or_si256(_mm256_slli_epi64::<31>(t), _mm256_srli_epi64::<33>(t));
            }
        }
        for (i, v) in a.iter().enumerate() {
            // SAFETY: as the loads above.
            unsafe { _mm256_storeu_si256(l.add(4 * i).cast(), *v) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lengths around the chunk and block edges, with NaNs of every payload and sign,
    /// infinities, signed zeros and subnormals among the values.
    fn samples() -> Vec<Vec<f32>> {
        let special = [
            f32::NAN,
            f32::from_bits(0xffc0_0001),
            f32::from_bits(0x7f80_0001),
            f32::INFINITY,
            f32::NEG_INFINITY,
            -0.0,
            0.0,
            f32::from_bits(1),
        ];
        [
            0,
            1,
            31,
            32,
            33,
            1000,
            TraceHasher::BLOCK - 1,
            TraceHasher::BLOCK,
            3 * TraceHasher::BLOCK + 45,
        ]
        .into_iter()
        .map(|n| {
            (0..n)
                .map(|i| {
                    if i % 97 == 5 {
                        special[i % special.len()]
                    } else {
                        (i as f32 * 0.37).sin() * 1e3
                    }
                })
                .collect()
        })
        .collect()
    }

    #[test]
    fn every_path_and_thread_count_gives_the_reference_digest() {
        for threads in [1, 3] {
            let ctx = ComputeContext::new(threads);
            for isa in Isa::ALL {
                if !isa.is_supported(exactgrad_core::ComputeMode::Exact) {
                    continue;
                }
                for v in samples() {
                    assert_eq!(
                        digest(isa, &ctx, &v),
                        TraceHasher::of(&v),
                        "{} at {threads} threads, {} elements",
                        isa.name(),
                        v.len()
                    );
                }
            }
        }
    }
}
