//! The conformance kit: the differential suite that checks a backend kernel by kernel
//! against a reference backend, for any downstream crate.
//!
//! A backend conforms when every kernel of [`Backend`](exactgrad_core::Backend) gives the
//! reference's bits on random inputs: random shapes (0- and 1-sized dimensions, lengths 1
//! to 150 around every lane width), random strided layouts (permuted, stepped, offset and
//! broadcast views) and random values mixed with NaN (several payloads), ±∞, ±0,
//! subnormals, the limits of the transcendental functions and values that cancel (so a
//! sum in another order than the canonical one differs), every unary operator also on a
//! long row (so a formula that leaves the reference on few inputs differs too). Even
//! [`Config::quick`] catches a sum in reversed order and the standard library's `exp`
//! (`backends/tests/wrong_backends.rs`). An exact-mode backend must
//! match bit for bit; a fast-mode one must too, except that any NaN equals any NaN (fast
//! mode does not canonicalise NaN).
//!
//! The usual reference is `ScalarRefBackend` for exact mode and `FastScalarRefBackend`
//! for fast mode. A downstream crate runs the whole suite with one call,
//!
//! ```
//! use exactgrad_backends::conformance::{self, Config};
//! use exactgrad_backends::ScalarRefBackend;
//!
//! # let my_backend = ScalarRefBackend;
//! let report = conformance::check_backend(&my_backend, &ScalarRefBackend, &Config::quick())
//!     .unwrap_or_else(|m| panic!("{m}"));
//! assert!(report.total() > 0);
//! ```
//!
//! or generates one `#[test]` per kernel with [`conformance_tests!`](crate::conformance_tests).
//! A failure is a (boxed) [`Mismatch`]: the kernel, the backend, the case (shapes, layouts, op)
//! and the first differing element with both values and their bits. The pieces (case
//! generation, [`check_case`], [`first_difference`]) are public so that a property-test
//! driver can generate cases its own way.
//!
//! Every backend must also refuse invalid arguments with an error
//! ([`check_invalid_arguments`]: layouts past their buffers or overflowing `usize`,
//! wrong lengths, mismatched shapes), so that no safe call can read or write out of
//! bounds.
//!
//! The kit's files: `invalid.rs` holds the invalid-argument probes; `training.rs` the
//! cases of the training kernels (normalisation, pooling, im2col/col2im, attention
//! scores, dropout masks,
//! optimizer updates), whose several outputs are compared concatenated; `cases.rs` generates the cases (kernels, operator lists, special
//! values, random shapes, views and operands, [`Config`]); `check.rs` builds each case's
//! inputs, runs the kernel on the backend and the reference and compares the bits (from
//! [`check_case`] to [`check_backend`]); `report.rs` holds [`Mismatch`] and [`Report`]
//! and their formatting; this file the [`conformance_tests!`](crate::conformance_tests)
//! macro.

mod cases;
mod check;
mod invalid;
mod report;
mod training;

pub use cases::{
    kernel_cases, random_case, random_divisor, random_len, random_shape, unary_ops, values, Call,
    Case, Config, Kernel, Operand, Specials, TrainCall, View, BINARY_OPS, LANE_WIDTHS,
    SPECIAL_BITS,
};
pub use check::{
    assert_conforms, check_backend, check_backends, check_case, check_case_on, check_kernel,
    check_kernel_on, first_difference, Inputs, UNWRITTEN,
};
pub use invalid::check_invalid_arguments;
pub use report::{Mismatch, Report};

/// Generates one `#[test]` per kernel that runs the conformance suite on a backend.
///
/// `conformance_tests!(module_name, backend_expr, reference_expr)` or, with a
/// [`Config`], `conformance_tests!(module_name, backend_expr, reference_expr, config_expr)`.
/// The expressions are evaluated in each test.
///
/// ```no_run
/// // In a downstream crate's tests/: one #[test] per kernel, here for ExactBackend.
/// exactgrad_backends::conformance_tests!(
///     exact_backend_conforms,
///     exactgrad_backends::ExactBackend::with_threads(3),
///     exactgrad_backends::ScalarRefBackend
/// );
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! conformance_tests {
    ($name:ident, $backend:expr, $reference:expr) => {
        $crate::conformance_tests!(
            $name,
            $backend,
            $reference,
            $crate::conformance::Config::default()
        );
    };
    ($name:ident, $backend:expr, $reference:expr, $config:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            use $crate::conformance::{check_kernel, Kernel};

            fn run(kernel: Kernel) {
                if let Err(m) = check_kernel(&$backend, &$reference, kernel, &$config) {
                    panic!("{m}");
                }
            }

            #[test]
            fn copy_strided() {
                run(Kernel::CopyStrided)
            }
            #[test]
            fn digest() {
                run(Kernel::Digest)
            }
            #[test]
            fn unary() {
                run(Kernel::Unary)
            }
            #[test]
            fn unary_backward() {
                run(Kernel::UnaryBackward)
            }
            #[test]
            fn binary() {
                run(Kernel::Binary)
            }
            #[test]
            fn select() {
                run(Kernel::Select)
            }
            #[test]
            fn sum() {
                run(Kernel::Sum)
            }
            #[test]
            fn matmul() {
                run(Kernel::Matmul)
            }
            #[test]
            fn matmul_acc() {
                run(Kernel::MatmulAcc)
            }
            #[test]
            fn softmax() {
                run(Kernel::Softmax)
            }
            #[test]
            fn softmax_backward() {
                run(Kernel::SoftmaxBackward)
            }
            #[test]
            fn lstm_cell() {
                run(Kernel::LstmCell)
            }
            #[test]
            fn lstm_cell_backward() {
                run(Kernel::LstmCellBackward)
            }
            #[test]
            fn gru_cell() {
                run(Kernel::GruCell)
            }
            #[test]
            fn gru_cell_backward() {
                run(Kernel::GruCellBackward)
            }
            #[test]
            fn norm_stats() {
                run(Kernel::NormStats)
            }
            #[test]
            fn norm_forward() {
                run(Kernel::NormForward)
            }
            #[test]
            fn norm_backward() {
                run(Kernel::NormBackward)
            }
            #[test]
            fn max_pool2d() {
                run(Kernel::MaxPool2d)
            }
            #[test]
            fn max_pool2d_backward() {
                run(Kernel::MaxPool2dBackward)
            }
            #[test]
            fn avg_pool2d() {
                run(Kernel::AvgPool2d)
            }
            #[test]
            fn avg_pool2d_backward() {
                run(Kernel::AvgPool2dBackward)
            }
            #[test]
            fn adaptive_avg_pool2d() {
                run(Kernel::AdaptiveAvgPool2d)
            }
            #[test]
            fn adaptive_avg_pool2d_backward() {
                run(Kernel::AdaptiveAvgPool2dBackward)
            }
            #[test]
            fn im2col() {
                run(Kernel::Im2col)
            }
            #[test]
            fn col2im() {
                run(Kernel::Col2im)
            }
            #[test]
            fn depthwise_conv() {
                run(Kernel::DepthwiseConv)
            }
            #[test]
            fn depthwise_grad_input() {
                run(Kernel::DepthwiseGradInput)
            }
            #[test]
            fn depthwise_grad_weight() {
                run(Kernel::DepthwiseGradWeight)
            }
            #[test]
            fn attention_scores() {
                run(Kernel::AttentionScores)
            }
            #[test]
            fn dropout_mask() {
                run(Kernel::DropoutMask)
            }
            #[test]
            fn sgd_step() {
                run(Kernel::SgdStep)
            }
            #[test]
            fn adam_step() {
                run(Kernel::AdamStep)
            }
            #[test]
            fn invalid_arguments() {
                if let Err(m) = $crate::conformance::check_invalid_arguments(&$backend) {
                    panic!("{m}");
                }
            }
        }
    };
}
