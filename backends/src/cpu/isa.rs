//! The ISA paths of the CPU backends: which ones this CPU supports in each mode, and the
//! best of them.

use super::*;

/// An instruction-set path of the CPU backends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
    /// 512-bit AVX-512F lanes (16 × f32).
    Avx512,
    /// 256-bit AVX2 lanes with FMA (8 × f32).
    Avx2,
    /// 128-bit lanes (4 × f32): SSE2 on x86-64 (plus FMA in fast mode).
    V128,
    /// 128-bit NEON lanes (4 × f32) on AArch64, with its fused multiply-add in fast mode.
    Neon,
    /// One f32 at a time, no SIMD.
    Scalar,
}

impl Isa {
    /// Every path, widest first (a CPU supports the x86-64 paths or NEON, never both).
    pub const ALL: [Isa; 5] = [Isa::Avx512, Isa::Avx2, Isa::V128, Isa::Neon, Isa::Scalar];

    /// The path's name as printed in reports.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Avx512 => "avx512",
            Isa::Avx2 => "avx2",
            Isa::V128 => "v128",
            Isa::Neon => "neon",
            Isa::Scalar => "scalar",
        }
    }

    /// Whether this CPU can run the path in `mode` (fast mode on the 128-bit x86-64 path
    /// also needs FMA, so that it is an FMA path; NEON always has its fused multiply-add).
    pub fn is_supported(self, mode: ComputeMode) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            match self {
                Isa::Avx512 => std::is_x86_feature_detected!("avx512f"),
                Isa::Avx2 => {
                    std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
                }
                Isa::V128 => mode == ComputeMode::Exact || std::is_x86_feature_detected!("fma"),
                Isa::Neon => false,
                Isa::Scalar => true,
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            let _ = mode;
            match self {
                Isa::Neon => std::arch::is_aarch64_feature_detected!("neon"),
                Isa::Scalar => true,
                Isa::Avx512 | Isa::Avx2 | Isa::V128 => false,
            }
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        {
            let _ = mode;
            self == Isa::Scalar
        }
    }

    /// The widest path this CPU supports in `mode`.
    pub fn best(mode: ComputeMode) -> Isa {
        Isa::ALL
            .into_iter()
            .find(|i| i.is_supported(mode))
            .unwrap_or(Isa::Scalar)
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The error of choosing a path this CPU lacks ([`exactgrad_core::Error::UnsupportedIsa`]).
pub(crate) fn unsupported_isa(isa: Isa, mode: ComputeMode) -> exactgrad_core::Error {
    exactgrad_core::Error::UnsupportedIsa {
        isa: isa.name(),
        mode,
    }
}
