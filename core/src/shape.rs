//! Shapes and strided layouts.

use crate::error::{Error, Result};
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;
use core::ops::Deref;

/// The extent of each dimension of a tensor, outermost first. A rank-0 shape is a scalar.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Shape(Vec<usize>);

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl Deref for Shape {
    type Target = [usize];
    fn deref(&self) -> &[usize] {
        &self.0
    }
}

impl From<Vec<usize>> for Shape {
    fn from(v: Vec<usize>) -> Self {
        Shape(v)
    }
}

impl From<&[usize]> for Shape {
    fn from(v: &[usize]) -> Self {
        Shape(v.to_vec())
    }
}

impl<const N: usize> From<[usize; N]> for Shape {
    fn from(v: [usize; N]) -> Self {
        Shape(v.to_vec())
    }
}

impl<const N: usize> From<&[usize; N]> for Shape {
    fn from(v: &[usize; N]) -> Self {
        Shape(v.to_vec())
    }
}

impl From<&Vec<usize>> for Shape {
    fn from(v: &Vec<usize>) -> Self {
        Shape(v.clone())
    }
}

impl From<&Shape> for Shape {
    fn from(v: &Shape) -> Self {
        v.clone()
    }
}

impl From<()> for Shape {
    fn from(_: ()) -> Self {
        Shape(Vec::new())
    }
}

impl Shape {
    /// A shape from its dimensions.
    pub fn new(dims: impl Into<Vec<usize>>) -> Self {
        Shape(dims.into())
    }

    /// The rank-0 (scalar) shape.
    pub fn scalar() -> Self {
        Shape(Vec::new())
    }

    /// The dimensions as a slice.
    pub fn dims(&self) -> &[usize] {
        &self.0
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.0.len()
    }

    /// Number of elements (1 for a scalar), saturating at `usize::MAX` when the product
    /// overflows. Every tensor's shape has passed [`Shape::checked_numel`] (its count is at
    /// most [`MAX_ELEMENTS`]), so for them this is exact; use `checked_numel` on a shape
    /// that came from a caller.
    pub fn numel(&self) -> usize {
        self.checked_numel().unwrap_or(usize::MAX)
    }

    /// Number of elements, or `None` when the product of the dimensions overflows `usize`.
    /// A shape with a zero dimension has 0 elements even if the other dimensions'
    /// product would overflow.
    pub fn checked_numel(&self) -> Option<usize> {
        if self.0.contains(&0) {
            return Some(0);
        }
        self.0.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
    }

    /// The element count, or an error naming `op` when it overflows or exceeds
    /// [`MAX_ELEMENTS`].
    pub fn numel_for(&self, op: &'static str) -> Result<usize> {
        match self.checked_numel() {
            Some(n) if n <= MAX_ELEMENTS => Ok(n),
            _ => Err(Error::TooLarge {
                op,
                dims: self.0.clone(),
                limit: MAX_ELEMENTS,
            }),
        }
    }

    /// Row-major strides of a contiguous tensor of this shape. A stride whose product
    /// overflows saturates at `usize::MAX`; that only happens for shapes with a zero
    /// dimension (no element is ever addressed) or shapes that fail
    /// [`Shape::numel_for`].
    pub fn contiguous_strides(&self) -> Vec<usize> {
        let mut strides = vec![0; self.0.len()];
        let mut acc = 1usize;
        for i in (0..self.0.len()).rev() {
            strides[i] = acc;
            acc = acc.saturating_mul(self.0[i]);
        }
        strides
    }

    /// The shape as an owned vector.
    pub fn to_vec(&self) -> Vec<usize> {
        self.0.clone()
    }

    /// The broadcast of two shapes (NumPy/PyTorch rules: align trailing dimensions; each
    /// pair must be equal or one of them 1).
    pub fn broadcast(op: &'static str, a: &[usize], b: &[usize]) -> Result<Shape> {
        let rank = a.len().max(b.len());
        let mut out = vec![0; rank];
        for i in 0..rank {
            let da = if i + a.len() >= rank {
                a[i + a.len() - rank]
            } else {
                1
            };
            let db = if i + b.len() >= rank {
                b[i + b.len() - rank]
            } else {
                1
            };
            out[i] = if da == db {
                da
            } else if da == 1 {
                db
            } else if db == 1 {
                da
            } else {
                return Err(Error::Broadcast {
                    op,
                    lhs: a.to_vec(),
                    rhs: b.to_vec(),
                });
            };
        }
        Ok(Shape(out))
    }
}

/// The largest element count of a tensor or view: `isize::MAX / 4`, the most `f32`s a
/// Rust allocation can hold. A shape with more elements (or whose count overflows) is an
/// [`Error::TooLarge`].
pub const MAX_ELEMENTS: usize = isize::MAX as usize / core::mem::size_of::<f32>();

/// Resolves a possibly negative dimension index against a rank.
pub fn normalize_dim(op: &'static str, dim: isize, rank: usize) -> Result<usize> {
    let r = rank as isize;
    let d = if dim < 0 { dim + r } else { dim };
    if d < 0 || d >= r {
        Err(Error::DimOutOfRange { op, dim, rank })
    } else {
        Ok(d as usize)
    }
}

/// Where the elements of a tensor live in its storage: shape, per-dimension strides (in
/// elements) and the offset of the first element.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    /// The tensor's shape.
    pub shape: Shape,
    /// Elements to skip in storage per step along each dimension (0 for an expanded one).
    pub strides: Vec<usize>,
    /// Storage index of element [0, 0, ...].
    pub offset: usize,
}

impl Layout {
    /// The row-major contiguous layout of `shape` at offset 0.
    pub fn contiguous(shape: impl Into<Shape>) -> Self {
        let shape = shape.into();
        let strides = shape.contiguous_strides();
        Layout {
            shape,
            strides,
            offset: 0,
        }
    }

    /// Number of elements (saturating, see [`Shape::numel`]).
    pub fn numel(&self) -> usize {
        self.shape.numel()
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.rank()
    }

    /// Whether elements are laid out row-major without gaps (offset may be non-zero).
    pub fn is_contiguous(&self) -> bool {
        let mut expected = 1usize;
        for i in (0..self.shape.len()).rev() {
            if self.shape[i] != 1 && self.strides[i] != expected {
                return false;
            }
            expected = expected.saturating_mul(self.shape[i]);
        }
        true
    }

    /// One past the largest storage index the layout can touch (0 when empty), or `None`
    /// when that index does not fit in `usize` or the strides do not match the rank.
    pub fn checked_extent(&self) -> Option<usize> {
        if self.strides.len() != self.shape.len() {
            return None;
        }
        if self.shape.contains(&0) {
            return Some(0);
        }
        let mut last = self.offset;
        for (&d, &s) in self.shape.iter().zip(&self.strides) {
            last = last.checked_add((d - 1).checked_mul(s)?)?;
        }
        last.checked_add(1)
    }

    /// One past the largest storage index the layout can touch (0 when empty); saturates
    /// at `usize::MAX` where [`Layout::checked_extent`] is `None`.
    pub fn storage_extent(&self) -> usize {
        self.checked_extent().unwrap_or(usize::MAX)
    }

    /// Checks that this layout is well formed and addresses only elements of a buffer of
    /// `len` elements: one stride per dimension, an element count of at most
    /// [`MAX_ELEMENTS`], and every index (computed with checked arithmetic) below `len`.
    /// `op` and `arg` name the kernel and the operand in the error.
    pub fn check_within(&self, op: &'static str, arg: &'static str, len: usize) -> Result<()> {
        if self.strides.len() != self.shape.len() {
            return Err(Error::invalid(
                op,
                arg,
                alloc::format!(
                    "layout has {} strides for a shape of rank {}",
                    self.strides.len(),
                    self.shape.len()
                ),
            ));
        }
        self.shape.numel_for(op)?;
        match self.checked_extent() {
            Some(extent) if extent <= len => Ok(()),
            Some(extent) => Err(Error::invalid(
                op,
                arg,
                alloc::format!(
                    "layout (shape {:?}, strides {:?}, offset {}) reaches element {} of a buffer of {len}",
                    self.shape,
                    self.strides,
                    self.offset,
                    extent - 1
                ),
            )),
            None => Err(Error::invalid(
                op,
                arg,
                alloc::format!(
                    "layout (shape {:?}, strides {:?}, offset {}) addresses an index beyond usize",
                    self.shape,
                    self.strides,
                    self.offset
                ),
            )),
        }
    }

    /// This layout broadcast to `target` (which must be a valid broadcast of it):
    /// new and size-1 dimensions get stride 0.
    pub fn broadcast_to(&self, op: &'static str, target: &[usize]) -> Result<Layout> {
        let rank = target.len();
        if self.rank() > rank {
            return Err(Error::Broadcast {
                op,
                lhs: self.shape.to_vec(),
                rhs: target.to_vec(),
            });
        }
        let lead = rank - self.rank();
        let mut strides = vec![0; rank];
        for i in 0..rank {
            if i < lead {
                continue;
            }
            let d = self.shape[i - lead];
            if d == target[i] {
                strides[i] = if d == 1 { 0 } else { self.strides[i - lead] };
            } else if d == 1 {
                strides[i] = 0;
            } else {
                return Err(Error::Broadcast {
                    op,
                    lhs: self.shape.to_vec(),
                    rhs: target.to_vec(),
                });
            }
        }
        Ok(Layout {
            shape: Shape::from(target),
            strides,
            offset: self.offset,
        })
    }

    /// Dimensions reordered by `perm` (a permutation of 0..rank).
    pub fn permute(&self, op: &'static str, perm: &[usize]) -> Result<Layout> {
        let rank = self.rank();
        if perm.len() != rank {
            return Err(Error::invalid(
                op,
                "dims",
                alloc::format!(
                    "permutation {perm:?} has {} entries for a tensor of rank {rank}",
                    perm.len()
                ),
            ));
        }
        let mut seen = vec![false; rank];
        for &p in perm {
            if p >= rank || seen[p] {
                return Err(Error::invalid(
                    op,
                    "dims",
                    alloc::format!("{perm:?} is not a permutation of 0..{rank}"),
                ));
            }
            seen[p] = true;
        }
        Ok(Layout {
            shape: Shape(perm.iter().map(|&p| self.shape[p]).collect()),
            strides: perm.iter().map(|&p| self.strides[p]).collect(),
            offset: self.offset,
        })
    }

    /// The layout of `shape` viewing the same elements in row-major order, if it exists
    /// without a copy (PyTorch's `view` rule: each group of merged or split dimensions must
    /// be contiguous within itself).
    pub fn view_as(&self, shape: &Shape) -> Option<Layout> {
        let n = shape.checked_numel()?;
        if Some(n) != self.shape.checked_numel() {
            return None;
        }
        if n == 0 || self.is_contiguous() {
            let mut l = Layout::contiguous(shape.clone());
            l.offset = self.offset;
            return Some(l);
        }
        // Walk old dims in chunks whose product matches a run of new dims.
        let old: Vec<(usize, usize)> = self
            .shape
            .iter()
            .zip(&self.strides)
            .filter(|(&d, _)| d != 1)
            .map(|(&d, &s)| (d, s))
            .collect();
        let mut new_strides = vec![0usize; shape.len()];
        let mut oi = 0;
        let mut ni = 0;
        while ni < shape.len() || oi < old.len() {
            // Skip size-1 new dims.
            if ni < shape.len() && shape[ni] == 1 {
                new_strides[ni] = 1;
                ni += 1;
                continue;
            }
            if oi >= old.len() || ni >= shape.len() {
                return None;
            }
            // Collect an old chunk that is contiguous within itself.
            let mut chunk = old[oi].0;
            let mut oj = oi;
            let mut nj = ni;
            let mut nsize = shape[ni];
            while chunk != nsize {
                if chunk < nsize {
                    oj += 1;
                    if oj >= old.len() || Some(old[oj - 1].1) != old[oj].0.checked_mul(old[oj].1) {
                        return None;
                    }
                    chunk = chunk.checked_mul(old[oj].0)?;
                } else {
                    nj += 1;
                    if nj >= shape.len() {
                        return None;
                    }
                    nsize = nsize.checked_mul(shape[nj])?;
                }
            }
            // New dims ni..=nj split the chunk whose innermost stride is old[oj].1.
            let mut stride = old[oj].1;
            for k in (ni..=nj).rev() {
                new_strides[k] = stride;
                stride = stride.saturating_mul(shape[k]);
            }
            oi = oj + 1;
            ni = nj + 1;
        }
        Some(Layout {
            shape: shape.clone(),
            strides: new_strides,
            offset: self.offset,
        })
    }

    /// Calls `f` with the storage index of every element, in row-major order. The layout
    /// must have passed [`Layout::check_within`] (or be a tensor's layout, which always
    /// has): its index arithmetic is not checked again here.
    pub fn for_each_index(&self, mut f: impl FnMut(usize)) {
        let n = self.numel();
        if n == 0 {
            return;
        }
        let rank = self.rank();
        if rank == 0 {
            f(self.offset);
            return;
        }
        let mut idx = vec![0usize; rank];
        let mut pos = self.offset;
        let last = rank - 1;
        let (dl, sl) = (self.shape[last], self.strides[last]);
        // Every position computed stays inside the layout's extent: a dimension of size 1
        // may have any stride (even one near usize::MAX), which is never added.
        loop {
            for k in 0..dl {
                f(pos + k * sl);
            }
            // Advance the outer index.
            let mut d = last;
            loop {
                if d == 0 {
                    return;
                }
                d -= 1;
                if idx[d] + 1 < self.shape[d] {
                    idx[d] += 1;
                    pos += self.strides[d];
                    break;
                }
                pos -= self.strides[d] * (self.shape[d] - 1);
                idx[d] = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_rules() {
        assert_eq!(
            Shape::broadcast("t", &[3, 1], &[4]).unwrap().dims(),
            &[3, 4]
        );
        assert_eq!(Shape::broadcast("t", &[], &[2, 2]).unwrap().dims(), &[2, 2]);
        assert_eq!(
            Shape::broadcast("t", &[0, 1], &[1, 5]).unwrap().dims(),
            &[0, 5]
        );
        let e = Shape::broadcast("add", &[3, 2], &[4, 2]).unwrap_err();
        assert!(e.to_string().contains("add") && e.to_string().contains("[3, 2]"));
    }

    #[test]
    fn iteration_of_transposed_layout() {
        let l = Layout::contiguous([2, 3]).permute("t", &[1, 0]).unwrap();
        let mut v = Vec::new();
        l.for_each_index(|i| v.push(i));
        assert_eq!(v, [0, 3, 1, 4, 2, 5]);
        assert!(!l.is_contiguous());
    }

    #[test]
    fn view_rules() {
        let l = Layout::contiguous([2, 3, 4]);
        let t = l.permute("t", &[1, 0, 2]).unwrap(); // [3,2,4] strides [4,12,1]
                                                     // Merging the last two (2,4) is not possible: stride 12 != 4*4.
        assert!(t.view_as(&Shape::from([3, 8])).is_none());
        // Splitting the last dim is fine.
        let v = t.view_as(&Shape::from([3, 2, 2, 2])).unwrap();
        assert_eq!(v.strides, [4, 12, 2, 1]);
        let mut a = Vec::new();
        let mut b = Vec::new();
        t.for_each_index(|i| a.push(i));
        v.for_each_index(|i| b.push(i));
        assert_eq!(a, b);
    }

    #[test]
    fn normalize_dims() {
        assert_eq!(normalize_dim("s", -1, 3).unwrap(), 2);
        assert!(normalize_dim("s", 3, 3).is_err());
        assert!(normalize_dim("s", -4, 3).is_err());
    }
}
