//! Every operator's forward and backward against PyTorch 2.15.0 on CPU.
//!
//! The cases live in `testdata/ops/*.safetensors`, written by `tools/op_oracle.py` (see
//! `testdata/ops/README.md`): per case the leaves, the views applied to them, the operator
//! and its arguments, PyTorch's output, the upstream gradient given to `backward` and the
//! gradient of every leaf. Each case runs here on `ScalarRefBackend` and must agree with
//! PyTorch element by element:
//!
//! - `tol=elem` cases: `|ours − torch| ≤ 1e-5 · max(1, |torch|)`;
//! - `tol=scaled` cases (reductions, products, softmax, losses):
//!   `|ours − torch| ≤ 1e-5 · max(1, max |torch|)` over the tensor;
//! - NaN exactly where PyTorch has NaN, the same infinities.
//!
//! There is one test per operator (`op_<name>`), so a disagreement names its operator in
//! the test list; the failure message names the case, the input shapes and views, and the
//! first differing element. Run with `--nocapture` to see the worst error of each operator.
//! The `errors_*` tests check that what PyTorch rejects is an `Err` naming the operator.
//!
//! Files: [`oracle`] decodes the cases, [`run`] runs and compares them, [`call`] (with
//! [`call_conv`] and [`call_norm_attention`]) calls each operator, [`errors`] holds the
//! error tests; the per-operator tests and the coverage test are below.

mod call;
mod call_conv;
mod call_norm_attention;
mod errors;
mod oracle;
mod run;

use exactgrad::prelude::*;
use oracle::{cases, Case};
use run::check_op;

/// Tensors of the scalar reference backend, on which every case runs.
type T = Tensor<ScalarRefBackend>;

/// One test per operator, plus the list that the coverage test checks against the data.
macro_rules! op_tests {
    ($($test:ident => $op:literal),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                check_op($op);
            }
        )*
        const TESTED_OPS: &[&str] = &[$($op),*];
    };
}

op_tests! {
    op_add => "add",
    op_sub => "sub",
    op_mul => "mul",
    op_div => "div",
    op_add_scalar => "add_scalar",
    op_mul_scalar => "mul_scalar",
    op_div_scalar => "div_scalar",
    op_neg => "neg",
    op_relu => "relu",
    op_leaky_relu => "leaky_relu",
    op_sigmoid => "sigmoid",
    op_tanh => "tanh",
    op_gelu => "gelu",
    op_exp => "exp",
    op_log => "log",
    op_sqrt => "sqrt",
    op_pow => "pow",
    op_abs => "abs",
    op_clamp => "clamp",
    op_where => "where",
    op_sum => "sum",
    op_sum_dims => "sum_dims",
    op_mean => "mean",
    op_mean_dims => "mean_dims",
    op_matmul => "matmul",
    op_linear => "linear",
    op_reshape => "reshape",
    op_view => "view",
    op_permute => "permute",
    op_transpose => "transpose",
    op_narrow => "narrow",
    op_slice => "slice",
    op_expand => "expand",
    op_squeeze => "squeeze",
    op_unsqueeze => "unsqueeze",
    op_flatten => "flatten",
    op_contiguous => "contiguous",
    op_concat => "concat",
    op_stack => "stack",
    op_softmax => "softmax",
    op_log_softmax => "log_softmax",
    op_cross_entropy => "cross_entropy",
    op_mse_loss => "mse_loss",
    op_conv1d => "conv1d",
    op_conv2d => "conv2d",
    op_max_pool2d => "max_pool2d",
    op_avg_pool2d => "avg_pool2d",
    op_adaptive_avg_pool2d => "adaptive_avg_pool2d",
    op_pad => "pad",
    op_batch_norm => "batch_norm",
    op_layer_norm => "layer_norm",
    op_group_norm => "group_norm",
    op_embedding => "embedding",
    op_index_select => "index_select",
    op_split => "split",
    op_split_sizes => "split_sizes",
    op_chunk => "chunk",
    op_scaled_dot_product_attention => "scaled_dot_product_attention",
}

#[test]
fn oracle_covers_every_operator_and_every_case_is_run() {
    let all = cases();
    assert!(all.len() > 250, "only {} oracle cases loaded", all.len());
    let ops_in_data: std::collections::BTreeSet<&str> = all.iter().map(Case::op).collect();
    for op in &ops_in_data {
        assert!(
            TESTED_OPS.contains(op),
            "oracle cases of operator `{op}` are not run by any test"
        );
    }
    for op in TESTED_OPS {
        assert!(
            ops_in_data.contains(op),
            "operator `{op}` has no oracle case"
        );
    }
    let mut names = std::collections::BTreeSet::new();
    for c in all {
        assert!(names.insert(&c.name), "case `{}` appears twice", c.name);
        assert_eq!(
            c.inputs.len(),
            c.spec["in"].parse::<usize>().unwrap(),
            "case `{}`",
            c.name
        );
        assert!(!c.grads.is_empty(), "case `{}` checks no gradient", c.name);
    }
}
