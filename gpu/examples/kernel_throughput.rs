//! Times the kernels that the portable paths change — division, square root, the f64
//! sums (row sums, softmax, layer normalisation) — on the Vulkan device, in elements per
//! second, in the mode given (default exact). Run it with `EXACTGRAD_GPU_SOFT_DIV_SQRT=1`
//! and/or `EXACTGRAD_GPU_INT_F64=1` to time the portable paths (`docs/gpu.md` §5).
//!
//! ```text
//! cargo run --release --example kernel_throughput -- [--mode exact|fast] [--reps N]
//! ```

use exactgrad::prelude::*;
use exactgrad_wgpu::WgpuBackend;
use std::process::ExitCode;
use std::time::Instant;

/// Rows and columns of every input.
const ROWS: usize = 1024;
const COLS: usize = 1024;

fn run() -> Result<(), String> {
    let mut mode = ComputeMode::Exact;
    let mut reps = 5usize;
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
    let b = WgpuBackend::new(mode).map_err(|e| e.to_string())?;
    let f = b.findings();
    println!(
        "device: {}, mode {mode}, integer div/sqrt: {}, integer f64 sums: {}",
        b.adapter().name,
        f.soft_div_sqrt,
        f.int_f64
    );
    let e = |e: exactgrad::Error| e.to_string();
    let mut rng = Philox::new(7);
    let x = Tensor::randn(&b, [ROWS, COLS], 0.0, 1.0, &mut rng).map_err(e)?;
    let y = Tensor::randn(&b, [ROWS, COLS], 1.0, 1.0, &mut rng).map_err(e)?;
    let ax = x.abs().map_err(e)?;
    type Op<'a> = Box<dyn Fn() -> exactgrad::Result<Tensor<WgpuBackend>> + 'a>;
    let ops: Vec<(&str, Op<'_>)> = vec![
        ("div (binary)", Box::new(|| x.div(&y))),
        ("sqrt (unary)", Box::new(|| ax.sqrt())),
        ("row sums (f64)", Box::new(|| x.sum_dims(&[-1], false))),
        ("softmax rows (f64)", Box::new(|| x.softmax(-1))),
        (
            "layer_norm rows (f64 stats, sqrt, div)",
            Box::new(|| x.layer_norm(&[COLS], LayerNormOptions::default())),
        ),
    ];
    println!("{:<40} {:>14}", "kernel", "Melem/s");
    for (name, op) in &ops {
        // One warm-up call (compiles the pipeline), then `reps` timed calls ended by a read.
        op().and_then(|t| t.to_vec()).map_err(e)?;
        let t = Instant::now();
        let mut last = None;
        for _ in 0..reps {
            last = Some(op().map_err(e)?);
        }
        if let Some(l) = last {
            l.to_vec().map_err(e)?;
        }
        let s = t.elapsed().as_secs_f64();
        println!("{name:<40} {:>14.1}", (ROWS * COLS * reps) as f64 / s / 1e6);
    }
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
