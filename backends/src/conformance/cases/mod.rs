//! Case generation: the [`Kernel`]s, the operator lists, the special values, random
//! shapes, strided views and broadcast operands, and the [`Case`]s of a kernel for a
//! [`Config`] ([`random_case`], [`kernel_cases`]).

pub use crate::conformance::training::TrainCall;
use exactgrad_core::{BinaryOp, Layout, Philox, UnaryOp};
use std::fmt;
use std::string::{String, ToString};
use std::vec::Vec;

mod random;

pub use random::{
    kernel_cases, random_case, random_divisor, random_len, random_shape, LANE_WIDTHS,
};

/// The kernels of [`Backend`](exactgrad_core::Backend).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// [`Backend::copy_strided`](exactgrad_core::Backend::copy_strided).
    CopyStrided,
    /// [`Backend::unary`](exactgrad_core::Backend::unary).
    Unary,
    /// [`Backend::unary_backward`](exactgrad_core::Backend::unary_backward).
    UnaryBackward,
    /// [`Backend::binary`](exactgrad_core::Backend::binary).
    Binary,
    /// [`Backend::select`](exactgrad_core::Backend::select).
    Select,
    /// [`Backend::sum`](exactgrad_core::Backend::sum).
    Sum,
    /// [`Backend::matmul`](exactgrad_core::Backend::matmul).
    Matmul,
    /// [`Backend::matmul_acc`](exactgrad_core::Backend::matmul_acc).
    MatmulAcc,
    /// [`Backend::softmax`](exactgrad_core::Backend::softmax).
    Softmax,
    /// [`Backend::softmax_backward`](exactgrad_core::Backend::softmax_backward).
    SoftmaxBackward,
    /// [`Backend::lstm_cell`](exactgrad_core::Backend::lstm_cell).
    LstmCell,
    /// [`Backend::lstm_cell_backward`](exactgrad_core::Backend::lstm_cell_backward).
    LstmCellBackward,
    /// [`Backend::gru_cell`](exactgrad_core::Backend::gru_cell).
    GruCell,
    /// [`Backend::gru_cell_backward`](exactgrad_core::Backend::gru_cell_backward).
    GruCellBackward,
    /// [`Backend::norm_stats`](exactgrad_core::Backend::norm_stats).
    NormStats,
    /// [`Backend::norm_forward`](exactgrad_core::Backend::norm_forward).
    NormForward,
    /// [`Backend::norm_backward`](exactgrad_core::Backend::norm_backward).
    NormBackward,
    /// [`Backend::max_pool2d`](exactgrad_core::Backend::max_pool2d).
    MaxPool2d,
    /// [`Backend::max_pool2d_backward`](exactgrad_core::Backend::max_pool2d_backward).
    MaxPool2dBackward,
    /// [`Backend::avg_pool2d`](exactgrad_core::Backend::avg_pool2d).
    AvgPool2d,
    /// [`Backend::avg_pool2d_backward`](exactgrad_core::Backend::avg_pool2d_backward).
    AvgPool2dBackward,
    /// [`Backend::adaptive_avg_pool2d`](exactgrad_core::Backend::adaptive_avg_pool2d).
    AdaptiveAvgPool2d,
    /// [`Backend::adaptive_avg_pool2d_backward`](exactgrad_core::Backend::adaptive_avg_pool2d_backward).
    AdaptiveAvgPool2dBackward,
    /// [`Backend::im2col`](exactgrad_core::Backend::im2col).
    Im2col,
    /// [`Backend::col2im`](exactgrad_core::Backend::col2im).
    Col2im,
    /// [`Backend::depthwise_conv`](exactgrad_core::Backend::depthwise_conv).
    DepthwiseConv,
    /// [`Backend::depthwise_grad_input`](exactgrad_core::Backend::depthwise_grad_input).
    DepthwiseGradInput,
    /// [`Backend::depthwise_grad_weight`](exactgrad_core::Backend::depthwise_grad_weight).
    DepthwiseGradWeight,
    /// [`Backend::attention_scores`](exactgrad_core::Backend::attention_scores).
    AttentionScores,
    /// [`Backend::dropout_mask`](exactgrad_core::Backend::dropout_mask).
    DropoutMask,
    /// [`Backend::sgd_step`](exactgrad_core::Backend::sgd_step).
    SgdStep,
    /// [`Backend::adam_step`](exactgrad_core::Backend::adam_step).
    AdamStep,
    /// [`Backend::digest`](exactgrad_core::Backend::digest): the trace digest of a buffer.
    Digest,
}

impl Kernel {
    /// Every kernel, in the order of the trait.
    pub const ALL: [Kernel; 33] = [
        Kernel::CopyStrided,
        Kernel::Unary,
        Kernel::UnaryBackward,
        Kernel::Binary,
        Kernel::Select,
        Kernel::Sum,
        Kernel::Matmul,
        Kernel::MatmulAcc,
        Kernel::Softmax,
        Kernel::SoftmaxBackward,
        Kernel::LstmCell,
        Kernel::LstmCellBackward,
        Kernel::GruCell,
        Kernel::GruCellBackward,
        Kernel::NormStats,
        Kernel::NormForward,
        Kernel::NormBackward,
        Kernel::MaxPool2d,
        Kernel::MaxPool2dBackward,
        Kernel::AvgPool2d,
        Kernel::AvgPool2dBackward,
        Kernel::AdaptiveAvgPool2d,
        Kernel::AdaptiveAvgPool2dBackward,
        Kernel::Im2col,
        Kernel::Col2im,
        Kernel::DepthwiseConv,
        Kernel::DepthwiseGradInput,
        Kernel::DepthwiseGradWeight,
        Kernel::AttentionScores,
        Kernel::DropoutMask,
        Kernel::SgdStep,
        Kernel::AdamStep,
        Kernel::Digest,
    ];

    /// The kernel's method name.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::CopyStrided => "copy_strided",
            Kernel::Unary => "unary",
            Kernel::UnaryBackward => "unary_backward",
            Kernel::Binary => "binary",
            Kernel::Select => "select",
            Kernel::Sum => "sum",
            Kernel::Matmul => "matmul",
            Kernel::MatmulAcc => "matmul_acc",
            Kernel::Softmax => "softmax",
            Kernel::SoftmaxBackward => "softmax_backward",
            Kernel::LstmCell => "lstm_cell",
            Kernel::LstmCellBackward => "lstm_cell_backward",
            Kernel::GruCell => "gru_cell",
            Kernel::GruCellBackward => "gru_cell_backward",
            Kernel::NormStats => "norm_stats",
            Kernel::NormForward => "norm_forward",
            Kernel::NormBackward => "norm_backward",
            Kernel::MaxPool2d => "max_pool2d",
            Kernel::MaxPool2dBackward => "max_pool2d_backward",
            Kernel::AvgPool2d => "avg_pool2d",
            Kernel::AvgPool2dBackward => "avg_pool2d_backward",
            Kernel::AdaptiveAvgPool2d => "adaptive_avg_pool2d",
            Kernel::AdaptiveAvgPool2dBackward => "adaptive_avg_pool2d_backward",
            Kernel::Im2col => "im2col",
            Kernel::Col2im => "col2im",
            Kernel::DepthwiseConv => "depthwise_conv",
            Kernel::DepthwiseGradInput => "depthwise_grad_input",
            Kernel::DepthwiseGradWeight => "depthwise_grad_weight",
            Kernel::AttentionScores => "attention_scores",
            Kernel::DropoutMask => "dropout_mask",
            Kernel::SgdStep => "sgd_step",
            Kernel::AdamStep => "adam_step",
            Kernel::Digest => "digest",
        }
    }
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Every [`UnaryOp`] with the parameters the suite tries (special exponents, infinite and
/// crossed clamp bounds, signed zeros and non-finite scalars): [`UnaryOp::SAMPLES`], from
/// the operator table of `exactgrad_core::ops`.
pub fn unary_ops() -> Vec<UnaryOp> {
    UnaryOp::SAMPLES.to_vec()
}

/// Every [`BinaryOp`] ([`BinaryOp::ALL`]).
pub const BINARY_OPS: [BinaryOp; 4] = BinaryOp::ALL;

/// How often special values (NaN, ±∞, ±0, subnormals, limits) replace ordinary ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Specials {
    /// Never.
    None,
    /// One element in 64.
    Rare,
    /// One element in 8.
    Some,
    /// One element in 2.
    Many,
}

impl Specials {
    /// All densities.
    pub const ALL: [Specials; 4] = [
        Specials::None,
        Specials::Rare,
        Specials::Some,
        Specials::Many,
    ];

    fn one_in(self) -> u32 {
        match self {
            Specials::None => 0,
            Specials::Rare => 64,
            Specials::Some => 8,
            Specials::Many => 2,
        }
    }
}

/// The special values the suite mixes into its data, as bit patterns: NaNs (canonical,
/// negative, signalling, with payloads), ±∞, ±0, subnormals, the normal limits and the
/// thresholds of exp.
pub const SPECIAL_BITS: [u32; 24] = [
    0x7FC0_0000, // canonical NaN
    0xFFC0_0000, // negative quiet NaN (x86's default)
    0x7F80_0001, // signalling NaN
    0x7FC1_2345, // NaN with a payload
    0x7F80_0000, // +inf
    0xFF80_0000, // -inf
    0x0000_0000, // +0
    0x8000_0000, // -0
    0x0000_0001, // smallest subnormal
    0x8000_0001,
    0x007F_FFFF, // largest subnormal
    0x8040_0000,
    0x0080_0000, // smallest normal
    0x7F7F_FFFF, // largest finite
    0xFF7F_FFFF,
    0x42B1_7218, // 88.72284 (exp overflow threshold)
    0x42B1_7219,
    0xC2CF_F1B5, // -103.97 (exp underflow)
    0xC2D0_0000, // -104
    0x3F80_0000, // 1
    0xBF80_0000, // -1
    0x3F00_0000, // 0.5
    0x4180_0000, // 16
    0xC120_0000, // -10
];

/// `n` test values from `seed`: mostly uniform in [−8, 8), some in [−100, 100), some
/// `±2^40`, some random finite bit patterns, and special values at the given density.
///
/// The `±2^40` values make sums depend on their order: added to a partial sum of that
/// size, the small values lose their low bits (even in f64), and a `+2^40` and a `−2^40`
/// in one sum cancel exactly, leaving those rounding errors visible in the result. A sum
/// that visits its elements in any order but the canonical one (`docs/arithmetic.md`,
/// rule 3) then differs.
pub fn values(n: usize, seed: u64, specials: Specials) -> Vec<f32> {
    let mut r = Philox::new(seed);
    let one_in = specials.one_in();
    (0..n)
        .map(|_| {
            if one_in > 0 && r.below(one_in) == 0 {
                return f32::from_bits(SPECIAL_BITS[r.below(SPECIAL_BITS.len() as u32) as usize]);
            }
            match r.below(20) {
                0 => {
                    if r.below(2) == 0 {
                        CANCELLING
                    } else {
                        -CANCELLING
                    }
                }
                1..=13 => r.uniform(-8.0, 8.0),
                14..=16 => r.uniform(-100.0, 100.0),
                _ => loop {
                    let v = f32::from_bits(r.next_u32());
                    if v.is_finite() {
                        break v;
                    }
                },
            }
        })
        .collect()
}

/// The magnitude of the cancelling values of [`values`]: `2^40`.
const CANCELLING: f32 = (1u64 << 40) as f32;

/// The recipe of a strided view of a buffer: a shape, the order in which its dimensions
/// are laid out in storage, a step per dimension, broadcast (stride-0) dimensions and an
/// offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    /// The logical shape.
    pub shape: Vec<usize>,
    /// The dimensions in storage order, outermost first (a permutation of `0..rank`).
    pub order: Vec<usize>,
    /// Storage elements per logical step along each dimension (≥ 1; 2 skips every other).
    pub step: Vec<usize>,
    /// Dimensions read with stride 0 (every index along them reads the same elements).
    pub expand: Vec<bool>,
    /// Storage index of the first element.
    pub offset: usize,
    /// Extra storage elements after the last one the view touches.
    pub pad: usize,
}

impl View {
    /// The contiguous row-major view of `shape`.
    pub fn contiguous(shape: &[usize]) -> Self {
        let r = shape.len();
        View {
            shape: shape.to_vec(),
            order: (0..r).collect(),
            step: vec![1; r],
            expand: vec![false; r],
            offset: 0,
            pad: 0,
        }
    }

    /// A random view of `shape`: half the time contiguous, otherwise with a random
    /// storage order, steps of 2, broadcast dimensions and an offset.
    pub fn random(shape: &[usize], rng: &mut Philox) -> Self {
        let mut v = View::contiguous(shape);
        if rng.below(2) == 0 {
            return v;
        }
        let r = shape.len();
        for i in (1..r).rev() {
            let j = rng.below(i as u32 + 1) as usize;
            v.order.swap(i, j);
        }
        for d in 0..r {
            v.step[d] = if rng.below(4) == 0 { 2 } else { 1 };
            v.expand[d] = rng.below(8) == 0;
        }
        v.offset = rng.below(6) as usize;
        v.pad = rng.below(3) as usize;
        v
    }

    /// The layout of the view and the length of the buffer it needs.
    pub fn layout(&self) -> (Layout, usize) {
        let r = self.shape.len();
        assert!(
            self.order.len() == r && self.step.len() == r && self.expand.len() == r,
            "View: field lengths differ from the rank"
        );
        let mut strides = vec![0usize; r];
        let mut acc = 1usize;
        for &d in self.order.iter().rev() {
            if self.expand[d] {
                continue;
            }
            strides[d] = acc * self.step[d].max(1);
            acc = strides[d] * self.shape[d].max(1);
        }
        let layout = Layout {
            shape: self.shape.clone().into(),
            strides,
            offset: self.offset,
        };
        let len = layout.storage_extent().max(self.offset) + self.pad;
        (layout, len)
    }
}

/// An operand of a broadcasting kernel: its own shape (aligned to the trailing dimensions
/// of the output, each 1 or the output's size) as a [`View`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operand {
    /// The operand's view; its shape must broadcast to the output shape.
    pub view: View,
}

impl Operand {
    /// A random operand for output `shape`: leading dimensions dropped and dimensions
    /// set to 1 at random, then a random view.
    pub fn random(shape: &[usize], rng: &mut Philox) -> Self {
        let lead = if rng.below(3) == 0 {
            rng.below(shape.len() as u32 + 1) as usize
        } else {
            0
        };
        let own: Vec<usize> = shape[lead..]
            .iter()
            .map(|&d| if rng.below(4) == 0 { 1 } else { d })
            .collect();
        Operand {
            view: View::random(&own, rng),
        }
    }

    /// The operand's buffer length and its layout broadcast to `shape`.
    pub(super) fn layout(&self, shape: &[usize]) -> (Layout, usize) {
        let (l, len) = self.view.layout();
        let b = l
            .broadcast_to("conformance", shape)
            .expect("Operand: shape does not broadcast to the output");
        (b, len)
    }
}

/// One kernel call of the suite, with the recipe of its inputs.
#[derive(Clone, Debug, PartialEq)]
pub enum Call {
    /// A training kernel (normalisation, pooling, im2col/col2im, dropout, optimizers).
    Train(TrainCall),
    /// `digest` of `len` elements.
    Digest {
        /// Number of elements.
        len: usize,
    },
    /// `copy_strided` of a view.
    CopyStrided {
        /// The source view.
        src: View,
    },
    /// `unary` over `len` elements.
    Unary {
        /// The operation.
        op: UnaryOp,
        /// Number of elements.
        len: usize,
    },
    /// `unary_backward` over `len` elements.
    UnaryBackward {
        /// The operation.
        op: UnaryOp,
        /// Number of elements.
        len: usize,
        /// Whether `y` is the reference's forward output of `x` (else random values).
        y_from_forward: bool,
    },
    /// `binary` with broadcasting.
    Binary {
        /// The operation.
        op: BinaryOp,
        /// The output shape.
        shape: Vec<usize>,
        /// Left operand.
        a: Operand,
        /// Right operand.
        b: Operand,
    },
    /// `select` with broadcasting.
    Select {
        /// The output shape.
        shape: Vec<usize>,
        /// The condition (about half its elements are ±0).
        cond: Operand,
        /// Chosen where the condition is non-zero.
        a: Operand,
        /// Chosen where it is zero.
        b: Operand,
    },
    /// `sum` of a view over the flagged dimensions.
    Sum {
        /// The summed view.
        x: View,
        /// Which dimensions are reduced.
        reduce: Vec<bool>,
    },
    /// `matmul` of `batch` products `m×k · k×n`, or with `seg > 0` `matmul_acc` (segments
    /// of `seg` steps added to an output of random values).
    Matmul {
        /// Number of products.
        batch: usize,
        /// Rows of `a`.
        m: usize,
        /// The reduction length.
        k: usize,
        /// Columns of `b`.
        n: usize,
        /// `a` stored column-major (a transposed view).
        a_trans: bool,
        /// `b` stored column-major.
        b_trans: bool,
        /// One `a` for every batch entry (batch stride 0).
        a_bcast: bool,
        /// One `b` for every batch entry.
        b_bcast: bool,
        /// Storage offsets of `a` and `b`.
        offsets: (usize, usize),
        /// Segment length of `matmul_acc` (a divisor of `k`, or 1 when `k` is 0); 0 for
        /// `matmul`.
        seg: usize,
    },
    /// `softmax` (or log-softmax) of `rows × cols`.
    Softmax {
        /// Number of rows.
        rows: usize,
        /// Row length.
        cols: usize,
        /// Log-softmax.
        log: bool,
    },
    /// `softmax_backward` of `rows × cols`.
    SoftmaxBackward {
        /// Number of rows.
        rows: usize,
        /// Row length.
        cols: usize,
        /// Log-softmax.
        log: bool,
        /// Whether `y` is the reference's forward output (else random values).
        y_from_forward: bool,
    },
    /// One step of a recurrent cell kernel (`lstm_cell`, `gru_cell` or their backward
    /// rules) on `batch × hidden` units.
    RecurrentCell {
        /// Which of the four cell kernels.
        kernel: Kernel,
        /// Rows of the step.
        batch: usize,
        /// Units per row.
        hidden: usize,
        /// Whether the input biases are given.
        bias_ih: bool,
        /// Whether the recurrent biases are given.
        bias_hh: bool,
        /// Backward rules: whether the kept gates (and `c`) are the reference's forward
        /// outputs (else random values).
        from_forward: bool,
    },
}

impl Call {
    /// The kernel this call exercises.
    pub fn kernel(&self) -> Kernel {
        match self {
            Call::Digest { .. } => Kernel::Digest,
            Call::CopyStrided { .. } => Kernel::CopyStrided,
            Call::Unary { .. } => Kernel::Unary,
            Call::UnaryBackward { .. } => Kernel::UnaryBackward,
            Call::Binary { .. } => Kernel::Binary,
            Call::Select { .. } => Kernel::Select,
            Call::Sum { .. } => Kernel::Sum,
            Call::Matmul { seg: 0, .. } => Kernel::Matmul,
            Call::Matmul { .. } => Kernel::MatmulAcc,
            Call::Softmax { .. } => Kernel::Softmax,
            Call::SoftmaxBackward { .. } => Kernel::SoftmaxBackward,
            Call::RecurrentCell { kernel, .. } => *kernel,
            Call::Train(t) => t.kernel(),
        }
    }

    /// The kernel with its operation, as printed in reports (`unary(exp)`, `softmax(log)`).
    pub fn label(&self) -> String {
        let k = self.kernel().name();
        match self {
            Call::Unary { op, .. } | Call::UnaryBackward { op, .. } => format!("{k}({op:?})"),
            Call::Binary { op, .. } => format!("{k}({})", op.name()),
            Call::Softmax { log: true, .. } | Call::SoftmaxBackward { log: true, .. } => {
                format!("{k}(log)")
            }
            _ => k.to_string(),
        }
    }
}

/// A test case: a call and the seed and special-value density of its data.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// The kernel call.
    pub call: Call,
    /// Seed of the input values.
    pub seed: u64,
    /// Density of special values in the inputs.
    pub specials: Specials,
}

/// Sizes and counts of a suite run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Random cases per kernel (the unary kernels also run every op of [`unary_ops`]
    /// once, the sum every subset of the dimensions of each case).
    pub cases: usize,
    /// Seed of the case generator.
    pub seed: u64,
    /// Upper bound on the elements of one input (a few cases go above the parallel
    /// chunk sizes of typical backends up to this bound).
    pub max_elems: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            cases: 128,
            seed: 0x5EED_C0DE,
            max_elems: 1 << 16,
        }
    }
}

impl Config {
    /// A smaller run for debug builds and quick checks.
    pub fn quick() -> Self {
        Config {
            cases: 8,
            seed: 0x5EED_C0DE,
            max_elems: 1 << 13,
        }
    }
}
