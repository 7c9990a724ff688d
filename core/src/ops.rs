//! The element-wise operations that kernels implement (usable without `alloc`).

/// An element-wise operation of one operand (with its scalar parameters).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UnaryOp {
    /// `-x`.
    Neg,
    /// `|x|`.
    Abs,
    /// `max(x, 0)`; NaN stays NaN.
    Relu,
    /// `x` for `x > 0`, else `slope * x`.
    LeakyRelu(f32),
    /// `1 / (1 + exp(-x))`.
    Sigmoid,
    /// Hyperbolic tangent.
    Tanh,
    /// `exp(x)`.
    Exp,
    /// Natural logarithm.
    Log,
    /// IEEE square root.
    Sqrt,
    /// GELU, erf form: `x/2 (1 + erf(x/√2))`.
    GeluErf,
    /// GELU, tanh form: `x/2 (1 + tanh(√(2/π)(x + 0.044715 x³)))`.
    GeluTanh,
    /// `x^p` for a scalar exponent `p`.
    Pow(f32),
    /// `min(max(x, lo), hi)`; NaN stays NaN.
    Clamp(f32, f32),
    /// `x + c`.
    AddScalar(f32),
    /// `x * c`.
    MulScalar(f32),
}

impl UnaryOp {
    /// The operator name used in error messages.
    pub fn name(&self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Abs => "abs",
            UnaryOp::Relu => "relu",
            UnaryOp::LeakyRelu(_) => "leaky_relu",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::GeluErf => "gelu",
            UnaryOp::GeluTanh => "gelu_tanh",
            UnaryOp::Pow(_) => "pow",
            UnaryOp::Clamp(_, _) => "clamp",
            UnaryOp::AddScalar(_) => "add_scalar",
            UnaryOp::MulScalar(_) => "mul_scalar",
        }
    }
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
