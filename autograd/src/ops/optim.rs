//! The fused optimizer updates: one backend kernel per parameter
//! ([`Backend::sgd_step`], [`Backend::adam_step`]) updating the parameter and its state in
//! place, unrecorded. The arithmetic is that of the kernel specs
//! ([`SgdSpec`], [`AdamSpec`]), element by element.

use crate::error::{Error, Result};
use crate::tensor::Tensor;
use exactgrad_core::kernels::{AdamSpec, SgdSpec};
use exactgrad_core::Backend;

/// Checks that `t` can take part in a fused update of a parameter of `shape`: same shape,
/// contiguous, and not sharing storage with any of `others`.
fn check_operand<B: Backend>(
    op: &'static str,
    what: &'static str,
    t: &Tensor<B>,
    param: &Tensor<B>,
    others: &[&Tensor<B>],
) -> Result<()> {
    if t.shape() != param.shape() {
        return Err(Error::mismatch(
            op,
            t.dims(),
            param.dims(),
            format!("{what} must have the parameter's shape"),
        ));
    }
    if !t.is_contiguous() {
        return Err(Error::invalid(op, what, "must be contiguous"));
    }
    if others.iter().any(|o| o.shares_storage(t)) {
        return Err(Error::invalid(
            op,
            what,
            "must not share storage with the other operands",
        ));
    }
    Ok(())
}

/// The contiguous elements of `t` in its storage.
fn range<B: Backend>(t: &Tensor<B>) -> core::ops::Range<usize> {
    let o = t.layout().offset;
    o..o + t.numel()
}

impl<B: Backend> Tensor<B> {
    /// Whether this tensor and `grad` can be updated by [`Tensor::sgd_step_`] and
    /// [`Tensor::adam_step_`]: both contiguous, of one shape, with separate storages.
    pub fn supports_fused_step(&self, grad: &Tensor<B>) -> bool {
        self.is_contiguous()
            && grad.is_contiguous()
            && self.shape() == grad.shape()
            && !self.shares_storage(grad)
    }

    /// One SGD update of this parameter in place by the backend's `sgd_step` kernel, with
    /// an optional momentum buffer (updated in place too); not recorded. Every operand
    /// must be contiguous, of this tensor's shape and with its own storage.
    pub fn sgd_step_(
        &self,
        grad: &Tensor<B>,
        momentum_buffer: Option<&Tensor<B>>,
        spec: &SgdSpec,
    ) -> Result<()> {
        let op = "sgd_step_";
        self.check_in_place(op)?;
        check_operand(op, "param", self, self, &[grad])?;
        check_operand(op, "grad", grad, self, &[])?;
        if let Some(b) = momentum_buffer {
            b.check_in_place(op)?;
            check_operand(op, "momentum_buffer", b, self, &[self, grad])?;
        }
        let be = self.backend();
        {
            let gd = grad.read()?;
            let mut pd = self.write()?;
            let mut bd = momentum_buffer.map(Tensor::write).transpose()?;
            let mut none = be.zeros(0)?;
            let buf = match (&mut bd, momentum_buffer) {
                (Some(w), Some(t)) => B::slice_mut(w.as_mut(), range(t)),
                _ => B::view_mut(&mut none),
            };
            be.sgd_step(
                spec,
                B::slice_mut(pd.as_mut(), range(self)),
                B::slice(gd.as_ref(), range(grad)),
                buf,
            )?;
        }
        self.bump_version();
        if let Some(b) = momentum_buffer {
            b.bump_version();
        }
        Ok(())
    }

    /// One Adam/AdamW update of this parameter and its moments in place by the backend's
    /// `adam_step` kernel; not recorded. `max_exp_avg_sq` is given exactly when the spec
    /// asks for AMSGrad. Every operand must be contiguous, of this tensor's shape and with
    /// its own storage.
    pub fn adam_step_(
        &self,
        grad: &Tensor<B>,
        exp_avg: &Tensor<B>,
        exp_avg_sq: &Tensor<B>,
        max_exp_avg_sq: Option<&Tensor<B>>,
        spec: &AdamSpec,
    ) -> Result<()> {
        let op = "adam_step_";
        if max_exp_avg_sq.is_some() != spec.amsgrad {
            return Err(Error::invalid(
                op,
                "max_exp_avg_sq",
                "must be given exactly when the spec asks for AMSGrad",
            ));
        }
        for t in [self, exp_avg, exp_avg_sq]
            .into_iter()
            .chain(max_exp_avg_sq)
        {
            t.check_in_place(op)?;
        }
        check_operand(op, "param", self, self, &[grad, exp_avg, exp_avg_sq])?;
        check_operand(op, "grad", grad, self, &[exp_avg, exp_avg_sq])?;
        check_operand(op, "exp_avg", exp_avg, self, &[exp_avg_sq])?;
        check_operand(op, "exp_avg_sq", exp_avg_sq, self, &[])?;
        if let Some(v) = max_exp_avg_sq {
            check_operand(
                op,
                "max_exp_avg_sq",
                v,
                self,
                &[self, grad, exp_avg, exp_avg_sq],
            )?;
        }
        let be = self.backend();
        {
            let gd = grad.read()?;
            let mut pd = self.write()?;
            let mut md = exp_avg.write()?;
            let mut vd = exp_avg_sq.write()?;
            let mut xd = max_exp_avg_sq.map(Tensor::write).transpose()?;
            let mut none = be.zeros(0)?;
            let vmax = match (&mut xd, max_exp_avg_sq) {
                (Some(w), Some(t)) => B::slice_mut(w.as_mut(), range(t)),
                _ => B::view_mut(&mut none),
            };
            be.adam_step(
                spec,
                B::slice_mut(pd.as_mut(), range(self)),
                B::slice(gd.as_ref(), range(grad)),
                B::slice_mut(md.as_mut(), range(exp_avg)),
                B::slice_mut(vd.as_mut(), range(exp_avg_sq)),
                vmax,
            )?;
        }
        for t in [self, exp_avg, exp_avg_sq]
            .into_iter()
            .chain(max_exp_avg_sq)
        {
            t.bump_version();
        }
        Ok(())
    }
}
