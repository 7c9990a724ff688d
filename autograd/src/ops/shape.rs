//! Views (reshape, transpose, permute, narrow/slice, expand, squeeze, unsqueeze, flatten)
//! that share storage, `contiguous`, and the copying `concat`/`stack`.

use super::sum_to;
use crate::engine::{record, record_with};
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::trace::{ints_of, OpInfo, Value};
use exactgrad_core::shape::normalize_dim;
use exactgrad_core::{Backend, Layout, Shape};
use std::sync::Arc;

/// A tensor sharing `x`'s storage under `layout` (unrecorded); fails when the layout
/// would address elements outside the storage or has too many elements.
fn view_of<B: Backend>(x: &Tensor<B>, layout: Layout) -> Result<Tensor<B>> {
    Tensor::from_parts(
        x.backend().clone(),
        Arc::clone(&x.inner.storage),
        layout,
        false,
        None,
    )
}

/// The error of a reshape or view to a shape with another element count.
fn reshape_error<B: Backend>(op: &'static str, x: &Tensor<B>, to: &[usize]) -> Error {
    Error::Core(exactgrad_core::Error::Reshape {
        op,
        from: x.dims().to_vec(),
        from_numel: x.numel(),
        to: to.iter().map(|&d| d as isize).collect(),
    })
}

/// Zeros of `shape` with `g` written into the elements that `region` (a layout over a
/// contiguous buffer of `shape`) selects: the backward of narrow/slice.
fn scatter_region<B: Backend>(g: &Tensor<B>, shape: &Shape, region: &Layout) -> Result<Tensor<B>> {
    super::new_zeroed(g.backend(), "slice", shape.clone(), |buf| {
        let values = g.with_host(|v| v.to_vec())?;
        B::with_host_mut(buf, |buf| {
            let rank = region.rank();
            if rank > 0 && region.strides[rank - 1] == 1 {
                // Unit stride along the last dimension: whole runs of it at a time.
                let run = region.shape[rank - 1];
                let outer = Layout {
                    shape: Shape::from(&region.shape[..rank - 1]),
                    strides: region.strides[..rank - 1].to_vec(),
                    offset: region.offset,
                };
                let mut i = 0;
                if run > 0 {
                    outer.for_each_index(|s| {
                        buf[s..s + run].copy_from_slice(&values[i..i + run]);
                        i += run;
                    });
                }
                return;
            }
            let mut i = 0;
            region.for_each_index(|s| {
                buf[s] = values[i];
                i += 1;
            });
        })?;
        Ok(())
    })
}

/// The product of `dims` (0 when any is 0), or an overflow error naming `op`.
fn product(op: &'static str, dims: &[usize]) -> Result<usize> {
    Shape::from(dims)
        .checked_numel()
        .ok_or_else(|| Error::overflow(op, "shape", format!("the product of {dims:?} overflows")))
}

impl<B: Backend> Tensor<B> {
    /// The shape `shape` with its one `-1` replaced by the size that keeps the element
    /// count (the rule of [`Tensor::reshape_infer`]).
    fn infer_shape(&self, op: &'static str, shape: &[isize]) -> Result<Shape> {
        let numel = self.numel();
        let mut infer = None;
        let mut known = 1usize;
        for (i, &d) in shape.iter().enumerate() {
            if d == -1 {
                if infer.replace(i).is_some() {
                    return Err(Error::invalid(
                        op,
                        "shape",
                        format!("exactly one dimension must be -1, got more than one in {shape:?}"),
                    ));
                }
            } else if d < 0 {
                return Err(Error::invalid(
                    op,
                    "shape",
                    format!("invalid dimension {d} in {shape:?} (sizes are ≥ 0, and one -1 is inferred)"),
                ));
            } else {
                known = known.checked_mul(d as usize).ok_or_else(|| {
                    Error::overflow(
                        op,
                        "shape",
                        format!("the product of the sizes in {shape:?} overflows"),
                    )
                })?;
            }
        }
        let Some(i) = infer else {
            return Err(Error::invalid(
                op,
                "shape",
                format!(
                    "exactly one dimension must be -1, got none in {shape:?}; use {} for explicit sizes",
                    op.trim_end_matches("_infer")
                ),
            ));
        };
        if known == 0 || !numel.is_multiple_of(known) {
            return Err(Error::Core(exactgrad_core::Error::Reshape {
                op,
                from: self.dims().to_vec(),
                from_numel: numel,
                to: shape.to_vec(),
            }));
        }
        let mut dims: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
        dims[i] = numel / known;
        Ok(Shape::from(dims))
    }

    /// Fails unless `self` can be viewed as `target` without a copy.
    fn check_view(&self, op: &'static str, target: &Shape) -> Result<()> {
        if target.numel() != self.numel() {
            return Err(reshape_error(op, self, target));
        }
        if self.layout().view_as(target).is_none() {
            return Err(Error::invalid(
                op,
                "shape",
                format!(
                    "a tensor of shape {:?} and strides {:?} cannot be viewed as {:?}; use reshape (which copies)",
                    self.dims(),
                    self.layout().strides,
                    target
                ),
            ));
        }
        Ok(())
    }

    /// This tensor with the dimensions `shape` (the same element count). A view when the
    /// strides allow it (PyTorch's rule), otherwise a copy. [`Tensor::reshape_infer`]
    /// infers one dimension from a `-1`.
    ///
    /// ```
    /// # use exactgrad_autograd::Tensor;
    /// # use exactgrad_backends::ScalarRefBackend;
    /// # let x = Tensor::zeros(&ScalarRefBackend, [2, 3]).unwrap();
    /// assert_eq!(x.reshape([3, 2]).unwrap().dims(), [3, 2]);
    /// assert_eq!(x.reshape_infer(&[-1, 2]).unwrap().dims(), [3, 2]);
    /// assert!(x.reshape_infer(&[-1, -1]).is_err()); // exactly one -1
    /// ```
    ///
    /// Sizes are `usize`: a `-1` here does not compile.
    ///
    /// ```compile_fail,E0277
    /// # use exactgrad_autograd::Tensor;
    /// # use exactgrad_backends::ScalarRefBackend;
    /// # let x = Tensor::zeros(&ScalarRefBackend, [2, 3]).unwrap();
    /// let y = x.reshape(&[-1, 2]);
    /// ```
    pub fn reshape(&self, shape: impl Into<Shape>) -> Result<Tensor<B>> {
        let shape = shape.into();
        if shape.numel() != self.numel() {
            return Err(reshape_error("reshape", self, &shape));
        }
        self.reshape_to(&shape)
    }

    /// [`Tensor::reshape`] with one dimension inferred: exactly one entry of `shape` is
    /// `-1`, the others are sizes (≥ 0), as PyTorch's `reshape(2, -1)`.
    pub fn reshape_infer(&self, shape: &[isize]) -> Result<Tensor<B>> {
        let shape = self.infer_shape("reshape_infer", shape)?;
        self.reshape_to(&shape)
    }

    /// Like [`Tensor::reshape`] but never copies: fails when the strides do not allow a
    /// view. [`Tensor::view_infer`] infers one dimension from a `-1`.
    pub fn view(&self, shape: impl Into<Shape>) -> Result<Tensor<B>> {
        let target = shape.into();
        self.check_view("view", &target)?;
        self.reshape_to(&target)
    }

    /// [`Tensor::view`] with one dimension inferred from the single `-1` of `shape`
    /// (the rule of [`Tensor::reshape_infer`]).
    pub fn view_infer(&self, shape: &[isize]) -> Result<Tensor<B>> {
        let target = self.infer_shape("view_infer", shape)?;
        self.check_view("view_infer", &target)?;
        self.reshape_to(&target)
    }

    /// Reshape to explicit dimensions (recorded).
    pub(crate) fn reshape_to(&self, dims: &[usize]) -> Result<Tensor<B>> {
        let shape = Shape::from(dims);
        if shape.numel() != self.numel() {
            return Err(reshape_error("reshape", self, dims));
        }
        if shape == *self.shape() {
            return Ok(self.clone());
        }
        let out = match self.layout().view_as(&shape) {
            Some(l) => view_of(self, l)?,
            None => {
                let c = self.copy_contiguous()?;
                view_of(&c, Layout::contiguous(shape))?
            }
        };
        let in_shape = self.dims().to_vec();
        Ok(record_with(
            "reshape",
            out,
            &[self],
            crate::trace::info(|| OpInfo::new().attr("shape", ints_of(dims))),
            move || move |g: &Tensor<B>| Ok(vec![Some(g.reshape_to(&in_shape)?)]),
        ))
    }

    /// Dimensions reordered: output dimension `i` is input dimension `dims[i]`.
    pub fn permute(&self, dims: &[isize]) -> Result<Tensor<B>> {
        let rank = self.rank();
        let perm: Vec<usize> = dims
            .iter()
            .map(|&d| normalize_dim("permute", d, rank))
            .collect::<Result<_, _>>()?;
        let layout = self.layout().permute("permute", &perm)?;
        let mut inverse = vec![0isize; rank];
        for (i, &p) in perm.iter().enumerate() {
            inverse[p] = i as isize;
        }
        Ok(record_with(
            "permute",
            view_of(self, layout)?,
            &[self],
            crate::trace::info(|| OpInfo::new().attr("dims", ints_of(&perm))),
            move || move |g: &Tensor<B>| Ok(vec![Some(g.permute(&inverse)?)]),
        ))
    }

    /// Swaps two dimensions.
    pub fn transpose(&self, dim0: isize, dim1: isize) -> Result<Tensor<B>> {
        let rank = self.rank();
        let (a, b) = (
            normalize_dim("transpose", dim0, rank)?,
            normalize_dim("transpose", dim1, rank)?,
        );
        let mut perm: Vec<isize> = (0..rank as isize).collect();
        perm.swap(a, b);
        self.permute(&perm)
    }

    /// The transpose of a matrix (rank ≤ 2; rank 0 and 1 are returned unchanged).
    pub fn t(&self) -> Result<Tensor<B>> {
        match self.rank() {
            0 | 1 => Ok(self.clone()),
            2 => self.transpose(0, 1),
            r => Err(Error::invalid(
                "t",
                "self",
                format!(
                    "expects a tensor of rank <= 2, got rank {r} (shape {:?}); use transpose",
                    self.dims()
                ),
            )),
        }
    }

    /// The `length` elements of dimension `dim` starting at `start` (a view).
    pub fn narrow(&self, dim: isize, start: usize, length: usize) -> Result<Tensor<B>> {
        let d = normalize_dim("narrow", dim, self.rank())?;
        let size = self.dims()[d];
        if start > size || length > size - start {
            return Err(Error::invalid(
                "narrow",
                "start/length",
                format!("start {start} + length {length} exceeds dimension {d} of size {size} (shape {:?})", self.dims()),
            ));
        }
        self.slice_range(d, start, start + length, 1)
    }

    /// Elements `start, start+step, …` below `end` along `dim` (a view). Negative `start`
    /// and `end` count from the end and both are clamped to the dimension, as Python
    /// slicing does; `step` must be positive.
    pub fn slice(&self, dim: isize, start: isize, end: isize, step: usize) -> Result<Tensor<B>> {
        let d = normalize_dim("slice", dim, self.rank())?;
        if step == 0 {
            return Err(Error::invalid("slice", "step", "must be positive"));
        }
        // Python's clamping, in unsigned arithmetic: an empty tensor may have a dimension
        // larger than `isize::MAX`.
        let size = self.dims()[d];
        let clamp = |v: isize| -> usize {
            if v < 0 {
                size.saturating_sub(v.unsigned_abs())
            } else {
                (v as usize).min(size)
            }
        };
        self.slice_range(d, clamp(start), clamp(end), step)
    }

    /// Elements `s, s+step, …` below `e` (both at most the size) of dimension `d`.
    fn slice_range(&self, d: usize, s: usize, e: usize, step: usize) -> Result<Tensor<B>> {
        let len = if e > s { (e - s).div_ceil(step) } else { 0 };
        let src = self.layout();
        let mut shape = src.shape.to_vec();
        shape[d] = len;
        let mut strides = src.strides.clone();
        // A step past the end leaves one element; its stride is never used then, and
        // otherwise the view's extent is checked (in checked arithmetic) by `view_of`.
        strides[d] = strides[d].saturating_mul(step);
        // A non-empty view lies inside the input, whose extent was checked: the offset
        // cannot overflow. An empty view keeps the input's offset.
        let empty = shape.contains(&0);
        let offset = if empty {
            src.offset
        } else {
            src.offset + s * src.strides[d]
        };
        let out = view_of(
            self,
            Layout {
                shape: shape.into(),
                strides,
                offset,
            },
        )?;
        let in_shape = self.shape().clone();
        let mut region = Layout::contiguous(in_shape.clone());
        region.offset = if empty {
            0
        } else {
            s.saturating_mul(region.strides[d])
        };
        region.strides[d] = region.strides[d].saturating_mul(step);
        let mut rshape = in_shape.to_vec();
        rshape[d] = len;
        region.shape = rshape.into();
        Ok(record_with(
            "slice",
            out,
            &[self],
            crate::trace::info(|| {
                OpInfo::new()
                    .attr("dim", Value::Int(d as i64))
                    .attr("start", Value::Int(s as i64))
                    .attr("end", Value::Int(e as i64))
                    .attr("step", Value::Int(step as i64))
            }),
            move || move |g: &Tensor<B>| Ok(vec![Some(scatter_region(g, &in_shape, &region)?)]),
        ))
    }

    /// This tensor broadcast to `shape` without copying (PyTorch's `expand`); the
    /// gradient is summed back over the broadcast dimensions.
    pub fn expand(&self, shape: &[usize]) -> Result<Tensor<B>> {
        if shape == self.dims() {
            return Ok(self.clone());
        }
        let layout = self.layout().broadcast_to("expand", shape)?;
        let in_shape = self.dims().to_vec();
        Ok(record_with(
            "expand",
            view_of(self, layout)?,
            &[self],
            crate::trace::info(|| OpInfo::new().attr("shape", ints_of(shape))),
            move || move |g: &Tensor<B>| Ok(vec![Some(sum_to(g, &in_shape)?)]),
        ))
    }

    /// Removes dimension `dim` if it has size 1; otherwise returns the tensor unchanged,
    /// as PyTorch does.
    pub fn squeeze(&self, dim: isize) -> Result<Tensor<B>> {
        let d = normalize_dim("squeeze", dim, self.rank())?;
        if self.dims()[d] != 1 {
            return Ok(self.clone());
        }
        let mut dims = self.dims().to_vec();
        dims.remove(d);
        self.reshape_to(&dims)
    }

    /// Removes every dimension of size 1.
    pub fn squeeze_all(&self) -> Result<Tensor<B>> {
        let dims: Vec<usize> = self.dims().iter().copied().filter(|&d| d != 1).collect();
        self.reshape_to(&dims)
    }

    /// Inserts a dimension of size 1 at `dim` (in `-(rank+1)..=rank`).
    pub fn unsqueeze(&self, dim: isize) -> Result<Tensor<B>> {
        let d = normalize_dim("unsqueeze", dim, self.rank() + 1)?;
        let mut dims = self.dims().to_vec();
        dims.insert(d, 1);
        self.reshape_to(&dims)
    }

    /// Merges dimensions `start..=end` into one (a view when the strides allow it).
    pub fn flatten(&self, start: isize, end: isize) -> Result<Tensor<B>> {
        let _public = crate::engine::PublicOp::new("flatten");
        if self.rank() == 0 {
            return self.reshape_to(&[1]);
        }
        let (s, e) = (
            normalize_dim("flatten", start, self.rank())?,
            normalize_dim("flatten", end, self.rank())?,
        );
        if s > e {
            return Err(Error::invalid(
                "flatten",
                "start/end",
                format!("start dimension {s} is after end dimension {e}"),
            ));
        }
        let d = self.dims();
        let mut dims = d[..s].to_vec();
        dims.push(product("flatten", &d[s..=e])?);
        dims.extend_from_slice(&d[e + 1..]);
        self.reshape_to(&dims)
    }

    /// A contiguous tensor with the same elements: `self` when already contiguous,
    /// otherwise a recorded copy (which fails when it cannot be allocated).
    pub fn contiguous(&self) -> Result<Tensor<B>> {
        if self.is_contiguous() {
            return Ok(self.clone());
        }
        let out = self.copy_contiguous()?;
        Ok(record("contiguous", out, &[self], || {
            |g: &Tensor<B>| Ok(vec![Some(g.clone())])
        }))
    }

    /// Joins tensors along `dim`; all must have the same rank and equal sizes elsewhere.
    pub fn concat(tensors: &[&Tensor<B>], dim: isize) -> Result<Tensor<B>> {
        let op = "concat";
        let first = tensors
            .first()
            .ok_or_else(|| Error::invalid(op, "tensors", "expects at least one tensor"))?;
        let rank = first.rank();
        if rank == 0 {
            return Err(Error::invalid(
                op,
                "tensors",
                "zero-dimensional tensors cannot be concatenated; use stack",
            ));
        }
        let d = normalize_dim(op, dim, rank)?;
        let mut total = 0;
        for t in tensors {
            if t.rank() != rank
                || t.dims()
                    .iter()
                    .enumerate()
                    .any(|(i, &s)| i != d && s != first.dims()[i])
            {
                return Err(Error::mismatch(
                    op,
                    first.dims(),
                    t.dims(),
                    format!("sizes must match except in dimension {d}"),
                ));
            }
            total = t.dims()[d].checked_add(total).ok_or_else(|| {
                Error::overflow(
                    op,
                    "tensors",
                    format!("the sizes along dimension {d} add up past usize"),
                )
            })?;
        }
        let mut shape = first.dims().to_vec();
        shape[d] = total;
        let shape = Shape::from(shape);
        let base = Layout::contiguous(shape.clone());
        let mut offsets = Vec::with_capacity(tensors.len());
        let out = super::new_zeroed(first.backend(), op, shape.clone(), |mut buf| {
            let mut off = 0usize;
            for t in tensors {
                offsets.push(off);
                let values = t.to_vec()?;
                let mut region = base.clone();
                region.offset = off.saturating_mul(base.strides[d]);
                let mut rs = shape.to_vec();
                rs[d] = t.dims()[d];
                region.shape = rs.into();
                B::with_host_mut(B::reborrow(&mut buf), |buf| {
                    let mut i = 0;
                    region.for_each_index(|s| {
                        buf[s] = values[i];
                        i += 1;
                    });
                })?;
                off += t.dims()[d];
            }
            Ok(())
        })?;
        let lens: Vec<usize> = tensors.iter().map(|t| t.dims()[d]).collect();
        let needs: Vec<bool> = tensors.iter().map(|t| t.is_requires_grad()).collect();
        Ok(record_with(
            op,
            out,
            tensors,
            crate::trace::info(|| OpInfo::new().attr("dim", Value::Int(d as i64))),
            move || {
                move |g: &Tensor<B>| {
                    lens.iter()
                        .zip(&offsets)
                        .zip(&needs)
                        .map(|((&len, &o), &need)| {
                            if need {
                                g.narrow(d as isize, o, len).map(Some)
                            } else {
                                Ok(None)
                            }
                        })
                        .collect()
                }
            },
        ))
    }

    /// Joins tensors of equal shape along a new dimension `dim`.
    pub fn stack(tensors: &[&Tensor<B>], dim: isize) -> Result<Tensor<B>> {
        let first = tensors
            .first()
            .ok_or_else(|| Error::invalid("stack", "tensors", "expects at least one tensor"))?;
        for t in tensors {
            if t.shape() != first.shape() {
                return Err(Error::mismatch(
                    "stack",
                    first.dims(),
                    t.dims(),
                    "all tensors must have the same shape",
                ));
            }
        }
        let d = normalize_dim("stack", dim, first.rank() + 1)? as isize;
        let expanded: Vec<Tensor<B>> = tensors
            .iter()
            .map(|t| t.unsqueeze(d))
            .collect::<Result<_>>()?;
        let refs: Vec<&Tensor<B>> = expanded.iter().collect();
        Tensor::concat(&refs, d)
    }
}
