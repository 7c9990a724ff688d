//! Constant padding (`pad`, PyTorch's `F.pad(mode="constant")`) and its backward rule
//! (`docs/conv.md` §3); the unrecorded `pad_forward` also builds the zero-padded im2col
//! source of the convolutions.

use crate::engine::record_with;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::trace::{OpInfo, Value};
use exactgrad_core::{Backend, Layout, Shape, ViewLen};

// ----- pad -------------------------------------------------------------------------------

/// `x` with `before[i]` and `after[i]` elements of `value` added around dimension `i`
/// (unrecorded, contiguous; the elements of `x` are copied bit for bit).
pub(super) fn pad_forward<B: Backend>(
    op: &'static str,
    x: &Tensor<B>,
    before: &[usize],
    after: &[usize],
    value: f32,
) -> Result<Tensor<B>> {
    let dims = x.dims();
    let rank = dims.len();
    let out_dims = (0..rank)
        .map(|i| {
            dims[i]
                .checked_add(before[i])
                .and_then(|d| d.checked_add(after[i]))
                .ok_or_else(|| {
                    Error::overflow(
                        op,
                        "padding",
                        format!(
                            "dimension {i} of size {} padded by {} and {} overflows usize",
                            dims[i], before[i], after[i]
                        ),
                    )
                })
        })
        .collect::<Result<Vec<usize>>>()?;
    let out_shape = Shape::from(out_dims);
    // The output's element count is checked (and its memory obtained) before the
    // input's elements are read; every index below is then inside the output.
    let xs = if x.numel() > 0 {
        x.to_vec()?
    } else {
        Vec::new()
    };
    super::new_tensor(x.backend(), op, out_shape.clone(), |buf| {
        B::with_host_mut(buf, |buf| {
            buf.fill(value);
            if xs.is_empty() {
                return;
            }
            if rank == 0 {
                buf[0] = xs[0];
                return;
            }
            let ostrides = out_shape.contiguous_strides();
            let len = dims[rank - 1];
            let mut idx = vec![0usize; rank - 1];
            for row in xs.chunks_exact(len) {
                let mut dst = before[rank - 1];
                for d in 0..rank - 1 {
                    dst += (idx[d] + before[d]) * ostrides[d];
                }
                buf[dst..dst + len].copy_from_slice(row);
                for d in (0..rank - 1).rev() {
                    idx[d] += 1;
                    if idx[d] < dims[d] {
                        break;
                    }
                    idx[d] = 0;
                }
            }
        })?;
        Ok(())
    })
}

// ----- the operator ----------------------------------------------------------------------

impl<B: Backend> Tensor<B> {
    /// Constant padding (PyTorch's `F.pad(x, pads, value=value)`): `pads` lists
    /// `(before, after)` pairs starting with the last dimension, then the one before it,
    /// …; at most `2·rank` entries, an even number. Backward takes the interior of the
    /// gradient.
    pub fn pad(&self, pads: &[usize], value: f32) -> Result<Tensor<B>> {
        let op = "pad";
        let rank = self.rank();
        if !pads.len().is_multiple_of(2) {
            return Err(Error::invalid(
                op,
                "pads",
                format!(
                    "must have an even length ((before, after) pairs), got {} values {pads:?}",
                    pads.len()
                ),
            ));
        }
        if pads.len() > 2 * rank {
            return Err(Error::invalid(
                op,
                "pads",
                format!(
                    "{} values {pads:?} pad more dimensions than the input of shape {:?} has (at most {})",
                    pads.len(),
                    self.dims(),
                    2 * rank
                ),
            ));
        }
        let mut before = vec![0usize; rank];
        let mut after = vec![0usize; rank];
        for (i, pair) in pads.chunks_exact(2).enumerate() {
            before[rank - 1 - i] = pair[0];
            after[rank - 1 - i] = pair[1];
        }
        let y = pad_forward(op, self, &before, &after, value)?;
        let in_dims = self.dims().to_vec();
        let info = crate::trace::info(|| {
            OpInfo::new()
                .attr(
                    "pads",
                    Value::Ints(pads.iter().map(|&p| p as i64).collect()),
                )
                .attr("value", Value::F32(value))
        });
        Ok(record_with(op, y, &[self], info, move || {
            move |gy: &Tensor<B>| {
                let l = gy.layout();
                let interior = Layout {
                    shape: Shape::from(in_dims.clone()),
                    strides: l.strides.clone(),
                    offset: l.offset
                        + before
                            .iter()
                            .zip(&l.strides)
                            .map(|(b, s)| b * s)
                            .sum::<usize>(),
                };
                let be = gy.backend();
                let gx = super::new_tensor(be, op, interior.shape.clone(), |out| {
                    if !out.is_empty() {
                        let d = gy.read()?;
                        be.copy_strided(d.as_ref(), &interior, out)?;
                    }
                    Ok(())
                })?;
                Ok(vec![Some(gx)])
            }
        }))
    }
}
