//! Prints the Vulkan adapters, the one the backend chooses, and what the arithmetic
//! probes measured there (`docs/gpu.md`, "What lavapipe offers").
//!
//! ```text
//! cargo run --release --example probe_device
//! ```

use exactgrad_core::ComputeMode;
use exactgrad_wgpu::{adapters, WgpuBackend, ADAPTER_ENV};
use std::process::ExitCode;

fn main() -> ExitCode {
    for a in adapters() {
        println!(
            "adapter {}: {} ({}, {}), shader f64: {}",
            a.index, a.name, a.device_type, a.driver, a.shader_f64
        );
    }
    match WgpuBackend::probe_device() {
        Ok((chosen, findings)) => {
            println!("chosen ({ADAPTER_ENV} picks another): {}", chosen.name);
            print!("{findings}");
            if let Ok(path) = WgpuBackend::row_max_path() {
                println!("  softmax row maximum: {path}");
            }
            for mode in [ComputeMode::Fast, ComputeMode::Exact] {
                let missing = findings.missing(mode);
                if missing.is_empty() {
                    println!("{mode} mode: available");
                } else {
                    println!("{mode} mode: refused, needs {}", missing.join(", "));
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
