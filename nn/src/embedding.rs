//! The embedding table.

use crate::error::{Error, Result};
use crate::module::{Module, Visitor};
use exactgrad_autograd::{Indices, Tensor};
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
/// [`Module::forward`] takes the indices as an index tensor (whole numbers of any shape,
/// [`Tensor::from_indices`]), so the table can start a [`Sequential`](crate::Sequential)
/// or a derived module's `forward`; [`Embedding::lookup`] takes any integer data
/// ([`Indices`]: `&[i64]`, `Vec<i64>`, a `(values, shape)` pair, an index tensor).
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

    /// The rows `indices`: the indices' shape `+ [embedding_dim]` (a slice is 1-D; pass
    /// `&(values, shape)` for another shape).
    ///
    /// Fails when an index is out of range or not an integer (an index tensor's element
    /// that is not a whole number of magnitude at most 2²⁴), or the count does not match
    /// the shape.
    pub fn lookup<I: Indices + ?Sized>(&self, indices: &I) -> Result<Tensor<B>> {
        let (values, shape) = indices.read_indices("embedding")?;
        Tensor::embedding(&self.weight, &values, &shape, self.padding_idx)
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
    /// The rows picked by `input`, an index tensor ([`Tensor::from_indices`]): the
    /// input's shape `+ [embedding_dim]`. Fails when an element is not a whole number of
    /// magnitude at most 2²⁴ (beyond it an f32 may hold another integer than the one
    /// meant, so it is refused rather than read as another row) or is out of range.
    fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        let _scope = crate::trace::module_scope::<B>(self);
        let (values, shape) = input.read_indices("Embedding::forward")?;
        Tensor::embedding(&self.weight, &values, &shape, self.padding_idx)
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
            .contains("not a whole number"));
        assert!(e.lookup(&[5]).is_err());
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

    /// A token model whose `forward` starts with the table, derived.
    #[derive(crate::Module)]
    struct Tokens<B: Backend> {
        emb: Embedding<B>,
        head: crate::Linear<B>,
    }

    impl<B: Backend> Tokens<B> {
        fn forward(&self, tokens: &Tensor<B>) -> Result<Tensor<B>> {
            self.head.forward(&self.emb.forward(tokens)?.relu()?)
        }
    }

    #[test]
    fn integer_indices_flow_through_module_chains() {
        let b = ScalarRefBackend;
        let mut rng = Philox::new(4);
        let table = || Embedding::new(&b, EmbeddingConfig::new(7, 3), &mut Philox::new(2));
        let head = crate::Linear::new(&b, 3, 2, &mut rng).unwrap();
        let tokens = [6i64, 0, 3, 3, 1, 5];
        let x = Tensor::from_indices(&b, &tokens, [2, 3]).unwrap();
        // In a Sequential: the rows of the i64 lookup, then the rest of the chain.
        let seq = crate::Sequential::new()
            .push(table().unwrap())
            .push(crate::Linear::from_tensors(head.weight(), head.bias()).unwrap());
        let y = seq.forward(&x).unwrap();
        let want = head
            .forward(&table().unwrap().lookup(&(tokens, [2, 3])).unwrap())
            .unwrap();
        assert_eq!(y.dims(), [2, 3, 2]);
        assert_eq!(y.to_vec().unwrap(), want.to_vec().unwrap());
        // In a derived module's forward.
        let m = Tokens {
            emb: table().unwrap(),
            head: crate::Linear::from_tensors(head.weight(), head.bias()).unwrap(),
        };
        let y = Module::forward(&m, &x).unwrap();
        let e = table().unwrap();
        let want = head
            .forward(
                &e.lookup(&(tokens.to_vec(), [2, 3]))
                    .unwrap()
                    .relu()
                    .unwrap(),
            )
            .unwrap();
        assert_eq!(y.to_vec().unwrap(), want.to_vec().unwrap());
        // An f32 index beyond 2^24 is an error, not another row: 2^24 + 2 is a whole f32
        // and would have been read as a valid-looking integer.
        let big = Tensor::from_vec(&b, vec![16_777_218.0], [1]).unwrap();
        let err = e.forward(&big).unwrap_err().to_string();
        assert!(
            err.contains("Embedding::forward") && err.contains("2^24"),
            "{err}"
        );
        let err = Tensor::from_indices(&b, &[1 << 25], [1])
            .unwrap_err()
            .to_string();
        assert!(err.contains("from_indices"), "{err}");
    }
}
