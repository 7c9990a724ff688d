//! Vector lanes for the ISA paths: [`SimdLane`] adds loads and stores to [`Lane`], and the x86-64 types implement both with `core::arch` intrinsics.
//!
//! The lane types are only ever instantiated inside functions compiled with the matching
//! `#[target_feature]` and called after run-time detection (see [`super::Isa`]); every
//! method is `#[inline(always)]` so the intrinsics are inlined into those functions.

use crate::lane::{FusedLane, Lane};

/// A lane that can be loaded from and stored to memory.
pub trait SimdLane: Lane {
    /// Number of f32 elements in one lane.
    const WIDTH: usize;

    /// Loads `WIDTH` elements from `p` (no alignment needed).
    ///
    /// # Safety
    /// `p..p+WIDTH` must be readable.
    unsafe fn load(p: *const f32) -> Self;

    /// Stores `WIDTH` elements to `p`.
    ///
    /// # Safety
    /// `p..p+WIDTH` must be writable.
    unsafe fn store(self, p: *mut f32);
}

impl SimdLane for f32 {
    const WIDTH: usize = 1;

    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the caller guarantees `p` is readable.
        unsafe { *p }
    }

    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: the caller guarantees `p` is writable.
        unsafe { *p = self }
    }
}

#[cfg(target_arch = "x86_64")]
pub use x86::{F32x16, F32x4, F32x8};

#[cfg(target_arch = "x86_64")]
mod x86 {
    // SAFETY (whole module): every intrinsic here needs the target feature of its lane
    // type (sse2 for F32x4, avx2 and fma for F32x8, avx512f for F32x16). The lane types
    // are only used inside kernels compiled with those features, which are only called
    // after `is_x86_feature_detected!` confirmed them (see `cpu::Isa::is_supported`).
    #![allow(unsafe_op_in_unsafe_fn)]
    use super::*;
    use core::arch::x86_64::*;

    macro_rules! shift_count {
        ($n:expr) => {
            _mm_cvtsi32_si128($n as i32)
        };
    }

    /// Four f32 lanes in an SSE register (the 128-bit path).
    #[derive(Clone, Copy, Debug)]
    pub struct F32x4(pub __m128);

    impl Lane for F32x4 {
        type Mask = __m128;
        type Bits = __m128i;

        #[inline(always)]
        fn splat(v: f32) -> Self {
            // SAFETY: see the module comment.
            unsafe { F32x4(_mm_set1_ps(v)) }
        }
        #[inline(always)]
        fn add(self, o: Self) -> Self {
            unsafe { F32x4(_mm_add_ps(self.0, o.0)) }
        }
        #[inline(always)]
        fn sub(self, o: Self) -> Self {
            unsafe { F32x4(_mm_sub_ps(self.0, o.0)) }
        }
        #[inline(always)]
        fn mul(self, o: Self) -> Self {
            unsafe { F32x4(_mm_mul_ps(self.0, o.0)) }
        }
        #[inline(always)]
        fn div(self, o: Self) -> Self {
            unsafe { F32x4(_mm_div_ps(self.0, o.0)) }
        }
        #[inline(always)]
        fn sqrt(self) -> Self {
            unsafe { F32x4(_mm_sqrt_ps(self.0)) }
        }
        #[inline(always)]
        fn lt(self, o: Self) -> __m128 {
            unsafe { _mm_cmplt_ps(self.0, o.0) }
        }
        #[inline(always)]
        fn le(self, o: Self) -> __m128 {
            unsafe { _mm_cmple_ps(self.0, o.0) }
        }
        #[inline(always)]
        fn eq(self, o: Self) -> __m128 {
            unsafe { _mm_cmpeq_ps(self.0, o.0) }
        }
        #[inline(always)]
        fn mask_and(a: __m128, b: __m128) -> __m128 {
            unsafe { _mm_and_ps(a, b) }
        }
        #[inline(always)]
        fn mask_or(a: __m128, b: __m128) -> __m128 {
            unsafe { _mm_or_ps(a, b) }
        }
        #[inline(always)]
        fn mask_not(a: __m128) -> __m128 {
            unsafe { _mm_xor_ps(a, _mm_castsi128_ps(_mm_set1_epi32(-1))) }
        }
        #[inline(always)]
        fn select(m: __m128, a: Self, b: Self) -> Self {
            unsafe { F32x4(_mm_or_ps(_mm_and_ps(m, a.0), _mm_andnot_ps(m, b.0))) }
        }
        #[inline(always)]
        fn to_bits(self) -> __m128i {
            unsafe { _mm_castps_si128(self.0) }
        }
        #[inline(always)]
        fn from_bits(b: __m128i) -> Self {
            unsafe { F32x4(_mm_castsi128_ps(b)) }
        }
        #[inline(always)]
        fn bits_splat(v: u32) -> __m128i {
            unsafe { _mm_set1_epi32(v as i32) }
        }
        #[inline(always)]
        fn bits_add(a: __m128i, b: __m128i) -> __m128i {
            unsafe { _mm_add_epi32(a, b) }
        }
        #[inline(always)]
        fn bits_sub(a: __m128i, b: __m128i) -> __m128i {
            unsafe { _mm_sub_epi32(a, b) }
        }
        #[inline(always)]
        fn bits_and(a: __m128i, b: __m128i) -> __m128i {
            unsafe { _mm_and_si128(a, b) }
        }
        #[inline(always)]
        fn bits_or(a: __m128i, b: __m128i) -> __m128i {
            unsafe { _mm_or_si128(a, b) }
        }
        #[inline(always)]
        fn bits_shl<const N: u32>(a: __m128i) -> __m128i {
            unsafe { _mm_sll_epi32(a, shift_count!(N)) }
        }
        #[inline(always)]
        fn bits_shr<const N: u32>(a: __m128i) -> __m128i {
            unsafe { _mm_srl_epi32(a, shift_count!(N)) }
        }
        #[inline(always)]
        fn bits_sar<const N: u32>(a: __m128i) -> __m128i {
            unsafe { _mm_sra_epi32(a, shift_count!(N)) }
        }
    }

    impl FusedLane for F32x4 {
        #[inline(always)]
        fn fused_mul_add(self, b: Self, c: Self) -> Self {
            unsafe { F32x4(_mm_fmadd_ps(self.0, b.0, c.0)) }
        }
    }

    impl SimdLane for F32x4 {
        const WIDTH: usize = 4;
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            F32x4(_mm_loadu_ps(p))
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            _mm_storeu_ps(p, self.0)
        }
    }

    /// Eight f32 lanes in an AVX register (the AVX2 path).
    #[derive(Clone, Copy, Debug)]
    pub struct F32x8(pub __m256);

    impl Lane for F32x8 {
        type Mask = __m256;
        type Bits = __m256i;

        #[inline(always)]
        fn splat(v: f32) -> Self {
            unsafe { F32x8(_mm256_set1_ps(v)) }
        }
        #[inline(always)]
        fn add(self, o: Self) -> Self {
            unsafe { F32x8(_mm256_add_ps(self.0, o.0)) }
        }
        #[inline(always)]
        fn sub(self, o: Self) -> Self {
            unsafe { F32x8(_mm256_sub_ps(self.0, o.0)) }
        }
        #[inline(always)]
        fn mul(self, o: Self) -> Self {
            unsafe { F32x8(_mm256_mul_ps(self.0, o.0)) }
        }
        #[inline(always)]
        fn div(self, o: Self) -> Self {
            unsafe { F32x8(_mm256_div_ps(self.0, o.0)) }
        }
        #[inline(always)]
        fn sqrt(self) -> Self {
            unsafe { F32x8(_mm256_sqrt_ps(self.0)) }
        }
        #[inline(always)]
        fn lt(self, o: Self) -> __m256 {
            unsafe { _mm256_cmp_ps::<_CMP_LT_OQ>(self.0, o.0) }
        }
        #[inline(always)]
        fn le(self, o: Self) -> __m256 {
            unsafe { _mm256_cmp_ps::<_CMP_LE_OQ>(self.0, o.0) }
        }
        #[inline(always)]
        fn eq(self, o: Self) -> __m256 {
            unsafe { _mm256_cmp_ps::<_CMP_EQ_OQ>(self.0, o.0) }
        }
        #[inline(always)]
        fn mask_and(a: __m256, b: __m256) -> __m256 {
            unsafe { _mm256_and_ps(a, b) }
        }
        #[inline(always)]
        fn mask_or(a: __m256, b: __m256) -> __m256 {
            unsafe { _mm256_or_ps(a, b) }
        }
        #[inline(always)]
        fn mask_not(a: __m256) -> __m256 {
            unsafe { _mm256_xor_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(-1))) }
        }
        #[inline(always)]
        fn select(m: __m256, a: Self, b: Self) -> Self {
            unsafe { F32x8(_mm256_blendv_ps(b.0, a.0, m)) }
        }
        #[inline(always)]
        fn to_bits(self) -> __m256i {
            unsafe { _mm256_castps_si256(self.0) }
        }
        #[inline(always)]
        fn from_bits(b: __m256i) -> Self {
            unsafe { F32x8(_mm256_castsi256_ps(b)) }
        }
        #[inline(always)]
        fn bits_splat(v: u32) -> __m256i {
            unsafe { _mm256_set1_epi32(v as i32) }
        }
        #[inline(always)]
        fn bits_add(a: __m256i, b: __m256i) -> __m256i {
            unsafe { _mm256_add_epi32(a, b) }
        }
        #[inline(always)]
        fn bits_sub(a: __m256i, b: __m256i) -> __m256i {
            unsafe { _mm256_sub_epi32(a, b) }
        }
        #[inline(always)]
        fn bits_and(a: __m256i, b: __m256i) -> __m256i {
            unsafe { _mm256_and_si256(a, b) }
        }
        #[inline(always)]
        fn bits_or(a: __m256i, b: __m256i) -> __m256i {
            unsafe { _mm256_or_si256(a, b) }
        }
        #[inline(always)]
        fn bits_shl<const N: u32>(a: __m256i) -> __m256i {
            unsafe { _mm256_sll_epi32(a, shift_count!(N)) }
        }
        #[inline(always)]
        fn bits_shr<const N: u32>(a: __m256i) -> __m256i {
            unsafe { _mm256_srl_epi32(a, shift_count!(N)) }
        }
        #[inline(always)]
        fn bits_sar<const N: u32>(a: __m256i) -> __m256i {
            unsafe { _mm256_sra_epi32(a, shift_count!(N)) }
        }
    }

    impl FusedLane for F32x8 {
        #[inline(always)]
        fn fused_mul_add(self, b: Self, c: Self) -> Self {
            unsafe { F32x8(_mm256_fmadd_ps(self.0, b.0, c.0)) }
        }
    }

    impl SimdLane for F32x8 {
        const WIDTH: usize = 8;
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            F32x8(_mm256_loadu_ps(p))
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            _mm256_storeu_ps(p, self.0)
        }
    }

    /// Sixteen f32 lanes in an AVX-512 register (the AVX-512 path).
    #[derive(Clone, Copy, Debug)]
    pub struct F32x16(pub __m512);

    impl Lane for F32x16 {
        type Mask = __mmask16;
        type Bits = __m512i;

        #[inline(always)]
        fn splat(v: f32) -> Self {
            unsafe { F32x16(_mm512_set1_ps(v)) }
        }
        #[inline(always)]
        fn add(self, o: Self) -> Self {
            unsafe { F32x16(_mm512_add_ps(self.0, o.0)) }
        }
        #[inline(always)]
        fn sub(self, o: Self) -> Self {
            unsafe { F32x16(_mm512_sub_ps(self.0, o.0)) }
        }
        #[inline(always)]
        fn mul(self, o: Self) -> Self {
            unsafe { F32x16(_mm512_mul_ps(self.0, o.0)) }
        }
        #[inline(always)]
        fn div(self, o: Self) -> Self {
            unsafe { F32x16(_mm512_div_ps(self.0, o.0)) }
        }
        #[inline(always)]
        fn sqrt(self) -> Self {
            unsafe { F32x16(_mm512_sqrt_ps(self.0)) }
        }
        #[inline(always)]
        fn lt(self, o: Self) -> __mmask16 {
            unsafe { _mm512_cmp_ps_mask::<_CMP_LT_OQ>(self.0, o.0) }
        }
        #[inline(always)]
        fn le(self, o: Self) -> __mmask16 {
            unsafe { _mm512_cmp_ps_mask::<_CMP_LE_OQ>(self.0, o.0) }
        }
        #[inline(always)]
        fn eq(self, o: Self) -> __mmask16 {
            unsafe { _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(self.0, o.0) }
        }
        #[inline(always)]
        fn mask_and(a: __mmask16, b: __mmask16) -> __mmask16 {
            a & b
        }
        #[inline(always)]
        fn mask_or(a: __mmask16, b: __mmask16) -> __mmask16 {
            a | b
        }
        #[inline(always)]
        fn mask_not(a: __mmask16) -> __mmask16 {
            !a
        }
        #[inline(always)]
        fn select(m: __mmask16, a: Self, b: Self) -> Self {
            unsafe { F32x16(_mm512_mask_blend_ps(m, b.0, a.0)) }
        }
        #[inline(always)]
        fn to_bits(self) -> __m512i {
            unsafe { _mm512_castps_si512(self.0) }
        }
        #[inline(always)]
        fn from_bits(b: __m512i) -> Self {
            unsafe { F32x16(_mm512_castsi512_ps(b)) }
        }
        #[inline(always)]
        fn bits_splat(v: u32) -> __m512i {
            unsafe { _mm512_set1_epi32(v as i32) }
        }
        #[inline(always)]
        fn bits_add(a: __m512i, b: __m512i) -> __m512i {
            unsafe { _mm512_add_epi32(a, b) }
        }
        #[inline(always)]
        fn bits_sub(a: __m512i, b: __m512i) -> __m512i {
            unsafe { _mm512_sub_epi32(a, b) }
        }
        #[inline(always)]
        fn bits_and(a: __m512i, b: __m512i) -> __m512i {
            unsafe { _mm512_and_si512(a, b) }
        }
        #[inline(always)]
        fn bits_or(a: __m512i, b: __m512i) -> __m512i {
            unsafe { _mm512_or_si512(a, b) }
        }
        #[inline(always)]
        fn bits_shl<const N: u32>(a: __m512i) -> __m512i {
            unsafe { _mm512_sll_epi32(a, shift_count!(N)) }
        }
        #[inline(always)]
        fn bits_shr<const N: u32>(a: __m512i) -> __m512i {
            unsafe { _mm512_srl_epi32(a, shift_count!(N)) }
        }
        #[inline(always)]
        fn bits_sar<const N: u32>(a: __m512i) -> __m512i {
            unsafe { _mm512_sra_epi32(a, shift_count!(N)) }
        }
    }

    impl FusedLane for F32x16 {
        #[inline(always)]
        fn fused_mul_add(self, b: Self, c: Self) -> Self {
            unsafe { F32x16(_mm512_fmadd_ps(self.0, b.0, c.0)) }
        }
    }

    impl SimdLane for F32x16 {
        const WIDTH: usize = 16;
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            F32x16(_mm512_loadu_ps(p))
        }
        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            _mm512_storeu_ps(p, self.0)
        }
    }
}
