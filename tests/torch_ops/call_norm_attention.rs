//! The runners of normalisation, embedding, index_select, split/chunk and attention
//! (`norm_attention.safetensors`).

use super::oracle::Case;
use super::T;
use exactgrad::prelude::*;

/// The normalisation, embedding, index_select, split/chunk and attention operators
/// (`norm_attention.safetensors`). Optional inputs follow the required ones in the order
/// of their flags; a batch_norm case `with_stats` returns `[y.flatten(), running_mean,
/// running_var]` after the update, and a split case the used pieces, flattened and scaled
/// by their position + 1 (each piece must be a view of the input).
pub(crate) fn norm_attention_call(c: &Case, x: &[T]) -> Result<T, String> {
    let e = |r: exactgrad::autograd::Result<T>| r.map_err(|e| format!("returned an error: {e}"));
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
            let y = e(x[0].batch_norm(BatchNormOptions {
                running_mean: rm,
                running_var: rv,
                weight: w,
                bias: b,
                training: flag("training")?,
                momentum: Momentum::Exponential(float("momentum")?),
                eps: float("eps")?,
            }))?;
            if !flag("with_stats")? {
                return Ok(y);
            }
            let (rm, rv) = (rm.ok_or("no running_mean")?, rv.ok_or("no running_var")?);
            e(T::concat(&[&e(y.reshape([y.numel()]))?, rm, rv], 0))
        }
        "layer_norm" => {
            let (w, b) = (opt(flag("weight")?), opt(flag("bias")?));
            let opts = LayerNormOptions {
                weight: w,
                bias: b,
                eps: float("eps")?,
            };
            e(x[0].layer_norm(&usizes("normalized_shape")?, opts))
        }
        "group_norm" => {
            let (w, b) = (opt(flag("weight")?), opt(flag("bias")?));
            let groups = c.int("num_groups")? as usize;
            let opts = GroupNormOptions {
                weight: w,
                bias: b,
                eps: float("eps")?,
            };
            e(x[0].group_norm(groups, opts))
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
                        .reshape([pieces[k].numel()])
                        .and_then(|p| p.mul_scalar((k + 1) as f32)))
                })
                .collect::<Result<Vec<T>, String>>()?;
            e(T::concat(&used.iter().collect::<Vec<_>>(), 0))
        }
        "scaled_dot_product_attention" => {
            let mask = match c.arg("mask")? {
                "none" => None,
                // PyTorch's boolean attn_mask of the functional form: True takes part.
                "bool" => Some(AttentionMask::Allow(&x[3])),
                "additive" => Some(AttentionMask::Additive(&x[3])),
                m => return Err(format!("unknown mask kind `{m}`")),
            };
            let opts = AttentionOptions {
                mask,
                is_causal: flag("causal")?,
                scale: c.float("scale")?,
            };
            e(x[0].scaled_dot_product_attention(&x[1], &x[2], opts))
        }
        op => Err(format!("no runner for operator `{op}`")),
    }
}
