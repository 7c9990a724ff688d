//! Times the kernels that the portable paths change — division, square root, and the f64
//! sums (row sums, softmax, softmax backward) — on the Vulkan device, called directly
//! through the backend trait on preallocated device buffers, in millions of elements per
//! second, and the matrix product of two 512 × 512 matrices in GFLOP/s, in the mode given
//! (default exact). Also the softmax of the same elements as 8 long rows (where the row
//! maximum's split across a workgroup matters), a unary kernel on parts of buffers
//! (bound through temporary copies), and the time per call of a small addition that
//! takes new storage for its output (the buffer pool's case). Run it with `EXACTGRAD_GPU_SOFT_DIV_SQRT=1` and/or
//! `EXACTGRAD_GPU_INT_F64=1` to time the portable paths (`docs/gpu.md` §5.3), with
//! `EXACTGRAD_GPU_TILED_MATMUL=1` the tiled product.
//!
//! ```text
//! cargo run --release --example kernel_throughput -- [--mode exact|fast] [--reps N]
//! ```

use exactgrad_core::backend::MatmulSpec;
use exactgrad_core::{Backend, BackendImpl, BinaryOp, ComputeMode, Layout, Philox, UnaryOp};
use exactgrad_wgpu::WgpuBackend;
use std::process::ExitCode;
use std::time::Instant;

/// Rows and columns of every input.
const ROWS: usize = 2048;
const COLS: usize = 1024;

type W = WgpuBackend;

fn run() -> Result<(), String> {
    let mut mode = ComputeMode::Exact;
    let mut reps = 10usize;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--mode" => {
                mode = match value.as_str() {
                    "exact" => ComputeMode::Exact,
                    "fast" => ComputeMode::Fast,
                    m => return Err(format!("unknown mode `{m}`")),
                }
            }
            "--reps" => reps = value.parse().map_err(|e| format!("--reps: {e}"))?,
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    let b = W::new(mode).map_err(|e| e.to_string())?;
    let f = b.findings();
    println!(
        "device: {}, mode {mode}, integer div/sqrt: {}, integer f64 sums: {}",
        b.adapter().name,
        f.soft_div_sqrt,
        f.int_f64
    );
    let e = |e: exactgrad_core::Error| e.to_string();
    let n = ROWS * COLS;
    let mut rng = Philox::new(7);
    let xs: Vec<f32> = (0..n).map(|_| rng.next_f32() * 4.0 - 2.0).collect();
    let ys: Vec<f32> = (0..n).map(|_| rng.next_f32() + 0.5).collect();
    let x = b.storage_from_vec(xs).map_err(e)?;
    let y = b.storage_from_vec(ys).map_err(e)?;
    let mut out = b.zeros(n).map_err(e)?;
    let mut rows = b.zeros(ROWS).map_err(e)?;
    // Read to wait for the device (a read waits for every kernel submitted before it).
    let sync = b.zeros(1).map_err(e)?;
    let l = Layout::contiguous(vec![ROWS, COLS]);
    let kernels: [(&str, usize); 7] = [
        ("div (binary)", 0),
        ("sqrt (unary)", 1),
        ("row sums (f64)", 2),
        ("softmax rows (f64)", 3),
        ("softmax backward rows (f64)", 4),
        ("softmax 8 long rows (f64)", 5),
        ("neg on a part (unary, copies)", 6),
    ];
    println!("{:<32} {:>10}", "kernel", "Melem/s");
    for (name, k) in kernels {
        let mut call = || -> exactgrad_core::Result<()> {
            match k {
                0 => b.binary(
                    BinaryOp::Div,
                    W::view(&x),
                    &l,
                    W::view(&y),
                    &l,
                    W::view_mut(&mut out),
                ),
                1 => b.unary(UnaryOp::Sqrt, W::view(&y), W::view_mut(&mut out)),
                2 => b.sum(W::view(&x), &l, &[false, true], W::view_mut(&mut rows)),
                3 => b.softmax(W::view(&x), ROWS, COLS, false, W::view_mut(&mut out)),
                // The same elements as 8 rows: the row maximum's split matters here.
                5 => b.softmax(W::view(&x), 8, n / 8, false, W::view_mut(&mut out)),
                // Views that are parts of their buffers: bound through temporary copies.
                6 => b.unary(
                    UnaryOp::Neg,
                    W::slice(W::view(&x), 1..n),
                    W::slice_mut(W::view_mut(&mut out), 0..n - 1),
                ),
                _ => b.softmax_backward(
                    W::view(&y),
                    W::view(&x),
                    ROWS,
                    COLS,
                    false,
                    W::view_mut(&mut out),
                ),
            }
        };
        // A warm-up call (compiles the pipeline) and a read, then `reps` calls and a read.
        call().map_err(e)?;
        W::storage_to_vec(&sync).map_err(e)?;
        let t = Instant::now();
        for _ in 0..reps {
            call().map_err(e)?;
        }
        W::storage_to_vec(&sync).map_err(e)?;
        let s = t.elapsed().as_secs_f64();
        println!("{name:<32} {:>10.1}", (n * reps) as f64 / s / 1e6);
    }
    // 512 × 512 times 512 × 512: the first 2^18 elements of x and y.
    let d = 512;
    let spec = MatmulSpec {
        batch: 1,
        m: d,
        k: d,
        n: d,
        a_offset: 0,
        a_strides: [d * d, d, 1],
        b_offset: 0,
        b_strides: [d * d, d, 1],
    };
    let mut prod = b.zeros(d * d).map_err(e)?;
    let mut call = || b.matmul(&spec, W::view(&x), W::view(&y), W::view_mut(&mut prod));
    call().map_err(e)?;
    W::storage_to_vec(&sync).map_err(e)?;
    let t = Instant::now();
    for _ in 0..reps {
        call().map_err(e)?;
    }
    W::storage_to_vec(&sync).map_err(e)?;
    let s = t.elapsed().as_secs_f64();
    println!(
        "{:<32} {:>10.2} GFLOP/s",
        format!("matmul {d}x{d}x{d} (tiled: {})", b.tiled_matmul()),
        (2 * d * d * d * reps) as f64 / s / 1e9
    );
    // Per-call cost: an addition of 256 elements, 100 times per repetition, each call
    // with new storage for its result (what a training step does).
    let small = b.storage_from_vec(vec![1.0; 256]).map_err(e)?;
    let ls = Layout::contiguous(vec![256]);
    let call = || -> exactgrad_core::Result<()> {
        let mut r = b.uninit(256)?;
        b.binary(
            BinaryOp::Add,
            W::view(&small),
            &ls,
            W::view(&small),
            &ls,
            W::view_mut(&mut r),
        )
    };
    call().map_err(e)?;
    W::storage_to_vec(&sync).map_err(e)?;
    let t = Instant::now();
    for _ in 0..reps * 100 {
        call().map_err(e)?;
    }
    W::storage_to_vec(&sync).map_err(e)?;
    let s = t.elapsed().as_secs_f64();
    println!(
        "{:<32} {:>10.1} us per call",
        "add of 256 (new output)",
        s / (reps * 100) as f64 * 1e6
    );
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
