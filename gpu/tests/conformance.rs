//! The conformance kit on the Vulkan backend: every kernel against `FastScalarRefBackend`
//! in fast mode and `ScalarRefBackend` in exact mode, and the invalid-argument probes.
//!
//! Without a Vulkan adapter each test prints why and passes, unless
//! `EXACTGRAD_REQUIRE_GPU=1` (set by `.ci/gpu`) makes that a failure.

use exactgrad_backends::conformance::{self, check_kernel, Config, Kernel};
use exactgrad_backends::{FastScalarRefBackend, ScalarRefBackend};
use exactgrad_core::ComputeMode;

mod common;
use common::backend;

/// The default number of cases (128 per kernel), inputs up to 2^15 elements.
fn config() -> Config {
    Config {
        max_elems: 1 << 15,
        ..Config::default()
    }
}

fn run(mode: ComputeMode, kernel: Kernel) {
    let Some(b) = backend(mode) else { return };
    run_on(b, mode, kernel);
}

/// `softmax`'s cases with the row maximum split across a workgroup (`split`) or one
/// invocation per row, whichever the adapter would choose.
fn run_row_max(mode: ComputeMode, split: bool) {
    let Some(b) = backend(mode) else { return };
    run_on(b.with_split_row_max(split), mode, Kernel::Softmax);
}

fn run_on(b: exactgrad_wgpu::WgpuBackend, mode: ComputeMode, kernel: Kernel) {
    let result = match mode {
        ComputeMode::Exact => check_kernel(&b, &ScalarRefBackend, kernel, &config()),
        ComputeMode::Fast => check_kernel(&b, &FastScalarRefBackend, kernel, &config()),
    };
    let cases = result.unwrap_or_else(|m| panic!("{m}"));
    assert!(cases > 0, "{kernel:?}: no case ran");
}

macro_rules! kernels {
    ($mode:ident, $m:expr) => {
        mod $mode {
            use super::*;
            #[test]
            fn matmul() {
                run($m, Kernel::Matmul)
            }
            #[test]
            fn matmul_acc() {
                run($m, Kernel::MatmulAcc)
            }
            #[test]
            fn binary() {
                run($m, Kernel::Binary)
            }
            #[test]
            fn unary() {
                run($m, Kernel::Unary)
            }
            #[test]
            fn unary_backward() {
                run($m, Kernel::UnaryBackward)
            }
            #[test]
            fn copy_strided() {
                run($m, Kernel::CopyStrided)
            }
            #[test]
            fn select() {
                run($m, Kernel::Select)
            }
            #[test]
            fn sum() {
                run($m, Kernel::Sum)
            }
            #[test]
            fn softmax() {
                run($m, Kernel::Softmax)
            }
            #[test]
            fn softmax_split_row_max() {
                run_row_max($m, true)
            }
            #[test]
            fn softmax_row_max_per_row() {
                run_row_max($m, false)
            }
            #[test]
            fn softmax_backward() {
                run($m, Kernel::SoftmaxBackward)
            }
            #[test]
            fn sgd_step() {
                run($m, Kernel::SgdStep)
            }
            #[test]
            fn adam_step() {
                run($m, Kernel::AdamStep)
            }
            #[test]
            fn im2col() {
                run($m, Kernel::Im2col)
            }
            #[test]
            fn col2im() {
                run($m, Kernel::Col2im)
            }
            #[test]
            fn depthwise_conv() {
                run($m, Kernel::DepthwiseConv)
            }
            #[test]
            fn depthwise_grad_input() {
                run($m, Kernel::DepthwiseGradInput)
            }
            #[test]
            fn depthwise_grad_weight() {
                run($m, Kernel::DepthwiseGradWeight)
            }
            #[test]
            fn avg_pool2d() {
                run($m, Kernel::AvgPool2d)
            }
            #[test]
            fn avg_pool2d_backward() {
                run($m, Kernel::AvgPool2dBackward)
            }
            #[test]
            fn adaptive_avg_pool2d() {
                run($m, Kernel::AdaptiveAvgPool2d)
            }
            #[test]
            fn adaptive_avg_pool2d_backward() {
                run($m, Kernel::AdaptiveAvgPool2dBackward)
            }
            #[test]
            fn norm_stats() {
                run($m, Kernel::NormStats)
            }
            #[test]
            fn norm_forward() {
                run($m, Kernel::NormForward)
            }
            #[test]
            fn norm_backward() {
                run($m, Kernel::NormBackward)
            }
            #[test]
            fn max_pool2d() {
                run($m, Kernel::MaxPool2d)
            }
            #[test]
            fn max_pool2d_backward() {
                run($m, Kernel::MaxPool2dBackward)
            }
            #[test]
            fn attention_scores() {
                run($m, Kernel::AttentionScores)
            }
            #[test]
            fn dropout_mask() {
                run($m, Kernel::DropoutMask)
            }
            /// Every kernel, the defaulted training and recurrent kernels included (they
            /// run on the backend's element-wise kernels or on the host; the optimizer
            /// updates have device kernels of their own).
            #[test]
            fn every_kernel() {
                let Some(b) = backend($m) else { return };
                let report = match $m {
                    ComputeMode::Exact => {
                        conformance::check_backend(&b, &ScalarRefBackend, &Config::quick())
                    }
                    ComputeMode::Fast => {
                        conformance::check_backend(&b, &FastScalarRefBackend, &Config::quick())
                    }
                }
                .unwrap_or_else(|m| panic!("{m}"));
                assert!(report.total() > 0);
            }
        }
    };
}

kernels!(fast, ComputeMode::Fast);
kernels!(exact, ComputeMode::Exact);

#[test]
fn invalid_arguments_are_refused_in_both_modes() {
    for mode in [ComputeMode::Fast, ComputeMode::Exact] {
        let Some(b) = backend(mode) else { return };
        let refused = conformance::check_invalid_arguments(&b).unwrap_or_else(|m| panic!("{m}"));
        assert!(refused > 50, "only {refused} probes");
    }
}
