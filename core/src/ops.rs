//! The element-wise operations that kernels implement (usable without `alloc`).
//!
//! # The table of unary operators
//!
//! [`UnaryOp`] and everything the crates know about each of its operators except the
//! formulas come from one table, the invocation of `unary_ops!` below. A row gives
//!
//! - the variant with its documentation and its scalar parameters (`f32`s);
//! - its name ([`UnaryOp::name`]: error messages, the autograd record);
//! - what its backward rule reads besides the incoming gradient
//!   ([`UnaryOp::backward_reads`]: the forward input, the output or neither), which tells
//!   autograd what to keep for the backward pass;
//! - the parameters the conformance kit tries ([`UnaryOp::SAMPLES`]; a parameterless
//!   operator is tried once): special exponents, infinite and crossed bounds, signed
//!   zeros and non-finite scalars.
//!
//! The forward and backward formulas are written once, generic over a SIMD lane, in
//! `exactgrad_backends::elementwise` (`backends/src/elementwise.rs`); their `f32`
//! instantiation is the scalar reference. Their definition in words is
//! `docs/arithmetic.md` §3.

/// What the backward rule of a [`UnaryOp`] reads besides the incoming gradient `g`: the
/// kernel `unary_backward(op, x, y, g)` may be passed anything (in practice `g`) for the
/// forward value the rule does not read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackwardReads {
    /// The forward input `x`.
    Input,
    /// The forward output `y`.
    Output,
    /// Neither: the gradient depends only on `g` and the operator's parameters.
    Neither,
}

/// Generates [`UnaryOp`], its names, what each backward rule reads and the samples of the
/// conformance kit from one table (see the module documentation).
macro_rules! unary_ops {
    ($(
        $(#[doc = $doc:literal])*
        $variant:ident $(($($param:ty),+))? => $name:literal, reads $reads:ident
            $(, samples [$($sample:tt),+ $(,)?])?;
    )+) => {
        /// An element-wise operation of one operand (with its scalar parameters).
        ///
        /// Generated from the table of `core/src/ops.rs`; the formulas are in
        /// `backends/src/elementwise.rs`.
        #[derive(Clone, Copy, Debug, PartialEq)]
        pub enum UnaryOp {
            $($(#[doc = $doc])* $variant $(($($param),+))?,)+
        }

        impl UnaryOp {
            /// The name of every operator, in the order of the table.
            pub const NAMES: &'static [&'static str] = &[$($name),+];

            /// Every operator with the parameters the conformance kit tries, in the order
            /// of the table (a parameterless operator once).
            pub const SAMPLES: &'static [UnaryOp] = &flatten::<{ count(SAMPLE_GROUPS) }>(
                SAMPLE_GROUPS,
            );

            /// The operator name used in error messages.
            pub fn name(&self) -> &'static str {
                match self {
                    $(UnaryOp::$variant { .. } => $name,)+
                }
            }

            /// What the backward rule reads besides the incoming gradient.
            pub fn backward_reads(&self) -> BackwardReads {
                match self {
                    $(UnaryOp::$variant { .. } => BackwardReads::$reads,)+
                }
            }
        }

        /// [`UnaryOp::SAMPLES`] grouped by operator.
        const SAMPLE_GROUPS: &[&[UnaryOp]] = &[
            $(unary_ops!(@samples $variant $(; $($sample),+)?),)+
        ];
    };
    (@samples $variant:ident) => {
        &[UnaryOp::$variant]
    };
    (@samples $variant:ident; $($sample:tt),+) => {
        &[$(UnaryOp::$variant $sample),+]
    };
}

const INF: f32 = f32::INFINITY;
const NAN: f32 = f32::NAN;

unary_ops! {
    /// `-x`.
    Neg => "neg", reads Neither;
    /// `|x|`.
    Abs => "abs", reads Input;
    /// `max(x, 0)`; NaN stays NaN.
    Relu => "relu", reads Output;
    /// `x` for `x > 0`, else `slope * x`.
    LeakyRelu(f32) => "leaky_relu", reads Input,
        samples [(0.01), (-0.5), (0.0), (3.0)];
    /// `1 / (1 + exp(-x))`.
    Sigmoid => "sigmoid", reads Output;
    /// Hyperbolic tangent.
    Tanh => "tanh", reads Output;
    /// `exp(x)`.
    Exp => "exp", reads Output;
    /// Natural logarithm.
    Log => "log", reads Input;
    /// IEEE square root.
    Sqrt => "sqrt", reads Output;
    /// GELU, erf form: `x/2 (1 + erf(x/√2))`.
    GeluErf => "gelu", reads Input;
    /// GELU, tanh form: `x/2 (1 + tanh(√(2/π)(x + 0.044715 x³)))`.
    GeluTanh => "gelu_tanh", reads Input;
    /// `x^p` for a scalar exponent `p`.
    Pow(f32) => "pow", reads Input,
        samples [
            (0.0), (1.0), (2.0), (3.0), (7.0), (-1.0), (-2.0), (0.5), (-0.5), (64.0), (-64.0),
            (65.0), (2.5), (-1.5), (1e-3), (1e9), (INF), (-INF), (NAN),
        ];
    /// `min(max(x, lo), hi)`; NaN stays NaN.
    Clamp(f32, f32) => "clamp", reads Input,
        samples [
            (-1.0, 1.0), (-INF, 0.5), (0.5, INF), (-INF, INF), (1.0, -1.0), (0.0, 0.0),
            (NAN, 1.0),
        ];
    /// `x + c`.
    AddScalar(f32) => "add_scalar", reads Neither, samples [(1.5), (-0.0), (INF), (1e-40)];
    /// `x * c`.
    MulScalar(f32) => "mul_scalar", reads Neither, samples [(-2.0), (0.0), (1e-30), (NAN)];
}

impl UnaryOp {
    /// The operator's scalar parameters in the order of its variant (`[slope]`, `[p]`,
    /// `[lo, hi]`, `[c]`, or none), as an array and a count; with the name, what
    /// [`UnaryOp::from_parts`] needs to make the operator again (a trace records both).
    pub fn params(&self) -> ([f32; 2], usize) {
        match *self {
            UnaryOp::LeakyRelu(a)
            | UnaryOp::Pow(a)
            | UnaryOp::AddScalar(a)
            | UnaryOp::MulScalar(a) => ([a, 0.0], 1),
            UnaryOp::Clamp(lo, hi) => ([lo, hi], 2),
            _ => ([0.0; 2], 0),
        }
    }

    /// The operator named `name` ([`UnaryOp::name`]) with the scalar parameters `params`
    /// ([`UnaryOp::params`]), or `None` when the name is unknown or the count is wrong.
    pub fn from_parts(name: &str, params: &[f32]) -> Option<UnaryOp> {
        let template = *Self::SAMPLES.iter().find(|op| op.name() == name)?;
        let (_, n) = template.params();
        if params.len() != n {
            return None;
        }
        Some(match template {
            UnaryOp::LeakyRelu(_) => UnaryOp::LeakyRelu(params[0]),
            UnaryOp::Pow(_) => UnaryOp::Pow(params[0]),
            UnaryOp::AddScalar(_) => UnaryOp::AddScalar(params[0]),
            UnaryOp::MulScalar(_) => UnaryOp::MulScalar(params[0]),
            UnaryOp::Clamp(..) => UnaryOp::Clamp(params[0], params[1]),
            op => op,
        })
    }
}

/// The number of samples in all groups.
const fn count(groups: &[&[UnaryOp]]) -> usize {
    let (mut n, mut i) = (0, 0);
    while i < groups.len() {
        n += groups[i].len();
        i += 1;
    }
    n
}

/// The groups concatenated (`N` is their total length).
const fn flatten<const N: usize>(groups: &[&[UnaryOp]]) -> [UnaryOp; N] {
    let mut out = [UnaryOp::Neg; N];
    let (mut k, mut i) = (0, 0);
    while i < groups.len() {
        let mut j = 0;
        while j < groups[i].len() {
            out[k] = groups[i][j];
            k += 1;
            j += 1;
        }
        i += 1;
    }
    out
}

/// An element-wise operation of two operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b`.
    Div,
}

impl BinaryOp {
    /// Every binary operation.
    pub const ALL: [BinaryOp; 4] = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div];

    /// The operator name used in error messages.
    pub fn name(&self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operator_has_a_sample_and_a_unique_name() {
        for (i, name) in UnaryOp::NAMES.iter().enumerate() {
            assert!(
                UnaryOp::SAMPLES.iter().any(|op| op.name() == *name),
                "no sample of {name}"
            );
            assert!(!UnaryOp::NAMES[..i].contains(name), "{name} twice");
        }
        for op in UnaryOp::SAMPLES {
            assert!(UnaryOp::NAMES.contains(&op.name()), "{op:?}");
        }
    }

    #[test]
    fn every_operator_is_made_again_from_its_name_and_parameters() {
        for op in UnaryOp::SAMPLES {
            let (p, n) = op.params();
            let again = UnaryOp::from_parts(op.name(), &p[..n]).expect("known");
            // Bit-equal parameters (NaN samples included).
            assert_eq!(format!("{again:?}"), format!("{op:?}"));
            assert_eq!(again.params().1, n);
            assert!(UnaryOp::from_parts(op.name(), &[0.0; 3]).is_none());
        }
        assert!(UnaryOp::from_parts("no_such_op", &[]).is_none());
    }

    #[test]
    fn samples_are_the_groups_in_table_order() {
        // Equal, or both with a NaN parameter (NaN != NaN) and the same operator.
        #[allow(clippy::eq_op)]
        let same = |a: &UnaryOp, b: &UnaryOp| a == b || (a != a && b != b && a.name() == b.name());
        let mut k = 0;
        for group in SAMPLE_GROUPS {
            for op in *group {
                assert!(same(&UnaryOp::SAMPLES[k], op), "sample {k}: {op:?}");
                k += 1;
            }
        }
        assert_eq!(k, UnaryOp::SAMPLES.len());
        assert_eq!(SAMPLE_GROUPS.len(), UnaryOp::NAMES.len());
        for (group, name) in SAMPLE_GROUPS.iter().zip(UnaryOp::NAMES) {
            assert!(!group.is_empty() && group.iter().all(|op| op.name() == *name));
        }
        assert_eq!(UnaryOp::SAMPLES[0], UnaryOp::Neg);
        assert_eq!(UnaryOp::Clamp(0.0, 1.0).name(), "clamp");
        assert_eq!(UnaryOp::GeluErf.name(), "gelu");
        assert_eq!(UnaryOp::Exp.backward_reads(), BackwardReads::Output);
        assert_eq!(UnaryOp::Pow(2.0).backward_reads(), BackwardReads::Input);
        assert_eq!(
            UnaryOp::MulScalar(2.0).backward_reads(),
            BackwardReads::Neither
        );
    }
}
