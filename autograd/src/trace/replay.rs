//! Replay of a captured record on another backend: the operation run again from the
//! captured inputs, its outputs compared bit for bit with the captured ones
//! (`docs/debugging.md`, "Capture and replay").
//!
//! A forward record is replayed by calling its operator with its arguments; a backward
//! rule by running its forward record's operator (whose capture must be given) on leaves
//! and a backward pass seeded with the captured gradient; an optimizer update by the
//! fused kernel of its optimizer with the recorded hyper-parameters. On the scalar
//! reference of the capture's mode, equal bits say that the operation computed the
//! reference result from these inputs (a difference between two runs then came from
//! elsewhere); other bits say that the captured run's kernel (or a rearrangement of the
//! operands on its way) is at fault.

use super::format::{Capture, Dtype, Kind, Record, TensorInfo, Value};
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::{
    AttentionMask, AttentionOptions, AvgPool2dOptions, BatchNormOptions, Conv2dOptions,
    ConvTranspose2dOptions, CrossEntropyOptions, CtcBatch, CtcLossOptions, CtcTargets,
    GroupNormOptions, InterpolateMode, InterpolateOptions, InterpolateSize, LayerNormOptions,
    MaxPool2dOptions, Momentum, Reduction, RnnWeights,
};
use exactgrad_core::kernels::{AdamSpec, SgdSpec};
use exactgrad_core::{Backend, BinaryOp, UnaryOp};

/// How one output of a replay compares with the captured one.
#[derive(Clone, Debug, PartialEq)]
pub struct OutputCheck {
    /// The output's role.
    pub name: String,
    /// Elements whose bits differ (NaNs of any payload count as equal).
    pub differing: usize,
    /// The first differing element: its index, the captured value and the replayed one.
    pub first: Option<(usize, f32, f32)>,
    /// The largest difference in ulps.
    pub max_ulp: u64,
}

/// The result of one replay.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Every output has the captured bits.
    Reproduced,
    /// Some outputs differ (the others, equal, are listed too).
    Differs(Vec<OutputCheck>),
    /// The record cannot be replayed (its kind, a missing forward capture, …): why.
    NotReplayable(String),
}

fn err(msg: impl Into<String>) -> Error {
    Error::invalid("trace replay", "capture", msg.into())
}

/// The captured inputs of a record as tensors on `b` (floats) or integers, by role.
struct Inputs<'a, B: Backend> {
    b: &'a B,
    record: &'a Record,
    ints: &'a [(String, Vec<i64>)],
}

impl<B: Backend> Inputs<'_, B> {
    fn info(&self, name: &str) -> Option<&TensorInfo> {
        self.record.inputs.iter().find(|t| t.name == name)
    }

    fn tensor(&self, name: &str) -> Result<Tensor<B>> {
        let t = self
            .info(name)
            .ok_or_else(|| err(format!("input `{name}` is not in the capture")))?;
        if t.dtype != Dtype::F32 {
            return Err(err(format!("input `{name}` is integer data, not a tensor")));
        }
        let v = t
            .values
            .clone()
            .ok_or_else(|| err(format!("input `{name}` has no values in the capture")))?;
        Tensor::from_vec(self.b, v, t.shape.clone())
    }

    fn opt_tensor(&self, name: &str) -> Result<Option<Tensor<B>>> {
        match self.info(name) {
            Some(_) => self.tensor(name).map(Some),
            None => Ok(None),
        }
    }

    fn ints(&self, name: &str) -> Result<&[i64]> {
        self.ints
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_slice())
            .ok_or_else(|| err(format!("integer input `{name}` is not in the capture")))
    }

    fn ints_shape(&self, name: &str) -> Vec<usize> {
        self.info(name).map(|t| t.shape.clone()).unwrap_or_default()
    }
}

fn attr<'r>(r: &'r Record, key: &str) -> Result<&'r Value> {
    r.attr(key)
        .ok_or_else(|| err(format!("`{}` has no argument `{key}`", r.op)))
}

fn attr_int(r: &Record, key: &str) -> Result<i64> {
    attr(r, key)?
        .as_int()
        .ok_or_else(|| err(format!("argument `{key}` is not an integer")))
}

fn attr_usizes(r: &Record, key: &str) -> Result<Vec<usize>> {
    attr(r, key)?
        .as_ints()
        .map(|v| v.iter().map(|&x| x as usize).collect())
        .ok_or_else(|| err(format!("argument `{key}` is not a list of integers")))
}

fn attr_pair(r: &Record, key: &str) -> Result<[usize; 2]> {
    let v = attr_usizes(r, key)?;
    match v.as_slice() {
        [a, b] => Ok([*a, *b]),
        _ => Err(err(format!("argument `{key}` is not a pair"))),
    }
}

fn attr_bool(r: &Record, key: &str) -> Result<bool> {
    attr(r, key)?
        .as_bool()
        .ok_or_else(|| err(format!("argument `{key}` is not a flag")))
}

fn attr_f32(r: &Record, key: &str) -> Result<f32> {
    attr(r, key)?
        .as_f32()
        .ok_or_else(|| err(format!("argument `{key}` is not an f32")))
}

fn attr_str<'r>(r: &'r Record, key: &str) -> Result<&'r str> {
    attr(r, key)?
        .as_str()
        .ok_or_else(|| err(format!("argument `{key}` is not text")))
}

fn state<'r>(r: &'r Record, key: &str) -> Result<&'r Value> {
    r.state_value(key)
        .ok_or_else(|| err(format!("`{}` has no state `{key}`", r.op)))
}

fn state_f64(r: &Record, key: &str) -> Result<f64> {
    state(r, key)?
        .as_f64()
        .ok_or_else(|| err(format!("state `{key}` is not an f64")))
}

fn state_bool(r: &Record, key: &str) -> Result<bool> {
    state(r, key)?
        .as_bool()
        .ok_or_else(|| err(format!("state `{key}` is not a flag")))
}

fn reduction(s: &str) -> Result<Reduction> {
    Ok(match s {
        "none" => Reduction::None,
        "mean" => Reduction::Mean,
        "sum" => Reduction::Sum,
        _ => return Err(err(format!("unknown reduction `{s}`"))),
    })
}

fn to_isize(v: &[usize]) -> Vec<isize> {
    v.iter().map(|&d| d as isize).collect()
}

/// The outputs of a replayed forward operation, and the leaves made for a backward replay
/// (by input role).
type Replayed<B> = (Vec<Tensor<B>>, Vec<(String, Tensor<B>)>);

/// Runs the forward operation of record `r` on the captured inputs; returns its outputs
/// in the record's order (the leaves made for a backward replay are `leaves`).
fn run_forward<B: Backend>(
    b: &B,
    r: &Record,
    ints: &[(String, Vec<i64>)],
    leaves: &[&str],
) -> Result<Replayed<B>> {
    let inp = Inputs { b, record: r, ints };
    let mut made: Vec<(String, Tensor<B>)> = Vec::new();
    let mut leaf = |name: &str| -> Result<Tensor<B>> {
        let t = inp.tensor(name)?;
        if leaves.contains(&name) {
            let t = t.requires_grad()?;
            made.push((name.to_string(), t.clone()));
            Ok(t)
        } else {
            Ok(t)
        }
    };
    let op = r.op.as_str();
    let out = |t: Tensor<B>| Ok::<_, Error>(vec![t]);
    let outputs: Vec<Tensor<B>> = match op {
        "add" | "sub" | "mul" | "div" => {
            let bop = BinaryOp::ALL
                .into_iter()
                .find(|o| o.name() == op)
                .ok_or_else(|| err("a binary operator"))?;
            out(crate::ops::elementwise::binary_op(
                bop,
                &leaf("input.0")?,
                &leaf("input.1")?,
            )?)?
        }
        "where" => out(Tensor::where_cond(
            &inp.tensor("cond")?,
            &leaf("a")?,
            &leaf("b")?,
        )?)?,
        "sum" | "mean" => {
            let x = leaf("input")?;
            let dims = to_isize(&attr_usizes(r, "dims")?);
            let keepdim = attr_bool(r, "keepdim")?;
            let all = dims.len() == x.rank() && !keepdim;
            out(match (op, all) {
                ("sum", true) => x.sum()?,
                ("mean", true) => x.mean()?,
                ("sum", false) => x.sum_dims(&dims, keepdim)?,
                _ => x.mean_dims(&dims, keepdim)?,
            })?
        }
        "matmul" => out(leaf("a")?.matmul(&leaf("b")?)?)?,
        "softmax" => out(leaf("input")?.softmax(-1)?)?,
        "log_softmax" => out(leaf("input")?.log_softmax(-1)?)?,
        "reshape" => out(leaf("input")?.reshape(attr_usizes(r, "shape")?)?)?,
        "permute" => out(leaf("input")?.permute(&to_isize(&attr_usizes(r, "dims")?))?)?,
        "slice" => {
            let x = leaf("input")?;
            out(x.slice(
                attr_int(r, "dim")? as isize,
                attr_int(r, "start")? as isize,
                attr_int(r, "end")? as isize,
                attr_int(r, "step")? as usize,
            )?)?
        }
        "expand" => out(leaf("input")?.expand(&attr_usizes(r, "shape")?)?)?,
        "contiguous" => out(leaf("input")?.contiguous()?)?,
        "concat" => {
            let n = r.inputs.iter().filter(|t| t.dtype == Dtype::F32).count();
            let names: Vec<String> = if n == 1 {
                vec!["input".into()]
            } else {
                (0..n).map(|i| format!("input.{i}")).collect()
            };
            let ts: Vec<Tensor<B>> = names.iter().map(|n| leaf(n)).collect::<Result<_>>()?;
            let refs: Vec<&Tensor<B>> = ts.iter().collect();
            out(Tensor::concat(&refs, attr_int(r, "dim")? as isize)?)?
        }
        "dropout" => {
            let key = state(r, "key")?
                .as_u64()
                .ok_or_else(|| err("state `key` is not a word"))?;
            out(crate::ops::misc::dropout_with_key(
                &leaf("input")?,
                attr_f32(r, "p")?,
                key,
            )?)?
        }
        "embedding" | "index_select" => {
            let idx: Vec<usize> = inp.ints("indices")?.iter().map(|&i| i as usize).collect();
            let skip = r
                .attr("padding_idx")
                .and_then(Value::as_int)
                .map(|p| p as usize);
            out(crate::ops::misc::gather(
                if op == "embedding" {
                    "embedding"
                } else {
                    "index_select"
                },
                &leaf("input")?,
                attr_int(r, "dim")? as usize,
                idx,
                skip,
            )?)?
        }
        "gather" => out(leaf("input")?.gather(
            attr_int(r, "dim")? as isize,
            &(inp.ints("index")?, inp.ints_shape("index")),
        )?)?,
        "cross_entropy" => {
            let opts = CrossEntropyOptions {
                reduction: reduction(attr_str(r, "reduction")?)?,
                ignore_index: attr_int(r, "ignore_index")?,
                label_smoothing: attr_f32(r, "label_smoothing")?,
            };
            let y = leaf("input")?.cross_entropy(inp.ints("targets")?, opts)?;
            let shape = r
                .outputs
                .first()
                .map(|o| o.shape.clone())
                .unwrap_or_default();
            out(y.reshape(shape)?)?
        }
        "pad" => out(leaf("input")?.pad(&attr_usizes(r, "pads")?, attr_f32(r, "value")?)?)?,
        "max_pool2d" => out(leaf("input")?.max_pool2d(MaxPool2dOptions {
            kernel_size: attr_pair(r, "kernel_size")?,
            stride: Some(attr_pair(r, "stride")?),
            padding: attr_pair(r, "padding")?,
            dilation: attr_pair(r, "dilation")?,
            ceil_mode: attr_bool(r, "ceil_mode")?,
        })?)?,
        "avg_pool2d" => out(leaf("input")?.avg_pool2d(AvgPool2dOptions {
            kernel_size: attr_pair(r, "kernel_size")?,
            stride: Some(attr_pair(r, "stride")?),
            padding: attr_pair(r, "padding")?,
            ceil_mode: attr_bool(r, "ceil_mode")?,
            count_include_pad: attr_bool(r, "count_include_pad")?,
            divisor_override: r
                .attr("divisor_override")
                .and_then(Value::as_int)
                .map(|d| d as usize),
        })?)?,
        "adaptive_avg_pool2d" => {
            out(leaf("input")?.adaptive_avg_pool2d(attr_pair(r, "output_size")?)?)?
        }
        "interpolate" => {
            let size = match r.attr("size") {
                Some(_) => InterpolateSize::Size(attr_pair(r, "size")?),
                None => InterpolateSize::ScaleFactor([
                    attr(r, "scale_factor.0")?.as_f64().unwrap_or(1.0),
                    attr(r, "scale_factor.1")?.as_f64().unwrap_or(1.0),
                ]),
            };
            let mode = match attr_str(r, "mode")? {
                "nearest" => InterpolateMode::Nearest,
                _ => InterpolateMode::Bilinear,
            };
            out(leaf("input")?.interpolate(
                size,
                InterpolateOptions {
                    mode,
                    align_corners: attr_bool(r, "align_corners")?,
                },
            )?)?
        }
        "conv2d" | "conv1d" => {
            let bias = match inp.info("bias") {
                Some(_) => Some(leaf("bias")?),
                None => None,
            };
            out(leaf("input")?.conv2d(
                &leaf("weight")?,
                bias.as_ref(),
                Conv2dOptions {
                    stride: attr_pair(r, "stride")?,
                    padding: attr_pair(r, "padding")?,
                    dilation: attr_pair(r, "dilation")?,
                    groups: attr_int(r, "groups")? as usize,
                },
            )?)?
        }
        "conv_transpose2d" => {
            let bias = match inp.info("bias") {
                Some(_) => Some(leaf("bias")?),
                None => None,
            };
            out(leaf("input")?.conv_transpose2d(
                &leaf("weight")?,
                bias.as_ref(),
                ConvTranspose2dOptions {
                    stride: attr_pair(r, "stride")?,
                    padding: attr_pair(r, "padding")?,
                    output_padding: attr_pair(r, "output_padding")?,
                    dilation: attr_pair(r, "dilation")?,
                    groups: attr_int(r, "groups")? as usize,
                },
            )?)?
        }
        "batch_norm" | "layer_norm" | "group_norm" => {
            let x = leaf("input")?;
            let w = match inp.info("weight") {
                Some(_) => Some(leaf("weight")?),
                None => None,
            };
            let bias = match inp.info("bias") {
                Some(_) => Some(leaf("bias")?),
                None => None,
            };
            let eps = attr_f32(r, "eps")?;
            match op {
                "batch_norm" => {
                    let training = attr_bool(r, "training")?;
                    let (rm, rv) = (
                        inp.opt_tensor("running_mean")?,
                        inp.opt_tensor("running_var")?,
                    );
                    out(x.batch_norm(BatchNormOptions {
                        running_mean: rm.as_ref(),
                        running_var: rv.as_ref(),
                        weight: w.as_ref(),
                        bias: bias.as_ref(),
                        training,
                        momentum: Momentum::Exponential(
                            r.attr("momentum").and_then(Value::as_f32).unwrap_or(0.1),
                        ),
                        eps,
                    })?)?
                }
                "layer_norm" => out(x.layer_norm(
                    &attr_usizes(r, "normalized_shape")?,
                    LayerNormOptions {
                        weight: w.as_ref(),
                        bias: bias.as_ref(),
                        eps,
                    },
                )?)?,
                _ => out(x.group_norm(
                    attr_int(r, "num_groups")? as usize,
                    GroupNormOptions {
                        weight: w.as_ref(),
                        bias: bias.as_ref(),
                        eps,
                    },
                )?)?,
            }
        }
        "scaled_dot_product_attention" => {
            let (q, k, v) = (leaf("query")?, leaf("key")?, leaf("value")?);
            let kind = attr_str(r, "mask")?;
            let mask_t = match kind {
                "additive" => Some(leaf("mask")?),
                "allow" | "block" => Some(inp.tensor("mask")?),
                _ => None,
            };
            let mask = mask_t.as_ref().map(|m| match kind {
                "allow" => AttentionMask::Allow(m),
                "block" => AttentionMask::Block(m),
                _ => AttentionMask::Additive(m),
            });
            out(q.scaled_dot_product_attention(
                &k,
                &v,
                AttentionOptions {
                    mask,
                    is_causal: attr_bool(r, "is_causal")?,
                    scale: Some(attr_f32(r, "scale")?),
                },
            )?)?
        }
        "ctc_loss" => {
            let input_lengths: Vec<usize> = inp
                .ints("input_lengths")?
                .iter()
                .map(|&x| x as usize)
                .collect();
            let target_lengths: Vec<usize> = inp
                .ints("target_lengths")?
                .iter()
                .map(|&x| x as usize)
                .collect();
            let labels = inp.ints("labels")?;
            let shape = inp.ints_shape("labels");
            let targets = if attr_str(r, "targets")? == "padded" {
                let [a, c] = match shape.as_slice() {
                    [a, c] => [*a, *c],
                    _ => return Err(err("padded CTC labels are not 2-D")),
                };
                CtcTargets::Padded {
                    labels,
                    shape: [a, c],
                }
            } else {
                CtcTargets::Concatenated(labels)
            };
            let y = leaf("input")?.ctc_loss(
                CtcBatch {
                    targets,
                    input_lengths: &input_lengths,
                    target_lengths: &target_lengths,
                },
                CtcLossOptions {
                    blank: attr_int(r, "blank")? as usize,
                    reduction: reduction(attr_str(r, "reduction")?)?,
                    zero_infinity: attr_bool(r, "zero_infinity")?,
                },
            )?;
            out(y)?
        }
        "lstm_layer" | "gru_layer" => {
            let cell = if op == "lstm_layer" {
                crate::ops::rnn::Cell::Lstm
            } else {
                crate::ops::rnn::Cell::Gru
            };
            let x = leaf("input")?;
            let h0 = leaf("h0")?;
            let c0 = match inp.info("c0") {
                Some(_) => Some(leaf("c0")?),
                None => None,
            };
            let (wi, wh) = (leaf("weight_ih")?, leaf("weight_hh")?);
            let bi = match inp.info("bias_ih") {
                Some(_) => Some(leaf("bias_ih")?),
                None => None,
            };
            let bh = match inp.info("bias_hh") {
                Some(_) => Some(leaf("bias_hh")?),
                None => None,
            };
            out(crate::ops::rnn::layer(
                cell,
                &x,
                &h0,
                c0.as_ref(),
                RnnWeights {
                    weight_ih: &wi,
                    weight_hh: &wh,
                    bias_ih: bi.as_ref(),
                    bias_hh: bh.as_ref(),
                },
                attr_bool(r, "reverse")?,
            )?)?
        }
        name => match UnaryOp::NAMES.contains(&name) {
            true => {
                let params = r
                    .attr("params")
                    .and_then(Value::as_f32s)
                    .map(<[f32]>::to_vec)
                    .unwrap_or_default();
                let uop = UnaryOp::from_parts(name, &params)
                    .ok_or_else(|| err(format!("`{name}` with parameters {params:?}")))?;
                out(crate::ops::elementwise::unary_op(&leaf("input")?, uop)?)?
            }
            false => return Err(err(format!("no replay for operation `{name}`"))),
        },
    };
    Ok((outputs, made))
}

/// Compares `got` with the captured values of `want` (bit equality; NaNs of any payload
/// are equal).
fn check(name: &str, want: &TensorInfo, got: &[f32]) -> Result<OutputCheck> {
    let w = want
        .values
        .as_ref()
        .ok_or_else(|| err(format!("output `{name}` has no values in the capture")))?;
    if w.len() != got.len() {
        return Err(err(format!(
            "output `{name}`: {} captured values, {} replayed",
            w.len(),
            got.len()
        )));
    }
    let mut c = OutputCheck {
        name: name.to_string(),
        differing: 0,
        first: None,
        max_ulp: 0,
    };
    for (i, (&a, &b)) in w.iter().zip(got).enumerate() {
        let same = a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
        if !same {
            c.differing += 1;
            c.first.get_or_insert((i, a, b));
            if !a.is_nan() && !b.is_nan() {
                c.max_ulp = c.max_ulp.max(super::diff::ulp_distance(a, b));
            }
        }
    }
    Ok(c)
}

fn verdict(checks: Vec<OutputCheck>) -> Verdict {
    if checks.iter().all(|c| c.differing == 0) {
        Verdict::Reproduced
    } else {
        Verdict::Differs(checks)
    }
}

/// Replays `capture` on backend `b`. A backward rule needs the capture of its forward
/// record (`forward`); other records ignore it.
///
/// Fails when the capture lacks what the replay needs, or the operation itself fails.
pub fn replay<B: Backend>(b: &B, capture: &Capture, forward: Option<&Capture>) -> Result<Verdict> {
    let r = &capture.record;
    match r.kind {
        Kind::Forward => {
            let (outs, _) = run_forward(b, r, &capture.ints, &[])?;
            let mut checks = Vec::new();
            // The operation's output (and, for batch normalisation in training, the
            // running statistics it updated, which are not replayed: their values before
            // the update are not in the capture).
            let want = r
                .outputs
                .first()
                .ok_or_else(|| err("the record has no output"))?;
            checks.push(check(&want.name, want, &outs[0].to_vec()?)?);
            Ok(verdict(checks))
        }
        Kind::Backward if r.forward.is_some() => {
            let Some(fw) = forward else {
                return Ok(Verdict::NotReplayable(format!(
                    "a backward rule is replayed from its forward record {}: capture it too",
                    r.forward.map(|f| f.to_string()).unwrap_or_default()
                )));
            };
            // The inputs that received a gradient become leaves.
            let leaves: Vec<String> = r
                .outputs
                .iter()
                .filter(|o| o.digest.is_some())
                .filter_map(|o| o.name.strip_prefix("grad.").map(String::from))
                .collect();
            let leaf_refs: Vec<&str> = leaves.iter().map(String::as_str).collect();
            let (outs, made) = run_forward(b, &fw.record, &fw.ints, &leaf_refs)?;
            let g = r
                .inputs
                .iter()
                .find(|t| t.name == "grad")
                .ok_or_else(|| err("the backward record has no incoming gradient"))?;
            let gv = g
                .values
                .clone()
                .ok_or_else(|| err("the incoming gradient has no values in the capture"))?;
            let seed = Tensor::from_vec(b, gv, g.shape.clone())?;
            outs[0].backward_with(crate::BackwardOptions::default().gradient(&seed))?;
            let mut checks = Vec::new();
            for o in r.outputs.iter().filter(|o| o.digest.is_some()) {
                let name = o.name.strip_prefix("grad.").unwrap_or(&o.name);
                let Some((_, t)) = made.iter().find(|(n, _)| n == name) else {
                    continue;
                };
                let grad = t
                    .grad()
                    .ok_or_else(|| err(format!("the replay emitted no gradient into `{name}`")))?;
                checks.push(check(&o.name, o, &grad.to_vec()?)?);
            }
            Ok(verdict(checks))
        }
        Kind::Optimizer => replay_optimizer(b, capture),
        kind => Ok(Verdict::NotReplayable(format!(
            "a {} record is not an operation to replay",
            kind.name()
        ))),
    }
}

/// Replays an optimizer update with the fused kernel of its optimizer (the same f32
/// operations as every path of the optimizers, element by element).
fn replay_optimizer<B: Backend>(b: &B, capture: &Capture) -> Result<Verdict> {
    let r = &capture.record;
    let inp = Inputs {
        b,
        record: r,
        ints: &capture.ints,
    };
    let p = inp.tensor("param")?;
    let g = inp.tensor("grad")?;
    let _guard = crate::no_grad();
    let mut results: Vec<(&str, Tensor<B>)> = vec![("param", p.clone())];
    match r.op.as_str() {
        "sgd" => {
            let momentum = state_f64(r, "momentum")?;
            let buf = inp.opt_tensor("momentum_buffer")?;
            let first = momentum != 0.0 && buf.is_none();
            let buf = match (buf, first) {
                (Some(b), _) => Some(b),
                (None, true) => Some(Tensor::zeros(b, p.shape().clone())?),
                (None, false) => None,
            };
            let spec = SgdSpec::from_hyper(
                state_f64(r, "lr")?,
                momentum,
                state_f64(r, "dampening")?,
                state_f64(r, "weight_decay")?,
                state_bool(r, "nesterov")?,
                state_bool(r, "maximize")?,
                first,
            );
            p.sgd_step_(&g, buf.as_ref(), &spec)?;
            if let Some(buf) = buf {
                results.push(("momentum_buffer", buf));
            }
        }
        "adam" | "adamw" => {
            let (m, v) = (inp.tensor("exp_avg")?, inp.tensor("exp_avg_sq")?);
            let vmax = inp.opt_tensor("max_exp_avg_sq")?;
            let step = state(r, "step")?
                .as_int()
                .ok_or_else(|| err("state `step` is not an integer"))?;
            let spec = AdamSpec::from_hyper(
                state_f64(r, "lr")?,
                (state_f64(r, "beta1")?, state_f64(r, "beta2")?),
                state_f64(r, "eps")?,
                state_f64(r, "weight_decay")?,
                r.op == "adamw",
                state_bool(r, "amsgrad")?,
                state_bool(r, "maximize")?,
                step as u64,
            );
            p.adam_step_(&g, &m, &v, vmax.as_ref(), &spec)?;
            results.push(("exp_avg", m));
            results.push(("exp_avg_sq", v));
            if let Some(x) = vmax {
                results.push(("max_exp_avg_sq", x));
            }
        }
        other => {
            return Ok(Verdict::NotReplayable(format!(
                "no replay for the optimizer `{other}`"
            )))
        }
    }
    let mut checks = Vec::new();
    for (name, t) in results {
        if let Some(want) = r.outputs.iter().find(|o| o.name == name) {
            checks.push(check(name, want, &t.to_vec()?)?);
        }
    }
    Ok(verdict(checks))
}
