//! The register-only ceiling of each GEMM path (`docs/gemm.md` §7): the GEMM
//! micro-kernel's arithmetic — a tile of `MR × NV` accumulator lanes, each step
//! multiplying `MR` broadcast values by `NV` lanes of `B` and adding the products into the
//! accumulators — with every operand already in a register, so no load, store or packing
//! is timed. Exact mode issues a multiply and an add per lane multiply-add, fast mode one
//! fused multiply-add, as the micro-kernels do. The GFLOP/s this reaches is the most a
//! GEMM on that path can reach on this core; `cargo bench --bench gemm` is measured
//! against it.
//!
//! Run: `cargo bench --bench peak`. Each figure is the median of 15 runs of 2·10⁶ steps,
//! timed with the calling thread's CPU time (other processes' time slices do not count).

use std::time::Instant;

/// Steps per timed run.
const STEPS: u64 = 2_000_000;
/// Timed runs per path and mode.
const RUNS: usize = 15;

/// CPU time of the calling thread in seconds (wall time where not available).
fn thread_seconds(start: Instant) -> f64 {
    match cpu_time::ThreadTime::try_now() {
        Ok(t) => t.as_duration().as_secs_f64(),
        Err(_) => start.elapsed().as_secs_f64(),
    }
}

/// Median GFLOP/s of `RUNS` runs of `f`, which performs `flops_per_run` operations and
/// returns a value that depends on all of them.
fn measure(flops_per_run: f64, f: &dyn Fn() -> f32) -> f64 {
    let start = Instant::now();
    let mut rates = Vec::with_capacity(RUNS);
    let mut sink = 0.0f32;
    sink += f(); // warm-up (clock ramp, page-in)
    for _ in 0..RUNS {
        let t0 = thread_seconds(start);
        sink += f();
        let t1 = thread_seconds(start);
        rates.push(flops_per_run / (t1 - t0).max(1e-9) / 1e9);
    }
    std::hint::black_box(sink);
    rates.sort_by(f64::total_cmp);
    rates[RUNS / 2]
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use core::arch::asm;
    use core::arch::x86_64::*;

    /// Declares `$v` changed by an empty instruction sequence, so the compiler can
    /// neither hoist the products out of the loop nor fold the steps: zero instructions,
    /// one dependency.
    macro_rules! opaque {
        ($reg:ident, $($v:ident),+) => {
            $(
                // SAFETY: an empty asm block; it reads and writes only the register
                // that holds `$v` and touches no memory, stack or flags.
                unsafe { asm!("/* {0} */", inout($reg) $v, options(nomem, nostack, preserves_flags)) };
            )+
        };
    }

    /// The AVX-512 tile, 6 × 4 lanes of 16: exact (`FMA = false`) or fast.
    ///
    /// # Safety
    /// The CPU must support `avx512f`.
    #[inline(never)]
    #[target_feature(enable = "avx512f")]
    pub unsafe fn avx512<const FMA: bool>(steps: u64) -> f32 {
        let mut acc = [_mm512_setzero_ps(); 24];
        let mut a = _mm512_set1_ps(1.0);
        let (mut b0, mut b1, mut b2, mut b3) = (
            _mm512_set1_ps(1e-3),
            _mm512_set1_ps(2e-3),
            _mm512_set1_ps(3e-3),
            _mm512_set1_ps(4e-3),
        );
        for _ in 0..steps {
            opaque!(zmm_reg, b0, b1, b2, b3);
            let b = [b0, b1, b2, b3];
            for row in acc.chunks_exact_mut(4) {
                opaque!(zmm_reg, a);
                for (acc, &b) in row.iter_mut().zip(&b) {
                    *acc = if FMA {
                        _mm512_fmadd_ps(a, b, *acc)
                    } else {
                        _mm512_add_ps(*acc, _mm512_mul_ps(a, b))
                    };
                }
            }
        }
        let mut s = _mm512_setzero_ps();
        for v in acc {
            s = _mm512_add_ps(s, v);
        }
        _mm512_reduce_add_ps(s)
    }

    /// The AVX2 tile, 6 × 2 lanes of 8: exact (`FMA = false`) or fast.
    ///
    /// # Safety
    /// The CPU must support `avx2` and `fma`.
    #[inline(never)]
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn avx2<const FMA: bool>(steps: u64) -> f32 {
        let mut acc = [_mm256_setzero_ps(); 12];
        let mut a = _mm256_set1_ps(1.0);
        let (mut b0, mut b1) = (_mm256_set1_ps(1e-3), _mm256_set1_ps(2e-3));
        for _ in 0..steps {
            opaque!(ymm_reg, b0, b1);
            let b = [b0, b1];
            for row in acc.chunks_exact_mut(2) {
                opaque!(ymm_reg, a);
                for (acc, &b) in row.iter_mut().zip(&b) {
                    *acc = if FMA {
                        _mm256_fmadd_ps(a, b, *acc)
                    } else {
                        _mm256_add_ps(*acc, _mm256_mul_ps(a, b))
                    };
                }
            }
        }
        let mut s = _mm256_setzero_ps();
        for v in acc {
            s = _mm256_add_ps(s, v);
        }
        let mut out = [0.0f32; 8];
        _mm256_storeu_ps(out.as_mut_ptr(), s);
        out.iter().sum()
    }

    /// The 128-bit tile, 6 × 2 lanes of 4: exact (`FMA = false`, SSE2 multiply and add)
    /// or fast (the fast path's fused multiply-add).
    ///
    /// # Safety
    /// With `FMA` the CPU must support `fma` (SSE2 is part of x86-64).
    #[inline(never)]
    #[target_feature(enable = "sse2,fma")]
    pub unsafe fn v128<const FMA: bool>(steps: u64) -> f32 {
        let mut acc = [_mm_setzero_ps(); 12];
        let mut a = _mm_set1_ps(1.0);
        let (mut b0, mut b1) = (_mm_set1_ps(1e-3), _mm_set1_ps(2e-3));
        for _ in 0..steps {
            opaque!(xmm_reg, b0, b1);
            let b = [b0, b1];
            for row in acc.chunks_exact_mut(2) {
                opaque!(xmm_reg, a);
                for (acc, &b) in row.iter_mut().zip(&b) {
                    *acc = if FMA {
                        _mm_fmadd_ps(a, b, *acc)
                    } else {
                        _mm_add_ps(*acc, _mm_mul_ps(a, b))
                    };
                }
            }
        }
        let mut s = _mm_setzero_ps();
        for v in acc {
            s = _mm_add_ps(s, v);
        }
        let mut out = [0.0f32; 4];
        _mm_storeu_ps(out.as_mut_ptr(), s);
        out.iter().sum()
    }
}

fn main() {
    // Criterion's harness flags (`--bench`) are accepted and ignored.
    println!("register-only ceiling of the GEMM micro-kernel arithmetic, one thread, CPU time:");
    #[cfg(target_arch = "x86_64")]
    {
        let line = |path: &str, tile: &str, lanes: f64, exact: f64, fast: Option<f64>| {
            let fast = fast.map_or("—".to_string(), |f| format!("{f:7.1}"));
            println!(
                "peak/{path:<8} tile {tile:<7} ({lanes:>3} f32 per mul-add)   exact {exact:7.1} GFLOP/s   fast {fast} GFLOP/s"
            );
        };
        if std::arch::is_x86_feature_detected!("avx512f") {
            let flops = STEPS as f64 * 24.0 * 16.0 * 2.0;
            // SAFETY: avx512f was detected on this CPU just above.
            let exact = measure(flops, &|| unsafe { x86::avx512::<false>(STEPS) });
            // SAFETY: as above.
            let fast = measure(flops, &|| unsafe { x86::avx512::<true>(STEPS) });
            line("avx512", "6×4", 16.0, exact, Some(fast));
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            let flops = STEPS as f64 * 12.0 * 8.0 * 2.0;
            // SAFETY: avx2 and fma were detected on this CPU just above.
            let exact = measure(flops, &|| unsafe { x86::avx2::<false>(STEPS) });
            // SAFETY: as above.
            let fast = measure(flops, &|| unsafe { x86::avx2::<true>(STEPS) });
            line("avx2", "6×2", 8.0, exact, Some(fast));
        }
        if std::arch::is_x86_feature_detected!("fma") {
            let flops = STEPS as f64 * 12.0 * 4.0 * 2.0;
            // SAFETY: fma was detected on this CPU just above; SSE2 is baseline.
            let exact = measure(flops, &|| unsafe { x86::v128::<false>(STEPS) });
            // SAFETY: as above.
            let fast = measure(flops, &|| unsafe { x86::v128::<true>(STEPS) });
            line("v128", "6×2", 4.0, exact, Some(fast));
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    println!("(no probe for this architecture)");
}
