//! Stochastic gradient descent with momentum, dampening, Nesterov and weight decay.

use super::{
    build_groups, check_new_group, check_non_negative, lrs_of, refuse_foreign, set_all_lrs,
    set_lrs_of, GroupConfig, GroupLr, Optimizer, ParamGroup,
};
use crate::checkpoint::TensorFile;
use crate::error::{Error, Result};
use exactgrad_autograd::trace::{self, Value};
use exactgrad_autograd::{no_grad, Tensor};
use exactgrad_core::kernels::SgdSpec;
use exactgrad_core::Backend;

/// Hyper-parameters of [`Sgd`], with PyTorch's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdConfig {
    /// Learning rate (default 1e-3).
    pub lr: f64,
    /// Momentum factor (default 0).
    pub momentum: f64,
    /// Dampening of the momentum (default 0).
    pub dampening: f64,
    /// L2 penalty added to the gradient (default 0).
    pub weight_decay: f64,
    /// Nesterov momentum; needs momentum > 0 and dampening = 0 (default false).
    pub nesterov: bool,
    /// Maximise the objective instead of minimising it (default false).
    pub maximize: bool,
}

impl Default for SgdConfig {
    fn default() -> Self {
        Self {
            lr: 1e-3,
            momentum: 0.0,
            dampening: 0.0,
            weight_decay: 0.0,
            nesterov: false,
            maximize: false,
        }
    }
}

impl SgdConfig {
    /// The defaults with learning rate `lr`.
    pub fn new(lr: f64) -> Self {
        Self {
            lr,
            ..Self::default()
        }
    }
}

/// PyTorch's `torch.optim.SGD`. For each parameter `p` with gradient `g`:
///
/// ```text
/// d = maximize ? -g : g
/// if weight_decay != 0:  d = d + weight_decay·p
/// if momentum != 0:
///     buf = first step ? copy of d : momentum·buf + (1 − dampening)·d
///     d = nesterov ? d + momentum·buf : buf
/// p = p + (−lr)·d
/// ```
///
/// Each parameter steps with its group's hyper-parameters ([`Sgd::with_groups`]).
#[derive(Debug)]
pub struct Sgd<B: Backend> {
    pub(super) params: Vec<Tensor<B>>,
    pub(super) defaults: SgdConfig,
    pub(super) groups: Vec<GroupConfig<SgdConfig>>,
    pub(super) momentum_buffers: Vec<Option<Tensor<B>>>,
}

/// `defaults` with what `group` sets, checked (`betas` is not SGD's).
fn group_config<B: Backend>(
    op: &'static str,
    group: &ParamGroup<B>,
    defaults: SgdConfig,
) -> Result<SgdConfig> {
    refuse_foreign(op, "betas", group.betas.is_some(), "Adam and AdamW")?;
    let c = SgdConfig {
        lr: group.lr.unwrap_or(defaults.lr),
        momentum: group.momentum.unwrap_or(defaults.momentum),
        weight_decay: group.weight_decay.unwrap_or(defaults.weight_decay),
        ..defaults
    };
    validate(op, &c)?;
    Ok(c)
}

/// The checks of [`Sgd::new`] on a configuration (also those of a restored state).
pub(super) fn validate(op: &'static str, config: &SgdConfig) -> Result<()> {
    check_non_negative(op, "lr", config.lr)?;
    check_non_negative(op, "momentum", config.momentum)?;
    check_non_negative(op, "weight_decay", config.weight_decay)?;
    if !config.dampening.is_finite() {
        return Err(Error::invalid(
            op,
            "dampening",
            format!("must be finite, got {}", config.dampening),
        ));
    }
    if config.nesterov && (config.momentum <= 0.0 || config.dampening != 0.0) {
        return Err(Error::invalid(
            op,
            "nesterov",
            "Nesterov momentum requires a momentum > 0 and zero dampening",
        ));
    }
    Ok(())
}

impl<B: Backend> Sgd<B> {
    /// An optimizer over `params` (leaves that require grad), in one group.
    pub fn new(params: Vec<Tensor<B>>, config: SgdConfig) -> Result<Self> {
        Self::build("Sgd::new", vec![ParamGroup::new(params)], config)
    }

    /// An optimizer over parameter groups (PyTorch's `SGD([{…}, {…}], …)`): each group
    /// steps with `config` except for what it sets (`lr`, `weight_decay`, `momentum`).
    /// Fails on a group without parameters' checks passing, a parameter in two groups,
    /// an invalid hyper-parameter or `betas` (Adam's), naming it.
    pub fn with_groups(groups: Vec<ParamGroup<B>>, config: SgdConfig) -> Result<Self> {
        Self::build("Sgd::with_groups", groups, config)
    }

    fn build(op: &'static str, groups: Vec<ParamGroup<B>>, config: SgdConfig) -> Result<Self> {
        validate(op, &config)?;
        let (params, groups) = build_groups(op, groups, &config, |g, d| group_config(op, g, d))?;
        let n = params.len();
        Ok(Self {
            params,
            defaults: config,
            groups,
            momentum_buffers: vec![None; n],
        })
    }

    /// The hyper-parameters of the first group (of every group, for an optimizer built
    /// with [`Sgd::new`]).
    pub fn config(&self) -> &SgdConfig {
        &self.groups[0].config
    }

    /// The configuration the optimizer was built with (PyTorch's `defaults`), which a
    /// group added later completes.
    pub fn defaults(&self) -> &SgdConfig {
        &self.defaults
    }

    /// The parameter groups (PyTorch's `param_groups`).
    pub fn param_groups(&self) -> &[GroupConfig<SgdConfig>] {
        &self.groups
    }

    /// Replaces the hyper-parameters of group `index` (PyTorch's
    /// `optimizer.param_groups[index][…] = …`). Fails, changing nothing, on an index out
    /// of range or an invalid configuration.
    pub fn set_group_config(&mut self, index: usize, config: SgdConfig) -> Result<()> {
        let op = "Sgd::set_group_config";
        validate(op, &config)?;
        let n = self.groups.len();
        let g = self.groups.get_mut(index).ok_or_else(|| {
            Error::invalid(
                op,
                "index",
                format!("is {index}, the optimizer has {n} groups"),
            )
        })?;
        g.config = config;
        Ok(())
    }

    /// The momentum buffer of parameter `index`, once a step has created it.
    pub fn momentum_buffer(&self, index: usize) -> Option<&Tensor<B>> {
        self.momentum_buffers.get(index).and_then(Option::as_ref)
    }
}

/// Starts the trace record of one parameter's update: the hyper-parameters as state, the
/// parameter, its gradient and its momentum buffer (once there is one) as inputs.
fn trace_begin<B: Backend>(
    c: &SgdConfig,
    p: &Tensor<B>,
    g: &Tensor<B>,
    buf: Option<&Tensor<B>>,
) -> trace::RecordBuilder {
    let mut rec = trace::record(trace::Kind::Optimizer, "sgd");
    if !rec.is_recording() {
        return rec;
    }
    rec = rec
        .state("lr", Value::F64(c.lr))
        .state("momentum", Value::F64(c.momentum))
        .state("dampening", Value::F64(c.dampening))
        .state("weight_decay", Value::F64(c.weight_decay))
        .state("nesterov", Value::Bool(c.nesterov))
        .state("maximize", Value::Bool(c.maximize));
    rec.input("param", p).input("grad", g);
    if let Some(b) = buf {
        rec.input("momentum_buffer", b);
    }
    rec
}

/// Ends the trace record of one parameter's update: the parameter and its momentum
/// buffer after it.
fn trace_end<B: Backend>(mut rec: trace::RecordBuilder, p: &Tensor<B>, buf: Option<&Tensor<B>>) {
    if !rec.is_recording() {
        return;
    }
    rec.output("param", p);
    if let Some(b) = buf {
        rec.output("momentum_buffer", b);
    }
    rec.write();
}

impl<B: Backend> Optimizer<B> for Sgd<B> {
    fn step(&mut self) -> Result<()> {
        let _guard = no_grad();
        for group in &self.groups {
            self::step_group(
                &group.config,
                &self.params[group.params.clone()],
                &mut self.momentum_buffers[group.params.clone()],
            )?;
        }
        trace::end_step();
        Ok(())
    }

    fn parameters(&self) -> &[Tensor<B>] {
        &self.params
    }

    fn lr(&self) -> f64 {
        self.groups[0].config.lr
    }

    fn set_lr(&mut self, lr: f64) -> Result<()> {
        set_all_lrs("Sgd::set_lr", &mut self.groups, lr)
    }

    fn num_param_groups(&self) -> usize {
        self.groups.len()
    }

    fn momentum(&self) -> f64 {
        self.groups[0].config.momentum
    }

    fn set_momentum(&mut self, momentum: f64) -> Result<()> {
        super::change_groups(
            &mut self.groups,
            |c| c.momentum = momentum,
            |c| validate("Sgd::set_momentum", c),
        )
    }

    fn group_lrs(&self) -> Vec<f64> {
        lrs_of(&self.groups)
    }

    fn set_group_lrs(&mut self, lrs: &[f64]) -> Result<()> {
        set_lrs_of("Sgd::set_group_lrs", &mut self.groups, lrs)
    }

    fn add_param_group(&mut self, group: ParamGroup<B>) -> Result<()> {
        let op = "Sgd::add_param_group";
        check_new_group(op, &self.params, &group.params)?;
        let config = group_config(op, &group, self.defaults)?;
        let start = self.params.len();
        self.momentum_buffers
            .extend(group.params.iter().map(|_| None));
        self.params.extend(group.params);
        self.groups.push(GroupConfig {
            params: start..self.params.len(),
            config,
        });
        Ok(())
    }

    fn state_dict(&self) -> Result<TensorFile> {
        self.save_state()
    }

    fn load_state_dict(&mut self, state: &TensorFile) -> Result<()> {
        self.restore_state(state)
    }
}

/// One step of the parameters of one group, with its hyper-parameters `c`.
fn step_group<B: Backend>(
    c: &SgdConfig,
    params: &[Tensor<B>],
    buffers: &mut [Option<Tensor<B>>],
) -> Result<()> {
    let c = *c;
    {
        for (p, buf) in params.iter().zip(buffers) {
            let Some(g) = p.grad() else { continue };
            let rec = trace_begin(&c, p, &g, buf.as_ref());
            let _quiet = rec.is_recording().then(trace::suppress);
            if p.supports_fused_step(&g) && buf.as_ref().is_none_or(|b| b.is_contiguous()) {
                // One fused kernel: the same f32 operations, element by element.
                let first = c.momentum != 0.0 && buf.is_none();
                if first {
                    *buf = Some(Tensor::zeros(p.backend(), p.shape().clone())?);
                }
                let spec = SgdSpec::from_hyper(
                    c.lr,
                    c.momentum,
                    c.dampening,
                    c.weight_decay,
                    c.nesterov,
                    c.maximize,
                    first,
                );
                let b = if c.momentum != 0.0 {
                    buf.as_ref()
                } else {
                    None
                };
                p.sgd_step_(&g, b, &spec)?;
                drop(_quiet);
                trace_end(rec, p, buf.as_ref());
                continue;
            }
            let mut d = if c.maximize { g.neg()? } else { g };
            if c.weight_decay != 0.0 {
                d = d.add(&p.mul_scalar(c.weight_decay as f32)?)?;
            }
            if c.momentum != 0.0 {
                let b = match buf.take() {
                    None => d.copy_contiguous()?,
                    Some(b) => {
                        let scaled = d.mul_scalar((1.0 - c.dampening) as f32)?;
                        b.mul_scalar(c.momentum as f32)?.add(&scaled)?
                    }
                };
                d = if c.nesterov {
                    d.add(&b.mul_scalar(c.momentum as f32)?)?
                } else {
                    b.clone()
                };
                *buf = Some(b);
            }
            let updated = p.add(&d.mul_scalar((-c.lr) as f32)?)?;
            p.copy_(&updated)?;
            drop(_quiet);
            trace_end(rec, p, buf.as_ref());
        }
    }
    Ok(())
}

impl GroupLr for SgdConfig {
    fn lr(&self) -> f64 {
        self.lr
    }
    fn lr_mut(&mut self) -> &mut f64 {
        &mut self.lr
    }
}
