//! Operators of this family (being written).

// The API shared by every engineer of issue 3 (signatures to implement exactly):
// ## Shared API for issue 3 (all engineers code against exactly these signatures)
// All methods are on `exactgrad_autograd::Tensor<B>` (generic over `B: Backend`), return `Result<Tensor<B>>` (or `Result<Vec<Tensor<B>>>`), follow PyTorch's semantics, and record their backward rule beside the forward (see autograd/src/engine.rs `record`, `Saved`).
// Option structs derive `Clone, Copy, Debug, PartialEq` and `Default` with PyTorch's defaults, and are re-exported from `exactgrad_autograd` (one `pub use` line each in autograd/src/lib.rs).
//
// autograd/src/ops/conv.rs (engineer A):
// - `Conv1dOptions { stride: usize, padding: usize, dilation: usize, groups: usize }` (default 1,0,1,1)
// - `Conv2dOptions { stride: [usize; 2], padding: [usize; 2], dilation: [usize; 2], groups: usize }` (default [1,1],[0,0],[1,1],1)
// - `fn conv1d(&self, weight: &Tensor<B>, bias: Option<&Tensor<B>>, opts: Conv1dOptions)`  input [N, C, L] (or unbatched [C, L]), weight [O, C/groups, K]
// - `fn conv2d(&self, weight: &Tensor<B>, bias: Option<&Tensor<B>>, opts: Conv2dOptions)`  input [N, C, H, W] (or [C, H, W]), weight [O, C/groups, KH, KW]
// - `MaxPool2dOptions { kernel_size: [usize; 2], stride: Option<[usize; 2]> /* None = kernel_size */, padding: [usize; 2], dilation: [usize; 2], ceil_mode: bool }` with `MaxPool2dOptions::new(kernel_size)`
// - `fn max_pool2d(&self, opts: MaxPool2dOptions)`
// - `AvgPool2dOptions { kernel_size: [usize; 2], stride: Option<[usize; 2]>, padding: [usize; 2], ceil_mode: bool, count_include_pad: bool /* default true */, divisor_override: Option<usize> }` with `AvgPool2dOptions::new(kernel_size)`
// - `fn avg_pool2d(&self, opts: AvgPool2dOptions)`
// - `fn adaptive_avg_pool2d(&self, output_size: [usize; 2])`
// - `fn pad(&self, pads: &[usize], value: f32)`  (constant mode; PyTorch F.pad order: last dim's (left, right) first, then the previous dim's, …)
//
// autograd/src/ops/norm.rs (engineer B):
// - `fn batch_norm(&self, running_mean: Option<&Tensor<B>>, running_var: Option<&Tensor<B>>, weight: Option<&Tensor<B>>, bias: Option<&Tensor<B>>, training: bool, momentum: f32, eps: f32)`  (F.batch_norm: input [N, C, *]; in training the batch statistics normalise with the biased variance, and running stats — updated in place, unrecorded — use the unbiased variance: r = (1−momentum)·r + momentum·stat)
// - `fn layer_norm(&self, normalized_shape: &[usize], weight: Option<&Tensor<B>>, bias: Option<&Tensor<B>>, eps: f32)`
// - `fn group_norm(&self, num_groups: usize, weight: Option<&Tensor<B>>, bias: Option<&Tensor<B>>, eps: f32)`
//
// autograd/src/ops/misc.rs (engineer B):
// - `fn dropout(&self, p: f32, training: bool, rng: &mut Philox)`  (draws one u64 key from rng; element i kept iff a Philox-derived uniform of (key, i) ≥ p; kept elements scaled by 1/(1−p); p = 1 gives zeros; not training = identity)
// - `fn embedding(weight: &Tensor<B>, indices: &[i64], indices_shape: &[usize], padding_idx: Option<i64>)` (associated fn; output indices_shape + [dim]; padding_idx rows get no gradient)
// - `fn index_select(&self, dim: isize, indices: &[i64])`
// - `fn split(&self, split_size: usize, dim: isize) -> Result<Vec<Tensor<B>>>`, `fn split_sizes(&self, sizes: &[usize], dim: isize) -> Result<Vec<Tensor<B>>>`, `fn chunk(&self, chunks: usize, dim: isize) -> Result<Vec<Tensor<B>>>`
//
// autograd/src/ops/attention.rs (engineer B):
// - `enum AttentionMask<'a, B: Backend> { Bool(&'a Tensor<B>) /* non-zero = take part, as PyTorch's True */, Additive(&'a Tensor<B>) }`
// - `fn scaled_dot_product_attention(query: &Tensor<B>, key: &Tensor<B>, value: &Tensor<B>, mask: Option<AttentionMask<'_, B>>, is_causal: bool, scale: Option<f32>)` (associated fn; q [..., L, E], k [..., S, E], v [..., S, Ev]; mask broadcastable to [..., L, S]; scale default 1/√E; backward recomputes the attention weights with the softmax row kernel instead of saving them — Dao et al. 2022)
