//! Integer data (indices, class labels) and the operators that read or produce it:
//! [`Tensor::gather`], [`Tensor::one_hot`], [`Tensor::argmax`], [`Tensor::argmin`]; and
//! [`Tensor::masked_fill`], whose mask is a tensor like [`Tensor::where_cond`]'s.
//!
//! Every operator that takes integers takes `&I` with `I: `[`Indices`]: an `i64` slice,
//! array or vector (1-D), a `(values, shape)` pair of them, or an *index tensor* — a
//! [`Tensor`] of whole numbers, which is how integers pass through a module's
//! `forward(&Tensor)` ([`Tensor::from_indices`] makes one, [`Tensor::to_indices`] reads
//! one). `docs/api.md` ("Integer data") says why.
//!
//! Arithmetic: gather copies bits; its backward adds the gradient of every output
//! position into the input element it was read from, in f64, in increasing position
//! order, and rounds once (Σ64, as embedding's). `one_hot`, `argmax` and `argmin` have
//! no gradient; their outputs are constants.

use super::canon;
use crate::engine::{record_with, PublicOp};
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::trace::{Kind, OpInfo, Value};
use exactgrad_core::shape::normalize_dim;
use exactgrad_core::{Backend, Shape};

/// The largest magnitude an index tensor holds exactly: f32 represents every integer of
/// magnitude up to 2²⁴ = 16,777,216, and not every one above.
pub const MAX_TENSOR_INDEX: i64 = 1 << 24;

/// Integer data for an operator: the integers in row-major order and their shape.
///
/// Implemented for `[i64]`, `[i64; N]` and `Vec<i64>` (1-D, shape `[len]`), for a pair
/// `(values, shape)` of those and a `[usize]` shape (any shape), and for [`Tensor`]
/// holding whole numbers (an index tensor; its shape). Reading an index tensor fails on an
/// element that is not a whole number or exceeds [`MAX_TENSOR_INDEX`] in magnitude, so an
/// index is never silently rounded to another row.
pub trait Indices {
    /// The integers (row-major) and their shape; `op` names the operator in errors.
    fn read_indices(&self, op: &'static str) -> Result<(Vec<i64>, Vec<usize>)>;
}

impl Indices for [i64] {
    fn read_indices(&self, op: &'static str) -> Result<(Vec<i64>, Vec<usize>)> {
        let mut v = exactgrad_core::backend::try_vec_with_capacity(op, self.len())?;
        v.extend_from_slice(self);
        Ok((v, vec![self.len()]))
    }
}

impl<const N: usize> Indices for [i64; N] {
    fn read_indices(&self, op: &'static str) -> Result<(Vec<i64>, Vec<usize>)> {
        self.as_slice().read_indices(op)
    }
}

impl Indices for Vec<i64> {
    fn read_indices(&self, op: &'static str) -> Result<(Vec<i64>, Vec<usize>)> {
        self.as_slice().read_indices(op)
    }
}

impl<V: AsRef<[i64]>, S: AsRef<[usize]>> Indices for (V, S) {
    fn read_indices(&self, op: &'static str) -> Result<(Vec<i64>, Vec<usize>)> {
        let (values, shape) = (self.0.as_ref(), self.1.as_ref());
        let n = Shape::from(shape).numel_for(op)?;
        if n != values.len() {
            return Err(Error::invalid(
                op,
                "indices",
                format!(
                    "{} values given for the shape {shape:?} ({n} elements)",
                    values.len()
                ),
            ));
        }
        let (v, _) = values.read_indices(op)?;
        Ok((v, shape.to_vec()))
    }
}

impl<B: Backend> Indices for Tensor<B> {
    fn read_indices(&self, op: &'static str) -> Result<(Vec<i64>, Vec<usize>)> {
        let values = self.to_vec()?;
        let mut out = exactgrad_core::backend::try_vec_with_capacity(op, values.len())?;
        for (p, &x) in values.iter().enumerate() {
            if !(x.fract() == 0.0 && x.abs() <= MAX_TENSOR_INDEX as f32) {
                return Err(Error::invalid(
                    op,
                    "indices",
                    format!(
                        "element {p} of the index tensor is {x}, not a whole number of magnitude at most 2^24 = {MAX_TENSOR_INDEX} (the largest an f32 holds exactly); pass larger indices as i64"
                    ),
                ));
            }
            out.push(x as i64);
        }
        Ok((out, self.dims().to_vec()))
    }
}

/// Row-major strides of `dims`.
fn strides_of(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; dims.len()];
    for k in (0..dims.len().saturating_sub(1)).rev() {
        s[k] = s[k + 1] * dims[k + 1];
    }
    s
}

/// Gathers `x` along `d` at `index` (validated: same rank as `x`, sizes within `x`'s
/// except along `d`, values in `[0, x.dims()[d])`) of shape `ishape`, recorded.
pub(crate) fn gather_checked<B: Backend>(
    x: &Tensor<B>,
    d: usize,
    index: Vec<i64>,
    ishape: Vec<usize>,
) -> Result<Tensor<B>> {
    let op = "gather";
    let in_dims = x.dims().to_vec();
    let in_strides = strides_of(&in_dims);
    let n = index.len();
    // The input element each output position reads, row-major over the index's shape.
    let mut src = super::try_vec(op, n, |_| 0usize)?;
    let mut coord = vec![0usize; ishape.len()];
    for (p, s) in src.iter_mut().enumerate() {
        *s = coord
            .iter()
            .enumerate()
            .map(|(k, &c)| if k == d { index[p] as usize } else { c } * in_strides[k])
            .sum();
        for k in (0..coord.len()).rev() {
            coord[k] += 1;
            if coord[k] < ishape[k] {
                break;
            }
            coord[k] = 0;
        }
    }
    let mut out = super::zeroed_vec(op, n)?;
    if n > 0 {
        x.with_host(|xs| {
            for (o, &s) in out.iter_mut().zip(&src) {
                *o = xs[s];
            }
        })?;
    }
    let out = Tensor::from_op_vec(x.backend(), out, ishape.clone())?;
    let info = crate::trace::info(|| {
        OpInfo::new()
            .attr("dim", Value::Int(d as i64))
            .ints("index", ishape.clone(), index.clone())
    });
    let in_numel = x.numel();
    Ok(record_with(op, out, &[x], info, move || {
        move |g: &Tensor<B>| {
            let b = g.backend();
            let mode = b.mode();
            let mut acc = super::try_vec(op, in_numel, |_| 0.0f64)?;
            if n > 0 {
                g.with_host(|gs| {
                    for (&s, &v) in src.iter().zip(gs) {
                        acc[s] += f64::from(v);
                    }
                })?;
            }
            let grad = super::try_vec(op, in_numel, |i| canon(mode, acc[i] as f32))?;
            Ok(vec![Some(Tensor::from_vec(b, grad, in_dims.clone())?)])
        }
    }))
}

/// The position of the largest (`max`) or smallest element along `d` of `x`: the first
/// one on ties, the first NaN if any (PyTorch's `argmax`/`argmin`).
fn arg_extreme<B: Backend>(
    x: &Tensor<B>,
    op: &'static str,
    dim: isize,
    keepdim: bool,
    max: bool,
) -> Result<Tensor<B>> {
    let rank = x.rank();
    let d = normalize_dim(op, dim, rank.max(1))?;
    let dims: Vec<usize> = if rank == 0 {
        vec![1]
    } else {
        x.dims().to_vec()
    };
    let size = dims[d];
    if size == 0 {
        return Err(Error::invalid(
            op,
            "self",
            format!(
                "cannot take the {op} of an empty dimension ({d} of shape {:?})",
                x.dims()
            ),
        ));
    }
    let outer: usize = dims[..d].iter().product();
    let inner: usize = dims[d + 1..].iter().product();
    let mut out = super::zeroed_vec(op, outer * inner)?;
    x.with_host(|xs| {
        for o in 0..outer {
            for i in 0..inner {
                let at = |j: usize| xs[(o * size + j) * inner + i];
                let mut best = 0usize;
                for j in 1..size {
                    let (v, b) = (at(j), at(best));
                    if b.is_nan() {
                        break;
                    }
                    if v.is_nan() || (max && v > b) || (!max && v < b) {
                        best = j;
                    }
                }
                out[o * inner + i] = best as f32;
            }
        }
    })?;
    let mut shape = x.dims().to_vec();
    if rank > 0 {
        if keepdim {
            shape[d] = 1;
        } else {
            shape.remove(d);
        }
    }
    let out = Tensor::from_op_vec(x.backend(), out, shape)?;
    let mut rec = crate::trace::record(Kind::Forward, op)
        .attr("dim", Value::Int(d as i64))
        .attr("keepdim", Value::Bool(keepdim));
    rec.input("input", x).output("output", &out);
    rec.write();
    Ok(out)
}

impl<B: Backend> Tensor<B> {
    /// An index tensor holding `indices` (row-major) with the given shape: whole numbers
    /// in f32, the way integers pass through [`Tensor`]-typed interfaces such as a
    /// module's `forward` (an `Embedding` at the start of a `Sequential`). Operators that
    /// take [`Indices`] read it back exactly.
    ///
    /// Fails when the count differs from the shape's or an index exceeds
    /// [`MAX_TENSOR_INDEX`] in magnitude (f32 would round it to another integer).
    pub fn from_indices(backend: &B, indices: &[i64], shape: impl Into<Shape>) -> Result<Self> {
        let op = "from_indices";
        let shape = shape.into();
        let n = shape.numel_for(op)?;
        if n != indices.len() {
            return Err(Error::invalid(
                op,
                "indices",
                format!(
                    "{} indices given for the shape {shape:?} ({n} elements)",
                    indices.len()
                ),
            ));
        }
        if let Some((p, &i)) = indices
            .iter()
            .enumerate()
            .find(|(_, i)| i.abs() > MAX_TENSOR_INDEX)
        {
            return Err(Error::invalid(
                op,
                "indices",
                format!(
                    "index {i} at position {p} exceeds 2^24 = {MAX_TENSOR_INDEX} in magnitude, beyond which f32 does not hold every integer; pass it as i64 (&[i64], Vec<i64>) to the operator instead"
                ),
            ));
        }
        let mut v = exactgrad_core::backend::try_vec_with_capacity(op, indices.len())?;
        v.extend(indices.iter().map(|&i| i as f32));
        Tensor::from_vec(backend, v, shape)
    }

    /// The elements of an index tensor as `i64`, row-major (the inverse of
    /// [`Tensor::from_indices`]; `argmax`'s result as integers). Fails on an element that
    /// is not a whole number of magnitude at most [`MAX_TENSOR_INDEX`].
    pub fn to_indices(&self) -> Result<Vec<i64>> {
        Ok(self.read_indices("to_indices")?.0)
    }

    /// Picks along `dim` at `index` (PyTorch's `torch.gather(input, dim, index)`): the
    /// output has the index's shape and `out[i][j][k] = self[index[i][j][k]][j][k]` for
    /// `dim = 0` (likewise for the other dimensions). The index has as many dimensions as
    /// `self`, sizes at most `self`'s in every dimension but `dim`, and values in
    /// `[0, size of dim)`.
    ///
    /// The gradient adds (Σ64, increasing output position) each output gradient into the
    /// element it was read from, zeros elsewhere (PyTorch's `scatter_add` into zeros).
    /// Fails, naming the offending dimension or position, on a wrong rank, a size that
    /// exceeds `self`'s, an index out of range or a 0-d `self`.
    ///
    /// ```
    /// # use exactgrad_autograd::Tensor;
    /// # use exactgrad_backends::ScalarRefBackend;
    /// # fn main() -> exactgrad_autograd::Result<()> {
    /// let b = ScalarRefBackend;
    /// let x = Tensor::from_vec(&b, vec![1.0, 2.0, 3.0, 4.0], [2, 2])?;
    /// let y = x.gather(1, &(vec![1i64, 0], [2, 1]))?; // one pick per row
    /// assert_eq!(y.to_vec()?, [2.0, 3.0]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn gather<I: Indices + ?Sized>(&self, dim: isize, index: &I) -> Result<Tensor<B>> {
        let op = "gather";
        let _public = PublicOp::new(op);
        let (idx, ishape) = index.read_indices(op)?;
        let rank = self.rank();
        if rank == 0 {
            return Err(Error::invalid(
                op,
                "self",
                "expects a tensor with at least one dimension",
            ));
        }
        let d = normalize_dim(op, dim, rank)?;
        if ishape.len() != rank {
            return Err(Error::invalid(
                op,
                "index",
                format!(
                    "the index has shape {ishape:?} ({} dimensions) and the input {:?} ({rank}): they must have the same number of dimensions",
                    ishape.len(),
                    self.dims()
                ),
            ));
        }
        for (k, (&i, &s)) in ishape.iter().zip(self.dims()).enumerate() {
            if k != d && i > s {
                return Err(Error::invalid(
                    op,
                    "index",
                    format!(
                        "size {i} of dimension {k} of the index (shape {ishape:?}) exceeds the input's {s} (shape {:?})",
                        self.dims()
                    ),
                ));
            }
        }
        let size = self.dims()[d];
        if let Some((p, &i)) = idx
            .iter()
            .enumerate()
            .find(|(_, &i)| i < 0 || i as u64 >= size as u64)
        {
            return Err(Error::invalid(
                op,
                "index",
                format!(
                    "index {i} at position {p} is out of range for dimension {d} of size {size}"
                ),
            ));
        }
        gather_checked(self, d, idx, ishape)
    }

    /// One-hot rows of `labels` (PyTorch's `F.one_hot(labels, num_classes)`): a tensor of
    /// shape `labels' shape + [num_classes]` with 1 at each label's class and 0 elsewhere,
    /// a constant (no gradient). Fails with [`Error::InvalidLabel`] on a label outside
    /// `[0, num_classes)`.
    ///
    /// ```
    /// # use exactgrad_autograd::Tensor;
    /// # use exactgrad_backends::ScalarRefBackend;
    /// # fn main() -> exactgrad_autograd::Result<()> {
    /// let y = Tensor::one_hot(&ScalarRefBackend, &[2, 0], 3)?;
    /// assert_eq!((y.dims(), y.to_vec()?), (&[2, 3][..], vec![0., 0., 1., 1., 0., 0.]));
    /// # Ok(())
    /// # }
    /// ```
    pub fn one_hot<I: Indices + ?Sized>(
        backend: &B,
        labels: &I,
        num_classes: usize,
    ) -> Result<Tensor<B>> {
        let op = "one_hot";
        let (values, mut shape) = labels.read_indices(op)?;
        for (index, &label) in values.iter().enumerate() {
            if label < 0 || label as u64 >= num_classes as u64 {
                return Err(Error::InvalidLabel {
                    op,
                    label,
                    index,
                    classes: num_classes,
                });
            }
        }
        let label_shape = shape.clone();
        shape.push(num_classes);
        let n = Shape::from(shape.as_slice()).numel_for(op)?;
        let mut v = super::zeroed_vec(op, n)?;
        for (p, &label) in values.iter().enumerate() {
            v[p * num_classes + label as usize] = 1.0;
        }
        let out = Tensor::from_vec(backend, v, shape)?;
        let mut rec = crate::trace::record(Kind::Forward, op)
            .attr("num_classes", Value::Int(num_classes as i64));
        rec.ints("labels", &label_shape, &values, false)
            .output("output", &out);
        rec.write();
        Ok(out)
    }

    /// The index of the largest element along `dim` (PyTorch's `argmax(dim, keepdim)`),
    /// as an index tensor ([`Tensor::to_indices`] gives the `i64`s): the first on ties,
    /// the first NaN if there is one. `keepdim` keeps `dim` with size 1. A constant (no
    /// gradient). Fails on an empty dimension or a dimension out of range.
    pub fn argmax(&self, dim: isize, keepdim: bool) -> Result<Tensor<B>> {
        arg_extreme(self, "argmax", dim, keepdim, true)
    }

    /// The index of the smallest element along `dim` (PyTorch's `argmin(dim, keepdim)`),
    /// as [`Tensor::argmax`].
    pub fn argmin(&self, dim: isize, keepdim: bool) -> Result<Tensor<B>> {
        arg_extreme(self, "argmin", dim, keepdim, false)
    }

    /// `value` where `mask` is non-zero, `self` elsewhere (PyTorch's
    /// `masked_fill(mask, value)`, the mask as a tensor as in [`Tensor::where_cond`]). The
    /// mask broadcasts to `self`'s shape, which is the output's; `self` receives the
    /// gradient where the mask is zero. Recorded as `where_cond` with a 0-d constant.
    /// Fails when the mask does not broadcast to `self`'s shape.
    pub fn masked_fill(&self, mask: &Tensor<B>, value: f32) -> Result<Tensor<B>> {
        let op = "masked_fill";
        let _public = PublicOp::new(op);
        let shape = Shape::broadcast(op, mask.dims(), self.dims())?;
        if shape.dims() != self.dims() {
            return Err(Error::invalid(
                op,
                "mask",
                format!(
                    "a mask of shape {:?} does not broadcast to the input's shape {:?}",
                    mask.dims(),
                    self.dims()
                ),
            ));
        }
        let fill = Tensor::scalar(self.backend(), value)?;
        Tensor::where_cond(mask, &fill, self)
    }
}
