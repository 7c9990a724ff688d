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

use exactgrad::autograd::AttentionMask;
use exactgrad::prelude::*;
use safetensors::{Dtype, SafeTensors};
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

type T = Tensor<ScalarRefBackend>;

const FILES: &[&str] = &[
    "elementwise.safetensors",
    "reduce.safetensors",
    "linalg.safetensors",
    "shape.safetensors",
    "softmax_loss.safetensors",
    "conv.safetensors",
    "norm_attention.safetensors",
];

/// Relative tolerance of every comparison.
const TOL: f64 = 1e-5;

// ----- oracle data ---------------------------------------------------------------------

#[derive(Clone, Debug)]
struct Array {
    shape: Vec<usize>,
    data: Vec<f32>,
}

#[derive(Debug)]
struct Case {
    file: &'static str,
    name: String,
    spec: BTreeMap<String, String>,
    inputs: Vec<Array>,
    target: Option<Vec<i64>>,
    y: Array,
    gy: Array,
    /// (input index, PyTorch's gradient)
    grads: Vec<(usize, Array)>,
}

impl Case {
    fn op(&self) -> &str {
        &self.spec["op"]
    }

    fn arg(&self, key: &str) -> Result<&str, String> {
        self.spec
            .get(key)
            .map(String::as_str)
            .ok_or_else(|| format!("missing argument `{key}`"))
    }

    fn ints(&self, key: &str) -> Result<Vec<isize>, String> {
        parse_ints(self.arg(key)?)
    }

    fn int(&self, key: &str) -> Result<isize, String> {
        let v = self.ints(key)?;
        if v.len() != 1 {
            return Err(format!("argument `{key}` should be one integer, got {v:?}"));
        }
        Ok(v[0])
    }

    fn float(&self, key: &str) -> Result<Option<f32>, String> {
        let s = self.arg(key)?;
        if s == "none" {
            return Ok(None);
        }
        s.parse::<f32>()
            .map(Some)
            .map_err(|e| format!("argument `{key}` = `{s}`: {e}"))
    }

    fn reduction(&self) -> Result<Reduction, String> {
        match self.arg("reduction")? {
            "none" => Ok(Reduction::None),
            "mean" => Ok(Reduction::Mean),
            "sum" => Ok(Reduction::Sum),
            r => Err(format!("unknown reduction `{r}`")),
        }
    }

    /// Input shapes and views, for failure messages.
    fn describe_inputs(&self) -> String {
        let mut parts = Vec::new();
        for (i, x) in self.inputs.iter().enumerate() {
            let mut s = format!("x{i}: {:?}", x.shape);
            if let Some(v) = self.spec.get(&format!("view{i}")) {
                s.push_str(&format!(" viewed as {v}"));
            }
            if !self.grads.iter().any(|(j, _)| *j == i) {
                s.push_str(" (no grad)");
            }
            parts.push(s);
        }
        if let Some(t) = &self.target {
            parts.push(format!("targets {t:?}"));
        }
        let args: Vec<String> = self
            .spec
            .iter()
            .filter(|(k, _)| {
                !matches!(k.as_str(), "op" | "in" | "grads" | "tol") && !k.starts_with("view")
            })
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        if !args.is_empty() {
            parts.push(format!("args {}", args.join(" ")));
        }
        parts.join("; ")
    }
}

fn parse_ints(s: &str) -> Result<Vec<isize>, String> {
    if s.is_empty() {
        return Ok(Vec::new());
    }
    s.split(',')
        .map(|v| {
            v.trim()
                .parse::<isize>()
                .map_err(|e| format!("`{v}` in `{s}`: {e}"))
        })
        .collect()
}

fn read_array(st: &SafeTensors<'_>, name: &str) -> Array {
    let view = st
        .tensor(name)
        .unwrap_or_else(|e| panic!("oracle tensor `{name}`: {e}"));
    assert_eq!(
        view.dtype(),
        Dtype::F32,
        "oracle tensor `{name}` is not f32"
    );
    let data = view
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    Array {
        shape: view.shape().to_vec(),
        data,
    }
}

fn read_targets(st: &SafeTensors<'_>, name: &str) -> Vec<i64> {
    let view = st
        .tensor(name)
        .unwrap_or_else(|e| panic!("oracle tensor `{name}`: {e}"));
    assert_eq!(
        view.dtype(),
        Dtype::I64,
        "oracle tensor `{name}` is not i64"
    );
    view.data()
        .chunks_exact(8)
        .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")))
        .collect()
}

fn load_file(file: &'static str) -> Vec<Case> {
    let path = format!("{}/testdata/ops/{file}", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("reading {path}: {e} (generate it with tools/op_oracle.py)"));
    let (_, header) = SafeTensors::read_metadata(&bytes).unwrap_or_else(|e| panic!("{path}: {e}"));
    let meta = header.metadata().clone().unwrap_or_default();
    let st = SafeTensors::deserialize(&bytes).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut specs: Vec<(&String, &String)> = meta
        .iter()
        .filter(|(k, _)| k.starts_with("case:"))
        .collect();
    specs.sort();
    specs
        .into_iter()
        .map(|(key, value)| {
            let name = key["case:".len()..].to_string();
            let spec: BTreeMap<String, String> = value
                .split(';')
                .map(|kv| {
                    let (k, v) = kv
                        .split_once('=')
                        .unwrap_or_else(|| panic!("{path}: case {name}: bad entry `{kv}`"));
                    (k.to_string(), v.to_string())
                })
                .collect();
            let n: usize = spec["in"].parse().expect("in=<count>");
            let inputs = (0..n)
                .map(|i| read_array(&st, &format!("{name}/x{i}")))
                .collect();
            let grads = parse_ints(&spec["grads"])
                .expect("grads=<list>")
                .into_iter()
                .map(|i| (i as usize, read_array(&st, &format!("{name}/g{i}"))))
                .collect();
            let target = (spec["op"] == "cross_entropy")
                .then(|| read_targets(&st, &format!("{name}/target")));
            Case {
                file,
                y: read_array(&st, &format!("{name}/y")),
                gy: read_array(&st, &format!("{name}/gy")),
                name,
                spec,
                inputs,
                target,
                grads,
            }
        })
        .collect()
}

fn cases() -> &'static [Case] {
    static CASES: OnceLock<Vec<Case>> = OnceLock::new();
    CASES.get_or_init(|| FILES.iter().flat_map(|f| load_file(f)).collect())
}

// ----- running a case -----------------------------------------------------------------

/// The view language of the oracle: `name(a,b,...)` applied to a tensor.
fn apply_view(t: &T, name: &str, a: &[isize]) -> Result<T, String> {
    let arg = |i: usize| {
        a.get(i)
            .copied()
            .ok_or_else(|| format!("{name}: missing argument {i} in {a:?}"))
    };
    let r = match name {
        "transpose" => t.transpose(arg(0)?, arg(1)?),
        "permute" => t.permute(a),
        "reshape" => t.reshape(a),
        "view" => t.view(a),
        "narrow" => t.narrow(arg(0)?, arg(1)? as usize, arg(2)? as usize),
        "slice" => t.slice(arg(0)?, arg(1)?, arg(2)?, arg(3)? as usize),
        "expand" => t.expand(&a.iter().map(|&d| d as usize).collect::<Vec<_>>()),
        "squeeze" => t.squeeze(arg(0)?),
        "unsqueeze" => t.unsqueeze(arg(0)?),
        "flatten" => t.flatten(arg(0)?, arg(1)?),
        "contiguous" => Ok(t.contiguous()),
        _ => return Err(format!("unknown view `{name}`")),
    };
    r.map_err(|e| format!("view {name}{a:?}: {e}"))
}

fn apply_chain(t: &T, chain: &str) -> Result<T, String> {
    let mut t = t.clone();
    for part in chain.split('|') {
        let (name, rest) = part
            .split_once('(')
            .ok_or_else(|| format!("bad view `{part}`"))?;
        let args = parse_ints(rest.trim_end_matches(')'))?;
        t = apply_view(&t, name, &args)?;
    }
    Ok(t)
}

/// Calls the case's operator on the (viewed) inputs.
fn call_op(c: &Case, x: &[T]) -> Result<T, String> {
    let e = |r: exactgrad::Result<T>| r.map_err(|e| format!("returned an error: {e}"));
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

/// The convolution family's operators (`conv.safetensors`).
fn conv_call(c: &Case, x: &[T]) -> Result<T, String> {
    let e = |r: exactgrad::Result<T>| r.map_err(|e| format!("returned an error: {e}"));
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
            let opts = exactgrad::autograd::Conv2dOptions {
                stride: pair("stride")?,
                padding: pair("padding")?,
                dilation: pair("dilation")?,
                groups: one("groups")?,
            };
            e(x[0].conv2d(&x[1], x.get(2), opts))
        }
        "conv1d" => {
            let opts = exactgrad::autograd::Conv1dOptions {
                stride: one("stride")?,
                padding: one("padding")?,
                dilation: one("dilation")?,
                groups: one("groups")?,
            };
            e(x[0].conv1d(&x[1], x.get(2), opts))
        }
        "max_pool2d" => {
            let opts = exactgrad::autograd::MaxPool2dOptions {
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
            let opts = exactgrad::autograd::AvgPool2dOptions {
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

/// The normalisation, embedding, index_select, split/chunk and attention operators
/// (`norm_attention.safetensors`). Optional inputs follow the required ones in the order
/// of their flags; a batch_norm case `with_stats` returns `[y.flatten(), running_mean,
/// running_var]` after the update, and a split case the used pieces, flattened and scaled
/// by their position + 1 (each piece must be a view of the input).
fn norm_attention_call(c: &Case, x: &[T]) -> Result<T, String> {
    let e = |r: exactgrad::Result<T>| r.map_err(|e| format!("returned an error: {e}"));
    let flag = |key: &str| c.int(key).map(|v| v != 0);
    let float = |key: &str| -> Result<f32, String> {
        c.float(key)?
            .ok_or_else(|| format!("argument `{key}` is none"))
    };
    let usizes = |key: &str| -> Result<Vec<usize>, String> {
        Ok(c.ints(key)?.iter().map(|&v| v as usize).collect())
    };
    let i64s = |key: &str| -> Result<Vec<i64>, String> {
        Ok(c.ints(key)?.iter().map(|&v| v as i64).collect())
    };
    let mut rest = x[1..].iter();
    let mut opt = |present: bool| if present { rest.next() } else { None };
    match c.op() {
        "batch_norm" => {
            let stats = flag("stats")?;
            let (rm, rv) = (opt(stats), opt(stats));
            let (w, b) = (opt(flag("weight")?), opt(flag("bias")?));
            let y = e(x[0].batch_norm(
                rm,
                rv,
                w,
                b,
                flag("training")?,
                float("momentum")?,
                float("eps")?,
            ))?;
            if !flag("with_stats")? {
                return Ok(y);
            }
            let (rm, rv) = (rm.ok_or("no running_mean")?, rv.ok_or("no running_var")?);
            e(T::concat(&[&e(y.reshape(&[-1]))?, rm, rv], 0))
        }
        "layer_norm" => {
            let (w, b) = (opt(flag("weight")?), opt(flag("bias")?));
            e(x[0].layer_norm(&usizes("normalized_shape")?, w, b, float("eps")?))
        }
        "group_norm" => {
            let (w, b) = (opt(flag("weight")?), opt(flag("bias")?));
            let groups = c.int("num_groups")? as usize;
            e(x[0].group_norm(groups, w, b, float("eps")?))
        }
        "embedding" => {
            let padding_idx = match c.arg("padding_idx")? {
                "none" => None,
                _ => Some(c.int("padding_idx")? as i64),
            };
            e(T::embedding(
                &x[0],
                &i64s("indices")?,
                &usizes("ishape")?,
                padding_idx,
            ))
        }
        "index_select" => e(x[0].index_select(c.int("dim")?, &i64s("indices")?)),
        "split" | "split_sizes" | "chunk" => {
            let dim = c.int("dim")?;
            let pieces = match c.op() {
                "split" => x[0].split(c.int("split_size")? as usize, dim),
                "split_sizes" => x[0].split_sizes(&usizes("sizes")?, dim),
                _ => x[0].chunk(c.int("chunks")? as usize, dim),
            }
            .map_err(|e| format!("returned an error: {e}"))?;
            let want = c.int("npieces")? as usize;
            if pieces.len() != want {
                return Err(format!("{} pieces, torch has {want}", pieces.len()));
            }
            if let Some(k) = pieces.iter().position(|p| !p.shares_storage(&x[0])) {
                return Err(format!("piece {k} is a copy, not a view of the input"));
            }
            let used = usizes("use")?
                .into_iter()
                .map(|k| {
                    e(pieces[k]
                        .reshape(&[-1])
                        .and_then(|p| p.mul_scalar((k + 1) as f32)))
                })
                .collect::<Result<Vec<T>, String>>()?;
            e(T::concat(&used.iter().collect::<Vec<_>>(), 0))
        }
        "scaled_dot_product_attention" => {
            let mask = match c.arg("mask")? {
                "none" => None,
                "bool" => Some(AttentionMask::Bool(&x[3])),
                "additive" => Some(AttentionMask::Additive(&x[3])),
                m => return Err(format!("unknown mask kind `{m}`")),
            };
            e(T::scaled_dot_product_attention(
                &x[0],
                &x[1],
                &x[2],
                mask,
                flag("causal")?,
                c.float("scale")?,
            ))
        }
        op => Err(format!("no runner for operator `{op}`")),
    }
}

/// Compares `ours` with PyTorch's `want`; on success returns the worst scaled error.
fn compare(what: &str, ours: &T, want: &Array, scaled: bool) -> Result<f64, String> {
    if ours.dims() != want.shape.as_slice() {
        return Err(format!(
            "{what}: shape {:?}, torch has {:?}",
            ours.dims(),
            want.shape
        ));
    }
    let got = ours.to_vec();
    let tensor_scale = want
        .data
        .iter()
        .filter(|v| v.is_finite())
        .fold(1.0f64, |m, &v| m.max(f64::from(v).abs()));
    let mut worst = 0.0f64;
    let mut bad = 0usize;
    let mut first: Option<String> = None;
    for (i, (&o, &t)) in got.iter().zip(&want.data).enumerate() {
        let (ok, err) = if t.is_nan() {
            (o.is_nan(), if o.is_nan() { 0.0 } else { f64::INFINITY })
        } else if t.is_infinite() {
            (o == t, if o == t { 0.0 } else { f64::INFINITY })
        } else if !o.is_finite() {
            (false, f64::INFINITY)
        } else {
            let scale = if scaled {
                tensor_scale
            } else {
                f64::from(t).abs().max(1.0)
            };
            let err = (f64::from(o) - f64::from(t)).abs() / scale;
            (err <= TOL, err)
        };
        worst = worst.max(err);
        if !ok {
            bad += 1;
            if first.is_none() {
                first = Some(format!(
                    "first differing element {:?} (flat {i}): ours {o:e} ({:#010x}), torch {t:e} ({:#010x}), scaled error {err:.3e}",
                    unravel(i, &want.shape),
                    o.to_bits(),
                    t.to_bits()
                ));
            }
        }
    }
    match first {
        None => Ok(worst),
        Some(f) => Err(format!(
            "{what} differs from PyTorch in {bad} of {} elements (tolerance {TOL:e}, {} scale); {f}",
            got.len(),
            if scaled { "tensor" } else { "element" }
        )),
    }
}

fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = i % shape[d].max(1);
        i /= shape[d].max(1);
    }
    idx
}

/// Cases where exactgrad deliberately differs from PyTorch by returning an error, with
/// the reason.
fn deliberate_error(name: &str) -> Option<&'static str> {
    match name {
        "cross_entropy_negative_smoothing" => Some(
            "label_smoothing must lie in [0, 1]; PyTorch accepts negative values, which have no meaning",
        ),
        _ => None,
    }
}

/// Runs one case: forward, comparison, backward with PyTorch's upstream gradient,
/// comparison of every gradient. Returns (worst forward error, worst gradient error).
fn run_case(c: &Case) -> Result<(f64, f64), String> {
    let b = ScalarRefBackend;
    if let Some(why) = deliberate_error(&c.name) {
        // A case PyTorch accepts and exactgrad refuses on purpose: the op must return an
        // error, not a value.
        let leaves: Vec<T> = c
            .inputs
            .iter()
            .map(|a| T::from_vec(&b, a.data.clone(), a.shape.clone()).map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?;
        return match call_op(c, &leaves) {
            Err(_) => Ok((0.0, 0.0)),
            Ok(_) => Err(format!("expected an error ({why}), got a value")),
        };
    }
    let scaled = match c.arg("tol")? {
        "elem" => false,
        "scaled" => true,
        t => return Err(format!("unknown tolerance `{t}`")),
    };
    let mut leaves = Vec::new();
    for (i, a) in c.inputs.iter().enumerate() {
        let t = T::from_vec(&b, a.data.clone(), a.shape.clone()).map_err(|e| e.to_string())?;
        let t = if c.grads.iter().any(|(j, _)| *j == i) {
            t.requires_grad().map_err(|e| e.to_string())?
        } else {
            t
        };
        leaves.push(t);
    }
    let operands = leaves
        .iter()
        .enumerate()
        .map(|(i, t)| match c.spec.get(&format!("view{i}")) {
            Some(chain) => apply_chain(t, chain),
            None => Ok(t.clone()),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let out = call_op(c, &operands).map_err(|e| format!("forward: {e}"))?;
    let fwd = compare("forward output", &out, &c.y, scaled)?;
    let gy = T::from_vec(&b, c.gy.data.clone(), c.gy.shape.clone()).map_err(|e| e.to_string())?;
    out.backward(Some(&gy), false)
        .map_err(|e| format!("backward returned an error: {e}"))?;
    let mut bwd = 0.0f64;
    for (i, want) in &c.grads {
        let what = format!("gradient of x{i}");
        match leaves[*i].grad() {
            Some(g) => bwd = bwd.max(compare(&what, &g, want, scaled)?),
            None if want.data.iter().all(|&v| v == 0.0) => {}
            None => return Err(format!("{what}: none, torch has {:?}", want.data)),
        }
    }
    Ok((fwd, bwd))
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".to_string()
    }
}

/// Runs every case of `op`; fails with every disagreement listed.
fn check_op(op: &str) {
    let selected: Vec<&Case> = cases().iter().filter(|c| c.op() == op).collect();
    assert!(!selected.is_empty(), "no oracle case for operator `{op}`");
    let mut failures = Vec::new();
    let (mut worst_fwd, mut worst_bwd) = ((0.0f64, ""), (0.0f64, ""));
    for c in &selected {
        let r = catch_unwind(AssertUnwindSafe(|| run_case(c)))
            .unwrap_or_else(|p| Err(format!("panicked: {}", panic_message(&*p))));
        match r {
            Ok((f, g)) => {
                if f >= worst_fwd.0 {
                    worst_fwd = (f, &c.name);
                }
                if g >= worst_bwd.0 {
                    worst_bwd = (g, &c.name);
                }
            }
            Err(msg) => failures.push(format!(
                "  op `{op}`, case `{}` ({}):\n    inputs: {}\n    {msg}",
                c.name,
                c.file,
                c.describe_inputs()
            )),
        }
    }
    println!(
        "{op:>14}: {:>3} cases, {} failed; worst scaled error forward {:.2e} ({}), gradients {:.2e} ({})",
        selected.len(),
        failures.len(),
        worst_fwd.0,
        worst_fwd.1,
        worst_bwd.0,
        worst_bwd.1
    );
    if !failures.is_empty() {
        panic!(
            "{} of {} PyTorch cases of `{op}` disagree with PyTorch 2.15.0:\n{}",
            failures.len(),
            selected.len(),
            failures.join("\n")
        );
    }
}

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

// ----- errors that PyTorch also raises --------------------------------------------------

fn t(shape: &[usize]) -> T {
    let n: usize = shape.iter().product();
    let data = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
    T::from_vec(&ScalarRefBackend, data, shape.to_vec())
        .unwrap()
        .requires_grad()
        .unwrap()
}

/// `r` must be an `Err` whose message contains every needle (the operator first).
#[track_caller]
fn expect_err(what: &str, r: exactgrad::Result<T>, needles: &[&str]) {
    match r {
        Ok(t) => panic!(
            "{what}: expected an error, got a tensor of shape {:?}",
            t.dims()
        ),
        Err(e) => {
            let msg = e.to_string();
            for n in needles {
                assert!(
                    msg.contains(n),
                    "{what}: the error message `{msg}` does not mention `{n}`"
                );
            }
        }
    }
}

/// Runs `f`, turning a panic into a test failure that says the call panicked.
#[track_caller]
fn no_panic(what: &str, f: impl FnOnce() -> exactgrad::Result<T>) -> exactgrad::Result<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        panic!(
            "{what}: panicked instead of returning Err: {}",
            panic_message(&*p)
        )
    })
}

#[test]
fn errors_binary_shape_mismatch() {
    type BinOp = fn(&T, &T) -> exactgrad::Result<T>;
    let ops: [(&str, BinOp); 4] = [
        ("add", T::add),
        ("sub", T::sub),
        ("mul", T::mul),
        ("div", T::div),
    ];
    for (name, f) in ops {
        for (a, b) in [
            (&[2usize, 3][..], &[4usize, 3][..]),
            (&[3], &[4]),
            (&[2, 3, 4], &[3, 3]),
            (&[2, 1, 3], &[4, 2]),
        ] {
            let (x, y) = (t(a), t(b));
            let r = no_panic(name, || f(&x, &y));
            expect_err(
                &format!("{name} {a:?} {b:?}"),
                r,
                &[name, &format!("{a:?}"), &format!("{b:?}")],
            );
        }
    }
    let (c, x, y) = (t(&[2, 3]), t(&[4, 3]), t(&[3]));
    expect_err(
        "where",
        no_panic("where", || T::where_cond(&c, &x, &y)),
        &["where", "[2, 3]", "[4, 3]"],
    );
    let (c, x, y) = (t(&[3]), t(&[3]), t(&[2, 4]));
    expect_err(
        "where",
        no_panic("where", || T::where_cond(&c, &x, &y)),
        &["where", "[2, 4]"],
    );
    let (x, y) = (t(&[2, 3]), t(&[4, 3]));
    expect_err(
        "mse_loss",
        no_panic("mse_loss", || x.mse_loss(&y, Reduction::Mean)),
        &["mse_loss", "[2, 3]", "[4, 3]"],
    );
}

#[test]
fn errors_matmul_and_linear() {
    let cases: [(&[usize], &[usize]); 3] = [(&[2, 3], &[4, 5]), (&[2, 3, 4], &[5, 2]), (&[], &[3])];
    for (a, b) in cases {
        let (x, y) = (t(a), t(b));
        let r = no_panic("matmul", || x.matmul(&y));
        expect_err(
            &format!("matmul {a:?} {b:?}"),
            r,
            &["matmul", &format!("{a:?}"), &format!("{b:?}")],
        );
    }
    let (x, w, bias) = (t(&[3, 4]), t(&[5, 3]), t(&[5]));
    expect_err(
        "linear in_features",
        no_panic("linear", || x.linear(&w, Some(&bias))),
        &["linear", "[3, 4]", "[5, 3]"],
    );
    let (x, w, bias) = (t(&[3, 4]), t(&[5, 4]), t(&[4]));
    expect_err(
        "linear bias",
        no_panic("linear", || x.linear(&w, Some(&bias))),
        &["linear", "[4]", "[5, 4]"],
    );
    let (x, w) = (t(&[3, 4]), t(&[2, 5, 4]));
    expect_err(
        "linear 3-D weight",
        no_panic("linear", || x.linear(&w, None)),
        &["linear", "[2, 5, 4]"],
    );
}

/// An error must name the shapes the caller passed: not the 1-D operands promoted to
/// matrices, nor only the batch dimensions that failed to broadcast.
#[test]
fn errors_matmul_name_the_shapes_given() {
    let cases: [(&[usize], &[usize]); 5] = [
        (&[3], &[4]),
        (&[3], &[4, 5]),
        (&[2, 3], &[4]),
        (&[2, 3, 4], &[3, 4, 5]),
        (&[3], &[2, 4, 5]),
    ];
    for (a, b) in cases {
        let (x, y) = (t(a), t(b));
        let r = no_panic("matmul", || x.matmul(&y));
        expect_err(
            &format!("matmul {a:?} {b:?}"),
            r,
            &["matmul", &format!("{a:?}"), &format!("{b:?}")],
        );
    }
}

/// An operator name, a call that must fail, and what its message must mention.
type ErrCase<'a> = (
    &'static str,
    Box<dyn Fn() -> exactgrad::Result<T> + 'a>,
    Vec<&'static str>,
);

#[test]
fn errors_bad_dims() {
    let x = t(&[2, 3]);
    let calls: Vec<ErrCase<'_>> = vec![
        (
            "sum",
            Box::new(|| x.sum_dims(&[2], false)),
            vec!["sum", "2", "rank 2"],
        ),
        (
            "sum",
            Box::new(|| x.sum_dims(&[-3], true)),
            vec!["sum", "-3", "rank 2"],
        ),
        (
            "sum",
            Box::new(|| x.sum_dims(&[0, -2], false)),
            vec!["sum", "more than once"],
        ),
        (
            "mean",
            Box::new(|| x.mean_dims(&[5], false)),
            vec!["mean", "5", "rank 2"],
        ),
        (
            "mean",
            Box::new(|| x.mean_dims(&[1, 1], false)),
            vec!["mean", "more than once"],
        ),
        (
            "softmax",
            Box::new(|| x.softmax(2)),
            vec!["softmax", "2", "rank 2"],
        ),
        (
            "log_softmax",
            Box::new(|| x.log_softmax(-3)),
            vec!["log_softmax", "-3", "rank 2"],
        ),
        (
            "transpose",
            Box::new(|| x.transpose(0, 2)),
            vec!["transpose", "2", "rank 2"],
        ),
        (
            "permute",
            Box::new(|| x.permute(&[0])),
            vec!["permute", "[0]"],
        ),
        (
            "permute",
            Box::new(|| x.permute(&[1, 1])),
            vec!["permute", "[1, 1]"],
        ),
        (
            "narrow",
            Box::new(|| x.narrow(1, 2, 2)),
            vec!["narrow", "[2, 3]"],
        ),
        (
            "narrow",
            Box::new(|| x.narrow(2, 0, 1)),
            vec!["narrow", "2", "rank 2"],
        ),
        (
            "slice",
            Box::new(|| x.slice(-3, 0, 1, 1)),
            vec!["slice", "-3", "rank 2"],
        ),
        (
            "slice",
            Box::new(|| x.slice(0, 0, 1, 0)),
            vec!["slice", "step"],
        ),
        (
            "unsqueeze",
            Box::new(|| x.unsqueeze(3)),
            vec!["unsqueeze", "3"],
        ),
        ("flatten", Box::new(|| x.flatten(1, 0)), vec!["flatten"]),
        (
            "flatten",
            Box::new(|| x.flatten(0, 2)),
            vec!["flatten", "2", "rank 2"],
        ),
        (
            "reshape",
            Box::new(|| x.reshape(&[4, 2])),
            vec!["reshape", "[2, 3]", "[4, 2]"],
        ),
        (
            "reshape",
            Box::new(|| x.reshape(&[-1, -1])),
            vec!["reshape", "-1"],
        ),
        (
            "view",
            Box::new(|| x.transpose(0, 1)?.view(&[6])),
            vec!["view", "[3, 2]"],
        ),
        (
            "expand",
            Box::new(|| x.expand(&[4, 3, 2])),
            vec!["expand", "[2, 3]", "[4, 3, 2]"],
        ),
        (
            "expand",
            Box::new(|| x.expand(&[3])),
            vec!["expand", "[2, 3]", "[3]"],
        ),
        (
            "concat",
            Box::new(|| T::concat(&[&x, &x], 2)),
            vec!["concat", "2", "rank 2"],
        ),
        (
            "concat",
            Box::new(|| T::concat(&[&x, &t(&[3, 2])], 0)),
            vec!["concat", "[2, 3]", "[3, 2]"],
        ),
        (
            "concat",
            Box::new(|| T::concat(&[&x, &t(&[2, 3, 1])], 0)),
            vec!["concat", "[2, 3]", "[2, 3, 1]"],
        ),
        ("concat", Box::new(|| T::concat(&[], 0)), vec!["concat"]),
        (
            "stack",
            Box::new(|| T::stack(&[&x, &x], 3)),
            vec!["stack", "3"],
        ),
        (
            "stack",
            Box::new(|| T::stack(&[&x, &x], -4)),
            vec!["stack", "-4"],
        ),
        (
            "stack",
            Box::new(|| T::stack(&[&x, &t(&[3, 2])], 0)),
            vec!["stack", "[2, 3]", "[3, 2]"],
        ),
        ("clamp", Box::new(|| x.clamp(None, None)), vec!["clamp"]),
    ];
    for (name, f, needles) in &calls {
        let r = no_panic(name, f);
        expect_err(name, r, needles);
    }
}

#[test]
fn errors_invalid_labels() {
    let logits = t(&[3, 4]);
    let ce = |targets: &[i64], options: CrossEntropyOptions| {
        no_panic("cross_entropy", || logits.cross_entropy(targets, options))
    };
    let d = CrossEntropyOptions::default();
    expect_err(
        "label = classes",
        ce(&[0, 4, 1], d),
        &["cross_entropy", "4", "4 classes"],
    );
    expect_err(
        "negative label",
        ce(&[0, 1, -1], d),
        &["cross_entropy", "-1", "4 classes"],
    );
    expect_err(
        "default ignore index is -100",
        ce(&[-100, 1, -7], d),
        &["cross_entropy", "-7"],
    );
    let custom = CrossEntropyOptions {
        ignore_index: 2,
        ..d
    };
    expect_err(
        "-100 is a label when ignore_index = 2",
        ce(&[-100, 1, 2], custom),
        &["cross_entropy", "-100"],
    );
    expect_err(
        "too few targets",
        ce(&[0, 1], d),
        &["cross_entropy", "[3, 4]", "2 targets"],
    );
    expect_err(
        "too many targets",
        ce(&[0, 1, 2, 3], d),
        &["cross_entropy", "[3, 4]", "4 targets"],
    );
    let bad_smoothing = CrossEntropyOptions {
        label_smoothing: 1.5,
        ..d
    };
    expect_err(
        "label_smoothing > 1",
        ce(&[0, 1, 2], bad_smoothing),
        &["cross_entropy", "label_smoothing"],
    );
    let scalar = T::scalar(&ScalarRefBackend, 1.0);
    expect_err(
        "scalar logits",
        no_panic("cross_entropy", || scalar.cross_entropy(&[0], d)),
        &["cross_entropy", "scalar"],
    );
    let nchw = t(&[2, 3, 2]);
    expect_err(
        "[N, C, d] label out of range",
        no_panic("cross_entropy", || nchw.cross_entropy(&[0, 1, 2, 3], d)),
        &["cross_entropy", "3", "3 classes"],
    );
    // What PyTorch accepts must be accepted: a label equal to a custom ignore index.
    let neg_ignore = CrossEntropyOptions {
        ignore_index: -1,
        ..d
    };
    assert!(
        ce(&[0, -1, 3], neg_ignore).is_ok(),
        "ignore_index = -1 must accept label -1"
    );
}
