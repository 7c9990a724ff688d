//! f64 accumulation on the ISA paths: the sums of `docs/arithmetic.md` §1 rule 3
//! vectorised *across* outputs, never within one.
//!
//! Each output's sum is one f64 accumulator that adds its elements (converted exactly
//! from f32) in increasing order. A vector lane holds the accumulator of one output, so a
//! lane sees exactly the scalar sequence of additions and the bits equal the scalar
//! reference. Two shapes of work occur:
//!
//! - the outputs are consecutive elements of memory and their elements lie one "row"
//!   apart (a sum over leading dimensions): [`RowSum::add_wide`] adds one row of `WIDTH`
//!   elements to `WIDTH` accumulators;
//! - each output's elements are a contiguous run (a sum along rows, the normalisers of
//!   softmax): [`RowSum::sum8`] and [`RowSum::dot8`] walk eight runs at once, transposing
//!   8×8 (or 4×4) blocks in registers so that one vector addition advances eight
//!   accumulators by one element each.
//!
//! The default methods are the scalar forms (eight interleaved scalar accumulators); the
//! x86-64 and AArch64 lane types override them with intrinsics, under the target-feature contract of
//! [`crate::cpu::simd`]: they run only inside functions compiled with their path's
//! features, on a CPU that has them.

use crate::cpu::simd::SimdLane;

/// f64 accumulation kernels of one ISA path (see the module documentation).
pub trait RowSum: SimdLane {
    /// `acc[j] += f64(x[j])` for `j < WIDTH`.
    ///
    /// # Safety
    /// `acc..acc+WIDTH` must be writable and `x..x+WIDTH` readable (each aligned for its
    /// type), and the CPU must have the lane type's target features.
    #[inline(always)]
    unsafe fn add_wide(acc: *mut f64, x: *const f32) {
        for j in 0..Self::WIDTH {
            // SAFETY: j < WIDTH, covered by the caller's guarantee.
            unsafe { *acc.add(j) += f64::from(*x.add(j)) };
        }
    }

    /// `acc[r] += f64(p[r][j])` for `j = 0, 1, …, n−1` in that order, for each `r < 8`.
    ///
    /// # Safety
    /// `p[r]..p[r]+n` must be readable for every `r`, and the CPU must have the lane
    /// type's target features.
    #[inline(always)]
    unsafe fn sum8(acc: &mut [f64; 8], p: &[*const f32; 8], n: usize) {
        // SAFETY: the caller guarantees that `p[r]..p[r]+n` are readable, which is
        // `sum8_scalar`'s contract for columns `0..n`.
        unsafe { sum8_scalar(acc, p, 0, n) }
    }

    /// `acc[r] += f64(a[r][j]) · f64(b[r][j])` (an exact product) for `j = 0, 1, …, n−1`
    /// in that order, for each `r < 8`.
    ///
    /// # Safety
    /// `a[r]..a[r]+n` and `b[r]..b[r]+n` must be readable for every `r`, and the CPU must
    /// have the lane type's target features.
    #[inline(always)]
    unsafe fn dot8(acc: &mut [f64; 8], a: &[*const f32; 8], b: &[*const f32; 8], n: usize) {
        // SAFETY: the caller guarantees that `a[r]..a[r]+n` and `b[r]..b[r]+n` are
        // readable, which is `dot8_scalar`'s contract for columns `0..n`.
        unsafe { dot8_scalar(acc, a, b, 0, n) }
    }
}

/// The scalar form of [`RowSum::sum8`] over columns `from..n`.
///
/// # Safety
/// `p[r]..p[r]+n` must be readable for every `r`.
#[inline(always)]
pub(crate) unsafe fn sum8_scalar(acc: &mut [f64; 8], p: &[*const f32; 8], from: usize, n: usize) {
    for j in from..n {
        for r in 0..8 {
            // SAFETY: j < n, covered by the caller's guarantee.
            acc[r] += f64::from(unsafe { *p[r].add(j) });
        }
    }
}

/// The scalar form of [`RowSum::dot8`] over columns `from..n`.
///
/// # Safety
/// `a[r]..a[r]+n` and `b[r]..b[r]+n` must be readable for every `r`.
#[inline(always)]
pub(crate) unsafe fn dot8_scalar(
    acc: &mut [f64; 8],
    a: &[*const f32; 8],
    b: &[*const f32; 8],
    from: usize,
    n: usize,
) {
    for j in from..n {
        for r in 0..8 {
            // SAFETY: j < n, covered by the caller's guarantee.
            let (x, y) = unsafe { (*a[r].add(j), *b[r].add(j)) };
            acc[r] += f64::from(x) * f64::from(y);
        }
    }
}

/// The scalar path: the default (scalar) methods.
impl RowSum for f32 {}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;
    use crate::cpu::simd::{F32x16, F32x4, F32x8};
    use core::arch::x86_64::*;

    /// Transposes eight rows of eight f32 so that `c[j]` holds element `j` of each row
    /// (row `r` in lane `r`).
    ///
    /// # Safety
    /// The CPU must have AVX.
    #[inline(always)]
    unsafe fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
        // SAFETY: register-only AVX shuffles (no memory access); the caller guarantees
        // AVX.
        unsafe {
            let t0 = _mm256_unpacklo_ps(r[0], r[1]);
            let t1 = _mm256_unpackhi_ps(r[0], r[1]);
            let t2 = _mm256_unpacklo_ps(r[2], r[3]);
            let t3 = _mm256_unpackhi_ps(r[2], r[3]);
            let t4 = _mm256_unpacklo_ps(r[4], r[5]);
            let t5 = _mm256_unpackhi_ps(r[4], r[5]);
            let t6 = _mm256_unpacklo_ps(r[6], r[7]);
            let t7 = _mm256_unpackhi_ps(r[6], r[7]);
            let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
            let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
            let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
            let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
            let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
            let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
            let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
            let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
            [
                _mm256_permute2f128_ps::<0x20>(u0, u4),
                _mm256_permute2f128_ps::<0x20>(u1, u5),
                _mm256_permute2f128_ps::<0x20>(u2, u6),
                _mm256_permute2f128_ps::<0x20>(u3, u7),
                _mm256_permute2f128_ps::<0x31>(u0, u4),
                _mm256_permute2f128_ps::<0x31>(u1, u5),
                _mm256_permute2f128_ps::<0x31>(u2, u6),
                _mm256_permute2f128_ps::<0x31>(u3, u7),
            ]
        }
    }

    /// Loads columns `j..j+8` of the eight rows `p` and transposes them.
    ///
    /// # Safety
    /// `p[r]+j..p[r]+j+8` must be readable for every `r`, and the CPU must have AVX.
    #[inline(always)]
    unsafe fn load8x8(p: &[*const f32; 8], j: usize) -> [__m256; 8] {
        // SAFETY: each unaligned load reads `p[r]+j..p[r]+j+8`, readable by the caller's
        // guarantee, which also covers AVX for the loads and `transpose8`.
        unsafe { transpose8(core::array::from_fn(|r| _mm256_loadu_ps(p[r].add(j)))) }
    }

    /// Transposes four rows of four f32 (the `_MM_TRANSPOSE4_PS` sequence).
    #[inline(always)]
    fn transpose4(r: [__m128; 4]) -> [__m128; 4] {
        // SAFETY: register-only SSE shuffles, and SSE is part of every x86-64 CPU.
        unsafe {
            let t0 = _mm_unpacklo_ps(r[0], r[1]);
            let t2 = _mm_unpacklo_ps(r[2], r[3]);
            let t1 = _mm_unpackhi_ps(r[0], r[1]);
            let t3 = _mm_unpackhi_ps(r[2], r[3]);
            [
                _mm_movelh_ps(t0, t2),
                _mm_movehl_ps(t2, t0),
                _mm_movelh_ps(t1, t3),
                _mm_movehl_ps(t3, t1),
            ]
        }
    }

    /// Loads columns `j..j+4` of rows `p[h*4..h*4+4]` and transposes them.
    ///
    /// # Safety
    /// `p[h*4+r]+j..p[h*4+r]+j+4` must be readable for every `r < 4`.
    #[inline(always)]
    unsafe fn load4x4(p: &[*const f32; 8], h: usize, j: usize) -> [__m128; 4] {
        // SAFETY: each unaligned SSE load reads `p[h*4+r]+j..+4`, readable by the
        // caller's guarantee; SSE is part of every x86-64 CPU.
        transpose4(core::array::from_fn(|r| unsafe {
            _mm_loadu_ps(p[h * 4 + r].add(j))
        }))
    }

    /// Four f32 widened to two pairs of f64 (lanes 0–1 and 2–3).
    #[inline(always)]
    fn widen4(v: __m128) -> (__m128d, __m128d) {
        // SAFETY: register-only SSE and SSE2 conversions, part of every x86-64 CPU.
        unsafe { (_mm_cvtps_pd(v), _mm_cvtps_pd(_mm_movehl_ps(v, v))) }
    }

    impl RowSum for F32x4 {
        #[inline(always)]
        unsafe fn add_wide(acc: *mut f64, x: *const f32) {
            let (lo, hi) = widen4(
                // SAFETY: `x..x+4` is readable (the caller's guarantee); SSE.
                unsafe { _mm_loadu_ps(x) },
            );
            // SAFETY: `acc..acc+4` is readable and writable (the caller's guarantee); the
            // unaligned SSE2 loads and stores need only f64 alignment.
            unsafe {
                _mm_storeu_pd(acc, _mm_add_pd(_mm_loadu_pd(acc), lo));
                _mm_storeu_pd(acc.add(2), _mm_add_pd(_mm_loadu_pd(acc.add(2)), hi));
            }
        }

        #[inline(always)]
        unsafe fn sum8(acc: &mut [f64; 8], p: &[*const f32; 8], n: usize) {
            // SAFETY: the loads of `acc` and the stores back stay inside its 8 elements;
            // `load4x4` reads columns j..j+4 <= n of the rows `p`, readable by the
            // caller's guarantee, as is the tail `j..n` for `sum8_scalar`. SSE and SSE2
            // are part of every x86-64 CPU.
            unsafe {
                let mut a: [__m128d; 4] =
                    core::array::from_fn(|i| _mm_loadu_pd(acc.as_ptr().add(2 * i)));
                let mut j = 0;
                while j + 4 <= n {
                    for h in 0..2 {
                        let c = load4x4(p, h, j);
                        for col in c {
                            let (lo, hi) = widen4(col);
                            a[2 * h] = _mm_add_pd(a[2 * h], lo);
                            a[2 * h + 1] = _mm_add_pd(a[2 * h + 1], hi);
                        }
                    }
                    j += 4;
                }
                for (i, v) in a.iter().enumerate() {
                    _mm_storeu_pd(acc.as_mut_ptr().add(2 * i), *v);
                }
                sum8_scalar(acc, p, j, n);
            }
        }

        #[inline(always)]
        unsafe fn dot8(acc: &mut [f64; 8], x: &[*const f32; 8], y: &[*const f32; 8], n: usize) {
            // SAFETY: as in `sum8`, for the rows of both `x` and `y`.
            unsafe {
                let mut a: [__m128d; 4] =
                    core::array::from_fn(|i| _mm_loadu_pd(acc.as_ptr().add(2 * i)));
                let mut j = 0;
                while j + 4 <= n {
                    for h in 0..2 {
                        let cx = load4x4(x, h, j);
                        let cy = load4x4(y, h, j);
                        for col in 0..4 {
                            let (xl, xh) = widen4(cx[col]);
                            let (yl, yh) = widen4(cy[col]);
                            a[2 * h] = _mm_add_pd(a[2 * h], _mm_mul_pd(xl, yl));
                            a[2 * h + 1] = _mm_add_pd(a[2 * h + 1], _mm_mul_pd(xh, yh));
                        }
                    }
                    j += 4;
                }
                for (i, v) in a.iter().enumerate() {
                    _mm_storeu_pd(acc.as_mut_ptr().add(2 * i), *v);
                }
                dot8_scalar(acc, x, y, j, n);
            }
        }
    }

    impl RowSum for F32x8 {
        #[inline(always)]
        unsafe fn add_wide(acc: *mut f64, x: *const f32) {
            // SAFETY: reads `x..x+8` and reads and writes `acc..acc+8`, both covered by
            // the caller's guarantee, which also covers AVX (this lane type's features).
            unsafe {
                let lo = _mm256_cvtps_pd(_mm_loadu_ps(x));
                let hi = _mm256_cvtps_pd(_mm_loadu_ps(x.add(4)));
                _mm256_storeu_pd(acc, _mm256_add_pd(_mm256_loadu_pd(acc), lo));
                _mm256_storeu_pd(acc.add(4), _mm256_add_pd(_mm256_loadu_pd(acc.add(4)), hi));
            }
        }

        #[inline(always)]
        unsafe fn sum8(acc: &mut [f64; 8], p: &[*const f32; 8], n: usize) {
            // SAFETY: the loads of `acc` and the stores back stay inside its 8 elements;
            // `load8x8` reads columns j..j+8 <= n of the rows `p`, readable by the
            // caller's guarantee, as is the tail `j..n` for `sum8_scalar`. The caller
            // also guarantees AVX (this lane type's features).
            unsafe {
                let mut lo = _mm256_loadu_pd(acc.as_ptr());
                let mut hi = _mm256_loadu_pd(acc.as_ptr().add(4));
                let mut j = 0;
                while j + 8 <= n {
                    for c in load8x8(p, j) {
                        lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(c)));
                        hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(c)));
                    }
                    j += 8;
                }
                _mm256_storeu_pd(acc.as_mut_ptr(), lo);
                _mm256_storeu_pd(acc.as_mut_ptr().add(4), hi);
                sum8_scalar(acc, p, j, n);
            }
        }

        #[inline(always)]
        unsafe fn dot8(acc: &mut [f64; 8], x: &[*const f32; 8], y: &[*const f32; 8], n: usize) {
            // SAFETY: as in `sum8`, for the rows of both `x` and `y`.
            unsafe {
                let mut lo = _mm256_loadu_pd(acc.as_ptr());
                let mut hi = _mm256_loadu_pd(acc.as_ptr().add(4));
                let mut j = 0;
                while j + 8 <= n {
                    let cx = load8x8(x, j);
                    let cy = load8x8(y, j);
                    for c in 0..8 {
                        let xl = _mm256_cvtps_pd(_mm256_castps256_ps128(cx[c]));
                        let xh = _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(cx[c]));
                        let yl = _mm256_cvtps_pd(_mm256_castps256_ps128(cy[c]));
                        let yh = _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(cy[c]));
                        lo = _mm256_add_pd(lo, _mm256_mul_pd(xl, yl));
                        hi = _mm256_add_pd(hi, _mm256_mul_pd(xh, yh));
                    }
                    j += 8;
                }
                _mm256_storeu_pd(acc.as_mut_ptr(), lo);
                _mm256_storeu_pd(acc.as_mut_ptr().add(4), hi);
                dot8_scalar(acc, x, y, j, n);
            }
        }
    }

    impl RowSum for F32x16 {
        #[inline(always)]
        unsafe fn add_wide(acc: *mut f64, x: *const f32) {
            // SAFETY: reads `x..x+16` and reads and writes `acc..acc+16`, both covered by
            // the caller's guarantee, which also covers AVX-512F (this lane type's
            // features; it implies the AVX of the 256-bit loads).
            unsafe {
                let lo = _mm512_cvtps_pd(_mm256_loadu_ps(x));
                let hi = _mm512_cvtps_pd(_mm256_loadu_ps(x.add(8)));
                _mm512_storeu_pd(acc, _mm512_add_pd(_mm512_loadu_pd(acc), lo));
                _mm512_storeu_pd(acc.add(8), _mm512_add_pd(_mm512_loadu_pd(acc.add(8)), hi));
            }
        }

        #[inline(always)]
        unsafe fn sum8(acc: &mut [f64; 8], p: &[*const f32; 8], n: usize) {
            // SAFETY: the load of `acc` and the store back cover exactly its 8 elements;
            // `load8x8` reads columns j..j+8 <= n of the rows `p`, readable by the
            // caller's guarantee, as is the tail `j..n` for `sum8_scalar`. The caller
            // also guarantees AVX-512F, which implies the AVX of `load8x8`.
            unsafe {
                let mut a = _mm512_loadu_pd(acc.as_ptr());
                let mut j = 0;
                while j + 8 <= n {
                    for c in load8x8(p, j) {
                        a = _mm512_add_pd(a, _mm512_cvtps_pd(c));
                    }
                    j += 8;
                }
                _mm512_storeu_pd(acc.as_mut_ptr(), a);
                sum8_scalar(acc, p, j, n);
            }
        }

        #[inline(always)]
        unsafe fn dot8(acc: &mut [f64; 8], x: &[*const f32; 8], y: &[*const f32; 8], n: usize) {
            // SAFETY: as in `sum8`, for the rows of both `x` and `y`.
            unsafe {
                let mut a = _mm512_loadu_pd(acc.as_ptr());
                let mut j = 0;
                while j + 8 <= n {
                    let cx = load8x8(x, j);
                    let cy = load8x8(y, j);
                    for c in 0..8 {
                        let p = _mm512_mul_pd(_mm512_cvtps_pd(cx[c]), _mm512_cvtps_pd(cy[c]));
                        a = _mm512_add_pd(a, p);
                    }
                    j += 8;
                }
                _mm512_storeu_pd(acc.as_mut_ptr(), a);
                dot8_scalar(acc, x, y, j, n);
            }
        }
    }
}

#[cfg(target_arch = "aarch64")]
mod neon {
    use super::*;
    use crate::cpu::simd::F32x4;
    use core::arch::aarch64::*;

    /// Transposes four rows of four f32 so that `c[j]` holds element `j` of each row (row
    /// `r` in lane `r`), by two rounds of `zip1`/`zip2`.
    #[inline(always)]
    fn transpose4(r: [float32x4_t; 4]) -> [float32x4_t; 4] {
        // SAFETY: register-only NEON permutes (no memory access); NEON is part of every
        // AArch64 CPU.
        unsafe {
            let t0 = vzip1q_f32(r[0], r[2]);
            let t1 = vzip2q_f32(r[0], r[2]);
            let t2 = vzip1q_f32(r[1], r[3]);
            let t3 = vzip2q_f32(r[1], r[3]);
            [
                vzip1q_f32(t0, t2),
                vzip2q_f32(t0, t2),
                vzip1q_f32(t1, t3),
                vzip2q_f32(t1, t3),
            ]
        }
    }

    /// Loads columns `j..j+4` of rows `p[h*4..h*4+4]` and transposes them.
    ///
    /// # Safety
    /// `p[h*4+r]+j..p[h*4+r]+j+4` must be readable for every `r < 4`.
    #[inline(always)]
    unsafe fn load4x4(p: &[*const f32; 8], h: usize, j: usize) -> [float32x4_t; 4] {
        // SAFETY: each `ld1` reads `p[h*4+r]+j..+4`, readable by the caller's guarantee;
        // NEON is part of every AArch64 CPU.
        transpose4(core::array::from_fn(|r| unsafe {
            vld1q_f32(p[h * 4 + r].add(j))
        }))
    }

    /// Four f32 widened exactly to two pairs of f64 (lanes 0–1 and 2–3).
    #[inline(always)]
    fn widen4(v: float32x4_t) -> (float64x2_t, float64x2_t) {
        // SAFETY: register-only NEON conversions (`fcvtl`, `fcvtl2`); NEON is part of
        // every AArch64 CPU.
        unsafe { (vcvt_f64_f32(vget_low_f32(v)), vcvt_high_f64_f32(v)) }
    }

    impl RowSum for F32x4 {
        #[inline(always)]
        unsafe fn add_wide(acc: *mut f64, x: *const f32) {
            // SAFETY: reads `x..x+4` and reads and writes `acc..acc+4`, both covered by
            // the caller's guarantee; `ld1`/`st1` need only element alignment, and NEON
            // is part of every AArch64 CPU.
            unsafe {
                let (lo, hi) = widen4(vld1q_f32(x));
                vst1q_f64(acc, vaddq_f64(vld1q_f64(acc), lo));
                vst1q_f64(acc.add(2), vaddq_f64(vld1q_f64(acc.add(2)), hi));
            }
        }

        #[inline(always)]
        unsafe fn sum8(acc: &mut [f64; 8], p: &[*const f32; 8], n: usize) {
            // SAFETY: the loads of `acc` and the stores back stay inside its 8 elements;
            // `load4x4` reads columns j..j+4 <= n of the rows `p`, readable by the
            // caller's guarantee, as is the tail `j..n` for `sum8_scalar`. NEON is part of
            // every AArch64 CPU.
            unsafe {
                let mut a: [float64x2_t; 4] =
                    core::array::from_fn(|i| vld1q_f64(acc.as_ptr().add(2 * i)));
                let mut j = 0;
                while j + 4 <= n {
                    for h in 0..2 {
                        for col in load4x4(p, h, j) {
                            let (lo, hi) = widen4(col);
                            a[2 * h] = vaddq_f64(a[2 * h], lo);
                            a[2 * h + 1] = vaddq_f64(a[2 * h + 1], hi);
                        }
                    }
                    j += 4;
                }
                for (i, v) in a.iter().enumerate() {
                    vst1q_f64(acc.as_mut_ptr().add(2 * i), *v);
                }
                sum8_scalar(acc, p, j, n);
            }
        }

        #[inline(always)]
        unsafe fn dot8(acc: &mut [f64; 8], x: &[*const f32; 8], y: &[*const f32; 8], n: usize) {
            // SAFETY: as in `sum8`, for the rows of both `x` and `y`.
            unsafe {
                let mut a: [float64x2_t; 4] =
                    core::array::from_fn(|i| vld1q_f64(acc.as_ptr().add(2 * i)));
                let mut j = 0;
                while j + 4 <= n {
                    for h in 0..2 {
                        let cx = load4x4(x, h, j);
                        let cy = load4x4(y, h, j);
                        for col in 0..4 {
                            let (xl, xh) = widen4(cx[col]);
                            let (yl, yh) = widen4(cy[col]);
                            // The product of two f32 is exact in f64, then one rounded
                            // addition: a separate `fmul` and `fadd`, as the scalar form.
                            a[2 * h] = vaddq_f64(a[2 * h], vmulq_f64(xl, yl));
                            a[2 * h + 1] = vaddq_f64(a[2 * h + 1], vmulq_f64(xh, yh));
                        }
                    }
                    j += 4;
                }
                for (i, v) in a.iter().enumerate() {
                    vst1q_f64(acc.as_mut_ptr().add(2 * i), *v);
                }
                dot8_scalar(acc, x, y, j, n);
            }
        }
    }
}
