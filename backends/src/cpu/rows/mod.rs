//! Row kernels of the CPU backends: softmax and log-softmax with their backward rules,
//! sums over dimensions, select and strided copies.
//!
//! Every kernel gives the bits of [`RefKernels`](crate::scalar_ref::RefKernels) of its
//! mode. The f64 sums (the normalisers of softmax and every reduction) keep each output's
//! own accumulation order: they are vectorised across outputs (see
//! [`crate::cpu::simd64`]), never within one. The row maximum of softmax is
//! order-independent by definition (`scalar::row_max`), so it is computed lane-wise and
//! then across lanes. Work is split over outputs (rows, groups
//! of sums) in chunks whose size is a constant of the kernel and the shape.
//!
//! Kernels never allocate: strided iteration uses fixed-size index arrays of
//! [`MAX_DIMS`](dims::MAX_DIMS) merged dimensions (a layout that still has more after
//! merging runs the reference loop, which gives the same bits).
//!
//! The files: `dims.rs` the strided iteration ([`Dims`](dims::Dims),
//! [`RowWalk`](dims::RowWalk)); `copy.rs` the strided copy; `select.rs` the select;
//! `sum.rs` the sums; `softmax.rs` softmax, log-softmax and their backward rules. Each
//! holds its generic lane kernel and its entry point (called by `CpuBackend`); this file
//! instantiates the lane kernels per ISA path and dispatches to them (`on_isa!`,
//! `by_mode!`).

use self::select::{select_chunk, SelectPlan};
use self::softmax::{softmax_backward_rows, softmax_rows};
use self::sum::{sum_chunk, SumPlan};
use crate::lane::{Exact, Fast, Madd};
use crate::scalar::ModeSpec;

/// Elements of work per parallel chunk (a constant: chunking never depends on threads).
const WORK_PER_CHUNK: usize = 1 << 14;

/// Instantiates the lane kernels for one ISA path inside functions compiled with the
/// path's target features.
macro_rules! row_kernels {
    ($module:ident, $lane:ty, $($feature:literal)?) => {
        #[allow(dead_code)]
        mod $module {
            use super::*;

            $(#[target_feature(enable = $feature)])?
            pub(super) unsafe fn softmax<M: ModeSpec + Madd<$lane> + Madd<crate::lane::Pair<$lane>>>(
                x: &[f32],
                out: &mut [f32],
                cols: usize,
                log: bool,
            ) {
                softmax_rows::<$lane, M>(x, out, cols, log)
            }

            $(#[target_feature(enable = $feature)])?
            pub(super) unsafe fn softmax_backward<M: ModeSpec + Madd<$lane>>(
                y: &[f32],
                g: &[f32],
                out: &mut [f32],
                cols: usize,
                log: bool,
            ) {
                softmax_backward_rows::<$lane, M>(y, g, out, cols, log)
            }

            $(#[target_feature(enable = $feature)])?
            pub(super) unsafe fn sum<M: ModeSpec + Madd<$lane>>(
                x: &[f32],
                p: &SumPlan,
                first: usize,
                out: &mut [f32],
            ) {
                sum_chunk::<$lane, M>(x, p, first, out)
            }

            $(#[target_feature(enable = $feature)])?
            #[allow(clippy::extra_unused_type_parameters)]
            pub(super) unsafe fn select<M: ModeSpec + Madd<$lane>>(
                c: &[f32],
                a: &[f32],
                b: &[f32],
                p: &SelectPlan,
                first_row: usize,
                out: &mut [f32],
            ) {
                select_chunk::<$lane>(c, a, b, p, first_row, out)
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
row_kernels!(r_avx512, crate::cpu::simd::F32x16, "avx512f");
#[cfg(target_arch = "x86_64")]
row_kernels!(r_avx2, crate::cpu::simd::F32x8, "avx2,fma");
#[cfg(target_arch = "x86_64")]
row_kernels!(r_v128, crate::cpu::simd::F32x4, "sse2");
#[cfg(target_arch = "x86_64")]
row_kernels!(r_v128_fma, crate::cpu::simd::F32x4, "sse2,fma");
#[cfg(target_arch = "aarch64")]
row_kernels!(r_neon, crate::cpu::simd::F32x4, "neon");
row_kernels!(r_scalar, f32,);

/// A concrete mode whose multiply-add serves every lane type of this machine.
#[cfg(target_arch = "x86_64")]
trait RowMode:
    ModeSpec
    + Madd<crate::cpu::simd::F32x4>
    + Madd<crate::cpu::simd::F32x8>
    + Madd<crate::cpu::simd::F32x16>
    + Madd<crate::lane::Pair<crate::cpu::simd::F32x4>>
    + Madd<crate::lane::Pair<crate::cpu::simd::F32x8>>
    + Madd<crate::lane::Pair<crate::cpu::simd::F32x16>>
    + Madd<crate::lane::Pair<f32>>
{
}
/// A concrete mode whose multiply-add serves every lane type of this machine.
#[cfg(target_arch = "aarch64")]
trait RowMode:
    ModeSpec
    + Madd<crate::cpu::simd::F32x4>
    + Madd<crate::lane::Pair<crate::cpu::simd::F32x4>>
    + Madd<crate::lane::Pair<f32>>
{
}
/// A concrete mode whose multiply-add serves every lane type of this machine.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
trait RowMode: ModeSpec + Madd<crate::lane::Pair<f32>> {}
impl RowMode for Exact {}
impl RowMode for Fast {}

/// Calls kernel `$f` of `$isa`'s instantiation in mode `$m`. Used only inside the
/// `*_on` functions, whose contract is `$isa.is_supported($m::MODE)` on this CPU.
macro_rules! on_isa {
    ($isa:expr, $m:ty, $f:ident($($arg:expr),* $(,)?)) => {
        // The instantiation chosen here needs avx512f, avx2 + fma, sse2 + fma (fast mode on
        // the 128-bit path), sse2 (exact mode there; every x86-64 CPU has it), neon or none.
        // SAFETY: the enclosing `*_on` function's caller guarantees that `$isa` is supported
        // in mode `$m`: exactly those features. Memory accesses are justified in the kernels.
        unsafe {
            match $isa {
                #[cfg(target_arch = "x86_64")]
                $crate::cpu::Isa::Avx512 => $crate::cpu::rows::r_avx512::$f::<$m>($($arg),*),
                #[cfg(target_arch = "x86_64")]
                $crate::cpu::Isa::Avx2 => $crate::cpu::rows::r_avx2::$f::<$m>($($arg),*),
                #[cfg(target_arch = "x86_64")]
                $crate::cpu::Isa::V128
                    if <$m as $crate::scalar::ModeSpec>::MODE == exactgrad_core::ComputeMode::Fast =>
                {
                    $crate::cpu::rows::r_v128_fma::$f::<$m>($($arg),*)
                }
                #[cfg(target_arch = "x86_64")]
                $crate::cpu::Isa::V128 => $crate::cpu::rows::r_v128::$f::<$m>($($arg),*),
                #[cfg(target_arch = "aarch64")]
                $crate::cpu::Isa::Neon => $crate::cpu::rows::r_neon::$f::<$m>($($arg),*),
                _ => $crate::cpu::rows::r_scalar::$f::<$m>($($arg),*),
            }
        }
    };
}

/// Runs `$body` with the type alias `$m` naming the concrete mode marker of `M`.
macro_rules! by_mode {
    ($mode:ty, $m:ident => $body:expr) => {
        match <$mode as $crate::scalar::ModeSpec>::MODE {
            exactgrad_core::ComputeMode::Exact => {
                type $m = $crate::lane::Exact;
                $body
            }
            exactgrad_core::ComputeMode::Fast => {
                type $m = $crate::lane::Fast;
                $body
            }
        }
    };
}

mod copy;
mod dims;
mod select;
mod softmax;
mod sum;

pub(crate) use copy::copy_strided;
pub(crate) use select::select;
pub(crate) use softmax::{softmax, softmax_backward};
pub(crate) use sum::sum;
