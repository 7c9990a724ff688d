//! Calling the operator of a case: element-wise, reductions, products, views, softmax
//! and losses here; the convolution family in [`super::call_conv`], normalisation and
//! attention in [`super::call_norm_attention`].

use super::call_conv::conv_call;
use super::call_norm_attention::norm_attention_call;
use super::oracle::Case;
use super::run::apply_view;
use super::T;
use exactgrad::prelude::*;

/// Calls the case's operator on the (viewed) inputs.
pub(crate) fn call_op(c: &Case, x: &[T]) -> Result<T, String> {
    let e = |r: exactgrad::autograd::Result<T>| r.map_err(|e| format!("returned an error: {e}"));
    let op = c.op();
    match op {
        "add" => e(x[0].add(&x[1])),
        "sub" => e(x[0].sub(&x[1])),
        "mul" => e(x[0].mul(&x[1])),
        "div" => e(x[0].div(&x[1])),
        "add_scalar" => e(x[0].add_scalar(c.float("c")?.ok_or("c")?)),
        "mul_scalar" => e(x[0].mul_scalar(c.float("c")?.ok_or("c")?)),
        "div_scalar" => e(x[0].div_scalar(c.float("c")?.ok_or("c")?)),
        "neg" => e(x[0].neg()),
        "relu" => e(x[0].relu()),
        "leaky_relu" => e(x[0].leaky_relu(c.float("slope")?.ok_or("slope")?)),
        "sigmoid" => e(x[0].sigmoid()),
        "tanh" => e(x[0].tanh()),
        "gelu" => {
            let approx = match c.arg("approximate")? {
                "none" => GeluApproximation::None,
                "tanh" => GeluApproximation::Tanh,
                a => return Err(format!("unknown approximation `{a}`")),
            };
            e(x[0].gelu(approx))
        }
        "exp" => e(x[0].exp()),
        "log" => e(x[0].log()),
        "sqrt" => e(x[0].sqrt()),
        "pow" => e(x[0].pow(c.float("p")?.ok_or("p")?)),
        "abs" => e(x[0].abs()),
        "clamp" => e(x[0].clamp(c.float("min")?, c.float("max")?)),
        "where" => e(T::where_cond(&x[0], &x[1], &x[2])),
        "sum" => e(x[0].sum()),
        "mean" => e(x[0].mean()),
        "sum_dims" => e(x[0].sum_dims(&c.ints("dims")?, c.int("keepdim")? != 0)),
        "mean_dims" => e(x[0].mean_dims(&c.ints("dims")?, c.int("keepdim")? != 0)),
        "matmul" => e(x[0].matmul(&x[1])),
        "linear" => e(x[0].linear(&x[1], x.get(2))),
        "transpose" | "permute" | "reshape" | "view" | "narrow" | "slice" | "expand"
        | "squeeze" | "unsqueeze" | "flatten" | "contiguous" => {
            apply_view(&x[0], op, &c.ints("a")?)
        }
        "concat" => e(T::concat(&x.iter().collect::<Vec<_>>(), c.int("dim")?)),
        "stack" => e(T::stack(&x.iter().collect::<Vec<_>>(), c.int("dim")?)),
        "softmax" => e(x[0].softmax(c.int("dim")?)),
        "log_softmax" => e(x[0].log_softmax(c.int("dim")?)),
        "cross_entropy" => {
            let options = CrossEntropyOptions {
                reduction: c.reduction()?,
                ignore_index: c.int("ignore_index")? as i64,
                label_smoothing: c.float("label_smoothing")?.ok_or("label_smoothing")?,
            };
            e(x[0].cross_entropy(c.target.as_deref().ok_or("no targets")?, options))
        }
        "mse_loss" => e(x[0].mse_loss(&x[1], c.reduction()?)),
        "conv1d" | "conv2d" | "max_pool2d" | "avg_pool2d" | "adaptive_avg_pool2d" | "pad" => {
            conv_call(c, x)
        }
        "batch_norm"
        | "layer_norm"
        | "group_norm"
        | "embedding"
        | "index_select"
        | "split"
        | "split_sizes"
        | "chunk"
        | "scaled_dot_product_attention" => norm_attention_call(c, x),
        _ => Err(format!("no runner for operator `{op}`")),
    }
}
