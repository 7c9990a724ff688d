//! Element-wise operators with broadcasting: forward and backward side by side.

use super::{binary_forward, sum_to, unary_forward};
use crate::engine::{record, record_with, Saved};
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::trace::{OpInfo, Value};
use exactgrad_core::{Backend, BinaryOp, Shape, UnaryOp};

/// Which of input and output a unary backward rule reads.
#[derive(Clone, Copy)]
enum Needs {
    Input,
    Output,
    Neither,
}

/// What `op`'s backward rule reads, from the operator table of `exactgrad_core::ops`.
fn needs(op: UnaryOp) -> Needs {
    match op.backward_reads() {
        exactgrad_core::BackwardReads::Input => Needs::Input,
        exactgrad_core::BackwardReads::Output => Needs::Output,
        exactgrad_core::BackwardReads::Neither => Needs::Neither,
    }
}

/// The backward kernel of `op` applied to `g`, reading the saved input or output.
fn unary_backward<B: Backend>(
    op: UnaryOp,
    saved: Option<&Tensor<B>>,
    g: &Tensor<B>,
    needs: Needs,
) -> Result<Tensor<B>> {
    let b = g.backend();
    super::new_tensor(b, op.name(), g.shape().clone(), |out| {
        g.with_contiguous(|gs| -> Result<()> {
            match (needs, saved) {
                (Needs::Input, Some(s)) => {
                    s.with_contiguous(|xs| b.unary_backward(op, xs, gs, gs, out))??
                }
                (Needs::Output, Some(s)) => {
                    s.with_contiguous(|ys| b.unary_backward(op, gs, ys, gs, out))??
                }
                _ => b.unary_backward(op, gs, gs, gs, out)?,
            }
            Ok(())
        })?
    })
}

pub(crate) fn unary_op<B: Backend>(x: &Tensor<B>, op: UnaryOp) -> Result<Tensor<B>> {
    let y = unary_forward(x, op)?;
    let need = needs(op);
    let saved_src = match need {
        Needs::Input => Some(x.clone()),
        Needs::Output => Some(y.clone()),
        Needs::Neither => None,
    };
    let name = op.name();
    let info = crate::trace::info(move || {
        let (p, n) = op.params();
        let info = OpInfo::new();
        if n == 0 {
            info
        } else {
            info.attr("params", Value::F32s(p[..n].to_vec()))
        }
    });
    Ok(record_with(name, y, &[x], info, move || {
        let saved = saved_src.map(|t| Saved::new(name, &t));
        move |g: &Tensor<B>| {
            let s = match &saved {
                Some(s) => Some(s.get()?),
                None => None,
            };
            Ok(vec![Some(unary_backward(op, s, g, need)?)])
        }
    }))
}

pub(crate) fn binary_op<B: Backend>(
    op: BinaryOp,
    a: &Tensor<B>,
    b: &Tensor<B>,
) -> Result<Tensor<B>> {
    let out = binary_forward(op, a, b)?;
    let name = op.name();
    let (need_a, need_b) = (a.is_requires_grad(), b.is_requires_grad());
    let (sa, sb) = (a.clone(), b.clone());
    Ok(record(name, out, &[a, b], move || {
        let shape_a = sa.dims().to_vec();
        let shape_b = sb.dims().to_vec();
        // Save only the operands the rule reads.
        let keep_a = matches!(op, BinaryOp::Mul | BinaryOp::Div) && need_b;
        let keep_b = match op {
            BinaryOp::Mul => need_a,
            BinaryOp::Div => true,
            _ => false,
        };
        let sa = keep_a.then(|| Saved::new(name, &sa));
        let sb = keep_b.then(|| Saved::new(name, &sb));
        move |g: &Tensor<B>| {
            let (ga, gb) = match op {
                BinaryOp::Add => (need_a.then(|| g.clone()), need_b.then(|| g.clone())),
                BinaryOp::Sub => (
                    need_a.then(|| g.clone()),
                    if need_b { Some(g.neg()?) } else { None },
                ),
                BinaryOp::Mul => {
                    let ga = if need_a {
                        Some(g.mul(sb.as_ref().unwrap().get()?)?)
                    } else {
                        None
                    };
                    let gb = if need_b {
                        Some(g.mul(sa.as_ref().unwrap().get()?)?)
                    } else {
                        None
                    };
                    (ga, gb)
                }
                BinaryOp::Div => {
                    let b = sb.as_ref().unwrap().get()?;
                    let ga = if need_a { Some(g.div(b)?) } else { None };
                    let gb = if need_b {
                        // -(g · a) / (b · b)
                        let a = sa.as_ref().unwrap().get()?;
                        Some(g.mul(a)?.div(&b.mul(b)?)?.neg()?)
                    } else {
                        None
                    };
                    (ga, gb)
                }
            };
            Ok(vec![
                ga.map(|t| sum_to(&t, &shape_a)).transpose()?,
                gb.map(|t| sum_to(&t, &shape_b)).transpose()?,
            ])
        }
    }))
}

/// Approximation used by [`Tensor::gelu`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum GeluApproximation {
    /// The exact form `x/2 (1 + erf(x/√2))` (PyTorch's `approximate='none'`).
    #[default]
    None,
    /// The tanh form (PyTorch's `approximate='tanh'`).
    Tanh,
}

impl<B: Backend> Tensor<B> {
    /// `self + other` with broadcasting.
    pub fn add(&self, other: &Tensor<B>) -> Result<Tensor<B>> {
        binary_op(BinaryOp::Add, self, other)
    }

    /// `self - other` with broadcasting.
    pub fn sub(&self, other: &Tensor<B>) -> Result<Tensor<B>> {
        binary_op(BinaryOp::Sub, self, other)
    }

    /// `self * other` element-wise with broadcasting.
    pub fn mul(&self, other: &Tensor<B>) -> Result<Tensor<B>> {
        binary_op(BinaryOp::Mul, self, other)
    }

    /// `self / other` element-wise with broadcasting.
    pub fn div(&self, other: &Tensor<B>) -> Result<Tensor<B>> {
        binary_op(BinaryOp::Div, self, other)
    }

    /// `self + c`.
    pub fn add_scalar(&self, c: f32) -> Result<Tensor<B>> {
        unary_op(self, UnaryOp::AddScalar(c))
    }

    /// `self * c`.
    pub fn mul_scalar(&self, c: f32) -> Result<Tensor<B>> {
        unary_op(self, UnaryOp::MulScalar(c))
    }

    /// `-self`.
    pub fn neg(&self) -> Result<Tensor<B>> {
        unary_op(self, UnaryOp::Neg)
    }

    /// `max(self, 0)`; the gradient is 0 where the output is ≤ 0.
    pub fn relu(&self) -> Result<Tensor<B>> {
        unary_op(self, UnaryOp::Relu)
    }

    /// `x` for `x > 0`, else `negative_slope * x`.
    pub fn leaky_relu(&self, negative_slope: f32) -> Result<Tensor<B>> {
        unary_op(self, UnaryOp::LeakyRelu(negative_slope))
    }

    /// The logistic sigmoid.
    pub fn sigmoid(&self) -> Result<Tensor<B>> {
        unary_op(self, UnaryOp::Sigmoid)
    }

    /// The hyperbolic tangent.
    pub fn tanh(&self) -> Result<Tensor<B>> {
        unary_op(self, UnaryOp::Tanh)
    }

    /// GELU, erf form or tanh approximation.
    pub fn gelu(&self, approximate: GeluApproximation) -> Result<Tensor<B>> {
        unary_op(
            self,
            match approximate {
                GeluApproximation::None => UnaryOp::GeluErf,
                GeluApproximation::Tanh => UnaryOp::GeluTanh,
            },
        )
    }

    /// `e^x`.
    pub fn exp(&self) -> Result<Tensor<B>> {
        unary_op(self, UnaryOp::Exp)
    }

    /// The natural logarithm (NaN for negative input, −∞ at 0).
    pub fn log(&self) -> Result<Tensor<B>> {
        unary_op(self, UnaryOp::Log)
    }

    /// The IEEE square root.
    pub fn sqrt(&self) -> Result<Tensor<B>> {
        unary_op(self, UnaryOp::Sqrt)
    }

    /// `self^exponent` for a scalar exponent (see `docs/arithmetic.md` for how it is
    /// computed). The gradient is `exponent · x^(exponent−1)`, and 0 for exponent 0.
    pub fn pow(&self, exponent: f32) -> Result<Tensor<B>> {
        if !exponent.is_finite() {
            return Err(Error::invalid(
                "pow",
                "exponent",
                format!("must be finite, got {exponent}"),
            ));
        }
        unary_op(self, UnaryOp::Pow(exponent))
    }

    /// `|self|`; the gradient at 0 (and at NaN) is 0, as PyTorch's.
    pub fn abs(&self) -> Result<Tensor<B>> {
        unary_op(self, UnaryOp::Abs)
    }

    /// Clamps into `[min, max]` (either bound optional). NaN stays NaN; where `min > max`
    /// every element becomes `max`, as in PyTorch. The gradient passes strictly inside the
    /// given bounds (`min < x < max`) and is 0 at them, as PyTorch's.
    pub fn clamp(&self, min: Option<f32>, max: Option<f32>) -> Result<Tensor<B>> {
        if min.is_none() && max.is_none() {
            return Err(Error::invalid(
                "clamp",
                "min/max",
                "at least one bound must be given",
            ));
        }
        if min.is_some_and(f32::is_nan) || max.is_some_and(f32::is_nan) {
            return Err(Error::invalid("clamp", "min/max", "bounds must not be NaN"));
        }
        unary_op(
            self,
            UnaryOp::Clamp(
                min.unwrap_or(f32::NEG_INFINITY),
                max.unwrap_or(f32::INFINITY),
            ),
        )
    }

    /// Selects `a` where `cond` is non-zero and `b` elsewhere; all three broadcast together.
    /// `cond` receives no gradient.
    pub fn where_cond(cond: &Tensor<B>, a: &Tensor<B>, b: &Tensor<B>) -> Result<Tensor<B>> {
        let op = "where";
        let s1 = Shape::broadcast(op, cond.dims(), a.dims())?;
        let shape = Shape::broadcast(op, &s1, b.dims())?;
        let be = a.backend();
        let (lc, la, lb) = (
            cond.layout().broadcast_to(op, &shape)?,
            a.layout().broadcast_to(op, &shape)?,
            b.layout().broadcast_to(op, &shape)?,
        );
        let out = super::new_tensor(be, op, shape, |out| {
            let (dc, da, db) = (cond.read()?, a.read()?, b.read()?);
            Ok(be.select(dc.as_ref(), &lc, da.as_ref(), &la, db.as_ref(), &lb, out)?)
        })?;
        let (need_a, need_b) = (a.is_requires_grad(), b.is_requires_grad());
        let (shape_a, shape_b) = (a.dims().to_vec(), b.dims().to_vec());
        let info = crate::trace::info(|| OpInfo::new().names(&["a", "b"]).tensor("cond", cond));
        let cond = cond.clone();
        Ok(record_with(op, out, &[a, b], info, move || {
            let saved = Saved::new(op, &cond);
            move |g: &Tensor<B>| {
                let c = saved.get()?;
                let zero = Tensor::zeros(g.backend(), Shape::scalar())?;
                let ga = if need_a {
                    Some(sum_to(&Tensor::where_cond(c, g, &zero)?, &shape_a)?)
                } else {
                    None
                };
                let gb = if need_b {
                    Some(sum_to(&Tensor::where_cond(c, &zero, g)?, &shape_b)?)
                } else {
                    None
                };
                Ok(vec![ga, gb])
            }
        }))
    }
}
