//! Vector lanes for the ISA paths: [`SimdLane`] adds loads and stores to [`Lane`], and the
//! x86-64 and AArch64 types implement both with `core::arch` intrinsics.
//!
//! # The target-feature contract
//!
//! The methods of a lane type execute the instructions of its path: on x86-64, SSE2 for
//! [`F32x4`] (plus FMA for its [`FusedLane`] impl), AVX, AVX2 and FMA for `F32x8`,
//! AVX-512F for `F32x16`; on AArch64, NEON (Advanced SIMD, with its fused multiply-add)
//! for [`F32x4`]. Running one on a CPU without them is undefined behaviour, so a
//! value of a lane type is only created and used inside a function compiled with
//! `#[target_feature(enable = …)]` for that path (`isa_kernels!` in `cpu/mod.rs`,
//! `row_kernels!` in `cpu/rows/mod.rs`, `kernel!` in `cpu/gemm.rs`, and the exhaustive
//! test `backends/tests/exhaustive_vector.rs`), and such a function is only called for an
//! [`Isa`](super::Isa) that [`Isa::is_supported`](super::Isa::is_supported) confirmed on
//! this CPU. Every method is `#[inline(always)]`, so its intrinsics are compiled into
//! that function with its features. The `// SAFETY:` notes of the lane methods rest on
//! this contract (a macro-generated family shares one note at its macro). NEON is part
//! of every AArch64 CPU (the baseline of the `aarch64` targets), so on AArch64 the
//! contract holds for every function; the NEON path is still detected and compiled with
//! its feature named, like the x86-64 paths.

use crate::lane::{FusedLane, Lane};

/// A lane that can be loaded from and stored to memory.
pub trait SimdLane: Lane {
    /// Number of f32 elements in one lane.
    const WIDTH: usize;

    /// Loads `WIDTH` elements from `p` (no alignment beyond that of `f32` needed).
    ///
    /// # Safety
    /// `p..p+WIDTH` must be readable `f32`s (`p` aligned for `f32`), and the CPU must have
    /// the lane type's target features (see the module documentation).
    unsafe fn load(p: *const f32) -> Self;

    /// Stores `WIDTH` elements to `p`.
    ///
    /// # Safety
    /// `p..p+WIDTH` must be writable `f32`s (`p` aligned for `f32`), and the CPU must have
    /// the lane type's target features (see the module documentation).
    unsafe fn store(self, p: *mut f32);
}

impl SimdLane for f32 {
    const WIDTH: usize = 1;

    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the caller guarantees that `p` points to one readable, aligned `f32`
        // (WIDTH = 1); plain `f32` needs no target feature.
        unsafe { *p }
    }

    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: the caller guarantees that `p` points to one writable, aligned `f32`
        // (WIDTH = 1); plain `f32` needs no target feature.
        unsafe { *p = self }
    }
}

#[cfg(target_arch = "x86_64")]
pub use x86::{F32x16, F32x4, F32x8};

#[cfg(target_arch = "aarch64")]
pub use neon::F32x4;

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;
    use core::arch::x86_64::*;

    /// Methods whose body is one expression of register-only intrinsics, for a lane type
    /// whose intrinsics need the target features named after `needs`.
    macro_rules! register_fns {
        (needs $feature:literal; $(
            fn $name:ident $(<const $c:ident: $ct:ty>)? ($($params:tt)*) -> $ret:ty => $body:expr;
        )*) => {$(
            #[inline(always)]
            fn $name $(<const $c: $ct>)? ($($params)*) -> $ret {
                // SAFETY: the body only computes on registers (no memory access, so there
                // are no bounds to check), and every intrinsic in it needs at most the
                // target features named after `needs` in this invocation. Those features
                // are present: a value of this lane type only exists inside a function
                // compiled with them that runs after `Isa::is_supported` confirmed them
                // on this CPU (the target-feature contract of `cpu::simd`).
                unsafe { $body }
            }
        )*};
    }

    /// `load` and `store` of a lane type through the unaligned intrinsics `$load` and
    /// `$store`, whose target features the invocation names after `needs`.
    macro_rules! memory_fns {
        (needs $feature:literal; $wrap:ident, $width:literal, $load:ident, $store:ident) => {
            const WIDTH: usize = $width;

            #[inline(always)]
            unsafe fn load(p: *const f32) -> Self {
                // SAFETY: the caller guarantees that `p..p+WIDTH` are readable `f32`s and
                // that the CPU has this lane type's features (the `SimdLane::load`
                // contract); the unaligned load needs no more alignment than `f32`'s.
                unsafe { $wrap($load(p)) }
            }

            #[inline(always)]
            unsafe fn store(self, p: *mut f32) {
                // SAFETY: the caller guarantees that `p..p+WIDTH` are writable `f32`s and
                // that the CPU has this lane type's features (the `SimdLane::store`
                // contract); the unaligned store needs no more alignment than `f32`'s.
                unsafe { $store(p, self.0) }
            }
        };
    }

    /// The count operand of the shift intrinsics: `n` in the low 64 bits (SSE2).
    macro_rules! shift_count {
        ($n:expr) => {
            _mm_cvtsi32_si128($n as i32)
        };
    }

    /// Four f32 lanes in an SSE register (the 128-bit path): SSE2, which every x86-64 CPU
    /// has, and FMA for [`FusedLane`] (used only by fast mode, whose 128-bit path
    /// requires FMA). See the target-feature contract of the module.
    #[derive(Clone, Copy, Debug)]
    pub struct F32x4(pub __m128);

    impl Lane for F32x4 {
        type Mask = __m128;
        type Bits = __m128i;

        register_fns! {
            needs "sse2";
            fn splat(v: f32) -> Self => F32x4(_mm_set1_ps(v));
            fn add(self, o: Self) -> Self => F32x4(_mm_add_ps(self.0, o.0));
            fn sub(self, o: Self) -> Self => F32x4(_mm_sub_ps(self.0, o.0));
            fn mul(self, o: Self) -> Self => F32x4(_mm_mul_ps(self.0, o.0));
            fn div(self, o: Self) -> Self => F32x4(_mm_div_ps(self.0, o.0));
            fn sqrt(self) -> Self => F32x4(_mm_sqrt_ps(self.0));
            fn lt(self, o: Self) -> __m128 => _mm_cmplt_ps(self.0, o.0);
            fn le(self, o: Self) -> __m128 => _mm_cmple_ps(self.0, o.0);
            fn eq(self, o: Self) -> __m128 => _mm_cmpeq_ps(self.0, o.0);
            fn mask_and(a: __m128, b: __m128) -> __m128 => _mm_and_ps(a, b);
            fn mask_or(a: __m128, b: __m128) -> __m128 => _mm_or_ps(a, b);
            fn mask_not(a: __m128) -> __m128 =>
                _mm_xor_ps(a, _mm_castsi128_ps(_mm_set1_epi32(-1)));
            fn select(m: __m128, a: Self, b: Self) -> Self =>
                F32x4(_mm_or_ps(_mm_and_ps(m, a.0), _mm_andnot_ps(m, b.0)));
            fn to_bits(self) -> __m128i => _mm_castps_si128(self.0);
            fn from_bits(b: __m128i) -> Self => F32x4(_mm_castsi128_ps(b));
            fn bits_splat(v: u32) -> __m128i => _mm_set1_epi32(v as i32);
            fn bits_add(a: __m128i, b: __m128i) -> __m128i => _mm_add_epi32(a, b);
            fn bits_sub(a: __m128i, b: __m128i) -> __m128i => _mm_sub_epi32(a, b);
            fn bits_and(a: __m128i, b: __m128i) -> __m128i => _mm_and_si128(a, b);
            fn bits_or(a: __m128i, b: __m128i) -> __m128i => _mm_or_si128(a, b);
            fn bits_shl<const N: u32>(a: __m128i) -> __m128i => _mm_sll_epi32(a, shift_count!(N));
            fn bits_shr<const N: u32>(a: __m128i) -> __m128i => _mm_srl_epi32(a, shift_count!(N));
            fn bits_sar<const N: u32>(a: __m128i) -> __m128i => _mm_sra_epi32(a, shift_count!(N));
        }
    }

    impl FusedLane for F32x4 {
        register_fns! {
            needs "fma";
            fn fused_mul_add(self, b: Self, c: Self) -> Self => F32x4(_mm_fmadd_ps(self.0, b.0, c.0));
        }
    }

    impl SimdLane for F32x4 {
        memory_fns!(needs "sse2"; F32x4, 4, _mm_loadu_ps, _mm_storeu_ps);
    }

    /// Eight f32 lanes in an AVX register (the AVX2 path): AVX, AVX2 and FMA. See the
    /// target-feature contract of the module.
    #[derive(Clone, Copy, Debug)]
    pub struct F32x8(pub __m256);

    impl Lane for F32x8 {
        type Mask = __m256;
        type Bits = __m256i;

        register_fns! {
            needs "avx2";
            fn splat(v: f32) -> Self => F32x8(_mm256_set1_ps(v));
            fn add(self, o: Self) -> Self => F32x8(_mm256_add_ps(self.0, o.0));
            fn sub(self, o: Self) -> Self => F32x8(_mm256_sub_ps(self.0, o.0));
            fn mul(self, o: Self) -> Self => F32x8(_mm256_mul_ps(self.0, o.0));
            fn div(self, o: Self) -> Self => F32x8(_mm256_div_ps(self.0, o.0));
            fn sqrt(self) -> Self => F32x8(_mm256_sqrt_ps(self.0));
            fn lt(self, o: Self) -> __m256 => _mm256_cmp_ps::<_CMP_LT_OQ>(self.0, o.0);
            fn le(self, o: Self) -> __m256 => _mm256_cmp_ps::<_CMP_LE_OQ>(self.0, o.0);
            fn eq(self, o: Self) -> __m256 => _mm256_cmp_ps::<_CMP_EQ_OQ>(self.0, o.0);
            fn mask_and(a: __m256, b: __m256) -> __m256 => _mm256_and_ps(a, b);
            fn mask_or(a: __m256, b: __m256) -> __m256 => _mm256_or_ps(a, b);
            fn mask_not(a: __m256) -> __m256 =>
                _mm256_xor_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(-1)));
            fn select(m: __m256, a: Self, b: Self) -> Self => F32x8(_mm256_blendv_ps(b.0, a.0, m));
            fn to_bits(self) -> __m256i => _mm256_castps_si256(self.0);
            fn from_bits(b: __m256i) -> Self => F32x8(_mm256_castsi256_ps(b));
            fn bits_splat(v: u32) -> __m256i => _mm256_set1_epi32(v as i32);
            fn bits_add(a: __m256i, b: __m256i) -> __m256i => _mm256_add_epi32(a, b);
            fn bits_sub(a: __m256i, b: __m256i) -> __m256i => _mm256_sub_epi32(a, b);
            fn bits_and(a: __m256i, b: __m256i) -> __m256i => _mm256_and_si256(a, b);
            fn bits_or(a: __m256i, b: __m256i) -> __m256i => _mm256_or_si256(a, b);
            fn bits_shl<const N: u32>(a: __m256i) -> __m256i => _mm256_sll_epi32(a, shift_count!(N));
            fn bits_shr<const N: u32>(a: __m256i) -> __m256i => _mm256_srl_epi32(a, shift_count!(N));
            fn bits_sar<const N: u32>(a: __m256i) -> __m256i => _mm256_sra_epi32(a, shift_count!(N));
        }
    }

    impl FusedLane for F32x8 {
        register_fns! {
            needs "avx2,fma";
            fn fused_mul_add(self, b: Self, c: Self) -> Self => F32x8(_mm256_fmadd_ps(self.0, b.0, c.0));
        }
    }

    impl SimdLane for F32x8 {
        memory_fns!(needs "avx"; F32x8, 8, _mm256_loadu_ps, _mm256_storeu_ps);
    }

    /// Sixteen f32 lanes in an AVX-512 register (the AVX-512 path): AVX-512F. See the
    /// target-feature contract of the module.
    #[derive(Clone, Copy, Debug)]
    pub struct F32x16(pub __m512);

    impl Lane for F32x16 {
        type Mask = __mmask16;
        type Bits = __m512i;

        register_fns! {
            needs "avx512f";
            fn splat(v: f32) -> Self => F32x16(_mm512_set1_ps(v));
            fn add(self, o: Self) -> Self => F32x16(_mm512_add_ps(self.0, o.0));
            fn sub(self, o: Self) -> Self => F32x16(_mm512_sub_ps(self.0, o.0));
            fn mul(self, o: Self) -> Self => F32x16(_mm512_mul_ps(self.0, o.0));
            fn div(self, o: Self) -> Self => F32x16(_mm512_div_ps(self.0, o.0));
            fn sqrt(self) -> Self => F32x16(_mm512_sqrt_ps(self.0));
            fn lt(self, o: Self) -> __mmask16 => _mm512_cmp_ps_mask::<_CMP_LT_OQ>(self.0, o.0);
            fn le(self, o: Self) -> __mmask16 => _mm512_cmp_ps_mask::<_CMP_LE_OQ>(self.0, o.0);
            fn eq(self, o: Self) -> __mmask16 => _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(self.0, o.0);
            fn select(m: __mmask16, a: Self, b: Self) -> Self => F32x16(_mm512_mask_blend_ps(m, b.0, a.0));
            fn to_bits(self) -> __m512i => _mm512_castps_si512(self.0);
            fn from_bits(b: __m512i) -> Self => F32x16(_mm512_castsi512_ps(b));
            fn bits_splat(v: u32) -> __m512i => _mm512_set1_epi32(v as i32);
            fn bits_add(a: __m512i, b: __m512i) -> __m512i => _mm512_add_epi32(a, b);
            fn bits_sub(a: __m512i, b: __m512i) -> __m512i => _mm512_sub_epi32(a, b);
            fn bits_and(a: __m512i, b: __m512i) -> __m512i => _mm512_and_si512(a, b);
            fn bits_or(a: __m512i, b: __m512i) -> __m512i => _mm512_or_si512(a, b);
            fn bits_shl<const N: u32>(a: __m512i) -> __m512i => _mm512_sll_epi32(a, shift_count!(N));
            fn bits_shr<const N: u32>(a: __m512i) -> __m512i => _mm512_srl_epi32(a, shift_count!(N));
            fn bits_sar<const N: u32>(a: __m512i) -> __m512i => _mm512_sra_epi32(a, shift_count!(N));
        }

        // The mask of this path is a plain 16-bit integer: no intrinsics.
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
    }

    impl FusedLane for F32x16 {
        register_fns! {
            needs "avx512f";
            fn fused_mul_add(self, b: Self, c: Self) -> Self => F32x16(_mm512_fmadd_ps(self.0, b.0, c.0));
        }
    }

    impl SimdLane for F32x16 {
        memory_fns!(needs "avx512f"; F32x16, 16, _mm512_loadu_ps, _mm512_storeu_ps);
    }
}

#[cfg(target_arch = "aarch64")]
mod neon {
    use super::*;
    use core::arch::aarch64::*;

    /// Methods whose body is one expression of register-only NEON intrinsics.
    macro_rules! register_fns {
        ($(
            fn $name:ident $(<const $c:ident: $ct:ty>)? ($($params:tt)*) -> $ret:ty => $body:expr;
        )*) => {$(
            #[inline(always)]
            fn $name $(<const $c: $ct>)? ($($params)*) -> $ret {
                // SAFETY: the body only computes on registers (no memory access, so there
                // are no bounds to check), and every intrinsic in it needs at most NEON.
                // NEON is present: a value of this lane type only exists inside a function
                // compiled with it that runs after `Isa::is_supported` confirmed it on this
                // CPU (the target-feature contract of `cpu::simd`; NEON is also the
                // baseline of every AArch64 target).
                unsafe { $body }
            }
        )*};
    }

    /// The signed per-lane shift count `n` of `vshlq` (a negative count shifts right).
    macro_rules! shift_count {
        ($n:expr) => {
            vdupq_n_s32($n as i32)
        };
    }

    /// Four f32 lanes in a NEON register (the NEON path of AArch64). Exact mode multiplies
    /// (`fmul`) and adds (`fadd`) separately; [`FusedLane`] is the fused multiply-add
    /// `fmla` (fast mode only). AArch64 arithmetic is IEEE binary32 with round to nearest
    /// even and subnormals (the FPCR that Linux, macOS and Windows give a thread has
    /// flush-to-zero off), comparisons are false on NaN, and integer lanes wrap: the
    /// requirements of [`Lane`]. See the target-feature contract of the module.
    #[derive(Clone, Copy, Debug)]
    pub struct F32x4(pub float32x4_t);

    impl Lane for F32x4 {
        type Mask = uint32x4_t;
        type Bits = uint32x4_t;

        register_fns! {
            fn splat(v: f32) -> Self => F32x4(vdupq_n_f32(v));
            fn add(self, o: Self) -> Self => F32x4(vaddq_f32(self.0, o.0));
            fn sub(self, o: Self) -> Self => F32x4(vsubq_f32(self.0, o.0));
            fn mul(self, o: Self) -> Self => F32x4(vmulq_f32(self.0, o.0));
            fn div(self, o: Self) -> Self => F32x4(vdivq_f32(self.0, o.0));
            fn sqrt(self) -> Self => F32x4(vsqrtq_f32(self.0));
            fn lt(self, o: Self) -> uint32x4_t => vcltq_f32(self.0, o.0);
            fn le(self, o: Self) -> uint32x4_t => vcleq_f32(self.0, o.0);
            fn eq(self, o: Self) -> uint32x4_t => vceqq_f32(self.0, o.0);
            fn mask_and(a: uint32x4_t, b: uint32x4_t) -> uint32x4_t => vandq_u32(a, b);
            fn mask_or(a: uint32x4_t, b: uint32x4_t) -> uint32x4_t => vorrq_u32(a, b);
            fn mask_not(a: uint32x4_t) -> uint32x4_t => vmvnq_u32(a);
            fn select(m: uint32x4_t, a: Self, b: Self) -> Self => F32x4(vbslq_f32(m, a.0, b.0));
            fn to_bits(self) -> uint32x4_t => vreinterpretq_u32_f32(self.0);
            fn from_bits(b: uint32x4_t) -> Self => F32x4(vreinterpretq_f32_u32(b));
            fn bits_splat(v: u32) -> uint32x4_t => vdupq_n_u32(v);
            fn bits_add(a: uint32x4_t, b: uint32x4_t) -> uint32x4_t => vaddq_u32(a, b);
            fn bits_sub(a: uint32x4_t, b: uint32x4_t) -> uint32x4_t => vsubq_u32(a, b);
            fn bits_and(a: uint32x4_t, b: uint32x4_t) -> uint32x4_t => vandq_u32(a, b);
            fn bits_or(a: uint32x4_t, b: uint32x4_t) -> uint32x4_t => vorrq_u32(a, b);
            fn bits_shl<const N: u32>(a: uint32x4_t) -> uint32x4_t => vshlq_u32(a, shift_count!(N));
            fn bits_shr<const N: u32>(a: uint32x4_t) -> uint32x4_t =>
                vshlq_u32(a, shift_count!(-(N as i32)));
            fn bits_sar<const N: u32>(a: uint32x4_t) -> uint32x4_t =>
                vreinterpretq_u32_s32(vshlq_s32(vreinterpretq_s32_u32(a), shift_count!(-(N as i32))));
        }
    }

    impl FusedLane for F32x4 {
        register_fns! {
            // `vfmaq_f32(c, a, b)` is `c + a·b` rounded once.
            fn fused_mul_add(self, b: Self, c: Self) -> Self => F32x4(vfmaq_f32(c.0, self.0, b.0));
        }
    }

    impl SimdLane for F32x4 {
        const WIDTH: usize = 4;

        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            // SAFETY: the caller guarantees that `p..p+4` are readable `f32`s and that the
            // CPU has NEON (the `SimdLane::load` contract); `ld1` needs no more alignment
            // than `f32`'s.
            unsafe { F32x4(vld1q_f32(p)) }
        }

        #[inline(always)]
        unsafe fn store(self, p: *mut f32) {
            // SAFETY: the caller guarantees that `p..p+4` are writable `f32`s and that the
            // CPU has NEON (the `SimdLane::store` contract); `st1` needs no more alignment
            // than `f32`'s.
            unsafe { vst1q_f32(p, self.0) }
        }
    }
}
