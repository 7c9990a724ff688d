//! The embedding table.

use crate::error::{Error, Result};
use crate::module::{Module, Visitor};
use exactgrad_autograd::Tensor;
use exactgrad_core::{Backend, Philox};
use std::fmt;

/// The sizes and options of an [`Embedding`] (`nn.Embedding(num_embeddings,
/// embedding_dim, padding_idx=None)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EmbeddingConfig {
    /// Rows of the table (the number of distinct indices).
    pub num_embeddings: usize,
    /// Features of each row.
    pub embedding_dim: usize,
    /// The row that is initialised to zeros and receives no gradient (negative counts
    /// from the end; default `None`).
    pub padding_idx: Option<i64>,
}

impl EmbeddingConfig {
    /// PyTorch's defaults with the given sizes.
    pub fn new(num_embeddings: usize, embedding_dim: usize) -> Self {
        Self {
            num_embeddings,
            embedding_dim,
            padding_idx: None,
        }
    }
}

/// A lookup table of `num_embeddings` rows of `embedding_dim` features (PyTorch's
/// `nn.Embedding` without `max_norm` and sparse gradients).
///
/// Parameter: `weight` `[num_embeddings, embedding_dim]`, initialised from N(0, 1) as in
/// PyTorch (the row `padding_idx`, if any, set to zeros). The lookup is
/// [`Tensor::embedding`]: the `padding_idx` row receives no gradient.
/// [`Module::forward`] takes the indices as a tensor of whole numbers (any shape);
/// [`Embedding::lookup`] takes them as integers.
pub struct Embedding<B: Backend> {
    weight: Tensor<B>,
    padding_idx: Option<i64>,
}

impl<B: Backend> Embedding<B> {
    /// A table initialised from N(0, 1) drawn row-major from `rng`, the `padding_idx` row
    /// (negative counts from the end) zeroed.
    ///
    /// Fails when a size is 0 or `padding_idx` is out of range.
    pub fn new(backend: &B, config: EmbeddingConfig, rng: &mut Philox) -> Result<Self> {
        let op = "Embedding::new";
        let EmbeddingConfig {
            num_embeddings,
            embedding_dim,
            padding_idx,
        } = config;
        if num_embeddings == 0 || embedding_dim == 0 {
            return Err(Error::invalid(
                op,
                "sizes",
                format!(
                    "num_embeddings and embedding_dim must be positive, got {num_embeddings} and {embedding_dim}"
                ),
            ));
        }
        let pad = check_padding(op, padding_idx, num_embeddings)?;
        let mut v =
            Tensor::randn(backend, [num_embeddings, embedding_dim], 0.0, 1.0, rng)?.to_vec()?;
        if let Some(p) = pad {
            v[p * embedding_dim..(p + 1) * embedding_dim].fill(0.0);
        }
        let weight =
            Tensor::from_vec(backend, v, [num_embeddings, embedding_dim])?.requires_grad()?;
        Ok(Self {
            weight,
            padding_idx,
        })
    }

    /// A table holding a copy of `weight` (`[num_embeddings, embedding_dim]`; the
    /// `padding_idx` row is kept as given, as PyTorch's `from_pretrained`).
    pub fn from_tensor(weight: &Tensor<B>, padding_idx: Option<i64>) -> Result<Self> {
        let op = "Embedding::from_tensor";
        if weight.rank() != 2 {
            return Err(Error::invalid(
                op,
                "weight",
                format!(
                    "must be 2-D [num_embeddings, embedding_dim], got shape {:?}",
                    weight.dims()
                ),
            ));
        }
        check_padding(op, padding_idx, weight.dims()[0])?;
        Ok(Self {
            weight: weight.detach().copy_contiguous()?.requires_grad()?,
            padding_idx,
        })
    }

    /// The table, `[num_embeddings, embedding_dim]`.
    pub fn weight(&self) -> &Tensor<B> {
        &self.weight
    }

    /// The row that receives no gradient, as given.
    pub fn padding_idx(&self) -> Option<i64> {
        self.padding_idx
    }

    /// The rows `indices` (of shape `shape`): `shape + [embedding_dim]`.
    ///
    /// Fails when an index is out of range or the count does not match `shape`.
    pub fn lookup(&self, indices: &[i64], shape: &[usize]) -> Result<Tensor<B>> {
        Tensor::embedding(&self.weight, indices, shape, self.padding_idx)
    }
}

fn check_padding(op: &'static str, padding_idx: Option<i64>, num: usize) -> Result<Option<usize>> {
    match padding_idx {
        None => Ok(None),
        Some(p) => {
            let n = num as i64;
            if p >= n || p < -n {
                return Err(Error::invalid(
                    op,
                    "padding_idx",
                    format!("{p} is not within num_embeddings = {num}"),
                ));
            }
            Ok(Some(if p < 0 { p + n } else { p } as usize))
        }
    }
}

impl<B: Backend> Module<B> for Embedding<B> {
    /// The rows picked by `input`, a tensor of whole numbers (indices stored as floats).
    /// Fails when an element is not a whole number in range.
    fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        let _scope = crate::trace::module_scope::<B>(self);
        let v = input.to_vec()?;
        let mut idx = Vec::with_capacity(v.len());
        for (p, &x) in v.iter().enumerate() {
            if !(x.is_finite() && x.fract() == 0.0 && x.abs() < 9.0e15) {
                return Err(Error::invalid(
                    "Embedding::forward",
                    "input",
                    format!("element {p} is {x}, not a whole-number index"),
                ));
            }
            idx.push(x as i64);
        }
        self.lookup(&idx, input.dims())
    }

    fn visit(&self, v: &mut Visitor<'_, B>) {
        v.parameter("weight", &self.weight);
    }

    fn describe(&self) -> String {
        format!("{self:?}")
    }
}

impl<B: Backend> fmt::Debug for Embedding<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Embedding({}, {}, padding_idx={:?})",
            self.weight.dims()[0],
            self.weight.dims()[1],
            self.padding_idx
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::module::ModuleExt;
    use exactgrad_backends::ScalarRefBackend;

    #[test]
    fn lookup_padding_row_and_errors() {
        let b = ScalarRefBackend;
        let e = Embedding::new(
            &b,
            EmbeddingConfig {
                padding_idx: Some(-1),
                ..EmbeddingConfig::new(5, 3)
            },
            &mut Philox::new(1),
        )
        .unwrap();
        let w = e.weight().to_vec().unwrap();
        assert_eq!(w[12..], [0.0; 3], "the padding row starts at zero");
        assert!(w[..12].iter().any(|&v| v.abs() > 0.5), "N(0, 1) values");
        let x = Tensor::from_vec(&b, vec![1.0, 4.0, 1.0, 0.0], [2, 2]).unwrap();
        let y = e.forward(&x).unwrap();
        assert_eq!(y.dims(), [2, 2, 3]);
        assert_eq!(y.to_vec().unwrap()[..3], w[3..6]);
        y.sum().unwrap().backward().unwrap();
        let g = e.weight().grad().unwrap().to_vec().unwrap();
        assert_eq!(
            g,
            [1., 1., 1., 2., 2., 2., 0., 0., 0., 0., 0., 0., 0., 0., 0.]
        );
        let bad = Tensor::from_vec(&b, vec![0.5], [1]).unwrap();
        assert!(e
            .forward(&bad)
            .unwrap_err()
            .to_string()
            .contains("whole-number"));
        assert!(e.lookup(&[5], &[1]).is_err());
        assert!(Embedding::new(
            &b,
            EmbeddingConfig {
                padding_idx: Some(5),
                ..EmbeddingConfig::new(5, 3)
            },
            &mut Philox::new(1)
        )
        .is_err());
        assert!(Embedding::new(&b, EmbeddingConfig::new(0, 3), &mut Philox::new(1)).is_err());
        let names: Vec<String> = e.named_parameters().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["weight"]);
    }
}
