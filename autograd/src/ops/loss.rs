//! Losses: cross entropy over class indices and mean squared error.

use super::canon;
use crate::engine::{record_with, Saved};
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::trace::{OpInfo, Value};
use exactgrad_core::{Backend, UnaryOp};

/// How per-element losses are combined (PyTorch's `reduction`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Reduction {
    /// One loss per element, in the targets' shape.
    None,
    /// The mean over the elements that count (for cross entropy: targets not ignored).
    #[default]
    Mean,
    /// The sum.
    Sum,
}

/// Options of [`Tensor::cross_entropy`], with PyTorch's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CrossEntropyOptions {
    /// How the per-sample losses are combined.
    pub reduction: Reduction,
    /// Targets equal to this contribute neither loss nor gradient (default −100).
    pub ignore_index: i64,
    /// Mixes the one-hot target with the uniform distribution: `(1−ε)·onehot + ε/C`.
    pub label_smoothing: f32,
}

impl Default for CrossEntropyOptions {
    fn default() -> Self {
        Self {
            reduction: Reduction::Mean,
            ignore_index: -100,
            label_smoothing: 0.0,
        }
    }
}

impl<B: Backend> Tensor<B> {
    /// Cross entropy between logits and class-index targets (PyTorch's
    /// `nn.functional.cross_entropy` with integer targets).
    ///
    /// `self` is `[C]` (one target), `[N, C]` (N targets) or `[N, C, d1, …]` (targets in
    /// `[N, d1, …]` order). Targets must lie in `[0, C)` unless equal to `ignore_index`.
    /// The loss of a sample is `(1−ε)·(−log p[y]) + ε·(−Σ_c log p[c] / C)`.
    ///
    /// The targets are integer data ([`Indices`](crate::Indices)): `&[i64]`, a
    /// `Vec<i64>` (a loader's labels) or an index tensor, read in row-major order.
    pub fn cross_entropy<I: crate::Indices + ?Sized>(
        &self,
        targets: &I,
        options: CrossEntropyOptions,
    ) -> Result<Tensor<B>> {
        let _public = crate::engine::PublicOp::new("cross_entropy");
        let op = "cross_entropy";
        let (targets, _) = targets.read_indices(op)?;
        let targets = targets.as_slice();
        let eps = options.label_smoothing;
        if !(0.0..=1.0).contains(&eps) {
            return Err(Error::invalid(
                op,
                "label_smoothing",
                format!("must be in [0, 1], got {eps}"),
            ));
        }
        let rank = self.rank();
        if rank == 0 {
            return Err(Error::invalid(
                op,
                "input",
                "expects logits of shape [C], [N, C] or [N, C, d1, ...], got a scalar",
            ));
        }
        let class_dim = if rank == 1 { 0 } else { 1 };
        let classes = self.dims()[class_dim];
        let mut target_shape = self.dims().to_vec();
        target_shape.remove(class_dim);
        let rows = exactgrad_core::Shape::from(&target_shape).numel_for(op)?;
        if targets.len() != rows {
            return Err(Error::invalid(
                op,
                "targets",
                format!("{} targets given for logits of shape {:?} (expected {rows}, shape {target_shape:?})", targets.len(), self.dims()),
            ));
        }
        for (i, &t) in targets.iter().enumerate() {
            if t != options.ignore_index && (t < 0 || t as usize >= classes) {
                return Err(Error::InvalidLabel {
                    op,
                    label: t,
                    index: i,
                    classes,
                });
            }
        }
        if classes == 0 && rows > 0 {
            return Err(Error::invalid(
                op,
                "input",
                "the class dimension has size 0",
            ));
        }
        // Logits as [rows, C]: class dimension last.
        let x2 = if rank == 1 {
            self.reshape_to(&[1, classes])?
        } else {
            let mut perm: Vec<isize> = (0..rank as isize).filter(|&d| d != 1).collect();
            perm.push(1);
            self.permute(&perm)?.reshape_to(&[rows, classes])?
        };
        let be = self.backend();
        let mode = be.mode();
        let lp_t = super::new_tensor(be, op, [rows, classes].into(), |lp| {
            Ok(x2.with_contiguous(|xs| be.softmax(xs, rows, classes, true, lp))??)
        })?;
        let lp_read = lp_t.read()?;
        let lp_host = B::to_host(lp_read.as_ref())?;
        let lp_vals: &[f32] = &lp_host;
        let ignore = options.ignore_index;
        let valid = targets.iter().filter(|&&t| t != ignore).count();
        let mut per_row = super::zeroed_vec(op, rows)?;
        let (one_minus, eps_c) = (1.0 - eps, eps / classes.max(1) as f32);
        for i in 0..rows {
            if targets[i] == ignore {
                continue;
            }
            let row = &lp_vals[i * classes..(i + 1) * classes];
            let nll = -row[targets[i] as usize];
            let loss = if eps > 0.0 {
                let s: f64 = row.iter().map(|&v| f64::from(v)).sum();
                let smooth = -(s as f32) / classes as f32;
                one_minus * nll + eps * smooth
            } else {
                nll
            };
            per_row[i] = canon(mode, loss);
        }
        let reduction = options.reduction;
        let out = match reduction {
            Reduction::None => Tensor::from_op_vec(be, per_row, target_shape.clone())?,
            Reduction::Sum | Reduction::Mean => {
                let total: f64 = per_row.iter().map(|&v| f64::from(v)).sum();
                let v = if reduction == Reduction::Mean {
                    total / valid as f64
                } else {
                    total
                };
                Tensor::op_scalar(be, canon(mode, v as f32))?
            }
        };
        drop(lp_host);
        drop(lp_read);
        let mut kept = exactgrad_core::backend::try_vec_with_capacity(op, targets.len())?;
        kept.extend_from_slice(targets);
        let targets = kept;
        let info = crate::trace::info(|| {
            OpInfo::new()
                .attr(
                    "reduction",
                    Value::Str(format!("{reduction:?}").to_lowercase()),
                )
                .attr("ignore_index", Value::Int(ignore))
                .attr("label_smoothing", Value::F32(eps))
                .ints("targets", target_shape.to_vec(), targets.clone())
        });
        Ok(record_with(op, out, &[&x2], info, move || {
            let saved = Saved::new(op, &lp_t);
            move |g: &Tensor<B>| {
                let lp = saved.get()?;
                let b = g.backend();
                let mut p = b.uninit(rows * classes)?;
                lp.with_contiguous(|l| b.unary(UnaryOp::Exp, l, B::view_mut(&mut p)))??;
                let gv = g.to_vec()?;
                let p = B::storage_to_vec(&p)?;
                let mut dx = super::zeroed_vec(op, rows * classes)?;
                for i in 0..rows {
                    if targets[i] == ignore {
                        continue;
                    }
                    let w = match reduction {
                        Reduction::None => gv[i],
                        Reduction::Sum => gv[0],
                        Reduction::Mean => gv[0] / valid as f32,
                    };
                    let y = targets[i] as usize;
                    for c in 0..classes {
                        let t = if c == y { one_minus + eps_c } else { eps_c };
                        dx[i * classes + c] = canon(b.mode(), (p[i * classes + c] - t) * w);
                    }
                }
                Ok(vec![Some(Tensor::from_vec(b, dx, [rows, classes])?)])
            }
        }))
    }

    /// Mean squared error `(self − target)²`, reduced; `self` and `target` must have the
    /// same shape (PyTorch broadcasts with a warning; here a mismatch is an error).
    pub fn mse_loss(&self, target: &Tensor<B>, reduction: Reduction) -> Result<Tensor<B>> {
        let _public = crate::engine::PublicOp::new("mse_loss");
        if self.shape() != target.shape() {
            return Err(Error::mismatch(
                "mse_loss",
                self.dims(),
                target.dims(),
                "input and target must have the same shape",
            ));
        }
        let sq = self.sub(target)?.pow(2.0)?;
        match reduction {
            Reduction::None => Ok(sq),
            Reduction::Mean => sq.mean(),
            Reduction::Sum => sq.sum(),
        }
    }
}
