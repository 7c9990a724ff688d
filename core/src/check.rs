//! Argument checks of the [`Backend`](crate::Backend) kernels.
//!
//! The kernels of [`Backend`](crate::Backend) run these functions (and the spec types'
//! checks) on their buffers and layouts before any backend touches an element: lengths
//! must agree, and every layout must address only elements of its buffer
//! ([`Layout::check_within`], in checked arithmetic). They run once per call, in core, and
//! cost `O(rank)`. A backend's kernel receives only arguments that passed them
//! ([`Checked`](crate::Checked)) and may index without further bounds checks.
//!
//! [`check_len`] and [`checked_mul`] are the two primitives every check (here, in
//! [`crate::kernels`] and in [`crate::recurrent`]) is built from.

use crate::error::{Error, Result};
use crate::shape::Layout;
use alloc::format;

/// Checks that buffer `arg` of kernel `op` holds exactly `expected` elements.
pub fn check_len(op: &'static str, arg: &'static str, len: usize, expected: usize) -> Result<()> {
    if len == expected {
        Ok(())
    } else {
        Err(Error::invalid(
            op,
            arg,
            alloc::format!("has {len} elements, expected {expected}"),
        ))
    }
}

/// `a · b` as a checked product, or an [`Error::Overflow`] naming `op` and `arg`.
pub fn checked_mul(op: &'static str, arg: &'static str, a: usize, b: usize) -> Result<usize> {
    a.checked_mul(b)
        .ok_or_else(|| Error::overflow(op, arg, alloc::format!("{a} × {b} overflows usize")))
}

/// [`Backend::copy_strided`](crate::Backend::copy_strided): `layout` inside `src`, `out`
/// holding its elements.
pub fn copy_strided(src: usize, layout: &Layout, out: usize) -> Result<()> {
    layout.check_within("copy_strided", "layout", src)?;
    check_len("copy_strided", "out", out, layout.numel())
}

/// [`Backend::unary`](crate::Backend::unary): equal lengths.
pub fn unary(x: usize, out: usize) -> Result<()> {
    check_len("unary", "out", out, x)
}

/// [`Backend::unary_backward`](crate::Backend::unary_backward): four equal lengths.
pub fn unary_backward(x: usize, y: usize, g: usize, out: usize) -> Result<()> {
    check_len("unary_backward", "x", x, g)?;
    check_len("unary_backward", "y", y, g)?;
    check_len("unary_backward", "out", out, g)
}

/// [`Backend::binary`](crate::Backend::binary) (and any kernel over layouts broadcast to
/// one shape): both layouts of one shape, each inside its buffer, `out` holding the
/// shape's elements.
pub fn binary(
    op: &'static str,
    a: usize,
    la: &Layout,
    b: usize,
    lb: &Layout,
    out: usize,
) -> Result<()> {
    if la.shape != lb.shape {
        return Err(Error::mismatch(
            op,
            &la.shape,
            &lb.shape,
            "the operands' layouts must be broadcast to one shape",
        ));
    }
    la.check_within(op, "a", a)?;
    lb.check_within(op, "b", b)?;
    check_len(op, "out", out, la.numel())
}

/// [`Backend::select`](crate::Backend::select): three layouts of one shape, each inside
/// its buffer.
#[allow(clippy::too_many_arguments)]
pub fn select(
    cond: usize,
    lc: &Layout,
    a: usize,
    la: &Layout,
    b: usize,
    lb: &Layout,
    out: usize,
) -> Result<()> {
    binary("select", a, la, b, lb, out)?;
    if lc.shape != la.shape {
        return Err(Error::mismatch(
            "select",
            &lc.shape,
            &la.shape,
            "the condition's layout must be broadcast to the values' shape",
        ));
    }
    lc.check_within("select", "cond", cond)
}

/// [`Backend::sum`](crate::Backend::sum): one flag per dimension, `layout` inside `x`,
/// `out` holding the kept dimensions' elements.
pub fn sum(x: usize, layout: &Layout, reduce: &[bool], out: usize) -> Result<()> {
    if reduce.len() != layout.rank() {
        return Err(Error::invalid(
            "sum",
            "reduce",
            format!(
                "{} flags given for a layout of rank {}",
                reduce.len(),
                layout.rank()
            ),
        ));
    }
    layout.check_within("sum", "layout", x)?;
    let kept = layout
        .shape
        .iter()
        .zip(reduce)
        .filter(|(_, &r)| !r)
        .try_fold(1usize, |acc, (&d, _)| acc.checked_mul(d));
    // The kept dimensions are a subset of a layout whose count fits, unless a reduced
    // dimension is 0; then the product is checked on its own.
    let kept = kept.ok_or_else(|| {
        Error::overflow(
            "sum",
            "reduce",
            format!("the kept dimensions of {:?} overflow usize", layout.shape),
        )
    })?;
    check_len("sum", "out", out, kept)
}

/// [`Backend::softmax`](crate::Backend::softmax): `rows × cols` elements in `x` and `out`.
pub fn softmax(op: &'static str, x: usize, rows: usize, cols: usize, out: usize) -> Result<()> {
    let n = rows
        .checked_mul(cols)
        .ok_or_else(|| Error::overflow(op, "rows", format!("{rows} × {cols} overflows usize")))?;
    check_len(op, "x", x, n)?;
    check_len(op, "out", out, n)
}

/// [`Backend::softmax_backward`](crate::Backend::softmax_backward): `rows × cols`
/// elements in every buffer.
pub fn softmax_backward(y: usize, g: usize, rows: usize, cols: usize, out: usize) -> Result<()> {
    softmax("softmax_backward", y, rows, cols, out)?;
    check_len("softmax_backward", "g", g, y)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shape::Shape;

    #[test]
    fn layouts_outside_their_buffer_are_refused() {
        let mut l = Layout::contiguous([2, 3]);
        assert!(copy_strided(6, &l, 6).is_ok());
        assert!(copy_strided(5, &l, 6).is_err());
        l.offset = usize::MAX - 2;
        assert!(copy_strided(usize::MAX, &l, 6).is_err());
        let huge = Layout {
            shape: Shape::from([2, 2]),
            strides: alloc::vec![usize::MAX / 2 + 1, 1],
            offset: 0,
        };
        assert!(copy_strided(1000, &huge, 4).is_err());
        // (3 − 1) · stride overflows usize: refused whatever the buffer's length.
        let wrapping = Layout {
            shape: Shape::from([3, 2]),
            strides: alloc::vec![usize::MAX / 2 + 1, 1],
            offset: 0,
        };
        assert!(copy_strided(usize::MAX, &wrapping, 6).is_err());
        let bad_rank = Layout {
            shape: Shape::from([2, 2]),
            strides: alloc::vec![1],
            offset: 0,
        };
        assert!(copy_strided(4, &bad_rank, 4).is_err());
    }

    #[test]
    fn lengths_must_agree() {
        assert!(unary(3, 3).is_ok());
        assert!(unary(3, 4).is_err());
        assert!(unary_backward(3, 3, 3, 2).is_err());
        assert!(softmax("softmax", 6, 2, 3, 6).is_ok());
        assert!(softmax("softmax", 6, usize::MAX, 3, 6).is_err());
        let l = Layout::contiguous([2, 3]);
        assert!(sum(6, &l, &[true], 3).is_err());
        assert!(sum(6, &l, &[true, false], 3).is_ok());
        assert!(sum(6, &l, &[true, false], 2).is_err());
        let other = Layout::contiguous([3, 2]);
        assert!(binary("add", 6, &l, 6, &other, 6).is_err());
    }
}
