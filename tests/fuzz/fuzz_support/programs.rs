//! Shape and view programs decoded from bytes: a leaf of a random shape, then a sequence
//! of reshape, view, permute, transpose, narrow, slice, expand, squeeze, unsqueeze,
//! flatten, split, chunk, index_select, contiguous and sum calls with arguments taken
//! from the bytes, sizes and dimension indices at their extremes included.
//!
//! Shared by `tests/fuzz/fuzz_views.rs` (proptest) and the `shape_views` target of the
//! cargo-fuzz crate in `fuzz/` (which includes this file by path), so it uses only the
//! public API and no test framework.
#![allow(dead_code)]

use exactgrad::autograd::Result;
use exactgrad::prelude::*;

/// The most elements a program computes on; calls that read or write elements are
/// skipped on larger tensors (which only expansions make: views of a few elements).
pub const COMPUTE_LIMIT: usize = 1 << 12;

/// Sizes at the extremes, picked by a byte ≥ 0xC0: at least 2^56, so that a tensor
/// holding one (and no zero) is too large for any allocation.
const BIG_SIZES: [usize; 8] = [
    1 << 56,
    1 << 60,
    1 << 61,
    1 << 62,
    isize::MAX as usize,
    (1 << 63) + 2,
    usize::MAX - 1,
    usize::MAX,
];

/// Dimension indices and starts at the extremes, picked by a byte ≥ 0xC0.
const BIG_INDICES: [isize; 6] = [
    isize::MIN,
    isize::MIN + 1,
    -1 << 40,
    1 << 40,
    isize::MAX - 1,
    isize::MAX,
];

/// Reads bytes; past the end every read gives 0.
pub struct Bytes<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Bytes<'a> {
    /// A reader over `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Self { data, at: 0 }
    }

    /// Whether every byte was read.
    pub fn is_empty(&self) -> bool {
        self.at >= self.data.len()
    }

    /// The next byte.
    pub fn byte(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }

    /// The next 8 bytes as a `u64`.
    pub fn u64(&mut self) -> u64 {
        (0..8).fold(0u64, |a, _| a << 8 | u64::from(self.byte()))
    }

    /// A size: usually 0 to 5, at the extremes for a byte ≥ 0xC0.
    pub fn size(&mut self) -> usize {
        let b = self.byte();
        if b >= 0xC0 {
            BIG_SIZES[usize::from(b) % BIG_SIZES.len()]
        } else {
            usize::from(b % 6)
        }
    }

    /// A signed index: usually −4 to 4, at the extremes for a byte ≥ 0xC0.
    pub fn index(&mut self) -> isize {
        let b = self.byte();
        if b >= 0xC0 {
            BIG_INDICES[usize::from(b) % BIG_INDICES.len()]
        } else {
            isize::from(b % 9) - 4
        }
    }

    /// Up to `max` sizes (count from the next byte).
    pub fn sizes(&mut self, max: usize) -> Vec<usize> {
        let n = usize::from(self.byte()) % (max + 1);
        (0..n).map(|_| self.size()).collect()
    }

    /// Up to `max` indices (count from the next byte).
    pub fn indices(&mut self, max: usize) -> Vec<isize> {
        let n = usize::from(self.byte()) % (max + 1);
        (0..n).map(|_| self.index()).collect()
    }
}

/// One call of a shape program.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// `reshape(shape)`.
    Reshape(Vec<usize>),
    /// `reshape_infer(shape)`.
    ReshapeInfer(Vec<isize>),
    /// `view(shape)`.
    View(Vec<usize>),
    /// `view_infer(shape)`.
    ViewInfer(Vec<isize>),
    /// `permute(dims)`.
    Permute(Vec<isize>),
    /// `transpose(a, b)`.
    Transpose(isize, isize),
    /// `t()`.
    T,
    /// `narrow(dim, start, length)`.
    Narrow(isize, usize, usize),
    /// `slice(dim, start, end, step)`.
    Slice(isize, isize, isize, usize),
    /// `expand(shape)`.
    Expand(Vec<usize>),
    /// `squeeze(dim)`.
    Squeeze(isize),
    /// `squeeze_all()`.
    SqueezeAll,
    /// `unsqueeze(dim)`.
    Unsqueeze(isize),
    /// `flatten(start, end)`.
    Flatten(isize, isize),
    /// Piece `pick` of `split(size, dim)`.
    Split(usize, isize, usize),
    /// Piece `pick` of `chunk(chunks, dim)`.
    Chunk(usize, isize, usize),
    /// `index_select(dim, indices)`.
    IndexSelect(isize, Vec<i64>),
    /// `contiguous()`, an output.
    Contiguous,
    /// `sum_dims(dims, keepdim)`, an output.
    SumDims(Vec<isize>, bool),
    /// `sum()`, an output.
    Sum,
    /// `relu()` (a recorded element-wise call on the view), an output.
    Relu,
}

/// A leaf and the calls applied to it in turn.
#[derive(Clone, Debug, PartialEq)]
pub struct ShapeProgram {
    /// The leaf's shape (at most [`COMPUTE_LIMIT`] elements).
    pub shape: Vec<usize>,
    /// Seed of the leaf's values (random bit patterns).
    pub seed: u64,
    /// The calls.
    pub steps: Vec<Step>,
}

impl ShapeProgram {
    /// Decodes a program from bytes (any bytes give a program).
    pub fn decode(data: &[u8]) -> Self {
        let mut r = Bytes::new(data);
        let rank = usize::from(r.byte() % 5);
        let shape: Vec<usize> = (0..rank).map(|_| usize::from(r.byte() % 6)).collect();
        let seed = r.u64();
        let mut steps = Vec::new();
        while !r.is_empty() && steps.len() < 24 {
            let step = match r.byte() % 21 {
                0 => Step::Reshape(r.sizes(5)),
                1 => Step::ReshapeInfer(r.indices(5)),
                2 => Step::View(r.sizes(5)),
                3 => Step::ViewInfer(r.indices(5)),
                4 => Step::Permute(r.indices(5)),
                5 => Step::Transpose(r.index(), r.index()),
                6 => Step::T,
                7 => Step::Narrow(r.index(), r.size(), r.size()),
                8 => Step::Slice(r.index(), r.index(), r.index(), r.size()),
                9 => Step::Expand(r.sizes(5)),
                10 => Step::Squeeze(r.index()),
                11 => Step::SqueezeAll,
                12 => Step::Unsqueeze(r.index()),
                13 => Step::Flatten(r.index(), r.index()),
                14 => Step::Split(r.size(), r.index(), r.size()),
                15 => Step::Chunk(r.size(), r.index(), r.size()),
                16 => {
                    let d = r.index();
                    let i = r.indices(4).into_iter().map(|i| i as i64).collect();
                    Step::IndexSelect(d, i)
                }
                17 => Step::Contiguous,
                18 => Step::SumDims(r.indices(3), r.byte() & 1 == 1),
                19 => Step::Sum,
                _ => Step::Relu,
            };
            steps.push(step);
        }
        Self { shape, seed, steps }
    }

    /// Runs the program on `b`: returns the leaf (requiring a gradient) and, per step,
    /// the tensor it made or the error it gave. A failed step leaves the current tensor
    /// as it was; steps that would compute on more than [`COMPUTE_LIMIT`] elements are
    /// skipped (`Ok(None)`).
    #[allow(clippy::type_complexity)]
    pub fn run<B: Backend>(&self, b: &B) -> Result<(Tensor<B>, Vec<Result<Option<Tensor<B>>>>)> {
        let n: usize = self.shape.iter().product();
        let mut rng = Philox::new(self.seed);
        let data: Vec<f32> = (0..n)
            .map(|_| f32::from_bits(rng.next_u64() as u32))
            .collect();
        let leaf = Tensor::from_vec(b, data, self.shape.clone())?.requires_grad()?;
        let mut x = leaf.clone();
        let mut trace = Vec::with_capacity(self.steps.len());
        for step in &self.steps {
            let small = x.numel() <= COMPUTE_LIMIT;
            let r = match step {
                Step::Reshape(s) if small => x.reshape(s.clone()).map(Some),
                Step::Reshape(_) => Ok(None),
                Step::ReshapeInfer(s) if small => x.reshape_infer(s).map(Some),
                Step::ReshapeInfer(_) => Ok(None),
                Step::View(s) => x.view(s.clone()).map(Some),
                Step::ViewInfer(s) => x.view_infer(s).map(Some),
                Step::Permute(d) => x.permute(d).map(Some),
                Step::Transpose(a, c) => x.transpose(*a, *c).map(Some),
                Step::T => x.t().map(Some),
                Step::Narrow(d, s, l) => x.narrow(*d, *s, *l).map(Some),
                Step::Slice(d, s, e, st) => x.slice(*d, *s, *e, *st).map(Some),
                Step::Expand(s) => x.expand(s).map(Some),
                Step::Squeeze(d) => x.squeeze(*d).map(Some),
                Step::SqueezeAll => x.squeeze_all().map(Some),
                Step::Unsqueeze(d) => x.unsqueeze(*d).map(Some),
                Step::Flatten(s, e) if small => x.flatten(*s, *e).map(Some),
                Step::Flatten(..) => Ok(None),
                Step::Split(s, d, pick) => x
                    .split(*s, *d)
                    .map(|v| v.get(pick % v.len().max(1)).cloned()),
                Step::Chunk(c, d, pick) => x
                    .chunk(*c, *d)
                    .map(|v| v.get(pick % v.len().max(1)).cloned()),
                Step::IndexSelect(d, i) if small => x.index_select(*d, i).map(Some),
                Step::Contiguous if small => x.contiguous().map(Some),
                Step::SumDims(d, k) if small => x.sum_dims(d, *k).map(Some),
                Step::Sum if small => x.sum().map(Some),
                Step::Relu if small => x.relu().map(Some),
                Step::IndexSelect(..)
                | Step::Contiguous
                | Step::SumDims(..)
                | Step::Sum
                | Step::Relu => Ok(None),
            };
            if let Ok(Some(t)) = &r {
                x = t.clone();
            }
            trace.push(r);
        }
        Ok((leaf, trace))
    }
}
