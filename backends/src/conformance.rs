//! The conformance kit: the differential suite that checks a backend kernel by kernel
//! against a reference backend, for any downstream crate.
//!
//! A backend conforms when every kernel of [`Backend`] gives the reference's bits on
//! random inputs: random shapes (0- and 1-sized dimensions, lengths 1 to 150 around every
//! lane width), random strided layouts (permuted, stepped, offset and broadcast views) and
//! random values mixed with NaN (several payloads), ±∞, ±0, subnormals and the limits of
//! the transcendental functions. An exact-mode backend must match bit for bit; a
//! fast-mode one must too, except that any NaN equals any NaN (fast mode does not
//! canonicalise NaN).
//!
//! The usual reference is `ScalarRefBackend` for exact mode and `FastScalarRefBackend`
//! for fast mode. A downstream crate runs the whole suite with one call,
//!
//! ```
//! use exactgrad_backends::conformance::{self, Config};
//! use exactgrad_backends::ScalarRefBackend;
//!
//! # let my_backend = ScalarRefBackend;
//! let report = conformance::check_backend(&my_backend, &ScalarRefBackend, &Config::quick())
//!     .unwrap_or_else(|m| panic!("{m}"));
//! assert!(report.total() > 0);
//! ```
//!
//! or generates one `#[test]` per kernel with [`conformance_tests!`](crate::conformance_tests).
//! A failure is a (boxed) [`Mismatch`]: the kernel, the backend, the case (shapes, layouts, op)
//! and the first differing element with both values and their bits. The pieces (case
//! generation, [`check_case`], [`first_difference`]) are public so that a property-test
//! driver can generate cases its own way.

use exactgrad_core::backend::MatmulSpec;
use exactgrad_core::{Backend, BinaryOp, ComputeMode, Layout, Philox, UnaryOp};
use std::fmt;
use std::string::{String, ToString};
use std::vec::Vec;

/// The kernels of [`Backend`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// [`Backend::copy_strided`].
    CopyStrided,
    /// [`Backend::unary`].
    Unary,
    /// [`Backend::unary_backward`].
    UnaryBackward,
    /// [`Backend::binary`].
    Binary,
    /// [`Backend::select`].
    Select,
    /// [`Backend::sum`].
    Sum,
    /// [`Backend::matmul`].
    Matmul,
    /// [`Backend::softmax`].
    Softmax,
    /// [`Backend::softmax_backward`].
    SoftmaxBackward,
}

impl Kernel {
    /// Every kernel, in the order of the trait.
    pub const ALL: [Kernel; 9] = [
        Kernel::CopyStrided,
        Kernel::Unary,
        Kernel::UnaryBackward,
        Kernel::Binary,
        Kernel::Select,
        Kernel::Sum,
        Kernel::Matmul,
        Kernel::Softmax,
        Kernel::SoftmaxBackward,
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
            Kernel::Softmax => "softmax",
            Kernel::SoftmaxBackward => "softmax_backward",
        }
    }
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Every [`UnaryOp`] with the parameters the suite tries (special exponents, infinite and
/// crossed clamp bounds, signed zeros and non-finite scalars).
pub fn unary_ops() -> Vec<UnaryOp> {
    let inf = f32::INFINITY;
    let mut ops = vec![
        UnaryOp::Neg,
        UnaryOp::Abs,
        UnaryOp::Relu,
        UnaryOp::Sigmoid,
        UnaryOp::Tanh,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sqrt,
        UnaryOp::GeluErf,
        UnaryOp::GeluTanh,
    ];
    for s in [0.01, -0.5, 0.0, 3.0] {
        ops.push(UnaryOp::LeakyRelu(s));
    }
    for p in [
        0.0,
        1.0,
        2.0,
        3.0,
        7.0,
        -1.0,
        -2.0,
        0.5,
        -0.5,
        64.0,
        -64.0,
        65.0,
        2.5,
        -1.5,
        1e-3,
        1e9,
        inf,
        -inf,
        f32::NAN,
    ] {
        ops.push(UnaryOp::Pow(p));
    }
    for (lo, hi) in [
        (-1.0, 1.0),
        (-inf, 0.5),
        (0.5, inf),
        (-inf, inf),
        (1.0, -1.0),
        (0.0, 0.0),
        (f32::NAN, 1.0),
    ] {
        ops.push(UnaryOp::Clamp(lo, hi));
    }
    for c in [1.5, -0.0, inf, 1e-40] {
        ops.push(UnaryOp::AddScalar(c));
    }
    for c in [-2.0, 0.0, 1e-30, f32::NAN] {
        ops.push(UnaryOp::MulScalar(c));
    }
    ops
}

/// Every [`BinaryOp`].
pub const BINARY_OPS: [BinaryOp; 4] = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div];

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
/// random finite bit patterns, and special values at the given density.
pub fn values(n: usize, seed: u64, specials: Specials) -> Vec<f32> {
    let mut r = Philox::new(seed);
    let one_in = specials.one_in();
    (0..n)
        .map(|_| {
            if one_in > 0 && r.below(one_in) == 0 {
                return f32::from_bits(SPECIAL_BITS[r.below(SPECIAL_BITS.len() as u32) as usize]);
            }
            match r.below(20) {
                0..=13 => r.uniform(-8.0, 8.0),
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
    fn layout(&self, shape: &[usize]) -> (Layout, usize) {
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
    /// `matmul` of `batch` products `m×k · k×n`.
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
}

impl Call {
    /// The kernel this call exercises.
    pub fn kernel(&self) -> Kernel {
        match self {
            Call::CopyStrided { .. } => Kernel::CopyStrided,
            Call::Unary { .. } => Kernel::Unary,
            Call::UnaryBackward { .. } => Kernel::UnaryBackward,
            Call::Binary { .. } => Kernel::Binary,
            Call::Select { .. } => Kernel::Select,
            Call::Sum { .. } => Kernel::Sum,
            Call::Matmul { .. } => Kernel::Matmul,
            Call::Softmax { .. } => Kernel::Softmax,
            Call::SoftmaxBackward { .. } => Kernel::SoftmaxBackward,
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

/// Lane widths (in f32) of common SIMD paths; random lengths cluster around them.
pub const LANE_WIDTHS: [usize; 6] = [4, 8, 16, 32, 64, 128];

/// A random dimension length: 0, 1, one off a lane width, or uniform in 1..=150.
pub fn random_len(rng: &mut Philox) -> usize {
    match rng.below(20) {
        0 => 0,
        1..=3 => 1,
        4..=10 => {
            let w = LANE_WIDTHS[rng.below(LANE_WIDTHS.len() as u32) as usize];
            w + rng.below(3) as usize - 1
        }
        _ => 1 + rng.below(150) as usize,
    }
}

/// A random shape of rank 0 to 4 with at most `max_elems` elements.
pub fn random_shape(rng: &mut Philox, max_elems: usize) -> Vec<usize> {
    let rank = rng.below(5) as usize;
    let mut s: Vec<usize> = (0..rank).map(|_| random_len(rng)).collect();
    shrink_to(&mut s, max_elems);
    s
}

/// Halves the largest dimension until the product is at most `max`.
fn shrink_to(s: &mut [usize], max: usize) {
    while s.iter().product::<usize>() > max.max(1) {
        let i = (0..s.len()).max_by_key(|&i| s[i]).unwrap();
        s[i] /= 2;
    }
}

/// The density of special values of a random case (most cases have some).
fn random_specials(rng: &mut Philox) -> Specials {
    Specials::ALL[rng.below(4) as usize]
}

/// A random case of `kernel`. About one case in eight is large (up to `max_elems`).
pub fn random_case(kernel: Kernel, rng: &mut Philox, config: &Config) -> Case {
    let big = rng.below(8) == 0;
    let small = (config.max_elems / 8).max(1);
    let limit = if big { config.max_elems } else { small };
    let len = |rng: &mut Philox| {
        if big {
            small + rng.below((limit - small) as u32 + 1) as usize
        } else {
            random_len(rng)
        }
    };
    let ops = unary_ops();
    let call = match kernel {
        Kernel::CopyStrided => {
            let shape = random_shape(rng, limit);
            Call::CopyStrided {
                src: View::random(&shape, rng),
            }
        }
        Kernel::Unary => Call::Unary {
            op: ops[rng.below(ops.len() as u32) as usize],
            len: len(rng),
        },
        Kernel::UnaryBackward => Call::UnaryBackward {
            op: ops[rng.below(ops.len() as u32) as usize],
            len: len(rng),
            y_from_forward: rng.below(2) == 0,
        },
        Kernel::Binary => {
            let shape = random_shape(rng, limit);
            Call::Binary {
                op: BINARY_OPS[rng.below(4) as usize],
                a: Operand::random(&shape, rng),
                b: Operand::random(&shape, rng),
                shape,
            }
        }
        Kernel::Select => {
            let shape = random_shape(rng, limit);
            Call::Select {
                cond: Operand::random(&shape, rng),
                a: Operand::random(&shape, rng),
                b: Operand::random(&shape, rng),
                shape,
            }
        }
        Kernel::Sum => {
            let shape = random_shape(rng, limit);
            Call::Sum {
                reduce: shape.iter().map(|_| rng.below(2) == 0).collect(),
                x: View::random(&shape, rng),
            }
        }
        Kernel::Matmul => {
            let batch = 1 + rng.below(3) as usize;
            let mut dims = [random_len(rng), random_len(rng), random_len(rng)];
            // The reference is a plain triple loop: keep the product count moderate.
            while batch * dims.iter().product::<usize>() > 64 * limit.max(1 << 12) {
                let i = (0..3).max_by_key(|&i| dims[i]).unwrap();
                dims[i] /= 2;
            }
            Call::Matmul {
                batch,
                m: dims[0],
                k: dims[1],
                n: dims[2],
                a_trans: rng.below(2) == 0,
                b_trans: rng.below(2) == 0,
                a_bcast: rng.below(4) == 0,
                b_bcast: rng.below(4) == 0,
                offsets: (rng.below(4) as usize, rng.below(4) as usize),
            }
        }
        Kernel::Softmax | Kernel::SoftmaxBackward => {
            let mut s = [random_len(rng), random_len(rng)];
            if big {
                s[0] = s[0].max(1) * 64;
            }
            shrink_to(&mut s, limit);
            let log = rng.below(2) == 0;
            if kernel == Kernel::Softmax {
                Call::Softmax {
                    rows: s[0],
                    cols: s[1],
                    log,
                }
            } else {
                Call::SoftmaxBackward {
                    rows: s[0],
                    cols: s[1],
                    log,
                    y_from_forward: rng.below(4) != 0,
                }
            }
        }
    };
    Case {
        call,
        seed: rng.next_u64(),
        specials: random_specials(rng),
    }
}

/// The inputs of a case, built once and shared by every backend under test.
#[derive(Clone, Debug)]
pub struct Inputs {
    bufs: Vec<Vec<f32>>,
    layouts: Vec<Layout>,
    spec: Option<MatmulSpec>,
    out_len: usize,
    shape: String,
}

impl Inputs {
    /// The buffers, layouts and output length of `case`; `y` of the backward kernels
    /// comes from `reference` when the case asks for a forward output.
    pub fn new<R: Backend>(case: &Case, reference: &R) -> Self {
        let seed = case.seed;
        let sp = case.specials;
        let vals = |i: u64, n: usize| {
            values(
                n,
                seed.wrapping_add(i.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
                sp,
            )
        };
        let mut inp = Inputs {
            bufs: Vec::new(),
            layouts: Vec::new(),
            spec: None,
            out_len: 0,
            shape: String::new(),
        };
        match &case.call {
            Call::CopyStrided { src } => {
                let (l, n) = src.layout();
                inp.shape = format!("{:?} strides {:?} offset {}", l.shape, l.strides, l.offset);
                inp.out_len = l.numel();
                inp.bufs.push(vals(0, n));
                inp.layouts.push(l);
            }
            Call::Unary { len, .. } => {
                inp.shape = format!("[{len}]");
                inp.out_len = *len;
                inp.bufs.push(vals(0, *len));
            }
            Call::UnaryBackward {
                op,
                len,
                y_from_forward,
            } => {
                inp.shape = format!("[{len}]");
                inp.out_len = *len;
                let x = vals(0, *len);
                let y = if *y_from_forward {
                    let mut y = vec![0.0; *len];
                    reference.unary(*op, &x, &mut y);
                    y
                } else {
                    vals(1, *len)
                };
                inp.bufs.extend([x, y, vals(2, *len)]);
            }
            Call::Binary { shape, a, b, .. } => {
                let (la, na) = a.layout(shape);
                let (lb, nb) = b.layout(shape);
                inp.shape = format!(
                    "{shape:?}; a strides {:?} offset {}; b strides {:?} offset {}",
                    la.strides, la.offset, lb.strides, lb.offset
                );
                inp.out_len = shape.iter().product();
                inp.bufs.extend([vals(0, na), vals(1, nb)]);
                inp.layouts.extend([la, lb]);
            }
            Call::Select { shape, cond, a, b } => {
                let (lc, nc) = cond.layout(shape);
                let (la, na) = a.layout(shape);
                let (lb, nb) = b.layout(shape);
                inp.shape = format!(
                    "{shape:?}; cond strides {:?}; a strides {:?}; b strides {:?}",
                    lc.strides, la.strides, lb.strides
                );
                inp.out_len = shape.iter().product();
                let mut c = vals(0, nc);
                let mut r = Philox::new(seed ^ 0xC0DD);
                for v in c.iter_mut() {
                    match r.below(4) {
                        0 => *v = 0.0,
                        1 => *v = -0.0,
                        _ => {}
                    }
                }
                inp.bufs.extend([c, vals(1, na), vals(2, nb)]);
                inp.layouts.extend([lc, la, lb]);
            }
            Call::Sum { x, reduce } => {
                let (l, n) = x.layout();
                assert_eq!(
                    reduce.len(),
                    l.rank(),
                    "Sum: reduce flags do not match rank"
                );
                inp.shape = format!(
                    "{:?} strides {:?} offset {} reduce {:?}",
                    l.shape, l.strides, l.offset, reduce
                );
                inp.out_len = (0..l.rank())
                    .filter(|&d| !reduce[d])
                    .map(|d| l.shape[d])
                    .product();
                inp.bufs.push(vals(0, n));
                inp.layouts.push(l);
            }
            Call::Matmul {
                batch,
                m,
                k,
                n,
                a_trans,
                b_trans,
                a_bcast,
                b_bcast,
                offsets,
            } => {
                let (batch, m, k, n) = (*batch, *m, *k, *n);
                let a_mats = if *a_bcast { 1 } else { batch };
                let b_mats = if *b_bcast { 1 } else { batch };
                let a_strides = [
                    if *a_bcast { 0 } else { m * k },
                    if *a_trans { 1 } else { k },
                    if *a_trans { m } else { 1 },
                ];
                let b_strides = [
                    if *b_bcast { 0 } else { k * n },
                    if *b_trans { 1 } else { n },
                    if *b_trans { k } else { 1 },
                ];
                let spec = MatmulSpec {
                    batch,
                    m,
                    k,
                    n,
                    a_offset: offsets.0,
                    a_strides,
                    b_offset: offsets.1,
                    b_strides,
                };
                inp.shape = format!(
                    "batch {batch} [{m}×{k}]·[{k}×{n}] a strides {a_strides:?} b strides {b_strides:?}"
                );
                inp.out_len = batch * m * n;
                inp.bufs.extend([
                    vals(0, offsets.0 + a_mats * m * k),
                    vals(1, offsets.1 + b_mats * k * n),
                ]);
                inp.spec = Some(spec);
            }
            Call::Softmax { rows, cols, .. } => {
                inp.shape = format!("[{rows}, {cols}]");
                inp.out_len = rows * cols;
                inp.bufs.push(vals(0, rows * cols));
            }
            Call::SoftmaxBackward {
                rows,
                cols,
                log,
                y_from_forward,
            } => {
                inp.shape = format!("[{rows}, {cols}]");
                let len = rows * cols;
                inp.out_len = len;
                let y = if *y_from_forward {
                    let x = vals(0, len);
                    let mut y = vec![0.0; len];
                    reference.softmax(&x, *rows, *cols, *log, &mut y);
                    y
                } else {
                    vals(0, len)
                };
                inp.bufs.extend([y, vals(1, len)]);
            }
        }
        inp
    }

    /// The shapes and layouts of the case, as printed in reports.
    pub fn shape(&self) -> &str {
        &self.shape
    }

    /// Runs the case's kernel on `backend` and returns its output (the output buffer is
    /// pre-filled with [`UNWRITTEN`], so an element the kernel skips shows up).
    pub fn run<B: Backend>(&self, call: &Call, backend: &B) -> Vec<f32> {
        let mut out = vec![UNWRITTEN; self.out_len];
        let (bf, l) = (&self.bufs, &self.layouts);
        match call {
            Call::CopyStrided { .. } => backend.copy_strided(&bf[0], &l[0], &mut out),
            Call::Unary { op, .. } => backend.unary(*op, &bf[0], &mut out),
            Call::UnaryBackward { op, .. } => {
                backend.unary_backward(*op, &bf[0], &bf[1], &bf[2], &mut out)
            }
            Call::Binary { op, .. } => backend.binary(*op, &bf[0], &l[0], &bf[1], &l[1], &mut out),
            Call::Select { .. } => {
                backend.select(&bf[0], &l[0], &bf[1], &l[1], &bf[2], &l[2], &mut out)
            }
            Call::Sum { reduce, .. } => backend.sum(&bf[0], &l[0], reduce, &mut out),
            Call::Matmul { .. } => {
                let spec = self.spec.as_ref().expect("matmul spec");
                backend.matmul(spec, &bf[0], &bf[1], &mut out)
            }
            Call::Softmax { rows, cols, log } => {
                backend.softmax(&bf[0], *rows, *cols, *log, &mut out)
            }
            Call::SoftmaxBackward {
                rows, cols, log, ..
            } => backend.softmax_backward(&bf[0], &bf[1], *rows, *cols, *log, &mut out),
        }
        out
    }
}

/// The value output buffers hold before a kernel runs (a finite pattern no kernel of the
/// suite produces by chance).
pub const UNWRITTEN: f32 = f32::from_bits(0x7F7F_A5A5);

/// The index of the first element where `got` and `want` differ under `mode`'s rule
/// (exact: bits; fast: bits, but any NaN equals any NaN), or the shorter length if the
/// lengths differ.
pub fn first_difference(mode: ComputeMode, got: &[f32], want: &[f32]) -> Option<usize> {
    let same = |a: f32, b: f32| {
        a.to_bits() == b.to_bits() || (mode == ComputeMode::Fast && a.is_nan() && b.is_nan())
    };
    got.iter()
        .zip(want)
        .position(|(&a, &b)| !same(a, b))
        .or_else(|| (got.len() != want.len()).then(|| got.len().min(want.len())))
}

/// A kernel whose output differs from the reference's.
#[derive(Clone, Debug, PartialEq)]
pub struct Mismatch {
    /// The kernel and its operation (`unary(Exp)`, `softmax(log)`, …).
    pub kernel: String,
    /// The name of the backend under test.
    pub backend: String,
    /// The name of the reference backend.
    pub reference: String,
    /// Shapes and layouts of the inputs.
    pub shape: String,
    /// The whole case (to reproduce it with [`check_case`]).
    pub case: Case,
    /// Index of the first differing output element (row-major).
    pub index: usize,
    /// The backend's value there (`None` if its output is too short).
    pub got: Option<f32>,
    /// The reference's value there (`None` if its output is too short).
    pub want: Option<f32>,
}

fn show(v: Option<f32>) -> String {
    match v {
        Some(v) => format!("{v:e} (0x{:08X})", v.to_bits()),
        None => "nothing (output too short)".to_string(),
    }
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "kernel {} on backend {} differs from {}: shape {}; first difference at element {}: got {}, want {}; case {:?}",
            self.kernel,
            self.backend,
            self.reference,
            self.shape,
            self.index,
            show(self.got),
            show(self.want),
            self.case
        )
    }
}

impl std::error::Error for Mismatch {}

/// Checks one case on every backend of `backends` against `reference` (whose output is
/// computed once).
pub fn check_case_on<B: Backend, R: Backend>(
    backends: &[B],
    reference: &R,
    case: &Case,
) -> Result<(), Box<Mismatch>> {
    let inputs = Inputs::new(case, reference);
    let want = inputs.run(&case.call, reference);
    for b in backends {
        let got = inputs.run(&case.call, b);
        if let Some(i) = first_difference(b.mode(), &got, &want) {
            return Err(Box::new(Mismatch {
                kernel: case.call.label(),
                backend: b.name(),
                reference: reference.name(),
                shape: inputs.shape().to_string(),
                case: case.clone(),
                index: i,
                got: got.get(i).copied(),
                want: want.get(i).copied(),
            }));
        }
    }
    Ok(())
}

/// Checks one case on `backend` against `reference`.
pub fn check_case<B: Backend, R: Backend>(
    backend: &B,
    reference: &R,
    case: &Case,
) -> Result<(), Box<Mismatch>> {
    check_case_on(core::slice::from_ref(backend), reference, case)
}

/// The cases of one kernel for `config`: `config.cases` random ones; for the unary
/// kernels also every op of [`unary_ops`] at a length around a lane width; for the sum,
/// every subset of the dimensions of each random view.
pub fn kernel_cases(kernel: Kernel, config: &Config) -> Vec<Case> {
    let mut rng = Philox::new(config.seed ^ (kernel as u64).wrapping_mul(0xA24B_AED4_963E_E407));
    let mut cases: Vec<Case> = (0..config.cases)
        .map(|_| random_case(kernel, &mut rng, config))
        .collect();
    match kernel {
        Kernel::Unary | Kernel::UnaryBackward => {
            for (i, op) in unary_ops().into_iter().enumerate() {
                let len = LANE_WIDTHS[i % LANE_WIDTHS.len()] + i % 3 + 3 * (i % 2);
                let call = if kernel == Kernel::Unary {
                    Call::Unary { op, len }
                } else {
                    Call::UnaryBackward {
                        op,
                        len,
                        y_from_forward: i % 2 == 0,
                    }
                };
                cases.push(Case {
                    call,
                    seed: rng.next_u64(),
                    specials: Specials::Some,
                });
            }
        }
        Kernel::Sum => {
            let extra: Vec<Case> = cases
                .iter()
                .flat_map(|c| {
                    let Call::Sum { x, .. } = &c.call else {
                        unreachable!()
                    };
                    let r = x.shape.len();
                    (0..1usize << r).map(move |mask| Case {
                        call: Call::Sum {
                            x: x.clone(),
                            reduce: (0..r).map(|d| mask >> d & 1 == 1).collect(),
                        },
                        ..c.clone()
                    })
                })
                .collect();
            cases = extra;
        }
        _ => {}
    }
    cases
}

/// Runs every case of `kernel` on every backend of `backends`; returns the number of
/// cases.
pub fn check_kernel_on<B: Backend, R: Backend>(
    backends: &[B],
    reference: &R,
    kernel: Kernel,
    config: &Config,
) -> Result<usize, Box<Mismatch>> {
    let cases = kernel_cases(kernel, config);
    for c in &cases {
        check_case_on(backends, reference, c)?;
    }
    Ok(cases.len())
}

/// Runs every case of `kernel` on `backend`; returns the number of cases.
pub fn check_kernel<B: Backend, R: Backend>(
    backend: &B,
    reference: &R,
    kernel: Kernel,
    config: &Config,
) -> Result<usize, Box<Mismatch>> {
    check_kernel_on(core::slice::from_ref(backend), reference, kernel, config)
}

/// The number of cases each kernel ran.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Cases per kernel, in the order of [`Kernel::ALL`].
    pub cases: Vec<(Kernel, usize)>,
}

impl Report {
    /// Total number of cases.
    pub fn total(&self) -> usize {
        self.cases.iter().map(|c| c.1).sum()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} cases:", self.total())?;
        for (k, n) in &self.cases {
            write!(f, " {k} {n}")?;
        }
        Ok(())
    }
}

/// Runs the whole suite (every kernel) on every backend of `backends`.
pub fn check_backends<B: Backend, R: Backend>(
    backends: &[B],
    reference: &R,
    config: &Config,
) -> Result<Report, Box<Mismatch>> {
    let mut report = Report::default();
    for k in Kernel::ALL {
        let n = check_kernel_on(backends, reference, k, config)?;
        report.cases.push((k, n));
    }
    Ok(report)
}

/// Runs the whole suite (every kernel) on `backend` against `reference`.
pub fn check_backend<B: Backend, R: Backend>(
    backend: &B,
    reference: &R,
    config: &Config,
) -> Result<Report, Box<Mismatch>> {
    check_backends(core::slice::from_ref(backend), reference, config)
}

/// Runs the whole suite and panics with the first [`Mismatch`] if there is one.
pub fn assert_conforms<B: Backend, R: Backend>(
    backend: &B,
    reference: &R,
    config: &Config,
) -> Report {
    match check_backend(backend, reference, config) {
        Ok(r) => r,
        Err(m) => panic!("{m}"),
    }
}

/// Generates one `#[test]` per kernel that runs the conformance suite on a backend.
///
/// `conformance_tests!(module_name, backend_expr, reference_expr)` or, with a
/// [`Config`], `conformance_tests!(module_name, backend_expr, reference_expr, config_expr)`.
/// The expressions are evaluated in each test.
///
/// ```no_run
/// // In a downstream crate's tests/: one #[test] per kernel, here for ExactBackend.
/// exactgrad_backends::conformance_tests!(
///     exact_backend_conforms,
///     exactgrad_backends::ExactBackend::with_threads(3),
///     exactgrad_backends::ScalarRefBackend
/// );
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! conformance_tests {
    ($name:ident, $backend:expr, $reference:expr) => {
        $crate::conformance_tests!(
            $name,
            $backend,
            $reference,
            $crate::conformance::Config::default()
        );
    };
    ($name:ident, $backend:expr, $reference:expr, $config:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            use $crate::conformance::{check_kernel, Kernel};

            fn run(kernel: Kernel) {
                if let Err(m) = check_kernel(&$backend, &$reference, kernel, &$config) {
                    panic!("{m}");
                }
            }

            #[test]
            fn copy_strided() {
                run(Kernel::CopyStrided)
            }
            #[test]
            fn unary() {
                run(Kernel::Unary)
            }
            #[test]
            fn unary_backward() {
                run(Kernel::UnaryBackward)
            }
            #[test]
            fn binary() {
                run(Kernel::Binary)
            }
            #[test]
            fn select() {
                run(Kernel::Select)
            }
            #[test]
            fn sum() {
                run(Kernel::Sum)
            }
            #[test]
            fn matmul() {
                run(Kernel::Matmul)
            }
            #[test]
            fn softmax() {
                run(Kernel::Softmax)
            }
            #[test]
            fn softmax_backward() {
                run(Kernel::SoftmaxBackward)
            }
        }
    };
}
