//! Matrix products: `matmul` (2-D, batched with broadcast batch dimensions, and the 1-D
//! cases of PyTorch) and `linear`.

use crate::engine::{record_with, Saved};
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::trace::OpInfo;
use exactgrad_core::backend::MatmulSpec;
use exactgrad_core::{Backend, Layout, Shape};

/// Batch stride, row stride, column stride and offset of a `[batch…, r, c]` layout viewed
/// as `[B, r, c]`, if the batch dimensions collapse to one stride.
fn as_batched(l: &Layout) -> Option<(usize, [usize; 3])> {
    let rank = l.rank();
    let (rs, cs) = (l.strides[rank - 2], l.strides[rank - 1]);
    let batch_dims = &l.shape[..rank - 2];
    let batch_strides = &l.strides[..rank - 2];
    if batch_dims
        .iter()
        .zip(batch_strides)
        .all(|(&d, &s)| d == 1 || s == 0)
    {
        return Some((l.offset, [0, rs, cs]));
    }
    // The batch dimensions (ignoring size-1 ones) must nest: stride_i = stride_{i+1}·dim_{i+1}.
    let live: Vec<(usize, usize)> = batch_dims
        .iter()
        .zip(batch_strides)
        .filter(|(&d, _)| d != 1)
        .map(|(&d, &s)| (d, s))
        .collect();
    for w in live.windows(2) {
        if Some(w[0].1) != w[1].1.checked_mul(w[1].0) {
            return None;
        }
    }
    Some((l.offset, [live.last().map_or(0, |x| x.1), rs, cs]))
}

/// The sizes and strides of the last two dimensions of a layout of rank ≥ 2.
fn last_strides(l: &Layout) -> [usize; 4] {
    let r = l.rank();
    [
        l.shape[r - 2],
        l.shape[r - 1],
        l.strides[r - 2],
        l.strides[r - 1],
    ]
}

/// Whether the last two dimensions `[r, c, rs, cs]` are a transposed view of row-major
/// storage (column-major: rows adjacent, columns apart), with more than one row and
/// column.
fn transposed([r, c, rs, cs]: [usize; 4]) -> bool {
    r > 1 && c > 1 && rs == 1 && cs != 1
}

/// `a · b` for `a: [batch…, m, k]`, `b: [batch…, k, n]` with identical batch dimensions,
/// recorded with its backward rule.
fn bmm<B: Backend>(a: &Tensor<B>, b: &Tensor<B>) -> Result<Tensor<B>> {
    let rank = a.rank();
    let (m, k, n) = (a.dims()[rank - 2], a.dims()[rank - 1], b.dims()[rank - 1]);
    let batch_dims = &a.dims()[..rank - 2];
    let batch = Shape::from(batch_dims).numel_for("matmul")?;
    let mut out_shape = batch_dims.to_vec();
    out_shape.extend([m, n]);
    let out_shape = Shape::from(out_shape);
    let out_numel = out_shape.numel_for("matmul")?;
    let be = a.backend();
    // Operands whose batch dimensions do not collapse to one stride are copied first
    // (a contiguous copy always collapses).
    let collapse = |t: &Tensor<B>| -> Result<(Tensor<B>, usize, [usize; 3])> {
        if let Some((o, s)) = as_batched(t.layout()) {
            return Ok((t.clone(), o, s));
        }
        let c = t.copy_contiguous()?;
        let (o, s) = as_batched(c.layout()).ok_or_else(|| {
            Error::invalid(
                "matmul",
                "operand",
                "a contiguous copy did not collapse its batch dimensions",
            )
        })?;
        Ok((c, o, s))
    };
    let (a_use, a_offset, a_strides) = collapse(a)?;
    let (b_use, b_offset, b_strides) = collapse(b)?;
    let spec = MatmulSpec {
        batch,
        m,
        k,
        n,
        a_offset,
        a_strides,
        b_offset,
        b_strides,
    };
    // Every output is written by the product (an accumulator from +0 each), so the
    // buffer needs no zeros first.
    let out = super::new_tensor(be, "matmul", out_shape, |out| {
        if out_numel > 0 {
            let (da, db) = (a_use.read()?, b_use.read()?);
            be.matmul(&spec, da.as_ref(), db.as_ref(), out)?;
        }
        Ok(())
    })?;
    let (need_a, need_b) = (a.is_requires_grad(), b.is_requires_grad());
    let (a_layout_t, b_layout_t) = (last_strides(a.layout()), last_strides(b.layout()));
    let (a_keep, b_keep) = (a.clone(), b.clone());
    let info = crate::trace::info(|| OpInfo::new().names(&["a", "b"]));
    Ok(record_with("matmul", out, &[a, b], info, move || {
        let (a, b) = (a_keep, b_keep);
        let sa = need_b.then(|| Saved::new("matmul", &a));
        let sb = need_a.then(|| Saved::new("matmul", &b));
        move |g: &Tensor<B>| {
            // A gradient is computed in its operand's orientation: for an operand that is
            // a transposed view (`weight.t()` in `linear`) as the transposed product, so
            // that the view's backward turns it back into a row-major tensor instead of a
            // transposed one that must be copied. Each element is the same sum over the
            // same index in the same order (the factors of each product swapped, which
            // changes no bit), so the result is the same.
            let ga = match &sb {
                Some(sb) if transposed(a_layout_t) => {
                    Some(bmm(sb.get()?, &g.transpose(-1, -2)?)?.transpose(-1, -2)?)
                }
                Some(sb) => Some(bmm(g, &sb.get()?.transpose(-1, -2)?)?),
                None => None,
            };
            let gb = match &sa {
                Some(sa) if transposed(b_layout_t) => {
                    Some(bmm(&g.transpose(-1, -2)?, sa.get()?)?.transpose(-1, -2)?)
                }
                Some(sa) => Some(bmm(&sa.get()?.transpose(-1, -2)?, g)?),
                None => None,
            };
            Ok(vec![ga, gb])
        }
    }))
}

impl<B: Backend> Tensor<B> {
    /// The matrix product with PyTorch's `matmul` rules: 1-D operands are promoted to a
    /// row (left) or column (right) and the added dimension removed afterwards; batch
    /// dimensions broadcast. A stack of matrices times one matrix is computed as a single
    /// product with the batch folded into the rows.
    pub fn matmul(&self, other: &Tensor<B>) -> Result<Tensor<B>> {
        let op = "matmul";
        let (ra, rb) = (self.rank(), other.rank());
        if ra == 0 || rb == 0 {
            return Err(Error::mismatch(
                op,
                self.dims(),
                other.dims(),
                "both operands need at least one dimension",
            ));
        }
        // Validate on the shapes as given, so errors name them.
        let ka = self.dims()[ra - 1];
        let kb = other.dims()[rb.saturating_sub(2)];
        if ka != kb {
            return Err(Error::mismatch(
                op,
                self.dims(),
                other.dims(),
                format!("the contracted dimensions differ ({ka} and {kb})"),
            ));
        }
        if ra > 2
            && rb > 2
            && Shape::broadcast(op, &self.dims()[..ra - 2], &other.dims()[..rb - 2]).is_err()
        {
            return Err(Error::mismatch(
                op,
                self.dims(),
                other.dims(),
                "the batch dimensions cannot be broadcast together",
            ));
        }
        if ra == 1 {
            let r = self.unsqueeze(0)?.matmul(other)?;
            let d = r.rank().saturating_sub(2);
            return r.squeeze(d as isize);
        }
        if rb == 1 {
            let r = self.matmul(&other.unsqueeze(1)?)?;
            return r.squeeze(-1);
        }
        let (m, k) = (self.dims()[ra - 2], self.dims()[ra - 1]);
        let (k2, n) = (other.dims()[rb - 2], other.dims()[rb - 1]);
        if k != k2 {
            return Err(Error::mismatch(
                op,
                self.dims(),
                other.dims(),
                format!("the last dimension of the left operand ({k}) must equal the second-to-last of the right ({k2})"),
            ));
        }
        if rb == 2 && ra > 2 {
            let rows = Shape::from(&self.dims()[..ra - 1]).numel_for(op)?;
            let folded = self.reshape_to(&[rows, k])?;
            let mut out_shape = self.dims()[..ra - 1].to_vec();
            out_shape.push(n);
            return bmm(&folded, other)?.reshape_to(&out_shape);
        }
        let batch = Shape::broadcast(op, &self.dims()[..ra - 2], &other.dims()[..rb - 2])?;
        let mut sa = batch.to_vec();
        sa.extend([m, k]);
        let mut sb = batch.to_vec();
        sb.extend([k, n]);
        bmm(&self.expand(&sa)?, &other.expand(&sb)?)
    }

    /// `x · weightᵀ + bias` for `x: […, in]`, `weight: [out, in]`, `bias: [out]`
    /// (PyTorch's `nn.functional.linear`).
    pub fn linear(&self, weight: &Tensor<B>, bias: Option<&Tensor<B>>) -> Result<Tensor<B>> {
        let _public = crate::engine::PublicOp::new("linear");
        let op = "linear";
        if weight.rank() == 1 {
            // A single output feature without its dimension, as PyTorch allows.
            let in_f = weight.dims()[0];
            if self.rank() == 0 || self.dims()[self.rank() - 1] != in_f {
                return Err(Error::mismatch(
                    op,
                    self.dims(),
                    weight.dims(),
                    format!("the input's last dimension must equal in_features = {in_f}"),
                ));
            }
            let y = self.matmul(weight)?;
            return match bias {
                None => Ok(y),
                Some(b) if b.rank() == 0 => y.add(b),
                Some(b) => Err(Error::mismatch(
                    op,
                    b.dims(),
                    weight.dims(),
                    "with a 1-D weight the bias must be 0-dimensional",
                )),
            };
        }
        if weight.rank() != 2 {
            return Err(Error::invalid(
                op,
                "weight",
                format!(
                    "must be 1-D or 2-D [out, in], got shape {:?}",
                    weight.dims()
                ),
            ));
        }
        let (out_f, in_f) = (weight.dims()[0], weight.dims()[1]);
        if self.rank() == 0 || self.dims()[self.rank() - 1] != in_f {
            return Err(Error::mismatch(
                op,
                self.dims(),
                weight.dims(),
                format!("the input's last dimension must equal in_features = {in_f}"),
            ));
        }
        let y = self.matmul(&weight.t()?)?;
        match bias {
            None => Ok(y),
            Some(b) => {
                if b.dims() != [out_f] {
                    return Err(Error::mismatch(
                        op,
                        b.dims(),
                        weight.dims(),
                        format!("bias must have shape [{out_f}]"),
                    ));
                }
                y.add(b)
            }
        }
    }
}
