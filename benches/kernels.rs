//! Memory-bound kernels of `ExactBackend` and `FastBackend` against the memory bandwidth
//! of this machine: element-wise add, mul, exp, GELU (erf form) forward and backward, and
//! softmax / log-softmax / softmax backward over rows of 1024, per mode, per ISA path, at
//! 1 and 2 threads, on 16M elements (64 MiB per buffer, well beyond the caches) and on
//! 16K elements (in L2).
//!
//! The bandwidth bound of a kernel is the time the matching STREAM-style loop takes on
//! the same buffers and threads (plain Rust loops, vectorised by the compiler, regular
//! stores): `scale` (one input, one output) for unary kernels and softmax, `add` (two
//! inputs) for binary kernels and softmax backward, `triad3` (three inputs) for the
//! unary backward. Bytes counted per element: 4 per input read plus 4 for the output.
//!
//! Run with `cargo bench --bench kernels` (a filter such as `-- exact/avx512` selects a
//! subset). Criterion reports bytes per second; at the end the bench prints one line per
//! kernel: the median time per call, GB/s, and the ratio of its time to the bound's
//! (the target is within 1.5×).

use criterion::{Criterion, Throughput};
use exactgrad_backends::cpu::{CpuBackend, Isa};
use exactgrad_backends::lane::{Exact, Fast};
use exactgrad_core::{Backend, BinaryOp, ComputeMode, HostViews, Layout, Philox, UnaryOp};
use std::time::{Duration, Instant};

/// Elements of the out-of-cache size.
const BIG: usize = 1 << 24;
/// Elements of the in-cache size.
const SMALL: usize = 1 << 14;
/// Row length of the softmax benches.
const COLS: usize = 1024;

/// The kernels benchmarked, with the inputs each reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum K {
    Add,
    Mul,
    Exp,
    Gelu,
    GeluBackward,
    Softmax,
    LogSoftmax,
    SoftmaxBackward,
}

impl K {
    const ALL: [K; 8] = [
        K::Add,
        K::Mul,
        K::Exp,
        K::Gelu,
        K::GeluBackward,
        K::Softmax,
        K::LogSoftmax,
        K::SoftmaxBackward,
    ];

    fn name(self) -> &'static str {
        match self {
            K::Add => "add",
            K::Mul => "mul",
            K::Exp => "exp",
            K::Gelu => "gelu",
            K::GeluBackward => "gelu_backward",
            K::Softmax => "softmax",
            K::LogSoftmax => "log_softmax",
            K::SoftmaxBackward => "softmax_backward",
        }
    }

    /// Number of input buffers read (each element also writes one output).
    fn inputs(self) -> usize {
        match self {
            K::Add | K::Mul | K::SoftmaxBackward => 2,
            K::GeluBackward => 3,
            _ => 1,
        }
    }
}

fn data(len: usize, seed: u64) -> Vec<f32> {
    let mut r = Philox::new(seed);
    (0..len).map(|_| r.uniform(-4.0, 4.0)).collect()
}

struct Bufs {
    x: Vec<f32>,
    y: Vec<f32>,
    g: Vec<f32>,
    out: Vec<f32>,
}

impl Bufs {
    fn new(n: usize) -> Self {
        Bufs {
            x: data(n, 1),
            y: data(n, 2),
            g: data(n, 3),
            out: vec![0.0; n],
        }
    }
}

fn run<B: Backend<Views = HostViews>>(b: &B, k: K, bufs: &mut Bufs) {
    let n = bufs.out.len();
    let l = Layout::contiguous([n]);
    let (x, y, g, out) = (&bufs.x, &bufs.y, &bufs.g, &mut bufs.out);
    match k {
        K::Add => b.binary(BinaryOp::Add, x, &l, y, &l, out),
        K::Mul => b.binary(BinaryOp::Mul, x, &l, y, &l, out),
        K::Exp => b.unary(UnaryOp::Exp, x, out),
        K::Gelu => b.unary(UnaryOp::GeluErf, x, out),
        K::GeluBackward => b.unary_backward(UnaryOp::GeluErf, x, y, g, out),
        K::Softmax => b.softmax(x, n / COLS, COLS, false, out),
        K::LogSoftmax => b.softmax(x, n / COLS, COLS, true, out),
        K::SoftmaxBackward => b.softmax_backward(y, g, n / COLS, COLS, false, out),
    }
    .expect("a bench kernel's arguments are valid")
}

/// Splits `out` (and the inputs alongside) over `threads` scoped threads.
fn split(threads: usize, out: &mut [f32], f: impl Fn(usize, &mut [f32]) + Sync) {
    if threads == 1 {
        return f(0, out);
    }
    let chunk = out.len().div_ceil(threads);
    std::thread::scope(|s| {
        for (i, o) in out.chunks_mut(chunk).enumerate() {
            let f = &f;
            s.spawn(move || f(i * chunk, o));
        }
    });
}

/// The STREAM-style loop reading `inputs` buffers and writing one, on `threads` threads.
fn stream(inputs: usize, threads: usize, bufs: &mut Bufs) {
    let (x, y, g) = (&bufs.x, &bufs.y, &bufs.g);
    split(threads, &mut bufs.out, |s, o| {
        let e = s + o.len();
        match inputs {
            1 => o.iter_mut().zip(&x[s..e]).for_each(|(o, &a)| *o = a * 3.0),
            2 => o
                .iter_mut()
                .zip(&x[s..e])
                .zip(&y[s..e])
                .for_each(|((o, &a), &b)| *o = a + b),
            _ => o
                .iter_mut()
                .zip(&x[s..e])
                .zip(&y[s..e])
                .zip(&g[s..e])
                .for_each(|(((o, &a), &b), &c)| *o = a + b * c),
        }
    });
}

/// Median time per call of `f` over `calls` calls (after one warm-up call).
fn median(calls: usize, mut f: impl FnMut()) -> Duration {
    f();
    let mut t: Vec<Duration> = (0..calls)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed()
        })
        .collect();
    t.sort();
    t[t.len() / 2]
}

fn bytes(k: K, n: usize) -> u64 {
    ((k.inputs() + 1) * 4 * n) as u64
}

fn calls_for(n: usize) -> usize {
    if n >= BIG {
        7
    } else {
        201
    }
}

/// Benchmarks one backend on every kernel at size `n`; returns summary lines.
fn bench_backend<B: Backend<Views = HostViews>>(
    c: &mut Criterion,
    b: &B,
    label: &str,
    n: usize,
    threads: usize,
    bufs: &mut Bufs,
) -> Vec<String> {
    let size = if n >= BIG { "16M" } else { "16K" };
    let mut lines = Vec::new();
    let mut group = c.benchmark_group("kernels");
    for k in K::ALL {
        let name = format!("{label}/t{threads}/{}/{size}", k.name());
        group.throughput(Throughput::Bytes(bytes(k, n)));
        group.bench_function(&name, |bch| bch.iter(|| run(b, k, bufs)));
        if !c_filter_matches(&name) {
            continue;
        }
        let t = median(calls_for(n), || run(b, k, bufs));
        let bound = median(calls_for(n), || stream(k.inputs(), threads, bufs));
        let gbs = bytes(k, n) as f64 / t.as_secs_f64() / 1e9;
        let ratio = t.as_secs_f64() / bound.as_secs_f64();
        lines.push(format!(
            "{name:<44} {:>10.3} ms {:>7.2} GB/s  bound {:>7.2} GB/s  ratio {:>5.2}x {}",
            t.as_secs_f64() * 1e3,
            gbs,
            bytes(k, n) as f64 / bound.as_secs_f64() / 1e9,
            ratio,
            if ratio <= 1.5 { "ok" } else { "SLOW" }
        ));
    }
    group.finish();
    lines
}

/// Whether the command line's filter (the first free argument) selects `name`.
fn c_filter_matches(name: &str) -> bool {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().find(|a| !a.starts_with('-')) {
        Some(f) => name.contains(f.as_str()),
        None => true,
    }
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .configure_from_args();
    let mut big = Bufs::new(BIG);
    let mut small = Bufs::new(SMALL);
    let mut lines = Vec::new();
    // The bandwidth of this machine, by the plain copy of the big buffers.
    let copy = median(7, || big.out.copy_from_slice(&big.x));
    lines.push(format!(
        "memcpy 16M (read+write): {:.2} GB/s",
        (8 * BIG) as f64 / copy.as_secs_f64() / 1e9
    ));
    for t in [1usize, 2] {
        let s = median(7, || stream(1, t, &mut big));
        lines.push(format!(
            "stream scale 16M at {t} thread(s): {:.2} GB/s",
            (8 * BIG) as f64 / s.as_secs_f64() / 1e9
        ));
    }
    for mode in [ComputeMode::Exact, ComputeMode::Fast] {
        for isa in Isa::ALL {
            if !isa.is_supported(mode) {
                lines.push(format!("skipped: {mode}/{isa} not supported by this CPU"));
                continue;
            }
            for threads in [1usize, 2] {
                let label = format!("{mode}/{isa}");
                let mut run_sizes = |c: &mut Criterion, lines: &mut Vec<String>| match mode {
                    ComputeMode::Exact => {
                        let b = CpuBackend::<Exact>::with_isa(isa, threads).unwrap();
                        lines.extend(bench_backend(c, &b, &label, BIG, threads, &mut big));
                        if threads == 1 {
                            lines.extend(bench_backend(c, &b, &label, SMALL, threads, &mut small));
                        }
                    }
                    ComputeMode::Fast => {
                        let b = CpuBackend::<Fast>::with_isa(isa, threads).unwrap();
                        lines.extend(bench_backend(c, &b, &label, BIG, threads, &mut big));
                        if threads == 1 {
                            lines.extend(bench_backend(c, &b, &label, SMALL, threads, &mut small));
                        }
                    }
                };
                run_sizes(&mut c, &mut lines);
            }
        }
    }
    c.final_summary();
    println!("\nsummary (median per call; bound = STREAM loop on the same buffers and threads)");
    for l in lines {
        println!("{l}");
    }
}
