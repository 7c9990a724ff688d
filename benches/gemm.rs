//! GEMM throughput of `ExactBackend` and `FastBackend`, per ISA path, at 1 and 2 threads,
//! on square products and the products of a 128-wide transformer (batch 8 × sequence 64
//! = 512 rows): the QKV projection, the feed-forward up and down projections, the output
//! projection.
//!
//! Run with `cargo bench --bench gemm` (a filter such as `-- avx512/t1` selects a
//! subset). Criterion reports throughput in elements per second with one element per
//! floating-point operation (`Throughput::Elements(2·m·n·k)`), so its `Gelem/s` are
//! GFLOP/s. At the end the bench prints one summary line per benchmark, in the format of
//! `tools/bench_torch.py`: the median over the individually timed calls of the measured
//! samples, as GFLOP/s = 2·m·n·k / seconds per call / 1e9, and at one thread also the
//! median over the calls' CPU time (unaffected by other processes on a shared machine).

use criterion::{Criterion, Throughput};
use exactgrad_backends::cpu::{CpuBackend, Isa};
use exactgrad_backends::lane::{Exact, Fast};
use exactgrad_core::backend::MatmulSpec;
use exactgrad_core::{Backend, ComputeMode, HostViews, Philox};
use std::cell::RefCell;
use std::time::{Duration, Instant};

/// Samples per benchmark (criterion's minimum).
const SAMPLES: usize = 10;

/// (name, m, k, n): the same list as `tools/bench_torch.py`.
const SHAPES: [(&str, usize, usize, usize); 7] = [
    ("sq256", 256, 256, 256),
    ("sq512", 512, 512, 512),
    ("sq1024", 1024, 1024, 1024),
    ("qkv", 512, 128, 384),
    ("ff_up", 512, 128, 512),
    ("ff_down", 512, 512, 128),
    ("proj", 512, 128, 128),
];

/// Whether `isa` is benchmarked on `shape`: the 128-bit, NEON and scalar paths skip the largest
/// squares, which would take most of the run's time without telling anything new.
fn wanted(isa: Isa, shape: &str) -> bool {
    match isa {
        Isa::Avx512 | Isa::Avx2 => true,
        Isa::V128 | Isa::Neon => shape != "sq1024",
        Isa::Scalar => shape != "sq512" && shape != "sq1024",
    }
}

fn data(len: usize, seed: u64) -> Vec<f32> {
    let mut r = Philox::new(seed);
    (0..len).map(|_| r.next_f32() - 0.5).collect()
}

/// Benchmarks one backend on one shape and returns its summary line (if it ran).
fn bench<B: Backend<Views = HostViews>>(
    c: &mut Criterion,
    be: &B,
    label: &str,
    threads: usize,
    (m, k, n): (usize, usize, usize),
) -> Option<String> {
    let a = data(m * k, 1);
    let b = data(k * n, 2);
    let mut out = vec![0.0f32; m * n];
    let spec = MatmulSpec {
        batch: 1,
        m,
        k,
        n,
        a_offset: 0,
        a_strides: [0, k, 1],
        b_offset: 0,
        b_strides: [0, n, 1],
    };
    let flops = 2 * m * n * k;
    // Per call of the routine (one criterion sample): the wall-clock and CPU time of each
    // product.
    let samples: RefCell<Vec<Vec<(Duration, f64)>>> = RefCell::new(Vec::new());
    let mut group = c.benchmark_group("gemm");
    group.throughput(Throughput::Elements(flops as u64));
    group.bench_function(label, |bch| {
        bch.iter_custom(|iters| {
            let mut calls = Vec::with_capacity(iters as usize);
            for _ in 0..iters {
                let t = Instant::now();
                let c = thread_cpu_seconds();
                be.matmul(&spec, &a, &b, &mut out).unwrap();
                let cpu = thread_cpu_seconds() - c;
                calls.push((t.elapsed(), cpu));
            }
            let total = calls.iter().map(|c| c.0).sum();
            samples.borrow_mut().push(calls);
            total
        })
    });
    group.finish();
    // The last SAMPLES calls of the routine are the measurement (earlier ones warm up).
    let samples = samples.into_inner();
    let measured = samples.iter().rev().take(SAMPLES).flatten();
    let gflops = |s: f64| flops as f64 / s.max(1e-12) / 1e9;
    let mut calls: Vec<f64> = measured
        .clone()
        .map(|c| gflops(c.0.as_secs_f64()))
        .collect();
    let mut cpu: Vec<f64> = measured.map(|c| gflops(c.1)).collect();
    if calls.is_empty() {
        return None;
    }
    calls.sort_by(f64::total_cmp);
    cpu.sort_by(f64::total_cmp);
    let median = calls[calls.len() / 2];
    // With one thread the product runs on the calling thread, whose CPU time excludes the
    // time slices that other processes take.
    let cpu_note = if threads == 1 && cfg!(all(target_os = "linux", target_pointer_width = "64")) {
        format!(", cpu-time median {:.2}", cpu[cpu.len() / 2])
    } else {
        String::new()
    };
    Some(format!(
        "{:<44} median {median:8.2} GFLOP/s   (min {:.2}, max {:.2}, {} calls{cpu_note})",
        format!("gemm/{label}"),
        calls[0],
        calls[calls.len() - 1],
        calls.len()
    ))
}

/// CPU time of the calling thread in seconds (0 where not available).
fn thread_cpu_seconds() -> f64 {
    #[cfg(all(target_os = "linux", target_pointer_width = "64"))]
    {
        #[repr(C)]
        struct Timespec {
            tv_sec: i64,
            tv_nsec: i64,
        }
        extern "C" {
            fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
        }
        const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
        let mut ts = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime from the C library std links against; `ts` is a valid
        // timespec (two 64-bit fields on 64-bit Linux) to write to.
        if unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0 {
            return ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9;
        }
    }
    0.0
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(SAMPLES)
        .warm_up_time(Duration::from_millis(150))
        .measurement_time(Duration::from_millis(500))
        .without_plots()
        .configure_from_args();
    let mut summary = Vec::new();
    for threads in [1, 2] {
        for isa in Isa::ALL {
            for mode in [ComputeMode::Exact, ComputeMode::Fast] {
                if !isa.is_supported(mode) {
                    eprintln!("skipped: gemm {mode} {isa} (not supported by this CPU)");
                    continue;
                }
                for &(name, m, k, n) in &SHAPES {
                    if !wanted(isa, name) {
                        continue;
                    }
                    let label = format!("{mode}/{isa}/t{threads}/{m}x{k}x{n}");
                    let line = match mode {
                        ComputeMode::Exact => {
                            let be = CpuBackend::<Exact>::with_isa(isa, threads).unwrap();
                            bench(&mut c, &be, &label, threads, (m, k, n))
                        }
                        ComputeMode::Fast => {
                            let be = CpuBackend::<Fast>::with_isa(isa, threads).unwrap();
                            bench(&mut c, &be, &label, threads, (m, k, n))
                        }
                    };
                    summary.extend(line);
                }
            }
        }
    }
    c.final_summary();
    if !summary.is_empty() {
        println!("\nGEMM summary (median of individually timed calls):");
        for line in summary {
            println!("{line}");
        }
    }
}
