//! Adam and AdamW.

use super::{
    build_groups, check_new_group, check_non_negative, lrs_of, powi_f64, refuse_foreign,
    set_all_lrs, set_lrs_of, GroupConfig, GroupLr, Optimizer, ParamGroup,
};
use crate::checkpoint::TensorFile;
use crate::error::{Error, Result};
use exactgrad_autograd::trace::{self, Value};
use exactgrad_autograd::{no_grad, Tensor};
use exactgrad_core::kernels::AdamSpec;
use exactgrad_core::Backend;

/// Hyper-parameters of [`Adam`], with PyTorch's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamConfig {
    /// Learning rate (default 1e-3).
    pub lr: f64,
    /// Decay rates of the first and second moment averages (default (0.9, 0.999)).
    pub betas: (f64, f64),
    /// Added to the denominator, outside the square root (default 1e-8).
    pub eps: f64,
    /// Weight decay (default 0): an L2 term added to the gradient, or, when
    /// `decoupled_weight_decay`, a shrinking of the parameter (AdamW).
    pub weight_decay: f64,
    /// Use the maximum of all second-moment averages so far (AMSGrad; default false).
    pub amsgrad: bool,
    /// Maximise the objective instead of minimising it (default false).
    pub maximize: bool,
    /// Decay the weights directly instead of through the gradient (default false;
    /// [`AdamW`] sets it).
    pub decoupled_weight_decay: bool,
}

impl Default for AdamConfig {
    fn default() -> Self {
        Self {
            lr: 1e-3,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.0,
            amsgrad: false,
            maximize: false,
            decoupled_weight_decay: false,
        }
    }
}

impl AdamConfig {
    /// The defaults with learning rate `lr`.
    pub fn new(lr: f64) -> Self {
        Self {
            lr,
            ..Self::default()
        }
    }
}

/// Hyper-parameters of [`AdamW`], with PyTorch's defaults (weight decay 1e-2).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWConfig {
    /// Learning rate (default 1e-3).
    pub lr: f64,
    /// Decay rates of the first and second moment averages (default (0.9, 0.999)).
    pub betas: (f64, f64),
    /// Added to the denominator, outside the square root (default 1e-8).
    pub eps: f64,
    /// Decoupled weight decay: `p ← p·(1 − lr·weight_decay)` before the update (default 1e-2).
    pub weight_decay: f64,
    /// AMSGrad (default false).
    pub amsgrad: bool,
    /// Maximise the objective instead of minimising it (default false).
    pub maximize: bool,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        Self {
            lr: 1e-3,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 1e-2,
            amsgrad: false,
            maximize: false,
        }
    }
}

impl AdamWConfig {
    /// The defaults with learning rate `lr`.
    pub fn new(lr: f64) -> Self {
        Self {
            lr,
            ..Self::default()
        }
    }
}

impl From<AdamWConfig> for AdamConfig {
    fn from(c: AdamWConfig) -> Self {
        Self {
            lr: c.lr,
            betas: c.betas,
            eps: c.eps,
            weight_decay: c.weight_decay,
            amsgrad: c.amsgrad,
            maximize: c.maximize,
            decoupled_weight_decay: true,
        }
    }
}

#[derive(Debug)]
pub(super) struct State<B: Backend> {
    pub(super) step: u64,
    pub(super) exp_avg: Tensor<B>,
    pub(super) exp_avg_sq: Tensor<B>,
    pub(super) max_exp_avg_sq: Option<Tensor<B>>,
}

/// PyTorch's `torch.optim.Adam` (single-tensor form). For each parameter `p` with
/// gradient `g`, at step `t` (counted per parameter from 1):
///
/// ```text
/// d = maximize ? -g : g
/// if weight_decay != 0:
///     decoupled ? p = p·(1 − lr·weight_decay) : d = d + weight_decay·p
/// m = lerp(m, d, 1 − β1)              (m + w·(d − m), as PyTorch's lerp for w < 0.5)
/// v = β2·v + ((1 − β2)·d)·d
/// v̂ = amsgrad ? (vmax = max(vmax, v)) : v
/// denom = sqrt(v̂) / sqrt(1 − β2^t) + eps
/// p = p + ((−lr / (1 − β1^t))·m) / denom
/// ```
///
/// `β^t`, the bias corrections and the step size are f64 (β^t by binary
/// exponentiation), rounded to f32 where they meet tensors.
///
/// Each parameter steps with its group's hyper-parameters ([`Adam::with_groups`]).
#[derive(Debug)]
pub struct Adam<B: Backend> {
    pub(super) params: Vec<Tensor<B>>,
    pub(super) defaults: AdamConfig,
    pub(super) groups: Vec<GroupConfig<AdamConfig>>,
    pub(super) state: Vec<Option<State<B>>>,
}

/// `defaults` with what `group` sets, checked (`momentum` is not Adam's).
fn group_config<B: Backend>(
    op: &'static str,
    group: &ParamGroup<B>,
    defaults: AdamConfig,
) -> Result<AdamConfig> {
    refuse_foreign(
        op,
        "momentum",
        group.momentum.is_some(),
        "SGD (Adam's are `betas`)",
    )?;
    let c = AdamConfig {
        lr: group.lr.unwrap_or(defaults.lr),
        betas: group.betas.unwrap_or(defaults.betas),
        weight_decay: group.weight_decay.unwrap_or(defaults.weight_decay),
        ..defaults
    };
    validate(op, &c)?;
    Ok(c)
}

/// The checks of [`Adam::new`] on a configuration (also those of a restored state).
pub(super) fn validate(op: &'static str, c: &AdamConfig) -> Result<()> {
    check_non_negative(op, "lr", c.lr)?;
    check_non_negative(op, "eps", c.eps)?;
    check_non_negative(op, "weight_decay", c.weight_decay)?;
    for (arg, beta) in [("betas.0", c.betas.0), ("betas.1", c.betas.1)] {
        if !(0.0..1.0).contains(&beta) {
            return Err(Error::invalid(
                op,
                arg,
                format!("must be in [0, 1), got {beta}"),
            ));
        }
    }
    Ok(())
}

/// `start + w·(end − start)` for |w| < 0.5, else `end − (end − start)·(1 − w)`: PyTorch's
/// `lerp` with a scalar weight.
fn lerp<B: Backend>(start: &Tensor<B>, end: &Tensor<B>, w: f32) -> Result<Tensor<B>> {
    let diff = end.sub(start)?;
    Ok(if w.abs() < 0.5 {
        start.add(&diff.mul_scalar(w)?)?
    } else {
        end.sub(&diff.mul_scalar(1.0 - w)?)?
    })
}

/// Element-wise maximum propagating NaN (PyTorch's `torch.maximum`), by selection.
fn maximum<B: Backend>(a: &Tensor<B>, b: &Tensor<B>) -> Result<Tensor<B>> {
    let (av, bv) = (a.to_vec()?, b.to_vec()?);
    let mask: Vec<f32> = av
        .iter()
        .zip(&bv)
        .map(|(&x, &y)| if x.is_nan() || x >= y { 1.0 } else { 0.0 })
        .collect();
    let mask = Tensor::from_vec(a.backend(), mask, a.shape().clone())?;
    Tensor::where_cond(&mask, a, b)
}

impl<B: Backend> Adam<B> {
    /// An optimizer over `params` (leaves that require grad), in one group.
    pub fn new(params: Vec<Tensor<B>>, config: AdamConfig) -> Result<Self> {
        Self::build("Adam::new", vec![ParamGroup::new(params)], config)
    }

    /// An optimizer over parameter groups (PyTorch's `Adam([{…}, {…}], …)`): each group
    /// steps with `config` except for what it sets (`lr`, `weight_decay`, `betas`).
    /// Fails on a parameter that is not a leaf requiring grad or is in two groups, an
    /// invalid hyper-parameter or `momentum` (SGD's), naming it.
    pub fn with_groups(groups: Vec<ParamGroup<B>>, config: AdamConfig) -> Result<Self> {
        Self::build("Adam::with_groups", groups, config)
    }

    fn build(op: &'static str, groups: Vec<ParamGroup<B>>, config: AdamConfig) -> Result<Self> {
        validate(op, &config)?;
        let (params, groups) = build_groups(op, groups, &config, |g, d| group_config(op, g, d))?;
        let n = params.len();
        Ok(Self {
            params,
            defaults: config,
            groups,
            state: (0..n).map(|_| None).collect(),
        })
    }

    /// The hyper-parameters of the first group (of every group, for an optimizer built
    /// with [`Adam::new`]).
    pub fn config(&self) -> &AdamConfig {
        &self.groups[0].config
    }

    /// The configuration the optimizer was built with (PyTorch's `defaults`), which a
    /// group added later completes.
    pub fn defaults(&self) -> &AdamConfig {
        &self.defaults
    }

    /// The parameter groups (PyTorch's `param_groups`).
    pub fn param_groups(&self) -> &[GroupConfig<AdamConfig>] {
        &self.groups
    }

    /// Replaces the hyper-parameters of group `index` (PyTorch's
    /// `optimizer.param_groups[index][…] = …`). Fails, changing nothing, on an index out
    /// of range or an invalid configuration (for AdamW, one without decoupled decay).
    pub fn set_group_config(&mut self, index: usize, config: AdamConfig) -> Result<()> {
        self.set_group_config_as("Adam::set_group_config", index, config)
    }

    fn set_group_config_as(
        &mut self,
        op: &'static str,
        index: usize,
        config: AdamConfig,
    ) -> Result<()> {
        validate(op, &config)?;
        if config.decoupled_weight_decay != self.defaults.decoupled_weight_decay {
            return Err(Error::invalid(
                op,
                "decoupled_weight_decay",
                "differs from the optimizer's (Adam couples the decay, AdamW decouples it)",
            ));
        }
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

    fn add_group_as(&mut self, op: &'static str, group: ParamGroup<B>) -> Result<()> {
        check_new_group(op, &self.params, &group.params)?;
        let config = group_config(op, &group, self.defaults)?;
        let start = self.params.len();
        self.state.extend(group.params.iter().map(|_| None));
        self.params.extend(group.params);
        self.groups.push(GroupConfig {
            params: start..self.params.len(),
            config,
        });
        Ok(())
    }

    /// The number of steps parameter `index` has taken.
    pub fn step_count(&self, index: usize) -> u64 {
        self.state
            .get(index)
            .and_then(Option::as_ref)
            .map_or(0, |s| s.step)
    }

    /// The first and second moment averages of parameter `index`, once it has stepped.
    pub fn moments(&self, index: usize) -> Option<(&Tensor<B>, &Tensor<B>)> {
        self.state
            .get(index)
            .and_then(Option::as_ref)
            .map(|s| (&s.exp_avg, &s.exp_avg_sq))
    }
}

/// Starts the trace record of one parameter's update: the hyper-parameters and step as
/// state, the parameter, its gradient and its state before the update as inputs.
fn trace_begin<B: Backend>(
    c: &AdamConfig,
    st: &State<B>,
    p: &Tensor<B>,
    g: &Tensor<B>,
) -> trace::RecordBuilder {
    let mut rec = trace::record(
        trace::Kind::Optimizer,
        if c.decoupled_weight_decay {
            "adamw"
        } else {
            "adam"
        },
    );
    if !rec.is_recording() {
        return rec;
    }
    rec = rec
        .state("lr", Value::F64(c.lr))
        .state("beta1", Value::F64(c.betas.0))
        .state("beta2", Value::F64(c.betas.1))
        .state("eps", Value::F64(c.eps))
        .state("weight_decay", Value::F64(c.weight_decay))
        .state("amsgrad", Value::Bool(c.amsgrad))
        .state("maximize", Value::Bool(c.maximize))
        .state("step", Value::Int(st.step as i64));
    rec.input("param", p)
        .input("grad", g)
        .input("exp_avg", &st.exp_avg)
        .input("exp_avg_sq", &st.exp_avg_sq);
    if let Some(m) = &st.max_exp_avg_sq {
        rec.input("max_exp_avg_sq", m);
    }
    rec
}

/// Ends the trace record of one parameter's update: the parameter and its state after it.
fn trace_end<B: Backend>(mut rec: trace::RecordBuilder, st: &State<B>, p: &Tensor<B>) {
    if !rec.is_recording() {
        return;
    }
    rec.output("param", p)
        .output("exp_avg", &st.exp_avg)
        .output("exp_avg_sq", &st.exp_avg_sq);
    if let Some(m) = &st.max_exp_avg_sq {
        rec.output("max_exp_avg_sq", m);
    }
    rec.write();
}

impl<B: Backend> Optimizer<B> for Adam<B> {
    fn step(&mut self) -> Result<()> {
        let _guard = no_grad();
        for group in &self.groups {
            step_group(
                &group.config,
                &self.params[group.params.clone()],
                &mut self.state[group.params.clone()],
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
        set_all_lrs("Adam::set_lr", &mut self.groups, lr)
    }

    fn num_param_groups(&self) -> usize {
        self.groups.len()
    }

    fn momentum(&self) -> f64 {
        self.groups[0].config.betas.0
    }

    fn set_momentum(&mut self, momentum: f64) -> Result<()> {
        super::change_groups(
            &mut self.groups,
            |c| c.betas.0 = momentum,
            |c| validate("Adam::set_momentum", c),
        )
    }

    fn group_lrs(&self) -> Vec<f64> {
        lrs_of(&self.groups)
    }

    fn set_group_lrs(&mut self, lrs: &[f64]) -> Result<()> {
        set_lrs_of("Adam::set_group_lrs", &mut self.groups, lrs)
    }

    fn add_param_group(&mut self, group: ParamGroup<B>) -> Result<()> {
        self.add_group_as("Adam::add_param_group", group)
    }

    fn state_dict(&self) -> Result<TensorFile> {
        self.save_state_as("Adam")
    }

    fn load_state_dict(&mut self, state: &TensorFile) -> Result<()> {
        self.restore_state_as("Adam::load_state_dict", "Adam", state)
    }
}

/// One step of the parameters of one group, with its hyper-parameters `c`.
fn step_group<B: Backend>(
    c: &AdamConfig,
    params: &[Tensor<B>],
    states: &mut [Option<State<B>>],
) -> Result<()> {
    let c = *c;
    let (beta1, beta2) = c.betas;
    {
        for (p, slot) in params.iter().zip(states) {
            let Some(g) = p.grad() else { continue };
            if slot.is_none() {
                let zeros = || Tensor::zeros(p.backend(), p.shape().clone());
                *slot = Some(State {
                    step: 0,
                    exp_avg: zeros()?,
                    exp_avg_sq: zeros()?,
                    max_exp_avg_sq: if c.amsgrad { Some(zeros()?) } else { None },
                });
            }
            let Some(st) = slot.as_mut() else { continue };
            st.step += 1;
            let rec = trace_begin(&c, st, p, &g);
            let _quiet = rec.is_recording().then(trace::suppress);
            if p.supports_fused_step(&g) {
                // One fused kernel: the same f32 operations, element by element.
                let spec = AdamSpec::from_hyper(
                    c.lr,
                    c.betas,
                    c.eps,
                    c.weight_decay,
                    c.decoupled_weight_decay,
                    c.amsgrad,
                    c.maximize,
                    st.step,
                );
                p.adam_step_(
                    &g,
                    &st.exp_avg,
                    &st.exp_avg_sq,
                    st.max_exp_avg_sq.as_ref(),
                    &spec,
                )?;
                drop(_quiet);
                trace_end(rec, st, p);
                continue;
            }
            let mut d = if c.maximize { g.neg()? } else { g };
            if c.weight_decay != 0.0 {
                if c.decoupled_weight_decay {
                    let decayed = p.mul_scalar((1.0 - c.lr * c.weight_decay) as f32)?;
                    p.copy_(&decayed)?;
                } else {
                    d = d.add(&p.mul_scalar(c.weight_decay as f32)?)?;
                }
            }
            st.exp_avg = lerp(&st.exp_avg, &d, (1.0 - beta1) as f32)?;
            let sq = d.mul_scalar((1.0 - beta2) as f32)?.mul(&d)?;
            st.exp_avg_sq = st.exp_avg_sq.mul_scalar(beta2 as f32)?.add(&sq)?;

            let bias_correction1 = 1.0 - powi_f64(beta1, st.step);
            let bias_correction2 = 1.0 - powi_f64(beta2, st.step);
            let step_size = c.lr / bias_correction1;
            let bias_correction2_sqrt = bias_correction2.sqrt();

            let second = match &mut st.max_exp_avg_sq {
                Some(max) => {
                    *max = maximum(max, &st.exp_avg_sq)?;
                    max.clone()
                }
                None => st.exp_avg_sq.clone(),
            };
            let denom = second
                .sqrt()?
                .div_scalar(bias_correction2_sqrt as f32)?
                .add_scalar(c.eps as f32)?;
            let update = st.exp_avg.mul_scalar((-step_size) as f32)?.div(&denom)?;
            let updated = p.add(&update)?;
            p.copy_(&updated)?;
            drop(_quiet);
            trace_end(rec, st, p);
        }
    }
    Ok(())
}

/// PyTorch's `torch.optim.AdamW`: [`Adam`] with decoupled weight decay
/// (`p ← p·(1 − lr·weight_decay)` before the Adam update) and a default decay of 1e-2.
#[derive(Debug)]
pub struct AdamW<B: Backend> {
    pub(super) inner: Adam<B>,
}

impl<B: Backend> AdamW<B> {
    /// An optimizer over `params` (leaves that require grad), in one group.
    pub fn new(params: Vec<Tensor<B>>, config: AdamWConfig) -> Result<Self> {
        Ok(Self {
            inner: Adam::build(
                "AdamW::new",
                vec![ParamGroup::new(params)],
                AdamConfig::from(config),
            )?,
        })
    }

    /// An optimizer over parameter groups (PyTorch's `AdamW([{…}, {…}], …)`): each group
    /// steps with `config` except for what it sets (`lr`, `weight_decay`, `betas`).
    /// Fails as [`Adam::with_groups`] does.
    pub fn with_groups(groups: Vec<ParamGroup<B>>, config: AdamWConfig) -> Result<Self> {
        Ok(Self {
            inner: Adam::build("AdamW::with_groups", groups, AdamConfig::from(config))?,
        })
    }

    /// The hyper-parameters of the first group (as an [`AdamConfig`] with
    /// `decoupled_weight_decay` set).
    pub fn config(&self) -> &AdamConfig {
        self.inner.config()
    }

    /// The parameter groups (PyTorch's `param_groups`), as [`AdamConfig`]s with
    /// `decoupled_weight_decay` set.
    pub fn param_groups(&self) -> &[GroupConfig<AdamConfig>] {
        self.inner.param_groups()
    }

    /// Replaces the hyper-parameters of group `index`; fails, changing nothing, on an
    /// index out of range or an invalid configuration (one without decoupled decay
    /// included).
    pub fn set_group_config(&mut self, index: usize, config: AdamConfig) -> Result<()> {
        self.inner
            .set_group_config_as("AdamW::set_group_config", index, config)
    }

    /// The number of steps parameter `index` has taken.
    pub fn step_count(&self, index: usize) -> u64 {
        self.inner.step_count(index)
    }

    /// The first and second moment averages of parameter `index`, once it has stepped.
    pub fn moments(&self, index: usize) -> Option<(&Tensor<B>, &Tensor<B>)> {
        self.inner.moments(index)
    }
}

impl<B: Backend> Optimizer<B> for AdamW<B> {
    fn step(&mut self) -> Result<()> {
        self.inner.step()
    }
    fn parameters(&self) -> &[Tensor<B>] {
        self.inner.parameters()
    }
    fn lr(&self) -> f64 {
        self.inner.lr()
    }
    fn set_lr(&mut self, lr: f64) -> Result<()> {
        self.inner.set_lr(lr)
    }
    fn num_param_groups(&self) -> usize {
        self.inner.num_param_groups()
    }
    fn momentum(&self) -> f64 {
        self.inner.momentum()
    }
    fn set_momentum(&mut self, momentum: f64) -> Result<()> {
        self.inner.set_momentum(momentum)
    }
    fn group_lrs(&self) -> Vec<f64> {
        self.inner.group_lrs()
    }
    fn set_group_lrs(&mut self, lrs: &[f64]) -> Result<()> {
        self.inner.set_group_lrs(lrs)
    }
    fn add_param_group(&mut self, group: ParamGroup<B>) -> Result<()> {
        self.inner.add_group_as("AdamW::add_param_group", group)
    }
    fn state_dict(&self) -> Result<TensorFile> {
        self.inner.save_state_as("AdamW")
    }
    fn load_state_dict(&mut self, state: &TensorFile) -> Result<()> {
        self.inner
            .restore_state_as("AdamW::load_state_dict", "AdamW", state)
    }
}

impl GroupLr for AdamConfig {
    fn lr(&self) -> f64 {
        self.lr
    }
    fn lr_mut(&mut self) -> &mut f64 {
        &mut self.lr
    }
}
