//! Strided iteration without allocation: the merged dimensions of one or more layouts of
//! one shape ([`Dims`]) and the walk over their rows ([`RowWalk`]).

/// The most dimensions a kernel iterates after merging contiguous ones.
pub const MAX_DIMS: usize = 16;

/// Dimensions of a strided iteration over `N` layouts of one shape, size-1 dimensions
/// dropped and dimensions that are contiguous with each other in every layout merged.
#[derive(Clone, Copy, Debug)]
pub(super) struct Dims<const N: usize> {
    pub(super) rank: usize,
    pub(super) len: [usize; MAX_DIMS],
    pub(super) stride: [[usize; MAX_DIMS]; N],
}

impl<const N: usize> Dims<N> {
    pub(super) fn new() -> Self {
        Self {
            rank: 0,
            len: [0; MAX_DIMS],
            stride: [[0; MAX_DIMS]; N],
        }
    }

    /// The merged dimensions of `shape` under `strides`, or `None` if more than
    /// [`MAX_DIMS`] remain.
    pub(super) fn of(shape: &[usize], strides: [&[usize]; N]) -> Option<Self> {
        let mut d = Self::new();
        for (i, &len) in shape.iter().enumerate() {
            if !d.push(len, core::array::from_fn(|k| strides[k][i])) {
                return None;
            }
        }
        Some(d)
    }

    /// Appends a dimension (outermost first); false if there is no room.
    pub(super) fn push(&mut self, len: usize, strides: [usize; N]) -> bool {
        if len == 1 {
            return true;
        }
        if self.rank > 0 {
            let l = self.rank - 1;
            if (0..N).all(|k| self.stride[k][l] == strides[k] * len) {
                self.len[l] *= len;
                for (k, s) in strides.iter().enumerate() {
                    self.stride[k][l] = *s;
                }
                return true;
            }
        }
        if self.rank == MAX_DIMS {
            return false;
        }
        self.len[self.rank] = len;
        for (k, s) in strides.iter().enumerate() {
            self.stride[k][self.rank] = *s;
        }
        self.rank += 1;
        true
    }

    /// Number of elements.
    pub(super) fn numel(&self) -> usize {
        self.len[..self.rank].iter().product()
    }

    /// Length and strides of the innermost dimension (1 and 0 for rank 0).
    pub(super) fn inner(&self) -> (usize, [usize; N]) {
        if self.rank == 0 {
            (1, [0; N])
        } else {
            let l = self.rank - 1;
            (self.len[l], core::array::from_fn(|k| self.stride[k][l]))
        }
    }

    /// Number of rows: the product of all but the innermost dimension.
    pub(super) fn rows(&self) -> usize {
        self.len[..self.rank.saturating_sub(1)].iter().product()
    }
}

/// The storage offsets of consecutive rows (all dimensions but the innermost) of a
/// [`Dims`], in row-major order.
pub(super) struct RowWalk<'a, const N: usize> {
    d: &'a Dims<N>,
    outer: usize,
    idx: [usize; MAX_DIMS],
    pub(super) off: [usize; N],
}

impl<'a, const N: usize> RowWalk<'a, N> {
    /// The walk positioned at row `row`, offsets relative to `base`.
    pub(super) fn at(d: &'a Dims<N>, base: [usize; N], row: usize) -> Self {
        let outer = d.rank.saturating_sub(1);
        let mut w = Self {
            d,
            outer,
            idx: [0; MAX_DIMS],
            off: base,
        };
        let mut r = row;
        for i in (0..outer).rev() {
            let q = r % d.len[i];
            r /= d.len[i];
            w.idx[i] = q;
            for k in 0..N {
                w.off[k] += q * d.stride[k][i];
            }
        }
        w
    }

    /// Moves to the next row (wrapping to the first after the last).
    pub(super) fn next(&mut self) {
        let d = self.d;
        let mut i = self.outer;
        while i > 0 {
            i -= 1;
            self.idx[i] += 1;
            for k in 0..N {
                self.off[k] += d.stride[k][i];
            }
            if self.idx[i] < d.len[i] {
                return;
            }
            for k in 0..N {
                self.off[k] -= d.stride[k][i] * d.len[i];
            }
            self.idx[i] = 0;
        }
    }
}

/// `value` rounded up to a multiple of `m`.
pub(super) fn round_up(value: usize, m: usize) -> usize {
    value.div_ceil(m) * m
}
