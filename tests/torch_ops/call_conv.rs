//! The convolution family's runners (`conv.safetensors`).

use super::oracle::Case;
use super::T;
use exactgrad::prelude::*;

/// The convolution family's operators (`conv.safetensors`).
pub(crate) fn conv_call(c: &Case, x: &[T]) -> Result<T, String> {
    let e = |r: exactgrad::autograd::Result<T>| r.map_err(|e| format!("returned an error: {e}"));
    let pair = |key: &str| -> Result<[usize; 2], String> {
        match c.ints(key)?[..] {
            [a, b] => Ok([a as usize, b as usize]),
            ref v => Err(format!(
                "argument `{key}` should be two integers, got {v:?}"
            )),
        }
    };
    let one = |key: &str| c.int(key).map(|v| v as usize);
    let stride = || -> Result<Option<[usize; 2]>, String> {
        if c.arg("stride")? == "none" {
            Ok(None)
        } else {
            pair("stride").map(Some)
        }
    };
    match c.op() {
        "conv2d" => {
            let opts = Conv2dOptions {
                stride: pair("stride")?,
                padding: pair("padding")?,
                dilation: pair("dilation")?,
                groups: one("groups")?,
            };
            e(x[0].conv2d(&x[1], x.get(2), opts))
        }
        "conv1d" => {
            let opts = Conv1dOptions {
                stride: one("stride")?,
                padding: one("padding")?,
                dilation: one("dilation")?,
                groups: one("groups")?,
            };
            e(x[0].conv1d(&x[1], x.get(2), opts))
        }
        "max_pool2d" => {
            let opts = MaxPool2dOptions {
                kernel_size: pair("kernel")?,
                stride: stride()?,
                padding: pair("padding")?,
                dilation: pair("dilation")?,
                ceil_mode: one("ceil_mode")? != 0,
            };
            e(x[0].max_pool2d(opts))
        }
        "avg_pool2d" => {
            let divisor_override = match c.arg("divisor_override")? {
                "none" => None,
                _ => Some(one("divisor_override")?),
            };
            let opts = AvgPool2dOptions {
                kernel_size: pair("kernel")?,
                stride: stride()?,
                padding: pair("padding")?,
                ceil_mode: one("ceil_mode")? != 0,
                count_include_pad: one("count_include_pad")? != 0,
                divisor_override,
            };
            e(x[0].avg_pool2d(opts))
        }
        "adaptive_avg_pool2d" => e(x[0].adaptive_avg_pool2d(pair("output_size")?)),
        "pad" => {
            let pads: Vec<usize> = c.ints("pads")?.iter().map(|&p| p as usize).collect();
            e(x[0].pad(&pads, c.float("value")?.ok_or("value")?))
        }
        op => Err(format!("no runner for operator `{op}`")),
    }
}
